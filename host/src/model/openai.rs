//! The OpenAI-compatible chat completions adapter (DeepSeek, OpenAI, OpenRouter, and local
//! servers such as llama.cpp, vLLM, Ollama and LM Studio speak it), streaming.
//!
//! One request is one `POST {base}/chat/completions` with `"stream": true`; the answer comes
//! as server-sent events, parsed by `eventsource-stream`. Text and `reasoning_content`
//! (DeepSeek) are sent on as they arrive; tool calls arrive as fragments keyed by `index` and
//! are assembled, then handed over when the stream ends; `[DONE]` ends it (what follows it, the
//! end of the body, is read in the background so that the connection is kept).
//!
//! DeepSeek's thinking mode wants the `reasoning_content` of an assistant message that made
//! tool calls sent back with that message in every later request (it answers 400 otherwise);
//! for a message without tool calls it is left out.
//!
//! Failures are messages a user can act on: a refused key names the variable it came from,
//! an unknown model names the model, a context that is too long says so (and the turn compacts
//! the conversation and tries once more). A failure before
//! anything was shown is retried with backoff (429, honouring `Retry-After`; 5xx; a connection
//! that cannot be made or drops before the first byte); once text has reached the user, it is
//! not (the answer would repeat).

use super::{
    Message, Model, ModelError, ModelEvent, ModelRequest, ModelToolCall, PromptImage,
    ToolDefinition, Usage,
};
use futures::StreamExt as _;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Attempts in all for a request that fails before anything was shown.
const ATTEMPTS: u32 = 4;
/// The first backoff; doubled after each attempt.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest `Retry-After` honoured; longer waits fail at once, saying how long.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// How long an answer's body is read after its `[DONE]` for its end, and the most events read
/// meanwhile: past either, the connection is let go (see the end of `attempt`).
const DRAIN_LIMIT: Duration = Duration::from_secs(5);
const DRAIN_EVENTS: usize = 16;

/// An API key and where it came from (the variable named in errors; the value never is).
#[derive(Clone)]
pub(crate) struct ApiKey {
    pub(crate) value: String,
    pub(crate) from: String,
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKey(from {})", self.from)
    }
}

/// A reasoning-effort level: its name and the request body fields it sets.
pub(crate) type EffortFields = (String, serde_json::Map<String, Value>);

/// Everything an OpenAI-compatible model needs.
#[derive(Debug, Clone)]
pub(crate) struct OpenAiSpec {
    /// The model's name at the provider.
    pub(crate) model: String,
    /// E.g. `https://api.deepseek.com` (the adapter appends `/chat/completions`).
    pub(crate) base_url: String,
    pub(crate) key: Option<ApiKey>,
    /// Extra fields for every request body (`temperature`, …).
    pub(crate) extra: serde_json::Map<String, Value>,
    /// Whether the model takes images (sent as `image_url` parts).
    pub(crate) images: bool,
    /// Its reasoning-effort levels: each a name and the body fields it sets.
    pub(crate) efforts: Vec<EffortFields>,
    /// The level sessions start with.
    pub(crate) default_effort: Option<String>,
    /// The most an answer may stream (text, reasoning and tool call arguments, in bytes)
    /// before it is stopped: a model that does not stop costs no more than this.
    pub(crate) answer_limit: usize,
}

/// Bytes of an answer's content per token allowed (four is the average; code and other
/// languages take fewer).
pub(crate) const ANSWER_BYTES_PER_TOKEN: usize = 4;
/// What a line of the stream may hold beyond the answer's content (its JSON).
const LINE_FRAMING: usize = 64 << 10;

/// The response body cut into lines (each with its `\n`), found in one pass: the SSE parser
/// then never gets a line in pieces (it scans what it holds again for every piece, which made
/// a long line cost its length squared). A line longer than `max_line` ends the stream with
/// an error.
fn lines(
    body: impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
    max_line: usize,
) -> impl futures::Stream<Item = Result<bytes::Bytes, LineError>> {
    let state = (body, bytes::BytesMut::new(), 0usize, false);
    futures::stream::unfold(state, move |(mut body, mut pending, mut scanned, ended)| async move {
        if ended {
            return None;
        }
        loop {
            if let Some(at) = pending[scanned..].iter().position(|&b| b == b'\n') {
                let line = pending.split_to(scanned + at + 1).freeze();
                return Some((Ok(line), (body, pending, 0, false)));
            }
            scanned = pending.len();
            if pending.len() > max_line {
                let error = LineError::TooLong(max_line);
                return Some((Err(error), (body, pending, 0, true)));
            }
            match body.next().await {
                Some(Ok(chunk)) => pending.extend_from_slice(&chunk),
                Some(Err(error)) => {
                    return Some((Err(LineError::Body(error)), (body, pending, 0, true)));
                }
                None if pending.is_empty() => return None,
                None => {
                    let rest = std::mem::take(&mut pending).freeze();
                    return Some((Ok(rest), (body, pending, 0, true)));
                }
            }
        }
    })
}

