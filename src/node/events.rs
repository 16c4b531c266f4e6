//! Events the node fires to subscribers once a block is durable, and their compact form
//! while a window holds them.
//!
//! Invariant: [`HeldEvents`] gives back exactly the events appended, in their order.
//! Invariant: nothing here fires an event or does I/O: the node fires them, once their
//! window's write returned `Ok`.

pub use crate::chain::{Event, EventKind};

/// Receives fired events. Called in block order, each event at most once, and only once
/// its block is durable in all three databases.
pub trait EventSink: Send {
    /// Receives one event.
    fn fire(&mut self, event: &Event);
}

/// A sink that drops events.
#[derive(Debug, Default)]
pub struct NoEvents;

impl EventSink for NoEvents {
    fn fire(&mut self, _event: &Event) {}
}

impl<F: FnMut(&Event) + Send> EventSink for F {
    fn fire(&mut self, event: &Event) {
        self(event)
    }
}

/// The events of the blocks a window holds, kept compact until they fire. Why: an
/// [`Event`] takes 48 bytes (its kind is sized for a block hash), so a light block's 25
/// events would take 1.2 KB a block, ~7 MiB a window, held twice over with the window in
/// flight; encoded here a transaction's event takes ~4 bytes and a block's ~130.
///
/// Each event is a tag byte, the zigzag varint of its height's difference from the event
/// before (the first event's, from 0), then its kind's fields (a block's 32-byte hash and
/// varint transaction count; a transaction's varint index and code). Only this process
/// reads it back: nothing is written to disk.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HeldEvents {
    bytes: Vec<u8>,
    events: usize,
    last_height: u64,
}

/// [`HeldEvents`]'s tag of [`EventKind::NewBlock`].
const TAG_NEW_BLOCK: u8 = 0;
/// [`HeldEvents`]'s tag of [`EventKind::Tx`].
const TAG_TX: u8 = 1;

impl HeldEvents {
    /// No events.
    pub fn new() -> Self {
        HeldEvents::default()
    }

    /// Appends `events`, in their order.
    pub fn extend(&mut self, events: &[Event]) {
        for e in events {
            self.push(e);
        }
    }

    /// Appends one event.
    pub fn push(&mut self, e: &Event) {
        let delta = e.height.wrapping_sub(self.last_height) as i64;
        self.last_height = e.height;
        match &e.kind {
            EventKind::NewBlock { hash, tx_count } => {
                self.bytes.push(TAG_NEW_BLOCK);
                put_varint(&mut self.bytes, zigzag(delta));
                self.bytes.extend_from_slice(hash);
                put_varint(&mut self.bytes, u64::from(*tx_count));
            }
            EventKind::Tx { index, code } => {
                self.bytes.push(TAG_TX);
                put_varint(&mut self.bytes, zigzag(delta));
                put_varint(&mut self.bytes, u64::from(*index));
                put_varint(&mut self.bytes, u64::from(*code));
            }
        }
        self.events += 1;
    }

    /// The number of events held.
    pub fn len(&self) -> usize {
        self.events
    }

    /// True when no event is held.
    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// Bytes the encoded events take (their buffer's length).
    pub fn encoded_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The events, in the order they were appended.
    pub fn iter(&self) -> impl Iterator<Item = Event> + '_ {
        let mut at = 0usize;
        let mut height = 0u64;
        std::iter::from_fn(move || {
            if at == self.bytes.len() {
                return None;
            }
            let b = &self.bytes;
            let tag = b[at];
            at += 1;
            height = height.wrapping_add(unzigzag(get_varint(b, &mut at)) as u64);
            let kind = match tag {
                TAG_NEW_BLOCK => {
                    let hash: crate::types::Hash = b[at..at + 32]
                        .try_into()
                        .expect("invariant: a held block event has its 32-byte hash");
                    at += 32;
                    EventKind::NewBlock {
                        hash,
                        tx_count: narrow(get_varint(b, &mut at)),
                    }
                }
                TAG_TX => EventKind::Tx {
                    index: narrow(get_varint(b, &mut at)),
                    code: narrow(get_varint(b, &mut at)),
                },
                other => unreachable!("invariant: held events are tagged 0 or 1, found {other}"),
            };
            Some(Event { height, kind })
        })
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(b: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let byte = b[*at];
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return v;
        }
        shift += 7;
    }
}

/// A u32 field read back: it was written from a u32.
fn narrow(v: u64) -> u32 {
    u32::try_from(v).expect("invariant: a held event's u32 field was written from a u32")
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    fn event(height: u64, kind: u8, a: u32, b: u32, seed: u8) -> Event {
        Event {
            height,
            kind: if kind.is_multiple_of(2) {
                EventKind::NewBlock {
                    hash: [seed; 32],
                    tx_count: a,
                }
            } else {
                EventKind::Tx { index: a, code: b }
            },
        }
    }

    quickcheck! {
        /// Any events come back as they went in, in order (heights up and down, extremes
        /// included).
        fn held_events_come_back_as_they_went_in(raw: Vec<(u64, u8, u32, u32, u8)>) -> bool {
            let events: Vec<Event> = raw
                .iter()
                .map(|&(h, k, a, b, s)| event(h, k, a, b, s))
                .collect();
            let mut held = HeldEvents::new();
            held.extend(&events);
            held.len() == events.len()
                && held.is_empty() == events.is_empty()
                && held.iter().collect::<Vec<_>>() == events
        }
    }

    #[test]
    fn extremes_and_a_light_blocks_size() {
        let events = vec![
            event(u64::MAX, 0, u32::MAX, 0, 0xff),
            event(0, 1, u32::MAX, u32::MAX, 0),
            event(u64::MAX, 1, 0, 0, 0),
        ];
        let mut held = HeldEvents::new();
        held.extend(&events);
        assert_eq!(held.iter().collect::<Vec<_>>(), events);

        // A light block's shape: its block event and 24 transactions with code 0.
        let mut block = vec![event(300_000, 0, 24, 0, 7)];
        block.extend((0..24).map(|i| event(300_000, 1, i, 0, 0)));
        let mut held = HeldEvents::new();
        assert!(held.is_empty() && held.encoded_bytes() == 0);
        held.extend(&block);
        // By the layout, counted by hand: the block event is its tag, the height's zigzag
        // varint from 0 (600,000: 3 bytes), the hash (32) and the count (1): 37; each
        // transaction its tag, a zero height difference, its index and code (1 byte each): 4.
        assert_eq!(
            held.encoded_bytes(),
            37 + 24 * 4,
            "a light block's events took {} bytes",
            held.encoded_bytes()
        );
        assert!(!held.is_empty());
        assert_eq!(held.iter().collect::<Vec<_>>(), block);
    }

    /// Negative control: the comparison the property makes sees a changed event.
    #[test]
    fn a_changed_event_is_told_apart() {
        let events = vec![event(5, 1, 1, 0, 0), event(5, 1, 2, 0, 0)];
        let mut held = HeldEvents::new();
        held.extend(&events[..1]);
        held.push(&event(5, 1, 3, 0, 0));
        assert_ne!(held.iter().collect::<Vec<_>>(), events);
    }
}
