//! Issue 30's speed acceptance: what the audit keeps in memory per piece of
//! device code it reads. The PyTorch 2.11 + NVIDIA wheels tree's audit went
//! from 47 ms to 155 ms of CPU (one thread) and 14 to 25 MB peak RSS here;
//! part of it was heap: cuFFT 12.0's 23,983 containers outside its sections
//! each kept room for four entries (13 MB, every page of it faulted in and
//! zeroed). BENCHMARKS.md ("Issue 30: the PyTorch tree") has the numbers.

use nix_cuda_hooks::fatbin;

/// One 64-byte entry header (ELF, sm_90) and a 16-byte payload.
fn entry() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(2u16.to_le_bytes()); // kind: ELF
    b.extend(0x0101u16.to_le_bytes());
    b.extend(64u32.to_le_bytes()); // header size
    b.extend(16u64.to_le_bytes()); // payload size
    b.extend(0u32.to_le_bytes()); // compressed size
    b.extend(0u32.to_le_bytes()); // options
    b.extend(8u16.to_le_bytes()); // minor
    b.extend(1u16.to_le_bytes()); // major
    b.extend(90u32.to_le_bytes()); // sm
    b.extend([0u8; 8]); // identifier offset, length
    b.extend(0x11u64.to_le_bytes()); // flags: 64-bit, Linux
    b.extend(0u64.to_le_bytes());
    b.extend(0u64.to_le_bytes()); // uncompressed size
    b.resize(64, 0);
    b.extend([0xab; 16]);
    b
}

/// `n` containers of `per` entries each, back to back.
fn containers(n: usize, per: usize) -> Vec<u8> {
    let mut data = Vec::new();
    for _ in 0..n {
        let body: Vec<u8> = (0..per).flat_map(|_| entry()).collect();
        data.extend(0xBA55_ED50u32.to_le_bytes());
        data.extend(1u16.to_le_bytes());
        data.extend(16u16.to_le_bytes());
        data.extend((body.len() as u64).to_le_bytes());
        data.extend(body);
    }
    data
}

/// Every container read, by the section walk and by the scan outside the
/// sections, holds no more entry slots than entries: a library of tens of
/// thousands of one-entry containers costs their size, not four times it.
#[test]
fn containers_keep_no_spare_entry_slots() {
    for per in [1, 2, 3, 5] {
        let data = containers(500, per);
        let region = fatbin::parse_region(&data, 0);
        assert!(region.errors.is_empty(), "{:?}", region.errors);
        let scanned = fatbin::scan(&data, 0, &[]);
        for (how, list) in [("parse_region", &region.containers), ("scan", &scanned)] {
            assert_eq!(list.len(), 500, "{how}, {per} per container");
            for c in list {
                assert_eq!(c.entries.len(), per, "{how}");
                assert_eq!(
                    c.entries.capacity(),
                    per,
                    "{how}: container at {:#x} keeps {} slots for {per} entries",
                    c.offset,
                    c.entries.capacity()
                );
            }
        }
    }
}
