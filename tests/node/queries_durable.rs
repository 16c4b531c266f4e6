//! Property: while writes are held, app queries and RPC state reads answer from the durable
//! version only; a fresh node refuses both with `Error::NotYetDurable` until its first flush
//! point.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flushpoint::demo::{Block, ChainSpec, Commit, KvApp, Profile, State, Tx, sha256};
use flushpoint::{
    Db, Error, FlushPolicy, FlushTrigger, HoldingDb, MemoryDb, NoEvents, Node, PartSet,
};

fn block_with_txs(spec: &ChainSpec, state: &State, txs: Vec<Bytes>) -> (Block, PartSet, Commit) {
    let (mut block, _, _) = spec.next_block(state);
    block.txs = txs;
    block.header.data_hash = Block::data_hash_of(&block.txs);
    let hash = block.hash();
    let h = block.height();
    let seen = Commit {
        height: h,
        round: 0,
        block_hash: hash,
        signatures: (0..4u64)
            .map(|i| {
                Bytes::copy_from_slice(&sha256(
                    &[&h.to_be_bytes()[..], &hash, &i.to_be_bytes()].concat(),
                ))
            })
            .collect(),
    };
    let parts = PartSet::from_block(&block);
    (block, parts, seen)
}

fn set(k: &str, v: &str) -> Bytes {
    Tx::Set(Bytes::from(k.to_string()), Bytes::from(v.to_string())).encode()
}

fn not_yet_durable<T: std::fmt::Debug>(r: flushpoint::Result<T>, what: &str) {
    assert!(
        matches!(r, Err(Error::NotYetDurable { .. })),
        "{what}: expected NotYetDurable, got {r:?}"
    );
}

#[test]
fn queries_answer_from_the_durable_version_while_holding() {
    let spec = ChainSpec::new(41, Profile::Light);
    let app_db = Arc::new(HoldingDb::new(Arc::new(MemoryDb::new("app")) as Arc<dyn Db>));
    let app = KvApp::open(app_db.clone()).unwrap();
    // A second handle on the same holding database: it reads held writes (`KvApp::get`).
    let shadow = KvApp::open(app_db.clone()).unwrap();
    let (mut node, _) = Node::open(
        Arc::new(MemoryDb::new("block store")),
        Arc::new(MemoryDb::new("state")),
        Box::new(app),
        spec.chain(),
        Box::new(NoEvents),
    )
    .unwrap();
    // Fresh: nothing durable beyond genesis.
    not_yet_durable(node.query(b"k"), "query on a fresh node");
    not_yet_durable(node.rpc_state(), "rpc_state on a fresh node");
    let t0 = Instant::now();
    node.start_block_sync(
        FlushPolicy::default()
            .with_interval(Duration::from_secs(3600))
            .with_held_bytes_max(u64::MAX)
            .with_window_blocks_max(None)
            .with_background(false),
        t0,
    )
    .unwrap();
    for v in ["v1", "v1b"] {
        let (b, p, c) = block_with_txs(&spec, node.state(), vec![set("k", v)]);
        assert_eq!(node.sync_block(&b, &p, &c, t0).unwrap(), None);
    }
    assert_eq!(
        shadow.get(b"k").unwrap().as_deref(),
        Some(&b"v1b"[..]),
        "held write applied"
    );
    not_yet_durable(node.query(b"k"), "query before the first flush point");
    not_yet_durable(node.rpc_state(), "rpc_state before the first flush point");
    let r = node
        .flush_point(FlushTrigger::Interval, t0)
        .unwrap()
        .unwrap();
    assert_eq!(r.to, 2);
    assert_eq!(node.query(b"k").unwrap().as_deref(), Some(&b"v1b"[..]));
    assert_eq!(node.rpc_state().unwrap().last_block_height, 2);
    assert_eq!(&node.rpc_state().unwrap(), node.state());
    // Second window: held changes are invisible to queries and RPC until the flush point.
    let durable_state = node.state().clone();
    let (b, p, c) = block_with_txs(&spec, node.state(), vec![set("k", "v2"), set("new", "x")]);
    node.sync_block(&b, &p, &c, t0).unwrap();
    let (b, p, c) = block_with_txs(
        &spec,
        node.state(),
        vec![
            Tx::Delete(Bytes::from_static(b"k")).encode(),
            set("new", "y"),
        ],
    );
    node.sync_block(&b, &p, &c, t0).unwrap();
    assert_eq!(node.height(), 4);
    assert_eq!(shadow.get(b"k").unwrap(), None, "held delete applied");
    assert_eq!(shadow.get(b"new").unwrap().as_deref(), Some(&b"y"[..]));
    assert_eq!(
        node.query(b"k").unwrap().as_deref(),
        Some(&b"v1b"[..]),
        "durable version"
    );
    assert_eq!(
        node.query(b"new").unwrap(),
        None,
        "a held key is not visible to queries"
    );
    assert_eq!(
        node.rpc_state().unwrap(),
        durable_state,
        "RPC sees the durable state"
    );
    assert_eq!(node.app().durable().unwrap().height, 2);
    node.flush_point(FlushTrigger::Interval, t0)
        .unwrap()
        .unwrap();
    assert_eq!(node.query(b"k").unwrap(), None);
    assert_eq!(node.query(b"new").unwrap().as_deref(), Some(&b"y"[..]));
    assert_eq!(node.rpc_state().unwrap().last_block_height, 4);
}

#[test]
fn fresh_node_in_consensus_mode_answers_after_its_first_durable_block() {
    let spec = ChainSpec::new(42, Profile::Light);
    let app = KvApp::open(Arc::new(HoldingDb::new(
        Arc::new(MemoryDb::new("app")) as Arc<dyn Db>
    )))
    .unwrap();
    let (mut node, _) = Node::open(
        Arc::new(MemoryDb::new("block store")),
        Arc::new(MemoryDb::new("state")),
        Box::new(app),
        spec.chain(),
        Box::new(NoEvents),
    )
    .unwrap();
    not_yet_durable(node.query(b"k"), "query");
    not_yet_durable(node.rpc_state(), "rpc_state");
    let (b, p, c) = block_with_txs(&spec, node.state(), vec![set("k", "v")]);
    node.commit_block(&b, &p, &c).unwrap();
    assert_eq!(node.query(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(node.rpc_state().unwrap().last_block_height, 1);
}
