//! The NAR reader and the narinfo parser against real Nix: `nix-store --dump`
//! writes the archives, `nix-hash` computes the hashes, and `nix copy` to a
//! `file://` binary cache writes signed narinfo files and zstd-compressed
//! NARs. Nix is installed by `make tools`; without it these tests fail.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix_cuda_hooks::nar::{EntryKind, NarReader};
use nix_cuda_hooks::narinfo::{Compression, NarInfo, PublicKey, Sha256};
use sha2::Digest;

/// A Nix command with a throwaway store under `dir`.
fn nix(dir: &Path, program: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new(program)
        .args(args)
        .env("NIX_STORE_DIR", dir.join("store"))
        .env("NIX_STATE_DIR", dir.join("state"))
        .env("NIX_LOG_DIR", dir.join("log"))
        .env("NIX_CONF_DIR", dir.join("etc"))
        .env("HOME", dir.join("home"))
        .env("NIX_PATH", "")
        .output()
        .unwrap_or_else(|e| panic!("{program} cannot run ({e}): run `make tools` first"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A tree with what a NAR must get right: nesting, empty folders and files,
/// sizes on and off the 8-byte padding, the executable bit, absolute,
/// relative and dangling links, byte order of names (upper case first), and a
/// name that is not UTF-8.
fn make_tree(root: &Path) {
    let files: &[(&str, &[u8], bool)] = &[
        ("a", b"hello\n", false),
        ("a-b", b"", false),
        ("a.b", b"12345678", true),
        ("B", b"upper", false),
        ("lib/libx.so.1", &[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9], false),
        ("lib/deep/er/still/file", b"deep", true),
    ];
    for (path, data, exec) in files {
        let path = root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, data).unwrap();
        let mode = if *exec { 0o755 } else { 0o644 };
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    }
    fs::create_dir_all(root.join("empty")).unwrap();
    fs::write(root.join(std::ffi::OsStr::from_bytes(b"caf\xe9")), b"latin-1").unwrap();
    std::os::unix::fs::symlink("a", root.join("rel")).unwrap();
    std::os::unix::fs::symlink("/nix/store/none", root.join("abs")).unwrap();
    std::os::unix::fs::symlink("../../../../outside", root.join("lib/up")).unwrap();
}

#[derive(Debug, PartialEq, Eq)]
enum Node {
    Dir,
    File { executable: bool, data: Vec<u8> },
    Link(Vec<u8>),
}

/// The tree as the file system has it, keyed by relative path.
fn read_tree(root: &Path) -> BTreeMap<PathBuf, Node> {
    fn visit(root: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Node>) {
        let path = root.join(rel);
        let meta = fs::symlink_metadata(&path).unwrap();
        let node = if meta.file_type().is_symlink() {
            Node::Link(fs::read_link(&path).unwrap().as_os_str().as_bytes().to_vec())
        } else if meta.is_dir() {
            for entry in fs::read_dir(&path).unwrap() {
                visit(root, &rel.join(entry.unwrap().file_name()), out);
            }
            Node::Dir
        } else {
            Node::File {
                executable: meta.permissions().mode() & 0o100 != 0,
                data: fs::read(&path).unwrap(),
            }
        };
        out.insert(rel.to_path_buf(), node);
    }
    let mut out = BTreeMap::new();
    visit(root, Path::new(""), &mut out);
    out
}

/// The archive as our reader sees it, with the order it gave the paths in.
fn read_nar(bytes: impl Read) -> (BTreeMap<PathBuf, Node>, Vec<PathBuf>) {
    let mut reader = NarReader::new(bytes);
    let mut out = BTreeMap::new();
    let mut order = Vec::new();
    while let Some(entry) = reader.next_entry().expect("real NAR must read") {
        let node = match entry.kind {
            EntryKind::Directory => Node::Dir,
            EntryKind::Symlink { target } => Node::Link(target),
            EntryKind::Regular { executable, size } => {
                let mut data = Vec::new();
                reader.contents().read_to_end(&mut data).unwrap();
                assert_eq!(data.len() as u64, size);
                Node::File { executable, data }
            }
        };
        order.push(entry.path.clone());
        out.insert(entry.path, node);
    }
    (out, order)
}

#[test]
fn real_nix_dumps_read_back_as_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    make_tree(&tree);
    let dump = nix(dir.path(), "nix-store", &["--dump", tree.to_str().unwrap()]);
    let (got, order) = read_nar(dump.as_slice());
    assert_eq!(got, read_tree(&tree));
    // Nix writes a directory's entries in byte order of their names: the
    // reader yields a directory before its entries, entries in that order.
    let mut sorted = order.clone();
    sorted.sort_by(|a, b| {
        a.components()
            .map(|c| c.as_os_str().as_bytes())
            .cmp(b.components().map(|c| c.as_os_str().as_bytes()))
    });
    assert_eq!(order, sorted);

    // Our hash of the archive, in Nix's base-32, is what nix-hash prints.
    let ours = Sha256(sha2::Sha256::digest(&dump).into()).to_nix32();
    let theirs =
        nix(dir.path(), "nix-hash", &["--type", "sha256", "--base32", tree.to_str().unwrap()]);
    assert_eq!(ours, format!("sha256:{}", String::from_utf8(theirs).unwrap().trim()));

    // Every proper prefix of a real archive is refused as truncated.
    for cut in [0, 7, 8, dump.len() / 3, dump.len() / 2, dump.len() - 8, dump.len() - 1] {
        let mut reader = NarReader::new(&dump[..cut]);
        let err = loop {
            match reader.next_entry() {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("a NAR cut at {cut} of {} was accepted", dump.len()),
                Err(e) => break e,
            }
        };
        assert!(err.to_string().contains("truncated"), "cut at {cut}: {err}");
    }
}

#[test]
fn real_binary_cache_narinfo_verifies_and_its_nar_matches() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for sub in ["etc", "home"] {
        fs::create_dir_all(d.join(sub)).unwrap();
    }
    let tree = d.join("tree");
    make_tree(&tree);
    let (sk, pk, pk2) = (d.join("sk"), d.join("pk"), d.join("pk2"));
    nix(
        d,
        "nix-store",
        &["--generate-binary-cache-key", "test-1", sk.to_str().unwrap(), pk.to_str().unwrap()],
    );
    nix(
        d,
        "nix-store",
        &[
            "--generate-binary-cache-key",
            "test-1",
            d.join("sk2").to_str().unwrap(),
            pk2.to_str().unwrap(),
        ],
    );
    let path = String::from_utf8(nix(d, "nix-store", &["--add", tree.to_str().unwrap()])).unwrap();
    let path = path.trim();
    let cache = d.join("cache");
    let to = format!("file://{}?compression=zstd&secret-key={}", cache.display(), sk.display());
    nix(d, "nix", &["--extra-experimental-features", "nix-command", "copy", "--to", &to, path]);

    let store_dir = d.join("store");
    let store_dir = store_dir.to_str().unwrap();
    let hash_part = &path[store_dir.len() + 1..][..32];
    let text = fs::read_to_string(cache.join(format!("{hash_part}.narinfo"))).unwrap();
    let info = NarInfo::parse(&text, store_dir).unwrap();
    assert_eq!(info.store_path, path);
    assert_eq!(info.compression, Compression::Zstd);

    // Nix's signature verifies with Nix's public key, and not with another.
    let key = PublicKey::parse(fs::read_to_string(&pk).unwrap().trim()).unwrap();
    assert_eq!(info.verify(store_dir, std::slice::from_ref(&key)).unwrap(), "test-1");
    let other = PublicKey::parse(fs::read_to_string(&pk2).unwrap().trim()).unwrap();
    let err = info.verify(store_dir, &[other]).unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");

    // The compressed NAR decompresses, as a stream, to the archive whose hash
    // and size the narinfo states, and reads back as the store path's tree.
    let file = fs::File::open(cache.join(&info.url)).unwrap();
    let decoder = ruzstd::decoding::StreamingDecoder::new(file).unwrap();
    let mut hashing = HashingReader { inner: decoder, hasher: sha2::Sha256::new(), len: 0 };
    let (got, _) = read_nar(&mut hashing);
    assert_eq!(got, read_tree(Path::new(path)));
    assert_eq!(hashing.len, info.nar_size);
    assert_eq!(Sha256(hashing.hasher.finalize().into()), info.nar_hash);
}

struct HashingReader<R> {
    inner: R,
    hasher: sha2::Sha256,
    len: u64,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
}
