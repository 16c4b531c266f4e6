//! Events the node fires to subscribers once a block is durable.

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum EventKind {
    /// A block was committed.
    NewBlock {
        /// Its hash.
        hash: crate::types::Hash,
        /// Its transaction count.
        tx_count: u32,
    },
    /// A transaction was executed.
    Tx {
        /// Its index in the block.
        index: u32,
        /// Its result code.
        code: u32,
    },
}

/// An event, identified by (height, kind).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Event {
    /// The block's height.
    pub height: u64,
    /// What happened.
    pub kind: EventKind,
}

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
