//! Issue 24: a binary cache or a NAR file is written by strangers. Each test
//! scripts one attack on the release binary (no network beyond 127.0.0.1)
//! and checks the bound that stops it:
//! 1. thin-archive members and links never reach this machine's files
//!    (checked under strace too);
//! 2. disk use is bounded (zero runs are holes, `--max-unpack-bytes`,
//!    counted across a closure whose audited paths are dropped);
//! 3. SIGTERM, SIGHUP and SIGINT remove the temporary folder; stale ones of
//!    dead runs are swept;
//! 4. a FIFO in a `file://` cache is refused, not waited on;
//! 5. a download fails on a stall, not on its total time;
//! 6. `--closure` is bounded by `--max-paths`, alike failures summarised;
//! 7. a malformed `Sig:` line by an unknown key does not sink a good one.
//!
//! `CUDA_ELF_INSPECT_BIN` runs them against another binary (the pre-change
//! one: each test fails there).

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use nix_cuda_hooks::store::narinfo::NarInfo;
use sha2::Digest as _;

fn bin() -> PathBuf {
    std::env::var_os("CUDA_ELF_INSPECT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cuda-elf-inspect")))
}

const STORE: &str = "/nix/store";

// ---- NARs --------------------------------------------------------------

/// A file-system tree, as a NAR holds one.
enum Node {
    File(Vec<u8>),
    Link(&'static str),
    Dir(Vec<(&'static str, Node)>),
}

fn put(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
    out.resize(out.len() + (8 - s.len() % 8) % 8, 0);
}

fn node(out: &mut Vec<u8>, n: &Node) {
    put(out, b"(");
    put(out, b"type");
    match n {
        Node::File(data) => {
            for t in ["regular", "contents"] {
                put(out, t.as_bytes());
            }
            put(out, data);
        }
        Node::Link(target) => {
            for t in ["symlink", "target", target] {
                put(out, t.as_bytes());
            }
        }
        Node::Dir(entries) => {
            put(out, b"directory");
            let mut entries: Vec<_> = entries.iter().collect();
            entries.sort_by_key(|(name, _)| *name);
            for (name, child) in entries {
                for t in ["entry", "(", "name", name, "node"] {
                    put(out, t.as_bytes());
                }
                node(out, child);
                put(out, b")");
            }
        }
    }
    put(out, b")");
}

fn nar(root: &Node) -> Vec<u8> {
    let mut out = Vec::new();
    put(&mut out, b"nix-archive-1");
    node(&mut out, root);
    out
}

/// A store path name: `<32 nix32 digits from n>-<name>`.
fn store_path(n: usize, name: &str) -> String {
    const DIGITS: &[u8] = b"0123456789abcdfghijklmnpqrsvwxyz";
    let mut hash = String::new();
    let mut v = n as u64 * 2654435761 + 12345;
    for _ in 0..32 {
        hash.push(DIGITS[(v % 32) as usize] as char);
        v = v / 32 + 7 * (n as u64 + 1);
    }
    format!("{STORE}/{hash}-{name}")
}

/// A `file://` cache folder for `/nix/store`.
struct CacheDir {
    dir: PathBuf,
}

impl CacheDir {
    fn new(dir: PathBuf) -> CacheDir {
        fs::create_dir_all(dir.join("nar")).unwrap();
        fs::write(dir.join("nix-cache-info"), format!("StoreDir: {STORE}\n")).unwrap();
        CacheDir { dir }
    }

    fn url(&self) -> String {
        format!("file://{}", self.dir.display())
    }

    fn narinfo_path(path: &str) -> String {
        let base = path.rsplit('/').next().unwrap();
        format!("{}.narinfo", &base[..32])
    }

    /// Adds `path` with the uncompressed NAR `bytes`; `sign` adds `extra`
    /// lines, then a Sig by the key (`name`, secret bytes).
    fn add(&self, path: &str, bytes: &[u8], refs: &[String], sign: Option<(&str, [u8; 32])>) {
        self.add_with(path, bytes, refs, sign, "", None);
    }

    fn add_with(
        &self,
        path: &str,
        bytes: &[u8],
        refs: &[String],
        sign: Option<(&str, [u8; 32])>,
        extra: &str,
        nar_size: Option<&str>,
    ) {
        let base = path.rsplit('/').next().unwrap();
        let url = format!("nar/{}.nar", &base[..32]);
        fs::write(self.dir.join(&url), bytes).unwrap();
        let hash: [u8; 32] = sha2::Sha256::digest(bytes).into();
        let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
        let refs: Vec<&str> = refs.iter().map(|r| r.rsplit('/').next().unwrap()).collect();
        let size = nar_size.map_or(bytes.len().to_string(), str::to_string);
        let mut text = format!(
            "StorePath: {path}\nURL: {url}\nCompression: none\nNarHash: sha256:{hex}\nNarSize: {size}\nReferences: {}\n",
            refs.join(" ")
        );
        if let Some((name, secret)) = sign {
            use ed25519_dalek::Signer;
            let info = NarInfo::parse(&text, STORE).unwrap();
            let key = ed25519_dalek::SigningKey::from_bytes(&secret);
            let sig = key.sign(info.fingerprint(STORE).as_bytes());
            let b64 = base64::engine::general_purpose::STANDARD.encode(sig.to_bytes());
            text.push_str(extra);
            text.push_str(&format!("Sig: {name}:{b64}\n"));
        }
        fs::write(self.dir.join(Self::narinfo_path(path)), text).unwrap();
    }
}

// ---- running the binary --------------------------------------------------

/// The binary with a clean environment and `TMPDIR=tmp`.
fn command(tmp: &Path, args: &[&str]) -> Command {
    fs::create_dir_all(tmp).unwrap();
    let mut c = Command::new(bin());
    c.args(args)
        .env("TMPDIR", tmp)
        .env_remove("NIX_LOG_FD")
        .env_remove("outputs")
        .env_remove("out")
        .env_remove("cudaCapabilities")
        .env_remove("CUDAARCHS")
        .env_remove("TORCH_CUDA_ARCH_LIST")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs it; killed (and the test failed) after `limit`.
fn run(tmp: &Path, args: &[&str], limit: Duration) -> Output {
    let child = command(tmp, args).spawn().unwrap();
    let pid = child.id();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < limit {
            if flag.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // SAFETY: kill(2) on the child's pid, which is not reaped yet.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    let out = child.wait_with_output().unwrap();
    done.store(true, Ordering::Relaxed);
    assert!(out.status.code().is_some(), "killed after {limit:?} (it hung): {}", shown(&out));
    out
}

fn shown(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn empty(tmp: &Path) -> bool {
    fs::read_dir(tmp).unwrap().next().is_none()
}

/// Bytes of disk the tree below `dir` takes (allocated blocks).
fn disk_use(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_use(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// Serves HTTP on 127.0.0.1, one thread per connection; `respond` gets the
/// requested path and the stream; returns the base URL and the request count.
fn serve(
    respond: impl Fn(&str, &mut TcpStream) + Send + Sync + 'static,
) -> (String, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    let respond = Arc::new(respond);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (respond, counted) = (respond.clone(), counted.clone());
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    return;
                }
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) <= 2 {
                        break;
                    }
                }
                counted.fetch_add(1, Ordering::Relaxed);
                let rel = line.split_whitespace().nth(1).unwrap_or("/").trim_start_matches('/');
                respond(rel, &mut stream);
            });
        }
    });
    (format!("http://127.0.0.1:{port}"), count)
}

