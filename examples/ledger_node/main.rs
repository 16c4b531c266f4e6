//! A node with its own chain: a token ledger (`ledger.rs`) with its own block encoding, hash
//! function and app, on flushpoint's engine — nothing from `flushpoint::demo`.
//!
//! Run with `cargo run --release --example ledger_node`. It
//! 1. opens a home and a node that owns it, over the ledger chain;
//! 2. block-syncs 2,000 blocks with deferred writes (flush points every second, above
//!    64 MiB, at the switch to consensus);
//! 3. switches to consensus and commits 10 blocks, asserting the fsyncs per block the way an
//!    embedder's CI would;
//! 4. stops, reopens (the handshake finds the home consistent) and reads blocks back by
//!    height and hash from the durable view, checking the app's balances survived.

mod ledger;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use flushpoint::{
    ChainBlock, ChainState, Db, FlushPolicy, HandshakeCase, HoldingDb, Home, HomeEngine, NoEvents,
    Node, ReadView,
};
use ledger::{ACCOUNTS, GENESIS_BALANCE, Ledger, LedgerApp};

/// Blocks block-synced before the switch to consensus.
const SYNC_BLOCKS: u64 = 2_000;
/// Blocks committed in consensus mode afterwards.
const CONSENSUS_BLOCKS: u64 = 10;
/// `sync_data` calls per consensus block on the home's engine: the block's four database
/// writes (the block, the results, the app's commit, the state) are one journal unit and one
/// `sync_data` on the journal (the default engine), four commits on redb.
fn syncs_per_consensus_block(engine: HomeEngine) -> u64 {
    match engine {
        HomeEngine::Redb => 4,
        _ => 1,
    }
}

fn open(dir: &Path, chain: &Ledger) -> flushpoint::Result<(Node<Ledger>, HandshakeCase)> {
    let home = Home::open(dir)?;
    let (node, report) = Node::open_home(
        home,
        |app_db: Arc<dyn Db>| Ok(Box::new(LedgerApp::open(Arc::new(HoldingDb::new(app_db)))?)),
        chain.clone(),
        Box::new(NoEvents),
    )?;
    Ok((node, report.case))
}

/// `sync_data` calls the home's files have made so far: the journal's segments, or the
/// three redb files.
fn home_syncs(node: &Node<Ledger>) -> u64 {
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
    let dir = std::env::temp_dir().join(format!("flushpoint-ledger-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let chain = Ledger { seed: 11 };

    let (mut node, case) = open(&dir, &chain)?;
    assert_eq!(case, HandshakeCase::Fresh);

    // Block sync: held in memory, durable at flush points.
    let started = Instant::now();
    node.start_block_sync(FlushPolicy::default(), Instant::now())?;
    for _ in 0..SYNC_BLOCKS {
        let (block, parts, seen) = chain.next_block(node.state());
        node.sync_block(&block, &parts, &seen, Instant::now())?;
    }
    node.switch_to_consensus(Instant::now())?;
    assert_eq!(node.durable_height(), SYNC_BLOCKS);
    println!(
        "block sync: {SYNC_BLOCKS} ledger blocks in {:.2} s, {} flush points",
        started.elapsed().as_secs_f64(),
        node.deferred().flush_points
    );

    // Consensus: each block durable when `commit_block` returns, its syncs counted.
    let engine = node.home().expect("opened with open_home").engine();
    let per_block = syncs_per_consensus_block(engine);
    for _ in 0..CONSENSUS_BLOCKS {
        let before = home_syncs(&node);
        let (block, parts, seen) = chain.next_block(node.state());
        node.commit_block(&block, &parts, &seen)?;
        let syncs = home_syncs(&node) - before;
        assert_eq!(
            syncs,
            per_block,
            "fsyncs for consensus block {}",
            block.height()
        );
    }
    let tip = node.height();
    let tip_hash = node.state().last_block_hash;
    let app_hash = node.state().app_hash();
    node.stop(Instant::now())?;

    // Reopen: consistent, same tip; blocks read back by height and hash.
    let (node, case) = open(&dir, &chain)?;
    assert_eq!(case, HandshakeCase::Consistent);
    assert_eq!(node.height(), tip);
    assert_eq!(node.state().app_hash(), app_hash);
    let by_hash = node
        .load_block_by_hash(&tip_hash, ReadView::Durable)?
        .expect("the tip by its hash");
    assert_eq!(by_hash.height(), tip);
    let mid = node
        .load_block(SYNC_BLOCKS / 2, ReadView::Durable)?
        .expect("a block-synced block by height");
    assert_eq!(mid.height(), SYNC_BLOCKS / 2);
    // Transfers move balances, never create them.
    let total: u64 = (0..ACCOUNTS)
        .map(|a| {
            node.query(&[b'b', a])
                .expect("query")
                .map_or(GENESIS_BALANCE, |v| {
                    let p = flushpoint::codec::decode_record(
                        &[b'b', a],
                        flushpoint::codec::RecordKind::embedder(0x40),
                        &v,
                    )
                    .expect("a balance record");
                    u64::from_le_bytes(p.try_into().expect("8 bytes"))
                })
        })
        .sum();
    assert_eq!(total, GENESIS_BALANCE * u64::from(ACCOUNTS));
    println!(
        "reopened at {tip} ({engine} home): {CONSENSUS_BLOCKS} consensus blocks at {per_block} sync_data each, balances conserved"
    );
    drop(node);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
