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

use nix_cuda_hooks::store::nar::{EntryKind, NarReader};
use nix_cuda_hooks::store::narinfo::{Compression, NarInfo, PublicKey, Sha256};
use sha2::Digest;

/// A Nix command (Nix >= 2.18 from `make tools`, never the host's) with a
/// throwaway store under `dir`.
fn nix(dir: &Path, program: &str, args: &[&str]) -> Vec<u8> {
    common::nix(dir, program, args)
}

/// `nix-build` of the expression `expr` in the throwaway store under `dir`
/// (no sandbox, no substituters): its stdout, the output paths.
fn nix_build(dir: &Path, expr: &str) -> Vec<u8> {
    let options = ["sandbox", "false", "substituters", "", "build-users-group", ""];
    let mut args = vec!["--no-out-link"];
    for pair in options.chunks(2) {
        args.extend(["--option", pair[0], pair[1]]);
    }
    args.extend(["-E", expr]);
    nix(dir, "nix-build", &args)
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
    let c = real_cache("zstd");
    let d = c.dir.path();
    // Another key of the same name: the name matches, the signature must not.
    let (_, other_key) = keygen(d, "test-1", "other");
    let (path, cache) = (c.store_path.as_str(), &c.cache);
    let store_dir = d.join("store");
    let store_dir = store_dir.to_str().unwrap();
    let hash_part = &path[store_dir.len() + 1..][..32];
    let text = fs::read_to_string(cache.join(format!("{hash_part}.narinfo"))).unwrap();
    let info = NarInfo::parse(&text, store_dir).unwrap();
    assert_eq!(info.store_path, path);
    assert_eq!(info.compression, Compression::Zstd);

    // Nix's signature verifies with Nix's public key, and not with another.
    let key = PublicKey::parse(&c.public_key).unwrap();
    assert_eq!(info.verify(store_dir, std::slice::from_ref(&key)).unwrap(), "test-1");
    let other = PublicKey::parse(&other_key).unwrap();
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

// ---- the cache client ------------------------------------------------------

use nix_cuda_hooks::store::budget::{Budget, Limits};
use nix_cuda_hooks::store::cache::{Cache, CacheError};
use nix_cuda_hooks::store::scratch::Scratch;

/// The stall limit of NAR files unpacked directly (the default's).
const STALL: std::time::Duration =
    std::time::Duration::from_secs(nix_cuda_hooks::store::budget::DEFAULT_STALL_SECS);

/// A real binary cache written by `nix copy` with `compression`, signed.
struct RealCache {
    dir: tempfile::TempDir,
    store_path: String,
    cache: PathBuf,
    public_key: String,
}

/// A folder for a throwaway Nix store and its configuration.
fn nix_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["etc", "home"] {
        fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    dir
}

/// A signing key made by Nix, named `key_name`, in `<file>.sk` and
/// `<file>.pk`: the secret key's file and the public key's text.
fn keygen(d: &Path, key_name: &str, file: &str) -> (PathBuf, String) {
    let (sk, pk) = (d.join(format!("{file}.sk")), d.join(format!("{file}.pk")));
    nix(
        d,
        "nix-store",
        &["--generate-binary-cache-key", key_name, sk.to_str().unwrap(), pk.to_str().unwrap()],
    );
    (sk, fs::read_to_string(&pk).unwrap().trim().to_string())
}

fn real_cache(compression: &str) -> RealCache {
    let dir = nix_dir();
    let d = dir.path();
    let tree = d.join("tree");
    make_tree(&tree);
    let (sk, public_key) = keygen(d, "test-1", "test");
    let store_path =
        String::from_utf8(nix(d, "nix-store", &["--add", tree.to_str().unwrap()])).unwrap();
    let store_path = store_path.trim().to_string();
    let cache = d.join("cache");
    let to =
        format!("file://{}?compression={compression}&secret-key={}", cache.display(), sk.display());
    nix(
        d,
        "nix",
        &["--extra-experimental-features", "nix-command", "copy", "--to", &to, &store_path],
    );
    RealCache { dir, store_path, cache, public_key }
}

impl RealCache {
    fn narinfo(&self) -> PathBuf {
        let base = Path::new(&self.store_path).file_name().unwrap().to_str().unwrap();
        self.cache.join(format!("{}.narinfo", &base[..32]))
    }
    fn keys(&self) -> Vec<nix_cuda_hooks::store::narinfo::PublicKey> {
        vec![PublicKey::parse(&self.public_key).unwrap()]
    }
    fn open(&self, url: &str) -> Cache {
        Cache::open(url, self.keys(), Limits::default()).unwrap()
    }
    fn file_url(&self) -> String {
        format!("file://{}", self.cache.display())
    }
}

fn keep_all(_: &[u8]) -> bool {
    true
}

#[test]
fn every_compression_nix_writes_is_read_and_verified() {
    for compression in ["xz", "zstd", "bzip2", "none"] {
        let c = real_cache(compression);
        let cache = c.open(&c.file_url());
        assert_eq!(cache.store_dir(), c.dir.path().join("store").to_str().unwrap());
        let dest = c.dir.path().join("out");
        let fetched = cache
            .fetch(&c.store_path, &dest, &keep_all, &Budget::unlimited())
            .unwrap_or_else(|e| panic!("{compression}: {e}"));
        assert_eq!(read_tree(&dest), read_tree(Path::new(&c.store_path)), "{compression}");
        assert_eq!(fetched.unpacked.left_out, 0);
        // Keeping only ELF files writes the one ELF file and counts the rest.
        let elf_only = c.dir.path().join("elf");
        let fetched = cache
            .fetch(
                &c.store_path,
                &elf_only,
                &|head: &[u8]| head.starts_with(b"\x7fELF"),
                &Budget::unlimited(),
            )
            .unwrap();
        assert_eq!(fetched.unpacked.files, 1, "{compression}");
        assert_eq!(
            fs::read(elf_only.join("lib/libx.so.1")).unwrap(),
            fs::read(Path::new(&c.store_path).join("lib/libx.so.1")).unwrap()
        );
        assert!(!elf_only.join("a").exists());
    }
}

/// Serves `root` over HTTP/1.1 on 127.0.0.1 for at most 32 connections; a
/// request for a path ending in `.truncated` gets half its body and a closed
/// connection.
fn serve(root: PathBuf) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(32) {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            // The request line; headers are read and ignored.
            let request = |reader: &mut BufReader<_>| -> Option<String> {
                let mut line = String::new();
                reader.read_line(&mut line).ok()?;
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) <= 2 {
                        break;
                    }
                }
                Some(line)
            };
            let Some(mut line) = request(&mut reader) else { continue };
            // As a proxy (HTTP_PROXY pointing here): CONNECT opens a tunnel
            // to "the cache", which is this server again.
            if line.starts_with("CONNECT ") {
                let _ = write!(stream, "HTTP/1.1 200 Connection established\r\n\r\n");
                let Some(tunnelled) = request(&mut reader) else { continue };
                line = tunnelled;
            }
            let rel =
                line.split_whitespace().nth(1).unwrap_or("/").trim_start_matches('/').to_string();
            let (rel, truncate) = match rel.strip_suffix(".truncated") {
                Some(r) => (r.to_string(), true),
                None => (rel, false),
            };
            match fs::read(root.join(&rel)) {
                Ok(body) => {
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let sent = if truncate { &body[..body.len() / 2] } else { &body[..] };
                    let _ = stream.write_all(sent);
                }
                Err(_) => {
                    let _ = write!(
                        stream,
                        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                }
            }
        }
    });
    format!("http://127.0.0.1:{port}")
}

