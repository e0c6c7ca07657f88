//! CUDA capabilities: the Nixpkgs table (data, in `capabilities.tsv`), the
//! parsing of every way users and tools spell a capability list, Nixpkgs'
//! validation (with its wording), and NVIDIA's rules for which device code
//! runs on which GPU.
//!
//! The rules live here and nowhere else; checks ask [`runs_on`] and
//! [`coverage`]. Sources: the Nixpkgs table (`capabilities.tsv`),
//! docs/cuda-elf-inspect.md ("Audit", the capability rules), the CUDA
//! C++ Programming Guide ("Binary Compatibility", "PTX Compatibility") and the
//! Blackwell compatibility guide's family-specific section; tests cite them.

use std::cmp::Ordering;
use std::fmt;
use std::sync::OnceLock;

pub use crate::fatbin::Variant;

/// A compute capability such as `8.6`, `9.0a` or `10.0f`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Capability {
    /// Major version (the architecture generation).
    pub major: u8,
    /// Minor version.
    pub minor: u8,
    /// `a`/`f` suffix.
    pub variant: Variant,
}

impl Ord for Capability {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.variant).cmp(&(other.major, other.minor, other.variant))
    }
}
impl PartialOrd for Capability {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}{}", self.major, self.minor, self.variant.suffix())
    }
}

impl Capability {
    /// From an SM number as fatbin headers store it (`86` -> 8.6, `100` -> 10.0).
    pub fn from_sm(sm: u32, variant: Variant) -> Option<Capability> {
        let major = u8::try_from(sm / 10).ok()?;
        Some(Capability { major, minor: (sm % 10) as u8, variant })
    }

    /// The SM number (`8.6` -> 86).
    pub fn sm(&self) -> u32 {
        u32::from(self.major) * 10 + u32::from(self.minor)
    }

    /// The same capability without its suffix: the device it names.
    pub fn device(&self) -> Capability {
        Capability { variant: Variant::Base, ..*self }
    }

    /// Parses one capability in any spelling users and build systems use:
    /// `8.6`, `86`, `sm_86`, `compute_86`, `9.0a`, `90a`, `sm_100f`.
    pub fn parse(text: &str) -> Option<Capability> {
        let t = text.trim();
        let t = t
            .strip_prefix("sm_")
            .or_else(|| t.strip_prefix("compute_"))
            .or_else(|| t.strip_prefix("lto_"))
            .unwrap_or(t);
        let (body, variant) = match t.as_bytes().last()? {
            b'a' => (&t[..t.len() - 1], Variant::Arch),
            b'f' => (&t[..t.len() - 1], Variant::Family),
            _ => (t, Variant::Base),
        };
        let (major, minor) = match body.split_once('.') {
            Some((ma, mi)) => (ma, mi),
            // `split_at_checked`: a non-ASCII last character is no digit
            // (found by fuzzing: splitting inside it panicked).
            None if body.len() >= 2 => body.split_at_checked(body.len() - 1)?,
            None => return None,
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(major) || !digits(minor) || minor.len() != 1 {
            return None;
        }
        Some(Capability { major: major.parse().ok()?, minor: minor.parse().ok()?, variant })
    }
}

/// A CUDA toolkit version, major.minor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CudaVersion {
    /// Major.
    pub major: u16,
    /// Minor.
    pub minor: u16,
}

impl CudaVersion {
    /// Parses `12.8` or `12.8.1` (the patch level is ignored, as Nixpkgs'
    /// `cudaMajorMinorVersion` does).
    pub fn parse(text: &str) -> Option<CudaVersion> {
        let mut parts = text.trim().split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next().unwrap_or("0").parse().ok()?;
        Some(CudaVersion { major, minor })
    }
}

impl fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// One row of the capability table.
#[derive(Clone, Debug)]
pub struct Info {
    /// The capability.
    pub capability: Capability,
    /// Architecture name (Ampere, Hopper...).
    pub arch: &'static str,
    /// First CUDA version that supports it (inclusive).
    pub min_cuda: CudaVersion,
    /// Last CUDA version that supports it (inclusive), if any.
    pub max_cuda: Option<CudaVersion>,
    /// Past this version it leaves the default set.
    pub dont_default_after: Option<CudaVersion>,
    /// A Jetson (integrated, aarch64) capability.
    pub jetson: bool,
    /// Example devices.
    pub devices: &'static str,
}

