//! The audit's checks, one function per concern, each producing findings of
//! the ids in [`crate::audit::finding::CHECKS`]. They read facts only; reading files
//! happens in [`super::audit_file`].

use std::path::{Path, PathBuf};

use super::dynamic::HostFacts;
use super::runtime::Runtime;
use super::{DriverVerdict, Policy};
use crate::audit::finding::{CheckId, Finding, Subject};
use crate::audit::linkage::{sysroot_lib_dirs, Resolution, SearchInput};
use crate::cuda::capabilities::{coverage, Capability, CodeKind, Runs, Variant};
use crate::cuda::driver::{Driver, NotRunning, PtxVerdict, RuntimeVerdict};
use crate::devicecode::model::capability;
use crate::devicecode::model::PtxIsa;
use crate::devicecode::DeviceCode;
use crate::elf::dynamic::{DynamicFacts, Kind};

/// RUNPATH/RPATH checks: stubs, driver folder, build folder, empty entries,
/// RPATH instead of RUNPATH, static cudart.
pub fn runpath(path: &Path, h: &HostFacts, policy: &Policy, out: &mut Vec<Finding>) {
    let d = &h.loader;
    if !d.dynamic {
        return;
    }
    if h.static_cudart {
        out.push(Finding::new(
            CheckId::CudartStatic,
            path,
            "links the CUDA runtime statically; it dlopens libcuda.so.1 at run time",
        ));
    }
    if let (Some(rpath), None) = (&d.rpath, &d.runpath) {
        out.push(
            Finding::new(
                CheckId::RpathInsteadOfRunpath,
                path,
                format!("has DT_RPATH '{rpath}' and no DT_RUNPATH"),
            )
            .about(Subject::Entry(rpath.clone())),
        );
    }
    let search = d.search_path();
    let entries: Vec<&str> = search.map(|s| s.split(':').collect()).unwrap_or_default();
    let tag = if d.runpath.is_none() && d.rpath.is_some() { "RPATH" } else { "RUNPATH" };
    if let Some(s) = search {
        if entries.iter().any(|e| e.is_empty()) {
            let positions: Vec<String> = entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.is_empty())
                .map(|(i, _)| (i + 1).to_string())
                .collect();
            out.push(
                Finding::new(
                    CheckId::EmptyRunpathEntry,
                    path,
                    format!(
                        "{tag} '{s}' has an empty entry (position {}): the loader searches the current directory",
                        positions.join(", ")
                    ),
                )
                .about(Subject::Entry(s.to_string())),
            );
        }
    }
    for e in &entries {
        if is_stubs_folder(e) {
            out.push(
                Finding::new(
                    CheckId::LibcudaStubInRunpath,
                    path,
                    format!("{tag} entry {e} is a CUDA stubs folder"),
                )
                .about(Subject::Entry(e.to_string())),
            );
        }
        if let Some(prefix) =
            policy.build_dirs.iter().find(|p| e == p || e.starts_with(&format!("{p}/")))
        {
            out.push(
                Finding::new(
                    CheckId::TmpdirInRunpath,
                    path,
                    format!("{tag} entry {e} is inside the build folder {prefix}"),
                )
                .about(Subject::Entry(e.to_string())),
            );
        }
    }
    if h.needs_driver() {
        let driver = policy.driver_lib.trim_end_matches('/');
        if !entries.iter().any(|e| e.trim_end_matches('/') == driver) {
            let why = if h.static_cudart {
                "the static CUDA runtime dlopens libcuda.so.1"
            } else {
                "it needs libcuda.so.1"
            };
            out.push(
                Finding::new(
                    CheckId::MissingDriverRunpath,
                    path,
                    format!("{why}, but {driver} is not on its {tag}"),
                )
                .about(Subject::Entry(driver.to_string())),
            );
        }
    }
}

/// Whether a search entry is a CUDA stubs folder (`*/lib/stubs`, `*/lib64/stubs`).
fn is_stubs_folder(entry: &str) -> bool {
    let e = entry.trim_end_matches('/');
    e.ends_with("/lib/stubs") || e.ends_with("/lib64/stubs") || e == "stubs"
}

