//! Inside a Nix build: each finding as a setup.sh log line (`LEVEL: caller:
//! message` on `$NIX_LOG_FD`, see [`crate::log`]), then a count of those
//! lines ([`super::shown`]). Inside a build these lines are the text
//! report, so they follow its rules for people: a file's search lists once
//! (`PATH: searched [1]: DIR:DIR...`, each finding saying `(searched [1])`;
//! NCCL's one warning was a line of 529 characters), and no line longer
//! than [`super::wrap::WIDTH`]: a longer message goes on several lines, each
//! with the `LEVEL: caller: ` prefix (so a reader's filter by level still
//! sees all of it, and no line of the log lacks one).

use serde::Serialize;

use super::Report;
use crate::audit::finding::Severity;
use crate::log::{Level, Logger, Msg};

fn level(severity: Severity) -> Level {
    match severity {
        Severity::Error => Level::Error,
        Severity::Warning => Level::Warn,
        Severity::Info => Level::Info,
    }
}

/// Logs every finding and failure of `report`, then the totals.
pub fn write<F: Serialize>(log: &Logger, report: &Report<F>) {
    let lines = super::shown::lines(&report.findings);
    let mut at = 0;
    while at < lines.len() {
        let path = &lines[at][0].path;
        let end = at + lines[at..].iter().take_while(|l| &l[0].path == path).count();
        let messages = lines[at..end].iter().map(|l| super::shown::message(l)).collect();
        let (lists, messages) = super::shown::search_lists(messages);
        for (i, list) in lists.iter().enumerate() {
            // At the level of the worst finding that points at it, so that
            // a list is in the log whenever a line naming it is.
            let tag = format!("(searched [{}])", i + 1);
            let worst = lines[at..end]
                .iter()
                .zip(&messages)
                .filter(|(_, m)| m.contains(&tag))
                .map(|(l, _)| l[0].severity)
                .max()
                .unwrap_or(Severity::Info);
            let msg = Msg::new("").p(path).s(&format!(": searched [{}]: ", i + 1)).s(list);
            put(log, level(worst), &msg);
        }
        for (line, message) in lines[at..end].iter().zip(messages) {
            let f = &line[0];
            let msg = Msg::new("").p(path).s(": [").s(f.check.id()).s("] ").s(&message);
            put(log, level(f.severity), &msg);
        }
        at = end;
    }
    for failure in &report.failures {
        put(log, Level::Error, &Msg::new("cannot examine ").s(&failure.to_string()));
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

/// Logs `msg` at `level`, wrapped so that no line, prefix included, is
/// longer than [`super::wrap::WIDTH`]. A message whose bytes are not UTF-8
/// (a path the kernel holds as such) is logged whole: cutting it could
/// split a character, and the line must name the file on disk.
fn put(log: &Logger, level: Level, msg: &Msg) {
    if !log.enabled(level) {
        return;
    }
    let Ok(text) = std::str::from_utf8(msg.bytes()) else {
        return log.log(level, msg);
    };
    let width = super::wrap::WIDTH.saturating_sub(log.prefix_width(level));
    for piece in super::wrap::wrap_to(text, width) {
        // The pieces are the sanitised message's own text: nothing to escape.
        log.log(level, &Msg::new(&piece));
    }
}
