//! The engine's crash and fsync properties on two chains that share nothing but the seam:
//! the demo chain (sha256 over a tendermint-like header, `KvApp`) and the ledger of
//! `examples/ledger_node` (its own little-endian encoding, an FNV-based hash, balances).
//!
//! Every check is written once, generic over [`TestChain`], and run on both:
//! - **power cut at every synced write**: a run (block sync with flush points, the switch to
//!   consensus, consensus blocks) over three in-memory databases that fail from the n-th
//!   synced write on, for every n; after each cut the node is reopened over what the
//!   databases hold: the handshake must accept (and repair) it at a height at or above the
//!   last height the run saw acknowledged, and the chain resumed from there must reach the
//!   uncut run's tip with the same block hash and app hash;
//! - **handshake repairs**: each repairable shape (app behind, block store ahead, state
//!   behind the app, a flush point's roll-forward) made by hand and repaired;
//! - **fsync counts**: exactly one synced batch per database per flush point and 4 per
//!   consensus block (block store 1, state 2, app 1), stated as numbers.
//!
//! The oracle is the uncut run (the same deterministic chain, never cut), not the engine's
//! own bookkeeping; `the_oracle_rejects_a_wrong_tip` feeds it a wrong answer.

use crate::support;

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash as _, Hasher};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use flushpoint::db::{CountingDb, collect_range};
use flushpoint::demo::{ChainSpec, DemoChain, KvApp, Profile};
use flushpoint::testing::{FailAfter, FailingDb, RecordingDb, WriteLog, WriteRecord};
use flushpoint::{
    App, Chain, ChainBlock, ChainState, Db, Direction, Durability, FlushTrigger, HandshakeCase,
    HoldingDb, KeyRange, MemoryDb, NoEvents, Node, PartSet,
};
use support::ledger::{self, Ledger, LedgerApp};

/// A chain under test: how to build its app and its next block.
trait TestChain: Chain + Clone {
    /// The chain's name in messages.
    const NAME: &'static str;
    /// The app over the app database.
    fn app(&self, db: Arc<dyn Db>) -> Box<dyn App<Self>>;
    /// The block after `state`, its parts and its seen commit.
    fn next(&self, state: &Self::State) -> (Self::Block, PartSet, Self::Commit);
}

impl TestChain for DemoChain {
    const NAME: &'static str = "demo";
    fn app(&self, db: Arc<dyn Db>) -> Box<dyn App<DemoChain>> {
        Box::new(KvApp::open(Arc::new(HoldingDb::new(db))).expect("open the demo app"))
    }
    fn next(
        &self,
        state: &flushpoint::demo::State,
    ) -> (flushpoint::demo::Block, PartSet, flushpoint::demo::Commit) {
        demo_spec().next_block(state)
    }
}

fn demo_spec() -> ChainSpec {
    ChainSpec::new(5, Profile::Mixed)
}

impl TestChain for Ledger {
    const NAME: &'static str = "ledger";
    fn app(&self, db: Arc<dyn Db>) -> Box<dyn App<Ledger>> {
        Box::new(LedgerApp::open(Arc::new(HoldingDb::new(db))).expect("open the ledger app"))
    }
    fn next(
        &self,
        state: &ledger::LedgerState,
    ) -> (ledger::LedgerBlock, PartSet, ledger::LedgerCommit) {
        self.next_block(state)
    }
}

/// A run's shape: blocks block-synced with a flush point after every `flush_every`, then
/// the switch to consensus and `consensus` blocks.
#[derive(Debug, Clone, Copy)]
struct Shape {
    sync_blocks: u64,
    flush_every: u64,
    consensus: u64,
    background: bool,
}

impl Shape {
    fn tip(self) -> u64 {
        self.sync_blocks + self.consensus
    }
}

/// The shapes every chain is cut in: windows of 1, 2, 3, 4, 5 and 7 blocks; block sync
/// ending on a window's edge or inside one (the switch's flush point cuts it short); one or
/// three consensus blocks; synchronous and background flush points.
fn shapes() -> Vec<Shape> {
    let mut out = Vec::new();
    for flush_every in [1, 2, 3, 4, 5, 7] {
        for sync_blocks in [2 * flush_every, 3 * flush_every + 1] {
            for consensus in [1, 3] {
                for background in [false, true] {
                    out.push(Shape {
                        sync_blocks,
                        flush_every,
                        consensus,
                        background,
                    });
                }
            }
        }
    }
    out
}

/// The shape of the fsync-count and repair tests.
const PLAIN: Shape = Shape {
    sync_blocks: 12,
    flush_every: 4,
    consensus: 3,
    background: false,
};

