//! `cuda-preflight` on this GPU-less machine (issue 32): the sandbox
//! configurations of the GPU matrix (tests/gpu/preflight-matrix.sh, whose
//! results are in docs/gpu-validation.md) built here as root in private
//! mount namespaces (`unshare -m`): a fresh `/dev` with nodes made by
//! `mknod`, a fresh `/run` with the driver link, driver folders of Debian's
//! real `libcuda1` packages (bookworm 535.261.03, trixie 550.163.01, from
//! tests/tools/corpus.sh), and the kernel's side (`/proc/devices`,
//! `/proc/driver/nvidia/version`) bound over `/proc` as the running module
//! would show it. Each runs as root and as an unprivileged user (`setpriv`).
//!
//! `driver-lacks-symbol` is checked on real programs, compiled here with
//! gcc against the 550 library, and the verdict is compared with what the
//! dynamic loader itself says when it binds them to each library
//! (`LD_BIND_NOW=1`: "undefined symbol: ...").

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::root;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_cuda-preflight");

/// The two driver releases' library folders (libcuda and the PTX JIT side
/// by side, as a driver folder holds them).
fn drivers() -> &'static (PathBuf, PathBuf) {
    static DIRS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    DIRS.get_or_init(|| {
        let o = Command::new("bash")
            .arg(root().join("tests/tools/corpus.sh"))
            .args(["libcuda535", "libcuda550"])
            .output()
            .unwrap();
        assert!(o.status.success(), "corpus.sh failed:\n{}", String::from_utf8_lossy(&o.stderr));
        let tmp = std::env::temp_dir().join(format!("preflight-drivers-{}", std::process::id()));
        let mut out = Vec::new();
        for (set, v) in [("libcuda535", "535.261.03"), ("libcuda550", "550.163.01")] {
            let dir = tmp.join(format!("driver-{v}/lib"));
            std::fs::create_dir_all(&dir).unwrap();
            let base = root().join(".cache/corpus/lib").join(set);
            for (pkg, lib) in
                [("libcuda1", "libcuda"), ("libnvidia-ptxjitcompiler1", "libnvidia-ptxjitcompiler")]
            {
                let file = base
                    .join(pkg)
                    .join(format!("usr/lib/x86_64-linux-gnu/nvidia/current/{lib}.so.{v}"));
                assert!(file.is_file(), "{} missing", file.display());
                let _ = std::fs::remove_file(dir.join(format!("{lib}.so.{v}")));
                std::os::unix::fs::symlink(&file, dir.join(format!("{lib}.so.{v}"))).unwrap();
                let _ = std::fs::remove_file(dir.join(format!("{lib}.so.1")));
                std::os::unix::fs::symlink(
                    format!("{lib}.so.{v}"),
                    dir.join(format!("{lib}.so.1")),
                )
                .unwrap();
            }
            out.push(dir);
        }
        (out[0].clone(), out[1].clone())
    })
}

/// One sandbox: what `/dev` holds, where `/run/opengl-driver` points,
/// which kernel module `/proc` shows, who runs the tool.
struct Sandbox<'a> {
    /// `name major minor mode` per node.
    nodes: &'a [(&'a str, u32, u32, &'a str)],
    /// The link's target (`None`: no link).
    link: Option<String>,
    /// The kernel module's version in `/proc/driver/nvidia/version`, and
    /// the majors `/proc/devices` lists (nvidia, nvidia-uvm).
    kernel: Option<(&'a str, u32, u32)>,
    user: &'a str,
}

/// Runs cuda-preflight in the sandbox; returns (exit code, error ids, warning ids).
fn preflight(sb: &Sandbox<'_>, extra: &[&str]) -> (i32, BTreeSet<String>, BTreeSet<String>) {
    preflight_with(sb, extra, None)
}

