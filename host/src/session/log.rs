//! The session log: one append-only [JSON Lines](https://jsonlines.org) file per session, the
//! store every session state is folded from.
//!
//! # Where
//!
//! `<data dir>/sessions/<session id>.jsonl` (the data directory is `--data-dir`,
//! `$HOTSH_DATA_DIR`, `$XDG_DATA_HOME/hotsh` or `~/.local/share/hotsh`). Directories are 0700,
//! files 0600. `<session id>.lock` beside it is held (`flock`) by the one process writing the
//! log and names that process.
//!
//! # Envelope
//!
//! Every line is one JSON object:
//!
//! ```json
//! {"v":1,"seq":7,"at":"2026-11-30T20:31:02.118Z","type":"agent_text","data":{"text":"Hi"}}
//! ```
//!
//! - `v`: the format version of the record (this module writes [`FORMAT_VERSION`]).
//! - `seq`: 1 for the first record, then one more per record; never reused. A record whose
//!   `seq` is not the one due makes the log damaged at its line: nothing hotsh wrote looks like
//!   that, so the log was changed by something else (a command appending a record, say).
//! - `at`: when the record was written, RFC 3339 in UTC with milliseconds.
//! - `type` and `data`: what happened; one section per type below.
//!
//! # Record types
//!
//! What the client saw (replayed on `session/load`):
//!
//! - `agent_text` `{text}`, `agent_thought` `{text}`: a chunk of the agent's reply or
//!   reasoning, as streamed.
//! - `tool_call_started` `{call_id, tool, card, raw_input, arguments}`: a tool call's card was
//!   drawn. `card` is `{"terminal": {command, description, cwd, exit}}` or
//!   `{"generic": {title, kind, content}}`; `arguments` is the model's raw argument text.
//! - `tool_output` `{call_id, text}`: live output of a call's command. At most 1 MiB is logged
//!   per call; then one `tool_output` carries a `[… N bytes of output not logged …]` marker.
//! - `tool_call_finished` `{call_id, card, status, raw_output, error, output_text,
//!   output_in_result}`: the final card; `status` is `completed`, `failed` or `running` (a
//!   background task's card left open). `output_text` is what the tool returned (used to draw
//!   the card again on load); since hotsh logs each output once, it is absent and
//!   `output_in_result: true` says it is the text of the next `tool_result` (logs written
//!   before carry `output_text` itself; an older reader of a newer log draws the card as
//!   logged).
//! - `plugin_changed` `{call_id, title, detail, failed}`: a plugin was reloaded, rejected or
//!   unloaded while the session was open.
//! - `host_note` `{call_id, title, detail}`: what the host said about the session itself (plan
//!   mode entered while background tasks with write access ran).
//! - `plan` `{entries}`: the model's plan, whole (`{step, status, priority}` each).
//! - `usage` `{used, size, estimated, cached}`: the context use after a model answer or a
//!   compaction (tokens in the context, the window, whether `used` is hotsh's estimate, the
//!   prompt tokens the provider's cache served). Only the last is shown again on load.
//! - `compaction_started` `{id, trigger}`, `compaction_summary` `{id, text}` (a chunk of the
//!   summary as the model wrote it), `compaction_ended` `{id, ended: {status, trigger,
//!   tokens_before, tokens_after, error}}`: a compaction as the client saw it; `trigger` is
//!   `auto`, `overflow` or `manual`, `status` `completed`, `failed` or `cancelled`.
//! - `hook_ran` `{call_id, run: {event, command, source, status, failed, output, outcome}}`: a
//!   command hook ran (docs/hooks.md): its event, its command, the file it came from, how it
//!   ended (`exit 0`, `exit 2`, `timed out`, `not run`…), what it printed (bounded) and what it
//!   decided, in words.
//! - `subagent` `{call_id, child, title, agent, state}`: a subagent (a child session) that
//!   tool call `call_id` runs (its card carries `session`, the child's id): announced
//!   `{"state": "running"}`, then each change (`requires_action` while the user is asked for
//!   it, `idle` with `stop` `end_turn`, `cancelled`, `max_turn_requests` or `failed`).
//!
//! What the model got (folded into the conversation history):
//!
//! - `session` `{session_id, cwd, created_at, agent, parent, forked_from}`: always the first
//!   record. `parent` (a subagent's only) is `{session_id, call_id, agent, description, depth,
//!   max_mode, tools, instructions}`: the session and card that opened it, the agent
//!   definition it runs and what that definition gave it, how deep it nests, the widest
//!   sandbox mode it may choose. `forked_from` (a fork's only) is the session whose records
//!   follow (copied at the fork, less commands' live output).
//! - `prompt` `{text, blocks, images}`: the user's prompt: the text the model reads, the
//!   client's content blocks as sent (ACP JSON), shown again on load, and its images
//!   (`{mime_type, data}`, base64) for models that take them (absent when there are none).
//! - `assistant_message` `{text, reasoning, tool_calls, usage, finish_reason}`: one complete
//!   model response; `tool_calls` are `{id, name, arguments}`; `reasoning` (when the model
//!   showed any), `usage` (`{prompt_tokens, completion_tokens, total_tokens, cached_tokens}`,
//!   when the provider reported it) and `finish_reason` may be absent.
//! - `tool_result` `{call_id, text, is_error, after_output}`: what the model was told of one
//!   tool call (`call_id` is the model's id for it). A command's output is logged once: when
//!   the text begins with what the call's `tool_output` records logged (at least
//!   [`SHARED_MIN`] bytes of it), the record is written with `v` 2, `after_output` `{card,
//!   bytes}` and only the rest as `text`: the text is the first `bytes` bytes of card
//!   `card`'s logged output followed by `text`. A reader puts them back (a reference to
//!   output the log does not hold makes the log damaged at that line).
//! - `command` `{text, blocks}`: a slash command the user typed (`/compact …`): shown again on
//!   load, not part of the model's history.
//! - `compaction` `{id, trigger, focus, summary, kept_prompts, replaced, tokens_before,
//!   tokens_after}`: the first `replaced` messages of the history became `kept_prompts` (as
//!   user messages) followed by the summary; the records before it stay in the log.
//! - `notice` `{text, task_id}`: a note the host gave the model (e.g. that a background task
//!   ended), in the history from here on.
//!
//! How turns and tasks went:
//!
//! - `turn_ended` `{outcome, message}`: `outcome` is `end_turn`, `cancelled`, `failed`
//!   (`message` says why) or `max_turn_requests`.
//! - `cancel_requested` `{}`: the client asked to cancel the running turn.
//! - `task_started` `{task_id, call_id, command, output_path}`: a background task started from
//!   tool call `call_id`.
//! - `model_chosen` `{model}`: the session switched to this model (a name as `--model`
//!   takes it); the last one counts.
//! - `effort_chosen` `{effort}`: the session's reasoning effort (a level its model's profile
//!   names); the last one counts.
//! - `sandbox_mode` `{mode}`: the session's sandbox override (`read-only`, `workspace-write`,
//!   `danger-full-access`); the last one counts.
//! - `session_mode` `{mode}`: `default` or `plan`; the last one counts. Independent of the
//!   override: leaving plan finds the override as it was.
//! - `escalation` `{call_id, command, justification, mode, answer}`: a command asked for a
//!   wider mode; `answer` is `allowed`, `rejected`, `cancelled`, `unavailable` or `refused`
//!   (plan mode refused it at the gate).
//! - `rule_added` `{rule}`, `rule_removed` `{rule}`: the user allowed the calls a rule covers
//!   for the rest of the session, or removed such a rule (`/permissions remove`).
//! - `question` `{call_id, title, answer}`: the user was asked something that is not an
//!   escalation (whether a project's hooks may run; a call a hook asked about), and answered
//!   with this option id, or `cancelled`, `unavailable`.
//! - `task_ended` `{task_id, state, exit_code, signal, with_agent, sandbox}`: it ended
//!   (`state` `exited` or `killed`); `with_agent` is true when the agent that ran it went
//!   away first (recorded when the session is next loaded); `sandbox` `{mode, denied}` is the
//!   mode it ran under and the access its end looks denied (absent for a gone agent's task).
//!
//! `log_format.jsonl` beside this file holds one record of every type as this module writes
//! it; a test keeps it so, so the format changes only on purpose.
//! - `task_reported` `{task_id}`: the model learned how the task ended from a tool (it
//!   killed it, or read its end), so no notice is due for it.
//!
//! # Compatibility
//!
//! Readers ignore fields they do not know, and skip records of types they do not know (a
//! newer agent may add both). A change that older readers would misread gets a new `v`; a
//! reader refuses a log that holds a record with a `v` newer than its own, naming the file,
//! rather than misread it. A crash can tear at most the last line: a reader drops a last line
//! that is not a complete record (and says so in its log) and keeps every earlier record.

