//! End-to-end tests of `no-broken-symlinks`: Nixpkgs' own test cases, the edge
//! cases upstream leaves untested, a differential test against Nixpkgs' real
//! no-broken-symlinks.sh run inside Nixpkgs' real setup.sh (both read in place
//! from the pinned files of tests/tools/nixpkgs-upstream.sh, through
//! tests/upstream/real-setup.bash), our setup hook in that same setup.sh, and
//! bad input.
//!
//! Expected summaries here are written from the reference
//! (upstream's no-broken-symlinks.sh, read in place, and docs/no-broken-symlinks.md),
//! never copied from our output.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::nixpkgs;

const BIN: &str = env!("CARGO_BIN_EXE_no-broken-symlinks");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A fake store with outputs, and a fake build folder for TMPDIR.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("store")).unwrap();
        std::fs::create_dir_all(dir.path().join("build")).unwrap();
        Fixture { dir }
    }
    fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }
    fn tmpdir(&self) -> PathBuf {
        self.dir.path().join("build")
    }
    /// An output folder `store/<name>`, created.
    fn output(&self, name: &str) -> PathBuf {
        let p = self.store().join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    }
    fn env(&self, cmd: &mut Command, outputs: &[(&str, &Path)]) {
        let names: Vec<&str> = outputs.iter().map(|(n, _)| *n).collect();
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("NIX_STORE", self.store())
            .env("TMPDIR", self.tmpdir())
            .env("NIX_LOG_FD", "2")
            .env("NIX_DEBUG", "7")
            .env("outputs", names.join(" "));
        for (n, p) in outputs {
            cmd.env(n, p);
        }
    }
    fn ours(&self, outputs: &[(&str, &Path)], extra_env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(BIN);
        self.env(&mut cmd, outputs);
        cmd.envs(extra_env.iter().copied());
        cmd.output().unwrap()
    }
    /// Runs `hook` (a setup-hook script) inside Nixpkgs' real setup.sh as a
    /// stdenv default hook, then `run` (default: `runHook postFixup`). The
    /// hook is written to the same path for every side, so setup.sh's own log
    /// lines ("sourcing setup hook '...'") are the same on both.
    fn in_setup(
        &self,
        outputs: &[(&str, &Path)],
        hook: &str,
        pre: &str,
        run: &str,
        extra_env: &[(&str, &str)],
    ) -> Output {
        let path = self.dir.path().join("hook.sh");
        std::fs::write(&path, hook).unwrap();
        let mut cmd = Command::new("bash");
        cmd.arg(format!("{ROOT}/tests/upstream/real-setup.bash")).arg(&path);
        self.env(&mut cmd, outputs);
        cmd.env("NCH_NIXPKGS", nixpkgs()).env("NCH_PRE", pre).env("NCH_RUN", run);
        cmd.envs(extra_env.iter().copied());
        cmd.output().unwrap()
    }
    /// Nixpkgs' own no-broken-symlinks.sh in its own setup.sh.
    fn upstream(&self, outputs: &[(&str, &Path)], extra_env: &[(&str, &str)]) -> Output {
        let hook = std::fs::read_to_string(format!(
            "{}/pkgs/build-support/setup-hooks/no-broken-symlinks.sh",
            nixpkgs()
        ))
        .unwrap();
        self.in_setup(outputs, &hook, "", "", extra_env)
    }
    /// Our hook (placeholder substituted) in the same setup.sh.
    fn ours_in_setup(&self, outputs: &[(&str, &Path)], extra_env: &[(&str, &str)]) -> Output {
        self.in_setup(outputs, &hook_script(BIN), "", "", extra_env)
    }
}

fn summary(d: usize, r: usize, u: usize) -> String {
    format!(
        "ERROR: noBrokenSymlinks: found {d} dangling symlinks, {r} reflexive symlinks and {u} unreadable symlinks"
    )
}

fn lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(<[u8]>::to_vec).collect()
}

/// The last log line, leaving out bash's `set -x` trace ("+ ..."), which
/// Nixpkgs' setup.sh turns on at NIX_DEBUG >= 6.
fn last_line(out: &Output) -> String {
    let lines = lines(&out.stderr);
    let last = lines.iter().rev().find(|l| !l.starts_with(b"+")).map(Vec::as_slice);
    String::from_utf8_lossy(last.unwrap_or(b"")).into_owned()
}

