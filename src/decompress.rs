//! The decompressors of NAR streams (`xz`, `zstd`, `bzip2`), each with a
//! bound on the memory a hostile stream can make it take.
//!
//! A compressed stream declares how much history its decoder must keep: an
//! xz block its LZMA2 dictionary (up to 4 GiB), a zstd frame its window (up
//! to 3.75 TiB, or its whole content size for a single-segment frame). A
//! decoder that trusted the declaration would hold that much in memory once
//! the output grows, and a few kilobytes of input can produce gigabytes. So:
//!
//! - **xz**: liblzma's memory limit is [`MAX_DECODER_MEMORY`]; a block whose
//!   decoder needs more is refused before anything is allocated. `nix copy`
//!   writes xz preset 6 (8 MiB dictionary); preset 9, the largest a preset
//!   gives, needs 65 MiB to decode (docs/binary-cache.md).
//! - **zstd**: each frame header is read here first and a window larger than
//!   [`MAX_DECODER_MEMORY`] (zstd's own default decoder limit, 2^27 bytes,
//!   which is also what Nix's decoder accepts) is refused; ruzstd then keeps
//!   at most one window plus one block (128 KiB). Concatenated frames and
//!   skippable frames are read as the zstd tool reads them.
//! - **bzip2**: the format bounds the decoder (a block is at most 900 kB;
//!   about 3.6 MiB of tables), nothing to check.
//!
//! Errors are `io::Error`s carrying a [`DecompressError`] that says which
//! format, at which compressed byte, and why; the NAR reader passes them on
//! with its own offset, and the caller names the file or store path.

use std::io::{self, BufRead, Read};

use crate::narinfo::Compression;

/// The most memory a decoder may need for one stream: 128 MiB, zstd's
/// default window limit (`ZSTD_WINDOWLOG_LIMIT_DEFAULT`, 2^27 bytes), and
/// twice what xz's largest preset needs.
pub const MAX_DECODER_MEMORY: u64 = 1 << 27;

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

/// A decompressing reader for `compression`, or the name of one not supported.
pub fn decompressor(
    compression: &Compression,
    input: Box<dyn Read + Send>,
) -> Result<Box<dyn Read + Send>, String> {
    let input = Counting { inner: input, count: 0 };
    let input = io::BufReader::with_capacity(64 * 1024, input);
    Ok(match compression {
        Compression::None => Box::new(input),
        Compression::Xz => Box::new(Xz::new(input)),
        Compression::Bzip2 => Box::new(Bzip2 { inner: bzip2::bufread::MultiBzDecoder::new(input) }),
        Compression::Zstd => Box::new(Zstd::new(input)),
        Compression::Other(name) => return Err(name.clone()),
    })
}

/// Counts the compressed bytes read, for error messages.
struct Counting<R> {
    inner: R,
    count: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

type Input = io::BufReader<Counting<Box<dyn Read + Send>>>;

/// Compressed bytes consumed so far (read minus still buffered).
fn consumed(input: &Input) -> u64 {
    input.get_ref().count - input.buffer().len() as u64
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
        Some(inner) => {
            let reason = if inner.downcast_ref::<liblzma::stream::Error>()
                == Some(&liblzma::stream::Error::MemLimit)
            {
                format!(
                    "the stream needs more than {} MiB of memory to decode (an xz dictionary \
                     over the limit; xz -9, the largest preset, needs 65 MiB)",
                    MAX_DECODER_MEMORY >> 20
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
        match liblzma::stream::Stream::new_stream_decoder(
            MAX_DECODER_MEMORY,
            liblzma::stream::CONCATENATED,
        ) {
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

/// zstd: frame after frame, each window checked before ruzstd sees it.
struct Zstd {
    state: ZstdState,
}

enum ZstdState {
    /// Between frames (or before the first): the next header is read here.
    Between(Input),
    /// Inside a frame: the header bytes already read, chained before the rest.
    Frame(
        Box<
            ruzstd::decoding::StreamingDecoder<
                io::Chain<io::Cursor<Vec<u8>>, Input>,
                ruzstd::decoding::FrameDecoder,
            >,
        >,
    ),
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
                    let decoder = ruzstd::decoding::StreamingDecoder::new(source)
                        .map_err(|e| error("zstd", at, e.to_string()))?;
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
                    let (source, _) = decoder.into_parts();
                    self.state = ZstdState::Between(source.into_inner().1);
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
    if window > MAX_DECODER_MEMORY {
        return Err(error(
            "zstd",
            at,
            format!(
                "a frame declares a {} window, more than the {} MiB limit (zstd's default)",
                human(window),
                MAX_DECODER_MEMORY >> 20
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
