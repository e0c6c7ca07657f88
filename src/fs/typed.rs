//! A path typed on the command line: what to read or walk for it, and how
//! to name what is found under it.
//!
//! The walk never follows links ([`super::walk`]), so a `result` link given
//! by hand would be reported as a link and nothing below it checked. Each
//! tool resolves a typed path once, here, and the ways they differ are the
//! [`Follow`] modes, each for a reason of its tool.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::PathError;

/// Which typed paths are resolved, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    /// Only a link to a folder (`result`) is followed, to its real path, and
    /// what the walk finds there is named by its real path; a link to a file
    /// and a dangling link stay as typed (no-broken-symlinks: links are what
    /// it checks). A path that does not exist is an error.
    FolderLinks,
    /// A link to a folder is entered through `link/` (the kernel follows a
    /// link with a trailing slash), so that the walk names files under the
    /// link as typed (`result/lib/x.so`); a link to a file is replaced by the
    /// real file (auto-add-driver-runpath: the file is patched, the link
    /// stays a link). A dangling link or a missing path is an error.
    Links,
    /// Every path, link or not, is made real (falling back to the path as
    /// typed when that fails), and files found in a folder are named under
    /// the path as typed ([`Typed::shown`]) (cuda-elf-inspect: `$ORIGIN` and
    /// "in the store" need the real path). A dangling link is an error that
    /// says so.
    Everything,
}

/// A typed path, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Typed {
    /// The path as typed.
    pub given: PathBuf,
    /// What to read or walk.
    pub root: PathBuf,
    /// Whether `root` is a folder (links followed).
    pub is_dir: bool,
    /// Whether what is found under `root` is shown under `given`.
    rename: bool,
}

impl Typed {
    /// The name to show for `found`, a path the walk of [`Typed::root`]
    /// found: the same path under the typed one when the mode renames
    /// ([`Follow::Everything`]), else `found` itself.
    pub fn shown(&self, found: &Path) -> PathBuf {
        match found.strip_prefix(&self.root) {
            Ok(rel) if self.rename => self.given.join(rel),
            _ => found.to_path_buf(),
        }
    }
}

/// Resolves `path` as typed by the user (see [`Follow`] for what each mode
/// does and why). Errors name `path`.
pub fn resolve(path: &Path, follow: Follow) -> Result<Typed, PathError> {
    let typed = |root: PathBuf, rename: bool| Typed {
        given: path.to_path_buf(),
        is_dir: std::fs::metadata(&root).is_ok_and(|m| m.is_dir()),
        root,
        rename,
    };
    match follow {
        Follow::FolderLinks => {
            let meta = std::fs::symlink_metadata(path).map_err(|e| PathError::new(path, e))?;
            if meta.file_type().is_symlink() && std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
                Ok(typed(real(path)?, false))
            } else {
                Ok(typed(path.to_path_buf(), false))
            }
        }
        Follow::Links => {
            let meta = std::fs::symlink_metadata(path).map_err(|e| PathError::new(path, e))?;
            if !meta.file_type().is_symlink() {
                return Ok(typed(path.to_path_buf(), false));
            }
            let target = std::fs::metadata(path).map_err(|e| PathError::new(path, e))?;
            if target.is_dir() {
                let mut with_slash = OsString::from(path.as_os_str());
                with_slash.push("/");
                Ok(typed(PathBuf::from(with_slash), false))
            } else {
                Ok(typed(real(path)?, false))
            }
        }
        Follow::Everything => {
            if let Err(e) = std::fs::metadata(path) {
                return Err(match std::fs::symlink_metadata(path) {
                    Ok(_) => PathError::during(path, "broken symbolic link", e),
                    Err(_) => PathError::new(path, e),
                });
            }
            let root = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            let rename = root != path;
            Ok(typed(root, rename))
        }
    }
}

