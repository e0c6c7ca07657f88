//! `--dlopen-search DIR[:DIR...]`: the folders that may provide a library a
//! file loads with `dlopen` and cannot find otherwise.
//!
//! Each folder is listed once, when the run starts (names only, no `stat`
//! per entry), so that a run over thousands of files asks the file system
//! nothing more per file than the few candidates it needs: a name present
//! in a folder is then opened and its ELF header read (20 bytes), because
//! glibc's loader skips a file of another class, byte order or machine and
//! goes on to the next folder (a 32-bit `libfoo.so.1` next to a 64-bit
//! program does not serve it), and so does this search. The header checks
//! are remembered for the run.
//!
//! The folders are taken as given (no link resolved): they become RUNPATH
//! entries as typed, like `--driver-link`. So each must be absolute, hold
//! no `:` (the loader splits RUNPATH there) and be a readable folder when
//! the run starts; anything else is an error before any file is written.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::elf::machine::Target;
use crate::error::PathError;

/// The search folders of a run, in the order given.
#[derive(Debug, Default)]
pub struct SearchFolders {
    folders: Vec<Folder>,
    /// `(folder index, name)` -> the ELF target of that file (`None`: not
    /// a readable ELF file), read once per run.
    targets: Mutex<HashMap<(usize, OsString), Option<Target>>>,
}

/// One folder: its RUNPATH entry and the names of the files in it.
#[derive(Debug)]
struct Folder {
    path: PathBuf,
    names: HashSet<OsString>,
}

/// Why a `--dlopen-search` folder is refused.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// Not absolute, or holds `:`.
    #[error("{}: {reason}", path.display())]
    Unusable {
        /// The folder as given.
        path: PathBuf,
        /// Why it cannot be a RUNPATH entry.
        reason: &'static str,
    },
    /// Missing, not a folder, or unreadable.
    #[error("{0}")]
    Io(#[from] PathError),
}

/// Splits `DIR[:DIR...]` values (the option may be given more than once)
/// into folders, dropping empty pieces (`a::b`, a trailing `:`), as a shell
/// search path would.
pub fn split_arguments(values: &[OsString]) -> Vec<PathBuf> {
    values
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b':'))
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(OsStr::from_bytes(p)))
        .collect()
}

impl SearchFolders {
    /// Lists each folder (given once each; a repeat is dropped). Fails on
    /// the first folder that is relative, missing, not a folder or not
    /// readable, naming it.
    pub fn open(dirs: &[PathBuf]) -> Result<SearchFolders, SearchError> {
        let mut folders: Vec<Folder> = Vec::with_capacity(dirs.len());
        for dir in dirs {
            let path = PathBuf::from(OsStr::from_bytes(&super::folder_entry(dir)));
            if !path.is_absolute() {
                return Err(SearchError::Unusable {
                    path: dir.clone(),
                    reason: "a --dlopen-search folder must be an absolute path (it becomes a RUNPATH entry, and a relative entry is read against the working directory at run time)",
                });
            }
            if dir.as_os_str().as_bytes().contains(&b':') {
                return Err(SearchError::Unusable {
                    path: dir.clone(),
                    reason: "a --dlopen-search folder must not contain ':' (the loader splits RUNPATH at ':')",
                });
            }
            if folders.iter().any(|f| f.path == path) {
                continue;
            }
            let names = list(&path)?;
            folders.push(Folder { path, names });
        }
        Ok(SearchFolders { folders, targets: Mutex::default() })
    }

    /// Whether no folder was given.
    pub fn is_empty(&self) -> bool {
        self.folders.is_empty()
    }

