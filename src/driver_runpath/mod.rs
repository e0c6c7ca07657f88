//! autoAddDriverRunpath (= autoFixElfFiles + addDriverRunpath) as a library:
//! walk the outputs, decide per file, patch in-process, report.
//!
//! Walk: every output, regular files only (a symlink's target is reached as
//! a regular file elsewhere or not at all, as upstream), no executable-bit
//! filter, each inode once: hard links are grouped by `(dev, ino)`, the first
//! name (sorted) is patched and every other name is switched to the new file
//! atomically ([`crate::fs::atomic`]).
//!
//! Files are processed in parallel. The engine writes nothing but the files
//! it patches and decides no exit status: [`run`] returns a [`RunReport`]
//! (per file what was done, per walk event what was met), and [`emit`]
//! writes it as upstream does (log lines, stderr and stdout lines, in path
//! order so that a build log is the same from run to run) and maps it to an
//! exit status.
//!
//! The parts: `classify` (which files are skipped, and why), [`plan`] (the
//! driver entry and the new search path), [`search`] and
//! [`dlopen_folders`] (`--dlopen-search`: the folders a file needs for
//! what it dlopens), `write` (applying the rewrite
//! through [`crate::fs::atomic`]), [`report`] (what happened) and [`emit`]
//! (writing it); this module walks the tree and runs each inode through them.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::buildenv::Output;
use crate::elf::classify::Skip;
use crate::elf::machine::Target;
use crate::elf::ElfError;
use crate::error::PathError;
use crate::fs::atomic;
use crate::fs::mapped;
use crate::fs::side::{self, Process, SideFile};
use crate::fs::walk;

mod classify;
pub mod dlopen_folders;
pub mod emit;
pub mod plan;
mod rebuild;
pub mod report;
pub mod search;
mod write;

pub use dlopen_folders::{AddedFolder, DlopenReport, Served};
pub use plan::{
    check_driver_link, driver_entry, folder_entry, Config, Driver, DriverRule, StubEntry,
    NIXOS_DRIVER_LINK, NIXOS_DRIVER_LINK_32,
};
pub use report::{Action, ErrorKind, FileReport, RunReport, Summary, WalkEvent};

