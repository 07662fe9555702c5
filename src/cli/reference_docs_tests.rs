//! The book's reference pages name every `sluice serve` flag and every envoyproxy/ratelimit
//! variable the `ratelimit` personality reads, so a new flag or variable cannot go undocumented.

use clap::CommandFactory;

use super::Cli;
use super::compat;

/// The pages that document `sluice serve`'s flags (the xDS flags have their table with the
/// rest of rules over xDS).
const FLAG_PAGES: &[&str] = &[
    include_str!("../../docs/cli.md"),
    include_str!("../../docs/envoy.md"),
];

/// The page that documents every envoyproxy/ratelimit variable and how it maps.
const MIGRATION_PAGE: &str = include_str!("../../docs/migrating.md");

/// Whether `word` appears in `text` as a whole name: not as the start of a longer flag or
/// variable (`--redis-tls` must not be found only inside `--redis-tls-skip-...`).
fn names(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let next = text[at + word.len()..].chars().next();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

#[test]
fn every_serve_flag_is_in_the_reference_pages() {
    let cli = Cli::command();
    let serve = cli
        .find_subcommand("serve")
        .expect("`sluice serve` is a subcommand");
    let missing: Vec<String> = serve
        .get_arguments()
        .filter_map(|arg| arg.get_long())
        .filter(|long| !matches!(*long, "help" | "version"))
        .map(|long| format!("--{long}"))
        .filter(|flag| !FLAG_PAGES.iter().any(|page| names(page, flag)))
        .collect();
    assert!(
        missing.is_empty(),
        "flags of `sluice serve` missing from docs/cli.md and docs/envoy.md: {missing:?}"
    );
}

#[test]
fn every_personality_variable_is_on_the_migration_page() {
    let missing: Vec<&str> = compat::all_vars()
        .map(|var| var.name)
        .filter(|name| {
            // A trailing `*` declares every variable with that prefix: the page names the
            // family as declared (`REDIS_PERSECOND_*`).
            match name.strip_suffix('*') {
                Some(_) => !MIGRATION_PAGE.contains(name),
                None => !names(MIGRATION_PAGE, name),
            }
        })
        .collect();
    assert!(
        missing.is_empty(),
        "envoyproxy/ratelimit variables missing from docs/migrating.md: {missing:?}"
    );
}

#[test]
fn a_name_is_found_only_whole() {
    assert!(names("`--redis-tls` and more", "--redis-tls"));
    assert!(!names(
        "`--redis-tls-skip-hostname-verification`",
        "--redis-tls"
    ));
    assert!(!names("REDIS_TLS_CACERT", "REDIS_TLS"));
}
