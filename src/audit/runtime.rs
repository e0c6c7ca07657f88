//! The CUDA runtime a file needs, for the driver verdict
//! (docs/driver-compatibility.md, "The runtime a file needs").
//!
//! A verdict is "runs" only where the file proves which CUDA major version
//! it needs of the driver:
//! - a NEEDED `libcudart.so.13`, or the file is that runtime (its soname);
//! - a known NVIDIA library release ([`crate::cuda::releases`]): cuFFT's
//!   `libcufft.so.11` ships only with CUDA 12;
//! - a static runtime (`cudart_static`, nvcc's default; its markers, see
//!   [`HostFacts::static_cudart`]) of the release nvcc's toolkit note names
//!   (`Cuda compilation tools, release 13.5, V13.5.37`, in every cubin and
//!   PTX text, found in the fatbin sections as stored; compressed entries
//!   hide it): nvcc links the `cudart_static` of its own toolkit. The
//!   runtime keeps no version of its own in any string: `cudaRuntimeGetVersion`
//!   returns an immediate operand of machine code.
//!
//! The PTX ISA version of the file's PTX is only a floor: PTX 7.8 was
//! written by CUDA 11.8 or later, so its runtime is of CUDA 11 or later,
//! and a driver of an older major cannot load it; it never names the
//! toolkit (cuFFT 11.4 of CUDA 12.9 carries PTX of ISA 7.0 and 7.8).
//! Anything else that has device code or loads the driver is
//! [`Runtime::Unknown`], and the verdict says so.

use serde::Serialize;

use super::dynamic::HostFacts;
use crate::cuda::capabilities::CudaVersion;
use crate::devicecode::DeviceCode;

/// The runtime a file needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "linkage", rename_all = "kebab-case")]
pub enum Runtime {
    /// NEEDED `libcudart.so.<major>`, or the file is that runtime.
    Shared {
        /// The runtime's major version.
        major: u16,
        /// The file is the runtime itself (its soname is
        /// `libcudart.so.<major>`): it dlopens the driver.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        own: bool,
    },
    /// `cudart_static`, linked in.
    Static {
        /// The toolkit release nvcc's note names, when the file holds one.
        #[serde(serialize_with = "ser_version")]
        version: Option<CudaVersion>,
        /// Where the version was read.
        from: Option<Source>,
        /// The floor the PTX ISA sets ([`Runtime::floor`]).
        #[serde(serialize_with = "ser_version", skip_serializing_if = "Option::is_none")]
        floor: Option<CudaVersion>,
    },
    /// A known NVIDIA library release ([`crate::cuda::releases`]): it
    /// needs a driver of its CUDA major version, as a runtime of that
    /// major does.
    LibraryRelease {
        /// Its soname (`libcufft.so.11`).
        library: &'static str,
        /// The CUDA major version that ships it.
        cuda_major: u16,
    },
    /// The file has device code or loads the driver, and says not which
    /// CUDA version it needs.
    Unknown {
        /// It loads the driver itself (cuFFT 11: `libcuda.so.1`, `cuInit`);
        /// else its device code registers with a runtime it does not hold.
        calls_driver: bool,
        /// The floor the PTX ISA sets ([`Runtime::floor`]).
        #[serde(serialize_with = "ser_version", skip_serializing_if = "Option::is_none")]
        floor: Option<CudaVersion>,
    },
}

/// Where a static runtime's version was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// nvcc's toolkit note in a cubin or PTX text.
    ToolkitNote,
}

fn ser_version<S: serde::Serializer>(v: &Option<CudaVersion>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}

impl Runtime {
    /// The major version, when proven.
    pub fn major(&self) -> Option<u16> {
        match self {
            Runtime::Shared { major, .. } => Some(*major),
            Runtime::Static { version, .. } => version.map(|v| v.major),
            Runtime::LibraryRelease { cuda_major, .. } => Some(*cuda_major),
            Runtime::Unknown { .. } => None,
        }
    }

