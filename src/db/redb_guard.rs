//! The one boundary between the crate and redb: every call into redb runs under
//! [`RedbGuard::call`].
//!
//! redb trusts the pages it reads: a damaged page (one zeroed 4 KiB page is enough) can make
//! it panic ("internal error: entered unreachable code") instead of returning an error. The
//! guard catches such a panic and returns [`Error::CorruptFile`] naming the file, so no
//! panic reaches a caller.
//! Invariant: after a caught panic the guard is latched: every later call returns the same
//! `CorruptFile` without running (redb's state after a panic is unknown: its own locks may
//! be poisoned, a transaction half applied), and the file's writes are fenced
//! ([`RedbGuard::fence`]), so nothing redb does afterwards — its close included — writes to
//! the damaged file.
//! Invariant: a guarded closure takes none of the crate's mutexes around its redb call
//! (a panic unwinding through a held `std` mutex would poison it, and the next lock would
//! panic); callers holding one run the guard inside the lock's scope.

use std::any::Any;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Once, OnceLock};

use crate::error::{EnginePanic, Error, Result};
use crate::poison::Poison;

thread_local! {
    /// How many guarded redb calls this thread is inside (nested calls count each).
    static IN_REDB_CALL: Cell<u32> = const { Cell::new(0) };
}

/// True while this thread runs a redb call under the crate's redb guard: a panic now is caught and
/// returned as [`Error::CorruptFile`]. For a panic hook ([`quiet_caught_redb_panics`]).
pub fn inside_guarded_redb_call() -> bool {
    IN_REDB_CALL.with(|d| d.get() > 0)
}

/// Installs (once per process) a panic hook that prints nothing for a panic inside a
/// guarded redb call — the caller gets it as [`Error::CorruptFile`], message included — and
/// hands every other panic to the hook installed before, so real bugs still print.
/// std's hook is process-wide: a tool calls this at start; a library embedder may too.
pub fn quiet_caught_redb_panics() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !inside_guarded_redb_call() {
                previous(info);
            }
        }));
    });
}

/// Counts this thread into a guarded call for its lifetime (also while unwinding).
struct Inside;

impl Inside {
    fn enter() -> Inside {
        IN_REDB_CALL.with(|d| d.set(d.get() + 1));
        Inside
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        IN_REDB_CALL.with(|d| d.set(d.get() - 1));
    }
}

/// The text of a panic's payload (`panic!` with a message gives a `&str` or a `String`).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".to_string()
    }
}

/// One redb file's boundary: runs calls into redb, turns a panic into
/// [`Error::CorruptFile`], and latches after the first.
#[derive(Debug)]
pub(crate) struct RedbGuard {
    db: String,
    path: Option<PathBuf>,
    /// The first caught panic: the operation and redb's message.
    caught: OnceLock<(&'static str, EnginePanic)>,
    /// Set with the first caught panic; fences the file's writes (`CountingBackend`).
    fence: Arc<Poison>,
    /// Another latch set with it (the journal engine's poison).
    also: Option<Arc<Poison>>,
}

impl RedbGuard {
    /// The guard of database `db` in the file at `path` (`None`: a backend without a path).
    pub(crate) fn new(db: &str, path: Option<&Path>) -> Self {
        RedbGuard {
            db: db.to_string(),
            path: path.map(Path::to_path_buf),
            caught: OnceLock::new(),
            fence: Arc::default(),
            also: None,
        }
    }

    /// Sets `poison` too on the first caught panic (an engine that owns the file).
    pub(crate) fn poisoning(mut self, poison: Arc<Poison>) -> Self {
        self.also = Some(poison);
        self
    }

    /// The latch a file's backend is fenced by: set once a panic was caught.
    pub(crate) fn fence(&self) -> Arc<Poison> {
        self.fence.clone()
    }

    /// `Err(CorruptFile)` once a panic was caught.
    pub(crate) fn check(&self) -> Result<()> {
        match self.caught.get() {
            None => Ok(()),
            Some((op, cause)) => Err(self.error(op, cause.clone())),
        }
    }

    /// Runs `f` (a call into redb), unless a panic was caught before; a panic in `f` becomes
    /// [`Error::CorruptFile`] and latches the guard.
    pub(crate) fn call<T>(&self, op: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.check()?;
        let inside = Inside::enter();
        let r = catch_unwind(AssertUnwindSafe(f));
        drop(inside);
        r.unwrap_or_else(|payload| Err(self.caught(op, &*payload)))
    }

    /// Drops `value` (a redb handle whose drop calls into redb) under the guard: a panic in
    /// its drop latches the guard and is logged, as a drop has no caller to return it to.
    /// After a caught panic the drop still runs (it releases memory and file handles), its
    /// writes fenced.
    pub(crate) fn drop_guarded<T>(&self, op: &'static str, value: T) {
        let inside = Inside::enter();
        let r = catch_unwind(AssertUnwindSafe(move || drop(value)));
        drop(inside);
        if let Err(payload) = r {
            let err = self.caught(op, &*payload);
            tracing::error!(error = %err, "redb panicked while a handle was dropped");
        }
    }

    /// Records a caught panic (the first one's cause is kept) and returns its error.
    fn caught(&self, op: &'static str, payload: &(dyn Any + Send)) -> Error {
        let cause = EnginePanic {
            message: panic_message(payload),
        };
        let _ = self.caught.set((op, cause));
        let (op, cause) = self.caught.get().expect("set above");
        let err = self.error(op, cause.clone());
        self.fence.set(&err);
        if let Some(p) = &self.also {
            p.set(&err);
        }
        err
    }

