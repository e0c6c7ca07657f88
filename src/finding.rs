//! Findings: what the audit reports, as data first and text second.
//!
//! Every check has one row in [`CHECKS`]: its stable id, default severity, a
//! one-line why and a fix hint. Emitters (text, JSON, SARIF, GitHub) and the
//! baseline read that table; nothing else spells a check id.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How bad a finding is; `Error` findings make the audit exit 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// For information; never fails anything.
    Info,
    /// Worth a look; fails nothing.
    Warning,
    /// Fails the audit (exit 1) unless baselined.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// A check's fixed description.
#[derive(Debug)]
pub struct Check {
    /// Stable id, used in JSON, SARIF rule ids, baselines.
    pub id: &'static str,
    /// Default severity.
    pub severity: Severity,
    /// One line: why this matters.
    pub why: &'static str,
    /// One line: how to fix it.
    pub fix: &'static str,
}

macro_rules! checks {
    ($($name:ident = $id:literal, $sev:ident, $why:literal, $fix:literal;)*) => {
        /// Every check the audit runs, in report order.
        pub const CHECKS: &[Check] = &[$(Check { id: $id, severity: Severity::$sev, why: $why, fix: $fix },)*];
        /// Names for the checks, so code refers to them without strings.
        #[allow(missing_docs)]
        pub mod ids { $(pub const $name: &str = $id;)* }
    };
}

checks! {
    LIBCUDA_STUB_IN_RUNPATH = "libcuda-stub-in-runpath", Error,
        "a CUDA stubs folder on the RUNPATH makes the program load the stub libcuda.so and fail with CUDA_ERROR_STUB_LIBRARY",
        "remove the */lib/stubs entry (removeStubsFromRunpathHook, or link against stubs with -Wl,--as-needed and no rpath)";
    MISSING_DRIVER_RUNPATH = "missing-driver-runpath", Error,
        "the file needs libcuda.so.1 but /run/opengl-driver/lib is not on its RUNPATH, so it cannot find the driver on NixOS",
        "add autoAddDriverRunpath to nativeBuildInputs";
    TMPDIR_IN_RUNPATH = "tmpdir-in-runpath", Error,
        "a RUNPATH entry points into the build folder, which does not exist at run time (and may be writable by others)",
        "fix the build system's rpath flags, or drop the entry (patchelf --shrink-rpath)";
    EMPTY_RUNPATH_ENTRY = "empty-runpath-entry", Error,
        "an empty RUNPATH entry (leading, trailing or double colon) makes the loader search the current directory",
        "rewrite the RUNPATH without empty entries (auto-add-driver-runpath never writes them)";
    UNRESOLVED_NEEDED = "unresolved-needed", Error,
        "a NEEDED library is found nowhere on the search path: the program will not start",
        "add the library's package to buildInputs, or fix the RUNPATH";
    NO_CODE_FOR_CAPABILITY = "no-code-for-capability", Error,
        "a requested GPU capability has neither compatible SASS nor JIT-able PTX: kernels fail with 'no kernel image is available'",
        "build with the requested capabilities (cudaCapabilities / CMAKE_CUDA_ARCHITECTURES / TORCH_CUDA_ARCH_LIST)";
    PTX_ONLY_CAPABILITY = "ptx-only-capability", Warning,
        "a requested GPU capability runs only through the driver's PTX JIT: slow first start, needs a new enough driver",
        "add SASS for this capability (-gencode arch=compute_XY,code=sm_XY)";
    MISSING_FORWARD_COMPAT_PTX = "missing-forward-compat-ptx", Warning,
        "forward compatibility was requested but there is no PTX for the last capability, so newer GPUs get nothing",
        "add -gencode arch=compute_XY,code=compute_XY for the last capability, or set cudaForwardCompat = false";
    UNREQUESTED_ARCH = "unrequested-arch", Info,
        "the file carries code for a capability nobody asked for: larger outputs, longer builds",
        "check the build system's architecture flags";
    CUDART_STATIC = "cudart-static", Info,
        "the CUDA runtime is linked statically: it dlopens libcuda.so.1 at run time",
        "nothing to fix; make sure the driver RUNPATH is present";
    RPATH_INSTEAD_OF_RUNPATH = "rpath-instead-of-runpath", Warning,
        "DT_RPATH is searched before LD_LIBRARY_PATH and inherited by dependencies, unlike DT_RUNPATH",
        "link with --enable-new-dtags, or let auto-add-driver-runpath convert it";
    MIXED_CUDART_VERSIONS = "mixed-cudart-versions", Warning,
        "one tree links two major versions of the CUDA runtime: two runtimes in one process",
        "build every component against the same cudaPackages set";
}

