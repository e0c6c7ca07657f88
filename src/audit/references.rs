//! Which Nix store paths a file references, and where (docs/references.md):
//! the file's bytes read once by [`crate::store::references`], each hit then
//! located in the file's structure: the ELF section (or archive member) that
//! holds it and, inside device code, the fatbin entry (kind, architecture,
//! codec, header or payload). A reference inside a compressed payload is one
//! Nix cannot see: it is searched for in the decompressed PTX of an entry
//! whose header names a store path (nvcc writes the source file's path into
//! the header even when the payload is compressed), and reported as hidden.

use std::path::Path;

use serde::Serialize;

use crate::devicecode::host::{self, Object};
use crate::elf::ranges::Disjoint;
use crate::fatbin::{codec, Codec, Entry, Kind, Payload};
use crate::store::references::{Candidates, Hit};

/// What reference finding looks for, for one run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Which hashes count.
    pub candidates: Candidates,
    /// The store folder the references are named in (`/nix/store`).
    pub store_dir: String,
    /// Paths that are build-only whatever their name: `--forbid-reference`
    /// and the build's `disallowedReferences`/`disallowedRequisites` (store
    /// paths or base names).
    pub forbidden: Vec<String>,
    /// Recognise the reviewed build-only set by name and content.
    pub defaults: bool,
    /// Inside a build: the build folder (`$NIX_BUILD_TOP`), which no output
    /// may name.
    pub build_top: Option<String>,
    /// Inside a build: its outputs' base names, which reference each other
    /// by design and are never build-only.
    pub outputs: Vec<String>,
}

/// One reference, located.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reference {
    /// The store path referenced (`/nix/store/<hash>-cuda_nvcc-13.0`), or
    /// the build folder.
    pub target: String,
    /// What follows it (`/bin/nvcc`), if it goes on as a path.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tail: String,
    /// File offset of the hash (of a link's target: offset in the target).
    pub offset: u64,
    /// The ELF section holding it (`.nv_fatbin`, `.dynstr`), `symlink` for
    /// a link's target, `name` for the entry's own name (file, link or
    /// folder); none for other files (the offset says where).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
    /// The archive member holding it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// Inside device code: the fatbin entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryPlace>,
    /// Whether Nix's scanner sees these bytes (false: inside a compressed
    /// payload, found only once decompressed).
    pub visible: bool,
}

/// Where in a fatbin entry a reference sits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntryPlace {
    /// File offset of the entry's header.
    pub offset: u64,
    /// `ptx`, `elf` (a cubin), `lto-ir`, ...
    pub kind: &'static str,
    /// `sm_90`, `sm_100a`.
    pub arch: String,
    /// How the payload is stored.
    pub codec: Codec,
    /// `header` (the identifier and options strings), `payload` (stored
    /// bytes), or `decompressed` (hidden from Nix).
    pub part: &'static str,
}

impl Reference {
    /// The base name of the target (`<hash>-name`).
    pub fn base(&self) -> &str {
        self.target.rsplit('/').next().unwrap_or(&self.target)
    }

    /// Where, in words: `section .nv_fatbin, offset 0x1a0 (ptx sm_90 entry
    /// header, uncompressed)`, `offset 0x12`.
    pub fn place(&self) -> String {
        let mut text = String::new();
        if let Some(m) = &self.member {
            text.push_str(&format!("member {m}, "));
        }
        match &self.section {
            Some(s) if s == "symlink" => {
                text.push_str(&format!("the link's target, offset {:#x}", self.offset))
            }
            Some(s) if s == "name" => {
                text.push_str(&format!("the entry's name, offset {:#x}", self.offset))
            }
            Some(s) => text.push_str(&format!("section {s}, offset {:#x}", self.offset)),
            None => text.push_str(&format!("offset {:#x}", self.offset)),
        }
        if let Some(e) = &self.entry {
            let codec = match e.codec {
                Codec::None => "uncompressed".to_string(),
                c => format!("{}-compressed", c.name()),
            };
            text.push_str(&format!(" ({} {} entry {}, {codec})", e.kind, e.arch, e.part));
        }
        if !self.visible {
            text.push_str(", invisible to Nix");
        }
        text
    }

    /// Whether Nixpkgs' `remove-references-to` may rewrite this occurrence
    /// without breaking the file: bytes Nix sees, outside any compressed
    /// payload (rewriting a compressed stream's bytes corrupts what it
    /// decompresses to); an entry's header is stored uncompressed.
    pub fn rewritable(&self) -> bool {
        self.visible
            && self.entry.as_ref().is_none_or(|e| e.codec == Codec::None || e.part == "header")
    }
}

