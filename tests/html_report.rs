//! `cuda-elf-inspect --format html` in a real browser: Debian's Chromium,
//! headless (`make tools`), renders the page; tests/tools/dom.py dumps the
//! DOM after the page's script ran and reads back the matrix cells, the
//! findings, every element and every attribute that could fetch, and the
//! requests Chromium's network log shows made for the page.
//!
//! The oracle is the JSON report of the same audit, read here with the
//! capability rules as docs/cuda-elf-inspect.md states them (not with our
//! matrix code): per requested capability the file's `coverage`, for every
//! other capability the SASS/PTX/link-stub lists, and with a driver given
//! the driver rules of docs/driver-compatibility.md on the file's `runtime`
//! and `ptx_isa` (a cell whose code the driver cannot run is `D`, SASS or
//! PTX, requested or not). Pages: the real-library
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

const BIN: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// The arguments of an audit in `format` asking for 8.0 and 9.0.
fn audit_args(format: &str, extra: &[&str], paths: &[PathBuf]) -> Vec<String> {
    let mut args: Vec<String> =
        ["--format", format, "--cuda-capabilities", "8.0;9.0"].map(String::from).to_vec();
    args.extend(extra.iter().map(|a| a.to_string()));
    args.extend(paths.iter().map(|p| p.to_string_lossy().into_owned()));
    args
}

/// Runs the audit with `args`, in `dir`, outside any build; the report on
/// stdout, whose exit status must be one of `statuses`.
fn run(dir: &Path, args: &[String], env: &[(&str, &str)], statuses: &[i32]) -> Vec<u8> {
    let out = common::outside_build(Command::new(BIN).args(args).envs(env.iter().copied()))
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(statuses.contains(&out.status.code().unwrap_or(-1)), "{}", common::text(&out));
    out.stdout
}

/// Runs the audit in `format`; the report on stdout.
fn audit(dir: &Path, format: &str, extra: &[&str], paths: &[PathBuf]) -> Vec<u8> {
    run(dir, &audit_args(format, extra, paths), &[], &[0, 1])
}

/// The page rendered by Chromium, as tests/tools/dom.py reads it back.
fn render(page: &Path) -> Value {
    render_at(page, None)
}

