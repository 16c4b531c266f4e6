//! The index's layout ([`IndexLayout`]), decided once at open from its tables
//! ([`classify`]), and the checked forms of what the engine keeps in it: a keyspace's
//! pairs in `ks.<name>` (each value with its pair crc32, `db::pair_crc`'s, as a `RedbDb`
//! keeps its pairs) and the rows of the engine's own tables ([`Rows`]: each `u64` with its
//! [`row_crc`]). redb checks its page checksums only when it repairs a file: without these
//! a bit flipped in the index reads back as a wrong value, a missing key, or a wrong
//! recovery decision.
//!
//! Invariant: an index keeps the layout it was created with. One created before pairs and
//! rows carried a checksum (`journal.meta`) is read and written as it was; one created since
//! (`journal.meta.crc`, with its base rows) is checked. An index with no table of the
//! journal's is new and takes the checked layout; tables of both layouts, or journal tables
//! without a meta table, are refused as `Corrupt`.
//! Invariant: in the checked layout no stored pair or row is returned or acted on before
//! its crc32 is checked, and a point lookup that misses checks the pairs or rows beside
//! where its key would sort; a mismatch is `Error::Corrupt` naming `index.redb`, the
//! keyspace or table, and the key.
//! Invariant: no lock and no state; reads and writes only through the transaction or table
//! it is given, under the caller's guard. A crc32 is written in the same insert as its
//! value (no crash point of its own).

use std::fmt;
use std::marker::PhantomData;
use std::ops::RangeBounds;

use redb::{
    Database, ReadTransaction, ReadableDatabase, ReadableTable, StorageError, TableError,
    TableHandle, WriteTransaction,
};

use super::format::{
    CheckedRow, INDEX_FILE, KEYSPACE_TABLE_PREFIX, META, META_BASE_ROWS, ROW_TABLE_NAMES, RowKey,
    RowTable, row_crc,
};
use super::state::ENGINE_NAME;
use crate::db::{PairTable, check_neighbours, checked_value, insert_checked};
use crate::error::{CorruptReason, Error, Result};

/// How an index stores its pairs and rows; decided at open ([`classify`]) and carried by
/// the engine (`Core::layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IndexLayout {
    /// An index created before pairs and rows carried a checksum: values as written.
    Unchecked,
    /// Each `ks.<name>` value followed by its pair crc32; each row's `u64` with its
    /// [`row_crc`], in the row tables named with `.crc`.
    Checked,
}

/// What an index's tables say of its layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LayoutFound {
    /// The layout its meta table records.
    Recorded(IndexLayout),
    /// No table of the journal's: a new index (or one whose first commit a crash came
    /// before). It takes the checked layout; the open writes its meta table
    /// ([`create_checked_layout`]).
    New,
}

impl LayoutFound {
    /// The layout the engine uses.
    pub(super) fn layout(self) -> IndexLayout {
        match self {
            LayoutFound::Recorded(layout) => layout,
            LayoutFound::New => IndexLayout::Checked,
        }
    }
}

/// The layout the index's table names give, or why they are damaged: the meta table of one
/// layout and no row table of the other; none of the journal's tables at all is a new
/// index. Other names (the `kv.crc` or `kv` table the index's creation leaves) are ignored.
pub(super) fn classify<'n>(
    names: impl IntoIterator<Item = &'n str>,
) -> std::result::Result<LayoutFound, &'static str> {
    let (mut meta, mut meta_checked, mut rows, mut rows_checked, mut keyspaces) =
        (false, false, false, false, false);
    for name in names {
        if name == META.unchecked_name {
            meta = true;
        } else if name == META.checked_name {
            meta_checked = true;
        } else if ROW_TABLE_NAMES.iter().any(|(u, _)| *u == name) {
            rows = true;
        } else if ROW_TABLE_NAMES.iter().any(|(_, c)| *c == name) {
            rows_checked = true;
        } else if name.starts_with(KEYSPACE_TABLE_PREFIX) {
            keyspaces = true;
        }
    }
    match (meta, meta_checked) {
        (true, true) => Err("the index holds the meta tables of both layouts"),
        (true, false) if rows_checked => {
            Err("the index holds checked row tables beside the unchecked meta table")
        }
        (true, false) => Ok(LayoutFound::Recorded(IndexLayout::Unchecked)),
        (false, true) if rows => {
            Err("the index holds unchecked row tables beside the checked meta table")
        }
        (false, true) => Ok(LayoutFound::Recorded(IndexLayout::Checked)),
        (false, false) if rows || rows_checked || keyspaces => {
            Err("the index holds journal tables but no meta table")
        }
        (false, false) => Ok(LayoutFound::New),
    }
}

