//! A client of Nix binary caches (`file://` and `http(s)://`), and local NAR
//! files: what the audit reads instead of a realised store path.
//!
//! For one store path: fetch `<hash>.narinfo`, check it names that path,
//! check its signature when trusted keys are given, then stream the NAR it
//! names through the decompressor, a SHA-256 hasher and the NAR reader, and
//! write the files the audit needs below a temporary folder. The hash and
//! size are compared once the stream ends; a mismatch removes what was
//! written, so nothing unverified is ever audited. Memory is bounded (a
//! 64 KiB copy buffer, the decompressor's history, capped at 128 MiB by
//! [`crate::store::decompress`], one NAR token); disk holds
//! only the host objects of the paths being audited (docs/binary-cache.md).

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::Digest as _;

use crate::store::budget::{Budget, Limits};
use crate::store::confine;
use crate::store::decompress::{decompressor, decompressor_bounded};
use crate::store::nar::{self, NarReader, UnpackError, Unpacked};
use crate::store::narinfo::{
    check_base_name, Compression, NarInfo, NarInfoError, PublicKey, Sha256,
};
use crate::store::readahead::read_ahead_watched;
use crate::store::scratch::Scratch;

/// Largest narinfo or `nix-cache-info` accepted (real ones are under 4 KiB;
/// `References` of a large closure member can reach tens of KiB).
const MAX_INFO: u64 = 1 << 20;

/// Why a path could not be read from a cache. Each names the store path (or
/// the file or URL) it is about.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The cache's URL is not one this client speaks.
    #[error("{0}: not a binary cache URL (file://, http:// or https://)")]
    Url(String),
    /// The argument is not a store path of the cache's store.
    #[error("{path}: {reason}")]
    NotStorePath {
        /// The argument.
        path: String,
        /// Why.
        reason: String,
    },
    /// The cache has no narinfo, or no NAR, where it should.
    #[error("{path}: {url} not found in the cache")]
    NotFound {
        /// The store path (or file).
        path: String,
        /// What was asked for.
        url: String,
    },
    /// The transfer failed (network, TLS, HTTP status, file system).
    #[error("{path}: fetching {url}: {reason}")]
    Fetch {
        /// The store path (or file).
        path: String,
        /// What was asked for.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The narinfo is malformed, unsigned or badly signed, or names another path.
    #[error("{path}: narinfo: {source}")]
    NarInfo {
        /// The store path.
        path: String,
        /// What is wrong with it.
        source: NarInfoError,
    },
    /// A compression this client cannot decompress.
    #[error("{path}: compression {compression:?} is not supported (xz, zstd, bzip2, none)")]
    Compression {
        /// The store path (or file).
        path: String,
        /// The name the narinfo or file name gave.
        compression: String,
    },
    /// The NAR is malformed, truncated, or could not be written out.
    #[error("{path}: {source}")]
    Nar {
        /// The store path (or file).
        path: String,
        /// What went wrong.
        source: UnpackError,
    },
    /// `--closure` reached `--max-paths`.
    #[error("--closure: stopped at {max} store paths (--max-paths), at depth {depth}: {left} more references are not audited")]
    Closure {
        /// The limit.
        max: usize,
        /// References from the root: 1 for its direct references.
        depth: usize,
        /// References not fetched (each counted once per referrer).
        left: usize,
    },
    /// Closure members failing alike, beyond the first few shown.
    #[error("{count} more store paths of the closure (from {first} on): {reason}")]
    Alike {
        /// How many.
        count: usize,
        /// The first of them, by name.
        first: String,
        /// Their common reason.
        reason: String,
    },
    /// The NAR read fine but is not the one the narinfo describes.
    #[error("{path}: the NAR does not match its narinfo: {what}")]
    Mismatch {
        /// The store path.
        path: String,
        /// Which of hash and size, with both values.
        what: String,
    },
}

/// Where a binary cache is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Location {
    /// A folder (`file:///path`).
    Folder(PathBuf),
    /// An HTTP(S) base URL without a trailing `/`.
    Http(String),
}

