//! A redb database keeps a crc32 with each pair (docs/FORMAT.md, "redb databases"): a bit
//! flipped inside a stored value or key reads as `Error::Corrupt` naming the database and the
//! key, never as a wrong value. redb checks its own page checksums only when it repairs a
//! file, so this is the check that catches a flip on a normal read. A file created before
//! pairs carried a checksum (table `kv`) opens and reads as it was written.

use std::path::Path;

use redb::ReadableDatabase;

use flushpoint::{Batch, CorruptReason, Db, Direction, Durability, Error, KeyRange, RedbDb};

fn options() -> flushpoint::RedbOptions {
    flushpoint::RedbOptions::default()
}

/// Writes `pairs` synced and closes the file.
fn write(path: &Path, pairs: &[(&[u8], &[u8])]) {
    let db = RedbDb::open(path, "test", &options()).unwrap();
    let mut b = Batch::new();
    for (k, v) in pairs {
        b.put(k.to_vec(), v.to_vec());
    }
    db.write(&b, Durability::Synced).unwrap();
    db.close().unwrap();
}

/// Flips one bit of the first occurrence of `needle` in the file (it must occur once).
fn flip_in_file(path: &Path, needle: &[u8]) {
    let mut bytes = std::fs::read(path).unwrap();
    let hits: Vec<usize> = bytes
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(hits.len(), 1, "the needle must occur once in the file");
    bytes[hits[0] + needle.len() / 2] ^= 0x10;
    std::fs::write(path, bytes).unwrap();
}

fn all(db: &RedbDb) -> flushpoint::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    db.range(KeyRange::all(), Direction::Forward)?
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect()
}

#[test]
fn a_new_database_checks_its_pairs_and_reads_them_back_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.redb");
    write(&path, &[(b"k1", b"v1"), (b"k2", b""), (b"", b"empty key")]);
    let db = RedbDb::open(&path, "test", &options()).unwrap();
    assert!(db.pairs_checked());
    assert_eq!(db.get(b"k1").unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(db.get(b"k2").unwrap().as_deref(), Some(&b""[..]));
    assert_eq!(db.get(b"").unwrap().as_deref(), Some(&b"empty key"[..]));
    assert_eq!(db.get(b"k3").unwrap(), None);
    assert_eq!(
        all(&db).unwrap(),
        vec![
            (b"".to_vec(), b"empty key".to_vec()),
            (b"k1".to_vec(), b"v1".to_vec()),
            (b"k2".to_vec(), b"".to_vec()),
        ]
    );
}

#[test]
fn a_flipped_bit_in_a_value_is_a_corrupt_error_naming_the_database_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.redb");
    let value = b"a value long enough to find in the file: 0123456789abcdef";
    write(&path, &[(b"the key", value), (b"other", b"fine")]);
    flip_in_file(&path, value);
    let db = RedbDb::open(&path, "test", &options()).unwrap();
    for got in [
        db.get(b"the key").map(|_| ()),
        db.get_many(&[b"other", b"the key"]).map(|_| ()),
        all(&db).map(|_| ()),
    ] {
        match got {
            Err(Error::Corrupt {
                db, key, reason, ..
            }) => {
                assert_eq!(db, "test");
                assert_eq!(key, b"the key");
                assert!(matches!(reason, CorruptReason::Checksum { .. }), "{reason}");
            }
            other => panic!("a flipped value was read as {other:?}"),
        }
    }
    // The pair beside it is unharmed.
    assert_eq!(db.get(b"other").unwrap().as_deref(), Some(&b"fine"[..]));
}

#[test]
fn a_flipped_bit_in_a_key_is_a_corrupt_error_when_the_pair_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.redb");
    let key = b"a key long enough to find in the file: 0123456789abcdef";
    write(&path, &[(key, b"v"), (b"other", b"fine")]);
    flip_in_file(&path, key);
    let db = RedbDb::open(&path, "test", &options()).unwrap();
    // A scan reads the pair under its flipped key; a lookup of the original key misses,
    // and the pair left in its slot fails its checksum.
    for got in [all(&db).map(|_| ()), db.get(key).map(|_| ())] {
        match got {
            Err(Error::Corrupt { reason, .. }) => {
                assert!(matches!(reason, CorruptReason::Checksum { .. }), "{reason}")
            }
            other => panic!("a flipped key was read as {other:?}"),
        }
    }
}

#[test]
fn a_flipped_key_is_found_by_a_lookup_wherever_the_flip_moves_it() {
    // Keys spread across the key space (like hashes), one flipped at every bit of its
    // first byte: wherever the flip moves it in key order, the lookup of the original key
    // reports the damage.
    for bit in 0..8u8 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.redb");
        let keys: Vec<Vec<u8>> = (0..64u8)
            .map(|i| {
                let mut k = vec![i.wrapping_mul(37), 0x5a];
                k.extend_from_slice(format!("key number {i:02} of the hash index").as_bytes());
                k
            })
            .collect();
        let pairs: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"v"[..])).collect();
        write(&path, &pairs);
        let target = &keys[20];
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes
            .windows(target.len())
            .position(|w| w == &target[..])
            .unwrap();
        bytes[at] ^= 1 << bit;
        std::fs::write(&path, bytes).unwrap();
        let db = RedbDb::open(&path, "test", &options()).unwrap();
        match db.get(target) {
            Err(Error::Corrupt { .. }) => {}
            other => panic!("bit {bit}: a lookup of a flipped key read {other:?}"),
        }
        // Other keys still read.
        assert_eq!(db.get(&keys[40]).unwrap().as_deref(), Some(&b"v"[..]));
    }
}

#[test]
fn a_database_created_before_pair_checksums_reads_and_writes_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.redb");
    // The layout of a file created before: table `kv`, values as given.
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn
                .open_table(redb::TableDefinition::<&[u8], &[u8]>::new("kv"))
                .unwrap();
            t.insert(&b"k"[..], &b"old value"[..]).unwrap();
        }
        txn.commit().unwrap();
    }
    let db = RedbDb::open(&path, "old", &options()).unwrap();
    assert!(!db.pairs_checked());
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"old value"[..]));
    let mut b = Batch::new();
    b.put(b"k2".to_vec(), b"new".to_vec());
    db.write(&b, Durability::Synced).unwrap();
    db.close().unwrap();
    // Still the old layout: the value stored as given, no crc after it.
    let raw = redb::Database::open(&path).unwrap();
    let txn = raw.begin_read().unwrap();
    let t = txn
        .open_table(redb::TableDefinition::<&[u8], &[u8]>::new("kv"))
        .unwrap();
    assert_eq!(t.get(&b"k2"[..]).unwrap().unwrap().value(), b"new");
}

#[test]
fn a_file_holding_both_tables_is_refused_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("both.redb");
    write(&path, &[(b"k", b"v")]);
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(redb::TableDefinition::<&[u8], &[u8]>::new("kv"))
            .unwrap();
        txn.commit().unwrap();
    }
    match RedbDb::open(&path, "both", &options()) {
        Err(e @ Error::Corrupt { .. }) => assert!(e.to_string().contains("both"), "{e}"),
        other => panic!("a file with both tables opened: {other:?}"),
    }
}
