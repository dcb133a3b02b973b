//! The `gantry` command: `gantry serve` runs the whole service in one process.

use clap::Parser;
use gantry::config::{Cli, Command};

/// jemalloc instead of glibc's malloc: under ingest load glibc's malloc and free took a fifth of
/// the server's CPU (perf, 1,000 MQTT devices), most of it in consolidating and unlinking chunks.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The client commands print for people and scripts: no log lines on their stdout.
    match cli.command {
        Command::Admin(args) => gantry::admin::main(*args).await,
        Command::Completions(args) => {
            gantry::admin::completions(&args);
            return Ok(());
        }
        Command::Serve(_) | Command::Device(_) => {}
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
        Command::Admin(_) | Command::Completions(_) => unreachable!("handled before logging starts"),
    }
}
