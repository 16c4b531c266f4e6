//! Rollback at its edges: to exactly the base keeps that one block; a flush record is kept
//! when the rollback stops at its `to` height and removed when it goes below.

use crate::support;

use std::sync::Arc;

use flushpoint::MemoryDb;
use flushpoint::records::FlushRecord;
use flushpoint::store::BlockStore;
use support::chain;

#[test]
fn rollback_to_the_base_keeps_exactly_the_base_block() {
    let store = BlockStore::<flushpoint::demo::Block>::open(Arc::new(MemoryDb::new("block store")))
        .unwrap();
    for b in chain(3, 6, 1, 32, 5) {
        b.save(&store).unwrap();
    }
    assert_eq!((store.base(), store.height()), (3, 8));
    assert_eq!(store.rollback_to(3).unwrap(), 5);
    assert_eq!((store.base(), store.height()), (3, 3));
    assert!(store.load_block(3).unwrap().is_some());
    assert!(store.load_block(4).unwrap().is_none());
    // The store reopens at the same range.
    let reopened = BlockStore::<flushpoint::demo::Block>::open(store.db().clone()).unwrap();
    assert_eq!((reopened.base(), reopened.height()), (3, 3));
}

#[test]
fn a_flush_record_survives_a_rollback_to_its_end_and_not_below() {
    let mem = Arc::new(MemoryDb::new("block store"));
    let store = BlockStore::<flushpoint::demo::Block>::open(mem.clone()).unwrap();
    let blocks = chain(1, 8, 1, 32, 9);
    for b in &blocks[..5] {
        b.save(&store).unwrap();
    }
    let rec = FlushRecord { from: 0, to: 5 };
    store.save_flush_record(&rec).unwrap();
    for b in &blocks[5..] {
        b.save(&store).unwrap();
    }
    store.rollback_to(5).unwrap();
    assert_eq!(
        store.load_flush_record().unwrap(),
        Some(rec),
        "kept at its own end"
    );
    store.rollback_to(4).unwrap();
    assert_eq!(
        store.load_flush_record().unwrap(),
        None,
        "removed below its end"
    );
}