/// A binary cache: its location, its store folder and the keys trusted to
/// sign it (none: signatures are not checked).
pub struct Cache {
    location: Location,
    agent: ureq::Agent,
    store_dir: String,
    keys: Vec<PublicKey>,
    limits: Limits,
    priority: Option<u32>,
}

/// Nix's priority of a cache whose `nix-cache-info` names none.
pub const DEFAULT_PRIORITY: u32 = 50;

/// One store path read from a cache.
#[derive(Debug)]
pub struct Fetched {
    /// Its narinfo (references, sizes).
    pub info: NarInfo,
    /// What was written below the destination.
    pub unpacked: Unpacked,
}

impl Cache {
    /// Opens the cache at `url`, reading its `nix-cache-info` for the store
    /// folder (`/nix/store` when the cache does not say). `limits` bound
    /// the closure and every download (its disk budget is the caller's).
    pub fn open(url: &str, keys: Vec<PublicKey>, limits: Limits) -> Result<Cache, CacheError> {
        let mut cache = Cache::connect(url, keys, limits, 0)?;
        cache.read_info(url)?;
        Ok(cache)
    }

    /// The cache at `url` without reading anything from it yet (see
    /// [`Cache::read_info`]); `pool` connections are kept alive for reuse
    /// (HTTP/1.1 keep-alive: one per concurrent transfer; 0 for ureq's default).
    pub fn connect(
        url: &str,
        keys: Vec<PublicKey>,
        limits: Limits,
        pool: usize,
    ) -> Result<Cache, CacheError> {
        let location = if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(CacheError::Url(url.to_string()));
            }
            Location::Folder(PathBuf::from(path.split('?').next().unwrap_or(path)))
        } else if url.starts_with("http://") || url.starts_with("https://") {
            Location::Http(url.trim_end_matches('/').to_string())
        } else {
            return Err(CacheError::Url(url.to_string()));
        };
        // Proxies come from the usual variables (ureq reads ALL_PROXY,
        // HTTPS_PROXY, HTTP_PROXY and NO_PROXY). A stalled connection fails
        // instead of hanging a CI job: connecting and the response's head
        // have time limits (at most the stall limit), a body has the stall
        // limit of `Limits` (no total: a large NAR on a slow link takes what
        // it takes).
        let stall = limits.stall_timeout;
        let mut config = ureq::Agent::config_builder()
            .timeout_connect(Some(stall.min(Duration::from_secs(30))))
            .timeout_recv_response(Some(stall.min(Duration::from_secs(60))))
            .timeout_recv_body(None)
            .user_agent(concat!("cuda-elf-inspect/", env!("CARGO_PKG_VERSION")));
        if pool > 0 {
            config = config.max_idle_connections(pool).max_idle_connections_per_host(pool);
        }
        let agent: ureq::Agent = config.build().into();
        let store_dir = "/nix/store".to_string();
        Ok(Cache { location, agent, store_dir, keys, limits, priority: None })
    }

    /// Reads `nix-cache-info` (`url` names it in errors): the store folder
    /// and the priority. A cache without one is a `/nix/store` cache of
    /// the default priority, as Nix takes it.
    pub fn read_info(&mut self, url: &str) -> Result<(), CacheError> {
        match self.get_text(url, "nix-cache-info") {
            Ok(text) => {
                for line in text.lines() {
                    if let Some(dir) = line.strip_prefix("StoreDir: ") {
                        self.store_dir = dir.trim_end_matches('/').to_string();
                    } else if let Some(p) = line.strip_prefix("Priority: ") {
                        self.priority = p.trim().parse().ok();
                    }
                }
                Ok(())
            }
            Err(CacheError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The cache's `Priority` (lower is asked first), Nix's default when
    /// its `nix-cache-info` names none.
    pub fn priority(&self) -> u32 {
        self.priority.unwrap_or(DEFAULT_PRIORITY)
    }

    /// The store folder the cache's paths live in.
    pub fn store_dir(&self) -> &str {
        &self.store_dir
    }

    /// The base name (`<hash>-<name>`) of `path` if it is a store path of this
    /// cache's store (a path below one, `/nix/store/x-y/lib`, is refused: a
    /// cache serves whole store paths).
    pub fn base_name<'p>(&self, path: &'p str) -> Result<&'p str, CacheError> {
        let not = |reason: String| CacheError::NotStorePath { path: path.to_string(), reason };
        let base = path
            .strip_prefix(self.store_dir.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
            .ok_or_else(|| not(format!("not in the cache's store {}", self.store_dir)))?;
        check_base_name(base).map_err(not)?;
        Ok(base)
    }

    /// Reads `store_path` from the cache into `dest` (which must not exist),
    /// writing the regular files whose first bytes `keep` accepts, each
    /// byte charged to `disk`. On any error `dest` is removed and what it
    /// was charged given back.
    pub fn fetch(
        &self,
        store_path: &str,
        dest: &Path,
        keep: &dyn Fn(&[u8]) -> bool,
        disk: &Budget,
    ) -> Result<Fetched, CacheError> {
        let info = self.narinfo(store_path)?;
        let unpacked = self.fetch_nar(&info, dest, keep, disk)?;
        Ok(Fetched { info, unpacked })
    }

    /// The narinfo of `store_path`: read, checked to name that path, and
    /// with trusted keys given, its signature checked.
    pub fn narinfo(&self, store_path: &str) -> Result<NarInfo, CacheError> {
        let base = self.base_name(store_path)?;
        let text = self.get_text(store_path, &format!("{}.narinfo", &base[..32]))?;
        let narinfo_error = |source| CacheError::NarInfo { path: store_path.to_string(), source };
        let info = NarInfo::parse(&text, &self.store_dir).map_err(narinfo_error)?;
        if info.store_path != store_path {
            return Err(narinfo_error(NarInfoError::Invalid {
                field: "StorePath",
                reason: format!("names {}, not the path asked for", info.store_path),
            }));
        }
        if !self.keys.is_empty() {
            info.verify(&self.store_dir, &self.keys).map_err(narinfo_error)?;
        }
        Ok(info)
    }

    /// Reads the NAR `info` describes into `dest` (which must not exist), as
    /// [`Cache::fetch`] does.
    pub fn fetch_nar(
        &self,
        info: &NarInfo,
        dest: &Path,
        keep: &dyn Fn(&[u8]) -> bool,
        disk: &Budget,
    ) -> Result<Unpacked, CacheError> {
        let result = self.fetch_nar_inner(info, dest, keep, disk);
        if result.is_err() {
            remove(dest);
        }
        result
    }

    fn fetch_nar_inner(
        &self,
        info: &NarInfo,
        dest: &Path,
        keep: &dyn Fn(&[u8]) -> bool,
        disk: &Budget,
    ) -> Result<Unpacked, CacheError> {
        let store_path = info.store_path.as_str();
        let compressed = self.get(store_path, &info.url)?;
        // Without a trusted key the NarSize is the cache's word only: the
        // stream may not expand more than a NAR does.
        let open = if self.keys.is_empty() { decompressor_bounded } else { decompressor };
        let stream = open(&info.compression, compressed).map_err(|compression| {
            CacheError::Compression { path: store_path.to_string(), compression }
        })?;
        let expected = Some((&info.nar_hash, info.nar_size));
        let stall = self.limits.stall_timeout;
        unpack_verified(stream, dest, keep, expected, stall, disk).map_err(|e| e.named(store_path))
    }

    /// Fetches each of `roots` into `scratch/<base name>` and, with
    /// `closure`, every path they refer to ([`Cache::closure`]), all held
    /// on disk together (charged to the scratch folder's budget); `jobs`
    /// transfers at a time. `done` is called after each path. One result
    /// per path, sorted by path. (The audit fetches the NARs in its own
    /// order and drops each once audited: see `audit::closure`.)
    pub fn fetch_all(
        &self,
        roots: &[String],
        closure: bool,
        scratch: &Scratch,
        keep: &(dyn Fn(&[u8]) -> bool + Sync),
        jobs: usize,
        done: &(dyn Fn(&str, &Result<Fetched, CacheError>) + Sync),
    ) -> Vec<(String, Result<Fetched, CacheError>)> {
        use rayon::prelude::*;
        let infos = self.closure(roots, closure, jobs);
        let one = |(path, info): (String, Result<NarInfo, CacheError>)| {
            let result = info.and_then(|info| {
                let target = scratch.path().join(self.base_name(&path)?);
                let unpacked = self.fetch_nar(&info, &target, keep, scratch.disk())?;
                scratch.hold(&target, unpacked.stored);
                Ok(Fetched { info, unpacked })
            });
            done(&path, &result);
            (path, result)
        };
        match rayon::ThreadPoolBuilder::new().num_threads(jobs.max(1)).build() {
            Ok(pool) => pool.install(|| infos.into_par_iter().map(one).collect()),
            Err(_) => infos.into_iter().map(one).collect(),
        }
    }

    /// The narinfo of each of `roots` and, with `closure`, of every path
    /// they refer to, transitively, level by level, `jobs` transfers at a
    /// time (network-bound, so more than the cores). One result per path,
    /// sorted by path; a path whose narinfo failed does not stop the others,
    /// and its references are not followed (they are unknown without it).
    ///
    /// Bounded: at most `max_paths` of [`Limits`] are looked up (roots
    /// first, then level by level); the references left are one
    /// [`CacheError::Closure`] result saying how many and at which depth.
    /// Closure members failing for the same reason beyond the first
    /// [`SHOWN_ALIKE`] are one [`CacheError::Alike`] result.
    pub fn closure(
        &self,
        roots: &[String],
        closure: bool,
        jobs: usize,
    ) -> Vec<(String, Result<NarInfo, CacheError>)> {
        use rayon::prelude::*;
        use std::collections::BTreeSet;
        // No threads to be had: fetch one at a time rather than fail.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(jobs.max(1)).build().ok();
        let mut seen: BTreeSet<String> = roots.iter().cloned().collect();
        let mut level: Vec<String> = seen.iter().cloned().collect();
        let mut results = Vec::new();
        let max = self.limits.max_paths.max(roots.len());
        let (mut depth, mut left, mut cut_at) = (0, 0usize, None);
        while !level.is_empty() {
            let one = |path: &String| (path.clone(), self.narinfo(path));
            let fetched: Vec<_> = match &pool {
                Some(pool) => pool.install(|| level.par_iter().map(one).collect()),
                None => level.iter().map(one).collect(),
            };
            let mut next = Vec::new();
            if closure {
                for (_, result) in &fetched {
                    let Ok(info) = result else { continue };
                    for r in &info.references {
                        let path = format!("{}/{r}", self.store_dir);
                        if seen.contains(&path) {
                            continue;
                        }
                        if seen.len() >= max {
                            left += 1;
                            cut_at.get_or_insert(depth + 1);
                            continue;
                        }
                        seen.insert(path.clone());
                        next.push(path);
                    }
                }
            }
            results.extend(fetched);
            level = next;
            depth += usize::from(!level.is_empty());
        }
        let mut results = summarise_alike(results, roots);
        if let Some(at) = cut_at {
            let error = CacheError::Closure { max, depth: at, left };
            results.push(("--closure".to_string(), Err(error)));
        }
        results.sort_by(|a, b| a.0.cmp(&b.0));
        results
    }

    /// A file of the cache as a stream; `NotFound` when it is not there.
    fn get(&self, path: &str, rel: &str) -> Result<Box<dyn Read + Send>, CacheError> {
        let fetch = |reason: String| CacheError::Fetch {
            path: path.to_string(),
            url: rel.to_string(),
            reason,
        };
        match &self.location {
            // Not a plain open: a FIFO there would block it forever.
            Location::Folder(root) => match confine::open_regular(&root.join(rel)) {
                Ok(f) => Ok(Box::new(f)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    Err(CacheError::NotFound { path: path.to_string(), url: rel.to_string() })
                }
                Err(e) => Err(fetch(crate::error::describe_io(&e))),
            },
            Location::Http(base) => {
                let url = format!("{base}/{rel}");
                match self.agent.get(&url).call() {
                    Ok(response) => Ok(Box::new(response.into_body().into_reader())),
                    Err(ureq::Error::StatusCode(404 | 403 | 410)) => {
                        Err(CacheError::NotFound { path: path.to_string(), url })
                    }
                    Err(e) => Err(CacheError::Fetch {
                        path: path.to_string(),
                        url,
                        reason: e.to_string(),
                    }),
                }
            }
        }
    }

    fn get_text(&self, path: &str, rel: &str) -> Result<String, CacheError> {
        let mut bytes = Vec::new();
        let stream = read_ahead_watched(self.get(path, rel)?, Some(self.limits.stall_timeout));
        let read = stream.take(MAX_INFO + 1).read_to_end(&mut bytes);
        let fetch = |reason: String| CacheError::Fetch {
            path: path.to_string(),
            url: rel.to_string(),
            reason,
        };
        read.map_err(|e| fetch(crate::error::describe_io(&e)))?;
        if bytes.len() as u64 > MAX_INFO {
            return Err(fetch(format!("larger than {MAX_INFO} bytes")));
        }
        String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            fetch(format!("not UTF-8 text (byte {at}); Nix writes ASCII"))
        })
    }
}

