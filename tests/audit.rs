//! End-to-end tests of `cuda-elf-inspect`'s audit: each check fires on a tree
//! built here from real parts (gcc programs against a stub libcuda.so, nvcc
//! 13.5 builds from `fixtures/cuda/recipes.txt`) and stays quiet on a clean
//! counterpart; every output format; the baseline ratchet; bad input.
//!
//! Expectations come from the checks' definitions (issue 5,
//! docs/cuda-elf-inspect.md), never from our own output.

mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

fn gcc(dir: &Path, args: &[&str]) {
    let out = Command::new("gcc").current_dir(dir).args(args).output().expect("gcc");
    assert!(out.status.success(), "gcc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A tree with a stub libcuda.so.1 in `cuda/lib/stubs` and C sources.
fn c_tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    std::fs::create_dir_all(d.join("cuda/lib/stubs")).unwrap();
    std::fs::create_dir_all(d.join("out/bin")).unwrap();
    std::fs::create_dir_all(d.join("out/lib")).unwrap();
    std::fs::write(d.join("stub.c"), "int cuInit(unsigned f) { return f ? 1 : 0; }\n").unwrap();
    gcc(
        d,
        &[
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcuda.so.1",
            "-o",
            "cuda/lib/stubs/libcuda.so",
            "stub.c",
        ],
    );
    std::fs::write(
        d.join("main.c"),
        "int cuInit(unsigned);\nint main(void) { return cuInit(0); }\n",
    )
    .unwrap();
    std::fs::write(d.join("foo.c"), "int foo(void) { return 7; }\n").unwrap();
    std::fs::write(d.join("usefoo.c"), "int foo(void);\nint main(void) { return foo() - 7; }\n")
        .unwrap();
    t
}

/// Links `out/bin/NAME` from main.c against the stub with extra linker args.
fn cuda_prog(t: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let out = format!("out/bin/{name}");
    let mut args = vec!["-o", &out, "main.c", "-Lcuda/lib/stubs", "-lcuda"];
    args.extend_from_slice(extra);
    gcc(t, &args);
    t.join(out)
}

fn run(args: &[&str], paths: &[&Path]) -> Output {
    Command::new(BIN).env_remove("NIX_LOG_FD").args(args).args(paths).output().unwrap()
}

fn json(args: &[&str], paths: &[&Path]) -> (i32, Value) {
    let mut a = vec!["--format", "json"];
    a.extend_from_slice(args);
    let out = run(&a, paths);
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), v)
}

