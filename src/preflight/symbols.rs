//! The driver API as the files see it: the functions a `libcuda.so.1`
//! exports (its `.dynsym`), the ones a file imports from it (undefined
//! dynamic symbols, with the version each asks for), and the ones a file
//! asks for by name (`cuGetProcAddress`, `dlsym`: the names sit in its
//! read-only strings). Read through our ELF reader from a memory map: the
//! driver is never loaded (a static binary must not `dlopen` a dynamic
//! `libcuda`), and only the symbol tables and string sections are touched.

use std::collections::BTreeSet;
use std::path::Path;

use crate::devicecode::host;
use crate::dlopen::strings;
use crate::elf::{cstr, Elf, Shdr};

const SHT_DYNSYM: u32 = 11;
const SHT_GNU_VERSYM: u32 = 0x6fff_ffff;
const SHT_GNU_VERNEED: u32 = 0x6fff_fffe;

/// Why a file's symbols could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    /// Opening or mapping failed.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        reason: String,
    },
    /// Not an ELF file the reader accepts, or no dynamic symbol table.
    #[error("{path}: {reason}")]
    Elf {
        /// The file.
        path: String,
        /// What the reader said.
        reason: String,
    },
}

/// One symbol of a dynamic symbol table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sym {
    name: String,
    defined: bool,
    weak: bool,
    /// The file a version requirement names (`libcuda.so.1`) and the
    /// version, for an undefined symbol that asks for one.
    needs: Option<(String, String)>,
}

/// The functions a driver library exports: its defined dynamic symbols.
pub fn exported(path: &Path) -> Result<BTreeSet<String>, SymbolError> {
    with_elf(path, |elf| {
        Ok(dynsyms(elf)?.into_iter().filter(|s| s.defined).map(|s| s.name).collect())
    })
}

/// A driver function a file imports: its name and, when the import names
/// one, the version it asks for (`cuFoo@VER`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Import {
    /// The function.
    pub name: String,
    /// The symbol version asked of `libcuda.so.1`, if any.
    pub version: Option<String>,
    /// A weak import: the loader leaves it null when missing.
    pub weak: bool,
}

/// What one file wants of the driver.
#[derive(Debug, Clone, Default)]
pub struct Wants {
    /// Undefined dynamic symbols that `libcuda.so.1` serves: driver API
    /// names (`cu` and a capital), not bound by version to another library.
    pub imports: Vec<Import>,
    /// Driver API names in its read-only strings (tables handed to
    /// `cuGetProcAddress` or `dlsym`), when the file can ask by name.
    pub by_name: BTreeSet<String>,
}

/// What `path` wants of the driver. `needs_libcuda`: it lists
/// `libcuda.so.1` as NEEDED (its imports bind there); names asked for by
/// name are read when the file imports `cuGetProcAddress` or `dlsym`, or
/// `names_too` (it loads the driver with `dlopen`).
pub fn wants(path: &Path, needs_libcuda: bool, names_too: bool) -> Result<Wants, SymbolError> {
    with_elf(path, |elf| {
        let syms = dynsyms(elf)?;
        let mut out = Wants::default();
        let asks = names_too
            || syms
                .iter()
                .any(|s| !s.defined && (s.name == "cuGetProcAddress" || s.name == "dlsym"));
        if needs_libcuda {
            out.imports = syms
                .into_iter()
                .filter(|s| !s.defined && driver_api(&s.name))
                .filter(|s| s.needs.as_ref().is_none_or(|(file, _)| file.starts_with("libcuda.so")))
                .map(|s| Import { name: s.name, version: s.needs.map(|(_, v)| v), weak: s.weak })
                .collect();
            out.imports.sort();
            out.imports.dedup();
        }
        if asks {
            for section in strings::sections(elf) {
                names_in(&section.bytes[section.from..], &mut out.by_name);
            }
        }
        Ok(out)
    })
}

/// Whether `name` has the shape of a driver API function: `cu`, then a
/// capital letter, then letters, digits and `_` (`cuMemCreate`,
/// `cuStreamBeginCapture_v2_ptsz`). Runtime (`cuda*`), library (`cublas*`)
/// and cuDNN (`cudnn*`) names start with a lower-case letter after `cu`.
pub fn driver_api(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() > 4
        && b.starts_with(b"cu")
        && b[2].is_ascii_uppercase()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
        && !FAMILIES_NOT_DRIVER.iter().any(|p| name.starts_with(p))
}

