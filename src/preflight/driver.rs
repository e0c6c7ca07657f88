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
    let jetson = std::fs::read_to_string(TEGRA_RELEASE).ok().and_then(|t| parse_tegra_release(&t));
    check_compat_on(compat, kernel, jetson.as_ref(), out);
}

/// Where Jetson Linux (L4T) writes its release: a Jetson board is known by it.
pub const TEGRA_RELEASE: &str = "/etc/nv_tegra_release";

/// A Jetson Linux (L4T) release: `# R35 (release), REVISION: 4.1, ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JetsonRelease {
    /// The release (`35`): JetPack 5 is R35, JetPack 6 R36, JetPack 4 R32.
    pub major: u32,
    /// `R35.4.1`, for messages.
    pub shown: String,
}

/// The release on the first line of `/etc/nv_tegra_release`.
pub fn parse_tegra_release(text: &str) -> Option<JetsonRelease> {
    let line = text.lines().next()?.trim_start_matches('#').trim();
    let major: u32 =
        line.strip_prefix('R')?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?;
    let revision = line
        .split(',')
        .find_map(|f| f.trim().strip_prefix("REVISION:"))
        .map(str::trim)
        .filter(|r| !r.is_empty() && r.chars().all(|c| c.is_ascii_digit() || c == '.'));
    let shown = match revision {
        Some(r) => format!("R{major}.{r}"),
        None => format!("R{major}"),
    };
    Some(JetsonRelease { major, shown })
}

/// The first Jetson Linux release whose boards run NVIDIA's forward
/// compatibility (JetPack 5.0, with cuda_compat of CUDA 11.8 or newer).
pub const JETSON_COMPAT_FROM: u32 = 35;

/// [`check_compat`] on a Jetson board of release `jetson` (`None`: not a
/// Jetson). Jetson's rules as NVIDIA documents them (docs/preflight.md):
/// forward compatibility from JetPack 5 (Jetson Linux R35) on; JetPack 4
/// (R32: TX1, TX2, Nano, and Xavier before JetPack 5) stays on the CUDA it
/// ships. JetPack 5's GPU driver (nvgpu) shows no kernel module version:
/// there the board's release is what is checked.
pub fn check_compat_on(
    compat: &Libcuda,
    kernel: Option<&KernelModule>,
    jetson: Option<&JetsonRelease>,
    out: &mut Vec<Check>,
) {
    let shown = compat.resolved.display().to_string();
    if let Some(j) = jetson.filter(|j| j.major < JETSON_COMPAT_FROM) {
        out.push(Check::not_ok(
            "cuda-compat-jetson-unsupported",
            Status::Error,
            &shown,
            format!("cuda_compat's libcuda {shown} on Jetson Linux {}: NVIDIA's forward compatibility on Jetson starts with JetPack 5 (Jetson Linux R{JETSON_COMPAT_FROM}) and CUDA 11.8; this board's JetPack 4 or older runs only the CUDA it ships", j.shown),
            "drop cuda_compat and build against the CUDA this JetPack ships (JetPack 4: CUDA 10.2), or flash JetPack 5 or newer (Xavier, Orin)",
        ));
        return;
    }
    let platform = match jetson {
        Some(j) => format!(
            "on Jetson Linux {} (JetPack 5 or newer: forward compatibility is supported)",
            j.shown
        ),
        None => "which works on data-center GPUs and Jetson only (GeForce/RTX: 804)".to_string(),
    };
    let (Some(cv), Some(k)) = (compat.version, kernel) else {
        out.push(Check::not_ok(
            "cuda-compat",
            Status::Info,
            &shown,
            format!("cuda_compat's libcuda {shown} is on a file's RUNPATH; its version or the kernel module's is unknown: not compared; forward compatibility, {platform}"),
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
            format!(
                "cuda_compat {cv} on kernel module {}: forward compatibility, {platform}",
                k.version
            ),
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

    #[test]
    fn jetson_releases() {
        let r = |t| parse_tegra_release(t).map(|j| (j.major, j.shown));
        let jp5 = "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023\n";
        assert_eq!(r(jp5), Some((35, "R35.4.1".into())));
        assert_eq!(r("# R32 (release), REVISION: 7.4, GCID: 1\n"), Some((32, "R32.7.4".into())));
        assert_eq!(r("# R36 (release)\n"), Some((36, "R36".into())));
        assert_eq!(r("not a release\n"), None);
        assert_eq!(r(""), None);
    }
}
