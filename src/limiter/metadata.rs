//! envoyproxy/ratelimit's `dynamic_metadata` (`RESPONSE_DYNAMIC_METADATA`): the call's domain
//! and descriptors, and the `metadata` of the rules whose descriptors passed, merged; and
//! sluice's `sluice_refused_by` (`--refusal-metadata`).

use serde_json::{Map, Value};

use super::decision::{Code, DescriptorStatus};
use super::plan::Resolved;
use super::request::{Descriptor, LimitOverride, Request};

/// The key of a hits addend, on the call and on a descriptor.
const HITS_ADDEND: &str = "hitsAddend";

/// The key of the refusing rules' names (`--refusal-metadata`), beside envoyproxy/ratelimit's
/// keys: Envoy's access log prints it with
/// `%DYNAMIC_METADATA(envoy.filters.http.ratelimit:sluice_refused_by)%`.
pub(super) const REFUSED_BY: &str = "sluice_refused_by";

/// Adds `name` (a refusing descriptor's rule: its limit's `name`, else its full key) to the
/// comma-separated list `names`, made at the first refusal: a call nothing refused allocates
/// nothing for it.
pub(super) fn refused(names: &mut Option<String>, name: &str) {
    match names {
        Some(names) => {
            names.push(',');
            names.push_str(name);
        }
        None => *names = Some(name.to_owned()),
    }
}

/// The Struct envoyproxy/ratelimit returns, as JSON: `domain`; `descriptors`, one per request
/// descriptor in order; `hitsAddend` when the call's is not 0; `metadata` when some passed rule has
/// any. Built per call, only when the response options ask for it.
pub(super) fn build(
    request: &Request,
    slots: &[Resolved<'_>],
    statuses: &[DescriptorStatus],
) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("domain".into(), request.domain.clone().into());
    let descriptors = request.descriptors.iter().map(descriptor).collect();
    fields.insert("descriptors".into(), Value::Array(descriptors));
    if request.hits_addend != 0 {
        fields.insert(HITS_ADDEND.into(), request.hits_addend.into());
    }
    let mut merged = Map::new();
    for (slot, status) in slots.iter().zip(statuses) {
        // A descriptor passed when its own status is not OVER_LIMIT: a shadow-mode rule over
        // its limit passed, a quota-mode one did not.
        if let Resolved::Counted {
            metadata: Some(Value::Object(metadata)),
            ..
        } = slot
            && status.code != Code::OverLimit
        {
            merge(&mut merged, metadata);
        }
    }
    if !merged.is_empty() {
        fields.insert("metadata".into(), Value::Object(merged));
    }
    fields
}

/// One descriptor: `entries` as `"key=value"`; `limit` (the override as Go's prototext) and
/// `hitsAddend` (even 0) only when the request carries them.
fn descriptor(descriptor: &Descriptor) -> Value {
    let mut fields = Map::new();
    let entries = descriptor
        .entries
        .iter()
        .map(|(key, value)| Value::String(format!("{key}={value}")))
        .collect();
    fields.insert("entries".into(), Value::Array(entries));
    if let Some(limit) = descriptor.limit_override {
        fields.insert("limit".into(), prototext(limit).into());
    }
    if let Some(hits) = descriptor.hits_addend {
        fields.insert(HITS_ADDEND.into(), hits.into());
    }
    Value::Object(fields)
}

/// The override as Go's `String()` of the proto message writes it (`requests_per_unit:10
/// unit:HOUR`), with single spaces (Go varies them on purpose) and, as Go does, without a
/// field holding its zero value.
fn prototext(limit: LimitOverride) -> String {
    let unit = format!("unit:{}", limit.unit.name().to_ascii_uppercase());
    if limit.requests_per_unit == 0 {
        unit
    } else {
        format!("requests_per_unit:{} {unit}", limit.requests_per_unit)
    }
}

/// Merges `from` into `into` as envoyproxy/ratelimit does: a key `into` lacks is added; where both
/// hold an object the two merge the same way; otherwise `into` keeps its value (the first passed
/// descriptor's wins). `from` (a rule's stored metadata) is only read, never changed.
fn merge(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (key, value) in from {
        match (into.get_mut(key), value) {
            (None, _) => {
                into.insert(key.clone(), value.clone());
            }
            (Some(Value::Object(mine)), Value::Object(theirs)) => merge(mine, theirs),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::rules::Unit;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    /// New keys are added, objects merge recursively, and otherwise the first value stays
    /// (also when only one side is an object); the rule's own metadata is left as it was.
    #[test]
    fn merge_keeps_the_first_value_and_merges_objects() {
        let first = object(json!({"route": "a", "limits": {"tier": "gold", "n": 1}, "tag": "x"}));
        let second = object(json!({
            "route": "b",
            "limits": {"tier": "silver", "zone": "eu", "n": {"deep": true}},
            "tag": {"not": "merged"},
            "extra": [1, 2]
        }));
        let kept = second.clone();
        let mut merged = Map::new();
        merge(&mut merged, &first);
        merge(&mut merged, &second);
        assert_eq!(
            Value::Object(merged),
            json!({
                "route": "a",
                "limits": {"tier": "gold", "n": 1, "zone": "eu"},
                "tag": "x",
                "extra": [1, 2]
            })
        );
        assert_eq!(second, kept, "the rule's metadata is never written to");
    }

    /// Entries as `key=value`; `limit` and `hitsAddend` only when the request carries them,
    /// `hitsAddend` even when 0.
    #[test]
    fn descriptors_as_upstream_writes_them() {
        let plain = Descriptor {
            entries: vec![("k".into(), "v".into()), ("a".into(), "b=c".into())],
            ..Descriptor::default()
        };
        assert_eq!(descriptor(&plain), json!({"entries": ["k=v", "a=b=c"]}));
        let full = Descriptor {
            entries: vec![("k".into(), String::new())],
            limit_override: Some(LimitOverride {
                requests_per_unit: 10,
                unit: Unit::Hour,
            }),
            hits_addend: Some(0),
        };
        assert_eq!(
            descriptor(&full),
            json!({"entries": ["k="], "limit": "requests_per_unit:10 unit:HOUR", "hitsAddend": 0})
        );
    }

    /// Go's prototext leaves out a field holding its zero value.
    #[test]
    fn prototext_omits_zero_fields() {
        let zero = LimitOverride {
            requests_per_unit: 0,
            unit: Unit::Second,
        };
        assert_eq!(prototext(zero), "unit:SECOND");
        let year = LimitOverride {
            requests_per_unit: 4_294_967_295,
            unit: Unit::Year,
        };
        assert_eq!(prototext(year), "requests_per_unit:4294967295 unit:YEAR");
    }
}