/// `cu` + capital names that are not the driver's: NVIDIA's other
/// libraries spell their own prefixes so (cuDNN's `cuDNN`, cuTENSOR,
/// cuFile's `cuFile`), and `cuComplex.h`'s types and inline helpers
/// (`cuComplex`, `cuDoubleComplex`, `cuCadd`...) are a header's, which
/// cuSPARSE 12.5 holds as strings.
const FAMILIES_NOT_DRIVER: &[&str] = &[
    "cuDNN",
    "cuFile",
    "cuTensor",
    "cuTENSOR",
    "cuSPARSE",
    "cuBLAS",
    "cuFFT",
    "cuRAND",
    "cuSOLVER",
    "cuComplex",
    "cuDoubleComplex",
    "cuFloatComplex",
    "cuCadd",
    "cuCsub",
    "cuCmul",
    "cuCdiv",
    "cuCabs",
    "cuConj",
    "cuCreal",
    "cuCimag",
    "cuCfma",
];

/// Every NUL-terminated string of `bytes` that is a whole driver API name.
/// Searched as `\0cu` (a string's start), not `cu`: text is full of `cu`.
fn names_in(bytes: &[u8], out: &mut BTreeSet<String>) {
    let first = bytes.starts_with(b"cu").then_some(0);
    let rest = memchr::memmem::find_iter(bytes, b"\0cu").map(|at| at + 1);
    for at in first.into_iter().chain(rest) {
        let Some(end) = bytes[at..].iter().take(128).position(|&b| b == 0) else { continue };
        let Ok(name) = std::str::from_utf8(&bytes[at..at + end]) else { continue };
        if driver_api(name) {
            out.insert(name.to_string());
        }
    }
}

