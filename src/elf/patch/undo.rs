//! Rebuilding instead of stacking: a file our writer already rewrote is
//! rewritten from the original it was made from, so that the result is a
//! function of (the original file, the final search path) however many runs
//! it took to get there (issue 33: fixes run as separate invocations in any
//! order give the bytes one run gives).
//!
//! The writer ends every file it gives a new segment with the **undo
//! record**: the original bytes under each header edit (the ELF header, and
//! the program header table when it stays in place: as many entries as the
//! patched table has), then the original length, 8 bytes little-endian.
//! Everything else of the original is still in the patched file, unchanged:
//! the writer only edits those header bytes and appends after the old end.
//!
//! The record alone proves nothing (anyone can write such bytes), so it is
//! only a **candidate** ([`candidate`]): the original it implies is rebuilt,
//! the writer is run on it again with the file's current search path, and
//! the file counts as ours only if that gives back every byte of it
//! ([`is_rewrite_of`]). A file that passes *is* our writer's output for that
//! original, so rewriting the original instead loses nothing; a forged or
//! damaged record, or a file edited after us (patchelf, strip), fails the
//! comparison and the file gets a new segment as any other file.

use super::{Edit, Piece, Rewrite, Strategy};
use crate::elf::runpath::Tag;
use crate::elf::{Dynamic, Elf, ElfError};

/// The original a patched file implies: `restore` written over the first
/// `len` bytes of the patched file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undo {
    /// The original bytes of the header ranges the writer edited.
    pub restore: Vec<Edit>,
    /// The original file's length.
    pub len: u64,
}

/// The undo record of the rewrite whose in-place edits are `edits` of
/// `elf` (the original): appended last.
pub(super) fn record(elf: &Elf<'_>, edits: &[Edit]) -> Result<Vec<u8>, ElfError> {
    let mut rec = Vec::with_capacity(edits.iter().map(|e| e.bytes.len()).sum::<usize>() + 8);
    for e in edits {
        rec.extend_from_slice(elf.slice(e.offset, e.bytes.len() as u64, "edited header")?);
    }
    rec.extend_from_slice(&(elf.data.len() as u64).to_le_bytes());
    Ok(rec)
}

/// The header ranges a patched file's edits cover, read from the patched
/// file itself: the ELF header, and the program header table unless it
/// moved into the last segment (ours).
fn edited_ranges(p: &Elf<'_>, seg_off: u64) -> Option<Vec<(u64, u64)>> {
    let l = p.layout;
    let mut ranges = vec![(0, l.ehdr_size())];
    if p.phoff < seg_off {
        let tab = (p.phdrs.len() as u64).checked_mul(l.phdr_size())?;
        if p.phoff == l.ehdr_size() {
            ranges[0].1 += tab;
        } else if p.phoff > l.ehdr_size() {
            ranges.push((p.phoff, tab));
        } else {
            return None;
        }
    }
    Some(ranges)
}

/// The original that `p` would have been made from if it is our writer's
/// output: read from its undo record. Only a candidate: [`is_rewrite_of`]
/// decides.
pub fn candidate(p: &Elf<'_>) -> Option<Undo> {
    // Our segment is the last PT_LOAD (the writer inserts it after the last
    // old one) and the record follows it and the section header copy.
    let last = p.loads().last()?;
    let seg_off = last.offset;
    let ranges = edited_ranges(p, seg_off)?;
    let rec_len = ranges.iter().try_fold(8u64, |a, r| a.checked_add(r.1))?;
    let total = p.data.len() as u64;
    let rec_at = total.checked_sub(rec_len)?;
    if rec_at < seg_off.checked_add(last.filesz)? {
        return None;
    }
    let rec = &p.data[rec_at as usize..];
    let len = u64::from_le_bytes(rec[rec.len() - 8..].try_into().ok()?);
    // The original ends before our segment; its header is an ELF header of
    // the same class and byte order.
    if len > seg_off || rec.get(..6)? != p.data.get(..6)? {
        return None;
    }
    let mut at = 0usize;
    let mut restore = Vec::with_capacity(ranges.len());
    for (offset, n) in ranges {
        if offset.checked_add(n)? > len {
            return None;
        }
        let bytes = rec.get(at..at + n as usize)?.to_vec();
        at += n as usize;
        restore.push(Edit { offset, bytes });
    }
    Some(Undo { restore, len })
}

/// Whether `patched` is, byte for byte, what the writer makes of `original`
/// (the candidate's bytes, parsed, with its `dynamic`) for the search path
/// `value` under `tag`, the one `patched` carries.
pub fn is_rewrite_of(
    original: &Elf<'_>,
    dynamic: &Dynamic,
    undo: &Undo,
    patched: &[u8],
    value: &[u8],
    tag: Tag,
) -> bool {
    let Ok(rw) = super::rewrite(original, dynamic, value, tag) else {
        return false;
    };
    rw.strategy != Strategy::TagOnly
        && rw.new_len(original.data.len() as u64) == patched.len() as u64
        && same_first_bytes(original, undo, &rw, patched)
        && same_appended(original, &rw, patched)
}

/// The original's first bytes with the rewrite's edits are the patched
/// file's: only the restored and the edited ranges can differ (everywhere
/// else the original is the patched file's own bytes).
fn same_first_bytes(original: &Elf<'_>, undo: &Undo, rw: &Rewrite, patched: &[u8]) -> bool {
    let byte = |i: u64| -> Option<u8> {
        match rw.edits.iter().rev().find(|e| e.offset <= i && i - e.offset < e.bytes.len() as u64) {
            Some(e) => Some(e.bytes[(i - e.offset) as usize]),
            None => original.data.get(i as usize).copied(),
        }
    };
    undo.restore.iter().chain(&rw.edits).all(|e| {
        (e.offset..e.offset + e.bytes.len() as u64)
            .all(|i| matches!(byte(i), Some(b) if patched.get(i as usize) == Some(&b)))
    })
}

/// Zeros up to the appended pieces, then the pieces, to the end.
fn same_appended(original: &Elf<'_>, rw: &Rewrite, patched: &[u8]) -> bool {
    let len = original.data.len();
    let Some(gap) = patched.get(len..rw.append_at as usize) else {
        return false;
    };
    if gap.iter().any(|&b| b != 0) {
        return false;
    }
    let mut at = rw.append_at as usize;
    for piece in &rw.append {
        let bytes: &[u8] = match piece {
            Piece::Bytes(b) => b,
            Piece::Input { offset, len } => match original.slice(*offset, *len, "range") {
                Ok(b) => b,
                Err(_) => return false,
            },
        };
        if patched.get(at..at + bytes.len()) != Some(bytes) {
            return false;
        }
        at += bytes.len();
    }
    at == patched.len()
}
