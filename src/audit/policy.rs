//! What the audit checks against, from the command line and the build's
//! environment: the requested capabilities (flag, then `$cudaCapabilities`,
//! `$CUDAARCHS`, `$TORCH_CUDA_ARCH_LIST`), forward compatibility (flags, then
//! `$cudaForwardCompat`, default on as in Nixpkgs), the build folders no
//! RUNPATH may point into, the driver folder and the store.

use std::path::PathBuf;
use std::sync::Arc;

use super::args::AuditArgs;
use super::linkage::Resolver;
use super::Policy;
use crate::buildenv::BuildEnv;
use crate::cuda::capabilities::{self, CapError, CudaVersion, Request};
use crate::cuda::driver::Driver;
use crate::devicecode::Scan;

/// What the arguments and the build environment say to check, before the
/// sources are prepared: with the store folder and the resolver they
/// decide, it becomes the [`Policy`] ([`Checks::policy`]).
#[derive(Debug, Clone)]
pub struct Checks {
    /// Requested capabilities; `None`: no capability checks.
    pub requested: Option<Request>,
    /// Expect PTX for the last requested capability.
    pub forward_compat: bool,
    /// The driver's library folder that must be on RUNPATH.
    pub driver_lib: String,
    /// Build folders no RUNPATH entry may point into.
    pub build_dirs: Vec<String>,
    /// Search the host's default library folders for store files too.
    pub system_lib_dirs: bool,
    /// `--sysroot`: another machine's library root.
    pub sysroot: Option<PathBuf>,
    /// The driver the files must run on, if given.
    pub driver: Option<Driver>,
    /// See [`Policy::own_outputs`].
    pub own_outputs: Vec<PathBuf>,
    /// See [`Policy::in_build`].
    pub in_build: bool,
    /// Run the dlopen pass (not `--no-dlopen`).
    pub dlopen: bool,
    /// `--dlopen-facts`: every file's dlopen targets in its JSON facts.
    pub dlopen_facts: bool,
    /// `--references`/`--no-references`, if given.
    pub references: Option<bool>,
    /// Paths no file may reference (`--forbid-reference`, the build's
    /// disallowed references and requisites).
    pub forbidden: Vec<String>,
    /// Inside a build: `$NIX_BUILD_TOP`.
    pub build_top: Option<String>,
    /// Inside a build: its outputs' base names.
    pub outputs: Vec<String>,
    /// The capability list as written and where it was read
    /// (`--cuda-capabilities`, `$cudaCapabilities`, ...), for reports.
    pub capabilities_from: Option<(String, String)>,
}

/// What the audit was asked to check against, as a report names it: the
/// requested capabilities and where they came from (a Nix build passes
/// them in `$cudaCapabilities`, not on the command line), and the driver.
#[derive(Debug, Clone, Default)]
pub struct Asked {
    /// The list as written and its source (`--cuda-capabilities`,
    /// `$cudaCapabilities`, `$CUDAARCHS`, `$TORCH_CUDA_ARCH_LIST`).
    pub capabilities: Option<(String, String)>,
    /// `--driver-version` / `--driver-cuda`.
    pub driver: Option<Driver>,
}

impl Checks {
    /// The policy for sources named in `store_dir` and read through
    /// `resolver`; `scan`: how to read fatbin containers outside the sections.
    pub fn policy(self, scan: Scan, store_dir: PathBuf, resolver: Arc<Resolver>) -> Policy {
        Policy {
            requested: self.requested,
            forward_compat: self.forward_compat,
            driver_lib: self.driver_lib,
            build_dirs: self.build_dirs,
            store_dir,
            system_lib_dirs: self.system_lib_dirs,
            sysroot: self.sysroot,
            scan,
            driver: self.driver,
            own_outputs: self.own_outputs,
            in_build: self.in_build,
            dlopen: self.dlopen,
            dlopen_facts: self.dlopen_facts,
            resolver,
            references: None,
            reading: super::Reading::Full,
        }
    }
}

