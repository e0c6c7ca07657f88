//! The driver folder and the driver's versions. NixOS links the driver's
//! user-space libraries into `/run/opengl-driver/lib`; a sandbox must hold
//! that link *and* its target (a link whose target is not mounted is the
//! silent failure of NixOS/nixpkgs#376699: the `dlopen` of libcuda fails).
//!
//! The user-space version is read from the name of the file the soname
//! link `libcuda.so.1` resolves to (`libcuda.so.580.159.04`), never from
//! the library's strings: the 580 library also holds `535.54.02`. The
//! kernel module's version comes from `/proc/driver/nvidia/version` (or
//! `/sys/module/nvidia/version`). The two must be equal: otherwise
//! `cuInit` fails with 803, `CUDA_ERROR_SYSTEM_DRIVER_MISMATCH`.

use std::path::{Path, PathBuf};

use super::{Check, Status};
use crate::cuda::driver::DriverVersion;

/// A `libcuda.so.1` found: the path asked, the file it resolves to, and
/// the version that file's name carries.
#[derive(Debug, Clone)]
pub struct Libcuda {
    /// `<folder>/libcuda.so.1`.
    pub path: PathBuf,
    /// The file the links end at.
    pub resolved: PathBuf,
    /// From the resolved name (`libcuda.so.X.Y.Z`).
    pub version: Option<DriverVersion>,
}

/// The version in a driver library's file name: `libcuda.so.580.159.04`.
pub fn version_of_name(name: &str) -> Option<DriverVersion> {
    let (_, v) = name.split_once(".so.")?;
    let v = DriverVersion::parse(v)?;
    (v.0 >= 100).then_some(v)
}

/// The `libcuda.so.1` of `folder`, resolved; `None` when there is none.
pub fn libcuda_in(folder: &Path) -> Option<Libcuda> {
    let path = folder.join("libcuda.so.1");
    let resolved = std::fs::canonicalize(&path).ok()?;
    let version = resolved.file_name().and_then(|n| version_of_name(&n.to_string_lossy()));
    Some(Libcuda { path, resolved, version })
}

/// Checks the driver folder: the link and its target, `libcuda.so.1`,
/// `libnvidia-ptxjitcompiler.so.1`. Returns the libcuda found.
pub fn check_folder(folder: &Path, out: &mut Vec<Check>) -> Option<Libcuda> {
    let shown = folder.display().to_string();
    if std::fs::metadata(folder).is_err() {
        out.push(match dangling(folder) {
            Some((link, target)) => Check::not_ok(
                "driver-link-dangling",
                Status::Error,
                &shown,
                format!("{} points to {}, which does not exist in this mount namespace: loading libcuda fails", link.display(), target.display()),
                "mount the link's target into the sandbox too (nix-required-mounts: the driver's store path, not only /run/opengl-driver; NixOS/nixpkgs#376699)",
            ),
            None => Check::not_ok(
                "no-driver-folder",
                Status::Error,
                &shown,
                format!("no {shown}: the sandbox has no GPU driver"),
                "on NixOS enable programs.nix-required-mounts.presets.nvidia-gpu (it mounts /run/opengl-driver and its target); elsewhere pass --driver-folder with the folder that holds libcuda.so.1",
            ),
        });
        return None;
    }
    let lib = libcuda_in(folder);
    match &lib {
        Some(l) => out.push(Check::ok(
            "driver-folder",
            &shown,
            format!("{} -> {}", l.path.display(), l.resolved.display()),
        )),
        None => {
            let why = match dangling(&folder.join("libcuda.so.1")) {
                Some((link, target)) => format!(
                    "{} points to {}, which does not exist here",
                    link.display(),
                    target.display()
                ),
                None => format!("no libcuda.so.1 in {shown}"),
            };
            out.push(Check::not_ok(
                "no-libcuda",
                Status::Error,
                &shown,
                why,
                "mount the driver's libraries (the NVIDIA driver package's lib folder) at the driver folder",
            ));
        }
    }
    if std::fs::metadata(folder.join("libnvidia-ptxjitcompiler.so.1")).is_err() {
        out.push(Check::not_ok(
            "no-ptxjitcompiler",
            Status::Warning,
            &shown,
            format!("no libnvidia-ptxjitcompiler.so.1 in {shown}: PTX cannot be JIT-compiled (code with SASS for the GPU still runs)"),
            "mount the whole driver folder, not libcuda alone",
        ));
    }
    lib
}

/// The first link on the way to `path` whose target does not exist.
fn dangling(path: &Path) -> Option<(PathBuf, PathBuf)> {
    let mut at = PathBuf::new();
    for part in path.components() {
        at.push(part);
        let meta = std::fs::symlink_metadata(&at).ok()?;
        if meta.file_type().is_symlink() && std::fs::metadata(&at).is_err() {
            let target = std::fs::read_link(&at).ok()?;
            let target = at.parent().map_or(target.clone(), |p| p.join(&target));
            return Some((at, target));
        }
    }
    None
}

/// The kernel module's version and where it was read.
#[derive(Debug, Clone)]
pub struct KernelModule {
    /// `580.159.04`.
    pub version: DriverVersion,
    /// The file it came from.
    pub from: &'static str,
}

/// The loaded kernel module's version, when this namespace can read it.
pub fn kernel_module() -> Option<KernelModule> {
    if let Ok(text) = std::fs::read_to_string("/proc/driver/nvidia/version") {
        if let Some(v) = parse_proc_version(&text) {
            return Some(KernelModule { version: v, from: "/proc/driver/nvidia/version" });
        }
    }
    let text = std::fs::read_to_string("/sys/module/nvidia/version").ok()?;
    Some(KernelModule { version: DriverVersion::parse(&text)?, from: "/sys/module/nvidia/version" })
}

