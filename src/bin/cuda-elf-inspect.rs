//! `cuda-elf-inspect`: which GPU code a build really produced, and whether
//! the loader will find what it needs.
//!
//! Three modes, one reader (`nix_cuda_hooks::fatbin`, `devicecode`):
//! - default: the audit (`nix_cuda_hooks::audit::session`): per file, the
//!   device code (SASS with kernels / PTX / link stubs only), NEEDED,
//!   RUNPATH, and the findings of every check, in text, JSON, SARIF or
//!   GitHub annotations; inside a build (no paths, `NIX_LOG_FD` set) the
//!   outputs, logged as setup.sh does with the caller `cudaElfInspect`;
//! - `--list-elf` / `--list-ptx` [`--all-fatbin`]: cuobjdump's listing, byte
//!   for byte, with its exit status and stderr messages (cuobjdump's short
//!   forms `-lelf`, `-lptx`, `-all` work too);
//! - `--summary`: everything the reader knows about each file's device code
//!   (entries, codecs, sizes; decompresses every payload unless
//!   `--headers-only`).
//!
//! The arguments and the modes are `nix_cuda_hooks::cli::inspect`.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;
use nix_cuda_hooks::cli::{self, inspect};
use nix_cuda_hooks::output::ExitStatus;

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let prog = inspect::program_name(&argv);
    // cuobjdump's single-dash options (`-lelf`) before clap reads them.
    let argv = match cli::cuobjdump_args(argv) {
        Ok(argv) => argv,
        Err(message) => {
            eprintln!("cuda-elf-inspect: {message}");
            return ExitCode::from(ExitStatus::Failure);
        }
    };
    let args = inspect::Args::parse_from(argv);
    cli::run("cuda-elf-inspect", || inspect::run(args, &prog))
}
