//! A look inside decompressed payloads (deep mode) and bare cubin files.
//!
//! Cubins are ELF files with `e_machine` 190 (EM_CUDA) in one of two ABIs
//! (`docs/fatbin-format.md`, "Inside a cubin"):
//! - old (`EI_OSABI` 0x33, ABI version 7): SM in `e_flags & 0xff`, virtual SM
//!   in bits 16..24, `a` in bit 0x800;
//! - new (0x41, ABI version 8; every CUDA 13 cubin): SM in bits 8..16; `a` is
//!   bit 0x8 in CUDA 12.8/12.9 cubins and, in CUDA 13, attribute 9 of the
//!   `.nv.compat` section (measured: the only difference between an sm_90 and
//!   an sm_90a cubin of the same source).
//!
//! Kernels are `STT_FUNC` symbols with `st_other & 0x10`; a cubin without any
//! is an nvlink link stub, which must never count as code for its arch.

use object::elf;
use object::read::elf::{FileHeader, SectionHeader, Sym};
use object::LittleEndian as LE;

use super::{Arch, Variant};

/// EM_CUDA.
pub const EM_CUDA: u16 = 190;
/// `EI_OSABI` of the old cubin ABI.
pub const OSABI_OLD: u8 = 0x33;
/// `EI_OSABI` of the new cubin ABI.
pub const OSABI_NEW: u8 = 0x41;

/// What the header and symbols of a cubin say.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CubinInfo {
    /// The real architecture (`f` is never recorded in a cubin).
    pub arch: Arch,
    /// `EI_OSABI` (0x33 old ABI, 0x41 new ABI).
    pub os_abi: u8,
    /// `EI_ABIVERSION`.
    pub abi_version: u8,
    /// Raw `e_flags`.
    pub e_flags: u32,
    /// Kernel (entry function) names, in symbol-table order.
    pub kernels: Vec<String>,
}

impl CubinInfo {
    /// An nvlink link stub: a cubin with no kernels.
    pub fn is_link_stub(&self) -> bool {
        self.kernels.is_empty()
    }
}

/// Why a cubin could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CubinError {
    /// The ELF structure is broken (what `object` said).
    #[error("cubin: {0}")]
    Elf(String),
    /// Not a little-endian ELF file.
    #[error("cubin: not little endian")]
    BigEndian,
    /// `e_machine` is not EM_CUDA.
    #[error("cubin: e_machine is not EM_CUDA")]
    NotCuda,
}

/// Whether `data` starts like a 64-bit little-endian cubin.
pub fn is_cubin(data: &[u8]) -> bool {
    data.get(..4) == Some(&elf::ELFMAG[..]) && data.get(18..20) == Some(&EM_CUDA.to_le_bytes()[..])
}

/// Reads a cubin's header, `.nv.compat` and symbol table.
pub fn read_cubin(data: &[u8]) -> Result<CubinInfo, CubinError> {
    let elf_err = |e: object::read::Error| CubinError::Elf(e.to_string());
    let header = elf::FileHeader64::<LE>::parse(data).map_err(elf_err)?;
    let ident = header.e_ident();
    if ident.data != elf::ELFDATA2LSB {
        return Err(CubinError::BigEndian);
    }
    if header.e_machine(LE).0 != EM_CUDA {
        return Err(CubinError::NotCuda);
    }
    let flags = header.e_flags(LE).0;
    let os_abi = ident.os_abi.0;
    let sections = header.sections(LE, data).map_err(elf_err)?;
    let arch = if os_abi == OSABI_OLD {
        Arch {
            sm: flags & 0xff,
            variant: if flags & 0x800 != 0 { Variant::Arch } else { Variant::Base },
        }
    } else {
        let compat = sections
            .section_by_name(LE, b".nv.compat")
            .and_then(|(_, s)| s.data(LE, data).ok())
            .and_then(|d| compat_attribute(d, 9))
            .is_some_and(|v| v == 1);
        let specific = flags & 0x8 != 0 || compat;
        Arch {
            sm: (flags >> 8) & 0xff,
            variant: if specific { Variant::Arch } else { Variant::Base },
        }
    };
    let mut kernels = Vec::new();
    if let Ok(symbols) = sections.symbols(LE, data, elf::SHT_SYMTAB) {
        for sym in symbols.symbols() {
            if sym.st_type() == elf::STT_FUNC && sym.st_other().0 & 0x10 != 0 {
                let name = symbols.symbol_name(LE, sym).unwrap_or(b"?");
                kernels.push(String::from_utf8_lossy(name).into_owned());
            }
        }
    }
    Ok(CubinInfo { arch, os_abi, abi_version: ident.abi_version, e_flags: flags, kernels })
}

