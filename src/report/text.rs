//! Human text: findings grouped per file, a summary line; colour only when
//! asked (a terminal without `NO_COLOR`). A file's search lists are
//! printed once under its name (`searched [1]: DIR:DIR...`), each finding
//! pointing at its list: CUPTI's 33 findings each repeated the same
//! 180-character list. Every line is at most [`super::wrap::WIDTH`]
//! characters ([`super::wrap`]).

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
        let (lists, messages) = search_lists(messages);
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
    write!(out, "{}", super::github::summary_line(s))?;
    if s.failures > 0 {
        write!(out, ", {} could not be read", super::count(s.failures, "file", "files"))?;
    }
    if s.baselined > 0 {
        write!(out, " ({} known findings hidden by the baseline)", s.baselined)?;
    }
    writeln!(out)
}

/// Writes `line`, wrapped ([`super::wrap`]).
fn put(out: &mut dyn Write, line: &str) -> io::Result<()> {
    for l in super::wrap::wrap(line) {
        writeln!(out, "{l}")?;
    }
    Ok(())
}

/// The `(searched LIST)` lists of a file's messages, each once in order of
/// first use, and the messages with each list replaced by its number
/// (`(searched [1])`). A list without a `/` (`nothing to search`) stays.
fn search_lists(messages: Vec<String>) -> (Vec<String>, Vec<String>) {
    const OPEN: &str = "(searched ";
    let mut lists: Vec<String> = Vec::new();
    let out = messages
        .into_iter()
        .map(|m| {
            let Some(start) = m.find(OPEN) else { return m };
            let body = start + OPEN.len();
            // The closing parenthesis that balances the opening one.
            let mut depth = 1usize;
            let close = m[body..].char_indices().find_map(|(i, c)| {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                (depth == 0).then_some(body + i)
            });
            let Some(close) = close else { return m };
            let list = &m[body..close];
            if !list.contains('/') {
                return m;
            }
            let n = match lists.iter().position(|l| l == list) {
                Some(i) => i + 1,
                None => {
                    lists.push(list.to_string());
                    lists.len()
                }
            };
            format!("{}(searched [{n}]){}", &m[..start], &m[close + 1..])
        })
        .collect();
    (lists, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_lists_are_numbered_once() {
        let (lists, messages) = search_lists(vec![
            "a (searched /x:/y); fix".into(),
            "b (searched /x:/y)".into(),
            "c (searched nothing to search)".into(),
            "d (searched /z (old))".into(),
        ]);
        assert_eq!(lists, ["/x:/y", "/z (old)"]);
        assert_eq!(
            messages,
            [
                "a (searched [1]); fix",
                "b (searched [1])",
                "c (searched nothing to search)",
                "d (searched [2])"
            ]
        );
    }
}
