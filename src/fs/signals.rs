//! Temporary files removed when SIGTERM, SIGINT or SIGHUP ends the process.
//!
//! A `Drop` guard cleans a temporary file on every error path, but a signal
//! whose default action ends the process runs no destructor: a CI step
//! cancelled while a report was written left `.a.html.~nch<pid>-0.tmp` for
//! good. So every live temporary file is registered here, and the first
//! time one is, a handler is installed for those three signals (unless the
//! signal is ignored, as under `nohup`, or already handled). The handler
//! removes every registered file, temporary files before their journals,
//! then lets the signal end the process as it would have (`SA_RESETHAND`
//! and the signal raised again): the exit status is still "killed by
//! SIGTERM". SIGKILL cannot be caught; the patcher's journals cover it
//! (see [`super::side`]).
//!
//! The handler may only call async-signal-safe functions and must not
//! allocate or lock, so the registry is a fixed table of [`SLOTS`] paths of
//! at most [`PATH_BYTES`] bytes each, claimed with atomics. A path that finds
//! no free slot, or is longer, is simply not registered (its `Drop` guard
//! still works; only a signal leaves it behind).

use std::cell::UnsafeCell;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Once;

/// Paths registered at once (the patcher has one or two per thread).
pub const SLOTS: usize = 128;
/// The longest path registered, its NUL included (PATH_MAX).
pub const PATH_BYTES: usize = 4096;

const FREE: u8 = 0;
const FILLING: u8 = 1;
const TEMP: u8 = 2;
const JOURNAL: u8 = 3;
const TAKEN: u8 = 4;

struct Slot {
    state: AtomicU8,
    path: UnsafeCell<[u8; PATH_BYTES]>,
}

// SAFETY: `path` is written only by the thread that moved `state` from FREE
// to FILLING, and read only after `state` says TEMP or JOURNAL (release /
// acquire), by the handler that then moves it to TAKEN.
unsafe impl Sync for Slot {}

static TABLE: [Slot; SLOTS] =
    [const { Slot { state: AtomicU8::new(FREE), path: UnsafeCell::new([0; PATH_BYTES]) } }; SLOTS];

static INSTALL: Once = Once::new();

/// What a registered path is: temporary files are removed first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A temporary file.
    Temp,
    /// The journal that names a temporary file.
    Journal,
}

/// A registered path; unregistered when dropped.
#[derive(Debug)]
pub struct Registered {
    slot: usize,
    kind: u8,
}

/// Registers `path` for removal if a signal ends the process; `None` when
/// it cannot be (no free slot, too long).
pub fn register(path: &Path, kind: Kind) -> Option<Registered> {
    INSTALL.call_once(install);
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= PATH_BYTES || bytes.contains(&0) {
        return None;
    }
    let state = if kind == Kind::Temp { TEMP } else { JOURNAL };
    for (i, slot) in TABLE.iter().enumerate() {
        if slot.state.compare_exchange(FREE, FILLING, Ordering::Acquire, Ordering::Relaxed).is_ok()
        {
            // SAFETY: FILLING makes this thread the slot's only user.
            let buf = unsafe { &mut *slot.path.get() };
            buf[..bytes.len()].copy_from_slice(bytes);
            buf[bytes.len()] = 0;
            slot.state.store(state, Ordering::Release);
            return Some(Registered { slot: i, kind: state });
        }
    }
    None
}

impl Drop for Registered {
    fn drop(&mut self) {
        // Fails only when the handler took the slot: the process is ending.
        let _ = TABLE[self.slot].state.compare_exchange(
            self.kind,
            FREE,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }
}

/// Installs the handler for each signal that still has its default action.
fn install() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: plain sigaction calls on zeroed structures; the handler
        // only does async-signal-safe work.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                continue;
            }
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            act.sa_flags = libc::SA_RESETHAND;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
}

/// Removes every registered file (temporary files, then journals) and
/// raises the signal again, now with its default action.
extern "C" fn on_signal(sig: libc::c_int) {
    remove_registered();
    // SAFETY: raise is async-signal-safe; the action is the default again.
    unsafe { libc::raise(sig) };
}

/// Removes every registered file, temporary files before their journals,
/// for good (their slots stay taken): for a handler, or for another
/// module's signal cleanup ([`crate::fs`]'s users install their own
/// handlers too; the first installed wins, so each calls this).
/// Async-signal-safe.
pub fn remove_registered() {
    for pass in [TEMP, JOURNAL] {
        for slot in TABLE.iter() {
            if slot
                .state
                .compare_exchange(pass, TAKEN, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // SAFETY: the slot holds a NUL-terminated path (see `Slot`);
                // unlink is async-signal-safe.
                unsafe { libc::unlink(slot.path.get() as *const libc::c_char) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_claimed_and_given_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        let a = register(&p, Kind::Temp).unwrap();
        let b = register(&p, Kind::Journal).unwrap();
        assert_ne!(a.slot, b.slot);
        let slot = a.slot;
        drop(a);
        assert_eq!(TABLE[slot].state.load(Ordering::Relaxed), FREE);
        assert!(register(Path::new(&"x".repeat(PATH_BYTES)), Kind::Temp).is_none());
    }
}
