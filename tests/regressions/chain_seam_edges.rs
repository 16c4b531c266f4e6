//! The chain seam (ADR 0009) at its edges: `rebuild_state` returns the state a node had at
//! every height and refuses any one input that does not match or is not stored; a pruned
//! history load names its slot; a history pointer into the future is corrupt; a chain that
//! cannot rebuild a state still rolls a block store back to its state; a stored block with
//! rewritten transactions is corrupt; a rerun of a rollback after its state step does not
//! lower the state again. Each test names the mutants of the seam it catches (the mutation
//! section of docs/TESTING.md).
//!
//! The expected values come from outside the code under test: the states a node reached
//! block by block (for the demo chain's `rebuild_state`), the heights and bytes this file
//! wrote itself (for the state store's history and rollback), and the errors the documents
//! promise.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use flushpoint::codec::keys;
use flushpoint::demo::{Block, BlockResults, DemoChain, KvApp, State};
use flushpoint::home::ROLLBACK_INTENT_FILE;
use flushpoint::records::{HistoryEntry, PartRecord, StateStoreBase, encode};
use flushpoint::store::{BlockStore, StateStore};
use flushpoint::testing::{DirFate, FileFate, SimFs, SimOp};
use flushpoint::{
    Chain, Db, Error, HistorySlot, HoldingDb, Home, MemoryDb, NoEvents, Node, PartSet, RedbOptions,
    Result, StoredHistory,
};
use support::ledger::{self, Ledger, LedgerApp, LedgerBlock};
use support::plan;

/// The demo chain's history slots (ADR 0009: validators in slot 0, params in slot 1).
fn validators_slot() -> HistorySlot {
    HistorySlot::new(0).expect("slot 0")
}
fn params_slot() -> HistorySlot {
    HistorySlot::new(1).expect("slot 1")
}

/// A demo node over in-memory databases driven `blocks` blocks in consensus mode (every
/// write durable at once); returns it with the state it had after each height, from the
/// genesis state (`states[0]` is at `initial_height - 1`).
fn demo_node(initial_height: u64, blocks: u64) -> (Node<DemoChain>, Vec<State>) {
    let spec = plan::spec(initial_height);
    let app = KvApp::open(Arc::new(HoldingDb::new(
        Arc::new(MemoryDb::new("app")) as Arc<dyn Db>
    )))
    .expect("open the app");
    let (mut node, _) = Node::open(
        Arc::new(MemoryDb::new("block store")),
        Arc::new(MemoryDb::new("state")),
        Box::new(app),
        spec.chain(),
        Box::new(NoEvents),
    )
    .expect("open the node");
    let mut states = vec![node.state().clone()];
    for _ in 0..blocks {
        let (b, p, c) = spec.next_block(node.state());
        node.commit_block(&b, &p, &c).expect("commit a block");
        states.push(node.state().clone());
    }
    (node, states)
}

/// One input of `rebuild_state` replaced or withheld.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tamper {
    None,
    /// Block `h` with another time (so another hash).
    BlockTime,
    /// The validators in force at `h + 1` replaced by the set in force at `other`.
    Validators {
        other: u64,
    },
    /// The params in force at `h + 1` replaced by those in force at `other`.
    Params {
        other: u64,
    },
    /// The results of block `h` with one more transaction result.
    Results,
    /// Withheld: block `at`.
    NoBlock {
        at: u64,
    },
    /// Withheld: `slot`'s history at `at`.
    NoHistory {
        slot: u8,
        at: u64,
    },
    /// Withheld: the results of `at`.
    NoResults {
        at: u64,
    },
}

/// The stores' loads, with one tampered for the rebuild at height `h`.
struct Loads<'a> {
    bs: &'a BlockStore<Block>,
    st: &'a StateStore<DemoChain>,
    h: u64,
    tamper: Tamper,
}

