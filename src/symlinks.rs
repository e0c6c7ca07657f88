//! The noBrokenSymlinks decision procedure, and the findings upstream misses.
//!
//! [`check_output`] makes, for each link, the decision upstream's
//! `no-broken-symlinks.sh` makes (reference `upstream-hooks.md` §3), in the
//! same order of tests, and logs the same lines. Links are visited in path
//! order instead of `find`'s directory order, so logs are stable.
//!
//! The extra findings ([`Extra`]) are computed only when asked for and are
//! kept apart from the compatible counts: they never change the summary line
//! or the exit status unless the caller decides so (`--strict`).

use std::ffi::{OsStr, OsString};

use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::buildenv::under;
use crate::error::{describe_io, PathError};
use crate::fs::walk;
use crate::log::{Level, Logger, Msg};

/// The policy inputs of the check, as a build provides them.
#[derive(Debug, Clone)]
pub struct Policy {
    /// `$NIX_STORE`: only targets below it are checked.
    pub store_dir: OsString,
    /// Folders whose targets are checked as well as the store's: a tree
    /// checked by hand outside `$NIX_STORE` (a staging folder, a Nix build's
    /// copy) has its links checked against itself, instead of every one of
    /// them passing as "outside the store". Empty inside a build.
    pub also_checked: Vec<OsString>,
    /// The outputs are paths given by hand: one that is itself a dangling
    /// link is checked as a link, not skipped as a missing output.
    pub given_by_hand: bool,
    /// `$TMPDIR`: targets below it are errors. `None` disables the rule
    /// (outside a build; upstream would match every absolute path then).
    pub tmpdir: Option<OsString>,
    /// Compute the extra findings.
    pub extra: bool,
    /// Extra findings fail the check; they are then logged as errors, so a
    /// build that fails on them says why at any `NIX_DEBUG`.
    pub strict: bool,
    /// Keep a record of every link (JSON reports). Otherwise only links that
    /// produce a log line at the current level are kept, so memory grows with
    /// the problems found rather than with the links in the tree.
    pub keep_all: bool,
}

/// The compatible verdict for one link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// `readlink` failed.
    Unreadable,
    /// The target is below `$TMPDIR` (counted as dangling).
    Tmpdir,
    /// The target is outside the store: not checked.
    OutsideStore,
    /// The target is the link itself.
    Reflexive,
    /// `stat` of the target failed (missing, loop, not a directory).
    Dangling,
    /// The target exists.
    Ok,
}

/// A finding upstream does not make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Extra {
    /// Following the link loops; `cycle` lists the links of the loop in order,
    /// empty when the loop runs through folder links and cannot be named.
    Cycle {
        /// The links of the loop, starting where the walk entered it.
        #[serde(serialize_with = "ser_paths")]
        cycle: Vec<PathBuf>,
    },
    /// `x -> file/`: lexical normalisation dropped the slash, but the kernel
    /// refuses a non-directory with a trailing slash (`ENOTDIR`).
    TrailingSlashToNonDirectory,
    /// Lexical `..` resolution and the kernel's disagree (a `..` after a
    /// linked folder), in either direction: the lexical target (what
    /// upstream checked, the record's `resolved`) exists and the kernel
    /// reaches another file or none, or it is missing (upstream fails the
    /// build) and the kernel reaches a file (the link works at run time).
    ResolutionMismatch {
        /// What the kernel reaches, or `nothing (why)`.
        kernel: String,
        /// Whether the lexical target exists.
        lexical_exists: bool,
    },
}

/// Everything known about one link.
#[derive(Debug, Clone, Serialize)]
pub struct LinkRecord {
    /// The link's path.
    #[serde(serialize_with = "ser_path")]
    pub path: PathBuf,
    /// The raw target, as `readlink` returned it.
    #[serde(serialize_with = "ser_opt_os")]
    pub target: Option<OsString>,
    /// The target after upstream's normalisation.
    #[serde(serialize_with = "ser_opt_os")]
    pub resolved: Option<OsString>,
    /// The compatible decision.
    pub verdict: Verdict,
    /// Extra findings (only when asked for).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<Extra>,
}

/// The result of checking one output.
#[derive(Debug, Default, Serialize)]
pub struct OutputReport {
    /// The output's path.
    #[serde(serialize_with = "ser_path")]
    pub output: PathBuf,
    /// Whether the output existed (missing outputs are skipped with a warning).
    pub exists: bool,
    /// Every link below the output, in path order.
    pub links: Vec<LinkRecord>,
    /// Folders that could not be read.
    #[serde(serialize_with = "ser_errors")]
    pub walk_errors: Vec<PathError>,
    /// Counted as upstream counts.
    pub dangling: usize,
    /// Counted as upstream counts.
    pub reflexive: usize,
    /// Counted as upstream counts.
    pub unreadable: usize,
    /// Number of extra findings (including unreadable folders).
    pub extra: usize,
}

