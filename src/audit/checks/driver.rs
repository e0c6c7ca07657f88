//! Whether a given driver runs the files: the rows
//! `driver-too-old-for-runtime`, `ptx-too-new-for-driver`,
//! `driver-verdict-unknown` and `mixed-cudart-versions` of the checks table.

use std::path::{Path, PathBuf};

use crate::audit::finding::{CheckId, Finding, Subject};
use crate::audit::runtime::Runtime;
use crate::audit::{DriverVerdict, Policy};
use crate::cuda::capabilities::{Capability, Runs};
use crate::cuda::driver::{Driver, NotRunning, PtxVerdict, RuntimeVerdict};
use crate::devicecode::model::capability;
use crate::devicecode::model::PtxIsa;
use crate::devicecode::DeviceCode;

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
/// with the PTX's ISA) and the file's runtime. The one verdict function:
/// the coverage lines, the JSON, the HTML matrix and the metrics all show
/// what it says. "Runs" only where the runtime's major is proven (or the
/// file has none to load: an object, a fatbin); a runtime known only by
/// its PTX ISA floor fails where the floor's major is newer than the
/// driver's, and is otherwise undecided.
///
/// `cap`, the GPU's capability: a driver older than the first one that
/// drove such GPUs (`cuda::driver::gpus_since`: driver 535, CUDA 12.2, and
/// capability 12.0, first driven by CUDA 12.8's) is not said to run
/// anything there. That is undecided, not a failure: the pairing is one no
/// machine should have, and a point release may have added a GPU.
pub fn verdict(
    driver: &Driver,
    cap: Option<Capability>,
    runs: Runs,
    isa: Option<PtxIsa>,
    runtime: Option<&Runtime>,
) -> DriverVerdict {
    let has_cuda = driver.cuda.to_string();
    let no = |reason, needs: Option<String>, why: Option<&str>| DriverVerdict {
        runs: false,
        reason: Some(reason),
        needs_cuda: needs,
        has_cuda: has_cuda.clone(),
        why: why.map(str::to_string),
    };
    // A proven failure (the runtime, then the PTX) wins over an undecided
    // part: PTX too new for the driver fails whatever the runtime is.
    let mut undecided = None;
    if let Some(rt) = runtime {
        match (rt.major(), rt.floor()) {
            (Some(m), _) => match driver.runs_runtime(m) {
                RuntimeVerdict::Runs => {}
                v => return no(NotRunning::Runtime(v), Some(format!("{m}.0")), None),
            },
            (None, Some(f)) if f.major > driver.cuda.major => {
                let v = driver.runs_runtime(f.major);
                return no(NotRunning::Runtime(v), Some(format!("{}.0", f.major)), None);
            }
            (None, _) => undecided = rt.unknown_why(),
        }
    }
    if runs == Runs::Jit {
        match isa.map(|i| driver.jits_ptx((i.major, i.minor))) {
            Some(PtxVerdict::Jits) => {}
            Some(v @ PtxVerdict::TooNew { needs }) => {
                return no(NotRunning::Ptx(v), Some(needs.to_string()), None)
            }
            Some(PtxVerdict::Unknown) => {
                undecided = undecided.or(Some("a PTX ISA newer than this tool's table"))
            }
            None => undecided = undecided.or(Some("the PTX's ISA is not known")),
        }
    }
    let predates = cap.and_then(|c| driver.predates_gpu(c).map(|first| (c.device(), first)));
    if let (None, Some((c, first))) = (undecided, predates) {
        let why = format!(
            "capability {c} GPUs were first driven by CUDA {first}'s driver, this one supports CUDA {}",
            driver.cuda
        );
        return no(NotRunning::Unknown, Some(first.to_string()), Some(why.as_str()));
    }
    if undecided.is_some() {
        return no(NotRunning::Unknown, None, undecided);
    }
    DriverVerdict { runs: runs != Runs::No, reason: None, needs_cuda: None, has_cuda, why: None }
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
        runtime_findings(path, rt, drv, out);
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

/// How a message starts to say what the file needs of the driver:
/// `needs libcudart.so.13`, `is libcudart.so.12`, `is libcufft.so.11,
/// which only CUDA 12 ships`.
fn lead(rt: &Runtime) -> String {
    match rt {
        Runtime::Shared { major, own: true } => format!("is libcudart.so.{major}"),
        Runtime::LibraryRelease { library, cuda_major } => {
            format!("is {library}, which only CUDA {cuda_major} ships")
        }
        _ => format!("needs {}", rt.describe()),
    }
}

/// Whether `drv` loads the runtime `rt` the file needs: the
/// `driver-too-old-for-runtime` and `driver-verdict-unknown` findings.
fn runtime_findings(path: &Path, rt: &Runtime, drv: &Driver, out: &mut Vec<Finding>) {
    let has = driver_name(drv);
    let about = |f: Finding| match rt.library() {
        Some(l) => f.about(Subject::Library(l)),
        None => f,
    };
    let (major, by_floor) = match (rt.major(), rt.floor()) {
        (Some(m), _) => (m, None),
        (None, Some(f)) if f.major > drv.cuda.major => (f.major, Some(f)),
        (None, floor) => {
            let floor = floor
                .map(|f| format!("; its PTX ISA says only that CUDA {f} or newer wrote it"))
                .unwrap_or_default();
            let why = match rt {
                Runtime::Static { .. } => "links the CUDA runtime statically and says not which version (no toolkit note in its stored device code)",
                Runtime::Unknown { calls_driver: true, .. } => "calls the GPU driver itself and names no CUDA version: no CUDA runtime in it (no libcudart NEEDED, no static runtime's markers) and no known NVIDIA library release",
                _ => "has device code and no CUDA runtime of its own (no libcudart NEEDED, no static runtime): the runtime it registers with comes from elsewhere",
            };
            out.push(Finding::new(
                CheckId::DriverVerdictUnknown,
                path,
                format!("{why}{floor}: whether {has} runs it was not decided"),
            ));
            return;
        }
    };
    match drv.runs_runtime(major) {
        RuntimeVerdict::Runs => {}
        RuntimeVerdict::TooNew { major, floor: first } => {
            let needs = match by_floor {
                Some(f) => format!(
                    "has PTX whose ISA CUDA {f} or newer wrote, so its CUDA runtime is of CUDA {major} or newer"
                ),
                None if matches!(rt, Runtime::LibraryRelease { .. }) => format!(
                    "{}: it needs a driver of CUDA {major}, as a CUDA {major} runtime does",
                    lead(rt)
                ),
                None => format!("{}, a CUDA {major} runtime", lead(rt)),
            };
            out.push(about(Finding::new(
                CheckId::DriverTooOldForRuntime,
                path,
                format!(
                    "{needs}{}; {has} supports at most CUDA {}: the first CUDA call fails with 'CUDA driver version is insufficient for CUDA runtime version'; {}",
                    first.map(|f| format!(" (driver {f} or newer)")).unwrap_or_default(),
                    drv.cuda,
                    compat_hint(&format!("{major}.0"))
                ),
            )))
        }
        RuntimeVerdict::BelowMinorFloor { major, floor } => out.push(about(Finding::new(
            CheckId::DriverTooOldForRuntime,
            path,
            format!(
                "{}; CUDA {major}'s minor version compatibility starts at driver {floor} and {has} is older: the first CUDA call fails with 'CUDA driver version is insufficient for CUDA runtime version'; a newer driver of the same branch fixes it, and {}",
                lead(rt),
                compat_hint(&format!("{major}.0"))
            ),
        ))),
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
