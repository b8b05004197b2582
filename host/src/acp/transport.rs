//! The stdio transport: newline-delimited JSON-RPC on stdin and on a private duplicate of
//! stdout.
//!
//! - **stdout belongs to the protocol alone.** At start-up the protocol takes its own
//!   duplicate of fd 1 and fd 1 is pointed at stderr, so nothing else in the process (a
//!   plugin's `println!`, a library writing to stdout) can put a byte between two messages.
//! - **One bad line never ends the agent.** Lines are read as bytes. A line that is not UTF-8,
//!   or that is longer than [`MAX_LINE`], is replaced by a short line that is not JSON, which
//!   the SDK answers with a parse error (`-32700`); the agent keeps serving. The SDK repeats a
//!   malformed line in its error, so a malformed line longer than [`ECHO_LIMIT`] is replaced by
//!   a short description of it first.
//! - **A client may pipeline.** The SDK refuses any request before `initialize` is answered,
//!   so lines read after an `initialize` request wait until its answer is written
//!   ([`Handshake`]; at most [`HANDSHAKE_WAIT`]): `session/new` sent right behind
//!   `initialize`, in the same write, is served.
//! - **A client that stops reading holds the session back, not the agent's memory.** The
//!   SDK's outgoing queue has no bound, so `session/update`s are counted on their way out
//!   ([`Outflow`]): at most [`IN_FLIGHT`] are handed to the SDK and not yet written; a session
//!   with more to say waits (its command's live output meanwhile coalesces in its bounded
//!   buffer, see `executor/live.rs`).

use futures::StreamExt as _;
use std::fs::File;
use std::io::{BufRead, Write as _};
use std::os::fd::FromRawFd as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The longest line read; longer lines are skipped (and answered with a parse error).
pub(crate) const MAX_LINE: usize = 256 << 20;
/// The longest malformed line repeated back to the client.
pub(crate) const ECHO_LIMIT: usize = 1024;

/// The most `session/update` notifications handed to the SDK and not yet written to the
/// client. Each is bounded (live output by the live buffer's cap, 256 KiB), so this bounds
/// the memory a client that stops reading can cost.
pub(crate) const IN_FLIGHT: usize = 32;

/// How a written line starts when it is a `session/update` (the SDK writes `jsonrpc`, then
/// `method`, then `params`; `a_notification_line_starts_as_the_outflow_expects` checks it).
const UPDATE_LINE: &str = r#"{"jsonrpc":"2.0","method":"session/update""#;

/// Appends the `session/update` line of `notification` (without a newline) to `out`, as the
/// SDK writes it, serialised straight from its type (the SDK goes through a
/// `serde_json::Value`); for lines that pass the SDK by. On an error `out` may hold part of it.
pub(crate) fn write_update_line(
    out: &mut Vec<u8>,
    notification: &agent_client_protocol::v1::schema::SessionNotification,
) -> serde_json::Result<()> {
    #[derive(serde::Serialize)]
    struct Line<'a> {
        jsonrpc: &'static str,
        method: &'static str,
        params: &'a agent_client_protocol::v1::schema::SessionNotification,
    }
    serde_json::to_writer(
        out,
        &Line { jsonrpc: "2.0", method: "session/update", params: notification },
    )
}

/// The `session/update`s on their way to the client: counted when handed over (to the SDK or
/// past it) and when written, so a session waits while [`IN_FLIGHT`] are between the two.
#[derive(Debug, Default)]
pub(crate) struct Outflow {
    /// Updates handed over and written, since the start. Those in flight are the difference;
    /// every update handed over before a moment is written once `written_total` reaches what
    /// `handed_total` was then (both queues are first in, first out).
    handed_total: AtomicU64,
    written_total: AtomicU64,
    /// The client's stdout is closed: nothing waits any more.
    gone: AtomicBool,
    written: tokio::sync::Notify,
    /// `handed_total` right after the last [`Outflow::pass`]: equal to it while nothing was
    /// handed to the SDK since.
    after_pass: AtomicU64,
    /// The writer's queue, for lines that pass the SDK by (see [`Outflow::pass`]); weak, so
    /// that the writer still ends when the SDK drops its end.
    lines: std::sync::OnceLock<tokio::sync::mpsc::WeakSender<String>>,
}