    /// Where the major is not proven: the first CUDA version whose driver
    /// JIT-compiles the file's newest PTX, a floor the runtime's version
    /// cannot be below (the toolkit that wrote the PTX is that one or newer).
    pub fn floor(&self) -> Option<CudaVersion> {
        match self {
            Runtime::Static { version: None, floor, .. } | Runtime::Unknown { floor, .. } => *floor,
            _ => None,
        }
    }

    /// The library a finding is about: `libcudart.so.13`, `cudart_static`,
    /// `libcufft.so.11`; none for an unknown runtime.
    pub fn library(&self) -> Option<String> {
        match self {
            Runtime::Shared { major, .. } => Some(format!("libcudart.so.{major}")),
            Runtime::Static { .. } => Some("cudart_static".to_string()),
            Runtime::LibraryRelease { library, .. } => Some(library.to_string()),
            Runtime::Unknown { .. } => None,
        }
    }

    /// `libcudart.so.13` / `the static CUDA 13.5 runtime`: how messages name it.
    pub fn describe(&self) -> String {
        match self {
            Runtime::Shared { major, own: false } => format!("libcudart.so.{major}"),
            Runtime::Shared { major, own: true } => {
                format!("the driver (it is libcudart.so.{major}, the CUDA {major} runtime)")
            }
            Runtime::Static { version: Some(v), .. } => format!(
                "the static CUDA runtime of CUDA {v} (from the toolkit note of its device code)"
            ),
            Runtime::Static { version: None, .. } => "the static CUDA runtime".to_string(),
            Runtime::LibraryRelease { library, cuda_major } => format!(
                "a CUDA {cuda_major} driver ({library} is NVIDIA's CUDA {cuda_major} release of it)"
            ),
            Runtime::Unknown { calls_driver: true, .. } => "the GPU driver".to_string(),
            Runtime::Unknown { calls_driver: false, .. } => "a CUDA runtime".to_string(),
        }
    }

    /// Why the major is not known, in a few words (the coverage verdict's
    /// `unknown: ...`); `None` where it is.
    pub fn unknown_why(&self) -> Option<&'static str> {
        match self {
            Runtime::Static { version: None, .. } => {
                Some("a static CUDA runtime whose version the file does not say")
            }
            Runtime::Unknown { calls_driver: true, .. } => {
                Some("it calls the driver and holds no CUDA runtime or known library release")
            }
            Runtime::Unknown { calls_driver: false, .. } => {
                Some("its code registers with a CUDA runtime the file does not hold")
            }
            _ => None,
        }
    }
}

/// The runtime `d` needs, with `dev` its device code if any; `note`
/// searches the fatbin sections for the toolkit note (called only for a
/// static runtime).
pub fn of(
    d: &HostFacts,
    dev: Option<&DeviceCode>,
    note: impl FnOnce() -> Option<CudaVersion>,
) -> Option<Runtime> {
    if let Some(rt) = proven(d) {
        return Some(rt);
    }
    let floor = dev
        .and_then(|dev| dev.ptx_isa().into_values().max())
        .and_then(|i| crate::cuda::driver::ptx_needs((i.major, i.minor)));
    if d.static_cudart {
        let version = note();
        let from = version.map(|_| Source::ToolkitNote);
        return Some(Runtime::Static { version, from, floor });
    }
    // A program or library with device code registers it with some
    // runtime; a relocatable object's code is judged where it is linked,
    // and a file without device code has no kernels to judge.
    let calls_driver = d.driver_use().is_some();
    (d.loader.dynamic && dev.is_some()).then_some(Runtime::Unknown { calls_driver, floor })
}

/// The runtime the loader facts alone prove: a NEEDED `libcudart`, the
/// file is that runtime, or a known library release. Nothing in the device
/// code changes it (the PTX floor counts only where none of these
/// holds), which lets a reading that wants only the driver verdicts stop
/// reading device code early (`devicecode::read_until`).
pub fn proven(d: &HostFacts) -> Option<Runtime> {
    let major = |m: u32| u16::try_from(m).unwrap_or(u16::MAX);
    if let Some(m) = d.cudart_major() {
        return Some(Runtime::Shared { major: major(m), own: false });
    }
    if let Some(m) = d.own_cudart_major() {
        return Some(Runtime::Shared { major: major(m), own: true });
    }
    let (library, cuda_major) = d.loader.soname.as_deref().and_then(crate::cuda::releases::of)?;
    Some(Runtime::LibraryRelease { library, cuda_major })
}

