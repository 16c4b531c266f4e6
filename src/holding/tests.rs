//! `HoldingDb` as a whole: held writes, reads through the open and the frozen window,
//! failed flushes, and what passes through to the database beneath.

use super::*;
use crate::db::{CountingDb, DbWrapper, MemoryDb, collect_range};
use crate::error::Error;

fn db() -> HoldingDb<CountingDb<MemoryDb>> {
    HoldingDb::new(CountingDb::new(MemoryDb::new("t")))
}

fn put(d: &dyn Db, k: &str, v: &str) {
    let mut b = Batch::new();
    b.put(k.as_bytes().to_vec(), v.as_bytes().to_vec());
    d.write(&b, Durability::Synced).unwrap();
}

#[test]
fn held_writes_reach_disk_only_at_write_held() {
    let d = db();
    put(&d, "a", "1");
    assert_eq!(d.inner().counts().synced_batches, 1);
    d.hold().unwrap();
    put(&d, "b", "2");
    put(&d, "b", "22");
    let mut del = Batch::new();
    del.delete(&b"a"[..]);
    d.write(&del, Durability::Synced).unwrap();
    assert_eq!(
        d.inner().counts().synced_batches,
        1,
        "nothing written while holding"
    );
    assert_eq!(d.held_bytes(), 1 + 2 + 1);
    assert_eq!(d.get(b"b").unwrap().unwrap(), &b"22"[..]);
    assert_eq!(d.get(b"a").unwrap(), None);
    assert_eq!(d.get_durable(b"a").unwrap().unwrap(), &b"1"[..]);
    let all = collect_range(&d, KeyRange::all(), Direction::Forward).unwrap();
    assert_eq!(all.len(), 1);
    let w = d.write_held().unwrap();
    assert_eq!(w.ops, 2);
    assert_eq!(d.inner().counts().synced_batches, 2);
    assert_eq!(d.held_bytes(), 0);
    assert_eq!(d.get_durable(b"a").unwrap(), None);
    assert_eq!(
        d.write_held().unwrap(),
        HeldWrite::default(),
        "empty overlay writes nothing"
    );
    assert_eq!(d.inner().counts().synced_batches, 2);
}

/// The open-window read sees the open window alone: its puts and deletes, the
/// window's own bytes; a key only in the frozen window or only on disk reads `None`
/// (planted: reading through the frozen window, as `get_many_through` does, fails on
/// "f"), and so does every key when not holding.
#[test]
fn the_open_window_read_sees_the_open_window_alone() {
    let d = db();
    put(&d, "disk", "0");
    assert_eq!(d.get_many_open(&[b"disk"]).unwrap(), vec![None]);
    d.hold().unwrap();
    put(&d, "f", "1");
    d.freeze().unwrap();
    put(&d, "o", "2");
    let mut del = Batch::new();
    del.delete(&b"disk"[..]);
    d.write(&del, Durability::Synced).unwrap();
    let read = d.get_many_open(&[b"o", b"disk", b"f", b"absent"]).unwrap();
    assert_eq!(
        read,
        vec![Some(Some(Bytes::from_static(b"2"))), Some(None), None, None]
    );
    let through = d.get(b"o").unwrap().unwrap();
    let open = read[0].clone().flatten().unwrap();
    assert_eq!(
        open.as_ptr(),
        through.as_ptr(),
        "the overlay's bytes, not a copy"
    );
    assert_eq!(d.get(b"f").unwrap().unwrap(), &b"1"[..], "frozen, readable");
}

