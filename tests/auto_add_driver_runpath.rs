//! End-to-end tests of `auto-add-driver-runpath` on programs built here by
//! gcc (and nvcc), checked by running them, by readelf, by a dlopen host,
//! and against patchelf 0.19 (the upstream method).

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::*;

const DRIVER: &str = "/run/opengl-driver/lib";

const LIB_C: &str = r#"
#include <stdio.h>
int answer(void) { return 42; }
const char *greeting(void) { return "hello from lib"; }
"#;

const MAIN_C: &str = r#"
#include <stdio.h>
int answer(void);
const char *greeting(void);
int main(void) { printf("%s %d\n", greeting(), answer()); return 0; }
"#;

const PLAIN_C: &str = r#"
#include <stdio.h>
int main(void) { puts("plain program"); return 0; }
"#;

const HOST_C: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
  int (*answer)(void) = (int (*)(void))dlsym(h, "answer");
  const char *(*greeting)(void) = (const char *(*)(void))dlsym(h, "greeting");
  if (!answer || !greeting) { fprintf(stderr, "dlsym: %s\n", dlerror()); return 1; }
  printf("%s %d\n", greeting(), answer());
  return 0;
}
"#;

/// Builds the C fixture tree in `dir/out` and the dlopen host in `dir`.
fn build_fixtures(dir: &Path) {
    tool("gcc");
    std::fs::write(dir.join("lib.c"), LIB_C).unwrap();
    std::fs::write(dir.join("main.c"), MAIN_C).unwrap();
    std::fs::write(dir.join("plain.c"), PLAIN_C).unwrap();
    std::fs::write(dir.join("host.c"), HOST_C).unwrap();
    sh(
        dir,
        "set -e; mkdir -p out/lib out/bin
         gcc -O1 -o host host.c -ldl
         gcc -shared -fPIC -o out/lib/libans.so lib.c
         chmod 0644 out/lib/libans.so
         gcc -fPIE -pie -o out/bin/pie main.c -Lout/lib -lans -Wl,-rpath,'$ORIGIN/../lib'
         gcc -no-pie -o out/bin/nopie-rpath main.c -Lout/lib -lans \
             -Wl,--disable-new-dtags,-rpath,'$ORIGIN/../lib'
         gcc -o out/bin/plain plain.c
         gcc -static -o out/bin/static plain.c
         gcc -static-pie -o out/bin/static-pie plain.c
         gcc -c -o out/lib/obj.o lib.c
         ln -s libans.so out/lib/libans.so.1
         ln out/bin/pie out/bin/pie-hardlink
         cp out/bin/plain out/bin/setuid && chmod 4755 out/bin/setuid
         echo 'not an ELF' > out/bin/script.sh",
    );
}

fn run_prog(dir: &Path, prog: &str) -> String {
    sh(dir, prog)
}

#[test]
fn c_programs_are_patched_still_run_and_a_second_run_changes_nothing() {
    patch_c_programs(false);
}

#[test]
fn c_programs_patched_in_place_too() {
    patch_c_programs(true);
}

fn patch_c_programs(in_place: bool) {
    let mode: &[&str] = if in_place { &["--in-place"] } else { &[] };
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    build_fixtures(dir);
    let out = dir.join("out");
    let progs = [
        "out/bin/pie",
        "out/bin/nopie-rpath",
        "out/bin/plain",
        "out/bin/static",
        "out/bin/static-pie",
    ];
    let before: Vec<String> = progs.iter().map(|p| run_prog(dir, p)).collect();
    let dl_before = sh(dir, "./host out/lib/libans.so");
    let snap = snapshot(&out);
    let lib_syms = sh(dir, "readelf -W --dyn-syms out/lib/libans.so");
    let pie_ino = std::fs::metadata(out.join("bin/pie")).unwrap().ino();

    let r = bin(dir, &[mode, &["out"]].concat());
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let stderr = String::from_utf8_lossy(&r.stderr);
    for f in [
        "out/bin/pie",
        "out/bin/nopie-rpath",
        "out/bin/plain",
        "out/lib/libans.so",
        "out/bin/setuid",
    ] {
        assert!(
            stderr.contains(&format!("autoFixElfFiles: using addDriverRunpath to fix {f}\n")),
            "{f}: {}",
            text(&r)
        );
    }
    // Hard links are processed once.
    assert_eq!(stderr.matches("fix out/bin/pie").count(), 1, "{}", text(&r));

    let after: Vec<String> = progs.iter().map(|p| run_prog(dir, p)).collect();
    assert_eq!(before, after);
    assert_eq!(dl_before, sh(dir, "./host out/lib/libans.so"));
    assert_eq!(lib_syms, sh(dir, "readelf -W --dyn-syms out/lib/libans.so"));

    let rp = |f: &str| search_path(&out.join(f));
    let d = DRIVER;
    assert_eq!(rp("bin/pie"), Some(("RUNPATH".into(), format!("{d}:$ORIGIN/../lib"))));
    assert_eq!(rp("bin/nopie-rpath"), Some(("RUNPATH".into(), format!("{d}:$ORIGIN/../lib"))));
    assert_eq!(rp("bin/plain"), Some(("RUNPATH".into(), d.into())));
    assert_eq!(rp("lib/libans.so"), Some(("RUNPATH".into(), d.into())));
    // Both names of the hard link see the result, still one inode.
    let (a, b) = (out.join("bin/pie"), out.join("bin/pie-hardlink"));
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert_eq!(std::fs::metadata(&a).unwrap().ino(), std::fs::metadata(&b).unwrap().ino());
    let same_inode = std::fs::metadata(&a).unwrap().ino() == pie_ino;
    assert_eq!(same_inode, in_place, "in place keeps the inode, replacement does not");
    // Modes kept: no exec bit on the library, setuid on the program.
    assert_eq!(std::fs::metadata(out.join("lib/libans.so")).unwrap().mode() & 0o7777, 0o644);
    assert_eq!(std::fs::metadata(out.join("bin/setuid")).unwrap().mode() & 0o7777, 0o4755);
    // Skipped files are byte-identical; the symlink is still a symlink.
    let now = snapshot(&out);
    for name in ["bin/static", "bin/static-pie", "lib/obj.o", "lib/libans.so.1", "bin/script.sh"] {
        let p = out.join(name);
        let old = snap.iter().find(|(q, _)| *q == p).unwrap();
        let new = now.iter().find(|(q, _)| *q == p).unwrap();
        assert!(old == new, "{name} changed");
    }
    assert!(std::fs::symlink_metadata(out.join("lib/libans.so.1"))
        .unwrap()
        .file_type()
        .is_symlink());
    // No temporary files left.
    assert_eq!(snap.len(), now.len());

    // Second run: nothing changes, byte for byte.
    let r2 = bin(dir, &[mode, &["out"]].concat());
    assert_eq!(r2.status.code(), Some(0), "{}", text(&r2));
    assert!(
        !String::from_utf8_lossy(&r2.stderr).contains("using addDriverRunpath"),
        "{}",
        text(&r2)
    );
    assert!(now == snapshot(&out), "second run changed files");
}

