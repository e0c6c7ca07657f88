//! The audit behind `cuda-elf-inspect PATH...`: for every ELF file, archive,
//! fatbin or cubin under the given paths, the facts a Nix CUDA maintainer
//! asks about (device code, NEEDED, RUNPATH) and the findings of the checks
//! in [`checks`]. Files are examined in parallel; results are sorted.
//!
//! Reading is bounded: the file is memory-mapped, headers are parsed, and
//! per architecture as few payloads as settle it are decompressed; the
//! device code is the one model of [`crate::devicecode`], containers outside
//! the fatbin sections included.

pub mod args;
pub mod baseline;
pub mod checks;
pub mod closure;
pub mod coverage;
pub mod dlopen;
pub mod dynamic;
pub mod failure;
pub mod finding;
pub mod identity;
pub mod linkage;
pub mod links;
pub mod policy;
pub mod references;
pub mod roots;
pub mod runtime;
pub mod session;
pub mod sources;
pub mod why;

pub use roots::{audit_paths, audit_roots, Root};

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::audit::failure::Failure;
use crate::audit::finding::Finding;
use crate::cuda::capabilities::Request;
use crate::devicecode::host::{self, HostElf, Object};
use crate::devicecode::{self, Depth, DeviceCode, Scan};

/// What the audit checks against.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Requested capabilities; `None`: no capability checks.
    pub requested: Option<Request>,
    /// Expect PTX for the last requested capability.
    pub forward_compat: bool,
    /// The driver's library folder that must be on RUNPATH.
    pub driver_lib: String,
    /// Build folders no RUNPATH entry may point into (`/build`, `$TMPDIR`, `$NIX_BUILD_TOP`).
    pub build_dirs: Vec<String>,
    /// The Nix store: files inside it resolve libraries without the host's folders.
    pub store_dir: PathBuf,
    /// Search the host's default library folders for store files too.
    pub system_lib_dirs: bool,
    /// `--sysroot DIR`: where a file for another machine than this one finds
    /// the libraries its machine provides (`DIR/lib`, `DIR/usr/lib`, ...).
    /// Without it such a file resolves only through its RUNPATH/RPATH and the
    /// store: this machine's folders hold this machine's libraries.
    pub sysroot: Option<PathBuf>,
    /// How to look for fatbin containers outside the fatbin sections: by
    /// default ([`Scan::Found`]) every loaded data section is searched whole;
    /// `--scan` also the bytes no section holds ([`Scan::Full`]); with
    /// `--no-scan` ([`Scan::Probe`]) containers found at the start of a
    /// data section are reported unread.
    pub scan: Scan,
    /// `--driver-version` / `--driver-cuda`: the driver the files must run
    /// on (runtime and PTX JIT checks, coverage verdicts); `None`: no checks.
    pub driver: Option<crate::cuda::driver::Driver>,
    /// Inside a Nix build of a derivation that compiles its code (not a
    /// prebuilt or redist package, which sets `dontBuild`): its outputs. A
    /// file below one holds code the build made itself, so a wrong target
    /// in it is the build's to fix ([`checks::jetson`]).
    pub own_outputs: Vec<PathBuf>,
    /// The audit runs inside a Nix build (its outputs are known): a file
    /// outside [`Policy::own_outputs`] there is one the build did not compile.
    pub in_build: bool,
    /// Find the libraries files load with dlopen and resolve them
    /// (docs/dlopen.md); off with `--no-dlopen`.
    pub dlopen: bool,
    /// `--dlopen-facts`: each file's dlopen targets in [`FileFacts::dlopen`].
    pub dlopen_facts: bool,
    /// Library resolution, shared by the files of a run (it remembers what
    /// it has probed).
    pub resolver: std::sync::Arc<crate::audit::linkage::Resolver>,
    /// Reference finding and the build-only set (docs/references.md);
    /// `None`: store references are not looked for.
    pub references: Option<std::sync::Arc<references::Settings>>,
    /// What is read and checked: everything (the audit), or only what the
    /// driver verdicts need (the pre-flight).
    pub reading: Reading,
}

/// What an audit reads and checks of each file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reading {
    /// Every check of the checks table.
    #[default]
    Full,
    /// Only what the driver verdicts (`driver-too-old-for-runtime`,
    /// `ptx-too-new-for-driver`, `driver-verdict-unknown`,
    /// `no-code-for-capability`) and the pre-flight's symbol checks need:
    /// the device code, the runtime and the loader facts (NEEDED, RUNPATH,
    /// the dlopen targets as named). Nothing is resolved (NEEDED, dlopen
    /// targets) and the RUNPATH, dlopen, Jetson and scan-coverage checks are
    /// not run; the device code outside the fatbin sections is read until
    /// the verdicts cannot change ([`verdicts_settled`]). What `cuda-preflight`
    /// runs: the verdicts it reports are the full audit's (tests/preflight.rs
    /// compares them with `cuda-elf-inspect`'s on the corpus).
    DriverVerdicts,
}

