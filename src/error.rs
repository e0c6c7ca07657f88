//! Typed errors shared by the library modules.
//!
//! Every error names the file it is about: a user reading a build log must be
//! able to find the offending path without rerunning anything. Binaries wrap
//! these in `anyhow` at their edge and print `tool: path: message`.

use std::io;
use std::path::PathBuf;

/// An I/O failure on one path.
#[derive(Debug, thiserror::Error)]
#[error("{}: {}{}", path.display(), op.map(|o| format!("{o}: ")).unwrap_or_default(), describe_io(source))]
pub struct PathError {
    /// The file or folder the operation was about.
    pub path: PathBuf,
    /// What was being done, when the path alone does not say it (a bare
    /// "operation not permitted" on a file that was only read is a puzzle;
    /// "cannot rename the new file over it: operation not permitted" is not).
    pub op: Option<&'static str>,
    /// What the kernel said.
    #[source]
    pub source: io::Error,
}

impl PathError {
    /// Wraps `source` with the path it happened on.
    pub fn new(path: impl Into<PathBuf>, source: io::Error) -> PathError {
        PathError { path: path.into(), op: None, source }
    }

    /// Wraps `source` with the path and the operation that failed.
    pub fn during(path: impl Into<PathBuf>, op: &'static str, source: io::Error) -> PathError {
        PathError { path: path.into(), op: Some(op), source }
    }

    /// The message without the path: `op: reason`.
    pub fn reason(&self) -> String {
        match self.op {
            Some(op) => format!("{op}: {}", describe_io(&self.source)),
            None => describe_io(&self.source),
        }
    }
}

/// A lower-case description of an I/O error without Rust's `(os error N)` tail,
/// in the style of coreutils messages.
pub fn describe_io(err: &io::Error) -> String {
    let text = err.to_string();
    let text = match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_read_like_coreutils() {
        let e = PathError::new("/x/y", io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(e.to_string(), "/x/y: no such file or directory");
    }
}
