//! `cuda-elf-inspect`: which GPU code a build really produced, and whether
//! the loader will find what it needs.
//!
//! Three modes, one reader (`nix_cuda_hooks::fatbin`, `hostelf`):
//! - default: the audit (`nix_cuda_hooks::audit`): per file, the device code
//!   (SASS with kernels / PTX / link stubs only), NEEDED, RUNPATH, and the
//!   findings of every check, in text, JSON, SARIF or GitHub annotations;
//!   inside a build (no paths, `NIX_LOG_FD` set) the outputs, logged as
//!   setup.sh does with the caller `cudaElfInspect`;
//! - `--list-elf` / `--list-ptx` [`--all-fatbin`]: cuobjdump's listing, byte
//!   for byte, with its exit status and stderr messages (cuobjdump's short
//!   forms `-lelf`, `-lptx`, `-all` work too);
//! - `--summary`: everything the reader knows about each file's device code
//!   (entries, codecs, sizes; decompresses every payload unless
//!   `--headers-only`).

use std::ffi::OsString;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context};
use clap::Parser;
use nix_cuda_hooks::audit::baseline::Baseline;
use nix_cuda_hooks::audit::linkage::Resolver;
use nix_cuda_hooks::audit::{self, policy, sources};
use nix_cuda_hooks::buildenv::BuildEnv;
use nix_cuda_hooks::cli::{self, EXIT_FAILURE, EXIT_OK};
use nix_cuda_hooks::inspect;
use nix_cuda_hooks::inspect::listing::{self, ListOptions};
use nix_cuda_hooks::log::{Logger, Msg};
use nix_cuda_hooks::report::{self, Color, Format, Report};

