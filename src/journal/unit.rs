//! Units: the journal's framed records, encoded and decoded (no I/O here).
//!
//! Layout (little-endian; `docs/FORMAT.md`, "Journal"):
//! `header {magic "FPJ1" (4), version (1), reserved 0 (3), seq u64, synced_through u64,
//! body_len u32, header_crc32 u32}` (32 bytes) ‖ body (`body_len` bytes) ‖ `body_crc32 u32`.
//! Body: `section_count u32`, then per section `name_len u8 ‖ name ‖ op_count u32 ‖ ops`,
//! each op `tag u8 (1 put, 2 delete) ‖ key_len u32 ‖ key [‖ value_len u32 ‖ value]`.
//!
//! Invariant: `decode_at` never panics on any bytes; it says `Valid`, or why the bytes at
//! that offset are not a unit.
//! Invariant: this module decides nothing about durability or recovery; it only frames.

use std::io::IoSlice;

use bytes::Bytes;

/// The unit magic: "FlushPoint Journal", format 1.
pub(crate) const MAGIC: [u8; 4] = *b"FPJ1";
/// The unit format version this build writes and reads.
pub(crate) const UNIT_VERSION: u8 = 1;
/// Bytes of a unit header.
pub(crate) const HEADER_BYTES: usize = 32;
/// Bytes after the body (its crc32).
pub(crate) const TRAILER_BYTES: usize = 4;
/// Longest keyspace name, in bytes. Why: the name is framed with one length byte.
pub const KEYSPACE_NAME_BYTES_MAX: usize = 255;

const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;

/// One write of a unit: `Some(value)` a put, `None` a delete.
pub(crate) type UnitOp = (Bytes, Option<Bytes>);

/// A unit's content: per keyspace, its ops in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Sections(pub(crate) Vec<(String, Vec<UnitOp>)>);

impl Sections {
    /// Key and value bytes carried (the overlay's accounting unit).
    pub(crate) fn byte_size(&self) -> u64 {
        self.0
            .iter()
            .flat_map(|(_, ops)| ops.iter())
            .map(|(k, v)| (k.len() + v.as_ref().map_or(0, |v| v.len())) as u64)
            .sum()
    }
}

/// A decoded unit header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) seq: u64,
    /// The highest seq known durable when this unit was written: a unit with a valid unit
    /// after it whose `synced_through` is at least its seq was durable once (recovery
    /// refuses to discard it).
    pub(crate) synced_through: u64,
    pub(crate) body_len: u32,
}

impl Header {
    /// Bytes of the whole unit.
    pub(crate) fn unit_len(&self) -> u64 {
        (HEADER_BYTES + TRAILER_BYTES) as u64 + u64::from(self.body_len)
    }
}

/// Where each value of a unit lies, counted from the unit's first byte: the walk `encode`
/// makes, without the bytes. The applier uses it to point at a value the journal keeps
/// (ADR 0013) rather than copy it; `encode` asserts it agrees.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    at: u64,
}

impl Layout {
    /// The layout at the start of a unit's first section.
    pub(crate) fn new() -> Self {
        Layout {
            at: (HEADER_BYTES + 4) as u64,
        }
    }

    /// Steps over a section's header.
    pub(crate) fn section(&mut self, name: &str) {
        self.at += 1 + name.len() as u64 + 4;
    }

    /// Steps over one op; a put's value starts at the returned offset.
    pub(crate) fn op(&mut self, key_len: usize, value_len: Option<usize>) -> Option<u64> {
        self.at += 1 + 4 + key_len as u64;
        value_len.map(|n| {
            let value_at = self.at + 4;
            self.at = value_at + n as u64;
            value_at
        })
    }
}

/// Bytes of a unit's encoding handed to the writer at a time ([`encode_in_chunks`]). Why:
/// a flush window's unit is tens of MiB; encoded whole it needed a buffer as large (about
/// 66 MiB resident at the peak of a 100k-block sync), in 1 MiB pieces the memory is one
/// chunk and a piece is written while it is still in the cache.
pub(crate) const ENCODE_CHUNK_BYTES: usize = 1 << 20;

