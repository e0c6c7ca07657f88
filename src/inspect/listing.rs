//! cuobjdump's `--list-elf` / `--list-ptx` output, byte for byte.
//!
//! The rules (`docs/fatbin-format.md`, "cuobjdump's listing", checked
//! against the live cuobjdump 13.5 by `tests/cuobjdump_parity.rs`):
//! - one line per entry, `ELF file %4d: NAME` / `PTX file %4d: NAME`, in file
//!   order; the two counters are separate, 1-based, and run over the whole
//!   input (archive members included);
//! - NAME is `STEM.N.ARCH.cubin|ptx`, STEM the file's basename without its
//!   last extension; ARCH is `sm_N` plus `a`, plus `f` for PTX only;
//! - an entry with an identifier (`-G`, some link stubs) is named after it:
//!   basename of the trimmed identifier without its extension, `.ARCH.cubin`;
//! - `--concat` bundles (kind 0x100) are listed as their parts, in place;
//! - `.nv_fatbin` sections only, unless the object has none (then
//!   `__nv_relfatbin`) or `-all` asks for both;
//! - archives: a blank line and `member PATH:MEMBER:` before each member;
//!   cuobjdump stops at the first member with a BSD long name (`#1/LEN`),
//!   silently (13.5, measured), so the listing does too;
//! - a bare cubin: `ELF file    1: STEM.ARCH.cubin`;
//! - messages on stderr after `PROG info    : ` / `PROG fatal   : `, with the
//!   path made absolute by prefixing the working folder (not normalised).

use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::devicecode::host::{self, Object, NV_FATBIN};
use crate::fatbin::{Entry, Kind, Region, Variant};
use crate::output::Cuobjdump;

/// What to list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// `--list-elf`.
    pub elf: bool,
    /// `--list-ptx`.
    pub ptx: bool,
    /// `--all-fatbin`: both section kinds.
    pub all: bool,
}

/// Counters and findings of one listing.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// ELF lines written.
    pub elf: u32,
    /// PTX lines written.
    pub ptx: u32,
    /// Whether any device code was seen (a fatbin section, a raw fatbin, a cubin).
    pub device_code: bool,
    /// A listed region was damaged (or empty): cuobjdump stops there with
    /// `Invalid fatbin header` and status 1, after the containers before it.
    pub damaged: bool,
}

/// `cuobjdump`'s STEM: the basename without its last extension
/// (`libx.so.1.2` -> `libx.so.1`, `.hidden` -> ``, `exe` -> `exe`).
pub fn stem(name: &[u8]) -> &[u8] {
    let base = match name.iter().rposition(|&b| b == b'/') {
        Some(i) => &name[i + 1..],
        None => name,
    };
    match base.iter().rposition(|&b| b == b'.') {
        Some(i) => &base[..i],
        None => base,
    }
}

/// The path as cuobjdump prints it in messages: as given when absolute or
/// empty, else the working folder, `/`, and the path as given.
pub fn display_path(path: &Path, cwd: &Path) -> Vec<u8> {
    let raw = path.as_os_str().as_bytes();
    if raw.is_empty() || raw.starts_with(b"/") {
        return raw.to_vec();
    }
    let mut out = cwd.as_os_str().as_bytes().to_vec();
    if !out.ends_with(b"/") {
        out.push(b'/');
    }
    out.extend_from_slice(raw);
    out
}

/// Writes the listing lines of one input (file or archive) to `out`.
pub struct Lister<'w> {
    out: &'w mut dyn Write,
    options: ListOptions,
    stem: Vec<u8>,
    counts: Counts,
}

