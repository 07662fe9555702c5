//! The limiter: a call's descriptors → matched limits → one atomic store call → a [`Decision`].
//!
//! Matching, `replaces`, costs and gates are planned in `plan.rs` against one snapshot of the
//! rules; the store applies every charge of the call at once (all-or-nothing); `compose.rs`
//! then turns the outcomes into statuses, the overall code and the headers.

mod compat_headers;
mod compose;
mod counters;
mod decision;
mod degraded;
mod explain;
mod header_text;
pub mod headers;
mod metadata;
mod plan;
#[cfg(test)]
mod quota_mode_tests;
mod record;
#[cfg(test)]
mod refusal_tests;
mod request;
mod response_options;
#[cfg(test)]
mod response_options_tests;
mod shards;

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use smallvec::SmallVec;

use crate::algorithm::{Algorithm, Recording};
use crate::clock::Clock;
use crate::metrics::{self, Metrics};
use crate::region::Regions;
use crate::rules::RuleSet;
use crate::store::{ChargeOutcome, MemoryStore, Store, StoreError};

pub use counters::{Counters, CountersError, LimitCounters, Reset, ShardCounter};
pub use decision::{Code, Decision, DescriptorStatus, ReportedLimit, StoreUse};
pub use explain::{
    CounterState, Explained, Explanation, LimitState, Peek, explain_with, parse_descriptor,
};
pub use header_text::{HeaderText, RateLimitItem};
pub use request::{Descriptor, InvalidRequest, LimitOverride, Request};
pub(crate) use request::{MAX_DESCRIPTORS, MAX_ENTRIES, MAX_TEXT};
pub(crate) use response_options::{
    COMPAT_LIMIT_HEADER, COMPAT_REMAINING_HEADER, COMPAT_RESET_HEADER,
};
pub use response_options::{CompatHeaderNames, HeaderStyle, ResetPrecision, ResponseOptions};

/// Behaviour switches of the limiter.
#[derive(Debug, Clone)]
pub struct LimiterOptions {
    /// Global shadow mode: the overall code is forced to OK; statuses keep OVER_LIMIT.
    pub global_shadow_mode: bool,
    /// Global quota mode (envoyproxy/ratelimit `QUOTA_MODE`): every descriptor but `unlimited` ones
    /// is in quota mode, so the call is over only if all of them are over.
    pub global_quota_mode: bool,
    /// The algorithm of request-side limit overrides (rules carry their own).
    pub default_algorithm: Algorithm,
    /// What request-side limit overrides do with hits past them: as a rule of the default
    /// algorithm that sets no `record_over_limit` ([`crate::rules::LoadOptions::recording`]).
    pub override_recording: Recording,
    /// Replicas sharing the store: a `failure_mode: local` rule counts limit / this while
    /// the store is unreachable.
    pub expected_replicas: u64,
    /// Headers, dynamic metadata and reset precision of the answers.
    pub response: ResponseOptions,
}

impl Default for LimiterOptions {
    fn default() -> Self {
        Self {
            global_shadow_mode: false,
            global_quota_mode: false,
            default_algorithm: crate::rules::DEFAULT_ALGORITHM,
            override_recording: Recording::AdmittedOnly,
            expected_replicas: 1,
            response: ResponseOptions::default(),
        }
    }
}

/// Why a call could not be answered.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LimitError {
    /// The call itself is malformed.
    #[error(transparent)]
    Invalid(#[from] InvalidRequest),
    /// The counter store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No rules have arrived yet (xDS before its first accepted response); envoyproxy/ratelimit's
    /// words.
    #[error("no rate limit configuration loaded")]
    NoRules,
}

/// Checks rate-limit calls against the current rules and a store.
pub struct Limiter {
    rules: Arc<ArcSwap<RuleSet>>,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    options: LimiterOptions,
    metrics: Arc<Metrics>,
    /// The store's latency and failure series, resolved once.
    store_series: metrics::StoreSeries,
    /// Counts `failure_mode: local` rules while the store is unreachable.
    fallback: MemoryStore,
    degraded_log: degraded::BurstLog,
    /// This region's portions of `scope: global` limits (`None`: not one of several regions).
    regions: Option<Arc<Regions>>,
}