/// The shortest value the encoder hands to the writer where it lies, instead of copying
/// it into its buffer. Why: a block part (64 KiB) or a large app value was copied once
/// more into the chunk buffer, and a heavy block's unit (about 1 MiB) faulted in a fresh
/// buffer on every save; below 4 KiB a copy costs less than the kernel's walk of one more
/// piece, and keeps the buffered runs long for the crc32.
pub(crate) const DIRECT_VALUE_BYTES_MIN: usize = 4 << 10;

/// The most pieces handed to the writer at once. Why: one vectored write takes at most
/// [`crate::fs::IO_SLICES_MAX`] of them.
const PIECES_MAX: usize = crate::fs::IO_SLICES_MAX;

/// The encoded length of a unit of `sections`. `None` when the body exceeds `u32::MAX`
/// bytes.
pub(crate) fn encoded_len(sections: &Sections) -> Option<u64> {
    let body_len = body_len(sections)?;
    Some((HEADER_BYTES + TRAILER_BYTES) as u64 + u64::from(body_len))
}

fn body_len(sections: &Sections) -> Option<u32> {
    let mut body_len: u64 = 4;
    for (name, ops) in &sections.0 {
        body_len += 1 + name.len() as u64 + 4;
        for (k, v) in ops {
            body_len += 1 + 4 + k.len() as u64 + v.as_ref().map_or(0, |v| 4 + v.len() as u64);
        }
    }
    u32::try_from(body_len).ok()
}

/// Encodes one unit whole. `None` when the body exceeds `u32::MAX` bytes.
#[cfg(test)]
pub(crate) fn encode(seq: u64, synced_through: u64, sections: &Sections) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    encode_in_chunks(seq, synced_through, sections, usize::MAX, |pieces| {
        for p in pieces {
            out.extend_from_slice(p);
        }
        Ok::<(), std::convert::Infallible>(())
    })?
    .expect("infallible");
    Some(out)
}

