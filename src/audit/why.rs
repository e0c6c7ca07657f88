//! "Why is X in the closure of Y", answered from a binary cache without
//! realising anything (`--substituter URL --closure --why X`): the chains of
//! store paths from each root to X, read from the narinfo files' References
//! (what Nix recorded), and at each hop the file and section that hold the
//! reference (from the NARs the audit streamed); with them the closure's
//! total NarSize and each path's share. docs/references.md.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::checks::why_build_only;
use super::references::{Reference, Settings};
use super::Audit;
use crate::audit::finding::strip_store_hash;
use crate::output::{sanitize, Controls};

/// One store path of the closure, as its narinfo describes it.
#[derive(Debug, Clone)]
pub struct Node {
    /// The store path.
    pub path: String,
    /// Its NAR's size.
    pub nar_size: u64,
    /// The store paths it references (itself left out).
    pub references: Vec<String>,
}

/// The answer.
#[derive(Debug, Clone, Serialize)]
pub struct Why {
    /// The store paths asked about (the audit's arguments).
    pub roots: Vec<String>,
    /// Sum of the closure's NAR sizes.
    pub total_nar_size: u64,
    /// Each path's NAR size and share of the total, largest first.
    pub paths: Vec<Share>,
    /// Every chain from a root to each path asked about.
    pub chains: Vec<Chain>,
    /// Paths asked about that are not in the closure.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_in_closure: Vec<String>,
}

/// One path's part of the closure.
#[derive(Debug, Clone, Serialize)]
pub struct Share {
    /// The store path.
    pub path: String,
    /// Its NAR's size.
    pub nar_size: u64,
    /// Its fraction of the closure's total.
    pub share: f64,
}

/// One chain of references from a root to a path asked about.
#[derive(Debug, Clone, Serialize)]
pub struct Chain {
    /// The path asked about.
    pub target: String,
    /// Why it is build-only, if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_only: Option<String>,
    /// The hops, root first.
    pub hops: Vec<Hop>,
}

/// One reference of a chain.
#[derive(Debug, Clone, Serialize)]
pub struct Hop {
    /// The referring store path.
    pub from: String,
    /// The store path it references.
    pub to: String,
    /// The file of `from` holding the reference (the first found), if the
    /// audit read it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Where in that file ([`Reference::place`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub place: Option<String>,
}

/// The most chains listed per path asked about (a diamond-shaped closure
/// has exponentially many).
pub const MAX_CHAINS: usize = 1000;

/// Answers `asked` (store paths, base names, names without hash, or
/// `build-only` for every build-only path the audit found) for the
/// closure `nodes` of `roots`.
pub fn answer(
    roots: &[String],
    nodes: &[Node],
    asked: &[String],
    audit: &Audit,
    settings: Option<&Settings>,
) -> Why {
    let graph: BTreeMap<&str, &Node> = nodes.iter().map(|n| (n.path.as_str(), n)).collect();
    let total: u64 = nodes.iter().map(|n| n.nar_size).sum();
    let mut paths: Vec<Share> = nodes
        .iter()
        .map(|n| Share {
            path: n.path.clone(),
            nar_size: n.nar_size,
            share: if total == 0 { 0.0 } else { n.nar_size as f64 / total as f64 },
        })
        .collect();
    paths.sort_by(|a, b| b.nar_size.cmp(&a.nar_size).then(a.path.cmp(&b.path)));
    let build_only = |target: &str| -> Option<String> {
        let settings = settings?;
        audit
            .references
            .iter()
            .find_map(|(_, r)| (r.target == target).then(|| why_build_only(r, settings)).flatten())
    };
    let mut targets = BTreeSet::new();
    let mut not_in_closure = Vec::new();
    for a in asked {
        if a == "build-only" {
            targets.extend(graph.keys().filter(|p| build_only(p).is_some()).map(|p| p.to_string()));
            continue;
        }
        let found: Vec<&str> = graph.keys().copied().filter(|p| matches(p, a)).collect();
        if found.is_empty() {
            not_in_closure.push(a.clone());
        }
        targets.extend(found.into_iter().map(str::to_string));
    }
    let mut chains = Vec::new();
    for target in &targets {
        let why = build_only(target);
        for root in roots {
            for walk in all_paths(&graph, root, target) {
                let hops = walk.windows(2).map(|w| hop(audit, w[0], w[1])).collect();
                chains.push(Chain { target: target.clone(), build_only: why.clone(), hops });
            }
        }
    }
    Why { roots: roots.to_vec(), total_nar_size: total, paths, chains, not_in_closure }
}

/// Whether store path `path` is the one `asked` names.
fn matches(path: &str, asked: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    let name = strip_store_hash(base);
    path == asked.trim_end_matches('/') || base == asked || name == asked
}

/// Every chain from `from` to `to` (each a list of paths), at most
/// [`MAX_CHAINS`], in the order of the sorted references.
fn all_paths<'g>(
    graph: &BTreeMap<&'g str, &'g Node>,
    from: &'g str,
    to: &str,
) -> Vec<Vec<&'g str>> {
    let mut out = Vec::new();
    let mut stack = vec![from];
    let reaches = reaching(graph, to);
    if reaches.contains(from) {
        extend(graph, &reaches, to, &mut stack, &mut out);
    }
    out
}