/// What a run ends with: the tip's height, block hash and app hash, and every key of the
/// three databases.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tip {
    height: u64,
    block_hash: [u8; 32],
    app_hash: [u8; 32],
    contents: [BTreeMap<Bytes, Bytes>; 3],
}

fn open<C: TestChain>(
    chain: &C,
    dbs: &[Arc<dyn Db>; 3],
) -> flushpoint::Result<(Node<C>, HandshakeCase)> {
    Node::open(
        dbs[0].clone(),
        dbs[1].clone(),
        chain.app(dbs[2].clone()),
        chain.clone(),
        Box::new(NoEvents),
    )
    .map(|(n, r)| (n, r.case))
}

/// Drives `node` to `shape`'s tip from wherever it is: block sync with a flush point every
/// `flush_every` blocks up to `sync_blocks`, the switch, then consensus blocks. Calls `ack`
/// with each height a call returned as durable.
fn drive<C: TestChain>(
    chain: &C,
    node: &mut Node<C>,
    shape: Shape,
    ack: &mut dyn FnMut(u64),
) -> flushpoint::Result<()> {
    let now = Instant::now();
    if node.height() < shape.sync_blocks {
        let policy = flushpoint::FlushPolicy::default().with_background(shape.background);
        node.start_block_sync(policy, now)?;
        while node.height() < shape.sync_blocks {
            let (b, p, s) = chain.next(node.state());
            node.sync_block(&b, &p, &s, now)?;
            if node.height().is_multiple_of(shape.flush_every) {
                node.flush_point(FlushTrigger::Interval, now)?;
                ack(node.durable_height());
            }
        }
        node.switch_to_consensus(now)?;
        ack(node.durable_height());
    }
    while node.height() < shape.tip() {
        let (b, p, s) = chain.next(node.state());
        node.commit_block(&b, &p, &s)?;
        ack(node.height());
    }
    Ok(())
}

fn dump(db: &dyn Db) -> BTreeMap<Bytes, Bytes> {
    collect_range(db, KeyRange::all(), Direction::Forward)
        .expect("read a database")
        .into_iter()
        .collect()
}

/// The tip of a run over `mem` that reached the end.
fn tip_of<C: TestChain>(node: &Node<C>, mem: &[Arc<MemoryDb>; 3], shape: Shape) -> Tip {
    Tip {
        height: node.height(),
        block_hash: node
            .load_block(shape.tip(), flushpoint::ReadView::Durable)
            .expect("read the tip")
            .expect("the tip is stored")
            .hash(),
        app_hash: node.state().app_hash(),
        contents: [0, 1, 2].map(|i| dump(&*mem[i])),
    }
}

fn memory() -> [Arc<MemoryDb>; 3] {
    ["block store", "state", "app"].map(|n| Arc::new(MemoryDb::new(n)))
}

fn as_dbs(m: &[Arc<MemoryDb>; 3]) -> [Arc<dyn Db>; 3] {
    [0, 1, 2].map(|i| m[i].clone() as Arc<dyn Db>)
}

/// Databases holding the first writes of `logs` (each log's records in order): a power cut
/// after them. Every write is synced, so each one that returned is durable and the one in
/// flight is all or none.
fn replay(logs: &[&[WriteRecord]]) -> [Arc<MemoryDb>; 3] {
    let mem = memory();
    for r in logs.iter().flat_map(|l| l.iter()) {
        let db = mem
            .iter()
            .find(|m| m.name() == r.db)
            .expect("a known database");
        db.write(&r.batch, Durability::Synced)
            .expect("replay a write");
    }
    mem
}

/// The three databases recording into one log.
fn recording(mem: &[Arc<MemoryDb>; 3], log: &WriteLog) -> [Arc<dyn Db>; 3] {
    [0, 1, 2].map(|i| {
        Arc::new(RecordingDb::new(mem[i].clone() as Arc<dyn Db>, log.clone())) as Arc<dyn Db>
    })
}

/// A run from `mem` to the tip, recorded: its writes and, for each acknowledged height,
/// the number of writes before the acknowledgement.
struct Recorded {
    /// The node's height right after the handshake.
    reopened: u64,
    log: Vec<WriteRecord>,
    acks: Vec<(usize, u64)>,
    tip: Tip,
    case: HandshakeCase,
}