/// [`preflight`] with `LD_LIBRARY_PATH` set to `ld_path` for the tool.
fn preflight_with(
    sb: &Sandbox<'_>,
    extra: &[&str],
    ld_path: Option<&Path>,
) -> (i32, BTreeSet<String>, BTreeSet<String>) {
    let (code, errs, warns, _) = preflight_on(sb, extra, ld_path, None);
    (code, errs, warns)
}

/// [`preflight_with`] on a board whose `/etc/nv_tegra_release` (Jetson
/// Linux's) holds `tegra` (bound over it in the sandbox); also returns
/// the JSON.
fn preflight_on(
    sb: &Sandbox<'_>,
    extra: &[&str],
    ld_path: Option<&Path>,
    tegra: Option<&str>,
) -> (i32, BTreeSet<String>, BTreeSet<String>, Value) {
    let mut script = String::from(
        "set -e; h=$(mktemp -d); mount --bind /dev $h; mount -t tmpfs -o mode=755 tmpfs /dev\n\
         for n in null zero urandom; do touch /dev/$n; mount --bind $h/$n /dev/$n; done\n\
         mount -t tmpfs -o mode=755 tmpfs /run\n",
    );
    for (name, ma, mi, mode) in sb.nodes {
        script += &format!("mknod -m {mode} /dev/{name} c {ma} {mi}\n");
    }
    if let Some(t) = &sb.link {
        script += &format!("ln -s {t} /run/opengl-driver\n");
    }
    match sb.kernel {
        Some((v, nv, uvm)) => {
            script += &format!(
                "k=$(mktemp -d); printf 'Character devices:\\n  1 mem\\n{nv} nvidia-frontend\\n{uvm} nvidia-uvm\\n\\nBlock devices:\\n' >$k/devices\n\
                 mkdir $k/driver; mkdir $k/driver/nvidia; printf 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  {v}  Release Build\\nGCC version:  gcc\\n' >$k/driver/nvidia/version\n\
                 mount --bind $k/devices /proc/devices; mount --bind $k/driver /proc/driver\n"
            );
        }
        None => script += "mount -t tmpfs tmpfs /proc/driver\n",
    }
    let run = if sb.user == "root" {
        String::new()
    } else {
        "setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all ".into()
    };
    if let Some(line) = tegra {
        script += &format!(
            "e=$(mktemp -d); cp -a /etc/. $e/; printf '%s\\n' '{line}' >$e/nv_tegra_release; mount --bind $e /etc\n"
        );
    }
    script += &format!("exec {run}\"$@\"\n");
    let mut cmd = Command::new("unshare");
    cmd.env_remove("LD_LIBRARY_PATH");
    if let Some(p) = ld_path {
        cmd.env("LD_LIBRARY_PATH", p);
    }
    let o = cmd
        .args(["-m", "--propagation", "private", "bash", "-c", &script, "preflight-sandbox"])
        .arg(BIN)
        .args(["--format", "json", "--gpu-capability", "9.0"])
        .args(extra)
        .output()
        .unwrap();
    let code = o.status.code().unwrap_or(-1);
    let json: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}), exit {code}:\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    let ids = |status: &str| -> BTreeSet<String> {
        json["preflight"]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["status"] == status)
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(json["status"].as_i64(), Some(i64::from(code)), "status in JSON and exit code");
    let (errors, warnings) = (ids("error"), ids("warning"));
    (code, errors, warnings, json)
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// The driver's real device numbers (195 for the control and GPU nodes,
/// a dynamic major for nvidia-uvm): no driver answers on them here, so
/// opening fails with ENXIO, which is what a host without the module shows.
const REAL: &[(&str, u32, u32, &str)] = &[
    ("nvidiactl", 195, 255, "666"),
    ("nvidia0", 195, 0, "666"),
    ("nvidia-uvm", 238, 0, "666"),
    ("nvidia-uvm-tools", 238, 1, "666"),
];

