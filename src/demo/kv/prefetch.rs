//! The demo app's prefetch: while block N executes, the values block N+1's [`Tx::Add`]s
//! will read are fetched on a prefetch pool's workers, and execution reads them from there
//! first; used only while reads are slow enough for it to pay.
//!
//! Invariant: prefetch changes no result: a prefetched value is used only if nothing wrote
//! its key since it was read (the session's rule), and a block's own writes are read before
//! any prefetched value (`execute`).

use std::sync::Arc;

use bytes::Bytes;

use super::layout::data_key;
use super::tx::Tx;
use crate::demo::types::Block;
use crate::error::Result;
use crate::prefetch::{PrefetchPool, PrefetchSession, PrefetchSource, PrefetchStats};

/// Reads slower than this, per key, averaged over recent blocks, mean the state is not in
/// memory and prefetch pays (unit: nanoseconds). Why: a read served from memory walks
/// redb's B-tree in a few microseconds on this machine class, one that goes to storage
/// takes 100 µs or more (`compare prefetch`: 256 cold reads in 31–44 ms); 30 µs sits
/// between with a wide margin. Below it, prefetch would only move reads onto other threads
/// that compete with the block loop and the flush thread for the same cores.
pub const PREFETCH_COLD_READ_NANOS: u64 = 30_000;
/// While prefetch pays, one block in this many is executed without it, to keep measuring
/// what a read costs without it (so a state that became warm turns prefetch off). Why 16:
/// a probe block costs its cold reads once; one in 16 keeps that under ~6 % of blocks.
pub const PREFETCH_PROBE_EVERY_BLOCKS: u64 = 16;

/// The demo app's prefetch: its sessions and the measurement that decides whether to use
/// them.
#[derive(Debug)]
pub(super) struct Prefetch {
    sessions: [PrefetchSession; 2],
    /// Average nanoseconds of a read execution made itself (a session miss, or a block
    /// executed without prefetch); `None` until one was measured.
    read_nanos: Option<u64>,
    /// This block's reads made by execution itself: (nanoseconds, reads).
    block_reads: (u64, u64),
    /// Prefetch every block, measured or not ([`KvApp::with_prefetch_always`]).
    always: bool,
}

impl Prefetch {
    /// Two sessions of `pool` over `source`; `always`: prefetch every block, measured or
    /// not.
    pub(super) fn new(pool: &PrefetchPool, source: Arc<dyn PrefetchSource>, always: bool) -> Self {
        Prefetch {
            sessions: [pool.session(source.clone()), pool.session(source)],
            read_nanos: None,
            block_reads: (0, 0),
            always,
        }
    }

    /// The sessions' counters.
    pub(super) fn stats(&self) -> Vec<PrefetchStats> {
        self.sessions.iter().map(|s| s.stats()).collect()
    }

    /// Reads data key `dk` for block `h`: the value block `h`'s session prefetched, else
    /// `read_db`'s, timed (a read execution makes itself: what decides whether to
    /// prefetch).
    pub(super) fn read(
        &mut self,
        h: u64,
        dk: &[u8],
        read_db: impl FnOnce() -> Result<Option<Bytes>>,
    ) -> Result<Option<Bytes>> {
        match self.sessions[(h % 2) as usize].lookup(dk) {
            Some(v) => Ok(v),
            None => {
                let started = std::time::Instant::now();
                let v = read_db()?;
                self.block_reads.0 += started.elapsed().as_nanos() as u64;
                self.block_reads.1 += 1;
                Ok(v)
            }
        }
    }

    /// Queues the keys block `next`'s [`Tx::Add`]s read on its session, when prefetch pays
    /// for it; the session's values from block `next − 2` are dropped either way.
    pub(super) fn queue(&self, next: &Block) {
        let session = &self.sessions[(next.height() % 2) as usize];
        // The session last served block `next − 2`: its observations are done with.
        session.clear();
        if !self.pays_for(next.height()) {
            return;
        }
        let keys: Vec<Bytes> = next
            .txs
            .iter()
            .filter_map(|tx| match Tx::decode(tx) {
                Some(Tx::Add(k, _)) => Some(data_key(&k)),
                _ => None,
            })
            .collect();
        if !keys.is_empty() {
            // Refused (no slot, over budget): execution reads the database as without.
            session.submit(keys);
        }
    }

    /// Whether to prefetch block `h`: while the state reads slowly (or nothing is measured
    /// yet), except one probe block in [`PREFETCH_PROBE_EVERY_BLOCKS`].
    fn pays_for(&self, h: u64) -> bool {
        if self.always {
            return true;
        }
        let cold = self
            .read_nanos
            .is_none_or(|n| n >= PREFETCH_COLD_READ_NANOS);
        cold && !h.is_multiple_of(PREFETCH_PROBE_EVERY_BLOCKS)
    }

    /// Folds this block's reads into the average (weight 1/4: a few blocks turn it).
    pub(super) fn end_block(&mut self) {
        let (nanos, reads) = std::mem::take(&mut self.block_reads);
        if let Some(mean) = nanos.checked_div(reads) {
            self.read_nanos = Some(match self.read_nanos {
                None => mean,
                Some(avg) => (3 * avg + mean) / 4,
            });
        }
    }
}
