//! The file layer: every file operation the crate makes on a home — the `FORMAT` and `LOCK`
//! files, `RedbDb`'s atomic creation, and redb's own page I/O — goes through a
//! [`FileSystem`], so that a simulated one (`flushpoint::testing::SimFs`, feature `testkit`)
//! can cut the power at any of them.
//!
//! [`StdFs`] is the real one (`std::fs`, `flock` through `fs4`); redb's I/O on a real file
//! goes through redb's own `FileBackend`, with its locks, exactly as before this layer.
//!
//! Durability contract every implementation follows (and the simulated one enforces on a cut):
//! * file bytes and length (`write_at`, `set_len`) are durable once the file's `sync_data`
//!   or `sync_all` returned `Ok`;
//! * a directory entry — a created file or directory, a rename, an unlink — is durable once
//!   the directory's [`FileSystem::sync_dir`] returned `Ok`; a file's own sync does not make
//!   its name durable.
//!
//! Invariant: this module decides nothing about *when* to sync; callers do (policy apart
//! from mechanism). Invariant: it never imports the database or node layers.

mod scratch;
/// The simulated file system: the library's unit tests use it, and `crate::testing`
/// re-exports it for other crates' tests (feature `testkit`).
#[cfg(any(test, feature = "testkit", doc))]
pub(crate) mod sim;

use std::fmt::Debug;
use std::io::IoSlice;
use std::ops::Bound;
use std::path::Path;

use redb::{BackendError, StorageBackend};

use crate::aliasing::{ALIAS_SPAN_BYTES, ALIASING_AHEAD_BYTES_MAX, copy_aliases};

/// The most pieces one vectored write hands the kernel ([`FsFile::write_vectored_at`]).
/// Why: Linux's `IOV_MAX`; `pwritev` refuses a longer list with `EINVAL`.
pub const IO_SLICES_MAX: usize = 1024;

pub use scratch::{SCRATCH_BYTES_MAX, ScratchFs};
#[cfg(test)]
pub(crate) use sim::{DirFate, FileFate, SimFs, SimOp};

type IoResult<T> = std::io::Result<T>;

/// How [`FileSystem::open_file`] opens a file: for reading and writing, except
/// [`OpenMode::ReadOnly`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenMode {
    /// The file must exist.
    Existing,
    /// Opens the file, creating it empty if it does not exist.
    CreateOrOpen,
    /// Creates the file, or truncates it to zero length if it exists.
    CreateTruncate,
    /// The file must exist, and is opened for reading only (a directory is refused with
    /// `IsADirectory`, as the other modes are).
    ReadOnly,
}

/// A file system: the directory operations, and opening files.
///
/// Every mutating call is one operation a power cut can interrupt; see the module docs for
/// what is durable when each returns `Ok`.
pub trait FileSystem: Send + Sync + Debug + 'static {
    /// Creates `dir` and every missing ancestor (like `mkdir -p`). The new entries are not
    /// durable until each parent is synced ([`create_dir_all_durably`] does that).
    fn create_dir_all(&self, dir: &Path) -> IoResult<()>;
    /// Opens the file at `path` per `mode`. Creating a file adds a directory entry.
    fn open_file(&self, path: &Path, mode: OpenMode) -> IoResult<Box<dyn FsFile>>;
    /// True when something (file or directory) exists at `path`.
    fn exists(&self, path: &Path) -> IoResult<bool>;
    /// Renames `from` to `to` (same directory), replacing `to` if it exists.
    fn rename(&self, from: &Path, to: &Path) -> IoResult<()>;
    /// Removes the file at `path`; `NotFound` if there is none.
    fn remove_file(&self, path: &Path) -> IoResult<()>;
    /// Makes the directory's entries durable (fsync of the directory).
    fn sync_dir(&self, dir: &Path) -> IoResult<()>;
    /// Bytes allocated to the file at `path` (its length, where allocation is unknown).
    fn allocated_bytes(&self, path: &Path) -> IoResult<u64>;
    /// The names of the entries in `dir`, in no particular order.
    fn list_dir(&self, dir: &Path) -> IoResult<Vec<std::ffi::OsString>>;
}

/// A file whose exclusive lock (`flock`) this handle holds; its drop releases the lock
/// explicitly (`unlock`), not by closing the file: an `flock` belongs to the open file
/// description, which a child process spawned by another thread shares until its `exec`
/// closes it, so a close alone would leave the lock held for that moment.
#[derive(Debug)]
pub(crate) struct FileLock(Box<dyn FsFile>);

