//! What a run of [`super::run`] reports, as upstream's hooks report it, and
//! the exit status it earns.
//!
//! Three streams, in one pass over the walk's events and then the files (in
//! path order, so a build log is the same from run to run):
//! - setup.sh-style log lines through the two [`Logger`]s (`autoFixElfFiles`
//!   for what autoFixElfFiles itself says, `addDriverRunpath` for the rest);
//! - upstream's unconditional `autoFixElfFiles: using addDriverRunpath to fix`
//!   line per patched file, on stderr;
//! - in text format, upstream's plain skip lines and `--check`'s
//!   `would patch` lines, on stdout.

use std::io::{self, Write};

use super::{Action, Config, DlopenReport, ErrorKind, FileReport, RunReport, WalkEvent};
use crate::elf::classify::Skip;
use crate::fs::side::Recovery;
use crate::log::{Level, Logger, Msg};

/// Where the report goes.
pub struct Sinks<'a> {
    /// autoFixElfFiles' log.
    pub fix_log: &'a Logger,
    /// addDriverRunpath's log.
    pub add_log: &'a Logger,
    /// removeStubsFromRunpath's log (`--remove-stubs`).
    pub stubs_log: &'a Logger,
    /// Text format: upstream's stdout lines are written.
    pub text: bool,
    /// Standard output.
    pub stdout: &'a mut dyn Write,
    /// Standard error (upstream's per-file line; failures to write it are
    /// ignored, as a shell `echo >&2` would be).
    pub stderr: &'a mut dyn Write,
}

/// Writes the report of `report` (see the module documentation).
pub fn emit(report: &RunReport, cfg: &Config, out: &mut Sinks<'_>) -> io::Result<()> {
    let (fix_log, add_log) = (out.fix_log, out.add_log);
    emit_events(report, fix_log, add_log);
    for f in &report.files {
        emit_file(f, cfg, out)?;
    }
    Ok(())
}

/// The walk's events, in order.
fn emit_events(report: &RunReport, fix_log: &Logger, add_log: &Logger) {
    for event in &report.events {
        match event {
            WalkEvent::MissingOutput(p) => {
                fix_log.error(&Msg::new("output ").p(p).s(" does not exist"))
            }
            WalkEvent::Error(e) => add_log.error(&Msg::new("").s(e)),
            WalkEvent::Replayed(p, Recovery::RemovedTemp) => add_log
                .info(&Msg::new("removed the temporary file of ").p(p).s(", left by a killed run")),
            WalkEvent::Replayed(p, r) => {
                add_log.info(&Msg::new("replayed ").p(p).s(&format!(": {r:?}")))
            }
            WalkEvent::LeftAlone(p, why) => {
                add_log.warn(&Msg::new("").p(p).s(": left alone: ").s(why))
            }
        }
    }
}

/// removeStubsFromRunpath's lines for one file: upstream's `NIX_DEBUG` 6
/// line per entry, word for word, and a warning per stubs folder its
/// patterns miss (upstream keeps those silently).
fn stubs_lines(f: &FileReport, log: &Logger) {
    let driver = f.driver_entry.as_deref().unwrap_or("");
    for step in &f.stubs {
        let msg = match step.action {
            "replace" => Msg::new("replacing ")
                .p(&f.path)
                .s(" runpath entry: ")
                .s(&step.entry)
                .s(" -> ")
                .s(driver),
            verb => Msg::new(if verb == "drop" { "dropping " } else { "keeping " })
                .p(&f.path)
                .s(" runpath entry: ")
                .s(&step.entry),
        };
        log.debug(&msg);
    }
    for kept in &f.stubs_kept {
        log.warn(
            &Msg::new("")
                .p(&f.path)
                .s(": keeps the stubs folder ")
                .s(kept)
                .s(" (it matches neither *-cuda*/stubs nor *-cuda*-stubs/lib*): \
             the loader may take a stub library from it instead of the driver's"),
        );
    }
}

