//! Issue 29, items 10 and 11: what reaches a reader.
//!
//! 10. A closed stdout (`... --output json=a.json | head -1`) must not cost
//!     the `--output` files, and must not end in a status that says all was
//!     well: the process ends as coreutils' do, killed by `SIGPIPE` (a
//!     shell's 141), quietly, after every file is written.
//! 11. Names from the files audited (NAR entry names, archive member names,
//!     sonames from `.note.dlopen`) are shown to people through one
//!     sanitiser: no raw control byte reaches a terminal, a workflow
//!     command or a build log, and a newline in a name never starts a log
//!     line of its own.
//!
//! The inputs are made here: gcc-built programs and libraries, a `.note.dlopen`
//! added by objcopy, an `ar` archive made by `ar`, NARs and narinfo files
//! written byte by byte.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const OURS: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// A gcc-built program that needs `libcuda.so.1` and has no RUNPATH (the
/// audit's `missing-driver-runpath`, an error finding), in `dir/prog`.
fn program(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("stub.c"), "int cuInit(unsigned f) { return f ? 1 : 0; }\n").unwrap();
    std::fs::write(
        dir.join("main.c"),
        "int cuInit(unsigned);\nint main(void) { return cuInit(0); }\n",
    )
    .unwrap();
    common::sh(
        dir,
        "set -e; mkdir -p stubs; gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o stubs/libcuda.so stub.c; \
         gcc -o prog main.c -Lstubs -lcuda",
    );
    dir.join("prog")
}

/// Our binary outside a build, in `dir`, colour off.
fn ours(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(OURS);
    common::outside_build(&mut c);
    c.args(args).current_dir(dir).env("NO_COLOR", "1").env("NIX_STORE", "/nonexistent/store");
    c
}

/// Runs `cmd` with stdout a pipe whose read end is already closed: the
/// first write to it fails with `EPIPE` (Rust ignores `SIGPIPE`).
fn with_closed_stdout(cmd: &mut Command) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    cmd.stdout(writer).stderr(Stdio::piped()).output().unwrap()
}

// ---- 10. a closed stdout --------------------------------------------------

#[test]
fn a_closed_stdout_still_writes_every_output_file_and_is_no_success() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    program(d);
    // What an undisturbed run prints, for comparison.
    let json = ours(d, &["--format", "json", "prog"]).output().unwrap();
    assert_eq!(json.status.code(), Some(1), "{}", common::text(&json));
    let text = ours(d, &["prog"]).output().unwrap();
    assert_eq!(text.status.code(), Some(1), "{}", common::text(&text));

    let out = with_closed_stdout(&mut ours(
        d,
        &["--output", "json=a.json", "--output", "text=a.txt", "--output", "sarif=a.sarif", "prog"],
    ));
    // Killed by SIGPIPE, as `cat big | head -1` is: not a success.
    assert_eq!(out.status.code(), None, "{}", common::text(&out));
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{}", common::text(&out));
    // Quietly: nothing failed that the user must be told.
    assert!(out.stderr.is_empty(), "{}", common::text(&out));
    // Every file is there, complete: the same report an undisturbed run
    // prints on stdout.
    let a_json = std::fs::read(d.join("a.json")).expect("--output json was written");
    let v: Value = serde_json::from_slice(&a_json).expect("a.json is complete JSON");
    assert!(
        v["findings"].as_array().unwrap().iter().any(|f| f["check"] == "missing-driver-runpath"),
        "{v:#}"
    );
    assert_eq!(a_json, json.stdout);
    let a_txt = std::fs::read(d.join("a.txt")).expect("--output text was written");
    assert_eq!(a_txt, text.stdout);
    assert!(String::from_utf8(a_txt).unwrap().ends_with("1 file: 1 error, 0 warnings, 0 infos\n"));
    let sarif: Value = serde_json::from_slice(&std::fs::read(d.join("a.sarif")).unwrap())
        .expect("a.sarif is complete JSON");
    assert_eq!(sarif["runs"][0]["results"].as_array().unwrap().len(), 1, "{sarif:#}");
    // No temporary file was left beside them.
    let mut names: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("a.") || n.starts_with(".a."))
        .collect();
    names.sort();
    assert_eq!(names, ["a.json", "a.sarif", "a.txt"]);

    // The other modes end alike.
    for args in
        [&["--summary", "prog"][..], &["--explain"][..], &["--explain", "missing-driver-runpath"]]
    {
        let out = with_closed_stdout(&mut ours(d, args));
        assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{args:?}: {}", common::text(&out));
        assert!(out.stderr.is_empty(), "{args:?}: {}", common::text(&out));
    }
}
