//! GitHub Actions workflow commands (`::error file=...::message`).
//!
//! GitHub shows at most 10 error and 10 warning annotations per step (and
//! notices likewise); more are dropped silently. We print the first 10 of
//! each level and then one notice saying how many were left out, so nothing
//! disappears without a word.

use std::io::{self, Write};

use serde::Serialize;

use super::Report;
use crate::finding::Severity;

/// Annotations GitHub displays per level and step.
pub const LIMIT_PER_LEVEL: usize = 10;

/// Escapes a message (`%`, CR, LF) as the workflow-command syntax requires.
fn escape_data(s: &str) -> String {
    s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

/// Escapes a property value (also `:` and `,`).
fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// Writes one annotation per finding (within GitHub's limits), then failures.
pub fn write<F: Serialize>(out: &mut dyn Write, report: &Report<F>) -> io::Result<()> {
    let mut shown = [0usize; 3];
    let mut hidden = 0usize;
    for f in &report.findings {
        let (cmd, slot) = match f.severity {
            Severity::Error => ("error", 0),
            Severity::Warning => ("warning", 1),
            Severity::Info => ("notice", 2),
        };
        if shown[slot] >= LIMIT_PER_LEVEL {
            hidden += 1;
            continue;
        }
        shown[slot] += 1;
        let fix = format!(" Fix: {}", f.check.fix());
        writeln!(
            out,
            "::{cmd} file={},title={}::{}",
            escape_property(&f.path.to_string_lossy()),
            escape_property(f.check.id()),
            escape_data(&format!("{}{fix}", f.message))
        )?;
    }
    for failure in &report.failures {
        writeln!(out, "::error title=cuda-elf-inspect::{}", escape_data(failure))?;
    }
    if hidden > 0 {
        writeln!(
            out,
            "::notice title=cuda-elf-inspect::{hidden} more findings not annotated (GitHub shows {LIMIT_PER_LEVEL} per level); see the JSON or SARIF report"
        )?;
    }
    let s = &report.summary;
    writeln!(
        out,
        "{} files: {} errors, {} warnings, {} infos",
        s.files, s.errors, s.warnings, s.infos
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_follows_the_workflow_command_rules() {
        assert_eq!(escape_data("50%\nnext"), "50%25%0Anext");
        assert_eq!(escape_property("a:b,c"), "a%3Ab%2Cc");
    }
}
