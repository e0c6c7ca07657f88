//! The audit's arguments, as the front end's `--help` shows them: what to
//! check against and where the files come from ([`AuditArgs`]), and the
//! baseline ratchet ([`BaselineArgs`]). Kept apart from [`super::session`]
//! (which runs them) and [`super::policy`] (which turns them into decisions)
//! so that both read them without reading each other.

use std::path::PathBuf;

use super::sources::CacheArgs;

/// The modes that take none of the audit's flags (clap argument ids of the
/// front end).
const NOT_AUDIT: [&str; 3] = ["summary", "list_elf", "list_ptx"];

/// The audit's arguments: what to check against and where the files come
/// from. Flattened into the front end's arguments (the `--help` order is
/// the fields' order).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AuditArgs {
    /// Audit store paths as a binary cache serves them (file://, http://,
    /// https://), without realising them: each narinfo and NAR is fetched,
    /// checked against NarHash/NarSize and unpacked (object files only) to a
    /// temporary folder. Proxies: HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY.
    /// With --coverage: repeatable, asked in Nix's order (each cache's
    /// Priority, then the order given); the audit takes one.
    #[arg(long, value_name = "URL", conflicts_with_all = NOT_AUDIT)]
    pub substituter: Vec<String>,
    /// With --substituter: a key trusted to sign narinfo files (repeatable);
    /// with any, an unsigned or badly signed narinfo is refused.
    #[arg(long, value_name = "NAME:KEY", requires = "substituter")]
    pub trusted_public_key: Vec<String>,
    /// With --substituter: audit the closure (follow each narinfo's References).
    #[arg(long, requires = "substituter")]
    pub closure: bool,
    /// With --closure: fetch at most this many store paths (roots first,
    /// then by depth); the rest is one failure naming the depth reached.
    #[arg(long, value_name = "N", default_value_t = crate::store::budget::DEFAULT_MAX_PATHS, requires = "closure")]
    pub max_paths: usize,
    /// Cache and NAR audits: most bytes of unpacked files on disk at once,
    /// across all store paths (`K`, `M`, `G`, `T`: powers of 1024; runs of
    /// zeros take none). A store path that needs more fails, naming the file.
    #[arg(long, value_name = "BYTES", default_value = "16G", value_parser = crate::store::budget::parse_bytes)]
    pub max_unpack_bytes: u64,
    /// With --substituter: fail a download after this many seconds without
    /// a byte (there is no limit on the total time).
    #[arg(long, value_name = "SECS", default_value_t = crate::store::budget::DEFAULT_STALL_SECS, value_parser = clap::value_parser!(u64).range(1..))]
    pub stall_timeout: u64,
    /// Capabilities the build was asked for: `8.6 9.0`, `8.6;9.0`, `86;90`,
    /// `sm_86,sm_90`, `8.6;9.0+PTX`. Default: $cudaCapabilities, $CUDAARCHS,
    /// $TORCH_CUDA_ARCH_LIST; none means no capability checks.
    #[arg(long, value_name = "LIST", conflicts_with_all = NOT_AUDIT)]
    pub cuda_capabilities: Option<String>,
    /// Expect PTX for the last capability (Nixpkgs' cudaForwardCompat; the default).
    #[arg(long, overrides_with = "no_forward_compat", conflicts_with_all = NOT_AUDIT)]
    pub forward_compat: bool,
    /// Do not expect forward-compatibility PTX.
    #[arg(long, conflicts_with_all = NOT_AUDIT)]
    pub no_forward_compat: bool,
    /// CUDA version of the build (`12.8`): capabilities too old or too new for it are an error.
    #[arg(long, value_name = "X.Y", conflicts_with_all = NOT_AUDIT)]
    pub cuda_version: Option<String>,
    /// The driver link whose `lib` folder must be on RUNPATH.
    #[arg(long, value_name = "DIR", default_value = "/run/opengl-driver")]
    pub driver_link: String,
    /// Search the host's default library folders for files in the Nix store too.
    #[arg(long, conflicts_with_all = NOT_AUDIT)]
    pub system_lib_dirs: bool,
    /// Libraries for files of another machine (a cross build's outputs): its
    /// root, e.g. /usr/aarch64-linux-gnu. This machine's folders never count
    /// for them.
    #[arg(long, value_name = "DIR", conflicts_with_all = NOT_AUDIT)]
    pub sysroot: Option<PathBuf>,
    /// The driver the files must run on, as nvidia-smi prints it
    /// (`580.95.05`): findings when it cannot load a file's CUDA runtime or
    /// JIT-compile PTX that is a capability's only code; verdicts on the
    /// coverage lines.
    #[arg(long, value_name = "VERSION", conflicts_with_all = ["driver_cuda", "summary", "list_elf", "list_ptx"])]
    pub driver_version: Option<String>,
    /// The same, named by the CUDA version the driver supports (nvidia-smi's
    /// "CUDA Version", e.g. 13.0).
    #[arg(long, value_name = "X.Y", conflicts_with_all = NOT_AUDIT)]
    pub driver_cuda: Option<String>,
    /// Skip the dlopen pass: no dlopen-* findings, and files that import
    /// dlopen are not searched for the libraries they load (docs/dlopen.md).
    #[arg(long, conflicts_with_all = NOT_AUDIT)]
    pub no_dlopen: bool,
    /// Also list, per file in the JSON report, every dlopen target and how it
    /// resolves, the driver's, glibc's and the NEEDED closure's included
    /// (which get no finding): the whole prediction, to diff against
    /// `LD_DEBUG=files` (docs/dlopen.md).
    #[arg(long, conflicts_with_all = NOT_AUDIT)]
    pub dlopen_facts: bool,
    /// Find the Nix store paths each file references, as Nix's scanner does,
    /// located to the section and fatbin entry (docs/references.md). On by
    /// default inside a build, for store paths, NAR files and caches.
    #[arg(long, overrides_with = "no_references", conflicts_with_all = NOT_AUDIT)]
    pub references: bool,
    /// Do not look for store references (nor build-only ones).
    #[arg(long, conflicts_with_all = NOT_AUDIT)]
    pub no_references: bool,
    /// A store path (or its base name) no file may reference: a
    /// build-only-reference error (repeatable; turns --references on).
    #[arg(long, value_name = "PATH", conflicts_with_all = NOT_AUDIT)]
    pub forbid_reference: Vec<String>,
    /// With --closure: why is PATH in the closure (repeatable; a store path,
    /// its base name, its name without hash, or `build-only` for every
    /// build-only path found). Prints, instead of the audit's report, the
    /// closure's NAR sizes and every chain of references from the roots to
    /// PATH, with the file and section holding each (docs/references.md).
    #[arg(long, value_name = "PATH", requires = "closure")]
    pub why: Vec<String>,
}

