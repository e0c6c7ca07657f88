//! Reading what a cache or NAR unpacked without leaving it, and opening a
//! cache's files without blocking.
//!
//! A NAR's contents name other files: a thin archive's members (`!<thin>`,
//! names relative to the archive or absolute) and symbolic links. On a
//! realised store path those resolve in the store; below a scratch folder
//! the same names would reach this machine's files (`/etc/shadow`,
//! `../../../../etc/hostname`, `/dev/zero`). [`thin_member`] resolves a
//! member inside the store path the archive was unpacked from (links
//! included, as the kernel would inside it) and refuses a name that leads
//! out of it, before anything is opened, so what the host holds there
//! (present, missing, a device) changes nothing in the report.
//! ([`crate::store::mounts`] does the same for the loader's lookups.)

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::store::mounts::MAX_HOPS;
use crate::store::scratch;

/// Opens `path` for reading if it is a regular file: the open does not
/// block (`O_NONBLOCK`: a FIFO would wait for a writer forever) and
/// anything but a regular file (FIFO, socket, device, folder) is refused
/// before a byte is read. The descriptor is then made blocking again.
pub fn open_regular(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    }
    if !meta.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
    }
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL on a descriptor this function owns.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// The scratch folder's entry (one unpacked store path) holding `path`, if
/// `path` lies below a scratch folder of this process.
pub fn unpacked_root(path: &Path) -> Option<PathBuf> {
    scratch::roots().into_iter().find_map(|root| {
        let first = path.strip_prefix(&root).ok()?.components().next()?;
        Some(root.join(first))
    })
}

/// Where the member `name` of the thin archive `archive` is, when the
/// archive was unpacked from a cache or NAR: `None` for an archive of this
/// machine (GNU ar's rule applies: relative to its folder unless absolute);
/// otherwise the member resolved inside the archive's store path, or why it
/// cannot be (an absolute name, `..` above the store path, a link leading
/// out, a loop).
pub fn thin_member(archive: &Path, name: &[u8]) -> Option<io::Result<PathBuf>> {
    let root = unpacked_root(archive)?;
    let name = Path::new(std::ffi::OsStr::from_bytes(name));
    // A store path that is the archive itself: its folder is the store.
    let resolved = match archive.parent().and_then(|p| p.strip_prefix(&root).ok()) {
        Some(folder) => resolve_inside(&root, folder, name),
        None => Err("the store path is this one file".to_string()),
    };
    Some(resolved.map_err(|why| {
        io::Error::new(io::ErrorKind::PermissionDenied, format!("{why}; it is not read"))
    }))
}

/// Resolves `name`, seen from `folder` (relative to `root`), inside `root`:
/// links are read and followed as the kernel would if `root` were `/`'s
/// store path, but an absolute name or target, or a `..` above `root`, is
/// an error rather than a path of this machine.
pub fn resolve_inside(root: &Path, folder: &Path, name: &Path) -> Result<PathBuf, String> {
    fn push(stack: &mut Vec<Option<OsString>>, path: &Path) -> Result<(), String> {
        for c in path.components().rev() {
            match c {
                Component::RootDir | Component::Prefix(_) => {
                    return Err(format!("{} is absolute, outside the store path", path.display()))
                }
                Component::ParentDir => stack.push(None),
                Component::CurDir => {}
                Component::Normal(n) => stack.push(Some(n.to_os_string())),
            }
        }
        Ok(())
    }
    let mut stack = Vec::new();
    push(&mut stack, name)?;
    push(&mut stack, folder)?;
    let mut cur: Vec<OsString> = Vec::new();
    let mut hops = 0;
    while let Some(step) = stack.pop() {
        let Some(n) = step else {
            if cur.pop().is_none() {
                return Err("it leads above the store path".to_string());
            }
            continue;
        };
        cur.push(n);
        let here: PathBuf = root.join(cur.iter().collect::<PathBuf>());
        match std::fs::symlink_metadata(&here) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_HOPS {
                    return Err("too many levels of symbolic links".to_string());
                }
                let target = std::fs::read_link(&here).map_err(|e| e.to_string())?;
                cur.pop();
                push(&mut stack, &target)?;
            }
            // Missing: the open says so, inside the store path.
            _ => {}
        }
    }
    Ok(root.join(cur.iter().collect::<PathBuf>()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn names_resolve_inside_the_root_or_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        std::fs::create_dir_all(root.join("lib/sub")).unwrap();
        std::fs::write(root.join("lib/a.o"), b"x").unwrap();
        symlink("../a.o", root.join("lib/sub/up")).unwrap();
        symlink("/etc/passwd", root.join("lib/abs")).unwrap();
        symlink("../../..", root.join("lib/out")).unwrap();
        symlink("loop", root.join("lib/loop")).unwrap();
        let lib = Path::new("lib");
        let ok = |n: &str| resolve_inside(&root, lib, Path::new(n));
        assert_eq!(ok("a.o").unwrap(), root.join("lib/a.o"));
        assert_eq!(ok("sub/up").unwrap(), root.join("lib/a.o"));
        assert_eq!(ok("./sub/../a.o").unwrap(), root.join("lib/a.o"));
        assert_eq!(ok("missing.o").unwrap(), root.join("lib/missing.o"));
        for bad in ["/etc/shadow", "../../../../etc/hostname", "abs", "out/etc/x", "loop", "../.."]
        {
            let _ = ok(bad).map(|p| panic!("{bad} resolved to {}", p.display()));
        }
        // `..` back down into the root is fine.
        assert_eq!(ok("../lib/a.o").unwrap(), root.join("lib/a.o"));
    }

    #[test]
    fn fifos_and_devices_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string for the path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for p in [fifo.as_path(), Path::new("/dev/zero"), dir.path()] {
            assert!(open_regular(p).is_err(), "{}", p.display());
        }
        std::fs::write(dir.path().join("r"), b"x").unwrap();
        let mut f = open_regular(&dir.path().join("r")).unwrap();
        let mut s = String::new();
        std::io::Read::read_to_string(&mut f, &mut s).unwrap();
        assert_eq!(s, "x");
    }
}
