//! The page's view of the RLQS book: a page of its buckets with each stream's demand and share,
//! and the query that asks for one.

use serde_json::{Value, json};

use crate::rlqs::{BucketView, MAX_PAGE, Page, PageQuery, Strategy};

/// `after=<cursor>&limit=<n>`, both optional; anything else is refused, saying what.
pub(super) fn query(text: &str) -> Result<PageQuery, String> {
    let mut query = PageQuery::default();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = || -> Result<u64, String> {
            (value.parse()).map_err(|_| format!("{} must be a whole number", name.escape_debug()))
        };
        match name {
            "after" => query.after = Some(number()?),
            "limit" => query.limit = usize::try_from(number()?).unwrap_or(MAX_PAGE),
            _ => {
                return Err(format!(
                    "unknown parameter {:?}",
                    name.escape_debug().to_string()
                ));
            }
        }
    }
    Ok(query)
}

/// The page: how many buckets and streams in all, this page's buckets (each with its rule,
/// limit and holders), and the cursor of the next page.
pub(super) fn page(page: &Page) -> Value {
    json!({
        "count": page.count,
        "streams": page.streams,
        "buckets": page.buckets.iter().map(bucket).collect::<Vec<_>>(),
        "next": page.next,
    })
}

fn bucket(view: &BucketView) -> Value {
    let id: Vec<String> = view
        .bucket
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    json!({
        "domain": &*view.domain,
        "bucket": id.join(","),
        "rule": view.rule.as_deref(),
        "limit": view.limit.map(|l| json!({
            "per_second": l.per_second(),
            "burst": l.burst,
        })),
        "holders": view.holders.iter().map(|h| json!({
            "stream": h.stream.0,
            "demand_per_second": h.demand_per_second,
            "share_per_second": h.rate_per_second,
            "strategy": h.strategy.map(describe),
            "reporting": h.reporting,
        })).collect::<Vec<_>>(),
    })
}

fn describe(strategy: Strategy) -> String {
    match strategy {
        Strategy::AllowAll => "ALLOW_ALL".to_string(),
        Strategy::DenyAll => "DENY_ALL".to_string(),
        Strategy::TokenBucket {
            max_tokens,
            tokens_per_fill,
            fill_interval_seconds,
        } => format!("{tokens_per_fill} per {fill_interval_seconds} s, up to {max_tokens}"),
    }
}
