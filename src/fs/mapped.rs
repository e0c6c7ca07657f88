//! A file's bytes, memory-mapped read-only: the one way the tools map a
//! file they read (the audit, the listing, the RUNPATH fixer), with the
//! advice that keeps their resident memory independent of the file size.

use std::fs::File;
use std::io;

/// A file's bytes, memory-mapped (or empty for an empty file, or read into
/// memory for a small one: [`read_or_map`]).
pub struct Mapped(Bytes);

enum Bytes {
    Map(memmap2::Mmap),
    Read(Vec<u8>),
}

impl std::ops::Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Bytes::Map(m) => m,
            Bytes::Read(v) => v,
        }
    }
}

impl From<memmap2::Mmap> for Mapped {
    /// A map made elsewhere, to release pages through.
    fn from(map: memmap2::Mmap) -> Mapped {
        Mapped(Bytes::Map(map))
    }
}

/// Files up to this size are read into memory by [`read_or_map`]: one
/// `pread` costs less than mapping (`fstat`, `mmap`, page faults,
/// `munmap`), and the whole file is in memory anyway for the writer that
/// builds its new bytes there. Larger files are mapped: no whole library is
/// ever loaded into memory.
pub const READ_WHOLE: u64 = 1 << 20;

/// A regular file of `len` bytes (its size from the caller's `fstat`):
/// read into memory when it is at most [`READ_WHOLE`], else mapped
/// read-only (see [`map_file`] for the caveat of a map). A small file that
/// changed size meanwhile is read as far as it goes, up to `len`.
pub fn read_or_map(file: &File, len: u64) -> io::Result<Mapped> {
    if len > READ_WHOLE {
        // SAFETY: as in `map_file`.
        return Ok(Mapped::from(unsafe { memmap2::Mmap::map(file)? }));
    }
    let mut buf = vec![0u8; len as usize];
    let done = read_full_at(file, &mut buf, 0)?;
    buf.truncate(done);
    Ok(Mapped(Bytes::Read(buf)))
}

/// Reads into `buf` from `offset` until it is full or the file ends (a
/// short read of a regular file is rare but allowed); the count read.
pub fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

impl Mapped {
    /// Hints that the whole map is read once, in order (reference finding
    /// reads every byte): read-ahead, which [`map_file`]'s random-access hint
    /// turns off for the header reads. A hint; failure changes nothing.
    pub fn sequential(&self) {
        if let Bytes::Map(map) = &self.0 {
            let _ = map.advise(memmap2::Advice::Sequential);
        }
    }

    /// Drops the pages of `part` (a slice of this map) from the resident
    /// set; they are read again from the file if touched. Used while walking
    /// large fatbin sections (see `devicecode::host::parse_with`). A no-op for other slices.
    pub fn release(&self, part: &[u8]) {
        let Bytes::Map(map) = &self.0 else { return };
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
        return Ok(Mapped(Bytes::Read(Vec::new())));
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
    Ok(Mapped(Bytes::Map(map)))
}
