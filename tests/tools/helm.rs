//! The Helm chart, rendered by the real `helm template` and checked manifest by manifest.

use crate::common;

use std::collections::BTreeSet;
use std::process::Command;

use common::process::{check, repo_path, run, tool};
use common::yaml::{configmap_dir, documents};
use serde_json::{Value, json};

const CI_VALUES: &str = "helm/sluice/ci/redis-hpa-servicemonitor-values.yaml";

/// Values that turn every optional flag on (TLS, tracing, Redis with its CA, the admin
/// listener, the statsd sink, a region).
const ALL_FLAGS: [&str; 28] = [
    "--set",
    "store.type=redis",
    "--set",
    "store.redis.url=redis://redis:6379",
    "--set",
    "store.redis.caSecret=redis-ca",
    "--set",
    "tls.enabled=true",
    "--set",
    "tls.secretName=sluice-tls",
    "--set",
    "tls.clientAuth=true",
    "--set",
    "tracing.enabled=true",
    "--set",
    "tracing.endpoint=http://otel:4317",
    "--set",
    "admin.enabled=true",
    "--set",
    "admin.tokens.existingSecret=sluice-admin",
    "--set",
    "statsd.addr=$(HOST_IP):8125",
    "--set",
    "statsd.tags.env=prod",
    "--set",
    "region.name=eu",
    "--set",
    "region.globalRedis.url=rediss://global:6380",
];

/// The `ratelimit` personality on Redis (upstream's only store), as values of `helm template`.
const UPSTREAM_ENV_ON_REDIS: [&str; 6] = [
    "--set",
    "upstreamEnv.enabled=true",
    "--set",
    "store.type=redis",
    "--set",
    "store.redis.url=redis://redis:6379",
];

/// The rendered manifests of `helm template sluice helm/sluice <args>`, or helm's error.
fn render(args: &[&str]) -> Result<Vec<Value>, String> {
    let out = Command::new(tool("SLUICE_HELM", ".venv/bin/helm"))
        .args(["template", "sluice"])
        .arg(repo_path("helm/sluice"))
        .args(["--namespace", "sluice"])
        .args(args)
        .output()
        .expect("run helm");
    if out.status.success() {
        Ok(documents(&String::from_utf8_lossy(&out.stdout)))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

pub(crate) fn rendered(args: &[&str]) -> Vec<Value> {
    render(args).unwrap_or_else(|e| panic!("helm template {args:?} failed: {e}"))
}

fn kinds(manifests: &[Value]) -> BTreeSet<&str> {
    manifests
        .iter()
        .filter_map(|m| m["kind"].as_str())
        .collect()
}

fn find<'a>(manifests: &'a [Value], kind: &str) -> &'a Value {
    manifests
        .iter()
        .find(|m| m["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {:?}", kinds(manifests)))
}

