//! Decompression of entry payloads, for the deep mode only.
//!
//! Two codecs occur in fatbins: one raw LZ4 block (no frame, so the output
//! size comes from the entry header) and one ZSTD frame. Both are pure Rust
//! here (ours, `ruzstd`) so the static binaries need no C library. The
//! LZ4 block decoder is our own (60 lines, every read bounded): lz4_flex 0.10,
//! the last release for our MSRV, panics on some malformed blocks. The
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

/// The most one file may make us decompress in total (the sum of the sizes
/// its compressed entries claim, counted each time one is decoded). The
/// per-entry cap alone would let a file of many small LZ4 entries, each
/// claiming [`MAX_PLAIN_SIZE`] of zeros, keep a deep inspection or an audit
/// busy for minutes; at ~1 GB/s this cap is a few seconds. The largest real
/// libraries (cuBLAS) decompress to a few GB.
pub const MAX_PLAIN_PER_FILE: u64 = 8 << 30;

/// A per-file decompression budget, shared by the threads decoding one file.
#[derive(Debug)]
pub struct Budget(std::sync::atomic::AtomicU64);

impl Budget {
    /// A budget of `bytes`.
    pub fn new(bytes: u64) -> Budget {
        Budget(std::sync::atomic::AtomicU64::new(bytes))
    }

    /// [`MAX_PLAIN_PER_FILE`].
    pub fn per_file() -> Budget {
        Budget::new(MAX_PLAIN_PER_FILE)
    }
}

