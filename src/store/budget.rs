//! The bounds of a cache or NAR audit: what a hostile cache can make this
//! process write, fetch and wait for.
//!
//! A cache or a NAR file is written by strangers, so everything it can make
//! grow has a limit here: bytes on disk ([`Budget`], counted across every
//! store path of one run, `--closure` included), store paths fetched
//! (`max_paths`), and seconds without a byte from the network
//! (`stall_timeout`). The limits are one audit's values, passed down: the
//! cache client gets them when opened ([`crate::store::cache::Cache::open`]),
//! and the disk [`Budget`] belongs to the audit's scratch folder
//! ([`crate::store::scratch::Scratch`]), so two audits in one process (tests,
//! a library user) each have their own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Default of `--max-unpack-bytes`: 16 GiB. The largest CUDA libraries are
/// about 1.5 GB each; a closure holds on disk only the store paths being
/// audited (each is dropped once audited, see `audit::closure`), so the
/// default leaves room for several fetched at a time.
pub const DEFAULT_MAX_UNPACK_BYTES: u64 = 16 << 30;
/// Default of `--max-paths`: a CUDA closure (PyTorch's included) has a few
/// hundred store paths.
pub const DEFAULT_MAX_PATHS: usize = 2000;
/// Default of `--stall-timeout` (Nix's `stalled-download-timeout` is also 300).
pub const DEFAULT_STALL_SECS: u64 = 300;

/// The bounds of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of file data written below the temporary folder at any moment.
    pub max_unpack_bytes: u64,
    /// Store paths fetched with `--closure` (roots included).
    pub max_paths: usize,
    /// Longest wait for the next byte of a download.
    pub stall_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_unpack_bytes: DEFAULT_MAX_UNPACK_BYTES,
            max_paths: DEFAULT_MAX_PATHS,
            stall_timeout: Duration::from_secs(DEFAULT_STALL_SECS),
        }
    }
}

/// The most entries (folders, links and files written) one archive may
/// make: each is an inode of the temporary folder's file system, a limit of
/// its own on tmpfs (`nr_inodes`) and ext4. A CUDA toolkit's largest store
/// path has about 20,000; the largest in Nixpkgs (TeX Live's, kernel
/// sources) a few hundred thousand.
pub const MAX_NAR_ENTRIES: u64 = 1_000_000;

/// Bytes that may be on disk at once. Charged as file data is written and
/// entries are made, credited back when they are removed.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    used: AtomicU64,
    max_entries: u64,
}

/// The budget is spent: the write of `wanted` more bytes was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("more than {limit} bytes unpacked at once (--max-unpack-bytes)")]
pub struct Exceeded {
    /// The limit.
    pub limit: u64,
}

impl Budget {
    /// A budget of `limit` bytes.
    pub const fn new(limit: u64) -> Budget {
        Budget { limit, used: AtomicU64::new(0), max_entries: MAX_NAR_ENTRIES }
    }

    /// This budget with at most `n` entries per archive instead of
    /// [`MAX_NAR_ENTRIES`] (tests).
    pub const fn with_max_entries(self, n: u64) -> Budget {
        Budget { max_entries: n, ..self }
    }

    /// The most entries one archive may make.
    pub fn max_entries(&self) -> u64 {
        self.max_entries
    }

    /// No limit (tests, the fuzz targets).
    pub const fn unlimited() -> Budget {
        Budget::new(u64::MAX)
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes charged now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes `n` bytes, or refuses without taking any.
    pub fn charge(&self, n: u64) -> Result<(), Exceeded> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&total| total <= self.limit)
            })
            .map(|_| ())
            .map_err(|_| Exceeded { limit: self.limit })
    }

    /// Gives `n` bytes back (their files were removed).
    pub fn credit(&self, n: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| Some(used.saturating_sub(n)));
    }
}

/// Parses a byte count for `--max-unpack-bytes`: digits with an optional
/// `K`, `M`, `G` or `T` (powers of 1024).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("{text:?}: not a size (digits, then K, M, G or T)")),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 =
        digits.parse().map_err(|_| format!("{text:?}: not a size (digits, then K, M, G or T)"))?;
    n.checked_mul(1 << shift).ok_or_else(|| format!("{text:?}: too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_stop_at_the_limit_and_credits_give_back() {
        let b = Budget::new(10);
        b.charge(6).unwrap();
        assert_eq!(b.charge(5), Err(Exceeded { limit: 10 }));
        assert_eq!(b.used(), 6);
        b.charge(4).unwrap();
        b.credit(7);
        assert_eq!(b.used(), 3);
        b.credit(100);
        assert_eq!(b.used(), 0);
        assert!(Budget::unlimited().charge(u64::MAX).is_ok());
    }

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("1K"), Ok(1024));
        assert_eq!(parse_bytes("16m"), Ok(16 << 20));
        assert_eq!(parse_bytes("2G"), Ok(2 << 30));
        assert!(parse_bytes("1X").is_err());
        assert!(parse_bytes("G").is_err());
        assert!(parse_bytes("99999999999T").is_err());
    }
}
