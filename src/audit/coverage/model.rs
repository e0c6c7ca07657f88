//! The coverage report: what a set of store paths finds in a list of binary
//! caches, per path, and with GPU depth what the served builds run on. One
//! model for every emitter and for `--merge`, which reads shard reports
//! back: so it is `Deserialize` too, and holds nothing that depends on how
//! the work was split (the input's order is each path's `index`).

use serde::{Deserialize, Serialize};

/// One binary cache, as asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheInfo {
    /// The URL given.
    pub url: String,
    /// Its `nix-cache-info` `Priority` (Nix's default 50 when none).
    pub priority: u32,
    /// Its store folder.
    pub store_dir: String,
    /// Why it stopped answering (at the start or mid-run), if it did.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub unreachable: Option<String>,
}

/// Where a path stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// A cache serves it (and with `--closure`, its whole closure).
    Served,
    /// A cache serves it but some of its closure is served by none.
    Partial,
    /// No cache serves it.
    NotServed,
    /// Not asked: the run was interrupted first.
    NotDone,
}

/// What one cache answered for one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Answer {
    /// A narinfo naming the path, signed by a trusted key (or no keys given).
    Served,
    /// No narinfo (404, 403, 410; or no file).
    NotFound,
    /// A narinfo, but not signed by any trusted key (Nix skips it).
    Untrusted,
    /// A narinfo that is not one (garbage, truncated, another path).
    BadNarinfo,
    /// The transfer failed after the retries (5xx, timeouts, disconnects,
    /// a cache gone).
    Error,
}

/// One cache's answer, with its reason when it is not `served`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheAnswer {
    /// The cache's URL.
    pub cache: String,
    /// What it answered.
    pub answer: Answer,
    /// Why, in words (the error, the signature's verdict).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
}

/// The closure of a served path, as the caches serve it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Closure {
    /// Store paths in the closure, the path itself included.
    pub paths: usize,
    /// Sum of their NarSize, as served.
    pub nar_size: u64,
    /// References served by no cache, sorted.
    pub missing: Vec<String>,
}

/// How a GPU of one requested capability runs a served path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runs {
    /// Some file with kernels has no code for it.
    Nothing,
    /// At least one file only through PTX JIT, none without code.
    PtxJit,
    /// SASS in every file with kernels.
    Sass,
    /// The path holds no file with kernels.
    NoDeviceCode,
}

/// One requested capability's answer for one path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilityAnswer {
    /// The capability (`8.6`).
    pub capability: String,
    /// The worst of its files.
    pub runs: Runs,
    /// Files with kernels that run nothing on it.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub lacking: Vec<String>,
    /// With a driver given: whether every file's code runs on it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub driver_runs: Option<bool>,
    /// Why not, when it does not (`ptx-too-new`, `runtime-too-new`, `unknown`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub driver_reason: Option<String>,
}

/// The GPU depth of a served path: what its NAR's device code covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// Files with kernels (SASS or PTX).
    pub files: usize,
    /// Capabilities some file has SASS for: what the build was made for.
    pub built_for: Vec<String>,
    /// Capabilities some file has PTX for.
    pub ptx: Vec<String>,
    /// Per requested capability.
    pub capabilities: Vec<CapabilityAnswer>,
    /// With a driver given alone: the capabilities the code targets whose
    /// GPUs are newer than the driver (first driven by a later CUDA
    /// release's driver), left out of the answers.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub newer_than_driver: Vec<String>,
    /// Files or the path itself that could not be audited.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub failures: Vec<String>,
}

impl Gpu {
    /// Whether every requested capability runs (SASS, PTX JIT, or no device
    /// code needed) on the driver given, and nothing failed.
    pub fn covered(&self) -> bool {
        self.failures.is_empty()
            && self
                .capabilities
                .iter()
                .all(|c| c.runs != Runs::Nothing && c.driver_runs != Some(false))
    }
}

