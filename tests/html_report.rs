//! `cuda-elf-inspect --format html` in a real browser: Debian's Chromium,
//! headless (`make tools`), renders the page; tests/tools/dom.py dumps the
//! DOM after the page's script ran and reads back the matrix cells, the
//! findings, every element and every attribute that could fetch, and the
//! requests Chromium's network log shows made for the page.
//!
//! The oracle is the JSON report of the same audit, read here with the
//! capability rules as docs/cuda-elf-inspect.md states them (not with our
//! matrix code): per requested capability the file's `coverage`, for every
//! other capability the SASS/PTX/link-stub lists. Pages: the real-library
//! corpus (tests/tools/corpus.sh; once without and once with a driver, so
//! the driver's verdicts show) and a tree of hostile names (each a copy of
//! a real CUDA library), whose DOM must hold the names as text and exactly
//! the elements the same tree with plain names has.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::root;
use serde_json::Value;

/// Runs the audit in `format`; the report on stdout.
fn audit(dir: &Path, format: &str, extra: &[&str], paths: &[PathBuf]) -> Vec<u8> {
    let out = common::outside_build(
        Command::new(env!("CARGO_BIN_EXE_cuda-elf-inspect"))
            .args(["--format", format, "--cuda-capabilities", "8.0;9.0"])
            .args(extra)
            .args(paths),
    )
    .current_dir(dir)
    .env("NO_COLOR", "1")
    .output()
    .unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", common::text(&out));
    out.stdout
}

/// The page rendered by Chromium, as tests/tools/dom.py reads it back.
fn render(page: &Path) -> Value {
    let out =
        Command::new("python3").arg(root().join("tests/tools/dom.py")).arg(page).output().unwrap();
    assert!(out.status.success(), "dom.py: {}", common::text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What the page shows of a name: control characters as U+FFFD.
fn shown(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { '\u{fffd}' } else { c }).collect()
}

/// `(major, minor, variant)` of `sm_90a` or `9.0`.
fn cap(name: &str) -> (u32, u32, char) {
    let t = name.trim_start_matches("sm_").trim_start_matches("compute_");
    let (t, v) = match t.chars().last() {
        Some(c @ ('a' | 'f')) => (&t[..t.len() - 1], c),
        _ => (t, ' '),
    };
    match t.split_once('.') {
        Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap(), v),
        None => {
            let n: u32 = t.parse().unwrap();
            (n / 10, n % 10, v)
        }
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// The columns the JSON implies: requested capabilities in coverage order,
/// then every other base capability with SASS, PTX or link stubs.
fn expected_columns(files: &[Value]) -> Vec<(String, bool)> {
    let mut req: Vec<String> = Vec::new();
    for f in files {
        for c in f["coverage"].as_array().into_iter().flatten() {
            let name = c["capability"].as_str().unwrap().to_string();
            if !req.contains(&name) {
                req.push(name);
            }
        }
    }
    let taken: Vec<(u32, u32)> = req.iter().map(|r| (cap(r).0, cap(r).1)).collect();
    let mut others = std::collections::BTreeSet::new();
    for d in files.iter().filter_map(|f| f.get("device")) {
        for key in ["sass", "ptx", "link_stub_only"] {
            for a in strings(&d[key]) {
                let (ma, mi, _) = cap(&a);
                if !taken.contains(&(ma, mi)) {
                    others.insert((ma, mi));
                }
            }
        }
    }
    let mut out: Vec<(String, bool)> = req.into_iter().map(|r| (r, true)).collect();
    out.extend(others.into_iter().map(|(a, b)| (format!("{a}.{b}"), false)));
    out
}

/// The CUDA rule for a capability no coverage entry speaks of: SASS runs
/// on the same major with a minor at most the device's (`a`: exactly that
/// capability); PTX runs on every capability at least its own (`f`: the same
/// major; `a`: exactly).
fn runs(code: (u32, u32, char), device: (u32, u32), ptx: bool) -> bool {
    let (ma, mi, v) = code;
    match (v, ptx) {
        ('a', _) => (ma, mi) == device,
        (_, false) | ('f', true) => ma == device.0 && mi <= device.1,
        _ => (ma, mi) <= device,
    }
}

/// The class the JSON implies for one cell.
fn expected_cell(file: &Value, column: &str, requested: bool) -> &'static str {
    let d = &file["device"];
    let device = (cap(column).0, cap(column).1);
    let uncovered = || {
        if d.get("unscanned_container").is_some() {
            "not-read"
        } else if strings(&d["link_stub_only"]).iter().any(|a| (cap(a).0, cap(a).1) == device) {
            "link-stubs"
        } else {
            "nothing"
        }
    };
    if requested {
        let c = file["coverage"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["capability"] == column))
            .unwrap_or_else(|| panic!("no coverage of {column} in {file}"));
        return match c["runs"].as_str().unwrap() {
            "native" => "sass",
            "jit" if c["driver"]["runs"] == false => "ptx-driver-fails",
            "jit" => "ptx",
            _ => uncovered(),
        };
    }
    if strings(&d["sass"]).iter().any(|a| runs(cap(a), device, false)) {
        "sass"
    } else if strings(&d["ptx"]).iter().any(|a| runs(cap(a), device, true)) {
        "ptx"
    } else {
        uncovered()
    }
}