/// Audit the GPU code, NEEDED libraries and RUNPATHs of built files (which
/// capabilities each file's SASS and PTX cover, whether the loader will find
/// libcuda.so.1), or list their device code like cuobjdump --list-elf.
///
/// With no paths inside a Nix build, the build's outputs are audited and the
/// findings logged on $NIX_LOG_FD. Modes: the audit (default), --list-elf /
/// --list-ptx (cuobjdump's listing, byte for byte), --summary (everything the
/// reader knows about each file's device code).
#[derive(Parser, Debug)]
#[command(
    name = "cuda-elf-inspect",
    group(clap::ArgGroup::new("listing").args(["list_elf", "list_ptx"]).multiple(true)),
    version,
    after_help = cli::after_help(ENVIRONMENT, EXIT_STATUS)
)]
struct Args {
    /// Files or folders (walked; `result` links followed); `-` reads a
    /// newline-separated list from stdin. A file named `*.nar`, `*.nar.xz`,
    /// `*.nar.zst` or `*.nar.bz2` is audited as the store path it holds
    /// (shown `FILE.nar!/lib/...`). With --substituter: store paths.
    paths: Vec<PathBuf>,
    /// Audit store paths as a binary cache serves them (file://, http://,
    /// https://), without realising them: each narinfo and NAR is fetched,
    /// checked against NarHash/NarSize and unpacked (object files only) to a
    /// temporary folder. Proxies: HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY.
    #[arg(long, value_name = "URL", conflicts_with_all = ["summary", "list_elf", "list_ptx"])]
    substituter: Option<String>,
    /// With --substituter: a key trusted to sign narinfo files (repeatable);
    /// with any, an unsigned or badly signed narinfo is refused.
    #[arg(long, value_name = "NAME:KEY", requires = "substituter")]
    trusted_public_key: Vec<String>,
    /// With --substituter: audit the closure (follow each narinfo's References).
    #[arg(long, requires = "substituter")]
    closure: bool,
    /// With --closure: fetch at most this many store paths (roots first,
    /// then by depth); the rest is one failure naming the depth reached.
    #[arg(long, value_name = "N", default_value_t = nix_cuda_hooks::store::budget::DEFAULT_MAX_PATHS, requires = "closure")]
    max_paths: usize,
    /// Cache and NAR audits: most bytes of unpacked files on disk at once,
    /// across all store paths (`K`, `M`, `G`, `T`: powers of 1024; runs of
    /// zeros take none). A store path that needs more fails, naming the file.
    #[arg(long, value_name = "BYTES", default_value = "16G", value_parser = nix_cuda_hooks::store::budget::parse_bytes)]
    max_unpack_bytes: u64,
    /// With --substituter: fail a download after this many seconds without
    /// a byte (there is no limit on the total time).
    #[arg(long, value_name = "SECS", default_value_t = nix_cuda_hooks::store::budget::DEFAULT_STALL_SECS, value_parser = clap::value_parser!(u64).range(1..))]
    stall_timeout: u64,
    /// Capabilities the build was asked for: `8.6 9.0`, `8.6;9.0`, `86;90`,
    /// `sm_86,sm_90`, `8.6;9.0+PTX`. Default: $cudaCapabilities, $CUDAARCHS,
    /// $TORCH_CUDA_ARCH_LIST; none means no capability checks.
    #[arg(long, value_name = "LIST", conflicts_with_all = ["summary", "list_elf", "list_ptx"])]
    cuda_capabilities: Option<String>,
    /// Expect PTX for the last capability (Nixpkgs' cudaForwardCompat; the default).
    #[arg(long, overrides_with = "no_forward_compat", conflicts_with_all = ["summary", "list_elf", "list_ptx"])]
    forward_compat: bool,
    /// Do not expect forward-compatibility PTX.
    #[arg(long, conflicts_with_all = ["summary", "list_elf", "list_ptx"])]
    no_forward_compat: bool,
    /// CUDA version of the build (`12.8`): capabilities too old or too new for it are an error.
    #[arg(long, value_name = "X.Y", conflicts_with_all = ["summary", "list_elf", "list_ptx"])]
    cuda_version: Option<String>,
    /// The driver link whose `lib` folder must be on RUNPATH.
    #[arg(long, value_name = "DIR", default_value = "/run/opengl-driver")]
    driver_link: String,
    /// Search the host's default library folders for files in the Nix store too.
    #[arg(long, conflicts_with_all = ["summary", "list_elf", "list_ptx"])]
    system_lib_dirs: bool,
    /// Libraries for files of another machine (a cross build's outputs): its
    /// root, e.g. /usr/aarch64-linux-gnu. This machine's folders never count
    /// for them.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["summary", "list_elf", "list_ptx"])]
    sysroot: Option<PathBuf>,
    /// The driver the files must run on, as nvidia-smi prints it
    /// (`580.95.05`): findings when it cannot load a file's CUDA runtime or
    /// JIT-compile PTX that is a capability's only code; verdicts on the
    /// coverage lines.
    #[arg(long, value_name = "VERSION", conflicts_with_all = ["driver_cuda", "summary", "list_elf", "list_ptx"])]
    driver_version: Option<String>,
    /// The same, named by the CUDA version the driver supports (nvidia-smi's
    /// "CUDA Version", e.g. 13.0).
    #[arg(long, value_name = "X.Y", conflicts_with_all = ["summary", "list_elf", "list_ptx"])]
    driver_cuda: Option<String>,
    /// Report format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Colour in text output.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    color: Color,
    /// Fail only on findings not in this baseline (a ratchet).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["summary", "list_elf", "list_ptx"])]
    baseline: Option<PathBuf>,
    /// Write all findings to this baseline file and exit 0.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["summary", "list_elf", "list_ptx"])]
    write_baseline: Option<PathBuf>,
    /// List the ELF cubins like `cuobjdump --list-elf` (also `-lelf`).
    #[arg(long)]
    list_elf: bool,
    /// List the PTX files like `cuobjdump --list-ptx` (also `-lptx`).
    #[arg(long)]
    list_ptx: bool,
    /// With --list-*: both `.nv_fatbin` and `__nv_relfatbin` (also `-all`).
    #[arg(long, requires = "listing")]
    all_fatbin: bool,
    /// Instead of the audit: every entry of every file's device code.
    #[arg(long, conflicts_with_all = ["list_elf", "list_ptx"])]
    summary: bool,
    /// With --summary: read entry headers only (no decompression, so link
    /// stubs are not told apart from code).
    #[arg(long, requires = "summary")]
    headers_only: bool,
    /// Also read fatbin containers outside the fatbin sections (cuFFT keeps
    /// thousands in `.ldata`): the audit checks them (without it, it probes
    /// the start of each data section and reports what it did not read);
    /// --summary lists them separately.
    #[arg(long, conflicts_with_all = ["list_elf", "list_ptx"])]
    scan: bool,
    /// Outside a build, log more on stderr: errors and warnings always, -v
    /// notices, -vv infos, up to -vvvvvv. Inside a build NIX_DEBUG decides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

const ENVIRONMENT: &[(&str, &str)] = &[
    ("cudaCapabilities", "requested capabilities when --cuda-capabilities is not given (then CUDAARCHS, TORCH_CUDA_ARCH_LIST)"),
    ("cudaForwardCompat", "0/false: no forward-compatibility PTX expected (default on, as in Nixpkgs)"),
    ("outputs, $out...", "with no paths in a build: the outputs to audit (or NIX_ATTRS_JSON_FILE)"),
    ("NIX_STORE", "files below it resolve libraries without the host's folders [default: /nix/store]"),
    ("TMPDIR, NIX_BUILD_TOP", "build folders no RUNPATH entry may point into (besides /build); TMPDIR: where a cache or NAR audit unpacks objects"),
    ("HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY", "proxies for --substituter http(s)://"),
    ("NIX_LOG_FD, NIX_DEBUG", "inside a build: where findings are logged and how many (setup.sh's levels)"),
    ("NO_COLOR", "set: no colour in text output (--color auto)"),
];

const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "no error findings (or only baselined ones); --summary: every file read"),
    ("1", "error findings; --summary: damaged device code"),
    ("2", "the tool failed: bad arguments, a file or folder that could not be read"),
    ("255", "--list-elf/--list-ptx: no device code in a file (cuobjdump's statuses: 0, 1, 255)"),
];

