//! The device-code (fatbin) reader: containers, entries, codecs, a look
//! inside cubins and PTX. It takes bytes and returns types: no file I/O, no
//! knowledge of host objects (those are [`crate::devicecode::host`]'s; the
//! cuobjdump-compatible listing is [`crate::inspect::listing`]).
//!
//! A fatbin is a sequence of containers; each holds entries (PTX, ELF cubins,
//! LTO-IR, `--concat` bundles). Listing needs only the headers, which are
//! borrowed from the caller's bytes (an mmap) without copying; decompression
//! ([`codec`]) and the look inside cubins and PTX ([`cubin`]) happen only on
//! request. Format facts: `docs/fatbin-format.md`.

pub mod codec;
pub mod container;
pub mod cubin;
pub mod header;

pub use container::{parse_region, scan, Container, Entry, Payload, Region};

/// How an entry's payload is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    /// Stored as is.
    None,
    /// One raw LZ4 block (flag 0x2000).
    Lz4,
    /// One ZSTD frame (flag 0x8000).
    Zstd,
}

impl Codec {
    /// The codec the entry flags name.
    pub fn from_flags(flags: u64) -> Codec {
        if flags & header::FLAG_LZ4 != 0 {
            Codec::Lz4
        } else if flags & header::FLAG_ZSTD != 0 {
            Codec::Zstd
        } else {
            Codec::None
        }
    }

    /// Lower-case name, as in the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

/// What an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// PTX text (kind 1).
    Ptx,
    /// An ELF cubin with SASS (kind 2).
    Elf,
    /// LTO-IR / NVVM (kind 8; obfuscated).
    LtoIr,
    /// A `--concat` bundle (kind 0x100) whose parts are listed instead.
    Concat,
    /// A kind this reader does not know; skipped by the listing.
    Unknown(u16),
}

impl Kind {
    /// Maps the on-disk kind number.
    pub fn from_raw(kind: u16) -> Kind {
        match kind {
            header::KIND_PTX => Kind::Ptx,
            header::KIND_ELF => Kind::Elf,
            header::KIND_LTO_IR => Kind::LtoIr,
            header::KIND_CONCAT => Kind::Concat,
            other => Kind::Unknown(other),
        }
    }

    /// Lower-case name, as in the JSON output (`unknown` for others).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Ptx => "ptx",
            Kind::Elf => "elf",
            Kind::LtoIr => "lto-ir",
            Kind::Concat => "concat",
            Kind::Unknown(_) => "unknown",
        }
    }
}

impl serde::Serialize for Kind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The suffix of a target: none, `a` (architecture-specific) or `f`
/// (family-specific). One type for fatbin entries, cubins and capabilities
/// (`crate::cuda::capabilities` re-exports it); ordered as Nix's `compareVersions`
/// orders the suffixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// Plain: forward-compatible within the major version (SASS) or beyond (PTX).
    Base,
    /// `a`: runs only on exactly this capability.
    Arch,
    /// `f`: runs on this family (same major, equal or higher minor).
    Family,
}

impl Variant {
    /// The suffix letter as written in `9.0a`, `sm_100f`.
    pub fn suffix(self) -> &'static str {
        match self {
            Variant::Base => "",
            Variant::Arch => "a",
            Variant::Family => "f",
        }
    }

    /// From an entry header's flags. Both bits set does not occur (nvcc
    /// rejects `arch=compute_100af`); `a` wins, as it is the narrower target.
    pub fn from_flags(flags: u64) -> Variant {
        if flags & header::FLAG_ARCH_SPECIFIC != 0 {
            Variant::Arch
        } else if flags & header::FLAG_FAMILY_SPECIFIC != 0 {
            Variant::Family
        } else {
            Variant::Base
        }
    }
}

/// A target architecture: SM number plus its variant (`sm_90a`, `sm_100f`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    /// SM number (`90` for sm_90).
    pub sm: u32,
    /// Plain, `a` or `f`.
    pub variant: Variant,
}

impl Arch {
    /// From an entry's SM number and flags.
    pub fn from_entry(sm: u32, flags: u64) -> Arch {
        Arch { sm, variant: Variant::from_flags(flags) }
    }

    /// `sm_90a`, `sm_100f`: the full name.
    pub fn name(&self) -> String {
        format!("sm_{}{}", self.sm, self.variant.suffix())
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl serde::Serialize for Arch {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

/// A malformed fatbin structure, with the file offset where it was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize)]
#[serde(tag = "error", rename_all = "kebab-case")]
pub enum FatbinError {
    /// Bytes that are neither a container header nor zero padding.
    #[error("offset {offset:#x}: no fatbin container here (found {found:#010x}); skipped to the next one")]
    BadMagic {
        /// File offset.
        offset: u64,
        /// The first four bytes found, little endian.
        found: u32,
    },
    /// A header that does not fit in what is left of its section or container.
    #[error("offset {offset:#x}: truncated {what}: needs {need} bytes, {have} left")]
    Truncated {
        /// File offset.
        offset: u64,
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        need: u64,
        /// Bytes available.
        have: u64,
    },
    /// A header size that is too small, unaligned, or otherwise unusable.
    #[error("offset {offset:#x}: {what} header size {size} is invalid")]
    BadHeaderSize {
        /// File offset.
        offset: u64,
        /// Which header.
        what: &'static str,
        /// The size found.
        size: u64,
    },
    /// A declared size that reaches past its enclosing region.
    #[error(
        "offset {offset:#x}: {what} ends at {end:#x}, past the end of its {within} at {limit:#x}"
    )]
    PastEnd {
        /// File offset of the header.
        offset: u64,
        /// What was being read.
        what: &'static str,
        /// Where it claims to end (saturated on overflow).
        end: u64,
        /// The enclosing region.
        within: &'static str,
        /// Where that region ends.
        limit: u64,
    },
    /// A field of an entry header points outside the header.
    #[error("offset {offset:#x}: entry {field} points outside the entry header")]
    BadField {
        /// File offset of the entry.
        offset: u64,
        /// The field.
        field: &'static str,
    },
    /// A payload that could not be decompressed or decoded.
    #[error("offset {offset:#x}: cannot decode payload: {reason}")]
    Decode {
        /// File offset of the entry.
        offset: u64,
        /// Why.
        reason: String,
    },
}

impl FatbinError {
    /// The file offset the error is about.
    pub fn offset(&self) -> u64 {
        match self {
            FatbinError::BadMagic { offset, .. }
            | FatbinError::Truncated { offset, .. }
            | FatbinError::BadHeaderSize { offset, .. }
            | FatbinError::PastEnd { offset, .. }
            | FatbinError::BadField { offset, .. }
            | FatbinError::Decode { offset, .. } => *offset,
        }
    }
}
