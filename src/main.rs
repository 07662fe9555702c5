//! The `sluice` binary: parse the command line (started as `ratelimit`, it is
//! envoyproxy/ratelimit's drop-in), set up logging, run, map errors to exit codes. The command
//! line and the `simulate` and `bench` tools are the binary's own modules; the server itself is
//! the library's ([`sluice::app`]).

mod bench;
mod cli;
mod logging;
mod simulate;

use std::io::Write;
use std::process::ExitCode;

use cli::Command;

// mimalloc instead of glibc's malloc: under load, with many live counters, glibc's allocator
// took about a sixth of the server's CPU (see docs/benchmarks-history.md, "Where the time goes").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let huge_pages_off = sluice::huge_pages::disable_unless_asked();
    let invocation = cli::parse(std::env::args_os());
    let outcome = match invocation.command {
        Command::Check(args) => return exit_code(cli::check::run(&args)),
        Command::Explain(args) => cli::explain::run(&args, &mut std::io::stdout()),
        Command::Counters(args) => cli::counters::run(&args, &mut std::io::stdout()),
        Command::Simulate(args) => simulate::run(&args, &mut std::io::stdout()).map_err(Into::into),
        Command::Bench(args) => bench::run(&args, &mut std::io::stdout()).map_err(Into::into),
        Command::UpstreamEnv => {
            print!("{}", cli::compat::table());
            Ok(())
        }
        Command::Serve(args) => cli::prepare::prepare(*args, invocation.serve_matches.as_ref())
            .and_then(|prepared| {
                let _log_writer = logging::init(prepared.log_format, prepared.log_level.as_deref());
                if let Some(warning) = &prepared.warning {
                    tracing::warn!("{warning}");
                }
                tracing::debug!(huge_pages_off, "transparent huge pages");
                tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                    .map_err(anyhow::Error::from)
                    .and_then(|runtime| runtime.block_on(cli::serve::run(prepared.settings)))
            }),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // Not `eprintln!`: it panics when stderr is closed or a broken pipe.
            let _ = writeln!(std::io::stderr(), "error: {error:#}");
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
