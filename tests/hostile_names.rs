//! Hostile names and trees, for all three binaries and every output format.
//!
//! A Nix output may hold any name the kernel accepts: bytes that are not
//! UTF-8, newlines, control characters (an escape sequence), a leading `-`,
//! paths near `PATH_MAX`, names that are themselves JSON, SARIF or
//! workflow-command syntax. Whatever the name, a tool must not panic, must
//! report the file, and its output must stay valid: JSON parses, SARIF
//! validates against the official schema, GitHub annotations are escaped as
//! the workflow-command rules require (`%`, CR, LF in data; also `:` and `,`
//! in properties), text never carries a raw control character.
//!
//! The files are real: a gcc-built program that needs libcuda.so.1 (found by
//! the audit as `missing-driver-runpath`, patched by auto-add-driver-runpath,
//! checked with readelf) and a dangling symlink next to it.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Builds `tree/` with, for each hostile name, a copy of a program needing
/// libcuda.so.1 (no RUNPATH) and a dangling link `<name>.link`.
fn hostile_tree() -> (tempfile::TempDir, Vec<PathBuf>) {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    std::fs::create_dir_all(d.join("stubs")).unwrap();
    std::fs::write(d.join("stub.c"), "int cuInit(unsigned f) { return f ? 1 : 0; }\n").unwrap();
    std::fs::write(
        d.join("main.c"),
        "int cuInit(unsigned);\nint main(void) { return cuInit(0); }\n",
    )
    .unwrap();
    common::sh(
        d,
        "set -e; gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o stubs/libcuda.so stub.c; \
         gcc -o prog main.c -Lstubs -lcuda",
    );
    let mut files = Vec::new();
    for name in common::hostile::names() {
        let rel = PathBuf::from(OsStr::from_bytes(&[b"tree/".as_slice(), &name].concat()));
        let file = d.join(&rel);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::copy(d.join("prog"), &file).unwrap();
        let mut link = file.clone().into_os_string();
        link.push(".link");
        symlink("missing-target", &link).unwrap();
        files.push(rel);
    }
    (t, files)
}

