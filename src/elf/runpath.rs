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
    if !has_stub && opts.compat_entry.is_none() && old.contains(&driver) {
        return Plan::Unchanged;
    }
    let mut wanted: Vec<&[u8]> = Vec::with_capacity(old.len() + 2);
    if let Some(compat) = &opts.compat_entry {
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
    fn absurd_length_is_refused() {
        let long = vec![b'x'; MAX_RUNPATH + 1];
        assert!(matches!(plan(Some((&long, Tag::Runpath)), &opts()), Plan::TooLong(_)));
    }
}
