//! Walking containers and entries with bounds checks on every step.
//!
//! The input is a byte region (a section's file bytes, a raw `.fatbin`) and
//! the file offset where it starts, so that every entry and every error names
//! a file offset a user can look at with `xxd`. Nothing here reads a payload:
//! entries borrow their identifier, options and payload slices from the
//! region. Damage is reported as [`FatbinError`] and the walk resynchronises
//! on the next 8-aligned container magic, so one bad container does not hide
//! the rest of a library.

use super::header::{
    align_up, read_at, ContainerHeader, EntryHeader, OffsetLen, CONTAINER_HEADER_SIZE,
    CONTAINER_MAGIC, ENTRY_HEADER_MIN, KIND_CONCAT,
};
use super::{Arch, Codec, FatbinError, Kind};

/// Where an entry's payload bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// Stored in the file (possibly compressed): the stored bytes.
    Stored(&'a [u8]),
    /// A part of a `--concat` bundle: a range of the parent's decompressed payload.
    Part {
        /// Offset in the parent's decompressed payload.
        offset: u64,
        /// Length in bytes.
        size: u64,
    },
}

/// One entry (or one part of a `--concat` entry), headers only.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// File offset of the entry header (of the part descriptor for parts).
    pub offset: u64,
    /// What the entry holds.
    pub kind: Kind,
    /// Entry format version (0x0101).
    pub version: u16,
    /// Bytes of entry header (0 for parts, whose descriptors have no such field).
    pub header_size: u32,
    /// Target SM and `a`/`f` variant, from the entry header.
    pub arch: Arch,
    /// Major version (PTX ISA major; ELF format major).
    pub major: u16,
    /// Minor version.
    pub minor: u16,
    /// Raw flags.
    pub flags: u64,
    /// How the payload is stored.
    pub codec: Codec,
    /// Stored payload bytes.
    pub stored_size: u64,
    /// Compressed size from the header (0 when raw).
    pub compressed_size: u32,
    /// Uncompressed size from the header (0 when raw).
    pub uncompressed_size: u64,
    /// The identifier bytes (as stored; may carry trailing spaces).
    pub identifier: Option<&'a [u8]>,
    /// The options string bytes (compiler options recorded by nvcc).
    pub options: Option<&'a [u8]>,
    /// The payload.
    pub payload: Payload<'a>,
    /// For [`Kind::Concat`]: its parts, in table order.
    pub parts: Vec<Entry<'a>>,
}

impl Entry<'_> {
    /// Size of the payload once decompressed (the stored size when raw).
    pub fn plain_size(&self) -> u64 {
        match self.payload {
            Payload::Part { size, .. } => size,
            Payload::Stored(_) if self.codec == Codec::None => self.stored_size,
            Payload::Stored(_) => self.uncompressed_size,
        }
    }

    /// Whether the entry carries the debug flag (`-G`).
    pub fn debug(&self) -> bool {
        self.flags & super::header::FLAG_DEBUG != 0
    }
}

/// One container and its entries.
#[derive(Debug, Clone)]
pub struct Container<'a> {
    /// File offset of the container header.
    pub offset: u64,
    /// Container format version.
    pub version: u16,
    /// Bytes of container header (16).
    pub header_size: u16,
    /// Bytes of entries declared by the header.
    pub entries_size: u64,
    /// The entries that could be read, in file order.
    pub entries: Vec<Entry<'a>>,
}

/// What a region holds: the containers read and the damage found.
#[derive(Debug, Clone, Default)]
pub struct Region<'a> {
    /// Containers in file order.
    pub containers: Vec<Container<'a>>,
    /// Malformed structures, in file order.
    pub errors: Vec<FatbinError>,
}

impl Container<'_> {
    /// File offset just past the entries the header declares (saturated).
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(u64::from(self.header_size)).saturating_add(self.entries_size)
    }
}

impl<'a> Region<'a> {
    /// Every entry of every container, in file order (concat bundles as one).
    pub fn entries(&self) -> impl Iterator<Item = &Entry<'a>> {
        self.containers.iter().flat_map(|c| c.entries.iter())
    }
}

fn u(v: usize) -> u64 {
    v as u64
}

/// Reads every container of `data`, a region that starts at file offset `base`.
pub fn parse_region(data: &[u8], base: u64) -> Region<'_> {
    parse_region_with(data, base, &mut |_| {})
}

