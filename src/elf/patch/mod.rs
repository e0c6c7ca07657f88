//! The targeted RUNPATH writer and the verifier of its result.
//!
//! Strategy, cheapest first; everything not listed stays byte-identical
//! (code, data, `.nv_fatbin`, `__nv_relfatbin`, symbol tables, debug info):
//!
//! 1. **Tag only**: the string is already right and only DT_RPATH must become
//!    DT_RUNPATH (or back): one tag word in `.dynamic` changes.
//! 2. **New segment**: a new PT_LOAD (read-write, like patchelf's, because
//!    glibc may write to `.dynamic`) is appended at the end of the file. It
//!    holds a copy of `.dynstr` with the new string at its end and a new
//!    `.dynamic` whose DT_STRTAB / DT_STRSZ point to the copy (every old
//!    string offset stays valid because the copy starts with the old table).
//!    After the segment comes a copy of the section header table in which
//!    `.dynstr` and `.dynamic` point to the new copies, so that readelf,
//!    `object` and later tools agree. The program header table needs one
//!    more entry, found in this order:
//!    - **spare** ([`Strategy::NewSegment`]): a PT_NULL, or a PT_NOTE that
//!      only repeats PT_GNU_PROPERTY, becomes the new PT_LOAD;
//!    - **grow** ([`Strategy::NewSegmentGrownHeaders`]): the sections right
//!      after the table that only headers and `.dynamic` point to (`.interp`,
//!      notes, hash tables, `.dynsym`, version tables, dynamic relocations)
//!      are copied as one block into the new segment, their headers and
//!      dynamic entries follow, and the table grows over their first bytes
//!      (what patchelf does, limited to one entry);
//!    - **move** ([`Strategy::NewSegmentMovedHeaders`]): the table moves
//!      into the new segment (files without section headers, odd layouts).
//!
//!    The first two keep the table right after the ELF header, where
//!    binutils' strip/objcopy and pre-5.18 kernels' `AT_PHDR` expect it. The
//!    old bytes that change are the ELF header and the program header table
//!    (plus, when growing, one entry's worth of the moved block), all in the
//!    first page: one write switches the file from the old layout to the new
//!    one, which is what makes the in-place mode safe. The old `.dynstr`,
//!    `.dynamic` and section headers stay where they were, unreferenced.
//!
//! Placement of the new segment: its pages start above every existing
//! segment's memory (so no mapping overlaps an old one) and its file offset
//! is congruent to its address modulo the largest segment alignment. The new
//! PT_LOAD is inserted after the last old PT_LOAD, keeping the table sorted by
//! address (glibc requires it). When the table moves into an executable's new
//! segment, the address is also chosen so that `vaddr - offset` equals the
//! first segment's, because kernels before 5.18 compute `AT_PHDR` as
//! `load address + e_phoff`; the file may then get a hole (sparse, zeros) as
//! large as `.bss`, up to [`MAX_EXEC_HOLE`].
//!
//! The file is never built in memory: a [`Rewrite`] is a list of small edits
//! over the original bytes plus pieces to append, two of which are ranges of
//! the original file (the `.dynstr` copy, the moved block), so memory stays
//! small whatever the file size.

use object::read::elf::{FileHeader, Sym};
use object::Endianness;

use super::runpath::Tag;
use super::{
    Dyn, Dynamic, Elf, ElfError, Phdr, DT_RPATH, DT_RUNPATH, DT_STRSZ, DT_STRTAB, PF_R, PF_W,
    PT_DYNAMIC, PT_INTERP, PT_LOAD, PT_PHDR, SHT_DYNAMIC, SHT_STRTAB, STRING_TAGS,
};

/// Which strategy a rewrite uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Only a dynamic tag changed.
    TagOnly,
    /// A segment was appended (`.dynstr` copy, `.dynamic`) and a section
    /// header table after it; the program header table stayed in place, one
    /// redundant entry reused for the new PT_LOAD.
    NewSegment,
    /// Like `NewSegment`, but the table grew by one entry in place: the
    /// sections right after it (notes, hash tables, ...) moved to the new
    /// segment.
    NewSegmentGrownHeaders,
    /// Like `NewSegment`, but the program header table (one entry longer)
    /// moved into the new segment: no room could be made in place.
    NewSegmentMovedHeaders,
}

/// Bytes to overwrite in the copy of the original file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    /// File offset.
    pub offset: u64,
    /// New bytes.
    pub bytes: Vec<u8>,
}

/// A piece of the appended segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Literal bytes.
    Bytes(Vec<u8>),
    /// A range of the original file.
    Input {
        /// Offset in the original.
        offset: u64,
        /// Length.
        len: u64,
    },
}

/// How to turn the original file into the patched one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rewrite {
    /// Which strategy.
    pub strategy: Strategy,
    /// In-place edits of the original bytes.
    pub edits: Vec<Edit>,
    /// Where the appended pieces start (at or after the original end).
    pub append_at: u64,
    /// The appended pieces, back to back.
    pub append: Vec<Piece>,
}

