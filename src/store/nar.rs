//! A streaming reader of Nix archives (NAR), the format a binary cache serves.
//!
//! A NAR is read once, front to back, as it arrives from the network and the
//! decompressor: [`NarReader::next_entry`] yields one [`Entry`] at a time, and
//! the contents of a regular file can be read with [`NarReader::contents`]
//! before asking for the next entry (what is not read is skipped). Nothing is
//! buffered beyond one name or symlink target, so memory does not depend on
//! the archive's size or on the sizes it declares.
//!
//! A NAR is untrusted input. The reader refuses, with the byte offset:
//! - a truncated archive, non-zero padding, an unknown token;
//! - a name that is empty, `.`, `..`, or holds `/` or NUL (so no entry can
//!   name a place outside the archive's root), a symlink target that is
//!   empty or holds NUL (no file system holds one);
//! - entries of a directory out of order or repeated (Nix writes them sorted
//!   by bytes, so a NAR's hash is unique to its tree);
//! - nesting deeper than [`MAX_DEPTH`], names or targets longer than
//!   [`MAX_STRING`], data after the root node.
//!
//! The format (docs/binary-cache.md): every string is a little-endian u64
//! length, the bytes, and zero padding to a multiple of 8. The archive is
//! `"nix-archive-1"` followed by a node; a node is `"(" "type" T ... ")"` with
//! T `"regular"` (optionally `"executable" ""`, then `"contents"` and the
//! bytes as a string), `"symlink"` (`"target"` and the target) or
//! `"directory"` (any number of `"entry" "(" "name" N "node" NODE ")"`).

use std::fs;
use std::io::{self, Read, Seek, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::store::budget::{Budget, Exceeded};

/// Deepest directory nesting accepted. Linux's PATH_MAX (4096) allows at most
/// 2048 levels of one-byte names; real store paths are a few dozen deep.
pub const MAX_DEPTH: usize = 1024;

/// Longest name, symlink target or token accepted (PATH_MAX).
pub const MAX_STRING: u64 = 4096;

/// Longest entry path below the root accepted, in bytes with the `/`
/// between names (PATH_MAX): a longer one cannot be opened by its path on
/// Linux, and without this cap each entry of an archive nested 1,024 deep in
/// 4 KiB names would cost a 4 MiB path.
pub const MAX_PATH: usize = 4096;

/// What went wrong, and at which byte of the (decompressed) archive.
#[derive(Debug, thiserror::Error)]
#[error("NAR byte {offset}: {kind}")]
pub struct NarError {
    /// Offset in the uncompressed archive where the problem was seen.
    pub offset: u64,
    /// The problem.
    pub kind: NarErrorKind,
}

impl NarError {
    /// The [`NarError`] inside an error of [`Contents`], or the I/O error
    /// itself at an unknown offset.
    pub fn from_io(err: io::Error) -> NarError {
        if err.get_ref().is_none() {
            return NarError { offset: 0, kind: NarErrorKind::Io(err) };
        }
        let kind = err.kind();
        match err.into_inner().map(|inner| inner.downcast::<NarError>()) {
            Some(Ok(nar)) => *nar,
            Some(Err(other)) => {
                NarError { offset: 0, kind: NarErrorKind::Io(io::Error::new(kind, other)) }
            }
            None => NarError { offset: 0, kind: NarErrorKind::Io(kind.into()) },
        }
    }
}

/// The ways a NAR can be malformed.
#[derive(Debug, thiserror::Error)]
pub enum NarErrorKind {
    /// The stream ended inside the archive.
    #[error("the archive is truncated")]
    Truncated,
    /// Reading the underlying stream failed (download, decompression).
    #[error("{0}")]
    Io(io::Error),
    /// A token other than the one the grammar allows here.
    #[error("expected {expected}, found {found}")]
    Unexpected {
        /// What the grammar allows.
        expected: &'static str,
        /// What was there, quoted and cut to 40 bytes.
        found: String,
    },
    /// The stream does not start with the magic string.
    #[error("not a NAR: it does not start with \"nix-archive-1\"")]
    NotNar,
    /// A string longer than [`MAX_STRING`].
    #[error("a name, target or token of {0} bytes (at most {MAX_STRING})")]
    TooLong(u64),
    /// Padding bytes that are not zero.
    #[error("non-zero padding after a string")]
    Padding,
    /// A directory entry's name that could escape the tree or is not a name.
    #[error("invalid entry name {0}")]
    BadName(String),
    /// A symlink target no file system can hold: empty, or with a NUL.
    #[error("invalid symlink target {0}")]
    BadTarget(String),
    /// A directory entry not after its predecessor in byte order.
    #[error("entry {name} is not after {previous} (entries must be sorted and unique)")]
    Order {
        /// The entry.
        name: String,
        /// The entry before it.
        previous: String,
    },
    /// Nesting beyond [`MAX_DEPTH`].
    #[error("directories nested deeper than {MAX_DEPTH}")]
    TooDeep,
    /// An entry path longer than [`MAX_PATH`].
    #[error("an entry path of {0} bytes (at most {MAX_PATH})")]
    PathTooLong(usize),
    /// Bytes after the root node.
    #[error("data after the end of the archive")]
    TrailingData,
}

/// The type of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory; its entries follow.
    Directory,
    /// A regular file of `size` bytes; read them with [`NarReader::contents`].
    Regular {
        /// The executable bit.
        executable: bool,
        /// The declared size (untrusted: a short stream is [`NarErrorKind::Truncated`]).
        size: u64,
    },
    /// A symbolic link and its target, as bytes (not checked: a link may point
    /// anywhere, and the reader never follows it).
    Symlink {
        /// The link's target.
        target: Vec<u8>,
    },
}

