//! A quota bucket's identity, as the replicas' and the regions' claims name it in a shared store.

use std::collections::BTreeMap;

/// A bucket's identity: Envoy's `BucketId.bucket` map. Sorted, so two maps with the same entries
/// are the same bucket whatever order they arrived in. Defined in the store, the lowest layer
/// that names buckets (replicas and regions claim per bucket); the quota book uses the same type.
pub type BucketId = BTreeMap<String, String>;

/// A bucket's identity as bytes: its domain and entries, each length-prefixed (so `a=bc` and
/// `ab=c` differ), in sorted order (a `BucketId` iterates sorted): no two buckets share one.
pub fn bucket_identity(domain: &str, bucket: &BucketId) -> Vec<u8> {
    let mut identity = Vec::with_capacity(64);
    let mut field = |bytes: &[u8]| {
        identity.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        identity.extend_from_slice(bytes);
    };
    field(domain.as_bytes());
    for (name, value) in bucket {
        field(name.as_bytes());
        field(value.as_bytes());
    }
    identity
}
