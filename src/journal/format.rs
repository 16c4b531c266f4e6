//! The journal's names on disk: its files (segments, the spare, the index, the runs'
//! directories) and the index's own tables and keys, and the tagged value pointer a
//! separating keyspace stores (ADR 0008, 0013, 0014, 0016). The unit's framing is
//! `unit.rs`'s, a run file's `run.rs`'s.
//!
//! The index's own tables exist in two layouts ([`RowTable`]; `index.rs` decides which an
//! index has): an index created before its rows carried a checksum keeps plain `u64`
//! values; one created since keeps each `u64` with the crc32 of its table, key and value
//! ([`row_crc`]), in tables named with `.crc`.
//!
//! Invariant: every name and byte layout here is part of the on-disk format: changed only
//! with the format's version (or, as the checked layout, with a layout an index records at
//! its creation).
//! Invariant: no I/O; imports only the unit format's integer readers and redb's table
//! definitions.

use std::path::{Path, PathBuf};

use redb::{Key, TableDefinition};

use super::unit;
use crate::error::CorruptReason;

/// The index's file name in the journal directory.
pub const INDEX_FILE: &str = "index.redb";
/// The spare segment's file name: a segment's worth of zeros, written and synced ahead of
/// time, renamed in at the next roll (ADR 0008, "Prepared segments").
pub const SPARE_SEGMENT_FILE: &str = "spare.segment";
/// The journal's subdirectory holding one directory of run files per keyspace indexed by
/// runs (ADR 0014): `runs/<keyspace>/<id>.run`.
pub const RUNS_DIR: &str = "runs";

/// The file name of segment number `index`: 20 decimal digits and `.seg`.
pub fn segment_file_name(index: u64) -> String {
    format!("{index:020}.seg")
}

/// The segment number a file name in the journal directory names, if it names one.
pub(super) fn parse_segment_file_name(name: &std::ffi::OsStr) -> Option<u64> {
    let digits = name.to_str()?.strip_suffix(".seg")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The run id a file name in a keyspace's runs directory names, if it names one.
pub(super) fn parse_run_file_name(name: &std::ffi::OsStr) -> Option<u64> {
    let digits = name.to_str()?.strip_suffix(".run")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The directory of `keyspace`'s run files.
pub(super) fn runs_dir(dir: &Path, keyspace: &str) -> PathBuf {
    dir.join(RUNS_DIR).join(keyspace)
}

/// The value of a row in a checked table: the `u64`, then [`row_crc`] of it (redb stores
/// the pair as 12 bytes, both little-endian).
pub(super) type CheckedRow = (u64, u32);

/// One of the index's own tables (`u64` values) in both layouts: as an index created before
/// rows carried a checksum keeps it (`unchecked`: the plain value), and as one created
/// since keeps it (`checked`: the value with its [`row_crc`]).
#[derive(Clone, Copy)]
pub(super) struct RowTable<K: Key + 'static> {
    pub(super) unchecked: TableDefinition<'static, K, u64>,
    pub(super) checked: TableDefinition<'static, K, CheckedRow>,
    pub(super) unchecked_name: &'static str,
    /// The checked table's name (covered by its rows' crc32).
    pub(super) checked_name: &'static str,
}

impl<K: Key + 'static> RowTable<K> {
    const fn new(unchecked: &'static str, checked: &'static str) -> Self {
        RowTable {
            unchecked: TableDefinition::new(unchecked),
            checked: TableDefinition::new(checked),
            unchecked_name: unchecked,
            checked_name: checked,
        }
    }
}

/// A key type of the index's row tables: its bytes as the row's crc32 covers them, and its
/// text in an error.
pub(super) trait RowKey: Key + 'static {
    /// Feeds the key to `h`: a string as its length (u32 LE) and its UTF-8 bytes, an
    /// integer as 8 bytes LE, a tuple as its fields in order.
    fn hash_key(key: &Self::SelfType<'_>, h: &mut crc32fast::Hasher);
    /// The key as an error names it.
    fn describe(key: &Self::SelfType<'_>) -> String;
}

fn hash_str(s: &str, h: &mut crc32fast::Hasher) {
    h.update(&(s.len() as u32).to_le_bytes());
    h.update(s.as_bytes());
}

impl RowKey for &'static str {
    fn hash_key(key: &&str, h: &mut crc32fast::Hasher) {
        hash_str(key, h);
    }
    fn describe(key: &&str) -> String {
        key.to_string()
    }
}

impl RowKey for u64 {
    fn hash_key(key: &u64, h: &mut crc32fast::Hasher) {
        h.update(&key.to_le_bytes());
    }
    fn describe(key: &u64) -> String {
        key.to_string()
    }
}