/// The check ids found for one file.
fn checks_of(report: &Value, file: &Path) -> Vec<String> {
    let mut v: Vec<String> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"].as_str() == file.to_str())
        .map(|f| f["check"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn runpath_checks_fire_on_bad_files_and_not_on_clean_ones() {
    let t = c_tree();
    let d = t.path();
    let stubs = d.join("cuda/lib/stubs");
    let stub_rp = format!("-Wl,-rpath,{}", stubs.display());
    let stub = cuda_prog(d, "stub", &[&stub_rp]);
    let clean = cuda_prog(d, "clean", &["-Wl,-rpath,/run/opengl-driver/lib"]);
    let none = cuda_prog(d, "none", &[]);
    let tmp = cuda_prog(d, "tmp", &["-Wl,-rpath,/run/opengl-driver/lib:/build/source/lib"]);
    let empty = cuda_prog(d, "empty", &["-Wl,-rpath,/run/opengl-driver/lib::/x"]);
    let rpath =
        cuda_prog(d, "rpath", &["-Wl,--disable-new-dtags", "-Wl,-rpath,/run/opengl-driver/lib"]);
    // The loader would find the stub libcuda for `stub`, and nothing needs it elsewhere.
    let (code, r) = json(&["--system-lib-dirs"], &[&d.join("out")]);
    assert_eq!(code, 1);
    assert_eq!(checks_of(&r, &stub), ["libcuda-stub-in-runpath", "missing-driver-runpath"]);
    assert!(checks_of(&r, &clean).is_empty(), "{:?}", checks_of(&r, &clean));
    assert_eq!(checks_of(&r, &none), ["missing-driver-runpath"]);
    assert_eq!(checks_of(&r, &tmp), ["tmpdir-in-runpath"]);
    assert_eq!(checks_of(&r, &empty), ["empty-runpath-entry"]);
    assert_eq!(checks_of(&r, &rpath), ["rpath-instead-of-runpath"]);
    assert_eq!(r["summary"]["files"], 6);
}

#[test]
fn unresolved_needed_follows_the_loaders_rules() {
    let t = c_tree();
    let d = t.path();
    gcc(d, &["-shared", "-fPIC", "-o", "out/lib/libfoo.so", "foo.c"]);
    gcc(
        d,
        &["-o", "out/bin/origin", "usefoo.c", "-Lout/lib", "-lfoo", "-Wl,-rpath,$ORIGIN/../lib"],
    );
    gcc(
        d,
        &["-o", "out/bin/lost", "usefoo.c", "-Lout/lib", "-lfoo", "-Wl,-rpath,/nonexistent/lib"],
    );
    // The $ORIGIN program really runs: the oracle for "resolved".
    let ran = Command::new(d.join("out/bin/origin")).status().unwrap();
    assert!(ran.success());
    let lost = Command::new(d.join("out/bin/lost")).output().unwrap();
    assert!(!lost.status.success(), "the loader found libfoo anyway");
    let (code, r) = json(&[], &[&d.join("out/bin")]);
    assert_eq!(code, 1);
    assert!(checks_of(&r, &d.join("out/bin/origin")).is_empty());
    assert_eq!(checks_of(&r, &d.join("out/bin/lost")), ["unresolved-needed"]);
    let f = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "unresolved-needed")
        .unwrap();
    assert_eq!(f["details"]["library"], "libfoo.so");
    assert_eq!(f["severity"], "error");
}

#[test]
fn mixed_cudart_majors_in_one_tree() {
    let t = c_tree();
    let d = t.path();
    for major in ["12", "13"] {
        let soname = format!("-Wl,-soname,libcudart.so.{major}");
        gcc(
            d,
            &["-shared", "-fPIC", &soname, "-o", &format!("out/lib/libcudart.so.{major}"), "foo.c"],
        );
        std::fs::copy(
            d.join(format!("out/lib/libcudart.so.{major}")),
            d.join("out/lib/libcudart.so"),
        )
        .unwrap();
        gcc(
            d,
            &[
                "-shared",
                "-fPIC",
                "-o",
                &format!("out/lib/libuser{major}.so"),
                "foo.c",
                "-Lout/lib",
                "-Wl,--no-as-needed",
                "-lcudart",
                "-Wl,-rpath,$ORIGIN",
            ],
        );
    }
    std::fs::remove_file(d.join("out/lib/libcudart.so")).unwrap();
    let (_, r) = json(&[], &[&d.join("out/lib")]);
    assert_eq!(checks_of(&r, &d.join("out/lib/libuser12.so")), ["mixed-cudart-versions"]);
    assert_eq!(checks_of(&r, &d.join("out/lib/libuser13.so")), ["mixed-cudart-versions"]);
    // One major only: quiet.
    let (_, r) = json(&[], &[&d.join("out/lib/libuser13.so")]);
    assert!(checks_of(&r, &d.join("out/lib/libuser13.so")).is_empty());
}

fn fixture(name: &str, file: &str) -> PathBuf {
    let all = common::fixtures::build_all();
    let dir =
        &all.iter().find(|(v, _)| v.name == name).unwrap_or_else(|| panic!("no variant {name}")).1;
    dir.join(file)
}

/// Capability checks on one nvcc-built file: the ids found (RUNPATH checks aside).
fn cap_checks(file: &Path, args: &[&str]) -> Vec<String> {
    let (_, r) = json(args, &[file]);
    checks_of(&r, file)
        .into_iter()
        .filter(|c| {
            !["missing-driver-runpath", "cudart-static", "unresolved-needed"].contains(&c.as_str())
        })
        .collect()
}

#[test]
fn capability_coverage_of_nvcc_builds() {
    let sm80 = fixture("sass-only", "sass_only");
    let ptx80 = fixture("ptx-only", "ptx_only");
    let ok = fixture("audit-86-90-ptx", "fwd_ok");
    let no_ptx = fixture("audit-86-90-sass", "fwd_missing");
    let sm90a = fixture("sm90a", "sm90a");
    let sm100f = fixture("sm100f", "sm100f");
    let nofwd = ["--no-forward-compat"];
    // sm_80 SASS only: nothing for 9.0 (another major); fine on 8.0 and 8.6.
    assert_eq!(
        cap_checks(&sm80, &["--cuda-capabilities", "9.0", "--no-forward-compat"]),
        ["no-code-for-capability", "unrequested-arch"]
    );
    assert!(
        cap_checks(&sm80, &["--cuda-capabilities", "8.0;8.6", "--no-forward-compat"]).is_empty()
    );
    // compute_80 PTX only: JIT everywhere at or above 8.0.
    assert_eq!(
        cap_checks(&ptx80, &[&["--cuda-capabilities", "9.0"][..], &nofwd].concat()),
        ["ptx-only-capability", "unrequested-arch"]
    );
    // sm_86 + sm_90 + compute_90, asked as Nixpkgs would build it: clean.
    assert!(cap_checks(&ok, &["--cuda-capabilities", "8.6 9.0"]).is_empty());
    // ... a newer GPU runs it through the PTX only.
    assert_eq!(
        cap_checks(&ok, &["--cuda-capabilities", "10.0", "--no-forward-compat"]),
        ["ptx-only-capability", "unrequested-arch", "unrequested-arch", "unrequested-arch"]
    );
    // Forward compatibility wants PTX for the last capability.
    assert_eq!(
        cap_checks(&no_ptx, &["--cuda-capabilities", "8.6;9.0"]),
        ["missing-forward-compat-ptx"]
    );
    assert!(
        cap_checks(&no_ptx, &["--cuda-capabilities", "8.6;9.0", "--no-forward-compat"]).is_empty()
    );
    assert!(cap_checks(&no_ptx, &["--cuda-capabilities", "86;90+PTX", "--no-forward-compat"])
        .contains(&"missing-forward-compat-ptx".to_string()));
    // Only 9.0 asked: the sm_86 code is unrequested.
    assert_eq!(
        cap_checks(&no_ptx, &["--cuda-capabilities", "9.0", "--no-forward-compat"]),
        ["unrequested-arch"]
    );
    // sm_90a runs on exactly 9.0.
    assert!(cap_checks(&sm90a, &["--cuda-capabilities", "9.0a"]).is_empty());
    assert_eq!(
        cap_checks(&sm90a, &["--cuda-capabilities", "10.0", "--no-forward-compat"]),
        ["no-code-for-capability", "unrequested-arch", "unrequested-arch"]
    );
    // sm_100f: the family (10.0, 10.3), not 12.0.
    assert!(!cap_checks(&sm100f, &["--cuda-capabilities", "10.3", "--no-forward-compat"])
        .contains(&"no-code-for-capability".to_string()));
    assert!(cap_checks(&sm100f, &["--cuda-capabilities", "12.0", "--no-forward-compat"])
        .contains(&"no-code-for-capability".to_string()));
}

#[test]
fn cudart_static_and_shared_and_link_stubs() {
    let stat = fixture("sass-only", "sass_only");
    let shared = fixture("executable-shared-cudart", "exe_shared");
    let phantom = fixture("phantom-stub", "phantom");
    let (_, r) = json(&[], &[&stat]);
    assert!(checks_of(&r, &stat).contains(&"cudart-static".to_string()));
    assert!(checks_of(&r, &stat).contains(&"missing-driver-runpath".to_string()));
    let (_, r) = json(&[], &[&shared]);
    assert!(!checks_of(&r, &shared).contains(&"cudart-static".to_string()));
    assert_eq!(
        r["files"][0]["dynamic"]["needed"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n.as_str().unwrap().starts_with("libcudart.so.13"))
            .count(),
        1
    );
    // The link step's phantom sm_75 stub is no code: asking for 7.5 finds nothing.
    let (_, r) = json(&["--cuda-capabilities", "7.5", "--no-forward-compat"], &[&phantom]);
    assert_eq!(r["files"][0]["device"]["link_stub_only"], serde_json::json!(["sm_75"]));
    assert!(checks_of(&r, &phantom).contains(&"no-code-for-capability".to_string()));
}

#[test]
fn environment_fallbacks_for_capabilities() {
    let sm80 = fixture("sass-only", "sass_only");
    for (var, value) in
        [("cudaCapabilities", "9.0"), ("CUDAARCHS", "90"), ("TORCH_CUDA_ARCH_LIST", "9.0+PTX")]
    {
        let out = Command::new(BIN)
            .env_remove("NIX_LOG_FD")
            .env(var, value)
            .args(["--format", "json"])
            .arg(&sm80)
            .output()
            .unwrap();
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(checks_of(&r, &sm80).contains(&"no-code-for-capability".to_string()), "{var}");
    }
}

// ---- Output formats ----

fn small_tree() -> (tempfile::TempDir, PathBuf) {
    let t = c_tree();
    let stub_rp = format!("-Wl,-rpath,{}", t.path().join("cuda/lib/stubs").display());
    let p = cuda_prog(t.path(), "prog", &[&stub_rp]);
    (t, p)
}

#[test]
fn sarif_validates_against_the_official_schema() {
    let (_t, prog) = small_tree();
    let out = run(&["--format", "sarif", "--system-lib-dirs"], &[&prog]);
    assert_eq!(out.status.code(), Some(1));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.sarif");
    std::fs::write(&file, &out.stdout).unwrap();
    let root = common::root();
    let python = root.join(".tools/venv/bin/python3");
    let schema = root.join(".tools/sarif-schema-2.1.0.json");
    assert!(schema.is_file(), "run `make tools`: {} is missing", schema.display());
    let check = Command::new(python)
        .args(["-c", "import json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))); print('valid')"])
        .arg(&file)
        .arg(&schema)
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = v["runs"][0]["results"].as_array().unwrap();
    let ids: Vec<&str> = results.iter().map(|r| r["ruleId"].as_str().unwrap()).collect();
    assert_eq!(ids, ["libcuda-stub-in-runpath", "missing-driver-runpath"]);
    let rules = v["runs"][0]["tool"]["driver"]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 2);
    assert_eq!(results[0]["level"], "error");
    assert!(results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        .as_str()
        .unwrap()
        .starts_with("file:///"));
}

#[test]
fn github_annotations_respect_the_per_step_limit() {
    let t = c_tree();
    let d = t.path();
    for i in 0..12 {
        cuda_prog(d, &format!("p{i:02}"), &[]);
    }
    let out = run(&["--format", "github"], &[&d.join("out")]);
    let text = String::from_utf8(out.stdout).unwrap();
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("::error ")).collect();
    assert_eq!(errors.len(), 10, "{text}");
    let first =
        format!("::error file={},title=missing-driver-runpath::", d.join("out/bin/p00").display());
    assert!(errors[0].starts_with(&first), "{}", errors[0]);
    assert!(
        text.contains("::notice title=cuda-elf-inspect::2 more findings not annotated"),
        "{text}"
    );
}

