//! The decompressors of NAR streams (`xz`, `zstd`, `bzip2`), each with a
//! bound on the memory a hostile stream can make it take.
//!
//! A compressed stream declares how much history its decoder must keep: an
//! xz block its LZMA2 dictionary (up to 4 GiB), a zstd frame its window (up
//! to 3.75 TiB, or its whole content size for a single-segment frame). A
//! decoder that trusted the declaration would hold that much in memory once
//! the output grows, and a few kilobytes of input can produce gigabytes. So
//! each stream's history is capped at [`MAX_WINDOW`] (128 MiB), and memory
//! per stream is bounded by it:
//!
//! - **xz**: liblzma's memory limit is [`MAX_WINDOW`]; a block whose
//!   decoder needs more (a dictionary over about 127 MiB) is refused before
//!   anything is allocated. `nix copy` writes preset 6 (8 MiB dictionary),
//!   and with `compression-level=9` 64 MiB, the largest preset: at most
//!   128 MiB for xz.
//! - **zstd**: each frame header is read here first and a window over
//!   [`MAX_WINDOW`] (zstd's own default decoder limit, 2^27 bytes) is
//!   refused with a message saying so; `nix copy` writes 2 MiB windows by
//!   default, 8 MiB at level 19 and exactly 2^27 at level 22, the highest.
//!   The frame is then decoded by the reference C library (libzstd, built
//!   into the binary), whose own `windowLogMax` is set to the same limit:
//!   it holds one window and one block, at most about 128 MiB (measured in
//!   `tests/nar.rs`). The C decoder, not the pure-Rust one the fatbin codec
//!   uses for its small payloads, because NARs are hundreds of megabytes and
//!   it decodes them 3-4x faster (docs/binary-cache.md). Concatenated and
//!   skippable frames are read as the zstd tool reads them.
//! - **bzip2**: the format bounds the decoder (a block is at most 900 kB;
//!   about 3.6 MiB of tables), nothing to check.
//!
//! Errors are `io::Error`s carrying a [`DecompressError`] that says which
//! format, at which compressed byte, and why; the NAR reader passes them on
//! with its own offset, and the caller names the file or store path.

use std::io::{self, BufRead, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::store::narinfo::Compression;

/// The largest history (zstd window, xz decoder memory) a stream may
/// declare: 128 MiB, zstd's default window limit
/// (`ZSTD_WINDOWLOG_LIMIT_DEFAULT`, 2^27 bytes), what `nix copy` writes at
/// zstd level 22, and twice what xz's largest preset needs.
pub const MAX_WINDOW: u64 = 1 << 27;

/// What is wrong with a compressed stream.
#[derive(Debug, thiserror::Error)]
#[error("{format} stream, compressed byte {offset}: {reason}")]
pub struct DecompressError {
    /// `xz`, `zstd` or `bzip2`.
    pub format: &'static str,
    /// Bytes of the compressed stream consumed when the problem was seen.
    pub offset: u64,
    /// What is wrong.
    pub reason: String,
}

/// How many times its compressed size a NAR stream whose size nobody
/// vouches for (a NAR file, a narinfo not checked against a trusted key)
/// may expand, beyond [`FREE_OUTPUT`]. Decoding a few kilobytes into
/// gigabytes of zeros costs seconds per gigabyte even when nothing is
/// written (runs of zeros become holes): a 6.4 KB `.nar.bz2` of concatenated
/// zero streams took 35 s to produce 8 GiB (issue 29). NARs `nix copy`
/// writes expand 3 to 10 times (CUDA libraries with zstd or xz), 20 to 50
/// for text; 1000 is only reached by mostly-zero data, and makes the work
/// at most proportional to the bytes fetched. A NAR whose narinfo is
/// signed by a trusted key is bounded by its `NarSize` instead.
pub const MAX_EXPANSION: u64 = 1000;

/// What a stream may decompress to whatever its compressed size: 64 MiB.
pub const FREE_OUTPUT: u64 = 64 << 20;

/// [`decompressor`] whose output may not exceed [`FREE_OUTPUT`] plus
/// [`MAX_EXPANSION`] times the compressed bytes read: for a stream whose
/// size nothing vouches for.
pub fn decompressor_bounded(
    compression: &Compression,
    input: Box<dyn Read + Send>,
) -> Result<Box<dyn Read + Send>, String> {
    let read = Arc::new(AtomicU64::new(0));
    let inner = decoder(compression, input, read.clone())?;
    let format = match compression {
        Compression::None => return Ok(inner),
        Compression::Xz => "xz",
        Compression::Bzip2 => "bzip2",
        Compression::Zstd => "zstd",
        Compression::Other(name) => return Err(name.clone()),
    };
    Ok(Box::new(Expansion { inner, read, output: 0, format }))
}

/// A decompressing reader for `compression`, or the name of one not supported.
pub fn decompressor(
    compression: &Compression,
    input: Box<dyn Read + Send>,
) -> Result<Box<dyn Read + Send>, String> {
    decoder(compression, input, Arc::new(AtomicU64::new(0)))
}

fn decoder(
    compression: &Compression,
    input: Box<dyn Read + Send>,
    count: Arc<AtomicU64>,
) -> Result<Box<dyn Read + Send>, String> {
    let input = Counting { inner: input, count };
    let input = io::BufReader::with_capacity(64 * 1024, input);
    Ok(match compression {
        Compression::None => Box::new(input),
        Compression::Xz => Box::new(Xz::new(input)),
        Compression::Bzip2 => Box::new(Bzip2 { inner: bzip2::bufread::MultiBzDecoder::new(input) }),
        Compression::Zstd => Box::new(Zstd::new(input)),
        Compression::Other(name) => return Err(name.clone()),
    })
}

/// Counts the compressed bytes read, for error messages and the bound on
/// expansion.
struct Counting<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The decompressed stream, refused once it outgrows its input
/// ([`decompressor_bounded`]).
struct Expansion {
    inner: Box<dyn Read + Send>,
    read: Arc<AtomicU64>,
    output: u64,
    format: &'static str,
}

impl Read for Expansion {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.output += n as u64;
        let input = self.read.load(Ordering::Relaxed);
        let allowed = FREE_OUTPUT.saturating_add(input.saturating_mul(MAX_EXPANSION));
        if self.output > allowed {
            return Err(error(
                self.format,
                input,
                format!(
                    "{} decompressed bytes from {input} compressed: more than {MAX_EXPANSION} \
                     times the compressed size beyond the first {} MiB, refused as a \
                     decompression bomb (a NAR expands 3 to 50 times; with a cache, \
                     --trusted-public-key makes the signed NarSize the bound instead)",
                    self.output,
                    FREE_OUTPUT >> 20
                ),
            ));
        }
        Ok(n)
    }
}

