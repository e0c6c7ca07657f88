//! The one model of a file's device code and the one walk that builds it
//! (issue 14; docs/cuda-elf-inspect.md, "One model of device code").
//!
//! [`traverse`] walks a parsed file (ELF sections, archive members including
//! a thin archive's, raw fatbins, bare cubins, containers outside the
//! sections) and [`model`] says per architecture what exists. `--summary`
//! ([`crate::inspect`]) and the audit ([`crate::audit`]) both read files
//! through here; the cuobjdump listing ([`crate::inspect::listing`]) reads the
//! same parsed object in cuobjdump's own order.

pub mod host;
pub mod model;
pub mod traverse;

use std::path::Path;

pub use model::{ArchCode, Depth, DeviceCode, Ptx, Sass};

use crate::devicecode::host::Object;
use crate::fatbin::codec;

/// What reading a file's device code found: the model and the damage met
/// (sentences naming the member and section).
#[derive(Debug, Clone, Default)]
pub struct Read {
    /// The device code.
    pub code: DeviceCode,
    /// Damage, in file order (a NOBITS section is not damage).
    pub damage: Vec<String>,
}

/// How to look for containers outside the fatbin sections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// Not at all.
    None,
    /// The start of each data section only ([`traverse::probe`]): what is
    /// found there is not read, but recorded ([`DeviceCode::unscanned`]);
    /// further in, nothing is seen.
    Probe,
    /// Every loaded data section searched whole ([`traverse::data_sections`]),
    /// one SIMD substring search for the container magic at memory speed:
    /// code kept outside the fatbin sections sits anywhere in them (CUPTI's
    /// in the middle of a 0.6 MB `.rodata`, cuFFT's from the start of a
    /// 270 MB `.data`), so a probe of their starts or samples of them does
    /// not find it all. Left unread against [`Scan::Full`]: the bytes no
    /// section holds (headers, padding), which nothing loads as data.
    Found,
    /// Every byte outside the sections, host code and unloaded sections
    /// ([`traverse::scan`]); what is found is read into the model.
    Full,
}

/// Builds the model of a parsed file. `data` is the whole file (for the
/// container scan), `path` its path (a thin archive's members are read
/// from the files next to it). `release` is told which bytes of `data` are
/// read (see [`crate::devicecode::host::Mapped::release`]).
pub fn read<'a>(
    data: &'a [u8],
    object: &Object<'a>,
    path: Option<&Path>,
    depth: Depth,
    scan: Scan,
    release: &(dyn Fn(&[u8]) + Sync),
) -> Read {
    read_until(data, object, path, depth, scan, release, None)
}

/// [`read`] for a reader that needs only part of the model: with
/// `settled`, the containers outside the fatbin sections ([`Scan::Found`])
/// are read a batch at a time (as many chunks as threads, in file order),
/// and the scan stops as soon as `settled` says the model read so far
/// answers the reader's question (or is not started when the fatbin
/// sections answered it). `settled` must only say so of what more code
/// cannot change: the pre-flight's rule is "every GPU asked about has SASS"
/// (`audit::verdicts_settled`), and a file's code only ever adds
/// architectures. The model is then partial (`scanned_containers` counts
/// what was read); without `settled` it is [`read`]'s.
pub fn read_until<'a>(
    data: &'a [u8],
    object: &Object<'a>,
    path: Option<&Path>,
    depth: Depth,
    scan: Scan,
    release: &(dyn Fn(&[u8]) + Sync),
    settled: Option<&(dyn Fn(&DeviceCode) -> bool + Sync)>,
) -> Read {
    let budget = codec::Budget::per_file();
    let mut out = Read::default();
    traverse::for_each_unit(object, path, &mut |member, unit| match unit {
        Ok(unit) => {
            let (leaves, damage) = traverse::collect(unit);
            out.damage.extend(damage.iter().map(|d| traverse::prefixed(member, d)));
            model::settle(&mut out.code, &leaves, depth, &budget, release);
        }
        Err(e) => out.damage.push(traverse::prefixed(member, &e)),
    });
    if let (Some(settled), Scan::Found) = (settled, scan) {
        if !settled(&out.code) {
            let sections = traverse::data_sections(object);
            let batch = rayon::current_num_threads();
            traverse::scan_sections_until(data, &sections, release, batch, &mut |containers| {
                out.code.scanned_containers += containers.len();
                let mut leaves = Vec::new();
                traverse::leaves(&containers, &mut leaves);
                model::settle(&mut out.code, &leaves, depth, &budget, release);
                settled(&out.code)
            });
        }
        return out;
    }
    match outside(data, object, scan, release) {
        Outside::NotLooked => {}
        Outside::Unread(offset) => out.code.unscanned = offset,
        Outside::Read(containers) => {
            out.code.scanned_containers = containers.len();
            let mut leaves = Vec::new();
            traverse::leaves(&containers, &mut leaves);
            model::settle(&mut out.code, &leaves, depth, &budget, release);
        }
    }
    out
}

/// What a [`Scan`] found outside the fatbin sections.
pub enum Outside<'a> {
    /// [`Scan::None`]: nothing looked for.
    NotLooked,
    /// [`Scan::Probe`]: the offset of a container found and not read, if any.
    Unread(Option<u64>),
    /// [`Scan::Found`] or [`Scan::Full`]: the containers read.
    Read(Vec<crate::fatbin::Container<'a>>),
}

/// The containers outside the fatbin sections by `scan`'s rule: one
/// reading for the audit's model and `--summary`'s list. `release` is told
/// which bytes were searched.
pub fn outside<'a>(
    data: &'a [u8],
    object: &Object<'_>,
    scan: Scan,
    release: &(dyn Fn(&[u8]) + Sync),
) -> Outside<'a> {
    match scan {
        Scan::None => Outside::NotLooked,
        Scan::Probe => Outside::Unread(traverse::probe(data, object)),
        Scan::Found => {
            let sections = traverse::data_sections(object);
            Outside::Read(traverse::scan_sections(data, &sections, release))
        }
        Scan::Full => Outside::Read(traverse::scan(data, object, release)),
    }
}
