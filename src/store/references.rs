//! Store path references in bytes, found as Nix's scanner finds them
//! (docs/references.md): a reference is the 32-character hash part of a
//! store path, in Nix's base32 alphabet, wherever it sits in the bytes.
//!
//! Two ways to know which hashes count ([`Candidates`]):
//! - the paths of a closure (a cache's narinfo References): Nix's own
//!   search, which looks at a window of 32 bytes, checks it from its last
//!   byte down and skips past the first byte outside the alphabet, so most
//!   of a binary is never compared; a window of 32 alphabet bytes counts
//!   when it is one of the candidates' hashes;
//! - a store folder (inside a build or for a realised path, where the
//!   candidates are not known): every `<store>/<hash>-<name>`, found with
//!   `memmem` on the store folder's bytes. Nix records such a path when it
//!   is in the build's inputs (or the output itself): a hash written without
//!   the store folder in front is the one thing this mode does not see.
//!
//! Memory stays flat: the bytes are read once, in windows of [`WINDOW`]
//! bytes that overlap by the longest match (searched in parallel, a few at
//! a time), and the caller is told which bytes are done so that their pages
//! can be dropped.

use std::collections::HashMap;

/// Nix's base32 alphabet (no `e`, `o`, `u`, `t`).
pub const NIX_BASE32: &[u8; 32] = b"0123456789abcdfghijklmnpqrsvwxyz";

/// Characters in a store path's hash part.
pub const HASH_LEN: usize = 32;

/// The longest name of a store path (Nix refuses longer ones).
pub const NAME_MAX: usize = 211;

/// The most bytes of path kept after a base name ([`Hit::tail`]).
pub const TAIL_MAX: usize = 160;

/// Bytes scanned before the caller is told to drop them; windows of a
/// larger file are searched in parallel.
pub const WINDOW: usize = 4 << 20;

/// Windows smaller than this are not prefetched (a link's target, a
/// script: one system call would cost more than the faults it saves).
const PREFETCH_MIN: usize = 64 << 10;

const fn alphabet() -> [bool; 256] {
    let mut table = [false; 256];
    let mut i = 0;
    while i < NIX_BASE32.len() {
        table[NIX_BASE32[i] as usize] = true;
        i += 1;
    }
    table
}

static IS_BASE32: [bool; 256] = alphabet();

/// Whether `b` is a character of Nix's base32 alphabet.
pub fn is_base32(b: u8) -> bool {
    IS_BASE32[b as usize]
}

/// Whether `b` may be part of a store path's name (Nix's rule:
/// letters, digits and `+-._?=`).
pub fn is_name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"+-._?=".contains(&b)
}

/// One reference found in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// Offset of the hash's first byte (from the start of the bytes given,
    /// plus their `base`).
    pub offset: u64,
    /// The store path's base name, `<hash>-<name>` (the hash alone when the
    /// bytes after it name nothing and the hash is a candidate's).
    pub path: String,
    /// What follows the base name when it goes on as a path (`/bin/nvcc`),
    /// at most [`TAIL_MAX`] bytes; empty otherwise.
    pub tail: String,
}

impl Hit {
    /// The hash part.
    pub fn hash(&self) -> &str {
        &self.path[..HASH_LEN.min(self.path.len())]
    }
}

/// Which store paths count as referenced.
#[derive(Debug, Clone)]
pub enum Candidates {
    /// Any `<store>/<hash>-<name>`; the store folder without its final `/`.
    StoreDir(String),
    /// These store paths' hashes, anywhere (Nix's own scanner).
    Paths(HashMap<[u8; HASH_LEN], String>),
}