pub(crate) use hotsh_core::session::log::{Fact, OutputPrefix, Record, SessionMeta, TurnOutcome};

use super::SessionEvent;
use serde::Deserialize as _;
use std::path::{Path, PathBuf};

/// The newest format version this module writes and reads: 2 for a `tool_result` that
/// goes on from a command's logged output, 1 for everything else.
pub(crate) const FORMAT_VERSION: u32 = 2;

/// The shortest start of a command's output a `tool_result` refers to rather than repeats.
pub(crate) const SHARED_MIN: usize = 256;

/// The output logged for each card since the last `tool_result`, in log order: what the
/// writer refers to (`share`) and the reader restores from (`restore`).
#[derive(Debug, Default)]
pub(crate) struct SharedOutput {
    by_card: std::collections::HashMap<crate::session::ToolCallId, String>,
}

impl SharedOutput {
    fn note(&mut self, record: &Record) {
        match record {
            Record::Event(SessionEvent::ToolOutput { call_id, text }) => {
                match self.by_card.get_mut(call_id) {
                    Some(output) => output.push_str(text),
                    None => {
                        self.by_card.insert(call_id.clone(), text.clone());
                    }
                }
            }
            // Calls run one after the other: a result ends what came before it.
            Record::Fact(Fact::ToolResult { .. }) => self.by_card.clear(),
            _ => {}
        }
    }

    /// `record` as the log keeps it: a tool result whose text begins with what its call's
    /// one card logged as output refers to that output instead of repeating it.
    pub(crate) fn share(&mut self, record: Record) -> Record {
        let shared = match (&record, self.by_card.len()) {
            (Record::Fact(Fact::ToolResult { text, after_output: None, .. }), 1) => {
                self.by_card.iter().next().and_then(|(card, output)| {
                    let bytes = shared_prefix(output, text);
                    (bytes >= SHARED_MIN).then(|| OutputPrefix { card: card.clone(), bytes })
                })
            }
            _ => None,
        };
        self.note(&record);
        match (record, shared) {
            (Record::Fact(Fact::ToolResult { call_id, text, is_error, .. }), Some(prefix)) => {
                Record::Fact(Fact::ToolResult {
                    call_id,
                    text: text[prefix.bytes..].to_owned(),
                    is_error,
                    after_output: Some(prefix),
                })
            }
            (record, _) => record,
        }
    }

    /// `record` as it was before [`SharedOutput::share`]; the error says why it cannot be.
    pub(crate) fn restore(&mut self, record: Record) -> Result<Record, String> {
        let record = match record {
            Record::Fact(Fact::ToolResult { call_id, text, is_error, after_output: Some(at) }) => {
                let output = self.by_card.get(&at.card).map(String::as_str).unwrap_or_default();
                let Some(start) = output.get(..at.bytes) else {
                    return Err(format!(
                        "its tool result refers to {} bytes of the output of {}, which the log \
                         does not hold",
                        at.bytes, at.card
                    ));
                };
                let text = format!("{start}{text}");
                Record::Fact(Fact::ToolResult { call_id, text, is_error, after_output: None })
            }
            record => record,
        };
        self.note(&record);
        Ok(record)
    }
}

/// The length of the longest common start of `a` and `b`, on a character boundary.
fn shared_prefix(a: &str, b: &str) -> usize {
    let same = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    hotsh_core::text::floor_char_boundary(b, same)
}

/// The format version a record is written with.
fn version_of(record: &Record) -> u32 {
    match record {
        Record::Fact(Fact::ToolResult { after_output: Some(_), .. }) => 2,
        _ => 1,
    }
}

/// Why a log could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("cannot read the session log {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "the session log {path} was written by a newer hotsh (record format {found}; this one reads up to {FORMAT_VERSION}); use that hotsh or a newer one"
    )]
    Newer { path: PathBuf, found: u32 },
    #[error("the session log {path} is damaged at line {line}: {reason}")]
    Damaged { path: PathBuf, line: usize, reason: String },
    /// The reading was given up by the one it was for (never reaches anyone else).
    #[error("the reading of a session log was given up")]
    Gone,
}

/// Serialises one record as a log line (without the newline). The keys come in the
/// documented order, `type` before `data`, which lets a reader take `data` in one pass.
pub(crate) fn line(seq: u64, record: &Record) -> serde_json::Result<Vec<u8>> {
    // The enums serialise as `{"type":…,"data":…}`: the envelope goes in front of it.
    let tagged = match record {
        Record::Event(event) => serde_json::to_vec(event)?,
        Record::Fact(fact) => serde_json::to_vec(fact)?,
    };
    let at = humantime::format_rfc3339_millis(std::time::SystemTime::now());
    let version = version_of(record);
    let mut line = format!("{{\"v\":{version},\"seq\":{seq},\"at\":\"{at}\",").into_bytes();
    line.extend_from_slice(tagged.get(1..).unwrap_or_default());
    Ok(line)
}

/// Reads a whole log: its records in order.
pub(crate) fn read(path: &Path) -> Result<Vec<Record>, ReadError> {
    let mut records = Vec::new();
    read_each(path, |record| records.push(record))?;
    Ok(records)
}