/// The table row of a check id.
pub fn check(id: &str) -> Option<&'static Check> {
    CHECKS.iter().find(|c| c.id == id)
}

/// One finding about one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// The check's id (a row of [`CHECKS`]).
    pub check: String,
    /// Severity (the check's default).
    pub severity: Severity,
    /// The file, as the user named it or as the walk found it. Written to
    /// JSON as text (bytes that are not UTF-8 become U+FFFD): a JSON string
    /// cannot hold them, and a report must never fail on a file's name.
    #[serde(serialize_with = "ser_lossy_path")]
    pub path: PathBuf,
    /// One sentence about this file.
    pub message: String,
    /// Typed details (capability, RUNPATH entry, library name...).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub details: serde_json::Map<String, serde_json::Value>,
    /// Where the file sits below the audited root, named by the root's last
    /// component with any Nix store hash removed (`foo-1.0/lib/libfoo.so`):
    /// the same for a rebuild, and for a PR's result and its base's, so
    /// baselines match across them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

/// A path as JSON text, never an error (serde's own `Path` impl refuses
/// names that are not UTF-8).
pub fn ser_lossy_path<S: serde::Serializer>(p: &std::path::Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}

/// Removes a Nix store hash from a path component (`<32 base32 chars>-name` -> `name`).
pub fn strip_store_hash(name: &str) -> &str {
    const NIX_BASE32: &[u8] = b"0123456789abcdfghijklmnpqrsvwxyz";
    let b = name.as_bytes();
    if b.len() > 33 && b[32] == b'-' && b[..32].iter().all(|c| NIX_BASE32.contains(c)) {
        &name[33..]
    } else {
        name
    }
}

impl Finding {
    /// A finding of check `id` with the check's default severity.
    pub fn new(id: &'static str, path: impl Into<PathBuf>, message: impl Into<String>) -> Finding {
        let severity = check(id).map_or(Severity::Error, |c| c.severity);
        Finding {
            check: id.to_string(),
            severity,
            path: path.into(),
            message: message.into(),
            details: serde_json::Map::new(),
            location: None,
        }
    }

    /// Adds one detail.
    pub fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Finding {
        self.details.insert(key.to_string(), value.into());
        self
    }

    /// The identity a baseline remembers: check, location (else path) and
    /// the detail that names the subject (capability, entry, library), not
    /// the message text.
    pub fn fingerprint(&self) -> String {
        let subject = ["capability", "entry", "library", "arch"]
            .iter()
            .find_map(|k| self.details.get(*k))
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .unwrap_or_default();
        let place = match &self.location {
            Some(l) => l.clone(),
            None => self.path.to_string_lossy().into_owned(),
        };
        format!("{}\t{}\t{}", self.check, place, subject)
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} [{}]: {}", self.path.display(), self.severity, self.check, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_ids_are_unique_and_kebab_case() {
        let mut ids: Vec<&str> = CHECKS.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), CHECKS.len());
        assert!(ids.iter().all(|id| id.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')));
    }

    #[test]
    fn store_hashes_are_stripped() {
        assert_eq!(strip_store_hash("0c7xgv7n2pn1ljvm3xrjjk2x2bbvyq1f-cudnn-9.8"), "cudnn-9.8");
        assert_eq!(strip_store_hash("result"), "result");
        assert_eq!(
            strip_store_hash("eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee-x"),
            "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee-x"
        );
    }

    #[test]
    fn severity_comes_from_the_table() {
        assert_eq!(Finding::new(ids::PTX_ONLY_CAPABILITY, "/x", "m").severity, Severity::Warning);
        assert_eq!(Finding::new(ids::UNRESOLVED_NEEDED, "/x", "m").severity, Severity::Error);
    }
}
