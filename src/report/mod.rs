//! Emitters for audit results, one file per format behind one entry point.
//!
//! All formats render the same [`Report`]: per-file facts (whatever the
//! audit serialises), findings, and per-file failures (files the tool could
//! not read: reported, counted, never silently dropped).

pub mod buildlog;
pub mod coverage;
pub mod device;
pub mod explain;
pub mod github;
pub mod html;
pub mod matrix;
pub mod metrics;
pub mod sarif;
pub mod shown;
pub mod summary;
pub mod text;
pub mod wrap;

use std::io::{self, Write};

use serde::Serialize;

use crate::audit::failure::Failure;
use crate::audit::finding::{Finding, Severity};
use crate::output::{ExitStatus, Format};

/// When to colour text output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Color {
    /// On a terminal, unless NO_COLOR is set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

impl Color {
    /// Whether to colour, given whether the output is a terminal.
    pub fn enabled(self, terminal: bool) -> bool {
        match self {
            Color::Always => true,
            Color::Never => false,
            Color::Auto => terminal && std::env::var_os("NO_COLOR").is_none(),
        }
    }
}

/// Writes an audit report in `format` (text: the device-code section, then
/// the findings grouped per file).
pub fn write(
    out: &mut dyn Write,
    report: &Report<crate::audit::FileFacts>,
    format: Format,
    color: bool,
) -> io::Result<()> {
    match format {
        Format::Json => json(out, report),
        Format::Sarif => sarif::write(out, report),
        Format::Github => github::write(out, report),
        Format::Html => {
            // The command line the page says made it (lossy: a name may not be UTF-8).
            let args: Vec<String> =
                std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
            html::write(out, report, &args)
        }
        Format::HydraMetrics => metrics::write(out, report),
        Format::Text => {
            device::write(out, report)?;
            text::write(out, report, color)
        }
    }
}

/// The tool name reports carry.
pub const TOOL: &str = "cuda-elf-inspect";

/// What an audit found.
#[derive(Debug, Serialize)]
pub struct Report<F: Serialize> {
    /// Per-file facts, sorted by path.
    pub files: Vec<F>,
    /// Findings, sorted by path then check.
    pub findings: Vec<Finding>,
    /// Files the tool could not examine, with the reason.
    pub failures: Vec<Failure>,
    /// Counts.
    pub summary: Summary,
    /// With reference finding on: the store references of every entry
    /// that is no object file (scripts, `.pc` files, text, links, names),
    /// as Nix records references from any of them; an object file's are
    /// in its facts.
    pub references: Vec<EntryReferences>,
    /// What the audit was asked to check against (the HTML page says it;
    /// not in the JSON, whose coverage entries carry it per file).
    #[serde(skip)]
    pub asked: crate::audit::policy::Asked,
}

/// The references of one entry that is no object file.
#[derive(Debug, Clone, Serialize)]
pub struct EntryReferences {
    /// The path, as the audit shows it.
    pub path: String,
    /// Its references, by offset.
    pub references: Vec<crate::audit::references::Reference>,
}

/// The entries of `all` (path, reference; sorted by path) that are not in
/// `objects`, one per path.
pub fn other_references(
    all: &[(std::path::PathBuf, crate::audit::references::Reference)],
    objects: &std::collections::BTreeSet<&std::path::Path>,
) -> Vec<EntryReferences> {
    let mut out: Vec<EntryReferences> = Vec::new();
    for (path, r) in all.iter().filter(|(p, _)| !objects.contains(p.as_path())) {
        let shown = path.to_string_lossy();
        match out.last_mut() {
            Some(last) if last.path == shown => last.references.push(r.clone()),
            _ => {
                out.push(EntryReferences { path: shown.into_owned(), references: vec![r.clone()] })
            }
        }
    }
    out
}

/// Counts of a report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Files examined.
    pub files: usize,
    /// Error findings.
    pub errors: usize,
    /// Warning findings.
    pub warnings: usize,
    /// Info findings.
    pub infos: usize,
    /// Files that could not be examined.
    pub failures: usize,
    /// Findings hidden because the baseline knows them.
    pub baselined: usize,
}

