//! `cuda-preflight`: will GPU code run here? Checks a build sandbox or a
//! host (device nodes, driver folder, driver versions, and against a
//! closure the driver API functions it needs) before CUDA code starts;
//! `hooks/cuda-preflight.sh` runs it before a GPU test's check phase. The
//! arguments and glue live in [`nix_cuda_hooks::cli::preflight`], the
//! checks in [`nix_cuda_hooks::preflight`] (docs/preflight.md).

use clap::Parser;
use nix_cuda_hooks::cli::{self, preflight::Args};

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    cli::run("cuda-preflight", || cli::preflight::run(args))
}
