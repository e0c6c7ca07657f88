use super::*;
use crate::elf::classify::classify;
use crate::elf::runpath::Tag;
use crate::elf::{
    Dyn, Elf, ElfError, Layout, Phdr, DT_NEEDED, DT_RPATH, DT_RUNPATH, DT_STRSZ, DT_STRTAB, PF_R,
    PF_W, PT_DYNAMIC, PT_LOAD, PT_NULL,
};

/// A minimal dynamic ELF file of any class and byte order: one PT_LOAD
/// over the whole file, PT_DYNAMIC, optionally a PT_NULL, a `.dynstr` and
/// a `.dynamic` with DT_NEEDED, DT_STRTAB, DT_STRSZ and DT_RUNPATH.
fn synthetic(l: Layout, machine: u16, spare: bool) -> Vec<u8> {
    let base = 0x10000u64;
    let nph = if spare { 3 } else { 2 };
    let dynstr = b"\0libc.so.6\0/old/path\0".to_vec();
    let str_off = l.ehdr_size() + nph * l.phdr_size();
    let dyn_off = (str_off + dynstr.len() as u64).next_multiple_of(8);
    let dyns = [
        Dyn { tag: DT_NEEDED, val: 1 },
        Dyn { tag: DT_STRTAB, val: base + str_off },
        Dyn { tag: DT_STRSZ, val: dynstr.len() as u64 },
        Dyn { tag: DT_RUNPATH, val: 11 },
        Dyn { tag: 0, val: 0 },
    ];
    let len = dyn_off + dyns.len() as u64 * l.dyn_size();
    let mut out = Vec::new();
    out.extend_from_slice(b"\x7fELF");
    out.push(if l.is64 { 2 } else { 1 });
    out.push(if l.little { 1 } else { 2 });
    out.push(1);
    out.resize(16, 0);
    l.put_u16(&mut out, ET_DYN_TEST);
    l.put_u16(&mut out, machine);
    l.put_u32(&mut out, 1);
    l.put_word(&mut out, base);
    l.put_word(&mut out, l.ehdr_size());
    l.put_word(&mut out, 0);
    l.put_u32(&mut out, 0);
    l.put_u16(&mut out, l.ehdr_size() as u16);
    l.put_u16(&mut out, l.phdr_size() as u16);
    l.put_u16(&mut out, nph as u16);
    l.put_u16(&mut out, l.shdr_size() as u16);
    l.put_u16(&mut out, 0);
    l.put_u16(&mut out, 0);
    let load = Phdr {
        p_type: PT_LOAD,
        flags: PF_R | PF_W,
        offset: 0,
        vaddr: base,
        paddr: base,
        filesz: len,
        memsz: len,
        align: 0x1000,
    };
    load.write(l, &mut out);
    let dsz = dyns.len() as u64 * l.dyn_size();
    Phdr {
        p_type: PT_DYNAMIC,
        flags: PF_R | PF_W,
        offset: dyn_off,
        vaddr: base + dyn_off,
        paddr: base + dyn_off,
        filesz: dsz,
        memsz: dsz,
        align: 8,
    }
    .write(l, &mut out);
    if spare {
        Phdr {
            p_type: PT_NULL,
            flags: 0,
            offset: 0,
            vaddr: 0,
            paddr: 0,
            filesz: 0,
            memsz: 0,
            align: 0,
        }
        .write(l, &mut out);
    }
    out.extend_from_slice(&dynstr);
    out.resize(dyn_off as usize, 0);
    for d in &dyns {
        d.write(l, &mut out);
    }
    out
}

const ET_DYN_TEST: u16 = 3;

fn apply(data: &[u8], rw: &Rewrite) -> Vec<u8> {
    let mut out = data.to_vec();
    for e in &rw.edits {
        out[e.offset as usize..e.offset as usize + e.bytes.len()].copy_from_slice(&e.bytes);
    }
    if !rw.append.is_empty() {
        out.resize(rw.append_at as usize, 0);
    }
    for p in &rw.append {
        match p {
            Piece::Bytes(b) => out.extend_from_slice(b),
            Piece::Input { offset, len } => {
                out.extend_from_slice(&data[*offset as usize..(*offset + *len) as usize])
            }
        }
    }
    out
}