fn reply(stream: &mut TcpStream, body: &[u8]) {
    let head =
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
}

fn not_found(stream: &mut TcpStream) {
    let _ = stream
        .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
}

/// Serves the files of `dir`, except the NAR, whose body `nar` sends.
fn serve_cache_with_nar(
    dir: PathBuf,
    nar: impl Fn(&[u8], &mut TcpStream) + Send + Sync + 'static,
) -> (String, Arc<AtomicUsize>) {
    serve(move |rel, stream| match fs::read(dir.join(rel)) {
        Ok(body) if rel.starts_with("nar/") => nar(&body, stream),
        Ok(body) => reply(stream, &body),
        Err(_) => not_found(stream),
    })
}

// ---- 1. thin archives and links ------------------------------------------

/// A GNU thin archive naming `members` (no data: thin members are files).
fn thin_archive(members: &[&str]) -> Vec<u8> {
    let mut table = Vec::new();
    let mut offsets = Vec::new();
    for m in members {
        offsets.push(table.len());
        table.extend_from_slice(m.as_bytes());
        table.extend_from_slice(b"/\n");
    }
    let header = |name: &str, size: usize| {
        format!("{name:<16}{:<12}{:<6}{:<6}{:<8}{size:<10}`\n", 0, 0, 0, 644).into_bytes()
    };
    let mut out = b"!<thin>\n".to_vec();
    out.extend(header("//", table.len()));
    out.extend(&table);
    if table.len() % 2 == 1 {
        out.push(b'\n');
    }
    for o in offsets {
        out.extend(header(&format!("/{o}"), 64));
    }
    out
}

