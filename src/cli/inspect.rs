//! `cuda-elf-inspect`'s front end: its arguments, and the three modes they
//! choose. The audit ([`crate::audit::session`]), the cuobjdump listing
//! ([`crate::inspect::listing`], byte for byte, with cuobjdump's statuses)
//! and `--summary` ([`crate::inspect`]); each printed here, on stdout, with
//! what could not be read said on stderr.

use std::ffi::OsString;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Context};

use crate::audit::session::{AuditArgs, BaselineArgs, Outcome, Session};
use crate::audit::{failure::Failure, sources};
use crate::buildenv::BuildEnv;
use crate::cli;
use crate::devicecode::Scan;
use crate::inspect::listing::{self, ListOptions};
use crate::log::Logger;
use crate::output::{sanitize, Controls, Envelope, ExitStatus, Format};
use crate::report::{self, Color, Report};

/// The audit's `--format`s, in its words.
const AUDIT_FORMATS: &[(Format, &str)] = &[
    (Format::Text, "Grouped per file, for people (colour on a terminal)"),
    (Format::Json, "One JSON document (schema in docs/cuda-elf-inspect.md)"),
    (Format::Sarif, "SARIF 2.1.0, for code-scanning services"),
    (Format::Github, "GitHub Actions workflow commands (annotations)"),
    (Format::Html, "One self-contained HTML page: coverage matrix, findings by check"),
    (
        Format::HydraMetrics,
        "Hydra's nix-support/hydra-metrics lines (names in docs/cuda-elf-inspect.md)",
    ),
];

/// Audit the GPU code, NEEDED libraries and RUNPATHs of built files (which
/// capabilities each file's SASS and PTX cover, whether the loader will find
/// libcuda.so.1), or list their device code like cuobjdump --list-elf.
///
/// With no paths inside a Nix build, the build's outputs are audited and the
/// findings logged on $NIX_LOG_FD. Modes: the audit (default), --list-elf /
/// --list-ptx (cuobjdump's listing, byte for byte), --summary (everything the
/// reader knows about each file's device code).
#[derive(clap::Parser, Debug)]
#[command(
    name = "cuda-elf-inspect",
    group(clap::ArgGroup::new("listing").args(["list_elf", "list_ptx"]).multiple(true)),
    version,
    after_help = super::after_help(ENVIRONMENT, EXIT_STATUS)
)]
pub struct Args {
    /// Files or folders (walked; `result` links followed); `-` reads a
    /// newline-separated list from stdin. A file named `*.nar`, `*.nar.xz`,
    /// `*.nar.zst` or `*.nar.bz2` is audited as the store path it holds
    /// (shown `FILE.nar!/lib/...`). With --substituter: store paths.
    paths: Vec<PathBuf>,
    #[command(flatten)]
    audit: AuditArgs,
    #[command(flatten)]
    coverage: crate::audit::coverage::CoverageArgs,
    /// Report format.
    #[arg(long, value_parser = cli::format_parser(AUDIT_FORMATS), default_value = "text")]
    format: Format,
    /// Also write the audit's report in FORMAT to FILE (`json=report.json`),
    /// from the same audit; repeatable. Each FILE is replaced whole (the old
    /// file or the complete new one, its mode kept less setuid/setgid; a
    /// link's target is replaced); a FIFO or a character device such as
    /// /dev/stdout is written to; text is written without colour. Nix's
    /// audit derivations write all their reports this way.
    #[arg(long, value_name = "FORMAT=FILE", value_parser = parse_output,
          conflicts_with_all = ["list_elf", "list_ptx", "summary", "explain", "write_baseline", "why"])]
    output: Vec<(Format, PathBuf)>,
    /// Colour in text output.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    color: Color,
    #[command(flatten)]
    baseline: BaselineArgs,
    /// List the ELF cubins like `cuobjdump --list-elf` (also `-lelf`).
    #[arg(long)]
    list_elf: bool,
    /// List the PTX files like `cuobjdump --list-ptx` (also `-lptx`).
    #[arg(long)]
    list_ptx: bool,
    /// With --list-*: both `.nv_fatbin` and `__nv_relfatbin` (also `-all`).
    #[arg(long, requires = "listing")]
    all_fatbin: bool,
    /// Instead of the audit: every entry of every file's device code.
    #[arg(long, conflicts_with_all = ["list_elf", "list_ptx"])]
    summary: bool,
    /// With --summary: read entry headers only (no decompression, so link
    /// stubs are not told apart from code).
    #[arg(long, requires = "summary")]
    headers_only: bool,
    /// Also search the bytes no section holds (headers, padding) for fatbin
    /// containers outside the fatbin sections. By default the audit and
    /// --summary search every loaded data section whole (cuFFT's thousands
    /// in `.data`, CUPTI's in the middle of `.rodata`); --summary lists
    /// those entries separately.
    #[arg(long, conflicts_with_all = ["list_elf", "list_ptx", "no_scan"])]
    scan: bool,
    /// Do not read fatbin containers outside the fatbin sections: one found
    /// at the start of a data section is reported unread (the audit's
    /// device-code-not-scanned, --summary's "not read"), and no capability
    /// is judged on them.
    #[arg(long, conflicts_with_all = ["list_elf", "list_ptx"])]
    no_scan: bool,
    /// Print a check's row of the checks table (severity, why, fix, how a
    /// baseline remembers it) and exit; alone, list every check's id.
    #[arg(long, value_name = "CHECK", num_args = 0..=1)]
    explain: Option<Option<String>>,
    /// Outside a build, log more on stderr: errors and warnings always, -v
    /// notices, -vv infos, up to -vvvvvv. Inside a build NIX_DEBUG decides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

