//! An in-memory backend: a `BTreeMap` under a lock. Durability is ignored (there is no disk),
//! atomicity holds because a batch is applied under one write lock.

use std::collections::BTreeMap;
use std::sync::RwLock;

use bytes::Bytes;

use super::{Batch, Db, DbIter, Direction, Durability, KeyRange, Op};
use crate::error::Result;

/// An in-memory database.
#[derive(Debug)]
pub struct MemoryDb {
    name: String,
    map: RwLock<BTreeMap<Bytes, Bytes>>,
}

impl MemoryDb {
    /// An empty database called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        MemoryDb {
            name: name.into(),
            map: RwLock::new(BTreeMap::new()),
        }
    }

    /// Every pair, in key order (tests compare whole databases with it).
    pub fn snapshot(&self) -> BTreeMap<Bytes, Bytes> {
        self.map.read().expect("memory db lock").clone()
    }

    /// A database holding exactly `map`.
    pub fn from_map(name: impl Into<String>, map: BTreeMap<Bytes, Bytes>) -> Self {
        MemoryDb {
            name: name.into(),
            map: RwLock::new(map),
        }
    }
}

impl Db for MemoryDb {
    fn name(&self) -> &str {
        &self.name
    }

    fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.map.read().expect("memory db lock").get(key).cloned())
    }

    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        let map = self.map.read().expect("memory db lock");
        Ok(keys.iter().map(|k| map.get(*k).cloned()).collect())
    }

    fn range(&self, range: KeyRange, direction: Direction) -> Result<DbIter<'_>> {
        if range.is_empty() {
            return Ok(Box::new(std::iter::empty()));
        }
        let map = self.map.read().expect("memory db lock");
        let it = map.range::<[u8], _>(range.as_ref_bounds());
        // A snapshot: the lock is not held while the caller iterates.
        let items: Vec<_> = match direction {
            Direction::Forward => it.map(|(k, v)| Ok((k.clone(), v.clone()))).collect(),
            Direction::Reverse => it.rev().map(|(k, v)| Ok((k.clone(), v.clone()))).collect(),
        };
        Ok(Box::new(items.into_iter()))
    }

    fn write(&self, batch: &Batch, _durability: Durability) -> Result<()> {
        let mut map = self.map.write().expect("memory db lock");
        for op in batch.ops() {
            match op {
                Op::Put(k, v) => {
                    map.insert(k.clone(), v.clone());
                }
                Op::Delete(k) => {
                    map.remove(k);
                }
            }
        }
        Ok(())
    }
}