impl Limiter {
    /// A limiter reading rules from `rules` (swapped whole on reload), counting in `store`,
    /// telling time with `clock`, recording into `metrics`.
    pub fn new(
        rules: Arc<ArcSwap<RuleSet>>,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        options: LimiterOptions,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            store_series: metrics.store_series(store.name()),
            rules,
            store,
            clock,
            options,
            metrics,
            fallback: MemoryStore::with_shards(16),
            degraded_log: degraded::BurstLog::default(),
            regions: None,
        }
    }

    /// This limiter, checking `scope: global` limits against `regions`' portions of them.
    pub fn with_regions(mut self, regions: Arc<Regions>) -> Self {
        self.regions = Some(regions);
        self
    }

    /// This region's portions of global limits, when it is one of several regions.
    pub fn regions(&self) -> Option<&Arc<Regions>> {
        self.regions.as_ref()
    }

    /// The region's figures now (`/ui`); `None` when this is not one of several regions.
    pub fn region_figures(&self) -> Option<crate::region::RegionFigures> {
        let regions = self.regions.as_ref()?;
        Some(regions.figures(self.clock.now()))
    }

    /// One line on the region's global store (`/healthcheck`'s detail); `None` when this is not
    /// one of several regions.
    pub fn region_health(&self) -> Option<String> {
        let regions = self.regions.as_ref()?;
        Some(regions.health_line(self.clock.now()))
    }

    /// Whether the counter store reports itself healthy.
    pub fn store_healthy(&self) -> bool {
        self.store.healthy()
    }

    /// Reclaims idle counters of the local fallback limiter.
    pub fn sweep_fallback(&self, now: crate::clock::Nanos) {
        self.fallback.retain_active(now);
    }

    /// The metrics this limiter records into.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The rules currently in force.
    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.load_full()
    }

    /// Checks one call. Its figures are recorded once it is answered or refused (`record.rs`).
    pub async fn check(&self, request: &Request) -> Result<Decision, LimitError> {
        let started = Instant::now();
        if let Err(invalid) = request.validate() {
            self.record_refused();
            return Err(invalid.into());
        }
        let rules = self.rules.load_full();
        if rules.awaiting {
            self.record_refused();
            return Err(LimitError::NoRules);
        }
        // Read before planning: a calendar limit's window is placed at this instant too.
        let now = self.clock.now();
        let regions = self.regions.as_deref();
        let plan = plan::Plan::build(&rules, request, &self.options, regions, now);
        let mut call = record::Call::default();
        let result = self.answer(request, &plan, now, &mut call).await;
        self.record(request, &plan, &call, &result, started);
        result
    }

    /// Records a call the transport could not map into a [`Request`] (a malformed message), as
    /// [`Limiter::check`] records one it finds invalid: envoyproxy/ratelimit's service error.
    pub fn record_malformed(&self) {
        self.record_refused();
    }

    /// The answer to a planned call: one store call (or none), the rules' `failure_mode` if
    /// the store fails, then the composed decision; notes in `call` what its figures need.
    async fn answer(
        &self,
        request: &Request,
        plan: &plan::Plan<'_>,
        now: crate::clock::Nanos,
        call: &mut record::Call,
    ) -> Result<Decision, LimitError> {
        let outcomes: SmallVec<[ChargeOutcome; 2]> = if plan.charges().is_empty() {
            SmallVec::new()
        } else {
            let store_started = Instant::now();
            // A store that answers on the spot takes a one-charge call without a boxed future.
            let inline = match plan.charges() {
                [one] => self.store.apply_one_now(one, now),
                _ => None,
            };
            let applied = match inline {
                Some(outcome) => Ok(smallvec::smallvec![outcome]),
                None => self
                    .store
                    .apply(plan.charges(), now)
                    .await
                    .map(SmallVec::from_vec),
            };
            let elapsed = store_started.elapsed();
            match applied {
                Ok(outcomes) => {
                    call.store = StoreUse::Answered(elapsed);
                    outcomes
                }
                Err(e) => {
                    call.store = StoreUse::Failed(elapsed);
                    SmallVec::from_vec(self.degrade(plan, now, e, call)?)
                }
            }
        };
        let mut decision =
            compose::compose(request, plan, &outcomes, &self.options, &mut call.figures);
        decision.store = call.store;
        if let StoreUse::Failed(_) = call.store {
            let (name, value) = degraded::HEADER;
            decision
                .headers
                .push((name.into(), HeaderText::Static(value)));
        }
        Ok(decision)
    }

    /// Answers a call by its rules' `failure_mode` after the store failed with `error`.
    fn degrade(
        &self,
        plan: &plan::Plan<'_>,
        now: crate::clock::Nanos,
        error: StoreError,
        call: &mut record::Call,
    ) -> Result<Vec<ChargeOutcome>, LimitError> {
        let modes = plan.failure_modes();
        let outcomes = degraded::outcomes(
            plan.charges(),
            &modes,
            &self.fallback,
            self.options.expected_replicas,
            now,
        );
        self.degraded_log.record(&error);
        call.degraded = Some(record::Degraded {
            answered: outcomes.is_some(),
            modes,
        });
        outcomes.ok_or(LimitError::Store(error))
    }
}
