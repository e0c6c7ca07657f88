//! Inside a Nix build: each finding as a setup.sh log line (`LEVEL: caller:
//! message` on `$NIX_LOG_FD`, see [`crate::log`]), then a count of those
//! lines ([`super::shown`]).

use serde::Serialize;

use super::Report;
use crate::audit::finding::Severity;
use crate::log::{Level, Logger, Msg};

/// Logs every finding and failure of `report`, then the totals.
pub fn write<F: Serialize>(log: &Logger, report: &Report<F>) {
    for line in super::shown::lines(&report.findings) {
        let f = &line[0];
        let level = match f.severity {
            Severity::Error => Level::Error,
            Severity::Warning => Level::Warn,
            Severity::Info => Level::Info,
        };
        log.log(
            level,
            &Msg::new("")
                .p(&f.path)
                .s(": [")
                .s(f.check.id())
                .s("] ")
                .s(&super::shown::message(line)),
        );
    }
    for failure in &report.failures {
        log.error(&Msg::new("cannot examine ").s(&failure.to_string()));
    }
    let s = &report.shown_summary();
    let level = if s.errors + s.failures > 0 { Level::Error } else { Level::Info };
    log.log(
        level,
        &Msg::new("found ")
            .s(&super::count(s.errors, "error", "errors"))
            .s(", ")
            .s(&super::count(s.warnings, "warning", "warnings"))
            .s(" and ")
            .s(&super::count(s.infos, "info", "infos"))
            .s(" in ")
            .s(&super::count(s.files, "file", "files")),
    );
}
