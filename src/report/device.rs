//! The audit's text report opens with what each file carries: one line per
//! file with device code, the device-code model's sets
//! ([`crate::devicecode::DeviceCode`]).

use std::io::{self, Write};

use super::{sanitize, Report};
use crate::audit::FileFacts;

/// Writes the headed `device code:` section (nothing when no file has any).
pub fn write(out: &mut dyn Write, report: &Report<FileFacts>) -> io::Result<()> {
    if !report.files.iter().any(|f| f.device.is_some()) {
        return Ok(());
    }
    writeln!(out, "device code:")?;
    let names = |set: &std::collections::BTreeSet<crate::fatbin::Arch>| {
        set.iter().map(|a| a.name()).collect::<Vec<_>>().join(" ")
    };
    for f in &report.files {
        let Some(d) = &f.device else { continue };
        let mut parts = Vec::new();
        for (label, set) in [
            ("SASS", d.sass()),
            ("PTX", d.ptx()),
            ("link stubs only", d.link_stub_only()),
            ("PTX without entries", d.ptx_without_entries()),
            ("LTO-IR", d.lto_ir()),
        ] {
            if !set.is_empty() {
                parts.push(format!("{label} {}", names(&set)));
            }
        }
        writeln!(out, "  {}: {}", sanitize(&f.path.to_string_lossy()), parts.join("; "))?;
    }
    writeln!(out)
}
