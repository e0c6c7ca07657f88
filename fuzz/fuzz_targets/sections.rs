//! Fuzz target: section tables of many repeated or overlapping headers
//! (fatbin sections, read-only strings, dlopen notes, data) over one
//! region: the fatbin walk, the container probe and sampling, the dlopen
//! note and string passes. The first byte says how many headers (x16),
//! the second which names they take, the third how far apart they start;
//! the rest is the region. Each byte is walked once, so the containers
//! found fit in the file, and problems stay bounded.
#![no_main]

#[path = "../common/sections.rs"]
mod sections;

use libfuzzer_sys::fuzz_target;
use nix_cuda_hooks::devicecode::{host, traverse};
use nix_cuda_hooks::dlopen::{note, strings, Scan, MAX_PROBLEMS};
use nix_cuda_hooks::elf::Elf;

fuzz_target!(|data: &[u8]| {
    let [count, names, stagger, region @ ..] = data else { return };
    let count = usize::from(*count) * 16 + 1;
    let len = region.len() as u64;
    let headers: Vec<sections::Header> = (0..count as u64)
        .map(|i| {
            let name = (usize::from(*names) + i as usize * usize::from(names >> 4))
                % sections::NAMES.len();
            let offset = (i * u64::from(*stagger)).min(len);
            let sh_type = if name == 0 { 7 } else { 1 };
            sections::Header { name, sh_type, flags: 2, offset, size: len - offset }
        })
        .collect();
    let file = sections::elf(region, &headers);
    if let Ok(object) = host::parse(&file) {
        let _ = traverse::collect(&object);
        // A container is at least 16 bytes of header, and each byte is
        // walked once: the containers of all regions fit in the file.
        let mut containers = 0usize;
        traverse::visit(&object, &mut |part| {
            if let traverse::Part::Region { region, .. } = part {
                containers += region.containers.len();
            }
        });
        assert!(containers * 16 <= file.len(), "{containers} containers in {} bytes", file.len());
        let _ = traverse::probe(&file, &object);
        // The default reading: every data section searched whole, each
        // byte once however many headers cover it.
        let data = traverse::data_sections(&object);
        let searched: u64 = data.iter().map(|(s, e)| e - s).sum();
        assert!(searched <= file.len() as u64, "{searched} data bytes in {} bytes", file.len());
        let found = traverse::scan_sections(&file, &data, &|_| {});
        assert!(found.len() * 16 <= file.len(), "{} containers in {} bytes", found.len(), file.len());
    }
    let Ok(elf) = Elf::parse(&file) else { return };
    let mut scan = Scan::default();
    let mut seen = std::collections::HashSet::new();
    note::read(&elf, &mut scan, &mut seen);
    let found = strings::find(&elf, &mut scan.problems, &|_| {});
    assert!(scan.problems.len() <= MAX_PROBLEMS + 1, "{} problems", scan.problems.len());
    let searched: usize = strings::sections(&elf).iter().map(|s| s.bytes.len() - s.from).sum();
    assert!(searched <= file.len(), "{searched} string bytes searched in {} bytes", file.len());
    let _ = found.names.len();
});
