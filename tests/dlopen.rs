//! The dlopen pass (docs/dlopen.md) on code nobody here wrote and against
//! oracles we do not compute: the loads a GPU run of PyTorch showed under
//! `LD_DEBUG` (tests/data/dlopen-observed.tsv) on the wheels of the same
//! versions; Debian 13's libsystemd `.note.dlopen` notes as Python's json
//! reads them from objcopy's dump; gcc-built programs that really dlopen,
//! run in split trees before and after patchelf gives the caller a
//! RUNPATH; `nix-store --dump` NARs of those trees; hostile files built
//! with gcc and objcopy.

mod common;
use common::corpus;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const OURS: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// The library API's scan of one file, as the audit runs it.
fn scan(path: &Path, version: Option<&str>) -> nix_cuda_hooks::dlopen::Scan {
    let bytes = std::fs::read(path).unwrap();
    let elf = nix_cuda_hooks::elf::Elf::parse(&bytes).unwrap();
    let d = nix_cuda_hooks::elf::dynamic::facts(&elf).unwrap();
    nix_cuda_hooks::dlopen::scan(&elf, d.soname.as_deref(), version, &|_| {})
}

/// The audit's JSON findings `(check, library)` for `paths`.
fn findings(args: &[&str], paths: &[&Path]) -> (Value, BTreeSet<(String, String)>) {
    let out = common::outside_build(Command::new(OURS).arg("--format").arg("json").args(args))
        .args(paths)
        .output()
        .unwrap();
    assert!(out.status.code().is_some_and(|c| c <= 1), "{}", common::text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let set = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"].as_str().unwrap().starts_with("dlopen-"))
        .map(|f| {
            let lib = f["details"]["library"].as_str().unwrap_or("").to_string();
            (f["check"].as_str().unwrap().to_string(), lib)
        })
        .collect();
    (v, set)
}

#[test]
fn every_load_the_gpu_run_saw_is_predicted_for_the_libraries_we_have() {
    let observed =
        std::fs::read_to_string(common::root().join("tests/data/dlopen-observed.tsv")).unwrap();
    // The caller files of the same versions; cuDNN's full version is what
    // its file name carries in a Nix output (libcudnn.so.9.19.0).
    let callers = [
        ("libcudnn.so.9", corpus("cudnn-full", "libcudnn.so.9"), Some("9.19.0")),
        ("libcudnn_graph.so.9", corpus("cudnn-full", "libcudnn_graph.so.9"), Some("9.19.0")),
        ("libnccl.so.2", corpus("nccl", "libnccl.so.2"), None),
    ];
    let mut checked = 0;
    for (caller, path, version) in &callers {
        let s = scan(path, *version);
        assert!(s.imports.is_some(), "{caller} imports dlopen (readelf agrees)");
        let asked: BTreeSet<&str> =
            s.targets.iter().flat_map(|t| t.asked.iter().map(String::as_str)).collect();
        for line in observed.lines().filter(|l| !l.starts_with('#')) {
            let cols: Vec<&str> = line.split('\t').collect();
            if cols[0] != *caller {
                continue;
            }
            assert!(
                asked.contains(cols[1]),
                "{caller} loads {} on the GPU; predicted {asked:?}",
                cols[1]
            );
            checked += 1;
        }
    }
    assert!(checked >= 17, "only {checked} observed loads checked");
    // cuBLASLt of CUDA 12 (the run had 13): the driver, as the run saw.
    let lt = scan(&corpus("cublaslt", "libcublasLt.so.12"), None);
    assert!(lt.targets.iter().any(|t| t.soname == "libcuda.so.1"));
    // NVRTC's builtins, the Nixpkgs failure of NixOS/nixpkgs#296179.
    let nvrtc = scan(&corpus("nvrtc13", "libnvrtc.so.13"), None);
    let builtins = nvrtc.targets.iter().find(|t| t.soname == "libnvrtc-builtins.so.13.0").unwrap();
    assert_eq!(builtins.need, nix_cuda_hooks::dlopen::Need::Needed);
}

/// readelf's word on whether a file imports dlopen.
fn readelf_imports_dlopen(path: &Path) -> bool {
    let out = Command::new(common::tool("readelf"))
        .args(["-W", "--dyn-syms"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 8 && f[6] == "UND" && (f[7] == "dlopen" || f[7].starts_with("dlopen@"))
    })
}

#[test]
fn debian_libraries_that_dlopen_and_one_that_does_not() {
    let trixie = common::root().join(".tools/trixie/usr/lib/x86_64-linux-gnu");
    let systemd = trixie.join("libsystemd.so.0");
    assert!(systemd.exists(), "{} is missing: run `make tools`", systemd.display());
    assert!(readelf_imports_dlopen(&systemd));
    // The oracle: objcopy's dump of the note section, read by Python's json.
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("note");
    common::sh(
        dir.path(),
        &format!(
            "objcopy -O binary --only-section=.note.dlopen {} {}",
            systemd.display(),
            dump.display()
        ),
    );
    let py = r#"
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); i = 0; out = []
while i + 12 <= len(b):
    n, d, t = struct.unpack_from('<III', b, i); i += 12
    name = b[i:i+n]; i += (n + 3) // 4 * 4
    desc = b[i:i+d]; i += (d + 3) // 4 * 4
    if name.rstrip(b'\0') == b'FDO' and t == 0x407c0c0a:
        for e in json.loads(desc.rstrip(b'\0')):
            out.append(e['soname'][0] + ' ' + e.get('priority', 'recommended'))
print('\n'.join(sorted(out)))
"#;
    let want = common::sh(
        dir.path(),
        &format!("python3 -c \"{}\" {}", py.replace('"', "\\\""), dump.display()),
    );
    let s = scan(&systemd, None);
    let mut got: Vec<String> = s
        .targets
        .iter()
        .map(|t| {
            let p = if t.need == nix_cuda_hooks::dlopen::Need::Needed { "required" } else { "x" };
            format!("{} {}", t.soname, p)
        })
        .collect();
    got.sort();
    let want: Vec<String> =
        want.lines().map(|l| l.replace(" recommended", " x").replace(" suggested", " x")).collect();
    assert!(!want.is_empty());
    assert_eq!(got, want);
    // libEGL (libglvnd) dlopens libX11.so.6 by a literal.
    let egl = Path::new("/usr/lib/x86_64-linux-gnu/libEGL.so.1");
    assert!(readelf_imports_dlopen(egl));
    assert!(scan(egl, None).targets.iter().any(|t| t.soname == "libX11.so.6"));
    // zlib imports no dlopen: no dlopen finding at all.
    let z = Path::new("/usr/lib/x86_64-linux-gnu/libz.so.1");
    assert!(!readelf_imports_dlopen(z));
    assert!(findings(&[], &[z]).1.is_empty());
}

