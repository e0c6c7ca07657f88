//! A foreign-machine corpus nobody here wrote, patched on this x86_64
//! machine as a cross build's hook would: the aarch64 (SBSA) wheels of
//! cuRAND and CUPTI for CUDA 12 from PyPI, and Debian's arm64, armhf,
//! ppc64el and s390x builds of zlib, zstd, libffi, libgomp, OpenSSL and
//! libstdc++ (`apt-get download`, multiarch), all through
//! `tests/tools/corpus.sh`.
//!
//! Oracles: patchelf 0.19 (`--add-rpath`, upstream's tool) must patch
//! exactly the files we patch, with the same entries (ours first, never an
//! empty one); each machine's own readelf (binutils-<triple>) reads our
//! result without a warning; device code is byte-identical by that
//! machine's objcopy; and cuobjdump lists the aarch64 CUDA libraries exactly
//! as `cuda-elf-inspect` does.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const INSPECT: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// The corpus sets, the GNU triple of their machine, and whether 64-bit.
const SETS: &[(&str, &str, &str, bool)] = &[
    ("curand12-aarch64", "nvidia-curand-cu12-10.3.10.19-aarch64", "aarch64-linux-gnu", true),
    ("cupti12-aarch64", "nvidia-cuda-cupti-cu12-12.8.90-aarch64", "aarch64-linux-gnu", true),
    ("deb-arm64", "deb-arm64", "aarch64-linux-gnu", true),
    ("deb-armhf", "deb-armhf", "arm-linux-gnueabihf", false),
    ("deb-ppc64el", "deb-ppc64el", "powerpc64le-linux-gnu", true),
    ("deb-s390x", "deb-s390x", "s390x-linux-gnu", true),
];

fn corpus() -> Vec<(PathBuf, &'static str, bool)> {
    let mut cmd = Command::new("bash");
    cmd.arg(root().join("tests/tools/corpus.sh"));
    for (set, ..) in SETS {
        cmd.arg(set);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "tests/tools/corpus.sh failed (needs PyPI, Debian's mirror and `make tools`):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files: Vec<(PathBuf, &str, bool)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (_, _, triple, is64) = SETS
                .iter()
                .find(|(_, dir, ..)| l.contains(&format!("/{dir}/")))
                .unwrap_or_else(|| panic!("{l}: from no set"));
            (PathBuf::from(l), *triple, *is64)
        })
        .collect();
    for (_, dir, ..) in SETS {
        assert!(
            files.iter().any(|(f, ..)| f.to_string_lossy().contains(&format!("/{dir}/"))),
            "corpus lacks {dir}"
        );
    }
    files
}

/// `(tag, entries)` by the machine's readelf, which must not warn.
fn read_path(triple: &str, file: &Path) -> Option<(String, Vec<String>)> {
    let out =
        Command::new(tool(&format!("{triple}-readelf"))).arg("-dW").arg(file).output().unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{}: {}", file.display(), text(&out));
    String::from_utf8(out.stdout).unwrap().lines().find_map(|line| {
        ["RUNPATH", "RPATH"].iter().find(|t| line.contains(&format!("({t})"))).map(|t| {
            let v = line.split_once('[').unwrap().1.trim_end().trim_end_matches(']');
            (t.to_string(), v.split(':').map(String::from).collect())
        })
    })
}

fn has_section(triple: &str, file: &Path, name: &str) -> bool {
    let out =
        Command::new(tool(&format!("{triple}-readelf"))).arg("-SW").arg(file).output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().any(|w| w == name)
}

fn section(triple: &str, file: &Path, name: &str, out: &Path) -> Vec<u8> {
    let st = Command::new(tool(&format!("{triple}-objcopy")))
        .args(["-O", "binary", "--only-section", name])
        .arg(file)
        .arg(out)
        .status()
        .unwrap();
    assert!(st.success(), "objcopy {name} {}", file.display());
    std::fs::read(out).unwrap()
}

