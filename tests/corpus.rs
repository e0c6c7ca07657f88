//! Parity with cuobjdump 13.5 on real CUDA libraries nobody here wrote: the
//! pinned PyPI wheels of `tests/tools/corpus.sh` (cuRAND for CUDA 12 and 13,
//! CuPy's extension modules, cuFFT), downloaded into `.cache/corpus/` on
//! first use. Every shared object of the corpus is listed by both tools.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const OURS: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// The corpus, fetched once per test process (the tests run in parallel;
/// `corpus.sh` also serialises itself with a lock against other processes).
fn corpus() -> &'static [PathBuf] {
    static FILES: OnceLock<Vec<PathBuf>> = OnceLock::new();
    FILES.get_or_init(|| {
        let script = common::root().join("tests/tools/corpus.sh");
        let out = Command::new("bash").arg(&script).output().expect("bash");
        assert!(
            out.status.success(),
            "tests/tools/corpus.sh failed (needs PyPI and `make tools`):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let files: Vec<PathBuf> =
            String::from_utf8_lossy(&out.stdout).lines().map(PathBuf::from).collect();
        for needed in [
            "nvidia-curand-cu12-10.3.10.19",
            "nvidia-curand-10.4.5.25",
            "cupy-cuda12x-14.2.0",
            "nvidia-cufft-cu12-11.4.1.4",
        ] {
            assert!(
                files.iter().any(|f| f.to_string_lossy().contains(needed)),
                "corpus lacks {needed}"
            );
        }
        files
    })
}

#[test]
fn listing_matches_live_cuobjdump_on_real_libraries() {
    let cuobjdump = common::tool("cuobjdump");
    let files = corpus();
    let mut failures = Vec::new();
    let mut with_code = 0;
    for file in files {
        let dir = file.parent().unwrap();
        let name = file.file_name().unwrap().to_str().unwrap();
        for args in [&["--list-elf"][..], &["-lptx"], &["-all", "-lelf", "-lptx"]] {
            let mut a = args.to_vec();
            a.push(name);
            let expected = common::run_in(dir, &cuobjdump, &a);
            let got = common::run_in(dir, Path::new(OURS), &a);
            if args.len() == 3 && expected.status.code() == Some(0) {
                with_code += 1;
            }
            failures.extend(common::cuobjdump::compare(
                &format!("{}: {}", file.display(), a.join(" ")),
                &expected,
                &got,
            ));
        }
    }
    assert!(failures.is_empty(), "{} runs differ:\n{}", failures.len(), failures.join("\n"));
    assert!(with_code >= 6, "only {with_code} corpus files have device code");
    eprintln!("{} corpus files ({with_code} with device code) listed identically", files.len());
}

#[test]
fn scan_mode_finds_the_fatbins_cufft_keeps_outside_its_sections() {
    let files = corpus();
    let cufft = files.iter().find(|f| f.ends_with("libcufft.so.11")).expect("libcufft");
    let out = Command::new(OURS)
        .args(["--summary", "--scan", "--headers-only", "--format", "json"])
        .arg(cufft)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let file = &json["files"][0];
    let listed = file["entries"].as_array().unwrap().len();
    let scanned = file["scanned"].as_array().unwrap().len();
    assert!(listed < 100, "cuobjdump-compatible view has {listed} entries");
    assert!(scanned > 10_000, "scan found only {scanned} entries");
}

#[test]
fn deep_mode_reads_every_real_payload_and_cubin_headers_agree() {
    // CUDA 12 libraries carry old-ABI cubins (EI_OSABI 0x33), CUDA 13 ones
    // the new ABI; LZ4 and ZSTD both occur.
    let files = corpus();
    let mut abis = std::collections::BTreeSet::new();
    let mut codecs = std::collections::BTreeSet::new();
    let mut cubins = 0;
    for file in files {
        let out =
            Command::new(OURS).args(["--summary", "--format", "json"]).arg(file).output().unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for e in json["files"][0]["entries"].as_array().unwrap() {
            assert!(e.get("decode_error").is_none(), "{}: {e}", file.display());
            codecs.insert(e["codec"].as_str().unwrap().to_string());
            if e["kind"] == "elf" {
                let arch = e["arch"].as_str().unwrap().trim_end_matches('f');
                assert_eq!(e["cubin"]["arch"], arch, "{}: {e}", file.display());
                abis.insert(e["cubin"]["os_abi"].as_u64().unwrap());
                cubins += 1;
            }
        }
    }
    assert_eq!(abis, [0x33, 0x41].into(), "both cubin ABIs");
    assert!(codecs.contains("lz4") && codecs.contains("zstd") && codecs.contains("none"));
    assert!(cubins > 250, "{cubins}");
}

#[test]
fn bare_old_abi_cubins_extracted_by_cuobjdump_are_listed_identically() {
    let cuobjdump = common::tool("cuobjdump");
    let files = corpus();
    let curand12 = files
        .iter()
        .find(|f| f.to_string_lossy().contains("nvidia-curand-cu12-"))
        .expect("cuRAND for CUDA 12");
    let tmp = tempfile::tempdir().unwrap();
    let out = common::run_in(tmp.path(), &cuobjdump, &["-xelf", "all", curand12.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut failures = Vec::new();
    let mut n = 0;
    for entry in std::fs::read_dir(tmp.path()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        for args in [&["-lelf"][..], &["-lelf", "-lptx"]] {
            let mut a = args.to_vec();
            a.push(&name);
            let expected = common::run_in(tmp.path(), &cuobjdump, &a);
            let got = common::run_in(tmp.path(), Path::new(OURS), &a);
            failures.extend(common::cuobjdump::compare(&name, &expected, &got));
        }
        n += 1;
    }
    assert!(n > 100, "only {n} cubins extracted");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
