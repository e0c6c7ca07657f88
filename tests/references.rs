//! Reference finding against real Nix (docs/references.md): a derivation
//! built by `nix-build` (Nix 2.26 from `make tools`, a throwaway store) whose
//! library is compiled by the real nvcc 13.5 with `-lineinfo` from a `.cu`
//! in the store that includes a header of a package named like Nixpkgs'
//! CUDA compiler. Nix's own scanner (`nix-store -q --references`) is the
//! oracle for which references exist; the audit must find the same set and
//! name file and section for each. Missing tools fail, never skip.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// A Nix command from `.tools/nix` with a throwaway store under `dir`.
fn nix(dir: &Path, program: &str, args: &[&str]) -> String {
    String::from_utf8(common::nix(dir, program, args)).unwrap()
}

/// What the derivations hold: `cuda_nvcc-13.5` (the real nvcc behind a
/// script, and a header with a device function), a `.cu` file in the store
/// (`builtins.toFile`) including that header, and `libk` built from it with
/// `-lineinfo` for sm_80 SASS and compute_90 PTX (compressed by nvcc 13.5).
struct Built {
    dir: tempfile::TempDir,
    store: PathBuf,
    lib: String,
    nvcc: String,
    /// `app`: a script naming the library, and a link to nvcc.
    app: String,
    /// `misc`: store paths in files that are no objects (a `.pc` file, a
    /// script), a link, and in names only (a folder and a file named after
    /// `named`'s store path, which nothing else names).
    misc: String,
    named: String,
}

fn build() -> Built {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for sub in ["etc", "home"] {
        fs::create_dir_all(d.join(sub)).unwrap();
    }
    let real_nvcc = common::tool("nvcc");
    fs::write(
        d.join("nvcc.sh"),
        format!(
            "PATH=/usr/bin:/bin; mkdir -p $out/bin $out/include\n\
             printf '#!/bin/sh\\nexec {} \"$@\"\\n' > $out/bin/nvcc; chmod +x $out/bin/nvcc\n\
             echo '__device__ inline float twice(float x) {{ return 2.0f * x; }}' > $out/include/twice.cuh\n",
            real_nvcc.display()
        ),
    )
    .unwrap();
    fs::write(
        d.join("lib.sh"),
        "PATH=/usr/bin:/bin; mkdir -p $out/lib\n\
         $nvcc/bin/nvcc -shared -Xcompiler -fPIC -lineinfo -I$nvcc/include \
         -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=compute_90 \
         -o $out/lib/libk.so $src\n",
    )
    .unwrap();
    fs::write(
        d.join("app.sh"),
        "PATH=/usr/bin:/bin; mkdir -p $out/bin\n\
         printf '#!/bin/sh\\nLD_PRELOAD=%s/lib/libk.so exec true\\n' $lib > $out/bin/run\n\
         ln -s $nvcc/bin/nvcc $out/bin/nvcc\n",
    )
    .unwrap();
    fs::write(
        d.join("misc.sh"),
        "PATH=/usr/bin:/bin; mkdir -p $out/lib/pkgconfig $out/bin $out/share/by-hash\n\
         printf 'prefix=%s\\nincludedir=%s/include\\n' $out $nvcc > $out/lib/pkgconfig/k.pc\n\
         printf '#!/bin/sh\\nexec %s/bin/run\\n' $app > $out/bin/go\n\
         ln -s $lib/lib/libk.so $out/lib/libk.so\n\
         mkdir $out/share/by-hash/$(basename $named)\n\
         touch $out/share/by-hash/$(basename $named)/x $out/share/$(basename $named).conf\n",
    )
    .unwrap();
    fs::write(d.join("named.sh"), "PATH=/usr/bin:/bin; echo named > $out\n").unwrap();
    let cu = "#include \\\"twice.cuh\\\"\\n__global__ void k(float *x) { x[threadIdx.x] = twice(x[threadIdx.x]); }\\nextern \\\"C\\\" void run(float *x) { k<<<1, 32>>>(x); }\\n";
    let expr = format!(
        r#"let mk = name: script: attrs: derivation ({{
            inherit name; system = builtins.currentSystem; builder = "/bin/sh";
            args = [ "-e" "{d}/${{script}}" ];
          }} // attrs);
          nvcc = mk "cuda_nvcc-13.5" "nvcc.sh" {{}};
          lib = mk "libk" "lib.sh" {{ inherit nvcc; src = builtins.toFile "k.cu" "{cu}"; }};
          app = mk "app" "app.sh" {{ inherit lib nvcc; }};
          named = mk "named-only" "named.sh" {{}};
      in [ lib nvcc app (mk "misc" "misc.sh" {{ inherit lib nvcc app named; }}) named ]"#,
        d = d.display()
    );
    let options = ["sandbox", "false", "substituters", "", "build-users-group", ""];
    let mut args = vec!["--no-out-link"];
    for pair in options.chunks(2) {
        args.extend(["--option", pair[0], pair[1]]);
    }
    args.extend(["-E", &expr]);
    let built = nix(d, "nix-build", &args);
    let mut lines = built.lines().map(str::to_string);
    let mut next = || lines.next().unwrap();
    let (lib, nvcc, app, misc, named) = (next(), next(), next(), next(), next());
    Built { store: d.join("store"), dir, lib, nvcc, app, misc, named }
}

