//! Every check over made-up facts, one table per concern: no compiler,
//! no file. The end-to-end tests (tests/audit.rs) run the same checks on
//! real builds.

use super::runpath::is_stubs_folder;
use super::*;
use crate::audit::dynamic::HostFacts;
use crate::audit::finding::{CheckId, Finding};
use crate::audit::runtime::Runtime;
use crate::audit::Policy;
use crate::cuda::capabilities::{parse_list, Runs};
use crate::cuda::driver::Driver;
use crate::devicecode::DeviceCode;
use crate::devicecode::{Ptx, Sass};
use crate::elf::dynamic::{DynamicFacts, Kind};
use crate::fatbin::{Arch, Variant};
use std::path::{Path, PathBuf};

#[test]
fn stubs_folders() {
    assert!(is_stubs_folder("/nix/store/x-cuda_cudart-12.8/lib/stubs"));
    assert!(is_stubs_folder("/usr/local/cuda/lib64/stubs/"));
    assert!(!is_stubs_folder("/nix/store/x/lib"));
}

fn policy(caps: Option<&str>, forward_compat: bool) -> Policy {
    Policy {
        requested: caps.map(|c| parse_list(c).unwrap()),
        forward_compat,
        driver_lib: "/run/opengl-driver/lib".into(),
        build_dirs: vec!["/build".into(), "/tmp/nix-build-x".into()],
        store_dir: "/nix/store".into(),
        system_lib_dirs: false,
        scan: crate::devicecode::Scan::Found,
        own_outputs: Vec::new(),
        in_build: false,
        sysroot: None,
        driver: None,
        dlopen: true,
        dlopen_facts: false,
        resolver: Default::default(),
        references: None,
        reading: crate::audit::Reading::Full,
    }
}

fn program(runpath: Option<&str>, rpath: Option<&str>, needed: &[&str]) -> HostFacts {
    let loader = DynamicFacts {
        kind: Kind::Executable,
        is64: true,
        little: true,
        machine: 62,
        dynamic: true,
        runpath: runpath.map(str::to_string),
        rpath: rpath.map(str::to_string),
        needed: needed.iter().map(|n| n.to_string()).collect(),
        ..DynamicFacts::default()
    };
    HostFacts { loader, ..Default::default() }
}

fn ids(findings: &[Finding]) -> Vec<&'static str> {
    let mut v: Vec<&str> = findings.iter().map(|f| f.check.id()).collect();
    v.sort_unstable();
    v
}

