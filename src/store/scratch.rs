//! The private temporary folder a cache or NAR audit unpacks into, and
//! everything that makes sure it goes away.
//!
//! The folder is `$TMPDIR/cuda-elf-inspect.<pid>.<random>/` (mode 0700). It
//! is removed when its [`Scratch`] is dropped (the audit ended or failed),
//! when the process gets SIGINT, SIGTERM or SIGHUP (CI runners and `timeout`
//! send SIGTERM; the process then exits 130, 143 or 129, as a shell reports
//! a death by that signal), and, should the process have died without
//! either (SIGKILL, a power cut), by the next run: [`Scratch::create`]
//! removes this user's `cuda-elf-inspect.<pid>.*` folders whose process no
//! longer exists.
//!
//! The live folders are listed process-wide: the signal thread removes
//! them, and [`crate::store::confine`] keeps what is read from them inside
//! them. The disk [`Budget`] is the folder's own: every byte written below
//! it is charged there, and given back when its store path is removed
//! ([`Scratch::discard`]) or the folder is.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::store::budget::Budget;

/// The folder name's start; the owner's pid and a random part follow.
pub const PREFIX: &str = "cuda-elf-inspect.";

/// The live scratch folders of this process.
fn live() -> &'static Mutex<Vec<PathBuf>> {
    static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    &LIVE
}

/// The scratch folders of this process now (for [`crate::store::confine`]).
pub fn roots() -> Vec<PathBuf> {
    live().lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// One private temporary folder and the disk budget of what is unpacked
/// into it; removed on drop.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
    disk: Budget,
    /// The bytes each unpacked store path below it holds of `disk`.
    held: Mutex<HashMap<PathBuf, u64>>,
}

impl Scratch {
    /// Makes the folder in `$TMPDIR`, after removing stale ones of dead
    /// runs, with the signal handlers installed first (a signal between the
    /// two would otherwise leave it behind). At most `limit` bytes of file
    /// data may be below it at once (`--max-unpack-bytes`).
    pub fn create(limit: u64) -> io::Result<Scratch> {
        Self::create_in(&std::env::temp_dir(), limit)
    }

    /// [`Scratch::create`] in `dir`.
    pub fn create_in(dir: &Path, limit: u64) -> io::Result<Scratch> {
        use std::os::unix::fs::PermissionsExt;
        install_signal_cleanup();
        sweep_stale(dir);
        let tmp = tempfile::Builder::new()
            .prefix(&format!("{PREFIX}{}.", std::process::id()))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(dir)?;
        let path = tmp.keep();
        live().lock().unwrap_or_else(|e| e.into_inner()).push(path.clone());
        Ok(Scratch { path, disk: Budget::new(limit), held: Mutex::default() })
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The budget every write below the folder is charged to.
    pub fn disk(&self) -> &Budget {
        &self.disk
    }

    /// Records that `local` (one unpacked store path below the folder)
    /// holds `bytes` of [`Scratch::disk`], after a successful unpack.
    pub fn hold(&self, local: &Path, bytes: u64) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        *held.entry(local.to_path_buf()).or_default() += bytes;
    }

    /// Removes one unpacked store path (its folder or file below the
    /// folder) and gives its bytes back to the disk budget: what the audit
    /// calls once nothing needs its files any more, so that a closure holds
    /// on disk only the paths being audited.
    pub fn discard(&self, local: &Path) {
        let _ = match std::fs::symlink_metadata(local) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(local),
            Ok(_) => std::fs::remove_file(local),
            Err(_) => Ok(()),
        };
        let bytes = self.held.lock().unwrap_or_else(|e| e.into_inner()).remove(local);
        self.disk.credit(bytes.unwrap_or(0));
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let mut list = live().lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|p| p != &self.path);
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Removes `dir`'s `cuda-elf-inspect.<pid>.*` folders owned by this user
/// whose process is gone. Folders of live processes, of other users, and
/// of the older unnumbered name are left alone.
pub fn sweep_stale(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner_pid) else { continue };
        let path = entry.path();
        let owned = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if owned && pid != std::process::id() && !alive(pid) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// The pid in a scratch folder's name (`cuda-elf-inspect.<pid>.<random>`).
