//! The crate's one counter shape: counts of what happened (batches synced, `sync_data`
//! calls, units appended), kept live by the code that does it and read as a snapshot by
//! whoever asks.
//!
//! [`counts!`] declares a family from one list of documented fields. It generates:
//! * the live type: one [`Counter`] (a count) or [`Peak`] (a high-water mark) per field,
//!   `Default` and `Debug`, shared by `Arc` between the counting code and its readers, and
//!   its `snapshot()`, which reads every field into
//! * the snapshot type: one public `u64` per field (plus, after them, any snapshot fields
//!   that come from elsewhere, passed to `snapshot()`), `Copy`, `Default`, `PartialEq`,
//!   `Eq`, `Debug`, `serde::Serialize`, and `Sub`: `later - earlier` is what happened
//!   between two snapshots (a count's difference; a peak keeps the later value).
//!
//! The families: `db::SyncCounters` → `db::SyncCounts` (a `CountingDb`'s batches),
//! `db::BackendCounters` → `db::BackendCounts` (a redb file's I/O calls) and the journal
//! engine's own counters → `journal::JournalCounts` (its I/O and work, with its index's
//! `BackendCounts` inside).
//!
//! Invariant: every update and read is `SeqCst`: a snapshot taken after a counted operation
//! that another thread finished (and signalled) includes it. Each field is read on its own,
//! so a snapshot taken while operations run may split one operation's counts.
//! Invariant: imports nothing from the crate (layer 0).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// A count: only ever added to.
#[derive(Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`.
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::SeqCst);
    }
    /// The count so far.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl fmt::Debug for Counter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A high-water mark: the largest value it was raised to.
#[derive(Default)]
pub(crate) struct Peak(AtomicU64);

impl Peak {
    /// Raises the mark to `n` if `n` is above it.
    pub(crate) fn raise(&self, n: u64) {
        self.0.fetch_max(n, Ordering::SeqCst);
    }
    /// The mark so far.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl fmt::Debug for Peak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// Declares a counter family: a live type and its snapshot type (see the module docs).
///
/// ```text
/// counts! {
///     /// Live counters of …
///     pub struct LiveName =>
///     /// A snapshot of …
///     pub struct SnapshotName {
///         /// What this field counts.
///         field_a: count,
///         /// What this field is the most of.
///         field_b: peak,
///     }
///     // Optional: snapshot fields kept elsewhere, passed to `snapshot(…)`.
///     with {
///         /// The nested family's counts.
///         nested: OtherSnapshot,
///     }
/// }
/// ```
macro_rules! counts {
    (@live count) => { $crate::counts::Counter };
    (@live peak) => { $crate::counts::Peak };
    (@sub count, $later:expr, $earlier:expr) => { $later - $earlier };
    (@sub peak, $later:expr, $earlier:expr) => { $later };
    (
        $(#[$live_meta:meta])*
        $live_vis:vis struct $Live:ident =>
        $(#[$snap_meta:meta])*
        $snap_vis:vis struct $Snap:ident {
            $( $(#[$field_meta:meta])* $field:ident: $kind:ident ),* $(,)?
        }
        $( with {
            $( $(#[$with_meta:meta])* $with:ident: $With:ty ),* $(,)?
        } )?
    ) => {
        $(#[$live_meta])*
        ///
        #[doc = concat!(
            "The live side of a counter family (the crate's one counter shape, declared by ",
            "`counts!`): each field a count or a peak, updated `SeqCst` by the code that ",
            "does the work; `snapshot()` reads them into a [`", stringify!($Snap), "`].",
        )]
        #[derive(Debug, Default)]
        $live_vis struct $Live {
            $( $(#[$field_meta])* pub(crate) $field: $crate::counts::counts!(@live $kind), )*
        }

        impl $Live {
            #[doc = concat!("The counts so far, as a [`", stringify!($Snap), "`].")]
            $live_vis fn snapshot(&self $($(, $with: $With)*)?) -> $Snap {
                $Snap {
                    $( $field: self.$field.get(), )*
                    $($( $with, )*)?
                }
            }
        }

        $(#[$snap_meta])*
        ///
        /// A snapshot of a counter family (the crate's one counter shape): `Copy`,
        /// serializable, and `later - earlier` is what happened between two snapshots (a
        /// count's difference; a peak, the most at once, keeps the later snapshot's).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
        $snap_vis struct $Snap {
            $( $(#[$field_meta])* pub $field: u64, )*
            $($( $(#[$with_meta])* pub $with: $With, )*)?
        }

        impl ::std::ops::Sub for $Snap {
            type Output = $Snap;
            fn sub(self, earlier: $Snap) -> $Snap {
                $Snap {
                    $( $field: $crate::counts::counts!(@sub $kind, self.$field, earlier.$field), )*
                    $($( $with: self.$with - earlier.$with, )*)?
                }
            }
        }
    };
}
pub(crate) use counts;