/// Nodes whose numbers a driver answers on here: the memory devices
/// (1:3 /dev/null, 1:5 /dev/zero), with `/proc/devices` naming major 1 as
/// the nvidia majors: this machine's stand-in for a loaded module, so that
/// the rest of the checks can be seen passing.
const ANSWERING: &[(&str, u32, u32, &str)] = &[
    ("nvidiactl", 1, 3, "666"),
    ("nvidia0", 1, 5, "666"),
    ("nvidia-uvm", 1, 3, "666"),
    ("nvidia-uvm-tools", 1, 5, "666"),
];

fn link(v: &str) -> Option<String> {
    let (a, b) = drivers();
    let dir = if v == "535" { a } else { b };
    Some(dir.parent().unwrap().display().to_string())
}

const K550: Option<(&str, u32, u32)> = Some(("550.163.01", 1, 1));

#[test]
fn nothing_mounted() {
    // As root with no kernel module: nodes it could create are no help.
    let (code, errs, _) =
        preflight(&Sandbox { nodes: &[], link: None, kernel: None, user: "root" }, &[]);
    assert_eq!(code, 1);
    assert_eq!(errs, set(&["no-device-node", "no-driver-folder"]));
    // With the module loaded, root may create the nodes (libcuda does): warnings.
    let (code, errs, warns) =
        preflight(&Sandbox { nodes: &[], link: None, kernel: K550, user: "root" }, &[]);
    assert_eq!((code, errs), (1, set(&["no-driver-folder"])));
    assert_eq!(warns, set(&["no-device-node"]));
    let (code, errs, _) =
        preflight(&Sandbox { nodes: &[], link: None, kernel: K550, user: "nobody" }, &[]);
    assert_eq!((code, errs), (1, set(&["no-device-node", "no-driver-folder"])));
}

#[test]
fn nodes_without_driver_folder() {
    for user in ["root", "nobody"] {
        let (code, errs, _) =
            preflight(&Sandbox { nodes: ANSWERING, link: None, kernel: K550, user }, &[]);
        assert_eq!((code, errs), (1, set(&["no-driver-folder"])), "{user}");
    }
}

#[test]
fn real_device_numbers_without_module() {
    let (code, errs, _) =
        preflight(&Sandbox { nodes: REAL, link: link("550"), kernel: None, user: "nobody" }, &[]);
    assert_eq!((code, errs), (1, set(&["device-node-not-openable"])));
    // /proc/devices says uvm is 240, the node says 238: recreated wrongly.
    let (code, errs, _) = preflight(
        &Sandbox {
            nodes: REAL,
            link: link("550"),
            kernel: Some(("550.163.01", 195, 240)),
            user: "root",
        },
        &[],
    );
    assert_eq!(code, 1);
    assert!(errs.contains("device-node-wrong-major"), "{errs:?}");
}

#[test]
fn dangling_driver_link() {
    for user in ["root", "nobody"] {
        let sb = Sandbox {
            nodes: ANSWERING,
            link: Some("/nix/store/not-mounted-driver".into()),
            kernel: K550,
            user,
        };
        let (code, errs, _) = preflight(&sb, &[]);
        assert_eq!((code, errs), (1, set(&["driver-link-dangling"])), "{user}");
    }
}

#[test]
fn without_nvidia_uvm() {
    let nodes = &ANSWERING[..2];
    let (code, errs, warns) =
        preflight(&Sandbox { nodes, link: link("550"), kernel: K550, user: "root" }, &[]);
    assert_eq!((code, errs), (0, set(&[])));
    assert_eq!(warns, set(&["no-device-node"]));
    let (code, errs, _) =
        preflight(&Sandbox { nodes, link: link("550"), kernel: K550, user: "nobody" }, &[]);
    assert_eq!((code, errs), (1, set(&["no-device-node"])));
}

#[test]
fn other_driver_release_than_the_kernel_module() {
    for user in ["root", "nobody"] {
        let (code, errs, _) =
            preflight(&Sandbox { nodes: ANSWERING, link: link("535"), kernel: K550, user }, &[]);
        assert_eq!((code, errs), (1, set(&["driver-version-mismatch"])), "{user}");
    }
}

