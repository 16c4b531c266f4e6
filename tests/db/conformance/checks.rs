//! The contract checks, each run on every fixture by `conformance!`.

use super::*;

pub fn get_and_contains(f: &mut Fixture) {
    let db = f.db();
    assert_eq!(db.get(b"a").unwrap(), None);
    assert!(!db.contains(b"a").unwrap());
    put_all(db, &[(b"a", b"1"), (b"ab", b"2"), (b"empty", b"")]);
    assert_eq!(db.get(b"a").unwrap(), Some(b(b"1")));
    assert!(db.contains(b"a").unwrap());
    // A key that is a prefix of another is a distinct key.
    assert_eq!(db.get(b"ab").unwrap(), Some(b(b"2")));
    assert_eq!(db.get(b"abc").unwrap(), None);
    assert!(!db.contains(b"abc").unwrap());
    // An empty value is a value, not an absence.
    assert_eq!(db.get(b"empty").unwrap(), Some(Bytes::new()));
    assert!(db.contains(b"empty").unwrap());
    // Overwrite, then delete.
    put_all(db, &[(b"a", b"3")]);
    assert_eq!(db.get(b"a").unwrap(), Some(b(b"3")));
    let mut batch = Batch::new();
    batch.delete(b(b"a"));
    db.write(&batch, Durability::Synced).unwrap();
    assert_eq!(db.get(b"a").unwrap(), None);
    assert!(!db.contains(b"a").unwrap());
    // Deleting an absent key is fine.
    db.write(&batch, Durability::Buffered).unwrap();
    // A large value round-trips byte for byte.
    let big: Vec<u8> = (0..(1 << 20)).map(|i: u32| (i % 251) as u8).collect();
    put_all(db, &[(b"big", &big)]);
    assert_eq!(db.get(b"big").unwrap().as_deref(), Some(&big[..]));
}

/// Keys chosen around the edges: empty key, 0x00, shared prefixes, 0xff runs.
const STORED: [&[u8]; 9] = [
    b"",
    b"\x00",
    b"a",
    b"ab",
    b"abc",
    b"b",
    b"\xfe\xff",
    b"\xff",
    b"\xff\xff",
];
/// Bound keys: every stored key plus keys between and beyond them.
const PROBES: [&[u8]; 8] = [
    b"\x00\x00",
    b"aa",
    b"abd",
    b"c",
    b"\xfe",
    b"\xff\x00",
    b"\xff\xff\xff",
    b"\x01",
];

fn bounds() -> Vec<Bound<Bytes>> {
    let mut v = vec![Bound::Unbounded];
    for k in STORED.iter().chain(PROBES.iter()) {
        v.push(Bound::Included(b(k)));
        v.push(Bound::Excluded(b(k)));
    }
    v
}

/// Exhaustive over the small domain: every (start, end) pair of bounds, both directions.
pub fn range_bounds(f: &mut Fixture) {
    let db = f.db();
    let model: BTreeMap<Bytes, Bytes> = STORED
        .iter()
        .enumerate()
        .map(|(i, k)| (b(k), Bytes::from(vec![i as u8; i + 1])))
        .collect();
    let mut batch = Batch::new();
    for (k, v) in &model {
        batch.put(k.clone(), v.clone());
    }
    db.write(&batch, Durability::Synced).unwrap();
    let bounds = bounds();
    let mut checked = 0;
    let mut non_empty = 0;
    for start in &bounds {
        for end in &bounds {
            for direction in [Direction::Forward, Direction::Reverse] {
                let range = KeyRange {
                    start: start.clone(),
                    end: end.clone(),
                };
                let got = collect_range(db, range, direction).unwrap();
                let want = expected_range(&model, start, end, direction);
                assert_eq!(
                    show(&got),
                    show(&want),
                    "range {start:?}..{end:?} {direction:?}"
                );
                checked += 1;
                non_empty += usize::from(!want.is_empty());
            }
        }
    }
    // The domain covers empty and non-empty answers alike.
    assert_eq!(checked, bounds.len() * bounds.len() * 2);
    assert!(
        non_empty > checked / 4 && non_empty < checked,
        "{non_empty}/{checked}"
    );
}

