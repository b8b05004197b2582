//! hotsh's domain and loop, with IO only through ports (traits the host implements): the
//! sessions (`session`), the model port (`model`), the sandbox modes (`sandbox`). It knows no
//! ACP, no plugin interface, no MCP and starts no process: those are the host's, and this
//! crate's dependencies keep it so.

pub mod model;
pub mod sandbox;
pub mod session;
pub mod sync;
