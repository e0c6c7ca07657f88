//! `.note.dlopen`: the ELF dlopen metadata of the UAPI group / FDO
//! (systemd writes them since 256; autoPatchelf reads them). Each note has
//! owner `FDO`, type `0x407c0c0a` and a JSON array of objects: `soname`
//! (an array of alternative names), `feature`, `description`, `priority`
//! (`required`, `recommended`, `suggested`). Taken as given: `required` is
//! needed, the others optional.

use std::collections::HashSet;

use serde::Deserialize;

use super::{Need, Origin, Problem, Scan, Target, MAX_NOTE, MAX_TARGETS};
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
/// (targets, or problems), skipping names in `seen`.
pub fn read(elf: &Elf<'_>, out: &mut Scan, seen: &mut HashSet<String>) {
    for s in elf.shdrs.iter().filter(|s| s.sh_type == SHT_NOTE) {
        if elf.section_name(s) != Some(b".note.dlopen") {
            continue;
        }
        let Ok(bytes) = elf.slice(s.offset, s.size, ".note.dlopen") else {
            out.problems.push(Problem::BadNote {
                offset: s.offset,
                reason: "the section runs past the end of the file".into(),
            });
            continue;
        };
        let align = if s.addralign == 8 { 8 } else { 4 };
        for note in notes(bytes, s.offset, align, elf) {
            match note {
                Ok((offset, desc)) => entries(offset, desc, out, seen),
                Err(p) => {
                    out.problems.push(p);
                    break;
                }
            }
        }
    }
}

/// The dlopen notes of one section: `(file offset, JSON bytes)`, or the
/// problem that ends the walk.
fn notes<'a>(
    bytes: &'a [u8],
    base: u64,
    align: usize,
    elf: &Elf<'_>,
) -> Vec<Result<(u64, &'a [u8]), Problem>> {
    let l = elf.layout;
    let mut out = Vec::new();
    let mut at = 0usize;
    let pad = |n: usize| n.div_ceil(align) * align;
    while at < bytes.len() {
        let offset = base + at as u64;
        let bad = |reason: String| Problem::BadNote { offset, reason };
        let head = |i: usize| l.u32(bytes, (at + 4 * i) as u64, "note header");
        let (Ok(namesz), Ok(descsz), Ok(kind)) = (head(0), head(1), head(2)) else {
            out.push(Err(bad("the note header is cut short".into())));
            break;
        };
        let (namesz, descsz) = (namesz as usize, descsz as usize);
        let name_at = at + 12;
        let desc_at = name_at.saturating_add(pad(namesz));
        let end = desc_at.saturating_add(pad(descsz));
        if desc_at.saturating_add(descsz) > bytes.len() {
            out.push(Err(bad(format!(
                "it declares {descsz} bytes of data and the section ends before them"
            ))));
            break;
        }
        let name = crate::elf::cstr(&bytes[name_at..name_at + namesz]).unwrap_or_default();
        if name == b"FDO" && kind == NT_FDO_DLOPEN_METADATA {
            if descsz > MAX_NOTE {
                out.push(Err(bad(format!(
                    "its JSON is {descsz} bytes, more than the {MAX_NOTE} this tool reads"
                ))));
                break;
            }
            out.push(Ok((offset, &bytes[desc_at..desc_at + descsz])));
        }
        at = end.max(at + 12);
    }
    out
}

/// The targets of one note's JSON.
fn entries(offset: u64, desc: &[u8], out: &mut Scan, seen: &mut HashSet<String>) {
    let json = crate::elf::cstr(desc).unwrap_or(desc);
    let parsed: Result<Vec<Entry>, _> = serde_json::from_slice(json);
    let list = match parsed {
        Ok(list) => list,
        Err(e) => {
            out.problems.push(Problem::BadNote {
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
        });
    }
}