/// The references of one file or link at `local` (the bytes read; `None`:
/// neither a regular file nor a link).
pub fn scan_path(local: &Path, settings: &Settings) -> std::io::Result<Option<Vec<Reference>>> {
    let meta = std::fs::symlink_metadata(local)?;
    if meta.file_type().is_symlink() {
        // Nix serialises a link's target into the NAR it scans.
        let target = std::fs::read_link(local)?;
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str()).to_vec();
        let mut refs = plain(&bytes, settings, &mut |hit| Reference {
            section: Some("symlink".into()),
            ..unlocated(settings, hit)
        });
        refs.extend(build_top(&bytes, settings, Some("symlink")));
        return Ok(Some(refs));
    }
    if !meta.is_file() {
        return Ok(None);
    }
    Ok(Some(scan_mapped(&host::map(local)?, settings)))
}

/// References in an entry's own name below the output (`name`, the last
/// component): Nix serialises every name into the NAR it scans, so a store
/// hash in a file or folder name keeps that path alive. A name cannot hold
/// the store folder, so in the store-folder mode a bare `<hash>-<name>`
/// counts when that store path exists (the longest prefix of the name that
/// does: `<hash>-foo` for a file `<hash>-foo.pc`).
pub fn scan_name(name: &[u8], settings: &Settings) -> Vec<Reference> {
    let named = |r: Reference| Reference { section: Some("name".into()), ..r };
    match &settings.candidates {
        Candidates::Paths(_) => plain(name, settings, &mut |hit| named(unlocated(settings, hit))),
        Candidates::StoreDir(store) => crate::store::references::bare_names(name)
            .into_iter()
            .filter_map(|(at, base)| {
                let path = existing_prefix(store, &base)?;
                let hit = Hit { offset: at as u64, path, tail: String::new() };
                Some(named(unlocated(settings, hit)))
            })
            .collect(),
    }
}

/// The longest prefix of `base` (`<hash>-<name>`) that is a path in `store`.
fn existing_prefix(store: &str, base: &str) -> Option<String> {
    let shortest = crate::store::references::HASH_LEN + 2;
    (shortest..=base.len())
        .rev()
        .map(|n| &base[..n])
        .find(|p| Path::new(store).join(p).symlink_metadata().is_ok())
        .map(str::to_string)
}

/// The references of a regular file's bytes, mapped already (by the audit,
/// which has read its headers and device code from the same map).
pub fn scan_mapped(data: &host::Mapped, settings: &Settings) -> Vec<Reference> {
    data.sequential();
    let hits = settings.candidates.scan(data, 0, &|done| data.release(done));
    let mut refs = if hits.is_empty() { Vec::new() } else { locate(data, hits, settings) };
    refs.extend(build_top(data, settings, None));
    refs
}

fn unlocated(settings: &Settings, hit: Hit) -> Reference {
    Reference {
        target: format!("{}/{}", settings.store_dir, hit.path),
        tail: hit.tail,
        offset: hit.offset,
        section: None,
        member: None,
        entry: None,
        visible: true,
    }
}

fn plain(
    bytes: &[u8],
    settings: &Settings,
    make: &mut dyn FnMut(Hit) -> Reference,
) -> Vec<Reference> {
    settings.candidates.scan(bytes, 0, &|_| {}).into_iter().map(make).collect()
}

/// Mentions of the build folder (inside a build), as references of their own.
fn build_top(data: &[u8], settings: &Settings, section: Option<&str>) -> Vec<Reference> {
    let Some(top) = settings.build_top.as_deref().filter(|t| t.len() > 1) else {
        return Vec::new();
    };
    let needle = format!("{top}/");
    memchr::memmem::find_iter(data, needle.as_bytes())
        .map(|at| Reference {
            target: top.to_string(),
            tail: String::new(),
            offset: at as u64,
            section: section.map(str::to_string),
            member: None,
            entry: None,
            visible: true,
        })
        .collect()
}

