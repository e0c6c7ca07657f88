//! SARIF 2.1.0, the format code-scanning services read. Rules are the checks
//! present in the results (with their why and fix); each result points at
//! its file. Validated against the official schema in the tests.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::{json, Value};

use super::{Report, TOOL};
use crate::audit::finding::{CheckId, Severity};

fn level(sev: Severity) -> &'static str {
    match sev {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

/// Builds the SARIF log as a JSON value.
pub fn to_value<F: Serialize>(report: &Report<F>) -> Value {
    let mut rule_ids: Vec<CheckId> = report.findings.iter().map(|f| f.check).collect();
    rule_ids.sort_unstable_by_key(|c| c.id());
    rule_ids.dedup();
    let rules: Vec<Value> = rule_ids
        .iter()
        .map(|c| {
            json!({
                "id": c.id(),
                "shortDescription": { "text": c.why() },
                "help": { "text": c.fix() },
                "defaultConfiguration": { "level": level(c.severity()) },
            })
        })
        .collect();
    let results: Vec<Value> = report
        .findings
        .iter()
        .map(|f| {
            let index = rule_ids.iter().position(|id| *id == f.check).unwrap_or(0);
            let mut result = json!({
                "ruleId": f.check,
                "ruleIndex": index,
                "level": level(f.severity),
                "message": { "text": f.message },
                "locations": [{
                    "physicalLocation": { "artifactLocation": { "uri": uri(&f.path.to_string_lossy()) } }
                }],
            });
            if let Some((key, value)) = f.subject.pair() {
                result["properties"] = json!({ key: value });
            }
            result
        })
        .collect();
    let notifications: Vec<Value> = report
        .failures
        .iter()
        .map(|m| json!({ "level": "error", "message": { "text": m } }))
        .collect();
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": TOOL,
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": "https://github.com/nix-cuda-hooks/nix-cuda-hooks",
                "rules": rules,
            }},
            "invocations": [{
                "executionSuccessful": report.failures.is_empty(),
                "toolExecutionNotifications": notifications,
            }],
            "results": results,
        }],
    })
}

/// A path as a URI reference: absolute paths become `file://` URIs, relative
/// ones stay relative (SARIF resolves them against the checkout).
fn uri(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 7);
    if path.starts_with('/') {
        out.push_str("file://");
    }
    for b in path.bytes() {
        match b {
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'/'
            | b'-'
            | b'_'
            | b'.'
            | b'~'
            | b'+'
            | b'@' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Writes the SARIF log.
pub fn write<F: Serialize>(out: &mut dyn Write, report: &Report<F>) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, &to_value(report))?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_become_uris() {
        assert_eq!(uri("/nix/store/a b"), "file:///nix/store/a%20b");
        assert_eq!(uri("result/lib/x.so"), "result/lib/x.so");
    }
}
