//! GitHub Actions workflow commands (`::error file=...::message`).
//!
//! GitHub shows at most 10 error and 10 warning annotations per step (and
//! notices likewise); more are dropped silently. We print the first 10 of
//! each level and then one notice saying how many were left out, so nothing
//! disappears without a word.

use std::io::{self, Write};

use serde::Serialize;

use super::{Report, TOOL};
use crate::audit::finding::Severity;
use crate::output::{sanitize, Controls};

/// Annotations GitHub displays per level and step.
pub const LIMIT_PER_LEVEL: usize = 10;

/// Escapes a message (`%`, CR, LF) as the workflow-command syntax requires,
/// then replaces every other control character (an escape sequence from a
/// soname or a file name would reach the runner's log and a terminal).
fn escape_data(s: &str) -> String {
    let escaped = s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A");
    sanitize(&escaped, Controls::Replace)
}

/// Escapes a property value (also `:` and `,`).
fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// The summary line every text-like emitter ends with:
/// `3 files: 1 error, 0 warnings, 2 infos`.
pub fn summary_line(s: &super::Summary) -> String {
    use super::count;
    format!(
        "{}: {}, {}, {}",
        count(s.files, "file", "files"),
        count(s.errors, "error", "errors"),
        count(s.warnings, "warning", "warnings"),
        count(s.infos, "info", "infos")
    )
}

/// Writes one annotation per finding and per failure within GitHub's limits:
/// failures (files that could not be read) first, as they say the report is
/// incomplete, then findings in report order. When anything is left out, the
/// last notice slot is kept for the line saying how many, so that the
/// count itself is never the one GitHub drops.
pub fn write<F: Serialize>(out: &mut dyn Write, report: &Report<F>) -> io::Result<()> {
    let slot = |sev: Severity| match sev {
        Severity::Error => 0,
        Severity::Warning => 1,
        Severity::Info => 2,
    };
    // One annotation per line the text report shows (a file's unrequested
    // architectures together), so that the counts below count them.
    let lines = super::shown::lines(&report.findings);
    let mut total = [report.failures.len(), 0, 0];
    for line in &lines {
        total[slot(line[0].severity)] += 1;
    }
    let over = |limit: [usize; 3]| -> usize {
        total.iter().zip(limit).map(|(t, l)| t.saturating_sub(l)).sum()
    };
    let mut limit = [LIMIT_PER_LEVEL; 3];
    if over(limit) > 0 {
        limit[2] = LIMIT_PER_LEVEL - 1;
    }
    let hidden = over(limit);
    let mut shown = [0usize; 3];
    for failure in &report.failures {
        if shown[0] < limit[0] {
            shown[0] += 1;
            writeln!(out, "::error title={TOOL}::{}", escape_data(&failure.to_string()))?;
        }
    }
    for line in &lines {
        let f = &line[0];
        let i = slot(f.severity);
        if shown[i] >= limit[i] {
            continue;
        }
        shown[i] += 1;
        let cmd = ["error", "warning", "notice"][i];
        let fix = format!(" Fix: {}", f.check.fix());
        writeln!(
            out,
            "::{cmd} file={},title={}::{}",
            escape_property(&f.path.to_string_lossy()),
            escape_property(f.check.id()),
            escape_data(&format!("{}{fix}", super::shown::message(line)))
        )?;
    }
    if hidden > 0 {
        writeln!(
            out,
            "::notice title={TOOL}::{hidden} more findings not annotated (GitHub shows {LIMIT_PER_LEVEL} per level); see the JSON or SARIF report"
        )?;
    }
    writeln!(out, "{}", summary_line(&report.shown_summary()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_follows_the_workflow_command_rules() {
        assert_eq!(escape_data("50%\nnext"), "50%25%0Anext");
        assert_eq!(escape_data("lib\u{1b}]2;t\u{7}\r.so"), "lib\u{fffd}]2;t\u{fffd}%0D.so");
        assert_eq!(escape_property("a:b,c"), "a%3Ab%2Cc");
    }

    fn report(errors: usize, infos: usize, failures: usize) -> Report<()> {
        let mut findings = Vec::new();
        for i in 0..errors {
            findings.push(crate::audit::finding::Finding::new(
                crate::audit::finding::CheckId::UnresolvedNeeded,
                format!("/e{i}"),
                "m",
            ));
        }
        for i in 0..infos {
            findings.push(crate::audit::finding::Finding::new(
                crate::audit::finding::CheckId::UnrequestedArch,
                format!("/i{i}"),
                "m",
            ));
        }
        let failures = (0..failures)
            .map(|i| {
                crate::audit::failure::Failure::unreadable(format!("/f{i}").as_ref(), "unreadable")
            })
            .collect();
        Report::new(Vec::new(), findings, failures, 0)
    }

    /// Every annotation is either shown or counted in the closing notice,
    /// and no level ever exceeds GitHub's cap (the notice included).
    #[test]
    fn every_finding_and_failure_is_shown_or_counted_within_the_cap() {
        for (errors, infos, failures) in
            [(0, 0, 3), (10, 0, 1), (9, 10, 1), (3, 12, 0), (12, 9, 12)]
        {
            let mut out = Vec::new();
            write(&mut out, &report(errors, infos, failures)).unwrap();
            let text = String::from_utf8(out).unwrap();
            let level = |l: &str| text.lines().filter(|x| x.starts_with(l)).count();
            let (e, n) = (level("::error "), level("::notice "));
            assert!(e <= LIMIT_PER_LEVEL && n <= LIMIT_PER_LEVEL, "{text}");
            let hidden: usize =
                text.lines().find(|l| l.contains("more findings not annotated")).map_or(0, |l| {
                    l.split("::").nth(2).unwrap().split(' ').next().unwrap().parse().unwrap()
                });
            let counted_notice = usize::from(hidden > 0);
            assert_eq!(e + n - counted_notice + hidden, errors + infos + failures, "{text}");
            assert_eq!(e, (errors + failures).min(LIMIT_PER_LEVEL), "{text}");
        }
    }
}
