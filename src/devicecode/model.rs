//! What a file's device code is, per architecture: the one model behind
//! `--summary`, the audit's checks and both JSON reports
//! (docs/cuda-elf-inspect.md, "One model of device code").
//!
//! Per architecture (SM number and variant, [`Arch`]): SASS with kernels, a
//! link stub (a cubin without kernels, which nvlink adds and which runs
//! nothing) or not looked at; PTX with `.entry` functions, without any
//! (cuDNN's `libcudnn_ext.so.9` keeps 28 such PTX files of placeholder
//! globals), or not looked at; LTO-IR. A file without kernels needs no code
//! for any capability: only [`Sass::Kernels`], [`Ptx::Entries`] and what was
//! not looked at count as code ([`DeviceCode::codes`]).
//!
//! How deep to read is the caller's choice ([`Depth`]); the audit settles
//! each architecture with as few decodes as possible ([`settle`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::traverse::Leaf;
pub use super::traverse::STUB_MAX_BYTES;
use crate::cuda::capabilities::{Capability, Code, CodeKind};
use crate::fatbin::{codec, cubin, Arch, Entry, Kind, Payload};

/// An architecture's SASS. Ordered: of several cubins, the greatest wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sass {
    /// Only cubins without kernels (nvlink link stubs).
    LinkStub,
    /// Not looked inside (headers only, or the payload could not be decoded):
    /// counted as code, to stay on the safe side.
    Unknown,
    /// At least one cubin with a kernel.
    Kernels,
}

/// An architecture's PTX. Ordered as [`Sass`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ptx {
    /// Only PTX without `.entry` (variables, device functions).
    NoEntries,
    /// Not looked inside: counted as code.
    Unknown,
    /// At least one PTX with an `.entry`.
    Entries,
}

/// The PTX ISA version of a PTX entry (`9.5`), from its fatbin entry
/// header's major and minor fields: the same number as the PTX text's
/// `.version` directive (cuobjdump's `-ptx` prints both), read without
/// decompressing the text. A driver JIT-compiles PTX only up to its own CUDA
/// version's ISA ([`crate::cuda::driver::Driver::jits_ptx`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PtxIsa {
    /// Major (`9`).
    pub major: u16,
    /// Minor (`5`).
    pub minor: u16,
}

impl std::fmt::Display for PtxIsa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Serialize for PtxIsa {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What one architecture carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ArchCode {
    /// SASS, if any cubin targets it.
    pub sass: Option<Sass>,
    /// PTX, if any PTX targets it.
    pub ptx: Option<Ptx>,
    /// The highest PTX ISA version among its PTX entries: what a driver
    /// must JIT-compile (one module of too new PTX fails the whole load).
    pub ptx_isa: Option<PtxIsa>,
    /// LTO-IR targets it (never runnable as is).
    pub lto_ir: bool,
    /// Bytes its fatbin entries (SASS, PTX, LTO-IR) take in the file, as
    /// stored (compressed or not): what the architecture costs in the
    /// package, reported per architecture (`bytes` in the JSON, Hydra's
    /// `device-code` metrics). A bare cubin file has no entry and counts 0.
    pub stored_bytes: u64,
}

/// How deep to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Entry headers only: SASS and PTX are [`Sass::Unknown`], [`Ptx::Unknown`].
    Headers,
    /// Per architecture, as few payloads as settle it (the audit).
    PerArch,
    /// Every payload (`--summary`: per-entry kernels and targets).
    All,
}

/// A file's device code.
#[derive(Debug, Clone, Default)]
pub struct DeviceCode {
    /// Per architecture, what exists.
    pub archs: BTreeMap<Arch, ArchCode>,
    /// Cubins (entries, concat parts, a bare cubin).
    pub cubins: usize,
    /// PTX entries.
    pub ptx_files: usize,
    /// LTO-IR entries.
    pub lto_ir_files: usize,
    /// Payloads decompressed or read to settle what they hold.
    pub decoded: usize,
    /// Containers found outside the fatbin sections (and included here).
    pub scanned_containers: usize,
    /// The file offset of a container outside the fatbin sections that a
    /// probe found and nobody read (see [`super::Scan::Probe`]): the model
    /// is then incomplete, and says so.
    pub unscanned: Option<u64>,
    /// Payloads that could not be decoded (their architecture stays
    /// [`Sass::Unknown`] / [`Ptx::Unknown`]).
    pub decode_errors: Vec<String>,
}

