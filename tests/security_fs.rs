//! Files we write and replace, attacked (issue 29): planted journals,
//! `--output` and `--write-baseline` onto links, FIFOs and devices, a
//! signal while a report is written, file capabilities and hard links
//! through the patcher, files that merely look like our temporary files.
//! docs/robustness.md, "Files we write and replace (issue 29)", says what
//! each test promises. The tests run as root (they make device nodes and
//! chown files), as the rest of the suite does.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

const MAIN_C: &str = "int main(void) { return 0; }\n";

/// A dynamic C program at `to`, built with `cc`.
fn program(to: &Path) {
    tool("cc");
    let dir = to.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    let src = dir.join("m.c");
    std::fs::write(&src, MAIN_C).unwrap();
    let st = Command::new("cc").arg("-o").arg(to).arg(&src).status().unwrap();
    assert!(st.success(), "cc failed");
    std::fs::remove_file(src).unwrap();
}

/// The pid of a process that has exited (so at most pid_max, and gone).
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

fn aadr(args: &[&std::ffi::OsStr]) -> Output {
    outside_build(&mut Command::new(env!("CARGO_BIN_EXE_auto-add-driver-runpath")))
        .args(args)
        .output()
        .unwrap()
}

fn aadr_in_place(args: &[&std::ffi::OsStr]) -> Output {
    outside_build(&mut Command::new(env!("CARGO_BIN_EXE_auto-add-driver-runpath")))
        .arg("--in-place")
        .args(args)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Item 1: a journal planted in the tree never truncates a file outside it,
/// whatever its name field says (absolute, `../x`, a link in the tree) and
/// whatever its pid (above pid_max, or a real dead process); one owned by
/// another user is not ours either. Each is an error naming the journal,
/// and the journal stays. A real journal of ours is still replayed.
#[test]
fn a_planted_journal_truncates_nothing_and_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim");
    let dead = dead_pid();
    let cases: Vec<(String, Vec<u8>, &str)> = vec![
        // The repro: pid above pid_max, absolute name.
        (".x.~nch99999999-0.journal".into(), victim.as_os_str().as_encoded_bytes().to_vec(), "pid"),
        (
            format!(".x.~nch{dead}-0.journal"),
            victim.as_os_str().as_encoded_bytes().to_vec(),
            "names",
        ),
        (format!(".x.~nch{dead}-0.journal"), b"../victim".to_vec(), "names"),
        (format!(".link.~nch{dead}-0.journal"), b"link".to_vec(), "symbolic link"),
    ];
    for (i, (jname, name, why)) in cases.iter().enumerate() {
        let tree = tmp.path().join(format!("tree{i}"));
        program(&tree.join("prog"));
        std::os::unix::fs::symlink(&victim, tree.join("link")).unwrap();
        std::fs::write(&victim, b"IMPORTANT\n").unwrap();
        let m = std::fs::metadata(&victim).unwrap();
        let mut journal = format!("nch-journal 1 {} {} 5 0 ff\n", m.dev(), m.ino()).into_bytes();
        journal.extend_from_slice(name);
        let jpath = tree.join(jname);
        std::fs::write(&jpath, &journal).unwrap();
        let out = aadr(&[tree.as_os_str()]);
        assert_eq!(std::fs::read(&victim).unwrap(), b"IMPORTANT\n", "case {i}: {}", text(&out));
        assert_eq!(out.status.code(), Some(2), "case {i}: {}", text(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("{}: left alone: ", jpath.display())) && err.contains(why),
            "case {i}: {}",
            text(&out)
        );
        assert!(jpath.exists(), "case {i}: the journal was removed");
    }

    // A journal owned by another user, naming a file of the tree with the
    // right identity: not ours.
    let tree = tmp.path().join("foreign");
    program(&tree.join("prog"));
    let prog = tree.join("prog");
    let before = std::fs::read(&prog).unwrap();
    let m = std::fs::metadata(&prog).unwrap();
    let len = before.len() - 4;
    let journal = format!("nch-journal 1 {} {} {len} 0 ff\nprog", m.dev(), m.ino());
    let jpath = tree.join(format!(".prog.~nch{dead}-0.journal"));
    std::fs::write(&jpath, journal).unwrap();
    std::os::unix::fs::chown(&jpath, Some(65534), Some(65534)).unwrap();
    let out = aadr(&[tree.as_os_str()]);
    assert!(stderr(&out).contains("owned by uid 65534"), "{}", text(&out));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(jpath.exists());
    // The program was patched whole (not cut to `len` bytes by the journal).
    assert!(search_path(&prog).is_some_and(|(_, v)| v.contains("/run/opengl-driver/lib")));

    // A real journal of ours (our uid, a dead pid, the file's own name and
    // identity, a tail after the old length): replayed, the tail cut.
    let tree = tmp.path().join("ours");
    program(&tree.join("prog"));
    let prog = tree.join("prog");
    let before = std::fs::read(&prog).unwrap();
    let m = std::fs::metadata(&prog).unwrap();
    let journal =
        format!("nch-journal 2 in-place {} {} {} 0 ff 4\nprog", m.dev(), m.ino(), before.len());
    let jpath = tree.join(format!(".prog.~nch{dead}-3.journal"));
    std::fs::write(&jpath, journal).unwrap();
    use std::io::Write;
    std::fs::OpenOptions::new().append(true).open(&prog).unwrap().write_all(b"tail").unwrap();
    let out = aadr(&["--check".as_ref(), tree.as_os_str()]);
    assert!(jpath.exists(), "--check replayed a journal");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let out = aadr(&[tree.as_os_str()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!jpath.exists());
    // Cut back to the original bytes, then patched: the original is a prefix
    // of nothing else, so compare the length the patch adds to a fresh copy.
    let fresh = tmp.path().join("fresh/prog");
    std::fs::create_dir_all(fresh.parent().unwrap()).unwrap();
    std::fs::write(&fresh, &before).unwrap();
    assert!(aadr(&[fresh.as_os_str()]).status.success());
    assert_eq!(std::fs::read(&prog).unwrap(), std::fs::read(&fresh).unwrap());
}

/// Item 14, third part: a file in the tree named like our temporary files
/// (`.X.~nch<dead pid>-N.tmp`) that no journal of ours names is somebody's
/// file: left alone with a warning naming it, never deleted. Our own
/// temporary file, with its journal, is removed.
#[test]
fn a_file_named_like_our_temporary_files_is_not_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("tree");
    program(&tree.join("prog"));
    let dead = dead_pid();
    let theirs = tree.join(format!(".prog.~nch{dead}-0.tmp"));
    std::fs::write(&theirs, b"precious").unwrap();
    let out = aadr(&[tree.as_os_str()]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(std::fs::read(&theirs).unwrap(), b"precious");
    assert!(
        stderr(&out)
            .contains(&format!("WARN: addDriverRunpath: {}: left alone: ", theirs.display())),
        "{}",
        text(&out)
    );
    // Ours: the journal of the same stem, written before the temporary file.
    let temp = tree.join(format!(".prog.~nch{dead}-1.tmp"));
    let name = temp.file_name().unwrap().as_encoded_bytes();
    let mut journal = format!("nch-journal 2 temp {}\n", name.len()).into_bytes();
    journal.extend_from_slice(name);
    let jpath = tree.join(format!(".prog.~nch{dead}-1.journal"));
    std::fs::write(&jpath, journal).unwrap();
    std::fs::write(&temp, b"half a copy").unwrap();
    let out = aadr(&[tree.as_os_str()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!temp.exists() && !jpath.exists(), "{}", text(&out));
    assert!(theirs.exists());
}

/// The names in a folder that hold our marker.
fn side_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().as_encoded_bytes().windows(5).any(|w| w == b".~nch"))
        .collect()
}