/// Why the stream could not be cut into lines.
#[derive(Debug, thiserror::Error)]
enum LineError {
    #[error("{0}")]
    Body(reqwest::Error),
    #[error("a line of the stream passed {0} bytes")]
    TooLong(usize),
}

#[derive(Debug)]
pub(crate) struct OpenAiModel {
    spec: OpenAiSpec,
    client: reqwest::Client,
    /// The messages sessions sent lately, encoded.
    encoded: std::sync::Mutex<Encoded>,
    /// What framed the last request's messages, encoded.
    framing: std::sync::Mutex<Framing>,
}

/// The encodings of the last request's system message and of what follows its messages (the
/// tools, the settings), used again while they are the same: a turn sends the same ones with
/// every request.
#[derive(Debug, Default)]
struct Framing {
    /// The system prompt, and `{"messages":[` with its message.
    system: Option<(String, bytes::Bytes)>,
    /// The tools, the effort, and `],` with the body's other members.
    rest: Option<(Vec<ToolDefinition>, Option<String>, bytes::Bytes)>,
}

/// The sessions kept encoded at most (the least recently asked for goes first).
const ENCODED_SESSIONS: usize = 16;

/// Encoded messages of the sessions that sent requests lately.
#[derive(Debug, Default)]
struct Encoded {
    sessions: Vec<(String, Conversation)>,
}

/// Bytes of encoded messages gathered into one block, and the most messages left apart.
///
/// The HTTP client writes at most 16 pieces of a body per system call: a long conversation
/// sent as one piece a message took a write for every few kilobytes (at 600 turns of 4 KiB
/// commands, 150 writes for 2.6 MB). Gathered, the body is a few large pieces, each written
/// in frames of [`FRAME_BYTES`], [`WRITE_BYTES`] a write.
const BLOCK_BYTES: usize = 256 << 10;
const OPEN_MESSAGES: usize = 64;

/// The bytes of a body the HTTP client writes at a time over plain HTTP.
///
/// Over Linux's loopback (a local model server) 2.6 MB took 0.7-0.9 ms in writes of 256 KiB
/// or more and about 0.4 ms in writes of 128 KiB, the receiver's window on a fresh connection
/// (`hotsh-bench long`, its bare socket pair, the bytes in the processor's caches; 112 to
/// 192 KiB did about as well, 64 KiB 0.55 ms). Over a network it makes no difference.
const WRITE_BYTES: usize = 128 << 10;

/// The longest frame a body hands over. The HTTP client (hyper) writes what it holds once it
/// holds 16 frames or about 400 KiB, and then takes the next frames in the same turn: frames
/// of a sixteenth of [`WRITE_BYTES`] make its writes that size, one after the other. (A body
/// that said it had nothing ready after each write would make the same writes, but the task
/// woken again goes to the runtime's other thread each time: 0.56 ms instead of 0.39 for
/// 2.6 MB in a test of tokio alone.)
const FRAME_BYTES: usize = WRITE_BYTES / 16;

/// One session's messages as last sent: each message (held, so its address stays its own)
/// and its JSON, preceded by a comma (it follows the system message or another).
///
/// The older encodings lie in blocks, each one buffer with the JSON of many messages (a
/// message's own encoding is then its slice of the block), and the request sends the blocks
/// and the newer messages after them: each message is copied into a block once.
#[derive(Debug, Default)]
struct Conversation {
    messages: Vec<(Arc<Message>, bytes::Bytes)>,
    /// Each block with the count of messages up to its end.
    blocks: Vec<(usize, bytes::Bytes)>,
}

impl Conversation {
    /// Keeps the first `count` messages and the blocks that lie wholly within them. The kept
    /// messages of a block let go are copied out of it: their slices would hold the whole
    /// block (a loaded session's first request gathers all of it into one).
    fn truncate(&mut self, count: usize) {
        self.messages.truncate(count);
        let mut dropped = false;
        while self.blocks.last().is_some_and(|(end, _)| *end > count) {
            self.blocks.pop();
            dropped = true;
        }
        if dropped {
            let from = self.open();
            for (_, json) in &mut self.messages[from..] {
                *json = bytes::Bytes::copy_from_slice(json);
            }
        }
    }

    /// The messages after the last block.
    fn open(&self) -> usize {
        self.blocks.last().map_or(0, |(end, _)| *end)
    }

