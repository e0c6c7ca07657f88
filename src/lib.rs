//! nix-cuda-hooks: the library behind three static binaries that replace the
//! shell hooks Nixpkgs runs after CUDA builds.
//!
//! Each binary is a thin shell around a module here: its arguments and the
//! glue from them to the library live in [`cli`] (the top layer, which
//! nothing else imports), decisions live in the library so that tests and
//! the other binaries can reuse them.
//!
//! The modules, by layer (lower layers never import higher ones; the map and
//! the rules are docs/architecture.md, enforced by tests/architecture.rs):
//! - [`error`]; [`log`] (setup.sh-style logging), [`output`] (exit status,
//!   formats, the one sanitiser, the JSON envelope), [`buildenv`] (what a Nix
//!   build tells us);
//! - [`fs`] (walk, typed paths, atomic rewrite), [`elf`] (our ELF reader,
//!   loader facts, the RUNPATH writer), [`fatbin`] (the device-code reader);
//! - [`store`] (NARs, narinfo, caches, mounts), [`cuda`] (capability and
//!   driver tables and rules);
//! - [`devicecode`] (the one model of a file's device code and its walk);
//! - the engines: [`symlinks`], [`driver_runpath`], [`inspect`] (`--summary`
//!   and the cuobjdump listing), [`audit`];
//! - [`report`] (one emitter per format);
//! - [`cli`] (the three front ends).
#![deny(missing_docs)]

pub mod audit;
pub mod buildenv;
pub mod cli;
pub mod cuda;
pub mod devicecode;
pub mod dlopen;
pub mod driver_runpath;
pub mod elf;
pub mod error;
pub mod fatbin;
pub mod fs;
pub mod inspect;
pub mod log;
pub mod output;
pub mod preflight;
pub mod report;
pub mod store;
pub mod symlinks;