/// Asserts exit status and, on failure, the summary line.
fn expect(out: &Output, failed: Option<(usize, usize, usize)>) {
    let log = String::from_utf8_lossy(&out.stderr);
    match failed {
        None => assert_eq!(out.status.code(), Some(0), "log:\n{log}"),
        Some((d, r, u)) => {
            assert_eq!(out.status.code(), Some(1), "log:\n{log}");
            assert_eq!(last_line(out), summary(d, r, u), "log:\n{log}");
        }
    }
}

// ---- Nixpkgs' own cases (pkgs/test/stdenv/no-broken-symlinks.nix) ----

/// Builds one of upstream's scenarios in `out`: which links, relative or absolute.
fn scenario(out: &Path, dangling: bool, reflexive: bool, relative: bool) {
    if dangling {
        let target = out.join("dangling-target");
        if relative {
            symlink("dangling-target", out.join("dangling")).unwrap();
        } else {
            symlink(&target, out.join("dangling")).unwrap();
        }
    }
    if reflexive {
        if relative {
            symlink("reflexive", out.join("reflexive")).unwrap();
        } else {
            symlink(out.join("reflexive"), out.join("reflexive")).unwrap();
        }
    }
}

#[test]
fn upstream_cases_fail_with_the_upstream_summary() {
    for relative in [false, true] {
        for (dangling, reflexive) in [(true, false), (false, true), (true, true)] {
            let f = Fixture::new();
            let out = f.output("out");
            scenario(&out, dangling, reflexive, relative);
            let want = Some((dangling as usize, reflexive as usize, 0));
            expect(&f.ours(&[("out", &out)], &[]), want);
            // The same with the opt-out passes.
            expect(&f.ours(&[("out", &out)], &[("dontCheckForBrokenSymlinks", "1")]), None);
        }
    }
}

#[test]
fn upstream_cases_that_pass() {
    for relative in [false, true] {
        let f = Fixture::new();
        let out = f.output("out");
        std::fs::write(out.join("file"), "x").unwrap();
        if relative {
            symlink("file", out.join("valid")).unwrap();
            // /etc/my_file does not exist, but it is outside the store.
            let up = "../".repeat(out.components().count());
            symlink(format!("{up}etc/my_file"), out.join("etc-link")).unwrap();
        } else {
            symlink(out.join("file"), out.join("valid")).unwrap();
            symlink("/etc/my_file", out.join("etc-link")).unwrap();
        }
        let o = f.ours(&[("out", &out)], &[]);
        expect(&o, None);
        let log = String::from_utf8_lossy(&o.stderr);
        assert!(log.contains("etc-link points outside the Nix store; ignoring"), "{log}");
    }
}

#[test]
fn opt_out_false_is_the_empty_string_and_checks() {
    let f = Fixture::new();
    let out = f.output("out");
    scenario(&out, true, false, true);
    expect(&f.ours(&[("out", &out)], &[("dontCheckForBrokenSymlinks", "")]), Some((1, 0, 0)));
}

// ---- Edge cases upstream has no test for ----

#[test]
fn tmpdir_below_fails_and_tmpdir_itself_falls_through() {
    let f = Fixture::new();
    let out = f.output("out");
    symlink(f.tmpdir().join("obj/x.o"), out.join("below")).unwrap();
    let o = f.ours(&[("out", &out)], &[]);
    expect(&o, Some((1, 0, 0)));
    let want = format!(
        "ERROR: noBrokenSymlinks: the symlink {}/below points to {} directory: {}/obj/x.o",
        out.display(),
        f.tmpdir().display(),
        f.tmpdir().display()
    );
    assert!(String::from_utf8_lossy(&o.stderr).lines().any(|l| l == want), "{want}");

    let f = Fixture::new();
    let out = f.output("out");
    // Exactly $TMPDIR: not "below" it, and outside the store: ignored.
    symlink(f.tmpdir(), out.join("exact")).unwrap();
    expect(&f.ours(&[("out", &out)], &[]), None);
}