/// NEEDED libraries the loader would not find. `path` is the file's real
/// path (see [`super::audit_file`]).
pub fn needed(path: &Path, d: &DynamicFacts, policy: &Policy, out: &mut Vec<Finding>) {
    if !d.dynamic || d.kind == Kind::Relocatable {
        return;
    }
    let in_store = policy.resolver.in_store(path, &policy.store_dir);
    let target = d.target();
    let foreign = !target.is_build_machine();
    let sysroot_dirs;
    let system: &[PathBuf] = if foreign {
        // Another machine's file: this machine's folders hold this machine's
        // libraries; only an explicit sysroot stands for that machine's.
        sysroot_dirs = policy.sysroot.as_deref().map(|r| sysroot_lib_dirs(r, target));
        sysroot_dirs.as_deref().unwrap_or(&[])
    } else if policy.system_lib_dirs || !in_store {
        policy.resolver.system_lib_dirs()
    } else {
        &[]
    };
    let split = |s: &Option<String>| -> Vec<String> {
        s.as_deref().map(|s| s.split(':').map(str::to_string).collect()).unwrap_or_default()
    };
    let rpath = split(&d.rpath);
    let runpath = d.runpath.as_ref().map(|_| split(&d.runpath));
    let interp_in_sysroot;
    let interp = match d.interpreter.as_deref().map(Path::new) {
        // Outside the store, a foreign file's interpreter folder is that
        // machine's `/lib`: in the sysroot, or nowhere here.
        Some(i) if foreign && !i.starts_with(&policy.store_dir) => {
            interp_in_sysroot =
                policy.sysroot.as_deref().map(|r| r.join(i.strip_prefix("/").unwrap_or(i)));
            interp_in_sysroot.as_deref()
        }
        other => other,
    };
    let input = SearchInput {
        path,
        rpath: &rpath,
        runpath: runpath.as_deref(),
        interpreter: interp,
        system_dirs: system,
        target: Some(target),
    };
    let mut undecided: Vec<(&str, Vec<PathBuf>)> = Vec::new();
    for name in &d.needed {
        let resolution = policy.resolver.resolve(name, &input);
        if let Resolution::Undecided(store_paths) = resolution {
            undecided.push((name, store_paths));
            continue;
        }
        if let Resolution::Missing(searched) = resolution {
            let list: Vec<String> = searched.iter().map(|p| p.display().to_string()).collect();
            let searched =
                if list.is_empty() { "nothing to search".to_string() } else { list.join(":") };
            let mut message = format!("NEEDED {name} is found nowhere (searched {searched})");
            if foreign {
                message.push_str(&format!(
                    "; the file is for {}, so this machine's library folders do not count{}",
                    target.describe(),
                    if policy.sysroot.is_some() {
                        ""
                    } else {
                        " (give that machine's libraries with --sysroot DIR)"
                    }
                ));
            }
            out.push(
                Finding::new(CheckId::UnresolvedNeeded, path, message)
                    .about(Subject::Library(name.clone())),
            );
        }
    }
    if !undecided.is_empty() {
        out.push(not_fetched(path, &undecided));
    }
}

/// The one finding for a file's NEEDED libraries searched in store paths
/// that were not read (see [`crate::store::mounts::Located::Unfetched`]).
fn not_fetched(path: &Path, undecided: &[(&str, Vec<PathBuf>)]) -> Finding {
    let names: Vec<&str> = undecided.iter().map(|(n, _)| *n).collect();
    let parts: Vec<String> = undecided
        .iter()
        .map(|(name, paths)| {
            let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            format!("{name} (in {})", paths.join(", "))
        })
        .collect();
    Finding::new(
        CheckId::NeededNotFetched,
        path,
        format!(
            "NEEDED {} may be in store paths this audit did not read: audit the closure (--substituter URL --closure) to decide",
            parts.join(", ")
        ),
    )
    .about(Subject::Library(names.join(" ")))
}

/// Device code outside the fatbin sections that the audit saw and did not
/// read (`--scan` reads it): its other findings are about the sections only.
pub fn scan_coverage(path: &Path, dev: &DeviceCode, out: &mut Vec<Finding>) {
    if let Some(offset) = dev.unscanned {
        out.push(Finding::new(
            CheckId::DeviceCodeNotScanned,
            path,
            format!(
                "fatbin containers lie outside the fatbin sections (one at offset {offset:#x}); they were not read, so the capability checks see only the sections: run with --scan"
            ),
        ));
    }
}

