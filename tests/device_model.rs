//! One device-code model (issue 14): `--summary` and the audit read a file
//! the same way and agree on what it carries. Each test here pins one of the
//! divergences the issue lists, on an input built here by nvcc 13.5 / ar
//! (`fixtures/cuda/recipes.txt`) or a pinned wheel of `tests/tools/corpus.sh`.
//! Expectations come from how the inputs were built (the `-gencode` flags,
//! cuobjdump's own listing) and from the facts the issue measured, never
//! from our own output alone.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

fn fixture(name: &str, file: &str) -> PathBuf {
    let all = common::fixtures::build_all();
    let dir =
        &all.iter().find(|(v, _)| v.name == name).unwrap_or_else(|| panic!("no variant {name}")).1;
    dir.join(file)
}

/// The wheel set `set` of the corpus downloader; the file ending in `name`.
fn corpus_file(set: &str, name: &str) -> PathBuf {
    let script = common::root().join("tests/tools/corpus.sh");
    let out = Command::new("bash").arg(&script).arg(set).output().expect("bash");
    assert!(
        out.status.success(),
        "tests/tools/corpus.sh {set} failed (needs PyPI and `make tools`):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .find(|p| p.ends_with(name))
        .unwrap_or_else(|| panic!("corpus set {set} has no {name}"))
}

fn run_json(args: &[&str], file: &Path) -> (i32, Value) {
    let out = Command::new(BIN)
        .env_remove("NIX_LOG_FD")
        .args(["--format", "json"])
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{}: {e}: {}", file.display(), String::from_utf8_lossy(&out.stderr))
    });
    (out.status.code().unwrap(), v)
}

/// `--summary`'s per-file report.
fn summary(file: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["--summary"];
    args.extend_from_slice(extra);
    let (_, v) = run_json(&args, file);
    v["files"][0].clone()
}

/// The audit's report of one file (capability checks as asked).
fn audit(file: &Path, caps: Option<&str>) -> (i32, Value) {
    let mut args = vec!["--no-forward-compat"];
    if let Some(c) = caps {
        args.extend(["--cuda-capabilities", c]);
    }
    run_json(&args, file)
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// The capability findings of an audit report (RUNPATH ones aside: nvcc
/// links the CUDA runtime statically, which the RUNPATH checks see).
const CAPABILITY_CHECKS: [&str; 4] = [
    "no-code-for-capability",
    "ptx-only-capability",
    "missing-forward-compat-ptx",
    "unrequested-arch",
];

fn capability_findings(report: &Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| CAPABILITY_CHECKS.contains(&f["check"].as_str().unwrap()))
        .map(|f| format!("{} {}", f["check"].as_str().unwrap(), f["message"].as_str().unwrap()))
        .collect()
}

#[test]
fn a_thin_archive_with_ptx_is_device_code_to_both() {
    // `-gencode arch=compute_86,code=compute_86` into `ar rcsT`: PTX sm_86 only,
    // which cuobjdump lists through the thin archive (tests/cuobjdump_parity.rs).
    let thin = fixture("thin-ptx", "thin_ptx.a");
    let s = summary(&thin, &[]);
    assert_eq!(names(&s["summary"]["ptx"]), ["sm_86"], "{s}");
    let (_, a) = audit(&thin, None);
    assert_eq!(a["summary"]["files"], 1, "{a}");
    assert_eq!(names(&a["files"][0]["device"]["ptx"]), ["sm_86"], "{a}");
    // Asked for 8.6, the PTX JITs there: a warning, not "no code".
    let (_, a) = audit(&thin, Some("8.6"));
    assert_eq!(capability_findings(&a).len(), 1, "{a}");
    assert!(capability_findings(&a)[0].starts_with("ptx-only-capability"), "{a}");
}

#[test]
fn a_family_cubin_keeps_its_variant_everywhere() {
    // Built with `-gencode arch=compute_100f,code=[sm_100f,compute_100f]`.
    let f = fixture("sm100f", "sm100f");
    let s = summary(&f, &[]);
    assert_eq!(names(&s["summary"]["sass"]), ["sm_100f"], "{s}");
    assert_eq!(names(&s["summary"]["ptx"]), ["sm_100f"], "{s}");
    let (_, a) = audit(&f, None);
    assert_eq!(names(&a["files"][0]["device"]["sass"]), ["sm_100f"], "{a}");
    // 10.0 is in the sm_100f family: that code was asked for, and runs natively.
    let (_, a) = audit(&f, Some("10.0"));
    assert_eq!(capability_findings(&a), Vec::<String>::new(), "{a}");
    let (_, a) = audit(&f, Some("10.0f"));
    assert_eq!(capability_findings(&a), Vec::<String>::new(), "{a}");
    // 12.0 is another family: nothing runs there.
    let (_, a) = audit(&f, Some("12.0"));
    assert!(capability_findings(&a).iter().any(|c| c.starts_with("no-code-for-capability")));
}