/// Encodes one unit and hands it to `write` in order, as lists of pieces (for one
/// vectored write each) of about `chunk_bytes` together (a list passes it by at most one
/// value) and at most [`crate::fs::IO_SLICES_MAX`] pieces: framing and short values
/// copied into a buffer, values of [`DIRECT_VALUE_BYTES_MIN`] or more where they lie.
/// `None` (nothing written) when the body exceeds `u32::MAX` bytes; else `write`'s first
/// error, or `Ok` once the whole unit, [`encoded_len`] bytes, was handed over.
pub(crate) fn encode_in_chunks<E>(
    seq: u64,
    synced_through: u64,
    sections: &Sections,
    chunk_bytes: usize,
    write: impl FnMut(&[IoSlice<'_>]) -> Result<(), E>,
) -> Option<Result<(), E>> {
    let body_len = body_len(sections)?;
    let unit_len = (HEADER_BYTES + TRAILER_BYTES) as u64 + u64::from(body_len);
    let mut out = Chunks {
        buf: Vec::with_capacity((unit_len as usize).min(chunk_bytes)),
        pieces: Vec::new(),
        pending: 0,
        chunk_bytes,
        written: 0,
        body_crc: crc32fast::Hasher::new(),
        crc_pieces: 0,
        crc_from: 0,
        write,
    };
    Some(out.unit(seq, synced_through, sections, body_len).map(|()| {
        debug_assert_eq!(out.written, unit_len, "the unit is encoded_len bytes");
    }))
}

/// One piece of a list handed to the writer.
#[derive(Debug, Clone, Copy)]
enum Piece<'a> {
    /// Bytes `start..end` of the encoder's buffer.
    Buffered { start: usize, end: usize },
    /// A value, where it lies.
    Direct(&'a [u8]),
}

/// The encoder: pieces collect until a chunk's worth (or [`PIECES_MAX`]) is pending, then
/// go to `write`; the body crc32 follows every body byte, in order.
struct Chunks<'a, W> {
    /// Framing and short values of the pending pieces.
    buf: Vec<u8>,
    pieces: Vec<Piece<'a>>,
    /// Bytes of the pending pieces.
    pending: usize,
    chunk_bytes: usize,
    /// Bytes handed to `write` so far.
    written: u64,
    body_crc: crc32fast::Hasher,
    /// Pending pieces already taken into `body_crc`.
    crc_pieces: usize,
    /// Where the body bytes of `buf` not yet in `body_crc` begin: the crc32 is taken over
    /// runs of buffered bytes, not per field (a field is often a 1-byte tag or a 4-byte
    /// length, and crc32fast's fast path wants long slices).
    crc_from: usize,
    write: W,
}

impl<'a, E, W: FnMut(&[IoSlice<'_>]) -> Result<(), E>> Chunks<'a, W> {
    /// Where the next byte lands, from the unit's first byte.
    fn at(&self) -> u64 {
        self.written + self.pending as u64
    }

    /// Copies `bytes` into the buffer, as the end of the last piece when that one is
    /// buffered too.
    fn buffered(&mut self, bytes: &[u8]) {
        let start = self.buf.len();
        self.buf.extend_from_slice(bytes);
        let end = self.buf.len();
        match self.pieces.last_mut() {
            Some(Piece::Buffered { end: last_end, .. }) if *last_end == start => *last_end = end,
            _ => self.pieces.push(Piece::Buffered { start, end }),
        }
        self.pending += bytes.len();
    }

    /// Body framing or a short value.
    fn body(&mut self, bytes: &[u8]) -> Result<(), E> {
        self.buffered(bytes);
        self.flush_if_full()
    }

    /// A value: where it lies when long, else copied.
    fn value(&mut self, v: &'a [u8]) -> Result<(), E> {
        if v.len() < DIRECT_VALUE_BYTES_MIN {
            return self.body(v);
        }
        self.pieces.push(Piece::Direct(v));
        self.pending += v.len();
        self.flush_if_full()
    }

    fn flush_if_full(&mut self) -> Result<(), E> {
        // One short of the limit: the trailer may still join the list as a piece.
        if self.pending >= self.chunk_bytes || self.pieces.len() >= PIECES_MAX - 1 {
            self.flush()?;
        }
        Ok(())
    }

    /// Takes the body bytes of the pieces pending since the last call into the crc32.
    fn crc_body_so_far(&mut self) {
        for p in &self.pieces[self.crc_pieces..] {
            match *p {
                Piece::Buffered { start, end } => {
                    let from = start.max(self.crc_from);
                    if from < end {
                        self.body_crc.update(&self.buf[from..end]);
                    }
                    self.crc_from = end;
                }
                Piece::Direct(v) => self.body_crc.update(v),
            }
        }
        self.crc_pieces = self.pieces.len();
    }

    fn flush(&mut self) -> Result<(), E> {
        self.crc_body_so_far();
        if !self.pieces.is_empty() {
            let slices: Vec<IoSlice<'_>> = self
                .pieces
                .iter()
                .map(|p| match *p {
                    Piece::Buffered { start, end } => IoSlice::new(&self.buf[start..end]),
                    Piece::Direct(v) => IoSlice::new(v),
                })
                .collect();
            (self.write)(&slices)?;
            self.written += self.pending as u64;
            self.pending = 0;
            self.pieces.clear();
            self.buf.clear();
            self.crc_pieces = 0;
            self.crc_from = 0;
        }
        Ok(())
    }

    fn unit(
        &mut self,
        seq: u64,
        synced_through: u64,
        sections: &'a Sections,
        body_len: u32,
    ) -> Result<(), E> {
        let mut header = Vec::with_capacity(HEADER_BYTES);
        header.extend_from_slice(&MAGIC);
        header.push(UNIT_VERSION);
        header.extend_from_slice(&[0; 3]);
        header.extend_from_slice(&seq.to_le_bytes());
        header.extend_from_slice(&synced_through.to_le_bytes());
        header.extend_from_slice(&body_len.to_le_bytes());
        let header_crc = crc32fast::hash(&header);
        header.extend_from_slice(&header_crc.to_le_bytes());
        debug_assert_eq!(header.len(), HEADER_BYTES);
        self.buffered(&header);
        // The header is not body.
        self.crc_from = self.buf.len();
        self.body(&(sections.0.len() as u32).to_le_bytes())?;
        let mut layout = Layout::new();
        for (name, ops) in &sections.0 {
            layout.section(name);
            assert!(
                !name.is_empty() && name.len() <= KEYSPACE_NAME_BYTES_MAX,
                "invariant: keyspace names are checked when the keyspace is opened"
            );
            self.body(&[name.len() as u8])?;
            self.body(name.as_bytes())?;
            self.body(&(ops.len() as u32).to_le_bytes())?;
            for (k, v) in ops {
                let value_at = layout.op(k.len(), v.as_ref().map(|v| v.len()));
                let tag = if v.is_some() { OP_PUT } else { OP_DELETE };
                self.body(&[tag])?;
                self.body(&(k.len() as u32).to_le_bytes())?;
                self.body(k)?;
                if let Some(v) = v {
                    self.body(&(v.len() as u32).to_le_bytes())?;
                    debug_assert_eq!(value_at, Some(self.at()), "layout agrees");
                    self.value(v)?;
                }
            }
        }
        debug_assert_eq!(self.at(), (HEADER_BYTES as u64) + u64::from(body_len));
        self.crc_body_so_far();
        let body_crc = std::mem::take(&mut self.body_crc).finalize();
        self.buffered(&body_crc.to_le_bytes());
        // The trailer is not body: nothing after it goes into a crc.
        self.crc_pieces = self.pieces.len();
        self.crc_from = self.buf.len();
        self.flush()
    }
}

