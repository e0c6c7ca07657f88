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

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Serialize;

use crate::buildenv::Output;
use crate::elf::classify::{self, Skip};
use crate::elf::machine::Target;
use crate::elf::patch::{self, Piece, Strategy};
use crate::elf::runpath::{self, Plan, Tag};
use crate::elf::{Elf, ElfError, MAGIC};
use crate::error::PathError;
use crate::fs::atomic::{self, Journal, Recovery, Replacement, SideFile};
use crate::fs::walk;

pub mod emit;

/// What the run should do.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which driver entry each file gets.
    pub driver: Driver,
    /// `--cuda-compat DIR`: this folder first, the driver entry second.
    pub compat_entry: Option<Vec<u8>>,
    /// Replace `*-cuda*/lib/stubs` entries (removeStubsFromRunpath).
    pub replace_stubs: bool,
    /// Write DT_RPATH instead of DT_RUNPATH.
    pub force_rpath: bool,
    /// Report only, write nothing.
    pub check: bool,
    /// ELF files we cannot patch safely are warnings, not errors.
    pub skip_unsupported: bool,
    /// `fsync` each new file before the rename (in place: before and after
    /// the header switch).
    pub sync: bool,
    /// Patch writable files in place (append, verify, then one header
    /// write) instead of writing a temporary copy and renaming it.
    pub in_place: bool,
}

impl Config {
    /// Upstream's behaviour for `driver`: add it as DT_RUNPATH, keep stubs
    /// entries, replace files (no fsync), errors are errors.
    pub fn new(driver: Driver) -> Self {
        Config {
            driver,
            compat_entry: None,
            replace_stubs: false,
            force_rpath: false,
            check: false,
            skip_unsupported: false,
            sync: false,
            in_place: false,
        }
    }

    /// The planner's options for a file for this machine (`e_machine`).
    pub fn plan_options(&self, machine: u16) -> (runpath::Options, DriverRule) {
        let (entry, rule) = self.driver.entry_for(machine);
        let opts = runpath::Options {
            driver_entry: entry,
            compat_entry: self.compat_entry.clone(),
            replace_stubs: self.replace_stubs,
            force_rpath: self.force_rpath,
        };
        (opts, rule)
    }
}

/// Where the driver entry comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Driver {
    /// Nixpkgs' addDriverRunpath (`driverLink = "/run/opengl-driver" +
    /// optionalString hostPlatform.isi686 "-32"`) and NixOS's
    /// `hardware.graphics`, which links a 64-bit system's driver at
    /// `/run/opengl-driver` and the i686 driver for 32-bit programs
    /// (`enable32Bit`) at `/run/opengl-driver-32`: each file gets the entry
    /// of its own machine, whatever machine this program runs on (a cross
    /// build's outputs are for another one). Other 32-bit machines (armv7l)
    /// have their own driver at `/run/opengl-driver`.
    Nixos,
    /// `--driver-link DIR`: `DIR/lib` for every file.
    Entry(Vec<u8>),
}

/// Which rule gave a file its driver entry (`driver_rule` in JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum DriverRule {
    /// `/run/opengl-driver/lib`.
    #[serde(rename = "nixos")]
    Nixos,
    /// An i686 file: `/run/opengl-driver-32/lib`.
    #[serde(rename = "nixos-i686")]
    NixosI686,
    /// `--driver-link`.
    #[serde(rename = "driver-link")]
    DriverLink,
}

/// NixOS's driver link.
pub const NIXOS_DRIVER_LINK: &str = "/run/opengl-driver";
/// NixOS's driver link for i686 programs.
pub const NIXOS_DRIVER_LINK_32: &str = "/run/opengl-driver-32";
/// `e_machine` of i386/i686.
const EM_386: u16 = 3;

impl Driver {
    /// `--driver-link DIR` when given, else NixOS's convention.
    pub fn from_link(link: Option<&Path>) -> Driver {
        match link {
            Some(l) => Driver::Entry(driver_entry(l)),
            None => Driver::Nixos,
        }
    }

