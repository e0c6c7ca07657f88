//! Fault injection: `auto-add-driver-runpath` killed at random points, full
//! disks, read-only and unreadable trees, files changing under us, odd file
//! types and names, very long paths. Each case states the outcome we promise
//! (docs/robustness.md has the matrix). Bounded in time: well under a minute
//! for the whole file in release mode.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const LIB_C: &str = "int answer(void) { return 42; }\n";
const MAIN_C: &str = "int answer(void);\nint main(void) { return answer() - 42; }\n";

/// Builds `lib.so` and `prog` (a PIE linked against it) in `dir`.
fn build(dir: &Path) -> (PathBuf, PathBuf) {
    tool("gcc");
    std::fs::write(dir.join("lib.c"), LIB_C).unwrap();
    std::fs::write(dir.join("main.c"), MAIN_C).unwrap();
    sh(
        dir,
        "set -e; gcc -shared -fPIC -o lib.so lib.c; gcc -fPIE -pie -o prog main.c -L. -l:lib.so",
    );
    (dir.join("lib.so"), dir.join("prog"))
}

fn aadr() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_auto-add-driver-runpath"));
    for v in ["NIX_LOG_FD", "NIX_DEBUG", "outputs", "out", "NIX_ATTRS_JSON_FILE"] {
        c.env_remove(v);
    }
    c
}

/// The patched bytes of `file` (patched in a scratch copy).
fn patched(scratch: &Path, file: &Path, in_place: bool) -> Vec<u8> {
    let copy = scratch.join(file.file_name().unwrap());
    std::fs::copy(file, &copy).unwrap();
    let mut c = aadr();
    if in_place {
        c.arg("--in-place");
    }
    let out = c.arg(&copy).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    std::fs::read(&copy).unwrap()
}

/// A small deterministic generator (xorshift), so that a failing seed can be replayed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Every regular file below `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

fn is_side_file(p: &Path) -> bool {
    p.file_name().unwrap().as_encoded_bytes().windows(5).any(|w| w == b".~nch")
}

const FILES: usize = 2000;

/// Whether an in-place journal for `name` sits next to it.
fn journal_for(name: &Path) -> bool {
    let prefix = format!(".{}.~nch", name.file_name().unwrap().to_str().unwrap());
    std::fs::read_dir(name.parent().unwrap()).unwrap().any(|e| {
        let n = e.unwrap().file_name();
        let n = n.to_string_lossy();
        n.starts_with(&prefix) && n.ends_with(".journal")
    })
}

/// Every name in `names` of the same file as `name` (its hard links and
/// itself).
fn links_of<'a>(name: &Path, names: &'a [(PathBuf, bool)]) -> impl Iterator<Item = &'a Path> {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    let me = id(name);
    names.iter().map(|(n, _)| n.as_path()).filter(move |n| me.is_some() && id(n) == me)
}

/// Makes the tree: 20 folders of 100 files, libraries and programs
/// alternating; every 97th name is a hard link to the previous file.
fn make_tree(root: &Path, lib: &Path, prog: &Path) -> Vec<(PathBuf, bool)> {
    let mut names = Vec::new();
    for i in 0..FILES {
        let dir = root.join(format!("d{:02}", i / 100));
        std::fs::create_dir_all(&dir).unwrap();
        let is_lib = i % 2 == 0;
        let name = dir.join(format!("f{i:04}"));
        if i % 97 == 1 {
            let (prev, prev_lib) = names.last().cloned().unwrap();
            std::fs::hard_link(&prev, &name).unwrap();
            names.push((name, prev_lib));
            continue;
        }
        std::fs::copy(if is_lib { lib } else { prog }, &name).unwrap();
        names.push((name, is_lib));
    }
    names
}

