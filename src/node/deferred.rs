//! Deferred writes: the flush-point policy (when) and the flush (what, in which order).
//!
//! Invariant: `FlushPolicy::decide` is pure — it reads numbers, does no I/O, holds no clock.
//! Invariant: a flush point F → F′ writes, each step starting only after the previous
//! returned `Ok`: (1) the block store with blocks F+1..F′ and the flush record {F, F′};
//! (2) the state; (3) the app; then (4) fires the window's events in block order. A failure
//! stops at that step: nothing later is written and no event of the window fires.
//! Invariant: flush points are taken between blocks only (the caller holds `&mut Node`).

use std::time::{Duration, Instant};

/// The longest time writes stay held. Why: bounds what a crash or stop costs to redo, and a
/// stalled peer must not keep blocks in memory forever (the timer fires with no block).
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// The most memory the open window may take, over the three databases together, before a
/// flush point: key and value bytes plus [`HELD_KEY_BYTES`] per held key. Why: it bounds
/// the node's memory (the open window and the one in flight: two windows) and the size of
/// one synced unit; a 64 MiB unit costs ~0.3 s of sequential writes on this machine class.
pub const FLUSH_BYTES_MAX: u64 = 64 * 1024 * 1024;

pub use crate::holding::HELD_KEY_BYTES;

const _: () = assert!(FLUSH_BYTES_MAX >= 2 * crate::types::BLOCK_PART_SIZE_BYTES as u64 * 16);

impl FlushTrigger {
    /// True for triggers whose flush point must be durable before the call that took it
    /// returns: the halt height and the app's request (the halt param must be on disk before
    /// the node acts on it), the switch to consensus (no consensus block over a held window)
    /// and a clean stop.
    pub fn waits_for_durability(self) -> bool {
        matches!(
            self,
            FlushTrigger::HaltHeight
                | FlushTrigger::AppRequest
                | FlushTrigger::SwitchToConsensus
                | FlushTrigger::Stop
        )
    }
}

/// Why a flush point was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[non_exhaustive]
pub enum FlushTrigger {
    /// `FLUSH_INTERVAL` passed since the last flush point.
    Interval,
    /// The open window takes more than [`FlushPolicy::held_bytes_max`] of memory, over the
    /// three databases ([`FlushInputs::held_bytes`]).
    HeldBytes,
    /// The window reached the configured number of blocks.
    WindowBlocks,
    /// The app's halt height was reached.
    HaltHeight,
    /// The app asked for one (it wrote a halt param).
    AppRequest,
    /// Before switching to consensus.
    SwitchToConsensus,
    /// At a clean stop.
    Stop,
}

/// When flush points are taken during block sync: `FlushPolicy::default()` and the
/// `with_…` methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlushPolicy {
    /// Longest time between flush points.
    pub interval: Duration,
    /// Most memory the open window may take, over the three databases together
    /// ([`FlushInputs::held_bytes`]).
    pub held_bytes_max: u64,
    /// Most blocks in one window (`None`: no limit). Tests use it for exact windows.
    pub window_blocks_max: Option<u64>,
    /// Background flush points: a flush point freezes the window and a flush thread writes
    /// it (same order, same synced batches) while the next window executes; at most one
    /// window is in flight, and a flush point due while one is in flight waits for it
    /// (memory stays within two windows). The interval trigger does not wait: it is taken
    /// once the window in flight is durable. Halt height, app request, switch and stop are
    /// always durable when their call returns. Needs an app with
    /// [`crate::App::held_store`]; otherwise flush points stay synchronous.
    pub background: bool,
}

impl Default for FlushPolicy {
    fn default() -> Self {
        FlushPolicy {
            interval: FLUSH_INTERVAL,
            held_bytes_max: FLUSH_BYTES_MAX,
            window_blocks_max: None,
            background: true,
        }
    }
}

/// What the policy looks at after a block or on the timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushInputs {
    /// Time since the end of the last flush point.
    pub since_last_flush: Duration,
    /// Memory the open window takes in the block store, the state and the app
    /// ([`crate::HoldingDb::held_memory`]: key and value bytes, replaced short values still
    /// kept, and [`HELD_KEY_BYTES`] per key; for an app without a held store, its
    /// [`crate::App::held_bytes`]).
    pub held_bytes: [u64; 3],
    /// Blocks held (the window's length).
    pub held_blocks: u64,
    /// The last block applied.
    pub height: u64,
    /// The app's halt height.
    pub halt_height: Option<u64>,
    /// The app asked for a flush point.
    pub app_requested: bool,
}

impl FlushPolicy {
    /// This policy with [`FlushPolicy::interval`] set.
    pub fn with_interval(self, interval: Duration) -> Self {
        FlushPolicy { interval, ..self }
    }

    /// This policy with [`FlushPolicy::held_bytes_max`] set.
    pub fn with_held_bytes_max(self, held_bytes_max: u64) -> Self {
        FlushPolicy {
            held_bytes_max,
            ..self
        }
    }