    /// The entry for a file for this machine, and the rule that gave it.
    pub fn entry_for(&self, machine: u16) -> (Vec<u8>, DriverRule) {
        match self {
            Driver::Entry(e) => (e.clone(), DriverRule::DriverLink),
            Driver::Nixos if machine == EM_386 => {
                (driver_entry(Path::new(NIXOS_DRIVER_LINK_32)), DriverRule::NixosI686)
            }
            Driver::Nixos => (driver_entry(Path::new(NIXOS_DRIVER_LINK)), DriverRule::Nixos),
        }
    }
}

/// The driver entry for a driver link folder: `<link>/lib`.
pub fn driver_entry(link: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut v = link.as_os_str().as_bytes().to_vec();
    while v.len() > 1 && v.last() == Some(&b'/') {
        v.pop();
    }
    v.extend_from_slice(b"/lib");
    v
}

/// A folder given on the command line as a search-path entry (`--cuda-compat`):
/// as given, without trailing slashes.
pub fn folder_entry(dir: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut v = dir.as_os_str().as_bytes().to_vec();
    while v.len() > 1 && v.last() == Some(&b'/') {
        v.pop();
    }
    v
}

/// Whether a driver link folder can become a RUNPATH entry: absolute (a
/// relative entry is read against the working directory of whoever runs the
/// program), no `:` (the loader splits RUNPATH there), not empty.
pub fn check_driver_link(link: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = link.as_os_str().as_bytes();
    if bytes.is_empty() {
        Err("the driver link is empty; expected an absolute folder such as /run/opengl-driver"
            .into())
    } else if bytes[0] != b'/' {
        Err(format!(
            "{}: the driver link must be an absolute path (a relative RUNPATH entry is read against the working directory at run time)",
            link.display()
        ))
    } else if bytes.contains(&b':') {
        Err(format!(
            "{}: the driver link must not contain ':' (the loader splits RUNPATH at ':')",
            link.display()
        ))
    } else {
        Ok(())
    }
}

/// The path to walk for a file or folder given by hand. A link is followed:
/// to a folder, through a trailing `/` so that reports still name the path
/// as given (`result/lib/x.so`); to a file, to the real file, so that the
/// file is patched and the link stays a link. Without this the walk, which
/// never follows links, would find nothing and say nothing.
pub fn explicit_target(path: &Path) -> Result<PathBuf, PathError> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| PathError::new(path, e))?;
    if !meta.file_type().is_symlink() {
        return Ok(path.to_path_buf());
    }
    let target = std::fs::metadata(path).map_err(|e| PathError::new(path, e))?;
    if target.is_dir() {
        let mut with_slash = path.as_os_str().to_os_string();
        with_slash.push("/");
        Ok(PathBuf::from(with_slash))
    } else {
        std::fs::canonicalize(path).map_err(|e| PathError::new(path, e))
    }
}

/// What happened to one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// The RUNPATH was rewritten.
    Patched,
    /// `--check`: it would be rewritten.
    WouldPatch,
    /// Already has the driver entry: untouched.
    Unchanged,
    /// Not a file we patch: untouched.
    Skipped,
    /// Could not be patched: untouched, reported.
    Error,
}

/// Whether an error is about the file's content or about I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// A malformed or unsupported ELF file (exit 1; a warning with `--skip-unsupported`).
    Elf,
    /// The file could not be read or written (exit 2).
    Io,
}

/// The report for one inode.
#[derive(Clone, Debug, Serialize)]
pub struct FileReport {
    /// The name that was processed.
    #[serde(serialize_with = "ser_path")]
    pub path: PathBuf,
    /// Other hard links to the same file.
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "ser_paths")]
    pub links: Vec<PathBuf>,
    /// What happened.
    pub action: Action,
    /// Why it was skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip: Option<Skip>,
    /// The machine the file is for (`x86_64`, `aarch64`, `ppc64le`, ...,
    /// `e_machine N` for one this project does not name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// Which rule chose the driver entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_rule: Option<DriverRule>,
    /// The driver entry this file gets (or has).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_entry: Option<String>,
    /// The search path before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old: Option<String>,
    /// Its tag before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_tag: Option<Tag>,
    /// The search path written (or to be written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new: Option<String>,
    /// Its tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<Tag>,
    /// How the file was rewritten.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    /// Whether it was patched in place (else replaced through a rename).
    pub in_place: bool,
    /// Error class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// Error text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn ser_path<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}