/// Compares the rendered page with the JSON report of the same audit; the
/// cell kinds seen, counted.
fn compare(dom: &Value, json: &Value) -> BTreeMap<String, usize> {
    let files: Vec<Value> = json["files"].as_array().unwrap().clone();
    let columns = expected_columns(&files);
    let got_columns: Vec<(String, bool)> = dom["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["cap"].as_str().unwrap().to_string(), c["requested"].as_bool().unwrap()))
        .collect();
    assert_eq!(got_columns, columns, "matrix columns");
    let with_device: Vec<&Value> = files.iter().filter(|f| f.get("device").is_some()).collect();
    let rows = dom["rows"].as_array().unwrap();
    assert_eq!(rows.len(), with_device.len(), "one row per file with device code");
    let letters = [
        ("sass", "S"),
        ("ptx", "P"),
        ("ptx-driver-fails", "D"),
        ("link-stubs", "L"),
        ("not-read", "?"),
        ("nothing", "N"),
    ];
    let mut seen = BTreeMap::new();
    for (row, file) in rows.iter().zip(with_device) {
        let path = shown(file["path"].as_str().unwrap());
        assert_eq!(row["path"].as_str().unwrap(), path);
        let name = row["name"].as_str().unwrap();
        assert!(path.ends_with(name) && !name.is_empty(), "row name {name:?} of {path:?}");
        let cells = row["cells"].as_array().unwrap();
        assert_eq!(cells.len(), columns.len(), "{path}");
        for ((column, requested), cell) in columns.iter().zip(cells) {
            let want = expected_cell(file, column, *requested);
            let class = cell["class"].as_str().unwrap();
            assert_eq!(class, want, "{path}, capability {column}: {cell}");
            let letter = letters.iter().find(|(c, _)| *c == class).unwrap().1;
            assert_eq!(cell["text"].as_str().unwrap(), letter, "{path} {column}");
            *seen.entry(class.to_string()).or_insert(0) += 1;
        }
    }
    // Findings: every one, in the JSON's order within its check.
    let mut want: Vec<(String, String, String, String)> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["check"].as_str().unwrap().to_string(),
                f["severity"].as_str().unwrap().to_string(),
                shown(f["path"].as_str().unwrap()),
                shown(f["message"].as_str().unwrap()),
            )
        })
        .collect();
    // A row per file and severity within a check, its messages one per line.
    let mut got: Vec<(String, String, String, String)> = Vec::new();
    for f in dom["findings"].as_array().unwrap() {
        let cells = strings(&f["cells"]);
        assert_eq!(cells.len(), 3, "{f}");
        assert_eq!(cells[0], f["severity"].as_str().unwrap());
        let messages = strings(&f["messages"]);
        assert!(!messages.is_empty(), "{f}");
        for m in messages {
            got.push((
                f["check"].as_str().unwrap().to_string(),
                f["severity"].as_str().unwrap().to_string(),
                cells[1].clone(),
                m,
            ));
        }
    }
    want.sort();
    got.sort();
    assert_eq!(got, want, "findings on the page");
    seen
}

/// Nothing fetched, nothing that could fetch, one script (ours, run under
/// the page's Content-Security-Policy: it showed the filters).
fn assert_self_contained(dom: &Value) {
    assert_eq!(dom["net"], serde_json::json!([]), "requests made for the page");
    assert_eq!(dom["fetching"], serde_json::json!([]), "attributes that fetch or run code");
    assert_eq!(dom["tags"]["script"], 1);
    assert_eq!(dom["scripts"], serde_json::json!([{}]), "the one script is inline");
    for tag in ["link", "img", "iframe", "object", "embed", "base", "svg", "a"] {
        assert!(dom["tags"].get(tag).is_none(), "a <{tag}> on the page");
    }
}