impl AuditArgs {
    /// `--forward-compat` (`Some(true)`), `--no-forward-compat`
    /// (`Some(false)`, which wins), or neither.
    pub fn forward_compat(&self) -> Option<bool> {
        match (self.forward_compat, self.no_forward_compat) {
            (_, true) => Some(false),
            (true, _) => Some(true),
            _ => None,
        }
    }

    /// With `--substituter`: the cache, its keys, and transfers at a time:
    /// as many as the audit's own threads (rayon's pool: the CPUs this
    /// process may use, or `RAYON_NUM_THREADS`), since each transfer also
    /// decompresses and unpacks.
    /// The bounds of a cache or NAR audit (disk, closure size, stalls).
    pub(super) fn limits(&self) -> crate::store::budget::Limits {
        crate::store::budget::Limits {
            max_unpack_bytes: self.max_unpack_bytes,
            max_paths: self.max_paths,
            stall_timeout: std::time::Duration::from_secs(self.stall_timeout),
        }
    }

    pub(super) fn cache(&self) -> Option<CacheArgs> {
        self.substituter.first().map(|url| CacheArgs {
            url: url.clone(),
            keys: self.trusted_public_key.clone(),
            closure: self.closure,
            jobs: rayon::current_num_threads(),
            keep_all: !self.why.is_empty(),
        })
    }
}

/// The ratchet: compare with a baseline, or write one.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BaselineArgs {
    /// Fail only on findings not in this baseline (a ratchet).
    #[arg(long, value_name = "FILE", conflicts_with_all = NOT_AUDIT)]
    pub baseline: Option<PathBuf>,
    /// Write all findings to this baseline file and exit 0.
    #[arg(long, value_name = "FILE", conflicts_with_all = NOT_AUDIT)]
    pub write_baseline: Option<PathBuf>,
}