/// How often [`parse_region_with`] reports progress.
const RELEASE_STEP: u64 = 4 << 20;

/// [`parse_region`], calling `walked(prefix)` every few MiB with the prefix
/// of `data` the walk will not read again (entries may still borrow from
/// it). A memory-mapped caller can drop those pages from its resident set:
/// the kernel maps neighbouring pages around every header it faults in, so
/// without this a walk over cuBLAS's 255 MB section keeps ~50 MB resident.
pub fn parse_region_with<'a>(
    data: &'a [u8],
    base: u64,
    walked: &mut dyn FnMut(&'a [u8]),
) -> Region<'a> {
    let mut released = 0u64;
    let mut region = Region::default();
    let len = u(data.len());
    let mut off = 0u64;
    while off < len {
        let have = len - off;
        let Some(header) = read_at::<ContainerHeader>(data, off) else {
            if !is_zero(data, off, len) {
                region.errors.push(FatbinError::Truncated {
                    offset: base + off,
                    what: "container header",
                    need: u(CONTAINER_HEADER_SIZE),
                    have,
                });
            }
            break;
        };
        if header.magic.get(object::LittleEndian) != CONTAINER_MAGIC {
            // Zero padding between containers is normal; anything else is damage.
            if read_at::<object::endian::U64<object::LittleEndian>>(data, off)
                .is_some_and(|v| v.get(object::LittleEndian) == 0)
            {
                off += 8;
                continue;
            }
            region.errors.push(FatbinError::BadMagic {
                offset: base + off,
                found: header.magic.get(object::LittleEndian),
            });
            match next_magic(data, off + 8) {
                Some(next) => {
                    off = next;
                    continue;
                }
                None => break,
            }
        }
        match parse_container(data, base, off) {
            Ok((container, next, errors)) => {
                region.containers.push(container);
                region.errors.extend(errors);
                off = next;
                if off.saturating_sub(released) >= RELEASE_STEP {
                    released = off.min(len);
                    walked(slice(data, 0, released).unwrap_or_default());
                }
            }
            Err(err) => {
                region.errors.push(err);
                match next_magic(data, off + 8) {
                    Some(next) => off = next,
                    None => break,
                }
            }
        }
    }
    walked(data);
    region
}

fn is_zero(data: &[u8], from: u64, to: u64) -> bool {
    let (Ok(from), Ok(to)) = (usize::try_from(from), usize::try_from(to)) else {
        return false;
    };
    data.get(from..to).is_some_and(|b| b.iter().all(|&x| x == 0))
}

/// The next 8-aligned offset at or after `from` that holds the container magic.
/// A SIMD substring search (`memchr::memmem`): the scan mode reads every byte
/// of cuFFT's 200 MB `.data` this way.
///
/// Containers packed one after another (cuFFT's 24,000 in its `.ldata`) put
/// the next magic right where the search starts: that is looked at first,
/// and the searcher is built once per process, not once per call (building
/// it was a fifth of cuFFT's search time).
fn next_magic(data: &[u8], from: u64) -> Option<u64> {
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(&MAGIC_BYTES));
    const MAGIC_BYTES: [u8; 4] = CONTAINER_MAGIC.to_le_bytes();
    let mut off = align_up(from)?;
    let start = usize::try_from(off).ok()?;
    if data.get(start..start.checked_add(4)?) == Some(&MAGIC_BYTES[..]) {
        return Some(off);
    }
    loop {
        let start = usize::try_from(off).ok()?;
        let at = off + u(FINDER.find(data.get(start..)?)?);
        if at % 8 == 0 {
            return Some(at);
        }
        off = align_up(at + 1)?;
    }
}