impl RowKey for (&'static str, u64) {
    fn hash_key(key: &(&str, u64), h: &mut crc32fast::Hasher) {
        hash_str(key.0, h);
        h.update(&key.1.to_le_bytes());
    }
    fn describe(key: &(&str, u64)) -> String {
        format!("({}, {})", key.0, key.1)
    }
}

impl RowKey for (&'static str, u64, u64) {
    fn hash_key(key: &(&str, u64, u64), h: &mut crc32fast::Hasher) {
        hash_str(key.0, h);
        h.update(&key.1.to_le_bytes());
        h.update(&key.2.to_le_bytes());
    }
    fn describe(key: &(&str, u64, u64)) -> String {
        format!("({}, {}, {})", key.0, key.1, key.2)
    }
}

/// The crc32 a checked row stores beside its value: over the table's name (its length u32
/// LE and its bytes), the key ([`RowKey::hash_key`]) and the value (u64 LE). The table's
/// name is in it so that a row is valid in its own table only.
pub(super) fn row_crc<K: RowKey>(table: &str, key: &K::SelfType<'_>, value: u64) -> u32 {
    let mut h = crc32fast::Hasher::new();
    hash_str(table, &mut h);
    K::hash_key(key, &mut h);
    h.update(&value.to_le_bytes());
    h.finalize()
}

/// The index's own values: `applied_seq`, `first_segment`, where the last checkpointed unit
/// ends, and the keyspaces' kinds (`separate.`, `index.` prefixes).
pub(super) const META: RowTable<&str> = RowTable::new("journal.meta", "journal.meta.crc");
pub(super) const META_APPLIED_SEQ: &str = "applied_seq";
pub(super) const META_FIRST_SEGMENT: &str = "first_segment";
/// Where the last checkpointed unit ends: its segment and the offset after it. Recovery
/// refuses an invalid unit before that point (it was durable: it was applied) rather than
/// take it for a torn tail — the values the index points at may lie there (ADR 0013).
pub(super) const META_APPLIED_END_SEGMENT: &str = "applied_end_segment";
pub(super) const META_APPLIED_END_OFFSET: &str = "applied_end_offset";
/// The rows every checked index holds from its creation (written then as 0): a checked
/// index missing one is damaged, where an unchecked one reads a missing row as 0.
pub(super) const META_BASE_ROWS: [&str; 4] = [
    META_APPLIED_SEQ,
    META_FIRST_SEGMENT,
    META_APPLIED_END_SEGMENT,
    META_APPLIED_END_OFFSET,
];
/// Prefix of a keyspace's table name in the index.
pub(super) const KEYSPACE_TABLE_PREFIX: &str = "ks.";
/// Meta key prefix: `index.<keyspace>` → how the keyspace is indexed, present for the
/// keyspaces indexed by runs only ([`INDEX_KIND_RUNS`]; ADR 0014). Written in the durable
/// commit that creates the keyspace, as `separate.` is.
pub(super) const META_INDEX_PREFIX: &str = "index.";
/// `index.<keyspace>`'s value for a keyspace indexed by sorted runs.
pub(super) const INDEX_KIND_RUNS: u64 = 1;
/// Meta key prefix: `separate.<keyspace>` → the smallest value that keyspace keeps in the
/// journal (ADR 0013). Present exactly for the keyspaces whose index values are tagged.
pub(super) const META_SEPARATE_PREFIX: &str = "separate.";
/// The runs manifest: (keyspace, run id) → level (0 for every run; ADR 0014). A row is
/// written by the apply step that writes its run (`Durability::None`), so it becomes
/// durable with the next checkpoint only, which syncs the run first.
pub(super) const RUNS: RowTable<(&str, u64)> = RowTable::new("journal.runs", "journal.runs.crc");
/// The level of a run written by an apply step or a merge (one level: the manifest's
/// value is kept for a leveled policy).
pub(super) const RUN_LEVEL: u64 = 0;
/// Segment → bytes of values in it that the index points at (entries only while > 0): a
/// separating tree keyspace's entries, and every listed run of a separating runs keyspace
/// (a run's pointers count until the run leaves the manifest, shadowed or not).
pub(super) const LIVE: RowTable<u64> = RowTable::new("journal.live", "journal.live.crc");
/// A separating runs keyspace's pointers per run (ADR 0016): (keyspace, run id, segment) →
/// bytes the run's pointers lead to in that segment (rows only while > 0). Written in the
/// transaction that lists the run (an apply step's, or a merge's install, which removes
/// its inputs' rows), with the same change to [`LIVE`]; so [`LIVE`] is always the sum of
/// the tree's pointers and of these rows.
pub(super) const RUN_VALUES: RowTable<(&str, u64, u64)> =
    RowTable::new("journal.run_values", "journal.run_values.crc");