    /// The folders, in search order.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.folders.iter().map(|f| f.path.as_path())
    }

    /// The first folder (index) holding a file `name` for the caller's
    /// `target` (machine, class, byte order), as the loader would take it.
    pub fn find(&self, name: &str, target: Target) -> Option<usize> {
        let name = OsStr::new(name);
        (0..self.folders.len()).find(|&i| {
            self.folders[i].names.contains(name) && self.target_of(i, name) == Some(target)
        })
    }

    /// The names of folder `index` that `matches` accepts and that are
    /// files for `target`, sorted.
    pub fn matching(
        &self,
        index: usize,
        target: Target,
        matches: impl Fn(&[u8]) -> bool,
    ) -> Vec<String> {
        let mut found: Vec<String> = self.folders[index]
            .names
            .iter()
            .filter(|n| matches(n.as_bytes()))
            .filter(|n| self.target_of(index, n) == Some(target))
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        found.sort();
        found
    }

    /// How many folders there are.
    pub fn len(&self) -> usize {
        self.folders.len()
    }

    /// Folder `index` as a RUNPATH entry.
    pub fn entry(&self, index: usize) -> Vec<u8> {
        self.folders[index].path.as_os_str().as_bytes().to_vec()
    }

    /// The target of the ELF file `name` in folder `index` (links
    /// followed, as the loader's `open` does), remembered.
    fn target_of(&self, index: usize, name: &OsStr) -> Option<Target> {
        let key = (index, name.to_os_string());
        if let Some(known) = self.targets.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return *known;
        }
        let read = || -> Option<Target> {
            let file = File::open(self.folders[index].path.join(name)).ok()?;
            let mut head = [0u8; 20];
            let n = crate::fs::mapped::read_full_at(&file, &mut head, 0).ok()?;
            (head[..n].starts_with(crate::elf::MAGIC)).then(|| Target::peek(&head[..n])).flatten()
        };
        let found = read();
        self.targets.lock().unwrap_or_else(|e| e.into_inner()).insert(key, found);
        found
    }
}

/// The names of the entries of `dir` that may be files (regular files and
/// links; folders are left out).
fn list(dir: &Path) -> Result<HashSet<OsString>, PathError> {
    let meta = std::fs::metadata(dir).map_err(|e| PathError::during(dir, "--dlopen-search", e))?;
    if !meta.is_dir() {
        return Err(PathError::during(
            dir,
            "--dlopen-search",
            std::io::Error::from_raw_os_error(libc::ENOTDIR),
        ));
    }
    let mut names = HashSet::new();
    let entries =
        std::fs::read_dir(dir).map_err(|e| PathError::during(dir, "--dlopen-search", e))?;
    for entry in entries {
        let entry = entry.map_err(|e| PathError::during(dir, "--dlopen-search", e))?;
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        if !is_dir {
            names.insert(entry.file_name());
        }
    }
    Ok(names)
}

/// Whether `name` is a name a printf-style `pattern` (`libplug%d.so`,
/// `libnvrtc.so.%d`, `lib%s.so`) can produce: `%d`/`%i`/`%u` stand for
/// decimal digits, `%x`/`%X` for hex digits, `%s` for a non-empty text
/// without `/`, `%%` for `%`; any other conversion makes the pattern match
/// nothing (it cannot be read safely).
///
/// Both the pattern and the name come from files a build or a stranger
/// wrote (a `dlopen` string, a folder listing), so the match is a scan of
/// the name with the set of pattern positions it may be at (a Thompson
/// automaton): time is `O(name x pattern)`, never exponential (trying every
/// length of each conversion in turn took minutes for 14 `%s` against one
/// library name, issue 29).
pub fn printf_matches(pattern: &[u8], name: &[u8]) -> bool {
    let Some(tokens) = printf_tokens(pattern) else { return false };
    let n = tokens.len();
    // `at[j]`: the name so far can be the output of tokens `..j`;
    // `inside[j]`: of tokens `..j` and at least one byte of conversion `j`.
    let (mut at, mut inside) = (vec![false; n + 1], vec![false; n]);
    let (mut next_at, mut next_inside) = (vec![false; n + 1], vec![false; n]);
    at[0] = true;
    for &b in name {
        next_at.fill(false);
        next_inside.fill(false);
        for (j, token) in tokens.iter().enumerate() {
            match *token {
                Token::Byte(c) => next_at[j + 1] |= at[j] && b == c,
                Token::Run(accept) => next_inside[j] = (at[j] || inside[j]) && accept(b),
            }
        }
        // A conversion that took a byte may end there.
        for j in 0..n {
            next_at[j + 1] |= next_inside[j];
        }
        if !next_at.iter().chain(&next_inside).any(|&s| s) {
            return false;
        }
        std::mem::swap(&mut at, &mut next_at);
        std::mem::swap(&mut inside, &mut next_inside);
    }
    at[n]
}

/// One piece of a printf pattern: a byte to match as is, or a conversion:
/// one or more bytes that `accept`.
#[derive(Clone, Copy)]
enum Token {
    Byte(u8),
    Run(fn(u8) -> bool),
}

