//! What a new user reads (issue 23, "the five text-report items"): each
//! test here failed on the code before the change it covers.
//!
//! 1. code outside the fatbin sections is read by default, and code not read
//!    is said to be "not read", never "nothing runs";
//! 2. the text report's counts count what it shows; the JSON summary counts
//!    what the JSON lists;
//! 3. `jetson-capability-mismatch` is a warning only where someone can act
//!    on it;
//! 4. `--explain CHECK` prints the checks table's row;
//! 5. `auto-add-driver-runpath --help` says which files get the `-32` link.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::text;

const CEI: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");
const AADR: &str = env!("CARGO_BIN_EXE_auto-add-driver-runpath");

/// Runs `exe` outside a build (no build variables, no capability variables).
fn run(exe: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(exe);
    common::outside_build(&mut cmd);
    for var in ["cudaCapabilities", "CUDAARCHS", "TORCH_CUDA_ARCH_LIST", "NO_COLOR"] {
        cmd.env_remove(var);
    }
    cmd.args(args).output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The help with clap's line wrapping undone.
fn flat(help: &str) -> String {
    help.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn driver_link_help_names_i686_as_upstream_does() {
    // Upstream's rule, read in place: the `-32` link is for i686 alone.
    let package = Path::new(common::nixpkgs()).join("pkgs/by-name/ad/addDriverRunpath/package.nix");
    let nix = std::fs::read_to_string(&package).unwrap();
    assert!(nix.contains(r#"optionalString stdenv.hostPlatform.isi686 "-32""#), "{nix}");
    let out = run(AADR, &["--help"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let help = flat(&stdout(&out));
    assert!(help.contains("/run/opengl-driver-32 for i686 files"), "{help}");
    assert!(!help.contains("32-bit ones") && !help.contains("for 32-bit files"), "{help}");
    assert!(help.contains("32-bit ARM included"), "{help}");
}

/// A file of a corpus set (tests/tools/corpus.sh: pinned wheels).
fn corpus_file(set: &str, name: &str) -> PathBuf {
    corpus(&[set])
        .into_iter()
        .find(|p| p.ends_with(name))
        .unwrap_or_else(|| panic!("corpus set {set} has no {name}"))
}

/// The library files of corpus sets (none: the test set).
fn corpus(sets: &[&str]) -> Vec<PathBuf> {
    let script = common::root().join("tests/tools/corpus.sh");
    let out = Command::new("bash").arg(&script).args(sets).output().expect("bash");
    assert!(
        out.status.success(),
        "tests/tools/corpus.sh {sets:?} failed (needs PyPI and `make tools`):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).lines().map(PathBuf::from).collect()
}

fn json(args: &[&str], files: &[PathBuf]) -> serde_json::Value {
    let mut cmd = Command::new(CEI);
    common::outside_build(&mut cmd);
    let out = cmd
        .env_remove("cudaCapabilities")
        .args(["--format", "json"])
        .args(args)
        .args(files)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
}

#[test]
fn cufft_code_outside_its_sections_is_read_by_default_and_unread_code_is_said_so() {
    let lib = corpus_file("cufft", "libcufft.so.11");
    let path = lib.to_str().unwrap();
    let out = run(CEI, &["--cuda-capabilities", "8.0;9.0", path]);
    let report = stdout(&out);
    assert!(report.contains("    requested 8.0: SASS sm_80; 9.0: SASS sm_90\n"), "{report}");
    assert!(!report.contains("nothing runs"), "{report}");
    assert!(!report.contains("[device-code-not-scanned]"), "{report}");
    // The default reads the same code as --scan, which searches every byte.
    let default = json(&["--cuda-capabilities", "8.0;9.0"], std::slice::from_ref(&lib));
    let full = json(&["--scan", "--cuda-capabilities", "8.0;9.0"], std::slice::from_ref(&lib));
    assert_eq!(default["files"][0]["device"], full["files"][0]["device"], "{default}");
    assert!(default["files"][0]["device"]["scanned_containers"].as_u64().unwrap() > 10_000);
    // --no-scan (the opt-out): the code is not read, and the report says so
    // instead of "nothing runs"; no capability is judged on it.
    let out = run(CEI, &["--no-scan", "--cuda-capabilities", "8.0;9.0", path]);
    let report = stdout(&out);
    assert!(
        report.contains("    requested 8.0: not read (fatbins outside the fatbin sections, --no-scan); 9.0: not read ("),
        "{report}"
    );
    assert!(!report.contains("nothing runs"), "{report}");
    assert!(report.contains("warning [device-code-not-scanned]"), "{report}");
    assert!(!report.contains("[no-code-for-capability]"), "{report}");
    let v = json(&["--no-scan", "--cuda-capabilities", "8.0;9.0"], std::slice::from_ref(&lib));
    for c in v["files"][0]["coverage"].as_array().unwrap() {
        assert_eq!(c["not_read"], true, "{c}");
    }
}

/// `--summary` reads what the audit reads: cuFFT's code outside its
/// sections by default (before, it listed one link stub and said nothing of
/// the 24,453 entries it left unread), and with `--no-scan` it says what it
/// left unread.
#[test]
fn summary_reads_cufft_code_outside_its_sections_and_says_what_it_left_unread() {
    let lib = corpus_file("cufft", "libcufft.so.11");
    let path = lib.to_str().unwrap();
    let summary =
        |args: &[&str]| json(&[&["--summary"], args].concat(), std::slice::from_ref(&lib));
    let (default, full) = (summary(&[]), summary(&["--scan"]));
    let (d, f) = (&default["files"][0], &full["files"][0]);
    assert_eq!(d["summary"], f["summary"], "{d}");
    assert_eq!(d["scanned"], f["scanned"]);
    assert!(d["scanned"].as_array().unwrap().len() > 10_000);
    // The summary and the audit agree on the SASS the file carries.
    let audit = json(&[], std::slice::from_ref(&lib));
    let sass = |v: &serde_json::Value| {
        let mut s: Vec<String> =
            v.as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
        s.sort();
        s
    };
    assert_eq!(sass(&d["summary"]["sass"]), sass(&audit["files"][0]["device"]["sass"]));
    let text = stdout(&run(CEI, &["--summary", path]));
    assert!(text.contains("\n  SASS:           sm_50 "), "{text}");
    assert!(text.contains("  scan: 24453 entries outside the fatbin sections"), "{text}");
    // --no-scan: the section's one link stub, and a line saying what is not read.
    let out = run(CEI, &["--summary", "--no-scan", path]);
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out));
    let text = stdout(&out);
    assert!(text.contains("  link stub only: sm_52\n"), "{text}");
    assert!(
        text.contains(
            "  not read:       fatbin containers outside the fatbin sections (one at offset 0x"
        ),
        "{text}"
    );
    let v = summary(&["--no-scan"]);
    assert!(v["files"][0]["unscanned_container"].as_u64().unwrap() > 0);
    assert!(v["files"][0].get("scanned").is_none());
}

/// On every file of the corpus, cuBLASLt's 749 MB included, the default
/// audit finds the device code that --scan (every byte searched) finds.
#[test]
fn the_default_reads_what_a_full_search_finds_on_the_whole_corpus() {
    let mut files = corpus(&[]);
    files.extend(corpus(&["cublaslt"]));
    let default = json(&[], &files);
    let full = json(&["--scan"], &files);
    let (d, f) = (default["files"].as_array().unwrap(), full["files"].as_array().unwrap());
    assert_eq!(d.len(), f.len());
    let mut outside = 0;
    for (a, b) in d.iter().zip(f) {
        assert_eq!(a["path"], b["path"]);
        assert_eq!(a["device"], b["device"], "{}", a["path"]);
        if a["device"]["scanned_containers"].as_u64().unwrap_or(0) > 0 {
            outside += 1;
        }
    }
    // cuFFT's .ldata and cuBLASLt's .cask_resource.
    assert!(outside >= 2, "{outside} files with code outside their sections");
    assert!(!default.to_string().contains("device-code-not-scanned"));
}

/// `(errors, warnings, infos)` of a `1 file: 1 error, 2 warnings, 3 infos` line.
fn summary_counts(line: &str) -> (usize, usize, usize) {
    let (_, counts) = line.split_once(": ").unwrap_or_else(|| panic!("no counts: {line}"));
    let n: Vec<usize> =
        counts.split(", ").map(|p| p.split(' ').next().unwrap().parse().unwrap()).collect();
    (n[0], n[1], n[2])
}

#[test]
fn counts_count_what_each_format_shows() {
    // cuRAND 10.3 (x86_64) carries SASS for 13 architectures: asked for 9.0
    // alone, 12 are unrequested, shown on one line.
    let lib = corpus_file("curand12", "libcurand.so.10");
    let path = lib.to_str().unwrap();
    let args = ["--cuda-capabilities", "9.0", path];
    let report = stdout(&run(CEI, &args));
    let shown = |sev: &str| report.lines().filter(|l| l.starts_with(&format!("  {sev} ["))).count();
    let last = report.lines().last().unwrap();
    assert_eq!(report.matches("[unrequested-arch]").count(), 1, "{report}");
    assert_eq!(summary_counts(last), (shown("error"), shown("warning"), shown("info")), "{report}");
    // JSON keeps one finding per architecture (baselines), and its summary
    // counts what it lists.
    let v = json(&["--cuda-capabilities", "9.0"], std::slice::from_ref(&lib));
    let findings = v["findings"].as_array().unwrap();
    let listed = |sev: &str| findings.iter().filter(|f| f["severity"] == sev).count();
    let unrequested = findings.iter().filter(|f| f["check"] == "unrequested-arch").count();
    assert!(unrequested > 10, "{v}");
    let s = &v["summary"];
    assert_eq!(s["errors"], listed("error"), "{s}");
    assert_eq!(s["warnings"], listed("warning"), "{s}");
    assert_eq!(s["infos"], listed("info"), "{s}");
    // SARIF: one result per JSON finding.
    let out = run(CEI, &["--format", "sarif", "--cuda-capabilities", "9.0", path]);
    let sarif: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sarif["runs"][0]["results"].as_array().unwrap().len(), findings.len());
    // GitHub: one annotation per line the text shows, and the same counts.
    let out = run(CEI, &["--format", "github", "--cuda-capabilities", "9.0", path]);
    let gh = stdout(&out);
    let annotations =
        |cmd: &str| gh.lines().filter(|l| l.starts_with(&format!("::{cmd} "))).count();
    assert_eq!(gh.matches("title=unrequested-arch::").count(), 1, "{gh}");
    let last = gh.lines().last().unwrap();
    assert_eq!(
        summary_counts(last),
        (annotations("error"), annotations("warning"), annotations("notice")),
        "{gh}"
    );
    assert_eq!(summary_counts(last), summary_counts(report.lines().last().unwrap()));
}

/// The `jetson-capability-mismatch` findings of a JSON report.
fn jetson_findings(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "jetson-capability-mismatch")
        .cloned()
        .collect()
}

#[test]
fn jetson_code_in_nvidias_x86_64_libraries_is_an_info() {
    // cuRAND 10.3 for x86_64 carries sm_101 (Thor, a Jetson capability in
    // CUDA 12.8/12.9): nobody auditing it can act on that.
    let lib = corpus_file("curand12", "libcurand.so.10");
    let path = lib.to_str().unwrap();
    let v = json(&["--cuda-capabilities", "9.0"], std::slice::from_ref(&lib));
    let found = jetson_findings(&v);
    assert!(!found.is_empty(), "{v}");
    assert!(found.iter().all(|f| f["severity"] == "info"), "{found:?}");
    let report = stdout(&run(CEI, &["--cuda-capabilities", "9.0", path]));
    assert!(report.contains("  info [jetson-capability-mismatch]"), "{report}");
    assert!(!report.contains("warning [jetson-capability-mismatch]"), "{report}");
}

const KERNEL_CU: &str =
    "__global__ void k(int *x) { x[threadIdx.x] += 1; }\nint main() { return 0; }\n";

/// nvcc 13.5 builds an x86_64 program with Orin's sm_87 (a Jetson
/// capability) into `out/bin/orin`. A warning when the code is the build's
/// own (inside a Nix build of that output, a derivation that builds) or the
/// request is a configuration error (8.7 asked of an x86_64 build); an info for a prebuilt file (`dontBuild`, as Nixpkgs'
/// redist packages) or outside a build.
#[test]
fn jetson_code_is_a_warning_where_the_build_or_its_request_is_at_fault() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("k.cu"), KERNEL_CU).unwrap();
    common::sh(
        dir,
        &format!(
            "set -e; mkdir -p out/bin; {} -gencode arch=compute_87,code=sm_87 -o out/bin/orin k.cu",
            common::tool("nvcc").display()
        ),
    );
    let out = dir.join("out");
    let severity = |env: &[(&str, &str)], args: &[&str], paths: &[PathBuf]| {
        let mut cmd = Command::new(CEI);
        common::outside_build(&mut cmd).env_remove("cudaCapabilities").env_remove("dontBuild");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = cmd.args(["--format", "json"]).args(args).args(paths).output().unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
        let found = jetson_findings(&v);
        assert_eq!(found.len(), 1, "{env:?} {args:?}: {v}");
        assert_eq!(found[0]["details"]["arch"], "sm_87");
        found[0]["severity"].as_str().unwrap().to_string()
    };
    let o = out.to_str().unwrap();
    let paths = [out.clone()];
    // Outside a build, nothing requested: someone else's file.
    assert_eq!(severity(&[], &[], &paths), "info");
    // Inside the build that produced it.
    let build = [("outputs", "out"), ("out", o)];
    assert_eq!(severity(&build, &[], &[]), "warning");
    // The same output of a derivation that builds nothing (a redist).
    let redist = [("outputs", "out"), ("out", o), ("dontBuild", "1")];
    assert_eq!(severity(&redist, &[], &[]), "info");
    // A Jetson capability requested for an x86_64 build: a configuration
    // error, wherever the file comes from.
    assert_eq!(severity(&redist, &["--cuda-capabilities", "8.7"], &[]), "warning");
    assert_eq!(severity(&[], &["--cuda-capabilities", "8.7"], &paths), "warning");
}

/// A request Nixpkgs' backendStdenv refuses (a Jetson capability for an
/// x86_64 build; a pre-Thor Jetson capability together with another) is one
/// warning per file, not one per architecture the file carries (13 for
/// cuRAND before), and it is said even where the code holds nothing
/// Jetson-specific (cuRAND for aarch64 SBSA got no finding before).
#[test]
fn a_jetson_request_nixpkgs_refuses_is_one_warning_per_file() {
    let x86 = corpus_file("curand12", "libcurand.so.10");
    let arm = corpus_file("curand12-aarch64", "libcurand.so.10");
    let v = json(&["--cuda-capabilities", "8.7"], std::slice::from_ref(&x86));
    let found = jetson_findings(&v);
    let warnings: Vec<_> = found.iter().filter(|f| f["severity"] == "warning").collect();
    assert_eq!(warnings.len(), 1, "{found:?}");
    assert_eq!(warnings[0]["details"]["arch"], "sm_87");
    assert!(warnings[0]["message"].as_str().unwrap().contains("requested for a build for x86_64"));
    // What NVIDIA put there besides (sm_101, Thor) stays an info.
    assert!(found.iter().all(|f| f["severity"] == "warning" || f["severity"] == "info"));
    assert!(found.iter().any(|f| f["severity"] == "info" && f["details"]["arch"] == "sm_101"));
    let v = json(&["--cuda-capabilities", "8.0;8.7", "--cuda-version", "12.8"], &[arm]);
    let found = jetson_findings(&v);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["severity"], "warning");
    assert!(found[0]["message"].as_str().unwrap().contains("requested together with 8.0"));
}