#[test]
fn cycles_count_as_dangling_and_extra_names_them() {
    let f = Fixture::new();
    let out = f.output("out");
    symlink("b", out.join("a")).unwrap();
    symlink("a", out.join("b")).unwrap();
    expect(&f.ours(&[("out", &out)], &[]), Some((2, 0, 0)));
    let mut cmd = Command::new(BIN);
    f.env(&mut cmd, &[("out", &out)]);
    let o = cmd.arg("--extra").output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let log = String::from_utf8_lossy(&o.stderr);
    let a = out.join("a");
    let b = out.join("b");
    let cycle = format!("{} -> {} -> {}", a.display(), b.display(), a.display());
    assert!(log.contains(&format!("is part of a symlink cycle: {cycle}")), "{log}");
    // The compatible summary is still the last line and unchanged.
    assert_eq!(last_line(&o), summary(2, 0, 0));
}

#[test]
fn dot_and_parent_links_and_loops_through_folders() {
    let f = Fixture::new();
    let out = f.output("out");
    std::fs::create_dir_all(out.join("d/e")).unwrap();
    symlink(".", out.join("dot")).unwrap();
    symlink("..", out.join("d/e/up")).unwrap();
    // A loop through a folder: walking must not follow it, and it exists.
    symlink("../..", out.join("d/e/loop")).unwrap();
    expect(&f.ours(&[("out", &out)], &[]), None);
}

#[test]
fn sibling_store_paths_are_checked() {
    let f = Fixture::new();
    let out = f.output("out");
    let other = f.output("other-pkg");
    std::fs::write(other.join("lib.so"), "x").unwrap();
    symlink(other.join("lib.so"), out.join("ok")).unwrap();
    symlink("../other-pkg/lib.so", out.join("ok-rel")).unwrap();
    expect(&f.ours(&[("out", &out)], &[]), None);
    symlink(other.join("gone.so"), out.join("bad")).unwrap();
    expect(&f.ours(&[("out", &out)], &[]), Some((1, 0, 0)));
}

#[test]
fn dotdot_escapes_leave_the_store_lexically() {
    let f = Fixture::new();
    let out = f.output("out");
    let up = "../".repeat(out.components().count() + 3);
    symlink(format!("{up}nonexistent"), out.join("escape")).unwrap();
    let o = f.ours(&[("out", &out)], &[]);
    expect(&o, None);
    assert!(String::from_utf8_lossy(&o.stderr).contains("escape points outside the Nix store"));
}

#[test]
fn non_utf8_names_are_logged_as_bytes() {
    let f = Fixture::new();
    let out = f.output("out");
    let name = OsStr::from_bytes(b"caf\xe9");
    symlink(OsStr::from_bytes(b"missing-\xff"), out.join(name)).unwrap();
    let o = f.ours(&[("out", &out)], &[]);
    expect(&o, Some((1, 0, 0)));
    let mut want = format!("ERROR: noBrokenSymlinks: the symlink {}/", out.display()).into_bytes();
    want.extend_from_slice(b"caf\xe9 points to a missing target: ");
    want.extend_from_slice(out.as_os_str().as_bytes());
    want.extend_from_slice(b"/missing-\xff");
    assert!(lines(&o.stderr).contains(&want));
}

#[test]
fn an_output_that_is_a_link_is_checked_itself() {
    let f = Fixture::new();
    let real = f.output("real");
    let out = f.store().join("out");
    symlink(&real, &out).unwrap();
    std::fs::write(real.join("f"), "x").unwrap();
    symlink("missing", real.join("inside")).unwrap();
    // find -P does not enter a root link: only the output link is checked.
    expect(&f.ours(&[("out", &out)], &[]), None);
    let dangling_out = f.store().join("dangling-out");
    symlink(f.store().join("nothing"), &dangling_out).unwrap();
    // A dangling output link does not exist (`-e` follows it): skipped.
    let o = f.ours(&[("out", &dangling_out)], &[]);
    expect(&o, None);
    let warn =
        format!("WARN: noBrokenSymlinks: skipping non-existent output {}", dangling_out.display());
    assert!(String::from_utf8_lossy(&o.stderr).lines().any(|l| l == warn));
}