impl FileLock {
    /// Holds `file`, whose lock the caller took.
    pub(crate) fn new(file: Box<dyn FsFile>) -> FileLock {
        FileLock(file)
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // A failed unlock leaves the lock to the close that follows.
        let _ = self.0.unlock();
    }
}

/// An open file.
pub trait FsFile: Send + Sync + Debug {
    /// The file's length.
    fn len(&self) -> IoResult<u64>;
    /// True when the file is empty.
    fn is_empty(&self) -> IoResult<bool> {
        Ok(self.len()? == 0)
    }
    /// Reads exactly `out.len()` bytes at `offset` (`UnexpectedEof` past the end).
    fn read_at(&self, offset: u64, out: &mut [u8]) -> IoResult<()>;
    /// Writes all of `data` at `offset`, growing the file if needed.
    fn write_at(&self, offset: u64, data: &[u8]) -> IoResult<()>;
    /// Writes all of `pieces`, one after another, from `offset` (growing the file if
    /// needed): what [`FsFile::write_at`] of their concatenation writes, without building
    /// it. Like any write, a cut can leave a prefix of it. The default writes the pieces
    /// one [`FsFile::write_at`] at a time; a real file does it in one `pwritev` per at
    /// most 1024 pieces (Linux's `IOV_MAX`).
    fn write_vectored_at(&self, offset: u64, pieces: &[IoSlice<'_>]) -> IoResult<()> {
        let mut at = offset;
        for p in pieces {
            self.write_at(at, p)?;
            at += p.len() as u64;
        }
        Ok(())
    }
    /// Sets the length (new bytes read as zero).
    fn set_len(&self, len: u64) -> IoResult<()>;
    /// Gives back the space of the `len` bytes at `offset`: they read as zeros afterwards
    /// and the file's length is unchanged; durable as a write is. `Ok(false)` when the file
    /// system cannot (the bytes then stay as they were). The default does nothing.
    fn punch_hole(&self, offset: u64, len: u64) -> IoResult<bool> {
        let _ = (offset, len);
        Ok(false)
    }
    /// Makes the file's bytes and length durable (fdatasync).
    fn sync_data(&self) -> IoResult<()>;
    /// Makes the file's bytes, length and metadata durable (fsync); not its name.
    fn sync_all(&self) -> IoResult<()>;
    /// Starts writing the file's dirty bytes to the disk and returns without waiting: a
    /// later [`FsFile::sync_data`] then finds less to write. Makes nothing durable and
    /// promises nothing (a power cut may still lose any of it). An `Err` is a write error
    /// to be treated as a failed sync (the caller poisons: the bytes may be lost). The
    /// default does nothing; a real file on Linux asks `sync_file_range(WRITE)`.
    fn start_writeback(&self) -> IoResult<()> {
        Ok(())
    }
    /// Takes an exclusive advisory lock on this open file: `Ok(false)` if another handle
    /// holds one. Released by [`FsFile::unlock`] or when the handle is dropped.
    fn try_lock_exclusive(&self) -> IoResult<bool>;
    /// Releases the lock taken by [`FsFile::try_lock_exclusive`].
    fn unlock(&self) -> IoResult<()>;
    /// The real file underneath, if this is one (redb then uses its own `FileBackend`,
    /// with its file locks); otherwise the handle back.
    fn into_std(self: Box<Self>) -> Result<std::fs::File, Box<dyn FsFile>>;
}

/// Creates `dir` and its missing ancestors, syncing each new directory's parent so that the
/// new entries survive a power cut before this returns `Ok`.
pub fn create_dir_all_durably(fs: &dyn FileSystem, dir: &Path) -> IoResult<()> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| !d.as_os_str().is_empty()) {
        if fs.exists(d)? {
            break;
        }
        missing.push(d);
        at = d.parent();
    }
    fs.create_dir_all(dir)?;
    // Parents first: a child's entry is useless if its parent's entry is lost.
    for d in missing.into_iter().rev() {
        fs.sync_dir(parent_of(d))?;
    }
    Ok(())
}

/// The directory holding `path` (`.` for a bare name).
pub(crate) fn parent_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdFs;