    /// This policy with [`FlushPolicy::window_blocks_max`] set (a value, or `None`).
    pub fn with_window_blocks_max(self, window_blocks_max: impl Into<Option<u64>>) -> Self {
        FlushPolicy {
            window_blocks_max: window_blocks_max.into(),
            ..self
        }
    }

    /// This policy with [`FlushPolicy::background`] set.
    pub fn with_background(self, background: bool) -> Self {
        FlushPolicy { background, ..self }
    }

    /// The trigger for a flush point now, if any. Pure.
    pub fn decide(&self, i: &FlushInputs) -> Option<FlushTrigger> {
        if i.held_blocks == 0 {
            return None;
        }
        if i.halt_height == Some(i.height) {
            return Some(FlushTrigger::HaltHeight);
        }
        if i.app_requested {
            return Some(FlushTrigger::AppRequest);
        }
        if i.held_bytes.iter().sum::<u64>() > self.held_bytes_max {
            return Some(FlushTrigger::HeldBytes);
        }
        if self.window_blocks_max.is_some_and(|m| i.held_blocks >= m) {
            return Some(FlushTrigger::WindowBlocks);
        }
        if i.since_last_flush >= self.interval {
            return Some(FlushTrigger::Interval);
        }
        None
    }
}

/// What a flush point wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FlushReport {
    /// Why it was taken.
    pub trigger: FlushTrigger,
    /// F: the height before.
    pub from: u64,
    /// F′: the height after.
    pub to: u64,
    /// Key and value bytes written, over the three databases.
    pub bytes: u64,
    /// Wall time of the flush point: from freezing the window to its last synced batch
    /// (for a background flush point, time the block loop did not wait for).
    #[serde(skip)]
    pub duration: Duration,
    /// How long the block loop waited for this flush point: the whole flush for a
    /// synchronous one; for a background one, only the wait for the window in flight.
    #[serde(skip)]
    pub loop_wait: Duration,
    /// Flush points this report covers: 1, or 2 when one call completed the window in flight
    /// and took the next one (background flush points).
    pub flush_points: u64,
}

/// The deferral state the node keeps between flush points.
#[derive(Debug)]
pub struct DeferredWrites {
    /// The policy.
    pub policy: FlushPolicy,
    /// End of the last flush point (or of the start of holding).
    pub last_flush: Instant,
    /// The height all three databases are durable at (F).
    pub flushed_height: u64,
    /// Held events, in block order (compact until they fire: [`super::HeldEvents`]).
    pub held_events: super::HeldEvents,
    /// Flush points taken.
    pub flush_points: u64,
    /// Most memory the open window took at once, over the three databases
    /// ([`FlushInputs::held_bytes`]).
    pub peak_held_bytes: u64,
}

impl DeferredWrites {
    /// Deferral starting at durable height `flushed_height`.
    pub fn new(policy: FlushPolicy, flushed_height: u64, now: Instant) -> Self {
        DeferredWrites {
            policy,
            last_flush: now,
            flushed_height,
            held_events: super::HeldEvents::new(),
            flush_points: 0,
            peak_held_bytes: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> FlushInputs {
        FlushInputs {
            since_last_flush: Duration::ZERO,
            held_bytes: [0; 3],
            held_blocks: 1,
            height: 10,
            halt_height: None,
            app_requested: false,
        }
    }

    #[test]
    fn each_trigger_fires_alone_and_nothing_fires_with_an_empty_window() {
        let p = FlushPolicy::default();
        assert_eq!(p.decide(&inputs()), None);
        let mut i = inputs();
        i.since_last_flush = FLUSH_INTERVAL;
        assert_eq!(p.decide(&i), Some(FlushTrigger::Interval));
        i.held_blocks = 0;
        assert_eq!(p.decide(&i), None);
        let mut i = inputs();
        i.held_bytes = [0, 0, FLUSH_BYTES_MAX + 1];
        assert_eq!(p.decide(&i), Some(FlushTrigger::HeldBytes));
        i.held_bytes = [0, 0, FLUSH_BYTES_MAX];
        assert_eq!(p.decide(&i), None, "the cap is 'more than'");
        // Over the three databases together, not per database.
        let third = FLUSH_BYTES_MAX / 3;
        i.held_bytes = [third, third, FLUSH_BYTES_MAX - 2 * third];
        assert_eq!(p.decide(&i), None, "exactly the cap");
        i.held_bytes[0] += 1;
        assert_eq!(p.decide(&i), Some(FlushTrigger::HeldBytes));
        let mut i = inputs();
        i.halt_height = Some(10);
        assert_eq!(p.decide(&i), Some(FlushTrigger::HaltHeight));
        i.halt_height = Some(11);
        assert_eq!(p.decide(&i), None);
        let mut i = inputs();
        i.app_requested = true;
        assert_eq!(p.decide(&i), Some(FlushTrigger::AppRequest));
        let p = FlushPolicy {
            window_blocks_max: Some(4),
            ..FlushPolicy::default()
        };
        let mut i = inputs();
        i.held_blocks = 3;
        assert_eq!(p.decide(&i), None);
        i.held_blocks = 4;
        assert_eq!(p.decide(&i), Some(FlushTrigger::WindowBlocks));
    }
}
