//! NVIDIA's CUDA knowledge as data and rules: the capability table and its
//! compatibility rules, and the driver table that says which CUDA runtime and
//! PTX ISA a driver branch runs. Each `.tsv` beside its module is the reviewed
//! data; the module reads it at compile time.

pub mod capabilities;
pub mod driver;
pub mod releases;
