//! Cross builds: programs and libraries built here by Debian's cross
//! compilers for seven machines (both classes, both byte orders), patched by
//! `auto-add-driver-runpath` on this x86_64 machine, then checked by that
//! machine's own readelf (binutils-<triple>) and run under qemu-user with the
//! cross toolchain's sysroot as `QEMU_LD_PREFIX`, so that the machine's own
//! dynamic loader (glibc's, from the sysroot) reads the RUNPATH we wrote.
//!
//! The loader proof: `needs-driver` needs `libdrv.so`, which lives only in
//! the driver folder; it fails to start before the patch and runs after it.
//! Tools come from tests/tools/install.sh (`make tools`); a missing one fails.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

const LIB_C: &str = r#"
int answer(void) { return 42; }
const char *greeting(void) { return "hello from lib"; }
"#;

const DEP_C: &str = r#"
int answer(void);
int dep_answer(void) { return answer(); }
"#;

const MAIN_C: &str = r#"
#include <stdio.h>
int answer(void);
const char *greeting(void);
int main(void) { printf("%s %d\n", greeting(), answer()); return 0; }
"#;

const DEPMAIN_C: &str = r#"
#include <stdio.h>
int dep_answer(void);
int main(void) { printf("dep %d\n", dep_answer()); return 0; }
"#;

const PLAIN_C: &str = r#"
#include <stdio.h>
int main(void) { puts("plain"); return 0; }
"#;

/// One target machine.
struct Machine {
    /// GNU triple: `<triple>-gcc`, `<triple>-readelf`, `/usr/<triple>`.
    triple: &'static str,
    /// `qemu-<name>`.
    qemu: &'static str,
    /// How our report names the machine.
    name: &'static str,
    /// ELFCLASS64.
    #[allow(dead_code)]
    is64: bool,
}

/// What each file's search path is before patching (`None`: none), by the
/// build commands below, and which tag it has.
const OLD: &[(&str, Option<(&str, &str)>)] = &[
    ("lib/libans.so", None),
    ("lib/libdep.so", Some(("RUNPATH", "$ORIGIN"))),
    ("bin/pie", Some(("RUNPATH", "$ORIGIN/../lib"))),
    ("bin/rpath", Some(("RPATH", "$ORIGIN/../lib"))),
    ("bin/needs-driver", None),
    ("bin/plain", None),
];

fn build(m: &Machine, dir: &Path) -> bool {
    let gcc = tool(&format!("{}-gcc", m.triple));
    for (name, src) in
        [("lib.c", LIB_C), ("dep.c", DEP_C), ("main.c", MAIN_C), ("depmain.c", DEPMAIN_C)]
    {
        std::fs::write(dir.join(name), src).unwrap();
    }
    std::fs::write(dir.join("plain.c"), PLAIN_C).unwrap();
    let gcc = gcc.display();
    sh(
        dir,
        &format!(
            "set -e; mkdir -p out/lib out/bin drv/lib
             {gcc} -shared -fPIC -o drv/lib/libdrv.so -Wl,-soname,libdrv.so lib.c
             {gcc} -shared -fPIC -o out/lib/libans.so lib.c
             {gcc} -shared -fPIC -o out/lib/libdep.so dep.c -Lout/lib -lans \
                 -Wl,--enable-new-dtags,-rpath,'$ORIGIN'
             {gcc} -o out/bin/pie main.c -Lout/lib -lans \
                 -Wl,--enable-new-dtags,-rpath,'$ORIGIN/../lib'
             {gcc} -o out/bin/rpath depmain.c -Lout/lib -ldep -Wl,-rpath-link,out/lib \
                 -Wl,--disable-new-dtags,-rpath,'$ORIGIN/../lib'
             {gcc} -o out/bin/needs-driver main.c -Ldrv/lib -ldrv
             {gcc} -o out/bin/plain plain.c
             {gcc} -static -o out/bin/static plain.c"
        ),
    );
    // Debian's cross libcs ship rcrt1.o (static-pie) for some machines only.
    let static_pie = Path::new(&format!("/usr/{}/lib/rcrt1.o", m.triple)).exists();
    if static_pie {
        sh(dir, &format!("{gcc} -static-pie -o out/bin/static-pie plain.c"));
    }
    static_pie
}