/// One file's lines.
fn emit_file(f: &FileReport, cfg: &Config, out: &mut Sinks<'_>) -> io::Result<()> {
    let (fix_log, add_log) = (out.fix_log, out.add_log);
    stubs_lines(f, out.stubs_log);
    match f.action {
        Action::Patched => {
            // Upstream's unconditional line, on stderr.
            let line = Msg::new("autoFixElfFiles: using addDriverRunpath to fix ").p(&f.path);
            let _ = out.stderr.write_all(&line.line());
            if f.outside_links > 0 {
                add_log.warn(&Msg::new("").p(&f.path).s(&format!(
                    ": {} hard link(s) outside the tree keep the unpatched file (only names in the tree are patched)",
                    f.outside_links
                )));
            }
            dlopen_lines(f, "added", out)?;
        }
        Action::WouldPatch => {
            if out.text {
                let line = Msg::new("would patch ")
                    .p(&f.path)
                    .s(": ")
                    .s(f.old.as_deref().unwrap_or("(none)"))
                    .s(" -> ")
                    .s(f.new.as_deref().unwrap_or(""));
                out.stdout.write_all(&line.line())?;
            }
            dlopen_lines(f, "would add", out)?;
        }
        Action::Unchanged => {
            add_log.info(
                &Msg::new("")
                    .p(&f.path)
                    .s(" already has ")
                    .s(f.driver_entry.as_deref().unwrap_or("the driver entry"))
                    .s(if cfg.compat_entry.is_some() {
                        " after the compat folder at the front of its search path; left untouched"
                    } else {
                        " in its search path; left untouched"
                    }),
            );
            dlopen_lines(f, "", out)?;
        }
        Action::Skipped => {
            let skip = f.skip.unwrap_or(Skip::Static);
            if skip.upstream_skips() && out.text && fix_log.asked_for(Level::Warn) {
                let line =
                    Msg::new("autoFixElfFiles: skipping a statically-linked ELF file ").p(&f.path);
                out.stdout.write_all(&line.line())?;
            }
            fix_log.info(&Msg::new("skipping ").p(&f.path).s(": ").s(skip.describe()));
        }
        Action::Error => {
            let msg = Msg::new("").p(&f.path).s(": ").s(f.error.as_deref().unwrap_or("error"));
            if cfg.skip_unsupported && f.error_kind == Some(ErrorKind::Elf) {
                add_log.warn(&msg.s(" (skipped: --skip-unsupported)"));
            } else {
                add_log.error(&msg);
            }
        }
    }
    Ok(())
}

/// `--dlopen-search`: one line per folder a file got (or would get), with
/// the names it provides: on stderr beside upstream's per-file line (so a
/// build log says why the RUNPATH grew), on stdout for `--check` in text.
/// Names nothing provides go to the log (INFO): optional plugins are
/// common, and `cuda-elf-inspect`'s `dlopen-unresolved` is the check.
fn dlopen_lines(f: &FileReport, verb: &str, out: &mut Sinks<'_>) -> io::Result<()> {
    let Some(d) = &f.dlopen else { return Ok(()) };
    let listed = if f.action == Action::Unchanged { &[][..] } else { &d.added[..] };
    for folder in listed {
        let line = Msg::new("autoFixElfFiles: ")
            .p(&f.path)
            .s(&format!(": {verb} "))
            .s(&folder.folder)
            .s(" for dlopen of ")
            .s(&DlopenReport::names(folder))
            .line();
        if f.action == Action::WouldPatch {
            if out.text {
                out.stdout.write_all(&line)?;
            }
        } else {
            let _ = out.stderr.write_all(&line);
        }
    }
    if !d.not_found.is_empty() {
        out.add_log.info(
            &Msg::new("")
                .p(&f.path)
                .s(": no --dlopen-search folder provides ")
                .s(&d.not_found.join(", ")),
        );
    }
    Ok(())
}