    /// Gathers the messages after the last block into a new one once they are many enough.
    fn gather(&mut self) {
        let from = self.open();
        let open = &mut self.messages[from..];
        let len: usize = open.iter().map(|(_, json)| json.len()).sum();
        if len < BLOCK_BYTES && open.len() < OPEN_MESSAGES {
            return;
        }
        let mut block = Vec::with_capacity(len);
        for (_, json) in open.iter() {
            block.extend_from_slice(json);
        }
        let block = bytes::Bytes::from(block);
        let mut at = 0;
        for (_, json) in open.iter_mut() {
            let end = at + json.len();
            *json = block.slice(at..end);
            at = end;
        }
        self.blocks.push((self.messages.len(), block));
    }

    /// The encodings a request sends for these messages, in order.
    fn pieces(&self) -> impl Iterator<Item = bytes::Bytes> + '_ {
        let blocks = self.blocks.iter().map(|(_, block)| block.clone());
        blocks.chain(self.messages[self.open()..].iter().map(|(_, json)| json.clone()))
    }
}

/// A request's body as the pieces it is made of: the messages' encodings are shared with the
/// session's [`Conversation`], so a request copies none of them and allocates nothing as
/// long as the conversation (one large buffer a request would need grows with every turn,
/// and the allocator keeps what each one left). Sent with its exact length, in frames of at
/// most [`FRAME_BYTES`] (slices of the pieces: nothing is copied); a clone (a retry) shares
/// the pieces.
#[derive(Debug, Clone)]
pub(crate) struct RequestBody {
    pieces: Arc<[bytes::Bytes]>,
    next: usize,
    /// Bytes of the next piece already handed over.
    taken: usize,
    /// Bytes of the pieces not sent yet.
    remaining: u64,
}

impl RequestBody {
    fn new(pieces: Vec<bytes::Bytes>) -> Self {
        let remaining = pieces.iter().map(|piece| piece.len() as u64).sum();
        Self { pieces: pieces.into(), next: 0, taken: 0, remaining }
    }

    /// The whole body in one buffer (tests).
    #[cfg(test)]
    fn to_vec(&self) -> Vec<u8> {
        self.pieces.concat()
    }
}

