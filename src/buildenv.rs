//! What a Nix build tells a hook: its outputs, its attributes, `TMPDIR` and
//! `NIX_STORE`.
//!
//! setup.sh finds outputs in one of two ways (reference
//! `upstream-hooks.md` §1). Without structured attributes, `$outputs` is a
//! space-separated list of names and each output's path is the environment
//! variable of that name. With `__structuredAttrs = true` (cudaStdenv's
//! default) the attributes are a JSON file, `$NIX_ATTRS_JSON_FILE` (Nix 2.8
//! only writes `$NIX_BUILD_TOP/.attrs.json`, which we fall back to), whose
//! `outputs` maps names to paths. Attributes such as
//! `dontCheckForBrokenSymlinks` are then JSON values, not environment
//! variables; [`BuildEnv::attr`] reads them the way bash would see them.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// Why the build environment could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BuildEnvError {
    /// The structured-attributes file is named but cannot be read.
    #[error("cannot read structured attributes {}: {}", path.display(), crate::error::describe_io(source))]
    AttrsUnreadable {
        /// The `.attrs.json` path.
        path: PathBuf,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
    /// The structured-attributes file is not the JSON object Nix writes.
    #[error("structured attributes {} are not valid: {reason}", path.display())]
    AttrsInvalid {
        /// The `.attrs.json` path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// `__structuredAttrs` is on but no JSON file exists.
    #[error("__structuredAttrs is set but neither $NIX_ATTRS_JSON_FILE nor $NIX_BUILD_TOP/.attrs.json exists")]
    AttrsMissing,
    /// An output name has no path (`$out` unset, or missing from the JSON).
    #[error("output '{0}' is listed in outputs but has no path (is ${0} set?)")]
    OutputWithoutPath(String),
    /// Neither paths nor a build environment: nothing to check.
    #[error(
        "no paths given and no build outputs found ($outputs/$out unset, no structured attributes)"
    )]
    NoOutputs,
}

/// One output to check: its name inside a build, and its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// `out`, `dev`, ...; `None` for a path given on the command line.
    pub name: Option<String>,
    /// The output's path (may not exist).
    pub path: PathBuf,
}

/// The build environment, read once.
#[derive(Debug, Default)]
pub struct BuildEnv {
    /// The parsed `.attrs.json`, when the build uses structured attributes.
    structured: Option<Map<String, Value>>,
    /// Environment lookup, replaceable in tests.
    vars: Vec<(OsString, OsString)>,
}

impl BuildEnv {
    /// Reads the process environment and, if present, the structured attributes.
    pub fn from_env() -> Result<BuildEnv, BuildEnvError> {
        BuildEnv::from_vars(std::env::vars_os().collect())
    }

