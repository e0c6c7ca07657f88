//! `auto-add-driver-runpath`'s front end: its arguments, help text and
//! exit statuses, and the glue from them to [`crate::driver_runpath`]:
//! the targets (the build's outputs, or paths typed by hand, links followed
//! through [`crate::fs::typed`]), the run, its report and the exit status.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;

use crate::buildenv::BuildEnv;
use crate::cli::{self, CommonArgs};
use crate::driver_runpath::emit::{self, Sinks};
use crate::driver_runpath::search::{self, SearchFolders};
use crate::driver_runpath::{self, Config};
use crate::fs::typed::{self, Follow};
use crate::log::Logger;
use crate::output::{Controls, Envelope, ExitStatus, Format};

/// Add the driver library folder (/run/opengl-driver/lib) to the RUNPATH of
/// every dynamic ELF file, as Nixpkgs' autoAddDriverRunpath does, without
/// patchelf.
///
/// Idempotent (a file whose search path already holds the driver entry is
/// left byte-identical), never writes empty entries, skips static and
/// static-pie executables, the dynamic loader, objects, cubins and debug
/// files; patches files of every machine (cross builds). With no paths,
/// inside a build: every output. With paths: those files and folders
/// (links given by hand are followed).
#[derive(Parser, Debug)]
#[command(
    name = "auto-add-driver-runpath",
    version,
    after_help = cli::after_help(ENVIRONMENT, EXIT_STATUS)
)]
pub struct Args {
    /// Files or folders to patch instead of the build's outputs.
    paths: Vec<PathBuf>,
    /// The driver link folder, an absolute path without `:`; its `lib`
    /// subfolder is added to every file [default: NixOS's, by the file's
    /// machine: /run/opengl-driver-32 for i686 files (NixOS's 32-bit x86
    /// driver), /run/opengl-driver for every other machine, 32-bit ARM
    /// included, as Nixpkgs' addDriverRunpath].
    #[arg(long, value_name = "DIR", value_parser = driver_link_arg)]
    driver_link: Option<PathBuf>,
    /// Put DIR (cuda_compat's `compat` folder) first and the driver entry
    /// second, in one rewrite (autoAddCudaCompatRunpath).
    #[arg(long, value_name = "DIR")]
    cuda_compat: Option<PathBuf>,
    /// Also append, after the old entries, each of these folders (absolute,
    /// `:`-separated; the option may be repeated) that holds a library the
    /// file loads with dlopen and cannot find through its own search path,
    /// its NEEDED libraries or the driver.
    #[arg(long, value_name = "DIR[:DIR...]")]
    dlopen_search: Vec<std::ffi::OsString>,
    /// Also remove the CUDA stubs entries as removeStubsFromRunpathHook does
    /// after the driver hook: an entry matching `*-cuda*/stubs` or
    /// `*-cuda*-stubs/lib*` becomes the driver entry unless the driver entry
    /// came earlier, in which case it goes. A stubs folder these patterns
    /// miss is kept and warned about.
    #[arg(long, alias = "replace-stubs")]
    remove_stubs: bool,
    /// Also append `$ORIGIN` when absent (buildRedist's `appendRunpaths`),
    /// before the dlopen folders.
    #[arg(long)]
    append_origin: bool,
    /// Write DT_RPATH instead of DT_RUNPATH.
    #[arg(long)]
    force_rpath: bool,
    /// Report what would change (exit 1 if anything would), write nothing.
    #[arg(long)]
    check: bool,
    /// An ELF file that cannot be patched safely is a warning, not an error.
    #[arg(long)]
    skip_unsupported: bool,
    /// fsync every rewritten file before it replaces the original.
    #[arg(long)]
    fsync: bool,
    /// Patch writable files in place: append the new data, verify, then
    /// switch with one write of the ELF header (hard links need no relinking;
    /// no copy of the file). Files that cannot be opened for writing are
    /// replaced through a temporary file as usual. Meant for builds.
    #[arg(long)]
    in_place: bool,
    #[command(flatten)]
    common: CommonArgs,
}