#[test]
fn text_groups_per_file_and_inside_a_build_logs_like_setup_sh() {
    let (t, prog) = small_tree();
    let out = run(&["--system-lib-dirs", "--color", "never"], &[&prog]);
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(prog.to_str().unwrap()));
    assert!(lines.next().unwrap().starts_with("  error [libcuda-stub-in-runpath] "));
    assert!(text.ends_with("1 file: 2 errors, 0 warnings, 0 infos\n"), "{text}");
    // In a build: outputs from the environment, lines on NIX_LOG_FD, caller cudaElfInspect.
    let out = Command::new(BIN)
        .env("NIX_LOG_FD", "2")
        .env("NIX_DEBUG", "0")
        .env("outputs", "out")
        .env("out", t.path().join("out"))
        .arg("--system-lib-dirs")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let log = String::from_utf8(out.stderr).unwrap();
    let want = format!("ERROR: cudaElfInspect: {}: [missing-driver-runpath] ", prog.display());
    assert!(log.lines().any(|l| l.starts_with(&want)), "{log}");
    assert!(
        log.ends_with("ERROR: cudaElfInspect: found 2 errors, 0 warnings and 0 infos in 1 file\n"),
        "{log}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn baseline_ratchet_round_trip() {
    let (t, prog) = small_tree();
    let base = t.path().join("baseline.json");
    let out = run(&["--system-lib-dirs", "--write-baseline", base.to_str().unwrap()], &[&prog]);
    assert_eq!(out.status.code(), Some(0));
    let out = run(&["--system-lib-dirs", "--baseline", base.to_str().unwrap()], &[&prog]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("(2 known findings hidden by the baseline)")
    );
    // A new problem fails, and only it is reported.
    let other = cuda_prog(t.path(), "other", &[]);
    let (code, r) =
        json(&["--system-lib-dirs", "--baseline", base.to_str().unwrap()], &[&prog, &other]);
    assert_eq!(code, 1);
    assert_eq!(r["findings"].as_array().unwrap().len(), 1);
    assert_eq!(r["findings"][0]["path"], other.to_str().unwrap());
}