/// A shared object built by gcc: `libuser.so`, NEEDED `libf.so`, RUNPATH
/// `$ORIGIN:/etc` (a NAR may name any folder).
fn user_library(dir: &Path) -> Vec<u8> {
    fs::write(dir.join("f.c"), "int f(void) { return 1; }\n").unwrap();
    fs::write(dir.join("u.c"), "int f(void); int u(void) { return f(); }\n").unwrap();
    let gcc = |args: &[&str]| {
        let out = Command::new("gcc").args(args).current_dir(dir).output().expect("gcc");
        assert!(out.status.success(), "gcc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    gcc(&["-shared", "-fPIC", "-o", "libf.so", "f.c"]);
    gcc(&[
        "-shared",
        "-fPIC",
        "-o",
        "libuser.so",
        "u.c",
        "-L.",
        "-lf",
        "-Wl,--enable-new-dtags,-rpath,$ORIGIN:/etc",
    ]);
    fs::read(dir.join("libuser.so")).unwrap()
}

const HOST_FILES: [&str; 4] = ["/etc/shadow", "/etc/hostname", "/dev/zero", "/etc/passwd"];

fn hostile_tree(dir: &Path) -> Node {
    let members = ["/etc/shadow", "../../../../../../../../etc/hostname", "/dev/zero"];
    Node::Dir(vec![(
        "lib",
        Node::Dir(vec![
            ("libthin.a", Node::File(thin_archive(&members))),
            ("libf.so", Node::Link("/etc/passwd")),
            ("libuser.so", Node::File(user_library(dir))),
            ("libpasswd.so", Node::Link("../../../../../../etc/passwd")),
        ]),
    )])
}

#[test]
fn thin_archive_members_and_links_in_a_nar_never_reach_host_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let nar_file = d.join("hostile.nar");
    fs::write(&nar_file, nar(&hostile_tree(d))).unwrap();
    let tmp = d.join("tmp");
    let nar_arg = nar_file.to_str().unwrap();
    let out = run(&tmp, &["--format", "json", nar_arg], Duration::from_secs(60));
    let text = shown(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect(&text);
    let thin = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with("lib/libthin.a"))
        .unwrap_or_else(|| panic!("libthin.a not audited: {text}"));
    let damage: Vec<&str> =
        thin["damage"].as_array().expect(&text).iter().map(|d| d.as_str().unwrap()).collect();
    // Each member is refused alike, whatever the host has there (a file
    // that exists, a path that is missing, a device), before any open.
    let members = ["/etc/shadow", "../../../../../../../../etc/hostname", "/dev/zero"];
    assert_eq!(damage.len(), members.len(), "{damage:?}");
    for (name, line) in members.iter().zip(&damage) {
        assert!(line.starts_with(&format!("{name}: ")), "{line}");
        assert!(line.ends_with(" the store path; it is not read"), "{line}");
        assert!(!line.contains(tmp.to_str().unwrap()), "{line}");
    }
    // libf.so (a link to /etc/passwd) is not found: the store would not have it.
    assert!(text.contains("libf.so"), "{text}");
    assert!(empty(&tmp), "the temporary folder was left");
}

/// The paths the process opened (open, openat, openat2), from `strace -y`
/// (a relative name joined to its folder's descriptor), after the dynamic
/// loader's own (`/etc/ld.so.cache` and the `.so.N` libraries it opens
/// before `main`; the release binary of `make` is static and has none).
fn opened_paths(trace: &Path) -> Vec<String> {
    let text = fs::read_to_string(trace).unwrap();
    let loader = |p: &str| {
        p == "/etc/ld.so.cache"
            || p.rsplit_once(".so.").is_some_and(|(_, v)| v.bytes().all(|b| b.is_ascii_digit()))
    };
    let paths = text.lines().filter(|l| l.contains("open")).filter_map(|l| {
        let call = &l[l.find('(')? + 1..];
        let start = call.find('"')? + 1;
        let name = &call[start..start + call[start..].find('"')?];
        if name.starts_with('/') {
            return Some(name.to_string());
        }
        // The folder: `AT_FDCWD</cwd>` or `5</folder>` before the name.
        let dir = &call[call.find('<')? + 1..call.find(">,")?];
        Some(format!("{dir}/{name}"))
    });
    paths.skip_while(|p| loader(p)).collect()
}

#[test]
fn under_strace_a_hostile_nar_or_cache_opens_nothing_outside_tmpdir() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tree = hostile_tree(d);
    let bytes = nar(&tree);
    let nar_file = d.join("hostile.nar");
    fs::write(&nar_file, &bytes).unwrap();
    let cache = CacheDir::new(d.join("cache"));
    let path = store_path(1, "hostile");
    cache.add(&path, &bytes, &[], None);
    let tmp = d.join("tmp");
    for args in [
        vec![nar_file.to_str().unwrap().to_string()],
        vec!["--substituter".to_string(), cache.url(), path.clone()],
    ] {
        let trace = d.join("trace");
        let mut strace_args = vec![
            "-f".to_string(),
            "-qq".to_string(),
            "-y".to_string(),
            "-e".to_string(),
            "trace=open,openat,openat2,creat".to_string(),
            "-o".to_string(),
            trace.to_str().unwrap().to_string(),
            bin().to_str().unwrap().to_string(),
        ];
        strace_args.extend(args.iter().cloned());
        fs::create_dir_all(&tmp).unwrap();
        let out = Command::new("strace")
            .args(&strace_args)
            .env("TMPDIR", &tmp)
            .env_remove("NIX_LOG_FD")
            .stdin(Stdio::null())
            .output()
            .expect("strace (tests/tools/install.sh installs it)");
        assert!(out.status.code().is_some(), "{}", shown(&out));
        let opened = opened_paths(&trace);
        assert!(!opened.is_empty(), "strace saw no open at all: {}", shown(&out));
        let allowed = |p: &str| {
            p.starts_with(tmp.to_str().unwrap())
                || p.starts_with(d.join("cache").to_str().unwrap())
                || p == nar_file.to_str().unwrap()
                // The runtime's own: CPU count, memory limits, the binary.
                || p.starts_with("/proc/")
                || p.starts_with("/sys/")
                || p == bin().to_str().unwrap()
        };
        let outside: Vec<_> = opened.iter().filter(|p| !allowed(p)).collect();
        assert!(outside.is_empty(), "{args:?} opened {outside:?}\n{}", shown(&out));
        for host in HOST_FILES {
            assert!(!opened.iter().any(|p| p.contains(&host[1..])), "{host} opened");
        }
        assert!(empty(&tmp), "the temporary folder was left");
    }
}

