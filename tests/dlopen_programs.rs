//! Issue 21 on this machine, without a GPU: small C programs that dlopen
//! (fixtures/dlopen/: by a literal soname, by names computed at run time,
//! by a `.note.dlopen` note, and from a library rather than the program),
//! built by gcc and by Debian's cross compilers for aarch64, armhf and
//! s390x (big-endian), run under `LD_DEBUG=files` natively and under
//! qemu-user (which hands LD_DEBUG to the guest's own loader), and real
//! libraries nobody here wrote (NVIDIA's NVRTC, Debian's procps).
//!
//! The oracle is the loader: every "dynamically loaded by" line it prints
//! is compared with what `cuda-elf-inspect` predicts for that caller, and
//! the split trees (program and library in different folders) must fail at
//! the dlopen before `auto-add-driver-runpath --dlopen-search` and load the
//! library after it. The RUNPATH is read back by the machine's own readelf
//! and compared with what `patchelf --add-rpath` makes of the same file.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

/// One target machine: its gcc, readelf and, for a foreign one, qemu and
/// the cross sysroot.
struct Machine {
    name: &'static str,
    /// GNU triple of the cross toolchain; `None`: this machine's gcc.
    triple: Option<&'static str>,
    qemu: &'static str,
}

const NATIVE: Machine = Machine { name: "x86_64", triple: None, qemu: "" };
const AARCH64: Machine =
    Machine { name: "aarch64", triple: Some("aarch64-linux-gnu"), qemu: "aarch64" };
const ARMHF: Machine = Machine { name: "armv7l", triple: Some("arm-linux-gnueabihf"), qemu: "arm" };
const S390X: Machine = Machine { name: "s390x", triple: Some("s390x-linux-gnu"), qemu: "s390x" };

impl Machine {
    fn tool(&self, name: &str) -> PathBuf {
        match self.triple {
            Some(t) => tool(&format!("{t}-{name}")),
            None => tool(name),
        }
    }

    /// Runs `prog` (relative to `dir`) with `LD_DEBUG=files` and `env` for
    /// its loader: under qemu the variables go to the guest (`-E`), not to
    /// qemu's own (host) loader.
    fn run(&self, dir: &Path, prog: &str, env: &[(&str, &str)]) -> Output {
        let mut vars = vec![("LD_DEBUG", "files")];
        vars.extend_from_slice(env);
        let mut cmd = match self.triple {
            Some(t) => {
                let mut c = Command::new(tool(&format!("qemu-{}", self.qemu)));
                c.env("QEMU_LD_PREFIX", format!("/usr/{t}"));
                for (k, v) in &vars {
                    c.arg("-E").arg(format!("{k}={v}"));
                }
                c.arg(prog);
                c
            }
            None => Command::new(dir.join(prog)),
        };
        cmd.current_dir(dir).env_remove("LD_LIBRARY_PATH").env_remove("LD_DEBUG");
        if self.triple.is_none() {
            cmd.envs(vars.iter().copied());
        }
        cmd.output().unwrap()
    }

    /// The search path as this machine's readelf shows it (no warning).
    fn search_path(&self, file: &Path) -> Option<(String, String)> {
        let out = Command::new(self.tool("readelf")).arg("-dW").arg(file).output().unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{}: {}",
            file.display(),
            text(&out)
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        stdout.lines().find_map(|line| {
            ["RUNPATH", "RPATH"].iter().find(|t| line.contains(&format!("({t})"))).map(|t| {
                let v = line.split_once('[').unwrap().1.trim_end().trim_end_matches(']');
                (t.to_string(), v.to_string())
            })
        })
    }
}

/// The plugins: (file name, soname, answer).
const PLUGINS: &[(&str, Option<&str>, u32)] = &[
    ("libplug.so.1", Some("libplug.so.1"), 1),
    ("libplug1.so", None, 11),
    ("libplug2.so", None, 12),
    ("libnoteplug.so.1", Some("libnoteplug.so.1"), 7),
];

/// What each program prints when every dlopen works.
const WORKS: &[(&str, &str)] = &[
    ("bin/literal", "libplug.so.1 answer 1\n"),
    ("bin/computed", "libplug1.so answer 11\nlibplug2.so answer 12\n"),
    ("bin/note", "libnoteplug.so.1 answer 7\n"),
    ("bin/via-lib", "libplug.so.1 answer 1\n"),
];