#[test]
fn an_older_libcuda_on_ld_library_path() {
    // The driver folder matches the kernel module, but LD_LIBRARY_PATH
    // puts the 535 library first: it is the one programs load (803).
    let (d535, _) = drivers();
    let sb = Sandbox { nodes: ANSWERING, link: link("550"), kernel: K550, user: "nobody" };
    let (code, errs, warns) = preflight_with(&sb, &[], Some(d535));
    assert_eq!((code, errs), (1, set(&["cuda-compat-older-than-kernel"])));
    assert_eq!(warns, set(&["libcuda-on-search-path"]));
}

/// cuda_compat on Jetson (docs/preflight.md): a newer libcuda on
/// `LD_LIBRARY_PATH` (the 550 library over a 535 driver and module) is
/// forward compatibility; on Jetson Linux R32 (JetPack 4) NVIDIA has none,
/// from R35 (JetPack 5) on it is supported. Off a Jetson the generic rule.
#[test]
fn cuda_compat_on_jetson() {
    let (_, d550) = drivers();
    let k535 = Some(("535.261.03", 1, 1));
    let sb = Sandbox { nodes: ANSWERING, link: link("535"), kernel: k535, user: "nobody" };
    let compat = |json: &Value| -> Vec<(String, String)> {
        json["preflight"]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["id"].as_str().unwrap().starts_with("cuda-compat"))
            .map(|c| (c["id"].as_str().unwrap().into(), c["message"].as_str().unwrap().into()))
            .collect()
    };
    let jp4 = "# R32 (release), REVISION: 7.4, GCID: 33514132, BOARD: t210ref, EABI: aarch64, DATE: Fri Jun  9 04:25:08 UTC 2023";
    let (code, errs, _, json) = preflight_on(&sb, &[], Some(d550), Some(jp4));
    assert_eq!((code, errs), (1, set(&["cuda-compat-jetson-unsupported"])), "{json}");
    assert!(compat(&json)[0].1.contains("Jetson Linux R32.7.4"), "{json}");
    let jp6 = "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025";
    let (code, errs, _, json) = preflight_on(&sb, &[], Some(d550), Some(jp6));
    assert_eq!((code, errs), (0, set(&[])), "{json}");
    let found = compat(&json);
    assert_eq!(found.len(), 1, "{json}");
    assert_eq!(found[0].0, "cuda-compat");
    assert!(found[0].1.contains("on Jetson Linux R36.4.3"), "{json}");
    // Not a Jetson: the data-center rule's wording.
    let (code, _, _, json) = preflight_on(&sb, &[], Some(d550), None);
    assert_eq!(code, 0, "{json}");
    assert!(compat(&json)[0].1.contains("data-center GPUs and Jetson only"), "{json}");
}

#[test]
fn everything_present() {
    for user in ["root", "nobody"] {
        let (code, errs, warns) =
            preflight(&Sandbox { nodes: ANSWERING, link: link("550"), kernel: K550, user }, &[]);
        assert_eq!((code, errs, warns), (0, set(&[]), set(&[])), "{user}");
    }
}

#[test]
fn node_not_readable_by_the_build_user() {
    let nodes =
        &[("nvidiactl", 1, 3, "600"), ("nvidia0", 1, 5, "666"), ("nvidia-uvm", 1, 3, "666")];
    let (code, errs, _) =
        preflight(&Sandbox { nodes, link: link("550"), kernel: K550, user: "nobody" }, &[]);
    assert_eq!((code, errs), (1, set(&["device-node-not-openable"])));
    let (code, _, _) =
        preflight(&Sandbox { nodes, link: link("550"), kernel: K550, user: "root" }, &[]);
    assert_eq!(code, 0);
}

