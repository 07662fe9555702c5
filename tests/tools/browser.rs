//! `/ui` in a real headless Chromium (Debian's `chromium`, driven by npm's `playwright-core`
//! from `tests/browser/`): the page loads under its CSP without a single violation or script
//! error, shows the rules tree and the keys limited most, explains a request, and is
//! screenshot into `target/ui-screenshot.png` for a person to look at.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::process::{Sluice, poll, repo_path};
use common::{connect, one_descriptor};

const RULES: &str = r#"
domain: edge
descriptors:
  - key: generic_key
    value: per_api_key
    descriptors:
      - key: api_key
        rate_limit: { name: per_api_key, unit: minute, requests_per_unit: 5 }
      - key: api_key
        value: premium
        rate_limit: { name: premium, unit: minute, requests_per_unit: 600 }
  - key: remote_address
    rate_limit: { algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 50 }
  - key: login_user
    failure_mode: deny
    rate_limit: { algorithm: sliding_log, window: 15m, requests_per_unit: 5 }
  - key: internal
    value: health
"#;

/// Loads `/ui`, explains an exhausted key, sees the tree and the most-limited keys, with no
/// CSP violation; keeps a screenshot.
#[test]
#[ignore = "needs chromium and node (scripts/test installs them)"]
fn ui_works_in_headless_chromium() {
    let sluice = Sluice::start(RULES, &[]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut client = connect(sluice.grpc_addr).await;
        for (key, calls) in [("abc123", 9), ("xyz789", 7), ("premium", 3)] {
            for _ in 0..calls {
                let request =
                    one_descriptor("edge", &[("generic_key", "per_api_key"), ("api_key", key)]);
                client.should_rate_limit(request).await.expect("call");
            }
        }
    });
    // The page's rates need a second sampled; the script waits for them too.
    poll(Duration::from_secs(10), "a rate sample", || {
        let live = common::http1::get(sluice.http_addr, "/ui/api/live", &[]).body;
        live.contains("\"history\":[{").then_some(())
    });
    let screenshot = repo_path("target/ui-screenshot.png");
    let _ = std::fs::remove_file(&screenshot);
    let out = Command::new("node")
        .arg(repo_path("tests/browser/ui.mjs"))
        .arg(format!("http://{}", sluice.http_addr))
        .arg(&screenshot)
        .arg("edge")
        .arg("generic_key=per_api_key,api_key=abc123")
        .output()
        .expect("run node");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let png = std::fs::read(&screenshot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "a real screenshot: {} bytes",
        png.len()
    );
    println!("{text}");
}
