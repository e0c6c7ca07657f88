//! `cuda-elf-inspect --coverage`'s front end: the input read (arguments,
//! `-` for stdin, or `--eval-jobs FILE|-`), the engine run
//! ([`crate::audit::coverage`]) with a progress line on a terminal, or
//! shard reports joined (`--merge`), then the report printed and written.

use std::io::{self, BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context};

use crate::audit::coverage::{self, input::Input, model::Report, shard, CoverageArgs};
use crate::audit::session::AuditArgs;
use crate::buildenv::BuildEnv;
use crate::output::{ExitStatus, Format};
use crate::report;

/// What the front end hands over: its parsed pieces.
pub struct Request<'a> {
    /// Store paths given (`-`: stdin).
    pub paths: &'a [PathBuf],
    /// The audit's arguments (caches, keys, capabilities, driver).
    pub audit: &'a AuditArgs,
    /// `--coverage`'s own.
    pub coverage: &'a CoverageArgs,
    /// `--format`.
    pub format: Format,
    /// `--output FORMAT=FILE`, each.
    pub outputs: &'a [(Format, PathBuf)],
}

/// Runs a coverage request; status 0 every path served (and covered), 1
/// not, errors are the caller's status 2.
pub fn run(req: &Request) -> anyhow::Result<ExitStatus> {
    for format in std::iter::once(req.format).chain(req.outputs.iter().map(|(f, _)| *f)) {
        if matches!(format, Format::Sarif | Format::Github) {
            bail!("--coverage writes text, json, html or hydra-metrics, not {}", format.name());
        }
    }
    let report = if req.coverage.merge.is_empty() {
        ask(req)?
    } else {
        if !req.paths.is_empty() {
            bail!("--merge takes shard reports, not store paths");
        }
        let parts = req
            .coverage
            .merge
            .iter()
            .map(|f| shard::read(f).map(|r| (f.clone(), r)))
            .collect::<Result<Vec<_>, _>>()?;
        shard::merge(parts)?
    };
    let printed = {
        let mut out = io::stdout().lock();
        report::coverage::write(&mut out, &report, req.format).and_then(|_| out.flush())
    };
    for (format, file) in req.outputs {
        crate::fs::atomic::write_whole(file, |w| report::coverage::write(w, &report, *format))
            .with_context(|| format!("--output {}", format.name()))?;
    }
    printed.context("writing the report on stdout")?;
    Ok(if report.all_good() { ExitStatus::Ok } else { ExitStatus::Findings })
}

/// The input, then the engine, with a progress line on a terminal.
fn ask(req: &Request) -> anyhow::Result<Report> {
    let input = read_input(req)?;
    if input.items.is_empty() && input.bad_lines.is_empty() {
        bail!("--coverage: no store paths given (arguments, `-` for stdin, or --eval-jobs)");
    }
    let env = BuildEnv::from_env()?;
    let progress = Progress::new(io::stderr().is_terminal());
    let report = coverage::run(req.coverage, req.audit, input, &env, &|d, t| progress.show(d, t));
    progress.clear();
    Ok(report?)
}

fn read_input(req: &Request) -> anyhow::Result<Input> {
    let Some(file) = &req.coverage.eval_jobs else {
        let paths = super::expand_paths(req.paths, io::stdin().lock())
            .context("reading the path list from stdin")?;
        let paths = paths.into_iter().map(|p| p.to_string_lossy().into_owned());
        return Ok(coverage::input::store_paths(paths));
    };
    if !req.paths.is_empty() {
        bail!("--eval-jobs takes its paths from nix-eval-jobs' lines, not arguments");
    }
    let reader: Box<dyn BufRead> = if file == Path::new("-") {
        Box::new(io::stdin().lock())
    } else {
        let f =
            std::fs::File::open(file).with_context(|| format!("--eval-jobs {}", file.display()))?;
        Box::new(io::BufReader::new(f))
    };
    coverage::input::eval_jobs(reader).with_context(|| format!("--eval-jobs {}", file.display()))
}

/// `done/total paths, N/s, ETA Ns` rewritten in place on a terminal;
/// nothing on a pipe.
struct Progress {
    on: bool,
    start: Instant,
    shown: Mutex<bool>,
}

impl Progress {
    fn new(on: bool) -> Self {
        Progress { on, start: Instant::now(), shown: Mutex::new(false) }
    }

    fn show(&self, done: usize, total: usize) {
        if !self.on {
            return;
        }
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        let secs = self.start.elapsed().as_secs_f64().max(1e-3);
        let rate = done as f64 / secs;
        let eta = if rate > 0.0 { (total - done) as f64 / rate } else { 0.0 };
        eprint!("\r\x1b[Kcuda-elf-inspect: {done}/{total} paths, {rate:.0}/s, ETA {eta:.0} s");
        *shown = true;
    }

    fn clear(&self) {
        if *self.shown.lock().unwrap_or_else(|e| e.into_inner()) {
            eprint!("\r\x1b[K");
        }
    }
}
