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
//!
//! The parts, in the order a rewrite runs through them: this module picks
//! the entry and the strategy and puts the pieces together; [`grow`] finds
//! the room for one more program header (a spare entry, or the block of
//! sections that moves); [`layout`] places the new segment and everything in
//! it; [`tables`] encodes the new `.dynamic`, program and section headers and
//! ELF header; [`verify`] checks the result independently.

mod grow;
mod layout;
mod tables;
mod undo;
mod verify;

#[cfg(test)]
mod tests;

use super::runpath::Tag;
use super::{Dynamic, Elf, ElfError, StrTab, DT_RPATH, DT_RUNPATH};

pub use grow::MAX_GROW_BLOCK;
pub use layout::MAX_EXEC_HOLE;
pub use undo::{candidate, is_rewrite_of, Undo};
pub use verify::{device_code_ranges, verify};

use grow::Table;
use layout::Placement;

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

/// Plans the rewrite that gives `elf` the search path `value` under `tag`.
pub fn rewrite(
    elf: &Elf<'_>,
    dynamic: &Dynamic,
    value: &[u8],
    tag: Tag,
) -> Result<Rewrite, ElfError> {
    let strtab = elf.dynstr(dynamic)?;
    let target = target_entry(dynamic, tag)?;
    // 1. Tag only.
    if let Some(i) = target {
        if strtab.get(dynamic.entries[i].val)? == value {
            return Ok(tag_only(elf, dynamic, i, tag));
        }
    }
    // 2. New segment.
    refuse_dynamic_relative(elf, dynamic)?;
    new_segment(elf, dynamic, &strtab, value, tag, target)
}

/// The dynamic entry that gets the new string: the one of `tag`, else the
/// other search-path entry (which then changes tag), else none (a new one).
fn target_entry(dynamic: &Dynamic, tag: Tag) -> Result<Option<usize>, ElfError> {
    let idx = |t: i64| dynamic.entries.iter().position(|d| d.tag == t);
    Ok(match tag {
        Tag::Runpath => idx(DT_RUNPATH).or_else(|| idx(DT_RPATH)),
        Tag::Rpath => {
            if idx(DT_RUNPATH).is_some() && idx(DT_RPATH).is_some() {
                return Err(ElfError::Unsupported(
                    "--force-rpath on a file with both DT_RPATH and DT_RUNPATH".into(),
                ));
            }
            idx(DT_RPATH).or_else(|| idx(DT_RUNPATH))
        }
    })
}

/// Strategy 1: entry `i` already holds the string; only its tag word changes.
fn tag_only(elf: &Elf<'_>, dynamic: &Dynamic, i: usize, tag: Tag) -> Rewrite {
    let l = elf.layout;
    let mut bytes = Vec::new();
    l.put_word(&mut bytes, tag.dt() as u64);
    Rewrite {
        strategy: Strategy::TagOnly,
        edits: vec![Edit { offset: dynamic.offset + i as u64 * l.dyn_size(), bytes }],
        append_at: elf.data.len() as u64,
        append: Vec::new(),
    }
}

/// The new segment moves `.dynamic`; an entry whose value is relative to its
/// own address would then point elsewhere.
fn refuse_dynamic_relative(elf: &Elf<'_>, dynamic: &Dynamic) -> Result<(), ElfError> {
    if elf.machine == super::machine::EM_MIPS && dynamic.has(super::machine::DT_MIPS_RLD_MAP_REL) {
        return Err(ElfError::Unsupported(
            "DT_MIPS_RLD_MAP_REL is relative to the address of .dynamic, which a new \
             RUNPATH string moves"
                .into(),
        ));
    }
    Ok(())
}

