//! The audit on big-endian files: Debian's s390x libraries (the corpus set
//! `deb-s390x`, tests/tools/corpus.sh), the ppc64 (big-endian) sysroot of
//! Debian's powerpc64 cross compiler (`/usr/powerpc64-linux-gnu/lib`,
//! tests/tools/install.sh) and a program cross-built here for ppc64.
//!
//! Oracle: that machine's own readelf (binutils-<triple>) for NEEDED,
//! RUNPATH, RPATH and SONAME; the exit status and findings follow from the
//! files' own loader facts (another machine's file finds its libraries only
//! through its RUNPATH and `--sysroot`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

const INSPECT: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// The loader facts readelf reads: NEEDED in order, RUNPATH, RPATH, SONAME.
#[derive(Debug, Default, PartialEq, Eq)]
struct Facts {
    needed: Vec<String>,
    runpath: Option<String>,
    rpath: Option<String>,
    soname: Option<String>,
}

/// `readelf -dW` by the machine's own binutils, which must not warn.
fn readelf(triple: &str, file: &Path) -> Facts {
    let out =
        Command::new(tool(&format!("{triple}-readelf"))).arg("-dW").arg(file).output().unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{}: {}", file.display(), text(&out));
    let mut f = Facts::default();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let value = || {
            let v = line.split_once('[').unwrap().1.trim_end();
            v.strip_suffix(']').unwrap().to_string()
        };
        if line.contains("(NEEDED)") {
            f.needed.push(value());
        } else if line.contains("(RUNPATH)") {
            f.runpath = Some(value());
        } else if line.contains("(RPATH)") {
            f.rpath = Some(value());
        } else if line.contains("(SONAME)") {
            f.soname = Some(value());
        }
    }
    f
}

/// What the audit's JSON says of a file.
fn ours(file: &serde_json::Value) -> Facts {
    let d = &file["dynamic"];
    let text = |k: &str| d[k].as_str().map(str::to_string);
    Facts {
        needed: d["needed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect(),
        runpath: text("runpath"),
        rpath: text("rpath"),
        soname: text("soname"),
    }
}

fn audit(args: &[&str], files: &[PathBuf]) -> (Output, serde_json::Value) {
    let out = Command::new(INSPECT).args(args).args(files).output().unwrap();
    assert!(out.stdout.starts_with(b"{"), "{}", text(&out));
    let v = serde_json::from_slice(&out.stdout).unwrap();
    (out, v)
}

/// Regular files that are ELF shared objects (not linker scripts).
fn elf_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            std::fs::symlink_metadata(p).unwrap().is_file()
                && p.file_name().unwrap().to_string_lossy().contains(".so")
                && std::fs::read(p).unwrap().starts_with(b"\x7fELF")
        })
        .collect();
    files.sort();
    files
}

fn s390x_corpus() -> Vec<PathBuf> {
    let out = Command::new("bash")
        .arg(root().join("tests/tools/corpus.sh"))
        .arg("deb-s390x")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tests/tools/corpus.sh failed (needs Debian's mirror and `make tools`):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files: Vec<PathBuf> =
        String::from_utf8_lossy(&out.stdout).lines().map(PathBuf::from).collect();
    assert!(files.len() >= 6, "{files:?}");
    files
}

/// Each file's facts match readelf's, every file is a big-endian one of
/// `machine`, and no file failed.
fn assert_like_readelf(triple: &str, machine: u64, files: &[PathBuf], v: &serde_json::Value) {
    assert_eq!(v["failures"].as_array().unwrap().len(), 0, "{v}");
    let report = v["files"].as_array().unwrap();
    assert_eq!(report.len(), files.len(), "{v}");
    for f in files {
        let entry = report
            .iter()
            .find(|e| e["path"] == f.to_string_lossy().as_ref())
            .unwrap_or_else(|| panic!("{} not reported", f.display()));
        assert_eq!(entry["format"], "elf");
        assert_eq!(entry["dynamic"]["machine"], machine, "{}", f.display());
        assert_eq!(entry["dynamic"]["is64"], true, "{}", f.display());
        assert_eq!(ours(entry), readelf(triple, f), "{}", f.display());
    }
}

/// The check ids of the findings about `file`.
fn checks_of(v: &serde_json::Value, file: &Path) -> Vec<String> {
    let mut ids: Vec<String> =
        findings_of(v, file).iter().map(|f| f["check"].as_str().unwrap().to_string()).collect();
    ids.sort();
    ids.dedup();
    ids
}

fn findings_of(v: &serde_json::Value, file: &Path) -> Vec<serde_json::Value> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"] == file.to_string_lossy().as_ref())
        .cloned()
        .collect()
}

/// The NEEDED names the audit found nowhere for `file` (every finding
/// about it must be one of those).
/// Without a sysroot they are `needed-undecided` infos (that machine's
/// default folders are not here), with one `unresolved-needed` errors.
fn unresolved(v: &serde_json::Value, file: &Path, check: &str) -> Vec<String> {
    let mut names: Vec<String> = findings_of(v, file)
        .iter()
        .map(|f| {
            assert_eq!(f["check"], check, "{f}");
            let m = f["message"].as_str().unwrap();
            let name = m.strip_prefix("NEEDED ").unwrap().split(' ').next().unwrap();
            name.to_string()
        })
        .collect();
    names.sort();
    names
}

/// What the loader would not find for a file without RUNPATH or RPATH:
/// its NEEDED names that neither glibc nor the driver provide and that,
/// with a sysroot, are not in that sysroot's `lib` folder (sorted).
fn expected_unresolved(facts: &Facts, sysroot: Option<&Path>) -> Vec<String> {
    assert!(facts.runpath.is_none() && facts.rpath.is_none(), "{facts:?}");
    let mut names: Vec<String> = facts
        .needed
        .iter()
        .filter(|n| !nix_cuda_hooks::audit::linkage::provided_by_system(n))
        .filter(|n| !sysroot.is_some_and(|r| r.join("lib").join(n).exists()))
        .cloned()
        .collect();
    names.sort();
    names
}

