//! [`Chunks`]: where a held window keeps its short keys and values — copied into a few large
//! buffers it shares out as slices — and the bytes of replaced values still in them.
//!
//! Invariant: a kept key or value reads as the bytes it was given; only bytes shorter than
//! [`HELD_COPY_BELOW_BYTES`] (and not empty) are copied, longer ones are shared as given.
//! Invariant: `replaced_bytes` counts exactly the copied values a later write replaced: they
//! stay in their chunk until the window is dropped, so they are memory the window takes.

use bytes::{Bytes, BytesMut};

/// Keys and values shorter than this are copied into the window's chunks ([`Chunks`]);
/// longer ones (a block's parts) are kept as the caller's `Bytes`. Why 1 KiB: a copy that
/// small costs less than the allocation it saves, and a longer value is few enough per
/// window that its own allocation and reference-count header do not matter.
pub(crate) const HELD_COPY_BELOW_BYTES: usize = 1024;
/// The first chunk of a window, in bytes. Why small: a consensus block's window holds a few
/// KiB, and the journal keeps its chunks until it is applied.
const CHUNK_FIRST_BYTES: usize = 4 * 1024;
/// The largest chunk, in bytes: chunks double from [`CHUNK_FIRST_BYTES`] up to this. Why
/// 1 MiB: a 64 MiB window takes ~70 of them; a read that keeps a held value keeps its chunk.
const CHUNK_MAX_BYTES: usize = 1024 * 1024;
const _: () = assert!(HELD_COPY_BELOW_BYTES <= CHUNK_FIRST_BYTES);

/// Where a window keeps its short keys and values: copied into a few large buffers it
/// shares out as slices (`Bytes` with one reference count per chunk), not one allocation
/// (and, once shared, one reference-count header) per key and per value: a held key of a
/// light block's shape takes 87–98 B beyond its bytes (`tests/held_memory.rs`). The
/// window's millions of small writes leave the allocator a few large blocks to free, on
/// whichever thread drops the last slice (the applier).
#[derive(Debug, Default)]
pub(super) struct Chunks {
    /// The chunk being filled: its spare capacity takes the next copies.
    open: BytesMut,
    /// The size of the next chunk.
    next_bytes: usize,
    /// Bytes of values a later write replaced: still in a chunk, counted as memory.
    pub(super) replaced_bytes: u64,
}

impl Chunks {
    /// `b` as the window keeps it: copied into a chunk when short, else shared as it is.
    pub(super) fn keep(&mut self, b: &Bytes) -> Bytes {
        if b.len() >= HELD_COPY_BELOW_BYTES || b.is_empty() {
            return b.clone();
        }
        if self.open.capacity() - self.open.len() < b.len() {
            let size = self.next_bytes.max(CHUNK_FIRST_BYTES);
            self.open = BytesMut::with_capacity(size);
            self.next_bytes = (size * 2).min(CHUNK_MAX_BYTES);
        }
        self.open.extend_from_slice(b);
        // Shares the chunk: no allocation once the first slice made it shared.
        self.open.split().freeze()
    }

    /// A held value of `len` bytes was replaced: a short one stays in its chunk.
    pub(super) fn replaced(&mut self, len: usize) {
        if len < HELD_COPY_BELOW_BYTES {
            self.replaced_bytes += len as u64;
        }
    }

    /// Fresh chunks that count `replaced_bytes` already replaced (a window's copy: its
    /// values share the original's chunks, whose replaced bytes it still accounts for).
    pub(super) fn counting_replaced(replaced_bytes: u64) -> Chunks {
        Chunks {
            replaced_bytes,
            ..Chunks::default()
        }
    }
}
