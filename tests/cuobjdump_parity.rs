//! Live parity with NVIDIA cuobjdump 13.5: every fixture variant of
//! `fixtures/cuda/recipes.txt` is built by the pinned nvcc, then listed by
//! cuobjdump and by cuda-elf-inspect with every option combination; stdout,
//! stderr (after the program name) and exit status must be identical.

mod common;

use std::path::Path;

const OURS: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// Option combinations; ours gets cuobjdump's short forms on every other one
/// so both spellings are covered.
const COMBOS: &[(&[&str], &[&str])] = &[
    (&["--list-elf"], &["--list-elf"]),
    (&["--list-ptx"], &["-lptx"]),
    (&["--list-elf", "--list-ptx"], &["--list-elf", "--list-ptx"]),
    (&["-lptx", "-lelf"], &["-lptx", "-lelf"]),
    (&["--all-fatbin", "--list-elf"], &["-all", "-lelf"]),
    (&["-all", "--list-ptx"], &["--all-fatbin", "--list-ptx"]),
    (&["-all", "-lelf", "-lptx"], &["-all", "-lelf", "-lptx"]),
];

#[test]
fn listing_matches_live_cuobjdump_on_every_fixture() {
    let cuobjdump = common::tool("cuobjdump");
    let variants = common::fixtures::build_all();
    let mut failures = Vec::new();
    let mut checked = 0;
    for (variant, dir) in &variants {
        assert!(!variant.files.is_empty(), "variant {} lists no files", variant.name);
        for file in &variant.files {
            for (theirs, ours) in COMBOS {
                let mut a: Vec<&str> = theirs.to_vec();
                a.push(file);
                let mut b: Vec<&str> = ours.to_vec();
                b.push(file);
                let expected = common::run_in(dir, &cuobjdump, &a);
                let got = common::run_in(dir, Path::new(OURS), &b);
                let label = format!("{}: {}", variant.name, a.join(" "));
                failures.extend(common::cuobjdump::compare(&label, &expected, &got));
                checked += 1;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} runs differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{checked} listings identical to cuobjdump over {} variants", variants.len());
}

#[test]
fn absolute_paths_and_program_name_match_too() {
    let cuobjdump = common::tool("cuobjdump");
    let variants = common::fixtures::build_all();
    let (_, dir) = variants.iter().find(|(v, _)| v.name == "several-tus").expect("variant");
    let file = dir.join("several_tus");
    let file = file.to_str().unwrap();
    // Called through a link named cuobjdump, our stderr is byte-identical.
    let tmp = tempfile::tempdir().unwrap();
    let link = tmp.path().join("cuobjdump");
    std::os::unix::fs::symlink(OURS, &link).unwrap();
    for args in [&["-lptx", file][..], &["-lelf", file], &["-lelf", "/nonexistent/x"]] {
        let expected = common::run_in(tmp.path(), &cuobjdump, args);
        let got = common::run_in(tmp.path(), &link, args);
        assert_eq!(expected.stdout, got.stdout, "{args:?}");
        assert_eq!(expected.stderr, got.stderr, "{args:?}");
        assert_eq!(expected.status.code(), got.status.code(), "{args:?}");
    }
}

fn summary_json(path: &Path) -> serde_json::Value {
    let out = std::process::Command::new(OURS)
        .args(["--summary", "--format", "json"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn deep_mode_tells_link_stubs_and_agrees_with_entry_headers() {
    let variants = common::fixtures::build_all();
    let dir = |name: &str| variants.iter().find(|(v, _)| v.name == name).unwrap().1.clone();

    // A link step with no arch adds a kernel-less stub for the default sm_75.
    let j = summary_json(&dir("phantom-stub").join("phantom"));
    let s = &j["files"][0]["summary"];
    assert_eq!(s["sass"], serde_json::json!(["sm_80"]), "{s}");
    assert_eq!(s["link_stub_only"], serde_json::json!(["sm_75"]), "{s}");

    // Built with `-gencode arch=compute_100f,code=[sm_100f,compute_100f]`:
    // the entry headers carry the family flag for both; a cubin's own header
    // never records it, so the summary keeps the entry's (issue 14: the
    // audit and the summary name the same architecture).
    let j = summary_json(&dir("sm100f").join("sm100f"));
    let s = &j["files"][0]["summary"];
    assert_eq!(s["sass"], serde_json::json!(["sm_100f"]), "{s}");
    assert_eq!(s["ptx"], serde_json::json!(["sm_100f"]), "{s}");
    let ptx =
        j["files"][0]["entries"].as_array().unwrap().iter().find(|e| e["kind"] == "ptx").unwrap();
    assert_eq!(ptx["ptx"]["target"], "sm_100f");

    // Every cubin's own header agrees with its entry header (SM and `a`), in
    // every fixture, whatever the codec.
    let mut cubins = 0;
    for (v, d) in &variants {
        for f in &v.files {
            let p = d.join(f);
            if !p.is_file() || ["not-objects", "damaged"].contains(&v.name.as_str()) {
                continue;
            }
            let j = summary_json(&p);
            for e in j["files"][0]["entries"].as_array().unwrap() {
                assert!(e.get("decode_error").is_none(), "{}: {e}", p.display());
                if e["kind"] == "elf" {
                    let arch = e["arch"].as_str().unwrap().trim_end_matches('f');
                    assert_eq!(e["cubin"]["arch"], arch, "{}: {e}", p.display());
                    cubins += 1;
                }
            }
        }
    }
    assert!(cubins > 50, "only {cubins} cubins checked");
}

#[test]
fn folders_are_walked_sorted_and_only_device_code_is_reported() {
    let variants = common::fixtures::build_all();
    let dir = &variants.iter().find(|(v, _)| v.name == "rdc-archive").unwrap().1;
    let out = std::process::Command::new(OURS)
        .args(["--summary", "--format", "json"])
        .arg(dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["version"], 1);
    let names: Vec<String> = json["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            Path::new(f["path"].as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    // host.o (no device code) is left out; the rest is in path order.
    assert_eq!(names, ["a_member_with_a_long_name_for_gnu_ar.o", "devfn.o", "librdc.a"]);
    let archive = &json["files"][2];
    assert_eq!(archive["format"], "archive");
    assert_eq!(archive["summary"]["sass"], serde_json::json!(["sm_80", "sm_86"]));
    let members: Vec<&str> = archive["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["member"].as_str().unwrap())
        .collect();
    assert!(members.contains(&"a_member_with_a_long_name_for_gnu_ar.o"), "{members:?}");

    // A missing path is reported, the others still inspected, status 2.
    let out = std::process::Command::new(OURS)
        .arg("--summary")
        .arg("/nonexistent/x")
        .arg(dir.join("devfn.o"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text.contains("/nonexistent/x: not read\n  error: no such file or directory"),
        "{text}"
    );
    assert!(text.contains("devfn.o: elf, 1 fatbin section(s), 1 cubin(s), 1 PTX"), "{text}");
}
