//! A small, bounds-checked reader of the ELF structures RUNPATH patching needs.
//!
//! Why our own reader and not only `object`: the writer must know the exact
//! file offset of every field it changes (program headers, `.dynamic` slots,
//! section headers), for both classes and both byte orders, and must re-encode
//! them. `object` reads all of this too, and the verifier in [`patch`] uses it
//! as an independent second opinion on the result.
//!
//! Every value read from the file is treated as hostile: all access goes
//! through [`Layout`]'s checked getters, arithmetic is checked, and a
//! malformed file is an [`ElfError`], never a panic.

pub mod classify;
pub mod dynamic;
pub mod machine;
pub mod patch;
pub mod ranges;
pub mod runpath;
pub mod symbol;

/// `\x7fELF`, the first four bytes of every ELF file.
pub const MAGIC: &[u8; 4] = b"\x7fELF";

/// Program header type of an unused entry.
pub const PT_NULL: u32 = 0;
/// Program header type of a loadable segment.
pub const PT_LOAD: u32 = 1;
/// Program header type of the dynamic segment.
pub const PT_DYNAMIC: u32 = 2;
/// Program header type of the interpreter path.
pub const PT_INTERP: u32 = 3;
/// Program header type of a note segment.
pub const PT_NOTE: u32 = 4;
/// Program header type of the program header table itself.
pub const PT_PHDR: u32 = 6;
/// Program header type of the GNU property note.
pub const PT_GNU_PROPERTY: u32 = 0x6474_e553;
/// Segment flag: readable.
pub const PF_R: u32 = 4;
/// Segment flag: writable.
pub const PF_W: u32 = 2;

/// Section flag: occupies memory at run time.
pub const SHF_ALLOC: u64 = 2;
/// Section flag: executable instructions.
pub const SHF_EXECINSTR: u64 = 4;

/// Section type of a string table.
pub const SHT_STRTAB: u32 = 3;
/// Section type of the dynamic section.
pub const SHT_DYNAMIC: u32 = 6;
/// Section type of a section without file bytes.
pub const SHT_NOBITS: u32 = 8;

/// Dynamic tag: end of the array.
pub const DT_NULL: i64 = 0;
/// Dynamic tag: a needed library.
pub const DT_NEEDED: i64 = 1;
/// Dynamic tag: address of the string table.
pub const DT_STRTAB: i64 = 5;
/// Dynamic tag: size of the string table.
pub const DT_STRSZ: i64 = 10;
/// Dynamic tag: the shared object's name.
pub const DT_SONAME: i64 = 14;
/// Dynamic tag: the legacy search path (transitive, before `LD_LIBRARY_PATH`).
pub const DT_RPATH: i64 = 15;
/// Dynamic tag: the debugger's hook (executables only).
pub const DT_DEBUG: i64 = 21;
/// Dynamic tag: the search path (after `LD_LIBRARY_PATH`, not transitive).
pub const DT_RUNPATH: i64 = 29;
/// Dynamic tag: more flags.
pub const DT_FLAGS_1: i64 = 0x6fff_fffb;
/// `DT_FLAGS_1` bit set by the linker for (static-)PIE executables.
pub const DF_1_PIE: u64 = 0x0800_0000;

/// Object file type: relocatable (`.o`).
pub const ET_REL: u16 = 1;
/// Object file type: fixed-address executable.
pub const ET_EXEC: u16 = 2;
/// Object file type: shared object or PIE.
pub const ET_DYN: u16 = 3;

/// Machine: NVIDIA CUDA (a cubin).
pub const EM_CUDA: u16 = 190;

/// Dynamic tags whose value is an offset into the dynamic string table.
pub const STRING_TAGS: &[i64] = &[
    DT_NEEDED,
    DT_SONAME,
    DT_RPATH,
    DT_RUNPATH,
    0x7fff_fffd, // DT_AUXILIARY
    0x7fff_ffff, // DT_FILTER
    0x6fff_fefa, // DT_CONFIG
    0x6fff_fefb, // DT_DEPAUDIT
    0x6fff_fefc, // DT_AUDIT
];