fn ser_paths<S: serde::Serializer>(p: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(p.iter().map(|p| p.to_string_lossy()))
}

impl FileReport {
    fn new(path: &Path, links: &[PathBuf], action: Action) -> FileReport {
        FileReport {
            path: path.to_path_buf(),
            links: links.to_vec(),
            action,
            skip: None,
            machine: None,
            driver_rule: None,
            driver_entry: None,
            old: None,
            old_tag: None,
            new: None,
            tag: None,
            strategy: None,
            in_place: false,
            error_kind: None,
            error: None,
        }
    }

    fn failed(mut self, kind: ErrorKind, message: String) -> FileReport {
        self.action = Action::Error;
        self.error_kind = Some(kind);
        self.error = Some(message);
        self
    }
}

/// Why processing one file failed.
#[derive(Debug, thiserror::Error)]
enum FileError {
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

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn process_inner(
    path: &Path,
    links: &[PathBuf],
    cfg: &Config,
    report: &mut FileReport,
) -> Result<(), FileError> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    let mut magic = [0u8; 4];
    let n = read_full_at(&file, &mut magic, 0)?;
    if n < 4 || &magic != MAGIC {
        report.skip = Some(Skip::NotElf);
        return Ok(());
    }
    if classify::is_debug_path(path) {
        report.skip = Some(Skip::DebugInfo);
        return Ok(());
    }
    // SAFETY: the map is read-only and private to this function. Another
    // process truncating the file meanwhile could fault (SIGBUS); a build's
    // outputs are owned by the build, and every hook — upstream's patchelf
    // included — assumes nothing else rewrites them concurrently.
    let map = unsafe { memmap2::Mmap::map(&file)? };
    let plan;
    let mut replacement = None;
    let mut in_place = None;
    {
        let target = Target::peek(&map);
        report.machine = target.map(Target::short);
        // A file for another machine than this one is named so in errors; one
        // for a machine we cannot name is patched like any other, and its
        // errors give the number.
        let foreign = |e: ElfError| -> FileError {
            match target {
                Some(t) if !t.is_build_machine() => {
                    ElfError::ForMachine { source: Box::new(e), target: t.describe() }.into()
                }
                _ => e.into(),
            }
        };
        let elf = Elf::parse(&map).map_err(foreign)?;
        if let Some(skip) = classify::classify(&elf).map_err(foreign)? {
            report.skip = Some(skip);
            return Ok(());
        }
        let Some(dynamic) = elf.dynamic().map_err(foreign)? else {
            report.skip = Some(Skip::Static);
            return Ok(());
        };
        let current = patch::current_path(&elf, &dynamic).map_err(foreign)?;
        report.old = current.map(|(v, _)| lossy(v));
        report.old_tag = current.map(|(_, t)| t);
        let (opts, rule) = cfg.plan_options(elf.machine);
        report.driver_rule = Some(rule);
        report.driver_entry = Some(lossy(&opts.driver_entry));
        plan = runpath::plan(current, &opts);
        let (value, tag) = match &plan {
            Plan::Unchanged => {
                report.action = Action::Unchanged;
                return Ok(());
            }
            Plan::TooLong(n) => {
                return Err(ElfError::Unsupported(format!(
                    "the new RUNPATH would be {n} bytes, over the limit of {} bytes",
                    runpath::MAX_RUNPATH
                ))
                .into())
            }
            Plan::Set { value, tag } => (value.as_slice(), *tag),
        };
        report.new = Some(lossy(value));
        report.tag = Some(tag);
        let rw = patch::rewrite(&elf, &dynamic, value, tag).map_err(foreign)?;
        report.strategy = Some(rw.strategy);
        if cfg.check {
            report.action = Action::WouldPatch;
            return Ok(());
        }
        for (offset, len) in patch::device_code_ranges(&elf) {
            let end = offset.saturating_add(len);
            if rw.edits.iter().any(|e| e.offset < end && offset < e.offset + e.bytes.len() as u64) {
                return Err(ElfError::Verify(format!(
                    "an edit would touch device code at {offset:#x}"
                ))
                .into());
            }
        }
        // In place only when the switch is one write within one page, which
        // no reader or crash can see half done; otherwise replace.
        let one_write = match rw.edits.as_slice() {
            [e] => {
                !e.bytes.is_empty()
                    && e.offset / 4096 == (e.offset + e.bytes.len() as u64 - 1) / 4096
            }
            _ => false,
        };
        if cfg.in_place && one_write {
            match OpenOptions::new().read(true).write(true).open(path) {
                Ok(rwfile) => {
                    // The journal lets a later run undo the appended tail if
                    // we are killed before the switch. A folder we cannot
                    // write to gets none: the tail is then left over (the
                    // file still reads as the old one everywhere).
                    let e = &rw.edits[0];
                    let journal =
                        match Journal::create(path, &meta, map.len() as u64, e.offset, &e.bytes) {
                            Ok(j) => Some(j),
                            Err(err)
                                if matches!(
                                    err.source.raw_os_error(),
                                    Some(libc::EACCES | libc::EPERM | libc::EROFS)
                                ) =>
                            {
                                None
                            }
                            Err(err) => return Err(err.into()),
                        };
                    append_and_verify(&rwfile, &elf, &rw, value, tag, map.len() as u64, cfg.sync)?;
                    in_place = Some((rwfile, rw.edits.clone(), journal));
                }
                // Not writable (a read-only file, a running program): the
                // replacement below needs only the folder to be writable.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::ETXTBSY)
                    ) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if in_place.is_none() {
            replacement = Some(write_replacement(path, &file, &elf, &rw, value, tag)?);
        }
    }
    // The input map and descriptor are dropped before the original is touched.
    drop(map);
    drop(file);
    if let Some((rwfile, edits, journal)) = in_place {
        // The switch: one write of the ELF header (or of one dynamic tag).
        for e in &edits {
            rwfile.write_all_at(&e.bytes, e.offset)?;
        }
        if cfg.sync {
            rwfile.sync_data()?;
        }
        if let Some(j) = journal {
            j.finish();
        }
        report.in_place = true;
    } else if let Some(replacement) = replacement {
        replacement.commit(&meta, links, cfg.sync)?;
    }
    report.action = Action::Patched;
    Ok(())
}

/// In-place mode, first half: appends the new pieces after the end of the
/// file (no old byte changes, so the file is still the old one to every
/// reader), then verifies a private copy-on-write view with the header edits
/// applied. On any failure the file is truncated back to its old length.
fn append_and_verify(
    f: &File,
    elf: &Elf<'_>,
    rw: &patch::Rewrite,
    value: &[u8],
    tag: Tag,
    old_len: u64,
    sync: bool,
) -> Result<(), FileError> {
    let result = (|| -> Result<(), FileError> {
        write_pieces(f, elf, rw)?;
        if f.metadata()?.len() != rw.new_len(old_len) {
            return Err(ElfError::Verify("the file has an unexpected length".into()).into());
        }
        if sync {
            f.sync_data()?;
        }
        // SAFETY: a private (copy-on-write) map: our writes to it never reach
        // the file; the same caveat as the input map applies to others.
        let mut view = unsafe { memmap2::MmapOptions::new().map_copy(f)? };
        for e in &rw.edits {
            let at = e.offset as usize;
            view.get_mut(at..at + e.bytes.len())
                .ok_or_else(|| ElfError::Verify("edit outside the file".into()))?
                .copy_from_slice(&e.bytes);
        }
        patch::verify(elf, &view, value, tag)?;
        Ok(())
    })();
    if result.is_err() {
        let _ = f.set_len(old_len);
    }
    result
}

/// Writes the appended pieces of a rewrite.
fn write_pieces(out: &File, elf: &Elf<'_>, rw: &patch::Rewrite) -> Result<(), FileError> {
    let mut at = rw.append_at;
    for piece in &rw.append {
        let bytes: &[u8] = match piece {
            Piece::Bytes(b) => b,
            Piece::Input { offset, len } => elf.slice(*offset, *len, "appended range")?,
        };
        out.write_all_at(bytes, at)?;
        at += bytes.len() as u64;
    }
    Ok(())
}

/// Replacement mode: the whole new file in a temporary file next to the
/// original, verified, ready to be renamed over it.
fn write_replacement(
    path: &Path,
    file: &File,
    elf: &Elf<'_>,
    rw: &patch::Rewrite,
    value: &[u8],
    tag: Tag,
) -> Result<Replacement, FileError> {
    let repl = Replacement::create(path)?;
    let out = repl.file();
    io::copy(&mut &*file, &mut &*out)?;
    for e in &rw.edits {
        out.write_all_at(&e.bytes, e.offset)?;
    }
    write_pieces(out, elf, rw)?;
    if out.metadata()?.len() != rw.new_len(elf.data.len() as u64) {
        return Err(ElfError::Verify("the written file has an unexpected length".into()).into());
    }
    // SAFETY: the temporary file is ours alone (created O_EXCL, mode 0600).
    let new_map = unsafe { memmap2::Mmap::map(out)? };
    patch::verify(elf, &new_map, value, tag)?;
    drop(new_map);
    for (offset, len) in patch::device_code_ranges(elf) {
        if !same_bytes(file, out, offset, len)? {
            return Err(ElfError::Verify(format!(
                "device code at {offset:#x} differs after the copy"
            ))
            .into());
        }
    }
    Ok(repl)
}

/// Whether two files hold the same bytes in `[offset, offset+len)`, read in
/// bounded chunks (memory stays at 2 MiB whatever the length).
fn same_bytes(a: &File, b: &File, offset: u64, len: u64) -> io::Result<bool> {
    const CHUNK: usize = 1 << 20;
    let (mut x, mut y) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    let mut done = 0u64;
    while done < len {
        let n = CHUNK.min((len - done) as usize);
        let (p, q) = (
            read_full_at(a, &mut x[..n], offset + done)?,
            read_full_at(b, &mut y[..n], offset + done)?,
        );
        if p != n || q != n || x[..n] != y[..n] {
            return Ok(false);
        }
        done += n as u64;
    }
    Ok(true)
}

fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Something the walk met or did before any file was processed. Kept in
/// order, so that the emitter logs them as they happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WalkEvent {
    /// An output that does not exist (also in [`RunReport::missing_outputs`]).
    MissingOutput(PathBuf),
    /// A folder, entry or side file that could not be read, removed or
    /// replayed (also in [`RunReport::walk_errors`]).
    Error(String),
    /// A temporary file left by a killed run, removed.
    RemovedTemp(PathBuf),
    /// A journal left by a killed run, replayed and removed.
    Replayed(PathBuf, Recovery),
}