impl FileSystem for StdFs {
    fn create_dir_all(&self, dir: &Path) -> IoResult<()> {
        std::fs::create_dir_all(dir)
    }
    fn open_file(&self, path: &Path, mode: OpenMode) -> IoResult<Box<dyn FsFile>> {
        let mut o = std::fs::OpenOptions::new();
        o.read(true).write(true);
        match mode {
            OpenMode::Existing => {}
            OpenMode::CreateOrOpen => {
                o.create(true).truncate(false);
            }
            OpenMode::CreateTruncate => {
                o.create(true).truncate(true);
            }
            OpenMode::ReadOnly => {
                o.write(false);
            }
        }
        let file = o.open(path)?;
        // A directory opens for reading; refused as the writable modes refuse it.
        if mode == OpenMode::ReadOnly && file.metadata()?.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "is a directory",
            ));
        }
        Ok(Box::new(StdFile(file)))
    }
    fn exists(&self, path: &Path) -> IoResult<bool> {
        path.try_exists()
    }
    fn rename(&self, from: &Path, to: &Path) -> IoResult<()> {
        std::fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> IoResult<()> {
        std::fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> IoResult<()> {
        std::fs::File::open(dir)?.sync_all()
    }
    fn allocated_bytes(&self, path: &Path) -> IoResult<u64> {
        use std::os::unix::fs::MetadataExt;
        Ok(std::fs::metadata(path)?.blocks() * 512)
    }
    fn list_dir(&self, dir: &Path) -> IoResult<Vec<std::ffi::OsString>> {
        std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name()))
            .collect()
    }
}

/// A real open file.
#[derive(Debug)]
pub struct StdFile(std::fs::File);