/// One entry of the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The path below the archive's root (empty for the root itself), made of
    /// validated names only.
    pub path: PathBuf,
    /// What the entry is.
    pub kind: EntryKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Node,
    InFile,
    AfterNode,
    InDirectory,
    Done,
}

/// The streaming reader; see the module documentation.
pub struct NarReader<R> {
    inner: R,
    offset: u64,
    state: State,
    /// Names from the root to the current node.
    components: Vec<Vec<u8>>,
    /// Bytes of the path `components` make (names and separators).
    path_len: usize,
    /// Per open directory, the name of its last entry (for the order check).
    last_names: Vec<Option<Vec<u8>>>,
    /// Unread content bytes of the current regular file, and its padding.
    content_left: u64,
    content_padding: u64,
}

impl<R: Read> NarReader<R> {
    /// A reader of the archive `inner` yields.
    pub fn new(inner: R) -> NarReader<R> {
        NarReader {
            inner,
            offset: 0,
            state: State::Start,
            components: Vec::new(),
            path_len: 0,
            last_names: Vec::new(),
            content_left: 0,
            content_padding: 0,
        }
    }

    /// Bytes of the archive consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next entry in archive order (a directory before its entries), or
    /// `None` once the whole archive, and nothing after it, has been read.
    pub fn next_entry(&mut self) -> Result<Option<Entry>, NarError> {
        loop {
            match self.state {
                State::Start => {
                    // Anything else than the magic (a garbage length, the
                    // wrong string) means the file is no NAR at all: say that,
                    // not what its first bytes would have meant in one.
                    let not_nar = || NarError { offset: 0, kind: NarErrorKind::NotNar };
                    let magic = self.read_string().map_err(|e| match e.kind {
                        NarErrorKind::TooLong(_) | NarErrorKind::Padding => not_nar(),
                        _ => e,
                    })?;
                    if magic != b"nix-archive-1" {
                        return Err(not_nar());
                    }
                    self.state = State::Node;
                }
                State::Node => return self.read_node().map(Some),
                State::InFile => {
                    self.skip_contents()?;
                    self.expect(")", "\")\" after a file's contents")?;
                    self.state = State::AfterNode;
                }
                State::AfterNode => {
                    let Some(name) = self.components.pop() else {
                        self.expect_end()?;
                        self.state = State::Done;
                        return Ok(None);
                    };
                    self.path_len -= name.len() + usize::from(!self.components.is_empty());
                    self.expect(")", "\")\" closing a directory entry")?;
                    self.state = State::InDirectory;
                }
                State::InDirectory => {
                    let at = self.offset;
                    let token = self.read_string()?;
                    match token.as_slice() {
                        b"entry" => {
                            self.read_entry_name()?;
                            self.state = State::Node;
                        }
                        b")" => {
                            self.last_names.pop();
                            self.state = State::AfterNode;
                        }
                        other => return Err(unexpected(at, "\"entry\" or \")\"", other)),
                    }
                }
                State::Done => return Ok(None),
            }
        }
    }

