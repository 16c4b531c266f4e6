//! A journal index created by this version checks every pair and row it reads
//! (docs/FORMAT.md §9, "Checked index"): a bit flipped inside a `ks.<name>` value or key,
//! or inside any row of the engine's own tables, is `Error::Corrupt` naming `index.redb`
//! and the keyspace or table and the key — never a wrong value, a missing key or a wrong
//! recovery decision. redb checks its page checksums only when it repairs a file, so these
//! are the checks that catch a flip on a normal open or read.
//!
//! * a new index stores each pair and row with the crc32 the format documents;
//! * a flipped value or key of a keyspace: every read of it (get, get_many, range, usage,
//!   the apply step replacing it) is `Corrupt`; the lookup of a flipped key's original is
//!   too (its neighbour fails);
//! * a flipped value of every row of every table, a flipped meta key, a base row missing,
//!   tables of both layouts: the open is refused;
//! * a new index's layout, lost with a cut before any durable commit, is taken again;
//! * an index of the layout before checksums (written here the old way, from a new one)
//!   opens, reads, writes and syncs as before and keeps its layout; a home of it syncs to
//!   the same state as a home created now.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use redb::{ReadableDatabase, ReadableTable, TableDefinition, TableError, TableHandle};

use flushpoint::db::collect_range;
use flushpoint::demo::{ChainSpec, DemoChain, KvApp, Profile};
use flushpoint::fs::StdFs;
use flushpoint::home::JOURNAL_DIR;
use flushpoint::journal::{
    Applier, INDEX_FILE, JournalEngine, JournalOptions, KeyspaceOptions, SEPARATE_VALUES_MIN_BYTES,
};
use flushpoint::testing::{DirFate, FileFate, SimFs};
use flushpoint::{
    Batch, CorruptReason, Db, Direction, Durability, Error, FlushPolicy, HoldingDb, Home,
    HomeEngine, HomeOptions, KeyRange, NoEvents, Node,
};

/// The engine's own tables in a checked index, each keeping `u64` values with a crc32.
const ROW_TABLES: [&str; 5] = [
    "journal.meta.crc",
    "journal.runs.crc",
    "journal.live.crc",
    "journal.run_values.crc",
    "journal.segment_ends.crc",
];

/// A long value, found in the index file by its bytes.
fn tree_value(i: u32) -> Bytes {
    Bytes::from(format!(
        "value {i:04} of the tree keyspace, long enough to find in the index file"
    ))
}

/// A long key, found in the index file by its bytes.
fn tree_key(i: u32) -> Bytes {
    Bytes::from(format!(
        "key {i:04} of the tree keyspace, long enough to find"
    ))
}

/// A value the separating keyspaces keep in the journal (a pointer in the index).
fn large(i: u32) -> Bytes {
    Bytes::from(vec![i as u8; SEPARATE_VALUES_MIN_BYTES as usize * 4])
}

/// An inline value of the separating keyspace, found in the index file by its bytes.
fn inline(i: u32) -> Bytes {
    Bytes::from(format!("inline value {i:04}, short"))
}

fn options() -> JournalOptions {
    JournalOptions::default()
        .with_segment_bytes(64 * 1024)
        .with_checkpoint_bytes(u64::MAX / 2)
        .with_applier(Applier::Inline)
        .with_prepare_segments(false)
}

fn open(dir: &Path) -> flushpoint::Result<JournalEngine> {
    JournalEngine::open(Arc::new(StdFs), dir, options())
}

fn separating() -> KeyspaceOptions {
    KeyspaceOptions::separating_values_from(SEPARATE_VALUES_MIN_BYTES)
}

fn runs() -> KeyspaceOptions {
    KeyspaceOptions::indexed_by_runs().with_values_separated_from(SEPARATE_VALUES_MIN_BYTES)
}

/// Writes `from..to` into three keyspaces — `tree` (plain), `sep` (separating: inline and
/// large values) and `runs` (indexed by runs, separating) — in synced units.
fn write(engine: &JournalEngine, from: u32, to: u32) {
    let tree = engine.keyspace("tree").unwrap();
    let sep = engine.keyspace_with("sep", separating()).unwrap();
    let runs = engine.keyspace_with("runs", runs()).unwrap();
    for i in from..to {
        let mut b = Batch::new();
        b.put(tree_key(i), tree_value(i));
        tree.write(&b, Durability::Synced).unwrap();
        let mut b = Batch::new();
        b.put(format!("sep {i:04}"), inline(i));
        b.put(format!("sep large {i:04}"), large(i));
        sep.write(&b, Durability::Synced).unwrap();
        let mut b = Batch::new();
        b.put(format!("run {i:04}"), large(i));
        runs.write(&b, Durability::Synced).unwrap();
    }
}

