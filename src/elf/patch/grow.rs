//! Making room for one more program header: a redundant entry to reuse, or
//! the block of sections right after the table that moves to the new
//! segment so the table can grow in place, or else the table moves.

use super::{Strategy, SHF_ALLOC};
use crate::elf::{Elf, Phdr, PT_GNU_PROPERTY, PT_INTERP, PT_LOAD, PT_NOTE, PT_NULL, SHT_NOBITS};

/// The largest block of sections the grow strategy copies to make room for
/// one more program header; a larger one (never seen: real blocks are notes,
/// hash tables and `.dynsym`, kilobytes to a few MiB) moves the table instead.
pub const MAX_GROW_BLOCK: u64 = 16 << 20;

/// Where the program header table goes.
pub(super) enum Table {
    /// Entry `i` is redundant and becomes the new PT_LOAD.
    Spare(usize),
    /// The table grows in place; the sections in the way move.
    Grow(Grow),
    /// The table moves into the new segment.
    Move,
}

/// The block of sections that moves so the table can grow by one entry.
#[derive(Clone, Copy, Debug)]
pub(super) struct Grow {
    /// File offset of the block.
    pub(super) off: u64,
    /// Its length.
    pub(super) len: u64,
    /// Its virtual address.
    pub(super) addr: u64,
    /// The largest alignment of a section in it.
    pub(super) align: u64,
}

impl Table {
    /// The cheapest way to get one more entry: a spare one, room made in
    /// place, or a move.
    pub(super) fn choose(elf: &Elf<'_>) -> Table {
        match spare_phdr(elf) {
            Some(i) => Table::Spare(i),
            None => match grow_plan(elf) {
                Some(g) => Table::Grow(g),
                None => Table::Move,
            },
        }
    }

    /// Whether the table moves into the new segment.
    pub(super) fn moves(&self) -> bool {
        matches!(self, Table::Move)
    }

    /// Whether the table gets one more entry (it does unless one is reused).
    pub(super) fn adds_entry(&self) -> bool {
        !matches!(self, Table::Spare(_))
    }

    /// The strategy this choice makes.
    pub(super) fn strategy(&self) -> Strategy {
        match self {
            Table::Spare(_) => Strategy::NewSegment,
            Table::Grow(_) => Strategy::NewSegmentGrownHeaders,
            Table::Move => Strategy::NewSegmentMovedHeaders,
        }
    }
}

/// The moved block: what was at `off`/`addr` (`len` bytes) is now at
/// `to_off`/`to_addr`; headers and dynamic entries pointing into it follow.
pub(super) struct Moved {
    pub(super) off: u64,
    pub(super) len: u64,
    pub(super) addr: u64,
    pub(super) to_addr: u64,
    pub(super) to_off: u64,
}

impl Moved {
    /// Whether `addr` is inside the block.
    pub(super) fn has_addr(&self, addr: u64) -> bool {
        self.len > 0 && addr >= self.addr && addr - self.addr < self.len
    }

    /// Whether file offset `o` is inside the block.
    pub(super) fn has_offset(&self, o: u64) -> bool {
        self.len > 0 && o >= self.off && o - self.off < self.len
    }

    /// Where address `addr` of the block went. Wrapping: a corrupt header may
    /// put an address and an offset on different sides of the block;
    /// verification rejects what results.
    pub(super) fn addr(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.addr).wrapping_add(self.to_addr)
    }

    /// Where file offset `o` of the block went.
    pub(super) fn offset(&self, o: u64) -> u64 {
        o.wrapping_sub(self.off).wrapping_add(self.to_off)
    }
}

/// A program header entry that can become the new PT_LOAD without loss:
/// a PT_NULL, or a PT_NOTE that only repeats the PT_GNU_PROPERTY range
/// (glibc reads PT_NOTE only when there is no PT_GNU_PROPERTY, and the
/// kernel reads PT_GNU_PROPERTY; the note stays in the file and in its
/// section).
fn spare_phdr(elf: &Elf<'_>) -> Option<usize> {
    elf.phdrs.iter().position(|p| p.p_type == PT_NULL).or_else(|| {
        let prop = elf.phdr(PT_GNU_PROPERTY)?;
        elf.phdrs.iter().position(|p| {
            p.p_type == PT_NOTE
                && (p.offset, p.vaddr, p.filesz, p.memsz)
                    == (prop.offset, prop.vaddr, prop.filesz, prop.memsz)
        })
    })
}

/// Whether `[o, o+n)` meets `[a, b)`.
fn overlaps(o: u64, n: u64, a: u64, b: u64) -> bool {
    o < b && o.saturating_add(n) > a
}

/// Sections with file bytes.
fn with_bytes<'e>(elf: &'e Elf<'_>) -> impl Iterator<Item = &'e crate::elf::Shdr> {
    elf.shdrs.iter().filter(|s| s.sh_type != SHT_NOBITS && s.size > 0)
}

/// Headers other than PT_LOAD with file bytes.
fn non_load_with_bytes<'e>(elf: &'e Elf<'_>) -> impl Iterator<Item = &'e Phdr> {
    elf.phdrs.iter().filter(|p| p.p_type != PT_LOAD && p.filesz > 0)
}