impl<'w> Lister<'w> {
    /// A lister for an input whose STEM comes from `name` (the path as given).
    pub fn new(out: &'w mut dyn Write, options: ListOptions, name: &[u8]) -> Lister<'w> {
        Lister { out, options, stem: stem(name).to_vec(), counts: Counts::default() }
    }

    /// The counters so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Lists a whole input; `display` is the path for `member` lines.
    pub fn object(&mut self, object: &Object<'_>, display: &[u8]) -> io::Result<()> {
        match object {
            Object::Archive(members) => {
                for m in members {
                    if m.bsd_long_name
                        || !self.member(display, m.name, m.is_elf, m.object.as_ref().ok())?
                    {
                        break;
                    }
                }
                Ok(())
            }
            Object::Elf(elf) => {
                let has_exec = elf.sections.iter().any(|s| s.name == NV_FATBIN);
                self.counts.device_code |= !elf.sections.is_empty();
                // `.nv_fatbin` sections come first, then `__nv_relfatbin`,
                // whatever their order in the file: cuobjdump 13.0 lists
                // libnccl.so.2 (relocatable section first in the file) this
                // way under -all (found on the GPU machine, docs/gpu-validation.md).
                let exec = elf.sections.iter().filter(|s| s.name == NV_FATBIN);
                let rel = elf.sections.iter().filter(|s| s.name != NV_FATBIN);
                for section in exec.chain(rel) {
                    if self.counts.damaged {
                        break;
                    }
                    if self.options.all || (section.name == NV_FATBIN) == has_exec {
                        self.region(&section.region)?;
                    }
                }
                Ok(())
            }
            Object::Fatbin(region) => {
                self.counts.device_code = true;
                self.region(region)
            }
            Object::Cubin(Ok(info)) => {
                self.counts.device_code = true;
                if self.options.elf {
                    self.counts.elf += 1;
                    let mut name = self.stem.clone();
                    name.push(b'.');
                    name.extend_from_slice(
                        sm_name(info.arch.sm, info.arch.variant == Variant::Arch, false).as_bytes(),
                    );
                    name.extend_from_slice(b".cubin");
                    self.line(b"ELF", self.counts.elf, &name)?;
                }
                Ok(())
            }
            Object::Cubin(Err(_)) | Object::Other => Ok(()),
        }
    }

    /// Lists one archive member; `false` when cuobjdump would stop walking
    /// the archive here. Measured on cuobjdump 13.5: a member that is not an
    /// ELF file (a raw fatbin, a nested archive, text) ends the walk without
    /// its `member` line; a cubin member gets its line and nothing else.
    pub fn member(
        &mut self,
        display: &[u8],
        name: &[u8],
        is_elf: bool,
        object: Option<&Object<'_>>,
    ) -> io::Result<bool> {
        if !is_elf {
            return Ok(false);
        }
        self.out.write_all(b"\nmember ")?;
        self.out.write_all(display)?;
        self.out.write_all(b":")?;
        self.out.write_all(name)?;
        self.out.write_all(b":\n")?;
        if let Some(elf @ Object::Elf(_)) = object {
            self.object(elf, display)?;
        }
        Ok(true)
    }

    /// Lists every entry of a fatbin region.
    /// Lists every entry of a fatbin region. Damage (any [`Region::errors`],
    /// or no container at all) ends the listing as cuobjdump 13.5 does
    /// (measured on empty, garbage, truncated and garbage-tailed sections):
    /// the containers wholly before the first damage are listed, nothing
    /// after, and [`Counts::damaged`] is set.
    pub fn region(&mut self, region: &Region<'_>) -> io::Result<()> {
        let damage_at = region.errors.iter().map(|e| e.offset()).min();
        for container in &region.containers {
            if damage_at.is_some_and(|d| container.end() > d) {
                break;
            }
            for entry in &container.entries {
                if entry.kind == Kind::Concat {
                    for part in &entry.parts {
                        self.entry(part)?;
                    }
                } else {
                    self.entry(entry)?;
                }
            }
        }
        if damage_at.is_some() || region.containers.is_empty() {
            self.counts.damaged = true;
        }
        Ok(())
    }

    fn entry(&mut self, entry: &Entry<'_>) -> io::Result<()> {
        let (label, ext, count, f) = match entry.kind {
            Kind::Elf if self.options.elf => {
                self.counts.elf += 1;
                (&b"ELF"[..], &b"cubin"[..], self.counts.elf, false)
            }
            Kind::Ptx if self.options.ptx => {
                self.counts.ptx += 1;
                (&b"PTX"[..], &b"ptx"[..], self.counts.ptx, entry.arch.variant == Variant::Family)
            }
            _ => return Ok(()),
        };
        let arch = sm_name(entry.arch.sm, entry.arch.variant == Variant::Arch, f);
        let ident = entry.identifier.map(trim).filter(|i| !i.is_empty());
        let mut name = match ident {
            Some(ident) => stem(ident).to_vec(),
            None => {
                let mut n = self.stem.clone();
                n.extend_from_slice(format!(".{count}").as_bytes());
                n
            }
        };
        name.push(b'.');
        name.extend_from_slice(arch.as_bytes());
        name.push(b'.');
        name.extend_from_slice(ext);
        self.line(label, count, &name)
    }

    fn line(&mut self, label: &[u8], count: u32, name: &[u8]) -> io::Result<()> {
        self.out.write_all(label)?;
        self.out.write_all(format!(" file {count:4}: ").as_bytes())?;
        self.out.write_all(name)?;
        self.out.write_all(b"\n")
    }
}

fn sm_name(sm: u32, a: bool, f: bool) -> String {
    format!("sm_{sm}{}{}", if a { "a" } else { "" }, if f { "f" } else { "" })
}

fn trim(bytes: &[u8]) -> &[u8] {
    let is_space = |b: &u8| b.is_ascii_whitespace() || *b == 0;
    let start = bytes.iter().position(|b| !is_space(b)).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|b| !is_space(b)).map_or(start, |i| i + 1);
    bytes.get(start..end).unwrap_or_default()
}

