//! Where the bytes go: the new segment's file offset and address, and the
//! places of the moved table or block, the `.dynstr` copy, the new
//! `.dynamic` and the section header table copy inside and after it.

use super::grow::{Moved, Table};
use super::round_up;
use crate::elf::{Elf, ElfError, Phdr, StrTab, PT_INTERP};

/// The largest hole (sparse zeros) we leave in an executable to keep
/// `vaddr - offset` of the new segment equal to the first segment's (for
/// pre-5.18 kernels' `AT_PHDR`). A bigger `.bss` than this gets the library
/// placement instead, which kernels since 5.18 load correctly.
pub const MAX_EXEC_HOLE: u64 = 256 << 20;

/// The new segment's place and inner layout. Offsets named `*_off` other
/// than `off` and `sht_off` are relative to the segment's start.
#[derive(Debug)]
pub(super) struct Placement {
    /// The new PT_LOAD's alignment: the largest segment alignment (at least
    /// a page).
    pub(super) page: u64,
    /// Its file offset.
    pub(super) off: u64,
    /// Its address.
    pub(super) vaddr: u64,
    /// Program header count afterwards.
    pub(super) phnum: u64,
    /// The program header table's length afterwards.
    pub(super) phdr_len: u64,
    /// Where the moved block starts.
    pub(super) block_at: u64,
    /// Where the `.dynstr` copy starts.
    pub(super) str_off: u64,
    /// DT_STRSZ before: the new string's offset in the copy.
    pub(super) old_strsz: u64,
    /// DT_STRSZ afterwards.
    pub(super) new_strsz: u64,
    /// Where the new `.dynamic` starts.
    pub(super) dyn_off: u64,
    /// The segment's length.
    pub(super) seg_len: u64,
    /// File offset of the section header table copy.
    pub(super) sht_off: u64,
    /// Its length.
    pub(super) sht_len: u64,
}

fn overflow() -> ElfError {
    ElfError::Unsupported("no address space left for a new segment".into())
}

impl Placement {
    /// Where `table`'s moved block's addresses and offsets go (nothing
    /// moves unless the table grows).
    pub(super) fn moved(&self, table: &Table) -> Moved {
        let (off, len, addr) = match table {
            Table::Grow(g) => (g.off, g.len, g.addr),
            _ => (0, 0, 0),
        };
        Moved {
            off,
            len,
            addr,
            to_addr: self.vaddr + self.block_at,
            to_off: self.off + self.block_at,
        }
    }

    /// Places a segment for `table`'s choice holding the `.dynstr` copy with
    /// `value` appended and a `.dynamic` of `entries` entries (DT_NULL not
    /// counted). Layout of the segment: [moved headers | moved block]
    /// .dynstr copy + new string, .dynamic; then (outside the segment) the
    /// section headers.
    pub(super) fn plan(
        elf: &Elf<'_>,
        strtab: &StrTab<'_>,
        value: &[u8],
        table: &Table,
        entries: u64,
    ) -> Result<Placement, ElfError> {
        let l = elf.layout;
        let (first, page, v_min) = start(elf)?;
        let phnum = elf.phdrs.len() as u64 + u64::from(table.adds_entry());
        if phnum >= 0xffff {
            return Err(ElfError::Unsupported("too many program headers".into()));
        }
        let phdr_len = phnum * l.phdr_size();
        let (off, vaddr) = place(elf, &first, page, v_min, table.moves())?;
        let mut pos = if table.moves() { phdr_len } else { 0 };
        let mut block_at = 0;
        if let Table::Grow(g) = table {
            let here = vaddr.checked_add(pos).ok_or_else(overflow)?;
            block_at = pos + (g.addr.wrapping_sub(here) & (g.align - 1));
            pos = block_at + g.len;
        }
        let old_strsz = strtab.bytes.len() as u64;
        let str_off = round_up(pos, 8).ok_or_else(overflow)?;
        let new_strsz = old_strsz + value.len() as u64 + 1;
        check_slots(entries + 1)?;
        let dyn_off = round_up(str_off + new_strsz, l.word()).ok_or_else(overflow)?;
        let seg_len = dyn_off + (entries + 1) * l.dyn_size();
        let sht_off = off.checked_add(seg_len).and_then(|e| round_up(e, 8)).ok_or_else(overflow)?;
        let sht_len = elf.shdrs.len() as u64 * l.shdr_size();
        if vaddr.checked_add(seg_len).is_none_or(|e| e > l.word_max())
            || sht_off.checked_add(sht_len).is_none_or(|e| e > l.word_max())
        {
            return Err(overflow());
        }
        Ok(Placement {
            page,
            off,
            vaddr,
            phnum,
            phdr_len,
            block_at,
            str_off,
            old_strsz,
            new_strsz,
            dyn_off,
            seg_len,
            sht_off,
            sht_len,
        })
    }
}