pub fn prefix_ranges(f: &mut Fixture) {
    let db = f.db();
    let stored: [&[u8]; 12] = [
        b"\x00",
        b"\x01",
        b"\x01\x00",
        b"\x01\x05\x07",
        b"\x01\xff",
        b"\x01\xff\xff",
        b"\x02",
        b"\x02\x00",
        b"\xfe\xff\x01",
        b"\xff",
        b"\xff\xff",
        b"\xff\xff\x00",
    ];
    let pairs: Vec<(&[u8], &[u8])> = stored.iter().map(|k| (*k, &b"v"[..])).collect();
    put_all(db, &pairs);
    let prefixes: [&[u8]; 10] = [
        b"",
        b"\x00",
        b"\x01",
        b"\x01\x00",
        b"\x01\xff",
        b"\x01\xff\xff",
        b"\x03",
        b"\xfe",
        b"\xff",
        b"\xff\xff",
    ];
    for prefix in prefixes {
        let mut want: Vec<Bytes> = stored
            .iter()
            .filter(|k| k.starts_with(prefix))
            .map(|k| b(k))
            .collect();
        let got: Vec<Bytes> = collect_range(db, KeyRange::prefix(prefix), Direction::Forward)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            got,
            want,
            "prefix {} forward",
            flushpoint::codec::hex(prefix)
        );
        want.reverse();
        let got: Vec<Bytes> = collect_range(db, KeyRange::prefix(prefix), Direction::Reverse)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            got,
            want,
            "prefix {} reverse",
            flushpoint::codec::hex(prefix)
        );
    }
}

pub fn batch_last_op_wins(f: &mut Fixture) {
    let db = f.db();
    put_all(db, &[(b"c", b"old"), (b"d", b"old")]);
    let mut batch = Batch::new();
    batch
        // put, delete, put: the last put wins
        .put(b(b"a"), b(b"1"))
        .delete(b(b"a"))
        .put(b(b"a"), b(b"2"))
        // put then delete: absent
        .put(b(b"b"), b(b"1"))
        .delete(b(b"b"))
        // delete an existing key then put it back: present with the new value
        .delete(b(b"c"))
        .put(b(b"c"), b(b"new"))
        // put twice over an existing key: the second value
        .put(b(b"d"), b(b"x"))
        .put(b(b"d"), b(b"y"));
    assert_eq!(batch.len(), 9);
    db.write(&batch, Durability::Synced).unwrap();
    assert_eq!(db.get(b"a").unwrap(), Some(b(b"2")));
    assert_eq!(db.get(b"b").unwrap(), None);
    assert_eq!(db.get(b"c").unwrap(), Some(b(b"new")));
    assert_eq!(db.get(b"d").unwrap(), Some(b(b"y")));
    let all = collect_range(db, KeyRange::all(), Direction::Forward).unwrap();
    assert_eq!(
        show(&all),
        show(&[(b(b"a"), b(b"2")), (b(b"c"), b(b"new")), (b(b"d"), b(b"y"))])
    );
    // An empty batch is accepted and changes nothing.
    db.write(&Batch::new(), Durability::Synced).unwrap();
    db.write(&Batch::new(), Durability::Buffered).unwrap();
    assert_eq!(
        collect_range(db, KeyRange::all(), Direction::Forward)
            .unwrap()
            .len(),
        3
    );
}

