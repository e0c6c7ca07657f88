//! One target per library (docs/dlopen.md, "One finding per library"):
//! a file that holds both `libX11.so` and `libX11.so.6` tries one name and
//! then the other for one library, and a file that holds its own names
//! (`libcupti.so` in `libcupti.so.12`: a log line, a self-`dlopen` to pin
//! itself) loads nothing new with them. Reporting each name apart gave two
//! findings per missing library and told a library to add its own package.

use super::{Scan, Target};

/// The link name of a soname: `libX11.so.6` -> `libX11.so`, `libX11.so` ->
/// itself; `None` when the name is not `NAME.so` followed by numeric parts
/// (`libnvrtc-builtins.so.13.0` -> `libnvrtc-builtins.so`; a plugin name
/// like `nvshmem_bootstrap_mpi.so` is its own link name).
pub fn link_name(name: &str) -> Option<&str> {
    let at = name.rfind(".so")?;
    let (stem, rest) = name.split_at(at + 3);
    let numeric = rest.is_empty()
        || rest.strip_prefix('.').is_some_and(|v| {
            v.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        });
    numeric.then_some(stem)
}

/// Drops the targets that are the caller's own names (`own`: its SONAME
/// and its file name; their link names count too), then folds the targets
/// of one link name into one: the asked names of all of them in file
/// order, the most specific name as the soname, the strongest need, the
/// first origin.
pub fn fold(scan: &mut Scan, own: &[&str]) {
    let own_links: Vec<&str> = own.iter().filter_map(|n| link_name(n)).collect();
    let is_own = |t: &Target| {
        t.asked.iter().chain(std::iter::once(&t.soname)).any(|n| {
            own.contains(&n.as_str())
                || (n.ends_with(".so") && link_name(n).is_some_and(|l| own_links.contains(&l)))
        })
    };
    let targets = std::mem::take(&mut scan.targets);
    let mut out: Vec<Target> = Vec::with_capacity(targets.len());
    for t in targets {
        if is_own(&t) {
            continue;
        }
        let key = link_name(&t.soname);
        let twin = key.and_then(|k| out.iter_mut().find(|o| link_name(&o.soname) == Some(k)));
        match twin {
            Some(o) => merge(o, t),
            None => out.push(t),
        }
    }
    scan.targets = out;
}

/// Folds `t` into `into` (same link name).
fn merge(into: &mut Target, t: Target) {
    for a in t.asked {
        if !into.asked.contains(&a) {
            into.asked.push(a);
        }
    }
    // `libX.so.6` says more than `libX.so`: it is the name a package's
    // soname link has, and the one baselines remember.
    if t.soname.len() > into.soname.len() {
        into.soname = t.soname;
    }
    into.need = into.need.min(t.need);
    into.same_release |= t.same_release;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlopen::{Need, Origin};

    fn target(name: &str, need: Need) -> Target {
        Target {
            soname: name.into(),
            asked: vec![name.into()],
            origin: Origin::Section { section: ".rodata".into(), offset: 0 },
            need,
            same_release: false,
        }
    }

    #[test]
    fn link_names() {
        assert_eq!(link_name("libX11.so.6"), Some("libX11.so"));
        assert_eq!(link_name("libX11.so"), Some("libX11.so"));
        assert_eq!(link_name("libnvrtc-builtins.so.13.0"), Some("libnvrtc-builtins.so"));
        assert_eq!(link_name("libfoo.so.1a"), None);
        assert_eq!(link_name("foo"), None);
    }

    #[test]
    fn twins_fold_and_own_names_go() {
        let mut scan = Scan {
            targets: vec![
                target("libX11.so", Need::Optional),
                target("libcupti.so", Need::Optional),
                target("libGL.so.1", Need::Optional),
                target("libX11.so.6", Need::Recommended),
                target("libGL.so", Need::Optional),
                target("libcupti.so.12", Need::Optional),
            ],
            ..Scan::default()
        };
        fold(&mut scan, &["libcupti.so.12", "libcupti.so.2025.1.1"]);
        let names: Vec<&str> = scan.targets.iter().map(|t| t.soname.as_str()).collect();
        assert_eq!(names, ["libX11.so.6", "libGL.so.1"]);
        assert_eq!(scan.targets[0].asked, ["libX11.so", "libX11.so.6"]);
        assert_eq!(scan.targets[0].need, Need::Recommended);
        assert_eq!(scan.targets[1].asked, ["libGL.so.1", "libGL.so"]);
    }
}
