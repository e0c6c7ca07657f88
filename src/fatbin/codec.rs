//! Decompression of entry payloads, for the deep mode only.
//!
//! Two codecs occur in fatbins: one raw LZ4 block (no frame, so the output
//! size comes from the entry header) and one ZSTD frame. Both are pure Rust
//! here (`lz4_flex`, `ruzstd`) so the static binaries need no C library. The
//! output size is taken from the header but capped by [`MAX_PLAIN_SIZE`]: a
//! hostile header cannot make us allocate more, and a frame that inflates past
//! the header's size is an error, not a bigger buffer. LTO-IR (kind 8) claims
//! ZSTD but is obfuscated, so it is never decoded.

use std::borrow::Cow;
use std::io::Read;

use super::{Codec, Entry, FatbinError, Kind, Payload};

/// The largest decompressed payload we accept (the largest cubins in cuBLAS
/// are a few tens of MB).
pub const MAX_PLAIN_SIZE: u64 = 512 << 20;

/// The plain bytes of a stored entry: borrowed when raw, decompressed otherwise.
/// Parts of `--concat` bundles are sliced out of their parent with [`part`].
pub fn plain<'a>(entry: &Entry<'a>) -> Result<Cow<'a, [u8]>, FatbinError> {
    let err = |reason: String| FatbinError::Decode { offset: entry.offset, reason };
    if entry.kind == Kind::LtoIr {
        return Err(err("LTO-IR is obfuscated and never decoded".into()));
    }
    let Payload::Stored(stored) = entry.payload else {
        return Err(err("a concat part has no payload of its own".into()));
    };
    if entry.codec == Codec::None {
        return Ok(Cow::Borrowed(stored));
    }
    let size = entry.uncompressed_size;
    if size > MAX_PLAIN_SIZE {
        return Err(err(format!("uncompressed size {size} is over the limit of {MAX_PLAIN_SIZE}")));
    }
    let input = match entry.compressed_size {
        0 => stored,
        n => stored.get(..n as usize).ok_or_else(|| {
            err(format!("compressed size {n} is larger than the stored {} bytes", stored.len()))
        })?,
    };
    let size = size as usize;
    match entry.codec {
        Codec::None => Ok(Cow::Borrowed(stored)),
        Codec::Lz4 => {
            let mut out = vec![0u8; size];
            let n = lz4_flex::block::decompress_into(input, &mut out)
                .map_err(|e| err(format!("lz4: {e}")))?;
            if n != size {
                return Err(err(format!("lz4: {n} bytes out, header says {size}")));
            }
            Ok(Cow::Owned(out))
        }
        Codec::Zstd => {
            let decoder = ruzstd::decoding::StreamingDecoder::new(input)
                .map_err(|e| err(format!("zstd: {e}")))?;
            let mut out = Vec::with_capacity(size);
            decoder
                .take(size as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| err(format!("zstd: {e}")))?;
            if out.len() != size {
                return Err(err(format!("zstd: {} bytes out, header says {size}", out.len())));
            }
            Ok(Cow::Owned(out))
        }
    }
}

/// The bytes of a `--concat` part, given its parent's plain payload.
pub fn part<'p>(part: &Entry<'_>, parent_plain: &'p [u8]) -> Result<&'p [u8], FatbinError> {
    let Payload::Part { offset, size } = part.payload else {
        return Err(FatbinError::Decode { offset: part.offset, reason: "not a part".into() });
    };
    let range = usize::try_from(offset)
        .ok()
        .zip(offset.checked_add(size).and_then(|e| usize::try_from(e).ok()));
    range.and_then(|(s, e)| parent_plain.get(s..e)).ok_or_else(|| FatbinError::Decode {
        offset: part.offset,
        reason: format!(
            "part {offset}+{size} is outside the bundle's {} bytes",
            parent_plain.len()
        ),
    })
}
