//! Our side files: the temporary file and the journal we keep next to a file
//! while we rewrite it, how they are named, and what a later run may do with
//! one that a killed run left behind.
//!
//! A name proves nothing: anyone who can write a folder of a tree can plant
//! `.x.~nch<pid>-0.journal` there, and a pid above `pid_max` is never a live
//! process. So a later run acts on a side file only when every one of these
//! holds, and otherwise reports it and leaves it alone ([`recover`]):
//! - it is a journal, read without following links, owned by the user we run
//!   as (only a process with our rights can have written it);
//! - its process is gone: `0 < pid <= pid_max` and `kill(pid, 0)` is ESRCH
//!   ([`process`]);
//! - it names one plain name of its own folder, the name it is itself named
//!   after, opened relative to that folder without following a link;
//! - that file is a regular file this run walked (its device and inode are
//!   one of the walk's, and the ones the journal recorded).
//!
//! A temporary file is removed only through the journal of the same stem
//! (`.<name>.~nch<pid>-<n>.tmp` beside `.<name>.~nch<pid>-<n>.journal`),
//! which the rewrite writes before it creates the temporary file: a file
//! that merely looks like ours is never deleted.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::error::PathError;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The marker in the names of our temporary files and journals.
const MARK: &[u8] = b".~nch";

/// The largest journal we write (the switch is at most one page, in hex).
const MAX_JOURNAL: u64 = 16 * 1024;

/// The kernel's `PID_MAX_LIMIT` on 64-bit systems: the bound when
/// `/proc/sys/kernel/pid_max` cannot be read.
const PID_MAX_LIMIT: u32 = 4 * 1024 * 1024;

/// `.<name>.~nch`, the name cut at 200 bytes to stay within NAME_MAX.
fn prefix(name: &[u8]) -> Vec<u8> {
    let mut out = b".".to_vec();
    out.extend_from_slice(&name[..name.len().min(200)]);
    out.extend_from_slice(MARK);
    out
}

/// A fresh stem `.<name>.~nch<pid>-<n>` next to `target`: the temporary file
/// and the journal of one rewrite share it.
pub(crate) fn stem(target: &Path) -> Vec<u8> {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut name = prefix(target.file_name().map(|n| n.as_bytes()).unwrap_or(b"file"));
    // The pid once per process (a system call each time otherwise).
    static PID: OnceLock<u32> = OnceLock::new();
    let pid = *PID.get_or_init(std::process::id);
    name.extend_from_slice(format!("{pid}-{n}").as_bytes());
    name
}

/// `<stem>.<suffix>` in `target`'s folder.
pub(crate) fn named(target: &Path, stem: &[u8], suffix: &str) -> PathBuf {
    let mut name = stem.to_vec();
    name.push(b'.');
    name.extend_from_slice(suffix.as_bytes());
    target.with_file_name(OsStr::from_bytes(&name))
}

/// One of our side files, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SideFile {
    /// A temporary file of a replacement.
    Temp,
    /// A [`Journal`].
    Journal,
}

/// Whether `path` is named like one of our side files, and which process
/// the name says made it (a claim, see [`recover`]).
pub fn side_file(path: &Path) -> Option<(SideFile, u32)> {
    let name = path.file_name()?.as_bytes();
    if !name.starts_with(b".") {
        return None;
    }
    let (kind, rest) = if let Some(r) = name.strip_suffix(b".tmp") {
        (SideFile::Temp, r)
    } else if let Some(r) = name.strip_suffix(b".journal") {
        (SideFile::Journal, r)
    } else {
        return None;
    };
    let at = rest.windows(MARK.len()).rposition(|w| w == MARK)?;
    let tail = std::str::from_utf8(&rest[at + MARK.len()..]).ok()?;
    let (pid, n) = tail.split_once('-')?;
    n.parse::<u64>().ok()?;
    Some((kind, pid.parse().ok()?))
}

/// The system's `pid_max` (read once).
pub fn pid_max() -> u32 {
    static MAX: OnceLock<u32> = OnceLock::new();
    *MAX.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(PID_MAX_LIMIT)
    })
}

/// What the pid in a side file's name says about its process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Process {
    /// This process.
    Us,
    /// A process with that pid exists (another run, or a reused pid).
    Running,
    /// No such process: the run that made the file was killed.
    Gone,
    /// 0 or above `pid_max` (the number): no process of this system ever
    /// had it, so its absence proves nothing.
    Impossible(u32),
}

