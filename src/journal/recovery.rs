//! Recovery's reads (ADR 0008): the scan of the live segments, streamed through a bounded
//! window, and the checks of the segment files against what the index records.
//!
//! What the index records of the segments, and what each check refuses:
//! * `first_segment` and the segments after it: read by [`scan`]; a gap is refused.
//! * `journal.segment_ends`: per segment with applied units, where the last applied unit in it
//!   ends (written in each apply step, durable with the checkpoint). A segment whose valid
//!   units end before it, or that is missing, lost units the index applied: refused with
//!   [`Error::JournalSegment`] naming the segment and the offsets missing. A torn tail after
//!   the recorded end (units never applied, never acknowledged if torn) is cut as before.
//! * The applied seq: the units after it continue it with no gap; a journal whose last
//!   unit is below it lost units it applied.
//! * Length: no segment the journal writes is longer than [`segment_len_max`]; a longer
//!   file is refused before any byte of it is read.
//!
//! Invariant: recovery reads at most [`SCAN_BUFFER_BYTES`] at a time, plus the whole units
//! it replays (which the overlay holds anyway).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase};

use super::format::{RUNS_DIR, SEGMENT_ENDS, parse_segment_file_name, segment_file_name};
use super::index::IndexLayout;
use super::state::{ENGINE_NAME, corrupt, io_err};
use super::unit::{self, Decoded, Header, Sections};
use crate::error::{CorruptReason, Error, Result};
use crate::fs::{FileLock, FileSystem, FsFile, OpenMode};

/// Bytes recovery reads from a segment at a time. Why: a segment is 64 MiB (more when its
/// one unit is larger), and a file damaged to any length must not cost its length in
/// memory; 1 MiB keeps the reads large (64 per default segment).
pub(super) const SCAN_BUFFER_BYTES: usize = 1 << 20;

/// Bytes of the longest unit the format frames: header, a body of `u32::MAX` bytes and the
/// trailer.
pub(super) const UNIT_BYTES_MAX: u64 =
    (unit::HEADER_BYTES + unit::TRAILER_BYTES) as u64 + u32::MAX as u64;

/// The longest segment file the journal writes with `segment_bytes` (bytes): units are
/// appended while they end within `segment_bytes`, except a segment's first unit, which may
/// be as long as the format frames ([`UNIT_BYTES_MAX`]); a prepared segment's zeros end at
/// `segment_bytes`.
pub(super) fn segment_len_max(segment_bytes: u64) -> u64 {
    segment_bytes.max(UNIT_BYTES_MAX)
}

/// Per segment, where the last of `units` (segment, end offset; in seq order) in it ends.
pub(super) fn last_ends(units: impl IntoIterator<Item = (u64, u64)>) -> BTreeMap<u64, u64> {
    let mut ends = BTreeMap::new();
    for (segment, end) in units {
        let e = ends.entry(segment).or_insert(0);
        *e = end.max(*e);
    }
    ends
}

/// The index's `journal.segment_ends` (each row checked in the checked layout), with the
/// applied end (segment, offset) the meta table
/// records folded in (the one row a journal from before the table has).
pub(super) fn read_segment_ends(
    index: &Database,
    layout: IndexLayout,
    applied_end: (u64, u64),
) -> Result<BTreeMap<u64, u64>> {
    let txn = index
        .begin_read()
        .map_err(|e| Error::storage(ENGINE_NAME, "begin read", e))?;
    let mut ends = match SEGMENT_ENDS
        .open_read(&txn, layout)
        .map_err(|e| Error::storage(ENGINE_NAME, "open segment ends", e))?
    {
        Some(t) => t
            .all("read segment ends", |segment| segment)?
            .into_iter()
            .collect(),
        None => BTreeMap::new(),
    };
    if applied_end.1 > 0 {
        let e = ends.entry(applied_end.0).or_insert(0);
        *e = applied_end.1.max(*e);
    }
    Ok(ends)
}

/// The journal directory's lock file. Its entry need not be durable: a lost one is
/// created again by the next open.
pub(super) const LOCK_FILE: &str = "LOCK";

