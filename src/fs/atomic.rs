//! Atomic replacement of a file: at every moment a name holds either the old
//! file or the complete new one.
//!
//! The new content is written to a temporary file in the same folder (same
//! filesystem, so the switch is atomic), given the original's owner and mode
//! (owner first: `chown` clears setuid/setgid, so the mode is applied after it),
//! optionally synced, then exchanged with the original (`renameat2` with
//! `RENAME_EXCHANGE`, the old file then unlinked; a plain `rename(2)` where
//! there is no exchange: see [`replace`] for why and what it trades). Other
//! hard links to the original inode are switched one by one the same way
//! (`link` to a temporary name, then the switch), so every name ends up on
//! the new file and none is ever missing or partial. A temporary file is
//! removed if anything fails before the switch (the `Drop` guard).
//!
//! A process killed outright (SIGKILL, OOM killer, power loss) runs no
//! `Drop`: its temporary files (`.<name>.~nch<pid>-<n>.tmp`) and journals
//! (`.<name>.~nch<pid>-<n>.journal`) stay behind. The patcher's temporary
//! files get a journal of the same stem first ([`Replacement::create_journaled`]),
//! so that its next run can prove them its own and remove them
//! ([`super::side`]); nothing else is ever removed by name.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::destination::{self, Destination};
use super::side::{self, Journal};
use super::signals;
use super::xattr;
use crate::error::PathError;

/// A temporary file that replaces `target` on [`Replacement::commit`] and is
/// removed if dropped before that.
#[derive(Debug)]
pub struct Replacement {
    target: PathBuf,
    temp: PathBuf,
    file: Option<File>,
    /// The journal that makes the temporary file provably ours to a later
    /// run (see [`side`]); dropped after the temporary file.
    journal: Option<Journal>,
    /// The temporary file's entry in the table a signal handler cleans
    /// ([`signals`]).
    _signal: Option<signals::Registered>,
    /// Extended attributes the new file gets at commit ([`xattr`]).
    attrs: xattr::Attributes,
}

/// The operation named when the temporary file cannot be created (callers
/// recognise it to add a hint about read-only folders).
pub const TEMP_CREATE: &str = "cannot create the temporary file of the replacement in its folder";

impl Replacement {
    /// Creates the temporary file (mode 0600 until commit).
    pub fn create(target: &Path) -> Result<Replacement, PathError> {
        Self::create_mode(target, 0o600, false)
    }

    /// Creates the temporary file (mode 0600 until commit) after the
    /// journal that lets a later run remove it if we are killed: for a tree
    /// that a later run walks (the patcher's files).
    pub fn create_journaled(target: &Path) -> Result<Replacement, PathError> {
        Self::create_mode(target, 0o600, true)
    }