impl Info {
    /// Nixpkgs' `cudaCapabilityIsSupported`: `min <= cuda <= max`.
    pub fn supported(&self, cuda: CudaVersion) -> bool {
        self.min_cuda <= cuda && self.max_cuda.is_none_or(|max| cuda <= max)
    }

    /// Nixpkgs' `cudaCapabilityIsDefault`.
    pub fn default_for(&self, cuda: CudaVersion) -> bool {
        self.supported(cuda)
            && !self.jetson
            && self.capability.variant == Variant::Base
            && self.dont_default_after.is_none_or(|last| cuda <= last)
    }
}

const TABLE_TEXT: &str = include_str!("capabilities.tsv");

/// The capability table, parsed once from `capabilities.tsv`.
pub fn table() -> &'static [Info] {
    static TABLE: OnceLock<Vec<Info>> = OnceLock::new();
    TABLE.get_or_init(|| {
        parse_table(TABLE_TEXT).unwrap_or_else(|line| {
            // Our own data, checked by a unit test: a bad row is a build bug.
            unreachable!("src/cuda/capabilities.tsv: malformed row: {line}")
        })
    })
}

fn parse_table(text: &'static str) -> Result<Vec<Info>, &'static str> {
    let opt = |s: &str| if s == "-" { Ok(None) } else { CudaVersion::parse(s).map(Some).ok_or(()) };
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|line| {
            let f: Vec<&'static str> = line.split('\t').collect();
            let [cap, arch, min, max, dda, jetson, devices] = f[..] else { return Err(line) };
            Ok(Info {
                capability: Capability::parse(cap).ok_or(line)?,
                arch,
                min_cuda: CudaVersion::parse(min).ok_or(line)?,
                max_cuda: opt(max).map_err(|_| line)?,
                dont_default_after: opt(dda).map_err(|_| line)?,
                jetson: match jetson {
                    "yes" => true,
                    "no" => false,
                    _ => return Err(line),
                },
                devices,
            })
        })
        .collect()
}

/// The table row of a capability, if Nixpkgs knows it.
pub fn info(cap: Capability) -> Option<&'static Info> {
    table().iter().find(|i| i.capability == cap)
}

/// The capabilities Nixpkgs builds by default for a CUDA version, in table order.
pub fn default_capabilities(cuda: CudaVersion) -> Vec<Capability> {
    table().iter().filter(|i| i.default_for(cuda)).map(|i| i.capability).collect()
}

/// A parsed capability list: what to build, in order, and where PTX was asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Capabilities in the order given (Nixpkgs' forward-compat PTX goes to the last).
    pub capabilities: Vec<Capability>,
    /// Capabilities written with `+PTX` (or CMake's `-virtual`).
    pub ptx: Vec<Capability>,
}

/// Why a capability list is not acceptable. The messages of the Nixpkgs
/// checks keep Nixpkgs' wording so that users recognise them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapError {
    /// A token that is no capability spelling at all.
    #[error(
        "cannot parse CUDA capability '{0}' (expected a form like 8.6, 86, sm_86, 9.0a or 8.6+PTX)"
    )]
    Syntax(String),
    /// An empty list.
    #[error("the CUDA capability list is empty")]
    Empty,
    /// Nixpkgs: unknown capabilities.
    #[error("Requested unrecognized CUDA capabilities: {}", json_list(.0))]
    Unrecognized(Vec<Capability>),
    /// Nixpkgs: too old for this CUDA.
    #[error("Requested CUDA capabilities which are too old for CUDA {0}: {list}", list = json_list(.1))]
    TooOld(CudaVersion, Vec<Capability>),
    /// Nixpkgs: too new for this CUDA.
    #[error("Requested CUDA capabilities which are too new for CUDA {0}: {list}", list = json_list(.1))]
    TooNew(CudaVersion, Vec<Capability>),
    /// Nixpkgs: Jetson capabilities need an aarch64-linux host.
    #[error("Requested Jetson CUDA capabilities ({list}) require hostPlatform ({1}) to be aarch64-linux", list = json_list(.0))]
    JetsonHost(Vec<Capability>, String),
    /// Nixpkgs: pre-Thor Jetson capabilities cannot be mixed with others.
    #[error("Requested pre-Thor (10.1) Jetson CUDA capabilities ({}) cannot be specified with other capabilities ({})", json_list(.0), json_list(.1))]
    JetsonMixed(Vec<Capability>, Vec<Capability>),
}

