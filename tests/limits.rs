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

/// A fatbin container of `n` LZ4 ELF entries, each a 5-byte block (token
/// 0x40 + 4 literals) that decodes to 4 bytes.
fn lz4_container(n: usize) -> Vec<u8> {
    let mut body = Vec::new();
    for _ in 0..n {
        let payload = [0x40u8, 1, 2, 3, 4, 0, 0, 0];
        let mut b = Vec::new();
        b.extend(2u16.to_le_bytes()); // ELF
        b.extend(0x0101u16.to_le_bytes());
        b.extend(64u32.to_le_bytes());
        b.extend((payload.len() as u64).to_le_bytes());
        b.extend(5u32.to_le_bytes()); // compressed size
        b.extend(0u32.to_le_bytes());
        b.extend(8u16.to_le_bytes());
        b.extend(1u16.to_le_bytes());
        b.extend(80u32.to_le_bytes());
        b.extend([0u8; 8]);
        b.extend((0x11u64 | 0x2000).to_le_bytes()); // 64-bit, Linux, LZ4
        b.extend(0u64.to_le_bytes());
        b.extend(4u64.to_le_bytes()); // uncompressed size
        b.resize(64, 0);
        b.extend(payload);
        body.extend(b);
    }
    let mut c = Vec::new();
    c.extend(0xBA55_ED50u32.to_le_bytes());
    c.extend(1u16.to_le_bytes());
    c.extend(16u16.to_le_bytes());
    c.extend((body.len() as u64).to_le_bytes());
    c.extend(body);
    c
}

#[test]
fn decompression_budget_per_file() {
    use nix_cuda_hooks::fatbin::{self, codec};
    let data = lz4_container(3);
    let region = fatbin::parse_region(&data, 0);
    let entries: Vec<_> = region.entries().collect();
    assert_eq!(entries.len(), 3);
    let budget = codec::Budget::new(9);
    assert_eq!(codec::plain_within(entries[0], &budget).unwrap().as_ref(), &[1, 2, 3, 4]);
    assert_eq!(codec::plain_within(entries[1], &budget).unwrap().as_ref(), &[1, 2, 3, 4]);
    let err = codec::plain_within(entries[2], &budget).unwrap_err().to_string();
    assert!(err.contains("decompressed total"), "{err}");
    // The per-file default is far above any real library's total.
    assert_eq!(codec::MAX_PLAIN_PER_FILE, 8 << 30);
}
