//! Which files are left alone, and why: not ELF, debug files (by name),
//! then what [`crate::elf::classify`] skips (objects, cubins, the dynamic
//! loader, static executables) and files without a dynamic section. A file
//! that passes is parsed once here for the planner and the writer.

use std::fs::File;
use std::io;
use std::path::Path;

use super::FileError;
use crate::elf::classify::{self, Skip};
use crate::elf::machine::Target;
use crate::elf::{Dynamic, Elf, ElfError, MAGIC};
use crate::fs::mapped::read_full_at;

/// The skips decided without parsing: the magic number and the name.
pub(super) fn skip_before_parse(file: &File, path: &Path) -> io::Result<Option<Skip>> {
    let mut magic = [0u8; 4];
    let n = read_full_at(file, &mut magic, 0)?;
    if n < 4 || &magic != MAGIC {
        return Ok(Some(Skip::NotElf));
    }
    if classify::is_debug_path(path) {
        return Ok(Some(Skip::DebugInfo));
    }
    Ok(None)
}

/// A dynamic ELF file the planner may patch.
pub(super) struct Parsed<'a> {
    /// The file.
    pub(super) elf: Elf<'a>,
    /// Its dynamic section.
    pub(super) dynamic: Dynamic,
    /// Its machine, when the header names one.
    target: Option<Target>,
}

impl Parsed<'_> {
    /// The machine its header names, if any.
    pub(super) fn target(&self) -> Option<Target> {
        self.target
    }

    /// `e` as this file's error (see [`foreign`]).
    pub(super) fn foreign(&self, e: ElfError) -> FileError {
        foreign(self.target, e)
    }
}

/// A file for another machine than this one is named so in errors; one for
/// a machine we cannot name is patched like any other, and its errors give
/// the number.
fn foreign(target: Option<Target>, e: ElfError) -> FileError {
    match target {
        Some(t) if !t.is_build_machine() => {
            ElfError::ForMachine { source: Box::new(e), target: t.describe() }.into()
        }
        _ => e.into(),
    }
}

/// Parses `data` (for `target`, from [`Target::peek`]): the file to plan
/// for, or why it is skipped.
pub(super) fn parse(
    data: &[u8],
    target: Option<Target>,
) -> Result<Result<Parsed<'_>, Skip>, FileError> {
    let elf = Elf::parse(data).map_err(|e| foreign(target, e))?;
    if let Some(skip) = classify::classify(&elf).map_err(|e| foreign(target, e))? {
        return Ok(Err(skip));
    }
    let Some(dynamic) = elf.dynamic().map_err(|e| foreign(target, e))? else {
        return Ok(Err(Skip::Static));
    };
    Ok(Ok(Parsed { elf, dynamic, target }))
}
