//! setup.sh-style logging, in one place for every binary.
//!
//! Nixpkgs' `setup.sh` defines `nixErrorLog` .. `nixVomitLog` (levels 0..7, the
//! numbering of Nix's own verbosity). A line is written only when `NIX_LOG_FD`
//! is set and non-empty, to that file descriptor, and only when `NIX_DEBUG`
//! (default 0) is at least the line's level. The format is
//! `LEVEL: caller: message\n`, where `caller` is the shell function that logged;
//! our binaries use the name of the function they replace so that existing log
//! greps keep matching (docs/no-broken-symlinks.md, "Log lines").
//!
//! Paths are bytes on Linux: messages are built as bytes and written as they
//! are, never lossily converted, so a log line names exactly the file on disk.
//!
//! Outside a build (`NIX_LOG_FD` unset) setup.sh prints nothing; we still print
//! ERROR and WARN lines on stderr so that a user running a binary by hand sees
//! why it failed and what it could not do (`-v` adds notices, `-vv` infos...).

use std::ffi::OsStr;
use std::fs::File;
use std::io::Write;
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;

use crate::output::{sanitize_bytes, Controls};

/// A setup.sh log level; the discriminant is the `NIX_DEBUG` threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// `nixErrorLog`: always shown when logging is on.
    Error = 0,
    /// `nixWarnLog`: `NIX_DEBUG >= 1`.
    Warn = 1,
    /// `nixNoticeLog`: `NIX_DEBUG >= 2`.
    Notice = 2,
    /// `nixInfoLog`: `NIX_DEBUG >= 3`.
    Info = 3,
    /// `nixTalkativeLog`: `NIX_DEBUG >= 4`.
    Talkative = 4,
    /// `nixChattyLog`: `NIX_DEBUG >= 5`.
    Chatty = 5,
    /// `nixDebugLog`: `NIX_DEBUG >= 6`.
    Debug = 6,
    /// `nixVomitLog`: `NIX_DEBUG >= 7`.
    Vomit = 7,
}

impl Level {
    /// The word setup.sh prints before the caller.
    pub fn name(self) -> &'static str {
        match self {
            Level::Error => "ERROR",
            Level::Warn => "WARN",
            Level::Notice => "NOTICE",
            Level::Info => "INFO",
            Level::Talkative => "TALKATIVE",
            Level::Chatty => "CHATTY",
            Level::Debug => "DEBUG",
            Level::Vomit => "VOMIT",
        }
    }
}

/// Where log lines go.
enum Sink {
    /// `NIX_LOG_FD` is set: the build's log descriptor (not owned; never closed).
    Fd(ManuallyDrop<File>),
    /// Not in a build: errors (or what `-v` asks for) on stderr.
    Stderr,
    /// Tests: everything into a buffer.
    Buffer(Vec<u8>),
}

/// A logger for one caller name, configured from the environment once.
///
/// Writes are serialised through a mutex so that lines from parallel workers
/// never interleave; each line is one `write_all` of a complete buffer.
pub struct Logger {
    caller: &'static str,
    /// Lines above this level are dropped.
    verbosity: u8,
    /// The level the user asked for (`NIX_DEBUG`, or the `-v` count).
    asked: u8,
    sink: Mutex<Sink>,
}

/// Parses `NIX_DEBUG` as bash's `[[ $NIX_DEBUG -lt N ]]` would, except that a
/// value bash would reject (not an integer) counts as 0 instead of an error.
pub fn parse_nix_debug(value: Option<&OsStr>) -> i64 {
    value
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(0)
}

impl Logger {
    /// The logger a binary uses: `NIX_LOG_FD` and `NIX_DEBUG` from the
    /// environment, `caller` as the function name setup.sh would print.
    pub fn from_env(caller: &'static str) -> Logger {
        let debug = parse_nix_debug(std::env::var_os("NIX_DEBUG").as_deref());
        let fd = std::env::var_os("NIX_LOG_FD")
            .filter(|v| !v.is_empty())
            .and_then(|v| std::str::from_utf8(v.as_bytes()).ok()?.trim().parse::<i32>().ok())
            .filter(|fd| *fd >= 0 && unsafe { libc::fcntl(*fd, libc::F_GETFD) } != -1);
        let (sink, verbosity) = match fd {
            // SAFETY: the descriptor is open (checked with F_GETFD above) and we
            // never close it: ManuallyDrop keeps File's destructor from running.
            Some(fd) => {
                (Sink::Fd(ManuallyDrop::new(unsafe { File::from_raw_fd(fd) })), clamp(debug))
            }
            None => (Sink::Stderr, 0),
        };
        Logger { caller, verbosity, asked: verbosity, sink: Mutex::new(sink) }
    }

