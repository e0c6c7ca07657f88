//! The device nodes a CUDA program opens: `/dev/nvidiactl`, one
//! `/dev/nvidiaN` per GPU and `/dev/nvidia-uvm` (all three needed: without
//! any of them `cuInit` fails, 100 or 999), and `/dev/nvidia-uvm-tools`
//! (profilers only). Each must be a character device of the driver's major
//! (`/proc/devices`: `nvidia-frontend`/`nvidia` is 195, `nvidia-uvm` is
//! given out at load time) and openable read-write by this user.
//!
//! A missing node is fatal only where the process cannot create it: as
//! root with `CAP_MKNOD` and a writable `/dev`, `libcuda` makes
//! `nvidiactl`, `nvidia0` and `nvidia-uvm` itself (measured on an H200);
//! a build user in a sandbox cannot.

use std::ffi::CString;
use std::fs::OpenOptions;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::{Check, Status};

/// The majors `/proc/devices` lists for the driver's character devices.
#[derive(Debug, Clone, Copy, Default)]
pub struct Majors {
    /// `nvidia-frontend` or `nvidia`: nvidiactl and the GPUs.
    pub nvidia: Option<u32>,
    /// `nvidia-uvm`.
    pub uvm: Option<u32>,
}

/// Parses `/proc/devices`' character section.
pub fn majors(text: &str) -> Majors {
    let mut m = Majors::default();
    for line in text.lines() {
        if line.starts_with("Block") {
            break;
        }
        let mut parts = line.split_whitespace();
        let (Some(num), Some(name)) = (parts.next(), parts.next()) else { continue };
        let Ok(num) = num.parse() else { continue };
        match name {
            "nvidia-frontend" | "nvidia" => m.nvidia = m.nvidia.or(Some(num)),
            "nvidia-uvm" => m.uvm = Some(num),
            _ => {}
        }
    }
    m
}

/// The GPUs' nodes found (`nvidia0`...): their count.
pub type GpuNodes = usize;

/// Checks the nodes under `dev`; returns how many GPU nodes are usable.
pub fn check(dev: &Path, out: &mut Vec<Check>) -> GpuNodes {
    let majors = std::fs::read_to_string("/proc/devices").map(|t| majors(&t)).unwrap_or_default();
    // Creating a node helps only where a kernel module answers on it.
    let create = majors.nvidia.is_some() && can_create(dev);
    let nvidia = majors.nvidia.or(Some(195));
    let mut usable = 0;
    let mut gpus: Vec<String> = std::fs::read_dir(dev)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.strip_prefix("nvidia")
                        .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
                })
                .collect()
        })
        .unwrap_or_default();
    gpus.sort();
    node(dev, "nvidiactl", nvidia, Need::Required, create, out);
    if gpus.is_empty() {
        missing(dev, "nvidia0", Need::Required, create, out);
    }
    for g in &gpus {
        usable += usize::from(node(dev, g, nvidia, Need::Required, create, out));
    }
    node(dev, "nvidia-uvm", majors.uvm, Need::Required, create, out);
    node(dev, "nvidia-uvm-tools", majors.uvm, Need::Optional, false, out);
    usable
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    Required,
    Optional,
}

