//! Prefetch sources for the prefetch tests: values derived from keys, optionally held at a
//! gate inside `get_many`, with every batch recorded.
//!
//! Invariant: a source's value for a key never changes, so any value a session returns can
//! be checked against the key alone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flushpoint::Result;
use flushpoint::prefetch::{PrefetchSession, PrefetchSource};

/// A source whose value for every key is `value_bytes` bytes (a key starting with `-` is
/// absent); with `gated`, each `get_many` waits until the gate is opened.
#[derive(Debug, Default)]
pub struct TestSource {
    pub value_bytes: usize,
    pub gated: bool,
    open: Mutex<bool>,
    changed: Condvar,
    /// `get_many` calls started.
    pub entered: AtomicUsize,
    /// Every key read, in order.
    pub read: Mutex<Vec<Bytes>>,
}

impl TestSource {
    pub fn new(value_bytes: usize, gated: bool) -> Self {
        TestSource {
            value_bytes,
            gated,
            ..TestSource::default()
        }
    }

    /// Opens the gate for good.
    pub fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.changed.notify_all();
    }

    /// Waits until `n` calls of `get_many` started (panics after 30 s).
    pub fn wait_entered(&self, n: usize) {
        let start = Instant::now();
        while self.entered.load(Ordering::SeqCst) < n {
            assert!(start.elapsed() < Duration::from_secs(30), "no worker read");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl PrefetchSource for TestSource {
    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        self.entered.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_all();
        if self.gated {
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.changed.wait(open).unwrap();
            }
        }
        self.read
            .lock()
            .unwrap()
            .extend(keys.iter().map(|k| Bytes::copy_from_slice(k)));
        Ok(keys
            .iter()
            .map(|k| (k.first() != Some(&b'-')).then(|| Bytes::from(vec![7u8; self.value_bytes])))
            .collect())
    }
    fn generation(&self) -> u64 {
        0
    }
    fn written_since(&self, _key: &[u8], _since: u64) -> bool {
        false
    }
}

/// Waits until every submitted key was either retained or found over the budget.
pub fn wait_settled(session: &PrefetchSession) {
    let start = Instant::now();
    loop {
        let s = session.stats();
        if s.fetched + s.over_budget >= s.submitted {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "prefetch did not settle: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