/// One path of the input, answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathResult {
    /// Its place in the input (0-based), which orders reports and shards.
    pub index: usize,
    /// The store path.
    pub path: String,
    /// The attribute it was evaluated from (`--eval-jobs`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub attr: Option<String>,
    /// The output's name (`out`, `lib`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub output: Option<String>,
    /// Where it stands.
    pub status: Status,
    /// The first cache, in Nix's order, that serves it.
    pub served_by: Option<String>,
    /// The trusted key whose signature verified; `None` with `signature`
    /// saying why (`unchecked` when no key was given).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub signed_by: Option<String>,
    /// `trusted` or `unchecked` (no `--trusted-public-key`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub signature: Option<String>,
    /// NarSize of the served narinfo.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub nar_size: Option<u64>,
    /// FileSize of the served narinfo (what is downloaded).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub file_size: Option<u64>,
    /// Compression of the served NAR.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub compression: Option<String>,
    /// Each cache's answer, in Nix's order (every cache is asked, so that
    /// the report says which others would serve it too).
    pub caches: Vec<CacheAnswer>,
    /// With `--closure`: the closure as served.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub closure: Option<Closure>,
    /// With GPU depth: the served build's device code.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gpu: Option<Gpu>,
    /// With GPU depth: why a served path has no `gpu` (`interrupted`: the
    /// run was stopped by Ctrl-C before its NAR was audited).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub not_examined: Option<String>,
}

impl PathResult {
    /// Whether this path is a failure of the run's question: not served,
    /// partly served, not done, not examined, or not covered.
    pub fn failed(&self) -> bool {
        self.status != Status::Served
            || self.not_examined.is_some()
            || self.gpu.as_ref().is_some_and(|g| !g.covered())
    }
}

/// A line of `--eval-jobs` input that was skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadLine {
    /// 1-based line number.
    pub line: usize,
    /// Why it was skipped.
    pub reason: String,
}

/// The counts of a report, recomputed from its paths.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Paths in the report.
    pub paths: usize,
    /// Served, closure included.
    pub served: usize,
    /// Served, closure not.
    pub partial: usize,
    /// Served by no cache.
    pub not_served: usize,
    /// Not asked (interrupted).
    pub not_done: usize,
    /// With GPU depth: served paths whose requested capabilities all run.
    pub covered: usize,
    /// With GPU depth: served paths some requested capability does not.
    pub not_covered: usize,
    /// With GPU depth: served paths whose NAR was not audited (Ctrl-C).
    #[serde(skip_serializing_if = "is_zero", default)]
    pub not_examined: usize,
    /// Sum of NarSize of the served paths.
    pub nar_bytes: u64,
    /// Sum of FileSize of the served paths (what a download fetches).
    pub file_bytes: u64,
    /// Per cache (in order): paths it serves first.
    pub hits: Vec<usize>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A coverage report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The report's schema version.
    pub version: u32,
    /// The caches in Nix's order.
    pub caches: Vec<CacheInfo>,
    /// The requested capabilities (empty: no GPU depth for capabilities).
    pub capabilities: Vec<String>,
    /// The driver given, as written.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub driver: Option<String>,
    /// `K/N` in a shard's report; absent in a whole one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub shard: Option<String>,
    /// The counts.
    pub summary: Summary,
    /// Every path, in input order.
    pub paths: Vec<PathResult>,
    /// Input lines skipped.
    pub bad_lines: Vec<BadLine>,
}

impl Report {
    /// Recomputes the summary from the paths.
    pub fn summarise(&mut self) {
        let mut s = Summary { hits: vec![0; self.caches.len()], ..Summary::default() };
        for p in &self.paths {
            s.paths += 1;
            match p.status {
                Status::Served => s.served += 1,
                Status::Partial => s.partial += 1,
                Status::NotServed => s.not_served += 1,
                Status::NotDone => s.not_done += 1,
            }
            if p.not_examined.is_some() {
                s.not_examined += 1;
            }
            if let Some(g) = &p.gpu {
                if g.covered() {
                    s.covered += 1
                } else {
                    s.not_covered += 1
                }
            }
            if let Some(url) = &p.served_by {
                s.nar_bytes += p.nar_size.unwrap_or(0);
                s.file_bytes += p.file_size.unwrap_or(0);
                if let Some(i) = self.caches.iter().position(|c| &c.url == url) {
                    s.hits[i] += 1;
                }
            }
        }
        self.summary = s;
    }

    /// 0 every path served (and covered); 1 some path not; the tool's own
    /// failures are the caller's status 2.
    pub fn all_good(&self) -> bool {
        !self.paths.iter().any(PathResult::failed)
    }
}