#[test]
fn http_cache_reads_like_the_folder() {
    let c = real_cache("xz");
    let cache = c.open(&serve(c.cache.clone()));
    let dest = c.dir.path().join("out");
    cache.fetch(&c.store_path, &dest, &keep_all, &Budget::unlimited()).unwrap();
    assert_eq!(read_tree(&dest), read_tree(Path::new(&c.store_path)));
}

/// Rewrites the `field` line of a narinfo file.
fn set_narinfo_field(file: &Path, field: &str, value: &str) {
    let text = fs::read_to_string(file).unwrap();
    let text: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with(&format!("{field}: ")) {
                format!("{field}: {value}")
            } else {
                l.to_string()
            }
        })
        .collect();
    fs::write(file, text.join("\n") + "\n").unwrap();
}

/// Rewrites one line of the narinfo.
fn edit_narinfo(c: &RealCache, field: &str, value: &str) {
    set_narinfo_field(&c.narinfo(), field, value);
}

fn fetch_error(c: &RealCache, url: &str, keys: bool) -> CacheError {
    let cache = Cache::open(url, if keys { c.keys() } else { vec![] }, Limits::default()).unwrap();
    let dest = c.dir.path().join("out");
    let err = cache
        .fetch(&c.store_path, &dest, &keep_all, &Budget::unlimited())
        .expect_err("the fetch must fail");
    assert!(err.to_string().starts_with(&c.store_path), "the error names the path: {err}");
    assert!(!dest.exists(), "nothing is left of a failed fetch: {err}");
    err
}

#[test]
fn bad_caches_are_clear_errors_naming_the_path() {
    // A missing narinfo.
    let c = real_cache("none");
    fs::remove_file(c.narinfo()).unwrap();
    assert!(matches!(fetch_error(&c, &c.file_url(), true), CacheError::NotFound { .. }));

    // A wrong NarHash: refused by the signature with keys, by the hash without.
    let c = real_cache("none");
    edit_narinfo(&c, "NarHash", &format!("sha256:{}", "0".repeat(52)));
    let err = fetch_error(&c, &c.file_url(), true);
    assert!(
        matches!(err, CacheError::NarInfo { .. }) && err.to_string().contains("does not match"),
        "{err}"
    );
    let err = fetch_error(&c, &c.file_url(), false);
    assert!(
        matches!(err, CacheError::Mismatch { .. }) && err.to_string().contains("NarHash"),
        "{err}"
    );

    // An unsigned narinfo when keys are trusted.
    let c = real_cache("none");
    let text = fs::read_to_string(c.narinfo()).unwrap();
    fs::write(
        c.narinfo(),
        text.lines().filter(|l| !l.starts_with("Sig: ")).collect::<Vec<_>>().join("\n"),
    )
    .unwrap();
    let err = fetch_error(&c, &c.file_url(), true);
    assert!(err.to_string().contains("not signed"), "{err}");

    // An unknown compression.
    let c = real_cache("none");
    edit_narinfo(&c, "Compression", "lz4");
    let err = fetch_error(&c, &c.file_url(), false);
    assert!(
        matches!(err, CacheError::Compression { .. }) && err.to_string().contains("lz4"),
        "{err}"
    );

    // A corrupted NAR (one byte of a file's contents changed): the hash.
    let c = real_cache("none");
    let info = NarInfo::parse(
        &fs::read_to_string(c.narinfo()).unwrap(),
        c.dir.path().join("store").to_str().unwrap(),
    )
    .unwrap();
    let nar = c.cache.join(&info.url);
    let mut bytes = fs::read(&nar).unwrap();
    let at = bytes.windows(6).position(|w| w == b"hello\n").unwrap();
    bytes[at] = b'j';
    fs::write(&nar, &bytes).unwrap();
    let err = fetch_error(&c, &c.file_url(), false);
    assert!(matches!(err, CacheError::Mismatch { .. }), "{err}");

    // A truncated NAR file, and a truncated download.
    for (compression, over_http) in [("xz", false), ("zstd", false), ("none", false), ("xz", true)]
    {
        let c = real_cache(compression);
        let info = NarInfo::parse(
            &fs::read_to_string(c.narinfo()).unwrap(),
            c.dir.path().join("store").to_str().unwrap(),
        )
        .unwrap();
        let url = if over_http {
            edit_narinfo(&c, "URL", &format!("{}.truncated", info.url));
            serve(c.cache.clone())
        } else {
            let nar = c.cache.join(&info.url);
            let bytes = fs::read(&nar).unwrap();
            fs::write(&nar, &bytes[..bytes.len() / 2]).unwrap();
            c.file_url()
        };
        let err = fetch_error(&c, &url, false);
        assert!(matches!(err, CacheError::Nar { .. }), "{compression} http={over_http}: {err}");
    }

    // Not a store path of the cache's store.
    let c = real_cache("none");
    let cache = c.open(&c.file_url());
    let err = cache
        .fetch("/nix/store/x-y", &c.dir.path().join("out"), &keep_all, &Budget::unlimited())
        .unwrap_err();
    assert!(matches!(err, CacheError::NotStorePath { .. }), "{err}");
}

