//! envoyproxy/ratelimit's DogStatsD mogrifiers: a regular expression on the stat's name, and a
//! new name and tags written with `$1`… from its groups.

use regex::Regex;

/// One mogrifier (`DOG_STATSD_MOGRIFIER_<NAME>_PATTERN`, `_NAME`, `_TAGS`).
#[derive(Debug, Clone)]
pub struct Mogrifier {
    pattern: Regex,
    name: String,
    tags: Vec<(String, String)>,
}

/// Why a mogrifier cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MogrifierError {
    /// The pattern is not a regular expression.
    #[error("not a regular expression: {0}")]
    Pattern(String),
    /// The name template is empty.
    #[error("no name")]
    NoName,
    /// A tag has an empty key or value.
    #[error("tag {0:?} has an empty key or value")]
    EmptyTag(String),
}

impl Mogrifier {
    /// A mogrifier renaming names that match `pattern` to `name` with `tags` (each value a
    /// template too).
    pub fn new(
        pattern: &str,
        name: &str,
        tags: Vec<(String, String)>,
    ) -> Result<Self, MogrifierError> {
        let pattern = Regex::new(pattern).map_err(|e| MogrifierError::Pattern(e.to_string()))?;
        if name.is_empty() {
            return Err(MogrifierError::NoName);
        }
        if let Some((key, value)) = tags.iter().find(|(k, v)| k.is_empty() || v.is_empty()) {
            return Err(MogrifierError::EmptyTag(format!("{key}:{value}")));
        }
        Ok(Self {
            pattern,
            name: name.to_owned(),
            tags,
        })
    }

    /// The new name and its `key:value` tags, if the pattern matches `name` (anywhere, as Go's
    /// `FindStringSubmatch`).
    pub(super) fn apply(&self, name: &str) -> Option<(String, Vec<String>)> {
        let groups = self.pattern.captures(name)?;
        let group = |i: usize| groups.get(i).map_or("", |m| m.as_str());
        let tags = (self.tags.iter())
            .map(|(key, value)| format!("{key}:{}", substitute(value, group, groups.len())))
            .collect();
        Some((substitute(&self.name, group, groups.len()), tags))
    }
}

/// `template` with each `$N` replaced by group N; a `$N` past the last group stays as written.
fn substitute<'a>(template: &str, group: impl Fn(usize) -> &'a str, groups: usize) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        match after[..digits].parse::<usize>() {
            Ok(i) if i < groups => out.push_str(group(i)),
            _ => out.push_str(&rest[at..at + 1 + digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream's README example: the domain and key become tags of one name.
    #[test]
    fn groups_fill_the_name_and_tags() {
        let mogrifier = Mogrifier::new(
            r"^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$",
            "ratelimit.service.rate_limit.$3",
            vec![
                ("domain".into(), "$1".into()),
                ("descriptor".into(), "$2".into()),
                ("odd".into(), "$9$x".into()),
            ],
        )
        .unwrap();
        let (name, tags) = mogrifier
            .apply("ratelimit.service.rate_limit.edge.api_key.over_limit")
            .unwrap();
        assert_eq!(name, "ratelimit.service.rate_limit.over_limit");
        assert_eq!(tags, ["domain:edge", "descriptor:api_key", "odd:$9$x"]);
        assert!(
            mogrifier
                .apply("ratelimit.service.config_load_success")
                .is_none()
        );
    }

    /// A bad pattern, no name or an empty tag is an error, never a panic.
    #[test]
    fn bad_mogrifiers_are_errors() {
        assert!(matches!(
            Mogrifier::new("(", "n", vec![]),
            Err(MogrifierError::Pattern(_))
        ));
        assert_eq!(
            Mogrifier::new("a", "", vec![]).unwrap_err(),
            MogrifierError::NoName
        );
        assert!(Mogrifier::new("a", "n", vec![("k".into(), String::new())]).is_err());
    }
}