/// Every pair of the three keyspaces, by key.
fn read_all(engine: &JournalEngine) -> flushpoint::Result<Vec<(String, Bytes, Bytes)>> {
    let mut out = Vec::new();
    for (name, options) in [
        ("tree", KeyspaceOptions::default()),
        ("sep", separating()),
        ("runs", runs()),
    ] {
        let db = engine.keyspace_with(name, options)?;
        for (k, v) in collect_range(&*db, KeyRange::all(), Direction::Forward)? {
            out.push((name.to_string(), k, v));
        }
    }
    Ok(out)
}

/// A journal in `dir` written with keys `0..n`, checkpointed and closed.
fn build(dir: &Path, n: u32) {
    let engine = open(dir).unwrap();
    write(&engine, 0, n);
    engine.checkpoint().unwrap();
}

/// Flips one bit in every occurrence of `needle` in the file (a live page's and any stale
/// copy's alike); fails unless there is one.
fn flip_in_file(path: &Path, needle: &[u8], at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    let hits: Vec<usize> = bytes
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    assert!(!hits.is_empty(), "{needle:?} is not in {}", path.display());
    for i in hits {
        bytes[i + at] ^= 0x04;
    }
    std::fs::write(path, bytes).unwrap();
}

/// A copy of the journal directory `from`, in a new temporary directory.
fn copy(from: &Path) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let to = tmp.path().join("j");
    copy_dir(from, &to);
    (tmp, to)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The parts of a `Corrupt` error; any other result fails, naming `what`.
fn corrupt<T: std::fmt::Debug>(
    what: &str,
    got: flushpoint::Result<T>,
) -> (String, Vec<u8>, CorruptReason) {
    match got {
        Err(Error::Corrupt {
            db, key, reason, ..
        }) => (db, key, reason),
        other => panic!("{what}: want a Corrupt error, got {other:?}"),
    }
}

