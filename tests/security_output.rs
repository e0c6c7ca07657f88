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

/// The binary under test; `CUDA_ELF_INSPECT_BIN` runs the tests against
/// another one (the one built before the change: each test fails there).
fn bin() -> PathBuf {
    std::env::var_os("CUDA_ELF_INSPECT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cuda-elf-inspect")))
}

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
    let mut c = Command::new(bin());
    common::outside_build(&mut c);
    c.args(args).current_dir(dir).env("NO_COLOR", "1").env("NIX_STORE", "/nonexistent/store");
    c
}

/// Runs `cmd` with stdout a pipe whose read end is already closed: the
/// first write to it fails with `EPIPE` (Rust ignores `SIGPIPE`).
fn with_closed_stdout(cmd: &mut Command) -> Output {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills two descriptors, each then owned once.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    cmd.stdout(Stdio::from(writer)).stderr(Stdio::piped()).output().unwrap()
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

// ---- 11. names shown to people ----------------------------------------------

/// What a stranger names things: a terminal title set, the screen cleared,
/// a bell, and (where a name may hold one) a newline followed by a forged
/// log line.
const TITLE: &str = "\u{1b}]2;pwned\u{7}\u{1b}[2J";
const FORGED: &str = "ERROR: cudaElfInspect: forged";

/// Asserts `out` carries no control character but line ends, and that
/// `needle` (the visible part of the hostile name) reached it, so that the
/// name was shown, not dropped.
fn clean(what: &str, out: &[u8], needle: &str) {
    let text = String::from_utf8_lossy(out);
    let bad: Vec<char> = text.chars().filter(|c| c.is_control() && *c != '\n').collect();
    assert!(bad.is_empty(), "{what}: raw control characters {bad:?} in {text:?}");
    assert!(text.contains(needle), "{what}: the name was not shown: {text:?}");
    assert!(!text.lines().any(|l| l.starts_with(FORGED)), "{what}: a forged line: {text:?}");
}

/// A gcc-built library that imports dlopen (of `libok.so.1`, a literal),
/// with a `.note.dlopen` naming a soname that holds `TITLE`, a newline and
/// `FORGED` (JSON escapes in the note; the reader decodes them).
fn library_with_hostile_note(dir: &Path) -> PathBuf {
    let desc = r#"[{"feature":"x","soname":["libz\u001b]2;pwned\u0007\u001b[2J.so.1\nERROR: cudaElfInspect: forged"],"priority":"required"}]"#;
    let mut note = Vec::new();
    note.extend_from_slice(&4u32.to_le_bytes());
    note.extend_from_slice(&(desc.len() as u32).to_le_bytes());
    note.extend_from_slice(&0x407c_0c0au32.to_le_bytes());
    note.extend_from_slice(b"FDO\0");
    note.extend_from_slice(desc.as_bytes());
    note.resize(note.len().div_ceil(4) * 4, 0);
    std::fs::write(dir.join("note"), &note).unwrap();
    common::sh(
        dir,
        "printf '#include <dlfcn.h>\\nvoid *f(void) { return dlopen(\"libok.so.1\", 2); }\\n' > h.c \
         && gcc -shared -fPIC -o base.so h.c -ldl \
         && objcopy --add-section .note.dlopen=note base.so hostile.so",
    );
    dir.join("hostile.so")
}

#[test]
fn a_soname_from_a_dlopen_note_reaches_no_terminal_annotation_or_build_log_raw() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    library_with_hostile_note(d);
    let raw = format!("libz{TITLE}.so.1\n{FORGED}");

    // The JSON keeps the name exactly (its escaping is JSON's): the note was read.
    let out = ours(d, &["--format", "json", "hostile.so"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON parses");
    assert!(
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["message"].as_str().unwrap().contains(&raw)),
        "{v:#}"
    );

    let out = ours(d, &["hostile.so"]).output().unwrap();
    clean("text", &out.stdout, "pwned");
    clean("text, stderr", &out.stderr, "");

    let out = ours(d, &["--format", "github", "hostile.so"]).output().unwrap();
    clean("github", &out.stdout, "pwned");
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        assert!(line.starts_with("::") || line.starts_with("1 file: "), "{line:?}");
    }

    // Inside a build: the log descriptor is a file. One line per finding,
    // each `LEVEL: cudaElfInspect: ...`; the newline did not start one.
    common::sh(
        d,
        &format!(
            "exec 3>build.log; NIX_LOG_FD=3 NIX_DEBUG=7 NO_COLOR=1 {} hostile.so > stdout.txt 2> stderr.txt; \
             test $? -le 1",
            bin().display()
        ),
    );
    let log = std::fs::read(d.join("build.log")).unwrap();
    clean("build log", &log, "pwned");
    let text = String::from_utf8_lossy(&log);
    for line in text.lines() {
        let level = line.split(": ").next().unwrap();
        assert!(
            ["ERROR", "WARN", "NOTICE", "INFO", "TALKATIVE", "CHATTY", "DEBUG", "VOMIT"]
                .contains(&level)
                && line[level.len()..].starts_with(": cudaElfInspect: "),
            "not a log line of ours: {line:?} in {text:?}"
        );
    }
    // The soname's line carries the forged text inside it, escaped.
    assert!(text.contains("\\nERROR: cudaElfInspect: forged"), "{text}");
    for file in ["stdout.txt", "stderr.txt"] {
        let bytes = std::fs::read(d.join(file)).unwrap();
        assert!(!bytes.iter().any(|&b| b < 0x20 && b != b'\n'), "{file}: {bytes:?}");
    }
}

