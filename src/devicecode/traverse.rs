//! The one walk over a parsed file's device code: fatbin sections, archive
//! members (a thin archive's from the files next to it), raw fatbins, bare
//! cubins, and containers found outside the sections. `--summary`, the
//! audit and the model all read a file through here, so they see the same
//! code and call the same things damage (docs/cuda-elf-inspect.md, "One
//! model of device code").

use std::path::Path;

use crate::devicecode::host::{self, FatbinSection, Object, ReadError};
use crate::elf::ranges::Disjoint;
use crate::fatbin::cubin::{CubinError, CubinInfo};
use crate::fatbin::{Container, Entry, Kind, Region};

/// Cubins larger than this (decompressed) are code, not link stubs: nvlink's
/// stubs measure 0.7-2 KiB (nvcc 13 fixtures, NCCL, cuBLAS), while CuPy's
/// thrust module keeps one 6 MB cubin per architecture. Such a cubin settles
/// its architecture before anything is decoded (cuBLASLt's 5,839 cubins need
/// no decoding at all).
pub const STUB_MAX_BYTES: u64 = 64 << 10;

/// What the walk meets, in file order.
#[derive(Debug)]
pub enum Part<'e, 'a> {
    /// A fatbin section of a host ELF file (before its region).
    Section {
        /// Archive member holding it.
        member: Option<&'a [u8]>,
        /// The section; NOBITS ones (split debug files) have size 0 and no containers.
        section: &'e FatbinSection<'a>,
        /// A NOBITS section: no bytes, no code, and no damage either.
        nobits: bool,
    },
    /// Containers of a fatbin section or a raw fatbin.
    Region {
        /// Archive member holding it.
        member: Option<&'a [u8]>,
        /// `.nv_fatbin`, `__nv_relfatbin`, or `fatbin` for a raw fatbin.
        section: &'static str,
        /// The containers and their damage.
        region: &'e Region<'a>,
    },
    /// A bare cubin (`nvcc -cubin`), file or member.
    Cubin {
        /// Archive member holding it.
        member: Option<&'a [u8]>,
        /// What its header says.
        info: &'e Result<CubinInfo, CubinError>,
    },
    /// Damage met outside the fatbin regions (ELF structure, a member).
    Problem {
        /// Archive member it is about.
        member: Option<&'a [u8]>,
        /// Why.
        error: &'e ReadError,
    },
}

/// Walks `object` (a file, or one thin archive member), calling `f` for
/// every part. Nested archives are not entered (cuobjdump does not either);
/// thin archive members are left to [`for_each_unit`].
pub fn visit<'e, 'a>(object: &'e Object<'a>, f: &mut dyn FnMut(Part<'e, 'a>)) {
    visit_in(object, None, f)
}

fn visit_in<'e, 'a>(
    object: &'e Object<'a>,
    member: Option<&'a [u8]>,
    f: &mut dyn FnMut(Part<'e, 'a>),
) {
    match object {
        Object::Elf(elf) => {
            for section in &elf.sections {
                let nobits =
                    elf.errors.iter().any(
                        |e| matches!(e, ReadError::NoBits { section: s } if *s == section.name),
                    ) && section.size == 0;
                f(Part::Section { member, section, nobits });
                f(Part::Region { member, section: section.name, region: &section.region });
            }
            for error in &elf.errors {
                // A split debug file's NOBITS section is normal: the
                // stripped file next to it holds the code. Not damage.
                if !matches!(error, ReadError::NoBits { .. }) {
                    f(Part::Problem { member, error });
                }
            }
        }
        Object::Archive(members) => {
            for m in members {
                match &m.object {
                    Ok(Object::Archive(_)) => {}
                    Ok(inner) => visit_in(inner, Some(m.name), f),
                    Err(ReadError::ThinMember) => {}
                    Err(error) => f(Part::Problem { member: Some(m.name), error }),
                }
            }
        }
        Object::Fatbin(region) => f(Part::Region { member, section: "fatbin", region }),
        Object::Cubin(info) => f(Part::Cubin { member, info }),
        Object::Other => {}
    }
}

/// What [`for_each_unit`] calls: the thin member's name (none for the file
/// itself) and the unit, or why the member could not be read.
pub type UnitFn<'f> = dyn FnMut(Option<&[u8]>, Result<&Object<'_>, String>) + 'f;