pub fn empty_ranges(f: &mut Fixture) {
    let db = f.db();
    // An empty database has nothing in any range.
    for direction in [Direction::Forward, Direction::Reverse] {
        assert!(
            collect_range(db, KeyRange::all(), direction)
                .unwrap()
                .is_empty()
        );
        assert!(
            collect_range(db, KeyRange::prefix(b"x"), direction)
                .unwrap()
                .is_empty()
        );
    }
    put_all(db, &[(b"a", b"1"), (b"m", b"2"), (b"z", b"3")]);
    let m = || b(b"m");
    let empties = [
        // start == end with an excluded side: empty, even though "m" is stored
        (Bound::Included(m()), Bound::Excluded(m())),
        (Bound::Excluded(m()), Bound::Included(m())),
        (Bound::Excluded(m()), Bound::Excluded(m())),
        // start above end: empty, never a panic
        (Bound::Included(b(b"z")), Bound::Included(b(b"a"))),
        (Bound::Excluded(b(b"z")), Bound::Excluded(b(b"a"))),
        (Bound::Included(b(b"n")), Bound::Excluded(b(b"b"))),
        // a range between stored keys
        (Bound::Excluded(b(b"a")), Bound::Excluded(m())),
        (Bound::Included(b(b"b")), Bound::Included(b(b"l"))),
        // beyond either end
        (Bound::Excluded(b(b"z")), Bound::Unbounded),
        (Bound::Unbounded, Bound::Excluded(b(b"a"))),
    ];
    for (start, end) in empties {
        for direction in [Direction::Forward, Direction::Reverse] {
            let got = collect_range(
                db,
                KeyRange {
                    start: start.clone(),
                    end: end.clone(),
                },
                direction,
            )
            .unwrap();
            assert!(got.is_empty(), "{start:?}..{end:?} {direction:?}: {got:?}");
        }
    }
    // The single-key range holds exactly that key: the empties above are not vacuous.
    let one = collect_range(
        db,
        KeyRange {
            start: Bound::Included(m()),
            end: Bound::Included(m()),
        },
        Direction::Reverse,
    )
    .unwrap();
    assert_eq!(show(&one), show(&[(m(), b(b"2"))]));
}

pub fn iterator_is_a_snapshot(f: &mut Fixture) {
    let db = f.db();
    put_all(db, &[(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]);
    for direction in [Direction::Forward, Direction::Reverse] {
        let it = db.range(KeyRange::all(), direction).unwrap();
        // Writes after the iterator was created do not show through it.
        let mut batch = Batch::new();
        batch.delete(b(b"b")).put(b(b"d"), b(b"4"));
        db.write(&batch, Durability::Synced).unwrap();
        let got: Vec<_> = it.collect::<Result<_, _>>().unwrap();
        let mut want = vec![(b(b"a"), b(b"1")), (b(b"b"), b(b"2")), (b(b"c"), b(b"3"))];
        if direction == Direction::Reverse {
            want.reverse();
        }
        assert_eq!(show(&got), show(&want), "{direction:?}");
        // Undo for the next direction.
        let mut batch = Batch::new();
        batch.put(b(b"b"), b(b"2")).delete(b(b"d"));
        db.write(&batch, Durability::Synced).unwrap();
    }
}

pub fn both_durabilities_are_visible_at_once(f: &mut Fixture) {
    let db = f.db();
    let mut batch = Batch::new();
    for i in 0u32..300 {
        batch.put(
            Bytes::from(i.to_be_bytes().to_vec()),
            Bytes::from(vec![1u8; 100]),
        );
    }
    db.write(&batch, Durability::Buffered).unwrap();
    assert_eq!(
        collect_range(db, KeyRange::all(), Direction::Forward)
            .unwrap()
            .len(),
        300
    );
    let mut batch = Batch::new();
    for i in 0u32..300 {
        if i % 2 == 0 {
            batch.delete(Bytes::from(i.to_be_bytes().to_vec()));
        }
    }
    db.write(&batch, Durability::Synced).unwrap();
    let keys: Vec<u32> = collect_range(db, KeyRange::all(), Direction::Reverse)
        .unwrap()
        .into_iter()
        .map(|(k, _)| u32::from_be_bytes(k[..].try_into().unwrap()))
        .collect();
    let want: Vec<u32> = (0u32..300).rev().filter(|i| i % 2 == 1).collect();
    assert_eq!(keys, want);
}

pub fn writes_survive_reopen(f: &mut Fixture) {
    put_all(f.db(), &[(b"synced", b"1")]);
    let mut batch = Batch::new();
    batch.put(b(b"buffered"), b(b"2"));
    f.db().write(&batch, Durability::Buffered).unwrap();
    f.reopen();
    assert_eq!(f.db().get(b"synced").unwrap(), Some(b(b"1")));
    // A clean close keeps buffered writes too (only a power cut may lose them).
    assert_eq!(f.db().get(b"buffered").unwrap(), Some(b(b"2")));
}
