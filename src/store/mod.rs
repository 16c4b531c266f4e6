//! The node-facing stores over any [`Db`]: the block store and the state store.
//!
//! Invariant: each public write is one batch (one synced write); the stores never write to
//! another database.

mod block_store;
mod state_store;

pub use block_store::{BlockStore, PRUNE_BATCH_BLOCKS};
pub use state_store::{
    HISTORY_CHECKPOINT_INTERVAL, STATE_PRUNE_BATCH_HEIGHTS, StatePruneReport, StateStore,
};

use crate::codec::keys;
use crate::db::Db;
use crate::error::{Error, Result};
pub(crate) use crate::poison::Poison;
use crate::types::{Record, decode};

/// Reads and decodes the record at `key`, naming the database, key and height on corruption.
pub(crate) fn get_record<T: Record>(db: &dyn Db, key: &[u8]) -> Result<Option<T>> {
    match db.get(key)? {
        None => Ok(None),
        Some(bytes) => decode::<T>(key, &bytes)
            .map(Some)
            .map_err(|reason| Error::Corrupt {
                db: db.name().to_string(),
                key: key.to_vec(),
                height: keys::height_of(key),
                reason,
            }),
    }
}
