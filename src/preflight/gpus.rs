//! The GPUs' compute capabilities, and the user's own probe.
//!
//! The kernel module does not publish compute capabilities in procfs or
//! sysfs (`/proc/driver/nvidia/gpus/*/information` names the model only),
//! and loading libcuda or NVML into this static program is not an option:
//! so they are given (`--gpu-capability`) or asked of `nvidia-smi
//! --query-gpu=compute_cap`, a separate process, when it is on `PATH`.

use std::process::{Command, Stdio};

use super::{Check, Status};
use crate::cuda::capabilities::Capability;

/// The capabilities to check the closure's device code against.
pub fn capabilities(
    given: &[Capability],
    gpu_nodes: usize,
    out: &mut Vec<Check>,
) -> Vec<Capability> {
    if !given.is_empty() {
        return given.to_vec();
    }
    if gpu_nodes == 0 {
        return Vec::new();
    }
    match nvidia_smi() {
        Ok(caps) if !caps.is_empty() => {
            let list: Vec<String> = caps.iter().map(ToString::to_string).collect();
            out.push(Check::ok(
                "gpu-capability",
                "nvidia-smi",
                format!("GPU compute capabilities {}", list.join(", ")),
            ));
            caps
        }
        Ok(_) | Err(_) => {
            out.push(Check::not_ok(
                "gpu-capability-unknown",
                Status::Info,
                "nvidia-smi",
                "the GPUs' compute capabilities are unknown here (no nvidia-smi answered): the closure's device code is not checked against them",
                "pass --gpu-capability 9.0 (the capability of the GPU the tests run on)",
            ));
            Vec::new()
        }
    }
}

fn nvidia_smi() -> std::io::Result<Vec<Capability>> {
    let out = Command::new("nvidia-smi")
        .args(["--query-gpu=compute_cap", "--format=csv,noheader"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()?;
    if !out.status.success() {
        return Ok(Vec::new());
    }
    let mut caps: Vec<Capability> =
        String::from_utf8_lossy(&out.stdout).lines().filter_map(Capability::parse).collect();
    caps.sort();
    caps.dedup();
    Ok(caps)
}

/// Runs `cmd` with `sh -c`: status 0 confirms, anything else is an error.
pub fn probe(cmd: &str) -> Check {
    match Command::new("sh").args(["-c", cmd]).stdin(Stdio::null()).status() {
        Ok(s) if s.success() => Check::ok("probe", cmd, format!("`{cmd}` exited 0")),
        Ok(s) => Check::not_ok(
            "probe-failed",
            Status::Error,
            cmd,
            format!(
                "`{cmd}` failed ({s}): the program's own CUDA call says GPU code does not run here"
            ),
            "read the program's output; the checks above name the likely cause",
        ),
        Err(e) => Check::not_ok(
            "probe-failed",
            Status::Error,
            cmd,
            format!("cannot run `sh -c {cmd}`: {e}"),
            "check the command",
        ),
    }
}