fn run_recorded<C: TestChain>(
    chain: &C,
    mem: &[Arc<MemoryDb>; 3],
    shape: Shape,
) -> Result<Recorded, String> {
    let log = WriteLog::new();
    let dbs = recording(mem, &log);
    let (mut node, case) = open(chain, &dbs).map_err(|e| format!("the handshake refused: {e}"))?;
    let reopened = node.height();
    let mut acks = Vec::new();
    let ack_log = log.clone();
    drive(chain, &mut node, shape, &mut |h| {
        acks.push((ack_log.len(), h))
    })
    .map_err(|e| format!("the run failed: {e}"))?;
    let tip = tip_of(&node, mem, shape);
    node.stop(Instant::now())
        .map_err(|e| format!("stop: {e}"))?;
    Ok(Recorded {
        reopened,
        log: log.records(),
        acks,
        tip,
        case,
    })
}

/// The highest height acknowledged before write `cut` (0: none).
fn acked_before(acks: &[(usize, u64)], cut: usize) -> u64 {
    acks.iter()
        .filter(|(at, _)| *at <= cut)
        .map(|(_, h)| *h)
        .max()
        .unwrap_or(0)
}

/// Checks a recovered run against the uncut one (the oracle): the height it reopened at
/// keeps everything acknowledged, and it ends with the uncut run's tip and databases.
fn check_recovery(
    what: &str,
    reopened_at: u64,
    acked: u64,
    got: &Tip,
    want: &Tip,
) -> Result<(), String> {
    if reopened_at < acked {
        return Err(format!(
            "{what}: reopened at {reopened_at}, below the acknowledged {acked}"
        ));
    }
    if got.height != want.height
        || got.block_hash != want.block_hash
        || got.app_hash != want.app_hash
    {
        return Err(format!(
            "{what}: resumed tip ({}, {}, {}) differs from the uncut run's ({}, {}, {})",
            got.height,
            flushpoint::codec::hex(&got.block_hash),
            flushpoint::codec::hex(&got.app_hash),
            want.height,
            flushpoint::codec::hex(&want.block_hash),
            flushpoint::codec::hex(&want.app_hash)
        ));
    }
    for (i, name) in ["block store", "state", "app"].iter().enumerate() {
        if got.contents[i] != want.contents[i] {
            return Err(format!(
                "{what}: the {name} database differs from the uncut run's at the end"
            ));
        }
    }
    Ok(())
}

fn fingerprint(mem: &[Arc<MemoryDb>; 3]) -> u64 {
    let mut h = DefaultHasher::new();
    for m in mem {
        dump(&**m).hash(&mut h);
    }
    h.finish()
}

/// Cuts a run of `shape` at every write, and every recovery again at every one of its own
/// writes. Returns the distinct cut states checked.
fn power_cut_every_write<C: TestChain>(
    chain: &C,
    shape: Shape,
    cases: &mut BTreeMap<&'static str, u64>,
) -> usize {
    let uncut = run_recorded(chain, &memory(), shape).expect("the uncut run");
    let want = &uncut.tip;
    let mut seen = HashSet::new();
    for cut in 0..=uncut.log.len() {
        let first = &uncut.log[..cut];
        let mem = replay(&[first]);
        seen.insert(fingerprint(&mem));
        let acked = acked_before(&uncut.acks, cut);
        let what = format!("{} {shape:?}: cut after write {cut}", C::NAME);
        let recovery = run_recorded(chain, &mem, shape).unwrap_or_else(|e| panic!("{what}: {e}"));
        *cases.entry(recovery.case.name()).or_default() += 1;
        check_recovery(&what, recovery.reopened, acked, &recovery.tip, want).unwrap();
        // The recovery (handshake repair and resumed sync) cut at each of its own writes.
        for cut2 in 0..recovery.log.len() {
            let mem2 = replay(&[first, &recovery.log[..cut2]]);
            if !seen.insert(fingerprint(&mem2)) {
                continue;
            }
            let what2 = format!("{what}, recovery cut after its write {cut2}");
            let again =
                run_recorded(chain, &mem2, shape).unwrap_or_else(|e| panic!("{what2}: {e}"));
            *cases.entry(again.case.name()).or_default() += 1;
            // What the first run and the recovery acknowledged before their cuts.
            let acked2 = acked.max(acked_before(&recovery.acks, cut2));
            check_recovery(&what2, again.reopened, acked2, &again.tip, want).unwrap();
        }
    }
    seen.len()
}

/// Every handshake case a cut can leave: each must be reached on each chain.
const CASES: [HandshakeCase; 6] = [
    HandshakeCase::Fresh,
    HandshakeCase::Consistent,
    HandshakeCase::AppBehind,
    HandshakeCase::BlockStoreAhead,
    HandshakeCase::StateBehindApp,
    HandshakeCase::FlushRollForward,
];