/// Builds, in `dir`: `lib/libtarget.so.1` and `bin/caller` (gcc), the
/// caller dlopening `libtarget.so.1` by a literal (and holding
/// `libnotloaded.so.3` in a string no code loads); and `quiet/libquiet.so`,
/// which holds a soname string but imports no dlopen.
fn split_tree(dir: &Path) {
    let src = r#"
cat > target.c <<'EOF'
int target_answer(void) { return 42; }
EOF
cat > caller.c <<'EOF'
#include <dlfcn.h>
#include <stdio.h>
const char *unused = "libnotloaded.so.3";
int main(void) {
  void *h = dlopen("libtarget.so.1", RTLD_NOW);
  if (!h) { printf("dlopen failed: %s\n", dlerror()); return 3; }
  int (*f)(void) = (int (*)(void))dlsym(h, "target_answer");
  printf("%d %s\n", f(), unused);
  return 0;
}
EOF
cat > quiet.c <<'EOF'
const char *name = "libtarget.so.1";
EOF
mkdir -p lib bin quiet
gcc -shared -fPIC -Wl,-soname,libtarget.so.1 -o lib/libtarget.so.1 target.c
gcc -o bin/caller caller.c -ldl
gcc -shared -fPIC -o quiet/libquiet.so quiet.c
"#;
    common::sh(dir, src);
}