/// Reads the log at `path` a piece at a time, handing each record to `each` as it is read
/// (see [`parse_from`]). A long log is read on a thread of its own when there are cores for
/// it, which parses every other batch of its lines and leaves the others for the caller to
/// parse before it folds them (`each`): the parse is most of a load's work, the fold less.
pub(crate) fn read_each(path: &Path, mut each: impl FnMut(Record)) -> Result<Extent, ReadError> {
    let io = |source| ReadError::Io { path: path.to_owned(), source };
    let file = open_regular(path, false).map_err(io)?;
    let long = file.metadata().is_ok_and(|meta| meta.len() >= PARSE_APART);
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    if !long || cores < 2 {
        return parse_from(path, file, each);
    }
    std::thread::scope(|scope| {
        let (handing, taken) = std::sync::mpsc::sync_channel(BATCHES_AHEAD);
        let reader = std::thread::Builder::new()
            .name("log-read".into())
            .spawn_scoped(scope, move || read_ahead(path, file, &handing));
        if let Err(error) = reader {
            tracing::debug!(%error, "cannot read a log on a thread of its own");
            return parse_from(path, open_regular(path, false).map_err(io)?, each);
        }
        let mut lines = Lines::default();
        for batch in taken {
            match batch? {
                Batch::Parsed(parsed) => {
                    for (line, at) in parsed {
                        lines.take(path, line, at, &mut each)?;
                    }
                }
                Batch::Raw { bytes, ends } => {
                    let mut start = 0;
                    for (end, at) in ends {
                        lines.take(path, parse_any(&bytes[start..end]), at, &mut each)?;
                        start = end;
                    }
                }
            }
        }
        Ok(lines.extent)
    })
}

/// Logs at least this long are read on a thread of their own (see [`read_each`]).
const PARSE_APART: u64 = 256 << 10;

/// How many lines are handed over at once (see [`read_ahead`]).
const BATCH_LINES: usize = 256;

/// How many batches of lines may wait for the fold.
const BATCHES_AHEAD: usize = 4;

/// A line of a log, parsed (`None`: a blank line), and where it ends.
type ParsedLine = (Option<Result<Parsed, String>>, Place);

/// Lines of a log handed from the thread reading it to the one folding it.
enum Batch {
    /// Parsed by the reading thread.
    Parsed(Vec<ParsedLine>),
    /// For the folding thread to parse: the lines' bytes one after the other, and each
    /// line's end in them and in the log.
    Raw { bytes: Vec<u8>, ends: Vec<(usize, Place)> },
}

impl Batch {
    fn raw() -> Self {
        Batch::Raw { bytes: Vec::new(), ends: Vec::with_capacity(BATCH_LINES) }
    }

    fn parsed() -> Self {
        Batch::Parsed(Vec::with_capacity(BATCH_LINES))
    }

    fn lines(&self) -> usize {
        match self {
            Batch::Parsed(parsed) => parsed.len(),
            Batch::Raw { ends, .. } => ends.len(),
        }
    }
}

/// Reads the log `reader` reads, handing its lines over in batches, every other one parsed
/// (the first not, so that the fold begins at once), until the log ends, an error (sent
/// after the lines before it), or the taker is gone.
fn read_ahead(
    path: &Path,
    reader: impl std::io::Read,
    taker: &std::sync::mpsc::SyncSender<Result<Batch, ReadError>>,
) {
    let mut batch = Batch::raw();
    let outcome = split_lines(path, reader, |line, at| {
        match &mut batch {
            Batch::Parsed(parsed) => parsed.push((parse_any(line), at)),
            Batch::Raw { bytes, ends } => {
                bytes.extend_from_slice(line);
                ends.push((bytes.len(), at));
            }
        }
        if batch.lines() == BATCH_LINES {
            let next = match batch {
                Batch::Parsed(_) => Batch::raw(),
                Batch::Raw { .. } => Batch::parsed(),
            };
            // The taker is gone (it met an error): no more is read.
            return taker
                .send(Ok(std::mem::replace(&mut batch, next)))
                .map_err(|_| ReadError::Gone);
        }
        Ok(())
    });
    let _ = taker.send(Ok(batch));
    if let Err(error) = outcome {
        let _ = taker.send(Err(error));
    }
}

/// Opens a log (to read, or to append): only a regular file, never through a symbolic link
/// and never waiting (a FIFO or a device named like a log is refused at once, not read).
pub(crate) fn open_regular(path: &Path, append: bool) -> std::io::Result<std::fs::File> {
    use crate::nofollow::NotRegular;
    crate::nofollow::open_regular(path, append).map_err(|why| match why {
        NotRegular::Link => std::io::Error::other("it is a symbolic link, not a log"),
        NotRegular::Kind(what) => {
            std::io::Error::other(format!("it is {what}, not a regular file"))
        }
        NotRegular::Io(error) => error,
    })
}

/// Parses the bytes of a log (see the module documentation for the rules): its records in
/// order (see [`parse_from`] for how far it was read).
pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<Vec<Record>, ReadError> {
    let mut records = Vec::new();
    parse_from(path, bytes, |record| records.push(record))?;
    Ok(records)
}

/// How far a log was read.
#[derive(Debug, Default)]
pub(crate) struct Extent {
    /// The `seq` of the last record kept.
    pub(crate) last_seq: u64,
    /// The byte length of the complete records (a torn last line is beyond it).
    pub(crate) good_length: u64,
    /// A torn last line was dropped.
    pub(crate) dropped_torn_line: bool,
}

/// How much of a log is read at a time: the records of a piece are handed on before the next
/// is read, and a long log is never held whole (a fresh buffer of its size would cost a page
/// fault per 4 KiB before the first record is read).
const READ_PIECE: usize = 128 << 10;

/// Parses a log read from `reader` a piece at a time, handing each record to `each` as it
/// is read: on an error, `each` has had the records before the line at fault.
pub(crate) fn parse_from(
    path: &Path,
    reader: impl std::io::Read,
    mut each: impl FnMut(Record),
) -> Result<Extent, ReadError> {
    let mut lines = Lines::default();
    split_lines(path, reader, |line, at| lines.take(path, parse_any(line), at, &mut each))?;
    Ok(lines.extent)
}

/// Reads a log a piece at a time, handing `each` its lines (without their newlines) in order.
/// A line is handed on once it is known whether it is the last (a byte follows it, or the
/// end of the log was reached): a crash tears at most the last line, which is then dropped.
fn split_lines(
    path: &Path,
    reader: impl std::io::Read,
    mut each: impl FnMut(&[u8], Place) -> Result<(), ReadError>,
) -> Result<(), ReadError> {
    use std::io::BufRead as _;
    let mut reader = std::io::BufReader::with_capacity(READ_PIECE, reader);
    let fill = |reader: &mut std::io::BufReader<_>| loop {
        match reader.fill_buf() {
            Ok(_) => return Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => return Err(ReadError::Io { path: path.to_owned(), source }),
        }
    };
    // The start of a line the piece read ends in the middle of; every other line is handed
    // on where it lies in the piece, not copied.
    let mut carried = Vec::new();
    let mut next = 0u64;
    loop {
        fill(&mut reader)?;
        let piece = reader.buffer();
        if piece.is_empty() {
            // A last line without its newline (torn, unless its writer is still writing).
            if carried.is_empty() {
                return Ok(());
            }
            return each(&carried, Place { next, last: true });
        }
        let Some(end) = memchr::memchr(b'\n', piece) else {
            let read = piece.len();
            carried.extend_from_slice(piece);
            next += read as u64;
            reader.consume(read);
            continue;
        };
        next += end as u64 + 1;
        if carried.is_empty() && end + 1 < piece.len() {
            // Whole in the piece, and a byte follows it: not the last.
            each(&piece[..end], Place { next, last: false })?;
            reader.consume(end + 1);
            continue;
        }
        carried.extend_from_slice(&piece[..end]);
        reader.consume(end + 1);
        fill(&mut reader)?;
        each(&carried, Place { next, last: reader.buffer().is_empty() })?;
        carried.clear();
    }
}