/// Calls `unit` with the file's object, then, for a thin archive, with each
/// member read from its own file (`Err`: why it could not be read, the
/// member's path named). `path` is the file's path; without it (bytes only)
/// a thin archive's members are not read.
pub fn for_each_unit(object: &Object<'_>, path: Option<&Path>, unit: &mut UnitFn<'_>) {
    unit(None, Ok(object));
    let (Object::Archive(members), Some(archive)) = (object, path) else { return };
    for m in members.iter().filter(|m| m.thin) {
        // A member of an unpacked NAR may not lead out of it.
        let file = match host::thin_member_path(archive, m.name) {
            Ok(file) => file,
            Err(e) => {
                unit(Some(m.name), Err(e.to_string()));
                continue;
            }
        };
        match host::map(&file) {
            Ok(bytes) => match host::parse_member(&bytes) {
                Ok(inner) => unit(Some(m.name), Ok(&inner)),
                Err(e) => unit(Some(m.name), Err(e.to_string())),
            },
            Err(e) => unit(
                Some(m.name),
                Err(format!("{}: {}", file.display(), crate::error::describe_io(&e))),
            ),
        }
    }
}

/// The file ranges a container scan leaves out: the fatbin sections (read
/// already), executable and not-loaded sections (host code, symbols, debug
/// info), and everything for a raw fatbin or a bare cubin (the whole file is
/// device code already read).
pub fn scan_skip(object: &Object<'_>) -> Vec<(u64, u64)> {
    let mut skip = Vec::new();
    match object {
        Object::Elf(elf) => {
            skip.extend(elf.no_fatbin.iter().copied());
            skip.extend(elf.sections.iter().map(|s| (s.offset, s.offset.saturating_add(s.size))));
        }
        Object::Archive(members) => {
            for m in members {
                if let Ok(inner) = &m.object {
                    skip.extend(scan_skip(inner));
                }
            }
        }
        Object::Fatbin(_) | Object::Cubin(_) => skip.push((0, u64::MAX)),
        Object::Other => {}
    }
    skip
}

/// Containers outside the fatbin sections (`data` is the whole file):
/// what `--summary --scan` lists and the audit adds to its model. cuFFT 11.4
/// keeps ~24,000 in `.data`, registered by its own code rather than through
/// `.nv_fatbin`. `walked` is told which bytes were searched (page release).
pub fn scan<'a>(
    data: &'a [u8],
    object: &Object<'_>,
    walked: &(dyn Fn(&[u8]) + Sync),
) -> Vec<Container<'a>> {
    crate::fatbin::container::scan_with(data, 0, &scan_skip(object), walked)
}

/// How much of each stretch a scan would search [`probe`] reads: the
/// start of a data section, where cuFFT 11.4's first container sits (6 KiB
/// into its 280 MB `.ldata`).
pub const PROBE_BYTES: u64 = 64 << 10;

/// The cheap form of [`scan`] that `--no-scan` runs: the first
/// [`PROBE_BYTES`] of every data section. Returns the file offset of the
/// first container found, if any: then fatbins lie outside the sections
/// and were left unread (a container further in is not seen at all: CUPTI's
/// sit 363 KiB into its `.rodata`).
pub fn probe(data: &[u8], object: &Object<'_>) -> Option<u64> {
    let windows: Vec<(u64, u64)> = data_sections(object).into_iter().map(probe_window).collect();
    crate::fatbin::container::probe(data, &windows)
}

/// The data sections a scan would search, whole (`[start, end)`), sorted:
/// every loaded section that is not host code and not a fatbin section. The
/// default reading searches them all ([`scan_sections`]); what [`scan`]
/// searches besides is the bytes no section holds (the ELF header, the
/// program and section header tables, alignment padding), which nothing
/// loads as data. Where sections overlap, each byte is in one of them only
/// (a table of 65,000 headers over one region is searched once, and the
/// skip ranges are looked up by binary search, not once per section).
///
/// Containers outside the fatbin sections sit in `.rodata` (CUPTI's 3
/// in its 0.6-1 MB `.rodata`, from 363 KiB to 730 KiB in; cuSPARSE's 34-36
/// from 672 KiB into a 12 MB `.rodata`), `.data` (cuFFT 10.9-12.5, cuRAND
/// 10.4 from 20 MB in), `.ldata` (cuFFT 11.3) and `.cask_resource`
/// (cuBLASLt, cuDNN's precompiled engines from 2 MB in), anywhere in the
/// section: no probe of a section's start or samples of it finds them all
/// (docs/cuda-elf-inspect.md, "Where the code outside the sections sits").
pub fn data_sections(object: &Object<'_>) -> Vec<(u64, u64)> {
    let skip = Disjoint::new(scan_skip(object).into_iter().map(|(s, e)| (s, e, ())));
    let mut sections = Vec::new();
    loaded_sections(object, &mut sections);
    Disjoint::new(sections.into_iter().map(|(s, e)| (s, e, ())))
        .pieces()
        .iter()
        .filter(|p| skip.find(p.start).is_none())
        .map(|p| (p.start, p.end))
        .collect()
}

