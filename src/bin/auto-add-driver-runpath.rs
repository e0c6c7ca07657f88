//! `auto-add-driver-runpath`: a drop-in for Nixpkgs' autoAddDriverRunpath
//! (autoFixElfFiles + addDriverRunpath), patching RUNPATH in-process.
//!
//! Inside a build (called by `hooks/auto-add-driver-runpath.sh` with no
//! arguments) it patches every output; with paths it patches those. The
//! arguments, help text and glue live in
//! [`nix_cuda_hooks::cli::driver_runpath`], the work in
//! [`nix_cuda_hooks::driver_runpath`].

use clap::Parser;
use nix_cuda_hooks::cli::{self, driver_runpath::Args};

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    cli::run("auto-add-driver-runpath", || cli::driver_runpath::run(args))
}
