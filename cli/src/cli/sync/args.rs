//! The flags of `flushpoint sync`, and what they mean for the run: the home's options
//! ([`home_options`]) and the heights the run ends at ([`targets`]).
//!
//! Invariant: every check here is a usage error decided before the home is touched.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use flushpoint::HomeOptions;

use crate::cli::error::{CliError, CliResult};
use crate::cli::flags::{EngineArg, ProfileArg};

/// How blocks are written during the block-sync part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Writes held in memory and written at flush points (flushpoint's block sync).
    Deferred,
    /// Each block written as it comes: 1 + 3 synced batches (the consensus path).
    PerBlock,
    /// The reference node's old path: 5 synced batches per block.
    Legacy,
    /// Deferred, with every write downgraded to unsynced: the floor, not crash-safe.
    NoSync,
}

impl ModeArg {
    /// The flag's value, as the tool prints it.
    pub fn name(self) -> &'static str {
        match self {
            ModeArg::Deferred => "deferred",
            ModeArg::PerBlock => "per-block",
            ModeArg::Legacy => "legacy",
            ModeArg::NoSync => "no-sync",
        }
    }
}

/// Flags of `flushpoint sync`.
#[derive(Debug, Clone, Args)]
pub struct SyncArgs {
    /// Home directory [default: $FLUSHPOINT_HOME, else ./flushpoint-home]
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// Length of the block-synced part of the chain (heights 1..=N).
    #[arg(long, default_value_t = 10000)]
    pub blocks: u64,
    /// Blocks committed in consensus mode after the block-synced part (the run ends at N+M).
    #[arg(long, default_value_t = 20)]
    pub consensus_blocks: u64,
    /// Block sizes.
    #[arg(long, value_enum, default_value_t = ProfileArg::Light)]
    pub profile: ProfileArg,
    /// How the block-synced part is written.
    #[arg(long, value_enum, default_value_t = ModeArg::Deferred)]
    pub mode: ModeArg,
    /// Seed of the synthetic chain.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Storage engine of a new home [default: journal]. Chosen only when the home is created:
    /// an existing home keeps its own, and naming another is refused.
    #[arg(long, value_enum)]
    pub engine: Option<EngineArg>,
    /// How a new journal home indexes its app state [default: runs]: `runs` writes it as
    /// sorted run files (ADR 0014), `tree` inserts it into the index's B-tree. Chosen
    /// only when the home is created: an existing home keeps its own, and naming another
    /// is refused; `runs` on a redb home is refused.
    #[arg(long, value_enum)]
    pub app_index: Option<AppIndexArg>,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    pub json: bool,
    /// Take flush points on the block loop's thread, stopping it while they write (by
    /// default a flush thread writes each window while the next one executes).
    #[arg(long)]
    pub sync_flush: bool,
    /// Test knob: also take a flush point every this many blocks (crash-test uses it).
    #[arg(long, hide = true)]
    pub flush_every: Option<u64>,
    /// Prefetch: read the state block N+1 will read on background threads while block N
    /// executes (`on`), or not (`off`). Helps when the state is larger than memory and cold;
    /// the app hash is the same either way.
    #[arg(long, value_enum, default_value_t = PrefetchArg::Off)]
    pub prefetch: PrefetchArg,
    /// Page cache of the home's storage, in MiB: a journal home's index [default: 8], or a
    /// redb home's three databases, a third each [default: 192, 64 each]. On a redb home a
    /// larger cache keeps more of a large app state in memory: block sync is faster at
    /// scale and the process holds more (300k light blocks: 58 s at 192 MiB, 41 s at 768
    /// MiB; peak RSS 1.2 → 2.0 GiB). A journal home's index holds small records only (the
    /// app's state is in runs, parts and large values in the journal): 8 MiB syncs as fast
    /// as 64 (benches/compare/PERFORMANCE.md, "The index cache, again").
    #[arg(long, value_name = "MIB")]
    pub cache_mib: Option<u64>,
}

/// The smallest `--cache-mib`: redb needs room for a few pages per database.
pub const CACHE_MIB_MIN: u64 = 3;

/// The largest `--cache-mib` (1 TiB): far above any machine this runs on, and its bytes fit
/// a `usize` on 64-bit targets.
pub const CACHE_MIB_MAX: u64 = 1024 * 1024;

/// The home's options for `a`: the engine asked for and, with `--cache-mib`, the cache of
/// either engine (all of it to a journal's index; a third to each redb database). A cache
/// out of [`CACHE_MIB_MIN`]..=[`CACHE_MIB_MAX`] is a usage error.
pub fn home_options(a: &SyncArgs) -> CliResult<HomeOptions> {
    let mut options = HomeOptions::default()
        .with_engine(a.engine.map(EngineArg::engine))
        .with_app_index(a.app_index.map(AppIndexArg::index));
    if let Some(mib) = a.cache_mib {
        if !(CACHE_MIB_MIN..=CACHE_MIB_MAX).contains(&mib) {
            return Err(CliError::usage(format!(
                "--cache-mib must be between {CACHE_MIB_MIN} and {CACHE_MIB_MAX} (MiB), not {mib}"
            )));
        }
        let bytes = usize::try_from(mib * 1024 * 1024).map_err(|_| {
            CliError::usage(format!(
                "--cache-mib {mib} does not fit this machine's memory"
            ))
        })?;
        options.journal.index_cache_bytes = bytes;
        options.redb.cache_bytes = bytes / 3;
    }
    Ok(options)
}