/// Runs `prog` under qemu for the machine with its sysroot.
fn qemu(m: &Machine, dir: &Path, prog: &str) -> std::process::Output {
    Command::new(tool(&format!("qemu-{}", m.qemu)))
        .arg(prog)
        .current_dir(dir)
        .env("QEMU_LD_PREFIX", format!("/usr/{}", m.triple))
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap()
}

fn runs(m: &Machine, dir: &Path, prog: &str, want: &str) {
    let out = qemu(m, dir, prog);
    assert!(out.status.success(), "{}: {prog} under qemu: {}", m.name, text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{}: {prog}", m.name);
}

/// `(tag, value)` of the search path as the machine's own readelf shows it;
/// readelf must not warn.
fn machine_search_path(m: &Machine, file: &Path) -> Option<(String, String)> {
    let out =
        Command::new(tool(&format!("{}-readelf", m.triple))).arg("-dW").arg(file).output().unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{}: {}", file.display(), text(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    stdout.lines().find_map(|line| {
        ["RUNPATH", "RPATH"].iter().find(|t| line.contains(&format!("({t})"))).map(|t| {
            let v = line.split_once('[').unwrap().1.trim_end().trim_end_matches(']');
            (t.to_string(), v.to_string())
        })
    })
}

/// The search path we expect after adding `entry` to a file whose old one
/// is `old` (from [`OLD`], i.e. from how it was built).
fn expected(entry: &str, old: Option<(&str, &str)>) -> (String, String) {
    match old {
        Some((_, v)) => ("RUNPATH".into(), format!("{entry}:{v}")),
        None => ("RUNPATH".into(), entry.into()),
    }
}

