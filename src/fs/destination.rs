//! Where a file a user names for us to write goes (`--output FMT=PATH`,
//! `--write-baseline PATH`), decided before anything is written.
//!
//! Renaming a new regular file over whatever the name holds (what we did
//! first) destroys a device node, a FIFO or a symbolic link, and a link's
//! target then lent its mode, setuid included, to our report. So:
//! - a symbolic link is followed (up to 40 links, as the kernel does) and
//!   its final target, a regular file or a name not yet taken, is what is
//!   replaced: the link stays a link;
//! - a FIFO, a character device (`/dev/null`, a terminal) or one of our own
//!   descriptors (`/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N`) is written
//!   to as a stream, as the shell's `>` would, appending (`O_APPEND`: a
//!   regular file behind `/dev/stdout` keeps what our standard output wrote
//!   before);
//! - anything else (a folder, a block device, a socket) is refused, naming
//!   the path and what it is.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::PathError;

/// The most links followed, as the kernel's `MAXSYMLINKS`.
const MAX_LINKS: usize = 40;

/// What a name to write leads to.
#[derive(Debug)]
pub enum Destination {
    /// A regular file (`Some`: its metadata) or a free name, to be replaced
    /// atomically at `path`, the end of any links.
    File {
        /// Where the new file goes.
        path: PathBuf,
        /// The file there now.
        existing: Option<Metadata>,
    },
    /// A FIFO, a character device or a descriptor of ours, opened for
    /// writing.
    Stream(File),
}

/// The operation named when a destination is refused.
pub const REFUSED: &str = "cannot write here";

/// Decides where writing `path` goes (see the module documentation). A FIFO
/// blocks here until a reader opens it, as with the shell's `>`.
pub fn resolve(path: &Path) -> Result<Destination, PathError> {
    let mut at = path.to_path_buf();
    for _ in 0..=MAX_LINKS {
        if at.starts_with("/proc") || at.starts_with("/dev/fd") {
            return stream(path, &at);
        }
        let meta = match std::fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Destination::File { path: at, existing: None })
            }
            Err(e) => return Err(PathError::new(&at, e)),
        };
        let t = meta.file_type();
        if t.is_symlink() {
            let to = std::fs::read_link(&at).map_err(|e| PathError::new(&at, e))?;
            at = match at.parent() {
                Some(parent) if to.is_relative() => parent.join(to),
                _ => to,
            };
        } else if t.is_file() {
            return Ok(Destination::File { path: at, existing: Some(meta) });
        } else if t.is_fifo() || t.is_char_device() {
            return stream(path, &at);
        } else {
            return Err(refused(path, &at, kind(&meta)));
        }
    }
    Err(PathError::new(path, io::Error::from_raw_os_error(libc::ELOOP)))
}

/// Opens a stream destination for appending, and checks what it is.
fn stream(path: &Path, at: &Path) -> Result<Destination, PathError> {
    let file = OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(at)
        .map_err(|e| PathError::new(path, e))?;
    let meta = file.metadata().map_err(|e| PathError::new(path, e))?;
    let t = meta.file_type();
    if t.is_file() || t.is_fifo() || t.is_char_device() || t.is_socket() {
        Ok(Destination::Stream(file))
    } else {
        Err(refused(path, at, kind(&meta)))
    }
}

/// What a file that takes no report is.
fn kind(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

fn refused(path: &Path, at: &Path, what: &str) -> PathError {
    let subject =
        if at == path { "it".to_string() } else { format!("it leads to {}, which", at.display()) };
    PathError::during(
        path,
        REFUSED,
        io::Error::other(format!(
            "{subject} is {what}; only a regular file (replaced whole), a FIFO or a character device (written to) can be"
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_followed_and_folders_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        std::os::unix::fs::symlink("f", dir.path().join("l1")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("l1"), dir.path().join("l2")).unwrap();
        std::os::unix::fs::symlink("new", dir.path().join("dangling")).unwrap();
        std::os::unix::fs::symlink("loop", dir.path().join("loop")).unwrap();
        match resolve(&dir.path().join("l2")).unwrap() {
            Destination::File { path, existing } => {
                assert_eq!(path, file);
                assert!(existing.is_some());
            }
            other => panic!("{other:?}"),
        }
        match resolve(&dir.path().join("dangling")).unwrap() {
            Destination::File { path, existing: None } => assert_eq!(path, dir.path().join("new")),
            other => panic!("{other:?}"),
        }
        let e = resolve(&dir.path().join("loop")).unwrap_err();
        assert_eq!(e.source.raw_os_error(), Some(libc::ELOOP));
        let e = resolve(dir.path()).unwrap_err().to_string();
        assert!(e.contains("it is a directory"), "{e}");
        assert!(matches!(resolve(Path::new("/dev/null")).unwrap(), Destination::Stream(_)));
    }
}
