//! Store paths read from somewhere else than where they are named.
//!
//! An audit of a binary cache or of a NAR file unpacks each store path into
//! a private temporary folder, but every decision must be the one an audit
//! of the realised path makes: `$ORIGIN`, whether the file is in the store,
//! the folders a NEEDED library is searched in, and the symbolic links the
//! loader follows on the way. A [`Mount`] ties a store path's *logical* name
//! (`/nix/store/<hash>-<name>`, or `x.nar!` for a NAR file) to its *local*
//! copy, and [`Mounts::locate`] turns a logical path into the local file the
//! loader would open, resolving links itself: an absolute link
//! `lib/libb.so.1 -> /nix/store/<other>/lib/libb.so.1.0` lands in the other
//! mount, never in this machine's `/nix/store`.
//!
//! A cache audit of a closure removes each store path's files once it is
//! audited (`audit::closure`); what the loader's lookups still need of them
//! (folders, links and their targets, which files there were) stays here as
//! a [`Tree`], so a lookup through a removed path answers as it did before
//! ([`Located::Gone`] for a file: its kind and loader facts are the
//! resolver's to remember).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

/// The kernel's limit of symbolic links followed in one lookup (`ELOOP`).
pub const MAX_HOPS: usize = 40;

/// One store path's contents, read from a local copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The name the audit reports and decides by (`/nix/store/<hash>-<name>`, `x.nar!`).
    pub logical: PathBuf,
    /// Where its contents were unpacked.
    pub local: PathBuf,
    /// Whether its files count as files in the Nix store (they resolve
    /// libraries without the host's folders). A NAR is a store path's
    /// contents, so true for both kinds.
    pub in_store: bool,
}

impl Mount {
    /// The name under which `local`, a path inside this mount's copy (a
    /// walk error's path), is reported: the same path below the store name.
    /// `None` for a path outside the copy.
    pub fn logical_of(&self, local: &Path) -> Option<PathBuf> {
        let rel = local.strip_prefix(&self.local).ok()?;
        Some(match rel.as_os_str().is_empty() {
            true => self.logical.clone(),
            false => self.logical.join(rel),
        })
    }
}

/// Where a logical path's file is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Located {
    /// Read it here (a local copy, or the logical path itself outside every
    /// mount and outside the cache's store).
    Local(PathBuf),
    /// Nothing there: a name missing inside a mount (or a file the unpacking
    /// left out, which is never an object), or a loop of links.
    Absent,
    /// Inside this store path of the cache's store, which was not fetched
    /// (or not yet, or its NAR failed).
    Unfetched(PathBuf),
    /// A file (or folder) of a mount whose files were removed after its
    /// audit, by its logical path: what it was is remembered by whoever
    /// removed it.
    Gone(PathBuf),
}

/// What a store path's copy held, without the files' bytes: each entry's
/// path relative to the copy (empty for the copy itself) and kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    entries: HashMap<PathBuf, Entry>,
}

/// One entry of a [`Tree`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A folder.
    Dir,
    /// A symbolic link and its target, as written.
    Link(PathBuf),
    /// A regular file (its bytes are gone).
    File,
}

impl Tree {
    /// Reads the tree at `local` (a folder, a file or a link; nothing there
    /// gives an empty tree), links not followed.
    pub fn read(local: &Path) -> std::io::Result<Tree> {
        let mut tree = Tree::default();
        let mut todo = vec![PathBuf::new()];
        while let Some(rel) = todo.pop() {
            let path =
                if rel.as_os_str().is_empty() { local.to_path_buf() } else { local.join(&rel) };
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotFound && rel.as_os_str().is_empty() =>
                {
                    break
                }
                Err(e) => return Err(e),
            };
            let entry = if meta.file_type().is_symlink() {
                Entry::Link(std::fs::read_link(&path)?)
            } else if meta.is_dir() {
                for child in std::fs::read_dir(&path)? {
                    todo.push(rel.join(child?.file_name()));
                }
                Entry::Dir
            } else {
                Entry::File
            };
            tree.entries.insert(rel, entry);
        }
        Ok(tree)
    }

    /// The regular files, relative to the copy.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.entries.iter().filter(|(_, e)| **e == Entry::File).map(|(p, _)| p.as_path())
    }

    /// The entry at `rel`.
    pub fn get(&self, rel: &Path) -> Option<&Entry> {
        self.entries.get(rel)
    }
}

