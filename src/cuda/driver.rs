//! Will a build run on a given driver? The two classic failures are
//! decidable from the files:
//! - "CUDA driver version is insufficient for CUDA runtime version": the
//!   runtime a file needs (NEEDED `libcudart.so.N`) is of a newer major
//!   version than the driver supports. Within a major version, CUDA's minor
//!   version compatibility lets any runtime run on the major's first driver.
//! - "the provided PTX was compiled with an unsupported toolchain": PTX of an
//!   ISA version newer than the driver's CUDA version cannot be JIT-compiled.
//!   This matters only where PTX is the only code for a GPU.
//!
//! The facts are data (`src/cuda/driver.tsv`, sources in
//! docs/driver-compatibility.md); this module only looks them up.

use std::fmt;

use crate::cuda::capabilities::CudaVersion;

/// The GPU driver's user-space libraries: what NixOS links into
/// /run/opengl-driver/lib and no package provides. The audit counts them as
/// resolved, for NEEDED entries and dlopen targets alike, and a file that
/// may load one must reach that folder by its own RUNPATH
/// (`missing-driver-runpath`).
///
/// Reviewed data, one row per library: its name without `.so`, and the
/// major version of its soname, `None` for the libraries whose soname
/// carries the driver's own version (`libnvidia-glcore.so.550.163.01`).
/// Source: the file lists (`dpkg -c`) of NVIDIA's driver packages in
/// Debian's non-free archive, bookworm 535.261.03 and trixie 550.163.01
/// (docs/driver-compatibility.md, "The driver's libraries").
pub const LIBRARIES: &[(&str, Option<u8>)] = &[
    ("libcuda", Some(1)),
    ("libcudadebugger", Some(1)),
    ("libEGL_nvidia", Some(0)),
    ("libGLESv1_CM_nvidia", Some(1)),
    ("libGLESv2_nvidia", Some(2)),
    ("libGLX_nvidia", Some(0)),
    ("libnvcuvid", Some(1)),
    ("libnvidia-allocator", Some(1)),
    ("libnvidia-api", Some(1)),
    ("libnvidia-cfg", Some(1)),
    ("libnvidia-eglcore", None),
    ("libnvidia-encode", Some(1)),
    ("libnvidia-fbc", Some(1)),
    ("libnvidia-glcore", None),
    ("libnvidia-glsi", None),
    ("libnvidia-glvkspirv", None),
    ("libnvidia-gpucomp", None),
    ("libnvidia-ml", Some(1)),
    ("libnvidia-ngx", Some(1)),
    ("libnvidia-nvvm", Some(4)),
    ("libnvidia-opencl", Some(1)),
    ("libnvidia-opticalflow", Some(1)),
    ("libnvidia-pkcs11", None),
    ("libnvidia-pkcs11-openssl3", None),
    ("libnvidia-ptxjitcompiler", Some(1)),
    ("libnvidia-rtcore", None),
    ("libnvidia-tls", None),
    ("libnvidia-vulkan-producer", None),
    ("libnvoptix", Some(1)),
    ("libvdpau_nvidia", Some(1)),
];

/// Whether `name` is one of the driver's libraries ([`LIBRARIES`]) under a
/// name the driver folder holds: its soname (`libcuda.so.1`), the
/// unversioned link (`libcuda.so`, which the driver packages and NixOS's
/// driver folder carry), or the driver-versioned file
/// (`libcuda.so.550.163.01`; for a library whose soname is that, also the
/// `.so.1` link NixOS makes).
pub fn is_library(name: &str) -> bool {
    let Some((stem, version)) = name.split_once(".so") else { return false };
    let Some(&(_, major)) = LIBRARIES.iter().find(|(s, _)| *s == stem) else { return false };
    if version.is_empty() {
        return true;
    }
    let Some(version) = version.strip_prefix('.') else { return false };
    let parts: Vec<&str> = version.split('.').collect();
    if parts.iter().any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return false;
    }
    match (parts.len(), major) {
        (1, Some(m)) => parts[0] == m.to_string(),
        (1, None) => parts[0] == "1",
        // A driver version: `550.163.01`, `535.54`.
        (2 | 3, _) => parts[0].len() == 3,
        _ => false,
    }
}

const TABLE_TEXT: &str = include_str!("driver.tsv");

/// A driver as the user names it: `580.95.05` (the version `nvidia-smi`
/// prints) or the CUDA version it supports (`nvidia-smi`'s "CUDA Version").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Driver {
    /// The driver's version, when given.
    pub version: Option<DriverVersion>,
    /// The highest CUDA version it supports.
    pub cuda: CudaVersion,
}

