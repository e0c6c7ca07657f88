//! Issue 29, items 2, 3 and 9: section tables and notes written to make the
//! readers work by header count instead of by byte. Each file is a gcc-built
//! library with section headers appended by [`with_headers`] (many headers
//! over one region, as a hostile linker script or a hand edit makes them);
//! the assertions are on counts, output sizes and peak RSS (`/usr/bin/time`),
//! with CPU-time bounds only where the old code took minutes.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nix_cuda_hooks::audit::finding::MAX_PER_CHECK;
use nix_cuda_hooks::dlopen::MAX_PROBLEMS;
use serde_json::Value;

const OURS: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");
const FIXER: &str = env!("CARGO_BIN_EXE_auto-add-driver-runpath");

const SHT_PROGBITS: u32 = 1;
const SHT_NOTE: u32 = 7;
const SHF_ALLOC: u64 = 2;

/// A gcc-built shared library that imports `dlopen` (and names `libok.so.1`),
/// linked with `ldflags`.
fn base(dir: &Path, ldflags: &str) -> Vec<u8> {
    common::sh(
        dir,
        &format!(
            "printf '#include <dlfcn.h>\\nvoid *f(void) {{ return dlopen(\"libok.so.1\", 2); }}\\n' > h.c && gcc -shared -fPIC -o base.so h.c -ldl {ldflags}"
        ),
    );
    std::fs::read(dir.join("base.so")).unwrap()
}

/// One appended section header: `name`, type, flags, and where it points
/// inside the appended region (`offset`, `size`).
struct Header<'a> {
    name: &'a str,
    sh_type: u32,
    flags: u64,
    offset: u64,
    size: u64,
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// `elf` (ELF64, little-endian) with `region` appended and a new section
/// header table: the old headers, then `headers` (offsets relative to the
/// region), with a new `.shstrtab` holding their names.
fn with_headers(mut elf: Vec<u8>, region: &[u8], headers: &[Header<'_>]) -> Vec<u8> {
    let shoff = le64(&elf, 0x28) as usize;
    let shnum = u16::from_le_bytes([elf[0x3c], elf[0x3d]]) as usize;
    let shstrndx = u16::from_le_bytes([elf[0x3e], elf[0x3f]]) as usize;
    let mut table = elf[shoff..shoff + 64 * shnum].to_vec();
    let strtab_hdr = 64 * shstrndx;
    let (old_off, old_size) =
        (le64(&table, strtab_hdr + 24) as usize, le64(&table, strtab_hdr + 32) as usize);
    let mut strtab = elf[old_off..old_off + old_size].to_vec();
    let mut names = std::collections::HashMap::new();
    for h in headers {
        names.entry(h.name).or_insert_with(|| {
            let at = strtab.len() as u32;
            strtab.extend(h.name.as_bytes());
            strtab.push(0);
            at
        });
    }
    let align = |v: &mut Vec<u8>| v.resize(v.len().next_multiple_of(8), 0);
    align(&mut elf);
    let region_at = elf.len() as u64;
    elf.extend(region);
    align(&mut elf);
    let strtab_at = elf.len() as u64;
    elf.extend(&strtab);
    table[strtab_hdr + 24..strtab_hdr + 32].copy_from_slice(&strtab_at.to_le_bytes());
    table[strtab_hdr + 32..strtab_hdr + 40].copy_from_slice(&(strtab.len() as u64).to_le_bytes());
    for h in headers {
        let mut s = Vec::with_capacity(64);
        s.extend(names[h.name].to_le_bytes());
        s.extend(h.sh_type.to_le_bytes());
        s.extend(h.flags.to_le_bytes());
        s.extend(0u64.to_le_bytes()); // addr
        s.extend((region_at + h.offset).to_le_bytes());
        s.extend(h.size.to_le_bytes());
        s.extend([0u8; 8]); // link, info
        s.extend(4u64.to_le_bytes()); // addralign
        s.extend(0u64.to_le_bytes()); // entsize
        table.extend(s);
    }
    align(&mut elf);
    let new_shoff = elf.len() as u64;
    elf.extend(&table);
    let n = u16::try_from(shnum + headers.len()).expect("at most 65,535 section headers");
    elf[0x28..0x30].copy_from_slice(&new_shoff.to_le_bytes());
    elf[0x3c..0x3e].copy_from_slice(&n.to_le_bytes());
    elf
}

/// `count` headers named `name` over the whole of a region of `size` bytes,
/// the `i`-th starting `i * stagger` bytes later (0: all the same range).
fn over(
    name: &str,
    sh_type: u32,
    flags: u64,
    size: u64,
    count: u64,
    stagger: u64,
) -> Vec<Header<'_>> {
    (0..count)
        .map(|i| Header { name, sh_type, flags, offset: i * stagger, size: size - i * stagger })
        .collect()
}

