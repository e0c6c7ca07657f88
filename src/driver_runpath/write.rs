//! Applying a planned rewrite through the atomic writer: in place (append,
//! verify, one header write, a journal for a killed run) when asked and
//! possible, else a verified temporary copy renamed over the original.
//! Either way the result is verified before the original changes, and
//! device code is proven untouched.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::plan::Change;
use super::FileError;
use crate::elf::patch::{self, Edit, Piece};
use crate::elf::runpath::Tag;
use crate::elf::{Elf, ElfError};
use crate::error::PathError;
use crate::fs::atomic::Replacement;
use crate::fs::mapped;
use crate::fs::mapped::read_full_at;
use crate::fs::side::Journal;
use crate::fs::xattr;

/// A verified new file, waiting for the original's map and descriptor to
/// be dropped before it replaces the original.
pub(super) enum Pending {
    /// The tail is appended and verified; one write of `edits` switches.
    InPlace {
        /// The original, opened for writing.
        file: File,
        /// The header write.
        edits: Vec<Edit>,
        /// Undoes the tail if we are killed before the switch.
        journal: Option<Journal>,
    },
    /// A temporary copy, ready to be renamed over the original.
    Replace(Replacement),
}

/// Writes and verifies the new file for `change` without touching the
/// original's bytes yet. `outside_links`: names of the file outside the
/// walked tree (see [`in_place_changes_only_the_bytes`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn prepare(
    path: &Path,
    file: &File,
    meta: &Metadata,
    elf: &Elf<'_>,
    change: &Change,
    in_place: bool,
    outside_links: u64,
    sync: bool,
) -> Result<Pending, FileError> {
    let rw = &change.rw;
    for (offset, len) in patch::device_code_ranges(elf) {
        let end = offset.saturating_add(len);
        if rw.edits.iter().any(|e| e.offset < end && offset < e.offset + e.bytes.len() as u64) {
            return Err(ElfError::Verify(format!(
                "an edit would touch device code at {offset:#x}"
            ))
            .into());
        }
    }
    let attrs = xattr::read(file)
        .map_err(|e| PathError::during(path, "cannot read the file's extended attributes", e))?;
    if in_place
        && one_write(&rw.edits)
        && in_place_changes_only_the_bytes(meta, &attrs, outside_links)
    {
        if let Some(pending) = try_in_place(path, meta, elf, change, sync)? {
            return Ok(pending);
        }
    }
    let mut repl = write_replacement(path, file, elf, rw, &change.value, change.tag)?;
    repl.keep_attributes(attrs);
    Ok(Pending::Replace(repl))
}

/// Whether patching in place does to the file what the replacement does,
/// so that the two modes agree on everything but the inode:
/// - the file has no names outside the walked tree: the replacement
///   switches the names it walked and leaves any other name on the old
///   file (a name we were not asked to patch is not changed), where a write
///   in place would change the file under every name;
/// - a write keeps its privileges: the kernel removes file capabilities
///   (`security.capability`) from a file written to, whoever writes, and
///   setuid/setgid when the writer is not root, where the replacement sets
///   them again on the new file.
///
/// Otherwise the file is replaced even with `--in-place`.
fn in_place_changes_only_the_bytes(
    meta: &Metadata,
    attrs: &xattr::Attributes,
    outside_links: u64,
) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    outside_links == 0 && !xattr::has_capability(attrs) && (root || meta.mode() & 0o6000 == 0)
}

/// In place only when the switch is one write within one page, which no
/// reader or crash can see half done; otherwise replace.
fn one_write(edits: &[Edit]) -> bool {
    match edits {
        [e] => {
            !e.bytes.is_empty() && e.offset / 4096 == (e.offset + e.bytes.len() as u64 - 1) / 4096
        }
        _ => false,
    }
}

