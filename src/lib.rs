//! nix-cuda-hooks: the library behind three static binaries that replace the
//! shell hooks Nixpkgs runs after CUDA builds.
//!
//! Each binary is a thin shell around a module here: its arguments and the
//! glue from them to the library live in [`cli`] (the top layer, which
//! nothing else imports), decisions live in the library so that tests and
//! the other binaries can reuse them.
//!
//! - [`output`]: the exit status, report formats, the sanitiser for names
//!   shown to people and the JSON envelope, shared by every tool.
//! - [`log`]: setup.sh-style logging (`LEVEL: caller: message` on `$NIX_LOG_FD`).
//! - [`buildenv`]: what a Nix build tells us: outputs, attributes, `TMPDIR`, `NIX_STORE`.
//! - [`walk`]: the parallel, deterministic walk of output trees.
//! - [`capabilities`]: the capability table (data) and NVIDIA's compatibility rules.
//! - [`symlinks`]: the noBrokenSymlinks decision procedure and its extra findings.
//! - [`fatbin`]: the device-code reader (bytes in, types out).
//! - [`listing`]: cuobjdump's `--list-elf`/`--list-ptx`, byte for byte.
//! - [`hostelf`]: where device code sits in host ELF files, archives, raw fatbins, cubins.
//! - [`devicecode`]: the one model of a file's device code and the one walk building it.
//! - [`inspect`]: the per-file report of `cuda-elf-inspect` (summary and JSON).
//! - [`elf`]: a bounds-checked ELF reader, the skip rules, the RUNPATH planner
//!   and the targeted writer/verifier behind `auto-add-driver-runpath`.
//! - [`audit`]: the checks of `cuda-elf-inspect` (linkage, RUNPATH, capability
//!   coverage), and its session from arguments to result (`audit::session`).
//! - [`atomic`]: replace a file through a temporary file and a rename.
//! - [`driver_runpath`]: autoAddDriverRunpath's walk, decisions and report.
//! - [`nar`], [`narinfo`]: Nix archives and binary-cache metadata, read as they stream in.
//! - [`cache`], [`mounts`]: binary caches and NAR files, unpacked and audited under their store names.
#![deny(missing_docs)]

pub mod audit;
pub mod buildenv;
pub mod cli;
pub mod cuda;
pub mod devicecode;
pub mod driver_runpath;
pub mod elf;
pub mod error;
pub mod fatbin;
pub mod fs;
pub mod inspect;
pub mod log;
pub mod output;
pub mod report;
pub mod store;
pub mod symlinks;