/// With [`Reading::DriverVerdicts`], the rule that ends the reading of a
/// file's device code early: every requested capability has SASS that runs
/// on it natively, and the file's runtime is proven by its loader facts
/// ([`runtime::proven`]), or it is a static runtime whose version the
/// toolkit note in the fatbin sections gave (`note`), or no driver is
/// checked. More code can only add architectures: the capabilities stay
/// native (no `no-code-for-capability`, no PTX to JIT, so no
/// `ptx-too-new-for-driver`), and the runtime verdict does not read the
/// device code (the PTX's ISA floor counts only where nothing names the
/// runtime's version). `None`: read it all (no capabilities asked, forward
/// compatibility asked, a runtime that only the PTX's ISA bounds).
pub fn verdicts_settled<'p>(
    policy: &'p Policy,
    host: &dynamic::HostFacts,
    note: Option<crate::cuda::capabilities::CudaVersion>,
) -> Option<impl Fn(&DeviceCode) -> bool + Sync + 'p> {
    if policy.reading != Reading::DriverVerdicts || policy.forward_compat {
        return None;
    }
    let req = policy.requested.as_ref()?;
    let runtime_known = policy.driver.is_none()
        || runtime::proven(host).is_some()
        || (host.static_cudart && note.is_some());
    if !runtime_known {
        return None;
    }
    Some(move |dev: &DeviceCode| {
        let codes = dev.codes();
        req.capabilities.iter().all(|c| {
            matches!(
                crate::cuda::capabilities::covering(&codes, *c),
                Some((crate::cuda::capabilities::Runs::Native, _))
            )
        })
    })
}

/// Everything the audit learned about one file.
#[derive(Debug, Clone, Serialize)]
pub struct FileFacts {
    /// The path as given or found.
    #[serde(serialize_with = "ser_path")]
    pub path: PathBuf,
    /// `elf`, `archive`, `fatbin`, `cubin`.
    pub format: &'static str,
    /// Size in bytes.
    pub size: u64,
    /// Device code, when the file has any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceCode>,
    /// Loader facts, for host ELF files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamic: Option<dynamic::HostFacts>,
    /// Damage found while reading (the file was still examined).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub damage: Vec<String>,
    /// Per requested capability, the code a GPU of that capability would
    /// run (empty when no capabilities were requested).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub coverage: Vec<Coverage>,
    /// With a driver given: the CUDA runtime the file needs, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<runtime::Runtime>,
    /// With reference finding on: the store paths the file references, located.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<references::Reference>,
    /// With `--dlopen-facts`: every dlopen target and its resolution.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dlopen: Option<dlopen::Loads>,
    /// Device and inode when the file has other hard links: names of one
    /// inode in one folder are one file to the loader, reported once
    /// ([`links::fold`]).
    #[serde(skip)]
    pub inode: Option<(u64, u64)>,
}

/// Which code covers one requested capability.
#[derive(Debug, Clone, Serialize)]
pub struct Coverage {
    /// The requested capability (`9.0`).
    pub capability: String,
    /// `native` (SASS), `jit` (PTX only) or `no`.
    pub runs: crate::cuda::capabilities::Runs,
    /// The code the driver would pick (`sm_90a`, `compute_80`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// With a driver given and PTX picked: its PTX ISA version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ptx_isa: Option<String>,
    /// With a driver given: whether the code runs on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<DriverVerdict>,
    /// Fatbins outside the sections were not read (`--no-scan`) and no
    /// SASS was found in what was read: they may hold this capability's code.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub not_read: bool,
}

