//! The layout docs/architecture.md describes, enforced: tests/tools/architecture.py
//! reads every `crate::`/`super::` import of src/ and fails on an import that runs
//! up a layer or across to a peer, an import cycle inside a folder, more than 8
//! loose modules, a binary over 60 lines and a function over 120 lines.

use std::process::Command;

#[test]
fn layers_cycles_and_sizes_hold() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/architecture.py");
    let out = Command::new("python3").arg(script).output().expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "architecture breaches:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The measures the script prints are the ones docs/architecture.md quotes.
    assert!(text.contains("upward or peer imports: 0; cycles: 0"), "{text}");
}

/// The checker itself finds what it exists to find: an upward import, a cycle,
/// a long binary and a long function, in a throwaway tree laid out like src/.
#[test]
fn the_checker_catches_each_breach() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let tools = dir.path().join("tests/tools");
    std::fs::create_dir_all(src.join("bin")).unwrap();
    std::fs::create_dir_all(src.join("elf")).unwrap();
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/architecture.py"),
        tools.join("architecture.py"),
    )
    .unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod elf;\npub mod audit;\n").unwrap();
    std::fs::write(src.join("audit.rs"), "use crate::elf::a;\n").unwrap();
    std::fs::write(src.join("elf/mod.rs"), "pub mod a;\npub mod b;\nuse crate::audit::X;\n")
        .unwrap();
    std::fs::write(src.join("elf/a.rs"), "use crate::elf::b::Y;\n").unwrap();
    std::fs::write(src.join("elf/b.rs"), "use crate::elf::a::Z;\n").unwrap();
    let long_fn = format!("fn f() {{\n{}}}\n", "    let _ = 1;\n".repeat(130));
    std::fs::write(src.join("elf/long.rs"), long_fn).unwrap();
    std::fs::write(src.join("bin/x.rs"), "fn main() {}\n".repeat(61)).unwrap();
    let out = Command::new("python3").arg(tools.join("architecture.py")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for breach in [
        "`elf` (layer 2) imports `audit`, a higher layer (layer 5)",
        "import cycle: elf::a <-> elf::b",
        "src/bin/x.rs: 61 lines (at most 60)",
        "fn f is 132 lines (at most 120)",
    ] {
        assert!(text.contains(breach), "missing {breach:?} in:\n{text}");
    }
}
