//! Helpers shared by the integration tests: running tools, building C and
//! CUDA fixtures at test time, hashing trees. A tool the tests need that is
//! missing makes the test fail (run `make tools`), never skip.

#![allow(dead_code)]

pub mod cuobjdump;
pub mod fixtures;
pub mod hostile;
pub mod httpcache;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A tool from `.tools/` or `PATH`; panics with a hint when missing.
pub fn tool(name: &str) -> PathBuf {
    let local = match name {
        "patchelf" => Some(root().join(".tools/patchelf")),
        "nvcc" | "cuobjdump" => Some(root().join(".tools/cuda/bin").join(name)),
        // Nix >= 2.18 (Debian trixie's, run through its own loader), never the host's.
        "nix-build" | "nix-instantiate" => Some(root().join(".tools/nix/bin").join(name)),
        _ => None,
    };
    if let Some(p) = local {
        assert!(
            p.exists(),
            "{} is missing: run `make tools` (tests/tools/install.sh)",
            p.display()
        );
        return p;
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file())
    });
    found.unwrap_or_else(|| panic!("{name} is missing: run `make tools` (tests/tools/install.sh)"))
}

/// The folder of real Nixpkgs files the tests use as their oracle
/// (tests/tools/nixpkgs-upstream.sh: $NIXPKGS, ../shared/nixpkgs-upstream or
/// a pinned download), resolved and sha256-checked once. Missing or
/// mismatching files fail the test: there is no stand-in.
pub fn nixpkgs() -> &'static str {
    static DIR: OnceLock<String> = OnceLock::new();
    DIR.get_or_init(|| {
        let o = Command::new("bash")
            .arg(root().join("tests/tools/nixpkgs-upstream.sh"))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "tests/tools/nixpkgs-upstream.sh failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap().trim_end().to_owned()
    })
}

/// Runs a shell command in `dir`, asserts success, returns stdout.
pub fn sh(dir: &Path, cmd: &str) -> String {
    let out = Command::new("bash").arg("-c").arg(cmd).current_dir(dir).output().unwrap();
    assert!(
        out.status.success(),
        "command failed: {cmd}\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `cmd` as run outside a Nix build: none of the variables a build sets (the
/// log descriptor, NIX_DEBUG, the outputs) leak in from the test's own
/// environment.
pub fn outside_build(cmd: &mut Command) -> &mut Command {
    for var in
        ["NIX_LOG_FD", "NIX_DEBUG", "outputs", "out", "NIX_ATTRS_JSON_FILE", "__structuredAttrs"]
    {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs our binary with `args` in `dir`, outside a build.
pub fn bin(dir: &Path, args: &[&str]) -> Output {
    outside_build(Command::new(env!("CARGO_BIN_EXE_auto-add-driver-runpath")).args(args))
        .current_dir(dir)
        .output()
        .unwrap()
}

/// stdout + stderr as text, for assertion messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `readelf -d` RUNPATH / RPATH of a file: `(tag, value)`.
pub fn search_path(file: &Path) -> Option<(String, String)> {
    let out = Command::new(tool("readelf")).arg("-dW").arg(file).output().unwrap();
    assert!(out.status.success(), "readelf -d {}", file.display());
    assert!(
        out.stderr.is_empty(),
        "readelf warns on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    for line in stdout.lines() {
        for tag in ["RUNPATH", "RPATH"] {
            if line.contains(&format!("({tag})")) {
                let v = line.split_once('[').unwrap().1.trim_end().trim_end_matches(']');
                return Some((tag.to_string(), v.to_string()));
            }
        }
    }
    None
}

/// Every regular file under `dir` with its bytes (sorted), symlinks as targets.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let t = std::fs::symlink_metadata(&p).unwrap().file_type();
            if t.is_dir() {
                stack.push(p);
            } else if t.is_symlink() {
                out.push((
                    p.clone(),
                    std::fs::read_link(&p).unwrap().into_os_string().into_encoded_bytes(),
                ));
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// The bytes of one section, by `objcopy -O binary --only-section`.
pub fn section_bytes(file: &Path, section: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.bin");
    let st = Command::new(tool("objcopy"))
        .args(["-O", "binary", "--only-section", section])
        .arg(file)
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "objcopy {section} {}", file.display());
    std::fs::read(out).unwrap()
}

/// Runs `program args` in `dir`.
pub fn run_in(dir: &Path, program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()))
}

/// Runs a Nix command of `.tools/nix` against a throwaway store under `dir`
/// (no daemon, sandbox, substituters or build hook: Nix run through its own
/// loader cannot re-execute itself as `__build-remote`); its stdout, or a
/// panic naming the command and its output.
pub fn nix(dir: &Path, program: &str, args: &[&str]) -> Vec<u8> {
    let program = root().join(".tools/nix/bin").join(program);
    let out = Command::new(&program)
        .args(args)
        .env("NIX_STORE_DIR", dir.join("store"))
        .env("NIX_STATE_DIR", dir.join("state"))
        .env("NIX_LOG_DIR", dir.join("log"))
        .env("NIX_CONF_DIR", dir.join("etc"))
        .env("HOME", dir.join("home"))
        .env("NIX_PATH", "")
        .env("NIX_CONFIG", "build-hook =\nsandbox = false\nsubstituters =\nbuild-users-group =\n")
        .output()
        .unwrap_or_else(|e| panic!("{} cannot run ({e}): run `make tools`", program.display()));
    assert!(out.status.success(), "{} {args:?}: {}", program.display(), text(&out));
    out.stdout
}

/// The corpus file `file` of set `set`, fetched if needed.
pub fn corpus(set: &str, file: &str) -> PathBuf {
    let out = Command::new("bash")
        .arg(root().join("tests/tools/corpus.sh"))
        .arg(set)
        .output()
        .expect("bash");
    assert!(out.status.success(), "corpus.sh {set}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .find(|p| p.file_name().is_some_and(|n| n == file))
        .unwrap_or_else(|| panic!("corpus set {set} lacks {file}"))
}

/// A folder beside the corpus (one file system: hard links work).
pub fn scratch() -> tempfile::TempDir {
    let base = root().join(".cache/scratch");
    std::fs::create_dir_all(&base).unwrap();
    tempfile::tempdir_in(base).unwrap()
}
