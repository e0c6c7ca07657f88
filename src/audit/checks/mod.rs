//! The audit's checks, one file per family of rows of the checks table
//! ([`crate::audit::finding::CHECKS`]), one function per concern. They read
//! facts only; reading files happens in [`super::audit_file`].

mod coverage;
mod dlopen;
mod driver;
mod needed;
mod references;
mod runpath;
#[cfg(test)]
mod tests;

pub use coverage::{capabilities, jetson, scan_coverage};
pub use dlopen::dlopen;
pub use driver::{driver, isa_of, mixed_cudart, verdict};
pub use needed::needed;
pub use references::{build_only, why_build_only};
pub use runpath::runpath;
