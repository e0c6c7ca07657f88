//! Issue 30, item 5: baselines that survive the most common CUDA pull
//! request, a version bump. A real NVIDIA library (cuRAND of the corpus,
//! `tests/tools/corpus.sh`) laid out as Nixpkgs lays out a redist output
//! (`<hash>-libcurand-<version>-lib/lib/libcurand.so.<version>` and its
//! soname link) under two releases: the baseline of the first keeps the
//! second's old findings known, and a finding the second brings fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// cuRAND 10.3.10.19 of the corpus (CUDA 12.9's), fetched once.
fn curand() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let out = Command::new("bash")
            .arg(common::root().join("tests/tools/corpus.sh"))
            .arg("curand12")
            .output()
            .expect("bash");
        assert!(
            out.status.success(),
            "tests/tools/corpus.sh curand12 failed (needs PyPI and `make tools`):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let file = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(PathBuf::from)
            .find(|f| f.ends_with("libcurand.so.10"))
            .expect("corpus.sh printed no libcurand.so.10");
        file
    })
}

/// A store-like output `<hash>-libcurand-<version>-lib` under `store`,
/// holding the real cuRAND as `lib/libcurand.so.<version>` (a hard link of
/// the corpus file where the file system allows, else a copy) and the
/// soname link to it, as Nixpkgs' redist packages install it.
fn output(store: &Path, hash: &str, version: &str) -> PathBuf {
    let out = store.join(format!("{hash}-libcurand-{version}-lib"));
    let lib = out.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    let file = lib.join(format!("libcurand.so.{version}"));
    if std::fs::hard_link(curand(), &file).is_err() {
        std::fs::copy(curand(), &file).unwrap();
    }
    std::os::unix::fs::symlink(format!("libcurand.so.{version}"), lib.join("libcurand.so.10"))
        .unwrap();
    out
}

fn run(args: &[&str]) -> Output {
    common::outside_build(&mut Command::new(BIN)).args(args).output().unwrap()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", common::text(out)))
}

/// A scratch folder beside the corpus (one file system: hard links work).
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

#[test]
fn a_version_bump_keeps_its_old_findings_known() {
    let t = scratch();
    let store = t.path().join("store");
    let old = output(&store, "0a1b2c3d4f5g6h7i8j9k0l1m2n3p4q5r", "10.3.5.147");
    let new = output(&store, "9z8y7x6w5v4s3r2q1p0n9m8l7k6j5i4h", "10.3.10.19");
    let (old, new) = (old.to_str().unwrap(), new.to_str().unwrap());

    // What the old release has: at least one error, so that a baseline
    // that fails to match shows as exit 1.
    let first = run(&["--format", "json", old]);
    assert_eq!(first.status.code(), Some(1), "{}", common::text(&first));
    let report = json(&first);
    let findings = report["findings"].as_array().unwrap().len();
    assert!(findings > 0 && report["summary"]["errors"].as_u64() > Some(0), "{report:#}");
    let report_file = t.path().join("report.json");
    std::fs::write(&report_file, &first.stdout).unwrap();
    let base = t.path().join("baseline.json");
    let written = run(&["--write-baseline", base.to_str().unwrap(), old]);
    assert_eq!(written.status.code(), Some(0), "{}", common::text(&written));

    // Both kinds of baseline (the written one, and the old release's JSON
    // report, whose locations still carry its version) keep the bumped
    // release's findings known: exit 0, nothing new.
    for b in [&base, &report_file] {
        let out = run(&["--format", "json", "--baseline", b.to_str().unwrap(), new]);
        let doc = json(&out);
        assert_eq!(out.status.code(), Some(0), "{} against {}: {doc:#}", new, b.display());
        assert_eq!(doc["findings"], Value::Array(Vec::new()), "{doc:#}");
        assert_eq!(doc["summary"]["baselined"].as_u64(), Some(findings as u64), "{doc:#}");
    }
}

