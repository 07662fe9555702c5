//! Regions' portions on a global Redis: [`RedisPortions`] holding the claims of regions'
//! replicas (`portion.lua`'s region mode) beside the members and their floors.
//!
//! Every key of the regions lives in one slot (`<prefix>region:{regions}:…`): a claim reads the
//! members' hash with its units' hashes in one atomic script run, so no claim can take what a
//! member's floor reserves, also on Redis Cluster. Claims are off the request path, about one a
//! second per replica, so one slot is plenty.

use super::conn::PoolHealth;
use super::eval::run_script;
use super::portion::{MAX_RUN, RedisPortions, SOURCE, WHOLE, bucket_tag, to_ppm};
use super::script::{self, MICRO};
use super::settings::RedisClock;
use crate::store::{BadReply, StoreError};
use crate::store::{BucketId, Membership, RegionAnswer, RegionClaim, RegionClaimed, RegionTerms};
use crate::store::{SETTLE, valid_region_name};

/// Bytes of the answer's head: the floor (i64, ppm), the members and the region's replicas
/// (i64).
const HEAD_BYTES: usize = 24;

/// Bytes of one unit's answer: the portion (i64, ppm), the region's and the others' demand
/// (f64), the others (i64).
const UNIT_BYTES: usize = 32;

impl RedisPortions {
    /// The members' hash of the regions claiming under `prefix`.
    pub fn members_key(prefix: &[u8]) -> Vec<u8> {
        let mut key = prefix.to_vec();
        key.extend_from_slice(b"region:{regions}:members");
        key
    }

    /// The hash of one unit claimed by regions: `<prefix>region:{regions}:<tag>`, the tag the
    /// fixed hash of its domain and entries (as a bucket's).
    pub fn unit_key(prefix: &[u8], domain: &str, bucket: &BucketId) -> Vec<u8> {
        let mut key = prefix.to_vec();
        key.extend_from_slice(b"region:{regions}:");
        key.extend_from_slice(format!("{:016x}", bucket_tag(domain, bucket)).as_bytes());
        key
    }

    /// One region's claim: runs of at most [`MAX_RUN`] units, each with the members' hash,
    /// sent together; the smallest floor any run granted (the one the members' field holds
    /// once they have all run can only be larger).
    pub(super) async fn run_in_region(
        &self,
        terms: RegionTerms<'_>,
        claims: &[RegionClaim],
    ) -> Result<RegionAnswer, StoreError> {
        if !valid_region_name(terms.region) {
            return Err(StoreError::Conflict(
                "a region name is 1 to 64 letters, digits, '.', '_' or '-'",
            ));
        }
        if self.health.is_open() {
            return Err(StoreError::CircuitOpen);
        }
        let now_us = match self.clock {
            RedisClock::Caller => Some(terms.now / MICRO),
            RedisClock::Server => None,
        };
        let members = Self::members_key(&self.prefix);
        let chunks: Vec<&[RegionClaim]> = if claims.is_empty() {
            vec![&[]]
        } else {
            claims.chunks(MAX_RUN - 1).collect()
        };
        let runs = chunks.iter().map(|chunk| {
            let keys: Vec<Vec<u8>> = std::iter::once(members.clone())
                .chain(
                    chunk
                        .iter()
                        .map(|c| Self::unit_key(&self.prefix, &c.domain, &c.bucket)),
                )
                .collect();
            let packed = pack_args(&terms, now_us, chunk);
            run_one(&self.health, &self.sha, terms, keys, packed, chunk.len())
        });
        let results = futures_util::future::join_all(runs).await;
        let mut membership: Option<Membership> = None;
        let mut claimed = Vec::with_capacity(claims.len());
        for result in results {
            let answer = result?;
            membership = Some(match membership {
                None => answer.membership,
                Some(m) => Membership {
                    floor: m.floor.min(answer.membership.floor),
                    members: m.members.max(answer.membership.members),
                    replicas: m.replicas.max(answer.membership.replicas),
                },
            });
            claimed.extend(answer.claimed);
        }
        Ok(RegionAnswer {
            membership: membership.ok_or(StoreError::BadReply(BadReply::Missing))?,
            claimed,
        })
    }
}

/// One script run: the members' hash and `count` units.
async fn run_one(
    health: &PoolHealth,
    sha: &str,
    terms: RegionTerms<'_>,
    keys: Vec<Vec<u8>>,
    packed: Vec<u8>,
    count: usize,
) -> Result<RegionAnswer, StoreError> {
    let command = |verb: &str, script: &str| {
        let mut cmd = redis::cmd(verb);
        cmd.arg(script).arg(keys.len());
        for key in &keys {
            cmd.arg(key.as_slice());
        }
        cmd.arg(terms.replica)
            .arg(packed.as_slice())
            .arg(terms.region);
        cmd
    };
    let reply = run_script(health.pool(), sha, SOURCE, command).await?;
    parse_reply(script::reply_bytes(&reply)?, count).map_err(StoreError::from)
}