/// Capability coverage of the device code against the requested list.
pub fn capabilities(path: &Path, dev: &DeviceCode, policy: &Policy, out: &mut Vec<Finding>) {
    let Some(req) = &policy.requested else { return };
    if !dev.has_code() {
        return;
    }
    let codes = dev.codes();
    // "SASS sm_80 sm_86" / "no PTX": what the file has of one kind, for messages.
    let have = |kind: CodeKind| -> String {
        let (label, prefix) = match kind {
            CodeKind::Sass => ("SASS", "sm"),
            CodeKind::Ptx => ("PTX", "compute"),
        };
        let v: Vec<String> = codes
            .iter()
            .filter(|c| c.kind == kind)
            .map(|c| format!("{prefix}_{}{}", c.target.sm(), c.target.variant.suffix()))
            .collect();
        if v.is_empty() {
            format!("no {label}")
        } else {
            format!("{label} {}", v.join(" "))
        }
    };
    for cap in &req.capabilities {
        match coverage(&codes, *cap) {
            Runs::No => out.push(
                Finding::new(
                    CheckId::NoCodeForCapability,
                    path,
                    format!(
                        "nothing runs on capability {cap}: the file has {} and {}",
                        have(CodeKind::Sass),
                        have(CodeKind::Ptx)
                    ),
                )
                .about(Subject::Capability(cap.to_string())),
            ),
            Runs::Jit => out.push(
                Finding::new(
                    CheckId::PtxOnlyCapability,
                    path,
                    format!(
                        "capability {cap} runs only through the PTX JIT (the file has {})",
                        have(CodeKind::Ptx)
                    ),
                )
                .about(Subject::Capability(cap.to_string())),
            ),
            Runs::Native => {}
        }
    }
    // Forward compatibility: PTX for the last capability (Nixpkgs' rule), and
    // for every capability written with +PTX. Plain PTX of an equal or lower
    // capability of the same kind serves as well: it JITs on anything newer.
    let mut want_ptx: Vec<Capability> = req.ptx.clone();
    if policy.forward_compat {
        if let Some(last) = req.capabilities.last() {
            if !want_ptx.contains(last) {
                want_ptx.push(*last);
            }
        }
    }
    for cap in want_ptx {
        let ok = codes.iter().any(|c| {
            c.kind == CodeKind::Ptx
                && match cap.variant {
                    Variant::Base => {
                        c.target.variant == Variant::Base && c.target.device() <= cap.device()
                    }
                    _ => c.target == cap,
                }
        });
        if !ok {
            out.push(
                Finding::new(
                    CheckId::MissingForwardCompatPtx,
                    path,
                    format!(
                        "forward compatibility needs PTX for capability {cap} or lower, to JIT on newer GPUs; the file has {}",
                        have(CodeKind::Ptx)
                    ),
                )
                .about(Subject::Capability(cap.to_string())),
            );
        }
    }
    // Family code (`sm_100f`) serves its base capability natively: asking
    // for 10.0 asks for it too (nvcc's `-arch=sm_100f` is how one builds
    // once for 10.0 and 10.3).
    let asked = |list: &[Capability], cap: Capability| {
        list.contains(&cap) || (cap.variant == Variant::Family && list.contains(&cap.device()))
    };
    let (sass, ptx) = (dev.sass(), dev.ptx());
    for a in sass.iter().map(|a| (CodeKind::Sass, a)).chain(ptx.iter().map(|a| (CodeKind::Ptx, a)))
    {
        let Some(cap) = capability(*a.1) else { continue };
        let last = req.capabilities.last().copied();
        let requested = match a.0 {
            CodeKind::Sass => asked(&req.capabilities, cap),
            CodeKind::Ptx => {
                asked(&req.ptx, cap)
                    || (policy.forward_compat && last.is_some_and(|l| asked(&[l], cap)))
                    || asked(&req.capabilities, cap)
            }
        };
        if !requested {
            let (kind, name) = match a.0 {
                CodeKind::Sass => ("SASS", a.1.name()),
                CodeKind::Ptx => ("PTX", a.1.name().replacen("sm_", "compute_", 1)),
            };
            let list: Vec<String> = req.capabilities.iter().map(|c| c.to_string()).collect();
            out.push(
                Finding::new(
                    CheckId::UnrequestedArch,
                    path,
                    format!("{kind} {name} was not requested (requested: {})", list.join(" ")),
                )
                .about(Subject::Arch(name)),
            );
        }
    }
}

/// What a message says of the driver: `driver 580.95.05 (CUDA 13.0)` or
/// `a CUDA 13.0 driver`.
fn driver_name(d: &Driver) -> String {
    match d.version {
        Some(v) => format!("driver {v} (CUDA {})", d.cuda),
        None => format!("a CUDA {} driver", d.cuda),
    }
}

/// The cuda_compat sentence (docs/driver-compatibility.md, "cuda_compat"):
/// it helps on data-center GPUs and Jetson, never on consumer GPUs.
fn compat_hint(cuda: &str) -> String {
    format!(
        "cudaPackages.cuda_compat of CUDA {cuda} or newer would help on a data-center GPU or Jetson (it brings a newer user-mode driver for this kernel driver), not on a GeForce/RTX GPU"
    )
}

/// The highest PTX ISA version of the architecture `code` targets.
pub fn isa_of(dev: &DeviceCode, code: &crate::cuda::capabilities::Code) -> Option<PtxIsa> {
    dev.archs
        .iter()
        .find(|(a, _)| capability(**a) == Some(code.target))
        .and_then(|(_, c)| c.ptx_isa)
}

/// One capability's verdict on `driver`: its code (`runs`: native or JIT,
/// with the PTX's ISA) and the file's runtime.
pub fn verdict(
    driver: &Driver,
    runs: Runs,
    isa: Option<PtxIsa>,
    runtime: Option<&Runtime>,
) -> DriverVerdict {
    let has_cuda = driver.cuda.to_string();
    let no = |reason, needs: Option<String>| DriverVerdict {
        runs: false,
        reason: Some(reason),
        needs_cuda: needs,
        has_cuda: has_cuda.clone(),
    };
    if let Some(rt) = runtime {
        match rt.major().map(|m| driver.runs_runtime(m)) {
            Some(RuntimeVerdict::Runs) => {}
            Some(v) => return no(NotRunning::Runtime(v), rt.major().map(|m| format!("{m}.0"))),
            None => return no(NotRunning::Unknown, None),
        }
    }
    if runs == Runs::Jit {
        match isa.map(|i| driver.jits_ptx((i.major, i.minor))) {
            Some(PtxVerdict::Jits) => {}
            Some(v @ PtxVerdict::TooNew { needs }) => {
                return no(NotRunning::Ptx(v), Some(needs.to_string()))
            }
            Some(PtxVerdict::Unknown) | None => return no(NotRunning::Unknown, None),
        }
    }
    DriverVerdict { runs: runs != Runs::No, reason: None, needs_cuda: None, has_cuda }
}

