//! The demo app's transactions and their bytes.
//!
//! Format (binary): `1 ‖ klen(u16) ‖ key ‖ value` sets a key; `2 ‖ klen ‖ key` deletes one;
//! `3 ‖ address(32) ‖ power(u64)` updates a validator; `4 ‖ max_bytes ‖ max_gas ‖ max_age`
//! (u64 each) changes consensus params; `5 ‖ height(u64)` writes the halt height param;
//! `6 ‖ klen ‖ key ‖ delta(u64)` adds to a value. Integers are big-endian.
//!
//! Invariant: `decode(encode(tx)) == Some(tx)` for every transaction whose key fits a
//! `u16` length; bytes in no shape above decode to `None` (the app fails them with code 1).

use bytes::{BufMut, Bytes, BytesMut};

use crate::demo::types::{ConsensusParams, Validator};

/// A demo-app transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tx {
    /// Set `key` to `value`.
    Set(Bytes, Bytes),
    /// Delete `key`.
    Delete(Bytes),
    /// Validator update (power 0 removes).
    Validator(Validator),
    /// New consensus params.
    Params(ConsensusParams),
    /// Write the halt height param.
    HaltAt(u64),
    /// Read `key` and add `delta` (wrapping) to the big-endian u64 in its value's first 8
    /// bytes, keeping the rest of the value; an absent key reads as the 8-byte value 0. A
    /// value shorter than 8 bytes fails the transaction (code 2, nothing written). The one
    /// transaction whose execution reads state: what prefetch warms.
    Add(Bytes, u64),
}

impl Tx {
    /// The transaction's bytes.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        match self {
            Tx::Set(k, v) => {
                b.put_u8(1);
                b.put_u16(k.len() as u16);
                b.put_slice(k);
                b.put_slice(v);
            }
            Tx::Delete(k) => {
                b.put_u8(2);
                b.put_u16(k.len() as u16);
                b.put_slice(k);
            }
            Tx::Validator(v) => {
                b.put_u8(3);
                b.put_slice(&v.address);
                b.put_u64(v.power);
            }
            Tx::Params(p) => {
                b.put_u8(4);
                b.put_u64(p.block_max_bytes);
                b.put_u64(p.block_max_gas);
                b.put_u64(p.evidence_max_age_blocks);
            }
            Tx::HaltAt(h) => {
                b.put_u8(5);
                b.put_u64(*h);
            }
            Tx::Add(k, delta) => {
                b.put_u8(6);
                b.put_u16(k.len() as u16);
                b.put_slice(k);
                b.put_u64(*delta);
            }
        }
        b.freeze()
    }

    /// Parses a transaction.
    pub fn decode(tx: &[u8]) -> Option<Tx> {
        let (&op, rest) = tx.split_first()?;
        let key_and_rest = |rest: &[u8]| -> Option<(Bytes, Bytes)> {
            let n = u16::from_be_bytes(rest.get(..2)?.try_into().ok()?) as usize;
            let key = rest.get(2..2 + n)?;
            Some((
                Bytes::copy_from_slice(key),
                Bytes::copy_from_slice(&rest[2 + n..]),
            ))
        };
        let u64_at = |s: &[u8], i: usize| -> Option<u64> {
            Some(u64::from_be_bytes(s.get(i..i + 8)?.try_into().ok()?))
        };
        match op {
            1 => key_and_rest(rest).map(|(k, v)| Tx::Set(k, v)),
            2 => match key_and_rest(rest)? {
                (k, v) if v.is_empty() => Some(Tx::Delete(k)),
                _ => None,
            },
            3 if rest.len() == 40 => Some(Tx::Validator(Validator {
                address: rest[..32].try_into().ok()?,
                power: u64_at(rest, 32)?,
            })),
            4 if rest.len() == 24 => Some(Tx::Params(ConsensusParams {
                block_max_bytes: u64_at(rest, 0)?,
                block_max_gas: u64_at(rest, 8)?,
                evidence_max_age_blocks: u64_at(rest, 16)?,
            })),
            5 if rest.len() == 8 => Some(Tx::HaltAt(u64_at(rest, 0)?)),
            6 => match key_and_rest(rest)? {
                (k, d) if d.len() == 8 => Some(Tx::Add(k, u64_at(&d, 0)?)),
                _ => None,
            },
            _ => None,
        }
    }
}
