//! A node run for the crash-safety suites (`power_cut_every_step`, `power_cut_bytes`,
//! `fsync_failure`, the chain seam's checks): the chain, the flush policy, and a driver that
//! syncs a node to the end of a [`Plan`] (block sync in windows up to a height, then
//! consensus).
//!
//! Invariant: a run is a function of its [`Plan`] and the node's own state: blocks are
//! regenerated from the state, so a restarted node is driven along the uncut run's chain.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::{Db, EventSink, FlushPolicy, HandshakeReport, HoldingDb, Node, Result};

/// Blocks per window of the default plan.
pub const WINDOW: u64 = 4;

/// The chain every suite syncs by default: small light blocks with a validator-set change
/// every 3 blocks, a consensus-params change every 7 and an empty block every 5, so that
/// both windows (and the handshake's roll-forward and app replay of either) contain special
/// blocks.
pub fn spec(initial_height: u64) -> ChainSpec {
    ChainSpec {
        seed: 0xf1u64,
        profile: Profile::Light,
        initial_height,
        validator_change_every: 3,
        params_change_every: 7,
        empty_every: 5,
        account_keys: 1 << 20,
    }
}

/// Windows of exactly `window` blocks; the interval never fires during a test;
/// `background`: flush points written by the flush thread (ADR 0004) or synchronously.
pub fn policy(window: u64, background: bool) -> FlushPolicy {
    FlushPolicy::default()
        .with_window_blocks_max(Some(window))
        .with_interval(Duration::from_secs(3600))
        .with_background(background)
}

/// What a run syncs: block sync up to `bs_end` in windows of `window` blocks (a flush point
/// also at `halt_height`), then consensus up to `end`.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub spec: ChainSpec,
    pub bs_end: u64,
    pub end: u64,
    pub window: u64,
    /// The app's configured halt height (a flush point is taken there).
    pub halt_height: Option<u64>,
    /// Background flush points (the default) or synchronous ones.
    pub background: bool,
}

impl Plan {
    /// `windows` windows of 4 blocks of block sync, then `consensus` blocks in consensus mode.
    pub fn new(initial_height: u64, windows: u64, consensus: u64) -> Plan {
        let base = initial_height - 1;
        Plan {
            spec: spec(initial_height),
            bs_end: base + windows * WINDOW,
            end: base + windows * WINDOW + consensus,
            window: WINDOW,
            halt_height: None,
            background: FlushPolicy::default().background,
        }
    }
}

/// Opens a node over the three databases (the app over a `HoldingDb` of `app_db`, with the
/// plan's halt height).
pub fn open_node(
    bs: Arc<dyn Db>,
    st: Arc<dyn Db>,
    app_db: Arc<dyn Db>,
    plan: &Plan,
    sink: Box<dyn EventSink>,
) -> Result<(Node<flushpoint::demo::DemoChain>, HandshakeReport)> {
    let mut app = KvApp::open(Arc::new(HoldingDb::new(app_db)))?;
    app.set_halt_height(plan.halt_height);
    Node::open(bs, st, Box::new(app), plan.spec.chain(), sink)
}

/// Syncs `node` from wherever it is to `plan.end`: block sync (windows of `plan.window`)
/// while below `plan.bs_end`, then `switch_to_consensus`, then consensus blocks. Blocks are
/// regenerated from the node's own state, so a restarted node gets the same chain.
///
/// After a restart the handshake leaves the node at a flush-point height (or in the
/// consensus phase), so windows counted from the restart height fall where the uncut run's
/// did and the flush records agree.
pub fn drive(node: &mut Node<flushpoint::demo::DemoChain>, plan: &Plan) -> Result<()> {
    drive_observed(node, plan, &mut |_| {})
}

/// [`drive`], calling `after` once each node call (start of block sync, each block, the
/// switch to consensus) has returned `Ok`: the only places `durable_height` can change.
pub fn drive_observed(
    node: &mut Node<flushpoint::demo::DemoChain>,
    plan: &Plan,
    after: &mut dyn FnMut(&Node<flushpoint::demo::DemoChain>),
) -> Result<()> {
    if node.height() < plan.bs_end {
        node.start_block_sync(policy(plan.window, plan.background), Instant::now())?;
        after(node);
        while node.height() < plan.bs_end {
            let (b, p, c) = plan.spec.next_block(node.state());
            node.sync_block(&b, &p, &c, Instant::now())?;
            after(node);
        }
        node.switch_to_consensus(Instant::now())?;
        after(node);
    }
    while node.height() < plan.end {
        let (b, p, c) = plan.spec.next_block(node.state());
        node.commit_block(&b, &p, &c)?;
        after(node);
    }
    Ok(())
}
