//! The RUNPATH round trip shared by the `runpath` fuzz target and
//! `tests/roundtrip_corpus.rs`: plan and rewrite as `auto-add-driver-runpath`
//! does; when the writer accepts (rewrite, device-code guard and verifier all
//! pass), the result must read back, by our reader and by `object`, with the
//! intended search path, and every section other than `.dynamic` (and the
//! `.dynstr` copy, which must start with the old table) byte-identical.
//! Violations panic: they are findings.

use nix_cuda_hooks::elf::patch::{self, Rewrite};
use nix_cuda_hooks::elf::runpath::{self, Plan, Tag};
use nix_cuda_hooks::elf::{Elf, SHT_DYNAMIC, SHT_NOBITS, SHT_STRTAB};

/// An accepted rewrite.
#[allow(dead_code)]
pub struct Patched {
    /// The patched file.
    pub bytes: Vec<u8>,
    /// The search path written.
    pub value: Vec<u8>,
    /// Under which tag.
    pub tag: Tag,
    /// The rewrite.
    pub rewrite: Rewrite,
}

/// The planner options: the default driver entry; `variant` picks
/// `--remove-stubs` / `--force-rpath` / `--cuda-compat` / an appended
/// `--dlopen-search` folder (0..16).
pub fn options(variant: u8) -> runpath::Options {
    runpath::Options {
        driver_entry: b"/run/opengl-driver/lib".to_vec(),
        compat_entry: (variant & 4 != 0).then(|| b"/nix/store/h-cuda_compat/compat".to_vec()),
        remove_stubs: variant & 1 != 0,
        force_rpath: variant & 2 != 0,
        append_entries: if variant & 8 != 0 {
            vec![b"/nix/store/h-libplug/lib".to_vec()]
        } else {
            Vec::new()
        },
        made_from: None,
    }
}

/// Runs the round trip; `None` when the writer does not accept the input.
pub fn round_trip(data: &[u8], opts: &runpath::Options) -> Option<Patched> {
    let elf = Elf::parse(data).ok()?;
    let dynamic = elf.dynamic().ok()??;
    let current = patch::current_path(&elf, &dynamic).ok()?;
    let (value, tag) = match runpath::plan(current, opts) {
        Plan::Set { value, tag } => (value, tag),
        Plan::Unchanged | Plan::TooLong(_) => return None,
    };
    let rw = patch::rewrite(&elf, &dynamic, &value, tag).ok()?;
    for (offset, len) in patch::device_code_ranges(&elf) {
        let end = offset.saturating_add(len);
        if rw.edits.iter().any(|e| e.offset < end && offset < e.offset + e.bytes.len() as u64) {
            return None;
        }
    }
    let new = rw.apply(data).ok()?;
    patch::verify(&elf, &new, &value, tag).ok()?;

    // Accepted: now the invariants.
    let n = Elf::parse(&new).expect("our reader re-reads the patched file");
    let nd = n.dynamic().expect("dynamic readable").expect("dynamic present");
    let got = patch::current_path(&n, &nd).expect("search path readable");
    assert_eq!(got, Some((value.as_slice(), tag)), "search path reads back");
    let strtab = dynamic.get(nix_cuda_hooks::elf::DT_STRTAB);
    check_object(data, strtab, &new, &value, tag, n.layout.is64);
    check_sections(&elf, &n);
    Some(Patched { bytes: new, value, tag, rewrite: rw })
}

