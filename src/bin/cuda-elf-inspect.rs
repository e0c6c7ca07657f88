//! `cuda-elf-inspect`: which GPU architectures a built file really contains.
//!
//! Two modes, one reader (`nix_cuda_hooks::fatbin`, `hostelf`):
//! - `--list-elf` / `--list-ptx` [`--all-fatbin`]: cuobjdump's listing, byte
//!   for byte, with its exit status and stderr messages (cuobjdump's short
//!   forms `-lelf`, `-lptx`, `-all` work too), so scripts written for
//!   cuobjdump can call this instead;
//! - default: a per-file summary (SASS / PTX / link-stub-only architectures,
//!   codecs, sizes) in text or `--format json`, over files and folders.
//!
//! The audit mode of issue 5 extends the default mode: it reads the same
//! [`inspect::FileReport`]s and adds findings.

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Parser;
use nix_cuda_hooks::cli::{self, CommonArgs, Format, EXIT_FAILURE, EXIT_FINDINGS, EXIT_OK};
use nix_cuda_hooks::fatbin::listing::{self, ListOptions};
use nix_cuda_hooks::inspect::{self, FileReport};
use nix_cuda_hooks::walk;

/// List and summarise the GPU device code (SASS, PTX, LTO-IR) inside ELF
/// files, archives, fatbins and cubins.
///
/// With --list-elf/--list-ptx the output is that of `cuobjdump` with the same
/// options (stdout, stderr after the program name, exit status). Otherwise
/// each file (folders are walked) gets a summary.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Args {
    /// Files or folders to inspect.
    paths: Vec<PathBuf>,
    /// List the ELF cubins like `cuobjdump --list-elf` (also `-lelf`).
    #[arg(long)]
    list_elf: bool,
    /// List the PTX files like `cuobjdump --list-ptx` (also `-lptx`).
    #[arg(long)]
    list_ptx: bool,
    /// With --list-*: both `.nv_fatbin` and `__nv_relfatbin` (also `-all`).
    #[arg(long)]
    all_fatbin: bool,
    /// Summary: read entry headers only (no decompression, so link stubs are
    /// not told apart from code).
    #[arg(long)]
    headers_only: bool,
    /// Summary: also find fatbin containers outside the fatbin sections
    /// (cuFFT keeps thousands in `.data`); reported separately.
    #[arg(long)]
    scan: bool,
    #[command(flatten)]
    common: CommonArgs,
}

/// cuobjdump's single-dash long options, mapped to ours.
fn normalise_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    args.into_iter()
        .map(|a| match a.to_str() {
            Some("-lelf") => "--list-elf".into(),
            Some("-lptx") => "--list-ptx".into(),
            Some("-all") => "--all-fatbin".into(),
            _ => a,
        })
        .collect()
}

fn main() -> std::process::ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let prog = argv
        .first()
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("cuda-elf-inspect")
        .to_string();
    let args = Args::parse_from(normalise_args(argv));
    cli::run("cuda-elf-inspect", || run(args, &prog))
}

fn run(args: Args, prog: &str) -> anyhow::Result<u8> {
    if args.list_elf || args.list_ptx {
        if args.common.format != Format::Text {
            anyhow::bail!(
                "--format applies to the summary; --list-elf/--list-ptx print cuobjdump's text"
            );
        }
        return list(&args, prog);
    }
    if args.paths.is_empty() {
        anyhow::bail!("no paths given (try --help)");
    }
    let options = inspect::Options { deep: !args.headers_only, scan: args.scan };
    let mut reports: Vec<FileReport> = Vec::new();
    let mut status = EXIT_OK;
    for path in &args.paths {
        // A path that cannot be read is reported like a damaged file (and
        // makes the status 2); the other paths are still inspected.
        if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            let walked = walk::walk(path, &walk::Options::default(), |p, kind| {
                if !kind.file_type.is_file() {
                    return None;
                }
                let r = inspect::inspect_path(p, options);
                (r.device_code || !r.errors.is_empty() && r.format != "other").then_some(r)
            });
            for e in &walked.errors {
                eprintln!("cuda-elf-inspect: {e}");
                status = EXIT_FAILURE;
            }
            reports.extend(walked.items.into_iter().map(|(_, r)| r));
        } else {
            reports.push(inspect::inspect_path(path, options));
        }
    }
    for r in &reports {
        if r.format == "error" {
            status = EXIT_FAILURE;
        } else if !r.errors.is_empty() && status == EXIT_OK {
            status = EXIT_FINDINGS;
        }
    }
    match args.common.format {
        Format::Json => cli::print_json(&serde_json::json!({
            "version": 1,
            "files": reports,
        }))?,
        Format::Text => {
            let mut out = io::stdout().lock();
            for r in &reports {
                inspect::write_text(&mut out, r)?;
            }
            out.flush()?;
        }
    }
    Ok(status)
}

/// The cuobjdump-compatible listing. Several paths are listed one after the
/// other as separate cuobjdump runs would (counters restart per file); the
/// status is 1 if any run would fail, else 255 if any had no device code.
fn list(args: &Args, prog: &str) -> anyhow::Result<u8> {
    let cwd = std::env::current_dir().context("current folder")?;
    let options = ListOptions { elf: args.list_elf, ptx: args.list_ptx, all: args.all_fatbin };
    let mut out = io::BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let mut status = 0u8;
    for path in &args.paths {
        let outcome = listing::list_path(&mut out, path, &cwd, options)?;
        out.flush()?;
        let mut err = io::stderr().lock();
        for m in &outcome.messages {
            err.write_all(&m.line(prog))?;
        }
        status = match (status, outcome.status) {
            (1, _) | (_, 1) => 1,
            (255, _) | (_, 255) => 255,
            _ => 0,
        };
    }
    out.flush()?;
    Ok(status)
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
        let a = Args::parse_from(normalise_args(
            ["x", "-lelf", "-all", "-lptx", "f"].map(OsString::from),
        ));
        assert!(a.list_elf && a.list_ptx && a.all_fatbin);
        assert_eq!(a.paths, vec![PathBuf::from("f")]);
    }
}