impl http_body::Body for RequestBody {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let Some(piece) = this.pieces.get(this.next) else {
            return std::task::Poll::Ready(None);
        };
        let end = piece.len().min(this.taken + FRAME_BYTES);
        let part = piece.slice(this.taken..end);
        this.remaining -= part.len() as u64;
        if end == piece.len() {
            this.next += 1;
            this.taken = 0;
        } else {
            this.taken = end;
        }
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(part))))
    }

    fn is_end_stream(&self) -> bool {
        self.next >= self.pieces.len()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

impl Encoded {
    /// `session`'s encoded messages, it now the most recent.
    fn of(&mut self, session: &str) -> &mut Conversation {
        let entry = match self.sessions.iter().position(|(id, _)| id == session) {
            Some(at) => self.sessions.remove(at),
            None => (session.to_owned(), Conversation::default()),
        };
        if self.sessions.len() >= ENCODED_SESSIONS {
            self.sessions.remove(0);
        }
        self.sessions.push(entry);
        let last = self.sessions.len() - 1;
        &mut self.sessions[last].1
    }
}

impl OpenAiModel {
    pub(crate) fn new(spec: OpenAiSpec) -> anyhow::Result<Self> {
        let client = crate::http::client(|builder| {
            builder
                .connect_timeout(Duration::from_secs(20))
                // Between two chunks of a stream: a provider that goes silent this long is gone.
                .read_timeout(Duration::from_secs(300))
        })?;
        Ok(Self {
            spec,
            client,
            encoded: std::sync::Mutex::default(),
            framing: std::sync::Mutex::default(),
        })
    }

    /// A user message: text, and the images as `image_url` parts when the model takes
    /// images (otherwise a note in the text says they were left out).
    fn user_message(&self, text: &str, images: &[PromptImage]) -> Value {
        if images.is_empty() {
            return json!({"role": "user", "content": text});
        }
        if !self.spec.images {
            let note = format!(
                "\n[{} image(s) omitted: the model `{}` does not take images here; set \
                 `images = true` in its profile if it does]",
                images.len(),
                self.spec.model
            );
            return json!({"role": "user", "content": format!("{text}{note}")});
        }
        let mut parts = vec![json!({"type": "text", "text": text})];
        parts.extend(images.iter().map(|image| {
            json!({"type": "image_url", "image_url": {
                "url": format!("data:{};base64,{}", image.mime_type, image.data)
            }})
        }));
        json!({"role": "user", "content": parts})
    }

    fn url(&self) -> String {
        format!("{}/chat/completions", self.spec.base_url.trim_end_matches('/'))
    }

    /// One message of the conversation in OpenAI's format.
    fn message(&self, message: &Message) -> Value {
        match message {
            Message::User { text, images } => self.user_message(text, images),
            Message::Notice { text } => json!({"role": "user", "content": text}),
            Message::Assistant { text, reasoning, tool_calls } => {
                let mut out = json!({"role": "assistant", "content": text});
                if !tool_calls.is_empty() {
                    out["tool_calls"] = tool_calls
                        .iter()
                        .map(|call| {
                            json!({"id": call.id, "type": "function",
                               "function": {"name": call.name, "arguments": call.arguments}})
                        })
                        .collect();
                    // DeepSeek: a message that made tool calls keeps its reasoning.
                    if let Some(reasoning) = reasoning {
                        out["reasoning_content"] = json!(reasoning);
                    }
                }
                out
            }
            Message::Tool { call_id, text, .. } => {
                json!({"role": "tool", "tool_call_id": call_id, "content": text})
            }
        }
    }

    /// The request body of `session`'s request: the conversation in OpenAI's message format,
    /// the tools as functions. Each message is encoded once: the encodings of the messages a
    /// session sent before are kept (by the message's address, the message held meanwhile)
    /// and shared with the body, so a request costs the encoding of what is new, however long
    /// the conversation is.
    pub(crate) fn body(&self, session: &str, request: &ModelRequest) -> RequestBody {
        let (system, rest) = self.framing(request);
        let mut encoded = crate::sync::lock(&self.encoded);
        let conversation = encoded.of(session);
        let same = conversation
            .messages
            .iter()
            .zip(&request.messages)
            .take_while(|((held, _), message)| Arc::ptr_eq(held, message))
            .count();
        conversation.truncate(same);
        for message in &request.messages[same..] {
            // Kept for the session's life, so in a buffer of its exact size: the encoder grows
            // its buffer by doubling, and `Bytes` keeps a vector's spare capacity (up to as
            // much again as the message, an image's base64 included).
            let json = format!(",{}", self.message(message)).into_bytes().into_boxed_slice();
            conversation.messages.push((Arc::clone(message), bytes::Bytes::from(json)));
        }
        conversation.gather();
        let mut pieces = Vec::with_capacity(conversation.blocks.len() + OPEN_MESSAGES + 2);
        pieces.push(system);
        pieces.extend(conversation.pieces());
        pieces.push(rest);
        RequestBody::new(pieces)
    }

    /// The encodings that open the body (with the system message) and close it (the tools and
    /// settings after the messages), made anew only when they differ from the last request's.
    fn framing(&self, request: &ModelRequest) -> (bytes::Bytes, bytes::Bytes) {
        let mut framing = crate::sync::lock(&self.framing);
        let system = match &framing.system {
            Some((text, json)) if *text == request.system => json.clone(),
            _ => {
                let message = json!({"role": "system", "content": request.system});
                let json = bytes::Bytes::from(format!("{{\"messages\":[{message}"));
                framing.system = Some((request.system.clone(), json.clone()));
                json
            }
        };
        let rest = match &framing.rest {
            Some((tools, effort, json))
                // A shared schema is equal at once; one made for each request (the `task`
                // tool's) is compared.
                if *effort == request.effort && *tools == request.tools =>
            {
                json.clone()
            }
            _ => {
                let json = bytes::Bytes::from(self.rest(request));
                framing.rest = Some((request.tools.clone(), request.effort.clone(), json.clone()));
                json
            }
        };
        (system, rest)
    }

    /// `],` and the body's members after `messages`: the model, streaming, the tools as
    /// functions, the profile's extra fields and those of the effort.
    fn rest(&self, request: &ModelRequest) -> String {
        let mut rest = json!({
            "model": self.spec.model,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !request.tools.is_empty() {
            rest["tools"] = request
                .tools
                .iter()
                .map(|tool| {
                    json!({"type": "function", "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.input_schema,
                    }})
                })
                .collect();
        }
        if let Value::Object(rest) = &mut rest {
            let level = request
                .effort
                .as_deref()
                .and_then(|effort| self.spec.efforts.iter().find(|(name, _)| name == effort));
            let fields = self.spec.extra.iter().chain(level.map(|(_, f)| f).into_iter().flatten());
            // The conversation is hotsh's to send.
            for (key, value) in fields.filter(|(key, _)| *key != "messages") {
                rest.insert(key.clone(), value.clone());
            }
        }
        // `rest` is an object with at least `model`: its members follow the messages.
        format!("],{}", &rest.to_string()[1..])
    }

    async fn attempt(
        &self,
        body: &RequestBody,
        events: &mpsc::UnboundedSender<ModelEvent>,
        shown: &mut bool,
    ) -> Result<(), Failure> {
        let mut post = self
            .client
            .post(self.url())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            // A clone of the body shares its pieces: another attempt copies nothing.
            .body(reqwest::Body::wrap(body.clone()));
        if let Some(key) = &self.spec.key {
            post = post.bearer_auth(&key.value);
        }
        let response = post.send().await.map_err(|error| self.unreachable(&error))?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let text = response.text().await.unwrap_or_default();
            return Err(self.http_failure(status.as_u16(), &text, retry_after));
        }
        // Whether the connection may serve another request once this answer's body has ended
        // (HTTP/1.1 keeps it unless the server says it closes it).
        let kept = response.version() == reqwest::Version::HTTP_11
            && !response.headers().get_all(reqwest::header::CONNECTION).iter().any(|value| {
                value.to_str().is_ok_and(|v| v.to_ascii_lowercase().contains("close"))
            });
        let limit = self.spec.answer_limit;
        let body = lines(Box::pin(response.bytes_stream()), limit + LINE_FRAMING);
        let mut stream = eventsource_stream::Eventsource::eventsource(Box::pin(body));
        let mut calls: BTreeMap<u64, PartialCall> = BTreeMap::new();
        let mut done = false;
        // What the answer streamed so far (text, reasoning, arguments), against the limit.
        let mut content = 0usize;
        let too_long = || {
            Failure::Final(format!(
                "the answer from {} passed {} tokens (about {} KiB) without ending, and was \
                 stopped; the session goes on (raise max_answer_tokens in the model's profile \
                 or [session] for longer answers)",
                self.spec.base_url,
                limit / ANSWER_BYTES_PER_TOKEN,
                limit >> 10
            ))
        };
        while let Some(event) = stream.next().await {
            let event = event.map_err(|error| match error {
                eventsource_stream::EventStreamError::Transport(LineError::TooLong(_)) => {
                    too_long()
                }
                error => Failure::Dropped(format!(
                    "the answer from {} broke off: {error}",
                    self.spec.base_url
                )),
            })?;
            if event.data.trim() == "[DONE]" {
                done = true;
                break;
            }
            if event.data.trim().is_empty() {
                continue;
            }
            let chunk: Value = serde_json::from_str(&event.data).map_err(|error| {
                Failure::Final(format!(
                    "{} sent a chunk that is not JSON ({error}): {}",
                    self.spec.base_url,
                    event.data.chars().take(200).collect::<String>()
                ))
            })?;
            if let Some(message) = chunk["error"]["message"].as_str() {
                return Err(Failure::Final(format!(
                    "{} reported an error mid-answer: {message}",
                    self.spec.base_url
                )));
            }
            if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
                let _ = events.send(ModelEvent::Usage(Usage {
                    prompt_tokens: usage["prompt_tokens"].as_u64(),
                    completion_tokens: usage["completion_tokens"].as_u64(),
                    total_tokens: usage["total_tokens"].as_u64(),
                    // DeepSeek's name, then OpenAI's.
                    cached_tokens: usage["prompt_cache_hit_tokens"]
                        .as_u64()
                        .or_else(|| usage["prompt_tokens_details"]["cached_tokens"].as_u64()),
                }));
            }
            let Some(choice) = chunk["choices"].get(0) else { continue };
            let delta = &choice["delta"];
            let arguments = delta["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|f| f["function"]["arguments"].as_str().map_or(0, str::len));
            content += ["reasoning_content", "content"]
                .iter()
                .map(|key| delta[*key].as_str().map_or(0, str::len))
                .chain(arguments)
                .sum::<usize>();
            if content > limit {
                return Err(too_long());
            }
            if let Some(reasoning) = delta["reasoning_content"].as_str().filter(|r| !r.is_empty()) {
                *shown = true;
                let _ = events.send(ModelEvent::Reasoning(reasoning.to_owned()));
            }
            if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                *shown = true;
                let _ = events.send(ModelEvent::Text(text.to_owned()));
            }
            for fragment in delta["tool_calls"].as_array().into_iter().flatten() {
                let index = fragment["index"].as_u64().unwrap_or(calls.len() as u64);
                let call = calls.entry(index).or_default();
                if let Some(id) = fragment["id"].as_str() {
                    call.id.push_str(id);
                }
                if let Some(name) = fragment["function"]["name"].as_str() {
                    call.name.push_str(name);
                }
                if let Some(arguments) = fragment["function"]["arguments"].as_str() {
                    call.arguments.push_str(arguments);
                }
                *shown = true;
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                let _ = events.send(ModelEvent::Finished(reason.to_owned()));
            }
        }
        if !done {
            let message = format!(
                "the answer from {} stopped before it was complete (no [DONE])",
                self.spec.base_url
            );
            return Err(if *shown { Failure::Final(message) } else { Failure::Dropped(message) });
        }
        for (position, call) in calls.into_values().enumerate() {
            let id = if call.id.is_empty() { format!("call_{position}") } else { call.id };
            let _ = events.send(ModelEvent::ToolCall(ModelToolCall {
                id,
                name: call.name,
                arguments: call.arguments,
            }));
        }
        // The answer is whole at its `[DONE]`, but its body may end a moment later (a server
        // writes the two apart, and they reach hotsh apart). A body dropped before its end
        // costs its connection (hyper closes it unless the end is already in hand), and the
        // next request a new one: over TLS a new handshake. So a connection the server keeps
        // is read to its body's end, away from the turn, for a short while and a few events
        // at most. (One it closes has nothing to keep: dropped now, as it always was.)
        if !kept {
            return Ok(());
        }
        let base_url = self.spec.base_url.clone();
        tokio::spawn(async move {
            let rest = stream.take(DRAIN_EVENTS).count();
            match tokio::time::timeout(DRAIN_LIMIT, rest).await {
                Ok(0) => {}
                Ok(events) => tracing::debug!(%base_url, events, "events after [DONE] passed over"),
                Err(_) => {
                    tracing::debug!(%base_url, "an answer's body did not end after [DONE]; its connection is let go")
                }
            }
        });
        Ok(())
    }

    fn unreachable(&self, error: &reqwest::Error) -> Failure {
        let mut cause = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(inner) = source {
            cause = format!("{cause}: {inner}");
            source = inner.source();
        }
        Failure::Retry {
            message: format!("cannot reach {}: {cause}", self.spec.base_url),
            after: None,
        }
    }

    /// What an HTTP error status means for the user.
    fn http_failure(&self, status: u16, body: &str, retry_after: Option<Duration>) -> Failure {
        let detail = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| body.chars().take(300).collect());
        let base = &self.spec.base_url;
        match status {
            401 | 403 => Failure::Auth(match &self.spec.key {
                Some(key) => format!(
                    "{base} refused the API key from {} (HTTP {status}): {detail}",
                    key.from
                ),
                None => format!(
                    "{base} wants an API key (HTTP {status}): set HOTSH_API_KEY, or the \
                     provider's key variable (DEEPSEEK_API_KEY, OPENAI_API_KEY): {detail}"
                ),
            }),
            404 => Failure::Final(format!(
                "{base} does not know the model `{}` (HTTP 404): {detail}",
                self.spec.model
            )),
            400 | 413 if is_context_too_long(&detail) => Failure::TooLong(format!(
                "the conversation is too long for `{}`'s context (HTTP {status}): {detail}",
                self.spec.model
            )),
            429 => Failure::Retry {
                message: format!("{base} is rate limiting (HTTP 429): {detail}"),
                after: Some(retry_after.unwrap_or(FIRST_BACKOFF)),
            },
            500..=599 => Failure::Retry {
                message: format!("{base} failed (HTTP {status}): {detail}"),
                after: None,
            },
            _ => Failure::Final(format!("{base} refused the request (HTTP {status}): {detail}")),
        }
    }
}