/// Judges the pid of a side file's name.
pub fn process(pid: u32) -> Process {
    let max = pid_max();
    if pid == std::process::id() {
        return Process::Us;
    }
    if pid == 0 || pid > max || pid > i32::MAX as u32 {
        return Process::Impossible(max);
    }
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        Process::Gone
    } else {
        Process::Running
    }
}

/// A journal: written before a rewrite changes anything, removed when it is
/// done (on drop), so that a later run can finish or undo the work of a
/// killed one. Two kinds:
///
/// - in place: the file's identity, its original length and the switch
///   write, so that [`recover`] can tell a switched file (keep it) from one
///   with only the appended tail (truncate it back to the original bytes):
///   `nch-journal 2 in-place <dev> <ino> <old_len> <offset> <hex> <name_len>\n<name>`;
/// - temporary file: the temporary file of the same stem is ours, and goes:
///   `nch-journal 2 temp <name_len>\n<name>`.
///
/// `<name>` is the file's name in the journal's folder (any bytes); its
/// length tells a journal cut short by a kill from a complete one.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    /// A temporary file's journal goes with it if a signal ends us.
    _signal: Option<super::signals::Registered>,
}

const MAGIC_V1: &str = "nch-journal 1 ";
const MAGIC: &str = "nch-journal 2 ";

/// What [`recover`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// The switch had happened: the file is the complete patched file.
    Completed,
    /// The switch had not happened: the appended tail was cut off.
    RolledBack,
    /// The temporary file of a killed replacement was removed.
    RemovedTemp,
    /// Nothing to do (nothing appended yet, file gone or replaced).
    Nothing,
}

/// Why a journal was not replayed.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Not provably ours, or naming something we must not touch: left alone.
    #[error("{}: left alone: {reason}", journal.display())]
    Refused {
        /// The journal.
        journal: PathBuf,
        /// Why.
        reason: String,
    },
    /// Reading, replaying or removing failed.
    #[error("{0}")]
    Io(#[from] PathError),
}

impl Journal {
    /// Writes the journal of an in-place patch of `target` (one write of a
    /// small file, `O_EXCL`).
    pub fn in_place(
        target: &Path,
        meta: &std::fs::Metadata,
        old_len: u64,
        offset: u64,
        bytes: &[u8],
    ) -> Result<Journal, PathError> {
        let name = target.file_name().map(|n| n.as_bytes()).unwrap_or(b"");
        let mut head = format!("{MAGIC}in-place {} {} {old_len} {offset} ", meta.dev(), meta.ino());
        for b in bytes {
            head.push_str(&format!("{b:02x}"));
        }
        head.push_str(&format!(" {}\n", name.len()));
        Journal::write(&named(target, &stem(target), "journal"), head, name)
    }

    /// Writes the journal of the temporary file `<stem>.tmp` next to `target`,
    /// before that file is created.
    pub fn temp(target: &Path, stem: &[u8]) -> Result<Journal, PathError> {
        let temp = named(target, stem, "tmp");
        let name = temp.file_name().map(|n| n.as_bytes()).unwrap_or(b"");
        let head = format!("{MAGIC}temp {}\n", name.len());
        let path = named(target, stem, "journal");
        // Registered before it exists, as the temporary file is.
        let signal = super::signals::register(&path, super::signals::Kind::Journal);
        let mut journal = Journal::write(&path, head, name)?;
        journal._signal = signal;
        Ok(journal)
    }

    fn write(path: &Path, head: String, name: &[u8]) -> Result<Journal, PathError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut text = head.into_bytes();
        text.extend_from_slice(name);
        let err = |e| PathError::during(path, "cannot write the journal", e);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(err)?;
        let journal = Journal { path: path.to_path_buf(), _signal: None };
        f.write_all(&text).map_err(err)?;
        Ok(journal)
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The work is complete (or undone): the journal goes.
    pub fn finish(self) {}
}