/// Where a mount's files are now.
const LIVE: u8 = 0;
const PENDING: u8 = 1;
const FAILED: u8 = 2;
const DROPPED: u8 = 3;

/// A mount's state, shared by the clones of its [`Mounts`] (the resolver
/// holds one while the audit moves the state on).
#[derive(Debug, Default)]
struct State {
    now: AtomicU8,
    tree: OnceLock<Tree>,
}

/// What a lookup found at one name inside a mount.
enum Found {
    Missing,
    Link(PathBuf),
    Other,
}

/// The mounts of one audit; empty for an audit of real paths.
#[derive(Debug, Clone, Default)]
pub struct Mounts {
    list: Vec<Mount>,
    /// Each mount's state, in the order of `list`.
    states: Vec<Arc<State>>,
    /// The store the mounts were fetched from (a cache's `StoreDir`): a path
    /// below it that no mount holds was not fetched, so it is unknown rather
    /// than read from this machine's store. `None` for NAR files, whose
    /// references are looked for on this machine as for a realised path.
    store: Option<PathBuf>,
    /// Whether every audited file comes from a mount (a cache audit): then
    /// nothing outside the mounts is read at all, a host folder named by a
    /// RUNPATH or an absolute NEEDED included; it counts as empty.
    sealed: bool,
}

impl Mounts {
    /// Mounts of store paths fetched from a cache whose store is `store_dir`.
    pub fn of_cache(list: Vec<Mount>, store_dir: PathBuf) -> Mounts {
        let states = list.iter().map(|_| Arc::default()).collect();
        Mounts { list, states, store: Some(store_dir), sealed: true }
    }

    /// Mounts of NAR files: the store paths they refer to, in `store_dir`,
    /// were not read either (a NAR holds one path, not its closure).
    pub fn of_files(list: Vec<Mount>, store_dir: PathBuf) -> Mounts {
        let states = list.iter().map(|_| Arc::default()).collect();
        Mounts { list, states, store: Some(store_dir), sealed: false }
    }

    /// Marks every mount as not fetched yet: a lookup there is
    /// [`Located::Unfetched`] until [`Mounts::fetched`] says otherwise.
    pub fn pending(self) -> Mounts {
        for s in &self.states {
            s.now.store(PENDING, Ordering::Release);
        }
        self
    }

    fn set(&self, logical: &Path, now: u8, tree: Option<Tree>) {
        if let Some(i) = self.list.iter().position(|m| m.logical == logical) {
            if let Some(tree) = tree {
                let _ = self.states[i].tree.set(tree);
            }
            self.states[i].now.store(now, Ordering::Release);
        }
    }

    /// The mount named `logical` has its files at its local path.
    pub fn fetched(&self, logical: &Path) {
        self.set(logical, LIVE, None)
    }

    /// The mount named `logical` could not be fetched: lookups there are
    /// [`Located::Unfetched`], as for a store path outside the mounts.
    pub fn failed(&self, logical: &Path) {
        self.set(logical, FAILED, None)
    }

    /// The files of the mount named `logical` are about to be removed;
    /// lookups go through `tree` (what they were) from now on.
    pub fn dropped(&self, logical: &Path, tree: Tree) {
        self.set(logical, DROPPED, Some(tree))
    }

    /// Seals the mounts (when every audited file comes from one, e.g. an
    /// audit of NAR files only): nothing outside them is read at all, as in
    /// a cache audit ([`Mounts::of_cache`]).
    pub fn sealed(self, sealed: bool) -> Mounts {
        Mounts { sealed: self.sealed || sealed, ..self }
    }

    /// Whether there are none (an audit of real paths).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The mounts.
    pub fn list(&self) -> &[Mount] {
        &self.list
    }

