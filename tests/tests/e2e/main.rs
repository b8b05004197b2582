//! End-to-end tests: each starts the real `hotsh` and talks to it over stdio.

#![allow(clippy::unwrap_used, reason = "tests")]

mod arcs;
mod as_nobody;
mod background;
mod bad_input;
mod cancel;
mod cards;
mod compat;
mod continuity;
mod dist;
mod files;
mod first_run;
mod guarantees;
mod hooks;
mod hostile;
mod login;
mod long_sessions;
mod mcp;
mod models;
mod order;
mod panics;
mod plugins;
mod promises;
mod reload;
mod run_cli;
mod sandbox;
mod sandbox_env;
mod sandbox_real;
mod sandbox_rules;
mod sandbox_seams;
mod sessions;
mod slow_client;
mod subagents;
