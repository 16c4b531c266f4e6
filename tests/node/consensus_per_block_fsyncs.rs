//! Property: the synced batches a block costs are exactly — block sync 0 (one per database per
//! flush point), consensus 4 (block store 1, state 2, app 1), legacy 5 (block store 2) — and
//! on redb each synced batch is one `sync_data` on its file (plus file-growth syncs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use flushpoint::db::{BackendCounts, CountingDb, SyncCounts};
use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::{Db, FlushPolicy, HoldingDb, MemoryDb, Mode, NoEvents, Node, RedbDb, RedbOptions};

const BLOCKS: u64 = 20;

fn open(spec: &ChainSpec, dbs: &[Arc<dyn Db>; 3]) -> Node<flushpoint::demo::DemoChain> {
    let app = KvApp::open(Arc::new(HoldingDb::new(dbs[2].clone()))).unwrap();
    Node::open(
        dbs[0].clone(),
        dbs[1].clone(),
        Box::new(app),
        spec.chain(),
        Box::new(NoEvents),
    )
    .unwrap()
    .0
}

fn counting() -> [Arc<CountingDb<MemoryDb>>; 3] {
    ["block store", "state", "app"].map(|n| Arc::new(CountingDb::new(MemoryDb::new(n))))
}

fn counts(c: &[Arc<CountingDb<MemoryDb>>; 3]) -> [SyncCounts; 3] {
    [0, 1, 2].map(|i| c[i].counts())
}

fn per_block_synced(mode: Mode) -> [u64; 3] {
    let spec = ChainSpec::new(31, Profile::Mixed);
    let c = counting();
    let dbs: [Arc<dyn Db>; 3] = [0, 1, 2].map(|i| c[i].clone() as Arc<dyn Db>);
    let mut node = open(&spec, &dbs);
    node.set_per_block_mode(mode).unwrap();
    for _ in 0..BLOCKS {
        let before = counts(&c);
        let (b, p, cm) = spec.next_block(node.state());
        node.commit_block(&b, &p, &cm).unwrap();
        let after = counts(&c);
        let d = [0, 1, 2].map(|i| after[i] - before[i]);
        assert!(
            d.iter()
                .all(|d| d.buffered_batches == 0 && d.failed_batches == 0)
        );
        let synced = d.map(|d| d.synced_batches);
        let want = match mode {
            Mode::Legacy => [2, 2, 1],
            _ => [1, 2, 1],
        };
        assert_eq!(
            synced,
            want,
            "{mode:?} block {}: synced batches per database",
            b.height()
        );
    }
    [0, 1, 2].map(|i| c[i].counts().synced_batches)
}

#[test]
fn consensus_block_costs_four_synced_batches() {
    per_block_synced(Mode::Consensus);
    println!("consensus: block store 1 + state 2 + app 1 = 4 synced batches per block");
}

#[test]
fn legacy_block_costs_five_synced_batches() {
    per_block_synced(Mode::Legacy);
    println!("legacy: block store 2 + state 2 + app 1 = 5 synced batches per block");
}

#[test]
fn block_sync_costs_no_synced_batch_per_block_and_one_per_database_per_flush_point() {
    let spec = ChainSpec::new(32, Profile::Mixed);
    let c = counting();
    let dbs: [Arc<dyn Db>; 3] = [0, 1, 2].map(|i| c[i].clone() as Arc<dyn Db>);
    let mut node = open(&spec, &dbs);
    node.start_block_sync(
        FlushPolicy::default()
            .with_interval(Duration::from_secs(3600))
            .with_held_bytes_max(u64::MAX)
            .with_window_blocks_max(Some(5))
            .with_background(false),
        Instant::now(),
    )
    .unwrap();
    for _ in 0..BLOCKS {
        let before = counts(&c);
        let (b, p, cm) = spec.next_block(node.state());
        let flushed = node
            .sync_block(&b, &p, &cm, Instant::now())
            .unwrap()
            .is_some();
        let after = counts(&c);
        let synced = [0, 1, 2].map(|i| (after[i] - before[i]).synced_batches);
        assert_eq!(synced, if flushed { [1, 1, 1] } else { [0, 0, 0] });
        assert_eq!(flushed, b.height() % 5 == 0);
    }
}