fn sigkill_at_random_points(in_place: bool, seeds: std::ops::Range<u64>) {
    let tmp = tempfile::tempdir().unwrap();
    let (lib, prog) = build(tmp.path());
    let scratch = tmp.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let (lib_old, prog_old) = (std::fs::read(&lib).unwrap(), std::fs::read(&prog).unwrap());
    let lib_new = patched(&scratch, &lib, in_place);
    let prog_new = patched(&scratch, &prog, in_place);
    assert_ne!(lib_old, lib_new);

    // How long a whole run takes, to spread the kills over it.
    let timing = tmp.path().join("timing");
    make_tree(&timing, &lib, &prog);
    let start = Instant::now();
    let mut c = aadr();
    if in_place {
        c.arg("--in-place");
    }
    assert!(c.arg(&timing).output().unwrap().status.success());
    let full = start.elapsed().max(Duration::from_millis(5));
    std::fs::remove_dir_all(&timing).unwrap();

    let mut interrupted = 0;
    for seed in seeds {
        let root = tmp.path().join(format!("tree-{seed}"));
        let names = make_tree(&root, &lib, &prog);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (seed + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
        // Kill somewhere in the first 120% of a run (startup included).
        let delay = Duration::from_micros(rng.next() % (full.as_micros() as u64 * 6 / 5 + 1));
        let mut c = aadr();
        if in_place {
            c.arg("--in-place");
        }
        let mut child = c.arg(&root).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        if status.code().is_none() {
            interrupted += 1;
        }
        // Every name: the original or the complete patched file.
        let (mut old, mut new, mut tails) = (0, 0, 0);
        for (name, is_lib) in &names {
            let bytes = std::fs::read(name).unwrap();
            let (o, n) = if *is_lib { (&lib_old, &lib_new) } else { (&prog_old, &prog_new) };
            if &bytes == o {
                old += 1;
            } else if &bytes == n {
                new += 1;
            } else if in_place && bytes.starts_with(o) && links_of(name, &names).any(journal_for) {
                // In place, between the append and the switch: the old file
                // plus an unreferenced tail (it loads and reads as the old
                // one), with the journal that lets the rerun cut the tail
                // (named after the one name of the file that was patched:
                // a hard link shares it).
                tails += 1;
            } else {
                panic!("seed {seed} (kill after {delay:?}): {} is neither the original nor the patched file ({} bytes)", name.display(), bytes.len());
            }
        }
        assert_eq!(old + new + tails, FILES);
        // A rerun finishes the job and leaves no side file.
        let mut c = aadr();
        if in_place {
            c.arg("--in-place");
        }
        let out = c.arg(&root).output().unwrap();
        assert!(out.status.success(), "seed {seed}: rerun: {}", text(&out));
        for (name, is_lib) in &names {
            let want = if *is_lib { &lib_new } else { &prog_new };
            assert!(
                &std::fs::read(name).unwrap() == want,
                "seed {seed}: {} after the rerun",
                name.display()
            );
        }
        let left: Vec<PathBuf> = files(&root).into_iter().filter(|p| is_side_file(p)).collect();
        assert!(left.is_empty(), "seed {seed}: side files left: {left:?}");
        assert_eq!(files(&root).len(), FILES);
        eprintln!(
            "seed {seed}: killed after {delay:?} (run {full:?}): {new} patched, {old} original"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
    assert!(interrupted > 0, "no run was actually interrupted");
}

#[test]
fn sigkill_during_replacement_leaves_old_or_new_files_and_a_rerun_finishes() {
    sigkill_at_random_points(false, 0..6);
}

#[test]
fn sigkill_during_in_place_patching_leaves_old_or_new_files_and_a_rerun_finishes() {
    sigkill_at_random_points(true, 100..106);
}

fn nch(bin: &str) -> Command {
    let exe = match bin {
        "no-broken-symlinks" => env!("CARGO_BIN_EXE_no-broken-symlinks"),
        "cuda-elf-inspect" => env!("CARGO_BIN_EXE_cuda-elf-inspect"),
        _ => env!("CARGO_BIN_EXE_auto-add-driver-runpath"),
    };
    let mut c = Command::new(exe);
    for v in ["NIX_LOG_FD", "NIX_DEBUG", "outputs", "out", "NIX_ATTRS_JSON_FILE"] {
        c.env_remove(v);
    }
    // no-broken-symlinks judges links inside the store only (upstream).
    c.env("NIX_STORE", std::env::temp_dir());
    c
}

/// Runs `c` with a time limit: a binary that blocks (on a FIFO, say) fails the test.
fn bounded(mut c: Command, limit: Duration) -> std::process::Output {
    let child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output().unwrap()).unwrap());
    match rx.recv_timeout(limit) {
        Ok(out) => out,
        Err(_) => {
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("{c:?} did not finish within {limit:?}");
        }
    }
}

struct Tmpfs(PathBuf);
impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn disk_full(in_place: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let (lib, _) = build(tmp.path());
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k"])
        .arg("tmpfs")
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(
        st.success(),
        "mount -t tmpfs failed: these tests run as root (CI containers are privileged)"
    );
    let _guard = Tmpfs(mnt.clone());
    let target = mnt.join("lib.so");
    std::fs::copy(&lib, &target).unwrap();
    // Fill the rest of the filesystem.
    let _ = std::fs::write(mnt.join("filler"), vec![0u8; 64 << 10]);
    let before = std::fs::read(&target).unwrap();
    let mut c = nch("aadr");
    if in_place {
        c.arg("--in-place");
    }
    c.arg(&mnt);
    let out = bounded(c, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lib.so") && err.contains("no space left on device"), "{}", text(&out));
    assert!(std::fs::read(&target).unwrap() == before, "the original changed");
    let names: Vec<_> = std::fs::read_dir(&mnt).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "side files left: {names:?}");
}

#[test]
fn disk_full_is_an_error_naming_the_file_and_leaves_it_and_no_temp_file() {
    disk_full(false);
}

#[test]
fn disk_full_in_place_cuts_the_tail_and_leaves_no_journal() {
    disk_full(true);
}

#[test]
fn fifos_sockets_newlines_and_invalid_utf8_in_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let (lib, _) = build(tmp.path());
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    Command::new("mkfifo").arg(out.join("fifo")).status().unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(out.join("sock")).unwrap();
    use std::os::unix::ffi::OsStrExt;
    let odd = [&b"new\nline.so"[..], b"bad-\xff\xfe-utf8.so", b"tab\tand space .so"];
    for n in odd {
        std::fs::copy(&lib, out.join(std::ffi::OsStr::from_bytes(n))).unwrap();
    }
    std::os::unix::fs::symlink(
        std::ffi::OsStr::from_bytes(b"bad-\xff\xfe-utf8.so"),
        out.join(std::ffi::OsStr::from_bytes(b"link\n\xff")),
    )
    .unwrap();
    let limit = Duration::from_secs(20);
    // no-broken-symlinks: nothing broken, nothing blocks.
    let r = bounded(
        {
            let mut c = nch("no-broken-symlinks");
            c.arg(&out);
            c
        },
        limit,
    );
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    // cuda-elf-inspect on the folder: every odd name read, FIFO and socket skipped.
    let r = bounded(
        {
            let mut c = nch("cuda-elf-inspect");
            c.arg("--format=json").arg(&out);
            c
        },
        limit,
    );
    assert!(r.status.code().is_some_and(|s| s < 2), "{}", text(&r));
    // auto-add-driver-runpath: every odd name patched, in both modes.
    for mode in [&[][..], &["--in-place"][..]] {
        let r = bounded(
            {
                let mut c = nch("aadr");
                c.args(mode).arg(&out);
                c
            },
            limit,
        );
        assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    }
    for n in odd {
        let p = out.join(std::ffi::OsStr::from_bytes(n));
        assert!(std::fs::read(&p).unwrap() != std::fs::read(&lib).unwrap(), "{p:?} not patched");
    }
    // A FIFO named on the command line is not opened either.
    let r = bounded(
        {
            let mut c = nch("cuda-elf-inspect");
            c.arg(out.join("fifo"));
            c
        },
        limit,
    );
    assert!(r.status.code().is_some(), "{}", text(&r));
    let r = bounded(
        {
            let mut c = nch("aadr");
            c.arg(out.join("fifo"));
            c
        },
        limit,
    );
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
}

