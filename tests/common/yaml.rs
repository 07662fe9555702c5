//! YAML documents (via `yaml-rust2`) as `serde_json::Value`s, for asserting on manifests, and
//! a ConfigMap's files on disk.

use serde_json::{Map, Value};
use yaml_rust2::{Yaml, YamlLoader};

/// Every document of a (multi-document) YAML stream; empty documents are left out.
pub fn documents(text: &str) -> Vec<Value> {
    YamlLoader::load_from_str(text)
        .unwrap_or_else(|e| panic!("invalid YAML: {e}\n{text}"))
        .iter()
        .map(to_json)
        .filter(|v| !v.is_null())
        .collect()
}

/// The one document of `text`.
pub fn document(text: &str) -> Value {
    let mut docs = documents(text);
    assert_eq!(docs.len(), 1, "expected one YAML document:\n{text}");
    docs.remove(0)
}

/// The files of a ConfigMap's `data` (at least one), written into a new temporary directory.
pub fn configmap_dir(configmap: &Value) -> tempfile::TempDir {
    let data = configmap["data"].as_object().expect("ConfigMap data");
    assert!(!data.is_empty(), "an empty ConfigMap");
    let files: Vec<(&str, &str)> = data
        .iter()
        .map(|(name, text)| (name.as_str(), text.as_str().expect("text file")))
        .collect();
    super::process::temp_dir(&files)
}

/// A YAML value as JSON (keys become strings).
pub fn to_json(yaml: &Yaml) -> Value {
    match yaml {
        Yaml::Real(r) => r
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::String(s) => Value::from(s.as_str()),
        Yaml::Boolean(b) => Value::from(*b),
        Yaml::Array(items) => Value::Array(items.iter().map(to_json).collect()),
        Yaml::Hash(hash) => Value::Object(
            hash.iter()
                .map(|(k, v)| (key(k), to_json(v)))
                .collect::<Map<_, _>>(),
        ),
        Yaml::Alias(_) | Yaml::Null | Yaml::BadValue => Value::Null,
    }
}

fn key(yaml: &Yaml) -> String {
    match yaml {
        Yaml::String(s) | Yaml::Real(s) => s.clone(),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Boolean(b) => b.to_string(),
        other => format!("{other:?}"),
    }
}