/// [`plain`], charging the entry's claimed plain size to `budget` first: an
/// error once the file's total would pass it.
pub fn plain_within<'a>(entry: &Entry<'a>, budget: &Budget) -> Result<Cow<'a, [u8]>, FatbinError> {
    use std::sync::atomic::Ordering::Relaxed;
    if entry.codec != Codec::None && matches!(entry.payload, Payload::Stored(_)) {
        let size = entry.uncompressed_size;
        if budget.0.fetch_update(Relaxed, Relaxed, |left| left.checked_sub(size)).is_err() {
            return Err(FatbinError::Decode {
                offset: entry.offset,
                reason: format!(
                    "the file's decompressed total would pass the limit of {MAX_PLAIN_PER_FILE} bytes"
                ),
            });
        }
    }
    plain(entry)
}

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
    will_need(input);
    match entry.codec {
        Codec::None => Ok(Cow::Borrowed(stored)),
        Codec::Lz4 => {
            let out = lz4_block(input, size).map_err(|e| err(format!("lz4: {e}")))?;
            Ok(Cow::Owned(out))
        }
        Codec::Zstd => {
            let decoder = ruzstd::decoding::StreamingDecoder::new(input)
                .map_err(|e| err(format!("zstd: {e}")))?;
            // Grow with the real output: the header's size is a limit, not a
            // reservation (a hostile header could claim 512 MiB).
            let mut out = Vec::new();
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

/// Searches an entry's decompressed bytes without keeping them: `hit` is
/// called on successive windows (each starting with the last `overlap`
/// bytes of the one before, so a match across a boundary is seen; `true` as
/// its second argument for the first window) and the search stops at the
/// first window it accepts. A ZSTD payload is decoded only up to there: the
/// audit asks whether a PTX text declares an `.entry`, which a kernel's PTX
/// answers in its first kilobytes, not after megabytes. Charged to `budget`
/// as a whole decode.
pub fn search_plain(
    entry: &Entry<'_>,
    budget: &Budget,
    overlap: usize,
    hit: &mut dyn FnMut(&[u8], bool) -> bool,
) -> Result<bool, FatbinError> {
    if entry.codec != Codec::Zstd || !matches!(entry.payload, Payload::Stored(_)) {
        return Ok(hit(&plain_within(entry, budget)?, true));
    }
    let err = |reason: String| FatbinError::Decode { offset: entry.offset, reason };
    // The checks of `plain_within` and `plain`, then a streaming decode.
    let Payload::Stored(stored) = entry.payload else { unreachable!("checked above") };
    let size = entry.uncompressed_size;
    if size > MAX_PLAIN_SIZE {
        return Err(err(format!("uncompressed size {size} is over the limit of {MAX_PLAIN_SIZE}")));
    }
    {
        use std::sync::atomic::Ordering::Relaxed;
        if budget.0.fetch_update(Relaxed, Relaxed, |left| left.checked_sub(size)).is_err() {
            return Err(err(format!(
                "the file's decompressed total would pass the limit of {MAX_PLAIN_PER_FILE} bytes"
            )));
        }
    }
    let input = match entry.compressed_size {
        0 => stored,
        n => stored.get(..n as usize).ok_or_else(|| {
            err(format!("compressed size {n} is larger than the stored {} bytes", stored.len()))
        })?,
    };
    let mut decoder =
        ruzstd::decoding::StreamingDecoder::new(input).map_err(|e| err(format!("zstd: {e}")))?;
    const CHUNK: usize = 64 << 10;
    let mut window: Vec<u8> = Vec::with_capacity(CHUNK + overlap);
    let mut chunk = vec![0u8; CHUNK];
    let (mut total, mut first) = (0u64, true);
    loop {
        let n = decoder.read(&mut chunk).map_err(|e| err(format!("zstd: {e}")))?;
        if n == 0 {
            break;
        }
        total += n as u64;
        if total > size {
            return Err(err(format!("zstd: more than the {size} bytes the header says")));
        }
        let keep = window.len().min(overlap);
        window.drain(..window.len() - keep);
        window.extend_from_slice(&chunk[..n]);
        if hit(&window, first) {
            return Ok(true);
        }
        first = false;
    }
    if total != size {
        return Err(err(format!("zstd: {total} bytes out, header says {size}")));
    }
    Ok(false)
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

/// Asks the kernel to read `bytes` (a payload about to be decoded from start
/// to end) ahead, in large requests. Maps are advised `MADV_RANDOM` because
/// the headers are scattered; without this hint a cold payload was read one
/// 4 KiB page fault at a time (perf: `filemap_read_folio` under `lz4_block`).
/// Advisory only: on memory that is not a file map it does nothing useful
/// and its failure changes nothing.
fn will_need(bytes: &[u8]) {
    const PAGE: usize = 4096;
    if bytes.len() < 2 * PAGE {
        return;
    }
    let start = bytes.as_ptr() as usize & !(PAGE - 1);
    let end = bytes.as_ptr() as usize + bytes.len();
    // SAFETY: MADV_WILLNEED does not change the contents or the validity of
    // any mapping; it only starts reads into the page cache.
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_WILLNEED);
    }
}

/// Decodes one raw LZ4 block that must produce exactly `size` bytes.
/// Format: sequences of a token (literal length high nibble, match length
/// low nibble, 15 = more bytes follow), literals, a 2-byte little-endian
/// match offset and the match; the last sequence has literals only.
pub fn lz4_block(input: &[u8], size: usize) -> Result<Vec<u8>, String> {
    fn length(input: &[u8], at: &mut usize, nibble: usize) -> Result<usize, String> {
        let mut len = nibble;
        if nibble == 15 {
            loop {
                let b = *input.get(*at).ok_or("truncated length")?;
                *at += 1;
                len = len.checked_add(usize::from(b)).ok_or("length overflow")?;
                if b != 255 {
                    break;
                }
            }
        }
        Ok(len)
    }
    // LZ4 expands at most 255x; reserve from what is really there.
    let mut out: Vec<u8> = Vec::with_capacity(size.min(input.len().saturating_mul(255)));
    let mut at = 0usize;
    loop {
        let token = *input.get(at).ok_or("truncated block")?;
        at += 1;
        let literals = length(input, &mut at, usize::from(token >> 4))?;
        let end = at.checked_add(literals).ok_or("literal overflow")?;
        let bytes = input.get(at..end).ok_or("literals past the end of the block")?;
        if out.len() + bytes.len() > size {
            return Err(format!("output exceeds the {size} bytes the header announced"));
        }
        out.extend_from_slice(bytes);
        at = end;
        if at == input.len() {
            break;
        }
        let offset = input.get(at..at + 2).ok_or("truncated match offset")?;
        let offset = usize::from(u16::from_le_bytes([offset[0], offset[1]]));
        at += 2;
        let len =
            length(input, &mut at, usize::from(token & 15))?.checked_add(4).ok_or("overflow")?;
        if offset == 0 || offset > out.len() {
            return Err(format!("match offset {offset} outside the {} bytes decoded", out.len()));
        }
        if out.len() + len > size {
            return Err(format!("output exceeds the {size} bytes the header announced"));
        }
        // Copy the match in runs rather than byte by byte (the byte loop was
        // 72% of the audit's time on the corpus). When it overlaps its own
        // output (offset < len), the `offset` bytes before repeat: each run
        // copies what is decoded so far from `start`, doubling it.
        let start = out.len() - offset;
        let mut left = len;
        while left > 0 {
            let run = (out.len() - start).min(left);
            out.extend_from_within(start..start + run);
            left -= run;
        }
    }
    if out.len() != size {
        return Err(format!("{} bytes out, header says {size}", out.len()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::lz4_block;

    #[test]
    fn lz4_blocks_decode_with_overlapping_matches() {
        // "abcabcabcabc!": 3 literals, match offset 3 length 9, then "!".
        let block = [0x35, b'a', b'b', b'c', 3, 0, 0x10, b'!'];
        assert_eq!(lz4_block(&block, 13).unwrap(), b"abcabcabcabc!");
        assert!(lz4_block(&block, 12).is_err());
        assert!(lz4_block(&[0x35, b'a', 9, 0, 0], 20).is_err());
        assert!(lz4_block(&[0xf0, 255, 255], 20).is_err());
        assert!(lz4_block(&[], 0).is_err());
        // Offset 1 (a run of one byte), offset 2 with an odd length, and a
        // match that does not overlap its output.
        let run = [0x1f, b'x', 1, 0, 11, 0x00];
        assert_eq!(lz4_block(&run, 31).unwrap(), [b'x'; 31]);
        let two = [0x23, b'a', b'b', 2, 0, 0x00];
        assert_eq!(lz4_block(&two, 9).unwrap(), b"ababababa");
        let far = [0x40, b'w', b'x', b'y', b'z', 4, 0, 0x00];
        assert_eq!(lz4_block(&far, 8).unwrap(), b"wxyzwxyz");
    }
}