fn json_list(caps: &[Capability]) -> String {
    let items: Vec<String> = caps.iter().map(|c| format!("\"{c}\"")).collect();
    format!("[{}]", items.join(","))
}

/// Parses a capability list in the spellings Nixpkgs (`8.6 9.0`), CMake
/// (`86;90`, `86-real;90-virtual`), PyTorch (`8.6;9.0+PTX`) and nvcc
/// (`sm_86,sm_90`) use. Separators: spaces, `;` and `,`.
pub fn parse_list(text: &str) -> Result<Request, CapError> {
    let mut req = Request { capabilities: Vec::new(), ptx: Vec::new() };
    for token in text.split(|c: char| c.is_whitespace() || c == ';' || c == ',') {
        if token.is_empty() {
            continue;
        }
        let lower = token.to_ascii_lowercase();
        let (body, ptx) = if let Some(b) = lower.strip_suffix("+ptx") {
            (b, true)
        } else if let Some(b) = lower.strip_suffix("-virtual") {
            (b, true)
        } else {
            (lower.strip_suffix("-real").unwrap_or(&lower), false)
        };
        let ptx = ptx || body.starts_with("compute_");
        let cap = Capability::parse(body).ok_or_else(|| CapError::Syntax(token.to_string()))?;
        if !req.capabilities.contains(&cap) {
            req.capabilities.push(cap);
        }
        if ptx && !req.ptx.contains(&cap) {
            req.ptx.push(cap);
        }
    }
    if req.capabilities.is_empty() {
        return Err(CapError::Empty);
    }
    Ok(req)
}

/// Nixpkgs' checks on a requested list, in Nixpkgs' order; the first failing
/// one is returned. `host_system` is a Nix system string (`x86_64-linux`).
pub fn validate(caps: &[Capability], cuda: CudaVersion, host_system: &str) -> Result<(), CapError> {
    validate_versions(caps, Some(cuda))?;
    let rows: Vec<&Info> = caps.iter().filter_map(|c| info(*c)).collect();
    let jetson: Vec<Capability> = rows.iter().filter(|i| i.jetson).map(|i| i.capability).collect();
    if !jetson.is_empty() && host_system != "aarch64-linux" {
        return Err(CapError::JetsonHost(jetson, host_system.to_string()));
    }
    let thor = Capability { major: 10, minor: 1, variant: Variant::Base };
    let pre_thor: Vec<Capability> = jetson.iter().copied().filter(|c| *c < thor).collect();
    if !pre_thor.is_empty() && pre_thor.len() != caps.len() {
        let others = caps.iter().copied().filter(|c| !pre_thor.contains(c)).collect();
        return Err(CapError::JetsonMixed(pre_thor, others));
    }
    Ok(())
}

/// The checks of [`validate`] that concern the list and the CUDA version
/// only (an audit may run on another machine than the build): unknown
/// capabilities, and, when the CUDA version is known, too old or too new.
pub fn validate_versions(caps: &[Capability], cuda: Option<CudaVersion>) -> Result<(), CapError> {
    let unknown: Vec<Capability> = caps.iter().copied().filter(|c| info(*c).is_none()).collect();
    if !unknown.is_empty() {
        return Err(CapError::Unrecognized(unknown));
    }
    let Some(cuda) = cuda else { return Ok(()) };
    let rows: Vec<&Info> = caps.iter().filter_map(|c| info(*c)).collect();
    let too_old: Vec<Capability> = rows
        .iter()
        .filter(|i| i.max_cuda.is_some_and(|m| m < cuda))
        .map(|i| i.capability)
        .collect();
    if !too_old.is_empty() {
        return Err(CapError::TooOld(cuda, too_old));
    }
    let too_new: Vec<Capability> =
        rows.iter().filter(|i| cuda < i.min_cuda).map(|i| i.capability).collect();
    if !too_new.is_empty() {
        return Err(CapError::TooNew(cuda, too_new));
    }
    Ok(())
}

