//! Record framing: `version(1) ‖ kind(1) ‖ payload ‖ crc32(4, big-endian)`.
//!
//! The crc32 (IEEE, `crc32fast`) covers `key ‖ version ‖ kind ‖ payload`: the key is not
//! stored in the value, but checking it catches a value that landed under another key.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::CorruptReason;

/// The record format version this build writes and reads.
pub const FORMAT_VERSION: u8 = 1;

/// Framing overhead: version, kind and crc32.
const FRAME_BYTES: usize = 1 + 1 + 4;

/// The kind tag of a record: one byte in its frame, a stable on-disk identifier.
///
/// Tags `0x00..=0x3f` are flushpoint's own (the constants below; the rest of that range is
/// reserved); tags `0x40..=0xff` are the embedder's, for its own record types
/// ([`RecordKind::embedder`]): a node adds records without editing a list of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecordKind(u8);

impl RecordKind {
    /// Block meta (header, hash, part count).
    pub const BLOCK_META: RecordKind = RecordKind(1);
    /// One block part.
    pub const BLOCK_PART: RecordKind = RecordKind(2);
    /// A commit (canonical or seen).
    pub const COMMIT: RecordKind = RecordKind(3);
    /// The hash → height index entry.
    pub const HASH_INDEX: RecordKind = RecordKind(4);
    /// The block store's base and height.
    pub const BLOCK_STORE_STATE: RecordKind = RecordKind(5);
    /// The flush record {from, to}.
    pub const FLUSH_RECORD: RecordKind = RecordKind(6);
    /// The consensus state.
    pub const STATE: RecordKind = RecordKind(16);
    /// Per-block execution results.
    pub const BLOCK_RESULTS: RecordKind = RecordKind(17);
    /// A history entry of state history slot 0 (the demo chain's validator sets).
    pub const VALIDATORS_INFO: RecordKind = RecordKind(18);
    /// A history entry of state history slot 1 (the demo chain's consensus params).
    pub const PARAMS_INFO: RecordKind = RecordKind(19);
    /// A history entry of state history slot 2.
    pub const HISTORY_2: RecordKind = RecordKind(22);
    /// A history entry of state history slot 3.
    pub const HISTORY_3: RecordKind = RecordKind(23);
    /// The genesis hash a home was created with.
    pub const GENESIS_HASH: RecordKind = RecordKind(20);
    /// The state store's base: heights below it are pruned.
    pub const STATE_STORE_BASE: RecordKind = RecordKind(21);
    /// An application's meta record (height, app hash).
    pub const APP_META: RecordKind = RecordKind(32);
    /// An application's data value.
    pub const APP_VALUE: RecordKind = RecordKind(33);
    /// The demo application's undo record of one block.
    pub const APP_UNDO: RecordKind = RecordKind(34);
    /// A home's rollback intent (the `ROLLBACK-IN-PROGRESS` file, not a database row).
    pub const ROLLBACK_INTENT: RecordKind = RecordKind(48);

    /// The first tag an embedder's record may use; the tags below are flushpoint's.
    pub const EMBEDDER_FIRST_TAG: u8 = 0x40;

    /// The kind of an embedder's record type, tagged `tag`.
    ///
    /// # Panics
    /// When `tag` is below [`RecordKind::EMBEDDER_FIRST_TAG`] (one of flushpoint's). In a
    /// `const` — `const KIND: RecordKind = RecordKind::embedder(0x41);` — that is a compile
    /// error, not a run-time panic.
    pub const fn embedder(tag: u8) -> RecordKind {
        assert!(
            tag >= Self::EMBEDDER_FIRST_TAG,
            "record tags below 0x40 are flushpoint's own"
        );
        RecordKind(tag)
    }

    /// The stable tag.
    pub const fn tag(self) -> u8 {
        self.0
    }
}

/// Payloads at least this long are framed with their copy placed relative to its source
/// ([`encode_record`]). Why: below it the copy is too short for the placement to matter.
pub const PLACED_COPY_FROM_BYTES: usize = 4 << 10;

/// How a placed copy's destination lies relative to its source: at the same offset within
/// a block of this many bytes, so never 1–63 bytes ahead of it modulo 4 KiB. Why: a copy
/// with its destination a few bytes past its source modulo 4 KiB runs several times slower
/// (4K aliasing; a 64 KiB copy 1–15 bytes ahead ran at 2.2–3.4 GB/s instead of 36–46 on
/// this project's machines), and a part framed behind the record's 2-byte head, in a
/// buffer aligned as the part's, hit it on every save.
pub const PLACED_COPY_ALIGN_BYTES: usize = crate::aliasing::ALIASING_AHEAD_BYTES_MAX + 1;
const _: () = assert!(
    crate::aliasing::ALIAS_SPAN_BYTES.is_multiple_of(PLACED_COPY_ALIGN_BYTES),
    "a copy at the same offset modulo the placement is at a multiple of it modulo a page"
);