/// `--app-index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AppIndexArg {
    /// A table in the journal's redb index.
    Tree,
    /// Sorted run files (ADR 0014; the default for a new journal home).
    Runs,
}

impl AppIndexArg {
    fn index(self) -> flushpoint::journal::KeyspaceIndex {
        match self {
            AppIndexArg::Tree => flushpoint::journal::KeyspaceIndex::Tree,
            AppIndexArg::Runs => flushpoint::journal::KeyspaceIndex::Runs,
        }
    }
}

/// `--prefetch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PrefetchArg {
    /// Read the next block's state in the background (two worker threads).
    On,
    /// No prefetch (the default).
    Off,
}

/// The run's two targets: the last block-synced height (`initial_height - 1 + blocks`)
/// and the last height (`+ consensus_blocks`). A sum past `u64::MAX` is a usage error, so a
/// flag never wraps into a small height.
pub fn targets(initial_height: u64, blocks: u64, consensus_blocks: u64) -> CliResult<(u64, u64)> {
    let target_sync = initial_height
        .checked_sub(1)
        .and_then(|h| h.checked_add(blocks));
    let target = target_sync.and_then(|t| t.checked_add(consensus_blocks));
    match (target_sync, target) {
        (Some(s), Some(t)) => Ok((s, t)),
        _ => Err(CliError::usage(format!(
            "--blocks {blocks} + --consensus-blocks {consensus_blocks} from initial height {initial_height} ends past the largest height ({}): use smaller counts",
            u64::MAX
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::error::EXIT_USAGE;
    use clap::Parser;

    /// `flushpoint sync`'s flags alone.
    #[derive(Parser)]
    struct Sync {
        #[command(flatten)]
        args: SyncArgs,
    }

    fn options(flags: &[&str]) -> CliResult<HomeOptions> {
        let parsed = Sync::try_parse_from(std::iter::once("sync").chain(flags.iter().copied()))
            .expect("flags parse");
        home_options(&parsed.args)
    }

    #[test]
    fn cache_mib_sets_the_journal_index_and_a_third_to_each_redb_database() {
        let o = options(&["--cache-mib", "768"]).expect("in range");
        assert_eq!(o.journal.index_cache_bytes, 768 << 20);
        assert_eq!(o.redb.cache_bytes, 256 << 20);
        let d = options(&[]).expect("defaults");
        let defaults = HomeOptions::default();
        assert_eq!(
            d.journal.index_cache_bytes,
            defaults.journal.index_cache_bytes
        );
        assert_eq!(d.redb.cache_bytes, defaults.redb.cache_bytes);
        // The flag's documented defaults are the engines' own.
        assert_eq!(defaults.journal.index_cache_bytes, 8 << 20);
        assert_eq!(defaults.redb.cache_bytes * 3, 192 << 20);
    }

    #[test]
    fn targets_that_overflow_a_height_are_a_usage_error() {
        assert_eq!(targets(1, 10, 2).expect("small"), (10, 12));
        assert_eq!(targets(5, 10, 0).expect("initial height 5"), (14, 14));
        assert_eq!(
            targets(1, u64::MAX - 2, 2).expect("ends at u64::MAX"),
            (u64::MAX - 2, u64::MAX)
        );
        for (initial, n, m) in [
            (1, u64::MAX, 1),
            (1, u64::MAX - 1, 2),
            (2, u64::MAX, 0),
            (1, 1, u64::MAX),
            (0, 1, 1),
        ] {
            let Err(e) = targets(initial, n, m) else {
                panic!("{initial} + {n} + {m} did not overflow");
            };
            assert_eq!(e.code, EXIT_USAGE, "{}", e.message);
            assert!(e.message.contains("--blocks"), "{}", e.message);
        }
    }

    #[test]
    fn cache_mib_out_of_range_is_a_usage_error() {
        for bad in ["0", "2", &(CACHE_MIB_MAX + 1).to_string()] {
            let e = options(&["--cache-mib", bad]).expect_err(bad);
            assert_eq!(e.code, EXIT_USAGE, "{bad}: {}", e.message);
            assert!(e.message.contains("--cache-mib"), "{}", e.message);
        }
        assert!(options(&["--cache-mib", &CACHE_MIB_MIN.to_string()]).is_ok());
        assert!(options(&["--cache-mib", &CACHE_MIB_MAX.to_string()]).is_ok());
    }
}