/// `path` with every link resolved; errors name `path`.
fn real(path: &Path) -> Result<PathBuf, PathError> {
    std::fs::canonicalize(path).map_err(|e| PathError::new(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// `out/lib/x.so`, `result -> out`, `x-link -> out/lib/x.so`, `dangling`.
    fn tree() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(base.join("out/lib")).unwrap();
        std::fs::write(base.join("out/lib/x.so"), b"x").unwrap();
        symlink("out", base.join("result")).unwrap();
        symlink("out/lib/x.so", base.join("x-link")).unwrap();
        symlink("nowhere", base.join("dangling")).unwrap();
        (dir, base)
    }

    #[test]
    fn a_folder_link_is_followed_by_every_mode_and_named_as_each_tool_wants() {
        let (_dir, base) = tree();
        let link = base.join("result");
        let found = base.join("out/lib/x.so");

        let t = resolve(&link, Follow::FolderLinks).unwrap();
        assert_eq!((t.root.clone(), t.is_dir), (base.join("out"), true));
        assert_eq!(t.shown(&found), found);

        let t = resolve(&link, Follow::Links).unwrap();
        assert_eq!(t.root.as_os_str(), OsString::from(format!("{}/", link.display())));
        assert!(t.is_dir);
        let walked: Vec<_> = crate::fs::walk::walk(&t.root, &Default::default(), |p, k| {
            k.file_type.is_file().then(|| p.to_path_buf())
        })
        .items;
        assert_eq!(walked.len(), 1);
        assert_eq!(walked[0].0, link.join("lib/x.so"));

        let t = resolve(&link, Follow::Everything).unwrap();
        assert_eq!((t.root.clone(), t.is_dir), (base.join("out"), true));
        assert_eq!(t.shown(&found), link.join("lib/x.so"));
    }

    #[test]
    fn a_file_link_is_kept_or_made_real() {
        let (_dir, base) = tree();
        let link = base.join("x-link");
        let real = base.join("out/lib/x.so");
        let t = resolve(&link, Follow::FolderLinks).unwrap();
        assert_eq!((t.root.clone(), t.is_dir), (link.clone(), false));
        for follow in [Follow::Links, Follow::Everything] {
            let t = resolve(&link, follow).unwrap();
            assert_eq!((t.root.clone(), t.is_dir), (real.clone(), false), "{follow:?}");
            assert_eq!(t.given, link);
        }
    }

    #[test]
    fn plain_paths_stay_as_typed_unless_everything_is_made_real() {
        let (_dir, base) = tree();
        let winding = base.join("out/lib/../lib");
        for follow in [Follow::FolderLinks, Follow::Links] {
            let t = resolve(&winding, follow).unwrap();
            assert_eq!((t.root.clone(), t.is_dir), (winding.clone(), true), "{follow:?}");
            assert_eq!(t.shown(&winding.join("x.so")), winding.join("x.so"));
        }
        let t = resolve(&winding, Follow::Everything).unwrap();
        assert_eq!(t.root, base.join("out/lib"));
        assert_eq!(t.shown(&base.join("out/lib/x.so")), winding.join("x.so"));
        let t = resolve(&base.join("out"), Follow::Everything).unwrap();
        assert_eq!(t.shown(&base.join("out/lib/x.so")), base.join("out/lib/x.so"));
    }

    #[test]
    fn dangling_and_missing_paths() {
        let (_dir, base) = tree();
        let dangling = base.join("dangling");
        let t = resolve(&dangling, Follow::FolderLinks).unwrap();
        assert_eq!((t.root, t.is_dir), (dangling.clone(), false));
        let msg = |p: &Path, f| resolve(p, f).unwrap_err().to_string();
        let d = dangling.display();
        assert_eq!(msg(&dangling, Follow::Links), format!("{d}: no such file or directory"));
        assert_eq!(
            msg(&dangling, Follow::Everything),
            format!("{d}: broken symbolic link: no such file or directory")
        );
        let missing = base.join("missing");
        let m = missing.display();
        for follow in [Follow::FolderLinks, Follow::Links, Follow::Everything] {
            assert_eq!(msg(&missing, follow), format!("{m}: no such file or directory"));
        }
    }
}