fn crc_of(parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

fn len32(s: &[u8]) -> [u8; 4] {
    (s.len() as u32).to_le_bytes()
}

/// A row as the test finds it in a checked table: its key as the row's crc32 covers it
/// (docs/FORMAT.md: a string as u32 LE length and bytes, an integer as 8 bytes LE), its
/// key as an error names it, its value and its stored crc32.
struct Row {
    key_bytes: Vec<u8>,
    key_text: String,
    value: u64,
    crc: u32,
}

fn rows_of<K: redb::Key + 'static>(
    txn: &redb::ReadTransaction,
    table: &str,
    key: impl Fn(K::SelfType<'_>) -> (Vec<u8>, String),
) -> Vec<Row> {
    let def: TableDefinition<K, (u64, u32)> = TableDefinition::new(table);
    let t = match txn.open_table(def) {
        Ok(t) => t,
        Err(TableError::TableDoesNotExist(_)) => return Vec::new(),
        Err(e) => panic!("{e}"),
    };
    t.iter()
        .unwrap()
        .map(|r| {
            let (k, v) = r.unwrap();
            let (key_bytes, key_text) = key(k.value());
            let (value, crc) = v.value();
            Row {
                key_bytes,
                key_text,
                value,
                crc,
            }
        })
        .collect()
}

fn str_key(s: &str) -> Vec<u8> {
    [&len32(s.as_bytes())[..], s.as_bytes()].concat()
}

/// Every row of every checked table of the index at `path`, by table.
fn all_rows(path: &Path) -> Vec<(&'static str, Row)> {
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let mut out = Vec::new();
    let [meta, runs, live, run_values, ends] = ROW_TABLES;
    for r in rows_of::<&str>(&txn, meta, |k| (str_key(k), k.to_string())) {
        out.push((meta, r));
    }
    for r in rows_of::<(&str, u64)>(&txn, runs, |(name, id)| {
        (
            [str_key(name), id.to_le_bytes().to_vec()].concat(),
            format!("({name}, {id})"),
        )
    }) {
        out.push((runs, r));
    }
    for table in [live, ends] {
        for r in rows_of::<u64>(&txn, table, |s| (s.to_le_bytes().to_vec(), s.to_string())) {
            out.push((table, r));
        }
    }
    for r in rows_of::<(&str, u64, u64)>(&txn, run_values, |(name, id, s)| {
        let bytes = [
            str_key(name),
            id.to_le_bytes().to_vec(),
            s.to_le_bytes().to_vec(),
        ]
        .concat();
        (bytes, format!("({name}, {id}, {s})"))
    }) {
        out.push((run_values, r));
    }
    out
}

/// Every table name of the index at `path`.
fn table_names(path: &Path) -> Vec<String> {
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    txn.list_tables()
        .unwrap()
        .map(|t| t.name().to_string())
        .collect()
}

#[test]
fn a_new_index_stores_each_pair_and_row_with_its_documented_crc32() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    build(&dir, 40);
    let index = dir.join(INDEX_FILE);
    let names = table_names(&index);
    for t in [
        "journal.meta",
        "journal.runs",
        "journal.live",
        "journal.segment_ends",
    ] {
        assert!(
            !names.iter().any(|n| n == t),
            "{t} in a new index: {names:?}"
        );
    }
    // The pair crc32: over the key's length (u32 LE), the key and the value.
    let db = redb::Database::open(&index).unwrap();
    let txn = db.begin_read().unwrap();
    let mut pairs = 0;
    for name in names.iter().filter(|n| n.starts_with("ks.")) {
        let t = txn
            .open_table(TableDefinition::<&[u8], &[u8]>::new(name))
            .unwrap();
        for r in t.iter().unwrap() {
            let (k, v) = r.unwrap();
            let (k, stored) = (k.value(), v.value());
            let (value, crc) = stored.split_at(stored.len() - 4);
            let want = crc_of(&[&len32(k), k, value]);
            assert_eq!(u32::from_le_bytes(crc.try_into().unwrap()), want, "{name}");
            pairs += 1;
        }
    }
    assert_eq!(pairs, 40 * 3, "tree and sep pairs");
    drop(txn);
    drop(db);
    // The row crc32: over the table's name (u32 LE length and bytes), the key and the value.
    let rows = all_rows(&index);
    for table in ROW_TABLES {
        assert!(
            rows.iter().any(|(t, _)| *t == table),
            "no row in {table}: the test would not cover it"
        );
    }
    for (table, r) in &rows {
        let want = crc_of(&[
            &len32(table.as_bytes()),
            table.as_bytes(),
            &r.key_bytes,
            &r.value.to_le_bytes(),
        ]);
        assert_eq!(r.crc, want, "{table} {}", r.key_text);
    }
    let meta: Vec<&str> = rows
        .iter()
        .filter(|(t, _)| *t == "journal.meta.crc")
        .map(|(_, r)| r.key_text.as_str())
        .collect();
    assert_eq!(
        meta,
        [
            "applied_end_offset",
            "applied_end_segment",
            "applied_seq",
            "first_segment",
            "index.runs",
            "separate.runs",
            "separate.sep",
        ]
    );
}

#[test]
fn a_flipped_value_of_a_keyspace_is_corrupt_on_every_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    build(&dir, 40);
    flip_in_file(&dir.join(INDEX_FILE), &tree_value(7), 10);
    flip_in_file(&dir.join(INDEX_FILE), &inline(9), 5);
    let engine = open(&dir).unwrap();
    let tree = engine.keyspace("tree").unwrap();
    let check = |what: &str, got: flushpoint::Result<()>, keyspace: &str, key: &[u8]| {
        let (db, k, reason) = corrupt(what, got);
        assert_eq!(
            db,
            format!("journal index.redb, keyspace {keyspace}"),
            "{what}"
        );
        assert_eq!(k, key, "{what}");
        assert!(
            matches!(reason, CorruptReason::Checksum { .. }),
            "{what}: {reason}"
        );
    };
    let key = tree_key(7);
    check("get", tree.get(&key).map(drop), "tree", &key);
    check(
        "get_many",
        tree.get_many(&[&tree_key(1), &key]).map(drop),
        "tree",
        &key,
    );
    check(
        "range",
        collect_range(&*tree, KeyRange::all(), Direction::Forward).map(drop),
        "tree",
        &key,
    );
    check(
        "reverse range",
        collect_range(&*tree, KeyRange::all(), Direction::Reverse).map(drop),
        "tree",
        &key,
    );
    let (db, _, reason) = corrupt("usage", engine.usage());
    assert!(db.starts_with("journal index.redb, keyspace "), "{db}");
    assert!(matches!(reason, CorruptReason::Checksum { .. }), "{reason}");
    // The pairs beside it are unharmed.
    assert_eq!(tree.get(&tree_key(8)).unwrap(), Some(tree_value(8)));
    let sep = engine.keyspace("sep").unwrap();
    check(
        "separating get",
        sep.get(b"sep 0009").map(drop),
        "sep",
        b"sep 0009",
    );
    assert_eq!(sep.get(b"sep 0010").unwrap(), Some(inline(10)));
    // The apply step replacing the damaged value reads it (for the live bytes it frees):
    // refused, and the engine poisoned, not applied over.
    let mut b = Batch::new();
    b.put(&b"sep 0009"[..], &b"new"[..]);
    let (db, _, _) = corrupt("apply over it", sep.write(&b, Durability::Synced));
    assert!(db.contains("index.redb") && db.contains("sep"), "{db}");
    assert!(sep.get(b"sep 0010").is_err(), "the engine is poisoned");
}