/// One capability's verdict on the given driver.
#[derive(Debug, Clone, Serialize)]
pub struct DriverVerdict {
    /// Whether the capability's code runs on the driver.
    pub runs: bool,
    /// Why not: `ptx-too-new`, `runtime-too-new`, or `unknown` (not
    /// decided: the file does not prove the CUDA version it needs, see
    /// [`runtime::Runtime`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<crate::cuda::driver::NotRunning>,
    /// The CUDA version the driver must support (the PTX's, or the runtime's major).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs_cuda: Option<String>,
    /// The CUDA version the driver supports.
    pub has_cuda: String,
    /// Why not decided (reason `unknown`), in a few words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// The coverage of every requested capability by `dev`'s code; with a
/// driver given, each with its verdict on that driver: the PTX's ISA where
/// PTX is picked, and the file's `runtime` (a runtime the driver cannot
/// load, or whose version is unknown, decides for every capability).
pub fn coverage(
    dev: &DeviceCode,
    runtime: Option<&runtime::Runtime>,
    policy: &Policy,
) -> Vec<Coverage> {
    let Some(req) = &policy.requested else { return Vec::new() };
    coverage_of(dev, runtime, &req.capabilities, policy.driver.as_ref())
}

/// [`coverage`] of the capabilities `caps`, with `driver`'s verdicts: the
/// one rule, for the requested capabilities and for those a coverage run
/// answers for on its own (with only a driver given, the capabilities a
/// served build was made for).
pub fn coverage_of(
    dev: &DeviceCode,
    runtime: Option<&runtime::Runtime>,
    caps: &[crate::cuda::capabilities::Capability],
    driver: Option<&crate::cuda::driver::Driver>,
) -> Vec<Coverage> {
    let codes = dev.codes();
    let unread = dev.unscanned.is_some();
    caps.iter()
        .map(|c| match crate::cuda::capabilities::covering(&codes, *c) {
            Some((runs, code)) => {
                let mut cov = Coverage {
                    capability: c.to_string(),
                    runs,
                    code: Some(code.name()),
                    ptx_isa: None,
                    driver: None,
                    not_read: unread && runs != crate::cuda::capabilities::Runs::Native,
                };
                if let Some(driver) = driver {
                    let isa = checks::isa_of(dev, &code);
                    if runs == crate::cuda::capabilities::Runs::Jit {
                        cov.ptx_isa = isa.map(|i| i.to_string());
                    }
                    cov.driver = Some(checks::verdict(driver, Some(*c), runs, isa, runtime));
                }
                cov
            }
            None => Coverage {
                capability: c.to_string(),
                runs: crate::cuda::capabilities::Runs::No,
                code: None,
                ptx_isa: None,
                driver: None,
                not_read: unread,
            },
        })
        .collect()
}

fn ser_path<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}

/// One file's outcome: facts and findings, `None` for a file that is no
/// object at all, or why it could not be examined.
pub type FileOutcome = Result<Option<(FileFacts, Vec<Finding>)>, Failure>;

/// Whether the first bytes say the file is something we examine: an ELF
/// file (host or cubin), an archive (regular or thin), a raw fatbin.
pub fn interesting(head: &[u8]) -> bool {
    head.starts_with(b"\x7fELF")
        || head.starts_with(b"!<arch>\n")
        || head.starts_with(b"!<thin>\n")
        || head.starts_with(&crate::fatbin::header::CONTAINER_MAGIC.to_le_bytes())
}

/// The open file if its first bytes make it worth mapping ([`interesting`]),
/// `None` if not. `walked`: the walk saw a regular file ([`host::open_walked`]);
/// otherwise a FIFO or a device (a root given by the user) is neither read
/// nor opened, only a regular file is.
fn sniff(path: &Path, walked: bool) -> std::io::Result<Option<std::fs::File>> {
    let file = if walked {
        host::open_walked(path)?
    } else {
        if !std::fs::metadata(path)?.is_file() {
            return Ok(None);
        }
        host::open_regular(path)?
    };
    let mut head = [0u8; 8];
    let n = crate::fs::mapped::read_full_at(&file, &mut head, 0)?;
    Ok(interesting(&head[..n]).then_some(file))
}

/// Examines one file, read under its real path (links resolved: `$ORIGIN`
/// and the store test depend on it) and named in failures as the user gave
/// or sees it (`shown`, e.g. `result/lib/x.so`). `Ok(None)`: not an object file.
pub fn audit_file(path: &Path, shown: &Path, policy: &Policy) -> FileOutcome {
    audit_file_at(path, path, shown, policy)
}

/// [`audit_file`] for a file read at `local` that stands for `path`: a
/// store path's file unpacked from a cache or a NAR (see
/// [`crate::store::mounts`]). Every decision uses `path`; only the bytes come
/// from `local`.
pub fn audit_file_at(local: &Path, path: &Path, shown: &Path, policy: &Policy) -> FileOutcome {
    audit_opened(local, path, shown, policy, false)
}

/// [`audit_file_at`] for a file a folder's walk found as a regular file:
/// opened once, without a `stat` first ([`host::open_walked`]), and mapped
/// from the descriptor the sniff read.
pub fn audit_walked_at(local: &Path, path: &Path, shown: &Path, policy: &Policy) -> FileOutcome {
    audit_opened(local, path, shown, policy, true)
}