impl OutputReport {
    /// Whether upstream would fail the build on this output.
    pub fn broken(&self) -> bool {
        self.dangling + self.reflexive + self.unreadable > 0
    }
}

/// Normalises a path purely lexically, as `realpath --no-symlinks
/// --canonicalize-missing` does for an absolute input: `.` and empty
/// components vanish, `..` removes the previous component (never above `/`),
/// a trailing slash is dropped.
pub fn lexical_normalize(path: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for comp in path.split(|b| *b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = Vec::with_capacity(path.len() + 1);
    for p in &parts {
        out.push(b'/');
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// `dirname` of a path as bytes (the folder a relative target is taken from).
fn dirname(path: &Path) -> &[u8] {
    path.parent().map(|p| p.as_os_str().as_bytes()).filter(|p| !p.is_empty()).unwrap_or(b".")
}

/// Decides one link. Pure except for `readlink` and `stat`.
pub fn check_link(link: &Path, policy: &Policy) -> LinkRecord {
    let mut rec = LinkRecord {
        path: link.to_path_buf(),
        target: None,
        resolved: None,
        verdict: Verdict::Unreadable,
        extra: Vec::new(),
    };
    let raw = match std::fs::read_link(link) {
        Ok(t) => t.into_os_string(),
        Err(_) => return rec,
    };
    let resolved = if raw.as_bytes().first() == Some(&b'/') {
        raw.clone()
    } else {
        let mut joined = dirname(link).to_vec();
        joined.push(b'/');
        joined.extend_from_slice(raw.as_bytes());
        OsString::from_vec(lexical_normalize(&joined))
    };
    rec.target = Some(raw);
    rec.verdict = if policy.tmpdir.as_deref().is_some_and(|t| under(&resolved, t)) {
        Verdict::Tmpdir
    } else if !under(&resolved, &policy.store_dir)
        && !policy.also_checked.iter().any(|d| under(&resolved, d) || resolved == *d)
    {
        Verdict::OutsideStore
    } else if resolved.as_bytes() == link.as_os_str().as_bytes() {
        Verdict::Reflexive
    } else {
        match std::fs::metadata(Path::new(&resolved)) {
            Err(e) => {
                if policy.extra {
                    let raw = rec.target.as_deref().unwrap_or_default();
                    extra_for_missing(link, raw, &e, &mut rec.extra);
                }
                Verdict::Dangling
            }
            Ok(meta) => {
                if policy.extra {
                    extra_for_existing(
                        link,
                        rec.target.as_deref().unwrap_or_default(),
                        &meta,
                        &mut rec.extra,
                    );
                }
                Verdict::Ok
            }
        }
    };
    rec.resolved = Some(resolved);
    rec
}

/// Extra checks for a link whose lexical target is missing (`lexical`: why
/// `stat` failed): a loop, or a relative target the kernel does reach
/// (`usr/d/x -> libdir/../y/lib.so` with `usr/d/libdir -> ../lib/y`: the
/// `..` leaves the linked folder, so upstream's "missing target" fails a
/// build whose link works).
fn extra_for_missing(link: &Path, raw: &OsStr, lexical: &std::io::Error, extra: &mut Vec<Extra>) {
    if lexical.raw_os_error() == Some(libc::ELOOP) {
        return extra.push(Extra::Cycle { cycle: find_cycle(link) });
    }
    if raw.as_bytes().first() == Some(&b'/') {
        // The kernel follows the very path upstream tested.
        return;
    }
    match std::fs::metadata(link) {
        Ok(_) => extra
            .push(Extra::ResolutionMismatch { kernel: kernel_target(link), lexical_exists: false }),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            extra.push(Extra::Cycle { cycle: find_cycle(link) })
        }
        // Missing both ways: upstream's verdict is the kernel's.
        Err(_) => {}
    }
}

/// The file the kernel reaches through `link`, or why it cannot say.
fn kernel_target(link: &Path) -> String {
    std::fs::canonicalize(link)
        .map(|p| String::from_utf8_lossy(p.as_os_str().as_bytes()).into_owned())
        .unwrap_or_else(|e| format!("nothing ({})", describe_io(&e)))
}

/// Extra checks for a link whose lexical target exists: does the kernel agree?
fn extra_for_existing(
    link: &Path,
    raw: &OsStr,
    lexical: &std::fs::Metadata,
    extra: &mut Vec<Extra>,
) {
    let raw = raw.as_bytes();
    let relative = raw.first() != Some(&b'/');
    let kernel = std::fs::metadata(link);
    match kernel {
        Err(e)
            if e.raw_os_error() == Some(libc::ENOTDIR)
                && raw.ends_with(b"/")
                && !lexical.is_dir() =>
        {
            extra.push(Extra::TrailingSlashToNonDirectory)
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            extra.push(Extra::Cycle { cycle: find_cycle(link) })
        }
        Err(e) if relative => extra.push(Extra::ResolutionMismatch {
            kernel: format!("nothing ({})", describe_io(&e)),
            lexical_exists: true,
        }),
        Ok(m) if relative && (m.dev(), m.ino()) != (lexical.dev(), lexical.ino()) => extra
            .push(Extra::ResolutionMismatch { kernel: kernel_target(link), lexical_exists: true }),
        _ => {}
    }
}

/// Follows a chain of links lexically until a link repeats; returns the loop.
/// Empty when the loop is not a plain chain (it runs through a folder link).
pub fn find_cycle(start: &Path) -> Vec<PathBuf> {
    let mut chain: Vec<PathBuf> = vec![start.to_path_buf()];
    // The kernel gives up after 40 links; a loop is found well before that.
    for _ in 0..64 {
        let cur = chain.last().cloned().unwrap_or_default();
        let Ok(t) = std::fs::read_link(&cur) else { return Vec::new() };
        let next = if t.as_os_str().as_bytes().first() == Some(&b'/') {
            PathBuf::from(OsString::from_vec(lexical_normalize(t.as_os_str().as_bytes())))
        } else {
            let mut joined = dirname(&cur).to_vec();
            joined.push(b'/');
            joined.extend_from_slice(t.as_os_str().as_bytes());
            PathBuf::from(OsString::from_vec(lexical_normalize(&joined)))
        };
        if let Some(i) = chain.iter().position(|p| *p == next) {
            return chain.split_off(i);
        }
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => chain.push(next),
            _ => return Vec::new(),
        }
    }
    Vec::new()
}

/// Checks one output: walks it, decides every link, logs as upstream does.
pub fn check_output(output: &Path, policy: &Policy, log: &Logger) -> OutputReport {
    let mut report = OutputReport { output: output.to_path_buf(), ..OutputReport::default() };
    // `[[ ! -e $output ]]` follows links: an output that is a dangling link is missing.
    let root_is_link = || std::fs::symlink_metadata(output).is_ok_and(|m| m.is_symlink());
    if std::fs::metadata(output).is_err() && !(policy.given_by_hand && root_is_link()) {
        log.warn(&Msg::new("skipping non-existent output ").p(output));
        return report;
    }
    report.exists = true;
    log.info(&Msg::new("running on ").p(output));
    let keep_every_link = policy.keep_all || log.enabled(Level::Info);
    let walked = walk::walk(output, &walk::Options::default(), |path, kind| {
        if !kind.file_type.is_symlink() {
            return None;
        }
        let rec = check_link(path, policy);
        let quiet =
            matches!(rec.verdict, Verdict::Ok | Verdict::OutsideStore) && rec.extra.is_empty();
        (keep_every_link || !quiet).then_some(rec)
    });
    report.walk_errors = walked.errors;
    for (_, rec) in walked.items {
        log_link(&rec, policy, log);
        match rec.verdict {
            Verdict::Unreadable => report.unreadable += 1,
            Verdict::Tmpdir | Verdict::Dangling => report.dangling += 1,
            Verdict::Reflexive => report.reflexive += 1,
            Verdict::OutsideStore | Verdict::Ok => {}
        }
        report.extra += rec.extra.len();
        report.links.push(rec);
    }
    report.extra += report.walk_errors.len();
    // A folder we could not read (permission denied, a path over PATH_MAX)
    // hides whatever links it holds: always said, naming it, like upstream's
    // `find` does on stderr (at error level, so that it shows at every
    // verbosity); `--strict` makes it fail the check.
    for err in &report.walk_errors {
        log.error(
            &Msg::new("cannot read ")
                .p(&err.path)
                .s(": ")
                .s(&describe_io(&err.source))
                .s("; symlinks below it were not checked"),
        );
    }
    if policy.extra {
        log_extras(&report, policy, log);
    }
    if report.broken() {
        log.error(
            &Msg::new("found ")
                .d(report.dangling)
                .s(" dangling symlinks, ")
                .d(report.reflexive)
                .s(" reflexive symlinks and ")
                .d(report.unreadable)
                .s(" unreadable symlinks"),
        );
    }
    report
}

/// The lines upstream prints for one link, at upstream's levels.
fn log_link(rec: &LinkRecord, policy: &Policy, log: &Logger) {
    let link = &rec.path;
    let Some(raw) = rec.target.as_deref() else {
        log.error(&Msg::new("the symlink ").p(link).s(" is unreadable"));
        return;
    };
    let resolved = rec.resolved.as_deref().unwrap_or_default();
    if log.enabled(Level::Info) {
        let kind = if raw.as_bytes().first() == Some(&b'/') { "absolute" } else { "relative" };
        log.info(&Msg::new("symlink ").p(link).s(" points to ").s(kind).s(" target ").p(raw));
    }
    match rec.verdict {
        Verdict::Unreadable => {}
        Verdict::Tmpdir => log.error(
            &Msg::new("the symlink ")
                .p(link)
                .s(" points to ")
                .p(policy.tmpdir.as_deref().unwrap_or_default())
                .s(" directory: ")
                .p(resolved),
        ),
        Verdict::OutsideStore if policy.also_checked.is_empty() => {
            log.info(&Msg::new("symlink ").p(link).s(" points outside the Nix store; ignoring"))
        }
        Verdict::OutsideStore => log.info(
            &Msg::new("symlink ")
                .p(link)
                .s(" points outside the Nix store and the checked tree; ignoring"),
        ),
        Verdict::Reflexive => log.error(&Msg::new("the symlink ").p(link).s(" is reflexive")),
        Verdict::Dangling => log.error(
            &Msg::new("the symlink ").p(link).s(" points to a missing target: ").p(resolved),
        ),
        Verdict::Ok => log.debug(
            &Msg::new("the symlink ")
                .p(link)
                .s(" is irreflexive and points to a target which exists"),
        ),
    }
}

/// Extra findings, logged as WARN lines after the compatible ones and marked
/// so that no grep for upstream's lines can match them.
fn log_extras(report: &OutputReport, policy: &Policy, log: &Logger) {
    let level = if policy.strict { Level::Error } else { Level::Warn };
    for rec in &report.links {
        for extra in &rec.extra {
            let m = Msg::new("extra: the symlink ").p(&rec.path);
            log.log(
                level,
                &match extra {
                    Extra::Cycle { cycle } if cycle.is_empty() => {
                        m.s(" is part of a symlink loop through a folder link")
                    }
                    Extra::Cycle { cycle } => {
                        let mut m = m.s(" is part of a symlink cycle: ");
                        for (i, p) in cycle.iter().chain(cycle.first()).enumerate() {
                            m = if i == 0 { m.p(p) } else { m.s(" -> ").p(p) };
                        }
                        m
                    }
                    Extra::TrailingSlashToNonDirectory => {
                        m.s(" ends in '/' but its target is not a directory (ENOTDIR at run time)")
                    }
                    Extra::ResolutionMismatch { kernel, lexical_exists: true } => m
                        .s(" resolves lexically to ")
                        .p(rec.resolved.as_deref().unwrap_or_default())
                        .s(" but the kernel reaches ")
                        .s(kernel),
                    Extra::ResolutionMismatch { kernel, lexical_exists: false } => m
                        .s(" resolves lexically to the missing ")
                        .p(rec.resolved.as_deref().unwrap_or_default())
                        .s(" but the kernel reaches ")
                        .s(kernel)
                        .s(": the link works; the check above fails it on a '..' after a linked folder"),
                },
            );
        }
    }
    if report.extra > 0 {
        log.warn(
            &Msg::new("extra: found ")
                .d(report.extra)
                .s(" additional problems (not counted above)"),
        );
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ser_path<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&lossy(p.as_os_str().as_bytes()))
}

fn ser_paths<S: serde::Serializer>(ps: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(ps.iter().map(|p| lossy(p.as_os_str().as_bytes())))
}

fn ser_opt_os<S: serde::Serializer>(p: &Option<OsString>, s: S) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => s.serialize_some(&lossy(p.as_bytes())),
        None => s.serialize_none(),
    }
}

fn ser_errors<S: serde::Serializer>(es: &[PathError], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(es.iter().map(|e| e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_normalisation_matches_realpath_s_m() {
        let cases: &[(&str, &str)] = &[
            ("/a/b/../c", "/a/c"),
            ("/a/./b//c/", "/a/b/c"),
            ("/../..", "/"),
            ("/", "/"),
            ("/a/b/../../../x", "/x"),
            ("/a/.../b", "/a/.../b"),
        ];
        for (input, want) in cases {
            assert_eq!(lexical_normalize(input.as_bytes()), want.as_bytes(), "{input}");
        }
    }
}