/// Frames `payload` as a record of `kind` stored under `key`. A payload of
/// [`PLACED_COPY_FROM_BYTES`] or more is copied to the same offset modulo
/// [`PLACED_COPY_ALIGN_BYTES`] as it lies at (the record then starts up to 63 bytes into
/// its buffer); the bytes are those of [`encode_record_with`] either way.
pub fn encode_record(key: &[u8], kind: RecordKind, payload: &[u8]) -> Bytes {
    if payload.len() < PLACED_COPY_FROM_BYTES {
        return encode_record_with(key, kind, payload.len(), |w| {
            w.raw(payload);
        });
    }
    let mut buf = BytesMut::with_capacity(PLACED_COPY_ALIGN_BYTES + FRAME_BYTES + payload.len());
    // The payload lands `pad + 2` bytes into the buffer.
    let lands = buf.as_ptr() as usize + 2;
    let pad = (payload.as_ptr() as usize).wrapping_sub(lands) % PLACED_COPY_ALIGN_BYTES;
    buf.put_bytes(0, pad);
    buf.put_u8(FORMAT_VERSION);
    buf.put_u8(kind.tag());
    debug_assert_eq!(
        (buf.as_ptr() as usize + buf.len()) % PLACED_COPY_ALIGN_BYTES,
        payload.as_ptr() as usize % PLACED_COPY_ALIGN_BYTES,
        "the copy is placed as its source"
    );
    debug_assert!(
        !crate::aliasing::copy_aliases(
            buf.as_ptr() as usize + buf.len(),
            payload.as_ptr() as usize
        ),
        "the copy is clear of 4K aliasing"
    );
    buf.put_slice(payload);
    let crc = checksum(key, &buf[pad..]);
    buf.put_u32(crc);
    bytes::Buf::advance(&mut buf, pad);
    buf.freeze()
}

/// Frames the payload `write_payload` appends as a record of `kind` stored under `key`,
/// in one buffer: no payload is built apart and copied into its frame. `payload_hint` is
/// the payload's expected length (a capacity hint: a wrong one costs a reallocation, never
/// a different encoding). The bytes are exactly those of [`encode_record`].
pub fn encode_record_with(
    key: &[u8],
    kind: RecordKind,
    payload_hint: usize,
    write_payload: impl FnOnce(&mut Writer),
) -> Bytes {
    let mut w = Writer::with_capacity(payload_hint + FRAME_BYTES);
    w.u8(FORMAT_VERSION).u8(kind.tag());
    write_payload(&mut w);
    let crc = checksum(key, w.as_slice());
    w.u32(crc);
    w.finish()
}

/// Checks a record's framing and returns its payload.
pub fn decode_record<'a>(
    key: &[u8],
    kind: RecordKind,
    value: &'a [u8],
) -> Result<&'a [u8], CorruptReason> {
    // The checksum is checked first: a flipped version or kind bit is a checksum error, and
    // only an intact record with another version is "unknown version".
    let found = check_frame(key, value)?;
    if found != kind.tag() {
        return Err(CorruptReason::WrongKind {
            expected: kind.tag(),
            found,
        });
    }
    Ok(&value[2..value.len() - 4])
}

/// Checks a record's framing — length, checksum, version — whatever its kind, and returns
/// the kind's tag (for reading every record of a database without knowing its types).
pub fn check_frame(key: &[u8], value: &[u8]) -> Result<u8, CorruptReason> {
    if value.len() < FRAME_BYTES {
        return Err(CorruptReason::Truncated {
            needed: FRAME_BYTES - value.len(),
        });
    }
    let (body, crc_bytes) = value.split_at(value.len() - 4);
    let stored = u32::from_be_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
    let computed = checksum(key, body);
    if stored != computed {
        return Err(CorruptReason::Checksum { stored, computed });
    }
    if body[0] != FORMAT_VERSION {
        return Err(CorruptReason::UnknownVersion(body[0]));
    }
    Ok(body[1])
}

fn checksum(key: &[u8], body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(key);
    h.update(body);
    h.finalize()
}

/// Writes payload fields, big-endian.
#[derive(Debug, Default)]
pub struct Writer {
    buf: BytesMut,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }
    /// A writer with room for `n` bytes.
    pub fn with_capacity(n: usize) -> Self {
        Writer {
            buf: BytesMut::with_capacity(n),
        }
    }
    /// Appends a byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.put_u8(v);
        self
    }
    /// Appends a u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.put_u32(v);
        self
    }
    /// Appends a u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.put_u64(v);
        self
    }
    /// Appends a 32-byte hash.
    pub fn hash(&mut self, v: &[u8; 32]) -> &mut Self {
        self.buf.put_slice(v);
        self
    }
    /// Appends bytes with a u32 length prefix.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        let len = u32::try_from(v.len()).expect("invariant: a field is shorter than 4 GiB");
        self.buf.put_u32(len);
        self.buf.put_slice(v);
        self
    }
    /// Appends raw bytes with no prefix.
    pub fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.buf.put_slice(v);
        self
    }
    /// The bytes written.
    pub fn finish(self) -> Bytes {
        self.buf.freeze()
    }
    /// The bytes written so far.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }
}

