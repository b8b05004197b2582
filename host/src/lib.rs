//! hotsh: a coding agent for the Agent Client Protocol. See ARCHITECTURE.md for the map.

mod acp;
mod agents;
mod arc;
mod cli;
mod config;
mod credentials;
mod dev;
mod dirs;
mod executor;
mod fds;
mod hooks;
mod host;
mod http;
mod install;
mod keyring;
mod login;
mod mcp;
mod model;
mod nofollow;
mod permissions;
mod plugins;
mod prompt;
mod sandbox;
mod session;
mod subagents;
mod sync;
mod term;
mod turn;
mod version;

pub use cli::main;
pub use executor::run_shim_if_asked;
