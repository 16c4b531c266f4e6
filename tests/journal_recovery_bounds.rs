//! Recovery's memory is bounded whatever a segment's length: a segment longer
//! than any the journal writes (1 TiB, sparse) is refused with `Error::JournalSegment`
//! naming it, before a byte of it is read; a 2 GiB sparse one (a zero tail within what a
//! segment's one unit may reach) is read through the scan's window. One test in this file:
//! the process's peak RSS (`VmHWM`) is its own.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use flushpoint::fs::StdFs;
use flushpoint::journal::{JournalEngine, JournalOptions, segment_file_name};
use flushpoint::{Batch, Db, Durability, Error, ErrorKind};

/// Peak RSS growth the opens may cost (bytes): the scan's window is 1 MiB; a read of the
/// 2 GiB segment whole would cost 2 GiB.
const RSS_GROWTH_MAX_BYTES: u64 = 64 << 20;

fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

fn options() -> JournalOptions {
    JournalOptions::default().with_prepare_segments(false)
}

fn open(dir: &Path) -> flushpoint::Result<JournalEngine> {
    JournalEngine::open(Arc::new(StdFs), dir, options())
}

#[test]
fn an_oversized_segment_is_refused_unread_and_a_long_zero_tail_is_streamed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let engine = open(&dir).unwrap();
    let ks = engine.keyspace("ks").unwrap();
    let mut b = Batch::new();
    b.put(Bytes::from_static(b"k"), Bytes::from_static(b"v"));
    ks.write(&b, Durability::Synced).unwrap();
    drop(ks);
    drop(engine);
    let seg = dir.join(segment_file_name(0));
    let units_len = std::fs::metadata(&seg).unwrap().len();
    let before = peak_rss_bytes();

    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(1 << 40).unwrap();
    let err = open(&dir).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert!(
        matches!(&err, Error::JournalSegment { segment, .. } if *segment == seg),
        "names the segment: {err:?}"
    );
    assert!(err.to_string().contains("longer than any segment"), "{err}");
    assert_eq!(
        std::fs::metadata(&seg).unwrap().len(),
        1 << 40,
        "nothing written"
    );

    f.set_len(2 << 30).unwrap();
    let engine = open(&dir).unwrap();
    let ks = engine.keyspace("ks").unwrap();
    assert_eq!(ks.get(b"k").unwrap(), Some(Bytes::from_static(b"v")));
    drop(ks);
    drop(engine);
    let growth = peak_rss_bytes().saturating_sub(before);
    eprintln!("peak RSS growth over both opens: {growth} bytes");
    assert!(
        growth < RSS_GROWTH_MAX_BYTES,
        "peak RSS grew {growth} bytes (segment units {units_len} bytes)"
    );
}