/// The layout of the index `db` (reads only; run under the index's guard).
pub(super) fn read_layout(db: &Database) -> Result<LayoutFound> {
    let txn = db
        .begin_read()
        .map_err(|e| Error::storage(ENGINE_NAME, "begin read", e))?;
    let names: Vec<String> = txn
        .list_tables()
        .map_err(|e| Error::storage(ENGINE_NAME, "list tables", e))?
        .map(|t| t.name().to_string())
        .collect();
    classify(names.iter().map(String::as_str)).map_err(|why| Error::Corrupt {
        db: format!("{ENGINE_NAME} {INDEX_FILE}"),
        key: Vec::new(),
        height: None,
        reason: CorruptReason::Invalid(why),
    })
}

/// Records the checked layout in a new index: its meta table with the base rows, each 0
/// (what an index without them reads).
pub(super) fn create_checked_layout(
    txn: &WriteTransaction,
) -> std::result::Result<(), redb::Error> {
    let mut meta = META.open_mut(txn, IndexLayout::Checked)?;
    for key in META_BASE_ROWS {
        meta.insert(&key, 0)?;
    }
    Ok(())
}

/// A corrupt row of table `table`: `Error::Corrupt` naming `index.redb`, the table and the
/// row's key.
fn corrupt_row<K: RowKey>(table: &str, key: &K::SelfType<'_>, reason: CorruptReason) -> Error {
    Error::Corrupt {
        db: format!("{ENGINE_NAME} {INDEX_FILE}, table {table}"),
        key: K::describe(key).into_bytes(),
        height: None,
        reason,
    }
}

/// A row table open in an index's layout ([`RowTable::open_mut`], [`RowTable::open_read`]):
/// its values read checked ([`Rows::get`], [`Rows::rows_in`]) and written with their crc32.
pub(super) struct Rows<K, U, C> {
    of: RowsOf<U, C>,
    /// The checked table's name (its rows' crc32 covers it).
    table: &'static str,
    key: PhantomData<fn() -> K>,
}

enum RowsOf<U, C> {
    Unchecked(U),
    Checked(C),
}

/// A row table open for writing.
pub(super) type RowsMut<'t, K> = Rows<K, redb::Table<'t, K, u64>, redb::Table<'t, K, CheckedRow>>;
/// A row table open for reading.
pub(super) type RowsRead<K> =
    Rows<K, redb::ReadOnlyTable<K, u64>, redb::ReadOnlyTable<K, CheckedRow>>;

