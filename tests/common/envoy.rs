//! A real Envoy child process (killed on drop), its bootstrap, and a sluice+Envoy+upstream stack.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::http1::{self, Response, Upstream};
use super::process::{Sluice, poll, tool};

/// The rule domain the generated Envoy sends.
pub const DOMAIN: &str = "e2e";

/// How long Envoy may take to start on a slow, busy machine.
const START_LIMIT: Duration = Duration::from_secs(60);

/// The Envoy binary: `SLUICE_ENVOY`, else `.venv/bin/envoy` (installed by `scripts/test`).
pub fn envoy_bin() -> PathBuf {
    tool("SLUICE_ENVOY", ".venv/bin/envoy")
}

/// Runs `envoy --mode validate -c <config>`; returns whether it passed and what it printed.
pub fn validate(config: &Path) -> (bool, String) {
    let out = Command::new(envoy_bin())
        .args([
            "--mode",
            "validate",
            "--disable-hot-restart",
            "-l",
            "error",
            "-c",
        ])
        .arg(config)
        .output()
        .expect("run envoy --mode validate");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// What the generated bootstrap varies.
#[derive(Debug, Clone, Copy)]
pub struct Bootstrap {
    /// sluice's gRPC address.
    pub sluice: SocketAddr,
    /// The upstream every route goes to.
    pub upstream: SocketAddr,
    /// The filter's `failure_mode_deny`.
    pub failure_mode_deny: bool,
}

impl Bootstrap {
    /// The bootstrap YAML: one listener on a free loopback port (admin too) with the
    /// `ratelimit` filter (domain [`DOMAIN`], x-ratelimit headers on) and three routes:
    /// - `/nested`: `(generic_key=nested, tenant=<x-tenant>, plan=<x-plan>)`;
    /// - `/ip`: `(remote_address=<peer address>)`;
    /// - anything else: `(generic_key=per_key, key=<x-key>)`.
    ///
    /// A descriptor whose header is missing is not sent (Envoy's rule).
    pub fn yaml(&self) -> String {
        self.render("")
    }

    /// As [`Bootstrap::yaml`], with TLS from Envoy to sluice as Envoy Gateway sets it up:
    /// trusting `ca`, presenting `cert` and `key`, ALPN h2, no SNI and no name check.
    pub fn yaml_with_tls(&self, ca: &Path, cert: &Path, key: &Path) -> String {
        self.render(&format!(
            r#"    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        common_tls_context:
          alpn_protocols: ["h2"]
          tls_certificates:
          - certificate_chain: {{ filename: "{cert}" }}
            private_key: {{ filename: "{key}" }}
          validation_context:
            trusted_ca: {{ filename: "{ca}" }}
"#,
            ca = ca.display(),
            cert = cert.display(),
            key = key.display(),
        ))
    }

    /// The bootstrap, with `sluice_transport` (YAML at the cluster's indentation, or empty)
    /// in sluice's cluster.
    fn render(&self, sluice_transport: &str) -> String {
        skeleton(&Skeleton {
            domain: DOMAIN,
            failure_mode_deny: self.failure_mode_deny,
            timeout: "2s",
            use_remote_address: true,
            routes: THREE_ROUTES,
            cluster: "sluice",
            address: &socket_address(self.sluice),
            transport: sluice_transport,
            upstream: self.upstream,
        })
    }
}

/// [`Bootstrap`]'s routes (see [`Bootstrap::yaml`]), indented as under `routes:`.
const THREE_ROUTES: &str = r#"              - match: { prefix: "/nested" }
                route:
                  cluster: upstream
                  rate_limits:
                  - actions:
                    - generic_key: { descriptor_value: nested }
                    - request_headers: { header_name: x-tenant, descriptor_key: tenant }
                    - request_headers: { header_name: x-plan, descriptor_key: plan }
              - match: { prefix: "/ip" }
                route:
                  cluster: upstream
                  rate_limits:
                  - actions:
                    - remote_address: {}
              - match: { prefix: "/" }
                route:
                  cluster: upstream
                  rate_limits:
                  - actions:
                    - generic_key: { descriptor_value: per_key }
                    - request_headers: { header_name: x-key, descriptor_key: key }
"#;

/// A bootstrap with one listener (admin too) on free loopback ports: `routes` (YAML route
/// entries, indented as under `routes:`) to the `upstream` cluster, behind the `ratelimit`
/// filter with domain `domain`, `failure_mode_deny`, a 10 s timeout and draft-03 headers; the
/// rate-limit service is the cluster `ratelimit` at the Envoy `address` (a `socket_address` or a
/// `pipe`).
pub fn with_routes(
    domain: &str,
    failure_mode_deny: bool,
    routes: &str,
    address: &str,
    upstream: SocketAddr,
) -> String {
    skeleton(&Skeleton {
        domain,
        failure_mode_deny,
        timeout: "10s",
        use_remote_address: false,
        routes,
        cluster: "ratelimit",
        address,
        transport: "",
        upstream,
    })
}

/// What differs between the tests' bootstraps; everything else is [`skeleton`]'s.
struct Skeleton<'a> {
    domain: &'a str,
    failure_mode_deny: bool,
    /// The filter's call timeout, e.g. `2s`.
    timeout: &'a str,
    use_remote_address: bool,
    /// Route entries, indented as under `routes:`.
    routes: &'a str,
    /// The rate-limit service's cluster name.
    cluster: &'a str,
    /// Its Envoy address: a `socket_address` or a `pipe`.
    address: &'a str,
    /// Its `transport_socket` (YAML at the cluster's indentation), or empty.
    transport: &'a str,
    upstream: SocketAddr,
}

