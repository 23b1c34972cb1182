//! What the blocking command-line askers (`gatehouse ask`, `approve`, `form`) share: stop
//! signals are watched from the start, the gate is opened, announced and waited for, and a stop
//! signal withdraws it before the process exits with 128 + the signal's number.

use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

use super::asking::{self, Asked, Ending};
use super::client::Api;
use crate::config::GateIds;

/// How long a signal that arrives while the gate is being opened waits for the open to finish:
/// the request may have reached the server, and a gate nobody waits for must be withdrawn.
const OPEN_GRACE: Duration = Duration::from_secs(5);
/// How soon after a stop signal the same signal again is taken for an echo of it, not for a
/// person insisting: GNU `timeout` signals the command and then its whole process group, so a
/// `timeout 5 gatehouse ask …` gets its SIGTERM twice, and a terminal's Ctrl-C reaches every
/// process of the foreground group.
const ECHO: Duration = Duration::from_millis(250);

/// The ids of the gate: those given, fresh ones for the rest.
#[derive(Debug, Clone)]
pub struct Ids {
    pub session: String,
    pub loop_id: String,
    pub tool: String,
}

impl Ids {
    pub fn of(given: &GateIds) -> Self {
        Self {
            session: or_fresh(given.session.as_deref()),
            loop_id: or_fresh(given.loop_id.as_deref()),
            tool: or_fresh(given.tool_execution_id.as_deref()),
        }
    }

    /// Where the gate opens: in the session, owned by the loop.
    pub fn owner(&self) -> Owner<'_> {
        Owner { session: &self.session, loop_id: Some(&self.loop_id) }
    }
}

/// The id given, or a fresh one.
pub fn or_fresh(given: Option<&str>) -> String {
    given.map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned)
}

/// Where a gate opens: its session, and the loop that owns it (`None` for a host-owned gate,
/// which puts no command in any inbox).
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    pub session: &'a str,
    pub loop_id: Option<&'a str>,
}

/// Opens the gate `body` describes, calls `announce` with its id and view if it is open, and waits until
/// it leaves `open` or `own_timeout` (counted from the open) passes. `Err` is the exit code of a
/// run that ends here: the open failed (said on stderr), or a stop signal came (the gate was
/// withdrawn, or why not was said).
pub async fn open_and_wait(
    signals: &mut StopSignals,
    api: &Api,
    who: &'static str,
    owner: Owner<'_>,
    body: &(impl Serialize + ?Sized),
    announce: impl FnOnce(&str, &Value),
    own_timeout: Option<Duration>,
) -> Result<(Asked, Ending), ExitCode> {
    let asked = |gate: &str| Asked {
        api: api.clone(),
        session: owner.session.to_owned(),
        loop_id: owner.loop_id.map(str::to_owned),
        gate: gate.to_owned(),
        who,
    };
    let opening = asking::open(api, owner.session, body);
    tokio::pin!(opening);
    let opened = tokio::select! {
        opened = &mut opening => opened,
        stop = signals.recv() => {
            // The open may already have reached the server: let it finish (briefly, and unless
            // a second signal insists) so the gate it made can be withdrawn.
            let finished = tokio::select! {
                finished = tokio::time::timeout(OPEN_GRACE, &mut opening) => finished.ok(),
                _ = signals.insisting(stop) => None,
            };
            match finished {
                Some(Ok(view)) => self::stop(&asked(gate_of(&view)), stop, signals).await,
                Some(Err(_)) => eprintln!("gatehouse {who}: {} before a gate opened", stop.name()),
                None => eprintln!(
                    "gatehouse {who}: {} while opening its gate; if it opened, it is still open (session {})",
                    stop.name(),
                    owner.session
                ),
            }
            return Err(ExitCode::from(stop.exit_code()));
        }
    };
    let view = match opened {
        Ok(view) => view,
        Err(message) => {
            eprintln!("gatehouse {who}: {message}");
            return Err(ExitCode::FAILURE);
        }
    };
    let asked = asked(gate_of(&view));
    if view["state"] == "open" {
        announce(&asked.gate, &view);
    }
    let deadline = own_timeout.map(|timeout| Instant::now() + timeout);
    let ending = tokio::select! {
        ending = asked.wait(deadline) => ending,
        stop = signals.recv() => {
            self::stop(&asked, stop, signals).await;
            return Err(ExitCode::from(stop.exit_code()));
        }
    };
    Ok((asked, ending))
}