impl Outflow {
    /// Waits until another update may be handed to the SDK.
    pub(crate) async fn room(&self) {
        loop {
            let written = self.written.notified();
            tokio::pin!(written);
            written.as_mut().enable();
            if self.in_flight() < IN_FLIGHT as u64 || self.gone.load(Ordering::Acquire) {
                return;
            }
            written.await;
        }
    }

    /// Hands `lines` (whole `session/update` lines, joined by newlines) to the writer past the
    /// SDK, counted as one update: a replay serialises each update once, straight from its
    /// type, and thousands go out in a few hand-overs. Waits, first, until every update
    /// handed over before is written (nothing of this client's goes out of order; at most
    /// [`PASS_WAIT`]), or, when only passes were handed over since the last pass (they are
    /// ahead of this one in the writer's queue already), until fewer than [`PASSES_AHEAD`]
    /// are unwritten; then for room in the writer's queue. False when this transport has no
    /// writer queue (or it is gone).
    pub(crate) async fn pass(&self, lines: String) -> bool {
        let Some(queue) = self.lines.get().and_then(tokio::sync::mpsc::WeakSender::upgrade) else {
            return false;
        };
        let before = self.handed_total.load(Ordering::Acquire);
        // Only passes since the last one: they are in the writer's queue in order already,
        // so this one need not wait for them (at most `PASSES_AHEAD` of them, though).
        let only_passes = before == self.after_pass.load(Ordering::Acquire);
        let earlier_written = async {
            loop {
                let written = self.written.notified();
                tokio::pin!(written);
                written.as_mut().enable();
                let ready = if only_passes {
                    self.in_flight() < PASSES_AHEAD
                } else {
                    self.written_total.load(Ordering::Acquire) >= before
                };
                if ready || self.gone.load(Ordering::Acquire) {
                    return;
                }
                written.await;
            }
        };
        if tokio::time::timeout(PASS_WAIT, earlier_written).await.is_err() {
            // An update the SDK never wrote would hold every later replay: go on.
            tracing::warn!(before, "updates handed over before a replay are not written yet");
        }
        // Anything handed to the SDK meanwhile makes the next pass wait for it.
        if self.handed_total.fetch_add(1, Ordering::AcqRel) == before {
            self.after_pass.store(before + 1, Ordering::Release);
        }
        queue.send(lines).await.is_ok()
    }

    /// Whether [`Outflow::pass`] reaches a writer.
    pub(crate) fn passes(&self) -> bool {
        self.lines.get().is_some_and(|queue| queue.strong_count() > 0)
    }

    /// Handed over and not written yet (a line can be written just before its hand-over is
    /// counted: then none).
    fn in_flight(&self) -> u64 {
        let written = self.written_total.load(Ordering::Acquire);
        self.handed_total.load(Ordering::Acquire).saturating_sub(written)
    }

    /// An update was handed to the SDK.
    pub(crate) fn sent(&self) {
        self.handed_total.fetch_add(1, Ordering::AcqRel);
    }

    /// `count` updates reached the client's pipe.
    fn written(&self, count: usize) {
        if count == 0 {
            return;
        }
        self.written_total.fetch_add(count as u64, Ordering::AcqRel);
        self.written.notify_waiters();
    }

    fn close(&self) {
        self.gone.store(true, Ordering::Release);
        self.written.notify_waiters();
    }
}

/// The most replay batches handed to the writer and not yet written (each at most
/// `REPLAY_BATCH`, 64 KiB, and whatever its last update brought past it).
const PASSES_AHEAD: u64 = 4;

/// How long a replay's batch waits at most for the updates handed over before it
/// ([`Outflow::pass`]).
const PASS_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long lines after an `initialize` request wait for its answer at most.
const HANDSHAKE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// An `initialize` request on its way: the reader waits for the writer to write its answer.
#[derive(Debug, Default)]
struct Handshake {
    /// A request waits (fast path for the writer).
    pending: AtomicBool,
    /// How the answer's line starts (`{"jsonrpc":"2.0","id":ID,`), while it is awaited.
    answer: std::sync::Mutex<Option<String>>,
    answered: std::sync::Condvar,
}

impl Handshake {
    /// How the answer to `line` starts, when `line` is an `initialize` request.
    fn answer_start(line: &str) -> Option<String> {
        // An `initialize` request is short; long lines are never parsed here.
        if line.len() > 64 << 10 || !line.contains("\"initialize\"") {
            return None;
        }
        let message = serde_json::from_str::<serde_json::Value>(line).ok()?;
        let id = message.get("id").filter(|_| message["method"] == "initialize")?;
        Some(format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},"))
    }