#[test]
fn foreign_libraries_patch_like_patchelf_and_keep_device_code() {
    let files = corpus();
    let tmp = tempfile::tempdir().unwrap();
    let (ours, theirs) = (tmp.path().join("ours"), tmp.path().join("theirs"));
    std::fs::create_dir_all(&ours).unwrap();
    std::fs::create_dir_all(&theirs).unwrap();
    let patchelf = tool("patchelf");
    let mut cases = Vec::new();
    for (i, (file, triple, _is64)) in files.iter().enumerate() {
        let name = format!("{i:03}-{}", file.file_name().unwrap().to_string_lossy());
        let (o, t) = (ours.join(&name), theirs.join(&name));
        std::fs::copy(file, &o).unwrap();
        std::fs::copy(file, &t).unwrap();
        // Nixpkgs' addDriverRunpath: `-32` is for i686 alone; armhf's driver
        // (the ELF32 set here) is at /run/opengl-driver like every other's.
        let entry = "/run/opengl-driver/lib";
        let st = Command::new(&patchelf).args(["--add-rpath", entry]).arg(&t).output().unwrap();
        cases.push((file, name, *triple, entry, st.status.success()));
    }
    let r = bin(tmp.path(), &["--format", "json", "ours"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let report = v["report"]["files"].as_array().unwrap();
    let mut patched = 0;
    let mut fatbins = 0;
    for (orig, name, triple, entry, patchelf_ok) in &cases {
        let rec = report
            .iter()
            .find(|f| f["path"].as_str() == Some(&format!("ours/{name}")))
            .unwrap_or_else(|| panic!("{name}: not in the report"));
        if !patchelf_ok {
            assert_ne!(rec["action"], "patched", "{name}: patchelf refused it, we patched: {rec}");
            continue;
        }
        assert_eq!(rec["action"], "patched", "{name}: patchelf patched it: {rec}");
        patched += 1;
        let old: Vec<String> = read_path(triple, orig)
            .map(|(_, e)| e.into_iter().filter(|e| !e.is_empty()).collect())
            .unwrap_or_default();
        let (tag, got) = read_path(triple, &ours.join(name)).expect("our search path");
        assert_eq!(tag, "RUNPATH", "{name}");
        let mut want = vec![entry.to_string()];
        want.extend(old.iter().filter(|e| e != entry).cloned());
        assert_eq!(got, want, "{name}: ours first, no empty entry");
        let (_, theirs_entries) = read_path(triple, &theirs.join(name)).expect("patchelf's");
        let (mut a, mut b) =
            (got.clone(), theirs_entries.into_iter().filter(|e| !e.is_empty()).collect::<Vec<_>>());
        a.sort();
        b.sort();
        b.dedup();
        assert_eq!(a, b, "{name}: the same entries as patchelf's");
        if has_section(triple, orig, ".nv_fatbin") {
            fatbins += 1;
            let before = section(triple, orig, ".nv_fatbin", &tmp.path().join("a.bin"));
            let after = section(triple, &ours.join(name), ".nv_fatbin", &tmp.path().join("b.bin"));
            assert!(!before.is_empty() && before == after, "{name}: device code changed");
        }
    }
    assert!(patched >= 30, "only {patched} files patched");
    assert!(fatbins >= 1, "no device code in the aarch64 CUDA libraries");
}

#[test]
fn aarch64_cuda_libraries_list_like_cuobjdump() {
    let cuobjdump = tool("cuobjdump");
    let files = corpus();
    let mut compared = 0;
    for (file, _, _) in files.iter().filter(|(f, ..)| f.to_string_lossy().contains("/nvidia/")) {
        let dir = file.parent().unwrap();
        let name = file.file_name().unwrap().to_str().unwrap();
        for flag in ["--list-elf", "--list-ptx"] {
            let run = |exe: &Path| {
                Command::new(exe).args([flag, name]).current_dir(dir).output().unwrap()
            };
            let (want, got) = (run(&cuobjdump), run(Path::new(INSPECT)));
            assert_eq!(want.status.code(), got.status.code(), "{name} {flag}: {}", text(&got));
            assert_eq!(
                String::from_utf8_lossy(&want.stdout),
                String::from_utf8_lossy(&got.stdout),
                "{name} {flag}"
            );
            compared += usize::from(!want.stdout.is_empty());
        }
    }
    assert!(compared >= 1, "no aarch64 library with device code was listed");
}
