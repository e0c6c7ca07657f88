//! The two reviewed data tables (docs/dlopen.md): `facts.tsv`, what a
//! library loads that its strings alone do not say (names built at run
//! time, versions appended, what is needed and what optional), and
//! `providers.tsv`, which Nixpkgs attribute provides a soname. Both are
//! read at compile time; a row that does not parse fails the unit tests.

use std::collections::HashSet;
use std::sync::OnceLock;

use serde::Serialize;

use super::{Origin, Scan, Target, MAX_TARGETS};

/// How much the caller needs a library it loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Need {
    /// The library's main job fails without it (`dlopen-unresolved` is an error).
    Needed,
    /// A reviewed fact (a table row, a note's `recommended` priority) says
    /// a feature a user expects fails without it, and a package provides
    /// it (`dlopen-unresolved` is a warning).
    Recommended,
    /// A feature, a plugin or a fallback (`dlopen-unresolved` is an info).
    /// Also the default for a name only a string shows: a bare string is
    /// no reviewed fact, and most are fallbacks a maintainer cannot act on.
    Optional,
}

/// How the caller turns the name it holds into the names it asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// The name as held.
    AsIs,
    /// The caller appends its own version: `NAME.X.Y.Z`, `NAME.X.Y`, `NAME.X`
    /// (cuDNN 9).
    Ladder,
    /// A printf pattern, expanded with each value in turn.
    Expand(Vec<String>),
    /// Built at run time: asked even when no string says it.
    Runtime,
}

/// One row of `facts.tsv`.
#[derive(Debug, Clone)]
pub struct Fact {
    /// The caller's SONAME, `*` globs.
    pub caller: &'static str,
    /// The name as held (literal, glob or pattern) or built.
    pub target: &'static str,
    /// Needed or optional.
    pub need: Need,
    /// How it is asked.
    pub ask: Ask,
    /// Whether it must be of the caller's own release (`release` column
    /// `same`; `any` otherwise).
    pub same_release: bool,
    /// Where the fact comes from.
    pub source: &'static str,
}

/// One row of `providers.tsv`.
#[derive(Debug, Clone)]
pub struct Provider {
    /// The soname, `*` globs.
    pub soname: &'static str,
    /// The Nixpkgs attribute (`cudaPackages.cuda_nvrtc`).
    pub attribute: &'static str,
    /// The package is NVIDIA's prebuilt binaries (`built` column `redist`),
    /// not compiled by its derivation (`source`).
    pub redist: bool,
    /// Where the fact comes from.
    pub source: &'static str,
}

const FACTS: &str = include_str!("facts.tsv");
const PROVIDERS: &str = include_str!("providers.tsv");

/// The rows of a TSV text: comments and blank lines skipped, `n` columns.
fn rows(text: &'static str, n: usize) -> impl Iterator<Item = Result<Vec<&'static str>, String>> {
    text.lines().enumerate().filter(|(_, l)| !l.is_empty() && !l.starts_with('#')).map(
        move |(i, l)| {
            let cols: Vec<&str> = l.split('\t').collect();
            if cols.len() == n && cols.iter().all(|c| !c.is_empty()) {
                Ok(cols)
            } else {
                Err(format!("line {}: {} columns, expected {n}: {l}", i + 1, cols.len()))
            }
        },
    )
}

fn parse_facts() -> Result<Vec<Fact>, String> {
    rows(FACTS, 6)
        .map(|r| {
            let c = r?;
            let need = match c[2] {
                "needed" => Need::Needed,
                "recommended" => Need::Recommended,
                "optional" => Need::Optional,
                other => {
                    return Err(format!("need '{other}' is not needed, recommended or optional"))
                }
            };
            let ask = match c[3] {
                "as-is" => Ask::AsIs,
                "ladder" => Ask::Ladder,
                "runtime" => Ask::Runtime,
                other => match other.strip_prefix("expand:") {
                    Some(v) => Ask::Expand(v.split(',').map(str::to_string).collect()),
                    None => return Err(format!("ask '{other}' is unknown")),
                },
            };
            let same_release = match c[4] {
                "same" => true,
                "any" => false,
                other => return Err(format!("release '{other}' is not same or any")),
            };
            Ok(Fact { caller: c[0], target: c[1], need, ask, same_release, source: c[5] })
        })
        .collect()
}

fn parse_providers() -> Result<Vec<Provider>, String> {
    rows(PROVIDERS, 4)
        .map(|r| {
            let c = r?;
            let redist = match c[2] {
                "redist" => true,
                "source" => false,
                other => return Err(format!("built '{other}' is not redist or source")),
            };
            Ok(Provider { soname: c[0], attribute: c[1], redist, source: c[3] })
        })
        .collect()
}

/// Every row of `facts.tsv` (empty if it does not parse, which the unit
/// tests forbid).
pub fn facts() -> &'static [Fact] {
    static T: OnceLock<Vec<Fact>> = OnceLock::new();
    T.get_or_init(|| parse_facts().unwrap_or_default())
}

/// Every row of `providers.tsv`.
pub fn providers() -> &'static [Provider] {
    static T: OnceLock<Vec<Provider>> = OnceLock::new();
    T.get_or_init(|| parse_providers().unwrap_or_default())
}

