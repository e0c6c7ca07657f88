//! `cuda-preflight`: will GPU code run here? Checks a build sandbox or a
//! host for what a CUDA program needs before it starts (docs/preflight.md):
//! the device nodes ([`devices`]), the driver folder and the versions of
//! the user-space driver and the kernel module ([`driver`]), `cuda_compat`,
//! and against a closure the audit's driver verdicts and the driver API
//! functions each file needs, symbol by symbol ([`closure`]), plus the
//! GPUs' compute capabilities ([`gpus`]).
//!
//! Everything is read from files: the driver is never loaded (the binary
//! is static; a static glibc program must not `dlopen` a dynamic
//! `libcuda`). `--probe` runs a program of the user's to confirm.
//!
//! Each check is one [`Check`] with a stable id, the reason and the fix;
//! the engine decides, the front end (`cli::preflight`) prints.

pub mod closure;
pub mod devices;
pub mod driver;
pub mod gpus;
pub mod symbols;

use std::path::PathBuf;

use serde::Serialize;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Fine.
    Ok,
    /// For information (not checked here, or not needed).
    Info,
    /// Worth a look; GPU code may still run.
    Warning,
    /// GPU code will not run (or this part of it will not).
    Error,
}

impl Status {
    /// The word the text report and the log lines use.
    pub fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Info => "info",
            Status::Warning => "warning",
            Status::Error => "error",
        }
    }
}

/// One check's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// The stable id (docs/preflight.md lists them all).
    pub id: &'static str,
    /// How it came out.
    pub status: Status,
    /// What it is about: a device node, a folder, a file, a function.
    pub subject: String,
    /// What was found, with the reason.
    pub message: String,
    /// What to do, for a check that did not pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    /// A check that passed.
    pub fn ok(id: &'static str, subject: impl Into<String>, message: impl Into<String>) -> Check {
        Check {
            id,
            status: Status::Ok,
            subject: subject.into(),
            message: message.into(),
            fix: None,
        }
    }

    /// A check that did not pass (or an informative line).
    pub fn not_ok(
        id: &'static str,
        status: Status,
        subject: impl Into<String>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        let fix = Some(fix.into()).filter(|f: &String| !f.is_empty());
        Check { id, status, subject: subject.into(), message: message.into(), fix }
    }
}

/// What to check.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the device nodes are (`/dev`).
    pub dev: PathBuf,
    /// The driver folder NixOS links (`/run/opengl-driver/lib`).
    pub driver_folder: PathBuf,
    /// The closure to check against: files and folders.
    pub paths: Vec<PathBuf>,
    /// The GPUs' compute capabilities when known from elsewhere
    /// (`--gpu-capability`); otherwise `nvidia-smi` is asked when present.
    pub capabilities: Vec<crate::cuda::capabilities::Capability>,
    /// `--probe CMD`: a program of the user's to run last.
    pub probe: Option<String>,
}

/// The pre-flight's result.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The user-space driver found (`libcuda.so.1`'s version), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// The kernel module's version, when readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_module: Option<String>,
    /// The GPUs' compute capabilities, when known.
    pub gpus: Vec<String>,
    /// Every check, in the order run.
    pub checks: Vec<Check>,
    /// No check failed: GPU code should run.
    pub ready: bool,
}

/// Runs every check.
pub fn run(settings: &Settings) -> Report {
    let mut checks = Vec::new();
    let nodes = devices::check(&settings.dev, &mut checks);
    let found = driver::check_folder(&settings.driver_folder, &mut checks);
    let kernel = driver::kernel_module();
    driver::check_versions(found.as_ref(), kernel.as_ref(), &mut checks);
    driver::check_search_path(found.as_ref(), kernel.as_ref(), &mut checks);
    let caps = gpus::capabilities(&settings.capabilities, nodes, &mut checks);
    if !settings.paths.is_empty() {
        closure::check(&settings.paths, found.as_ref(), kernel.as_ref(), &caps, &mut checks);
    }
    if let Some(cmd) = &settings.probe {
        checks.push(gpus::probe(cmd));
    }
    let ready = checks.iter().all(|c| c.status != Status::Error);
    Report {
        driver: found.as_ref().and_then(|f| f.version).map(|v| v.to_string()),
        kernel_module: kernel.map(|k| k.version.to_string()),
        gpus: caps.iter().map(ToString::to_string).collect(),
        checks,
        ready,
    }
}