    /// Like [`BuildEnv::from_env`] over an explicit variable list (tests).
    pub fn from_vars(vars: Vec<(OsString, OsString)>) -> Result<BuildEnv, BuildEnvError> {
        let mut env = BuildEnv { structured: None, vars };
        let named = env.var("NIX_ATTRS_JSON_FILE").filter(|v| !v.is_empty()).map(PathBuf::from);
        let fallback = env
            .var("NIX_BUILD_TOP")
            .filter(|v| !v.is_empty())
            .map(|top| Path::new(&top).join(".attrs.json"))
            .filter(|p| p.exists());
        let wants_structured = env.var("__structuredAttrs").is_some_and(|v| !v.is_empty());
        let file = match (named, fallback) {
            (Some(f), _) => Some(f),
            (None, Some(f)) => Some(f),
            (None, None) if wants_structured => return Err(BuildEnvError::AttrsMissing),
            (None, None) => None,
        };
        if let Some(path) = file {
            let bytes = std::fs::read(&path)
                .map_err(|source| BuildEnvError::AttrsUnreadable { path: path.clone(), source })?;
            let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
                BuildEnvError::AttrsInvalid { path: path.clone(), reason: e.to_string() }
            })?;
            match value {
                Value::Object(map) => env.structured = Some(map),
                _ => {
                    return Err(BuildEnvError::AttrsInvalid {
                        path,
                        reason: "the top level is not an object".into(),
                    })
                }
            }
        }
        Ok(env)
    }

    /// An environment variable.
    pub fn var(&self, name: &str) -> Option<OsString> {
        self.vars.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    /// Whether the build uses structured attributes.
    pub fn is_structured(&self) -> bool {
        self.structured.is_some()
    }

    /// A derivation attribute as bash sees it: with structured attributes the
    /// JSON value (`true` -> "1", `false`/`null` -> "", numbers and strings as
    /// text, lists and sets as a non-empty marker); otherwise the environment
    /// variable. `None` when unset.
    pub fn attr(&self, name: &str) -> Option<OsString> {
        if let Some(map) = &self.structured {
            if let Some(v) = map.get(name) {
                return Some(OsString::from(match v {
                    Value::Bool(true) => "1".to_string(),
                    Value::Bool(false) | Value::Null => String::new(),
                    Value::Number(n) => n.to_string(),
                    Value::String(s) => s.clone(),
                    Value::Array(a) if a.is_empty() => String::new(),
                    Value::Array(_) | Value::Object(_) => "1".to_string(),
                }));
            }
        }
        self.var(name)
    }

    /// Whether an attribute is set to a non-empty value (bash `[[ -n ${x-} ]]`),
    /// which is how every `dont*` switch is tested.
    pub fn flag(&self, name: &str) -> bool {
        self.attr(name).is_some_and(|v| !v.is_empty())
    }

    /// The build's outputs in setup.sh's order (`getAllOutputNames`): the JSON
    /// object's order with structured attributes, `$outputs`' order otherwise
    /// (`out` when `$outputs` is unset, as Nix defaults it).
    pub fn outputs(&self) -> Result<Vec<Output>, BuildEnvError> {
        if let Some(map) = &self.structured {
            return match map.get("outputs") {
                Some(Value::Object(outs)) => outs
                    .iter()
                    .map(|(name, path)| match path {
                        Value::String(p) if !p.is_empty() => {
                            Ok(Output { name: Some(name.clone()), path: PathBuf::from(p) })
                        }
                        _ => Err(BuildEnvError::OutputWithoutPath(name.clone())),
                    })
                    .collect(),
                _ => Err(BuildEnvError::NoOutputs),
            };
        }
        let names = match self.var("outputs") {
            Some(list) => list,
            None if self.var("out").is_some() => OsString::from("out"),
            None => return Err(BuildEnvError::NoOutputs),
        };
        let names: Vec<&[u8]> =
            names.as_bytes().split(|b| b.is_ascii_whitespace()).filter(|w| !w.is_empty()).collect();
        if names.is_empty() {
            return Err(BuildEnvError::NoOutputs);
        }
        names
            .into_iter()
            .map(|raw| {
                let name = String::from_utf8_lossy(raw).into_owned();
                match self.var(&name).filter(|p| !p.is_empty()) {
                    Some(p) => Ok(Output { name: Some(name), path: PathBuf::from(p) }),
                    None => Err(BuildEnvError::OutputWithoutPath(name)),
                }
            })
            .collect()
    }

    /// The outputs to check: the command-line paths when any are given,
    /// otherwise the build's outputs.
    pub fn targets(&self, paths: &[PathBuf]) -> Result<Vec<Output>, BuildEnvError> {
        if paths.is_empty() {
            self.outputs()
        } else {
            Ok(paths.iter().map(|p| Output { name: None, path: p.clone() }).collect())
        }
    }

    /// `$TMPDIR` as the build sees it, if set and non-empty.
    pub fn tmpdir(&self) -> Option<OsString> {
        self.var("TMPDIR").filter(|v| !v.is_empty())
    }

    /// The store paths the build's outputs may not reference: Nix's
    /// `disallowedReferences` and `disallowedRequisites`, as stdenv passes
    /// them (environment variables of space-separated paths; with structured
    /// attributes, lists at the top level or per output under `outputChecks`).
    pub fn disallowed(&self) -> Vec<String> {
        const KEYS: [&str; 2] = ["disallowedReferences", "disallowedRequisites"];
        let mut out: Vec<String> = Vec::new();
        let mut list = |v: &Value| {
            if let Value::Array(items) = v {
                out.extend(items.iter().filter_map(|i| i.as_str().map(str::to_string)));
            }
        };
        match &self.structured {
            Some(map) => {
                KEYS.iter().filter_map(|k| map.get(*k)).for_each(&mut list);
                if let Some(Value::Object(checks)) = map.get("outputChecks") {
                    for per in checks.values() {
                        KEYS.iter().filter_map(|k| per.get(*k)).for_each(&mut list);
                    }
                }
            }
            None => {
                for k in KEYS {
                    if let Some(v) = self.var(k) {
                        let text = v.to_string_lossy().into_owned();
                        out.extend(text.split_ascii_whitespace().map(str::to_string));
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// `$NIX_STORE`, or `/nix/store` outside a build.
    pub fn store_dir(&self) -> OsString {
        self.var("NIX_STORE").filter(|v| !v.is_empty()).unwrap_or_else(|| "/nix/store".into())
    }
}

/// Builds an `OsString` from raw bytes (paths from JSON or tests).
pub fn os(bytes: &[u8]) -> OsString {
    OsString::from_vec(bytes.to_vec())
}

/// Whether `path` starts with `prefix` followed by `/` (bash `[[ $p == "$x"/* ]]`).
pub fn under(path: &OsStr, prefix: &OsStr) -> bool {
    let (p, x) = (path.as_bytes(), prefix.as_bytes());
    p.starts_with(x) && p.get(x.len()) == Some(&b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        list.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect()
    }

    #[test]
    fn plain_outputs_follow_the_outputs_variable() {
        let env = BuildEnv::from_vars(vars(&[
            ("outputs", "out dev  lib"),
            ("out", "/nix/store/a-out"),
            ("dev", "/nix/store/a-dev"),
            ("lib", "/nix/store/a-lib"),
        ]))
        .unwrap();
        let names: Vec<_> = env.outputs().unwrap().into_iter().map(|o| o.name.unwrap()).collect();
        assert_eq!(names, ["out", "dev", "lib"]);
    }

    #[test]
    fn missing_output_variable_is_named() {
        let env = BuildEnv::from_vars(vars(&[("outputs", "out dev"), ("out", "/x")])).unwrap();
        let err = env.outputs().unwrap_err().to_string();
        assert!(err.contains("'dev'"), "{err}");
    }

    #[test]
    fn structured_attrs_give_outputs_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join(".attrs.json");
        std::fs::write(
            &json,
            r#"{"outputs":{"out":"/nix/store/x-out","bin":"/nix/store/x-bin"},
                "dontCheckForBrokenSymlinks":true,"other":false}"#,
        )
        .unwrap();
        let env =
            BuildEnv::from_vars(vars(&[("NIX_ATTRS_JSON_FILE", json.to_str().unwrap())])).unwrap();
        let outs = env.outputs().unwrap();
        assert_eq!(outs[1].path, PathBuf::from("/nix/store/x-bin"));
        assert!(env.flag("dontCheckForBrokenSymlinks"));
        assert!(!env.flag("other"));
        assert!(!env.flag("absent"));
    }

    #[test]
    fn disallowed_references_come_from_variables_or_output_checks() {
        let env = BuildEnv::from_vars(vars(&[
            ("disallowedReferences", "/nix/store/a-x  /nix/store/b-y"),
            ("disallowedRequisites", "/nix/store/a-x"),
        ]))
        .unwrap();
        assert_eq!(env.disallowed(), ["/nix/store/a-x", "/nix/store/b-y"]);
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join(".attrs.json");
        std::fs::write(
            &json,
            r#"{"outputs":{"out":"/o"},"outputChecks":{"out":{"disallowedReferences":["/nix/store/c-z"]},"dev":{"disallowedRequisites":["/nix/store/d-w"]}}}"#,
        )
        .unwrap();
        let env =
            BuildEnv::from_vars(vars(&[("NIX_ATTRS_JSON_FILE", json.to_str().unwrap())])).unwrap();
        assert_eq!(env.disallowed(), ["/nix/store/c-z", "/nix/store/d-w"]);
    }

    #[test]
    fn structured_attrs_fall_back_to_build_top() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".attrs.json"), r#"{"outputs":{"out":"/o"}}"#).unwrap();
        let env =
            BuildEnv::from_vars(vars(&[("NIX_BUILD_TOP", dir.path().to_str().unwrap())])).unwrap();
        assert!(env.is_structured());
        assert_eq!(env.outputs().unwrap()[0].path, PathBuf::from("/o"));
    }

    #[test]
    fn structured_without_file_is_an_error() {
        let err = BuildEnv::from_vars(vars(&[("__structuredAttrs", "1")])).unwrap_err();
        assert!(matches!(err, BuildEnvError::AttrsMissing));
    }

    #[test]
    fn under_matches_bash_glob() {
        assert!(under(OsStr::new("/build/x"), OsStr::new("/build")));
        assert!(!under(OsStr::new("/build"), OsStr::new("/build")));
        // `*` matches the empty string: a trailing slash alone is inside.
        assert!(under(OsStr::new("/build/"), OsStr::new("/build")));
        assert!(!under(OsStr::new("/buildx/y"), OsStr::new("/build")));
    }
}