fn audit_opened(
    local: &Path,
    path: &Path,
    shown: &Path,
    policy: &Policy,
    walked: bool,
) -> FileOutcome {
    let describe = |e: std::io::Error| Failure::io(shown, &e);
    let Some(file) = sniff(local, walked).map_err(describe)? else {
        return Ok(None);
    };
    let data = host::map_file(&file).map_err(describe)?;
    drop(file);
    audit_mapped(&data, local, path, shown, policy)
}

/// [`audit_file_at`] on the file's bytes mapped already (reference finding
/// reads the same map afterwards: one open, one map, each page mapped once
/// for both). `Ok(None)`: not an object file.
pub fn audit_mapped(
    data: &host::Mapped,
    local: &Path,
    path: &Path,
    shown: &Path,
    policy: &Policy,
) -> FileOutcome {
    if !interesting(&data[..data.len().min(8)]) {
        return Ok(None);
    }
    // Pages are dropped from the resident set as soon as they are read, so
    // memory stays flat whatever the file size (see host::Mapped::release).
    let release = |part: &[u8]| data.release(part);
    let examined =
        examine(data, local, policy, &release).map_err(|e| Failure::unreadable(shown, e))?;
    let dev = examined.read.code;
    let has_device = !dev.is_empty();
    let mut facts = FileFacts {
        path: path.to_path_buf(),
        format: examined.format,
        size: data.len() as u64,
        device: None,
        dynamic: examined.host.map(|mut d| {
            d.static_cudart &= has_device;
            d
        }),
        damage: examined.read.damage,
        coverage: Vec::new(),
        runtime: None,
        references: Vec::new(),
        dlopen: None,
        inode: links::inode(local),
    };
    facts.damage.extend(dev.decode_errors.iter().cloned());
    let mut findings = Vec::new();
    let full = policy.reading == Reading::Full;
    if let Some(d) = facts.dynamic.as_ref().filter(|_| full) {
        checks::runpath(path, d, policy, &mut findings);
        checks::needed(path, &d.loader, policy, &mut findings);
        if let Some(loads) = dlopen::resolve(path, &d.loader, examined.loads, policy) {
            checks::dlopen(path, &loads, &mut findings);
            if policy.dlopen_facts {
                facts.dlopen = Some(loads);
            }
        }
    }
    if policy.driver.is_some() {
        let device = has_device.then_some(&dev);
        let searched = examined.note;
        let note =
            || searched.unwrap_or_else(|| runtime_note(data, &examined.note_sections, &release));
        facts.runtime = facts.dynamic.as_ref().and_then(|d| runtime::of(d, device, note));
        checks::driver(path, device, facts.runtime.as_ref(), policy, &mut findings);
    }
    if has_device {
        if full {
            checks::scan_coverage(path, &dev, &mut findings);
        }
        let loader = facts.dynamic.as_ref().map(|d| &d.loader);
        checks::capabilities(path, &dev, loader, policy, &mut findings);
        if full {
            checks::jetson(path, &dev, loader, policy, &mut findings);
        }
        facts.coverage = coverage(&dev, facts.runtime.as_ref(), policy);
        facts.device = Some(dev);
    }
    finding::cap_per_check(path, &mut findings);
    Ok(Some((facts, findings)))
}

/// What reading one file gave the audit.
struct Examined {
    /// [`Object::format`].
    format: &'static str,
    /// Its device code and the damage met.
    read: devicecode::Read,
    /// Where a static runtime's version may be read (with a driver given):
    /// the fatbin sections `(offset, size)`, see [`runtime_note`].
    note_sections: Vec<(u64, u64)>,
    /// The toolkit note, when searched already (`Some(None)`: searched,
    /// not found).
    note: Option<Option<crate::cuda::capabilities::CudaVersion>>,
    /// Loader facts, for a host ELF file.
    host: Option<dynamic::HostFacts>,
    /// Its dlopen targets (empty unless it imports dlopen and the pass is on).
    loads: crate::dlopen::Scan,
}