/// Why an ELF file cannot be read (or written back) safely.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    /// The file ends before a structure it declares.
    #[error("truncated: {what} at offset {offset:#x} runs past the end of the file ({len} bytes)")]
    Truncated {
        /// Which structure.
        what: &'static str,
        /// Where it starts.
        offset: u64,
        /// The file length.
        len: u64,
    },
    /// A field holds a value no valid file has.
    #[error("corrupt: {0}")]
    Corrupt(String),
    /// A valid file whose layout the patcher does not handle.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The result failed the re-parse check; the original is left alone.
    #[error("verification of the patched file failed: {0}")]
    Verify(String),
    /// Any of the above, in a file for another machine than this program's:
    /// the message names the machine (an unknown one by its number).
    #[error("{source} (an ELF file for {target})")]
    ForMachine {
        /// The error.
        source: Box<ElfError>,
        /// [`machine::Target::describe`].
        target: String,
    },
}

/// Class and byte order: how to decode and encode fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// ELFCLASS64 (else ELFCLASS32).
    pub is64: bool,
    /// ELFDATA2LSB (else ELFDATA2MSB).
    pub little: bool,
}

impl Layout {
    /// Size of the ELF header.
    pub fn ehdr_size(self) -> u64 {
        if self.is64 {
            64
        } else {
            52
        }
    }
    /// Size of one program header.
    pub fn phdr_size(self) -> u64 {
        if self.is64 {
            56
        } else {
            32
        }
    }
    /// Size of one section header.
    pub fn shdr_size(self) -> u64 {
        if self.is64 {
            64
        } else {
            40
        }
    }
    /// Size of one dynamic entry.
    pub fn dyn_size(self) -> u64 {
        if self.is64 {
            16
        } else {
            8
        }
    }
    /// Size of an address or offset field.
    pub fn word(self) -> u64 {
        if self.is64 {
            8
        } else {
            4
        }
    }

    fn bytes<const N: usize>(
        self,
        data: &[u8],
        at: u64,
        what: &'static str,
    ) -> Result<[u8; N], ElfError> {
        let start = usize::try_from(at).ok();
        start
            .and_then(|s| data.get(s..s.checked_add(N)?))
            .and_then(|b| b.try_into().ok())
            .ok_or(ElfError::Truncated { what, offset: at, len: data.len() as u64 })
    }

    /// Reads a u16.
    pub fn u16(self, data: &[u8], at: u64, what: &'static str) -> Result<u16, ElfError> {
        let b = self.bytes::<2>(data, at, what)?;
        Ok(if self.little { u16::from_le_bytes(b) } else { u16::from_be_bytes(b) })
    }
    /// Reads a u32.
    pub fn u32(self, data: &[u8], at: u64, what: &'static str) -> Result<u32, ElfError> {
        let b = self.bytes::<4>(data, at, what)?;
        Ok(if self.little { u32::from_le_bytes(b) } else { u32::from_be_bytes(b) })
    }
    /// Reads a u64.
    pub fn u64(self, data: &[u8], at: u64, what: &'static str) -> Result<u64, ElfError> {
        let b = self.bytes::<8>(data, at, what)?;
        Ok(if self.little { u64::from_le_bytes(b) } else { u64::from_be_bytes(b) })
    }
    /// Reads an address/offset-sized field (4 or 8 bytes).
    pub fn word_at(self, data: &[u8], at: u64, what: &'static str) -> Result<u64, ElfError> {
        if self.is64 {
            self.u64(data, at, what)
        } else {
            self.u32(data, at, what).map(u64::from)
        }
    }

    /// Encodes a u16.
    pub fn put_u16(self, out: &mut Vec<u8>, v: u16) {
        out.extend_from_slice(&if self.little { v.to_le_bytes() } else { v.to_be_bytes() });
    }
    /// Encodes a u32.
    pub fn put_u32(self, out: &mut Vec<u8>, v: u32) {
        out.extend_from_slice(&if self.little { v.to_le_bytes() } else { v.to_be_bytes() });
    }
    /// Encodes a word (4 or 8 bytes); the caller has checked that it fits.
    pub fn put_word(self, out: &mut Vec<u8>, v: u64) {
        if self.is64 {
            out.extend_from_slice(&if self.little { v.to_le_bytes() } else { v.to_be_bytes() });
        } else {
            let v = v as u32;
            out.extend_from_slice(&if self.little { v.to_le_bytes() } else { v.to_be_bytes() });
        }
    }
    /// Largest value a word field can hold.
    pub fn word_max(self) -> u64 {
        if self.is64 {
            u64::MAX
        } else {
            u64::from(u32::MAX)
        }
    }
}