impl FsFile for StdFile {
    fn len(&self) -> IoResult<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn read_at(&self, offset: u64, out: &mut [u8]) -> IoResult<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.0, out, offset)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> IoResult<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.0, data, offset)
    }
    fn write_vectored_at(&self, offset: u64, pieces: &[IoSlice<'_>]) -> IoResult<()> {
        let placed = PlacedPieces::new(offset, pieces);
        let mut pieces = placed.slices(pieces);
        // Empty pieces would read as a `pwritev` that wrote nothing.
        pieces.retain(|p| !p.is_empty());
        let mut at = offset;
        for mut left in pieces.chunks_mut(IO_SLICES_MAX) {
            while !left.is_empty() {
                match rustix::io::pwritev(&self.0, left, at) {
                    Ok(0) => {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::WriteZero,
                            "pwritev wrote nothing",
                        ));
                    }
                    Ok(n) => {
                        at += n as u64;
                        IoSlice::advance_slices(&mut left, n);
                    }
                    Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }
    fn set_len(&self, len: u64) -> IoResult<()> {
        self.0.set_len(len)
    }
    fn punch_hole(&self, offset: u64, len: u64) -> IoResult<bool> {
        use rustix::fs::FallocateFlags;
        match rustix::fs::fallocate(
            &self.0,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            offset,
            len,
        ) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::OPNOTSUPP) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
    fn sync_data(&self) -> IoResult<()> {
        self.0.sync_data()
    }
    fn sync_all(&self) -> IoResult<()> {
        self.0.sync_all()
    }
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    fn start_writeback(&self) -> IoResult<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain system call on a descriptor this handle owns for the call's
        // duration; no memory is passed. Offset 0 and length 0: the whole file.
        let rc =
            unsafe { libc::sync_file_range(self.0.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
    fn try_lock_exclusive(&self) -> IoResult<bool> {
        match fs4::fs_std::FileExt::try_lock_exclusive(&self.0) {
            Ok(locked) => Ok(locked),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }
    fn unlock(&self) -> IoResult<()> {
        fs4::fs_std::FileExt::unlock(&self.0)
    }
    fn into_std(self: Box<Self>) -> Result<std::fs::File, Box<dyn FsFile>> {
        Ok(self.0)
    }
}

/// A piece shorter than this is written from where it lies, whatever its address. Why: the
/// slow copy below costs little on a short piece, less than copying it apart.
const PLACE_PIECES_FROM_BYTES: usize = 4 << 10;

/// True when writing the bytes at `addr` to file offset `offset` makes the kernel copy
/// them into the page cache inside the 4K-aliasing window ([`copy_aliases`]: the page
/// cache's destination lies at the offset modulo a page).
fn write_aliases(offset: u64, addr: usize) -> bool {
    copy_aliases(offset as usize, addr)
}

/// The pieces of a vectored write that would be copied slowly by the kernel
/// ([`write_aliases`]), copied once into buffers placed [`ALIASING_AHEAD_BYTES_MAX`] + 1
/// bytes ahead of them: that copy runs at full speed, and the kernel's then reads each one
/// a few bytes behind where it writes.
struct PlacedPieces {
    /// Per re-placed piece: its index, its buffer and where the copy starts in it.
    copies: Vec<(usize, Vec<u8>, usize)>,
}

impl PlacedPieces {
    fn new(offset: u64, pieces: &[IoSlice<'_>]) -> Self {
        let mut copies = Vec::new();
        let mut at = offset;
        for (i, p) in pieces.iter().enumerate() {
            if p.len() >= PLACE_PIECES_FROM_BYTES && write_aliases(at, p.as_ptr() as usize) {
                let mut buf = Vec::with_capacity(p.len() + ALIAS_SPAN_BYTES);
                let want = (p.as_ptr() as usize + ALIASING_AHEAD_BYTES_MAX + 1) % ALIAS_SPAN_BYTES;
                let start = want.wrapping_sub(buf.as_ptr() as usize) % ALIAS_SPAN_BYTES;
                // Within the capacity: no reallocation moves the buffer.
                buf.resize(start, 0);
                buf.extend_from_slice(p);
                debug_assert!(!write_aliases(at, buf[start..].as_ptr() as usize));
                copies.push((i, buf, start));
            }
            at += p.len() as u64;
        }
        PlacedPieces { copies }
    }

    /// `pieces`, with the re-placed ones swapped for their copies.
    fn slices<'a>(&'a self, pieces: &[IoSlice<'a>]) -> Vec<IoSlice<'a>> {
        let mut out = pieces.to_vec();
        for (i, buf, start) in &self.copies {
            out[*i] = IoSlice::new(&buf[*start..*start + pieces[*i].len()]);
        }
        out
    }
}

/// redb's storage over a file of this layer: a real file keeps redb's `FileBackend` (and its
/// byte-range locks); any other file is read and written through [`FsFile`], without locks
/// (redb then runs as the only writer, which `Home`'s `LOCK` guarantees).
#[derive(Debug)]
pub struct FsBackend(Inner);

#[derive(Debug)]
enum Inner {
    Std(redb::backends::FileBackend),
    Layer(Box<dyn FsFile>),
}

impl FsBackend {
    /// A backend over `file`.
    pub fn new(file: Box<dyn FsFile>) -> Result<Self, redb::DatabaseError> {
        Ok(FsBackend(match file.into_std() {
            Ok(f) => Inner::Std(redb::backends::FileBackend::new(f)?),
            Err(file) => Inner::Layer(file),
        }))
    }
}

macro_rules! lock_fwd {
    ($name:ident, $ret:ty) => {
        fn $name(&self, s: Bound<u64>, e: Bound<u64>) -> Result<$ret, BackendError> {
            match &self.0 {
                Inner::Std(b) => b.$name(s, e),
                Inner::Layer(_) => Err(BackendError::Unsupported),
            }
        }
    };
}

impl StorageBackend for FsBackend {
    fn len(&self) -> IoResult<u64> {
        match &self.0 {
            Inner::Std(b) => b.len(),
            Inner::Layer(f) => f.len(),
        }
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> IoResult<()> {
        match &self.0 {
            Inner::Std(b) => b.read(offset, out),
            Inner::Layer(f) => f.read_at(offset, out),
        }
    }
    fn set_len(&self, len: u64) -> IoResult<()> {
        match &self.0 {
            Inner::Std(b) => b.set_len(len),
            Inner::Layer(f) => f.set_len(len),
        }
    }
    fn sync_data(&self) -> IoResult<()> {
        match &self.0 {
            Inner::Std(b) => b.sync_data(),
            Inner::Layer(f) => f.sync_data(),
        }
    }
    fn write(&self, offset: u64, data: &[u8]) -> IoResult<()> {
        match &self.0 {
            Inner::Std(b) => b.write(offset, data),
            Inner::Layer(f) => f.write_at(offset, data),
        }
    }
    fn close(&self) -> IoResult<()> {
        match &self.0 {
            Inner::Std(b) => b.close(),
            Inner::Layer(_) => Ok(()),
        }
    }
    lock_fwd!(try_lock_range, bool);
    lock_fwd!(try_lock_shared_range, bool);
    lock_fwd!(lock_range, ());
    lock_fwd!(lock_shared_range, ());
    lock_fwd!(unlock_range, ());
    lock_fwd!(query_lock_range, bool);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real file's vectored write lays the pieces down in order, at the offset, over more
    /// pieces than one `pwritev` takes and around empty ones; the oracle is a plain read.
    #[test]
    fn a_vectored_write_is_the_concatenation_written_at_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = StdFs.open_file(&path, OpenMode::CreateTruncate).unwrap();
        let owned: Vec<Vec<u8>> = (0..IO_SLICES_MAX * 2 + 3)
            .map(|i| vec![(i % 253) as u8; i % 7])
            .collect();
        let pieces: Vec<IoSlice<'_>> = owned.iter().map(|p| IoSlice::new(p)).collect();
        file.write_at(0, b"head").unwrap();
        file.write_vectored_at(4, &pieces).unwrap();
        let want: Vec<u8> = b"head".iter().copied().chain(owned.concat()).collect();
        assert_eq!(file.len().unwrap(), want.len() as u64);
        let mut got = vec![0; want.len()];
        file.read_at(0, &mut got).unwrap();
        assert_eq!(got, want);
    }
}

#[cfg(test)]
mod placement_tests {
    use super::*;

    /// The window written out apart from [`write_aliases`]: the destination 1 to 63 bytes
    /// ahead of the source, modulo 4 KiB.
    fn ahead_by_a_few(offset: u64, addr: usize) -> bool {
        let ahead = (offset % 4096) as i64 - (addr % 4096) as i64;
        let ahead = if ahead < 0 { ahead + 4096 } else { ahead };
        (1..64).contains(&ahead)
    }

    /// Every long piece the kernel would copy a few bytes ahead is re-placed, and only
    /// those; after it no long piece is; the file holds the same bytes either way.
    #[test]
    fn long_pieces_copied_a_few_bytes_ahead_are_re_placed_and_written_the_same() {
        let backing: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let base = backing.as_ptr() as usize;
        let long = PLACE_PIECES_FROM_BYTES + 100;
        // Pieces whose source lies `ahead` bytes behind their file offset, modulo 4 KiB,
        // each after a short piece; the write starts at `start`.
        let start = 4096 * 3 + 5;
        let mut pieces = Vec::new();
        let mut at = start as u64;
        let mut want_placed = Vec::new();
        for (n, ahead) in [0usize, 1, 15, 16, 63, 64, 100, 4095, 2]
            .into_iter()
            .enumerate()
        {
            let glue = &backing[n * 7..n * 7 + 3];
            pieces.push(IoSlice::new(glue));
            at += 3;
            // The source address ≡ offset − ahead (mod 4096).
            let want_mod = (at as usize + 4096 - ahead) % 4096;
            let skip = (want_mod + 4096 - base % 4096) % 4096 + 4096 * (n + 1) * 4;
            let piece = &backing[skip..skip + long];
            assert_eq!(
                ahead_by_a_few(at, piece.as_ptr() as usize),
                (1..64).contains(&ahead)
            );
            if (1..64).contains(&ahead) {
                want_placed.push(pieces.len());
            }
            pieces.push(IoSlice::new(piece));
            at += long as u64;
        }
        // A short piece a few bytes ahead stays where it lies.
        let short = &backing[1..100];
        pieces.push(IoSlice::new(short));
        let placed = PlacedPieces::new(start as u64, &pieces);
        let got: Vec<usize> = placed.copies.iter().map(|(i, _, _)| *i).collect();
        assert_eq!(got, want_placed);
        let slices = placed.slices(&pieces);
        let mut at = start as u64;
        for (p, q) in slices.iter().zip(&pieces) {
            assert_eq!(&p[..], &q[..]);
            if p.len() >= PLACE_PIECES_FROM_BYTES {
                assert!(!ahead_by_a_few(at, p.as_ptr() as usize), "offset {at}");
            }
            at += p.len() as u64;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = StdFs
            .open_file(&dir.path().join("f"), OpenMode::CreateTruncate)
            .unwrap();
        file.write_vectored_at(start as u64, &pieces).unwrap();
        let whole: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
        let mut back = vec![0; whole.len()];
        file.read_at(start as u64, &mut back).unwrap();
        assert_eq!(back, whole);
    }
}
