//! The walk of output trees shared by every binary.
//!
//! Properties the hooks rely on:
//! - symlinks are never followed (a link is reported as a link; a root that is
//!   itself a link is reported and not entered, as `find -P` does);
//! - other filesystems are not entered unless asked (`find -xdev`);
//! - directories are read in parallel (rayon), and the callback runs in
//!   parallel too, so per-file work (a readlink, an ELF header read) overlaps;
//! - results are sorted by path bytes before they are returned, so logs are
//!   identical from run to run whatever the thread timing;
//! - an unreadable folder is an error naming it, and the walk goes on.
//!
//! Memory is proportional to what the callback keeps, not to the tree: a
//! callback that returns `None` for ordinary files keeps nothing for them.

use std::fs::{self, FileType};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::PathError;

/// What a callback learns about one entry without an extra system call.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    /// The entry's own type (`lstat`, from `d_type` where the filesystem has it).
    pub file_type: FileType,
    /// Depth below the root (the root is 0).
    pub depth: usize,
}

/// Options of a walk.
#[derive(Debug, Clone)]
pub struct Options {
    /// Stay on the root's filesystem (default: yes).
    pub same_file_system: bool,
    /// Run serially (tests compare this with the parallel walk).
    pub serial: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { same_file_system: true, serial: false }
    }
}

/// The result of a walk: what the callback kept, sorted by path, and errors.
#[derive(Debug)]
pub struct Walked<T> {
    /// `(path, value)` for every entry the callback returned `Some` for.
    pub items: Vec<(PathBuf, T)>,
    /// Folders that could not be read, entries that vanished, sorted by path.
    pub errors: Vec<PathError>,
}

struct Shared<'f, T, F> {
    callback: &'f F,
    options: &'f Options,
    root_dev: u64,
    items: Mutex<Vec<(PathBuf, T)>>,
    errors: Mutex<Vec<PathError>>,
}

/// Walks `root` and calls `callback(path, kind)` for every entry, the root
/// included. A root that does not exist is an error in `errors`.
pub fn walk<T, F>(root: &Path, options: &Options, callback: F) -> Walked<T>
where
    T: Send,
    F: Fn(&Path, Kind) -> Option<T> + Sync,
{
    let mut walked = Walked { items: Vec::new(), errors: Vec::new() };
    let meta = match fs::symlink_metadata(root) {
        Ok(m) => m,
        Err(e) => {
            walked.errors.push(PathError::new(root, e));
            return walked;
        }
    };
    let file_type = meta.file_type();
    if let Some(v) = callback(root, Kind { file_type, depth: 0 }) {
        walked.items.push((root.to_path_buf(), v));
    }
    if !file_type.is_dir() {
        return walked;
    }
    let shared = Shared {
        callback: &callback,
        options,
        root_dev: meta.dev(),
        items: Mutex::new(std::mem::take(&mut walked.items)),
        errors: Mutex::new(Vec::new()),
    };
    if options.serial {
        let mut stack = vec![(root.to_path_buf(), 1)];
        while let Some((dir, depth)) = stack.pop() {
            stack.extend(read_one(&shared, &dir, depth));
        }
    } else {
        rayon::scope(|scope| spawn_dir(scope, &shared, root.to_path_buf(), 1));
    }
    walked.items = shared.items.into_inner().unwrap_or_else(|e| e.into_inner());
    walked.errors = shared.errors.into_inner().unwrap_or_else(|e| e.into_inner());
    walked.items.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    walked.errors.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    walked
}

fn spawn_dir<'s, T, F>(
    scope: &rayon::Scope<'s>,
    shared: &'s Shared<'s, T, F>,
    dir: PathBuf,
    depth: usize,
) where
    T: Send,
    F: Fn(&Path, Kind) -> Option<T> + Sync,
{
    scope.spawn(move |scope| {
        for (sub, d) in read_one(shared, &dir, depth) {
            spawn_dir(scope, shared, sub, d);
        }
    });
}

