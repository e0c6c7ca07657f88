//! A library's own release, read from its file without loading it
//! (docs/dlopen.md, "Libraries of the caller's own release"): a family
//! whose members must be of one release (cuDNN's sub-libraries) is checked
//! by comparing the caller's release with the one of the file the loader
//! finds. Two sources, most trusted first:
//!
//! 1. a version object the library exports (`markers.tsv`: cuDNN's graph,
//!    ops and adv libraries export `cudnn_*_version`), found through the
//!    file's own hash table ([`crate::elf::symbol`]): a few pages read,
//!    never the whole file;
//! 2. the file's real name when it carries the full version after its
//!    soname (`libcudnn.so.9.19.0`, as NVIDIA's Debian packages and conda's
//!    name the file the `.so.9` link points to).
//!
//! Otherwise the release is unknown (a wheel's `libcudnn.so.9` holds its
//! release only as instruction operands): never assumed to be the same.

use std::path::Path;
use std::sync::OnceLock;

use serde::Serialize;

use crate::elf::Elf;

/// Where a release was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "name", rename_all = "kebab-case")]
pub enum From {
    /// This exported version object.
    Symbol(String),
    /// The file's real name.
    FileName(String),
}

/// A library's release (`9.19.0`) and where it was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Release {
    /// major.minor.patch.
    pub version: String,
    /// Where it was read.
    pub from: From,
}

impl Release {
    /// As a message says where it was read: `its symbol cudnn_graph_version`,
    /// `its file name libcudnn.so.9.19.0`.
    pub fn describe_source(&self) -> String {
        match &self.from {
            From::Symbol(s) => format!("its exported {s}"),
            From::FileName(n) => format!("its file name {n}"),
        }
    }

    /// Whether two releases are one: major, minor and patch equal.
    pub fn same(&self, other: &Release) -> bool {
        let three =
            |r: &Release| r.version.split('.').take(3).map(str::to_string).collect::<Vec<_>>();
        three(self) == three(other)
    }
}

/// One row of `markers.tsv`.
#[derive(Debug, Clone)]
pub struct Marker {
    /// The SONAME, `*` globs.
    pub library: &'static str,
    /// The exported version object.
    pub symbol: &'static str,
    /// Where the fact comes from.
    pub source: &'static str,
}

const MARKERS: &str = include_str!("markers.tsv");

fn parse_markers() -> Result<Vec<Marker>, String> {
    MARKERS
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(i, l)| match l.split('\t').collect::<Vec<_>>()[..] {
            [library, symbol, source] if !library.is_empty() && !symbol.is_empty() => {
                Ok(Marker { library, symbol, source })
            }
            _ => Err(format!("markers.tsv line {}: expected 3 columns: {l}", i + 1)),
        })
        .collect()
}

/// Every row of `markers.tsv` (empty if it does not parse, which the unit
/// tests forbid).
pub fn markers() -> &'static [Marker] {
    static T: OnceLock<Vec<Marker>> = OnceLock::new();
    T.get_or_init(|| parse_markers().unwrap_or_default())
}

/// The release of a parsed file whose SONAME is `soname` and whose real
/// file name is `file_name`; `None` when neither source says it.
pub fn of_elf(elf: &Elf<'_>, soname: Option<&str>, file_name: &str) -> Option<Release> {
    let rows = soname.map(|s| markers().iter().filter(|m| super::table::glob(m.library, s)));
    for m in rows.into_iter().flatten() {
        if let Some(version) = symbol_version(elf, m.symbol) {
            return Some(Release { version, from: From::Symbol(m.symbol.to_string()) });
        }
    }
    of_file_name(soname, file_name)
}

/// The version object `name`: 4 bytes, `(major << 16) | (minor << 8) | patch`.
fn symbol_version(elf: &Elf<'_>, name: &str) -> Option<String> {
    let sym = crate::elf::symbol::lookup(elf, name.as_bytes()).ok()??;
    if sym.size != 4 {
        return None;
    }
    let at = elf.vaddr_to_offset(sym.value, 4)?;
    let v = elf.layout.u32(elf.data, at, "version object").ok()?;
    (v >> 24 == 0 && v != 0).then(|| format!("{}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff))
}

/// The full version a real file name carries after its soname
/// (`libcudnn.so.9.19.0` of soname `libcudnn.so.9`): at least
/// major.minor.patch, the first the soname's own major.
fn of_file_name(soname: Option<&str>, file_name: &str) -> Option<Release> {
    let v = super::version_of_file_name(file_name)?;
    if v.split('.').count() < 3 {
        return None;
    }
    if let Some(s) = soname {
        let (stem, major) = s.split_once(".so.")?;
        let (name_stem, _) = file_name.split_once(".so.")?;
        if stem != name_stem || v.split('.').next() != Some(major.split('.').next()?) {
            return None;
        }
    }
    Some(Release { version: v.to_string(), from: From::FileName(file_name.to_string()) })
}

/// The release of the library at `path` (links followed: the real file's
/// name counts), read through a map: only the pages the headers, the
/// hash lookup and the version object touch are read.
pub fn of_path(path: &Path) -> Option<Release> {
    let real = std::fs::canonicalize(path).ok()?;
    let name = real.file_name()?.to_string_lossy().into_owned();
    // Only a regular file is opened (a path a RUNPATH names may be a device).
    if !std::fs::metadata(&real).ok()?.is_file() {
        return None;
    }
    let file = std::fs::File::open(&real).ok()?;
    // SAFETY: read-only map of a file we only read; a file truncated
    // meanwhile can fault, as for every mapped read of the audit.
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let elf = Elf::parse(&map).ok()?;
    let soname = crate::elf::dynamic::facts(&elf).ok()?.soname;
    of_elf(&elf, soname.as_deref(), &name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_parse() {
        let m = parse_markers().unwrap();
        assert!(m.iter().any(|m| m.symbol == "cudnn_graph_version"));
    }

    #[test]
    fn file_names_carry_a_release_only_after_their_soname() {
        let r = of_file_name(Some("libcudnn.so.9"), "libcudnn.so.9.19.0").unwrap();
        assert_eq!(r.version, "9.19.0");
        assert!(of_file_name(Some("libcudnn.so.9"), "libcudnn.so.9").is_none());
        assert!(of_file_name(Some("libcudnn.so.9"), "libcudnn.so.9.19").is_none());
        assert!(of_file_name(Some("libcudnn.so.9"), "libcudnn.so.8.9.7").is_none());
        assert!(of_file_name(Some("libcudnn.so.9"), "libother.so.9.19.0").is_none());
        let a = Release { version: "9.19.0".into(), from: From::Symbol("x".into()) };
        let b = Release { version: "9.19.0.56".into(), from: From::FileName("y".into()) };
        let c = Release { version: "9.14.0".into(), from: From::FileName("y".into()) };
        assert!(a.same(&b) && !a.same(&c));
    }
}
