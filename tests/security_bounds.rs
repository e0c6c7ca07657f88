//! Issue 29, the search and unpack bounds: each test builds the attack of
//! one item at test time and checks the bound that stops it.
//! - 4: `--why` on a cyclic closure does work polynomial in its size;
//! - 5: printf patterns match in `O(name x pattern)`;
//! - 7: folders and links of a NAR are charged to `--max-unpack-bytes`, and
//!   an archive has at most `MAX_NAR_ENTRIES` entries;
//! - 8: a local audit opens no device or FIFO an untrusted RUNPATH names;
//! - 13: a compressed NAR may not expand more than `MAX_EXPANSION` times.
//!
//! A test of a search that was exponential runs it on a thread and fails
//! when it has not answered in a generous time (the old code took minutes
//! to hours), rather than hanging the suite.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{text, tool};

/// `f()` on a thread; the test fails when it has not answered in `secs`.
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what}: no answer in {secs} s (the bound does not hold)"))
}

/// Runs `program` with `args`, killed after `secs` (the test then fails).
fn run_bounded(program: &Path, args: &[&str], dir: &Path, secs: u64) -> Output {
    let mut cmd = Command::new(program);
    common::outside_build(&mut cmd);
    let child = cmd
        .args(args)
        .current_dir(dir)
        .env("TMPDIR", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let (tx, rx) = mpsc::channel::<()>();
    let killer = std::thread::spawn(move || {
        if rx.recv_timeout(Duration::from_secs(secs)).is_err() {
            // SAFETY: kill(2) on our child, not reaped before this thread ends.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    let out = child.wait_with_output().unwrap();
    let _ = tx.send(());
    killer.join().unwrap();
    assert!(
        out.status.code().is_some(),
        "{} {args:?}: killed after {secs} s (it hung): {}",
        program.display(),
        text(&out)
    );
    out
}

// ---- 5. printf patterns ---------------------------------------------------

#[test]
fn printf_patterns_of_30_conversions_match_in_linear_time() {
    use nix_cuda_hooks::driver_runpath::search::printf_matches;
    let name = b"libcudnn_engines_precompiled.so.9.19.0".to_vec();
    let long: Vec<u8> = [b"libc".as_slice(), &[b'x'; 200], b".so"].concat();
    let answers = within(20, "printf_matches", move || {
        let pattern = |k: usize, tail: &str| format!("libc{}{tail}", "%s".repeat(k)).into_bytes();
        let mut answers = Vec::new();
        for k in [8, 14, 30] {
            // The repro: the name does not end in `.so`, so every
            // split of the name among the conversions fails.
            answers.push(printf_matches(&pattern(k, ".so"), &name));
            // Enough bytes for each conversion (at least one each): a match;
            // one conversion more than there are bytes: none.
            answers.push(printf_matches(&pattern(k, ".so.9.19.0"), &name));
        }
        answers.push(printf_matches(&pattern(30, ".so"), &long));
        answers.push(printf_matches(&pattern(200, ".so"), &long));
        answers.push(printf_matches(&pattern(201, ".so"), &long));
        let digits = format!("libc{}.so", "%d".repeat(30)).into_bytes();
        answers.push(printf_matches(&digits, &long));
        answers
    });
    // "udnn_engines_precompiled" is 24 bytes: 8 and 14 conversions fit, 30 not.
    assert_eq!(answers, [false, true, false, true, false, false, true, true, false, false]);
}

/// The dlopen setup hook's path: `auto-add-driver-runpath --dlopen-search`
/// matches a caller's printf pattern of 30 conversions against a search
/// folder's library names.
#[test]
fn a_dlopen_pattern_of_30_conversions_does_not_stall_the_patcher() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("out/bin")).unwrap();
    std::fs::create_dir_all(dir.join("search")).unwrap();
    let pattern = format!("libc{}.so", "%s".repeat(30));
    let code = format!(
        "#include <dlfcn.h>\n#include <stdio.h>\n\
         int main(int c, char **v) {{ char n[512]; \
         snprintf(n, sizeof n, \"{pattern}\", v[0], v[0], v[0], v[0], v[0], v[0], v[0], v[0], \
         v[0], v[0], v[0], v[0], v[0], v[0], v[0], v[0], v[0], v[0], v[0], v[0], v[0], v[0], \
         v[0], v[0], v[0], v[0], v[0], v[0], v[0], v[0]); return dlopen(n, 2) == 0; }}\n"
    );
    std::fs::write(dir.join("m.c"), code).unwrap();
    common::sh(dir, &format!("{} -O0 -o out/bin/prog m.c -ldl", tool("cc").display()));
    // A real ELF library under the name, and one the pattern matches.
    for name in
        ["libcudnn_engines_precompiled.so.9.19.0", "libcudnn_engines_precompiled_extended_x.so"]
    {
        common::sh(dir, &format!("cp out/bin/prog search/{name}"));
    }
    let search = dir.join("search");
    let args = ["--check", "--dlopen-search", search.to_str().unwrap(), "out"];
    let bin = Path::new(env!("CARGO_BIN_EXE_auto-add-driver-runpath"));
    let out = run_bounded(bin, &args, dir, 60);
    let shown = text(&out);
    assert!(
        shown.contains("libcudnn_engines_precompiled_extended_x.so")
            && !shown.contains("libcudnn_engines_precompiled.so.9.19.0"),
        "the pattern serves the name it matches, only: {shown}"
    );
}

// ---- 4. --why on a cyclic closure ------------------------------------------

fn why_node(path: &str, refs: &[String]) -> nix_cuda_hooks::audit::why::Node {
    nix_cuda_hooks::audit::why::Node { path: path.into(), nar_size: 1, references: refs.to_vec() }
}

/// The closure: a root referencing the target and a clique of `n`
/// paths that reference the root and each other.
fn clique(n: usize, direct: bool) -> Vec<nix_cuda_hooks::audit::why::Node> {
    let member = |i: usize| format!("/s/c{i:02}");
    let mut nodes = vec![why_node(
        "/s/root",
        &[&["/s/target".to_string()][..], &(0..n).map(member).collect::<Vec<_>>()].concat(),
    )];
    for i in 0..n {
        let mut refs: Vec<String> = (0..n).filter(|&j| j != i).map(member).collect();
        refs.push("/s/root".into());
        if direct {
            refs.push("/s/target".into());
        }
        nodes.push(why_node(&member(i), &refs));
    }
    nodes.push(why_node("/s/target", &[]));
    nodes
}

/// Every simple chain from `from` to `to`, depth first in the order of the
/// sorted references, no pruning at all: the definition, for small graphs.
fn every_chain(
    nodes: &[nix_cuda_hooks::audit::why::Node],
    from: &str,
    to: &str,
) -> Vec<Vec<String>> {
    fn go(
        nodes: &[nix_cuda_hooks::audit::why::Node],
        to: &str,
        stack: &mut Vec<String>,
        out: &mut Vec<Vec<String>>,
    ) {
        let last = stack.last().unwrap().clone();
        if last == to {
            out.push(stack.clone());
            return;
        }
        let Some(node) = nodes.iter().find(|n| n.path == last) else { return };
        let mut refs = node.references.clone();
        refs.sort();
        for r in refs {
            if !stack.contains(&r) && nodes.iter().any(|n| n.path == r) {
                stack.push(r);
                go(nodes, to, stack, out);
                stack.pop();
            }
        }
    }
    let mut out = Vec::new();
    go(nodes, to, &mut vec![from.to_string()], &mut out);
    out
}

#[test]
fn why_on_a_cyclic_closure_does_polynomial_work() {
    use nix_cuda_hooks::audit::why::{search, Cut, MAX_CHAINS, MAX_STEPS};
    let found = within(60, "--why on cliques of 11 to 30", || {
        (11..=30)
            .map(|n| {
                let nodes = clique(n, false);
                (n, search(&nodes, "/s/root", "/s/target", MAX_STEPS))
            })
            .collect::<Vec<_>>()
    });
    for (n, s) in found {
        // One chain: the clique reaches the target only through the root.
        assert_eq!(s.chains, [["/s/root", "/s/target"]], "n={n}");
        assert_eq!(s.cut, None, "n={n}");
        // Work bounded by the closure's size (n + 2 paths, about n^2
        // references), not by the n! orders of the clique.
        let size = (n + 2) as u64 + (n * n + 2 * n) as u64;
        assert!(s.steps <= 4 * size, "n={n}: {} steps for {size} paths and references", s.steps);
    }
    // With a reference from each member to the target too, every order of
    // every subset of the clique is a chain: small cliques list them all
    // (checked against the definition), large ones the first MAX_CHAINS in
    // the same order, and say so.
    for n in 1..=5 {
        let nodes = clique(n, true);
        let s = search(&nodes, "/s/root", "/s/target", MAX_STEPS);
        assert_eq!(s.chains, every_chain(&nodes, "/s/root", "/s/target"), "n={n}");
        assert_eq!(s.cut, None);
    }
    let nodes = clique(30, true);
    let s = within(60, "--why on a 30-clique with direct references", move || {
        search(&nodes, "/s/root", "/s/target", MAX_STEPS)
    });
    assert_eq!(s.chains.len(), MAX_CHAINS);
    assert_eq!(s.cut, Some(Cut::MaxChains));
    let small = clique(7, true);
    let first = every_chain(&small, "/s/root", "/s/target");
    assert!(first.len() > MAX_CHAINS);
    let s = search(&small, "/s/root", "/s/target", MAX_STEPS);
    assert_eq!(s.chains, first[..MAX_CHAINS], "the first chains, in order");
    // The step budget ends a search that would be too long, with a note.
    let s = search(&clique(30, true), "/s/root", "/s/target", 100_000);
    assert_eq!(s.cut, Some(Cut::MaxSteps));
    assert!(s.steps <= 100_000 && !s.chains.is_empty(), "{} steps", s.steps);
}

#[test]
fn why_answers_say_when_chains_are_cut() {
    use nix_cuda_hooks::audit::why::{answer, write_text};
    use nix_cuda_hooks::audit::Audit;
    let nodes = clique(12, true);
    let why = within(60, "answer", move || {
        answer(&["/s/root".to_string()], &nodes, &["target".to_string()], &Audit::default(), None)
    });
    assert_eq!(why.chains.len(), nix_cuda_hooks::audit::why::MAX_CHAINS);
    let mut text = Vec::new();
    write_text(&mut text, &why).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.ends_with(
            "\nchains from /s/root to /s/target: only the first 1000 chains are listed\n"
        ),
        "{}",
        &text[text.len() - 300..]
    );
    let json = serde_json::to_value(&why).unwrap();
    assert_eq!(json["cut"][0]["reason"], "max-chains");
}

// ---- NARs ---------------------------------------------------------------

fn put(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
    out.resize(out.len().div_ceil(8) * 8, 0);
}

fn tokens(out: &mut Vec<u8>, ts: &[&[u8]]) {
    for t in ts {
        put(out, t);
    }
}

/// A NAR whose root folder holds `n` entries `e000000`...: each an empty
/// folder, or with `link` a link to `link`.
fn wide_nar(n: usize, link: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    tokens(&mut out, &[b"nix-archive-1", b"(", b"type", b"directory"]);
    for i in 0..n {
        let name = format!("e{i:06}");
        tokens(&mut out, &[b"entry", b"(", b"name", name.as_bytes(), b"node", b"(", b"type"]);
        match link {
            Some(target) => tokens(&mut out, &[b"symlink", b"target", target]),
            None => tokens(&mut out, &[b"directory"]),
        }
        tokens(&mut out, &[b")", b")"]);
    }
    tokens(&mut out, &[b")"]);
    out
}

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::stream::encode_all(bytes, 19).unwrap()
}

