//! The device-code fixtures: recipes in `fixtures/cuda/recipes.txt`, built
//! at test time by the pinned nvcc 13.5 into the ignored `.cache/fixtures/`
//! (only variants whose recipe or sources changed are rebuilt).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use super::{root, tool};

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
    let nvcc = tool("nvcc");
    tool("cuobjdump");
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

/// Builds only the variants named (as [`build_all`] does) and returns
/// their folders, in the order named.
pub fn build(names: &[&str]) -> Vec<PathBuf> {
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let nvcc = tool("nvcc");
    let base = root().join(".cache/fixtures");
    let variants = recipes();
    names
        .iter()
        .map(|name| {
            let v = variants
                .iter()
                .find(|v| v.name == *name)
                .unwrap_or_else(|| panic!("no variant {name}"));
            let dir = base.join(name);
            build_one(v, &dir, &nvcc).unwrap_or_else(|e| panic!("{e}"));
            dir
        })
        .collect()
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
