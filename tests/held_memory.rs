//! The flush trigger's memory estimate against the memory a held window really takes.
//!
//! The flush trigger caps the open window's memory ([`flushpoint::node::FLUSH_BYTES_MAX`] over the
//! three databases), counted as key and value bytes plus [`HELD_KEY_BYTES`] per held key
//! ([`HoldingDb::held_memory`]). Here a counting allocator (this test binary's own, per
//! thread) measures what a window of short writes takes, as a light block's are — 32-byte
//! keys with 128-byte values, and 9-byte keys with 200-byte values — and the estimate must
//! not fall short of it by more than a tenth, nor overstate it by more than half. The
//! check's negative controls feed it estimates that are too small and too large.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::Bytes;
use flushpoint::node::HELD_KEY_BYTES;
use flushpoint::{Batch, Db, Durability, HoldingDb, MemoryDb};

thread_local! {
    /// Bytes allocated and not freed by this thread.
    static LIVE: Cell<i64> = const { Cell::new(0) };
}

/// Counts each thread's live bytes (the measurement runs on one thread: the window, its
/// writes and the database beneath are all on the test's thread).
struct Counting;

// SAFETY: forwards to the system allocator; the counter is a const-initialized
// thread-local with no destructor, so touching it allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LIVE.try_with(|c| c.set(c.get() + layout.size() as i64));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = LIVE.try_with(|c| c.set(c.get() - layout.size() as i64));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> i64 {
    LIVE.with(Cell::get)
}

/// What a window of `keys` writes took, beyond its key and value bytes, per key; and the
/// window's own estimate of its memory, in bytes, beside the bytes measured.
struct Measured {
    per_key: f64,
    estimate: u64,
    measured: i64,
}

/// A window of `keys` writes of `key_len`-byte keys and `value_len`-byte values, each in a
/// batch of its own built from the caller's own allocations, as a store's writes are. The
/// first window of a database: its entries grow by doubling (a later window starts at the
/// size of the one before), so what it takes per key depends a little on `keys`.
fn measure(keys: u64, key_len: usize, value_len: usize) -> Measured {
    let db = HoldingDb::new(MemoryDb::new("window"));
    db.hold().unwrap();
    let write = |window: u64| {
        for n in 0..keys {
            let mut key = vec![0u8; key_len];
            let id = (window << 40) | n;
            key[..8].copy_from_slice(&id.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
            let mut b = Batch::default();
            b.put(
                Bytes::copy_from_slice(&key),
                Bytes::copy_from_slice(&vec![n as u8; value_len]),
            );
            db.write(&b, Durability::Buffered).unwrap();
        }
    };
    let before = live();
    write(1);
    let measured = live() - before;
    let data = db.held_bytes() as i64;
    Measured {
        per_key: (measured - data) as f64 / keys as f64,
        estimate: db.held_memory(),
        measured,
    }
}

/// `Ok` when `estimate` bytes per key neither fall short of `per_key` (measured) by more
/// than a tenth nor exceed it by more than half.
fn estimate_holds(per_key: f64, estimate: u64) -> Result<(), String> {
    let e = estimate as f64;
    if per_key > e * 1.1 {
        return Err(format!(
            "{per_key:.1} B per key measured: the estimate {estimate} B is short"
        ));
    }
    if per_key < e / 1.5 {
        return Err(format!(
            "{per_key:.1} B per key measured: the estimate {estimate} B is far above"
        ));
    }
    Ok(())
}

#[test]
fn a_held_key_takes_about_held_key_bytes_beyond_its_key_and_value() {
    for (keys, key_len, value_len) in [(100_000, 32, 128), (120_000, 32, 128), (100_000, 9, 200)] {
        let m = measure(keys, key_len, value_len);
        println!(
            "{keys} keys of {key_len} B, values of {value_len} B: {:.1} B per key beyond them \
             (HELD_KEY_BYTES {HELD_KEY_BYTES}); held_memory {} B, measured {} B",
            m.per_key, m.estimate, m.measured
        );
        estimate_holds(m.per_key, HELD_KEY_BYTES).unwrap();
        assert!(
            m.estimate as f64 >= m.measured as f64 * 0.9,
            "held_memory {} B is short of the {} B measured",
            m.estimate,
            m.measured
        );
    }
}

/// The check rejects an estimate far too small (16 B: the keys' allocations forgotten) and
/// one far too large, on the measured figure and on made-up ones.
#[test]
fn the_estimate_check_rejects_a_short_and_an_inflated_estimate() {
    let m = measure(20_000, 32, 128);
    assert!(estimate_holds(m.per_key, 16).is_err());
    assert!(estimate_holds(m.per_key, 1024).is_err());
    assert!(estimate_holds(200.0, 96).is_err());
    assert!(estimate_holds(40.0, 96).is_err());
    assert!(estimate_holds(96.0, 96).is_ok());
}
