//! Findings: what the audit reports, as data first and text second.
//!
//! Every check is a [`CheckId`] with one row in one table: its stable id,
//! default severity, the kind of subject its findings name, a one-line why
//! and a fix hint. Emitters (text, JSON, SARIF, GitHub) and the baseline
//! read that table; nothing else spells a check id.

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

macro_rules! checks {
    ($($name:ident = $id:literal, $sev:ident, $subject:literal, $why:literal, $fix:literal;)*) => {
        /// Every check the audit runs, in report order. Its row of the
        /// table below holds its stable id, default severity, what names its
        /// subject, why it matters and how to fix it.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum CheckId { $(#[doc = $why] $name,)* }

        impl CheckId {
            /// Every check, in report order.
            pub const ALL: &'static [CheckId] = &[$(CheckId::$name,)*];

            /// The stable id, used in JSON, SARIF rule ids and baselines.
            pub fn id(self) -> &'static str {
                match self { $(CheckId::$name => $id,)* }
            }

            /// Default severity.
            pub fn severity(self) -> Severity {
                match self { $(CheckId::$name => Severity::$sev,)* }
            }

            /// One line: why this matters.
            pub fn why(self) -> &'static str {
                match self { $(CheckId::$name => $why,)* }
            }

            /// One line: how to fix it.
            pub fn fix(self) -> &'static str {
                match self { $(CheckId::$name => $fix,)* }
            }

            /// What kind of [`Subject`] its findings name (`capability`,
            /// `entry`, `library`, `arch`, or empty for none).
            pub fn subject_kind(self) -> &'static str {
                match self { $(CheckId::$name => $subject,)* }
            }
        }
    };
}