/// A program importing `names` from libcuda, linked against the 550 library.
fn program(dir: &Path, name: &str, names: &[&str]) -> PathBuf {
    let (_, d550) = drivers();
    let decls: String = names.iter().map(|n| format!("extern int {n}();\n")).collect();
    let calls: String = names.iter().map(|n| format!("  if (argc > 9) {n}();\n")).collect();
    let src = dir.join(format!("{name}.c"));
    std::fs::write(
        &src,
        format!("{decls}int main(int argc, char **argv) {{\n{calls}  return 0;\n}}\n"),
    )
    .unwrap();
    let out = dir.join(name);
    let o = Command::new("gcc")
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", d550.display()))
        .arg("-l:libcuda.so.1")
        .output()
        .expect("gcc is missing");
    assert!(o.status.success(), "gcc: {}", String::from_utf8_lossy(&o.stderr));
    out
}

/// What the dynamic loader says when it binds `prog` to the driver in `dir`.
fn loader_verdict(prog: &Path, dir: &Path) -> Option<String> {
    let o =
        Command::new(prog).env("LD_LIBRARY_PATH", dir).env("LD_BIND_NOW", "1").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (!o.status.success()).then(|| {
        let at =
            err.find("undefined symbol: ").unwrap_or_else(|| panic!("not a symbol error: {err}"));
        err[at + 18..].split([',', ' ', '\n']).next().unwrap().to_string()
    })
}

fn lacking(prog: &Path, dir: &Path) -> (BTreeSet<String>, Value) {
    let o = Command::new(BIN)
        .args(["--format", "json", "--gpu-capability", "9.0", "--driver-folder"])
        .arg(dir)
        .arg(prog)
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&o.stdout).unwrap();
    let names = json["preflight"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == "driver-lacks-symbol")
        .map(|c| c["subject"].as_str().unwrap().to_string())
        .collect();
    (names, json)
}

#[test]
fn driver_lacks_symbol_on_two_releases() {
    let (d535, d550) = drivers();
    let tmp = tempfile::tempdir().unwrap();
    // Functions only the 550 library exports (its .dynsym against 535's):
    // green contexts and the CUDA 12.4 graph API, beside one both have.
    let newer = program(tmp.path(), "green", &["cuInit", "cuCtxFromGreenCtx"]);
    let graph = program(
        tmp.path(),
        "graph",
        &["cuInit", "cuStreamBeginCaptureToGraph", "cuGraphAddNode_v2"],
    );
    let old = program(tmp.path(), "old", &["cuInit", "cuMemCreate", "cuCtxCreate_v2"]);
    for prog in [&newer, &graph, &old] {
        for dir in [d535, d550] {
            let (ours, json) = lacking(prog, dir);
            let loader = loader_verdict(prog, dir);
            // The loader names the first symbol it cannot bind; we name all.
            match &loader {
                Some(sym) => assert!(
                    ours.contains(sym),
                    "{}: loader says {sym}, we say {ours:?}\n{json}",
                    prog.display()
                ),
                None => assert!(
                    ours.is_empty(),
                    "{}: loader binds all, we say {ours:?}",
                    prog.display()
                ),
            }
        }
    }
    assert_eq!(lacking(&newer, d535).0, set(&["cuCtxFromGreenCtx"]));
    assert_eq!(lacking(&graph, d535).0, set(&["cuGraphAddNode_v2", "cuStreamBeginCaptureToGraph"]));
    assert!(lacking(&old, d535).0.is_empty());
    assert!(lacking(&newer, d550).0.is_empty());
}

