//! Atomic replacement of a file: at every moment a name holds either the old
//! file or the complete new one.
//!
//! The new content is written to a temporary file in the same folder (same
//! filesystem, so `rename(2)` is atomic), given the original's owner and mode
//! (owner first: `chown` clears setuid/setgid, so the mode is applied after it),
//! optionally synced, then renamed over the original. Other hard links to the
//! original inode are switched one by one the same way (`link` to a temporary
//! name, then `rename`), so every name ends up on the new file and none is
//! ever missing or partial. A temporary file is removed if anything fails
//! before the rename (the `Drop` guard).
//!
//! A process killed outright (SIGKILL, OOM killer, power loss) runs no
//! `Drop`: its temporary files (`.<name>.~nch<pid>-<n>.tmp`) and in-place
//! journals (`.<name>.~nch<pid>-<n>.journal`, see [`Journal`]) stay behind.
//! The next run recognises them by that marker and, when process `<pid>` no
//! longer exists, removes the temporary files ([`stale`]) and replays the
//! journals ([`recover`]) before it looks at anything else.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::PathError;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The marker in the names of our temporary files and journals.
const MARK: &[u8] = b".~nch";

/// A name next to `target`: `.<name>.~nch<pid>-<n>.<suffix>`.
fn side_name(target: &Path, suffix: &str) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut name = b".".to_vec();
    name.extend_from_slice(target.file_name().map(|n| n.as_bytes()).unwrap_or(b"file"));
    // Keep the temp name within NAME_MAX even for very long file names.
    name.truncate(200);
    name.extend_from_slice(MARK);
    name.extend_from_slice(format!("{}-{n}.{suffix}", std::process::id()).as_bytes());
    target.with_file_name(std::ffi::OsStr::from_bytes(&name))
}

fn temp_name(target: &Path) -> PathBuf {
    side_name(target, "tmp")
}

/// One of our side files, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SideFile {
    /// A temporary file of [`Replacement`].
    Temp,
    /// An in-place [`Journal`].
    Journal,
}

/// Whether `path` names one of our side files, and which process made it.
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

