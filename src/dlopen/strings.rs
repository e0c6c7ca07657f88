//! Soname-shaped strings in a file's read-only data: what a literal
//! `dlopen("libfoo.so.1", ...)` leaves behind.
//!
//! Only allocated, read-only, non-executable PROGBITS sections named for
//! string literals are read (`.rodata`, `.lrodata` and their `.suffix`
//! kin), never `.dynstr` (NEEDED and SONAME are not dlopen), `.interp` (the
//! loader's own name), device code (`.nv_fatbin`: cuBLASLt's is 500 MB of
//! GPU code) or other blobs (cuBLASLt's 162 MB `.cask_resource`). Each section is searched with
//! `memmem` for `.so`, and each hit grown backwards and forwards over the
//! characters a file name may hold. A hit is kept when:
//! - what follows `.so` is nothing or `.N[.N...]`, then a NUL (so `libfoo.so:
//!   cannot open` in a message is no name);
//! - the name has no `/` (a path is opened as given, never searched) and
//!   starts with a letter, digit or `_` (a merged string's tail, as in
//!   `failed to load libfoo.so`, still counts: the linker shares such tails);
//! - a name holding `lib` starts there (binary bytes before a string that
//!   follows them without a NUL are no part of it); one without `lib`
//!   (`pam_unix.so`) must be a whole string, NUL before it;
//! - a `%` is a printf conversion (`libnvrtc.so.%d`): kept as a pattern.

use super::{Origin, Problem, MAX_TARGETS};
use crate::elf::ranges::Disjoint;
use crate::elf::{Elf, SHF_ALLOC, SHF_EXECINSTR};

/// SHT_PROGBITS.
const SHT_PROGBITS: u32 = 1;
/// SHF_WRITE.
const SHF_WRITE: u64 = 1;
/// The longest name considered: longer runs are not file names.
const MAX_NAME: usize = 255;

/// Read-only PROGBITS sections that never hold a dlopen argument.
const SKIP: &[&[u8]] = &[
    b".interp",
    b".eh_frame",
    b".eh_frame_hdr",
    b".gcc_except_table",
    b".nv_fatbin",
    b"__nv_relfatbin",
    b".nvFatBinSegment",
    b".gnu_debugdata",
];

/// Whether `b` may be part of a library's file name (printf's `%` too).
fn name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+' | b'.' | b'%')
}

/// Whether a section of this name holds a compiler's string literals:
/// `.rodata`, `.lrodata` (the large code model's) and their `.name.suffix`
/// kin (`.rodata.str1.1` in objects, `.rodata.cst16`). Other read-only
/// sections are data nobody wrote as strings: cuBLASLt's 162 MB
/// `.cask_resource` of kernel resources would cost a third of a second.
fn string_section(name: &[u8]) -> bool {
    [&b".rodata"[..], b".lrodata"].iter().any(|base| {
        name.strip_prefix(*base).is_some_and(|rest| rest.is_empty() || rest.starts_with(b"."))
    })
}

/// One read-only data section worth searching.
#[derive(Debug, Clone)]
pub struct StringSection<'a> {
    /// Its name (`.rodata`).
    pub name: String,
    /// Its bytes.
    pub bytes: &'a [u8],
    /// The first of its bytes no other section searched holds: sections
    /// that overlap are searched once ([`crate::elf::ranges::Disjoint`]:
    /// 4,000 `.rodata` headers over 1 MiB were 4,000 searches of it).
    pub from: usize,
}

/// The read-only data sections worth searching, in file order, each
/// byte searched once (see [`StringSection::from`]).
pub fn sections<'a>(elf: &Elf<'a>) -> Vec<StringSection<'a>> {
    let candidates = elf.shdrs.iter().filter(|s| {
        s.sh_type == SHT_PROGBITS
            && s.flags & SHF_ALLOC != 0
            && s.flags & (SHF_WRITE | SHF_EXECINSTR) == 0
    });
    let readable = candidates.filter_map(|s| {
        let name = elf.section_name(s).unwrap_or_default();
        if SKIP.contains(&name) || !string_section(name) {
            return None;
        }
        let bytes = elf.slice(s.offset, s.size, "section").ok()?;
        Some((s.offset, s.offset + bytes.len() as u64, (name, bytes)))
    });
    Disjoint::new(readable)
        .into_pieces()
        .into_iter()
        .map(|p| StringSection {
            name: String::from_utf8_lossy(p.value.0).into_owned(),
            bytes: p.value.1,
            from: (p.start - p.range_start) as usize,
        })
        .collect()
}