#[test]
fn asked_for_by_name_is_a_warning() {
    let (d535, _) = drivers();
    let tmp = tempfile::tempdir().unwrap();
    // A program that loads the driver itself and asks for functions by name.
    let src = tmp.path().join("byname.c");
    std::fs::write(
        &src,
        "#include <dlfcn.h>\n#include <stdio.h>\nint main(void) {\n  void *h = dlopen(\"libcuda.so.1\", RTLD_NOW);\n  if (!h) return 2;\n  const char *names[] = {\"cuInit\", \"cuGreenCtxCreate\"};\n  for (int i = 0; i < 2; i++) printf(\"%s %s\\n\", names[i], dlsym(h, names[i]) ? \"found\" : \"missing\");\n  return 0;\n}\n",
    )
    .unwrap();
    let prog = tmp.path().join("byname");
    let o = Command::new("gcc").arg(&src).arg("-o").arg(&prog).arg("-ldl").output().unwrap();
    assert!(o.status.success());
    let (_, json) = lacking(&prog, d535);
    let by_name: Vec<&Value> = json["preflight"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == "driver-lacks-symbol-by-name")
        .collect();
    assert_eq!(by_name.len(), 1, "{json}");
    assert_eq!(by_name[0]["status"], "warning");
    assert!(by_name[0]["message"].as_str().unwrap().contains("cuGreenCtxCreate"));
    assert!(!by_name[0]["message"].as_str().unwrap().contains("cuInit,"));
    // The program itself, run against the 535 library, finds exactly that one missing.
    let run = Command::new(&prog).env("LD_LIBRARY_PATH", d535).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout), "cuInit found\ncuGreenCtxCreate missing\n");
}