#[test]
fn local_nar_files_are_read_by_their_extension() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    make_tree(&tree);
    let dump = nix(dir.path(), "nix-store", &["--dump", tree.to_str().unwrap()]);
    let nar = dir.path().join("x.nar");
    fs::write(&nar, &dump).unwrap();
    let dest = dir.path().join("out");
    nix_cuda_hooks::store::cache::unpack_file(&nar, &dest, &keep_all, &Budget::unlimited(), STALL)
        .unwrap();
    assert_eq!(read_tree(&dest), read_tree(&tree));
    let odd = dir.path().join("x.nar.lz4");
    fs::write(&odd, &dump).unwrap();
    let err = nix_cuda_hooks::store::cache::unpack_file(
        &odd,
        &dir.path().join("out2"),
        &keep_all,
        &Budget::unlimited(),
        STALL,
    )
    .unwrap_err();
    assert!(err.to_string().contains("x.nar.lz4"), "{err}");
}

#[test]
fn a_closure_is_followed_through_references_and_a_missing_member_is_named() {
    let dir = nix_dir();
    let d = dir.path();
    // Three real build outputs: top refers to mid, mid to leaf.
    let expr = r#"
      let mk = name: text: derivation {
            inherit name; system = builtins.currentSystem; builder = "/bin/sh";
            args = [ "-c" "PATH=/usr/bin:/bin; mkdir $out; echo '${text}' > $out/ref" ];
          };
          leaf = mk "leaf" "none";
          mid = mk "mid" "${leaf}";
      in mk "top" "${mid}""#;
    let top = nix_build(d, expr);
    let top = String::from_utf8(top).unwrap().trim().to_string();
    let (sk, public_key) = keygen(d, "test-1", "test");
    let cache_dir = d.join("cache");
    let to = format!("file://{}?secret-key={}", cache_dir.display(), sk.display());
    nix(d, "nix", &["--extra-experimental-features", "nix-command", "copy", "--to", &to, &top]);
    let closure: Vec<String> = String::from_utf8(nix(d, "nix-store", &["-qR", &top]))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(closure.len(), 3);

    let key = PublicKey::parse(&public_key).unwrap();
    let cache =
        Cache::open(&format!("file://{}", cache_dir.display()), vec![key], Limits::default())
            .unwrap();
    let count = std::sync::atomic::AtomicUsize::new(0);
    let done = |_: &str, _: &Result<nix_cuda_hooks::store::cache::Fetched, CacheError>| {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    };
    let out = Scratch::create_in(d, u64::MAX).unwrap();
    let got = cache.fetch_all(std::slice::from_ref(&top), true, &out, &keep_all, 4, &done);
    let mut paths: Vec<String> = got.iter().map(|(p, _)| p.clone()).collect();
    paths.sort();
    let mut expected = closure.clone();
    expected.sort();
    assert_eq!(paths, expected);
    assert_eq!(count.load(std::sync::atomic::Ordering::Relaxed), 3);
    for (path, result) in &got {
        result.as_ref().unwrap_or_else(|e| panic!("{path}: {e}"));
        let base = Path::new(path).file_name().unwrap();
        assert_eq!(read_tree(&out.path().join(base)), read_tree(Path::new(path)));
    }

    // Without --closure only the root; with a member's narinfo gone, that
    // member is an error naming it and the others are still read.
    let only = Scratch::create_in(d, u64::MAX).unwrap();
    assert_eq!(
        cache.fetch_all(std::slice::from_ref(&top), false, &only, &keep_all, 4, &done).len(),
        1
    );
    let mid = closure.iter().find(|p| p.ends_with("-mid")).unwrap();
    let mid_hash = &Path::new(mid).file_name().unwrap().to_str().unwrap()[..32];
    fs::remove_file(cache_dir.join(format!("{mid_hash}.narinfo"))).unwrap();
    let again = Scratch::create_in(d, u64::MAX).unwrap();
    let got = cache.fetch_all(std::slice::from_ref(&top), true, &again, &keep_all, 4, &done);
    assert_eq!(got.len(), 2, "the leaf is unknown once mid is missing");
    let (_, err) = got.iter().find(|(p, _)| p == mid).unwrap();
    let err = err.as_ref().unwrap_err();
    assert!(
        matches!(err, CacheError::NotFound { .. }) && err.to_string().starts_with(mid.as_str()),
        "{err}"
    );
    assert!(got.iter().any(|(p, r)| p == &top && r.is_ok()));
}

/// The window a zstd frame header declares (format spec, section
/// Window_Descriptor), read here independently of the library.
fn zstd_window(frame: &[u8]) -> u64 {
    assert_eq!(&frame[..4], &[0x28, 0xb5, 0x2f, 0xfd], "a zstd frame");
    assert_eq!(frame[4] & 0x20, 0, "not single-segment: a window descriptor follows");
    let base = 1u64 << (10 + (frame[5] >> 3));
    base + base / 8 * u64::from(frame[5] & 7)
}

/// The LZMA2 dictionary size of an xz file's first block (xz format spec,
/// sections 3.1 and 5.3.1): the block flags say which sizes precede the
/// filter flags, each a variable-length integer.
fn xz_dictionary(xz: &[u8]) -> u64 {
    assert_eq!(&xz[..6], b"\xfd7zXZ\0");
    let flags = xz[13];
    let mut at = 14;
    for present in [flags & 0x40 != 0, flags & 0x80 != 0] {
        if present {
            while xz[at] & 0x80 != 0 {
                at += 1;
            }
            at += 1;
        }
    }
    assert_eq!(&xz[at..at + 2], &[0x21, 0x01], "one LZMA2 filter");
    let d = xz[at + 2];
    (2 | u64::from(d & 1)) << (d / 2 + 11)
}