/// Builds the fixtures for `m`: the programs in `out/bin`, the library that
/// dlopens in `out/lib` (the program finds it through `$ORIGIN/../lib`),
/// the plugins in `plugins` (relative to `dir`).
fn build(m: &Machine, dir: &Path, plugins: &str) {
    let gcc = m.tool("gcc");
    let src = root().join("fixtures/dlopen");
    let mut script = format!("set -e; mkdir -p out/bin out/lib {plugins}\n");
    let cc = format!("{} -O1 -I{}", gcc.display(), src.display());
    for (file, soname, answer) in PLUGINS {
        let soname = soname.map(|s| format!("-Wl,-soname,{s}")).unwrap_or_default();
        script += &format!(
            "{cc} -shared -fPIC -DPLUG_ANSWER={answer} {soname} -o {plugins}/{file} {s}/plug.c\n",
            s = src.display()
        );
    }
    for prog in ["literal", "computed", "note"] {
        script += &format!("{cc} -o out/bin/{prog} {}/{prog}.c\n", src.display());
    }
    script += &format!(
        "{cc} -shared -fPIC -o out/lib/libcaller.so {s}/caller.c
         {cc} -o out/bin/via-lib {s}/via-lib.c -Lout/lib -lcaller -Wl,--enable-new-dtags,-rpath,'$ORIGIN/../lib'\n",
        s = src.display()
    );
    sh(dir, &script);
}

/// The "dynamically loaded by" lines of a run: (caller as the loader names
/// it, file name asked for).
fn loaded_by(out: &Output) -> Vec<(String, String)> {
    let err = String::from_utf8_lossy(&out.stderr);
    let mut seen: Vec<(String, String)> = err
        .lines()
        .filter_map(|l| {
            let rest = l.split_once("file=")?.1;
            let (name, rest) = rest.split_once(" [")?;
            let caller = rest.split_once("dynamically loaded by ")?.1;
            let caller = caller.rsplit_once(" [")?.0;
            Some((caller.to_string(), name.to_string()))
        })
        .collect();
    seen.sort();
    seen.dedup();
    seen
}

/// `auto-add-driver-runpath` with `args`, JSON report parsed.
fn fix(dir: &Path, args: &[&str]) -> (Option<i32>, Value) {
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(args);
    let out = bin(dir, &all);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    (out.status.code(), v)
}

/// The JSON report of one file (by path suffix).
fn file_report<'a>(v: &'a Value, suffix: &str) -> &'a Value {
    v["report"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with(suffix))
        .unwrap_or_else(|| panic!("no {suffix} in {v}"))
}