/// The in-place mode's first half, or `None` when the file cannot be opened
/// for writing (a read-only file, a running program): the replacement then
/// needs only the folder to be writable.
fn try_in_place(
    path: &Path,
    meta: &Metadata,
    elf: &Elf<'_>,
    change: &Change,
    sync: bool,
) -> Result<Option<Pending>, FileError> {
    let rwfile = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::ETXTBSY)
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(e.into()),
    };
    let rw = &change.rw;
    let old_len = elf.data.len() as u64;
    // The journal lets a later run undo the appended tail if we are killed
    // before the switch. A folder we cannot write to gets none: the tail is
    // then left over (the file still reads as the old one everywhere).
    let e = &rw.edits[0];
    let journal = match Journal::in_place(path, meta, old_len, e.offset, &e.bytes) {
        Ok(j) => Some(j),
        Err(err)
            if matches!(
                err.source.raw_os_error(),
                Some(libc::EACCES | libc::EPERM | libc::EROFS)
            ) =>
        {
            None
        }
        Err(err) => return Err(err.into()),
    };
    append_and_verify(&rwfile, elf, rw, &change.value, change.tag, old_len, sync)?;
    Ok(Some(Pending::InPlace { file: rwfile, edits: rw.edits.clone(), journal }))
}

/// Switches the original to the new file; `true` when that was in place.
pub(super) fn commit(
    pending: Pending,
    meta: &Metadata,
    links: &[PathBuf],
    sync: bool,
) -> Result<bool, FileError> {
    match pending {
        Pending::InPlace { file, edits, journal } => {
            // The switch: one write of the ELF header (or of one dynamic tag).
            for e in &edits {
                file.write_all_at(&e.bytes, e.offset)?;
            }
            if sync {
                file.sync_data()?;
            }
            if let Some(j) = journal {
                j.finish();
            }
            Ok(true)
        }
        Pending::Replace(replacement) => {
            replacement.commit(meta, links, sync)?;
            Ok(false)
        }
    }
}

/// In-place mode, first half: appends the new pieces after the end of the
/// file (no old byte changes, so the file is still the old one to every
/// reader), then verifies a private copy-on-write view with the header edits
/// applied. On any failure the file is truncated back to its old length.
fn append_and_verify(
    f: &File,
    elf: &Elf<'_>,
    rw: &patch::Rewrite,
    value: &[u8],
    tag: Tag,
    old_len: u64,
    sync: bool,
) -> Result<(), FileError> {
    let result = (|| -> Result<(), FileError> {
        write_pieces(f, elf, rw)?;
        if f.metadata()?.len() != rw.new_len(old_len) {
            return Err(ElfError::Verify("the file has an unexpected length".into()).into());
        }
        if sync {
            f.sync_data()?;
        }
        // SAFETY: a private (copy-on-write) map: our writes to it never reach
        // the file; the same caveat as the input map applies to others.
        let mut view = unsafe { memmap2::MmapOptions::new().map_copy(f)? };
        for e in &rw.edits {
            let at = e.offset as usize;
            view.get_mut(at..at + e.bytes.len())
                .ok_or_else(|| ElfError::Verify("edit outside the file".into()))?
                .copy_from_slice(&e.bytes);
        }
        patch::verify(elf, &view, value, tag)?;
        Ok(())
    })();
    if result.is_err() {
        let _ = f.set_len(old_len);
    }
    result
}

/// Writes the appended pieces of a rewrite.
fn write_pieces(out: &File, elf: &Elf<'_>, rw: &patch::Rewrite) -> Result<(), FileError> {
    let mut at = rw.append_at;
    for piece in &rw.append {
        let bytes: &[u8] = match piece {
            Piece::Bytes(b) => b,
            Piece::Input { offset, len } => elf.slice(*offset, *len, "appended range")?,
        };
        out.write_all_at(bytes, at)?;
        at += bytes.len() as u64;
    }
    Ok(())
}

