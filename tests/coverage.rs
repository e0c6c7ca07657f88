//! Issue 31: `cuda-elf-inspect --coverage` against real binary caches.
//! Store paths with different device code (nvcc 13.5 fixtures, built at
//! test time) are built by Nix in a throwaway store and copied by `nix
//! copy --to file://...` into caches of different priorities, keys and
//! compressions; some are served over HTTP on 127.0.0.1 by a test server
//! that adds latency, 5xx answers, truncated and stalled bodies,
//! disconnects, or vanishes. Presence is checked against what Nix itself
//! reads from the same caches (`nix path-info --store`), the GPU answer
//! against a direct audit of the realised store path and cuobjdump's
//! listing of its files.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::httpcache::{Fault, HttpCache};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_cuda-elf-inspect");

/// The throwaway store and what was built in it.
struct World {
    dir: tempfile::TempDir,
    store: PathBuf,
    /// attr -> store path: sass (sm_80), ptx (compute_80), multi (sm_75 80
    /// 86 90 + compute_86, refers to dep), dep, plain (no device code).
    paths: BTreeMap<&'static str, String>,
    keys: BTreeMap<&'static str, (PathBuf, String)>,
}

fn nix(d: &Path, program: &str, args: &[&str]) -> Vec<u8> {
    common::nix(d, program, args)
}

fn build_world() -> World {
    let fixtures = common::fixtures::build(&["sass-only", "ptx-only", "multi-arch"]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for sub in ["etc", "home"] {
        fs::create_dir_all(d.join(sub)).unwrap();
    }
    fs::write(
        d.join("copy.sh"),
        "PATH=/usr/bin:/bin; mkdir -p $out/bin; cp $src $out/bin/; if [ -n \"$dep\" ]; then mkdir -p $out/nix-support; echo $dep > $out/nix-support/dep; fi\n",
    )
    .unwrap();
    fs::write(
        d.join("text.sh"),
        "PATH=/usr/bin:/bin; mkdir -p $out/share; echo $name > $out/share/$name\n",
    )
    .unwrap();
    let expr = format!(
        r#"let mk = name: script: attrs: derivation ({{
            inherit name; system = builtins.currentSystem; builder = "/bin/sh";
            args = [ "-e" "{d}/${{script}}.sh" ];
          }} // attrs);
          dep = mk "dep" "text" {{}};
      in [ (mk "sass" "copy" {{ src = "{sass}"; }}) (mk "ptx" "copy" {{ src = "{ptx}"; }})
           (mk "multi" "copy" {{ src = "{multi}"; inherit dep; }}) dep (mk "plain" "text" {{}}) ]"#,
        d = d.display(),
        sass = fixtures[0].join("sass_only").display(),
        ptx = fixtures[1].join("ptx_only").display(),
        multi = fixtures[2].join("multi_arch").display(),
    );
    let mut args = vec!["--no-out-link"];
    for pair in ["sandbox", "false", "substituters", "", "build-users-group", ""].chunks(2) {
        args.extend(["--option", pair[0], pair[1]]);
    }
    args.extend(["-E", expr.as_str()]);
    let built = String::from_utf8(nix(d, "nix-build", &args)).unwrap();
    let built: Vec<String> = built.lines().map(str::to_string).collect();
    let names = ["sass", "ptx", "multi", "dep", "plain"];
    assert_eq!(built.len(), names.len(), "{built:?}");
    let paths = names.iter().copied().zip(built).collect();
    let mut keys = BTreeMap::new();
    for name in ["key-a", "key-b"] {
        let (sk, pk) = (d.join(format!("{name}.sk")), d.join(format!("{name}.pk")));
        nix(
            d,
            "nix-store",
            &["--generate-binary-cache-key", name, sk.to_str().unwrap(), pk.to_str().unwrap()],
        );
        keys.insert(name, (sk, fs::read_to_string(&pk).unwrap().trim().to_string()));
    }
    World { store: d.join("store"), dir, paths, keys }
}

impl World {
    fn path(&self, attr: &str) -> &str {
        &self.paths[attr]
    }

    /// `nix copy` of `attrs` (with their closures) into a new cache folder;
    /// `params` are the store URL's (`priority=30&compression=xz`).
    fn cache(&self, name: &str, key: &str, params: &str, attrs: &[&str]) -> PathBuf {
        let cache = self.dir.path().join(name);
        let to = format!(
            "file://{}?{params}&secret-key={}",
            cache.display(),
            self.keys[key].0.display()
        );
        let mut args = vec!["--extra-experimental-features", "nix-command", "copy", "--to", &to];
        args.extend(attrs.iter().map(|a| self.path(a)));
        nix(self.dir.path(), "nix", &args);
        // Nix writes no Priority; a cache's operator does (cachix: 41).
        if let Some(p) = params.split('&').find_map(|p| p.strip_prefix("priority=")) {
            let info = cache.join("nix-cache-info");
            let text = fs::read_to_string(&info).unwrap();
            fs::write(&info, format!("{text}Priority: {p}\n")).unwrap();
        }
        cache
    }

    fn public(&self, key: &str) -> &str {
        &self.keys[key].1
    }

    /// nix-eval-jobs lines for `attrs`, and a broken line at line 2.
    fn eval_jobs(&self, attrs: &[&str], extra: &[(&str, &str)]) -> PathBuf {
        let mut lines = Vec::new();
        for (i, attr) in attrs.iter().enumerate() {
            if i == 1 {
                lines.push(
                    r#"{"attr":"broken","error":"error: attribute 'cudaPackages' missing"}"#
                        .to_string(),
                );
            }
            lines.push(
                serde_json::json!({"attr": attr, "attrPath": [attr], "drvPath": "/x.drv", "outputs": {"out": self.path(attr)}, "system": "x86_64-linux", "name": attr})
                    .to_string(),
            );
        }
        for (attr, path) in extra {
            lines.push(serde_json::json!({"attr": attr, "outputs": {"out": path}}).to_string());
        }
        let file = self.dir.path().join(format!("jobs-{}.jsonl", lines.len()));
        fs::write(&file, lines.join("\n") + "\n").unwrap();
        file
    }