impl Candidates {
    /// The store paths of `names` (base names `<hash>-<name>`, or full store
    /// paths: what follows the last `/` counts); names without a valid hash
    /// are left out.
    pub fn paths<'n>(names: impl IntoIterator<Item = &'n str>) -> Candidates {
        let mut map = HashMap::new();
        for name in names {
            let base = name.rsplit('/').next().unwrap_or(name);
            if let Some(hash) = hash_of(base.as_bytes()) {
                map.insert(hash, base.to_string());
            }
        }
        Candidates::Paths(map)
    }

    /// Every reference in `bytes` (at offset `base` of their file), in
    /// order; `done` is called with each window of `bytes` once scanned.
    /// Windows are searched in parallel, each prefetched in one call
    /// ([`crate::fs::pages::populate`]): the search runs at the speed
    /// the bytes stream from memory (docs/references.md, "What it costs").
    pub fn scan(&self, bytes: &[u8], base: u64, done: &(dyn Fn(&[u8]) + Sync)) -> Vec<Hit> {
        use rayon::prelude::*;
        let overlap = match self {
            Candidates::StoreDir(store) => store.len() + 1 + HASH_LEN + 1 + NAME_MAX + TAIL_MAX,
            Candidates::Paths(_) => HASH_LEN + 1 + NAME_MAX + TAIL_MAX,
        };
        let one = |start: usize| {
            let own = (bytes.len() - start).min(WINDOW);
            let end = (start + own + overlap).min(bytes.len());
            if own >= PREFETCH_MIN {
                crate::fs::pages::populate(&bytes[start..end]);
            }
            let (window, at) = (&bytes[start..end], base + start as u64);
            let mut hits = Vec::new();
            match self {
                Candidates::StoreDir(store) => scan_store_dir(store, window, own, at, &mut hits),
                Candidates::Paths(map) => scan_hashes(map, window, own, at, &mut hits),
            }
            done(&bytes[start..start + own]);
            hits
        };
        if bytes.len() <= WINDOW {
            return if bytes.is_empty() { Vec::new() } else { one(0) };
        }
        let starts: Vec<usize> = (0..bytes.len()).step_by(WINDOW).collect();
        let found: Vec<Vec<Hit>> = starts.into_par_iter().map(one).collect();
        found.into_iter().flatten().collect()
    }
}

/// The hash of a base name `<hash>-...` (or a bare hash).
pub fn hash_of(base: &[u8]) -> Option<[u8; HASH_LEN]> {
    let hash = base.get(..HASH_LEN)?;
    if !hash.iter().all(|&b| is_base32(b)) || base.get(HASH_LEN).is_some_and(|&b| b != b'-') {
        return None;
    }
    hash.try_into().ok()
}

/// Every bare `<hash>-<name>` in `bytes` (a file name, which cannot hold
/// the store folder): `(offset, base name)`, the hash the last 32 bytes of
/// a run of alphabet bytes (Nix's scanner looks at every window, so
/// `x<hash>` holds `<hash>` too), followed by `-` and a name. Which of them
/// are store paths the caller decides (a candidate's hash, or a path that
/// exists).
pub fn bare_names(bytes: &[u8]) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut i = 0;
    while i + HASH_LEN < bytes.len() {
        let run = bytes[i..].iter().take_while(|&&b| is_base32(b)).count();
        if run >= HASH_LEN {
            let at = i + run - HASH_LEN;
            let name = name_after(bytes, i + run);
            if !name.is_empty() {
                let end = i + run + 1 + name.len();
                found.push((at, String::from_utf8_lossy(&bytes[at..end]).into_owned()));
            }
        }
        i += run.max(1);
    }
    found
}

/// The name after a hash at `window[at..]`: `-` and the name's characters.
fn name_after(window: &[u8], at: usize) -> &[u8] {
    if window.get(at) != Some(&b'-') {
        return &[];
    }
    let rest = &window[at + 1..window.len().min(at + 1 + NAME_MAX)];
    let len = rest.iter().position(|&b| !is_name_char(b)).unwrap_or(rest.len());
    &rest[..len]
}

/// The path after a base name ending at `window[at..]`: `/` and what may
/// follow in a path, cut at [`TAIL_MAX`].
fn tail_after(window: &[u8], at: usize) -> String {
    if window.get(at) != Some(&b'/') {
        return String::new();
    }
    let rest = &window[at..window.len().min(at + TAIL_MAX)];
    let len = rest
        .iter()
        .position(|&b| !(is_name_char(b) || b"/@,%~".contains(&b)))
        .unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..len]).into_owned()
}

/// `<store>/<hash>-<name>` whose store folder starts before `own`.
fn scan_store_dir(store: &str, window: &[u8], own: usize, base: u64, hits: &mut Vec<Hit>) {
    let mut needle = store.as_bytes().to_vec();
    needle.push(b'/');
    for found in memchr::memmem::find_iter(window, &needle) {
        if found >= own {
            break;
        }
        let h = found + needle.len();
        let Some(hash) = window.get(h..h + HASH_LEN) else { continue };
        if !hash.iter().all(|&b| is_base32(b)) {
            continue;
        }
        let name = name_after(window, h + HASH_LEN);
        if name.is_empty() {
            continue;
        }
        let mut path = String::from_utf8_lossy(hash).into_owned();
        path.push('-');
        path.push_str(&String::from_utf8_lossy(name));
        let tail = tail_after(window, h + HASH_LEN + 1 + name.len());
        hits.push(Hit { offset: base + h as u64, path, tail });
    }
}