    /// The mount holding the logical `path`, if any.
    pub fn mount_of(&self, path: &Path) -> Option<&Mount> {
        self.list.iter().find(|m| path.starts_with(&m.logical))
    }

    /// [`Mounts::mount_of`], with its state.
    fn mount_state(&self, path: &Path) -> Option<(&Mount, u8, &State)> {
        let i = self.list.iter().position(|m| path.starts_with(&m.logical))?;
        let state = &self.states[i];
        Some((&self.list[i], state.now.load(Ordering::Acquire), state))
    }

    /// What is at the logical `path` of mount `m`: on disk while its files
    /// are there, else in its remembered tree.
    fn entry(m: &Mount, now: u8, state: &State, path: &Path) -> Found {
        if now == DROPPED {
            let rel = path.strip_prefix(&m.logical).unwrap_or(Path::new(""));
            return match state.tree.get().and_then(|t| t.get(rel)) {
                None => Found::Missing,
                Some(Entry::Link(target)) => Found::Link(target.clone()),
                Some(_) => Found::Other,
            };
        }
        let local = local_of(m, path);
        match std::fs::symlink_metadata(&local) {
            Err(_) => Found::Missing,
            Ok(meta) if meta.file_type().is_symlink() => match std::fs::read_link(&local) {
                Ok(target) => Found::Link(target),
                Err(_) => Found::Missing,
            },
            Ok(_) => Found::Other,
        }
    }

    /// The store path of the cache's store that `path` lies in, when no
    /// mount holds it.
    fn unfetched(&self, path: &Path) -> Option<PathBuf> {
        let store = self.store.as_ref()?;
        let rest = path.strip_prefix(store).ok()?;
        let first = rest.components().next()?;
        Some(store.join(first))
    }

    /// The local file the loader would open for the logical `path`,
    /// following symbolic links inside mounts the way the kernel does
    /// (relative targets from the link's logical folder, absolute ones from
    /// the logical root, `..` from the resolved folder, at most
    /// [`MAX_HOPS`] links). Outside every mount and outside the cache's
    /// store, the rest of the path is left to the kernel, unless a link
    /// inside a mount led there (a NAR's `lib/libf.so -> /etc/passwd`) or
    /// the mounts are a cache's ([`Mounts::of_cache`]): those are
    /// [`Located::Absent`], as in a store that lacks them, and this
    /// machine's file is never opened. A host path that is no regular file
    /// (a device, a FIFO) is absent too: the loader would not map it.
    pub fn locate(&self, path: &Path) -> Located {
        enum Step {
            Root,
            Up,
            Name(OsString),
        }
        fn push(stack: &mut Vec<Step>, path: &Path) {
            for c in path.components().rev() {
                match c {
                    Component::RootDir | Component::Prefix(_) => stack.push(Step::Root),
                    Component::ParentDir => stack.push(Step::Up),
                    Component::CurDir => {}
                    Component::Normal(n) => stack.push(Step::Name(n.to_os_string())),
                }
            }
        }
        let mut stack = Vec::new();
        push(&mut stack, path);
        let mut cur = PathBuf::new();
        let mut hops = 0;
        while let Some(step) = stack.pop() {
            match step {
                Step::Root => cur = PathBuf::from("/"),
                Step::Up => {
                    cur.pop();
                }
                Step::Name(n) => {
                    cur.push(&n);
                    let Some((m, now, state)) = self.mount_state(&cur) else {
                        let above = |p: &PathBuf| p.starts_with(&cur);
                        if self.list.iter().any(|m| above(&m.logical))
                            || self.store.as_ref().is_some_and(above)
                        {
                            continue; // a folder above a mount or the store (`/nix`)
                        }
                        if let Some(store_path) = self.unfetched(&cur) {
                            return Located::Unfetched(store_path);
                        }
                        if self.sealed || hops > 0 {
                            return Located::Absent;
                        }
                        // Outside: the kernel resolves the rest.
                        while let Some(step) = stack.pop() {
                            match step {
                                Step::Root => cur = PathBuf::from("/"),
                                Step::Up => cur.push(".."),
                                Step::Name(n) => cur.push(n),
                            }
                        }
                        return host_file(cur);
                    };
                    if now == PENDING || now == FAILED {
                        return Located::Unfetched(m.logical.clone());
                    }
                    match Self::entry(m, now, state, &cur) {
                        Found::Missing => return Located::Absent,
                        Found::Link(target) => {
                            hops += 1;
                            if hops > MAX_HOPS {
                                return Located::Absent;
                            }
                            cur.pop();
                            push(&mut stack, &target);
                        }
                        Found::Other => {}
                    }
                }
            }
        }
        match self.mount_state(&cur) {
            Some((m, PENDING | FAILED, _)) => Located::Unfetched(m.logical.clone()),
            Some((_, DROPPED, _)) => Located::Gone(cur),
            Some((m, _, _)) => Located::Local(local_of(m, &cur)),
            None => host_file(cur),
        }
    }
}