    /// Creates the temporary file with `mode` (less the umask).
    fn create_mode(target: &Path, mode: u32, journaled: bool) -> Result<Replacement, PathError> {
        let busy = |e: &io::Error| e.kind() == io::ErrorKind::AlreadyExists;
        for _ in 0..16 {
            let stem = side::stem(target);
            let journal = match journaled.then(|| Journal::temp(target, &stem)).transpose() {
                Ok(j) => j,
                Err(e) if busy(&e.source) => continue,
                Err(e) => return Err(PathError::during(target, TEMP_CREATE, e.source)),
            };
            let temp = side::named(target, &stem, "tmp");
            // Registered before it exists, so that no moment has the file
            // and no entry; the name is ours alone (our pid, a fresh
            // number), and the entry goes at once if it is taken.
            let signal = signals::register(&temp, signals::Kind::Temp);
            match OpenOptions::new().read(true).write(true).create_new(true).mode(mode).open(&temp)
            {
                Ok(file) => {
                    return Ok(Replacement {
                        target: target.to_path_buf(),
                        _signal: signal,
                        temp,
                        file: Some(file),
                        journal,
                        attrs: Vec::new(),
                    })
                }
                Err(e) if busy(&e) => continue,
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

    /// Gives the new file these extended attributes at commit (after its
    /// owner, which would remove file capabilities).
    pub fn keep_attributes(&mut self, attrs: xattr::Attributes) {
        self.attrs = attrs;
    }

    /// The temporary file's path.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Gives the new file the original's owner and mode, then renames it over
    /// the original and over every other name in `links`.
    pub fn commit(
        self,
        original: &std::fs::Metadata,
        links: &[PathBuf],
        sync: bool,
    ) -> Result<(), PathError> {
        let owner = (original.uid(), original.gid(), original.mode() & 0o7777);
        self.commit_as(owner, links, sync)
    }

    /// [`Replacement::commit`] with the owner `(uid, gid)` and `mode` given.
    fn commit_as(
        mut self,
        (uid, gid, mode): (u32, u32, u32),
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
        if meta.uid() != uid || meta.gid() != gid {
            std::os::unix::fs::fchown(&file, Some(uid), Some(gid))
                .map_err(err("cannot give the new file the old file's owner"))?;
        }
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(err("cannot give the new file the old file's mode"))?;
        xattr::write(&file, &self.attrs).map_err(|(name, e)| {
            let e = io::Error::new(e.kind(), format!("{name}: {}", crate::error::describe_io(&e)));
            PathError::during(
                &target,
                "cannot give the new file the old file's extended attribute",
                e,
            )
        })?;
        if sync {
            file.sync_all().map_err(err("cannot sync the new file"))?;
        }
        drop(file);
        let exchange = meta.len() >= EXCHANGE_FROM;
        match replace(&self.temp, &self.target, exchange) {
            Ok(Replaced::Renamed) => {}
            Ok(Replaced::Exchanged) => {
                // The temporary name holds the old file now: it goes.
                std::fs::remove_file(&self.temp).map_err(|e| {
                    PathError::during(
                        &self.temp,
                        "cannot remove the old file after the exchange",
                        e,
                    )
                })?;
            }
            Err(e) => return Err(err("cannot rename the new file over the old one")(e)),
        }
        // The temporary name is gone now; nothing for Drop to clean.
        self.temp = PathBuf::new();
        for link in links {
            // Each temporary name gets its journal first, as the file did.
            let stem = side::stem(link);
            let journal = Journal::temp(link, &stem)?;
            let temp = side::named(link, &stem, "tmp");
            let _signal = signals::register(&temp, signals::Kind::Temp);
            std::fs::hard_link(&self.target, &temp)
                .map_err(|e| PathError::during(link, "cannot hard-link the new file here", e))?;
            if let Err(e) = replace(&temp, link, exchange) {
                let _ = std::fs::remove_file(&temp);
                return Err(PathError::during(
                    link,
                    "cannot switch this hard link to the new file",
                    e,
                ));
            }
            // After an exchange the temporary name holds the old file. And
            // `rename` does nothing when both names are already links to one
            // file: `link` was the target itself reached by another path (a
            // tree given twice, once through a `result` link). Either way
            // the temporary name is still there, and is only an extra name.
            if std::fs::symlink_metadata(&temp).is_ok() {
                std::fs::remove_file(&temp)
                    .map_err(|e| PathError::during(&temp, "cannot remove the temporary name", e))?;
            }
            journal.finish();
        }
        Ok(())
    }
}

/// New files of this size or more are switched by an exchange ([`replace`]).
pub const EXCHANGE_FROM: u64 = 16 << 20;

/// How [`replace`] switched the name.
#[derive(Debug, PartialEq, Eq)]
enum Replaced {
    /// `renameat2(RENAME_EXCHANGE)`: the name holds the new file and the
    /// temporary name the old one, which the caller removes.
    Exchanged,
    /// `rename(2)`: the old file is gone with its last name.
    Renamed,
}

/// Makes `to` name the file `from` names, atomically: every moment `to`
/// names the old file or the complete new one.
///
/// Exchange first, then the caller unlinks the old file: on ext4, a
/// `rename` over an existing file starts writing the new file back at once
/// (`auto_da_alloc`, the heuristic that protects programs which replace a
/// file without `fsync` from an empty file after a crash), which made
/// replacing a 750 MB library cost twice its copy (BENCHMARKS.md, issue
/// 33). An exchange is no rename over a file, so the new file's data is
/// written back when the kernel would anyway (`dirty_expire_centisecs`,
/// 30 s by default): after a power loss within that time the name may hold
/// the new file with its data not on disk. `--fsync` (which syncs the new
/// file before the switch) is the guarantee in both cases; without it a
/// rename only shortens that window. Where the kernel or the file system
/// has no exchange (`ENOSYS` before Linux 3.15, `EINVAL` on file systems
/// without it, e.g. vfat or NFS) or `to` does not exist yet (`ENOENT`), it
/// is a plain `rename`.
///
/// Only for a new file of [`EXCHANGE_FROM`] bytes or more: below that the
/// writeback a rename starts is small, and unlinking the old file after an
/// exchange measured slower than the rename on ext4 (mounted `discard`,
/// old files on disk: 2.2-2.5 ms against 0.3-1.8 ms a file).
fn replace(from: &Path, to: &Path, exchange_first: bool) -> io::Result<Replaced> {
    if !exchange_first {
        return std::fs::rename(from, to).map(|()| Replaced::Renamed);
    }
    match exchange(from, to) {
        Ok(()) => Ok(Replaced::Exchanged),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOENT)
            ) =>
        {
            std::fs::rename(from, to).map(|()| Replaced::Renamed)
        }
        Err(e) => Err(e),
    }
}

/// `renameat2(from, to, RENAME_EXCHANGE)`, through the system call (the C
/// library's wrapper is missing from older glibc and some musl builds).
fn exchange(from: &Path, to: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
    };
    let (a, b) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths that live across the call; the
    // system call reads them and returns.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Drop for Replacement {
    fn drop(&mut self) {
        if !self.temp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.temp);
        }
        // The journal goes after the file it names.
        drop(self.journal.take());
    }
}