/// Whether a side file was left by a process that no longer exists (so that
/// it is safe to remove or replay). Our own process's files are never stale.
pub fn stale(path: &Path) -> Option<SideFile> {
    let (kind, pid) = side_file(path)?;
    if pid == std::process::id() || pid == 0 || pid > i32::MAX as u32 {
        return None;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    let gone = r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    gone.then_some(kind)
}

/// A temporary file that replaces `target` on [`Replacement::commit`] and is
/// removed if dropped before that.
#[derive(Debug)]
pub struct Replacement {
    target: PathBuf,
    temp: PathBuf,
    file: Option<File>,
}

/// The operation named when the temporary file cannot be created (callers
/// recognise it to add a hint about read-only folders).
pub const TEMP_CREATE: &str = "cannot create the temporary file of the replacement in its folder";

impl Replacement {
    /// Creates the temporary file (mode 0600 until commit).
    pub fn create(target: &Path) -> Result<Replacement, PathError> {
        Self::create_mode(target, 0o600)
    }

    /// Creates the temporary file with `mode` (less the umask).
    fn create_mode(target: &Path, mode: u32) -> Result<Replacement, PathError> {
        for _ in 0..16 {
            let temp = temp_name(target);
            match OpenOptions::new().read(true).write(true).create_new(true).mode(mode).open(&temp)
            {
                Ok(file) => {
                    return Ok(Replacement { target: target.to_path_buf(), temp, file: Some(file) })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(PathError::during(target, TEMP_CREATE, e)),
            }
        }
        Err(PathError::during(
            target,
            TEMP_CREATE,
            io::Error::new(io::ErrorKind::AlreadyExists, "no free temporary name"),
        ))
    }

    /// The temporary file, for writing.
    pub fn file(&self) -> &File {
        // Only `commit` takes the file out, and it consumes `self`.
        self.file.as_ref().expect("file present until commit")
    }

    /// The temporary file's path.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Gives the new file the original's owner and mode, then renames it over
    /// the original and over every other name in `links`.
    pub fn commit(
        mut self,
        original: &std::fs::Metadata,
        links: &[PathBuf],
        sync: bool,
    ) -> Result<(), PathError> {
        let file = self.file.take().expect("file present until commit");
        let target = self.target.clone();
        let err = |op: &'static str| {
            let target = target.clone();
            move |e| PathError::during(target, op, e)
        };
        let meta = file.metadata().map_err(err("cannot read the new file's metadata"))?;
        if meta.uid() != original.uid() || meta.gid() != original.gid() {
            std::os::unix::fs::fchown(&file, Some(original.uid()), Some(original.gid()))
                .map_err(err("cannot give the new file the old file's owner"))?;
        }
        file.set_permissions(std::fs::Permissions::from_mode(original.mode() & 0o7777))
            .map_err(err("cannot give the new file the old file's mode"))?;
        if sync {
            file.sync_all().map_err(err("cannot sync the new file"))?;
        }
        drop(file);
        std::fs::rename(&self.temp, &self.target)
            .map_err(err("cannot rename the new file over the old one"))?;
        // The temporary name is gone now; nothing for Drop to clean.
        self.temp = PathBuf::new();
        for link in links {
            let temp = temp_name(link);
            std::fs::hard_link(&self.target, &temp)
                .map_err(|e| PathError::during(link, "cannot hard-link the new file here", e))?;
            if let Err(e) = std::fs::rename(&temp, link) {
                let _ = std::fs::remove_file(&temp);
                return Err(PathError::during(
                    link,
                    "cannot switch this hard link to the new file",
                    e,
                ));
            }
            // `rename` does nothing when both names are already links to one
            // file: `link` was the target itself reached by another path (a
            // tree given twice, once through a `result` link). Then the
            // temporary name is still there, and is only an extra name.
            if std::fs::symlink_metadata(&temp).is_ok() {
                std::fs::remove_file(&temp)
                    .map_err(|e| PathError::during(&temp, "cannot remove the temporary name", e))?;
            }
        }
        Ok(())
    }
}

impl Drop for Replacement {
    fn drop(&mut self) {
        if !self.temp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Writes a whole file through `fill`: afterwards `path` holds the old file
/// or everything `fill` wrote, never a part (a report a CI step or Hydra
/// reads while we write, or one left by a failure, is never cut). An
/// existing file keeps its owner and mode; a new one gets 0666 less the
/// umask, as a file made by `>` does. On any failure the temporary file is
/// removed and the old file is untouched.
pub fn write_whole(
    path: &Path,
    fill: impl FnOnce(&mut dyn io::Write) -> io::Result<()>,
) -> Result<(), PathError> {
    let original = std::fs::metadata(path).ok().filter(std::fs::Metadata::is_file);
    let repl = match original {
        Some(_) => Replacement::create(path)?,
        None => Replacement::create_mode(path, 0o666)?,
    };
    let write_err = |e| PathError::during(path, "cannot write the new file", e);
    let mut out = io::BufWriter::new(repl.file());
    fill(&mut out).map_err(write_err)?;
    io::Write::flush(&mut out).map_err(write_err)?;
    drop(out);
    let meta = match original {
        Some(meta) => meta,
        None => repl.file().metadata().map_err(write_err)?,
    };
    repl.commit(&meta, &[], false)
}

/// The journal of an in-place patch: written before anything is appended to
/// the file, removed after the header switch. It records the file's identity,
/// its original length and the switch write, so that after a kill the next
/// run ([`recover`]) can tell a switched file (keep it) from one with only the
/// appended tail (truncate it back to the original bytes).
///
/// Format: `nch-journal 1 <dev> <ino> <old_len> <offset> <hex bytes>\n`
/// followed by the target's file name (any bytes, to the end).
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
}

const JOURNAL_MAGIC: &str = "nch-journal 1";

/// What [`recover`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// The switch had happened: the file is the complete patched file.
    Completed,
    /// The switch had not happened: the appended tail was cut off.
    RolledBack,
    /// Nothing to do (nothing appended yet, file gone or replaced).
    Nothing,
}

impl Journal {
    /// Writes the journal next to `target` (one write of a small file).
    pub fn create(
        target: &Path,
        meta: &std::fs::Metadata,
        old_len: u64,
        offset: u64,
        bytes: &[u8],
    ) -> Result<Journal, PathError> {
        let path = side_name(target, "journal");
        let mut text = format!("{JOURNAL_MAGIC} {} {} {old_len} {offset} ", meta.dev(), meta.ino())
            .into_bytes();
        for b in bytes {
            text.extend_from_slice(format!("{b:02x}").as_bytes());
        }
        text.push(b'\n');
        text.extend_from_slice(target.file_name().map(|n| n.as_bytes()).unwrap_or(b""));
        let err = |e| PathError::new(&path, e);
        let mut f =
            OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).map_err(err)?;
        use std::io::Write;
        let journal = Journal { path: path.clone() };
        f.write_all(&text).map_err(err)?;
        Ok(journal)
    }

    /// The patch is complete (or undone): the journal goes.
    pub fn finish(self) {}
}

