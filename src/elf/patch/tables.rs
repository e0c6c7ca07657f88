//! The new tables: `.dynamic` with DT_STRTAB/DT_STRSZ pointing to the
//! `.dynstr` copy, the program headers with the new PT_LOAD, the section
//! header table copy, and the ELF header that switches the file to them.

use super::grow::{Moved, Table};
use super::layout::Placement;
use super::{POINTER_TAGS, SHF_ALLOC};
use crate::elf::{
    Dyn, Elf, ElfError, Layout, Phdr, Shdr, StrTab, DT_STRSZ, DT_STRTAB, PF_R, PF_W, PT_DYNAMIC,
    PT_LOAD, PT_PHDR, SHT_DYNAMIC, SHT_NOBITS, SHT_STRTAB,
};

/// The new `.dynamic`: `entries` (the search path already set) with the
/// string table at its copy and pointers into the moved block following it,
/// then DT_NULL.
pub(super) fn dynamic(l: Layout, mut entries: Vec<Dyn>, at: &Placement, moved: &Moved) -> Vec<u8> {
    let new_strtab = at.vaddr + at.str_off;
    for d in entries.iter_mut() {
        match d.tag {
            DT_STRTAB => d.val = new_strtab,
            DT_STRSZ => d.val = at.new_strsz,
            t if POINTER_TAGS.contains(&t) && moved.has_addr(d.val) => d.val = moved.addr(d.val),
            _ => {}
        }
    }
    let mut dyn_bytes = Vec::with_capacity((entries.len() + 1) * l.dyn_size() as usize);
    for d in &entries {
        d.write(l, &mut dyn_bytes);
    }
    Dyn { tag: 0, val: 0 }.write(l, &mut dyn_bytes);
    dyn_bytes
}

/// The new program header table: the reused entry dropped, PT_PHDR and
/// PT_DYNAMIC following their tables, headers into the moved block
/// following it, and the new PT_LOAD after the last old one (glibc wants
/// them sorted by address).
pub(super) fn program_headers(
    elf: &Elf<'_>,
    table: &Table,
    at: &Placement,
    moved: &Moved,
    dyn_len: u64,
) -> Vec<u8> {
    let (off, vaddr) = (at.off, at.vaddr);
    let mut phdrs = elf.phdrs.clone();
    if let Table::Spare(i) = table {
        phdrs.remove(*i);
    }
    for p in phdrs.iter_mut() {
        *p = match p.p_type {
            PT_PHDR if table.moves() => Phdr {
                offset: off,
                vaddr,
                paddr: vaddr,
                filesz: at.phdr_len,
                memsz: at.phdr_len,
                ..*p
            },
            PT_PHDR if matches!(table, Table::Grow(_)) => {
                Phdr { filesz: at.phdr_len, memsz: at.phdr_len, ..*p }
            }
            PT_DYNAMIC => Phdr {
                offset: off + at.dyn_off,
                vaddr: vaddr + at.dyn_off,
                paddr: vaddr + at.dyn_off,
                filesz: dyn_len,
                memsz: dyn_len,
                ..*p
            },
            t if t != PT_LOAD && moved.has_offset(p.offset) => {
                let v = moved.addr(p.vaddr);
                Phdr { offset: moved.offset(p.offset), vaddr: v, paddr: v, ..*p }
            }
            _ => *p,
        };
    }
    let last_load = phdrs.iter().rposition(|p| p.p_type == PT_LOAD).unwrap_or(0);
    let new_load = Phdr {
        p_type: PT_LOAD,
        flags: PF_R | PF_W,
        offset: off,
        vaddr,
        paddr: vaddr,
        filesz: at.seg_len,
        memsz: at.seg_len,
        align: at.page,
    };
    phdrs.insert(last_load + 1, new_load);
    let mut phdr_bytes = Vec::with_capacity(at.phdr_len as usize);
    for p in &phdrs {
        p.write(elf.layout, &mut phdr_bytes);
    }
    phdr_bytes
}

