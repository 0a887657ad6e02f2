//! Partitioning: rows to virtual buckets, buckets to shards (DESIGN §7.1,
//! RFC 0001).
//!
//! A partition key (a row's primary key, a join or group key, a whole row)
//! is hashed, in its order-preserving encoding, to one of [`BUCKETS`]
//! virtual buckets; buckets map to shards by rendezvous hashing. Both
//! functions are part of the storage format: the bucket of a stored row
//! must never change, so they use a fixed, platform-independent hash
//! (XXH3-64 without seed) and never `std`'s randomly keyed hasher.
//!
//! Rendezvous hashing gives each bucket to the shard with the highest
//! `hash(bucket, shard)`; going from `W` to `W + 1` shards moves only the
//! buckets the new shard wins (about `1/(W+1)` of them). The map is
//! computed once when a storage is created and recorded, so a later change
//! of the hash could never move a bucket silently.

use twox_hash::XxHash3_64;

/// Virtual buckets per storage, fixed for its life.
pub const BUCKETS: u16 = 4096;

/// Most shards one storage may have.
pub const SHARDS_MAX: u16 = 256;

/// Identifies a shard within one storage: `0..shard_count`.
pub type ShardId = u16;

/// The bucket of a partition key, given its encoded bytes.
pub fn bucket_of(encoded_key: &[u8]) -> u16 {
    // BUCKETS divides 2^64, so taking the low bits keeps the hash uniform.
    (XxHash3_64::oneshot(encoded_key) % u64::from(BUCKETS)) as u16
}

/// The rendezvous weight of `shard` for `bucket`.
fn weight(bucket: u16, shard: ShardId) -> u64 {
    let mut bytes = [0; 4];
    bytes[..2].copy_from_slice(&bucket.to_be_bytes());
    bytes[2..].copy_from_slice(&shard.to_be_bytes());
    XxHash3_64::oneshot(&bytes)
}

/// Which shard holds each bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketMap {
    shard_count: u16,
    owners: Vec<ShardId>,
}

/// A bucket map that cannot be built or read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidBucketMap(pub String);

impl std::fmt::Display for InvalidBucketMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid bucket map: {}", self.0)
    }
}

impl std::error::Error for InvalidBucketMap {}

impl BucketMap {
    /// The rendezvous map over `shard_count` shards.
    pub fn rendezvous(shard_count: u16) -> Result<Self, InvalidBucketMap> {
        if shard_count == 0 || shard_count > SHARDS_MAX {
            return Err(InvalidBucketMap(format!(
                "{shard_count} shards (1 to {SHARDS_MAX} are allowed)"
            )));
        }
        let owners = (0..BUCKETS)
            .map(|bucket| {
                (0..shard_count)
                    .max_by_key(|shard| (weight(bucket, *shard), *shard))
                    .unwrap_or(0)
            })
            .collect();
        Ok(BucketMap {
            shard_count,
            owners,
        })
    }

    pub fn shard_count(&self) -> u16 {
        self.shard_count
    }

    pub fn shard_of_bucket(&self, bucket: u16) -> ShardId {
        self.owners[usize::from(bucket % BUCKETS)]
    }

    /// The shard that holds the partition key `encoded_key`.
    pub fn shard_of(&self, encoded_key: &[u8]) -> ShardId {
        self.shard_of_bucket(bucket_of(encoded_key))
    }

    /// The buckets `shard` holds, ascending.
    pub fn buckets_of(&self, shard: ShardId) -> Vec<u16> {
        (0..BUCKETS)
            .filter(|bucket| self.shard_of_bucket(*bucket) == shard)
            .collect()
    }