#[test]
fn a_split_debug_file_is_not_damage_to_either() {
    // `objcopy --only-keep-debug`: the .nv_fatbin section is NOBITS.
    let debug = fixture("split-debug", "vadd.debug");
    let s = summary(&debug, &[]);
    assert_eq!(s["errors"], serde_json::json!([]), "{s}");
    assert_eq!(s["device_code"], false, "{s}");
    let (code, a) = audit(&debug, None);
    assert!(a["files"][0].get("damage").is_none(), "{a}");
    assert!(a["files"][0].get("device").is_none(), "{a}");
    assert_eq!(code, 0, "{a}");
}

#[test]
fn lto_ir_means_every_architecture_with_lto_ir_in_both() {
    // `nvcc -dlto -rdc=true -c -arch=sm_80`: LTO-IR and PTX for sm_80 (cuobjdump
    // lists the PTX; the LTO-IR it does not list).
    for (variant, file) in
        [("lto-ir", "lto_ptx.o"), ("lto-ir", "lto_only.o"), ("lto-ir", "liblto.a")]
    {
        let f = fixture(variant, file);
        let s = summary(&f, &[]);
        let (_, a) = audit(&f, None);
        assert_eq!(names(&s["summary"]["lto_ir"]), ["sm_80"], "{file}: {s}");
        assert_eq!(names(&a["files"][0]["device"]["lto_ir"]), ["sm_80"], "{file}: {a}");
    }
}

#[test]
fn kernel_less_ptx_needs_no_code_nvcc_built() {
    // Device variables and no kernel: a cubin without kernels and PTX without
    // `.entry` for sm_80 (cuobjdump -ptx shows no entry).
    let lib = fixture("vars-only", "libvars.so");
    let s = summary(&lib, &[]);
    assert_eq!(names(&s["summary"]["sass"]), Vec::<String>::new(), "{s}");
    assert_eq!(names(&s["summary"]["ptx"]), Vec::<String>::new(), "{s}");
    assert_eq!(names(&s["summary"]["ptx_without_entries"]), ["sm_80"], "{s}");
    let (_, a) = audit(&lib, Some("8.0;8.6;9.0"));
    assert_eq!(capability_findings(&a), Vec::<String>::new(), "{a}");
    assert_eq!(names(&a["files"][0]["device"]["ptx_without_entries"]), ["sm_80"], "{a}");
}

#[test]
fn kernel_less_ptx_needs_no_code_in_real_cudnn() {
    // nvidia-cudnn-cu12 9.28.0.42's libcudnn_ext.so.9: link-stub cubins and
    // 28 PTX entries without `.entry` (issue 14): no kernel, so no code needed.
    let lib = corpus_file("cudnn", "libcudnn_ext.so.9");
    let (code, a) = audit(&lib, Some("8.0;8.6;9.0"));
    assert_eq!(capability_findings(&a), Vec::<String>::new(), "{a}");
    let d = &a["files"][0]["device"];
    assert_eq!(names(&d["sass"]), Vec::<String>::new(), "{d}");
    assert_eq!(names(&d["ptx"]), Vec::<String>::new(), "{d}");
    assert!(!names(&d["ptx_without_entries"]).is_empty(), "{d}");
    assert_eq!(d["ptx_files"], 28, "{d}");
    assert_ne!(code, 2, "{a}");
    let s = summary(&lib, &[]);
    assert_eq!(s["summary"]["ptx_without_entries"], d["ptx_without_entries"], "{s}");
}

#[test]
fn fatbins_outside_the_sections_are_audited() {
    // cuFFT 11.4 keeps ~24,000 containers in .data (SASS sm_50 to sm_120,
    // measured by the issue); its .nv_fatbin holds link stubs only.
    let lib = corpus_file("cufft", "libcufft.so.11");
    // With --no-scan the audit probes, finds them, and says it did not read them.
    let (_, a) =
        run_json(&["--no-scan", "--no-forward-compat", "--cuda-capabilities", "8.0;8.6;9.0"], &lib);
    let checks: Vec<&str> =
        a["findings"].as_array().unwrap().iter().map(|f| f["check"].as_str().unwrap()).collect();
    assert!(checks.contains(&"device-code-not-scanned"), "{a}");
    assert!(a["files"][0]["device"]["unscanned_container"].as_u64().is_some(), "{a}");
    // By default (and with --scan) it reads them all.
    let (_, a) = audit(&lib, Some("8.0;8.6;9.0"));
    let d = &a["files"][0]["device"];
    let sass = names(&d["sass"]);
    for arch in ["sm_50", "sm_80", "sm_86", "sm_90", "sm_120"] {
        assert!(sass.contains(&arch.to_string()), "{arch} missing: {d}");
    }
    assert!(d["scanned_containers"].as_u64().unwrap() > 10_000, "{d}");
    assert!(
        !capability_findings(&a).iter().any(|c| c.starts_with("no-code-for-capability")),
        "{a}"
    );
    // The same code as --summary --scan sees.
    let s = summary(&lib, &["--scan"]);
    assert_eq!(s["summary"]["sass"], d["sass"], "{s}");
}