/// Reads a file's device code and, for a host ELF file, its loader facts,
/// from one parse. The fatbin walk and the loader facts (whose
/// static-cudart scan reads megabytes of .rodata) run side by side: in
/// cuBLASLt each is several milliseconds, and that file is the long pole
/// of a tree's audit. `Err`: why the file cannot be examined.
fn examine(
    data: &host::Mapped,
    local: &Path,
    policy: &Policy,
    release: &(dyn Fn(&[u8]) + Sync),
) -> Result<Examined, String> {
    let read = |object: &Object<'_>, settled: Option<&(dyn Fn(&DeviceCode) -> bool + Sync)>| {
        let (depth, scan) = (Depth::PerArch, policy.scan);
        devicecode::read_until(data, object, Some(local), depth, scan, release, settled)
    };
    if !data.starts_with(b"\x7fELF") || crate::fatbin::cubin::is_cubin(data) {
        let object = host::parse_with(data, &mut |p| release(p)).map_err(|e| e.to_string())?;
        let (format, read) = (object.format(), read(&object, None));
        let loads = crate::dlopen::Scan::default();
        let note_sections = Vec::new();
        return Ok(Examined { format, read, note_sections, note: None, host: None, loads });
    }
    let HostElf { elf, segments, sections } = HostElf::parse(data, 0).map_err(|e| e.to_string())?;
    let device_code = sections.has_device_code();
    let note_sections = match policy.driver {
        Some(_) => sections.sections().iter().map(|s| (s.offset, s.size)).collect(),
        None => Vec::new(),
    };
    let host_half = || {
        let loader = dynamic::loader(&elf, segments.as_ref())?;
        let loads = match policy.dlopen {
            true => dlopen::scan(&elf, &loader, local, release),
            false => crate::dlopen::Scan::default(),
        };
        let host = dynamic::facts(&elf, loader, device_code, &loads, release);
        Ok::<_, crate::elf::ElfError>((host, loads))
    };
    if policy.reading == Reading::DriverVerdicts {
        // One after the other: what the loader facts and the toolkit note
        // say of the runtime decides whether the device code outside the
        // fatbin sections can stop early ([`verdicts_settled`]).
        let (host, loads) = host_half().map_err(|e| e.to_string())?;
        let note = (host.static_cudart && policy.driver.is_some())
            .then(|| runtime_note(data, &note_sections, release));
        let settled = verdicts_settled(policy, &host, note.flatten());
        let settled = settled.as_ref().map(|f| f as &(dyn Fn(&DeviceCode) -> bool + Sync));
        let read = read(&Object::Elf(sections.read(&mut |p| release(p))), settled);
        return Ok(Examined { format: "elf", read, note_sections, note, host: Some(host), loads });
    }
    let (read, host) =
        rayon::join(|| read(&Object::Elf(sections.read(&mut |p| release(p))), None), host_half);
    let (host, loads) = host.map_err(|e| e.to_string())?;
    Ok(Examined { format: "elf", read, note_sections, note: None, host: Some(host), loads })
}

/// nvcc's toolkit note in a host ELF file's fatbin sections (`(offset,
/// size)`), as stored (see [`runtime`]): searched only for a static runtime.
/// The first note in file order, searched [`NOTE_CHUNK`] at a time on the
/// pool (cupy's `thrust` holds its first 52 MB into a 72 MB section); a
/// chunk reaches [`NOTE_OVERLAP`] bytes into the next, so a note across the
/// cut is whole in the earlier one, and one cut short at a chunk's end
/// does not parse (its digits run to the end) and is found by the next.
fn runtime_note(
    data: &[u8],
    sections: &[(u64, u64)],
    release: &(dyn Fn(&[u8]) + Sync),
) -> Option<crate::cuda::capabilities::CudaVersion> {
    use rayon::prelude::*;
    sections.iter().find_map(|&(offset, size)| {
        let start = usize::try_from(offset).ok()?;
        let end = start.saturating_add(usize::try_from(size).ok()?);
        let bytes = data.get(start..end)?;
        let starts: Vec<usize> = (0..bytes.len()).step_by(NOTE_CHUNK).collect();
        starts.par_iter().find_map_first(|&from| {
            let to = (from + NOTE_CHUNK).min(bytes.len());
            let found = runtime::toolkit_note(&bytes[from..(to + NOTE_OVERLAP).min(bytes.len())]);
            release(&bytes[from..to]);
            found
        })
    })
}

/// How much of a fatbin section one task of [`runtime_note`] searches.
const NOTE_CHUNK: usize = 4 << 20;

/// How far a chunk's search reaches into the next: more than the note's
/// length with its version (`Cuda compilation tools, release ` and at most
/// 8 characters of version, [`runtime::toolkit_note`]).
const NOTE_OVERLAP: usize = 64;

/// The result of auditing a set of paths.
#[derive(Debug, Default)]
pub struct Audit {
    /// Facts of every examined file, sorted by path.
    pub files: Vec<FileFacts>,
    /// All findings, file and tree checks.
    pub findings: Vec<Finding>,
    /// Files and folders that could not be examined.
    pub failures: Vec<Failure>,
    /// With reference finding on: every file's references (object files or
    /// not, links too), by the path shown, sorted.
    pub references: Vec<(PathBuf, references::Reference)>,
}
