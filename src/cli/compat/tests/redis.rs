//! The Redis variables: URL forms, credentials, TLS, tuning, and how the personality counts.

use std::time::Duration;

use super::personality;
use crate::cli::AlgorithmArg;
use crate::cli::redis::KeyLayoutArg;

/// REDIS_URL's forms become `--redis-url`, as 11b's table says: single over tcp as written,
/// single over a unix socket as its (absolute) path, cluster seeds, Sentinel's
/// `<master>,<sentinel>,…` reordered; REDIS_TYPE is case-insensitive; credentials in REDIS_URL
/// stay there (REDIS_AUTH, which beats them, goes to the password flags).
#[test]
fn redis_urls() {
    let url = |env: &[(&str, &str)]| personality(&[], env).unwrap().0.redis.redis_url.unwrap();
    let tcp = ("REDIS_SOCKET_TYPE", "tcp");
    assert_eq!(url(&[tcp, ("REDIS_URL", "r:6379")]), "r:6379");
    assert_eq!(
        url(&[tcp, ("REDIS_URL", "redis://u:p@r:6379/2")]),
        "redis://u:p@r:6379/2"
    );
    assert_eq!(
        url(&[
            ("REDIS_SOCKET_TYPE", "unix"),
            ("REDIS_URL", "/run/redis.sock")
        ]),
        "/run/redis.sock"
    );
    let relative = url(&[("REDIS_URL", "redis.sock")]);
    assert!(
        relative.starts_with('/') && relative.ends_with("/redis.sock"),
        "{relative}"
    );
    assert_eq!(
        url(&[tcp, ("REDIS_URL", "a:1,b:2"), ("REDIS_TYPE", "Cluster")]),
        "redis+cluster://a:1,b:2"
    );
    assert_eq!(
        url(&[
            ("REDIS_URL", "mymaster,s1:26379,s2:26379"),
            ("REDIS_TYPE", "SENTINEL")
        ]),
        "redis+sentinel://s1:26379,s2:26379/mymaster"
    );
    for short in ["mymaster", "mymaster,", ",s1:26379", "m,s1:1,,s2:2"] {
        let env = [("REDIS_URL", short), ("REDIS_TYPE", "sentinel")];
        let error = personality(&[], &env).unwrap_err();
        assert_eq!(error.name, "REDIS_URL", "{short}");
        assert!(error.to_string().contains("at least two items"), "{error}");
    }
}

/// REDIS_AUTH and REDIS_SENTINEL_AUTH split at the first `:` into user and password (no `:`, or
/// an empty user: the password alone); an explicit password flag wins and names the variable.
#[test]
fn redis_credentials() {
    let env = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis://u:p@r:6379"),
        ("REDIS_AUTH", "app:pa:ss"),
        ("REDIS_SENTINEL_AUTH", "sentinel-pw"),
    ];
    let (args, outcome) = personality(&[], &env).unwrap();
    let redis = &args.redis;
    assert_eq!(redis.redis_url.as_deref(), Some("redis://u:p@r:6379"));
    assert_eq!(
        (
            redis.redis_username.as_deref(),
            redis.redis_password.as_deref()
        ),
        (Some("app"), Some("pa:ss"))
    );
    assert_eq!(redis.redis_sentinel_username, None);
    assert_eq!(
        redis.redis_sentinel_password.as_deref(),
        Some("sentinel-pw")
    );
    assert_eq!(outcome.warning, None);
    let env = [("REDIS_AUTH", ":pw"), ("REDIS_SENTINEL_AUTH", "s:spw")];
    let (args, _) = personality(&[], &env).unwrap();
    assert_eq!(
        (
            args.redis.redis_username,
            args.redis.redis_password.as_deref()
        ),
        (None, Some("pw"))
    );
    assert_eq!(args.redis.redis_sentinel_username.as_deref(), Some("s"));
    let (args, outcome) = personality(&["--redis-password", "flag"], &env).unwrap();
    assert_eq!(args.redis.redis_password.as_deref(), Some("flag"));
    assert_eq!(args.redis.redis_username, None);
    let warning = outcome.warning.unwrap();
    assert!(
        warning.contains("REDIS_AUTH (overridden by --redis-password)"),
        "{warning}"
    );
}