#[test]
fn every_level_nix_copy_writes_decodes_within_the_decoder_bound() {
    use nix_cuda_hooks::store::decompress::MAX_WINDOW;
    let dir = nix_dir();
    let d = dir.path();
    let tree = d.join("tree");
    make_tree(&tree);
    fs::write(tree.join("lines"), (0..50_000).map(|i| format!("{i}\n")).collect::<String>())
        .unwrap();
    let store_path = String::from_utf8(nix(d, "nix-store", &["--add", tree.to_str().unwrap()]))
        .unwrap()
        .trim()
        .to_string();
    let mut largest = BTreeMap::new();
    for (i, query) in [
        "compression=xz",
        "compression=xz&compression-level=9",
        "compression=xz&parallel-compression=true",
        "compression=zstd",
        "compression=zstd&compression-level=19",
        "compression=zstd&compression-level=22",
        "compression=zstd&parallel-compression=true",
        "compression=bzip2&compression-level=9",
    ]
    .iter()
    .enumerate()
    {
        let cache = d.join(format!("cache-{i}"));
        let to = format!("file://{}?{query}", cache.display());
        nix(
            d,
            "nix",
            &["--extra-experimental-features", "nix-command", "copy", "--to", &to, &store_path],
        );
        let nar = fs::read_dir(cache.join("nar")).unwrap().next().unwrap().unwrap().path();
        let bytes = fs::read(&nar).unwrap();
        let memory = match nar.extension().unwrap().to_str().unwrap() {
            "zst" => zstd_window(&bytes),
            "xz" => xz_dictionary(&bytes),
            _ => 0,
        };
        assert!(memory <= MAX_WINDOW, "{query}: {memory}");
        let format = nar.extension().unwrap().to_str().unwrap().to_string();
        let e = largest.entry(format).or_insert(0);
        *e = memory.max(*e);
        let cache =
            Cache::open(&format!("file://{}", cache.display()), vec![], Limits::default()).unwrap();
        let dest = d.join(format!("out-{i}"));
        cache
            .fetch(&store_path, &dest, &keep_all, &Budget::unlimited())
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        assert_eq!(read_tree(&dest), read_tree(Path::new(&store_path)), "{query}");
    }
    // zstd level 22 declares exactly the bound (2^27), xz -9 64 MiB: the
    // bound is what lets every level Nix offers through and nothing more.
    assert_eq!(largest["zst"], MAX_WINDOW);
    assert_eq!(largest["xz"], 64 << 20);
}

/// The NAR of a folder holding one file `big` of `size` bytes, without the
/// contents: the bytes before them and the bytes after.
fn nar_around_big_file(size: u64) -> (Vec<u8>, Vec<u8>) {
    let put = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s);
        out.resize(out.len().div_ceil(8) * 8, 0);
    };
    let mut head = Vec::new();
    for t in ["nix-archive-1", "(", "type", "directory", "entry", "(", "name", "big", "node", "("] {
        put(&mut head, t.as_bytes());
    }
    for t in ["type", "regular", "contents"] {
        put(&mut head, t.as_bytes());
    }
    head.extend_from_slice(&size.to_le_bytes());
    let mut tail = Vec::new();
    for t in [")", ")", ")"] {
        put(&mut tail, t.as_bytes());
    }
    (head, tail)
}

/// A zstd stream of [`nar_around_big_file`] with `size` zero bytes: the
/// head in a raw block, the zeros in 128 KiB RLE blocks (4 bytes each), the
/// tail in a last raw block. `window` is the frame's window descriptor.
fn zstd_bomb(window: u8, size: u64) -> Vec<u8> {
    zstd_bomb_diluted(window, size, false)
}

/// [`zstd_bomb`]; with `diluted`, a raw block of 2 KiB (not zeros) after
/// every 1 MiB of zeros: the stream expands about 500 times, under the bound
/// on expansion (issue 29), so it is decoded to its end.
fn zstd_bomb_diluted(window: u8, size: u64, diluted: bool) -> Vec<u8> {
    // The file holds the zeros and the raw blocks.
    let extra = if diluted { (size >> 20) * 2048 } else { 0 };
    let (head, tail) = nar_around_big_file(size + extra);
    let block = |size: usize, kind: u32, last: bool| {
        (((size as u32) << 3) | (kind << 1) | u32::from(last)).to_le_bytes()[..3].to_vec()
    };
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, window];
    out.extend(block(head.len(), 0, false));
    out.extend(head);
    assert_eq!(size % (128 << 10), 0);
    for i in 0..size / (128 << 10) {
        out.extend(block(128 << 10, 1, false));
        out.push(0);
        if diluted && i % 8 == 7 {
            out.extend(block(2048, 0, false));
            out.extend(std::iter::repeat_n(0x5a, 2048));
        }
    }
    out.extend(block(tail.len(), 0, true));
    out.extend(tail);
    out
}