#[test]
fn runpath_checks_over_made_up_files() {
    const DRIVER: &str = "/run/opengl-driver/lib";
    let cudart = HostFacts { static_cudart: true, ..program(Some(DRIVER), None, &[]) };
    let cases: Vec<(&str, HostFacts, Vec<&str>)> = vec![
        ("clean", program(Some(DRIVER), None, &["libcuda.so.1"]), vec![]),
        ("no libcuda needed", program(None, None, &["libc.so.6"]), vec![]),
        (
            "driver missing",
            program(Some("/nix/store/x/lib"), None, &["libcuda.so.1"]),
            vec!["missing-driver-runpath"],
        ),
        (
            "stubs",
            program(Some("/x/lib/stubs:/run/opengl-driver/lib/"), None, &["libcuda.so"]),
            vec!["libcuda-stub-in-runpath"],
        ),
        ("build folder", program(Some("/build/src/lib"), None, &[]), vec!["tmpdir-in-runpath"]),
        ("TMPDIR", program(Some("/tmp/nix-build-x/o"), None, &[]), vec!["tmpdir-in-runpath"]),
        ("prefix only", program(Some("/buildx/lib"), None, &[]), vec![]),
        ("empty entry", program(Some("/a::/b"), None, &[]), vec!["empty-runpath-entry"]),
        ("rpath", program(None, Some("/a"), &[]), vec!["rpath-instead-of-runpath"]),
        ("both tags", program(Some("/a"), Some("/a"), &[]), vec![]),
        ("static cudart", cudart, vec!["cudart-static"]),
        (
            "NEEDED NVML, no driver",
            program(None, None, &["libnvidia-ml.so.1"]),
            vec!["missing-driver-runpath"],
        ),
        (
            "dlopens NVENC, no driver",
            HostFacts {
                driver_dlopen: vec!["libnvidia-encode.so.1".into()],
                ..program(Some("$ORIGIN"), None, &[])
            },
            vec!["missing-driver-runpath"],
        ),
        (
            "dlopens NVENC, driver on RUNPATH",
            HostFacts {
                driver_dlopen: vec!["libnvidia-encode.so.1".into()],
                ..program(Some(DRIVER), None, &[])
            },
            vec![],
        ),
        (
            "is libcudart, no driver",
            {
                let mut f = program(None, None, &[]);
                f.loader.soname = Some("libcudart.so.12".into());
                f
            },
            vec!["missing-driver-runpath"],
        ),
        (
            "static cudart, no driver",
            HostFacts { static_cudart: true, ..program(None, None, &[]) },
            vec!["cudart-static", "missing-driver-runpath"],
        ),
        (
            "not dynamic",
            {
                let mut f = program(Some("/a::"), None, &[]);
                f.loader.dynamic = false;
                f
            },
            vec![],
        ),
    ];
    let p = policy(None, true);
    for (name, facts, want) in cases {
        let mut out = Vec::new();
        runpath(Path::new("/x"), &facts, &p, &mut out);
        assert_eq!(ids(&out), want, "{name}");
    }
}

#[test]
fn needed_checks_over_made_up_files() {
    let p = policy(None, true);
    let cases: Vec<(&str, HostFacts, Vec<&str>)> = vec![
        (
            "missing",
            program(Some("/nonexistent-issue14"), None, &["libnowhere-issue14.so"]),
            vec!["unresolved-needed"],
        ),
        (
            "glibc and driver are provided",
            program(None, None, &["libc.so.6", "libcuda.so.1"]),
            vec![],
        ),
        (
            "relocatable objects need nothing yet",
            {
                let mut f = program(None, None, &["libnowhere.so"]);
                f.loader.kind = Kind::Relocatable;
                f
            },
            vec![],
        ),
    ];
    for (name, facts, want) in cases {
        let mut out = Vec::new();
        needed(Path::new("/nix/store/x-issue14/lib/a.so"), &facts.loader, &p, &mut out);
        assert_eq!(ids(&out), want, "{name}");
        if let Some(f) = out.first() {
            assert_eq!(
                f.subject,
                crate::audit::finding::Subject::Library("libnowhere-issue14.so".into())
            );
        }
    }
}

#[test]
fn needed_checks_through_mounts() {
    use crate::store::mounts::{Mount, Mounts};
    // Store path aaa-a fetched (its lib folder holds liba.so.1), bbb-b not.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("lib")).unwrap();
    let mut elf = b"\x7fELF\x02\x01\x01".to_vec();
    elf.resize(18, 0);
    elf.extend_from_slice(&62u16.to_le_bytes()); // x86-64, as program() says
    std::fs::write(dir.path().join("lib/liba.so.1"), elf).unwrap();
    std::fs::write(dir.path().join("lib/libt.so"), b"INPUT(-lt)").unwrap();
    let mount =
        Mount { logical: "/s/aaa-a".into(), local: dir.path().to_path_buf(), in_store: true };
    let mut p = policy(None, true);
    p.store_dir = "/s".into();
    p.resolver = std::sync::Arc::new(crate::audit::linkage::Resolver::with_mounts(
        Mounts::of_cache(vec![mount], "/s".into()),
    ));
    let file = Path::new("/s/aaa-a/lib/a.so");
    let cases: Vec<(&str, HostFacts, Vec<&str>)> = vec![
        (
            "in an unfetched path",
            program(Some("/s/bbb-b/lib"), None, &["libb.so.1"]),
            vec!["needed-not-fetched"],
        ),
        (
            "two in one finding",
            program(Some("/s/bbb-b/lib:/s/ccc-c/lib"), None, &["libb.so.1", "libc2.so"]),
            vec!["needed-not-fetched"],
        ),
        (
            "missing in a fetched path",
            program(Some("$ORIGIN"), None, &["libz.so.9"]),
            vec!["unresolved-needed"],
        ),
        (
            "not ELF in a fetched path",
            program(Some("$ORIGIN"), None, &["libt.so"]),
            vec!["unresolved-needed"],
        ),
        (
            "found before an unfetched path",
            program(Some("$ORIGIN:/s/bbb-b/lib"), None, &["liba.so.1"]),
            vec![],
        ),
    ];
    for (name, facts, want) in cases {
        let mut out = Vec::new();
        needed(file, &facts.loader, &p, &mut out);
        assert_eq!(ids(&out), want, "{name}");
    }
}

