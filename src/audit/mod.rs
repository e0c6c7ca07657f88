//! The audit behind `cuda-elf-inspect PATH...`: for every ELF file, archive,
//! fatbin or cubin under the given paths, the facts a Nix CUDA maintainer
//! asks about (device code, NEEDED, RUNPATH) and the findings of the checks
//! in [`checks`]. Files are examined in parallel; results are sorted.
//!
//! Reading is bounded: the file is memory-mapped, headers are parsed, and
//! per architecture as few payloads as settle it are decompressed; the
//! device code is the one model of [`crate::devicecode`], containers outside
//! the fatbin sections included.

pub mod baseline;
pub mod checks;
pub mod dynamic;
pub mod failure;
pub mod finding;
pub mod linkage;
pub mod policy;
pub mod runtime;
pub mod session;
pub mod sources;

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::audit::failure::Failure;
use crate::audit::finding::Finding;
use crate::cuda::capabilities::Request;
use crate::devicecode::host::{self, Object};
use crate::devicecode::{self, Depth, DeviceCode, Scan};
use crate::fs::walk;

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
    /// Search every file whole for fatbin containers outside the fatbin
    /// sections (`--scan`); otherwise only the start of each data section
    /// is probed, and containers found there are reported unread.
    pub scan: bool,
    /// `--driver-version` / `--driver-cuda`: the driver the files must run
    /// on (runtime and PTX JIT checks, coverage verdicts); `None`: no checks.
    pub driver: Option<crate::cuda::driver::Driver>,
    /// Library resolution, shared by the files of a run (it remembers what
    /// it has probed).
    pub resolver: std::sync::Arc<crate::audit::linkage::Resolver>,
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
    pub dynamic: Option<dynamic::DynamicFacts>,
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
}

