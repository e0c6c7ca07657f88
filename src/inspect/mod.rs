//! `cuda-elf-inspect --summary`: everything the reader knows about a file's
//! device code (entries, codecs, sizes), as data (`Serialize`, the JSON
//! schema in `docs/cuda-elf-inspect.md`) and as a short human summary; and,
//! in [`listing`], cuobjdump's `--list-elf`/`--list-ptx` byte for byte.
//!
//! The audit reads the same [`crate::devicecode`] model; this module is the
//! view of it that lists rather than judges.

pub mod listing;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::devicecode::host::{self, Object};
use crate::devicecode::model::ptx_has_entry;
use crate::devicecode::model::PtxIsa;
use crate::devicecode::traverse::{self, Part};
use crate::devicecode::{DeviceCode, Outside, Ptx, Sass, Scan};
use crate::fatbin::{codec, cubin, Arch, Codec, Container, Entry, FatbinError, Kind, Region};
use crate::output::ExitStatus;

/// How much to read.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Decompress payloads to read cubin headers, kernels and PTX targets.
    pub deep: bool,
    /// How to look for containers outside the fatbin sections: the
    /// audit's rule ([`Scan::Found`] by default, so `--summary` and the
    /// audit read the same code; [`Scan::Full`] with `--scan`;
    /// [`Scan::Probe`] with `--no-scan`, which says what it left unread).
    pub scan: Scan,
}

impl Default for Options {
    fn default() -> Self {
        Options { deep: false, scan: Scan::None }
    }
}

/// One entry, as reported.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EntryReport {
    /// Archive member holding the entry, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// Section (`.nv_fatbin`, `__nv_relfatbin`), `fatbin` for a raw fatbin,
    /// `scan` for a container found by the scan mode.
    pub section: &'static str,
    /// File offset of the container.
    pub container: u64,
    /// File offset of the entry header (of the part descriptor for concat parts).
    pub offset: u64,
    /// File offset of the `--concat` bundle this is a part of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concat: Option<u64>,
    /// `elf`, `ptx`, `lto-ir`, `unknown`.
    pub kind: Kind,
    /// Raw kind number.
    pub kind_raw: u16,
    /// Full architecture name (`sm_90a`).
    pub arch: Arch,
    /// SM number.
    pub sm: u32,
    /// `a`, `f` or empty.
    pub variant: &'static str,
    /// `none`, `lz4`, `zstd`.
    pub codec: Codec,
    /// Bytes stored in the file (0 for concat parts: the bundle holds them).
    pub stored_size: u64,
    /// Bytes once decompressed.
    pub plain_size: u64,
    /// `major.minor` (PTX ISA version for PTX).
    pub version: String,
    /// The header's major version, as a number.
    #[serde(skip)]
    pub major: u16,
    /// The header's minor version.
    #[serde(skip)]
    pub minor: u16,
    /// Raw flags.
    pub flags: u64,
    /// Debug build (`-G`).
    pub debug: bool,
    /// Identifier (trailing spaces kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identifier: Option<String>,
    /// Options recorded by nvcc.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub options: Option<String>,
    /// Deep mode: what the cubin says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cubin: Option<cubin::CubinInfo>,
    /// Deep mode: what the PTX says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ptx: Option<cubin::PtxInfo>,
    /// Deep mode: a cubin without kernels (nvlink link stub).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_stub: Option<bool>,
    /// Deep mode: the PTX declares an `.entry` (the model's rule,
    /// [`ptx_has_entry`]); `ptx.kernels` lists their names.
    #[serde(skip)]
    pub ptx_entry: Option<bool>,
    /// Deep mode: why the payload could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_error: Option<String>,
}

/// A fatbin section, as reported.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SectionReport {
    /// Archive member holding the section, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// Section name.
    pub name: &'static str,
    /// File offset.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// Containers read.
    pub containers: usize,
    /// Type NOBITS: a split debug file's section, with no bytes in the file.
    pub nobits: bool,
}