fn arch(sm: u32, variant: Variant) -> Arch {
    Arch { sm, variant }
}

/// Made-up device code: SASS and PTX states per architecture.
fn code(sass: &[(Arch, Sass)], ptx: &[(Arch, Ptx)]) -> DeviceCode {
    let mut c = DeviceCode::default();
    for (a, s) in sass {
        c.cubins += 1;
        c.note_sass(*a, *s);
    }
    for (a, p) in ptx {
        c.ptx_files += 1;
        c.note_ptx(*a, *p);
    }
    c
}

#[test]
fn capability_checks_over_made_up_code() {
    use Variant::{Arch as A, Base as B, Family as F};
    let k = Sass::Kernels;
    let e = Ptx::Entries;
    #[rustfmt::skip]
    let cases: Vec<(&str, DeviceCode, &str, bool, Vec<&str>)> = vec![
        ("exact SASS", code(&[(arch(86, B), k)], &[]), "8.6", false, vec![]),
        ("SASS runs on a higher minor", code(&[(arch(80, B), k)], &[]), "8.6", false, vec!["unrequested-arch"]),
        ("another major", code(&[(arch(80, B), k)], &[]), "9.0", false, vec!["no-code-for-capability", "unrequested-arch"]),
        ("PTX JIT", code(&[], &[(arch(80, B), e)]), "8.0;9.0", false, vec!["ptx-only-capability", "ptx-only-capability"]),
        ("forward compat met", code(&[(arch(90, B), k)], &[(arch(90, B), e)]), "9.0", true, vec![]),
        ("forward compat by lower PTX", code(&[(arch(86, B), k), (arch(90, B), k)], &[(arch(86, B), e)]), "8.6;9.0", true, vec![]),
        ("forward compat missing", code(&[(arch(90, B), k)], &[]), "9.0", true, vec!["missing-forward-compat-ptx"]),
        ("+PTX missing", code(&[(arch(86, B), k)], &[]), "8.6+PTX", false, vec!["missing-forward-compat-ptx"]),
        ("a only on its own", code(&[(arch(90, A), k)], &[]), "9.0a", false, vec![]),
        ("a not on the next", code(&[(arch(90, A), k)], &[]), "10.0", false, vec!["no-code-for-capability", "unrequested-arch"]),
        ("f serves its base", code(&[(arch(100, F), k)], &[(arch(100, F), e)]), "10.0", false, vec![]),
        ("f serves its family", code(&[(arch(100, F), k)], &[]), "10.3", false, vec!["unrequested-arch"]),
        ("f not another family", code(&[(arch(100, F), k)], &[]), "12.0", false, vec!["no-code-for-capability", "unrequested-arch"]),
        ("link stubs are no code", code(&[(arch(75, B), Sass::LinkStub)], &[]), "7.5", false, vec![]),
        ("entry-less PTX is no code", code(&[(arch(80, B), Sass::LinkStub)], &[(arch(80, B), Ptx::NoEntries)]), "8.0;8.6;9.0", true, vec![]),
        ("stubs beside kernels", code(&[(arch(75, B), Sass::LinkStub), (arch(86, B), k)], &[]), "7.5", false, vec!["no-code-for-capability", "unrequested-arch"]),
        ("unknown counts as code", code(&[(arch(86, B), Sass::Unknown)], &[]), "8.6", false, vec![]),
    ];
    for (name, dev, caps, fwd, want) in cases {
        let mut out = Vec::new();
        capabilities(Path::new("/x"), &dev, None, &policy(Some(caps), fwd), &mut out);
        assert_eq!(ids(&out), want, "{name}");
    }
    // No list, no capability checks.
    let mut out = Vec::new();
    capabilities(
        Path::new("/x"),
        &code(&[(arch(80, B), k)], &[]),
        None,
        &policy(None, true),
        &mut out,
    );
    assert!(out.is_empty());
}