impl Drop for Journal {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A parsed journal.
enum Entry {
    InPlace {
        dev: u64,
        ino: u64,
        old_len: u64,
        offset: u64,
        bytes: Vec<u8>,
        name: Vec<u8>,
    },
    Temp {
        name: Vec<u8>,
    },
    /// Killed while the journal itself was written: before anything else.
    CutShort,
}

fn parse(text: &[u8]) -> Result<Entry, String> {
    let bad = |what: &str| Err(format!("not a journal of ours ({what})"));
    let Some(nl) = text.iter().position(|&b| b == b'\n') else {
        return if MAGIC.as_bytes().starts_with(&text[..text.len().min(MAGIC.len())])
            || text.starts_with(MAGIC_V1.as_bytes())
        {
            Ok(Entry::CutShort)
        } else {
            bad("no header")
        };
    };
    let Ok(head) = std::str::from_utf8(&text[..nl]) else { return bad("header not text") };
    let rest = &text[nl + 1..];
    let num = |s: &str| s.parse::<u64>().ok();
    // Version 1 (no name length): the name is the rest.
    let (fields, declared) = if let Some(f) = head.strip_prefix(MAGIC_V1) {
        (format!("in-place {f}"), None)
    } else if let Some(f) = head.strip_prefix(MAGIC) {
        let Some((f, len)) = f.rsplit_once(' ') else { return bad("no name length") };
        let Some(len) = num(len) else { return bad("name length") };
        (f.to_string(), Some(len))
    } else {
        return bad("magic");
    };
    if let Some(len) = declared {
        if (rest.len() as u64) < len {
            return Ok(Entry::CutShort);
        }
        if rest.len() as u64 != len {
            return bad("name length");
        }
    }
    let name = rest.to_vec();
    let f: Vec<&str> = fields.split(' ').collect();
    match f.as_slice() {
        ["temp"] => Ok(Entry::Temp { name }),
        ["in-place", dev, ino, old_len, offset, hex] => {
            let (Some(dev), Some(ino), Some(old_len), Some(offset)) =
                (num(dev), num(ino), num(old_len), num(offset))
            else {
                return bad("numbers");
            };
            let bytes = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
                .collect::<Option<Vec<u8>>>();
            match bytes {
                Some(bytes) if hex.len() % 2 == 0 => {
                    Ok(Entry::InPlace { dev, ino, old_len, offset, bytes, name })
                }
                _ => bad("switch bytes"),
            }
        }
        _ => bad("fields"),
    }
}

/// A C string of a name.
fn c_name(name: &[u8]) -> Option<CString> {
    CString::new(name).ok()
}

/// Opens `name` in the folder `dir` without following a link, read-write
/// (`O_NOFOLLOW`, and `O_NONBLOCK` so that a FIFO does not block).
fn open_at(dir: &OwnedFd, name: &CString, flags: libc::c_int) -> io::Result<File> {
    let flags = flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: a valid descriptor and a NUL-terminated name.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Whether `name` is one plain name of a folder: no `/`, not `.` or `..`,
/// not empty, no NUL.
fn plain(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/') && !name.contains(&0)
}

/// Replays a journal left by a killed run and removes it, only after every
/// check of the module documentation; `walked` says whether a `(dev, ino)`
/// is a file this run walked. The caller has judged the journal's process
/// ([`process`]) gone. A journal that fails a check is left in place.
pub fn recover(
    journal: &Path,
    walked: &dyn Fn(u64, u64) -> bool,
) -> Result<Recovery, JournalError> {
    let refuse = |reason: String| JournalError::Refused { journal: journal.to_path_buf(), reason };
    let jname = journal.file_name().map(|n| n.as_bytes()).unwrap_or(b"");
    let folder = match journal.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = File::open(folder).map_err(|e| PathError::new(folder, e))?;
    let dir = OwnedFd::from(dir);
    let jc = c_name(jname).ok_or_else(|| refuse("a name with a NUL byte".into()))?;
    let jerr = |e| PathError::new(journal, e);
    let mut file = match open_at(&dir, &jc, libc::O_RDONLY) {
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refuse("a symbolic link, not a journal".into()))
        }
        other => other.map_err(jerr)?,
    };
    let meta = file.metadata().map_err(jerr)?;
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.nlink() != 1 || meta.len() > MAX_JOURNAL {
        return Err(refuse("not a journal of ours (not a small regular file)".into()));
    }
    if meta.uid() != euid {
        return Err(refuse(format!(
            "owned by uid {}, not by the user this run is (uid {euid}), so not ours",
            meta.uid()
        )));
    }
    let mut text = Vec::new();
    file.read_to_end(&mut text).map_err(jerr)?;
    let outcome = match parse(&text).map_err(&refuse)? {
        Entry::CutShort => Recovery::Nothing,
        Entry::Temp { name } => remove_temp(&dir, jname, &name).map_err(&refuse)?,
        Entry::InPlace { dev, ino, old_len, offset, bytes, name } => {
            let at = InPlace { dev, ino, old_len, offset, bytes: &bytes };
            replay(&dir, folder, jname, &name, &at, walked)?
        }
    };
    // SAFETY: a valid descriptor and a NUL-terminated name.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), jc.as_ptr(), 0) } != 0 {
        return Err(jerr(io::Error::last_os_error()).into());
    }
    Ok(outcome)
}