/// The audit's JSON (exit status, document) with `NIX_STORE` the throwaway store.
fn audit(store: &Path, args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let out = common::outside_build(&mut Command::new(BIN))
        .args(args)
        .args(["--format", "json"])
        .env("NIX_STORE", store)
        .env_remove("cudaCapabilities")
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}", common::text(&out)));
    (out.status.code(), doc)
}

/// Every reference Nix records for the library, the audit finds (in an
/// ELF section it names, or at a byte offset of another file); every
/// reference the audit reports as visible to Nix, Nix records. The nvcc
/// package is found in the cubin's line table and, invisible to Nix, inside
/// the compressed PTX; the `.cu` file in every entry's header.
#[test]
fn the_audit_finds_what_nix_records() {
    let b = build();
    let d = b.dir.path();
    let recorded: BTreeSet<String> =
        nix(d, "nix-store", &["-q", "--references", &b.lib]).lines().map(str::to_string).collect();
    assert!(recorded.contains(&b.nvcc), "Nix did not record nvcc: {recorded:?}");
    assert!(recorded.iter().any(|p| p.ends_with("-k.cu")), "{recorded:?}");

    let (status, doc) = audit(&b.store, &[&b.lib]);
    let libk = format!("{}/lib/libk.so", b.lib);
    let files = doc["files"].as_array().unwrap();
    let facts = files.iter().find(|f| f["path"] == libk.as_str()).unwrap();
    let refs = facts["references"].as_array().unwrap();
    // The library is the output's one file.
    let visible: BTreeSet<String> = refs
        .iter()
        .filter(|r| r["visible"] == true)
        .map(|r| r["target"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(visible, recorded, "the audit's visible references are not Nix's");
    for r in refs {
        let section = r["section"].as_str().unwrap_or_default();
        assert!(section.starts_with('.'), "a reference without its section: {r}");
    }
    // The source file in an entry header, the nvcc header in the cubin's
    // line table (a payload), and once more in the compressed PTX, unseen.
    let place = |target: &str, part: &str, visible: bool| {
        refs.iter().any(|r| {
            r["target"].as_str().unwrap().starts_with(target)
                && r["section"] == ".nv_fatbin"
                && r["entry"]["part"] == part
                && r["visible"] == visible
        })
    };
    let cu = recorded.iter().find(|p| p.ends_with("-k.cu")).unwrap();
    assert!(place(cu, "header", true), "{refs:#?}");
    assert!(place(&b.nvcc, "payload", true), "{refs:#?}");
    assert!(
        refs.iter().any(|r| r["visible"] == false
            && r["entry"]["kind"] == "ptx"
            && r["entry"]["codec"] != "none"),
        "no reference found inside the compressed PTX: {refs:#?}"
    );

    // nvcc is build-only by name: an error naming the section and entry.
    assert_eq!(status, Some(1));
    let finding = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "build-only-reference" && f["path"] == libk.as_str())
        .unwrap_or_else(|| panic!("no build-only-reference: {doc:#}"));
    assert_eq!(finding["details"]["reference"], "cuda_nvcc-13.5");
    let message = finding["message"].as_str().unwrap();
    assert!(message.contains(&b.nvcc) && message.contains("section .nv_fatbin"), "{message}");

    // The ratchet: a baseline of today's findings passes; --no-references
    // finds nothing.
    let base = d.join("baseline.json");
    let out = common::outside_build(&mut Command::new(BIN))
        .args(["--write-baseline", base.to_str().unwrap(), &b.lib])
        .env("NIX_STORE", &b.store)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out));
    let (s, doc) = audit(&b.store, &["--baseline", base.to_str().unwrap(), &b.lib]);
    assert_eq!(s, Some(0), "{doc:#}");
    let (_, doc) = audit(&b.store, &["--no-references", &b.lib]);
    assert!(doc["files"].as_array().unwrap().iter().all(|f| f.get("references").is_none()));
}

