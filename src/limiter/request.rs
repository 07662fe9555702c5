//! The domain form of a rate-limit call, and the input limits every call must respect.

use crate::algorithm::{Algorithm, Limit, Recording};
use crate::clock::SECOND;
use crate::rules::{LimitKind, LimitRule, Unit};

/// Most descriptors accepted in one call.
pub(crate) const MAX_DESCRIPTORS: usize = 64;
/// Most entries accepted in one descriptor.
pub(crate) const MAX_ENTRIES: usize = 32;
/// Longest key or value accepted, in bytes.
pub(crate) const MAX_TEXT: usize = 1024;

/// One rate-limit call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// The rules domain.
    pub domain: String,
    /// The descriptors, each checked against the rules.
    pub descriptors: Vec<Descriptor>,
    /// Hits to add to every descriptor (0 means 1, as envoyproxy/ratelimit).
    pub hits_addend: u32,
}

/// One descriptor: an ordered list of entries, with optional per-descriptor overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// `(key, value)` entries, outermost first.
    pub entries: Vec<(String, String)>,
    /// A limit sent by the client instead of the configured one.
    pub limit_override: Option<LimitOverride>,
    /// Hits for this descriptor; present (even 0) overrides the request's. 0 = check only.
    pub hits_addend: Option<u64>,
}

/// A limit carried by the request (`RateLimitDescriptor.limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitOverride {
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// The unit (never unknown: unknown units are rejected as invalid input).
    pub unit: Unit,
}

impl LimitOverride {
    /// The limit as a rule: counted with `algorithm` (the default one) and `recording`,
    /// sharing the counter of a configured rule with the same window (as
    /// envoyproxy/ratelimit's overrides share cache keys).
    pub(super) fn rule(self, algorithm: Algorithm, recording: Recording) -> LimitRule {
        let window = self.unit.seconds() * SECOND;
        let requests = u64::from(self.requests_per_unit);
        LimitRule {
            kind: LimitKind::Counted(Limit {
                algorithm,
                requests,
                window,
                burst: requests,
                origin: 0,
                recording,
            }),
            requests_per_unit: self.requests_per_unit,
            unit: Some(self.unit),
            name: None,
            replaces: Vec::new(),
            index: 0,
            policy: format!(
                "\"override\";q={};w={}",
                self.requests_per_unit,
                self.unit.seconds()
            )
            .into(),
            // A client's own limit is counted by the store on every call.
            lease: 0,
            calendar: None,
            // A client's own limit is this region's: it never names a global one.
            scope: crate::rules::Scope::Region,
        }
    }
}

/// Why a call was refused as malformed (gRPC `INVALID_ARGUMENT`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRequest {
    /// No domain.
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    /// No descriptors.
    #[error("rate limit descriptor list must not be empty")]
    NoDescriptors,
    /// Too many descriptors.
    #[error("too many descriptors: {0} (at most {MAX_DESCRIPTORS})")]
    TooManyDescriptors(usize),
    /// Too many entries in one descriptor.
    #[error("descriptor {index} has too many entries: {count} (at most {MAX_ENTRIES})")]
    TooManyEntries {
        /// Position of the descriptor.
        index: usize,
        /// Its entry count.
        count: usize,
    },
    /// An entry without a key.
    #[error("descriptor {index} entry {entry} has an empty key")]
    EmptyKey {
        /// Position of the descriptor.
        index: usize,
        /// Position of the entry.
        entry: usize,
    },
    /// A key, value or the domain over 1024 bytes (`MAX_TEXT`).
    #[error("{what} is {len} bytes long (at most {MAX_TEXT})")]
    TooLong {
        /// What was too long, e.g. `descriptor 0 entry 1 value`.
        what: String,
        /// Its length.
        len: usize,
    },
    /// A limit override with requests_per_unit 0 or an unknown unit.
    #[error("descriptor {index} has an invalid limit override: {reason}")]
    BadOverride {
        /// Position of the descriptor.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
}

impl Request {
    /// Checks the input limits; the first problem found is reported.
    pub fn validate(&self) -> Result<(), InvalidRequest> {
        if self.domain.is_empty() {
            return Err(InvalidRequest::EmptyDomain);
        }
        check_len(|| "domain".into(), &self.domain)?;
        if self.descriptors.is_empty() {
            return Err(InvalidRequest::NoDescriptors);
        }
        if self.descriptors.len() > MAX_DESCRIPTORS {
            return Err(InvalidRequest::TooManyDescriptors(self.descriptors.len()));
        }
        for (index, descriptor) in self.descriptors.iter().enumerate() {
            let count = descriptor.entries.len();
            if count > MAX_ENTRIES {
                return Err(InvalidRequest::TooManyEntries { index, count });
            }
            for (entry, (key, value)) in descriptor.entries.iter().enumerate() {
                if key.is_empty() {
                    return Err(InvalidRequest::EmptyKey { index, entry });
                }
                check_len(|| format!("descriptor {index} entry {entry} key"), key)?;
                check_len(|| format!("descriptor {index} entry {entry} value"), value)?;
            }
        }
        Ok(())
    }
}

/// `what` names the text only when it is too long: building the name for every entry of every
/// call was a measurable part of the hot path.
fn check_len(what: impl FnOnce() -> String, text: &str) -> Result<(), InvalidRequest> {
    if text.len() > MAX_TEXT {
        return Err(InvalidRequest::TooLong {
            what: what(),
            len: text.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(entries: Vec<(&str, &str)>) -> Request {
        Request {
            domain: "d".into(),
            descriptors: vec![Descriptor {
                entries: entries
                    .into_iter()
                    .map(|(k, v)| (k.into(), v.into()))
                    .collect(),
                ..Descriptor::default()
            }],
            hits_addend: 0,
        }
    }

    /// Each input limit is enforced with a message naming the problem.
    #[test]
    fn input_limits_are_enforced() {
        assert_eq!(request(vec![("k", "v")]).validate(), Ok(()));
        let mut r = request(vec![("k", "v")]);
        r.domain.clear();
        assert_eq!(r.validate(), Err(InvalidRequest::EmptyDomain));
        r.domain = "d".into();
        r.descriptors.clear();
        assert_eq!(r.validate(), Err(InvalidRequest::NoDescriptors));
        assert_eq!(
            request(vec![("k", "v"), ("", "x")]).validate(),
            Err(InvalidRequest::EmptyKey { index: 0, entry: 1 })
        );
        let long = "x".repeat(MAX_TEXT + 1);
        let err = request(vec![("k", &long)]).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "descriptor 0 entry 0 value is 1025 bytes long (at most 1024)"
        );
        let many = vec![("k", "v"); MAX_ENTRIES + 1];
        assert!(matches!(
            request(many).validate(),
            Err(InvalidRequest::TooManyEntries { count: 33, .. })
        ));
        let mut r = request(vec![("k", "v")]);
        r.descriptors = vec![Descriptor::default(); MAX_DESCRIPTORS + 1];
        assert_eq!(r.validate(), Err(InvalidRequest::TooManyDescriptors(65)));
    }
}