/// Reads the container at `off` (magic already checked). Returns it, the
/// offset where the next one may start, and non-fatal damage inside it.
fn parse_container<'a>(
    data: &'a [u8],
    base: u64,
    off: u64,
) -> Result<(Container<'a>, u64, Vec<FatbinError>), FatbinError> {
    let len = u(data.len());
    let header = read_at::<ContainerHeader>(data, off).ok_or(FatbinError::Truncated {
        offset: base + off,
        what: "container header",
        need: u(CONTAINER_HEADER_SIZE),
        have: len.saturating_sub(off),
    })?;
    let le = object::LittleEndian;
    let header_size = u64::from(header.header_size.get(le));
    if header_size < u(CONTAINER_HEADER_SIZE) {
        return Err(FatbinError::BadHeaderSize {
            offset: base + off,
            what: "container",
            size: header_size,
        });
    }
    let entries_size = header.entries_size.get(le);
    let start = off + header_size;
    let declared_end = start.checked_add(entries_size);
    let mut errors = Vec::new();
    let end = match declared_end {
        Some(end) if end <= len => end,
        _ => {
            errors.push(FatbinError::PastEnd {
                offset: base + off,
                what: "container",
                end: base.saturating_add(declared_end.unwrap_or(u64::MAX)),
                within: "region",
                limit: base + len,
            });
            len
        }
    };
    let mut container = Container {
        offset: base + off,
        version: header.version.get(le),
        header_size: header.header_size.get(le),
        entries_size,
        entries: Vec::new(),
    };
    let mut e = start.min(len);
    while e < end {
        match parse_entry(data, base, e, end) {
            Ok((entry, next)) => {
                container.entries.push(entry);
                e = next;
            }
            Err(err) => {
                // An entry that cannot be stepped over ends its container; the
                // container's own size still says where the next one starts.
                errors.push(err);
                if !matches!(declared_end, Some(d) if d <= len) {
                    let next = next_magic(data, e + 8).unwrap_or(len);
                    return Ok((container, next, errors));
                }
                break;
            }
        }
    }
    // A container mostly holds one or two entries, and a vector's first
    // growth makes room for four: cuFFT's 24,453 containers outside its
    // sections kept 13 MB of heap for nothing, each page of it faulted in
    // and zeroed (half of that file's audit time).
    container.entries.shrink_to_fit();
    let next = if declared_end.is_some_and(|d| d <= len) {
        align_up(end).unwrap_or(len)
    } else {
        // Truncated container: look for the next header after what we read.
        next_magic(data, e).unwrap_or(len)
    };
    Ok((container, next, errors))
}

/// Reads the entry at `e`, which must end by `end`.
fn parse_entry(data: &[u8], base: u64, e: u64, end: u64) -> Result<(Entry<'_>, u64), FatbinError> {
    let le = object::LittleEndian;
    let have = end - e;
    let header = match read_at::<EntryHeader>(data, e) {
        Some(h) if have >= u(ENTRY_HEADER_MIN) => h,
        _ => {
            return Err(FatbinError::Truncated {
                offset: base + e,
                what: "entry header",
                need: u(ENTRY_HEADER_MIN),
                have,
            })
        }
    };
    let header_size = header.header_size.get(le);
    if u64::from(header_size) < u(ENTRY_HEADER_MIN) || header_size % 8 != 0 {
        return Err(FatbinError::BadHeaderSize {
            offset: base + e,
            what: "entry",
            size: u64::from(header_size),
        });
    }
    let payload_start = e + u64::from(header_size);
    if payload_start > end {
        return Err(FatbinError::PastEnd {
            offset: base + e,
            what: "entry header",
            end: base + payload_start,
            within: "container",
            limit: base + end,
        });
    }
    let payload_size = header.payload_size.get(le);
    let payload_end = match payload_start.checked_add(payload_size) {
        Some(p) if p <= end => p,
        other => {
            return Err(FatbinError::PastEnd {
                offset: base + e,
                what: "entry payload",
                end: base.saturating_add(other.unwrap_or(u64::MAX)),
                within: "container",
                limit: base + end,
            })
        }
    };
    // Both bounds were checked against `end <= data.len()` above.
    let header_bytes = slice(data, e, payload_start).unwrap_or_default();
    let payload = slice(data, payload_start, payload_end).unwrap_or_default();
    let mut entry = describe(header, header_bytes, base + e, Payload::Stored(payload))?;
    entry.header_size = header_size;
    if entry.kind == Kind::Concat {
        entry.parts = parse_parts(header, header_bytes, base + e)?;
    }
    let next = align_up(payload_end).unwrap_or(end).min(end);
    Ok((entry, next.max(payload_end)))
}

fn slice(data: &[u8], from: u64, to: u64) -> Option<&[u8]> {
    data.get(usize::try_from(from).ok()?..usize::try_from(to).ok()?)
}