/// The architectures and sizes of a file at a glance: the sets are the
/// device-code model's ([`DeviceCode`]), as the audit reports them.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Summary {
    /// Architectures with SASS (in deep mode: with at least one kernel).
    pub sass: BTreeSet<Arch>,
    /// Architectures with PTX (in deep mode: with at least one `.entry`).
    pub ptx: BTreeSet<Arch>,
    /// Deep mode: architectures whose cubins are all link stubs (no kernels).
    pub link_stub_only: BTreeSet<Arch>,
    /// Deep mode: architectures whose PTX has no `.entry` (variables only).
    pub ptx_without_entries: BTreeSet<Arch>,
    /// Every architecture with LTO-IR.
    pub lto_ir: BTreeSet<Arch>,
    /// Per architecture with PTX, the highest PTX ISA version of its
    /// entries (entry headers; what a driver must JIT-compile).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ptx_isa: BTreeMap<Arch, PtxIsa>,
    /// Cubins (ELF entries and concat parts).
    pub cubins: usize,
    /// PTX entries.
    pub ptx_files: usize,
    /// Entries per codec.
    pub codecs: BTreeMap<Codec, usize>,
    /// Bytes stored.
    pub stored_bytes: u64,
    /// Bytes once decompressed.
    pub plain_bytes: u64,
    /// Whether link stubs were told apart (deep mode).
    pub deep: bool,
}

/// What a file was read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// Not read: it could not be opened, or its bytes are not an object
    /// the readers can take apart (`error` in reports).
    NotRead,
    /// Read, and no object: nothing to look into (`other`).
    NotObject,
    /// An object: `elf`, `archive`, `fatbin`, `cubin`.
    Object(&'static str),
}

impl FileFormat {
    /// The word reports use.
    pub fn name(self) -> &'static str {
        match self {
            FileFormat::NotRead => "error",
            FileFormat::NotObject => "other",
            FileFormat::Object(name) => name,
        }
    }
}

impl std::fmt::Display for FileFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// In JSON a format is its word (`"format": "elf"`).
impl serde::Serialize for FileFormat {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// Everything about one file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileReport {
    /// The path as given or found.
    pub path: String,
    /// `elf`, `archive`, `fatbin`, `cubin`, `other`, `error`.
    pub format: FileFormat,
    /// File size.
    pub size: u64,
    /// Whether the file holds device code (what cuobjdump would list).
    pub device_code: bool,
    /// Fatbin sections.
    pub sections: Vec<SectionReport>,
    /// Entries in file order (concat bundles as their parts).
    pub entries: Vec<EntryReport>,
    /// Entries of containers found outside the fatbin sections: every one
    /// with `--scan`; by default those of the data sections that hold
    /// containers (absent when there are none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scanned: Option<Vec<EntryReport>>,
    /// `--no-scan`: the file offset of a container found outside the fatbin
    /// sections and not read (the file's code is more than `entries`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unscanned_container: Option<u64>,
    /// The summary of `entries` and `scanned`.
    pub summary: Summary,
    /// Damage and read errors, as sentences.
    pub errors: Vec<String>,
}

impl FileReport {
    /// An empty report for `path`, format `error` until the file is read.
    pub fn new(path: String) -> Self {
        FileReport {
            path,
            format: FileFormat::NotRead,
            size: 0,
            device_code: false,
            sections: Vec::new(),
            entries: Vec::new(),
            scanned: None,
            unscanned_container: None,
            summary: Summary::default(),
            errors: Vec::new(),
        }
    }
}

/// Reads and reports one file.
pub fn inspect_path(path: &Path, options: Options) -> FileReport {
    let mut report = FileReport::new(path.to_string_lossy().into_owned());
    let data = match host::map(path) {
        Ok(d) => d,
        Err(e) => {
            report.errors.push(crate::error::describe_io(&e));
            return report;
        }
    };
    report.size = data.len() as u64;
    inspect_bytes_with(&data, options, &mut report, &|part| data.release(part), Some(path));
    report
}

/// Fills `report` from a file's bytes.
pub fn inspect_bytes(data: &[u8], options: Options, report: &mut FileReport) {
    inspect_bytes_with(data, options, report, &|_| {}, None)
}

