//! Prefetch through the node: `Node::prefetch_next` with block N+1, then block N applied —
//! the demo app's `Tx::Add`s read their values from a prefetch session first.
//!
//! Property: the chain a node builds is the same with prefetch on and off — every block
//! hash, the app hash at the tip and every key of the three databases — in block sync and
//! in consensus, while values the previous block just wrote are read (64 adds per block
//! over 50 keys: block N+1's keys were prefetched before block N wrote most of them, so a
//! stale prefetched value would change the app hash); and with prefetch on, execution does find prefetched
//! values (hits > 0), so the comparison is not between two runs that never prefetched.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use flushpoint::db::collect_range;
use flushpoint::demo::{ChainSpec, KvApp, Profile, Tx, account_key};
use flushpoint::prefetch::PrefetchPool;
use flushpoint::{Db, Direction, FlushPolicy, HoldingDb, KeyRange, MemoryDb, NoEvents, Node};

/// What a run ends with: the tip hash, the app hash and every key of the databases.
type Outcome = ([u8; 32], [u8; 32], [BTreeMap<Bytes, Bytes>; 3]);

fn run(spec: &ChainSpec, prefetch: bool, sync_blocks: u64, consensus: u64) -> Outcome {
    let mem = ["block store", "state", "app"].map(|n| Arc::new(MemoryDb::new(n)));
    let pool = PrefetchPool::new(2).unwrap();
    let mut app = KvApp::open(Arc::new(HoldingDb::new(mem[2].clone() as Arc<dyn Db>))).unwrap();
    if prefetch {
        app = app.with_prefetch_always(&pool);
    }
    let (mut node, _) = Node::open(
        mem[0].clone(),
        mem[1].clone(),
        Box::new(app),
        spec.chain(),
        Box::new(NoEvents),
    )
    .unwrap();
    let policy = FlushPolicy::default().with_window_blocks_max(Some(5));
    let now = Instant::now();
    node.start_block_sync(policy, now).unwrap();
    let tip = sync_blocks + consensus;
    while node.height() < tip {
        if node.height() == sync_blocks {
            node.switch_to_consensus(now).unwrap();
        }
        let (b, p, s) = spec.next_block(node.state());
        if prefetch && b.header.height < tip {
            node.prefetch_next(&spec.preview(b.header.height + 1))
                .unwrap();
        }
        if node.height() < sync_blocks {
            node.sync_block(&b, &p, &s, now).unwrap();
        } else {
            node.commit_block(&b, &p, &s).unwrap();
        }
    }
    let tip_hash = node.state().last_block_hash;
    let app_hash = node.state().app_hash;
    node.stop(now).unwrap();
    let dump = |db: &MemoryDb| -> BTreeMap<Bytes, Bytes> {
        collect_range(db, KeyRange::all(), Direction::Forward)
            .unwrap()
            .into_iter()
            .collect()
    };
    (tip_hash, app_hash, [0, 1, 2].map(|i| dump(&mem[i])))
}

/// A spec whose blocks' adds hit a small key set, so block N+1 reads what block N wrote.
fn overlapping() -> ChainSpec {
    ChainSpec {
        account_keys: 50,
        ..ChainSpec::new(21, Profile::Accounts)
    }
}

#[test]
fn the_chain_is_the_same_with_prefetch_on_and_off() {
    let spec = overlapping();
    let off = run(&spec, false, 40, 10);
    let on = run(&spec, true, 40, 10);
    assert_eq!(on.0, off.0, "tip hash");
    assert_eq!(on.1, off.1, "app hash");
    for i in 0..3 {
        assert_eq!(on.2[i], off.2[i], "database {i}");
    }
}

/// The app alone, on the same chain, the way the node drives it: `prefetch(N+1)`, then
/// block N executed and committed. Execution is served by the session (hits), and values
/// the previous block wrote after they were fetched are dropped as invalidated, not served.
#[test]
fn execution_reads_prefetched_values_and_drops_invalidated_ones() {
    use flushpoint::App;
    let spec = overlapping();
    let pool = PrefetchPool::new(2).unwrap();
    let mut app = KvApp::open(Arc::new(HoldingDb::new(
        Arc::new(MemoryDb::new("app")) as Arc<dyn Db>
    )))
    .unwrap()
    .with_prefetch_always(&pool);
    for h in 1..=60u64 {
        app.prefetch(&spec.preview(h + 1)).unwrap();
        // Let the workers finish block h+1's keys before block h writes, so that block h's
        // writes to them must invalidate what was read.
        let want: u64 = app.prefetch_stats().iter().map(|s| s.submitted).sum();
        while app.prefetch_stats().iter().map(|s| s.fetched).sum::<u64>() < want {
            std::thread::yield_now();
        }
        app.execute_block(&spec.preview(h)).unwrap();
        app.commit().unwrap();
    }
    let hits: u64 = app.prefetch_stats().iter().map(|s| s.hits).sum();
    let invalidated: u64 = app.prefetch_stats().iter().map(|s| s.invalidated).sum();
    println!("hits {hits}, invalidated {invalidated}");
    assert!(hits > 0, "execution found no prefetched value");
    assert!(
        invalidated > 0,
        "no prefetched value was ever written before it was read"
    );
}

