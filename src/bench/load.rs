//! What `sluice bench` sends: `--descriptor key=value[,key=value...]` parsed, and one request per
//! call with `--keys` spreading the calls over K distinct counters.

use std::fmt::Write as _;

use bytes::Bytes;
use sluice::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};

/// One descriptor as given on the command line: `(key, value)` entries, outermost first.
pub type DescriptorEntries = Vec<(String, String)>;

/// Parses `key=value[,key=value...]`. Keys must be non-empty; values may be empty (`key=`).
pub fn parse_descriptor(text: &str) -> Result<DescriptorEntries, String> {
    text.split(',')
        .map(|entry| {
            let (key, value) = entry
                .split_once('=')
                .ok_or_else(|| format!("'{entry}' is not key=value"))?;
            if key.is_empty() {
                return Err(format!("'{entry}' has an empty key"));
            }
            Ok((key.to_string(), value.to_string()))
        })
        .collect()
}

/// Most distinct requests encoded before the run; past it, each call encodes its own.
const PRE_ENCODED: u64 = 1 << 20;

/// Builds the request of each call.
#[derive(Debug, Clone)]
pub struct Load {
    domain: String,
    descriptors: Vec<RateLimitDescriptor>,
    keys: Option<u64>,
    /// Each distinct call's framed request, encoded once (the client's CPU goes to the calls).
    bodies: Vec<Bytes>,
}

impl Load {
    /// Requests in `domain` with `descriptors`; with `keys` = K, call i appends `i % K` to the
    /// last value of each descriptor, so the calls spread evenly over K counters.
    pub fn new(domain: &str, descriptors: &[DescriptorEntries], keys: Option<u64>) -> Self {
        let descriptors = descriptors
            .iter()
            .map(|entries| RateLimitDescriptor {
                entries: entries
                    .iter()
                    .map(|(key, value)| Entry {
                        key: key.clone(),
                        value: value.clone(),
                    })
                    .collect(),
                limit: None,
                hits_addend: None,
            })
            .collect();
        let mut load = Self {
            domain: domain.to_string(),
            descriptors,
            keys: keys.map(|k| k.max(1)),
            bodies: Vec::new(),
        };
        let distinct = load.keys.unwrap_or(1);
        if distinct <= PRE_ENCODED {
            load.bodies = (0..distinct)
                .map(|n| super::wire::frame(&load.request(n)))
                .collect();
        }
        load
    }

    /// The framed request of call number `call`.
    pub fn body(&self, call: u64) -> Bytes {
        let distinct = self.keys.unwrap_or(1);
        match self.bodies.get((call % distinct) as usize) {
            Some(body) => body.clone(),
            None => super::wire::frame(&self.request(call)),
        }
    }

    /// The request of call number `call`.
    pub fn request(&self, call: u64) -> RateLimitRequest {
        let mut descriptors = self.descriptors.clone();
        if let Some(keys) = self.keys {
            let index = call % keys;
            for d in &mut descriptors {
                if let Some(last) = d.entries.last_mut() {
                    let _ = write!(last.value, "{index}");
                }
            }
        }
        RateLimitRequest {
            domain: self.domain.clone(),
            descriptors,
            hits_addend: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries split on commas and the first `=`; malformed entries are errors.
    #[test]
    fn parses_descriptors() {
        assert_eq!(
            parse_descriptor("api_key=abc,path=/a=b").unwrap(),
            [
                ("api_key".into(), "abc".into()),
                ("path".into(), "/a=b".into())
            ]
        );
        assert_eq!(
            parse_descriptor("k=").unwrap(),
            [("k".into(), String::new())]
        );
        assert_eq!(parse_descriptor("k").unwrap_err(), "'k' is not key=value");
        assert_eq!(parse_descriptor("=v").unwrap_err(), "'=v' has an empty key");
        assert!(parse_descriptor("a=1,,b=2").is_err());
    }

    /// `--keys` appends the call's key index to the last value of every descriptor.
    #[test]
    fn keys_suffix_the_last_value() {
        let d = vec![("a".into(), "x".into()), ("b".into(), "user-".into())];
        let load = Load::new("edge", &[d.clone(), d], Some(3));
        let r = load.request(7);
        assert_eq!(r.domain, "edge");
        for d in &r.descriptors {
            assert_eq!(d.entries[0].value, "x");
            assert_eq!(d.entries[1].value, "user-1");
        }
        let plain = Load::new("edge", &[vec![("a".into(), "x".into())]], None);
        assert_eq!(plain.request(7).descriptors[0].entries[0].value, "x");
    }
}
