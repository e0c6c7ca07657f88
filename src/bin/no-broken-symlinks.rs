//! `no-broken-symlinks`: a drop-in for Nixpkgs' noBrokenSymlinks hook.
//!
//! Inside a build (called by `hooks/no-broken-symlinks.sh` with no arguments)
//! it checks every output as upstream does: same decisions, same log lines on
//! `$NIX_LOG_FD`, same summary, exit 1 after the first output with broken
//! links. With paths it checks those instead (an audit of `result/`). The
//! arguments, help text and glue live in [`nix_cuda_hooks::cli::symlinks`],
//! the decisions in [`nix_cuda_hooks::symlinks`].

use clap::Parser;
use nix_cuda_hooks::cli::{self, symlinks::Args};

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    cli::run("no-broken-symlinks", || cli::symlinks::run(args))
}
