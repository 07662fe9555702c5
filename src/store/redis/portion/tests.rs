//! The portions' keys, grouping and encoding (the script itself runs in tests/redis).

use super::*;

fn bucket(entries: &[(&str, &str)]) -> BucketId {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The same bucket gets the same key in every process and version: a fixed hash.
#[test]
fn keys_are_stable() {
    let key = bucket_key(b"sluice:", "edge", &bucket(&[("name", "web")]));
    assert_eq!(
        String::from_utf8(key).unwrap(),
        "sluice:quota:{c2da99fd702e9da2}",
        "a changed key splits replicas of two versions"
    );
}

/// A bucket's entries name one key whatever order they were inserted in.
#[test]
fn keys_ignore_entry_order() {
    let one = bucket(&[("a", "1"), ("b", "2"), ("c", "3")]);
    let other = bucket(&[("c", "3"), ("a", "1"), ("b", "2")]);
    assert_eq!(bucket_key(b"", "d", &one), bucket_key(b"", "d", &other));
}

/// Different domains, entries and splits of the same bytes name different keys.
#[test]
fn keys_tell_buckets_apart() {
    let keys = [
        bucket_key(b"", "d", &bucket(&[("a", "bc")])),
        bucket_key(b"", "d", &bucket(&[("ab", "c")])),
        bucket_key(b"", "e", &bucket(&[("a", "bc")])),
        bucket_key(b"", "d", &bucket(&[("a", "bc"), ("x", "")])),
        bucket_key(b"", "da", &bucket(&[("", "bc")])),
        bucket_key(b"", "d", &bucket(&[])),
    ];
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i + 1..] {
            assert_ne!(a, b);
        }
    }
}

/// A bucket is one Cluster slot: the tag is the whole braced hash, after the prefix.
#[test]
fn keys_carry_one_hash_tag() {
    let key = bucket_key(b"app:", "d", &bucket(&[("a", "1")]));
    let text = String::from_utf8(key).unwrap();
    let tag = text
        .strip_prefix("app:quota:{")
        .and_then(|t| t.strip_suffix('}'))
        .expect("prefix, quota:, braced tag");
    assert_eq!(tag.len(), 16);
    assert!(tag.bytes().all(|b| b.is_ascii_hexdigit()));
}

/// Wanted portions become parts per million rounded down, within 0..=1e6.
#[test]
fn ppm_never_rounds_up() {
    assert_eq!(to_ppm(0.5), 500_000);
    assert_eq!(to_ppm(1.0 / 3.0), 333_333);
    assert_eq!(to_ppm(0.999_999_9), 999_999);
    assert_eq!((to_ppm(1.5), to_ppm(-0.1)), (1_000_000, 0));
    assert_eq!((to_ppm(f64::NAN), to_ppm(f64::INFINITY)), (0, 1_000_000));
}

/// A standalone Redis takes one run (up to the run size); a cluster one per slot.
#[test]
fn groups_follow_slots() {
    let keys: Vec<Vec<u8>> = (0..600)
        .map(|i| bucket_key(b"", "d", &bucket(&[("n", &i.to_string())])))
        .collect();
    let standalone = groups(&keys, false);
    assert_eq!(
        standalone.iter().map(|(_, m)| m.len()).collect::<Vec<_>>(),
        [MAX_RUN, MAX_RUN, 600 - 2 * MAX_RUN]
    );
    assert!(standalone.iter().all(|(slot, _)| slot.is_none()));
    let cluster = groups(&keys, true);
    assert!(cluster.len() > 3);
    for (slot, members) in &cluster {
        assert_eq!(Some(keys::slot(&keys[members[0]])), *slot);
        assert!(members.iter().all(|&i| Some(keys::slot(&keys[i])) == *slot));
    }
    let mut all: Vec<usize> = cluster.into_iter().flat_map(|(_, m)| m).collect();
    all.sort_unstable();
    assert_eq!(all, (0..600).collect::<Vec<_>>());
}

