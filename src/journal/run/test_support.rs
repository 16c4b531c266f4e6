//! Helpers shared by the run module's unit tests: run files on a simulated file system, a
//! model of a run's ops and the check of a run against it.
//!
//! Invariant: compiled only for tests.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

use bytes::Bytes;

use super::{Lookup, RUN_BLOCK_BYTES, Run, RunWriter};
use crate::db::{Direction, KeyRange};
use crate::error::Result;
use crate::fs::{FileSystem, FsFile, OpenMode, SimFs};

pub(super) fn file(fs: &SimFs, name: &str) -> Box<dyn FsFile> {
    fs.create_dir_all(Path::new("/r")).unwrap();
    fs.open_file(&Path::new("/r").join(name), OpenMode::CreateTruncate)
        .unwrap()
}

pub(super) fn reopen(fs: &SimFs, name: &str) -> Box<dyn FsFile> {
    fs.open_file(&Path::new("/r").join(name), OpenMode::Existing)
        .unwrap()
}

/// Writes `ops` (any order, later wins) as run `id`, sorted; returns it opened.
pub(super) fn write(
    fs: &SimFs,
    name: &str,
    id: u64,
    ops: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
) -> Run {
    write_in(fs, name, id, ops, RUN_BLOCK_BYTES)
}

pub(super) fn write_in(
    fs: &SimFs,
    name: &str,
    id: u64,
    ops: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    block_bytes: usize,
) -> Run {
    let mut w = RunWriter::with_block_bytes(file(fs, name), "ks", id, block_bytes).unwrap();
    for (k, v) in ops {
        w.push(k, v.as_deref()).unwrap();
    }
    let meta = w.finish().unwrap();
    assert_eq!(meta.ops, ops.len() as u64);
    let run = Run::open(reopen(fs, name), "ks", id).unwrap();
    assert_eq!(meta.bytes, reopen(fs, name).len().unwrap());
    run
}

/// Keys of many lengths (to cross blocks) from small numbers.
pub(super) fn key(n: u16) -> Vec<u8> {
    let mut k = n.to_be_bytes().to_vec();
    k.resize(2 + (n as usize % 7) * 300, n as u8);
    k
}

pub(super) type Spec = Vec<(u16, Option<u8>)>;

pub(super) fn model(spec: &Spec) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    spec.iter()
        .map(|(k, v)| (key(*k % 512), v.map(|v| vec![v; v as usize * 97 % 5000])))
        .collect()
}

pub(super) fn lookup_of(m: &BTreeMap<Vec<u8>, Option<Vec<u8>>>, k: &[u8]) -> Lookup {
    match m.get(k) {
        None => Lookup::Absent,
        Some(None) => Lookup::Deleted,
        Some(Some(v)) => Lookup::Put(Bytes::copy_from_slice(v)),
    }
}

pub(super) fn range_of(a: u16, b: u16, kind: u8) -> KeyRange {
    let (a, b) = (key(a % 512), key(b % 512));
    let b_ = |k: Vec<u8>, inc: bool| {
        if inc {
            Bound::Included(Bytes::from(k))
        } else {
            Bound::Excluded(Bytes::from(k))
        }
    };
    match kind % 5 {
        0 => KeyRange::all(),
        1 => KeyRange {
            start: b_(a, true),
            end: Bound::Unbounded,
        },
        2 => KeyRange {
            start: Bound::Unbounded,
            end: b_(b, kind.is_multiple_of(2)),
        },
        3 => KeyRange {
            start: b_(a, false),
            end: b_(b, true),
        },
        _ => KeyRange {
            start: b_(a, true),
            end: b_(b, false),
        },
    }
}

/// Checks a run against its model: every key's lookup (and keys it never held), and a
/// range both ways. `Err` says what differs.
pub(super) fn check_run(
    run: &Run,
    m: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    range: &KeyRange,
) -> std::result::Result<(), String> {
    for n in 0..600u16 {
        let k = key(n);
        let got = run.get(&k).map_err(|e| e.to_string())?;
        if got != lookup_of(m, &k) {
            return Err(format!("get {n}: {got:?}"));
        }
    }
    let want: Vec<(Vec<u8>, Option<Vec<u8>>)> = m
        .iter()
        .filter(|(k, _)| range.contains(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for direction in [Direction::Forward, Direction::Reverse] {
        let got: Vec<(Vec<u8>, Option<Vec<u8>>)> = run
            .iter(range, direction)
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.map(|v| v.to_vec()))))
            .collect::<Result<_>>()
            .map_err(|e| e.to_string())?;
        let mut want = want.clone();
        if direction == Direction::Reverse {
            want.reverse();
        }
        if got != want {
            return Err(format!(
                "{direction:?} range: {} ops, want {}",
                got.len(),
                want.len()
            ));
        }
    }
    Ok(())
}