/// Cuts every shape of `chain`; returns the cut states and checks every case was reached.
fn power_cut_chain<C: TestChain>(chain: &C) -> usize {
    let mut cases = BTreeMap::new();
    let states: usize = shapes()
        .into_iter()
        .map(|shape| power_cut_every_write(chain, shape, &mut cases))
        .sum();
    println!(
        "{}: {states} cut states over {} shapes; recoveries by case {cases:?}",
        C::NAME,
        shapes().len()
    );
    check_cases_reached(&cases).unwrap_or_else(|e| panic!("{}: {e}", C::NAME));
    states
}

/// `Err` naming a handshake case no recovery met.
fn check_cases_reached(cases: &BTreeMap<&'static str, u64>) -> Result<(), String> {
    for case in CASES {
        if !cases.contains_key(case.name()) {
            return Err(format!("no cut left the shape {}", case.name()));
        }
    }
    Ok(())
}

#[test]
fn power_cut_at_every_write_recovers_on_both_chains() {
    let demo = power_cut_chain(&demo_spec().chain());
    let ledger = power_cut_chain(&Ledger { seed: 3 });
    println!("{} cut states on two chains, 0 failures", demo + ledger);
}

#[test]
fn the_oracle_rejects_a_wrong_recovery() {
    let want = Tip {
        height: 10,
        block_hash: [1; 32],
        app_hash: [2; 32],
        contents: Default::default(),
    };
    assert!(check_recovery("x", 5, 5, &want, &want).is_ok());
    assert!(
        check_recovery("x", 4, 5, &want, &want).is_err(),
        "reopened below the acknowledged"
    );
    let mut changed = want.clone();
    changed.contents[2].insert(Bytes::from_static(b"k"), Bytes::from_static(b"v"));
    for wrong in [
        Tip {
            height: 9,
            ..want.clone()
        },
        Tip {
            block_hash: [9; 32],
            ..want.clone()
        },
        Tip {
            app_hash: [9; 32],
            ..want.clone()
        },
        changed,
    ] {
        assert!(
            check_recovery("x", 5, 5, &wrong, &want).is_err(),
            "{wrong:?}"
        );
    }
    let mut cases: BTreeMap<&'static str, u64> = CASES.iter().map(|c| (c.name(), 1)).collect();
    assert!(check_cases_reached(&cases).is_ok());
    cases.remove(HandshakeCase::StateBehindApp.name());
    assert!(check_cases_reached(&cases).is_err(), "a case never reached");
    assert_eq!(acked_before(&[(3, 4), (7, 8)], 2), 0);
    assert_eq!(acked_before(&[(3, 4), (7, 8)], 3), 4);
    assert_eq!(acked_before(&[(3, 4), (7, 8)], 9), 8);
}

/// Synced batches per database: [block store, state, app].
fn synced(c: &[Arc<CountingDb<MemoryDb>>; 3]) -> [u64; 3] {
    [0, 1, 2].map(|i| c[i].counts().synced_batches)
}

/// The fsync counts an embedder's CI states: a flush point is one synced batch per
/// database; a consensus block is 4 (block store 1, state 2, app 1).
fn fsync_counts<C: TestChain>(chain: &C) {
    let counting =
        ["block store", "state", "app"].map(|n| Arc::new(CountingDb::new(MemoryDb::new(n))));
    let dbs: [Arc<dyn Db>; 3] = [0, 1, 2].map(|i| counting[i].clone() as Arc<dyn Db>);
    let (mut node, _) = open(chain, &dbs).expect("open");
    let now = Instant::now();
    let synchronous = flushpoint::FlushPolicy::default().with_background(false);
    node.start_block_sync(synchronous, now).unwrap();
    let before = synced(&counting);
    for _ in 0..4 {
        let (b, p, s) = chain.next(node.state());
        node.sync_block(&b, &p, &s, now).unwrap();
    }
    assert_eq!(
        synced(&counting),
        before,
        "{}: block sync writes nothing between flush points",
        C::NAME
    );
    node.flush_point(FlushTrigger::Interval, now).unwrap();
    let after = synced(&counting);
    assert_eq!(
        [0, 1, 2].map(|i| after[i] - before[i]),
        [1, 1, 1],
        "{}: one synced batch per database per flush point",
        C::NAME
    );
    node.switch_to_consensus(now).unwrap();
    for _ in 0..5 {
        let before = synced(&counting);
        let (b, p, s) = chain.next(node.state());
        node.commit_block(&b, &p, &s).unwrap();
        let after = synced(&counting);
        assert_eq!(
            [0, 1, 2].map(|i| after[i] - before[i]),
            [1, 2, 1],
            "{}: a consensus block's synced batches",
            C::NAME
        );
    }
    node.stop(now).unwrap();
}