/// A broken `.note.dlopen` note (owner FDO, the dlopen type, 4 bytes of
/// data that are not JSON): 20 bytes.
fn broken_note() -> Vec<u8> {
    let mut n = Vec::new();
    n.extend(4u32.to_le_bytes());
    n.extend(4u32.to_le_bytes());
    n.extend(0x407c_0c0au32.to_le_bytes());
    n.extend(b"FDO\0xxxx");
    n
}

/// A `.note.dlopen` note listing `names`.
fn note(names: &[String]) -> Vec<u8> {
    let list: Vec<String> = names.iter().map(|n| format!("{{\"soname\":[\"{n}\"]}}")).collect();
    let mut json = format!("[{}]", list.join(",")).into_bytes();
    json.push(0);
    json.resize(json.len().next_multiple_of(4), 0);
    let mut n = Vec::new();
    n.extend(4u32.to_le_bytes());
    n.extend((json.len() as u32).to_le_bytes());
    n.extend(0x407c_0c0au32.to_le_bytes());
    n.extend(b"FDO\0");
    n.extend(json);
    n
}

/// Runs `program args` under `/usr/bin/time`: the output, peak RSS in
/// KiB and user+system CPU seconds.
fn timed(program: &str, args: &[&str]) -> (Output, u64, f64) {
    let out =
        common::outside_build(Command::new("/usr/bin/time").args(["-f", "%M %U %S", program]))
            .args(args)
            .output()
            .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let last = stderr.trim().lines().last().unwrap_or_default().to_string();
    let f: Vec<&str> = last.split(' ').collect();
    let parse = |i: usize| -> f64 {
        f.get(i).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("time: {stderr}"))
    };
    let (rss, cpu) = (parse(0) as u64, parse(1) + parse(2));
    (out, rss, cpu)
}

/// The audit's JSON report of `file` with `extra` arguments, its size, peak
/// RSS (KiB) and CPU seconds.
fn audit(file: &Path, extra: &[&str]) -> (Value, usize, u64, f64) {
    let mut args = vec!["--format", "json"];
    args.extend(extra);
    args.push(file.to_str().unwrap());
    let (out, rss, cpu) = timed(OURS, &args);
    assert!(out.status.code().is_some_and(|c| c <= 1), "{}", common::text(&out));
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (v, out.stdout.len(), rss, cpu)
}

fn of_check<'v>(v: &'v Value, check: &str) -> Vec<&'v Value> {
    v["findings"].as_array().unwrap().iter().filter(|f| f["check"] == check).collect()
}