fn owner_pid(name: &str) -> Option<u32> {
    let (pid, random) = name.strip_prefix(PREFIX)?.split_once('.')?;
    if random.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok().filter(|&p| p > 0 && p <= i32::MAX as u32)
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The write end of the pipe the signal handler writes the signal to.
static SIGNAL_PIPE: OnceLock<libc::c_int> = OnceLock::new();

extern "C" fn on_signal(sig: libc::c_int) {
    if let Some(&fd) = SIGNAL_PIPE.get() {
        let byte = sig as u8;
        // SAFETY: write(2) is async-signal-safe; the buffer is one byte on
        // this stack. Nothing else happens in the handler.
        unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
    }
}

/// SIGINT, SIGTERM and SIGHUP remove the scratch folders and exit with
/// 128 + the signal. The handler only writes the signal to a pipe (nothing
/// else is safe in a handler); a thread reading the pipe does the removal.
/// Installed once; when no pipe or thread can be had, the default actions
/// stay (the next run's sweep removes the folder). A caller that catches
/// Ctrl-C itself for a while ([`crate::fs::interrupt`]) installs this
/// first, so that its guard restores this handler, not the default.
pub fn install_signal_cleanup() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return;
        }
        let read_end = fds[0];
        let spawned = std::thread::Builder::new().name("signal-cleanup".into()).spawn(move || {
            let mut byte = 0u8;
            loop {
                // SAFETY: reads one byte into `byte`, which lives on this stack.
                let n = unsafe { libc::read(read_end, (&mut byte as *mut u8).cast(), 1) };
                if n == 1 {
                    break;
                }
                if n == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    return;
                }
            }
            // The lock may be held by a thread the signal interrupted only
            // between two plain statements: never for long.
            for path in live().lock().unwrap_or_else(|e| e.into_inner()).iter() {
                let _ = std::fs::remove_dir_all(path);
            }
            // A report being written: its temporary file goes too (this
            // handler replaces the one `fs::signals` would install).
            crate::fs::signals::remove_registered();
            // SAFETY: _exit ends the process at once, with no destructor run
            // concurrently with the threads still working.
            unsafe { libc::_exit(128 + i32::from(byte)) };
        });
        if spawned.is_err() {
            return;
        }
        let _ = SIGNAL_PIPE.set(fds[1]);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: a zeroed sigaction with a handler that only calls
            // write(2) and an empty mask is a valid disposition.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pids_are_read_from_our_names_only() {
        assert_eq!(owner_pid("cuda-elf-inspect.123.AbC"), Some(123));
        assert_eq!(owner_pid("cuda-elf-inspect.AbCdEf"), None);
        assert_eq!(owner_pid("cuda-elf-inspect.12."), None);
        assert_eq!(owner_pid("other.123.x"), None);
        assert_eq!(owner_pid("cuda-elf-inspect.0.x"), None);
    }

    #[test]
    fn stale_folders_of_dead_runs_are_swept_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        // A pid no process has: above the kernel's pid_max (at most 2^22).
        let dead = dir.path().join(format!("{PREFIX}{}.x", (1 << 22) + 7));
        let mine = dir.path().join(format!("{PREFIX}{}.y", std::process::id()));
        let old = dir.path().join(format!("{PREFIX}Zz9"));
        for d in [&dead, &mine, &old] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("f"), b"x").unwrap();
        }
        let s = Scratch::create_in(dir.path(), 100).unwrap();
        assert!(!dead.exists() && mine.exists() && old.exists());
        assert!(s.path().exists() && roots().contains(&s.path().to_path_buf()));
        // A discarded path gives its bytes back.
        let held = s.path().join("p");
        std::fs::create_dir(&held).unwrap();
        s.disk().charge(60).unwrap();
        s.hold(&held, 60);
        assert!(s.disk().charge(60).is_err());
        s.discard(&held);
        assert!(!held.exists() && s.disk().used() == 0 && s.disk().charge(60).is_ok());
        let path = s.path().to_path_buf();
        drop(s);
        assert!(!path.exists() && !roots().contains(&path));
    }
}