/// Text order with runs of digits compared as numbers, so that one file's
/// findings about `sm_50`, `sm_90` and `sm_100` come in that order (as the
/// text report lists architectures), not `sm_100` first.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return std::cmp::Ordering::Equal,
            (None, _) => return std::cmp::Ordering::Less,
            (_, None) => return std::cmp::Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let run = |s: &[u8]| s.iter().take_while(|c| c.is_ascii_digit()).count();
                let (na, nb) = (run(a), run(b));
                let (da, db) = (&a[..na], &b[..nb]);
                // Leading zeros aside, a longer run is a larger number.
                fn trim(d: &[u8]) -> &[u8] {
                    &d[d.iter().take_while(|&&c| c == b'0').count()..]
                }
                let (sa, sb) = (trim(da), trim(db));
                let order = sa.len().cmp(&sb.len()).then_with(|| sa.cmp(sb)).then(da.cmp(db));
                if order.is_ne() {
                    return order;
                }
                (a, b) = (&a[na..], &b[nb..]);
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                (a, b) = (&a[1..], &b[1..]);
            }
        }
    }
}

impl<F: Serialize> Report<F> {
    /// Builds a report, sorting findings and counting them.
    pub fn new(
        files: Vec<F>,
        mut findings: Vec<Finding>,
        failures: Vec<Failure>,
        baselined: usize,
    ) -> Self {
        findings.sort_by(|a, b| {
            (&a.path, a.check.id())
                .cmp(&(&b.path, b.check.id()))
                .then_with(|| natural_cmp(&a.message, &b.message))
        });
        let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
        let summary = Summary {
            files: files.len(),
            errors: count(Severity::Error),
            warnings: count(Severity::Warning),
            infos: count(Severity::Info),
            failures: failures.len(),
            baselined,
        };
        Report {
            files,
            findings,
            failures,
            summary,
            references: Vec::new(),
            asked: Default::default(),
        }
    }
}

impl<F: Serialize> Report<F> {
    /// The counts of what the text report, GitHub's annotations and the
    /// build log show ([`shown`]); [`Report::summary`] counts every finding.
    pub fn shown_summary(&self) -> Summary {
        shown::summary(&self.findings, &self.summary)
    }

    /// The audit's exit status: 2 when a file could not be examined, 1 for
    /// error findings (not baselined), else 0.
    pub fn exit_status(&self) -> ExitStatus {
        ExitStatus::of(self.summary.failures > 0, self.summary.errors > 0)
    }
}

/// The JSON document: the report's parts under a header naming the tool.
/// Serialised straight to the writer (no intermediate `Value`, whose
/// construction by `json!` would panic on a serialisation error instead of
/// returning it).
#[derive(Serialize)]
struct JsonDoc<'a, F: Serialize> {
    tool: &'static str,
    version: &'static str,
    files: &'a [F],
    findings: &'a [Finding],
    failures: &'a [Failure],
    summary: &'a Summary,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    references: &'a [EntryReferences],
}

/// Writes the report as one pretty JSON document.
pub fn json<F: Serialize>(out: &mut dyn Write, report: &Report<F>) -> io::Result<()> {
    let doc = JsonDoc {
        tool: TOOL,
        version: env!("CARGO_PKG_VERSION"),
        files: &report.files,
        findings: &report.findings,
        failures: &report.failures,
        summary: &report.summary,
        references: &report.references,
    };
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    out.write_all(b"\n")
}

/// `1 file`, `2 files`: counts in reports read as English.
pub fn count(n: usize, singular: &str, plural: &str) -> String {
    format!("{n} {}", if n == 1 { singular } else { plural })
}

#[cfg(test)]
mod tests {
    use super::natural_cmp;

    #[test]
    fn numbers_in_messages_sort_as_numbers() {
        let mut v =
            ["not requested: sm_100", "not requested: sm_50", "not requested: sm_90a", "a", ""];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            ["", "a", "not requested: sm_50", "not requested: sm_90a", "not requested: sm_100"]
        );
        assert!(natural_cmp("x007", "x7").is_lt() && natural_cmp("x7", "x007").is_gt());
        assert!(natural_cmp("10.0", "9.9").is_gt() && natural_cmp("abc", "abd").is_lt());
    }
}