/// The result of a whole run.
#[derive(Debug, Default, Serialize)]
pub struct RunReport {
    /// Every ELF file (and every file that failed), sorted by path.
    pub files: Vec<FileReport>,
    /// Outputs that do not exist.
    #[serde(serialize_with = "ser_paths")]
    pub missing_outputs: Vec<PathBuf>,
    /// Folders or entries that could not be read.
    pub walk_errors: Vec<String>,
    /// Counts.
    pub summary: Summary,
    /// What the walk met, in order (for the log; the JSON has the two lists
    /// above).
    #[serde(skip)]
    pub events: Vec<WalkEvent>,
}

/// Counts of a run.
#[derive(Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Files rewritten.
    pub patched: usize,
    /// Files `--check` would rewrite.
    pub would_patch: usize,
    /// ELF files that already had the driver entry.
    pub unchanged: usize,
    /// ELF files skipped on purpose.
    pub skipped: usize,
    /// Files that failed.
    pub errors: usize,
}

impl Summary {
    fn count(files: &[FileReport]) -> Summary {
        let mut s = Summary::default();
        for f in files {
            match f.action {
                Action::Patched => s.patched += 1,
                Action::WouldPatch => s.would_patch += 1,
                Action::Unchanged => s.unchanged += 1,
                Action::Skipped => s.skipped += 1,
                Action::Error => s.errors += 1,
            }
        }
        s
    }
}

