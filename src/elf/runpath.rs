//! Plans the new RUNPATH value: pure string logic, no I/O. One plan per
//! file: every fix asked for is applied to the file's entries in upstream's
//! order, and the result is written once (docs/auto-add-driver-runpath.md,
//! "One plan per file").
//!
//! The fixes, in the order Nixpkgs' hooks run them:
//! 1. **driver** (addDriverRunpath; always): the driver entry goes first
//!    unless the search path already holds it anywhere (upstream prepends it
//!    again on every run; "present anywhere", not "first", because the
//!    cuda_compat folder goes in front of it on purpose);
//! 2. **cuda_compat** (`--cuda-compat DIR`, autoAddCudaCompatRunpath, which
//!    upstream registers after the driver hook): DIR first, the driver entry
//!    second, the other entries after them;
//! 3. **stubs** (`--remove-stubs`, removeStubsFromRunpath, which upstream
//!    runs last): an entry matching `*-cuda*/stubs` or `*-cuda*-stubs/lib*`
//!    becomes the driver entry unless the driver entry came earlier, in which
//!    case it is dropped ([`StubStep`] records upstream's per-entry verdict);
//! 4. **appended** entries (`$ORIGIN` with `--append-origin`, the dlopen
//!    folders of `--dlopen-search`) go last, each once, when absent.
//!
//! Then, when anything changed, empty entries (an empty entry makes glibc
//! search the working directory) and later duplicates (glibc stops at the
//! first match, so a repeat is never used) are dropped, and the value is
//! written as DT_RUNPATH (DT_RPATH with `--force-rpath`). When no fix changes
//! an entry the file is left byte for byte as it is.
//!
//! Because the driver fix is part of every plan, the plan of a union of fixes
//! is the plan of one fix applied to the result of another, in either order,
//! and a plan applied to its own result changes nothing: separate runs give
//! the bytes one run gives.

/// Which dynamic tag holds the search path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Tag {
    /// DT_RUNPATH.
    Runpath,
    /// DT_RPATH.
    Rpath,
}

impl Tag {
    /// The dynamic tag number.
    pub fn dt(self) -> i64 {
        match self {
            Tag::Runpath => super::DT_RUNPATH,
            Tag::Rpath => super::DT_RPATH,
        }
    }
}

/// Longest RUNPATH we write. glibc has no limit, but a search path of more
/// than 64 KiB is a broken build, not a configuration, and refusing it keeps
/// a corrupt input from growing without bound.
pub const MAX_RUNPATH: usize = 64 * 1024;

/// What the planner needs to know.
#[derive(Clone, Debug)]
pub struct Options {
    /// The driver entry, e.g. `/run/opengl-driver/lib`.
    pub driver_entry: Vec<u8>,
    /// The `cuda_compat` folder to put before the driver entry.
    pub compat_entry: Option<Vec<u8>>,
    /// Replace or drop the CUDA stubs entries (removeStubsFromRunpath).
    pub remove_stubs: bool,
    /// Write DT_RPATH instead of DT_RUNPATH.
    pub force_rpath: bool,
    /// Entries to append after the old ones, in this order, when absent
    /// (the dlopen folders).
    pub append_entries: Vec<Vec<u8>>,
    /// The search path of the original the file was made from, when the
    /// file is our writer's output (its undo record proven; `Some` of an
    /// empty value when the original had none). The entries after the
    /// last of the original's (and the driver and `cuda_compat` entries)
    /// were then appended by our runs, and `$ORIGIN` goes first among
    /// them, as one run puts it: an `--append-origin` run after a
    /// `--dlopen-search` run gives the bytes of the two in one run.
    pub made_from: Option<Vec<u8>>,
}

/// The planner's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to do: leave the file byte-identical.
    Unchanged,
    /// Write `value` under `tag`.
    Set {
        /// The new search path.
        value: Vec<u8>,
        /// The tag to write it under.
        tag: Tag,
    },
    /// The result would exceed [`MAX_RUNPATH`].
    TooLong(usize),
}

