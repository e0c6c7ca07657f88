//! `.note.dlopen`: the ELF dlopen metadata of the UAPI group / FDO
//! (systemd writes them since 256; autoPatchelf reads them). Each note has
//! owner `FDO`, type `0x407c0c0a` and a JSON array of objects: `soname`
//! (an array of alternative names), `feature`, `description`, `priority`
//! (`required`, `recommended`, `suggested`). Taken as given: `required` is
//! needed, the others optional.

use std::collections::HashSet;

use serde::Deserialize;

use super::{Need, Origin, Problem, Scan, Target, MAX_NOTE, MAX_TARGETS};
use crate::elf::ranges::Disjoint;
use crate::elf::Elf;

/// SHT_NOTE.
const SHT_NOTE: u32 = 7;
/// The note type of ELF dlopen metadata.
pub const NT_FDO_DLOPEN_METADATA: u32 = 0x407c_0c0a;

/// One entry of a note's JSON array.
#[derive(Debug, Deserialize)]
struct Entry {
    soname: Vec<String>,
    #[serde(default)]
    feature: Option<String>,
    #[serde(default)]
    priority: Option<String>,
}

/// Reads every dlopen note of the file's `.note.dlopen` sections into `out`
/// (targets, or problems), skipping names in `seen`. Sections whose bytes
/// overlap an earlier one's are not read again (their notes would be read
/// at another alignment or twice: 500 headers over one region were 1.6
/// million findings): one problem says how many there were.
pub fn read(elf: &Elf<'_>, out: &mut Scan, seen: &mut HashSet<String>) {
    let notes = elf
        .shdrs
        .iter()
        .filter(|s| s.sh_type == SHT_NOTE && elf.section_name(s) == Some(b".note.dlopen"))
        .map(|s| (s.offset, s.offset.saturating_add(s.size), s));
    let pieces = Disjoint::new(notes);
    if pieces.overlapping() > 0 {
        let first = pieces.pieces().first().map_or(0, |p| p.start);
        out.problem(Problem::BadNote {
            offset: first,
            reason: format!(
                "{} .note.dlopen sections overlap an earlier one: their bytes were read once, as the first section's",
                pieces.overlapping()
            ),
        });
    }
    for piece in pieces.pieces().iter().filter(|p| p.start == p.range_start) {
        let s = piece.value;
        let Ok(bytes) = elf.slice(s.offset, s.size, ".note.dlopen") else {
            out.problem(Problem::BadNote {
                offset: s.offset,
                reason: "the section runs past the end of the file".into(),
            });
            continue;
        };
        let align = if s.addralign == 8 { 8 } else { 4 };
        walk(bytes, s.offset, align, elf, &mut |note| match note {
            Ok((offset, desc)) => entries(offset, desc, out, seen),
            Err(p) => out.problem(p),
        });
    }
}

/// One dlopen note: its file offset and JSON bytes.
type Note<'a> = (u64, &'a [u8]);

/// Calls `each` with the dlopen notes of one section, `(file offset, JSON
/// bytes)`, in order, or with the problem that ends the walk.
fn walk(
    bytes: &[u8],
    base: u64,
    align: usize,
    elf: &Elf<'_>,
    each: &mut dyn FnMut(Result<Note<'_>, Problem>),
) {
    let l = elf.layout;
    let mut at = 0usize;
    let pad = |n: usize| n.div_ceil(align) * align;
    while at < bytes.len() {
        let offset = base + at as u64;
        let bad = |reason: String| Problem::BadNote { offset, reason };
        let head = |i: usize| l.u32(bytes, (at + 4 * i) as u64, "note header");
        let (Ok(namesz), Ok(descsz), Ok(kind)) = (head(0), head(1), head(2)) else {
            each(Err(bad("the note header is cut short".into())));
            return;
        };
        let (namesz, descsz) = (namesz as usize, descsz as usize);
        let name_at = at + 12;
        let desc_at = name_at.saturating_add(pad(namesz));
        let end = desc_at.saturating_add(pad(descsz));
        if desc_at.saturating_add(descsz) > bytes.len() {
            each(Err(bad(format!(
                "it declares {descsz} bytes of data and the section ends before them"
            ))));
            return;
        }
        let name = crate::elf::cstr(&bytes[name_at..name_at + namesz]).unwrap_or_default();
        if name == b"FDO" && kind == NT_FDO_DLOPEN_METADATA {
            if descsz > MAX_NOTE {
                each(Err(bad(format!(
                    "its JSON is {descsz} bytes, more than the {MAX_NOTE} this tool reads"
                ))));
                return;
            }
            each(Ok((offset, &bytes[desc_at..desc_at + descsz])));
        }
        at = end.max(at + 12);
    }
}

/// The targets of one note's JSON.
fn entries(offset: u64, desc: &[u8], out: &mut Scan, seen: &mut HashSet<String>) {
    let json = crate::elf::cstr(desc).unwrap_or(desc);
    let parsed: Result<Vec<Entry>, _> = serde_json::from_slice(json);
    let list = match parsed {
        Ok(list) => list,
        Err(e) => {
            out.problem(Problem::BadNote {
                offset,
                reason: format!("its data is not the documented JSON array: {e}"),
            });
            return;
        }
    };
    for e in list {
        let names: Vec<String> =
            e.soname.into_iter().filter(|n| !n.is_empty() && !n.contains('/')).collect();
        let Some(first) = names.first().cloned() else { continue };
        if seen.contains(&first) || seen.len() >= MAX_TARGETS {
            continue;
        }
        seen.extend(names.iter().cloned());
        let need = match e.priority.as_deref() {
            Some("required") => Need::Needed,
            Some("recommended") => Need::Recommended,
            _ => Need::Optional,
        };
        out.targets.push(Target {
            soname: first,
            asked: names,
            origin: Origin::Note { offset, feature: e.feature },
            need,
            same_release: false,
        });
    }
}