impl RunReport {
    fn walk_error(&mut self, message: String) {
        self.events.push(WalkEvent::Error(message.clone()));
        self.walk_errors.push(message);
    }
}

/// Runs over `outputs`: walks, processes every inode once (in parallel) and
/// returns what happened, files sorted by path. Writes nothing but the
/// patched files: the caller reports ([`emit`]) and picks the exit status
/// ([`emit::exit_status`]).
pub fn run(outputs: &[Output], cfg: &Config) -> RunReport {
    let mut report = RunReport::default();
    let mut groups: HashMap<(u64, u64), Vec<PathBuf>> = HashMap::new();
    // Files whose metadata vanished after the walk saw them: processing
    // reports the error, naming the file.
    let mut vanished: Vec<Vec<PathBuf>> = Vec::new();
    for output in outputs {
        if std::fs::metadata(&output.path).is_err() {
            report.events.push(WalkEvent::MissingOutput(output.path.clone()));
            report.missing_outputs.push(output.path.clone());
            continue;
        }
        let walked = walk::walk(&output.path, &walk::Options::default(), |path, kind| {
            if !kind.file_type.is_file() {
                return None;
            }
            if atomic::side_file(path).is_some() {
                return Some(None);
            }
            Some(Some(std::fs::symlink_metadata(path).map(|m| (m.dev(), m.ino()))))
        });
        for e in walked.errors {
            report.walk_error(e.to_string());
        }
        let mut journals = Vec::new();
        for (path, key) in walked.items {
            match key {
                // Our own side files: never patched; a killed run's are
                // cleaned up (temporary files) or replayed (journals) first.
                None => match atomic::stale(&path) {
                    Some(SideFile::Temp) if !cfg.check => match std::fs::remove_file(&path) {
                        Ok(()) => report.events.push(WalkEvent::RemovedTemp(path)),
                        Err(e) => report.walk_error(PathError::new(&path, e).to_string()),
                    },
                    Some(SideFile::Journal) if !cfg.check => journals.push(path),
                    _ => {}
                },
                Some(Ok(key)) => groups.entry(key).or_default().push(path),
                Some(Err(_)) => vanished.push(vec![path]),
            }
        }
        for j in journals {
            match atomic::recover(&j) {
                Ok(r) => report.events.push(WalkEvent::Replayed(j, r)),
                Err(e) => report.walk_error(e.to_string()),
            }
        }
    }
    let mut inodes: Vec<Vec<PathBuf>> = groups.into_values().chain(vanished).collect();
    for names in inodes.iter_mut() {
        names.sort();
    }
    inodes.sort();
    let mut files: Vec<FileReport> =
        inodes.par_iter().map(|names| process_file(&names[0], &names[1..], cfg)).collect();
    files.retain(|f| f.skip != Some(Skip::NotElf));
    report.summary = Summary::count(&files);
    report.files = files;
    report
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
        // A temporary file of a process that cannot exist (over pid_max).
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
        assert_eq!(r.events, [WalkEvent::RemovedTemp(stale.clone())]);
        assert!(!stale.exists());
        assert_eq!(r.files[1].action, Action::Patched);
        assert_eq!(r.summary, Summary { patched: 1, errors: 1, ..Summary::default() });

        let r = run(&outputs[..1], &cfg);
        assert!(r.events.is_empty());
        assert_eq!(r.files[1].action, Action::Unchanged);
        assert_eq!(r.summary, Summary { unchanged: 1, errors: 1, ..Summary::default() });
    }
}