/// A local NAR file (`x.nar`, `x.nar.xz`, `x.nar.zst`, `x.nar.bz2`): its
/// compression from the name, read into `dest` like a cache's NAR (no hash
/// to compare with).
pub fn unpack_file(
    file: &Path,
    dest: &Path,
    keep: &dyn Fn(&[u8]) -> bool,
    disk: &Budget,
    stall: Duration,
) -> Result<Unpacked, CacheError> {
    let shown = file.display().to_string();
    let compression = nar_file_compression(file).ok_or_else(|| CacheError::Compression {
        path: shown.clone(),
        compression: file.extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default(),
    })?;
    let input = confine::open_regular(file).map_err(|e| CacheError::Fetch {
        path: shown.clone(),
        url: shown.clone(),
        reason: crate::error::describe_io(&e),
    })?;
    let stream = decompressor_bounded(&compression, Box::new(input))
        .map_err(|compression| CacheError::Compression { path: shown.clone(), compression })?;
    let result =
        unpack_verified(stream, dest, keep, None, stall, disk).map_err(|e| e.named(&shown));
    if result.is_err() {
        remove(dest);
    }
    result
}

/// The compression a NAR file's name says, or `None` when the name does not
/// end in `.nar` or a known `.nar.*`.
pub fn nar_file_compression(file: &Path) -> Option<Compression> {
    let name = file.file_name()?.to_str()?;
    Some(if name.ends_with(".nar") {
        Compression::None
    } else if name.ends_with(".nar.xz") {
        Compression::Xz
    } else if name.ends_with(".nar.zst") {
        Compression::Zstd
    } else if name.ends_with(".nar.bz2") {
        Compression::Bzip2
    } else {
        return None;
    })
}