/// Takes the exclusive lock on `dir`'s [`LOCK_FILE`] (`flock`, per open file description);
/// the engine holds the returned [`FileLock`] for its life. A directory another engine
/// holds is refused with [`Error::JournalLocked`].
pub(super) fn lock_dir(fs: &dyn FileSystem, dir: &Path) -> Result<FileLock> {
    let path = dir.join(LOCK_FILE);
    let file = fs
        .open_file(&path, OpenMode::CreateOrOpen)
        .map_err(io_err("open lock file", &path))?;
    match file.try_lock_exclusive() {
        Ok(true) => Ok(FileLock::new(file)),
        Ok(false) => Err(Error::JournalLocked {
            dir: dir.to_path_buf(),
        }),
        Err(e) => Err(io_err("lock", &path)(e)),
    }
}

/// True when `dir` holds a file only a journal that created its index writes: a segment
/// or the runs directory (a spare segment is prepared before the index exists).
pub(super) fn holds_journal_files(fs: &dyn FileSystem, dir: &Path) -> Result<bool> {
    let names = fs.list_dir(dir).map_err(io_err("list directory", dir))?;
    Ok(names
        .iter()
        .any(|n| parse_segment_file_name(n).is_some() || n.as_os_str() == RUNS_DIR))
}

fn segment_error(path: &Path, problem: String) -> Error {
    Error::JournalSegment {
        segment: path.to_path_buf(),
        problem,
    }
}

/// The error for a segment whose valid units end at `valid_len`, before `applied_to`, the
/// end the index records for the units it applied there.
fn short_segment(path: &Path, valid_len: u64, applied_to: u64, applied_seq: u64) -> Error {
    segment_error(
        path,
        format!(
            "its units end at offset {valid_len}, but the index applied units in it through \
             offset {applied_to} (units through seq {applied_seq} were applied): bytes \
             {valid_len} to {applied_to} are missing"
        ),
    )
}