const ENVIRONMENT: &[(&str, &str)] = &[
    ("outputs, $out...", "the build's outputs (or NIX_ATTRS_JSON_FILE with structured attributes)"),
    (
        "NIX_LOG_FD, NIX_DEBUG",
        "inside a build: where log lines go and how many (setup.sh's levels)",
    ),
];

const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "every file has the driver entry (or was skipped on purpose)"),
    (
        "1",
        "--check found files to patch, an ELF file could not be patched, or an output is missing",
    ),
    ("2", "the tool failed: bad arguments, a path that does not exist, an I/O error"),
];

/// `--driver-link`: the loader splits RUNPATH at `:` and reads a relative
/// entry against the working directory, so only an absolute folder without
/// `:` is a driver link.
fn driver_link_arg(value: &str) -> Result<PathBuf, String> {
    driver_runpath::check_driver_link(std::path::Path::new(value)).map(|()| PathBuf::from(value))
}

/// Runs the tool: patches the targets, writes the report, returns the exit
/// status.
pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let env = BuildEnv::from_env()?;
    let fix_log = Logger::from_env("autoFixElfFiles").with_stderr_verbosity(args.common.verbose);
    let add_log = Logger::from_env("addDriverRunpath").with_stderr_verbosity(args.common.verbose);
    let stubs_log =
        Logger::from_env("removeStubsFromRunpath").with_stderr_verbosity(args.common.verbose);
    let mut targets = env.targets(&args.paths)?;
    // A path typed by hand that does not exist is a mistake: said, the other
    // paths still patched, exit 2 at the end. A link is followed: to a
    // folder, named as typed (`result/lib/x.so`); to a file, to the real
    // file, so that the file is patched and the link stays a link. Without
    // this the walk, which never follows links, would find nothing and say
    // nothing.
    let mut bad_arguments = Vec::new();
    if !args.paths.is_empty() {
        targets.retain_mut(|t| match typed::resolve(&t.path, Follow::Links) {
            Ok(resolved) => {
                t.path = resolved.root;
                true
            }
            Err(err) => {
                let shown = crate::output::sanitize(&err.to_string(), Controls::Replace);
                eprintln!("auto-add-driver-runpath: {shown}");
                bad_arguments.push(err.to_string());
                false
            }
        });
    }
    let cfg = config(&args)?;
    let report = driver_runpath::run(&targets, &cfg);
    let text = args.common.format == Format::Text;
    let (mut stdout, mut stderr) = (std::io::stdout().lock(), std::io::stderr().lock());
    let mut sinks = Sinks {
        fix_log: &fix_log,
        add_log: &add_log,
        stubs_log: &stubs_log,
        text,
        stdout: &mut stdout,
        stderr: &mut stderr,
    };
    emit::emit(&report, &cfg, &mut sinks)?;
    drop((stdout, stderr));
    let mut status = emit::exit_status(&report, &cfg);
    if !bad_arguments.is_empty() {
        status = ExitStatus::Failure;
    }
    if !text {
        cli::print_json(&Envelope::with_status("report", &report, &bad_arguments, status))?;
    }
    Ok(status)
}

/// The run's configuration from the flags; a `--dlopen-search` folder that
/// cannot be one is an error before anything is written.
fn config(args: &Args) -> anyhow::Result<Config> {
    let folders = search::split_arguments(&args.dlopen_search);
    if !args.dlopen_search.is_empty() && folders.is_empty() {
        anyhow::bail!("--dlopen-search: no folder given (expected DIR[:DIR...])");
    }
    let dlopen_search = if args.dlopen_search.is_empty() {
        None
    } else {
        Some(Arc::new(SearchFolders::open(&folders)?))
    };
    Ok(Config {
        driver: driver_runpath::Driver::from_link(args.driver_link.as_deref()),
        compat_entry: args.cuda_compat.as_deref().map(driver_runpath::folder_entry),
        remove_stubs: args.remove_stubs,
        append_origin: args.append_origin,
        force_rpath: args.force_rpath,
        check: args.check,
        skip_unsupported: args.skip_unsupported,
        sync: args.fsync,
        in_place: args.in_place,
        dlopen_search,
    })
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