#[test]
fn two_outputs_stop_after_the_first_broken_one() {
    let f = Fixture::new();
    let out = f.output("out");
    let dev = f.output("dev");
    scenario(&out, true, false, true);
    scenario(&dev, true, true, true);
    let o = f.ours(&[("out", &out), ("dev", &dev)], &[]);
    expect(&o, Some((1, 0, 0)));
    assert!(!String::from_utf8_lossy(&o.stderr).contains(&format!("running on {}", dev.display())));
    // Order follows $outputs.
    let o = f.ours(&[("dev", &dev), ("out", &out)], &[]);
    expect(&o, Some((1, 1, 0)));
}

#[test]
fn empty_and_missing_outputs() {
    let f = Fixture::new();
    let out = f.output("out");
    let missing = f.store().join("missing");
    expect(&f.ours(&[("out", &out), ("lib", &missing)], &[]), None);
}

#[test]
fn structured_attrs_outputs_and_opt_out() {
    let f = Fixture::new();
    let out = f.output("out");
    scenario(&out, true, false, false);
    let attrs = f.tmpdir().join(".attrs.json");
    let json = serde_json::json!({ "outputs": { "out": out } });
    std::fs::write(&attrs, json.to_string()).unwrap();
    let mut cmd = Command::new(BIN);
    f.env(&mut cmd, &[]);
    let o = cmd.env_remove("outputs").env("NIX_ATTRS_JSON_FILE", &attrs).output().unwrap();
    expect(&o, Some((1, 0, 0)));
    let json = serde_json::json!({ "outputs": { "out": out }, "dontCheckForBrokenSymlinks": true });
    std::fs::write(&attrs, json.to_string()).unwrap();
    let mut cmd = Command::new(BIN);
    f.env(&mut cmd, &[]);
    let o = cmd.env_remove("outputs").env("NIX_BUILD_TOP", f.tmpdir()).output().unwrap();
    expect(&o, None);
}

#[test]
fn logging_is_gated_by_nix_debug_and_nix_log_fd() {
    let f = Fixture::new();
    let out = f.output("out");
    scenario(&out, true, false, true);
    for (debug, want_info) in [("0", false), ("3", true), ("garbage", false)] {
        let o = f.ours(&[("out", &out)], &[("NIX_DEBUG", debug)]);
        expect(&o, Some((1, 0, 0)));
        let log = String::from_utf8_lossy(&o.stderr);
        assert_eq!(log.contains("INFO: noBrokenSymlinks: running on"), want_info, "{debug}: {log}");
    }
    // Log descriptor 3 gets the lines; stderr stays quiet.
    let mut cmd = Command::new("bash");
    f.env(&mut cmd, &[("out", &out)]);
    let o = cmd
        .arg("-c")
        .arg(format!("{BIN} 3>&1 2>/dev/null"))
        .env("NIX_LOG_FD", "3")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).ends_with(&format!("{}\n", summary(1, 0, 0))));
}

#[test]
fn json_audit_records_every_link() {
    let f = Fixture::new();
    let out = f.output("out");
    scenario(&out, true, true, true);
    let o = Command::new(BIN)
        .env("NIX_STORE", f.store())
        .args(["--format", "json"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let links = v["outputs"][0]["links"].as_array().unwrap();
    assert_eq!(links.len(), 2);
    assert_eq!(links[0]["path"], out.join("dangling").to_str().unwrap());
    assert_eq!(links[0]["target"], "dangling-target");
    assert_eq!(links[0]["resolved"], out.join("dangling-target").to_str().unwrap());
    assert_eq!(links[0]["verdict"], "dangling");
    assert_eq!(links[1]["verdict"], "reflexive");
}

#[test]
fn strict_turns_extra_findings_into_failure() {
    let f = Fixture::new();
    let out = f.output("out");
    std::fs::write(out.join("file"), "x").unwrap();
    symlink("file/", out.join("slash")).unwrap();
    let mut cmd = Command::new(BIN);
    f.env(&mut cmd, &[("out", &out)]);
    assert_eq!(cmd.output().unwrap().status.code(), Some(0));
    let mut cmd = Command::new(BIN);
    f.env(&mut cmd, &[("out", &out)]);
    let o = cmd.arg("--strict").output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr)
        .contains("ends in '/' but its target is not a directory"));
}

