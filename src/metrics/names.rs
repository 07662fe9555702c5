//! Every metric name and label value: envoyproxy/ratelimit's Prometheus names (so existing
//! dashboards keep working), then sluice's own.

/// Per-rule hits (envoyproxy/ratelimit `ratelimit.service.rate_limit.<domain>.<key>.total_hits`).
pub const RULE_TOTAL_HITS: &str = "ratelimit_service_rate_limit_total_hits";
/// Hits over the limit.
pub const RULE_OVER_LIMIT: &str = "ratelimit_service_rate_limit_over_limit";
/// Hits that landed between the near-limit threshold and the limit.
pub const RULE_NEAR_LIMIT: &str = "ratelimit_service_rate_limit_near_limit";
/// Hits of calls answered OK.
pub const RULE_WITHIN_LIMIT: &str = "ratelimit_service_rate_limit_within_limit";
/// Over-limit hits let through by a shadow-mode rule.
pub const RULE_SHADOW_MODE: &str = "ratelimit_service_rate_limit_shadow_mode";
/// Calls whose OVER_LIMIT answer global shadow mode turned into OK (envoyproxy/ratelimit
/// `ratelimit.service.global_shadow_mode`).
pub const GLOBAL_SHADOW_MODE: &str = "ratelimit_service_global_shadow_mode";
/// Rule sets loaded.
pub const CONFIG_LOAD_SUCCESS: &str = "ratelimit_service_config_load_success";
/// Rule sets that failed to load (the previous rules kept serving).
pub const CONFIG_LOAD_ERROR: &str = "ratelimit_service_config_load_error";
/// Calls that failed, by `err_type` (`service_error` for bad input, `redis_error` for the store).
pub const SHOULD_RATE_LIMIT_ERROR: &str = "ratelimit_service_should_rate_limit_error";
/// gRPC calls by method.
pub const TOTAL_REQUESTS: &str = "ratelimit_service_total_requests";
/// gRPC call latency by method, seconds.
pub const RESPONSE_TIME: &str = "ratelimit_service_response_time_seconds";

/// Decision latency (limiter: match, store, assemble), seconds, sub-millisecond buckets.
pub const DECISION_SECONDS: &str = "sluice_decision_duration_seconds";
/// Counter store latency by backend, seconds.
pub const STORE_SECONDS: &str = "sluice_store_duration_seconds";
/// Counter store failures by backend.
pub const STORE_ERRORS: &str = "sluice_store_errors_total";
/// Decisions taken without the store (a rule's `failure_mode`), by domain, rule and mode.
pub const DEGRADED_DECISIONS: &str = "sluice_degraded_decisions_total";
/// Calls answered from the local over-limit cache without a store round trip, by backend.
pub const LOCAL_CACHE_HITS: &str = "sluice_local_cache_hits_total";
/// Over-limit counters remembered in the local cache, by backend.
pub const LOCAL_CACHE_ENTRIES: &str = "sluice_local_cache_entries";
/// Calls answered from hits leased from the shared store (rules with `lease:`), by backend.
pub const LEASE_ANSWERED: &str = "sluice_lease_answered_total";
/// Counters this process holds a lease on, by backend.
pub const LEASED_COUNTERS: &str = "sluice_leased_counters";
/// 1 while the store's circuit breaker is open (calls skip the store), by backend.
pub const CIRCUIT_OPEN: &str = "sluice_store_circuit_open";
/// Counters held, by backend.
pub const ACTIVE_COUNTERS: &str = "sluice_active_counters";
/// The most counters the store may hold (`--max-counters`), by backend: dashboards and alerts
/// compare `sluice_active_counters` with it.
pub const MAX_COUNTERS: &str = "sluice_max_counters";
/// Calls refused because they would have created a counter past `--max-counters`.
pub const COUNTERS_REFUSED: &str = "sluice_counters_refused_total";
/// Journal flushes (one per `--persist-interval`).
pub const PERSIST_FLUSHES: &str = "sluice_persist_flushes_total";
/// Counter records written to the journal.
pub const PERSIST_RECORDS: &str = "sluice_persist_records_total";
/// Bytes written to the journal.
pub const PERSIST_BYTES: &str = "sluice_persist_bytes_total";
/// Failed journal or snapshot writes (counting goes on in memory).
pub const PERSIST_ERRORS: &str = "sluice_persist_errors_total";
/// Snapshots written by compaction.
pub const PERSIST_SNAPSHOTS: &str = "sluice_persist_snapshots_total";
/// 1 while the data directory misses changes because writes fail (a full disk); the
/// embedded store retries a snapshot every second until one is written.
pub const PERSIST_FAILING: &str = "sluice_persist_failing";
/// Files of `--data-dir` set aside as `*.bad`: a damaged fingerprint key with the data files
/// it named (their counts are lost), files that are not this sluice's.
pub const PERSIST_SET_ASIDE: &str = "sluice_persist_set_aside_files_total";
/// gRPC connections open.
pub const GRPC_CONNECTIONS: &str = "sluice_grpc_connections";
/// gRPC connections closed at once because `--grpc-max-connections` were open.
pub const GRPC_CONNECTIONS_REFUSED: &str = "sluice_grpc_connections_refused_total";
/// HTTP connections open on the HTTP listener (`--http-addr`).
pub const HTTP_CONNECTIONS: &str = "sluice_http_connections";
/// HTTP connections asked to close, or cut, to keep the open ones within
/// `--http-max-connections`.
pub const HTTP_CONNECTIONS_EVICTED: &str = "sluice_http_connections_evicted_total";
/// Counters restored from `--data-dir` at start.
pub const PERSIST_RESTORED: &str = "sluice_persist_restored_counters";
/// Rule set generation (1 = the rules loaded at start; +1 per successful reload).
pub const RULES_GENERATION: &str = "sluice_rules_generation";
/// Unix time of the last successful rule load, seconds.
pub const RULES_LAST_SUCCESS: &str = "sluice_rules_last_success_timestamp_seconds";
/// Per-rule series folded into the overflow series because the cap was reached.
pub const SERIES_FOLDED: &str = "sluice_metric_series_folded_total";
/// Descriptors looked up in a domain that is not loaded.
pub const DOMAIN_NOT_FOUND: &str = "sluice_domain_not_found_total";