fn inspect(args: &[&std::ffi::OsStr]) -> Output {
    outside_build(&mut Command::new(env!("CARGO_BIN_EXE_cuda-elf-inspect")))
        .args(args)
        .output()
        .unwrap()
}

/// `--output json=PATH` (or `--write-baseline PATH` with `baseline`) of an
/// audit of `prog`.
fn report_to(prog: &Path, dest: &Path, baseline: bool) -> Output {
    let arg = if baseline {
        dest.as_os_str().to_owned()
    } else {
        let mut a = std::ffi::OsString::from("json=");
        a.push(dest);
        a
    };
    let flag = if baseline { "--write-baseline" } else { "--output" };
    inspect(&[flag.as_ref(), &arg, prog.as_os_str()])
}

fn mknod(path: &Path, kind: libc::mode_t, major: u32, minor: u32) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid path; we are root (the suite runs as root).
    let r = unsafe { libc::mknod(c.as_ptr(), kind | 0o666, libc::makedev(major, minor)) };
    assert_eq!(r, 0, "mknod {}: {}", path.display(), std::io::Error::last_os_error());
}

fn file_type(path: &Path) -> std::fs::FileType {
    std::fs::symlink_metadata(path).unwrap().file_type()
}

/// Item 6: `--output` and `--write-baseline` follow a link and replace its
/// target (the link stays, the target's permission bits stay, setuid and
/// setgid go); write a FIFO, a character device or our own standard output
/// as a stream (the node stays); refuse a folder, a block device and a
/// socket with an error naming the path.
#[test]
fn reports_follow_links_stream_to_fifos_and_devices_and_refuse_the_rest() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let tmp = tempfile::tempdir().unwrap();
    let prog = tmp.path().join("prog");
    program(&prog);
    let d = tmp.path();
    for baseline in [false, true] {
        let tag = if baseline { "--write-baseline" } else { "--output" };
        // A link to a setuid file: the target replaced, the link kept.
        let target = d.join(format!("target-{baseline}"));
        let link = d.join(format!("link-{baseline}"));
        std::fs::write(&target, b"old").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o4750)).unwrap();
        std::os::unix::fs::symlink(target.file_name().unwrap(), &link).unwrap();
        let out = report_to(&prog, &link, baseline);
        assert_ne!(out.status.code(), Some(2), "{tag}: {}", text(&out));
        assert!(file_type(&link).is_symlink(), "{tag}: the link was replaced");
        let written = std::fs::read(&target).unwrap();
        assert!(written.starts_with(b"{"), "{tag}: {}", String::from_utf8_lossy(&written));
        let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o750, "{tag}: the mode, less setuid");

        // A character device (a copy of /dev/null): written to, kept.
        let null = d.join(format!("null-{baseline}"));
        mknod(&null, libc::S_IFCHR, 1, 3);
        let out = report_to(&prog, &null, baseline);
        assert_ne!(out.status.code(), Some(2), "{tag}: {}", text(&out));
        let m = std::fs::symlink_metadata(&null).unwrap();
        assert!(m.file_type().is_char_device(), "{tag}: the device node was replaced");
        assert_eq!(m.rdev(), libc::makedev(1, 3));

        // A FIFO: the reader gets the whole report, the FIFO stays.
        let fifo = d.join(format!("fifo-{baseline}"));
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let mut reader =
            Command::new("cat").arg(&fifo).stdout(std::process::Stdio::piped()).spawn().unwrap();
        let out = report_to(&prog, &fifo, baseline);
        let still_fifo = file_type(&fifo).is_fifo();
        if !still_fifo {
            let _ = reader.kill();
        }
        let got = reader.wait_with_output().unwrap().stdout;
        assert!(still_fifo, "{tag}: the FIFO was replaced: {}", text(&out));
        assert_ne!(out.status.code(), Some(2), "{tag}: {}", text(&out));
        assert!(got.starts_with(b"{") && got.ends_with(b"}\n"), "{tag}: {}", text(&out));

        // Refused: a folder, a block device, a socket; each named.
        let folder = d.join(format!("folder-{baseline}"));
        std::fs::create_dir(&folder).unwrap();
        let block = d.join(format!("block-{baseline}"));
        mknod(&block, libc::S_IFBLK, 7, 200);
        let socket = d.join(format!("socket-{baseline}"));
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        for (path, what) in
            [(&folder, "a directory"), (&block, "a block device"), (&socket, "a socket")]
        {
            let before = std::fs::symlink_metadata(path).unwrap();
            let out = report_to(&prog, path, baseline);
            assert_eq!(out.status.code(), Some(2), "{tag} {what}: {}", text(&out));
            let err = stderr(&out);
            assert!(
                err.contains(&path.display().to_string())
                    && err.contains(&format!("it is {what}; only a regular file")),
                "{tag} {what}: {}",
                text(&out)
            );
            let after = std::fs::symlink_metadata(path).unwrap();
            assert_eq!((after.ino(), after.mode()), (before.ino(), before.mode()), "{what}");
        }
        assert!(side_files(d).is_empty(), "{:?}", side_files(d));
    }

    // Our own standard output, named through a link to /proc/self/fd/1:
    // the report follows the text report on the pipe; the link stays.
    let stdout_link = d.join("stdout");
    std::os::unix::fs::symlink("/proc/self/fd/1", &stdout_link).unwrap();
    let out = report_to(&prog, &stdout_link, false);
    assert_ne!(out.status.code(), Some(2), "{}", text(&out));
    assert!(file_type(&stdout_link).is_symlink());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("{\n") && stdout.ends_with("}\n"), "{}", text(&out));
}

