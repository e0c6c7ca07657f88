//! Capability coverage of the device code: the rows
//! `no-code-for-capability`, `ptx-only-capability`,
//! `missing-forward-compat-ptx`, `unrequested-arch`,
//! `device-code-not-scanned` and `jetson-capability-mismatch` of the checks
//! table.

use std::path::Path;

use crate::audit::finding::{CheckId, Finding, Severity, Subject};
use crate::audit::Policy;
use crate::cuda::capabilities::{coverage, Capability, Code, CodeKind, Request, Runs, Variant};
use crate::devicecode::model::capability;
use crate::devicecode::DeviceCode;
use crate::elf::dynamic::DynamicFacts;

/// Device code outside the fatbin sections that the audit saw and did not
/// read (`--no-scan`): no capability is judged on the code read alone.
pub fn scan_coverage(path: &Path, dev: &DeviceCode, out: &mut Vec<Finding>) {
    if let Some(offset) = dev.unscanned {
        out.push(Finding::new(
            CheckId::DeviceCodeNotScanned,
            path,
            format!(
                "fatbin containers lie outside the fatbin sections (one at offset {offset:#x}) and were not read (--no-scan): no capability was judged on this file's code"
            ),
        ));
    }
}

/// Capability coverage of the device code against the requested list.
pub fn capabilities(
    path: &Path,
    dev: &DeviceCode,
    loader: Option<&DynamicFacts>,
    policy: &Policy,
    out: &mut Vec<Finding>,
) {
    let Some(req) = &policy.requested else { return };
    if !dev.has_code() {
        return;
    }
    let codes = dev.codes();
    // What was not read may hold the code a capability lacks: no "nothing
    // runs" about it (device-code-not-scanned says why).
    if dev.unscanned.is_none() {
        gaps(path, &codes, req, out);
        let before = out.len();
        forward_compat(path, &codes, req, policy, out);
        if let Some(why) = prebuilt(path, loader, policy) {
            for f in &mut out[before..] {
                f.severity = Severity::Info;
                f.message.push_str(&format!(
                    " ({why}: only its maker can add PTX, so an info; a warning where the build compiles it)"
                ));
            }
        }
    }
    unrequested(path, dev, req, policy, out);
}

/// "SASS sm_80 sm_86" / "no PTX": what the file has of one kind, for messages.
fn have(codes: &[Code], kind: CodeKind) -> String {
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
}