/// One program header, widened to 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phdr {
    /// `p_type`.
    pub p_type: u32,
    /// `p_flags`.
    pub flags: u32,
    /// `p_offset`.
    pub offset: u64,
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_paddr`.
    pub paddr: u64,
    /// `p_filesz`.
    pub filesz: u64,
    /// `p_memsz`.
    pub memsz: u64,
    /// `p_align`.
    pub align: u64,
}

impl Phdr {
    /// Decodes the header at `at`.
    pub fn read(l: Layout, d: &[u8], at: u64) -> Result<Phdr, ElfError> {
        const W: &str = "program header";
        let o = |n: u64| at.saturating_add(n);
        Ok(if l.is64 {
            Phdr {
                p_type: l.u32(d, at, W)?,
                flags: l.u32(d, o(4), W)?,
                offset: l.u64(d, o(8), W)?,
                vaddr: l.u64(d, o(16), W)?,
                paddr: l.u64(d, o(24), W)?,
                filesz: l.u64(d, o(32), W)?,
                memsz: l.u64(d, o(40), W)?,
                align: l.u64(d, o(48), W)?,
            }
        } else {
            Phdr {
                p_type: l.u32(d, at, W)?,
                offset: l.u32(d, o(4), W)?.into(),
                vaddr: l.u32(d, o(8), W)?.into(),
                paddr: l.u32(d, o(12), W)?.into(),
                filesz: l.u32(d, o(16), W)?.into(),
                memsz: l.u32(d, o(20), W)?.into(),
                flags: l.u32(d, o(24), W)?,
                align: l.u32(d, o(28), W)?.into(),
            }
        })
    }

    /// Encodes the header.
    pub fn write(&self, l: Layout, out: &mut Vec<u8>) {
        l.put_u32(out, self.p_type);
        if l.is64 {
            l.put_u32(out, self.flags);
        }
        l.put_word(out, self.offset);
        l.put_word(out, self.vaddr);
        l.put_word(out, self.paddr);
        l.put_word(out, self.filesz);
        l.put_word(out, self.memsz);
        if !l.is64 {
            l.put_u32(out, self.flags);
        }
        l.put_word(out, self.align);
    }

    /// Whether file offset `off` lies in this segment's file bytes.
    pub fn covers_offset(&self, off: u64, len: u64) -> bool {
        off >= self.offset
            && off.checked_add(len).is_some_and(|e| Some(e) <= self.offset.checked_add(self.filesz))
    }
}

/// One section header, widened to 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shdr {
    /// `sh_name`.
    pub name: u32,
    /// `sh_type`.
    pub sh_type: u32,
    /// `sh_flags`.
    pub flags: u64,
    /// `sh_addr`.
    pub addr: u64,
    /// `sh_offset`.
    pub offset: u64,
    /// `sh_size`.
    pub size: u64,
    /// `sh_link`.
    pub link: u32,
    /// `sh_info`.
    pub info: u32,
    /// `sh_addralign`.
    pub addralign: u64,
    /// `sh_entsize`.
    pub entsize: u64,
}

impl Shdr {
    /// Decodes the header at `at`.
    pub fn read(l: Layout, d: &[u8], at: u64) -> Result<Shdr, ElfError> {
        const W: &str = "section header";
        let o = |n: u64| at.saturating_add(n);
        let w = l.word();
        // Field offsets: name 0, type 4, flags 8, then words.
        let f = |i: u64| o(8 + i * w);
        Ok(Shdr {
            name: l.u32(d, at, W)?,
            sh_type: l.u32(d, o(4), W)?,
            flags: l.word_at(d, f(0), W)?,
            addr: l.word_at(d, f(1), W)?,
            offset: l.word_at(d, f(2), W)?,
            size: l.word_at(d, f(3), W)?,
            link: l.u32(d, f(4), W)?,
            info: l.u32(d, o(8 + 4 * w + 4), W)?,
            addralign: l.word_at(d, o(8 + 4 * w + 8), W)?,
            entsize: l.word_at(d, o(8 + 5 * w + 8), W)?,
        })
    }

    /// Encodes the header.
    pub fn write(&self, l: Layout, out: &mut Vec<u8>) {
        l.put_u32(out, self.name);
        l.put_u32(out, self.sh_type);
        l.put_word(out, self.flags);
        l.put_word(out, self.addr);
        l.put_word(out, self.offset);
        l.put_word(out, self.size);
        l.put_u32(out, self.link);
        l.put_u32(out, self.info);
        l.put_word(out, self.addralign);
        l.put_word(out, self.entsize);
    }
}

/// One dynamic entry, widened to 64 bits (32-bit tags are sign-extended).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dyn {
    /// `d_tag`.
    pub tag: i64,
    /// `d_val` / `d_ptr`.
    pub val: u64,
}

impl Dyn {
    /// Encodes the entry.
    pub fn write(&self, l: Layout, out: &mut Vec<u8>) {
        l.put_word(out, self.tag as u64);
        l.put_word(out, self.val);
    }
}

/// The parsed headers of one ELF file, borrowing its bytes.
#[derive(Debug)]
pub struct Elf<'a> {
    /// The whole file.
    pub data: &'a [u8],
    /// Class and byte order.
    pub layout: Layout,
    /// `e_type`.
    pub e_type: u16,
    /// `e_machine`.
    pub machine: u16,
    /// `e_phoff`.
    pub phoff: u64,
    /// `e_shoff`.
    pub shoff: u64,
    /// Program headers.
    pub phdrs: Vec<Phdr>,
    /// Section headers (empty when the file has none).
    pub shdrs: Vec<Shdr>,
}

/// Largest header count we accept: far above any real file, small enough that
/// a corrupt count cannot make us allocate much.
const MAX_HEADERS: u64 = 1 << 16;

/// The ELF header's fields the reader needs, decoded.
struct Header {
    layout: Layout,
    e_type: u16,
    machine: u16,
    phoff: u64,
    shoff: u64,
    phentsize: u64,
    phnum: u64,
    shentsize: u64,
    shnum: u64,
}

impl Header {
    fn read(data: &[u8]) -> Result<Header, ElfError> {
        let len = data.len() as u64;
        if data.get(..4) != Some(&MAGIC[..]) {
            return Err(ElfError::Corrupt("not an ELF file".into()));
        }
        let ident = data.get(..16).ok_or(ElfError::Truncated {
            what: "ELF identification",
            offset: 0,
            len,
        })?;
        let is64 = match ident[4] {
            1 => false,
            2 => true,
            c => return Err(ElfError::Corrupt(format!("invalid ELF class {c}"))),
        };
        let little = match ident[5] {
            1 => true,
            2 => false,
            c => return Err(ElfError::Corrupt(format!("invalid ELF data encoding {c}"))),
        };
        let l = Layout { is64, little };
        if len < l.ehdr_size() {
            return Err(ElfError::Truncated { what: "ELF header", offset: 0, len });
        }
        const H: &str = "ELF header";
        let w = l.word();
        let base = 24 + 3 * w + 4; // after e_flags
        Ok(Header {
            layout: l,
            e_type: l.u16(data, 16, H)?,
            machine: l.u16(data, 18, H)?,
            phoff: l.word_at(data, 24 + w, H)?,
            shoff: l.word_at(data, 24 + 2 * w, H)?,
            phentsize: u64::from(l.u16(data, base + 2, H)?),
            phnum: u64::from(l.u16(data, base + 4, H)?),
            shentsize: u64::from(l.u16(data, base + 6, H)?),
            shnum: u64::from(l.u16(data, base + 8, H)?),
        })
    }

    fn phdrs(&self, data: &[u8]) -> Result<Vec<Phdr>, ElfError> {
        let l = self.layout;
        if self.phnum == 0xffff {
            return Err(ElfError::Unsupported("extended program header count (PN_XNUM)".into()));
        }
        if self.phnum > 0 && self.phentsize != l.phdr_size() {
            return Err(ElfError::Corrupt(format!(
                "e_phentsize is {}, expected {}",
                self.phentsize,
                l.phdr_size()
            )));
        }
        (0..self.phnum)
            .map(|i| Phdr::read(l, data, self.phoff.saturating_add(i * self.phentsize)))
            .collect()
    }

    fn shdrs(&self, data: &[u8]) -> Result<Vec<Shdr>, ElfError> {
        let l = self.layout;
        let mut shdrs = Vec::new();
        if self.shoff == 0 {
            return Ok(shdrs);
        }
        if self.shentsize != l.shdr_size() {
            return Err(ElfError::Corrupt(format!(
                "e_shentsize is {}, expected {}",
                self.shentsize,
                l.shdr_size()
            )));
        }
        let mut shnum = self.shnum;
        if shnum == 0 {
            // Extended numbering: the real count is section 0's sh_size.
            shnum = Shdr::read(l, data, self.shoff)?.size;
        }
        if shnum > MAX_HEADERS {
            return Err(ElfError::Corrupt(format!("{shnum} section headers")));
        }
        for i in 0..shnum {
            shdrs.push(Shdr::read(l, data, self.shoff.saturating_add(i * self.shentsize))?);
        }
        Ok(shdrs)
    }
}

impl<'a> Elf<'a> {
    /// Parses the ELF header, program headers and section headers.
    pub fn parse(data: &'a [u8]) -> Result<Elf<'a>, ElfError> {
        match Elf::parse_lenient(data)? {
            (_, Some(segments)) => Err(segments),
            (elf, None) => Ok(elf),
        }
    }

    /// [`Elf::parse`], with damage in the program headers set aside rather
    /// than fatal: the file comes back without program headers, with that
    /// error beside it. The device-code walk reads sections only (as
    /// cuobjdump does) and lists such a file; the loader facts need the
    /// segments and report the error. The errors come in the order
    /// [`Elf::parse`] meets them: ELF header, program headers, section headers.
    pub fn parse_lenient(data: &'a [u8]) -> Result<(Elf<'a>, Option<ElfError>), ElfError> {
        let h = Header::read(data)?;
        let (phdrs, segments) = match h.phdrs(data) {
            Ok(p) => (p, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        let shdrs = match h.shdrs(data) {
            Ok(s) => s,
            Err(e) => return Err(segments.unwrap_or(e)),
        };
        let elf = Elf {
            data,
            layout: h.layout,
            e_type: h.e_type,
            machine: h.machine,
            phoff: h.phoff,
            shoff: h.shoff,
            phdrs,
            shdrs,
        };
        Ok((elf, segments))
    }

    /// The first program header of a type.
    pub fn phdr(&self, p_type: u32) -> Option<&Phdr> {
        self.phdrs.iter().find(|p| p.p_type == p_type)
    }

    /// The loadable segments.
    pub fn loads(&self) -> impl Iterator<Item = &Phdr> {
        self.phdrs.iter().filter(|p| p.p_type == PT_LOAD)
    }

    /// Maps a virtual address range to a file offset through the PT_LOADs.
    pub fn vaddr_to_offset(&self, vaddr: u64, len: u64) -> Option<u64> {
        self.loads().find_map(|p| {
            let end = vaddr.checked_add(len)?;
            (vaddr >= p.vaddr && end <= p.vaddr.checked_add(p.filesz)?)
                .then(|| p.offset.checked_add(vaddr - p.vaddr))
                .flatten()
        })
    }

    /// The file bytes `[offset, offset+len)`, or a truncation error.
    pub fn slice(&self, offset: u64, len: u64, what: &'static str) -> Result<&'a [u8], ElfError> {
        let err = ElfError::Truncated { what, offset, len: self.data.len() as u64 };
        let s = usize::try_from(offset).map_err(|_| err.clone())?;
        let e = usize::try_from(len).ok().and_then(|l| s.checked_add(l)).ok_or(err.clone())?;
        self.data.get(s..e).ok_or(err)
    }

    /// The dynamic segment's entries up to (not including) DT_NULL, and the
    /// number of slots the segment has room for. `None` without PT_DYNAMIC.
    pub fn dynamic(&self) -> Result<Option<Dynamic>, ElfError> {
        let Some(ph) = self.phdr(PT_DYNAMIC) else { return Ok(None) };
        let l = self.layout;
        let size = l.dyn_size();
        let bytes = self.slice(ph.offset, ph.filesz, "dynamic segment")?;
        let slots = bytes.len() as u64 / size;
        let mut entries = Vec::new();
        for i in 0..slots {
            // Real files have dozens; a corrupt size must not make us allocate.
            if i >= MAX_HEADERS {
                return Err(ElfError::Corrupt(format!(
                    "more than {MAX_HEADERS} dynamic entries (DT_NULL included)"
                )));
            }
            let at = i * size;
            let tag = if l.is64 {
                l.u64(bytes, at, "dynamic entry")? as i64
            } else {
                i64::from(l.u32(bytes, at, "dynamic entry")? as i32)
            };
            if tag == DT_NULL {
                return Ok(Some(Dynamic { offset: ph.offset, vaddr: ph.vaddr, entries, slots }));
            }
            let val = l.word_at(bytes, at + l.word(), "dynamic entry")?;
            entries.push(Dyn { tag, val });
        }
        Err(ElfError::Corrupt("the dynamic segment has no DT_NULL terminator".into()))
    }

    /// The dynamic string table, located through DT_STRTAB / DT_STRSZ.
    pub fn dynstr(&self, dynamic: &Dynamic) -> Result<StrTab<'a>, ElfError> {
        let addr =
            dynamic.get(DT_STRTAB).ok_or_else(|| ElfError::Corrupt("no DT_STRTAB".into()))?;
        let size = dynamic.get(DT_STRSZ).ok_or_else(|| ElfError::Corrupt("no DT_STRSZ".into()))?;
        let offset = self.vaddr_to_offset(addr, size).ok_or_else(|| {
            ElfError::Corrupt(format!(
                "DT_STRTAB {addr:#x} (+{size:#x}) is not inside a loaded segment's file bytes"
            ))
        })?;
        Ok(StrTab { addr, offset, bytes: self.slice(offset, size, "dynamic string table")? })
    }

    /// `e_shstrndx` as the header stores it (`0xffff`: see section 0's `sh_link`).
    pub fn e_shstrndx(&self) -> u16 {
        let w = self.layout.word();
        // The header was read whole by `parse`: this cannot fail.
        self.layout.u16(self.data, 24 + 3 * w + 4 + 10, "ELF header").unwrap_or(0)
    }

    /// The index of the section-name string table, extended numbering
    /// resolved; `None` when the header says there is none or it is not in
    /// the table.
    pub fn shstrndx(&self) -> Option<usize> {
        let index = match self.e_shstrndx() {
            0 => return None,
            0xffff => self.shdrs.first()?.link as usize,
            raw => usize::from(raw),
        };
        (index < self.shdrs.len()).then_some(index)
    }

    /// The name of a section (from the section-name string table), if any.
    pub fn section_name(&self, sh: &Shdr) -> Option<&'a [u8]> {
        let strs = self.shdrs.get(self.shstrndx()?)?;
        if strs.sh_type == SHT_NOBITS {
            return None;
        }
        let table = self.slice(strs.offset, strs.size, "section names").ok()?;
        cstr(table.get(sh.name as usize..)?)
    }
}

/// The dynamic segment, decoded.
#[derive(Debug, Clone)]
pub struct Dynamic {
    /// File offset of the segment.
    pub offset: u64,
    /// Virtual address of the segment.
    pub vaddr: u64,
    /// Entries before DT_NULL.
    pub entries: Vec<Dyn>,
    /// How many entries the segment can hold (DT_NULL included).
    pub slots: u64,
}

impl Dynamic {
    /// The value of the first entry with `tag`.
    pub fn get(&self, tag: i64) -> Option<u64> {
        self.entries.iter().find(|d| d.tag == tag).map(|d| d.val)
    }
    /// Whether some entry has `tag`.
    pub fn has(&self, tag: i64) -> bool {
        self.entries.iter().any(|d| d.tag == tag)
    }
}

/// A string table located in the file.
#[derive(Debug, Clone, Copy)]
pub struct StrTab<'a> {
    /// Its virtual address.
    pub addr: u64,
    /// Its file offset.
    pub offset: u64,
    /// Its bytes.
    pub bytes: &'a [u8],
}

impl<'a> StrTab<'a> {
    /// The NUL-terminated string at `offset`.
    pub fn get(&self, offset: u64) -> Result<&'a [u8], ElfError> {
        usize::try_from(offset).ok().and_then(|o| self.bytes.get(o..)).and_then(cstr).ok_or_else(
            || {
                ElfError::Corrupt(format!(
                    "string offset {offset:#x} is outside the dynamic string table or unterminated"
                ))
            },
        )
    }
}

/// The bytes before the first NUL, if there is one.
pub fn cstr(bytes: &[u8]) -> Option<&[u8]> {
    bytes.iter().position(|&b| b == 0).map(|n| &bytes[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        // Every byte 0xff after the identification: each length fails at
        // the first structure it cannot hold, and a full header fails on
        // its program header count (0xffff is PN_XNUM), never a panic.
        for len in 0..80 {
            let mut data = vec![0xffu8; len];
            if len >= 4 {
                data[..4].copy_from_slice(MAGIC);
            }
            if len >= 6 {
                data[4] = 2;
                data[5] = 1;
            }
            let got = Elf::parse(&data).map(|e| e.dynamic().map(|d| d.is_some()));
            let what = match got {
                Err(ElfError::Corrupt(m)) if len < 4 => m,
                Err(ElfError::Truncated { what, offset: 0, len: l }) if l == len as u64 => {
                    what.to_string()
                }
                Err(ElfError::Unsupported(m)) if len >= 64 => m,
                other => panic!("{len} bytes: {other:?}"),
            };
            let want = match len {
                0..=3 => "not an ELF file",
                4..=15 => "ELF identification",
                16..=63 => "ELF header",
                _ => "extended program header count (PN_XNUM)",
            };
            assert_eq!(what, want, "{len} bytes");
            // Lenient parsing sets the segments aside, then fails on the
            // section headers (e_shentsize 0xffff): it reports the first.
            if len >= 64 {
                assert!(matches!(Elf::parse_lenient(&data), Err(ElfError::Unsupported(_))));
            }
        }
        // Zeros after the identification: a well-formed empty file, with
        // no segments, sections or dynamic section.
        for is64 in [false, true] {
            let mut data = vec![0u8; 64];
            data[..4].copy_from_slice(MAGIC);
            data[4] = if is64 { 2 } else { 1 };
            data[5] = 2;
            let elf = Elf::parse(&data).unwrap();
            assert_eq!((elf.layout.is64, elf.layout.little), (is64, false));
            assert!(elf.phdrs.is_empty() && elf.shdrs.is_empty());
            assert!(elf.dynamic().unwrap().is_none());
            assert_eq!(elf.shstrndx(), None);
        }
    }

    #[test]
    fn phdr_round_trips_in_both_classes() {
        for is64 in [false, true] {
            for little in [false, true] {
                let l = Layout { is64, little };
                let p = Phdr {
                    p_type: 1,
                    flags: 6,
                    offset: 0x1000,
                    vaddr: 0x2000,
                    paddr: 0x2000,
                    filesz: 10,
                    memsz: 20,
                    align: 0x1000,
                };
                let mut out = Vec::new();
                p.write(l, &mut out);
                assert_eq!(out.len() as u64, l.phdr_size());
                assert_eq!(Phdr::read(l, &out, 0).unwrap(), p);
                let s = Shdr {
                    name: 1,
                    sh_type: 3,
                    flags: 2,
                    addr: 5,
                    offset: 6,
                    size: 7,
                    link: 8,
                    info: 9,
                    addralign: 1,
                    entsize: 0,
                };
                let mut out = Vec::new();
                s.write(l, &mut out);
                assert_eq!(out.len() as u64, l.shdr_size());
                assert_eq!(Shdr::read(l, &out, 0).unwrap(), s);
            }
        }
    }
}
