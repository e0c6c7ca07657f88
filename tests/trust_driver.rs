//! Issue 30, items 1 and 2, on real files nobody here wrote (pinned
//! downloads of `tests/tools/corpus.sh`): no false "clean" (a file that may
//! load a GPU driver library and cannot reach the driver folder by its own
//! RUNPATH gets `missing-driver-runpath`; every library of NVIDIA's driver
//! packages counts as the driver's) and no false "runs" (a driver verdict
//! is "runs" only when the file proves which CUDA version it needs).

mod common;
use common::corpus;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const OURS: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");
const DRIVER_LIB: &str = "/run/opengl-driver/lib";

/// A copy of `file` in a fresh folder under `name` (the audit and the
/// patcher then see only it).
fn copy(dir: &Path, file: &Path, name: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let to = dir.join(name);
    std::fs::copy(file, &to).unwrap();
    to
}

/// The audit's JSON report of `paths`.
fn audit(args: &[&str], paths: &[&Path]) -> Value {
    let out = common::outside_build(Command::new(OURS).arg("--format").arg("json").args(args))
        .args(paths)
        .output()
        .unwrap();
    assert!(out.status.code().is_some_and(|c| c <= 1), "{}", common::text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The audit's text report of `paths`.
fn audit_text(args: &[&str], paths: &[&Path]) -> String {
    let out = common::outside_build(Command::new(OURS).args(args)).args(paths).output().unwrap();
    assert!(out.status.code().is_some_and(|c| c <= 1), "{}", common::text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The findings of one check: `(file name, message, details.library)`.
fn of_check(report: &Value, check: &str) -> Vec<(String, String, String)> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check)
        .map(|f| {
            let path = f["path"].as_str().unwrap_or("");
            let name = Path::new(path).file_name().unwrap().to_string_lossy().into_owned();
            let lib = f["details"]["library"].as_str().unwrap_or("").to_string();
            (name, f["message"].as_str().unwrap_or("").to_string(), lib)
        })
        .collect()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nch-trust-driver-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Patches `dir` as the hook does (the driver folder first on every RUNPATH).
fn add_driver_runpath(dir: &Path) {
    let out = common::bin(dir, &[dir.to_str().unwrap()]);
    assert!(out.status.success(), "auto-add-driver-runpath: {}", common::text(&out));
}

// ---- item 1: no false clean -------------------------------------------

/// The shared CUDA 12.9 runtime of PyPI has no RUNPATH and dlopens
/// `libcuda.so.1` (Nixpkgs adds autoAddDriverRunpath to cuda_cudart for
/// it). The old audit said `1 file: 0 errors`.
#[test]
fn shared_cudart_12_without_the_driver_runpath_is_not_clean() {
    let lib = corpus("cudart12", "libcudart.so.12");
    let dir = tmp("cudart");
    let file = copy(&dir, &lib, "libcudart.so.12");
    let report = audit(&[], &[&file]);
    let found = of_check(&report, "missing-driver-runpath");
    assert_eq!(found.len(), 1, "{report:#}");
    assert!(found[0].1.contains("libcuda.so.1"), "the reason names the driver: {}", found[0].1);
    assert!(found[0].1.contains(DRIVER_LIB), "{}", found[0].1);
    // The hook's fix clears it.
    add_driver_runpath(&dir);
    let report = audit(&[], &[&file]);
    assert!(of_check(&report, "missing-driver-runpath").is_empty(), "{report:#}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Debian's ffmpeg dlopens the driver's CUDA, NVDEC and NVENC libraries
/// (Nixpkgs' ffmpeg adds addDriverRunpath for them): each library gets
/// the finding, naming what it loads; after the hook, none, and no
/// `dlopen-unresolved` for a driver library either.
#[test]
fn ffmpeg_libraries_that_dlopen_the_driver_need_its_folder() {
    let dir = tmp("ffmpeg");
    let avutil = copy(&dir, &corpus("deb-ffmpeg", "libavutil.so.57.28.100"), "libavutil.so.57");
    let avcodec = copy(&dir, &corpus("deb-ffmpeg", "libavcodec.so.59.37.100"), "libavcodec.so.59");
    let report = audit(&[], &[&avutil, &avcodec]);
    let found = of_check(&report, "missing-driver-runpath");
    let names: Vec<&str> = found.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(names, ["libavcodec.so.59", "libavutil.so.57"], "{found:?}");
    let all: String = found.iter().map(|f| f.1.as_str()).collect::<Vec<_>>().join("\n");
    for driver in ["libcuda.so.1", "libnvcuvid.so.1", "libnvidia-encode.so.1"] {
        assert!(all.contains(driver), "{driver} is named: {all}");
    }
    add_driver_runpath(&dir);
    let report = audit(&[], &[&avutil, &avcodec]);
    assert!(of_check(&report, "missing-driver-runpath").is_empty(), "{report:#}");
    let unresolved = of_check(&report, "dlopen-unresolved");
    assert!(
        !unresolved.iter().any(|f| f.2.starts_with("libcuda") || f.2.starts_with("libnv")),
        "driver libraries resolve to the driver folder: {unresolved:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// CUPTI 12.8.90 dlopens OptiX and the OpenCL ICD of the driver (and
/// their unversioned twins), which NVIDIA's driver packages ship
/// (Debian's libnvoptix1 and nvidia-opencl-icd): once the driver folder
/// is on its RUNPATH they are found, not `dlopen-unresolved`. The
/// aarch64 wheel: the names are the same on every machine.
#[test]
fn cupti_finds_optix_and_opencl_in_the_driver_folder() {
    let lib = corpus("cupti12-aarch64", "libcupti.so.12");
    let dir = tmp("cupti");
    let file = copy(&dir, &lib, "libcupti.so.12");
    add_driver_runpath(&dir);
    let report = audit(&["--dlopen-facts"], &[&file]);
    let unresolved: Vec<String> =
        of_check(&report, "dlopen-unresolved").into_iter().map(|f| f.2).collect();
    for driver in
        ["libnvoptix.so.1", "libnvoptix.so", "libnvidia-opencl.so.1", "libnvidia-opencl.so"]
    {
        assert!(!unresolved.iter().any(|u| u == driver), "{driver}: {unresolved:?}");
        // And the file does name it (the oracle is not vacuous).
        let targets = report["files"][0]["dlopen"]["targets"].as_array().unwrap();
        // `libX.so` and `libX.so.N` are one target (issue 30): the
        // unversioned name is one of the names it asks.
        let names = |t: &serde_json::Value| {
            t["soname"] == driver
                || t["asked"].as_array().is_some_and(|a| a.iter().any(|n| n == driver))
        };
        assert!(targets.iter().any(names), "CUPTI dlopens {driver}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file that is the CUDA runtime is judged as one by `--driver-version`:
/// 470 (CUDA 11.4) cannot load a CUDA 12 runtime (12 needs 525.60.13).
#[test]
fn driver_470_cannot_load_the_cuda_12_runtime_itself() {
    let lib = corpus("cudart12", "libcudart.so.12");
    let report = audit(&["--driver-version", "470.256.02"], &[&lib]);
    let found = of_check(&report, "driver-too-old-for-runtime");
    assert_eq!(found.len(), 1, "{report:#}");
    assert_eq!(found[0].2, "libcudart.so.12");
    assert!(found[0].1.contains("525.60.13"), "{}", found[0].1);
    let rt = &report["files"][0]["runtime"];
    assert_eq!((rt["linkage"].as_str(), rt["major"].as_u64()), (Some("shared"), Some(12)));
    assert_eq!(rt["own"], true);
    // A CUDA 12 driver runs it.
    let report = audit(&["--driver-version", "525.60.13"], &[&lib]);
    assert!(of_check(&report, "driver-too-old-for-runtime").is_empty(), "{report:#}");
}

// ---- item 2: no false runs ---------------------------------------------

/// cuFFT 11.4.1.4 (CUDA 12.9) holds no CUDA runtime (no runtime markers,
/// no `cuGetProcAddress`): it calls the driver itself and dlopens
/// `libnvJitLink.so.12`. Its PTX says `.version 7.0`/`7.8`, which the old
/// audit took for a static CUDA 11.8 runtime and so said driver 470 (CUDA
/// 11.4) `runs` its sm_80 code. `libcufft.so.11` ships only with CUDA 12:
/// a CUDA 12 driver (525.60.13 or newer) is needed.
#[test]
fn cufft_11_does_not_run_on_driver_470() {
    let lib = corpus("cufft", "libcufft.so.11");
    let args = ["--driver-version", "470.256.02", "--cuda-capabilities", "8.0"];
    let text = audit_text(&args, &[&lib]);
    assert!(!text.contains("SASS sm_80 (runs)"), "{text}");
    assert!(
        text.contains("requested 8.0: SASS sm_80 (runtime needs CUDA 12.0 driver, has 11.4)"),
        "{text}"
    );
    let report = audit(&args, &[&lib]);
    let rt = &report["files"][0]["runtime"];
    assert_eq!(rt["linkage"], "library-release", "{rt}");
    assert_eq!(
        (rt["library"].as_str(), rt["cuda_major"].as_u64()),
        (Some("libcufft.so.11"), Some(12))
    );
    assert!(rt.get("from").is_none(), "no version read from the PTX ISA: {rt}");
    let found = of_check(&report, "driver-too-old-for-runtime");
    assert_eq!(found.len(), 1, "{report:#}");
    assert_eq!(found[0].2, "libcufft.so.11");
    assert!(found[0].1.contains("525.60.13"), "{}", found[0].1);
    // It is no static runtime: no cudart-static info.
    assert!(of_check(&report, "cudart-static").is_empty(), "{report:#}");
    let cov = &report["files"][0]["coverage"][0]["driver"];
    assert_eq!(
        (cov["runs"].as_bool(), cov["reason"].as_str()),
        (Some(false), Some("runtime-too-new"))
    );
    // A CUDA 12 driver runs it, proven by the release.
    let report = audit(&["--driver-version", "525.60.13", "--cuda-capabilities", "8.0"], &[&lib]);
    assert_eq!(report["files"][0]["coverage"][0]["driver"]["runs"], true, "{report:#}");
}

/// The same cuFFT under a soname no reviewed row knows: nothing in the file
/// names its CUDA version (its PTX ISA 7.8 says only "CUDA 11.8 or
/// newer"), so the verdict is unknown, with the reason, not "runs". The
/// copy differs only in its soname (patchelf).
#[test]
fn a_library_that_calls_the_driver_and_names_no_version_is_unknown() {
    let lib = corpus("cufft", "libcufft.so.11");
    let dir = tmp("cufft-unknown");
    let file = copy(&dir, &lib, "libfft.so.1");
    let patchelf = common::tool("patchelf");
    let out =
        Command::new(patchelf).args(["--set-soname", "libfft.so.1"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "patchelf: {}", common::text(&out));
    let args = ["--driver-version", "470.256.02", "--cuda-capabilities", "8.0"];
    let text = audit_text(&args, &[&file]);
    assert!(!text.contains("(runs)"), "{text}");
    assert!(text.contains("requested 8.0: SASS sm_80 (unknown: "), "{text}");
    let report = audit(&args, &[&file]);
    let rt = &report["files"][0]["runtime"];
    assert_eq!(rt["linkage"], "unknown", "{rt}");
    assert_eq!(rt["calls_driver"], true, "{rt}");
    assert_eq!(rt["floor"], "11.8", "the PTX ISA is a floor: {rt}");
    assert!(rt.get("version").is_none(), "{rt}");
    let unknown = of_check(&report, "driver-verdict-unknown");
    assert_eq!(unknown.len(), 1, "{report:#}");
    assert!(unknown[0].1.contains("calls the GPU driver itself"), "{}", unknown[0].1);
    assert!(unknown[0].1.contains("CUDA 11.8 or newer"), "{}", unknown[0].1);
    let cov = &report["files"][0]["coverage"][0]["driver"];
    assert_eq!((cov["runs"].as_bool(), cov["reason"].as_str()), (Some(false), Some("unknown")));
    assert!(cov["why"].is_string(), "{cov}");
    // The HTML matrix's D cell says the same (one verdict function).
    let out = common::outside_build(Command::new(OURS).args(["--format", "html"]).args(args))
        .arg(&file)
        .output()
        .unwrap();
    let html = String::from_utf8_lossy(&out.stdout);
    assert!(html.contains("was not decided: it calls the driver"), "HTML cell title");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A requested capability whose GPUs are newer than the driver: cuRAND 12
/// (10.3.10.19) carries sm_120 SASS (cuobjdump), and driver 535.54.03
/// supports CUDA 12.2, while capability 12.0 GPUs (RTX 50xx) were first
/// driven by CUDA 12.8's driver (NVIDIA's 12.8 release notes). The verdict
/// for 12.0 is undecided with that reason, never "runs"; 9.0 (Hopper, CUDA
/// 11.8) runs.
#[test]
fn a_gpu_newer_than_the_driver_is_never_said_to_run() {
    let lib = corpus("curand12", "libcurand.so.10");
    let listing = std::process::Command::new(common::tool("cuobjdump"))
        .arg("--list-elf")
        .arg(&lib)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&listing.stdout).contains("sm_120"), "no sm_120 in cuRAND");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cuda-elf-inspect"))
        .args([
            "--driver-version",
            "535.54.03",
            "--cuda-capabilities",
            "9.0;12.0",
            "--format",
            "json",
        ])
        .arg(&lib)
        .output()
        .unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", common::text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cov = v["files"][0]["coverage"].as_array().unwrap();
    let of = |cap: &str| cov.iter().find(|c| c["capability"] == cap).unwrap()["driver"].clone();
    assert_eq!(of("9.0")["runs"], true, "{cov:#?}");
    let d = of("12.0");
    assert_eq!(d["runs"], false, "{d:#}");
    assert_eq!(d["reason"], "unknown", "{d:#}");
    assert_eq!(d["needs_cuda"], "12.8", "{d:#}");
}
