//! Issue 30, items 4 and 6, on real files nobody here wrote (pinned wheels
//! fetched by tests/tools/corpus.sh): every warning rests on a reviewed fact
//! or a loader-proven failure, one finding per library, no provenance in
//! messages, fixes that name a package only when one provides the library
//! and it is not the caller's own, and text lines people can read.

mod common;
use common::{corpus, scratch};

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const OURS: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// The audit's JSON findings of `paths`.
fn findings(args: &[&str], paths: &[&Path]) -> Vec<Value> {
    let out =
        Command::new(OURS).args(args).arg("--format").arg("json").args(paths).output().unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", common::text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["findings"].as_array().unwrap().clone()
}

fn of<'a>(all: &'a [Value], check: &str) -> Vec<&'a Value> {
    all.iter().filter(|f| f["check"] == check).collect()
}

fn library(f: &Value) -> &str {
    f["details"]["library"].as_str().unwrap_or("")
}

/// CUPTI 12.8.90 holds its graphics-interop libraries as bare strings
/// (`libEGL.so`, `libX11.so.6`, ...), each twice, and its own name
/// `libcupti.so`: today 55 warnings, two per library, one telling CUPTI to
/// add cuda_cupti to itself. Bare strings are infos, one per library, never
/// the caller's own names.
#[test]
fn cupti_bare_strings_are_one_info_per_library_and_never_its_own_name() {
    let lib = corpus("cupti12", "libcupti.so.12");
    let all = findings(&[], &[&lib]);
    let unresolved = of(&all, "dlopen-unresolved");
    assert!(unresolved.len() >= 3, "CUPTI's interop strings resolve nowhere here: {all:#?}");
    for f in &unresolved {
        assert_eq!(f["severity"], "info", "a bare string is no reviewed fact: {f:#}");
    }
    let dl: Vec<&Value> =
        all.iter().filter(|f| f["check"].as_str().unwrap().starts_with("dlopen")).collect();
    let mut links: Vec<String> = dl
        .iter()
        .map(|f| {
            let l = library(f);
            l.find(".so").map_or(l, |i| &l[..i + 3]).to_string()
        })
        .collect();
    assert!(!links.iter().any(|l| l == "libcupti.so"), "CUPTI's own name is a finding: {dl:#?}");
    let n = links.len();
    links.sort();
    links.dedup();
    assert_eq!(links.len(), n, "two findings for one library (libX.so and libX.so.N): {dl:#?}");
    assert!(
        !all.iter().any(|f| f["message"].as_str().unwrap().contains("cuda_cupti")),
        "CUPTI is told to add its own package: {all:#?}"
    );
}

/// NCCL 2.28.9's plugin rows come from the facts table alone: no package
/// provides them, so no "add the folder that holds it", and the row's
/// provenance ("LD_DEBUG on H200 ...") stays out of the message. Its
/// InfiniBand library is a reviewed `recommended` row that rdma-core
/// provides: the one warning, naming rdma-core.
#[test]
fn nccl_table_rows_carry_no_provenance_and_no_false_fix() {
    let lib = corpus("nccl", "libnccl.so.2");
    let all = findings(&[], &[&lib]);
    let unresolved = of(&all, "dlopen-unresolved");
    for f in &all {
        let m = f["message"].as_str().unwrap();
        assert!(!m.contains("LD_DEBUG") && !m.contains("H200"), "provenance in a message: {m}");
    }
    let plugin =
        unresolved.iter().find(|f| library(f) == "libnccl-net.so").expect("libnccl-net.so");
    assert_eq!(plugin["severity"], "info");
    let m = plugin["message"].as_str().unwrap();
    assert!(!m.contains("add the folder that holds it"), "{m}");
    assert!(m.contains("no package provides it"), "{m}");
    let ib = unresolved
        .iter()
        .find(|f| library(f).starts_with("libibverbs.so"))
        .expect("libibverbs is unresolved here");
    assert_eq!(ib["severity"], "warning");
    assert!(ib["message"].as_str().unwrap().contains("rdma-core"));
    let warnings: Vec<&&Value> = unresolved.iter().filter(|f| f["severity"] == "warning").collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
}