/// A scratch folder; with `SECURITY_PARSE_KEEP=DIR`, `DIR/<test>` kept
/// instead, so that the repro files can be measured by hand (the numbers
/// in docs/robustness.md).
fn scratch(test: &str) -> (Option<tempfile::TempDir>, PathBuf) {
    match std::env::var_os("SECURITY_PARSE_KEEP") {
        Some(keep) => {
            let d = PathBuf::from(keep).join(test);
            std::fs::create_dir_all(&d).unwrap();
            (None, d)
        }
        None => {
            let t = tempfile::tempdir().unwrap();
            let d = t.path().to_path_buf();
            (Some(t), d)
        }
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// 500 `.note.dlopen` headers over one 64 KiB region of broken notes were
/// 1,638,001 dlopen-incomplete findings and 900 MB; 65,000 staggered ones
/// aborted on allocation failure (the RUNPATH fixer too). The region is
/// read once, the problems capped, one finding says how many more.
#[test]
fn overlapping_note_sections_are_read_once_and_problems_are_capped() {
    let (_keep, d) = scratch("overlapping_note");
    let d = d.as_path();
    let lib = base(d, "");
    let region: Vec<u8> = broken_note().repeat(65_536 / 20);
    let size = region.len() as u64;
    for (name, count, stagger) in [("same.so", 500, 0), ("staggered.so", 65_000, 1)] {
        let file = write(
            d,
            name,
            &with_headers(
                lib.clone(),
                &region,
                &over(".note.dlopen", SHT_NOTE, 0, size, count, stagger),
            ),
        );
        let (v, len, rss, _) = audit(&file, &[]);
        let incomplete = of_check(&v, "dlopen-incomplete");
        assert_eq!(incomplete.len(), MAX_PROBLEMS + 1, "{name}: {len} bytes");
        let said =
            |what: &str| incomplete.iter().any(|f| f["message"].as_str().unwrap().contains(what));
        assert!(
            said(&format!("{} .note.dlopen sections overlap", count - 1)),
            "{name}: {incomplete:?}"
        );
        assert!(said("more problems reading its dlopen targets"), "{name}");
        assert!(len < 256 << 10, "{name}: {len} bytes of JSON");
        assert!(rss < 100 << 10, "{name}: peak RSS {rss} KiB");
        // The literal still counts.
        assert!(of_check(&v, "dlopen-unresolved")
            .iter()
            .any(|f| f["details"]["library"] == "libok.so.1"));
        // The RUNPATH fixer reads the same notes: no abort, no blow-up.
        let copy = write(d, &format!("fix-{name}"), &std::fs::read(&file).unwrap());
        let (out, rss, _) =
            timed(FIXER, &["--dlopen-search", d.to_str().unwrap(), copy.to_str().unwrap()]);
        assert!(out.status.code().is_some(), "{name}: killed: {}", common::text(&out));
        assert!(rss < 100 << 10, "{name}: fixer peak RSS {rss} KiB");
    }
}

/// One 16 MB section of broken notes was 838,861 findings (462 MB).
#[test]
fn one_section_of_broken_notes_gives_a_bounded_count() {
    let (_keep, d) = scratch("one_section");
    let d = d.as_path();
    let region: Vec<u8> = broken_note().repeat((16 << 20) / 20);
    let size = region.len() as u64;
    let file = write(
        d,
        "big.so",
        &with_headers(base(d, ""), &region, &over(".note.dlopen", SHT_NOTE, 0, size, 1, 0)),
    );
    let (v, len, rss, _) = audit(&file, &[]);
    let incomplete = of_check(&v, "dlopen-incomplete");
    assert_eq!(incomplete.len(), MAX_PROBLEMS + 1);
    let more = format!("{} more problems", region.len() / 20 - MAX_PROBLEMS);
    assert!(
        incomplete.iter().any(|f| f["message"].as_str().unwrap().contains(&more)),
        "{incomplete:?}"
    );
    assert!(len < 256 << 10, "{len} bytes of JSON");
    assert!(rss < 150 << 10, "peak RSS {rss} KiB");
}

/// A fatbin container holding one 64-byte-header entry (sm_80 cubin kind)
/// with 16 bytes of payload: 96 bytes.
fn container() -> Vec<u8> {
    container_with(&[0xab; 16])
}

/// [`container`] with this payload.
fn container_with(payload: &[u8]) -> Vec<u8> {
    let mut e = Vec::new();
    e.extend(2u16.to_le_bytes()); // kind: ELF (cubin)
    e.extend(0x0101u16.to_le_bytes());
    e.extend(64u32.to_le_bytes()); // header size
    e.extend((payload.len() as u64).to_le_bytes()); // payload size
    e.extend(0u32.to_le_bytes()); // compressed size
    e.extend(0u32.to_le_bytes()); // options
    e.extend(8u16.to_le_bytes());
    e.extend(1u16.to_le_bytes());
    e.extend(80u32.to_le_bytes()); // sm_80
    e.extend([0u8; 8]);
    e.extend(0x11u64.to_le_bytes()); // flags: 64-bit, linux
    e.extend(0u64.to_le_bytes());
    e.extend(0u64.to_le_bytes());
    e.extend(payload);
    let mut b = Vec::new();
    b.extend(0xBA55_ED50u32.to_le_bytes());
    b.extend(1u16.to_le_bytes());
    b.extend(16u16.to_le_bytes());
    b.extend((e.len() as u64).to_le_bytes());
    b.extend(e);
    b
}

/// 3,000 `.nv_fatbin` headers over a 64 KiB region of small containers
/// were 2.0 GB; `--summary --format json` of 500 of them wrote 1.9 GB. The
/// region is walked once: its containers listed once, the other headers
/// one damage line.
#[test]
fn overlapping_fatbin_sections_are_walked_once() {
    let (_keep, d) = scratch("overlapping_fatbin");
    let d = d.as_path();
    let region: Vec<u8> = container().repeat(65_536 / 96);
    let containers = region.len() / 96;
    let size = region.len() as u64;
    let headers = over(".nv_fatbin", SHT_PROGBITS, SHF_ALLOC, size, 3_000, 0);
    let file = write(d, "fat.so", &with_headers(base(d, ""), &region, &headers));
    let (v, len, rss, _) = audit(&file, &["--summary"]);
    assert!(len < 2 << 20, "{len} bytes of --summary JSON");
    assert!(rss < 100 << 10, "peak RSS {rss} KiB");
    let text = v.to_string();
    assert!(
        text.contains("2999 fatbin sections overlap the bytes of an earlier one"),
        "{text:.2000}"
    );
    let sections = v["files"][0]["sections"].as_array().unwrap_or_else(|| panic!("{text:.2000}"));
    assert_eq!(sections.len(), 1, "{text:.2000}");
    assert_eq!(sections[0]["containers"], containers, "{text:.2000}");
    let (v, len, rss, _) = audit(&file, &[]);
    assert!(len < 2 << 20, "{len} bytes of audit JSON");
    assert!(rss < 100 << 10, "peak RSS {rss} KiB");
    assert!(v.to_string().contains("2999 fatbin sections overlap"));
}

/// 4,000 `.rodata` headers over 1 MiB of `.so.` strings took 16.4 s (each
/// header a search of the whole MiB). 20,000 of them (80 s before) are one
/// search now: the CPU bound is generous.
#[test]
fn overlapping_rodata_sections_are_searched_once() {
    let (_keep, d) = scratch("overlapping_rodata");
    let d = d.as_path();
    let region = b"liba.so.1\0libb.so.2\0".repeat((1 << 20) / 20);
    let size = region.len() as u64;
    let headers = over(".rodata", SHT_PROGBITS, SHF_ALLOC, size, 20_000, 0);
    let file = write(d, "ro.so", &with_headers(base(d, ""), &region, &headers));
    let (v, _, _, cpu) = audit(&file, &[]);
    let libs: std::collections::BTreeSet<&str> = of_check(&v, "dlopen-unresolved")
        .iter()
        .map(|f| f["details"]["library"].as_str().unwrap())
        .collect();
    assert_eq!(libs, ["liba.so.1", "libb.so.2", "libok.so.1"].into());
    assert!(cpu < 8.0, "{cpu} s of CPU");
}

/// Four 1,024-name `.note.dlopen` notes and a 5,000-folder RUNPATH were
/// 120 s, 4.2 GB and 1.4 GB of JSON: every dlopen-unresolved message held
/// the whole search list and the resolver remembered every (folder, name)
/// pair. Now: the folders are listed once per file (`--dlopen-facts`'
/// `searched`), a message names the first few and the count, each folder
/// is listed once, and at most MAX_PER_CHECK findings of one check are
/// listed per file.
#[test]
fn dlopen_targets_times_a_long_runpath_stay_bounded() {
    let (_keep, d) = scratch("dlopen_runpath");
    let d = d.as_path();
    const FOLDERS: usize = 5_000;
    for i in 0..FOLDERS {
        std::fs::create_dir_all(d.join(format!("rp/{i}"))).unwrap();
    }
    let runpath: Vec<String> = (0..FOLDERS).map(|i| format!("$ORIGIN/rp/{i}")).collect();
    let lib = base(d, &format!("-Wl,--enable-new-dtags -Wl,-rpath,'{}'", runpath.join(":")));
    let notes: Vec<u8> = (0..4)
        .flat_map(|n| note(&(0..1024).map(|i| format!("libn{n}x{i:04}.so.1")).collect::<Vec<_>>()))
        .collect();
    let size = notes.len() as u64;
    let file = write(
        d,
        "many.so",
        &with_headers(lib, &notes, &over(".note.dlopen", SHT_NOTE, 0, size, 1, 0)),
    );
    let (v, len, rss, cpu) = audit(&file, &[]);
    let unresolved = of_check(&v, "dlopen-unresolved");
    assert_eq!(unresolved.len(), MAX_PER_CHECK + 1, "{len} bytes");
    let more = unresolved
        .iter()
        .filter(|f| f["message"].as_str().unwrap().contains("more dlopen-unresolved findings"))
        .count();
    assert_eq!(more, 1);
    for f in &unresolved {
        let m = f["message"].as_str().unwrap();
        assert!(m.len() < 2048, "{m}");
    }
    let named = unresolved.iter().find(|f| f["details"]["library"].is_string()).unwrap();
    let m = named["message"].as_str().unwrap();
    assert!(m.contains(" folders: ") && m.contains("/rp/0:") && m.contains(" more; "), "{m}");
    assert!(len < 1 << 20, "{len} bytes of JSON");
    assert!(rss < 200 << 10, "peak RSS {rss} KiB");
    eprintln!("audit: {len} bytes, {rss} KiB, {cpu} s of CPU");
    assert!(cpu < 60.0, "{cpu} s of CPU");
    // The facts list the folders once and each target's count of them.
    let (v, len, rss, _) = audit(&file, &["--dlopen-facts"]);
    let facts = &v["files"][0]["dlopen"];
    let searched = facts["searched"].as_array().unwrap();
    // The RUNPATH's folders, then the host's default ones (not a store file).
    assert!(searched.len() >= FOLDERS, "{}", searched.len());
    assert!(m.contains(&format!("{} folders: ", searched.len())), "{m}");
    assert!(searched[1].as_str().unwrap().ends_with("/rp/1"), "{}", searched[1]);
    let targets = facts["targets"].as_array().unwrap();
    assert_eq!(targets.len(), nix_cuda_hooks::dlopen::MAX_TARGETS);
    assert!(targets
        .iter()
        .all(|t| t["resolved"]
            == serde_json::json!({"status": "missing", "folders": searched.len()})));
    assert!(len < 4 << 20, "{len} bytes of JSON");
    assert!(rss < 200 << 10, "peak RSS {rss} KiB");
}

const NVCC: &str = "/nix/store/0c7xgv7n2pn1ljvm3xrjjk2x2bbvyq1f-cuda_nvcc-13.0";

/// 20,000 nvcc store paths in a file of 3,000 overlapping `.nv_fatbin`
/// headers: `--references` took 134 s (each hit a walk of every section
/// and every entry). Each hit is located by binary search now; the
/// locations are checked, and the CPU bound is generous.
#[test]
fn twenty_thousand_references_are_located_in_near_linear_time() {
    let (_keep, d) = scratch("references");
    let d = d.as_path();
    let mut fatbin = container_with(format!("{NVCC}\0").as_bytes());
    fatbin.resize(fatbin.len().next_multiple_of(8), 0);
    while fatbin.len() + 96 <= 65_536 {
        fatbin.extend(container());
    }
    let paths = format!("{NVCC}/bin/nvcc\0").repeat(20_000).into_bytes();
    let mut region = fatbin.clone();
    region.extend(&paths);
    let mut headers = over(".nv_fatbin", SHT_PROGBITS, SHF_ALLOC, fatbin.len() as u64, 3_000, 0);
    headers.push(Header {
        name: ".rodata.refs",
        sh_type: SHT_PROGBITS,
        flags: SHF_ALLOC,
        offset: fatbin.len() as u64,
        size: paths.len() as u64,
    });
    let file = write(d, "refs.so", &with_headers(base(d, ""), &region, &headers));
    let (v, _, rss, cpu) = audit(&file, &["--references", "--no-dlopen"]);
    eprintln!("references: {rss} KiB, {cpu} s of CPU");
    let refs = v["files"][0]["references"].as_array().unwrap();
    let at = |section: &str| refs.iter().filter(|r| r["section"] == section).count();
    assert_eq!(at(".rodata.refs"), 20_000);
    let in_entry: Vec<&Value> = refs.iter().filter(|r| r["entry"].is_object()).collect();
    assert_eq!(in_entry.len(), 1, "{in_entry:?}");
    assert_eq!(in_entry[0]["section"], ".nv_fatbin");
    assert_eq!(in_entry[0]["entry"]["part"], "payload");
    assert!(refs.iter().all(|r| r["target"] == NVCC));
    assert!(cpu < 20.0, "{cpu} s of CPU");
    assert!(rss < 200 << 10, "peak RSS {rss} KiB");
}