impl Drop for Journal {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Replays a journal left by a killed run (see [`Journal`]), then removes it.
pub fn recover(journal: &Path) -> Result<Recovery, PathError> {
    let err = |e| PathError::new(journal, e);
    let text = std::fs::read(journal).map_err(err)?;
    let outcome = recover_inner(journal, &text);
    std::fs::remove_file(journal).map_err(err)?;
    outcome
}

fn recover_inner(journal: &Path, text: &[u8]) -> Result<Recovery, PathError> {
    // A journal cut short was killed before it was complete, hence before
    // anything was appended.
    let Some(nl) = text.iter().position(|&b| b == b'\n') else { return Ok(Recovery::Nothing) };
    let Ok(head) = std::str::from_utf8(&text[..nl]) else { return Ok(Recovery::Nothing) };
    let Some(fields) = head.strip_prefix(JOURNAL_MAGIC) else { return Ok(Recovery::Nothing) };
    let f: Vec<&str> = fields.split_whitespace().collect();
    let [dev, ino, old_len, offset, hex] = f.as_slice() else { return Ok(Recovery::Nothing) };
    let parse = |s: &str| s.parse::<u64>().ok();
    let (Some(dev), Some(ino), Some(old_len), Some(offset)) =
        (parse(dev), parse(ino), parse(old_len), parse(offset))
    else {
        return Ok(Recovery::Nothing);
    };
    let Some(bytes) = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()
    else {
        return Ok(Recovery::Nothing);
    };
    let name = std::ffi::OsStr::from_bytes(&text[nl + 1..]);
    let target = journal.with_file_name(name);
    let file = match OpenOptions::new().read(true).write(true).open(&target) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Recovery::Nothing),
        Err(e) => return Err(PathError::new(&target, e)),
    };
    let terr = |e| PathError::new(&target, e);
    let meta = file.metadata().map_err(terr)?;
    if (meta.dev(), meta.ino()) != (dev, ino) || meta.len() <= old_len {
        return Ok(Recovery::Nothing);
    }
    let mut now = vec![0u8; bytes.len()];
    use std::os::unix::fs::FileExt;
    let switched = file.read_exact_at(&mut now, offset).is_ok() && now == bytes;
    if switched {
        return Ok(Recovery::Completed);
    }
    file.set_len(old_len).map_err(terr)?;
    Ok(Recovery::RolledBack)
}

#[cfg(test)]
mod tests {

