//! Issue 30 item 3: the default reads what `--scan` reads. Each test here
//! failed on the code before the change: its default probed the first
//! 64 KiB of each data section and sampled one 64 KiB window every MiB, so
//! containers in the middle of a section under 1 MiB were never seen (CUPTI
//! 12.8.90 keeps its 3 containers, 42 cubins, from 363 KiB into its 660 KiB
//! `.rodata`: `no device code`, and `--cuda-capabilities 12.1` was silent).
//!
//! The oracle is NVIDIA's cuobjdump, never our own output: it does not look
//! outside the fatbin sections of a library (it says CUPTI has no device
//! code), so the test cuts each container out of the file by its header
//! (magic, header size 16, payload size) and lists it with
//! `cuobjdump --list-elf` as a fatbin of its own.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::text;
use serde_json::Value;

const CEI: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// The container magic (little-endian), as NVIDIA's fatbin.h defines it.
const MAGIC: [u8; 4] = 0xBA55_ED50u32.to_le_bytes();

/// A file of a corpus set (tests/tools/corpus.sh: pinned wheels).
fn corpus_file(set: &str, name: &str) -> PathBuf {
    let script = common::root().join("tests/tools/corpus.sh");
    let out = Command::new("bash").arg(&script).arg(set).output().expect("bash");
    assert!(
        out.status.success(),
        "tests/tools/corpus.sh {set} failed (needs PyPI and `make tools`):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .find(|p| p.ends_with(name))
        .unwrap_or_else(|| panic!("corpus set {set} has no {name}"))
}

fn run_json(args: &[&str], file: &Path) -> Value {
    let mut cmd = Command::new(CEI);
    common::outside_build(&mut cmd);
    let out = cmd
        .env_remove("cudaCapabilities")
        .args(["--format", "json"])
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(2), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
}

/// Every container of `bytes` as the fatbin header describes it (an
/// 8-aligned magic, header size 16, then the payload size): `(offset, bytes)`.
fn containers(bytes: &[u8]) -> Vec<(usize, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 16 <= bytes.len() {
        if bytes[at..at + 4] == MAGIC && bytes[at + 6..at + 8] == 16u16.to_le_bytes() {
            let size = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap()) as usize;
            if let Some(c) = bytes.get(at..at + 16 + size) {
                out.push((at, c));
                at += 16 + size;
                continue;
            }
        }
        at += 8;
    }
    out
}

/// The SASS architectures cuobjdump lists in `containers`, one per cubin,
/// sorted (`ELF file 1: c0.1.sm_50.cubin`).
fn cuobjdump_sass(containers: &[(usize, &[u8])]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let mut sass = Vec::new();
    for (i, (_, bytes)) in containers.iter().enumerate() {
        let file = dir.path().join(format!("c{i}.fatbin"));
        std::fs::write(&file, bytes).unwrap();
        let out = Command::new(common::tool("cuobjdump")).arg("--list-elf").arg(&file).output();
        let out = out.unwrap();
        assert!(out.status.success(), "cuobjdump on container {i}: {}", text(&out));
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let arch = line.rsplit('.').nth(1).unwrap_or_else(|| panic!("{line}"));
            assert!(arch.starts_with("sm_"), "{line}");
            sass.push(arch.to_string());
        }
    }
    sass.sort();
    sass
}

/// The architectures of the cubins `--summary --format json` lists for the
/// file, those outside the fatbin sections included, sorted.
fn summary_sass(summary: &Value) -> Vec<String> {
    let f = &summary["files"][0];
    let listed = f["entries"].as_array().into_iter().flatten();
    let scanned = f["scanned"].as_array().into_iter().flatten();
    let mut sass: Vec<String> = listed
        .chain(scanned)
        .filter(|e| e["kind"] == "elf")
        .map(|e| e["arch"].as_str().unwrap().to_string())
        .collect();
    sass.sort();
    sass
}

fn distinct(sass: &[String]) -> Vec<String> {
    let mut d = sass.to_vec();
    d.sort_by_key(|a| a[3..].trim_end_matches(char::is_alphabetic).parse::<u32>().unwrap());
    d.dedup();
    d
}