fn is_context_too_long(detail: &str) -> bool {
    let detail = detail.to_ascii_lowercase();
    ["context length", "context_length", "maximum context", "too many tokens", "context window"]
        .iter()
        .any(|phrase| detail.contains(phrase))
}

/// A tool call being assembled from fragments.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// How an attempt failed.
#[derive(Debug)]
enum Failure {
    /// Worth another attempt if nothing was shown yet (after this long, when the provider
    /// said).
    Retry { message: String, after: Option<Duration> },
    /// The connection broke: another attempt if nothing was shown yet.
    Dropped(String),
    /// No retry helps.
    Final(String),
    /// The key is missing or refused: no retry helps.
    Auth(String),
    /// The request does not fit the model's context: compacting it may help.
    TooLong(String),
}

impl Model for OpenAiModel {
    fn respond(
        &self,
        session: &str,
        request: &ModelRequest,
        events: mpsc::UnboundedSender<ModelEvent>,
    ) -> BoxFuture<'_, Result<(), ModelError>> {
        let body = self.body(session, request);
        Box::pin(async move {
            let mut backoff = FIRST_BACKOFF;
            let mut attempt = 1;
            loop {
                let mut shown = false;
                let failure = match self.attempt(&body, &events, &mut shown).await {
                    Ok(()) => return Ok(()),
                    Err(failure) => failure,
                };
                let (message, wait) = match failure {
                    Failure::Final(message) => return Err(ModelError::Provider(message)),
                    Failure::Auth(message) => return Err(ModelError::Auth(message)),
                    Failure::TooLong(message) => return Err(ModelError::ContextTooLong(message)),
                    Failure::Retry { message, after } => (message, after.unwrap_or(backoff)),
                    Failure::Dropped(message) => (message, backoff),
                };
                if shown || attempt >= ATTEMPTS {
                    let tries = if attempt > 1 {
                        format!(" (after {attempt} attempts)")
                    } else {
                        String::new()
                    };
                    return Err(ModelError::Provider(format!("{message}{tries}")));
                }
                if wait > MAX_RETRY_AFTER {
                    return Err(ModelError::Provider(format!(
                        "{message}; it asks to wait {} s, longer than hotsh waits",
                        wait.as_secs()
                    )));
                }
                tracing::info!(attempt, wait_ms = wait.as_millis() as u64, "{message}; retrying");
                tokio::time::sleep(wait).await;
                backoff *= 2;
                attempt += 1;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> OpenAiModel {
        let spec = OpenAiSpec {
            model: "m".into(),
            base_url: "http://127.0.0.1:1/v1".into(),
            key: None,
            extra: serde_json::Map::from_iter([("temperature".to_owned(), json!(0.5))]),
            images: false,
            efforts: vec![(
                "high".to_owned(),
                serde_json::Map::from_iter([("reasoning_effort".to_owned(), json!("high"))]),
            )],
            default_effort: None,
            answer_limit: 1 << 20,
        };
        OpenAiModel::new(spec).expect("a model")
    }

    fn user(text: &str) -> Arc<Message> {
        Arc::new(Message::User { text: text.into(), images: Vec::new() })
    }

    fn parsed(body: &RequestBody) -> Value {
        let bytes = body.to_vec();
        assert_eq!(http_body::Body::size_hint(body).exact(), Some(bytes.len() as u64));
        serde_json::from_slice(&bytes).expect("the body is JSON")
    }

    #[test]
    fn bodies_reuse_what_was_encoded_and_never_send_a_stale_message() {
        let model = model();
        let (a, b) = (user("a"), user("b"));
        let request = |messages: Vec<Arc<Message>>| ModelRequest {
            system: "sys".into(),
            messages,
            tools: Vec::new(),
            effort: None,
        };
        let first = parsed(&model.body("s", &request(vec![Arc::clone(&a), Arc::clone(&b)])));
        assert_eq!(first["messages"][0], json!({"role": "system", "content": "sys"}));
        assert_eq!(first["messages"][2], json!({"role": "user", "content": "b"}));
        assert_eq!((&first["model"], &first["temperature"]), (&json!("m"), &json!(0.5)));
        let c = user("c");
        let second = parsed(&model.body("s", &request(vec![Arc::clone(&a), Arc::clone(&b), c])));
        assert_eq!(second["messages"].as_array().map(Vec::len), Some(4));
        assert_eq!(second["messages"][3]["content"], "c");
        // Another message where `b` was (a compaction rewrote the history): encoded anew.
        let third = parsed(&model.body("s", &request(vec![Arc::clone(&a), user("B")])));
        assert_eq!(third["messages"].as_array().map(Vec::len), Some(3));
        assert_eq!(third["messages"][2]["content"], "B");
        // Another session does not see this one's messages.
        let other = parsed(&model.body("t", &request(vec![user("x")])));
        assert_eq!(other["messages"][1]["content"], "x");
        assert_eq!(crate::sync::lock(&model.encoded).sessions.len(), 2);
    }

    #[test]
    fn a_body_is_handed_over_whole_in_frames_a_sixteenth_of_a_write() {
        let pieces: Vec<bytes::Bytes> =
            [vec![b'a'; 10], vec![b'b'; 300 << 10], vec![b'c'; 5]].map(Into::into).into();
        let whole = pieces.concat();
        let mut body = RequestBody::new(pieces);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let (mut sent, mut frames) = (Vec::new(), Vec::new());
        while !http_body::Body::is_end_stream(&body) {
            let polled = http_body::Body::poll_frame(std::pin::Pin::new(&mut body), &mut cx);
            let std::task::Poll::Ready(Some(Ok(frame))) = polled else {
                panic!("a body not at its end has a frame ready");
            };
            let data = frame.into_data().expect("data");
            frames.push(data.len());
            sent.extend_from_slice(&data);
            let left = http_body::Body::size_hint(&body).exact();
            assert_eq!(left, Some((whole.len() - sent.len()) as u64));
        }
        assert_eq!(sent, whole);
        // The large piece in frames of FRAME_BYTES (the client writes sixteen at a time), the
        // small ones as they are.
        assert_eq!(frames.len(), 1 + (300 << 10) / FRAME_BYTES + 1 + 1, "{frames:?}");
        assert!(frames.iter().all(|&len| len <= FRAME_BYTES && len > 0), "{frames:?}");
        assert_eq!(frames.iter().filter(|&&len| len == FRAME_BYTES).count(), 37);
        let end = http_body::Body::poll_frame(std::pin::Pin::new(&mut body), &mut cx);
        assert!(matches!(end, std::task::Poll::Ready(None)));
    }

    #[test]
    fn a_long_conversation_is_sent_in_few_pieces_and_a_rewrite_inside_a_block_is_sent_as_it_is() {
        let model = model();
        let request = |messages: &[Arc<Message>]| ModelRequest {
            system: "sys".into(),
            messages: messages.to_vec(),
            tools: Vec::new(),
            effort: None,
        };
        let fresh =
            |messages: &[Arc<Message>]| self::model().body("s", &request(messages)).to_vec();
        let mut messages = Vec::new();
        for turn in 0..300 {
            messages.push(user(&format!("{turn} {}", "a".repeat(4096))));
            let body = model.body("s", &request(&messages));
            let bytes: usize = body.pieces.iter().map(bytes::Bytes::len).sum();
            // The system message, the blocks, at most OPEN_MESSAGES messages, the rest.
            assert!(
                body.pieces.len() <= 2 + OPEN_MESSAGES + bytes / BLOCK_BYTES,
                "{} pieces for {bytes} bytes",
                body.pieces.len()
            );
            if turn % 100 == 99 {
                assert_eq!(body.to_vec(), fresh(&messages), "after {} messages", turn + 1);
            }
        }
        let first = {
            let mut encoded = crate::sync::lock(&model.encoded);
            let blocks = &encoded.of("s").blocks;
            assert!(blocks.len() >= 4, "{} blocks", blocks.len());
            // Held, so that nothing else is given its memory meanwhile.
            blocks[0].1.clone()
        };
        // A rewrite in the middle of the first block (a compaction, a new session's history).
        messages.truncate(20);
        messages.push(user("B"));
        let body = model.body("s", &request(&messages));
        assert_eq!(body.to_vec(), fresh(&messages));
        assert_eq!(parsed(&body)["messages"][21]["content"], "B");
        // The messages kept from the first block no longer hold it.
        let mut encoded = crate::sync::lock(&model.encoded);
        for (_, json) in &encoded.of("s").messages {
            let inside = first.as_ptr_range().contains(&json.as_ptr());
            assert!(!inside, "a kept message still in the old block");
        }
        drop(encoded);
        // And the conversation goes on from there.
        messages.push(user("C"));
        assert_eq!(model.body("s", &request(&messages)).to_vec(), fresh(&messages));
    }

    #[test]
    fn a_body_is_framed_by_the_requests_own_system_prompt_tools_and_effort() {
        let model = model();
        let tool = |name: &str, schema: Value| ToolDefinition {
            name: name.into(),
            description: format!("{name} it"),
            input_schema: schema.into(),
            effects: crate::model::ToolEffects::default(),
        };
        let read = tool("read", json!({"type": "object"}));
        let request =
            |system: &str, tools: Vec<ToolDefinition>, effort: Option<&str>| ModelRequest {
                system: system.into(),
                messages: vec![user("a")],
                tools,
                effort: effort.map(str::to_owned),
            };
        let names = |body: &Value| -> Vec<String> {
            let tools = body["tools"].as_array().cloned().unwrap_or_default();
            tools.iter().map(|t| t["function"]["name"].as_str().unwrap_or("").to_owned()).collect()
        };
        let requests = [
            request("one", vec![read.clone()], None),
            request("one", vec![read.clone()], None),
            request("two", vec![read.clone()], None),
            request("two", vec![read.clone()], Some("high")),
            request("two", vec![read.clone()], None),
            // An equal schema made apart is the same schema.
            request("two", vec![tool("read", json!({"type": "object"}))], None),
            request("two", vec![read.clone(), tool("write", json!({"required": ["path"]}))], None),
            request("two", Vec::new(), None),
            request("two", vec![tool("read", json!({"type": "string"}))], None),
        ];
        for request in &requests {
            let framed = model.body("s", request).to_vec();
            // What a model that never sent a request encodes.
            let fresh = self::model().body("s", request).to_vec();
            assert_eq!(String::from_utf8_lossy(&framed), String::from_utf8_lossy(&fresh));
            let body = parsed(&model.body("s", request));
            assert_eq!(body["messages"][0]["content"], request.system);
            let effort = request.effort.as_ref().map(|_| json!("high"));
            assert_eq!(body.get("reasoning_effort"), effort.as_ref());
            assert_eq!(
                names(&body),
                request.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>()
            );
            for (sent, tool) in body["tools"].as_array().into_iter().flatten().zip(&request.tools) {
                assert_eq!(sent["function"]["parameters"], *tool.input_schema);
            }
        }
    }
}
