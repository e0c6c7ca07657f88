//! Fuzz target: the dlopen scan (dynamic symbols, `.note.dlopen` notes and
//! their JSON, soname strings in read-only data) and resolution of what it
//! finds against an empty tree: bounded, no panic, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nix_cuda_hooks::dlopen::{self, Caller, DirectProbe, MAX_TARGETS};
use nix_cuda_hooks::elf::{dynamic, Elf};

fuzz_target!(|data: &[u8]| {
    let Ok(elf) = Elf::parse(data) else { return };
    let facts = dynamic::facts(&elf).unwrap_or_default();
    let scan = dlopen::scan(&elf, facts.soname.as_deref(), Some("9.19.0"), &|_| {});
    assert!(scan.targets.len() <= 2 * MAX_TARGETS + 16);
    for p in &scan.problems {
        let _ = p.describe();
    }
    let caller = Caller {
        path: std::path::Path::new("/nonexistent/fuzz/lib/libx.so"),
        facts: &facts,
        default_dirs: &[],
        loaded: &[],
    };
    for t in scan.targets.iter().take(8) {
        let _ = t.origin.describe();
        let _ = dlopen::resolve(t, &caller, &DirectProbe);
    }
});
