//! What the loader will do with a host ELF file: its type, interpreter,
//! NEEDED libraries, RUNPATH/RPATH, and whether it carries the CUDA runtime
//! statically. Read with the bounds-checked reader of [`crate::elf`] (the
//! same one the RUNPATH patcher trusts), headers and the dynamic string
//! table only.

use serde::Serialize;

use crate::elf::{
    cstr, Elf, ElfError, DF_1_PIE, DT_FLAGS_1, DT_NEEDED, DT_RPATH, DT_RUNPATH, DT_SONAME, ET_DYN,
    ET_EXEC, ET_REL, PT_DYNAMIC, PT_INTERP,
};

/// The loader-relevant facts of one ELF file.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DynamicFacts {
    /// `executable`, `pie-executable`, `shared-object`, `relocatable`,
    /// `other`. A PIE program is ET_DYN like a library; a maintainer reads
    /// "program", so it is told apart: DF_1_PIE, or (linkers older than
    /// that flag) an interpreter and no soname.
    pub kind: &'static str,
    /// ELFCLASS64.
    pub is64: bool,
    /// `e_machine`.
    pub machine: u16,
    /// Whether the file has a dynamic section with entries (is linked dynamically).
    pub dynamic: bool,
    /// PT_INTERP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interpreter: Option<String>,
    /// DT_SONAME.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soname: Option<String>,
    /// DT_NEEDED, in order.
    pub needed: Vec<String>,
    /// DT_RUNPATH.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runpath: Option<String>,
    /// DT_RPATH.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpath: Option<String>,
    /// The CUDA runtime is linked in (no libcudart NEEDED, and the runtime's
    /// `libcuda.so.1` string is present).
    pub static_cudart: bool,
}

impl DynamicFacts {
    /// The search list the loader uses for this file's own NEEDED entries:
    /// RUNPATH when present, else RPATH.
    pub fn search_path(&self) -> Option<&str> {
        self.runpath.as_deref().or(self.rpath.as_deref())
    }

    /// The major version of a NEEDED libcudart (`libcudart.so.12` -> 12).
    pub fn cudart_major(&self) -> Option<u32> {
        self.needed
            .iter()
            .find_map(|n| n.strip_prefix("libcudart.so.")?.split('.').next()?.parse().ok())
    }

    /// Whether the file will ask the loader for the driver library.
    pub fn needs_driver(&self) -> bool {
        self.static_cudart || self.needed.iter().any(|n| n == "libcuda.so.1" || n == "libcuda.so")
    }
}

/// Reads the facts. A statically linked CUDA runtime is looked for only in
/// files with a non-empty fatbin section (the caller clears the flag when
/// those sections turn out to hold no device code): this runs beside the
/// fatbin walk, before its result is known.
pub fn facts(data: &[u8], release: &(dyn Fn(&[u8]) + Sync)) -> Result<DynamicFacts, ElfError> {
    let elf = Elf::parse(data)?;
    let device_code = elf.shdrs.iter().any(|s| {
        s.size > 0
            && s.sh_type != crate::elf::SHT_NOBITS
            && elf.section_name(s).is_some_and(|n| {
                n == crate::devicecode::host::NV_FATBIN.as_bytes()
                    || n == crate::devicecode::host::NV_RELFATBIN.as_bytes()
            })
    });
    let mut pie_flag = false;
    let mut f = DynamicFacts {
        kind: match elf.e_type {
            ET_EXEC => "executable",
            ET_DYN => "shared-object",
            ET_REL => "relocatable",
            _ => "other",
        },
        is64: elf.layout.is64,
        machine: elf.machine,
        ..DynamicFacts::default()
    };
    // A split debug file (`objcopy --only-keep-debug`) keeps PT_DYNAMIC with
    // no bytes in the file (p_filesz 0, .dynamic NOBITS): nothing to load,
    // so no loader facts, and no damage either (the stripped file has them).
    let split_debug = elf.phdr(PT_DYNAMIC).is_some_and(|p| p.filesz == 0);
    if let Some(ph) = elf.phdr(PT_INTERP).filter(|_| !split_debug) {
        let bytes = elf.slice(ph.offset, ph.filesz, "PT_INTERP")?;
        f.interpreter = Some(String::from_utf8_lossy(cstr(bytes).unwrap_or(bytes)).into_owned());
    }
    if let Some(dynamic) = if split_debug { None } else { elf.dynamic()? } {
        if !dynamic.entries.is_empty() {
            f.dynamic = true;
            let strtab = elf.dynstr(&dynamic)?;
            let text = |v: u64| -> Result<String, ElfError> {
                Ok(String::from_utf8_lossy(strtab.get(v)?).into_owned())
            };
            for d in &dynamic.entries {
                match d.tag {
                    DT_NEEDED => f.needed.push(text(d.val)?),
                    DT_RUNPATH => f.runpath = Some(text(d.val)?),
                    DT_RPATH => f.rpath = Some(text(d.val)?),
                    DT_SONAME => f.soname = Some(text(d.val)?),
                    DT_FLAGS_1 => pie_flag = d.val & DF_1_PIE != 0,
                    _ => {}
                }
            }
        }
    }
    if f.kind == "shared-object" && (pie_flag || (f.interpreter.is_some() && f.soname.is_none())) {
        f.kind = "pie-executable";
    }
    if device_code && !f.needed.iter().any(|n| n.starts_with("libcudart.so")) {
        f.static_cudart = mentions_libcuda(&elf, release);
    }
    Ok(f)
}

/// Whether a read-only data section holds the `libcuda.so.1` string the
/// static CUDA runtime dlopens. Only `.rodata`-like sections are searched,
/// in 4 MiB chunks (overlapping by the needle's length), from the end
/// backwards: nvcc links the static runtime after the program's own
/// objects, so its strings sit near the end of `.rodata` (cuRAND 12: in the
/// last 0.1 MB of 20.6 MB; cuBLASLt: 11 MB before the end of 48 MB, 37 MB
/// after its start). The order only changes how soon the scan stops; a file
/// without the string is read whole either way. One thread: the scan runs
/// beside the fatbin walk (see [`crate::audit::audit_file`]), and splitting
/// it over the pool had read 38 MB of the corpus where this reads 13 MB.
fn mentions_libcuda(elf: &Elf<'_>, release: &(dyn Fn(&[u8]) + Sync)) -> bool {
    const NEEDLE: &[u8] = b"libcuda.so.1\0";
    const CHUNK: usize = 4 << 20;
    let finder = memchr::memmem::Finder::new(NEEDLE);
    let mut chunks: Vec<&[u8]> = Vec::new();
    for s in &elf.shdrs {
        let name = elf.section_name(s).unwrap_or_default();
        if !(name == b".rodata" || name.starts_with(b".rodata.") || name == b".lrodata")
            || s.sh_type == crate::elf::SHT_NOBITS
        {
            continue;
        }
        let Ok(bytes) = elf.slice(s.offset, s.size, "section") else { continue };
        let mut start = 0;
        while start < bytes.len() {
            let end = (start + CHUNK).min(bytes.len());
            chunks.push(&bytes[start..end]);
            if end == bytes.len() {
                break;
            }
            start = end - (NEEDLE.len() - 1);
        }
    }
    chunks.iter().rev().any(|chunk| {
        let found = finder.find(chunk).is_some();
        release(chunk);
        found
    })
}
