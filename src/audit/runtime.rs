//! The CUDA runtime a file needs, for the driver verdict
//! (docs/driver-compatibility.md, "The runtime a file needs").
//!
//! A shared runtime is named by its NEEDED entry (`libcudart.so.13`): the
//! major version, which is all minor version compatibility asks about. A
//! static runtime (`cudart_static`, nvcc's default) leaves no version in any
//! table or string of its own: `cudaRuntimeGetVersion` returns an immediate
//! operand of machine code. What the file does say is which toolkit built
//! its device code, and nvcc links the `cudart_static` of its own toolkit:
//! - the PTX ISA version of its PTX entries (entry headers, no read): nvcc
//!   writes its own toolkit's ISA (13.5 writes 9.5);
//! - else the toolkit note nvcc leaves in every cubin and PTX text
//!   (`Cuda compilation tools, release 13.5, V13.5.37`), found in the
//!   fatbin sections as stored; compressed entries hide it.
//!
//! Neither is the runtime's own number: a build that compiles device code
//! with one toolkit and links another's `cudart_static` is misjudged. When
//! neither is there, the version is unknown and the finding says so.

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
        /// The toolkit release that built the device code, when the file
        /// says it ([`Source`]).
        #[serde(serialize_with = "ser_version")]
        version: Option<CudaVersion>,
        /// Where the version was read.
        from: Option<Source>,
    },
}

/// Where a static runtime's version was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// The highest PTX ISA version of the device code.
    PtxIsa,
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
    /// The major version, when known.
    pub fn major(&self) -> Option<u16> {
        match self {
            Runtime::Shared { major, .. } => Some(*major),
            Runtime::Static { version, .. } => version.map(|v| v.major),
        }
    }

    /// `libcudart.so.13` / `the static CUDA 13.5 runtime`: how messages name it.
    pub fn describe(&self) -> String {
        match self {
            Runtime::Shared { major, own: false } => format!("libcudart.so.{major}"),
            Runtime::Shared { major, own: true } => {
                format!("the driver (it is libcudart.so.{major}, the CUDA {major} runtime)")
            }
            Runtime::Static { version: Some(v), from } => format!(
                "the static CUDA runtime of CUDA {v} (from the {})",
                match from {
                    Some(Source::PtxIsa) => "PTX ISA version of its device code",
                    _ => "toolkit note of its device code",
                }
            ),
            Runtime::Static { version: None, .. } => "the static CUDA runtime".to_string(),
        }
    }
}

/// The runtime `d` needs; `note` searches the fatbin sections for the
/// toolkit note (called only for a static runtime without PTX).
pub fn of(
    d: &HostFacts,
    dev: Option<&DeviceCode>,
    note: impl FnOnce() -> Option<CudaVersion>,
) -> Option<Runtime> {
    let major = |m: u32| u16::try_from(m).unwrap_or(u16::MAX);
    if let Some(m) = d.cudart_major() {
        return Some(Runtime::Shared { major: major(m), own: false });
    }
    if let Some(m) = d.own_cudart_major() {
        return Some(Runtime::Shared { major: major(m), own: true });
    }
    if !d.static_cudart {
        return None;
    }
    let isa = dev.and_then(|dev| dev.ptx_isa().into_values().max());
    if let Some(v) = isa.and_then(|i| crate::cuda::driver::ptx_needs((i.major, i.minor))) {
        return Some(Runtime::Static { version: Some(v), from: Some(Source::PtxIsa) });
    }
    match note() {
        Some(v) => Some(Runtime::Static { version: Some(v), from: Some(Source::ToolkitNote) }),
        None => Some(Runtime::Static { version: None, from: None }),
    }
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

    #[test]
    fn shared_static_and_unknown_runtimes() {
        let mut shared = HostFacts::default();
        shared.loader.needed = vec!["libcudart.so.13".into()];
        assert_eq!(of(&shared, None, || None), Some(Runtime::Shared { major: 13, own: false }));
        let mut own = HostFacts::default();
        own.loader.soname = Some("libcudart.so.12".into());
        assert_eq!(of(&own, None, || None), Some(Runtime::Shared { major: 12, own: true }));
        let none = HostFacts::default();
        assert_eq!(of(&none, None, || Some(cuda("13.5"))), None);
        let stat = HostFacts { static_cudart: true, ..Default::default() };
        let mut dev = DeviceCode::default();
        dev.note_ptx_isa(Arch { sm: 90, variant: Variant::Base }, PtxIsa { major: 9, minor: 5 });
        dev.note_ptx_isa(Arch { sm: 80, variant: Variant::Base }, PtxIsa { major: 8, minor: 4 });
        // The PTX ISA first: the note is not even searched.
        assert_eq!(
            of(&stat, Some(&dev), || unreachable!()),
            Some(Runtime::Static { version: Some(cuda("13.5")), from: Some(Source::PtxIsa) })
        );
        assert_eq!(
            of(&stat, Some(&DeviceCode::default()), || Some(cuda("12.8"))),
            Some(Runtime::Static { version: Some(cuda("12.8")), from: Some(Source::ToolkitNote) })
        );
        assert_eq!(of(&stat, None, || None), Some(Runtime::Static { version: None, from: None }));
    }
}
