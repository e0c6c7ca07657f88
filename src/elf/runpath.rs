//! Plans the new RUNPATH value: pure string logic, no I/O.
//!
//! Rules (reference `upstream-hooks.md` §4, with our deliberate deviations):
//! - the driver entry (`/run/opengl-driver/lib` or `--driver-link DIR` + `/lib`)
//!   goes first, followed by the old RUNPATH (or, without one, RPATH) entries;
//! - **idempotent**: when the driver entry is already *present* anywhere, the
//!   file is left untouched byte for byte. "Present", not "first", because
//!   autoAddCudaCompatRunpath runs after us and puts the `cuda_compat`
//!   directory in front of the driver entry on purpose; a second run of this
//!   hook must not undo that;
//! - **no empty entries**: upstream writes `/run/opengl-driver/lib:` for a file
//!   without RUNPATH, and an empty entry makes glibc search the current
//!   directory. When we write, empty entries are dropped, and so are later
//!   duplicates of an entry (glibc stops at the first match, so a repeat can
//!   never be used);
//! - `--replace-stubs` (removeStubsFromRunpathHook): the first entry matching
//!   the glob `*-cuda*/lib/stubs` becomes the driver entry, later matches are
//!   dropped, and so is the stub entry when the driver entry came earlier;
//! - the result is written as DT_RUNPATH (an existing DT_RPATH converted),
//!   or as DT_RPATH with `--force-rpath`;
//! - `--cuda-compat DIR` (autoAddCudaCompatRunpath, which upstream runs as a
//!   second patchelf pass after addDriverRunpath): DIR first, the driver entry
//!   second, then the old entries without those two, in one rewrite. The file
//!   is left alone when it already reads exactly so (a second run changes
//!   nothing); "present anywhere" is not enough here, because the compat
//!   folder only works in front of the driver's `libcuda.so`.
//! - appended entries (`--dlopen-search`: the folders that hold a library
//!   the file dlopens and cannot find otherwise) go **last**, after the old
//!   entries, each once: the entries a maintainer wrote (and the driver
//!   entry) keep their precedence, and an appended folder only serves the
//!   names nothing before it provides. A file that already holds the driver
//!   entry and every appended entry is left alone; one that holds the driver
//!   entry but misses an appended entry gets only the missing entries at
//!   the end (its old order, a compat folder in front included, is kept).

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
    /// Replace `*-cuda*/lib/stubs` entries (removeStubsFromRunpath).
    pub replace_stubs: bool,
    /// Write DT_RPATH instead of DT_RUNPATH.
    pub force_rpath: bool,
    /// Entries to append after the old ones, in this order, when absent
    /// (the dlopen folders).
    pub append_entries: Vec<Vec<u8>>,
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

/// Whether an entry matches the bash glob `*-cuda*/lib/stubs`.
pub fn is_stub_entry(entry: &[u8]) -> bool {
    entry.strip_suffix(b"/lib/stubs").is_some_and(|head| head.windows(5).any(|w| w == b"-cuda"))
}