/// What an asker says when the server stopped showing its gate, and exits 1 after.
pub fn refused(asked: &Asked, message: &str) -> ExitCode {
    let (who, gate) = (asked.who, &asked.gate);
    // A loop's gate is found again by its ids; a host's gate is new at each run.
    match asked.loop_id {
        Some(_) => eprintln!(
            "gatehouse {who}: stopped waiting: {message}. Gate {gate} may still be open; asking again with the \
             same --session, --loop and --id finds it"
        ),
        None => eprintln!("gatehouse {who}: stopped waiting: {message}. Gate {gate} may still be open"),
    }
    ExitCode::FAILURE
}

fn gate_of(view: &Value) -> &str {
    view["gate"]["id"].as_str().unwrap_or_default()
}

/// A stop signal came: withdraw the gate, and say so. A second signal (not an echo of the first)
/// gives up at once (the withdrawal may be retrying against a server that is down).
async fn stop(asked: &Asked, stop: Stop, signals: &mut StopSignals) {
    let withdrawn = tokio::select! {
        withdrawn = asked.withdraw() => withdrawn,
        again = signals.insisting(stop) => Err(format!("{} again", again.name())),
    };
    let who = asked.who;
    match withdrawn {
        Ok(()) => eprintln!("gatehouse {who}: {}; gate {} withdrawn", stop.name(), asked.gate),
        Err(message) => {
            eprintln!("gatehouse {who}: {}, and could not withdraw gate {}: {message}", stop.name(), asked.gate);
        }
    }
}

/// A signal that stops an asker, after it has withdrawn its gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Interrupt,
    Terminate,
    HangUp,
}

impl Stop {
    /// 128 + the signal's number, as a shell reports a process the signal killed.
    fn exit_code(self) -> u8 {
        match self {
            Self::Interrupt => 130,
            Self::Terminate => 143,
            Self::HangUp => 129,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Interrupt => "interrupted (SIGINT)",
            Self::Terminate => "terminated (SIGTERM)",
            Self::HangUp => "hung up (SIGHUP)",
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP, watched for the whole run: a signal stream remembers a delivery
/// until it is next polled, so one that arrives between two waits is not lost (nor, once
/// watched, does it kill the process with the gate still open).
pub struct StopSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hang_up: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Watches them from now on; on failure, says so as `who` and gives `Err`.
    pub fn watch(who: &str) -> Result<Self, ()> {
        Self::watched().map_err(|e| eprintln!("gatehouse {who}: cannot watch for SIGINT, SIGTERM and SIGHUP: {e}"))
    }

    #[cfg(unix)]
    fn watched() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hang_up: signal(SignalKind::hangup())?,
        })
    }

    #[cfg(not(unix))]
    fn watched() -> std::io::Result<Self> {
        Ok(Self {})
    }

    #[cfg(unix)]
    async fn recv(&mut self) -> Stop {
        tokio::select! {
            Some(()) = self.interrupt.recv() => Stop::Interrupt,
            Some(()) = self.terminate.recv() => Stop::Terminate,
            Some(()) = self.hang_up.recv() => Stop::HangUp,
            // Only if the runtime's signal driver is gone: nothing will come.
            else => std::future::pending().await,
        }
    }

    /// The next signal that insists after `first`: another signal, or `first` again once `ECHO`
    /// has passed (sooner, it is the same stop delivered twice).
    async fn insisting(&mut self, first: Stop) -> Stop {
        let since = Instant::now();
        loop {
            let next = self.recv().await;
            if next != first || since.elapsed() >= ECHO {
                return next;
            }
        }
    }

    #[cfg(not(unix))]
    async fn recv(&mut self) -> Stop {
        let _ = tokio::signal::ctrl_c().await;
        Stop::Interrupt
    }
}