    /// The unread contents of the regular file [`next_entry`](Self::next_entry)
    /// returned last (empty for any other entry). Reading past the declared
    /// size is not possible; a stream that ends early is an error.
    pub fn contents(&mut self) -> Contents<'_, R> {
        Contents { reader: self }
    }

    fn read_node(&mut self) -> Result<Entry, NarError> {
        self.expect("(", "\"(\" opening a node")?;
        self.expect("type", "\"type\"")?;
        let at = self.offset;
        let kind = match self.read_string()?.as_slice() {
            b"regular" => {
                let at = self.offset;
                let mut token = self.read_string()?;
                let executable = token == b"executable";
                if executable {
                    self.expect("", "the empty string after \"executable\"")?;
                    token = self.read_string()?;
                }
                if token != b"contents" {
                    return Err(unexpected(at, "\"contents\" or \"executable\"", &token));
                }
                let size = self.read_u64()?;
                self.content_left = size;
                self.content_padding = padding(size);
                self.state = State::InFile;
                EntryKind::Regular { executable, size }
            }
            b"symlink" => {
                self.expect("target", "\"target\"")?;
                let at = self.offset;
                let target = self.read_string()?;
                // Any path is a valid target, but not these: `symlink(2)`
                // refuses them, so no store path holds one (found by fuzzing
                // `unpack`, which failed on what the reader had accepted).
                if target.is_empty() || target.contains(&0) {
                    return Err(NarError {
                        offset: at,
                        kind: NarErrorKind::BadTarget(quote(&target)),
                    });
                }
                self.expect(")", "\")\" after a symlink's target")?;
                self.state = State::AfterNode;
                EntryKind::Symlink { target }
            }
            b"directory" => {
                if self.last_names.len() >= MAX_DEPTH {
                    return Err(self.error(NarErrorKind::TooDeep));
                }
                self.last_names.push(None);
                self.state = State::InDirectory;
                EntryKind::Directory
            }
            other => {
                return Err(unexpected(at, "\"regular\", \"symlink\" or \"directory\"", other))
            }
        };
        let path = self.components.iter().map(|c| std::ffi::OsStr::from_bytes(c)).collect();
        Ok(Entry { path, kind })
    }

    fn read_entry_name(&mut self) -> Result<(), NarError> {
        self.expect("(", "\"(\" after \"entry\"")?;
        self.expect("name", "\"name\"")?;
        let at = self.offset;
        let name = self.read_string()?;
        if name.is_empty()
            || name == b"."
            || name == b".."
            || name.contains(&b'/')
            || name.contains(&0)
        {
            return Err(NarError { offset: at, kind: NarErrorKind::BadName(quote(&name)) });
        }
        let last = self.last_names.last_mut().expect("an entry is read inside a directory");
        if let Some(previous) = last.as_ref() {
            if name.as_slice() <= previous.as_slice() {
                return Err(NarError {
                    offset: at,
                    kind: NarErrorKind::Order { name: quote(&name), previous: quote(previous) },
                });
            }
        }
        let path_len = self.path_len + name.len() + usize::from(!self.components.is_empty());
        if path_len > MAX_PATH {
            return Err(NarError { offset: at, kind: NarErrorKind::PathTooLong(path_len) });
        }
        *last = Some(name.clone());
        self.expect("node", "\"node\"")?;
        self.path_len = path_len;
        self.components.push(name);
        Ok(())
    }

    fn skip_contents(&mut self) -> Result<(), NarError> {
        let left = self.content_left;
        let copied = io::copy(&mut (&mut self.inner).take(left), &mut io::sink())
            .map_err(|e| self.error(NarErrorKind::Io(e)))?;
        self.offset += copied;
        self.content_left -= copied;
        if copied < left {
            return Err(self.error(NarErrorKind::Truncated));
        }
        let padding = self.content_padding;
        self.content_padding = 0;
        self.read_padding(padding)
    }

    fn expect(&mut self, token: &'static str, what: &'static str) -> Result<(), NarError> {
        let at = self.offset;
        let found = self.read_string()?;
        if found != token.as_bytes() {
            return Err(unexpected(at, what, &found));
        }
        Ok(())
    }

    fn expect_end(&mut self) -> Result<(), NarError> {
        let mut byte = [0u8; 1];
        loop {
            return match self.inner.read(&mut byte) {
                Ok(0) => Ok(()),
                Ok(_) => Err(self.error(NarErrorKind::TrailingData)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => Err(self.error(NarErrorKind::Io(e))),
            };
        }
    }

    fn read_u64(&mut self) -> Result<u64, NarError> {
        let mut bytes = [0u8; 8];
        self.read_exact(&mut bytes)?;
        Ok(u64::from_le_bytes(bytes))
    }

    fn read_string(&mut self) -> Result<Vec<u8>, NarError> {
        let at = self.offset;
        let len = self.read_u64()?;
        if len > MAX_STRING {
            return Err(NarError { offset: at, kind: NarErrorKind::TooLong(len) });
        }
        // Bounded by MAX_STRING above, so the allocation is too.
        let mut bytes = vec![0u8; len as usize];
        self.read_exact(&mut bytes)?;
        self.read_padding(padding(len))?;
        Ok(bytes)
    }

    fn read_padding(&mut self, len: u64) -> Result<(), NarError> {
        let mut pad = [0u8; 8];
        let pad = &mut pad[..len as usize];
        self.read_exact(pad)?;
        if pad.iter().any(|&b| b != 0) {
            return Err(self.error(NarErrorKind::Padding));
        }
        Ok(())
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), NarError> {
        match self.inner.read_exact(buf) {
            Ok(()) => {
                self.offset += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                Err(self.error(NarErrorKind::Truncated))
            }
            Err(e) => Err(self.error(NarErrorKind::Io(e))),
        }
    }

    fn error(&self, kind: NarErrorKind) -> NarError {
        NarError { offset: self.offset, kind }
    }
}

/// The contents of the current regular file: see [`NarReader::contents`].
/// A stream that ends early gives an `UnexpectedEof` error whose inner error
/// is the [`NarError`] (see [`NarError::from_io`]).
pub struct Contents<'a, R> {
    reader: &'a mut NarReader<R>,
}

impl<R: Read> Read for Contents<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let r = &mut *self.reader;
        if r.state != State::InFile || r.content_left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf.len().min(usize::try_from(r.content_left).unwrap_or(usize::MAX));
        // The stream's own failure (a download cut, a decompressor's error)
        // is named with the NAR offset where it happened, like the others.
        let n = match r.inner.read(&mut buf[..want]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Err(e),
            Err(e) => return Err(io::Error::new(e.kind(), r.error(NarErrorKind::Io(e)))),
        };
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                r.error(NarErrorKind::Truncated),
            ));
        }
        r.offset += n as u64;
        r.content_left -= n as u64;
        Ok(n)
    }
}

fn padding(len: u64) -> u64 {
    (8 - len % 8) % 8
}

fn unexpected(offset: u64, expected: &'static str, found: &[u8]) -> NarError {
    NarError { offset, kind: NarErrorKind::Unexpected { expected, found: quote(found) } }
}

/// A byte string for a message: quoted, escaped, cut to 40 bytes.
fn quote(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(40)];
    let mut text = format!("\"{}\"", cut.escape_ascii());
    if bytes.len() > 40 {
        text.push_str("...");
    }
    text
}

/// What [`unpack`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unpacked {
    /// Regular files written with their contents.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Regular files left out because `keep` refused their first bytes.
    pub left_out: u64,
    /// Directories and symlinks made.
    pub others: u64,
    /// Entries made: [`Unpacked::files`] and [`Unpacked::others`].
    pub entries: u64,
    /// What the [`Budget`] was charged: [`Unpacked::bytes`] less the runs
    /// of zeros left as holes, and each entry's [`entry_cost`].
    pub stored: u64,
}

