//! The integration tests' one support module, shared by every test target: a target's
//! `main.rs` includes it with `#[path = "../support/mod.rs"] mod support;`, a single-file
//! target with `mod support;`. Here: the seeded RNG, the seed and the full-run switch read
//! from the environment; in the submodules, the helpers the suites share.
//!
//! Invariant: every random choice of a test derives from [`Rng`] seeded through [`seed`]:
//! a fixed default in the source, never the clock; `FLUSHPOINT_SEED=<n>` replays a run.
//! Invariant: a seeded test prints its seed ([`seed_printed`], or its own line naming
//! `FLUSHPOINT_SEED`) before it draws, so a failure's captured output names the seed.
//! Invariant: helpers here assert nothing about the crate; checks return `Err` for the test
//! to assert on.
//!
//! Each target uses a different subset, hence the `dead_code` allowance.
#![allow(dead_code)]

/// A valid chain of demo blocks for the stores (`Saved`, `block_at`, `chain`).
pub mod blocks;
/// The simulated machine of redb files: power cuts per byte, EIO, lying syncs.
pub mod disk;
/// Crash fates on `SimFs` (directory ops, files) and the event oracle across a crash.
pub mod fates;
/// `SimFs` with hooks: operations that fail, wait or lie.
pub mod fs;
/// The ledger chain of `examples/ledger_node`, a second chain for the seam's checks.
#[path = "../../examples/ledger_node/ledger.rs"]
pub mod ledger;
/// A node run for the crash suites: chain spec, flush policy, `Plan` and its driver.
pub mod plan;
/// Prefetch sources that record and gate their reads.
pub mod prefetch;
/// The home the rollback suites start from.
pub mod rollback_home;

// The helpers most suites use, at the module's root (a target that uses none of them would
// warn that the re-export is unused).
#[allow(unused_imports)]
pub use blocks::{Saved, block_at, chain, forty_part_txs, light_block, txs};
#[allow(unused_imports)]
pub use fates::{check_events, dir_fates, file_fates};

use bytes::Bytes;

/// The environment variable that replays a seed: decimal or `0x` hex.
pub const SEED_ENV: &str = "FLUSHPOINT_SEED";

/// The seed of the crash suites that share [`plan`] when [`SEED_ENV`] is unset (each other
/// suite passes a default of its own to [`seed`]).
pub const SEED_DEFAULT: u64 = 0x005e_edf1;

/// The tests' one generator: the library's splitmix64 stream
/// (`flushpoint::testing::splitmix64_next`) over a seed, with the helpers tests use.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        flushpoint::testing::splitmix64_next(&mut self.0)
    }
    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn bytes(&mut self, n: usize) -> Bytes {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        v.truncate(n);
        Bytes::from(v)
    }
}

/// The seed in [`SEED_ENV`] (decimal or `0x` hex), or `None` when it is unset; a value that
/// is not a u64 panics rather than silently replaying another seed.
pub fn seed_override() -> Option<u64> {
    let v = std::env::var(SEED_ENV).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{SEED_ENV}={v:?} is not a u64")))
}

/// The seed a run draws from: [`SEED_ENV`] if set, else `default` (fixed in the source).
pub fn seed(default: u64) -> u64 {
    seed_override().unwrap_or(default)
}

/// [`seed`], printed under `label` with the line that replays it.
pub fn seed_printed(label: &str, default: u64) -> u64 {
    let s = seed(default);
    println!("{label}: seed {s} (replay: {SEED_ENV}={s})");
    s
}

/// True when `FLUSHPOINT_FULL=1`: the long suites run their whole sweep, not CI's slice.
pub fn full() -> bool {
    std::env::var("FLUSHPOINT_FULL").is_ok_and(|v| v == "1")
}
