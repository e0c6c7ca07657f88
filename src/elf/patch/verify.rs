//! The independent check of a patched file before it may replace the
//! original: our reader re-parses the result and compares it with the
//! original, and the `object` crate compares the dynamic symbols.

use object::read::elf::{FileHeader, Sym};
use object::Endianness;

use super::{current_path, round_up, POINTER_TAGS};
use crate::elf::runpath::Tag;
use crate::elf::{
    Dyn, Dynamic, Elf, ElfError, Phdr, DT_RPATH, DT_RUNPATH, DT_STRSZ, DT_STRTAB, PT_DYNAMIC,
    PT_GNU_PROPERTY, PT_INTERP, PT_LOAD, PT_NOTE, PT_PHDR, SHT_NOBITS, STRING_TAGS,
};

fn bad(m: String) -> ElfError {
    ElfError::Verify(m)
}

/// Checks a patched file against its original before it may replace it:
/// the search path reads back as planned; every other dynamic entry is the
/// same and its strings resolve to the same text; every old PT_LOAD is still
/// there unchanged; the table stays sorted with non-overlapping pages and
/// PT_PHDR covered; and, read by the `object` crate, the dynamic symbols and
/// their versions are the same. Device code is compared by the caller
/// ([`device_code_ranges`]) with bounded reads, so that checking a 750 MB
/// library does not map it all into memory.
pub fn verify(old: &Elf<'_>, new_data: &[u8], value: &[u8], tag: Tag) -> Result<(), ElfError> {
    let new = Elf::parse(new_data).map_err(|e| bad(format!("re-parse: {e}")))?;
    let od = old.dynamic()?.ok_or_else(|| bad("no dynamic segment".into()))?;
    let nd = new
        .dynamic()
        .map_err(|e| bad(e.to_string()))?
        .ok_or_else(|| bad("dynamic segment lost".into()))?;
    match current_path(&new, &nd).map_err(|e| bad(e.to_string()))? {
        Some((v, t)) if v == value && t == tag => {}
        other => return Err(bad(format!("search path reads back as {other:?}"))),
    }
    same_dynamic(old, &new, &od, &nd)?;
    same_other_headers(old, &new)?;
    same_loads(old, &new)?;
    if old.layout.is64 {
        compare_symbols::<object::elf::FileHeader64<Endianness>>(old.data, new_data)
    } else {
        compare_symbols::<object::elf::FileHeader32<Endianness>>(old.data, new_data)
    }
}

/// Every dynamic entry but the string table and search path is the same
/// (a pointer may follow a moved table if what it points to is the same),
/// and every string entry resolves to the same text.
fn same_dynamic(old: &Elf<'_>, new: &Elf<'_>, od: &Dynamic, nd: &Dynamic) -> Result<(), ElfError> {
    let ostr = old.dynstr(od)?;
    let nstr = new.dynstr(nd).map_err(|e| bad(e.to_string()))?;
    let keep = |d: &&Dyn| !matches!(d.tag, DT_STRTAB | DT_STRSZ | DT_RUNPATH | DT_RPATH);
    let (oe, ne): (Vec<&Dyn>, Vec<&Dyn>) =
        (od.entries.iter().filter(keep).collect(), nd.entries.iter().filter(keep).collect());
    if oe.len() != ne.len() {
        return Err(bad("dynamic entries differ".into()));
    }
    for (o, n) in oe.iter().zip(&ne) {
        if o == n {
            continue;
        }
        let same = o.tag == n.tag && POINTER_TAGS.contains(&o.tag) && same_pointee(old, new, o, n);
        if !same {
            return Err(bad(format!("dynamic entry {:#x} changed", o.tag)));
        }
    }
    for d in oe.iter().filter(|d| STRING_TAGS.contains(&d.tag)) {
        if ostr.get(d.val)? != nstr.get(d.val).map_err(|e| bad(e.to_string()))? {
            return Err(bad(format!("string of dynamic tag {:#x} changed", d.tag)));
        }
    }
    Ok(())
}

/// Whether a pointer that followed a moved table points to the same bytes:
/// up to 64, within the section the old pointer is in.
fn same_pointee(old: &Elf<'_>, new: &Elf<'_>, o: &Dyn, n: &Dyn) -> bool {
    let (Some(a), Some(b)) = (old.vaddr_to_offset(o.val, 1), new.vaddr_to_offset(n.val, 1)) else {
        return false;
    };
    let rest = old
        .shdrs
        .iter()
        .filter(|s| s.sh_type != SHT_NOBITS && s.addr <= o.val)
        .find(|s| o.val - s.addr < s.size)
        .map(|s| s.size - (o.val - s.addr));
    match rest {
        Some(rest) => {
            let len = 64.min(rest).min(new.data.len() as u64 - b);
            old.slice(a, len, "pointed-to bytes").ok() == new.slice(b, len, "pointed-to bytes").ok()
        }
        None => false,
    }
}

