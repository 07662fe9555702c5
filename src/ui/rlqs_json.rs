//! The page's view of the RLQS book: a page of its buckets with each stream's demand and share,
//! the query that asks for one, and the pages built lately, served again for a second.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::rlqs::{BucketView, MAX_PAGE, Page, PageQuery, Rlqs, Strategy};

/// How long a page built is served again as it is.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// Pages kept at once (distinct queries).
const KEPT: usize = 16;

/// The pages built lately: however many clients poll, each page costs the book and the JSON
/// one build a second at most, so polling `/ui` cannot take CPU from RLS calls.
#[derive(Default)]
pub(super) struct Pages {
    built: Mutex<Vec<(PageQuery, Instant, Arc<str>)>>,
}

impl Pages {
    /// The page `query` asks for, as JSON text: built within the last second, or now by the
    /// book's thread; `None` once the wing has stopped.
    pub(super) async fn get(&self, rlqs: &Rlqs, query: PageQuery) -> Option<Arc<str>> {
        let fresh = |built: &mut Vec<(PageQuery, Instant, Arc<str>)>| {
            built.retain(|(_, at, _)| at.elapsed() < FRESH_FOR);
            (built.iter().find(|(q, _, _)| *q == query)).map(|(_, _, body)| body.clone())
        };
        if let Some(body) = fresh(&mut self.lock()) {
            return Some(body);
        }
        let body: Arc<str> = page(&rlqs.page(query).await?).to_string().into();
        let mut built = self.lock();
        if built.len() >= KEPT {
            built.remove(0);
        }
        built.push((query, Instant::now(), body.clone()));
        Some(body)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(PageQuery, Instant, Arc<str>)>> {
        self.built.lock().unwrap_or_else(|e| e.into_inner())
    }
}

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