/// Why [`unpack`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The archive is malformed.
    #[error(transparent)]
    Nar(#[from] NarError),
    /// Writing below the destination failed.
    #[error("{path}: {source}", path = .path.display(), source = crate::error::describe_io(.source))]
    Write {
        /// The file being written.
        path: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
    /// The disk budget is spent (see [`crate::store::budget`]).
    #[error("{path}: {source}; the entry is not written", path = .path.display())]
    Budget {
        /// The file being written, below the archive's root.
        path: PathBuf,
        /// The limit.
        source: Exceeded,
    },
    /// The archive holds more entries than the budget allows
    /// ([`crate::store::budget::MAX_NAR_ENTRIES`]).
    #[error(
        "{path}: more than {limit} folders, links and files in one archive (each takes an \
         inode); the entry is not written",
        path = .path.display()
    )]
    Entries {
        /// The first entry over the limit, below the archive's root.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
}

/// What every entry written costs of the disk budget besides its name, its
/// link target and its file data: one block of 4 KiB, what a folder or a
/// link with a long target takes on ext4 (tmpfs charges a page per folder
/// too), and more than an inode and a directory entry. So `N` bytes of
/// `--max-unpack-bytes` make at most `N / 4096` entries: 100,000 empty
/// folders (93 KB of `.nar.zst`) need 400 MB of budget, as they take.
pub const ENTRY_BYTES: u64 = 4096;

/// What creating `entry` (not its file data) is charged: [`ENTRY_BYTES`],
/// its name and its link target.
fn entry_cost(entry: &Entry) -> u64 {
    let name = entry.path.file_name().map_or(0, |n| n.len()) as u64;
    let target = match &entry.kind {
        EntryKind::Symlink { target } => target.len() as u64,
        _ => 0,
    };
    ENTRY_BYTES + name + target
}

/// [`unpack_within`] without a disk budget.
pub fn unpack<R: Read>(
    reader: &mut NarReader<R>,
    dest: &Path,
    keep: &dyn Fn(&[u8]) -> bool,
) -> Result<Unpacked, UnpackError> {
    unpack_within(reader, dest, keep, &Budget::unlimited())
}

/// Writes the archive below `dest` (an empty folder, or a path that does not
/// exist yet), reading it once. Regular files are written only when
/// `keep(first bytes)` says so (at most 8 bytes, fewer for a shorter file):
/// the audit needs host objects, not documentation. Everything is created
/// new (`O_EXCL`), below folders this call made, from names the reader
/// validated: no entry can write through a symlink or outside `dest`.
///
/// Disk use is bounded: runs of zeros of [`HOLE`] bytes are left as holes
/// (a file of 4 GiB of zeros takes no space), and every byte written is
/// charged to `budget` first, as is every entry made ([`entry_cost`]: a
/// folder or a link takes disk too); a write over it stops the unpacking
/// with [`UnpackError::Budget`]. More entries than [`Budget::max_entries`]
/// stop it with [`UnpackError::Entries`]. On an error what this call charged is given
/// back (the caller removes `dest`); on success it stays charged
/// ([`Unpacked::stored`]) until the caller gives it back.
pub fn unpack_within<R: Read>(
    reader: &mut NarReader<R>,
    dest: &Path,
    keep: &dyn Fn(&[u8]) -> bool,
    budget: &Budget,
) -> Result<Unpacked, UnpackError> {
    let mut done = Unpacked::default();
    let result = unpack_entries(reader, dest, keep, budget, &mut done);
    if result.is_err() {
        budget.credit(done.stored);
    }
    result.map(|()| done)
}

fn unpack_entries<R: Read>(
    reader: &mut NarReader<R>,
    dest: &Path,
    keep: &dyn Fn(&[u8]) -> bool,
    budget: &Budget,
    done: &mut Unpacked,
) -> Result<(), UnpackError> {
    // One buffer for every file of the archive (allocated at the first kept one).
    let mut buf = Vec::new();
    while let Some(entry) = reader.next_entry()? {
        // Not `dest.join("")` for the root: its trailing `/` would follow a
        // link at `dest` and make a root file or link a folder name.
        let path = if entry.path.as_os_str().is_empty() {
            dest.to_owned()
        } else {
            dest.join(&entry.path)
        };
        let write = |e| UnpackError::Write { path: path.clone(), source: e };
        let over = |source| UnpackError::Budget { path: entry.path.clone(), source };
        // A regular file is charged once `keep` takes it (one refused
        // makes nothing on disk).
        let make = |done: &mut Unpacked| -> Result<(), UnpackError> {
            if done.entries >= budget.max_entries() {
                let limit = budget.max_entries();
                return Err(UnpackError::Entries { path: entry.path.clone(), limit });
            }
            let cost = entry_cost(&entry);
            budget.charge(cost).map_err(over)?;
            done.stored += cost;
            done.entries += 1;
            Ok(())
        };
        match entry.kind {
            EntryKind::Directory => {
                make(done)?;
                match fs::create_dir(&path) {
                    Err(e) if !(entry.path.as_os_str().is_empty() && is_empty_dir(&path)) => {
                        return Err(write(e));
                    }
                    _ => {}
                }
                done.others += 1;
            }
            EntryKind::Symlink { ref target } => {
                make(done)?;
                symlink(std::ffi::OsStr::from_bytes(target), &path).map_err(write)?;
                done.others += 1;
            }
            EntryKind::Regular { executable, size } => {
                let mut head = [0u8; 8];
                let want = size.min(8) as usize;
                reader.contents().read_exact(&mut head[..want]).map_err(NarError::from_io)?;
                if !keep(&head[..want]) {
                    done.left_out += 1;
                    continue;
                }
                make(done)?;
                let mode = if executable { 0o755 } else { 0o644 };
                let mut file = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(mode)
                    .open(&path)
                    .map_err(write)?;
                let mut contents = reader.contents();
                let mut sparse = Sparse { file: &mut file, budget, stored: &mut done.stored };
                let copied = copy_contents(&head[..want], &mut contents, &mut sparse, &mut buf)
                    .map_err(|e| match e {
                        Copy::Read(e) => UnpackError::Nar(NarError::from_io(e)),
                        Copy::Write(e) => write(e),
                        Copy::Budget(e) => over(e),
                    })?;
                done.files += 1;
                done.bytes += copied;
            }
        }
    }
    Ok(())
}