/// With a driver given (`--driver-version`/`--driver-cuda`): can it load
/// the file's runtime, and JIT-compile its PTX where PTX is the only code
/// for a capability? The capabilities are the requested ones; without a
/// list, every capability the file's own code targets (a PTX-only
/// `compute_90` is meant for 9.0 GPUs, and those would JIT it).
pub fn driver(
    path: &Path,
    dev: Option<&DeviceCode>,
    runtime: Option<&Runtime>,
    policy: &Policy,
    out: &mut Vec<Finding>,
) {
    let Some(drv) = &policy.driver else { return };
    let has = driver_name(drv);
    if let Some(rt) = runtime {
        let library = match rt {
            Runtime::Shared { major } => format!("libcudart.so.{major}"),
            Runtime::Static { .. } => "cudart_static".to_string(),
        };
        match rt.major().map(|m| drv.runs_runtime(m)) {
            Some(RuntimeVerdict::Runs) => {}
            Some(RuntimeVerdict::TooNew { major, floor }) => out.push(
                Finding::new(
                    CheckId::DriverTooOldForRuntime,
                    path,
                    format!(
                        "needs {}, a CUDA {major} runtime{}; {has} supports at most CUDA {}: the first CUDA call fails with 'CUDA driver version is insufficient for CUDA runtime version'; {}",
                        rt.describe(),
                        floor.map(|f| format!(" (driver {f} or newer)")).unwrap_or_default(),
                        drv.cuda,
                        compat_hint(&format!("{major}.0"))
                    ),
                )
                .about(Subject::Library(library)),
            ),
            Some(RuntimeVerdict::BelowMinorFloor { major, floor }) => out.push(
                Finding::new(
                    CheckId::DriverTooOldForRuntime,
                    path,
                    format!(
                        "needs {}; CUDA {major}'s minor version compatibility starts at driver {floor} and {has} is older: the first CUDA call fails with 'CUDA driver version is insufficient for CUDA runtime version'; a newer driver of the same branch fixes it, and {}",
                        rt.describe(),
                        compat_hint(&format!("{major}.0"))
                    ),
                )
                .about(Subject::Library(library)),
            ),
            None => out.push(Finding::new(
                CheckId::DriverVerdictUnknown,
                path,
                format!(
                    "links the CUDA runtime statically and says not which version (no PTX, no toolkit note in its stored device code): whether {has} loads it was not decided"
                ),
            )),
        }
    }
    let Some(dev) = dev else { return };
    let codes = dev.codes();
    let caps: Vec<Capability> = match &policy.requested {
        Some(req) => req.capabilities.clone(),
        None => {
            let mut v: Vec<Capability> = codes.iter().map(|c| c.target).collect();
            v.sort();
            v.dedup();
            v
        }
    };
    for cap in caps {
        let Some((Runs::Jit, code)) = crate::cuda::capabilities::covering(&codes, cap) else {
            continue;
        };
        let isa = isa_of(dev, &code);
        match isa.map(|i| (i, drv.jits_ptx((i.major, i.minor)))) {
            Some((_, PtxVerdict::Jits)) => {}
            Some((isa, PtxVerdict::TooNew { needs })) => out.push(
                Finding::new(
                    CheckId::PtxTooNewForDriver,
                    path,
                    format!(
                        "capability {cap} runs only PTX {} of ISA {isa}, which needs a CUDA {needs} driver; {has} JIT-compiles up to CUDA {}: kernels fail with 'the provided PTX was compiled with an unsupported toolchain'; {}",
                        code.name(),
                        drv.cuda,
                        compat_hint(&needs.to_string())
                    ),
                )
                .about(Subject::Capability(cap.to_string())),
            ),
            Some((isa, PtxVerdict::Unknown)) => out.push(
                Finding::new(
                    CheckId::DriverVerdictUnknown,
                    path,
                    format!(
                        "capability {cap} runs only PTX {} of ISA {isa}, newer than this tool's table: whether {has} JIT-compiles it was not decided",
                        code.name()
                    ),
                )
                .about(Subject::Capability(cap.to_string())),
            ),
            None => {}
        }
    }
}

