//! Dynamic facts: what the loader will do with an ELF file, read from the
//! one parsed [`Elf`]: its kind, interpreter, NEEDED libraries, SONAME,
//! RUNPATH and RPATH. Headers and the dynamic string table only, through
//! the same bounds-checked reader the RUNPATH patcher trusts, for every
//! machine, class and byte order it patches.

use serde::Serialize;

use super::machine::Target;
use super::{
    cstr, Elf, ElfError, DT_NEEDED, DT_RPATH, DT_RUNPATH, DT_SONAME, ET_DYN, ET_EXEC, ET_REL,
    PT_DYNAMIC, PT_INTERP,
};

/// Sonames glibc provides next to its loader.
pub const C_RUNTIME: &[&str] = &[
    "libc.so.6",
    "libm.so.6",
    "libmvec.so.1",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "libutil.so.1",
    "libresolv.so.2",
    "libanl.so.1",
    "libnsl.so.1",
    "libBrokenLocale.so.1",
    "libc_malloc_debug.so.0",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
    "ld-linux.so.2",
];

/// What kind of file the loader sees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// ET_EXEC.
    Executable,
    /// ET_DYN marked as a program. A PIE program is ET_DYN like a library;
    /// a maintainer reads "program", so it is told apart: DF_1_PIE
    /// ([`super::classify::pie_flagged`]), or (linkers older than that
    /// flag) an interpreter and no soname.
    PieExecutable,
    /// ET_DYN, a library.
    SharedObject,
    /// ET_REL (`.o`).
    Relocatable,
    /// Any other type.
    #[default]
    Other,
}

/// The loader-relevant facts of one ELF file.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DynamicFacts {
    /// What kind of file.
    pub kind: Kind,
    /// ELFCLASS64.
    pub is64: bool,
    /// ELFDATA2LSB. Not in reports (which name the machine elsewhere); it
    /// decides which machine's libraries the file can load.
    #[serde(skip)]
    pub little: bool,
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
}

impl DynamicFacts {
    /// The search list the loader uses for this file's own NEEDED entries:
    /// RUNPATH when present, else RPATH.
    pub fn search_path(&self) -> Option<&str> {
        self.runpath.as_deref().or(self.rpath.as_deref())
    }

    /// The machine, class and byte order the file is for.
    pub fn target(&self) -> Target {
        Target { machine: self.machine, is64: self.is64, little: self.little }
    }
}

/// Reads the facts of a parsed file.
pub fn facts(elf: &Elf<'_>) -> Result<DynamicFacts, ElfError> {
    let mut f = DynamicFacts {
        kind: match elf.e_type {
            ET_EXEC => Kind::Executable,
            ET_DYN => Kind::SharedObject,
            ET_REL => Kind::Relocatable,
            _ => Kind::Other,
        },
        is64: elf.layout.is64,
        little: elf.layout.little,
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
    let mut pie_flag = false;
    if let Some(dynamic) = if split_debug { None } else { elf.dynamic()? } {
        if !dynamic.entries.is_empty() {
            f.dynamic = true;
            pie_flag = super::classify::pie_flagged(&dynamic);
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
                    _ => {}
                }
            }
        }
    }
    if f.kind == Kind::SharedObject && (pie_flag || (f.interpreter.is_some() && f.soname.is_none()))
    {
        f.kind = Kind::PieExecutable;
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialise_as_before() {
        let words: Vec<String> = [
            Kind::Executable,
            Kind::PieExecutable,
            Kind::SharedObject,
            Kind::Relocatable,
            Kind::Other,
        ]
        .iter()
        .map(|k| serde_json::to_string(k).unwrap())
        .collect();
        assert_eq!(
            words,
            [
                "\"executable\"",
                "\"pie-executable\"",
                "\"shared-object\"",
                "\"relocatable\"",
                "\"other\""
            ]
        );
    }
}
