//! The front ends of the three binaries, the top of the layering: what
//! every binary shares at its edge (common flags, the error-message style
//! `tool: message`, the exit status of an error), and per binary its
//! arguments and the glue from them to the library ([`inspect`]). Nothing
//! in the library imports this module.
//!
//! Exit statuses follow one rule across the tools ([`ExitStatus`]).

pub mod coverage;
pub mod driver_runpath;
pub mod inspect;
pub mod preflight;
pub mod symlinks;

use std::ffi::OsString;
use std::io::{self, Write};
use std::process::ExitCode;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};

use crate::output::Controls;
pub use crate::output::{ExitStatus, Format};

/// The `--format` of the hooks: text or JSON, in their words.
pub const HOOK_FORMATS: &[(Format, &str)] = &[
    (Format::Text, "Human text (and setup.sh-style log lines inside a build)"),
    (Format::Json, "One JSON document on stdout (schema in docs/)"),
];

/// A `--format` parser accepting only `formats`, each shown in `--help`
/// with its words: one [`Format`] for every binary, each its own subset.
pub fn format_parser(
    formats: &'static [(Format, &'static str)],
) -> impl TypedValueParser<Value = Format> {
    let values = formats.iter().map(|(f, help)| PossibleValue::new(f.name()).help(*help));
    // The parser has checked the name is one of `formats`.
    PossibleValuesParser::new(values).map(|name| Format::from_name(&name).unwrap_or(Format::Text))
}

/// Flags every binary accepts.
#[derive(Clone, Debug, clap::Args)]
pub struct CommonArgs {
    /// Report format on stdout.
    #[arg(long, value_parser = format_parser(HOOK_FORMATS), default_value = "text")]
    pub format: Format,
    /// Outside a build, log more on stderr: errors and warnings always, -v
    /// notices, -vv infos, up to -vvvvvv. Inside a build NIX_DEBUG decides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// Runs a binary's body and maps its result to an exit code: `Ok(status)`
/// as is, `Err` printed as `tool: message: cause` with status 2.
///
/// A closed stdout (`| head -1`) ends the program quietly, as coreutils'
/// `cat` or `seq` end: killed by `SIGPIPE`, which a shell shows as 141 and
/// `set -o pipefail` counts as a failure. Not 0: the reader did not get
/// the report, so a status saying it did would lie; not 2 with a message:
/// nothing failed that the user must hear about. The body has finished
/// everything else first (`--output` files are written before the stdout
/// error comes back here).
pub fn run(tool: &str, body: impl FnOnce() -> anyhow::Result<ExitStatus>) -> ExitCode {
    match body() {
        Ok(status) => ExitCode::from(status),
        Err(err) => {
            let pipe = err.chain().any(|c| {
                c.downcast_ref::<io::Error>().is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
            });
            // Only stdout's: a broken pipe elsewhere (a FIFO given to
            // --output, a cache's connection) is a failure to report.
            if pipe && stdout_reader_gone() {
                return die_of_sigpipe();
            }
            // Library errors already name their cause ("path: no such file
            // or directory"); append a cause only when it says something new.
            let mut msg = format!("{tool}: {err}");
            for cause in err.chain().skip(1) {
                let text = match cause.downcast_ref::<io::Error>() {
                    Some(e) => crate::error::describe_io(e),
                    None => cause.to_string(),
                };
                if !msg.to_lowercase().contains(&text.to_lowercase()) {
                    msg.push_str(&format!(": {text}"));
                }
            }
            // A message may name a file found in a walk or a NAR: one line,
            // no control character.
            let _ = writeln!(io::stderr(), "{}", crate::output::sanitize(&msg, Controls::Replace));
            ExitCode::from(ExitStatus::Failure)
        }
    }
}

/// Whether stdout is a pipe or socket whose reader has gone (`poll` says
/// `POLLERR` or `POLLHUP` for its write end).
fn stdout_reader_gone() -> bool {
    let mut fd = libc::pollfd { fd: libc::STDOUT_FILENO, events: libc::POLLOUT, revents: 0 };
    // SAFETY: one valid pollfd, no wait.
    let n = unsafe { libc::poll(&mut fd, 1, 0) };
    n == 1 && fd.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// Ends the process by `SIGPIPE`, as a program that never ignored it would
/// have ended at its first write to the closed pipe (Rust ignores the
/// signal, so the write returned `EPIPE` instead). If the signal does not
/// end the process (blocked by the parent), 141, the shell's number for it.
fn die_of_sigpipe() -> ExitCode {
    // SAFETY: restoring a signal's default action and raising it touch no
    // memory of ours; nothing is left to flush (stdout is the closed pipe,
    // stderr is unbuffered, the --output files are committed).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    ExitCode::from(128 + libc::SIGPIPE as u8)
}

/// The part of `--help` after the options: the environment variables a
/// binary reads and its exit statuses, laid out alike for the three tools.
pub fn after_help(env: &[(&str, &str)], exits: &[(&str, &str)]) -> String {
    let mut out = String::from("Environment:\n");
    let width = env.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (name, what) in env {
        out.push_str(&format!("  {name:width$}  {what}\n"));
    }
    out.push_str("\nExit status:\n");
    for (code, what) in exits {
        out.push_str(&format!("  {code:>3}  {what}\n"));
    }
    out.pop();
    out
}

/// Writes a serialisable report as pretty JSON plus a newline to stdout.
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// Paths from the command line, `-` replaced by the newline-separated list
/// read from `stdin` (empty lines skipped, a trailing `\r` dropped; names
/// are bytes, so any file name passes).
pub fn expand_paths(
    paths: &[std::path::PathBuf],
    stdin: impl io::BufRead,
) -> io::Result<Vec<std::path::PathBuf>> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    let mut stdin = Some(stdin);
    for p in paths {
        if p.as_os_str() != "-" {
            out.push(p.clone());
            continue;
        }
        // A second `-` finds stdin read already: nothing more.
        for line in stdin.take().into_iter().flat_map(|s| s.split(b'\n')) {
            let line = line?;
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            if !line.is_empty() {
                out.push(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(line)));
            }
        }
    }
    Ok(out)
}

