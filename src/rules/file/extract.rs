//! Pass 2 of a rule file's check: typed extraction of the fields each place uses, as
//! envoyproxy/ratelimit's struct decoding does it. Errors of pass 1 (allow-list, floats) are not
//! repeated.

use std::collections::HashMap;

use super::scalar::Value;
use super::yaml::{Yaml, YamlKind};
use super::{
    Checker, Pos, RawDescriptor, RawFile, RawLimit, Spanned, go_fmt, is_known, is_null, string_key,
};

impl Checker<'_> {
    /// The map's entries with string keys, the last of duplicates winning (as
    /// envoyproxy/ratelimit's decoder).
    fn entries<'y>(&mut self, pairs: &'y [(Yaml, Yaml)]) -> Vec<(&'y str, &'y Yaml, &'y Yaml)> {
        let mut out: Vec<Option<(&str, &Yaml, &Yaml)>> = Vec::with_capacity(pairs.len());
        // Indexed, so a map with many keys is not quadratic.
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(pairs.len());
        for (k, v) in pairs {
            let Some(key) = string_key(k) else { continue };
            if let Some(earlier) = seen.insert(key, out.len()) {
                self.warn(
                    k.pos,
                    format!("duplicate key '{key}': the last one is used"),
                );
                out[earlier] = None;
            }
            out.push(Some((key, k, v)));
        }
        out.into_iter().flatten().collect()
    }

    fn no_effect(&mut self, key: &str, k: &Yaml, place: &str) {
        if is_known(key) {
            self.warn(k.pos, format!("key '{key}' has no effect {place}"));
        }
    }

    pub(super) fn root(&mut self, pos: Pos, pairs: &[(Yaml, Yaml)]) -> RawFile {
        let mut file = RawFile {
            pos: Some(pos),
            ..RawFile::default()
        };
        for (key, k, v) in self.entries(pairs) {
            match key {
                "domain" => match self.string(v) {
                    Ok(d) => file.domain = Some(spanned(d.unwrap_or_default(), v)),
                    Err(()) => file.bad = true,
                },
                "descriptors" => file.descriptors = self.descriptors(v),
                _ => self.no_effect(key, k, "at the top level"),
            }
        }
        file
    }

    fn descriptors(&mut self, node: &Yaml) -> Vec<RawDescriptor> {
        self.maps(node, "[]descriptor")
            .into_iter()
            .map(|(pos, pairs)| self.descriptor(pos, pairs))
            .collect()
    }

    /// The map elements of a list (non-maps were reported by pass 1); null is an empty list.
    fn maps<'y>(&mut self, node: &'y Yaml, target: &str) -> Vec<(Pos, &'y [(Yaml, Yaml)])> {
        match &node.kind {
            YamlKind::Seq(items) => items
                .iter()
                .filter_map(|item| match &item.kind {
                    YamlKind::Map(pairs) => Some((item.pos, pairs.as_slice())),
                    _ => None,
                })
                .collect(),
            YamlKind::Scalar(s) if matches!(s.resolve(), Value::Null | Value::Float) => Vec::new(),
            _ => {
                self.type_error(node, target);
                Vec::new()
            }
        }
    }

    fn descriptor(&mut self, pos: Pos, pairs: &[(Yaml, Yaml)]) -> RawDescriptor {
        let mut d = RawDescriptor {
            pos,
            ..RawDescriptor::default()
        };
        let mut ok = true;
        for (key, k, v) in self.entries(pairs) {
            match key {
                "key" => {
                    ok &= self.text(v, &mut d.key);
                }
                "value" => {
                    ok &= self.text(v, &mut d.value);
                }
                "rate_limit" => match &v.kind {
                    YamlKind::Map(limit) => d.rate_limit = Some(self.limit(v.pos, limit)),
                    _ => ok &= self.null(v, "rate_limit"),
                },
                "rate_limits" => {
                    let all_maps = match &v.kind {
                        YamlKind::Seq(items) => {
                            items.iter().all(|i| matches!(i.kind, YamlKind::Map(_)))
                        }
                        _ => false,
                    };
                    let limits = self.maps(v, "[]rate_limit");
                    let limits = limits.into_iter().map(|(p, m)| self.limit(p, m)).collect();
                    // A list that is not all maps was reported; checking what is left of it
                    // (e.g. "must not be empty") would only repeat that error.
                    if all_maps {
                        d.rate_limits = Some(Spanned {
                            value: limits,
                            pos: k.pos,
                        });
                    } else {
                        ok &= is_null(v);
                    }
                }
                "descriptors" => d.descriptors = self.descriptors(v),
                "shadow_mode" => ok &= self.flag(v, &mut d.shadow_mode),
                "quota_mode" => ok &= self.flag(v, &mut d.quota_mode),
                "detailed_metric" => ok &= self.flag(v, &mut d.detailed_metric),
                "value_to_metric" => ok &= self.flag(v, &mut d.value_to_metric),
                "share_threshold" => {
                    let mut on = false;
                    ok &= self.flag(v, &mut on);
                    d.share_threshold = Some(spanned(on, k));
                }
                "metadata" => d.metadata = self.metadata(v),
                "failure_mode" => {
                    ok &= self.text(v, &mut d.failure_mode);
                }
                "shards" => {
                    ok &= self.number(v, "shards", &mut d.shards);
                }
                _ => self.no_effect(key, k, "in a descriptor"),
            }
        }
        d.bad = !ok;
        d
    }

    fn limit(&mut self, pos: Pos, pairs: &[(Yaml, Yaml)]) -> RawLimit {
        let mut l = RawLimit {
            pos,
            ..RawLimit::default()
        };
        let mut ok = true;
        for (key, k, v) in self.entries(pairs) {
            match key {
                "unit" => {
                    ok &= self.text(v, &mut l.unit);
                }
                "requests_per_unit" => match self.int(v, "uint32") {
                    Ok(n) => match u32::try_from(n.unwrap_or(0)) {
                        Ok(n) => l.requests_per_unit = n,
                        Err(_) => ok &= self.fail(|c| c.type_error(v, "uint32")),
                    },
                    Err(()) => ok = false,
                },
                "unlimited" => {
                    let mut on = false;
                    ok &= self.flag(v, &mut on);
                    l.unlimited = Some(spanned(on, k));
                }
                "name" => {
                    ok &= self
                        .string(v)
                        .map(|s| l.name = s.filter(|s| !s.is_empty()))
                        .is_ok()
                }
                "replaces" => {
                    ok &= is_null(v) || matches!(v.kind, YamlKind::Seq(_));
                    for (p, entry) in self.maps(v, "[]replaces") {
                        let mut name = String::new();
                        for (ekey, ek, ev) in self.entries(entry) {
                            match ekey {
                                "name" => match self.string(ev) {
                                    Ok(s) => name = s.unwrap_or_default(),
                                    Err(()) => ok = false,
                                },
                                _ => self.no_effect(ekey, ek, "in a replaces entry"),
                            }
                        }
                        l.replaces.push(Spanned {
                            value: name,
                            pos: p,
                        });
                    }
                }
                "window" => {
                    ok &= self.text(v, &mut l.window);
                }
                "calendar" => {
                    ok &= self.text(v, &mut l.calendar);
                }
                "timezone" => {
                    ok &= self.text(v, &mut l.timezone);
                }
                "algorithm" => {
                    ok &= self.text(v, &mut l.algorithm);
                }
                "burst" => {
                    ok &= self.number(v, "burst", &mut l.burst);
                }
                "lease" => {
                    ok &= self.number(v, "lease", &mut l.lease);
                }
                "scope" => {
                    ok &= self.text(v, &mut l.scope);
                }
                "record_over_limit" => {
                    let mut on = false;
                    ok &= self.flag(v, &mut on);
                    l.record_over_limit = Some(spanned(on, k));
                }
                _ => self.no_effect(key, k, "in a rate limit"),
            }
        }
        l.bad = !ok;
        l
    }

    /// Reports a type error and returns `Err`.
    fn reject<T>(&mut self, node: &Yaml, target: &str) -> Result<T, ()> {
        self.type_error(node, target);
        Err(())
    }

    /// Runs `report` and returns `false`, for `ok &= ...` chains.
    fn fail(&mut self, report: impl FnOnce(&mut Self)) -> bool {
        report(self);
        false
    }

    /// [`Self::string`] into a positioned field. Returns whether it was valid.
    fn text(&mut self, node: &Yaml, out: &mut Option<Spanned<String>>) -> bool {
        self.string(node)
            .map(|s| *out = s.map(|s| spanned(s, node)))
            .is_ok()
    }

    /// [`Self::int`] into a positioned field. Returns whether it was valid.
    fn number(&mut self, node: &Yaml, target: &str, out: &mut Option<Spanned<i128>>) -> bool {
        self.int(node, target)
            .map(|n| *out = n.map(|n| spanned(n, node)))
            .is_ok()
    }

    /// A string field: strings, ints and bools as written (go-yaml decodes any scalar into a
    /// string), null as absent. `Err` when already reported.
    fn string(&mut self, node: &Yaml) -> Result<Option<String>, ()> {
        match &node.kind {
            YamlKind::Scalar(s) => match s.resolve() {
                Value::Null => Ok(None),
                Value::Float => Err(()),
                _ => Ok(Some(s.text.clone())),
            },
            _ => self.reject(node, "string"),
        }
    }

    /// A boolean field (null is false). Returns whether it was valid.
    fn flag(&mut self, node: &Yaml, out: &mut bool) -> bool {
        match &node.kind {
            YamlKind::Scalar(s) => match s.resolve() {
                Value::Null => true,
                Value::Bool(b) => {
                    *out = b;
                    true
                }
                Value::Float => false,
                _ => self.fail(|c| c.type_error(node, "bool")),
            },
            _ => self.fail(|c| c.type_error(node, "bool")),
        }
    }

    /// An integer field (null is absent); the range is the caller's to check.
    fn int(&mut self, node: &Yaml, target: &str) -> Result<Option<i128>, ()> {
        match &node.kind {
            YamlKind::Scalar(s) => match s.resolve() {
                Value::Null => Ok(None),
                Value::Int(n) => Ok(Some(n)),
                Value::Float => Err(()),
                _ => self.reject(node, target),
            },
            _ => self.reject(node, target),
        }
    }

    /// A field that must be a map or null (`rate_limit`). Returns whether it was valid.
    fn null(&mut self, node: &Yaml, target: &str) -> bool {
        match &node.kind {
            YamlKind::Scalar(s) if s.resolve() == Value::Null => true,
            YamlKind::Scalar(s) if s.resolve() == Value::Float => false,
            _ => self.fail(|c| c.type_error(node, target)),
        }
    }

    fn metadata(&mut self, node: &Yaml) -> Option<serde_json::Value> {
        match &node.kind {
            YamlKind::Map(_) => match to_json(node) {
                Ok(json) => Some(json),
                Err((pos, why)) => {
                    self.error(pos, format!("error parsing metadata: {why}"));
                    None
                }
            },
            _ if is_null(node) => None,
            _ => {
                self.error(node.pos, "error parsing metadata: metadata must be a map");
                None
            }
        }
    }
}

