//! The Nix store as a binary cache or a NAR file serves it: Nix archives read
//! as they stream in, narinfo metadata and its signatures, the cache client,
//! decompression on a read-ahead thread, and the mounts that show unpacked
//! paths under their store names.
//!
//! Knows nothing of ELF or CUDA: the audit reads what this module unpacked.

pub mod cache;
pub mod decompress;
pub mod mounts;
pub mod nar;
pub mod narinfo;
pub mod readahead;