/// Peak resident memory of this process (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Hostile local NAR files, each unpacked in a process of its own (this
/// test run again as a child) whose peak memory is measured: a zstd frame
/// declaring a 2 TiB window over 1 GiB of zeros made from 32 KiB (refused
/// at the header), the same at the 128 MiB bound (decoded: memory stays
/// within twice the window), a NAR declaring a 2^62-byte file on a 1 MiB stream,
/// and an xz block declaring a 4 GiB dictionary. Each error names the file.
#[test]
fn hostile_nar_files_are_refused_in_bounded_memory() {
    const CHILD: &str = "NCH_NAR_MEMORY_CASE";
    let dir = tempfile::tempdir().unwrap();
    let nar = |name: &str, bytes: Vec<u8>| {
        let path = dir.path().join(name);
        fs::write(&path, bytes).unwrap();
        path
    };
    if let Ok(case) = std::env::var(CHILD) {
        let file = match case.as_str() {
            "zstd-2tib-window" => nar("bomb.nar.zst", zstd_bomb(0xf8, 1 << 30)),
            "zstd-128mib-window" => nar("ok.nar.zst", zstd_bomb_diluted(0x88, 1 << 30, true)),
            "nar-2pow62-file" => {
                let (mut plain, _) = nar_around_big_file(1 << 62);
                plain.extend(std::iter::repeat_n(0x7f, 1 << 20));
                nar("huge.nar", plain)
            }
            "xz-4gib-dictionary" => {
                let mut xz = Vec::new();
                liblzma::read::XzEncoder::new(&b"nix-archive-1"[..], 0)
                    .read_to_end(&mut xz)
                    .unwrap();
                let size = (usize::from(xz[12]) + 1) * 4;
                xz[16] = 40;
                let crc = crc32fast_ieee(&xz[12..12 + size - 4]);
                xz[12 + size - 4..12 + size].copy_from_slice(&crc.to_le_bytes());
                nar("dict.nar.xz", xz)
            }
            other => panic!("unknown case {other}"),
        };
        let dest = dir.path().join("out");
        let result = nix_cuda_hooks::store::cache::unpack_file(
            &file,
            &dest,
            &|_| false,
            &Budget::unlimited(),
            STALL,
        );
        println!("rss-child peak={}", peak_rss_kib());
        match result {
            Ok(u) => println!("rss-child ok skipped={}", u.left_out),
            Err(e) => println!("rss-child error={e}"),
        }
        return;
    }
    let run = |case: &str| -> (u64, String) {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "hostile_nar_files_are_refused_in_bounded_memory", "--nocapture"])
            .env(CHILD, case)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{case}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        let line = |key: &str| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix("rss-child ").and_then(|l| l.strip_prefix(key)))
                .map(str::to_string)
        };
        let peak = line("peak=").unwrap_or_else(|| panic!("{case}: {stdout}")).parse().unwrap();
        let outcome = line("error=").or_else(|| line("ok ").map(|s| format!("ok {s}"))).unwrap();
        (peak, outcome)
    };
    let mib = 1024;
    let (peak, outcome) = run("zstd-2tib-window");
    assert!(outcome.contains("bomb.nar.zst") && outcome.contains("2.0 TiB"), "{outcome}");
    assert!(outcome.contains("more than the 128 MiB limit"), "{outcome}");
    assert!(peak < 64 * mib, "zstd 2 TiB window: peak {peak} KiB");
    let (peak, outcome) = run("zstd-128mib-window");
    assert_eq!(outcome, "ok skipped=1");
    // libzstd holds one window and one block (about 128 MiB) besides the rest.
    assert!(peak < (128 + 64) * mib, "zstd 128 MiB window, 1 GiB out: peak {peak} KiB");
    let (peak, outcome) = run("nar-2pow62-file");
    assert!(
        outcome.contains("huge.nar: NAR byte ") && outcome.ends_with("the archive is truncated"),
        "{outcome}"
    );
    assert!(peak < 64 * mib, "2^62-byte file: peak {peak} KiB");
    let (peak, outcome) = run("xz-4gib-dictionary");
    assert!(outcome.contains("dict.nar.xz") && outcome.contains("more than 128 MiB"), "{outcome}");
    assert!(peak < 64 * mib, "xz 4 GiB dictionary: peak {peak} KiB");
}

/// CRC-32 (IEEE), for the xz block header the test above edits.
fn crc32fast_ieee(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// A narinfo a cache serves that is not text, too large, or in CRLF: each
/// a clear error naming the store path, nothing written.
#[test]
fn hostile_narinfo_files_are_clear_errors() {
    let c = real_cache("none");
    let good = fs::read(c.narinfo()).unwrap();
    let mut latin1 = good.clone();
    latin1.extend_from_slice(b"Deriver: caf\xe9.drv\n");
    fs::write(c.narinfo(), &latin1).unwrap();
    let err = fetch_error(&c, &c.file_url(), false);
    assert!(
        err.to_string().contains(&format!("not UTF-8 text (byte {})", good.len() + 12)),
        "{err}"
    );
    let mut huge = good.clone();
    huge.extend(std::iter::repeat_n(b'#', 1 << 20));
    fs::write(c.narinfo(), &huge).unwrap();
    let err = fetch_error(&c, &c.file_url(), false);
    assert!(err.to_string().contains("larger than 1048576 bytes"), "{err}");
    let crlf = String::from_utf8(good.clone()).unwrap().replace('\n', "\r\n");
    fs::write(c.narinfo(), crlf).unwrap();
    let err = fetch_error(&c, &c.file_url(), false);
    assert!(err.to_string().contains("narinfo: line 1: control character '\\r'"), "{err}");
    fs::write(c.narinfo(), &good).unwrap();
    edit_narinfo(&c, "URL", "nar/%2e%2e/%2e%2e/x.nar");
    let err = fetch_error(&c, &c.file_url(), false);
    assert!(err.to_string().contains("narinfo: URL: "), "{err}");
}

/// Hostile compressed NARs served by a cache: a zstd frame with a 2 TiB
/// window, an xz block with a 4 GiB dictionary (Nix's own NAR, its header
/// edited), a bzip2 stream with a flipped byte. Each is a clear error naming
/// the store path; nothing is left.
#[test]
fn hostile_compressed_nars_from_a_cache_name_the_store_path() {
    for compression in ["zstd", "xz", "bzip2"] {
        let c = real_cache(compression);
        let info = NarInfo::parse(
            &fs::read_to_string(c.narinfo()).unwrap(),
            c.dir.path().join("store").to_str().unwrap(),
        )
        .unwrap();
        let nar = c.cache.join(&info.url);
        let mut bytes = fs::read(&nar).unwrap();
        let expected = match compression {
            "zstd" => {
                bytes = zstd_bomb(0xf8, 1 << 20);
                "zstd stream, compressed byte 0: a frame declares a 2.0 TiB"
            }
            "xz" => {
                assert_eq!(&bytes[13..16], &[0x00, 0x21, 0x01], "Nix's xz block header");
                let size = (usize::from(bytes[12]) + 1) * 4;
                bytes[16] = 40;
                let crc = crc32fast_ieee(&bytes[12..12 + size - 4]);
                bytes[12 + size - 4..12 + size].copy_from_slice(&crc.to_le_bytes());
                "the stream needs more than 128 MiB of memory to decode"
            }
            _ => {
                let at = bytes.len() / 2;
                bytes[at] ^= 0x55;
                // bzip2 checks a block's CRC at its end, after its output
                // was passed on: the NAR reader may see the garbage first.
                "NAR byte "
            }
        };
        fs::write(&nar, bytes).unwrap();
        let err = fetch_error(&c, &c.file_url(), false);
        assert!(matches!(err, CacheError::Nar { .. }), "{compression}: {err}");
        assert!(err.to_string().contains(expected), "{compression}: {err}");
    }
}

// ---- the audit of a cache and of NAR files, through the binary --------------

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// Runs the audit with a clean environment (no build, no capabilities),
/// `TMPDIR` the folder `tmp` next to `store`, and checks that the private
/// folder it unpacks to is gone afterwards.
fn inspect(store: &Path, args: &[&str]) -> std::process::Output {
    inspect_with(store, args, &[])
}

/// [`inspect`] with variables set, e.g. a proxy.
fn inspect_with(store: &Path, args: &[&str], vars: &[(&str, &str)]) -> std::process::Output {
    let tmp = store.with_file_name("tmp");
    fs::create_dir_all(&tmp).unwrap();
    let out = Command::new(BIN)
        .args(args)
        .envs(vars.iter().copied())
        .env("NIX_STORE", store)
        .env("TMPDIR", &tmp)
        .env_remove("NIX_LOG_FD")
        .env_remove("NIX_DEBUG")
        .env_remove("outputs")
        .env_remove("out")
        .env_remove("NIX_ATTRS_JSON_FILE")
        .env_remove("cudaCapabilities")
        .env_remove("CUDAARCHS")
        .env_remove("TORCH_CUDA_ARCH_LIST")
        .env_remove("cudaForwardCompat")
        .output()
        .unwrap();
    assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0, "a temporary folder was left behind");
    out
}

