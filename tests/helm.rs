//! The Helm chart, rendered by the real `helm template` and checked manifest by manifest.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use common::process::{check, repo_path, run, tool};
use common::yaml::{configmap_dir, documents};
use serde_json::{Value, json};

const CI_VALUES: &str = "helm/sluice/ci/redis-hpa-servicemonitor-values.yaml";

/// Flags that belong to features still being built; the chart may pass them only when the
/// values select those features.
const LATER_FLAGS: [&str; 1] = ["--data-dir"];

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

fn rendered(args: &[&str]) -> Vec<Value> {
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
        BTreeSet::from(["ConfigMap", "Deployment", "Service", "ServiceAccount"])
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

/// Liveness is GET /healthcheck, readiness gRPC health `ratelimit`; ports grpc 8081, http 8080.
#[test]
#[ignore = "needs helm (scripts/test installs it)"]
fn probes_use_healthcheck_and_grpc_health() {
    let manifests = rendered(&[]);
    let c = container(&manifests);
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({ "path": "/healthcheck", "port": "http" })
    );
    assert_eq!(
        c["readinessProbe"]["grpc"],
        json!({ "port": 8081, "service": "ratelimit" })
    );
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
        ][..],
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
            "PodDisruptionBudget",
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
        !flags(&args(&rendered(&[])))
            .iter()
            .any(|f| LATER_FLAGS.contains(f)),
        "later features are not rendered by default"
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

/// `upstreamEnv.enabled`: the container runs `/bin/ratelimit` with envoyproxy/ratelimit's
/// variables instead of flags, the rules ConfigMap in upstream's layout; every variable the chart
/// sets is one the personality honours (the real binary warns about none of them); it needs
/// Redis; `helm lint --strict` passes.
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
    let table = run(["upstream-env"]).stdout;
    for name in &env {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` ")))
            .unwrap_or_else(|| panic!("{name} is not an upstream variable"));
        assert!(!row.contains("not honoured"), "{row}");
    }
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
