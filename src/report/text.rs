//! Human text: findings grouped per file, a summary line; colour only when
//! asked (a terminal without `NO_COLOR`).

use std::io::{self, Write};

use serde::Serialize;

use super::Report;
use crate::audit::finding::{CheckId, Finding, Severity, Subject};
use crate::output::{sanitize, Controls};

/// Writes findings grouped by file, each with its why and fix, then a summary.
pub fn write<F: Serialize>(out: &mut dyn Write, report: &Report<F>, color: bool) -> io::Result<()> {
    let paint = |sev: Severity| -> (&str, &str) {
        if !color {
            return ("", "");
        }
        match sev {
            Severity::Error => ("\x1b[1;31m", "\x1b[0m"),
            Severity::Warning => ("\x1b[1;33m", "\x1b[0m"),
            Severity::Info => ("\x1b[1;36m", "\x1b[0m"),
        }
    };
    let mut current = None;
    // Why and fix once per check: a tree with 200 findings of one kind is
    // read faster without 200 copies of the same two lines.
    let mut explained = std::collections::BTreeSet::new();
    let mut i = 0;
    while i < report.findings.len() {
        let f = &report.findings[i];
        i += 1;
        if current != Some(&f.path) {
            if current.is_some() {
                writeln!(out)?;
            }
            writeln!(out, "{}", sanitize(&f.path.to_string_lossy(), Controls::Replace))?;
            current = Some(&f.path);
        }
        let (on, off) = paint(f.severity);
        // One line for all of a file's unrequested architectures, in
        // numeric order (a wheel built for 13 of them would otherwise get
        // 13 lines, sm_100 sorted before sm_50).
        if f.check == CheckId::UnrequestedArch {
            let mut archs = vec![f];
            while let Some(g) = report.findings.get(i) {
                if g.path != f.path || g.check != f.check {
                    break;
                }
                archs.push(g);
                i += 1;
            }
            if archs.len() > 1 {
                writeln!(
                    out,
                    "  {on}{}{off} [{}] not requested: {}",
                    f.severity,
                    f.check,
                    sanitize(&unrequested_list(&archs), Controls::Replace)
                )?;
                if explained.insert(f.check) {
                    writeln!(out, "      why: {}", f.check.why())?;
                    writeln!(out, "      fix: {}", f.check.fix())?;
                }
                continue;
            }
        }
        writeln!(
            out,
            "  {on}{}{off} [{}] {}",
            f.severity,
            f.check,
            sanitize(&f.message, Controls::Replace)
        )?;
        if explained.insert(f.check) {
            writeln!(out, "      why: {}", f.check.why())?;
            writeln!(out, "      fix: {}", f.check.fix())?;
        }
    }
    for failure in &report.failures {
        let (on, off) = paint(Severity::Error);
        writeln!(out, "{on}failed{off}: {}", sanitize(&failure.to_string(), Controls::Replace))?;
    }
    let s = &report.summary;
    if !report.findings.is_empty() || !report.failures.is_empty() {
        writeln!(out)?;
    }
    write!(out, "{}", super::github::summary_line(s))?;
    if s.failures > 0 {
        write!(out, ", {} could not be read", super::count(s.failures, "file", "files"))?;
    }
    if s.baselined > 0 {
        write!(out, " ({} known findings hidden by the baseline)", s.baselined)?;
    }
    writeln!(out)
}

/// `SASS sm_50 sm_52 sm_100; PTX compute_120`: the architectures of a file's
/// unrequested-arch findings, SASS then PTX, each in numeric order.
fn unrequested_list(findings: &[&Finding]) -> String {
    let key = |name: &str| {
        let digits: String = name.chars().skip_while(|c| !c.is_ascii_digit()).collect();
        let n: u32 =
            digits.trim_end_matches(|c: char| c.is_ascii_alphabetic()).parse().unwrap_or(0);
        (n, name.to_string())
    };
    let mut sass = Vec::new();
    let mut ptx = Vec::new();
    for f in findings {
        if let Subject::Arch(name) = &f.subject {
            if name.starts_with("compute_") {
                ptx.push(key(name));
            } else {
                sass.push(key(name));
            }
        }
    }
    sass.sort();
    ptx.sort();
    let join =
        |v: &[(u32, String)]| v.iter().map(|(_, n)| n.as_str()).collect::<Vec<_>>().join(" ");
    let mut parts = Vec::new();
    if !sass.is_empty() {
        parts.push(format!("SASS {}", join(&sass)));
    }
    if !ptx.is_empty() {
        parts.push(format!("PTX {}", join(&ptx)));
    }
    parts.join("; ")
}