/// The page opened at `#fragment`, rendered.
fn render_at(page: &Path, fragment: Option<&str>) -> Value {
    let out = Command::new("python3")
        .arg(root().join("tests/tools/dom.py"))
        .arg(page)
        .args(fragment)
        .output()
        .unwrap();
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

/// Jetson capabilities, as the checks table of docs/cuda-elf-inspect.md
/// lists them (7.2, 8.7, 10.1 before CUDA 13, 11.0).
const JETSON: [(u32, u32); 4] = [(7, 2), (8, 7), (10, 1), (11, 0)];

/// The CUDA rule for a capability no coverage entry speaks of: SASS runs
/// on the same major with a minor at most the device's (`a`: exactly that
/// capability); PTX runs on every capability at least its own (`a`:
/// exactly); `f` code, SASS or PTX, within its family: the same major, a
/// minor at most the device's, and Jetson with Jetson only (10.0f not on
/// Thor's 10.1).
fn runs(code: (u32, u32, char), device: (u32, u32), ptx: bool) -> bool {
    let (ma, mi, v) = code;
    let same_major = ma == device.0 && mi <= device.1;
    match (v, ptx) {
        ('a', _) => (ma, mi) == device,
        ('f', _) => same_major && JETSON.contains(&(ma, mi)) == JETSON.contains(&device),
        (_, false) => same_major,
        _ => (ma, mi) <= device,
    }
}

/// The first CUDA version whose driver JIT-compiles PTX of ISA `isa`, as
/// docs/driver-compatibility.md states it: 7.N with 11.N (N <= 8), 8.0-8.5
/// with 12.0-12.5, 8.6 with 12.7, 8.7 with 12.8, 8.8 with 12.9, 9.N with 13.N.
fn isa_needs(isa: &str) -> Option<(u32, u32)> {
    let (a, b) = isa.split_once('.')?;
    let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
    match (a, b) {
        (7, 0..=8) => Some((11, b)),
        (8, 0..=5) => Some((12, b)),
        (8, 6..=8) => Some((12, b + 1)),
        (9, _) => Some((13, b)),
        _ => None,
    }
}

/// Whether a driver of CUDA `driver` runs the file's code (`ptx`: the PTX
/// architecture picked, else SASS), by docs/driver-compatibility.md: its
/// runtime's major version at most the driver's (unknown: not decided, so
/// not "runs"), and PTX of an ISA the driver JIT-compiles.
fn driver_runs(file: &Value, ptx: Option<&str>, driver: (u32, u32)) -> bool {
    if let Some(rt) = file.get("runtime") {
        // docs/cuda-elf-inspect.md: "runs" only where the major is proven
        // (a shared runtime, a static one that names its version, a known
        // library release); an unknown runtime is no "runs" (a D cell).
        let major = match rt["linkage"].as_str().unwrap() {
            "shared" => rt["major"].as_u64().map(|m| m as u32),
            "library-release" => rt["cuda_major"].as_u64().map(|m| m as u32),
            "static" => rt["version"].as_str().map(|v| cap(v).0),
            _ => None,
        };
        match major {
            Some(m) if m <= driver.0 => {}
            _ => return false,
        }
    }
    match ptx {
        None => true,
        Some(arch) => {
            let isa = file["device"]["ptx_isa"][arch].as_str();
            isa.and_then(isa_needs).is_some_and(|needs| needs <= driver)
        }
    }
}

/// The class the JSON implies for one cell; `driver`: the CUDA version of
/// the driver given, if any.
fn expected_cell(
    file: &Value,
    column: &str,
    requested: bool,
    driver: Option<(u32, u32)>,
) -> &'static str {
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
            "native" | "jit" if c["driver"]["runs"] == false => "driver-fails",
            "native" => "sass",
            "jit" => "ptx",
            _ => uncovered(),
        };
    }
    // The driver picks SASS over PTX, and the newest PTX that runs.
    let sass = strings(&d["sass"]).iter().any(|a| runs(cap(a), device, false));
    let ptx = strings(&d["ptx"])
        .into_iter()
        .filter(|a| runs(cap(a), device, true))
        .max_by_key(|a| (cap(a).0, cap(a).1, cap(a).2 == ' '));
    // A driver older than the first one that drove the column's GPUs runs
    // nothing there it could be asked about (docs/driver-compatibility.md,
    // "GPUs newer than the driver"; NVIDIA's release notes: Blackwell's
    // 10.0 and 12.0 with CUDA 12.8, 10.3 and 12.1 with 12.9).
    let newer_gpu = |drv: (u32, u32)| {
        let first = match device {
            (10, 0) | (12, 0) => (12, 8),
            (10, 3) | (12, 1) => (12, 9),
            (9, 0) | (8, 9) => (11, 8),
            _ => (0, 0),
        };
        drv < first
    };
    let fails = |ptx: Option<&str>| {
        driver.is_some_and(|drv| newer_gpu(drv) || !driver_runs(file, ptx, drv))
    };
    match (sass, &ptx) {
        (true, _) if fails(None) => "driver-fails",
        (true, _) => "sass",
        (false, Some(a)) if fails(Some(a)) => "driver-fails",
        (false, Some(_)) => "ptx",
        (false, None) => uncovered(),
    }
}