impl Rewrite {
    /// The length of the patched file.
    pub fn new_len(&self, old_len: u64) -> u64 {
        if self.append.is_empty() {
            return old_len;
        }
        self.append_at
            + self
                .append
                .iter()
                .map(|p| match p {
                    Piece::Bytes(b) => b.len() as u64,
                    Piece::Input { len, .. } => *len,
                })
                .sum::<u64>()
    }
}

/// Largest patched file [`Rewrite::apply`] builds in memory (tests, fuzzing).
pub const MAX_APPLY_LEN: u64 = 64 << 20;

impl Rewrite {
    /// The patched file built in memory from the original bytes (tests and
    /// fuzzing; the binaries write through [`crate::driver_runpath`] without
    /// holding the file in memory). Refuses results over [`MAX_APPLY_LEN`].
    pub fn apply(&self, data: &[u8]) -> Result<Vec<u8>, ElfError> {
        let bad = |m: &str| ElfError::Verify(m.to_string());
        let new_len = self.new_len(data.len() as u64);
        if new_len > MAX_APPLY_LEN {
            return Err(ElfError::Unsupported(format!(
                "patched size {new_len} over the in-memory limit"
            )));
        }
        let mut out = data.to_vec();
        for e in &self.edits {
            let at = usize::try_from(e.offset).map_err(|_| bad("edit outside the file"))?;
            out.get_mut(at..at.saturating_add(e.bytes.len()))
                .ok_or_else(|| bad("edit outside the file"))?
                .copy_from_slice(&e.bytes);
        }
        if !self.append.is_empty() {
            if self.append_at < data.len() as u64 {
                return Err(bad("append inside the file"));
            }
            out.resize(self.append_at as usize, 0);
        }
        for p in &self.append {
            match p {
                Piece::Bytes(b) => out.extend_from_slice(b),
                Piece::Input { offset, len } => {
                    let (o, l) = (*offset as usize, *len as usize);
                    out.extend_from_slice(
                        data.get(o..o.saturating_add(l))
                            .ok_or_else(|| bad("range outside the file"))?,
                    )
                }
            }
        }
        Ok(out)
    }
}

/// The current search path: value and tag. A file with two DT_RUNPATH (or
/// two DT_RPATH) entries is refused: glibc's loader keeps the last of each
/// tag, `readelf` shows both, and the writer replaces one, so whichever we
/// read, the other would stay in effect somewhere (found by fuzzing: a
/// mutated tag made a second DT_RPATH; no linker or patchelf writes one).
pub fn current_path<'a>(
    elf: &Elf<'a>,
    dynamic: &Dynamic,
) -> Result<Option<(&'a [u8], Tag)>, ElfError> {
    for (t, name) in [(DT_RUNPATH, "DT_RUNPATH"), (DT_RPATH, "DT_RPATH")] {
        let n = dynamic.entries.iter().filter(|d| d.tag == t).count();
        if n > 1 {
            return Err(ElfError::Unsupported(format!(
                "{n} {name} entries in the dynamic section (a loader uses only the last)"
            )));
        }
    }
    let entry = dynamic
        .entries
        .iter()
        .find(|d| d.tag == DT_RUNPATH)
        .map(|d| (d.val, Tag::Runpath))
        .or_else(|| {
            dynamic.entries.iter().find(|d| d.tag == DT_RPATH).map(|d| (d.val, Tag::Rpath))
        });
    match entry {
        None => Ok(None),
        Some((val, tag)) => Ok(Some((elf.dynstr(dynamic)?.get(val)?, tag))),
    }
}

/// The largest hole (sparse zeros) we leave in an executable to keep
/// `vaddr - offset` of the new segment equal to the first segment's (for
/// pre-5.18 kernels' `AT_PHDR`). A bigger `.bss` than this gets the library
/// placement instead, which kernels since 5.18 load correctly.
pub const MAX_EXEC_HOLE: u64 = 256 << 20;

fn round_up(v: u64, align: u64) -> Option<u64> {
    if align <= 1 {
        return Some(v);
    }
    v.checked_add(align - 1).map(|x| x / align * align)
}