fn spanned<T>(value: T, node: &Yaml) -> Spanned<T> {
    Spanned {
        value,
        pos: node.pos,
    }
}

/// Metadata to JSON: any scalar key as its text, YAML 1.1 scalar resolution for values.
fn to_json(node: &Yaml) -> Result<serde_json::Value, (Pos, String)> {
    use serde_json::Value as J;
    Ok(match &node.kind {
        YamlKind::Map(pairs) => {
            let mut object = serde_json::Map::new();
            for (k, v) in pairs {
                let key = match &k.kind {
                    YamlKind::Scalar(s) if s.resolve() != Value::Null => s.text.clone(),
                    _ => return Err((k.pos, format!("key is not of type string: {}", go_fmt(k)))),
                };
                object.insert(key, to_json(v)?);
            }
            J::Object(object)
        }
        YamlKind::Seq(items) => J::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        YamlKind::Scalar(s) => match s.resolve() {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(b),
            Value::Int(n) => match i64::try_from(n) {
                Ok(n) => J::from(n),
                Err(_) => J::from(n as u64),
            },
            Value::Float => s
                .text
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(J::Number)
                .ok_or_else(|| (node.pos, format!("invalid number '{}'", s.text)))?,
            Value::Str(text) => J::String(text.to_string()),
        },
    })
}