#[test]
fn lexical_and_kernel_resolution_mismatch_is_an_extra_finding() {
    let f = Fixture::new();
    let out = f.output("out");
    // out/lnk -> deep/a/b ; out/x -> lnk/../file: lexically out/file (exists),
    // the kernel goes to deep/a/file (also exists, but another file).
    std::fs::create_dir_all(out.join("deep/a/b")).unwrap();
    std::fs::write(out.join("file"), "top").unwrap();
    std::fs::write(out.join("deep/a/file"), "inner").unwrap();
    symlink("deep/a/b", out.join("lnk")).unwrap();
    symlink("lnk/../file", out.join("x")).unwrap();
    let mut cmd = Command::new(BIN);
    f.env(&mut cmd, &[("out", &out)]);
    let o = cmd.arg("--extra").output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(
        log.contains(&format!("but the kernel reaches {}", out.join("deep/a/file").display())),
        "{log}"
    );
}

/// A real shared object (the C library this test runs on, copied): the
/// links below point at a file the loader could load, not a stand-in.
fn real_so(dest: &Path) {
    let libc = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
    ]
    .into_iter()
    .map(Path::new)
    .find(|p| p.is_file())
    .expect("no libc.so.6 to copy");
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(libc, dest).unwrap();
}

/// Issue 30: `usr/d/dotdot2 -> libdir/../x86_64-linux-gnu/libgnutls.so.30`
/// with `usr/d/libdir -> ../lib/x86_64-linux-gnu` (a layout seen in the
/// wild). Lexically the target is `usr/d/x86_64-linux-gnu/...` (missing:
/// Nixpkgs' real hook fails the build, the oracle below), while the
/// kernel resolves `libdir` first and its `..` lands in `usr/lib`: the
/// link works (`test -e` succeeds). The compatible verdict stays
/// upstream's; `--extra` says the two disagree.
#[test]
fn a_link_upstream_calls_missing_that_the_kernel_reaches_is_an_extra_finding() {
    let f = Fixture::new();
    let out = f.output("out");
    let real = out.join("usr/lib/x86_64-linux-gnu/libgnutls.so.30");
    real_so(&real);
    std::fs::create_dir_all(out.join("usr/d")).unwrap();
    symlink("../lib/x86_64-linux-gnu", out.join("usr/d/libdir")).unwrap();
    let link = out.join("usr/d/dotdot2");
    symlink("libdir/../x86_64-linux-gnu/libgnutls.so.30", &link).unwrap();
    let lexical = out.join("usr/d/x86_64-linux-gnu/libgnutls.so.30");

    // The oracle: Nixpkgs' hook calls it missing; the kernel reaches it.
    let theirs = f.upstream(&[("out", &out)], &[]);
    let missing = format!(
        "ERROR: noBrokenSymlinks: the symlink {} points to a missing target: {}",
        link.display(),
        lexical.display()
    );
    let upstream_log = String::from_utf8_lossy(&theirs.stderr);
    assert_eq!(theirs.status.code(), Some(1), "{upstream_log}");
    assert!(upstream_log.lines().any(|l| l == missing), "{upstream_log}");
    assert!(link.exists() && !lexical.exists());
    let test_e = Command::new("test").arg("-e").arg(&link).status().unwrap();
    assert!(test_e.success());

    let mut cmd = Command::new(BIN);
    f.env(&mut cmd, &[("out", &out)]);
    let o = cmd.arg("--extra").output().unwrap();
    let log = String::from_utf8_lossy(&o.stderr);
    // Compatible: the same verdict and summary as upstream.
    assert_eq!(o.status.code(), Some(1), "{log}");
    assert!(log.lines().any(|l| l == missing), "{log}");
    assert_eq!(last_line(&o), summary(1, 0, 0));
    let extra = format!(
        "WARN: noBrokenSymlinks: extra: the symlink {} resolves lexically to the missing {} but the kernel reaches {}",
        link.display(),
        lexical.display(),
        std::fs::canonicalize(&real).unwrap().display()
    );
    assert!(log.lines().any(|l| l.starts_with(&extra)), "no line starting {extra:?}:\n{log}");
    assert!(log.contains("WARN: noBrokenSymlinks: extra: found 1 additional problems"), "{log}");

    // In JSON too, with the direction.
    let mut cmd = Command::new(BIN);
    f.env(&mut cmd, &[("out", &out)]);
    let o = cmd.args(["--extra", "--format", "json"]).output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rec = doc["outputs"][0]["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["path"] == link.to_str().unwrap())
        .unwrap_or_else(|| panic!("{doc:#}"));
    assert_eq!(rec["verdict"], "dangling", "{doc:#}");
    assert_eq!(rec["extra"][0]["kind"], "resolution-mismatch", "{doc:#}");
    assert_eq!(rec["extra"][0]["lexical_exists"], false, "{doc:#}");
}

/// The other direction on the same layout: the lexical target exists (so
/// upstream passes the link) and the kernel reaches nothing, or another
/// file than the one upstream checked.
#[test]
fn a_link_upstream_passes_that_the_kernel_misses_is_an_extra_finding() {
    let f = Fixture::new();
    let out = f.output("out");
    let lexical = out.join("usr/d/x86_64-linux-gnu/libgnutls.so.30");
    real_so(&lexical);
    std::fs::create_dir_all(out.join("usr/lib/x86_64-linux-gnu")).unwrap();
    symlink("../lib/x86_64-linux-gnu", out.join("usr/d/libdir")).unwrap();
    let link = out.join("usr/d/dotdot2");
    symlink("libdir/../x86_64-linux-gnu/libgnutls.so.30", &link).unwrap();

    // The oracle: Nixpkgs' hook passes it; the kernel finds nothing.
    let theirs = f.upstream(&[("out", &out)], &[]);
    assert_eq!(theirs.status.code(), Some(0), "{}", String::from_utf8_lossy(&theirs.stderr));
    assert!(!link.exists());

    let run = || {
        let mut cmd = Command::new(BIN);
        f.env(&mut cmd, &[("out", &out)]);
        cmd.arg("--extra").output().unwrap()
    };
    let o = run();
    let log = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{log}");
    let nothing = format!(
        "WARN: noBrokenSymlinks: extra: the symlink {} resolves lexically to {} but the kernel reaches nothing (",
        link.display(),
        lexical.display()
    );
    assert!(log.lines().any(|l| l.starts_with(&nothing)), "no line starting {nothing:?}:\n{log}");

    // Another file: the kernel's target exists too, and is not upstream's.
    let other = out.join("usr/lib/x86_64-linux-gnu/libgnutls.so.30");
    real_so(&other);
    let o = run();
    let log = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{log}");
    let another = format!(
        "WARN: noBrokenSymlinks: extra: the symlink {} resolves lexically to {} but the kernel reaches {}",
        link.display(),
        lexical.display(),
        std::fs::canonicalize(&other).unwrap().display()
    );
    assert!(log.lines().any(|l| l == another), "no line {another:?}:\n{log}");
}

// ---- Differential test against Nixpkgs' own hook in Nixpkgs' own setup.sh ----

/// A small deterministic generator (no dependency on a random crate).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Makes a random tree of folders, files and links of every kind upstream
/// distinguishes, so both implementations face the same decisions.
fn random_tree(f: &Fixture, out: &Path, seed: u64, links: usize) {
    let mut rng = Lcg(seed);
    let mut dirs = vec![out.to_path_buf()];
    let mut files = Vec::new();
    for i in 0..links / 3 + 2 {
        let parent = dirs[rng.next(dirs.len() as u64) as usize].clone();
        let p = parent.join(format!("d{i}"));
        std::fs::create_dir_all(&p).unwrap();
        dirs.push(p.clone());
        let file = p.join(format!("f{i}"));
        std::fs::write(&file, "x").unwrap();
        files.push(file);
    }
    let sibling = f.output("sibling");
    std::fs::write(sibling.join("ok"), "x").unwrap();
    for i in 0..links {
        let dir = dirs[rng.next(dirs.len() as u64) as usize].clone();
        let name: Vec<u8> = if rng.next(10) == 0 {
            format!("l{i}-\u{e9}").into_bytes()
        } else {
            format!("l{i}").into_bytes()
        };
        let mut name = name;
        if rng.next(20) == 0 {
            name.push(0xff);
        }
        let link = dir.join(OsStr::from_bytes(&name));
        let file = files[rng.next(files.len() as u64) as usize].clone();
        let rel_up = |n: usize| "../".repeat(n);
        let target: PathBuf = match rng.next(14) {
            0 => file.clone(),
            1 => file.with_file_name("missing"),
            2 => PathBuf::from(format!(
                "{}{}",
                rel_up(rng.next(4) as usize),
                file.file_name().unwrap().to_str().unwrap()
            )),
            3 => PathBuf::from("missing-rel"),
            4 => link.clone(),
            5 => PathBuf::from(link.file_name().unwrap()),
            6 => f.tmpdir().join("obj.o"),
            7 => f.tmpdir(),
            8 => PathBuf::from("/etc/nonexistent-for-test"),
            9 => PathBuf::from(format!("{}etc", rel_up(20))),
            10 => sibling.join(if rng.next(2) == 0 { "ok" } else { "gone" }),
            11 => PathBuf::from("."),
            12 => PathBuf::from(format!("./x/../{}/", file.file_name().unwrap().to_str().unwrap())),
            _ => PathBuf::from(format!("l{}", rng.next(links as u64))),
        };
        let _ = symlink(&target, &link);
    }
}

/// Log lines, sorted, without bash's `set -x` trace (setup.sh turns it on at
/// NIX_DEBUG >= 6, and the traced commands are each side's own code).
fn sorted_lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut l: Vec<Vec<u8>> = lines(bytes).into_iter().filter(|l| !l.starts_with(b"+")).collect();
    l.sort();
    l
}

