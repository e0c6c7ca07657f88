//! The Nix store as a binary cache or a NAR file serves it: Nix archives read
//! as they stream in, narinfo metadata and its signatures, the cache client,
//! decompression on a read-ahead thread, and the mounts that show unpacked
//! paths under their store names.
//!
//! Knows nothing of ELF or CUDA: the audit reads what this module unpacked.
//! What a cache serves is hostile input: [`budget`] bounds what it can make
//! this process write, fetch and wait for, [`scratch`] is the folder it is
//! unpacked to (removed on every exit, signals included), and [`confine`]
//! keeps what is read from it inside it.

pub mod budget;
pub mod cache;
pub mod confine;
pub mod decompress;
pub mod mounts;
pub mod name;
pub mod nar;
pub mod narinfo;
pub mod readahead;
pub mod references;
pub mod scratch;
