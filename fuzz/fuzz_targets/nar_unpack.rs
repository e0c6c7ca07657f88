//! Fuzz target: `nar::unpack`, the only code that writes what a binary cache
//! serves to disk. Each input is unpacked into `parent/out` of a fresh
//! `parent` folder that also holds a sentinel file. Properties: no panic;
//! afterwards `parent` holds the sentinel, unchanged, and at most `out`
//! (nothing was written beside the destination or through a link pointing
//! there); every entry the reader yielded before the first error is on disk
//! at its path below `out` with its type (a symlink with its target as
//! given), under real folders only (no link was written through); nothing
//! else is below `out`; no file holds more bytes than it declared; an
//! archive the reader accepts whole (names within NAME_MAX) is unpacked
//! without error, every entry on disk.
//!
//! Issue 24, what the audit does with an unpacked tree: every link target
//! and a name taken from the input (as a thin archive's member name would
//! be), resolved inside `out` by `store::confine`, stays inside `out`;
//! `Mounts::locate` of every link, `out` mounted, never gives a file outside
//! `out`; `unpack_within` under a 64 KiB budget (each entry costs 4 KiB and its name) ends with the budget holding
//! what it reports stored (nothing after an error), never more than 64 KiB.
//! A closure audit removes a path's files once audited and looks it up
//! through its remembered `Tree`: `locate` of every entry and link target
//! answers the same from the tree as from the files.
#![no_main]

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use libfuzzer_sys::fuzz_target;
use nix_cuda_hooks::store::budget::Budget;
use nix_cuda_hooks::store::confine;
use nix_cuda_hooks::store::mounts::{Located, Mount, Mounts, Tree};
use nix_cuda_hooks::store::nar::{self, EntryKind, NarReader};

const SENTINEL: &[u8] = b"must stay as it is";

static RUN: AtomicU64 = AtomicU64::new(0);

fuzz_target!(|data: &[u8]| {
    // What the reader yields before its first error (a second reader: the
    // one `unpack` consumes is not visible).
    let mut expected = BTreeMap::new();
    let mut reader = NarReader::new(data);
    let mut longest_name = 0;
    let whole = loop {
        let entry = match reader.next_entry() {
            Ok(Some(entry)) => entry,
            Ok(None) => break true,
            Err(_) => break false,
        };
        if let Some(name) = entry.path.file_name() {
            longest_name = longest_name.max(name.len());
        }
        let mut len = 0u64;
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.contents().read(&mut buf) {
            if n == 0 {
                break;
            }
            len += n as u64;
        }
        expected.insert(entry.path, (entry.kind, len));
    };

    let base = std::env::temp_dir().join(format!("nar_unpack-{}", std::process::id()));
    let parent = base.join(RUN.fetch_add(1, Ordering::Relaxed).to_string());
    fs::create_dir_all(&parent).expect("temporary folder");
    fs::write(parent.join("sentinel"), SENTINEL).expect("sentinel");
    let out = parent.join("out");

    let result = nar::unpack(&mut NarReader::new(data), &out, &|_| true);

    let mut beside: Vec<_> = fs::read_dir(&parent)
        .expect("parent")
        .map(|e| e.expect("entry").file_name().into_string().expect("ASCII"))
        .collect();
    beside.sort();
    assert!(beside == ["out", "sentinel"] || beside == ["sentinel"], "beside: {beside:?}");
    assert_eq!(fs::read(parent.join("sentinel")).expect("sentinel"), SENTINEL);

    let mut on_disk = BTreeMap::new();
    if fs::symlink_metadata(&out).is_ok() {
        walk(&out, PathBuf::new(), &mut on_disk);
    }
    for (path, kind) in &on_disk {
        let Some((declared, read)) = expected.get(path) else {
            panic!("{path:?} is on disk but the reader never yielded it");
        };
        match (kind, declared) {
            (Disk::Dir, EntryKind::Directory) => {}
            (Disk::Link(t), EntryKind::Symlink { target }) => assert_eq!(t, target),
            (Disk::File(len), EntryKind::Regular { size, .. }) => {
                assert!(len <= size && len <= read, "{path:?}: {len} bytes of {size}")
            }
            (disk, declared) => panic!("{path:?}: {disk:?} on disk, {declared:?} in the NAR"),
        }
        // Every folder above it is a real folder, not a link.
        for ancestor in path.ancestors().skip(1) {
            let at = if ancestor.as_os_str().is_empty() { out.clone() } else { out.join(ancestor) };
            let meta = fs::symlink_metadata(at).expect("ancestor");
            assert!(meta.is_dir() && !meta.file_type().is_symlink(), "{ancestor:?}");
        }
    }
    // An archive the reader accepts whole is unpacked whole, unless a name
    // is longer than the file system allows (NAME_MAX, 255 bytes).
    if whole && longest_name <= 255 {
        if let Err(e) = &result {
            panic!("the reader accepts the archive but unpack fails: {e}");
        }
    }
    if result.is_ok() {
        assert_eq!(on_disk.len(), expected.len(), "unpack succeeded but wrote another tree");
    }
    if fs::symlink_metadata(&out).is_ok_and(|m| m.is_dir()) {
        confined(&out, &on_disk, data);
    }
    let budget = Budget::new(64 << 10);
    let small = parent.join("small");
    let within = nar::unpack_within(&mut NarReader::new(data), &small, &|_| true, &budget);
    match within {
        Ok(done) => assert_eq!(budget.used(), done.stored),
        Err(_) => assert_eq!(budget.used(), 0, "an error left bytes charged"),
    }
    assert!(budget.used() <= 64 << 10);
    fs::remove_dir_all(&parent).expect("cleanup");
});

