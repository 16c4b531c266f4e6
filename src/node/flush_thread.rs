//! The node's flush thread: one thread for the node's life, writing one frozen window at a
//! time (ADR 0004, ADR 0015).
//!
//! Why one thread and not one per flush point: nothing is left to spawn, or to fail to
//! spawn, in the middle of a sync; and a thread that exits abandons the allocator's pages
//! that other threads still hold memory in (a window's unit, freed by the journal's
//! applier), which raises a long sync's peak memory.
//!
//! Invariant: jobs run one at a time, in the order they were submitted; a job that panics
//! has that as its outcome, and the next job still runs.
//! Invariant: the thread holds no node state: each job owns what it writes.

use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::error::{Error, Result};

/// A window's write, run on the flush thread; returns the key and value bytes written.
pub(super) type FlushJob = Box<dyn FnOnce() -> Result<u64> + Send>;

/// What a job's thread reports: its result, or that it panicked.
type JobOutcome = std::thread::Result<Result<u64>>;

/// The flush thread, started at the first background flush point and joined on drop.
#[derive(Default)]
pub(super) struct FlushThread {
    /// The jobs' channel; `None` before the thread starts (and while it is being joined).
    jobs: Option<mpsc::Sender<(FlushJob, mpsc::SyncSender<JobOutcome>)>>,
    thread: Option<JoinHandle<()>>,
}

/// A submitted job: its outcome once the thread has run it.
pub(super) struct FlushTicket {
    outcome: mpsc::Receiver<JobOutcome>,
    /// The outcome, once [`FlushTicket::is_finished`] has received it.
    received: Option<JobOutcome>,
}

impl FlushThread {
    /// Runs `job` on the flush thread (starting it first if it is not running). The thread
    /// runs one job at a time, in the order they are submitted.
    pub(super) fn submit(&mut self, job: FlushJob) -> Result<FlushTicket> {
        if self.jobs.is_none() {
            let (tx, rx) = mpsc::channel::<(FlushJob, mpsc::SyncSender<JobOutcome>)>();
            let thread = std::thread::Builder::new()
                .name("flushpoint-flush".into())
                .spawn(move || {
                    // Ends when the node drops its sender.
                    for (job, reply) in rx {
                        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                        // The ticket may be gone (a node dropped mid-window): nothing to tell.
                        let _ = reply.send(outcome);
                    }
                })
                .map_err(|e| Error::storage("node", "spawn the flush thread", e))?;
            self.jobs = Some(tx);
            self.thread = Some(thread);
        }
        let (reply, outcome) = mpsc::sync_channel(1);
        let sent = self
            .jobs
            .as_ref()
            .expect("started above")
            .send((job, reply));
        if sent.is_err() {
            // The thread ended, which it does only when its channel closes: not while the
            // node holds the sender. Reported rather than assumed.
            return Err(Error::storage(
                "node",
                "submit a window to the flush thread",
                std::io::Error::other("the flush thread has exited"),
            ));
        }
        Ok(FlushTicket {
            outcome,
            received: None,
        })
    }
}

impl Drop for FlushThread {
    /// Closes the channel, so the thread ends after the job it runs, and joins it.
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl FlushTicket {
    /// True once the job has returned (or panicked).
    pub(super) fn is_finished(&mut self) -> bool {
        if self.received.is_none() {
            match self.outcome.try_recv() {
                Ok(o) => self.received = Some(o),
                Err(mpsc::TryRecvError::Empty) => return false,
                // The thread dropped the reply without an outcome: it is gone; `join` says so.
                Err(mpsc::TryRecvError::Disconnected) => return true,
            }
        }
        true
    }

    /// Waits for the job's outcome: its result, or `Err` when it panicked.
    pub(super) fn join(self) -> JobOutcome {
        match self.received {
            Some(o) => o,
            None => self
                .outcome
                .recv()
                .unwrap_or_else(|_| Err(Box::new("the flush thread exited without a result"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Jobs run on one thread, in order, and each ticket gets its own job's result; a panic
    /// in one job is that job's outcome and the next job still runs.
    #[test]
    fn jobs_run_in_order_on_one_thread_and_a_panic_is_its_jobs_outcome() {
        let mut flush = FlushThread::default();
        let threads = Arc::new(Mutex::new(Vec::new()));
        let mut tickets = Vec::new();
        for i in 0..4u64 {
            let threads = threads.clone();
            tickets.push(
                flush
                    .submit(Box::new(move || {
                        threads.lock().unwrap().push(std::thread::current().id());
                        if i == 2 {
                            panic!("job 2 panics");
                        }
                        Ok(i * 10)
                    }))
                    .unwrap(),
            );
        }
        let outcomes: Vec<Option<u64>> = tickets
            .into_iter()
            .map(|t| t.join().ok().map(|r| r.unwrap()))
            .collect();
        assert_eq!(outcomes, vec![Some(0), Some(10), None, Some(30)]);
        let threads = threads.lock().unwrap();
        assert_eq!(threads.len(), 4);
        assert!(
            threads.iter().all(|t| *t == threads[0]),
            "one thread ran every job"
        );
        assert_ne!(threads[0], std::thread::current().id());
    }

    /// `is_finished` is false while the job runs and true after, and the outcome it received
    /// is the one `join` returns.
    #[test]
    fn is_finished_waits_for_the_job_and_keeps_its_outcome() {
        let mut flush = FlushThread::default();
        let (go, wait) = mpsc::channel::<()>();
        let mut ticket = flush
            .submit(Box::new(move || {
                wait.recv().unwrap();
                Ok(7)
            }))
            .unwrap();
        assert!(!ticket.is_finished());
        go.send(()).unwrap();
        while !ticket.is_finished() {
            std::thread::yield_now();
        }
        assert_eq!(ticket.join().unwrap().unwrap(), 7);
    }
}
