//! Fuzz target: the host-ELF walk (sections, archives and their members,
//! thin members, raw fatbins, cubins) and the classifier the hooks use.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nix_cuda_hooks::devicecode::host::{self, Object};
use nix_cuda_hooks::elf::{classify, Elf};

fuzz_target!(|data: &[u8]| {
    if let Ok(Object::Archive(members)) = host::parse(data) {
        for m in &members {
            if let Ok(o) = &m.object {
                let _ = o.format();
            }
            let _ = host::thin_member_path(std::path::Path::new("/a/lib.a"), m.name);
        }
    }
    let _ = host::parse_member(data);
    if let Ok(elf) = Elf::parse(data) {
        let _ = classify::classify(&elf);
        if let Ok(Some(d)) = elf.dynamic() {
            let _ = elf.dynstr(&d);
            let _ = nix_cuda_hooks::elf::patch::current_path(&elf, &d);
        }
        for s in &elf.shdrs {
            let _ = elf.section_name(s);
        }
        let _ = nix_cuda_hooks::elf::patch::device_code_ranges(&elf);
    }
});