fn cross(m: &Machine) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let static_pie = build(m, dir);
    for (file, old) in OLD {
        assert_eq!(
            machine_search_path(m, &dir.join("out").join(file)),
            old.map(|(t, v)| (t.to_string(), v.to_string())),
            "{}: {file} as built",
            m.name
        );
    }
    // The loader proof's baseline: without the driver entry it cannot start.
    let before = qemu(m, dir, "out/bin/needs-driver");
    assert!(!before.status.success(), "{}: needs-driver ran unpatched", m.name);
    runs(m, dir, "out/bin/pie", "hello from lib 42\n");
    let static_bytes = std::fs::read(dir.join("out/bin/static")).unwrap();

    // --check in JSON: every file named with its machine and driver rule.
    let r = bin(dir, &["--check", "--format", "json", "out"]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let files = v["report"]["files"].as_array().unwrap();
    // Nixpkgs' addDriverRunpath: `-32` for i686 only (NixOS's driver for
    // 32-bit programs on x86_64); armv7l's own driver is at /run/opengl-driver.
    let (rule, default_entry) = if m.name == "i686" {
        ("nixos-i686", "/run/opengl-driver-32/lib")
    } else {
        ("nixos", "/run/opengl-driver/lib")
    };
    let mut seen = Vec::new();
    for f in files {
        let path = f["path"].as_str().unwrap().trim_start_matches("out/").to_string();
        assert_eq!(f["machine"], m.name, "{}: {path}: {f}", m.name);
        match path.as_str() {
            "bin/static" => assert_eq!(f["skip"], "static", "{f}"),
            "bin/static-pie" => assert_eq!(f["skip"], "static-pie", "{f}"),
            _ => {
                assert_eq!(f["action"], "would-patch", "{}: {f}", m.name);
                assert_eq!(f["driver_rule"], rule, "{f}");
                assert_eq!(f["driver_entry"], default_entry, "{f}");
            }
        }
        seen.push(path);
    }
    let mut want: Vec<String> = OLD.iter().map(|(f, _)| f.to_string()).collect();
    want.push("bin/static".into());
    if static_pie {
        want.push("bin/static-pie".into());
    }
    want.sort();
    seen.sort();
    assert_eq!(seen, want, "{}", m.name);

    // The NixOS default, in place, on a copy.
    sh(dir, "cp -a out out-default");
    let r = bin(dir, &["--in-place", "out-default"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    for (file, old) in OLD {
        assert_eq!(
            machine_search_path(m, &dir.join("out-default").join(file)),
            Some(expected(default_entry, *old)),
            "{}: {file}",
            m.name
        );
    }
    runs(m, dir, "out-default/bin/pie", "hello from lib 42\n");
    runs(m, dir, "out-default/bin/rpath", "dep 42\n");

    // A driver folder that exists: the loader must find libdrv.so there.
    let drv = dir.join("drv");
    let drv_entry = format!("{}/lib", drv.display());
    let r = bin(dir, &["--driver-link", drv.to_str().unwrap(), "out"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    for (file, old) in OLD {
        assert_eq!(
            machine_search_path(m, &dir.join("out").join(file)),
            Some(expected(&drv_entry, *old)),
            "{}: {file}",
            m.name
        );
    }
    runs(m, dir, "out/bin/needs-driver", "hello from lib 42\n");
    runs(m, dir, "out/bin/pie", "hello from lib 42\n");
    runs(m, dir, "out/bin/rpath", "dep 42\n");
    runs(m, dir, "out/bin/plain", "plain\n");
    assert_eq!(std::fs::read(dir.join("out/bin/static")).unwrap(), static_bytes);
    runs(m, dir, "out/bin/static", "plain\n");
    if static_pie {
        runs(m, dir, "out/bin/static-pie", "plain\n");
    }

    // Idempotent: a second run changes no byte.
    let snap = snapshot(&dir.join("out"));
    let r = bin(dir, &["--driver-link", drv.to_str().unwrap(), "out"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(snap == snapshot(&dir.join("out")), "{}: a second run changed files", m.name);
}

macro_rules! machines {
    ($($test:ident: $triple:literal, $qemu:literal, $name:literal, $is64:literal;)*) => {$(
        #[test]
        fn $test() {
            cross(&Machine { triple: $triple, qemu: $qemu, name: $name, is64: $is64 });
        }
    )*};
}

machines! {
    aarch64: "aarch64-linux-gnu", "aarch64", "aarch64", true;
    armv7l: "arm-linux-gnueabihf", "arm", "armv7l", false;
    ppc64le: "powerpc64le-linux-gnu", "ppc64le", "ppc64le", true;
    ppc64_big_endian: "powerpc64-linux-gnu", "ppc64", "ppc64", true;
    riscv64: "riscv64-linux-gnu", "riscv64", "riscv64", true;
    s390x: "s390x-linux-gnu", "s390x", "s390x", true;
    i686: "i686-linux-gnu", "i386", "i686", false;
}

/// The audit under cross: an aarch64 library's NEEDED `libgcc_s.so.1` is not
/// found in this machine's folders (which hold an x86_64 one), only in an
/// explicit `--sysroot`; the message names the machine. A library found
/// through `$ORIGIN` resolves either way. Oracle for "resolved": the program
/// runs under qemu with that sysroot.
#[test]
fn audit_resolves_a_foreign_file_only_in_its_runpath_and_sysroot() {
    let m = Machine { triple: "aarch64-linux-gnu", qemu: "aarch64", name: "aarch64", is64: true };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("lib.c"), LIB_C).unwrap();
    std::fs::write(dir.join("main.c"), MAIN_C).unwrap();
    let gcc = tool(&format!("{}-gcc", m.triple));
    sh(
        dir,
        &format!(
            "set -e; mkdir -p out/lib out/bin
             {0} -shared -fPIC -o out/lib/libans.so lib.c -Wl,--no-as-needed -lgcc_s
             {0} -o out/bin/app main.c -Lout/lib -lans -Wl,-rpath,'$ORIGIN/../lib'",
            gcc.display()
        ),
    );
    let native = Path::new("/usr/lib/x86_64-linux-gnu/libgcc_s.so.1");
    assert!(native.exists(), "the x86_64 libgcc_s the audit must not take");
    let audit = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_cuda-elf-inspect"))
            .args(["--format", "json"])
            .args(extra)
            .arg(dir.join("out"))
            .env_remove("NIX_LOG_FD")
            .output()
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
        (out.status.code(), v)
    };
    // Without that machine's folders whether libgcc_s resolves cannot be
    // decided (issue 30): an info saying so, not an error.
    let (code, v) = audit(&[]);
    assert_eq!(code, Some(0), "{v}");
    let unresolved: Vec<&serde_json::Value> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "unresolved-needed" || f["check"] == "needed-undecided")
        .collect();
    assert_eq!(unresolved.len(), 1, "{v}");
    let f = unresolved[0];
    assert_eq!(f["check"], "needed-undecided", "{f}");
    assert_eq!(f["severity"], "info", "{f}");
    assert!(f["path"].as_str().unwrap().ends_with("out/lib/libans.so"), "{f}");
    assert_eq!(f["details"]["library"], "libgcc_s.so.1");
    let msg = f["message"].as_str().unwrap();
    assert!(msg.contains("the file is for aarch64 (64-bit, little-endian)"), "{msg}");
    assert!(msg.contains("--sysroot"), "{msg}");
    assert!(!msg.contains("x86_64-linux-gnu"), "{msg}");

    let sysroot = format!("/usr/{}", m.triple);
    let (code, v) = audit(&["--sysroot", &sysroot]);
    assert!(
        !v["findings"].as_array().unwrap().iter().any(|f| f["check"] == "unresolved-needed"),
        "{v}"
    );
    assert_eq!(code, Some(0), "{v}");
    runs(&m, dir, "out/bin/app", "hello from lib 42\n");
}

const KERNEL_CU: &str = r#"
__global__ void k(int *x) { x[threadIdx.x] += 1; }
int main() { return 0; }
"#;

/// Jetson awareness: nvcc builds x86_64 programs with device code for Orin
/// (sm_87, a Jetson capability) and for Hopper (sm_90). The first is a
/// finding on x86_64 (Jetson boards are aarch64); the second is not, unless
/// 8.7 is requested of it, a configuration error on x86_64. On aarch64 (NVIDIA's
/// SBSA cuRAND) 8.7 alone makes a Jetson build, where desktop SASS is a finding.
#[test]
fn jetson_capabilities_on_x86_64_and_sbsa_code_in_a_jetson_build_are_findings() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("k.cu"), KERNEL_CU).unwrap();
    let nvcc = tool("nvcc");
    sh(
        dir,
        &format!(
            "set -e; mkdir jet sbsa
             {0} -gencode arch=compute_87,code=sm_87 -o jet/orin k.cu
             {0} -gencode arch=compute_90,code=sm_90 -o sbsa/hopper k.cu",
            nvcc.display()
        ),
    );
    let audit = |extra: &[&str], what: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_cuda-elf-inspect"))
            .args(["--format", "json"])
            .args(extra)
            .arg(dir.join(what))
            .env_remove("NIX_LOG_FD")
            .env_remove("cudaCapabilities")
            .output()
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
        let found: Vec<serde_json::Value> = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == "jetson-capability-mismatch")
            .cloned()
            .collect();
        (out.status.code(), found)
    };
    let (_, found) = audit(&[], "jet");
    assert_eq!(found.len(), 1, "{found:?}");
    // Outside a build and nothing requested: someone else's file, an info
    // (tests/text_report.rs covers when it is a warning).
    assert_eq!(found[0]["severity"], "info", "dead weight, not a failure: {found:?}");
    let msg = found[0]["message"].as_str().unwrap();
    assert!(msg.contains("8.7") && msg.contains("x86_64 (64-bit, little-endian)"), "{msg}");
    assert_eq!(found[0]["details"]["arch"], "sm_87");
    assert!(audit(&[], "sbsa").1.is_empty());
    // 8.7 asked of an x86_64 build: a configuration error, one warning that
    // says so (the file is no Jetson build, so its sm_90 is not judged).
    let (code, found) = audit(&["--cuda-capabilities", "8.7"], "sbsa");
    assert_eq!(code, Some(1));
    assert_eq!(found.len(), 1, "{found:?}");
    let msg = found[0]["message"].as_str().unwrap();
    assert_eq!(found[0]["severity"], "warning", "{found:?}");
    assert!(msg.contains("a configuration error") && msg.contains("8.7"), "{msg}");
    assert!(msg.contains("x86_64"), "{msg}");
    assert!(audit(&["--cuda-capabilities", "9.0"], "sbsa").1.is_empty());
    // A real Jetson build (8.7 alone) of an aarch64 library: its desktop SASS
    // (sm_90 among them) is found, NVIDIA's, so an info; no configuration error.
    let corpus = Command::new("bash")
        .arg(common::root().join("tests/tools/corpus.sh"))
        .arg("curand12-aarch64")
        .output()
        .unwrap();
    assert!(corpus.status.success(), "{}", text(&corpus));
    let arm = String::from_utf8(corpus.stdout).unwrap();
    let arm = arm.lines().find(|l| l.ends_with("libcurand.so.10")).unwrap().to_string();
    let (_, found) = audit(&["--cuda-capabilities", "8.7", "--cuda-version", "12.8"], &arm);
    assert!(!found.is_empty());
    assert!(found.iter().all(|f| f["severity"] == "info"), "{found:?}");
    assert!(found.iter().any(|f| {
        let m = f["message"].as_str().unwrap();
        m.contains("a Jetson build (capabilities 8.7)") && m.contains("9.0 (sm_90)")
    }));
    assert!(!found.iter().any(|f| f["message"].as_str().unwrap().contains("configuration error")));
}

