//! What the run should do: which driver entry a file gets (by its machine
//! or `--driver-link`), the other entries (`--cuda-compat`, stubs), and the
//! per-file decision of the new search path and of the rewrite that writes it.

use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use super::classify::Parsed;
use super::search::SearchFolders;
use super::{Action, FileError, FileReport};
use crate::elf::patch::{self, Rewrite};
use crate::elf::runpath::{self, Plan, StubStep, Tag};
use crate::elf::ElfError;

/// What the run should do.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which driver entry each file gets.
    pub driver: Driver,
    /// `--cuda-compat DIR`: this folder first, the driver entry second.
    pub compat_entry: Option<Vec<u8>>,
    /// `--remove-stubs`: the CUDA stubs entries replaced by the driver entry
    /// or dropped (removeStubsFromRunpath).
    pub remove_stubs: bool,
    /// `--append-origin`: `$ORIGIN` appended when absent (buildRedist's
    /// `appendRunpaths`), before the dlopen folders.
    pub append_origin: bool,
    /// Write DT_RPATH instead of DT_RUNPATH.
    pub force_rpath: bool,
    /// Report only, write nothing.
    pub check: bool,
    /// ELF files we cannot patch safely are warnings, not errors.
    pub skip_unsupported: bool,
    /// `fsync` each new file before the rename (in place: before and after
    /// the header switch).
    pub sync: bool,
    /// Patch writable files in place (append, verify, then one header
    /// write) instead of writing a temporary copy and renaming it.
    pub in_place: bool,
    /// `--dlopen-search`: the folders that may provide what a file
    /// `dlopen`s and cannot find; each one that does is appended to its
    /// search path ([`super::dlopen_folders`]).
    pub dlopen_search: Option<Arc<SearchFolders>>,
}

impl Config {
    /// Upstream's behaviour for `driver`: add it as DT_RUNPATH, keep stubs
    /// entries, replace files (no fsync), errors are errors.
    pub fn new(driver: Driver) -> Self {
        Config {
            driver,
            compat_entry: None,
            remove_stubs: false,
            append_origin: false,
            force_rpath: false,
            check: false,
            skip_unsupported: false,
            sync: false,
            in_place: false,
            dlopen_search: None,
        }
    }

    /// The planner's options for a file for this machine (`e_machine`),
    /// with `append` (its dlopen folders) to go after the old entries, and
    /// `made_from`, the search path of the original of a file our writer
    /// made (see [`runpath::Options::made_from`]).
    pub fn plan_options(
        &self,
        machine: u16,
        mut append: Vec<Vec<u8>>,
        made_from: Option<Vec<u8>>,
    ) -> (runpath::Options, DriverRule) {
        let (entry, rule) = self.driver.entry_for(machine);
        if self.append_origin {
            append.insert(0, runpath::ORIGIN.to_vec());
        }
        let opts = runpath::Options {
            driver_entry: entry,
            compat_entry: self.compat_entry.clone(),
            remove_stubs: self.remove_stubs,
            force_rpath: self.force_rpath,
            append_entries: append,
            made_from,
        };
        (opts, rule)
    }
}

/// Where the driver entry comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Driver {
    /// Nixpkgs' addDriverRunpath (`driverLink = "/run/opengl-driver" +
    /// optionalString hostPlatform.isi686 "-32"`) and NixOS's
    /// `hardware.graphics`, which links a 64-bit system's driver at
    /// `/run/opengl-driver` and the i686 driver for 32-bit programs
    /// (`enable32Bit`) at `/run/opengl-driver-32`: each file gets the entry
    /// of its own machine, whatever machine this program runs on (a cross
    /// build's outputs are for another one). Other 32-bit machines (armv7l)
    /// have their own driver at `/run/opengl-driver`.
    Nixos,
    /// `--driver-link DIR`: `DIR/lib` for every file.
    Entry(Vec<u8>),
}

/// Which rule gave a file its driver entry (`driver_rule` in JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum DriverRule {
    /// `/run/opengl-driver/lib`.
    #[serde(rename = "nixos")]
    Nixos,
    /// An i686 file: `/run/opengl-driver-32/lib`.
    #[serde(rename = "nixos-i686")]
    NixosI686,
    /// `--driver-link`.
    #[serde(rename = "driver-link")]
    DriverLink,
}

/// NixOS's driver link.
pub const NIXOS_DRIVER_LINK: &str = "/run/opengl-driver";
/// NixOS's driver link for i686 programs.
pub const NIXOS_DRIVER_LINK_32: &str = "/run/opengl-driver-32";
/// `e_machine` of i386/i686.
const EM_386: u16 = 3;

impl Driver {
    /// `--driver-link DIR` when given, else NixOS's convention.
    pub fn from_link(link: Option<&Path>) -> Driver {
        match link {
            Some(l) => Driver::Entry(driver_entry(l)),
            None => Driver::Nixos,
        }
    }

    /// The entry for a file for this machine, and the rule that gave it.
    pub fn entry_for(&self, machine: u16) -> (Vec<u8>, DriverRule) {
        match self {
            Driver::Entry(e) => (e.clone(), DriverRule::DriverLink),
            Driver::Nixos if machine == EM_386 => {
                (driver_entry(Path::new(NIXOS_DRIVER_LINK_32)), DriverRule::NixosI686)
            }
            Driver::Nixos => (driver_entry(Path::new(NIXOS_DRIVER_LINK)), DriverRule::Nixos),
        }
    }
}

