//! Extended attributes carried from a file we replace to the new file.
//!
//! A replacement is a new inode: without this, file capabilities
//! (`security.capability`, what `setcap` writes: a ping or a server that
//! binds a low port without being setuid), ACLs (`system.posix_acl_access`)
//! and user attributes vanished silently. Every attribute is copied except
//! those that describe the old content or its place in a security policy,
//! which the kernel or the policy gives a new file itself:
//! `security.selinux` (the folder's context, as for any new file),
//! `security.ima` and `security.evm` (a hash or signature of the old bytes,
//! wrong for the new ones). A filesystem without extended attributes has
//! nothing to copy. An attribute that cannot be set is an error: the
//! replacement is abandoned rather than made silently weaker.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// The attribute that holds file capabilities. Writing to a file removes
/// it (the kernel's "kill privileges" on write), `chown` too.
pub const CAPABILITY: &CStr = c"security.capability";

/// Attributes a new file must not inherit (see the module documentation).
const NOT_COPIED: [&CStr; 3] = [c"security.selinux", c"security.ima", c"security.evm"];

/// The attributes worth copying, as `(name, value)`.
pub type Attributes = Vec<(CString, Vec<u8>)>;

/// Reads a sized list or value: `call(buf)` with an empty buffer for the
/// size first, then for the bytes, again if it grew meanwhile.
fn sized(call: impl Fn(&mut [u8]) -> isize) -> io::Result<Vec<u8>> {
    for _ in 0..4 {
        let n = call(&mut []);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            // Nothing (most files): one call.
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; n as usize];
        let m = call(&mut buf);
        if m >= 0 {
            buf.truncate(m as usize);
            return Ok(buf);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) {
            return Err(e);
        }
    }
    Err(io::Error::from_raw_os_error(libc::ERANGE))
}

/// The attributes of `file` to carry to its replacement.
pub fn read(file: &File) -> io::Result<Attributes> {
    let fd = file.as_raw_fd();
    // SAFETY: valid descriptor; the buffer pointer and length agree.
    let list = sized(|b| unsafe { libc::flistxattr(fd, b.as_mut_ptr().cast(), b.len()) });
    let list = match list {
        Ok(l) => l,
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = CString::new(name).map_err(io::Error::other)?;
        if NOT_COPIED.contains(&name.as_c_str()) {
            continue;
        }
        let value = sized(|b| {
            // SAFETY: as above, and a NUL-terminated name.
            unsafe { libc::fgetxattr(fd, name.as_ptr(), b.as_mut_ptr().cast(), b.len()) }
        });
        match value {
            Ok(v) => out.push((name, v)),
            // Removed between the list and the read.
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Whether `attrs` holds file capabilities.
pub fn has_capability(attrs: &Attributes) -> bool {
    attrs.iter().any(|(n, _)| n.as_c_str() == CAPABILITY)
}

/// Sets `attrs` on `file`, capabilities last (after any ownership change,
/// which would remove them); the name of the one that failed with the error.
pub fn write(file: &File, attrs: &Attributes) -> Result<(), (String, io::Error)> {
    let fd = file.as_raw_fd();
    let (caps, rest): (Vec<_>, Vec<_>) =
        attrs.iter().partition(|(n, _)| n.as_c_str() == CAPABILITY);
    for (name, value) in rest.into_iter().chain(caps) {
        // SAFETY: valid descriptor, NUL-terminated name, value and length agree.
        let r =
            unsafe { libc::fsetxattr(fd, name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
        if r != 0 {
            return Err((name.to_string_lossy().into_owned(), io::Error::last_os_error()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_attributes_are_read_and_written() {
        let dir = tempfile::tempdir().unwrap();
        let a = File::create(dir.path().join("a")).unwrap();
        let b = File::create(dir.path().join("b")).unwrap();
        let name = c"user.nch-test";
        // SAFETY: valid descriptor, name and value.
        let r =
            unsafe { libc::fsetxattr(a.as_raw_fd(), name.as_ptr(), b"v".as_ptr().cast(), 1, 0) };
        if r != 0 {
            // A filesystem without user attributes: nothing to copy.
            assert!(read(&a).unwrap().iter().all(|(n, _)| n.as_c_str() != name));
            return;
        }
        let attrs = read(&a).unwrap();
        assert!(attrs.contains(&(name.to_owned(), b"v".to_vec())), "{attrs:?}");
        assert!(!has_capability(&attrs));
        write(&b, &attrs).unwrap();
        assert_eq!(read(&b).unwrap(), attrs);
    }
}