#[test]
fn a_flipped_key_of_a_keyspace_is_corrupt_for_its_lookup_and_a_range_over_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    build(&dir, 40);
    let key = tree_key(21);
    flip_in_file(&dir.join(INDEX_FILE), &key, 20);
    let engine = open(&dir).unwrap();
    let tree = engine.keyspace("tree").unwrap();
    for (what, got) in [
        ("get", tree.get(&key).map(drop)),
        ("get_many", tree.get_many(&[&key]).map(drop)),
        (
            "range",
            collect_range(&*tree, KeyRange::prefix(&key[..10]), Direction::Forward).map(drop),
        ),
    ] {
        let (db, _, reason) = corrupt(what, got);
        assert_eq!(db, "journal index.redb, keyspace tree", "{what}");
        assert!(
            matches!(reason, CorruptReason::Checksum { .. }),
            "{what}: {reason}"
        );
    }
    // A range that does not reach it, and other keys, still read.
    let before = KeyRange::between(tree_key(0), tree_key(20));
    assert_eq!(
        collect_range(&*tree, before, Direction::Forward)
            .unwrap()
            .len(),
        20
    );
    assert_eq!(tree.get(&tree_key(30)).unwrap(), Some(tree_value(30)));
}

#[test]
fn a_flipped_value_of_any_row_refuses_the_open_naming_the_table_and_row() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    build(&dir, 40);
    let rows = all_rows(&dir.join(INDEX_FILE));
    let mut refused = 0;
    for (table, r) in &rows {
        let (_tmp, copy) = copy(&dir);
        let needle = [&r.value.to_le_bytes()[..], &r.crc.to_le_bytes()].concat();
        flip_in_file(&copy.join(INDEX_FILE), &needle, 0);
        let what = format!("{table} {}", r.key_text);
        let (db, key, reason) = corrupt(&what, open(&copy));
        assert_eq!(db, format!("journal index.redb, table {table}"), "{what}");
        assert_eq!(key, r.key_text.as_bytes(), "{what}");
        assert!(
            matches!(reason, CorruptReason::Checksum { .. }),
            "{what}: {reason}"
        );
        refused += 1;
    }
    assert!(refused >= 12, "rows of every table: {refused}");
}

#[test]
fn a_flipped_meta_key_refuses_the_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    build(&dir, 40);
    for key in ["applied_seq", "first_segment", "separate.sep", "index.runs"] {
        let (_tmp, copy) = copy(&dir);
        flip_in_file(&copy.join(INDEX_FILE), key.as_bytes(), key.len() - 1);
        let (db, _, reason) = corrupt(key, open(&copy));
        assert_eq!(db, "journal index.redb, table journal.meta.crc", "{key}");
        assert!(
            matches!(reason, CorruptReason::Checksum { .. }),
            "{key}: {reason}"
        );
    }
}

#[test]
fn a_checked_index_missing_a_base_row_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    build(&dir, 10);
    for key in [
        "applied_seq",
        "first_segment",
        "applied_end_segment",
        "applied_end_offset",
    ] {
        let (_tmp, copy) = copy(&dir);
        {
            let db = redb::Database::open(copy.join(INDEX_FILE)).unwrap();
            let txn = db.begin_write().unwrap();
            let def = TableDefinition::<&str, (u64, u32)>::new("journal.meta.crc");
            txn.open_table(def).unwrap().remove(key).unwrap().unwrap();
            txn.commit().unwrap();
        }
        let (db, k, reason) = corrupt(key, open(&copy));
        assert_eq!(db, "journal index.redb, table journal.meta.crc", "{key}");
        assert_eq!(k, key.as_bytes());
        assert!(
            matches!(reason, CorruptReason::Invalid(_)),
            "{key}: {reason}"
        );
    }
}

