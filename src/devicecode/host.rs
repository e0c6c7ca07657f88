//! Finding device code in what a build produces: host ELF files (their
//! `.nv_fatbin` and `__nv_relfatbin` sections), static archives (each member
//! its own object, GNU and BSD long names), raw `.fatbin` files and bare
//! cubins.
//!
//! Host ELF files are read with the project's own reader ([`crate::elf`],
//! the one auto-add-driver-runpath patches with), once: [`HostElf`] holds
//! the parsed headers for the audit's loader facts beside the fatbin
//! sections found in them. Both classes and both byte orders are read:
//! cuobjdump 13.5 lists the `.nv_fatbin` of an ELF32 object too (measured
//! with an `objcopy -O elf32-i386` object), and a big-endian library
//! (s390x, ppc64) has no device code but loader facts worth auditing. The
//! `object` crate reads static archives. Fatbin regions are handed to
//! [`crate::fatbin::parse_region`] with their file offsets. Files are
//! memory-mapped once ([`map`]) and everything else borrows from the map.

use std::fs::File;
use std::io;
use std::path::Path;

use object::elf;

use crate::elf::ranges::Disjoint;
use crate::elf::{Elf, ElfError, Layout, SHF_ALLOC, SHF_EXECINSTR, SHT_NOBITS};
use crate::fatbin::container::parse_region_with;
use crate::fatbin::cubin::{self, CubinInfo};
use crate::fatbin::header::CONTAINER_MAGIC;
use crate::fatbin::Region;

/// Name of the section with executable device code.
pub const NV_FATBIN: &str = ".nv_fatbin";
/// Name of the section with relocatable device code (`-rdc`).
pub const NV_RELFATBIN: &str = "__nv_relfatbin";

/// Why a file or member could not be read as an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// Broken ELF structure, in the words `object` used for it before.
    #[error("malformed ELF file: {0}")]
    Elf(String),
    /// Broken ELF structure, as the project's reader words it (and
    /// auto-add-driver-runpath with it).
    #[error(transparent)]
    Header(#[from] ElfError),
    /// A table the header points to ends past the end of the file: worded
    /// as auto-add-driver-runpath words it (`elf::ElfError::Truncated`), so
    /// the two tools describe one truncated file alike.
    #[error("truncated: {what} at offset {offset:#x} runs past the end of the file ({len} bytes)")]
    Truncated {
        /// The table.
        what: &'static str,
        /// Where the header says it starts.
        offset: u64,
        /// The file's (or member's) length.
        len: u64,
    },
    /// Broken archive structure.
    #[error("malformed archive: {0}")]
    Archive(String),
    /// A thin archive's member, whose data lives in its own file.
    #[error("thin archive member: its data is in a separate file")]
    ThinMember,
    /// A fatbin section that has no bytes in the file.
    #[error("section {section} has type NOBITS: no device code bytes in the file")]
    NoBits {
        /// Section name.
        section: &'static str,
    },
    /// Fatbin sections whose bytes overlap an earlier fatbin section's:
    /// not walked (their containers would be read, and listed, once per
    /// header: 3,000 headers over 64 KiB were 2 GB).
    #[error("{count} fatbin sections overlap the bytes of an earlier one (the first at file offset {offset:#x}): each byte was read once")]
    Overlapping {
        /// How many sections were left out.
        count: usize,
        /// File offset of the first one left out.
        offset: u64,
    },
    /// A fatbin section whose bytes are outside the file.
    #[error("section {section}: {message}")]
    SectionData {
        /// Section name.
        section: &'static str,
        /// What object said.
        message: String,
    },
}