    /// A store path of this store that no one built.
    fn absent(&self, n: usize) -> String {
        // Digits are nix32 digits: a valid hash.
        format!("{}/{n:0>32}-absent-{n}", self.store.display())
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, |_| {})
    }

    fn run_with(&self, args: &[&str], edit: impl FnOnce(&mut Command)) -> Output {
        let tmp = self.dir.path().join("tmp");
        fs::create_dir_all(&tmp).unwrap();
        let mut cmd = Command::new(BIN);
        common::outside_build(&mut cmd)
            .arg("--coverage")
            .args(args)
            .env("TMPDIR", &tmp)
            .env("NIX_STORE", &self.store)
            .env_remove("cudaCapabilities")
            .env_remove("CUDAARCHS")
            .env_remove("TORCH_CUDA_ARCH_LIST")
            .stdin(Stdio::null());
        edit(&mut cmd);
        cmd.output().unwrap()
    }
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", common::text(out)))
}

/// The report's entry for `path`.
fn entry<'a>(report: &'a Value, path: &str) -> &'a Value {
    report["paths"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == path)
        .unwrap_or_else(|| panic!("{path} not in {report:#}"))
}

/// What Nix reads for `path` from the cache at `url`: NarSize and the
/// download size, or `None` when it says the path is not there.
fn nix_path_info(w: &World, url: &str, path: &str) -> Option<(u64, Option<u64>)> {
    let program = common::root().join(".tools/nix/bin/nix");
    let out = Command::new(program)
        .args([
            "--extra-experimental-features",
            "nix-command",
            "path-info",
            "--json",
            "--store",
            url,
            path,
        ])
        .env("NIX_STORE_DIR", &w.store)
        .env("NIX_STATE_DIR", w.dir.path().join("state"))
        .env("NIX_CONF_DIR", w.dir.path().join("etc"))
        .env("HOME", w.dir.path().join("home"))
        .env("NIX_CONFIG", "substituters =\nrequire-sigs = false\n")
        .output()
        .unwrap();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("is not valid") || err.contains("does not exist"),
            "nix path-info: {err}"
        );
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let info = match &v {
        Value::Array(a) => a.iter().find(|i| i["path"] == path).cloned(),
        Value::Object(o) => o.get(path).cloned(),
        _ => None,
    };
    let info = info?;
    if info.is_null() {
        return None;
    }
    Some((info["narSize"].as_u64().unwrap(), info["downloadSize"].as_u64()))
}