/// What the bytes at an offset are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// A whole, valid unit.
    Valid(Header, Sections),
    /// Not a unit: why (for the error a refusal carries).
    Invalid(crate::error::CorruptReason),
}

/// The little-endian u32 at `at` (the caller checked the length).
pub(crate) fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The little-endian u64 at `at` (the caller checked the length).
pub(crate) fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Decodes only the header at the start of `buf` (checked magic, version and crc).
pub(crate) fn decode_header(buf: &[u8]) -> Result<Header, crate::error::CorruptReason> {
    use crate::error::CorruptReason as R;
    if buf.len() < HEADER_BYTES {
        return Err(R::Truncated {
            needed: HEADER_BYTES - buf.len(),
        });
    }
    if buf[..4] != MAGIC {
        return Err(R::Invalid("unit magic"));
    }
    let stored = le_u32(buf, 28);
    let computed = crc32fast::hash(&buf[..28]);
    if stored != computed {
        return Err(R::Checksum { stored, computed });
    }
    if buf[4] != UNIT_VERSION {
        return Err(R::UnknownVersion(buf[4]));
    }
    Ok(Header {
        seq: le_u64(buf, 8),
        synced_through: le_u64(buf, 16),
        body_len: le_u32(buf, 24),
    })
}

/// Decodes the unit at the start of `buf` (which may run on past it).
pub(crate) fn decode_at(buf: &[u8]) -> Decoded {
    use crate::error::CorruptReason as R;
    let header = match decode_header(buf) {
        Ok(h) => h,
        Err(r) => return Decoded::Invalid(r),
    };
    let len = header.unit_len();
    if (buf.len() as u64) < len {
        return Decoded::Invalid(R::Truncated {
            needed: (len - buf.len() as u64) as usize,
        });
    }
    let body = &buf[HEADER_BYTES..HEADER_BYTES + header.body_len as usize];
    let stored = le_u32(buf, HEADER_BYTES + body.len());
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Decoded::Invalid(R::Checksum { stored, computed });
    }
    match decode_body(body) {
        Ok(sections) => Decoded::Valid(header, sections),
        Err(r) => Decoded::Invalid(r),
    }
}

