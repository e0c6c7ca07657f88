//! `--dlopen-search`: which of the search folders a file needs on its
//! RUNPATH for the libraries it loads with `dlopen`.
//!
//! The libraries come from the one detection of [`crate::dlopen::scan`]
//! (`.note.dlopen` notes, soname strings in read-only data, the reviewed
//! facts table), and each is resolved as glibc's `dlopen` would resolve it
//! from this file ([`crate::dlopen::resolve`]: already loaded through the
//! NEEDED closure, the GPU driver or glibc, then the file's own RUNPATH, or
//! RPATH without one, `$ORIGIN` its real folder). The host's default
//! folders never count: the fix is for files that go into the Nix store,
//! where they are not searched, and a file patched outside it must not
//! depend on what this machine happens to have in `/usr/lib`.
//!
//! A name that does not resolve is looked up in the search folders, its
//! asked names in the loader's order (cuDNN asks `libcudnn_graph.so.9.19.0`,
//! `.9.19`, then `.9`): the first folder holding one, for the file's
//! machine, class and byte order, is the folder the file needs. A
//! printf-style name the detection could not expand (`libplug%d.so`, built
//! at run time) is matched against the folders' file names: the first
//! folder holding a matching library that does not already resolve is
//! needed too, when the pattern names something before its first
//! conversion (`lib%s.so` would match every library and picks nothing).
//! Folders are appended in the order `--dlopen-search` gave them, each
//! once, whatever order the names came in.

use std::path::Path;

use serde::Serialize;

use super::classify::Parsed;
use super::search::{self, SearchFolders};
use super::{FileError, FileReport};
use crate::dlopen::{self, Caller, DirectProbe, Resolved};
use crate::elf::dynamic::{self, DynamicFacts};
use crate::elf::machine::Target;

/// What `--dlopen-search` did for one file that loads libraries by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DlopenReport {
    /// The folders the file needs, in search order, each with the names
    /// it provides: appended to the search path (or to be, with
    /// `--check`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<AddedFolder>,
    /// Names the file may load that neither its own search path nor any
    /// search folder provides (optional plugins, libraries of packages not
    /// among the inputs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_found: Vec<String>,
    /// How many names already resolve without a search folder.
    pub resolved: usize,
}

/// One folder appended, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AddedFolder {
    /// The folder, as given to `--dlopen-search`.
    pub folder: String,
    /// The names it provides.
    pub serves: Vec<Served>,
}

/// A name a folder provides.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Served {
    /// The soname the file loads (for a name built at run time, its
    /// printf pattern: `libplug%d.so`).
    pub soname: String,
    /// The files of the folder that answer it (`libplug.so.1`; every match
    /// of a pattern).
    pub files: Vec<String>,
    /// Where the name was found in the file (`.rodata+0x2004`,
    /// `.note.dlopen at 0x3c0`, the facts table).
    pub found_in: String,
}

impl DlopenReport {
    /// The names of every folder's served names, for a log line: `libplug.so.1`,
    /// `libplug1.so (libplug%d.so)`.
    pub fn names(folder: &AddedFolder) -> String {
        let each = folder.serves.iter().map(|s| {
            if s.files.len() == 1 && s.files[0] == s.soname {
                s.soname.clone()
            } else {
                format!("{} ({})", s.files.join(", "), s.soname)
            }
        });
        each.collect::<Vec<_>>().join(", ")
    }
}