#[test]
fn differential_against_upstream_hook_in_real_setup_sh_on_generated_trees() {
    let kinds = [
        "is reflexive",
        "points to a missing target: ",
        " directory: ",
        "points outside the Nix store; ignoring",
        "is irreflexive and points to a target which exists",
        "points to relative target",
        "points to absolute target",
    ];
    let mut seen = vec![false; kinds.len()];
    for seed in 1..=6u64 {
        let f = Fixture::new();
        let out = f.output("out");
        let dev = f.output("dev");
        random_tree(&f, &out, seed, 60);
        if seed % 2 == 0 {
            random_tree(&f, &dev, seed * 7, 20);
        }
        let outputs: &[(&str, &Path)] = &[("out", &out), ("dev", &dev)];
        // Every NIX_DEBUG level on two trees, the loudest on all of them.
        let levels: &[&str] =
            if seed <= 2 { &["0", "1", "2", "3", "4", "5", "6", "7"] } else { &["7"] };
        for level in levels {
            let env = [("NIX_DEBUG", *level)];
            let ours = f.ours_in_setup(outputs, &env);
            let theirs = f.upstream(outputs, &env);
            let ctx = format!("seed {seed}, NIX_DEBUG={level}");
            assert_eq!(ours.status.code(), theirs.status.code(), "{ctx}");
            assert_eq!(theirs.status.code(), Some(1), "{ctx}: every tree has broken links");
            let (a, b) = (sorted_lines(&ours.stderr), sorted_lines(&theirs.stderr));
            assert_eq!(a.last(), b.last(), "{ctx}");
            let upstream_log = String::from_utf8_lossy(&theirs.stderr);
            for (k, s) in kinds.iter().zip(seen.iter_mut()) {
                *s |= upstream_log.contains(k);
            }
            if a != b {
                let show = |v: &[Vec<u8>]| {
                    v.iter()
                        .map(|l| String::from_utf8_lossy(l).into_owned())
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                panic!("{ctx}: logs differ\n--- ours\n{}\n--- upstream\n{}", show(&a), show(&b));
            }
            // The summary is the last line either side writes.
            assert_eq!(last_line(&ours), last_line(&theirs), "{ctx}");
        }
        // Our binary alone (no setup.sh) says the same as our hook in setup.sh.
        let bare = f.ours(outputs, &[]);
        assert_eq!(bare.status.code(), Some(1), "seed {seed}");
        assert_eq!(last_line(&bare), last_line(&f.upstream(outputs, &[])), "seed {seed}");
    }
    // The generated trees must exercise every decision, or the test proves little.
    for (k, s) in kinds.iter().zip(&seen) {
        assert!(s, "no generated tree produced a '{k}' line");
    }
}

// ---- The setup hook, sourced in Nixpkgs' real setup.sh ----

fn hook_script(bin: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/hooks/no-broken-symlinks.sh"))
        .unwrap()
        .replace("@noBrokenSymlinks@", bin)
}

/// Our hook, sourced twice (two copies, as when two inputs propagate it), in
/// Nixpkgs' real setup.sh; `pre` runs before setup.sh.
fn run_hook(f: &Fixture, out: &Path, hook: &str, pre: &str) -> Output {
    let again = f.dir.path().join("hook-again.sh");
    std::fs::write(&again, hook).unwrap();
    let pre = format!("{pre}; defaultNativeBuildInputs+=' {}'", again.display());
    f.in_setup(
        &[("out", out)],
        hook,
        &pre,
        r#"echo "hooks: ${postFixupHooks[*]}"; runHook postFixup; echo survived"#,
        &[],
    )
}

#[test]
fn hook_registers_once_and_fails_the_build() {
    let f = Fixture::new();
    let out = f.output("out");
    scenario(&out, true, false, true);
    let o = run_hook(&f, &out, &hook_script(BIN), "true");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("hooks: noBrokenSymlinksInAllOutputs\n"), "{stdout}");
    assert!(!stdout.contains("survived"));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(last_line(&o), summary(1, 0, 0));
    assert!(String::from_utf8_lossy(&o.stderr)
        .contains(": skipping because the hook has been propagated more than once"));
}