/// What a file (or an archive member) is, with its device code found.
#[derive(Debug)]
pub enum Object<'a> {
    /// A host ELF file.
    Elf(ElfObject<'a>),
    /// A static archive.
    Archive(Vec<Member<'a>>),
    /// A raw fatbin (`nvcc -fatbin`).
    Fatbin(Region<'a>),
    /// A bare cubin (`nvcc -cubin`), with what its header says.
    Cubin(Result<CubinInfo, cubin::CubinError>),
    /// Anything else: no device code.
    Other,
}

/// A host ELF file's fatbin sections.
#[derive(Debug, Default)]
pub struct ElfObject<'a> {
    /// The `.nv_fatbin` and `__nv_relfatbin` sections, in section-table order.
    pub sections: Vec<FatbinSection<'a>>,
    /// Sections that could not be read.
    pub errors: Vec<ReadError>,
    /// File ranges `[start, end)` of sections that cannot hold a fatbin the
    /// CUDA runtime reads: executable ones (host code) and those not loaded
    /// at run time (no SHF_ALLOC: symbols, debug info). The container scan
    /// skips them.
    pub no_fatbin: Vec<(u64, u64)>,
    /// File ranges of the other sections with bytes (loaded data: `.data`,
    /// `.rodata`, cuFFT's `.ldata`), fatbin sections included, except those
    /// whose bytes are in a format the toolchain defines ([`toolchain_format`]).
    pub data: Vec<(u64, u64)>,
}

/// Whether a loaded section's bytes are in a format the compiler, linker
/// or loader define, which leaves no room for a fatbin container: symbol,
/// string, hash and version tables, relocations, the dynamic table,
/// pointer arrays, unwind and exception tables, the interpreter's name.
/// The default reading does not search them (on issue 30's PyTorch tree,
/// 160 MB of the 1,082 MB of loaded data: `.rela.dyn` 44 MB, `.eh_frame`
/// 75 MB, `.dynstr` 12 MB, ...); `--scan` still does (docs/cuda-elf-inspect.md,
/// "What the default reading leaves out").
pub fn toolchain_format(sh_type: u32, name: Option<&[u8]>) -> bool {
    const TYPES: &[u32] = &[
        2,           // SHT_SYMTAB
        3,           // SHT_STRTAB (.dynstr)
        4,           // SHT_RELA
        5,           // SHT_HASH
        6,           // SHT_DYNAMIC
        9,           // SHT_REL
        11,          // SHT_DYNSYM
        14,          // SHT_INIT_ARRAY
        15,          // SHT_FINI_ARRAY
        16,          // SHT_PREINIT_ARRAY
        17,          // SHT_GROUP
        18,          // SHT_SYMTAB_SHNDX
        19,          // SHT_RELR
        0x6fff_fff6, // SHT_GNU_HASH
        0x6fff_fffd, // SHT_GNU_verdef
        0x6fff_fffe, // SHT_GNU_verneed
        0x6fff_ffff, // SHT_GNU_versym
    ];
    const NAMES: &[&[u8]] = &[b".eh_frame", b".eh_frame_hdr", b".gcc_except_table", b".interp"];
    TYPES.contains(&sh_type) || name.is_some_and(|n| NAMES.contains(&n))
}

/// One fatbin section of a host ELF file.
#[derive(Debug)]
pub struct FatbinSection<'a> {
    /// [`NV_FATBIN`] or [`NV_RELFATBIN`].
    pub name: &'static str,
    /// Index in the section table.
    pub index: usize,
    /// File offset.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// What the section holds.
    pub region: Region<'a>,
}

/// One member of a static archive.
#[derive(Debug)]
pub struct Member<'a> {
    /// The member's name (long names resolved).
    pub name: &'a [u8],
    /// The name was a BSD long name (`#1/LEN` in the header).
    pub bsd_long_name: bool,
    /// The member's data starts with the ELF magic.
    pub is_elf: bool,
    /// A member of a thin archive: its data is the file [`thin_member_path`]
    /// names, not in the archive.
    pub thin: bool,
    /// File offset of the member's data.
    pub offset: u64,
    /// The member read as an object.
    pub object: Result<Object<'a>, ReadError>,
}

impl Object<'_> {
    /// A short word for the kind of file (`elf`, `archive`, `fatbin`, `cubin`, `other`).
    pub fn format(&self) -> &'static str {
        match self {
            Object::Elf(_) => "elf",
            Object::Archive(_) => "archive",
            Object::Fatbin(_) => "fatbin",
            Object::Cubin(_) => "cubin",
            Object::Other => "other",
        }
    }
}

/// Reads `data` (a whole file) as an object.
pub fn parse(data: &[u8]) -> Result<Object<'_>, ReadError> {
    parse_with(data, &mut |_| {})
}

/// [`parse`], telling `walked` which fatbin bytes the walk is done reading
/// (see [`crate::fatbin::container::parse_region_with`]); [`Mapped::release`]
/// is the intended callback.
pub fn parse_with<'a>(
    data: &'a [u8],
    walked: &mut dyn FnMut(&'a [u8]),
) -> Result<Object<'a>, ReadError> {
    parse_at(data, 0, true, walked)
}

/// What the walk is told about the bytes it is done reading.
pub type Walked<'w, 'a> = &'w mut dyn FnMut(&'a [u8]);