/// A path of this machine, when it is a regular file (links followed) or
/// missing (the caller's open says so); anything else is absent before
/// anyone opens it: opening a device or a FIFO can block or act.
fn host_file(path: PathBuf) -> Located {
    match std::fs::metadata(&path) {
        Ok(m) if !m.is_file() => Located::Absent,
        _ => Located::Local(path),
    }
}

/// The local path of `logical`, which lies in `m`.
fn local_of(m: &Mount, logical: &Path) -> PathBuf {
    match logical.strip_prefix(&m.logical) {
        Ok(rest) if rest.as_os_str().is_empty() => m.local.clone(),
        Ok(rest) => m.local.join(rest),
        Err(_) => m.local.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn links_inside_mounts_resolve_in_logical_space() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        for d in [&a, &b] {
            std::fs::create_dir_all(d.join("lib")).unwrap();
        }
        std::fs::write(b.join("lib/libb.so.1.0"), b"\x7fELF").unwrap();
        symlink("/s/bbb-b/lib/libb.so.1.0", a.join("lib/libb.so.1")).unwrap();
        symlink("libb.so.1.0", b.join("lib/libb.so.1")).unwrap();
        symlink("../lib/libb.so.1", a.join("lib/up")).unwrap();
        symlink("loop", a.join("lib/loop")).unwrap();
        symlink("/s/ccc-c/lib/x", a.join("lib/elsewhere")).unwrap();
        let mount = |name: &str, local: &Path| Mount {
            logical: PathBuf::from("/s").join(name),
            local: local.to_path_buf(),
            in_store: true,
        };
        let mounts = Mounts::of_cache(vec![mount("aaa-a", &a), mount("bbb-b", &b)], "/s".into());
        let want = Located::Local(b.join("lib/libb.so.1.0"));
        let cases: Vec<(&str, Located)> = vec![
            ("/s/aaa-a/lib/libb.so.1", want.clone()),
            ("/s/aaa-a/lib/up", want.clone()),
            ("/s/bbb-b/lib/libb.so.1", want.clone()),
            ("/s/aaa-a/lib/../../bbb-b/lib/libb.so.1", want.clone()),
            ("/s/aaa-a/lib/nothing", Located::Absent),
            ("/s/aaa-a/lib/loop", Located::Absent),
            ("/s/aaa-a/lib/elsewhere", Located::Unfetched("/s/ccc-c".into())),
            ("/s/ddd-d/lib/libd.so", Located::Unfetched("/s/ddd-d".into())),
            // A cache audit reads nothing of this machine.
            ("/run/opengl-driver/lib/x", Located::Absent),
            ("/s/aaa-a/lib/passwd", Located::Absent),
        ];
        symlink("/etc/passwd", a.join("lib/passwd")).unwrap();
        for (logical, want) in cases {
            assert_eq!(mounts.locate(Path::new(logical)), want, "{logical}");
        }
        // A NAR file's mount: its links into the store lead out of what was read.
        let nar = Mounts::of_files(
            vec![Mount { logical: "x.nar!".into(), local: a.clone(), in_store: true }],
            "/s".into(),
        );
        assert_eq!(
            nar.locate(Path::new("x.nar!/lib/../lib/elsewhere")),
            Located::Unfetched("/s/ccc-c".into())
        );
        // Links never lead out of the mounts; host paths of a NAR audit
        // are read when regular files, never when devices.
        let outside = Mounts { store: None, ..nar };
        assert_eq!(outside.locate(Path::new("x.nar!/lib/elsewhere")), Located::Absent);
        assert_eq!(outside.locate(Path::new("x.nar!/lib/passwd")), Located::Absent);
        assert_eq!(outside.locate(Path::new("/dev/zero")), Located::Absent);
        let host = dir.path().join("host.so");
        std::fs::write(&host, b"x").unwrap();
        assert_eq!(outside.locate(&host), Located::Local(host.clone()));
    }

    #[test]
    fn a_dropped_mount_answers_from_its_tree_as_its_files_did() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        for d in [&a, &b] {
            std::fs::create_dir_all(d.join("lib/sub")).unwrap();
        }
        std::fs::write(b.join("lib/libb.so.1.0"), b"\x7fELF").unwrap();
        symlink("libb.so.1.0", b.join("lib/libb.so.1")).unwrap();
        symlink("../libb.so.1", b.join("lib/sub/up")).unwrap();
        symlink("/s/bbb-b/lib/sub/up", a.join("lib/libb.so")).unwrap();
        symlink("loop", b.join("lib/loop")).unwrap();
        symlink("/etc/passwd", b.join("lib/passwd")).unwrap();
        let mount = |name: &str, local: &Path| Mount {
            logical: PathBuf::from("/s").join(name),
            local: local.to_path_buf(),
            in_store: true,
        };
        let list = vec![mount("aaa-a", &a), mount("bbb-b", &b)];
        let mounts = Mounts::of_cache(list, "/s".into());
        let asked = [
            "/s/aaa-a/lib/libb.so",
            "/s/bbb-b/lib/libb.so.1",
            "/s/bbb-b/lib/sub/up",
            "/s/bbb-b/lib/sub",
            "/s/bbb-b/lib/sub/..",
            "/s/bbb-b/lib/nothing",
            "/s/bbb-b/lib/loop",
            "/s/bbb-b/lib/passwd",
            "/s/bbb-b",
        ];
        let before: Vec<Located> = asked.iter().map(|p| mounts.locate(Path::new(p))).collect();
        assert_eq!(before[0], Located::Local(b.join("lib/libb.so.1.0")));
        let tree = Tree::read(&b).unwrap();
        assert_eq!(tree.files().collect::<Vec<_>>(), [Path::new("lib/libb.so.1.0")]);
        mounts.clone().dropped(Path::new("/s/bbb-b"), tree);
        std::fs::remove_dir_all(&b).unwrap();
        // A local path without a trailing `/`, so both answers compare.
        let trimmed = |l: Located| match l {
            Located::Local(l) => {
                Located::Local(PathBuf::from(l.to_str().unwrap().trim_end_matches('/')))
            }
            other => other,
        };
        for (p, was) in asked.iter().zip(before) {
            let now = match mounts.locate(Path::new(p)) {
                Located::Gone(logical) => {
                    Located::Local(b.join(logical.strip_prefix("/s/bbb-b").unwrap()))
                }
                other => other,
            };
            assert_eq!(trimmed(now), trimmed(was), "{p}");
        }
        // Not fetched yet, or failed: unknown, as outside the mounts.
        let pending = Mounts::of_cache(vec![mount("aaa-a", &a)], "/s".into()).pending();
        let unknown = Located::Unfetched("/s/aaa-a".into());
        assert_eq!(pending.locate(Path::new("/s/aaa-a/lib/libb.so")), unknown);
        pending.fetched(Path::new("/s/aaa-a"));
        assert_eq!(
            pending.locate(Path::new("/s/aaa-a/lib/sub")),
            Located::Local(a.join("lib/sub"))
        );
        pending.failed(Path::new("/s/aaa-a"));
        assert_eq!(pending.locate(Path::new("/s/aaa-a/lib/sub")), unknown);
    }
}
