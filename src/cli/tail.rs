//! `gatehouse tail`: journal events as JSON lines (`{"journal_seq":N,"event":{…}}`), from
//! `--after N`, following live and resuming by itself after a disconnect. A pipe gets the events'
//! exact bytes; a terminal gets the same JSON with control characters as `\uXXXX` escapes.

use std::io::IsTerminal;
use std::process::ExitCode;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::sse::Reader;
use super::terminal::{Lines, escape, escape_json};
use super::{say, server_backoff};
use crate::config::TailArgs;

pub async fn run(args: TailArgs) -> ExitCode {
    let Ok(api) = super::connect("tail", &args.client) else { return ExitCode::FAILURE };
    let mut after = i64::try_from(args.after).unwrap_or(i64::MAX);
    let mut backoff = server_backoff();
    let mut reached = false;
    let terminal = std::io::stdout().is_terminal();
    loop {
        match api.stream(&format!("/v1/events?after={after}")).await {
            Ok(response) => {
                reached = true;
                backoff.reset();
                let mut frames = Reader::new(response);
                while let Some(frame) = frames.next().await {
                    match frame.event.as_str() {
                        "enduring" => {
                            let (Ok(seq), Ok(payload)) =
                                (frame.id.parse::<i64>(), serde_json::from_str::<Payload>(&frame.data))
                            else {
                                continue;
                            };
                            // The event's own bytes, as the journal holds them (its key order too).
                            let line = format!("{{\"journal_seq\":{seq},\"event\":{}}}", payload.event.get());
                            if terminal {
                                say(&escape_json(&line))
                            } else {
                                say(&line)
                            }
                            after = seq;
                        }
                        "reset" => {
                            eprintln!(
                                "gatehouse tail: the journal does not reach {after} ({}); following from its head",
                                escape(&frame.data, Lines::Escape)
                            );
                        }
                        _ => {}
                    }
                }
            }
            // Never reached it at all: say so and stop, rather than wait on a typo forever.
            Err(e) if !reached => {
                eprintln!("gatehouse tail: {e}");
                return ExitCode::FAILURE;
            }
            Err(e) => eprintln!("gatehouse tail: {e}; retrying"),
        }
        backoff.wait().await;
    }
}

/// The data of an `enduring` frame: `{"v":1,"event":{…}}`.
#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(borrow)]
    event: &'a RawValue,
}