// ---- Inputs and bad input ----

#[test]
fn result_links_stdin_lists_and_broken_links() {
    let (t, prog) = small_tree();
    let result = t.path().join("result");
    symlink(t.path().join("out"), &result).unwrap();
    let (code, r) = json(&["--system-lib-dirs"], &[&result]);
    assert_eq!(code, 1);
    assert_eq!(r["files"][0]["path"], result.join("bin/prog").to_str().unwrap());
    let mut child = Command::new(BIN)
        .args(["--format", "json", "--system-lib-dirs", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    writeln!(child.stdin.take().unwrap(), "{}", prog.display()).unwrap();
    let out = child.wait_with_output().unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["summary"]["files"], 1);
    let broken = t.path().join("result-2");
    symlink(t.path().join("gone"), &broken).unwrap();
    let out = run(&[], &[&broken]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains("result-2: broken symbolic link: no such file or directory"));
}

#[test]
fn malformed_capability_lists_are_errors_with_nixpkgs_wording() {
    for (list, want) in [
        ("8.6;banana", "cannot parse CUDA capability 'banana'"),
        ("8.8", "Requested unrecognized CUDA capabilities: [\"8.8\"]"),
    ] {
        let out = run(&["--cuda-capabilities", list], &[Path::new("/bin/sh")]);
        assert_eq!(out.status.code(), Some(2), "{list}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(want),
            "{list}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out =
        run(&["--cuda-capabilities", "7.0", "--cuda-version", "13.0"], &[Path::new("/bin/sh")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("Requested CUDA capabilities which are too old for CUDA 13.0: [\"7.0\"]"));
}

#[test]
fn corrupt_and_unreadable_files_are_named_and_exit_2() {
    let t = tempfile::tempdir().unwrap();
    let bad = t.path().join("libbad.so");
    let mut bytes = std::fs::read("/bin/sh").unwrap();
    bytes.truncate(100);
    std::fs::write(&bad, &bytes).unwrap();
    let out = run(&[], &[&bad]);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("failed: {}: ", bad.display())), "{text}");
    // Reached through a `result`-style link, as a folder or as a file, it is
    // named as given, not by the real path it was read under.
    let real = t.path().join("store-out");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("libbad.so"), &bytes).unwrap();
    symlink(&real, t.path().join("result")).unwrap();
    let out = Command::new(BIN)
        .current_dir(t.path())
        .env_remove("NIX_LOG_FD")
        .args(["--color", "never", "result", "result/libbad.so"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    let failed: Vec<&str> = text.lines().filter(|l| l.starts_with("failed: ")).collect();
    assert_eq!(failed.len(), 2, "{text}");
    assert!(failed.iter().all(|l| l.starts_with("failed: result/libbad.so: ")), "{text}");
    // Unreadable (as nobody; root reads everything).
    let secret = t.path().join("secret.so");
    std::fs::copy("/bin/sh", &secret).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN, "--color", "never"])
        .arg(&secret)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains(&format!("{}: permission denied", secret.display())));
}

