//! The app's state layout: its keys in its database and the records stored under them.
//!
//! Keys: `APP_DATA ‖ app key` holds a value ([`AppValue`]); the singleton `APP_META` holds
//! the committed height and app hash ([`AppMeta`]); `APP_UNDO ‖ height(u64)` holds block
//! `height`'s undo record ([`AppUndo`]). The halt height is an ordinary value, under
//! [`HALT_HEIGHT_KEY`].
//!
//! Invariant: every record is written framed with its kind (`crate::types::encode`); bytes
//! under a key that do not decode as its record are reported as `Error::Corrupt` naming the
//! key, never used.

use bytes::{BufMut, Bytes, BytesMut};

use crate::app::AppInfo;
use crate::codec::{Reader, RecordKind, Writer, keys};
use crate::error::CorruptReason;
use crate::types::Record;

/// Key of the halt-height parameter in the app's key space.
pub(super) const HALT_HEIGHT_KEY: &[u8] = b"param/halt_height";

/// The app's meta record: its committed height and app hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AppMeta(pub(super) AppInfo);

impl Record for AppMeta {
    const KIND: RecordKind = RecordKind::APP_META;
    fn encode_payload(&self, w: &mut Writer) {
        w.u64(self.0.height).hash(&self.0.app_hash);
    }
    fn decode_payload(r: &mut Reader<'_>) -> std::result::Result<Self, CorruptReason> {
        Ok(AppMeta(AppInfo {
            height: r.u64()?,
            app_hash: r.hash()?,
        }))
    }
}

/// A value record: the value's bytes, stored as they are (the payload is the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct AppValue(pub(super) Bytes);

impl Record for AppValue {
    const KIND: RecordKind = RecordKind::APP_VALUE;
    fn encode_payload(&self, w: &mut Writer) {
        w.raw(&self.0);
    }
    fn payload_slice(&self) -> Option<&[u8]> {
        Some(&self.0)
    }
    fn payload_size_hint(&self) -> usize {
        self.0.len()
    }
    fn decode_payload(r: &mut Reader<'_>) -> std::result::Result<Self, CorruptReason> {
        Ok(AppValue(Bytes::copy_from_slice(r.rest())))
    }
}

/// The undo record of one block: the app's meta before it, and for each key the block wrote,
/// the stored record under that key before it (`None`: the key was absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct AppUndo {
    /// The app's meta before the block.
    pub(super) prev: AppInfo,
    /// Per key the block wrote (app key): its record before the block.
    pub(super) entries: Vec<(Bytes, Option<Bytes>)>,
}

/// Smallest encoded entry: a 4-byte key length and a 1-byte flag.
const UNDO_ENTRY_BYTES_MIN: usize = 4 + 1;

impl Record for AppUndo {
    const KIND: RecordKind = RecordKind::APP_UNDO;
    fn encode_payload(&self, w: &mut Writer) {
        w.u64(self.prev.height).hash(&self.prev.app_hash);
        w.u32(
            u32::try_from(self.entries.len())
                .expect("invariant: fewer than 2^32 writes in a block"),
        );
        for (k, v) in &self.entries {
            w.bytes(k);
            match v {
                Some(v) => {
                    w.u8(1).bytes(v);
                }
                None => {
                    w.u8(0);
                }
            }
        }
    }
    fn decode_payload(r: &mut Reader<'_>) -> std::result::Result<Self, CorruptReason> {
        let prev = AppInfo {
            height: r.u64()?,
            app_hash: r.hash()?,
        };
        let n = r.count(UNDO_ENTRY_BYTES_MIN)?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let k = Bytes::copy_from_slice(r.bytes()?);
            let v = match r.u8()? {
                0 => None,
                1 => Some(Bytes::copy_from_slice(r.bytes()?)),
                _ => return Err(CorruptReason::Invalid("undo entry flag is not 0 or 1")),
            };
            entries.push((k, v));
        }
        Ok(AppUndo { prev, entries })
    }
}

/// The key of block `height`'s undo record.
pub(super) fn undo_key(height: u64) -> [u8; 9] {
    keys::height_key(keys::APP_UNDO, height)
}

/// The data key of app key `key`: a prefix byte, then the key.
pub(super) fn data_key(key: &[u8]) -> Bytes {
    let mut k = BytesMut::with_capacity(1 + key.len());
    k.put_u8(keys::APP_DATA);
    k.put_slice(key);
    k.freeze()
}

/// The data keys one commit writes ([`data_key`]: a prefix byte, then the app key), back to
/// back in one buffer: one allocation per commit, not one per key and per data key (and,
/// once shared, one reference-count header each).
#[derive(Debug)]
pub(super) struct CommitKeys {
    data_keys: Bytes,
    /// Per key, in the commit's order: the end of its data key in `data_keys` (it starts
    /// where the one before ends).
    ends: Vec<u32>,
}

impl CommitKeys {
    /// The data keys of the app keys `keys` (at most [`u32::MAX`] bytes in all).
    pub(super) fn new<'a>(keys: impl Iterator<Item = &'a Bytes> + Clone) -> Self {
        let len: usize = keys.clone().map(|k| 1 + k.len()).sum();
        assert!(
            u32::try_from(len).is_ok(),
            "invariant: a block's data keys fit in {} bytes",
            u32::MAX
        );
        let mut data_keys = BytesMut::with_capacity(len);
        let mut ends = Vec::with_capacity(keys.clone().count());
        for k in keys {
            data_keys.put_u8(keys::APP_DATA);
            data_keys.put_slice(k);
            ends.push(data_keys.len() as u32);
        }
        CommitKeys {
            data_keys: data_keys.freeze(),
            ends,
        }
    }

    /// The number of keys.
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Each data key's place in `data_keys`.
    pub(super) fn ranges(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let r = start..end as usize;
            start = end as usize;
            r
        })
    }

    /// Each data key, borrowed.
    pub(super) fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.ranges().map(|r| &self.data_keys[r])
    }

    /// The data key at `r` (a slice of `data_keys`, no copy).
    pub(super) fn data_key(&self, r: std::ops::Range<usize>) -> Bytes {
        self.data_keys.slice(r)
    }

    /// The app key of the data key at `r` (the data key without its prefix byte; no copy).
    pub(super) fn app_key(&self, r: std::ops::Range<usize>) -> Bytes {
        self.data_keys.slice(r.start + 1..r.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The app value's slice path encodes the bytes its `encode_payload` frames.
    #[test]
    fn an_app_values_slice_path_is_its_payload_path() {
        for len in [0, 5, crate::codec::PLACED_COPY_FROM_BYTES + 3] {
            let v = AppValue(Bytes::from(vec![0x3c; len]));
            let by_writer = crate::codec::encode_record_with(b"k", AppValue::KIND, len, |w| {
                v.encode_payload(w)
            });
            assert_eq!(crate::types::encode(b"k", &v), by_writer, "{len} bytes");
        }
    }
}
