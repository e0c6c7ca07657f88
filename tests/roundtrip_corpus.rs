//! The RUNPATH round trip (fuzz/common/roundtrip.rs, the `runpath` fuzz
//! target's check) over a corpus, with readelf as the outside judge: every
//! file the writer accepts reads back under readelf with the intended search
//! path, no readelf warning the original did not have, and every section but
//! `.dynamic` byte-identical (`.dynstr` may only grow at its end).
//!
//! Corpus: gcc-built libraries and programs in every layout the writer has a
//! strategy for (made here), the minimized fuzz findings in
//! tests/data/fuzz/runpath (first byte: planner options, as in the target),
//! and, when `NCH_FUZZ_CORPUS` names a folder (fuzz/corpus/runpath after a
//! fuzz run), every file in it.

mod common;

#[path = "../fuzz/common/roundtrip.rs"]
mod roundtrip;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn readelf(args: &[&str], file: &Path) -> (String, String) {
    let out = Command::new("readelf").args(args).arg(file).output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `(index, name, type)` of every section, from `readelf -SW`.
fn sections(file: &Path) -> Vec<(usize, String, String)> {
    let (out, _) = readelf(&["-SW"], file);
    out.lines()
        .filter_map(|l| {
            let l = l.trim_start().strip_prefix('[')?;
            let (idx, rest) = l.split_once(']')?;
            let idx: usize = idx.trim().parse().ok()?;
            let mut f = rest.split_whitespace();
            let (name, ty) = if idx == 0 {
                (String::new(), "NULL".into())
            } else {
                (f.next()?.into(), f.next()?.into())
            };
            Some((idx, name, ty))
        })
        .collect()
}

/// The bytes of section `idx` as readelf dumps them (hex words, no addresses).
fn dump(file: &Path, idx: usize) -> String {
    let (out, _) = readelf(&["-x", &idx.to_string()], file);
    out.lines()
        .filter(|l| l.starts_with("  0x"))
        // `  0x<8 hex> ` then 4 words of 8 hex digits in 35 columns, then ASCII.
        .map(|l| l.get(13..48).unwrap_or(&l[13..]).replace(' ', ""))
        .collect::<String>()
}

fn check(name: &str, input: &[u8], variant: u8, dir: &Path) -> bool {
    let Some(p) = roundtrip::round_trip(input, &roundtrip::options(variant)) else { return false };
    let old = dir.join(format!("{name}.old"));
    let new = dir.join(format!("{name}.new"));
    std::fs::write(&old, input).unwrap();
    std::fs::write(&new, &p.bytes).unwrap();
    let (d, err) = readelf(&["-dW"], &new);
    let (_, old_err) = readelf(&["-dW", "-SW", "-lW"], &old);
    let (_, new_err) = readelf(&["-dW", "-SW", "-lW"], &new);
    if old_err.is_empty() {
        assert!(new_err.is_empty() && err.is_empty(), "{name}: readelf warns: {new_err}");
    }
    let label = match p.tag {
        nix_cuda_hooks::elf::runpath::Tag::Runpath => "Library runpath",
        nix_cuda_hooks::elf::runpath::Tag::Rpath => "Library rpath",
    };
    let want = format!("{label}: [{}]", String::from_utf8_lossy(&p.value));
    if !old_err.is_empty() {
        // readelf itself cannot make sense of the original's tables (a fuzzed
        // input, e.g. a section table whose .dynamic is not the dynamic
        // segment: readelf then prints string offsets, not strings). The
        // tag must be there; the byte comparison of our own reader and
        // object (round_trip) stands for the rest.
        let tag = match p.tag {
            nix_cuda_hooks::elf::runpath::Tag::Runpath => "(RUNPATH)",
            nix_cuda_hooks::elf::runpath::Tag::Rpath => "(RPATH)",
        };
        assert!(d.contains(&want) || d.contains(tag), "{name}: readelf -d lacks {tag}:\n{d}");
        return true;
    }
    assert!(d.contains(&want), "{name}: readelf -d lacks {want}:\n{d}");
    let (so, sn) = (sections(&old), sections(&new));
    assert_eq!(so, sn, "{name}: section lists differ");
    for (idx, sname, ty) in &so {
        if ty == "NOBITS" || ty == "NULL" || ty == "DYNAMIC" {
            continue;
        }
        let (a, b) = (dump(&old, *idx), dump(&new, *idx));
        if a != b {
            assert!(ty == "STRTAB" && b.starts_with(&a), "{name}: section [{idx}] {sname} changed");
        }
    }
    true
}

#[test]
fn accepted_rewrites_read_back_under_readelf_with_every_other_section_identical() {
    tool("gcc");
    tool("readelf");
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("lib.c"), "int answer(void) { return 42; }\n").unwrap();
    std::fs::write(
        d.join("main.c"),
        "int answer(void);\nint main(void) { return answer() - 42; }\n",
    )
    .unwrap();
    sh(
        d,
        "set -e
         gcc -shared -fPIC -o libplain.so lib.c
         gcc -shared -fPIC -fcf-protection=none -o libnocet.so lib.c
         gcc -shared -fPIC -Wl,--disable-new-dtags,-rpath,/old/lib -o librpath.so lib.c
         gcc -shared -fPIC -Wl,-rpath,/nix/store/x-cuda-12/lib/stubs:/a -o libstubs.so lib.c
         gcc -shared -fPIC -Wl,-z,noseparate-code -o libnosep.so lib.c
         gcc -fPIE -pie -o pie main.c -L. -lplain
         gcc -no-pie -o nopie main.c -L. -lplain",
    );
    let mut corpus: Vec<(String, Vec<u8>, u8)> = Vec::new();
    for f in
        ["libplain.so", "libnocet.so", "librpath.so", "libstubs.so", "libnosep.so", "pie", "nopie"]
    {
        let bytes = std::fs::read(d.join(f)).unwrap();
        for v in 0..4 {
            corpus.push((format!("{f}-{v}"), bytes.clone(), v));
        }
    }
    let mut dirs: Vec<PathBuf> = vec![root().join("tests/data/fuzz/runpath")];
    if let Some(extra) = std::env::var_os("NCH_FUZZ_CORPUS") {
        dirs.push(extra.into());
    }
    for dir in dirs {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let bytes = std::fs::read(&p).unwrap();
            if let Some((&v, rest)) = bytes.split_first() {
                corpus.push((
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    rest.to_vec(),
                    v,
                ));
            }
        }
    }
    let scratch = d.join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let mut accepted = 0;
    for (name, bytes, v) in &corpus {
        if check(name, bytes, *v, &scratch) {
            accepted += 1;
        }
    }
    eprintln!("{accepted} of {} inputs accepted and checked", corpus.len());
    assert!(accepted >= 28, "the gcc-built files must all be accepted");
}
