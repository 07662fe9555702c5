//! Flags of `sluice serve` that shape the answers: rate-limit headers, dynamic metadata, global
//! quota mode and the precision of `duration_until_reset` (envoyproxy/ratelimit's response
//! options, under sluice's names).

use std::borrow::Cow;

use axum::http::HeaderName;
use clap::{Args, ValueEnum};
use sluice::app::defaults;
use sluice::limiter::{CompatHeaderNames, HeaderStyle, ResetPrecision, ResponseOptions};

/// Response flags of `sluice serve`.
#[derive(Debug, Args)]
pub struct ResponseArgs {
    /// Rate-limit headers added to answers: `draft10` (RateLimit-Policy and RateLimit, and
    /// Retry-After and cache-control: no-store on OVER_LIMIT), `upstream` (envoyproxy/ratelimit's
    /// three headers, named by --limit-header, --remaining-header and --reset-header, and
    /// nothing else), or `none`.
    #[arg(long, env = "SLUICE_RESPONSE_HEADERS", value_enum, default_value_t = HeadersArg::Draft10)]
    pub response_headers: HeadersArg,
    /// Name of the header carrying the limit, with `--response-headers upstream`
    /// (envoyproxy/ratelimit LIMIT_LIMIT_HEADER).
    #[arg(long, env = "SLUICE_LIMIT_HEADER", default_value = defaults::LIMIT_HEADER, value_parser = parse_header_name)]
    pub limit_header: String,
    /// Name of the header carrying the remaining requests, with `--response-headers upstream`
    /// (envoyproxy/ratelimit LIMIT_REMAINING_HEADER).
    #[arg(long, env = "SLUICE_REMAINING_HEADER", default_value = defaults::REMAINING_HEADER, value_parser = parse_header_name)]
    pub remaining_header: String,
    /// Name of the header carrying the seconds until the window resets, with
    /// `--response-headers upstream` (envoyproxy/ratelimit LIMIT_RESET_HEADER).
    #[arg(long, env = "SLUICE_RESET_HEADER", default_value = defaults::RESET_HEADER, value_parser = parse_header_name)]
    pub reset_header: String,
    /// Fill the answer's dynamic_metadata as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does
    /// (domain, descriptors, hits addend, and the metadata of the rules that passed).
    #[arg(long, env = "SLUICE_RESPONSE_DYNAMIC_METADATA")]
    pub response_dynamic_metadata: bool,
    /// Name the rules that refused in the answer's dynamic_metadata, as `sluice_refused_by`
    /// (comma-separated, in descriptor order), for Envoy's access log.
    #[arg(long, env = "SLUICE_REFUSAL_METADATA")]
    pub refusal_metadata: bool,
    /// Global quota mode (envoyproxy/ratelimit QUOTA_MODE): every descriptor but `unlimited` ones
    /// counts as quota-mode, so a call is refused only when all of them are over.
    #[arg(long, env = "SLUICE_QUOTA_MODE")]
    pub quota_mode: bool,
    /// Precision of duration_until_reset: `seconds` (rounded up, so Envoy's x-ratelimit-reset
    /// equals Retry-After) or `milliseconds` (rounded up: the earliest moment a call is
    /// admitted, for clients that read the field themselves).
    #[arg(long, env = "SLUICE_RESET_PRECISION", value_enum, default_value_t = PrecisionArg::Seconds)]
    pub reset_precision: PrecisionArg,
}

/// Header styles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HeadersArg {
    /// IETF draft-10 RateLimit-Policy and RateLimit, plus Retry-After and cache-control on
    /// OVER_LIMIT.
    Draft10,
    /// envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED headers.
    Upstream,
    /// No rate-limit headers.
    None,
}

/// Precisions of duration_until_reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    /// Whole seconds, rounded up.
    Seconds,
    /// Milliseconds, rounded up.
    Milliseconds,
}

impl ResponseArgs {
    /// The response options these flags describe.
    pub fn options(&self) -> ResponseOptions {
        let headers = match self.response_headers {
            HeadersArg::Draft10 => HeaderStyle::Draft10,
            HeadersArg::Upstream => HeaderStyle::Compat(CompatHeaderNames {
                limit: Cow::Owned(self.limit_header.clone()),
                remaining: Cow::Owned(self.remaining_header.clone()),
                reset: Cow::Owned(self.reset_header.clone()),
            }),
            HeadersArg::None => HeaderStyle::None,
        };
        ResponseOptions {
            headers,
            dynamic_metadata: self.response_dynamic_metadata,
            refusal_metadata: self.refusal_metadata,
            reset_precision: match self.reset_precision {
                PrecisionArg::Seconds => ResetPrecision::Seconds,
                PrecisionArg::Milliseconds => ResetPrecision::Milliseconds,
            },
        }
    }
}

/// A valid HTTP header name, kept as written (envoyproxy/ratelimit sends it verbatim; HTTP/2
/// lower-cases it on the wire).
pub(crate) fn parse_header_name(text: &str) -> Result<String, String> {
    match HeaderName::from_bytes(text.as_bytes()) {
        Ok(_) => Ok(text.to_owned()),
        Err(_) if text.is_empty() => Err("a header name must not be empty".to_owned()),
        Err(_) => Err(format!("'{text}' is not a valid HTTP header name")),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn options(args: &[&str]) -> Result<ResponseOptions, clap::Error> {
        let argv = ["sluice", "serve"].iter().chain(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Serve(serve) => Ok(serve.response.options()),
            other => panic!("parsed as {other:?}"),
        }
    }

    /// By default: draft-10 headers, no dynamic metadata, whole-second resets.
    #[test]
    fn defaults_are_draft10_without_metadata() {
        assert_eq!(options(&[]).unwrap(), ResponseOptions::default());
    }

    /// envoyproxy/ratelimit headers take their names verbatim (envoyproxy/ratelimit's defaults when
    /// not given); the other switches map one to one.
    #[test]
    fn upstream_headers_and_switches() {
        let o = options(&["--response-headers", "upstream"]).unwrap();
        assert_eq!(o.headers, HeaderStyle::Compat(CompatHeaderNames::default()));
        let o = options(&[
            "--response-headers=upstream",
            "--limit-header=X-Limit",
            "--remaining-header",
            "x-left",
            "--reset-header",
            "Reset",
            "--response-dynamic-metadata",
            "--refusal-metadata",
            "--reset-precision",
            "milliseconds",
        ])
        .unwrap();
        assert_eq!(
            o,
            ResponseOptions {
                headers: HeaderStyle::Compat(CompatHeaderNames {
                    limit: "X-Limit".into(),
                    remaining: "x-left".into(),
                    reset: "Reset".into(),
                }),
                dynamic_metadata: true,
                refusal_metadata: true,
                reset_precision: ResetPrecision::Milliseconds,
            }
        );
        assert_eq!(
            options(&["--response-headers", "none"]).unwrap().headers,
            HeaderStyle::None
        );
    }

    /// Header names that HTTP cannot carry are refused at start, with the reason.
    #[test]
    fn bad_header_names_are_errors() {
        for (value, says) in [
            ("", "must not be empty"),
            ("Rate Limit", "not a valid HTTP header name"),
            (":status", "not a valid HTTP header name"),
            ("x-é", "not a valid HTTP header name"),
        ] {
            let flag = format!("--limit-header={value}");
            let error = options(&[&flag]).unwrap_err().to_string();
            assert!(error.contains(says), "{value:?}: {error}");
        }
        assert!(options(&["--response-headers", "draft03"]).is_err());
    }
}
