//! An embedder's own record types: framed, checksummed and kind-checked like flushpoint's,
//! with tags from the embedder's range (`0x40..=0xff`), no list of ours to edit.

use flushpoint::CorruptReason;
use flushpoint::codec::{Reader, RecordKind, Writer};
use flushpoint::records::{Record, decode, encode};

/// An embedder's record: a counter.
#[derive(Debug, PartialEq, Eq)]
struct Counter(u64);

impl Record for Counter {
    const KIND: RecordKind = RecordKind::embedder(0x41);
    fn encode_payload(&self, w: &mut Writer) {
        w.u64(self.0);
    }
    fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        Ok(Counter(r.u64()?))
    }
}

/// Another embedder record with the same payload shape and another tag.
#[derive(Debug, PartialEq, Eq)]
struct Gauge(u64);

impl Record for Gauge {
    const KIND: RecordKind = RecordKind::embedder(0xff);
    fn encode_payload(&self, w: &mut Writer) {
        w.u64(self.0);
    }
    fn decode_payload(r: &mut Reader<'_>) -> Result<Self, CorruptReason> {
        Ok(Gauge(r.u64()?))
    }
}

#[test]
fn an_embedders_record_round_trips_and_its_kind_and_checksum_are_checked() {
    let key = b"counter/1";
    let bytes = encode(key, &Counter(7));
    assert_eq!(bytes[1], 0x41, "the frame carries the embedder's tag");
    assert_eq!(decode::<Counter>(key, &bytes).unwrap(), Counter(7));
    // Read as another embedder kind: refused, not reinterpreted.
    assert!(matches!(
        decode::<Gauge>(key, &bytes),
        Err(CorruptReason::WrongKind { .. })
    ));
    // Under another key, or with a flipped payload bit: the checksum refuses it.
    assert!(decode::<Counter>(b"counter/2", &bytes).is_err());
    let mut flipped = bytes.to_vec();
    flipped[3] ^= 1;
    assert!(decode::<Counter>(key, &flipped).is_err());
}

#[test]
fn flushpoints_own_kinds_stay_below_the_embedders_range() {
    let ours = [
        RecordKind::BLOCK_META,
        RecordKind::BLOCK_PART,
        RecordKind::COMMIT,
        RecordKind::HASH_INDEX,
        RecordKind::BLOCK_STORE_STATE,
        RecordKind::FLUSH_RECORD,
        RecordKind::STATE,
        RecordKind::BLOCK_RESULTS,
        RecordKind::VALIDATORS_INFO,
        RecordKind::PARAMS_INFO,
        RecordKind::GENESIS_HASH,
        RecordKind::STATE_STORE_BASE,
        RecordKind::APP_META,
        RecordKind::APP_VALUE,
        RecordKind::APP_UNDO,
        RecordKind::ROLLBACK_INTENT,
    ];
    let mut tags: Vec<u8> = ours.iter().map(|k| k.tag()).collect();
    assert!(tags.iter().all(|&t| t < RecordKind::EMBEDDER_FIRST_TAG));
    tags.sort_unstable();
    tags.dedup();
    assert_eq!(tags.len(), ours.len(), "every kind has its own tag");
}

#[test]
#[should_panic(expected = "below 0x40")]
fn an_embedder_cannot_take_one_of_flushpoints_tags() {
    let tag = std::hint::black_box(0x3f);
    let _ = RecordKind::embedder(tag);
}