/// One inode under three names in one folder (as Mesa ships each DRI
/// driver under 13): one file to the loader, one set of findings, on the
/// first name, saying how many others share it.
#[test]
fn hard_links_of_one_inode_are_reported_once() {
    let lib = corpus("nccl", "libnccl.so.2");
    let dir = scratch();
    for name in ["a.so", "b.so", "c.so"] {
        std::fs::hard_link(&lib, dir.path().join(name)).unwrap();
    }
    let all = findings(&[], &[dir.path()]);
    let net: Vec<&Value> = of(&all, "dlopen-unresolved")
        .into_iter()
        .filter(|f| library(f) == "libnccl-net.so")
        .collect();
    assert_eq!(net.len(), 1, "{net:#?}");
    assert!(net[0]["path"].as_str().unwrap().ends_with("/a.so"));
    assert!(net[0]["message"]
        .as_str()
        .unwrap()
        .contains("also 2 other hard links of this file: b.so, c.so"));
    assert!(all.iter().all(|f| f["path"].as_str().unwrap().ends_with("/a.so")), "{all:#?}");
}

/// The text report of CUPTI and NCCL: the search list once per file, every
/// line at most 200 characters (`report::wrap::WIDTH`; issue 30: at most
/// 300; real reports had lines of 440 to 3052).
#[test]
fn text_prints_each_search_list_once_and_no_long_lines() {
    let cupti = corpus("cupti12", "libcupti.so.12");
    let nccl = corpus("nccl", "libnccl.so.2");
    let out = Command::new(OURS)
        .arg("--cuda-capabilities")
        .arg("9.0")
        .arg(&cupti)
        .arg(&nccl)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let longest = text.lines().map(|l| l.chars().count()).max().unwrap();
    assert!(
        longest <= nix_cuda_hooks::report::wrap::WIDTH,
        "a line of {longest} characters:\n{text}"
    );
    for file in [&cupti, &nccl] {
        let name = file.display().to_string();
        let section = text.split(&format!("\n{name}\n")).nth(1).expect("the file's section");
        let section = section.split("\n\n").next().unwrap();
        assert_eq!(section.matches("searched [1]:").count(), 1, "{section}");
        assert!(section.matches("(searched [1])").count() >= 3, "{section}");
        assert!(!section.contains("(searched /"), "{section}");
    }
}

/// The lines of `text` longer than `report::wrap::WIDTH` characters.
fn long_lines(text: &str) -> Vec<(usize, &str)> {
    let width = nix_cuda_hooks::report::wrap::WIDTH;
    text.lines().map(|l| (l.chars().count(), l)).filter(|(n, _)| *n > width).collect()
}

