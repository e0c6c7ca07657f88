//! `--coverage`'s own arguments (the caches, keys, `--closure`,
//! capabilities and driver are the audit's: [`crate::audit::args`]).

use std::path::PathBuf;

use super::shard::{parse_shard, Shard};

/// What `--coverage` adds to the audit's arguments.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CoverageArgs {
    /// Instead of the audit: which of the store paths (or --eval-jobs'
    /// attributes) each --substituter serves, in Nix's order (Priority,
    /// then as given), signed by which --trusted-public-key, with sizes;
    /// --closure: references served by none; with --cuda-capabilities or
    /// --driver-version: what the served builds' device code runs on.
    #[arg(long, conflicts_with_all = ["summary", "list_elf", "list_ptx", "why", "write_baseline", "baseline"])]
    pub coverage: bool,
    /// With --coverage: the JSON lines nix-eval-jobs prints (`-`: stdin);
    /// each attribute's outputs are asked about, under its name.
    #[arg(long, value_name = "FILE", requires = "coverage")]
    pub eval_jobs: Option<PathBuf>,
    /// With --coverage: narinfo transfers at a time (default: from the
    /// cores and the caches' measured latency).
    #[arg(long, value_name = "N", requires = "coverage", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub jobs: Option<u32>,
    /// With --coverage: retries of a failed transfer (5xx, timeouts,
    /// disconnects), pausing 0.1 s, 0.2 s, 0.4 s... before each.
    #[arg(long, value_name = "N", default_value_t = 3, requires = "coverage")]
    pub retries: u32,
    /// With --coverage: only this machine's part of the input, `K/N`
    /// (the input's paths whose place is K-1 modulo N); join the parts'
    /// JSON reports with --merge.
    #[arg(long, value_name = "K/N", value_parser = parse_shard, requires = "coverage")]
    pub shard: Option<Shard>,
    /// With --coverage: join these shard reports (JSON) into the report one
    /// run gives, instead of asking any cache.
    #[arg(long, value_name = "FILE", num_args = 1.., requires = "coverage", conflicts_with_all = ["substituter", "shard", "eval_jobs"])]
    pub merge: Vec<PathBuf>,
}