/// Plans the new value from the current one (`None`: no RUNPATH or RPATH).
pub fn plan(current: Option<(&[u8], Tag)>, opts: &Options) -> Plan {
    let driver = opts.driver_entry.as_slice();
    let old: Vec<&[u8]> = match current {
        Some((value, _)) => value.split(|&b| b == b':').collect(),
        None => Vec::new(),
    };
    let has_stub = opts.replace_stubs && old.iter().any(|e| is_stub_entry(e));
    let missing: Vec<&[u8]> = opts
        .append_entries
        .iter()
        .map(Vec::as_slice)
        .filter(|e| !e.is_empty() && !old.contains(e))
        .collect();
    let mut wanted: Vec<&[u8]> = Vec::with_capacity(old.len() + 2 + missing.len());
    if !has_stub && opts.compat_entry.is_none() && old.contains(&driver) {
        if missing.is_empty() {
            return Plan::Unchanged;
        }
        // The driver entry is present: its place (and a compat folder in
        // front of it) is kept; only the missing folders are appended.
        wanted.extend(old.iter().copied());
    } else if let Some(compat) = &opts.compat_entry {
        // The stub entries go: the driver entry is already in front of them.
        wanted.push(compat);
        wanted.push(driver);
        wanted.extend(old.iter().copied().filter(|e| !(has_stub && is_stub_entry(e))));
    } else if has_stub {
        let mut replaced = false;
        for e in &old {
            if is_stub_entry(e) {
                if !replaced {
                    wanted.push(driver);
                    replaced = true;
                }
            } else {
                wanted.push(e);
            }
        }
    } else {
        wanted.push(driver);
        wanted.extend(old.iter().copied());
    }
    wanted.extend(missing);
    let mut out: Vec<&[u8]> = Vec::with_capacity(wanted.len());
    for e in wanted {
        if !e.is_empty() && !out.contains(&e) {
            out.push(e);
        }
    }
    let value = out.join(&b':');
    let tag = if opts.force_rpath { Tag::Rpath } else { Tag::Runpath };
    if current == Some((value.as_slice(), tag)) {
        return Plan::Unchanged;
    }
    if value.len() > MAX_RUNPATH {
        return Plan::TooLong(value.len());
    }
    Plan::Set { value, tag }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            driver_entry: b"/run/opengl-driver/lib".to_vec(),
            compat_entry: None,
            replace_stubs: false,
            force_rpath: false,
            append_entries: Vec::new(),
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
    fn stubs_are_replaced_in_place() {
        let o = Options { replace_stubs: true, ..opts() };
        let stub = b"/nix/store/h-cuda_cudart-12/lib/stubs";
        assert!(is_stub_entry(stub));
        assert!(is_stub_entry(b"/nix/store/h-cudart/lib/stubs"));
        assert!(!is_stub_entry(b"/nix/store/h-nvidia/lib/stubs"));
        assert!(!is_stub_entry(b"/nix/store/h-cuda/lib"));
        let cur = [&b"/a:"[..], stub, b":/b:", stub].concat();
        assert_eq!(set(plan(Some((&cur, Tag::Runpath)), &o)).0, "/a:/run/opengl-driver/lib:/b");
        let cur = [&b"/run/opengl-driver/lib:"[..], stub].concat();
        assert_eq!(set(plan(Some((&cur, Tag::Runpath)), &o)).0, "/run/opengl-driver/lib");
        // Without the option, stubs stay and the driver is prepended.
        let cur = [&b"/a:"[..], stub].concat();
        assert!(set(plan(Some((&cur, Tag::Runpath)), &opts())).0.ends_with("/lib/stubs"));
    }

    #[test]
    fn compat_goes_first_and_driver_second_once() {
        let c = b"/nix/store/h-cuda_compat/compat".to_vec();
        let o = Options { compat_entry: Some(c.clone()), ..opts() };
        let want = "/nix/store/h-cuda_compat/compat:/run/opengl-driver/lib";
        assert_eq!(set(plan(None, &o)).0, want);
        // After the plain hook, and in any order: one rewrite puts them right.
        let (v, _) = set(plan(Some((b"/run/opengl-driver/lib:/a", Tag::Runpath)), &o));
        assert_eq!(v, format!("{want}:/a"));
        let (v, _) = set(plan(
            Some((b"/a:/run/opengl-driver/lib:/nix/store/h-cuda_compat/compat", Tag::Rpath)),
            &o,
        ));
        assert_eq!(v, format!("{want}:/a"));
        // Idempotent.
        assert_eq!(
            plan(Some((format!("{want}:/a").as_bytes(), Tag::Runpath)), &o),
            Plan::Unchanged
        );
        // Stubs go when asked.
        let so = Options { replace_stubs: true, ..o.clone() };
        let (v, _) = set(plan(Some((b"/a:/nix/store/h-cuda_cudart/lib/stubs", Tag::Runpath)), &so));
        assert_eq!(v, format!("{want}:/a"));
        // The plain hook after it leaves the file alone.
        assert_eq!(
            plan(Some((format!("{want}:/a").as_bytes(), Tag::Runpath)), &opts()),
            Plan::Unchanged
        );
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