/// Requests per window of each configured limit (one series per limit of every limited node).
pub const RULE_LIMIT: &str = "sluice_rule_limit";
/// The window of each configured limit, seconds.
pub const RULE_WINDOW_SECONDS: &str = "sluice_rule_window_seconds";
/// Labels of the configured limits: `domain`, `key1`, `key2` join the per-rule hit series;
/// `key` is the node's full key, `limit` its position among the node's limits.
pub const CONFIGURED_LIMIT_LABELS: [&str; 6] =
    ["domain", "key", "key1", "key2", "limit", "algorithm"];

/// Labels of the per-rule series.
pub const RULE_LABELS: [&str; 3] = ["domain", "key1", "key2"];
/// `key1` of the series that collects keys past the cap.
pub const OVERFLOW_KEY: &str = "_overflow_";
/// The gRPC method label of `ShouldRateLimit`.
pub const SHOULD_RATE_LIMIT: &str = "ShouldRateLimit";
/// `err_type` of malformed calls.
pub const SERVICE_ERROR: &str = "service_error";
/// `err_type` of store failures (envoyproxy/ratelimit's name).
pub const STORE_ERROR: &str = "redis_error";

/// 1 while the xDS stream to the control plane is open, else 0.
pub const XDS_CONNECTED: &str = "sluice_xds_connected";
/// 1 for the `version` of the rules last accepted over xDS (one series; an info metric).
pub const XDS_ACCEPTED_VERSION: &str = "sluice_xds_accepted_version_info";
/// xDS responses accepted (ACKed).
pub const XDS_ACKS: &str = "sluice_xds_acks_total";
/// xDS responses rejected (NACKed), re-sends of an already rejected one included.
pub const XDS_NACKS: &str = "sluice_xds_nacks_total";
/// xDS streams re-opened after the previous one ended or failed to open.
pub const XDS_RECONNECTS: &str = "sluice_xds_reconnects_total";

/// RLQS streams open now, from their opening (bound to a domain or not yet).
pub const RLQS_STREAMS: &str = "sluice_rlqs_streams";
/// Of the open RLQS streams, those that have not sent their first report yet.
pub const RLQS_STREAMS_UNBOUND: &str = "sluice_rlqs_streams_unbound";
/// RLQS buckets the book tracks now (over every stream and domain).
pub const RLQS_BUCKETS: &str = "sluice_rlqs_buckets";
/// Bucket actions sent to Envoys (`action`: token_bucket, allow_all, deny_all, abandon).
pub const RLQS_ASSIGNMENTS: &str = "sluice_rlqs_assignments_total";
/// Requests Envoys reported, by rule (`outcome`: allowed, denied, and shadow_refused for the
/// refusals a `shadow_mode` rule would have made).
pub const RLQS_REPORTED: &str = "sluice_rlqs_reported_total";