/// A `(offset, length)` string inside `bytes`, `None` when absent.
fn string_at<'a>(
    bytes: &'a [u8],
    offset: u32,
    len: u32,
    at: u64,
    field: &'static str,
) -> Result<Option<&'a [u8]>, FatbinError> {
    if offset == 0 {
        return Ok(None);
    }
    let end = u64::from(offset) + u64::from(len);
    slice(bytes, u64::from(offset), end)
        .map(Some)
        .ok_or(FatbinError::BadField { offset: at, field })
}

/// The common fields of an entry header or a concat part descriptor.
fn describe<'a>(
    header: &EntryHeader,
    bytes: &'a [u8],
    at: u64,
    payload: Payload<'a>,
) -> Result<Entry<'a>, FatbinError> {
    let le = object::LittleEndian;
    let flags = header.flags.get(le);
    let identifier = string_at(
        bytes,
        header.identifier_offset.get(le),
        header.identifier_len.get(le),
        at,
        "identifier",
    )?;
    let options = match header.options_offset.get(le) {
        0 => None,
        // A concat bundle's offset points at its part table, not options.
        _ if header.kind.get(le) == KIND_CONCAT => None,
        o => {
            let pair = read_at::<OffsetLen>(bytes, u64::from(o))
                .ok_or(FatbinError::BadField { offset: at, field: "options" })?;
            string_at(bytes, pair.offset.get(le), pair.len.get(le), at, "options")?
        }
    };
    Ok(Entry {
        offset: at,
        kind: Kind::from_raw(header.kind.get(le)),
        version: header.version.get(le),
        header_size: 0,
        arch: Arch::from_entry(header.sm.get(le), flags),
        major: header.major.get(le),
        minor: header.minor.get(le),
        flags,
        codec: Codec::from_flags(flags),
        stored_size: header.payload_size.get(le),
        compressed_size: header.compressed_size.get(le),
        uncompressed_size: header.uncompressed_size.get(le),
        identifier,
        options,
        payload,
        parts: Vec::new(),
    })
}

/// The part table of a `--concat` entry: a `(count, table bytes)` pair at the
/// options offset, then one descriptor per part. A descriptor has the layout
/// of an entry header whose `header_size` field holds the part's offset in the
/// decompressed payload; its length is 64 bytes plus its options and
/// identifier strings (NUL-terminated, padded to 8), as nvcc 13 writes them.
fn parse_parts<'a>(
    header: &EntryHeader,
    bytes: &'a [u8],
    at: u64,
) -> Result<Vec<Entry<'a>>, FatbinError> {
    let le = object::LittleEndian;
    let table_at = u64::from(header.options_offset.get(le));
    let bad = FatbinError::BadField { offset: at, field: "concat part table" };
    let table = read_at::<OffsetLen>(bytes, table_at).ok_or(bad.clone())?;
    let count = table.offset.get(le);
    let table_end = table_at.checked_add(u64::from(table.len.get(le))).ok_or(bad.clone())?;
    if table_end > u(bytes.len()) || u64::from(count) > u64::from(table.len.get(le)) / 64 {
        return Err(bad);
    }
    let mut parts = Vec::with_capacity(count as usize);
    let mut p = table_at + 8;
    for _ in 0..count {
        let desc_bytes = slice(bytes, p, table_end).ok_or(bad.clone())?;
        let desc = read_at::<EntryHeader>(desc_bytes, 0).ok_or(bad.clone())?;
        let size = part_descriptor_size(desc, desc_bytes).ok_or(bad.clone())?;
        let desc_bytes = desc_bytes.get(..size as usize).ok_or(bad.clone())?;
        let payload = Payload::Part {
            offset: u64::from(desc.header_size.get(le)),
            size: desc.payload_size.get(le),
        };
        parts.push(describe(desc, desc_bytes, at + p, payload)?);
        p += size;
    }
    Ok(parts)
}

/// Length of one concat part descriptor, `None` when its fields are unusable.
fn part_descriptor_size(desc: &EntryHeader, bytes: &[u8]) -> Option<u64> {
    let le = object::LittleEndian;
    let mut end = u(ENTRY_HEADER_MIN);
    let options = u64::from(desc.options_offset.get(le));
    if options != 0 {
        let pair = read_at::<OffsetLen>(bytes, options)?;
        end = end.max(options + 8);
        end = end.max(u64::from(pair.offset.get(le)) + u64::from(pair.len.get(le)) + 1);
    }
    let ident = u64::from(desc.identifier_offset.get(le));
    if ident != 0 {
        end = end.max(ident + u64::from(desc.identifier_len.get(le)) + 1);
    }
    let end = align_up(end)?;
    (end <= u(bytes.len())).then_some(end)
}