/// The search folders `file` needs (RUNPATH entries, in search order); says
/// what and why in `report.dlopen` when the file loads libraries by name.
/// The names are resolved through `base`'s search path (`file`'s original
/// when our writer made it, see `plan::plan_file`). `release` drops the pages the scan has read from the resident set.
pub(super) fn folders_for(
    file: &Parsed<'_>,
    base: &Parsed<'_>,
    search: &SearchFolders,
    report: &mut FileReport,
    release: &(dyn Fn(&[u8]) + Sync),
) -> Result<Vec<Vec<u8>>, FileError> {
    // The loader facts (search path) of `base`, the file as one run would
    // see it: the original of a file our writer made, else the file itself.
    let facts = dynamic::facts(&base.elf).map_err(|e| base.foreign(e))?;
    let own_name = report.path.file_name().and_then(|n| n.to_str());
    let version = own_name.and_then(dlopen::version_of_file_name);
    let scan = dlopen::scan(&file.elf, facts.soname.as_deref(), version, release);
    if scan.imports.is_none() {
        return Ok(Vec::new());
    }
    // `$ORIGIN` is the folder of the file the loader opened, links resolved.
    let real = std::fs::canonicalize(&report.path).unwrap_or_else(|_| report.path.clone());
    let machine = Target::of(&file.elf);
    let lookup = Lookup::new(&real, &facts);
    let mut needs: Vec<(usize, Served)> = Vec::new();
    let mut out = DlopenReport::default();
    for t in &scan.targets {
        if lookup.resolves(t) {
            out.resolved += 1;
            continue;
        }
        match t.asked.iter().find_map(|n| search.find(n, machine).map(|i| (i, n))) {
            Some((i, name)) => needs.push((
                i,
                Served {
                    soname: t.soname.clone(),
                    files: vec![name.clone()],
                    found_in: t.origin.describe(),
                },
            )),
            None => out.not_found.push(t.soname.clone()),
        }
    }
    for (pattern, origin) in scan.patterns.iter().filter(|(p, _)| specific(p)) {
        let matched = (0..search.len()).find_map(|i| {
            let files: Vec<String> = search
                .matching(i, machine, |n| search::printf_matches(pattern.as_bytes(), n))
                .into_iter()
                .filter(|n| !needs.iter().any(|(_, s)| s.files.contains(n)))
                .filter(|n| !lookup.resolves_name(n))
                .collect();
            (!files.is_empty()).then_some((i, files))
        });
        if let Some((i, files)) = matched {
            let found_in = origin.describe();
            needs.push((i, Served { soname: pattern.clone(), files, found_in }));
        }
    }
    needs.sort_by_key(|(i, _)| *i);
    let mut entries = Vec::new();
    for (i, served) in needs {
        match out.added.last_mut() {
            Some(last) if entries.last() == Some(&search.entry(i)) => last.serves.push(served),
            _ => {
                entries.push(search.entry(i));
                let folder = String::from_utf8_lossy(&search.entry(i)).into_owned();
                out.added.push(AddedFolder { folder, serves: vec![served] });
            }
        }
    }
    report.dlopen = Some(out);
    Ok(entries)
}

/// Whether a printf pattern says enough to pick a folder by: text after
/// `lib` before its first conversion (`libplug%d.so`, `libnvrtc.so.%d`,
/// `libgomp-plugin-%s.so.1`). `lib%s.so` or `lib%s%s.so.%d` match about
/// every library, so they pick nothing.
fn specific(pattern: &str) -> bool {
    let head = pattern.split('%').next().unwrap_or("");
    head.strip_prefix("lib").is_some_and(|rest| !rest.is_empty())
}

/// The file as a `dlopen` caller, with its NEEDED closure computed once.
struct Lookup<'a> {
    path: &'a Path,
    facts: &'a DynamicFacts,
    loaded: Vec<String>,
}

impl<'a> Lookup<'a> {
    fn new(path: &'a Path, facts: &'a DynamicFacts) -> Lookup<'a> {
        let caller = Caller { path, facts, default_dirs: &[], loaded: &[] };
        let loaded = dlopen::needed_closure(&caller, &DirectProbe);
        Lookup { path, facts, loaded }
    }

    /// Whether the loader finds `target` from this file as it is now.
    fn resolves(&self, target: &dlopen::Target) -> bool {
        let caller =
            Caller { path: self.path, facts: self.facts, default_dirs: &[], loaded: &self.loaded };
        matches!(dlopen::resolve(target, &caller, &DirectProbe), Resolved::Found { .. })
    }

    /// [`Lookup::resolves`] for a plain file name.
    fn resolves_name(&self, name: &str) -> bool {
        let target = dlopen::Target {
            soname: name.to_string(),
            asked: vec![name.to_string()],
            origin: dlopen::Origin::Table { source: "" },
            need: dlopen::Need::Optional,
            same_release: false,
        };
        self.resolves(&target)
    }
}