/// One marker per store, or per slot on a cluster: in that slot, and the same for every
/// replica.
#[test]
fn markers_follow_slots() {
    assert_eq!(marker_key(b"sluice:", None), b"sluice:quota-since");
    for n in [0u32, 7, 9_999] {
        let key = bucket_key(b"sluice:", "d", &bucket(&[("n", &n.to_string())]));
        let slot = keys::slot(&key);
        let marker = marker_key(b"sluice:", Some(slot));
        assert_eq!(
            keys::slot(&marker),
            slot,
            "{}",
            String::from_utf8_lossy(&marker)
        );
        assert_eq!(marker, marker_key(b"sluice:", Some(slot)));
        assert!(marker.starts_with(b"sluice:quota-since:{"));
    }
}

/// The argument carries the clock, the ttl, the membership and the settling time, and each
/// claim's wanted ppm, demand, held ppm and longer reservation (us), sanitised.
#[test]
fn arguments_are_packed() {
    let claim = |wanted, demand, held, reserve_longer| Claim {
        domain: "d".into(),
        bucket: bucket(&[]),
        demand,
        wanted,
        held,
        reserve_longer,
    };
    let claims = [
        claim(0.25, 12.5, 0.3, 0),
        claim(2.0, f64::NAN, f64::NAN, 50 * crate::clock::SECOND),
        claim(0.5, -3.0, 1.5, 1),
    ];
    let head = Head {
        replica: "r",
        now_us: None,
        ttl_us: 5_000_000,
        member_us: 60_000_000,
        settle_us: 3_000_000,
    };
    let packed = pack_args(&head, claims.iter());
    let i = |at: usize| i64::from_le_bytes(packed[at..at + 8].try_into().unwrap());
    let f = |at: usize| f64::from_le_bytes(packed[at..at + 8].try_into().unwrap());
    assert_eq!(packed.len(), 32 + 3 * 32);
    assert_eq!(
        (i(0), i(8), i(16), i(24)),
        (-1, 5_000_000, 60_000_000, 3_000_000)
    );
    assert_eq!((i(32), f(40), i(48), i(56)), (250_000, 12.5, 300_000, 0));
    assert_eq!(
        (i(64), f(72), i(80), i(88)),
        (1_000_000, 0.0, 0, 50_000_000)
    );
    assert_eq!(
        (i(96), f(104), i(112), i(120)),
        (500_000, 0.0, 1_000_000, 0)
    );
}

/// The reply is read as portions; a short or negative one is refused.
#[test]
fn replies_are_read() {
    let mut bytes = Vec::new();
    for (portion, demand, others, floor, settling) in [
        (400_000i64, 7.5f64, 2i64, 250_000i64, 0i64),
        (0, 0.0, 0, 0, 1),
    ] {
        bytes.extend_from_slice(&portion.to_le_bytes());
        bytes.extend_from_slice(&demand.to_le_bytes());
        bytes.extend_from_slice(&others.to_le_bytes());
        bytes.extend_from_slice(&floor.to_le_bytes());
        bytes.extend_from_slice(&settling.to_le_bytes());
    }
    let read = parse_reply(&bytes, 2).unwrap();
    assert_eq!(
        read,
        [
            Claimed {
                portion: 0.4,
                others_demand: 7.5,
                others: 2,
                floor: 0.25,
                settling: false,
            },
            Claimed {
                portion: 0.0,
                others_demand: 0.0,
                others: 0,
                floor: 0.0,
                settling: true,
            }
        ]
    );
    assert!(parse_reply(&bytes[..40], 2).is_err());
    let negative = [
        0i64.to_le_bytes(),
        0f64.to_le_bytes(),
        0i64.to_le_bytes(),
        (-1i64).to_le_bytes(),
        0i64.to_le_bytes(),
    ]
    .concat();
    assert!(matches!(
        parse_reply(&negative, 1),
        Err(BadReply::Negative(-1))
    ));
}
