//! `--summary`'s text: per file, its format, the architectures of the
//! device-code model (SASS, PTX, link stubs only, PTX without entries,
//! LTO-IR), codecs and sizes, and the damage found.

use std::collections::BTreeSet;
use std::io::{self, Write};

use crate::fatbin::Arch;
use crate::inspect::{summarise, FileFormat, FileReport};
use crate::output::{sanitize, Controls};

fn archs(set: &BTreeSet<Arch>) -> String {
    let mut v: Vec<&Arch> = set.iter().collect();
    v.sort_by_key(|a| (a.sm, a.variant));
    v.iter().map(|a| a.name()).collect::<Vec<_>>().join(" ")
}

/// `none` for an empty list, so that no line ends in `PTX: )`.
fn or_none(list: String) -> String {
    if list.is_empty() {
        "none".to_string()
    } else {
        list
    }
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 10 << 20 => format!("{} MiB", n >> 20),
        n if n >= 10 << 10 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

/// Writes the human summary of one file, each line wrapped as the audit's
/// text is ([`super::wrap`]): a PTX ISA list or an error can run past it.
pub fn write(out: &mut dyn Write, r: &FileReport) -> io::Result<()> {
    let mut text = Vec::new();
    lines(&mut text, r)?;
    // Every piece went through the sanitiser: the text is UTF-8.
    for line in String::from_utf8_lossy(&text).lines() {
        super::wrap::put(out, line)?;
    }
    Ok(())
}

/// The summary's lines, unwrapped.
fn lines(out: &mut dyn Write, r: &FileReport) -> io::Result<()> {
    let s = &r.summary;
    // Escaped, not replaced: the summary says exactly which byte a name holds.
    let path = sanitize(&r.path, Controls::Escape);
    if r.format == FileFormat::NotRead {
        writeln!(out, "{}: not read", path)?;
    } else if !r.device_code {
        writeln!(out, "{}: no device code ({})", path, r.format)?;
    } else {
        writeln!(
            out,
            "{}: {}, {} fatbin section(s), {} cubin(s), {} PTX",
            path,
            r.format,
            r.sections.len(),
            s.cubins,
            s.ptx_files
        )?;
        if !s.sass.is_empty() {
            writeln!(out, "  SASS:           {}", archs(&s.sass))?;
        }
        if !s.ptx.is_empty() {
            writeln!(out, "  PTX:            {}", archs(&s.ptx))?;
        }
        if !s.ptx_isa.is_empty() {
            let isa: Vec<String> =
                s.ptx_isa.iter().map(|(a, v)| format!("{} {v}", a.name())).collect();
            writeln!(out, "  PTX ISA:        {}", isa.join(", "))?;
        }
        if !s.link_stub_only.is_empty() {
            writeln!(out, "  link stub only: {}", archs(&s.link_stub_only))?;
        }
        if !s.ptx_without_entries.is_empty() {
            writeln!(out, "  PTX, no entry:  {}", archs(&s.ptx_without_entries))?;
        }
        if !s.lto_ir.is_empty() {
            writeln!(out, "  LTO-IR:         {}", archs(&s.lto_ir))?;
        }
        let codecs: Vec<String> =
            s.codecs.iter().map(|(c, n)| format!("{} {n}", c.name())).collect();
        if !codecs.is_empty() {
            writeln!(
                out,
                "  codecs:         {}; {} stored, {} plain",
                codecs.join(", "),
                bytes(s.stored_bytes),
                bytes(s.plain_bytes)
            )?;
        }
        if !s.deep {
            writeln!(out, "  (headers only: link stubs not told apart)")?;
        }
    }
    if let Some(scanned) = &r.scanned {
        let sum = summarise(scanned.iter(), s.deep);
        writeln!(
            out,
            "  scan: {} entries outside the fatbin sections (SASS: {}; PTX: {})",
            scanned.len(),
            or_none(archs(&sum.sass)),
            or_none(archs(&sum.ptx))
        )?;
    }
    if let Some(offset) = r.unscanned_container {
        writeln!(
            out,
            "  not read:       fatbin containers outside the fatbin sections (one at offset {offset:#x}; --no-scan)"
        )?;
    }
    // An error names the archive member or section it is about: escaped
    // as the path is.
    for e in &r.errors {
        writeln!(out, "  error: {}", sanitize(e, Controls::Escape))?;
    }
    Ok(())
}