/// Whether device code is machine code (SASS, in a cubin) or PTX.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CodeKind {
    /// Machine code for one architecture.
    Sass,
    /// Virtual-ISA code the driver compiles at load time.
    Ptx,
}

/// One piece of device code as the audit sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Code {
    /// SASS or PTX.
    pub kind: CodeKind,
    /// The capability it targets, suffix included.
    pub target: Capability,
}

impl Code {
    /// `sm_90a` for SASS, `compute_90a` for PTX: nvcc's spelling, the one
    /// every line of the report uses.
    pub fn name(&self) -> String {
        let t = self.target;
        let prefix = match self.kind {
            CodeKind::Sass => "sm",
            CodeKind::Ptx => "compute",
        };
        format!("{prefix}_{}{}{}", t.major, t.minor, t.variant.suffix())
    }
}

/// How a GPU would run a file's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runs {
    /// Nothing runs: "no kernel image is available for execution on the device".
    No,
    /// Only through the driver's PTX JIT (slow first start, needs a new enough driver).
    Jit,
    /// Machine code for the device is there.
    Native,
}

/// Whether `code` runs on a device of capability `device` (its suffix is ignored).
///
/// - SASS plain: same major, device minor >= code minor ("a cubin
///   generated for compute capability X.y will only execute on devices of
///   compute capability X.z where z >= y").
/// - SASS or PTX `f`: within its family: the same, and a Jetson capability's
///   family holds only Jetson devices and the others' none (`sm_100f` runs
///   on 10.0 and 10.3, not on 10.1, Thor before CUDA 13, whose family is
///   `sm_101f`).
/// - SASS `a`: exactly that capability.
/// - PTX plain: any device of equal or higher capability (JIT).
/// - PTX `a`: exactly that capability.
pub fn runs_on(code: Code, device: Capability) -> Runs {
    let t = code.target;
    let same_major = t.major == device.major && t.minor <= device.minor;
    let jetson = |c: Capability| info(c.device()).map(|i| i.jetson);
    let same_family = same_major && jetson(t) == jetson(device);
    let exact = t.major == device.major && t.minor == device.minor;
    let ok = match (code.kind, t.variant) {
        (_, Variant::Arch) => exact,
        (CodeKind::Sass, Variant::Base) => same_major,
        (_, Variant::Family) => same_family,
        (CodeKind::Ptx, Variant::Base) => (t.major, t.minor) <= (device.major, device.minor),
    };
    match (ok, code.kind) {
        (false, _) => Runs::No,
        (true, CodeKind::Sass) => Runs::Native,
        (true, CodeKind::Ptx) => Runs::Jit,
    }
}

/// The best way any of `codes` runs on `device`.
pub fn coverage<'a>(codes: impl IntoIterator<Item = &'a Code>, device: Capability) -> Runs {
    codes.into_iter().map(|c| runs_on(*c, device.device())).max().unwrap_or(Runs::No)
}

