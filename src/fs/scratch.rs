//! [`ScratchFs`]: a copy-on-write layer over another file system that never writes to it.
//!
//! Every file underneath is opened [`OpenMode::ReadOnly`]; what the layer above writes —
//! bytes, lengths, new files, renames, removals, directories — lives in memory and is gone
//! when the layer is dropped. A home opened on it ([`crate::Home::open_read_only`]) runs
//! the same code as a writable one (recovery, the handshake, a rollback) and leaves every
//! file byte for byte as it was: the tool decides a refusal on it before it opens a home
//! for writing, and `verify` reads a home through it.
//!
//! Invariant: no call reaches the file system underneath except `open_file` with
//! [`OpenMode::ReadOnly`], `exists`, `list_dir`, `allocated_bytes`, and reads, locks and
//! unlocks of the files so opened. Invariant: the memory it holds is at most
//! [`SCRATCH_BYTES_MAX`]; a write past it fails with `OutOfMemory` (nothing is evicted).

use std::collections::{HashMap, HashSet};
use std::io::{Error as IoError, ErrorKind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{FileSystem, FsFile, OpenMode, parent_of};

type IoResult<T> = std::io::Result<T>;

/// The page the layer copies a file in: a write materialises the pages it touches.
const PAGE_BYTES: u64 = 4096;

/// The most bytes of written pages a [`ScratchFs`] holds. Why this bound: a read-only open
/// writes what a writable open would — redb's headers, and a journal recovery's apply of
/// the units past its checkpoint, at most the overlay's 256 MiB and the index pages it
/// touches — and a command must not grow without bound on a damaged or huge home.
pub const SCRATCH_BYTES_MAX: u64 = 1 << 30;

/// A copy-on-write file system over `inner` that writes nothing to it (see the module).
#[derive(Debug)]
pub struct ScratchFs {
    inner: Arc<dyn FileSystem>,
    layer: Mutex<Layer>,
    budget: Arc<Budget>,
}

/// What the layer changed: the files it opened or created (by their current path), the
/// paths removed or renamed away, the directories it created.
#[derive(Debug, Default)]
struct Layer {
    files: HashMap<PathBuf, Arc<Node>>,
    gone: HashSet<PathBuf>,
    dirs: HashSet<PathBuf>,
}

/// Bytes of materialised pages, across the layer's files.
#[derive(Debug, Default)]
struct Budget(AtomicU64);

impl Budget {
    fn take(&self, bytes: u64) -> IoResult<()> {
        let before = self.0.fetch_add(bytes, Ordering::Relaxed);
        if before + bytes > SCRATCH_BYTES_MAX {
            self.0.fetch_sub(bytes, Ordering::Relaxed);
            return Err(IoError::new(
                ErrorKind::OutOfMemory,
                format!(
                    "a read-only open keeps its writes in memory, and they passed \
                     {SCRATCH_BYTES_MAX} bytes"
                ),
            ));
        }
        Ok(())
    }
    fn give(&self, bytes: u64) {
        self.0.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// One file of the layer: the file underneath (if any, read-only) and what was written.
#[derive(Debug)]
struct Node {
    base: Option<Box<dyn FsFile>>,
    content: Mutex<Content>,
    /// The handle holding this file's lock, if any.
    locked_by: Mutex<Option<u64>>,
}

#[derive(Debug, Default)]
struct Content {
    len: u64,
    /// Bytes below this (and not in `pages`) are read from the file underneath; above it
    /// they read as zeros. Only ever lowered (a truncation).
    base_len: u64,
    pages: HashMap<u64, Box<[u8]>>,
}

impl ScratchFs {
    /// A layer over `inner`.
    pub fn over(inner: Arc<dyn FileSystem>) -> ScratchFs {
        ScratchFs {
            inner,
            layer: Mutex::new(Layer::default()),
            budget: Arc::new(Budget::default()),
        }
    }

    /// Bytes of written pages the layer holds now.
    pub fn held_bytes(&self) -> u64 {
        self.budget.0.load(Ordering::Relaxed)
    }

    fn layer(&self) -> MutexGuard<'_, Layer> {
        self.layer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True when `path` exists in the layer's view.
    fn exists_in(&self, l: &Layer, path: &Path) -> IoResult<bool> {
        if l.files.contains_key(path) || l.dirs.contains(path) {
            return Ok(true);
        }
        if l.gone.contains(path) {
            return Ok(false);
        }
        self.inner.exists(path)
    }

    /// The layer's node for the existing file at `path`, opened underneath if needed;
    /// `None` when there is no file there.
    fn node(&self, l: &mut Layer, path: &Path) -> IoResult<Option<Arc<Node>>> {
        if let Some(n) = l.files.get(path) {
            return Ok(Some(n.clone()));
        }
        if l.gone.contains(path) || l.dirs.contains(path) || !self.inner.exists(path)? {
            return Ok(None);
        }
        let base = self.inner.open_file(path, OpenMode::ReadOnly)?;
        let len = base.len()?;
        let node = Arc::new(Node {
            base: Some(base),
            content: Mutex::new(Content {
                len,
                base_len: len,
                pages: HashMap::new(),
            }),
            locked_by: Mutex::new(None),
        });
        l.files.insert(path.to_path_buf(), node.clone());
        Ok(Some(node))
    }

    fn handle(&self, node: Arc<Node>) -> Box<dyn FsFile> {
        static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);
        Box::new(ScratchFile {
            node,
            budget: self.budget.clone(),
            id: NEXT_HANDLE.fetch_add(1, Ordering::Relaxed),
        })
    }
}

impl FileSystem for ScratchFs {
    fn create_dir_all(&self, dir: &Path) -> IoResult<()> {
        let mut l = self.layer();
        let mut d = dir;
        while !self.exists_in(&l, d)? {
            l.dirs.insert(d.to_path_buf());
            match d.parent() {
                Some(p) if !p.as_os_str().is_empty() => d = p,
                _ => break,
            }
        }
        Ok(())
    }

    fn open_file(&self, path: &Path, mode: OpenMode) -> IoResult<Box<dyn FsFile>> {
        let mut l = self.layer();
        if let Some(node) = self.node(&mut l, path)? {
            if mode == OpenMode::CreateTruncate {
                node.set_len(&self.budget, 0)?;
            }
            return Ok(self.handle(node));
        }
        if matches!(mode, OpenMode::Existing | OpenMode::ReadOnly) {
            return Err(IoError::new(ErrorKind::NotFound, "no such file"));
        }
        if !self.exists_in(&l, parent_of(path))? {
            return Err(IoError::new(ErrorKind::NotFound, "no such directory"));
        }
        let node = Arc::new(Node {
            base: None,
            content: Mutex::new(Content::default()),
            locked_by: Mutex::new(None),
        });
        l.gone.remove(path);
        l.files.insert(path.to_path_buf(), node.clone());
        Ok(self.handle(node))
    }

    fn exists(&self, path: &Path) -> IoResult<bool> {
        self.exists_in(&self.layer(), path)
    }

    fn rename(&self, from: &Path, to: &Path) -> IoResult<()> {
        let mut l = self.layer();
        let Some(node) = self.node(&mut l, from)? else {
            return Err(IoError::new(ErrorKind::NotFound, "no such file"));
        };
        l.files.remove(from);
        l.gone.insert(from.to_path_buf());
        l.gone.remove(to);
        l.files.insert(to.to_path_buf(), node);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> IoResult<()> {
        let mut l = self.layer();
        if l.files.remove(path).is_none() && !self.exists_in(&l, path)? {
            return Err(IoError::new(ErrorKind::NotFound, "no such file"));
        }
        l.gone.insert(path.to_path_buf());
        Ok(())
    }

    fn sync_dir(&self, _dir: &Path) -> IoResult<()> {
        // Nothing here is ever durable, and nothing underneath changes.
        Ok(())
    }

    fn allocated_bytes(&self, path: &Path) -> IoResult<u64> {
        let l = self.layer();
        match l.files.get(path) {
            Some(n) => {
                let c = n.content();
                // A file written in place only (redb's header) is charged what it holds.
                if n.base.is_some() && c.len == c.base_len {
                    drop(c);
                    self.inner.allocated_bytes(path)
                } else {
                    Ok(c.len)
                }
            }
            None if l.gone.contains(path) => Err(IoError::new(ErrorKind::NotFound, "no such file")),
            None => self.inner.allocated_bytes(path),
        }
    }

    fn list_dir(&self, dir: &Path) -> IoResult<Vec<std::ffi::OsString>> {
        let l = self.layer();
        if !self.exists_in(&l, dir)? {
            return Err(IoError::new(ErrorKind::NotFound, "no such directory"));
        }
        let mut names: Vec<std::ffi::OsString> = if l.dirs.contains(dir) {
            Vec::new()
        } else {
            self.inner.list_dir(dir)?
        };
        names.retain(|n| !l.gone.contains(&dir.join(n)));
        let ours = l.files.keys().chain(l.dirs.iter());
        for p in ours.filter(|p| p.parent() == Some(dir)) {
            if let Some(n) = p.file_name()
                && !names.iter().any(|m| m == n)
            {
                names.push(n.to_os_string());
            }
        }
        Ok(names)
    }
}

impl Node {
    fn content(&self) -> MutexGuard<'_, Content> {
        self.content.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fills `out` from the file underneath at `offset`, zeros past `base_len`.
    fn read_base(&self, base_len: u64, offset: u64, out: &mut [u8]) -> IoResult<()> {
        let from_base = base_len.saturating_sub(offset).min(out.len() as u64) as usize;
        if from_base > 0 {
            let Some(base) = &self.base else {
                unreachable!("base_len is 0 without a file underneath")
            };
            base.read_at(offset, &mut out[..from_base])?;
        }
        out[from_base..].fill(0);
        Ok(())
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) -> IoResult<()> {
        let c = self.content();
        let end = offset
            .checked_add(out.len() as u64)
            .filter(|e| *e <= c.len)
            .ok_or_else(|| IoError::new(ErrorKind::UnexpectedEof, "read past the end"))?;
        let mut at = offset;
        while at < end {
            let page = at / PAGE_BYTES;
            let within = (at % PAGE_BYTES) as usize;
            let out_at = (at - offset) as usize;
            if let Some(p) = c.pages.get(&page) {
                let n = (PAGE_BYTES as usize - within).min((end - at) as usize);
                out[out_at..out_at + n].copy_from_slice(&p[within..within + n]);
                at += n as u64;
                continue;
            }
            // A run of pages never written: one read underneath.
            let mut run_end = ((page + 1) * PAGE_BYTES).min(end);
            while run_end < end && !c.pages.contains_key(&(run_end / PAGE_BYTES)) {
                run_end = (run_end + PAGE_BYTES).min(end);
            }
            let n = (run_end - at) as usize;
            self.read_base(c.base_len, at, &mut out[out_at..out_at + n])?;
            at = run_end;
        }
        Ok(())
    }

    fn write_at(&self, budget: &Budget, offset: u64, data: &[u8]) -> IoResult<()> {
        let mut c = self.content();
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| IoError::new(ErrorKind::InvalidInput, "write past u64"))?;
        let mut at = offset;
        while at < end {
            let page = at / PAGE_BYTES;
            let within = (at % PAGE_BYTES) as usize;
            let n = (PAGE_BYTES as usize - within).min((end - at) as usize);
            if !c.pages.contains_key(&page) {
                budget.take(PAGE_BYTES)?;
                let mut fresh = vec![0u8; PAGE_BYTES as usize].into_boxed_slice();
                let page_start = page * PAGE_BYTES;
                let readable = c.len.saturating_sub(page_start).min(PAGE_BYTES) as usize;
                if let Err(e) = self.read_base(c.base_len, page_start, &mut fresh[..readable]) {
                    budget.give(PAGE_BYTES);
                    return Err(e);
                }
                c.pages.insert(page, fresh);
            }
            let src = (at - offset) as usize;
            let Some(p) = c.pages.get_mut(&page) else {
                unreachable!("the page was materialised above")
            };
            p[within..within + n].copy_from_slice(&data[src..src + n]);
            at += n as u64;
        }
        c.len = c.len.max(end);
        Ok(())
    }

    fn set_len(&self, budget: &Budget, len: u64) -> IoResult<()> {
        let mut c = self.content();
        if len < c.len {
            let keep_pages = len.div_ceil(PAGE_BYTES);
            let before = c.pages.len();
            c.pages.retain(|p, _| *p < keep_pages);
            budget.give((before - c.pages.len()) as u64 * PAGE_BYTES);
            // The kept part of the last page reads as written; the rest as zeros.
            if let Some(p) = c.pages.get_mut(&(len / PAGE_BYTES)) {
                p[(len % PAGE_BYTES) as usize..].fill(0);
            }
            c.base_len = c.base_len.min(len);
        }
        c.len = len;
        Ok(())
    }
}

/// An open file of a [`ScratchFs`].
#[derive(Debug)]
struct ScratchFile {
    node: Arc<Node>,
    budget: Arc<Budget>,
    id: u64,
}

impl FsFile for ScratchFile {
    fn len(&self) -> IoResult<u64> {
        Ok(self.node.content().len)
    }
    fn read_at(&self, offset: u64, out: &mut [u8]) -> IoResult<()> {
        self.node.read_at(offset, out)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> IoResult<()> {
        self.node.write_at(&self.budget, offset, data)
    }
    fn set_len(&self, len: u64) -> IoResult<()> {
        self.node.set_len(&self.budget, len)
    }
    fn sync_data(&self) -> IoResult<()> {
        Ok(())
    }
    fn sync_all(&self) -> IoResult<()> {
        Ok(())
    }
    /// The lock underneath too (a read-only descriptor can hold one): a home in use by a
    /// writer is refused, and no writer opens it while this is held.
    fn try_lock_exclusive(&self) -> IoResult<bool> {
        let mut by = self
            .node
            .locked_by
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match *by {
            Some(id) => Ok(id == self.id),
            None => {
                let locked = match &self.node.base {
                    Some(b) => b.try_lock_exclusive()?,
                    None => true,
                };
                if locked {
                    *by = Some(self.id);
                }
                Ok(locked)
            }
        }
    }
    fn unlock(&self) -> IoResult<()> {
        let mut by = self
            .node
            .locked_by
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if *by == Some(self.id) {
            *by = None;
            if let Some(b) = &self.node.base {
                b.unlock()?;
            }
        }
        Ok(())
    }
    fn into_std(self: Box<Self>) -> Result<std::fs::File, Box<dyn FsFile>> {
        Err(self)
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = self.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::StdFs;

    fn write(path: &Path, bytes: &[u8]) {
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn writes_stay_in_memory_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        write(&a, &[7u8; 10_000]);
        let fs = ScratchFs::over(Arc::new(StdFs));
        let f = fs.open_file(&a, OpenMode::Existing).unwrap();
        f.write_at(4090, &[1u8; 20]).unwrap();
        f.write_at(12_000, b"tail").unwrap();
        let mut out = vec![0u8; 12_004];
        fs.open_file(&a, OpenMode::Existing)
            .unwrap()
            .read_at(0, &mut out)
            .unwrap();
        assert_eq!(&out[..4090], &[7u8; 4090][..]);
        assert_eq!(&out[4090..4110], &[1u8; 20][..]);
        assert_eq!(&out[4110..10_000], &[7u8; 5890][..]);
        assert_eq!(&out[10_000..12_000], &[0u8; 2000][..]);
        assert_eq!(&out[12_000..], b"tail");
        f.set_len(5000).unwrap();
        f.set_len(9000).unwrap();
        let mut out = vec![0u8; 9000];
        f.read_at(0, &mut out).unwrap();
        assert_eq!(&out[4110..5000], &[7u8; 890][..]);
        assert_eq!(
            &out[5000..],
            &[0u8; 4000][..],
            "a truncated tail reads as zeros"
        );
        assert_eq!(
            std::fs::read(&a).unwrap(),
            vec![7u8; 10_000],
            "nothing reached the file"
        );
    }

    #[test]
    fn files_and_directories_change_in_the_layer_only() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        write(&a, b"a");
        let fs = ScratchFs::over(Arc::new(StdFs));
        fs.create_dir_all(&dir.path().join("d/e")).unwrap();
        let b = dir.path().join("d/e/b");
        fs.open_file(&b, OpenMode::CreateOrOpen)
            .unwrap()
            .write_at(0, b"b")
            .unwrap();
        fs.rename(&a, &dir.path().join("c")).unwrap();
        assert!(!fs.exists(&a).unwrap());
        assert!(fs.exists(&b).unwrap());
        let mut names = fs.list_dir(dir.path()).unwrap();
        names.sort();
        assert_eq!(names, ["c", "d"]);
        fs.remove_file(&dir.path().join("c")).unwrap();
        assert!(fs.open_file(&a, OpenMode::Existing).is_err());
        let mut real: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        real.sort();
        assert_eq!(real, ["a"], "the directory underneath is as it was");
        assert_eq!(std::fs::read(&a).unwrap(), b"a");
    }

    /// Over a simulated file system: no operation reaches it (its op count and its
    /// contents are unchanged), and a file it opened read-only refuses a write — the
    /// negative control for a layer that would write through.
    #[test]
    fn nothing_reaches_the_file_system_underneath() {
        use crate::fs::SimFs;
        let sim = SimFs::new();
        let p = Path::new("/h/a");
        sim.create_dir_all(Path::new("/h")).unwrap();
        sim.open_file(p, OpenMode::CreateOrOpen)
            .unwrap()
            .write_at(0, b"abc")
            .unwrap();
        let (ops, print) = (sim.ops(), sim.fingerprint());
        let fs = ScratchFs::over(Arc::new(sim.clone()));
        let f = fs.open_file(p, OpenMode::Existing).unwrap();
        f.write_at(1, b"X").unwrap();
        f.set_len(2).unwrap();
        f.sync_data().unwrap();
        fs.rename(p, Path::new("/h/b")).unwrap();
        fs.create_dir_all(Path::new("/h/d")).unwrap();
        fs.sync_dir(Path::new("/h")).unwrap();
        assert_eq!((sim.ops(), sim.fingerprint()), (ops, print));
        let ro = sim.open_file(p, OpenMode::ReadOnly).unwrap();
        assert_eq!(
            ro.write_at(0, b"z").unwrap_err().kind(),
            ErrorKind::PermissionDenied
        );
        assert_eq!(sim.read(p).unwrap(), b"abc");
    }

    #[test]
    fn a_lock_held_underneath_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("LOCK");
        let held = StdFs.open_file(&lock, OpenMode::CreateOrOpen).unwrap();
        assert!(held.try_lock_exclusive().unwrap());
        let fs = ScratchFs::over(Arc::new(StdFs));
        let f = fs.open_file(&lock, OpenMode::CreateOrOpen).unwrap();
        assert!(
            !f.try_lock_exclusive().unwrap(),
            "a writer's lock must be seen"
        );
        held.unlock().unwrap();
        assert!(f.try_lock_exclusive().unwrap());
        let g = fs.open_file(&lock, OpenMode::Existing).unwrap();
        assert!(!g.try_lock_exclusive().unwrap(), "one handle holds it");
        drop(f);
        assert!(
            g.try_lock_exclusive().unwrap(),
            "dropping the handle releases it"
        );
    }

    #[test]
    fn writes_past_the_bound_fail() {
        let dir = tempfile::tempdir().unwrap();
        let fs = ScratchFs::over(Arc::new(StdFs));
        let f = fs
            .open_file(&dir.path().join("big"), OpenMode::CreateOrOpen)
            .unwrap();
        // Pages materialise one at a time: one write just inside the bound, one past it.
        let last = SCRATCH_BYTES_MAX - PAGE_BYTES;
        fs.budget.0.store(last, Ordering::Relaxed);
        f.write_at(0, &[1]).unwrap();
        let e = f.write_at(PAGE_BYTES, &[1]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfMemory);
        assert_eq!(fs.held_bytes(), SCRATCH_BYTES_MAX);
        f.set_len(0).unwrap();
        assert_eq!(fs.held_bytes(), last);
    }
}