/// A tree whose deepest file has a path longer than PATH_MAX (4096): 24
/// folders of 200 characters, made with relative names.
fn long_tree(dir: &Path, lib: &Path) -> PathBuf {
    let root = dir.join("long");
    std::fs::create_dir(&root).unwrap();
    let n = "d".repeat(200);
    sh(
        &root,
        &format!(
            "set -e; for i in $(seq 24); do mkdir {n}; cd {n}; done; cp {} lib.so; ln -s nowhere dangling",
            lib.display()
        ),
    );
    root
}

#[test]
fn paths_longer_than_path_max_are_errors_naming_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let (lib, _) = build(tmp.path());
    let root = long_tree(tmp.path(), &lib);
    let limit = Duration::from_secs(20);
    for (bin, args) in [
        ("aadr", &[][..]),
        ("aadr", &["--in-place"][..]),
        ("no-broken-symlinks", &[][..]),
        ("cuda-elf-inspect", &[][..]),
    ] {
        let r = bounded(
            {
                let mut c = nch(bin);
                c.args(args).arg(&root);
                c
            },
            limit,
        );
        let err = text(&r); // cuda-elf-inspect reports on stdout
        eprintln!("{bin} {args:?}: {err}");
        // no-broken-symlinks warns and goes on, as upstream's `find` does
        // (`--strict` fails); the others fail with an I/O error.
        let want = if bin == "no-broken-symlinks" { 0 } else { 2 };
        assert_eq!(r.status.code(), Some(want), "{bin}: {}", text(&r));
        assert!(err.contains("file name too long") && err.contains("/dddd"), "{bin}: {}", text(&r));
    }
}