/// Nix records references from every file of an output, not only object
/// files, and from link targets and names (its NAR holds them): the audit's
/// visible references over the whole output (object files' `references`
/// and the report's top-level `references` for every other entry) are
/// the set Nix records, each named by its place.
#[test]
fn every_file_link_and_name_is_scanned_as_nix_does() {
    let b = build();
    let recorded: BTreeSet<String> =
        nix(b.dir.path(), "nix-store", &["-q", "--references", &b.misc])
            .lines()
            .map(str::to_string)
            .collect();
    for p in [&b.nvcc, &b.app, &b.lib, &b.named, &b.misc] {
        assert!(recorded.contains(p), "Nix did not record {p}: {recorded:?}");
    }
    let (_, doc) = audit(&b.store, &[&b.misc]);
    let entries = doc["references"].as_array().unwrap_or_else(|| panic!("{doc:#}"));
    let mut found: Vec<(String, serde_json::Value)> = Vec::new();
    for e in entries {
        for r in e["references"].as_array().unwrap() {
            found.push((e["path"].as_str().unwrap().to_string(), r.clone()));
        }
    }
    let visible: BTreeSet<String> = found
        .iter()
        .filter(|(_, r)| r["visible"] == true)
        .map(|(_, r)| r["target"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(visible, recorded, "the audit's visible references are not Nix's: {found:#?}");
    let at = |file: &str, target: &str, section: Option<&str>| {
        found.iter().any(|(p, r)| {
            p == &format!("{}/{file}", b.misc)
                && r["target"] == target
                && r["section"].as_str() == section
        })
    };
    let base = b.named.rsplit('/').next().unwrap();
    assert!(at("lib/pkgconfig/k.pc", &b.nvcc, None), "{found:#?}");
    assert!(at("lib/pkgconfig/k.pc", &b.misc, None), "{found:#?}");
    assert!(at("bin/go", &b.app, None), "{found:#?}");
    assert!(at("lib/libk.so", &b.lib, Some("symlink")), "{found:#?}");
    assert!(at(&format!("share/by-hash/{base}"), &b.named, Some("name")), "{found:#?}");
    assert!(at(&format!("share/{base}.conf"), &b.named, Some("name")), "{found:#?}");
    // The name's offset is the hash's in the name.
    assert!(found.iter().all(|(_, r)| r["section"] != "name" || r["offset"] == 0), "{found:#?}");
}

/// `--forbid-reference` makes any path build-only; a file's own store path
/// never is.
#[test]
fn forbidden_references_are_errors() {
    let b = build();
    let cu = nix(b.dir.path(), "nix-store", &["-q", "--references", &b.lib])
        .lines()
        .find(|p| p.ends_with("-k.cu"))
        .unwrap()
        .to_string();
    let (status, doc) = audit(&b.store, &["--forbid-reference", &cu, &b.lib]);
    assert_eq!(status, Some(1));
    let subjects: BTreeSet<String> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "build-only-reference")
        .map(|f| f["details"]["reference"].as_str().unwrap().to_string())
        .collect();
    assert!(subjects.contains("k.cu") && subjects.contains("cuda_nvcc-13.5"), "{subjects:?}");
    let (status, _) = audit(&b.store, &["--forbid-reference", &b.lib, &b.lib]);
    assert_eq!(status, Some(1), "nvcc still counts");
}

/// `nix why-depends --all`'s tree as the set of its edges (parent, child),
/// read from the indentation of its lines.
fn why_depends_edges(text: &str) -> BTreeSet<(String, String)> {
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut edges = BTreeSet::new();
    for line in text.lines() {
        // Nix colours the names even when not on a terminal.
        let mut plain = String::new();
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                chars.by_ref().find(|&c| c == 'm');
            } else {
                plain.push(c);
            }
        }
        let line = plain.as_str();
        let Some(at) = line.find('/') else { continue };
        let path: String = line[at..].split_whitespace().next().unwrap().to_string();
        let depth = line[..at].chars().count();
        while stack.last().is_some_and(|(d, _)| *d >= depth) {
            stack.pop();
        }
        if let Some((_, parent)) = stack.last() {
            edges.insert((parent.clone(), path.clone()));
        }
        stack.push((depth, path));
    }
    edges
}