/// This region's portion (0..=1) of each `scope: global` limit (of its busiest counter or
/// bucket), by `domain`, `key` (the rule's full key) and `limit` (its position on the rule).
pub const REGION_PORTION: &str = "sluice_region_portion";
/// The floor (0..=1) this region may enforce on every unit of a global limit, by `region`.
pub const REGION_FLOOR: &str = "sluice_region_floor";
/// The regions sharing the global store at the last claim (this one included), by `region`.
pub const REGION_MEMBERS: &str = "sluice_region_members";
/// 1 while the last claim reached the global store, else 0, by `region`.
pub const REGION_GLOBAL_STORE_REACHABLE: &str = "sluice_region_global_store_reachable";
/// Claim rounds in the global store, by `outcome` (`answered`, `failed`).
pub const REGION_CLAIMS: &str = "sluice_region_claims_total";
/// Time one claim round in the global store took, seconds (answered or not).
pub const REGION_CLAIM_SECONDS: &str = "sluice_region_claim_duration_seconds";

/// Counter resets made through the admin listener (`DELETE /counters`), by domain.
pub const ADMIN_RESETS: &str = "sluice_admin_resets_total";
/// Requests to the admin listener, by outcome (one of [`ADMIN_OUTCOMES`]).
pub const ADMIN_REQUESTS: &str = "sluice_admin_requests_total";
/// The label of [`ADMIN_RESETS`].
pub const ADMIN_DOMAIN_LABEL: &str = "domain";
/// The label of [`ADMIN_REQUESTS`].
pub const ADMIN_OUTCOME_LABEL: &str = "outcome";
/// The outcomes of [`ADMIN_REQUESTS`]: answered, refused for want of a valid token, naming
/// nothing a rule limits, malformed, or failed in the store.
pub const ADMIN_OUTCOMES: [&str; 5] = [
    "ok",
    "unauthorized",
    "not_found",
    "bad_request",
    "store_error",
];
/// envoyproxy/ratelimit's stat names as its statsd sink sends them (gostats' dotted names):
/// the prefix of the per-rule stats, `<prefix>.<domain>.<key path>.<stat>`.
pub const STATSD_RULE_PREFIX: &str = "ratelimit.service.rate_limit";
/// The per-rule stats, in the order of [`crate::metrics::RuleCounters`]' fields.
pub const STATSD_RULE_STATS: [&str; 5] = [
    "total_hits",
    "over_limit",
    "near_limit",
    "within_limit",
    "shadow_mode",
];
/// Rule sets loaded (statsd name).
pub const STATSD_CONFIG_LOAD_SUCCESS: &str = "ratelimit.service.config_load_success";
/// Rule sets that failed to load (statsd name).
pub const STATSD_CONFIG_LOAD_ERROR: &str = "ratelimit.service.config_load_error";
/// Calls whose OVER_LIMIT answer global shadow mode turned into OK (statsd name).
pub const STATSD_GLOBAL_SHADOW_MODE: &str = "ratelimit.service.global_shadow_mode";
/// The prefix of the failed calls, `<prefix>.redis_error` and `<prefix>.service_error`.
pub const STATSD_CALL_ERRORS: &str = "ratelimit.service.call.should_rate_limit";
/// gRPC `ShouldRateLimit` calls (statsd name).
pub const STATSD_TOTAL_REQUESTS: &str = "ratelimit_server.ShouldRateLimit.total_requests";
/// gRPC `ShouldRateLimit` latency, a timer in milliseconds (statsd name).
pub const STATSD_RESPONSE_TIME: &str = "ratelimit_server.ShouldRateLimit.response_time";
/// Flushes to the statsd receiver that failed to send (the receiver is absent or refused).
pub const STATSD_SEND_ERRORS: &str = "sluice_statsd_send_errors_total";

/// The families made from envoyproxy/ratelimit's stats: left out of `/metrics` when a
/// statsd_exporter mapping (`--prometheus-mapper`) makes them from the statsd names instead.
pub const COMPAT_FAMILIES: [&str; 11] = [
    RULE_TOTAL_HITS,
    RULE_OVER_LIMIT,
    RULE_NEAR_LIMIT,
    RULE_WITHIN_LIMIT,
    RULE_SHADOW_MODE,
    GLOBAL_SHADOW_MODE,
    CONFIG_LOAD_SUCCESS,
    CONFIG_LOAD_ERROR,
    SHOULD_RATE_LIMIT_ERROR,
    TOTAL_REQUESTS,
    RESPONSE_TIME,
];
