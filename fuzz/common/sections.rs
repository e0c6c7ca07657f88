//! A minimal ELF64 little-endian file whose section table holds many
//! headers over one region of fuzzed bytes, for the `notes` and `sections`
//! targets (issue 29: overlapping or repeated headers must cost the file's
//! bytes, not its header count).

/// One header over the region: its name (an index into [`NAMES`]), type,
/// flags, and where it points inside the region.
pub struct Header {
    pub name: usize,
    pub sh_type: u32,
    pub flags: u64,
    pub offset: u64,
    pub size: u64,
}

/// The section names headers may take.
pub const NAMES: &[&str] = &[".note.dlopen", ".nv_fatbin", ".rodata", "__nv_relfatbin", ".data"];

/// The file: ELF header, the region at offset 64, `.shstrtab`, then the
/// section table (null section, `headers`, `.shstrtab`).
pub fn elf(region: &[u8], headers: &[Header]) -> Vec<u8> {
    let mut strtab = vec![0u8];
    let mut at = Vec::new();
    for n in NAMES.iter().chain([&".shstrtab"]) {
        at.push(strtab.len() as u32);
        strtab.extend(n.as_bytes());
        strtab.push(0);
    }
    let mut data = vec![0u8; 64];
    data.extend(region);
    data.resize(data.len().next_multiple_of(8), 0);
    let strtab_off = data.len() as u64;
    data.extend(&strtab);
    data.resize(data.len().next_multiple_of(8), 0);
    let shoff = data.len() as u64;
    data.extend([0u8; 64]);
    let put = |name: u32, ty: u32, flags: u64, off: u64, size: u64, data: &mut Vec<u8>| {
        data.extend(name.to_le_bytes());
        data.extend(ty.to_le_bytes());
        data.extend(flags.to_le_bytes());
        data.extend(0u64.to_le_bytes());
        data.extend(off.to_le_bytes());
        data.extend(size.to_le_bytes());
        data.extend([0u8; 8]);
        data.extend(4u64.to_le_bytes());
        data.extend(0u64.to_le_bytes());
    };
    for h in headers {
        put(at[h.name % NAMES.len()], h.sh_type, h.flags, 64 + h.offset, h.size, &mut data);
    }
    put(at[NAMES.len()], 3, 0, strtab_off, strtab.len() as u64, &mut data);
    let shnum = (headers.len() + 2) as u16;
    let mut h = Vec::new();
    h.extend(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
    h.extend(3u16.to_le_bytes()); // ET_DYN
    h.extend(62u16.to_le_bytes()); // EM_X86_64
    h.extend(1u32.to_le_bytes());
    h.extend(0u64.to_le_bytes());
    h.extend(0u64.to_le_bytes()); // phoff
    h.extend(shoff.to_le_bytes());
    h.extend(0u32.to_le_bytes());
    h.extend(64u16.to_le_bytes());
    h.extend(56u16.to_le_bytes());
    h.extend(0u16.to_le_bytes());
    h.extend(64u16.to_le_bytes());
    h.extend(shnum.to_le_bytes());
    h.extend((shnum - 1).to_le_bytes());
    data[..64].copy_from_slice(&h);
    data
}