/// Tree-wide: files linking different libcudart majors.
pub fn mixed_cudart(files: &[(PathBuf, Option<u32>)], out: &mut Vec<Finding>) {
    let mut majors: Vec<u32> = files.iter().filter_map(|(_, m)| *m).collect();
    majors.sort_unstable();
    majors.dedup();
    if majors.len() < 2 {
        return;
    }
    for (path, major) in files {
        let Some(major) = major else { continue };
        let others: Vec<String> =
            majors.iter().filter(|m| *m != major).map(|m| m.to_string()).collect();
        let example = files
            .iter()
            .find(|(_, m)| m.is_some_and(|m| m != *major))
            .map(|(p, _)| p.display().to_string())
            .unwrap_or_default();
        out.push(
            Finding::new(
                CheckId::MixedCudartVersions,
                path,
                format!(
                    "links libcudart.so.{major}; the tree also links major {} (e.g. {example})",
                    others.join(", ")
                ),
            )
            .about(Subject::Library(format!("libcudart.so.{major}"))),
        );
    }
}

/// Jetson awareness. Jetson capabilities (the table's Jetson rows) run only
/// on aarch64 Jetson boards: SASS or PTX for one in a host file for another
/// machine is a wrong target. And a Jetson build (every requested capability
/// a Jetson one, as Nixpkgs' `isJetsonBuild`) has no use for SASS of SBSA or
/// desktop capabilities.
pub fn jetson(
    path: &Path,
    dev: &DeviceCode,
    d: Option<&DynamicFacts>,
    policy: &Policy,
    out: &mut Vec<Finding>,
) {
    const EM_AARCH64: u16 = 183;
    let is_jetson = |c: Capability| {
        crate::cuda::capabilities::info(c)
            .or_else(|| crate::cuda::capabilities::info(c.device()))
            .map(|i| i.jetson)
    };
    let name = |c: &crate::cuda::capabilities::Code| {
        let prefix = if c.kind == CodeKind::Sass { "sm" } else { "compute" };
        format!("{prefix}_{}{}", c.target.sm(), c.target.variant.suffix())
    };
    let mut codes = dev.codes();
    codes.sort_by_key(|c| (c.target, c.kind == CodeKind::Ptx));
    codes.dedup();
    if let Some(d) = d.filter(|d| d.machine != EM_AARCH64) {
        let target = d.target();
        for c in codes.iter().filter(|c| is_jetson(c.target) == Some(true)) {
            out.push(
                Finding::new(
                    CheckId::JetsonCapabilityMismatch,
                    path,
                    format!(
                        "device code for the Jetson capability {} ({}) in a file for {}: Jetson boards are aarch64",
                        c.target,
                        name(c),
                        target.describe()
                    ),
                )
                .about(Subject::Arch(name(c))),
            );
        }
    }
    let Some(req) = &policy.requested else { return };
    if req.capabilities.is_empty() || !req.capabilities.iter().all(|c| is_jetson(*c) == Some(true))
    {
        return;
    }
    let wanted: Vec<String> = req.capabilities.iter().map(|c| c.to_string()).collect();
    for c in codes.iter().filter(|c| c.kind == CodeKind::Sass && is_jetson(c.target) == Some(false))
    {
        out.push(
            Finding::new(
                CheckId::JetsonCapabilityMismatch,
                path,
                format!(
                    "a Jetson build (capabilities {}) with SASS for the SBSA/desktop capability {} ({})",
                    wanted.join(", "),
                    c.target,
                    name(c)
                ),
            )
            .about(Subject::Arch(name(c))),
        );
    }
}

#[cfg(test)]
mod tests {
    //! Every check over made-up facts, one table per concern: no compiler,
    //! no file (issue 14). The end-to-end tests (tests/audit.rs) run the same
    //! checks on real builds.
    use super::*;
    use crate::cuda::capabilities::parse_list;
    use crate::devicecode::{Ptx, Sass};
    use crate::fatbin::{Arch, Variant};

    #[test]
    fn stubs_folders() {
        assert!(is_stubs_folder("/nix/store/x-cuda_cudart-12.8/lib/stubs"));
        assert!(is_stubs_folder("/usr/local/cuda/lib64/stubs/"));
        assert!(!is_stubs_folder("/nix/store/x/lib"));
    }

    fn policy(caps: Option<&str>, forward_compat: bool) -> Policy {
        Policy {
            requested: caps.map(|c| parse_list(c).unwrap()),
            forward_compat,
            driver_lib: "/run/opengl-driver/lib".into(),
            build_dirs: vec!["/build".into(), "/tmp/nix-build-x".into()],
            store_dir: "/nix/store".into(),
            system_lib_dirs: false,
            scan: false,
            sysroot: None,
            driver: None,
            resolver: Default::default(),
        }
    }

    fn program(runpath: Option<&str>, rpath: Option<&str>, needed: &[&str]) -> HostFacts {
        let loader = DynamicFacts {
            kind: Kind::Executable,
            is64: true,
            little: true,
            machine: 62,
            dynamic: true,
            runpath: runpath.map(str::to_string),
            rpath: rpath.map(str::to_string),
            needed: needed.iter().map(|n| n.to_string()).collect(),
            ..DynamicFacts::default()
        };
        HostFacts { loader, static_cudart: false }
    }