#[test]
fn reverse_merge_interleaves_and_hides_deletes() {
    let d = db();
    for k in ["a", "c", "e"] {
        put(&d, k, "disk");
    }
    d.hold().unwrap();
    for k in ["b", "c", "f"] {
        put(&d, k, "held");
    }
    let mut del = Batch::new();
    del.delete(&b"e"[..]);
    d.write(&del, Durability::Synced).unwrap();
    let rev: Vec<_> = collect_range(&d, KeyRange::all(), Direction::Reverse)
        .unwrap()
        .into_iter()
        .map(|(k, v)| {
            (
                String::from_utf8(k.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap(),
            )
        })
        .collect();
    let want: Vec<_> = [("f", "held"), ("c", "held"), ("b", "held"), ("a", "disk")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(rev, want);
}

#[test]
fn a_frozen_window_is_read_between_the_open_window_and_the_disk_until_written() {
    let d = db();
    for k in ["a", "c", "e", "g"] {
        put(&d, k, "disk");
    }
    d.hold().unwrap();
    put(&d, "b", "frozen");
    put(&d, "c", "frozen");
    let mut del = Batch::new();
    del.delete(&b"e"[..]);
    d.write(&del, Durability::Synced).unwrap();
    let frozen = d.freeze().unwrap();
    assert_eq!(frozen.ops, 3);
    assert_eq!(d.held_bytes(), 0, "the overlay is empty after a freeze");
    assert_eq!(d.frozen_bytes(), 1 + 6 + 1 + 6 + 1);
    // Later writes go to a new open window and shadow the frozen window.
    put(&d, "c", "active");
    put(&d, "e", "active");
    let mut del = Batch::new();
    del.delete(&b"g"[..]);
    d.write(&del, Durability::Synced).unwrap();
    let want = [
        ("a", "disk"),
        ("b", "frozen"),
        ("c", "active"),
        ("e", "active"),
    ];
    let read = |dir| -> Vec<(String, String)> {
        collect_range(&d, KeyRange::all(), dir)
            .unwrap()
            .into_iter()
            .map(|(k, v)| {
                (
                    String::from_utf8(k.to_vec()).unwrap(),
                    String::from_utf8(v.to_vec()).unwrap(),
                )
            })
            .collect()
    };
    let fwd: Vec<_> = want
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(read(Direction::Forward), fwd);
    let mut rev = fwd.clone();
    rev.reverse();
    assert_eq!(read(Direction::Reverse), rev);
    assert_eq!(d.get(b"b").unwrap().unwrap(), &b"frozen"[..]);
    assert_eq!(d.get(b"c").unwrap().unwrap(), &b"active"[..]);
    assert_eq!(d.get_durable(b"b").unwrap(), None, "frozen is not durable");
    assert!(
        matches!(d.freeze(), Err(Error::InvalidInput(_))),
        "one window in flight"
    );
    let synced = d.inner().counts().synced_batches;
    let w = d.write_frozen().unwrap();
    assert_eq!((w.ops, d.inner().counts().synced_batches), (3, synced + 1));
    assert_eq!(d.frozen_bytes(), 0);
    assert_eq!(d.get_durable(b"b").unwrap().unwrap(), &b"frozen"[..]);
    assert_eq!(
        d.get_durable(b"e").unwrap(),
        None,
        "the frozen delete is on disk"
    );
    assert_eq!(
        read(Direction::Forward),
        fwd,
        "reads unchanged by the write"
    );
    assert_eq!(
        d.write_frozen().unwrap(),
        HeldWrite::default(),
        "nothing frozen"
    );
}

#[test]
fn a_failed_frozen_write_poisons_and_keeps_the_window() {
    use crate::testing::{FailAfter, FailingDb};
    let d = HoldingDb::new(FailingDb::new(MemoryDb::new("t"), FailAfter::new(0)));
    d.hold().unwrap();
    put(&d, "k", "v");
    d.freeze().unwrap();
    assert!(d.write_frozen().is_err());
    assert!(d.is_poisoned());
    assert_eq!(d.frozen_bytes(), 2, "the window is kept");
    assert!(matches!(d.get(b"k"), Err(Error::Poisoned { .. })));
}

/// A failed write puts the window back under the open window with its memory as it was,
/// the replaced values still in its chunks counted, also when the window is shared (a
/// unit's writer still holds it) and is duplicated rather than taken back (planted: the
/// duplicate's replaced bytes dropped in `Window::duplicate`).
#[test]
fn a_window_put_back_after_a_failed_write_keeps_its_memory_even_when_shared() {
    use crate::testing::{FailAfter, FailingDb};
    for shared in [false, true] {
        let d = HoldingDb::new(FailingDb::new(MemoryDb::new("t"), FailAfter::new(0)));
        d.hold().unwrap();
        put(&d, "k", "first");
        put(&d, "k", "second");
        put(&d, "j", "v");
        let before = d.held_memory();
        assert!(
            before > 6 + 1 + 2 + 2 * super::HELD_KEY_BYTES,
            "the replaced value is counted: {before}"
        );
        d.freeze().unwrap();
        let writer = shared.then(|| d.frozen_window().unwrap().expect("frozen"));
        assert!(d.write_frozen().is_err());
        d.unfreeze();
        assert_eq!(d.held_memory(), before, "shared: {shared}");
        assert_eq!(d.held_keys(), 2);
        drop(writer);
    }
}

/// A database reporting a fixed on-disk size, to see it pass through.
#[derive(Debug)]
struct FixedSize(MemoryDb);

impl DbWrapper for FixedSize {
    type Inner = MemoryDb;
    fn inner(this: &Self) -> &MemoryDb {
        &this.0
    }
    fn disk_size_bytes(_: &Self) -> Result<u64> {
        Ok(4242)
    }
}

#[test]
fn name_and_disk_size_are_the_inner_databases() {
    let d = HoldingDb::new(FixedSize(MemoryDb::new("state")));
    assert_eq!(d.name(), "state");
    assert_eq!(d.disk_size_bytes().unwrap(), 4242);
    assert!(!d.is_poisoned(), "a fresh database is not poisoned");
}
