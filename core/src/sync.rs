//! Locking that survives a panicked holder, and reading what a caught panic said.
//!
//! hotsh's mutexes guard plain data that stays consistent between statements (a map, a
//! buffer, a list); a panic while one was held (never expected: `unwrap` is denied) must not
//! turn every later lock into a second panic, so a poisoned lock is simply taken over.

use std::sync::{Mutex, MutexGuard, PoisonError};

pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The message of a caught panic.
pub fn panic_reason(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned())
}