    fn ids(findings: &[Finding]) -> Vec<&'static str> {
        let mut v: Vec<&str> = findings.iter().map(|f| f.check.id()).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn runpath_checks_over_made_up_files() {
        const DRIVER: &str = "/run/opengl-driver/lib";
        let cudart = HostFacts { static_cudart: true, ..program(Some(DRIVER), None, &[]) };
        let cases: Vec<(&str, HostFacts, Vec<&str>)> = vec![
            ("clean", program(Some(DRIVER), None, &["libcuda.so.1"]), vec![]),
            ("no libcuda needed", program(None, None, &["libc.so.6"]), vec![]),
            (
                "driver missing",
                program(Some("/nix/store/x/lib"), None, &["libcuda.so.1"]),
                vec!["missing-driver-runpath"],
            ),
            (
                "stubs",
                program(Some("/x/lib/stubs:/run/opengl-driver/lib/"), None, &["libcuda.so"]),
                vec!["libcuda-stub-in-runpath"],
            ),
            ("build folder", program(Some("/build/src/lib"), None, &[]), vec!["tmpdir-in-runpath"]),
            ("TMPDIR", program(Some("/tmp/nix-build-x/o"), None, &[]), vec!["tmpdir-in-runpath"]),
            ("prefix only", program(Some("/buildx/lib"), None, &[]), vec![]),
            ("empty entry", program(Some("/a::/b"), None, &[]), vec!["empty-runpath-entry"]),
            ("rpath", program(None, Some("/a"), &[]), vec!["rpath-instead-of-runpath"]),
            ("both tags", program(Some("/a"), Some("/a"), &[]), vec![]),
            ("static cudart", cudart, vec!["cudart-static"]),
            (
                "static cudart, no driver",
                HostFacts { static_cudart: true, ..program(None, None, &[]) },
                vec!["cudart-static", "missing-driver-runpath"],
            ),
            (
                "not dynamic",
                {
                    let mut f = program(Some("/a::"), None, &[]);
                    f.loader.dynamic = false;
                    f
                },
                vec![],
            ),
        ];
        let p = policy(None, true);
        for (name, facts, want) in cases {
            let mut out = Vec::new();
            runpath(Path::new("/x"), &facts, &p, &mut out);
            assert_eq!(ids(&out), want, "{name}");
        }
    }

    #[test]
    fn needed_checks_over_made_up_files() {
        let p = policy(None, true);
        let cases: Vec<(&str, HostFacts, Vec<&str>)> = vec![
            (
                "missing",
                program(Some("/nonexistent-issue14"), None, &["libnowhere-issue14.so"]),
                vec!["unresolved-needed"],
            ),
            (
                "glibc and driver are provided",
                program(None, None, &["libc.so.6", "libcuda.so.1"]),
                vec![],
            ),
            (
                "relocatable objects need nothing yet",
                {
                    let mut f = program(None, None, &["libnowhere.so"]);
                    f.loader.kind = Kind::Relocatable;
                    f
                },
                vec![],
            ),
        ];
        for (name, facts, want) in cases {
            let mut out = Vec::new();
            needed(Path::new("/nix/store/x-issue14/lib/a.so"), &facts.loader, &p, &mut out);
            assert_eq!(ids(&out), want, "{name}");
            if let Some(f) = out.first() {
                assert_eq!(
                    f.subject,
                    crate::audit::finding::Subject::Library("libnowhere-issue14.so".into())
                );
            }
        }
    }

    #[test]
    fn needed_checks_through_mounts() {
        use crate::store::mounts::{Mount, Mounts};
        // Store path aaa-a fetched (its lib folder holds liba.so.1), bbb-b not.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("lib")).unwrap();
        let mut elf = b"\x7fELF\x02\x01\x01".to_vec();
        elf.resize(18, 0);
        elf.extend_from_slice(&62u16.to_le_bytes()); // x86-64, as program() says
        std::fs::write(dir.path().join("lib/liba.so.1"), elf).unwrap();
        std::fs::write(dir.path().join("lib/libt.so"), b"INPUT(-lt)").unwrap();
        let mount =
            Mount { logical: "/s/aaa-a".into(), local: dir.path().to_path_buf(), in_store: true };
        let mut p = policy(None, true);
        p.store_dir = "/s".into();
        p.resolver = std::sync::Arc::new(crate::audit::linkage::Resolver::with_mounts(
            Mounts::of_cache(vec![mount], "/s".into()),
        ));
        let file = Path::new("/s/aaa-a/lib/a.so");
        let cases: Vec<(&str, HostFacts, Vec<&str>)> = vec![
            (
                "in an unfetched path",
                program(Some("/s/bbb-b/lib"), None, &["libb.so.1"]),
                vec!["needed-not-fetched"],
            ),
            (
                "two in one finding",
                program(Some("/s/bbb-b/lib:/s/ccc-c/lib"), None, &["libb.so.1", "libc2.so"]),
                vec!["needed-not-fetched"],
            ),
            (
                "missing in a fetched path",
                program(Some("$ORIGIN"), None, &["libz.so.9"]),
                vec!["unresolved-needed"],
            ),
            (
                "not ELF in a fetched path",
                program(Some("$ORIGIN"), None, &["libt.so"]),
                vec!["unresolved-needed"],
            ),
            (
                "found before an unfetched path",
                program(Some("$ORIGIN:/s/bbb-b/lib"), None, &["liba.so.1"]),
                vec![],
            ),
        ];
        for (name, facts, want) in cases {
            let mut out = Vec::new();
            needed(file, &facts.loader, &p, &mut out);
            assert_eq!(ids(&out), want, "{name}");
        }
    }