fn get_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: valid strings; the buffer and its length agree.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (r >= 0).then(|| buf[..r as usize].to_vec())
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid strings; the value and its length agree.
    let r =
        unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(r, 0, "setxattr {name} on {}: {}", path.display(), std::io::Error::last_os_error());
}

/// `cap_net_bind_service=ep` as `setcap` writes it (VFS_CAP_REVISION_2:
/// magic with the effective flag, permitted and inheritable, low and high
/// words, little-endian).
const CAP_NET_BIND_SERVICE: [u8; 20] =
    [0x01, 0x00, 0x00, 0x02, 0x00, 0x04, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

fn patched(file: &Path) -> bool {
    search_path(file).is_some_and(|(_, v)| v.contains("/run/opengl-driver/lib"))
}

/// Item 14, first part: file capabilities and user attributes survive the
/// patch in both modes (the replacement copies them; in place, where a
/// write would remove the capability, the file is replaced instead).
#[test]
fn file_capabilities_and_attributes_survive_both_modes() {
    let tmp = tempfile::tempdir().unwrap();
    for in_place in [false, true] {
        let prog = tmp.path().join(format!("tree-{in_place}/prog"));
        program(&prog);
        set_xattr(&prog, "security.capability", &CAP_NET_BIND_SERVICE);
        set_xattr(&prog, "user.origin", b"kept");
        let out =
            if in_place { aadr_in_place(&[prog.as_os_str()]) } else { aadr(&[prog.as_os_str()]) };
        assert!(out.status.success(), "in place {in_place}: {}", text(&out));
        assert!(patched(&prog), "in place {in_place}");
        assert_eq!(
            get_xattr(&prog, "security.capability").as_deref(),
            Some(&CAP_NET_BIND_SERVICE[..]),
            "in place {in_place}: the capability was dropped"
        );
        assert_eq!(get_xattr(&prog, "user.origin").as_deref(), Some(&b"kept"[..]));
    }
}

/// Item 14, second part: a file with a hard link outside the walked tree
/// gets the same treatment in both modes: the names in the tree are
/// patched (and stay one file), the name outside keeps the old file, and a
/// warning says so. (In place used to change the shared inode, so the
/// outside name changed too; the replacement said nothing.)
#[test]
fn hard_links_outside_the_tree_keep_the_old_file_in_both_modes() {
    let tmp = tempfile::tempdir().unwrap();
    for in_place in [false, true] {
        let d = tmp.path().join(format!("{in_place}"));
        let prog = d.join("tree/prog");
        program(&prog);
        let old = std::fs::read(&prog).unwrap();
        std::fs::create_dir_all(d.join("tree/sub")).unwrap();
        std::fs::create_dir_all(d.join("outside")).unwrap();
        let inside = d.join("tree/sub/prog2");
        let outside = d.join("outside/prog");
        std::fs::hard_link(&prog, &inside).unwrap();
        std::fs::hard_link(&prog, &outside).unwrap();
        let tree = d.join("tree");
        let out =
            if in_place { aadr_in_place(&[tree.as_os_str()]) } else { aadr(&[tree.as_os_str()]) };
        assert!(out.status.success(), "in place {in_place}: {}", text(&out));
        assert!(patched(&prog) && patched(&inside), "in place {in_place}");
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        assert_eq!(ino(&prog), ino(&inside), "in place {in_place}: the tree's names were split");
        assert_eq!(std::fs::read(&outside).unwrap(), old, "in place {in_place}: outside changed");
        let warning = format!(
            "WARN: addDriverRunpath: {}: 1 hard link(s) outside the tree keep the unpatched file",
            prog.display()
        );
        assert!(stderr(&out).contains(&warning), "in place {in_place}: {}", text(&out));
    }
}

/// A tree of `n` copies of a program, for a large report.
fn many_programs(tree: &Path, n: usize) {
    program(&tree.join("p0"));
    for i in 1..n {
        std::fs::copy(tree.join("p0"), tree.join(format!("p{i}"))).unwrap();
    }
}

/// Item 12: SIGTERM or SIGINT while `--output html=a.html` is written
/// removes the temporary file; the process still dies by the signal, and
/// `a.html` is absent (never half written). The process is frozen
/// (SIGSTOP) while its temporary file exists, so that the signal lands
/// during the write whatever the machine's speed.
#[test]
// A child not stopped was reaped by `waitpid` (it had exited): no zombie.
#[allow(clippy::zombie_processes)]
fn a_signal_while_a_report_is_written_leaves_no_temporary_file() {
    use std::os::unix::process::ExitStatusExt;
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("tree");
    many_programs(&tree, 1500);
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut caught = false;
        for attempt in 0..30 {
            let dir = tmp.path().join(format!("out-{sig}-{attempt}"));
            std::fs::create_dir(&dir).unwrap();
            let report = dir.join("a.html");
            let mut arg = std::ffi::OsString::from("html=");
            arg.push(&report);
            let mut child =
                outside_build(&mut Command::new(env!("CARGO_BIN_EXE_cuda-elf-inspect")))
                    .args(["--output".as_ref(), arg.as_os_str(), tree.as_os_str()])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap();
            let pid = child.id() as libc::pid_t;
            // Wait for the temporary file, then freeze the process.
            let mut exited = false;
            while side_files(&dir).is_empty() {
                if child.try_wait().unwrap().is_some() {
                    exited = true;
                    break;
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            if exited {
                continue;
            }
            // SAFETY: signals to our own child.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            let mut st = 0;
            // SAFETY: waits for our child to stop (or to have exited).
            unsafe { libc::waitpid(pid, &mut st, libc::WUNTRACED) };
            let stopped = libc::WIFSTOPPED(st);
            if stopped && !side_files(&dir).is_empty() {
                caught = true;
                unsafe { libc::kill(pid, sig) };
                unsafe { libc::kill(pid, libc::SIGCONT) };
            } else if stopped {
                unsafe { libc::kill(pid, libc::SIGCONT) };
            }
            let status = if stopped { child.wait().unwrap() } else { ExitStatusExt::from_raw(st) };
            if !caught {
                continue;
            }
            assert_eq!(status.signal(), Some(sig), "{status:?}");
            assert!(side_files(&dir).is_empty(), "left behind: {:?}", side_files(&dir));
            assert!(!report.exists(), "a report was written after the signal");
            break;
        }
        assert!(caught, "signal {sig}: the write was never caught in 30 runs");
    }
}
