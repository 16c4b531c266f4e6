//! A run file's bytes: its layout, its constants, and the encoding and checked decoding of
//! each part. `docs/FORMAT.md` ("Keyspaces indexed by runs") is the spec; this file is the
//! one place in the code that knows it.
//!
//! Layout (little-endian):
//! * header (32 bytes): `magic "FPR1" ‖ version u8 ‖ 3 zero bytes ‖ id u64 ‖ 12 zero bytes ‖
//!   crc32 of the 28 bytes before it`;
//! * blocks, one after another: `body_len u32 ‖ body ‖ crc32(body)`; a body is ops, each
//!   `tag u8 (1 put, 2 delete) ‖ key_len u32 ‖ key [‖ value_len u32 ‖ value]`, keys strictly
//!   increasing across the whole run;
//! * meta: `block_count u32`, per block `offset u64 ‖ framed_len u32 ‖ first_key_len u32 ‖
//!   first_key`, then the bloom filter `hashes u8 ‖ bit_bytes u32 ‖ bits` (at least 10
//!   bits a key; a reader takes its size from `bit_bytes`);
//! * footer (32 bytes): `meta_offset u64 ‖ op_count u64 ‖ meta_len u32 ‖ crc32(meta) u32 ‖
//!   footer_crc32 u32 (of the 24 bytes before it) ‖ magic "FPRE"`.
//!
//! Invariant: decoding never panics on any bytes: a short, inconsistent or changed part is a
//! [`CorruptReason`], never a wrong value.
//! Invariant: what is encoded here is what `docs/FORMAT.md` describes, at [`RUN_VERSION`].
//! Invariant: no I/O: the writer and the reader move the bytes.

use bytes::Bytes;

use super::bloom::Bloom;
use crate::error::CorruptReason;
use crate::journal::unit::{le_u32, le_u64};

/// The file name of run `id`: 20 decimal digits and `.run`.
pub(crate) fn run_file_name(id: u64) -> String {
    format!("{id:020}.run")
}

/// The run magic: "FlushPoint Run", format 1.
pub(super) const RUN_MAGIC: [u8; 4] = *b"FPR1";
/// The magic closing a run's footer: a file cut before its footer ends is not a run.
pub(super) const RUN_FOOTER_MAGIC: [u8; 4] = *b"FPRE";
/// The run format version this build writes and reads.
pub(super) const RUN_VERSION: u8 = 1;
/// Bytes of a run header.
pub(super) const RUN_HEADER_BYTES: usize = 32;
/// Bytes of a run footer.
pub(super) const RUN_FOOTER_BYTES: usize = 32;

const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;
/// Bytes of a block's length, before its body.
pub(super) const BLOCK_LEN_BYTES: usize = 4;
/// The shortest framed block: `body_len`, one op (a delete of the empty key: tag and
/// `key_len`), the crc32. A block holds at least one op.
const MIN_FRAMED_BLOCK_BYTES: u32 = BLOCK_LEN_BYTES as u32 + 1 + 4 + 4;

/// An op of a run: `Some(value)` a put, `None` a tombstone.
pub(crate) type RunOp = (Bytes, Option<Bytes>);

/// One block of a run, as the meta's block index holds it.
#[derive(Debug, Clone)]
pub(super) struct BlockRef {
    /// Where the framed block starts in the file, in bytes.
    pub(super) offset: u64,
    /// The framed block's length, in bytes.
    pub(super) len: u32,
    pub(super) first_key: Bytes,
}

/// A run's footer, its checks passed.
pub(super) struct Footer {
    /// Where the meta starts in the file, in bytes.
    pub(super) meta_offset: u64,
    /// Ops in the run (puts and tombstones).
    pub(super) ops: u64,
    /// The meta's length, in bytes.
    pub(super) meta_len: u32,
    pub(super) meta_crc: u32,
}

