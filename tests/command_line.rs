//! The command line a newcomer meets (issue 15): each binary's own help and
//! version; links given by hand are followed, never a silent no-op; one bad
//! argument does not stop the others; option values that would write a
//! broken RUNPATH are refused; warnings show without `-v`.
//!
//! Results are checked from outside: readelf for RUNPATHs, file bytes for
//! "untouched", exit statuses and the words on stderr.

mod common;

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output};

use common::{search_path, sh, snapshot, text};

const NBS: &str = env!("CARGO_BIN_EXE_no-broken-symlinks");
const AADR: &str = env!("CARGO_BIN_EXE_auto-add-driver-runpath");
const CEI: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

fn run(exe: &str, dir: &Path, args: &[&str]) -> Output {
    Command::new(exe)
        .args(args)
        .current_dir(dir)
        .env_remove("NIX_LOG_FD")
        .env_remove("NIX_DEBUG")
        .env_remove("NIX_STORE")
        .env_remove("outputs")
        .env_remove("out")
        .env_remove("NIX_ATTRS_JSON_FILE")
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `tree/lib/a.so` and `tree/bin/p` (plain gcc builds, no RUNPATH).
fn elf_tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("a.c"), "int a(void) { return 1; }\n").unwrap();
    std::fs::write(t.path().join("p.c"), "int main(void) { return 0; }\n").unwrap();
    sh(
        t.path(),
        "set -e; mkdir -p tree/lib tree/bin; gcc -shared -fPIC -o tree/lib/a.so a.c; gcc -o tree/bin/p p.c",
    );
    t
}

#[test]
fn each_binary_has_its_own_help_and_version() {
    let d = tempfile::tempdir().unwrap();
    let mut helps = Vec::new();
    for (exe, name, own) in [
        (NBS, "no-broken-symlinks", "dangling"),
        (AADR, "auto-add-driver-runpath", "RUNPATH"),
        (CEI, "cuda-elf-inspect", "cuobjdump"),
    ] {
        let v = run(exe, d.path(), &["--version"]);
        assert_eq!(v.status.code(), Some(0));
        assert_eq!(
            String::from_utf8_lossy(&v.stdout),
            format!("{name} {}\n", env!("CARGO_PKG_VERSION"))
        );
        let h = run(exe, d.path(), &["--help"]);
        assert_eq!(h.status.code(), Some(0), "{}", text(&h));
        let help = String::from_utf8_lossy(&h.stdout).into_owned();
        assert!(help.contains(&format!("Usage: {name} ")), "{help}");
        assert!(help.contains(own), "{name}: {help}");
        assert!(!help.contains(env!("CARGO_PKG_DESCRIPTION")), "{name} prints the crate's text");
        for section in ["Environment:", "Exit status:", "NIX_LOG_FD", "  0  ", "  1  ", "  2  "] {
            assert!(help.contains(section), "{name} --help lacks {section:?}:\n{help}");
        }
        helps.push(help);
    }
    assert!(helps[0] != helps[1] && helps[1] != helps[2] && helps[0] != helps[2]);
}