/// The driver entry for a driver link folder: `<link>/lib`.
pub fn driver_entry(link: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut v = link.as_os_str().as_bytes().to_vec();
    while v.len() > 1 && v.last() == Some(&b'/') {
        v.pop();
    }
    v.extend_from_slice(b"/lib");
    v
}

/// A folder given on the command line as a search-path entry (`--cuda-compat`):
/// as given, without trailing slashes.
pub fn folder_entry(dir: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut v = dir.as_os_str().as_bytes().to_vec();
    while v.len() > 1 && v.last() == Some(&b'/') {
        v.pop();
    }
    v
}

/// Whether a driver link folder can become a RUNPATH entry: absolute (a
/// relative entry is read against the working directory of whoever runs the
/// program), no `:` (the loader splits RUNPATH there), not empty.
pub fn check_driver_link(link: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = link.as_os_str().as_bytes();
    if bytes.is_empty() {
        Err("the driver link is empty; expected an absolute folder such as /run/opengl-driver"
            .into())
    } else if bytes[0] != b'/' {
        Err(format!(
            "{}: the driver link must be an absolute path (a relative RUNPATH entry is read against the working directory at run time)",
            link.display()
        ))
    } else if bytes.contains(&b':') {
        Err(format!(
            "{}: the driver link must not contain ':' (the loader splits RUNPATH at ':')",
            link.display()
        ))
    } else {
        Ok(())
    }
}

/// A file's change: the new search path, its tag, and how to write it.
pub(super) struct Change {
    /// The search path to write.
    pub(super) value: Vec<u8>,
    /// Its tag.
    pub(super) tag: Tag,
    /// The planned rewrite.
    pub(super) rw: Rewrite,
}

/// One verdict of the stubs pass, as the report shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StubEntry {
    /// The entry.
    pub entry: String,
    /// `keep`, `replace` (by the driver entry) or `drop`.
    pub action: &'static str,
}

impl From<&StubStep> for StubEntry {
    fn from(step: &StubStep) -> StubEntry {
        let (e, action) = match step {
            StubStep::Keep(e) => (e, "keep"),
            StubStep::Replace(e) => (e, "replace"),
            StubStep::Drop(e) => (e, "drop"),
        };
        StubEntry { entry: lossy(e), action }
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Decides what `file` needs and says it in `report` (old and new search
/// path, driver rule and entry, strategy): `None` when it has the entry
/// already (the report says `unchanged`). `original`: what the file was
/// made from, when our writer made it (`rebuild`): the plan is then the one
/// a single run over the original makes, whatever runs came before: the
/// dlopen folders are decided by the original's search path (as one run
/// decides them before it appends `$ORIGIN`), and `$ORIGIN` goes before
/// the folders earlier runs appended.
pub(super) fn plan_file(
    file: &Parsed<'_>,
    original: Option<&Parsed<'_>>,
    cfg: &Config,
    report: &mut FileReport,
    release: &(dyn Fn(&[u8]) + Sync),
) -> Result<Option<Change>, FileError> {
    let current = patch::current_path(&file.elf, &file.dynamic).map_err(|e| file.foreign(e))?;
    report.old = current.map(|(v, _)| lossy(v));
    report.old_tag = current.map(|(_, t)| t);
    let made_from = match original {
        Some(o) => {
            let path = patch::current_path(&o.elf, &o.dynamic).map_err(|e| o.foreign(e))?;
            Some(path.map(|(v, _)| v.to_vec()).unwrap_or_default())
        }
        None => None,
    };
    let append = match &cfg.dlopen_search {
        Some(search) => {
            let base = original.unwrap_or(file);
            super::dlopen_folders::folders_for(file, base, search, report, release)?
        }
        None => Vec::new(),
    };
    let (opts, rule) = cfg.plan_options(file.elf.machine, append, made_from);
    report.driver_rule = Some(rule);
    report.driver_entry = Some(lossy(&opts.driver_entry));
    let planned = runpath::plan_steps(current, &opts);
    if cfg.remove_stubs {
        report.stubs = planned.stub_steps.iter().map(StubEntry::from).collect();
        // A stubs folder the patterns miss survives, as upstream's: said.
        let kept = match &planned.plan {
            Plan::Set { value, .. } => value.as_slice(),
            _ => current.map_or(&b""[..], |(v, _)| v),
        };
        report.stubs_kept = kept
            .split(|&b| b == b':')
            .filter(|e| runpath::is_other_stubs_folder(e))
            .map(lossy)
            .collect();
    }
    let (value, tag) = match planned.plan {
        Plan::Unchanged => {
            report.action = Action::Unchanged;
            return Ok(None);
        }
        Plan::TooLong(n) => {
            return Err(ElfError::Unsupported(format!(
                "the new RUNPATH would be {n} bytes, over the limit of {} bytes",
                runpath::MAX_RUNPATH
            ))
            .into())
        }
        Plan::Set { value, tag } => (value, tag),
    };
    report.new = Some(lossy(&value));
    report.tag = Some(tag);
    let rw = patch::rewrite(&file.elf, &file.dynamic, &value, tag).map_err(|e| file.foreign(e))?;
    report.strategy = Some(rw.strategy);
    Ok(Some(Change { value, tag, rw }))
}
