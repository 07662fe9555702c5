//! Which calls that change or reveal state (`POST /json`, `/ui`'s POSTs) a browser may make:
//! none on another site's behalf, none through a host name that is not this server's.
//!
//! A browser marks every request it sends a site's way: `Sec-Fetch-Site` (every current
//! browser, on every request) and `Origin` (on every POST, by the Fetch standard). A request
//! with neither comes from no browser (curl, a service, a test of envoyproxy/ratelimit's) and
//! is served whatever its content type and `Host`, as envoyproxy/ratelimit serves it. A
//! request from a browser is refused when:
//!
//! - it was sent on another site's behalf: `Sec-Fetch-Site` other than `same-origin` or `none`,
//!   or an `Origin` whose host is not the `Host` asked for (403);
//! - its `Host` is not one of the names this server answers to (403): DNS rebinding points a
//!   name the attacker owns (`evil.example`) at this server, and the browser then takes the
//!   attacker's page and this server for one origin, `Origin` and `Sec-Fetch-Site` included;
//! - its body is not declared `application/json` (415), the one content type a page may send
//!   across origins only after asking (a CORS preflight this server never grants).
//!
//! The names ([`AllowedHosts`]): any IP address (a rebinding needs a name), `localhost` and
//! `*.localhost`, the machine's host name, and those given with `--http-allowed-hosts`
//! (a Service's DNS names, an Ingress host).

use std::net::IpAddr;

use axum::http::{HeaderMap, StatusCode, header};

/// A refusal: its status and the body saying why.
pub type Refusal = (StatusCode, &'static str);

/// The host names a browser may reach this server by.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts {
    /// Whole names, lower case, without a trailing dot.
    names: Vec<String>,
    /// Suffixes of `*.` entries, with their leading dot (`.example.com`).
    suffixes: Vec<String>,
}

impl AllowedHosts {
    /// `localhost` and `*.localhost`, the machine's host name `hostname` (if known) and the
    /// `extra` entries (a name, or `*.domain` for every name under it).
    pub fn new(hostname: Option<&str>, extra: &[String]) -> Self {
        let mut allowed = Self::default();
        let defaults = ["localhost", "*.localhost"].map(str::to_owned);
        for entry in defaults
            .iter()
            .chain(hostname.map(str::to_owned).iter())
            .chain(extra)
        {
            let entry = normalized(entry);
            match entry.strip_prefix('*') {
                Some(suffix) if suffix.starts_with('.') => allowed.suffixes.push(suffix.into()),
                _ if !entry.is_empty() => allowed.names.push(entry),
                _ => {}
            }
        }
        allowed
    }

    /// Whether a `Host` header (`name`, `name:port`, `[v6]:port`) names this server.
    pub fn allows(&self, host: &str) -> bool {
        let name = host_name(host);
        if name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok()
        {
            return true;
        }
        let name = normalized(name);
        self.names.contains(&name) || self.suffixes.iter().any(|s| name.ends_with(s.as_str()))
    }
}

/// Checks a call to an endpoint that charges counters or runs an explanation; see the
/// module's documentation.
pub fn check(headers: &HeaderMap, hosts: &AllowedHosts, what: &'static str) -> Result<(), Refusal> {
    let text = |name: &header::HeaderName| headers.get(name).map(|v| v.to_str().unwrap_or("\u{0}"));
    let site = text(&header::HeaderName::from_static("sec-fetch-site"));
    let origin = text(&header::ORIGIN);
    let browser = site.is_some()
        || origin.is_some()
        || headers.keys().any(|n| n.as_str().starts_with("sec-fetch-"));
    if !browser {
        return Ok(());
    }
    let host = text(&header::HOST).unwrap_or_default();
    if !hosts.allows(host) {
        return Err((StatusCode::FORBIDDEN, refusal(what, Why::Host)));
    }
    if site.is_some_and(|s| s != "same-origin" && s != "none") {
        return Err((StatusCode::FORBIDDEN, refusal(what, Why::Origin)));
    }
    // `null` (a sandboxed frame, a file) is no origin of ours either.
    if let Some(origin) = origin
        && origin
            .split_once("://")
            .is_none_or(|(_, authority)| !authority.eq_ignore_ascii_case(host))
    {
        return Err((StatusCode::FORBIDDEN, refusal(what, Why::Origin)));
    }
    let content_type = text(&header::CONTENT_TYPE).unwrap_or_default();
    let media_type = content_type.split(';').next().unwrap_or_default().trim();
    if !media_type.eq_ignore_ascii_case("application/json") {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            refusal(what, Why::MediaType),
        ));
    }
    Ok(())
}