#[test]
fn links_given_by_hand_are_followed_not_silently_skipped() {
    let t = elf_tree();
    let d = t.path();
    symlink("tree", d.join("result")).unwrap();
    symlink("tree/lib/a.so", d.join("liba.so")).unwrap();
    // A link to a folder: its files are reported under the name given.
    let r = run(AADR, d, &["--check", "result"]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(out.contains("would patch result/lib/a.so: "), "{}", text(&r));
    assert!(out.contains("would patch result/bin/p: "), "{}", text(&r));
    // A link to a file: the file is patched, the link stays a link.
    let r = run(AADR, d, &["liba.so"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(std::fs::symlink_metadata(d.join("liba.so")).unwrap().file_type().is_symlink());
    assert_eq!(
        search_path(&d.join("tree/lib/a.so")),
        Some(("RUNPATH".into(), "/run/opengl-driver/lib".into()))
    );
    assert_eq!(search_path(&d.join("tree/bin/p")), None);
    let r = run(AADR, d, &["result"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert_eq!(
        search_path(&d.join("tree/bin/p")),
        Some(("RUNPATH".into(), "/run/opengl-driver/lib".into()))
    );
}

#[test]
fn one_bad_argument_does_not_stop_the_others() {
    let t = elf_tree();
    let d = t.path();
    let r = run(AADR, d, &["tree/lib/a.so", "/typo", "tree/bin/p"]);
    assert_eq!(r.status.code(), Some(2), "{}", text(&r));
    assert!(stderr(&r).contains("auto-add-driver-runpath: /typo: no such file or directory"));
    for f in ["tree/lib/a.so", "tree/bin/p"] {
        assert_eq!(
            search_path(&d.join(f)),
            Some(("RUNPATH".into(), "/run/opengl-driver/lib".into())),
            "{f}"
        );
    }
    let r = run(AADR, d, &["--format", "json", "/typo", "tree"]);
    assert_eq!(r.status.code(), Some(2), "{}", text(&r));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["argument_errors"][0], "/typo: no such file or directory");
    assert_eq!(v["report"]["summary"]["unchanged"], 2);

    std::fs::create_dir(d.join("links")).unwrap();
    symlink("gone", d.join("links/dangling")).unwrap();
    let r = run(NBS, d, &["/typo", "links"]);
    assert_eq!(r.status.code(), Some(2), "{}", text(&r));
    assert!(stderr(&r).contains("no-broken-symlinks: /typo: no such file or directory"));
    assert!(stderr(&r).contains("/links/dangling points to a missing target"), "{}", text(&r));
}

#[test]
fn driver_links_that_would_write_a_broken_runpath_are_refused() {
    let t = elf_tree();
    let d = t.path();
    let before = snapshot(&d.join("tree"));
    for (value, why) in [
        ("relative/dir", "must be an absolute path"),
        ("/a:b", "must not contain ':'"),
        ("", "empty"),
    ] {
        let r = run(AADR, d, &["--driver-link", value, "tree"]);
        assert_eq!(r.status.code(), Some(2), "{value}: {}", text(&r));
        assert!(stderr(&r).contains(why), "{value}: {}", text(&r));
    }
    assert!(before == snapshot(&d.join("tree")), "a refused run wrote something");
    let r = run(AADR, d, &["--driver-link", "/opt/driver/", "tree/lib/a.so"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert_eq!(
        search_path(&d.join("tree/lib/a.so")),
        Some(("RUNPATH".into(), "/opt/driver/lib".into()))
    );
}

#[test]
fn warnings_show_outside_a_build_without_v() {
    let t = elf_tree();
    let d = t.path();
    let data = std::fs::read(d.join("tree/lib/a.so")).unwrap();
    std::fs::write(d.join("truncated.so"), &data[..200]).unwrap();
    let r = run(AADR, d, &["--skip-unsupported", "truncated.so"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(stderr(&r).contains("WARN: addDriverRunpath: truncated.so: "), "{}", text(&r));
    // Upstream's stdout line for skipped static files stays gated on -v
    // (NIX_DEBUG >= 1 inside a build).
    sh(d, "printf 'int main(void){return 0;}' > s.c; gcc -static -o static s.c");
    let r = run(AADR, d, &["static"]);
    assert!(r.stdout.is_empty(), "{}", text(&r));
}

#[test]
fn trees_outside_the_store_are_checked_against_themselves() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    std::fs::create_dir_all(d.join("pkg/lib")).unwrap();
    std::fs::write(d.join("pkg/lib/real"), b"x").unwrap();
    symlink("real", d.join("pkg/lib/good")).unwrap();
    symlink("../lib/gone.so", d.join("pkg/lib/dangling")).unwrap();
    // NIX_STORE unset: the store is /nix/store, which this tree is not in.
    let r = run(NBS, d, &["pkg"]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    assert!(stderr(&r).contains("pkg/lib/dangling points to a missing target"), "{}", text(&r));
    // Through a `result`-style link too.
    symlink("pkg", d.join("result")).unwrap();
    let r = run(NBS, d, &["result"]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    // --extra finds a cycle inside such a tree.
    std::fs::remove_file(d.join("pkg/lib/dangling")).unwrap();
    symlink("b", d.join("pkg/lib/a")).unwrap();
    symlink("a", d.join("pkg/lib/b")).unwrap();
    let r = run(NBS, d, &["--extra", "pkg"]);
    assert!(stderr(&r).contains("is part of a symlink cycle"), "{}", text(&r));
    // A dangling link given by hand is checked, not skipped as a missing output.
    let r = run(NBS, d, &["pkg/lib/a"]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    // A clean tree passes.
    for f in ["pkg/lib/a", "pkg/lib/b"] {
        std::fs::remove_file(d.join(f)).unwrap();
    }
    let r = run(NBS, d, &["pkg"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
}

/// `make demo` (docs/demo.sh) on the binaries under test: real device code
/// from the pinned wheel, a real finding that auto-add-driver-runpath fixes,
/// the cuobjdump-style listing, a broken link found and then gone; under a
/// minute (it fetches 4.3 MB once, into .cache/demo/).
#[test]
fn the_demo_shows_the_whole_suite() {
    let bin_dir = Path::new(CEI).parent().unwrap();
    let started = std::time::Instant::now();
    let out = Command::new("bash")
        .arg(common::root().join("docs/demo.sh"))
        .arg(bin_dir)
        .env_remove("NIX_LOG_FD")
        .env_remove("NIX_DEBUG")
        .output()
        .unwrap();
    let took = started.elapsed();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let steps: Vec<&str> = stdout.split("\n\u{1b}[1m== ").collect();
    assert_eq!(steps.len(), 6, "{stdout}");
    assert!(steps[1].contains("SASS sm_50") && steps[1].contains("sm_90"), "{}", steps[1]);
    assert!(steps[1].contains("error [missing-driver-runpath]"), "{}", steps[1]);
    assert!(steps[1].contains("(exit status 1)"), "{}", steps[1]);
    // Which code covers each requested capability, nvcc's names for PTX,
    // and the unrequested architectures on one line in numeric order.
    assert!(steps[1].contains("    requested 8.6: SASS sm_86; 9.0: SASS sm_90\n"), "{}", steps[1]);
    assert!(
        steps[1].contains("; PTX compute_120") && !steps[1].contains("PTX sm_"),
        "{}",
        steps[1]
    );
    assert_eq!(steps[1].matches("[unrequested-arch]").count(), 1, "{}", steps[1]);
    assert!(steps[1].contains("not requested: SASS sm_50 sm_52 sm_60 sm_61 sm_70 sm_75 sm_80 sm_89 sm_100 sm_101 sm_120; PTX compute_120"), "{}", steps[1]);
    // NVIDIA's x86_64 library carries sm_101 (Thor, a Jetson capability
    // before CUDA 13): dead weight nobody auditing it can remove, an info.
    assert!(
        steps[1].contains("info [jetson-capability-mismatch]") && steps[1].contains("10.1"),
        "{}",
        steps[1]
    );
    // The counts count the lines shown (the unrequested ones are one).
    // libnvjpeg carries SASS up to sm_120 and compute_120 PTX: a newer GPU
    // gets code, so no missing-forward-compat-ptx (issue 30: that warning
    // said "else newer GPUs get nothing" of such files).
    assert!(steps[1].contains("1 file: 1 error, 0 warnings, 3 infos"), "{}", steps[1]);
    assert!(!steps[1].contains("[missing-forward-compat-ptx]"), "{}", steps[1]);
    assert!(steps[1].contains("auto-add-driver-runpath FILE"), "{}", steps[1]);
    assert!(steps[2].contains("Library runpath: [/run/opengl-driver/lib:$ORIGIN]"), "{}", steps[2]);
    assert!(!steps[3].contains("[missing-driver-runpath]"), "{}", steps[3]);
    assert!(steps[3].contains("(exit status 0)"), "{}", steps[3]);
    assert!(steps[4].contains("ELF file    1: libnvjpeg.so.1.sm_"), "{}", steps[4]);
    assert!(steps[5].contains("points to a missing target"), "{}", steps[5]);
    assert!(steps[5].trim_end().ends_with("(exit status 0)"), "{}", steps[5]);
    assert!(took.as_secs() < 60, "the demo took {took:?}");
}

/// One truncated file, two tools, one wording: `truncated: <table> at
/// offset <hex> runs past the end of the file (<n> bytes)`.
#[test]
fn truncation_is_worded_alike_by_both_elf_tools() {
    let t = elf_tree();
    let d = t.path();
    let data = std::fs::read(d.join("tree/lib/a.so")).unwrap();
    for keep in [30usize, 300] {
        std::fs::write(d.join("cut.so"), &data[..keep]).unwrap();
        let tail = format!(" runs past the end of the file ({keep} bytes)");
        let r = run(AADR, d, &["cut.so"]);
        assert_eq!(r.status.code(), Some(1), "{}", text(&r));
        let err = stderr(&r);
        assert!(err.contains("cut.so: truncated: ") && err.contains(&tail), "{}", text(&r));
        let r = run(CEI, d, &["cut.so"]);
        assert_eq!(r.status.code(), Some(2), "{}", text(&r));
        let out = String::from_utf8_lossy(&r.stdout);
        assert!(out.contains("cut.so: truncated: ") && out.contains(&tail), "{}", text(&r));
        assert!(out.contains("1 file could not be read"), "{}", text(&r));
    }
}

/// Options that do not apply are refused, not ignored; cuobjdump's options
/// we do not implement are named; a file that could not be examined is
/// said on stderr too (stdout may be a report file).
#[test]
fn cuda_elf_inspect_refuses_what_does_not_apply_and_says_failures_on_stderr() {
    let t = elf_tree();
    let d = t.path();
    for (args, want) in [
        (&["--headers-only", "tree"][..], "--summary"),
        // --scan applies to the audit and --summary, not to the listing.
        (&["--scan", "--list-elf", "tree"][..], "cannot be used with"),
        (&["--sysroot", "/", "--summary", "tree"][..], "cannot be used with"),
        (&["--summary", "--list-elf", "tree"][..], "cannot be used with"),
        (&["--all-fatbin", "tree"][..], "--list-elf|--list-ptx"),
        (&["--list-ptx", "--cuda-capabilities", "8.6", "tree"][..], "cannot be used with"),
        (&["--summary", "--baseline", "b.json", "tree"][..], "cannot be used with"),
        (&["-sass", "tree"][..], "cuobjdump's --dump-sass (-sass) is not implemented"),
        (
            &["--extract-elf=all", "tree"][..],
            "cuobjdump's --extract-elf (-xelf) is not implemented",
        ),
    ] {
        let r = run(CEI, d, args);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {}", text(&r));
        let err = stderr(&r);
        assert!(err.contains(want), "{args:?}: {}", text(&r));
        assert!(!err.contains("tip: to pass"), "{args:?}: {}", text(&r));
    }
    std::fs::write(
        d.join("tree/lib/cut.so"),
        &std::fs::read(d.join("tree/lib/a.so")).unwrap()[..300],
    )
    .unwrap();
    let r = run(CEI, d, &["--format", "json", "tree"]);
    assert_eq!(r.status.code(), Some(2), "{}", text(&r));
    assert!(
        stderr(&r).contains("cuda-elf-inspect: cannot examine tree/lib/cut.so: truncated: "),
        "{}",
        text(&r)
    );
}