/// One listener (admin too) on free loopback ports, the `ratelimit` filter with draft-03
/// headers in front of the router, the rate-limit service's cluster over HTTP/2 and the
/// `upstream` cluster.
fn skeleton(s: &Skeleton) -> String {
    let remote_address = if s.use_remote_address {
        "          use_remote_address: true\n"
    } else {
        ""
    };
    format!(
        r#"admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }}
static_resources:
  listeners:
  - name: ingress
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress_http
{remote_address}          route_config:
            virtual_hosts:
            - name: app
              domains: ["*"]
              routes:
{routes}          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: {domain}
              failure_mode_deny: {failure_mode_deny}
              timeout: {timeout}
              enable_x_ratelimit_headers: DRAFT_VERSION_03
              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc: {{ cluster_name: {cluster} }}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: {cluster}
    type: STATIC
    connect_timeout: 1s
{transport}    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: {cluster}
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ {address} }} }}
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ {upstream} }} }}
"#,
        routes = s.routes,
        domain = s.domain,
        failure_mode_deny = s.failure_mode_deny,
        timeout = s.timeout,
        cluster = s.cluster,
        transport = s.transport,
        address = s.address,
        upstream = socket_address(s.upstream),
    )
}

/// Envoy's `socket_address` of `address`.
pub fn socket_address(address: SocketAddr) -> String {
    format!(
        "socket_address: {{ address: {}, port_value: {} }}",
        address.ip(),
        address.port()
    )
}

impl Bootstrap {
    /// [`Bootstrap::yaml`] with Envoy's OpenTelemetry tracer on: every request sampled, spans
    /// sent over OTLP/gRPC to `collector` as service `envoy` (so the rate-limit call carries
    /// `traceparent`).
    pub fn yaml_traced(&self, collector: SocketAddr) -> String {
        let tracing = r#"          use_remote_address: true
          tracing:
            random_sampling: { value: 100 }
            provider:
              name: envoy.tracers.opentelemetry
              typed_config:
                "@type": type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig
                service_name: envoy
                grpc_service:
                  envoy_grpc: { cluster_name: otlp }
                  timeout: 1s
"#;
        let cluster = format!(
            r#"  - name: otlp
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: otlp
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: {}, port_value: {} }} }} }}
"#,
            collector.ip(),
            collector.port()
        );
        self.yaml()
            .replacen("          use_remote_address: true\n", tracing, 1)
            + &cluster
    }
}