/// Zero runs at least this long, at any offset, are skipped (a hole)
/// rather than written.
pub const HOLE: usize = 4096;

enum Copy {
    Read(io::Error),
    Write(io::Error),
    Budget(Exceeded),
}

/// A file written with holes for runs of zeros, each byte written charged.
struct Sparse<'a> {
    file: &'a mut fs::File,
    budget: &'a Budget,
    stored: &'a mut u64,
}

impl Sparse<'_> {
    /// Writes `data` (which starts at a block of the file's own
    /// [`HOLE`]-sized grid or continues the last call's data): whole blocks
    /// of zeros are skipped, each run of other blocks is one write.
    fn put(&mut self, data: &[u8], hole: &mut u64) -> Result<(), Copy> {
        let mut run = 0..0;
        for (i, block) in data.chunks(HOLE).enumerate() {
            let zero = block.len() == HOLE && block.iter().all(|&b| b == 0);
            if !zero {
                if run.is_empty() {
                    run = i * HOLE..i * HOLE;
                }
                run.end += block.len();
                continue;
            }
            self.write_run(&data[run.clone()], hole)?;
            run = 0..0;
            *hole += HOLE as u64;
        }
        self.write_run(&data[run], hole)
    }

    /// One run of data after the hole before it (if any).
    fn write_run(&mut self, run: &[u8], hole: &mut u64) -> Result<(), Copy> {
        if run.is_empty() {
            return Ok(());
        }
        if *hole > 0 {
            let skip = i64::try_from(std::mem::take(hole)).unwrap_or(i64::MAX);
            self.file.seek(io::SeekFrom::Current(skip)).map_err(Copy::Write)?;
        }
        self.budget.charge(run.len() as u64).map_err(Copy::Budget)?;
        *self.stored += run.len() as u64;
        self.file.write_all(run).map_err(Copy::Write)
    }

    /// Ends the file after a trailing hole.
    fn finish(&mut self, hole: u64) -> Result<(), Copy> {
        if hole > 0 {
            let end = self.file.stream_position().map_err(Copy::Write)? + hole;
            self.file.set_len(end).map_err(Copy::Write)?;
        }
        Ok(())
    }
}

/// Bytes read and written at a time: whole [`HOLE`] blocks, large enough
/// that a file costs few system calls (each write of a few KiB costs the
/// kernel as much again as the copy).
const COPY_BUFFER: usize = 64 * HOLE;

/// Copies `head` (the file's first bytes, already read) and the rest of
/// `from` into `to`, through `buf`; the bytes copied.
fn copy_contents(
    head: &[u8],
    from: &mut impl Read,
    to: &mut Sparse<'_>,
    buf: &mut Vec<u8>,
) -> Result<u64, Copy> {
    if buf.len() < COPY_BUFFER {
        buf.resize(COPY_BUFFER, 0);
    }
    buf[..head.len()].copy_from_slice(head);
    let (mut total, mut hole, mut len) = (0, 0, head.len());
    loop {
        // Fill the buffer: holes are found in whole blocks of it.
        while len < buf.len() {
            match from.read(&mut buf[len..]) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // What arrived is written before the error is reported.
                    to.put(&buf[..len], &mut hole)?;
                    to.finish(hole)?;
                    return Err(Copy::Read(e));
                }
            }
        }
        if len == 0 {
            to.finish(hole)?;
            return Ok(total);
        }
        to.put(&buf[..len], &mut hole)?;
        total += len as u64;
        len = 0;
    }
}

