//! Shared by the integration tests: the pinned CUDA tools, the fixture
//! builder (recipes in `fixtures/cuda/recipes.txt`, built into the ignored
//! `.cache/fixtures/`), and running a command to compare its output.
//!
//! Missing tools make the tests fail, never skip: `make test` installs them.
#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A pinned CUDA tool from `.tools/cuda/bin`, or a failing test that says how to get it.
pub fn cuda_tool(name: &str) -> PathBuf {
    let path = root().join(".tools/cuda/bin").join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `make tools` (tests/tools/install.sh) first",
        path.display()
    );
    path
}

/// One recipe: a name, the files to list, and shell lines that build them.
#[derive(Debug, Clone)]
pub struct Variant {
    /// Variant name (folder under `.cache/fixtures/`).
    pub name: String,
    /// Files to list, relative to the variant folder.
    pub files: Vec<String>,
    /// Shell lines.
    pub lines: Vec<String>,
}

/// Parses `fixtures/cuda/recipes.txt`.
pub fn recipes() -> Vec<Variant> {
    let text = std::fs::read_to_string(root().join("fixtures/cuda/recipes.txt")).unwrap();
    let mut out: Vec<Variant> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.strip_prefix("variant ") {
            let mut words = rest.split_whitespace().map(str::to_string);
            let name = words.next().expect("variant needs a name");
            out.push(Variant { name, files: words.collect(), lines: Vec::new() });
        } else if line.starts_with(' ') {
            out.last_mut().expect("command before any variant").lines.push(line.trim().into());
        } else {
            panic!("recipes.txt: cannot read line {line:?}");
        }
    }
    out
}

fn sources_hash(v: &Variant) -> String {
    let mut h = DefaultHasher::new();
    v.lines.hash(&mut h);
    let mut srcs: Vec<PathBuf> = std::fs::read_dir(root().join("fixtures/cuda"))
        .unwrap()
        .map(|e| e.unwrap().path())
        // The variant's own lines are hashed above: editing one recipe must
        // not rebuild all the others.
        .filter(|p| !p.ends_with("recipes.txt"))
        .collect();
    srcs.sort();
    for s in srcs {
        s.file_name().hash(&mut h);
        std::fs::read(&s).unwrap().hash(&mut h);
    }
    format!("{:016x}", h.finish())
}

static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// Builds every variant (only those whose recipe or sources changed) and
/// returns them with their folders. Builds run two at a time.
pub fn build_all() -> Vec<(Variant, PathBuf)> {
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let nvcc = cuda_tool("nvcc");
    cuda_tool("cuobjdump");
    let variants = recipes();
    let base = root().join(".cache/fixtures");
    let todo: Mutex<Vec<Variant>> = Mutex::new(variants.clone());
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let Some(v) = todo.lock().unwrap().pop() else { break };
                if let Err(e) = build_one(&v, &base.join(&v.name), &nvcc) {
                    failures.lock().unwrap().push(e);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "fixture builds failed:\n{}", failures.join("\n"));
    variants.into_iter().map(|v| (v.clone(), base.join(&v.name))).collect()
}

fn build_one(v: &Variant, dir: &Path, nvcc: &Path) -> Result<(), String> {
    let hash = sources_hash(v);
    let stamp = dir.join(".recipe-hash");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(hash.as_str()) {
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let bin = nvcc.parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let script = v.lines.join("\n");
    let out = Command::new("sh")
        .arg("-ec")
        .arg(&script)
        .current_dir(dir)
        .env("NVCC", nvcc)
        .env("SRC", root().join("fixtures/cuda"))
        .env("PATH", path)
        .output()
        .map_err(|e| format!("{}: sh: {e}", v.name))?;
    if !out.status.success() {
        return Err(format!(
            "variant {}: build failed ({}):\n{}\n{}",
            v.name,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::write(&stamp, hash).unwrap();
    Ok(())
}

/// Runs `program args` in `dir`.
pub fn run_in(dir: &Path, program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()))
}

/// A line diff of two outputs, for failure messages.
pub fn line_diff(expected: &[u8], got: &[u8]) -> String {
    let e = String::from_utf8_lossy(expected);
    let g = String::from_utf8_lossy(got);
    let el: Vec<&str> = e.lines().collect();
    let gl: Vec<&str> = g.lines().collect();
    let mut out = String::new();
    for i in 0..el.len().max(gl.len()) {
        match (el.get(i), gl.get(i)) {
            (Some(a), Some(b)) if a == b => out.push_str(&format!("   {a}\n")),
            (a, b) => {
                if let Some(a) = a {
                    out.push_str(&format!(" - {a}\n"));
                }
                if let Some(b) = b {
                    out.push_str(&format!(" + {b}\n"));
                }
            }
        }
    }
    if expected.ends_with(b"\n") != got.ends_with(b"\n") {
        out.push_str(" (final newline differs)\n");
    }
    out
}

/// Compares a cuobjdump run with a cuda-elf-inspect run; `None` when they
/// agree (stdout, stderr after the program name, status).
pub fn compare(label: &str, expected: &Output, got: &Output) -> Option<String> {
    let got_err = rename_prog(&got.stderr);
    let mut msg = String::new();
    if expected.stdout != got.stdout {
        msg.push_str(&format!(
            "stdout differs (- cuobjdump, + ours):\n{}",
            line_diff(&expected.stdout, &got.stdout)
        ));
    }
    if expected.stderr != got_err {
        msg.push_str(&format!("stderr differs:\n{}", line_diff(&expected.stderr, &got_err)));
    }
    if expected.status.code() != got.status.code() {
        msg.push_str(&format!(
            "status differs: cuobjdump {:?}, ours {:?}\n",
            expected.status.code(),
            got.status.code()
        ));
    }
    (!msg.is_empty()).then(|| format!("== {label}\n{msg}"))
}

/// Our stderr with `cuda-elf-inspect ` at line starts read as `cuobjdump `.
pub fn rename_prog(stderr: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(stderr);
    text.lines()
        .map(|l| match l.strip_prefix("cuda-elf-inspect ") {
            Some(rest) => format!("cuobjdump {rest}\n"),
            None => format!("{l}\n"),
        })
        .collect::<String>()
        .into_bytes()
}