/// Every line a text format prints for people, on real files, is at most
/// `report::wrap::WIDTH` (200) characters (issue 30: at most 300): the
/// audit's text with and without a driver (its device-code section, not
/// only its findings), the same report as build-log lines inside a build,
/// and `--summary`. cuFFT 11.4.1.4 is laid out as Nixpkgs lays out its
/// `-lib` output, under a store-like name: there its device-code line (19
/// SASS architectures, 6 PTX, link stubs, LTO-IR) was 330 characters (the
/// survey's longest line, 348, was cuSPARSE 12.5's such line), and NCCL's
/// one warning was a build-log line of 529.
#[test]
fn no_line_people_read_is_longer_than_the_wrap_width() {
    let dir = scratch();
    let out = dir.path().join("0c7xgv7n2pn1ljvm3xrjjk2x2bbvyq1f-libcufft-11.4.1.4-lib/lib");
    std::fs::create_dir_all(&out).unwrap();
    let cufft = out.join("libcufft.so.11");
    std::fs::hard_link(corpus("cufft", "libcufft.so.11"), &cufft).unwrap();
    let files = [
        cufft,
        corpus("cupti12", "libcupti.so.12"),
        corpus("nccl", "libnccl.so.2"),
        corpus("cudnn910", "libcudnn_adv.so.9"),
        corpus("cudart12", "libcudart.so.12"),
        corpus("deb-ffmpeg", "libavcodec.so.59.37.100"),
    ];
    let caps = ["--cuda-capabilities", "8.0;9.0"];
    let driver = ["--cuda-capabilities", "8.0;9.0", "--driver-version", "470.256.02"];
    for args in [&caps[..], &driver[..], &["--summary"][..]] {
        let out = Command::new(OURS).args(args).args(&files).output().unwrap();
        assert!(matches!(out.status.code(), Some(0 | 1)), "{args:?}: {}", common::text(&out));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.lines().count() > 20, "{args:?}: {text}");
        assert_eq!(long_lines(&text), [], "{args:?}:\n{text}");
    }
    // The device-code section was wrapped, not cut: cuFFT's SASS all there.
    let out = Command::new(OURS).args(caps).arg(&files[0]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let device = text.split("\n\n").next().unwrap().replace("\n      ", " ");
    assert!(
        device.contains("sm_50 sm_53 sm_60") && device.contains("sm_101 sm_120; PTX"),
        "{text}"
    );
    // Inside a build the log lines are the text report: every level
    // logged, each line still `LEVEL: cudaElfInspect: ...`.
    for args in [&caps[..], &driver[..]] {
        let out = Command::new(OURS)
            .env("NIX_LOG_FD", "2")
            .env("NIX_DEBUG", "7")
            .args(args)
            .args(&files)
            .output()
            .unwrap();
        assert!(matches!(out.status.code(), Some(0 | 1)), "{args:?}: {}", common::text(&out));
        let log = String::from_utf8(out.stderr).unwrap();
        assert!(log.lines().count() > 20, "{args:?}: {log}");
        assert_eq!(long_lines(&log), [], "{args:?}:\n{log}");
        for line in log.lines() {
            let level = line.split(": ").next().unwrap();
            assert!(["ERROR", "WARN", "INFO"].contains(&level), "{line}");
            assert!(line[level.len()..].starts_with(": cudaElfInspect: "), "{line}");
        }
        // The search list is printed once per file, not per finding.
        assert!(!log.contains("(searched /"), "{log}");
    }
}

/// `--format github` shows 10 annotations per level: on CUPTI 12.8.90 and
/// NCCL 2.28.9 the warning slots were filled by bare-string dlopen targets
/// (CUPTI alone had 55 warnings). Every warning shown now rests on a
/// reviewed fact (NCCL's `recommended` InfiniBand library) or is no dlopen
/// finding at all, and every warning fits in the slots.
#[test]
fn github_warning_slots_hold_no_bare_string_noise() {
    let cupti = corpus("cupti12", "libcupti.so.12");
    let nccl = corpus("nccl", "libnccl.so.2");
    let out = Command::new(OURS)
        .args(["--format", "github", "--cuda-capabilities", "9.0"])
        .arg(&cupti)
        .arg(&nccl)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let warnings: Vec<&str> = text.lines().filter(|l| l.starts_with("::warning ")).collect();
    assert!(!warnings.is_empty() && warnings.len() < 10, "{text}");
    for w in &warnings {
        if w.contains("title=dlopen-") {
            assert!(w.contains("(recommended, named at"), "a warning without a reviewed fact: {w}");
        }
    }
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("libnccl.so.2,title=dlopen-unresolved::dlopens libibverbs.so.1")),
        "{text}"
    );
    // Every warning of the report is annotated: none was left out.
    let all = findings(&["--cuda-capabilities", "9.0"], &[&cupti, &nccl]);
    let json_warnings = all.iter().filter(|f| f["severity"] == "warning").count();
    assert_eq!(warnings.len(), json_warnings, "{text}");
}

