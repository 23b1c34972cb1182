//! The one integration-test binary: the real server over real loopback sockets, on temporary
//! SQLite files, or on PostgreSQL when `GATEHOUSE_TEST_DATABASE_URL` names a server (`database`).

mod answers;
mod auth;
mod barrier;
mod batch;
mod cli;
mod cli_form;
mod cli_permission;
mod conformance;
mod contract;
mod database;
mod durability;
mod exhaustion;
mod faults;
mod forms;
mod gates;
mod helpers;
mod hostile;
mod inbox;
mod kill;
mod layering;
mod metrics;
mod ordering;
mod pages;
mod permissions;
mod readme;
mod replicas;
mod store_story;
mod stored;
mod streams;
mod stuck;
mod timeouts;
mod webhooks;