/// cuobjdump's options that `cuda-elf-inspect` does not implement, long and
/// short forms: refused with a message naming them, instead of clap reading
/// `-sass` as the flags `-s -a -s -s` and suggesting `-- -s`.
const CUOBJDUMP_UNSUPPORTED: &[(&str, &str)] = &[
    ("--dump-elf", "-elf"),
    ("--dump-elf-symbols", "-symbols"),
    ("--dump-ptx", "-ptx"),
    ("--dump-resource-usage", "-res-usage"),
    ("--dump-sass", "-sass"),
    ("--extract-elf", "-xelf"),
    ("--extract-ptx", "-xptx"),
    ("--extract-text", "-xtext"),
    ("--function", "-fun"),
    ("--function-index", "-findex"),
    ("--gpu-architecture", "-arch"),
    ("--list-text", "-ltext"),
    ("--options-file", "-optf"),
    ("--sort-functions", "-sort"),
];

/// Rewrites cuobjdump's single-dash listing options (`-lelf`, `-lptx`,
/// `-all`) to ours and refuses the cuobjdump options we do not implement,
/// naming them. Arguments after `--` are paths and are left alone (a file
/// may be called `-lelf`).
pub fn cuobjdump_args(args: impl IntoIterator<Item = OsString>) -> Result<Vec<OsString>, String> {
    let mut out = Vec::new();
    let mut options_done = false;
    for (i, arg) in args.into_iter().enumerate() {
        let text = arg.to_str().filter(|_| i > 0 && !options_done);
        match text {
            Some("--") => {
                options_done = true;
                out.push(arg);
            }
            Some("-lelf") => out.push("--list-elf".into()),
            Some("-lptx") => out.push("--list-ptx".into()),
            Some("-all") => out.push("--all-fatbin".into()),
            Some(t) => {
                let name = t.split('=').next().unwrap_or(t);
                if let Some((long, short)) =
                    CUOBJDUMP_UNSUPPORTED.iter().find(|(l, s)| *l == name || *s == name)
                {
                    return Err(format!(
                        "{t}: cuobjdump's {long} ({short}) is not implemented; only its listing options are \
                         (--list-elf/-lelf, --list-ptx/-lptx, --all-fatbin/-all): use cuobjdump for dumps and extraction"
                    ));
                }
                out.push(arg);
            }
            None => out.push(arg),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn args(list: &[&str]) -> Result<Vec<String>, String> {
        cuobjdump_args(list.iter().map(OsString::from))
            .map(|v| v.into_iter().map(|a| a.into_string().unwrap()).collect())
    }

    #[test]
    fn cuobjdump_listing_options_are_rewritten_until_double_dash() {
        assert_eq!(
            args(&["x", "-lelf", "-all", "f", "--", "-lptx"]).unwrap(),
            ["x", "--list-elf", "--all-fatbin", "f", "--", "-lptx"]
        );
    }

    #[test]
    fn unsupported_cuobjdump_options_are_named() {
        let e = args(&["x", "-sass", "f"]).unwrap_err();
        assert!(e.starts_with("-sass: cuobjdump's --dump-sass (-sass) is not implemented"), "{e}");
        let e = args(&["x", "--gpu-architecture=sm_80", "f"]).unwrap_err();
        assert!(e.contains("--gpu-architecture (-arch)"), "{e}");
        assert_eq!(args(&["x", "--", "-sass"]).unwrap(), ["x", "--", "-sass"]);
    }

    #[test]
    fn a_dash_reads_the_list_from_stdin() {
        let stdin: &[u8] = b"a.so\r\n\nlib/\xffb.so\n";
        let got = expand_paths(&["x".into(), "-".into(), "y".into(), "-".into()], stdin).unwrap();
        let odd = PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(
            b"lib/\xffb.so",
        ));
        assert_eq!(got, vec![PathBuf::from("x"), "a.so".into(), odd, "y".into()]);
    }
}
