//! The caps of docs/robustness.md ("Limits"), one test each where the cap
//! is ours: a hostile header is refused quickly, without a large allocation.

use std::time::{Duration, Instant};

use nix_cuda_hooks::elf::{Elf, ElfError};

/// A 64-bit little-endian ELF header with `e_shoff` = 64 and extended
/// section numbering (`e_shnum` = 0, the count in section 0's `sh_size`).
fn extended_count(count: u64) -> Vec<u8> {
    let mut d = vec![0u8; 64 + 64];
    d[..4].copy_from_slice(b"\x7fELF");
    d[4] = 2; // ELFCLASS64
    d[5] = 1; // little endian
    d[6] = 1;
    d[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
    d[18..20].copy_from_slice(&62u16.to_le_bytes()); // x86-64
    d[40..48].copy_from_slice(&64u64.to_le_bytes()); // e_shoff
    d[58..60].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    d[64 + 32..64 + 40].copy_from_slice(&count.to_le_bytes()); // sh_size of section 0
    d
}

#[test]
fn section_header_count_cap() {
    let start = Instant::now();
    for count in [(1u64 << 16) + 1, 1 << 40, u64::MAX] {
        match Elf::parse(&extended_count(count)) {
            Err(ElfError::Corrupt(m)) => assert!(m.contains("section headers"), "{m}"),
            other => panic!("{count}: {other:?}"),
        }
    }
    // Under the cap but past the end of the file: truncated, not allocated.
    assert!(matches!(Elf::parse(&extended_count(1 << 16)), Err(ElfError::Truncated { .. })));
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn host_elf_walk_refuses_huge_counts_quickly() {
    let start = Instant::now();
    for count in [1u64 << 16, 1 << 40, u64::MAX] {
        assert!(nix_cuda_hooks::hostelf::parse(&extended_count(count)).is_err());
    }
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn in_memory_apply_cap() {
    use nix_cuda_hooks::elf::patch::{Piece, Rewrite, Strategy, MAX_APPLY_LEN};
    let rw = Rewrite {
        strategy: Strategy::NewSegment,
        edits: vec![],
        append_at: MAX_APPLY_LEN,
        append: vec![Piece::Bytes(vec![1])],
    };
    assert!(matches!(rw.apply(b"x"), Err(ElfError::Unsupported(_))));
}
