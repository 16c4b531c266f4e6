//! Checkpoints: the one durable index commit that records `applied_seq` and the first
//! segment still needed, after the runs it lists are synced; then the trim that follows
//! it (ADR 0008, 0013, 0014).
//!
//! * [`CheckpointClock`], its part of the engine's state: the last checkpoint's seq and
//!   time, and the bytes applied since; [`due`] decides when the next one runs.
//! * [`checkpoint`] runs one under the apply lock: syncs the runs listed since the last,
//!   commits, then gives back held segments' dead space, unlinks the runs merges replaced
//!   and the segments no pointer or reader holds.
//!
//! Invariant: a checkpoint is durable before any segment or run below it is deleted, and
//! every run its manifest lists is synced (with its directory) before its commit.
//! Invariant: runs under the apply lock ([`ApplyTurn`]): no apply step, merge install or
//! other checkpoint between its run syncs and its commit.

use std::time::{Duration, Instant};

use super::applier::ApplyTurn;
use super::format::{
    META, META_APPLIED_END_OFFSET, META_APPLIED_END_SEGMENT, META_APPLIED_SEQ, META_FIRST_SEGMENT,
    SEGMENT_ENDS,
};
use super::manifest::{sync_runs, unlink_doomed_runs};
use super::options::{Applier, JournalOptions};
use super::segments::{TrimPlan, punch_dead_space, unlink_doomed};
use super::state::{Core, State};
use crate::error::Result;

/// The checkpoints' part of the engine's state (under the state lock).
#[derive(Debug)]
pub(super) struct CheckpointClock {
    /// The seq the last checkpoint recorded as applied.
    checkpoint_seq: u64,
    /// Bytes (keys and values) of the units applied since the last checkpoint.
    bytes_since_checkpoint: u64,
    last_checkpoint: Instant,
}

impl CheckpointClock {
    /// The clock an open starts: the index's checkpoint at `checkpoint_seq`, now.
    pub(super) fn recovered(checkpoint_seq: u64) -> CheckpointClock {
        CheckpointClock {
            checkpoint_seq,
            bytes_since_checkpoint: 0,
            last_checkpoint: Instant::now(),
        }
    }

    pub(super) fn checkpoint_seq(&self) -> u64 {
        self.checkpoint_seq
    }

    /// Time since the last checkpoint.
    pub(super) fn since_last(&self) -> Duration {
        self.last_checkpoint.elapsed()
    }

    /// An apply step applied units of `bytes` (keys and values).
    pub(super) fn note_applied(&mut self, bytes: u64) {
        self.bytes_since_checkpoint += bytes;
    }

    /// A checkpoint recording `applied` is durable.
    fn checkpointed(&mut self, applied: u64) {
        self.checkpoint_seq = applied;
        self.bytes_since_checkpoint = 0;
        self.last_checkpoint = Instant::now();
    }
}

/// True when a checkpoint is due after a step: the index changed since the last one, and
/// it is `force`d (a close, [`JournalEngine::checkpoint`](super::JournalEngine::checkpoint)),
/// or a checkpoint's bytes were applied, or (background applier) its interval has passed.
pub(super) fn due(st: &State, force: bool, options: &JournalOptions) -> bool {
    st.index_changed_since_checkpoint()
        && (force
            || st.clock.bytes_since_checkpoint >= options.checkpoint_bytes
            || (options.applier == Applier::Background
                && st.clock.last_checkpoint.elapsed() >= options.checkpoint_interval))
}