fn parse_at<'a>(
    data: &'a [u8],
    base: u64,
    archives: bool,
    walked: Walked<'_, 'a>,
) -> Result<Object<'a>, ReadError> {
    if archives && (data.starts_with(b"!<arch>\n") || data.starts_with(b"!<thin>\n")) {
        return parse_archive(data, walked).map(Object::Archive);
    }
    if data.starts_with(&elf::ELFMAG) {
        if cubin::is_cubin(data) {
            return Ok(Object::Cubin(cubin::read_cubin(data)));
        }
        return Ok(Object::Elf(HostElf::parse(data, base)?.sections.read(walked)));
    }
    if data.get(..4) == Some(&CONTAINER_MAGIC.to_le_bytes()[..]) {
        return Ok(Object::Fatbin(parse_region_with(data, base, walked)));
    }
    Ok(Object::Other)
}

/// A host ELF file parsed once by the project's own reader
/// ([`crate::elf::Elf`], every class and byte order), with its fatbin
/// sections located but not yet walked: the audit reads the loader facts
/// from [`HostElf::elf`] while [`Located::read`] walks the device code.
#[derive(Debug)]
pub struct HostElf<'a> {
    /// The parsed headers; without program headers when those are damaged.
    pub elf: Elf<'a>,
    /// Why the program headers could not be read, if so: the device-code
    /// walk reads sections only (cuobjdump lists such a file), the loader
    /// facts need the segments and report it.
    pub segments: Option<ElfError>,
    /// The fatbin sections and the section ranges the container scan uses.
    pub sections: Located<'a>,
}

/// A host ELF file's fatbin sections, found, not yet walked.
#[derive(Debug)]
pub struct Located<'a> {
    /// The object, every region still empty.
    object: ElfObject<'a>,
    /// Per readable fatbin section: its index in `object.sections` and bytes.
    pending: Vec<(usize, &'a [u8])>,
    /// Some fatbin section has bytes by its header (whether or not they lie
    /// in the file).
    has_device_code: bool,
}

impl<'a> HostElf<'a> {
    /// Parses `data` (a file, or an archive member at file offset `base`):
    /// the checks `object` made before (so that a truncated or damaged
    /// file is worded as before), then [`Elf::parse_lenient`].
    pub fn parse(data: &'a [u8], base: u64) -> Result<HostElf<'a>, ReadError> {
        precheck(data)?;
        let (elf, segments) = Elf::parse_lenient(data)?;
        if !elf.shdrs.is_empty() {
            if elf.e_shstrndx() == 0 {
                return Err(ReadError::Elf("Missing ELF e_shstrndx".into()));
            }
            if elf.shstrndx().is_none() {
                return Err(ReadError::Elf("Invalid ELF e_shstrndx".into()));
            }
        }
        let sections = locate(&elf, base);
        Ok(HostElf { elf, segments, sections })
    }
}

impl<'a> Located<'a> {
    /// Whether a fatbin section has bytes by its header: the file may hold
    /// device code (the static runtime's scan is worth it).
    pub fn has_device_code(&self) -> bool {
        self.has_device_code
    }

    /// The fatbin sections, in section-table order, regions not yet walked.
    pub fn sections(&self) -> &[FatbinSection<'a>] {
        &self.object.sections
    }

    /// Walks every fatbin section's containers.
    pub fn read(mut self, walked: Walked<'_, 'a>) -> ElfObject<'a> {
        for (i, bytes) in self.pending {
            let section = &mut self.object.sections[i];
            section.region = parse_region_with(bytes, section.offset, walked);
        }
        self.object
    }
}

/// What `object` checked before the section table is read: the class, the
/// header's length, and that the whole section header table lies in the file.
fn precheck(data: &[u8]) -> Result<(), ReadError> {
    let len = data.len() as u64;
    let is64 = match data.get(4) {
        Some(2) => true,
        Some(1) => false,
        _ => return Err(ReadError::Elf("unknown ELF class".into())),
    };
    let little = match data.get(5) {
        Some(1) => true,
        Some(2) => false,
        // The reader words this one.
        _ => return Ok(()),
    };
    let l = Layout { is64, little };
    let truncated = ReadError::Truncated { what: "ELF header", offset: 0, len };
    if len < l.ehdr_size() {
        return Err(truncated);
    }
    const H: &str = "ELF header";
    let w = l.word();
    let shoff = l.word_at(data, 24 + 2 * w, H).map_err(|_| truncated.clone())?;
    let fields = 24 + 3 * w + 4;
    let shentsize = l.u16(data, fields + 6, H).map_err(|_| truncated.clone())?;
    let shnum = l.u16(data, fields + 8, H).map_err(|_| truncated.clone())?;
    let table_end = u64::from(shnum).saturating_mul(u64::from(shentsize)).saturating_add(shoff);
    if shoff != 0 && table_end > len {
        return Err(ReadError::Truncated { what: "section header table", offset: shoff, len });
    }
    Ok(())
}