#[test]
fn hook_opt_out_as_a_shell_variable_builds() {
    let f = Fixture::new();
    let out = f.output("out");
    scenario(&out, true, false, true);
    // Not exported: only the hook's own test can see it.
    let o = run_hook(&f, &out, &hook_script(BIN), "dontCheckForBrokenSymlinks=1");
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("survived"));
}

#[test]
fn hook_with_unsubstituted_placeholder_says_how_to_fix_it() {
    let f = Fixture::new();
    let out = f.output("out");
    let raw = std::fs::read_to_string(format!("{ROOT}/hooks/no-broken-symlinks.sh")).unwrap();
    let o = run_hook(&f, &out, &raw, "true");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("'@noBrokenSymlinks@' is not executable") && err.contains("nix/hooks.nix"),
        "{err}"
    );
}

// ---- Bad input ----

#[test]
fn unreadable_folder_is_named_and_strict_fails() {
    let f = Fixture::new();
    let out = f.output("out");
    std::fs::create_dir_all(out.join("secret")).unwrap();
    symlink("missing", out.join("secret/x")).unwrap();
    for p in [f.dir.path(), &f.store(), &out] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(out.join("secret"), std::fs::Permissions::from_mode(0o700)).unwrap();
    // Root reads everything: run as nobody to meet a real EACCES.
    let run = |extra: &[&str]| {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]).args(extra).arg(&out);
        cmd.env("NIX_STORE", f.store()).output().unwrap()
    };
    let o = run(&["--extra"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("cannot read {}: permission denied", out.join("secret").display())),
        "{err}"
    );
    assert_eq!(run(&["--strict"]).status.code(), Some(1));
}

