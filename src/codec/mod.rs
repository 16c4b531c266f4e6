//! Codec: the key layout and the versioned, checksummed record framing.
//!
//! The byte-by-byte specification is `adr/0001-on-disk-records.md` (and the current spec,
//! `docs/FORMAT.md`); this module and that document change together.
//!
//! Invariant: keys put heights big-endian so that byte order is height order.
//! Invariant: every value is framed as `version ‖ kind ‖ payload ‖ crc32`, the crc covering
//! the key too, so a value read back under the wrong key, a flipped bit, a truncation or an
//! unknown version is reported as corruption — decoding never panics and never returns wrong
//! data.
//! Invariant: this module does no I/O.

pub mod keys;
mod record;

pub use crate::error::hex;
pub use record::{
    FORMAT_VERSION, PLACED_COPY_ALIGN_BYTES, PLACED_COPY_FROM_BYTES, Reader, RecordKind, Writer,
    check_frame, decode_record, encode_record, encode_record_with,
};