/// [`inspect_bytes`], calling `release` with the bytes it is done reading
/// (headers walked, payloads decoded) so that a memory-mapped caller keeps
/// its resident memory independent of the file size ([`host::Mapped::release`]).
/// `thin_base` is the file's path when it is one: a thin archive's members
/// are read from the files next to it (their offsets are then in those files).
/// The walk is the device-code model's ([`traverse`]).
pub fn inspect_bytes_with(
    data: &[u8],
    options: Options,
    report: &mut FileReport,
    release: &(dyn Fn(&[u8]) + Sync),
    thin_base: Option<&Path>,
) {
    match host::parse_with(data, &mut |part| release(part)) {
        Ok(object) => {
            report.format = match object {
                Object::Other => FileFormat::NotObject,
                _ => FileFormat::Object(object.format()),
            };
            let budget = codec::Budget::per_file();
            let ctx = Ctx { options, release, budget: &budget };
            traverse::for_each_unit(&object, thin_base, &mut |member, unit| match unit {
                Ok(unit) => collect(unit, member, &ctx, report),
                Err(e) => report.errors.push(traverse::prefixed(member, &e)),
            });
            outside_sections(data, &object, &ctx, report);
        }
        Err(e) => report.errors.push(e.to_string()),
    }
    let all = report.entries.iter().chain(report.scanned.iter().flatten());
    report.summary = summarise(all, options.deep);
}

/// Fills `scanned` (or `unscanned_container`) with the containers outside
/// the fatbin sections, read by the audit's rule for `ctx.options.scan`.
fn outside_sections(data: &[u8], object: &Object<'_>, ctx: &Ctx<'_>, report: &mut FileReport) {
    let release = ctx.release;
    match crate::devicecode::outside(data, object, ctx.options.scan, release) {
        Outside::NotLooked => {}
        Outside::Unread(offset) => report.unscanned_container = offset,
        // The default reading lists nothing where it found nothing.
        Outside::Read(found) if found.is_empty() && ctx.options.scan == Scan::Found => {}
        Outside::Read(found) => {
            let mut scanned = Vec::new();
            for c in &found {
                push_container(c, None, "scan", ctx, &mut scanned);
            }
            report.scanned = Some(scanned);
        }
    }
}

/// What the walk over entries needs besides the entries.
struct Ctx<'r> {
    options: Options,
    release: &'r (dyn Fn(&[u8]) + Sync),
    /// The file's decompression budget.
    budget: &'r codec::Budget,
}

/// Reports one unit (the file, or a thin archive's member `unit_member`).
fn collect(
    object: &Object<'_>,
    unit_member: Option<&[u8]>,
    ctx: &Ctx<'_>,
    report: &mut FileReport,
) {
    let name =
        |m: Option<&[u8]>| m.or(unit_member).map(|m| String::from_utf8_lossy(m).into_owned());
    traverse::visit(object, &mut |part| match part {
        Part::Section { member, section, nobits } => {
            report.device_code |= !nobits;
            report.sections.push(SectionReport {
                member: name(member),
                name: section.name,
                offset: section.offset,
                size: section.size,
                containers: section.region.containers.len(),
                nobits,
            });
        }
        Part::Region { member, section, region } => {
            if section == "fatbin" {
                report.device_code = true;
            }
            push_region(region, name(member).as_deref(), section, ctx, report)
        }
        Part::Cubin { member, info } => {
            report.device_code = true;
            match info {
                Ok(info) => report.entries.push(EntryReport {
                    member: name(member),
                    section: "cubin",
                    container: 0,
                    offset: 0,
                    concat: None,
                    kind: Kind::Elf,
                    kind_raw: crate::fatbin::header::KIND_ELF,
                    arch: info.arch,
                    sm: info.arch.sm,
                    variant: info.arch.variant.suffix(),
                    codec: Codec::None,
                    stored_size: report.size,
                    plain_size: report.size,
                    version: String::new(),
                    major: 0,
                    minor: 0,
                    flags: 0,
                    debug: false,
                    identifier: None,
                    options: None,
                    link_stub: Some(info.is_link_stub()),
                    ptx_entry: None,
                    cubin: Some(info.clone()),
                    ptx: None,
                    decode_error: None,
                }),
                Err(e) => {
                    report.errors.push(traverse::prefixed(member.or(unit_member), &e.to_string()))
                }
            }
        }
        Part::Problem { member, error } => {
            report.errors.push(traverse::prefixed(member.or(unit_member), &error.to_string()))
        }
    });
}