fn with_elf<T>(
    path: &Path,
    body: impl FnOnce(&Elf<'_>) -> Result<T, SymbolError>,
) -> Result<T, SymbolError> {
    let shown = path.display().to_string();
    let io = |e: std::io::Error| SymbolError::Io {
        path: shown.clone(),
        reason: crate::error::describe_io(&e),
    };
    let data = host::map(path).map_err(io)?;
    let elf = Elf::parse(&data)
        .map_err(|e| SymbolError::Elf { path: shown.clone(), reason: e.to_string() })?;
    body(&elf).map_err(|e| match e {
        SymbolError::Elf { reason, .. } => SymbolError::Elf { path: shown.clone(), reason },
        other => other,
    })
}

fn bad(reason: impl Into<String>) -> SymbolError {
    SymbolError::Elf { path: String::new(), reason: reason.into() }
}

/// The dynamic symbol table, decoded, each undefined symbol with the
/// version requirement `.gnu.version` and `.gnu.version_r` give it.
fn dynsyms(elf: &Elf<'_>) -> Result<Vec<Sym>, SymbolError> {
    let table = elf
        .shdrs
        .iter()
        .find(|s| s.sh_type == SHT_DYNSYM)
        .ok_or_else(|| bad("no dynamic symbol table (.dynsym)"))?;
    let names =
        section(elf, elf.shdrs.get(table.link as usize).ok_or_else(|| bad("bad .dynsym link"))?)?;
    let l = elf.layout;
    let entsize: u64 = if l.is64 { 24 } else { 16 };
    let count = table.size / entsize;
    let versym = elf.shdrs.iter().find(|s| s.sh_type == SHT_GNU_VERSYM);
    let needs = verneed(elf)?;
    let mut out = Vec::with_capacity(count as usize);
    for i in 1..count {
        let at = table.offset + i * entsize;
        let e = |x| bad(format!("{x}"));
        let name_off = l.u32(elf.data, at, "symbol").map_err(e)?;
        let (info_at, shndx_at) = if l.is64 { (at + 4, at + 6) } else { (at + 12, at + 14) };
        let info =
            elf.data.get(info_at as usize).copied().ok_or_else(|| bad("truncated symbol"))?;
        let shndx = l.u16(elf.data, shndx_at, "symbol").map_err(|x| bad(x.to_string()))?;
        let name = cstr(names.get(name_off as usize..).unwrap_or_default()).unwrap_or_default();
        if name.is_empty() {
            continue;
        }
        let version = match versym {
            Some(v) => {
                l.u16(elf.data, v.offset + i * 2, "version").map_err(|x| bad(x.to_string()))?
                    & 0x7fff
            }
            None => 0,
        };
        out.push(Sym {
            name: String::from_utf8_lossy(name).into_owned(),
            defined: shndx != 0,
            weak: info >> 4 == 2,
            needs: if shndx == 0 {
                needs
                    .iter()
                    .find(|(idx, _, _)| *idx == version)
                    .map(|(_, f, v)| (f.clone(), v.clone()))
            } else {
                None
            },
        });
    }
    Ok(out)
}

/// `.gnu.version_r`: (version index, file, version name) of each need.
fn verneed(elf: &Elf<'_>) -> Result<Vec<(u16, String, String)>, SymbolError> {
    let Some(sh) = elf.shdrs.iter().find(|s| s.sh_type == SHT_GNU_VERNEED) else {
        return Ok(Vec::new());
    };
    let strs = section(
        elf,
        elf.shdrs.get(sh.link as usize).ok_or_else(|| bad("bad .gnu.version_r link"))?,
    )?;
    let text = |off: u32| {
        String::from_utf8_lossy(
            cstr(strs.get(off as usize..).unwrap_or_default()).unwrap_or_default(),
        )
        .into_owned()
    };
    let l = elf.layout;
    let e = |x: crate::elf::ElfError| bad(x.to_string());
    let mut out = Vec::new();
    let mut at = sh.offset;
    // At most as many entries as the section header says (sh_info), so a
    // looping chain ends.
    for _ in 0..sh.info.clamp(1, 4096) {
        let cnt = l.u16(elf.data, at + 2, "verneed").map_err(e)?;
        let file = text(l.u32(elf.data, at + 4, "verneed").map_err(e)?);
        let mut aux = at + u64::from(l.u32(elf.data, at + 8, "verneed").map_err(e)?);
        for _ in 0..cnt.min(4096) {
            let other = l.u16(elf.data, aux + 6, "vernaux").map_err(e)?;
            let name = text(l.u32(elf.data, aux + 8, "vernaux").map_err(e)?);
            out.push((other & 0x7fff, file.clone(), name));
            let next = l.u32(elf.data, aux + 12, "vernaux").map_err(e)?;
            if next == 0 {
                break;
            }
            aux += u64::from(next);
        }
        let next = l.u32(elf.data, at + 12, "verneed").map_err(e)?;
        if next == 0 {
            break;
        }
        at += u64::from(next);
    }
    Ok(out)
}

fn section<'a>(elf: &Elf<'a>, sh: &Shdr) -> Result<&'a [u8], SymbolError> {
    elf.slice(sh.offset, sh.size, "section").map_err(|e| bad(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_api_names() {
        assert!(driver_api("cuMemCreate"));
        assert!(driver_api("cuStreamBeginCapture_v2_ptsz"));
        assert!(driver_api("cuInit"));
        assert!(!driver_api("cudaMalloc"));
        assert!(!driver_api("cublasCreate_v2"));
        assert!(!driver_api("cuDNN"));
        assert!(!driver_api("cuFileDriverOpen"));
        assert!(!driver_api("cuMem Create"));
        assert!(!driver_api("cuComplex"));
        assert!(!driver_api("cuDoubleComplex"));
        assert!(!driver_api("cuCaddf"));
        assert!(driver_api("cuCtxCreate_v2"));
        assert!(driver_api("cuCoredumpGetAttribute"));
    }

    #[test]
    fn names_in_strings() {
        let mut out = BTreeSet::new();
        names_in(b"\0cuMemCreate\0xcuInit\0cudaFree\0cuGraphAddNode_v2\0", &mut out);
        let got: Vec<&str> = out.iter().map(String::as_str).collect();
        assert_eq!(got, ["cuGraphAddNode_v2", "cuMemCreate"]);
        // A name at the very start of a section counts too.
        let mut out = BTreeSet::new();
        names_in(b"cuInit\0cuDriverGetVersion\0", &mut out);
        let got: Vec<&str> = out.iter().map(String::as_str).collect();
        assert_eq!(got, ["cuDriverGetVersion", "cuInit"]);
    }
}