/// The exit status: 2 when an I/O error happened, 1 when an ELF file could
/// not be patched (unless `--skip-unsupported`), an output is missing, or
/// `--check` found work; else 0.
pub fn exit_status(report: &RunReport, cfg: &Config) -> crate::output::ExitStatus {
    let io = report
        .files
        .iter()
        .any(|f| f.error_kind == Some(ErrorKind::Io) && f.action == Action::Error);
    let findings = report.files.iter().any(|f| match f.action {
        Action::Error => !cfg.skip_unsupported,
        Action::WouldPatch => true,
        _ => false,
    });
    crate::output::ExitStatus::of(
        io || !report.walk_errors.is_empty(),
        findings || !report.missing_outputs.is_empty(),
    )
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::driver_runpath::{Driver, FileReport, Summary};

    fn file(path: &str, action: Action) -> FileReport {
        let mut f = FileReport::new(&PathBuf::from(path), &[], action);
        f.driver_entry = Some("/run/opengl-driver/lib".into());
        f
    }

    fn emitted(report: &RunReport, cfg: &Config, text: bool) -> [Vec<u8>; 4] {
        let (fix, add) =
            (Logger::buffer("autoFixElfFiles", 7), Logger::buffer("addDriverRunpath", 7));
        let stubs = Logger::buffer("removeStubsFromRunpath", 7);
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut sinks = Sinks {
            fix_log: &fix,
            add_log: &add,
            stubs_log: &stubs,
            text,
            stdout: &mut stdout,
            stderr: &mut stderr,
        };
        emit(report, cfg, &mut sinks).unwrap();
        [fix.take_buffer(), add.take_buffer(), stdout, stderr]
    }

    #[test]
    fn each_outcome_is_written_where_upstream_writes_it() {
        let cfg = Config::new(Driver::from_link(None));
        let mut skipped = file("/o/lib/a.a", Action::Skipped);
        skipped.skip = Some(Skip::Static);
        let mut failed = file("/o/lib/bad.so", Action::Error);
        failed.error_kind = Some(ErrorKind::Elf);
        failed.error = Some("truncated".into());
        let report = RunReport {
            files: vec![
                file("/o/bin/p", Action::Patched),
                file("/o/lib/u.so", Action::Unchanged),
                skipped,
                failed,
            ],
            missing_outputs: vec!["/gone".into()],
            events: vec![
                WalkEvent::MissingOutput("/gone".into()),
                WalkEvent::Replayed("/o/.x.~nch1-1.journal".into(), Recovery::RemovedTemp),
            ],
            ..RunReport::default()
        };
        let [fix, add, stdout, stderr] = emitted(&report, &cfg, true);
        assert_eq!(
            String::from_utf8(fix).unwrap(),
            "ERROR: autoFixElfFiles: output /gone does not exist\n\
             INFO: autoFixElfFiles: skipping /o/lib/a.a: statically linked\n"
                .replace("statically linked", Skip::Static.describe())
        );
        assert_eq!(
            String::from_utf8(add).unwrap(),
            "INFO: addDriverRunpath: removed the temporary file of /o/.x.~nch1-1.journal, left by a killed run\n\
             INFO: addDriverRunpath: /o/lib/u.so already has /run/opengl-driver/lib in its \
             search path; left untouched\n\
             ERROR: addDriverRunpath: /o/lib/bad.so: truncated\n"
        );
        assert_eq!(stdout, b"autoFixElfFiles: skipping a statically-linked ELF file /o/lib/a.a\n");
        assert_eq!(stderr, b"autoFixElfFiles: using addDriverRunpath to fix /o/bin/p\n");
        assert_eq!(exit_status(&report, &cfg), crate::output::ExitStatus::Findings);
        // JSON format: nothing on stdout.
        assert!(emitted(&report, &cfg, false)[2].is_empty());
    }

    #[test]
    fn exit_status_follows_the_worst_outcome() {
        let mut cfg = Config::new(Driver::from_link(None));
        let run = |files: Vec<FileReport>| RunReport { files, ..RunReport::default() };
        let mut elf = file("/x", Action::Error);
        elf.error_kind = Some(ErrorKind::Elf);
        let mut io = file("/y", Action::Error);
        io.error_kind = Some(ErrorKind::Io);
        assert_eq!(
            exit_status(&run(vec![file("/p", Action::Patched)]), &cfg),
            crate::output::ExitStatus::Ok
        );
        assert_eq!(
            exit_status(&run(vec![file("/p", Action::WouldPatch)]), &cfg),
            crate::output::ExitStatus::Findings
        );
        assert_eq!(exit_status(&run(vec![elf.clone()]), &cfg), crate::output::ExitStatus::Findings);
        assert_eq!(
            exit_status(&run(vec![elf.clone(), io.clone()]), &cfg),
            crate::output::ExitStatus::Failure
        );
        cfg.skip_unsupported = true;
        assert_eq!(exit_status(&run(vec![elf]), &cfg), crate::output::ExitStatus::Ok);
        assert_eq!(exit_status(&run(vec![io]), &cfg), crate::output::ExitStatus::Failure);
        let walk = RunReport { walk_errors: vec!["e".into()], ..RunReport::default() };
        assert_eq!(exit_status(&walk, &cfg), crate::output::ExitStatus::Failure);
        assert_eq!(Summary::default(), walk.summary);
    }
}
