//! `no-broken-symlinks`: a drop-in for Nixpkgs' noBrokenSymlinks hook.
//!
//! Inside a build (called by `hooks/no-broken-symlinks.sh` with no arguments)
//! it checks every output as upstream does: same decisions, same log lines on
//! `$NIX_LOG_FD`, same summary, exit 1 after the first output with broken
//! links. With paths it checks those instead (an audit of `result/`).

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use nix_cuda_hooks::buildenv::BuildEnv;
use nix_cuda_hooks::cli::{self, CommonArgs, Format, EXIT_FINDINGS, EXIT_OK};
use nix_cuda_hooks::log::Logger;
use nix_cuda_hooks::symlinks::{self, Policy};

/// Fail when an output holds dangling or reflexive symlinks (noBrokenSymlinks).
///
/// Environment: `outputs` and each output's variable, or structured attributes
/// (`NIX_ATTRS_JSON_FILE`); `NIX_STORE` (default /nix/store), `TMPDIR`,
/// `dontCheckForBrokenSymlinks`, `NIX_LOG_FD`, `NIX_DEBUG`.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Args {
    /// Paths to check instead of the build's outputs.
    paths: Vec<PathBuf>,
    /// Also report findings upstream misses: symlink cycles, `file/` links to
    /// non-directories, `..` that resolves differently in the kernel,
    /// unreadable folders. They do not change the summary or exit status.
    #[arg(long)]
    extra: bool,
    /// Like --extra, and extra findings fail the check (exit 1).
    #[arg(long)]
    strict: bool,
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    cli::run("no-broken-symlinks", || run(args))
}

fn run(args: Args) -> anyhow::Result<u8> {
    let env = BuildEnv::from_env()?;
    // Outside a build, asking for extra findings means wanting to see them.
    let shown = args.common.verbose.max(u8::from(args.extra || args.strict));
    let log = Logger::from_env("noBrokenSymlinks").with_stderr_verbosity(shown);
    if args.paths.is_empty() && env.flag("dontCheckForBrokenSymlinks") {
        return Ok(EXIT_OK);
    }
    let explicit = !args.paths.is_empty();
    let targets = env.targets(&args.paths)?;
    let policy = Policy {
        store_dir: env.store_dir(),
        tmpdir: env.tmpdir(),
        extra: args.extra || args.strict || args.common.format == Format::Json,
        strict: args.strict,
        keep_all: args.common.format == Format::Json,
    };
    let mut reports = Vec::new();
    let mut status = EXIT_OK;
    for target in targets {
        // Paths given by hand are made absolute (lexically) so that the
        // reflexive test compares like with like; build outputs always are.
        let path = std::path::absolute(&target.path)
            .with_context(|| format!("{}", target.path.display()))?;
        if explicit {
            // A path typed by hand that does not exist is a mistake, not an
            // output the build chose not to create: fail instead of skipping.
            std::fs::symlink_metadata(&path).with_context(|| format!("{}", path.display()))?;
        }
        let report = symlinks::check_output(&path, &policy, &log);
        let failed = report.broken() || (args.strict && report.extra > 0);
        reports.push(report);
        if failed {
            status = EXIT_FINDINGS;
            break;
        }
    }
    if args.common.format == Format::Json {
        cli::print_json(&serde_json::json!({ "outputs": reports, "status": status }))?;
    }
    Ok(status)
}