#[test]
fn a_split_tree_is_flagged_and_a_runpath_resolves_it_as_the_program_shows() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    split_tree(d);
    let caller = d.join("bin/caller");
    // Unpatched: the program cannot load its target, and the audit says so.
    let run = Command::new(&caller).output().unwrap();
    assert_eq!(run.status.code(), Some(3), "{}", common::text(&run));
    let (_, before) = findings(&[], &[&d.join("bin"), &d.join("lib"), &d.join("quiet")]);
    let unresolved = |l: &str| ("dlopen-unresolved".to_string(), l.to_string());
    assert!(before.contains(&unresolved("libtarget.so.1")), "{before:?}");
    assert!(before.contains(&unresolved("libnotloaded.so.3")), "{before:?}");
    // No finding for files that import no dlopen (libquiet holds the name).
    assert!(before.len() == 2, "{before:?}");
    // patchelf (the oracle writer) gives the caller a RUNPATH: the program
    // now loads it, and the audit agrees.
    let patchelf = common::tool("patchelf");
    common::sh(d, &format!("{} --set-rpath '$ORIGIN/../lib' bin/caller", patchelf.display()));
    let run = Command::new(&caller).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "42 libnotloaded.so.3");
    let (_, after) = findings(&[], &[&d.join("bin")]);
    assert!(
        after.contains(&("dlopen-resolved".to_string(), "libtarget.so.1".to_string())),
        "{after:?}"
    );
    assert!(after.contains(&unresolved("libnotloaded.so.3")));
    // --no-dlopen: nothing.
    assert!(findings(&["--no-dlopen"], &[&d.join("bin")]).1.is_empty());
}

#[test]
fn a_split_cudnn_tree_fails_and_a_runpath_fixes_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (sub, file) in [("a", "libcudnn.so.9"), ("b", "libcudnn_graph.so.9")] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
        std::fs::copy(corpus("cudnn-full", file), d.join(sub).join(file)).unwrap();
    }
    let lib = d.join("a/libcudnn.so.9");
    let (v, before) = findings(&[], &[&lib]);
    assert!(before.contains(&("dlopen-unresolved".into(), "libcudnn_graph.so.9".into())));
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["details"]["library"] == "libcudnn_graph.so.9")
        .unwrap();
    assert_eq!(f["severity"], "error", "{f}");
    let msg = f["message"].as_str().unwrap();
    assert!(msg.contains(".rodata+0x") && msg.contains("cudaPackages.cudnn"), "{msg}");
    let patchelf = common::tool("patchelf");
    common::sh(
        d,
        &format!("{} --set-rpath '$ORIGIN:$ORIGIN/../b' a/libcudnn.so.9", patchelf.display()),
    );
    let (_, after) = findings(&[], &[&lib]);
    assert!(after.contains(&("dlopen-resolved".into(), "libcudnn_graph.so.9".into())), "{after:?}");
}

#[test]
fn a_nar_of_the_tree_gives_the_tree_findings() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tree = d.join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    split_tree(&tree);
    let patchelf = common::tool("patchelf");
    common::sh(&tree, &format!("{} --set-rpath '$ORIGIN/../lib' bin/caller", patchelf.display()));
    for f in ["target.c", "caller.c", "quiet.c"] {
        std::fs::remove_file(tree.join(f)).unwrap();
    }
    let nix_store = common::root().join(".tools/nix/bin/nix-store");
    let out = Command::new(&nix_store)
        .args(["--dump"])
        .arg(&tree)
        .env("NIX_STATE_DIR", d.join("state"))
        .env("NIX_STORE_DIR", d.join("store"))
        .env("HOME", d)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::text(&out));
    let nar = d.join("tree.nar");
    std::fs::write(&nar, &out.stdout).unwrap();
    let (_, from_tree) = findings(&[], &[&tree]);
    let (_, from_nar) = findings(&[], &[&nar]);
    assert!(!from_tree.is_empty());
    assert_eq!(from_tree, from_nar);
}

/// A gcc-built library that imports dlopen, with `extra` objcopy
/// arguments (added sections) applied.
fn hostile(dir: &Path, extra: &str) -> PathBuf {
    common::sh(
        dir,
        &format!(
            "printf '#include <dlfcn.h>\\nvoid *f(void) {{ return dlopen(\"libok.so.1\", 2); }}\\n' > h.c && gcc -shared -fPIC -o base.so h.c -ldl && objcopy {extra} base.so hostile.so"
        ),
    );
    dir.join("hostile.so")
}