/// Compares the rendered page with the JSON report of the same audit
/// (`driver`: the CUDA version of the driver given); the cell kinds seen,
/// counted (`KIND` in requested columns, `KIND unrequested` in the others).
fn compare(dom: &Value, json: &Value, driver: Option<(u32, u32)>) -> BTreeMap<String, usize> {
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
        ("driver-fails", "D"),
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
            let want = expected_cell(file, column, *requested, driver);
            // The kind, then `unrequested` (a muted cell) in a column
            // nobody requested.
            let classes: Vec<&str> = cell["class"].as_str().unwrap().split(' ').collect();
            let expected = if *requested { vec![want] } else { vec![want, "unrequested"] };
            assert_eq!(classes, expected, "{path}, capability {column}: {cell}");
            let letter = letters.iter().find(|(c, _)| *c == want).unwrap().1;
            assert_eq!(cell["text"].as_str().unwrap(), letter, "{path} {column}");
            *seen.entry(classes.join(" ")).or_insert(0) += 1;
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
    corpus_sets(&[])
}

/// The library files of corpus sets (none: the test set).
fn corpus_sets(sets: &[&str]) -> Vec<PathBuf> {
    let out =
        Command::new("bash").arg(root().join("tests/tools/corpus.sh")).args(sets).output().unwrap();
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

/// The words a shell reads back from `line` (POSIX `sh`, `printf %s\\0`).
fn shell_words(line: &str) -> Vec<String> {
    let out = Command::new("sh").arg("-c").arg(format!("printf '%s\\0' {line}")).output().unwrap();
    assert!(out.status.success(), "sh: {}", common::text(&out));
    let mut words: Vec<String> =
        String::from_utf8(out.stdout).unwrap().split('\0').map(String::from).collect();
    words.pop();
    words
}

#[test]
fn the_corpus_matrix_in_chromium_is_the_json_report() {
    let files = corpus();
    let t = tempfile::tempdir().unwrap();
    let mut kinds = BTreeMap::new();
    // Without a driver, then with a CUDA 12.0 driver (CUDA 13's PTX and
    // runtime are too new for it).
    for (extra, driver) in [(&[][..], None), (&["--driver-cuda", "12.0"][..], Some((12, 0)))] {
        let json: Value = serde_json::from_slice(&audit(t.path(), "json", extra, &files)).unwrap();
        let page = t.path().join("corpus.html");
        let args = audit_args("html", extra, &files);
        std::fs::write(&page, run(t.path(), &args, &[], &[0, 1])).unwrap();
        let dom = render(&page);
        assert_self_contained(&dom);
        for (k, n) in compare(&dom, &json, driver) {
            *kinds.entry(k).or_insert(0) += n;
        }
        assert!(dom["filters_shown"].as_bool().unwrap(), "the filter script did not run");
        // The command line pastes back into a shell as the same words
        // (`8.0;9.0` holds a `;`).
        let command = dom["ids"]["command"]["text"].as_str().unwrap();
        let mut argv = vec![BIN.to_string()];
        argv.extend(args);
        assert_eq!(shell_words(command), argv, "{command}");
        let requested = dom["ids"]["requested"]["text"].as_str().unwrap();
        assert!(requested.contains("8.0;9.0") && requested.contains("--cuda-capabilities"));
        if driver.is_some() {
            for row in dom["rows"].as_array().unwrap() {
                for c in row["cells"].as_array().unwrap() {
                    let (class, title) =
                        (c["class"].as_str().unwrap(), c["title"].as_str().unwrap());
                    if class.starts_with("driver-fails") {
                        assert!(
                            title.contains("driver cannot") || title.contains("not decided"),
                            "a D cell without its reason: {title}"
                        );
                    }
                }
            }
        }
    }
    // The corpus shows SASS, PTX-only and uncovered cells, requested or
    // not; with the CUDA 12.0 driver, SASS it cannot run (cuRAND 13's
    // runtime) and PTX it cannot JIT (CuPy's compute_100 at 11.0).
    for kind in [
        "sass",
        "driver-fails",
        "sass unrequested",
        "ptx unrequested",
        "nothing unrequested",
        "driver-fails unrequested",
    ] {
        assert!(kinds.contains_key(kind), "no {kind} cell in the corpus: {kinds:?}");
    }
}

/// The severity filters, set from the URL, in Chromium: a check's section
/// shows only while it has a finding of a ticked severity, its heading
/// counts those (`1 of 3 findings`), and with nothing left the page says so.
#[test]
fn severity_filters_hide_empty_sections_and_count_what_is_shown() {
    // NVRTC 13's dlopen of an unversioned library is an error, CuPy's
    // unresolved dlopen targets are warnings: one check, two severities.
    let files = corpus_sets(&["curand12", "curand13", "cupy", "cufft", "nvrtc13"]);
    let t = tempfile::tempdir().unwrap();
    let json: Value = serde_json::from_slice(&audit(t.path(), "json", &[], &files)).unwrap();
    let page = t.path().join("corpus.html");
    std::fs::write(&page, audit(t.path(), "html", &[], &files)).unwrap();
    // Per check, its findings per severity, from the JSON.
    let mut want: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for f in json["findings"].as_array().unwrap() {
        *want
            .entry(f["check"].as_str().unwrap().to_string())
            .or_default()
            .entry(f["severity"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    let (mut hidden_seen, mut partial_seen) = (0, 0);
    for shown in
        [&["error", "warning", "info"][..], &["error"][..], &["warning", "info"][..], &[][..]]
    {
        let dom = render_at(&page, Some(&format!("show={}", shown.join(","))));
        let classes = dom["findings_list_class"].as_str().unwrap_or("");
        for sev in ["error", "warning", "info"] {
            let hides = classes.split(' ').any(|c| c == format!("hide-{sev}"));
            assert_eq!(hides, !shown.contains(&sev), "rows of {sev}: list classes {classes:?}");
        }
        let sections = dom["sections"].as_array().unwrap();
        assert_eq!(sections.len(), want.len(), "one section per check");
        for sec in sections {
            let counts = &want[sec["check"].as_str().unwrap()];
            let total: usize = counts.values().sum();
            let n: usize = shown.iter().map(|s| counts.get(*s).copied().unwrap_or(0)).sum();
            assert_eq!(sec["hidden"].as_bool().unwrap(), n == 0, "{sec} with {shown:?}");
            let plural = if total == 1 { "finding" } else { "findings" };
            let count = if n == total {
                format!("{total} {plural}")
            } else {
                format!("{n} of {total} {plural}")
            };
            assert_eq!(sec["count"].as_str().unwrap(), count, "{sec} with {shown:?}");
            hidden_seen += usize::from(n == 0);
            partial_seen += usize::from(n > 0 && n < total);
        }
        let none = dom["ids"]["none-shown"]["hidden"].as_bool().unwrap();
        assert_eq!(!none, shown.is_empty(), "'No finding matches' with {shown:?}");
    }
    assert!(
        hidden_seen > 0 && partial_seen > 0,
        "the corpus shows no section hidden or partly shown"
    );
    // A check picked in the URL: the other checks are hidden by style
    // (`data-only` on the list), its own section counts its shown findings.
    let (check, counts) = want.iter().find(|(_, c)| c.contains_key("error")).unwrap();
    let dom = render_at(&page, Some(&format!("show=error&check={check}")));
    let sec =
        dom["sections"].as_array().unwrap().iter().find(|s| s["check"] == check.as_str()).unwrap();
    assert!(!sec["hidden"].as_bool().unwrap());
    assert!(sec["count"].as_str().unwrap().starts_with(&counts["error"].to_string()), "{sec}");
    assert_eq!(dom["findings_list_only"], check.as_str(), "the check filter");
    assert!(dom["ids"]["none-shown"]["hidden"].as_bool().unwrap());
}

/// Capabilities a Nix build passes in `$cudaCapabilities` (not on the
/// command line) are named on the page with their source.
#[test]
fn capabilities_from_the_environment_are_named() {
    let lib =
        corpus().into_iter().find(|p| p.to_string_lossy().contains("_generator_api")).unwrap();
    let t = tempfile::tempdir().unwrap();
    let args: Vec<String> = vec!["--format".into(), "html".into(), lib.to_string_lossy().into()];
    let page = t.path().join("env.html");
    std::fs::write(&page, run(t.path(), &args, &[("cudaCapabilities", "8.0;9.0")], &[0, 1]))
        .unwrap();
    let dom = render(&page);
    let requested = dom["ids"]["requested"]["text"].as_str().unwrap();
    assert!(
        requested.contains("8.0;9.0") && requested.contains("$cudaCapabilities"),
        "{requested}"
    );
    let req: Vec<&Value> =
        dom["columns"].as_array().unwrap().iter().filter(|c| c["requested"] == true).collect();
    assert_eq!(req.iter().map(|c| c["cap"].as_str().unwrap()).collect::<Vec<_>>(), ["8.0", "9.0"]);
}

/// Pages with nothing to draw say so, and draw no legend for it: an empty
/// folder (no file examined), a missing path (named before "No findings",
/// which then says it is no clean bill), a file without device code, and
/// device code with no capability requested (a legend without `*`).
#[test]
fn edge_pages_say_what_is_not_there() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("empty")).unwrap();
    // A host ELF file without device code: this test's own binary.
    std::fs::copy(std::env::current_exe().unwrap(), t.path().join("host")).unwrap();
    let lib =
        corpus().into_iter().find(|p| p.to_string_lossy().contains("_generator_api")).unwrap();
    let page = |name: &str, args: &[&str], statuses: &[i32]| {
        let mut a: Vec<String> = vec!["--format".into(), "html".into()];
        a.extend(args.iter().map(|s| s.to_string()));
        let p = t.path().join(format!("{name}.html"));
        std::fs::write(&p, run(t.path(), &a, &[], statuses)).unwrap();
        render(&p)
    };
    let empty = page("empty", &["--cuda-capabilities", "9.0", "empty"], &[0]);
    let text = empty["ids"]["no-files"]["text"].as_str().unwrap();
    assert!(text.starts_with("No file was examined"), "{text}");
    assert_eq!(empty["legend"], serde_json::json!([]), "a legend without a matrix");
    assert_eq!(empty["ids"]["no-findings"]["text"], "No findings.");

    let missing = page("missing", &["--cuda-capabilities", "9.0", "no-such-path"], &[2]);
    let h: Vec<&str> =
        missing["headings"].as_array().unwrap().iter().map(|h| h.as_str().unwrap()).collect();
    let at =
        |id: &str| h.iter().position(|x| *x == id).unwrap_or_else(|| panic!("no {id} in {h:?}"));
    assert!(at("failures") < at("findings"), "'Not examined' after the findings: {h:?}");
    let text = missing["ids"]["no-findings"]["text"].as_str().unwrap();
    assert!(text.contains("1 path was not examined"), "{text}");
    assert!(missing["ids"]["no-files"]["text"]
        .as_str()
        .unwrap()
        .starts_with("No file was examined"));
    assert_eq!(missing["legend"], serde_json::json!([]));

    let host = page("host", &["--cuda-capabilities", "9.0", "host"], &[0, 1]);
    assert_eq!(host["ids"]["no-device-code"]["text"], "No file has device code.");
    assert_eq!(host["legend"], serde_json::json!([]), "a legend without a matrix");

    let unrequested = page("unrequested", &[lib.to_str().unwrap()], &[0, 1]);
    let legend: Vec<&str> =
        unrequested["legend"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert!(!legend.is_empty() && !legend.iter().any(|l| l.ends_with('*')), "{legend:?}");
    assert!(unrequested["columns"].as_array().unwrap().iter().all(|c| c["requested"] == false));
    let text = unrequested["ids"]["requested"]["text"].as_str().unwrap();
    assert!(text.starts_with("No capability was requested"), "{text}");
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
        compare(&dom, &json, None);
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
