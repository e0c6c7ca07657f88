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

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::PathError;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temporary name next to `target`: `.<name>.<pid>-<n>.tmp`.
fn temp_name(target: &Path) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut name = b".".to_vec();
    name.extend_from_slice(target.file_name().map(|n| n.as_bytes()).unwrap_or(b"file"));
    // Keep the temp name within NAME_MAX even for very long file names.
    name.truncate(200);
    name.extend_from_slice(format!(".{}-{n}.tmp", std::process::id()).as_bytes());
    target.with_file_name(std::ffi::OsStr::from_bytes(&name))
}

/// A temporary file that replaces `target` on [`Replacement::commit`] and is
/// removed if dropped before that.
#[derive(Debug)]
pub struct Replacement {
    target: PathBuf,
    temp: PathBuf,
    file: Option<File>,
}

impl Replacement {
    /// Creates the temporary file (mode 0600 until commit).
    pub fn create(target: &Path) -> Result<Replacement, PathError> {
        for _ in 0..16 {
            let temp = temp_name(target);
            match OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&temp)
            {
                Ok(file) => {
                    return Ok(Replacement { target: target.to_path_buf(), temp, file: Some(file) })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(PathError::new(target, e)),
            }
        }
        Err(PathError::new(
            target,
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
        let err = |e| PathError::new(&self.target, e);
        let meta = file.metadata().map_err(err)?;
        if meta.uid() != original.uid() || meta.gid() != original.gid() {
            std::os::unix::fs::fchown(&file, Some(original.uid()), Some(original.gid()))
                .map_err(err)?;
        }
        file.set_permissions(std::fs::Permissions::from_mode(original.mode() & 0o7777))
            .map_err(err)?;
        if sync {
            file.sync_all().map_err(err)?;
        }
        drop(file);
        std::fs::rename(&self.temp, &self.target).map_err(err)?;
        // The temporary name is gone now; nothing for Drop to clean.
        self.temp = PathBuf::new();
        for link in links {
            let temp = temp_name(link);
            std::fs::hard_link(&self.target, &temp).map_err(|e| PathError::new(link, e))?;
            if let Err(e) = std::fs::rename(&temp, link) {
                let _ = std::fs::remove_file(&temp);
                return Err(PathError::new(link, e));
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