#[test]
fn an_index_holding_tables_of_both_layouts_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    build(&dir, 10);
    for table in ["journal.meta", "journal.live", "journal.segment_ends"] {
        let (_tmp, copy) = copy(&dir);
        {
            let db = redb::Database::open(copy.join(INDEX_FILE)).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(TableDefinition::<u64, u64>::new(table))
                .unwrap();
            txn.commit().unwrap();
        }
        let (db, _, reason) = corrupt(table, open(&copy));
        assert_eq!(db, "journal index.redb", "{table}");
        assert!(
            matches!(reason, CorruptReason::Invalid(_)),
            "{table}: {reason}"
        );
    }
}

/// The table names of the index at `path` in the simulated file system `fs`.
fn sim_table_names(fs: &SimFs, path: &Path) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join(INDEX_FILE);
    std::fs::write(&copy, fs.read(path).unwrap()).unwrap();
    table_names(&copy)
}

#[test]
fn a_cut_before_the_layout_is_durable_leaves_a_new_index_that_takes_it_again() {
    let fs = SimFs::new();
    let dir = Path::new("/j");
    let index = dir.join(INDEX_FILE);
    let engine = JournalEngine::open(Arc::new(fs.clone()), dir, options()).unwrap();
    for fate in [FileFate::DropAll, FileFate::KeepAll] {
        let image = fs.crash_image(DirFate::KeepAll, fate);
        let names = sim_table_names(&image, &index);
        // The layout's commit is not durable on its own: a cut loses it with the open.
        if fate == FileFate::DropAll {
            assert!(
                !names.iter().any(|n| n.starts_with("journal.")),
                "{names:?}"
            );
        }
        let again = JournalEngine::open(Arc::new(image.clone()), dir, options()).unwrap();
        write(&again, 0, 5);
        again.checkpoint().unwrap();
        assert_eq!(read_all(&again).unwrap().len(), 5 * 4);
        drop(again);
        let names = sim_table_names(&image, &index);
        assert!(
            names.iter().any(|n| n == "journal.meta.crc"),
            "{fate:?}: {names:?}"
        );
        assert!(
            !names.iter().any(|n| n == "journal.meta"),
            "{fate:?}: {names:?}"
        );
    }
    drop(engine);
}

/// Rewrites the checked index at `path` in the layout of an index created before pairs and
/// rows carried a checksum (docs/FORMAT.md §9): each `journal.*.crc` table as `journal.*`
/// with its plain `u64` values, each `ks.<name>` value without its 4 crc bytes.
fn write_the_old_way(path: &Path) {
    fn rows<K: redb::Key + 'static>(txn: &redb::WriteTransaction, checked: &str) {
        let plain = checked.strip_suffix(".crc").unwrap();
        let from: TableDefinition<K, (u64, u32)> = TableDefinition::new(checked);
        let to: TableDefinition<K, u64> = TableDefinition::new(plain);
        let rows: Vec<(Vec<u8>, u64)> = match txn.open_table(from) {
            Ok(t) => t
                .iter()
                .unwrap()
                .map(|r| {
                    let (k, v) = r.unwrap();
                    (K::as_bytes(&k.value()).as_ref().to_vec(), v.value().0)
                })
                .collect(),
            Err(TableError::TableDoesNotExist(_)) => return,
            Err(e) => panic!("{e}"),
        };
        txn.delete_table(from).unwrap();
        let mut t = txn.open_table(to).unwrap();
        for (k, v) in rows {
            t.insert(K::from_bytes(&k), v).unwrap();
        }
    }
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    let [meta, runs, live, run_values, ends] = ROW_TABLES;
    rows::<&str>(&txn, meta);
    rows::<(&str, u64)>(&txn, runs);
    rows::<u64>(&txn, live);
    rows::<(&str, u64, u64)>(&txn, run_values);
    rows::<u64>(&txn, ends);
    let keyspaces: Vec<String> = txn
        .list_tables()
        .unwrap()
        .map(|t| t.name().to_string())
        .filter(|n| n.starts_with("ks."))
        .collect();
    for name in keyspaces {
        let def = TableDefinition::<&[u8], &[u8]>::new(&name);
        let mut t = txn.open_table(def).unwrap();
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = t
            .iter()
            .unwrap()
            .map(|r| {
                let (k, v) = r.unwrap();
                let v = v.value();
                (k.value().to_vec(), v[..v.len() - 4].to_vec())
            })
            .collect();
        for (k, v) in pairs {
            t.insert(&k[..], &v[..]).unwrap();
        }
    }
    txn.commit().unwrap();
}