/// The pattern's pieces; `None` when a conversion is one this search does
/// not read (or the pattern ends inside one).
fn printf_tokens(pattern: &[u8]) -> Option<Vec<Token>> {
    let mut tokens = Vec::with_capacity(pattern.len());
    let mut rest = pattern;
    while let Some((&c, after)) = rest.split_first() {
        if c != b'%' {
            tokens.push(Token::Byte(c));
            rest = after;
            continue;
        }
        // Flags, width and length modifiers are skipped: `%02d`, `%ld`.
        let at = after.iter().position(|b| !b"0123456789-+ #.lhzjt".contains(b))?;
        tokens.push(match after[at] {
            b'%' => Token::Byte(b'%'),
            b'd' | b'i' | b'u' => Token::Run(|b| b.is_ascii_digit()),
            b'x' | b'X' => Token::Run(|b| b.is_ascii_hexdigit()),
            b's' => Token::Run(|b| b != b'/'),
            _ => return None,
        });
        rest = &after[at + 1..];
    }
    Some(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printf_patterns_match_the_names_they_can_produce() {
        assert!(printf_matches(b"libplug%d.so", b"libplug1.so"));
        assert!(printf_matches(b"libplug%d.so", b"libplug12.so"));
        assert!(!printf_matches(b"libplug%d.so", b"libplug.so"));
        assert!(!printf_matches(b"libplug%d.so", b"libplugx.so"));
        assert!(printf_matches(b"libnvrtc.so.%d", b"libnvrtc.so.12"));
        assert!(!printf_matches(b"libnvrtc.so.%d", b"libnvrtc.so.12.9"));
        assert!(printf_matches(b"libnvrtc.so.%d.%d", b"libnvrtc.so.12.9"));
        assert!(printf_matches(b"lib%s.so", b"libnccl-net.so"));
        assert!(!printf_matches(b"lib%s.so", b"lib/x.so"));
        assert!(printf_matches(b"lib%02d%%.so", b"lib07%.so"));
        assert!(!printf_matches(b"lib%p.so", b"lib0x1.so"));
        assert!(!printf_matches(b"lib%", b"lib"));
    }

    #[test]
    fn arguments_split_at_colons_without_empty_pieces() {
        let got = split_arguments(&["/a::/b:".into(), "/c".into()]);
        assert_eq!(got, [PathBuf::from("/a"), "/b".into(), "/c".into()]);
    }

    #[test]
    fn folders_are_checked_listed_once_and_matched_by_machine() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("lib");
        std::fs::create_dir(&lib).unwrap();
        std::fs::create_dir(lib.join("sub.so")).unwrap();
        // This test program's header: this machine.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let own = Target::peek(&me[..20]).unwrap();
        std::fs::write(lib.join("libplug.so.1"), &me[..64]).unwrap();
        let mut other = me[..64].to_vec();
        other[4] = if other[4] == 2 { 1 } else { 2 };
        std::fs::write(lib.join("libwrong.so"), &other).unwrap();
        std::os::unix::fs::symlink("libplug.so.1", lib.join("libplug.so")).unwrap();

        let s = SearchFolders::open(&[lib.clone(), PathBuf::from(format!("{}/", lib.display()))])
            .unwrap();
        assert_eq!(s.len(), 1, "a repeated folder is listed once");
        assert_eq!(s.find("libplug.so.1", own), Some(0));
        assert_eq!(s.find("libplug.so", own), Some(0), "a link is followed");
        assert_eq!(s.find("libwrong.so", own), None, "another class is skipped");
        assert_eq!(s.find("sub.so", own), None, "a folder is no library");
        assert_eq!(s.find("libnone.so", own), None);
        assert_eq!(
            s.matching(0, own, |n| printf_matches(b"libplug%s", n)),
            ["libplug.so", "libplug.so.1"]
        );
        assert_eq!(s.entry(0), lib.as_os_str().as_bytes());

        let missing = SearchFolders::open(&[dir.path().join("nope")]).unwrap_err().to_string();
        assert!(missing.contains("nope") && missing.contains("no such file"), "{missing}");
        let file = SearchFolders::open(&[lib.join("libplug.so.1")]).unwrap_err().to_string();
        assert!(file.contains("not a directory"), "{file}");
        let rel = SearchFolders::open(&["lib".into()]).unwrap_err().to_string();
        assert!(rel.starts_with("lib: ") && rel.contains("absolute"), "{rel}");
    }
}