#[test]
fn an_archive_member_name_in_summary_errors_is_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A member that starts as an ELF file and ends after 20 bytes: damage
    // that `--summary` reports naming the member.
    let member = d.join(format!("m{TITLE}.o"));
    let mut bytes = b"\x7fELF\x02\x01\x01".to_vec();
    bytes.resize(20, 0);
    std::fs::write(&member, bytes).unwrap();
    let status = Command::new("ar").arg("rc").arg(d.join("lib.a")).arg(&member).status().unwrap();
    assert!(status.success());

    let out = ours(d, &["--summary", "lib.a"]).output().unwrap();
    clean("--summary", &out.stdout, "pwned");
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.starts_with("  error: m\\u{1b}]2;pwned\\u{7}\\u{1b}[2J.o")),
        "{}",
        common::text(&out)
    );
    clean("--summary, stderr", &out.stderr, "");
    // JSON keeps the member's name exactly.
    let out = ours(d, &["--summary", "--format", "json", "lib.a"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON parses");
    let errors = v["files"][0]["errors"].as_array().expect("errors listed");
    assert!(
        errors.iter().any(|e| e.as_str().unwrap().starts_with(&format!("m{TITLE}.o"))),
        "{v:#}"
    );
}

/// A NAR of a folder whose entries are `(name, contents)` files.
fn nar_of_files(files: &[(&str, &[u8])]) -> Vec<u8> {
    fn put(out: &mut Vec<u8>, s: &[u8]) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s);
        out.resize(out.len().div_ceil(8) * 8, 0);
    }
    let mut out = Vec::new();
    for t in ["nix-archive-1", "(", "type", "directory"] {
        put(&mut out, t.as_bytes());
    }
    let mut files = files.to_vec();
    files.sort();
    for (name, contents) in files {
        for t in ["entry", "(", "name", name, "node", "(", "type", "regular", "contents"] {
            put(&mut out, t.as_bytes());
        }
        put(&mut out, contents);
        put(&mut out, b")");
        put(&mut out, b")");
    }
    put(&mut out, b")");
    out
}

/// Adds `path` (NAR `nar`, referencing `refs`) to the `file://` cache in
/// `cache`, unsigned and uncompressed.
fn add_to_cache(cache: &Path, path: &str, nar: &[u8], refs: &[&str]) {
    use sha2::Digest as _;
    std::fs::create_dir_all(cache.join("nar")).unwrap();
    std::fs::write(cache.join("nix-cache-info"), "StoreDir: /nix/store\n").unwrap();
    let base = path.rsplit('/').next().unwrap();
    let url = format!("nar/{}.nar", &base[..32]);
    std::fs::write(cache.join(&url), nar).unwrap();
    let hash: [u8; 32] = sha2::Sha256::digest(nar).into();
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    let refs: Vec<&str> = refs.iter().map(|r| r.rsplit('/').next().unwrap()).collect();
    let info = format!(
        "StorePath: {path}\nURL: {url}\nCompression: none\nNarHash: sha256:{hex}\nNarSize: {}\nReferences: {}\n",
        nar.len(),
        refs.join(" ")
    );
    std::fs::write(cache.join(format!("{}.narinfo", &base[..32])), info).unwrap();
}