/// A failure of [`unpack_verified`], before the path is known.
enum Unverified {
    Nar(UnpackError),
    Mismatch(String),
}

impl Unverified {
    fn named(self, path: &str) -> CacheError {
        match self {
            Unverified::Nar(source) => CacheError::Nar { path: path.to_string(), source },
            Unverified::Mismatch(what) => CacheError::Mismatch { path: path.to_string(), what },
        }
    }
}

/// Unpacks the NAR `stream` into `dest`, hashing it on the way; with an
/// expected hash and size, reads at most one byte more than the size and
/// compares both at the end.
fn unpack_verified(
    stream: Box<dyn Read + Send>,
    dest: &Path,
    keep: &dyn Fn(&[u8]) -> bool,
    expected: Option<(&Sha256, u64)>,
    stall: Duration,
    disk: &Budget,
) -> Result<Unpacked, Unverified> {
    // Decompression on its own thread, hashing and writing on this one.
    let stream = read_ahead_watched(stream, Some(stall));
    let limit = expected.map_or(u64::MAX, |(_, size)| size.saturating_add(1));
    let mut hashing = Hashing { inner: stream.take(limit), hasher: sha2::Sha256::new(), len: 0 };
    let mut reader = NarReader::new(&mut hashing);
    let unpacked = nar::unpack_within(&mut reader, dest, keep, disk);
    let len = hashing.len;
    let (hash, size) = match expected {
        Some(e) => e,
        None => return unpacked.map_err(Unverified::Nar),
    };
    // From here an error must give back what the unpacking charged.
    let charged = unpacked.as_ref().map_or(0, |u| u.stored);
    let refuse = |e: Unverified| {
        disk.credit(charged);
        Err(e)
    };
    if len > size {
        return refuse(Unverified::Mismatch(format!("NarSize is {size}, the NAR is longer")));
    }
    // A short or malformed stream is reported as what the reader saw.
    let unpacked = unpacked.map_err(Unverified::Nar)?;
    if len != size {
        return refuse(Unverified::Mismatch(format!("NarSize is {size}, the NAR has {len} bytes")));
    }
    let got = Sha256(hashing.hasher.finalize().into());
    if &got != hash {
        return refuse(Unverified::Mismatch(format!(
            "NarHash is {}, the NAR hashes to {}",
            hash.to_nix32(),
            got.to_nix32()
        )));
    }
    Ok(unpacked)
}

