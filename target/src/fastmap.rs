//! A hash map for small integer keys (QP numbers, namespace instance ids) on the data
//! path, where SipHash's DoS resistance buys nothing: keys are assigned locally, never
//! chosen by a peer.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiplicative hashing of one integer (Fibonacci hashing).
#[derive(Default, Clone, Copy)]
pub struct IntHasher(u64);

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(GOLDEN);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = (self.0 ^ u64::from(v)).wrapping_mul(GOLDEN);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(GOLDEN);
    }
}

pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;