fn shown(out: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A closure of real objects built by `nix-build` in a throwaway store:
/// `b` (a gcc-built libb.so.1.0 and its soname link), `a` (liba.so NEEDs
/// libb.so.1 through RUNPATH `<b>/lib`; `lib/libb.so.1` an absolute link
/// into `b`; `bin/prog` NEEDs both through `$ORIGIN/../lib` only, so libb is
/// found through that link; `bin/lost` NEEDs a library nobody installed;
/// `bin/sass_only`, built by nvcc 13.5, has device code and a static CUDA
/// runtime but no driver RUNPATH), and `c`, unrelated, for the error cases.
struct Closure {
    dir: tempfile::TempDir,
    store: PathBuf,
    a: String,
    b: String,
    c: String,
    secret: PathBuf,
    public_key: String,
}

fn build_closure() -> Closure {
    let fixtures = common::fixtures::build_all();
    let sass_only =
        fixtures.iter().find(|(v, _)| v.name == "sass-only").unwrap().1.join("sass_only");
    let dir = nix_dir();
    let d = dir.path();
    let scripts = [
        (
            "b.sh",
            "PATH=/usr/bin:/bin; mkdir -p $out/lib; echo 'int b(void) { return 2; }' > b.c\n\
             gcc -shared -fPIC -Wl,-soname,libb.so.1 -o $out/lib/libb.so.1.0 b.c\n\
             ln -s libb.so.1.0 $out/lib/libb.so.1\n",
        ),
        (
            "a.sh",
            "PATH=/usr/bin:/bin; mkdir -p $out/lib $out/bin gone\n\
             echo 'int b(void); int a(void) { return b(); }' > a.c\n\
             gcc -shared -fPIC -o $out/lib/liba.so a.c $b/lib/libb.so.1 -Wl,--enable-new-dtags,-rpath,$b/lib\n\
             ln -s $b/lib/libb.so.1.0 $out/lib/libb.so.1\n\
             echo 'int a(void); int b(void); int main(void) { return a() - b(); }' > m.c\n\
             gcc -o $out/bin/prog m.c -L$out/lib -la $out/lib/libb.so.1 -Wl,--enable-new-dtags,-rpath,'$ORIGIN/../lib'\n\
             echo 'int g(void) { return 0; }' > g.c; gcc -shared -fPIC -o gone/libgone.so g.c\n\
             echo 'int g(void); int main(void) { return g(); }' > l.c; gcc -o $out/bin/lost l.c -Lgone -lgone\n\
             cp $sass $out/bin/sass_only\n\
             echo 'not an object' > $out/lib/README\n",
        ),
        (
            "c.sh",
            "PATH=/usr/bin:/bin; mkdir -p $out/lib; echo 'int c(void) { return 3; }' > c.c\n\
             gcc -shared -fPIC -o $out/lib/libc3.so c.c\n",
        ),
    ];
    for (name, text) in scripts {
        fs::write(d.join(name), text).unwrap();
    }
    let expr = format!(
        r#"let mk = name: attrs: derivation ({{
            inherit name; system = builtins.currentSystem; builder = "/bin/sh";
            args = [ "-e" "{d}/${{name}}.sh" ];
          }} // attrs);
          b = mk "b" {{}};
      in [ (mk "a" {{ inherit b; sass = "{sass}"; }}) (mk "c" {{}}) ]"#,
        d = d.display(),
        sass = sass_only.display()
    );
    let built = nix_build(d, &expr);
    let built: Vec<String> =
        String::from_utf8(built).unwrap().lines().map(str::to_string).collect();
    let (a, c) = (built[0].clone(), built[1].clone());
    let closure = String::from_utf8(nix(d, "nix-store", &["-qR", &a])).unwrap();
    let b = closure.lines().find(|p| p.ends_with("-b")).unwrap().to_string();
    let (secret, public_key) = keygen(d, "test-1", "test");
    Closure { store: d.join("store"), dir, a, b, c, secret, public_key }
}

impl Closure {
    /// `nix copy` of `paths` (and their closures) to a new signed cache.
    fn cache(&self, name: &str, compression: &str, paths: &[&str]) -> PathBuf {
        let d = self.dir.path();
        let cache = d.join(name);
        let to = format!(
            "file://{}?compression={compression}&secret-key={}",
            cache.display(),
            self.secret.display()
        );
        let mut args = vec!["--extra-experimental-features", "nix-command", "copy", "--to", &to];
        args.extend_from_slice(paths);
        nix(d, "nix", &args);
        cache
    }

    /// The compressed NAR file the cache holds for `path`.
    fn cached_nar(&self, cache: &Path, path: &str) -> PathBuf {
        let base = Path::new(path).file_name().unwrap().to_str().unwrap();
        let text = fs::read_to_string(cache.join(format!("{}.narinfo", &base[..32]))).unwrap();
        let info = NarInfo::parse(&text, self.store.to_str().unwrap()).unwrap();
        cache.join(info.url)
    }

    fn narinfo(&self, cache: &Path, path: &str) -> PathBuf {
        let base = Path::new(path).file_name().unwrap().to_str().unwrap();
        cache.join(format!("{}.narinfo", &base[..32]))
    }
}