/// Every header but PT_LOAD, PT_PHDR and PT_DYNAMIC is an old one, possibly
/// moved with its bytes.
fn same_other_headers(old: &Elf<'_>, new: &Elf<'_>) -> Result<(), ElfError> {
    for n in new.phdrs.iter().filter(|p| !matches!(p.p_type, PT_LOAD | PT_PHDR | PT_DYNAMIC)) {
        let found = old.phdrs.iter().any(|o| {
            (o.p_type, o.flags, o.filesz, o.memsz, o.align)
                == (n.p_type, n.flags, n.filesz, n.memsz, n.align)
                && if (o.offset, o.vaddr) == (n.offset, n.vaddr) {
                    true
                } else {
                    matches!(n.p_type, PT_NOTE | PT_GNU_PROPERTY | PT_INTERP)
                        && old.slice(o.offset, o.filesz, "note").ok()
                            == new.slice(n.offset, n.filesz, "note").ok()
                }
        });
        if !found {
            return Err(bad(format!("program header of type {:#x} changed", n.p_type)));
        }
    }
    Ok(())
}

/// Every old PT_LOAD is still there; new ones are above the old pages; the
/// table stays sorted if it was; PT_PHDR stays covered by a PT_LOAD.
fn same_loads(old: &Elf<'_>, new: &Elf<'_>) -> Result<(), ElfError> {
    let nloads: Vec<&Phdr> = new.loads().collect();
    for p in old.loads() {
        if !nloads.contains(&p) {
            return Err(bad(format!("segment at {:#x} changed", p.vaddr)));
        }
    }
    let old_loads: Vec<&Phdr> = old.loads().collect();
    let old_end = old_loads.iter().map(|p| p.vaddr.saturating_add(p.memsz)).max().unwrap_or(0);
    let old_end = round_up(old_end, 0x1000).unwrap_or(u64::MAX);
    for p in nloads.iter().filter(|p| !old_loads.contains(p)) {
        if p.vaddr < old_end {
            return Err(bad(format!("new segment at {:#x} overlaps an old one", p.vaddr)));
        }
    }
    if nloads.windows(2).any(|w| w[1].vaddr < w[0].vaddr)
        && !old_loads.windows(2).any(|w| w[1].vaddr < w[0].vaddr)
    {
        return Err(bad("loadable segments are no longer sorted by address".into()));
    }
    if let Some(ph) = new.phdr(PT_PHDR) {
        if !nloads.iter().any(|p| {
            ph.vaddr >= p.vaddr
                && ph.vaddr.saturating_add(ph.memsz) <= p.vaddr.saturating_add(p.filesz)
        }) {
            return Err(bad("PT_PHDR is not covered by a loadable segment".into()));
        }
    }
    Ok(())
}

/// The file ranges `(offset, len)` of `.nv_fatbin` and `__nv_relfatbin`.
pub fn device_code_ranges(elf: &Elf<'_>) -> Vec<(u64, u64)> {
    elf.shdrs
        .iter()
        .filter(|s| s.sh_type != SHT_NOBITS && s.size > 0)
        .filter(|s| matches!(elf.section_name(s), Some(b".nv_fatbin") | Some(b"__nv_relfatbin")))
        .map(|s| (s.offset, s.size))
        .collect()
}

fn compare_symbols<H: FileHeader<Endian = Endianness>>(
    old: &[u8],
    new: &[u8],
) -> Result<(), ElfError> {
    let read = |data| -> Result<_, ElfError> {
        let header = H::parse(data).map_err(|e| bad(format!("object: {e}")))?;
        let endian = header.endian().map_err(|e| bad(format!("object: {e}")))?;
        let sections = header.sections(endian, data).map_err(|e| bad(format!("object: {e}")))?;
        let syms = sections
            .symbols(endian, data, object::elf::SHT_DYNSYM)
            .map_err(|e| bad(format!("object: dynamic symbols: {e}")))?;
        let versions =
            sections.versions(endian, data).map_err(|e| bad(format!("object: versions: {e}")))?;
        Ok((endian, syms, versions))
    };
    let (oe, osyms, over) = read(old)?;
    let (ne, nsyms, nver) = read(new)?;
    if osyms.symbols().len() != nsyms.symbols().len() {
        return Err(bad("dynamic symbol count changed".into()));
    }
    for (i, (a, b)) in osyms.symbols().iter().zip(nsyms.symbols()).enumerate() {
        let an = a.name(oe, osyms.strings()).map_err(|e| bad(format!("old symbol {i}: {e}")))?;
        let bn = b.name(ne, nsyms.strings()).map_err(|e| bad(format!("symbol {i}: {e}")))?;
        if an != bn || a.st_value(oe).into() != b.st_value(ne).into() {
            return Err(bad(format!("dynamic symbol {i} changed")));
        }
        let idx = object::SymbolIndex(i);
        let va = over
            .as_ref()
            .map(|v| v.version(v.version_index(oe, idx).index()).map(|x| x.map(|x| x.name())));
        let vb = nver
            .as_ref()
            .map(|v| v.version(v.version_index(ne, idx).index()).map(|x| x.map(|x| x.name())));
        match (va, vb) {
            (None, None) => {}
            (Some(Ok(x)), Some(Ok(y))) if x == y => {}
            _ => return Err(bad(format!("version of dynamic symbol {i} changed"))),
        }
    }
    Ok(())
}
