//! `sluice check`: load and validate rule files, print a summary or every error.

use clap::Args;

use super::RuleArgs;

/// Flags of `sluice check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Rule loading.
    #[command(flatten)]
    pub rules: RuleArgs,
}

/// Prints the summary (and any warnings) and returns true, or prints every error as
/// `file:line:col: message` and returns false.
pub fn run(args: &CheckArgs) -> bool {
    match sluice::rules::load(&args.rules.config, &args.rules.load_options()) {
        Ok(set) => {
            for warning in &set.warnings {
                eprintln!("warning: {warning}");
            }
            println!("ok: {}", set.summary());
            true
        }
        Err(errors) => {
            eprintln!("{errors}");
            false
        }
    }
}