fn run(exe: &str, dir: &Path, args: &[&OsStr]) -> Output {
    let out = common::outside_build(Command::new(exe).args(args))
        .current_dir(dir)
        .env("NIX_STORE", "/nonexistent/store")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    // A panic is 101 (unwind) or a signal (abort): neither may happen.
    assert!(matches!(out.status.code(), Some(0..=2)), "{exe} {args:?}: {}", common::text(&out));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"), "{}", common::text(&out));
    out
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn lossy(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Validates a SARIF log against the official 2.1.0 schema.
fn validate_sarif(doc: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.sarif");
    std::fs::write(&file, doc).unwrap();
    let root = common::root();
    let schema = root.join(".tools/sarif-schema-2.1.0.json");
    assert!(schema.is_file(), "run `make tools`: {} is missing", schema.display());
    let check = Command::new(root.join(".tools/venv/bin/python3"))
        .args([
            "-c",
            "import json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))",
        ])
        .arg(&file)
        .arg(&schema)
        .output()
        .expect("run `make tools`: .tools/venv is missing");
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
}

/// Undoes the workflow-command escaping.
fn unescape(s: &str) -> String {
    s.replace("%0D", "\r")
        .replace("%0A", "\n")
        .replace("%3A", ":")
        .replace("%2C", ",")
        .replace("%25", "%")
}

/// Parses `::cmd file=F,title=T::MSG` as the runner does; checks that each
/// property value holds no raw separator and each message no raw newline.
fn parse_annotation(line: &str) -> Option<(String, Option<String>, String)> {
    let rest = line.strip_prefix("::")?;
    let (head, message) = rest.split_once("::")?;
    let (cmd, props) = head.split_once(' ').unwrap_or((head, ""));
    assert!(["error", "warning", "notice"].contains(&cmd), "{line}");
    let mut file = None;
    for prop in props.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = prop.split_once('=').unwrap_or_else(|| panic!("property {prop} in {line}"));
        assert!(!v.contains(':') && !v.contains(','), "{line}");
        if k == "file" {
            file = Some(unescape(v));
        }
    }
    assert!(!message.contains('\r'), "{line}");
    Some((cmd.to_string(), file, unescape(message)))
}

#[test]
fn the_audit_stays_valid_in_every_format() {
    let (t, files) = hostile_tree();
    let d = t.path();
    let exe = env!("CARGO_BIN_EXE_cuda-elf-inspect");
    let expected: Vec<String> = files.iter().map(|f| lossy(f)).collect();

    let out = run(exe, d, &[os("--format"), os("json"), os("tree")]);
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("the JSON report parses");
    for want in &expected {
        assert!(
            v["findings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["path"] == *want.as_str() && f["check"] == "missing-driver-runpath"),
            "no finding for {want:?}"
        );
    }

    let out = run(exe, d, &[os("--format"), os("sarif"), os("tree")]);
    validate_sarif(&out.stdout);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let uris: Vec<&str> = v["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].as_str().unwrap())
        .collect();
    for uri in &uris {
        // A relative reference with every reserved or non-ASCII byte encoded.
        assert!(
            uri.bytes().all(|b| b.is_ascii_alphanumeric() || b"/-_.~+@%".contains(&b)),
            "{uri}"
        );
    }
    assert_eq!(uris.len(), v["runs"][0]["results"].as_array().unwrap().len());

    let out = run(exe, d, &[os("--format"), os("github"), os("tree")]);
    let text = String::from_utf8(out.stdout).expect("annotations are UTF-8");
    let lines: Vec<&str> = text.lines().collect();
    let (summary, annotations) = lines.split_last().unwrap();
    assert!(summary.starts_with(&format!("{} files: ", files.len())), "{summary}");
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "a raw control character: {text:?}"
    );
    // CR and LF travel escaped (`%0D`, `%0A`); every other control
    // character is replaced (U+FFFD), as workflow commands have no escape
    // for them (issue 29).
    let annotated: Vec<String> = expected
        .iter()
        .map(|f| {
            f.chars()
                .map(|c| if c.is_control() && c != '\r' && c != '\n' { '\u{FFFD}' } else { c })
                .collect()
        })
        .collect();
    let mut shown_files = Vec::new();
    for line in annotations {
        let (_, file, _) =
            parse_annotation(line).unwrap_or_else(|| panic!("not an annotation: {line:?}"));
        if let Some(f) = file {
            assert!(annotated.contains(&f), "annotation for an unknown file {f:?}");
            shown_files.push(f);
        }
    }
    assert!(!shown_files.is_empty());

    let out = run(exe, d, &[os("--format"), os("text"), os("tree")]);
    let text = String::from_utf8(out.stdout).expect("text is UTF-8");
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "a raw control character reached the terminal: {text:?}"
    );
    // One line per finding's file header: the newline inside a name did not
    // split a record.
    assert!(text.contains("new\u{FFFD}line\u{FFFD}.so"), "{text}");

    // The reader's own report and the cuobjdump listing, same tree.
    let out = run(exe, d, &[os("--summary"), os("--format"), os("json"), os("tree")]);
    let _: Value = serde_json::from_slice(&out.stdout).expect("--summary JSON parses");
    run(exe, d, &[os("--list-elf"), os("tree")]);

    // Leading `-` after `--` is a path, not an option.
    let out = run(
        exe,
        &d.join("tree"),
        &[os("--format"), os("json"), os("--"), os("-rf"), os("--format=json")],
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let paths: Vec<&str> =
        v["findings"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert!(paths.contains(&"-rf") && paths.contains(&"--format=json"), "{paths:?}");
}

#[test]
fn auto_add_driver_runpath_patches_every_hostile_name() {
    let (t, files) = hostile_tree();
    let d = t.path();
    let exe = env!("CARGO_BIN_EXE_auto-add-driver-runpath");
    let expected: Vec<String> = files.iter().map(|f| lossy(f)).collect();

    let out = run(exe, d, &[os("--check"), os("--format"), os("json"), os("tree")]);
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON parses");
    let reported: Vec<&str> = v["report"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["action"] == "would-patch")
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    for want in &expected {
        assert!(reported.contains(&want.as_str()), "{want:?} not reported: {reported:?}");
    }
    let out = run(exe, d, &[os("--check"), os("tree")]);
    assert_eq!(out.status.code(), Some(1));

    // Leading `-` names after `--`, then the whole tree, for real.
    let out = run(exe, &d.join("tree"), &[os("--"), os("-rf"), os("--format=json")]);
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out));
    let out = run(exe, d, &[os("tree")]);
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out));
    for f in &files {
        let (tag, value) = common::search_path(&d.join(f)).expect("a RUNPATH was written");
        assert_eq!((tag.as_str(), value.as_str()), ("RUNPATH", "/run/opengl-driver/lib"), "{f:?}");
    }
    let out = run(exe, d, &[os("--check"), os("--format"), os("json"), os("tree")]);
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out));
}

#[test]
fn no_broken_symlinks_reports_every_hostile_link() {
    let (t, files) = hostile_tree();
    let d = t.path();
    let exe = env!("CARGO_BIN_EXE_no-broken-symlinks");

    let out = run(exe, d, &[os("--format"), os("json"), os("tree")]);
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON parses");
    let dangling: Vec<String> = v["outputs"][0]["links"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["verdict"] == "dangling")
        .map(|l| l["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(dangling.len(), files.len(), "{dangling:?}");
    for f in &files {
        let abs = lossy(&d.join(f));
        assert!(dangling.iter().any(|l| *l == format!("{abs}.link")), "{abs:?} missing");
    }

    // Text: the log names each link with its exact bytes, but for control
    // characters, written as Rust escapes them (`\n`, `\u{1b}`): a newline
    // in a name must not start a log line of its own (issue 29).
    let out = run(exe, d, &[os("tree")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!out.stderr.iter().any(|&b| b < 0x20 && b != b'\n'), "{}", common::text(&out));
    for f in &files {
        let mut name = d.join(f).into_os_string();
        name.push(".link");
        let mut needle = Vec::new();
        for &b in name.as_bytes() {
            match b {
                b'\n' => needle.extend_from_slice(b"\\n"),
                b'\r' => needle.extend_from_slice(b"\\r"),
                0..0x20 | 0x7f => needle.extend_from_slice(format!("\\u{{{b:x}}}").as_bytes()),
                _ => needle.push(b),
            }
        }
        assert!(
            out.stderr.windows(needle.len()).any(|w| w == needle),
            "{f:?} not named in the log"
        );
    }

    let out = run(exe, &d.join("tree"), &[os("--"), os("-rf.link")]);
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
}