    /// An answer starting with `start` is awaited (set before its request is passed on, so
    /// the answer cannot be written first).
    fn expect(&self, start: String) {
        *crate::sync::lock(&self.answer) = Some(start);
        self.pending.store(true, Ordering::Release);
    }

    /// Waits until the awaited answer is written (or nothing will be).
    fn wait(&self) {
        let answer = crate::sync::lock(&self.answer);
        let (answer, _) = self
            .answered
            .wait_timeout_while(answer, HANDSHAKE_WAIT, |answer| answer.is_some())
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        drop(answer);
        self.pending.store(false, Ordering::Release);
    }

    /// Whether `line`, about to be written, is the awaited answer.
    fn is_answer(&self, line: &str) -> bool {
        self.pending.load(Ordering::Acquire)
            && crate::sync::lock(&self.answer).as_deref().is_some_and(|s| line.starts_with(s))
    }

    /// The awaited answer was written and flushed, or nothing will be written any more:
    /// nobody waits.
    fn answered(&self) {
        *crate::sync::lock(&self.answer) = None;
        self.answered.notify_all();
    }
}

/// Takes stdout for the protocol: returns a private duplicate of fd 1 and points fd 1 at
/// stderr.
pub(crate) fn claim_stdout() -> std::io::Result<File> {
    // SAFETY: plain descriptor calls; the duplicate is owned by the returned `File`.
    unsafe {
        let private = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if private < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::dup2(2, 1) < 0 {
            let error = std::io::Error::last_os_error();
            libc::close(private);
            return Err(error);
        }
        Ok(File::from_raw_fd(private))
    }
}

/// The SDK transport over `input` and `output`; the returned thread handle finishes once
/// every line handed to the transport is written.
pub(crate) fn lines(
    input: impl BufRead + Send + 'static,
    output: File,
    tap: Option<std::sync::Arc<crate::arc::Recorder>>,
    outflow: std::sync::Arc<Outflow>,
) -> (
    agent_client_protocol::Lines<
        impl futures::Sink<String, Error = std::io::Error> + Send + 'static,
        impl futures::Stream<Item = std::io::Result<String>> + Send + 'static,
    >,
    std::thread::JoinHandle<()>,
) {
    let (incoming_tx, incoming_rx) = tokio::sync::mpsc::channel::<std::io::Result<String>>(64);
    let client_tap = tap.clone();
    let handshake = std::sync::Arc::new(Handshake::default());
    let reading = std::sync::Arc::clone(&handshake);
    std::thread::Builder::new()
        .name("acp-stdin".into())
        .spawn(move || read_lines(input, &incoming_tx, client_tap.as_deref(), &reading))
        .ok();
    let incoming = futures::stream::unfold(incoming_rx, |mut rx| async move {
        rx.recv().await.map(|line| (line, rx))
    });
    let (outgoing_tx, mut outgoing_rx) = tokio::sync::mpsc::channel::<String>(256);
    let _ = outflow.lines.set(outgoing_tx.downgrade());
    let writer = std::thread::Builder::new()
        .name("acp-stdout".into())
        .spawn(move || {
            // Lines are gathered while more are waiting and written together: a replay of
            // thousands of updates is a few writes, not thousands.
            let mut output = std::io::BufWriter::with_capacity(256 << 10, output);
            let write = |output: &mut std::io::BufWriter<File>, line: &str| {
                if let Some(tap) = &tap {
                    // Lines passed together (`Outflow::pass`) are recorded one by one.
                    line.split('\n').for_each(|line| tap.agent(line));
                }
                write_line(output, line)
            };
            while let Some(line) = outgoing_rx.blocking_recv() {
                let mut updates = usize::from(line.starts_with(UPDATE_LINE));
                let mut handshake_answered = handshake.is_answer(&line);
                let mut written = write(&mut output, &line);
                while written.is_ok() {
                    match outgoing_rx.try_recv() {
                        Ok(line) => {
                            updates += usize::from(line.starts_with(UPDATE_LINE));
                            handshake_answered |= handshake.is_answer(&line);
                            written = write(&mut output, &line);
                        }
                        Err(_) => break,
                    }
                }
                if let Err(error) = written.and_then(|()| output.flush()) {
                    tracing::debug!(%error, "cannot write to the client (gone?)");
                    break;
                }
                outflow.written(updates);
                // The handshake's answer counts once it is flushed.
                if handshake_answered {
                    handshake.answered();
                }
            }
            outflow.close();
            handshake.answered();
        })
        .unwrap_or_else(|_| std::thread::spawn(|| ()));
    let outgoing = futures::sink::unfold(outgoing_tx, async |tx, line: String| {
        tx.send(line).await.map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client's stdout is closed")
        })?;
        Ok::<_, std::io::Error>(tx)
    });
    (agent_client_protocol::Lines::new(Box::pin(outgoing), incoming.boxed()), writer)
}