/// Checks the segments the index records outside the scan: every one at or above
/// `first_segment` was read by the scan (`scanned`), every held one (below it, kept for
/// its values) is at least as long as its recorded end. Reads only.
pub(super) fn check_recorded_segments(
    fs: &dyn FileSystem,
    dir: &Path,
    ends: &BTreeMap<u64, u64>,
    first_segment: u64,
    held: &BTreeSet<u64>,
    scanned: &BTreeMap<u64, u64>,
    applied_seq: u64,
) -> Result<()> {
    for (&segment, &end) in ends {
        let path = dir.join(segment_file_name(segment));
        if segment >= first_segment {
            if !scanned.contains_key(&segment) {
                return Err(segment_error(
                    &path,
                    format!(
                        "missing, but the index applied units in it through offset {end} \
                         (units through seq {applied_seq} were applied)"
                    ),
                ));
            }
        } else if held.contains(&segment) {
            let f = fs
                .open_file(&path, OpenMode::Existing)
                .map_err(io_err("open segment", &path))?;
            let len = f.len().map_err(io_err("stat segment", &path))?;
            if len < end {
                return Err(segment_error(
                    &path,
                    format!(
                        "{len} bytes long, but the index points at values in units through \
                         offset {end}: bytes {len} to {end} are missing"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The last segment as recovery found it.
#[derive(Debug)]
pub(super) struct LastSegment {
    pub(super) index: u64,
    pub(super) valid_len: u64,
    pub(super) file_len: u64,
    /// Every byte past `valid_len` is zero: the prepared space no unit reached (kept).
    pub(super) zero_tail: bool,
}

/// What the scan found.
#[derive(Debug)]
pub(super) struct Scan {
    /// Units past `applied_seq`, in order, with where each lies (segment, offset, length).
    pub(super) replay: Vec<(Header, Sections, (u64, u64, u64))>,
    /// Segment → the seq of its first unit (or of the next unit, for one with none).
    pub(super) segments: BTreeMap<u64, u64>,
    pub(super) last: Option<LastSegment>,
    /// The last valid unit's seq (0: none).
    pub(super) last_seq: u64,
}

/// What the index records that the scan checks the segments against.
#[derive(Debug, Clone, Copy)]
pub(super) struct Recorded<'a> {
    pub(super) applied_seq: u64,
    pub(super) first_segment: u64,
    /// [`read_segment_ends`].
    pub(super) ends: &'a BTreeMap<u64, u64>,
    /// The open's segment size (bytes): bounds a segment's length ([`segment_len_max`]).
    pub(super) segment_bytes: u64,
}

/// A unit as [`Window::unit_at`] read it.
enum Read {
    /// Valid; its sections when it is to be replayed (above the applied seq).
    Valid(Header, Option<Sections>),
    Invalid(CorruptReason),
}

/// A segment read through a window of at most [`SCAN_BUFFER_BYTES`].
struct Window<'a> {
    file: &'a dyn FsFile,
    path: &'a Path,
    len: u64,
    /// Offset of `buf[0]` in the file.
    start: u64,
    buf: Vec<u8>,
}

impl<'a> Window<'a> {
    fn new(file: &'a dyn FsFile, path: &'a Path, len: u64) -> Self {
        Window {
            file,
            path,
            len,
            start: 0,
            buf: Vec::new(),
        }
    }

    /// The bytes from `at`, up to `n` (at most [`SCAN_BUFFER_BYTES`]; fewer at the end of
    /// the file).
    fn bytes(&mut self, at: u64, n: usize) -> Result<&[u8]> {
        debug_assert!(n <= SCAN_BUFFER_BYTES);
        let end = at.saturating_add(n as u64).min(self.len).max(at);
        let held_end = self.start + self.buf.len() as u64;
        if at < self.start || end > held_end {
            let fill = (self.len.saturating_sub(at)).min(SCAN_BUFFER_BYTES as u64) as usize;
            self.buf.resize(fill, 0);
            self.file
                .read_at(at, &mut self.buf)
                .map_err(io_err("read segment", self.path))?;
            self.start = at;
        }
        let from = (at - self.start) as usize;
        Ok(&self.buf[from..from + (end - at) as usize])
    }

    /// The crc32 of the file's bytes `at..at + n`, read a window at a time.
    fn crc(&mut self, mut at: u64, mut n: u64) -> Result<u32> {
        let mut h = crc32fast::Hasher::new();
        while n > 0 {
            let step = n.min(SCAN_BUFFER_BYTES as u64) as usize;
            h.update(self.bytes(at, step)?);
            at += step as u64;
            n -= step as u64;
        }
        Ok(h.finalize())
    }

    /// The unit at `at`. A unit above `applied_seq` is decoded whole (it is replayed); one
    /// at or below it is checked by its checksums only, streamed.
    fn unit_at(&mut self, at: u64, applied_seq: u64) -> Result<Read> {
        let header = match unit::decode_header(self.bytes(at, unit::HEADER_BYTES)?) {
            Ok(h) => h,
            Err(r) => return Ok(Read::Invalid(r)),
        };
        let len = header.unit_len();
        let room = self.len - at;
        if room < len {
            return Ok(Read::Invalid(CorruptReason::Truncated {
                needed: usize::try_from(len - room).unwrap_or(usize::MAX),
            }));
        }
        if header.seq > applied_seq {
            // Replayed: decoded whole, its sections kept for the overlay.
            let decoded = if len <= SCAN_BUFFER_BYTES as u64 {
                unit::decode_at(self.bytes(at, len as usize)?)
            } else {
                let mut whole = vec![0u8; len as usize];
                self.file
                    .read_at(at, &mut whole)
                    .map_err(io_err("read segment", self.path))?;
                unit::decode_at(&whole)
            };
            return Ok(match decoded {
                Decoded::Valid(h, sections) => Read::Valid(h, Some(sections)),
                Decoded::Invalid(r) => Read::Invalid(r),
            });
        }
        let computed = self.crc(at + unit::HEADER_BYTES as u64, u64::from(header.body_len))?;
        let stored = self.stored_crc(at, &header)?;
        Ok(if computed == stored {
            Read::Valid(header, None)
        } else {
            Read::Invalid(CorruptReason::Checksum { stored, computed })
        })
    }

    fn stored_crc(&mut self, at: u64, header: &Header) -> Result<u32> {
        let trailer_at = at + unit::HEADER_BYTES as u64 + u64::from(header.body_len);
        Ok(unit::le_u32(
            self.bytes(trailer_at, unit::TRAILER_BYTES)?,
            0,
        ))
    }

    /// True when the body of the unit at `at` (whose header is `header`, within the file)
    /// matches its trailer's checksum.
    fn body_crc_matches(&mut self, at: u64, header: &Header) -> Result<bool> {
        let computed = self.crc(at + unit::HEADER_BYTES as u64, u64::from(header.body_len))?;
        Ok(computed == self.stored_crc(at, header)?)
    }

    /// True when every byte from `from` to the end of the file is zero.
    fn zeros_from(&mut self, mut from: u64) -> Result<bool> {
        while from < self.len {
            let chunk = self.bytes(from, SCAN_BUFFER_BYTES)?;
            if chunk.iter().any(|b| *b != 0) {
                return Ok(false);
            }
            from += chunk.len() as u64;
        }
        Ok(true)
    }

    /// The offset of a valid unit at or after `from` whose writer knew unit `seq` durable:
    /// the proof that an invalid unit at `seq` is corruption, not a torn write.
    fn durable_after(&mut self, from: u64, seq: u64) -> Result<Option<u64>> {
        let mut at = from;
        while at + unit::HEADER_BYTES as u64 <= self.len {
            let chunk = self.bytes(at, SCAN_BUFFER_BYTES)?;
            let Some(rel) = chunk.windows(4).position(|w| w == unit::MAGIC) else {
                // The magic may straddle the window's end: look again from its last bytes.
                if chunk.len() < SCAN_BUFFER_BYTES {
                    return Ok(None);
                }
                at += (chunk.len() - unit::MAGIC.len() + 1) as u64;
                continue;
            };
            let candidate = at + rel as u64;
            if let Ok(h) = unit::decode_header(self.bytes(candidate, unit::HEADER_BYTES)?)
                && h.synced_through >= seq
                && h.unit_len() <= self.len - candidate
                && self.body_crc_matches(candidate, &h)?
            {
                return Ok(Some(candidate));
            }
            at = candidate + 1;
        }
        Ok(None)
    }
}

/// The live segments from `first_segment` on: the run of consecutive numbers in `on_disk`;
/// a segment past a missing one is refused.
fn live_segments(dir: &Path, on_disk: &BTreeSet<u64>, first_segment: u64) -> Result<Vec<u64>> {
    let mut indexes = Vec::new();
    let mut at = first_segment;
    while on_disk.contains(&at) {
        indexes.push(at);
        at += 1;
    }
    // `at` is the first live segment missing. A segment is created only once the one
    // before it is durable (ADR 0008), so no crash leaves one past a missing one: any is
    // a lost segment, refused naming it, rather than a journal read up to the gap and
    // written over past it.
    if on_disk.range(at..).next().is_some() {
        return Err(corrupt(
            &dir.join(segment_file_name(at)),
            0,
            CorruptReason::Invalid("segment missing"),
        ));
    }
    Ok(indexes)
}

/// A valid unit's `seq` at `off` in `path` follows the unit before it (`prev_seq`), or,
/// the first one read, does not skip past the checkpoint's `applied_seq`.
fn check_seq_follows(
    path: &Path,
    off: u64,
    seq: u64,
    prev_seq: Option<u64>,
    applied_seq: u64,
) -> Result<()> {
    match prev_seq {
        Some(p) if seq != p + 1 => Err(corrupt(
            path,
            off,
            CorruptReason::Invalid("unit seq does not follow the last"),
        )),
        None if seq > applied_seq + 1 => Err(corrupt(
            path,
            off,
            CorruptReason::Invalid("units missing after the checkpoint"),
        )),
        _ => Ok(()),
    }
}

/// What the index applied, as a segment's scan checks it: through `seq`, and in this
/// segment up to offset `to`.
struct AppliedIn {
    seq: u64,
    to: u64,
}

/// An invalid unit at `off` in `seg` (`path`): `Ok` when the segment's units end there (a
/// torn tail of the last segment, or a prepared segment's zeros), else the refusal. The
/// unit would have been seq `expected`.
fn invalid_unit_ends_units(
    seg: &mut Window<'_>,
    path: &Path,
    off: u64,
    reason: CorruptReason,
    is_last: bool,
    expected: u64,
    applied: AppliedIn,
) -> Result<()> {
    // Only the last segment can end torn: a segment is synced before the
    // next one is created. A prepared segment ends in zeros where the next
    // unit did not fit: its units end there (a unit zeroed by corruption
    // is caught by the next segment's seq, which would not follow, or by
    // the end the index records).
    if !is_last {
        if seg.zeros_from(off)? {
            return Ok(());
        }
        return Err(corrupt(path, off, reason));
    }
    // An applied unit was durable: never a torn tail, whatever follows it.
    if expected <= applied.seq || off < applied.to {
        tracing::error!(
            segment = %path.display(),
            offset = off,
            applied_seq = applied.seq,
            "journal: invalid unit that was applied"
        );
        return Err(corrupt(path, off, reason));
    }
    if let Some(later) = seg.durable_after(off + 1, expected)? {
        tracing::error!(
            segment = %path.display(),
            offset = off,
            later_unit_offset = later,
            "journal: invalid unit that was durable"
        );
        return Err(corrupt(path, off, reason));
    }
    Ok(())
}

/// Reads every live segment and decides what recovery keeps, truncates or refuses. Reads
/// only, [`SCAN_BUFFER_BYTES`] at a time. `on_disk` is the numbers of the segment files in
/// `dir`.
pub(super) fn scan(
    fs: &dyn FileSystem,
    dir: &Path,
    on_disk: &BTreeSet<u64>,
    recorded: Recorded<'_>,
) -> Result<Scan> {
    let Recorded {
        applied_seq,
        first_segment,
        ends,
        segment_bytes,
    } = recorded;
    let indexes = live_segments(dir, on_disk, first_segment)?;
    let mut out = Scan {
        replay: Vec::new(),
        segments: BTreeMap::new(),
        last: None,
        last_seq: 0,
    };
    let len_max = segment_len_max(segment_bytes);
    let mut prev_seq: Option<u64> = None;
    for (n, &index) in indexes.iter().enumerate() {
        let is_last = n + 1 == indexes.len();
        let path: PathBuf = dir.join(segment_file_name(index));
        let f = fs
            .open_file(&path, OpenMode::Existing)
            .map_err(io_err("open segment", &path))?;
        let len = f.len().map_err(io_err("stat segment", &path))?;
        if len > len_max {
            return Err(segment_error(
                &path,
                format!(
                    "{len} bytes long, longer than any segment the journal writes \
                     ({len_max} bytes: the larger of the segment size and the longest unit)"
                ),
            ));
        }
        // Where the units the index applied in this segment end: an invalid unit before it
        // was durable, and the valid units must reach it.
        let applied_to = ends.get(&index).copied().unwrap_or(0);
        let mut seg = Window::new(&*f, &path, len);
        let mut off = 0u64;
        let mut first_seq = None;
        while off < len {
            match seg.unit_at(off, applied_seq)? {
                Read::Valid(header, sections) => {
                    check_seq_follows(&path, off, header.seq, prev_seq, applied_seq)?;
                    prev_seq = Some(header.seq);
                    first_seq.get_or_insert(header.seq);
                    let at = (index, off, header.unit_len());
                    off += header.unit_len();
                    if let Some(sections) = sections {
                        out.replay.push((header, sections, at));
                    }
                }
                Read::Invalid(reason) => {
                    let expected = prev_seq.map_or(applied_seq + 1, |p| p + 1);
                    let applied = AppliedIn {
                        seq: applied_seq,
                        to: applied_to,
                    };
                    invalid_unit_ends_units(
                        &mut seg, &path, off, reason, is_last, expected, applied,
                    )?;
                    break;
                }
            }
        }
        let valid_len = off.min(len);
        if valid_len < applied_to {
            return Err(short_segment(&path, valid_len, applied_to, applied_seq));
        }
        let expected_next = prev_seq.map_or(applied_seq + 1, |p| p + 1);
        out.segments
            .insert(index, first_seq.unwrap_or(expected_next));
        if is_last {
            out.last = Some(LastSegment {
                index,
                valid_len,
                file_len: len,
                zero_tail: seg.zeros_from(valid_len)?,
            });
        }
    }
    out.last_seq = prev_seq.unwrap_or(0);
    // The units read end below the applied seq: the ones after them were applied, so they
    // were durable, and they are gone (a journal with no unit left was trimmed whole).
    if out.last_seq != 0 && out.last_seq < applied_seq {
        let last = out.last.as_ref().map_or(first_segment, |l| l.index);
        return Err(segment_error(
            &dir.join(segment_file_name(last)),
            format!(
                "the journal's units end at seq {}, but the index applied units through seq \
                 {applied_seq}: units {} to {applied_seq} are missing",
                out.last_seq,
                out.last_seq + 1
            ),
        ));
    }
    Ok(out)
}