/// The index at `path` keeps the layout before checksums: no checked table, and `key`'s
/// value in `ks.tree` as written.
fn assert_old_layout(path: &Path, key: &[u8], value: &[u8]) {
    let names = table_names(path);
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("journal.") && n.ends_with(".crc")),
        "{names:?}"
    );
    assert!(names.iter().any(|n| n == "journal.meta"), "{names:?}");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let t = txn
        .open_table(TableDefinition::<&[u8], &[u8]>::new("ks.tree"))
        .unwrap();
    assert_eq!(t.get(key).unwrap().unwrap().value(), value);
}

#[test]
fn an_index_of_the_layout_before_checksums_opens_writes_and_syncs_as_before() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    build(&dir, 40);
    let want = read_all(&open(&dir).unwrap()).unwrap();
    write_the_old_way(&dir.join(INDEX_FILE));
    assert_old_layout(&dir.join(INDEX_FILE), &tree_key(3), &tree_value(3));
    {
        let engine = open(&dir).unwrap();
        assert_eq!(read_all(&engine).unwrap(), want);
        let usage = engine.usage().unwrap();
        assert_eq!(usage.keyspaces["tree"].entries, 40);
        // Writes over the old values (a separating keyspace's replaced pointers free their
        // live bytes), new keys, a checkpoint.
        write(&engine, 20, 60);
        engine.checkpoint().unwrap();
        assert_eq!(read_all(&engine).unwrap().len(), 60 * 4);
    }
    assert_old_layout(&dir.join(INDEX_FILE), &tree_key(59), &tree_value(59));
    let engine = open(&dir).unwrap();
    let all = read_all(&engine).unwrap();
    assert_eq!(all.len(), 60 * 4);
    let sep = engine.keyspace("sep").unwrap();
    assert_eq!(sep.get(b"sep large 0055").unwrap(), Some(large(55)));
}

fn spec() -> ChainSpec {
    ChainSpec {
        validator_change_every: 3,
        params_change_every: 7,
        empty_every: 5,
        ..ChainSpec::new(0x1c, Profile::Light)
    }
}

fn open_node(path: &Path) -> Node<DemoChain> {
    let options = HomeOptions::default()
        .with_engine(HomeEngine::Journal)
        .with_journal(JournalOptions::default().with_segment_bytes(64 * 1024));
    let home = Home::open_with(path, options).unwrap();
    let (node, _) = Node::open_home(
        home,
        |app_db: Arc<dyn Db>| Ok(Box::new(KvApp::open(Arc::new(HoldingDb::new(app_db)))?)),
        spec().chain(),
        Box::new(NoEvents),
    )
    .unwrap();
    node
}

/// Syncs the home at `path` to `height` (two consensus blocks, then block sync in windows
/// of 4) and stops it; returns the state's text.
fn sync_home(path: &Path, height: u64) -> String {
    let mut node = open_node(path);
    for _ in 0..2 {
        let (b, p, c) = spec().next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
    let policy = FlushPolicy::default()
        .with_window_blocks_max(4)
        .with_interval(Duration::from_secs(3600));
    node.start_block_sync(policy, Instant::now()).unwrap();
    while node.height() < height {
        let (b, p, c) = spec().next_block(node.state());
        node.sync_block(&b, &p, &c, Instant::now()).unwrap();
    }
    let state = format!("{} {:?}", node.height(), node.state());
    node.stop(Instant::now()).unwrap();
    state
}

#[test]
fn a_home_of_the_layout_before_checksums_syncs_to_the_same_state() {
    let tmp = tempfile::tempdir().unwrap();
    let (old, new) = (tmp.path().join("old"), tmp.path().join("new"));
    sync_home(&old, 20);
    sync_home(&new, 20);
    let index = old.join(JOURNAL_DIR).join(INDEX_FILE);
    write_the_old_way(&index);
    let names = table_names(&index);
    assert!(names.iter().any(|n| n == "journal.meta"), "{names:?}");
    assert_eq!(sync_home(&old, 45), sync_home(&new, 45));
    let names = table_names(&index);
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("journal.") && n.ends_with(".crc")),
        "the old home keeps its layout: {names:?}"
    );
}
