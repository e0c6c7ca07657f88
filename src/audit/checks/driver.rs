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
            Runtime::Shared { major, .. } => format!("libcudart.so.{major}"),
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