/// Strategy 2: the new segment, the program header table kept in place
/// (binutils' strip/objcopy expect it at the start of the file) by a reused
/// entry or by room made after it, or else moved into the new segment.
fn new_segment(
    elf: &Elf<'_>,
    dynamic: &Dynamic,
    strtab: &StrTab<'_>,
    value: &[u8],
    tag: Tag,
    target: Option<usize>,
) -> Result<Rewrite, ElfError> {
    let table = Table::choose(elf);
    let old_strsz = strtab.bytes.len() as u64;
    let mut entries = dynamic.entries.clone();
    let entry = super::Dyn { tag: tag.dt(), val: old_strsz };
    match target {
        Some(i) => entries[i] = entry,
        None => entries.push(entry),
    }
    let at = Placement::plan(elf, strtab, value, &table, entries.len() as u64)?;
    let moved = at.moved(&table);
    let dyn_bytes = tables::dynamic(elf.layout, entries, &at, &moved);
    let phdr_bytes = tables::program_headers(elf, &table, &at, &moved, dyn_bytes.len() as u64);
    let sht = tables::section_headers(elf, strtab, &at, &moved, dyn_bytes.len() as u64)?;
    let ehdr = tables::elf_header(elf, &at, table.moves())?;
    let tail = tail(value, &at, &dyn_bytes, &sht);
    assemble(elf, &table, &at, ehdr, phdr_bytes, strtab, tail)
}

/// What follows the `.dynstr` copy: the new string, `.dynamic`, and (after
/// the segment) the section header table.
fn tail(value: &[u8], at: &Placement, dyn_bytes: &[u8], sht: &[u8]) -> Vec<u8> {
    let (off, str_off, old_strsz) = (at.off, at.str_off, at.old_strsz);
    let mut tail =
        Vec::with_capacity((at.sht_off - off - str_off - old_strsz + at.sht_len) as usize);
    tail.extend_from_slice(value);
    tail.push(0);
    tail.resize((at.dyn_off - old_strsz - str_off) as usize, 0);
    tail.extend_from_slice(dyn_bytes);
    if !sht.is_empty() {
        tail.resize((at.sht_off - off - str_off - old_strsz) as usize, 0);
        tail.extend_from_slice(sht);
    }
    tail
}

/// The edits and appended pieces: the ELF header (and the program header
/// table when it stays in place) is the one edit that switches the file;
/// the segment starts with the moved table or block (or zeros), then the
/// `.dynstr` copy (a range of the original) and the tail; last, the undo
/// record of the edits ([`undo`]), which lets a later run rewrite the
/// original instead of stacking a second segment.
fn assemble(
    elf: &Elf<'_>,
    table: &Table,
    at: &Placement,
    ehdr: Vec<u8>,
    mut phdr_bytes: Vec<u8>,
    strtab: &StrTab<'_>,
    tail: Vec<u8>,
) -> Result<Rewrite, ElfError> {
    let str_off = at.str_off;
    let mut edits = vec![Edit { offset: 0, bytes: ehdr }];
    let mut append = Vec::with_capacity(6);
    match table {
        Table::Move => {
            phdr_bytes.resize(str_off as usize, 0);
            append.push(Piece::Bytes(phdr_bytes));
        }
        Table::Grow(g) => {
            // grow_plan only accepts a table right after the ELF header.
            edits[0].bytes.extend_from_slice(&phdr_bytes);
            append.push(Piece::Bytes(vec![0; at.block_at as usize]));
            append.push(Piece::Input { offset: g.off, len: g.len });
            append.push(Piece::Bytes(vec![0; (str_off - at.block_at - g.len) as usize]));
        }
        Table::Spare(_) if elf.phoff == elf.layout.ehdr_size() => {
            edits[0].bytes.extend_from_slice(&phdr_bytes);
            append.push(Piece::Bytes(vec![0; str_off as usize]));
        }
        Table::Spare(_) => {
            edits.push(Edit { offset: elf.phoff, bytes: phdr_bytes });
            append.push(Piece::Bytes(vec![0; str_off as usize]));
        }
    }
    append.push(Piece::Input { offset: strtab.offset, len: at.old_strsz });
    append.push(Piece::Bytes(tail));
    append.push(Piece::Bytes(undo::record(elf, &edits)?));
    Ok(Rewrite { strategy: table.strategy(), edits, append_at: at.off, append })
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

/// Section flag: occupies memory at run time.
const SHF_ALLOC: u64 = 2;

/// `v` rounded up to a multiple of `align` (`None` on overflow).
fn round_up(v: u64, align: u64) -> Option<u64> {
    if align <= 1 {
        return Some(v);
    }
    v.checked_add(align - 1).map(|x| x / align * align)
}
