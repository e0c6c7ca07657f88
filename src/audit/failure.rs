//! A file or folder the audit could not examine: where, and why. Kept
//! typed until it is shown, so that a store path unpacked to a temporary
//! folder is renamed on its path (not by editing a message) and every report
//! format says it the same way: `path: reason`.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::store::cache::CacheError;

/// One file or folder that could not be examined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The path as shown (a store path's files under their store name).
    pub path: PathBuf,
    /// Why.
    pub reason: Reason,
}

/// Why a path could not be examined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The file system refused: the kernel's words, after the operation
    /// when it says more (see [`crate::error::PathError::reason`]).
    Io(String),
    /// A path given is a symbolic link whose target cannot be read (the
    /// kernel's words).
    BrokenLink(String),
    /// The bytes are not an object the readers can take apart: their words.
    Unreadable(String),
    /// A store path could not be fetched from the cache, or a NAR file not
    /// unpacked: the cache client's words.
    Fetch(String),
    /// The store path itself is a symbolic link, to this target.
    StoreLink(PathBuf),
    /// Not examined: the run was interrupted (Ctrl-C) before it was done.
    Interrupted,
}

impl Failure {
    /// An I/O error on `path`.
    pub fn io(path: &Path, err: &std::io::Error) -> Failure {
        Failure { path: path.to_path_buf(), reason: Reason::Io(crate::error::describe_io(err)) }
    }

    /// A file whose bytes the readers refused.
    pub fn unreadable(path: &Path, err: impl fmt::Display) -> Failure {
        Failure { path: path.to_path_buf(), reason: Reason::Unreadable(err.to_string()) }
    }

    /// A store path left unexamined because the run was interrupted.
    pub fn interrupted(path: &Path) -> Failure {
        Failure { path: path.to_path_buf(), reason: Reason::Interrupted }
    }

    /// The same failure named under another path (a mount's store name).
    pub fn renamed(self, path: PathBuf) -> Failure {
        Failure { path, ..self }
    }

    /// A store path or NAR file that could not be read, as a failure on the
    /// path the cache client names (every one of its messages is `path: why`).
    pub fn of_fetch(e: &CacheError) -> Failure {
        let path = match e {
            // The bound of a closure names no store path: the option does.
            CacheError::Closure { .. } => "--closure",
            // Alike failures are summarised under the first of them.
            CacheError::Alike { first, .. } => first.as_str(),
            CacheError::Url(url) => url.as_str(),
            CacheError::NotStorePath { path, .. }
            | CacheError::NotFound { path, .. }
            | CacheError::Fetch { path, .. }
            | CacheError::NarInfo { path, .. }
            | CacheError::Compression { path, .. }
            | CacheError::Nar { path, .. }
            | CacheError::Mismatch { path, .. } => path.as_str(),
        };
        let text = e.to_string();
        let why = text.strip_prefix(path).and_then(|t| t.strip_prefix(": ")).unwrap_or(&text);
        Failure { path: PathBuf::from(path), reason: Reason::Fetch(why.to_string()) }
    }
}

impl From<&crate::error::PathError> for Failure {
    fn from(e: &crate::error::PathError) -> Failure {
        Failure { path: e.path.clone(), reason: Reason::Io(e.reason()) }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Io(text) | Reason::Unreadable(text) | Reason::Fetch(text) => f.write_str(text),
            Reason::BrokenLink(text) => write!(f, "broken symbolic link: {text}"),
            Reason::Interrupted => f.write_str("not examined: interrupted (Ctrl-C)"),
            Reason::StoreLink(target) => write!(
                f,
                "the store path is a symbolic link (to {}): audit its target",
                target.display()
            ),
        }
    }
}

/// `path: reason`, as every report format shows it.
impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

/// In JSON a failure is its line (the schema's `failures` are strings).
impl Serialize for Failure {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Sorts failures as their lines read (byte order of `path: reason`, so
/// that `a/b: x` and `a/b/c: y` keep the order reports always had).
pub fn sort(failures: &mut [Failure]) {
    failures.sort_by_cached_key(ToString::to_string);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_read_path_colon_reason_and_sort_as_lines() {
        let enoent = std::io::Error::from_raw_os_error(libc::ENOENT);
        let mut all = vec![
            Failure::io(Path::new("a/b/c"), &enoent),
            Failure { path: "a/b".into(), reason: Reason::BrokenLink("no such file".into()) },
            Failure { path: "/s/x".into(), reason: Reason::StoreLink("/s/y".into()) },
        ];
        sort(&mut all);
        let lines: Vec<String> = all.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "/s/x: the store path is a symbolic link (to /s/y): audit its target",
                "a/b/c: no such file or directory",
                "a/b: broken symbolic link: no such file",
            ]
        );
        let renamed = all.remove(1).renamed("/nix/store/x-foo/lib".into());
        assert_eq!(renamed.to_string(), "/nix/store/x-foo/lib: no such file or directory");
        assert_eq!(serde_json::to_string(&renamed).unwrap(), format!("\"{renamed}\""));
    }
}
