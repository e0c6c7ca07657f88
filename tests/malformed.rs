//! Malformed and hostile input, written by a small fatbin/ELF writer here:
//! every case must give a clean error that names a file offset, keep what can
//! still be read, and never panic (the binary is run on them too).

use nix_cuda_hooks::devicecode::host::{self, Object, ReadError};
use nix_cuda_hooks::fatbin::{self, FatbinError, Kind};
use nix_cuda_hooks::inspect;

const OURS: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// An entry: 64-byte header (or `header_size` as given) then the payload.
struct E {
    kind: u16,
    header_size: u32,
    sm: u32,
    flags: u64,
    payload: Vec<u8>,
    compressed: u32,
    uncompressed: u64,
}

impl E {
    fn new(kind: u16, sm: u32) -> E {
        E {
            kind,
            header_size: 64,
            sm,
            flags: 0x11,
            payload: vec![0xab; 16],
            compressed: 0,
            uncompressed: 0,
        }
    }
    fn bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(self.kind.to_le_bytes());
        b.extend(0x0101u16.to_le_bytes());
        b.extend(self.header_size.to_le_bytes());
        b.extend((self.payload.len() as u64).to_le_bytes());
        b.extend(self.compressed.to_le_bytes());
        b.extend(0u32.to_le_bytes()); // options
        b.extend(8u16.to_le_bytes()); // minor
        b.extend(1u16.to_le_bytes()); // major
        b.extend(self.sm.to_le_bytes());
        b.extend([0u8; 8]); // identifier offset, length
        b.extend(self.flags.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(self.uncompressed.to_le_bytes());
        b.resize(b.len().max(self.header_size as usize), 0);
        b.extend(&self.payload);
        b
    }
}

fn container(entries: &[E]) -> Vec<u8> {
    let body: Vec<u8> = entries.iter().flat_map(E::bytes).collect();
    let mut b = Vec::new();
    b.extend(0xBA55_ED50u32.to_le_bytes());
    b.extend(1u16.to_le_bytes());
    b.extend(16u16.to_le_bytes());
    b.extend((body.len() as u64).to_le_bytes());
    b.extend(body);
    while b.len() % 8 != 0 {
        b.push(0);
    }
    b
}

/// A minimal ELF64 x86-64 file with the given sections `(name, sh_type, bytes)`.
fn host_elf(sections: &[(&str, u32, &[u8])]) -> Vec<u8> {
    let mut data = vec![0u8; 64];
    let mut shstrtab = vec![0u8];
    let mut headers: Vec<[u64; 5]> = Vec::new(); // name, type, offset, size
    for (name, ty, bytes) in sections {
        while data.len() % 8 != 0 {
            data.push(0);
        }
        headers.push([
            shstrtab.len() as u64,
            u64::from(*ty),
            data.len() as u64,
            bytes.len() as u64,
            0,
        ]);
        shstrtab.extend(name.as_bytes());
        shstrtab.push(0);
        if *ty != 8 {
            data.extend(*bytes);
        }
    }
    let shstr_name = shstrtab.len() as u64;
    shstrtab.extend(b".shstrtab\0");
    let shstr_off = data.len() as u64;
    data.extend(&shstrtab);
    headers.push([shstr_name, 3, shstr_off, shstrtab.len() as u64, 0]);
    while data.len() % 8 != 0 {
        data.push(0);
    }
    let shoff = data.len() as u64;
    data.extend([0u8; 64]); // null section
    for h in &headers {
        let mut s = Vec::new();
        s.extend((h[0] as u32).to_le_bytes());
        s.extend((h[1] as u32).to_le_bytes());
        s.extend(0u64.to_le_bytes()); // flags
        s.extend(0u64.to_le_bytes()); // addr
        s.extend(h[2].to_le_bytes());
        s.extend(h[3].to_le_bytes());
        s.extend([0u8; 8]); // link, info
        s.extend(8u64.to_le_bytes());
        s.extend(0u64.to_le_bytes());
        data.extend(s);
    }
    let shnum = headers.len() as u16 + 1;
    let mut h = Vec::new();
    h.extend(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
    h.extend(1u16.to_le_bytes()); // ET_REL
    h.extend(62u16.to_le_bytes()); // EM_X86_64
    h.extend(1u32.to_le_bytes());
    h.extend(0u64.to_le_bytes()); // entry
    h.extend(0u64.to_le_bytes()); // phoff
    h.extend(shoff.to_le_bytes());
    h.extend(0u32.to_le_bytes()); // flags
    h.extend(64u16.to_le_bytes());
    h.extend(56u16.to_le_bytes());
    h.extend(0u16.to_le_bytes());
    h.extend(64u16.to_le_bytes());
    h.extend(shnum.to_le_bytes());
    h.extend((shnum - 1).to_le_bytes());
    data[..64].copy_from_slice(&h);
    data
}

fn good() -> Vec<u8> {
    let mut b = container(&[E::new(2, 80)]);
    b.extend(container(&[E::new(2, 80), E::new(1, 80), E::new(2, 90)]));
    b
}

#[test]
fn a_well_formed_region_reads_fully() {
    let data = good();
    let r = fatbin::parse_region(&data, 0x1000);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.containers.len(), 2);
    assert_eq!(r.containers[1].offset, 0x1000 + 96);
    let kinds: Vec<Kind> = r.entries().map(|e| e.kind).collect();
    assert_eq!(kinds, [Kind::Elf, Kind::Elf, Kind::Ptx, Kind::Elf]);
}