impl<K: RowKey> RowTable<K> {
    /// The table in `layout`, open in the write transaction `txn` (created if missing).
    pub(super) fn open_mut<'t>(
        &self,
        txn: &'t WriteTransaction,
        layout: IndexLayout,
    ) -> std::result::Result<RowsMut<'t, K>, TableError> {
        let of = match layout {
            IndexLayout::Unchecked => RowsOf::Unchecked(txn.open_table(self.unchecked)?),
            IndexLayout::Checked => RowsOf::Checked(txn.open_table(self.checked)?),
        };
        Ok(Rows {
            of,
            table: self.checked_name,
            key: PhantomData,
        })
    }

    /// The table in `layout`, open in the read transaction `txn`; `None` when the index
    /// has none.
    pub(super) fn open_read(
        &self,
        txn: &ReadTransaction,
        layout: IndexLayout,
    ) -> std::result::Result<Option<RowsRead<K>>, TableError> {
        let of = match layout {
            IndexLayout::Unchecked => txn.open_table(self.unchecked).map(RowsOf::Unchecked),
            IndexLayout::Checked => txn.open_table(self.checked).map(RowsOf::Checked),
        };
        match of {
            Ok(of) => Ok(Some(Rows {
                of,
                table: self.checked_name,
                key: PhantomData,
            })),
            Err(TableError::TableDoesNotExist(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl<K, U, C> Rows<K, U, C>
where
    K: RowKey,
    U: ReadableTable<K, u64>,
    C: ReadableTable<K, CheckedRow>,
{
    /// The value at `key`, checked. In the checked layout a miss checks the rows beside
    /// where `key` would sort (a row whose key a flipped bit moved is reported, not read
    /// as absent). redb's errors are storage errors naming `op`.
    pub(super) fn get<'k>(
        &self,
        key: &'k K::SelfType<'k>,
        op: &'static str,
    ) -> Result<Option<u64>> {
        let storage = |e| Error::storage(ENGINE_NAME, op, e);
        match &self.of {
            RowsOf::Unchecked(t) => Ok(t.get(key).map_err(storage)?.map(|g| g.value())),
            RowsOf::Checked(t) => match t.get(key).map_err(storage)? {
                Some(g) => self.checked(key, g.value()).map(Some),
                None => {
                    check_neighbours(t, key, |k, row| self.checked(k, *row).map(drop), storage)?;
                    Ok(None)
                }
            },
        }
    }

    /// The rows in `range`, in key order, each checked: what `key_of` makes of its key
    /// and its value, up to the first row `key_of` turns down (`None`).
    pub(super) fn rows_in<'a, KR, T>(
        &self,
        range: impl RangeBounds<KR> + 'a,
        op: &'static str,
        key_of: impl Fn(K::SelfType<'_>) -> Option<T>,
    ) -> Result<Vec<(T, u64)>>
    where
        KR: std::borrow::Borrow<K::SelfType<'a>> + 'a,
    {
        let storage = |e| Error::storage(ENGINE_NAME, op, e);
        let mut out = Vec::new();
        match &self.of {
            RowsOf::Unchecked(t) => {
                for item in t.range(range).map_err(storage)? {
                    let (k, v) = item.map_err(storage)?;
                    let Some(key) = key_of(k.value()) else { break };
                    out.push((key, v.value()));
                }
            }
            RowsOf::Checked(t) => {
                for item in t.range(range).map_err(storage)? {
                    let (k, v) = item.map_err(storage)?;
                    let value = self.checked(&k.value(), v.value())?;
                    let Some(key) = key_of(k.value()) else { break };
                    out.push((key, value));
                }
            }
        }
        Ok(out)
    }

    /// Every row, in key order, each checked (see [`Rows::rows_in`]).
    pub(super) fn all<T>(
        &self,
        op: &'static str,
        key_of: impl Fn(K::SelfType<'_>) -> T,
    ) -> Result<Vec<(T, u64)>> {
        self.rows_in::<K::SelfType<'_>, T>(.., op, |k| Some(key_of(k)))
    }

    /// A checked row's value, its crc32 checked.
    fn checked(&self, key: &K::SelfType<'_>, (value, stored): CheckedRow) -> Result<u64> {
        let computed = row_crc::<K>(self.table, key, value);
        if stored != computed {
            return Err(corrupt_row::<K>(
                self.table,
                key,
                CorruptReason::Checksum { stored, computed },
            ));
        }
        Ok(value)
    }
}

impl<K: RowKey> RowsMut<'_, K> {
    /// Sets `key` to `value` (with its crc32 in the checked layout).
    pub(super) fn insert<'k>(
        &mut self,
        key: &'k K::SelfType<'k>,
        value: u64,
    ) -> std::result::Result<(), StorageError> {
        match &mut self.of {
            RowsOf::Unchecked(t) => t.insert(key, value).map(drop),
            RowsOf::Checked(t) => {
                let crc = row_crc::<K>(self.table, key, value);
                t.insert(key, (value, crc)).map(drop)
            }
        }
    }

    /// Removes `key` (an absent key is fine).
    pub(super) fn remove<'k>(
        &mut self,
        key: &'k K::SelfType<'k>,
    ) -> std::result::Result<(), StorageError> {
        match &mut self.of {
            RowsOf::Unchecked(t) => t.remove(key).map(drop),
            RowsOf::Checked(t) => t.remove(key).map(drop),
        }
    }
}

/// Keyspace `name`'s pairs in the index, as errors name them: `journal index.redb, keyspace
/// <name>`.
#[derive(Debug, Clone, Copy)]
pub(super) struct KeyspaceInIndex<'a>(pub(super) &'a str);