impl StoredHistory<DemoChain> for Loads<'_> {
    fn block(&self, height: u64) -> Result<Option<Block>> {
        if self.tamper == (Tamper::NoBlock { at: height }) {
            return Ok(None);
        }
        let mut b = self.bs.load_block(height)?;
        if self.tamper == Tamper::BlockTime
            && height == self.h
            && let Some(b) = &mut b
        {
            b.header.time_ms += 1;
        }
        Ok(b)
    }
    fn results(&self, height: u64) -> Result<Option<BlockResults>> {
        if self.tamper == (Tamper::NoResults { at: height }) {
            return Ok(None);
        }
        let mut r = self.st.load_results(height)?;
        if self.tamper == Tamper::Results
            && height == self.h
            && let Some(r) = &mut r
        {
            r.tx_results.push(flushpoint::demo::TxResult {
                code: 7,
                data: Bytes::from_static(b"not this block's"),
            });
        }
        Ok(r)
    }
    fn history(&self, slot: HistorySlot, height: u64) -> Result<Option<(u64, Bytes)>> {
        if self.tamper
            == (Tamper::NoHistory {
                slot: slot.index(),
                at: height,
            })
        {
            return Ok(None);
        }
        let from = match self.tamper {
            Tamper::Validators { other } if slot == validators_slot() && height == self.h + 1 => {
                other
            }
            Tamper::Params { other } if slot == params_slot() && height == self.h + 1 => other,
            _ => height,
        };
        self.st.load_history(slot, from)
    }
}

fn rebuild(node: &Node<DemoChain>, h: u64, tamper: Tamper) -> std::result::Result<State, String> {
    let loads = Loads {
        bs: node.block_store(),
        st: node.state_store(),
        h,
        tamper,
    };
    node.state_store()
        .load_state()
        .expect("load the state")
        .map(|cur| {
            DemoChain::rebuild_state(&plan::spec(cur.initial_height).chain(), &cur, h, &loads)
                .expect("no read error")
        })
        .expect("a state is saved")
}

/// A height other than `h + 1` whose value in `slot` differs from the one at `h + 1`.
fn other_value_height(node: &Node<DemoChain>, slot: HistorySlot, h: u64, top: u64) -> u64 {
    let st = node.state_store();
    let at = |x: u64| st.load_history(slot, x).expect("load").expect("stored").1;
    let mine = at(h + 1);
    (1..=top + 1)
        .find(|&x| at(x) != mine)
        .unwrap_or_else(|| panic!("no other value of slot {} than at {}", slot.index(), h + 1))
}

/// Mutants: `DemoChain::rebuild_state` → `Ok(Ok(Default::default()))`, its `h + 1` → `h - 1`
/// / `h * 1` (block, history and genesis-branch heights), `h + 1 == initial` → `!=`, and the
/// header cross-check's `!=` → `==`.
#[test]
fn rebuild_state_returns_the_state_the_node_had_at_every_height() {
    for initial in [1, 5] {
        let (node, states) = demo_node(initial, 16);
        let tip = node.state().last_block_height;
        for (i, want) in states.iter().enumerate().take(states.len() - 1) {
            let h = initial - 1 + i as u64;
            assert_eq!(want.last_block_height, h, "the oracle's own heights");
            assert_eq!(
                rebuild(&node, h, Tamper::None).as_ref(),
                Ok(want),
                "initial height {initial}: the state rebuilt at {h} (tip {tip})"
            );
        }
    }
}

/// Mutants: the header cross-check's three `||` → `&&` (one mismatching field alone must
/// refuse the rebuild), on both branches (the genesis state at `initial - 1`, a later one).
#[test]
fn rebuild_state_refuses_any_one_input_that_does_not_match_the_next_header() {
    let initial = 1;
    let (node, _) = demo_node(initial, 16);
    let top = node.state().last_block_height;
    for h in [0, 3, 6, 10] {
        let mut tampers = vec![
            Tamper::Validators {
                other: other_value_height(&node, validators_slot(), h, top),
            },
            Tamper::Params {
                other: other_value_height(&node, params_slot(), h, top),
            },
        ];
        if h + 1 > initial {
            // Not read on the genesis branch.
            tampers.extend([Tamper::BlockTime, Tamper::Results]);
        }
        for t in tampers {
            match rebuild(&node, h, t) {
                Err(reason) => assert!(
                    reason.contains("does not match block"),
                    "{t:?} at {h}: refused for another reason: {reason}"
                ),
                Ok(s) => panic!("{t:?} at {h}: rebuilt {s:?}"),
            }
        }
    }
}