fn push_region(
    region: &Region<'_>,
    member: Option<&str>,
    section: &'static str,
    ctx: &Ctx<'_>,
    report: &mut FileReport,
) {
    use rayon::prelude::*;
    // In deep mode entries are decoded in parallel (cuBLAS holds thousands,
    // two or three per container); order is kept.
    let all: Vec<(u64, &Entry<'_>)> = region
        .containers
        .iter()
        .flat_map(|c| c.entries.iter().map(move |e| (c.offset, e)))
        .collect();
    let one = |&(container, entry): &(u64, &Entry<'_>)| {
        entry_reports(entry, container, member, section, ctx)
    };
    if ctx.options.deep {
        let reports: Vec<Vec<EntryReport>> = all.par_iter().map(one).collect();
        report.entries.extend(reports.into_iter().flatten());
    } else {
        report.entries.extend(all.iter().flat_map(one));
    }
    report.errors.extend(region.errors.iter().map(|e: &FatbinError| match member {
        Some(m) => format!("{m}: {section}: {e}"),
        None => format!("{section}: {e}"),
    }));
}

/// Appends the reports of a container's entries (scan mode).
fn push_container(
    c: &Container<'_>,
    member: Option<&str>,
    section: &'static str,
    ctx: &Ctx<'_>,
    out: &mut Vec<EntryReport>,
) {
    out.extend(c.entries.iter().flat_map(|e| entry_reports(e, c.offset, member, section, ctx)));
}

/// The report(s) of one entry: one, or one per part of a `--concat` bundle.
fn entry_reports(
    entry: &Entry<'_>,
    container: u64,
    member: Option<&str>,
    section: &'static str,
    ctx: &Ctx<'_>,
) -> Vec<EntryReport> {
    let deep = ctx.options.deep;
    let mut out = Vec::with_capacity(entry.parts.len().max(1));
    if entry.kind == Kind::Concat {
        let plain = if deep { Some(codec::plain_within(entry, ctx.budget)) } else { None };
        for part in &entry.parts {
            let mut r = entry_report(part, container, member, section);
            r.concat = Some(entry.offset);
            // Parts are stored inside the bundle's (compressed) payload.
            r.codec = entry.codec;
            if let Some(plain) = &plain {
                match plain.as_ref().map_err(Clone::clone).and_then(|p| codec::part(part, p)) {
                    Ok(bytes) => look_inside(part.kind, bytes, &mut r),
                    Err(e) => r.decode_error = Some(e.to_string()),
                }
            }
            out.push(r);
        }
    } else {
        let mut r = entry_report(entry, container, member, section);
        if deep && matches!(entry.kind, Kind::Elf | Kind::Ptx) {
            match codec::plain_within(entry, ctx.budget) {
                Ok(bytes) => look_inside(entry.kind, &bytes, &mut r),
                Err(e) => r.decode_error = Some(e.to_string()),
            }
        }
        out.push(r);
    }
    if let (true, crate::fatbin::Payload::Stored(bytes)) = (deep, entry.payload) {
        (ctx.release)(bytes);
    }
    out
}

fn look_inside(kind: Kind, bytes: &[u8], r: &mut EntryReport) {
    match kind {
        Kind::Elf => match cubin::read_cubin(bytes) {
            Ok(info) => {
                r.link_stub = Some(info.is_link_stub());
                r.cubin = Some(info);
            }
            Err(e) => r.decode_error = Some(e.to_string()),
        },
        Kind::Ptx => {
            r.ptx = Some(cubin::read_ptx(bytes));
            r.ptx_entry = Some(ptx_has_entry(bytes));
        }
        _ => {}
    }
}

fn entry_report(
    e: &Entry<'_>,
    container: u64,
    member: Option<&str>,
    section: &'static str,
) -> EntryReport {
    let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
    EntryReport {
        member: member.map(str::to_string),
        section,
        container,
        offset: e.offset,
        concat: None,
        kind: e.kind,
        kind_raw: match e.kind {
            Kind::Ptx => 1,
            Kind::Elf => 2,
            Kind::LtoIr => 8,
            Kind::Concat => 0x100,
            Kind::Unknown(k) => k,
        },
        arch: e.arch,
        sm: e.arch.sm,
        variant: e.arch.variant.suffix(),
        codec: e.codec,
        stored_size: match e.payload {
            crate::fatbin::Payload::Stored(s) => s.len() as u64,
            crate::fatbin::Payload::Part { .. } => 0,
        },
        plain_size: e.plain_size(),
        version: format!("{}.{}", e.major, e.minor),
        major: e.major,
        minor: e.minor,
        flags: e.flags,
        debug: e.debug(),
        identifier: text(e.identifier),
        options: text(e.options),
        cubin: None,
        ptx: None,
        link_stub: None,
        ptx_entry: None,
        decode_error: None,
    }
}

/// The summary of a list of entries: sizes and codecs, and the
/// device-code model built from what each entry was found to hold.
pub fn summarise<'r>(entries: impl IntoIterator<Item = &'r EntryReport>, deep: bool) -> Summary {
    let mut s = Summary { deep, ..Summary::default() };
    let mut code = DeviceCode::default();
    for e in entries {
        *s.codecs.entry(e.codec).or_default() += 1;
        // Sizes come from headers: saturate rather than overflow.
        s.stored_bytes = s.stored_bytes.saturating_add(e.stored_size);
        s.plain_bytes = s.plain_bytes.saturating_add(e.plain_size);
        match e.kind {
            Kind::Elf => {
                s.cubins += 1;
                let sass = match e.link_stub {
                    Some(true) => Sass::LinkStub,
                    Some(false) => Sass::Kernels,
                    None => Sass::Unknown,
                };
                code.note_sass(e.arch, sass);
            }
            Kind::Ptx => {
                s.ptx_files += 1;
                let ptx = match e.ptx_entry {
                    Some(true) => Ptx::Entries,
                    Some(false) => Ptx::NoEntries,
                    None => Ptx::Unknown,
                };
                code.note_ptx(e.arch, ptx);
                code.note_ptx_isa(e.arch, PtxIsa { major: e.major, minor: e.minor });
            }
            Kind::LtoIr => code.note_lto_ir(e.arch),
            Kind::Concat | Kind::Unknown(_) => {}
        }
    }
    s.sass = code.sass();
    s.ptx = code.ptx();
    s.link_stub_only = code.link_stub_only();
    s.ptx_without_entries = code.ptx_without_entries();
    s.lto_ir = code.lto_ir();
    s.ptx_isa = code.ptx_isa();
    s
}