impl Checks {
    /// The reference finding of a run over files named in `store_dir`:
    /// `None` when off (`--no-references`, or by default unless
    /// `default_on`: inside a build, for store paths, NAR files and caches).
    /// `closure`: the paths a cache's closure holds, which Nix's own search
    /// looks for; otherwise every path of the store folder.
    pub fn reference_settings(
        &self,
        default_on: bool,
        store_dir: &std::path::Path,
        closure: Option<&[String]>,
    ) -> Option<super::references::Settings> {
        let on = self.references.unwrap_or(default_on || !self.forbidden.is_empty());
        if !on {
            return None;
        }
        let store = store_dir.to_string_lossy().trim_end_matches('/').to_string();
        let candidates = match closure {
            Some(paths) => {
                crate::store::references::Candidates::paths(paths.iter().map(String::as_str))
            }
            None => crate::store::references::Candidates::StoreDir(store.clone()),
        };
        Some(super::references::Settings {
            candidates,
            store_dir: store,
            forbidden: self.forbidden.clone(),
            defaults: true,
            build_top: self.build_top.clone(),
            outputs: self.outputs.clone(),
        })
    }
}

/// Why the policy cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// `--cuda-version` is not `X.Y`.
    #[error("--cuda-version {0}: expected X.Y")]
    CudaVersion(String),
    /// The capability list is malformed or out of range (Nixpkgs' wording).
    #[error(transparent)]
    Capabilities(#[from] CapError),
    /// `--driver-version`: bad syntax or a branch the table does not know.
    #[error("--driver-version: {0}")]
    Driver(#[from] crate::cuda::driver::DriverError),
    /// `--driver-cuda` is not `X.Y`.
    #[error("--driver-cuda {0}: expected X.Y (what nvidia-smi prints as \"CUDA Version\")")]
    DriverCuda(String),
}

/// The variables naming the requested capabilities, in precedence order
/// after `--cuda-capabilities`: Nixpkgs' attribute, CMake's, PyTorch's.
pub const CAPABILITY_VARIABLES: [&str; 3] =
    ["cudaCapabilities", "CUDAARCHS", "TORCH_CUDA_ARCH_LIST"];

/// The driver of `--driver-version` or `--driver-cuda`, if one is given.
pub fn driver(flags: &AuditArgs) -> Result<Option<Driver>, PolicyError> {
    Ok(match (&flags.driver_version, &flags.driver_cuda) {
        (Some(v), _) => Some(Driver::from_version(v)?),
        (None, Some(c)) => Some(Driver::from_cuda(
            CudaVersion::parse(c)
                .filter(|_| c.trim().split('.').count() == 2)
                .ok_or_else(|| PolicyError::DriverCuda(c.clone()))?,
        )),
        (None, None) => None,
    })
}

/// What to check: flags first, then the build's attributes, then the
/// variables other build systems use. Blank variables count as unset.
pub fn checks(flags: &AuditArgs, env: &BuildEnv) -> Result<Checks, PolicyError> {
    let text = |name: &str| {
        env.attr(name).map(|v| v.to_string_lossy().into_owned()).filter(|v| !v.trim().is_empty())
    };
    // A blank flag means "no capability checks", not "look further".
    let capabilities_from = match &flags.cuda_capabilities {
        Some(l) => Some((l.clone(), "--cuda-capabilities".to_string()))
            .filter(|(l, _)| !l.trim().is_empty()),
        None => CAPABILITY_VARIABLES.iter().find_map(|v| text(v).map(|l| (l, format!("${v}")))),
    };
    let list = capabilities_from.as_ref().map(|(l, _)| l.clone());
    let cuda = match &flags.cuda_version {
        Some(v) => Some(CudaVersion::parse(v).ok_or_else(|| PolicyError::CudaVersion(v.clone()))?),
        None => None,
    };
    let requested = match list {
        Some(l) => {
            let req = capabilities::parse_list(&l)?;
            capabilities::validate_versions(&req.capabilities, cuda)?;
            Some(req)
        }
        None => None,
    };
    let forward_compat = flags.forward_compat().unwrap_or_else(|| {
        env.attr("cudaForwardCompat").is_none_or(|v| forward_compat_value(&v.to_string_lossy()))
    });
    let driver = driver(flags)?;
    Ok(Checks {
        driver,
        requested,
        forward_compat,
        driver_lib: format!("{}/lib", flags.driver_link.trim_end_matches('/')),
        build_dirs: build_dirs(env),
        system_lib_dirs: flags.system_lib_dirs,
        sysroot: flags.sysroot.clone(),
        own_outputs: own_outputs(env),
        in_build: env.outputs().is_ok_and(|o| !o.is_empty()),
        dlopen: !flags.no_dlopen,
        dlopen_facts: flags.dlopen_facts && !flags.no_dlopen,
        references: match (flags.references, flags.no_references) {
            (_, true) => Some(false),
            (true, _) => Some(true),
            _ => None,
        },
        forbidden: flags.forbid_reference.iter().cloned().chain(env.disallowed()).collect(),
        build_top: env
            .var("NIX_BUILD_TOP")
            .map(|v| v.to_string_lossy().trim_end_matches('/').to_string())
            .filter(|v| !v.is_empty()),
        outputs: env
            .outputs()
            .unwrap_or_default()
            .iter()
            .filter_map(|o| o.path.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect(),
        capabilities_from,
    })
}

/// The outputs of the build this runs in, when the derivation builds its
/// own code: none outside a build, and none when `dontBuild` is set, as
/// Nixpkgs' CUDA redist builder (and most packages of prebuilt binaries)
/// sets it: their device code is NVIDIA's or a vendor's, not the build's.
pub fn own_outputs(env: &BuildEnv) -> Vec<PathBuf> {
    if env.flag("dontBuild") {
        return Vec::new();
    }
    env.outputs().map(|o| o.into_iter().map(|o| o.path).collect()).unwrap_or_default()
}

/// `$cudaForwardCompat` as Nix passes a boolean: `1` true, empty false
/// (also `0` and `false`, as people write them by hand).
pub fn forward_compat_value(v: &str) -> bool {
    !v.is_empty() && v != "0" && v != "false"
}

/// `/build`, `$TMPDIR` and `$NIX_BUILD_TOP` (trailing slashes dropped, each
/// once). Outside a build TMPDIR is usually /tmp: still no place for a RUNPATH.
pub fn build_dirs(env: &BuildEnv) -> Vec<String> {
    let mut dirs = vec!["/build".to_string()];
    for var in ["TMPDIR", "NIX_BUILD_TOP"] {
        if let Some(v) = env.var(var).map(|v| v.to_string_lossy().trim_end_matches('/').to_string())
        {
            if !v.is_empty() && !dirs.contains(&v) {
                dirs.push(v);
            }
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> BuildEnv {
        BuildEnv::from_vars(vars.iter().map(|(k, v)| (k.into(), v.into())).collect()).unwrap()
    }

    fn flags() -> AuditArgs {
        AuditArgs { driver_link: "/run/opengl-driver/".into(), ..AuditArgs::default() }
    }

    fn forward(flag: Option<bool>) -> AuditArgs {
        AuditArgs {
            forward_compat: flag == Some(true),
            no_forward_compat: flag == Some(false),
            ..flags()
        }
    }
    #[test]
    fn driver_flags_name_a_driver_or_fail_with_the_reason() {
        let e = env(&[]);
        let with = |v: Option<&str>, c: Option<&str>| {
            checks(
                &AuditArgs {
                    driver_version: v.map(str::to_string),
                    driver_cuda: c.map(str::to_string),
                    ..flags()
                },
                &e,
            )
        };
        assert!(with(None, None).unwrap().driver.is_none());
        let d = with(Some("580.95.05"), None).unwrap().driver.unwrap();
        assert_eq!(d.cuda, CudaVersion::parse("13.0").unwrap());
        assert_eq!(
            with(None, Some("12.4")).unwrap().driver.unwrap().cuda,
            CudaVersion::parse("12.4").unwrap()
        );
        let err = |v, c| with(v, c).unwrap_err().to_string();
        assert!(err(Some("999.1"), None).contains("driver branch 999 is not in the table"));
        assert!(err(Some("x"), None).contains("is not a driver version"));
        assert!(err(None, Some("13")).contains("--driver-cuda 13: expected X.Y"));
        assert!(err(None, Some("1.2.3")).contains("expected X.Y"));
    }

    fn caps(p: &Checks) -> Vec<String> {
        p.requested
            .as_ref()
            .map_or_else(Vec::new, |r| r.capabilities.iter().map(|c| c.to_string()).collect())
    }

    #[test]
    fn capabilities_come_from_the_flag_then_the_variables_in_order() {
        let all =
            [("cudaCapabilities", "8.6"), ("CUDAARCHS", "90"), ("TORCH_CUDA_ARCH_LIST", "7.5")];
        type Case<'a> = (&'a str, Option<&'a str>, &'a [(&'a str, &'a str)], Vec<&'a str>);
        let cases: Vec<Case> = vec![
            ("flag wins", Some("8.0"), &all, vec!["8.0"]),
            ("Nixpkgs' attribute", None, &all, vec!["8.6"]),
            ("CMake's", None, &all[1..], vec!["9.0"]),
            ("PyTorch's", None, &all[2..], vec!["7.5"]),
            ("blank flag: no checks", Some(" "), &all, vec![]),
            (
                "blank variable falls through",
                None,
                &[("cudaCapabilities", " "), ("CUDAARCHS", "90")],
                vec!["9.0"],
            ),
            ("none: no capability checks", None, &[], vec![]),
        ];
        for (name, flag, vars, want) in cases {
            let f = AuditArgs { cuda_capabilities: flag.map(str::to_string), ..flags() };
            assert_eq!(caps(&checks(&f, &env(vars)).unwrap()), want, "{name}");
        }
    }

    #[test]
    fn forward_compat_from_flags_then_the_attribute() {
        let cases: Vec<(Option<bool>, Option<&str>, bool)> = vec![
            (None, None, true),
            (None, Some("1"), true),
            (None, Some(""), false),
            (None, Some("0"), false),
            (None, Some("false"), false),
            (Some(true), Some(""), true),
            (Some(false), Some("1"), false),
        ];
        for (flag, attr, want) in cases {
            let vars: Vec<(&str, &str)> =
                attr.map(|a| ("cudaForwardCompat", a)).into_iter().collect();
            assert_eq!(
                checks(&forward(flag), &env(&vars)).unwrap().forward_compat,
                want,
                "{flag:?} {attr:?}"
            );
        }
    }

    #[test]
    fn build_folders_and_the_driver_folder() {
        let e = env(&[("TMPDIR", "/tmp/nix-build-x/"), ("NIX_BUILD_TOP", "/tmp/nix-build-x")]);
        let p = checks(&flags(), &e).unwrap();
        assert_eq!(p.build_dirs, ["/build", "/tmp/nix-build-x"]);
        assert_eq!(p.driver_lib, "/run/opengl-driver/lib");
        assert_eq!(build_dirs(&env(&[("TMPDIR", "")])), ["/build"]);
    }

    #[test]
    fn bad_lists_and_versions_are_errors() {
        let f = AuditArgs { cuda_version: Some("twelve".into()), ..flags() };
        assert_eq!(
            checks(&f, &env(&[])).unwrap_err().to_string(),
            "--cuda-version twelve: expected X.Y"
        );
        let f = AuditArgs { cuda_capabilities: Some("8.6;banana".into()), ..flags() };
        assert!(checks(&f, &env(&[])).is_err());
    }
}