/// The bump brings a new library with the same problem: a finding of the
/// same check at a new place is new, and fails.
#[test]
fn a_finding_the_bump_brings_still_fails() {
    let t = scratch();
    let store = t.path().join("store");
    let old = output(&store, "0a1b2c3d4f5g6h7i8j9k0l1m2n3p4q5r", "10.3.5.147");
    let new = output(&store, "9z8y7x6w5v4s3r2q1p0n9m8l7k6j5i4h", "10.3.10.19");
    // A library that needs libcuda.so.1 and has no driver RUNPATH.
    let d = t.path();
    std::fs::create_dir_all(d.join("stubs")).unwrap();
    std::fs::write(d.join("stub.c"), "int cuInit(unsigned f) { return f ? 1 : 0; }\n").unwrap();
    std::fs::write(d.join("new.c"), "int cuInit(unsigned);\nint f(void) { return cuInit(0); }\n")
        .unwrap();
    let added = new.join("lib/libcurand_added.so.10.3.10.19");
    common::sh(d, "gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o stubs/libcuda.so stub.c");
    common::sh(
        d,
        &format!(
            "gcc -shared -fPIC -Wl,-soname,libcurand_added.so.10 -o {} new.c -Lstubs -lcuda",
            added.display()
        ),
    );
    let base = t.path().join("baseline.json");
    let written = run(&["--write-baseline", base.to_str().unwrap(), old.to_str().unwrap()]);
    assert_eq!(written.status.code(), Some(0), "{}", common::text(&written));

    let out =
        run(&["--format", "json", "--baseline", base.to_str().unwrap(), new.to_str().unwrap()]);
    let doc = json(&out);
    assert_eq!(out.status.code(), Some(1), "{doc:#}");
    let findings = doc["findings"].as_array().unwrap();
    assert!(!findings.is_empty(), "{doc:#}");
    // Only the added library's findings are new; cuRAND's are known.
    for f in findings {
        assert_eq!(f["path"].as_str(), added.to_str(), "{doc:#}");
    }
    assert!(
        findings.iter().any(|f| f["check"] == "missing-driver-runpath"),
        "the added library's missing driver RUNPATH is not reported: {doc:#}"
    );
    assert!(doc["summary"]["baselined"].as_u64() > Some(0), "{doc:#}");
}

/// Another output of the same package is not the same place: a baseline of
/// `-lib` does not hide findings of `-static` (the output is kept, only the
/// version is left out).
#[test]
fn another_output_is_another_place() {
    let t = scratch();
    let store = t.path().join("store");
    let lib = output(&store, "0a1b2c3d4f5g6h7i8j9k0l1m2n3p4q5r", "10.3.5.147");
    let other = store.join("9z8y7x6w5v4s3r2q1p0n9m8l7k6j5i4h-libcurand-10.3.5.147-static");
    std::fs::rename(output(&store, "9z8y7x6w5v4s3r2q1p0n9m8l7k6j5i4h", "10.3.5.147"), &other)
        .unwrap();
    let base = t.path().join("baseline.json");
    let written = run(&["--write-baseline", base.to_str().unwrap(), lib.to_str().unwrap()]);
    assert_eq!(written.status.code(), Some(0), "{}", common::text(&written));
    let out =
        run(&["--format", "json", "--baseline", base.to_str().unwrap(), other.to_str().unwrap()]);
    let doc = json(&out);
    assert_eq!(out.status.code(), Some(1), "{doc:#}");
    assert_eq!(doc["summary"]["baselined"].as_u64(), Some(0), "{doc:#}");
}

/// The version is cut where Nix cuts it: `builtins.parseDrvName` of Nix
/// itself (`.tools/nix`) is the oracle for the names a store holds.
#[test]
fn names_split_where_parse_drv_name_splits_them() {
    let names = [
        "libcufft-11.4.1.4-lib",
        "libcufft-11.2.1.3",
        "cuda_cudart-12.8.90-static",
        "python3.12-torch-2.5.1",
        "foo-unstable-2024-01-01",
        "nix-0.12pre12876",
        "glibc-2.40-66-bin",
        "hello",
        "foo-",
        "a-_b",
        "x-.1",
        "gcc-wrapper-13.3.0",
        "cudnn-9.8.0.87-lib",
    ];
    let list: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    let expr = format!(
        "builtins.concatStringsSep \"\\n\" (map (n: let p = builtins.parseDrvName n; in \
         \"${{p.name}}\\t${{p.version}}\") [ {} ])",
        list.join(" ")
    );
    let dir = tempfile::tempdir().unwrap();
    let out = common::nix(dir.path(), "nix-instantiate", &["--eval", "--raw", "--expr", &expr]);
    let text = String::from_utf8(out).unwrap();
    let nix: Vec<&str> = text.lines().collect();
    assert_eq!(nix.len(), names.len(), "{text}");
    for (name, theirs) in names.iter().zip(nix) {
        let (pname, version) = nix_cuda_hooks::store::name::split(name);
        assert_eq!(format!("{pname}\t{}", version.unwrap_or("")), theirs, "{name}");
    }
}
