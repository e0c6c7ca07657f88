//! Against a closure: will *these* files run on the driver found here?
//! - the audit's driver verdicts (the runtime each file needs, the PTX
//!   ISA where PTX is the only code, and with the GPUs' capabilities known,
//!   whether each file has code for them), run by [`crate::audit`] with the
//!   detected driver as `--driver-version` and the GPUs as
//!   `--cuda-capabilities`;
//! - symbol by symbol: every driver API function a file imports from
//!   `libcuda.so.1` must be in the detected library's `.dynsym`, else
//!   `driver-lacks-symbol` (the loader stops with `undefined symbol:
//!   cuMemCreate`, or the call does at its first use). Functions a file
//!   asks for by name (`cuGetProcAddress` tables) are reported as a
//!   warning: a runtime asks for every function it knows and copes when
//!   one is missing, until the program calls it.
//!
//! A file whose RUNPATH reaches a `libcuda.so.1` of its own (cuda_compat)
//! is checked against that one, and the compat driver against the kernel.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::driver::{self, KernelModule, Libcuda};
use super::symbols::{self, Wants};
use super::{Check, Status};
use crate::audit::finding::{CheckId, Severity};
use crate::audit::linkage::{expand_origin, Resolver};
use crate::audit::{Policy, Reading};
use crate::cuda::capabilities::{Capability, Request};
use crate::cuda::driver::Driver;
use crate::devicecode::Scan;

/// The audit's checks that decide whether a file runs on the driver and GPUs.
const VERDICTS: &[CheckId] = &[
    CheckId::DriverTooOldForRuntime,
    CheckId::PtxTooNewForDriver,
    CheckId::DriverVerdictUnknown,
    CheckId::NoCodeForCapability,
];

/// Checks the closure `paths` against the driver `lib` and the GPUs `caps`,
/// reading the files with the audit's lighter reading
/// ([`Reading::DriverVerdicts`]: what the verdicts and the symbols need).
pub fn check(
    paths: &[PathBuf],
    lib: Option<&Libcuda>,
    kernel: Option<&KernelModule>,
    caps: &[Capability],
    out: &mut Vec<Check>,
) {
    check_with(paths, lib, kernel, caps, Reading::DriverVerdicts, out);
}

/// [`check`] with the files read as `reading` says: the full audit
/// ([`Reading::Full`]) gives the same checks, only slower (the tests hold
/// the lighter reading to it).
pub fn check_with(
    paths: &[PathBuf],
    lib: Option<&Libcuda>,
    kernel: Option<&KernelModule>,
    caps: &[Capability],
    reading: Reading,
    out: &mut Vec<Check>,
) {
    let Some(lib) = lib else {
        out.push(Check::not_ok(
            "closure-not-checked",
            Status::Info,
            "closure",
            "no libcuda.so.1 found: the closure is not checked against a driver",
            "",
        ));
        return;
    };
    let audit = crate::audit::audit_paths(paths, &policy(lib, caps, reading));
    for f in &audit.failures {
        out.push(Check::not_ok(
            "closure-unreadable",
            Status::Error,
            f.path.display().to_string(),
            f.to_string(),
            "check the path",
        ));
    }
    let mut verdicts = 0;
    for f in audit.findings.iter().filter(|f| VERDICTS.contains(&f.check)) {
        verdicts += 1;
        let status = match f.severity {
            Severity::Error => Status::Error,
            Severity::Warning => Status::Warning,
            Severity::Info => Status::Info,
        };
        out.push(Check::not_ok(
            f.check.id(),
            status,
            f.path.display().to_string(),
            f.message.clone(),
            f.check.fix(),
        ));
    }
    let mut drivers: BTreeMap<PathBuf, Option<BTreeSet<String>>> = BTreeMap::new();
    let mut compat_seen = BTreeSet::new();
    let mut lacking = 0;
    // The files that use the driver, and what each wants of it (read in
    // parallel; compared in order below).
    let users: Vec<(&crate::audit::FileFacts, bool, bool)> = audit
        .files
        .iter()
        .filter_map(|file| {
            let host = file.dynamic.as_ref()?;
            let needs = host.loader.needed.iter().any(|n| n == "libcuda.so.1" || n == "libcuda.so");
            let loads = host.driver_dlopen.iter().any(|n| n.starts_with("libcuda.so"))
                || host.static_cudart;
            (needs || loads).then_some((file, needs, loads))
        })
        .collect();
    let wanted: Vec<_> = {
        use rayon::prelude::*;
        users
            .par_iter()
            .map(|(file, needs, loads)| symbols::wants(&file.path, *needs, *loads))
            .collect()
    };
    for ((file, _, _), wants) in users.iter().zip(wanted) {
        let Some(host) = &file.dynamic else { continue };
        let own = compat_libcuda(&file.path, host.loader.search_path(), &lib.resolved);
        let against = match &own {
            Some(c) => {
                if compat_seen.insert(c.resolved.clone()) {
                    driver::check_compat(c, kernel, out);
                }
                c
            }
            None => lib,
        };
        let exported = drivers
            .entry(against.resolved.clone())
            .or_insert_with(|| symbols::exported(&against.resolved).ok());
        let Some(exported) = exported else {
            out.push(Check::not_ok(
                "driver-symbols-unreadable",
                Status::Warning,
                against.resolved.display().to_string(),
                "the driver's dynamic symbols could not be read: symbols not checked",
                "",
            ));
            continue;
        };
        match wants {
            Ok(w) => lacking += compare(&file.path, &w, exported, against, out),
            Err(e) => out.push(Check::not_ok(
                "closure-unreadable",
                Status::Error,
                file.path.display().to_string(),
                e.to_string(),
                "check the file",
            )),
        }
    }
    if verdicts == 0 && lacking == 0 {
        let v = lib.version.map_or("unknown".into(), |v| v.to_string());
        out.push(Check::ok("closure", "closure", format!("{} files audited against driver {v}: runtime, PTX and driver API functions all served", audit.files.len())));
    }
}