/// The first `Cuda compilation tools, release X.Y` in `bytes`.
pub fn toolkit_note(bytes: &[u8]) -> Option<CudaVersion> {
    const NEEDLE: &[u8] = b"Cuda compilation tools, release ";
    memchr::memmem::find_iter(bytes, NEEDLE).find_map(|at| {
        let rest = &bytes[at + NEEDLE.len()..];
        let end = rest.iter().position(|b| !(b.is_ascii_digit() || *b == b'.'))?;
        let v = CudaVersion::parse(std::str::from_utf8(&rest[..end.min(8)]).ok()?)?;
        (v.major > 0).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devicecode::model::PtxIsa;
    use crate::fatbin::{Arch, Variant};

    fn cuda(s: &str) -> CudaVersion {
        CudaVersion::parse(s).unwrap()
    }

    #[test]
    fn toolkit_notes_are_read_and_junk_is_not() {
        assert_eq!(
            toolkit_note(b"\0Cuda compilation tools, release 13.5, V13.5.37\0"),
            Some(cuda("13.5"))
        );
        assert_eq!(toolkit_note(b"Cuda compilation tools, release x"), None);
        assert_eq!(toolkit_note(b"Cuda compilation tools, release "), None);
        assert_eq!(toolkit_note(b"nothing"), None);
    }

    fn dynamic() -> HostFacts {
        let mut h = HostFacts::default();
        h.loader.dynamic = true;
        h
    }

    #[test]
    fn shared_own_release_static_and_unknown_runtimes() {
        let mut shared = dynamic();
        shared.loader.needed = vec!["libcudart.so.13".into()];
        assert_eq!(of(&shared, None, || None), Some(Runtime::Shared { major: 13, own: false }));
        let mut own = dynamic();
        own.loader.soname = Some("libcudart.so.12".into());
        assert_eq!(of(&own, None, || None), Some(Runtime::Shared { major: 12, own: true }));
        let mut cufft = dynamic();
        cufft.loader.soname = Some("libcufft.so.11".into());
        assert_eq!(
            of(&cufft, None, || None),
            Some(Runtime::LibraryRelease { library: "libcufft.so.11", cuda_major: 12 })
        );
        assert_eq!(of(&dynamic(), None, || Some(cuda("13.5"))), None);
        let mut dev = DeviceCode::default();
        dev.note_ptx_isa(Arch { sm: 90, variant: Variant::Base }, PtxIsa { major: 9, minor: 5 });
        dev.note_ptx_isa(Arch { sm: 80, variant: Variant::Base }, PtxIsa { major: 8, minor: 4 });
        let stat = HostFacts { static_cudart: true, ..dynamic() };
        // The toolkit note names the version; the PTX ISA is only a floor.
        assert_eq!(
            of(&stat, Some(&dev), || Some(cuda("13.5"))),
            Some(Runtime::Static {
                version: Some(cuda("13.5")),
                from: Some(Source::ToolkitNote),
                floor: Some(cuda("13.5"))
            })
        );
        let unknown = of(&stat, Some(&dev), || None).unwrap();
        assert_eq!(unknown.major(), None);
        assert_eq!(unknown.floor(), Some(cuda("13.5")));
        // Device code and a driver call, nothing that names the version.
        let calls = HostFacts { libcuda_string: true, ..dynamic() };
        assert_eq!(
            of(&calls, Some(&dev), || unreachable!()),
            Some(Runtime::Unknown { calls_driver: true, floor: Some(cuda("13.5")) })
        );
        // No device code, no runtime: nothing to judge.
        assert_eq!(of(&calls, None, || unreachable!()), None);
    }
}