impl fmt::Display for KeyspaceInIndex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{ENGINE_NAME} {INDEX_FILE}, keyspace {}", self.0)
    }
}

impl IndexLayout {
    /// The value of the pair `key` → `stored` read from keyspace `keyspace`'s table: its
    /// crc32 checked and cut off (checked layout), or as stored.
    pub(super) fn value_of<'v>(
        self,
        keyspace: &str,
        key: &[u8],
        stored: &'v [u8],
    ) -> Result<&'v [u8]> {
        match self {
            IndexLayout::Unchecked => Ok(stored),
            IndexLayout::Checked => checked_value(&KeyspaceInIndex(keyspace), key, stored),
        }
    }

    /// After a lookup of `key` in keyspace `keyspace`'s table missed: in the checked layout,
    /// the pairs beside where it would sort are checked (`db::pair_crc::check_neighbours`).
    pub(super) fn check_miss<T: ReadableTable<&'static [u8], &'static [u8]>>(
        self,
        keyspace: &str,
        table: &T,
        key: &[u8],
        storage: impl Fn(StorageError) -> Error,
    ) -> Result<()> {
        match self {
            IndexLayout::Unchecked => Ok(()),
            IndexLayout::Checked => check_neighbours(
                table,
                &key,
                |k, v| self.value_of(keyspace, k, v).map(drop),
                storage,
            ),
        }
    }

    /// Stores `key` → `value` in a keyspace's table (with its crc32 in the checked layout).
    pub(super) fn put(
        self,
        table: &mut PairTable<'_>,
        key: &[u8],
        value: &[u8],
    ) -> std::result::Result<(), StorageError> {
        match self {
            IndexLayout::Unchecked => table.insert(key, value).map(drop),
            IndexLayout::Checked => insert_checked(table, key, value),
        }
    }
}

#[cfg(test)]
mod tests {
    use redb::backends::InMemoryBackend;
    use redb::{ReadableDatabase, TableDefinition};

    use super::*;
    use crate::journal::format::{LIVE, META_APPLIED_SEQ};

    fn memory_db() -> Database {
        Database::builder()
            .create_with_backend(InMemoryBackend::new())
            .unwrap()
    }

    fn write(db: &Database, f: impl FnOnce(&WriteTransaction)) {
        let txn = db.begin_write().unwrap();
        f(&txn);
        txn.commit().unwrap();
    }

    fn corrupt_parts(e: Error) -> (String, Vec<u8>, CorruptReason) {
        match e {
            Error::Corrupt {
                db, key, reason, ..
            } => (db, key, reason),
            other => panic!("not a Corrupt error: {other:?}"),
        }
    }

    /// Every set of the index's kinds of table names maps to exactly one layout or one
    /// refusal: the meta table of one layout with no row table of the other is that layout;
    /// no journal table is a new index; anything else is damaged. Other names (the table
    /// the index's creation leaves) change nothing.
    #[test]
    fn every_set_of_tables_is_one_layout_or_refused() {
        for (rows, rows_checked) in &ROW_TABLE_NAMES[1..] {
            let names = [
                META.unchecked_name,
                META.checked_name,
                *rows,
                *rows_checked,
                "ks.app",
                "kv.crc",
            ];
            let mut counts = [0usize; 4];
            for set in 0u32..1 << names.len() {
                let has = |i: usize| set & (1 << i) != 0;
                let present = (0..names.len()).filter(|&i| has(i)).map(|i| names[i]);
                let got = classify(present);
                let (meta, meta_c, row, row_c, ks) = (has(0), has(1), has(2), has(3), has(4));
                let want = if meta && !meta_c && !row_c {
                    Some(LayoutFound::Recorded(IndexLayout::Unchecked))
                } else if meta_c && !meta && !row {
                    Some(LayoutFound::Recorded(IndexLayout::Checked))
                } else if !(meta || meta_c || row || row_c || ks) {
                    Some(LayoutFound::New)
                } else {
                    None
                };
                match (got, want) {
                    (Ok(g), Some(w)) => assert_eq!(g, w, "set {set:06b}"),
                    (Err(_), None) => {}
                    (got, want) => panic!("set {set:06b}: got {got:?}, want {want:?}"),
                }
                counts[match want {
                    Some(LayoutFound::New) => 0,
                    Some(LayoutFound::Recorded(IndexLayout::Unchecked)) => 1,
                    Some(LayoutFound::Recorded(IndexLayout::Checked)) => 2,
                    None => 3,
                }] += 1;
            }
            // New: nothing or the creation's table; each layout: its meta table with any
            // of its own row table, a keyspace table, the creation's table.
            assert_eq!(counts, [2, 8, 8, 46], "{rows}");
        }
    }