#[test]
fn truncated_container_keeps_what_fits_and_names_the_offset() {
    let data = good();
    let cut = &data[..data.len() - 40];
    let r = fatbin::parse_region(cut, 0);
    assert_eq!(r.containers.len(), 2);
    assert_eq!(r.containers[1].entries.len(), 2);
    assert!(matches!(r.errors[0], FatbinError::PastEnd { offset: 96, .. }), "{:?}", r.errors);
    assert!(r
        .errors
        .iter()
        .any(|e| matches!(e, FatbinError::Truncated { what: "entry header", .. })));
    let msg = r.errors[0].to_string();
    assert!(msg.starts_with("offset 0x60: container ends at"), "{msg}");
}

#[test]
fn sizes_past_the_region_are_errors_not_reads() {
    let mut data = container(&[E::new(2, 80)]);
    data[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let r = fatbin::parse_region(&data, 0);
    assert!(matches!(r.errors[0], FatbinError::PastEnd { offset: 0, end: u64::MAX, .. }));
    let mut e = E::new(2, 80);
    e.payload = vec![1; 8];
    let mut data = container(&[e]);
    data[16 + 8..16 + 16].copy_from_slice(&(1u64 << 62).to_le_bytes());
    let r = fatbin::parse_region(&data, 0);
    assert!(matches!(r.errors[0], FatbinError::PastEnd { offset: 16, what: "entry payload", .. }));
}

#[test]
fn bad_entry_header_sizes_stop_the_container_not_the_region() {
    for size in [0u32, 8, 63, 68, 100] {
        let mut bad = E::new(2, 80);
        bad.header_size = size.max(64);
        let mut data = container(&[bad]);
        data[16 + 4..16 + 8].copy_from_slice(&size.to_le_bytes());
        data.extend(container(&[E::new(2, 90)]));
        let r = fatbin::parse_region(&data, 0);
        assert!(
            matches!(r.errors[..], [FatbinError::BadHeaderSize { offset: 16, .. }]),
            "size {size}: {:?}",
            r.errors
        );
        assert_eq!(r.containers.len(), 2, "size {size}");
        assert_eq!(r.containers[1].entries[0].arch.sm, 90);
    }
    let mut data = container(&[E::new(2, 80)]);
    data[6..8].copy_from_slice(&8u16.to_le_bytes());
    let r = fatbin::parse_region(&data, 0);
    assert!(matches!(r.errors[0], FatbinError::BadHeaderSize { offset: 0, what: "container", .. }));
}

#[test]
fn unknown_kinds_are_kept_but_never_listed() {
    let data = container(&[E::new(7, 80), E::new(2, 80)]);
    let r = fatbin::parse_region(&data, 0);
    assert!(r.errors.is_empty());
    assert_eq!(r.containers[0].entries[0].kind, Kind::Unknown(7));
    let mut out = Vec::new();
    let opts = nix_cuda_hooks::inspect::listing::ListOptions { elf: true, ptx: true, all: false };
    let mut l = nix_cuda_hooks::inspect::listing::Lister::new(&mut out, opts, b"x.fatbin");
    l.region(&r).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), "ELF file    1: x.1.sm_80.cubin\n");
}

#[test]
fn zero_padding_is_tolerated_and_garbage_is_skipped_with_its_offset() {
    let mut data = container(&[E::new(2, 80)]);
    data.extend([0u8; 24]);
    data.extend(container(&[E::new(2, 86)]));
    let r = fatbin::parse_region(&data, 0);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.containers.len(), 2);

    let mut data = container(&[E::new(2, 80)]);
    let garbage_at = data.len() as u64;
    data.extend(b"GARBAGE!GARBAGE!");
    data.extend(container(&[E::new(2, 86)]));
    data.extend(b"tail");
    let r = fatbin::parse_region(&data, 0x100);
    assert_eq!(r.containers.len(), 2);
    assert!(
        matches!(r.errors[0], FatbinError::BadMagic { offset, .. } if offset == 0x100 + garbage_at)
    );
    assert!(matches!(r.errors[1], FatbinError::Truncated { what: "container header", .. }));
}