#[test]
fn every_class_and_byte_order_round_trips() {
    for (is64, little, machine) in
        [(false, true, 3), (true, true, 62), (false, false, 20), (true, false, 21)]
    {
        for spare in [false, true] {
            let l = Layout { is64, little };
            let data = synthetic(l, machine, spare);
            let elf = Elf::parse(&data).unwrap();
            assert_eq!(classify(&elf).unwrap(), None, "{l:?}");
            let dynamic = elf.dynamic().unwrap().unwrap();
            assert_eq!(
                current_path(&elf, &dynamic).unwrap(),
                Some((&b"/old/path"[..], Tag::Runpath))
            );
            let value = b"/run/opengl-driver-32/lib:/old/path";
            let rw = rewrite(&elf, &dynamic, value, Tag::Runpath).unwrap();
            let expected =
                if spare { Strategy::NewSegment } else { Strategy::NewSegmentMovedHeaders };
            assert_eq!(rw.strategy, expected, "{l:?}");
            let new = apply(&data, &rw);
            assert_eq!(new.len() as u64, rw.new_len(data.len() as u64));
            verify(&elf, &new, value, Tag::Runpath).unwrap();
            let parsed = Elf::parse(&new).unwrap();
            let nd = parsed.dynamic().unwrap().unwrap();
            assert_eq!(current_path(&parsed, &nd).unwrap(), Some((&value[..], Tag::Runpath)));
            assert_eq!(parsed.dynstr(&nd).unwrap().get(1).unwrap(), b"libc.so.6");
        }
    }
}

#[test]
fn only_the_tag_changes_when_the_string_is_right() {
    let l = Layout { is64: true, little: true };
    let data = synthetic(l, 62, false);
    let elf = Elf::parse(&data).unwrap();
    let dynamic = elf.dynamic().unwrap().unwrap();
    let rw = rewrite(&elf, &dynamic, b"/old/path", Tag::Rpath).unwrap();
    assert_eq!(rw.strategy, Strategy::TagOnly);
    assert_eq!(rw.edits.len(), 1);
    assert_eq!(rw.edits[0].bytes.len(), 8);
    let new = apply(&data, &rw);
    assert_eq!(new.len(), data.len());
    verify(&elf, &new, b"/old/path", Tag::Rpath).unwrap();
    let parsed = Elf::parse(&new).unwrap();
    let nd = parsed.dynamic().unwrap().unwrap();
    assert_eq!(current_path(&parsed, &nd).unwrap(), Some((&b"/old/path"[..], Tag::Rpath)));
}

#[test]
fn a_second_search_path_entry_is_refused() {
    // Found by fuzzing: a second DT_RPATH (a mutated tag) was left in
    // place while the first was rewritten; glibc reads the last one.
    for (tag, name) in [(DT_RUNPATH, "DT_RUNPATH"), (DT_RPATH, "DT_RPATH")] {
        let l = Layout { is64: true, little: true };
        let mut data = synthetic(l, 62, false);
        let elf = Elf::parse(&data).unwrap();
        let dyn_off = elf.dynamic().unwrap().unwrap().offset as usize;
        // Entry 0 is DT_NEEDED (string 1), entry 3 DT_RUNPATH (string 11).
        data[dyn_off..dyn_off + 8].copy_from_slice(&(tag as u64).to_le_bytes());
        data[dyn_off + 3 * 16..dyn_off + 3 * 16 + 8].copy_from_slice(&(tag as u64).to_le_bytes());
        let elf = Elf::parse(&data).unwrap();
        let dynamic = elf.dynamic().unwrap().unwrap();
        match current_path(&elf, &dynamic) {
            Err(ElfError::Unsupported(m)) => {
                assert!(m.contains(&format!("2 {name} entries")), "{m}")
            }
            other => panic!("{name}: {other:?}"),
        }
        // One of each is the normal case (DT_RUNPATH wins).
        data[dyn_off..dyn_off + 8].copy_from_slice(
            &(if tag == DT_RUNPATH { DT_RPATH } else { DT_RUNPATH } as u64).to_le_bytes(),
        );
        let elf = Elf::parse(&data).unwrap();
        let dynamic = elf.dynamic().unwrap().unwrap();
        assert_eq!(
            current_path(&elf, &dynamic).unwrap().map(|(_, t)| t),
            Some(Tag::Runpath),
            "{name}"
        );
    }
}

#[test]
fn a_corrupted_result_fails_verification() {
    let l = Layout { is64: true, little: true };
    let data = synthetic(l, 62, false);
    let elf = Elf::parse(&data).unwrap();
    let dynamic = elf.dynamic().unwrap().unwrap();
    let value = b"/run/opengl-driver/lib:/old/path";
    let rw = rewrite(&elf, &dynamic, value, Tag::Runpath).unwrap();
    let mut new = apply(&data, &rw);
    // Damage the DT_NEEDED string in the `.dynstr` copy.
    let needle = new.windows(9).rposition(|w| w == b"libc.so.6").unwrap();
    new[needle] = b'X';
    assert!(matches!(verify(&elf, &new, value, Tag::Runpath), Err(ElfError::Verify(_))));
    assert!(matches!(verify(&elf, &data, value, Tag::Runpath), Err(ElfError::Verify(_))));
}