#[test]
fn bad_arguments_exit_2() {
    let o = Command::new(BIN).args(["--gpu-capability", "banana"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("banana"));
    let o = Command::new(BIN).arg("/nonexistent/closure").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/closure"));
    // --closure needs nix-store: without it, exit 2 naming the path.
    let o = Command::new(BIN)
        .args(["--closure", "/nix/store/x-absent"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--closure /nix/store/x-absent: cannot run nix-store"), "{err}");
}

/// The folders of the benchmark row's closure (benches/compare.sh,
/// "cuda-preflight"): cuRAND 12 and 13, cupy, cuFFT 11.4 from
/// tests/tools/corpus.sh, each wheel's folder whole.
fn corpus_closure() -> Vec<PathBuf> {
    let o = Command::new("bash")
        .arg(root().join("tests/tools/corpus.sh"))
        .args(["curand12", "curand13", "cupy", "cufft"])
        .output()
        .unwrap();
    assert!(o.status.success(), "corpus.sh failed:\n{}", String::from_utf8_lossy(&o.stderr));
    const LIB: &str = "/.cache/corpus/lib/";
    let dirs: BTreeSet<PathBuf> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|line| {
            let at = line.find(LIB).unwrap_or_else(|| panic!("not a corpus file: {line}"));
            let wheel = line[at + LIB.len()..].split('/').next().unwrap();
            PathBuf::from(&line[..at + LIB.len()]).join(wheel)
        })
        .collect();
    assert_eq!(dirs.len(), 4, "{dirs:?}");
    dirs.into_iter().collect()
}

/// The checks that say whether a file runs on the driver.
const VERDICTS: &[&str] = &[
    "driver-too-old-for-runtime",
    "ptx-too-new-for-driver",
    "driver-verdict-unknown",
    "no-code-for-capability",
];

/// The pre-flight's lighter reading (`Reading::DriverVerdicts`: no library
/// resolution, device code read until the verdicts are settled) against
/// the full audit (`Reading::Full`) on the benchmark's closure plus a
/// program importing a function the 535 driver lacks: every closure check
/// (verdicts, `driver-lacks-symbol`, `driver-lacks-symbol-by-name`) the
/// same, for both driver releases and GPUs of several capabilities.
#[test]
fn lighter_reading_gives_the_full_audits_checks() {
    use nix_cuda_hooks::audit::Reading;
    use nix_cuda_hooks::cuda::capabilities::Capability;
    use nix_cuda_hooks::preflight::{closure, driver};
    let tmp = tempfile::tempdir().unwrap();
    program(tmp.path(), "green", &["cuInit", "cuCtxFromGreenCtx"]);
    let mut paths = corpus_closure();
    paths.push(tmp.path().to_path_buf());
    let (d535, d550) = drivers();
    let mut seen = BTreeSet::new();
    for dir in [d535, d550] {
        let lib = driver::libcuda_in(dir).expect("libcuda.so.1 in the driver folder");
        for list in ["9.0", "12.0", "7.5", "8.6 9.0", "5.0", ""] {
            let caps: Vec<Capability> =
                list.split_whitespace().map(|c| Capability::parse(c).unwrap()).collect();
            let run = |reading| {
                let mut out = Vec::new();
                closure::check_with(&paths, Some(&lib), None, &caps, reading, &mut out);
                out.iter()
                    .map(|c| (c.id, c.status, c.subject.clone(), c.message.clone()))
                    .collect::<Vec<_>>()
            };
            let (light, full) = (run(Reading::DriverVerdicts), run(Reading::Full));
            assert_eq!(light, full, "driver {}, GPUs [{list}]", dir.display());
            seen.extend(full.iter().map(|c| c.0));
        }
    }
    // Not vacuous: cuRAND 13 needs libcudart.so.13, which neither driver
    // (CUDA 12.2, 12.4) loads; the program imports a 550-only function;
    // cupy asks by name for functions of CUDA 12.8.
    for id in ["driver-too-old-for-runtime", "driver-lacks-symbol", "driver-lacks-symbol-by-name"] {
        assert!(seen.contains(id), "{id} never seen: {seen:?}");
    }
}

/// The same verdicts reached by another path: `cuda-elf-inspect`, the full
/// audit as its own binary, with the driver's version and the GPUs'
/// capabilities given, against `cuda-preflight` on the same closure.
#[test]
fn preflight_verdicts_are_the_audits() {
    let paths = corpus_closure();
    let (d535, d550) = drivers();
    for (dir, version) in [(d535, "535.261.03"), (d550, "550.163.01")] {
        for caps in ["9.0", "12.0", "7.5"] {
            let o = Command::new(BIN)
                .args(["--format", "json", "--gpu-capability", caps, "--driver-folder"])
                .arg(dir)
                .args(&paths)
                .output()
                .unwrap();
            let json: Value = serde_json::from_slice(&o.stdout).unwrap();
            let ours: BTreeSet<(String, String, String)> = json["preflight"]["checks"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| VERDICTS.contains(&c["id"].as_str().unwrap()))
                .map(|c| {
                    let s = |k: &str| c[k].as_str().unwrap().to_string();
                    (s("id"), s("subject"), s("message"))
                })
                .collect();
            let o = Command::new(env!("CARGO_BIN_EXE_cuda-elf-inspect"))
                .args([
                    "--format",
                    "json",
                    "--driver-version",
                    version,
                    "--cuda-capabilities",
                    caps,
                ])
                .args(&paths)
                .output()
                .unwrap();
            let audit: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
                panic!("cuda-elf-inspect: {e}: {}", String::from_utf8_lossy(&o.stderr))
            });
            let theirs: BTreeSet<(String, String, String)> = audit["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| VERDICTS.contains(&f["check"].as_str().unwrap()))
                .map(|f| {
                    let s = |k: &str| f[k].as_str().unwrap().to_string();
                    (s("check"), s("path"), s("message"))
                })
                .collect();
            assert!(!theirs.is_empty(), "driver {version}, GPU {caps}: no verdict at all");
            assert_eq!(ours, theirs, "driver {version}, GPU {caps}");
        }
    }
}

/// `--closure STOREPATH` on a real store: a throwaway Nix store (Nix of
/// `.tools/nix`, no daemon) where `app` holds the `green` program (it
/// imports a function only the 550 driver has) and refers to `lib`, which
/// holds cuRAND 13's `libcurand.so.10` (it needs `libcudart.so.13`) and
/// cupy's runtime module (it asks for driver functions by name).
/// `nix-store -qR app` lists both: the pre-flight of `--closure app`
/// checks exactly what the pre-flight of the two store paths given as
/// PATHS checks, and `--closure lib` does not reach the program.
#[test]
fn closure_of_a_store_path_is_its_paths() {
    let (d535, _) = drivers();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for sub in ["etc", "home", "src"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    let green = program(&d.join("src"), "green", &["cuInit", "cuCtxFromGreenCtx"]);
    let curand = common::corpus("curand13", "libcurand.so.10");
    let cupy = common::corpus("cupy", "runtime.cpython-311-x86_64-linux-gnu.so");
    std::fs::write(
        d.join("copy.sh"),
        "PATH=/usr/bin:/bin; mkdir -p $out/lib; for f in $srcs; do cp $f $out/lib/; done\n\
         if [ -n \"$dep\" ]; then mkdir -p $out/nix-support; echo $dep > $out/nix-support/dep; fi\n",
    )
    .unwrap();
    let expr = format!(
        r#"let mk = name: attrs: derivation ({{
            inherit name; system = builtins.currentSystem; builder = "/bin/sh";
            args = [ "-e" "{d}/copy.sh" ];
          }} // attrs);
          lib = mk "lib" {{ srcs = "{curand} {cupy}"; }};
      in [ (mk "app" {{ srcs = "{green}"; dep = lib; }}) lib ]"#,
        d = d.display(),
        curand = curand.display(),
        cupy = cupy.display(),
        green = green.display(),
    );
    let mut args = vec!["--no-out-link"];
    for pair in ["sandbox", "false", "substituters", "", "build-users-group", ""].chunks(2) {
        args.extend(["--option", pair[0], pair[1]]);
    }
    args.extend(["-E", expr.as_str()]);
    let built = String::from_utf8(common::nix(d, "nix-build", &args)).unwrap();
    let built: Vec<&str> = built.lines().collect();
    assert_eq!(built.len(), 2, "{built:?}");
    let (app, lib) = (built[0], built[1]);
    let nix_bin = root().join(".tools/nix/bin");
    let run = |args: &[&str]| -> Value {
        let path = format!("{}:{}", nix_bin.display(), std::env::var("PATH").unwrap_or_default());
        let o = Command::new(BIN)
            .args(["--format", "json", "--gpu-capability", "9.0", "--driver-folder"])
            .arg(d535)
            .args(args)
            .env("PATH", path)
            .env("NIX_STORE", d.join("store"))
            .env("NIX_STORE_DIR", d.join("store"))
            .env("NIX_STATE_DIR", d.join("state"))
            .env("NIX_LOG_DIR", d.join("log"))
            .env("NIX_CONF_DIR", d.join("etc"))
            .env("HOME", d.join("home"))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", common::text(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let checks = |json: &Value| -> Vec<(String, String, String)> {
        let closure_ids = ["closure", "driver-lacks-symbol", "driver-lacks-symbol-by-name"];
        json["preflight"]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| {
                let id = c["id"].as_str().unwrap();
                VERDICTS.contains(&id) || closure_ids.contains(&id)
            })
            .map(|c| {
                let s = |k: &str| c[k].as_str().unwrap().to_string();
                (s("id"), s("subject"), s("message"))
            })
            .collect()
    };
    let by_closure = checks(&run(&["--closure", app]));
    let by_paths = checks(&run(&[app, lib]));
    assert_eq!(by_closure, by_paths);
    // What the two paths hold, each found: the program's import the 535
    // driver lacks, cuRAND 13's runtime, cupy's names asked for.
    let ids = |list: &[(String, String, String)], about: &str| -> BTreeSet<String> {
        list.iter()
            .filter(|c| c.1.contains(about) || c.2.contains(about))
            .map(|c| c.0.clone())
            .collect()
    };
    assert!(ids(&by_closure, &format!("{app}/lib/green")).contains("driver-lacks-symbol"));
    assert!(ids(&by_closure, &format!("{lib}/lib/libcurand.so.10"))
        .contains("driver-too-old-for-runtime"));
    assert!(ids(&by_closure, &format!("{lib}/lib/runtime.cpython"))
        .contains("driver-lacks-symbol-by-name"));
    // The closure of `lib` alone: its own files, not the program that refers to it.
    let lib_only = checks(&run(&["--closure", lib]));
    assert_eq!(lib_only, checks(&run(&[lib])));
    assert!(lib_only.iter().all(|c| !c.1.contains(app) && !c.2.contains(app)), "{lib_only:?}");
}
