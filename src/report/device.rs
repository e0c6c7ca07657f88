//! The audit's text report opens with what each file carries: one line per
//! file with device code, the device-code model's sets
//! ([`crate::devicecode::DeviceCode`]). Lines are wrapped as the findings'
//! are ([`super::wrap`]): cuSPARSE 12.5's 19 SASS architectures and its
//! PTX made a line of 348 characters.

use std::io::{self, Write};

use super::wrap::put;
use super::Report;
use crate::audit::FileFacts;
use crate::cuda::capabilities::Runs;
use crate::cuda::driver::{NotRunning, PtxVerdict};
use crate::output::{sanitize, Controls};

/// Writes the headed `device code:` section (nothing when no file has any).
pub fn write(out: &mut dyn Write, report: &Report<FileFacts>) -> io::Result<()> {
    if !report.files.iter().any(|f| f.device.is_some()) {
        return Ok(());
    }
    writeln!(out, "device code:")?;
    // nvcc's spelling: `sm_90` for SASS, `compute_90` for PTX, as every
    // finding says it.
    let names = |set: &std::collections::BTreeSet<crate::fatbin::Arch>, ptx: bool| {
        set.iter()
            .map(|a| {
                let n = a.name();
                match n.strip_prefix("sm_") {
                    Some(rest) if ptx => format!("compute_{rest}"),
                    _ => n.to_string(),
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    for f in &report.files {
        let Some(d) = &f.device else { continue };
        let mut parts = Vec::new();
        for (label, set, ptx) in [
            ("SASS", d.sass(), false),
            ("PTX", d.ptx(), true),
            ("link stubs only", d.link_stub_only(), false),
            ("PTX without entries", d.ptx_without_entries(), true),
            ("LTO-IR", d.lto_ir(), false),
        ] {
            if !set.is_empty() {
                parts.push(format!("{label} {}", names(&set, ptx)));
            }
        }
        put(
            out,
            &format!(
                "  {}: {}",
                sanitize(&f.path.to_string_lossy(), Controls::Replace),
                parts.join("; ")
            ),
        )?;
        if !f.coverage.is_empty() {
            let each: Vec<String> = f
                .coverage
                .iter()
                .map(|c| match (&c.code, c.runs, &c.driver) {
                    // Never "nothing runs" about code not read.
                    (None, _, _) if c.not_read => format!("{}: {NOT_READ}", c.capability),
                    // Link stubs and entry-less PTX only: nothing is missing
                    // (no-code-for-capability is not raised either).
                    (None, _, _) if !d.has_code() => {
                        format!("{}: no kernels in the file, nothing to run", c.capability)
                    }
                    (Some(code), Runs::Jit, None) if c.not_read => {
                        format!(
                            "{}: PTX {code} (JIT only in what was read; {NOT_READ})",
                            c.capability
                        )
                    }
                    (Some(code), Runs::Native, None) => format!("{}: SASS {code}", c.capability),
                    (Some(code), Runs::Native, Some(v)) => {
                        format!("{}: SASS {code} ({})", c.capability, verdict(v))
                    }
                    (Some(code), _, None) => format!("{}: PTX {code} (JIT only)", c.capability),
                    (Some(code), _, Some(v)) => {
                        let isa = c.ptx_isa.as_deref().unwrap_or("unknown");
                        match (v.reason, &v.needs_cuda) {
                            (Some(NotRunning::Ptx(PtxVerdict::TooNew { .. })), Some(needs)) => {
                                format!(
                                    "{}: PTX {code}, ISA {isa} needs CUDA {needs} driver (has {})",
                                    c.capability, v.has_cuda
                                )
                            }
                            _ => {
                                format!("{}: PTX {code}, ISA {isa} ({})", c.capability, verdict(v))
                            }
                        }
                    }
                    (None, _, _) => format!("{}: nothing runs", c.capability),
                })
                .collect();
            put(out, &format!("    requested {}", each.join("; ")))?;
        }
    }
    writeln!(out)
}

/// What a coverage line says where code was not read (see
/// [`crate::audit::Coverage::not_read`]).
const NOT_READ: &str = "not read (fatbins outside the fatbin sections, --no-scan)";

/// `runs`, `JIT runs`, or why not, for a coverage line with a driver given.
fn verdict(v: &crate::audit::DriverVerdict) -> String {
    match (v.runs, v.reason, &v.needs_cuda) {
        (true, _, _) => "runs".to_string(),
        (false, Some(NotRunning::Runtime(_)), Some(needs)) => {
            format!("runtime needs CUDA {needs} driver, has {}", v.has_cuda)
        }
        (false, Some(NotRunning::Ptx(PtxVerdict::TooNew { .. })), Some(needs)) => {
            format!("needs CUDA {needs} driver, has {}", v.has_cuda)
        }
        _ => format!("unknown: {}", v.why.as_deref().unwrap_or("not decided")),
    }
}