/// Why a browser's call was refused.
enum Why {
    Host,
    Origin,
    MediaType,
}

/// The answer's body for `what` (`/json` or `/ui`).
fn refusal(what: &str, why: Why) -> &'static str {
    match (what, why) {
        ("/json", Why::Host) => {
            "POST /json refuses a browser's call to a host name that is not this server's \
             (add it with --http-allowed-hosts)\n"
        }
        ("/json", Why::Origin) => "POST /json refuses calls from another origin\n",
        ("/json", Why::MediaType) => {
            "POST /json takes a browser's body only as Content-Type: application/json\n"
        }
        (_, Why::Host) => {
            "this page refuses a host name that is not this server's (add it with \
             --http-allowed-hosts)"
        }
        (_, Why::Origin) => "this page refuses calls from another origin",
        (_, Why::MediaType) => "this page takes only Content-Type: application/json",
    }
}

/// The name part of a `Host` header: without its port, IPv6 brackets kept.
fn host_name(host: &str) -> &str {
    match host.rfind(':') {
        // `[::1]:8080` or `name:8080`; a bare IPv6 address has no brackets and many colons.
        Some(at) if host.starts_with('[') || !host[..at].contains(':') => {
            if host.starts_with('[') && !host[..at].ends_with(']') {
                host
            } else {
                &host[..at]
            }
        }
        _ => host,
    }
}

/// Lower case, without a trailing dot (`Example.COM.` is `example.com`).
fn normalized(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    /// IP addresses always; names only if they are the server's own or given.
    #[test]
    fn host_names_are_the_servers_own() {
        let hosts = AllowedHosts::new(
            Some("sluice-7d9f"),
            &[
                "sluice.prod.svc.cluster.local".into(),
                "*.example.com".into(),
            ],
        );
        for host in [
            "127.0.0.1:8080",
            "[::1]:8080",
            "::1",
            "10.1.2.3",
            "localhost:8080",
            "LOCALHOST.",
            "app.localhost:80",
            "sluice-7d9f:8080",
            "sluice.prod.svc.cluster.local:8080",
            "rl.example.com",
        ] {
            assert!(hosts.allows(host), "{host}");
        }
        for host in [
            "evil.example:8080",
            "example.com",
            "sluice",
            "",
            "localhost.evil.example",
        ] {
            assert!(!hosts.allows(host), "{host}");
        }
    }

    /// Issue 40 (11): no browser marker, anything goes (envoyproxy/ratelimit's own tests send
    /// no content type); from a browser, the host, the origin and the content type are checked,
    /// DNS rebinding (a foreign `Host` with a matching `Origin`) included.
    #[test]
    fn browsers_are_checked_and_other_clients_are_not() {
        let hosts = AllowedHosts::new(None, &[]);
        let status = |pairs: &[(&'static str, &'static str)]| {
            check(&headers(pairs), &hosts, "/json").map_err(|(status, _)| status)
        };
        let json = ("content-type", "application/json");
        let local = ("host", "127.0.0.1");
        let rebound = ("host", "evil.example:8080");
        let site = |s: &'static str| ("sec-fetch-site", s);
        let origin = |o: &'static str| ("origin", o);
        let served: [&[_]; 5] = [
            &[],
            &[("content-type", "text/plain"), rebound],
            &[("content-type", "application/x-www-form-urlencoded")],
            &[
                json,
                ("host", "127.0.0.1:8080"),
                origin("http://127.0.0.1:8080"),
            ],
            &[json, ("host", "localhost:8080"), site("same-origin")],
        ];
        let forbidden: [&[_]; 5] = [
            &[
                json,
                rebound,
                origin("http://evil.example:8080"),
                site("same-origin"),
            ],
            &[json, local, origin("https://evil.example")],
            &[json, local, origin("null")],
            &[json, local, site("cross-site")],
            &[json, local, site("same-site")],
        ];
        let not_json: [&[_]; 2] = [
            &[("content-type", "text/plain"), local, site("same-origin")],
            &[local, ("sec-fetch-mode", "no-cors")],
        ];
        for pairs in served {
            assert_eq!(status(pairs), Ok(()), "{pairs:?}");
        }
        for pairs in forbidden {
            assert_eq!(status(pairs), Err(StatusCode::FORBIDDEN), "{pairs:?}");
        }
        for pairs in not_json {
            let refused = Err(StatusCode::UNSUPPORTED_MEDIA_TYPE);
            assert_eq!(status(pairs), refused, "{pairs:?}");
        }
    }
}
