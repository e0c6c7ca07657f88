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
    /// The CUDA runtime is linked in: no libcudart NEEDED, and both the
    /// runtime's `libcuda.so.1` string and its own error message
    /// ([`RUNTIME_MARKER`]) are present. A library that loads the driver
    /// itself (cuFFT 11: `libcuda.so.1`, `cuInit`) is not a runtime.
    pub static_cudart: bool,
    /// The GPU driver's libraries the file names as dlopen targets
    /// (`libcuda.so.1`, `libnvcuvid.so.1`), by soname; empty with
    /// `--no-dlopen`.
    #[serde(skip)]
    pub driver_dlopen: Vec<String>,
    /// The `libcuda.so.1` string was searched for and found (by the dlopen
    /// pass, or for a file with device code).
    #[serde(skip)]
    pub libcuda_string: bool,
}

/// The CUDA runtime's own error message for a driver too old for it
/// (`cudaErrorInsufficientDriver`): every runtime carries it, a library
/// that only calls the driver does not.
pub const RUNTIME_MARKER: &[u8] = b"CUDA driver version is insufficient for CUDA runtime version";

impl HostFacts {
    /// The major version of a NEEDED libcudart (`libcudart.so.12` -> 12).
    pub fn cudart_major(&self) -> Option<u32> {
        self.loader.needed.iter().find_map(|n| cudart_soname_major(n))
    }

    /// The major version when the file is itself the shared CUDA runtime
    /// (its soname is `libcudart.so.12`).
    pub fn own_cudart_major(&self) -> Option<u32> {
        self.loader.soname.as_deref().and_then(cudart_soname_major)
    }

    /// Why the file may load a GPU driver library, as a message says it;
    /// `None`: nothing it holds says it does. The driver library may be a
    /// NEEDED entry, a dlopen target (string, note, table), what the static
    /// runtime or the shared runtime itself dlopens, or `libcuda.so.1` named
    /// in a file whose strings were not searched for targets.
    pub fn driver_use(&self) -> Option<String> {
        // The driver's own libraries load each other from the folder they
        // are installed in together (NixOS's driver package gives them its
        // own lib folder as RUNPATH, distributions their loader cache): the
        // driver link is where others find them, not something they lack.
        if self.loader.soname.as_deref().is_some_and(crate::cuda::driver::is_library) {
            return None;
        }
        let needed: Vec<&str> = self
            .loader
            .needed
            .iter()
            .filter(|n| crate::cuda::driver::is_library(n))
            .map(String::as_str)
            .collect();
        if !needed.is_empty() {
            return Some(format!("it needs {}", needed.join(", ")));
        }
        if self.static_cudart {
            return Some("the static CUDA runtime dlopens libcuda.so.1".to_string());
        }
        if let Some(major) = self.own_cudart_major() {
            return Some(format!(
                "it is the CUDA runtime libcudart.so.{major}, which dlopens libcuda.so.1"
            ));
        }
        if !self.driver_dlopen.is_empty() {
            return Some(format!("it dlopens the GPU driver's {}", self.driver_dlopen.join(", ")));
        }
        self.libcuda_string.then(|| "it names libcuda.so.1, the GPU driver".to_string())
    }
}

/// `libcudart.so.12[.x]` -> 12.
fn cudart_soname_major(name: &str) -> Option<u32> {
    name.strip_prefix("libcudart.so.")?.split('.').next()?.parse().ok()
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
/// result is known. `loads` is the dlopen pass's scan: its answer for the
/// `libcuda.so.1` string ([`crate::dlopen::Scan::libcuda_string`]) is
/// reused; without one the sections are searched here. The runtime's own
/// message ([`RUNTIME_MARKER`]) is searched only where the `libcuda.so.1`
/// string is.
pub fn facts(
    elf: &Elf<'_>,
    loader: DynamicFacts,
    device_code: bool,
    loads: &crate::dlopen::Scan,
    release: &(dyn Fn(&[u8]) + Sync),
) -> HostFacts {
    let driver_dlopen: Vec<String> = loads
        .targets
        .iter()
        .filter(|t| t.asked.iter().any(|n| crate::cuda::driver::is_library(n)))
        .map(|t| t.soname.clone())
        .collect();
    let searched = device_code && !loader.needed.iter().any(|n| n.starts_with("libcudart.so"));
    let libcuda_string = match loads.libcuda_string {
        Some(found) => found,
        None => searched && mentions(elf, crate::dlopen::strings::LIBCUDA, release),
    };
    let static_cudart = searched && libcuda_string && mentions(elf, RUNTIME_MARKER, release);
    HostFacts { loader, static_cudart, driver_dlopen, libcuda_string }
}

/// Whether a read-only data section holds `needle`: the `libcuda.so.1`
/// string the static CUDA runtime dlopens, where the dlopen pass did not
/// answer it (the pass is off, or the file imports no `dlopen`: a
/// statically linked program), or the runtime's [`RUNTIME_MARKER`]. The sections are the dlopen pass's string sections
/// ([`crate::dlopen::strings::sections`]), so both answer alike, searched
/// in 4 MiB chunks (overlapping by the needle's length), from the end
/// backwards: nvcc links the static runtime after the program's own
/// objects, so its strings sit near the end of `.rodata` (cuRAND 12: in the
/// last 0.1 MB of 20.6 MB; cuBLASLt: 11 MB before the end of 48 MB, 37 MB
/// after its start). The order only changes how soon the scan stops; a file
/// without the string is read whole either way. One thread: the scan runs
/// beside the fatbin walk (see [`crate::audit::audit_file`]), and splitting
/// it over the pool had read 38 MB of the corpus where this reads 13 MB.
fn mentions(elf: &Elf<'_>, needle: &[u8], release: &(dyn Fn(&[u8]) + Sync)) -> bool {
    use crate::dlopen::strings::{sections, StringSection};
    const CHUNK: usize = 4 << 20;
    let finder = memchr::memmem::Finder::new(needle);
    let mut chunks: Vec<&[u8]> = Vec::new();
    for StringSection { bytes, from, .. } in sections(elf) {
        // An overlapping section's bytes before `from` were searched already.
        let mut start = from.saturating_sub(needle.len() - 1);
        while start < bytes.len() {
            let end = (start + CHUNK).min(bytes.len());
            chunks.push(&bytes[start..end]);
            if end == bytes.len() {
                break;
            }
            start = end - (needle.len() - 1);
        }
    }
    chunks.iter().rev().any(|chunk| {
        let found = finder.find(chunk).is_some();
        release(chunk);
        found
    })
}