fn backend(r: &[Arc<RedbDb>; 3]) -> [BackendCounts; 3] {
    [0, 1, 2].map(|i| r[i].backend_counts())
}

/// On redb: each synced batch is one `sync_data`; growth of the file may add one.
#[test]
fn redb_sync_data_matches_synced_batches_per_block_and_per_flush_point() {
    let dir = tempfile::tempdir().unwrap();
    let spec = ChainSpec::new(33, Profile::Light);
    let r: [Arc<RedbDb>; 3] = ["block store", "state", "app"].map(|n| {
        Arc::new(
            RedbDb::open(
                &dir.path().join(format!("{}.redb", n.replace(' ', "_"))),
                n,
                &RedbOptions::default(),
            )
            .unwrap(),
        )
    });
    let dbs: [Arc<dyn Db>; 3] = [0, 1, 2].map(|i| r[i].clone() as Arc<dyn Db>);
    let mut node = open(&spec, &dbs);
    // Warm up: grow the files past the first blocks' sizes.
    for _ in 0..10 {
        let (b, p, cm) = spec.next_block(node.state());
        node.commit_block(&b, &p, &cm).unwrap();
    }
    let mut exact_blocks = 0;
    for _ in 0..BLOCKS {
        let before = backend(&r);
        let (b, p, cm) = spec.next_block(node.state());
        node.commit_block(&b, &p, &cm).unwrap();
        let after = backend(&r);
        let d = [0, 1, 2].map(|i| after[i] - before[i]);
        let syncs = d.map(|d| d.sync_data_calls);
        let growth = d.map(|d| d.set_len_calls);
        println!(
            "consensus block {}: sync_data {syncs:?}, set_len {growth:?}",
            b.height()
        );
        for (i, want) in [1u64, 2, 1].into_iter().enumerate() {
            assert!(
                syncs[i] >= want && syncs[i] <= want + growth[i],
                "db {i}: {} sync_data for {want} synced batches ({} growths)",
                syncs[i],
                growth[i]
            );
        }
        if syncs == [1, 2, 1] {
            exact_blocks += 1;
        }
    }
    assert!(
        exact_blocks > 0,
        "most blocks need no growth: exactly 1 + 2 + 1 sync_data"
    );
    println!("consensus: {exact_blocks}/{BLOCKS} blocks with exactly [1, 2, 1] sync_data");
    node.start_block_sync(
        FlushPolicy::default()
            .with_interval(Duration::from_secs(3600))
            .with_held_bytes_max(u64::MAX)
            .with_window_blocks_max(Some(10))
            .with_background(false),
        Instant::now(),
    )
    .unwrap();
    let mut flush_points = 0;
    for _ in 0..30 {
        let before = backend(&r);
        let (b, p, cm) = spec.next_block(node.state());
        let flushed = node
            .sync_block(&b, &p, &cm, Instant::now())
            .unwrap()
            .is_some();
        let after = backend(&r);
        let d = [0, 1, 2].map(|i| after[i] - before[i]);
        let syncs = d.map(|d| d.sync_data_calls);
        let growth = d.map(|d| d.set_len_calls);
        if flushed {
            flush_points += 1;
            println!(
                "flush point at {}: sync_data {syncs:?}, set_len {growth:?}",
                b.height()
            );
            for i in 0..3 {
                assert!(
                    syncs[i] >= 1 && syncs[i] <= 1 + growth[i],
                    "db {i}: {syncs:?}"
                );
            }
        } else {
            assert_eq!(syncs, [0, 0, 0], "a held block costs no sync_data");
        }
    }
    assert_eq!(flush_points, 3);
}