impl DeviceCode {
    /// Records SASS of `arch` (the greater of what is known wins).
    pub fn note_sass(&mut self, arch: Arch, sass: Sass) {
        let a = self.archs.entry(arch).or_default();
        a.sass = a.sass.max(Some(sass));
    }

    /// Records PTX of `arch`.
    pub fn note_ptx(&mut self, arch: Arch, ptx: Ptx) {
        let a = self.archs.entry(arch).or_default();
        a.ptx = a.ptx.max(Some(ptx));
    }

    /// Records the PTX ISA version of one PTX entry of `arch` (the highest
    /// is kept).
    pub fn note_ptx_isa(&mut self, arch: Arch, isa: PtxIsa) {
        let a = self.archs.entry(arch).or_default();
        a.ptx_isa = a.ptx_isa.max(Some(isa));
    }

    /// Per architecture with PTX, the highest PTX ISA version of its entries.
    pub fn ptx_isa(&self) -> BTreeMap<Arch, PtxIsa> {
        self.archs.iter().filter_map(|(a, c)| Some((*a, c.ptx_isa?))).collect()
    }

    /// Adds `n` stored bytes of an entry of `arch`.
    pub fn note_bytes(&mut self, arch: Arch, n: u64) {
        let a = self.archs.entry(arch).or_default();
        a.stored_bytes = a.stored_bytes.saturating_add(n);
    }

    /// Per architecture with fatbin entries, the bytes they take as stored.
    pub fn stored_bytes(&self) -> BTreeMap<Arch, u64> {
        self.archs
            .iter()
            .filter(|(_, c)| c.stored_bytes > 0)
            .map(|(a, c)| (*a, c.stored_bytes))
            .collect()
    }

    /// Records LTO-IR of `arch`.
    pub fn note_lto_ir(&mut self, arch: Arch) {
        self.archs.entry(arch).or_default().lto_ir = true;
    }

    fn select(&self, keep: impl Fn(&ArchCode) -> bool) -> BTreeSet<Arch> {
        self.archs.iter().filter(|(_, c)| keep(c)).map(|(a, _)| *a).collect()
    }

    /// Architectures with SASS that runs (kernels, or not looked at).
    pub fn sass(&self) -> BTreeSet<Arch> {
        self.select(|c| matches!(c.sass, Some(Sass::Kernels | Sass::Unknown)))
    }

    /// Architectures whose cubins are all link stubs.
    pub fn link_stub_only(&self) -> BTreeSet<Arch> {
        self.select(|c| c.sass == Some(Sass::LinkStub))
    }

    /// Architectures with PTX that holds an entry (or was not looked at).
    pub fn ptx(&self) -> BTreeSet<Arch> {
        self.select(|c| matches!(c.ptx, Some(Ptx::Entries | Ptx::Unknown)))
    }

    /// Architectures whose PTX has no `.entry` at all.
    pub fn ptx_without_entries(&self) -> BTreeSet<Arch> {
        self.select(|c| c.ptx == Some(Ptx::NoEntries))
    }

    /// Every architecture with LTO-IR (whatever else it has).
    pub fn lto_ir(&self) -> BTreeSet<Arch> {
        self.select(|c| c.lto_ir)
    }

    /// Whether the file carries no device code (no entry of any kind, and
    /// none seen outside the sections unread).
    pub fn is_empty(&self) -> bool {
        self.cubins + self.ptx_files + self.lto_ir_files == 0 && self.unscanned.is_none()
    }

    /// Whether anything can run: a kernel in SASS or PTX (or code not looked
    /// at). A file of link stubs and entry-less PTX needs no code.
    pub fn has_code(&self) -> bool {
        !self.sass().is_empty() || !self.ptx().is_empty()
    }

    /// The code the capability rules reason about.
    pub fn codes(&self) -> Vec<Code> {
        let sass = self.sass().into_iter().map(|a| (CodeKind::Sass, a));
        let ptx = self.ptx().into_iter().map(|a| (CodeKind::Ptx, a));
        sass.chain(ptx)
            .filter_map(|(kind, a)| Some(Code { kind, target: capability(a)? }))
            .collect()
    }
}

