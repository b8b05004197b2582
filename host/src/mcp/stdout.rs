//! Watches what a stdio server writes: every line must be a JSON-RPC message. A server that
//! writes anything else on stdout (a log line, a banner, a broken answer) breaks the protocol;
//! the SDK would skip the line and wait for an answer that never comes. The first such line is
//! kept and announced, so the connection fails at once with the line in its message.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::Notify;

/// The most of a bad line kept for the message.
const SHOWN: usize = 200;
/// The longest partial line kept while waiting for its end (longer lines are not checked).
const LONGEST_CHECKED: usize = 1 << 20;

/// Where the first line that is not JSON is reported.
#[derive(Debug, Default)]
pub(crate) struct Malformed {
    line: Mutex<Option<String>>,
    notify: Notify,
}

impl Malformed {
    /// Waits until a bad line is seen; returns it.
    pub(crate) async fn seen(&self) -> String {
        loop {
            let notified = self.notify.notified();
            if let Some(line) = crate::sync::lock(&self.line).clone() {
                return line;
            }
            notified.await;
        }
    }

    fn report(&self, line: &[u8]) {
        let mut kept = crate::sync::lock(&self.line);
        if kept.is_none() {
            let text = String::from_utf8_lossy(line);
            let shown: String = text.chars().take(SHOWN).collect();
            *kept = Some(shown);
            self.notify.notify_waiters();
        }
    }
}

/// A reader that passes everything through and checks each complete line.
pub(crate) struct Watched<R> {
    inner: R,
    partial: Vec<u8>,
    malformed: Arc<Malformed>,
}

impl<R> Watched<R> {
    pub(crate) fn new(inner: R, malformed: Arc<Malformed>) -> Self {
        Self { inner, partial: Vec::new(), malformed }
    }

    fn check(&mut self, bytes: &[u8]) {
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            if self.partial.len() < LONGEST_CHECKED {
                self.partial.extend_from_slice(piece);
            }
            if piece.ends_with(b"\n") {
                let line = self.partial.trim_ascii();
                if !line.is_empty()
                    && self.partial.len() < LONGEST_CHECKED
                    && serde_json::from_slice::<serde::de::IgnoredAny>(line).is_err()
                {
                    self.malformed.report(line);
                }
                self.partial.clear();
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Watched<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let fresh = &buf.filled()[before..];
            self.check(fresh);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_that_is_not_json_is_kept_across_reads() {
        let malformed = Arc::new(Malformed::default());
        let mut watched = Watched::new(tokio::io::empty(), Arc::clone(&malformed));
        watched.check(b"{\"jsonrpc\":\"2.0\"}\n{\"a\":");
        watched.check(b"1}\n\n");
        assert_eq!(*crate::sync::lock(&malformed.line), None);
        watched.check(b"Server starting on stdio");
        watched.check(b"...\n{\"b\":2}\nsecond bad\n");
        assert_eq!(
            crate::sync::lock(&malformed.line).as_deref(),
            Some("Server starting on stdio...")
        );
    }
}
