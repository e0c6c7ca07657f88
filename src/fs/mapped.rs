//! A file's bytes, memory-mapped read-only: the one way the tools map a
//! file they read (the audit, the listing, the RUNPATH fixer), with the
//! advice that keeps their resident memory independent of the file size.

use std::fs::File;
use std::io;

/// A file's bytes, memory-mapped (or empty for an empty file).
pub struct Mapped(Option<memmap2::Mmap>);

impl std::ops::Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0.as_deref().unwrap_or(&[])
    }
}

impl From<memmap2::Mmap> for Mapped {
    /// A map made elsewhere (the RUNPATH fixer's), to release pages through.
    fn from(map: memmap2::Mmap) -> Mapped {
        Mapped(Some(map))
    }
}

impl Mapped {
    /// Hints that the whole map is read once, in order (reference finding
    /// reads every byte): read-ahead, which [`map_file`]'s random-access hint
    /// turns off for the header reads. A hint; failure changes nothing.
    pub fn sequential(&self) {
        if let Some(map) = &self.0 {
            let _ = map.advise(memmap2::Advice::Sequential);
        }
    }

    /// Drops the pages of `part` (a slice of this map) from the resident
    /// set; they are read again from the file if touched. Used while walking
    /// large fatbin sections (see `devicecode::host::parse_with`). A no-op for other slices.
    pub fn release(&self, part: &[u8]) {
        let Some(map) = &self.0 else { return };
        let start = (part.as_ptr() as usize).wrapping_sub(map.as_ptr() as usize);
        let Some(end) = start.checked_add(part.len()).filter(|&e| e <= map.len()) else {
            return;
        };
        const PAGE: usize = 4096;
        let (first, last) = (start.div_ceil(PAGE) * PAGE, end / PAGE * PAGE);
        if last > first {
            // SAFETY: the map is a shared, read-only mapping of a file that
            // this process never writes (memmap2's `Mmap::map`: MAP_SHARED,
            // PROT_READ). MADV_DONTNEED on a file mapping only unmaps the
            // pages from this process; the page cache keeps them, so the next
            // access reads the same bytes from the file, and every slice
            // borrowed from the map keeps its contents (the same condition as
            // the map itself: the file is not changed under us).
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, last - first)
            };
        }
    }
}

/// Maps an open file read-only.
pub fn map_file(file: &File) -> io::Result<Mapped> {
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    }
    if !meta.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
    }
    if meta.len() == 0 {
        return Ok(Mapped(None));
    }
    // SAFETY: the map is read-only and shared (MAP_SHARED): other processes
    // writing the file would be seen through it. If another
    // process truncates the file while we read it, accesses past the new end
    // raise SIGBUS; Nix outputs are not modified while a hook or an audit
    // reads them, and every other tool in this position (ripgrep, the
    // `object` crate's users) accepts the same trade for speed.
    let map = unsafe { memmap2::Mmap::map(file)? };
    // Headers are scattered through hundreds of MB: on a cold page cache,
    // read-ahead around each one would read most of the file from disk. A
    // hint; failure changes nothing.
    let _ = map.advise(memmap2::Advice::Random);
    Ok(Mapped(Some(map)))
}