fn main() -> std::process::ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let prog = argv
        .first()
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("cuda-elf-inspect")
        .to_string();
    let argv = match cli::cuobjdump_args(argv) {
        Ok(argv) => argv,
        Err(message) => {
            eprintln!("cuda-elf-inspect: {message}");
            return std::process::ExitCode::from(EXIT_FAILURE);
        }
    };
    let args = Args::parse_from(argv);
    cli::run("cuda-elf-inspect", || run(args, &prog))
}

fn run(args: Args, prog: &str) -> anyhow::Result<u8> {
    let text_only = |what: &str| {
        bail!("--format {} does not apply to {what}: use text or json", args.format.name())
    };
    if args.list_elf || args.list_ptx {
        if args.format != Format::Text {
            bail!("--format applies to the audit and --summary; --list-elf/--list-ptx print cuobjdump's text");
        }
        return list(&args, prog);
    }
    if args.summary {
        if !matches!(args.format, Format::Text | Format::Json) {
            return text_only("--summary");
        }
        return summary(&args);
    }
    run_audit(&args)
}

/// The paths given, `-` expanded from stdin.
fn paths(args: &Args) -> anyhow::Result<Vec<PathBuf>> {
    cli::expand_paths(&args.paths, io::stdin().lock()).context("reading the path list from stdin")
}

fn run_audit(args: &Args) -> anyhow::Result<u8> {
    let env = BuildEnv::from_env()?;
    let log = Logger::from_env("cudaElfInspect").with_stderr_verbosity(args.verbose);
    let flags = policy::Flags {
        cuda_capabilities: args.cuda_capabilities.clone(),
        forward_compat: match (args.forward_compat, args.no_forward_compat) {
            (_, true) => Some(false),
            (true, _) => Some(true),
            _ => None,
        },
        cuda_version: args.cuda_version.clone(),
        driver_link: args.driver_link.clone(),
        system_lib_dirs: args.system_lib_dirs,
        scan: args.scan,
        sysroot: args.sysroot.clone(),
        driver_version: args.driver_version.clone(),
        driver_cuda: args.driver_cuda.clone(),
    };
    let policy = policy::from_flags(&flags, &env)?;
    let paths = if args.paths.is_empty() {
        let outputs =
            env.outputs().context("no paths given and no build outputs found (try --help)")?;
        let (present, missing): (Vec<_>, Vec<_>) =
            outputs.into_iter().partition(|o| o.path.exists());
        for o in missing {
            log.warn(&Msg::new("skipping non-existent output ").p(&o.path));
        }
        present.into_iter().map(|o| o.path).collect()
    } else {
        paths(args)?
    };
    let cache = args.substituter.as_ref().map(|url| sources::CacheArgs {
        url: url.clone(),
        keys: args.trusted_public_key.clone(),
        closure: args.closure,
        jobs: 8,
    });
    if cache.is_some() && paths.is_empty() {
        bail!("--substituter needs store paths to audit (try --help)");
    }
    // issue 24: the bounds of a cache or NAR audit.
    nix_cuda_hooks::store::budget::configure(nix_cuda_hooks::store::budget::Limits {
        max_unpack_bytes: args.max_unpack_bytes,
        max_paths: args.max_paths,
        stall_timeout: std::time::Duration::from_secs(args.stall_timeout),
    });
    let progress = ProgressLine::new(io::stderr().is_terminal());
    let sources =
        sources::prepare(&paths, cache.as_ref(), &policy.store_dir, &|p| progress.show(p))?;
    progress.clear();
    if cache.as_ref().is_some_and(|c| c.keys.is_empty()) {
        // Said, not silent: Nix would refuse such paths unless told otherwise.
        eprintln!(
            "cuda-elf-inspect: no --trusted-public-key: narinfo signatures were not checked (NarHash and NarSize were)"
        );
    }
    let mut policy = policy;
    if let Some(store) = &sources.store_dir {
        policy.store_dir = store.clone();
    }
    if !sources.mounts.is_empty() {
        policy.resolver = Arc::new(Resolver::with_mounts(sources.mounts.clone()));
    }
    let result = audit::audit_roots(&sources.roots, &policy);
    drop(sources);
    if let Some(path) = &args.write_baseline {
        Baseline::of(&result.findings).save(path)?;
        eprintln!(
            "cuda-elf-inspect: wrote {} findings to {}",
            result.findings.len(),
            path.display()
        );
        for failure in &result.failures {
            eprintln!("cuda-elf-inspect: cannot examine {}", report::sanitize(failure));
        }
        return Ok(if result.failures.is_empty() { EXIT_OK } else { EXIT_FAILURE });
    }
    let (findings, known) = match &args.baseline {
        Some(path) => Baseline::load(path)?.filter(result.findings),
        None => (result.findings, 0),
    };
    let report = Report::new(result.files, findings, result.failures, known);
    if log.in_build() {
        report::buildlog::write(&log, &report);
    }
    // Inside a build the log lines are the text report.
    if !(log.in_build() && args.format == Format::Text) {
        let color = args.color.enabled(io::stdout().is_terminal());
        let mut out = io::stdout().lock();
        report::write(&mut out, &report, args.format, color)?;
        out.flush()?;
    }
    // Files that could not be examined make the status 2: say so on stderr
    // too, where `> report.txt` or a JSON consumer does not hide it (inside
    // a build the log lines above said it).
    if !log.in_build() {
        for failure in &report.failures {
            eprintln!("cuda-elf-inspect: cannot examine {}", report::sanitize(failure));
        }
    }
    Ok(report.exit_status())
}