/// Sections are searched in stretches of this many bytes, in parallel
/// (cuBLASLt's `.rodata` is 57 MB, cuDNN's heuristic library's 48 MB: one
/// thread each would be the audit's critical path). Each stretch is mapped
/// whole while searched, so the peak resident set grows by a stretch per
/// thread: at 4 MiB, 64 MB on a 16-thread machine (issue 30's PyTorch tree:
/// 21 MB before the pass, 64 MB with it).
const STRETCH: usize = 1 << 20;

/// The bytes the static CUDA runtime passes to `dlopen` for the driver.
/// Every occurrence holds `.so` 7 bytes in, so the `.so` search sees it.
pub const LIBCUDA: &[u8] = b"libcuda.so.1\0";

/// What [`find`] read.
#[derive(Debug, Default)]
pub struct Found {
    /// Every soname-shaped string, each distinct name once (its first
    /// place), at most [`MAX_TARGETS`].
    pub names: Vec<(String, Origin)>,
    /// Whether the bytes [`LIBCUDA`] occur in the sections searched (also
    /// as a path's tail: the bytes, not the name); `None` when the search
    /// stopped before their end.
    pub libcuda: Option<bool>,
}

/// Every soname-shaped string of the file's [`sections`], each distinct
/// name once, at most [`MAX_TARGETS`]: past that, a
/// [`Problem::TooManyNames`]. Whether [`LIBCUDA`] occurs is answered in the
/// same pass, so the static-runtime check need not read the bytes again.
pub fn find(elf: &Elf<'_>, problems: &mut Vec<Problem>, release: &(dyn Fn(&[u8]) + Sync)) -> Found {
    let mut out: Vec<(String, Origin)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let (mut libcuda, mut complete) = (false, true);
    for StringSection { name: section, bytes, from } in sections(elf) {
        let mut stopped = None;
        'hits: for stretch in stretches(bytes, from, release) {
            libcuda |= stretch.libcuda;
            complete &= stretch.complete;
            for (start, name) in stretch.names {
                if seen.contains(name) {
                    continue;
                }
                if seen.len() >= MAX_TARGETS {
                    stopped = Some(start as u64);
                    break 'hits;
                }
                seen.insert(name);
                let name = String::from_utf8_lossy(name).into_owned();
                out.push((
                    name,
                    Origin::Section { section: section.clone(), offset: start as u64 },
                ));
            }
        }
        if let Some(offset) = stopped {
            super::push_problem(
                problems,
                Problem::TooManyNames { limit: MAX_TARGETS, section, offset },
            );
            complete = false;
            break;
        }
    }
    Found { names: out, libcuda: (libcuda || complete).then_some(libcuda) }
}

/// One stretch's search.
struct Stretch<'a> {
    /// Its distinct names, in order, with their section offsets.
    names: Vec<(usize, &'a [u8])>,
    /// [`LIBCUDA`] starts in it.
    libcuda: bool,
    /// Every `.so` of it was looked at (not stopped at [`MAX_TARGETS`]).
    complete: bool,
}

/// Each [`STRETCH`] of `bytes` from `from` on, in order, searched in parallel; each
/// stretch's distinct names at most [`MAX_TARGETS`] (so a hostile section
/// costs bounded memory), its pages prefetched in one call before the
/// search and released after it.
fn stretches<'a>(
    bytes: &'a [u8],
    from: usize,
    release: &(dyn Fn(&[u8]) + Sync),
) -> Vec<Stretch<'a>> {
    use rayon::prelude::*;
    let finder = memchr::memmem::Finder::new(b".so");
    let starts: Vec<usize> = (from..bytes.len()).step_by(STRETCH).collect();
    starts
        .par_iter()
        .map(|&from| {
            let to = (from + STRETCH).min(bytes.len());
            crate::fs::pages::populate(&bytes[from..to]);
            // A `.so` that starts before `to` may end after it.
            let window = &bytes[from..(to + 2).min(bytes.len())];
            let mut s = Stretch { names: Vec::new(), libcuda: false, complete: true };
            let mut distinct = std::collections::HashSet::new();
            for at in finder.find_iter(window).map(|p| from + p).filter(|&p| p < to) {
                s.libcuda |= at.checked_sub(7).is_some_and(|l| bytes[l..].starts_with(LIBCUDA));
                let Some((start, name)) = name_at(bytes, at) else { continue };
                if distinct.insert(name) {
                    s.names.push((start, name));
                    if distinct.len() > MAX_TARGETS {
                        s.complete = false;
                        break;
                    }
                }
            }
            release(&bytes[from..to]);
            s
        })
        .collect()
}

