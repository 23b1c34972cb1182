//! gatehouse: a durable gate server. An agent loop opens a gate (a question); a person answers
//! it exactly once; the answer is routed to the owning loop's inbox.
//!
//! The layering is the architecture (ARCHITECTURE.md has the picture): `http` and `cli` →
//! `store` + `bus` → `domain`. `domain` and `common` import nothing of the crate; `store` owns
//! the database (SQLite, or PostgreSQL for several replicas) behind one API and never names
//! `http`; the `bus` rings after commits; the timer and webhooks follow it; `auth` decides who
//! may do what; `app` assembles them all, and `supervise` watches the background tasks.

pub mod app;
pub mod auth;
pub mod bench;
pub mod bus;
pub mod cli;
pub mod common;
pub mod config;
pub mod domain;
pub mod http;
pub mod log_writer;
pub mod metrics;
pub mod store;
pub mod supervise;
pub mod timer;
pub mod webhook;

pub use app::{Hooks, Listen, ServeError, Server};
pub use config::ServeArgs;