/// REDIS_TLS turns TLS on for any URL form and brings its files; without it the files are
/// named in the warning (sluice refuses TLS files without TLS; envoyproxy/ratelimit ignores them).
#[test]
fn redis_tls() {
    let files = [
        ("REDIS_TLS_CACERT", "/certs/ca.crt"),
        ("REDIS_TLS_CLIENT_CERT", "/certs/tls.crt"),
        ("REDIS_TLS_CLIENT_KEY", "/certs/tls.key"),
        ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "1"),
    ];
    let mut env = vec![
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", "m,s:26379"),
        ("REDIS_TLS", "true"),
    ];
    env.extend(files);
    let (args, outcome) = personality(&[], &env).unwrap();
    let redis = &args.redis;
    assert!(redis.redis_tls && redis.redis_tls_skip_hostname_verification);
    assert_eq!(redis.redis_ca, Some("/certs/ca.crt".into()));
    assert_eq!(redis.redis_client_cert, Some("/certs/tls.crt".into()));
    assert_eq!(redis.redis_client_key, Some("/certs/tls.key".into()));
    assert_eq!(outcome.warning, None);

    env[2] = ("REDIS_TLS", "false");
    let (args, outcome) = personality(&[], &env).unwrap();
    assert!(!args.redis.redis_tls && args.redis.redis_ca.is_none());
    assert!(args.redis.redis_client_cert.is_none());
    let warning = outcome.warning.unwrap();
    for (name, _) in files {
        let note = format!("{name} (no effect without REDIS_TLS=true");
        assert!(warning.contains(&note), "{warning}");
    }
    let error = personality(&[], &[("REDIS_TLS", "true")]).unwrap_err();
    assert_eq!(error.name, "REDIS_TLS");
    assert!(error.to_string().contains("unix socket"), "{error}");
}

/// The pool size, connect timeout, expiry jitter and local cache size reach their flags; the
/// personality counts envoyproxy/ratelimit's fixed windows in envoyproxy/ratelimit's keys unless
/// told otherwise.
#[test]
fn redis_tuning_and_counting() {
    let env = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_POOL_SIZE", "0x10"),
        ("REDIS_TIMEOUT", "1m30s"),
        ("EXPIRATION_JITTER_MAX_SECONDS", "0"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "1048576"),
    ];
    let (args, outcome) = personality(&[], &env).unwrap();
    assert_eq!(args.redis.redis_connections, 16);
    assert_eq!(args.redis.redis_connect_timeout.0, Duration::from_secs(90));
    assert_eq!(args.redis.redis_expiration_jitter.0, Duration::ZERO);
    assert_eq!(
        args.redis.local_cache_size,
        sluice::store::redis::local_cache_entries(1_048_576)
    );
    assert_eq!(outcome.warning, None);
    let tiny = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "1"),
    ];
    assert_eq!(
        personality(&[], &tiny).unwrap().0.redis.local_cache_size,
        sluice::store::redis::local_cache_entries(512 * 1024),
        "upstream's smallest cache"
    );
    let argv = [
        "--default-algorithm",
        "sliding_window",
        "--redis-key-layout",
        "sluice",
        "--redis-connections",
        "3",
    ];
    let (args, outcome) = personality(&argv, &env).unwrap();
    assert!(matches!(
        args.rules.default_algorithm,
        AlgorithmArg::SlidingWindow
    ));
    assert!(matches!(args.redis.redis_key_layout, KeyLayoutArg::Sluice));
    assert_eq!(args.redis.redis_connections, 3);
    let warning = outcome.warning.unwrap();
    assert!(
        warning.contains("REDIS_POOL_SIZE (overridden by --redis-connections)"),
        "{warning}"
    );
}
