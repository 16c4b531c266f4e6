//! Shared by the crash-safety suites (`power_cut_every_step`, `power_cut_bytes`,
//! `fsync_failure`): the chain, the flush policy and a driver that syncs a node to the end
//! (block sync in windows of 4 up to a height, then consensus).
//!
//! Each test crate uses a different subset, hence the `dead_code` allowance.
#![allow(dead_code)]

pub mod disk;

use std::sync::Arc;
use std::time::{Duration, Instant};

use flushpoint::{
    ChainSpec, Db, EventSink, FlushPolicy, HandshakeReport, HoldingDb, KvApp, Node, Profile, Result,
};

/// Blocks per window.
pub const WINDOW: u64 = 4;

/// The chain every suite syncs: small light blocks with a validator-set change every 3
/// blocks, a consensus-params change every 7 and an empty block every 5, so that both
/// windows (and the handshake's roll-forward and app replay of either) contain special blocks.
pub fn spec(initial_height: u64) -> ChainSpec {
    ChainSpec {
        seed: 0xf1u64,
        profile: Profile::Light,
        initial_height,
        validator_change_every: 3,
        params_change_every: 7,
        empty_every: 5,
    }
}

/// Windows of exactly 4 blocks; the interval never fires during a test.
pub fn policy() -> FlushPolicy {
    FlushPolicy {
        window_blocks_max: Some(WINDOW),
        interval: Duration::from_secs(3600),
        ..FlushPolicy::default()
    }
}

/// What a run syncs: block sync up to `bs_end` (two windows), then consensus up to `end`.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub spec: ChainSpec,
    pub bs_end: u64,
    pub end: u64,
}

impl Plan {
    /// `windows` windows of block sync, then `consensus` blocks in consensus mode.
    pub fn new(initial_height: u64, windows: u64, consensus: u64) -> Plan {
        let base = initial_height - 1;
        Plan {
            spec: spec(initial_height),
            bs_end: base + windows * WINDOW,
            end: base + windows * WINDOW + consensus,
        }
    }
}

/// Opens a node over the three databases (the app over a `HoldingDb` of `app_db`).
pub fn open_node(
    bs: Arc<dyn Db>,
    st: Arc<dyn Db>,
    app_db: Arc<dyn Db>,
    plan: &Plan,
    sink: Box<dyn EventSink>,
) -> Result<(Node, HandshakeReport)> {
    let app = KvApp::open(Arc::new(HoldingDb::new(app_db)))?;
    Node::open(bs, st, Box::new(app), &plan.spec.genesis(), sink)
}

/// Syncs `node` from wherever it is to `plan.end`: block sync (windows of 4) while below
/// `plan.bs_end`, then `switch_to_consensus`, then consensus blocks. Blocks are regenerated
/// from the node's own state, so a restarted node gets the same chain.
///
/// After a restart the handshake leaves the node at a flush-point height (or in the
/// consensus phase), so windows counted from the restart height fall where the uncut run's
/// did and the flush records agree.
pub fn drive(node: &mut Node, plan: &Plan) -> Result<()> {
    if node.height() < plan.bs_end {
        node.start_block_sync(policy(), Instant::now())?;
        while node.height() < plan.bs_end {
            let (b, p, c) = plan.spec.next_block(node.state());
            node.sync_block(&b, &p, &c, Instant::now())?;
        }
        node.switch_to_consensus(Instant::now())?;
    }
    while node.height() < plan.end {
        let (b, p, c) = plan.spec.next_block(node.state());
        node.commit_block(&b, &p, &c)?;
    }
    Ok(())
}