/// One node; true when it is usable.
fn node(
    dev: &Path,
    name: &str,
    major: Option<u32>,
    need: Need,
    create: bool,
    out: &mut Vec<Check>,
) -> bool {
    let path = dev.join(name);
    let shown = path.display().to_string();
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(_) => {
            missing(dev, name, need, create, out);
            return false;
        }
    };
    if !meta.file_type().is_char_device() {
        out.push(Check::not_ok(
            "device-node-not-character",
            Status::Error,
            &shown,
            format!("{shown} is not a character device (the driver's nodes are `crw-rw-rw-`)"),
            "bind the host's node into the sandbox instead (programs.nix-required-mounts does)",
        ));
        return false;
    }
    let (maj, min) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
    if let Some(want) = major.filter(|w| *w != maj) {
        out.push(Check::not_ok(
            "device-node-wrong-major",
            Status::Error,
            &shown,
            format!("{shown} is device {maj}:{min}, but /proc/devices gives the driver's major {want}"),
            "recreate the node with the major of /proc/devices (nvidia-uvm's changes with every module load), or bind the host's node",
        ));
        return false;
    }
    if need == Need::Optional {
        out.push(Check::ok(
            "device-node",
            &shown,
            format!("{shown}: character device {maj}:{min} (needed by profilers only)"),
        ));
        return true;
    }
    match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(_) => {
            out.push(Check::ok(
                "device-node",
                &shown,
                format!("{shown}: character device {maj}:{min}, opened read-write"),
            ));
            true
        }
        Err(e) => {
            let (why, fix) = match e.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EPERM) => (
                    format!("permission denied to uid {} (mode {:o}; or /dev is mounted nodev)", unsafe_uid(), meta.mode() & 0o7777),
                    "make the node crw-rw-rw- as the driver does (NVreg_DeviceFileMode=0666), or add the build user to its group; mount /dev without nodev",
                ),
                Some(libc::ENXIO) | Some(libc::ENODEV) => (
                    "no driver answers on it: the nvidia kernel module is not loaded, or the node's numbers name another device".to_string(),
                    "load the kernel module (nvidia, nvidia-uvm) on the host; NixOS: hardware.nvidia and services.xserver.videoDrivers = [ \"nvidia\" ]",
                ),
                _ => (crate::error::describe_io(&e), "check the node and the kernel module"),
            };
            out.push(Check::not_ok(
                "device-node-not-openable",
                Status::Error,
                &shown,
                format!("{shown}: cannot open read-write: {why}"),
                fix,
            ));
            false
        }
    }
}

fn missing(dev: &Path, name: &str, need: Need, create: bool, out: &mut Vec<Check>) {
    let shown = dev.join(name).display().to_string();
    let (status, message, fix) = match (need, create) {
        (Need::Optional, _) => (Status::Info, format!("no {shown} (needed by profilers only, not by cuInit)"), String::new()),
        (Need::Required, true) => (
            Status::Warning,
            format!("no {shown}, but this process may create device nodes (CAP_MKNOD, {} writable): libcuda makes it itself", dev.display()),
            "nothing, as root; a build user cannot: bind the node (programs.nix-required-mounts.presets.nvidia-gpu)".to_string(),
        ),
        (Need::Required, false) => (
            Status::Error,
            format!("no {shown}: the sandbox has no GPU"),
            "on NixOS enable programs.nix-required-mounts.presets.nvidia-gpu and give the derivation requiredSystemFeatures = [ \"cuda\" ]; on a remote builder make sure the pre-build hook sees the .drv (NixOS/nix#9272)".to_string(),
        ),
    };
    out.push(Check::not_ok(
        if need == Need::Optional { "device-node-optional" } else { "no-device-node" },
        status,
        shown,
        message,
        fix,
    ));
}

/// Whether this process can make device nodes in `dev`: `CAP_MKNOD` in its
/// effective set (bit 27 of `/proc/self/status`' `CapEff`) and write access.
fn can_create(dev: &Path) -> bool {
    let cap = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("CapEff:").map(|v| v.trim().to_string()))
        })
        .and_then(|v| u64::from_str_radix(&v, 16).ok())
        .is_some_and(|caps| caps & (1 << 27) != 0);
    let Ok(c) = CString::new(dev.as_os_str().as_bytes()) else { return false };
    // SAFETY: a NUL-terminated path; access only reads it.
    cap && unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0
}

fn unsafe_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

#[cfg(test)]
mod tests {
    use super::majors;

    #[test]
    fn proc_devices() {
        let m = majors("Character devices:\n  1 mem\n195 nvidia-frontend\n238 nvidia-uvm\n\nBlock devices:\n195 nvidia\n");
        assert_eq!((m.nvidia, m.uvm), (Some(195), Some(238)));
        let m = majors("Character devices:\n195 nvidia\n");
        assert_eq!((m.nvidia, m.uvm), (Some(195), None));
    }
}
