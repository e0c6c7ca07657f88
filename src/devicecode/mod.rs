//! The one model of a file's device code and the one walk that builds it
//! (issue 14; docs/cuda-elf-inspect.md, "One model of device code").
//!
//! [`traverse`] walks a parsed file (ELF sections, archive members including
//! a thin archive's, raw fatbins, bare cubins, containers outside the
//! sections) and [`model`] says per architecture what exists. `--summary`
//! ([`crate::inspect`]) and the audit ([`crate::audit`]) both read files
//! through here; the cuobjdump listing ([`crate::fatbin::listing`]) reads the
//! same parsed object in cuobjdump's own order.

pub mod model;
pub mod traverse;

use std::path::Path;

pub use model::{ArchCode, Depth, DeviceCode, Ptx, Sass};

use crate::fatbin::codec;
use crate::hostelf::Object;

/// What reading a file's device code found: the model and the damage met
/// (sentences naming the member and section).
#[derive(Debug, Clone, Default)]
pub struct Read {
    /// The device code.
    pub code: DeviceCode,
    /// Damage, in file order (a NOBITS section is not damage).
    pub damage: Vec<String>,
}

/// Builds the model of a parsed file. `data` is the whole file (for the
/// container scan), `path` its path (a thin archive's members are read
/// from the files next to it). With `scan`, containers outside the fatbin
/// sections are searched for and included. `release` is told which bytes of
/// `data` are read (see [`crate::hostelf::Mapped::release`]).
pub fn read<'a>(
    data: &'a [u8],
    object: &Object<'a>,
    path: Option<&Path>,
    depth: Depth,
    scan: bool,
    release: &dyn Fn(&[u8]),
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
    if scan {
        let containers = traverse::scan(data, object, &mut |p| release(p));
        out.code.scanned_containers = containers.len();
        let mut leaves = Vec::new();
        traverse::leaves(&containers, &mut leaves);
        model::settle(&mut out.code, &leaves, depth, &budget, release);
    }
    out
}
