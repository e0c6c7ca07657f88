//! The on-disk headers of NVIDIA fat binaries, as zero-copy `#[repr(C)]` views.
//!
//! Every field is an `object::endian` little-endian integer (alignment 1), so a
//! header can be borrowed straight out of an mmap at any offset without copying
//! and without undefined behaviour. The layouts and flag meanings are the ones
//! measured in `docs/fatbin-format.md`; names follow that document.

use object::endian::{LittleEndian as LE, U16, U32, U64};
use object::pod::Pod;

/// Magic of a fatbin container header (`0xBA55ED50`, little endian on disk).
pub const CONTAINER_MAGIC: u32 = 0xBA55_ED50;
/// Size of a container header as CUDA writes it.
pub const CONTAINER_HEADER_SIZE: usize = 16;
/// The smallest entry header: every field up to the uncompressed size.
pub const ENTRY_HEADER_MIN: usize = 64;
/// Containers and entries are 8-byte aligned.
pub const ALIGN: u64 = 8;

/// Entry kind: PTX text.
pub const KIND_PTX: u16 = 1;
/// Entry kind: an ELF cubin (SASS).
pub const KIND_ELF: u16 = 2;
/// Entry kind: LTO-IR / NVVM (obfuscated; never decoded).
pub const KIND_LTO_IR: u16 = 8;
/// Entry kind: `--concat` (CUDA 13): one payload holding several parts,
/// described by a table inside the entry header.
pub const KIND_CONCAT: u16 = 0x100;

/// Flag: 64-bit device code.
pub const FLAG_64BIT: u64 = 0x1;
/// Flag: debug build (`-G`).
pub const FLAG_DEBUG: u64 = 0x2;
/// Flag: built for a Linux host.
pub const FLAG_LINUX: u64 = 0x10;
/// Flag: the payload is one raw LZ4 block (no frame).
pub const FLAG_LZ4: u64 = 0x2000;
/// Flag: the payload is one ZSTD frame.
pub const FLAG_ZSTD: u64 = 0x8000;
/// Flag (observed): LTO-IR, obfuscated.
pub const FLAG_LTO: u64 = 0x10000;
/// Flag: architecture-specific target (`sm_90a`).
pub const FLAG_ARCH_SPECIFIC: u64 = 0x10_0000;
/// Flag: family-specific target (`sm_100f`).
pub const FLAG_FAMILY_SPECIFIC: u64 = 0x20_0000;
/// Flag (observed): sm_100+ cubin carrying a capability blob.
pub const FLAG_CAPABILITY_BLOB: u64 = 0x100_0000;

/// A container header: 16 bytes that open every fatbin.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct ContainerHeader {
    /// [`CONTAINER_MAGIC`].
    pub magic: U32<LE>,
    /// Format version (1).
    pub version: U16<LE>,
    /// Size of this header (16).
    pub header_size: U16<LE>,
    /// Bytes of entries that follow the header (may be 0).
    pub entries_size: U64<LE>,
}

/// The fixed first 64 bytes of an entry header; `header_size` says how many
/// bytes the whole header really has (options and identifier live there).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct EntryHeader {
    /// Entry kind ([`KIND_PTX`], [`KIND_ELF`], ...).
    pub kind: U16<LE>,
    /// Entry format version (0x0101).
    pub version: U16<LE>,
    /// Size of the whole entry header; the payload follows it.
    pub header_size: U32<LE>,
    /// Stored payload bytes (padded to 8).
    pub payload_size: U64<LE>,
    /// Compressed size (0 when stored raw).
    pub compressed_size: U32<LE>,
    /// Entry-relative offset of the options `(offset, length)` pair, or 0.
    pub options_offset: U32<LE>,
    /// Minor version (PTX ISA minor; ELF format minor).
    pub minor: U16<LE>,
    /// Major version.
    pub major: U16<LE>,
    /// SM number (80, 90, 100, ...).
    pub sm: U32<LE>,
    /// Entry-relative offset of the identifier, or 0.
    pub identifier_offset: U32<LE>,
    /// Identifier length (no NUL).
    pub identifier_len: U32<LE>,
    /// Flags (`FLAG_*`).
    pub flags: U64<LE>,
    /// Reserved (non-zero on LTO-IR).
    pub reserved: U64<LE>,
    /// Uncompressed payload size (0 when stored raw).
    pub uncompressed_size: U64<LE>,
}

/// An `(offset, length)` pair of u32s, as used for options and the
/// `--concat` part table.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct OffsetLen {
    /// First value (an offset, or a count for the concat table).
    pub offset: U32<LE>,
    /// Second value (a length in bytes).
    pub len: U32<LE>,
}

// SAFETY: all three are `#[repr(C)]` structs made only of byte-array integer
// types (alignment 1, no padding, every bit pattern valid).
unsafe impl Pod for ContainerHeader {}
// SAFETY: as above.
unsafe impl Pod for EntryHeader {}
// SAFETY: as above.
unsafe impl Pod for OffsetLen {}

const _: () = assert!(std::mem::size_of::<ContainerHeader>() == CONTAINER_HEADER_SIZE);
const _: () = assert!(std::mem::size_of::<EntryHeader>() == ENTRY_HEADER_MIN);
const _: () = assert!(std::mem::size_of::<OffsetLen>() == 8);

/// Reads a `T` at `offset` of `data`, or `None` when it does not fit.
pub fn read_at<T: Pod>(data: &[u8], offset: u64) -> Option<&T> {
    let start = usize::try_from(offset).ok()?;
    let rest = data.get(start..)?;
    object::pod::from_bytes::<T>(rest).ok().map(|(v, _)| v)
}

/// Rounds `value` up to a multiple of [`ALIGN`], `None` on overflow.
pub fn align_up(value: u64) -> Option<u64> {
    value.checked_add(ALIGN - 1).map(|v| v & !(ALIGN - 1))
}