/// A durable redb commit recording `applied_seq` and the first segment still needed;
/// then the segments below it that no pointer holds are deleted (once no reader holds
/// an older snapshot).
pub(super) fn checkpoint(core: &Core, turn: &ApplyTurn<'_>) -> Result<()> {
    let (applied, applied_end, plan) = {
        let st = core.lock_state();
        let applied = st.queue.applied_seq();
        (
            applied,
            st.queue.applied_end(),
            st.segments.plan_trim(applied),
        )
    };
    let TrimPlan {
        first_needed,
        retired,
    } = plan;
    let synced_runs = sync_runs(core, turn)?;
    let txn = core.begin_index_write(redb::Durability::Immediate)?;
    core.index_call("write meta", || {
        let mut meta = META
            .open_mut(&txn, core.layout)
            .map_err(core.failing("open meta"))?;
        meta.insert(&META_APPLIED_SEQ, applied)
            .map_err(core.failing("write meta"))?;
        meta.insert(&META_FIRST_SEGMENT, first_needed)
            .map_err(core.failing("write meta"))?;
        meta.insert(&META_APPLIED_END_SEGMENT, applied_end.0)
            .map_err(core.failing("write meta"))?;
        meta.insert(&META_APPLIED_END_OFFSET, applied_end.1)
            .map_err(core.failing("write meta"))?;
        Ok(())
    })?;
    core.index_call("write segment ends", || {
        let mut ends = SEGMENT_ENDS
            .open_mut(&txn, core.layout)
            .map_err(core.failing("open segment ends"))?;
        for segment in retired {
            ends.remove(&segment)
                .map_err(core.failing("write segment ends"))?;
        }
        Ok(())
    })?;
    // Order matters: the checkpoint is durable before any segment below it is deleted;
    // deleting first could lose units redb does not hold durably.
    // Crash: a cut before this commit returns leaves the previous checkpoint, whose
    // first segment and live counts still hold every segment this trim would delete.
    core.step.point();
    core.index_call("checkpoint commit", || {
        txn.into_inner()
            .commit()
            .map_err(core.failing("checkpoint commit"))
    })?;
    core.counters.checkpoints.add(1);
    let punch = {
        let mut st = core.lock_state();
        st.manifest.listed_durably(synced_runs);
        st.clock.checkpointed(applied);
        st.segments.retire_below(first_needed, &core.counters)
    };
    for (segment, values) in punch {
        punch_dead_space(core, segment, values)?;
    }
    unlink_doomed_runs(core, turn)?;
    unlink_doomed(core)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::journal::engine::tests::wait_for;
    use crate::journal::{JournalEngine, JournalOptions};

    /// The background applier's timed checkpoint: with units applied since the last one, a
    /// checkpoint follows once `checkpoint_interval` has passed — and not before (the byte
    /// bound set out of reach). No wall clock decides it: the interval is out of reach
    /// while two steps pass without a checkpoint, then the test moves the last checkpoint
    /// back by the interval and wakes the applier.
    #[test]
    fn the_background_applier_checkpoints_once_the_interval_has_passed() {
        let interval = Duration::from_secs(60);
        let engine = JournalEngine::open(
            Arc::new(crate::fs::SimFs::new()),
            Path::new("/j"),
            JournalOptions {
                apply_batch_delay: Duration::ZERO,
                checkpoint_bytes: u64::MAX,
                checkpoint_interval: interval,
                ..JournalOptions::default()
            },
        )
        .expect("open");
        let db = engine.keyspace("k").expect("keyspace");
        let at_open = engine.counts().checkpoints;
        let write = |key: &'static [u8]| {
            let mut b = crate::db::Batch::new();
            b.put(key, &b"value"[..]);
            crate::db::Db::write(&*db, &b, crate::db::Durability::Synced).expect("write");
        };
        for (n, key) in [&b"one"[..], &b"two"[..]].into_iter().enumerate() {
            write(key);
            wait_for("the step", &|| engine.counts().apply_steps > n as u64);
        }
        assert_eq!(
            engine.counts().checkpoints - at_open,
            0,
            "no checkpoint within the interval"
        );
        let core = &engine.shared().core;
        {
            let mut st = core.lock_state();
            st.clock.last_checkpoint = st
                .clock
                .last_checkpoint
                .checked_sub(interval)
                .expect("the monotonic clock is older than the interval");
        }
        core.changed.notify_all();
        wait_for("the timed checkpoint", &|| {
            engine.counts().checkpoints > at_open
        });
        let steps = engine.counts().apply_steps;
        write(b"three");
        wait_for("the next step", &|| engine.counts().apply_steps > steps);
        assert_eq!(
            engine.counts().checkpoints - at_open,
            1,
            "one checkpoint once the interval passed, none until it passes again"
        );
    }
}