/// The audit of a cache equals, byte for byte, the audit of the realised
/// paths (text and JSON, over file:// and HTTP), and a NAR file's audit is
/// the realised path's with `FILE.nar!` for the store path. The realised
/// store is moved away first: nothing may be read from it.
#[test]
fn a_cache_audits_like_the_realised_closure() {
    let c = build_closure();
    let d = c.dir.path();
    let cache = c.cache("cache", "xz", &[&c.a, &c.c]);
    let zst = c.cache("cache-zst", "zstd", &[&c.b]);
    let base = |p: &str| Path::new(p).file_name().unwrap().to_str().unwrap().to_string();
    // The NARs of b: Nix's dump, and the cache's xz and zstd files, named
    // like the store path (so their baseline locations match it).
    let nars = d.join("nars");
    fs::create_dir(&nars).unwrap();
    let dump = nix(d, "nix-store", &["--dump", &c.b]);
    let nar_files = [
        nars.join(format!("{}.nar", base(&c.b))),
        nars.join(format!("{}.nar.xz", base(&c.b))),
        nars.join(format!("{}.nar.zst", base(&c.b))),
    ];
    fs::write(&nar_files[0], &dump).unwrap();
    fs::copy(c.cached_nar(&cache, &c.b), &nar_files[1]).unwrap();
    fs::copy(c.cached_nar(&zst, &c.b), &nar_files[2]).unwrap();

    // The oracle: the audit of the realised paths, in the throwaway store.
    let mut closure = vec![c.a.as_str(), c.b.as_str(), c.c.as_str()];
    closure.sort();
    let realised = |format: &str, paths: &[&str]| {
        let mut args = vec!["--format", format, "--color", "never"];
        args.extend_from_slice(paths);
        let out = inspect(&c.store, &args);
        assert!(matches!(out.status.code(), Some(0 | 1)), "{}", shown(&out));
        out.stdout
    };
    let want_text = realised("text", &closure);
    let want_json = realised("json", &closure);
    let want_b = [("json", realised("json", &[&c.b])), ("text", realised("text", &[&c.b]))];
    let dump_a = nars.join(format!("{}.nar", base(&c.a)));
    fs::write(&dump_a, nix(d, "nix-store", &["--dump", &c.a])).unwrap();
    // What the closure must show, from how it was built: the device code,
    // libb found through a's absolute link, the missing library and driver.
    let json: serde_json::Value = serde_json::from_slice(&want_json).unwrap();
    let checks: Vec<(String, String)> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (f["path"].as_str().unwrap().to_string(), f["check"].as_str().unwrap().to_string())
        })
        .collect();
    let has =
        |file: &str, check: &str| checks.contains(&(format!("{}/{file}", c.a), check.to_string()));
    assert!(has("bin/lost", "unresolved-needed"), "{checks:?}");
    assert!(has("bin/sass_only", "missing-driver-runpath"), "{checks:?}");
    assert!(!has("bin/prog", "unresolved-needed") && !has("lib/liba.so", "unresolved-needed"));
    let files: Vec<&str> =
        json["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    let sass = format!("{}/bin/sass_only", c.a);
    assert!(files.contains(&sass.as_str()), "{files:?}");

    // From here on the realised store is gone.
    fs::rename(&c.store, d.join("store.gone")).unwrap();
    let key = c.public_key.as_str();
    let file_url = format!("file://{}", cache.display());
    let http_url = serve(cache.clone());
    for url in [&file_url, &http_url] {
        for (format, want) in [("text", &want_text), ("json", &want_json)] {
            let args = [
                "--substituter",
                url,
                "--trusted-public-key",
                key,
                "--closure",
                "--format",
                format,
                "--color",
                "never",
                &c.a,
                &c.c,
            ];
            let out = inspect(&c.dir.path().join("no-store"), &args);
            assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(want),
                "{url} {format}"
            );
            assert!(out.stderr.is_empty(), "no progress line off a terminal: {}", shown(&out));
        }
    }

    // Through a proxy named by HTTP_PROXY (the test server opens CONNECT
    // tunnels to itself): the cache's host does not exist, so only the proxy
    // can have served it.
    let proxy = serve(cache.clone());
    let args = [
        "--substituter",
        "http://binary-cache.invalid",
        "--trusted-public-key",
        key,
        "--closure",
        "--color",
        "never",
        &c.a,
        &c.c,
    ];
    let vars = [("HTTP_PROXY", proxy.as_str())];
    let out = inspect_with(&c.dir.path().join("no-store"), &args, &vars);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&want_text),
        "through the proxy: {}",
        shown(&out)
    );

    // On a terminal (script(1) gives it one): a progress line on stderr,
    // cleared before the report.
    let report = d.join("tty.json");
    let cmd = format!(
        "{BIN} --substituter {file_url} --closure --format json {} > {}",
        c.a,
        report.display()
    );
    let tmp = d.join("tmp");
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("TMPDIR", &tmp)
        .output()
        .expect("script (bsdutils)");
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(tty.contains("cuda-elf-inspect: 2 store paths read"), "{tty:?}");
    // No key given: said, not silently skipped.
    assert!(tty.contains("narinfo signatures were not checked"), "{tty:?}");
    // The progress line (while the NARs come, after the narinfo files and
    // that message) is cleared before anything else is written.
    let last = tty.rfind("store paths read").unwrap();
    let after = &tty[last..];
    assert!(after.ends_with("MB of NAR\r\x1b[K"), "the line is cleared: {tty:?}");
    assert!(tty[..last].contains("not checked (NarHash and NarSize were)\r\n\r\x1b[K"), "{tty:?}");
    assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0);
    assert!(fs::read_to_string(&report).unwrap().contains("bin/sass_only"));

    // Without --closure: what lies in b is undecided, not unresolved.
    let out = inspect(
        &c.dir.path().join("no-store"),
        &["--substituter", &file_url, "--format", "json", &c.a],
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let of = |check: &str| -> Vec<String> {
        json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == check)
            .map(|f| f["path"].as_str().unwrap().to_string())
            .collect()
    };
    let mut undecided = of("needed-not-fetched");
    undecided.sort();
    assert_eq!(undecided, [format!("{}/bin/prog", c.a), format!("{}/lib/liba.so", c.a)]);
    let unresolved = of("unresolved-needed");
    assert!(unresolved.contains(&format!("{}/bin/lost", c.a)), "{unresolved:?}");
    assert!(!unresolved.iter().any(|p| undecided.contains(p)), "{unresolved:?}");
    let message = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "needed-not-fetched")
        .unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("libb.so.1") && message.contains(&c.b), "{message}");

    // NAR files of b: the realised b's audit, `FILE!` for the store path.
    for nar in &nar_files {
        let shown_as = format!("{}!", nar.display());
        for (format, want_b) in &want_b {
            let want = String::from_utf8(want_b.clone()).unwrap().replace(&c.b, &shown_as);
            let args = ["--format", format, "--color", "never", nar.to_str().unwrap()];
            let out = inspect(&c.store, &args);
            assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{} {format}", nar.display());
        }
    }
    // The NAR of a: its files shown inside it; what it finds through b (not
    // read) is undecided.
    let out = inspect(&c.store, &["--format", "json", dump_a.to_str().unwrap()]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let prefix = format!("{}!/", dump_a.display());
    let of = |check: &str| -> Vec<String> {
        let mut v: Vec<String> = json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == check)
            .map(|f| f["path"].as_str().unwrap().strip_prefix(&prefix).unwrap().to_string())
            .collect();
        v.dedup();
        v
    };
    assert_eq!(of("needed-not-fetched"), ["bin/prog", "lib/liba.so"], "{}", shown(&out));
    assert_eq!(of("missing-driver-runpath"), ["bin/sass_only"], "{}", shown(&out));
    assert!(!of("unresolved-needed").contains(&"bin/prog".to_string()));
    let locations: Vec<&str> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["location"].as_str())
        .collect();
    assert!(locations.contains(&"a/bin/sass_only"), "{locations:?}");
}

