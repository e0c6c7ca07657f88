//! Whether a file imports `dlopen`: an undefined symbol of that name in its
//! dynamic symbol table. A file that defines it (glibc itself) or only
//! mentions it in a string does not load libraries by name.

use super::Import;
use crate::elf::Elf;

/// SHT_DYNSYM.
const SHT_DYNSYM: u32 = 11;

/// The entry point the file imports, if any. The dynamic string table is
/// searched first (one `memmem`): most files lack the name altogether and
/// their symbols are never decoded. A file without section headers (a
/// stripped-header file the loader still runs) is judged by its dynamic
/// string table alone: the name there is an import unless the file is the
/// library that defines it.
pub fn imports(elf: &Elf<'_>) -> Option<Import> {
    let dynsym = elf.shdrs.iter().find(|s| s.sh_type == SHT_DYNSYM);
    let Some(sym) = dynsym else { return by_dynstr(elf) };
    let strs = elf.shdrs.get(sym.link as usize)?;
    let names = elf.slice(strs.offset, strs.size, "dynamic symbol names").ok()?;
    let has = |n: &[u8]| contains_name(names, n);
    let (dlopen, dlmopen) = (has(b"dlopen"), has(b"dlmopen"));
    if !dlopen && !dlmopen {
        return None;
    }
    let l = elf.layout;
    let entsize = if l.is64 { 24 } else { 16 };
    let table = elf.slice(sym.offset, sym.size, "dynamic symbols").ok()?;
    let (mut found_open, mut found_mopen) = (false, false);
    for (i, _) in table.chunks_exact(entsize).enumerate() {
        let at = sym.offset + (i * entsize) as u64;
        let Ok(name) = l.u32(elf.data, at, "symbol") else { break };
        let shndx_at = if l.is64 { at + 6 } else { at + 14 };
        let Ok(shndx) = l.u16(elf.data, shndx_at, "symbol") else { break };
        if shndx != 0 {
            continue;
        }
        match crate::elf::cstr(names.get(name as usize..).unwrap_or_default()) {
            Some(b"dlopen") => found_open = true,
            Some(b"dlmopen") => found_mopen = true,
            _ => {}
        }
    }
    match (found_open, found_mopen) {
        (true, _) => Some(Import::Dlopen),
        (false, true) => Some(Import::Dlmopen),
        _ => None,
    }
}

/// Whether `table` (NUL-separated names) holds `name` as a whole entry.
fn contains_name(table: &[u8], name: &[u8]) -> bool {
    memchr::memmem::find_iter(table, name).any(|at| {
        (at == 0 || table[at - 1] == 0) && table.get(at + name.len()).is_none_or(|&b| b == 0)
    })
}

/// Without section headers: the dynamic string table through DT_STRTAB.
fn by_dynstr(elf: &Elf<'_>) -> Option<Import> {
    let dynamic = elf.dynamic().ok()??;
    let strs = elf.dynstr(&dynamic).ok()?;
    if contains_name(strs.bytes, b"dlopen") {
        Some(Import::Dlopen)
    } else if contains_name(strs.bytes, b"dlmopen") {
        Some(Import::Dlmopen)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::contains_name;

    #[test]
    fn whole_names_only() {
        assert!(contains_name(b"\0foo\0dlopen\0", b"dlopen"));
        assert!(contains_name(b"dlopen", b"dlopen"));
        assert!(!contains_name(b"\0_dlopen\0", b"dlopen"));
        assert!(!contains_name(b"\0dlopenx\0", b"dlopen"));
    }
}