fn write_line(output: &mut impl std::io::Write, line: &str) -> std::io::Result<()> {
    output.write_all(line.as_bytes())?;
    output.write_all(b"\n")
}

/// Reads lines until end of file, sending each (sanitised) to the transport.
fn read_lines(
    mut input: impl BufRead,
    lines: &tokio::sync::mpsc::Sender<std::io::Result<String>>,
    tap: Option<&crate::arc::Recorder>,
    handshake: &Handshake,
) {
    loop {
        let line = match read_line(&mut input, MAX_LINE) {
            Ok(Some(RawLine::Complete(bytes))) => Ok(sanitize(bytes)),
            Ok(Some(RawLine::TooLong(length))) => Ok(format!(
                "<a line of {length} bytes, over the {} MiB limit, was skipped>",
                MAX_LINE >> 20
            )),
            Ok(None) => return,
            Err(error) => Err(error),
        };
        if let (Some(tap), Ok(line)) = (tap, &line) {
            tap.client(line);
        }
        let failed = line.is_err();
        // An `initialize` request's answer is awaited before the request is passed on.
        let initialize = line.as_deref().ok().and_then(Handshake::answer_start);
        if let Some(start) = &initialize {
            handshake.expect(start.clone());
        }
        if lines.blocking_send(line).is_err() || failed {
            return;
        }
        if initialize.is_some() {
            handshake.wait();
        }
    }
}

/// One line as read.
#[derive(Debug, PartialEq, Eq)]
enum RawLine {
    Complete(Vec<u8>),
    /// Longer than the limit: its bytes were skipped; this is how many there were.
    TooLong(usize),
}

/// Reads up to the next newline (not included), keeping at most `limit` bytes in memory.
/// `None` at end of input.
fn read_line(input: &mut impl BufRead, limit: usize) -> std::io::Result<Option<RawLine>> {
    let mut line = Vec::new();
    let mut length = 0usize;
    loop {
        let buffer = match input.fill_buf() {
            Ok(buffer) => buffer,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if buffer.is_empty() {
            return Ok((length > 0).then(|| finish(line, length, limit)));
        }
        let (chunk, done) = match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => (&buffer[..at], at + 1),
            None => (buffer, buffer.len()),
        };
        let newline = done > chunk.len();
        length += chunk.len();
        if length <= limit {
            line.extend_from_slice(chunk);
        } else {
            line = Vec::new();
        }
        input.consume(done);
        if newline {
            return Ok(Some(finish(line, length, limit)));
        }
    }
}

