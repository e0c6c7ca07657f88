//! The device-code facts the capability checks need: which architectures
//! carry real kernels (SASS), which carry PTX, and which only nvlink link
//! stubs.
//!
//! Telling a link stub from code needs a look inside the cubin (a stub has no
//! kernels), which means decompressing it. Decompressing every cubin of a
//! 750 MB library costs seconds, so per architecture as little as possible
//! is read. A cubin larger than [`STUB_MAX_BYTES`] once decompressed (the
//! fatbin entry header says so) is code without a look: nvlink's stubs
//! measure 0.7-2 KiB (nvcc 13 fixtures, NCCL, cuBLAS), while CuPy's thrust
//! module keeps one 6 MB cubin per architecture, whose decoding cost 1.7 s of
//! a 1.8 s audit. Such a cubin settles its architecture before anything is
//! decoded; cuBLASLt's 5,839 cubins need no decoding at all (smallest-first
//! decoding had read 2,207 of them). Where every cubin is small, the largest
//! comes first, as the likeliest to hold a kernel. Headers alone give
//! everything else.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::capabilities::{Capability, Code, CodeKind, Variant};
use crate::fatbin::{codec, cubin, Arch, Entry, Kind, Payload};
use crate::hostelf::Object;

/// Cubins larger than this (decompressed) are code, not link stubs.
pub const STUB_MAX_BYTES: u64 = 64 << 10;

/// What a file's device code means for the capability checks.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DeviceFacts {
    /// Architectures with SASS that holds at least one kernel.
    pub sass: BTreeSet<Arch>,
    /// Architectures with PTX.
    pub ptx: BTreeSet<Arch>,
    /// Architectures whose cubins are all kernel-less link stubs.
    pub link_stub_only: BTreeSet<Arch>,
    /// Architectures with LTO-IR only (not runnable as is).
    pub lto_ir: BTreeSet<Arch>,
    /// Cubins in the file.
    pub cubins: usize,
    /// PTX entries in the file.
    pub ptx_files: usize,
    /// Cubins decompressed to find kernels.
    pub cubins_decoded: usize,
    /// Payloads that could not be decoded (counted as code, to stay on the safe side).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub decode_errors: Vec<String>,
}

impl DeviceFacts {
    /// The code the capability rules reason about (SASS with kernels, PTX).
    pub fn codes(&self) -> Vec<Code> {
        let sass = self.sass.iter().map(|a| (CodeKind::Sass, a));
        let ptx = self.ptx.iter().map(|a| (CodeKind::Ptx, a));
        sass.chain(ptx)
            .filter_map(|(kind, a)| Some(Code { kind, target: capability(*a)? }))
            .collect()
    }

    /// Whether there is any runnable device code at all.
    pub fn has_code(&self) -> bool {
        !self.sass.is_empty() || !self.ptx.is_empty()
    }
}

/// The capability an architecture targets.
pub fn capability(a: Arch) -> Option<Capability> {
    let variant = match (a.arch_specific, a.family_specific) {
        (true, _) => Variant::Arch,
        (false, true) => Variant::Family,
        _ => Variant::Base,
    };
    Capability::from_sm(a.sm, variant)
}

/// A cubin to look at: the entry, and the `--concat` bundle holding it.
type Candidate<'e, 'a> = (&'e Entry<'a>, Option<&'e Entry<'a>>);

/// Collects the facts of a parsed object (archives: all members).
/// `release` is called with payload bytes once decoded (see [`super::audit_file`]).
pub fn facts(object: &Object<'_>, release: &dyn Fn(&[u8])) -> DeviceFacts {
    let mut f = DeviceFacts::default();
    let mut cubins: BTreeMap<Arch, Vec<Candidate<'_, '_>>> = BTreeMap::new();
    let mut entries = Vec::new();
    gather(object, &mut entries);
    for (entry, parent) in entries {
        match entry.kind {
            Kind::Elf => {
                f.cubins += 1;
                cubins.entry(entry.arch).or_default().push((entry, parent));
            }
            Kind::Ptx => {
                f.ptx_files += 1;
                f.ptx.insert(entry.arch);
            }
            Kind::LtoIr => {
                f.lto_ir.insert(entry.arch);
            }
            _ => {}
        }
    }
    if let Object::Cubin(Ok(info)) = object {
        f.cubins += 1;
        if info.is_link_stub() {
            f.link_stub_only.insert(info.arch);
        } else {
            f.sass.insert(info.arch);
        }
    }
    let budget = codec::Budget::per_file();
    for (arch, mut list) in cubins {
        // One cubin too large for a stub settles the architecture unread.
        if list.iter().any(|(e, _)| e.plain_size() > STUB_MAX_BYTES) {
            f.sass.insert(arch);
            continue;
        }
        // Otherwise the largest first: a stub is 0.7-2 KiB, so the largest
        // small cubin is the likeliest to hold a kernel, and costs at most
        // 64 KiB to decode. Only a stubs-only architecture reads them all.
        list.sort_by_key(|(e, _)| std::cmp::Reverse(e.plain_size()));
        let mut kernels = false;
        for (entry, parent) in list {
            f.cubins_decoded += 1;
            let outcome = has_kernels(entry, parent, &budget);
            if let Payload::Stored(bytes) = (parent.unwrap_or(entry)).payload {
                release(bytes);
            }
            match outcome {
                Ok(true) => {
                    kernels = true;
                    break;
                }
                Ok(false) => {}
                Err(e) => {
                    f.decode_errors.push(format!(
                        "{} at offset {}: {e}",
                        arch.name(),
                        entry.offset
                    ));
                    kernels = true;
                    break;
                }
            }
        }
        if kernels {
            f.sass.insert(arch);
        } else {
            f.link_stub_only.insert(arch);
        }
    }
    f.lto_ir.retain(|a| !f.sass.contains(a) && !f.ptx.contains(a));
    f
}

fn gather<'e, 'a>(object: &'e Object<'a>, out: &mut Vec<Candidate<'e, 'a>>) {
    let push_region = |region: &'e crate::fatbin::Region<'a>, out: &mut Vec<Candidate<'e, 'a>>| {
        for c in &region.containers {
            for e in &c.entries {
                if e.kind == Kind::Concat {
                    out.extend(e.parts.iter().map(|p| (p, Some(e))));
                } else {
                    out.push((e, None));
                }
            }
        }
    };
    match object {
        Object::Elf(elf) => {
            for s in &elf.sections {
                push_region(&s.region, out);
            }
        }
        Object::Archive(members) => {
            for m in members {
                if let Ok(o) = &m.object {
                    gather(o, out);
                }
            }
        }
        Object::Fatbin(region) => push_region(region, out),
        Object::Cubin(_) | Object::Other => {}
    }
}

fn has_kernels(
    entry: &Entry<'_>,
    parent: Option<&Entry<'_>>,
    budget: &codec::Budget,
) -> Result<bool, String> {
    let info = match (parent, &entry.payload) {
        (Some(bundle), Payload::Part { .. }) => {
            let plain = codec::plain_within(bundle, budget).map_err(|e| e.to_string())?;
            let bytes = codec::part(entry, &plain).map_err(|e| e.to_string())?;
            cubin::read_cubin(bytes).map_err(|e| e.to_string())?
        }
        _ => {
            let plain = codec::plain_within(entry, budget).map_err(|e| e.to_string())?;
            cubin::read_cubin(&plain).map_err(|e| e.to_string())?
        }
    };
    Ok(!info.is_link_stub())
}