struct Hashing<R> {
    inner: R,
    hasher: sha2::Sha256,
    len: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
}

/// Removes a partly written destination; best effort, since the caller is
/// already reporting the error that made it partial.
fn remove(dest: &Path) {
    let _ = match fs::symlink_metadata(dest) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(dest),
        Ok(_) => fs::remove_file(dest),
        Err(_) => Ok(()),
    };
}

/// Closure members failing alike that are named one by one; the rest are
/// counted in one [`CacheError::Alike`].
pub const SHOWN_ALIKE: usize = 5;

/// What failures of different paths can share: the reason without the path
/// and the URL. `None` for what is never summarised (a path's own content).
fn alike_reason(e: &CacheError) -> Option<String> {
    match e {
        CacheError::NotFound { .. } => Some("not found in the cache".to_string()),
        CacheError::Fetch { reason, .. } => Some(format!("fetching failed: {reason}")),
        CacheError::NotStorePath { reason, .. } => Some(reason.clone()),
        _ => None,
    }
}

/// Keeps the roots' results and the first [`SHOWN_ALIKE`] closure members
/// of each alike reason; the rest of each become one result.
fn summarise_alike<T>(
    mut results: Vec<(String, Result<T, CacheError>)>,
    roots: &[String],
) -> Vec<(String, Result<T, CacheError>)> {
    use std::collections::BTreeMap;
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let mut counts: BTreeMap<String, (usize, String)> = BTreeMap::new();
    results.retain(|(path, result)| {
        let Err(e) = result else { return true };
        let Some(reason) = alike_reason(e).filter(|_| !roots.contains(path)) else {
            return true;
        };
        let entry = counts.entry(reason).or_insert((0, String::new()));
        entry.0 += 1;
        if entry.0 == SHOWN_ALIKE + 1 {
            entry.1 = path.clone();
        }
        entry.0 <= SHOWN_ALIKE
    });
    for (reason, (count, first)) in counts {
        if count > SHOWN_ALIKE {
            let error =
                CacheError::Alike { count: count - SHOWN_ALIKE, first: first.clone(), reason };
            results.push((first, Err(error)));
        }
    }
    results
}