#[test]
fn same_runpath_as_patchelf_the_upstream_method() {
    let patchelf = tool("patchelf");
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    build_fixtures(dir);
    sh(dir, "cp -a out ref");
    let r = bin(dir, &["out"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    for f in ["bin/pie", "bin/nopie-rpath", "bin/plain", "lib/libans.so"] {
        let p = dir.join("ref").join(f);
        // What addDriverRunpath does: print, then set "<driver>:<old>".
        let old = sh(dir, &format!("'{}' --print-rpath '{}'", patchelf.display(), p.display()));
        let new = format!("{DRIVER}:{}", old.trim_end_matches('\n'));
        sh(dir, &format!("'{}' --set-rpath '{new}' '{}'", patchelf.display(), p.display()));
        let theirs = sh(dir, &format!("'{}' --print-rpath '{}'", patchelf.display(), p.display()));
        let ours = sh(
            dir,
            &format!(
                "'{}' --print-rpath '{}'",
                patchelf.display(),
                dir.join("out").join(f).display()
            ),
        );
        // Our deliberate deviation: no trailing empty entry (= current directory).
        assert_eq!(ours.trim_end(), theirs.trim_end().trim_end_matches(':'), "{f}");
        assert_eq!(
            search_path(&dir.join("ref").join(f)).unwrap().0,
            search_path(&dir.join("out").join(f)).unwrap().0
        );
    }
}

#[test]
fn options_replace_stubs_force_rpath_driver_link() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(dir.join("plain.c"), PLAIN_C).unwrap();
    sh(
        dir,
        "set -e; mkdir a b c
         gcc -o a/p plain.c -Wl,-rpath,/x/lib:/nix/store/h-cuda_cudart-12/lib/stubs:/y:/nix/store/h-cuda_cudart-12.8/lib/stubs
         cp a/p b/p; cp a/p c/p",
    );
    // The old spelling: upstream's driver hook then its stubs hook.
    let r = bin(dir, &["--replace-stubs", "a"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert_eq!(search_path(&dir.join("a/p")).unwrap().1, format!("{DRIVER}:/x/lib:/y"));
    let r = bin(dir, &["--force-rpath", "--driver-link", "/opt/drv/", "b"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let (tag, value) = search_path(&dir.join("b/p")).unwrap();
    assert_eq!(tag, "RPATH");
    assert!(value.starts_with("/opt/drv/lib:/x/lib:"), "{value}");
    sh(dir, "./a/p && ./b/p");

    // --check writes nothing and exits 1; JSON says what would happen.
    let before = snapshot(&dir.join("c"));
    let r = bin(dir, &["--check", "--format", "json", "c"]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    assert!(before == snapshot(&dir.join("c")));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["status"], 1);
    assert_eq!(v["report"]["files"][0]["action"], "would-patch");
    assert_eq!(v["report"]["files"][0]["old_tag"], "RUNPATH");
    assert_eq!(v["report"]["summary"]["would_patch"], 1);
    let r = bin(dir, &["--format", "json", "c"]);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["report"]["files"][0]["action"], "patched", "{}", text(&r));
    let r = bin(dir, &["--check", "c"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
}

#[test]
fn bad_input_is_an_error_naming_the_file_and_nothing_is_half_written() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(dir.join("plain.c"), PLAIN_C).unwrap();
    let patchelf = tool("patchelf");
    let long = "/l".repeat(40_000);
    sh(
        dir,
        &format!(
            "set -e; mkdir bad long
             gcc -o good plain.c
             head -c 200 good > bad/truncated
             cp good bad/corrupt-dynamic
             cp good long/p && '{}' --set-rpath '{long}' long/p",
            patchelf.display()
        ),
    );
    // Point PT_DYNAMIC's file offset far outside the file.
    let mut data = std::fs::read(dir.join("bad/corrupt-dynamic")).unwrap();
    let phoff = u64::from_le_bytes(data[32..40].try_into().unwrap()) as usize;
    let phnum = u16::from_le_bytes(data[56..58].try_into().unwrap()) as usize;
    for i in 0..phnum {
        let at = phoff + i * 56;
        if u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) == 2 {
            data[at + 8..at + 16].copy_from_slice(&0x7fff_ffffu64.to_le_bytes());
        }
    }
    std::fs::write(dir.join("bad/corrupt-dynamic"), &data).unwrap();

    let snap = snapshot(&dir.join("bad"));
    let r = bin(dir, &["bad"]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(stderr.contains("ERROR: addDriverRunpath: bad/truncated: truncated"), "{}", text(&r));
    assert!(stderr.contains("ERROR: addDriverRunpath: bad/corrupt-dynamic: "), "{}", text(&r));
    assert!(snap == snapshot(&dir.join("bad")), "bad input was modified");
    let r = bin(dir, &["--skip-unsupported", "-v", "bad"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("WARN: addDriverRunpath: bad/truncated"),
        "{}",
        text(&r)
    );

    let snap = snapshot(&dir.join("long"));
    let r = bin(dir, &["long"]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    assert!(
        String::from_utf8_lossy(&r.stderr)
            .contains("long/p: unsupported: the new RUNPATH would be"),
        "{}",
        text(&r)
    );
    assert!(snap == snapshot(&dir.join("long")));
}

/// Fuzz findings 9, 10 and 13 (docs/robustness.md), rebuilt from a gcc-built
/// library: files whose tables disagree in a way the writer cannot honour
/// are refused, naming the file and the reason, and left byte-identical.
#[test]
fn disagreeing_tables_found_by_fuzzing_are_refused_untouched() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(dir.join("lib.c"), LIB_C).unwrap();
    sh(
        dir,
        "set -e; mkdir bad
         gcc -shared -fPIC -Wl,-soname,libx.so,-rpath,/old/lib -o bad/two-runpaths.so lib.c
         gcc -shared -fPIC -o bad/dynstr-elsewhere.so lib.c
         gcc -shared -fPIC -o bad/dynstr-readdressed.so lib.c",
    );
    let phdr = |d: &[u8], ty: u32| {
        let phoff = u64::from_le_bytes(d[32..40].try_into().unwrap()) as usize;
        let phnum = u16::from_le_bytes(d[56..58].try_into().unwrap()) as usize;
        (0..phnum)
            .map(|i| phoff + i * 56)
            .find(|&at| u32::from_le_bytes(d[at..at + 4].try_into().unwrap()) == ty)
            .unwrap()
    };
    // 9: DT_SONAME retagged DT_RUNPATH: two search paths; glibc uses the
    // last, we would have rewritten the first.
    let path = dir.join("bad/two-runpaths.so");
    let mut d = std::fs::read(&path).unwrap();
    let dynamic = phdr(&d, 2);
    let start = u64::from_le_bytes(d[dynamic + 8..dynamic + 16].try_into().unwrap()) as usize;
    let soname = (start..)
        .step_by(16)
        .find(|&at| u64::from_le_bytes(d[at..at + 8].try_into().unwrap()) == 14)
        .unwrap();
    d[soname..soname + 8].copy_from_slice(&29u64.to_le_bytes());
    std::fs::write(&path, &d).unwrap();
    // 10: the first PT_LOAD's file offset moved by 0x100, so DT_STRTAB maps
    // to other bytes than the .dynstr section header's.
    let path = dir.join("bad/dynstr-elsewhere.so");
    let mut d = std::fs::read(&path).unwrap();
    let load = phdr(&d, 1);
    d[load + 8..load + 16].copy_from_slice(&0x100u64.to_le_bytes());
    std::fs::write(&path, &d).unwrap();

    // 13: the section .dynamic links to (.dynstr) moved to another address
    // than DT_STRTAB's: readelf would read the new string from the old table.
    let path = dir.join("bad/dynstr-readdressed.so");
    let mut d = std::fs::read(&path).unwrap();
    let elf = nix_cuda_hooks::elf::Elf::parse(&d).unwrap();
    let link = elf.shdrs.iter().find(|s| s.sh_type == 6).unwrap().link as usize;
    let at = elf.shoff as usize + link * 64 + 16; // sh_addr
    let addr = elf.shdrs[link].addr + 0x10000;
    d[at..at + 8].copy_from_slice(&addr.to_le_bytes());
    std::fs::write(&path, &d).unwrap();

    let snap = snapshot(&dir.join("bad"));
    let r = bin(dir, &["bad"]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(
        stderr.contains(
            "ERROR: addDriverRunpath: bad/dynstr-readdressed.so: unsupported: the section \
             .dynamic links to"
        ),
        "{}",
        text(&r)
    );
    assert!(
        stderr.contains("ERROR: addDriverRunpath: bad/two-runpaths.so: unsupported: 2 DT_RUNPATH"),
        "{}",
        text(&r)
    );
    assert!(
        stderr
            .contains("ERROR: addDriverRunpath: bad/dynstr-elsewhere.so: unsupported: the .dynstr")
            && stderr.contains("DT_STRTAB (file offset"),
        "{}",
        text(&r)
    );
    assert!(snap == snapshot(&dir.join("bad")), "bad input was modified");
}

/// NVIDIA's driver libraries (libnvidia-glcore.so.580.*) have a `.dynstr`
/// section shorter than DT_STRSZ; the loader reads only DT_STRSZ, and
/// patchelf patches them. Rebuilt from a gcc-built library whose DT_STRSZ is
/// raised over the bytes after `.dynstr` (still in the same segment): it is
/// patched, readelf reads it without a warning, and a program still loads it.
/// A section *longer* than DT_STRSZ (finding 7) stays refused.
#[test]
fn dynstr_section_shorter_than_dt_strsz_is_patched_like_nvidia_drivers() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    build_fixtures(dir);
    sh(dir, "set -e; mkdir short long; cp out/lib/libans.so short/; cp out/lib/libans.so long/");
    let strsz_slot = |d: &[u8]| {
        let elf = nix_cuda_hooks::elf::Elf::parse(d).unwrap();
        let dynamic = elf.dynamic().unwrap().unwrap();
        let i = dynamic.entries.iter().position(|e| e.tag == 10).unwrap();
        (dynamic.offset as usize + i * 16 + 8, dynamic.get(10).unwrap())
    };
    let path = dir.join("short/libans.so");
    let mut d = std::fs::read(&path).unwrap();
    let (at, strsz) = strsz_slot(&d);
    d[at..at + 8].copy_from_slice(&(strsz + 64).to_le_bytes());
    std::fs::write(&path, &d).unwrap();
    let path = dir.join("long/libans.so");
    let mut d = std::fs::read(&path).unwrap();
    let (at, strsz) = strsz_slot(&d);
    d[at..at + 8].copy_from_slice(&(strsz - 8).to_le_bytes());
    std::fs::write(&path, &d).unwrap();

    let r = bin(dir, &["short"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert_eq!(search_path(&dir.join("short/libans.so")), Some(("RUNPATH".into(), DRIVER.into())));
    assert_eq!(run_prog(dir, "./host short/libans.so"), "hello from lib 42\n");
    let snap = snapshot(&dir.join("long"));
    let r = bin(dir, &["long"]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    assert!(String::from_utf8_lossy(&r.stderr).contains("and DT_STRSZ"), "{}", text(&r));
    assert!(snap == snapshot(&dir.join("long")));
}

const CUDA_STUB_C: &str = r#"
const char *cuda_origin(void) { return ORIGIN; }
"#;

const CUDA_MAIN_C: &str = r#"
#include <stdio.h>
const char *cuda_origin(void);
int main(void) { printf("libcuda from %s\n", cuda_origin()); return 0; }
"#;

/// `--cuda-compat DIR` against upstream's autoAddCudaCompatRunpath, which
/// runs `patchelf --set-rpath "<compat>:$old"` after addDriverRunpath's
/// `patchelf --set-rpath "<driver>:$old"`. A fake `cuda_compat` folder and a
/// fake driver folder each hold a stub `libcuda.so.1` that says where it is
/// from; the program must load the compat one. One run of ours gives the
/// same entries in the same order as upstream's two passes (without the
/// empty entry upstream leaves for a file that had no RUNPATH); a second run,
/// and a later plain run, change nothing.
#[test]
fn cuda_compat_goes_first_in_one_rewrite_like_upstreams_two_passes() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(dir.join("stub.c"), CUDA_STUB_C).unwrap();
    std::fs::write(dir.join("main.c"), CUDA_MAIN_C).unwrap();
    sh(
        dir,
        r#"set -e; mkdir -p compat driver/lib out/bin out/lib
         gcc -shared -fPIC -DORIGIN='"compat"' -Wl,-soname,libcuda.so.1 -o compat/libcuda.so.1 stub.c
         gcc -shared -fPIC -DORIGIN='"driver"' -Wl,-soname,libcuda.so.1 -o driver/lib/libcuda.so.1 stub.c
         gcc -shared -fPIC -DORIGIN='"out"' -Wl,-soname,libcuda.so.1 -o out/lib/libcuda.so.1 stub.c
         gcc -o out/bin/app main.c -Lout/lib -l:libcuda.so.1 -Wl,-rpath,'$ORIGIN/../lib'
         gcc -o out/bin/bare main.c -Ldriver/lib -l:libcuda.so.1
         cp -a out upstream; cp -a out plain-first"#,
    );
    let compat = dir.join("compat").display().to_string();
    let driver = dir.join("driver").display().to_string();
    let driver_lib = format!("{driver}/lib");
    // Upstream, by hand: the driver hook's pass, then the compat hook's.
    let patchelf = tool("patchelf");
    for f in ["upstream/bin/app", "upstream/bin/bare"] {
        for front in [&driver_lib, &compat] {
            let old = sh(dir, &format!("{} --print-rpath {f}", patchelf.display()));
            sh(dir, &format!("{} --set-rpath '{front}:{}' {f}", patchelf.display(), old.trim()));
        }
    }
    let args = ["--driver-link", &driver, "--cuda-compat", &compat];
    let r = bin(dir, &[&args[..], &["out"]].concat());
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    for prog in ["app", "bare"] {
        let (tag, ours) = search_path(&dir.join("out/bin").join(prog)).unwrap();
        let (_, theirs) = search_path(&dir.join("upstream/bin").join(prog)).unwrap();
        assert_eq!(tag, "RUNPATH");
        let theirs: Vec<&str> = theirs.split(':').filter(|e| !e.is_empty()).collect();
        assert_eq!(ours.split(':').collect::<Vec<_>>(), theirs, "{prog}: as upstream's two passes");
        assert!(ours.starts_with(&format!("{compat}:{driver_lib}")), "{prog}: {ours}");
        assert_eq!(run_prog(dir, &format!("out/bin/{prog}")), "libcuda from compat\n", "{prog}");
        assert_eq!(run_prog(dir, &format!("upstream/bin/{prog}")), "libcuda from compat\n");
    }
    assert_eq!(
        search_path(&dir.join("out/bin/app")).unwrap().1,
        format!("{compat}:{driver_lib}:$ORIGIN/../lib")
    );
    // Idempotent, and the plain hook after it leaves the order alone.
    let snap = snapshot(&dir.join("out"));
    let r = bin(dir, &[&args[..], &["out"]].concat());
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let r = bin(dir, &["--driver-link", &driver, "out"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(snap == snapshot(&dir.join("out")), "a second run changed files");
    // The plain hook first, then the compat option: the same result.
    let r = bin(dir, &["--driver-link", &driver, "plain-first"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert_eq!(run_prog(dir, "plain-first/bin/bare"), "libcuda from driver\n");
    let r = bin(dir, &[&args[..], &["plain-first"]].concat());
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    for prog in ["app", "bare"] {
        assert_eq!(
            search_path(&dir.join("plain-first/bin").join(prog)),
            search_path(&dir.join("out/bin").join(prog)),
            "{prog}"
        );
    }
}

#[test]
fn read_only_folder_is_an_error_and_read_only_file_is_patched() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(dir.join("plain.c"), PLAIN_C).unwrap();
    sh(dir, "set -e; mkdir -p ro rw; gcc -o ro/p plain.c; gcc -o rw/p plain.c; chmod 0555 rw/p; chmod 0555 ro; chmod 0777 rw; chmod 0755 .");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Root ignores permissions: run as nobody then (setpriv from util-linux).
    let as_user = |args: &str| {
        let exe = env!("CARGO_BIN_EXE_auto-add-driver-runpath");
        let cmd = if unsafe { libc::geteuid() } == 0 {
            format!(
                "{} --reuid=65534 --regid=65534 --clear-groups {exe} {args}",
                tool("setpriv").display()
            )
        } else {
            format!("{exe} {args}")
        };
        std::process::Command::new("bash")
            .arg("-c")
            .arg(cmd)
            .current_dir(dir)
            .env_remove("NIX_LOG_FD")
            .output()
            .unwrap()
    };
    if unsafe { libc::geteuid() } == 0 {
        sh(dir, "chown 65534:65534 rw/p rw");
    }
    let snap = snapshot(&dir.join("ro"));
    let r = as_user("ro");
    assert_eq!(r.status.code(), Some(2), "{}", text(&r));
    assert!(
        String::from_utf8_lossy(&r.stderr)
            .contains("ERROR: addDriverRunpath: ro/p: cannot create the temporary file of the replacement in its folder: permission denied (the folder is read-only: make it writable, or make the file writable and pass --in-place)"),
        "{}",
        text(&r)
    );
    assert!(snap == snapshot(&dir.join("ro")));
    // In place falls back to a replacement for a file it cannot open for writing.
    let r = as_user("--in-place rw");
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert_eq!(search_path(&dir.join("rw/p")).unwrap().1, DRIVER);
    assert_eq!(std::fs::metadata(dir.join("rw/p")).unwrap().mode() & 0o7777, 0o555);
    sh(dir, "./rw/p");
}

#[test]
fn a_vanished_file_is_an_io_error_naming_it() {
    use nix_cuda_hooks::driver_runpath::{process_file, Action, Config, Driver, ErrorKind};
    let cfg = Config::new(Driver::Entry(DRIVER.into()));
    let r = process_file(Path::new("/nonexistent/libgone.so"), &[], &cfg);
    assert_eq!(r.action, Action::Error);
    assert_eq!(r.error_kind, Some(ErrorKind::Io));
    assert_eq!(r.error.as_deref(), Some("no such file or directory"));
}

#[test]
fn cuda_library_and_program_keep_their_device_code() {
    let nvcc = tool("nvcc");
    let cuobjdump = tool("cuobjdump");
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(
        dir.join("k.cu"),
        "#include <cstdio>\n__global__ void k(int *x) { x[threadIdx.x] += 1; }\n\
         extern \"C\" int launch(void) { int *d; if (cudaMalloc(&d, 64) != cudaSuccess) return 1; k<<<1, 16>>>(d); return cudaDeviceSynchronize(); }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("m.cu"),
        "#include <cstdio>\n__global__ void m(float *x) { x[threadIdx.x] *= 2; }\n\
         int main() { puts(\"cuda program\"); float *d; if (cudaMalloc(&d, 64) != cudaSuccess) return 3; m<<<1, 16>>>(d); return 0; }\n",
    )
    .unwrap();
    let cuda = root().join(".tools/cuda");
    sh(
        dir,
        &format!(
            "set -e; mkdir -p out/lib out/bin
             '{nvcc}' -shared -Xcompiler -fPIC -cudart shared -L'{cuda}/lib' -gencode arch=compute_90,code=sm_90 \
                 -gencode arch=compute_120,code=compute_120 -o out/lib/libk.so k.cu
             '{nvcc}' -cudart shared -L'{cuda}/lib' -Xlinker -rpath -Xlinker '{cuda}/lib' -o out/bin/m m.cu",
            nvcc = nvcc.display(),
            cuda = cuda.display()
        ),
    );
    let files = ["out/lib/libk.so", "out/bin/m"];
    let fat: Vec<Vec<u8>> =
        files.iter().map(|f| section_bytes(&dir.join(f), ".nv_fatbin")).collect();
    assert!(fat.iter().all(|f| !f.is_empty()));
    let list = |f: &str| sh(dir, &format!("'{}' --list-elf --list-ptx {f}", cuobjdump.display()));
    let lists: Vec<String> = files.iter().map(|f| list(f)).collect();
    assert!(lists[0].contains("sm_90"), "{}", lists[0]);
    let syms: Vec<String> =
        files.iter().map(|f| sh(dir, &format!("readelf -W --dyn-syms {f}"))).collect();
    let run_before = std::process::Command::new(dir.join("out/bin/m")).output().unwrap();

    let r = bin(dir, &["out"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    for (i, f) in files.iter().enumerate() {
        assert_eq!(fat[i], section_bytes(&dir.join(f), ".nv_fatbin"), "{f}: .nv_fatbin changed");
        assert_eq!(lists[i], list(f), "{f}: cuobjdump listing changed");
        assert_eq!(syms[i], sh(dir, &format!("readelf -W --dyn-syms {f}")), "{f}: symbols changed");
        assert!(search_path(&dir.join(f)).unwrap().1.starts_with(DRIVER), "{f}");
    }
    // No GPU here: the program stops at its first CUDA call, the same way.
    let run_after = std::process::Command::new(dir.join("out/bin/m")).output().unwrap();
    assert_eq!(run_before.stdout, run_after.stdout);
    assert_eq!(run_before.status.code(), run_after.status.code());
    assert_eq!(sh(dir, "readelf -W --dyn-syms out/lib/libk.so | grep -c launch").trim(), "1");
}

/// Nixpkgs' addDriverRunpath setup hook (its driver link substituted) and
/// autoFixElfFiles, read in place, as (file name, text) for [`real_setup`].
fn nixpkgs_driver_hooks() -> [(&'static str, String); 2] {
    let upstream = |p: &str| std::fs::read_to_string(Path::new(nixpkgs()).join(p)).unwrap();
    [
        (
            "add-driver-runpath.sh",
            upstream("pkgs/by-name/ad/addDriverRunpath/setup-hook.sh")
                .replace("@driverLink@", "/run/opengl-driver"),
        ),
        (
            "auto-fix-elf-files.sh",
            upstream("pkgs/by-name/au/autoFixElfFiles/auto-fix-elf-files.sh"),
        ),
    ]
}

/// Runs `run` in Nixpkgs' real setup.sh (tests/upstream/real-setup.bash)
/// with the files `hooks` (in `dir`) as the stdenv's default hooks, `pre`
/// before them, the tools in `dir/tools` on PATH, NIX_DEBUG=1 on stderr, and
/// each of `outputs` at `dir/store/o-<name>`.
fn real_setup(
    dir: &Path,
    hooks: &[&str],
    outputs: &[&str],
    pre: &str,
    run: &str,
) -> std::process::Output {
    let mut cmd = std::process::Command::new("bash");
    cmd.arg(root().join("tests/upstream/real-setup.bash")).current_dir(dir);
    for name in hooks {
        cmd.arg(dir.join(name));
    }
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("NCH_NIXPKGS", nixpkgs())
        .env("NCH_PRE", format!("initialPath+=' {}'; {pre}", dir.join("tools").display()))
        .env("NCH_RUN", run)
        .env("NIX_LOG_FD", "2")
        .env("NIX_DEBUG", "1")
        .env("TMPDIR", dir.join("build"))
        .env("NIX_STORE", dir.join("store"))
        .env("outputs", outputs.join(" "));
    for name in outputs {
        cmd.env(name, dir.join(format!("store/o-{name}")));
    }
    cmd.output().unwrap()
}

/// Our hook among Nixpkgs' own, in Nixpkgs' real setup.sh (read in place from
/// the pinned files, through tests/upstream/real-setup.bash): the stdenv's
/// default hooks list is Nixpkgs' addDriverRunpath and autoFixElfFiles
/// hooks, ours (twice, as two packages propagating copies) and our wrapper, in
/// the order nix/hooks.nix propagates them; patchelf on PATH as in a stdenv.
#[test]
fn hook_in_nixpkgs_setup_sh_with_nixpkgs_own_hooks() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(dir.join("plain.c"), PLAIN_C).unwrap();
    sh(dir, "set -e; mkdir -p store/o-out/bin store/o-lib/lib build tools/bin; gcc -o store/o-out/bin/p plain.c; gcc -shared -fPIC -o store/o-lib/lib/libp.so plain.c");
    std::os::unix::fs::symlink(tool("patchelf"), dir.join("tools/bin/patchelf")).unwrap();
    let ours = |p: &str| std::fs::read_to_string(root().join(p)).unwrap();
    let hook = ours("hooks/auto-add-driver-runpath.sh");
    assert!(!hook.contains('@'), "the registering hook has no placeholder");
    let [add_driver, auto_fix] = nixpkgs_driver_hooks();
    let files = [
        add_driver,
        auto_fix,
        ("hook.sh", hook.clone()),
        ("hook-again.sh", hook),
        (
            "wrapper.sh",
            ours("hooks/auto-fix-elf-files-driver-runpath.sh")
                .replace("@autoAddDriverRunpath@", env!("CARGO_BIN_EXE_auto-add-driver-runpath")),
        ),
    ];
    for (name, text) in &files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let hooks: Vec<&str> = files.iter().map(|(name, _)| *name).collect();
    let run = |pre: &str, run: &str| real_setup(dir, &hooks, &["out", "lib"], pre, run);
    let out = run("", r#"echo "hooks: ${postFixupHooks[*]}"; runHook postFixup"#);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(stdout.matches("Sourcing auto-add-driver-runpath-hook\n").count(), 2, "{stdout}");
    assert_eq!(stdout.matches("Using autoAddDriverRunpath\n").count(), 1, "{stdout}");
    assert!(stdout.contains("hooks: autoFixElfFiles addDriverRunpath\n"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("autoFixElfFiles: using addDriverRunpath to fix"), "{}", text(&out));
    assert_eq!(search_path(&dir.join("store/o-out/bin/p")).unwrap().1, DRIVER);
    assert_eq!(search_path(&dir.join("store/o-lib/lib/libp.so")).unwrap().1, DRIVER);

    // The opt-out: nothing registered, nothing patched.
    sh(dir, "gcc -o store/o-out/bin/q plain.c");
    let out = run("dontUseAutoAddDriverRunpath=1", "runHook postFixup");
    assert!(out.status.success(), "{}", text(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("Using autoAddDriverRunpath"));
    assert_eq!(search_path(&dir.join("store/o-out/bin/q")), None);

    // The deprecated opt-out still works, and says it is deprecated.
    let out = run("dontUseAutoAddOpenGLRunpath=1", "runHook postFixup");
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("dontUseAutoAddOpenGLRunpath has been deprecated"), "{stdout}");
    assert!(!stdout.contains("Using autoAddDriverRunpath"), "{stdout}");
    assert_eq!(search_path(&dir.join("store/o-out/bin/q")), None);

    // addDriverRunpath by hand is Nixpkgs' own function (patchelf, its rules:
    // an empty old RUNPATH leaves an empty entry).
    let out = run("", "addDriverRunpath --force-rpath store/o-out/bin/q store/nothing/*.so");
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        search_path(&dir.join("store/o-out/bin/q")),
        Some(("RPATH".into(), format!("{DRIVER}:")))
    );
    let out = run("", "addDriverRunpath --xyz f");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("addDriverRunpath: ERROR: Invalid command line argument: --xyz\n"));

    // Any other action goes to Nixpkgs' autoFixElfFiles, file by file.
    let out = run("", r#"mine() { echo "mine: ${1##*/}"; }; autoFixElfFiles mine"#);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for f in ["mine: p\n", "mine: q\n", "mine: libp.so\n"] {
        assert!(stdout.contains(f), "{stdout}");
    }
}

/// Our autoAddCudaCompatRunpath (hooks/auto-add-cuda-compat-runpath.sh) in
/// Nixpkgs' real setup.sh, after Nixpkgs' addDriverRunpath and autoFixElfFiles
/// hooks, our driver hook and our wrapper, in buildRedist's order (driver
/// hook first): upstream's entry "autoFixElfFiles addCudaCompatRunpath" after
/// "autoFixElfFiles addDriverRunpath"; the compat folder first and the driver
/// second, in one rewrite (the driver entry's run writes both, the compat
/// entry's run changes nothing); the compat hook alone writes the same order;
/// from buildInputs (offsets 0/1) it does nothing, as upstream's guard says;
/// upstream's per-file function keeps its argument checks.
#[test]
fn cuda_compat_hook_in_nixpkgs_setup_sh_registers_like_upstream_and_patches_once() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(dir.join("plain.c"), PLAIN_C).unwrap();
    sh(dir, "set -e; mkdir -p build tools/bin");
    std::os::unix::fs::symlink(tool("patchelf"), dir.join("tools/bin/patchelf")).unwrap();
    let exe = env!("CARGO_BIN_EXE_auto-add-driver-runpath");
    let compat = "/nix/store/00000000000000000000000000000000-cuda_compat/compat";
    let ours = |p: &str| {
        std::fs::read_to_string(root().join(p))
            .unwrap()
            .replace("@autoAddDriverRunpath@", exe)
            .replace("@libcudaPath@", compat)
    };
    let [add_driver, auto_fix] = nixpkgs_driver_hooks();
    let files = [
        add_driver,
        auto_fix,
        ("hook.sh", ours("hooks/auto-add-driver-runpath.sh")),
        ("wrapper.sh", ours("hooks/auto-fix-elf-files-driver-runpath.sh")),
        ("compat.sh", ours("hooks/auto-add-cuda-compat-runpath.sh")),
    ];
    for (name, text) in &files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let run = |hooks: &[&str], pre: &str, run: &str| {
        sh(dir, "rm -rf store; mkdir -p store/o-out/bin; gcc -o store/o-out/bin/p plain.c -Wl,-rpath,/old/lib");
        real_setup(dir, hooks, &["out"], pre, run)
    };
    let all =
        ["add-driver-runpath.sh", "auto-fix-elf-files.sh", "hook.sh", "wrapper.sh", "compat.sh"];
    let show = r#"echo "hooks: ${postFixupHooks[*]}"; runHook postFixup"#;
    let want = format!("{compat}:{DRIVER}:/old/lib");
    let out = run(&all, "", show);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "hooks: autoFixElfFiles addDriverRunpath autoFixElfFiles addCudaCompatRunpath\n"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("Sourcing auto-add-cuda-compat-runpath-hook"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("using addDriverRunpath to fix").count(), 1, "one rewrite: {stderr}");
    assert_eq!(search_path(&dir.join("store/o-out/bin/p")).unwrap().1, want);

    // The compat hook alone (with autoFixElfFiles and the wrapper it propagates).
    let out = run(&["auto-fix-elf-files.sh", "wrapper.sh", "compat.sh"], "", show);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(search_path(&dir.join("store/o-out/bin/p")).unwrap().1, want);

    // From buildInputs (hostOffset 0, targetOffset 1): upstream's guard returns.
    let pre = format!("buildInputs={}", dir.join("compat.sh").display());
    let out = run(&all[..4], &pre, show);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("hooks: autoFixElfFiles addDriverRunpath\n"), "{stdout}");
    assert!(!stdout.contains("Sourcing auto-add-cuda-compat-runpath-hook"), "{stdout}");
    assert_eq!(
        search_path(&dir.join("store/o-out/bin/p")).unwrap().1,
        format!("{DRIVER}:/old/lib")
    );

    // Upstream's per-file function: its checks, and the same order on one file.
    let out = run(&all, "", "addCudaCompatRunpath");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("addCudaCompatRunpath: no library path provided"));
    let out = run(&all, "", "addCudaCompatRunpath store/o-out/bin/p");
    assert!(out.status.success(), "{}", text(&out));
    assert!(search_path(&dir.join("store/o-out/bin/p")).unwrap().1.starts_with(compat));
}

#[test]
fn skip_rules_leave_files_byte_identical_and_log_at_upstream_levels() {
    let nvcc = tool("nvcc");
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(dir.join("plain.c"), PLAIN_C).unwrap();
    std::fs::write(dir.join("k.cu"), "__global__ void k(int *x) { x[0] = 1; }\n").unwrap();
    sh(
        dir,
        &format!(
            "set -e; mkdir -p out/lib/debug/.build-id/ab out/bin
             gcc -g -o plain plain.c
             '{}' -cubin -arch=sm_90 -o out/lib/k.cubin k.cu
             objcopy --only-keep-debug plain out/lib/debug/.build-id/ab/cdef.debug
             objcopy --only-keep-debug plain out/lib/plain.dbg
             cp /lib64/ld-linux-x86-64.so.2 out/lib/
             gcc -static -o out/bin/static plain.c",
            nvcc.display()
        ),
    );
    let snap = snapshot(&dir.join("out"));
    let r = std::process::Command::new(env!("CARGO_BIN_EXE_auto-add-driver-runpath"))
        .args(["--format", "json", "out"])
        .current_dir(dir)
        .env_remove("NIX_LOG_FD")
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(snap == snapshot(&dir.join("out")), "a skipped file changed");
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let skip_of = |name: &str| {
        v["report"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"].as_str().unwrap().ends_with(name))
            .unwrap_or_else(|| panic!("{name} not reported: {v}"))["skip"]
            .clone()
    };
    assert_eq!(skip_of("k.cubin"), "cubin");
    assert_eq!(skip_of("cdef.debug"), "debug-info");
    assert_eq!(skip_of("plain.dbg"), "debug-info");
    assert_eq!(skip_of("ld-linux-x86-64.so.2"), "dynamic-loader");
    assert_eq!(skip_of("bin/static"), "static");

    // Inside a build: upstream's plain skip line on stdout at NIX_DEBUG >= 1,
    // nothing at 0.
    for (debug, expected) in [("0", 0), ("1", 1)] {
        let r = std::process::Command::new(env!("CARGO_BIN_EXE_auto-add-driver-runpath"))
            .arg("out/bin")
            .current_dir(dir)
            .env("NIX_LOG_FD", "2")
            .env("NIX_DEBUG", debug)
            .output()
            .unwrap();
        let line = "autoFixElfFiles: skipping a statically-linked ELF file out/bin/static\n";
        assert_eq!(
            String::from_utf8_lossy(&r.stdout).matches(line).count(),
            expected,
            "{}",
            text(&r)
        );
    }
}

#[test]
fn build_outputs_from_structured_attrs_and_a_missing_output_fails() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(dir.join("plain.c"), PLAIN_C).unwrap();
    sh(dir, "set -e; mkdir -p o1/bin; gcc -o o1/bin/p plain.c");
    let attrs = dir.join(".attrs.json");
    let o1 = dir.join("o1");
    let missing = dir.join("o2");
    std::fs::write(
        &attrs,
        serde_json::json!({ "outputs": { "out": o1, "dev": missing } }).to_string(),
    )
    .unwrap();
    let r = std::process::Command::new(env!("CARGO_BIN_EXE_auto-add-driver-runpath"))
        .current_dir(dir)
        .env_remove("NIX_LOG_FD")
        .env_remove("outputs")
        .env("NIX_ATTRS_JSON_FILE", &attrs)
        .output()
        .unwrap();
    // The existing output is patched, then the run fails for the missing one.
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    assert!(String::from_utf8_lossy(&r.stderr).contains("does not exist"), "{}", text(&r));
    assert_eq!(search_path(&o1.join("bin/p")).unwrap().1, DRIVER);
}

#[test]
fn real_libraries_nobody_here_wrote_are_patched_and_still_work() {
    let patchelf = tool("patchelf");
    let cuda = root().join(".tools/cuda");
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    sh(
        dir,
        &format!(
            "set -e; mkdir -p out/lib out/bin
             cp '{c}/lib/libcudart.so.13' '{c}/lib/libnvvm.so.4' out/lib/
             cp '{c}/bin/nvdisasm' '{c}/bin/cuobjdump' out/bin/
             cp /usr/lib/x86_64-linux-gnu/libstdc++.so.6 /lib/x86_64-linux-gnu/libc.so.6 out/lib/
             chmod u+w out/lib/* out/bin/*",
            c = cuda.display()
        ),
    );
    let syms = |f: &str| sh(dir, &format!("readelf -W --dyn-syms -V {f}"));
    let files = [
        "out/lib/libcudart.so.13",
        "out/lib/libnvvm.so.4",
        "out/lib/libstdc++.so.6",
        "out/lib/libc.so.6",
        "out/bin/nvdisasm",
    ];
    let before: Vec<String> = files.iter().map(|f| syms(f)).collect();
    // In place, as the hook runs it.
    let r = bin(dir, &["--in-place", "out"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    for (i, f) in files.iter().enumerate() {
        assert_eq!(before[i], syms(f), "{f}");
        let theirs = sh(dir, &format!("'{}' --print-rpath {f}", patchelf.display()));
        assert_eq!(theirs.trim_end(), DRIVER, "{f}");
        assert_eq!(search_path(&dir.join(f)).unwrap().1, DRIVER);
    }
    // The patched C library and programs still load and run.
    sh(dir, "LD_LIBRARY_PATH=$PWD/out/lib ./out/bin/nvdisasm --version | grep -q 'Cuda compilation tools'");
    sh(dir, "LD_LIBRARY_PATH=$PWD/out/lib ./out/bin/cuobjdump --version | grep -q 'Cuda compilation tools'");
}

#[test]
fn executables_with_a_large_bss_still_run() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    for (name, mib) in [("b64", 64), ("b512", 512)] {
        std::fs::write(
            dir.join(format!("{name}.c")),
            format!(
                "#include <stdio.h>\nstatic char big[{mib}u << 20];\n\
                 int main(void) {{ big[{mib}] = 7; printf(\"bss %d\\n\", big[{mib}]); return 0; }}\n"
            ),
        )
        .unwrap();
        sh(dir, &format!("mkdir -p out && gcc -o out/{name} {name}.c && gcc -no-pie -o out/{name}-nopie {name}.c"));
        // Without a spare header or known sections the table moves, and the
        // AT_PHDR-compatible placement needs a hole the size of .bss.
        for p in [name.to_string(), format!("{name}-nopie")] {
            sh(dir, &format!("cp out/{p} out/{p}-moved"));
            drop_section_headers(&dir.join("out").join(format!("{p}-moved")));
        }
    }
    let r = bin(dir, &["out"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    for p in [
        "b64",
        "b512",
        "b64-nopie",
        "b512-nopie",
        "b64-moved",
        "b512-moved",
        "b64-nopie-moved",
        "b512-nopie-moved",
    ] {
        assert_eq!(sh(dir, &format!("./out/{p}")), "bss 7\n", "{p}");
        assert_eq!(search_path(&dir.join("out").join(p)).unwrap().1, DRIVER);
        // The hole kept for old kernels' AT_PHDR is sparse, never 512 MiB of zeros.
        let m = std::fs::metadata(dir.join("out").join(p)).unwrap();
        assert!(m.blocks() * 512 < 1 << 20, "{p}: {} bytes on disk", m.blocks() * 512);
        assert!(m.len() < 300 << 20, "{p}: {} bytes", m.len());
    }
}

#[test]
fn corrupted_headers_never_panic_and_never_leave_a_half_written_file() {
    use nix_cuda_hooks::driver_runpath::{process_file, Action, Config, Driver};
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(dir.join("main.c"), MAIN_C).unwrap();
    std::fs::write(dir.join("lib.c"), LIB_C).unwrap();
    sh(dir, "gcc -o good main.c lib.c -Wl,-rpath,/a:/b && gcc -shared -fPIC -o good.so lib.c");
    let cfg = |in_place| Config { in_place, ..Config::new(Driver::Entry(DRIVER.into())) };
    // Deterministic pseudo-random corruption of header bytes (ELF header,
    // program headers, the first pages: .dynamic, .dynstr, .dynsym live there
    // in a small program), each mutant patched in both modes.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut patched, mut errors) = (0, 0);
    for i in 0..400 {
        // Both layouts: an executable (spare header) and a library (grown table).
        let good = std::fs::read(dir.join(if i % 4 < 2 { "good" } else { "good.so" })).unwrap();
        let limit = good.len().min(0x4000);
        let mut data = good.clone();
        for _ in 0..(1 + next() % 4) {
            let at = (next() as usize) % limit;
            data[at] = next() as u8;
        }
        let path = dir.join(format!("m{i}"));
        std::fs::write(&path, &data).unwrap();
        let report = process_file(&path, &[], &cfg(i % 2 == 0));
        match report.action {
            Action::Error => {
                errors += 1;
                assert_eq!(std::fs::read(&path).unwrap(), data, "m{i}: changed although it failed");
            }
            Action::Patched => {
                patched += 1;
                let after = std::fs::read(&path).unwrap();
                let elf = nix_cuda_hooks::elf::Elf::parse(&after).unwrap();
                let dynamic = elf.dynamic().unwrap().unwrap();
                let (value, _) =
                    nix_cuda_hooks::elf::patch::current_path(&elf, &dynamic).unwrap().unwrap();
                assert!(value.starts_with(DRIVER.as_bytes()), "m{i}");
            }
            _ => {}
        }
        std::fs::remove_file(&path).unwrap();
    }
    assert!(patched > 0 && errors > 0, "patched {patched}, errors {errors}");
    // Nothing left behind by failed attempts.
    let left: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.iter().all(|n| !n.to_string_lossy().ends_with(".tmp")), "{left:?}");
}

#[test]
fn headers_stay_in_place_when_an_entry_is_spare_so_strip_still_works() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    build_fixtures(dir);
    // gcc with CET notes (Debian's default) emits a PT_NOTE that repeats
    // PT_GNU_PROPERTY: that entry becomes the new PT_LOAD.
    let phdrs = sh(dir, "readelf -lW out/bin/pie");
    assert!(phdrs.contains("GNU_PROPERTY"), "fixture without PT_GNU_PROPERTY:\n{phdrs}");
    let r = bin(dir, &["--format", "json", "out/bin"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let pie = file_record(&v, "out/bin/pie");
    assert_eq!(pie["strategy"], "new-segment", "{pie}");
    let after = sh(dir, "readelf -lW out/bin/pie");
    assert!(after.contains("There are 13 program headers, starting at offset 64"), "{after}");
    // binutils' strip/objcopy expect the table at the start of the file.
    sh(dir, "strip -o out/bin/pie.stripped out/bin/pie && objcopy out/bin/pie out/bin/pie.copied");
    assert_eq!(sh(dir, "./out/bin/pie.stripped"), sh(dir, "./out/bin/pie"));
    assert_eq!(sh(dir, "./out/bin/pie.copied"), sh(dir, "./out/bin/pie"));
    assert_eq!(
        search_path(&dir.join("out/bin/pie.stripped")).unwrap().1,
        format!("{DRIVER}:$ORIGIN/../lib")
    );
}

#[test]
fn libraries_grow_their_header_table_in_place_and_survive_strip() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    build_fixtures(dir);
    sh(dir, "gcc -shared -fPIC -fcf-protection=none -o out/lib/libnocet.so lib.c");
    let r = bin(dir, &["--format", "json", "out/lib"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let lib = file_record(&v, "out/lib/libnocet.so");
    assert_eq!(lib["strategy"], "new-segment-grown-headers", "{lib}");
    assert!(sh(dir, "readelf -lW out/lib/libnocet.so").contains("starting at offset 64"));
    assert_eq!(sh(dir, "./host out/lib/libnocet.so"), "hello from lib 42\n");
    assert_eq!(sh(dir, "readelf -n out/lib/libnocet.so | grep -c 'Build ID'").trim(), "1");
    sh(dir, "strip -o out/lib/libnocet.stripped.so out/lib/libnocet.so 2>strip.err && ! test -s strip.err");
    assert_eq!(sh(dir, "./host out/lib/libnocet.stripped.so"), "hello from lib 42\n");
    assert_eq!(search_path(&dir.join("out/lib/libnocet.stripped.so")).unwrap().1, DRIVER);

    // Executables too: `.interp` and the notes after the table move.
    for p in ["pie", "nopie-rpath"] {
        sh(dir, &format!("cp out/bin/{p} out/bin/{p}-grow"));
        no_spare_header(&dir.join(format!("out/bin/{p}-grow")));
    }
    let before = sh(dir, "./out/bin/pie-grow && ./out/bin/nopie-rpath-grow");
    let r = bin(dir, &["--in-place", "--format", "json", "out/bin"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    for f in v["report"]["files"].as_array().unwrap() {
        if f["path"].as_str().unwrap().ends_with("-grow") {
            assert_eq!(f["strategy"], "new-segment-grown-headers", "{f}");
        }
    }
    assert_eq!(before, sh(dir, "./out/bin/pie-grow && ./out/bin/nopie-rpath-grow"));
    sh(dir, "strip -o out/bin/pie-grow.s out/bin/pie-grow && ./out/bin/pie-grow.s");
}

/// Clears `e_shoff`, `e_shnum`, `e_shstrndx` of an ELF64 file (as sstrip
/// does), and turns PT_GNU_PROPERTY into a second PT_NOTE, so that no program
/// header is spare and no section is known: the table must move.
fn drop_section_headers(path: &Path) {
    no_spare_header(path);
    let mut data = std::fs::read(path).unwrap();
    data[40..48].fill(0);
    data[60..64].fill(0);
    std::fs::write(path, data).unwrap();
}

/// Turns PT_GNU_PROPERTY into a second PT_NOTE: no program header is spare.
fn no_spare_header(path: &Path) {
    let mut data = std::fs::read(path).unwrap();
    let phoff = u64::from_le_bytes(data[32..40].try_into().unwrap()) as usize;
    let phnum = u16::from_le_bytes(data[56..58].try_into().unwrap()) as usize;
    for i in 0..phnum {
        let at = phoff + i * 56;
        if data[at..at + 4] == 0x6474_e553u32.to_le_bytes() {
            data[at..at + 4].copy_from_slice(&4u32.to_le_bytes());
        }
    }
    std::fs::write(path, data).unwrap();
}

#[test]
fn without_section_headers_the_table_moves_and_programs_still_run() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    build_fixtures(dir);
    for (name, flags) in [("pie-nosht", "-fPIE -pie"), ("nopie-nosht", "-no-pie")] {
        sh(
            dir,
            &format!(
                "gcc {flags} -fcf-protection=none -o out/bin/{name} main.c -Lout/lib -lans \
                 -Wl,-rpath,'$ORIGIN/../lib'"
            ),
        );
        drop_section_headers(&dir.join("out/bin").join(name));
    }
    // The same programs next to the library in a second folder, for the other mode.
    sh(dir, "mkdir -p out2/bin && cp out/bin/*-nosht out2/bin/ && cp -a out/lib out2/");
    for (folder, mode) in [("out", &[][..]), ("out2", &["--in-place"][..])] {
        let run = format!("./{folder}/bin/pie-nosht && ./{folder}/bin/nopie-nosht");
        let before = sh(dir, &run);
        let r = bin(dir, &[mode, &["--format", "json", &format!("{folder}/bin")]].concat());
        assert_eq!(r.status.code(), Some(0), "{}", text(&r));
        let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        for f in v["report"]["files"].as_array().unwrap() {
            if f["path"].as_str().unwrap().ends_with("-nosht") {
                assert_eq!(f["strategy"], "new-segment-moved-headers", "{f}");
                assert_eq!(f["in_place"], !mode.is_empty(), "{f}");
            }
        }
        let r = bin(dir, &["--check", &format!("{folder}/bin")]);
        assert_eq!(r.status.code(), Some(0), "{}", text(&r));
        for name in ["pie-nosht", "nopie-nosht"] {
            let file = dir.join(folder).join("bin").join(name);
            let phdrs = sh(dir, &format!("readelf -lW {}", file.display()));
            assert!(!phdrs.contains("starting at offset 64"), "{name}: {phdrs}");
            assert_eq!(search_path(&file).unwrap().1, format!("{DRIVER}:$ORIGIN/../lib"));
        }
        assert_eq!(before, sh(dir, &run));
    }
}

/// The real-library corpus from PyPI (`tests/tools/corpus.sh`: cuBLAS's
/// 715 MiB libcublasLt with 5,839 cubins, cuRAND, CuPy's extension modules):
/// every shared object is patched, in both modes; readelf reads it without a
/// warning, the dynamic symbols and versions are the same, cuobjdump lists the
/// same device code, patchelf reads the same RUNPATH, and the NVIDIA libraries
/// still load. Opt-in (`cargo test --release -- --ignored`) because of its size
/// (800 MB of wheels, downloaded on first use); a failed download is a failure.
#[test]
#[ignore = "downloads 800 MB of wheels on first use (tests/tools/corpus.sh)"]
fn pypi_corpus() {
    let cuobjdump = tool("cuobjdump");
    let patchelf = tool("patchelf");
    let out = std::process::Command::new("bash")
        .arg(root().join("tests/tools/corpus.sh"))
        .args(["cublaslt", "curand12", "cupy"])
        .output()
        .unwrap();
    assert!(out.status.success(), "corpus.sh: {}", String::from_utf8_lossy(&out.stderr));
    let lib = root().join(".cache/corpus/lib");
    let t = tempfile::tempdir_in(root().join(".cache")).unwrap();
    let dir = t.path();
    for name in
        ["nvidia-cublas-cu12-12.9.3.13", "nvidia-curand-cu12-10.3.10.19", "cupy-cuda12x-14.2.0"]
    {
        sh(dir, &format!("mkdir -p replace && cp -a '{}' replace/", lib.join(name).display()));
    }
    sh(dir, "cp -a replace in-place");
    let files: Vec<String> = sh(dir, "cd replace && find . -type f -name '*.so*' | sort")
        .lines()
        .map(|l| l.trim_start_matches("./").to_string())
        .collect();
    assert!(files.len() > 10, "{files:?}");
    let info = |f: &Path| sh(dir, &format!("readelf -W --dyn-syms -V '{}'", f.display()));
    let has_fatbin =
        |f: &Path| sh(dir, &format!("readelf -SW '{}'", f.display())).contains(".nv_fatbin");
    let list = |f: &Path| {
        let out = std::process::Command::new(&cuobjdump).arg("--list-elf").arg(f).output().unwrap();
        assert!(out.status.success(), "cuobjdump {}", f.display());
        out.stdout
    };
    let before: Vec<(String, Option<Vec<u8>>)> = files
        .iter()
        .map(|f| {
            let p = dir.join("replace").join(f);
            (info(&p), has_fatbin(&p).then(|| list(&p)))
        })
        .collect();
    for (folder, mode) in [("replace", &[][..]), ("in-place", &["--in-place"][..])] {
        let r = bin(dir, &[mode, &[folder]].concat());
        assert_eq!(r.status.code(), Some(0), "{}", text(&r));
        for (f, (syms, fat)) in files.iter().zip(&before) {
            let p = dir.join(folder).join(f);
            let (tag, value) =
                search_path(&p).unwrap_or_else(|| panic!("{folder}/{f}: no RUNPATH"));
            assert_eq!(tag, "RUNPATH", "{folder}/{f}");
            assert!(value.starts_with(DRIVER), "{folder}/{f}: {value}");
            let theirs =
                sh(dir, &format!("'{}' --print-rpath '{}'", patchelf.display(), p.display()));
            assert_eq!(theirs.trim_end(), value, "{folder}/{f}");
            assert_eq!(syms, &info(&p), "{folder}/{f}: symbols or versions changed");
            if let Some(fat) = fat {
                assert!(fat == &list(&p), "{folder}/{f}: cuobjdump listing changed");
            }
        }
    }
    for lib in ["nvidia/cublas/lib/libcublasLt.so.12", "nvidia/curand/lib/libcurand.so.10"] {
        let path = files.iter().find(|f| f.ends_with(lib)).unwrap();
        for folder in ["replace", "in-place"] {
            sh(dir, &format!("python3 -c \"import ctypes; ctypes.CDLL('{folder}/{path}')\""));
        }
    }
}

#[test]
fn patchelf_still_works_on_our_output_as_autoaddcudacompatrunpath_needs() {
    let patchelf = tool("patchelf");
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    build_fixtures(dir);
    sh(dir, "cp out/bin/pie out/bin/pie-grow");
    no_spare_header(&dir.join("out/bin/pie-grow"));
    let r = bin(dir, &["out"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    // autoAddCudaCompatRunpath runs later and puts cuda_compat first.
    for f in ["bin/pie", "bin/pie-grow", "bin/nopie-rpath", "lib/libans.so"] {
        let p = dir.join("out").join(f);
        let old = sh(dir, &format!("'{}' --print-rpath {}", patchelf.display(), p.display()));
        sh(
            dir,
            &format!(
                "'{}' --set-rpath '/compat/lib:{}' {}",
                patchelf.display(),
                old.trim(),
                p.display()
            ),
        );
    }
    assert_eq!(
        sh(dir, "./out/bin/pie && ./out/bin/pie-grow && ./out/bin/nopie-rpath"),
        "hello from lib 42\n".repeat(3)
    );
    assert_eq!(sh(dir, "./host out/lib/libans.so"), "hello from lib 42\n");
    assert_eq!(
        search_path(&dir.join("out/bin/pie")).unwrap().1,
        format!("/compat/lib:{DRIVER}:$ORIGIN/../lib")
    );
    // And a second run of ours keeps that order: the driver entry is present.
    let snap = snapshot(&dir.join("out"));
    let r = bin(dir, &["--in-place", "out"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(snap == snapshot(&dir.join("out")));
}

/// Nixpkgs issue 434101: with separateDebugInfo, patchelf lost symbols next
/// to `.nv_fatbin`. Here: a CUDA library split the way separateDebugInfo does
/// (debug file under `lib/debug/.build-id`, `.gnu_debuglink` in the library),
/// then patched: the debug file is skipped untouched, the library keeps its
/// symbols, device code and debug link.
#[test]
fn cuda_library_with_separate_debug_info() {
    let nvcc = tool("nvcc");
    let cuobjdump = tool("cuobjdump");
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(
        dir.join("k.cu"),
        "__global__ void k(int *x) { x[threadIdx.x] += 1; }\n\
         extern \"C\" int launch(int *d) { k<<<1, 16>>>(d); return (int)cudaDeviceSynchronize(); }\n",
    )
    .unwrap();
    let cuda = root().join(".tools/cuda");
    sh(
        dir,
        &format!(
            "set -e; mkdir -p out/lib debug/lib/debug/.build-id/aa
             '{}' -g -shared -Xcompiler -fPIC -cudart shared -L'{}/lib' -arch=sm_90 -o out/lib/libk.so k.cu
             objcopy --only-keep-debug out/lib/libk.so debug/lib/debug/.build-id/aa/bbbb.debug
             strip --strip-debug out/lib/libk.so
             objcopy --add-gnu-debuglink=debug/lib/debug/.build-id/aa/bbbb.debug out/lib/libk.so",
            nvcc.display(),
            cuda.display()
        ),
    );
    let lib = dir.join("out/lib/libk.so");
    let syms = || sh(dir, "readelf -W --dyn-syms --syms out/lib/libk.so");
    let list = || sh(dir, &format!("'{}' --list-elf out/lib/libk.so", cuobjdump.display()));
    let link = || section_bytes(&lib, ".gnu_debuglink");
    let (s0, l0, k0, f0) = (syms(), list(), link(), section_bytes(&lib, ".nv_fatbin"));
    let debug_snap = snapshot(&dir.join("debug"));
    let r = bin(dir, &["--in-place", "out", "debug"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert_eq!(s0, syms());
    assert_eq!(l0, list());
    assert_eq!(k0, link());
    assert_eq!(f0, section_bytes(&lib, ".nv_fatbin"));
    assert!(debug_snap == snapshot(&dir.join("debug")), "the debug file changed");
    assert_eq!(search_path(&lib).unwrap().1, DRIVER);
}

/// Every shared library in /usr/lib/x86_64-linux-gnu and every program in
/// /usr/bin of this machine (Debian's builds, ~950 ELF files), copied and
/// patched in both modes: readelf reads the same dynamic symbols and
/// versions, and programs run on the patched libraries. Opt-in
/// (`cargo test --release -- --ignored`): it copies 1.3 GB.
#[test]
#[ignore = "copies the system's libraries and programs (1.3 GB)"]
fn system_corpus() {
    let t = tempfile::tempdir_in(root().join(".cache")).unwrap();
    let dir = t.path();
    sh(
        dir,
        "set -e; for m in replace in-place; do mkdir -p $m/lib $m/bin
         find /usr/lib/x86_64-linux-gnu -maxdepth 1 -type f -name '*.so*' -exec cp {} $m/lib/ \\;
         find /usr/bin -maxdepth 1 -type f -exec cp -p {} $m/bin/ \\; ; done",
    );
    let files: Vec<String> = sh(dir, "cd replace && find . -type f | sort")
        .lines()
        .map(|l| l.trim_start_matches("./").to_string())
        .filter(|f| std::fs::read(dir.join("replace").join(f)).unwrap().starts_with(b"\x7fELF"))
        .collect();
    assert!(files.len() > 100);
    let info = |p: &Path| sh(dir, &format!("readelf -W --dyn-syms -V '{}' 2>&1", p.display()));
    let before: Vec<String> = files.iter().map(|f| info(&dir.join("replace").join(f))).collect();
    for (folder, mode) in [("replace", &[][..]), ("in-place", &["--in-place"][..])] {
        let r = bin(dir, &[mode, &[folder]].concat());
        assert_eq!(r.status.code(), Some(0), "{}", text(&r));
        for (f, b) in files.iter().zip(&before) {
            assert_eq!(b, &info(&dir.join(folder).join(f)), "{folder}/{f}");
        }
        let run =
            |cmd: &str| sh(dir, &format!("LD_LIBRARY_PATH=$PWD/{folder}/lib {folder}/bin/{cmd}"));
        assert!(run("perl -e 'print 42'").contains("42"));
        assert!(run("git --version").starts_with("git version"));
        if files.iter().any(|f| f == "bin/python3.11") {
            assert!(run("python3.11 -c 'import ssl, sqlite3, ctypes; print(7)'").contains('7'));
        }
    }
}

/// A real `nix-build` (Nix >= 2.18 from .tools, store under a temp folder, no
/// sandbox) of a derivation whose builder compiles a program and a library,
/// sources Nixpkgs' own addDriverRunpath and autoFixElfFiles hooks (read in
/// place from the pinned Nixpkgs files), then ours, and runs the postFixup
/// hooks, with and without structured attributes. The full setup.sh runs in
/// nix/tests (run.sh); this one checks the binary behind the entry.
#[test]
fn hook_in_a_real_nix_build() {
    let nix_build = tool("nix-build");
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let [(_, add_driver), (_, auto_fix)] = nixpkgs_driver_hooks();
    let hooks = [
        add_driver,
        auto_fix,
        std::fs::read_to_string(root().join("hooks/auto-add-driver-runpath.sh")).unwrap(),
        std::fs::read_to_string(root().join("hooks/auto-fix-elf-files-driver-runpath.sh"))
            .unwrap()
            .replace("@autoAddDriverRunpath@", env!("CARGO_BIN_EXE_auto-add-driver-runpath")),
    ];
    std::fs::write(dir.join("hook.sh"), hooks.join("\n")).unwrap();
    std::fs::write(
        dir.join("builder.sh"),
        r#"set -euo pipefail
postFixupHooks=()
runHook() { local h; for h in "${postFixupHooks[@]}"; do eval "$h"; done; }
if [[ -e ${NIX_BUILD_TOP:-/nonexistent}/.attrs.sh ]]; then
  source "$NIX_BUILD_TOP/.attrs.sh"
  out=${outputs[out]}
fi
mkdir -p "$out/bin" "$out/lib"
printf '#include <stdio.h>\nint main(void) { puts("built by nix"); return 0; }\n' > p.c
gcc -o "$out/bin/p" p.c
gcc -shared -fPIC -o "$out/lib/libp.so" p.c
source "$hook"
[[ ${postFixupHooks[*]} == "autoFixElfFiles addDriverRunpath" ]]
runHook postFixup
"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("default.nix"),
        r#"{ structured ? false }:
derivation ({
  name = "hook-test";
  system = builtins.currentSystem;
  builder = "/bin/bash";
  args = [ ./builder.sh ];
  PATH = builtins.getEnv "PATH";
  hook = toString ./. + "/hook.sh";
} // (if structured then { __structuredAttrs = true; } else { }))
"#,
    )
    .unwrap();
    for structured in ["false", "true"] {
        let result = dir.join(format!("result-{structured}"));
        let out = std::process::Command::new(&nix_build)
            .args(["--option", "substituters", "", "--option", "sandbox", "false"])
            .args(["--option", "build-users-group", "", "--option", "build-hook", ""])
            .args(["--arg", "structured", structured])
            .arg("-o")
            .arg(&result)
            .arg(dir.join("default.nix"))
            .env("NIX_STORE_DIR", dir.join("store"))
            .env("NIX_STATE_DIR", dir.join("state"))
            .env("NIX_LOG_DIR", dir.join("log"))
            .output()
            .unwrap();
        assert!(out.status.success(), "structured={structured}: {}", text(&out));
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(log.contains("Using autoAddDriverRunpath"), "{log}");
        assert!(log.contains("using addDriverRunpath to fix"), "{log}");
        assert_eq!(search_path(&result.join("bin/p")).unwrap().1, DRIVER);
        assert_eq!(search_path(&result.join("lib/libp.so")).unwrap().1, DRIVER);
        assert_eq!(sh(dir, &format!("{}/bin/p", result.display())), "built by nix\n");
    }
}

/// The JSON report's record of one file.
fn file_record<'v>(report: &'v serde_json::Value, path: &str) -> &'v serde_json::Value {
    let files = report["report"]["files"].as_array().expect("report.files");
    files.iter().find(|f| f["path"] == path).unwrap_or_else(|| panic!("no record for {path}"))
}

/// `--remove-stubs`, `--cuda-compat` and `--append-origin` as one run and as
/// separate runs in two orders: the same search paths; run again: the same
/// bytes; the loader
/// no longer searches the stubs folder (the program prints the real
/// library's greeting, not the stub's); upstream's DEBUG lines.
#[test]
fn fixes_in_separate_runs_give_one_runs_search_paths_and_the_loader_agrees() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(dir.join("lib.c"), LIB_C).unwrap();
    std::fs::write(dir.join("main.c"), MAIN_C).unwrap();
    std::fs::write(
        dir.join("stub.c"),
        "int answer(void) { return 0; }\nconst char *greeting(void) { return \"stub\"; }\n",
    )
    .unwrap();
    let stubs = dir.join("store/h-cuda12.8-libans-12.8-stubs/lib");
    sh(
        dir,
        &format!(
            "set -e; mkdir -p one/lib one/bin {stubs}
             gcc -shared -fPIC -o {stubs}/libans.so stub.c
             gcc -shared -fPIC -o one/lib/libans.so lib.c
             gcc -o one/bin/p main.c -L{stubs} -lans -Wl,--enable-new-dtags,-rpath,{stubs}:'$ORIGIN/../lib'
             gcc -shared -fPIC -o one/lib/libplain.so lib.c
             cp -r one split; cp -r one reversed",
            stubs = stubs.display()
        ),
    );
    // Before: the stubs folder comes first, the loader takes the stub.
    assert_eq!(sh(dir, "./one/bin/p").trim(), "stub 0");
    let compat = "/nix/store/h-cuda_compat/compat";
    let ok = |args: &[&str]| {
        let r = bin(dir, args);
        assert_eq!(r.status.code(), Some(0), "{args:?}: {}", text(&r));
    };
    ok(&["--remove-stubs", "--cuda-compat", compat, "--append-origin", "one"]);
    ok(&["--append-origin", "split"]);
    ok(&["--remove-stubs", "split"]);
    ok(&["--cuda-compat", compat, "split"]);
    ok(&["--cuda-compat", compat, "reversed"]);
    ok(&["reversed"]);
    ok(&["--remove-stubs", "reversed"]);
    ok(&["--append-origin", "reversed"]);
    // The same search path in every file, read by readelf, and the same
    // bytes: a file our writer made is rewritten from its original, not
    // given one more segment per run.
    for f in ["bin/p", "lib/libans.so", "lib/libplain.so"] {
        let want = search_path(&dir.join("one").join(f));
        assert_eq!(search_path(&dir.join("split").join(f)), want, "{f}");
        assert_eq!(search_path(&dir.join("reversed").join(f)), want, "{f}");
        let bytes = std::fs::read(dir.join("one").join(f)).unwrap();
        assert!(std::fs::read(dir.join("split").join(f)).unwrap() == bytes, "{f}");
        assert!(std::fs::read(dir.join("reversed").join(f)).unwrap() == bytes, "{f}");
    }
    assert_eq!(
        sh(dir, "./split/bin/p && ./reversed/bin/p"),
        "hello from lib 42\nhello from lib 42\n"
    );
    let one = snapshot(&dir.join("one"));
    ok(&["--remove-stubs", "--cuda-compat", compat, "--append-origin", "one"]);
    assert!(one == snapshot(&dir.join("one")), "a second run changed bytes");
    // readelf, not our report: compat, driver, then the old entries less
    // the stubs folder; $ORIGIN once.
    assert_eq!(
        search_path(&dir.join("one/bin/p")).unwrap(),
        ("RUNPATH".into(), format!("{compat}:{DRIVER}:$ORIGIN/../lib:$ORIGIN"))
    );
    assert_eq!(
        search_path(&dir.join("one/lib/libplain.so")).unwrap().1,
        format!("{compat}:{DRIVER}:$ORIGIN")
    );
    // After: the real library, through $ORIGIN/../lib.
    assert_eq!(sh(dir, "./one/bin/p").trim(), "hello from lib 42");

    // Upstream's DEBUG lines, at NIX_DEBUG 6 and not below.
    sh(dir, "mkdir again; gcc -o again/p main.c -Lone/lib -lans -Wl,--enable-new-dtags,-rpath,/x:/nix/store/h-cuda_nvml/stubs:/nix/store/h-nvidia-stubs/lib");
    let exe = env!("CARGO_BIN_EXE_auto-add-driver-runpath");
    let log = sh(dir, &format!("NIX_LOG_FD=1 NIX_DEBUG=6 {exe} --remove-stubs again 2>/dev/null"));
    let p = "again/p";
    for line in [
        format!("DEBUG: removeStubsFromRunpath: keeping {p} runpath entry: {DRIVER}"),
        format!("DEBUG: removeStubsFromRunpath: keeping {p} runpath entry: /x"),
        format!("DEBUG: removeStubsFromRunpath: dropping {p} runpath entry: /nix/store/h-cuda_nvml/stubs"),
        format!("DEBUG: removeStubsFromRunpath: keeping {p} runpath entry: /nix/store/h-nvidia-stubs/lib"),
        format!("WARN: removeStubsFromRunpath: {p}: keeps the stubs folder /nix/store/h-nvidia-stubs/lib"),
    ] {
        assert!(log.contains(&line), "no line {line:?} in:\n{log}");
    }
    let log = sh(dir, &format!("NIX_LOG_FD=1 NIX_DEBUG=5 {exe} --remove-stubs again 2>/dev/null"));
    assert!(!log.contains("DEBUG:"), "{log}");
    assert_eq!(
        search_path(&dir.join("again/p")).unwrap().1,
        format!("{DRIVER}:/x:/nix/store/h-nvidia-stubs/lib")
    );
}

/// Every permutation of `0..n`, in Heap's order.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    fn heap(k: usize, a: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if k <= 1 {
            out.push(a.clone());
            return;
        }
        for i in 0..k {
            heap(k - 1, a, out);
            let j = if k % 2 == 0 { i } else { 0 };
            a.swap(j, k - 1);
        }
    }
    let mut out = Vec::new();
    heap(n, &mut (0..n).collect(), &mut out);
    out
}

/// The PT_LOAD count of a file, read by readelf (which must not warn).
fn load_count(file: &Path) -> usize {
    let out = std::process::Command::new(tool("readelf")).arg("-lSW").arg(file).output().unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "readelf -lSW {}", file.display());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.trim_start().starts_with("LOAD"))
        .count()
}

/// Issue 33's "running the fixes as separate invocations in any order gives
/// the same bytes": a gcc program (linked against a CUDA stubs folder, with
/// `$ORIGIN/../lib`, dlopening a plugin from another output), a gcc library
/// and NVIDIA's libcudart.so.12 from the corpus, fixed by the five fixes
/// (the driver entry, `--cuda-compat`, `--remove-stubs`, `--append-origin`,
/// `--dlopen-search`) as five separate runs in all 120 orders. Each file is
/// byte for byte the one-run file in every order, and one segment more
/// than the original (readelf), never one per run: the dlopen folder's run
/// before `$ORIGIN`'s too, and `$ORIGIN`'s first though `$ORIGIN` (the
/// program's folder) holds a copy of the plugin. Every result runs, the
/// libraries dlopen, and patchelf reads the search path readelf reads.
#[test]
fn every_order_of_separate_fixes_gives_one_runs_bytes() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::write(
        dir.join("main.c"),
        r#"#include <stdio.h>
#include <dlfcn.h>
int answer(void);
int main(void) {
  void *h = dlopen("libplug.so", RTLD_NOW);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
  int (*plug)(void) = (int (*)(void))dlsym(h, "plug");
  printf("%d %d\n", answer(), plug());
  return 0;
}
"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("host.c"),
        r#"#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
  int (*f)(int *) = (int (*)(int *))dlsym(h, argv[2]);
  if (!f) { fprintf(stderr, "dlsym: %s\n", dlerror()); return 1; }
  int v = 0;
  int r = f(&v);
  printf("%d %d\n", r, v);
  return 0;
}
"#,
    )
    .unwrap();
    std::fs::write(dir.join("lib.c"), "int answer(void) { return 42; }\n").unwrap();
    std::fs::write(dir.join("stub.c"), "int answer(void) { return 0; }\n").unwrap();
    std::fs::write(dir.join("plug.c"), "int plug(void) { return 7; }\n").unwrap();
    let stubs = dir.join("store/h-cuda12.8-libans-12.8-stubs/lib");
    sh(
        dir,
        &format!(
            "set -e; mkdir -p tree/lib tree/bin plugins {stubs}
             gcc -O1 -o host host.c -ldl
             gcc -shared -fPIC -o {stubs}/libans.so stub.c
             gcc -shared -fPIC -o plugins/libplug.so plug.c
             cp plugins/libplug.so tree/bin/
             gcc -shared -fPIC -o tree/lib/libans.so lib.c
             gcc -o tree/bin/p main.c -L{stubs} -lans -ldl \
                 -Wl,--enable-new-dtags,-rpath,{stubs}:'$ORIGIN/../lib'",
            stubs = stubs.display()
        ),
    );
    std::fs::copy(corpus("cudart12", "libcudart.so.12"), dir.join("tree/lib/libcudart.so.12"))
        .unwrap();
    let plugins = dir.join("plugins").display().to_string();
    let compat = "/nix/store/h-cuda_compat/compat";
    let fixes: [Vec<&str>; 5] = [
        vec![],
        vec!["--cuda-compat", compat],
        vec!["--remove-stubs"],
        vec!["--append-origin"],
        vec!["--dlopen-search", &plugins],
    ];
    let fix = |tree: &str, args: &[&str]| {
        let r = bin(dir, &[args, &[tree]].concat());
        assert_eq!(r.status.code(), Some(0), "{args:?} {tree}: {}", text(&r));
    };
    let files = ["bin/p", "lib/libans.so", "lib/libcudart.so.12"];
    let loads: Vec<usize> = files.iter().map(|f| load_count(&dir.join("tree").join(f))).collect();
    sh(dir, "cp -a tree one");
    fix("one", &fixes.concat());
    let one = snapshot(&dir.join("one"));
    // Every order gives the one run's bytes: the dlopen folder's run before
    // `$ORIGIN`'s too (`$ORIGIN` goes before the folder an earlier run
    // appended), and `$ORIGIN`'s before the dlopen folder's (the folder is
    // decided by the original's search path, as in one run, though the
    // `$ORIGIN` an earlier run added holds a copy of the plugin).
    for order in permutations(fixes.len()) {
        let name = format!("o{}", order.iter().map(|i| i.to_string()).collect::<String>());
        sh(dir, &format!("cp -a tree {name}"));
        for &i in &order {
            fix(&name, &fixes[i]);
        }
        let got: Vec<_> = snapshot(&dir.join(&name))
            .into_iter()
            .map(|(p, b)| (dir.join("one").join(p.strip_prefix(dir.join(&name)).unwrap()), b))
            .collect();
        for (k, f) in files.iter().enumerate() {
            let (w, g) =
                (one.iter().find(|e| e.0.ends_with(f)), got.iter().find(|e| e.0.ends_with(f)));
            assert!(w.unwrap().1 == g.unwrap().1, "{f}: order {order:?} gave other bytes");
            assert_eq!(load_count(&dir.join(&name).join(f)), loads[k] + 1, "{f} {order:?}");
        }
        assert_eq!(sh(dir, &format!("timeout 20 ./{name}/bin/p")), "42 7\n", "{order:?}");
        std::fs::remove_dir_all(dir.join(&name)).unwrap();
    }
    // `--in-place` (the hooks' mode) too: a file our writer made is then
    // rebuilt through a replacement, and gives the same bytes.
    sh(dir, "cp -a tree inplace");
    for i in [3, 2, 0, 4, 1] {
        fix("inplace", &[&["--in-place"][..], &fixes[i]].concat());
    }
    for f in files {
        let bytes = std::fs::read(dir.join("one").join(f)).unwrap();
        assert!(std::fs::read(dir.join("inplace").join(f)).unwrap() == bytes, "--in-place {f}");
    }
    // The one run's files: readelf and patchelf agree, they run and load.
    let want_p = format!("{compat}:{DRIVER}:$ORIGIN/../lib:$ORIGIN:{plugins}");
    assert_eq!(search_path(&dir.join("one/bin/p")).unwrap(), ("RUNPATH".into(), want_p));
    for f in files {
        let path = dir.join("one").join(f);
        let (_, readelf) = search_path(&path).unwrap();
        let patchelf =
            sh(dir, &format!("{} --print-rpath {}", tool("patchelf").display(), path.display()));
        assert_eq!(patchelf.trim_end(), readelf, "{f}");
    }
    assert_eq!(sh(dir, "timeout 20 ./host one/lib/libans.so answer"), "42 0\n");
    assert_eq!(
        sh(dir, "timeout 20 ./host one/lib/libcudart.so.12 cudaRuntimeGetVersion"),
        "0 12090\n"
    );
}