type Input = io::BufReader<Counting<Box<dyn Read + Send>>>;

/// Compressed bytes consumed so far (read minus still buffered).
fn consumed(input: &Input) -> u64 {
    input.get_ref().count.load(Ordering::Relaxed) - input.buffer().len() as u64
}

fn error(format: &'static str, offset: u64, reason: impl Into<String>) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        DecompressError { format, offset, reason: reason.into() },
    )
}

/// An error of the decoder with the format and offset added, unless it is
/// already one of ours or an I/O error of the stream below.
fn annotate(format: &'static str, offset: u64, e: io::Error) -> io::Error {
    match e.get_ref() {
        Some(inner) if inner.is::<DecompressError>() => e,
        // libzstd's reader says "incomplete frame" when its input ends early.
        Some(_) if e.kind() == io::ErrorKind::UnexpectedEof => {
            error(format, offset, "the stream is truncated")
        }
        Some(inner) => {
            let reason = if inner.downcast_ref::<liblzma::stream::Error>()
                == Some(&liblzma::stream::Error::MemLimit)
            {
                format!(
                    "the stream needs more than {} MiB of memory to decode (an xz dictionary \
                     over the limit; xz -9, the largest preset, needs 65 MiB)",
                    MAX_WINDOW >> 20
                )
            } else {
                inner.to_string()
            };
            error(format, offset, reason)
        }
        None if e.kind() == io::ErrorKind::UnexpectedEof => {
            error(format, offset, "the stream is truncated")
        }
        None => e,
    }
}

/// xz, every concatenated stream, decoder memory limited (`.lzma` files,
/// which liblzma's "auto" decoder would also take, are not what Nix writes
/// or reads).
enum Xz {
    Decoding(Box<liblzma::bufread::XzDecoder<Input>>),
    /// liblzma could not make a decoder (out of memory): said on first read.
    Failed(String),
}

impl Xz {
    fn new(input: Input) -> Xz {
        match liblzma::stream::Stream::new_stream_decoder(MAX_WINDOW, liblzma::stream::CONCATENATED)
        {
            Ok(stream) => {
                Xz::Decoding(Box::new(liblzma::bufread::XzDecoder::new_stream(input, stream)))
            }
            Err(e) => Xz::Failed(e.to_string()),
        }
    }
}

