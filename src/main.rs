//! The `sluice` binary: parse the command line, set up logging, run, map errors to exit codes.
//! The command line and the `simulate` and `bench` tools are the binary's own modules; the
//! server itself is the library's ([`sluice::app`]).

mod bench;
mod cli;
mod simulate;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use cli::{Cli, Command, LogFormat};
use tracing_subscriber::EnvFilter;

// mimalloc instead of glibc's malloc: under load, with many live counters, glibc's allocator
// took about a sixth of the server's CPU (see BENCHMARKS.md, "Where the time goes").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let outcome = match Cli::parse().command {
        Command::Check(args) => return exit_code(cli::check::run(&args)),
        Command::Explain(args) => cli::explain::run(&args, &mut std::io::stdout()),
        Command::Simulate(args) => simulate::run(&args, &mut std::io::stdout()).map_err(Into::into),
        Command::Bench(args) => bench::run(&args, &mut std::io::stdout()).map_err(Into::into),
        Command::Serve(args) => {
            init_logging(args.log_format, args.log_level.as_deref());
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|runtime| runtime.block_on(cli::serve::run(&args)))
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn exit_code(success: bool) -> ExitCode {
    if success {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn init_logging(format: LogFormat, level: Option<&str>) {
    let filter = match level {
        Some(level) => EnvFilter::new(level),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    // Colour only for a person at a terminal; log collectors get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