/// The sluice container of the Deployment.
fn container(manifests: &[Value]) -> &Value {
    &find(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

fn args(manifests: &[Value]) -> Vec<&str> {
    container(manifests)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string arg"))
        .collect()
}

/// Each of `names` is an envoyproxy/ratelimit variable the personality honours (its row in
/// `sluice upstream-env` does not say "not honoured").
fn assert_honoured(names: &[&str]) {
    let table = run(["upstream-env"]).stdout;
    for name in names {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` ")))
            .unwrap_or_else(|| panic!("{name} is not an upstream variable"));
        assert!(!row.contains("not honoured"), "{row}");
    }
}

/// The `--flag` part of every argument after `serve`.
fn flags<'a>(args: &[&'a str]) -> Vec<&'a str> {
    assert_eq!(args.first(), Some(&"serve"), "{args:?}");
    args[1..]
        .iter()
        .map(|a| a.split('=').next().unwrap())
        .collect()
}

/// Defaults: one non-root, read-only-root replica with resources and anti-affinity; no extras.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn default_values_render_a_hardened_single_replica_deployment() {
    let manifests = rendered(&[]);
    assert_eq!(
        kinds(&manifests),
        BTreeSet::from([
            "ConfigMap",
            "Deployment",
            "Pod",
            "Service",
            "ServiceAccount"
        ])
    );
    let deployment = find(&manifests, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 1);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(pod["automountServiceAccountToken"], false);
    let security = &container(&manifests)["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    let resources = &container(&manifests)["resources"];
    assert!(resources["requests"]["cpu"].is_string() && resources["limits"]["memory"].is_string());
    let spread =
        &pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(
        spread["podAffinityTerm"]["topologyKey"],
        "kubernetes.io/hostname"
    );
    assert_eq!(
        spread["podAffinityTerm"]["labelSelector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
}

/// Startup, liveness and readiness all ask GET /healthcheck (healthy through a store outage,
/// 503 while draining, per DESIGN.md); ports grpc 8081, http 8080.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn probes_use_healthcheck() {
    let manifests = rendered(&[]);
    let c = container(&manifests);
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        assert_eq!(
            c[probe]["httpGet"],
            json!({ "path": "/healthcheck", "port": "http" }),
            "{probe}"
        );
    }
    assert!(c["startupProbe"]["failureThreshold"].as_u64().unwrap() >= 10);
    assert_eq!(
        c["ports"],
        json!([
            { "name": "grpc", "containerPort": 8081, "protocol": "TCP" },
            { "name": "http", "containerPort": 8080, "protocol": "TCP" }
        ])
    );
    assert!(args(&manifests).contains(&"--grpc-addr=0.0.0.0:8081"));
    assert!(args(&manifests).contains(&"--http-addr=0.0.0.0:8080"));
}

/// The Service exposes grpc 8081 and http 8080 and selects the Deployment's pods.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn service_exposes_grpc_8081_and_http_8080() {
    let manifests = rendered(&[]);
    let service = find(&manifests, "Service");
    let ports: Vec<(&str, u64, &str)> = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                p["port"].as_u64().unwrap(),
                p["targetPort"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(ports, [("grpc", 8081, "grpc"), ("http", 8080, "http")]);
    assert_eq!(service["metadata"]["name"], "sluice");
    let pod_labels = &find(&manifests, "Deployment")["spec"]["template"]["metadata"]["labels"];
    for (key, value) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&pod_labels[key], value, "selector {key}");
    }
}

/// The rules ConfigMap passes `sluice check` and is mounted whole (no subPath) as --config.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn rules_configmap_loads_and_is_mounted_as_a_directory() {
    let manifests = rendered(&[]);
    let configmap = find(&manifests, "ConfigMap");
    let dir = configmap_dir(configmap);
    check(dir.path()).stdout_ok();

    assert!(args(&manifests).contains(&"--config=/etc/sluice/rules"));
    let mount = container(&manifests)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/etc/sluice/rules")
        .expect("rules mount");
    assert!(mount.get("subPath").is_none(), "{mount}");
    let volumes = &find(&manifests, "Deployment")["spec"]["template"]["spec"]["volumes"];
    let volume = volumes
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("rules volume");
    assert_eq!(volume["configMap"]["name"], configmap["metadata"]["name"]);
}

/// Every flag the chart passes, by default or with its switches on, is in `sluice serve --help`.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn every_flag_the_chart_passes_exists_in_sluice() {
    let help = run(["serve", "--help"]).stdout;
    for values in [
        &[][..],
        &[
            "--set",
            "server.mergeDomains=true",
            "--set",
            "server.shadowMode=true",
            "--set",
            "store.memory.persistence.enabled=true",
        ][..],
        &ALL_FLAGS[..],
    ] {
        let manifests = rendered(values);
        let args = args(&manifests);
        for flag in flags(&args) {
            assert!(
                help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
                "{flag} is not a flag of sluice serve:\n{help}"
            );
        }
    }
}

/// Memory store: replicas > 1 or an HPA fail to render and say why; Redis allows them.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn memory_store_refuses_several_replicas_and_autoscaling() {
    let replicas = render(&["--set", "replicaCount=2"]).expect_err("2 replicas on memory");
    assert!(
        replicas.contains("store.type=memory") && replicas.contains("replicaCount=2"),
        "{replicas}"
    );
    assert!(
        replicas.contains("every replica would admit the full limit"),
        "{replicas}"
    );
    let hpa = render(&["--set", "autoscaling.enabled=true"]).expect_err("HPA on memory");
    assert!(
        hpa.contains("store.type=memory") && hpa.contains("autoscaling"),
        "{hpa}"
    );

    let redis = rendered(&[
        "--set",
        "store.type=redis",
        "--set",
        "store.redis.url=redis://redis:6379",
        "--set",
        "replicaCount=3",
    ]);
    assert_eq!(find(&redis, "Deployment")["spec"]["replicas"], 3);
}

/// Redis + HPA + ServiceMonitor values wire the Secret, HPA, PDB, monitor and NetworkPolicy.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn redis_hpa_servicemonitor_values_render_shared_store_objects() {
    let manifests = rendered(&["-f", repo_path(CI_VALUES).to_str().unwrap()]);
    assert_eq!(
        kinds(&manifests),
        BTreeSet::from([
            "ConfigMap",
            "Deployment",
            "HorizontalPodAutoscaler",
            "NetworkPolicy",
            "Pod",
            "PodDisruptionBudget",
            "PrometheusRule",
            "Secret",
            "Service",
            "ServiceAccount",
            "ServiceMonitor",
        ])
    );
    let deployment = find(&manifests, "Deployment");
    assert!(
        deployment["spec"].get("replicas").is_none(),
        "the HPA owns replicas"
    );
    assert!(args(&manifests).contains(&"--store=redis"));

    let env = &container(&manifests)["env"][0];
    assert_eq!(env["name"], "SLUICE_REDIS_URL");
    let secret = find(&manifests, "Secret");
    let key_ref = &env["valueFrom"]["secretKeyRef"];
    assert_eq!(key_ref["name"], secret["metadata"]["name"]);
    assert!(secret["data"][key_ref["key"].as_str().unwrap()].is_string());

    let hpa = find(&manifests, "HorizontalPodAutoscaler");
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["name"],
        deployment["metadata"]["name"]
    );
    assert_eq!(hpa["spec"]["minReplicas"], 2);
    let monitor = find(&manifests, "ServiceMonitor");
    assert_eq!(
        monitor["spec"]["endpoints"][0],
        json!({ "port": "http", "path": "/metrics", "interval": "15s" })
    );
    assert_eq!(
        find(&manifests, "PodDisruptionBudget")["spec"]["minAvailable"],
        1
    );
    let policy = find(&manifests, "NetworkPolicy");
    assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], "grpc");
    assert_eq!(policy["spec"]["ingress"][1]["ports"][0]["port"], "http");
    assert!(
        deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]
            .is_array()
    );
}

/// `existingConfigMap` replaces the chart's own rules ConfigMap.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn existing_configmap_replaces_the_chart_rules() {
    let manifests = rendered(&["--set", "existingConfigMap=my-rules"]);
    assert!(!kinds(&manifests).contains("ConfigMap"));
    let volumes = &find(&manifests, "Deployment")["spec"]["template"]["spec"]["volumes"];
    assert!(
        volumes
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["configMap"]["name"] == "my-rules"),
        "{volumes}"
    );
}

/// Memory persistence adds a claim, --data-dir (only then) and the Recreate strategy RWO needs.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn memory_persistence_adds_a_claim_and_recreate_strategy() {
    assert!(
        !flags(&args(&rendered(&[]))).contains(&"--data-dir"),
        "no --data-dir without persistence"
    );
    let manifests = rendered(&["--set", "store.memory.persistence.enabled=true"]);
    let claim = find(&manifests, "PersistentVolumeClaim");
    let deployment = find(&manifests, "Deployment");
    assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
    assert!(args(&manifests).contains(&"--data-dir=/var/lib/sluice/data"));
    let volumes = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    let data = volumes.iter().find(|v| v["name"] == "data").unwrap();
    assert_eq!(
        data["persistentVolumeClaim"]["claimName"],
        claim["metadata"]["name"]
    );
}

/// values.schema.json rejects unknown keys and values outside the allowed set.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn schema_rejects_unknown_keys_and_bad_values() {
    for bad in ["replicaCout=1", "store.type=etcd", "server.logFormat=xml"] {
        let error = render(&["--set", bad]).expect_err(bad);
        assert!(error.contains("schema"), "{bad}: {error}");
    }
}

/// The pod template's annotations.
fn pod_annotations(manifests: &[Value]) -> Value {
    find(manifests, "Deployment")["spec"]["template"]["metadata"]["annotations"].clone()
}

/// A new Redis URL (the Secret) or a new setting changes the pod template, so the pods roll;
/// new rules change only the ConfigMap (sluice reloads them in place).
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn a_secret_or_setting_change_rolls_the_pods_and_rules_do_not() {
    let redis = |url: &str, extra: &[&str]| {
        let mut args = vec!["--set", "store.type=redis", "--set"];
        let url = format!("store.redis.url={url}");
        args.push(&url);
        args.extend_from_slice(extra);
        rendered(&args)
    };
    let before = redis("redis://a:6379", &[]);
    let new_secret = redis("redis://b:6379", &[]);
    let (a, b) = (pod_annotations(&before), pod_annotations(&new_secret));
    assert_ne!(
        a["checksum/redis-secret"], b["checksum/redis-secret"],
        "a new URL rolls the pods"
    );
    assert_eq!(a["checksum/settings"], b["checksum/settings"]);
    let new_setting = redis("redis://a:6379", &["--set", "server.logLevel=debug"]);
    assert_ne!(
        a["checksum/settings"],
        pod_annotations(&new_setting)["checksum/settings"]
    );
    let new_rules = redis(
        "redis://a:6379",
        &[
            "--set-string",
            "rules.extra\\.yaml=domain: extra\ndescriptors: []\n",
        ],
    );
    assert_eq!(
        pod_annotations(&new_rules),
        a,
        "new rules do not roll the pods"
    );
    assert_ne!(
        find(&new_rules, "ConfigMap")["data"],
        find(&before, "ConfigMap")["data"]
    );
    let template = |m: &[Value]| find(m, "Deployment")["spec"]["template"].clone();
    assert_eq!(template(&new_rules), template(&before));
}

/// With Redis, `--expected-replicas` is replicaCount, or the autoscaler's maximum.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn expected_replicas_follow_the_replicas_or_the_autoscaler() {
    let base = [
        "--set",
        "store.type=redis",
        "--set",
        "store.redis.url=redis://r:6379",
    ];
    let fixed = rendered(&[&base[..], &["--set", "replicaCount=3"]].concat());
    assert!(
        args(&fixed).contains(&"--expected-replicas=3"),
        "{:?}",
        args(&fixed)
    );
    let scaled = rendered(
        &[
            &base[..],
            &[
                "--set",
                "autoscaling.enabled=true",
                "--set",
                "autoscaling.maxReplicas=7",
            ],
        ]
        .concat(),
    );
    assert!(
        args(&scaled).contains(&"--expected-replicas=7"),
        "{:?}",
        args(&scaled)
    );
    assert!(args(&scaled).contains(&"--redis-timeout=10ms"));
}

/// Shutdown drains: a preStop sleep, then --shutdown-delay, then --shutdown-grace, all inside
/// terminationGracePeriodSeconds; a grace period too short to cover them is refused.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn the_drain_fits_inside_the_termination_grace_period() {
    let manifests = rendered(&[]);
    let pod = &find(&manifests, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["terminationGracePeriodSeconds"], 30);
    assert_eq!(
        container(&manifests)["lifecycle"]["preStop"],
        json!({ "sleep": { "seconds": 5 } })
    );
    assert!(args(&manifests).contains(&"--shutdown-delay=5s"));
    assert!(args(&manifests).contains(&"--shutdown-grace=10s"));
    let short = render(&["--set", "terminationGracePeriodSeconds=12"]).expect_err("too short");
    assert!(
        short.contains("shorter than the drain") && short.contains("= 20"),
        "{short}"
    );
    let off = rendered(&["--set", "preStopSleepSeconds=0"]);
    assert!(container(&off).get("lifecycle").is_none());
}

/// `--max-counters` must fit the memory limit (bytes per counter from BENCHMARKS.md).
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn max_counters_must_fit_the_memory_limit() {
    assert!(args(&rendered(&[])).contains(&"--max-counters=500000"));
    let error = render(&["--set", "store.memory.maxCounters=2000000"]).expect_err("too many");
    assert!(
        error.contains("maxCounters=2000000 cannot fit resources.limits.memory=256Mi"),
        "{error}"
    );
    for limit in ["1Gi", "1100M", "1200000000"] {
        let fits = rendered(&[
            "--set",
            "store.memory.maxCounters=2000000",
            "--set",
            &format!("resources.limits.memory={limit}"),
        ]);
        assert!(args(&fits).contains(&"--max-counters=2000000"), "{limit}");
    }
    let redis = rendered(&[
        "--set",
        "store.type=redis",
        "--set",
        "store.redis.url=redis://r:6379",
        "--set",
        "store.memory.maxCounters=9000000",
    ]);
    assert!(
        !flags(&args(&redis)).contains(&"--max-counters"),
        "Redis holds the counters"
    );
}

/// TLS, tracing, the dashboard and the alerts: each value wires its flags, mounts and objects;
/// the dashboard and the rules are the files promtool and Prometheus test.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn tls_tracing_dashboard_and_alert_values() {
    let manifests = rendered(
        &[
            &ALL_FLAGS[..],
            &[
                "--set",
                "tracing.endpoint=http://otel:4317",
                "--set",
                "metrics.dashboard.enabled=true",
            ],
            &[
                "--set",
                "metrics.prometheusRule.enabled=true",
                "--set",
                "metrics.prometheusRule.labels.release=kps",
            ],
        ]
        .concat(),
    );
    let args = args(&manifests);
    for flag in [
        "--tls-cert=/etc/sluice/tls/tls.crt",
        "--tls-client-ca=/etc/sluice/tls/ca.crt",
        "--otlp-endpoint=http://otel:4317",
        "--otlp-protocol=grpc",
        "--service-namespace=sluice",
        "--redis-ca=/etc/sluice/redis-ca/ca.crt",
    ] {
        assert!(args.contains(&flag), "{flag}: {args:?}");
    }
    let env = container(&manifests)["env"].as_array().unwrap().clone();
    let instance = env
        .iter()
        .find(|e| e["name"] == "SLUICE_SERVICE_INSTANCE_ID")
        .unwrap();
    assert_eq!(
        instance["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    let dashboard = manifests
        .iter()
        .find(|m| m["kind"] == "ConfigMap" && m["metadata"]["labels"]["grafana_dashboard"] == "1")
        .expect("dashboard ConfigMap");
    let shipped: Value =
        serde_json::from_str(dashboard["data"]["sluice.json"].as_str().unwrap()).unwrap();
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_path("helm/sluice/files/dashboard.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(shipped, file);
    let rule = find(&manifests, "PrometheusRule");
    assert_eq!(rule["metadata"]["labels"]["release"], "kps");
    let alerts = common::yaml::documents(
        &std::fs::read_to_string(repo_path("helm/sluice/files/alerts.yaml")).unwrap(),
    );
    assert_eq!(rule["spec"]["groups"], alerts[0]["groups"]);
    let http = rendered(&[&ALL_FLAGS[..], &["--set", "tracing.protocol=http"]].concat());
    assert!(self::args(&http).contains(&"--otlp-protocol=http"));
    let unknown = render(&[&ALL_FLAGS[..], &["--set", "tracing.protocol=udp"]].concat());
    assert!(unknown.is_err(), "the schema refuses an unknown protocol");
    let missing = render(&["--set", "tracing.enabled=true"]).expect_err("no endpoint");
    assert!(missing.contains("tracing.endpoint"), "{missing}");
}

/// Replicas spread over zones by default; `topologySpreadConstraints` replaces that.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn replicas_spread_over_zones() {
    let manifests = rendered(&[]);
    let spec = &find(&manifests, "Deployment")["spec"];
    let spread = &spec["template"]["spec"]["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(spread["whenUnsatisfiable"], "ScheduleAnyway");
    assert_eq!(
        spread["labelSelector"]["matchLabels"],
        spec["selector"]["matchLabels"]
    );
}

/// `helm test` asks /healthcheck and posts a check-only call, which a real sluice serving the
/// chart's own rules answers without charging anything.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn helm_test_pod_makes_a_check_only_call() {
    let manifests = rendered(&[]);
    let pod = manifests
        .iter()
        .find(|m| m["kind"] == "Pod")
        .expect("test pod");
    assert_eq!(pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    let script = pod["spec"]["containers"][0]["args"][0].as_str().unwrap();
    assert!(
        script.contains("$BASE/healthcheck") && script.contains("$BASE/json"),
        "{script}"
    );
    let env = pod["spec"]["containers"][0]["env"].as_array().unwrap();
    let call = env.iter().find(|e| e["name"] == "CALL").unwrap()["value"]
        .as_str()
        .unwrap()
        .to_owned();
    let rules = configmap_dir(find(&manifests, "ConfigMap"));
    let sluice = common::process::Serve::new().config(rules.path()).start();
    let answer = || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(common::http(sluice.http_addr, "POST", "/json", &call))
    };
    let (status, first) = answer();
    assert_eq!(status, 200, "{first}");
    assert!(first.contains("overallCode"), "{first}");
    let (_, second) = answer();
    assert_eq!(first, second, "a check-only call charges nothing");
    let metrics = common::http1::get(sluice.http_addr, "/metrics", &[]).body;
    assert_eq!(
        common::sample(
            &metrics,
            "ratelimit_service_rate_limit_within_limit{domain=\"edge\",key1=\"remote_address\",key2=\"\"}"
        ),
        0.0
    );
}

/// The chart's README says nothing is still being built: the store, persistence and the rest
/// are here.
#[test]
fn chart_readme_has_no_stale_text() {
    let readme = std::fs::read_to_string(repo_path("helm/sluice/README.md")).unwrap();
    for stale in [
        "still being built",
        "being built",
        "needs a newer sluice",
        "Flags that need a newer",
    ] {
        assert!(!readme.contains(stale), "stale: {stale}");
    }
}

/// `upstreamEnv.enabled`: the container runs `/bin/ratelimit` with envoyproxy/ratelimit's variables
/// instead of flags, the rules ConfigMap in envoyproxy/ratelimit's layout; every variable the chart
/// sets is one the personality honours (the real binary warns about none of them); it needs Redis;
/// `helm lint --strict` passes.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn upstream_env_mode_sets_upstream_variables_instead_of_flags() {
    let values = [
        "--set",
        "upstreamEnv.enabled=true",
        "--set",
        "store.type=redis",
        "--set",
        "store.redis.url=redis://redis:6379",
    ];
    let manifests = rendered(&values);
    let container = container(&manifests);
    assert_eq!(container["command"], json!(["/bin/ratelimit"]));
    assert!(container["args"].is_null(), "no flags: {container:#}");
    let env: Vec<&str> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for name in [
        "RUNTIME_ROOT",
        "RUNTIME_SUBDIRECTORY",
        "REDIS_URL",
        "HOST",
        "LOG_LEVEL",
    ] {
        assert!(env.contains(&name), "{name}: {env:?}");
    }
    assert!(env.iter().all(|n| !n.starts_with("SLUICE_")), "{env:?}");
    assert_honoured(&env);
    let mounts = container["volumeMounts"].as_array().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["name"] == "rules" && m["mountPath"] == "/data/ratelimit/config"),
        "{mounts:?}"
    );
    let memory = render(&["--set", "upstreamEnv.enabled=true"]).expect_err("memory store");
    assert!(memory.contains("store.type=redis"), "{memory}");
    let lint = Command::new(tool("SLUICE_HELM", ".venv/bin/helm"))
        .args(["lint", "--strict"])
        .arg(repo_path("helm/sluice"))
        .args(values)
        .output()
        .expect("run helm lint");
    assert!(
        lint.status.success(),
        "{}",
        String::from_utf8_lossy(&lint.stdout)
    );
}

/// With `xds.enabled` the rules come from the control plane: no rules ConfigMap or mount, the
/// xDS flags (all real `sluice serve` flags) and the client TLS Secret mounted where they point;
/// `xds.enabled` without a server fails to render and says why.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn xds_values_take_rules_from_a_control_plane() {
    let manifests = rendered(&[
        "--set",
        "xds.enabled=true",
        "--set",
        "xds.server=envoy-gateway.envoy-gateway-system:18001",
        "--set",
        "xds.nodeId=envoy-ratelimit",
        "--set",
        "xds.forceStart=true",
        "--set",
        "xds.tls.enabled=true",
        "--set",
        "xds.tls.secretName=envoy-rate-limit",
    ]);
    assert!(!kinds(&manifests).contains("ConfigMap"));
    let args = args(&manifests);
    for expected in [
        "--xds-server=envoy-gateway.envoy-gateway-system:18001",
        "--xds-node-id=envoy-ratelimit",
        "--xds-force-start",
        "--xds-tls",
        "--xds-tls-cert=/etc/sluice/xds-tls/tls.crt",
        "--xds-tls-key=/etc/sluice/xds-tls/tls.key",
        "--xds-tls-ca=/etc/sluice/xds-tls/ca.crt",
    ] {
        assert!(args.contains(&expected), "{expected} missing from {args:?}");
    }
    assert!(!args.iter().any(|a| a.starts_with("--config")), "{args:?}");
    let help = run(["serve", "--help"]).stdout;
    for flag in flags(&args) {
        assert!(help.contains(flag), "{flag} is not a flag of sluice serve");
    }
    let pod = &find(&manifests, "Deployment")["spec"]["template"]["spec"];
    let volumes = pod["volumes"].as_array().unwrap();
    assert!(volumes.iter().all(|v| v["name"] != "rules"), "{volumes:?}");
    let tls = volumes
        .iter()
        .find(|v| v["name"] == "xds-tls")
        .expect("TLS volume");
    assert_eq!(tls["secret"]["secretName"], "envoy-rate-limit");
    let mounts = container(&manifests)["volumeMounts"].as_array().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["mountPath"] == "/etc/sluice/xds-tls")
    );
    let error = render(&["--set", "xds.enabled=true"]).expect_err("no server");
    assert!(error.contains("xds.enabled needs xds.server"), "{error}");
    let error = render(&["--set", "xds.server=https://cp:1"]).expect_err("not host:port");
    assert!(error.contains("schema"), "{error}");
}

/// `upstreamEnv` with `xds`: the container gets Envoy Gateway's variables for rules over xDS
/// (CONFIG_TYPE=GRPC_XDS_SOTW and the CONFIG_GRPC_XDS_* it needs), each one the personality
/// honours, and the TLS Secret mounted where they point.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn upstream_env_with_xds_sets_the_xds_variables() {
    let manifests = rendered(&[
        "--set",
        "upstreamEnv.enabled=true",
        "--set",
        "store.type=redis",
        "--set",
        "store.redis.url=redis://redis:6379",
        "--set",
        "xds.enabled=true",
        "--set",
        "xds.server=envoy-gateway:18001",
        "--set",
        "xds.nodeId=envoy-ratelimit",
        "--set",
        "xds.nodeMetadata.zone=eu",
        "--set",
        "xds.tls.enabled=true",
        "--set",
        "xds.tls.secretName=envoy-rate-limit",
    ]);
    let container = container(&manifests);
    let env: Vec<(&str, &str)> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                e["value"].as_str().unwrap_or(""),
            )
        })
        .collect();
    for expected in [
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=eu"),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        (
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            "/etc/sluice/xds-tls/tls.crt",
        ),
        (
            "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
            "/etc/sluice/xds-tls/tls.key",
        ),
        (
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
            "/etc/sluice/xds-tls/ca.crt",
        ),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "false"),
    ] {
        assert!(env.contains(&expected), "{expected:?} missing from {env:?}");
    }
    let names: Vec<&str> = env.iter().map(|(name, _)| *name).collect();
    assert_honoured(&names);
    let mounts = container["volumeMounts"].as_array().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["mountPath"] == "/etc/sluice/xds-tls")
    );
}

/// The admin listener: off by default (no flag, no port, no Secret); on, it listens on the
/// pod's loopback with the token file mounted from a Secret as a directory (so an update
/// reaches sluice, which reloads it) that only the pod's group reads; `tokens.value` makes the
/// Secret, `tokens.existingSecret` uses one; no tokens at all fails to render and says why. The
/// `ratelimit` personality gets the same through sluice's own variables.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn admin_listener_values() {
    let off = rendered(&[]);
    assert!(!args(&off).iter().any(|a| a.starts_with("--admin")));
    assert!(
        !off.iter()
            .any(|m| m["metadata"]["name"] == "sluice-admin-tokens")
    );

    let tokens = "alice:0123456789abcdef0123456789abcdef0123456789abcdef";
    let on = rendered(&[
        "--set",
        "admin.enabled=true",
        "--set",
        &format!("admin.tokens.value={tokens}"),
    ]);
    let on_args = args(&on);
    assert!(
        on_args.contains(&"--admin-addr=127.0.0.1:9901"),
        "{on_args:?}"
    );
    assert!(
        on_args.contains(&"--admin-token-file=/etc/sluice/admin/tokens"),
        "{on_args:?}"
    );
    let secret = on
        .iter()
        .find(|m| m["kind"] == "Secret" && m["metadata"]["name"] == "sluice-admin-tokens")
        .expect("the token Secret");
    let encoded = secret["data"]["tokens"].as_str().expect("tokens key");
    let decoded = Command::new("base64")
        .args(["-d"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(encoded.as_bytes())?;
            child.wait_with_output()
        })
        .expect("base64 -d");
    assert_eq!(String::from_utf8_lossy(&decoded.stdout), tokens);
    let pod = &find(&on, "Deployment")["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "admin-tokens")
        .expect("admin-tokens volume");
    assert_eq!(volume["secret"]["secretName"], "sluice-admin-tokens");
    assert_eq!(volume["secret"]["defaultMode"], 0o440);
    let mount = container(&on)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "admin-tokens")
        .expect("admin-tokens mount");
    assert_eq!(
        (&mount["mountPath"], mount.get("subPath")),
        (&json!("/etc/sluice/admin"), None)
    );
    let ports = container(&on)["ports"].as_array().unwrap().clone();
    assert!(
        ports
            .iter()
            .any(|p| p["name"] == "admin" && p["containerPort"] == 9901)
    );
    let service = find(&on, "Service");
    assert!(
        !service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["port"] == 9901),
        "no Service exposes the admin listener"
    );

    let existing = rendered(&[
        "--set",
        "admin.enabled=true",
        "--set",
        "admin.tokens.existingSecret=ops-tokens",
        "--set",
        "admin.tokens.existingSecretKey=file",
        "--set",
        "admin.bindAddress=0.0.0.0",
    ]);
    assert!(
        !existing
            .iter()
            .any(|m| m["metadata"]["name"] == "sluice-admin-tokens"),
        "no Secret made for an existing one"
    );
    let existing_args = args(&existing);
    assert!(existing_args.contains(&"--admin-addr=0.0.0.0:9901"));
    assert!(existing_args.contains(&"--admin-token-file=/etc/sluice/admin/file"));

    let error = render(&["--set", "admin.enabled=true"]).unwrap_err();
    assert!(
        error.contains("admin.enabled needs its bearer tokens"),
        "{error}"
    );

    let personality = rendered(&[
        "--set",
        "upstreamEnv.enabled=true",
        "--set",
        "store.type=redis",
        "--set",
        "store.redis.url=redis://redis:6379",
        "--set",
        "admin.enabled=true",
        "--set",
        "admin.tokens.existingSecret=ops-tokens",
    ]);
    let env = container(&personality)["env"].as_array().unwrap().clone();
    let value = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
            .unwrap_or_else(|| panic!("no {name} in {env:?}"))
    };
    assert_eq!(value("SLUICE_ADMIN_ADDR"), "127.0.0.1:9901");
    assert_eq!(value("SLUICE_ADMIN_TOKEN_FILE"), "/etc/sluice/admin/tokens");
}

/// `statsd.addr` wires the sink's flags (or, in the personality, sluice's own SLUICE_STATSD_*
/// variables beside USE_STATSD=false), with the node's address in HOST_IP for `$(HOST_IP)`; off
/// by default; a protocol the sink does not speak is refused by the schema.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn statsd_values_wire_the_sink() {
    assert!(
        !args(&rendered(&[]))
            .iter()
            .any(|a| a.starts_with("--statsd"))
    );
    let values = [
        "--set",
        "statsd.addr=$(HOST_IP):8125",
        "--set",
        "statsd.format=dogstatsd",
        "--set",
        "statsd.tags.env=prod",
        "--set",
        "statsd.tags.app=edge",
    ];
    let on = rendered(&values);
    let on_args = args(&on);
    for flag in [
        "--statsd-addr=$(HOST_IP):8125",
        "--statsd-protocol=udp",
        "--statsd-format=dogstatsd",
        "--statsd-flush-interval=10s",
        "--statsd-tags=app=edge,env=prod",
    ] {
        assert!(on_args.contains(&flag), "{flag}: {on_args:?}");
    }
    let host_ip = |manifests: &[Value]| {
        container(manifests)["env"]
            .as_array()
            .expect("env")
            .iter()
            .any(|e| {
                e["name"] == "HOST_IP" && e["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
            })
    };
    assert!(host_ip(&on));
    let upstream = rendered(&[&values[..], &UPSTREAM_ENV_ON_REDIS[..]].concat());
    let env = container(&upstream)["env"].as_array().unwrap();
    let value = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    assert_eq!(value("USE_STATSD"), Some(json!("false")));
    assert_eq!(value("SLUICE_STATSD_ADDR"), Some(json!("$(HOST_IP):8125")));
    assert_eq!(
        value("SLUICE_STATSD_TAGS"),
        Some(json!("app=edge,env=prod"))
    );
    let names: Vec<&str> = env.iter().map(|e| e["name"].as_str().unwrap()).collect();
    let position = |name: &str| names.iter().position(|n| *n == name).unwrap();
    assert!(
        position("HOST_IP") < position("SLUICE_STATSD_ADDR"),
        "HOST_IP is defined before it is used: {names:?}"
    );
    let bad = render(&["--set", "statsd.protocol=sctp"]).expect_err("schema");
    assert!(bad.contains("statsd"), "{bad}");
}

/// A connection cap's value (`server.<value>`, default `default`) is the flag `--<flag>` by
/// default and sluice's own variable `var` under the `ratelimit` personality (upstream has
/// none); the schema refuses 0.
fn caps_connections(value: &str, flag: &str, var: &str, default: u32) {
    assert!(args(&rendered(&[])).contains(&format!("--{flag}={default}").as_str()));
    let set = format!("server.{value}=20000");
    let raised = ["--set", set.as_str()];
    assert!(args(&rendered(&raised)).contains(&format!("--{flag}=20000").as_str()));
    let upstream = rendered(&[&raised[..], &UPSTREAM_ENV_ON_REDIS[..]].concat());
    let env = container(&upstream)["env"].as_array().expect("env");
    assert!(
        env.iter()
            .any(|e| e["name"] == var && e["value"] == "20000"),
        "{env:?}"
    );
    let zero = format!("server.{value}=0");
    let bad = render(&["--set", &zero]).expect_err("schema");
    assert!(bad.contains(value), "{bad}");
}

/// `server.grpcMaxConnections` caps the gRPC connections.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn grpc_max_connections_value_caps_connections() {
    caps_connections(
        "grpcMaxConnections",
        "grpc-max-connections",
        "SLUICE_GRPC_MAX_CONNECTIONS",
        4096,
    );
}

/// `server.httpMaxConnections` caps the HTTP listener's connections.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn http_max_connections_value_caps_connections() {
    caps_connections(
        "httpMaxConnections",
        "http-max-connections",
        "SLUICE_HTTP_MAX_CONNECTIONS",
        256,
    );
}

/// The Service's DNS names are host names a browser may reach `/ui` by, with those of
/// `server.httpAllowedHosts`; under the personality through sluice's own variable, once names
/// are given (the personality otherwise sees upstream's variables alone).
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn the_services_names_are_allowed_hosts() {
    let hosts = |rendered: &[Value]| {
        args(rendered)
            .iter()
            .find_map(|a| a.strip_prefix("--http-allowed-hosts="))
            .map(str::to_owned)
    };
    let default = hosts(&rendered(&[])).expect("--http-allowed-hosts");
    assert!(
        default.starts_with("sluice,sluice.sluice,sluice.sluice.svc,")
            && default.ends_with(".svc.cluster.local"),
        "{default}"
    );
    let extra = rendered(&["--set", "server.httpAllowedHosts={rl.example.com,*.corp}"]);
    assert!(hosts(&extra).unwrap().ends_with(",rl.example.com,*.corp"));
    let upstream = rendered(
        &[
            &UPSTREAM_ENV_ON_REDIS[..],
            &["--set", "server.httpAllowedHosts={rl.example.com}"],
        ]
        .concat(),
    );
    let env = container(&upstream)["env"].as_array().expect("env");
    assert!(
        env.iter().any(|e| e["name"] == "SLUICE_HTTP_ALLOWED_HOSTS"
            && e["value"].as_str().is_some_and(|v| v.contains(".svc"))),
        "{env:?}"
    );
}

/// The three regions' example values render one region each: `--region`, the global store's URL
/// from its Secret, and rules with a `scope: global` limit that sluice loads with a global store
/// (and refuses without one); a region name without a global store, or the reverse, fails.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn three_region_examples_render_one_region_each() {
    for region in ["eu", "us", "ap"] {
        let values = format!("examples/regions/{region}.yaml");
        let common = repo_path("examples/regions/values-common.yaml");
        let own = repo_path(&values);
        let manifests = rendered(&["-f", common.to_str().unwrap(), "-f", own.to_str().unwrap()]);
        let args = args(&manifests);
        assert!(
            args.contains(&format!("--region={region}").as_str()),
            "{args:?}"
        );
        let env = container(&manifests)["env"].as_array().expect("env");
        let global = env
            .iter()
            .find(|e| e["name"] == "SLUICE_GLOBAL_REDIS_URL")
            .expect("the global store's URL");
        assert_eq!(
            global["valueFrom"]["secretKeyRef"]["name"],
            "sluice-global-redis"
        );
        let dir = configmap_dir(find(&manifests, "ConfigMap"));
        let config = dir.path().to_str().unwrap();
        run([
            "check",
            "--config",
            config,
            "--global-redis-url",
            "rediss://g:6380",
        ])
        .stdout_ok();
        assert_eq!(
            check(dir.path()).code(),
            Some(1),
            "refused without a global store"
        );
    }
    let no_store = render(&["--set", "region.name=eu"]).unwrap_err();
    assert!(
        no_store.contains("region.name needs region.globalRedis"),
        "{no_store}"
    );
    let no_name = render(&["--set", "region.globalRedis.url=redis://g:6379"]).unwrap_err();
    assert!(
        no_name.contains("region.globalRedis needs region.name"),
        "{no_name}"
    );
}
