//! Embedding flushpoint: the life of a node's persistence, end to end.
//!
//! Run with `cargo run --release --example embed_node`. It
//! 1. opens a home (the default engine: one journal holding the three databases, under one
//!    locked directory) and a node that owns it;
//! 2. block-syncs 3,000 blocks with deferred writes (flush points every second, above
//!    64 MiB, at the switch to consensus);
//! 3. switches to consensus and commits 10 blocks, each one synced journal unit, asserting
//!    the fsyncs per block the way an embedder's CI would;
//! 4. stops, reopens (the handshake finds the home consistent) and reads blocks back by
//!    height and hash from the durable view.
//!
//! The chain and the app here are the crate's demo chain and `KvApp`; an embedder brings
//! its own app through [`flushpoint::App`].

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::{
    Db, FlushPolicy, HandshakeCase, HoldingDb, Home, HomeEngine, NoEvents, Node, ReadView,
};

/// Blocks block-synced before the switch to consensus.
const SYNC_BLOCKS: u64 = 3_000;
/// Blocks committed in consensus mode afterwards.
const CONSENSUS_BLOCKS: u64 = 10;
/// `sync_data` calls per consensus block on the home's engine: on the journal, the block's
/// four database writes (the block, the results, the app's commit, the state) are one unit
/// and one `sync_data` of its segment; on redb, one commit and one `sync_data` per write.
fn syncs_per_consensus_block(engine: HomeEngine) -> u64 {
    match engine {
        HomeEngine::Redb => 4,
        _ => 1,
    }
}

fn open(
    dir: &Path,
    spec: &ChainSpec,
) -> flushpoint::Result<(Node<flushpoint::demo::DemoChain>, HandshakeCase)> {
    let home = Home::open(dir)?;
    let (node, report) = Node::open_home(
        home,
        |app_db: Arc<dyn Db>| Ok(Box::new(KvApp::open(Arc::new(HoldingDb::new(app_db)))?)),
        spec.chain(),
        Box::new(NoEvents),
    )?;
    Ok((node, report.case))
}

/// `sync_data` calls the home's files have made so far: the journal's segments, or the
/// three redb files.
fn home_syncs(node: &Node<flushpoint::demo::DemoChain>) -> u64 {
    let home = node.home().expect("opened with open_home");
    match (home.journal(), home.redb_dbs()) {
        (Some(journal), _) => journal.counts().journal_sync_data_calls,
        (None, Some(dbs)) => dbs
            .iter()
            .map(|db| db.backend_counts().sync_data_calls)
            .sum(),
        (None, None) => unreachable!("a home is on one of the two engines"),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("flushpoint-embed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let spec = ChainSpec::new(7, Profile::Light);

    // 1. Open: a new home.
    let (mut node, case) = open(&dir, &spec)?;
    println!("opened {}: handshake {case:?}", dir.display());
    assert!(
        Home::open(&dir).is_err(),
        "the node holds the home's lock while it is open"
    );

    // 2. Block sync: writes are held and made durable at flush points.
    let start = Instant::now();
    node.start_block_sync(FlushPolicy::default(), start)?;
    for _ in 0..SYNC_BLOCKS {
        let (block, parts, seen_commit) = spec.next_block(node.state());
        let now = Instant::now();
        node.sync_block(&block, &parts, &seen_commit, now)?;
        node.on_timer(now)?;
    }
    let synced_in = start.elapsed();
    node.switch_to_consensus(Instant::now())?;
    println!(
        "block sync: {SYNC_BLOCKS} blocks in {:.2} s ({:.0} blocks/s), {} flush points, durable at {}",
        synced_in.as_secs_f64(),
        SYNC_BLOCKS as f64 / synced_in.as_secs_f64(),
        node.deferred().flush_points,
        node.durable_height()
    );
    assert_eq!(node.durable_height(), SYNC_BLOCKS);

    // 3. Consensus: every block durable when commit_block returns. Count the fsyncs as an
    // embedder's CI would.
    let engine = node.home().expect("opened with open_home").engine();
    let expected = syncs_per_consensus_block(engine);
    let before = home_syncs(&node);
    let (block, parts, seen_commit) = spec.next_block(node.state());
    node.commit_block(&block, &parts, &seen_commit)?;
    let per_block = home_syncs(&node) - before;
    assert_eq!(
        per_block, expected,
        "sync_data calls for one consensus block on the {engine} engine"
    );
    let before = home_syncs(&node);
    for _ in 1..CONSENSUS_BLOCKS {
        let (block, parts, seen_commit) = spec.next_block(node.state());
        node.commit_block(&block, &parts, &seen_commit)?;
    }
    let rest = home_syncs(&node) - before;
    assert_eq!(
        rest,
        per_block * (CONSENSUS_BLOCKS - 1),
        "every consensus block costs the same fsyncs"
    );
    println!(
        "consensus: {CONSENSUS_BLOCKS} blocks on the {engine} engine, {per_block} sync_data call(s) each"
    );
    let tip = node.height();
    let tip_hash = node
        .load_block(tip, ReadView::Durable)?
        .expect("the tip is durable")
        .hash();

    // 4. Stop, reopen, read back.
    node.stop(Instant::now())?;
    let (node, case) = open(&dir, &spec)?;
    assert_eq!(case, HandshakeCase::Consistent);
    assert_eq!(node.height(), SYNC_BLOCKS + CONSENSUS_BLOCKS);
    let by_height = node
        .load_block(1_500, ReadView::Durable)?
        .expect("block 1500");
    let by_hash = node
        .load_block_by_hash(&tip_hash, ReadView::Durable)?
        .expect("the tip by its hash");
    assert_eq!(by_height.height(), 1_500);
    assert_eq!(by_hash.height(), tip);
    println!(
        "reopened: handshake {case:?} at height {}; block 1500 and the tip (by hash) read back",
        node.height()
    );
    drop(node);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