#[test]
fn a_nar_entry_name_in_the_why_chain_is_shown_sanitised() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = d.join("cache");
    let app = "/nix/store/0c2wdzm3y0w1xqkgvmf8ds2fsmi8jvxa-app";
    let target = "/nix/store/1d3xfzn4z1x2yrlhwnp9fs3gsnj9kwyb-target";
    // The app's NAR holds the target's path in a file a stranger named.
    let name = format!("f{TITLE}");
    let contents = format!("prefix {target}/lib suffix\n");
    add_to_cache(&cache, app, &nar_of_files(&[(&name, contents.as_bytes())]), &[target]);
    add_to_cache(&cache, target, &nar_of_files(&[("plain", b"nothing")]), &[]);
    let url = format!("file://{}", cache.display());
    std::fs::create_dir_all(d.join("tmp")).unwrap();
    let run = |format: &str| {
        ours(d, &["--substituter", &url, "--closure", "--why", target, "--format", format, app])
            .env("TMPDIR", d.join("tmp"))
            .output()
            .unwrap()
    };
    // The JSON names the file exactly: the hop was found in it.
    let out = run("json");
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", common::text(&out)));
    let hop = &v["chains"][0]["hops"][0];
    assert_eq!(hop["file"], format!("{app}/{name}").as_str(), "{v:#}");

    let out = run("text");
    clean("--why", &out.stdout, &format!("{app}/f\u{fffd}]2;pwned\u{fffd}\u{fffd}[2J"));
    clean("--why, stderr", &out.stderr, "");
}

/// The hooks log through the same `Msg`: a program and a dangling link
/// whose names hold a newline, a forged log line and an escape sequence
/// leave one log line each, escaped, in the build log and on stderr.
#[test]
fn the_hooks_build_log_holds_no_name_raw() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    program(d);
    std::fs::create_dir_all(d.join("out/bin")).unwrap();
    let hostile = format!("p\nERROR: autoFixElfFiles: forged{TITLE}");
    std::fs::copy(d.join("prog"), d.join("out/bin").join(&hostile)).unwrap();
    std::os::unix::fs::symlink(
        "missing",
        d.join("out").join(format!("l\nERROR: noBrokenSymlinks: forged{TITLE}")),
    )
    .unwrap();
    for (tool, code) in [
        (env!("CARGO_BIN_EXE_auto-add-driver-runpath"), 0),
        (env!("CARGO_BIN_EXE_no-broken-symlinks"), 1),
    ] {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("exec 3>build.log; NIX_LOG_FD=3 NIX_DEBUG=7 {tool} out; echo $? > status"))
            .current_dir(d)
            .env_remove("outputs")
            .output()
            .unwrap();
        let status = std::fs::read_to_string(d.join("status")).unwrap();
        assert_eq!(status.trim(), code.to_string(), "{tool}: {}", common::text(&out));
        // In a build, stderr goes to the build log too.
        let mut log = std::fs::read(d.join("build.log")).unwrap();
        log.extend_from_slice(&out.stderr);
        clean(tool, &log, "pwned");
        let text = String::from_utf8_lossy(&log);
        let forged = |l: &str| l.starts_with("ERROR: ") && l.split(": ").nth(2) == Some("forged");
        assert!(!text.lines().any(forged), "{tool}: a forged line: {text}");
        assert!(text.contains("\\nERROR: "), "{tool}: the name was not escaped: {text}");
        assert!(
            !out.stdout.iter().any(|&b| b < 0x20 && b != b'\n'),
            "{tool}: {}",
            common::text(&out)
        );
    }
}