    /// Stored form: the shard count, then each bucket's owner (2 bytes
    /// big-endian each).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(2 + 2 * self.owners.len());
        bytes.extend_from_slice(&self.shard_count.to_be_bytes());
        for owner in &self.owners {
            bytes.extend_from_slice(&owner.to_be_bytes());
        }
        bytes
    }

    /// Reads [`BucketMap::to_bytes`] back, checking every owner is a shard.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, InvalidBucketMap> {
        let expected = 2 + 2 * usize::from(BUCKETS);
        if bytes.len() != expected {
            return Err(InvalidBucketMap(format!(
                "{} bytes where {expected} were expected",
                bytes.len()
            )));
        }
        let read = |at: usize| u16::from_be_bytes([bytes[at], bytes[at + 1]]);
        let owners: Vec<ShardId> = (0..usize::from(BUCKETS)).map(|i| read(2 + 2 * i)).collect();
        BucketMap::from_owners(read(0), owners)
    }

    /// The map giving bucket `b` to `owners[b]` (a placement a re-sharding
    /// left, or a test's), checking every owner is a shard.
    pub fn from_owners(shard_count: u16, owners: Vec<ShardId>) -> Result<Self, InvalidBucketMap> {
        if owners.len() != usize::from(BUCKETS) {
            return Err(InvalidBucketMap(format!(
                "{} owners for {BUCKETS} buckets",
                owners.len()
            )));
        }
        if shard_count == 0
            || shard_count > SHARDS_MAX
            || owners.iter().any(|owner| *owner >= shard_count)
        {
            return Err(InvalidBucketMap(format!(
                "a bucket owned by a shard outside 0..{shard_count}"
            )));
        }
        Ok(BucketMap {
            shard_count,
            owners,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Goal: buckets and shards are stable, balanced, and move minimally.
    //! Method: pinned values (a change of the hash is a format change and
    //! must fail here), balance and movement bounds over every bucket, a
    //! round trip of the stored form.
    use super::*;

    #[test]
    fn buckets_are_pinned() {
        // These values are part of the storage format. The first is the
        // reference XXH3-64 of empty input, from the algorithm's spec.
        assert_eq!(XxHash3_64::oneshot(b""), 0x2D06_8005_38D3_94C2);
        assert_eq!(bucket_of(b""), 0x4C2);
        let pinned: Vec<u16> = [&b"a"[..], b"orders", &[0x01, 0x80, 0, 0, 0, 0, 0, 0, 42]]
            .iter()
            .map(|key| bucket_of(key))
            .collect();
        assert_eq!(pinned, PINNED_BUCKETS);
    }

    const PINNED_BUCKETS: [u16; 3] = [3615, 1275, 3850];

    #[test]
    fn one_shard_holds_every_bucket() {
        let map = BucketMap::rendezvous(1).unwrap();
        assert_eq!(map.buckets_of(0).len(), usize::from(BUCKETS));
        assert_eq!(map.shard_of(b"anything"), 0);
    }

    #[test]
    fn buckets_spread_evenly_and_move_minimally() {
        for shards in [2u16, 3, 4, 8, 16] {
            let map = BucketMap::rendezvous(shards).unwrap();
            let fair = usize::from(BUCKETS) / usize::from(shards);
            for shard in 0..shards {
                let held = map.buckets_of(shard).len();
                assert!(
                    held > fair * 8 / 10 && held < fair * 12 / 10,
                    "shard {shard} of {shards} holds {held} buckets (fair: {fair})"
                );
            }
            // Adding a shard moves only buckets to the new shard.
            let grown = BucketMap::rendezvous(shards + 1).unwrap();
            let mut moved = 0;
            for bucket in 0..BUCKETS {
                if map.shard_of_bucket(bucket) != grown.shard_of_bucket(bucket) {
                    assert_eq!(grown.shard_of_bucket(bucket), shards);
                    moved += 1;
                }
            }
            let expected = usize::from(BUCKETS) / usize::from(shards + 1);
            assert!(moved > expected * 8 / 10 && moved < expected * 12 / 10);
        }
    }

    #[test]
    fn the_stored_form_round_trips_and_is_checked() {
        let map = BucketMap::rendezvous(4).unwrap();
        assert_eq!(BucketMap::from_bytes(&map.to_bytes()).unwrap(), map);
        let mut corrupt = map.to_bytes();
        corrupt[2] = 0;
        corrupt[3] = 9;
        assert!(BucketMap::from_bytes(&corrupt).is_err());
        assert!(BucketMap::from_bytes(&corrupt[..10]).is_err());
        assert!(BucketMap::rendezvous(0).is_err());
        assert!(BucketMap::rendezvous(SHARDS_MAX + 1).is_err());
    }
}