const ENVIRONMENT: &[(&str, &str)] = &[
    ("cudaCapabilities", "requested capabilities when --cuda-capabilities is not given (then CUDAARCHS, TORCH_CUDA_ARCH_LIST)"),
    ("cudaForwardCompat", "0/false: no forward-compatibility PTX expected (default on, as in Nixpkgs)"),
    ("outputs, $out...", "with no paths in a build: the outputs to audit (or NIX_ATTRS_JSON_FILE)"),
    ("NIX_STORE", "files below it resolve libraries without the host's folders [default: /nix/store]"),
    ("TMPDIR, NIX_BUILD_TOP", "build folders no RUNPATH entry may point into (besides /build); TMPDIR: where a cache or NAR audit unpacks objects"),
    ("HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY", "proxies for --substituter http(s)://"),
    ("NIX_LOG_FD, NIX_DEBUG", "inside a build: where findings are logged and how many (setup.sh's levels)"),
    ("NO_COLOR", "set: no colour in text output (--color auto)"),
];

const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "no error findings (or only baselined ones); --summary: every file read"),
    ("1", "error findings; --summary: damaged device code; --coverage: a path not served (or partly, or not done, or not examined after Ctrl-C) or a requested capability not covered"),
    ("2", "the tool failed: bad arguments, a file or folder that could not be read"),
    ("255", "--list-elf/--list-ptx: no device code in a file (cuobjdump's statuses: 0, 1, 255)"),
];

/// `--output FORMAT=FILE`: one of the audit's formats, a file name.
fn parse_output(value: &str) -> Result<(Format, PathBuf), String> {
    let names = || AUDIT_FORMATS.iter().map(|(f, _)| f.name()).collect::<Vec<_>>().join(", ");
    let Some((name, file)) = value.split_once('=') else {
        return Err(format!("expected FORMAT=FILE, FORMAT one of {}", names()));
    };
    let format = AUDIT_FORMATS
        .iter()
        .map(|(f, _)| *f)
        .find(|f| f.name() == name)
        .ok_or_else(|| format!("unknown format '{name}' (one of {})", names()))?;
    if file.is_empty() {
        return Err(format!("no file after '{name}='"));
    }
    Ok((format, PathBuf::from(file)))
}

/// The name the program was called by (cuobjdump's messages use it).
pub fn program_name(argv: &[OsString]) -> String {
    argv.first()
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("cuda-elf-inspect")
        .to_string()
}

/// Runs the mode the arguments choose; `prog` names the program in the
/// listing's messages.
pub fn run(args: Args, prog: &str) -> anyhow::Result<ExitStatus> {
    let text_only = |what: &str| {
        bail!("--format {} does not apply to {what}: use text or json", args.format.name())
    };
    if let Some(id) = &args.explain {
        return explain(&args, id.as_deref());
    }
    if args.list_elf || args.list_ptx {
        if args.format != Format::Text {
            bail!("--format applies to the audit and --summary; --list-elf/--list-ptx print cuobjdump's text");
        }
        return list(&args, prog);
    }
    if args.coverage.coverage {
        return super::coverage::run(&super::coverage::Request {
            paths: &args.paths,
            audit: &args.audit,
            coverage: &args.coverage,
            format: args.format,
            outputs: &args.output,
        });
    }
    if args.summary {
        if !matches!(args.format, Format::Text | Format::Json) {
            return text_only("--summary");
        }
        return summary(&args);
    }
    audit(&args)
}