/// One capability's verdict on the given driver.
#[derive(Debug, Clone, Serialize)]
pub struct DriverVerdict {
    /// Whether the capability's code runs on the driver.
    pub runs: bool,
    /// Why not: `ptx-too-new`, `runtime-too-new`, or `unknown` (not decided).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<crate::cuda::driver::NotRunning>,
    /// The CUDA version the driver must support (the PTX's, or the runtime's major).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs_cuda: Option<String>,
    /// The CUDA version the driver supports.
    pub has_cuda: String,
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
    let codes = dev.codes();
    req.capabilities
        .iter()
        .map(|c| match crate::cuda::capabilities::covering(&codes, *c) {
            Some((runs, code)) => {
                let mut cov = Coverage {
                    capability: c.to_string(),
                    runs,
                    code: Some(code.name()),
                    ptx_isa: None,
                    driver: None,
                };
                if let Some(driver) = &policy.driver {
                    let isa = checks::isa_of(dev, &code);
                    if runs == crate::cuda::capabilities::Runs::Jit {
                        cov.ptx_isa = isa.map(|i| i.to_string());
                    }
                    cov.driver = Some(checks::verdict(driver, runs, isa, runtime));
                }
                cov
            }
            None => Coverage {
                capability: c.to_string(),
                runs: crate::cuda::capabilities::Runs::No,
                code: None,
                ptx_isa: None,
                driver: None,
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

/// Reads the first bytes of a file; `Ok(false)` for files not worth mapping.
fn sniff(path: &Path) -> std::io::Result<bool> {
    let mut head = [0u8; 8];
    let mut f = host::open_nonblocking(path)?;
    if !f.metadata()?.is_file() {
        return Ok(false);
    }
    let n = f.read(&mut head)?;
    Ok(interesting(&head[..n]))
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
    let describe = |e: std::io::Error| Failure::io(shown, &e);
    if !sniff(local).map_err(describe)? {
        return Ok(None);
    }
    let data = host::map(local).map_err(describe)?;
    let mut facts = FileFacts {
        path: path.to_path_buf(),
        format: "other",
        size: data.len() as u64,
        device: None,
        dynamic: None,
        damage: Vec::new(),
        coverage: Vec::new(),
        runtime: None,
    };
    // Pages are dropped from the resident set as soon as they are read, so
    // memory stays flat whatever the file size (see host::Mapped::release).
    let release = |part: &[u8]| data.release(part);
    // The fatbin walk and the loader facts (whose static-cudart scan reads
    // megabytes of .rodata) run side by side: in cuBLASLt each is several
    // milliseconds, and that file is the long pole of a tree's audit.
    let is_elf = data.starts_with(b"\x7fELF");
    let (parsed, dynamic) = rayon::join(
        || {
            let object = host::parse_with(&data, &mut |p| data.release(p))
                .map_err(|e| Failure::unreadable(shown, e))?;
            let scan = if policy.scan { Scan::Full } else { Scan::Probe };
            let read =
                devicecode::read(&data, &object, Some(local), Depth::PerArch, scan, &release);
            // Where a static runtime's version may be read (with a driver
            // given): nvcc's toolkit note in the stored device code.
            let sections: Vec<(u64, u64)> = match &object {
                Object::Elf(elf) if policy.driver.is_some() => {
                    elf.sections.iter().map(|s| (s.offset, s.size)).collect()
                }
                _ => Vec::new(),
            };
            Ok::<_, Failure>((object.format(), matches!(object, Object::Elf(_)), read, sections))
        },
        || is_elf.then(|| dynamic::facts(&data, &release)),
    );
    let (format, host_elf, read, sections) = parsed?;
    facts.format = format;
    let dev = read.code;
    facts.damage = read.damage;
    let has_device = !dev.is_empty();
    if host_elf {
        match dynamic {
            Some(Ok(mut d)) => {
                d.static_cudart &= has_device;
                facts.dynamic = Some(d);
            }
            Some(Err(e)) => return Err(Failure::unreadable(shown, e)),
            None => {}
        }
    }
    facts.damage.extend(dev.decode_errors.iter().cloned());
    let mut findings = Vec::new();
    if let Some(d) = &facts.dynamic {
        checks::runpath(path, d, policy, &mut findings);
        checks::needed(path, d, policy, &mut findings);
    }
    if policy.driver.is_some() {
        let device = has_device.then_some(&dev);
        facts.runtime = facts
            .dynamic
            .as_ref()
            .and_then(|d| runtime::of(d, device, || runtime_note(&data, &sections, &release)));
        checks::driver(path, device, facts.runtime.as_ref(), policy, &mut findings);
    }
    if has_device {
        checks::scan_coverage(path, &dev, &mut findings);
        checks::capabilities(path, &dev, policy, &mut findings);
        checks::jetson(path, &dev, facts.dynamic.as_ref(), policy, &mut findings);
        facts.coverage = coverage(&dev, facts.runtime.as_ref(), policy);
        facts.device = Some(dev);
    }
    Ok(Some((facts, findings)))
}

/// nvcc's toolkit note in a host ELF file's fatbin sections (`(offset,
/// size)`), as stored (see [`runtime`]): searched only for a static runtime
/// whose device code has no PTX.
fn runtime_note(
    data: &[u8],
    sections: &[(u64, u64)],
    release: &dyn Fn(&[u8]),
) -> Option<crate::cuda::capabilities::CudaVersion> {
    sections.iter().find_map(|&(offset, size)| {
        let start = usize::try_from(offset).ok()?;
        let end = start.saturating_add(usize::try_from(size).ok()?);
        let bytes = data.get(start..end)?;
        let found = runtime::toolkit_note(bytes);
        release(bytes);
        found
    })
}

/// The result of auditing a set of paths.
#[derive(Debug, Default)]
pub struct Audit {
    /// Facts of every examined file, sorted by path.
    pub files: Vec<FileFacts>,
    /// All findings, file and tree checks.
    pub findings: Vec<Finding>,
    /// Files and folders that could not be examined.
    pub failures: Vec<Failure>,
}

/// Audits files and folders (folders walked in parallel, links inside them
/// not followed; a path given directly that is a link is followed, as
/// `result` links are meant to be).
pub fn audit_paths(paths: &[PathBuf], policy: &Policy) -> Audit {
    let roots: Vec<Root> = paths.iter().cloned().map(Root::Path).collect();
    audit_roots(&roots, policy)
}

/// What to audit: a path of this machine, or a store path unpacked elsewhere.
#[derive(Debug, Clone)]
pub enum Root {
    /// A file or folder as given.
    Path(PathBuf),
    /// A store path's contents at `mount.local`, reported and decided under
    /// `mount.logical` (the policy's resolver must hold the same mounts).
    Mounted {
        /// Where it is and what it stands for.
        mount: crate::store::mounts::Mount,
        /// Its name in baseline locations (the store name without the hash).
        name: String,
    },
    /// Could not be read at all (a failed fetch): one failure line.
    Failed(Failure),
}

/// Audits roots: [`audit_paths`]'s walk, with mounted store paths read from
/// their local copies and reported exactly as the realised paths would be.
pub fn audit_roots(roots: &[Root], policy: &Policy) -> Audit {
    let mut audit = Audit::default();
    // (shown path, stable location for baselines, outcome)
    let mut outcomes: Vec<(PathBuf, String, FileOutcome)> = Vec::new();
    // A root's name in baseline locations: the store hash stripped from the
    // real name (a `result` link's target, `.` made a name).
    let root_name = |real: &Path| -> String {
        let name = real.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        crate::audit::finding::strip_store_hash(&name).to_string()
    };
    for root in roots {
        let path = match root {
            Root::Path(path) => path,
            Root::Failed(failure) => {
                audit.failures.push(failure.clone());
                continue;
            }
            Root::Mounted { mount, name } => {
                let (local, logical) = (&mount.local, &mount.logical);
                let meta = match std::fs::symlink_metadata(local) {
                    Ok(m) => m,
                    // The store path is one file that is no object: the
                    // unpacking left it out, as the audit would skip it.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        audit.failures.push(Failure::io(logical, &e));
                        continue;
                    }
                };
                if meta.is_dir() {
                    let rel =
                        |p: &Path| p.strip_prefix(local).map(Path::to_path_buf).unwrap_or_default();
                    let walked = walk::walk(local, &walk::Options::default(), |p, kind| {
                        kind.file_type.is_file().then(|| {
                            let shown = logical.join(rel(p));
                            audit_file_at(p, &shown, &shown, policy)
                        })
                    });
                    audit.failures.extend(walked.errors.iter().map(|e| {
                        let failure = Failure::from(e);
                        match mount.logical_of(&failure.path) {
                            Some(shown) => failure.renamed(shown),
                            None => failure,
                        }
                    }));
                    for (p, outcome) in walked.items {
                        let location = Path::new(name).join(rel(&p)).to_string_lossy().into_owned();
                        outcomes.push((logical.join(rel(&p)), location, outcome));
                    }
                } else if meta.is_file() {
                    outcomes.push((
                        logical.clone(),
                        name.clone(),
                        audit_file_at(local, logical, logical, policy),
                    ));
                } else if meta.file_type().is_symlink() {
                    // Rare (`nix-store --add` of a link); its target is a
                    // path of its own: say so rather than audit nothing.
                    let target = std::fs::read_link(local).unwrap_or_default();
                    let reason = failure::Reason::StoreLink(target);
                    audit.failures.push(Failure { path: logical.clone(), reason });
                }
                continue;
            }
        };
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) => {
                let mut failure = Failure::io(path, &e);
                if std::fs::symlink_metadata(path).is_ok() {
                    failure.reason = failure::Reason::BrokenLink(crate::error::describe_io(&e));
                }
                audit.failures.push(failure);
                continue;
            }
        };
        if meta.is_dir() {
            // Enter a `result` link's target: walk the resolved folder, name files under the given path.
            let root = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
            let rel = |p: &Path| p.strip_prefix(&root).map(Path::to_path_buf).unwrap_or_default();
            let shown = |p: &Path| if root != *path { path.join(rel(p)) } else { p.to_path_buf() };
            let walked = walk::walk(&root, &walk::Options::default(), |p, kind| {
                kind.file_type.is_file().then(|| audit_file(p, &shown(p), policy))
            });
            audit.failures.extend(walked.errors.iter().map(Failure::from));
            let base = root_name(&root);
            for (p, outcome) in walked.items {
                let location = Path::new(&base).join(rel(&p)).to_string_lossy().into_owned();
                outcomes.push((shown(&p), location, outcome));
            }
        } else {
            // Resolved once here: the checks need the real path ($ORIGIN, in
            // the store or not), and files found by the walk below a real
            // root are real already (links inside folders are not followed).
            let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
            let outcome = audit_file(&real, path, policy);
            outcomes.push((path.clone(), root_name(&real), outcome));
        }
    }
    let mut cudart = Vec::new();
    for (shown, location, outcome) in outcomes {
        match outcome {
            Ok(Some((mut facts, findings))) => {
                facts.path = shown.clone();
                audit.findings.extend(findings.into_iter().map(|mut f| {
                    f.path = shown.clone();
                    f.location = Some(location.clone());
                    f
                }));
                cudart.push((shown, facts.dynamic.as_ref().and_then(|d| d.cudart_major())));
                audit.files.push(facts);
            }
            Ok(None) => {}
            Err(e) => audit.failures.push(e),
        }
    }
    checks::mixed_cudart(&cudart, &mut audit.findings);
    audit.files.sort_by(|a, b| a.path.cmp(&b.path));
    failure::sort(&mut audit.failures);
    audit
}