#[test]
fn baselines_match_across_store_paths_of_a_rebuild() {
    // The same package built twice (a PR and its base) lands in two store
    // paths; a baseline from one must hide the same findings in the other.
    let (t, _prog) = small_tree();
    let a = t.path().join("0c7xgv7n2pn1ljvm3xrjjk2x2bbvyq1f-pkg-1.0");
    let b = t.path().join("1d8yhw8p3qp2mkwn4ysrkl3y3ccwzr2g-pkg-1.0");
    for dir in [&a, &b] {
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::copy(t.path().join("out/bin/prog"), dir.join("bin/prog")).unwrap();
    }
    let report = t.path().join("base.json");
    let out = run(&["--format", "json", "--system-lib-dirs"], &[&a]);
    assert_eq!(out.status.code(), Some(1));
    std::fs::write(&report, &out.stdout).unwrap();
    // An earlier JSON report serves as the baseline.
    let out = run(&["--system-lib-dirs", "--baseline", report.to_str().unwrap()], &[&b]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let (_, r) = json(&["--system-lib-dirs"], &[&b]);
    assert_eq!(r["findings"][0]["location"], "pkg-1.0/bin/prog");
}

// ---- Snapshots ----

/// The snapshot tree: five files, each with known defects (see
/// tests/snapshots/README.md for the review of every expected line).
fn snapshot_tree() -> tempfile::TempDir {
    let t = c_tree();
    let d = t.path();
    let stubs = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-cuda_cudart-12.8.90-stubs/lib/stubs";
    cuda_prog(d, "prog", &[&format!("-Wl,-rpath,{stubs}")]);
    cuda_prog(d, "tool", &["-Wl,-rpath,/run/opengl-driver/lib:/build/source/build"]);
    gcc(
        d,
        &[
            "-shared",
            "-fPIC",
            "-o",
            "out/lib/libfoo.so",
            "foo.c",
            "-Wl,--disable-new-dtags,-rpath,$ORIGIN",
        ],
    );
    gcc(
        d,
        &["-o", "out/bin/usefoo", "usefoo.c", "-Lout/lib", "-lfoo", "-Wl,-rpath,$ORIGIN/../lib:"],
    );
    std::fs::copy(fixture("sass-only", "sass_only"), d.join("out/bin/vadd")).unwrap();
    t
}

fn snapshot(name: &str) -> String {
    let path = common::root().join("tests/snapshots").join(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .replace("{version}", env!("CARGO_PKG_VERSION"))
}

fn audit_snapshot_tree(dir: &Path, format: &str) -> Output {
    Command::new(BIN)
        .current_dir(dir)
        .env_remove("NIX_LOG_FD")
        .args(["--format", format, "--color", "never", "--cuda-capabilities", "8.6;9.0", "out"])
        .output()
        .unwrap()
}

/// The findings a maintainer expects of the snapshot tree, from how each file
/// was built (not from our output).
const SNAPSHOT_FINDINGS: &[(&str, &str)] = &[
    ("out/bin/prog", "libcuda-stub-in-runpath"),
    ("out/bin/prog", "missing-driver-runpath"),
    ("out/bin/tool", "tmpdir-in-runpath"),
    ("out/bin/usefoo", "empty-runpath-entry"),
    // sm_80 SASS with the static runtime, asked for 8.6 and 9.0: 8.6 runs
    // sm_80 (same major), 9.0 gets nothing, no PTX for forward compatibility.
    ("out/bin/vadd", "cudart-static"),
    ("out/bin/vadd", "missing-driver-runpath"),
    ("out/bin/vadd", "missing-forward-compat-ptx"),
    ("out/bin/vadd", "no-code-for-capability"),
    ("out/bin/vadd", "unrequested-arch"),
    ("out/lib/libfoo.so", "rpath-instead-of-runpath"),
];

/// Text, JSON, SARIF and GitHub output of one tree, each against its
/// reviewed snapshot; the findings against the list above, and the facts the
/// JSON reports against readelf and cuobjdump.
#[test]
fn snapshots_of_every_output_format() {
    let t = snapshot_tree();
    let d = t.path();
    let mut differ = Vec::new();
    for (format, file) in [
        ("text", "audit.txt"),
        ("github", "audit.github"),
        ("json", "audit.json"),
        ("sarif", "audit.sarif"),
    ] {
        let out = audit_snapshot_tree(d, format);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{format}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stderr.is_empty(), "{format}: {}", String::from_utf8_lossy(&out.stderr));
        let want = snapshot(file);
        let got = String::from_utf8(out.stdout).unwrap();
        let same = if format == "json" || format == "sarif" {
            // File sizes depend on the host compiler, and device code bytes on
            // where the checkout lies (nvlink writes its `-L` folders into each
            // cubin's tool note): the snapshot has neither; the bytes are
            // checked against cuobjdump's extracted cubins below.
            let mut v: Value = serde_json::from_str(&got).unwrap();
            if let Some(files) = v.get_mut("files").and_then(Value::as_array_mut) {
                for f in files {
                    f.as_object_mut().unwrap().remove("size");
                    if let Some(device) = f.get_mut("device").and_then(Value::as_object_mut) {
                        device.remove("bytes");
                    }
                }
            }
            v == serde_json::from_str::<Value>(&want).unwrap()
        } else {
            got == want
        };
        if !same {
            differ.push(format!(
                "{format} differs from tests/snapshots/{file}:\n{}",
                common::cuobjdump::line_diff(want.as_bytes(), got.as_bytes())
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));

    let (_, r) = json(&["--cuda-capabilities", "8.6;9.0"], &[&d.join("out")]);
    let mut found: Vec<(String, String)> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let p = f["path"].as_str().unwrap().strip_prefix(d.to_str().unwrap()).unwrap();
            (p.trim_start_matches('/').to_string(), f["check"].as_str().unwrap().to_string())
        })
        .collect();
    found.sort();
    let want: Vec<(String, String)> =
        SNAPSHOT_FINDINGS.iter().map(|(p, c)| (p.to_string(), c.to_string())).collect();
    assert_eq!(found, want);

    // The facts, against the tools every maintainer already trusts.
    let readelf = |args: &str, f: &Path| {
        let out = Command::new("readelf").args(args.split(' ')).arg(f).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let bracketed = |line: &str| line.rsplit_once('[').unwrap().1.trim_end_matches(']').to_string();
    for f in r["files"].as_array().unwrap() {
        let path = Path::new(f["path"].as_str().unwrap());
        let dynamic = readelf("-dW", path);
        let needed: Vec<String> =
            dynamic.lines().filter(|l| l.contains("(NEEDED)")).map(bracketed).collect();
        assert_eq!(f["dynamic"]["needed"], serde_json::json!(needed), "{}", path.display());
        for (tag, key) in [("(RUNPATH)", "runpath"), ("(RPATH)", "rpath")] {
            let value = dynamic.lines().find(|l| l.contains(tag)).map(bracketed);
            assert_eq!(f["dynamic"][key].as_str(), value.as_deref(), "{}: {key}", path.display());
        }
        let interp = readelf("-lW", path)
            .lines()
            .find_map(|l| l.split_once("[Requesting program interpreter: "))
            .map(|(_, rest)| rest.trim_end_matches(']').to_string());
        assert_eq!(f["dynamic"]["interpreter"].as_str(), interp.as_deref(), "{}", path.display());
    }
    let vadd = r["files"].as_array().unwrap().iter().find(|f| f["device"].is_object()).unwrap();
    let listed = common::run_in(d, &common::tool("cuobjdump"), &["--list-elf", "out/bin/vadd"]);
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert_eq!(vadd["device"]["cubins"], listed.lines().count());
    assert!(listed.lines().all(|l| l.ends_with(".sm_80.cubin")), "{listed}");
    assert_eq!(vadd["device"]["sass"], serde_json::json!(["sm_80"]));
    // Device code bytes: the sizes of the cubins cuobjdump extracts.
    let x = tempfile::tempdir().unwrap();
    let vadd_path = d.join("out/bin/vadd");
    let out = common::run_in(
        x.path(),
        &common::tool("cuobjdump"),
        &["-xelf", "all", vadd_path.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let extracted: u64 =
        std::fs::read_dir(x.path()).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    assert!(extracted > 0);
    assert_eq!(vadd["device"]["bytes"]["sm_80"], extracted);
}

/// `--output FORMAT=FILE`: one audit writes every report, each the same
/// bytes as that format on stdout of its own run; an existing file keeps
/// its mode and is replaced whole; a file that cannot be written is an
/// error naming it; with --write-baseline (which prints no report) the
/// option is refused rather than ignored.
#[test]
fn output_writes_every_report_of_one_audit() {
    use std::os::unix::fs::PermissionsExt;
    let t = snapshot_tree();
    let d = t.path();
    let reports = d.join("reports");
    std::fs::create_dir(&reports).unwrap();
    let json_file = reports.join("r.json");
    std::fs::write(&json_file, "old").unwrap();
    std::fs::set_permissions(&json_file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let files = [
        ("json", "r.json"),
        ("sarif", "r.sarif"),
        ("github", "r.github"),
        ("hydra-metrics", "hydra-metrics"),
        ("html", "r.html"),
    ];
    let mut args: Vec<String> =
        ["--format", "text", "--color", "never", "--cuda-capabilities", "8.6;9.0"]
            .map(String::from)
            .to_vec();
    for (format, file) in files {
        args.push("--output".into());
        args.push(format!("{format}={}", reports.join(file).display()));
    }
    args.push("out".into());
    let out =
        Command::new(BIN).current_dir(d).env_remove("NIX_LOG_FD").args(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, audit_snapshot_tree(d, "text").stdout, "stdout is the text report");
    for (format, file) in &files[..4] {
        let alone = audit_snapshot_tree(d, format);
        let written = std::fs::read(reports.join(file)).unwrap();
        assert!(!written.is_empty(), "{format}");
        assert!(written == alone.stdout, "{format}: --output differs from --format {format}");
    }
    // The page names its own command line, so it is compared by content:
    // a whole document naming every check the JSON report found.
    let html = std::fs::read_to_string(reports.join("r.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    for (_, check) in SNAPSHOT_FINDINGS {
        assert!(html.contains(check), "the page lacks {check}");
    }
    let mode = std::fs::metadata(&json_file).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640, "the replaced report keeps its mode");
    let leftovers: Vec<_> = std::fs::read_dir(&reports)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");

    let missing = d.join("no-such-folder/r.json");
    let out = Command::new(BIN)
        .current_dir(d)
        .args(["--output", &format!("json={}", missing.display()), "out"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--output json") && stderr.contains("no-such-folder/r.json"),
        "{stderr}"
    );

    let out = Command::new(BIN)
        .current_dir(d)
        .args(["--write-baseline", "b.json", "--output", "json=r.json", "out"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
    assert!(!d.join("b.json").exists() && !d.join("r.json").exists());
}