/// Plans the rewrite that gives `elf` the search path `value` under `tag`.
pub fn rewrite(
    elf: &Elf<'_>,
    dynamic: &Dynamic,
    value: &[u8],
    tag: Tag,
) -> Result<Rewrite, ElfError> {
    let l = elf.layout;
    let dsize = l.dyn_size();
    let strtab = elf.dynstr(dynamic)?;
    let idx = |t: i64| dynamic.entries.iter().position(|d| d.tag == t);
    let target = match tag {
        Tag::Runpath => idx(DT_RUNPATH).or_else(|| idx(DT_RPATH)),
        Tag::Rpath => {
            if idx(DT_RUNPATH).is_some() && idx(DT_RPATH).is_some() {
                return Err(ElfError::Unsupported(
                    "--force-rpath on a file with both DT_RPATH and DT_RUNPATH".into(),
                ));
            }
            idx(DT_RPATH).or_else(|| idx(DT_RUNPATH))
        }
    };

    // 1. Tag only.
    if let Some(i) = target {
        let entry = dynamic.entries[i];
        if strtab.get(entry.val)? == value {
            let mut bytes = Vec::new();
            l.put_word(&mut bytes, tag.dt() as u64);
            return Ok(Rewrite {
                strategy: Strategy::TagOnly,
                edits: vec![Edit { offset: dynamic.offset + i as u64 * dsize, bytes }],
                append_at: elf.data.len() as u64,
                append: Vec::new(),
            });
        }
    }

    // 2. New segment. It moves `.dynamic`; an entry whose value is relative
    // to its own address would then point elsewhere.
    if elf.machine == super::machine::EM_MIPS && dynamic.has(super::machine::DT_MIPS_RLD_MAP_REL) {
        return Err(ElfError::Unsupported(
            "DT_MIPS_RLD_MAP_REL is relative to the address of .dynamic, which a new \
             RUNPATH string moves"
                .into(),
        ));
    }
    let file_end = elf.data.len() as u64;
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
    let overflow = || ElfError::Unsupported("no address space left for a new segment".into());
    let v_min = round_up(mem_end, page).ok_or_else(overflow)?;

    // Where the program header table goes: a reused entry or room made after
    // it keep it in place (binutils' strip/objcopy expect it at the start of
    // the file); otherwise it moves into the new segment.
    let table = match spare_phdr(elf) {
        Some(i) => Table::Spare(i),
        None => match grow_plan(elf) {
            Some(g) => Table::Grow(g),
            None => Table::Move,
        },
    };
    let move_phdrs = matches!(table, Table::Move);
    let phnum = elf.phdrs.len() as u64 + u64::from(!matches!(table, Table::Spare(_)));
    if phnum >= 0xffff {
        return Err(ElfError::Unsupported("too many program headers".into()));
    }
    let ent = l.phdr_size();
    let phdr_len = phnum * ent;

    let exec = elf.phdr(PT_INTERP).is_some() || elf.e_type == super::ET_EXEC;
    let delta = first.vaddr.checked_sub(first.offset).filter(|d| d % page == 0);
    let min_off = round_up(file_end, 16).ok_or_else(overflow)?;
    let exec_off = match delta {
        Some(delta) if exec && move_phdrs => round_up(min_off.max(v_min.saturating_sub(delta)), 16)
            .filter(|off| off - min_off <= MAX_EXEC_HOLE)
            .and_then(|off| Some((off, off.checked_add(delta)?))),
        _ => None,
    };
    let (off, vaddr) = match exec_off {
        Some(placed) => placed,
        None => (min_off, v_min.checked_add(min_off % page).ok_or_else(overflow)?),
    };

    // Layout of the new segment: [moved headers | moved block] .dynstr copy
    // + new string, .dynamic; then (outside the segment) the section headers.
    let mut pos = if move_phdrs { phdr_len } else { 0 };
    let mut block_at = 0;
    if let Table::Grow(g) = &table {
        let here = vaddr.checked_add(pos).ok_or_else(overflow)?;
        block_at = pos + (g.addr.wrapping_sub(here) & (g.align - 1));
        pos = block_at + g.len;
    }
    let old_strsz = strtab.bytes.len() as u64;
    let str_off = round_up(pos, 8).ok_or_else(overflow)?;
    let new_strsz = old_strsz + value.len() as u64 + 1;
    let str_end = str_off + new_strsz;
    let mut entries: Vec<Dyn> = dynamic.entries.clone();
    match target {
        Some(i) => entries[i] = Dyn { tag: tag.dt(), val: old_strsz },
        None => entries.push(Dyn { tag: tag.dt(), val: old_strsz }),
    }
    // Our reader refuses more slots than this; a file we write must read back.
    let slots = entries.len() as u64 + 1;
    if slots > super::MAX_HEADERS {
        return Err(ElfError::Unsupported(format!(
            "the patched dynamic section would have {slots} entries (DT_NULL included), \
             over the limit of {}",
            super::MAX_HEADERS
        )));
    }
    let dyn_off = round_up(str_end, l.word()).ok_or_else(overflow)?;
    let seg_len = dyn_off + (entries.len() as u64 + 1) * dsize;
    let shsize = l.shdr_size();
    let sht_off = off.checked_add(seg_len).and_then(|e| round_up(e, 8)).ok_or_else(overflow)?;
    let sht_len = elf.shdrs.len() as u64 * shsize;
    if vaddr.checked_add(seg_len).is_none_or(|e| e > l.word_max())
        || sht_off.checked_add(sht_len).is_none_or(|e| e > l.word_max())
    {
        return Err(overflow());
    }
    // Addresses and offsets inside the moved block follow it.
    let (b_off, b_len, b_addr) = match &table {
        Table::Grow(g) => (g.off, g.len, g.addr),
        _ => (0, 0, 0),
    };
    let in_block = |addr: u64| b_len > 0 && addr >= b_addr && addr - b_addr < b_len;
    // Wrapping: a corrupt header may put an address and an offset on
    // different sides of the block; verification rejects what results.
    let moved_addr = |addr: u64| addr.wrapping_sub(b_addr).wrapping_add(vaddr + block_at);
    let moved_off = |o: u64| o.wrapping_sub(b_off).wrapping_add(off + block_at);

    let new_strtab = vaddr + str_off;
    for d in entries.iter_mut() {
        match d.tag {
            DT_STRTAB => d.val = new_strtab,
            DT_STRSZ => d.val = new_strsz,
            t if POINTER_TAGS.contains(&t) && in_block(d.val) => d.val = moved_addr(d.val),
            _ => {}
        }
    }
    let mut dyn_bytes = Vec::with_capacity((entries.len() + 1) * dsize as usize);
    for d in &entries {
        d.write(l, &mut dyn_bytes);
    }
    Dyn { tag: 0, val: 0 }.write(l, &mut dyn_bytes);

    // Program headers.
    let mut phdrs = elf.phdrs.clone();
    if let Table::Spare(i) = table {
        phdrs.remove(i);
    }
    for p in phdrs.iter_mut() {
        match p.p_type {
            PT_PHDR if move_phdrs => {
                *p = Phdr {
                    offset: off,
                    vaddr,
                    paddr: vaddr,
                    filesz: phdr_len,
                    memsz: phdr_len,
                    ..*p
                };
            }
            PT_PHDR if matches!(table, Table::Grow(_)) => {
                p.filesz = phdr_len;
                p.memsz = phdr_len;
            }
            PT_DYNAMIC => {
                let len = dyn_bytes.len() as u64;
                *p = Phdr {
                    offset: off + dyn_off,
                    vaddr: vaddr + dyn_off,
                    paddr: vaddr + dyn_off,
                    filesz: len,
                    memsz: len,
                    ..*p
                };
            }
            t if t != PT_LOAD && b_len > 0 && p.offset >= b_off && p.offset - b_off < b_len => {
                let v = moved_addr(p.vaddr);
                *p = Phdr { offset: moved_off(p.offset), vaddr: v, paddr: v, ..*p };
            }
            _ => {}
        }
    }
    let last_load = phdrs.iter().rposition(|p| p.p_type == PT_LOAD).unwrap_or(0);
    let new_load = Phdr {
        p_type: PT_LOAD,
        flags: PF_R | PF_W,
        offset: off,
        vaddr,
        paddr: vaddr,
        filesz: seg_len,
        memsz: seg_len,
        align: page,
    };
    phdrs.insert(last_load + 1, new_load);
    let mut phdr_bytes = Vec::with_capacity(phdr_len as usize);
    for p in &phdrs {
        p.write(l, &mut phdr_bytes);
    }

    // A copy of the section header table, with .dynstr, .dynamic and the
    // moved block's sections pointing to their new places.
    let mut sht = Vec::with_capacity(sht_len as usize);
    let dynsec = elf.shdrs.iter().position(|s| s.sh_type == SHT_DYNAMIC);
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
    for (k, sh) in elf.shdrs.iter().enumerate() {
        let moved = if Some(k) == strsec {
            super::Shdr { addr: new_strtab, offset: off + str_off, size: new_strsz, ..*sh }
        } else if Some(k) == dynsec {
            super::Shdr {
                addr: vaddr + dyn_off,
                offset: off + dyn_off,
                size: dyn_bytes.len() as u64,
                ..*sh
            }
        } else if sh.flags & SHF_ALLOC != 0 && sh.sh_type != super::SHT_NOBITS && in_block(sh.addr)
        {
            super::Shdr { addr: moved_addr(sh.addr), offset: moved_off(sh.offset), ..*sh }
        } else {
            *sh
        };
        moved.write(l, &mut sht);
    }

    // The ELF header (e_phoff, e_shoff, e_phnum), and the program header
    // table when it stays in place: one write (the table follows the header
    // in every linker's output) switches the file to the new layout.
    let mut ehdr = elf.slice(0, l.ehdr_size(), "ELF header")?.to_vec();
    let mut put = |at: u64, bytes: Vec<u8>| {
        ehdr[at as usize..at as usize + bytes.len()].copy_from_slice(&bytes);
    };
    if move_phdrs {
        let mut b = Vec::new();
        l.put_word(&mut b, off);
        put(24 + l.word(), b);
    }
    if !elf.shdrs.is_empty() {
        let mut b = Vec::new();
        l.put_word(&mut b, sht_off);
        put(24 + 2 * l.word(), b);
    }
    let mut b = Vec::new();
    l.put_u16(&mut b, phnum as u16);
    put(24 + 3 * l.word() + 4 + 4, b);

    let mut tail = Vec::with_capacity((sht_off - off - str_off - old_strsz + sht_len) as usize);
    tail.extend_from_slice(value);
    tail.push(0);
    tail.resize((dyn_off - old_strsz - str_off) as usize, 0);
    tail.extend_from_slice(&dyn_bytes);
    if !sht.is_empty() {
        tail.resize((sht_off - off - str_off - old_strsz) as usize, 0);
        tail.extend_from_slice(&sht);
    }
    let mut edits = vec![Edit { offset: 0, bytes: ehdr }];
    let mut append = Vec::with_capacity(5);
    match &table {
        Table::Move => {
            phdr_bytes.resize(str_off as usize, 0);
            append.push(Piece::Bytes(phdr_bytes));
        }
        Table::Grow(g) => {
            // grow_plan only accepts a table right after the ELF header.
            edits[0].bytes.extend_from_slice(&phdr_bytes);
            append.push(Piece::Bytes(vec![0; block_at as usize]));
            append.push(Piece::Input { offset: g.off, len: g.len });
            append.push(Piece::Bytes(vec![0; (str_off - block_at - g.len) as usize]));
        }
        Table::Spare(_) if elf.phoff == l.ehdr_size() => {
            edits[0].bytes.extend_from_slice(&phdr_bytes);
            append.push(Piece::Bytes(vec![0; str_off as usize]));
        }
        Table::Spare(_) => {
            edits.push(Edit { offset: elf.phoff, bytes: phdr_bytes });
            append.push(Piece::Bytes(vec![0; str_off as usize]));
        }
    }
    append.push(Piece::Input { offset: strtab.offset, len: old_strsz });
    append.push(Piece::Bytes(tail));
    Ok(Rewrite {
        strategy: match table {
            Table::Spare(_) => Strategy::NewSegment,
            Table::Grow(_) => Strategy::NewSegmentGrownHeaders,
            Table::Move => Strategy::NewSegmentMovedHeaders,
        },
        edits,
        append_at: off,
        append,
    })
}