    fn arch(sm: u32, variant: Variant) -> Arch {
        Arch { sm, variant }
    }

    /// Made-up device code: SASS and PTX states per architecture.
    fn code(sass: &[(Arch, Sass)], ptx: &[(Arch, Ptx)]) -> DeviceCode {
        let mut c = DeviceCode::default();
        for (a, s) in sass {
            c.cubins += 1;
            c.note_sass(*a, *s);
        }
        for (a, p) in ptx {
            c.ptx_files += 1;
            c.note_ptx(*a, *p);
        }
        c
    }

    #[test]
    fn capability_checks_over_made_up_code() {
        use Variant::{Arch as A, Base as B, Family as F};
        let k = Sass::Kernels;
        let e = Ptx::Entries;
        #[rustfmt::skip]
        let cases: Vec<(&str, DeviceCode, &str, bool, Vec<&str>)> = vec![
            ("exact SASS", code(&[(arch(86, B), k)], &[]), "8.6", false, vec![]),
            ("SASS runs on a higher minor", code(&[(arch(80, B), k)], &[]), "8.6", false, vec!["unrequested-arch"]),
            ("another major", code(&[(arch(80, B), k)], &[]), "9.0", false, vec!["no-code-for-capability", "unrequested-arch"]),
            ("PTX JIT", code(&[], &[(arch(80, B), e)]), "8.0;9.0", false, vec!["ptx-only-capability", "ptx-only-capability"]),
            ("forward compat met", code(&[(arch(90, B), k)], &[(arch(90, B), e)]), "9.0", true, vec![]),
            ("forward compat by lower PTX", code(&[(arch(86, B), k), (arch(90, B), k)], &[(arch(86, B), e)]), "8.6;9.0", true, vec![]),
            ("forward compat missing", code(&[(arch(90, B), k)], &[]), "9.0", true, vec!["missing-forward-compat-ptx"]),
            ("+PTX missing", code(&[(arch(86, B), k)], &[]), "8.6+PTX", false, vec!["missing-forward-compat-ptx"]),
            ("a only on its own", code(&[(arch(90, A), k)], &[]), "9.0a", false, vec![]),
            ("a not on the next", code(&[(arch(90, A), k)], &[]), "10.0", false, vec!["no-code-for-capability", "unrequested-arch"]),
            ("f serves its base", code(&[(arch(100, F), k)], &[(arch(100, F), e)]), "10.0", false, vec![]),
            ("f serves its family", code(&[(arch(100, F), k)], &[]), "10.3", false, vec!["unrequested-arch"]),
            ("f not another family", code(&[(arch(100, F), k)], &[]), "12.0", false, vec!["no-code-for-capability", "unrequested-arch"]),
            ("link stubs are no code", code(&[(arch(75, B), Sass::LinkStub)], &[]), "7.5", false, vec![]),
            ("entry-less PTX is no code", code(&[(arch(80, B), Sass::LinkStub)], &[(arch(80, B), Ptx::NoEntries)]), "8.0;8.6;9.0", true, vec![]),
            ("stubs beside kernels", code(&[(arch(75, B), Sass::LinkStub), (arch(86, B), k)], &[]), "7.5", false, vec!["no-code-for-capability", "unrequested-arch"]),
            ("unknown counts as code", code(&[(arch(86, B), Sass::Unknown)], &[]), "8.6", false, vec![]),
        ];
        for (name, dev, caps, fwd, want) in cases {
            let mut out = Vec::new();
            capabilities(Path::new("/x"), &dev, &policy(Some(caps), fwd), &mut out);
            assert_eq!(ids(&out), want, "{name}");
        }
        // No list, no capability checks.
        let mut out = Vec::new();
        capabilities(
            Path::new("/x"),
            &code(&[(arch(80, B), k)], &[]),
            &policy(None, true),
            &mut out,
        );
        assert!(out.is_empty());
    }

