//! The `gatehouse` binary: parse the command line, set up logging, run the subcommand.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;
use gatehouse::config::{Cli, Command, LogFormat};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Usage errors exit 1 (not clap's 2); help and version are not errors.
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
                _ => ExitCode::FAILURE,
            };
        }
    };
    // The bench reports on stdout and stderr itself; its servers log for themselves.
    let default_filter = if matches!(cli.command, Command::Bench(_)) { "warn" } else { "gatehouse=info,warn" };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into()))
        .with_writer(std::io::stderr);
    match &cli.command {
        Command::Serve(args) if args.log_format == LogFormat::Json => {
            logs.json().with_current_span(true).with_span_list(false).flatten_event(true).init();
        }
        _ => logs.with_ansi(std::io::stderr().is_terminal()).init(),
    }

    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gatehouse: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Serve(args) => runtime.block_on(serve(*args)),
        Command::Bench(args) => runtime.block_on(gatehouse::bench::run(args)),
        Command::BenchCeiling(args) => runtime.block_on(gatehouse::bench::serve_ceiling(args)),
        client => runtime.block_on(gatehouse::cli::run(client)),
    }
}

async fn serve(args: gatehouse::ServeArgs) -> ExitCode {
    // An open-file limit that cannot hold the connection cap is refused before anything else
    // happens (`run` checks again, for embedders).
    if let Err(e) = gatehouse::raise_open_file_limit(&args) {
        eprintln!("gatehouse: {e}");
        return ExitCode::FAILURE;
    }
    // Flags that would expose the server are refused next.
    let security = match gatehouse::auth::Security::load(&args) {
        Ok(security) => security,
        Err(e) => {
            eprintln!("gatehouse: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The database first: a second server on the same file is refused for that reason, not for
    // the port it would also share.
    let opened = match gatehouse::open_store(&args, &gatehouse::Hooks::default()).await {
        Ok(opened) => opened,
        Err(e) => {
            eprintln!("gatehouse: {e}");
            return ExitCode::FAILURE;
        }
    };
    let listener = match tokio::net::TcpListener::bind(args.bind).await {
        Ok(listener) => listener,
        Err(e) => {
            // Most often the port is taken (another server, or this one still running): say
            // how to pick another.
            eprintln!(
                "gatehouse: cannot listen on {}: {e}; choose another address with --bind or GATEHOUSE_BIND",
                args.bind
            );
            opened.close().await;
            return ExitCode::FAILURE;
        }
    };
    let served = match gatehouse::run(args, security, opened, listener, shutdown_signal()).await {
        Ok(running) => running.wait().await,
        Err(e) => Err(e),
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gatehouse: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves at SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGTERM; only SIGINT stops the server");
                let _ = interrupt.await;
                return;
            }
        };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