/// Requested capabilities nothing runs on, or only the PTX JIT.
fn gaps(path: &Path, codes: &[Code], req: &Request, out: &mut Vec<Finding>) {
    let have = |kind| have(codes, kind);
    for cap in &req.capabilities {
        match coverage(codes, *cap) {
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
}

/// Forward compatibility: PTX for the last capability (Nixpkgs' rule), and
/// for every capability written with +PTX.
fn forward_compat(
    path: &Path,
    codes: &[Code],
    req: &Request,
    policy: &Policy,
    out: &mut Vec<Finding>,
) {
    let have = |kind| have(codes, kind);
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
        if ok {
            continue;
        }
        let has_ptx =
            codes.iter().any(|c| c.kind == CodeKind::Ptx && c.target.variant == Variant::Base);
        let message = if has_ptx {
            // Newer PTX JITs on every GPU from its own capability on: only
            // the known capabilities between, without SASS, get nothing
            // (cuDNN and NCCL carry SASS up to sm_120 and compute_120: none).
            let jetson = req.capabilities.iter().any(|c| is_jetson(*c) == Some(true));
            let stranded: Vec<String> = crate::cuda::capabilities::table()
                .iter()
                .filter(|i| i.capability.variant == Variant::Base && i.capability > cap.device())
                .filter(|i| jetson || !i.jetson)
                .filter(|i| coverage(codes, i.capability) == Runs::No)
                .map(|i| i.capability.to_string())
                .collect();
            if stranded.is_empty() {
                continue;
            }
            format!(
                "forward compatibility needs PTX for capability {cap} or lower: the file has {} and {}, so capability {} gets nothing",
                have(CodeKind::Sass),
                have(CodeKind::Ptx),
                stranded.join(", ")
            )
        } else {
            format!(
                "forward compatibility needs PTX for capability {cap} or lower; the file has no PTX, so a GPU newer than its SASS gets nothing"
            )
        };
        out.push(
            Finding::new(CheckId::MissingForwardCompatPtx, path, message)
                .about(Subject::Capability(cap.to_string())),
        );
    }
}

/// Why the file's device code is nobody's to rebuild here, when there is
/// evidence it is prebuilt: inside a Nix build, a file outside the outputs
/// of a derivation that compiles code (Nixpkgs' redist builder and most
/// packages of prebuilt binaries set `dontBuild`); a file of an installed
/// Python wheel (pip installs built wheels: `site-packages`,
/// `dist-packages`); or one of NVIDIA's redistributable libraries (its
/// SONAME a `redist` row of the providers table). Without evidence, `None`:
/// a source build audited after the fact keeps its warnings.
fn prebuilt(path: &Path, loader: Option<&DynamicFacts>, policy: &Policy) -> Option<String> {
    if policy.in_build {
        let own = policy.own_outputs.iter().any(|o| path.starts_with(o));
        return (!own).then(|| "not compiled by this derivation".to_string());
    }
    let wheel = path
        .components()
        .any(|c| matches!(c.as_os_str().to_str(), Some("site-packages" | "dist-packages")));
    if wheel {
        return Some("a file of an installed Python wheel, prebuilt".to_string());
    }
    let soname = loader.and_then(|l| l.soname.as_deref())?;
    let provider = crate::dlopen::table::provider(soname).filter(|p| p.redist)?;
    Some(format!("NVIDIA's prebuilt {soname} of {}", provider.attribute))
}

/// Device code for capabilities nobody asked for.
fn unrequested(
    path: &Path,
    dev: &DeviceCode,
    req: &Request,
    policy: &Policy,
    out: &mut Vec<Finding>,
) {
    // Family code (`sm_100f`) serves its base capability natively: asking
    // for 10.0 asks for it too (nvcc's `-arch=sm_100f` is how one builds
    // once for 10.0 and 10.3). Arch-specific code (`sm_90a`) runs on exactly
    // its base capability: asking for 9.0 asks for the code a 9.0 GPU runs,
    // and in cuDNN 9.10's libcudnn_adv sm_90a is the only such code.
    let asked = |list: &[Capability], cap: Capability| {
        list.contains(&cap) || (cap.variant != Variant::Base && list.contains(&cap.device()))
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

/// Jetson awareness. Jetson capabilities (the table's Jetson rows) run only
/// on aarch64 Jetson boards: SASS or PTX for one in a host file for another
/// machine is a wrong target. And a Jetson build (every requested capability
/// a Jetson one, as Nixpkgs' `isJetsonBuild`) has no use for SASS of SBSA or
/// desktop capabilities.
///
/// A warning only where someone can act on it. A request that is a
/// configuration error ([`request_error`]) is said once per file with device
/// code, whatever the code holds (Nixpkgs refuses such a request: the fix
/// is the request, not each architecture); the code it asked for is not
/// reported again. Code with a wrong target is a warning in the build's own
/// files ([`Policy::own_outputs`]) and an info elsewhere (NVIDIA's x86_64
/// libraries carry sm_72, sm_87 and sm_101).
pub fn jetson(
    path: &Path,
    dev: &DeviceCode,
    d: Option<&DynamicFacts>,
    policy: &Policy,
    out: &mut Vec<Finding>,
) {
    let mut codes = dev.codes();
    codes.sort_by_key(|c| (c.target, c.kind == CodeKind::Ptx));
    codes.dedup();
    let requested: &[Capability] = policy.requested.as_ref().map_or(&[], |r| &r.capabilities);
    let config = policy.requested.as_ref().and_then(|r| request_error(r, d));
    if let Some((why, first)) = &config {
        if !dev.is_empty() {
            out.push(
                Finding::new(
                    CheckId::JetsonCapabilityMismatch,
                    path,
                    format!("{why} (Nixpkgs refuses this request: fix cudaCapabilities)"),
                )
                .about(Subject::Arch(format!(
                    "sm_{}{}",
                    first.sm(),
                    first.variant.suffix()
                ))),
            );
        }
    }
    let own = policy.own_outputs.iter().any(|o| path.starts_with(o));
    let finding = |message: String, c: &Code| {
        let mut f = Finding::new(CheckId::JetsonCapabilityMismatch, path, message)
            .about(Subject::Arch(code_name(c)));
        if own {
            f.message.push_str(" (built by this derivation)");
        } else {
            f.severity = Severity::Info;
        }
        f
    };
    if let Some(d) = d.filter(|d| d.machine != EM_AARCH64) {
        let target = d.target();
        let asked = |c: &Code| config.is_some() && requested.contains(&c.target);
        for c in codes.iter().filter(|c| is_jetson(c.target) == Some(true) && !asked(c)) {
            out.push(finding(
                format!(
                    "device code for the Jetson capability {} ({}) in a file for {}: Jetson boards are aarch64",
                    c.target,
                    code_name(c),
                    target.describe()
                ),
                c,
            ));
        }
    }
    if config.is_some()
        || requested.is_empty()
        || !requested.iter().all(|c| is_jetson(*c) == Some(true))
    {
        return;
    }
    let wanted: Vec<String> = requested.iter().map(|c| c.to_string()).collect();
    for c in codes.iter().filter(|c| c.kind == CodeKind::Sass && is_jetson(c.target) == Some(false))
    {
        out.push(finding(
            format!(
                "a Jetson build (capabilities {}) with SASS for the SBSA/desktop capability {} ({})",
                wanted.join(", "),
                c.target,
                code_name(c)
            ),
            c,
        ));
    }
}

/// `sm_87` / `compute_87`: a code's name in findings.
fn code_name(c: &Code) -> String {
    let prefix = if c.kind == CodeKind::Sass { "sm" } else { "compute" };
    format!("{prefix}_{}{}", c.target.sm(), c.target.variant.suffix())
}

/// `e_machine` of aarch64, the only machine Jetson boards are.
const EM_AARCH64: u16 = 183;

/// Whether a capability is a Jetson one (the capability table's column).
fn is_jetson(c: Capability) -> Option<bool> {
    crate::cuda::capabilities::info(c)
        .or_else(|| crate::cuda::capabilities::info(c.device()))
        .map(|i| i.jetson)
}

/// Why the requested capabilities are a configuration error for this file,
/// as Nixpkgs refuses them: a Jetson capability for a file that is not for
/// aarch64, or Jetson and non-Jetson capabilities together (`a`/`f` ones
/// left out of that test).
///
/// Returns the sentence and the first Jetson capability requested.
fn request_error(req: &Request, d: Option<&DynamicFacts>) -> Option<(String, Capability)> {
    let first = *req.capabilities.iter().find(|c| is_jetson(**c) == Some(true))?;
    if let Some(d) = d.filter(|d| d.machine != EM_AARCH64) {
        return Some((
            format!(
                "a configuration error: the Jetson capability {first} was requested for a build for {}",
                d.target().describe()
            ),
            first,
        ));
    }
    let other = req
        .capabilities
        .iter()
        .find(|c| c.variant == Variant::Base && is_jetson(**c) == Some(false))?;
    Some((
        format!(
            "a configuration error: the Jetson capability {first} was requested together with {other}, which is not one"
        ),
        first,
    ))
}