/// `major.minor[.patch]` of a driver, compared numerically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DriverVersion(pub u32, pub u32, pub u32);

impl fmt::Display for DriverVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}", self.0, self.1)?;
        if self.2 != 0 {
            write!(f, ".{:02}", self.2)?;
        }
        Ok(())
    }
}

impl DriverVersion {
    /// Parses `580.95.05` or `550.54`.
    pub fn parse(text: &str) -> Option<DriverVersion> {
        let mut parts = text.trim().split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = match parts.next() {
            Some(p) => p.parse().ok()?,
            None => 0,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(DriverVersion(major, minor, patch))
    }
}

/// Why a driver could not be named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// Not `N.N[.N]`.
    #[error("{0:?} is not a driver version (like 580.95.05)")]
    Syntax(String),
    /// A branch older than any CUDA 11 driver, or newer than the table knows.
    #[error(
        "driver branch {branch} is not in the table (known: {first} to {last}); give the CUDA \
         version it supports instead (--driver-cuda, what nvidia-smi prints as \"CUDA Version\")"
    )]
    UnknownBranch {
        /// The driver's major version.
        branch: u32,
        /// Oldest branch known.
        first: u32,
        /// Newest branch known.
        last: u32,
    },
}

struct Table {
    branches: Vec<(u32, CudaVersion)>,
    minor: Vec<(u16, DriverVersion)>,
    ptx: Vec<((u16, u16), CudaVersion)>,
}

fn table() -> &'static Table {
    static TABLE: std::sync::OnceLock<Table> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        parse_table(TABLE_TEXT).unwrap_or_else(|line| {
            // Our own data, checked by a unit test: a bad row is a build bug.
            unreachable!("src/cuda/driver.tsv: malformed row: {line}")
        })
    })
}

fn parse_table(text: &'static str) -> Result<Table, &'static str> {
    let mut t = Table { branches: Vec::new(), minor: Vec::new(), ptx: Vec::new() };
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let cols: Vec<&str> = line.split('\t').collect();
        let cuda = |s: &str| CudaVersion::parse(s).ok_or(line);
        match cols[..] {
            ["branch", b, c] => t.branches.push((b.parse().map_err(|_| line)?, cuda(c)?)),
            ["minor", m, d] => {
                t.minor.push((m.parse().map_err(|_| line)?, DriverVersion::parse(d).ok_or(line)?))
            }
            ["ptx", isa, c] => {
                let v = cuda(isa)?;
                t.ptx.push(((v.major, v.minor), cuda(c)?));
            }
            _ => return Err(line),
        }
    }
    Ok(t)
}

impl Driver {
    /// A driver named by its version: its branch's CUDA version from the table.
    pub fn from_version(text: &str) -> Result<Driver, DriverError> {
        let version = DriverVersion::parse(text).ok_or_else(|| DriverError::Syntax(text.into()))?;
        let branches = &table().branches;
        let (first, last) = (branches[0].0, branches[branches.len() - 1].0);
        // A branch between two listed ones (a short-lived 5x5) supports
        // what the listed branch below it supports.
        let cuda = branches
            .iter()
            .rev()
            .find(|(b, _)| *b <= version.0)
            .filter(|_| version.0 <= last)
            .map(|(_, cuda)| *cuda)
            .ok_or(DriverError::UnknownBranch { branch: version.0, first, last })?;
        Ok(Driver { version: Some(version), cuda })
    }

    /// A driver named by the CUDA version it supports.
    pub fn from_cuda(cuda: CudaVersion) -> Driver {
        Driver { version: None, cuda }
    }

    /// Can this driver load a CUDA runtime of major version `major`? Within
    /// a major version any runtime runs on the major's first driver (minor
    /// version compatibility); a newer major needs a newer driver.
    pub fn runs_runtime(&self, major: u16) -> RuntimeVerdict {
        if major <= self.cuda.major {
            // A driver of the right branch but below the first release of
            // the minor-compatibility floor (early 450/525/580 betas).
            if let (Some(v), Some((_, floor))) =
                (self.version, table().minor.iter().find(|(m, _)| *m == major))
            {
                if major == self.cuda.major && v < *floor {
                    return RuntimeVerdict::BelowMinorFloor { major, floor: *floor };
                }
            }
            return RuntimeVerdict::Runs;
        }
        let floor = table().minor.iter().find(|(m, _)| *m == major).map(|(_, d)| *d);
        RuntimeVerdict::TooNew { major, floor }
    }

