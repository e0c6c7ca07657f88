//! Fuzz target: `.note.dlopen` notes (headers, alignment, JSON) under many
//! repeated or overlapping section headers. The first byte says how many
//! headers (x16), the second how far apart they start (x4 bytes) and the
//! alignment; the rest is the notes' bytes. Problems stay within
//! `MAX_PROBLEMS` plus one count, targets within `MAX_TARGETS`.
#![no_main]

#[path = "../common/sections.rs"]
mod sections;

use libfuzzer_sys::fuzz_target;
use nix_cuda_hooks::dlopen::{note, Scan, MAX_PROBLEMS, MAX_TARGETS};
use nix_cuda_hooks::elf::Elf;

fuzz_target!(|data: &[u8]| {
    let [count, stagger, region @ ..] = data else { return };
    let count = usize::from(*count) * 16 + 1;
    let len = region.len() as u64;
    let headers: Vec<sections::Header> = (0..count as u64)
        .map(|i| {
            let offset = (i * u64::from(*stagger & 0x7f) * 4).min(len);
            sections::Header { name: 0, sh_type: 7, flags: 0, offset, size: len - offset }
        })
        .collect();
    let mut file = sections::elf(region, &headers);
    if stagger & 0x80 != 0 {
        // addralign 8 on every header: 8-byte note padding.
        let shoff = u64::from_le_bytes(file[0x28..0x30].try_into().unwrap()) as usize;
        for i in 1..=count {
            let at = shoff + 64 * i + 48;
            file[at..at + 8].copy_from_slice(&8u64.to_le_bytes());
        }
    }
    let Ok(elf) = Elf::parse(&file) else { return };
    let mut scan = Scan::default();
    let mut seen = std::collections::HashSet::new();
    note::read(&elf, &mut scan, &mut seen);
    assert!(scan.problems.len() <= MAX_PROBLEMS + 1, "{} problems", scan.problems.len());
    assert!(scan.targets.len() <= MAX_TARGETS, "{} targets", scan.targets.len());
    for p in &scan.problems {
        let _ = p.describe();
    }
    for t in &scan.targets {
        let _ = t.origin.describe();
    }
});