#[test]
fn ten_million_soname_strings_are_bounded_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 10,000,000 distinct soname-shaped strings, 150 MB of read-only data.
    let mut blob = Vec::with_capacity(160 << 20);
    for i in 0..10_000_000u32 {
        blob.extend_from_slice(format!("libx{i:08}.so.1\0").as_bytes());
    }
    std::fs::write(d.join("blob"), &blob).unwrap();
    drop(blob);
    let lib = hostile(
        d,
        "--add-section .rodata.big=blob --set-section-flags .rodata.big=alloc,readonly,contents",
    );
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M", OURS, "--format", "json"])
        .arg(&lib)
        .output()
        .unwrap();
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", common::text(&out)));
    let findings = v["findings"].as_array().unwrap();
    let incomplete = findings.iter().find(|f| f["check"] == "dlopen-incomplete").unwrap();
    assert!(incomplete["message"].as_str().unwrap().contains(".rodata.big+0x"), "{incomplete}");
    let n = findings.iter().filter(|f| f["check"] == "dlopen-unresolved").count();
    assert!(n <= nix_cuda_hooks::dlopen::MAX_TARGETS + 1, "{n}");
    let rss_kib: u64 =
        String::from_utf8_lossy(&out.stderr).trim().lines().last().unwrap().parse().unwrap();
    assert!(rss_kib < 150 * 1024, "peak RSS {rss_kib} KiB");
}

#[test]
fn broken_huge_and_cut_notes_are_findings_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let note = |desc: &[u8], descsz: u32| {
        let mut n = Vec::new();
        n.extend_from_slice(&4u32.to_le_bytes());
        n.extend_from_slice(&descsz.to_le_bytes());
        n.extend_from_slice(&0x407c_0c0au32.to_le_bytes());
        n.extend_from_slice(b"FDO\0");
        n.extend_from_slice(desc);
        while n.len() % 4 != 0 {
            n.push(0);
        }
        n
    };
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("broken", note(b"[{\"soname\": [\"liba.so.1\"", 24), "not the documented JSON"),
        ("huge", note(&vec![b' '; 70_000], 70_000), "more than"),
        ("cut", note(b"[]", 4096), "section ends"),
        ("shape", note(b"{\"soname\":\"x\"}\0\0", 16), "not the documented JSON"),
    ];
    for (name, bytes, says) in cases {
        let sub = d.join(name);
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("note"), &bytes).unwrap();
        let lib = hostile(&sub, "--add-section .note.dlopen=note");
        let (v, _) = findings(&[], &[&lib]);
        let f =
            v["findings"].as_array().unwrap().iter().find(|f| f["check"] == "dlopen-incomplete");
        let f = f.unwrap_or_else(|| panic!("{name}: {v}"));
        assert!(f["message"].as_str().unwrap().contains(says), "{name}: {f}");
        // The literal still counts.
        assert!(v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["details"]["library"] == "libok.so.1"));
    }
}

#[test]
fn dlopen_facts_list_the_targets_that_get_no_finding() {
    // cuBLASLt loads the driver's libcuda.so.1 (the GPU run saw it): a
    // target the machine provides gets no finding, but `--dlopen-facts`
    // lists it, resolved by the system, so that LD_DEBUG can be diffed.
    let lt = corpus("cublaslt", "libcublasLt.so.12");
    let run = |extra: &[&str]| -> Value {
        let out =
            Command::new(OURS).args(["--format", "json"]).args(extra).arg(&lt).output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", common::text(&out)))
    };
    let with = run(&["--dlopen-facts"]);
    let targets = with["files"][0]["dlopen"]["targets"].as_array().expect("dlopen facts");
    let cuda = targets.iter().find(|t| t["soname"] == "libcuda.so.1").expect("libcuda.so.1");
    assert_eq!(cuda["resolved"]["status"], "found", "{cuda}");
    assert_eq!(cuda["resolved"]["via"]["kind"], "system", "{cuda}");
    let findings = with["findings"].as_array().unwrap();
    assert!(!findings.iter().any(|f| f["check"].as_str().unwrap().starts_with("dlopen")
        && f["message"].as_str().unwrap().contains("libcuda.so.1")));
    // Opt-in: without the flag the facts carry no dlopen object.
    assert!(run(&[])["files"][0].get("dlopen").is_none());
}
