//! `--explain CHECK` (as `rustc --explain` and `ruff rule`): a check's row of
//! the checks table ([`CheckId`]) for a reader who met only its id, in a CI
//! annotation or a JSON report; `--explain` alone lists the ids. The texts
//! are the table's own: nothing here spells a check's why or fix.

use std::io::{self, Write};

use crate::audit::finding::CheckId;

/// Why `--explain` cannot answer.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// No check has that id.
    #[error("unknown check '{id}'{}; `--explain` alone lists the checks", suggestion(.nearest))]
    Unknown {
        /// What was asked.
        id: String,
        /// The closest id, when one is close.
        nearest: Option<&'static str>,
    },
    /// An empty id (`--explain ''`), which is no check.
    #[error("--explain was given an empty check id; `--explain` alone lists the checks")]
    Empty,
    /// stdout refused the text (a closed pipe ends the program as
    /// `cli::run` says).
    #[error("writing the check's row")]
    Write(#[source] io::Error),
}

fn suggestion(nearest: &Option<&'static str>) -> String {
    nearest.map_or_else(String::new, |n| format!(" (did you mean '{n}'?)"))
}

/// Every check on one line, in report order: id, severity, why.
pub fn list(out: &mut dyn Write) -> io::Result<()> {
    let width = CheckId::ALL.iter().map(|c| c.id().len()).max().unwrap_or(0);
    for c in CheckId::ALL {
        writeln!(out, "{:width$}  {:7}  {}", c.id(), c.severity().to_string(), c.why())?;
    }
    Ok(())
}

/// One check's row: id, severity, subject, why, fix, and how a baseline
/// remembers its findings.
pub fn explain(out: &mut dyn Write, id: &str) -> Result<(), ExplainError> {
    // Ids are lower case; one typed in capitals (or copied from a heading)
    // is still that check.
    let asked = id.trim().to_ascii_lowercase();
    if asked.is_empty() {
        return Err(ExplainError::Empty);
    }
    let Some(c) = CheckId::from_id(&asked) else {
        return Err(ExplainError::Unknown { id: id.to_string(), nearest: nearest(&asked) });
    };
    let remembered = match c.subject_kind() {
        "" => "check and location".to_string(),
        kind => format!("check, location and {kind} (JSON `details.{kind}`)"),
    };
    let text = format!(
        "{id} ({severity})\n  why: {why}\n  fix: {fix}\n  baseline: a finding is remembered by its {remembered}, never its message: record today's with `--write-baseline known.json`, then `--baseline known.json` fails only on new ones\n",
        id = c.id(),
        severity = c.severity(),
        why = c.why(),
        fix = c.fix(),
    );
    out.write_all(text.as_bytes()).map_err(ExplainError::Write)
}

/// The check id closest to `id` by edit distance, if within a third of
/// its length (typos, a plural, a missing dash).
pub fn nearest(id: &str) -> Option<&'static str> {
    CheckId::ALL
        .iter()
        .map(|c| (distance(id, c.id()), c.id()))
        .min()
        .filter(|(d, name)| *d <= name.len().div_ceil(3))
        .map(|(_, name)| name)
}

/// Levenshtein distance over characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_ids_forgive_typos_but_not_nonsense() {
        assert_eq!(nearest("unrequested-archs"), Some("unrequested-arch"));
        assert_eq!(nearest("missing-driver-rpath"), Some("missing-driver-runpath"));
        assert_eq!(nearest("cudart_static"), Some("cudart-static"));
        assert_eq!(nearest("frobnicate"), None);
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn every_row_explains_itself_from_the_table() {
        for c in CheckId::ALL {
            let mut out = Vec::new();
            explain(&mut out, c.id()).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert!(text.starts_with(&format!("{} ({})\n", c.id(), c.severity())), "{text}");
            assert!(text.contains(c.why()) && text.contains(c.fix()), "{text}");
        }
        let mut out = Vec::new();
        list(&mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap().lines().count(), CheckId::ALL.len());
    }
}