/// A real (not symlinked) empty folder: the root may be unpacked into one.
fn is_empty_dir(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
        && fs::read_dir(path).is_ok_and(|mut d| d.next().is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_no_nar_says_so() {
        for bytes in [&b"garbage that is long enough\n"[..], &nar(&[Tok::S("nix-archive-2")])] {
            let err = NarReader::new(bytes).next_entry().unwrap_err();
            assert!(matches!(err.kind, NarErrorKind::NotNar), "{err}");
            assert_eq!(err.offset, 0);
        }
        // An empty or cut stream is truncated, not "no NAR".
        let err = NarReader::new(&b"\x0d\0\0"[..]).next_entry().unwrap_err();
        assert!(matches!(err.kind, NarErrorKind::Truncated), "{err}");
    }
    use std::os::unix::fs::PermissionsExt;

    /// A NAR writer for tests of the reader's refusals: tokens as given, no
    /// checks, so malformed archives can be made.
    pub(crate) fn nar(tokens: &[Tok]) -> Vec<u8> {
        let mut out = Vec::new();
        for t in tokens {
            match t {
                Tok::S(s) => put(&mut out, s.as_bytes()),
                Tok::B(b) => put(&mut out, b),
                Tok::N(n) => out.extend_from_slice(&n.to_le_bytes()),
                Tok::Raw(b) => out.extend_from_slice(b),
            }
        }
        out
    }

    fn put(out: &mut Vec<u8>, s: &[u8]) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s);
        out.resize(out.len() + padding(s.len() as u64) as usize, 0);
    }

    pub(crate) enum Tok {
        S(&'static str),
        B(Vec<u8>),
        N(u64),
        Raw(Vec<u8>),
    }
    use Tok::*;

    fn file(name: &'static str, contents: &'static str) -> Vec<Tok> {
        vec![
            S("entry"),
            S("("),
            S("name"),
            S(name),
            S("node"),
            S("("),
            S("type"),
            S("regular"),
            S("contents"),
            S(contents),
            S(")"),
            S(")"),
        ]
    }

    fn dir(entries: Vec<Vec<Tok>>) -> Vec<Tok> {
        let mut t = vec![S("nix-archive-1"), S("("), S("type"), S("directory")];
        t.extend(entries.into_iter().flatten());
        t.push(S(")"));
        t
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<(Entry, Vec<u8>)>, NarError> {
        let mut r = NarReader::new(bytes);
        let mut out = Vec::new();
        while let Some(e) = r.next_entry()? {
            let mut data = Vec::new();
            r.contents().read_to_end(&mut data).map_err(NarError::from_io)?;
            out.push((e, data));
        }
        Ok(out)
    }

    #[test]
    fn a_directory_with_files_reads_in_order() {
        let bytes = nar(&dir(vec![file("a", "hello"), file("b", "")]));
        let got = read_all(&bytes).unwrap();
        let names: Vec<_> = got.iter().map(|(e, d)| (e.path.clone(), d.clone())).collect();
        assert_eq!(
            names,
            vec![
                (PathBuf::new(), vec![]),
                (PathBuf::from("a"), b"hello".to_vec()),
                (PathBuf::from("b"), vec![]),
            ]
        );
    }

    #[test]
    fn unread_contents_are_skipped() {
        let bytes = nar(&dir(vec![file("a", "0123456789"), file("b", "x")]));
        let mut r = NarReader::new(bytes.as_slice());
        let mut paths = Vec::new();
        while let Some(e) = r.next_entry().unwrap() {
            paths.push(e.path);
        }
        assert_eq!(paths, vec![PathBuf::new(), "a".into(), "b".into()]);
        assert_eq!(r.offset(), bytes.len() as u64);
    }

    fn kind_of(bytes: &[u8]) -> NarErrorKind {
        read_all(bytes).expect_err("the archive must be refused").kind
    }

    #[test]
    fn names_that_escape_or_are_not_names_are_refused() {
        for bad in ["", ".", "..", "a/b", "../x"] {
            let mut e = file("x", "");
            e[3] = S(bad);
            let k = kind_of(&nar(&dir(vec![e])));
            assert!(matches!(k, NarErrorKind::BadName(_)), "{bad:?}: {k}");
        }
        let mut e = file("x", "");
        e[3] = B(b"a\0b".to_vec());
        assert!(matches!(kind_of(&nar(&dir(vec![e]))), NarErrorKind::BadName(_)));
    }

    #[test]
    fn duplicate_and_unsorted_entries_are_refused() {
        let k = kind_of(&nar(&dir(vec![file("b", ""), file("a", "")])));
        assert!(matches!(k, NarErrorKind::Order { .. }), "{k}");
        let k = kind_of(&nar(&dir(vec![file("a", ""), file("a", "")])));
        assert!(matches!(k, NarErrorKind::Order { .. }), "{k}");
    }

    #[test]
    fn every_truncation_is_refused() {
        let bytes = nar(&dir(vec![file("a", "hello"), file("b", "world!!!!")]));
        for len in 0..bytes.len() {
            let k = kind_of(&bytes[..len]);
            assert!(matches!(k, NarErrorKind::Truncated), "cut at {len}: {k}");
        }
    }

    #[test]
    fn a_huge_declared_size_allocates_nothing() {
        let mut t = vec![S("nix-archive-1"), S("("), S("type"), S("regular"), S("contents")];
        t.push(N(u64::MAX));
        let k = kind_of(&nar(&t));
        assert!(matches!(k, NarErrorKind::Truncated), "{k}");
        let t = vec![S("nix-archive-1"), S("("), S("type"), N(u64::MAX)];
        assert!(matches!(kind_of(&nar(&t)), NarErrorKind::TooLong(_)));
    }

    #[test]
    fn padding_trailing_data_and_unknown_tokens_are_refused() {
        let mut bytes = nar(&dir(vec![file("a", "x")]));
        let good = bytes.clone();
        // The byte after "x" is padding.
        let at = bytes.windows(9).position(|w| w == b"x\0\0\0\0\0\0\0\x01").unwrap();
        bytes[at + 1] = 7;
        assert!(matches!(kind_of(&bytes), NarErrorKind::Padding));
        let mut trailing = good.clone();
        trailing.extend_from_slice(&[0; 8]);
        assert!(matches!(kind_of(&trailing), NarErrorKind::TrailingData));
        let t = vec![S("nix-archive-1"), S("("), S("type"), S("fifo"), S(")")];
        assert!(matches!(kind_of(&nar(&t)), NarErrorKind::Unexpected { .. }));
        assert!(matches!(kind_of(&nar(&[S("nix-archive-2")])), NarErrorKind::NotNar));
        assert!(matches!(kind_of(&nar(&[Raw(vec![1, 2, 3])])), NarErrorKind::Truncated));
    }

    #[test]
    fn nesting_is_capped() {
        let mut t = vec![S("nix-archive-1")];
        for _ in 0..=MAX_DEPTH {
            t.extend([S("("), S("type"), S("directory"), S("entry"), S("("), S("name")]);
            t.extend([S("d"), S("node")]);
        }
        assert!(matches!(kind_of(&nar(&t)), NarErrorKind::TooDeep));
    }

    #[test]
    fn symlinks_and_executables_are_reported() {
        let t = vec![
            S("nix-archive-1"),
            S("("),
            S("type"),
            S("directory"),
            S("entry"),
            S("("),
            S("name"),
            S("l"),
            S("node"),
            S("("),
            S("type"),
            S("symlink"),
            S("target"),
            S("../../etc/passwd"),
            S(")"),
            S(")"),
            S("entry"),
            S("("),
            S("name"),
            S("x"),
            S("node"),
            S("("),
            S("type"),
            S("regular"),
            S("executable"),
            S(""),
            S("contents"),
            S("#!"),
            S(")"),
            S(")"),
            S(")"),
        ];
        let got = read_all(&nar(&t)).unwrap();
        assert_eq!(got[1].0.kind, EntryKind::Symlink { target: b"../../etc/passwd".to_vec() });
        assert_eq!(got[2].0.kind, EntryKind::Regular { executable: true, size: 2 });
        assert_eq!(got[2].1, b"#!");
    }

    fn entry(name: &'static str, node: Vec<Tok>) -> Vec<Tok> {
        let mut t = vec![S("entry"), S("("), S("name"), S(name), S("node"), S("(")];
        t.extend(node);
        t.extend([S(")"), S(")")]);
        t
    }

    fn link(target: &'static str) -> Vec<Tok> {
        vec![S("type"), S("symlink"), S("target"), S(target)]
    }

    fn subdir(entries: Vec<Vec<Tok>>) -> Vec<Tok> {
        let mut t = vec![S("type"), S("directory")];
        t.extend(entries.into_iter().flatten());
        t
    }

    /// Unpacks `bytes` into `parent/out` of a fresh `parent` holding a
    /// sentinel file; checks nothing but `out` appeared beside the sentinel
    /// and returns the result and the folder (kept alive).
    fn unpack_beside_sentinel(bytes: &[u8]) -> (Result<Unpacked, UnpackError>, tempfile::TempDir) {
        let parent = tempfile::tempdir().unwrap();
        fs::write(parent.path().join("sentinel"), b"kept").unwrap();
        let out = parent.path().join("out");
        let result = unpack(&mut NarReader::new(bytes), &out, &|_| true);
        let mut names: Vec<_> = fs::read_dir(parent.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert!(names == ["out", "sentinel"] || names == ["sentinel"], "{names:?}");
        assert_eq!(fs::read(parent.path().join("sentinel")).unwrap(), b"kept");
        (result, parent)
    }

    #[test]
    fn nothing_is_written_through_a_link_or_outside_the_destination() {
        // A link to the parent, then the same name as a folder holding a
        // file, then as a file: each would write beside the sentinel if the
        // link were followed. Refused as a repeated entry, before any write.
        let x = || vec![S("type"), S("regular"), S("contents"), S("escaped")];
        let attempts = [
            dir(vec![entry("a", link("..")), entry("a", subdir(vec![entry("x", x())]))]),
            dir(vec![entry("a", link("..")), entry("a", x())]),
            dir(vec![entry("a", link("../sentinel")), entry("a", x())]),
            // Out of order: the folder "b" first, then the link "a" (a
            // reader without the order check would make the link after).
            dir(vec![entry("b", subdir(vec![])), entry("a", link("/"))]),
            // A nested link to the root's parent, then a folder of its name.
            dir(vec![entry(
                "d",
                subdir(vec![entry("l", link("../..")), entry("l", subdir(vec![entry("x", x())]))]),
            )]),
        ];
        for tokens in attempts {
            let bytes = nar(&tokens);
            let (result, parent) = unpack_beside_sentinel(&bytes);
            let err = result.expect_err("refused");
            assert!(
                matches!(err, UnpackError::Nar(NarError { kind: NarErrorKind::Order { .. }, .. })),
                "{err}"
            );
            assert!(err.to_string().starts_with("NAR byte "), "{err}");
            // The link itself is written as given (a NAR may hold any target).
            let l = ["out/a", "out/d/l"].map(|p| parent.path().join(p));
            assert!(
                l.iter().any(|l| fs::symlink_metadata(l).is_ok_and(|m| m.is_symlink()))
                    || fs::symlink_metadata(parent.path().join("out/b")).is_ok()
            );
            assert!(!parent.path().join("x").exists() && !parent.path().join("out/a/x").exists());
        }
        // Links pointing anywhere are written as they are, never followed.
        let bytes = nar(&dir(vec![
            entry("abs", link("/etc/passwd")),
            entry("up", link("../../../../sentinel")),
        ]));
        let (result, parent) = unpack_beside_sentinel(&bytes);
        assert_eq!(result.unwrap().others, 3);
        let target = fs::read_link(parent.path().join("out/up")).unwrap();
        assert_eq!(target, Path::new("../../../../sentinel"));
    }

    #[test]
    fn the_destination_must_be_new_or_a_real_empty_folder() {
        let bytes = nar(&dir(vec![file("f", "x")]));
        let parent = tempfile::tempdir().unwrap();
        fs::create_dir(parent.path().join("elsewhere")).unwrap();
        let out = parent.path().join("out");
        symlink("elsewhere", &out).unwrap();
        let err = unpack(&mut NarReader::new(bytes.as_slice()), &out, &|_| true).unwrap_err();
        assert!(matches!(err, UnpackError::Write { .. }), "{err}");
        assert!(err.to_string().contains("out: "), "{err}");
        assert!(!parent.path().join("elsewhere/f").exists());
        let out = parent.path().join("empty");
        fs::create_dir(&out).unwrap();
        unpack(&mut NarReader::new(bytes.as_slice()), &out, &|_| true).unwrap();
        assert_eq!(fs::read(out.join("f")).unwrap(), b"x");
    }

    #[test]
    fn a_file_declaring_2_pow_62_bytes_on_a_short_stream_fails_at_its_end() {
        let mut t = vec![S("nix-archive-1"), S("("), S("type"), S("directory")];
        t.extend([S("entry"), S("("), S("name"), S("big"), S("node"), S("(")]);
        t.extend([S("type"), S("regular"), S("contents"), N(1 << 62)]);
        let mut bytes = nar(&t);
        bytes.extend_from_slice(&[0x7f; 100_000]);
        let (result, parent) = unpack_beside_sentinel(&bytes);
        let err = result.unwrap_err();
        assert!(
            matches!(&err, UnpackError::Nar(NarError { kind: NarErrorKind::Truncated, offset })
                if *offset == bytes.len() as u64),
            "{err}"
        );
        // What arrived was written (the caller removes it), nothing more.
        assert_eq!(fs::metadata(parent.path().join("out/big")).unwrap().len(), 100_000);
    }

    #[test]
    fn refusals_say_at_which_byte() {
        let mut e = file("x", "");
        e[3] = S("..");
        let bytes = nar(&dir(vec![file("a", "1"), e]));
        let err = read_all(&bytes).unwrap_err();
        // The refused name's length field.
        let at = bytes.windows(10).rposition(|w| w == b"\x02\0\0\0\0\0\0\0..").unwrap();
        assert_eq!(err.offset, at as u64);
        assert_eq!(err.to_string(), format!("NAR byte {at}: invalid entry name \"..\""));
        let bytes = nar(&dir(vec![file("b", ""), file("a", "")]));
        let err = read_all(&bytes).unwrap_err();
        let at = bytes.windows(9).rposition(|w| w == b"\x01\0\0\0\0\0\0\0a").unwrap();
        assert_eq!(
            err.to_string(),
            format!(
                "NAR byte {at}: entry \"a\" is not after \"b\" (entries must be sorted and unique)"
            )
        );
    }

    #[test]
    fn nesting_up_to_the_cap_is_read_and_long_paths_are_refused() {
        let mut t = vec![S("nix-archive-1")];
        for _ in 0..MAX_DEPTH - 1 {
            t.extend([S("("), S("type"), S("directory"), S("entry"), S("("), S("name")]);
            t.extend([S("d"), S("node")]);
        }
        t.extend([S("("), S("type"), S("directory"), S(")")]);
        for _ in 0..MAX_DEPTH - 1 {
            t.extend([S(")"), S(")")]);
        }
        let got = read_all(&nar(&t)).unwrap();
        assert_eq!(got.len(), MAX_DEPTH);
        assert_eq!(got[MAX_DEPTH - 1].0.path.as_os_str().len(), (MAX_DEPTH - 1) * 2 - 1);

        // Two names of 2,048 bytes: 4,097 bytes with the separator.
        let long: &'static str = Box::leak("n".repeat(2048).into_boxed_str());
        let mut t = vec![S("nix-archive-1"), S("("), S("type"), S("directory")];
        t.extend([S("entry"), S("("), S("name"), S(long), S("node"), S("(")]);
        t.extend([S("type"), S("directory")]);
        t.extend([S("entry"), S("("), S("name"), S(long), S("node")]);
        let k = kind_of(&nar(&t));
        assert!(matches!(k, NarErrorKind::PathTooLong(4097)), "{k}");
        // A name over MAX_STRING is refused before it is read.
        let mut e = file("x", "");
        e[3] = N(MAX_STRING + 1);
        let k = kind_of(&nar(&dir(vec![e])));
        assert!(matches!(k, NarErrorKind::TooLong(4097)), "{k}");
    }

    #[test]
    fn a_root_file_or_link_is_unpacked_at_the_destination() {
        // Found writing the tests above: the root was `dest.join("")`, with
        // a trailing `/`, so a store path that is one file failed (EISDIR).
        let parent = tempfile::tempdir().unwrap();
        let bytes = nar(&[
            S("nix-archive-1"),
            S("("),
            S("type"),
            S("regular"),
            S("executable"),
            S(""),
            S("contents"),
            S("#!x"),
            S(")"),
        ]);
        let out = parent.path().join("script");
        let done = unpack(&mut NarReader::new(bytes.as_slice()), &out, &|_| true).unwrap();
        assert_eq!((done.files, done.bytes), (1, 3));
        assert_eq!(fs::read(&out).unwrap(), b"#!x");
        assert_eq!(fs::metadata(&out).unwrap().permissions().mode() & 0o777, 0o755);
        let bytes =
            nar(&[S("nix-archive-1"), S("("), S("type"), S("symlink"), S("target"), S("script")]);
        let bytes = [bytes, nar(&[S(")")])].concat();
        let out = parent.path().join("link");
        unpack(&mut NarReader::new(bytes.as_slice()), &out, &|_| true).unwrap();
        assert_eq!(fs::read_link(&out).unwrap(), Path::new("script"));
    }

    #[test]
    fn symlink_targets_no_file_system_holds_are_refused() {
        // Fuzzing finding (nar_unpack): a root link to "../a\0" was read,
        // then `unpack` failed on it ("unexpected NUL byte").
        for bad in [b"../a\0".to_vec(), Vec::new(), b"\0".to_vec()] {
            let t = vec![S("nix-archive-1"), S("("), S("type"), S("symlink"), S("target")];
            let bytes = [nar(&t), nar(&[B(bad.clone()), S(")")])].concat();
            let err = read_all(&bytes).unwrap_err();
            assert!(matches!(err.kind, NarErrorKind::BadTarget(_)), "{bad:?}: {err}");
            assert_eq!(err.offset, nar(&t).len() as u64);
        }
    }
}