#[test]
fn permission_denied_subtree_is_an_error_naming_it_and_the_rest_is_done() {
    let tmp = tempfile::tempdir().unwrap();
    let (lib, _) = build(tmp.path());
    let out = tmp.path().join("out");
    sh(
        tmp.path(),
        &format!(
            "set -e; mkdir -p out/open out/closed; cp {l} out/open/lib.so; cp {l} out/closed/lib.so
             ln -s ../closed/lib.so out/open/link; chown -R 65534:65534 out; chmod 0755 . ..; chown 0:0 out/closed; chmod 0700 out/closed",
            l = lib.display()
        ),
    );
    let as_nobody = |bin: &str, args: &[&str]| {
        let mut c = Command::new(tool("setpriv"));
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        let exe = match bin {
            "no-broken-symlinks" => env!("CARGO_BIN_EXE_no-broken-symlinks"),
            "cuda-elf-inspect" => env!("CARGO_BIN_EXE_cuda-elf-inspect"),
            _ => env!("CARGO_BIN_EXE_auto-add-driver-runpath"),
        };
        c.arg(exe).args(args).arg(&out).env_remove("NIX_LOG_FD").env_remove("outputs");
        c.env("NIX_STORE", std::env::temp_dir());
        bounded(c, Duration::from_secs(20))
    };
    for (bin, args) in
        [("aadr", &[][..]), ("no-broken-symlinks", &[][..]), ("cuda-elf-inspect", &[][..])]
    {
        let r = as_nobody(bin, args);
        let err = text(&r); // cuda-elf-inspect reports on stdout
        eprintln!("{bin}: {err}");
        assert!(err.contains("closed") && err.contains("permission denied"), "{bin}: {}", text(&r));
        if bin != "no-broken-symlinks" {
            assert_ne!(r.status.code(), Some(0), "{bin}: {}", text(&r));
        }
    }
    let r = as_nobody("no-broken-symlinks", &["--strict"]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    // The readable part was patched all the same.
    assert!(std::fs::read(out.join("open/lib.so")).unwrap() != std::fs::read(&lib).unwrap());
    assert!(std::fs::read(out.join("closed/lib.so")).unwrap() == std::fs::read(&lib).unwrap());
}

#[test]
fn a_file_truncated_or_replaced_between_scan_and_patch() {
    use nix_cuda_hooks::driver_runpath::{process_file, Action, Config, Driver, ErrorKind};
    let tmp = tempfile::tempdir().unwrap();
    let (lib, prog) = build(tmp.path());
    let cfg = Config::new(Driver::Entry(b"/run/opengl-driver/lib".to_vec()));
    let whole = std::fs::read(&lib).unwrap();
    for in_place in [false, true] {
        let cfg = Config { in_place, ..cfg.clone() };
        // Truncated after the walk saw it: an ELF error naming it, the bytes kept.
        let f = tmp.path().join(format!("trunc-{in_place}.so"));
        std::fs::write(&f, &whole[..whole.len() / 3]).unwrap();
        let r = process_file(&f, &[], &cfg);
        assert_eq!((r.action, r.error_kind), (Action::Error, Some(ErrorKind::Elf)), "{r:?}");
        assert_eq!(std::fs::read(&f).unwrap(), &whole[..whole.len() / 3]);
        // Emptied: not an ELF file any more, skipped.
        std::fs::write(&f, b"").unwrap();
        assert_ne!(process_file(&f, &[], &cfg).action, Action::Error);
        // Replaced by another program: that one is patched.
        std::fs::copy(&prog, &f).unwrap();
        assert_eq!(process_file(&f, &[], &cfg).action, Action::Patched);
        assert_eq!(search_path(&f).unwrap().1, "/run/opengl-driver/lib");
    }
}

/// A launcher that runs a program with `renameat2` failing with the errno
/// given (a seccomp filter, as on a kernel before 3.15 or a file system
/// without RENAME_EXCHANGE).
const NO_EXCHANGE_C: &str = r#"
#define _GNU_SOURCE
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
  struct sock_filter f[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_renameat2, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (atoi(argv[1]) & SECCOMP_RET_DATA)),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = { sizeof f / sizeof f[0], f };
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
    perror("seccomp");
    return 99;
  }
  execv(argv[2], argv + 2);
  perror("execv");
  return 98;
}
"#;

