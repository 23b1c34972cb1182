//! The `gatehouse` binary: parse the command line, set up logging, run the subcommand.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;
use gatehouse::config::{Cli, Command, LogFormat};
use gatehouse::log_writer;
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
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into());
    let ansi = std::io::stderr().is_terminal();
    // Dropping it writes out what is still queued.
    let mut log_flush = None;
    match &cli.command {
        Command::Serve(args) => {
            // A server writes a line per request: gathered and written in batches by a thread of
            // its own (see `log_writer`), so a request pays for formatting and a copy only.
            let (stderr, flush) = match log_writer::start(std::io::stderr(), log_writer::MAX_QUEUED) {
                Ok(started) => started,
                Err(e) => {
                    eprintln!("gatehouse: cannot start the log thread: {e}");
                    return ExitCode::FAILURE;
                }
            };
            log_flush = Some(flush);
            let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(stderr);
            match args.log_format {
                LogFormat::Json => logs.json().flatten_event(true).init(),
                LogFormat::Text => logs.with_ansi(ansi).init(),
            }
        }
        // The CLI's warnings go out in order with what it prints itself.
        _ => tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init(),
    }

    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gatehouse: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Serve(args) => {
            let served = runtime.block_on(serve(*args));
            drop(runtime);
            // Every log line out first, so that a failure is the last thing on stderr.
            drop(log_flush);
            served.map_or_else(
                |e| {
                    eprintln!("gatehouse: {e}");
                    ExitCode::FAILURE
                },
                |()| ExitCode::SUCCESS,
            )
        }
        Command::Bench(args) => runtime.block_on(gatehouse::bench::run(args)),
        Command::BenchCeiling(args) => runtime.block_on(gatehouse::bench::serve_ceiling(args)),
        client => runtime.block_on(gatehouse::cli::run(client)),
    }
}

async fn serve(mut args: gatehouse::ServeArgs) -> Result<(), String> {
    // The connection caps are fitted to the open-file limit before anything else happens, and an
    // explicit cap it cannot hold is refused (`run` checks again, for embedders; the caps in
    // force are in `args` now, so it warns no more).
    gatehouse::raise_open_file_limit(&mut args).map_err(|e| e.to_string())?;
    // Flags that would expose the server are refused next.
    let security = gatehouse::auth::Security::load(&args).map_err(|e| e.to_string())?;
    // The database first: a second server on the same file is refused for that reason, not for
    // the port it would also share.
    let opened = gatehouse::open_store(&args, &gatehouse::Hooks::default()).await.map_err(|e| e.to_string())?;
    let listener = match tokio::net::TcpListener::bind(args.bind).await {
        Ok(listener) => listener,
        Err(e) => {
            opened.close().await;
            // Most often the port is taken (another server, or this one still running): say
            // how to pick another.
            return Err(format!(
                "cannot listen on {}: {e}; choose another address with --bind or GATEHOUSE_BIND",
                args.bind
            ));
        }
    };
    let running =
        gatehouse::run(args, security, opened, listener, shutdown_signal()).await.map_err(|e| e.to_string())?;
    running.wait().await.map_err(|e| e.to_string())
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
