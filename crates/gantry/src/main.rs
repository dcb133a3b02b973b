//! The `gantry` command: `gantry serve` runs the whole service in one process.

use std::process::ExitCode;

use clap::CommandFactory;

use gantry::config::Command;

/// jemalloc instead of glibc's malloc: ingest makes many small, short-lived allocations across
/// threads, where glibc's consolidating of chunks cost much of the server's CPU.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// A failure is one line of text on stderr and exit status 1: what went wrong and, for an
/// address in use, the flag that moves it; no backtrace, whatever RUST_BACKTRACE says.
#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of stdout stopped (`gantry completions bash | head -3`): nothing is wrong.
        Err(e) if gantry::admin::closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gantry: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let cli = gantry::config::parse();
    // The client commands print for people and scripts: no log lines on their stdout.
    match cli.command {
        Command::Admin(args) => gantry::admin::main(*args).await,
        Command::Completions(args) => return Ok(gantry::admin::completions(&args, gantry::config::Cli::command())?),
        Command::Serve(_) | Command::Device(_) | Command::Healthcheck(_) => {}
    }
    let log_format = match &cli.command {
        Command::Serve(config) => config.log_format,
        _ => gantry::logging::LogFormat::Text,
    };
    gantry::logging::init(log_format);
    match cli.command {
        Command::Serve(config) => {
            let app = gantry::Application::build(*config).await?;
            app.run_until(gantry::shutdown_signal()).await
        }
        Command::Device(config) => gantry::simulate::run(config).await,
        Command::Healthcheck(config) => gantry::healthcheck::run(config).await,
        Command::Admin(_) | Command::Completions(_) => unreachable!("handled before logging starts"),
    }
}