/// The version on the `NVRM version:` line (`NVIDIA UNIX x86_64 Kernel
/// Module  580.159.04  Release Build ...`, or the open module's wording).
pub fn parse_proc_version(text: &str) -> Option<DriverVersion> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace().filter_map(DriverVersion::parse).find(|v| v.0 >= 100)
}

/// Compares the user-space driver with the kernel module.
pub fn check_versions(lib: Option<&Libcuda>, kernel: Option<&KernelModule>, out: &mut Vec<Check>) {
    let Some(lib) = lib else { return };
    let shown = lib.resolved.display().to_string();
    let Some(user) = lib.version else {
        out.push(Check::not_ok(
            "driver-version-unknown",
            Status::Warning,
            &shown,
            format!("the name {shown} carries no driver version: the API-mismatch and closure checks are skipped"),
            "keep the driver's file names (libcuda.so.1 -> libcuda.so.X.Y.Z) as the driver installs them",
        ));
        return;
    };
    match kernel {
        None => out.push(Check::not_ok(
            "kernel-module-unknown",
            Status::Info,
            "/proc/driver/nvidia/version",
            format!("user-space driver {user}; the kernel module's version is not readable here (no /proc/driver/nvidia, /sys/module/nvidia): the API-mismatch check is skipped"),
            "",
        )),
        Some(k) if k.version == user => out.push(Check::ok(
            "driver-version",
            &shown,
            format!("user-space driver {user} matches the kernel module ({})", k.from),
        )),
        Some(k) => out.push(Check::not_ok(
            "driver-version-mismatch",
            Status::Error,
            &shown,
            format!(
                "user-space driver {user} but kernel module {} ({}): cuInit fails with 803 (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, \"API mismatch\")",
                k.version, k.from
            ),
            "mount the driver of the running kernel module (on NixOS: reboot after a driver update, or point /run/opengl-driver at hardware.nvidia.package of the booted system)",
        )),
    }
}

/// `cuda_compat`: a newer user-space driver a file reaches through its
/// RUNPATH, run on an older kernel module (NVIDIA's forward compatibility:
/// data-center GPUs and Jetson only). It must be at least as new as the
/// kernel module; it is of no use (and may fail with 804,
/// `CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE`) on GeForce/RTX GPUs.
pub fn check_compat(compat: &Libcuda, kernel: Option<&KernelModule>, out: &mut Vec<Check>) {
    let shown = compat.resolved.display().to_string();
    let (Some(cv), Some(k)) = (compat.version, kernel) else {
        out.push(Check::not_ok(
            "cuda-compat",
            Status::Info,
            &shown,
            format!("cuda_compat's libcuda {shown} is on a file's RUNPATH; its version or the kernel module's is unknown: not compared"),
            "",
        ));
        return;
    };
    if cv < k.version {
        out.push(Check::not_ok(
            "cuda-compat-older-than-kernel",
            Status::Error,
            &shown,
            format!("cuda_compat {cv} is older than the kernel module {}: forward compatibility needs a newer user-space driver than the kernel's, an older one fails with 803", k.version),
            "drop cuda_compat from this closure (the host's driver is newer), or use a cuda_compat at least as new as the kernel module",
        ));
    } else {
        out.push(Check::not_ok(
            "cuda-compat",
            Status::Info,
            &shown,
            format!("cuda_compat {cv} on kernel module {}: forward compatibility, which works on data-center GPUs and Jetson only (GeForce/RTX: 804)", k.version),
            "",
        ));
    }
}

/// `LD_LIBRARY_PATH` comes before RUNPATH and the driver folder: a
/// `libcuda.so.1` in one of its folders is the one every program loads.
/// The first one found is checked: the driver folder's is fine; another is
/// treated as a user-space driver of its own (cuda_compat's rules against
/// the kernel module) and named, since it shadows the driver folder.
pub fn check_search_path(
    lib: Option<&Libcuda>,
    kernel: Option<&KernelModule>,
    out: &mut Vec<Check>,
) {
    let Some(value) = std::env::var_os("LD_LIBRARY_PATH") else { return };
    for dir in std::env::split_paths(&value).filter(|d| !d.as_os_str().is_empty()) {
        let Some(other) = libcuda_in(&dir) else { continue };
        if lib.is_some_and(|l| l.resolved == other.resolved) {
            return;
        }
        out.push(Check::not_ok(
            "libcuda-on-search-path",
            Status::Warning,
            dir.display().to_string(),
            format!(
                "LD_LIBRARY_PATH's {} ({}) is loaded instead of the driver folder's libcuda",
                other.path.display(),
                other.resolved.display()
            ),
            "unset LD_LIBRARY_PATH's driver folder unless it is a cuda_compat you mean to use",
        ));
        check_compat(&other, kernel, out);
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(version_of_name("libcuda.so.580.159.04"), Some(DriverVersion(580, 159, 4)));
        assert_eq!(version_of_name("libcuda.so.1"), None);
        let t = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22)  Thu\nGCC version:  gcc version 12.3.0\n";
        assert_eq!(parse_proc_version(t), Some(DriverVersion(580, 159, 4)));
        let t = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Sun Jun\n";
        assert_eq!(parse_proc_version(t), Some(DriverVersion(535, 261, 3)));
    }
}
