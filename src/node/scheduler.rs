//! The flush scheduler: the node's block-sync bookkeeping, apart from its chain state — the
//! flush policy and its counters ([`DeferredWrites`]: the durable height F, the held
//! events), the window in flight and the flush thread that writes it.
//!
//! Invariant: it decides and keeps count; it reads no database and writes none (a window it
//! hands to the flush thread is written by `WritePath::write_window`).
//! Invariant: at most one window is in flight, and the open window starts at its end.
//! Invariant: the durable height moves only on the node's thread, after a window's write
//! returned `Ok` and its events fired (`Node::release_window`).

use std::time::Instant;

use crate::error::Result;

use super::deferred::{DeferredWrites, FlushInputs, FlushPolicy, FlushReport, FlushTrigger};
use super::events::HeldEvents;
use super::flush_thread::{FlushJob, FlushThread, FlushTicket};

/// When the node flushes, and the window the flush thread is writing.
pub(super) struct FlushScheduler {
    /// The policy, the durable height, the held events and the counters.
    pub(super) deferred: DeferredWrites,
    /// The window the flush thread is writing (background flush points only).
    in_flight: Option<InFlight>,
    /// The thread that writes frozen windows, started at the first background flush point.
    thread: FlushThread,
}

/// A window frozen at a background flush point, being written by the flush thread.
pub(super) struct InFlight {
    /// F: the durable height before it.
    pub(super) from: u64,
    /// F′: its last block.
    pub(super) to: u64,
    pub(super) trigger: FlushTrigger,
    /// The window's events, fired once the thread returned `Ok`.
    pub(super) events: HeldEvents,
    /// When it was submitted.
    pub(super) started: Instant,
    pub(super) handle: FlushTicket,
}

impl FlushScheduler {
    /// Nothing held or in flight; every database durable at `flushed_height`.
    pub(super) fn new(flushed_height: u64) -> Self {
        FlushScheduler {
            deferred: DeferredWrites::new(FlushPolicy::default(), flushed_height, Instant::now()),
            in_flight: None,
            thread: FlushThread::default(),
        }
    }

    /// F: the height durable in all three databases.
    pub(super) fn durable_height(&self) -> u64 {
        self.deferred.flushed_height
    }

    /// The first height of the open window: above the window in flight, if any.
    pub(super) fn window_start(&self) -> u64 {
        self.in_flight
            .as_ref()
            .map_or(self.deferred.flushed_height, |f| f.to)
    }

    /// True while a window is in flight.
    pub(super) fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// The trigger of a flush point due now, if any: the policy's decision, except the
    /// interval while a window is in flight. Pure.
    pub(super) fn due(&self, inputs: &FlushInputs) -> Option<FlushTrigger> {
        match self.deferred.policy.decide(inputs) {
            // The interval bounds what a crash costs to redo; it does not justify stopping the
            // loop while a window is in flight: it is taken once that window is durable.
            Some(FlushTrigger::Interval) if self.in_flight.is_some() => None,
            due => due,
        }
    }

    /// The window in flight, taken once its thread finished (with `wait`, in any case: the
    /// caller then waits for it).
    pub(super) fn take_in_flight(&mut self, wait: bool) -> Option<InFlight> {
        let f = self.in_flight.as_mut()?;
        if !wait && !f.handle.is_finished() {
            return None;
        }
        self.in_flight.take()
    }

    /// Hands `job`, the write of window `from + 1..=to`, to the flush thread; the held
    /// events go with it, to fire once it is durable.
    pub(super) fn submit(
        &mut self,
        job: FlushJob,
        from: u64,
        to: u64,
        trigger: FlushTrigger,
    ) -> Result<()> {
        assert!(
            self.in_flight.is_none(),
            "invariant: at most one window in flight"
        );
        let handle = self.thread.submit(job)?;
        tracing::debug!(
            target: "flushpoint::flush",
            from,
            to,
            trigger = ?trigger,
            "flush point submitted to the flush thread"
        );
        self.in_flight = Some(InFlight {
            from,
            to,
            trigger,
            events: std::mem::take(&mut self.deferred.held_events),
            started: Instant::now(),
            handle,
        });
        Ok(())
    }
}

/// Both flush points' blocks as one report: `Some` means blocks `from + 1..=to` became
/// durable during the call that returns it.
pub(super) fn merge_reports(a: Option<FlushReport>, b: Option<FlushReport>) -> Option<FlushReport> {
    match (a, b) {
        (Some(a), Some(b)) => Some(FlushReport {
            trigger: b.trigger,
            from: a.from.min(b.from),
            to: a.to.max(b.to),
            bytes: a.bytes + b.bytes,
            duration: a.duration + b.duration,
            loop_wait: a.loop_wait + b.loop_wait,
            flush_points: a.flush_points + b.flush_points,
        }),
        (a, b) => a.or(b),
    }
}

/// Reports a durable flush point as a `tracing` event (target `flushpoint::flush`).
pub(super) fn trace_flush_point(r: &FlushReport, background: bool) {
    tracing::info!(
        target: "flushpoint::flush",
        from = r.from,
        to = r.to,
        trigger = ?r.trigger,
        bytes = r.bytes,
        duration_ms = r.duration.as_secs_f64() * 1e3,
        loop_wait_ms = r.loop_wait.as_secs_f64() * 1e3,
        background,
        "flush point durable"
    );
}