/// The audit's policy: the driver found, the GPUs' capabilities, nothing else.
fn policy(lib: &Libcuda, caps: &[Capability], reading: Reading) -> Policy {
    let driver = lib.version.and_then(|v| Driver::from_version(&v.to_string()).ok());
    let requested =
        (!caps.is_empty()).then(|| Request { capabilities: caps.to_vec(), ptx: Vec::new() });
    Policy {
        requested,
        forward_compat: false,
        driver_lib: "/run/opengl-driver/lib".into(),
        build_dirs: Vec::new(),
        store_dir: std::env::var_os("NIX_STORE")
            .map_or_else(|| PathBuf::from("/nix/store"), PathBuf::from),
        system_lib_dirs: false,
        sysroot: None,
        scan: Scan::Found,
        driver,
        own_outputs: Vec::new(),
        in_build: false,
        dlopen: true,
        dlopen_facts: false,
        resolver: Arc::new(Resolver::default()),
        references: None,
        reading,
    }
}

/// A `libcuda.so.1` the file reaches through its own RUNPATH before the
/// driver folder: cuda_compat's.
fn compat_libcuda(file: &Path, search: Option<&str>, driver: &Path) -> Option<Libcuda> {
    let origin = file.parent()?;
    search?
        .split(':')
        .filter(|e| !e.is_empty())
        .map(|e| expand_origin(e, origin))
        .filter_map(|dir| driver::libcuda_in(&dir))
        .find(|l| l.resolved != driver)
}

/// One file's wants against the driver's exports; returns how many lacked.
fn compare(
    file: &Path,
    wants: &Wants,
    exported: &BTreeSet<String>,
    lib: &Libcuda,
    out: &mut Vec<Check>,
) -> usize {
    let shown = file.display().to_string();
    let drv =
        lib.version.map_or_else(|| lib.resolved.display().to_string(), |v| format!("driver {v}"));
    let mut lacking = 0;
    for imp in wants.imports.iter().filter(|i| !exported.contains(&i.name)) {
        lacking += 1;
        let name = match &imp.version {
            Some(v) => format!("{}@{v}", imp.name),
            None => imp.name.clone(),
        };
        let (status, effect) = if imp.weak {
            (Status::Warning, "a weak import: the loader leaves it null and a call crashes")
        } else {
            (Status::Error, "the program stops with `undefined symbol` when it is bound")
        };
        out.push(Check::not_ok(
            "driver-lacks-symbol",
            status,
            &name,
            format!("{shown} imports {name} from libcuda.so.1, which {drv} ({}) does not export: {effect}", lib.resolved.display()),
            "use a newer driver (the function is newer than this one), or build the program against the CUDA version this driver supports",
        ));
    }
    let asked: Vec<&String> = wants.by_name.iter().filter(|n| !exported.contains(*n)).collect();
    if !asked.is_empty() {
        let shown_names: Vec<&str> = asked.iter().take(8).map(|s| s.as_str()).collect();
        out.push(Check::not_ok(
            "driver-lacks-symbol-by-name",
            Status::Warning,
            &shown,
            format!(
                "{shown} asks for {} driver functions by name that {drv} lacks ({}{}): calls to them fail (CUDA_ERROR_NOT_FOUND) if the program makes them",
                asked.len(),
                shown_names.join(", "),
                if asked.len() > 8 { ", ..." } else { "" }
            ),
            "nothing if the program does not use them; otherwise a newer driver",
        ));
    }
    lacking
}