/// Where the program header table goes.
enum Table {
    /// Entry `i` is redundant and becomes the new PT_LOAD.
    Spare(usize),
    /// The table grows in place; the sections in the way move.
    Grow(Grow),
    /// The table moves into the new segment.
    Move,
}

/// The block of sections that moves so the table can grow by one entry.
#[derive(Clone, Copy, Debug)]
struct Grow {
    /// File offset of the block.
    off: u64,
    /// Its length.
    len: u64,
    /// Its virtual address.
    addr: u64,
    /// The largest alignment of a section in it.
    align: u64,
}

/// Dynamic tags whose value is an address (`d_ptr`).
const POINTER_TAGS: &[i64] = &[
    3,           // DT_PLTGOT
    4,           // DT_HASH
    6,           // DT_SYMTAB
    7,           // DT_RELA
    12,          // DT_INIT
    13,          // DT_FINI
    17,          // DT_REL
    23,          // DT_JMPREL
    25,          // DT_INIT_ARRAY
    26,          // DT_FINI_ARRAY
    32,          // DT_PREINIT_ARRAY
    36,          // DT_RELR
    0x6fff_fef5, // DT_GNU_HASH
    0x6fff_fef6, // DT_TLSDESC_PLT
    0x6fff_fef7, // DT_TLSDESC_GOT
    0x6fff_fff0, // DT_VERSYM
    0x6fff_fffc, // DT_VERDEF
    0x6fff_fffe, // DT_VERNEED
];