    /// A new index takes the checked layout and records it; an index of either layout is
    /// read back as that layout.
    #[test]
    fn a_new_index_records_the_checked_layout_and_each_layout_reads_back() {
        let db = memory_db();
        assert_eq!(read_layout(&db).unwrap(), LayoutFound::New);
        write(&db, |txn| create_checked_layout(txn).unwrap());
        assert_eq!(
            read_layout(&db).unwrap(),
            LayoutFound::Recorded(IndexLayout::Checked)
        );
        let meta = db.begin_read().unwrap();
        let rows = META
            .open_read(&meta, IndexLayout::Checked)
            .unwrap()
            .unwrap();
        assert_eq!(rows.all("read", |k| k.to_string()).unwrap().len(), 4);
        let old = memory_db();
        write(&old, |txn| {
            let mut m = META.open_mut(txn, IndexLayout::Unchecked).unwrap();
            m.insert(&META_APPLIED_SEQ, 7).unwrap();
        });
        assert_eq!(
            read_layout(&old).unwrap(),
            LayoutFound::Recorded(IndexLayout::Unchecked)
        );
        write(&old, |txn| create_checked_layout(txn).unwrap());
        let e = read_layout(&old).unwrap_err();
        let (db_name, _, reason) = corrupt_parts(e);
        assert!(db_name.contains("index.redb"), "{db_name}");
        assert!(matches!(reason, CorruptReason::Invalid(_)), "{reason}");
    }

    /// A checked row reads back; one whose value (or crc32) changed is `Corrupt` naming
    /// `index.redb`, the table and the key, by a lookup and by a scan alike.
    #[test]
    fn a_changed_checked_row_is_corrupt_naming_the_table_and_key() {
        let db = memory_db();
        write(&db, |txn| {
            let mut live = LIVE.open_mut(txn, IndexLayout::Checked).unwrap();
            for (segment, bytes) in [(3, 30), (5, 50), (9, 90)] {
                live.insert(&segment, bytes).unwrap();
            }
        });
        let read = |db: &Database| {
            let txn = db.begin_read().unwrap();
            let rows = LIVE.open_read(&txn, IndexLayout::Checked).unwrap().unwrap();
            (rows.get(&5, "read live"), rows.all("read live", |s| s))
        };
        let (one, all) = read(&db);
        assert_eq!(one.unwrap(), Some(50));
        assert_eq!(all.unwrap(), vec![(3, 30), (5, 50), (9, 90)]);
        // The value flipped under its stored crc32.
        write(&db, |txn| {
            let mut raw = txn.open_table(LIVE.checked).unwrap();
            let crc = raw.get(5).unwrap().unwrap().value().1;
            raw.insert(5, (50 ^ 0x10, crc)).unwrap();
        });
        let (one, all) = read(&db);
        for e in [one.unwrap_err(), all.unwrap_err()] {
            let (db_name, key, reason) = corrupt_parts(e);
            assert_eq!(db_name, "journal index.redb, table journal.live.crc");
            assert_eq!(key, b"5");
            assert!(matches!(reason, CorruptReason::Checksum { .. }), "{reason}");
        }
    }

    /// A row whose key a flipped bit moved: the lookup of the original key misses, and the
    /// row beside it fails its crc32 — `Corrupt`, not absent.
    #[test]
    fn a_lookup_of_a_moved_rows_original_key_is_corrupt() {
        let db = memory_db();
        write(&db, |txn| {
            let mut m = META.open_mut(txn, IndexLayout::Checked).unwrap();
            m.insert(&"a_first", 1).unwrap();
            m.insert(&META_APPLIED_SEQ, 42).unwrap();
            m.insert(&"z_last", 2).unwrap();
        });
        write(&db, |txn| {
            let mut raw = txn.open_table(META.checked).unwrap();
            let row = raw.remove(META_APPLIED_SEQ).unwrap().unwrap().value();
            raw.insert("applied_sfq", row).unwrap();
        });
        let txn = db.begin_read().unwrap();
        let rows = META.open_read(&txn, IndexLayout::Checked).unwrap().unwrap();
        let (_, key, reason) = corrupt_parts(rows.get(&META_APPLIED_SEQ, "read").unwrap_err());
        assert_eq!(key, b"applied_sfq");
        assert!(matches!(reason, CorruptReason::Checksum { .. }), "{reason}");
        assert_eq!(rows.get(&"a_first", "read").unwrap(), Some(1));
    }