/// Nix's search: windows of 32 alphabet bytes whose hash is a candidate's,
/// starting before `own`.
fn scan_hashes(
    map: &HashMap<[u8; HASH_LEN], String>,
    window: &[u8],
    own: usize,
    base: u64,
    hits: &mut Vec<Hit>,
) {
    if map.is_empty() {
        return;
    }
    let mut i = 0;
    'outer: while i < own && i + HASH_LEN <= window.len() {
        for j in (0..HASH_LEN).rev() {
            if !is_base32(window[i + j]) {
                i += j + 1;
                continue 'outer;
            }
        }
        let hash: &[u8; HASH_LEN] = window[i..i + HASH_LEN].try_into().unwrap_or(&[0; HASH_LEN]);
        if let Some(path) = map.get(hash) {
            let name = name_after(window, i + HASH_LEN);
            let tail = match name.is_empty() {
                true => String::new(),
                false => tail_after(window, i + HASH_LEN + 1 + name.len()),
            };
            hits.push(Hit { offset: base + i as u64, path: path.clone(), tail });
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H1: &str = "0c7xgv7n2pn1ljvm3xrjjk2x2bbvyq1f";
    const H2: &str = "abcdfghijklmnpqrsvwxyz0123456789";

    fn store() -> Candidates {
        Candidates::StoreDir("/nix/store".into())
    }

    #[test]
    fn store_dir_mode_finds_paths_and_names() {
        let text =
            format!("xx/nix/store/{H1}-cuda_nvcc-12.8/bin/nvcc\0/nix/store/{H2}-gcc-wrapper-14");
        let hits = store().scan(text.as_bytes(), 100, &|_| {});
        assert_eq!(hits.len(), 2);
        let path = format!("{H1}-cuda_nvcc-12.8");
        let tail = "/bin/nvcc".to_string();
        assert_eq!(hits[0], Hit { offset: 100 + 13, path, tail });
        assert_eq!(hits[1].path, format!("{H2}-gcc-wrapper-14"));
        assert_eq!(hits[0].hash(), H1);
    }

    #[test]
    fn store_dir_mode_wants_a_hash_and_a_name() {
        for text in [
            format!("/nix/store/{}-x", &H1[..31]),
            format!("/nix/store/{H1}"),
            format!("/nix/store/{H1}-"),
            "/nix/store/eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee-x".to_string(),
        ] {
            assert!(store().scan(text.as_bytes(), 0, &|_| {}).is_empty(), "{text}");
        }
    }

    #[test]
    fn hash_mode_finds_bare_hashes_of_candidates_only() {
        let c = Candidates::paths([format!("/nix/store/{H1}-foo").as_str()]);
        // Nix's scanner wants no store folder and no dash: the hash alone counts.
        let text = format!("{H2}..{H1}zz/nix/store/{H1}-foo");
        let hits = c.scan(text.as_bytes(), 0, &|_| {});
        let offsets: Vec<u64> = hits.iter().map(|h| h.offset).collect();
        assert_eq!(offsets, vec![34, 34 + 32 + 2 + 11]);
        assert!(hits.iter().all(|h| h.path == format!("{H1}-foo")));
    }

    #[test]
    fn bare_names_are_whole_hash_runs_with_a_name() {
        // The hash ends the run (`x` is in the alphabet); a hash followed by
        // no name, and a run too short, are none.
        let text = format!("x{H1}-foo.pc/{H2}/{H1}-");
        let found = bare_names(text.as_bytes());
        assert_eq!(found, vec![(1, format!("{H1}-foo.pc"))]);
        assert!(bare_names(H1.as_bytes()).is_empty());
        assert!(bare_names(format!("{}-foo", &H1[1..]).as_bytes()).is_empty());
    }

    #[test]
    fn windows_overlap_so_nothing_is_lost_or_doubled() {
        let c = store();
        let mut bytes = vec![0u8; WINDOW * 2 + 500];
        let path = format!("/nix/store/{H1}-lib");
        for at in [WINDOW - 20, WINDOW - 5, 2 * WINDOW + 100] {
            bytes[at..at + path.len()].copy_from_slice(path.as_bytes());
        }
        let seen = std::sync::atomic::AtomicUsize::new(0);
        let add = |w: &[u8]| {
            seen.fetch_add(w.len(), std::sync::atomic::Ordering::Relaxed);
        };
        let hits = c.scan(&bytes, 0, &add);
        assert_eq!(seen.into_inner(), bytes.len());
        let offsets: Vec<u64> = hits.iter().map(|h| h.offset).collect();
        let want: Vec<u64> =
            [WINDOW - 20, WINDOW - 5, 2 * WINDOW + 100].iter().map(|&a| (a + 11) as u64).collect();
        // The second path overwrote the first's tail: only its own counts.
        assert_eq!(offsets, want[1..]);
        let c = Candidates::paths([format!("{H1}-lib").as_str()]);
        let offsets: Vec<u64> = c.scan(&bytes, 0, &|_| {}).iter().map(|h| h.offset).collect();
        assert_eq!(offsets, want[1..]);
    }
}