/// Reads one folder: calls back for each entry, returns the sub-folders to
/// enter. The callbacks of one folder's entries run in parallel too: a
/// folder holds the big files side by side (the 15 CUDA libraries of a wheel's
/// `lib/`, 1.7 GB), and the audit's callback reads each one.
fn read_one<T, F>(shared: &Shared<'_, T, F>, dir: &Path, depth: usize) -> Vec<(PathBuf, usize)>
where
    T: Send,
    F: Fn(&Path, Kind) -> Option<T> + Sync,
{
    use rayon::prelude::*;
    let mut subdirs = Vec::new();
    let mut entries_seen = Vec::new();
    let mut errors = Vec::new();
    match fs::read_dir(dir) {
        Err(e) => errors.push(PathError::new(dir, e)),
        Ok(entries) => {
            for entry in entries {
                let entry = match entry {
                    Ok(e) => e,
                    Err(e) => {
                        errors.push(PathError::new(dir, e));
                        break;
                    }
                };
                let path = entry.path();
                let file_type = match entry.file_type() {
                    Ok(t) => t,
                    // Vanished between readdir and lstat: nothing to check.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        errors.push(PathError::new(&path, e));
                        continue;
                    }
                };
                entries_seen.push((path.clone(), file_type));
                if file_type.is_dir() {
                    if shared.options.same_file_system {
                        match entry.metadata() {
                            Ok(m) if m.dev() != shared.root_dev => continue,
                            Ok(_) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                            Err(e) => {
                                errors.push(PathError::new(&path, e));
                                continue;
                            }
                        }
                    }
                    subdirs.push((path, depth + 1));
                }
            }
        }
    }
    let call = |(path, file_type): &(PathBuf, FileType)| {
        let kind = Kind { file_type: *file_type, depth };
        (shared.callback)(path, kind).map(|v| (path.clone(), v))
    };
    let mut kept: Vec<(PathBuf, T)> = match shared.options.serial {
        true => entries_seen.iter().filter_map(call).collect(),
        false => entries_seen.par_iter().filter_map(call).collect(),
    };
    if !kept.is_empty() {
        shared.items.lock().unwrap_or_else(|e| e.into_inner()).append(&mut kept);
    }
    if !errors.is_empty() {
        shared.errors.lock().unwrap_or_else(|e| e.into_inner()).append(&mut errors);
    }
    subdirs
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for d in ["a/b/c", "a/d", "e"] {
            fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        for f in ["a/b/c/f1", "a/f2", "e/f3"] {
            fs::write(dir.path().join(f), b"x").unwrap();
        }
        symlink("../e", dir.path().join("a/link-to-dir")).unwrap();
        symlink("nowhere", dir.path().join("a/b/dangling")).unwrap();
        dir
    }

    fn all(root: &Path, serial: bool) -> Vec<PathBuf> {
        let opts = Options { serial, ..Options::default() };
        let w = walk(root, &opts, |_, _| Some(()));
        assert!(w.errors.is_empty(), "{:?}", w.errors);
        w.items.into_iter().map(|(p, _)| p.strip_prefix(root).unwrap().to_path_buf()).collect()
    }

    #[test]
    fn serial_and_parallel_agree_and_are_sorted() {
        let t = tree();
        let par = all(t.path(), false);
        assert_eq!(par, all(t.path(), true));
        let mut sorted = par.clone();
        sorted.sort();
        assert_eq!(par, sorted);
        // 3 files, 2 links, 5 folders below the root, and the root itself.
        assert_eq!(par.len(), 11);
    }

    #[test]
    fn links_are_not_followed() {
        let t = tree();
        let paths = all(t.path(), false);
        assert!(paths.contains(&PathBuf::from("a/link-to-dir")));
        assert!(!paths
            .iter()
            .any(|p| p.starts_with("a/link-to-dir") && p != Path::new("a/link-to-dir")));
    }

    #[test]
    fn a_root_link_is_reported_not_entered() {
        let t = tree();
        let root = t.path().join("a/link-to-dir");
        let w = walk(&root, &Options::default(), |_, k| Some(k.file_type.is_symlink()));
        assert_eq!(w.items.len(), 1);
        assert!(w.items[0].1);
    }

    #[test]
    fn missing_root_is_an_error_naming_it() {
        let w = walk(Path::new("/nonexistent/x"), &Options::default(), |_, _| Some(()));
        assert_eq!(w.errors.len(), 1);
        assert!(w.errors[0].to_string().starts_with("/nonexistent/x: "));
    }
}
