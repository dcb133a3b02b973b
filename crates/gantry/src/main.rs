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
    // The broker's own lines (each refused CONNECT writes two at info) stay at warn unless
    // RUST_LOG asks for them: Gantry logs one line per refusal itself. Colour only on a terminal.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx=warn,rmqtt=warn,rmqtt_net=warn".into()),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    match cli.command {
        Command::Serve(config) => {
            let app = gantry::Application::build(*config).await?;
            app.run_until(gantry::shutdown_signal()).await
        }
        Command::Device(config) => gantry::simulate::run(config).await,
        Command::Healthcheck(config) => gantry::healthcheck::run(config).await,
    }
}
