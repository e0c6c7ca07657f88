//! Splitting a coverage run over machines and joining the parts: `--shard
//! K/N` keeps the inputs whose place in the whole input is K-1 modulo N
//! (every shard reads the same input, so the parts are disjoint and their
//! union is the input, whatever the machines), and `--merge` joins shard
//! reports into the report one run gives: paths in input order, the counts
//! recomputed, the shard mark gone. Reports of different questions
//! (caches, capabilities, driver, input) or a missing or repeated shard are
//! refused, naming the file.

use std::path::{Path, PathBuf};

use super::model::Report;

/// `--shard K/N`: this machine's part, 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which part (1..=N).
    pub k: usize,
    /// How many parts.
    pub n: usize,
}

impl Shard {
    /// Whether the input's `index`-th path (0-based) is this part's.
    pub fn takes(&self, index: usize) -> bool {
        index % self.n == self.k - 1
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

/// Parses `K/N` (1 <= K <= N).
pub fn parse_shard(text: &str) -> Result<Shard, String> {
    let bad = || format!("{text:?}: expected K/N with 1 <= K <= N (e.g. 2/3)");
    let (k, n) = text.split_once('/').ok_or_else(bad)?;
    let (k, n) = (k.parse::<usize>().map_err(|_| bad())?, n.parse::<usize>().map_err(|_| bad())?);
    if k == 0 || n == 0 || k > n {
        return Err(bad());
    }
    Ok(Shard { k, n })
}

/// Why shard reports cannot be joined.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// A file that cannot be read or is not a coverage report.
    #[error("{}: {reason}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        reason: String,
    },
    /// A report of another question, or a shard missing or repeated.
    #[error("{}: {reason}", file.display())]
    Mismatch {
        /// The file.
        file: PathBuf,
        /// What differs.
        reason: String,
    },
}

/// Reads one shard report.
pub fn read(file: &Path) -> Result<Report, MergeError> {
    let read_error = |reason: String| MergeError::Read { file: file.to_path_buf(), reason };
    let bytes = std::fs::read(file).map_err(|e| read_error(crate::error::describe_io(&e)))?;
    serde_json::from_slice(&bytes).map_err(|e| read_error(format!("not a coverage report: {e}")))
}

/// Joins shard reports (`(file, report)`) into one.
pub fn merge(parts: Vec<(PathBuf, Report)>) -> Result<Report, MergeError> {
    let mut parts = parts.into_iter();
    let Some((first_file, mut whole)) = parts.next() else {
        return Err(MergeError::Read {
            file: PathBuf::from("--merge"),
            reason: "no reports".into(),
        });
    };
    let mut shards = vec![(first_file.clone(), whole.shard.clone())];
    for (file, part) in parts {
        let mismatch = |what: &str| MergeError::Mismatch {
            file: file.clone(),
            reason: format!("{what} differ from {}'s", first_file.display()),
        };
        let same_caches = part.caches.len() == whole.caches.len()
            && part.caches.iter().zip(&whole.caches).all(|(a, b)| {
                (&a.url, a.priority, &a.store_dir) == (&b.url, b.priority, &b.store_dir)
            });
        if !same_caches {
            return Err(mismatch("the caches"));
        }
        if (part.version, &part.capabilities, &part.driver)
            != (whole.version, &whole.capabilities, &whole.driver)
        {
            return Err(mismatch("the capabilities or the driver"));
        }
        if part.bad_lines != whole.bad_lines {
            return Err(mismatch("the input's bad lines (another input?)"));
        }
        for (mine, theirs) in whole.caches.iter_mut().zip(part.caches) {
            if mine.unreachable.is_none() {
                mine.unreachable = theirs.unreachable;
            }
        }
        shards.push((file, part.shard.clone()));
        whole.paths.extend(part.paths);
    }
    check_shards(&shards)?;
    whole.paths.sort_by_key(|p| p.index);
    if let Some(w) = whole.paths.windows(2).find(|w| w[0].index == w[1].index) {
        return Err(MergeError::Mismatch {
            file: first_file,
            reason: format!("input path {} is in two reports", w[0].index),
        });
    }
    whole.shard = None;
    whole.summarise();
    Ok(whole)
}

/// Every shard 1..=N once, all of one N.
fn check_shards(shards: &[(PathBuf, Option<String>)]) -> Result<(), MergeError> {
    let mut seen: Vec<Shard> = Vec::new();
    for (file, mark) in shards {
        let bad = |reason: String| MergeError::Mismatch { file: file.clone(), reason };
        let mark =
            mark.as_deref().ok_or_else(|| bad("not a shard's report (no \"shard\")".into()))?;
        let shard = parse_shard(mark).map_err(bad)?;
        if seen.iter().any(|s| s.n != shard.n) {
            return Err(bad(format!("shard {shard} is not of the same split as the others")));
        }
        if seen.contains(&shard) {
            return Err(bad(format!("shard {shard} given twice")));
        }
        seen.push(shard);
    }
    let n = seen.first().map_or(0, |s| s.n);
    if let Some(k) = (1..=n).find(|k| !seen.iter().any(|s| s.k == *k)) {
        let file = shards[0].0.clone();
        return Err(MergeError::Mismatch { file, reason: format!("shard {k}/{n} is missing") });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_split_the_input_disjointly() {
        for bad in ["0/3", "4/3", "1", "a/b", "1/0"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
        let shards: Vec<Shard> = (1..=3).map(|k| parse_shard(&format!("{k}/3")).unwrap()).collect();
        for index in 0..100 {
            assert_eq!(shards.iter().filter(|s| s.takes(index)).count(), 1);
        }
    }
}