    #[test]
    fn write_whole_keeps_the_mode_and_never_leaves_a_part() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("report.json");
        write_whole(&target, |w| w.write_all(b"first\n")).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"first\n");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_whole(&target, |w| w.write_all(b"second\n")).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"second\n");
        let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640);
        // A writer failing half-way: the old file stays, no temporary file.
        let err = write_whole(&target, |w| {
            w.write_all(b"half")?;
            Err(io::Error::other("emitter failed"))
        })
        .unwrap_err();
        assert!(err.to_string().contains("report.json"), "{err}");
        assert_eq!(std::fs::read(&target).unwrap(), b"second\n");
        let names: Vec<_> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("report.json")]);
    }
    use super::*;
    use std::io::Write;

    #[test]
    fn dropped_replacement_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("f");
        std::fs::write(&target, b"old").unwrap();
        {
            let r = Replacement::create(&target).unwrap();
            use std::io::Write;
            r.file().write_all(b"half").unwrap();
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
    }

    #[test]
    fn commit_keeps_mode_and_switches_hard_links() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("f");
        let other = dir.path().join("g");
        std::fs::write(&target, b"old").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o4755)).unwrap();
        std::fs::hard_link(&target, &other).unwrap();
        let meta = std::fs::metadata(&target).unwrap();
        let r = Replacement::create(&target).unwrap();
        use std::io::Write;
        r.file().write_all(b"new").unwrap();
        r.commit(&meta, std::slice::from_ref(&other), false).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert_eq!(std::fs::read(&other).unwrap(), b"new");
        let m = std::fs::metadata(&target).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o4755);
        assert_eq!(m.ino(), std::fs::metadata(&other).unwrap().ino());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    /// The same file reached by two paths (a tree given twice, once through
    /// a link to its folder) is switched once and leaves no temporary name.
    #[test]
    fn a_link_that_is_the_target_itself_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out/f");
        std::fs::create_dir(dir.path().join("out")).unwrap();
        std::os::unix::fs::symlink("out", dir.path().join("result")).unwrap();
        std::fs::write(&target, b"old").unwrap();
        let meta = std::fs::metadata(&target).unwrap();
        let r = Replacement::create(&target).unwrap();
        use std::io::Write;
        r.file().write_all(b"new").unwrap();
        r.commit(&meta, &[dir.path().join("result/f")], false).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("out"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["f"]);
    }

    #[test]
    fn side_files_are_recognised_by_name_and_only_when_their_process_is_gone() {
        let t = temp_name(Path::new("/x/lib.so"));
        assert_eq!(side_file(&t), Some((SideFile::Temp, std::process::id())));
        assert_eq!(stale(&t), None, "our own files are not stale");
        let j = side_name(Path::new("/x/a.b.~nch7"), "journal");
        assert_eq!(side_file(&j), Some((SideFile::Journal, std::process::id())));
        for other in [".lib.so.tmp", "lib.so.~nch1-2.tmp", ".a.~nchx-1.tmp", ".a.~nch1-.tmp"] {
            assert_eq!(side_file(Path::new(other)), None, "{other}");
        }
        // A process that has exited.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let dead = PathBuf::from(format!("/x/.lib.so.~nch{pid}-0.tmp"));
        assert_eq!(stale(&dead), Some(SideFile::Temp));
    }

    #[test]
    fn journal_replay_cuts_an_unswitched_tail_and_keeps_a_switched_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("f\nname");
        std::fs::write(&target, b"HEADER-old-body").unwrap();
        let meta = std::fs::metadata(&target).unwrap();
        // Not switched: the tail goes.
        let j = Journal::create(&target, &meta, 15, 0, b"HEADER-NEW").unwrap();
        let jpath = j.path.clone();
        std::mem::forget(j); // as if killed
        std::fs::OpenOptions::new().append(true).open(&target).unwrap().write_all(b"tail").unwrap();
        assert_eq!(recover(&jpath).unwrap(), Recovery::RolledBack);
        assert_eq!(std::fs::read(&target).unwrap(), b"HEADER-old-body");
        assert!(!jpath.exists());
        // Switched: kept.
        let j = Journal::create(&target, &meta, 15, 0, b"HEADER-NEW").unwrap();
        let jpath = j.path.clone();
        std::mem::forget(j);
        std::fs::write(&target, b"HEADER-NEWbodytail").unwrap();
        assert_eq!(recover(&jpath).unwrap(), Recovery::Completed);
        assert_eq!(std::fs::read(&target).unwrap(), b"HEADER-NEWbodytail");
        // Cut short (killed while writing the journal): nothing to do.
        let short = dir.path().join(".f.~nch1-1.journal");
        std::fs::write(&short, b"nch-journal 1 1 2").unwrap();
        assert_eq!(recover(&short).unwrap(), Recovery::Nothing);
        assert!(!short.exists());
    }
}
