//! The `gantry` command: `gantry serve` runs the whole service in one process.

use std::process::ExitCode;

use gantry::config::Command;

/// jemalloc instead of glibc's malloc: under ingest load glibc's malloc and free took a fifth of
/// the server's CPU (perf, 1,000 MQTT devices), most of it in consolidating and unlinking chunks.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// A failure is one line of text on stderr and exit status 1: what went wrong and, for an
/// address in use, the flag that moves it; no backtrace, whatever RUST_BACKTRACE says.
#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gantry: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let cli = gantry::config::parse();
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
    }
}