/// The progress line of a cache audit on a terminal: store paths and NAR
/// bytes read so far, rewritten in place and cleared at the end; nothing
/// when stderr is not a terminal.
struct ProgressLine {
    on: bool,
    shown: Mutex<bool>,
}

impl ProgressLine {
    fn new(on: bool) -> Self {
        ProgressLine { on, shown: Mutex::new(false) }
    }

    fn show(&self, p: sources::Progress) {
        if !self.on {
            return;
        }
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        let mb = p.bytes as f64 / 1e6;
        eprint!(
            "\r\x1b[Kcuda-elf-inspect: {} read, {mb:.1} MB of NAR",
            report::count(p.paths, "store path", "store paths")
        );
        *shown = true;
    }

    fn clear(&self) {
        if *self.shown.lock().unwrap_or_else(|e| e.into_inner()) {
            eprint!("\r\x1b[K");
        }
    }
}

/// `--summary`: the reader's full per-file report.
fn summary(args: &Args) -> anyhow::Result<u8> {
    if args.paths.is_empty() {
        bail!("no paths given (try --help)");
    }
    let options = inspect::Options { deep: !args.headers_only, scan: args.scan };
    let (reports, errors) = inspect::inspect_paths(&paths(args)?, options);
    for e in &errors {
        eprintln!("cuda-elf-inspect: {e}");
    }
    if args.format == Format::Json {
        cli::print_json(&serde_json::json!({ "version": 1, "files": reports }))?;
    } else {
        let mut out = io::stdout().lock();
        for r in &reports {
            report::summary::write(&mut out, r)?;
        }
        out.flush()?;
    }
    Ok(inspect::exit_status(&reports, errors.len()))
}

/// The cuobjdump-compatible listing (messages name the program as called).
fn list(args: &Args, prog: &str) -> anyhow::Result<u8> {
    let cwd = std::env::current_dir().context("current folder")?;
    let options = ListOptions { elf: args.list_elf, ptx: args.list_ptx, all: args.all_fatbin };
    let mut out = io::BufWriter::with_capacity(1 << 16, io::stdout().lock());
    Ok(listing::list_paths(&mut out, &mut io::stderr(), &args.paths, &cwd, options, prog)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn cuobjdump_short_options_are_accepted() {
        let a = Args::parse_from(
            cli::cuobjdump_args(["x", "-lelf", "-all", "-lptx", "f"].map(OsString::from)).unwrap(),
        );
        assert!(a.list_elf && a.list_ptx && a.all_fatbin);
        assert_eq!(a.paths, vec![PathBuf::from("f")]);
    }
}