impl Read for Xz {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Xz::Decoding(inner) => {
                inner.read(buf).map_err(|e| annotate("xz", consumed(inner.get_ref()), e))
            }
            Xz::Failed(reason) => Err(error("xz", 0, format!("no decoder: {reason}"))),
        }
    }
}

/// bzip2, every concatenated stream.
struct Bzip2 {
    inner: bzip2::bufread::MultiBzDecoder<Input>,
}

impl Read for Bzip2 {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).map_err(|e| annotate("bzip2", consumed(self.inner.get_ref()), e))
    }
}

const ZSTD_MAGIC: u32 = 0xfd2f_b528;

/// libzstd's reader of one frame whose header was read (and checked) here.
type FrameReader = zstd::stream::read::Decoder<'static, io::Chain<io::Cursor<Vec<u8>>, Input>>;

/// zstd: frame after frame, each window checked before libzstd sees it.
struct Zstd {
    state: ZstdState,
}

enum ZstdState {
    /// Between frames (or before the first): the next header is read here.
    Between(Input),
    /// Inside a frame: the header bytes already read, chained before the rest.
    Frame(Box<FrameReader>),
    /// After an error or in transition.
    Poisoned,
}

impl Zstd {
    fn new(input: Input) -> Zstd {
        Zstd { state: ZstdState::Between(input) }
    }
}

impl Read for Zstd {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match std::mem::replace(&mut self.state, ZstdState::Poisoned) {
                ZstdState::Poisoned => {
                    return Err(io::Error::other("the zstd stream failed before"));
                }
                ZstdState::Between(mut input) => {
                    if input.fill_buf()?.is_empty() {
                        self.state = ZstdState::Between(input);
                        return Ok(0);
                    }
                    let at = consumed(&input);
                    let Some(header) = read_frame_header(&mut input, at)? else {
                        // A skippable frame, skipped.
                        self.state = ZstdState::Between(input);
                        continue;
                    };
                    let source = io::Cursor::new(header).chain(input);
                    let decoder = zstd::stream::read::Decoder::with_buffer(source)
                        .and_then(|d| {
                            let mut d = d.single_frame();
                            d.window_log_max(MAX_WINDOW.trailing_zeros())?;
                            Ok(d)
                        })
                        .map_err(|e| error("zstd", at, format!("no decoder: {e}")))?;
                    self.state = ZstdState::Frame(Box::new(decoder));
                }
                ZstdState::Frame(mut decoder) => {
                    let n = decoder.read(buf).map_err(|e| {
                        let at = consumed(decoder.get_ref().get_ref().1);
                        annotate("zstd", at, e)
                    })?;
                    if n > 0 {
                        self.state = ZstdState::Frame(decoder);
                        return Ok(n);
                    }
                    self.state = ZstdState::Between(decoder.finish().into_inner().1);
                }
            }
        }
    }
}