fn decode_body(body: &[u8]) -> Result<Sections, crate::error::CorruptReason> {
    use crate::error::CorruptReason as R;
    let mut at = 0usize;
    let take = |at: &mut usize, n: usize| -> Result<&[u8], R> {
        let end = at.checked_add(n).ok_or(R::Invalid("length overflow"))?;
        if end > body.len() {
            return Err(R::Truncated {
                needed: end - body.len(),
            });
        }
        let s = &body[*at..end];
        *at = end;
        Ok(s)
    };
    let u32_at = |at: &mut usize| -> Result<u32, R> {
        Ok(u32::from_le_bytes(
            take(at, 4)?.try_into().expect("4 bytes"),
        ))
    };
    let section_count = u32_at(&mut at)?;
    let mut sections = Vec::new();
    for _ in 0..section_count {
        let name_len = take(&mut at, 1)?[0] as usize;
        if name_len == 0 {
            return Err(R::Invalid("empty keyspace name"));
        }
        let name = std::str::from_utf8(take(&mut at, name_len)?)
            .map_err(|_| R::Invalid("keyspace name is not UTF-8"))?
            .to_string();
        let op_count = u32_at(&mut at)?;
        let mut ops = Vec::new();
        for _ in 0..op_count {
            let tag = take(&mut at, 1)?[0];
            let key_len = u32_at(&mut at)? as usize;
            let key = Bytes::copy_from_slice(take(&mut at, key_len)?);
            let value = match tag {
                OP_PUT => {
                    let value_len = u32_at(&mut at)? as usize;
                    Some(Bytes::copy_from_slice(take(&mut at, value_len)?))
                }
                OP_DELETE => None,
                _ => return Err(R::Invalid("unit op tag")),
            };
            ops.push((key, value));
        }
        sections.push((name, ops));
    }
    if at != body.len() {
        return Err(R::Trailing(body.len() - at));
    }
    Ok(Sections(sections))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Sections {
        Sections(vec![
            (
                "blocks".to_string(),
                vec![
                    (Bytes::from_static(b"k1"), Some(Bytes::from_static(b"v1"))),
                    (Bytes::from_static(b"k2"), None),
                ],
            ),
            (
                "state".to_string(),
                vec![(Bytes::from_static(b""), Some(Bytes::from_static(b"")))],
            ),
        ])
    }

    #[test]
    fn a_unit_decodes_to_what_was_encoded() {
        let bytes = encode(7, 5, &sample()).unwrap();
        match decode_at(&bytes) {
            Decoded::Valid(h, s) => {
                assert_eq!((h.seq, h.synced_through), (7, 5));
                assert_eq!(h.unit_len(), bytes.len() as u64);
                assert_eq!(s, sample());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_layout_points_at_every_value_of_an_encoded_unit() {
        let s = sample();
        let bytes = encode(3, 2, &s).unwrap();
        let mut layout = Layout::new();
        let mut seen = 0;
        for (name, ops) in &s.0 {
            layout.section(name);
            for (k, v) in ops {
                let at = layout.op(k.len(), v.as_ref().map(|v| v.len()));
                assert_eq!(at.is_some(), v.is_some());
                if let (Some(at), Some(v)) = (at, v) {
                    let at = at as usize;
                    assert_eq!(&bytes[at..at + v.len()], &v[..], "{name} {k:?}");
                    // The four bytes before a value are its length.
                    assert_eq!(le_u32(&bytes, at - 4) as usize, v.len());
                    seen += 1;
                }
            }
        }
        assert_eq!(seen, 2);
        // A wrong layout (one byte off) does not point at the values.
        let mut off = Layout::new();
        off.at += 1;
        off.section("blocks");
        let at = off.op(2, Some(2)).unwrap() as usize;
        assert_ne!(&bytes[at..at + 2], b"v1");
    }

    #[test]
    fn a_unit_in_chunks_is_the_unit_whole() {
        let whole = encode(9, 4, &sample()).unwrap();
        assert_eq!(encoded_len(&sample()), Some(whole.len() as u64));
        for chunk_bytes in [1, 2, 7, 33, 64, whole.len(), usize::MAX] {
            let mut pieces: Vec<Vec<u8>> = Vec::new();
            encode_in_chunks(9, 4, &sample(), chunk_bytes, |list| {
                pieces.push(list.iter().flat_map(|p| p.iter().copied()).collect());
                Ok::<(), ()>(())
            })
            .unwrap()
            .unwrap();
            assert_eq!(pieces.concat(), whole, "chunks of {chunk_bytes}");
            // Each piece but the last is at least a chunk (so at most one past a chunk's
            // worth of the next value).
            if chunk_bytes < whole.len() {
                assert!(pieces.len() > 1, "chunks of {chunk_bytes}");
                assert!(
                    pieces[..pieces.len() - 1]
                        .iter()
                        .all(|p| p.len() >= chunk_bytes)
                );
            }
        }
        // The writer's error stops the encoding at once.
        let mut calls = 0;
        let r = encode_in_chunks(9, 4, &sample(), 8, |_| {
            calls += 1;
            if calls == 2 { Err("disk full") } else { Ok(()) }
        });
        assert_eq!((r, calls), (Some(Err("disk full")), 2));
    }

    /// Sections with values on both sides of [`DIRECT_VALUE_BYTES_MIN`], long runs of
    /// them back to back, and short ops between.
    fn with_long_values(long_values: usize) -> Sections {
        let long = |i: usize, len: usize| Bytes::from(vec![(i % 251) as u8; len]);
        let mut ops = Vec::new();
        for i in 0..long_values {
            ops.push((
                Bytes::from(format!("p{i}")),
                Some(long(i, DIRECT_VALUE_BYTES_MIN + i % 3)),
            ));
            if i % 5 == 0 {
                ops.push((Bytes::from(format!("s{i}")), Some(long(i, 9))));
                ops.push((Bytes::from(format!("d{i}")), None));
            }
        }
        ops.push((
            Bytes::from_static(b"edge"),
            Some(long(7, DIRECT_VALUE_BYTES_MIN - 1)),
        ));
        Sections(vec![
            ("blocks".to_string(), ops),
            (
                "app".to_string(),
                vec![(Bytes::from_static(b"a"), Some(long(3, 70_000)))],
            ),
        ])
    }

    /// The oracle is the decoder (it reads the unit back with its own walk, and checks the
    /// crc32s), not the encoder.
    #[test]
    fn long_values_are_handed_over_where_they_lie_and_the_unit_decodes_whole() {
        for (long_values, chunk_bytes) in [
            (3, usize::MAX),
            (3, 1),
            (40, 10_000),
            (40, ENCODE_CHUNK_BYTES),
            // More pieces than one vectored write takes, in one chunk.
            (PIECES_MAX + 10, usize::MAX),
        ] {
            let sections = with_long_values(long_values);
            let values: Vec<&Bytes> = sections
                .0
                .iter()
                .flat_map(|(_, ops)| ops.iter().filter_map(|(_, v)| v.as_ref()))
                .collect();
            let mut whole = Vec::new();
            let mut lists = 0;
            let mut direct = 0;
            encode_in_chunks(3, 2, &sections, chunk_bytes, |list| {
                lists += 1;
                assert!(
                    list.len() <= crate::fs::IO_SLICES_MAX,
                    "{} pieces",
                    list.len()
                );
                for p in list {
                    // A piece that starts where a value lies is that value, not a copy.
                    if values.iter().any(|v| v.as_ptr() == p.as_ptr()) {
                        assert!(p.len() >= DIRECT_VALUE_BYTES_MIN);
                        direct += 1;
                    }
                    whole.extend_from_slice(p);
                }
                Ok::<(), ()>(())
            })
            .unwrap()
            .unwrap();
            let long_count = values
                .iter()
                .filter(|v| v.len() >= DIRECT_VALUE_BYTES_MIN)
                .count();
            assert_eq!(direct, long_count, "every long value, and no short one");
            assert_eq!(Some(whole.len() as u64), encoded_len(&sections));
            match decode_at(&whole) {
                Decoded::Valid(h, s) => {
                    assert_eq!((h.seq, h.synced_through), (3, 2));
                    assert_eq!(s, sections);
                }
                other => panic!("{long_values} values, chunks of {chunk_bytes}: {other:?}"),
            }
            if long_values > PIECES_MAX {
                assert!(lists > 1, "split at the pieces' limit");
            }
        }
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_invalid() {
        let bytes = encode(1, 0, &sample()).unwrap();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                assert!(
                    matches!(decode_at(&b), Decoded::Invalid(_)),
                    "bit {bit} of byte {i}"
                );
            }
            assert!(
                matches!(decode_at(&bytes[..i]), Decoded::Invalid(_)),
                "cut {i}"
            );
        }
    }
}
