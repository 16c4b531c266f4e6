//! What an open home holds, read without writing: its three durable heights, the state the
//! handshake would start from, and the app hash (`sync`'s summary and markers, `inspect`).
//!
//! Invariant: reads only (`observe` and the stores' reads); never opens a `Node`.
//! Invariant: imports nothing from the tool's other modules.

use std::sync::Arc;

use flushpoint::demo::KvApp;
use flushpoint::node::Observed;
use flushpoint::store::{BlockStore, StateStore};
use flushpoint::{Db, HoldingDb, Home};
use serde::Serialize;

/// The three heights.
#[derive(Debug, Serialize, Clone, Copy, PartialEq, Eq)]
pub struct HeightsJson {
    /// Block store height.
    pub block_store: u64,
    /// State height.
    pub state: u64,
    /// App height.
    pub app: u64,
}

/// What a home holds durably, as the handshake would find it.
#[derive(Debug)]
pub struct Durable {
    /// The three databases' durable heights.
    pub heights: HeightsJson,
    /// What `observe` saw (the heights and the flush record).
    pub observed: Observed,
    /// The saved state the handshake would start from (`None`: no state saved yet).
    pub state: Option<flushpoint::demo::State>,
    /// The durable app hash (hex).
    pub app_hash: String,
}

/// Reads what an open home holds durably, without writing.
pub fn read_durable(home: &Home) -> flushpoint::Result<Durable> {
    let bs =
        BlockStore::<flushpoint::demo::Block>::open(home.block_store_db.clone() as Arc<dyn Db>)?;
    let st = StateStore::<flushpoint::demo::DemoChain>::open(home.state_db.clone() as Arc<dyn Db>);
    let app = KvApp::open(Arc::new(HoldingDb::new(home.app_db.clone() as Arc<dyn Db>)))?;
    let (state, observed) = flushpoint::node::observe(&bs, &st, &app)?;
    let app_hash = flushpoint::codec::hex(&flushpoint::App::durable(&app)?.app_hash);
    Ok(Durable {
        heights: HeightsJson {
            block_store: bs.height(),
            state: observed.state_height,
            app: flushpoint::App::durable(&app)?.height,
        },
        observed,
        state,
        app_hash,
    })
}