fn extend<'g>(
    graph: &BTreeMap<&'g str, &'g Node>,
    reaches: &BTreeSet<&'g str>,
    to: &str,
    stack: &mut Vec<&'g str>,
    out: &mut Vec<Vec<&'g str>>,
) {
    let Some(&last) = stack.last() else { return };
    if last == to {
        out.push(stack.clone());
        return;
    }
    let Some(node) = graph.get(last) else { return };
    let mut next: Vec<&str> = node.references.iter().map(String::as_str).collect();
    next.sort_unstable();
    for r in next {
        if out.len() >= MAX_CHAINS {
            return;
        }
        let Some((&key, _)) = graph.get_key_value(r) else { continue };
        if reaches.contains(key) && !stack.contains(&key) {
            stack.push(key);
            extend(graph, reaches, to, stack, out);
            stack.pop();
        }
    }
}

/// The paths from which `to` can be reached (itself included).
fn reaching<'g>(graph: &BTreeMap<&'g str, &'g Node>, to: &str) -> BTreeSet<&'g str> {
    let mut back: BTreeMap<&str, Vec<&'g str>> = BTreeMap::new();
    for (&p, n) in graph {
        for r in &n.references {
            back.entry(r.as_str()).or_default().push(p);
        }
    }
    let mut seen = BTreeSet::new();
    let Some((&start, _)) = graph.get_key_value(to) else { return seen };
    let mut todo = vec![start];
    while let Some(p) = todo.pop() {
        if seen.insert(p) {
            todo.extend(back.get(p).into_iter().flatten().copied());
        }
    }
    seen
}

/// The hop `from -> to`, with the first place in `from`'s files that holds
/// the reference (one Nix sees first).
fn hop(audit: &Audit, from: &str, to: &str) -> Hop {
    let inside = |file: &std::path::Path| {
        file.to_str().is_some_and(|f| f == from || f.starts_with(&format!("{from}/")))
    };
    let held: Vec<&(std::path::PathBuf, Reference)> =
        audit.references.iter().filter(|(f, r)| r.target == to && inside(f)).collect();
    let first = held.iter().find(|(_, r)| r.visible).or(held.first());
    Hop {
        from: from.to_string(),
        to: to.to_string(),
        file: first.map(|(f, _)| f.to_string_lossy().into_owned()),
        place: first.map(|(_, r)| r.place()),
    }
}

/// The answer as text: the closure's sizes, then each chain.
///
/// Every name is shown through the one sanitiser (control characters
/// replaced): a hop's file is a name from a NAR, which a stranger wrote.
pub fn write_text(out: &mut dyn std::io::Write, why: &Why) -> std::io::Result<()> {
    let mb = |b: u64| b as f64 / 1e6;
    let shown = |text: &str| sanitize(text, Controls::Replace);
    writeln!(
        out,
        "closure of {}: {} paths, {:.1} MB of NAR",
        shown(&why.roots.join(", ")),
        why.paths.len(),
        mb(why.total_nar_size)
    )?;
    for s in &why.paths {
        let path = shown(&s.path);
        writeln!(out, "  {:>10.1} MB {:>6.1}%  {path}", mb(s.nar_size), s.share * 100.0)?;
    }
    for c in &why.chains {
        let label = c
            .build_only
            .as_ref()
            .map(|w| format!(" (build-only: {})", shown(w)))
            .unwrap_or_default();
        writeln!(out, "\nwhy {}{label}:", shown(&c.target))?;
        if let Some(first) = c.hops.first() {
            writeln!(out, "  {}", shown(&first.from))?;
        }
        for h in &c.hops {
            let at = match (&h.file, &h.place) {
                (Some(f), Some(p)) => format!("{}: {}", shown(f), shown(p)),
                _ => "a file the audit did not read".into(),
            };
            writeln!(out, "  -> {}\n       in {at}", shown(&h.to))?;
        }
    }
    for p in &why.not_in_closure {
        writeln!(out, "\n{} is not in the closure", shown(p))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(path: &str, size: u64, refs: &[&str]) -> Node {
        Node {
            path: path.into(),
            nar_size: size,
            references: refs.iter().map(|r| r.to_string()).collect(),
        }
    }

    #[test]
    fn every_chain_and_every_share() {
        let nodes = [
            node("/s/a-app", 100, &["/s/b-lib", "/s/c-nvcc"]),
            node("/s/b-lib", 200, &["/s/c-nvcc", "/s/d-glibc"]),
            node("/s/c-nvcc", 600, &[]),
            node("/s/d-glibc", 100, &[]),
        ];
        let why = answer(&["/s/a-app".into()], &nodes, &["c-nvcc".into()], &Audit::default(), None);
        assert_eq!(why.total_nar_size, 1000);
        assert_eq!(why.paths[0].path, "/s/c-nvcc");
        assert!((why.paths[0].share - 0.6).abs() < 1e-9);
        let chains: Vec<Vec<&str>> =
            why.chains.iter().map(|c| c.hops.iter().map(|h| h.to.as_str()).collect()).collect();
        assert_eq!(chains, vec![vec!["/s/b-lib", "/s/c-nvcc"], vec!["/s/c-nvcc"]]);
        let missing = answer(&["/s/a-app".into()], &nodes, &["zz".into()], &Audit::default(), None);
        assert_eq!(missing.not_in_closure, ["zz"]);
        assert!(missing.chains.is_empty());
    }
}
