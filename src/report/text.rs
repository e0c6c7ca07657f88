//! Human text: findings grouped per file, a summary line; colour only when
//! asked (a terminal without `NO_COLOR`).

use std::io::{self, Write};

use serde::Serialize;

use super::Report;
use crate::audit::finding::Severity;
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
    for line in super::shown::lines(&report.findings) {
        let f = &line[0];
        if current != Some(&f.path) {
            if current.is_some() {
                writeln!(out)?;
            }
            writeln!(out, "{}", sanitize(&f.path.to_string_lossy(), Controls::Replace))?;
            current = Some(&f.path);
        }
        let (on, off) = paint(f.severity);
        writeln!(
            out,
            "  {on}{}{off} [{}] {}",
            f.severity,
            f.check,
            sanitize(&super::shown::message(line), Controls::Replace)
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
    let s = &report.shown_summary();
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
