//! A counter's identity in 16 bytes: the keyed 128-bit SipHash-1-3 of its key bytes.
//!
//! The memory store (`store/memory/`) keeps this fingerprint instead of the key (40 bytes a counter instead of
//! the key's own allocation). Two distinct keys share a counter only if their fingerprints
//! collide. The hash key is 128 random bits that never leave the server (kept in the data
//! directory, so a restart finds its counters again), so a client cannot aim at a collision:
//! for n distinct counters the chance that any two collide is at most n² / 2¹²⁹ (SipHash is a
//! pseudo-random function), about 1.5 × 10⁻²⁷ at a million counters.

use std::hash::Hasher as _;

use siphasher::sip128::{Hasher128, SipHasher13};

/// A counter's 128-bit fingerprint; never zero (zero marks an empty table slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Fingerprint([u64; 2]);

impl Fingerprint {
    /// The empty slot's marker.
    pub(crate) const EMPTY: Self = Self([0, 0]);

    /// The fingerprint with these 16 bytes (as written by [`Fingerprint::to_bytes`]); `None`
    /// for the reserved all-zero value.
    pub fn from_bytes(bytes: [u8; 16]) -> Option<Self> {
        let value = u128::from_le_bytes(bytes);
        (value != 0).then_some(Self([value as u64, (value >> 64) as u64]))
    }

    /// The 16 bytes persistence writes.
    pub fn to_bytes(self) -> [u8; 16] {
        (u128::from(self.0[1]) << 64 | u128::from(self.0[0])).to_le_bytes()
    }

    /// Bits for choosing a slot in a table (independent of [`Fingerprint::shard_bits`]).
    pub(crate) fn slot_bits(self) -> u64 {
        self.0[0]
    }

    /// Bits for choosing a lock shard.
    pub(crate) fn shard_bits(self) -> u64 {
        self.0[1]
    }
}

/// Computes fingerprints under one secret hash key.
#[derive(Clone)]
pub struct Fingerprinter {
    key: [u8; 16],
}

impl std::fmt::Debug for Fingerprinter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret: never printed.
        f.write_str("Fingerprinter { .. }")
    }
}

impl Fingerprinter {
    /// A fingerprinter with `key` (kept secret, and the same across restarts for persistence).
    pub fn new(key: [u8; 16]) -> Self {
        Self { key }
    }

    /// A fingerprinter with a fresh random key (a store that keeps nothing across restarts).
    pub fn random() -> Self {
        Self::new(random_key())
    }

    /// The hash key, for persistence to keep.
    pub fn key(&self) -> [u8; 16] {
        self.key
    }

    /// The fingerprint of a counter's key bytes.
    pub fn of(&self, bytes: &[u8]) -> Fingerprint {
        let mut hasher = SipHasher13::new_with_key(&self.key);
        hasher.write(bytes);
        let hash = hasher.finish128();
        let words = [hash.h1, hash.h2];
        // The all-zero value marks empty slots; its one preimage class shares with [1, 0].
        if words == [0, 0] {
            return Fingerprint([1, 0]);
        }
        Fingerprint(words)
    }
}

/// 16 random bytes from the operating system. Without an OS source (never on the supported
/// platforms), the process's own randomly seeded hasher stands in.
pub fn random_key() -> [u8; 16] {
    let mut key = [0u8; 16];
    if getrandom::fill(&mut key).is_err() {
        use std::hash::BuildHasher;
        let state = std::collections::hash_map::RandomState::new();
        let a = state.hash_one(std::time::SystemTime::now());
        let b = state.hash_one(std::process::id());
        key = (u128::from(a) << 64 | u128::from(b)).to_le_bytes();
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same bytes under the same key always give the same fingerprint; another key or
    /// other bytes give another.
    #[test]
    fn fingerprints_are_stable_and_keyed() {
        let a = Fingerprinter::new([7; 16]);
        let b = Fingerprinter::new([8; 16]);
        assert_eq!(a.of(b"counter"), a.of(b"counter"));
        assert_ne!(a.of(b"counter"), a.of(b"counter2"));
        assert_ne!(a.of(b"counter"), b.of(b"counter"));
        assert_ne!(a.of(b""), Fingerprint::EMPTY);
    }

    /// Bytes round-trip; the reserved zero value is refused.
    #[test]
    fn bytes_round_trip() {
        let fp = Fingerprinter::new([1; 16]).of(b"x");
        assert_eq!(Fingerprint::from_bytes(fp.to_bytes()), Some(fp));
        assert_eq!(Fingerprint::from_bytes([0; 16]), None);
    }

    /// Random keys differ (from the OS source).
    #[test]
    fn random_keys_differ() {
        assert_ne!(random_key(), random_key());
    }
}