/// The stretches of `data` (`[start, end)`, in its own offsets) between the
/// `skip` ranges (file offsets; `data` starts at `base`): only they are
/// searched (a library's host code is never read).
fn gaps(len: u64, base: u64, skip: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = skip
        .iter()
        .map(|&(s, e)| (s.saturating_sub(base).min(len), e.saturating_sub(base).min(len)))
        .filter(|(s, e)| s < e)
        .collect();
    ranges.sort_unstable();
    let mut gaps = Vec::new();
    let mut at = 0u64;
    for (s, e) in ranges {
        if s > at {
            gaps.push((at, s));
        }
        at = at.max(e);
    }
    if at < len {
        gaps.push((at, len));
    }
    gaps
}

/// The offset of the first well-formed container (as [`scan`] accepts
/// them) that starts inside one of `windows` (`[start, end)` offsets of
/// `data`), if any. The container itself may reach past its window.
pub fn probe(data: &[u8], windows: &[(u64, u64)]) -> Option<u64> {
    windows.iter().find_map(|&(start, end)| {
        let limit = slice(data, 0, end.min(u(data.len())))?;
        let mut off = start;
        while let Some(at) = next_magic(limit, off) {
            match parse_container(data, 0, at) {
                Ok((c, _, errors)) if well_formed(&c, &errors) => return Some(at),
                _ => off = at + 8,
            }
        }
        None
    })
}

/// Whether a container found by its magic outside the fatbin sections
/// counts: a header of the usual size and entries that parse, so random
/// bytes that happen to hold the magic are not reported.
fn well_formed(c: &Container<'_>, errors: &[FatbinError]) -> bool {
    errors.is_empty() && !c.entries.is_empty() && c.header_size == 16
}

/// Finds containers anywhere in `data` (file offset `base`) outside the
/// `skip` ranges (file offsets, `[start, end)`): the scan mode for libraries
/// that keep fatbins in `.data` (cuFFT). A candidate counts only when its
/// header is well formed and its first entry parses, so random bytes that
/// happen to hold the magic are not reported.
pub fn scan<'a>(data: &'a [u8], base: u64, skip: &[(u64, u64)]) -> Vec<Container<'a>> {
    scan_with(data, base, skip, &|_| {})
}

/// [`scan`], telling `walked` which stretches of `data` it is done
/// searching, every few MiB of search (as [`parse_region_with`] does), so a
/// large section that holds no container is given back as it is passed (the
/// default reading searches every data section whole: cuBLASLt's 43 MB
/// `.rodata`, cuFFT's 200 MB `.data`) instead of staying mapped until the
/// end. Each stretch is told once; entries may still borrow from it.
///
/// Stretches longer than [`CHUNK`] are searched in parallel, a chunk a
/// task (cuFFT 11.4's 278 MB `.ldata` was the longest pole of a whole
/// tree's audit on 16 threads), and the result is the one the sequential
/// walk gives: see [`join_chunks`].
pub fn scan_with<'a>(
    data: &'a [u8],
    base: u64,
    skip: &[(u64, u64)],
    walked: &(dyn Fn(&[u8]) + Sync),
) -> Vec<Container<'a>> {
    let mut found = Vec::new();
    scan_until(data, base, skip, walked, usize::MAX, &mut |batch| {
        found.extend(batch);
        false
    });
    found
}