/// A line of a log parsed: `None` for a blank line.
fn parse_any(line: &[u8]) -> Option<Result<Parsed, String>> {
    (!line.iter().all(u8::is_ascii_whitespace)).then(|| parse_line(line))
}

/// Where a line of a log ends.
#[derive(Clone, Copy, Debug)]
struct Place {
    /// The offset just past it (its newline included).
    next: u64,
    /// Nothing follows it.
    last: bool,
}

/// The lines of a log taken so far.
#[derive(Default)]
struct Lines {
    shared: SharedOutput,
    /// The number of the last line taken (1 for the first).
    number: usize,
    extent: Extent,
}

impl Lines {
    /// Takes the next line, parsed (`None`: a blank line), handing its record to `each`.
    fn take(
        &mut self,
        path: &Path,
        line: Option<Result<Parsed, String>>,
        at: Place,
        each: &mut impl FnMut(Record),
    ) -> Result<(), ReadError> {
        self.number += 1;
        let damaged = |line, reason| ReadError::Damaged { path: path.to_owned(), line, reason };
        let Some(line) = line else {
            self.extent.good_length = at.next;
            return Ok(());
        };
        match line {
            Ok(Parsed::Record { version, seq, record }) => {
                if version > FORMAT_VERSION {
                    return Err(ReadError::Newer { path: path.to_owned(), found: version });
                }
                let due = self.extent.last_seq + 1;
                if seq != due {
                    // hotsh writes one more per record, so a record out of sequence was put
                    // there by something else (or by a hand that edited the file): nothing of
                    // the log is believed.
                    return Err(damaged(self.number, format!("`seq` {seq} where {due} was due")));
                }
                if let Some(record) = record {
                    let record = self
                        .shared
                        .restore(record)
                        .map_err(|reason| damaged(self.number, reason))?;
                    each(record);
                }
                self.extent.last_seq = seq;
                self.extent.good_length = at.next;
            }
            Err(reason) if at.last => {
                // A crash tears at most the last line: keep everything before it.
                tracing::warn!(path = %path.display(), line = self.number, %reason, "dropped a torn last line of a session log");
                self.extent.dropped_torn_line = true;
            }
            Err(reason) => return Err(damaged(self.number, reason)),
        }
        Ok(())
    }
}

enum Parsed {
    /// `record` is `None` for a record type this reader does not know.
    Record { version: u32, seq: u64, record: Option<Record> },
}

fn parse_line(line: &[u8]) -> Result<Parsed, String> {
    let parse = |line: &str| {
        let mut deserializer = serde_json::Deserializer::from_str(line);
        let parsed = serde::Deserializer::deserialize_map(&mut deserializer, LineVisitor)
            .and_then(|parsed| deserializer.end().map(|()| parsed));
        parsed.map_err(|error| match serde_json::from_str::<serde::de::IgnoredAny>(line) {
            Err(not_json) => format!("not JSON ({not_json})"),
            Ok(_) => format!("not a record: {error}"),
        })
    };
    // The line is checked as UTF-8 once, whole: the parser then takes each string as it is
    // (checking each of a record's dozen short strings on its own cost a load 6 % of its
    // instructions). A line with bytes that are not UTF-8 (an older hotsh passed on what a
    // plugin sent) is read with them replaced, rather than refusing the whole session.
    match std::str::from_utf8(line) {
        Ok(line) => parse(line),
        Err(_) => parse(&String::from_utf8_lossy(line)),
    }
}

/// Reads a line in one pass: the envelope's keys, and `data` straight into the record its
/// `type` names (when `type` comes first, as hotsh writes it; otherwise `data` is held as a
/// JSON value until `type` is known).
struct LineVisitor;

impl<'de> serde::de::Visitor<'de> for LineVisitor {
    type Value = Parsed;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a session log record")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
        use serde::de::Error as _;
        let mut version: Option<u32> = None;
        let mut seq: Option<u64> = None;
        let mut kind: Option<std::borrow::Cow<'de, str>> = None;
        let mut record: Option<Option<Record>> = None;
        let mut early_data: Option<serde_json::Value> = None;
        while let Some(key) = map.next_key_seed(Borrowed)? {
            match key.as_ref() {
                "v" => version = Some(map.next_value()?),
                "seq" => seq = Some(map.next_value()?),
                "type" => kind = Some(map.next_value_seed(Borrowed)?),
                "data" => match (&kind, version) {
                    (Some(kind), Some(v)) if v <= FORMAT_VERSION => {
                        record = Some(map.next_value_seed(DataSeed(kind))?);
                    }
                    _ => early_data = Some(map.next_value()?),
                },
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        let version = version.ok_or_else(|| A::Error::custom("no format version `v`"))?;
        let seq = seq.ok_or_else(|| A::Error::custom("no `seq`"))?;
        if version > FORMAT_VERSION {
            return Ok(Parsed::Record { version, seq, record: None });
        }
        let kind = kind.ok_or_else(|| A::Error::custom("no `type`"))?;
        let record = match record {
            Some(record) => record,
            None => {
                let data = early_data.unwrap_or(serde_json::Value::Null);
                DataSeed(&kind).read(data).map_err(A::Error::custom)?
            }
        };
        Ok(Parsed::Record { version, seq, record })
    }
}

/// A string of a line, borrowed from it unless it has escapes. serde's own `Cow<str>` is
/// always a copy: the envelope's keys and type cost a load five allocations a line.
struct Borrowed;

impl<'de> serde::de::DeserializeSeed<'de> for Borrowed {
    type Value = std::borrow::Cow<'de, str>;

    fn deserialize<D: serde::Deserializer<'de>>(self, text: D) -> Result<Self::Value, D::Error> {
        text.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Borrowed {
    type Value = std::borrow::Cow<'de, str>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Borrowed(text))
    }

    fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Owned(text.to_owned()))
    }
}

/// Reads `data` as the record `type` names (`None`: a type this reader does not know).
struct DataSeed<'a>(&'a str);

