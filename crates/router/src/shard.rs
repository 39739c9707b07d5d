//! A fixed number of independently locked maps, so one hot key never serialises a hub.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use parking_lot::RwLock;

const SHARDS: usize = 64;

pub(crate) struct Sharded<T> {
    shards: Box<[RwLock<T>]>,
}

impl<T: Default> Sharded<T> {
    pub(crate) fn new() -> Self {
        Sharded {
            shards: (0..SHARDS).map(|_| RwLock::new(T::default())).collect(),
        }
    }
}

impl<T> Sharded<T> {
    pub(crate) fn shard<K: Hash + ?Sized>(&self, key: &K) -> &RwLock<T> {
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        &self.shards[(hasher.finish() as usize) % SHARDS]
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &RwLock<T>> {
        self.shards.iter()
    }
}
