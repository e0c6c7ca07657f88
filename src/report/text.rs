//! Human text: findings grouped per file, a summary line; colour only when
//! asked (a terminal without `NO_COLOR`). A file's search lists are
//! printed once under its name (`searched [1]: DIR:DIR...`), each finding
//! pointing at its list: CUPTI's 33 findings each repeated the same
//! 180-character list. Every line is at most [`super::wrap::WIDTH`]
//! characters ([`super::wrap`]).

use std::io::{self, Write};

use serde::Serialize;

use super::wrap::put;
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
    let lines = super::shown::lines(&report.findings);
    let mut at = 0;
    while at < lines.len() {
        let path = &lines[at][0].path;
        let end = at + lines[at..].iter().take_while(|l| &l[0].path == path).count();
        if current.is_some() {
            writeln!(out)?;
        }
        current = Some(path);
        put(out, &sanitize(&path.to_string_lossy(), Controls::Replace))?;
        let messages: Vec<String> =
            lines[at..end].iter().map(|l| super::shown::message(l)).collect();
        let (lists, messages) = super::shown::search_lists(messages);
        for (i, list) in lists.iter().enumerate() {
            put(out, &format!("  searched [{}]: {}", i + 1, sanitize(list, Controls::Replace)))?;
        }
        for (line, message) in lines[at..end].iter().zip(messages) {
            let f = &line[0];
            let (on, off) = paint(f.severity);
            put(
                out,
                &format!(
                    "  {on}{}{off} [{}] {}",
                    f.severity,
                    f.check,
                    sanitize(&message, Controls::Replace)
                ),
            )?;
            if explained.insert(f.check) {
                put(out, &format!("      why: {}", f.check.why()))?;
                put(out, &format!("      fix: {}", f.check.fix()))?;
            }
        }
        at = end;
    }
    for failure in &report.failures {
        let (on, off) = paint(Severity::Error);
        put(
            out,
            &format!("{on}failed{off}: {}", sanitize(&failure.to_string(), Controls::Replace)),
        )?;
    }
    let s = &report.shown_summary();
    if !report.findings.is_empty() || !report.failures.is_empty() {
        writeln!(out)?;
    }
    let mut last = super::github::summary_line(s);
    if s.failures > 0 {
        last += &format!(", {} could not be read", super::count(s.failures, "file", "files"));
    }
    if s.baselined > 0 {
        last += &format!(" ({} known findings hidden by the baseline)", s.baselined);
    }
    put(out, &last)
}
