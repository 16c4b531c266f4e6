//! [`SimFile`]: a handle on a simulated file.

use super::machine::*;
use super::*;

/// An open file of a [`SimFs`].
#[derive(Debug)]
pub struct SimFile {
    pub(super) fs: SimFs,
    pub(super) path: PathBuf,
    pub(super) ino: u64,
    pub(super) handle: u64,
    /// Opened [`OpenMode::ReadOnly`]: writes fail with `PermissionDenied` (`EBADF` on a
    /// real file), so a layer that must not write cannot do so unnoticed.
    pub(super) read_only: bool,
}

impl SimFile {
    fn writable(&self) -> IoResult<()> {
        if self.read_only {
            return Err(io(
                std::io::ErrorKind::PermissionDenied,
                "file opened read-only",
            ));
        }
        Ok(())
    }

    fn sync(&self, kind: SimOp) -> IoResult<()> {
        let mut m = self.fs.lock();
        m.alive()?;
        let tick = m.tick(kind, &self.path);
        let i = m
            .inodes
            .get_mut(&self.ino)
            .ok_or_else(|| io(std::io::ErrorKind::NotFound, "no such file"))?;
        match tick {
            Tick::Go => {
                // The pending ops, not the live view: ops lost to a failed sync stay lost.
                let pending = std::mem::take(&mut i.pending);
                pending
                    .iter()
                    .for_each(|op| apply_file_op(&mut i.durable, op));
            }
            // A failed sync: its pending ops are never made durable (module docs).
            Tick::Eio => i.pending.clear(),
            Tick::Cut => {}
        }
        tick.result()
    }
}

impl FsFile for SimFile {
    fn len(&self) -> IoResult<u64> {
        let m = self.fs.lock();
        m.alive()?;
        Ok(m.inodes[&self.ino].live.len() as u64)
    }
    fn read_at(&self, offset: u64, out: &mut [u8]) -> IoResult<()> {
        let m = self.fs.lock();
        m.alive()?;
        let live = &m.inodes[&self.ino].live;
        let end = offset as usize + out.len();
        if end > live.len() {
            return Err(io(std::io::ErrorKind::UnexpectedEof, "read past the end"));
        }
        out.copy_from_slice(&live[offset as usize..end]);
        Ok(())
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> IoResult<()> {
        self.writable()?;
        let op = FileOp::Write {
            off: offset,
            data: data.to_vec(),
        };
        self.fs
            .lock()
            .file_op(SimOp::Write, &self.path, self.ino, op)
    }
    /// One write of the pieces' concatenation: one operation a cut can interrupt or lose,
    /// as one `pwritev` is.
    fn write_vectored_at(&self, offset: u64, pieces: &[std::io::IoSlice<'_>]) -> IoResult<()> {
        let whole: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
        self.write_at(offset, &whole)
    }
    fn set_len(&self, len: u64) -> IoResult<()> {
        self.writable()?;
        self.fs
            .lock()
            .file_op(SimOp::SetLen, &self.path, self.ino, FileOp::SetLen(len))
    }
    /// A write of zeros within the file (one operation a cut can interrupt or lose), never
    /// past its end: the length is kept.
    fn punch_hole(&self, offset: u64, len: u64) -> IoResult<bool> {
        self.writable()?;
        let mut m = self.fs.lock();
        m.alive()?;
        let file_len = m
            .inodes
            .get(&self.ino)
            .ok_or_else(|| io(std::io::ErrorKind::NotFound, "no such file"))?
            .live
            .len() as u64;
        let end = offset.saturating_add(len).min(file_len);
        if end <= offset {
            return Ok(true);
        }
        let op = FileOp::Write {
            off: offset,
            data: vec![0; (end - offset) as usize],
        };
        m.file_op(SimOp::Write, &self.path, self.ino, op)?;
        Ok(true)
    }
    fn sync_data(&self) -> IoResult<()> {
        self.sync(SimOp::SyncData)
    }
    fn sync_all(&self) -> IoResult<()> {
        self.sync(SimOp::SyncAll)
    }
    fn try_lock_exclusive(&self) -> IoResult<bool> {
        let mut m = self.fs.lock();
        m.alive()?;
        match m.locks.get(&self.ino) {
            Some(h) if *h != self.handle => Ok(false),
            _ => {
                m.locks.insert(self.ino, self.handle);
                Ok(true)
            }
        }
    }
    fn unlock(&self) -> IoResult<()> {
        let mut m = self.fs.lock();
        if m.locks.get(&self.ino) == Some(&self.handle) {
            m.locks.remove(&self.ino);
        }
        Ok(())
    }
    fn into_std(self: Box<Self>) -> Result<std::fs::File, Box<dyn FsFile>> {
        Err(self)
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        // Closing the handle releases its lock (as `flock` does).
        let _ = self.unlock();
    }
}