checks! {
    LibcudaStubInRunpath = "libcuda-stub-in-runpath", Error, "entry",
        "a CUDA stubs folder on the RUNPATH makes the program load the stub libcuda.so and fail with CUDA_ERROR_STUB_LIBRARY",
        "remove the */lib/stubs entry (removeStubsFromRunpathHook, or link against stubs with -Wl,--as-needed and no rpath)";
    MissingDriverRunpath = "missing-driver-runpath", Error, "entry",
        "the file may load a GPU driver library (a NEEDED entry, a dlopen target, the CUDA runtime's libcuda.so.1) but the driver folder /run/opengl-driver/lib is not on its RUNPATH, so on NixOS the load fails",
        "add autoAddDriverRunpath to nativeBuildInputs (outside Nix: auto-add-driver-runpath FILE)";
    TmpdirInRunpath = "tmpdir-in-runpath", Error, "entry",
        "a RUNPATH entry points into the build folder, which does not exist at run time (and may be writable by others)",
        "fix the build system's rpath flags, or drop the entry (patchelf --shrink-rpath)";
    EmptyRunpathEntry = "empty-runpath-entry", Error, "entry",
        "an empty RUNPATH entry (leading, trailing or double colon) makes the loader search the current directory",
        "rewrite the RUNPATH without empty entries (auto-add-driver-runpath never writes them)";
    UnresolvedNeeded = "unresolved-needed", Error, "library",
        "a NEEDED library is found nowhere on the search path: the program will not start",
        "add the library's package to buildInputs, or fix the RUNPATH";
    NeededNotFetched = "needed-not-fetched", Info, "library",
        "a NEEDED library is searched for in store paths the audit of a cache or NAR did not read, so whether it resolves is unknown (not an unresolved-needed error)",
        "audit the closure: --substituter URL --closure STORE-PATH";
    NeededUndecided = "needed-undecided", Info, "library",
        "a NEEDED library of a file for another machine is not in the folders its RUNPATH names, and that machine's default folders were not given: whether it resolves cannot be decided here (not an unresolved-needed error)",
        "give that machine's libraries with --sysroot DIR (a cross toolchain's sysroot, or an unpacked root file system)";
    NoCodeForCapability = "no-code-for-capability", Error, "capability",
        "a requested GPU capability has neither compatible SASS nor JIT-able PTX: kernels fail with 'no kernel image is available'",
        "build with the requested capabilities (cudaCapabilities / CMAKE_CUDA_ARCHITECTURES / TORCH_CUDA_ARCH_LIST)";
    PtxOnlyCapability = "ptx-only-capability", Warning, "capability",
        "a requested GPU capability runs only through the driver's PTX JIT: slow first start, needs a new enough driver",
        "add SASS for this capability (-gencode arch=compute_XY,code=sm_XY)";
    MissingForwardCompatPtx = "missing-forward-compat-ptx", Warning, "capability",
        "forward compatibility (on by default, as Nixpkgs' cudaForwardCompat) needs PTX for the last capability or lower, else a newer GPU no SASS serves gets nothing. An info where the file is prebuilt (in a build, not compiled by the derivation; a Python wheel's file; NVIDIA's redistributable libraries): only its maker can add PTX",
        "add -gencode arch=compute_XY,code=compute_XY for the last capability, or turn it off: cudaForwardCompat = false in Nix, --no-forward-compat here";
    UnrequestedArch = "unrequested-arch", Info, "arch",
        "the file carries code for a capability nobody asked for: larger outputs, longer builds",
        "check the build system's architecture flags";
    CudartStatic = "cudart-static", Info, "",
        "the CUDA runtime is linked statically: it dlopens libcuda.so.1 at run time",
        "nothing to fix; make sure the driver RUNPATH is present";
    RpathInsteadOfRunpath = "rpath-instead-of-runpath", Warning, "entry",
        "DT_RPATH is searched before LD_LIBRARY_PATH and inherited by dependencies, unlike DT_RUNPATH",
        "link with --enable-new-dtags, or let auto-add-driver-runpath convert it";
    DeviceCodeNotScanned = "device-code-not-scanned", Warning, "",
        "fatbin containers lie outside the fatbin sections (cuFFT keeps thousands in .ldata) and --no-scan left them unread: no capability is judged on code not read",
        "audit without --no-scan: by default every loaded data section is searched whole (--scan also the bytes no section holds)";
    JetsonCapabilityMismatch = "jetson-capability-mismatch", Warning, "arch",
        "Jetson capabilities (7.2, 8.7, 10.1 before CUDA 13, 11.0) exist only on aarch64 Jetson boards, and a Jetson build's device code runs on nothing else: code for one in the other's build is dead weight. A warning when the request is a configuration error or the build compiled the code itself, else an info (NVIDIA's own x86_64 libraries carry sm_72, sm_87, sm_101); missing code for a requested capability is no-code-for-capability",
        "build Jetson capabilities only for aarch64-linux Jetson builds (cudaCapabilities), and SBSA/desktop ones only elsewhere";
    MixedCudartVersions = "mixed-cudart-versions", Warning, "library",
        "one tree links two major versions of the CUDA runtime: two runtimes in one process",
        "build every component against the same cudaPackages set";
    DriverTooOldForRuntime = "driver-too-old-for-runtime", Error, "library",
        "the driver given with --driver-version/--driver-cuda cannot load the CUDA runtime the file needs or is (a newer major, or below the minor version compatibility floor; the runtime named by a NEEDED entry, its own soname, a known NVIDIA library release, or a floor its PTX ISA sets): the first CUDA call fails with 'CUDA driver version is insufficient for CUDA runtime version'",
        "run on a newer driver; on a data-center GPU or Jetson, cudaPackages.cuda_compat of the runtime's CUDA version brings a newer user-mode driver; or build against an older cudaPackages set";
    PtxTooNewForDriver = "ptx-too-new-for-driver", Error, "capability",
        "a capability runs only through PTX whose ISA version is newer than the given driver can JIT-compile: kernels fail with 'the provided PTX was compiled with an unsupported toolchain'",
        "add SASS for the capability, run on a newer driver, or (data-center GPUs, Jetson) use cudaPackages.cuda_compat; building with an older toolkit lowers the PTX ISA";
    DriverVerdictUnknown = "driver-verdict-unknown", Warning, "",
        "with a driver given, the tool could not decide whether it runs the file: it loads the driver but says not which CUDA version it needs (a static CUDA runtime without a toolkit note, a library that calls the driver itself and is no known NVIDIA release; a PTX ISA is only a floor), or a PTX ISA newer than the tool's table",
        "check by hand (cuobjdump -ptx shows .version; the build's cudaPackages set names the runtime), or update the tool";
    DlopenUnresolved = "dlopen-unresolved", Warning, "library",
        "a library the file loads with dlopen is found nowhere its dlopen searches (its own RUNPATH, not the program's): the feature fails at run time. An error when a reviewed fact (the dlopen facts table, a .note.dlopen priority) says the library's main job needs it, a warning when one says it is recommended, else an info: a bare string is no reviewed fact",
        "add the providing package (the message names its Nixpkgs attribute when one provides it) and its lib folder to the file's RUNPATH: auto-add-driver-runpath --dlopen-search DIR (docs/dlopen.md)";
    DlopenWrongRelease = "dlopen-wrong-release", Error, "library",
        "a library the file loads with dlopen must be of the file's own release (a reviewed fact, the dlopen facts table's release column: cuDNN's sub-libraries each export a checker of their own version against their dependencies', and the front library reports the version of the graph library it loaded), and the first one the loader finds is of another release, read from each file (an exported version object, or a real file name that carries the full version): the load succeeds and the library then fails or reports the wrong version (PyTorch: 'cuDNN version incompatibility')",
        "put the folder that holds the file's own release of the library on the file's RUNPATH ahead of where the other release is found (auto-add-driver-runpath --dlopen-search DIR, its hook autoAddDlopenRunpath; outside the store the RUNPATH is searched before the loader's default folders), or remove the other release from that folder";
    DlopenNotFetched = "dlopen-not-fetched", Info, "library",
        "a dlopen target is searched for in store paths the audit of a cache or NAR did not read, so whether it resolves is unknown",
        "audit the closure: --substituter URL --closure STORE-PATH";
    DlopenIncomplete = "dlopen-incomplete", Warning, "",
        "the file's dlopen targets could not all be read (more soname-shaped strings than the bound, or a .note.dlopen note that is cut or not the documented JSON): some targets were not checked",
        "check the file by hand (readelf -n, strings); a damaged note is the build's to fix";
    DlopenResolved = "dlopen-resolved", Info, "library",
        "a library the file loads with dlopen, and where the loader finds it: facts for a CI to diff, not a problem",
        "nothing to fix";
    BuildOnlyReference = "build-only-reference", Error, "reference",
        "the file references a store path only the build needs (the CUDA compiler, a compiler wrapper, the driver stubs, a CUDA package's -dev/-static output, a forbidden path, the build folder): Nix keeps it in the runtime closure",
        "remove the reference (the finding says whether remove-references-to -t PATH FILE can rewrite it safely), or build without it; docs/references.md";
}