/// A file of 16 MiB or more is switched by RENAME_EXCHANGE then unlink
/// (strace shows it); where the exchange fails with ENOSYS or EINVAL (a
/// seccomp filter stands for the old kernel or the file system), the same
/// file is renamed into place: patched (readelf), still runs, mode kept,
/// no side file left.
#[test]
fn without_rename_exchange_a_large_file_is_renamed_into_place() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(dir.join("noexchange.c"), NO_EXCHANGE_C).unwrap();
    std::fs::write(
        dir.join("big.c"),
        "char big[17 << 20] = {1};\nint main(void) { volatile char *p = big; return p[0] - 1 + p[(17 << 20) - 1]; }\n",
    )
    .unwrap();
    sh(dir, "set -e; gcc -O1 -o noexchange noexchange.c; gcc -O1 -o big big.c; chmod 0751 big");
    assert!(std::fs::metadata(dir.join("big")).unwrap().len() >= 16 << 20);
    let exe = env!("CARGO_BIN_EXE_auto-add-driver-runpath");
    let strace = tool("strace");
    for (name, launch, want) in [
        ("exchange", String::new(), "RENAME_EXCHANGE) = 0"),
        ("enosys", format!("{} 38", dir.join("noexchange").display()), "= -1 ENOSYS"),
        ("einval", format!("{} 22", dir.join("noexchange").display()), "= -1 EINVAL"),
    ] {
        let out = dir.join(name);
        std::fs::create_dir(&out).unwrap();
        sh(dir, &format!("cp -p big {name}/big"));
        let log = sh(
            dir,
            &format!(
                "{} -f -e trace=renameat2,rename,unlink -o {name}.trace {launch} {exe} {name} 2>&1 >/dev/null; cat {name}.trace",
                strace.display()
            ),
        );
        let switch: Vec<&str> = log.lines().filter(|l| l.contains("/big")).collect();
        assert!(
            switch.iter().any(|l| l.contains("renameat2(") && l.contains(want)),
            "{name}: {log}"
        );
        if name == "exchange" {
            assert!(!switch.iter().any(|l| l.contains(" rename(")), "{name}: {log}");
        } else {
            assert!(
                switch.iter().any(|l| l.contains(" rename(") && l.ends_with("= 0")),
                "{name}: {log}"
            );
        }
        let file = out.join("big");
        assert_eq!(search_path(&file).unwrap().1, "/run/opengl-driver/lib", "{name}");
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777, 0o751);
        sh(dir, &format!("./{name}/big"));
        let names: Vec<_> =
            std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["big"], "{name}: side files left");
    }
}