/// [`scan_with`] in batches of `batch` chunks (each batch searched in
/// parallel, the batches in file order), handing each batch's containers to
/// `stop`, which ends the scan by returning `true`: for a reader that needs
/// only part of the answer (the pre-flight stops once every capability it
/// asks about has SASS, see `devicecode::read_until`). The containers
/// handed over, batch after batch, are the ones [`scan_with`] returns, in
/// its order, whatever the batch size.
pub fn scan_until<'a>(
    data: &'a [u8],
    base: u64,
    skip: &[(u64, u64)],
    walked: &(dyn Fn(&[u8]) + Sync),
    batch: usize,
    stop: &mut dyn FnMut(Vec<Container<'a>>) -> bool,
) {
    use rayon::prelude::*;
    for (start, end) in gaps(u(data.len()), base, skip) {
        let bounds = chunk_bounds(start, end);
        let mut cursor = start;
        for part in bounds.chunks(batch.max(1)) {
            let walks: Vec<Vec<Found<'a>>> = part
                .par_iter()
                .map(|&(from, to)| walk(data, base, from, to, end, walked))
                .collect();
            if stop(join_chunks(data, base, &mut cursor, end, part, walks, walked)) {
                return;
            }
        }
    }
}

/// How much of a stretch one task of [`scan_with`] searches.
pub const CHUNK: u64 = 8 << 20;

/// A container the walk accepted and where the walk goes on after it.
type Found<'a> = (Container<'a>, u64);

/// `[start, end)` cut at the multiples of [`CHUNK`] (file offsets are
/// 8-aligned there, as container magics are).
fn chunk_bounds(start: u64, end: u64) -> Vec<(u64, u64)> {
    let mut bounds = Vec::new();
    let mut from = start;
    while from < end {
        let to = end.min((from / CHUNK + 1).saturating_mul(CHUNK));
        bounds.push((from, to));
        from = to;
    }
    bounds
}

/// The sequential walk of `[from, to)`: every well-formed container whose
/// magic starts there, each followed by the search resuming at its end.
/// `limit` is the end of the whole stretch (a magic may run past `to`).
fn walk<'a>(
    data: &'a [u8],
    base: u64,
    from: u64,
    to: u64,
    limit: u64,
    walked: &(dyn Fn(&[u8]) + Sync),
) -> Vec<Found<'a>> {
    let mut found = Vec::new();
    let (mut off, mut released) = (from, from);
    while off < to {
        if off.saturating_sub(released) >= RELEASE_STEP {
            walked(slice(data, released, off).unwrap_or_default());
            released = off;
        }
        // A magic that starts before `step` lies wholly inside `window`.
        let step = to.min(off.saturating_add(RELEASE_STEP));
        let window = slice(data, 0, limit.min(step.saturating_add(3))).unwrap_or_default();
        let Some(at) = next_magic(window, off).filter(|&at| at < step) else {
            off = step;
            continue;
        };
        match parse_container(data, base, at) {
            Ok((c, next, errors)) if well_formed(&c, &errors) => {
                off = next.max(at + 8);
                found.push((c, off));
            }
            _ => off = at + 8,
        }
    }
    walked(slice(data, released, to.max(released)).unwrap_or_default());
    found
}

/// Joins the chunks' walks into the sequential walk of a stretch ending
/// at `end`, from `cursor` (the stretch's start, or where the walk of the
/// chunks before these left off; moved on to where this walk leaves off).
/// Each chunk was walked as if the search were at its start; the
/// sequential walk is, unless a container of an earlier chunk runs into it
/// and the search resumes at that container's end, `cursor`. Then the
/// chunk's containers that start before `cursor` are dropped, and the rest
/// kept as they are, unless one of the dropped ones ends past `cursor`
/// (the chunk's walk was inside a container there, the sequential one was
/// not): that chunk is walked again from `cursor`. Magics that do not
/// parse only move the search 8 bytes on, so both walks meet every 8-aligned
/// offset past `cursor` in the same state.
fn join_chunks<'a>(
    data: &'a [u8],
    base: u64,
    cursor: &mut u64,
    end: u64,
    bounds: &[(u64, u64)],
    walks: Vec<Vec<Found<'a>>>,
    walked: &(dyn Fn(&[u8]) + Sync),
) -> Vec<Container<'a>> {
    let mut out = Vec::new();
    for (&(from, to), mut chunk) in bounds.iter().zip(walks) {
        let at = *cursor;
        if at > from {
            let offset = |c: &Container<'_>| c.offset - base;
            if chunk.iter().any(|(c, next)| offset(c) < at && *next > at) {
                chunk = walk(data, base, at.min(to), to, end, walked);
            }
            chunk.retain(|(c, _)| offset(c) >= at);
        }
        for (c, next) in chunk {
            *cursor = next;
            out.push(c);
        }
    }
    out
}
