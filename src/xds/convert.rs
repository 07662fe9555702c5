//! xDS resources to rule documents: decode each `Any` as a `RateLimitConfig` and map it field by
//! field, as envoyproxy/ratelimit's `config_xds.go` does (the rule compiler then checks it like a
//! file).

use std::path::PathBuf;

use prost::Message;

use super::TYPE_URL;
use crate::proto::ratelimit::config::ratelimit::v3 as rls_conf;
use crate::proto::well_known::{Any, Struct};
use crate::rules::{ConfigError, ConfigErrors, DescriptorRule, LimitSpec, Location, RuleDocument};

/// Decodes every resource; fails with one error per resource that is not a `RateLimitConfig`.
pub(super) fn documents(resources: &[Any]) -> Result<Vec<RuleDocument>, ConfigErrors> {
    let mut documents = Vec::with_capacity(resources.len());
    let mut errors = Vec::new();
    for (index, resource) in resources.iter().enumerate() {
        match decode(resource) {
            Ok(config) => documents.push(document(config, index)),
            Err(message) => errors.push(ConfigError {
                location: Location {
                    file: PathBuf::from(format!("resource {index}")),
                    line: None,
                    col: None,
                },
                message,
            }),
        }
    }
    if errors.is_empty() {
        Ok(documents)
    } else {
        Err(ConfigErrors(errors))
    }
}

fn decode(resource: &Any) -> Result<rls_conf::RateLimitConfig, String> {
    if resource.type_url != TYPE_URL {
        return Err(format!(
            "resource type '{}' is not {TYPE_URL}",
            resource.type_url
        ));
    }
    rls_conf::RateLimitConfig::decode(resource.value.as_ref())
        .map_err(|e| format!("cannot decode RateLimitConfig: {e}"))
}

/// The document of one config; errors are prefixed with its `name` (its position if unnamed).
fn document(config: rls_conf::RateLimitConfig, index: usize) -> RuleDocument {
    let name = if config.name.is_empty() {
        format!("resource {index}")
    } else {
        config.name
    };
    RuleDocument {
        name,
        domain: config.domain,
        descriptors: config.descriptors.into_iter().map(descriptor).collect(),
    }
}

fn descriptor(d: rls_conf::RateLimitDescriptor) -> DescriptorRule {
    DescriptorRule {
        key: d.key,
        value: d.value,
        rate_limit: d.rate_limit.map(limit),
        descriptors: d.descriptors.into_iter().map(descriptor).collect(),
        shadow_mode: d.shadow_mode,
        quota_mode: d.quota_mode,
        detailed_metric: d.detailed_metric,
        metadata: d.metadata.map(json),
    }
}

fn limit(p: rls_conf::RateLimitPolicy) -> LimitSpec {
    LimitSpec {
        unit: unit_name(p.unit),
        requests_per_unit: p.requests_per_unit,
        unlimited: p.unlimited,
        name: p.name,
        replaces: p.replaces.into_iter().map(|r| r.name).collect(),
    }
}

/// The enum value's name, or its number when the schema does not know it (as Go prints it).
fn unit_name(unit: i32) -> String {
    rls_conf::RateLimitUnit::try_from(unit)
        .map_or_else(|_| unit.to_string(), |u| u.as_str_name().to_string())
}

fn json(metadata: Struct) -> serde_json::Value {
    // A Struct is a JSON object by definition; serialising it cannot fail.
    serde_json::to_value(metadata).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any<M: Message>(message: &M) -> Any {
        Any {
            type_url: TYPE_URL.into(),
            value: message.encode_to_vec().into(),
        }
    }

    /// Every field of envoyproxy/ratelimit's resource reaches the document, nested descriptors
    /// included.
    #[test]
    fn maps_every_field() {
        let metadata: Struct = [("team".to_string(), "a".to_string().into())]
            .into_iter()
            .collect();
        let child = rls_conf::RateLimitDescriptor {
            key: "user".into(),
            rate_limit: Some(rls_conf::RateLimitPolicy {
                unit: rls_conf::RateLimitUnit::Week as i32,
                requests_per_unit: 7,
                name: "weekly".into(),
                replaces: vec![rls_conf::RateLimitReplace { name: "old".into() }],
                ..Default::default()
            }),
            shadow_mode: true,
            detailed_metric: true,
            quota_mode: true,
            metadata: Some(metadata),
            ..Default::default()
        };
        let config = rls_conf::RateLimitConfig {
            name: "ns/gw/http".into(),
            domain: "ns/gw/http".into(),
            descriptors: vec![rls_conf::RateLimitDescriptor {
                key: "route".into(),
                value: "r1".into(),
                descriptors: vec![child],
                ..Default::default()
            }],
        };
        let docs = documents(&[any(&config)]).expect("decodes");
        let expected = RuleDocument {
            name: "ns/gw/http".into(),
            domain: "ns/gw/http".into(),
            descriptors: vec![DescriptorRule {
                key: "route".into(),
                value: "r1".into(),
                descriptors: vec![DescriptorRule {
                    key: "user".into(),
                    rate_limit: Some(LimitSpec {
                        unit: "WEEK".into(),
                        requests_per_unit: 7,
                        unlimited: false,
                        name: "weekly".into(),
                        replaces: vec!["old".into()],
                    }),
                    shadow_mode: true,
                    detailed_metric: true,
                    quota_mode: true,
                    metadata: Some(serde_json::json!({ "team": "a" })),
                    ..DescriptorRule::default()
                }],
                ..DescriptorRule::default()
            }],
        };
        assert_eq!(docs, [expected]);
    }

    /// Units are named as envoyproxy/ratelimit's enum prints them; unknown numbers as the number.
    #[test]
    fn unit_names() {
        assert_eq!(unit_name(0), "UNKNOWN");
        assert_eq!(unit_name(5), "MONTH");
        assert_eq!(unit_name(7), "WEEK");
        assert_eq!(unit_name(9), "9");
        assert_eq!(unit_name(-1), "-1");
    }

    /// A resource of another type or with undecodable bytes is an error naming its position;
    /// an unnamed config is named by its position too.
    #[test]
    fn bad_resources_are_errors() {
        let wrong_type = Any {
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
            value: Vec::new().into(),
        };
        let garbage = Any {
            type_url: TYPE_URL.into(),
            value: vec![0xff, 0xff, 0xff].into(),
        };
        let unnamed = any(&rls_conf::RateLimitConfig::default());
        let errors: Vec<String> = documents(&[unnamed.clone(), wrong_type, garbage])
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(errors.len(), 2);
        assert!(errors[0].starts_with("resource 1: resource type 'type.googleapis.com/envoy.config.cluster.v3.Cluster' is not"), "{}", errors[0]);
        assert!(
            errors[1].starts_with("resource 2: cannot decode RateLimitConfig"),
            "{}",
            errors[1]
        );
        assert_eq!(documents(&[unnamed]).unwrap()[0].name, "resource 0");
    }
}