/// Names the section, member and fatbin entry of each hit, and adds what
/// compressed PTX hides. Each hit is a binary search in sorted, disjoint
/// ranges ([`Disjoint`]), not a walk of every section and entry: 20,000
/// hits in a file of 3,000 overlapping sections took 134 s.
fn locate(data: &[u8], hits: Vec<Hit>, settings: &Settings) -> Vec<Reference> {
    let names = section_names(data);
    let object = host::parse(data).ok();
    let mut entries = Vec::new();
    let mut members: Vec<(u64, String)> = Vec::new();
    if let Some(object) = &object {
        collect_entries(object, &mut entries);
        if let Object::Archive(list) = object {
            members = list
                .iter()
                .map(|m| (m.offset, String::from_utf8_lossy(m.name).into_owned()))
                .collect();
        }
    }
    // The member holding an offset: the last one (members are in file
    // order) that starts at or before it, by binary search.
    let mut starts: Vec<(u64, usize)> =
        members.iter().enumerate().map(|(i, (o, _))| (*o, i)).collect();
    starts.sort_by_key(|&(o, i)| (o, std::cmp::Reverse(i)));
    starts.dedup_by_key(|m| m.0);
    let member_at = |at: u64| {
        let i = starts.partition_point(|&(o, _)| o <= at);
        let (_, index) = *starts.get(i.checked_sub(1)?)?;
        Some(members[index].1.clone())
    };
    let spans = Disjoint::new(entries.iter().map(|e| {
        let span = entry_span(e);
        (span.start, span.end, *e)
    }));
    let mut refs: Vec<Reference> = hits
        .into_iter()
        .map(|hit| {
            let at = hit.offset;
            let mut r = unlocated(settings, hit);
            r.section = names.find(at).map(|p| p.value.clone());
            r.member = member_at(at);
            if let Some(e) = spans.find(at).map(|p| p.value) {
                let header_end = e.offset + u64::from(e.header_size);
                let part = if at < header_end { "header" } else { "payload" };
                r.entry = Some(place(e, part));
            }
            r
        })
        .collect();
    // An entry whose header names a store path but whose payload is
    // compressed: the PTX inside may name it again (-lineinfo), unseen by Nix.
    let named: std::collections::HashSet<u64> =
        refs.iter().filter_map(|r| r.entry.as_ref().map(|p| p.offset)).collect();
    let mut hidden = Vec::new();
    for e in &entries {
        if !named.contains(&e.offset) || e.codec == Codec::None || e.kind != Kind::Ptx {
            continue;
        }
        let Ok(bytes) = codec::plain_within(e, &codec::Budget::per_file()) else { continue };
        let section = names.find(e.offset).map(|p| &p.value);
        hidden.extend(settings.candidates.scan(&bytes, 0, &|_| {}).into_iter().map(|hit| {
            Reference {
                section: section.cloned(),
                entry: Some(place(e, "decompressed")),
                visible: false,
                ..unlocated(settings, hit)
            }
        }));
    }
    refs.extend(hidden);
    refs
}

fn place(e: &Entry<'_>, part: &'static str) -> EntryPlace {
    EntryPlace { offset: e.offset, kind: e.kind.name(), arch: e.arch.name(), codec: e.codec, part }
}

/// The file bytes an entry takes: its header and stored payload.
fn entry_span(e: &Entry<'_>) -> std::ops::Range<u64> {
    let end = match e.payload {
        Payload::Stored(bytes) => e.offset + u64::from(e.header_size) + bytes.len() as u64,
        Payload::Part { .. } => e.offset,
    };
    e.offset..end
}

/// Every stored entry of a parsed file (archive members included).
fn collect_entries<'e, 'a>(object: &'e Object<'a>, out: &mut Vec<&'e Entry<'a>>) {
    crate::devicecode::traverse::visit(object, &mut |part| {
        if let crate::devicecode::traverse::Part::Region { region, .. } = part {
            out.extend(region.entries().filter(|e| matches!(e.payload, Payload::Stored(_))));
        }
    });
}

/// An ELF file's sections with bytes, by file range (where sections
/// overlap, the one that starts first names the bytes); empty for other
/// files.
fn section_names(data: &[u8]) -> Disjoint<String> {
    let Ok((elf, _)) = crate::elf::Elf::parse_lenient(data) else {
        return Disjoint::new(std::iter::empty());
    };
    Disjoint::new(
        elf.shdrs.iter().filter(|sh| sh.sh_type != crate::elf::SHT_NOBITS && sh.size > 0).map(
            |sh| {
                let name = elf.section_name(sh).map(String::from_utf8_lossy).unwrap_or_default();
                (sh.offset, sh.offset.saturating_add(sh.size), name.into_owned())
            },
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_uncompressed_visible_bytes_are_rewritable() {
        let mut r = Reference {
            target: "/nix/store/0c7xgv7n2pn1ljvm3xrjjk2x2bbvyq1f-cuda_nvcc-13.0".into(),
            tail: String::new(),
            offset: 16,
            section: Some(".nv_fatbin".into()),
            member: None,
            entry: None,
            visible: true,
        };
        assert!(r.rewritable());
        assert_eq!(r.base(), "0c7xgv7n2pn1ljvm3xrjjk2x2bbvyq1f-cuda_nvcc-13.0");
        let e = EntryPlace {
            offset: 8,
            kind: "ptx",
            arch: "sm_90".into(),
            codec: Codec::Zstd,
            part: "payload",
        };
        r.entry = Some(e.clone());
        assert!(!r.rewritable());
        r.entry = Some(EntryPlace { part: "header", ..e.clone() });
        assert!(r.rewritable());
        r.entry = Some(e);
        assert_eq!(
            r.place(),
            "section .nv_fatbin, offset 0x10 (ptx sm_90 entry payload, zstd-compressed)"
        );
    }
}