/// Reads payload fields, checking every length.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads from `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], CorruptReason> {
        if self.buf.len() < n {
            return Err(CorruptReason::Truncated {
                needed: n - self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    /// Reads a byte.
    pub fn u8(&mut self) -> Result<u8, CorruptReason> {
        Ok(self.take(1)?[0])
    }
    /// Reads a u32.
    pub fn u32(&mut self) -> Result<u32, CorruptReason> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes(b.try_into().expect("4 bytes")))
    }
    /// Reads a u64.
    pub fn u64(&mut self) -> Result<u64, CorruptReason> {
        let b = self.take(8)?;
        Ok(u64::from_be_bytes(b.try_into().expect("8 bytes")))
    }
    /// Reads a 32-byte hash.
    pub fn hash(&mut self) -> Result<[u8; 32], CorruptReason> {
        Ok(self.take(32)?.try_into().expect("32 bytes"))
    }
    /// Reads length-prefixed bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8], CorruptReason> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// Reads a count of items, each at least `min_item_bytes` long, rejecting counts the
    /// remaining bytes cannot hold (so a corrupt count cannot cause a huge allocation).
    pub fn count(&mut self, min_item_bytes: usize) -> Result<usize, CorruptReason> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item_bytes.max(1)) > self.buf.len() {
            return Err(CorruptReason::Invalid(
                "item count exceeds the record's length",
            ));
        }
        Ok(n)
    }
    /// All remaining bytes.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }
    /// Fails unless every byte was read.
    pub fn finish(self) -> Result<(), CorruptReason> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(CorruptReason::Trailing(self.buf.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_checks_key() {
        let v = encode_record(b"k", RecordKind::COMMIT, b"payload");
        assert_eq!(
            decode_record(b"k", RecordKind::COMMIT, &v).unwrap(),
            b"payload"
        );
        assert!(matches!(
            decode_record(b"other", RecordKind::COMMIT, &v),
            Err(CorruptReason::Checksum { .. })
        ));
        assert!(matches!(
            decode_record(b"k", RecordKind::STATE, &v),
            Err(CorruptReason::WrongKind { .. })
        ));
    }

    #[test]
    fn every_flipped_bit_and_truncation_is_caught() {
        let v = encode_record(b"key", RecordKind::BLOCK_META, b"0123456789");
        for bit in 0..v.len() * 8 {
            let mut c = v.to_vec();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(
                decode_record(b"key", RecordKind::BLOCK_META, &c).is_err(),
                "bit {bit}"
            );
        }
        for len in 0..v.len() {
            assert!(decode_record(b"key", RecordKind::BLOCK_META, &v[..len]).is_err());
        }
    }

    /// A long payload's record is the bytes the unplaced path writes (the oracle: a frame
    /// built field by field here), whatever the payload's offset, and its payload copy lies
    /// as its source modulo the placement.
    #[test]
    fn a_placed_record_is_the_same_bytes_and_its_payload_lies_as_its_source() {
        let source: Vec<u8> = (0..PLACED_COPY_FROM_BYTES * 3)
            .map(|i| (i * 7) as u8)
            .collect();
        for (offset, len) in [
            (0, PLACED_COPY_FROM_BYTES),
            (1, PLACED_COPY_FROM_BYTES),
            (2, PLACED_COPY_FROM_BYTES + 1),
            (63, PLACED_COPY_FROM_BYTES * 2),
            (65, PLACED_COPY_FROM_BYTES - 1),
            (3, 10),
        ] {
            let payload = &source[offset..offset + len];
            let v = encode_record(b"part key", RecordKind::BLOCK_PART, payload);
            let mut want = vec![FORMAT_VERSION, RecordKind::BLOCK_PART.tag()];
            want.extend_from_slice(payload);
            let mut h = crc32fast::Hasher::new();
            h.update(b"part key");
            h.update(&want);
            want.extend_from_slice(&h.finalize().to_be_bytes());
            assert_eq!(&v[..], &want[..], "offset {offset}, {len} bytes");
            if len >= PLACED_COPY_FROM_BYTES {
                assert_eq!(
                    (v.as_ptr() as usize + 2) % PLACED_COPY_ALIGN_BYTES,
                    payload.as_ptr() as usize % PLACED_COPY_ALIGN_BYTES,
                    "offset {offset}"
                );
            }
            assert_eq!(
                decode_record(b"part key", RecordKind::BLOCK_PART, &v).unwrap(),
                payload
            );
        }
    }

    #[test]
    fn unknown_version_with_valid_crc_is_named() {
        let mut body = vec![9u8, RecordKind::COMMIT.tag(), 1, 2];
        let crc = checksum(b"k", &body);
        body.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(
            decode_record(b"k", RecordKind::COMMIT, &body),
            Err(CorruptReason::UnknownVersion(9))
        );
    }

    #[test]
    fn corrupt_count_is_rejected_without_allocating() {
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 1]);
        assert!(r.count(8).is_err());
    }
}