/// Our reader refuses more dynamic slots than this; a file we write must
/// read back.
fn check_slots(slots: u64) -> Result<(), ElfError> {
    if slots > crate::elf::MAX_HEADERS {
        return Err(ElfError::Unsupported(format!(
            "the patched dynamic section would have {slots} entries (DT_NULL included), \
             over the limit of {}",
            crate::elf::MAX_HEADERS
        )));
    }
    Ok(())
}

/// The first PT_LOAD, the alignment of the new one (the largest of all, at
/// least a page), and the lowest address it may take: above every existing
/// segment's memory, so no mapping overlaps an old one.
fn start(elf: &Elf<'_>) -> Result<(Phdr, u64, u64), ElfError> {
    let loads: Vec<&Phdr> = elf.loads().collect();
    let first = *loads.first().ok_or_else(|| ElfError::Corrupt("no PT_LOAD segment".into()))?;
    let mut page: u64 = 0x1000;
    for p in &loads {
        if p.align > 1 {
            if !p.align.is_power_of_two() {
                return Err(ElfError::Corrupt(format!(
                    "segment alignment {:#x} is not a power of two",
                    p.align
                )));
            }
            page = page.max(p.align);
        }
    }
    let mut mem_end: u64 = 0;
    for p in &loads {
        let end = p
            .vaddr
            .checked_add(p.memsz)
            .ok_or_else(|| ElfError::Corrupt("segment end overflows".into()))?;
        mem_end = mem_end.max(end);
    }
    let v_min = round_up(mem_end, page).ok_or_else(overflow)?;
    Ok((*first, page, v_min))
}

/// The new segment's file offset and address: at the end of the file, its
/// offset congruent to its address modulo `page`. When the table moves into
/// an executable's segment, `vaddr - offset` equals the first segment's
/// (pre-5.18 kernels compute `AT_PHDR` as `load address + e_phoff`), at the
/// cost of a hole of up to [`MAX_EXEC_HOLE`].
fn place(
    elf: &Elf<'_>,
    first: &Phdr,
    page: u64,
    v_min: u64,
    move_phdrs: bool,
) -> Result<(u64, u64), ElfError> {
    let exec = elf.phdr(PT_INTERP).is_some() || elf.e_type == crate::elf::ET_EXEC;
    let delta = first.vaddr.checked_sub(first.offset).filter(|d| d % page == 0);
    let min_off = round_up(elf.data.len() as u64, 16).ok_or_else(overflow)?;
    let exec_off = match delta {
        Some(delta) if exec && move_phdrs => round_up(min_off.max(v_min.saturating_sub(delta)), 16)
            .filter(|off| off - min_off <= MAX_EXEC_HOLE)
            .and_then(|off| Some((off, off.checked_add(delta)?))),
        _ => None,
    };
    match exec_off {
        Some(placed) => Ok(placed),
        None => Ok((min_off, v_min.checked_add(min_off % page).ok_or_else(overflow)?)),
    }
}
