//! Property: a home remembers its genesis. The genesis hash is stored with the genesis
//! state on the first open (one batch) and checked on every later open: another genesis is
//! refused with `Error::GenesisMismatch` naming both hashes, before anything is written; a
//! home created before the record existed gets it at its next accepted open.

use std::sync::Arc;
use std::time::Instant;

use flushpoint::codec::hex;
use flushpoint::codec::keys;
use flushpoint::demo::{ChainSpec, Genesis, KvApp, Profile};
use flushpoint::{
    Batch, Db, Durability, Error, ErrorKind, HandshakeCase, HoldingDb, MemoryDb, NoEvents, Node,
};

struct Dbs([Arc<MemoryDb>; 3]);

impl Dbs {
    fn new() -> Self {
        Dbs([
            Arc::new(MemoryDb::new("block store")),
            Arc::new(MemoryDb::new("state")),
            Arc::new(MemoryDb::new("app")),
        ])
    }
    fn open(
        &self,
        genesis: &Genesis,
    ) -> flushpoint::Result<(Node<flushpoint::demo::DemoChain>, HandshakeCase)> {
        let app = KvApp::open(Arc::new(HoldingDb::new(self.0[2].clone() as Arc<dyn Db>)))?;
        Node::open(
            self.0[0].clone(),
            self.0[1].clone(),
            Box::new(app),
            flushpoint::demo::DemoChain::new(genesis.clone()),
            Box::new(NoEvents),
        )
        .map(|(n, r)| (n, r.case))
    }
    fn snapshot(&self) -> Vec<std::collections::BTreeMap<bytes::Bytes, bytes::Bytes>> {
        self.0.iter().map(|d| d.snapshot()).collect()
    }
}

fn commit(node: &mut Node<flushpoint::demo::DemoChain>, spec: &ChainSpec, n: u64) {
    for _ in 0..n {
        let (b, p, c) = spec.next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
}

#[test]
fn another_genesis_is_refused_naming_both_and_nothing_is_written() {
    let (a, b) = (
        ChainSpec::new(1, Profile::Light),
        ChainSpec::new(2, Profile::Light),
    );
    assert_ne!(a.genesis().hash(), b.genesis().hash());
    let dbs = Dbs::new();
    let (mut node, case) = dbs.open(&a.genesis()).unwrap();
    assert_eq!(case, HandshakeCase::Fresh);
    commit(&mut node, &a, 2);
    node.stop(Instant::now()).unwrap();
    let before = dbs.snapshot();
    let Err(err) = dbs.open(&b.genesis()) else {
        panic!("another chain's genesis was accepted");
    };
    match &err {
        Error::GenesisMismatch { stored, given } => {
            assert_eq!(stored, &hex(&a.genesis().hash()));
            assert_eq!(given, &hex(&b.genesis().hash()));
        }
        other => panic!("expected GenesisMismatch, got {other:?}"),
    }
    assert_eq!(err.kind(), ErrorKind::Incompatible);
    assert!(dbs.snapshot() == before, "a refused open wrote nothing");
    // A fresh home with genesis B is still fine, and the home of A opens with A.
    assert_eq!(
        Dbs::new().open(&b.genesis()).unwrap().1,
        HandshakeCase::Fresh
    );
    let (node, case) = dbs.open(&a.genesis()).unwrap();
    assert_eq!(case, HandshakeCase::Consistent);
    assert_eq!(node.height(), 2);
}

#[test]
fn a_home_without_the_record_gets_it_at_its_next_open() {
    let (a, b) = (
        ChainSpec::new(3, Profile::Light),
        ChainSpec::new(4, Profile::Light),
    );
    let dbs = Dbs::new();
    let (mut node, _) = dbs.open(&a.genesis()).unwrap();
    commit(&mut node, &a, 1);
    node.stop(Instant::now()).unwrap();
    // An older home: no genesis record.
    let k = keys::singleton(keys::GENESIS);
    assert!(
        dbs.0[1].get(&k).unwrap().is_some(),
        "stored on the first open"
    );
    let mut del = Batch::new();
    del.delete(k.to_vec());
    dbs.0[1].write(&del, Durability::Synced).unwrap();
    let (node, case) = dbs.open(&a.genesis()).unwrap();
    assert_eq!(case, HandshakeCase::Consistent);
    drop(node);
    assert!(
        dbs.0[1].get(&k).unwrap().is_some(),
        "recorded at the next open"
    );
    assert!(matches!(
        dbs.open(&b.genesis()),
        Err(Error::GenesisMismatch { .. })
    ));
}