    /// Can this driver JIT-compile PTX of ISA version `isa` (`(9, 5)`)?
    pub fn jits_ptx(&self, isa: (u16, u16)) -> PtxVerdict {
        match ptx_needs(isa) {
            Some(needs) if needs <= self.cuda => PtxVerdict::Jits,
            Some(needs) => PtxVerdict::TooNew { needs },
            None => PtxVerdict::Unknown,
        }
    }
}

/// The CUDA release whose driver first drives GPUs of capability `cap`
/// (`src/cuda/gpus.tsv`; an `a`/`f` variant is its GPU's), `None` for a
/// capability without a row (Jetson's, or one the table does not know).
pub fn gpus_since(cap: crate::cuda::capabilities::Capability) -> Option<CudaVersion> {
    let device = cap.device();
    gpu_rows().iter().find(|(c, _)| *c == device).map(|(_, v)| *v)
}

fn gpu_rows() -> &'static [(crate::cuda::capabilities::Capability, CudaVersion)] {
    use crate::cuda::capabilities::Capability;
    static ROWS: std::sync::OnceLock<Vec<(Capability, CudaVersion)>> = std::sync::OnceLock::new();
    ROWS.get_or_init(|| {
        include_str!("gpus.tsv")
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|l| {
                let mut f = l.split('\t');
                let cap = f.next().and_then(Capability::parse);
                let row = cap.zip(f.next().and_then(CudaVersion::parse));
                // Our own data, checked by a unit test: a bad row is a build bug.
                row.unwrap_or_else(|| unreachable!("src/cuda/gpus.tsv: malformed row: {l}"))
            })
            .collect()
    })
}

impl Driver {
    /// `Some(first)` when this driver supports only CUDA versions older
    /// than `first`, the release whose driver first drove GPUs of
    /// capability `cap`: it was not written for such a GPU.
    pub fn predates_gpu(&self, cap: crate::cuda::capabilities::Capability) -> Option<CudaVersion> {
        gpus_since(cap).filter(|first| self.cuda < *first)
    }
}

/// The first CUDA version whose driver JIT-compiles PTX of ISA `isa`.
pub fn ptx_needs(isa: (u16, u16)) -> Option<CudaVersion> {
    table().ptx.iter().find(|(v, _)| *v == isa).map(|(_, cuda)| *cuda)
}

/// Whether a driver loads a runtime; see [`Driver::runs_runtime`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeVerdict {
    /// It does.
    Runs,
    /// The runtime's major version is newer than the driver's: the program
    /// stops with "CUDA driver version is insufficient for CUDA runtime
    /// version". `floor`: the first driver that runs it, when known.
    TooNew {
        /// The runtime's major version.
        major: u16,
        /// The first driver of that major, when the table has it.
        floor: Option<DriverVersion>,
    },
    /// Same major, but the driver is older than the first one minor version
    /// compatibility covers.
    BelowMinorFloor {
        /// The runtime's major version.
        major: u16,
        /// The first driver minor version compatibility covers.
        floor: DriverVersion,
    },
}

/// Whether a driver JIT-compiles a PTX ISA version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PtxVerdict {
    /// It does.
    Jits,
    /// It does not: "the provided PTX was compiled with an unsupported toolchain".
    TooNew {
        /// The first CUDA version whose driver JIT-compiles it.
        needs: CudaVersion,
    },
    /// The ISA version is not in the table (newer than this tool).
    Unknown,
}

/// Why a capability's code does not run on a driver, as the coverage
/// verdict keeps it: the driver's own verdict, not a word for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRunning {
    /// The driver cannot load the file's runtime ([`RuntimeVerdict::TooNew`]
    /// or [`RuntimeVerdict::BelowMinorFloor`]).
    Runtime(RuntimeVerdict),
    /// The driver cannot JIT-compile the PTX ([`PtxVerdict::TooNew`]).
    Ptx(PtxVerdict),
    /// Not decided: the runtime's version or the PTX's ISA is unknown.
    Unknown,
}

impl NotRunning {
    /// `runtime-too-new`, `ptx-too-new`, `unknown`: the word reports use.
    pub fn id(self) -> &'static str {
        match self {
            NotRunning::Runtime(_) => "runtime-too-new",
            NotRunning::Ptx(PtxVerdict::TooNew { .. }) => "ptx-too-new",
            NotRunning::Ptx(_) | NotRunning::Unknown => "unknown",
        }
    }
}