/// The part of a section [`probe`] searches: its first [`PROBE_BYTES`].
fn probe_window((start, end): (u64, u64)) -> (u64, u64) {
    (start, end.min(start.saturating_add(PROBE_BYTES)))
}

/// The containers of `sections` (file ranges), each searched whole, as
/// [`scan`] searches everything: the default reading, of [`data_sections`].
pub fn scan_sections<'a>(
    data: &'a [u8],
    sections: &[(u64, u64)],
    walked: &(dyn Fn(&[u8]) + Sync),
) -> Vec<Container<'a>> {
    crate::fatbin::container::scan_with(data, 0, &outside_of(sections), walked)
}

/// [`scan_sections`] handing its containers over a batch at a time (see
/// [`crate::fatbin::container::scan_until`]) until `stop` says enough.
pub fn scan_sections_until<'a>(
    data: &'a [u8],
    sections: &[(u64, u64)],
    walked: &(dyn Fn(&[u8]) + Sync),
    batch: usize,
    stop: &mut dyn FnMut(Vec<Container<'a>>) -> bool,
) {
    crate::fatbin::container::scan_until(data, 0, &outside_of(sections), walked, batch, stop)
}

/// The ranges a scan of `sections` skips: everything else.
fn outside_of(sections: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut sorted = sections.to_vec();
    sorted.sort_unstable();
    let mut skip = Vec::new();
    let mut at = 0u64;
    for (start, end) in sorted {
        if start > at {
            skip.push((at, start));
        }
        at = at.max(end);
    }
    skip.push((at, u64::MAX));
    skip
}

fn loaded_sections(object: &Object<'_>, out: &mut Vec<(u64, u64)>) {
    match object {
        Object::Elf(elf) => out.extend(elf.data.iter().copied()),
        Object::Archive(members) => {
            for m in members {
                if let Ok(inner) = &m.object {
                    loaded_sections(inner, out);
                }
            }
        }
        _ => {}
    }
}

/// One piece of device code: an entry (a `--concat` bundle's part comes
/// with its bundle, which holds the bytes) or a bare cubin.
#[derive(Debug, Clone, Copy)]
pub enum Leaf<'e, 'a> {
    /// A fatbin entry.
    Entry {
        /// The entry (never a bundle itself).
        entry: &'e Entry<'a>,
        /// The `--concat` bundle holding it.
        bundle: Option<&'e Entry<'a>>,
        /// Its container (one translation unit's code) also holds a cubin
        /// too large to be a link stub: the unit has kernels.
        beside_code: bool,
    },
    /// A bare cubin's header.
    Cubin(&'e CubinInfo),
}

/// The leaves of some containers, bundles replaced by their parts.
pub fn leaves<'e, 'a>(containers: &'e [Container<'a>], out: &mut Vec<Leaf<'e, 'a>>) {
    let big_cubin = |e: &Entry<'_>| e.kind == Kind::Elf && e.plain_size() > STUB_MAX_BYTES;
    for c in containers {
        let beside_code = c.entries.iter().any(|e| big_cubin(e) || e.parts.iter().any(big_cubin));
        for e in &c.entries {
            if e.kind == Kind::Concat {
                out.extend(e.parts.iter().map(|p| Leaf::Entry {
                    entry: p,
                    bundle: Some(e),
                    beside_code,
                }));
            } else {
                out.push(Leaf::Entry { entry: e, bundle: None, beside_code });
            }
        }
    }
}

/// Every leaf and every damage message of one unit (see [`for_each_unit`]),
/// messages prefixed with the member (`k.o: .nv_fatbin: offset ...`).
pub fn collect<'e, 'a>(object: &'e Object<'a>) -> (Vec<Leaf<'e, 'a>>, Vec<String>) {
    let mut out = Vec::new();
    let mut damage = Vec::new();
    visit(object, &mut |part| match part {
        Part::Section { .. } => {}
        Part::Region { member, section, region } => {
            leaves(&region.containers, &mut out);
            damage
                .extend(region.errors.iter().map(|e| prefixed(member, &format!("{section}: {e}"))));
        }
        Part::Cubin { member, info } => match info {
            Ok(info) => out.push(Leaf::Cubin(info)),
            Err(e) => damage.push(prefixed(member, &e.to_string())),
        },
        Part::Problem { member, error } => damage.push(prefixed(member, &error.to_string())),
    });
    (out, damage)
}

/// `member: text`, or `text` outside an archive.
pub fn prefixed(member: Option<&[u8]>, text: &str) -> String {
    match member {
        Some(m) => format!("{}: {text}", String::from_utf8_lossy(m)),
        None => text.to_string(),
    }
}