fn check_object(old: &[u8], strtab: Option<u64>, new: &[u8], value: &[u8], tag: Tag, is64: bool) {
    use object::read::elf::{Dyn, FileHeader, SectionHeader};
    use object::Endianness;
    /// Whether, in the original, the string table that object links to
    /// `.dynamic` is the one DT_STRTAB names and object can read it as
    /// strings (a fuzzed section table may link elsewhere, or give the table
    /// another type such as SHT_NULL; then object could not read the old
    /// strings either).
    fn consistent<H: FileHeader<Endian = Endianness>>(old: &[u8], strtab: Option<u64>) -> bool {
        let Ok(header) = H::parse(old) else { return false };
        let Ok(endian) = header.endian() else { return false };
        let Ok(sections) = header.sections(endian, old) else { return false };
        match sections.dynamic(endian, old) {
            Ok(Some((_, link))) => {
                sections.section(link).is_ok_and(|s| Some(s.sh_addr(endian).into()) == strtab)
                    && sections.strings(endian, old, link).is_ok()
            }
            _ => false,
        }
    }
    fn one<H: FileHeader<Endian = Endianness>>(
        old: &[u8],
        strtab: Option<u64>,
        new: &[u8],
        value: &[u8],
        tag: Tag,
    ) {
        let header = H::parse(new).expect("object parses the ELF header");
        let endian = header.endian().expect("object: endianness");
        header.program_headers(endian, new).expect("object parses the program headers");
        let sections = header.sections(endian, new).expect("object parses the section headers");
        let Some((dyns, link)) = sections.dynamic(endian, new).expect("object: .dynamic") else {
            // No section headers (or no SHT_DYNAMIC): nothing more object can say.
            return;
        };
        if !consistent::<H>(old, strtab) {
            return;
        }
        // `dynamic` returns the index of the linked string table.
        let strings = sections.strings(endian, new, link).expect("object: .dynamic's string table");
        let want = tag.dt();
        let mut found = None;
        for d in dyns {
            let t: i64 = d.d_tag(endian).0;
            if t == 0 {
                break;
            }
            if t == want {
                let off: u64 = d.d_val(endian).into();
                found = Some(strings.get(off as u32).expect("object: search path string"));
            }
        }
        assert_eq!(found, Some(value), "object reads the search path");
    }
    if is64 {
        one::<object::elf::FileHeader64<Endianness>>(old, strtab, new, value, tag)
    } else {
        one::<object::elf::FileHeader32<Endianness>>(old, strtab, new, value, tag)
    }
}

fn check_sections(old: &Elf<'_>, new: &Elf<'_>) {
    if old.shdrs.is_empty() {
        return;
    }
    if new.shdrs.is_empty() {
        // The writer copies the section header table only when it can; a
        // table dropped is a finding.
        panic!("section headers lost");
    }
    assert_eq!(old.shdrs.len(), new.shdrs.len(), "section count");
    // The string table `.dynamic` links to is the writer's `.dynstr` whatever
    // its (fuzzed) type: it may grow too.
    let dynstr = old.shdrs.iter().find(|s| s.sh_type == SHT_DYNAMIC).map(|s| s.link as usize);
    for (i, (o, n)) in old.shdrs.iter().zip(&new.shdrs).enumerate() {
        assert_eq!(
            (o.name, o.sh_type, o.flags, o.link, o.info, o.entsize),
            (n.name, n.sh_type, n.flags, n.link, n.info, n.entsize),
            "section {i}: header fields other than place and size"
        );
        // SHT_NULL has no contents (readelf dumps none; a fuzzed table may
        // have one "covering" the ELF header, which legitimately changes).
        if o.sh_type == SHT_NOBITS || o.sh_type == SHT_DYNAMIC || o.sh_type == 0 {
            continue;
        }
        // The ELF header and the program header table are the writer's to
        // change; a (fuzzed) section laid over them is not content.
        let overlaps =
            |a: u64, n: u64| o.offset < a.saturating_add(n) && a < o.offset.saturating_add(o.size);
        let l = old.layout;
        if overlaps(0, l.ehdr_size()) || overlaps(old.phoff, old.phdrs.len() as u64 * l.phdr_size())
        {
            continue;
        }
        let Ok(ob) = old.slice(o.offset, o.size, "old section") else { continue };
        let nb = new.slice(n.offset, n.size, "new section").expect("section readable");
        if ob != nb {
            assert!(
                (o.sh_type == SHT_STRTAB || Some(i) == dynstr)
                    && nb.len() > ob.len()
                    && nb.starts_with(ob),
                "section {i} changed"
            );
        }
    }
}