/// Which of `codes` a device of capability `device` would run, and how: the
/// newest code at the best level (SASS over PTX), as the driver prefers the
/// closest match. `None` when nothing runs. This is what the text report's
/// coverage line shows per requested capability (`9.0: SASS sm_90a`).
pub fn covering<'a>(
    codes: impl IntoIterator<Item = &'a Code>,
    device: Capability,
) -> Option<(Runs, Code)> {
    codes
        .into_iter()
        .map(|c| (runs_on(*c, device.device()), *c))
        .filter(|(r, _)| *r != Runs::No)
        .max_by_key(|(r, c)| {
            (*r, c.target.major, c.target.minor, c.target.variant == device.variant)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(s: &str) -> Capability {
        Capability::parse(s).unwrap()
    }
    fn v(s: &str) -> CudaVersion {
        CudaVersion::parse(s).unwrap()
    }
    fn sass(s: &str) -> Code {
        Code { kind: CodeKind::Sass, target: cap(s) }
    }
    fn ptx(s: &str) -> Code {
        Code { kind: CodeKind::Ptx, target: cap(s) }
    }
    fn list(caps: &[Capability]) -> String {
        caps.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn table_parses_and_is_ordered_as_nix_versions() {
        assert_eq!(table().len(), 33);
        let caps: Vec<Capability> = table().iter().map(|i| i.capability).collect();
        let mut sorted = caps.clone();
        sorted.sort();
        assert_eq!(caps, sorted, "rows must be in compareVersions order");
        assert!(cap("9.0") < cap("9.0a") && cap("9.0a") < cap("10.0"));
        assert!(cap("10.0a") < cap("10.0f") && cap("10.0f") < cap("10.1"));
    }

    #[test]
    fn derived_default_sets_match_the_reference() {
        assert_eq!(list(&default_capabilities(v("12.6"))), "7.5 8.0 8.6 8.9 9.0");
        assert_eq!(list(&default_capabilities(v("12.8"))), "7.5 8.0 8.6 8.9 9.0 10.0 12.0");
        for cuda in ["12.9", "13.0", "13.5"] {
            assert_eq!(
                list(&default_capabilities(v(cuda))),
                "7.5 8.0 8.6 8.9 9.0 10.0 10.3 12.0 12.1",
                "CUDA {cuda}"
            );
        }
    }

    #[test]
    fn every_spelling_parses() {
        for (text, want, want_ptx) in [
            ("8.6 9.0", "8.6 9.0", ""),
            ("8.6;9.0", "8.6 9.0", ""),
            ("86;90", "8.6 9.0", ""),
            ("sm_86,sm_90", "8.6 9.0", ""),
            ("8.6;9.0+PTX", "8.6 9.0", "9.0"),
            ("86-real;90-virtual", "8.6 9.0", "9.0"),
            ("100a 10.0f sm_120a", "10.0a 10.0f 12.0a", ""),
            ("7.5 7.5", "7.5", ""),
        ] {
            let r = parse_list(text).unwrap();
            assert_eq!(list(&r.capabilities), want, "{text}");
            assert_eq!(list(&r.ptx), want_ptx, "{text}");
        }
        assert_eq!(parse_list("8.6;banana"), Err(CapError::Syntax("banana".into())));
        assert_eq!(parse_list(" ; "), Err(CapError::Empty));
        assert!(parse_list("8.66").is_err());
    }

    #[test]
    fn validation_uses_nixpkgs_wording() {
        let e = |s: &str, cuda: &str| {
            validate(&parse_list(s).unwrap().capabilities, v(cuda), "x86_64-linux")
                .unwrap_err()
                .to_string()
        };
        assert_eq!(e("8.6 8.8", "12.8"), "Requested unrecognized CUDA capabilities: [\"8.8\"]");
        assert_eq!(
            e("7.0 8.0", "13.0"),
            "Requested CUDA capabilities which are too old for CUDA 13.0: [\"7.0\"]"
        );
        assert_eq!(
            e("10.3", "12.8"),
            "Requested CUDA capabilities which are too new for CUDA 12.8: [\"10.3\"]"
        );
        assert_eq!(
            e("8.7", "12.8"),
            "Requested Jetson CUDA capabilities ([\"8.7\"]) require hostPlatform (x86_64-linux) to be aarch64-linux"
        );
        let mixed = validate(&[cap("8.7"), cap("8.6")], v("12.8"), "aarch64-linux").unwrap_err();
        assert!(matches!(mixed, CapError::JetsonMixed(..)));
        assert!(validate(&[cap("8.6"), cap("9.0a")], v("13.0"), "x86_64-linux").is_ok());
    }

    // NVIDIA, CUDA C++ Programming Guide, "Binary Compatibility": a cubin for
    // X.y runs on X.z with z >= y only; e.g. sm_80 SASS runs on 8.6, not on 9.0.
    #[test]
    fn sass_runs_within_its_major_on_equal_or_higher_minor() {
        assert_eq!(runs_on(sass("8.0"), cap("8.6")), Runs::Native);
        assert_eq!(runs_on(sass("8.6"), cap("8.0")), Runs::No);
        assert_eq!(runs_on(sass("8.0"), cap("9.0")), Runs::No);
        assert_eq!(runs_on(sass("12.0"), cap("12.1")), Runs::Native);
    }

    // "PTX Compatibility": PTX for a capability can be compiled for any equal
    // or higher capability; arch-specific (`a`) PTX is neither forward nor
    // backward compatible.
    #[test]
    fn ptx_jits_forward_except_arch_specific() {
        assert_eq!(runs_on(ptx("8.0"), cap("9.0")), Runs::Jit);
        assert_eq!(runs_on(ptx("8.0"), cap("12.0")), Runs::Jit);
        assert_eq!(runs_on(ptx("9.0"), cap("8.6")), Runs::No);
        assert_eq!(runs_on(ptx("9.0a"), cap("9.0")), Runs::Jit);
        assert_eq!(runs_on(ptx("9.0a"), cap("10.0")), Runs::No);
    }

    // sm_90a SASS runs only on exactly 9.0; family code (sm_100f) on 10.0 and
    // 10.3 but not on 12.0 (Blackwell compatibility guide, family-specific).
    #[test]
    fn arch_and_family_specific_code() {
        assert_eq!(runs_on(sass("9.0a"), cap("9.0")), Runs::Native);
        assert_eq!(runs_on(sass("10.0a"), cap("10.3")), Runs::No);
        assert_eq!(runs_on(sass("10.0f"), cap("10.0")), Runs::Native);
        assert_eq!(runs_on(sass("10.0f"), cap("10.3")), Runs::Native);
        assert_eq!(runs_on(sass("10.3f"), cap("10.0")), Runs::No);
        assert_eq!(runs_on(sass("10.0f"), cap("12.0")), Runs::No);
        assert_eq!(runs_on(ptx("10.0f"), cap("10.3")), Runs::Jit);
        assert_eq!(runs_on(ptx("10.0f"), cap("11.0")), Runs::No);
        // Thor (10.1 before CUDA 13, a Jetson) is its own family.
        assert_eq!(runs_on(sass("10.0f"), cap("10.1")), Runs::No);
        assert_eq!(runs_on(ptx("10.0f"), cap("10.1")), Runs::No);
        assert_eq!(runs_on(sass("10.1f"), cap("10.1")), Runs::Native);
        assert_eq!(runs_on(sass("10.1f"), cap("10.3")), Runs::No);
        assert_eq!(runs_on(sass("12.0f"), cap("12.1")), Runs::Native);
    }

    #[test]
    fn coverage_takes_the_best_and_ignores_the_requested_suffix() {
        let codes = [sass("8.0"), ptx("9.0")];
        assert_eq!(coverage(&codes, cap("8.6")), Runs::Native);
        assert_eq!(coverage(&codes, cap("10.0")), Runs::Jit);
        assert_eq!(coverage(&codes, cap("7.5")), Runs::No);
        // Requesting 9.0a means a 9.0 device: plain sm_90 SASS runs there too.
        assert_eq!(coverage(&[sass("9.0")], cap("9.0a")), Runs::Native);
    }

    #[test]
    fn non_ascii_tokens_are_syntax_errors_not_panics() {
        // fuzz/artifacts/capabilities/crash-f9d200d8: the two bytes dd 9e.
        assert_eq!(Capability::parse("\u{75e}"), None);
        assert_eq!(Capability::parse("8\u{e9}"), None);
        assert_eq!(Capability::parse("sm_\u{1f600}a"), None);
        assert!(matches!(parse_list("8.6 \u{75e}"), Err(CapError::Syntax(_))));
    }

    #[test]
    fn covering_names_the_code_the_driver_would_pick() {
        let code = |kind, t: &str| Code { kind, target: Capability::parse(t).unwrap() };
        let codes = [
            code(CodeKind::Sass, "8.0"),
            code(CodeKind::Sass, "8.6"),
            code(CodeKind::Sass, "9.0a"),
            code(CodeKind::Ptx, "8.0"),
        ];
        let pick =
            |t: &str| covering(&codes, Capability::parse(t).unwrap()).map(|(r, c)| (r, c.name()));
        assert_eq!(pick("8.9"), Some((Runs::Native, "sm_86".into())));
        assert_eq!(pick("9.0"), Some((Runs::Native, "sm_90a".into())));
        assert_eq!(pick("12.0"), Some((Runs::Jit, "compute_80".into())));
        assert_eq!(covering(&codes[..3], Capability::parse("7.5").unwrap()), None);
    }
}