impl Bootstrap {
    /// [`Bootstrap::yaml`] with Envoy's Zipkin tracer as Istio configures it (128-bit trace ids,
    /// no shared span context, JSON v2 to `/api/v2/spans`): every request sampled, spans sent to
    /// `collector` as service `envoy`, and the rate-limit call carrying `x-b3-*` headers.
    pub fn yaml_zipkin(&self, collector: SocketAddr) -> String {
        let tracing = r#"          use_remote_address: true
          tracing:
            random_sampling: { value: 100 }
            provider:
              name: envoy.tracers.zipkin
              typed_config:
                "@type": type.googleapis.com/envoy.config.trace.v3.ZipkinConfig
                collector_cluster: zipkin
                collector_endpoint: /api/v2/spans
                collector_endpoint_version: HTTP_JSON
                trace_id_128bit: true
                shared_span_context: false
"#;
        let cluster = format!(
            r#"  - name: zipkin
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: zipkin
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ {} }} }}
"#,
            socket_address(collector)
        );
        self.yaml()
            .replacen("          use_remote_address: true\n", tracing, 1)
            + &cluster
    }
}

/// A running Envoy.
pub struct Envoy {
    child: Option<Child>,
    /// The admin interface.
    pub admin: SocketAddr,
    /// The `ingress` listener.
    pub listener: SocketAddr,
    dir: tempfile::TempDir,
}