/// Finds the fatbin sections and sorts every section with bytes into
/// loaded data or not (see [`ElfObject`]).
fn locate<'a>(elf: &Elf<'a>, base: u64) -> Located<'a> {
    let mut located =
        Located { object: ElfObject::default(), pending: Vec::new(), has_device_code: false };
    let fatbin_name = |section: &crate::elf::Shdr| match elf.section_name(section) {
        Some(n) if n == NV_FATBIN.as_bytes() => Some(NV_FATBIN),
        Some(n) if n == NV_RELFATBIN.as_bytes() => Some(NV_RELFATBIN),
        _ => None,
    };
    // Fatbin sections with bytes, each byte walked once: the first section
    // over some bytes is walked, any later one sharing them is left out.
    let walked = Disjoint::new(elf.shdrs.iter().enumerate().filter_map(|(index, s)| {
        let fatbin = s.sh_type != SHT_NOBITS && fatbin_name(s).is_some();
        fatbin.then_some((s.offset, s.offset.saturating_add(s.size), index))
    }));
    let mut kept = vec![false; elf.shdrs.len()];
    for p in walked.pieces().iter().filter(|p| p.start == p.range_start) {
        kept[p.value] = true;
    }
    let mut left_out: Option<(usize, u64)> = None;
    let object = &mut located.object;
    for (index, section) in elf.shdrs.iter().enumerate() {
        let loaded_data = section.flags & SHF_EXECINSTR == 0 && section.flags & SHF_ALLOC != 0;
        let nobits = section.sh_type == SHT_NOBITS;
        if !nobits {
            let start = base.saturating_add(section.offset);
            let range = (start, start.saturating_add(section.size));
            if loaded_data {
                if !toolchain_format(section.sh_type, elf.section_name(section)) {
                    object.data.push(range);
                }
            } else {
                object.no_fatbin.push(range);
            }
        }
        let Some(name) = fatbin_name(section) else { continue };
        let offset = base.saturating_add(section.offset);
        if !nobits && section.size > 0 && !kept[index] {
            let (count, _) = left_out.get_or_insert((0, offset));
            *count += 1;
            continue;
        }
        let at = |size| FatbinSection { name, index, offset, size, region: Region::default() };
        if nobits {
            // A split debug file (`objcopy --only-keep-debug`) keeps the
            // section header without bytes: listed as an empty, damaged
            // region, as cuobjdump does ("Invalid fatbin header").
            object.errors.push(ReadError::NoBits { section: name });
            object.sections.push(at(0));
            continue;
        }
        located.has_device_code |= section.size > 0;
        match elf.slice(section.offset, section.size, "section") {
            Ok(bytes) => {
                located.pending.push((object.sections.len(), bytes));
                object.sections.push(at(section.size));
            }
            Err(_) => object.errors.push(ReadError::SectionData {
                section: name,
                message: "Invalid ELF section size or offset".into(),
            }),
        }
    }
    if let Some((count, offset)) = left_out {
        located.object.errors.push(ReadError::Overlapping { count, offset });
    }
    located
}

fn parse_archive<'a>(data: &'a [u8], walked: Walked<'_, 'a>) -> Result<Vec<Member<'a>>, ReadError> {
    let archive = object::read::archive::ArchiveFile::parse(data)
        .map_err(|e| ReadError::Archive(e.to_string()))?;
    let mut members = Vec::new();
    for member in archive.members() {
        let member = member.map_err(|e| ReadError::Archive(e.to_string()))?;
        let (offset, _) = member.file_range();
        let thin = member.is_thin();
        let bytes = if thin { None } else { member.data(data).ok() };
        let object = match (thin, bytes) {
            (true, _) => Err(ReadError::ThinMember),
            (false, Some(bytes)) => parse_at(bytes, offset, false, walked),
            (false, None) => Err(ReadError::Archive("member data outside the file".into())),
        };
        let bsd_long_name = member.header().is_some_and(|h| h.name.starts_with(b"#1/"));
        let is_elf = bytes.is_some_and(|b| b.starts_with(&elf::ELFMAG));
        members.push(Member { name: member.name(), offset, object, bsd_long_name, is_elf, thin });
    }
    Ok(members)
}