fn finish(mut line: Vec<u8>, length: usize, limit: usize) -> RawLine {
    if length > limit {
        return RawLine::TooLong(length);
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    RawLine::Complete(line)
}

/// The line the SDK gets: the line itself, or a short line that is not JSON describing a line
/// that is not UTF-8, or a long malformed one.
fn sanitize(bytes: Vec<u8>) -> String {
    let length = bytes.len();
    match String::from_utf8(bytes) {
        Err(_) => format!("<a line of {length} bytes that is not UTF-8>"),
        Ok(line)
            if line.len() > ECHO_LIMIT
                && serde_json::from_str::<serde::de::IgnoredAny>(&line).is_err() =>
        {
            let mut start = 200;
            while !line.is_char_boundary(start) {
                start -= 1;
            }
            format!("<malformed JSON, {length} bytes, starting {:?}>", &line[..start])
        }
        Ok(line) => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_line_starts_as_the_outflow_expects() {
        use agent_client_protocol::{RawJsonRpcMessage, RawJsonRpcNotification};
        let notification = RawJsonRpcNotification {
            method: "session/update".into(),
            params: serde_json::from_value(serde_json::json!({"sessionId": "s"})).ok(),
        };
        let line = serde_json::to_string(&RawJsonRpcMessage::from(notification))
            .expect("a notification serialises");
        assert!(line.starts_with(UPDATE_LINE), "{line}");
    }

    #[test]
    fn a_line_passed_by_the_sdk_is_the_line_the_sdk_writes() {
        use agent_client_protocol::v1::schema::{
            ContentBlock, ContentChunk, SessionNotification, SessionUpdate, ToolCall,
            ToolCallStatus,
        };
        use agent_client_protocol::{RawJsonRpcMessage, RawJsonRpcNotification};
        let updates = [
            SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::from("a \"b\"\n"))),
            SessionUpdate::ToolCall(
                ToolCall::new("call-1", "seq 1 3").status(ToolCallStatus::InProgress),
            ),
        ];
        for update in updates {
            let notification = SessionNotification::new("s", update);
            let through_sdk = RawJsonRpcMessage::from(RawJsonRpcNotification {
                method: "session/update".into(),
                params: Some(
                    serde_json::to_value(&notification)
                        .and_then(serde_json::from_value)
                        .expect("the SDK's params"),
                ),
            });
            let expected = serde_json::to_string(&through_sdk).expect("serialises");
            let mut line = b"already here".to_vec();
            write_update_line(&mut line, &notification).expect("serialises");
            assert_eq!(line.strip_prefix(b"already here"), Some(expected.as_bytes()));
            assert!(expected.starts_with(UPDATE_LINE), "{expected}");
        }
    }

    /// A replay's batches queue up to a bound while the client reads nothing, and a batch
    /// after an update handed to the SDK waits until everything before it is written.
    #[tokio::test]
    async fn replay_batches_queue_up_to_a_bound_and_never_pass_an_update_of_the_sdk() {
        use std::time::Duration;
        let pending = Duration::from_millis(50);
        let outflow = Outflow::default();
        let (queue, mut writer) = tokio::sync::mpsc::channel::<String>(256);
        let _ = outflow.lines.set(queue.downgrade());
        for batch in 0..PASSES_AHEAD {
            assert!(outflow.pass(format!("batch {batch}")).await, "batch {batch}");
        }
        // Nothing written: the next batch waits, until one is.
        let next = outflow.pass(format!("batch {PASSES_AHEAD}"));
        tokio::pin!(next);
        assert!(tokio::time::timeout(pending, next.as_mut()).await.is_err(), "it waits");
        assert_eq!(writer.recv().await.as_deref(), Some("batch 0"));
        outflow.written(1);
        assert!(next.await);
        // An update handed to the SDK: the batch after it waits for it to be written too.
        outflow.sent();
        let after = outflow.pass("after the SDK's update".to_owned());
        tokio::pin!(after);
        outflow.written(PASSES_AHEAD as usize);
        assert!(tokio::time::timeout(pending, after.as_mut()).await.is_err(), "it waits");
        outflow.written(1);
        assert!(after.await);
        let queued: Vec<String> = std::iter::from_fn(|| writer.try_recv().ok()).collect();
        let expected: Vec<String> = (1..=PASSES_AHEAD)
            .map(|batch| format!("batch {batch}"))
            .chain(["after the SDK's update".to_owned()])
            .collect();
        assert_eq!(queued, expected, "in the order handed over");
        drop(queue);
    }

    fn lines_of(input: &[u8], limit: usize) -> Vec<RawLine> {
        let mut reader = std::io::BufReader::with_capacity(4, input);
        std::iter::from_fn(|| read_line(&mut reader, limit).expect("reads")).collect()
    }

    #[test]
    fn lines_are_split_bounded_and_stripped_of_cr() {
        assert_eq!(
            lines_of(b"ab\r\n0123456789\nlast", 8),
            vec![
                RawLine::Complete(b"ab".to_vec()),
                RawLine::TooLong(10),
                RawLine::Complete(b"last".to_vec())
            ]
        );
    }

    #[test]
    fn bad_lines_become_short_non_json_lines() {
        assert_eq!(sanitize(b"\xff\xfe{}".to_vec()), "<a line of 4 bytes that is not UTF-8>");
        assert_eq!(sanitize(b"{\"ok\": 1}".to_vec()), "{\"ok\": 1}");
        let long = format!("{{{}", "x".repeat(5000));
        let short = sanitize(long.into_bytes());
        assert!(short.starts_with("<malformed JSON, 5001 bytes, starting \"{xxx"), "{short}");
        assert!(short.len() < 300);
        // Valid JSON is passed on whatever its length.
        let valid = format!("{{\"a\": \"{}\"}}", "y".repeat(5000));
        assert_eq!(sanitize(valid.clone().into_bytes()), valid);
    }
}