/// The checks table of docs/cuda-elf-inspect.md: `(id, severity)` per row.
fn documented_checks() -> Vec<(String, String)> {
    let manual = std::fs::read_to_string(common::root().join("docs/cuda-elf-inspect.md")).unwrap();
    let table = manual.split("### Checks").nth(1).unwrap();
    table
        .lines()
        .skip_while(|l| !l.starts_with("| `"))
        .take_while(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            (cells[0].trim_start_matches("| ").trim_matches('`').to_string(), cells[1].to_string())
        })
        .collect()
}

#[test]
fn explain_prints_a_checks_row_and_lists_every_check() {
    let documented = documented_checks();
    assert!(documented.len() > 15, "{documented:?}");
    // Alone: one line per check, id and severity first, then a summary;
    // the manual's checks, no more, no fewer.
    let out = run(CEI, &["--explain"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let list = stdout(&out);
    let mut listed: Vec<(String, String)> = list
        .lines()
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            assert!(words.len() > 4, "no summary: {l}");
            (words[0].to_string(), words[1].to_string())
        })
        .collect();
    let mut want = documented.clone();
    listed.sort();
    want.sort();
    assert_eq!(listed, want, "{list}");
    // One check: the same why and fix a report prints beside a finding of it.
    let lib = corpus_file("curand12", "libcurand.so.10");
    let report = stdout(&run(CEI, &["--cuda-capabilities", "9.0", lib.to_str().unwrap()]));
    let after = report.split("[unrequested-arch]").nth(1).unwrap();
    let why = after.lines().nth(1).unwrap().trim_start().strip_prefix("why: ").unwrap();
    let fix = after.lines().nth(2).unwrap().trim_start().strip_prefix("fix: ").unwrap();
    let out = run(CEI, &["--explain", "unrequested-arch"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let row = stdout(&out);
    assert!(row.starts_with("unrequested-arch (info)\n"), "{row}");
    assert!(row.contains(why) && row.contains(fix), "{row}");
    assert!(row.contains("--baseline") && row.contains("arch"), "{row}");
    // An unknown id: status 2, and the nearest id suggested.
    let out = run(CEI, &["--explain", "unrequested-archs"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown check 'unrequested-archs'"), "{err}");
    assert!(err.contains("did you mean 'unrequested-arch'?"), "{err}");
    assert!(out.stdout.is_empty(), "{}", text(&out));
    // Capitals name the same check; an empty id is an error, not the list.
    let out = run(CEI, &["--explain", "UNREQUESTED-ARCH"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(stdout(&out), row);
    let out = run(CEI, &["--explain", ""]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty check id"), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));
}