impl DataSeed<'_> {
    fn read<'de, D: serde::Deserializer<'de>>(self, data: D) -> Result<Option<Record>, D::Error> {
        let kind = self.0;
        let tagged = Tagged { kind, data };
        if SessionEvent::TYPES.contains(&kind) {
            SessionEvent::deserialize(tagged).map(|e| Some(Record::Event(e)))
        } else if Fact::TYPES.contains(&kind) {
            Fact::deserialize(tagged).map(|f| Some(Record::Fact(f)))
        } else {
            serde::de::IgnoredAny::deserialize(tagged.data).map(|_| None)
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for DataSeed<'_> {
    type Value = Option<Record>;

    fn deserialize<D: serde::Deserializer<'de>>(self, data: D) -> Result<Self::Value, D::Error> {
        self.read(data)
    }
}

/// `{"type": kind, "data": <data>}` for the `type`/`data` tagged enums, without building it.
struct Tagged<'a, D> {
    kind: &'a str,
    data: D,
}

impl<'de, D: serde::Deserializer<'de>> serde::Deserializer<'de> for Tagged<'_, D> {
    type Error = D::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        visitor.visit_map(TaggedMap { kind: self.kind, data: Some(self.data), stage: 0 })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

struct TaggedMap<'a, D> {
    kind: &'a str,
    data: Option<D>,
    /// 0: `type` next, 1: `data` next, 2: done.
    stage: u8,
}

impl<'de, D: serde::Deserializer<'de>> serde::de::MapAccess<'de> for TaggedMap<'_, D> {
    type Error = D::Error;

    fn next_key_seed<K: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, D::Error> {
        use serde::de::IntoDeserializer as _;
        let key = match self.stage {
            0 => "type",
            1 => "data",
            _ => return Ok(None),
        };
        seed.deserialize(key.into_deserializer()).map(Some)
    }