    fn error(&self, op: &'static str, cause: EnginePanic) -> Error {
        Error::CorruptFile {
            db: self.db.clone(),
            path: self.path.clone(),
            op,
            cause,
        }
    }
}

/// A redb handle (a `Database`, a transaction) dropped under its file's guard
/// ([`RedbGuard::drop_guarded`]); reads through to the handle.
pub(crate) struct GuardedDrop<T> {
    /// `Some` until dropped or taken by [`GuardedDrop::into_inner`].
    value: Option<T>,
    guard: Arc<RedbGuard>,
    op: &'static str,
}

impl<T> GuardedDrop<T> {
    /// `value`, to be dropped under `guard`, naming `op` if its drop panics.
    pub(crate) fn new(guard: Arc<RedbGuard>, op: &'static str, value: T) -> Self {
        GuardedDrop {
            value: Some(value),
            guard,
            op,
        }
    }

    /// The handle itself, for a call that consumes it (a commit): run that call under the
    /// guard.
    pub(crate) fn into_inner(mut self) -> T {
        self.value.take().expect("invariant: present until taken")
    }
}

impl<T> std::ops::Deref for GuardedDrop<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value.as_ref().expect("invariant: present until taken")
    }
}

impl<T> std::ops::DerefMut for GuardedDrop<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value.as_mut().expect("invariant: present until taken")
    }
}

impl<T> Drop for GuardedDrop<T> {
    fn drop(&mut self) {
        if let Some(value) = self.value.take() {
            self.guard.drop_guarded(self.op, value);
        }
    }
}

/// An iterator over redb (a range) whose every `next` runs under its file's guard and whose
/// drop does too. After an error it ends (a caught panic would only repeat).
pub(crate) struct GuardedIter<'g, I> {
    inner: Option<I>,
    guard: &'g RedbGuard,
    op: &'static str,
}

impl<'g, I> GuardedIter<'g, I> {
    /// `inner`'s items, each taken under `guard`, naming `op` on a panic.
    pub(crate) fn new(guard: &'g RedbGuard, op: &'static str, inner: I) -> Self {
        GuardedIter {
            inner: Some(inner),
            guard,
            op,
        }
    }
}

impl<T, I: Iterator<Item = Result<T>>> Iterator for GuardedIter<'_, I> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        let inner = self.inner.as_mut()?;
        let item = match self.guard.call(self.op, || Ok(inner.next())) {
            Ok(item) => item,
            Err(e) => Some(Err(e)),
        };
        if matches!(item, Some(Err(_))) {
            // Ended: the rest is dropped now, under the guard.
            if let Some(inner) = self.inner.take() {
                self.guard.drop_guarded(self.op, inner);
            }
        }
        item
    }
}

impl<I> Drop for GuardedIter<'_, I> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            self.guard.drop_guarded(self.op, inner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    /// A panic in a guarded call is `CorruptFile` naming the file and keeping the message,
    /// of kind `Corrupt`; the guard is latched: a later call does not run and returns the
    /// same error; the fence and the extra poison are set.
    #[test]
    fn a_panicking_call_is_a_corrupt_file_error_and_latches_the_guard() {
        let engine = Arc::new(Poison::default());
        let guard = RedbGuard::new("blockstore", Some(Path::new("/h/blockstore.redb")))
            .poisoning(engine.clone());
        assert_eq!(guard.call("get", || Ok(7)).unwrap(), 7);
        assert!(!guard.fence().is_set());
        let err = guard
            .call::<()>("get", || {
                assert!(inside_guarded_redb_call());
                panic!("internal error: entered unreachable code")
            })
            .unwrap_err();
        assert!(
            !inside_guarded_redb_call(),
            "the count is left on unwinding"
        );
        assert_eq!(err.kind(), ErrorKind::Corrupt);
        let text = err.to_string();
        assert!(text.contains("/h/blockstore.redb"), "{text}");
        assert!(text.contains("entered unreachable code"), "{text}");
        assert!(text.contains("restore the home"), "{text}");
        let Error::CorruptFile { op, cause, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(*op, "get");
        assert_eq!(cause.message, "internal error: entered unreachable code");
        assert!(guard.fence().is_set());
        assert!(engine.is_set());
        let mut ran = false;
        let again = guard.call("range", || {
            ran = true;
            Ok(())
        });
        assert!(!ran, "a latched guard calls nothing");
        assert_eq!(again.unwrap_err().to_string(), text);
    }

    /// A guarded iterator turns a panicking `next` into one error and then ends; a
    /// panicking drop is caught and latches the guard.
    #[test]
    fn a_guarded_iterator_ends_after_a_panic_and_its_drop_is_caught() {
        let guard = RedbGuard::new("state", None);
        let mut n = 0;
        let items = std::iter::from_fn(|| {
            n += 1;
            if n == 3 {
                panic!("boom at {n}");
            }
            Some(Ok::<u32, Error>(n))
        });
        let got: Vec<_> = GuardedIter::new(&guard, "iterate", items).collect();
        assert_eq!(got.len(), 3);
        assert!(matches!(got[0], Ok(1)) && matches!(got[1], Ok(2)));
        let e = got[2].as_ref().unwrap_err();
        assert!(e.to_string().contains("boom at 3"), "{e}");
        assert!(
            e.to_string().contains("a redb backend without a path"),
            "{e}"
        );

        struct PanicsOnDrop;
        impl Drop for PanicsOnDrop {
            fn drop(&mut self) {
                panic!("dropped badly");
            }
        }
        let guard = Arc::new(RedbGuard::new("app", Some(Path::new("app.redb"))));
        drop(GuardedDrop::new(guard.clone(), "close", PanicsOnDrop));
        let e = guard.check().unwrap_err();
        assert!(e.to_string().contains("dropped badly"), "{e}");
    }
}