/// Segment → the offset where the last applied unit in it ends (bytes). Rows are written by
/// apply steps with the applied seq, and removed by the checkpoint that retires their
/// segment. A journal written before the table has none: the applied end's segment is
/// checked alone (`recovery.rs`).
pub(super) const SEGMENT_ENDS: RowTable<u64> =
    RowTable::new("journal.segment_ends", "journal.segment_ends.crc");

/// Every row table's (unchecked, checked) names, for the layout decision (`index.rs`).
pub(super) const ROW_TABLE_NAMES: [(&str, &str); 5] = [
    (META.unchecked_name, META.checked_name),
    (RUNS.unchecked_name, RUNS.checked_name),
    (LIVE.unchecked_name, LIVE.checked_name),
    (RUN_VALUES.unchecked_name, RUN_VALUES.checked_name),
    (SEGMENT_ENDS.unchecked_name, SEGMENT_ENDS.checked_name),
];

/// The name of `keyspace`'s table in the index.
pub(super) fn table_name(keyspace: &str) -> String {
    format!("{KEYSPACE_TABLE_PREFIX}{keyspace}")
}

/// Tag of an index value held inline (a separating keyspace's small value).
pub(super) const VALUE_INLINE: u8 = 0;
/// Tag of an index value that points into a segment.
const VALUE_IN_SEGMENT: u8 = 1;
/// Bytes of a pointer: tag, segment u64, offset u64, length u32, crc32 u32.
pub(super) const POINTER_BYTES: usize = 1 + 8 + 8 + 4 + 4;

/// Where a value the index points at lies in the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ValueAt {
    pub(super) segment: u64,
    pub(super) offset: u64,
    pub(super) len: u32,
    pub(super) crc: u32,
}

impl ValueAt {
    /// The tagged pointer, [`POINTER_BYTES`] long.
    pub(super) fn encoded(&self) -> [u8; POINTER_BYTES] {
        let mut out = [0; POINTER_BYTES];
        out[0] = VALUE_IN_SEGMENT;
        out[1..9].copy_from_slice(&self.segment.to_le_bytes());
        out[9..17].copy_from_slice(&self.offset.to_le_bytes());
        out[17..21].copy_from_slice(&self.len.to_le_bytes());
        out[21..25].copy_from_slice(&self.crc.to_le_bytes());
        out
    }

    /// The pointer in a tagged index value; `Ok(None)` for an inline value.
    pub(super) fn decode(stored: &[u8]) -> std::result::Result<Option<ValueAt>, CorruptReason> {
        match stored.first() {
            Some(&VALUE_INLINE) => Ok(None),
            Some(&VALUE_IN_SEGMENT) if stored.len() == POINTER_BYTES => Ok(Some(ValueAt {
                segment: unit::le_u64(stored, 1),
                offset: unit::le_u64(stored, 9),
                len: unit::le_u32(stored, 17),
                crc: unit::le_u32(stored, 21),
            })),
            Some(&VALUE_IN_SEGMENT) => Err(CorruptReason::Invalid("value pointer length")),
            Some(_) => Err(CorruptReason::Invalid("index value tag")),
            None => Err(CorruptReason::Invalid("empty tagged index value")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::run::run_file_name;

    /// The names the engine gives its segments and runs parse back to their numbers; any
    /// other name — a digit short or over, a non-digit, another suffix — names none of
    /// them, so recovery neither reads nor deletes a file it did not write (an open deletes
    /// the runs and old segments it does not list).
    #[test]
    fn only_the_engines_own_file_names_parse_as_segments_and_runs() {
        use std::ffi::OsStr;
        for n in [0, 7, u64::MAX] {
            assert_eq!(
                parse_segment_file_name(OsStr::new(&segment_file_name(n))),
                Some(n)
            );
            assert_eq!(parse_run_file_name(OsStr::new(&run_file_name(n))), Some(n));
        }
        for (stem, why) in [
            ("7", "one digit"),
            ("0000000000000000007", "19 digits"),
            ("000000000000000000007", "21 digits"),
            ("0000000000000000000x", "20 characters, not all digits"),
            ("0000000000000000000 ", "20 characters, a space"),
            ("99999999999999999999", "20 digits past u64::MAX"),
        ] {
            let seg = format!("{stem}.seg");
            let run = format!("{stem}.run");
            assert_eq!(parse_segment_file_name(OsStr::new(&seg)), None, "{why}");
            assert_eq!(parse_run_file_name(OsStr::new(&run)), None, "{why}");
        }
        let name = segment_file_name(3);
        assert_eq!(
            parse_run_file_name(OsStr::new(&name)),
            None,
            "a segment is no run"
        );
        let name = run_file_name(3);
        assert_eq!(
            parse_segment_file_name(OsStr::new(&name)),
            None,
            "a run is no segment"
        );
    }

    #[test]
    fn segment_names_sort_in_index_order() {
        assert_eq!(segment_file_name(7), "00000000000000000007.seg");
        assert!(segment_file_name(9) < segment_file_name(10));
    }
}