// ---- 2. disk ------------------------------------------------------------------

/// A zstd-compressed NAR of one folder holding `lib/bomb.so`: an ELF
/// header and then `zeros` zero bytes, streamed (never in memory).
fn zero_bomb(zeros: u64) -> Vec<u8> {
    let mut head = Vec::new();
    put(&mut head, b"nix-archive-1");
    for t in ["(", "type", "directory", "entry", "(", "name", "lib", "node", "("] {
        put(&mut head, t.as_bytes());
    }
    for t in ["type", "directory", "entry", "(", "name", "bomb.so", "node", "("] {
        put(&mut head, t.as_bytes());
    }
    for t in ["type", "regular", "contents"] {
        put(&mut head, t.as_bytes());
    }
    let mut elf = b"\x7fELF\x02\x01\x01".to_vec();
    elf.resize(64, 0);
    let size = 64 + zeros;
    head.extend_from_slice(&size.to_le_bytes());
    head.extend_from_slice(&elf);
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    enc.write_all(&head).unwrap();
    let block = vec![0u8; 1 << 20];
    let mut left = zeros;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        enc.write_all(&block[..n]).unwrap();
        left -= n as u64;
    }
    let mut tail = vec![0; (8 - size % 8) as usize % 8];
    for t in [")", ")", ")", ")", ")", ")"] {
        put(&mut tail, t.as_bytes());
    }
    enc.write_all(&tail).unwrap();
    enc.finish().unwrap()
}

/// A NAR of `lib/big.so`: an ELF header, then `len` bytes that are not zero.
fn dense_nar(len: usize) -> Vec<u8> {
    let mut data = b"\x7fELF\x02\x01\x01".to_vec();
    data.resize(64, 0);
    data.extend((0..len).map(|i| (i % 251) as u8 | 1));
    nar(&Node::Dir(vec![("lib", Node::Dir(vec![("big.so", Node::File(data))]))]))
}