/// cuDNN 9.10's libcudnn_adv.so.9 audited for 9.0: its only code for a 9.0
/// GPU is SASS sm_90a (the coverage line says so), which today is called
/// "not requested".
#[test]
fn arch_specific_code_for_a_requested_capability_is_requested() {
    let lib = corpus("cudnn910", "libcudnn_adv.so.9");
    let all = findings(&["--cuda-capabilities", "9.0"], &[&lib]);
    let arch: Vec<&str> = of(&all, "unrequested-arch")
        .iter()
        .map(|f| f["details"]["arch"].as_str().unwrap())
        .collect();
    assert!(arch.contains(&"sm_80"), "sm_80 is unrequested: {arch:?}");
    assert!(!arch.contains(&"sm_90a"), "sm_90a serves the requested 9.0: {arch:?}");
    assert!(of(&all, "no-code-for-capability").is_empty(), "{all:#?}");
}

/// cuDNN 9.10 and NCCL 2.28.9 carry SASS up to sm_120 and compute_120 PTX:
/// no GPU newer than 9.0 (Jetson's aside, on an x86_64 file) gets nothing,
/// so "else newer GPUs get nothing" is untrue of them.
#[test]
fn forward_compat_is_not_claimed_missing_where_newer_gpus_get_code() {
    for (set, file) in [("cudnn910", "libcudnn_adv.so.9"), ("nccl", "libnccl.so.2")] {
        let lib = corpus(set, file);
        let all = findings(&["--cuda-capabilities", "8.0;9.0"], &[&lib]);
        assert!(of(&all, "missing-forward-compat-ptx").is_empty(), "{file}: {all:#?}");
    }
}

/// The folders a dlopen-unresolved message says were searched are those
/// this machine's glibc searches: on Debian x86_64 the multiarch folders,
/// `/lib` and `/usr/lib`, never `/lib64` (LD_DEBUG: system search
/// path=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/lib:/usr/lib).
#[test]
fn searched_folders_are_the_ones_this_glibc_searches() {
    assert!(
        Path::new("/lib/x86_64-linux-gnu/libc.so.6").exists(),
        "this test describes a Debian multiarch x86_64 machine"
    );
    let lib = corpus("cupti12", "libcupti.so.12");
    let all = findings(&[], &[&lib]);
    let f = of(&all, "dlopen-unresolved").into_iter().next().expect("an unresolved target");
    let m = f["message"].as_str().unwrap();
    let list = m.split("(searched ").nth(1).unwrap().split(')').next().unwrap();
    let dirs: Vec<&str> = list.split(':').collect();
    assert!(dirs.contains(&"/lib/x86_64-linux-gnu") && dirs.contains(&"/usr/lib"), "{list}");
    assert!(!dirs.contains(&"/lib64") && !dirs.contains(&"/usr/lib64"), "{list}");
}

/// NVIDIA's aarch64 CUPTI audited on this x86_64 machine without
/// `--sysroot`: its NEEDED libraries may be in that machine's default
/// folders, which are not here. Undecidable: infos that say to give
/// `--sysroot`, no "searched nothing to search" errors.
#[test]
fn a_foreign_file_without_sysroot_is_undecided_not_failing() {
    let lib = corpus("cupti12-aarch64", "libcupti.so.12");
    let out = Command::new(OURS).args(["--format", "json"]).arg(&lib).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let all = v["findings"].as_array().unwrap();
    assert!(of(all, "unresolved-needed").is_empty(), "{all:#?}");
    let undecided = of(all, "needed-undecided");
    assert!(!undecided.is_empty(), "{all:#?}");
    for f in &undecided {
        assert_eq!(f["severity"], "info");
        assert!(f["message"].as_str().unwrap().contains("--sysroot"), "{f}");
    }
    // The one error left is a true one: CUPTI dlopens driver libraries and
    // has no driver RUNPATH (issue 30 item 1); none is about NEEDED.
    for f in all.iter().filter(|f| f["severity"] == "error") {
        assert_eq!(f["check"], "missing-driver-runpath", "{f}");
    }
}

