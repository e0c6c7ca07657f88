//! Ctrl-C as a request, not an end: while an [`Interrupt`] guard lives,
//! SIGINT sets a flag that long loops poll ([`Interrupt::requested`], or
//! [`requested`] where the guard cannot be handed down: the fetch of a NAR,
//! the cache audit's loop), so a coverage run reports the paths it answered
//! and examined and names the rest as not done instead of losing everything. The previous disposition comes back
//! when the guard is dropped: a second phase that does not poll ends on
//! SIGINT as before (and removes its temporary folders, see
//! [`super::signals`]).

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);
/// Whether a guard's handler is installed now.
static CATCHING: AtomicBool = AtomicBool::new(false);

/// Whether SIGINT came while an [`Interrupt`] guard lives (always false
/// when none does: a plain audit is never asked to stop early).
pub fn requested() -> bool {
    CATCHING.load(Ordering::SeqCst) && REQUESTED.load(Ordering::SeqCst)
}

extern "C" fn on_sigint(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    REQUESTED.store(true, Ordering::SeqCst);
}

/// SIGINT caught as a flag while this lives.
pub struct Interrupt {
    previous: Option<libc::sigaction>,
}

impl Interrupt {
    /// Catches SIGINT from now on; when the handler cannot be installed
    /// (or SIGINT is ignored, as under `nohup`), nothing changes and
    /// [`Interrupt::requested`] stays false.
    pub fn catch() -> Interrupt {
        REQUESTED.store(false, Ordering::SeqCst);
        // SAFETY: sigaction(2) with a zeroed struct and a handler that only
        // stores an atomic; the old action is kept to be restored.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGINT, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction == libc::SIG_IGN
            {
                return Interrupt { previous: None };
            }
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut new.sa_mask);
            if libc::sigaction(libc::SIGINT, &new, std::ptr::null_mut()) != 0 {
                return Interrupt { previous: None };
            }
            CATCHING.store(true, Ordering::SeqCst);
            Interrupt { previous: Some(old) }
        }
    }

    /// Whether SIGINT came since [`Interrupt::catch`].
    pub fn requested(&self) -> bool {
        REQUESTED.load(Ordering::SeqCst)
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        if let Some(old) = self.previous.take() {
            CATCHING.store(false, Ordering::SeqCst);
            // SAFETY: restores the action read in `catch`.
            unsafe { libc::sigaction(libc::SIGINT, &old, std::ptr::null_mut()) };
        }
    }
}