/// Mutants: the `missing` returns of `DemoChain::rebuild_state` (an input not stored refuses
/// the rebuild, naming it), and the heights they are read at.
#[test]
fn rebuild_state_names_an_input_that_is_not_stored() {
    let (node, _) = demo_node(1, 12);
    let h = 7;
    let cases = [
        (Tamper::NoBlock { at: h + 1 }, "block 8 is not stored"),
        (Tamper::NoBlock { at: h }, "block 7 is not stored"),
        (
            Tamper::NoHistory { slot: 0, at: h + 1 },
            "the validators for height 8 is not stored",
        ),
        (
            Tamper::NoHistory { slot: 1, at: h + 1 },
            "the consensus params for height 8 is not stored",
        ),
        (
            Tamper::NoHistory { slot: 0, at: h },
            "the validators for height 7 is not stored",
        ),
        (
            Tamper::NoResults { at: h },
            "the results of block 7 is not stored",
        ),
    ];
    for (t, want) in cases {
        assert_eq!(rebuild(&node, h, t), Err(want.to_string()), "{t:?}");
    }
}

/// The negative control of the two tests above: a `Loads` that tampers nothing is not
/// refused, and each tamper really changes what it loads.
#[test]
fn the_tampered_loads_differ_from_the_stored_ones() {
    let (node, _) = demo_node(1, 12);
    let h = 6;
    let plain = Loads {
        bs: node.block_store(),
        st: node.state_store(),
        h,
        tamper: Tamper::None,
    };
    for t in [Tamper::BlockTime, Tamper::Results] {
        let l = Loads { tamper: t, ..plain };
        assert_ne!(
            (l.block(h).unwrap(), l.results(h).unwrap()),
            (plain.block(h).unwrap(), plain.results(h).unwrap()),
            "{t:?}"
        );
    }
    assert!(rebuild(&node, h, Tamper::None).is_ok());
}

/// Mutant: `ChainState::history_names` (the default) → `[""; 4]` / `["xyzzy"; 4]`. A chain
/// that keeps the default (the ledger) gets "history slot N" in a pruned load's error.
#[test]
fn a_pruned_history_load_names_the_default_slot() {
    let db: Arc<dyn Db> = Arc::new(MemoryDb::new("state"));
    let k = keys::singleton(keys::STATE_STORE_BASE);
    let mut batch = flushpoint::Batch::new();
    batch.put(
        Bytes::copy_from_slice(&k),
        encode(&k, &StateStoreBase { base: 10 }),
    );
    db.write(&batch, flushpoint::Durability::Synced).unwrap();
    let st = StateStore::<Ledger>::open(db);
    for slot in HistorySlot::all() {
        match st.load_history(slot, 9) {
            Err(Error::Pruned {
                what, height, base, ..
            }) => {
                assert_eq!(what, format!("history slot {}", slot.index()));
                assert_eq!((height, base), (9, 10));
            }
            other => panic!("slot {}: {other:?}", slot.index()),
        }
    }
}

