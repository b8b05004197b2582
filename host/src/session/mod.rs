//! Sessions on disk: the log's format (`log.rs`), its writer (`writer.rs`, a thread per open
//! log) and the store of logs (`store.rs`). The sessions themselves are the core's
//! (`hotsh_core::session`), re-exported here.

pub(crate) mod log;
pub(crate) mod store;
mod writer;

pub(crate) use hotsh_core::session::*;
pub(crate) use writer::LogWriter;