/// In JSON a reason is its word (`"reason": "ptx-too-new"`).
impl serde::Serialize for NotRunning {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_are_driven_from_their_first_release_on() {
        use crate::cuda::capabilities::Capability;
        let cap = |c: &str| Capability::parse(c).unwrap();
        assert_eq!(gpu_rows().len(), 14);
        let d535 = Driver::from_version("535.54.03").unwrap();
        assert_eq!(d535.predates_gpu(cap("12.0")), CudaVersion::parse("12.8"));
        assert_eq!(d535.predates_gpu(cap("10.0a")), CudaVersion::parse("12.8"));
        assert_eq!(d535.predates_gpu(cap("9.0")), None);
        assert_eq!(d535.predates_gpu(cap("8.7")), None, "Jetson: no row");
        let d580 = Driver::from_version("580.95.05").unwrap();
        assert_eq!(d580.predates_gpu(cap("12.1")), None);
    }

    fn cuda(text: &str) -> CudaVersion {
        CudaVersion::parse(text).unwrap()
    }

    #[test]
    fn the_shipped_table_is_well_formed_and_ordered() {
        let t = table();
        assert!(t.branches.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
        assert!(t.ptx.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
        assert_eq!(t.minor.len(), 3);
    }

    #[test]
    fn driver_libraries_under_every_name_the_driver_folder_holds() {
        for name in [
            "libcuda.so.1",
            "libcuda.so",
            "libcuda.so.550.163.01",
            "libnvoptix.so.1",
            "libnvoptix.so",
            "libnvidia-opencl.so.1",
            "libnvidia-cfg.so",
            "libnvidia-nvvm.so.4",
            "libEGL_nvidia.so.0",
            "libnvidia-glcore.so.535.261.03",
            "libnvidia-gpucomp.so.1",
        ] {
            assert!(is_library(name), "{name}");
        }
        for name in [
            "libcuda.so.2",
            "libcudart.so.12",
            "libnvidia-nvvm.so.1",
            "libcuda",
            "libcuda.so.1.x",
            "libnvrtc.so.12",
            "libnvidia-glcore.so.2",
            "libcuda.so.",
        ] {
            assert!(!is_library(name), "{name}");
        }
    }

    #[test]
    fn driver_versions_map_to_their_branch() {
        let d = Driver::from_version("580.95.05").unwrap();
        assert_eq!(d.cuda, cuda("13.0"));
        assert_eq!(Driver::from_version("550.54.15").unwrap().cuda, cuda("12.4"));
        // A branch between two listed ones takes the lower one's CUDA.
        assert_eq!(Driver::from_version("556.12").unwrap().cuda, cuda("12.5"));
        assert!(matches!(Driver::from_version("999.1"), Err(DriverError::UnknownBranch { .. })));
        assert!(matches!(Driver::from_version("390.1"), Err(DriverError::UnknownBranch { .. })));
        assert!(matches!(Driver::from_version("580"), Err(DriverError::Syntax(_))));
        assert!(matches!(Driver::from_version("5.8.0.1"), Err(DriverError::Syntax(_))));
    }

    #[test]
    fn runtimes_run_within_their_major_and_not_beyond() {
        let d580 = Driver::from_version("580.95.05").unwrap();
        assert_eq!(d580.runs_runtime(13), RuntimeVerdict::Runs);
        assert_eq!(d580.runs_runtime(12), RuntimeVerdict::Runs);
        let d550 = Driver::from_version("550.54.15").unwrap();
        assert_eq!(
            d550.runs_runtime(13),
            RuntimeVerdict::TooNew { major: 13, floor: DriverVersion::parse("580.65.06") }
        );
        let early = Driver::from_version("525.12").unwrap();
        assert!(matches!(early.runs_runtime(12), RuntimeVerdict::BelowMinorFloor { .. }));
        assert_eq!(Driver::from_cuda(cuda("12.8")).runs_runtime(12), RuntimeVerdict::Runs);
    }

    #[test]
    fn ptx_newer_than_the_driver_does_not_jit() {
        let d580 = Driver::from_version("580.95.05").unwrap();
        assert_eq!(d580.jits_ptx((9, 0)), PtxVerdict::Jits);
        assert_eq!(d580.jits_ptx((8, 8)), PtxVerdict::Jits);
        assert_eq!(d580.jits_ptx((9, 5)), PtxVerdict::TooNew { needs: cuda("13.5") });
        assert_eq!(d580.jits_ptx((42, 0)), PtxVerdict::Unknown);
        // 12.6 kept PTX ISA 8.5; 8.6 came with 12.7.
        assert_eq!(
            Driver::from_cuda(cuda("12.6")).jits_ptx((8, 6)),
            PtxVerdict::TooNew { needs: cuda("12.7") }
        );
    }
}
