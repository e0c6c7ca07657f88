//! What kind of file this is, and whether autoAddDriverRunpath may touch it.
//!
//! Upstream (autoFixElfFiles) treats a file as dynamic when `patchelf
//! --print-rpath` succeeds, i.e. when it has a dynamic section, and patches
//! everything else it finds that way. We skip more, each for a reason
//! (reference `upstream-hooks.md` §4):
//!
//! - **static executable**: no PT_DYNAMIC, or an empty one (upstream skips too);
//! - **relocatable object** (`.o`, ET_REL) and other non-executable types;
//! - **cubin**: `e_machine` EM_CUDA: device code, not loaded by a host's
//!   dynamic loader. Every host machine is patched, whatever the machine this
//!   program runs on: a cross build's outputs are for another machine, and
//!   autoFixElfFiles checks no architecture either ([`super::machine`]);
//! - **debug-only file**: separate debug info (`objcopy --only-keep-debug`) keeps
//!   the program headers but its `.dynamic` is SHT_NOBITS, and files under a
//!   `.build-id` folder or named `*.debug` are such files;
//! - **static-pie**: ET_DYN with PT_DYNAMIC but no PT_INTERP and no DT_NEEDED,
//!   and marked as an executable (DF_1_PIE or DT_DEBUG). A shared library has
//!   no PT_INTERP either, but is never flagged PIE and has no DT_DEBUG; a
//!   library with no dependencies and no such flag is still patched. Patching a
//!   static-pie gains nothing (it loads no library) and can break its
//!   self-relocation, which reads `_DYNAMIC`;
//! - **the dynamic loader**: ET_DYN, no PT_INTERP, DT_SONAME `ld-linux*`,
//!   `ld64.so*`, `ld.so*` or `ld-musl-*`: it never reads its own RUNPATH.

use std::path::Path;

use super::{
    Dynamic, Elf, ElfError, DF_1_PIE, DT_DEBUG, DT_FLAGS_1, DT_NEEDED, DT_SONAME, EM_CUDA, ET_DYN,
    ET_EXEC, PT_DYNAMIC, PT_INTERP, SHT_DYNAMIC, SHT_NOBITS,
};

/// Why a file is left alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Skip {
    /// Not an ELF file.
    NotElf,
    /// An ELF file without dynamic section (upstream skips these too).
    Static,
    /// A static-pie executable.
    StaticPie,
    /// The dynamic loader itself.
    DynamicLoader,
    /// A relocatable object or another non-loadable type.
    Relocatable,
    /// A cubin (EM_CUDA).
    Cubin,
    /// Separate debug information.
    DebugInfo,
}

impl Skip {
    /// The words a log line uses.
    pub fn describe(self) -> &'static str {
        match self {
            Skip::NotElf => "not an ELF file",
            Skip::Static => "statically-linked ELF file",
            Skip::StaticPie => "static-pie executable",
            Skip::DynamicLoader => "the dynamic loader",
            Skip::Relocatable => "relocatable object",
            Skip::Cubin => "CUDA device code (cubin)",
            Skip::DebugInfo => "separate debug information",
        }
    }

    /// Whether upstream autoFixElfFiles would have skipped it too (it prints
    /// its "statically-linked" line for those); the others are our additions.
    pub fn upstream_skips(self) -> bool {
        matches!(self, Skip::Static | Skip::Relocatable | Skip::Cubin | Skip::DebugInfo)
    }
}

/// Whether a path names a debug-info file by convention.
pub fn is_debug_path(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == ".build-id")
        || path.extension().is_some_and(|e| e == "debug")
}

/// Decides whether a parsed ELF file is patched, and if not, why.
/// `Ok(None)` means: patch it.
pub fn classify(elf: &Elf<'_>) -> Result<Option<Skip>, ElfError> {
    if elf.machine == EM_CUDA {
        return Ok(Some(Skip::Cubin));
    }
    if elf.e_type != ET_EXEC && elf.e_type != ET_DYN {
        return Ok(Some(Skip::Relocatable));
    }
    let Some(dynph) = elf.phdr(PT_DYNAMIC) else { return Ok(Some(Skip::Static)) };
    if elf.shdrs.iter().any(|s| s.sh_type == SHT_NOBITS && is_dynamic_section(elf, s)) {
        return Ok(Some(Skip::DebugInfo));
    }
    if dynph.filesz == 0 {
        return Ok(Some(Skip::Static));
    }
    let dynamic =
        elf.dynamic()?.unwrap_or(Dynamic { offset: 0, vaddr: 0, entries: Vec::new(), slots: 0 });
    if dynamic.entries.is_empty() {
        return Ok(Some(Skip::Static));
    }
    let interp = elf.phdr(PT_INTERP).is_some();
    if elf.e_type == ET_DYN && !interp {
        if let Some(soname) = dynamic.get(DT_SONAME) {
            let strtab = elf.dynstr(&dynamic)?;
            let name = strtab.get(soname)?;
            if is_loader_name(name) {
                return Ok(Some(Skip::DynamicLoader));
            }
        }
        if !dynamic.has(DT_NEEDED) && (pie_flagged(&dynamic) || dynamic.has(DT_DEBUG)) {
            return Ok(Some(Skip::StaticPie));
        }
    }
    Ok(None)
}

/// Whether the linker marked the file a (static-)PIE executable (DF_1_PIE
/// in DT_FLAGS_1): the one PIE test, shared by this classification and the
/// audit's [`super::dynamic::Kind`].
pub fn pie_flagged(dynamic: &Dynamic) -> bool {
    dynamic.get(DT_FLAGS_1).is_some_and(|f| f & DF_1_PIE != 0)
}

fn is_dynamic_section(elf: &Elf<'_>, s: &super::Shdr) -> bool {
    elf.section_name(s) == Some(b".dynamic") || s.sh_type == SHT_DYNAMIC
}

/// Whether a DT_SONAME names a dynamic loader.
pub fn is_loader_name(name: &[u8]) -> bool {
    name.starts_with(b"ld-linux")
        || name.starts_with(b"ld64.so")
        || name.starts_with(b"ld.so")
        || name.starts_with(b"ld-musl-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loader_names() {
        assert!(is_loader_name(b"ld-linux-x86-64.so.2"));
        assert!(is_loader_name(b"ld-linux-aarch64.so.1"));
        assert!(is_loader_name(b"ld64.so.2"));
        assert!(!is_loader_name(b"libld.so"));
        assert!(!is_loader_name(b"libc.so.6"));
    }

    #[test]
    fn debug_paths() {
        assert!(is_debug_path(Path::new("/nix/store/x-debug/lib/debug/.build-id/ab/cdef.debug")));
        assert!(is_debug_path(Path::new("/o/lib/debug/.build-id/ab/cdef")));
        assert!(!is_debug_path(Path::new("/o/lib/libfoo.so")));
    }
}