/// Writes `entries` (height, changed_at, value) of history `slot` straight into `db`.
fn put_history(db: &dyn Db, slot: HistorySlot, entries: &[(u64, u64, Option<&'static [u8]>)]) {
    let mut batch = flushpoint::Batch::new();
    for &(h, changed_at, value) in entries {
        let k = keys::height_key(keys::HISTORY_PREFIXES[slot.index() as usize], h);
        let entry = HistoryEntry {
            changed_at,
            value: value.map(Bytes::from_static),
        };
        batch.put(Bytes::copy_from_slice(&k), entry.encode(slot, &k));
    }
    db.write(&batch, flushpoint::Durability::Synced).unwrap();
}

/// Mutant: `StateStore::load_history`'s guard `at < height` → `true`. A pointer entry whose
/// `changed_at` lies above its own height (a damaged entry) points at a later stored value;
/// the load must report corruption, not answer a value from the future. The same layout
/// with the change below the height loads (the negative control).
#[test]
fn a_history_pointer_into_the_future_is_corrupt() {
    for slot in HistorySlot::all() {
        let db: Arc<dyn Db> = Arc::new(MemoryDb::new("state"));
        // At 5: "in force since 9, stored there"; at 9: the value.
        put_history(&*db, slot, &[(5, 9, None), (9, 9, Some(b"from 9"))]);
        let st = StateStore::<DemoChain>::open(db.clone());
        match st.load_history(slot, 5) {
            Err(Error::Corrupt { height, .. }) => assert_eq!(height, Some(5)),
            other => panic!("slot {}: {other:?}", slot.index()),
        }
        assert_eq!(
            st.load_history(slot, 9).unwrap(),
            Some((9, Bytes::from_static(b"from 9")))
        );
        // The control: at 12, "in force since 9" loads the value stored at 9.
        put_history(&*db, slot, &[(12, 9, None)]);
        assert_eq!(
            st.load_history(slot, 12).unwrap(),
            Some((9, Bytes::from_static(b"from 9")))
        );
    }
}

const LEDGER_HOME: &str = "/ledger-home";

fn ledger_app(home: &Home) -> LedgerApp {
    LedgerApp::open(Arc::new(HoldingDb::new(home.app_db.clone() as Arc<dyn Db>)))
        .expect("open the ledger app")
}

/// A ledger home on a new `SimFs`: `blocks` blocks committed in consensus, then (when
/// `block_ahead`) block `blocks + 1` saved to the block store alone — what a crash between
/// a consensus block's block-store write and its execution leaves.
fn ledger_home(chain: &Ledger, blocks: u64, block_ahead: bool) -> SimFs {
    let fs = SimFs::new();
    let opts = RedbOptions::default();
    let home = Home::open_on(Arc::new(fs.clone()), Path::new(LEDGER_HOME), &opts).unwrap();
    let (mut node, _) = Node::open(
        home.block_store_db.clone(),
        home.state_db.clone(),
        Box::new(ledger_app(&home)),
        chain.clone(),
        Box::new(NoEvents),
    )
    .unwrap();
    while node.height() < blocks {
        let (b, p, c) = chain.next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
    let state = node.state().clone();
    node.stop(Instant::now()).unwrap();
    if block_ahead {
        let bs =
            BlockStore::<LedgerBlock>::open(home.block_store_db.clone() as Arc<dyn Db>).unwrap();
        let (b, p, c) = chain.next_block(&state);
        bs.save_block(&b, &p, &c).unwrap();
    }
    drop(home);
    fs
}

fn ledger_rollback(fs: &SimFs, chain: &Ledger, to: u64) -> Result<flushpoint::RollbackReport> {
    let home = Home::open_for_rollback_on(
        Arc::new(fs.clone()),
        Path::new(LEDGER_HOME),
        &RedbOptions::default(),
    )?;
    let mut app = ledger_app(&home);
    flushpoint::rollback(&home, &mut app, chain, to)
}

/// Mutant: `rollback`'s `to < s` (rebuild the state only when it is above the target) →
/// `to <= s`. A chain that cannot rebuild a past state (the ledger keeps
/// `Chain::rebuild_state`'s default) can still roll back a block store that is ahead of its
/// state to the state's height: no state is rebuilt. The mutant asks the chain to rebuild
/// the state at its own height and is refused.
#[test]
fn a_chain_that_cannot_rebuild_rolls_a_block_store_back_to_its_state() {
    let chain = Ledger { seed: 21 };
    let fs = ledger_home(&chain, 6, true);
    let r = ledger_rollback(&fs, &chain, 6).expect("roll the block store back to the state");
    assert_eq!(
        (r.blocks_removed, r.state_rolled_back, r.app_rolled_back),
        (1, false, false),
        "{r:?}"
    );
    assert_eq!(
        (
            r.before.block_store_height,
            r.before.state_height,
            r.before.app_height
        ),
        (7, 6, 6)
    );
    // The home opens at 6 and syncs on.
    let home = Home::open_on(
        Arc::new(fs.clone()),
        Path::new(LEDGER_HOME),
        &RedbOptions::default(),
    )
    .unwrap();
    let (node, report) = Node::open(
        home.block_store_db.clone(),
        home.state_db.clone(),
        Box::new(ledger_app(&home)),
        chain.clone(),
        Box::new(NoEvents),
    )
    .unwrap();
    assert_eq!((node.height(), report.height), (6, 6));
    drop((node, home));

    // The control: the ledger refuses to rebuild any state, its current one included, so the
    // rollback above succeeds only if it asks for none.
    let current = node_state_of(&fs, &chain);
    assert_eq!(current.height, 6);
    match chain.rebuild_state(&current, 6, &Nothing) {
        Ok(Err(m)) => assert!(m.contains("cannot rebuild"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// Loads that find nothing.
struct Nothing;

impl StoredHistory<Ledger> for Nothing {
    fn block(&self, _: u64) -> Result<Option<LedgerBlock>> {
        Ok(None)
    }
    fn results(&self, _: u64) -> Result<Option<ledger::LedgerResults>> {
        Ok(None)
    }
    fn history(&self, _: HistorySlot, _: u64) -> Result<Option<(u64, Bytes)>> {
        Ok(None)
    }
}

/// The ledger state saved in the home on `fs`.
fn node_state_of(fs: &SimFs, _: &Ledger) -> ledger::LedgerState {
    let home = Home::open_on(
        Arc::new(fs.clone()),
        Path::new(LEDGER_HOME),
        &RedbOptions::default(),
    )
    .unwrap();
    StateStore::<Ledger>::open(home.state_db.clone() as Arc<dyn Db>)
        .load_state()
        .unwrap()
        .expect("a saved state")
}

/// Mutant: the demo chain's `ChainBlock::check_body` → `Ok(())`. The block hash covers the
/// header only: a stored block whose transactions were rewritten (same lengths, so the same
/// part count and size, and parts framed with valid checksums) still hashes to its meta's
/// hash, and only the header's data hash tells. The load must report corruption. The
/// control: the same rewrite with the transactions unchanged loads the block.
#[test]
fn a_stored_block_with_rewritten_transactions_is_corrupt() {
    for rewrite in [false, true] {
        let (node, _) = demo_node(1, 6);
        let h = (1..=6)
            .find(|&h| {
                let b = node.block_store().load_block(h).unwrap().unwrap();
                !b.txs.is_empty()
            })
            .expect("a block with transactions");
        let bs = node.block_store();
        let mut block = bs.load_block(h).unwrap().unwrap();
        let parts_before = bs.load_block_meta(h).unwrap().unwrap().part_count;
        if rewrite {
            let tx = block.txs[0].to_vec();
            block.txs[0] = Bytes::from(tx.iter().map(|b| b ^ 0x5a).collect::<Vec<u8>>());
        }
        let parts = PartSet::from_block(&block);
        assert_eq!(
            parts.total(),
            parts_before,
            "the rewrite keeps the part count"
        );
        let mut batch = flushpoint::Batch::new();
        for i in 0..parts.total() {
            let k = keys::part_key(h, i);
            batch.put(
                Bytes::copy_from_slice(&k),
                encode(&k, &PartRecord(parts.part(i).unwrap().clone())),
            );
        }
        bs.db()
            .write(&batch, flushpoint::Durability::Synced)
            .unwrap();
        let reopened = BlockStore::<Block>::open(bs.db().clone()).unwrap();
        match (rewrite, reopened.load_block(h)) {
            (false, Ok(Some(b))) => assert_eq!(b, block),
            (true, Err(Error::Corrupt { height, .. })) => assert_eq!(height, Some(h)),
            (_, other) => panic!(
                "rewrite {rewrite}: {:?}",
                other.map(|b| b.map(|b| format!("loaded block {}", b.height())))
            ),
        }
    }
}

const DEMO_HOME: &str = "/demo-home";

fn demo_app(home: &Home) -> KvApp<Arc<dyn Db>> {
    KvApp::open(Arc::new(HoldingDb::new(home.app_db.clone() as Arc<dyn Db>))).expect("open the app")
}

/// A demo home on a new `SimFs`, `blocks` blocks committed in consensus, stopped cleanly.
fn demo_home(blocks: u64) -> SimFs {
    let fs = SimFs::new();
    let home = Home::open_on(
        Arc::new(fs.clone()),
        Path::new(DEMO_HOME),
        &RedbOptions::default(),
    )
    .unwrap();
    let spec = plan::spec(1);
    let (mut node, _) = Node::open(
        home.block_store_db.clone(),
        home.state_db.clone(),
        Box::new(demo_app(&home)),
        spec.chain(),
        Box::new(NoEvents),
    )
    .unwrap();
    while node.height() < blocks {
        let (b, p, c) = spec.next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
    node.stop(Instant::now()).unwrap();
    fs
}

fn demo_rollback(fs: &SimFs, to: u64) -> Result<flushpoint::RollbackReport> {
    let home = Home::open_for_rollback_on(
        Arc::new(fs.clone()),
        Path::new(DEMO_HOME),
        &RedbOptions::default(),
    )?;
    let mut app = demo_app(&home);
    flushpoint::rollback(&home, &mut app, &plan::spec(1).chain(), to)
}

fn saved_state_of(fs: &SimFs) -> State {
    let home = Home::open_on(
        Arc::new(fs.clone()),
        Path::new(DEMO_HOME),
        &RedbOptions::default(),
    )
    .unwrap();
    StateStore::<DemoChain>::open(home.state_db.clone() as Arc<dyn Db>)
        .load_state()
        .unwrap()
        .expect("a saved state")
}

/// Mutants: `StateStore::load_state_bytes` → `Ok(None)` / `Ok(Some(empty))`. Finishing a
/// rollback whose state step is already durable (a crash at the intent's removal) must see
/// the lowered state and not write it again: the rerun reports `state_rolled_back: false`
/// ("this call lowered the state"). The control: the uncut rollback lowers it and says so,
/// and both end at the same state.
#[test]
fn a_rerun_after_the_state_step_does_not_lower_the_state_again() {
    let (top, to) = (8, 5);
    let start = demo_home(top);
    // The uncut run, and the position of its last operation: the intent's removal.
    let probe = start.crash_image(DirFate::KeepAll, FileFate::KeepAll);
    let uncut = demo_rollback(&probe, to).expect("the uncut rollback");
    assert_eq!(
        (
            uncut.blocks_removed,
            uncut.state_rolled_back,
            uncut.finished_interrupted
        ),
        (top - to, true, false),
        "{uncut:?}"
    );
    let log = probe.stats().log;
    let unlink = log
        .iter()
        .rposition(|(op, path)| *op == SimOp::Unlink && path.ends_with(ROLLBACK_INTENT_FILE))
        .expect("the intent is removed") as u64
        + 1;
    let cut = start.crash_image(DirFate::KeepAll, FileFate::KeepAll);
    cut.set_cut_at(Some(unlink));
    assert!(demo_rollback(&cut, to).is_err() && cut.is_dead());
    // The cut unlink never reached the disk (a cut op may or may not have: here not).
    let img = cut.crash_image(DirFate::DropAll, FileFate::DropAll);
    assert!(
        img.list(Path::new(DEMO_HOME))
            .contains(&ROLLBACK_INTENT_FILE.to_string()),
        "the intent survives the cut"
    );
    let rerun = demo_rollback(&img, to).expect("the rerun finishes the rollback");
    assert_eq!(
        (
            rerun.blocks_removed,
            rerun.state_rolled_back,
            rerun.finished_interrupted
        ),
        (0, false, true),
        "{rerun:?}"
    );
    let state = saved_state_of(&img);
    assert_eq!(state.last_block_height, to);
    assert_eq!(state, saved_state_of(&probe));
}