/// The Nixpkgs attribute providing `soname`, if the table knows it.
pub fn provider(soname: &str) -> Option<&'static Provider> {
    providers().iter().find(|p| glob(p.soname, soname))
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters.
pub fn glob(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else { return rest.is_empty() };
    for p in middle {
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// The rows for a caller of this SONAME.
pub fn facts_for(soname: Option<&str>) -> Vec<&'static Fact> {
    let Some(s) = soname else { return Vec::new() };
    facts().iter().filter(|f| glob(f.caller, s)).collect()
}

/// The names a ladder asks: the caller's full version (when known) then
/// shorter ones, down to the major of its soname.
fn ladder(name: &str, caller: Option<&str>, version: Option<&str>) -> Vec<String> {
    let major =
        caller.and_then(|c| c.split_once(".so.")).map(|(_, v)| v.split('.').next().unwrap_or(v));
    let mut out = Vec::new();
    if let Some(v) = version {
        let parts: Vec<&str> = v.split('.').collect();
        for n in (2..=parts.len()).rev() {
            out.push(format!("{name}.{}", parts[..n].join(".")));
        }
    }
    match major {
        Some(m) => out.push(format!("{name}.{m}")),
        None => out.push(name.to_string()),
    }
    out
}

/// Adds the string `name` found at `origin` as a target (or a pattern),
/// as the first matching row says; without one, as held and optional.
pub fn apply(
    name: String,
    origin: Origin,
    rows: &[&'static Fact],
    caller: Option<&str>,
    version: Option<&str>,
    out: &mut Scan,
    seen: &mut HashSet<String>,
) {
    let row = rows.iter().find(|f| glob(f.target, &name));
    let need = row.map_or(Need::Optional, |f| f.need);
    let same_release = row.is_some_and(|f| f.same_release);
    let asked = match row.map(|f| &f.ask) {
        Some(Ask::Ladder) => ladder(&name, caller, version),
        Some(Ask::Expand(values)) => values.iter().map(|v| expand(&name, v)).collect(),
        _ if name.contains('%') => {
            out.patterns.push((name, origin));
            return;
        }
        _ => vec![name.clone()],
    };
    let soname = match row.map(|f| &f.ask) {
        Some(Ask::Expand(_)) => name.clone(),
        _ => asked.last().cloned().unwrap_or_else(|| name.clone()),
    };
    if seen.contains(&soname) || seen.len() >= MAX_TARGETS {
        return;
    }
    seen.insert(soname.clone());
    seen.insert(name);
    out.targets.push(Target { soname, asked, origin, need, same_release });
}

/// The printf pattern with its one conversion replaced by `value`.
fn expand(pattern: &str, value: &str) -> String {
    let Some(at) = pattern.find('%') else { return pattern.to_string() };
    let rest = &pattern[at + 1..];
    let rest = rest.strip_prefix('l').unwrap_or(rest);
    format!("{}{value}{}", &pattern[..at], rest.get(1..).unwrap_or(""))
}

/// Adds the rows of names built at run time that no string named.
pub fn runtime_rows(rows: &[&'static Fact], out: &mut Scan, seen: &mut HashSet<String>) {
    for f in rows.iter().filter(|f| f.ask == Ask::Runtime) {
        if seen.contains(f.target) {
            continue;
        }
        seen.insert(f.target.to_string());
        out.targets.push(Target {
            soname: f.target.to_string(),
            asked: vec![f.target.to_string()],
            origin: Origin::Table { source: f.source },
            need: f.need,
            same_release: f.same_release,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_parse() {
        let facts = parse_facts().unwrap();
        assert!(facts.len() >= 10);
        // cuDNN's sub-libraries must be of the caller's release; NVRTC's
        // builtins are asked by a name that carries it.
        let row = |c: &str, t: &str| facts.iter().find(|f| f.caller == c && f.target == t);
        assert!(row("libcudnn.so.9", "libcudnn_graph.so").unwrap().same_release);
        assert!(!row("libnvrtc.so.*", "libnvrtc-builtins.so.*").unwrap().same_release);
        let providers = parse_providers().unwrap();
        assert!(providers
            .iter()
            .all(|p| p.attribute.starts_with("cudaPackages.") || !p.attribute.contains('.')));
        assert_eq!(provider("libnvrtc.so.12").unwrap().attribute, "cudaPackages.cuda_nvrtc");
        assert_eq!(
            provider("libnvrtc-builtins.so.12.9").unwrap().attribute,
            "cudaPackages.cuda_nvrtc"
        );
        assert_eq!(provider("libcudnn_graph.so.9").unwrap().attribute, "cudaPackages.cudnn");
        assert!(provider("libfoo.so.1").is_none());
    }

    #[test]
    fn ladders_and_patterns() {
        assert_eq!(
            ladder("libcudnn_graph.so", Some("libcudnn.so.9"), Some("9.19.0")),
            ["libcudnn_graph.so.9.19.0", "libcudnn_graph.so.9.19", "libcudnn_graph.so.9"]
        );
        assert_eq!(
            ladder("libcudnn_graph.so", Some("libcudnn.so.9"), None),
            ["libcudnn_graph.so.9"]
        );
        assert_eq!(expand("libnvrtc.so.%d", "13"), "libnvrtc.so.13");
        assert_eq!(expand("libx-%lu.so", "2"), "libx-2.so");
        assert!(glob("libcudnn*.so.9", "libcudnn_graph.so.9"));
        assert!(!glob("libcudnn*.so.9", "libcudnn.so.8"));
    }
}
