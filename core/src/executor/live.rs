//! Output on its way to the client while a command runs.
//!
//! The executor never waits for the client: it appends to a bounded buffer and moves on. A
//! forwarder drains the buffer at most once per coalescing window, so a command writing a
//! gigabyte becomes a bounded number of bounded updates instead of a flood, and a slow client
//! never slows the command down.

use std::collections::VecDeque;
use std::sync::Mutex;
use tokio::sync::Notify;

/// Bytes waiting for the client, with the count of bytes that did not fit.
#[derive(Debug, Default)]
struct Pending {
    bytes: VecDeque<u8>,
    /// Bytes dropped from the front of `bytes` since the last drain.
    skipped: u64,
    /// An incomplete UTF-8 sequence held back from the previous drain.
    carry: Vec<u8>,
    closed: bool,
}

/// One command's live output, shared by the executor (writer) and a forwarder (reader).
#[derive(Debug)]
pub struct LiveOutput {
    cap: usize,
    pending: Mutex<Pending>,
    ready: Notify,
    /// Woken (all waiters) when the output closes.
    ended: Notify,
}

/// What a drain hands the forwarder.
#[derive(Debug, PartialEq, Eq)]
pub enum Drained {
    Text(String),
    /// Nothing now; the command still runs.
    Empty,
    /// Nothing now and nothing more will come.
    Closed,
}

impl LiveOutput {
    /// `cap` bounds the bytes waiting between two drains; older bytes give way to newer ones.
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            pending: Mutex::new(Pending::default()),
            ready: Notify::new(),
            ended: Notify::new(),
        }
    }

    pub fn push(&self, bytes: &[u8]) {
        {
            let mut pending = self.lock();
            // Only the newest `cap` bytes can survive; skip the rest without copying it.
            let keep = &bytes[bytes.len().saturating_sub(self.cap)..];
            pending.skipped += (bytes.len() - keep.len()) as u64;
            pending.bytes.extend(keep);
            if pending.bytes.len() > self.cap {
                let excess = pending.bytes.len() - self.cap;
                pending.bytes.drain(..excess);
                pending.skipped += excess as u64;
            }
        }
        self.ready.notify_one();
    }

    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
        self.ended.notify_waiters();
    }

    /// Waits until the output is closed (the command ended): what is pending then is the last
    /// of it, and need not wait for a coalescing window.
    pub async fn closed(&self) {
        let ended = self.ended.notified();
        tokio::pin!(ended);
        // Registered before the check: a close between the two still wakes us.
        ended.as_mut().enable();
        if self.is_closed() {
            return;
        }
        ended.await;
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Waits until there is something to drain or the output is closed.
    pub async fn changed(&self) {
        {
            let pending = self.lock();
            if !pending.bytes.is_empty() || pending.closed {
                return;
            }
        }
        self.ready.notified().await;
    }

    pub fn drain(&self) -> Drained {
        let mut pending = self.lock();
        if pending.bytes.is_empty() && pending.skipped == 0 {
            return if pending.closed { Drained::Closed } else { Drained::Empty };
        }
        let mut bytes = std::mem::take(&mut pending.carry);
        if pending.skipped > 0 && !bytes.is_empty() {
            // The held-back bytes belonged before the gap; they cannot complete any more.
            bytes.clear();
        }
        bytes.extend(pending.bytes.drain(..));
        let mut text = String::new();
        if pending.skipped > 0 {
            text.push_str(&format!("\n[… {} bytes not shown here …]\n", pending.skipped));
            pending.skipped = 0;
        }
        let keep_from = if pending.closed { bytes.len() } else { complete_utf8_prefix(&bytes) };
        pending.carry = bytes.split_off(keep_from);
        text.push_str(&String::from_utf8_lossy(&bytes));
        Drained::Text(text)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        // A poisoned lock only means a writer panicked mid-append; the bytes are still bytes.
        crate::sync::lock(&self.pending)
    }
}

/// The length of the longest prefix that does not end inside a UTF-8 sequence.
pub fn complete_utf8_prefix(bytes: &[u8]) -> usize {
    // A sequence is at most 4 bytes: look back at most 3 for its lead byte.
    for back in 1..=3.min(bytes.len()) {
        let byte = bytes[bytes.len() - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue; // continuation byte
        }
        let needed = match byte {
            b if b & 0b1110_0000 == 0b1100_0000 => 2,
            b if b & 0b1111_0000 == 0b1110_0000 => 3,
            b if b & 0b1111_1000 == 0b1111_0000 => 4,
            _ => return bytes.len(),
        };
        return if back < needed { bytes.len() - back } else { bytes.len() };
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_wakes_its_waiter_when_the_output_closes() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        let live = std::sync::Arc::new(LiveOutput::new(16));
        runtime.block_on(async {
            let waiter = {
                let live = std::sync::Arc::clone(&live);
                tokio::spawn(async move { live.closed().await })
            };
            tokio::task::yield_now().await;
            assert!(!waiter.is_finished(), "open output keeps the waiter waiting");
            live.close();
            waiter.await.expect("the waiter ends");
            // Closed already: returns at once.
            live.closed().await;
        });
    }
    #[test]
    fn split_multibyte_character_waits_for_its_end() {
        let live = LiveOutput::new(1024);
        let euro = "€".as_bytes();
        live.push(&euro[..2]);
        assert_eq!(live.drain(), Drained::Text(String::new()));
        live.push(&euro[2..]);
        assert_eq!(live.drain(), Drained::Text("€".to_owned()));
    }

    #[test]
    fn overflow_keeps_the_newest_bytes_and_says_how_many_were_skipped() {
        let live = LiveOutput::new(4);
        live.push(b"abcdefgh");
        assert_eq!(live.drain(), Drained::Text("\n[… 4 bytes not shown here …]\nefgh".to_owned()));
    }

    #[test]
    fn closed_and_empty_is_the_end() {
        let live = LiveOutput::new(4);
        live.push(b"x");
        live.close();
        assert_eq!(live.drain(), Drained::Text("x".to_owned()));
        assert_eq!(live.drain(), Drained::Closed);
    }
}