/// Reads one frame header and returns its bytes, after checking the window
/// it declares; `None` after skipping a skippable frame.
fn read_frame_header(input: &mut Input, at: u64) -> io::Result<Option<Vec<u8>>> {
    let truncated = |_| error("zstd", at, "a frame header is truncated");
    let mut header = vec![0u8; 5];
    input.read_exact(&mut header[..4]).map_err(truncated)?;
    let magic = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    if magic & 0xffff_fff0 == 0x184d_2a50 {
        let mut len = [0u8; 4];
        input.read_exact(&mut len).map_err(truncated)?;
        let len = u64::from(u32::from_le_bytes(len));
        let skipped = io::copy(&mut input.by_ref().take(len), &mut io::sink())?;
        if skipped < len {
            return Err(error("zstd", at, "a skippable frame is truncated"));
        }
        return Ok(None);
    }
    if magic != ZSTD_MAGIC {
        return Err(error("zstd", at, format!("not a zstd frame (magic {magic:#010x})")));
    }
    input.read_exact(&mut header[4..5]).map_err(truncated)?;
    let descriptor = header[4];
    let single_segment = descriptor & 0x20 != 0;
    let dict_len = [0, 1, 2, 4][usize::from(descriptor & 3)];
    let fcs_len = match descriptor >> 6 {
        0 if single_segment => 1,
        0 => 0,
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let rest = usize::from(!single_segment) + dict_len + fcs_len;
    header.resize(5 + rest, 0);
    input.read_exact(&mut header[5..]).map_err(truncated)?;
    let window = if single_segment {
        let fcs = &header[5 + dict_len..];
        let mut bytes = [0u8; 8];
        bytes[..fcs.len()].copy_from_slice(fcs);
        let size = u64::from_le_bytes(bytes);
        if fcs_len == 2 {
            size + 256
        } else {
            size
        }
    } else {
        let descriptor = header[5];
        let log = 10 + u32::from(descriptor >> 3);
        let base = 1u64 << log;
        base + (base / 8) * u64::from(descriptor & 7)
    };
    if window > MAX_WINDOW {
        return Err(error(
            "zstd",
            at,
            format!(
                "a frame declares a {} window, more than the {} MiB limit (zstd's default)",
                human(window),
                MAX_WINDOW >> 20
            ),
        ));
    }
    Ok(Some(header))
}

/// A size in bytes for a message: exact below 1 MiB, else MiB/GiB/TiB.
fn human(bytes: u64) -> String {
    const UNITS: [(&str, u32); 3] = [("TiB", 40), ("GiB", 30), ("MiB", 20)];
    for (unit, shift) in UNITS {
        if bytes >= 1 << shift {
            return format!("{:.1} {unit} ({bytes} bytes)", bytes as f64 / (1u64 << shift) as f64);
        }
    }
    format!("{bytes}-byte")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(compression: Compression, bytes: Vec<u8>) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        decompressor(&compression, Box::new(io::Cursor::new(bytes)))
            .expect("supported")
            .read_to_end(&mut out)?;
        Ok(out)
    }

    fn refused(compression: Compression, bytes: Vec<u8>) -> String {
        let err = read_all(compression, bytes).expect_err("refused");
        assert!(err.get_ref().is_some_and(|e| e.is::<DecompressError>()), "{err}");
        err.to_string()
    }

    /// A zstd frame header: no checksum, no dictionary; a window descriptor,
    /// or with `single` a single-segment frame of 8-byte content size `fcs`.
    fn zstd_header(window_descriptor: u8, single: Option<u64>) -> Vec<u8> {
        let mut h = ZSTD_MAGIC.to_le_bytes().to_vec();
        match single {
            Some(fcs) => {
                h.push(0xe0);
                h.extend_from_slice(&fcs.to_le_bytes());
            }
            None => h.extend_from_slice(&[0x00, window_descriptor]),
        }
        h
    }

    /// A raw block, then `rle` RLE blocks of 128 KiB of `byte`; the last one
    /// marked last.
    fn zstd_blocks(raw: &[u8], rle: usize, byte: u8) -> Vec<u8> {
        let header = |size: usize, kind: u32, last: bool| {
            let h = ((size as u32) << 3) | (kind << 1) | u32::from(last);
            h.to_le_bytes()[..3].to_vec()
        };
        let mut out = header(raw.len(), 0, rle == 0);
        out.extend_from_slice(raw);
        for i in 0..rle {
            out.extend(header(128 << 10, 1, i + 1 == rle));
            out.push(byte);
        }
        out
    }

    #[test]
    fn zstd_windows_over_the_limit_are_refused_before_decoding() {
        // 2^27 + 2^24 (one step over), 2^41 (the largest), and a single
        // segment claiming 1 TiB of content.
        for (header, shown) in [
            (zstd_header(0x89, None), "144.0 MiB (150994944 bytes)"),
            (zstd_header(0xf8, None), "2.0 TiB (2199023255552 bytes)"),
            (zstd_header(0, Some(1 << 40)), "1.0 TiB (1099511627776 bytes)"),
        ] {
            let mut bytes = header;
            bytes.extend(zstd_blocks(b"", 8, 0));
            assert_eq!(
                refused(Compression::Zstd, bytes),
                format!(
                    "zstd stream, compressed byte 0: a frame declares a {shown} window, more \
                     than the 128 MiB limit (zstd's default)"
                )
            );
        }
        // The check is made for every frame, at its offset.
        let mut bytes = zstd_header(0x00, None);
        bytes.extend(zstd_blocks(b"first", 0, 0));
        let second = bytes.len();
        bytes.extend(zstd_header(0xf8, None));
        bytes.extend(zstd_blocks(b"x", 0, 0));
        let err = refused(Compression::Zstd, bytes);
        assert!(err.starts_with(&format!("zstd stream, compressed byte {second}: ")), "{err}");
    }

    #[test]
    fn zstd_at_the_limit_concatenated_and_skippable_frames_decode() {
        // A 128 MiB window (0x88: 2^27), 1 MiB of output from 32 bytes.
        let mut bytes = zstd_header(0x88, None);
        bytes.extend(zstd_blocks(b"nix", 8, b'z'));
        // A skippable frame (as pzstd writes), then a second frame.
        bytes.extend_from_slice(&0x184d_2a53u32.to_le_bytes());
        bytes.extend_from_slice(&3u32.to_le_bytes());
        bytes.extend_from_slice(b"abc");
        bytes.extend(zstd_header(0x00, None));
        bytes.extend(zstd_blocks(b"-archive", 0, 0));
        let out = read_all(Compression::Zstd, bytes).unwrap();
        assert_eq!(out.len(), 3 + (8 << 17) + 8);
        assert!(out.starts_with(b"nixzzz") && out.ends_with(b"zz-archive"));
        // An empty input is an empty stream (the NAR reader then says truncated).
        assert!(read_all(Compression::Zstd, vec![]).unwrap().is_empty());
    }

    #[test]
    fn zstd_garbage_and_truncation_are_errors() {
        let err = refused(Compression::Zstd, b"nix-archive-1\0\0\0".to_vec());
        assert_eq!(err, "zstd stream, compressed byte 0: not a zstd frame (magic 0x2d78696e)");
        let header = zstd_header(0x00, None);
        let err = refused(Compression::Zstd, header[..5].to_vec());
        assert_eq!(err, "zstd stream, compressed byte 0: a frame header is truncated");
        let mut bytes = header;
        bytes.extend(zstd_blocks(b"0123456789", 0, 0));
        bytes.truncate(bytes.len() - 4);
        let err = refused(Compression::Zstd, bytes);
        assert!(err.starts_with("zstd stream, compressed byte "), "{err}");
        let mut skippable = 0x184d_2a50u32.to_le_bytes().to_vec();
        skippable.extend_from_slice(&100u32.to_le_bytes());
        let err = refused(Compression::Zstd, skippable);
        assert_eq!(err, "zstd stream, compressed byte 0: a skippable frame is truncated");
    }

    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
            }
        }
        !crc
    }

    /// liblzma's xz of `data` (preset 0) with the LZMA2 dictionary size byte
    /// of its one block set to `dict` (size `(2 | dict & 1) << (dict / 2 + 11)`,
    /// 40 = 4 GiB - 1), the block header's CRC32 redone.
    fn xz_with_dictionary(data: &[u8], dict: u8) -> Vec<u8> {
        let mut xz = Vec::new();
        liblzma::read::XzEncoder::new(data, 0).read_to_end(&mut xz).unwrap();
        // Stream header (12 bytes), then the block header: its size, flags
        // (no optional sizes, one filter), filter ID 0x21 (LZMA2), 1 byte of
        // properties: the dictionary size.
        let size = (usize::from(xz[12]) + 1) * 4;
        assert_eq!(&xz[13..16], &[0x00, 0x21, 0x01], "liblzma's block header layout");
        xz[16] = dict;
        let crc = crc32(&xz[12..12 + size - 4]);
        xz[12 + size - 4..12 + size].copy_from_slice(&crc.to_le_bytes());
        xz
    }

    #[test]
    fn xz_dictionaries_over_the_limit_are_refused() {
        let data = b"nix-archive-1".repeat(100);
        // 64 MiB, what `xz -9` uses: decoded.
        assert_eq!(read_all(Compression::Xz, xz_with_dictionary(&data, 28)).unwrap(), data);
        // 128 MiB (the limit itself, plus liblzma's own state) and 4 GiB.
        for dict in [30, 40] {
            let err = refused(Compression::Xz, xz_with_dictionary(&data, dict));
            assert!(
                err.starts_with("xz stream, compressed byte ")
                    && err.ends_with(
                        "the stream needs more than 128 MiB of memory to decode (an xz \
                         dictionary over the limit; xz -9, the largest preset, needs 65 MiB)"
                    ),
                "{err}"
            );
        }
    }

    #[test]
    fn xz_and_bzip2_garbage_and_truncation_are_errors() {
        let data = b"nix-archive-1".repeat(1000);
        let mut xz = Vec::new();
        liblzma::read::XzEncoder::new(data.as_slice(), 6).read_to_end(&mut xz).unwrap();
        let mut bz = Vec::new();
        bzip2::read::BzEncoder::new(data.as_slice(), bzip2::Compression::best())
            .read_to_end(&mut bz)
            .unwrap();
        for (compression, format, whole) in
            [(Compression::Xz, "xz", xz), (Compression::Bzip2, "bzip2", bz)]
        {
            assert_eq!(read_all(compression.clone(), whole.clone()).unwrap(), data);
            for bytes in [whole[..whole.len() / 2].to_vec(), b"nix-archive-1".to_vec(), {
                let mut flipped = whole.clone();
                let at = flipped.len() / 2;
                flipped[at] ^= 0x55;
                flipped
            }] {
                let err = refused(compression.clone(), bytes);
                assert!(err.starts_with(&format!("{format} stream, compressed byte ")), "{err}");
            }
        }
    }
}