/// The capability an architecture targets (`sm_100f` -> 10.0f).
pub fn capability(a: Arch) -> Option<Capability> {
    Capability::from_sm(a.sm, a.variant)
}

impl Serialize for DeviceCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View<'a> {
            sass: BTreeSet<Arch>,
            ptx: BTreeSet<Arch>,
            link_stub_only: BTreeSet<Arch>,
            ptx_without_entries: BTreeSet<Arch>,
            lto_ir: BTreeSet<Arch>,
            #[serde(skip_serializing_if = "BTreeMap::is_empty")]
            ptx_isa: BTreeMap<Arch, PtxIsa>,
            #[serde(skip_serializing_if = "BTreeMap::is_empty")]
            bytes: BTreeMap<Arch, u64>,
            cubins: usize,
            ptx_files: usize,
            lto_ir_files: usize,
            payloads_decoded: usize,
            scanned_containers: usize,
            #[serde(skip_serializing_if = "Option::is_none")]
            unscanned_container: Option<u64>,
            #[serde(skip_serializing_if = "<[String]>::is_empty")]
            decode_errors: &'a [String],
        }
        View {
            sass: self.sass(),
            ptx: self.ptx(),
            link_stub_only: self.link_stub_only(),
            ptx_without_entries: self.ptx_without_entries(),
            lto_ir: self.lto_ir(),
            ptx_isa: self.ptx_isa(),
            bytes: self.stored_bytes(),
            cubins: self.cubins,
            ptx_files: self.ptx_files,
            lto_ir_files: self.lto_ir_files,
            payloads_decoded: self.decoded,
            scanned_containers: self.scanned_containers,
            unscanned_container: self.unscanned,
            decode_errors: &self.decode_errors,
        }
        .serialize(s)
    }
}

/// Whether a PTX text declares an entry function: `.entry` as a word
/// (after a blank or a line start, before a blank). A byte search, not a
/// parse: PTX files reach megabytes.
pub fn ptx_has_entry(text: &[u8]) -> bool {
    entry_in(text, true)
}

/// [`ptx_has_entry`] on one window of a streamed text ([`codec::search_plain`]):
/// only the first window may match at its very start (later ones begin
/// with the previous window's tail, where the byte before is not known).
fn entry_in(text: &[u8], first: bool) -> bool {
    memchr::memmem::find_iter(text, b".entry").any(|at| {
        let before = at.checked_sub(1).and_then(|i| text.get(i));
        let after = text.get(at + 6);
        (if first {
            before.is_none_or(|b| b.is_ascii_whitespace())
        } else {
            before.is_some_and(|b| b.is_ascii_whitespace())
        }) && after.is_some_and(|b| b.is_ascii_whitespace())
    })
}

/// Adds `leaves` to `code`, reading as deep as `depth` says ([`Depth::All`]
/// is read like [`Depth::PerArch`] here; `--summary` decodes every entry
/// itself and records them with the `note_*` methods). `release` is called
/// with stored payload bytes once decoded (memory stays flat).
///
/// Per architecture: SASS already known to hold kernels is not read again;
/// one cubin over [`STUB_MAX_BYTES`] settles it unread; otherwise the
/// largest first (the likeliest to hold a kernel), until one does. PTX: a
/// PTX beside such a cubin (same container: the same translation unit)
/// settles its architecture unread; otherwise the largest first, searched
/// (streamed) up to its first `.entry`.
pub fn settle(
    code: &mut DeviceCode,
    leaves: &[Leaf<'_, '_>],
    depth: Depth,
    budget: &codec::Budget,
    release: &dyn Fn(&[u8]),
) {
    let (cubins, ptx) = sort_leaves(code, leaves, depth);
    if depth == Depth::Headers {
        for arch in cubins.keys() {
            code.note_sass(*arch, Sass::Unknown);
        }
        for arch in ptx.keys() {
            code.note_ptx(*arch, Ptx::Unknown);
        }
        return;
    }
    for (arch, list) in cubins {
        settle_sass(code, arch, list, budget, release);
    }
    for (arch, list) in ptx {
        settle_ptx(code, arch, list, budget, release);
    }
}

/// Per architecture, the entries that may settle it, each with the
/// `--concat` bundle holding it.
type Candidates<'e, 'a> = BTreeMap<Arch, Vec<(&'e Entry<'a>, Option<&'e Entry<'a>>)>>;

