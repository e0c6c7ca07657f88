//! What the formats people read show, and count. The text report, GitHub's
//! annotations and the build log show a file's `unrequested-arch` findings
//! as one line (a wheel built for 13 architectures would otherwise get 13
//! lines, sm_100 sorted before sm_50); every other finding is a line of its
//! own. Their counts count those lines. JSON and SARIF list every finding
//! (a baseline remembers each architecture), and the JSON summary counts
//! what the JSON lists ([`super::Summary`]).

use crate::audit::finding::{CheckId, Finding, Severity, Subject};

/// The findings of one shown line: one finding, or a file's
/// `unrequested-arch` findings together.
pub type Line<'a> = &'a [Finding];

/// The lines of `findings` (sorted as [`super::Report::new`] sorts them:
/// a file's findings of one check are next to each other).
pub fn lines(findings: &[Finding]) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < findings.len() {
        let f = &findings[i];
        let mut end = i + 1;
        if f.check == CheckId::UnrequestedArch {
            while findings.get(end).is_some_and(|g| g.path == f.path && g.check == f.check) {
                end += 1;
            }
        }
        out.push(&findings[i..end]);
        i = end;
    }
    out
}

/// The counts of the shown lines: `summary` with errors, warnings and
/// infos counted per line.
pub fn summary(findings: &[Finding], summary: &super::Summary) -> super::Summary {
    let lines = lines(findings);
    let count = |s: Severity| lines.iter().filter(|l| l[0].severity == s).count();
    super::Summary {
        errors: count(Severity::Error),
        warnings: count(Severity::Warning),
        infos: count(Severity::Info),
        ..*summary
    }
}

/// The message of a line: its finding's, or for several unrequested
/// architectures `not requested: SASS sm_50 sm_52; PTX compute_120`.
pub fn message(line: Line<'_>) -> String {
    match line {
        [one] => one.message.clone(),
        many => format!("not requested: {}", unrequested_list(many)),
    }
}

/// `SASS sm_50 sm_52 sm_100; PTX compute_120`: the architectures of a file's
/// unrequested-arch findings, SASS then PTX, each in numeric order.
fn unrequested_list(findings: &[Finding]) -> String {
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

/// The `(searched LIST)` lists of a file's messages, each once in order of
/// first use, and the messages with each list replaced by its number
/// (`(searched [1])`). A list without a `/` (`nothing to search`) stays.
pub fn search_lists(messages: Vec<String>) -> (Vec<String>, Vec<String>) {
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

    fn arch(path: &str, name: &str) -> Finding {
        Finding::new(CheckId::UnrequestedArch, path, "m").about(Subject::Arch(name.into()))
    }

    #[test]
    fn a_files_unrequested_architectures_are_one_line_and_counted_once() {
        let findings = vec![
            Finding::new(CheckId::CudartStatic, "/a", "m"),
            arch("/a", "sm_100"),
            arch("/a", "compute_120"),
            arch("/a", "sm_50"),
            arch("/b", "sm_80"),
        ];
        let lines = lines(&findings);
        assert_eq!(lines.iter().map(|l| l.len()).collect::<Vec<_>>(), [1, 3, 1]);
        assert_eq!(message(lines[1]), "not requested: SASS sm_50 sm_100; PTX compute_120");
        assert_eq!(message(lines[2]), "m");
        let s = summary(&findings, &crate::report::Summary::default());
        assert_eq!((s.errors, s.warnings, s.infos), (0, 0, 3));
    }

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