/// A signed `file://` cache made by `nix copy` of `app`'s closure, with nvcc
/// leaked into it twice (through the library's device code, and a link):
/// `--why` names every chain from the cache alone, each hop with the file
/// and section holding it, and its hops are the edges of `nix why-depends
/// --all` on the realised paths. The realised store is moved away first.
#[test]
fn the_why_chain_from_a_cache_is_nix_why_depends() {
    let b = build();
    let d = b.dir.path();
    let (sk, pk) = (d.join("k.sk"), d.join("k.pk"));
    nix(
        d,
        "nix-store",
        &["--generate-binary-cache-key", "test-1", sk.to_str().unwrap(), pk.to_str().unwrap()],
    );
    let cache = d.join("cache");
    let to = format!("file://{}?compression=zstd&secret-key={}", cache.display(), sk.display());
    nix(d, "nix", &["--extra-experimental-features", "nix-command", "copy", "--to", &to, &b.app]);
    let tree = nix(
        d,
        "nix",
        &["--extra-experimental-features", "nix-command", "why-depends", "--all", &b.app, &b.nvcc],
    );
    let expected = why_depends_edges(&tree);
    let closure: BTreeSet<String> =
        nix(d, "nix-store", &["-qR", &b.app]).lines().map(str::to_string).collect();
    assert!(expected.len() >= 3, "{tree}");
    let hidden = d.join("store-away");
    fs::rename(&b.store, &hidden).unwrap();
    let key = fs::read_to_string(&pk).unwrap();
    let url = format!("file://{}", cache.display());
    let (status, doc) = audit(
        &b.store,
        &[
            "--substituter",
            &url,
            "--trusted-public-key",
            key.trim(),
            "--closure",
            "--why",
            "build-only",
            &b.app,
        ],
    );
    fs::rename(&hidden, &b.store).unwrap();
    assert_eq!(status, Some(1), "nvcc is a build-only error: {doc:#}");
    let chains = doc["chains"].as_array().unwrap();
    let mut edges = BTreeSet::new();
    for c in chains {
        assert_eq!(c["target"], b.nvcc.as_str(), "{c:#}");
        assert_eq!(c["build_only"], "the CUDA compiler");
        for h in c["hops"].as_array().unwrap() {
            edges.insert((
                h["from"].as_str().unwrap().to_string(),
                h["to"].as_str().unwrap().to_string(),
            ));
            let file = h["file"].as_str().unwrap_or_else(|| panic!("a hop without its file: {h}"));
            assert!(file.starts_with(h["from"].as_str().unwrap()), "{h}");
            assert!(h["place"].as_str().is_some(), "{h}");
        }
    }
    assert_eq!(chains.len(), 2, "{chains:#?}");
    assert_eq!(edges, expected, "nix why-depends --all:\n{tree}");
    // The hop into nvcc from the library names the device code.
    let into_nvcc = chains
        .iter()
        .flat_map(|c| c["hops"].as_array().unwrap())
        .find(|h| h["from"] == b.lib.as_str() && h["to"] == b.nvcc.as_str())
        .unwrap();
    assert!(into_nvcc["place"].as_str().unwrap().contains(".nv_fatbin"), "{into_nvcc}");
    // The sizes are the narinfo files' NarSize, and the shares add up.
    let total = doc["total_nar_size"].as_u64().unwrap();
    let paths = doc["paths"].as_array().unwrap();
    let listed: BTreeSet<String> =
        paths.iter().map(|p| p["path"].as_str().unwrap().to_string()).collect();
    assert_eq!(listed, closure, "the closure is nix-store -qR's");
    let sum: u64 = paths.iter().map(|p| p["nar_size"].as_u64().unwrap()).sum();
    assert_eq!(sum, total);
    let shares: f64 = paths.iter().map(|p| p["share"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-9);
}