/// A message for stderr: `fatal` or `info`, and its text after the prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `true` for `fatal`, `false` for `info`.
    pub fatal: bool,
    /// The text after `PROG info    : `.
    pub text: Vec<u8>,
}

impl Message {
    fn new(fatal: bool, parts: &[&[u8]]) -> Message {
        Message { fatal, text: parts.concat() }
    }

    /// The whole stderr line for program name `prog`, newline included.
    pub fn line(&self, prog: &str) -> Vec<u8> {
        let level = if self.fatal { "fatal   " } else { "info    " };
        let mut line = format!("{prog} {level}: ").into_bytes();
        line.extend_from_slice(&self.text);
        line.push(b'\n');
        line
    }
}

/// The result of listing one path the way cuobjdump does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// stderr messages, in order.
    pub messages: Vec<Message>,
    /// cuobjdump's exit status: 0, 1 (cannot open / not readable), 255 (no device code).
    pub status: Cuobjdump,
}

/// Lists `path` exactly as `cuobjdump --list-elf/--list-ptx [-all] PATH`
/// would: lines to `out`, messages and status in the result. `cwd` makes
/// relative paths absolute in messages.
pub fn list_path(
    out: &mut dyn Write,
    path: &Path,
    cwd: &Path,
    options: ListOptions,
) -> io::Result<Outcome> {
    let display = display_path(path, cwd);
    let quote = |prefix: &[u8], suffix: &[u8]| [prefix, &display, suffix].concat();
    let fatal = |text: Vec<u8>| Outcome {
        messages: vec![Message::new(true, &[&text])],
        status: Cuobjdump::Failed,
    };
    let data = match host::map(path) {
        Ok(d) => d,
        // cuobjdump reports a folder as an allocation failure (13.5, measured).
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
            return Ok(fatal(b"Memory allocation failure".to_vec()))
        }
        Err(_) => return Ok(fatal(quote(b"Could not open input file '", b"'"))),
    };
    // Fewer bytes than a container header: cuobjdump's first check.
    if data.len() < 16 {
        return Ok(fatal(quote(b"Invalid fatbin header in '", b"'")));
    }
    let object =
        host::parse_with(&data, &mut |walked| data.release(walked)).unwrap_or(Object::Other);
    let name = path.as_os_str().as_bytes();
    let mut lister = Lister::new(out, options, name);
    match &object {
        // A thin archive's members are files next to it; cuobjdump reads them.
        Object::Archive(members) if members.iter().any(|m| m.thin) => {
            for m in members {
                let member =
                    host::thin_member_path(path, m.name).ok().and_then(|p| host::map(&p).ok());
                let bytes: &[u8] = member.as_deref().unwrap_or_default();
                let parsed = host::parse_member(bytes).ok();
                let is_elf = bytes.starts_with(b"\x7fELF");
                if m.bsd_long_name || !lister.member(&display, m.name, is_elf, parsed.as_ref())? {
                    break;
                }
            }
        }
        _ => lister.object(&object, &display)?,
    }
    let counts = lister.counts();
    Ok(conclude(counts, options, &display))
}