/// Links and names resolved inside `out` stay there (see the module doc).
fn confined(out: &Path, on_disk: &BTreeMap<PathBuf, Disk>, data: &[u8]) {
    use std::ffi::OsStr;
    let logical = Path::new("/m");
    let mount = Mount { logical: logical.into(), local: out.to_path_buf(), in_store: true };
    let mounts = Mounts::of_files(vec![mount], "/s".into());
    let name = OsStr::from_bytes(&data[..data.len().min(64)]);
    let mut names = vec![(PathBuf::new(), PathBuf::from(name))];
    for (path, kind) in on_disk {
        if let Disk::Link(target) = kind {
            let folder = path.parent().unwrap_or(Path::new("")).to_path_buf();
            names.push((folder, PathBuf::from(OsStr::from_bytes(target))));
            if let Located::Local(local) = mounts.locate(&logical.join(path)) {
                assert!(local.starts_with(out), "{path:?} located at {local:?}");
            }
        }
    }
    // The same lookups through the tree, once the files would be gone.
    let tree = Tree::read(out).expect("tree");
    let gone = Mounts::of_files(
        vec![Mount { logical: logical.into(), local: out.to_path_buf(), in_store: true }],
        "/s".into(),
    );
    gone.dropped(logical, tree);
    let mut asked: Vec<PathBuf> = on_disk.keys().map(|p| logical.join(p)).collect();
    asked.extend(names.iter().map(|(folder, name)| logical.join(folder).join(name)));
    for path in asked {
        let was = mounts.locate(&path);
        let now = match gone.locate(&path) {
            Located::Gone(l) if l == logical => Located::Local(out.to_path_buf()),
            Located::Gone(l) => Located::Local(out.join(l.strip_prefix(logical).expect("inside"))),
            other => other,
        };
        assert_eq!(was, now, "{path:?}: from the files, then from the tree");
    }
    for (folder, name) in names {
        if let Ok(resolved) = confine::resolve_inside(out, &folder, &name) {
            assert!(resolved.starts_with(out), "{name:?} from {folder:?}: {resolved:?}");
            // What the kernel opens there stays inside too.
            if let (Ok(real), Ok(root)) = (fs::canonicalize(&resolved), fs::canonicalize(out)) {
                assert!(real.starts_with(&root), "{name:?} from {folder:?}: opens {real:?}");
            }
        }
    }
}

#[derive(Debug)]
enum Disk {
    Dir,
    File(u64),
    Link(Vec<u8>),
}

/// The tree below `root`, links not followed.
fn walk(root: &Path, rel: PathBuf, out: &mut BTreeMap<PathBuf, Disk>) {
    // Not `root.join("")` for the root: its trailing `/` fails on a file.
    let path = if rel.as_os_str().is_empty() { root.to_owned() } else { root.join(&rel) };
    let meta = fs::symlink_metadata(&path).expect("lstat");
    let kind = if meta.file_type().is_symlink() {
        Disk::Link(fs::read_link(&path).expect("readlink").as_os_str().as_bytes().to_vec())
    } else if meta.is_dir() {
        for entry in fs::read_dir(&path).expect("read_dir") {
            walk(root, rel.join(entry.expect("entry").file_name()), out);
        }
        Disk::Dir
    } else {
        assert!(meta.is_file(), "{path:?} is neither folder, file nor link");
        Disk::File(meta.len())
    };
    out.insert(rel, kind);
}