#[test]
fn driver_checks_over_made_up_files() {
    use crate::cuda::capabilities::CudaVersion;
    use crate::devicecode::model::PtxIsa;
    use Variant::Base as B;
    let isa = |major, minor| PtxIsa { major, minor };
    let with_isa = |mut c: DeviceCode, a: Arch, i: PtxIsa| {
        c.note_ptx_isa(a, i);
        c
    };
    let ptx90 = |i| with_isa(code(&[], &[(arch(90, B), Ptx::Entries)]), arch(90, B), i);
    let both90 = with_isa(
        code(&[(arch(90, B), Sass::Kernels)], &[(arch(90, B), Ptx::Entries)]),
        arch(90, B),
        isa(9, 5),
    );
    let sass90 = code(&[(arch(90, B), Sass::Kernels)], &[]);
    let cuda = |v: &str| CudaVersion::parse(v).unwrap();
    let shared = |major| Some(Runtime::Shared { major, own: false });
    let stat =
        |v: Option<&str>| Some(Runtime::Static { version: v.map(cuda), from: None, floor: None });
    let floored =
        |calls_driver, f: &str| Some(Runtime::Unknown { calls_driver, floor: Some(cuda(f)) });
    let release =
        |cuda_major| Some(Runtime::LibraryRelease { library: "libcufft.so.11", cuda_major });
    let d580 = Driver::from_version("580.95.05").unwrap();
    let d550 = Driver::from_version("550.54.15").unwrap();
    let d525_early = Driver::from_version("525.12").unwrap();
    let c135 = Driver::from_cuda(cuda("13.5"));
    type Case = (
        &'static str,
        Driver,
        Option<Runtime>,
        DeviceCode,
        Option<&'static str>,
        Vec<&'static str>,
    );
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        ("13 runtime on 580", d580, shared(13), sass90.clone(), Some("9.0"), vec![]),
        ("13 runtime on 550", d550, shared(13), sass90.clone(), Some("9.0"), vec!["driver-too-old-for-runtime"]),
        ("12 runtime on 550", d550, shared(12), sass90.clone(), Some("9.0"), vec![]),
        ("12 runtime below the floor", d525_early, shared(12), sass90.clone(), None, vec!["driver-too-old-for-runtime"]),
        ("static 13.5 on 580", d580, stat(Some("13.5")), sass90.clone(), None, vec![]),
        ("static 13.5 on 550", d550, stat(Some("13.5")), sass90.clone(), None, vec!["driver-too-old-for-runtime"]),
        ("static, version unknown", d580, stat(None), sass90.clone(), None, vec!["driver-verdict-unknown"]),
        ("CUDA 12 library on 550", d550, release(12), sass90.clone(), Some("9.0"), vec![]),
        ("CUDA 13 library on 550", d550, release(13), sass90.clone(), Some("9.0"), vec!["driver-too-old-for-runtime"]),
        ("calls the driver, no floor", d580, Some(Runtime::Unknown { calls_driver: true, floor: None }), sass90.clone(), None, vec!["driver-verdict-unknown"]),
        ("ISA floor of the driver's major", d550, floored(true, "12.8"), sass90.clone(), None, vec!["driver-verdict-unknown"]),
        ("ISA floor past the driver's major", d550, floored(false, "13.5"), sass90.clone(), None, vec!["driver-too-old-for-runtime"]),
        ("PTX 9.5 only on 580", d580, None, ptx90(isa(9, 5)), Some("9.0"), vec!["ptx-too-new-for-driver"]),
        ("PTX 9.0 only on 580", d580, None, ptx90(isa(9, 0)), Some("9.0"), vec![]),
        ("PTX 9.5 on 13.5", c135, None, ptx90(isa(9, 5)), Some("9.0"), vec![]),
        ("PTX 9.5 beside SASS", d580, None, both90.clone(), Some("9.0"), vec![]),
        ("PTX 9.5 JIT for a newer GPU", d580, None, both90, Some("10.0"), vec!["ptx-too-new-for-driver"]),
        ("no list: the file's own targets", d580, None, ptx90(isa(9, 5)), None, vec!["ptx-too-new-for-driver"]),
        ("ISA unknown to the table", d580, None, ptx90(isa(42, 0)), Some("9.0"), vec!["driver-verdict-unknown"]),
        ("no code for the capability", d580, None, sass90, Some("10.0"), vec![]),
    ];
    for (name, drv, rt, dev, caps, want) in cases {
        let mut p = policy(caps, false);
        p.driver = Some(drv);
        let mut out = Vec::new();
        driver(Path::new("/x"), Some(&dev), rt.as_ref(), &p, &mut out);
        assert_eq!(ids(&out), want, "{name}");
        for f in &out {
            if f.check != CheckId::DriverVerdictUnknown {
                assert!(f.message.contains("cuda_compat"), "{name}: {}", f.message);
            }
        }
    }
    // The one verdict function agrees: runs only where proven.
    let v = |drv: &Driver, rt: Option<Runtime>| verdict(drv, None, Runs::Native, None, rt.as_ref());
    assert!(v(&d580, shared(13)).runs);
    assert!(v(&d550, release(12)).runs);
    let unknown = v(&d580, floored(true, "11.8"));
    assert!(!unknown.runs);
    assert_eq!(unknown.reason.map(|r| r.id()), Some("unknown"));
    assert!(unknown.why.is_some_and(|w| w.contains("calls the driver")));
    let floor = v(&d550, floored(false, "13.5"));
    assert_eq!((floor.runs, floor.needs_cuda.as_deref()), (false, Some("13.0")));
    assert_eq!(floor.reason.map(|r| r.id()), Some("runtime-too-new"));
    // No driver, no driver checks.
    let mut out = Vec::new();
    driver(Path::new("/x"), None, shared(13).as_ref(), &policy(None, false), &mut out);
    assert!(out.is_empty());
}

#[test]
fn unread_containers_are_reported() {
    let cases = [(None, vec![]), (Some(0x885560u64), vec!["device-code-not-scanned"])];
    for (unscanned, want) in cases {
        let dev = DeviceCode { unscanned, ..DeviceCode::default() };
        let mut out = Vec::new();
        scan_coverage(Path::new("/x"), &dev, &mut out);
        assert_eq!(ids(&out), want);
    }
}

#[test]
fn mixed_cudart_over_made_up_trees() {
    let p = |s: &str| PathBuf::from(s);
    type Tree = Vec<(PathBuf, Option<u32>)>;
    let cases: Vec<(&str, Tree, usize)> = vec![
        ("one major", vec![(p("/a"), Some(12)), (p("/b"), Some(12)), (p("/c"), None)], 0),
        ("two majors", vec![(p("/a"), Some(12)), (p("/b"), Some(13)), (p("/c"), None)], 2),
        ("none", vec![(p("/a"), None)], 0),
    ];
    for (name, files, n) in cases {
        let mut out = Vec::new();
        mixed_cudart(&files, &mut out);
        assert_eq!(out.len(), n, "{name}");
        assert!(out.iter().all(|f| f.check == CheckId::MixedCudartVersions), "{name}");
    }
}