fn corpus() -> Vec<PathBuf> {
    let out = Command::new("bash").arg(root().join("tests/tools/corpus.sh")).output().unwrap();
    assert!(out.status.success(), "corpus.sh: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(PathBuf::from).collect()
}

#[test]
fn the_network_check_sees_a_page_that_fetches() {
    // The control: without it, an empty request list would prove nothing.
    let t = tempfile::tempdir().unwrap();
    let page = t.path().join("control.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><body><img src=\"http://example.invalid/x.png\"></body></html>",
    )
    .unwrap();
    let dom = render(&page);
    assert_eq!(dom["net"], serde_json::json!(["http://example.invalid/x.png"]));
    assert_eq!(dom["fetching"][0]["attr"], "src");
}

#[test]
fn the_corpus_matrix_in_chromium_is_the_json_report() {
    let files = corpus();
    let t = tempfile::tempdir().unwrap();
    let mut kinds = BTreeMap::new();
    // Without a driver, then with a CUDA 12.0 driver (CUDA 13's PTX and
    // runtime are too new for it).
    for extra in [&[][..], &["--driver-cuda", "12.0"][..]] {
        let json: Value = serde_json::from_slice(&audit(t.path(), "json", extra, &files)).unwrap();
        let page = t.path().join("corpus.html");
        std::fs::write(&page, audit(t.path(), "html", extra, &files)).unwrap();
        let dom = render(&page);
        assert_self_contained(&dom);
        for (k, n) in compare(&dom, &json) {
            *kinds.entry(k).or_insert(0) += n;
        }
        assert!(dom["filters_shown"].as_bool().unwrap(), "the filter script did not run");
    }
    // The corpus shows SASS, PTX-only and uncovered cells.
    for kind in ["sass", "ptx", "nothing"] {
        assert!(kinds.contains_key(kind), "no {kind} cell in the corpus: {kinds:?}");
    }
}

/// A tree of copies (hard links where possible) of one real CUDA library
/// under `names`, relative to `dir/tree`.
fn tree(dir: &Path, lib: &Path, names: &[Vec<u8>]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for name in names {
        let rel = PathBuf::from(OsStr::from_bytes(&[b"tree/".as_slice(), name].concat()));
        let file = dir.join(&rel);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        if std::fs::hard_link(lib, &file).is_err() {
            std::fs::copy(lib, &file).unwrap();
        }
        files.push(rel);
    }
    files
}

#[test]
fn hostile_names_stay_text_in_the_rendered_page() {
    let lib = corpus()
        .into_iter()
        .find(|p| p.to_string_lossy().contains("_generator_api"))
        .expect("cupy's _generator_api in the corpus");
    let hostile = common::hostile::names();
    // The same tree with plain names (same folders): the page must have
    // exactly the same elements.
    let plain: Vec<Vec<u8>> = hostile
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut p = format!("{i}-").into_bytes();
            p.extend(n.iter().map(|&b| if b == b'/' { b'/' } else { b'x' }));
            p
        })
        .collect();
    let mut tags = Vec::new();
    for names in [&hostile, &plain] {
        let t = tempfile::tempdir_in(root().join("target")).unwrap();
        let files = tree(t.path(), &lib, names);
        let json: Value =
            serde_json::from_slice(&audit(t.path(), "json", &[], &[PathBuf::from("tree")]))
                .unwrap();
        assert_eq!(json["files"].as_array().unwrap().len(), files.len());
        let page = t.path().join("page.html");
        std::fs::write(&page, audit(t.path(), "html", &[], &[PathBuf::from("tree")])).unwrap();
        let dom = render(&page);
        assert_self_contained(&dom);
        compare(&dom, &json);
        // Each name shows as text (control characters replaced) in its row.
        let rows = dom["rows"].as_array().unwrap();
        for f in &files {
            let name = shown(&f.file_name().unwrap().to_string_lossy());
            assert!(rows.iter().any(|r| r["name"] == name.as_str()), "{name:?} not shown as text");
        }
        tags.push(dom["tags"].clone());
    }
    assert_eq!(tags[0], tags[1], "hostile names changed the page's elements");
}

/// `device.bytes` (the `device-code.ARCH` metrics' source) against
/// `--summary`'s entry list, an independent walk of every entry: per
/// architecture, the entries' stored sizes (inside a `--concat` bundle,
/// their plain sizes).
#[test]
fn device_code_bytes_are_the_entries_sizes() {
    let files = corpus();
    let t = tempfile::tempdir().unwrap();
    let audit: Value = serde_json::from_slice(&audit(t.path(), "json", &[], &files)).unwrap();
    let out = common::outside_build(
        Command::new(env!("CARGO_BIN_EXE_cuda-elf-inspect"))
            // The audit reads fatbins outside the sections by default
            // (cuFFT's in `.ldata`); --summary lists them with --scan.
            .args(["--summary", "--scan", "--format", "json"])
            .args(&files),
    )
    .output()
    .unwrap();
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut checked = 0;
    for (a, s) in
        audit["files"].as_array().unwrap().iter().zip(summary["files"].as_array().unwrap())
    {
        assert_eq!(a["path"], s["path"]);
        let mut want: BTreeMap<String, u64> = BTreeMap::new();
        let scanned = s.get("scanned").and_then(Value::as_array).into_iter().flatten();
        for e in s["entries"].as_array().unwrap().iter().chain(scanned) {
            if !matches!(e["kind"].as_str(), Some("elf" | "ptx" | "lto-ir")) {
                continue;
            }
            let n = if e.get("concat").is_some() { &e["plain_size"] } else { &e["stored_size"] };
            *want.entry(e["arch"].as_str().unwrap().to_string()).or_default() +=
                n.as_u64().unwrap();
        }
        want.retain(|_, n| *n > 0);
        let got: BTreeMap<String, u64> = a["device"]["bytes"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap())).collect())
            .unwrap_or_default();
        assert_eq!(got, want, "{}", a["path"]);
        checked += got.len();
    }
    assert!(checked > 20, "only {checked} architectures compared");
}