/// Reads little-endian fields from a slice, failing (never panicking) past its end.
pub(super) struct Fields<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    pub(super) fn new(b: &'a [u8]) -> Self {
        Fields { b, at: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], CorruptReason> {
        let end = self
            .at
            .checked_add(n)
            .ok_or(CorruptReason::Invalid("run: length overflow"))?;
        let s = self.b.get(self.at..end).ok_or(CorruptReason::Truncated {
            needed: end.saturating_sub(self.b.len()),
        })?;
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, CorruptReason> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, CorruptReason> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, CorruptReason> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn done(&self) -> bool {
        self.at == self.b.len()
    }
}

/// Checks a stored crc32 against bytes.
pub(super) fn crc_matches(stored: u32, bytes: &[u8]) -> Result<(), CorruptReason> {
    let computed = crc32fast::hash(bytes);
    if stored == computed {
        Ok(())
    } else {
        Err(CorruptReason::Checksum { stored, computed })
    }
}

/// The header of run `id`.
pub(super) fn encode_header(id: u64) -> Vec<u8> {
    let mut header = Vec::with_capacity(RUN_HEADER_BYTES);
    header.extend_from_slice(&RUN_MAGIC);
    header.push(RUN_VERSION);
    header.extend_from_slice(&[0; 3]);
    header.extend_from_slice(&id.to_le_bytes());
    header.extend_from_slice(&[0; 12]);
    let crc = crc32fast::hash(&header);
    header.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(header.len(), RUN_HEADER_BYTES);
    header
}

/// Checks a header: its crc32, magic and version, and that it names run `id`.
pub(super) fn check_header(header: &[u8; RUN_HEADER_BYTES], id: u64) -> Result<(), CorruptReason> {
    crc_matches(le_u32(header, 28), &header[..28])?;
    if header[..4] != RUN_MAGIC {
        return Err(CorruptReason::Invalid("run: magic"));
    }
    if header[4] != RUN_VERSION {
        return Err(CorruptReason::UnknownVersion(header[4]));
    }
    if le_u64(header, 8) != id {
        return Err(CorruptReason::Invalid("run: the header names another id"));
    }
    Ok(())
}

/// Empties `block` and reserves its length ([`BLOCK_LEN_BYTES`], filled in by
/// [`seal_block`]): a block is built in the buffer it is written from.
pub(super) fn start_block(block: &mut Vec<u8>) {
    block.clear();
    block.extend_from_slice(&[0; BLOCK_LEN_BYTES]);
}

/// Appends one op to a block's body: `Some((head, tail))` a put of the value `head ‖ tail`,
/// `None` a delete. The caller checked that the key's and the value's lengths fit a u32.
pub(super) fn encode_op(block: &mut Vec<u8>, key: &[u8], value: Option<(&[u8], &[u8])>) {
    debug_assert!(
        u32::try_from(key.len()).is_ok(),
        "a key's length fits a u32"
    );
    block.push(if value.is_some() { OP_PUT } else { OP_DELETE });
    block.extend_from_slice(&(key.len() as u32).to_le_bytes());
    block.extend_from_slice(key);
    if let Some((head, tail)) = value {
        let value_len = head.len() + tail.len();
        debug_assert!(
            u32::try_from(value_len).is_ok(),
            "a value's length fits a u32"
        );
        block.extend_from_slice(&(value_len as u32).to_le_bytes());
        block.extend_from_slice(head);
        block.extend_from_slice(tail);
    }
}

/// Frames a block built since [`start_block`]: fills in its `body_len` and appends the
/// body's crc32.
pub(super) fn seal_block(block: &mut Vec<u8>, body_len: u32) {
    debug_assert_eq!(body_len as usize, block.len() - BLOCK_LEN_BYTES);
    let crc = crc32fast::hash(&block[BLOCK_LEN_BYTES..]);
    block[..BLOCK_LEN_BYTES].copy_from_slice(&body_len.to_le_bytes());
    block.extend_from_slice(&crc.to_le_bytes());
}

/// Decodes one framed block: its crc32, then its ops, keys strictly increasing from
/// `first_key`.
pub(super) fn decode_block(framed: &[u8], first_key: &[u8]) -> Result<Vec<RunOp>, CorruptReason> {
    let mut f = Fields::new(framed);
    let body_len = f.u32()? as usize;
    let body = f.take(body_len)?;
    let stored = f.u32()?;
    if !f.done() {
        return Err(CorruptReason::Trailing(framed.len() - f.at));
    }
    crc_matches(stored, body)?;
    let body = Bytes::copy_from_slice(body);
    let mut f = Fields::new(&body);
    let mut ops: Vec<RunOp> = Vec::new();
    while !f.done() {
        let tag = f.u8()?;
        let key_len = f.u32()? as usize;
        let key_at = f.at;
        f.take(key_len)?;
        let key = body.slice(key_at..key_at + key_len);
        let value = match tag {
            OP_PUT => {
                let value_len = f.u32()? as usize;
                let value_at = f.at;
                f.take(value_len)?;
                Some(body.slice(value_at..value_at + value_len))
            }
            OP_DELETE => None,
            _ => return Err(CorruptReason::Invalid("run: op tag")),
        };
        let in_order = match ops.last() {
            None => key[..] == *first_key,
            Some((last, _)) => key > *last,
        };
        if !in_order {
            return Err(CorruptReason::Invalid("run: keys out of order in a block"));
        }
        ops.push((key, value));
    }
    if ops.is_empty() {
        return Err(CorruptReason::Invalid("run: an empty block"));
    }
    Ok(ops)
}

/// The meta: the block index, then the bloom filter.
pub(super) fn encode_meta(index: &[BlockRef], bloom: &Bloom) -> Vec<u8> {
    let mut meta = Vec::new();
    meta.extend_from_slice(&(index.len() as u32).to_le_bytes());
    for block in index {
        meta.extend_from_slice(&block.offset.to_le_bytes());
        meta.extend_from_slice(&block.len.to_le_bytes());
        meta.extend_from_slice(&(block.first_key.len() as u32).to_le_bytes());
        meta.extend_from_slice(&block.first_key);
    }
    meta.push(bloom.hashes);
    meta.extend_from_slice(&(bloom.bits.len() as u32).to_le_bytes());
    meta.extend_from_slice(&bloom.bits);
    meta
}

/// Parses a run's meta: the block index (offsets within `[header, meta_offset)`, in order
/// and without gaps; first keys strictly increasing) and the bloom filter.
pub(super) fn parse_meta(
    meta: &[u8],
    meta_offset: u64,
) -> Result<(Vec<BlockRef>, Bloom), CorruptReason> {
    let mut f = Fields::new(meta);
    let count = f.u32()?;
    let mut blocks: Vec<BlockRef> = Vec::new();
    let mut expected_offset = RUN_HEADER_BYTES as u64;
    for _ in 0..count {
        let offset = f.u64()?;
        let len = f.u32()?;
        let key_len = f.u32()? as usize;
        let first_key = Bytes::copy_from_slice(f.take(key_len)?);
        if offset != expected_offset {
            return Err(CorruptReason::Invalid("run: the block index has a gap"));
        }
        if len < MIN_FRAMED_BLOCK_BYTES {
            return Err(CorruptReason::Invalid("run: a block too short for an op"));
        }
        expected_offset = offset + u64::from(len);
        if blocks.last().is_some_and(|b| b.first_key >= first_key) {
            return Err(CorruptReason::Invalid("run: block keys out of order"));
        }
        blocks.push(BlockRef {
            offset,
            len,
            first_key,
        });
    }
    if expected_offset != meta_offset {
        return Err(CorruptReason::Invalid(
            "run: the blocks do not end where the meta begins",
        ));
    }
    let hashes = f.u8()?;
    let bit_bytes = f.u32()? as usize;
    let bits = f.take(bit_bytes)?.to_vec();
    if hashes == 0 || bits.is_empty() || !f.done() {
        return Err(CorruptReason::Invalid("run: bloom filter"));
    }
    Ok((blocks, Bloom { hashes, bits }))
}

/// The footer closing a run.
pub(super) fn encode_footer(footer: &Footer) -> Vec<u8> {
    let mut out = Vec::with_capacity(RUN_FOOTER_BYTES);
    out.extend_from_slice(&footer.meta_offset.to_le_bytes());
    out.extend_from_slice(&footer.ops.to_le_bytes());
    out.extend_from_slice(&footer.meta_len.to_le_bytes());
    out.extend_from_slice(&footer.meta_crc.to_le_bytes());
    let footer_crc = crc32fast::hash(&out);
    out.extend_from_slice(&footer_crc.to_le_bytes());
    out.extend_from_slice(&RUN_FOOTER_MAGIC);
    debug_assert_eq!(out.len(), RUN_FOOTER_BYTES);
    out
}

/// Checks a footer's magic and crc32 and reads its fields (where the meta lies is the
/// reader's check: it knows the file's length).
pub(super) fn decode_footer(footer: &[u8; RUN_FOOTER_BYTES]) -> Result<Footer, CorruptReason> {
    if footer[28..] != RUN_FOOTER_MAGIC {
        return Err(CorruptReason::Invalid("run: footer magic"));
    }
    crc_matches(le_u32(footer, 24), &footer[..24])?;
    let mut f = Fields::new(&footer[..24]);
    Ok(Footer {
        meta_offset: f.u64()?,
        ops: f.u64()?,
        meta_len: f.u32()?,
        meta_crc: f.u32()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{Direction, KeyRange};
    use crate::error::{Error, Result};
    use crate::fs::SimFs;
    use crate::journal::run::reader::{Lookup, Run};
    use crate::journal::run::test_support::{file, reopen};

    /// A run as the module's layout describes it, encoded here and not by [`RunWriter`]:
    /// an independent encoder, so a test can build files the writer never writes. Its
    /// bloom filter passes every key (all bits set).
    struct Raw {
        /// Framed blocks: `body_len ‖ body ‖ crc32(body)`, and any bytes a test adds.
        blocks: Vec<Vec<u8>>,
        /// Per block: offset, framed length, first key.
        index: Vec<(u64, u32, Vec<u8>)>,
        hashes: u8,
        bits: Vec<u8>,
        /// Bytes after the bloom filter, inside the meta.
        meta_tail: Vec<u8>,
    }

    fn raw_op(body: &mut Vec<u8>, k: &[u8], v: Option<&[u8]>) {
        body.push(if v.is_some() { 1 } else { 2 });
        body.extend_from_slice(&(k.len() as u32).to_le_bytes());
        body.extend_from_slice(k);
        if let Some(v) = v {
            body.extend_from_slice(&(v.len() as u32).to_le_bytes());
            body.extend_from_slice(v);
        }
    }

    fn raw_frame(body: &[u8]) -> Vec<u8> {
        let mut b = (body.len() as u32).to_le_bytes().to_vec();
        b.extend_from_slice(body);
        b.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
        b
    }

    impl Raw {
        fn new(blocks: &[&[RawOp<'_>]]) -> Raw {
            let mut raw = Raw {
                blocks: Vec::new(),
                index: Vec::new(),
                hashes: 7,
                bits: vec![0xff; 8],
                meta_tail: Vec::new(),
            };
            for ops in blocks {
                let mut body = Vec::new();
                for (k, v) in *ops {
                    raw_op(&mut body, k, *v);
                }
                raw.blocks.push(raw_frame(&body));
                raw.index.push((0, 0, ops[0].0.to_vec()));
            }
            raw.place();
            raw
        }

        /// Sets each index entry's offset and length from the blocks as they are now.
        fn place(&mut self) {
            let mut at = 32u64;
            for (b, e) in self.blocks.iter().zip(&mut self.index) {
                (e.0, e.1) = (at, b.len() as u32);
                at += b.len() as u64;
            }
        }

        fn bytes(&self, id: u64, op_count: u64) -> Vec<u8> {
            let mut out = b"FPR1".to_vec();
            out.push(1);
            out.extend_from_slice(&[0; 3]);
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&[0; 12]);
            let crc = crc32fast::hash(&out);
            out.extend_from_slice(&crc.to_le_bytes());
            for b in &self.blocks {
                out.extend_from_slice(b);
            }
            let meta_offset = out.len() as u64;
            let mut meta = (self.index.len() as u32).to_le_bytes().to_vec();
            for (offset, len, key) in &self.index {
                meta.extend_from_slice(&offset.to_le_bytes());
                meta.extend_from_slice(&len.to_le_bytes());
                meta.extend_from_slice(&(key.len() as u32).to_le_bytes());
                meta.extend_from_slice(key);
            }
            meta.push(self.hashes);
            meta.extend_from_slice(&(self.bits.len() as u32).to_le_bytes());
            meta.extend_from_slice(&self.bits);
            meta.extend_from_slice(&self.meta_tail);
            let mut footer = meta_offset.to_le_bytes().to_vec();
            footer.extend_from_slice(&op_count.to_le_bytes());
            footer.extend_from_slice(&(meta.len() as u32).to_le_bytes());
            footer.extend_from_slice(&crc32fast::hash(&meta).to_le_bytes());
            let crc = crc32fast::hash(&footer);
            footer.extend_from_slice(&crc.to_le_bytes());
            footer.extend_from_slice(b"FPRE");
            out.extend_from_slice(&meta);
            out.extend_from_slice(&footer);
            out
        }

        fn open(&self, fs: &SimFs) -> Result<Run> {
            let ops = self.blocks.len() as u64;
            file(fs, "raw.run")
                .write_at(0, &self.bytes(11, ops))
                .unwrap();
            Run::open(reopen(fs, "raw.run"), "ks", 11)
        }
    }

    /// A key and `Some(value)` (a put) or `None` (a delete), for [`Raw::new`].
    type RawOp<'a> = (&'a [u8], Option<&'a [u8]>);

    const EMPTY: &[u8] = b"";

    /// The raw encoder and the reader agree, down to a block of the shortest length (one
    /// delete of the empty key: 13 bytes framed).
    #[test]
    fn a_run_encoded_from_the_layout_opens_and_reads() {
        let fs = SimFs::new();
        let raw = Raw::new(&[
            &[(EMPTY, None)],
            &[(b"a", Some(b"1")), (b"b", None)],
            &[(b"c", Some(b""))],
        ]);
        assert_eq!(raw.blocks[0].len(), 13);
        let run = raw.open(&fs).unwrap();
        assert_eq!(run.get(b"").unwrap(), Lookup::Deleted);
        assert_eq!(
            run.get(b"a").unwrap(),
            Lookup::Put(Bytes::from_static(b"1"))
        );
        assert_eq!(run.get(b"b").unwrap(), Lookup::Deleted);
        assert_eq!(run.get(b"c").unwrap(), Lookup::Put(Bytes::new()));
        assert_eq!(run.get(b"bb").unwrap(), Lookup::Absent);
        let keys: Vec<Bytes> = run
            .iter(&KeyRange::all(), Direction::Reverse)
            .map(|r| r.unwrap().0)
            .collect();
        assert_eq!(keys, [&b"c"[..], b"b", b"a", b""]);
    }

    /// Files whose checksums all hold but whose layout is broken are refused at open, each
    /// by its own check.
    #[test]
    fn a_run_with_a_broken_layout_is_refused_at_open() {
        let fs = SimFs::new();
        let good = || Raw::new(&[&[(b"a", Some(b"1"))], &[(b"c", None)]]);
        assert!(good().open(&fs).is_ok());
        let refused = |raw: Raw, why: &str| match raw.open(&fs) {
            Err(Error::Corrupt { .. }) => {}
            other => panic!("{why}: {other:?}"),
        };
        let mut r = good();
        r.index[1].0 += 1;
        refused(r, "a gap in the index");
        // A block of 12 bytes (a body of 4 that is no op), the index consistent with it.
        let mut r = good();
        r.blocks[0] = raw_frame(b"abcd");
        r.place();
        refused(r, "a block too short for an op");
        let mut r = Raw::new(&[&[(b"c", Some(b"1"))], &[(b"a", None)]]);
        r.place();
        refused(r, "first keys out of order");
        let mut r = good();
        r.index.pop();
        refused(r, "blocks not ending at the meta");
        let mut r = good();
        r.hashes = 0;
        refused(r, "a filter of no hashes");
        let mut r = good();
        r.bits.clear();
        refused(r, "a filter of no bits");
        let mut r = good();
        r.meta_tail = vec![0];
        refused(r, "bytes after the filter");
    }

    /// A block whose checksum holds but whose ops repeat a key, or whose index length
    /// runs past its crc32, is refused when read, naming why.
    #[test]
    fn a_block_with_a_repeated_key_or_trailing_bytes_is_refused_when_read() {
        let fs = SimFs::new();
        let run = Raw::new(&[&[(b"a", Some(b"1")), (b"a", Some(b"2"))]])
            .open(&fs)
            .unwrap();
        assert!(matches!(run.get(b"a"), Err(Error::Corrupt { .. })));
        let mut r = Raw::new(&[&[(b"a", Some(b"1"))]]);
        r.blocks[0].extend_from_slice(&[0; 4]);
        r.place();
        let run = r.open(&fs).unwrap();
        match run.get(b"a") {
            Err(Error::Corrupt { reason, .. }) => assert_eq!(reason, CorruptReason::Trailing(4)),
            other => panic!("{other:?}"),
        }
    }
}