/// `--explain [CHECK]`: the checks table, read by a person.
fn explain(args: &Args, id: Option<&str>) -> anyhow::Result<ExitStatus> {
    if !args.paths.is_empty() {
        bail!("--explain takes one check id and no paths");
    }
    let mut out = io::stdout().lock();
    match id {
        None => report::explain::list(&mut out)?,
        Some(id) => report::explain::explain(&mut out, id)?,
    }
    out.flush()?;
    Ok(ExitStatus::Ok)
}

/// The paths given, `-` expanded from stdin.
fn paths(args: &Args) -> anyhow::Result<Vec<PathBuf>> {
    cli::expand_paths(&args.paths, io::stdin().lock()).context("reading the path list from stdin")
}

/// Says on stderr what could not be examined.
fn say_failures(failures: &[Failure]) {
    for failure in failures {
        let line = sanitize(&failure.to_string(), Controls::Replace);
        eprintln!("cuda-elf-inspect: cannot examine {line}");
    }
}

/// How to look for fatbins outside the fatbin sections, the same for the
/// audit and `--summary`.
fn scan(args: &Args) -> Scan {
    match (args.scan, args.no_scan) {
        (true, _) => Scan::Full,
        (_, true) => Scan::Probe,
        _ => Scan::Found,
    }
}

/// The audit: the session's result printed in the format asked for
/// (inside a build, logged too).
fn audit(args: &Args) -> anyhow::Result<ExitStatus> {
    let env = BuildEnv::from_env()?;
    let log = Logger::from_env("cudaElfInspect").with_stderr_verbosity(args.verbose);
    let session = Session::new(&args.audit, &args.baseline, scan(args), &env)?;
    let asked = session.asked();
    let given = if args.paths.is_empty() { Vec::new() } else { paths(args)? };
    let paths = session.paths(given, &env, &log)?;
    let prepared = session.prepare(&paths)?;
    if prepared.signatures_unchecked() {
        eprintln!(
            "cuda-elf-inspect: no --trusted-public-key: narinfo signatures were not checked (NarHash and NarSize were)"
        );
    }
    if !args.audit.why.is_empty() {
        return why(args, prepared);
    }
    let (audit, baselined) = match finish(prepared)? {
        Outcome::BaselineWritten { path, findings, failures } => {
            let path = sanitize(&path.to_string_lossy(), Controls::Replace);
            eprintln!("cuda-elf-inspect: wrote {findings} findings to {path}");
            say_failures(&failures);
            return Ok(ExitStatus::of(!failures.is_empty(), false));
        }
        Outcome::Audited { audit, baselined } => (audit, baselined),
    };
    let objects: std::collections::BTreeSet<&std::path::Path> =
        audit.files.iter().map(|f| f.path.as_path()).collect();
    let others = report::other_references(&audit.references, &objects);
    let mut report = Report::new(audit.files, audit.findings, audit.failures, baselined);
    report.references = others;
    report.asked = asked;
    if log.in_build() {
        report::buildlog::write(&log, &report);
    }
    // Inside a build the log lines are the text report.
    let printed = if log.in_build() && args.format == Format::Text {
        Ok(())
    } else {
        print_report(&report, args.format, args.color)
    };
    // The files are written whatever became of stdout: a reader that
    // stopped reading (`| head -1`) must not cost the reports a CI step or
    // a derivation keeps (issue 29).
    for (format, file) in &args.output {
        crate::fs::atomic::write_whole(file, |w| report::write(w, &report, *format, false))
            .with_context(|| format!("--output {}", format.name()))?;
    }
    // Files that could not be examined make the status 2: say so on stderr
    // too, where `> report.txt` or a JSON consumer does not hide it (inside
    // a build the log lines above said it).
    if !log.in_build() {
        say_failures(&report.failures);
    }
    // A closed stdout is said now, by the status `cli::run` gives it.
    printed.context("writing the report on stdout")?;
    Ok(report.exit_status())
}

