//! Executing a block's transactions, and the app hash of a committed block: what the demo
//! app computes, apart from how it reads and stores state.
//!
//! App hash: `sha256(previous app hash ‖ height ‖ the block's writes in key order)`, each
//! write `klen(u64) ‖ key ‖ 1 ‖ vlen(u64) ‖ value` or `klen(u64) ‖ key ‖ 0` for a delete: a
//! hash chain that commits to every state change, so equal hashes mean equal states.
//!
//! Invariant: pure: the same transactions over the same state give the same writes,
//! results and hash; state is read only through the `read` given, never written.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};
use sha2::{Digest, Sha256};

use super::layout::HALT_HEIGHT_KEY;
use super::tx::Tx;
use crate::demo::types::{BlockResults, TxResult};
use crate::error::Result;
use crate::types::Hash;

/// A block's writes, in key order: the new value, or `None` for a delete.
pub(super) type Writes = BTreeMap<Bytes, Option<Bytes>>;

/// The result code of a transaction that succeeded.
const CODE_OK: u32 = 0;
/// The result code of bytes that decode as no transaction.
const CODE_UNDECODABLE: u32 = 1;
/// The result code of an [`Tx::Add`] whose value is shorter than 8 bytes.
const CODE_ADD_SHORT_VALUE: u32 = 2;

/// Executes `txs` in order: the block's writes and results. `read` reads an app key as the
/// block found it (the block's own earlier writes are read here first).
pub(super) fn execute(
    txs: &[Bytes],
    mut read: impl FnMut(&Bytes) -> Result<Option<Bytes>>,
) -> Result<(Writes, BlockResults)> {
    let mut writes = Writes::new();
    let mut results = BlockResults::default();
    for tx in txs {
        let code = match Tx::decode(tx) {
            Some(Tx::Set(k, v)) => {
                writes.insert(k, Some(v));
                CODE_OK
            }
            Some(Tx::Delete(k)) => {
                writes.insert(k, None);
                CODE_OK
            }
            Some(Tx::Validator(v)) => {
                results.validator_updates.push(v);
                CODE_OK
            }
            Some(Tx::Params(p)) => {
                results.param_updates = Some(p);
                CODE_OK
            }
            Some(Tx::HaltAt(at)) => {
                writes.insert(
                    Bytes::from_static(HALT_HEIGHT_KEY),
                    Some(Bytes::copy_from_slice(&at.to_be_bytes())),
                );
                CODE_OK
            }
            Some(Tx::Add(k, delta)) => {
                let old = match writes.get(&k) {
                    Some(w) => w.clone(),
                    None => read(&k)?,
                }
                .unwrap_or_else(|| Bytes::from_static(&[0; 8]));
                match old.get(..8) {
                    Some(head) => {
                        let n = u64::from_be_bytes(head.try_into().expect("8 bytes"))
                            .wrapping_add(delta);
                        let mut v = BytesMut::with_capacity(old.len());
                        v.put_u64(n);
                        v.put_slice(&old[8..]);
                        writes.insert(k, Some(v.freeze()));
                        CODE_OK
                    }
                    None => CODE_ADD_SHORT_VALUE,
                }
            }
            None => CODE_UNDECODABLE,
        };
        results.tx_results.push(TxResult {
            code,
            data: Bytes::new(),
        });
    }
    Ok((writes, results))
}

/// The app hash of block `height` with `writes`, after `prev` (see the module doc).
pub(super) fn app_hash(prev: &Hash, height: u64, writes: &Writes) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update(prev);
    hasher.update(height.to_be_bytes());
    for (k, v) in writes {
        hasher.update((k.len() as u64).to_be_bytes());
        hasher.update(k);
        match v {
            Some(v) => {
                hasher.update([1]);
                hasher.update((v.len() as u64).to_be_bytes());
                hasher.update(v);
            }
            None => hasher.update([0]),
        }
    }
    hasher.finalize().into()
}
