//! Fuzz target: every entry point of the device-code reader on arbitrary
//! bytes (as a whole file, and as a bare fatbin region), in deep and scan
//! mode, plus the cuobjdump listing. Must never panic; crashes become named
//! regression tests in tests/malformed.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nix_cuda_hooks::devicecode::host;
use nix_cuda_hooks::fatbin;
use nix_cuda_hooks::inspect::{self, listing};

fuzz_target!(|data: &[u8]| {
    let region = fatbin::parse_region(data, 0);
    for entry in region.entries() {
        if let Ok(plain) = fatbin::codec::plain(entry) {
            for part in &entry.parts {
                let _ = fatbin::codec::part(part, &plain);
            }
        }
    }
    let _ = fatbin::scan(data, 0, &[]);
    if let Ok(object) = host::parse(data) {
        let mut out = Vec::new();
        let options = listing::ListOptions { elf: true, ptx: true, all: true };
        let _ = listing::Lister::new(&mut out, options, b"fuzz").object(&object, b"/fuzz");
    }
    let mut report = inspect::FileReport::new(String::new());
    report.size = data.len() as u64;
    inspect::inspect_bytes(
        data,
        inspect::Options { deep: true, scan: nix_cuda_hooks::devicecode::Scan::Full },
        &mut report,
    );
});
