//! [`FileSystem`] for [`SimFs`]: every operation counted, cut or failed as the machine says.

use super::machine::*;
use super::*;

impl FileSystem for SimFs {
    fn create_dir_all(&self, dir: &Path) -> IoResult<()> {
        let norm = normalize(dir)?;
        let mut m = self.lock();
        m.alive()?;
        let mut at = PathBuf::from("/");
        for c in norm.components().skip(1) {
            let name = c.as_os_str().to_os_string();
            let child = at.join(&name);
            match m.lookup(&child)? {
                Some(Entry::Dir) => {}
                Some(Entry::File(_)) => {
                    return Err(io(
                        std::io::ErrorKind::AlreadyExists,
                        "a file is in the way",
                    ));
                }
                None => {
                    // The directory exists (empty) from the op on, whether its entry
                    // survives a crash or not.
                    m.dirs.entry(child.clone()).or_default();
                    m.dir_op(
                        SimOp::Mkdir,
                        &at,
                        DirOp::Link {
                            name,
                            entry: Entry::Dir,
                        },
                    )?;
                }
            }
            at = child;
        }
        Ok(())
    }

    fn open_file(&self, path: &Path, mode: OpenMode) -> IoResult<Box<dyn FsFile>> {
        let (parent, name) = split(path)?;
        let full = parent.join(&name);
        let mut m = self.lock();
        m.alive()?;
        if !m.dirs.contains_key(&parent) || m.lookup(&parent)? != Some(Entry::Dir) {
            return Err(io(std::io::ErrorKind::NotFound, "no such directory"));
        }
        let ino = match (m.lookup(&full)?, mode) {
            (Some(Entry::Dir), _) => {
                return Err(io(std::io::ErrorKind::IsADirectory, "is a directory"));
            }
            (Some(Entry::File(ino)), OpenMode::CreateTruncate) => {
                m.file_op(SimOp::SetLen, &full, ino, FileOp::SetLen(0))?;
                ino
            }
            (Some(Entry::File(ino)), _) => ino,
            (None, OpenMode::Existing | OpenMode::ReadOnly) => {
                return Err(io(std::io::ErrorKind::NotFound, "no such file"));
            }
            (None, _) => {
                let ino = m.next_ino;
                m.next_ino += 1;
                m.inodes.insert(ino, Inode::default());
                m.dir_op(
                    SimOp::Create,
                    &parent,
                    DirOp::Link {
                        name,
                        entry: Entry::File(ino),
                    },
                )?;
                ino
            }
        };
        Ok(Box::new(SimFile {
            fs: self.clone(),
            path: full,
            ino,
            handle: NEXT_HANDLE.fetch_add(1, Ordering::Relaxed),
            read_only: mode == OpenMode::ReadOnly,
        }))
    }

    fn exists(&self, path: &Path) -> IoResult<bool> {
        let m = self.lock();
        m.alive()?;
        Ok(m.lookup(path)?.is_some())
    }

    fn rename(&self, from: &Path, to: &Path) -> IoResult<()> {
        let (pf, nf) = split(from)?;
        let (pt, nt) = split(to)?;
        if pf != pt {
            return Err(io(
                std::io::ErrorKind::Unsupported,
                "the simulated file system renames within one directory only",
            ));
        }
        let mut m = self.lock();
        m.alive()?;
        let entry = m
            .lookup(from)?
            .ok_or_else(|| io(std::io::ErrorKind::NotFound, "no such file"))?;
        m.dir_op(
            SimOp::Rename,
            &pf,
            DirOp::Rename {
                from: nf,
                to: nt,
                entry,
            },
        )
    }

    fn remove_file(&self, path: &Path) -> IoResult<()> {
        let (parent, name) = split(path)?;
        let mut m = self.lock();
        m.alive()?;
        match m.lookup(path)? {
            None => Err(io(std::io::ErrorKind::NotFound, "no such file")),
            Some(Entry::Dir) => Err(io(std::io::ErrorKind::IsADirectory, "is a directory")),
            Some(entry) => m.dir_op(SimOp::Unlink, &parent, DirOp::Unlink { name, entry }),
        }
    }

    fn sync_dir(&self, dir: &Path) -> IoResult<()> {
        let norm = normalize(dir)?;
        let mut m = self.lock();
        m.alive()?;
        if m.lookup(&norm)? != Some(Entry::Dir) {
            return Err(io(std::io::ErrorKind::NotFound, "no such directory"));
        }
        let tick = m.tick(SimOp::SyncDir, &norm);
        let d = m.dir_mut(&norm)?;
        match tick {
            Tick::Go => {
                // The pending ops, not the live view: ops lost to a failed sync stay lost.
                let pending = std::mem::take(&mut d.pending);
                pending
                    .iter()
                    .for_each(|(_, op)| apply_dir_op(&mut d.durable, op));
            }
            // A failed sync: its pending ops are never made durable (module docs).
            Tick::Eio => d.pending.clear(),
            Tick::Cut => {}
        }
        tick.result()
    }

    fn allocated_bytes(&self, path: &Path) -> IoResult<u64> {
        let m = self.lock();
        m.alive()?;
        match m.lookup(path)? {
            Some(Entry::File(ino)) => Ok(m.inodes[&ino].live.len() as u64),
            _ => Err(io(std::io::ErrorKind::NotFound, "no such file")),
        }
    }

    fn list_dir(&self, dir: &Path) -> IoResult<Vec<OsString>> {
        let norm = normalize(dir)?;
        let m = self.lock();
        m.alive()?;
        match m.dirs.get(&norm) {
            Some(d) if m.lookup(&norm)? == Some(Entry::Dir) => Ok(d.live.keys().cloned().collect()),
            _ => Err(io(std::io::ErrorKind::NotFound, "no such directory")),
        }
    }
}
