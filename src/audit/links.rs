//! Hard links of one inode in one folder: one file to the loader (same
//! bytes, same `$ORIGIN`), so one set of findings. Mesa ships each DRI
//! driver as one inode with 13 names; each name used to repeat every
//! finding, 13 copies of the same three warnings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::finding::Finding;
use super::FileFacts;

/// The file's device and inode when it has other hard links; `None` for
/// a file with one name (or when it cannot be read: nothing to fold).
pub fn inode(local: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(local).ok()?;
    (m.nlink() > 1).then(|| (m.dev(), m.ino()))
}

/// At most this many other names are listed in a kept finding.
const NAMES_SHOWN: usize = 3;

/// Keeps the findings of the first name (by path) of each group of hard
/// links in one folder, drops the others' and says on each kept finding how
/// many other names share it.
pub fn fold(files: &[FileFacts], findings: &mut Vec<Finding>) {
    let mut groups: BTreeMap<(u64, u64, &Path), Vec<&PathBuf>> = BTreeMap::new();
    for f in files {
        if let Some((dev, ino)) = f.inode {
            let folder = f.path.parent().unwrap_or(Path::new(""));
            groups.entry((dev, ino, folder)).or_default().push(&f.path);
        }
    }
    let mut others: BTreeMap<&PathBuf, ()> = BTreeMap::new();
    let mut notes: BTreeMap<&PathBuf, String> = BTreeMap::new();
    for mut names in groups.into_values().filter(|g| g.len() > 1) {
        names.sort();
        let (first, rest) = names.split_first().expect("a group has a name");
        let mut shown: Vec<String> = rest
            .iter()
            .take(NAMES_SHOWN)
            .map(|p| p.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned()))
            .collect();
        if rest.len() > NAMES_SHOWN {
            shown.push("...".into());
        }
        let n = rest.len();
        let noun = if n == 1 { "hard link" } else { "hard links" };
        notes.insert(first, format!(" (also {n} other {noun} of this file: {})", shown.join(", ")));
        others.extend(rest.iter().map(|p| (*p, ())));
    }
    if notes.is_empty() {
        return;
    }
    findings.retain(|f| !others.contains_key(&f.path));
    for f in findings.iter_mut() {
        if let Some(note) = notes.get(&f.path) {
            f.message.push_str(note);
        }
    }
}
