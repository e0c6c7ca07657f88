//! The caps of docs/robustness.md ("Limits"), one test each where the cap
//! is ours: a hostile header is refused quickly, without a large allocation.
//! Where the cap guards the writer, the input is a gcc-built file changed
//! just past the cap (sparse where large): `auto-add-driver-runpath` names
//! the file and the reason and leaves it byte-identical, and the same file
//! just within the cap is patched.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use nix_cuda_hooks::elf::{Elf, ElfError, PT_DYNAMIC};

/// A 64-bit little-endian ELF header with `e_shoff` = 64 and extended
/// section numbering (`e_shnum` = 0, the count in section 0's `sh_size`).
fn extended_count(count: u64) -> Vec<u8> {
    let mut d = vec![0u8; 64 + 64];
    d[..4].copy_from_slice(b"\x7fELF");
    d[4] = 2; // ELFCLASS64
    d[5] = 1; // little endian
    d[6] = 1;
    d[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
    d[18..20].copy_from_slice(&62u16.to_le_bytes()); // x86-64
    d[40..48].copy_from_slice(&64u64.to_le_bytes()); // e_shoff
    d[58..60].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    d[64 + 32..64 + 40].copy_from_slice(&count.to_le_bytes()); // sh_size of section 0
    d
}

#[test]
fn section_header_count_cap() {
    let start = Instant::now();
    for count in [(1u64 << 16) + 1, 1 << 40, u64::MAX] {
        match Elf::parse(&extended_count(count)) {
            Err(ElfError::Corrupt(m)) => assert!(m.contains("section headers"), "{m}"),
            other => panic!("{count}: {other:?}"),
        }
    }
    // Under the cap but past the end of the file: truncated, not allocated.
    assert!(matches!(Elf::parse(&extended_count(1 << 16)), Err(ElfError::Truncated { .. })));
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn host_elf_walk_refuses_huge_counts_quickly() {
    let start = Instant::now();
    for count in [1u64 << 16, 1 << 40, u64::MAX] {
        assert!(nix_cuda_hooks::devicecode::host::parse(&extended_count(count)).is_err());
    }
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn in_memory_apply_cap() {
    use nix_cuda_hooks::elf::patch::{Piece, Rewrite, Strategy, MAX_APPLY_LEN};
    let rw = Rewrite {
        strategy: Strategy::NewSegment,
        edits: vec![],
        append_at: MAX_APPLY_LEN,
        append: vec![Piece::Bytes(vec![1])],
    };
    assert!(matches!(rw.apply(b"x"), Err(ElfError::Unsupported(_))));
}

/// A fatbin container of `n` LZ4 ELF entries, each a 5-byte block (token
/// 0x40 + 4 literals) that decodes to 4 bytes.
fn lz4_container(n: usize) -> Vec<u8> {
    let mut body = Vec::new();
    for _ in 0..n {
        let payload = [0x40u8, 1, 2, 3, 4, 0, 0, 0];
        let mut b = Vec::new();
        b.extend(2u16.to_le_bytes()); // ELF
        b.extend(0x0101u16.to_le_bytes());
        b.extend(64u32.to_le_bytes());
        b.extend((payload.len() as u64).to_le_bytes());
        b.extend(5u32.to_le_bytes()); // compressed size
        b.extend(0u32.to_le_bytes());
        b.extend(8u16.to_le_bytes());
        b.extend(1u16.to_le_bytes());
        b.extend(80u32.to_le_bytes());
        b.extend([0u8; 8]);
        b.extend((0x11u64 | 0x2000).to_le_bytes()); // 64-bit, Linux, LZ4
        b.extend(0u64.to_le_bytes());
        b.extend(4u64.to_le_bytes()); // uncompressed size
        b.resize(64, 0);
        b.extend(payload);
        body.extend(b);
    }
    let mut c = Vec::new();
    c.extend(0xBA55_ED50u32.to_le_bytes());
    c.extend(1u16.to_le_bytes());
    c.extend(16u16.to_le_bytes());
    c.extend((body.len() as u64).to_le_bytes());
    c.extend(body);
    c
}

#[test]
fn decompression_budget_per_file() {
    use nix_cuda_hooks::fatbin::{self, codec};
    let data = lz4_container(3);
    let region = fatbin::parse_region(&data, 0);
    let entries: Vec<_> = region.entries().collect();
    assert_eq!(entries.len(), 3);
    let budget = codec::Budget::new(9);
    assert_eq!(codec::plain_within(entries[0], &budget).unwrap().as_ref(), &[1, 2, 3, 4]);
    assert_eq!(codec::plain_within(entries[1], &budget).unwrap().as_ref(), &[1, 2, 3, 4]);
    let err = codec::plain_within(entries[2], &budget).unwrap_err().to_string();
    assert!(err.contains("decompressed total"), "{err}");
    // The per-file default is far above any real library's total.
    assert_eq!(codec::MAX_PLAIN_PER_FILE, 8 << 30);
}

// Little-endian field access for the ELF64 files gcc builds here.
fn get16(d: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(d[at..at + 2].try_into().unwrap())
}
fn put16(d: &mut [u8], at: usize, v: u16) {
    d[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(d: &mut [u8], at: usize, v: u32) {
    d[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn get64(d: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(d[at..at + 8].try_into().unwrap())
}
fn put64(d: &mut [u8], at: usize, v: u64) {
    d[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
/// File offset of program header `i` (ELF64: 56 bytes each).
fn phdr_at(d: &[u8], i: usize) -> usize {
    get64(d, 32) as usize + i * 56
}
/// Index of the first program header of type `t`.
fn phdr_index(d: &[u8], t: u32) -> usize {
    Elf::parse(d).unwrap().phdrs.iter().position(|p| p.p_type == t).unwrap()
}

/// `auto-add-driver-runpath --format json` (plus `extra`) on `dir/name`.
fn patch_json(dir: &Path, name: &str, extra: &[&str]) -> (std::process::Output, serde_json::Value) {
    let r = bin(dir, &[extra, &["--format", "json", name]].concat());
    let v = serde_json::from_slice(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&r)));
    (r, v)
}

/// Runs the binary on `dir/name`, which must fail naming the file with
/// `reason`, and leave it byte-identical.
fn refused(dir: &Path, name: &str, reason: &str) {
    let before = std::fs::read(dir.join(name)).unwrap();
    let r = bin(dir, &[name]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(stderr.contains(&format!("ERROR: addDriverRunpath: {name}: ")), "{}", text(&r));
    assert!(stderr.contains(reason), "{reason}: {}", text(&r));
    assert!(before == std::fs::read(dir.join(name)).unwrap(), "{name} was modified");
}

/// The search path readelf reads (no warning allowed).
fn runpath_of(file: &Path) -> Option<String> {
    search_path(file).map(|(_, v)| v)
}

const DRIVER: &str = "/run/opengl-driver/lib";

/// A gcc-built shared library without CET notes (so no PT_GNU_PROPERTY: no
/// program header is spare).
fn gcc_lib(dir: &Path) -> Vec<u8> {
    tool("gcc");
    std::fs::write(dir.join("lib.c"), "int answer(void) { return 42; }\n").unwrap();
    sh(dir, "gcc -shared -fPIC -fcf-protection=none -o lib.so lib.c");
    std::fs::read(dir.join("lib.so")).unwrap()
}

#[test]
fn dynamic_entry_cap() {
    // The dynamic segment is moved to the end of the file and padded with
    // DT_SYMENT entries. The reader takes 65,536 slots, DT_NULL included;
    // the writer, which adds DT_RUNPATH, writes no more than it reads back.
    const DT_SYMENT: u64 = 11;
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let orig = gcc_lib(dir);
    let entries = Elf::parse(&orig).unwrap().dynamic().unwrap().unwrap().entries;
    assert!(entries.iter().all(|e| e.tag != 29 && e.tag != 15), "no search path yet");
    let make = |name: &str, n: usize| {
        let mut d = orig.clone();
        d.resize(d.len().next_multiple_of(8), 0);
        let at = d.len() as u64;
        for e in &entries {
            d.extend((e.tag as u64).to_le_bytes());
            d.extend(e.val.to_le_bytes());
        }
        for _ in entries.len()..n {
            d.extend(DT_SYMENT.to_le_bytes());
            d.extend(24u64.to_le_bytes());
        }
        d.extend([0u8; 16]);
        let ph = phdr_at(&d, phdr_index(&d, PT_DYNAMIC));
        put64(&mut d, ph + 8, at);
        put64(&mut d, ph + 32, (n as u64 + 1) * 16);
        put64(&mut d, ph + 40, (n as u64 + 1) * 16);
        std::fs::write(dir.join(name), &d).unwrap();
        d
    };
    // 65,536 entries + DT_NULL: refused while reading.
    make("beyond.so", 65_536);
    let start = Instant::now();
    refused(dir, "beyond.so", "more than 65536 dynamic entries");
    assert!(start.elapsed() < Duration::from_secs(10));
    // 65,535 + DT_NULL: read, but one more entry would not read back.
    let d = make("full.so", 65_535);
    assert_eq!(Elf::parse(&d).unwrap().dynamic().unwrap().unwrap().entries.len(), 65_535);
    refused(dir, "full.so", "would have 65537 entries");
    // 65,534 + DT_NULL: patched, and the result reads back.
    make("within.so", 65_534);
    let (r, v) = patch_json(dir, "within.so", &[]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert_eq!(v["report"]["files"][0]["action"], "patched", "{v}");
    assert_eq!(runpath_of(&dir.join("within.so")).as_deref(), Some(DRIVER));
    let new = std::fs::read(dir.join("within.so")).unwrap();
    let d = Elf::parse(&new).unwrap().dynamic().unwrap().unwrap();
    assert_eq!(d.entries.len(), 65_535);
    let fillers = d.entries.iter().filter(|e| e.tag as u64 == DT_SYMENT).count();
    assert_eq!(
        fillers,
        65_534 - entries.len() + usize::from(entries.iter().any(|e| e.tag as u64 == DT_SYMENT))
    );
    // A second run finds the driver entry and changes nothing.
    let r = bin(dir, &["within.so"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(new == std::fs::read(dir.join("within.so")).unwrap());
}

#[test]
fn program_header_cap() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let orig = gcc_lib(dir);
    let phnum = get16(&orig, 56) as usize;
    assert!(Elf::parse(&orig).unwrap().phdrs.iter().all(|p| p.p_type != 0), "a spare entry");

    // e_phnum = 0xffff (PN_XNUM): the real count would be in section 0's
    // sh_info (extended numbering); no linker writes it for real files.
    let mut x = orig.clone();
    put16(&mut x, 56, 0xffff);
    std::fs::write(dir.join("xnum.so"), &x).unwrap();
    refused(dir, "xnum.so", "PN_XNUM");

    // 65,534 headers (the most e_phnum can count), the table at the end of
    // the file: the originals then `filler` entries.
    let table = |name: &str, filler: Option<u32>| {
        let mut d = orig.clone();
        d.resize(d.len().next_multiple_of(8), 0);
        let at = d.len();
        let first = phdr_at(&d, 0);
        d.extend_from_within(first..first + phnum * 56);
        put64(&mut d, 32, at as u64);
        put16(&mut d, 56, 0xfffe);
        let end = at + 0xfffe * 56;
        if let Some(ty) = filler {
            for _ in phnum..0xfffe {
                let mut e = [0u8; 56];
                put32(&mut e, 0, ty);
                d.extend_from_slice(&e);
            }
        }
        std::fs::write(dir.join(name), &d).unwrap();
        // PT_NULL fillers are zeros: a sparse tail.
        let f = std::fs::OpenOptions::new().write(true).open(dir.join(name)).unwrap();
        f.set_len(end as u64).unwrap();
    };
    // No spare entry (fillers of an OS-specific type the loader ignores):
    // the new PT_LOAD would make 65,535 = PN_XNUM entries.
    table("full.so", Some(0x6000_0000));
    refused(dir, "full.so", "too many program headers");
    // PT_NULL fillers: one becomes the new PT_LOAD, the count stays.
    table("spare.so", None);
    let (r, v) = patch_json(dir, "spare.so", &[]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert_eq!(v["report"]["files"][0]["strategy"], "new-segment", "{v}");
    assert_eq!(runpath_of(&dir.join("spare.so")).as_deref(), Some(DRIVER));
    let new = std::fs::read(dir.join("spare.so")).unwrap();
    let e = Elf::parse(&new).unwrap();
    assert_eq!(e.phdrs.len(), 0xfffe);
    assert_eq!(e.loads().count(), Elf::parse(&orig).unwrap().loads().count() + 1);
}

#[test]
fn exec_hole_cap() {
    use nix_cuda_hooks::elf::patch::MAX_EXEC_HOLE;
    // A program without section headers and without a spare entry: its
    // table moves into the new segment, placed so that `vaddr - offset`
    // equals the first segment's (pre-5.18 kernels' AT_PHDR), leaving a
    // sparse hole as large as .bss — up to MAX_EXEC_HOLE; a larger .bss
    // gets the library placement (right after the old end) instead.
    tool("gcc");
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(
        dir.join("main.c"),
        "static char big[BIG];\nint main(void) { big[BIG - 1] = 1; return big[0]; }\n",
    )
    .unwrap();
    for (name, bss) in
        [("within", MAX_EXEC_HOLE - (64 << 10)), ("beyond", MAX_EXEC_HOLE + (64 << 10))]
    {
        sh(dir, &format!("gcc -no-pie -fcf-protection=none -DBIG={bss} -o {name} main.c"));
        let mut d = std::fs::read(dir.join(name)).unwrap();
        put64(&mut d, 40, 0); // e_shoff
        put16(&mut d, 60, 0); // e_shnum
        put16(&mut d, 62, 0); // e_shstrndx
                              // A PT_NOTE repeating PT_GNU_PROPERTY would be reused (spare): the
                              // property header becomes an OS-specific type the loader ignores.
        if let Some(i) = Elf::parse(&d).unwrap().phdrs.iter().position(|p| p.p_type == 0x6474_e553)
        {
            let at = phdr_at(&d, i);
            put32(&mut d, at, 0x6000_0000);
        }
        std::fs::write(dir.join(name), &d).unwrap();
        sh(dir, &format!("./{name}"));
        let old = Elf::parse(&d).unwrap();
        let first = *old.loads().next().unwrap();
        let delta = first.vaddr - first.offset;
        let min_off = (d.len() as u64).next_multiple_of(16);

        let (r, v) = patch_json(dir, name, &[]);
        assert_eq!(r.status.code(), Some(0), "{}", text(&r));
        assert_eq!(v["report"]["files"][0]["strategy"], "new-segment-moved-headers", "{v}");
        let new_bytes = std::fs::read(dir.join(name)).unwrap();
        let new = Elf::parse(&new_bytes).unwrap();
        let added: Vec<_> = new.loads().filter(|p| !old.loads().any(|o| o == *p)).collect();
        assert_eq!(added.len(), 1);
        let seg = added[0];
        assert_eq!(new.phoff, seg.offset, "the table is at the start of the new segment");
        let hole = seg.offset - min_off;
        if name == "within" {
            assert_eq!(seg.vaddr - seg.offset, delta);
            assert!(hole <= MAX_EXEC_HOLE && hole > MAX_EXEC_HOLE - (128 << 10), "{hole}");
            // Sparse: the hole takes no disk blocks.
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(dir.join(name)).unwrap();
            assert!(m.len() > hole);
            assert!(m.blocks() * 512 < 8 << 20, "{} bytes on disk", m.blocks() * 512);
        } else {
            assert_eq!(hole, 0, "library placement");
            assert_ne!(seg.vaddr - seg.offset, delta);
            assert!(new_bytes.len() < d.len() + (64 << 10));
        }
        // Both load (this kernel is >= 5.18 for the second).
        sh(dir, &format!("./{name}"));
    }
}

#[test]
fn grow_block_cap() {
    // A note section right after .note.gnu.build-id, just after the
    // program header table: the grow strategy moves both as one block when
    // it is at most 16 MiB, else the table moves. (Both notes are in the
    // way of the new entry from the start, so the block never grows: the
    // cap was checked only when it grew, and this 16 MiB + 4 block was
    // moved before the fix.) Notes are zeros: the files are made sparse
    // (fallocate --dig-holes) and only planned (--check), except the one
    // within the cap.
    const CAP: u64 = nix_cuda_hooks::elf::patch::MAX_GROW_BLOCK;
    assert_eq!(CAP, 16 << 20);
    tool("gcc");
    tool("fallocate");
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let build = |name: &str, desc: u64| {
        std::fs::write(
            dir.join(format!("{name}.c")),
            format!(
                "int answer(void) {{ return 42; }}\n__asm__(\".section .note.big,\\\"a\\\",@note\\n\
                 .balign 4\\n.long 4\\n.long {desc}\\n.long 0x4e43\\n.asciz \\\"big\\\"\\n\
                 .skip {desc}\\n.previous\\n\");\n"
            ),
        )
        .unwrap();
        sh(
            dir,
            &format!(
                "gcc -shared -fPIC -fcf-protection=none -o {name}.so {name}.c && \
                 fallocate --dig-holes {name}.so"
            ),
        );
        let d = std::fs::read(dir.join(format!("{name}.so"))).unwrap();
        let e = Elf::parse(&d).unwrap();
        let tab_end = e.phoff + e.phdrs.len() as u64 * 56;
        let id = e.shdrs.iter().find(|s| e.section_name(s) == Some(b".note.gnu.build-id")).unwrap();
        let big = e.shdrs.iter().find(|s| e.section_name(s) == Some(b".note.big")).unwrap();
        assert_eq!(id.offset, tab_end, "{name}: build-id right after the table");
        assert_eq!(big.offset, id.offset + id.size, "{name}: the big note right after it");
        big.offset + big.size - id.offset
    };
    let plan = |name: &str| {
        let file = format!("{name}.so");
        let before = std::fs::read(dir.join(&file)).unwrap();
        let (r, v) = patch_json(dir, &file, &["--check"]);
        assert_eq!(r.status.code(), Some(1), "{}", text(&r));
        assert!(before == std::fs::read(dir.join(&file)).unwrap());
        v["report"]["files"][0]["strategy"].as_str().unwrap().to_string()
    };
    // build-id (36 bytes) + note header (16) + desc.
    assert_eq!(build("within", CAP - 52), CAP);
    assert_eq!(build("beyond", CAP - 48), CAP + 4);
    assert_eq!(plan("within"), "new-segment-grown-headers");
    assert_eq!(plan("beyond"), "new-segment-moved-headers");
    let (r, v) = patch_json(dir, "within.so", &[]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert_eq!(v["report"]["files"][0]["strategy"], "new-segment-grown-headers", "{v}");
    assert_eq!(runpath_of(&dir.join("within.so")).as_deref(), Some(DRIVER));
    sh(dir, "rm within.so beyond.so");
}

#[test]
fn archives_inside_archives_are_not_entered() {
    use nix_cuda_hooks::devicecode::host::{self, Object};
    // An object with a (synthetic) .nv_fatbin of 3 entries, in an archive,
    // and that archive as a member of another beside the same object.
    tool("gcc");
    tool("objcopy");
    tool("ar");
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(dir.join("fat.bin"), lz4_container(3)).unwrap();
    std::fs::write(dir.join("lib.c"), "int answer(void) { return 42; }\n").unwrap();
    sh(
        dir,
        "set -e
         gcc -c -o fat.o lib.c
         objcopy --add-section .nv_fatbin=fat.bin fat.o
         ar rc inner.a fat.o
         ar rc outer.a fat.o inner.a",
    );
    let entries = |o: &Object<'_>| match o {
        Object::Elf(e) => e.sections.iter().map(|s| s.region.entries().count()).sum::<usize>(),
        other => panic!("{}", other.format()),
    };
    let inner = std::fs::read(dir.join("inner.a")).unwrap();
    match host::parse(&inner).unwrap() {
        Object::Archive(m) => assert_eq!(entries(m[0].object.as_ref().unwrap()), 3),
        other => panic!("{}", other.format()),
    }
    let outer = std::fs::read(dir.join("outer.a")).unwrap();
    match host::parse(&outer).unwrap() {
        Object::Archive(m) => {
            assert_eq!(m.len(), 2);
            assert_eq!(entries(m[0].object.as_ref().unwrap()), 3);
            assert_eq!(m[1].name, b"inner.a");
            assert!(matches!(m[1].object, Ok(Object::Other)), "{:?}", m[1].object);
        }
        other => panic!("{}", other.format()),
    }
    assert!(matches!(host::parse_member(&inner), Ok(Object::Other)));

    // 100,000 levels of nesting (6.8 MB): read at once, one level, no
    // recursion. Every level adds 68 bytes (magic and member header), so all
    // sizes stay even and no padding is needed.
    assert_eq!(outer.len() % 2, 0);
    let levels = 100_000;
    let mut data = Vec::with_capacity(outer.len() + levels * 68);
    for k in (0..levels).rev() {
        let size = outer.len() + k * 68;
        data.extend_from_slice(b"!<arch>\n");
        let header = format!("{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n", "n.a/", 0, 0, 0, 644, size);
        assert_eq!(header.len(), 60);
        data.extend_from_slice(header.as_bytes());
    }
    data.extend_from_slice(&outer);
    let start = Instant::now();
    match host::parse(&data).unwrap() {
        Object::Archive(m) => {
            assert_eq!(m.len(), 1);
            assert!(matches!(m[0].object, Ok(Object::Other)));
        }
        other => panic!("{}", other.format()),
    }
    assert!(start.elapsed() < Duration::from_secs(1));
}