#[test]
fn cupti_code_in_the_middle_of_rodata_is_read_by_default_as_cuobjdump_lists_it() {
    let lib = corpus_file("cupti12", "libcupti.so.12");
    let bytes = std::fs::read(&lib).unwrap();
    let found = containers(&bytes);
    let expected = cuobjdump_sass(&found);
    // The numbers, from cuobjdump: 3 containers, 42 cubins, sm_50-sm_120.
    assert_eq!((found.len(), expected.len()), (3, 42), "{found:?}");
    // Where the old default did not look: past the first 64 KiB of .rodata
    // (file offset 0x4cf000, 0xa1614 bytes: `readelf -S`), a section under 1 MiB.
    let rodata = 0x4cf000..0x4cf000 + 0xa1614;
    assert!(found.iter().all(|(at, _)| rodata.contains(at) && at - rodata.start > 64 << 10));

    // --summary by default lists every cubin cuobjdump lists, and so does --scan.
    let default = run_json(&["--summary"], &lib);
    assert_eq!(summary_sass(&default), expected, "{default}");
    let full = run_json(&["--summary", "--scan"], &lib);
    assert_eq!(summary_sass(&full), expected, "{full}");
    assert_eq!(default["files"][0]["summary"], full["files"][0]["summary"]);

    // The audit asked for 12.1 judges that code: sm_120's SASS runs there.
    let audit = run_json(&["--no-dlopen", "--cuda-capabilities", "12.1"], &lib);
    let file = &audit["files"][0];
    let sass: Vec<String> = file["device"]["sass"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    assert_eq!(sass, distinct(&expected), "{audit}");
    assert_eq!(file["device"]["scanned_containers"], 3, "{audit}");
    let coverage = file["coverage"].as_array().unwrap_or_else(|| panic!("no coverage: {audit}"));
    assert_eq!(coverage.len(), 1, "{audit}");
    assert_eq!(coverage[0]["capability"], "12.1", "{audit}");
    assert_eq!(coverage[0]["code"], "sm_120", "{audit}");
    assert_eq!(coverage[0]["runs"], "native", "{audit}");
}

/// A shared library built here whose `.rodata` (under 1 MiB) holds a real
/// container 300,000 bytes in, past any probe of its start and before any
/// sample a MiB in: the default reads it as cuobjdump lists it.
#[test]
fn a_container_anywhere_in_a_small_rodata_is_read_by_default() {
    let lib = corpus_file("cupti12", "libcupti.so.12");
    let bytes = std::fs::read(&lib).unwrap();
    let (_, container) = containers(&bytes)[0];
    let expected = cuobjdump_sass(&[(0, container)]);
    assert!(!expected.is_empty());

    let dir = tempfile::tempdir().unwrap();
    let hex: Vec<String> = container.iter().map(|b| format!("{b:#04x}")).collect();
    let source = format!(
        "struct blob {{ unsigned char pad[300000]; unsigned char fat[{}]; }};\n\
         __attribute__((used, aligned(64))) const struct blob blob = {{ {{ 1 }}, {{ {} }} }};\n",
        container.len(),
        hex.join(",")
    );
    let c = dir.path().join("blob.c");
    std::fs::write(&c, source).unwrap();
    let so = dir.path().join("libblob.so");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O0", "-o"])
        .arg(&so)
        .arg(&c)
        .output()
        .expect("cc");
    assert!(out.status.success(), "cc: {}", text(&out));
    // The container is where the test put it, in the one copy cc made.
    let built = std::fs::read(&so).unwrap();
    let inside = containers(&built);
    assert_eq!(inside.len(), 1, "{inside:?}");

    let default = run_json(&["--summary"], &so);
    assert_eq!(summary_sass(&default), expected, "{default}");
    let audit = run_json(&["--no-dlopen"], &so);
    assert_eq!(audit["files"][0]["device"]["scanned_containers"], 1, "{audit}");
}

/// The search goes 4 MiB at a time, 8 MiB a task, and gives each stretch's
/// pages back once: a container whose magic sits at a stretch's or a task's
/// end, or whose bytes run across it, is found once, as a search of the
/// whole buffer finds it, and the stretches given back cover the buffer,
/// none twice.
#[test]
fn the_stepwise_search_finds_containers_across_its_steps() {
    let lib = corpus_file("cupti12", "libcupti.so.12");
    let bytes = std::fs::read(&lib).unwrap();
    let (_, container) = containers(&bytes)[0];
    const STEP: usize = 4 << 20;
    const TASK: usize = nix_cuda_hooks::fatbin::container::CHUNK as usize;
    for at in [STEP - 8, STEP, 2 * STEP - 4096, 3 * STEP + 8, TASK - 8, TASK - 16, TASK + 8] {
        let mut data = vec![0u8; 3 * STEP + 2 * container.len() + 64];
        data[at..at + container.len()].copy_from_slice(container);
        assert_eq!(containers(&data).len(), 1);
        let released = std::sync::Mutex::new(Vec::new());
        let base = data.as_ptr() as usize;
        let found = nix_cuda_hooks::fatbin::container::scan_with(&data, 0, &[], &|p| {
            released.lock().unwrap().push((p.as_ptr() as usize - base, p.len()))
        });
        assert_eq!(found.len(), 1, "container at {at:#x}");
        assert_eq!(found[0].offset, at as u64, "container at {at:#x}");
        assert_eq!(found[0].entries.len(), 14, "container at {at:#x}");
        let mut released = released.into_inner().unwrap();
        released.retain(|&(_, len)| len > 0);
        released.sort_unstable();
        let mut end = 0;
        for &(start, len) in &released {
            assert_eq!(start, end, "gap or overlap in what was given back: {released:?}");
            end = start + len;
        }
        assert_eq!(end, data.len(), "{released:?}");
        assert!(released.len() >= 3, "pages given back only at the end: {released:?}");
    }
}

/// A well-formed container of one 16-byte sm_90 ELF entry (96 bytes), small
/// enough to hide inside another container's payload.
fn tiny_container() -> Vec<u8> {
    let mut entry = Vec::new();
    entry.extend(2u16.to_le_bytes()); // kind: ELF
    entry.extend(0x0101u16.to_le_bytes());
    entry.extend(64u32.to_le_bytes()); // header size
    entry.extend(16u64.to_le_bytes()); // payload size
    entry.extend([0u8; 8]); // compressed size, options
    entry.extend(8u16.to_le_bytes()); // minor
    entry.extend(1u16.to_le_bytes()); // major
    entry.extend(90u32.to_le_bytes()); // sm
    entry.extend([0u8; 8]); // identifier offset, length
    entry.extend(0x11u64.to_le_bytes()); // flags: 64-bit, Linux
    entry.resize(64, 0);
    entry.extend([0xab; 16]);
    let mut c = Vec::new();
    c.extend(MAGIC);
    c.extend(1u16.to_le_bytes());
    c.extend(16u16.to_le_bytes());
    c.extend((entry.len() as u64).to_le_bytes());
    c.extend(entry);
    c
}

/// A container that runs over the start of the next 8 MiB task: that task
/// began its search inside the container (as if no container were there)
/// and found one in its bytes; the joined walk keeps what the sequential
/// walk finds, the container itself and the one after its end, and not the
/// one hidden inside it.
#[test]
fn parallel_tasks_join_into_the_sequential_walk() {
    let lib = corpus_file("cupti12", "libcupti.so.12");
    let bytes = std::fs::read(&lib).unwrap();
    let all = containers(&bytes);
    let (_, big) = all.iter().max_by_key(|(_, c)| c.len()).copied().unwrap();
    let small = &tiny_container()[..];
    const TASK: usize = nix_cuda_hooks::fatbin::container::CHUNK as usize;
    let mut data = vec![0u8; 2 * TASK + big.len()];
    // The big container starts 8 bytes before the second task; a copy of
    // the small one sits inside one of its payloads, 8-aligned, past that
    // start (the big one's entry headers stay intact: it still parses).
    let at = TASK - 8;
    data[at..at + big.len()].copy_from_slice(big);
    let region = nix_cuda_hooks::fatbin::parse_region(big, 0);
    let entries = &region.containers[0].entries;
    let payload = entries
        .iter()
        .filter_map(|e| match e.payload {
            nix_cuda_hooks::fatbin::Payload::Stored(bytes) => Some(bytes),
            _ => None,
        })
        .max_by_key(|p| p.len())
        .unwrap();
    let inside = payload.as_ptr() as usize - big.as_ptr() as usize;
    assert!(payload.len() > small.len() + 16, "{} / {}", payload.len(), small.len());
    let hidden = (at + inside + 8).div_ceil(8) * 8;
    data[hidden..hidden + small.len()].copy_from_slice(small);
    let reparsed = nix_cuda_hooks::fatbin::parse_region(&data[at..at + big.len()], 0);
    assert!(reparsed.errors.is_empty(), "{:?}", reparsed.errors);
    assert_eq!(reparsed.containers[0].entries.len(), entries.len());
    let after = (at + big.len()).div_ceil(8) * 8 + 64;
    data[after..after + small.len()].copy_from_slice(small);
    // What the sequential walk finds, by the layout: the big container,
    // then the search resumes at its end and finds the copy after it.
    let found = nix_cuda_hooks::fatbin::container::scan(&data, 0, &[]);
    let offsets: Vec<u64> = found.iter().map(|c| c.offset).collect();
    assert_eq!(offsets, [at as u64, after as u64], "hidden copy at {hidden:#x}");
    // The hidden copy is there to be found by a task that starts inside.
    let from_inside = nix_cuda_hooks::fatbin::container::scan(&data, 0, &[(0, TASK as u64)]);
    assert_eq!(from_inside.first().map(|c| c.offset), Some(hidden as u64));
    // Batch by batch (the pre-flight's reading, `scan_until`): the same
    // containers in the same order whatever the batch size, the big one
    // carried over a batch boundary (the second batch's task began inside
    // it); a stop after the first batch reads no further.
    use nix_cuda_hooks::fatbin::container::scan_until;
    for batch in [1, 2, usize::MAX] {
        let mut batches: Vec<Vec<u64>> = Vec::new();
        scan_until(&data, 0, &[], &|_| {}, batch, &mut |found| {
            batches.push(found.iter().map(|c| c.offset).collect());
            false
        });
        assert_eq!(batches.concat(), offsets, "batch {batch}: {batches:?}");
        let tasks = data.len().div_ceil(TASK);
        assert_eq!(batches.len(), tasks.div_ceil(batch), "batch {batch}");
    }
    let mut first = Vec::new();
    scan_until(&data, 0, &[], &|_| {}, 1, &mut |found| {
        first.push(found.iter().map(|c| c.offset).collect::<Vec<u64>>());
        true
    });
    assert_eq!(first, [vec![at as u64]]);
}