/// The largest block of sections the grow strategy copies to make room for
/// one more program header; a larger one (never seen: real blocks are notes,
/// hash tables and `.dynsym`, kilobytes to a few MiB) moves the table instead.
pub const MAX_GROW_BLOCK: u64 = 16 << 20;

/// Section flag: occupies memory at run time.
const SHF_ALLOC: u64 = 2;

/// Plans room for one more program header right after the table: the
/// sections in the way (notes, `.interp`, hash tables, `.dynsym`, version
/// tables, dynamic relocations — things only headers and `.dynamic` point
/// to) are copied to the new segment as one block, keeping their relative
/// layout, and every header and dynamic entry pointing into them follows.
/// The old bytes stay too, except the few the new entry overwrites. `None`
/// when anything else is in the way.
fn grow_plan(elf: &Elf<'_>) -> Option<Grow> {
    use super::{PT_GNU_PROPERTY, PT_NOTE};
    let l = elf.layout;
    let ent = l.phdr_size();
    if elf.phoff != l.ehdr_size() || elf.shdrs.is_empty() {
        return None;
    }
    let tab_end = elf.phoff + elf.phdrs.len() as u64 * ent;
    let need = tab_end + ent;
    let first = elf.loads().find(|p| p.covers_offset(elf.phoff, need - elf.phoff))?;
    let overlaps = |o: u64, n: u64, a: u64, b: u64| o < b && o.saturating_add(n) > a;
    let mut b0 = u64::MAX;
    let mut b1 = tab_end;
    for s in &elf.shdrs {
        if s.sh_type != super::SHT_NOBITS && s.size > 0 && overlaps(s.offset, s.size, tab_end, need)
        {
            b0 = b0.min(s.offset);
            b1 = b1.max(s.offset.saturating_add(s.size));
        }
    }
    if b0 == u64::MAX {
        // Nothing in the way: the bytes after the table are free padding,
        // unless a header points there.
        if elf.phdrs.iter().any(|p| {
            p.p_type != PT_LOAD && p.filesz > 0 && overlaps(p.offset, p.filesz, tab_end, need)
        }) {
            return None;
        }
        return Some(Grow { off: need, len: 0, addr: 0, align: 1 });
    }
    if b0 < tab_end {
        return None;
    }
    // Grow the block until no section or header straddles its edges.
    loop {
        let (mut n0, mut n1) = (b0, b1);
        for s in elf.shdrs.iter().filter(|s| s.sh_type != super::SHT_NOBITS && s.size > 0) {
            if overlaps(s.offset, s.size, b0, b1) {
                n0 = n0.min(s.offset);
                n1 = n1.max(s.offset.saturating_add(s.size));
            }
        }
        for p in elf.phdrs.iter().filter(|p| p.p_type != PT_LOAD && p.filesz > 0) {
            if overlaps(p.offset, p.filesz, b0, b1) {
                n0 = n0.min(p.offset);
                n1 = n1.max(p.offset.saturating_add(p.filesz));
            }
        }
        if (n0, n1) == (b0, b1) {
            break;
        }
        (b0, b1) = (n0, n1);
        if b0 < tab_end || b1 - b0 > MAX_GROW_BLOCK {
            return None;
        }
    }
    // Checked again here: a block that never grew (the first sections in
    // the way straddle nothing) was not checked in the loop.
    if b1 - b0 > MAX_GROW_BLOCK {
        return None;
    }
    if !first.covers_offset(b0, b1 - b0) {
        return None;
    }
    let mut align = 1u64;
    for s in elf.shdrs.iter().filter(|s| s.sh_type != super::SHT_NOBITS && s.size > 0) {
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
    for p in elf.phdrs.iter().filter(|p| p.p_type != PT_LOAD && p.filesz > 0) {
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
    let addr = first.vaddr.checked_add(b0 - first.offset)?;
    // And the other way round: headers are moved by address, so a section
    // whose address is in the block must have its bytes there too, or its
    // moved header would point past them (found by fuzzing: a corrupt
    // .eh_frame_hdr address inside the block).
    for s in elf.shdrs.iter().filter(|s| s.sh_type != super::SHT_NOBITS && s.flags & SHF_ALLOC != 0)
    {
        if s.addr >= addr && s.addr - addr < b1 - b0 && s.offset != b0 + (s.addr - addr) {
            return None;
        }
    }
    Some(Grow { off: b0, len: b1 - b0, addr, align })
}

/// A program header entry that can become the new PT_LOAD without loss:
/// a PT_NULL, or a PT_NOTE that only repeats the PT_GNU_PROPERTY range
/// (glibc reads PT_NOTE only when there is no PT_GNU_PROPERTY, and the
/// kernel reads PT_GNU_PROPERTY; the note stays in the file and in its
/// section).
fn spare_phdr(elf: &Elf<'_>) -> Option<usize> {
    use super::{PT_GNU_PROPERTY, PT_NOTE, PT_NULL};
    elf.phdrs.iter().position(|p| p.p_type == PT_NULL).or_else(|| {
        let prop = elf.phdr(PT_GNU_PROPERTY)?;
        elf.phdrs.iter().position(|p| {
            p.p_type == PT_NOTE
                && (p.offset, p.vaddr, p.filesz, p.memsz)
                    == (prop.offset, prop.vaddr, prop.filesz, prop.memsz)
        })
    })
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
    let bad = |m: String| ElfError::Verify(m);
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
    let ostr = old.dynstr(&od)?;
    let nstr = new.dynstr(&nd).map_err(|e| bad(e.to_string()))?;
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
        // A pointer may follow a moved table; what it points to must not change.
        let same = o.tag == n.tag
            && POINTER_TAGS.contains(&o.tag)
            && match (old.vaddr_to_offset(o.val, 1), new.vaddr_to_offset(n.val, 1)) {
                (Some(a), Some(b)) => {
                    // Up to 64 bytes, within the section the old pointer is in.
                    let rest = old
                        .shdrs
                        .iter()
                        .filter(|s| s.sh_type != super::SHT_NOBITS && s.addr <= o.val)
                        .find(|s| o.val - s.addr < s.size)
                        .map(|s| s.size - (o.val - s.addr));
                    match rest {
                        Some(rest) => {
                            let len = 64.min(rest).min(new_data.len() as u64 - b);
                            old.slice(a, len, "pointed-to bytes").ok()
                                == new.slice(b, len, "pointed-to bytes").ok()
                        }
                        None => false,
                    }
                }
                _ => false,
            };
        if !same {
            return Err(bad(format!("dynamic entry {:#x} changed", o.tag)));
        }
    }
    for d in oe.iter().filter(|d| STRING_TAGS.contains(&d.tag)) {
        if ostr.get(d.val)? != nstr.get(d.val).map_err(|e| bad(e.to_string()))? {
            return Err(bad(format!("string of dynamic tag {:#x} changed", d.tag)));
        }
    }
    // Every other header is an old one, possibly moved with its bytes.
    for n in new.phdrs.iter().filter(|p| !matches!(p.p_type, PT_LOAD | PT_PHDR | PT_DYNAMIC)) {
        let found = old.phdrs.iter().any(|o| {
            (o.p_type, o.flags, o.filesz, o.memsz, o.align)
                == (n.p_type, n.flags, n.filesz, n.memsz, n.align)
                && if (o.offset, o.vaddr) == (n.offset, n.vaddr) {
                    true
                } else {
                    matches!(n.p_type, super::PT_NOTE | super::PT_GNU_PROPERTY | PT_INTERP)
                        && old.slice(o.offset, o.filesz, "note").ok()
                            == new.slice(n.offset, n.filesz, "note").ok()
                }
        });
        if !found {
            return Err(bad(format!("program header of type {:#x} changed", n.p_type)));
        }
    }
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
    if old.layout.is64 {
        compare_symbols::<object::elf::FileHeader64<Endianness>>(old.data, new_data)
    } else {
        compare_symbols::<object::elf::FileHeader32<Endianness>>(old.data, new_data)
    }
}

/// The file ranges `(offset, len)` of `.nv_fatbin` and `__nv_relfatbin`.
pub fn device_code_ranges(elf: &Elf<'_>) -> Vec<(u64, u64)> {
    elf.shdrs
        .iter()
        .filter(|s| s.sh_type != super::SHT_NOBITS && s.size > 0)
        .filter(|s| matches!(elf.section_name(s), Some(b".nv_fatbin") | Some(b"__nv_relfatbin")))
        .map(|s| (s.offset, s.size))
        .collect()
}

fn compare_symbols<H: FileHeader<Endian = Endianness>>(
    old: &[u8],
    new: &[u8],
) -> Result<(), ElfError> {
    let bad = |m: String| ElfError::Verify(m);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::classify::classify;
    use crate::elf::{Layout, DT_NEEDED, PT_NULL};

    /// A minimal dynamic ELF file of any class and byte order: one PT_LOAD
    /// over the whole file, PT_DYNAMIC, optionally a PT_NULL, a `.dynstr` and
    /// a `.dynamic` with DT_NEEDED, DT_STRTAB, DT_STRSZ and DT_RUNPATH.
    fn synthetic(l: Layout, machine: u16, spare: bool) -> Vec<u8> {
        let base = 0x10000u64;
        let nph = if spare { 3 } else { 2 };
        let dynstr = b"\0libc.so.6\0/old/path\0".to_vec();
        let str_off = l.ehdr_size() + nph * l.phdr_size();
        let dyn_off = (str_off + dynstr.len() as u64).next_multiple_of(8);
        let dyns = [
            Dyn { tag: DT_NEEDED, val: 1 },
            Dyn { tag: DT_STRTAB, val: base + str_off },
            Dyn { tag: DT_STRSZ, val: dynstr.len() as u64 },
            Dyn { tag: DT_RUNPATH, val: 11 },
            Dyn { tag: 0, val: 0 },
        ];
        let len = dyn_off + dyns.len() as u64 * l.dyn_size();
        let mut out = Vec::new();
        out.extend_from_slice(b"\x7fELF");
        out.push(if l.is64 { 2 } else { 1 });
        out.push(if l.little { 1 } else { 2 });
        out.push(1);
        out.resize(16, 0);
        l.put_u16(&mut out, ET_DYN_TEST);
        l.put_u16(&mut out, machine);
        l.put_u32(&mut out, 1);
        l.put_word(&mut out, base);
        l.put_word(&mut out, l.ehdr_size());
        l.put_word(&mut out, 0);
        l.put_u32(&mut out, 0);
        l.put_u16(&mut out, l.ehdr_size() as u16);
        l.put_u16(&mut out, l.phdr_size() as u16);
        l.put_u16(&mut out, nph as u16);
        l.put_u16(&mut out, l.shdr_size() as u16);
        l.put_u16(&mut out, 0);
        l.put_u16(&mut out, 0);
        let load = Phdr {
            p_type: PT_LOAD,
            flags: PF_R | PF_W,
            offset: 0,
            vaddr: base,
            paddr: base,
            filesz: len,
            memsz: len,
            align: 0x1000,
        };
        load.write(l, &mut out);
        let dsz = dyns.len() as u64 * l.dyn_size();
        Phdr {
            p_type: PT_DYNAMIC,
            flags: PF_R | PF_W,
            offset: dyn_off,
            vaddr: base + dyn_off,
            paddr: base + dyn_off,
            filesz: dsz,
            memsz: dsz,
            align: 8,
        }
        .write(l, &mut out);
        if spare {
            Phdr {
                p_type: PT_NULL,
                flags: 0,
                offset: 0,
                vaddr: 0,
                paddr: 0,
                filesz: 0,
                memsz: 0,
                align: 0,
            }
            .write(l, &mut out);
        }
        out.extend_from_slice(&dynstr);
        out.resize(dyn_off as usize, 0);
        for d in &dyns {
            d.write(l, &mut out);
        }
        out
    }

    const ET_DYN_TEST: u16 = 3;

    fn apply(data: &[u8], rw: &Rewrite) -> Vec<u8> {
        let mut out = data.to_vec();
        for e in &rw.edits {
            out[e.offset as usize..e.offset as usize + e.bytes.len()].copy_from_slice(&e.bytes);
        }
        if !rw.append.is_empty() {
            out.resize(rw.append_at as usize, 0);
        }
        for p in &rw.append {
            match p {
                Piece::Bytes(b) => out.extend_from_slice(b),
                Piece::Input { offset, len } => {
                    out.extend_from_slice(&data[*offset as usize..(*offset + *len) as usize])
                }
            }
        }
        out
    }

    #[test]
    fn every_class_and_byte_order_round_trips() {
        for (is64, little, machine) in
            [(false, true, 3), (true, true, 62), (false, false, 20), (true, false, 21)]
        {
            for spare in [false, true] {
                let l = Layout { is64, little };
                let data = synthetic(l, machine, spare);
                let elf = Elf::parse(&data).unwrap();
                assert_eq!(classify(&elf).unwrap(), None, "{l:?}");
                let dynamic = elf.dynamic().unwrap().unwrap();
                assert_eq!(
                    current_path(&elf, &dynamic).unwrap(),
                    Some((&b"/old/path"[..], Tag::Runpath))
                );
                let value = b"/run/opengl-driver-32/lib:/old/path";
                let rw = rewrite(&elf, &dynamic, value, Tag::Runpath).unwrap();
                let expected =
                    if spare { Strategy::NewSegment } else { Strategy::NewSegmentMovedHeaders };
                assert_eq!(rw.strategy, expected, "{l:?}");
                let new = apply(&data, &rw);
                assert_eq!(new.len() as u64, rw.new_len(data.len() as u64));
                verify(&elf, &new, value, Tag::Runpath).unwrap();
                let parsed = Elf::parse(&new).unwrap();
                let nd = parsed.dynamic().unwrap().unwrap();
                assert_eq!(current_path(&parsed, &nd).unwrap(), Some((&value[..], Tag::Runpath)));
                assert_eq!(parsed.dynstr(&nd).unwrap().get(1).unwrap(), b"libc.so.6");
            }
        }
    }

    #[test]
    fn only_the_tag_changes_when_the_string_is_right() {
        let l = Layout { is64: true, little: true };
        let data = synthetic(l, 62, false);
        let elf = Elf::parse(&data).unwrap();
        let dynamic = elf.dynamic().unwrap().unwrap();
        let rw = rewrite(&elf, &dynamic, b"/old/path", Tag::Rpath).unwrap();
        assert_eq!(rw.strategy, Strategy::TagOnly);
        assert_eq!(rw.edits.len(), 1);
        assert_eq!(rw.edits[0].bytes.len(), 8);
        let new = apply(&data, &rw);
        assert_eq!(new.len(), data.len());
        verify(&elf, &new, b"/old/path", Tag::Rpath).unwrap();
        let parsed = Elf::parse(&new).unwrap();
        let nd = parsed.dynamic().unwrap().unwrap();
        assert_eq!(current_path(&parsed, &nd).unwrap(), Some((&b"/old/path"[..], Tag::Rpath)));
    }

    #[test]
    fn a_second_search_path_entry_is_refused() {
        // Found by fuzzing: a second DT_RPATH (a mutated tag) was left in
        // place while the first was rewritten; glibc reads the last one.
        for (tag, name) in [(DT_RUNPATH, "DT_RUNPATH"), (DT_RPATH, "DT_RPATH")] {
            let l = Layout { is64: true, little: true };
            let mut data = synthetic(l, 62, false);
            let elf = Elf::parse(&data).unwrap();
            let dyn_off = elf.dynamic().unwrap().unwrap().offset as usize;
            // Entry 0 is DT_NEEDED (string 1), entry 3 DT_RUNPATH (string 11).
            data[dyn_off..dyn_off + 8].copy_from_slice(&(tag as u64).to_le_bytes());
            data[dyn_off + 3 * 16..dyn_off + 3 * 16 + 8]
                .copy_from_slice(&(tag as u64).to_le_bytes());
            let elf = Elf::parse(&data).unwrap();
            let dynamic = elf.dynamic().unwrap().unwrap();
            match current_path(&elf, &dynamic) {
                Err(ElfError::Unsupported(m)) => {
                    assert!(m.contains(&format!("2 {name} entries")), "{m}")
                }
                other => panic!("{name}: {other:?}"),
            }
            // One of each is the normal case (DT_RUNPATH wins).
            data[dyn_off..dyn_off + 8].copy_from_slice(
                &(if tag == DT_RUNPATH { DT_RPATH } else { DT_RUNPATH } as u64).to_le_bytes(),
            );
            let elf = Elf::parse(&data).unwrap();
            let dynamic = elf.dynamic().unwrap().unwrap();
            assert_eq!(
                current_path(&elf, &dynamic).unwrap().map(|(_, t)| t),
                Some(Tag::Runpath),
                "{name}"
            );
        }
    }

    #[test]
    fn a_corrupted_result_fails_verification() {
        let l = Layout { is64: true, little: true };
        let data = synthetic(l, 62, false);
        let elf = Elf::parse(&data).unwrap();
        let dynamic = elf.dynamic().unwrap().unwrap();
        let value = b"/run/opengl-driver/lib:/old/path";
        let rw = rewrite(&elf, &dynamic, value, Tag::Runpath).unwrap();
        let mut new = apply(&data, &rw);
        // Damage the DT_NEEDED string in the `.dynstr` copy.
        let needle = new.windows(9).rposition(|w| w == b"libc.so.6").unwrap();
        new[needle] = b'X';
        assert!(matches!(verify(&elf, &new, value, Tag::Runpath), Err(ElfError::Verify(_))));
        assert!(matches!(verify(&elf, &data, value, Tag::Runpath), Err(ElfError::Verify(_))));
    }
}
