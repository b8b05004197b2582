//! hotsh's domain and loop, with IO only through ports (traits the host implements): the
//! sessions (`session`, with the client and log ports), the model port (`model`), the executor port
//! (`executor`), the tool router over tool providers (`tools`), the turn (`turn`), the sandbox modes (`sandbox`). It knows no
//! ACP, no plugin interface, no MCP and starts no process: those are the host's, and this
//! crate's dependencies keep it so.

pub mod commands;
pub mod context;
pub mod executor;
pub mod hooks;
pub mod model;
pub mod permissions;
pub mod plan;
pub mod sandbox;
pub mod session;
pub mod sync;
pub mod text;
pub mod tools;
pub mod turn;
pub mod usecase;