/// `--summary`'s reports of files and folders: folders walked in parallel
/// (files without device code and without damage left out), a `result` link
/// to a folder entered and its files named under the link, as the audit
/// does. Returns the reports, and the walk's errors (`path: reason`).
pub fn inspect_paths(
    paths: &[std::path::PathBuf],
    options: Options,
) -> (Vec<FileReport>, Vec<String>) {
    let mut reports = Vec::new();
    let mut errors = Vec::new();
    for path in paths {
        if !std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            // A path that cannot be read is reported like a damaged file.
            reports.push(inspect_path(path, options));
            continue;
        }
        // A folder exists: the resolution cannot fail (a race is a damaged file).
        let Ok(typed) = crate::fs::typed::resolve(path, crate::fs::typed::Follow::Everything)
        else {
            reports.push(inspect_path(path, options));
            continue;
        };
        let shown = |p: &Path| typed.shown(p);
        let walked =
            crate::fs::walk::walk(&typed.root, &crate::fs::walk::Options::default(), |p, kind| {
                if !kind.file_type.is_file() {
                    return None;
                }
                let mut r = inspect_path(p, options);
                r.path = shown(p).to_string_lossy().into_owned();
                (r.device_code || !r.errors.is_empty() && r.format != FileFormat::NotObject)
                    .then_some(r)
            });
        errors.extend(walked.errors.iter().map(|e| e.to_string()));
        reports.extend(walked.items.into_iter().map(|(_, r)| r));
    }
    (reports, errors)
}

/// `--summary`'s exit status: 2 when a path could not be read (or walked),
/// else 1 when a file's device code is damaged, else 0.
pub fn exit_status(reports: &[FileReport], walk_errors: usize) -> ExitStatus {
    ExitStatus::of(
        walk_errors > 0 || reports.iter().any(|r| r.format == FileFormat::NotRead),
        reports.iter().any(|r| !r.errors.is_empty()),
    )
}