/// Allocated bytes below `dir`, and its inodes.
fn disk_use(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return (0, 0) };
    let mut total = (0, 0);
    for e in entries.flatten() {
        let Ok(m) = e.path().symlink_metadata() else { continue };
        total.0 += m.blocks() * 512;
        total.1 += 1;
        if m.is_dir() {
            let (b, i) = disk_use(&e.path());
            total = (total.0 + b, total.1 + i);
        }
    }
    total
}

/// `cuda-elf-inspect ARGS` with `TMPDIR=tmp`, sampling what `tmp` holds
/// while it runs; killed (the test failed) after `secs`. The output and the
/// peak (bytes, inodes).
fn inspect_watched(tmp: &Path, args: &[&str], secs: u64) -> (Output, (u64, u64)) {
    std::fs::create_dir_all(tmp).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cuda-elf-inspect"));
    common::outside_build(&mut cmd);
    let mut child = cmd
        .args(args)
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
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
    let start = std::time::Instant::now();
    let mut peak = (0, 0);
    let status = loop {
        let (b, i) = disk_use(tmp);
        peak = (peak.0.max(b), peak.1.max(i));
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(secs) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("cuda-elf-inspect {args:?}: killed after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let [stdout, stderr] = readers.map(|r| r.join().unwrap());
    (Output { status, stdout, stderr }, peak)
}

// ---- 7. folders and links charged to the disk budget ------------------------

#[test]
fn folders_and_links_of_a_nar_are_charged_to_the_disk_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let target = vec![b'x'; 4000];
    // The repros: 100,000 links with 4,000-byte targets, 100,000
    // empty folders, under a 1 MiB budget (372 KB and 93 KB of .nar.zst).
    for (name, nar) in [
        ("links.nar.zst", wide_nar(100_000, Some(&target))),
        ("folders.nar.zst", wide_nar(100_000, None)),
    ] {
        let file = d.join(name);
        std::fs::write(&file, zstd(&nar)).unwrap();
        let scratch = d.join("tmp");
        let (out, (bytes, inodes)) =
            inspect_watched(&scratch, &["--max-unpack-bytes", "1M", file.to_str().unwrap()], 120);
        let shown = text(&out);
        assert_eq!(out.status.code(), Some(2), "{shown}");
        assert!(
            shown.contains(&format!("{}: e0", file.display()))
                && shown.contains("more than 1048576 bytes unpacked at once (--max-unpack-bytes)"),
            "{shown}"
        );
        // 1 MiB of budget at 4 KiB and more an entry: about 250 entries.
        assert!(inodes < 400, "{name}: {inodes} inodes in TMPDIR at once");
        assert!(bytes < 4 << 20, "{name}: {bytes} bytes in TMPDIR at once");
        assert!(std::fs::read_dir(&scratch).unwrap().next().is_none(), "TMPDIR was left");
    }
}

#[test]
fn an_archive_makes_at_most_its_budget_s_entries_and_says_so() {
    use nix_cuda_hooks::store::budget::{Budget, MAX_NAR_ENTRIES};
    use nix_cuda_hooks::store::nar::{self, NarReader, UnpackError, ENTRY_BYTES};
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(MAX_NAR_ENTRIES, 1_000_000);
    let budget = Budget::new(1 << 40).with_max_entries(1000);
    assert_eq!(Budget::new(1).max_entries(), MAX_NAR_ENTRIES);
    // 999 folders and the root: the limit exactly, each entry charged.
    let fits = wide_nar(999, None);
    let done = nar::unpack_within(
        &mut NarReader::new(&fits[..]),
        &tmp.path().join("a"),
        &|_| true,
        &budget,
    )
    .unwrap();
    assert_eq!(done.entries, 1000);
    assert_eq!(done.stored, 1000 * ENTRY_BYTES + 999 * 7, "each entry: 4 KiB and its name");
    assert_eq!(budget.used(), done.stored);
    let over = wide_nar(1000, None);
    let err = nar::unpack_within(
        &mut NarReader::new(&over[..]),
        &tmp.path().join("b"),
        &|_| true,
        &budget,
    )
    .unwrap_err();
    assert!(matches!(err, UnpackError::Entries { limit: 1000, .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "e000999: more than 1000 folders, links and files in one archive (each takes an inode); \
         the entry is not written"
    );
    assert_eq!(budget.used(), done.stored, "the refused archive gave its charges back");
}

// ---- 8. no device or FIFO opened through RUNPATH + NEEDED ----------------------

/// Paths a process traced by `strace -y -e trace=open,openat` opened.
fn opened(trace: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(trace).unwrap();
    text.lines()
        .filter(|l| l.contains("open"))
        .filter_map(|l| {
            let call = &l[l.find('(')? + 1..];
            let start = call.find('"')? + 1;
            Some(call[start..start + call[start..].find('"')?].to_string())
        })
        .collect()
}

#[test]
fn a_local_audit_opens_no_fifo_or_device_that_runpath_and_needed_name() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::create_dir_all(d.join("trap")).unwrap();
    std::fs::write(d.join("lib.c"), "int f(void) { return 1; }\n").unwrap();
    std::fs::write(d.join("m.c"), "int f(void); int main(void) { return f(); }\n").unwrap();
    let trap = d.join("trap");
    let cc = tool("cc");
    common::sh(
        d,
        &format!(
            "{cc} -shared -fPIC -Wl,-soname,libfifo.so -o libfifo.so lib.c && \
             {cc} -shared -fPIC -Wl,-soname,null -o libnull.so lib.c && \
             {cc} -o prog m.c -L. -lfifo -Wl,--enable-new-dtags,-rpath,{trap}:/dev && \
             {cc} -o prog2 m.c -L. -lnull -Wl,--enable-new-dtags,-rpath,/dev && \
             rm libfifo.so libnull.so && mkfifo trap/libfifo.so",
            cc = cc.display(),
            trap = trap.display()
        ),
    );
    let trace = d.join("trace");
    let bin = env!("CARGO_BIN_EXE_cuda-elf-inspect");
    let args = ["-f", "-qq", "-e", "trace=open,openat,openat2,creat", "-o"];
    let mut strace = Command::new("strace");
    common::outside_build(&mut strace);
    let child = strace
        .args(args)
        .arg(&trace)
        .args([bin, "prog", "prog2"])
        .current_dir(d)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("strace (tests/tools/install.sh installs it)");
    let out = within(60, "the audit of a program whose library is a FIFO", move || {
        child.wait_with_output().unwrap()
    });
    let shown = text(&out);
    let fifo = trap.join("libfifo.so");
    let paths = opened(&trace);
    assert!(paths.iter().any(|p| p.ends_with("/prog2")), "strace saw the audit: {paths:?}");
    for node in [fifo.to_str().unwrap(), "/dev/libfifo.so", "/dev/null"] {
        assert!(!paths.iter().any(|p| p == node), "{node} was opened: {paths:?}\n{shown}");
    }
    assert!(
        shown.contains(&format!("{}: not a regular file (a FIFO)", fifo.display()))
            || shown.contains(&format!("{} is a FIFO, not a library (not opened)", fifo.display())),
        "the finding says what is there: {shown}"
    );
    assert!(
        shown.contains("/dev/null is a character device, not a library (not opened)"),
        "{shown}"
    );
}

// ---- 13. decompression bounded by the compressed size ------------------------

/// A NAR of one file `bomb.so` (an ELF header, then `zeros` zero bytes) as
/// `streams` bzip2 (or zstd) streams of the same zeros, concatenated: made
/// from one stream repeated, never in memory whole.
fn concatenated_bomb(zstd_frames: bool, zeros_per_stream: u64, streams: u64) -> Vec<u8> {
    use std::io::Write;
    let compress = |data: &[u8]| -> Vec<u8> {
        if zstd_frames {
            zstd::stream::encode_all(data, 3).unwrap()
        } else {
            let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::best());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
    };
    let size = 64 + zeros_per_stream * streams;
    let mut head = Vec::new();
    tokens(&mut head, &[b"nix-archive-1", b"(", b"type", b"regular", b"contents"]);
    head.extend_from_slice(&size.to_le_bytes());
    let mut elf = b"\x7fELF\x02\x01\x01".to_vec();
    elf.resize(64, 0);
    head.extend_from_slice(&elf);
    let mut out = compress(&head);
    let zeros = compress(&vec![0u8; zeros_per_stream as usize]);
    for _ in 0..streams {
        out.extend_from_slice(&zeros);
    }
    let mut tail = Vec::new();
    tokens(&mut tail, &[b")"]);
    out.extend(compress(&tail));
    out
}

#[test]
fn a_nar_file_of_concatenated_zero_streams_is_refused_by_its_expansion() {
    use nix_cuda_hooks::store::decompress::{FREE_OUTPUT, MAX_EXPANSION};
    assert_eq!((MAX_EXPANSION, FREE_OUTPUT), (1000, 64 << 20));
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // 64 GiB of zeros: bzip2 from 16 MiB streams, zstd from 64 MiB frames
    // (the old code decoded them all: 35 s per 8 GiB of bzip2).
    for (name, zstd_frames, per, count) in
        [("zeros.nar.bz2", false, 16u64 << 20, 4096u64), ("zeros.nar.zst", true, 64 << 20, 1024)]
    {
        let file = d.join(name);
        std::fs::write(&file, concatenated_bomb(zstd_frames, per, count)).unwrap();
        let len = std::fs::metadata(&file).unwrap().len();
        assert!(len < 4 << 20, "{name}: {len} bytes");
        let start = std::time::Instant::now();
        let (out, _) = inspect_watched(&d.join("tmp"), &[file.to_str().unwrap()], 60);
        let took = start.elapsed();
        let shown = text(&out);
        assert_eq!(out.status.code(), Some(2), "{shown}");
        assert!(
            shown.contains(&format!("{}: ", file.display()))
                && shown.contains("times the compressed size beyond the first 64 MiB, refused as a decompression bomb"),
            "{shown}"
        );
        // At most 64 MiB + 1000 x the input (under 4 MiB) were decoded.
        assert!(took < Duration::from_secs(30), "{name}: {took:?}");
    }
    // A NAR expanding less than the bound is read whole, past the first
    // 64 MiB: 128 MiB of zeros as one bzip2 stream per 16 KiB (each about
    // 45 bytes: some 360 times).
    let file = d.join("fine.nar.bz2");
    std::fs::write(&file, concatenated_bomb(false, 16 << 10, 8192)).unwrap();
    let (out, _) = inspect_watched(&d.join("tmp"), &[file.to_str().unwrap()], 60);
    assert!(!text(&out).contains("decompression bomb"), "{}", text(&out));
    // Empty streams make no output: time bounded by the input (200,000
    // empty zstd frames, 1.8 MB, decode in well under the limit).
    let mut frames = concatenated_bomb(true, 8, 1);
    let empty = zstd::stream::encode_all(&[][..], 3).unwrap();
    let at = frames.len()
        - zstd::stream::encode_all(
            &{
                let mut t = Vec::new();
                tokens(&mut t, &[b")"]);
                t
            }[..],
            3,
        )
        .unwrap()
        .len();
    let tail = frames.split_off(at);
    for _ in 0..200_000 {
        frames.extend_from_slice(&empty);
    }
    frames.extend(tail);
    let file = d.join("empty-frames.nar.zst");
    std::fs::write(&file, frames).unwrap();
    let (out, _) = inspect_watched(&d.join("tmp"), &[file.to_str().unwrap()], 60);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(!shown.contains("decompression bomb"), "{shown}");
}