/// Notes what the headers say (counts, bare cubins, PTX ISAs, LTO-IR) and
/// returns the cubin and PTX entries whose contents settle the rest.
fn sort_leaves<'e, 'a>(
    code: &mut DeviceCode,
    leaves: &[Leaf<'e, 'a>],
    depth: Depth,
) -> (Candidates<'e, 'a>, Candidates<'e, 'a>) {
    let mut cubins: Candidates<'_, '_> = BTreeMap::new();
    let mut ptx: Candidates<'_, '_> = BTreeMap::new();
    for leaf in leaves {
        match *leaf {
            Leaf::Cubin(info) => {
                code.cubins += 1;
                code.note_sass(
                    info.arch,
                    if info.is_link_stub() { Sass::LinkStub } else { Sass::Kernels },
                );
            }
            Leaf::Entry { entry, bundle, beside_code } => match entry.kind {
                Kind::Elf => {
                    code.note_bytes(entry.arch, entry_bytes(entry, bundle));
                    code.cubins += 1;
                    cubins.entry(entry.arch).or_default().push((entry, bundle));
                }
                Kind::Ptx => {
                    code.ptx_files += 1;
                    code.note_bytes(entry.arch, entry_bytes(entry, bundle));
                    code.note_ptx_isa(
                        entry.arch,
                        PtxIsa { major: entry.major, minor: entry.minor },
                    );
                    // The PTX of a unit whose cubin is too large for a stub
                    // is that unit's kernels, compiled to PTX: code, unread.
                    if beside_code && depth != Depth::Headers {
                        code.note_ptx(entry.arch, Ptx::Entries);
                    }
                    ptx.entry(entry.arch).or_default().push((entry, bundle));
                }
                Kind::LtoIr => {
                    code.lto_ir_files += 1;
                    code.note_bytes(entry.arch, entry_bytes(entry, bundle));
                    code.note_lto_ir(entry.arch);
                }
                Kind::Concat | Kind::Unknown(_) => {}
            },
        }
    }
    (cubins, ptx)
}

/// The bytes one entry takes in the file: as stored, or (inside a
/// `--concat` bundle, which is compressed as a whole) its plain size there.
fn entry_bytes(entry: &Entry<'_>, bundle: Option<&Entry<'_>>) -> u64 {
    match bundle {
        None => entry.stored_size,
        Some(_) => entry.plain_size(),
    }
}

/// Settles one architecture's SASS: kernels or link stubs, reading as few
/// cubins as decide it (the largest first).
fn settle_sass(
    code: &mut DeviceCode,
    arch: Arch,
    mut list: Vec<(&Entry<'_>, Option<&Entry<'_>>)>,
    budget: &codec::Budget,
    release: &dyn Fn(&[u8]),
) {
    if code.archs.get(&arch).and_then(|c| c.sass) == Some(Sass::Kernels) {
        return;
    }
    if list.iter().any(|(e, _)| e.plain_size() > STUB_MAX_BYTES) {
        code.note_sass(arch, Sass::Kernels);
        return;
    }
    list.sort_by_key(|(e, _)| std::cmp::Reverse(e.plain_size()));
    let mut found = Sass::LinkStub;
    for (entry, bundle) in list {
        code.decoded += 1;
        let outcome = with_plain(entry, bundle, budget, |bytes| {
            cubin::read_cubin(bytes).map(|i| !i.is_link_stub()).map_err(|e| e.to_string())
        });
        release_payload(entry, bundle, release);
        match outcome {
            Ok(true) => {
                found = Sass::Kernels;
                break;
            }
            Ok(false) => {}
            Err(e) => {
                code.decode_errors.push(format!("{arch} at offset {}: {e}", entry.offset));
                found = found.max(Sass::Unknown);
            }
        }
    }
    code.note_sass(arch, found);
}