/// Why processing one file failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileError {
    #[error("{0}")]
    Elf(#[from] ElfError),
    #[error("{}", crate::error::describe_io(.0))]
    Io(#[from] io::Error),
    #[error("{}", .0.reason())]
    Path(#[from] PathError),
}

/// Processes one inode: classify, plan, patch (unless checking), verify.
pub fn process_file(path: &Path, links: &[PathBuf], cfg: &Config) -> FileReport {
    let mut report = FileReport::new(path, links, Action::Skipped);
    match process_inner(path, links, cfg, &mut report) {
        Ok(()) => report,
        Err(FileError::Elf(e)) => report.failed(ErrorKind::Elf, e.to_string()),
        Err(FileError::Path(e))
            if e.op == Some(atomic::TEMP_CREATE)
                && matches!(
                    e.source.raw_os_error(),
                    Some(libc::EACCES | libc::EPERM | libc::EROFS)
                ) =>
        {
            // A read-only folder: say what would work instead.
            let hint = if cfg.in_place {
                "the folder is read-only and the file could not be patched in place: make the folder or the file writable"
            } else {
                "the folder is read-only: make it writable, or make the file writable and pass --in-place"
            };
            report.failed(ErrorKind::Io, format!("{} ({hint})", e.reason()))
        }
        Err(e) => report.failed(ErrorKind::Io, e.to_string()),
    }
}

/// Classify, plan, and (unless checking) write and verify, then switch.
fn process_inner(
    path: &Path,
    links: &[PathBuf],
    cfg: &Config,
    report: &mut FileReport,
) -> Result<(), FileError> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if let Some(skip) = classify::skip_before_parse(&file, path)? {
        report.skip = Some(skip);
        return Ok(());
    }
    // A small file is read (one pread), a large one mapped read-only:
    // another process truncating the file meanwhile could then fault
    // (SIGBUS); a build's outputs are owned by the build, and every hook —
    // upstream's patchelf included — assumes nothing else rewrites them
    // concurrently.
    let map = mapped::read_or_map(&file, meta.len())?;
    let pending = {
        let target = Target::peek(&map);
        report.machine = target.map(Target::short);
        let parsed = match classify::parse(&map, target)? {
            Ok(parsed) => parsed,
            Err(skip) => {
                report.skip = Some(skip);
                return Ok(());
            }
        };
        // A file our writer made is planned and rewritten from its original
        // (`rebuild`), so that separate runs give one run's bytes.
        let original = rebuild::candidate(&file, &parsed)?;
        let o = match &original {
            Some(original) => match classify::parse(original.bytes(), parsed.target())? {
                Ok(o) if original.made(&o, &parsed) => Some(o),
                _ => None,
            },
            None => None,
        };
        // The dlopen scan reads whole read-only sections: their pages leave
        // the resident set once read, as in the audit.
        let release = |part: &[u8]| map.release(part);
        let Some(change) = plan::plan_file(&parsed, o.as_ref(), cfg, report, &release)? else {
            return Ok(());
        };
        // Names of this file that the walk did not meet keep the old file
        // in either mode (see `write::prepare`); said in the report.
        report.outside_links = meta.nlink().saturating_sub(1 + links.len() as u64);
        if cfg.check {
            report.action = Action::WouldPatch;
            return Ok(());
        }
        match (&original, &o) {
            (Some(original), Some(o)) => {
                let change = original.change(o, &change)?;
                report.strategy = Some(change.rw.strategy);
                let links = report.outside_links;
                write::prepare(path, &file, &meta, &o.elf, &change, false, links, cfg.sync)?
            }
            _ => write::prepare(
                path,
                &file,
                &meta,
                &parsed.elf,
                &change,
                cfg.in_place,
                report.outside_links,
                cfg.sync,
            )?,
        }
    };
    // The input map and descriptor are dropped before the original is touched.
    drop(map);
    drop(file);
    report.in_place = write::commit(pending, &meta, links, cfg.sync)?;
    report.action = Action::Patched;
    Ok(())
}

/// Runs over `outputs`: walks, processes every inode once (in parallel) and
/// returns what happened, files sorted by path. Writes nothing but the
/// patched files: the caller reports ([`emit`]) and picks the exit status
/// ([`emit::exit_status`]).
pub fn run(outputs: &[Output], cfg: &Config) -> RunReport {
    let mut report = RunReport::default();
    let mut inodes = Inodes::default();
    for output in outputs {
        if std::fs::metadata(&output.path).is_err() {
            report.events.push(WalkEvent::MissingOutput(output.path.clone()));
            report.missing_outputs.push(output.path.clone());
            continue;
        }
        walk_output(&output.path, cfg, &mut report, &mut inodes);
    }
    let mut inodes: Vec<Vec<PathBuf>> =
        inodes.groups.into_values().chain(inodes.vanished).collect();
    for names in inodes.iter_mut() {
        names.sort();
    }
    inodes.sort();
    // In parallel even for small files: a rename or an unlink may wait for
    // the file system's journal, and a second thread overlaps those waits
    // (one thread measured slower on a loaded machine: BENCHMARKS.md, issue 33).
    let mut files: Vec<FileReport> =
        inodes.par_iter().map(|names| process_file(&names[0], &names[1..], cfg)).collect();
    files.retain(|f| f.skip != Some(Skip::NotElf));
    report.summary = Summary::count(&files);
    report.files = files;
    report
}

/// The regular files found so far, by inode.
#[derive(Default)]
struct Inodes {
    /// Names of each `(dev, ino)`.
    groups: HashMap<(u64, u64), Vec<PathBuf>>,
    /// Files whose metadata vanished after the walk saw them: processing
    /// reports the error, naming the file.
    vanished: Vec<Vec<PathBuf>>,
}

/// Walks one output: its regular files into `inodes`; our own side files
/// left by a killed run settled first ([`settle`]), unless checking.
fn walk_output(root: &Path, cfg: &Config, report: &mut RunReport, inodes: &mut Inodes) {
    let walked = walk::walk(root, &walk::Options::default(), |path, kind| {
        if !kind.file_type.is_file() {
            return None;
        }
        if side::side_file(path).is_some() {
            return Some(None);
        }
        Some(Some(std::fs::symlink_metadata(path).map(|m| (m.dev(), m.ino()))))
    });
    for e in walked.errors {
        report.walk_error(e.to_string());
    }
    let mut side_files = Vec::new();
    for (path, key) in walked.items {
        match key {
            // Named like our side files: never patched.
            None => side_files.push(path),
            Some(Ok(key)) => inodes.groups.entry(key).or_default().push(path),
            Some(Err(_)) => inodes.vanished.push(vec![path]),
        }
    }
    if !cfg.check {
        settle(&side_files, report, inodes);
    }
}

/// Files named like our side files ([`side`]): the journals of a killed run
/// of ours replayed (a replacement's journal removes its temporary file),
/// every other one reported and left alone: a temporary file that no
/// journal names may be anybody's, and a journal that fails a check of
/// [`side::recover`] is an error naming it.
fn settle(files: &[PathBuf], report: &mut RunReport, inodes: &Inodes) {
    use std::os::unix::ffi::OsStrExt;
    let stem =
        |p: &Path, suffix: &[u8]| p.as_os_str().as_bytes().strip_suffix(suffix).map(<[u8]>::to_vec);
    let journaled: HashSet<Vec<u8>> = files.iter().filter_map(|p| stem(p, b".journal")).collect();
    let walked = |dev, ino| inodes.groups.contains_key(&(dev, ino));
    for path in files {
        let Some((kind, pid)) = side::side_file(path) else { continue };
        if kind == SideFile::Temp {
            if !stem(path, b".tmp").is_some_and(|s| journaled.contains(&s)) {
                report.left_alone(
                    path,
                    "named like our temporary files, but no journal of ours names it".into(),
                );
            }
            continue;
        }
        match side::process(pid) {
            Process::Us => {}
            Process::Running => {
                report.left_alone(path, format!("process {pid}, which wrote it, is running"))
            }
            Process::Impossible(max) => report.walk_error(format!(
                "{}: left alone: its pid {pid} is no process of this system (pid_max is {max}), so nothing says its run was killed",
                path.display()
            )),
            Process::Gone => match side::recover(path, &walked) {
                Ok(r) => report.events.push(WalkEvent::Replayed(path.clone(), r)),
                Err(e) => report.walk_error(e.to_string()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dynamic ELF program of the build machine: this test binary.
    fn program(to: &Path) {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(std::env::current_exe().unwrap(), to).unwrap();
    }

    #[test]
    fn run_returns_what_it_did_and_writes_only_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        program(&out.join("bin/prog"));
        std::fs::write(out.join("readme"), b"text").unwrap();
        std::fs::write(out.join("bad.so"), b"\x7fELF\x02\x01\x01").unwrap();
        // Named like a temporary file of a process that cannot exist (over
        // pid_max), with no journal: not provably ours, so left alone.
        let stale = out.join(".prog.~nch99999999-0.tmp");
        std::fs::write(&stale, b"").unwrap();
        let gone = dir.path().join("gone");
        let outputs = [
            Output { name: Some("out".into()), path: out.clone() },
            Output { name: Some("dev".into()), path: gone.clone() },
        ];
        let mut cfg = Config::new(Driver::from_link(None));

        cfg.check = true;
        let r = run(&outputs, &cfg);
        assert_eq!(r.events, [WalkEvent::MissingOutput(gone.clone())]);
        assert_eq!(r.missing_outputs, [gone]);
        let names: Vec<_> = r.files.iter().map(|f| (f.path.clone(), f.action)).collect();
        assert_eq!(
            names,
            [(out.join("bad.so"), Action::Error), (out.join("bin/prog"), Action::WouldPatch)]
        );
        assert_eq!(r.files[0].error_kind, Some(ErrorKind::Elf));
        assert_eq!(
            r.files[1].new.as_deref().map(|n| n.contains("/run/opengl-driver/lib")),
            Some(true)
        );
        assert_eq!(r.summary, Summary { would_patch: 1, errors: 1, ..Summary::default() });
        assert!(stale.exists(), "--check removed a side file");

        cfg.check = false;
        let r = run(&outputs[..1], &cfg);
        let why = "named like our temporary files, but no journal of ours names it";
        assert_eq!(r.events, [WalkEvent::LeftAlone(stale.clone(), why.into())]);
        assert!(stale.exists());
        assert_eq!(r.files[1].action, Action::Patched);
        assert_eq!(r.summary, Summary { patched: 1, errors: 1, ..Summary::default() });

        std::fs::remove_file(&stale).unwrap();
        let r = run(&outputs[..1], &cfg);
        assert!(r.events.is_empty());
        assert_eq!(r.files[1].action, Action::Unchanged);
        assert_eq!(r.summary, Summary { unchanged: 1, errors: 1, ..Summary::default() });
    }
}