/// The default driver entry per machine is upstream's: Nixpkgs' own
/// addDriverRunpath/package.nix (read in place from the pinned files),
/// evaluated with Nixpkgs' real `lib.systems.elaborate` for each machine's
/// `lib.systems.examples` platform, gives the driver link; our JSON report
/// for a file of that machine must name the same entry.
#[test]
fn default_driver_entry_per_machine_is_upstreams_driver_link() {
    let nixpkgs = nixpkgs();
    let expr = format!(
        r#"let
  lib = import {nixpkgs}/lib;
  link = example: (import {nixpkgs}/pkgs/by-name/ad/addDriverRunpath/package.nix {{
    inherit lib;
    stdenv.hostPlatform = lib.systems.elaborate lib.systems.examples.${{example}};
    makeSetupHook = args: _file: args;
  }}).substitutions.driverLink;
in lib.concatMapStringsSep "\n" (e: "${{e}} ${{link e}}") [
  "aarch64-multiplatform" "armv7l-hf-multiplatform" "powernv" "ppc64" "riscv64"
  "s390x" "gnu32" "gnu64"
]"#
    );
    let out = Command::new(tool("nix-instantiate"))
        .args(["--eval", "--strict", "--raw", "--expr", &expr])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let links: std::collections::HashMap<String, String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (a, b) = l.split_once(' ').unwrap();
            (a.to_string(), b.to_string())
        })
        .collect();
    assert_eq!(links.len(), 8, "{links:?}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("plain.c"), PLAIN_C).unwrap();
    for (example, triple) in [
        ("aarch64-multiplatform", "aarch64-linux-gnu"),
        ("armv7l-hf-multiplatform", "arm-linux-gnueabihf"),
        ("powernv", "powerpc64le-linux-gnu"),
        ("ppc64", "powerpc64-linux-gnu"),
        ("riscv64", "riscv64-linux-gnu"),
        ("s390x", "s390x-linux-gnu"),
        ("gnu32", "i686-linux-gnu"),
        ("gnu64", "x86_64-linux-gnu"),
    ] {
        let gcc =
            if triple == "x86_64-linux-gnu" { tool("gcc") } else { tool(&format!("{triple}-gcc")) };
        sh(dir, &format!("rm -rf o; mkdir o; {} -o o/p plain.c", gcc.display()));
        let r = bin(dir, &["--check", "--format", "json", "o"]);
        let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        let f = &v["report"]["files"][0];
        assert_eq!(
            f["driver_entry"].as_str().unwrap(),
            format!("{}/lib", links[example]),
            "{example}: {f}"
        );
    }
}

