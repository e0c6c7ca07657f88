//! `cuda-preflight`'s front end: its arguments, help text and exit
//! statuses, and the glue from them to [`crate::preflight`]: the closure
//! (`PATHS`, or `--closure` of a store path through `nix-store -qR`), the
//! run, the text or JSON report and the exit status.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context};
use clap::Parser;

use crate::cli::{self, HOOK_FORMATS};
use crate::cuda::capabilities::Capability;
use crate::output::{sanitize, Controls, Envelope, ExitStatus, Format};
use crate::preflight::{self, Report, Settings, Status};

/// Will GPU code run here? Check a build sandbox or a host before CUDA
/// code starts: the device nodes, the driver folder and its link, the
/// user-space driver against the kernel module, cuda_compat, and with
/// PATHS (or --closure) whether those files' runtime, PTX and driver API
/// functions are served by the driver found. The driver is never loaded.
#[derive(Parser, Debug)]
#[command(name = "cuda-preflight", version, after_help = cli::after_help(ENVIRONMENT, EXIT_STATUS))]
pub struct Args {
    /// Files or folders whose needs to check (the test's own outputs).
    paths: Vec<PathBuf>,
    /// A store path whose whole closure to check (`nix-store -qR`).
    #[arg(long, value_name = "STORE_PATH")]
    closure: Vec<PathBuf>,
    /// The driver link; its `lib` folder holds the driver's libraries.
    #[arg(long, default_value = "/run/opengl-driver", value_name = "DIR")]
    driver_link: PathBuf,
    /// The driver's library folder itself (a host that is not NixOS:
    /// `/usr/lib/x86_64-linux-gnu`); overrides --driver-link.
    #[arg(long, value_name = "DIR")]
    driver_folder: Option<PathBuf>,
    /// The GPUs' compute capabilities (`9.0`, or `8.6;9.0`) instead of
    /// asking nvidia-smi.
    #[arg(long, value_name = "LIST")]
    gpu_capability: Option<String>,
    /// A program of yours to run last (with `sh -c`): status 0 confirms.
    #[arg(long, value_name = "CMD")]
    probe: Option<String>,
    /// Report format on stdout.
    #[arg(long, value_parser = cli::format_parser(HOOK_FORMATS), default_value = "text")]
    format: Format,
    /// Also print the checks that passed.
    #[arg(short, long)]
    verbose: bool,
}

const ENVIRONMENT: &[(&str, &str)] = &[
    ("PATH", "where nvidia-smi (compute capabilities) and nix-store (--closure) are looked up"),
    ("NIX_STORE", "the store folder the closure's files are named in [default: /nix/store]"),
    ("dontCudaPreflight", "read by the setup hook: non-empty skips the check"),
];

const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "ready: no check failed (warnings may remain)"),
    ("1", "not ready: a check failed; each failure says why and what to do"),
    ("2", "the tool failed: bad arguments, a closure it could not list"),
];

/// Runs the tool.
pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let mut paths = args.paths.clone();
    for root in &args.closure {
        paths.extend(closure_of(root)?);
    }
    for p in &paths {
        std::fs::symlink_metadata(p).with_context(|| format!("{}", p.display()))?;
    }
    let capabilities = match &args.gpu_capability {
        Some(list) => list
            .split([';', ',', ' '])
            .filter(|s| !s.is_empty())
            .map(|s| {
                Capability::parse(s)
                    .with_context(|| format!("--gpu-capability: '{s}' is no compute capability"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?,
        None => Vec::new(),
    };
    let settings = Settings {
        dev: PathBuf::from("/dev"),
        driver_folder: args.driver_folder.clone().unwrap_or_else(|| args.driver_link.join("lib")),
        paths,
        capabilities,
        probe: args.probe.clone(),
    };
    let report = preflight::run(&settings);
    let status = if report.ready { ExitStatus::Ok } else { ExitStatus::Findings };
    match args.format {
        Format::Json => cli::print_json(&Envelope::with_status("preflight", &report, &[], status))?,
        _ => print_text(&report, args.verbose)?,
    }
    Ok(status)
}

/// `nix-store -qR PATH`: the store paths of the closure.
fn closure_of(root: &PathBuf) -> anyhow::Result<Vec<PathBuf>> {
    let out = Command::new("nix-store")
        .arg("-qR")
        .arg(root)
        .output()
        .with_context(|| format!("--closure {}: cannot run nix-store", root.display()))?;
    if !out.status.success() {
        bail!(
            "--closure {}: nix-store -qR failed: {}",
            root.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .collect())
}

/// One line per check (`LEVEL: cuda-preflight: id: message`), its fix on
/// the next; the verdict last.
fn print_text(report: &Report, verbose: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    for c in &report.checks {
        if c.status == Status::Ok && !verbose {
            continue;
        }
        let level = match c.status {
            Status::Error => "ERROR",
            Status::Warning => "WARN",
            Status::Info => "INFO",
            Status::Ok => "OK",
        };
        writeln!(
            out,
            "{level}: cuda-preflight: {}: {}",
            c.id,
            sanitize(&c.message, Controls::Replace)
        )?;
        if let Some(fix) = &c.fix {
            writeln!(out, "  fix: {}", sanitize(fix, Controls::Replace))?;
        }
    }
    let failed = report.checks.iter().filter(|c| c.status == Status::Error).count();
    let driver = report.driver.as_deref().unwrap_or("none");
    if report.ready {
        writeln!(out, "cuda-preflight: ready (driver {driver}, {} checks)", report.checks.len())?;
    } else {
        writeln!(out, "cuda-preflight: not ready: {failed} failed (driver {driver})")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Args::command().debug_assert();
    }
}
