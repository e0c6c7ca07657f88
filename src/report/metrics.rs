//! `--format hydra-metrics`: the numbers Hydra charts over time, one
//! `NAME VALUE [UNIT]` line each, as Hydra reads `nix-support/hydra-metrics`
//! (a name of `[a-zA-Z0-9._-]`, a number, a unit of `[a-zA-Z0-9._%-]`; a
//! line that does not fit is dropped there, so every line here fits). The
//! names are stable (docs/cuda-elf-inspect.md, "Hydra metrics"): a chart
//! keeps its history only while its name stays. Every check and severity is
//! written, zero included, so a chart has a point for every build.

use std::collections::BTreeMap;
use std::io::{self, Write};

use super::matrix::{self, Cell};
use super::Report;
use crate::audit::finding::{CheckId, Severity};
use crate::audit::FileFacts;

/// The prefix of every metric name.
pub const PREFIX: &str = "cuda-elf-inspect";

/// One metric: a name, a whole number, and a unit (`""`: none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metric {
    /// `[a-zA-Z0-9._-]+`.
    pub name: String,
    /// The value.
    pub value: u64,
    /// `B` for bytes, `""` for counts.
    pub unit: &'static str,
}

const SEVERITIES: [Severity; 3] = [Severity::Error, Severity::Warning, Severity::Info];

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "info",
    }
}

/// Replaces what Hydra's name rule does not allow (a capability or an
/// architecture never has any; this keeps every line one Hydra accepts).
fn name_part(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .collect()
}

/// The metrics of a report, in a stable order.
pub fn metrics(report: &Report<FileFacts>) -> Vec<Metric> {
    let mut out = Vec::new();
    let mut push = |name: String, value: usize, unit: &'static str| {
        out.push(Metric { name: format!("{PREFIX}.{name}"), value: value as u64, unit });
    };
    let s = &report.summary;
    push("files".into(), s.files, "");
    push("failures".into(), s.failures, "");
    push("baselined".into(), s.baselined, "");
    for sev in SEVERITIES {
        let n = report.findings.iter().filter(|f| f.severity == sev).count();
        push(format!("findings.{}", severity_name(sev)), n, "");
    }
    for check in CheckId::ALL {
        for sev in SEVERITIES {
            let n =
                report.findings.iter().filter(|f| f.check == *check && f.severity == sev).count();
            push(format!("findings.{}.{}", check.id(), severity_name(sev)), n, "");
        }
    }
    let m = matrix::build(&report.files);
    push("files.device-code".into(), m.groups.iter().map(|g| g.rows.len()).sum(), "");
    for (i, column) in m.columns.iter().enumerate().filter(|(_, c)| c.requested) {
        let rows = || m.groups.iter().flat_map(|g| &g.rows);
        let count = |keep: &dyn Fn(Cell) -> bool| rows().filter(|r| keep(r.cells[i].cell)).count();
        // Files with kernels only: a file of link stubs (cuDNN's
        // libcudnn_ext) has nothing to run anywhere and lacks nothing, as
        // no-code-for-capability judges it.
        let lacking = rows()
            .filter(|r| r.file.device.as_ref().is_some_and(|d| d.has_code()))
            .filter(|r| matches!(r.cells[i].cell, Cell::LinkStubs | Cell::Nothing))
            .count();
        let cap = name_part(&column.name);
        push(
            format!("capability.{cap}.sass"),
            count(&|c| matches!(c, Cell::Sass | Cell::SassDriverFails)),
            "",
        );
        push(
            format!("capability.{cap}.ptx-only"),
            count(&|c| matches!(c, Cell::Ptx | Cell::PtxDriverFails)),
            "",
        );
        push(format!("capability.{cap}.lacking"), lacking, "");
        push(
            format!("capability.{cap}.driver-fails"),
            count(&|c| matches!(c, Cell::PtxDriverFails | Cell::SassDriverFails)),
            "",
        );
        push(format!("capability.{cap}.not-read"), count(&|c| c == Cell::NotRead), "");
    }
    let mut bytes: BTreeMap<crate::fatbin::Arch, u64> = BTreeMap::new();
    for dev in report.files.iter().filter_map(|f| f.device.as_ref()) {
        for (arch, n) in dev.stored_bytes() {
            *bytes.entry(arch).or_default() += n;
        }
    }
    for (arch, n) in bytes {
        out.push(Metric {
            name: format!("{PREFIX}.device-code.{}", name_part(&arch.name())),
            value: n,
            unit: "B",
        });
    }
    out
}

/// Writes the metrics, one line each.
pub fn write(out: &mut dyn Write, report: &Report<FileFacts>) -> io::Result<()> {
    for m in metrics(report) {
        match m.unit {
            "" => writeln!(out, "{} {}", m.name, m.value)?,
            unit => writeln!(out, "{} {} {unit}", m.name, m.value)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_to_hydras_rule() {
        assert_eq!(name_part("9.0a"), "9.0a");
        assert_eq!(name_part("sm_100f"), "sm_100f");
        assert_eq!(name_part("a b/c"), "a_b_c");
        let report = Report::new(Vec::new(), Vec::new(), Vec::new(), 0);
        let ms = metrics(&report);
        assert!(ms.iter().any(|m| m.name == "cuda-elf-inspect.findings.error" && m.value == 0));
        for m in ms {
            assert!(m.name.bytes().all(|b| b.is_ascii_alphanumeric() || b".-_".contains(&b)));
        }
    }
}
