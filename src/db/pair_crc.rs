//! The pair checksum of a redb table of checked pairs: each value is stored followed by
//! [`PAIR_CRC_BYTES`] of crc32 over the key's length, the key and the value. One definition
//! for every such table: a [`RedbDb`](super::RedbDb)'s `kv.crc` and the journal index's
//! `ks.<name>` tables (docs/FORMAT.md §1 and §9).
//!
//! Why: redb verifies its page checksums only when it repairs a file or checks its
//! integrity; without this check a bit flipped inside a stored pair reads back flipped.
//!
//! Invariant: a stored pair is checked before any byte of it is returned; a mismatch is
//! `Error::Corrupt` naming the database and the key, never a value.
//! Invariant: a lookup that misses checks the pairs beside where the key would sort
//! ([`check_neighbours`]): a flipped key is reported, not read as absent.
//! Invariant: no I/O of its own and no state: it reads and writes through the table it is
//! given, under its caller's guard.

use std::fmt::Display;

use redb::{Key, ReadableTable, StorageError, Value};

use crate::error::{CorruptReason, Error, Result};

/// Bytes of the crc32 (LE) that follows each stored value.
pub(crate) const PAIR_CRC_BYTES: usize = 4;

/// A table of checked pairs, open for writing.
pub(crate) type PairTable<'txn> = redb::Table<'txn, &'static [u8], &'static [u8]>;

/// The crc32 of a pair: over the key's length (u32 LE), the key and the value, so a bit
/// moved between the key and the value changes it too.
pub(crate) fn pair_crc(key: &[u8], value: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&(key.len() as u32).to_le_bytes());
    h.update(key);
    h.update(value);
    h.finalize()
}

/// The value of the pair `key` → `stored` read from a table of checked pairs, its crc32
/// checked and cut off. Errors name `db` and `key`.
pub(crate) fn checked_value<'v>(
    db: &dyn Display,
    key: &[u8],
    stored: &'v [u8],
) -> Result<&'v [u8]> {
    let corrupt = |reason| Error::Corrupt {
        db: db.to_string(),
        key: key.to_vec(),
        height: None,
        reason,
    };
    let Some(split) = stored.len().checked_sub(PAIR_CRC_BYTES) else {
        return Err(corrupt(CorruptReason::Truncated {
            needed: PAIR_CRC_BYTES - stored.len(),
        }));
    };
    let (value, crc) = stored.split_at(split);
    let stored_crc = u32::from_le_bytes(crc.try_into().expect("PAIR_CRC_BYTES long"));
    let computed = pair_crc(key, value);
    if stored_crc != computed {
        return Err(corrupt(CorruptReason::Checksum {
            stored: stored_crc,
            computed,
        }));
    }
    Ok(value)
}

/// Stores `key` → `value` with its crc32, written in place (no copy of the value).
pub(crate) fn insert_checked(
    table: &mut PairTable<'_>,
    key: &[u8],
    value: &[u8],
) -> std::result::Result<(), StorageError> {
    let mut slot = table.insert_reserve(key, value.len() + PAIR_CRC_BYTES)?;
    let out = slot.as_mut();
    out[..value.len()].copy_from_slice(value);
    out[value.len()..].copy_from_slice(&pair_crc(key, value).to_le_bytes());
    Ok(())
}

/// Appends the crc32 of the pair `key` → `stored` (the value so far) to `stored`: the
/// value as a table of checked pairs stores it, for an insert that needs the old value
/// back (`Table::insert`).
pub(crate) fn append_pair_crc(key: &[u8], stored: &mut Vec<u8>) {
    let crc = pair_crc(key, stored);
    stored.extend_from_slice(&crc.to_le_bytes());
}

/// On a miss of `key`, checks the pairs on either side of where it would be with `check`
/// (a table of checked pairs, or the journal index's checked rows). A bit flipped inside a
/// stored key leaves its pair in its slot of the leaf page under another key; a lookup of
/// the original key searches to that slot and misses. The pair there is the first at or
/// after `key` or the last before it, and its crc32 (which covers the key) then fails: the
/// miss is reported as `Error::Corrupt` instead of read as absent. Costs two range seeks,
/// on misses only; `storage` names redb's errors.
pub(crate) fn check_neighbours<'k, K, V, T>(
    table: &T,
    key: &'k K::SelfType<'k>,
    check: impl Fn(&K::SelfType<'_>, &V::SelfType<'_>) -> Result<()>,
    storage: impl Fn(StorageError) -> Error,
) -> Result<()>
where
    K: Key + 'static,
    V: Value + 'static,
    T: ReadableTable<K, V>,
{
    let after = table
        .range::<K::SelfType<'k>>(key..)
        .map_err(&storage)?
        .next();
    let before = table
        .range::<K::SelfType<'k>>(..key)
        .map_err(&storage)?
        .next_back();
    for pair in [after, before].into_iter().flatten() {
        let (k, v) = pair.map_err(&storage)?;
        check(&k.value(), &v.value())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crc covers the key's length: moving a byte from the key to the value changes it.
    #[test]
    fn a_byte_moved_between_key_and_value_changes_the_pair_crc() {
        assert_ne!(pair_crc(b"ab", b"c"), pair_crc(b"a", b"bc"));
        let mut stored = b"value".to_vec();
        append_pair_crc(b"key", &mut stored);
        assert_eq!(checked_value(&"db", b"key", &stored).unwrap(), b"value");
        let moved = checked_value(&"db", b"ke", &stored).unwrap_err();
        assert!(matches!(
            moved,
            Error::Corrupt {
                reason: CorruptReason::Checksum { .. },
                ..
            }
        ));
        let short = checked_value(&"db", b"key", &stored[..2]).unwrap_err();
        assert!(matches!(
            short,
            Error::Corrupt {
                reason: CorruptReason::Truncated { needed: 2 },
                ..
            }
        ));
    }
}