/// Reads the bytes of one archive member (a thin archive's member file) as
/// an object; nested archives are not entered.
pub fn parse_member(data: &[u8]) -> Result<Object<'_>, ReadError> {
    parse_at(data, 0, false, &mut |_| {})
}

/// Where a thin archive's member lives: its name, relative to the archive's
/// folder unless absolute (as GNU ar and cuobjdump resolve it); for an
/// archive a cache or NAR unpacked, inside its store path or an error
/// ([`crate::store::confine::thin_member`]: a hostile archive cannot name host files).
pub fn thin_member_path(archive: &Path, name: &[u8]) -> io::Result<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if let Some(confined) = crate::store::confine::thin_member(archive, name) {
        return confined;
    }
    let name = Path::new(std::ffi::OsStr::from_bytes(name));
    Ok(archive.parent().unwrap_or(Path::new("")).join(name))
}

pub use crate::fs::mapped::{map_file, Mapped};

/// Opens `path` for reading if it is a regular file (links followed), and
/// only then: the path may come from a RUNPATH and a NEEDED name or a thin
/// archive's member name, that is from a stranger, and opening a device is
/// an action (`/dev/watchdog` arms a reboot, a tty becomes the controlling
/// terminal, a FIFO waits for a writer). So the path is `stat`ed first and
/// anything else is refused unopened, naming what it is; the open itself
/// carries `O_NOCTTY | O_NONBLOCK` for a node swapped in between, and the
/// descriptor is checked again.
pub fn open_regular(path: &Path) -> io::Result<File> {
    check_regular(&std::fs::metadata(path)?)?;
    open_checked(path, 0)
}

/// Opens a file that a walk of a folder has just seen as a regular file
/// (its directory entry's type, links never followed): [`open_regular`]
/// without the `stat` before the open, which would only repeat what the
/// walk read (one path lookup a file, not two: 12,000 Python files of a
/// PyTorch tree cost a third less). The same guards hold for anything
/// swapped in since: `O_NOFOLLOW` refuses a link, `O_NOCTTY | O_NONBLOCK`
/// make a node's open harmless, and the descriptor is checked.
pub fn open_walked(path: &Path) -> io::Result<File> {
    open_checked(path, libc::O_NOFOLLOW)
}

fn open_checked(path: &Path, flags: i32) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | flags)
        .open(path)?;
    check_regular(&file.metadata()?)?;
    Ok(file)
}

/// `EISDIR` for a folder, an error naming the kind of anything else that is
/// not a regular file.
pub fn check_regular(meta: &std::fs::Metadata) -> io::Result<()> {
    if meta.is_dir() {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    }
    match not_regular(meta) {
        Some(kind) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({kind}), not opened"),
        )),
        None => Ok(()),
    }
}

/// What a file that is not a regular file is (`a FIFO`, `a character
/// device`...), or `None` for a regular file.
pub fn not_regular(meta: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    Some(if t.is_file() {
        return None;
    } else if t.is_dir() {
        "a folder"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    })
}

/// Maps `path` read-only. Anything but a regular file (a FIFO, a socket, a
/// device named on the command line or by a thin archive) is an error,
/// never opened ([`open_regular`]).
pub fn map(path: &Path) -> io::Result<Mapped> {
    let file = open_regular(path)?;
    map_file(&file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_foreign_inputs_are_classified() {
        assert!(matches!(parse(b""), Ok(Object::Other)));
        assert!(matches!(parse(b"hello world, no magic"), Ok(Object::Other)));
        let mut elf32 = elf::ELFMAG.to_vec();
        elf32.extend([1, 1, 1]);
        elf32.resize(52, 0);
        assert!(matches!(parse(&elf32), Ok(Object::Elf(o)) if o.sections.is_empty()));
        // Big-endian: read like any other (no sections here, so no code).
        let mut be = elf::ELFMAG.to_vec();
        be.extend([2, 2, 1]);
        be.resize(64, 0);
        assert!(matches!(parse(&be), Ok(Object::Elf(o)) if o.sections.is_empty()));
        // Too short for its class's header: worded as before.
        assert_eq!(
            parse(&be[..40]).unwrap_err().to_string(),
            "truncated: ELF header at offset 0x0 runs past the end of the file (40 bytes)"
        );
    }
}