/// Plans room for one more program header right after the table: the
/// sections in the way (notes, `.interp`, hash tables, `.dynsym`, version
/// tables, dynamic relocations — things only headers and `.dynamic` point
/// to) are copied to the new segment as one block, keeping their relative
/// layout, and every header and dynamic entry pointing into them follows.
/// The old bytes stay too, except the few the new entry overwrites. `None`
/// when anything else is in the way.
fn grow_plan(elf: &Elf<'_>) -> Option<Grow> {
    let l = elf.layout;
    let ent = l.phdr_size();
    if elf.phoff != l.ehdr_size() || elf.shdrs.is_empty() {
        return None;
    }
    let tab_end = elf.phoff + elf.phdrs.len() as u64 * ent;
    let need = tab_end + ent;
    let first = elf.loads().find(|p| p.covers_offset(elf.phoff, need - elf.phoff))?;
    let (b0, b1) = match block_in_the_way(elf, tab_end, need) {
        None => {
            // Nothing in the way: the bytes after the table are free padding,
            // unless a header points there.
            if non_load_with_bytes(elf).any(|p| overlaps(p.offset, p.filesz, tab_end, need)) {
                return None;
            }
            return Some(Grow { off: need, len: 0, addr: 0, align: 1 });
        }
        Some(block) => closed_block(elf, tab_end, block)?,
    };
    // Checked again here: a block that never grew (the first sections in
    // the way straddle nothing) was not checked in the loop.
    if b1 - b0 > MAX_GROW_BLOCK {
        return None;
    }
    if !first.covers_offset(b0, b1 - b0) {
        return None;
    }
    let align = movable_block(elf, first, b0, b1)?;
    let addr = first.vaddr.checked_add(b0 - first.offset)?;
    // And the other way round: headers are moved by address, so a section
    // whose address is in the block must have its bytes there too, or its
    // moved header would point past them (found by fuzzing: a corrupt
    // .eh_frame_hdr address inside the block).
    for s in elf.shdrs.iter().filter(|s| s.sh_type != SHT_NOBITS && s.flags & SHF_ALLOC != 0) {
        if s.addr >= addr && s.addr - addr < b1 - b0 && s.offset != b0 + (s.addr - addr) {
            return None;
        }
    }
    Some(Grow { off: b0, len: b1 - b0, addr, align })
}

/// The file range `[b0, b1)` of the sections over `[tab_end, need)`, the
/// bytes the new entry needs; `None` when no section is there.
fn block_in_the_way(elf: &Elf<'_>, tab_end: u64, need: u64) -> Option<(u64, u64)> {
    let mut b0 = u64::MAX;
    let mut b1 = tab_end;
    for s in &elf.shdrs {
        if s.sh_type != SHT_NOBITS && s.size > 0 && overlaps(s.offset, s.size, tab_end, need) {
            b0 = b0.min(s.offset);
            b1 = b1.max(s.offset.saturating_add(s.size));
        }
    }
    (b0 != u64::MAX).then_some((b0, b1))
}

/// The block grown until no section or header straddles its edges; `None`
/// when it reaches back into the table or over [`MAX_GROW_BLOCK`].
fn closed_block(elf: &Elf<'_>, tab_end: u64, (mut b0, mut b1): (u64, u64)) -> Option<(u64, u64)> {
    if b0 < tab_end {
        return None;
    }
    loop {
        let (mut n0, mut n1) = (b0, b1);
        for s in with_bytes(elf) {
            if overlaps(s.offset, s.size, b0, b1) {
                n0 = n0.min(s.offset);
                n1 = n1.max(s.offset.saturating_add(s.size));
            }
        }
        for p in non_load_with_bytes(elf) {
            if overlaps(p.offset, p.filesz, b0, b1) {
                n0 = n0.min(p.offset);
                n1 = n1.max(p.offset.saturating_add(p.filesz));
            }
        }
        if (n0, n1) == (b0, b1) {
            return Some((b0, b1));
        }
        (b0, b1) = (n0, n1);
        if b0 < tab_end || b1 - b0 > MAX_GROW_BLOCK {
            return None;
        }
    }
}

/// The largest section alignment in the block `[b0, b1)`, if everything in
/// it can move: allocated sections of the kinds only headers and `.dynamic`
/// point to, and notes or `.interp` headers, each at the address its offset
/// maps to in the first segment.
fn movable_block(elf: &Elf<'_>, first: &Phdr, b0: u64, b1: u64) -> Option<u64> {
    let mut align = 1u64;
    for s in with_bytes(elf) {
        if !overlaps(s.offset, s.size, b0, b1) {
            continue;
        }
        let movable = matches!(
            s.sh_type,
            3 | 4 | 5 | 7 | 9 | 11 | 19 | 0x6fff_fff6 | 0x6fff_fffd | 0x6fff_fffe | 0x6fff_ffff
        ) || (s.sh_type == 1 && elf.section_name(s) == Some(b".interp"));
        if !movable || s.flags & SHF_ALLOC == 0 {
            return None;
        }
        // Headers follow the block by address: a section whose address
        // disagrees with its offset would be overwritten, not moved (found
        // by fuzzing: a corrupt note address let the grown table overwrite
        // .note.gnu.build-id).
        if Some(s.addr) != first.vaddr.checked_add(s.offset - first.offset) {
            return None;
        }
        align = align.max(s.addralign.max(1));
    }
    for p in non_load_with_bytes(elf) {
        if overlaps(p.offset, p.filesz, b0, b1)
            && (!matches!(p.p_type, PT_NOTE | PT_GNU_PROPERTY | PT_INTERP)
                || p.offset < b0
                || Some(p.vaddr) != first.vaddr.checked_add(p.offset - first.offset))
        {
            return None;
        }
    }
    if !align.is_power_of_two() || align > 0x1000 {
        return None;
    }
    Some(align)
}