/// `cuda-elf-inspect`'s dlopen findings for `what` (relative to `dir`):
/// (check, file name of the caller, library).
fn audit_dlopen(dir: &Path, what: &str) -> Vec<(String, String, String)> {
    let out = outside_build(
        Command::new(env!("CARGO_BIN_EXE_cuda-elf-inspect")).args(["--format", "json", what]),
    )
    .current_dir(dir)
    .env_remove("cudaCapabilities")
    .output()
    .unwrap();
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    let mut found: Vec<(String, String, String)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"].as_str().unwrap().starts_with("dlopen-"))
        .map(|f| {
            let path = f["path"].as_str().unwrap();
            let name = path.rsplit('/').next().unwrap().to_string();
            (
                f["check"].as_str().unwrap().into(),
                name,
                f["details"]["library"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    found.sort();
    found
}

/// The callers and names of the loader's "dynamically loaded by" lines,
/// the caller by its file name.
fn observed(lines: &[(String, String)]) -> Vec<(String, String)> {
    lines.iter().map(|(c, n)| (c.rsplit('/').next().unwrap().to_string(), n.clone())).collect()
}

/// The split tree for `m`: the programs cannot find their plugins, the
/// audit says so, `--dlopen-search` fixes it (also picking the folder of
/// the right machine over one that holds the same names for another), the
/// programs then load their plugins, the result is what patchelf
/// `--add-rpath` gives after the driver entry, and a second run changes
/// nothing.
fn split_tree(m: &Machine, decoy: &Machine) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    build(m, dir, "dep/lib");
    // The same plugins for another machine, in a folder searched first.
    let d = tempfile::tempdir().unwrap();
    build(decoy, d.path(), "plugins");
    std::fs::rename(d.path().join("plugins"), dir.join("decoy")).unwrap();
    std::fs::set_permissions(dir.join("out/bin/note"), std::fs::Permissions::from_mode(0o750))
        .unwrap();
    let dep = dir.join("dep/lib");
    let dep_s = dep.to_str().unwrap().to_string();
    let search = format!("{}:{dep_s}", dir.join("decoy").display());

    // Unpatched: every dlopen is tried and fails.
    for (prog, _) in WORKS {
        let prog = format!("out/{prog}");
        let out = m.run(dir, &prog, &[]);
        assert_eq!(out.status.code(), Some(3), "{}: {prog} unpatched: {}", m.name, text(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("dlopen failed"), "{}", text(&out));
        assert!(!loaded_by(&out).is_empty(), "{}: {prog}: no LD_DEBUG line", m.name);
    }

    // The audit predicts each failure: dlopen-unresolved for every caller
    // that names its library; the computed names are the documented miss
    // (docs/dlopen.md), which the fix's pattern search covers below.
    let unresolved: Vec<(String, String)> = audit_dlopen(dir, "out")
        .into_iter()
        .filter(|(c, _, _)| c == "dlopen-unresolved")
        .map(|(_, f, l)| (f, l))
        .collect();
    assert_eq!(
        unresolved,
        [
            ("libcaller.so".to_string(), "libplug.so.1".to_string()),
            ("literal".into(), "libplug.so.1".into()),
            ("note".into(), "libnoteplug.so.1".into()),
        ],
        "{}",
        m.name
    );

    // --check: what would be added, and why; nothing written.
    let before = snapshot(&dir.join("out"));
    let (code, v) = fix(dir, &["--check", "--dlopen-search", &search, "out"]);
    assert_eq!(code, Some(1), "{v}");
    assert!(before == snapshot(&dir.join("out")), "--check wrote");
    let expect_served = [
        ("bin/literal", vec![("libplug.so.1", vec!["libplug.so.1"])]),
        ("bin/note", vec![("libnoteplug.so.1", vec!["libnoteplug.so.1"])]),
        ("bin/computed", vec![("libplug%d.so", vec!["libplug1.so", "libplug2.so"])]),
        ("lib/libcaller.so", vec![("libplug.so.1", vec!["libplug.so.1"])]),
    ];
    for (file, served) in &expect_served {
        let f = file_report(&v, file);
        let added = f["dlopen"]["added"].as_array().unwrap_or_else(|| panic!("{}: {f}", m.name));
        assert_eq!(added.len(), 1, "{}: {f}", m.name);
        assert_eq!(
            added[0]["folder"],
            dep_s.as_str(),
            "{}: the decoy's machine is skipped: {f}",
            m.name
        );
        let got: Vec<(String, Vec<String>)> = added[0]["serves"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let files = s["files"].as_array().unwrap();
                (
                    s["soname"].as_str().unwrap().into(),
                    files.iter().map(|x| x.as_str().unwrap().into()).collect(),
                )
            })
            .collect();
        let want: Vec<(String, Vec<String>)> = served
            .iter()
            .map(|(s, f)| (s.to_string(), f.iter().map(|x| x.to_string()).collect()))
            .collect();
        assert_eq!(got, want, "{}: {file}", m.name);
        assert_eq!(f["new"], format!("/run/opengl-driver/lib:{dep_s}"), "{}: {file}", m.name);
    }
    // The program whose library does the dlopen needs nothing itself.
    let f = file_report(&v, "bin/via-lib");
    assert!(f["dlopen"].is_null(), "{}: via-lib imports no dlopen: {f}", m.name);
    assert_eq!(f["new"], "/run/opengl-driver/lib:$ORIGIN/../lib", "{f}");

    // The reference: our driver entry alone, then patchelf --add-rpath.
    sh(dir, "cp -a out ref");
    let (code, _) = fix(dir, &["ref"]);
    assert_eq!(code, Some(0));
    for (file, _) in &expect_served {
        let p = dir.join("ref").join(file);
        let o =
            Command::new(tool("patchelf")).arg("--add-rpath").arg(&dep).arg(&p).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }

    // The fix, in place.
    let (code, v) = fix(dir, &["--in-place", "--dlopen-search", &search, "out"]);
    assert_eq!(code, Some(0), "{v}");
    for (file, _) in &expect_served {
        let ours = m.search_path(&dir.join("out").join(file));
        assert_eq!(ours, Some(("RUNPATH".into(), format!("/run/opengl-driver/lib:{dep_s}"))));
        assert_eq!(
            ours,
            m.search_path(&dir.join("ref").join(file)),
            "{}: {file}: patchelf differs",
            m.name
        );
    }
    let mode = std::fs::metadata(dir.join("out/bin/note")).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o750, "mode kept");
    let mut seen = Vec::new();
    for (prog, want) in WORKS {
        for tree in ["out", "ref"] {
            let p = format!("{tree}/{prog}");
            let out = m.run(dir, &p, &[]);
            assert!(out.status.success(), "{}: {p} patched: {}", m.name, text(&out));
            assert_eq!(String::from_utf8_lossy(&out.stdout), *want, "{}: {p}", m.name);
            if tree == "out" {
                seen.extend(observed(&loaded_by(&out)));
            }
        }
    }
    seen.sort();
    seen.dedup();
    // Every load the loader reports is predicted (dlopen-resolved, now that
    // the folder is on the RUNPATH), but the names computed at run time,
    // which the fix's report names under their pattern; and every
    // prediction is a load the loader reports (these programs load all
    // they name).
    let predicted: Vec<(String, String)> = audit_dlopen(dir, "out")
        .into_iter()
        .map(|(c, f, l)| {
            assert_eq!(c, "dlopen-resolved", "{}: {f}: {l}", m.name);
            (f, l)
        })
        .collect();
    let computed: Vec<(String, String)> = ["libplug1.so", "libplug2.so"]
        .iter()
        .map(|n| ("computed".to_string(), n.to_string()))
        .collect();
    let mut want = predicted.clone();
    want.extend(computed);
    want.sort();
    assert_eq!(seen, want, "{}: LD_DEBUG against the audit's prediction", m.name);

    // Idempotent: a second run changes no byte.
    let snap = snapshot(&dir.join("out"));
    let (code, v) = fix(dir, &["--dlopen-search", &search, "out"]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["report"]["summary"]["patched"], 0, "{v}");
    assert!(snap == snapshot(&dir.join("out")), "{}: a second run changed files", m.name);
}

#[test]
fn split_tree_x86_64() {
    split_tree(&NATIVE, &AARCH64);
}

#[test]
fn split_tree_aarch64() {
    split_tree(&AARCH64, &NATIVE);
}

#[test]
fn split_tree_armhf() {
    split_tree(&ARMHF, &AARCH64);
}

#[test]
fn split_tree_s390x_big_endian() {
    split_tree(&S390X, &NATIVE);
}

#[test]
fn a_dlopen_search_folder_that_cannot_be_one_is_an_error_before_any_write() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    build(&NATIVE, dir, "dep/lib");
    let snap = snapshot(&dir.join("out"));
    for (arg, says) in [
        (dir.join("nope").display().to_string(), "no such file or directory"),
        (dir.join("dep/lib/libplug.so.1").display().to_string(), "not a directory"),
        ("dep/lib".to_string(), "must be an absolute path"),
        (":".to_string(), "no folder given"),
    ] {
        let out = bin(dir, &["--dlopen-search", &arg, "out"]);
        assert_eq!(out.status.code(), Some(2), "{arg}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{arg}: {err}");
        assert!(err.starts_with("auto-add-driver-runpath: "), "{err}");
        assert!(snap == snapshot(&dir.join("out")), "{arg}: a file was written");
    }
}

/// The tree a corpus set was unpacked into, and the folder of `file` in it.
fn corpus_file(set: &str, file: &str) -> PathBuf {
    let out =
        Command::new("bash").arg(root().join("tests/tools/corpus.sh")).arg(set).output().unwrap();
    assert!(out.status.success(), "corpus.sh {set}: {}", String::from_utf8_lossy(&out.stderr));
    let list = String::from_utf8(out.stdout).unwrap();
    let found = list.lines().find(|l| l.ends_with(&format!("/{file}")));
    PathBuf::from(found.unwrap_or_else(|| panic!("corpus.sh {set}: no {file} in:\n{list}")))
}

/// NVIDIA's NVRTC (nvidia-cuda-nvrtc 13.0.88, a real wheel) split as a
/// Nix tree could split it: `libnvrtc.so.13` in one folder, its builtins
/// library in another. NVRTC compiles on the CPU, so the loader is the
/// oracle here: the compile fails at the dlopen of the builtins, the audit
/// flags it, `--dlopen-search` adds the builtins' folder to libnvrtc's
/// RUNPATH (the caller's, not the program's), and the compile then works.
#[test]
fn nvrtc_split_from_its_builtins_fails_then_compiles_after_the_fix() {
    let nvrtc = corpus_file("nvrtc13", "libnvrtc.so.13");
    let builtins = corpus_file("nvrtc13", "libnvrtc-builtins.so.13.0");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    sh(
        dir,
        &format!(
            "set -e; mkdir -p nvrtc/lib builtins/lib bin
             cp {} nvrtc/lib/ && cp {} builtins/lib/
             gcc -o bin/compile {} nvrtc/lib/libnvrtc.so.13 -Wl,-rpath,{dir}/nvrtc/lib",
            nvrtc.display(),
            builtins.display(),
            root().join("fixtures/dlopen/nvrtc.c").display(),
            dir = dir.display()
        ),
    );
    let before = NATIVE.run(dir, "bin/compile", &[]);
    assert_eq!(before.status.code(), Some(3), "{}", text(&before));
    assert_eq!(
        String::from_utf8_lossy(&before.stdout),
        "compile: NVRTC_ERROR_BUILTIN_OPERATION_FAILURE\n"
    );
    let lines = observed(&loaded_by(&before));
    assert!(
        lines.contains(&("libnvrtc.so.13".into(), "libnvrtc-builtins.so.13.0".into())),
        "{lines:?}"
    );
    let flagged = audit_dlopen(dir, "nvrtc");
    assert!(
        flagged.contains(&(
            "dlopen-unresolved".into(),
            "libnvrtc.so.13".into(),
            "libnvrtc-builtins.so.13.0".into()
        )),
        "{flagged:?}"
    );

    let search = dir.join("builtins/lib").display().to_string();
    let (code, v) = fix(dir, &["--dlopen-search", &search, "nvrtc"]);
    assert_eq!(code, Some(0), "{v}");
    let f = file_report(&v, "libnvrtc.so.13");
    assert_eq!(f["dlopen"]["added"][0]["folder"], search.as_str(), "{f}");
    assert_eq!(
        f["dlopen"]["added"][0]["serves"][0]["files"][0], "libnvrtc-builtins.so.13.0",
        "{f}"
    );
    assert_eq!(
        search_path(&dir.join("nvrtc/lib/libnvrtc.so.13")),
        Some(("RUNPATH".into(), format!("/run/opengl-driver/lib:{search}")))
    );
    let after = NATIVE.run(dir, "bin/compile", &[]);
    assert!(after.status.success(), "{}", text(&after));
    assert_eq!(String::from_utf8_lossy(&after.stdout), "compile: NVRTC_SUCCESS\n");
    let flagged = audit_dlopen(dir, "nvrtc");
    assert!(
        flagged.contains(&(
            "dlopen-resolved".into(),
            "libnvrtc.so.13".into(),
            "libnvrtc-builtins.so.13.0".into()
        )),
        "{flagged:?}"
    );
    assert!(!flagged.iter().any(|(c, _, _)| c == "dlopen-unresolved"), "{flagged:?}");
}

/// The same NVRTC as its wheel installs it, its builtins beside it in one
/// folder: the wheel's libnvrtc.so.13 has no RUNPATH, and glibc's dlopen
/// does not search the caller's own folder, so the compile fails all the
/// same. The finding's fix used to say "install it beside this file",
/// which it is: it now names `$ORIGIN`, and with `$ORIGIN` on the RUNPATH
/// (patchelf) the compile works and the audit says resolved.
#[test]
fn nvrtc_beside_its_builtins_without_origin_fails_and_the_fix_says_origin() {
    let nvrtc = corpus_file("nvrtc13", "libnvrtc.so.13");
    let builtins = corpus_file("nvrtc13", "libnvrtc-builtins.so.13.0");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    sh(
        dir,
        &format!(
            "set -e; mkdir -p lib bin
             cp {} {} lib/
             gcc -o bin/compile {} lib/libnvrtc.so.13 -Wl,-rpath,{dir}/lib",
            nvrtc.display(),
            builtins.display(),
            root().join("fixtures/dlopen/nvrtc.c").display(),
            dir = dir.display()
        ),
    );
    assert_eq!(search_path(&dir.join("lib/libnvrtc.so.13")), None);
    let before = NATIVE.run(dir, "bin/compile", &[]);
    assert_eq!(before.status.code(), Some(3), "{}", text(&before));
    assert_eq!(
        String::from_utf8_lossy(&before.stdout),
        "compile: NVRTC_ERROR_BUILTIN_OPERATION_FAILURE\n"
    );
    let out = outside_build(
        Command::new(env!("CARGO_BIN_EXE_cuda-elf-inspect")).args(["--format", "json", "lib"]),
    )
    .current_dir(dir)
    .output()
    .unwrap();
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    let unresolved: Vec<&Value> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            f["check"] == "dlopen-unresolved"
                && f["details"]["library"] == "libnvrtc-builtins.so.13.0"
        })
        .collect();
    assert_eq!(unresolved.len(), 1, "{v:#}");
    assert_eq!(unresolved[0]["severity"], "error", "{v:#}");
    let message = unresolved[0]["message"].as_str().unwrap();
    assert!(!message.contains("install it beside"), "{message}");
    assert!(message.contains("$ORIGIN"), "{message}");

    sh(dir, &format!("{} --set-rpath '$ORIGIN' lib/libnvrtc.so.13", tool("patchelf").display()));
    let after = NATIVE.run(dir, "bin/compile", &[]);
    assert!(after.status.success(), "{}", text(&after));
    assert_eq!(String::from_utf8_lossy(&after.stdout), "compile: NVRTC_SUCCESS\n");
    let flagged = audit_dlopen(dir, "lib");
    assert!(
        flagged.contains(&(
            "dlopen-resolved".into(),
            "libnvrtc.so.13".into(),
            "libnvrtc-builtins.so.13.0".into()
        )),
        "{flagged:?}"
    );
}