/// Replacement mode: the whole new file in a temporary file next to the
/// original, verified, ready to be renamed over it.
fn write_replacement(
    path: &Path,
    file: &File,
    elf: &Elf<'_>,
    rw: &patch::Rewrite,
    value: &[u8],
    tag: Tag,
) -> Result<Replacement, FileError> {
    // Small in and out: an executable given a sparse hole (a large `.bss`,
    // see `elf::patch::MAX_EXEC_HOLE`) is small in but not out.
    let new_len = rw.new_len(elf.data.len() as u64);
    if elf.data.len() as u64 <= mapped::READ_WHOLE && new_len <= 2 * mapped::READ_WHOLE {
        return write_small(path, elf, rw, value, tag);
    }
    let repl = Replacement::create_journaled(path)?;
    let out = repl.file();
    // `io::copy` between two files is `copy_file_range` on Linux: the kernel
    // copies (or shares, on a file system with reflinks) the bytes, which
    // never pass through this process.
    // Only the original's length: a file rebuilt from its original
    // (`rebuild`) is longer than the original it is cut back to.
    io::copy(&mut io::Read::take(file, elf.data.len() as u64), &mut &*out)?;
    for e in &rw.edits {
        out.write_all_at(&e.bytes, e.offset)?;
    }
    write_pieces(out, elf, rw)?;
    if out.metadata()?.len() != rw.new_len(elf.data.len() as u64) {
        return Err(ElfError::Verify("the written file has an unexpected length".into()).into());
    }
    // SAFETY: the temporary file is ours alone (created O_EXCL, mode 0600).
    let new_map = unsafe { memmap2::Mmap::map(out)? };
    patch::verify(elf, &new_map, value, tag)?;
    drop(new_map);
    // Device code: `prepare` refused any edit inside it and the pieces go
    // after the old end, so the kernel's copy is the only writer of those
    // bytes; its first and last pages are read back as a check of the copy,
    // not the whole range (a 750 MB library would be read twice more, which
    // is what made this mode cost more than a copy).
    for (offset, len) in patch::device_code_ranges(elf) {
        for (at, n) in sample_pages(offset, len) {
            if !same_bytes(file, out, at, n)? {
                return Err(ElfError::Verify(format!(
                    "device code at {offset:#x} differs after the copy"
                ))
                .into());
            }
        }
    }
    Ok(repl)
}

/// Replacement mode for a small file (read into memory whole, see
/// [`mapped::read_or_map`]): the new file built and verified in memory
/// before the temporary file exists, then written with one `pwrite`. The
/// same checks as for a large file, on the bytes that are written, device
/// code compared in full; a fraction of the system calls (no copy, no
/// re-read, no map of the new file).
fn write_small(
    path: &Path,
    elf: &Elf<'_>,
    rw: &patch::Rewrite,
    value: &[u8],
    tag: Tag,
) -> Result<Replacement, FileError> {
    let new = rw.apply(elf.data)?;
    patch::verify(elf, &new, value, tag)?;
    for (offset, len) in patch::device_code_ranges(elf) {
        let (o, n) = (offset as usize, len as usize);
        if elf.data.get(o..o.saturating_add(n)) != new.get(o..o.saturating_add(n)) {
            return Err(ElfError::Verify(format!("device code at {offset:#x} differs")).into());
        }
    }
    let repl = Replacement::create_journaled(path)?;
    repl.file().write_all_at(&new, 0)?;
    Ok(repl)
}

/// The first and the last page of `[offset, offset+len)` (one range when
/// they meet).
fn sample_pages(offset: u64, len: u64) -> Vec<(u64, u64)> {
    const PAGE: u64 = 4096;
    if len <= 2 * PAGE {
        vec![(offset, len)]
    } else {
        vec![(offset, PAGE), (offset + len - PAGE, PAGE)]
    }
}

/// Whether two files hold the same bytes in `[offset, offset+len)`, read in
/// bounded chunks (memory stays at 2 MiB whatever the length).
fn same_bytes(a: &File, b: &File, offset: u64, len: u64) -> io::Result<bool> {
    const CHUNK: usize = 1 << 20;
    let cap = CHUNK.min(len as usize);
    let (mut x, mut y) = (vec![0u8; cap], vec![0u8; cap]);
    let mut done = 0u64;
    while done < len {
        let n = cap.min((len - done) as usize);
        let (p, q) = (
            read_full_at(a, &mut x[..n], offset + done)?,
            read_full_at(b, &mut y[..n], offset + done)?,
        );
        if p != n || q != n || x[..n] != y[..n] {
            return Ok(false);
        }
        done += n as u64;
    }
    Ok(true)
}