    fn next_value_seed<V: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, D::Error> {
        use serde::de::{Error as _, IntoDeserializer as _};
        self.stage += 1;
        match self.stage {
            1 => seed.deserialize(self.kind.into_deserializer()),
            _ => match self.data.take() {
                Some(data) => seed.deserialize(data),
                None => Err(D::Error::custom("`data` read twice")),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::ToolCallId;

    /// The records of `bytes`, and how far they were read.
    fn parsed(bytes: &[u8]) -> (Vec<Record>, Extent) {
        let mut records = Vec::new();
        let extent = parse_from(Path::new("x.jsonl"), bytes, |r| records.push(r)).expect("parses");
        (records, extent)
    }

    fn round_trip(record: Record) {
        let bytes = line(1, &record).expect("serialises");
        let (records, extent) = parsed(&bytes);
        assert_eq!(records, vec![record]);
        assert_eq!(extent.last_seq, 1);
    }

    #[test]
    fn records_round_trip() {
        round_trip(Record::Event(SessionEvent::AgentText { text: "hi".into() }));
        round_trip(Record::Event(SessionEvent::ToolOutput {
            call_id: ToolCallId("call-1".into()),
            text: "out".into(),
        }));
        round_trip(Record::Fact(Fact::Notice { text: "n".into(), task_id: Some("bash-1".into()) }));
        round_trip(Record::Fact(Fact::TurnEnded { outcome: TurnOutcome::Failed, message: None }));
    }

    #[test]
    fn a_record_whose_data_comes_before_its_type_reads_the_same() {
        // Another writer may put the keys in any order; a tool call's input and output are
        // then read from the JSON value held until the type is known.
        let data = r#"{"call_id":"call-1","card":{"terminal":{"command":"make","description":null,"cwd":"/w","exit":null}},"status":"completed","raw_output":{"exit_code":2,"out":[1,"a"]},"error":null}"#;
        let in_order = format!(r#"{{"v":1,"seq":1,"type":"tool_call_finished","data":{data}}}"#);
        let data_first = format!(r#"{{"data":{data},"v":1,"seq":1,"type":"tool_call_finished"}}"#);
        let read = |line: &str| parsed(format!("{line}\n").as_bytes()).0;
        let records = read(&in_order);
        assert_eq!(read(&data_first), records);
        let Some(Record::Event(SessionEvent::ToolCallFinished { raw_output, .. })) =
            records.first()
        else {
            panic!("not a finished call: {records:?}");
        };
        assert_eq!(raw_output.text(), r#"{"exit_code":2,"out":[1,"a"]}"#);
    }

    #[test]
    fn an_envelope_with_escapes_reads_as_its_text() {
        // A writer other than hotsh may escape any character of a key or of the type.
        let line =
            br#"{"\u0076":1,"se\u0071":1,"typ\u0065":"agent\u005ftext","data":{"text":"hi"}}"#;
        let (records, extent) = parsed(&[&line[..], b"\n"].concat());
        assert_eq!(records, vec![Record::Event(SessionEvent::AgentText { text: "hi".into() })]);
        assert_eq!(extent.last_seq, 1);
    }

    #[test]
    fn a_line_with_bytes_that_are_not_utf8_is_read_with_them_replaced() {
        let text = |seq, text: &str| {
            line(seq, &Record::Event(SessionEvent::AgentText { text: text.into() }))
                .expect("a line")
        };
        let mut bytes = text(1, "fine");
        bytes.push(b'\n');
        let bad = text(2, "ok BAD");
        let at = bad.windows(3).position(|w| w == b"BAD").expect("the marker");
        bytes.extend_from_slice(&bad[..at]);
        bytes.push(0xff);
        bytes.extend_from_slice(&bad[at + 3..]);
        bytes.push(b'\n');
        let (records, extent) = parsed(&bytes);
        assert_eq!(records.len(), 2);
        assert_eq!(
            records[1],
            Record::Event(SessionEvent::AgentText { text: "ok \u{fffd}".into() })
        );
        assert!(!extent.dropped_torn_line);
    }

    #[test]
    fn a_torn_last_line_is_dropped_and_the_rest_kept() {
        let mut bytes =
            line(1, &Record::Event(SessionEvent::AgentText { text: "a".into() })).expect("a line");
        bytes.push(b'\n');
        let good = bytes.len() as u64;
        bytes.extend_from_slice(b"{\"v\":1,\"seq\":2,\"ty");
        let (records, extent) = parsed(&bytes);
        assert_eq!(records.len(), 1);
        assert!(extent.dropped_torn_line);
        assert_eq!(extent.good_length, good);
    }

    /// A reader that hands out at most `step` bytes per read.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, into: &mut [u8]) -> std::io::Result<usize> {
            let step = self.step.min(into.len()).min(self.bytes.len());
            into[..step].copy_from_slice(&self.bytes[..step]);
            self.bytes = &self.bytes[step..];
            Ok(step)
        }
    }

    /// What `bytes` parse to read `step` bytes at a time (each outcome as text to compare).
    fn trickled(bytes: &[u8], step: usize) -> (Vec<Record>, String) {
        let mut records = Vec::new();
        let outcome =
            parse_from(Path::new("x.jsonl"), Trickle { bytes, step }, |r| records.push(r));
        (records, format!("{outcome:?}"))
    }

    #[test]
    fn a_log_read_in_pieces_or_parsed_apart_reads_as_it_does_whole() {
        let text = |n: usize| Record::Event(SessionEvent::AgentText { text: "x".repeat(n) });
        // A line longer than a piece, lines around the pieces' edges, a blank line, and more
        // lines than the parser hands over at once.
        let mut records = vec![text(10), text(READ_PIECE + 1000), text(READ_PIECE - 80)];
        records.extend((0..3 * BATCH_LINES).map(|n| text(n % 50)));
        let lines = written(records);
        let lines: Vec<&[u8]> = lines.split_inclusive(|&b| b == b'\n').collect();
        let log = |tail: &[&[u8]]| -> String {
            let log = [&lines[..3], &[b"\n"], &lines[3..], tail].concat().concat();
            String::from_utf8(log).expect("text")
        };
        let whole = log(&[]);
        assert!(whole.len() as u64 >= PARSE_APART, "long enough to be parsed apart");
        let (records, extent) = parsed(whole.as_bytes());
        assert_eq!(records.len(), 3 + 3 * BATCH_LINES);
        assert_eq!(extent.good_length, whole.len() as u64);
        let seq = lines.len() + 1;
        let torn = log(&[format!("{{\"v\":1,\"seq\":{seq},\"ty").as_bytes()]);
        let damaged = log(&[format!("{{\"v\":1,\"seq\":{seq},\"ty\n\n").as_bytes()]);
        // Damaged in a batch the reading thread parses, and in one it leaves to the fold.
        let damaged_at = |at: usize| {
            let mut lines = lines.clone();
            lines.insert(at, b"{\"v\":1,\"seq\":\n");
            String::from_utf8(lines.concat()).expect("text")
        };
        let (middle, early) = (damaged_at(400), damaged_at(100));
        let dir = tempfile::tempdir().expect("a temporary directory");
        let logs = [
            ("whole", &whole),
            ("torn", &torn),
            ("damaged", &damaged),
            ("middle", &middle),
            ("early", &early),
        ];
        for (name, log) in logs {
            let expected = trickled(log.as_bytes(), usize::MAX);
            // Compared without printing them: the records are long.
            let same = |(records, outcome): (Vec<Record>, String), how: &str| {
                assert_eq!(outcome, expected.1, "{name}, {how}");
                assert!(records == expected.0, "{name}, {how}: other records");
            };
            for step in [1, 7, 4096, READ_PIECE - 1, READ_PIECE, READ_PIECE + 1] {
                same(trickled(log.as_bytes(), step), &format!("{step} bytes at a time"));
            }
            let path = dir.path().join(format!("{name}.jsonl"));
            std::fs::write(&path, log).expect("the log");
            let mut records = Vec::new();
            let outcome = read_each(&path, |r| records.push(r));
            let outcome = format!("{outcome:?}").replace(&*path.to_string_lossy(), "x.jsonl");
            same((records, outcome), "parsed apart");
        }
        assert!(trickled(torn.as_bytes(), 7).1.contains("dropped_torn_line: true"));
        assert!(trickled(damaged.as_bytes(), 7).1.contains("Damaged"));
        let (records, outcome) = trickled(middle.as_bytes(), 7);
        assert!(outcome.contains("line: 401"), "{outcome}");
        assert_eq!(records.len(), 400, "the records before the damaged line were handed on");
        assert!(trickled(early.as_bytes(), 7).1.contains("line: 101"));
    }

    #[test]
    fn a_damaged_middle_line_and_a_newer_version_are_errors() {
        let damaged =
            b"not json\n{\"v\":1,\"seq\":2,\"type\":\"agent_text\",\"data\":{\"text\":\"a\"}}\n";
        let error = parse(Path::new("x.jsonl"), damaged).expect_err("an error").to_string();
        assert!(
            error.starts_with("the session log x.jsonl is damaged at line 1: not JSON"),
            "{error}"
        );
        let newer = b"{\"v\":3,\"seq\":1,\"type\":\"session\",\"data\":{}}\n";
        let error = parse(Path::new("x.jsonl"), newer).expect_err("an error").to_string();
        assert!(error.contains("written by a newer hotsh (record format 3"), "{error}");
    }

    #[test]
    fn keys_in_any_order_are_read() {
        let bytes = b"{\"data\":{\"text\":\"a\"},\"type\":\"agent_text\",\"seq\":1,\"v\":1}\n";
        let (records, extent) = parsed(bytes);
        assert_eq!(records, vec![Record::Event(SessionEvent::AgentText { text: "a".into() })]);
        assert_eq!(extent.last_seq, 1);
    }

    #[test]
    fn a_record_out_of_sequence_damages_the_log_at_its_line() {
        let record = |seq: u64| {
            format!(
                "{{\"v\":1,\"seq\":{seq},\"type\":\"agent_text\",\"data\":{{\"text\":\"a\"}}}}\n"
            )
        };
        for (seqs, line, due) in [(vec![1, 2, 999], 3, 3), (vec![1, 1], 2, 2), (vec![2], 1, 1)] {
            let bytes: String = seqs.iter().map(|&seq| record(seq)).collect();
            let error = parse(Path::new("x.jsonl"), bytes.as_bytes()).expect_err("damaged");
            let text = error.to_string();
            let expected = format!("the session log x.jsonl is damaged at line {line}: `seq`");
            assert!(text.starts_with(&expected), "{text}");
            assert!(text.ends_with(&format!("where {due} was due")), "{text}");
        }
    }

    /// One record of every type, each field set, in the order the format documents them.
    fn one_of_each() -> Vec<Record> {
        use crate::session::{
            CallStatus, Card, CompactionEnd, FileDiff, FileLocation, GenericCard, Prompt, TaskEnd,
            TaskSandbox, TerminalCard, TerminalExit, ToolKind,
        };
        use hotsh_core::context::{Compaction, ContextUse, Spent, Trigger};
        use hotsh_core::model::{ModelToolCall, PromptImage, Usage};
        use hotsh_core::sandbox::Mode;
        use hotsh_core::session::{PlanEntry, PlanPriority, PlanStatus};
        let id = |n: u32| ToolCallId(format!("call-{n}"));
        let terminal = Card::terminal(TerminalCard {
            command: "make".into(),
            description: Some("Build".into()),
            cwd: "/w".into(),
            exit: Some(TerminalExit {
                exit_code: Some(2),
                signal: None,
                reason: Some("Exited with code 2.".into()),
            }),
        });
        let generic = Card::generic(GenericCard {
            title: "Edit a.rs".into(),
            kind: ToolKind::Edit,
            content: Some("done".into()),
            locations: vec![FileLocation { path: "/w/a.rs".into(), line: Some(3) }],
            diffs: vec![FileDiff {
                path: "/w/a.rs".into(),
                old_text: Some("a".into()),
                new_text: "b".into(),
            }],
            session: None,
        });
        let events = [
            SessionEvent::AgentText { text: "Hi".into() },
            SessionEvent::AgentThought { text: "Hmm".into() },
            SessionEvent::ToolCallStarted {
                call_id: id(1),
                tool: "bash".into(),
                card: terminal.clone(),
                raw_input: serde_json::json!({"command": "make"}).into(),
                arguments: r#"{"command":"make"}"#.into(),
            },
            SessionEvent::ToolOutput { call_id: id(1), text: "cc a.c\n".into() },
            SessionEvent::ToolCallFinished {
                call_id: id(1),
                card: terminal,
                status: CallStatus::Failed,
                raw_output: serde_json::json!({"exit_code": 2}).into(),
                error: Some("failed".into()),
                output_text: None,
                output_in_result: true,
            },
            SessionEvent::ToolCallFinished {
                call_id: id(2),
                card: generic,
                status: CallStatus::Completed,
                raw_output: crate::session::RawJson::null(),
                error: None,
                output_text: Some("edited".into()),
                output_in_result: false,
            },
            SessionEvent::PluginChanged {
                call_id: id(3),
                title: "Plugin x reloaded".into(),
                detail: "…".into(),
                failed: false,
            },
            SessionEvent::HostNote {
                call_id: id(4),
                title: "Plan mode".into(),
                detail: "…".into(),
            },
            SessionEvent::HookRan {
                call_id: id(6),
                run: Box::new(crate::session::HookRun {
                    event: "PreToolUse".into(),
                    command: "check.sh".into(),
                    source: "~/.claude/settings.json".into(),
                    status: "exit 2".into(),
                    failed: true,
                    output: "no rm -rf\n".into(),
                    outcome: Some("blocked: no rm -rf".into()),
                }),
            },
            SessionEvent::Subagent {
                call_id: id(7),
                child: crate::session::SessionId("c-1".into()),
                title: "Count the files".into(),
                agent: Some("explorer".into()),
                state: crate::session::SubagentState::Idle { stop: "end_turn".into() },
            },
            SessionEvent::Plan {
                entries: vec![PlanEntry {
                    step: "Build".into(),
                    status: PlanStatus::InProgress,
                    priority: PlanPriority::High,
                }],
            },
            SessionEvent::Usage(ContextUse {
                used: 900,
                size: 8000,
                estimated: false,
                cached: Some(512),
                cost: Some(Spent { amount: 0.25, currency: "USD".into() }),
            }),
            SessionEvent::CompactionStarted { id: id(5), trigger: Trigger::Manual },
            SessionEvent::CompactionSummary { id: id(5), text: "The task".into() },
            SessionEvent::CompactionEnded {
                id: id(5),
                ended: CompactionEnd {
                    status: "completed".into(),
                    trigger: Trigger::Manual,
                    tokens_before: 7000,
                    tokens_after: Some(900),
                    error: None,
                },
            },
        ];
        let facts = [
            Fact::Session(Box::new(SessionMeta {
                session_id: "s-1".into(),
                cwd: "/w".into(),
                created_at: "2026-12-02T00:00:00.000Z".into(),
                agent: "hotsh 0.1.0 (commit 0123456789ab)".into(),
                parent: Some(crate::session::ParentLink {
                    session_id: "s-0".into(),
                    call_id: "call-7".into(),
                    agent: Some("explorer".into()),
                    description: "Count the files".into(),
                    depth: 1,
                    max_mode: Some(Mode::WorkspaceWrite),
                    tools: Some(vec!["bash".into(), "read_file".into()]),
                    instructions: Some("You explore.".into()),
                }),
                forked_from: Some("s-f".into()),
            })),
            Fact::Prompt(Prompt {
                text: "Fix it [image 1]".into(),
                blocks: vec![serde_json::json!({"type": "text", "text": "Fix it"})],
                images: vec![PromptImage { mime_type: "image/png".into(), data: "iVBO".into() }],
            }),
            Fact::AssistantMessage {
                text: "Looking.".into(),
                reasoning: Some("first the build".into()),
                tool_calls: vec![ModelToolCall {
                    id: "m-1".into(),
                    name: "bash".into(),
                    arguments: r#"{"command":"make"}"#.into(),
                }],
                usage: Some(Box::new(Usage {
                    prompt_tokens: Some(800),
                    completion_tokens: Some(100),
                    total_tokens: Some(900),
                    cached_tokens: Some(512),
                })),
                finish_reason: Some("tool_calls".into()),
            },
            // A command's output logged once: this text goes on from the first 3 bytes of
            // `call-1`'s logged output (`v` 2).
            Fact::ToolResult {
                call_id: "m-0".into(),
                text: "a.c\n[exit code: 2]".into(),
                is_error: false,
                after_output: Some(OutputPrefix { card: id(1), bytes: 3 }),
            },
            Fact::ToolResult {
                call_id: "m-1".into(),
                text: "[exit code: 2]".into(),
                is_error: false,
                after_output: None,
            },
            Fact::Command { text: "/compact the build".into(), blocks: Vec::new() },
            Fact::Compaction(Box::new(Compaction {
                id: "call-5".into(),
                trigger: Trigger::Manual,
                focus: Some("the build".into()),
                summary: "The task".into(),
                kept_prompts: vec!["Fix it".into()],
                replaced: 4,
                tokens_before: 7000,
                tokens_after: 900,
            })),
            Fact::Notice {
                text: "[background task bash-1 …]".into(),
                task_id: Some("bash-1".into()),
            },
            Fact::TurnEnded { outcome: TurnOutcome::MaxTurnRequests, message: None },
            Fact::CancelRequested {},
            Fact::TaskStarted {
                task_id: "bash-1".into(),
                call_id: "call-6".into(),
                command: "make watch".into(),
                output_path: "/tmp/o/bash-1.log".into(),
            },
            Fact::ModelChosen { model: "deepseek-chat".into() },
            Fact::EffortChosen { effort: "high".into() },
            Fact::SandboxMode { mode: Mode::ReadOnly },
            Fact::SessionMode { mode: "plan".into() },
            Fact::Escalation {
                call_id: "call-7".into(),
                command: "git init".into(),
                justification: "asked".into(),
                mode: Mode::DangerFullAccess,
                answer: "allowed".into(),
            },
            Fact::TaskEnded(Box::new(TaskEnd {
                task_id: "bash-1".into(),
                state: "exited".into(),
                exit_code: Some(1),
                signal: None,
                with_agent: false,
                sandbox: Some(TaskSandbox {
                    mode: "workspace-write".into(),
                    denied: Some("file".into()),
                }),
            })),
            Fact::TaskReported { task_id: "bash-1".into() },
            Fact::FileSeen { path: "/w/a.rs".into(), sha256: "ab12".into() },
            Fact::RuleAdded {
                rule: hotsh_core::permissions::Rule::for_call(
                    hotsh_core::permissions::Covers::Command,
                    "git commit -m x",
                    crate::sandbox::Mode::DangerFullAccess,
                ),
            },
            Fact::RuleRemoved {
                rule: hotsh_core::permissions::Rule::for_call(
                    hotsh_core::permissions::Covers::Write,
                    "/etc/hosts",
                    crate::sandbox::Mode::DangerFullAccess,
                ),
            },
            Fact::Question {
                call_id: "call-9".into(),
                title: "Run this project's hooks? (1 new)".into(),
                answer: "hooks-session".into(),
            },
        ];
        events.into_iter().map(Record::Event).chain(facts.into_iter().map(Record::Fact)).collect()
    }

    /// Which record type `record` is, as a number: the match names every type (a new one
    /// does not compile until it is added here, and then to [`one_of_each`]).
    fn type_number(record: &Record) -> usize {
        match record {
            Record::Event(event) => match event {
                SessionEvent::AgentText { .. } => 0,
                SessionEvent::AgentThought { .. } => 1,
                SessionEvent::ToolCallStarted { .. } => 2,
                SessionEvent::ToolOutput { .. } => 3,
                SessionEvent::ToolCallFinished { .. } => 4,
                SessionEvent::PluginChanged { .. } => 5,
                SessionEvent::HostNote { .. } => 6,
                SessionEvent::Plan { .. } => 7,
                SessionEvent::Usage(_) => 8,
                SessionEvent::CompactionStarted { .. } => 9,
                SessionEvent::CompactionSummary { .. } => 10,
                SessionEvent::CompactionEnded { .. } => 11,
                SessionEvent::HookRan { .. } => 32,
                SessionEvent::Subagent { .. } => 34,
                // Never logged (the `prompt` record holds it; the child's log has what it
                // does).
                SessionEvent::UserMessage { .. } | SessionEvent::SubagentProgress { .. } => {
                    usize::MAX
                }
            },
            Record::Fact(fact) => match fact {
                Fact::Session(_) => 12,
                Fact::Prompt(_) => 13,
                Fact::Command { .. } => 14,
                Fact::Compaction(_) => 15,
                Fact::AssistantMessage { .. } => 16,
                Fact::ToolResult { .. } => 17,
                Fact::Notice { .. } => 18,
                Fact::TurnEnded { .. } => 19,
                Fact::CancelRequested {} => 20,
                Fact::TaskStarted { .. } => 21,
                Fact::TaskEnded(_) => 22,
                Fact::TaskReported { .. } => 23,
                Fact::ModelChosen { .. } => 24,
                Fact::EffortChosen { .. } => 25,
                Fact::SandboxMode { .. } => 26,
                Fact::SessionMode { .. } => 27,
                Fact::Escalation { .. } => 28,
                Fact::FileSeen { .. } => 29,
                Fact::RuleAdded { .. } => 30,
                Fact::RuleRemoved { .. } => 31,
                Fact::Question { .. } => 33,
            },
        }
    }

    /// The log's format is pinned: one record of every type, written as hotsh writes it (the
    /// time fixed), is `log_format.jsonl` byte for byte, and reads back as itself. Renaming a
    /// field of a domain type, or adding a record type, changes what is written and fails
    /// here: the file format changes only on purpose (`UPDATE_EXPECT=1` rewrites the file,
    /// and the diff is the change to review, with a new `v` when older readers would misread
    /// it).
    #[test]
    fn every_record_type_is_written_exactly_as_the_format_says() {
        let records = one_of_each();
        let covered: std::collections::BTreeSet<usize> = records.iter().map(type_number).collect();
        assert_eq!(covered, (0..35).collect(), "one record of every type");
        let mut written = String::new();
        for (at, record) in records.iter().enumerate() {
            let text = String::from_utf8(line(at as u64 + 1, record).expect("serialises"))
                .expect("a line is UTF-8");
            // `"at":"<RFC 3339 with milliseconds>"`, 24 characters, right after `seq`.
            let time = text.find("\"at\":\"").expect("an `at`") + 6;
            written.push_str(&text[..time]);
            written.push_str("2026-12-02T00:00:00.000Z");
            written.push_str(&text[time + 24..]);
            written.push('\n');
        }
        expect_test::expect_file!["log_format.jsonl"].assert_eq(&written);
        let read = parse(Path::new("log_format.jsonl"), written.as_bytes()).expect("reads back");
        // As written, but the shared output put back where a result refers to it.
        let restored: Vec<Record> = records
            .into_iter()
            .map(|record| match record {
                Record::Fact(Fact::ToolResult {
                    call_id,
                    text,
                    is_error,
                    after_output: Some(_),
                }) => {
                    let text = format!("cc {text}");
                    Record::Fact(Fact::ToolResult { call_id, text, is_error, after_output: None })
                }
                record => record,
            })
            .collect();
        assert_eq!(read, restored);
    }

    /// Writes `records` as the writer does (sharing output), returns the lines.
    fn written(records: Vec<Record>) -> Vec<u8> {
        let mut shared = SharedOutput::default();
        let mut bytes = Vec::new();
        for (at, record) in records.into_iter().enumerate() {
            bytes.extend(line(at as u64 + 1, &shared.share(record)).expect("serialises"));
            bytes.push(b'\n');
        }
        bytes
    }

    #[test]
    fn a_commands_output_is_logged_once_and_read_back_whole() {
        let output: String = (1..=400).map(|n| format!("line {n}\n")).collect();
        let card = ToolCallId("call-4".into());
        let result = |text: &str| {
            Record::Fact(Fact::ToolResult {
                call_id: "m-9".into(),
                text: text.into(),
                is_error: false,
                after_output: None,
            })
        };
        let model_text = format!("{}\n[exit code: 1]", output.trim_end());
        let records = vec![
            Record::Event(SessionEvent::ToolOutput {
                call_id: card.clone(),
                text: output[..900].into(),
            }),
            Record::Event(SessionEvent::ToolOutput {
                call_id: card.clone(),
                text: output[900..].into(),
            }),
            result(&model_text),
            // A short result, and one after a call without output, are kept as they are.
            result("ok"),
        ];
        let bytes = written(records.clone());
        let text = String::from_utf8(bytes.clone()).expect("UTF-8");
        assert_eq!(text.matches("line 399").count(), 1, "the output once:\n{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[2].starts_with("{\"v\":2,"), "{}", lines[2]);
        assert!(lines[2].contains(r#""after_output":{"card":"call-4","bytes":"#), "{}", lines[2]);
        assert!(lines[3].starts_with("{\"v\":1,"), "{}", lines[3]);
        let read = parse(Path::new("x.jsonl"), &bytes).expect("reads");
        assert_eq!(read, records);

        // A reference to output the log does not hold is damage, at its line.
        let orphan = written(vec![
            Record::Event(SessionEvent::AgentText { text: "hi".into() }),
            Record::Fact(Fact::ToolResult {
                call_id: "m-1".into(),
                text: "rest".into(),
                is_error: false,
                after_output: Some(OutputPrefix { card: card.clone(), bytes: 300 }),
            }),
        ]);
        let error = parse(Path::new("x.jsonl"), &orphan).expect_err("damaged").to_string();
        assert!(error.starts_with("the session log x.jsonl is damaged at line 2: its tool result refers to 300 bytes of the output of call-4"), "{error}");
    }

    #[test]
    fn unknown_types_and_fields_are_skipped() {
        let bytes = b"{\"v\":1,\"seq\":1,\"type\":\"from_the_future\",\"data\":{}}\n{\"v\":1,\"seq\":2,\"type\":\"agent_text\",\"data\":{\"text\":\"a\",\"extra\":1}}\n";
        let (records, extent) = parsed(bytes);
        assert_eq!(records, vec![Record::Event(SessionEvent::AgentText { text: "a".into() })]);
        assert_eq!(extent.last_seq, 2);
    }
}