/// Debian's procps (nobody here wrote it): `libproc2.so.0` dlopens
/// `libnuma.so`, then `libnuma.so.1`, for `ps -o numa`. `ps` (this
/// machine's, given our copy of libproc2 through LD_LIBRARY_PATH) asks for
/// both names, which are the names the audit predicts; this machine has
/// its own libnuma in the loader's default folders, which a Nix store file
/// never searches, so the fix adds the folder of the split-off copy anyway
/// and the loader then takes libnuma from that folder (RUNPATH comes
/// before the default folders), and `ps` prints the node.
#[test]
fn debian_procps_loads_libnuma_from_the_folder_the_fix_adds() {
    let proc2 = corpus_file("deb-dlopen", "libproc2.so.0.0.1");
    let numa = corpus_file("deb-dlopen", "libnuma.so.1.0.0");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    sh(
        dir,
        &format!(
            "set -e; mkdir -p out/lib dep/lib; cp {} out/lib/libproc2.so.0; cp {} dep/lib/libnuma.so.1",
            proc2.display(),
            numa.display()
        ),
    );
    let ps = |dir: &Path| {
        let lib = dir.join("out/lib");
        let ps = Path::new("/bin/ps");
        assert!(ps.exists(), "procps' ps is missing: run `make tools`");
        let out = Command::new(ps)
            .args(["-o", "numa=", "-p", "1"])
            .env("LD_LIBRARY_PATH", &lib)
            .env("LD_DEBUG", "files")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        out
    };
    let before = ps(dir);
    let seen = observed(&loaded_by(&before));
    assert_eq!(
        seen,
        [
            ("libproc2.so.0".to_string(), "libnuma.so".to_string()),
            ("libproc2.so.0".into(), "libnuma.so.1".into())
        ]
    );
    let flagged = audit_dlopen(dir, "out");
    for (caller, name) in &seen {
        assert!(
            // `libnuma.so` and `libnuma.so.1` are one target, named by its
            // soname (issue 30's folding, docs/dlopen.md).
            flagged.iter().any(|(_, c, l)| c == caller
                && (l == name
                    || l.strip_prefix(name.as_str()).is_some_and(|v| v.starts_with('.')))),
            "{name} not predicted: {flagged:?}"
        );
    }

    let search = dir.join("dep/lib").display().to_string();
    let (code, v) = fix(dir, &["--dlopen-search", &search, "out"]);
    assert_eq!(code, Some(0), "{v}");
    let f = file_report(&v, "libproc2.so.0");
    assert_eq!(f["dlopen"]["added"][0]["serves"][0]["soname"], "libnuma.so.1", "{f}");
    assert_eq!(f["dlopen"]["not_found"], serde_json::json!(["libnuma.so"]), "{f}");
    let want = format!("/run/opengl-driver/lib:{search}");
    assert_eq!(search_path(&dir.join("out/lib/libproc2.so.0")), Some(("RUNPATH".into(), want)));
    let after = ps(dir);
    let node = String::from_utf8_lossy(&after.stdout).trim().to_string();
    assert!(node.parse::<u32>().is_ok(), "ps printed {node:?}: {}", text(&after));
    assert!(
        String::from_utf8_lossy(&after.stderr).contains(&format!("{search}/libnuma.so.1")),
        "libnuma not loaded from the folder: {}",
        text(&after)
    );
}