/// Presence over two caches, one over HTTP with latency: each path's first
/// serving cache in Nix's order (priority 30 before 50), its sizes as Nix
/// reads them, signatures by key, and the attributes carried through.
#[test]
fn presence_follows_nix_order_keys_and_the_caches_contents() {
    let w = build_world();
    let a = w.cache("a", "key-a", "compression=zstd", &["sass", "multi"]);
    let b = w.cache("b", "key-b", "compression=xz&priority=30", &["ptx", "multi"]);
    let server = HttpCache::start(b.clone(), Duration::from_millis(20));
    let a_url = format!("file://{}", a.display());
    let b_url = server.url.clone();
    let absent = w.absent(1);
    let jobs = w.eval_jobs(&["sass", "ptx", "multi", "dep", "plain"], &[("ghost", &absent)]);
    let jobs = jobs.to_str().unwrap();
    let (ka, kb) = (w.public("key-a"), w.public("key-b"));
    // Both keys trusted: b (priority 30) is asked first, though given second.
    let out = w.run(&[
        "--substituter",
        &a_url,
        "--substituter",
        &b_url,
        "--trusted-public-key",
        ka,
        "--trusted-public-key",
        kb,
        "--eval-jobs",
        jobs,
        "--format",
        "json",
        "--jobs",
        "4",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "plain and ghost are served nowhere: {}",
        common::text(&out)
    );
    let report = json(&out);
    // stderr is a pipe here: no progress line.
    assert!(out.stderr.is_empty(), "{}", common::text(&out));
    assert_eq!(report["caches"][0]["url"], b_url.as_str(), "{report:#}");
    assert_eq!(report["caches"][0]["priority"], 30);
    assert_eq!(report["caches"][1]["priority"], 50);
    let urls = [(b_url.as_str(), "key-b"), (a_url.as_str(), "key-a")];
    for (attr, path) in
        w.paths.iter().map(|(a, p)| (*a, p.as_str())).chain([("ghost", absent.as_str())])
    {
        let e = entry(&report, path);
        assert_eq!(e["attr"], attr);
        assert_eq!(e["output"], "out");
        // The oracle: what Nix itself reads from each cache, in order.
        let first = urls
            .iter()
            .find_map(|(url, key)| nix_path_info(&w, url, path).map(|i| (*url, *key, i)));
        match first {
            Some((url, key, (nar, download))) => {
                assert_eq!(e["served_by"], url, "{attr}: {e:#}");
                assert_eq!(e["signed_by"], key, "{attr}");
                assert_eq!(e["nar_size"].as_u64(), Some(nar), "{attr}");
                if let Some(download) = download {
                    assert_eq!(e["file_size"].as_u64(), Some(download), "{attr}");
                }
                let compression = if url == b_url { "xz" } else { "zstd" };
                assert_eq!(e["compression"], compression, "{attr}");
                assert_eq!(e["status"], "served");
            }
            None => {
                assert_eq!(e["served_by"], Value::Null, "{attr}: {e:#}");
                assert_eq!(e["status"], "not-served");
            }
        }
        // Every cache answered for the root, served or not-found.
        for (i, (url, _)) in urls.iter().enumerate() {
            let there = nix_path_info(&w, url, path).is_some();
            let answer = &e["caches"][i];
            assert_eq!(answer["cache"], *url);
            assert_eq!(
                answer["answer"],
                if there { "served" } else { "not-found" },
                "{attr} {url}"
            );
        }
    }
    assert_eq!(report["bad_lines"][0]["line"], 2);
    assert!(report["bad_lines"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("broken: evaluation failed"));
    // dep is in both caches (multi's closure): b serves it first.
    assert_eq!(entry(&report, w.path("dep"))["served_by"], b_url.as_str());
    // Keep-alive: fewer connections than requests.
    assert!(
        server.connections() < server.requests(),
        "{} connections for {} requests",
        server.connections(),
        server.requests()
    );

    // Only key-a trusted: b's narinfo files are not signed by it, so Nix
    // would take multi from a, and ptx from nowhere.
    let out = w.run(&[
        "--substituter",
        &a_url,
        "--substituter",
        &b_url,
        "--trusted-public-key",
        ka,
        "--eval-jobs",
        jobs,
        "--format",
        "json",
    ]);
    let report = json(&out);
    let multi = entry(&report, w.path("multi"));
    assert_eq!(multi["served_by"], a_url.as_str());
    assert_eq!(multi["caches"][0]["answer"], "untrusted");
    assert!(multi["caches"][0]["reason"].as_str().unwrap().contains("key-b"), "{multi:#}");
    assert_eq!(entry(&report, w.path("ptx"))["served_by"], Value::Null);
    // No key: served, said unchecked.
    let out = w.run(&["--substituter", &a_url, w.path("sass"), "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out));
    let report = json(&out);
    assert_eq!(report["paths"][0]["signature"], "unchecked");
    assert_eq!(report["paths"][0]["attr"], Value::Null);

    // Text and Hydra metrics of the same question.
    let args = [
        "--substituter",
        &a_url,
        "--substituter",
        &b_url,
        "--trusted-public-key",
        ka,
        "--trusted-public-key",
        kb,
        "--eval-jobs",
        jobs,
    ];
    let text = w.run(&[&args[..], &["--format", "text"]].concat());
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains(&format!("plain: served by no cache; not served by {b_url} (not found")),
        "{text}"
    );
    assert!(text.contains(&format!("sass: served by {a_url} (")), "{text}");
    assert!(text.contains(&format!("; also served by {a_url}")), "multi, dep: {text}");
    assert!(text.contains("input line 2: skipped: broken: evaluation failed"), "{text}");
    let metrics = w.run(&[&args[..], &["--format", "hydra-metrics"]].concat());
    let metrics = String::from_utf8(metrics.stdout).unwrap();
    let nar: u64 = ["sass", "ptx", "multi", "dep"]
        .iter()
        .map(|a| entry(&report_of(&w, &args), w.path(a))["nar_size"].as_u64().unwrap())
        .sum();
    for line in [
        "cuda-elf-inspect.coverage.hits 4".to_string(),
        "cuda-elf-inspect.coverage.misses 2".to_string(),
        format!("cuda-elf-inspect.coverage.nar-bytes {nar} B"),
        "cuda-elf-inspect.coverage.cache.1.hits 3".to_string(),
        "cuda-elf-inspect.coverage.cache.2.hits 1".to_string(),
        "cuda-elf-inspect.coverage.bad-lines 1".to_string(),
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} not in\n{metrics}");
    }
}

fn report_of(w: &World, args: &[&str]) -> Value {
    json(&w.run(&[args, &["--format", "json"]].concat()))
}

/// With --closure, a served path whose reference no cache serves is a
/// partial hit naming the reference.
#[test]
fn a_closure_missing_everywhere_is_a_partial_hit() {
    let w = build_world();
    let a = w.cache("a", "key-a", "compression=zstd", &["multi", "sass"]);
    // Nix copies closures: remove dep's narinfo to make the gap.
    let dep = w.path("dep");
    let base = Path::new(dep).file_name().unwrap().to_str().unwrap();
    fs::remove_file(a.join(format!("{}.narinfo", &base[..32]))).unwrap();
    let url = format!("file://{}", a.display());
    let out = w.run(&[
        "--substituter",
        &url,
        "--closure",
        w.path("multi"),
        w.path("sass"),
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    let report = json(&out);
    let multi = entry(&report, w.path("multi"));
    assert_eq!(multi["status"], "partial", "{multi:#}");
    assert_eq!(multi["closure"]["missing"], serde_json::json!([dep]));
    let sass = entry(&report, w.path("sass"));
    assert_eq!(sass["status"], "served");
    assert_eq!(sass["closure"]["paths"], 1);
    assert_eq!(report["summary"]["partial"], 1);
}

/// Every kind of bad answer is its path's result, in one run that ends.
#[test]
fn bad_answers_are_per_path_results() {
    let w = build_world();
    let c = w.cache("c", "key-a", "compression=zstd", &["sass", "ptx", "multi", "dep", "plain"]);
    let server = HttpCache::start(c.clone(), Duration::from_millis(5));
    let narinfo = |attr: &str| {
        let base = Path::new(w.path(attr)).file_name().unwrap().to_str().unwrap().to_string();
        format!("{}.narinfo", &base[..32])
    };
    // A narinfo whose NarSize was changed after signing.
    let text = fs::read_to_string(c.join(narinfo("sass"))).unwrap();
    let tampered: String = text
        .lines()
        .map(|l| if l.starts_with("NarSize: ") { "NarSize: 1".to_string() } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    server.fault(&narinfo("sass"), Fault::Body(tampered.into_bytes()));
    server.fault(&narinfo("ptx"), Fault::Truncate);
    server.fault(&narinfo("multi"), Fault::Status(503, 2));
    server.fault(&narinfo("dep"), Fault::Status(500, 1000));
    server.fault(&narinfo("plain"), Fault::Body(b"<html>gateway</html>\n".to_vec()));
    let (gone1, gone2) = (w.absent(1), w.absent(2));
    let b1 = Path::new(&gone1).file_name().unwrap().to_str().unwrap();
    server.fault(&format!("{}.narinfo", &b1[..32]), Fault::Disconnect);
    // A second cache whose nix-cache-info stalls: gone from the start.
    let d = w.dir.path().join("d");
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("nix-cache-info"), "StoreDir: /x\n").unwrap();
    let stalled = HttpCache::start(d, Duration::ZERO);
    stalled.fault("nix-cache-info", Fault::Stall(Duration::from_secs(30)));
    let start = Instant::now();
    let out = w.run(&[
        "--substituter",
        &server.url,
        "--substituter",
        &stalled.url,
        "--trusted-public-key",
        w.public("key-a"),
        "--jobs",
        "1",
        "--retries",
        "2",
        "--stall-timeout",
        "1",
        "--format",
        "json",
        w.path("sass"),
        w.path("ptx"),
        w.path("multi"),
        w.path("dep"),
        w.path("plain"),
        &gone1,
        &gone2,
    ]);
    assert!(start.elapsed() < Duration::from_secs(60), "took {:?}", start.elapsed());
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    let report = json(&out);
    let answer = |path: &str| entry(&report, path)["caches"][0].clone();
    let want = [
        (w.path("sass"), "untrusted", "signature"),
        (w.path("ptx"), "error", ""),
        (w.path("multi"), "served", ""),
        (w.path("dep"), "error", "500"),
        (w.path("plain"), "bad-narinfo", "line 1"),
        (gone1.as_str(), "error", ""),
        (gone2.as_str(), "not-found", ""),
    ];
    for (path, kind, words) in want {
        let a = answer(path);
        assert_eq!(a["answer"], kind, "{path}: {a:#}");
        assert!(a["reason"].as_str().unwrap_or("").contains(words), "{path}: {a:#}");
    }
    assert_eq!(entry(&report, w.path("multi"))["status"], "served");
    // The stalled cache is reported gone, and every path says so.
    assert_eq!(report["caches"][1]["url"], stalled.url.as_str());
    assert!(report["caches"][1]["unreachable"].as_str().is_some(), "{report:#}");
    for p in report["paths"].as_array().unwrap() {
        assert_eq!(p["caches"][1]["answer"], "error", "{p:#}");
    }
}

/// A cache that vanishes mid-run: the run ends, each path answered, the
/// other cache's answers intact.
#[test]
fn a_cache_vanishing_mid_run_is_answered_per_path() {
    let w = build_world();
    let a = w.cache("a", "key-a", "compression=zstd", &["sass", "multi"]);
    let server = HttpCache::start(a.clone(), Duration::from_millis(5));
    let file_url = format!("file://{}", a.display());
    let mut paths: Vec<String> = (0..40).map(|n| w.absent(n)).collect();
    paths.push(w.path("sass").to_string());
    server.vanish_after(10);
    let mut args = vec![
        "--substituter",
        &server.url,
        "--substituter",
        &file_url,
        "--jobs",
        "2",
        "--format",
        "json",
    ];
    args.extend(paths.iter().map(String::as_str));
    let start = Instant::now();
    let out = w.run(&args);
    assert!(start.elapsed() < Duration::from_secs(60), "took {:?}", start.elapsed());
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    let report = json(&out);
    assert_eq!(report["paths"].as_array().unwrap().len(), 41);
    assert!(report["caches"][0]["unreachable"].as_str().is_some(), "{report:#}");
    let gone = report["paths"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["caches"][0]["reason"].as_str().unwrap_or("").contains("stopped answering"))
        .count();
    assert!(gone > 0, "{report:#}");
    // The file cache still serves sass.
    assert_eq!(entry(&report, w.path("sass"))["served_by"], file_url.as_str());
}

/// Ctrl-C: the paths answered are reported, the rest named not done.
#[test]
fn ctrl_c_reports_what_was_done_and_names_the_rest() {
    let w = build_world();
    let a = w.cache("a", "key-a", "compression=zstd", &["sass"]);
    let server = HttpCache::start(a, Duration::from_millis(200));
    let mut paths = vec![w.path("sass").to_string()];
    paths.extend((0..60).map(|n| w.absent(n)));
    let mut args =
        vec!["--coverage", "--substituter", &server.url, "--jobs", "2", "--format", "json"];
    args.extend(paths.iter().map(String::as_str));
    let tmp = w.dir.path().join("tmp");
    fs::create_dir_all(&tmp).unwrap();
    let mut cmd = Command::new(BIN);
    let child = common::outside_build(&mut cmd)
        .args(&args)
        .env("TMPDIR", &tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: kill(2) on our child, not reaped yet.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    let report = json(&out);
    let all = report["paths"].as_array().unwrap();
    assert_eq!(all.len(), 61);
    let not_done = all.iter().filter(|p| p["status"] == "not-done").count();
    assert!(not_done > 0 && not_done < 61, "{not_done} not done");
    assert_eq!(report["summary"]["not_done"], not_done);
    assert_eq!(entry(&report, w.path("sass"))["status"], "served");
}

/// The NAR file of `path` in the cache folder `cache`, as its narinfo names it.
fn nar_of(cache: &Path, path: &str) -> String {
    let base = Path::new(path).file_name().unwrap().to_str().unwrap();
    let info = fs::read_to_string(cache.join(format!("{}.narinfo", &base[..32]))).unwrap();
    info.lines().find_map(|l| l.strip_prefix("URL: ")).unwrap().to_string()
}

/// What each capability of `gpu` (the report's) says: runs and the driver.
fn answers(gpu: &Value) -> BTreeMap<String, (String, Option<bool>)> {
    gpu["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let runs = c["runs"].as_str().unwrap().to_string();
            (c["capability"].as_str().unwrap().to_string(), (runs, c["driver_runs"].as_bool()))
        })
        .collect()
}

/// The direct audit's answers as the report words them.
fn direct_answers(
    w: &World,
    path: &str,
    caps: &str,
    driver: &str,
) -> BTreeMap<String, (String, Option<bool>)> {
    direct_audit(w, path, caps, driver)
        .into_iter()
        .map(|(cap, (runs, d))| {
            let runs = match runs.as_str() {
                "native" => "sass",
                "jit" => "ptx-jit",
                _ => "nothing",
            };
            (cap, (runs.to_string(), d))
        })
        .collect()
}

/// Ctrl-C in the deep pass, while one NAR is still downloading (its body
/// held back a minute by the server): the run ends at once with status 1
/// and a report in every format, the paths audited with the direct
/// audit's answers, the others (the slow one among them) named as not
/// examined (interrupted); the temporary folder is gone.
#[test]
fn ctrl_c_in_the_deep_pass_reports_the_paths_audited_and_names_the_rest() {
    let w = build_world();
    let attrs = ["sass", "ptx", "multi", "plain"];
    let a = w.cache("a", "key-a", "compression=zstd", &attrs);
    let server = HttpCache::start(a.clone(), Duration::from_millis(5));
    let slow = nar_of(&a, w.path("multi"));
    server.fault(&slow, Fault::SlowBody(Duration::from_secs(60)));
    let (caps, driver) = ("8.0 9.0 12.0", "580.95.05");
    let (page, metrics, text) =
        (w.dir.path().join("c.html"), w.dir.path().join("c.prom"), w.dir.path().join("c.txt"));
    let outputs = [
        format!("html={}", page.display()),
        format!("hydra-metrics={}", metrics.display()),
        format!("text={}", text.display()),
    ];
    let mut args = vec![
        "--coverage",
        "--substituter",
        &server.url,
        "--trusted-public-key",
        w.public("key-a"),
        "--cuda-capabilities",
        caps,
        "--driver-version",
        driver,
        "--format",
        "json",
    ];
    for o in &outputs {
        args.extend(["--output", o.as_str()]);
    }
    args.extend(attrs.iter().map(|a| w.path(a)));
    let tmp = w.dir.path().join("tmp");
    fs::create_dir_all(&tmp).unwrap();
    let mut cmd = Command::new(BIN);
    let child = common::outside_build(&mut cmd)
        .args(&args)
        .env("TMPDIR", &tmp)
        .env("NIX_STORE", &w.store)
        .env("RAYON_NUM_THREADS", "2")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while server.asked(&slow) == 0 {
        assert!(start.elapsed() < Duration::from_secs(120), "the slow NAR was never asked for");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The other NARs of its batch (a few KiB, 5 ms away) are in by then.
    std::thread::sleep(Duration::from_millis(700));
    let sent = Instant::now();
    // SAFETY: kill(2) on our child, not reaped yet.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert!(sent.elapsed() < Duration::from_secs(20), "the slow download was waited for");
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    let report = json(&out);
    let multi = entry(&report, w.path("multi"));
    assert_eq!(multi["status"], "served", "{multi:#}");
    assert_eq!(multi["not_examined"], "interrupted", "{multi:#}");
    assert_eq!(multi["gpu"], Value::Null);
    let (mut audited, mut left) = (Vec::new(), Vec::new());
    for attr in attrs {
        let p = entry(&report, w.path(attr));
        assert_eq!(p["status"], "served", "{p:#}");
        match p["not_examined"].as_str() {
            Some(why) => {
                assert_eq!(why, "interrupted", "{p:#}");
                assert_eq!(p["gpu"], Value::Null, "{p:#}");
                left.push(attr);
            }
            None => {
                let want = match attr {
                    "plain" => ["8.0", "9.0", "12.0"]
                        .iter()
                        .map(|c| (c.to_string(), ("no-device-code".to_string(), None)))
                        .collect(),
                    _ => direct_answers(&w, w.path(attr), caps, driver),
                };
                assert_eq!(answers(&p["gpu"]), want, "{attr}: {p:#}");
                audited.push(attr);
            }
        }
    }
    assert!(!audited.is_empty(), "nothing was audited before Ctrl-C: {report:#}");
    assert_eq!(report["summary"]["not_examined"], left.len(), "{:#}", report["summary"]);
    // The same in text, metrics and HTML.
    let text = fs::read_to_string(&text).unwrap();
    for attr in &left {
        let line = format!("{}: served by {}", w.path(attr), server.url);
        let line = text.lines().find(|l| l.starts_with(&line)).unwrap_or_else(|| panic!("{text}"));
        assert!(line.ends_with("; GPU depth not examined (interrupted)"), "{line}");
    }
    for attr in &audited {
        let line = text.lines().find(|l| l.starts_with(&format!("{}: ", w.path(attr)))).unwrap();
        assert!(!line.contains("not examined") && line.contains("; on 8.0: "), "{line}");
    }
    assert!(text.contains(&format!("; {} not examined (interrupted)\n", left.len())), "{text}");
    let metrics = fs::read_to_string(&metrics).unwrap();
    let line = format!("cuda-elf-inspect.coverage.not-examined {}", left.len());
    assert!(metrics.lines().any(|l| l == line), "{line} not in\n{metrics}");
    let dom = render(&page);
    for attr in attrs {
        let row = dom["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["path"] == w.path(attr))
            .unwrap_or_else(|| panic!("{attr}: {dom:#}"));
        let cells = row["cells"].as_array().unwrap();
        let class = |i: usize| cells[1 + i]["class"].as_str().unwrap().to_string();
        for i in 0..3 {
            match left.contains(&attr) {
                true => assert_eq!(class(i), "not-examined", "{row:#}"),
                false => assert_ne!(class(i), "not-examined", "{row:#}"),
            }
        }
    }
    // The temporary folder of the NAR audit is gone.
    assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0);
}

/// `--driver-version` alone: each served path is answered for the
/// capabilities its build was made for (its SASS and PTX as cuobjdump
/// lists them), each with the verdict a direct audit of the realised path
/// with that driver and those capabilities gives; in JSON, text and HTML.
#[test]
fn a_driver_alone_is_answered_for_the_capabilities_each_build_was_made_for() {
    let w = build_world();
    let attrs = ["sass", "ptx", "multi", "plain"];
    let a = w.cache("a", "key-a", "compression=zstd", &attrs);
    let url = format!("file://{}", a.display());
    let driver = "580.95.05";
    let page = w.dir.path().join("driver.html");
    let html = format!("html={}", page.display());
    let mut args = vec!["--substituter", &url, "--driver-version", driver, "--output", &html];
    args.extend(attrs.iter().map(|a| w.path(a)));
    let out = w.run(&[&args[..], &["--format", "json"]].concat());
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", common::text(&out));
    let report = json(&out);
    let mut verdicts = Vec::new();
    for attr in ["sass", "ptx", "multi"] {
        let path = w.path(attr);
        let file =
            fs::read_dir(Path::new(path).join("bin")).unwrap().next().unwrap().unwrap().path();
        // What the build was made for, by cuobjdump: its SASS and its PTX.
        let mut own = cuobjdump_sass(&file);
        own.extend(cuobjdump_ptx(&file));
        own.sort_by_key(|c| c.replace('.', "").parse::<u32>().unwrap());
        own.dedup();
        assert!(!own.is_empty(), "{attr}");
        let gpu = &entry(&report, path)["gpu"];
        let got = answers(gpu);
        assert_eq!(got.keys().cloned().collect::<Vec<_>>().len(), own.len(), "{attr}: {gpu:#}");
        let want = direct_answers(&w, path, &own.join(" "), driver);
        assert_eq!(got, want, "{attr}");
        for (cap, (_, d)) in &got {
            assert!(d.is_some(), "{attr} {cap}: no driver verdict");
            verdicts.push(d.unwrap());
        }
    }
    // The fixtures give both answers with this driver (the PTX of nvcc 13.5
    // is too new for a CUDA 13.0 driver to JIT; SASS runs).
    assert!(verdicts.contains(&true) && verdicts.contains(&false), "{verdicts:?}");
    assert_eq!(entry(&report, w.path("plain"))["gpu"]["capabilities"], serde_json::json!([]));
    let any_fails = verdicts.contains(&false);
    assert_eq!(out.status.code(), Some(if any_fails { 1 } else { 0 }));
    // Text: a DRIVER column and each capability's verdict in the sentence.
    let text = w.run(&args);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.lines().any(|l| l.starts_with("ATTRIBUTE") && l.ends_with("DRIVER")), "{text}");
    for attr in ["sass", "ptx", "multi"] {
        let gpu = &entry(&report, w.path(attr))["gpu"];
        let line = text.lines().find(|l| l.starts_with(&format!("{}: ", w.path(attr)))).unwrap();
        for c in gpu["capabilities"].as_array().unwrap() {
            let cap = c["capability"].as_str().unwrap();
            let prefix = format!("on {cap}: ");
            let part = line
                .split("; ")
                .find(|p| p.starts_with(&prefix))
                .unwrap_or_else(|| panic!("{line}"));
            match c["driver_runs"].as_bool().unwrap() {
                true => assert!(part.ends_with(&format!(", driver {driver} runs it")), "{part}"),
                false => assert!(
                    part.contains(&format!(", but driver {driver} cannot run it (")),
                    "{part}"
                ),
            }
        }
        let row = text.lines().find(|l| l.starts_with(w.path(attr))).unwrap();
        let fails =
            gpu["capabilities"].as_array().unwrap().iter().any(|c| c["driver_runs"] == false);
        assert!(row.ends_with(if fails { " FAILS" } else { "   runs" }), "{row}");
    }
    // HTML: a driver column whose cell says the verdict per capability.
    let dom = render(&page);
    let columns: Vec<&str> =
        dom["columns"].as_array().unwrap().iter().map(|c| c["cap"].as_str().unwrap()).collect();
    assert_eq!(columns, [url.as_str(), "driver"]);
    for attr in ["sass", "ptx", "multi"] {
        let gpu = &entry(&report, w.path(attr))["gpu"];
        let row =
            dom["rows"].as_array().unwrap().iter().find(|r| r["path"] == w.path(attr)).unwrap();
        let cell = &row["cells"][1];
        let fails =
            gpu["capabilities"].as_array().unwrap().iter().any(|c| c["driver_runs"] == false);
        assert_eq!(cell["class"], if fails { "driver-fails" } else { "driver-runs" }, "{row:#}");
        for c in gpu["capabilities"].as_array().unwrap() {
            let cap = c["capability"].as_str().unwrap();
            let verdict = if c["driver_runs"] == true { "runs" } else { "fails" };
            assert!(
                cell["text"].as_str().unwrap().contains(&format!("{cap}: {verdict}")),
                "{row:#}"
            );
        }
    }
}

/// PTX architectures of `file` as cuobjdump lists them (`compute_86` -> 8.6).
fn cuobjdump_ptx(file: &Path) -> Vec<String> {
    let out = Command::new(common::tool("cuobjdump")).arg("--list-ptx").arg(file).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| {
            l.rsplit('.').nth(1).and_then(|s| s.strip_prefix("sm_")).map(str::to_string)
        })
        .map(|sm| format!("{}.{}", &sm[..sm.len() - 1], &sm[sm.len() - 1..]))
        .collect()
}

/// Three shards merged are byte for byte the report of one run; a missing
/// shard is refused.
#[test]
fn three_shards_merged_equal_one_run() {
    let w = build_world();
    let a = w.cache("a", "key-a", "compression=zstd", &["sass", "multi"]);
    let b = w.cache("b", "key-b", "compression=xz&priority=30", &["ptx"]);
    let (a_url, b_url) = (format!("file://{}", a.display()), format!("file://{}", b.display()));
    let absent = w.absent(3);
    let jobs = w.eval_jobs(&["sass", "ptx", "multi", "dep", "plain"], &[("ghost", &absent)]);
    let base = [
        "--substituter",
        &a_url,
        "--substituter",
        &b_url,
        "--trusted-public-key",
        w.public("key-a"),
        "--closure",
        "--eval-jobs",
        jobs.to_str().unwrap(),
        "--format",
        "json",
    ];
    let whole = w.run(&base);
    assert_eq!(whole.status.code(), Some(1), "{}", common::text(&whole));
    let mut files = Vec::new();
    for k in 1..=3 {
        let shard = format!("{k}/3");
        let out = w.run(&[&base[..], &["--shard", &shard]].concat());
        let file = w.dir.path().join(format!("shard{k}.json"));
        fs::write(&file, &out.stdout).unwrap();
        let part = json(&out);
        assert_eq!(part["shard"], shard.as_str());
        files.push(file.to_str().unwrap().to_string());
    }
    let merged = w.run(&["--merge", &files[0], &files[1], &files[2], "--format", "json"]);
    assert_eq!(merged.status.code(), whole.status.code(), "{}", common::text(&merged));
    assert_eq!(String::from_utf8_lossy(&merged.stdout), String::from_utf8_lossy(&whole.stdout));
    let missing = w.run(&["--merge", &files[0], &files[2], "--format", "json"]);
    assert_eq!(missing.status.code(), Some(2), "{}", common::text(&missing));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("shard 2/3 is missing"),
        "{}",
        common::text(&missing)
    );
}

/// The worst file's coverage of `path` per capability in a direct audit of
/// the realised path: native/jit/no and the driver's verdict.
fn direct_audit(
    w: &World,
    path: &str,
    caps: &str,
    driver: &str,
) -> BTreeMap<String, (String, Option<bool>)> {
    let out = Command::new(BIN)
        .args(["--format", "json", "--cuda-capabilities", caps, "--driver-version", driver, path])
        .env("NIX_STORE", &w.store)
        .env_remove("NIX_LOG_FD")
        .env_remove("outputs")
        .env_remove("out")
        .output()
        .unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", common::text(&out));
    let v = json(&out);
    let rank = |r: &str| ["no", "jit", "native"].iter().position(|x| *x == r).unwrap();
    let mut worst: BTreeMap<String, (String, Option<bool>)> = BTreeMap::new();
    for f in v["files"].as_array().unwrap() {
        for c in f["coverage"].as_array().into_iter().flatten() {
            let cap = c["capability"].as_str().unwrap().to_string();
            let runs = c["runs"].as_str().unwrap().to_string();
            let driver = c["driver"]["runs"].as_bool();
            let e = worst.entry(cap).or_insert((runs.clone(), driver));
            if rank(&runs) < rank(&e.0) {
                e.0 = runs;
            }
            e.1 = match (e.1, driver) {
                (Some(a), Some(b)) => Some(a && b),
                (a, b) => a.or(b),
            };
        }
    }
    worst
}

/// The page rendered by headless Chromium, as tests/tools/dom.py reads it.
fn render(page: &Path) -> Value {
    let out = Command::new("python3")
        .arg(common::root().join("tests/tools/dom.py"))
        .arg(page)
        .output()
        .unwrap();
    assert!(out.status.success(), "dom.py: {}", common::text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// SASS architectures of `file` as cuobjdump lists them (`sm_80` -> 8.0).
fn cuobjdump_sass(file: &Path) -> Vec<String> {
    let out = Command::new(common::tool("cuobjdump")).arg("--list-elf").arg(file).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut caps: Vec<String> = text
        .lines()
        .filter_map(|l| {
            l.rsplit('.').nth(1).and_then(|s| s.strip_prefix("sm_")).map(str::to_string)
        })
        .map(|sm| format!("{}.{}", &sm[..sm.len() - 1], &sm[sm.len() - 1..]))
        .collect();
    caps.sort_by_key(|c| c.replace('.', "").parse::<u32>().unwrap());
    caps.dedup();
    caps
}

/// GPU depth: each served path's answer per capability is the direct
/// audit's of the realised path, and "built for" is cuobjdump's SASS.
#[test]
fn gpu_depth_matches_a_direct_audit_of_the_same_store_path() {
    let w = build_world();
    let a = w.cache("a", "key-a", "compression=zstd", &["sass", "ptx", "multi", "plain"]);
    let server = HttpCache::start(a, Duration::from_millis(5));
    let (caps, driver) = ("8.0 9.0 12.0", "580.95.05");
    let hostile = "<img src=x onerror=alert(1)>";
    let absent = w.absent(7);
    let jobs = w.eval_jobs(&["sass", "ptx", "multi", "plain"], &[(hostile, &absent)]);
    let page = w.dir.path().join("coverage.html");
    let html = format!("html={}", page.display());
    let out = w.run(&[
        "--substituter",
        &server.url,
        "--trusted-public-key",
        w.public("key-a"),
        "--eval-jobs",
        jobs.to_str().unwrap(),
        "--cuda-capabilities",
        caps,
        "--driver-version",
        driver,
        "--format",
        "json",
        "--output",
        &html,
    ]);
    assert_eq!(out.status.code(), Some(1), "sass has nothing for 9.0: {}", common::text(&out));
    let report = json(&out);
    for attr in ["sass", "ptx", "multi"] {
        let path = w.path(attr);
        let gpu = &entry(&report, path)["gpu"];
        let direct = direct_audit(&w, path, caps, driver);
        assert_eq!(direct.len(), 3, "{attr}: {direct:?}");
        for c in gpu["capabilities"].as_array().unwrap() {
            let (runs, driver_runs) = &direct[c["capability"].as_str().unwrap()];
            let want = match runs.as_str() {
                "native" => "sass",
                "jit" => "ptx-jit",
                _ => "nothing",
            };
            assert_eq!(c["runs"], want, "{attr}: {c:#}");
            assert_eq!(c["driver_runs"].as_bool(), *driver_runs, "{attr}: {c:#}");
        }
        let file =
            fs::read_dir(Path::new(path).join("bin")).unwrap().next().unwrap().unwrap().path();
        let built: Vec<String> = gpu["built_for"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect();
        assert_eq!(built, cuobjdump_sass(&file), "{attr}");
    }
    // What the fixtures were built with (recipes.txt).
    let cap = |attr: &str, c: usize| {
        entry(&report, w.path(attr))["gpu"]["capabilities"][c]["runs"].clone()
    };
    assert_eq!(cap("sass", 0), "sass");
    assert_eq!(cap("sass", 1), "nothing");
    assert_eq!(cap("ptx", 0), "ptx-jit");
    assert_eq!(cap("multi", 1), "sass");
    assert_eq!(entry(&report, w.path("multi"))["gpu"]["ptx"], serde_json::json!(["8.6"]));
    assert_eq!(cap("plain", 0), "no-device-code");
    let text = w.run(&[
        "--substituter",
        &server.url,
        "--trusted-public-key",
        w.public("key-a"),
        "--eval-jobs",
        jobs.to_str().unwrap(),
        "--cuda-capabilities",
        caps,
        "--driver-version",
        driver,
    ]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("multi: served by http://127.0.0.1:"), "{text}");
    assert!(text.contains("built for 7.5 8.0 8.6 9.0 + PTX 8.6; on 8.0: SASS; on 9.0: SASS; on 12.0: PTX JIT only (slow first start)"), "{text}");
    assert!(
        text.contains("sass: served by") && text.contains("on 9.0: nothing runs (no kernel image)"),
        "{text}"
    );
    assert!(
        text.contains("ptx: served by") && text.contains("no SASS, built for PTX 8.0 only"),
        "{text}"
    );
    // The HTML matrix as Chromium renders it: a column per cache and per
    // capability, each row's cells the JSON's answers, the hostile name text.
    let dom = render(&page);
    let columns: Vec<&str> =
        dom["columns"].as_array().unwrap().iter().map(|c| c["cap"].as_str().unwrap()).collect();
    assert_eq!(columns, [server.url.as_str(), "8.0", "9.0", "12.0"]);
    for p in report["paths"].as_array().unwrap() {
        let row = dom["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["path"] == p["path"])
            .unwrap_or_else(|| panic!("{p:#}"));
        let cells = row["cells"].as_array().unwrap();
        assert_eq!(cells[0]["class"], p["caches"][0]["answer"], "{row:#}");
        for (i, c) in p["gpu"]["capabilities"].as_array().into_iter().flatten().enumerate() {
            let want = if c["driver_runs"] == false {
                "driver-fails"
            } else {
                c["runs"].as_str().unwrap()
            };
            assert_eq!(cells[1 + i]["class"], want, "{row:#}");
        }
    }
    let row =
        dom["rows"].as_array().unwrap().iter().find(|r| r["path"] == absent.as_str()).unwrap();
    assert_eq!(row["name"], hostile);
    assert_eq!(dom["tags"]["img"], Value::Null, "{:#}", dom["tags"]);
    assert_eq!(dom["net"], serde_json::json!([]));
    assert!(
        dom["ids"]["summary"]["text"].as_str().unwrap().starts_with("5 paths: 4 served"),
        "{:#}",
        dom["ids"]
    );
    // The temporary folder of the NAR audit is gone.
    assert_eq!(fs::read_dir(w.dir.path().join("tmp")).unwrap().count(), 0);
}

/// On a terminal (a pty by `script`), stderr carries a progress line
/// rewritten in place (done/total, rate, ETA) and cleared at the end; on a
/// pipe nothing (the presence test).
#[test]
fn a_progress_line_on_a_terminal_only() {
    let w = build_world();
    let a = w.cache("a", "key-a", "compression=zstd", &["sass"]);
    let server = HttpCache::start(a, Duration::from_millis(30));
    let mut cmd =
        format!("{BIN} --coverage --jobs 1 --substituter {} {}", server.url, w.path("sass"));
    for n in 0..10 {
        cmd.push(' ');
        cmd.push_str(&w.absent(n));
    }
    cmd.push_str(" > /dev/null");
    let out = Command::new(common::tool("script"))
        .args(["-qec", &cmd, "/dev/null"])
        .env("TMPDIR", w.dir.path())
        .output()
        .unwrap();
    let tty = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    assert!(tty.contains("\r\x1b[Kcuda-elf-inspect: 11/11 paths, "), "{tty:?}");
    assert!(tty.contains("/s, ETA "), "{tty:?}");
    assert!(tty.ends_with("\r\x1b[K"), "cleared at the end: {tty:?}");
}

/// A driver alone, older than some GPUs the build was made for: driver
/// 470.256.02 supports CUDA 11.4, and Hopper GPUs (capability 9.0) were
/// first driven by CUDA 11.8's driver (NVIDIA's 11.8 release notes), so the
/// multi-arch fixture's sm_90 (cuobjdump) is named as a GPU newer than the
/// driver, not answered "runs" or "cannot run"; its other capabilities
/// (7.5, 8.0, 8.6: Turing, Ampere, all older than 11.4) are answered.
#[test]
fn a_driver_alone_names_the_gpus_newer_than_it_and_answers_the_rest() {
    let w = build_world();
    let a = w.cache("a", "key-a", "compression=zstd", &["multi"]);
    let url = format!("file://{}", a.display());
    let path = w.path("multi");
    let out =
        w.run(&["--substituter", &url, "--driver-version", "470.256.02", path, "--format", "json"]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", common::text(&out));
    let report = json(&out);
    let file = fs::read_dir(Path::new(path).join("bin")).unwrap().next().unwrap().unwrap().path();
    let mut own = cuobjdump_sass(&file);
    own.extend(cuobjdump_ptx(&file));
    own.sort_by_key(|c| c.replace('.', "").parse::<u32>().unwrap());
    own.dedup();
    assert!(own.contains(&"9.0".to_string()), "{own:?}");
    let gpu = &entry(&report, path)["gpu"];
    assert_eq!(gpu["newer_than_driver"], serde_json::json!(["9.0"]), "{gpu:#}");
    let answered: Vec<String> = answers(gpu).keys().cloned().collect();
    let rest: Vec<String> = own.iter().filter(|c| *c != "9.0").cloned().collect();
    assert_eq!(answered, rest, "{gpu:#}");
    let text = w.run(&["--substituter", &url, "--driver-version", "470.256.02", path]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("9.0 not answered: GPUs newer than driver 470.256.02"), "{text}");
    assert!(!text.contains("on 9.0:"), "{text}");
}
