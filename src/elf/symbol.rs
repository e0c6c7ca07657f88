//! One defined dynamic symbol looked up by name through the file's own hash
//! table (`DT_GNU_HASH`, else `DT_HASH`), as the loader's `dlsym` finds it:
//! a bucket, a short chain and one name compared, so a 4-byte version
//! object is found in a 100 MB library by reading a few pages (the headers,
//! the hash table's words that the name selects, one symbol and its name),
//! never the whole symbol table. For every class and byte order.

use super::{Elf, ElfError};

/// `DT_HASH`.
const DT_HASH: i64 = 4;
/// `DT_SYMTAB`.
const DT_SYMTAB: i64 = 6;
/// `DT_GNU_HASH`.
const DT_GNU_HASH: i64 = 0x6fff_fef5;

/// A chain longer than this ends the lookup: a real chain has a handful of
/// entries; a corrupt one must not make it walk the whole file.
const MAX_CHAIN: u32 = 1 << 16;

/// A defined dynamic symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Symbol {
    /// `st_value`: its virtual address.
    pub value: u64,
    /// `st_size`.
    pub size: u64,
}

/// The defined dynamic symbol `name` (a `st_shndx` other than `SHN_UNDEF`),
/// `None` when the file has no dynamic hash table, no such symbol, or only
/// an undefined one (an import). Errors are damage met on the way.
pub fn lookup(elf: &Elf<'_>, name: &[u8]) -> Result<Option<Symbol>, ElfError> {
    let Some(dynamic) = elf.dynamic()? else { return Ok(None) };
    let strs = elf.dynstr(&dynamic)?;
    let Some(symtab) = dynamic.get(DT_SYMTAB) else { return Ok(None) };
    let table = Table { elf, symtab, strs };
    if let Some(at) = dynamic.get(DT_GNU_HASH) {
        return table.gnu(at, name);
    }
    if let Some(at) = dynamic.get(DT_HASH) {
        return table.sysv(at, name);
    }
    Ok(None)
}

/// What a lookup reads through.
struct Table<'e, 'a> {
    elf: &'e Elf<'a>,
    symtab: u64,
    strs: super::StrTab<'a>,
}

impl Table<'_, '_> {
    /// The file offset of `len` bytes at virtual address `vaddr`.
    fn offset(&self, vaddr: u64, len: u64, what: &str) -> Result<u64, ElfError> {
        self.elf.vaddr_to_offset(vaddr, len).ok_or_else(|| {
            ElfError::Corrupt(format!("{what} at {vaddr:#x} is not in a loaded segment's bytes"))
        })
    }

    /// The 32-bit word `index` of the table at `vaddr`.
    fn word(&self, vaddr: u64, index: u64, what: &'static str) -> Result<u32, ElfError> {
        let at = vaddr
            .checked_add(index.saturating_mul(4))
            .ok_or(ElfError::Corrupt(format!("{what} index {index} overflows")))?;
        let off = self.offset(at, 4, what)?;
        self.elf.layout.u32(self.elf.data, off, what)
    }

    /// Symbol `index` when it is defined and named `name`.
    fn symbol(&self, index: u64, name: &[u8]) -> Result<Option<Symbol>, ElfError> {
        let l = self.elf.layout;
        let size = if l.is64 { 24 } else { 16 };
        let vaddr = self.symtab.checked_add(index.saturating_mul(size)).ok_or_else(|| {
            ElfError::Corrupt(format!("dynamic symbol {index} overflows the address space"))
        })?;
        let at = self.offset(vaddr, size, "dynamic symbol")?;
        let d = self.elf.data;
        const S: &str = "dynamic symbol";
        let st_name = l.u32(d, at, S)?;
        if self.strs.get(u64::from(st_name))? != name {
            return Ok(None);
        }
        let (shndx, value, sz) = if l.is64 {
            (l.u16(d, at + 6, S)?, l.u64(d, at + 8, S)?, l.u64(d, at + 16, S)?)
        } else {
            (
                l.u16(d, at + 14, S)?,
                u64::from(l.u32(d, at + 4, S)?),
                u64::from(l.u32(d, at + 8, S)?),
            )
        };
        Ok((shndx != 0).then_some(Symbol { value, size: sz }))
    }

    /// Through `DT_GNU_HASH` (the bloom filter skipped: it only saves the
    /// bucket read).
    fn gnu(&self, at: u64, name: &[u8]) -> Result<Option<Symbol>, ElfError> {
        const W: &str = "GNU hash table";
        let nbuckets = self.word(at, 0, W)?;
        let symoffset = self.word(at, 1, W)?;
        let bloom_size = self.word(at, 2, W)?;
        if nbuckets == 0 {
            return Ok(None);
        }
        let bloom_words = u64::from(bloom_size) * if self.elf.layout.is64 { 2 } else { 1 };
        let buckets = 4 + bloom_words;
        let h = gnu_hash(name);
        let mut i = self.word(at, buckets + u64::from(h % nbuckets), W)?;
        if i < symoffset {
            return Ok(None);
        }
        let chain = buckets + u64::from(nbuckets);
        for _ in 0..MAX_CHAIN {
            let h2 = self.word(at, chain + u64::from(i - symoffset), W)?;
            if h2 | 1 == h | 1 {
                if let Some(s) = self.symbol(u64::from(i), name)? {
                    return Ok(Some(s));
                }
            }
            if h2 & 1 == 1 {
                return Ok(None);
            }
            i = i.checked_add(1).ok_or(ElfError::Corrupt("GNU hash chain overflows".into()))?;
        }
        Err(ElfError::Corrupt(format!("a GNU hash chain longer than {MAX_CHAIN}")))
    }

    /// Through the System V `DT_HASH`.
    fn sysv(&self, at: u64, name: &[u8]) -> Result<Option<Symbol>, ElfError> {
        const W: &str = "hash table";
        let nbucket = self.word(at, 0, W)?;
        let nchain = self.word(at, 1, W)?;
        if nbucket == 0 {
            return Ok(None);
        }
        let mut i = self.word(at, 2 + u64::from(sysv_hash(name) % nbucket), W)?;
        for _ in 0..MAX_CHAIN.min(nchain.saturating_add(1)) {
            if i == 0 {
                return Ok(None);
            }
            if let Some(s) = self.symbol(u64::from(i), name)? {
                return Ok(Some(s));
            }
            i = self.word(at, 2 + u64::from(nbucket) + u64::from(i), W)?;
        }
        Err(ElfError::Corrupt("a hash chain longer than the symbol count".into()))
    }
}

/// The GNU hash of a name (`h = h * 33 + c`, from 5381).
fn gnu_hash(name: &[u8]) -> u32 {
    name.iter().fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(u32::from(c)))
}

/// The System V ELF hash of a name.
fn sysv_hash(name: &[u8]) -> u32 {
    let mut h: u32 = 0;
    for &c in name {
        h = (h << 4).wrapping_add(u32::from(c));
        let g = h & 0xf000_0000;
        if g != 0 {
            h ^= g >> 24;
        }
        h &= !g;
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_the_documented_ones() {
        // Values from the ELF gABI and the GNU hash's definition.
        assert_eq!(gnu_hash(b""), 5381);
        assert_eq!(gnu_hash(b"printf"), 0x156b_2bb8);
        assert_eq!(sysv_hash(b"printf"), 0x0779_05a6);
    }
}
