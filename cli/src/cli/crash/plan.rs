//! The kill plans: at which marker each child run is killed, drawn from the seed.
//!
//! Invariant: a plan depends on the seed and on what earlier runs of the round did (a
//! restart, a kill inside a flush point), never on the clock, so a seed replays the same
//! plans.

use flushpoint::testing::splitmix64_next;

/// The markers a kill inside a flush point lands at: before and after each database's
/// synced write.
const FLUSH_MARKERS: [&str; 6] = [
    "flush-write-begin block-store",
    "flush-write-done block-store",
    "flush-write-begin state",
    "flush-write-done state",
    "flush-write-begin app",
    "flush-write-done app",
];

/// The markers a kill during a restart's recovery lands at: before the handshake, and
/// around each write of its repair.
const RECOVERY_MARKERS: [&str; 3] = ["handshake-begin", "repair-write-begin", "repair-write-done"];

/// Of restarts after a kill outside a flush point, the percent whose recovery is killed too
/// (after a kill inside a flush point, every restart's is: that restart has a repair to
/// interrupt).
const RECOVERY_KILL_PERCENT: u64 = 30;
/// Percent of main kills inside a flush point.
const FLUSH_KILL_PERCENT: u64 = 70;
/// Percent of main kills between two block-synced blocks (the rest land between two
/// consensus blocks, or here too when the run has none).
const BLOCK_KILL_PERCENT: u64 = 20;
const _: () = assert!(
    FLUSH_KILL_PERCENT + BLOCK_KILL_PERCENT <= 100,
    "the main kills' shares are at most the whole"
);
/// A kill inside a flush point lands in one of the first this many flush points after the
/// handshake (fewer when an uncut run takes fewer): a resumed run may have only a few left.
const FLUSH_KILL_NTH_MAX: u64 = 4;
/// A kill at a repair write lands at one of the repair's first this many writes.
const REPAIR_KILL_NTH_MAX: u64 = 2;

/// The plans' random numbers: the library's splitmix64 stream over the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        splitmix64_next(&mut self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// When to kill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// At the nth marker starting with this text (counted from when the trigger is active),
    /// while the child waits at it.
    Marker(&'static str, u64),
    /// Never (let the run complete).
    Never,
}

/// One child run's kills.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Active from spawn until `handshake-end`.
    pub recovery: Trigger,
    /// Active from `handshake-end`.
    pub main: Trigger,
}

impl Plan {
    /// No kill: the run completes.
    pub const NEVER: Plan = Plan {
        recovery: Trigger::Never,
        main: Trigger::Never,
    };
}

/// Draws the plans of a crash-test from its seed.
pub struct Planner {
    rng: Rng,
    /// Flush points an uncut run takes (at least 1).
    expected_flushes: u64,
    flush_every: u64,
    consensus_blocks: u64,
}

impl Planner {
    /// The planner of a test with `seed`, over child runs of `blocks` block-synced blocks
    /// with a flush point every `flush_every`, then `consensus_blocks`.
    pub fn new(seed: u64, blocks: u64, flush_every: u64, consensus_blocks: u64) -> Self {
        Planner {
            rng: Rng(seed ^ 0x00c0_ffee),
            expected_flushes: (blocks / flush_every).max(1),
            flush_every,
            consensus_blocks,
        }
    }

    /// The next run's plan: a `restart` (the round's last run was killed; `prev_in_flush`:
    /// inside a flush point) may be killed during its recovery too.
    pub fn plan(&mut self, restart: bool, prev_in_flush: bool) -> Plan {
        let rng = &mut self.rng;
        let recovery = if restart && (prev_in_flush || rng.chance(RECOVERY_KILL_PERCENT)) {
            let m = RECOVERY_MARKERS[rng.below(RECOVERY_MARKERS.len() as u64) as usize];
            let nth = if m == "handshake-begin" {
                1
            } else {
                1 + rng.below(REPAIR_KILL_NTH_MAX)
            };
            Trigger::Marker(m, nth)
        } else {
            Trigger::Never
        };
        let pick = rng.below(100);
        let main = if pick < FLUSH_KILL_PERCENT {
            let m = FLUSH_MARKERS[rng.below(FLUSH_MARKERS.len() as u64) as usize];
            Trigger::Marker(
                m,
                1 + rng.below(self.expected_flushes.min(FLUSH_KILL_NTH_MAX)),
            )
        } else if pick < FLUSH_KILL_PERCENT + BLOCK_KILL_PERCENT || self.consensus_blocks == 0 {
            // Between two block-synced blocks, held writes in memory.
            Trigger::Marker("block ", 1 + rng.below(self.flush_every.saturating_mul(2)))
        } else {
            Trigger::Marker("consensus-block", 1 + rng.below(self.consensus_blocks))
        };
        Plan { recovery, main }
    }
}