#[test]
fn a_4_gib_zero_bomb_leaves_under_1_gib_in_tmpdir_and_the_budget_names_path_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bomb = d.join("bomb.nar.zst");
    fs::write(&bomb, zero_bomb(4 << 30)).unwrap();
    assert!(fs::metadata(&bomb).unwrap().len() < 1 << 20);
    let tmp = d.join("tmp");
    let mut child = command(&tmp, &[bomb.to_str().unwrap()]).spawn().unwrap();
    let mut peak = 0;
    let start = Instant::now();
    let status = loop {
        peak = peak.max(disk_use(&tmp));
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            panic!("the bomb audit did not end in 300 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(peak < 1 << 30, "{peak} bytes in TMPDIR at once (status {status:?})");
    assert!(status.code().is_some(), "{status:?}");
    assert!(empty(&tmp), "the temporary folder was left");

    // Data that is not zeros: refused at the budget, naming the file and
    // the limit, nothing left.
    let dense = d.join("dense.nar");
    fs::write(&dense, dense_nar(4 << 20)).unwrap();
    let out =
        run(&tmp, &["--max-unpack-bytes", "1M", dense.to_str().unwrap()], Duration::from_secs(60));
    let text = shown(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("lib/big.so: more than 1048576 bytes unpacked at once (--max-unpack-bytes)"),
        "{text}"
    );
    assert!(empty(&tmp), "the temporary folder was left");
}

#[test]
fn an_unsigned_narinfo_with_a_huge_nar_size_and_a_closure_share_one_disk_budget() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = CacheDir::new(d.join("cache"));
    let tmp = d.join("tmp");
    // NarSize 2^64-1: only the budget stops the 8 MiB NAR.
    let huge = store_path(1, "huge");
    cache.add_with(&huge, &dense_nar(8 << 20), &[], None, "", Some("18446744073709551615"));
    let out = run(
        &tmp,
        &["--substituter", &cache.url(), "--max-unpack-bytes", "2M", &huge],
        Duration::from_secs(60),
    );
    let text = shown(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains(&format!("{huge}: lib/big.so: more than 2097152 bytes")), "{text}");
    // Two paths of 1.5 MiB each under a 2 MiB budget, referring to each
    // other (a cycle Nix refuses, so only a hostile cache serves one): held
    // together, they do not fit, and the run fails. (Without the cycle, b is audited and
    // dropped before a is fetched: see the closure test above.)
    let (a, b) = (store_path(2, "a"), store_path(3, "b"));
    cache.add(&b, &dense_nar(3 << 19), std::slice::from_ref(&a), None);
    cache.add(&a, &dense_nar(3 << 19), std::slice::from_ref(&b), None);
    let out = run(
        &tmp,
        &["--substituter", &cache.url(), "--closure", "--max-unpack-bytes", "2M", &a],
        Duration::from_secs(60),
    );
    let text = shown(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    let over = |p: &str| text.contains(&format!("{p}: lib/big.so: more than 2097152 bytes"));
    // Fetched side by side, either may reach the limit first, or both
    // (each over it while the other still holds its bytes): the bound holds
    // and each refusal names its path and the limit.
    assert!(over(&a) || over(&b), "a refusal names the path and the limit: {text}");
    assert!(empty(&tmp), "the temporary folder was left");
}

/// `NAME` built by gcc from `code` in `dir`, with `flags`, then `pad` bytes
/// that are not zero appended (data after the section headers: the file
/// stays a valid shared object, and its copy takes `pad` bytes of disk).
fn gcc_library(dir: &Path, name: &str, code: &str, flags: &[&str], pad: usize) -> Vec<u8> {
    let src = dir.join(format!("{name}.c"));
    fs::write(&src, code).unwrap();
    let mut args = vec!["-shared", "-fPIC", "-o", name, src.to_str().unwrap()];
    args.extend_from_slice(flags);
    let out = Command::new("gcc").args(&args).current_dir(dir).output().expect("gcc");
    assert!(out.status.success(), "gcc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let mut bytes = fs::read(dir.join(name)).unwrap();
    bytes.extend((0..pad).map(|i| (i % 251) as u8 | 1));
    bytes
}

/// Polls the bytes of disk below `tmp` while the binary runs; returns its
/// output and the most seen at once.
fn run_measured(tmp: &Path, args: &[&str]) -> (Output, u64) {
    let mut child = command(tmp, args).spawn().unwrap();
    let (mut stdout, mut stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let readers = [
        std::thread::spawn(move || {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut stdout, &mut v).unwrap();
            v
        }),
        std::thread::spawn(move || {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut stderr, &mut v).unwrap();
            v
        }),
    ];
    let (start, mut peak) = (Instant::now(), 0);
    let status = loop {
        peak = peak.max(disk_use(tmp));
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("the audit did not end in 120 s");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let [out, err] = readers.map(|r| r.join().unwrap());
    (Output { status, stdout: out, stderr: err }, peak)
}

#[test]
fn a_closure_larger_than_max_unpack_bytes_is_audited_path_by_path_with_the_same_findings() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = CacheDir::new(d.join("cache"));
    let (leaf, mid, top) = (store_path(1, "leaf"), store_path(2, "mid"), store_path(3, "top"));
    const PAD: usize = 3 << 20;
    // leaf: libg.so. mid: libuser.so, NEEDED libg.so (RUNPATH leaf/lib)
    // and libmissing.so (found nowhere: a finding both runs must give), and
    // lib/libf.so, a link into leaf. top: libtop.so, NEEDED libuser.so
    // (RUNPATH mid/lib), dlopen of libf.so (found through the link) and of
    // libg.so (found only as libuser.so's NEEDED: the dlopen pass reads
    // mid's loader facts after mid's files are gone). Each path also
    // carries 3 MiB of data its library's copy takes on disk.
    let g = gcc_library(d, "libg.so", "int g(void) { return 2; }\n", &["-Wl,-soname,libg.so"], PAD);
    let missing = gcc_library(d, "libmissing.so", "int m(void) { return 3; }\n", &[], 0);
    let leaf_lib = format!("-Wl,--enable-new-dtags,-rpath,{leaf}/lib");
    let user = gcc_library(
        d,
        "libuser.so",
        "int g(void); int m(void); int u(void) { return g() + m(); }\n",
        &["-L.", "-lg", "-lmissing", &leaf_lib],
        PAD,
    );
    fs::remove_file(d.join("libmissing.so")).unwrap();
    drop(missing);
    let mid_lib = format!("-Wl,--enable-new-dtags,-rpath,{mid}/lib");
    let topc = "#include <dlfcn.h>\nint u(void);\n\
        int t(void) { return dlopen(\"libf.so\", 2) != 0 && dlopen(\"libg.so\", 2) != 0 && u(); }\n";
    let top_so = gcc_library(d, "libtop.so", topc, &["-L.", "-luser", &mid_lib], PAD);
    let leaf_link: &'static str = Box::leak(format!("{leaf}/lib/libg.so").into_boxed_str());
    let lib = |entries: Vec<(&'static str, Node)>| Node::Dir(vec![("lib", Node::Dir(entries))]);
    let nars = [
        (&leaf, nar(&lib(vec![("libg.so", Node::File(g))])), vec![]),
        (
            &mid,
            nar(&lib(vec![("libuser.so", Node::File(user)), ("libf.so", Node::Link(leaf_link))])),
            vec![leaf.clone()],
        ),
        (&top, nar(&lib(vec![("libtop.so", Node::File(top_so))])), vec![mid.clone(), leaf.clone()]),
    ];
    let mut sum = 0;
    for (path, bytes, refs) in &nars {
        cache.add(path, bytes, refs, None);
        sum += bytes.len() as u64;
    }
    let tmp = d.join("tmp");
    let audit = |budget: &str| {
        let args = [
            "--substituter",
            &cache.url(),
            "--closure",
            "--dlopen-facts",
            "--format",
            "json",
            "--max-unpack-bytes",
            budget,
            &top,
        ];
        run_measured(&tmp, &args)
    };
    // 5 MiB: more than any one path (3 MiB and a few KiB), less than two.
    let limit: u64 = 5 << 20;
    assert!(sum > 3 * (3 << 20) && limit < 2 * (3 << 20) && limit > sum / 3 + (64 << 10));
    let (big, _) = audit("1G");
    let (small, peak) = audit("5M");
    let (big_text, small_text) = (shown(&big), shown(&small));
    let report = |out: &Output, text: &str| -> serde_json::Value {
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    let (big_report, small_report) = (report(&big, &big_text), report(&small, &small_text));
    assert_eq!(small.status.code(), big.status.code(), "{small_text}");
    assert_eq!(small_report, big_report, "dropping audited paths changed the report");
    // The report is the closure's: every path audited, and resolution
    // across paths worked (libg.so found through mid's link and through
    // libuser.so's NEEDED; libmissing.so found nowhere).
    let text = serde_json::to_string(&big_report).unwrap();
    for p in [&leaf, &mid, &top] {
        assert!(text.contains(p.as_str()), "{p} missing: {big_text}");
    }
    let findings = big_report["findings"].as_array().expect(&big_text);
    let unresolved: Vec<&serde_json::Value> =
        findings.iter().filter(|f| f["check"] == "unresolved-needed").collect();
    assert_eq!(unresolved.len(), 1, "{big_text}");
    assert!(unresolved[0]["message"].as_str().unwrap().contains("libmissing.so"), "{big_text}");
    let top_file = big_report["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with("libtop.so"))
        .expect(&big_text);
    let loads = top_file["dlopen"]["targets"].as_array().expect(&big_text);
    assert_eq!(loads.len(), 2, "{big_text}");
    for load in loads {
        assert_eq!(load["resolved"]["status"], "found", "{load}: {big_text}");
    }
    assert_eq!(loads[1]["resolved"]["via"]["kind"], "loaded", "{big_text}");
    // Never more than the budget on disk (and the folders' own blocks).
    assert!(peak <= limit + (64 << 10), "{peak} bytes in TMPDIR at once");
    assert!(empty(&tmp), "the temporary folder was left");
}

// ---- 3. signals -----------------------------------------------------------------

#[test]
fn sigterm_sighup_and_sigint_remove_the_temporary_folder_and_stale_ones_are_swept() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = CacheDir::new(d.join("cache"));
    let path = store_path(1, "stalled");
    cache.add(&path, &dense_nar(1 << 20), &[], None);
    // The NAR's first bytes, then nothing: the audit waits with its folder made.
    let (url, _) = serve_cache_with_nar(cache.dir.clone(), |body, stream| {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(&body[..4096]);
        std::thread::sleep(Duration::from_secs(120));
    });
    let tmp = d.join("tmp");
    for (signal, status) in [(libc::SIGTERM, 143), (libc::SIGHUP, 129), (libc::SIGINT, 130)] {
        let mut child = command(&tmp, &["--substituter", &url, &path]).spawn().unwrap();
        let start = Instant::now();
        while empty(&tmp) {
            assert!(start.elapsed() < Duration::from_secs(30), "no temporary folder appeared");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: kill(2) on the child's pid, which is not reaped yet.
        unsafe { libc::kill(child.id() as i32, signal) };
        let got = child.wait().unwrap();
        assert_eq!(got.code(), Some(status), "signal {signal}: {got:?}");
        assert!(empty(&tmp), "signal {signal} left the temporary folder");
    }
    // A folder of a run that died (a pid no process has) is swept by the next.
    let stale = tmp.join(format!("cuda-elf-inspect.{}.AbCdEf", (1 << 22) + 11));
    fs::create_dir_all(stale.join("0/lib")).unwrap();
    fs::write(stale.join("0/lib/x.so"), b"left").unwrap();
    let nar_file = d.join("small.nar");
    fs::write(&nar_file, dense_nar(100)).unwrap();
    run(&tmp, &[nar_file.to_str().unwrap()], Duration::from_secs(60));
    assert!(empty(&tmp), "the stale folder was not swept");
}

// ---- 4. FIFOs -----------------------------------------------------------------------

#[test]
fn a_fifo_in_a_file_cache_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = CacheDir::new(d.join("cache"));
    let (fifo_info, fifo_nar) = (store_path(1, "fifo-info"), store_path(2, "fifo-nar"));
    cache.add(&fifo_nar, &dense_nar(100), &[], None);
    let mkfifo = |p: &Path| {
        let _ = fs::remove_file(p);
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    };
    mkfifo(&cache.dir.join(CacheDir::narinfo_path(&fifo_info)));
    let nar_of =
        |p: &str| cache.dir.join(format!("nar/{}.nar", &p.rsplit('/').next().unwrap()[..32]));
    mkfifo(&nar_of(&fifo_nar));
    let tmp = d.join("tmp");
    let out =
        run(&tmp, &["--substituter", &cache.url(), &fifo_info, &fifo_nar], Duration::from_secs(30));
    let text = shown(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    for p in [&fifo_info, &fifo_nar] {
        assert!(text.contains(&format!("{p}: fetching ")), "{text}");
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches(": not a regular file").count(), 2, "{text}");
    assert!(empty(&tmp), "the temporary folder was left");
}

// ---- 5. stall, not total -----------------------------------------------------

#[test]
fn a_slow_download_goes_on_while_bytes_arrive_and_a_stalled_one_fails() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = CacheDir::new(d.join("cache"));
    let path = store_path(1, "slow");
    cache.add(&path, &dense_nar(1 << 16), &[], None);
    // Six pieces, one a second: 5 s in all, never 2 s without a byte.
    let (slow, _) = serve_cache_with_nar(cache.dir.clone(), |body, stream| {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
        let _ = stream.write_all(head.as_bytes());
        for piece in body.chunks(body.len().div_ceil(6)) {
            let _ = stream.write_all(piece);
            let _ = stream.flush();
            std::thread::sleep(Duration::from_millis(1000));
        }
    });
    let tmp = d.join("tmp");
    let args = ["--substituter", &slow, "--stall-timeout", "2", &path];
    let out = run(&tmp, &args, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    // Half the NAR, then silence: fails after the stall limit, not later.
    let (stalled, _) = serve_cache_with_nar(cache.dir.clone(), |body, stream| {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(&body[..body.len() / 2]);
        std::thread::sleep(Duration::from_secs(120));
    });
    let start = Instant::now();
    let args = ["--substituter", &stalled, "--stall-timeout", "2", &path];
    let out = run(&tmp, &args, Duration::from_secs(60));
    let text = shown(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("no data for 2 s (--stall-timeout)"), "{text}");
    assert!(start.elapsed() < Duration::from_secs(20), "{:?}", start.elapsed());
    assert!(empty(&tmp), "the temporary folder was left");
}

// ---- 6. closure bounds ---------------------------------------------------------

#[test]
fn a_closure_is_bounded_by_max_paths_and_alike_failures_are_summarised() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = CacheDir::new(d.join("cache"));
    let root = store_path(0, "root");
    let refs: Vec<String> = (1..=5000).map(|i| store_path(i, "missing")).collect();
    cache.add(&root, &dense_nar(100), &refs, None);
    let tmp = d.join("tmp");
    let dir_served = cache.dir.clone();
    let (url, requests) = serve(move |rel, stream| match fs::read(dir_served.join(rel)) {
        Ok(body) => reply(stream, &body),
        Err(_) => not_found(stream),
    });
    // The default bound: thousands, not 5,001 paths and 10,001 lookups.
    let out = run(&tmp, &["--substituter", &url, "--closure", &root], Duration::from_secs(300));
    let text = shown(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    let asked = requests.load(Ordering::Relaxed);
    assert!(asked <= 2000 + 2, "{asked} requests");
    assert!(
        text.contains("--closure: stopped at 2000 store paths (--max-paths), at depth 1: 3001 more references are not audited"),
        "{text}"
    );
    assert!(text.contains("1994 more store paths of the closure (from "), "{text}");
    let failures =
        text.lines().filter(|l| l.starts_with("cuda-elf-inspect: cannot examine")).count();
    assert!(failures <= 8, "{failures} failure lines: {text}");
    // An explicit bound.
    let out = run(
        &tmp,
        &["--substituter", &cache.url(), "--closure", "--max-paths", "10", &root],
        Duration::from_secs(60),
    );
    let text = shown(&out);
    assert!(
        text.contains("stopped at 10 store paths (--max-paths), at depth 1: 4991 more"),
        "{text}"
    );
    assert!(empty(&tmp), "the temporary folder was left");
}

#[test]
fn two_audits_in_one_process_keep_their_own_limits() {
    use nix_cuda_hooks::store::budget::Limits;
    use nix_cuda_hooks::store::cache::Cache;
    use nix_cuda_hooks::store::scratch::Scratch;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = CacheDir::new(d.join("cache"));
    let root = store_path(0, "root");
    let refs: Vec<String> = (1..=3).map(|i| store_path(i, "ref")).collect();
    for r in &refs {
        cache.add(r, &dense_nar(100), &[], None);
    }
    cache.add(&root, &dense_nar(3 << 19), &refs, None);
    let open = |max_paths| {
        Cache::open(&cache.url(), vec![], Limits { max_paths, ..Limits::default() }).unwrap()
    };
    let (narrow, wide) = (open(2), open(10));
    let roots = std::slice::from_ref(&root);
    // The first cache's bound does not become the second's (nor the reverse).
    for _ in 0..2 {
        let cut = narrow.closure(roots, true, 2);
        assert!(cut.iter().any(|(p, r)| p == "--closure" && r.is_err()), "{}", cut.len());
        let all = wide.closure(roots, true, 2);
        assert_eq!(all.len(), 4);
        assert!(all.iter().all(|(_, r)| r.is_ok()));
    }
    // Disk budgets are each scratch folder's own.
    let (small, large) =
        (Scratch::create_in(d, 1 << 20).unwrap(), Scratch::create_in(d, 4 << 20).unwrap());
    let keep = |_: &[u8]| true;
    let info = wide.narinfo(&root).unwrap();
    let err = wide.fetch_nar(&info, &small.path().join("r"), &keep, small.disk()).unwrap_err();
    assert!(err.to_string().contains("more than 1048576 bytes"), "{err}");
    assert_eq!(small.disk().used(), 0, "a refused path gives its bytes back");
    let done = wide.fetch_nar(&info, &large.path().join("r"), &keep, large.disk()).unwrap();
    assert_eq!(large.disk().used(), done.stored);
    assert!(done.stored > 1 << 20);
}

// ---- 7. Sig lines -------------------------------------------------------------

#[test]
fn a_malformed_sig_line_by_an_unknown_key_does_not_sink_a_good_signature() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = CacheDir::new(d.join("cache"));
    let secret = [9u8; 32];
    let public = ed25519_dalek::SigningKey::from_bytes(&secret).verifying_key();
    let key =
        format!("test-1:{}", base64::engine::general_purpose::STANDARD.encode(public.to_bytes()));
    let path = store_path(1, "signed");
    let bytes = dense_nar(100);
    let tmp = d.join("tmp");
    for junk in ["Sig: junk:!!!\n", "Sig: nocolon\n", "Sig: other-1:AAAA\n"] {
        cache.add_with(&path, &bytes, &[], Some(("test-1", secret)), junk, None);
        let args = ["--substituter", &cache.url(), "--trusted-public-key", &key, &path];
        let out = run(&tmp, &args, Duration::from_secs(60));
        assert_eq!(out.status.code(), Some(0), "{junk}: {}", shown(&out));
    }
    // Only junk, or junk under the trusted name: refused, each named.
    cache.add_with(&path, &bytes, &[], None, "", None);
    let info = CacheDir::narinfo_path(&path);
    let mut text = fs::read_to_string(cache.dir.join(&info)).unwrap();
    text.push_str("Sig: junk:!!!\nSig: test-1:!!!\n");
    fs::write(cache.dir.join(&info), text).unwrap();
    let args = ["--substituter", &cache.url(), "--trusted-public-key", &key, &path];
    let out = run(&tmp, &args, Duration::from_secs(60));
    let shown = shown(&out);
    assert_eq!(out.status.code(), Some(2), "{shown}");
    assert!(
        shown.contains("no valid signature by a trusted key: junk (not trusted), test-1 (not base64 of 64 bytes)"),
        "{shown}"
    );
    assert!(empty(&tmp), "the temporary folder was left");
}
