//! The file system as the tools meet it: the parallel, deterministic walk of
//! output trees, the atomic replacement of a file we rewrite, and the paths
//! a user types (a `result` link resolved once, files named under it), and
//! advice about mapped pages.
//!
//! Imports only [`crate::error`]: everything above reads and writes files
//! through here.

pub mod atomic;
pub mod destination;
pub mod interrupt;
pub mod mapped;
pub mod pages;
pub mod side;
pub mod signals;
pub mod typed;
pub mod walk;
pub mod xattr;