    #[test]
    fn driver_checks_over_made_up_files() {
        use crate::cuda::capabilities::CudaVersion;
        use crate::devicecode::model::PtxIsa;
        use Variant::Base as B;
        let isa = |major, minor| PtxIsa { major, minor };
        let with_isa = |mut c: DeviceCode, a: Arch, i: PtxIsa| {
            c.note_ptx_isa(a, i);
            c
        };
        let ptx90 = |i| with_isa(code(&[], &[(arch(90, B), Ptx::Entries)]), arch(90, B), i);
        let both90 = with_isa(
            code(&[(arch(90, B), Sass::Kernels)], &[(arch(90, B), Ptx::Entries)]),
            arch(90, B),
            isa(9, 5),
        );
        let sass90 = code(&[(arch(90, B), Sass::Kernels)], &[]);
        let cuda = |v: &str| CudaVersion::parse(v).unwrap();
        let shared = |major| Some(Runtime::Shared { major });
        let stat = |v: Option<&str>| Some(Runtime::Static { version: v.map(cuda), from: None });
        let d580 = Driver::from_version("580.95.05").unwrap();
        let d550 = Driver::from_version("550.54.15").unwrap();
        let d525_early = Driver::from_version("525.12").unwrap();
        let c135 = Driver::from_cuda(cuda("13.5"));
        type Case = (
            &'static str,
            Driver,
            Option<Runtime>,
            DeviceCode,
            Option<&'static str>,
            Vec<&'static str>,
        );
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("13 runtime on 580", d580, shared(13), sass90.clone(), Some("9.0"), vec![]),
            ("13 runtime on 550", d550, shared(13), sass90.clone(), Some("9.0"), vec!["driver-too-old-for-runtime"]),
            ("12 runtime on 550", d550, shared(12), sass90.clone(), Some("9.0"), vec![]),
            ("12 runtime below the floor", d525_early, shared(12), sass90.clone(), None, vec!["driver-too-old-for-runtime"]),
            ("static 13.5 on 580", d580, stat(Some("13.5")), sass90.clone(), None, vec![]),
            ("static 13.5 on 550", d550, stat(Some("13.5")), sass90.clone(), None, vec!["driver-too-old-for-runtime"]),
            ("static, version unknown", d580, stat(None), sass90.clone(), None, vec!["driver-verdict-unknown"]),
            ("PTX 9.5 only on 580", d580, None, ptx90(isa(9, 5)), Some("9.0"), vec!["ptx-too-new-for-driver"]),
            ("PTX 9.0 only on 580", d580, None, ptx90(isa(9, 0)), Some("9.0"), vec![]),
            ("PTX 9.5 on 13.5", c135, None, ptx90(isa(9, 5)), Some("9.0"), vec![]),
            ("PTX 9.5 beside SASS", d580, None, both90.clone(), Some("9.0"), vec![]),
            ("PTX 9.5 JIT for a newer GPU", d580, None, both90, Some("10.0"), vec!["ptx-too-new-for-driver"]),
            ("no list: the file's own targets", d580, None, ptx90(isa(9, 5)), None, vec!["ptx-too-new-for-driver"]),
            ("ISA unknown to the table", d580, None, ptx90(isa(42, 0)), Some("9.0"), vec!["driver-verdict-unknown"]),
            ("no code for the capability", d580, None, sass90, Some("10.0"), vec![]),
        ];
        for (name, drv, rt, dev, caps, want) in cases {
            let mut p = policy(caps, false);
            p.driver = Some(drv);
            let mut out = Vec::new();
            driver(Path::new("/x"), Some(&dev), rt.as_ref(), &p, &mut out);
            assert_eq!(ids(&out), want, "{name}");
            for f in &out {
                if f.check != CheckId::DriverVerdictUnknown {
                    assert!(f.message.contains("cuda_compat"), "{name}: {}", f.message);
                }
            }
        }
        // No driver, no driver checks.
        let mut out = Vec::new();
        driver(Path::new("/x"), None, shared(13).as_ref(), &policy(None, false), &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn unread_containers_are_reported() {
        let cases = [(None, vec![]), (Some(0x885560u64), vec!["device-code-not-scanned"])];
        for (unscanned, want) in cases {
            let dev = DeviceCode { unscanned, ..DeviceCode::default() };
            let mut out = Vec::new();
            scan_coverage(Path::new("/x"), &dev, &mut out);
            assert_eq!(ids(&out), want);
        }
    }

    #[test]
    fn mixed_cudart_over_made_up_trees() {
        let p = |s: &str| PathBuf::from(s);
        type Tree = Vec<(PathBuf, Option<u32>)>;
        let cases: Vec<(&str, Tree, usize)> = vec![
            ("one major", vec![(p("/a"), Some(12)), (p("/b"), Some(12)), (p("/c"), None)], 0),
            ("two majors", vec![(p("/a"), Some(12)), (p("/b"), Some(13)), (p("/c"), None)], 2),
            ("none", vec![(p("/a"), None)], 0),
        ];
        for (name, files, n) in cases {
            let mut out = Vec::new();
            mixed_cudart(&files, &mut out);
            assert_eq!(out.len(), n, "{name}");
            assert!(out.iter().all(|f| f.check == CheckId::MixedCudartVersions), "{name}");
        }
    }
}