/// What removeStubsFromRunpath does with one entry, in the order it meets
/// them (its `NIX_DEBUG` lines say the same).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StubStep {
    /// Not a stubs entry: kept.
    Keep(Vec<u8>),
    /// The first stubs entry before any driver entry: replaced by it.
    Replace(Vec<u8>),
    /// A stubs entry after the driver entry: dropped.
    Drop(Vec<u8>),
}

/// The planner's verdict and what the stubs pass did on the way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// The verdict.
    pub plan: Plan,
    /// The stubs pass's per-entry steps (empty unless asked for).
    pub stub_steps: Vec<StubStep>,
}

/// Whether an entry matches removeStubsFromRunpath's bash patterns
/// `*-cuda*/stubs` (a `stubs` folder of a CUDA package) or
/// `*-cuda*-stubs/lib*` (the `lib` folder of a CUDA package's `stubs`
/// output). `*` matches any text, `/` included.
pub fn is_stub_entry(entry: &[u8]) -> bool {
    let Some(cuda) = find(entry, b"-cuda") else { return false };
    let after = &entry[cuda + b"-cuda".len()..];
    after.ends_with(b"/stubs") || find(after, b"-stubs/lib").is_some()
}

/// Whether an entry names a stubs folder that [`is_stub_entry`] does not
/// match (no `-cuda` in the store name, say): upstream's hook keeps it, and
/// so do we, but the run says so.
pub fn is_other_stubs_folder(entry: &[u8]) -> bool {
    let e = entry.strip_suffix(b"/").unwrap_or(entry);
    let stubs = e.ends_with(b"/stubs")
        || e == b"stubs"
        || find(e, b"/stubs/").is_some()
        || find(e, b"-stubs/lib").is_some();
    stubs && !is_stub_entry(entry)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Plans the new value from the current one (`None`: no RUNPATH or RPATH).
pub fn plan(current: Option<(&[u8], Tag)>, opts: &Options) -> Plan {
    plan_steps(current, opts).plan
}

/// [`plan`], with the stubs pass's steps.
pub fn plan_steps(current: Option<(&[u8], Tag)>, opts: &Options) -> Planned {
    let driver = opts.driver_entry.as_slice();
    let old: Vec<&[u8]> = match current {
        Some((value, _)) if !value.is_empty() => value.split(|&b| b == b':').collect(),
        _ => Vec::new(),
    };
    let mut list = old.clone();
    // 1. The driver entry.
    if !list.contains(&driver) {
        list.insert(0, driver);
    }
    // 2. cuda_compat first, the driver entry second.
    if let Some(compat) = &opts.compat_entry {
        list.retain(|e| *e != compat.as_slice() && *e != driver);
        list.splice(0..0, [compat.as_slice(), driver]);
    }
    // 3. The stubs, as removeStubsFromRunpath walks them.
    let mut stub_steps = Vec::new();
    if opts.remove_stubs {
        let mut seen_driver = false;
        let mut kept = Vec::with_capacity(list.len());
        for e in list {
            if is_stub_entry(e) {
                if seen_driver {
                    stub_steps.push(StubStep::Drop(e.to_vec()));
                } else {
                    stub_steps.push(StubStep::Replace(e.to_vec()));
                    kept.push(driver);
                    seen_driver = true;
                }
            } else {
                stub_steps.push(StubStep::Keep(e.to_vec()));
                kept.push(e);
                seen_driver |= e == driver;
            }
        }
        list = kept;
    }
    // 4. Appended entries, each once; `$ORIGIN` first among all our runs'.
    for e in &opts.append_entries {
        if !e.is_empty() && !list.contains(&e.as_slice()) {
            list.push(e);
        }
    }
    if let Some(made_from) = &opts.made_from {
        let prepended = [Some(driver), opts.compat_entry.as_deref()];
        origin_first_among_appended(&mut list, made_from, &prepended);
    }
    let tag = if opts.force_rpath { Tag::Rpath } else { Tag::Runpath };
    let plan = if list == old {
        Plan::Unchanged
    } else {
        let mut out: Vec<&[u8]> = Vec::with_capacity(list.len());
        for e in list {
            if !e.is_empty() && !out.contains(&e) {
                out.push(e);
            }
        }
        let value = out.join(&b':');
        if current == Some((value.as_slice(), tag)) {
            Plan::Unchanged
        } else if value.len() > MAX_RUNPATH {
            Plan::TooLong(value.len())
        } else {
            Plan::Set { value, tag }
        }
    };
    Planned { plan, stub_steps }
}

/// The entry `--append-origin` appends (buildRedist's `appendRunpaths`).
pub const ORIGIN: &[u8] = b"$ORIGIN";

/// Moves `$ORIGIN` to the front of the entries our runs appended: the
/// longest tail of `list` holding none of the original's entries (`made_from`)
/// and none of the `prepended` ones.
fn origin_first_among_appended(
    list: &mut Vec<&[u8]>,
    made_from: &[u8],
    prepended: &[Option<&[u8]>],
) {
    let original: Vec<&[u8]> = made_from.split(|&b| b == b':').collect();
    let appended = |e: &&[u8]| !original.contains(e) && !prepended.contains(&Some(*e));
    let from = list.len() - list.iter().rev().take_while(|e| appended(e)).count();
    if let Some(at) = list[from..].iter().position(|e| *e == ORIGIN) {
        let origin = list.remove(from + at);
        list.insert(from, origin);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            driver_entry: b"/run/opengl-driver/lib".to_vec(),
            compat_entry: None,
            remove_stubs: false,
            force_rpath: false,
            append_entries: Vec::new(),
            made_from: None,
        }
    }

    fn set(p: Plan) -> (String, Tag) {
        match p {
            Plan::Set { value, tag } => (String::from_utf8(value).unwrap(), tag),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_runpath_gets_only_the_driver_and_no_empty_entry() {
        assert_eq!(set(plan(None, &opts())).0, "/run/opengl-driver/lib");
        assert_eq!(set(plan(Some((b"", Tag::Runpath)), &opts())).0, "/run/opengl-driver/lib");
    }

    #[test]
    fn driver_is_prepended_and_rpath_converted() {
        let (v, t) = set(plan(Some((b"/a:$ORIGIN/../lib", Tag::Rpath)), &opts()));
        assert_eq!(v, "/run/opengl-driver/lib:/a:$ORIGIN/../lib");
        assert_eq!(t, Tag::Runpath);
        let o = Options { force_rpath: true, ..opts() };
        assert_eq!(set(plan(Some((b"/a", Tag::Rpath)), &o)).1, Tag::Rpath);
    }

    #[test]
    fn present_anywhere_is_idempotent() {
        assert_eq!(
            plan(Some((b"/run/opengl-driver/lib:/a", Tag::Runpath)), &opts()),
            Plan::Unchanged
        );
        assert_eq!(
            plan(Some((b"/compat:/run/opengl-driver/lib", Tag::Runpath)), &opts()),
            Plan::Unchanged
        );
        assert_eq!(plan(Some((b"/run/opengl-driver/lib", Tag::Rpath)), &opts()), Plan::Unchanged);
    }

    #[test]
    fn empty_and_duplicate_entries_are_dropped_when_writing() {
        assert_eq!(
            set(plan(Some((b"/a::/b:/a:", Tag::Runpath)), &opts())).0,
            "/run/opengl-driver/lib:/a:/b"
        );
    }

    #[test]
    fn stub_patterns_are_upstreams_globs() {
        for yes in [
            &b"/nix/store/h-cuda_cudart-12/lib/stubs"[..],
            b"/nix/store/h-cuda12.8-cuda_cudart-12.8-stubs/lib",
            b"/nix/store/h-cuda12.8-libcublas-stubs/lib64",
            b"/nix/store/h-cuda_nvml_dev/stubs",
            b"/x-cuda/stubs",
        ] {
            assert!(is_stub_entry(yes), "{}", String::from_utf8_lossy(yes));
            assert!(!is_other_stubs_folder(yes));
        }
        for no in [
            &b"/nix/store/h-nvidia/lib/stubs"[..],
            b"/nix/store/h-cuda/lib",
            b"/nix/store/h-cudart-stubs",
            b"/nix/store/h-cuda_cudart/stubs/x",
            b"/nix/store/h-libcuda-stubs",
        ] {
            assert!(!is_stub_entry(no), "{}", String::from_utf8_lossy(no));
        }
        // Stubs folders outside the patterns: kept, and said.
        assert!(is_other_stubs_folder(b"/nix/store/h-nvidia/lib/stubs"));
        assert!(is_other_stubs_folder(b"/nix/store/h-nvidia-stubs/lib"));
        assert!(is_other_stubs_folder(b"/opt/cuda/lib64/stubs/"));
        assert!(!is_other_stubs_folder(b"/nix/store/h-cuda/lib"));
    }

    #[test]
    fn stubs_as_upstream_after_the_driver_hook() {
        let o = Options { remove_stubs: true, ..opts() };
        let stub = b"/nix/store/h-cuda_cudart-12/lib/stubs";
        let cur = [&b"/a:"[..], stub, b":/b:", stub].concat();
        let p = plan_steps(Some((&cur, Tag::Runpath)), &o);
        // The driver hook prepends the driver entry; the stubs pass then
        // meets it first and drops every stubs entry.
        assert_eq!(set(p.plan).0, "/run/opengl-driver/lib:/a:/b");
        assert_eq!(
            p.stub_steps,
            [
                StubStep::Keep(b"/run/opengl-driver/lib".to_vec()),
                StubStep::Keep(b"/a".to_vec()),
                StubStep::Drop(stub.to_vec()),
                StubStep::Keep(b"/b".to_vec()),
                StubStep::Drop(stub.to_vec()),
            ]
        );
        // A driver entry after the stubs entry: the first stubs entry
        // becomes the driver entry, the later copy goes.
        let cur = [&b"/a:"[..], stub, b":/run/opengl-driver/lib"].concat();
        let p = plan_steps(Some((&cur, Tag::Runpath)), &o);
        assert_eq!(set(p.plan).0, "/a:/run/opengl-driver/lib");
        assert_eq!(p.stub_steps[1], StubStep::Replace(stub.to_vec()));
        // Nothing to remove, the driver present: untouched.
        assert_eq!(plan(Some((b"/run/opengl-driver/lib:/a", Tag::Runpath)), &o), Plan::Unchanged);
        // Without the option, stubs stay and the driver is prepended.
        let cur = [&b"/a:"[..], stub].concat();
        assert!(set(plan(Some((&cur, Tag::Runpath)), &opts())).0.ends_with("/lib/stubs"));
    }

    /// Every combination of fixes, applied as separate runs in every order
    /// (a plain run among them), gives the bytes of one run with all of
    /// them; and a run on its own result changes nothing. The one order that
    /// matters: two appending runs append in their run order.
    #[test]
    fn separate_runs_in_any_order_give_one_runs_bytes() {
        let s1 = "/nix/store/h-cuda12.8-cuda_cudart-12.8-stubs/lib";
        let s2 = "/nix/store/h-cuda_nvml/lib/stubs";
        let d = "/run/opengl-driver/lib";
        let c = "/nix/store/h-cuda_compat/compat";
        let inputs: Vec<Option<String>> = vec![
            None,
            Some(String::new()),
            Some("$ORIGIN".into()),
            Some(format!("/a:{s1}:/b:{s2}")),
            Some(format!("{s1}:$ORIGIN/../lib::/a")),
            Some(format!("/a:{s1}:{d}:/b")),
            Some(format!("{d}:{s2}:/a:/a")),
            Some(format!("/a:{c}:{d}:{s1}")),
            Some(format!("{c}:/x:{d}:/y/dl")),
        ];
        // `made_from`: the input once a run has changed it (the file is then
        // our writer's output, made from that input).
        let fixes = |mask: u32, made_from: Option<Vec<u8>>| Options {
            remove_stubs: mask & 1 != 0,
            compat_entry: (mask & 2 != 0).then(|| c.as_bytes().to_vec()),
            append_entries: [(4, "$ORIGIN"), (8, "/y/dl")]
                .iter()
                .filter(|(bit, _)| mask & bit != 0)
                .map(|(_, e)| e.as_bytes().to_vec())
                .collect(),
            made_from,
            ..opts()
        };
        let apply = |cur: &Option<(Vec<u8>, Tag)>, o: &Options| -> Option<(Vec<u8>, Tag)> {
            match plan(cur.as_ref().map(|(v, t)| (v.as_slice(), *t)), o) {
                Plan::Unchanged => cur.clone(),
                Plan::Set { value, tag } => Some((value, tag)),
                Plan::TooLong(_) => unreachable!(),
            }
        };
        for input in &inputs {
            let start = input.as_ref().map(|v| (v.as_bytes().to_vec(), Tag::Runpath));
            let original = Some(input.clone().unwrap_or_default().into_bytes());
            let made_from =
                |cur: &Option<(Vec<u8>, Tag)>| (*cur != start).then(|| original.clone()).flatten();
            for mask in 0..16u32 {
                let once = apply(&start, &fixes(mask, None));
                let again = apply(&once, &fixes(mask, made_from(&once)));
                assert_eq!(again, once, "not idempotent: {input:?} {mask}");
                // Each fix as its own run, plus a plain run, in every order
                // (the dlopen folder's run before `$ORIGIN`'s too).
                let mut bits: Vec<u32> = (0..4).map(|b| 1 << b).filter(|b| mask & b != 0).collect();
                bits.push(0);
                for order in permutations(&bits) {
                    let mut cur = start.clone();
                    for bit in order {
                        cur = apply(&cur, &fixes(bit, made_from(&cur)));
                    }
                    assert_eq!(cur, once, "{input:?} mask {mask}");
                }
            }
        }
    }

    fn permutations(items: &[u32]) -> Vec<Vec<u32>> {
        if items.len() <= 1 {
            return vec![items.to_vec()];
        }
        let mut all = Vec::new();
        for (i, &first) in items.iter().enumerate() {
            let rest: Vec<u32> =
                items.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, &x)| x).collect();
            for mut p in permutations(&rest) {
                p.insert(0, first);
                all.push(p);
            }
        }
        all
    }

    #[test]
    fn appended_entries_go_last_once_and_keep_the_old_order() {
        let o = Options { append_entries: vec![b"/s/a".to_vec(), b"/s/b".to_vec()], ..opts() };
        assert_eq!(set(plan(None, &o)).0, "/run/opengl-driver/lib:/s/a:/s/b");
        assert_eq!(
            set(plan(Some((b"$ORIGIN:/s/b", Tag::Rpath)), &o)),
            ("/run/opengl-driver/lib:$ORIGIN:/s/b:/s/a".into(), Tag::Runpath)
        );
        // The driver entry present (a compat folder before it): only the
        // missing folder is appended, nothing moves.
        let cur = b"/compat:/run/opengl-driver/lib:/x";
        assert_eq!(
            set(plan(Some((cur, Tag::Runpath)), &o)).0,
            format!("{}:/s/a:/s/b", "/compat:/run/opengl-driver/lib:/x")
        );
        // Everything present: left alone, whatever the order.
        let cur = b"/s/b:/run/opengl-driver/lib:/s/a";
        assert_eq!(plan(Some((cur, Tag::Runpath)), &o), Plan::Unchanged);
        // With the compat folder: compat, driver, old, appended.
        let c = Options { compat_entry: Some(b"/c".to_vec()), ..o.clone() };
        assert_eq!(
            set(plan(Some((b"/x", Tag::Runpath)), &c)).0,
            "/c:/run/opengl-driver/lib:/x:/s/a:/s/b"
        );
        let done = b"/c:/run/opengl-driver/lib:/x:/s/a:/s/b";
        assert_eq!(plan(Some((done, Tag::Runpath)), &c), Plan::Unchanged);
        // An appended folder equal to the driver entry is not repeated.
        let d = Options { append_entries: vec![b"/run/opengl-driver/lib".to_vec()], ..opts() };
        assert_eq!(set(plan(None, &d)).0, "/run/opengl-driver/lib");
    }

    #[test]
    fn absurd_length_is_refused() {
        let long = vec![b'x'; MAX_RUNPATH + 1];
        assert!(matches!(plan(Some((&long, Tag::Runpath)), &opts()), Plan::TooLong(_)));
    }
}