impl Envoy {
    /// Starts Envoy with `bootstrap` and waits until it is ready and its listener is bound.
    pub fn start(bootstrap: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("envoy.yaml");
        let admin_file = dir.path().join("admin-address");
        std::fs::write(&config, bootstrap).expect("write bootstrap");
        let log = std::fs::File::create(dir.path().join("envoy.log")).expect("log file");
        let child = Command::new(envoy_bin())
            .arg("-c")
            .arg(&config)
            .arg("--admin-address-path")
            .arg(&admin_file)
            .args([
                "--disable-hot-restart",
                "--concurrency",
                "1",
                "-l",
                "warning",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn envoy");
        let mut envoy = Self {
            child: Some(child),
            admin: "0.0.0.0:0".parse().unwrap(),
            listener: "0.0.0.0:0".parse().unwrap(),
            dir,
        };
        envoy.admin = poll(START_LIMIT, "envoy writes its admin address", || {
            envoy.assert_alive();
            std::fs::read_to_string(&admin_file)
                .ok()
                .and_then(|a| a.trim().parse().ok())
        });
        poll(START_LIMIT, "envoy is ready", || {
            envoy.assert_alive();
            let ready = http1::try_get(envoy.admin, "/ready", &[]).ok()?;
            (ready.status == 200).then_some(())
        });
        envoy.listener = poll(START_LIMIT, "envoy binds its listener", || {
            envoy.assert_alive();
            listener_addr(
                &http1::try_get(envoy.admin, "/listeners?format=json", &[])
                    .ok()?
                    .body,
            )
        });
        envoy
    }

    /// A counter from the admin `/stats`, 0 when absent.
    pub fn counter(&self, name: &str) -> u64 {
        let stats = http1::get(self.admin, &format!("/stats?filter=%5E{name}%24"), &[]).body;
        stats
            .lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(": ")?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    }

    /// What Envoy logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("envoy.log")).unwrap_or_default()
    }

    fn assert_alive(&mut self) {
        let child = self.child.as_mut().expect("envoy child");
        if let Ok(Some(status)) = child.try_wait() {
            panic!("envoy exited with {status}:\n{}", self.log());
        }
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `ingress` listener's bound address from admin `/listeners?format=json`.
fn listener_addr(json: &str) -> Option<SocketAddr> {
    let value: serde_json::Value = serde_json::from_str(json).ok()?;
    let listener = value["listener_statuses"]
        .as_array()?
        .iter()
        .find(|l| l["name"] == "ingress")?;
    let socket = &listener["local_address"]["socket_address"];
    let port = socket["port_value"].as_u64().filter(|&p| p != 0)?;
    format!("{}:{port}", socket["address"].as_str()?)
        .parse()
        .ok()
}

/// sluice, an upstream and Envoy in front of it, wired together; all stop when dropped (and
/// print their logs if the test failed: sluice's as [`Sluice`] does).
pub struct Stack {
    /// The rate-limit server.
    pub sluice: Sluice,
    /// The service behind Envoy.
    pub upstream: Upstream,
    /// The proxy.
    pub envoy: Envoy,
}

impl Stack {
    /// sluice with `rules` (domain [`DOMAIN`]) and `sluice_args`, Envoy with `failure_mode_deny`.
    pub fn start(rules: &str, sluice_args: &[&str], failure_mode_deny: bool) -> Self {
        let sluice = Sluice::start(rules, sluice_args);
        let upstream = Upstream::start();
        let envoy = Envoy::start(
            &Bootstrap {
                sluice: sluice.grpc_addr,
                upstream: upstream.addr,
                failure_mode_deny,
            }
            .yaml(),
        );
        Self {
            sluice,
            upstream,
            envoy,
        }
    }

    /// `GET path` through Envoy with `headers`.
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        http1::get(self.envoy.listener, path, headers)
    }

    /// The status codes of `n` requests through Envoy.
    pub fn statuses(&self, n: usize, path: &str, headers: &[(&str, &str)]) -> Vec<u16> {
        (0..n).map(|_| self.get(path, headers).status).collect()
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- envoy log\n{}", self.envoy.log());
        }
    }
}

/// A bootstrap with the `rate_limit_quota` filter (RLQS) asking sluice at `sluice` for domain
/// `domain`: a request with header `x-tenant` falls in the bucket `{tenant: <value>}` (DENY_ALL
/// until the first assignment, as examples/envoy/rlqs.yaml); every route goes to `upstream`.
pub fn rlqs_bootstrap(domain: &str, sluice: SocketAddr, upstream: SocketAddr) -> String {
    rlqs_bootstrap_with(domain, sluice, upstream, "")
}

/// As [`rlqs_bootstrap`], with `expired`, the bucket settings' `expired_assignment_behavior`
/// (a YAML flow mapping, e.g. `{ reuse_last_assignment: {} }`; empty: none).
pub fn rlqs_bootstrap_with(
    domain: &str,
    sluice: SocketAddr,
    upstream: SocketAddr,
    expired: &str,
) -> String {
    let expired = if expired.is_empty() {
        String::new()
    } else {
        format!("\n                          expired_assignment_behavior: {expired}")
    };
    format!(
        r#"admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }}
static_resources:
  listeners:
  - name: ingress
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress_http
          route_config:
            virtual_hosts:
            - name: app
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                route: {{ cluster: upstream }}
          http_filters:
          - name: envoy.filters.http.rate_limit_quota
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig
              domain: {domain}
              rlqs_server: {{ envoy_grpc: {{ cluster_name: sluice }} }}
              bucket_matchers:
                matcher_list:
                  matchers:
                  - predicate:
                      single_predicate:
                        input:
                          name: tenant-header
                          typed_config:
                            "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
                            header_name: x-tenant
                        value_match: {{ safe_regex: {{ google_re2: {{}}, regex: ".+" }} }}
                    on_match:
                      action:
                        name: per-tenant
                        typed_config:
                          "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings
                          bucket_id_builder:
                            bucket_id_builder:
                              tenant:
                                custom_value:
                                  name: tenant
                                  typed_config:
                                    "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
                                    header_name: x-tenant
                          reporting_interval: 5s
                          no_assignment_behavior:
                            fallback_rate_limit: {{ blanket_rule: DENY_ALL }}{expired}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: sluice
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: sluice
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ {sluice} }} }}
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ {upstream} }} }}
"#,
        sluice = socket_address(sluice),
        upstream = socket_address(upstream),
    )
}