#[test]
fn fsync_counts_are_exact_on_both_chains() {
    fsync_counts(&demo_spec().chain());
    fsync_counts(&Ledger { seed: 4 });
}

/// Each repairable shape, made by a failing write part way through a consensus block (or a
/// flush point): the databases written before it hold the next block, the rest do not.
/// The handshake names the shape, repairs it, and the run resumed from there ends as the
/// uncut run does.
fn handshake_repairs<C: TestChain>(chain: &C) {
    let shape = Shape {
        background: false,
        ..PLAIN
    };
    let want = run_recorded(chain, &memory(), shape)
        .expect("the uncut run")
        .tip;
    let failing = |mem: &[Arc<MemoryDb>; 3], budget: &FailAfter| -> [Arc<dyn Db>; 3] {
        [0, 1, 2].map(|i| {
            Arc::new(FailingDb::new(
                mem[i].clone() as Arc<dyn Db>,
                budget.clone(),
            )) as Arc<dyn Db>
        })
    };
    let resume = |mem: &[Arc<MemoryDb>; 3], expected: HandshakeCase, height: u64| {
        let (mut node, case) = open(chain, &as_dbs(mem)).unwrap();
        assert_eq!(case, expected, "{}", C::NAME);
        assert_eq!(
            node.height(),
            height,
            "{}: {expected:?} repaired to the cut block",
            C::NAME
        );
        drive(chain, &mut node, shape, &mut |_| {}).unwrap();
        assert_eq!(
            tip_of(&node, mem, shape),
            want,
            "{}: {expected:?} repaired, resumed",
            C::NAME
        );
    };
    // Block sync to a flush point at 4, then a flush point cut after the block store's
    // write: rolled forward from local blocks.
    let mem = memory();
    let (node, _) = open(chain, &as_dbs(&mem)).unwrap();
    drop(node);
    let budget = FailAfter::new(1);
    let (mut cut, _) = open(chain, &failing(&mem, &budget)).unwrap();
    let now = Instant::now();
    cut.start_block_sync(
        flushpoint::FlushPolicy::default().with_background(false),
        now,
    )
    .unwrap();
    for _ in 0..shape.flush_every {
        let (b, p, s) = chain.next(cut.state());
        cut.sync_block(&b, &p, &s, now).unwrap();
    }
    assert!(cut.flush_point(FlushTrigger::Interval, now).is_err());
    drop(cut);
    resume(&mem, HandshakeCase::FlushRollForward, shape.flush_every);
    // A consensus block after the switch writes the block store (1), the results (2), the
    // app (3), the state (4). Cut after write k: k = 1 or 2 leaves the block store ahead;
    // k = 3, the state behind the app.
    for (k, expected) in [
        (1, HandshakeCase::BlockStoreAhead),
        (2, HandshakeCase::BlockStoreAhead),
        (3, HandshakeCase::StateBehindApp),
    ] {
        let mem = memory();
        let (mut node, _) = open(chain, &as_dbs(&mem)).unwrap();
        drive(
            chain,
            &mut node,
            Shape {
                consensus: 0,
                ..shape
            },
            &mut |_| {},
        )
        .unwrap();
        node.stop(Instant::now()).unwrap();
        let h = shape.sync_blocks;
        let budget = FailAfter::new(k);
        let (mut cut, _) = open(chain, &failing(&mem, &budget)).unwrap();
        let (b, p, s) = chain.next(cut.state());
        assert!(cut.commit_block(&b, &p, &s).is_err());
        drop(cut);
        resume(&mem, expected, h + 1);
    }
}

#[test]
fn handshake_repairs_every_shape_on_both_chains() {
    handshake_repairs(&demo_spec().chain());
    handshake_repairs(&Ledger { seed: 6 });
}

#[test]
fn a_block_that_breaks_the_chain_s_rules_is_refused_before_anything_is_written() {
    let chain = Ledger { seed: 8 };
    let mem = memory();
    let (mut node, _) = open(&chain, &as_dbs(&mem)).unwrap();
    let (mut b, _, _) = chain.next(node.state());
    b.transfers.push(ledger::Transfer {
        from: 200,
        to: 0,
        amount: 1,
    });
    let p = PartSet::from_block(&b);
    let s = ledger::LedgerCommit {
        height: 1,
        block_hash: b.hash(),
    };
    let e = node.commit_block(&b, &p, &s).unwrap_err();
    assert!(e.to_string().contains("account"), "{e}");
    assert_eq!(node.height(), 0);
    assert_eq!(node.block_store().height(), 0, "nothing written");
}