/// The audit's report on stdout, in colour where asked and on a terminal.
fn print_report(
    report: &Report<crate::audit::FileFacts>,
    format: Format,
    color: Color,
) -> io::Result<()> {
    let color = color.enabled(io::stdout().is_terminal());
    let mut out = io::stdout().lock();
    report::write(&mut out, report, format, color)?;
    out.flush()
}

/// `--why`: the closure's sizes and chains, in text or JSON; the exit status
/// is the audit's (its findings are not printed).
fn why(args: &Args, prepared: crate::audit::session::Prepared) -> anyhow::Result<ExitStatus> {
    use crate::audit::{why, Audit};
    let nodes = prepared.nodes.clone();
    let settings = prepared.reference_settings();
    let (audit, baselined) = match finish(prepared)? {
        Outcome::Audited { audit, baselined } => (audit, baselined),
        Outcome::BaselineWritten { failures, .. } => (Audit { failures, ..Audit::default() }, 0),
    };
    let roots: Vec<String> = args.paths.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let answer = why::answer(&roots, &nodes, &args.audit.why, &audit, settings.as_deref());
    let mut out = io::stdout().lock();
    match args.format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, &answer)?;
            writeln!(out)?;
        }
        _ => why::write_text(&mut out, &answer)?,
    }
    out.flush()?;
    say_failures(&audit.failures);
    let report = Report::new(audit.files, audit.findings, audit.failures, baselined);
    Ok(report.exit_status())
}

/// The session's audit, with a progress line while a cache's NARs come.
fn finish(prepared: crate::audit::session::Prepared) -> anyhow::Result<Outcome> {
    let progress = ProgressLine::new(io::stderr().is_terminal());
    let outcome = prepared.finish(&|p| progress.show(p));
    progress.clear();
    Ok(outcome?)
}

/// The progress line of a cache audit on a terminal: store paths and NAR
/// bytes read so far, rewritten in place and cleared at the end; nothing
/// when stderr is not a terminal.
struct ProgressLine {
    on: bool,
    shown: Mutex<bool>,
}

impl ProgressLine {
    fn new(on: bool) -> Self {
        ProgressLine { on, shown: Mutex::new(false) }
    }

    fn show(&self, p: sources::Progress) {
        if !self.on {
            return;
        }
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        let mb = p.bytes as f64 / 1e6;
        eprint!(
            "\r\x1b[Kcuda-elf-inspect: {} read, {mb:.1} MB of NAR",
            report::count(p.paths, "store path", "store paths")
        );
        *shown = true;
    }

    fn clear(&self) {
        if *self.shown.lock().unwrap_or_else(|e| e.into_inner()) {
            eprint!("\r\x1b[K");
        }
    }
}

/// `--summary`: the reader's full per-file report.
fn summary(args: &Args) -> anyhow::Result<ExitStatus> {
    if args.paths.is_empty() {
        bail!("no paths given (try --help)");
    }
    let options = crate::inspect::Options { deep: !args.headers_only, scan: scan(args) };
    let (reports, errors) = crate::inspect::inspect_paths(&paths(args)?, options);
    for e in &errors {
        eprintln!("cuda-elf-inspect: {}", sanitize(e, Controls::Escape));
    }
    if args.format == Format::Json {
        cli::print_json(&Envelope::versioned(1, "files", &reports))?;
    } else {
        let mut out = io::stdout().lock();
        for r in &reports {
            report::summary::write(&mut out, r)?;
        }
        out.flush()?;
    }
    Ok(crate::inspect::exit_status(&reports, errors.len()))
}

/// The cuobjdump-compatible listing (messages name the program as called).
fn list(args: &Args, prog: &str) -> anyhow::Result<ExitStatus> {
    let cwd = std::env::current_dir().context("current folder")?;
    let options = ListOptions { elf: args.list_elf, ptx: args.list_ptx, all: args.all_fatbin };
    let mut out = io::BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let status =
        listing::list_paths(&mut out, &mut io::stderr(), &args.paths, &cwd, options, prog)?;
    Ok(ExitStatus::Cuobjdump(status))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[test]
    fn cli_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn cuobjdump_short_options_are_accepted() {
        let a = Args::parse_from(
            cli::cuobjdump_args(["x", "-lelf", "-all", "-lptx", "f"].map(OsString::from)).unwrap(),
        );
        assert!(a.list_elf && a.list_ptx && a.all_fatbin);
        assert_eq!(a.paths, vec![PathBuf::from("f")]);
    }
}
