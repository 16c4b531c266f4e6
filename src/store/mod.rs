//! The node-facing stores over any [`Db`]: the block store and the state store.
//!
//! Invariant: each public write is one batch (one synced write); the stores never write to
//! another database.

mod block_store;
mod state_store;

pub use block_store::{BlockStore, PRUNE_BATCH_BLOCKS};
pub use state_store::{HISTORY_CHECKPOINT_INTERVAL, StateStore};

use crate::codec::keys;
use crate::db::Db;
use crate::error::{Error, Result};
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

/// A poison latch: the first failed write's cause, reported by every later call.
/// The flag is an atomic so the check on every read costs one load, not a lock.
#[derive(Debug, Default)]
pub(crate) struct Poison {
    set: std::sync::atomic::AtomicBool,
    cause: std::sync::Mutex<Option<String>>,
}

impl Poison {
    pub(crate) fn check(&self, db: &str) -> Result<()> {
        if !self.set.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        Err(Error::Poisoned {
            db: db.to_string(),
            cause: self
                .cause
                .lock()
                .expect("poison lock")
                .clone()
                .unwrap_or_default(),
        })
    }
    pub(crate) fn set(&self, cause: &Error) {
        let mut p = self.cause.lock().expect("poison lock");
        if p.is_none() {
            *p = Some(cause.to_string());
        }
        self.set.store(true, std::sync::atomic::Ordering::Release);
    }
    pub(crate) fn is_set(&self) -> bool {
        self.set.load(std::sync::atomic::Ordering::Acquire)
    }
}