/// The temporary file of a journal of the same stem: removed if it is a
/// regular file of ours (never a link's target: `unlinkat` removes a name).
fn remove_temp(dir: &OwnedFd, jname: &[u8], name: &[u8]) -> Result<Recovery, String> {
    let expected = jname.strip_suffix(b".journal").map(|s| [s, b".tmp"].concat());
    if !plain(name) || expected.as_deref() != Some(name) {
        return Err(format!(
            "it names {:?}, not the temporary file of its own stem",
            String::from_utf8_lossy(name)
        ));
    }
    let c = c_name(name).ok_or("a name with a NUL byte")?;
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, name and buffer.
    if unsafe { libc::fstatat(dir.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) }
        != 0
    {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::NotFound => Ok(Recovery::Nothing),
            _ => {
                Err(format!("cannot inspect its temporary file: {}", crate::error::describe_io(&e)))
            }
        };
    }
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_uid != euid {
        return Err("its temporary file is not a regular file of ours".into());
    }
    // SAFETY: valid descriptor and name.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) } != 0 {
        let e = io::Error::last_os_error();
        return Err(format!("cannot remove its temporary file: {}", crate::error::describe_io(&e)));
    }
    Ok(Recovery::RemovedTemp)
}

/// An in-place journal's record.
struct InPlace<'a> {
    dev: u64,
    ino: u64,
    old_len: u64,
    offset: u64,
    bytes: &'a [u8],
}

