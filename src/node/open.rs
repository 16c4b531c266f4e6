//! Opening a node: its databases wrapped for holding, the write path chosen, what the
//! handshake looks at read (`observe`), and the decision of `recovery.rs` carried out
//! before the node is handed out.
//!
//! Invariant: a refused home is left as it was: every refusal (another chain's home, a
//! shape `case_at_open` refuses) comes before the first write.
//! Invariant: the ordered-or-unit choice is made here, once, from the databases' places in
//! a unit group (`WritePath::of`).

use std::sync::Arc;

use crate::app::App;
use crate::chain::{Chain, ChainState};
use crate::db::Db;
use crate::error::{Error, Heights, Result};
use crate::holding::HoldingDb;
use crate::home::Home;
use crate::store::{BlockStore, StateStore};

use super::events::EventSink;
use super::handshake::Observed;
use super::recovery::case_at_open;
use super::scheduler::FlushScheduler;
use super::write_path::{AppShare, WritePath};
use super::{HandshakeReport, Mode, Node, NodeDb, fmt_record};

/// Reads what the handshake looks at, normalized, without changing anything.
pub fn observe<C: Chain>(
    block_store: &BlockStore<C::Block>,
    state_store: &StateStore<C>,
    app: &dyn App<C>,
) -> Result<(Option<C::State>, Observed)> {
    let state = state_store.load_state()?;
    let empty = state
        .as_ref()
        .map_or(0, |s| s.initial_height().saturating_sub(1));
    let norm = |h: u64| if h == 0 { empty } else { h };
    let observed = Observed {
        block_store_height: norm(block_store.height()),
        state_height: state.as_ref().map_or(0, |s| s.height()),
        app_height: norm(app.durable()?.height),
        record: block_store.load_flush_record()?,
    };
    Ok((state, observed))
}

impl<C: Chain> Node<C> {
    /// Opens the node over its databases, runs the handshake (repairing what a crash left,
    /// or refusing with the heights), and returns it in consensus mode (call
    /// [`Node::start_block_sync`] to hold writes).
    pub fn open(
        block_store_db: Arc<dyn Db>,
        state_db: Arc<dyn Db>,
        app: Box<dyn App<C>>,
        chain: C,
        sink: Box<dyn EventSink>,
    ) -> Result<(Node<C>, HandshakeReport)> {
        let genesis_id = chain.genesis_id();
        if chain.genesis_state([0; 32]).initial_height() == 0 {
            return Err(Error::InvalidInput(
                "the genesis initial height must be at least 1".into(),
            ));
        }
        let block_db: NodeDb = Arc::new(HoldingDb::new(block_store_db));
        let state_db: NodeDb = Arc::new(HoldingDb::new(state_db));
        let block_store = BlockStore::open(block_db.clone() as Arc<dyn Db>)?;
        let state_store = StateStore::open(state_db.clone() as Arc<dyn Db>);
        let (state, observed) = observe(&block_store, &state_store, &*app)?;
        // Another chain's home is refused before anything is written or repaired.
        let genesis_stored = state_store.load_genesis_hash()?;
        if let Some(stored) = genesis_stored
            && stored != genesis_id
        {
            return Err(Error::GenesisMismatch {
                stored: crate::error::hex(&stored),
                given: crate::error::hex(&genesis_id),
            });
        }
        let case = case_at_open(state.is_some(), &observed)
            .map_err(|reason| refusal(&observed, reason))?;
        let state = match state {
            Some(s) => s,
            // `Fresh`: the genesis state, saved by the repair.
            None => chain.genesis_state(app.committed()?.app_hash),
        };
        let flushed = state.height();
        let path = WritePath::of(&block_db, &state_db);
        let mut node = Node {
            block_db,
            state_db,
            block_store,
            state_store,
            app,
            chain,
            state,
            mode: Mode::Consensus,
            sink,
            poison: crate::poison::Poison::default(),
            app_share: AppShare::Unasked,
            flush: FlushScheduler::new(flushed),
            home: None,
            path,
        };
        let report = node.repair(observed, case, &genesis_id, genesis_stored.is_some())?;
        node.flush.deferred.flushed_height = node.state.height();
        Ok((node, report))
    }

    /// Opens the node over the databases of `home`, as [`Node::open`] does, and keeps the
    /// home: it stays locked until the node is dropped (or stopped), so a second
    /// [`Home::open`] of the same directory — from this process or another — fails with
    /// [`Error::HomeLocked`] ([`crate::ErrorKind::Locked`]) meanwhile.
    ///
    /// `app` builds the application over the home's app database.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use flushpoint::demo::{ChainSpec, KvApp, Profile};
    /// use flushpoint::{Db, HoldingDb, Home, NoEvents, Node};
    ///
    /// let spec = ChainSpec::new(1, Profile::Light);
    /// let home = Home::open(std::path::Path::new("node-home"))?;
    /// let (node, _report) = Node::open_home(
    ///     home,
    ///     |app_db| Ok(Box::new(KvApp::open(Arc::new(HoldingDb::new(app_db)))?)),
    ///     spec.chain(),
    ///     Box::new(NoEvents),
    /// )?;
    /// assert!(Home::open(std::path::Path::new("node-home")).is_err()); // locked
    /// drop(node); // unlocks
    /// # Ok::<(), flushpoint::Error>(())
    /// ```
    ///
    /// `Err`: as [`Node::open`]; the home is closed (and unlocked) when this returns.
    pub fn open_home(
        home: Home,
        app: impl FnOnce(Arc<dyn Db>) -> Result<Box<dyn App<C>>>,
        chain: C,
        sink: Box<dyn EventSink>,
    ) -> Result<(Node<C>, HandshakeReport)> {
        let app = app(home.app_db.clone() as Arc<dyn Db>)?;
        let (mut node, report) = Node::open(
            home.block_store_db.clone(),
            home.state_db.clone(),
            app,
            chain,
            sink,
        )?;
        node.home = Some(home);
        Ok((node, report))
    }

    /// The home this node owns, when opened with [`Node::open_home`].
    pub fn home(&self) -> Option<&Home> {
        self.home.as_ref()
    }
}

/// The handshake's refusal of the shape `o`, for `reason`, reported as a `tracing` error:
/// nothing was changed on disk.
fn refusal(o: &Observed, reason: &'static str) -> Error {
    tracing::error!(
        target: "flushpoint::handshake",
        block_store_height = o.block_store_height,
        state_height = o.state_height,
        app_height = o.app_height,
        record = %fmt_record(o.record),
        reason,
        "handshake refused the home; nothing was changed on disk"
    );
    Error::Inconsistent {
        heights: Heights {
            block_store_height: o.block_store_height,
            state_height: o.state_height,
            app_height: o.app_height,
        },
        record: fmt_record(o.record),
        reason: reason.into(),
    }
}
