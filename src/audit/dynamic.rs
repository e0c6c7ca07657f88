//! What the audit knows of a host ELF file's linkage: the loader's facts
//! ([`crate::elf::dynamic`], read from the file's one parse) and whether
//! it carries the CUDA runtime statically.

use serde::Serialize;

use crate::elf::dynamic::DynamicFacts;
use crate::elf::{Elf, ElfError};

/// The loader facts of one host ELF file, and the static runtime.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HostFacts {
    /// What the loader will do with the file (reported in place: the JSON
    /// keeps one flat object).
    #[serde(flatten)]
    pub loader: DynamicFacts,
    /// The CUDA runtime is linked in (no libcudart NEEDED, and the runtime's
    /// `libcuda.so.1` string is present).
    pub static_cudart: bool,
}

impl HostFacts {
    /// The major version of a NEEDED libcudart (`libcudart.so.12` -> 12).
    pub fn cudart_major(&self) -> Option<u32> {
        self.loader
            .needed
            .iter()
            .find_map(|n| n.strip_prefix("libcudart.so.")?.split('.').next()?.parse().ok())
    }

    /// Whether the file will ask the loader for the driver library.
    pub fn needs_driver(&self) -> bool {
        self.static_cudart
            || self.loader.needed.iter().any(|n| n == "libcuda.so.1" || n == "libcuda.so")
    }
}

/// Reads the loader facts of a parsed file; `segments` is the damage
/// [`Elf::parse_lenient`] set aside, which the loader facts cannot do
/// without.
pub fn loader(elf: &Elf<'_>, segments: Option<&ElfError>) -> Result<DynamicFacts, ElfError> {
    if let Some(e) = segments {
        return Err(e.clone());
    }
    crate::elf::dynamic::facts(elf)
}

/// The facts of a file whose loader facts are read. A statically linked
/// CUDA runtime is looked for only when `device_code` (a fatbin section
/// has bytes; the caller clears the flag when those sections turn out to
/// hold no device code): this runs beside the fatbin walk, before its
/// result is known. `libcuda_string` is the answer of a search already
/// made over the same sections (the dlopen pass's, see
/// [`crate::dlopen::Scan::libcuda_string`]); without one they are searched
/// here.
pub fn facts(
    elf: &Elf<'_>,
    loader: DynamicFacts,
    device_code: bool,
    libcuda_string: Option<bool>,
    release: &(dyn Fn(&[u8]) + Sync),
) -> HostFacts {
    let static_cudart = device_code
        && !loader.needed.iter().any(|n| n.starts_with("libcudart.so"))
        && libcuda_string.unwrap_or_else(|| mentions_libcuda(elf, release));
    HostFacts { loader, static_cudart }
}

/// Whether a read-only data section holds the `libcuda.so.1` string the
/// static CUDA runtime dlopens, where the dlopen pass did not answer it
/// (the pass is off, or the file imports no `dlopen`: a statically linked
/// program). The sections are the dlopen pass's string sections
/// ([`crate::dlopen::strings::sections`]), so both answer alike, searched
/// in 4 MiB chunks (overlapping by the needle's length), from the end
/// backwards: nvcc links the static runtime after the program's own
/// objects, so its strings sit near the end of `.rodata` (cuRAND 12: in the
/// last 0.1 MB of 20.6 MB; cuBLASLt: 11 MB before the end of 48 MB, 37 MB
/// after its start). The order only changes how soon the scan stops; a file
/// without the string is read whole either way. One thread: the scan runs
/// beside the fatbin walk (see [`crate::audit::audit_file`]), and splitting
/// it over the pool had read 38 MB of the corpus where this reads 13 MB.
fn mentions_libcuda(elf: &Elf<'_>, release: &(dyn Fn(&[u8]) + Sync)) -> bool {
    use crate::dlopen::strings::{sections, StringSection, LIBCUDA};
    const CHUNK: usize = 4 << 20;
    let finder = memchr::memmem::Finder::new(LIBCUDA);
    let mut chunks: Vec<&[u8]> = Vec::new();
    for StringSection { bytes, from, .. } in sections(elf) {
        // An overlapping section's bytes before `from` were searched already.
        let mut start = from.saturating_sub(LIBCUDA.len() - 1);
        while start < bytes.len() {
            let end = (start + CHUNK).min(bytes.len());
            chunks.push(&bytes[start..end]);
            if end == bytes.len() {
                break;
            }
            start = end - (LIBCUDA.len() - 1);
        }
    }
    chunks.iter().rev().any(|chunk| {
        let found = finder.find(chunk).is_some();
        release(chunk);
        found
    })
}