/// The policy of `with_prefetch`: on a state read from memory (here a `MemoryDb`), reads
/// cost far below `PREFETCH_COLD_READ_NANOS`, so after the first probe block prefetch stops
/// submitting; `with_prefetch_always` keeps submitting.
#[test]
fn prefetch_stops_on_a_state_that_reads_from_memory() {
    use flushpoint::App;
    let spec = overlapping();
    let pool = PrefetchPool::new(1).unwrap();
    let submitted = |always: bool| -> u64 {
        let app = KvApp::open(Arc::new(HoldingDb::new(
            Arc::new(MemoryDb::new("app")) as Arc<dyn Db>
        )))
        .unwrap();
        let mut app = if always {
            app.with_prefetch_always(&pool)
        } else {
            app.with_prefetch(&pool)
        };
        for h in 1..=64u64 {
            app.prefetch(&spec.preview(h + 1)).unwrap();
            app.execute_block(&spec.preview(h)).unwrap();
            app.commit().unwrap();
        }
        app.prefetch_stats().iter().map(|s| s.submitted).sum()
    };
    let (policy, always) = (submitted(false), submitted(true));
    println!("keys submitted: {policy} with the policy, {always} always");
    // Block 1's own reads (nothing prefetched them) measure the state as warm: only block
    // 2's keys, submitted before that, are ever queued. Always: every block's distinct keys.
    assert!(policy <= 64, "{policy}");
    assert!(always >= 60 * 30, "{always}");
}

#[test]
fn prefetch_next_refuses_a_block_that_is_not_the_one_after_next() {
    let spec = overlapping();
    let mem = ["block store", "state", "app"].map(|n| Arc::new(MemoryDb::new(n)));
    let pool = PrefetchPool::new(1).unwrap();
    let app = KvApp::open(Arc::new(HoldingDb::new(mem[2].clone() as Arc<dyn Db>)))
        .unwrap()
        .with_prefetch(&pool);
    let (mut node, _) = Node::open(
        mem[0].clone(),
        mem[1].clone(),
        Box::new(app),
        spec.chain(),
        Box::new(NoEvents),
    )
    .unwrap();
    for wrong in [1, 3, 0] {
        let e = node.prefetch_next(&spec.preview(wrong)).unwrap_err();
        assert!(e.to_string().contains("prefetch_next takes block 2"), "{e}");
    }
    // Not poisoned: the node goes on.
    node.prefetch_next(&spec.preview(2)).unwrap();
    let (b, p, s) = spec.next_block(node.state());
    node.commit_block(&b, &p, &s).unwrap();
    assert_eq!(node.height(), 1);
}

#[test]
fn an_add_reads_the_value_and_a_short_one_fails_the_transaction() {
    use flushpoint::App;
    use flushpoint::demo::{Block, Header};
    let k = account_key(7);
    let short = account_key(8);
    let add = Tx::Add(k.clone(), 5).encode();
    assert_eq!(Tx::decode(&add), Some(Tx::Add(k.clone(), 5)));
    assert_eq!(Tx::decode(&add[..add.len() - 1]), None, "a short delta");
    let mut app = KvApp::open(Arc::new(HoldingDb::new(
        Arc::new(MemoryDb::new("app")) as Arc<dyn Db>
    )))
    .unwrap();
    let block = |h: u64, txs: Vec<Bytes>| Block {
        header: Header {
            height: h,
            ..Header::default()
        },
        txs,
        ..Block::default()
    };
    // Absent reads as 0; two adds in one block see each other; a 3-byte value is short.
    let r = app
        .execute_block(&block(
            1,
            vec![
                add.clone(),
                Tx::Add(k.clone(), 2).encode(),
                Tx::Set(short.clone(), Bytes::from_static(b"abc")).encode(),
            ],
        ))
        .unwrap();
    assert!(r.tx_results.iter().all(|t| t.code == 0));
    app.commit().unwrap();
    assert_eq!(app.get(&k).unwrap().unwrap().as_ref(), &7u64.to_be_bytes());
    // The rest of a longer value is kept; a short one fails with code 2 and stays.
    let mut long = 10u64.to_be_bytes().to_vec();
    long.extend_from_slice(b"tail");
    let r = app
        .execute_block(&block(
            2,
            vec![
                Tx::Set(k.clone(), Bytes::from(long)).encode(),
                Tx::Add(k.clone(), 1).encode(),
                Tx::Add(short.clone(), 1).encode(),
            ],
        ))
        .unwrap();
    assert_eq!(
        r.tx_results.iter().map(|t| t.code).collect::<Vec<_>>(),
        vec![0, 0, 2]
    );
    app.commit().unwrap();
    let v = app.get(&k).unwrap().unwrap();
    assert_eq!(&v[..8], &11u64.to_be_bytes());
    assert_eq!(&v[8..], b"tail");
    assert_eq!(app.get(&short).unwrap().unwrap().as_ref(), b"abc");
}
