//! `--format hydra-metrics` on real libraries: the numbers Hydra charts must
//! say what the findings say. The oracle is the JSON report of the same
//! audit: a capability's `lacking` count is the number of files
//! `no-code-for-capability` names for it, so a file of link stubs alone
//! (cuDNN's libcudnn_ext: cubins without kernels, PTX without entries),
//! which has nothing to run and gets no finding, is not counted.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const CEI: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// The library files of corpus sets (none: the test set).
fn corpus(sets: &[&str]) -> Vec<PathBuf> {
    let out = Command::new("bash")
        .arg(common::root().join("tests/tools/corpus.sh"))
        .args(sets)
        .output()
        .unwrap();
    assert!(out.status.success(), "corpus.sh: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(PathBuf::from).collect()
}

fn audit(format: &str, caps: &str, files: &[PathBuf]) -> Vec<u8> {
    let mut cmd = Command::new(CEI);
    common::outside_build(&mut cmd);
    let out = cmd
        .env_remove("cudaCapabilities")
        .args(["--format", format, "--cuda-capabilities", caps])
        .args(files)
        .output()
        .unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", common::text(&out));
    out.stdout
}

/// `NAME VALUE` lines by name.
fn metrics(text: &[u8]) -> BTreeMap<String, u64> {
    String::from_utf8(text.to_vec())
        .unwrap()
        .lines()
        .map(|l| {
            let mut f = l.split(' ');
            (f.next().unwrap().to_string(), f.next().unwrap().parse().unwrap())
        })
        .collect()
}

#[test]
fn lacking_counts_the_files_no_code_for_capability_names() {
    let mut files = corpus(&[]);
    files.extend(corpus(&["cudnn"]));
    let ext =
        files.iter().find(|f| f.ends_with("libcudnn_ext.so.9")).expect("cuDNN's libcudnn_ext");
    let caps = ["8.0", "9.0", "11.0"];
    let json: Value = serde_json::from_slice(&audit("json", &caps.join(";"), &files)).unwrap();
    let got = metrics(&audit("hydra-metrics", &caps.join(";"), &files));
    // The control: libcudnn_ext is in the audit, with device code but no
    // kernel, so every requested capability's coverage says nothing runs.
    let ext_facts = json["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == ext.to_str().unwrap())
        .unwrap();
    assert_eq!(ext_facts["device"]["sass"], serde_json::json!([]));
    assert!(!ext_facts["device"]["link_stub_only"].as_array().unwrap().is_empty());
    for c in ext_facts["coverage"].as_array().unwrap() {
        assert_eq!(c["runs"], "no", "{c}");
    }
    // The text report does not call it a gap either.
    let text =
        String::from_utf8(audit("text", &caps.join(";"), std::slice::from_ref(ext))).unwrap();
    assert!(
        text.contains("    requested 8.0: no kernels in the file, nothing to run; 9.0: no kernels"),
        "{text}"
    );
    assert!(!text.contains("nothing runs"), "{text}");
    let mut some = 0;
    for cap in caps {
        let named = json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == "no-code-for-capability" && f["details"]["capability"] == cap)
            .count() as u64;
        let name = format!("cuda-elf-inspect.capability.{cap}.lacking");
        assert_eq!(got.get(&name), Some(&named), "{name}");
        some += named;
    }
    // The corpus has files that lack a requested capability (cuRAND for
    // CUDA 12 has no code for 11.0), so the equality above is not 0 = 0.
    assert!(some > 0);
}

/// With a driver given, a capability's `sass` counts the files whose SASS
/// runs on it whatever the driver says, and `driver-fails` those whose code
/// for it the driver cannot run, SASS included (cuRAND for CUDA 13 on a CUDA
/// 12.0 driver: its runtime is too new). Oracle: each file's JSON `coverage`
/// entry and its `driver` verdict.
#[test]
fn with_a_driver_sass_and_driver_fails_count_what_the_coverage_says() {
    let files = corpus(&[]);
    let caps = "8.0;9.0";
    let run = |format: &str| {
        let mut cmd = Command::new(CEI);
        common::outside_build(&mut cmd);
        let out = cmd
            .env_remove("cudaCapabilities")
            .args(["--driver-cuda", "12.0", "--cuda-capabilities", caps, "--format", format])
            .args(&files)
            .output()
            .unwrap();
        assert!(matches!(out.status.code(), Some(0 | 1)), "{}", common::text(&out));
        out.stdout
    };
    let json: Value = serde_json::from_slice(&run("json")).unwrap();
    let got = metrics(&run("hydra-metrics"));
    let mut fails_seen = 0;
    for cap in ["8.0", "9.0"] {
        let coverage: Vec<&Value> = json["files"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|f| f["coverage"].as_array().into_iter().flatten())
            .filter(|c| c["capability"] == cap)
            .collect();
        let native = coverage.iter().filter(|c| c["runs"] == "native").count() as u64;
        let fails =
            coverage.iter().filter(|c| c["runs"] != "no" && c["driver"]["runs"] == false).count()
                as u64;
        assert_eq!(got[&format!("cuda-elf-inspect.capability.{cap}.sass")], native, "{cap}");
        assert_eq!(got[&format!("cuda-elf-inspect.capability.{cap}.driver-fails")], fails, "{cap}");
        fails_seen += fails;
    }
    // Not 0 = 0: the corpus holds cuRAND for CUDA 13.
    assert!(fails_seen > 0);
}
