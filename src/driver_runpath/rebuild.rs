//! A file our writer already rewrote is rewritten from the original it was
//! made from ([`crate::elf::patch::candidate`], proven by
//! [`crate::elf::patch::is_rewrite_of`]), not given a second segment, and
//! its new search path is planned against that original's (`plan::plan_file`):
//! the result is then the one run's over the original, so that fixes run as
//! separate invocations, in any order, give the bytes one run gives (issue 33).
//!
//! The original is a private copy-on-write view of the file with the undo
//! record's header bytes written back, cut at the original length: nothing
//! of the file is read into memory but those headers. The new file is
//! written through the replacement (the original's first bytes copied by
//! the kernel, the restored headers and the new edits written over them,
//! the new segment appended), even with `--in-place`: the segment the
//! file's headers point to would be overwritten before the one write that
//! switches them, which no single write can make atomic.

use std::fs::File;

use super::classify::Parsed;
use super::plan::Change;
use super::FileError;
use crate::elf::patch::{self, Rewrite, Undo};

/// The original of a file of ours.
pub(super) struct Original {
    /// The file, privately, with the original headers written back.
    view: memmap2::MmapMut,
    /// What was written back, and the original length.
    undo: Undo,
}

impl Original {
    /// The original's bytes.
    pub(super) fn bytes(&self) -> &[u8] {
        &self.view[..self.undo.len as usize]
    }

    /// `change` (planned against the file as it is) as a rewrite of the
    /// original `parsed` (from [`Original::bytes`]): the restored headers
    /// first, then the rewrite's own edits over them.
    pub(super) fn change(&self, parsed: &Parsed<'_>, change: &Change) -> Result<Change, FileError> {
        let rw = patch::rewrite(&parsed.elf, &parsed.dynamic, &change.value, change.tag)
            .map_err(|e| parsed.foreign(e))?;
        let mut edits = self.undo.restore.clone();
        edits.extend(rw.edits);
        Ok(Change { value: change.value.clone(), tag: change.tag, rw: Rewrite { edits, ..rw } })
    }
}

/// The original `parsed` (the file as it is, open as `file`) would have
/// been made from if our writer made it: a candidate read from its undo
/// record, `None` for a file without one. Only [`Original::made`] says
/// whether it was.
pub(super) fn candidate(file: &File, parsed: &Parsed<'_>) -> Result<Option<Original>, FileError> {
    let Some(undo) = patch::candidate(&parsed.elf) else {
        return Ok(None);
    };
    // SAFETY: a private (copy-on-write) map: our writes to it never reach
    // the file; the same caveat as the input map applies to other writers.
    let mut view = unsafe { memmap2::MmapOptions::new().map_copy(file)? };
    for e in &undo.restore {
        let at = e.offset as usize;
        match view.get_mut(at..at + e.bytes.len()) {
            Some(dst) => dst.copy_from_slice(&e.bytes),
            None => return Ok(None),
        }
    }
    Ok(Some(Original { view, undo }))
}

impl Original {
    /// Whether our writer made `parsed` (the file as it is) from this
    /// original, `o` (its [`Original::bytes`], parsed): the writer given `o`
    /// and the file's search path reproduces every byte of the file, and
    /// the file verifies against `o`.
    pub(super) fn made(&self, o: &Parsed<'_>, parsed: &Parsed<'_>) -> bool {
        let Ok(Some((value, tag))) = patch::current_path(&parsed.elf, &parsed.dynamic) else {
            return false;
        };
        patch::is_rewrite_of(&o.elf, &o.dynamic, &self.undo, parsed.elf.data, value, tag)
            && patch::verify(&o.elf, parsed.elf.data, value, tag).is_ok()
    }
}
