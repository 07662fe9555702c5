//! The query of `/counters`: `domain=D&descriptor=k=v,k=v` (form-encoded; a value may hold
//! `=`, not `,`), read into a domain and a descriptor's entries, or a sentence saying what is
//! wrong.

use crate::limiter::parse_descriptor;

/// A descriptor named by a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterQuery {
    /// The domain.
    pub domain: String,
    /// The descriptor's entries, outermost first.
    pub entries: Vec<(String, String)>,
}

/// Reads `query` (the URI's query string, without `?`).
pub fn parse(query: Option<&str>) -> Result<CounterQuery, String> {
    let mut domain: Option<String> = None;
    let mut descriptor: Option<String> = None;
    for (name, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        let slot = match &*name {
            "domain" => &mut domain,
            "descriptor" => &mut descriptor,
            other => {
                return Err(format!(
                    "unknown query parameter '{}' (only domain and descriptor)",
                    other.escape_debug()
                ));
            }
        };
        if slot.is_some() {
            return Err(format!("'{name}' is given twice"));
        }
        *slot = Some(value.into_owned());
    }
    let domain = domain
        .filter(|d| !d.is_empty())
        .ok_or("missing domain=<domain>")?;
    if domain.len() > crate::limiter::MAX_TEXT {
        return Err(format!(
            "the domain is over {} bytes",
            crate::limiter::MAX_TEXT
        ));
    }
    let descriptor = descriptor
        .filter(|d| !d.is_empty())
        .ok_or("missing descriptor=<key>=<value>[,<key>=<value>…]")?;
    let entries = parse_descriptor(&descriptor).map_err(|e| format!("descriptor: {e}"))?;
    Ok(CounterQuery { domain, entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encoded values, `=` inside a value, nested entries.
    #[test]
    fn reads_domain_and_descriptor() {
        let q = parse(Some("domain=edge&descriptor=api_key%3Dk%3D1%2Cpath=%2Fx")).unwrap();
        assert_eq!(q.domain, "edge");
        assert_eq!(
            q.entries,
            [
                ("api_key".to_owned(), "k=1".to_owned()),
                ("path".to_owned(), "/x".to_owned())
            ]
        );
    }

    /// Each mistake is named.
    #[test]
    fn mistakes_are_named() {
        for (query, says) in [
            (None, "missing domain"),
            (Some("descriptor=a=b"), "missing domain"),
            (Some("domain=edge"), "missing descriptor"),
            (Some("domain=edge&descriptor="), "missing descriptor"),
            (Some("domain=edge&descriptor=ab"), "'ab' is not key=value"),
            (Some("domain=edge&descriptor==v"), "empty key"),
            (Some("domain=a&domain=b&descriptor=a=b"), "given twice"),
            (
                Some("domain=a&descriptor=a=b&limit=3"),
                "unknown query parameter 'limit'",
            ),
        ] {
            let error = parse(query).unwrap_err();
            assert!(error.contains(says), "{query:?}: {error}");
        }
    }
}