impl CheckId {
    /// The check of a stable id.
    pub fn from_id(id: &str) -> Option<CheckId> {
        CheckId::ALL.iter().copied().find(|c| c.id() == id)
    }
}

impl fmt::Display for CheckId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl Serialize for CheckId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
    }
}

impl<'de> Deserialize<'de> for CheckId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<CheckId, D::Error> {
        let id = String::deserialize(d)?;
        CheckId::from_id(&id)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown check id '{id}'")))
    }
}

/// What a finding is about, besides its file: the one value a baseline
/// remembers it by (with check and place), so that messages may be reworded
/// freely. Serialised as the finding's `details` (`{"capability": "9.0"}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Subject {
    /// Nothing beyond the file (`cudart-static`).
    #[default]
    None,
    /// A requested capability (`9.0`, `10.0f`).
    Capability(String),
    /// A RUNPATH/RPATH entry, or the whole value.
    Entry(String),
    /// A library name (`libcudart.so.12`).
    Library(String),
    /// An architecture (`sm_86`, `compute_90`).
    Arch(String),
    /// A referenced store path's name, without its hash (`cuda_nvcc-13.0`).
    Reference(String),
}

impl Subject {
    /// The detail key and value, `None` for [`Subject::None`].
    pub fn pair(&self) -> Option<(&'static str, &str)> {
        match self {
            Subject::None => None,
            Subject::Capability(v) => Some(("capability", v)),
            Subject::Entry(v) => Some(("entry", v)),
            Subject::Library(v) => Some(("library", v)),
            Subject::Arch(v) => Some(("arch", v)),
            Subject::Reference(v) => Some(("reference", v)),
        }
    }

    /// The value (empty for none).
    pub fn value(&self) -> &str {
        self.pair().map_or("", |(_, v)| v)
    }
}

mod details {
    //! `Subject` as the JSON `details` object of earlier reports.
    use super::Subject;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(subject: &Subject, s: S) -> Result<S::Ok, S::Error> {
        let mut map = serde_json::Map::new();
        if let Some((k, v)) = subject.pair() {
            map.insert(k.to_string(), v.into());
        }
        map.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Subject, D::Error> {
        let map = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        let text = |v: &serde_json::Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
        // One key per finding; the order is the one fingerprints always used.
        for (key, make) in [
            ("capability", Subject::Capability as fn(String) -> Subject),
            ("entry", Subject::Entry),
            ("library", Subject::Library),
            ("arch", Subject::Arch),
            ("reference", Subject::Reference),
        ] {
            if let Some(v) = map.get(key) {
                return Ok(make(text(v)));
            }
        }
        Ok(Subject::None)
    }

    pub fn is_none(subject: &Subject) -> bool {
        *subject == Subject::None
    }
}

/// One finding about one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// The check.
    pub check: CheckId,
    /// Severity (the check's default).
    pub severity: Severity,
    /// The file, as the user named it or as the walk found it. Written to
    /// JSON as text (bytes that are not UTF-8 become U+FFFD): a JSON string
    /// cannot hold them, and a report must never fail on a file's name.
    #[serde(serialize_with = "ser_lossy_path")]
    pub path: PathBuf,
    /// One sentence about this file.
    pub message: String,
    /// What the finding is about (capability, RUNPATH entry, library, arch).
    #[serde(
        rename = "details",
        default,
        with = "details",
        skip_serializing_if = "details::is_none"
    )]
    pub subject: Subject,
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
    crate::store::name::strip_hash(name)
}