#[test]
fn nobits_and_out_of_file_sections_are_reported() {
    let fb = good();
    let elf = host_elf(&[(".nv_fatbin", 8, &fb)]);
    let Ok(Object::Elf(o)) = host::parse(&elf) else { panic!("not read") };
    assert_eq!(o.sections.len(), 1);
    assert!(o.sections[0].region.containers.is_empty());
    assert_eq!(o.errors, [ReadError::NoBits { section: ".nv_fatbin" }]);

    let mut elf = host_elf(&[("__nv_relfatbin", 1, &fb)]);
    let Ok(Object::Elf(o)) = host::parse(&elf) else { panic!("not read") };
    assert_eq!(o.sections[0].region.containers.len(), 2);
    assert_eq!(o.sections[0].offset, 64);
    // Point the section's size past the end of the file.
    let shoff = u64::from_le_bytes(elf[40..48].try_into().unwrap()) as usize;
    let sh1 = shoff + 64;
    elf[sh1 + 32..sh1 + 40].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let Ok(Object::Elf(o)) = host::parse(&elf) else { panic!("not read") };
    assert!(matches!(o.errors[..], [ReadError::SectionData { section: "__nv_relfatbin", .. }]));
}

#[test]
fn missing_section_headers_mean_no_device_code() {
    let fb = good();
    let mut elf = host_elf(&[(".nv_fatbin", 1, &fb)]);
    elf[40..48].copy_from_slice(&0u64.to_le_bytes()); // e_shoff
    elf[60..64].copy_from_slice(&0u32.to_le_bytes()); // e_shnum, e_shstrndx
    let Ok(Object::Elf(o)) = host::parse(&elf) else { panic!("not read") };
    assert!(o.sections.is_empty());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("stripped"), &elf).unwrap();
    let out = std::process::Command::new(OURS)
        .args(["-lelf", "stripped"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(255));
    assert!(String::from_utf8_lossy(&out.stderr).ends_with("' does not contain device code\n"));
}

#[test]
fn broken_payloads_fail_to_decode_without_panicking() {
    let mut zstd = E::new(2, 80);
    zstd.flags |= 0x8000;
    zstd.compressed = 16;
    zstd.uncompressed = 4096;
    let mut lz4 = E::new(1, 80);
    lz4.flags |= 0x2000;
    lz4.compressed = 16;
    lz4.uncompressed = 1 << 40; // hostile size: refused, not allocated
    let mut lto = E::new(8, 80);
    lto.flags |= 0x18000;
    let data = container(&[zstd, lz4, lto]);
    let r = fatbin::parse_region(&data, 0);
    let errs: Vec<String> =
        r.entries().map(|e| fatbin::codec::plain(e).map(|_| ()).unwrap_err().to_string()).collect();
    assert!(errs[0].contains("zstd"), "{}", errs[0]);
    assert!(errs[1].contains("over the limit"), "{}", errs[1]);
    assert!(errs[2].contains("never decoded"), "{}", errs[2]);
}

#[test]
fn mutated_inputs_never_panic() {
    // A deterministic mutation loop over a fatbin inside an ELF, through every
    // reader entry point (the cargo-fuzz target in fuzz/ does this unbounded).
    let base = host_elf(&[(".nv_fatbin", 1, &good()), ("__nv_relfatbin", 1, &good())]);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..3000 {
        let mut data = base.clone();
        for _ in 0..(next() % 8 + 1) {
            let at = (next() as usize) % data.len();
            data[at] = next() as u8;
        }
        if next() % 4 == 0 {
            let len = (next() as usize) % data.len();
            data.truncate(len);
        }
        let mut report = blank_report();
        inspect::inspect_bytes(
            &data,
            inspect::Options { deep: true, scan: nix_cuda_hooks::devicecode::Scan::Full },
            &mut report,
        );
        if let Ok(object) = host::parse(&data) {
            let mut out = Vec::new();
            let opts =
                nix_cuda_hooks::inspect::listing::ListOptions { elf: true, ptx: true, all: true };
            nix_cuda_hooks::inspect::listing::Lister::new(&mut out, opts, b"f")
                .object(&object, b"/f")
                .unwrap();
        }
        let _ = fatbin::parse_region(&data, 0);
    }
}

fn blank_report() -> inspect::FileReport {
    inspect::FileReport::new("x".into())
}

#[test]
fn the_binary_reports_damage_with_offsets_and_status_1() {
    let mut data = good();
    data.truncate(data.len() - 40);
    let elf = host_elf(&[(".nv_fatbin", 1, &data)]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.so");
    std::fs::write(&path, &elf).unwrap();
    let out = std::process::Command::new(OURS).arg("--summary").arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("error: .nv_fatbin: offset 0xa0: container ends at"), "{text}");
    let out = std::process::Command::new(OURS)
        .args(["--summary", "--format", "json"])
        .arg(&path)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["files"][0]["summary"]["cubins"], 2);
}