/// Replays an in-place journal on the file it names.
fn replay(
    dir: &OwnedFd,
    folder: &Path,
    jname: &[u8],
    name: &[u8],
    at: &InPlace<'_>,
    walked: &dyn Fn(u64, u64) -> bool,
) -> Result<Recovery, JournalError> {
    let target = folder.join(OsStr::from_bytes(name));
    let refuse = |reason: String| JournalError::Refused {
        journal: folder.join(OsStr::from_bytes(jname)),
        reason,
    };
    let shown = String::from_utf8_lossy(name).into_owned();
    if !plain(name) || !jname.starts_with(&prefix(name)) {
        return Err(refuse(format!(
            "it names {shown:?}, which is not the plain name of a file in its folder that it is named after"
        )));
    }
    let end = at.offset.checked_add(at.bytes.len() as u64);
    if at.bytes.is_empty() || end.is_none_or(|end| end > at.old_len) {
        return Err(refuse("not a journal of ours (the switch lies outside the old file)".into()));
    }
    let c = c_name(name).ok_or_else(|| refuse("a name with a NUL byte".into()))?;
    let file = match open_at(dir, &c, libc::O_RDWR) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Recovery::Nothing),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refuse(format!("{shown:?} is a symbolic link")))
        }
        Err(e) => return Err(PathError::new(&target, e).into()),
    };
    let terr = |e| PathError::new(&target, e);
    let meta = file.metadata().map_err(terr)?;
    if !meta.is_file() {
        return Err(refuse(format!("{shown:?} is not a regular file")));
    }
    if (meta.dev(), meta.ino()) != (at.dev, at.ino) || meta.len() <= at.old_len {
        // Replaced since, or nothing appended: nothing of ours to undo.
        return Ok(Recovery::Nothing);
    }
    if !walked(meta.dev(), meta.ino()) {
        return Err(refuse(format!("{shown:?} is not a file this run walked")));
    }
    let mut now = vec![0u8; at.bytes.len()];
    let switched = file.read_exact_at(&mut now, at.offset).is_ok() && now == at.bytes;
    if switched {
        return Ok(Recovery::Completed);
    }
    file.set_len(at.old_len).map_err(terr)?;
    Ok(Recovery::RolledBack)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn side_files_are_recognised_by_name_and_their_process_judged() {
        let t = named(Path::new("/x/lib.so"), &stem(Path::new("/x/lib.so")), "tmp");
        assert_eq!(side_file(&t), Some((SideFile::Temp, std::process::id())));
        assert_eq!(process(std::process::id()), Process::Us);
        for other in [".lib.so.tmp", "lib.so.~nch1-2.tmp", ".a.~nchx-1.tmp", ".a.~nch1-.tmp"] {
            assert_eq!(side_file(Path::new(other)), None, "{other}");
        }
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(process(pid), Process::Gone);
        assert_eq!(process(1), Process::Running);
        assert_eq!(process(pid_max() + 1), Process::Impossible(pid_max()));
        assert_eq!(process(0), Process::Impossible(pid_max()));
    }

    fn everything(_: u64, _: u64) -> bool {
        true
    }

    #[test]
    fn journal_replay_cuts_an_unswitched_tail_and_keeps_a_switched_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("f\nname");
        std::fs::write(&target, b"HEADER-old-body").unwrap();
        let meta = std::fs::metadata(&target).unwrap();
        // Not switched: the tail goes.
        let j = Journal::in_place(&target, &meta, 15, 0, b"HEADER-NEW").unwrap();
        let jpath = j.path.clone();
        std::mem::forget(j); // as if killed
        std::fs::OpenOptions::new().append(true).open(&target).unwrap().write_all(b"tail").unwrap();
        assert_eq!(recover(&jpath, &everything).unwrap(), Recovery::RolledBack);
        assert_eq!(std::fs::read(&target).unwrap(), b"HEADER-old-body");
        assert!(!jpath.exists());
        // Switched: kept.
        let j = Journal::in_place(&target, &meta, 15, 0, b"HEADER-NEW").unwrap();
        let jpath = j.path.clone();
        std::mem::forget(j);
        std::fs::write(&target, b"HEADER-NEWbodytail").unwrap();
        assert_eq!(recover(&jpath, &everything).unwrap(), Recovery::Completed);
        assert_eq!(std::fs::read(&target).unwrap(), b"HEADER-NEWbodytail");
        // Cut short (killed while writing the journal): nothing to do.
        for short in [&b"nch-journal 2 in-place 1 2"[..], b"nch-journal 2 temp 9\n.f.~nch"] {
            let path = dir.path().join(".f.~nch1-1.journal");
            std::fs::write(&path, short).unwrap();
            assert_eq!(recover(&path, &everything).unwrap(), Recovery::Nothing);
            assert!(!path.exists());
        }
        // A file the walk did not see: left alone.
        let j = Journal::in_place(&target, &meta, 15, 0, b"HEADER-NEW").unwrap();
        let jpath = j.path.clone();
        std::mem::forget(j);
        std::fs::OpenOptions::new().append(true).open(&target).unwrap().write_all(b"more").unwrap();
        let e = recover(&jpath, &|_, _| false).unwrap_err();
        assert!(e.to_string().contains("not a file this run walked"), "{e}");
        assert!(jpath.exists());
    }

    #[test]
    fn a_temporary_file_goes_only_through_the_journal_of_its_stem() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("lib.so");
        let s = stem(&target);
        let j = Journal::temp(&target, &s).unwrap();
        let jpath = j.path.clone();
        std::mem::forget(j);
        let temp = named(&target, &s, "tmp");
        std::fs::write(&temp, b"half").unwrap();
        assert_eq!(recover(&jpath, &everything).unwrap(), Recovery::RemovedTemp);
        assert!(!temp.exists() && !jpath.exists());
        // A journal naming another file of the folder: refused, both stay.
        let other = dir.path().join("precious");
        std::fs::write(&other, b"keep").unwrap();
        let jpath = dir.path().join(".lib.so.~nch1-7.journal");
        std::fs::write(&jpath, b"nch-journal 2 temp 8\nprecious").unwrap();
        let e = recover(&jpath, &everything).unwrap_err();
        assert!(e.to_string().contains("not the temporary file of its own stem"), "{e}");
        assert!(other.exists() && jpath.exists());
    }
}