/// Writes a whole file through `fill` (a report, a baseline): afterwards
/// the file `path` leads to holds the old file or everything `fill` wrote,
/// never a part (a report a CI step or Hydra reads while we write, or one
/// left by a failure, is never cut). A link is followed and its target
/// replaced; a FIFO, a character device or `/dev/stdout` is written to as a
/// stream; anything else that is not a regular file is refused
/// ([`destination`]). An existing file keeps its owner and permission bits
/// but never setuid or setgid (a report is no program); a new one gets 0666
/// less the umask, as a file made by `>` does. On any failure the temporary
/// file is removed and the old file is untouched.
pub fn write_whole(
    path: &Path,
    fill: impl FnOnce(&mut dyn io::Write) -> io::Result<()>,
) -> Result<(), PathError> {
    let (target, original) = match destination::resolve(path)? {
        Destination::Stream(file) => {
            let err = |e| PathError::during(path, "cannot write", e);
            let mut out = io::BufWriter::new(file);
            fill(&mut out).map_err(err)?;
            return io::Write::flush(&mut out).map_err(err);
        }
        Destination::File { path, existing } => (path, existing),
    };
    let repl = match original {
        Some(_) => Replacement::create(&target)?,
        None => Replacement::create_mode(&target, 0o666, false)?,
    };
    let write_err = |e| PathError::during(&target, "cannot write the new file", e);
    let mut out = io::BufWriter::new(repl.file());
    fill(&mut out).map_err(write_err)?;
    io::Write::flush(&mut out).map_err(write_err)?;
    drop(out);
    let meta = match original {
        Some(meta) => meta,
        None => repl.file().metadata().map_err(write_err)?,
    };
    repl.commit_as((meta.uid(), meta.gid(), meta.mode() & 0o1777), &[], false)
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

    /// Over an existing file the switch is an exchange (the old file left
    /// under the temporary name for the caller); to a new name, a rename.
    #[test]
    fn replace_exchanges_over_a_file_and_renames_to_a_new_name() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("c"));
        std::fs::write(&a, b"new").unwrap();
        std::fs::write(&b, b"old").unwrap();
        assert_eq!(replace(&a, &b, true).unwrap(), Replaced::Exchanged);
        assert_eq!(std::fs::read(&b).unwrap(), b"new");
        assert_eq!(std::fs::read(&a).unwrap(), b"old");
        assert_eq!(replace(&a, &c, true).unwrap(), Replaced::Renamed);
        assert_eq!(std::fs::read(&c).unwrap(), b"old");
        assert!(!a.exists());
        // A small file: a rename, the old file gone with it.
        std::fs::write(&a, b"newer").unwrap();
        assert_eq!(replace(&a, &b, false).unwrap(), Replaced::Renamed);
        assert_eq!(std::fs::read(&b).unwrap(), b"newer");
        assert!(!a.exists());
    }

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
}