    /// Outside a build, sets the stderr fallback from the count of `-v`
    /// flags: errors and warnings always (a warning says what was not done,
    /// which a user running the tool by hand must see), each `-v` one level
    /// more. Inside a build `NIX_DEBUG` alone decides, as setup.sh does.
    pub fn with_stderr_verbosity(mut self, verbose: u8) -> Logger {
        if matches!(*self.sink.get_mut().unwrap_or_else(|e| e.into_inner()), Sink::Stderr) {
            self.verbosity = verbose.saturating_add(Level::Warn as u8).min(7);
            self.asked = verbose;
        }
        self
    }

    /// Whether the user asked for lines at `level`: `NIX_DEBUG` inside a
    /// build; outside one, only `-v` flags count (so output upstream gates
    /// on `NIX_DEBUG >= 1` stays off by default, though warnings are shown).
    pub fn asked_for(&self, level: Level) -> bool {
        (level as u8) <= self.asked
    }

    /// A logger that keeps every line up to `nix_debug` in memory (for tests).
    pub fn buffer(caller: &'static str, nix_debug: i64) -> Logger {
        let verbosity = clamp(nix_debug);
        Logger { caller, verbosity, asked: verbosity, sink: Mutex::new(Sink::Buffer(Vec::new())) }
    }

    /// Whether a line at `level` would be written; lets callers skip building it.
    pub fn enabled(&self, level: Level) -> bool {
        (level as u8) <= self.verbosity
    }

    /// Whether lines go to a build log (`NIX_LOG_FD` was usable).
    pub fn in_build(&self) -> bool {
        matches!(*self.sink.lock().unwrap_or_else(|e| e.into_inner()), Sink::Fd(_))
    }

    /// The characters [`Logger::log`] writes before a message at `level`
    /// (`WARN: caller: `): a wrapped message leaves room for them.
    pub fn prefix_width(&self, level: Level) -> usize {
        level.name().chars().count() + self.caller.chars().count() + 4
    }

    /// Writes `LEVEL: caller: message` if the level is enabled.
    pub fn log(&self, level: Level, message: &Msg) {
        if (level as u8) > self.verbosity {
            return;
        }
        let mut line = Vec::with_capacity(message.0.len() + self.caller.len() + 12);
        line.extend_from_slice(level.name().as_bytes());
        line.extend_from_slice(b": ");
        line.extend_from_slice(self.caller.as_bytes());
        line.extend_from_slice(b": ");
        line.extend_from_slice(&message.0);
        line.push(b'\n');
        let mut sink = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        // A log write that fails (closed descriptor, full disk) must not turn
        // a check into a crash; the exit status still says what happened.
        let _ = match &mut *sink {
            Sink::Fd(file) => file.write_all(&line),
            Sink::Stderr => std::io::stderr().lock().write_all(&line),
            Sink::Buffer(buf) => {
                buf.extend_from_slice(&line);
                Ok(())
            }
        };
    }

    /// Shorthand for [`Level::Error`].
    pub fn error(&self, m: &Msg) {
        self.log(Level::Error, m)
    }
    /// Shorthand for [`Level::Warn`].
    pub fn warn(&self, m: &Msg) {
        self.log(Level::Warn, m)
    }
    /// Shorthand for [`Level::Info`].
    pub fn info(&self, m: &Msg) {
        self.log(Level::Info, m)
    }
    /// Shorthand for [`Level::Debug`].
    pub fn debug(&self, m: &Msg) {
        self.log(Level::Debug, m)
    }

    /// The lines a [`Logger::buffer`] collected (empty for other sinks).
    pub fn take_buffer(&self) -> Vec<u8> {
        match &mut *self.sink.lock().unwrap_or_else(|e| e.into_inner()) {
            Sink::Buffer(buf) => std::mem::take(buf),
            _ => Vec::new(),
        }
    }
}

