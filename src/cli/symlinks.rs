//! `no-broken-symlinks`' front end: its arguments, help text and exit
//! statuses, and the glue from them to [`crate::symlinks`]: which outputs
//! or typed paths are checked, against what, and the exit status.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Parser;

use crate::buildenv::{under, BuildEnv};
use crate::cli::{self, CommonArgs};
use crate::error::PathError;
use crate::fs::typed::{self, Follow};
use crate::log::Logger;
use crate::output::{Controls, Envelope, ExitStatus, Format};
use crate::symlinks::{self, Policy};

/// Fail when an output holds dangling or reflexive symlinks (Nixpkgs'
/// noBrokenSymlinks hook).
///
/// With no paths, inside a build: checks every output as the hook does, with
/// the same log lines on $NIX_LOG_FD. With paths: checks those trees (a
/// `result` link is followed); a tree outside $NIX_STORE has its links checked
/// against the store and against itself.
#[derive(Parser, Debug)]
#[command(
    name = "no-broken-symlinks",
    version,
    after_help = cli::after_help(ENVIRONMENT, EXIT_STATUS)
)]
pub struct Args {
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

const ENVIRONMENT: &[(&str, &str)] = &[
    ("outputs, $out...", "the build's outputs (or NIX_ATTRS_JSON_FILE with structured attributes)"),
    (
        "NIX_STORE",
        "only links into it (or into a tree given outside it) are checked [default: /nix/store]",
    ),
    ("TMPDIR", "links into it are broken (the build folder is gone at run time)"),
    ("dontCheckForBrokenSymlinks", "non-empty: skip the check of the outputs"),
    (
        "NIX_LOG_FD, NIX_DEBUG",
        "inside a build: where log lines go and how many (setup.sh's levels)",
    ),
];

const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "no broken links (extra findings only fail with --strict)"),
    ("1", "a dangling, reflexive or unreadable link (checking stops after that output)"),
    ("2", "the tool failed: bad arguments, a path that does not exist, no outputs"),
];

/// Runs the tool: checks the outputs (or the typed paths) until the first
/// with broken links, prints JSON if asked, returns the exit status.
pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let env = BuildEnv::from_env()?;
    // Outside a build, asking for extra findings means wanting to see them.
    let log = Logger::from_env("noBrokenSymlinks").with_stderr_verbosity(args.common.verbose);
    if args.paths.is_empty() && env.flag("dontCheckForBrokenSymlinks") {
        return Ok(ExitStatus::Ok);
    }
    let targets = env.targets(&args.paths)?;
    let explicit = !args.paths.is_empty();
    let policy = policy(&args, &env);
    let mut reports = Vec::new();
    let mut status = ExitStatus::Ok;
    let mut bad_arguments = Vec::new();
    for target in targets {
        let mut policy = policy.clone();
        // Paths given by hand are made absolute (lexically) so that the
        // reflexive test compares like with like; build outputs always are.
        let mut path = std::path::absolute(&target.path)
            .with_context(|| format!("{}", target.path.display()))?;
        if explicit {
            match explicit_root(&path, &policy) {
                // A path typed by hand that does not exist is a mistake, not
                // an output the build chose not to create: said, the rest
                // still checked, exit 2.
                Err(err) => {
                    let shown = crate::output::sanitize(&err.to_string(), Controls::Replace);
                    eprintln!("no-broken-symlinks: {shown}");
                    bad_arguments.push(err.to_string());
                    continue;
                }
                Ok((root, also)) => {
                    path = root;
                    policy.also_checked.extend(also);
                }
            }
        }
        let report = symlinks::check_output(&path, &policy, &log);
        let failed = report.broken() || (args.strict && report.extra > 0);
        reports.push(report);
        if failed {
            status = ExitStatus::Findings;
            break;
        }
    }
    if !bad_arguments.is_empty() {
        status = ExitStatus::Failure;
    }
    if args.common.format == Format::Json {
        cli::print_json(&Envelope::with_status("outputs", &reports, &bad_arguments, status))?;
    }
    Ok(status)
}

/// What the flags and the environment ask for.
fn policy(args: &Args, env: &BuildEnv) -> Policy {
    Policy {
        store_dir: env.store_dir(),
        also_checked: Vec::new(),
        given_by_hand: !args.paths.is_empty(),
        tmpdir: env.tmpdir(),
        extra: args.extra || args.strict || args.common.format == Format::Json,
        strict: args.strict,
        keep_all: args.common.format == Format::Json,
    }
}

/// Where to walk for a path given by hand, and the tree to check its links
/// against besides the store. A link to a folder (`result`) is followed:
/// `find -P` would report the link alone and check nothing below it. A root
/// outside `$NIX_STORE` is checked against itself too.
fn explicit_root(path: &Path, policy: &Policy) -> Result<(PathBuf, Option<OsString>), PathError> {
    let typed = typed::resolve(path, Follow::FolderLinks)?;
    // A single file or link is checked against the folder it sits in.
    let root = typed.root;
    let tree = if typed.is_dir {
        root.clone()
    } else {
        root.parent().map_or_else(|| root.clone(), Path::to_path_buf)
    };
    let inside = under(tree.as_os_str(), &policy.store_dir);
    Ok((root, (!inside).then(|| tree.into_os_string())))
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