/// The value of attribute `attr` in a `.nv.compat` section: records of
/// `(u8 format, u8 attribute, ...)` where format 1 has no value, 2 a byte,
/// 3 a u16, and 4 a u16 length followed by that many bytes.
fn compat_attribute(data: &[u8], attr: u8) -> Option<u16> {
    let mut at = 0usize;
    while let (Some(&format), Some(&id)) = (data.get(at), data.get(at + 1)) {
        let value = data.get(at + 2..at + 4).map(|b| u16::from_le_bytes([b[0], b[1]]));
        let value = value?;
        match format {
            1 => {
                at += 4;
            }
            2 | 3 => {
                if id == attr {
                    return Some(if format == 2 { value & 0xff } else { value });
                }
                at += 4;
            }
            4 => at = at.checked_add(4)?.checked_add(usize::from(value))?,
            _ => return None,
        }
    }
    None
}

/// What the header lines of a PTX text say.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PtxInfo {
    /// The `.version` directive (`9.0`).
    pub version: Option<String>,
    /// The `.target` directive's first word (`sm_90a`).
    pub target: Option<String>,
    /// Names of `.entry` functions.
    pub kernels: Vec<String>,
}

/// Reads the `.version`, `.target` and `.entry` directives of a PTX text.
pub fn read_ptx(text: &[u8]) -> PtxInfo {
    let mut info = PtxInfo::default();
    for line in text.split(|&b| b == b'\n') {
        let line = String::from_utf8_lossy(line);
        let mut words = line.split(|c: char| c.is_whitespace() || c == ',' || c == '(');
        let first = words.by_ref().find(|w| !w.is_empty());
        let next = words.find(|w| !w.is_empty()).map(str::to_string);
        match first {
            Some(".version") if info.version.is_none() => info.version = next,
            Some(".target") if info.target.is_none() => info.target = next,
            Some(".entry") => info.kernels.extend(next),
            Some(".visible" | ".weak") if line.contains(".entry") => {
                let after = line.split(".entry").nth(1).unwrap_or("");
                if let Some(n) =
                    after.split(|c: char| c.is_whitespace() || c == '(').find(|w| !w.is_empty())
                {
                    info.kernels.push(n.to_string());
                }
            }
            _ => {}
        }
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_directives_are_read() {
        let text =
            b"//\n.version 9.0\n.target sm_90a\n.address_size 64\n\n.visible .entry _Z3addPf(\n";
        let info = read_ptx(text);
        assert_eq!(info.version.as_deref(), Some("9.0"));
        assert_eq!(info.target.as_deref(), Some("sm_90a"));
        assert_eq!(info.kernels, vec!["_Z3addPf".to_string()]);
    }

    #[test]
    fn compat_attributes_are_walked() {
        let data = [2, 9, 1, 0, 4, 11, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 14, 0x40, 4];
        assert_eq!(compat_attribute(&data, 9), Some(1));
        assert_eq!(compat_attribute(&data, 14), Some(0x440));
        assert_eq!(compat_attribute(&data, 5), None);
        assert_eq!(compat_attribute(&[4, 1, 0xff, 0xff], 9), None);
    }
}