fn clamp(debug: i64) -> u8 {
    // Negative NIX_DEBUG: bash's `[[ -1 -lt 0 ]]` is true, so even ERROR is
    // suppressed by the plain levelled functions; but the structured logger
    // setup.sh uses for hooks prints errors unconditionally. Keep errors.
    debug.clamp(0, 7) as u8
}

/// A log message built from text and raw path bytes.
///
/// It never holds a control character: every piece is passed through the
/// one sanitiser for names shown to people ([`sanitize_bytes`], escaped:
/// `\n`, `\u{1b}`) as it is appended. A name from a file (a path in the
/// tree, a soname from a `.note.dlopen`, an archive member) can hold a
/// newline or a terminal escape; written raw, a newline would start a line
/// of its own in the build log (a forged `ERROR: ...`) and an escape would
/// drive the reader's terminal. Bytes that are not UTF-8 are kept, so the
/// line still names the file on disk.
#[derive(Default, Clone, Debug, PartialEq, Eq)]
pub struct Msg(Vec<u8>);

impl Msg {
    /// Starts a message with a text fragment.
    pub fn new(text: &str) -> Msg {
        Msg::default().b(text.as_bytes())
    }
    /// Appends text.
    pub fn s(self, text: &str) -> Msg {
        self.b(text.as_bytes())
    }
    /// Appends a path's bytes as the kernel knows them (controls escaped).
    pub fn p(self, path: impl AsRef<Path>) -> Msg {
        self.b(path.as_ref().as_os_str().as_bytes())
    }
    /// Appends raw bytes (controls escaped).
    pub fn b(mut self, bytes: &[u8]) -> Msg {
        self.0.extend_from_slice(&sanitize_bytes(bytes, Controls::Escape));
        self
    }
    /// Appends anything printable (numbers, counts).
    pub fn d(self, value: impl std::fmt::Display) -> Msg {
        self.s(&value.to_string())
    }
    /// The message's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
    /// The message as one line: its bytes and a newline, the only one.
    pub fn line(mut self) -> Vec<u8> {
        self.0.push(b'\n');
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nix_debug_parsing_matches_bash_or_falls_back_to_zero() {
        assert_eq!(parse_nix_debug(None), 0);
        assert_eq!(parse_nix_debug(Some(OsStr::new("7"))), 7);
        assert_eq!(parse_nix_debug(Some(OsStr::new("abc"))), 0);
        assert_eq!(parse_nix_debug(Some(OsStr::new(""))), 0);
        assert_eq!(parse_nix_debug(Some(OsStr::new("3x"))), 0);
    }

    #[test]
    fn levels_are_gated_and_formatted() {
        let log = Logger::buffer("noBrokenSymlinks", 3);
        log.error(&Msg::new("e"));
        log.warn(&Msg::new("w"));
        log.info(&Msg::new("i ").p("/nix/store/\u{e9}"));
        log.debug(&Msg::new("hidden"));
        assert_eq!(
            String::from_utf8(log.take_buffer()).unwrap(),
            "ERROR: noBrokenSymlinks: e\nWARN: noBrokenSymlinks: w\nINFO: noBrokenSymlinks: i /nix/store/\u{e9}\n"
        );
    }

    #[test]
    fn a_newline_or_an_escape_in_a_name_never_reaches_the_log_raw() {
        let log = Logger::buffer("cudaElfInspect", 0);
        let soname = b"libx.so\nERROR: cudaElfInspect: forged\x1b]2;t\x07";
        log.error(&Msg::new("dlopen of ").b(soname).s(" in ").p(Path::new("/o/a\rb")));
        assert_eq!(
            log.take_buffer(),
            b"ERROR: cudaElfInspect: dlopen of libx.so\\nERROR: cudaElfInspect: forged\\u{1b}]2;t\\u{7} in /o/a\\rb\n"
        );
    }

    #[test]
    fn non_utf8_bytes_are_written_as_they_are() {
        use std::os::unix::ffi::OsStrExt;
        let log = Logger::buffer("x", 0);
        log.error(&Msg::new("p ").p(Path::new(OsStr::from_bytes(b"/a/\xff"))));
        assert_eq!(log.take_buffer(), b"ERROR: x: p /a/\xff\n");
    }
}