/// Settles one architecture's PTX: entries or none, searching as few PTX
/// files as decide it.
fn settle_ptx(
    code: &mut DeviceCode,
    arch: Arch,
    mut list: Vec<(&Entry<'_>, Option<&Entry<'_>>)>,
    budget: &codec::Budget,
    release: &dyn Fn(&[u8]),
) {
    if code.archs.get(&arch).and_then(|c| c.ptx) == Some(Ptx::Entries) {
        return;
    }
    // The largest first: a kernel's PTX is the likeliest to be large, and
    // the search stops at its first `.entry` (CUDA 13's cuRAND keeps
    // 2.4 MB PTX files beside 56-byte empty ones).
    list.sort_by_key(|(e, _)| std::cmp::Reverse(e.plain_size()));
    let mut found = Ptx::NoEntries;
    for (entry, bundle) in list {
        code.decoded += 1;
        let outcome = match bundle {
            Some(_) => with_plain(entry, bundle, budget, |bytes| Ok(ptx_has_entry(bytes))),
            None => codec::search_plain(entry, budget, 8, &mut |w, first| entry_in(w, first))
                .map_err(|e| e.to_string()),
        };
        release_payload(entry, bundle, release);
        match outcome {
            Ok(true) => {
                found = Ptx::Entries;
                break;
            }
            Ok(false) => {}
            Err(e) => {
                code.decode_errors.push(format!("PTX {arch} at offset {}: {e}", entry.offset));
                found = found.max(Ptx::Unknown);
            }
        }
    }
    code.note_ptx(arch, found);
}

/// Runs `f` on an entry's decompressed bytes (a part's: inside its bundle's).
fn with_plain<T>(
    entry: &Entry<'_>,
    bundle: Option<&Entry<'_>>,
    budget: &codec::Budget,
    f: impl FnOnce(&[u8]) -> Result<T, String>,
) -> Result<T, String> {
    match (bundle, &entry.payload) {
        (Some(bundle), Payload::Part { .. }) => {
            let plain = codec::plain_within(bundle, budget).map_err(|e| e.to_string())?;
            f(codec::part(entry, &plain).map_err(|e| e.to_string())?)
        }
        _ => f(&codec::plain_within(entry, budget).map_err(|e| e.to_string())?),
    }
}

fn release_payload(entry: &Entry<'_>, bundle: Option<&Entry<'_>>, release: &dyn Fn(&[u8])) {
    if let Payload::Stored(bytes) = bundle.unwrap_or(entry).payload {
        release(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fatbin::Variant;

    fn arch(sm: u32, variant: Variant) -> Arch {
        Arch { sm, variant }
    }

    #[test]
    fn windows_after_the_first_need_the_byte_before() {
        assert!(entry_in(b".entry k", true));
        assert!(!entry_in(b".entry k", false));
        assert!(entry_in(b"ab .entry k", false));
    }

    #[test]
    fn entries_are_found_as_words_only() {
        assert!(ptx_has_entry(b".version 9.0\n.visible .entry _Z1kv(\n"));
        assert!(ptx_has_entry(b".entry k\n"));
        assert!(!ptx_has_entry(b".version 9.0\n.global .align 4 .u32 table[16];\n"));
        assert!(!ptx_has_entry(b"// no .entry_point here\n.extern .func f;\n"));
        assert!(!ptx_has_entry(b"x.entry k"));
    }

    #[test]
    fn the_greatest_observation_wins_per_architecture() {
        let mut c = DeviceCode::default();
        let a = arch(100, Variant::Family);
        c.note_sass(a, Sass::LinkStub);
        assert_eq!(c.link_stub_only(), [a].into());
        c.note_sass(a, Sass::Kernels);
        c.note_sass(a, Sass::LinkStub);
        assert_eq!(c.sass(), [a].into());
        assert!(c.link_stub_only().is_empty());
    }

    #[test]
    fn stubs_and_entry_less_ptx_are_no_code() {
        let mut c = DeviceCode { cubins: 1, ptx_files: 1, ..DeviceCode::default() };
        let a = arch(80, Variant::Base);
        c.note_sass(a, Sass::LinkStub);
        c.note_ptx(a, Ptx::NoEntries);
        c.note_lto_ir(a);
        assert!(!c.is_empty());
        assert!(!c.has_code());
        assert!(c.codes().is_empty());
        assert_eq!(c.lto_ir(), [a].into());
        // Not looked at: counted as code.
        c.note_ptx(a, Ptx::Unknown);
        assert!(c.has_code());
        assert_eq!(c.codes().len(), 1);
    }

    #[test]
    fn family_code_keeps_its_variant_as_a_capability() {
        let cap = capability(arch(100, Variant::Family)).unwrap();
        assert_eq!(cap.to_string(), "10.0f");
    }
}