/// Each broken member of a cache is a failure line naming its store path
/// (exit 2) while the other paths are still audited.
#[test]
fn broken_cache_members_fail_by_name_and_the_rest_is_audited() {
    let c = build_closure();
    let d = c.dir.path();
    let key = c.public_key.as_str();
    type Break<'a> = (&'a str, &'a str, Box<dyn Fn(&Path) -> Option<String> + 'a>);
    let edit = |cache: &Path, field: &str, value: &str| {
        set_narinfo_field(&c.narinfo(cache, &c.c), field, value);
    };
    let cases: Vec<Break> = vec![
        (
            "missing narinfo",
            "not found",
            Box::new(|cache: &Path| {
                fs::remove_file(c.narinfo(cache, &c.c)).unwrap();
                None
            }),
        ),
        (
            "wrong NarHash",
            "signature",
            Box::new(|cache: &Path| {
                edit(cache, "NarHash", &format!("sha256:{}", "0".repeat(52)));
                None
            }),
        ),
        (
            "corrupt NAR",
            "NarHash",
            Box::new(|cache: &Path| {
                let nar = c.cached_nar(cache, &c.c);
                let mut bytes = fs::read(&nar).unwrap();
                let at = bytes.windows(4).rposition(|w| w == b"\x7fELF").unwrap();
                bytes[at + 40] ^= 0xff;
                fs::write(&nar, bytes).unwrap();
                None
            }),
        ),
        (
            "unknown compression",
            "lz4",
            Box::new(|cache: &Path| {
                edit(cache, "Compression", "lz4");
                None
            }),
        ),
        (
            "truncated download",
            "disconnected",
            Box::new(|cache: &Path| {
                let nar = c.cached_nar(cache, &c.c);
                let rel = nar.strip_prefix(cache).unwrap().to_str().unwrap().to_string();
                edit(cache, "URL", &format!("{rel}.truncated"));
                Some(serve(cache.to_path_buf()))
            }),
        ),
    ];
    // The unsigned and badly signed cases need no unsigned-key run: a wrong
    // key refuses every path.
    for (i, (name, reason, break_it)) in cases.iter().enumerate() {
        let cache = c.cache(&format!("cache{i}"), "none", &[&c.a, &c.c]);
        let url = break_it(&cache).unwrap_or_else(|| format!("file://{}", cache.display()));
        // The hash and the truncation are checked without keys (with them, the
        // signature check comes first).
        let keyed = *name != "corrupt NAR" && *name != "truncated download";
        let mut args = vec!["--substituter", url.as_str(), "--format", "json"];
        if keyed {
            args.extend_from_slice(&["--trusted-public-key", key]);
        }
        args.extend_from_slice(&[c.a.as_str(), c.c.as_str()]);
        let out = inspect(&c.dir.path().join("no-store"), &args);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", shown(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line =
            stderr.lines().find(|l| l.contains(&c.c)).unwrap_or_else(|| panic!("{name}: {stderr}"));
        assert!(line.contains(reason), "{name}: {line}");
        // A stream cut inside a file is placed where it was cut, not at 0.
        assert!(!line.contains("NAR byte 0:"), "{name}: {line}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let files: Vec<&str> =
            json["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
        assert!(files.contains(&format!("{}/lib/liba.so", c.a).as_str()), "{name}: {files:?}");
        assert!(!files.iter().any(|f| f.starts_with(&c.c)), "{name}: {files:?}");
        assert_eq!(json["failures"].as_array().unwrap().len(), 1, "{name}");
    }
    // A damaged NAR file beside a realised path: the file fails by name,
    // the path is audited.
    let dump = nix(d, "nix-store", &["--dump", &c.c]);
    let bad = d.join("c.nar");
    fs::write(&bad, &dump[..dump.len() / 2]).unwrap();
    let out = inspect(&c.store, &["--format", "json", bad.to_str().unwrap(), &c.a]);
    assert_eq!(out.status.code(), Some(2), "{}", shown(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}: ", bad.display())) && stderr.contains("truncated"),
        "{stderr}"
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["files"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["path"] == format!("{}/lib/liba.so", c.a)));

    // Another key: every path refused, each by name.
    let cache = c.cache("cache-key", "none", &[&c.c]);
    let (_, other) = keygen(d, "test-1", "other");
    let url = format!("file://{}", cache.display());
    let out = inspect(
        &c.dir.path().join("no-store"),
        &["--substituter", &url, "--trusted-public-key", &other, &c.c],
    );
    assert_eq!(out.status.code(), Some(2), "{}", shown(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&c.c), "{}", shown(&out));
    // Not a store path of the cache's store.
    let out =
        inspect(&c.dir.path().join("no-store"), &["--substituter", &url, "/nix/store/x-y", &c.c]);
    assert_eq!(out.status.code(), Some(2), "{}", shown(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nix/store/x-y"), "{}", shown(&out));
}