/// Bad input across machines: a mixed-endian tree (x86_64 and big-endian
/// ppc64 libraries side by side) is patched in one run; a file for a machine
/// this project does not know (e_machine rewritten to 4242) is patched like
/// any other and named by its number; truncated files of a foreign and of an
/// unknown machine get the reader's error with the machine in it, and are
/// left byte-identical; the run's status says so (1).
#[test]
fn mixed_endian_trees_unknown_machines_and_truncated_foreign_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("lib.c"), LIB_C).unwrap();
    sh(
        dir,
        &format!(
            "set -e; mkdir -p mixed bad
             {} -shared -fPIC -o mixed/libbe.so lib.c
             {} -shared -fPIC -o mixed/lible.so lib.c
             cp mixed/lible.so mixed/libunknown.so
             {} -shared -fPIC -o bad/libarm.so lib.c",
            tool("powerpc64-linux-gnu-gcc").display(),
            tool("gcc").display(),
            tool("aarch64-linux-gnu-gcc").display()
        ),
    );
    let set_machine = |p: &Path, m: u16| {
        let mut d = std::fs::read(p).unwrap();
        d[18..20].copy_from_slice(&m.to_le_bytes());
        std::fs::write(p, d).unwrap();
    };
    set_machine(&dir.join("mixed/libunknown.so"), 4242);
    let r = bin(dir, &["--format", "json", "mixed"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let by_name = |n: &str| {
        v["report"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == format!("mixed/{n}"))
            .cloned()
            .unwrap()
    };
    assert_eq!(by_name("libbe.so")["machine"], "ppc64");
    assert_eq!(by_name("libunknown.so")["machine"], "e_machine 4242");
    for n in ["libbe.so", "lible.so", "libunknown.so"] {
        assert_eq!(by_name(n)["action"], "patched", "{n}");
    }
    let be = Machine { triple: "powerpc64-linux-gnu", qemu: "ppc64", name: "ppc64", is64: true };
    assert_eq!(
        machine_search_path(&be, &dir.join("mixed/libbe.so")),
        Some(("RUNPATH".into(), "/run/opengl-driver/lib".into()))
    );
    assert_eq!(
        search_path(&dir.join("mixed/lible.so")),
        Some(("RUNPATH".into(), "/run/opengl-driver/lib".into()))
    );

    // Truncated: an aarch64 library and one of an unknown machine, cut in
    // the program header table.
    sh(dir, "cp bad/libarm.so bad/libunknown.so");
    set_machine(&dir.join("bad/libunknown.so"), 4242);
    for f in ["bad/libarm.so", "bad/libunknown.so"] {
        let d = std::fs::read(dir.join(f)).unwrap();
        std::fs::write(dir.join(f), &d[..100]).unwrap();
    }
    let snap = snapshot(&dir.join("bad"));
    let r = bin(dir, &["bad"]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(
        stderr.contains("bad/libarm.so: truncated: program header")
            && stderr.contains("(an ELF file for aarch64 (64-bit, little-endian))"),
        "{stderr}"
    );
    assert!(
        stderr.contains("bad/libunknown.so: truncated")
            && stderr.contains("(an ELF file for unknown machine 4242 (64-bit, little-endian))"),
        "{stderr}"
    );
    assert!(snap == snapshot(&dir.join("bad")), "bad input was modified");
}