#[test]
fn missing_path_argument_is_an_error_naming_it() {
    let o = Command::new(BIN).arg("/nonexistent/result").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "no-broken-symlinks: /nonexistent/result: no such file or directory\n"
    );
}

#[test]
fn bad_build_environment_is_an_error() {
    let f = Fixture::new();
    let o = Command::new(BIN)
        .env_clear()
        .env("outputs", "out dev")
        .env("out", f.store())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr)
        .contains("output 'dev' is listed in outputs but has no path"));
    let attrs = f.tmpdir().join("bad.json");
    std::fs::write(&attrs, "{not json").unwrap();
    let o = Command::new(BIN).env_clear().env("NIX_ATTRS_JSON_FILE", &attrs).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad.json are not valid"));
}

#[test]
fn very_deep_trees_and_many_links() {
    let f = Fixture::new();
    let out = f.output("out");
    // 1,000 levels: paths over 2,000 bytes; the walk holds no recursion.
    let mut deep = out.clone();
    for _ in 0..1000 {
        deep.push("d");
    }
    std::fs::create_dir_all(&deep).unwrap();
    symlink("missing", deep.join("x")).unwrap();
    for i in 0..20_000 {
        symlink(if i % 2 == 0 { "d" } else { "." }, out.join(format!("l{i}"))).unwrap();
    }
    expect(&f.ours(&[("out", &out)], &[("NIX_DEBUG", "0")]), Some((1, 0, 0)));
}
