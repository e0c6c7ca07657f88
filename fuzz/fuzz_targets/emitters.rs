//! Fuzz target: the report emitters (text, JSON, SARIF, GitHub annotations,
//! and no-broken-symlinks' JSON) on arbitrary names, messages and failures.
//! Whatever the bytes, every emitter returns `Ok`, JSON and SARIF parse, the
//! annotations keep to the workflow-command syntax and GitHub's cap, and text
//! carries no raw control character.
#![no_main]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use libfuzzer_sys::fuzz_target;
use nix_cuda_hooks::audit::failure::{Failure, Reason};
use nix_cuda_hooks::audit::finding::{CheckId, Finding, Subject};
use nix_cuda_hooks::report::{self, github, sarif, Report};
use nix_cuda_hooks::symlinks::{LinkRecord, Verdict};

/// Per-file facts as the emitters see them: only a path.
#[derive(serde::Serialize)]
struct Facts {
    #[serde(serialize_with = "nix_cuda_hooks::audit::finding::ser_lossy_path")]
    path: PathBuf,
}

fuzz_target!(|data: &[u8]| {
    // Records separated by NUL (the one byte no name can hold): the first
    // byte of each picks what it becomes, the rest is the name or message.
    let mut files = Vec::new();
    let mut findings = Vec::new();
    let mut failures = Vec::new();
    let mut links = Vec::new();
    for rec in data.split(|b| *b == 0) {
        let Some((&kind, rest)) = rec.split_first() else { continue };
        let path = PathBuf::from(OsStr::from_bytes(rest));
        match kind % 4 {
            0 => files.push(Facts { path }),
            1 => {
                let check = CheckId::ALL[usize::from(kind / 4) % CheckId::ALL.len()];
                let message = String::from_utf8_lossy(rest).into_owned();
                findings.push(
                    Finding::new(check, path, message)
                        .about(Subject::Entry(String::from_utf8_lossy(rest).into_owned())),
                );
            }
            2 => failures.push(Failure {
                path,
                reason: Reason::Unreadable(String::from_utf8_lossy(rest).into_owned()),
            }),
            _ => links.push(LinkRecord {
                path: path.clone(),
                target: Some(path.into_os_string()),
                resolved: None,
                verdict: Verdict::Dangling,
                extra: Vec::new(),
            }),
        }
    }
    let total = findings.len() + failures.len();
    let report = Report::new(files, findings, failures, 0);

    let mut out = Vec::new();
    report::json(&mut out, &report).expect("JSON report");
    let v: serde_json::Value = serde_json::from_slice(&out).expect("JSON parses");
    assert_eq!(v["findings"].as_array().map(Vec::len), Some(report.findings.len()));

    out.clear();
    sarif::write(&mut out, &report).expect("SARIF report");
    let v: serde_json::Value = serde_json::from_slice(&out).expect("SARIF parses");
    let results = v["runs"][0]["results"].as_array().expect("results");
    assert_eq!(results.len(), report.findings.len());
    for r in results {
        let uri =
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].as_str().unwrap();
        assert!(uri.bytes().all(|b| b.is_ascii_graphic() && b != b'#' && b != b'?'), "{uri}");
    }

    out.clear();
    github::write(&mut out, &report).expect("annotations");
    let text = String::from_utf8(out.clone()).expect("annotations are UTF-8");
    let mut per_level = [0usize; 3];
    let mut hidden = 0usize;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(text.matches('\n').count(), lines.len(), "one record per line");
    for line in &lines[..lines.len() - 1] {
        let rest = line.strip_prefix("::").expect("a workflow command");
        let (head, message) = rest.split_once("::").expect("command::message");
        assert!(!message.contains('\r'));
        let (cmd, props) = head.split_once(' ').unwrap_or((head, ""));
        let level = ["error", "warning", "notice"].iter().position(|c| *c == cmd).expect("level");
        per_level[level] += 1;
        for p in props.split(',') {
            let (_, value) = p.split_once('=').expect("key=value");
            assert!(!value.contains(':') && !value.contains(','), "{line}");
        }
        if let Some(n) = message.strip_suffix(" more findings not annotated (GitHub shows 10 per level); see the JSON or SARIF report") {
            hidden = n.parse().expect("a count");
        }
    }
    assert!(per_level.iter().all(|n| *n <= github::LIMIT_PER_LEVEL), "{per_level:?}");
    assert_eq!(per_level.iter().sum::<usize>() - usize::from(hidden > 0) + hidden, total);

    out.clear();
    report::text::write(&mut out, &report, false).expect("text report");
    let text = String::from_utf8(out).expect("text is UTF-8");
    assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "raw control character");

    let json = serde_json::to_vec(&links).expect("no-broken-symlinks JSON");
    let _: serde_json::Value = serde_json::from_slice(&json).expect("parses");
});