/// Audits `files` (big-endian, 64-bit, `machine`) without and with the
/// machine's cross sysroot: facts as readelf reads them, findings exactly
/// the NEEDED libraries the loader would not find, exit 1 when there are
/// some and 0 otherwise. Returns how many files had such findings, without
/// and with the sysroot.
fn audit_set(triple: &str, machine: u64, name: &str, files: &[PathBuf]) -> (usize, usize) {
    let sysroot = PathBuf::from(format!("/usr/{triple}"));
    let mut counts = Vec::new();
    for root in [None, Some(sysroot.as_path())] {
        let mut args = vec!["--format", "json"];
        if let Some(r) = root {
            args.extend(["--sysroot", r.to_str().unwrap()]);
        }
        let (out, v) = audit(&args, files);
        assert_like_readelf(triple, machine, files, &v);
        let mut failing = 0;
        for f in files {
            let want = expected_unresolved(&readelf(triple, f), root);
            let check = if root.is_some() { "unresolved-needed" } else { "needed-undecided" };
            assert_eq!(unresolved(&v, f, check), want, "{} (sysroot {root:?})", f.display());
            failing += usize::from(!want.is_empty());
        }
        let status = if failing > 0 && root.is_some() { 1 } else { 0 };
        assert_eq!(out.status.code(), Some(status), "{}", text(&out));
        for finding in v["findings"].as_array().unwrap() {
            let message = finding["message"].as_str().unwrap();
            let target = format!("the file is for {name} (64-bit, big-endian)");
            assert!(message.contains(&target), "{message}");
        }
        counts.push(failing);
    }
    (counts[0], counts[1])
}

/// s390x: without a sysroot, NEEDED libraries are searched only through the
/// files' own search paths (none here), so libstdc++ (libgcc_s, the
/// loader) and OpenSSL's modules (libcrypto) are left unresolved; with the
/// cross sysroot, libcrypto alone is (Debian ships it beside libssl, where
/// no search path of these files looks, as the loader would not either).
#[test]
fn s390x_libraries_are_audited() {
    let files = s390x_corpus();
    let (without, with) = audit_set("s390x-linux-gnu", 22, "s390x", &files);
    assert!(without >= 5 && with >= 4 && with < without, "{without} {with}");
}

/// ppc64 (big-endian): the cross compiler's own sysroot, audited with
/// itself as `--sysroot`, is complete: exit 0, no finding. Without it,
/// the libraries that need more than glibc exit 1.
#[test]
fn ppc64_sysroot_libraries_are_audited() {
    let files = elf_files(Path::new("/usr/powerpc64-linux-gnu/lib"));
    assert!(files.len() >= 20, "{files:?}: run `make tools` (tests/tools/install.sh)");
    let (without, with) = audit_set("powerpc64-linux-gnu", 21, "ppc64", &files);
    assert!(without >= 5 && with == 0, "{without} {with}");
}

/// A program and libraries cross-built here for ppc64: `$ORIGIN` and the
/// sysroot resolve every NEEDED (exit 0); a library whose soname is
/// `libcuda.so.1` makes its user need the driver, which must be on its
/// RUNPATH (`missing-driver-runpath`, exit 1), as on any other machine.
#[test]
fn a_cross_built_ppc64_program_is_audited_with_its_sysroot() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("lib.c"), "int answer(void) { return 42; }\n").unwrap();
    std::fs::write(
        dir.join("main.c"),
        "int answer(void);\nint main(void) { return answer() - 42; }\n",
    )
    .unwrap();
    let gcc = tool("powerpc64-linux-gnu-gcc");
    sh(
        dir,
        &format!(
            "set -e; mkdir -p ok/lib ok/bin gpu/lib gpu/bin
             {gcc} -shared -fPIC -o ok/lib/libans.so lib.c
             {gcc} -o ok/bin/prog main.c -Lok/lib -lans -Wl,--enable-new-dtags,-rpath,'$ORIGIN/../lib'
             {gcc} -shared -fPIC -Wl,-soname,libcuda.so.1 -o gpu/lib/libcuda.so.1 lib.c
             {gcc} -o gpu/bin/prog main.c gpu/lib/libcuda.so.1 -Wl,--enable-new-dtags,-rpath,'$ORIGIN/../lib'",
            gcc = gcc.display()
        ),
    );
    let sysroot = ["--format", "json", "--sysroot", "/usr/powerpc64-linux-gnu"];
    let ok = vec![dir.join("ok")];
    let (out, v) = audit(&sysroot, &ok);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(v["findings"].as_array().unwrap().len(), 0, "{v}");
    let prog = dir.join("ok/bin/prog");
    let files = v["files"].as_array().unwrap();
    let entry = files.iter().find(|f| f["path"] == prog.to_string_lossy().as_ref()).unwrap();
    assert_eq!(ours(entry), readelf("powerpc64-linux-gnu", &prog));
    assert_eq!(entry["dynamic"]["kind"], "pie-executable", "{entry}");
    assert_eq!(entry["dynamic"]["interpreter"], "/lib64/ld64.so.1", "{entry}");

    let (out, v) = audit(&sysroot, &[dir.join("gpu")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let prog = dir.join("gpu/bin/prog");
    assert_eq!(checks_of(&v, &prog), ["missing-driver-runpath"], "{v}");
    assert_eq!(v["findings"].as_array().unwrap().len(), 1, "{v}");
}
