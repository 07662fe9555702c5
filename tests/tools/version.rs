//! One version everywhere: Cargo.toml (and Cargo.lock), the chart's `version` and `appVersion`,
//! the CHANGELOG's newest released section, the image's labels and `sluice --version` say the
//! same; the chart's default image and the examples name the registry path the release workflow
//! publishes to, at that version.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common;

use common::process::{BIN, repo_path, run};
use common::yaml::{document, documents};

/// What Cargo.toml says (cargo hands it to every target of the package).
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where releases push the image (the release workflow's `IMAGE` environment).
const REGISTRY_IMAGE: &str = "ghcr.io/sluice-rs/sluice";

/// The repository, as Cargo.toml and the image's source label name it.
const SOURCE: &str = "https://github.com/sluice-rs/sluice";

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo_path(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Cargo.lock records sluice at Cargo.toml's version (a bump without `cargo update -p sluice`
/// leaves it behind, and `--locked` builds then fail).
#[test]
fn cargo_lock_has_the_version() {
    let lock = read("Cargo.lock");
    let entry = format!("[[package]]\nname = \"sluice\"\nversion = \"{VERSION}\"\n");
    assert!(lock.contains(&entry), "Cargo.lock has no sluice {VERSION}");
}

/// The chart's `version` and `appVersion` (the image tag it deploys by default) are the crate's.
#[test]
fn the_chart_has_the_version() {
    let chart = document(&read("helm/sluice/Chart.yaml"));
    assert_eq!(chart["version"], VERSION, "Chart.yaml version");
    assert_eq!(chart["appVersion"], VERSION, "Chart.yaml appVersion");
}

/// The CHANGELOG starts with `[Unreleased]`, and the first released section below it is this
/// version, dated.
#[test]
fn the_changelog_releases_the_version() {
    let changelog = read("CHANGELOG.md");
    let sections: Vec<&str> = changelog
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .collect();
    assert_eq!(sections.first(), Some(&"[Unreleased]"), "{sections:?}");
    let released = sections.get(1).expect("a released section");
    let (version, date) = released
        .split_once(" - ")
        .unwrap_or_else(|| panic!("`## {released}` is not `## [x.y.z] - YYYY-MM-DD`"));
    assert_eq!(
        version,
        format!("[{VERSION}]"),
        "CHANGELOG's newest release"
    );
    let digits: Vec<&str> = date.split('-').collect();
    assert!(
        digits.len() == 3 && digits.iter().all(|d| d.chars().all(|c| c.is_ascii_digit())),
        "`{date}` is not a date"
    );
}

/// `sluice --version` prints the version, the commit it was built from ("unknown" outside a git
/// checkout) and the cargo profile (the directory cargo built the binary into).
#[test]
fn sluice_version_prints_version_commit_and_profile() {
    let out = run(["--version"]);
    let profile = Path::new(BIN)
        .parent()
        .and_then(Path::file_name)
        .and_then(|name| name.to_str())
        .expect("target/<profile>/sluice");
    let expected = format!(
        "sluice {VERSION} (commit {}, {profile})\n",
        checkout_commit()
    );
    assert_eq!(out.stdout_ok(), expected);
}

/// The short commit of the repository's own checkout, as build.rs finds it, or "unknown".
fn checkout_commit() -> String {
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(repo_path(""))
            .output()
            .ok()
            .filter(|out| out.status.success())?;
        Some(String::from_utf8(out.stdout).ok()?.trim().to_owned())
    };
    let root = repo_path("").canonicalize().expect("repository root");
    let own = git(&["rev-parse", "--show-toplevel"])
        .and_then(|top| Path::new(&top).canonicalize().ok())
        .is_some_and(|top| top == root);
    own.then(|| git(&["rev-parse", "--short", "HEAD"]))
        .flatten()
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The release workflow names the registry once, in its `IMAGE` environment: the path the chart
/// and the examples name.
#[test]
fn the_release_workflow_pushes_where_the_chart_pulls() {
    let workflow = document(&read(".github/workflows/release.yml"));
    assert_eq!(workflow["env"]["IMAGE"], REGISTRY_IMAGE);
    let text = read(".github/workflows/release.yml");
    let registry = REGISTRY_IMAGE.split('/').next().unwrap();
    let named: Vec<&str> = text
        .lines()
        .filter(|line| line.contains(registry))
        .collect();
    assert_eq!(named.len(), 1, "the registry is named once: {named:?}");
    assert_eq!(env!("CARGO_PKG_REPOSITORY"), SOURCE);
}

/// The image scripts/image builds is labelled with this version and the repository: the
/// context it stages (`--context-only`, around the test binary) holds the Containerfile with
/// its build arguments filled in.
#[test]
fn the_image_is_labelled_with_the_version() {
    let out = tempfile::tempdir().expect("temp dir");
    let staged = Command::new(repo_path("scripts/image"))
        .args(["--context-only", "--binary", BIN, "--out"])
        .arg(out.path())
        .output()
        .expect("run scripts/image");
    let stderr = String::from_utf8_lossy(&staged.stderr);
    assert!(staged.status.success(), "scripts/image: {stderr}");
    let containerfile = std::fs::read_to_string(out.path().join("context/Containerfile"))
        .expect("the staged Containerfile");
    let lines: Vec<&str> = containerfile.lines().map(str::trim).collect();
    assert!(
        lines.contains(&format!("ARG VERSION={VERSION}").as_str()),
        "{containerfile}"
    );
    for label in [
        "org.opencontainers.image.version=\"${VERSION}\"",
        &format!("org.opencontainers.image.source=\"{SOURCE}\""),
    ] {
        assert!(
            lines.iter().any(|line| line.contains(label)),
            "no {label} in {containerfile}"
        );
    }
}

/// The chart deploys the published image by default, its tag the chart's appVersion.
#[test]
fn the_chart_deploys_the_published_image() {
    let values = document(&read("helm/sluice/values.yaml"));
    assert_eq!(values["image"]["repository"], REGISTRY_IMAGE);
    assert_eq!(
        values["image"]["tag"], "",
        "an empty tag means the chart's appVersion"
    );
}

/// Every image the Envoy Gateway and Istio examples name is the published sluice image at this
/// version.
#[test]
fn the_examples_name_the_published_image() {
    let expected = format!("{REGISTRY_IMAGE}:{VERSION}");
    let mut files: Vec<String> = std::fs::read_dir(repo_path("examples/envoy-gateway"))
        .expect("examples/envoy-gateway")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            format!("examples/envoy-gateway/{name}")
        })
        .collect();
    files.push("examples/istio/ratelimit-service.yaml".to_owned());
    let mut named = Vec::new();
    for file in &files {
        for doc in documents(&read(file)) {
            images(&doc, &mut named);
        }
    }
    let with_files = || format!("{files:?}: {named:?}");
    assert!(named.len() >= 3, "too few images in {}", with_files());
    assert!(
        named.iter().all(|image| image == &expected),
        "{}",
        with_files()
    );
}

/// Every string under a key named `image`, anywhere in `value`.
fn images(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                match child.as_str() {
                    Some(image) if key == "image" => found.push(image.to_owned()),
                    _ => images(child, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| images(item, found)),
        _ => {}
    }
}
