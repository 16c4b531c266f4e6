//! The one poison latch every handle uses (databases, holding overlays, stores, the node):
//! the first failed write's kind and message, reported by every later call.
//!
//! Invariant: once set, it stays set for the handle's life: a failed write or fsync leaves
//! the durable content unknown and is never retried; only a restart (the handshake) clears
//! it. Invariant: the first cause wins; a later failure (often a `Poisoned` itself) does not
//! replace it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, PoisonCause, Result};

/// A poison latch. The flag is an atomic so the check on every read costs one load.
#[derive(Debug, Default)]
pub(crate) struct Poison {
    set: AtomicBool,
    cause: Mutex<Option<PoisonCause>>,
}

impl Poison {
    /// `Err(Error::Poisoned)` naming `db` and the first cause, once set.
    pub(crate) fn check(&self, db: &str) -> Result<()> {
        if !self.set.load(Ordering::Acquire) {
            return Ok(());
        }
        let cause = self.cause.lock().expect("poison lock").clone();
        Err(Error::Poisoned {
            db: db.to_string(),
            cause: cause.expect("invariant: the cause is recorded before the flag is set"),
        })
    }

    /// Records `cause` (if it is the first) and sets the latch.
    pub(crate) fn set(&self, cause: &Error) {
        let mut p = self.cause.lock().expect("poison lock");
        if p.is_none() {
            *p = Some(match cause {
                // Poisoned by a poisoned handle: keep the original failure.
                Error::Poisoned { cause, .. } => cause.clone(),
                e => PoisonCause {
                    kind: e.kind(),
                    message: e.to_string(),
                },
            });
        }
        self.set.store(true, Ordering::Release);
    }

    /// True once set.
    pub(crate) fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }
}