/// The script's binary argument: now (-1 for Redis's clock), the member ttl, the settling
/// time, the floor asked and held, then per unit its demand, the limit's rate, the portion held
/// and the ttl (a negative or non-finite figure counts as none).
fn pack_args(terms: &RegionTerms<'_>, now_us: Option<u64>, claims: &[RegionClaim]) -> Vec<u8> {
    let word = |n: u64| i64::try_from(n).unwrap_or(i64::MAX).to_le_bytes();
    let figure = |f: f64| if f.is_finite() { f.max(0.0) } else { 0.0 };
    let mut out = Vec::with_capacity(40 + 32 * claims.len());
    let now = now_us.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
    out.extend_from_slice(&now.to_le_bytes());
    out.extend_from_slice(&word((terms.member_ttl / MICRO).max(1)));
    out.extend_from_slice(&word(SETTLE / MICRO));
    out.extend_from_slice(&to_ppm(terms.floor).to_le_bytes());
    out.extend_from_slice(&to_ppm(terms.floor_held).to_le_bytes());
    for claim in claims {
        out.extend_from_slice(&figure(claim.demand).to_le_bytes());
        out.extend_from_slice(&figure(claim.rate).to_le_bytes());
        out.extend_from_slice(&held_ppm(claim.held).to_le_bytes());
        out.extend_from_slice(&word((claim.ttl / MICRO).max(1)));
    }
    out
}

/// A held fraction in parts per million, rounded up: the store must reserve at least what the
/// replica enforces.
fn held_ppm(fraction: f64) -> i64 {
    if fraction.is_nan() {
        return 0;
    }
    (fraction.clamp(0.0, 1.0) * WHOLE).ceil() as i64
}

/// The script's answer for `count` units.
fn parse_reply(bytes: &[u8], count: usize) -> Result<RegionAnswer, BadReply> {
    if bytes.len() != HEAD_BYTES + count * UNIT_BYTES {
        return Err(BadReply::Length {
            expected: 3 + count * 4,
            got: bytes.len() / 8,
        });
    }
    let word = |b: &[u8]| -> [u8; 8] { b.try_into().expect("8-byte chunks") };
    let int = |b: &[u8]| i64::from_le_bytes(word(b));
    let (floor, members, replicas) = (int(&bytes[..8]), int(&bytes[8..16]), int(&bytes[16..24]));
    if floor < 0 || members < 1 || replicas < 1 {
        return Err(BadReply::Negative(floor.min(members).min(replicas)));
    }
    let claimed = bytes[HEAD_BYTES..]
        .chunks_exact(UNIT_BYTES)
        .map(|f| {
            let (portion, others) = (int(&f[..8]), int(&f[24..32]));
            if portion < 0 || others < 0 {
                return Err(BadReply::Negative(portion.min(others)));
            }
            Ok(RegionClaimed {
                portion: (portion as f64 / WHOLE).min(1.0),
                region_demand: f64::from_le_bytes(word(&f[8..16])),
                others_demand: f64::from_le_bytes(word(&f[16..24])),
                others: u32::try_from(others).unwrap_or(u32::MAX),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RegionAnswer {
        membership: Membership {
            floor: (floor as f64 / WHOLE).min(1.0),
            members: u32::try_from(members).unwrap_or(u32::MAX),
            replicas: u32::try_from(replicas).unwrap_or(u32::MAX),
        },
        claimed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key of the regions is one Redis Cluster slot, whatever the unit.
    #[test]
    fn every_region_key_is_one_slot() {
        let bucket: BucketId = [("".to_string(), "ab12".to_string())].into();
        let unit = RedisPortions::unit_key(b"sluice:", "edge", &bucket);
        let members = RedisPortions::members_key(b"sluice:");
        assert_eq!(
            crate::store::redis::keys::slot(&unit),
            crate::store::redis::keys::slot(&members)
        );
        assert!(
            String::from_utf8(unit)
                .unwrap()
                .starts_with("sluice:region:{regions}:")
        );
    }

    /// A held portion is rounded up (the store reserves at least it), a wanted one down.
    #[test]
    fn held_portions_round_up() {
        assert_eq!(held_ppm(0.000_000_4), 1);
        assert_eq!(to_ppm(0.000_000_4), 0);
        assert_eq!(held_ppm(f64::NAN), 0);
        assert_eq!(held_ppm(2.0), 1_000_000);
    }

    /// A reply of the wrong length or with negative figures is refused, not misread.
    #[test]
    fn malformed_replies_are_refused() {
        assert!(parse_reply(&[0; 8], 0).is_err());
        let head =
            |fields: [i64; 3]| -> Vec<u8> { fields.iter().flat_map(|f| f.to_le_bytes()).collect() };
        assert!(parse_reply(&head([-1, 3, 1]), 0).is_err());
        assert!(parse_reply(&head([0, 3, 0]), 0).is_err());
        let answer = parse_reply(&head([250_000, 3, 2]), 0).unwrap();
        assert_eq!(answer.membership.floor, 0.25);
        assert_eq!(
            (answer.membership.members, answer.membership.replicas),
            (3, 2)
        );
    }
}
