//! The file system as the tools meet it: the parallel, deterministic walk of
//! output trees and the atomic replacement of a file we rewrite.
//!
//! Imports only [`crate::error`]: everything above reads and writes files
//! through here.

pub mod atomic;
pub mod walk;