/// Lists several paths one after the other, as separate cuobjdump runs
/// would (counters restart per file): lines to `out`, each file's messages
/// to `err` after its lines (`prog` names the program in them). The status
/// is the worst of the runs' (1 if any would fail, else 255 if any had no
/// device code, else 0).
pub fn list_paths(
    out: &mut dyn Write,
    err: &mut dyn Write,
    paths: &[std::path::PathBuf],
    cwd: &Path,
    options: ListOptions,
    prog: &str,
) -> io::Result<Cuobjdump> {
    let mut status = Cuobjdump::Listed;
    for path in paths {
        let outcome = list_path(out, path, cwd, options)?;
        out.flush()?;
        for m in &outcome.messages {
            err.write_all(&m.line(prog))?;
        }
        status = status.max(outcome.status);
    }
    out.flush()?;
    Ok(status)
}

/// The closing messages and status for a listing that produced `counts`.
pub fn conclude(counts: Counts, options: ListOptions, display: &[u8]) -> Outcome {
    let mut messages = Vec::new();
    if counts.damaged {
        messages.push(Message::new(true, &[b"Invalid fatbin header in '", display, b"'"]));
        return Outcome { messages, status: Cuobjdump::Failed };
    }
    if !counts.device_code {
        messages
            .push(Message::new(false, &[b"File '", display, b"' does not contain device code"]));
        return Outcome { messages, status: Cuobjdump::NoDeviceCode };
    }
    for (asked, n, what) in [(options.elf, counts.elf, "ELF"), (options.ptx, counts.ptx, "PTX")] {
        if asked && n == 0 {
            messages.push(Message::new(
                false,
                &[
                    b"No ",
                    what.as_bytes(),
                    b" file found to extract from '",
                    display,
                    b"'. You may try with -all option.",
                ],
            ));
        }
    }
    Outcome { messages, status: Cuobjdump::Listed }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_follow_cuobjdump() {
        assert_eq!(stem(b"libcublasLt.so.13"), b"libcublasLt.so");
        assert_eq!(stem(b"/a/b/libtorch_cuda.so"), b"libtorch_cuda");
        assert_eq!(stem(b"exe"), b"exe");
        assert_eq!(stem(b".hidden"), b"");
        assert_eq!(stem(b"a.b."), b"a.b");
        assert_eq!(stem(b"dir.d/exe"), b"exe");
    }

    #[test]
    fn display_paths_are_joined_not_normalised() {
        let cwd = Path::new("/tmp/w");
        assert_eq!(display_path(Path::new("x"), cwd), b"/tmp/w/x");
        assert_eq!(display_path(Path::new("./x"), cwd), b"/tmp/w/./x");
        assert_eq!(display_path(Path::new("/x"), cwd), b"/x");
        assert_eq!(display_path(Path::new(""), cwd), b"");
    }

    #[test]
    fn identifiers_are_trimmed() {
        assert_eq!(trim(b"k.cu "), b"k.cu");
        assert_eq!(trim(b"  "), b"");
    }
}
