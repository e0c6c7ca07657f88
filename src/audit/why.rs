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
    /// The (root, target) pairs whose chains are not all listed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cut: Vec<Incomplete>,
}

/// A listing of chains that stopped early.
#[derive(Debug, Clone, Serialize)]
pub struct Incomplete {
    /// The root the chains start at.
    pub root: String,
    /// The path asked about.
    pub target: String,
    /// Why the listing stopped.
    pub reason: Cut,
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
    let mut cut = Vec::new();
    let indexed = Graph::new(nodes);
    let mut steps = MAX_STEPS;
    for target in &targets {
        let why = build_only(target);
        for root in roots {
            let (walks, stopped) = indexed.all_paths(root, target, &mut steps);
            for walk in walks {
                let hops = walk
                    .windows(2)
                    .map(|w| hop(audit, indexed.names[w[0]], indexed.names[w[1]]))
                    .collect();
                chains.push(Chain { target: target.clone(), build_only: why.clone(), hops });
            }
            if let Some(reason) = stopped {
                cut.push(Incomplete { root: root.clone(), target: target.clone(), reason });
            }
        }
    }
    Why { roots: roots.to_vec(), total_nar_size: total, paths, chains, not_in_closure, cut }
}

/// Whether store path `path` is the one `asked` names.
fn matches(path: &str, asked: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    let name = strip_store_hash(base);
    path == asked.trim_end_matches('/') || base == asked || name == asked
}

/// The most references one `--why` answer may look at, over all its chains
/// (an indexed step: a few nanoseconds; the limit is well under a second).
/// A closure with cycles, which only a hostile cache serves (Nix refuses a
/// reference cycle between store paths), makes the search re-check which
/// paths still lead to the target at each step: polynomial, but on a
/// thousands-path closure with thousands of chains it could still take long.
/// Reaching this bound ends the listing with a note, as [`MAX_CHAINS`] does.
pub const MAX_STEPS: u64 = 50_000_000;

/// The chains from one root to one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    /// Each chain, root first, target last, in the order of the sorted
    /// references (depth first), at most [`MAX_CHAINS`].
    pub chains: Vec<Vec<String>>,
    /// References looked at (bounded by the budget given).
    pub steps: u64,
    /// Why the listing stopped before every chain was found, if it did.
    pub cut: Option<Cut>,
}

/// Why a listing of chains is not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cut {
    /// [`MAX_CHAINS`] chains were listed.
    MaxChains,
    /// The search took [`MAX_STEPS`] steps.
    MaxSteps,
}

impl Cut {
    fn describe(self) -> String {
        match self {
            Cut::MaxChains => format!("only the first {MAX_CHAINS} chains are listed"),
            Cut::MaxSteps => format!(
                "the search stopped after {MAX_STEPS} steps (a closure with reference cycles); \
                 the chains found are listed"
            ),
        }
    }
}

/// Every chain from `from` to `to` in the closure `nodes`, as
/// [`answer`] lists them, with at most `budget` steps.
pub fn search(nodes: &[Node], from: &str, to: &str, budget: u64) -> Search {
    let graph = Graph::new(nodes);
    let mut steps = budget;
    let (walks, cut) = graph.all_paths(from, to, &mut steps);
    let chains = walks.iter().map(|w| w.iter().map(|&i| graph.names[i].to_string()).collect());
    Search { chains: chains.collect(), steps: budget - steps, cut }
}

/// The closure as numbered paths: references sorted by name (the order
/// chains are listed in), those outside the closure and repeats dropped.
struct Graph<'g> {
    names: Vec<&'g str>,
    index: BTreeMap<&'g str, usize>,
    refs: Vec<Vec<usize>>,
    back: Vec<Vec<usize>>,
}

impl<'g> Graph<'g> {
    fn new(nodes: &'g [Node]) -> Graph<'g> {
        let index: BTreeMap<&str, usize> =
            nodes.iter().enumerate().map(|(i, n)| (n.path.as_str(), i)).collect();
        let names = nodes.iter().map(|n| n.path.as_str()).collect();
        let mut refs: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        let mut back: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            let mut next: Vec<&str> = n.references.iter().map(String::as_str).collect();
            next.sort_unstable();
            next.dedup();
            refs[i] = next.iter().filter_map(|r| index.get(r).copied()).collect();
            for &r in &refs[i] {
                back[r].push(i);
            }
        }
        Graph { names, index, refs, back }
    }