    /// The unchecked layout reads and writes plain `u64` values in the unchecked tables.
    #[test]
    fn an_unchecked_index_keeps_plain_rows() {
        let db = memory_db();
        write(&db, |txn| {
            let mut m = META.open_mut(txn, IndexLayout::Unchecked).unwrap();
            m.insert(&META_APPLIED_SEQ, 11).unwrap();
        });
        let txn = db.begin_read().unwrap();
        let raw = txn.open_table(META.unchecked).unwrap();
        assert_eq!(raw.get(META_APPLIED_SEQ).unwrap().unwrap().value(), 11);
        let rows = META
            .open_read(&txn, IndexLayout::Unchecked)
            .unwrap()
            .unwrap();
        assert_eq!(rows.get(&META_APPLIED_SEQ, "read").unwrap(), Some(11));
        assert_eq!(rows.get(&"missing", "read").unwrap(), None);
        assert!(
            META.open_read(&txn, IndexLayout::Checked)
                .unwrap()
                .is_none()
        );
    }

    /// A keyspace's pair: stored with its crc32 in the checked layout, as given in the
    /// unchecked one; a changed value, and a lookup that misses beside a moved key, are
    /// `Corrupt` naming the index, the keyspace and the key.
    #[test]
    fn a_keyspace_pair_is_checked_in_the_checked_layout_only() {
        let def: TableDefinition<&[u8], &[u8]> = TableDefinition::new("ks.k");
        for layout in [IndexLayout::Checked, IndexLayout::Unchecked] {
            let db = memory_db();
            write(&db, |txn| {
                let mut t = txn.open_table(def).unwrap();
                layout.put(&mut t, b"key", b"value").unwrap();
                layout.put(&mut t, b"other", b"v").unwrap();
            });
            let txn = db.begin_read().unwrap();
            let t = txn.open_table(def).unwrap();
            let stored = t.get(&b"key"[..]).unwrap().unwrap();
            assert_eq!(
                layout.value_of("k", b"key", stored.value()).unwrap(),
                b"value"
            );
            let storage = |e| Error::storage("k", "get", e);
            assert!(layout.check_miss("k", &t, b"absent", storage).is_ok());
            match layout {
                IndexLayout::Unchecked => assert_eq!(stored.value(), b"value"),
                IndexLayout::Checked => {
                    assert_eq!(stored.value().len(), 5 + 4);
                    let e = layout.value_of("k", b"kez", stored.value()).unwrap_err();
                    let (db_name, key, _) = corrupt_parts(e);
                    assert_eq!(db_name, "journal index.redb, keyspace k");
                    assert_eq!(key, b"kez");
                }
            }
        }
        // A pair moved to another key (a flipped bit): the lookup of the original misses
        // and the pair beside it fails.
        let layout = IndexLayout::Checked;
        let db = memory_db();
        write(&db, |txn| {
            let mut t = txn.open_table(def).unwrap();
            layout.put(&mut t, b"key", b"value").unwrap();
            let stored = t.remove(&b"key"[..]).unwrap().unwrap().value().to_vec();
            t.insert(&b"kez"[..], &stored[..]).unwrap();
        });
        let txn = db.begin_read().unwrap();
        let t = txn.open_table(def).unwrap();
        assert!(t.get(&b"key"[..]).unwrap().is_none());
        let e = layout
            .check_miss("k", &t, b"key", |e| Error::storage("k", "get", e))
            .unwrap_err();
        let (_, key, reason) = corrupt_parts(e);
        assert_eq!(key, b"kez");
        assert!(matches!(reason, CorruptReason::Checksum { .. }), "{reason}");
    }
}
