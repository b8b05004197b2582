//! Locking that survives a panicked holder (the core's, for the host too).

pub(crate) use hotsh_core::sync::{lock, panic_reason};