    /// Every chain from `from` to `to`, at most [`MAX_CHAINS`], each step
    /// taken from `steps`.
    ///
    /// Only a path from which `to` can still be reached without passing
    /// through the chain so far is entered, so every path entered ends in
    /// at least one chain and the work is bounded by the chains listed
    /// (times their length and the closure's size), not by the number of
    /// dead ends (factorial on a clique of paths referring to each other
    /// and back to the root). In a closure without cycles, what Nix makes,
    /// the paths that reach `to` are found once; with cycles, again at
    /// each step, without the chain's paths.
    fn all_paths(&self, from: &str, to: &str, steps: &mut u64) -> (Vec<Vec<usize>>, Option<Cut>) {
        let mut walk =
            Walk { graph: self, out: Vec::new(), on_stack: vec![false; self.names.len()], steps };
        let (Some(&from), Some(&to)) = (self.index.get(from), self.index.get(to)) else {
            return (Vec::new(), None);
        };
        let Ok(reaches) = walk.reaching(to) else { return (Vec::new(), Some(Cut::MaxSteps)) };
        if !reaches[from] {
            return (Vec::new(), None);
        }
        let cyclic = walk.cyclic(&reaches);
        let mut stack = vec![from];
        walk.on_stack[from] = true;
        let cut = walk.extend(to, &reaches, cyclic, &mut stack).err();
        let cut = cut.or((walk.out.len() >= MAX_CHAINS).then_some(Cut::MaxChains));
        (walk.out, cut)
    }
}

/// One depth-first listing of chains.
struct Walk<'a, 'g> {
    graph: &'a Graph<'g>,
    out: Vec<Vec<usize>>,
    on_stack: Vec<bool>,
    steps: &'a mut u64,
}

impl Walk<'_, '_> {
    /// Takes `n` steps from the budget, or says it is spent.
    fn step(&mut self, n: u64) -> Result<(), Cut> {
        *self.steps = self.steps.checked_sub(n).ok_or(Cut::MaxSteps)?;
        Ok(())
    }

    fn extend(
        &mut self,
        to: usize,
        reaches: &[bool],
        cyclic: bool,
        stack: &mut Vec<usize>,
    ) -> Result<(), Cut> {
        let Some(&last) = stack.last() else { return Ok(()) };
        if last == to {
            self.out.push(stack.clone());
            return Ok(());
        }
        // With cycles, a path that reaches `to` only through the chain so
        // far leads nowhere: what reaches `to` is found again without it.
        let fresh;
        let live = if cyclic {
            fresh = self.reaching(to)?;
            &fresh
        } else {
            reaches
        };
        let graph = self.graph;
        for &r in &graph.refs[last] {
            if self.out.len() >= MAX_CHAINS {
                return Ok(());
            }
            self.step(1)?;
            if live[r] && !self.on_stack[r] {
                stack.push(r);
                self.on_stack[r] = true;
                let done = self.extend(to, reaches, cyclic, stack);
                self.on_stack[r] = false;
                stack.pop();
                done?;
            }
        }
        Ok(())
    }

    /// The paths from which `to` can be reached (itself included) without
    /// passing through a path of the chain being built.
    fn reaching(&mut self, to: usize) -> Result<Vec<bool>, Cut> {
        let mut seen = vec![false; self.graph.names.len()];
        let mut todo = vec![to];
        seen[to] = true;
        while let Some(p) = todo.pop() {
            self.step(1 + self.graph.back[p].len() as u64)?;
            for &q in &self.graph.back[p] {
                if !seen[q] && !self.on_stack[q] {
                    seen[q] = true;
                    todo.push(q);
                }
            }
        }
        Ok(seen)
    }

    /// Whether the paths that reach the target hold a cycle (Kahn's
    /// algorithm on them).
    fn cyclic(&self, reaches: &[bool]) -> bool {
        let graph = self.graph;
        let n = graph.names.len();
        let mut pending = vec![0usize; n];
        for p in (0..n).filter(|&p| reaches[p]) {
            pending[p] = graph.refs[p].iter().filter(|&&r| reaches[r]).count();
        }
        let mut todo: Vec<usize> = (0..n).filter(|&p| reaches[p] && pending[p] == 0).collect();
        let mut done = 0;
        while let Some(p) = todo.pop() {
            done += 1;
            for &q in graph.back[p].iter().filter(|&&q| reaches[q]) {
                pending[q] -= 1;
                if pending[q] == 0 {
                    todo.push(q);
                }
            }
        }
        done < reaches.iter().filter(|&&r| r).count()
    }
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
    for c in &why.cut {
        writeln!(out, "\nchains from {} to {}: {}", c.root, c.target, c.reason.describe())?;
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