/// A copy of the section header table, with `.dynstr`, `.dynamic` and the
/// moved block's sections pointing to their new places.
pub(super) fn section_headers(
    elf: &Elf<'_>,
    strtab: &StrTab<'_>,
    at: &Placement,
    moved: &Moved,
    dyn_len: u64,
) -> Result<Vec<u8>, ElfError> {
    let (off, vaddr) = (at.off, at.vaddr);
    let mut sht = Vec::with_capacity(at.sht_len as usize);
    let dynsec = elf.shdrs.iter().position(|s| s.sh_type == SHT_DYNAMIC);
    let strsec = string_section(elf, strtab, dynsec, at.old_strsz)?;
    for (k, sh) in elf.shdrs.iter().enumerate() {
        let new = if Some(k) == strsec {
            Shdr { addr: vaddr + at.str_off, offset: off + at.str_off, size: at.new_strsz, ..*sh }
        } else if Some(k) == dynsec {
            Shdr { addr: vaddr + at.dyn_off, offset: off + at.dyn_off, size: dyn_len, ..*sh }
        } else if sh.flags & SHF_ALLOC != 0 && sh.sh_type != SHT_NOBITS && moved.has_addr(sh.addr) {
            Shdr { addr: moved.addr(sh.addr), offset: moved.offset(sh.offset), ..*sh }
        } else {
            *sh
        };
        new.write(elf.layout, &mut sht);
    }
    Ok(sht)
}

/// The section that becomes the `.dynstr` copy, checked to hold the bytes
/// the copy starts with.
fn string_section(
    elf: &Elf<'_>,
    strtab: &StrTab<'_>,
    dynsec: Option<usize>,
    old_strsz: u64,
) -> Result<Option<usize>, ElfError> {
    // The table `.dynamic` links to is what readelf and `object` read its
    // strings from: it must be DT_STRTAB's, or the new string would be
    // outside the table they read (found by the readelf check over the fuzz
    // corpus: a section table whose addresses disagree with the segments).
    let strsec = match dynsec.map(|i| elf.shdrs[i].link as usize) {
        Some(k) => match elf.shdrs.get(k) {
            Some(s) if s.addr == strtab.addr => Some(k),
            _ => {
                return Err(ElfError::Unsupported(format!(
                    "the section .dynamic links to ({k}) is not the DT_STRTAB table at {:#x}",
                    strtab.addr
                )))
            }
        },
        None => elf
            .shdrs
            .iter()
            .position(|s| s.sh_type == SHT_STRTAB && s.addr == strtab.addr && s.addr != 0),
    };
    // The copy holds DT_STRSZ bytes; a section header claiming more would
    // lose the rest (symbol names read through `.dynsym`'s link) once it
    // points at the copy (found by fuzzing: a mutated DT_STRSZ).
    // Likewise its bytes must be the ones DT_STRTAB maps to: a section
    // header at another file offset (the segment mapping disagreeing with
    // the section table) would be pointed at a copy of other bytes (found by
    // fuzzing: a mutated PT_LOAD offset).
    // A section shorter than DT_STRSZ is fine: the copy holds all of its
    // bytes and more, and the loader reads DT_STRSZ, not the section
    // (NVIDIA's driver libraries, e.g. libnvidia-glcore.so.580, ship a
    // `.dynstr` section of 2713 bytes under a DT_STRSZ of 3147; patchelf
    // patches them).
    if let Some(k) = strsec {
        let size = elf.shdrs[k].size;
        if size > old_strsz {
            return Err(ElfError::Unsupported(format!(
                "the .dynstr section ({size} bytes) and DT_STRSZ ({old_strsz}) disagree"
            )));
        }
        let at = elf.shdrs[k].offset;
        if at != strtab.offset {
            return Err(ElfError::Unsupported(format!(
                "the .dynstr section (file offset {at:#x}) and DT_STRTAB (file offset {:#x}) disagree",
                strtab.offset
            )));
        }
    }
    Ok(strsec)
}

/// The ELF header with the new e_phoff (when the table moves), e_shoff and
/// e_phnum. Written together with the program header table when it stays
/// in place: one write (the table follows the header in every linker's
/// output) switches the file to the new layout.
pub(super) fn elf_header(
    elf: &Elf<'_>,
    at: &Placement,
    move_phdrs: bool,
) -> Result<Vec<u8>, ElfError> {
    let l = elf.layout;
    let mut ehdr = elf.slice(0, l.ehdr_size(), "ELF header")?.to_vec();
    let mut put = |pos: u64, bytes: Vec<u8>| {
        ehdr[pos as usize..pos as usize + bytes.len()].copy_from_slice(&bytes);
    };
    if move_phdrs {
        let mut b = Vec::new();
        l.put_word(&mut b, at.off);
        put(24 + l.word(), b);
    }
    if !elf.shdrs.is_empty() {
        let mut b = Vec::new();
        l.put_word(&mut b, at.sht_off);
        put(24 + 2 * l.word(), b);
    }
    let mut b = Vec::new();
    l.put_u16(&mut b, at.phnum as u16);
    put(24 + 3 * l.word() + 4 + 4, b);
    Ok(ehdr)
}