/// At most this many findings of one check per file; past it, one finding
/// of the same check counts the rest ([`cap_per_check`]). Far above any
/// real file (a library has about 20 dlopen targets); a hostile file's
/// 4,096 dlopen targets no longer print 4,096 findings.
pub const MAX_PER_CHECK: usize = 256;

/// Keeps the first [`MAX_PER_CHECK`] findings of each check (in order) and
/// replaces the rest of each with one finding of that check, about no
/// subject, that says how many there were, at the highest severity among
/// them (the exit status is the one the whole list gives).
pub fn cap_per_check(path: &std::path::Path, findings: &mut Vec<Finding>) {
    let mut counts: std::collections::HashMap<CheckId, usize> = Default::default();
    let mut over: Vec<(CheckId, usize, Severity)> = Vec::new();
    findings.retain(|f| {
        let n = counts.entry(f.check).or_default();
        *n += 1;
        if *n <= MAX_PER_CHECK {
            return true;
        }
        match over.iter_mut().find(|o| o.0 == f.check) {
            Some(o) => {
                o.1 += 1;
                o.2 = o.2.max(f.severity);
            }
            None => over.push((f.check, 1, f.severity)),
        }
        false
    });
    for (check, count, severity) in over {
        let mut f = Finding::new(
            check,
            path,
            format!("{count} more {check} findings of this file are not listed (at most {MAX_PER_CHECK} per check and file)"),
        );
        f.severity = severity;
        findings.push(f);
    }
}

impl Finding {
    /// A finding of `check` with the check's default severity.
    pub fn new(check: CheckId, path: impl Into<PathBuf>, message: impl Into<String>) -> Finding {
        Finding {
            check,
            severity: check.severity(),
            path: path.into(),
            message: message.into(),
            subject: Subject::None,
            location: None,
        }
    }

    /// Names what the finding is about.
    pub fn about(mut self, subject: Subject) -> Finding {
        self.subject = subject;
        self
    }

    /// The identity a baseline remembers: check, location (else path) and
    /// subject, not the message text, and without what a version bump
    /// changes ([`crate::audit::identity`]: store hashes, store names'
    /// versions, a shared object's version after its major).
    pub fn fingerprint(&self) -> String {
        let place = match &self.location {
            Some(l) => l.clone(),
            None => self.path.to_string_lossy().into_owned(),
        };
        let (check, kind) = (self.check.id(), self.check.subject_kind());
        crate::audit::identity::fingerprint(check, &place, self.subject.value(), kind)
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
        let mut ids: Vec<&str> = CheckId::ALL.iter().map(|c| c.id()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), CheckId::ALL.len());
        assert!(ids.iter().all(|id| id.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')));
        for c in CheckId::ALL {
            assert_eq!(CheckId::from_id(c.id()), Some(*c));
            assert!(!c.why().is_empty() && !c.fix().is_empty());
        }
    }

    #[test]
    fn the_manual_documents_every_check() {
        let manual = include_str!("../../docs/cuda-elf-inspect.md");
        for c in CheckId::ALL {
            let row = format!("| `{}` | {} |", c.id(), c.severity());
            assert!(manual.contains(&row), "docs/cuda-elf-inspect.md lacks the row {row}");
        }
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
        assert_eq!(Finding::new(CheckId::PtxOnlyCapability, "/x", "m").severity, Severity::Warning);
        assert_eq!(Finding::new(CheckId::UnresolvedNeeded, "/x", "m").severity, Severity::Error);
    }

    #[test]
    fn subjects_serialise_as_the_details_of_earlier_reports() {
        let f = Finding::new(CheckId::UnresolvedNeeded, "/x", "m")
            .about(Subject::Library("libx.so".into()));
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(json["details"], serde_json::json!({ "library": "libx.so" }));
        assert_eq!(json["check"], "unresolved-needed");
        let back: Finding = serde_json::from_value(json).unwrap();
        assert_eq!(back, f);
        let none = serde_json::to_value(Finding::new(CheckId::CudartStatic, "/x", "m")).unwrap();
        assert!(none.get("details").is_none());
    }

    #[test]
    fn fingerprints_are_those_of_the_untyped_details() {
        // As version 1 baselines spelled them: check, path, subject value.
        let f = Finding::new(CheckId::NoCodeForCapability, "/a.so", "m")
            .about(Subject::Capability("9.0".into()));
        assert_eq!(f.fingerprint(), "no-code-for-capability\t/a.so\t9.0");
        let f = Finding::new(CheckId::CudartStatic, "/a.so", "m");
        assert_eq!(f.fingerprint(), "cudart-static\t/a.so\t");
    }
}