/// Debian's user-space driver (`libcuda1` 535.261.03 of bookworm and
/// 550.163.01 of trixie, non-free): the driver's own `libcuda.so` was told
/// it lacks the driver link (an error: "the load fails") for dlopening its
/// own sibling libraries, which it finds in the folder it is installed in,
/// and got the kernel's vDSO names it holds (`linux-vdso.so`,
/// `linux-gate.so`) as dlopen targets found nowhere. The oracles: readelf's
/// SONAME says the file is the driver itself, and the vDSO strings are in
/// the file (so the old reading reported them).
#[test]
fn the_driver_itself_lacks_no_driver_link_and_dlopens_no_vdso() {
    for (set, version) in [("libcuda535", "535.261.03"), ("libcuda550", "550.163.01")] {
        let lib = corpus(set, &format!("libcuda.so.{version}"));
        let dynamic = Command::new("readelf").arg("-dW").arg(&lib).output().unwrap();
        assert!(dynamic.status.success(), "{}", common::text(&dynamic));
        assert!(
            String::from_utf8_lossy(&dynamic.stdout).contains("Library soname: [libcuda.so.1]"),
            "{}: not the driver's libcuda.so.1",
            lib.display()
        );
        let bytes = std::fs::read(&lib).unwrap();
        for vdso in [&b"linux-vdso.so\0"[..], b"linux-gate.so\0"] {
            assert!(memchr_find(&bytes, vdso), "{}: lacks {vdso:?}", lib.display());
        }
        let all = findings(&[], &[&lib]);
        assert!(of(&all, "missing-driver-runpath").is_empty(), "{set}: {all:#?}");
        let vdso: Vec<&Value> = all.iter().filter(|f| library(f).starts_with("linux-")).collect();
        assert!(vdso.is_empty(), "{set}: the vDSO is no dlopen target: {vdso:#?}");
    }
}

fn memchr_find(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `missing-forward-compat-ptx` on prebuilt code is an info: CUPTI 12.8.90
/// (NVIDIA's redistributable `libcupti.so.12`, readelf's SONAME) has SASS
/// and no PTX, and nobody packaging it can add PTX; the same bytes as the
/// output of a Nix build that compiles its code stay a warning, and as the
/// output of one that builds nothing (`dontBuild`, the redist builder's
/// setting) are an info.
#[test]
fn forward_compat_on_prebuilt_code_is_an_info() {
    let lib = corpus("cupti12", "libcupti.so.12");
    let dynamic = Command::new("readelf").arg("-dW").arg(&lib).output().unwrap();
    assert!(String::from_utf8_lossy(&dynamic.stdout).contains("Library soname: [libcupti.so.12]"));
    let caps = ["--cuda-capabilities", "8.0;9.0"];
    let fwd = |all: &[Value]| -> Vec<String> {
        of(all, "missing-forward-compat-ptx")
            .iter()
            .map(|f| f["severity"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(fwd(&findings(&caps, &[&lib])), ["info"]);
    // The same file as a build's output, under another name: inside a build
    // the build's word decides (its SONAME is not looked at).
    let out = scratch();
    let file = out.path().join("lib/libmine.so");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::copy(&lib, &file).unwrap();
    let in_build = |extra: &[(&str, &str)]| {
        let mut cmd = Command::new(OURS);
        cmd.env_remove("NIX_ATTRS_JSON_FILE")
            .env("outputs", "out")
            .env("out", out.path())
            .args(caps)
            .args(["--format", "json"])
            .arg(&file);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let o = cmd.output().unwrap();
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", common::text(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        fwd(v["findings"].as_array().unwrap())
    };
    assert_eq!(in_build(&[]), ["warning"]);
    assert_eq!(in_build(&[("dontBuild", "1")]), ["info"]);
    // Audited after the fact, the copy is still NVIDIA's by its SONAME. (A
    // file with no such evidence keeps the warning: tests/audit.rs's
    // snapshot, an nvcc-built program audited outside a build.)
    assert_eq!(fwd(&findings(&caps, &[&file])), ["info"]);
}