/// The name around the `.so` at `at`, if it is soname-shaped: its start
/// offset and bytes.
pub fn name_at(bytes: &[u8], at: usize) -> Option<(usize, &[u8])> {
    // Forwards: `.so`, then `.N` groups or `.%d`, then NUL.
    let mut end = at + 3;
    loop {
        match bytes.get(end) {
            Some(0) => break,
            Some(b'.') => {
                let group = end + 1;
                let mut e = group;
                while bytes.get(e).is_some_and(u8::is_ascii_digit) {
                    e += 1;
                }
                if e == group && bytes.get(e) == Some(&b'%') {
                    e = conversion(bytes, e)?;
                }
                if e == group {
                    return None;
                }
                end = e;
            }
            _ => return None,
        }
        if end - at > MAX_NAME {
            return None;
        }
    }
    // Backwards over name bytes.
    let mut start = at;
    while start > 0 && name_byte(bytes[start - 1]) && at - (start - 1) <= MAX_NAME {
        start -= 1;
    }
    if start > 0 && (name_byte(bytes[start - 1]) || bytes[start - 1] == b'/') {
        return None; // longer than any file name, or a path
    }
    // Binary bytes may run into a string that follows without a NUL
    // (NCCL: `4Blibmlx5.so`): a name that holds `lib` starts there; one
    // without (`pam_unix.so`) must be a whole string.
    match memchr::memmem::find(&bytes[start..at], b"lib") {
        Some(lib) => start += lib,
        None if start > 0 && bytes[start - 1] != 0 => return None,
        None => {}
    }
    let name = &bytes[start..end];
    let first = *name.first()?;
    if !(first.is_ascii_alphanumeric() || first == b'_') || at == start || vdso(name) {
        return None;
    }
    // A `%` must be a conversion everywhere in the name.
    let mut i = 0;
    while i < name.len() {
        if name[i] == b'%' {
            i = conversion(name, i)?;
        } else {
            i += 1;
        }
    }
    Some((start, name))
}

/// Whether `name` is the kernel's vDSO (`linux-vdso.so.1`, `linux-gate.so.1`,
/// `linux-vdso32.so.1`/`linux-vdso64.so.1` on ppc64 and s390x): the kernel
/// maps it into every process, no file holds it and nobody `dlopen`s it.
/// Programs name it to recognise it among the loaded objects (the driver's
/// `libcuda.so` holds `linux-vdso.so` and `linux-gate.so`), so it is no
/// dlopen target.
fn vdso(name: &[u8]) -> bool {
    name.starts_with(b"linux-vdso") || name.starts_with(b"linux-gate")
}

/// The end of the printf conversion at `at` (`%d`, `%u`, `%s`, `%i`, with
/// an optional `l`), or `None`.
fn conversion(bytes: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    if bytes.get(i) == Some(&b'l') {
        i += 1;
    }
    matches!(bytes.get(i), Some(b'd' | b'u' | b's' | b'i')).then_some(i + 1)
}

#[cfg(test)]
mod tests {
    use super::name_at;

    fn names(data: &[u8]) -> Vec<String> {
        memchr::memmem::find_iter(data, b".so")
            .filter_map(|at| name_at(data, at))
            .map(|(_, n)| String::from_utf8_lossy(n).into_owned())
            .collect()
    }

    #[test]
    fn sonames_versions_and_patterns() {
        let data = b"\0libcudnn_graph.so\0libnvrtc.so.%d\0libnvrtc-builtins.so.12.9\0x\0";
        assert_eq!(
            names(data),
            ["libcudnn_graph.so", "libnvrtc.so.%d", "libnvrtc-builtins.so.12.9"]
        );
    }

    #[test]
    fn messages_paths_and_fragments_are_not_names() {
        let data = b"\0cannot open libfoo.so: %s\0/usr/lib/libx.so\0.so\0libbar.so.\0a.socket\0";
        assert_eq!(names(data), Vec::<String>::new());
        // A merged tail of a message still names the library.
        assert_eq!(names(b"failed to load libz.so.1\0"), ["libz.so.1"]);
        assert_eq!(
            names(b"\x014Blibmlx5.so\0\0pam_unix.so\0x pam_x.so\0"),
            ["libmlx5.so", "pam_unix.so"]
        );
        assert_eq!(names(b"libq.so.%x\0"), Vec::<String>::new());
        // The kernel's vDSO is mapped, never dlopened.
        assert_eq!(
            names(b"\0linux-vdso.so\0linux-gate.so.1\0linux-vdso64.so.1\0libc.so.6\0"),
            ["libc.so.6"]
        );
    }
}
