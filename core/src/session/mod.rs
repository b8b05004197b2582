//! Sessions and what happens in them, in hotsh's own terms (no ACP types here).
//!
//! A session is its log: one ordered record of everything the client saw and everything the
//! model was given. Both the client's view and the model's history are folds of it
//! (`fold.rs`); a [`Session`] appends every record through its [`LogSink`] (the host's
//! writer) before it tells the client, so nothing a user saw is missing from the log.
//!
//! A [`SessionEvent`] is anything a client sees happen in a session. The turn emits them
//! through [`Session::emit`]; the host's ACP bridge (an [`EventSink`]) turns them into
//! `session/update` notifications.

pub mod fold;
mod history;
pub mod log;
mod tasks;

pub use history::{CUT_OFF_NOTICE, CUT_OFF_RESULT, ClearedOutputs, History};

pub use log::{Fact, OutputPrefix, ParentLink, Prompt, Record, SessionMeta, TurnOutcome};
pub use tasks::{Narrowing, task_end_of};

use crate::model::Message;
use crate::sandbox::Mode;
use crate::sync::lock;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// JSON kept as its text: a tool call's input and output, which hotsh passes on (to the log,
/// the client, hooks) and never looks into. Reading a log finds where they end and copies
/// them, nothing more: as JSON values, each map cost a load four allocations and a hash of
/// each key, and a JSON value again for the update that sends it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RawJson(Box<serde_json::value::RawValue>);

impl RawJson {
    /// `null`.
    pub fn null() -> Self {
        Self::from(&serde_json::Value::Null)
    }

    /// Its text: as serde_json wrote it, or as a log read holds it.
    pub fn text(&self) -> &str {
        self.0.get()
    }

    /// It parsed (`null` for JSON a value cannot hold, such as a number past `f64`'s range
    /// in a log another program wrote).
    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(self.text()).unwrap_or(serde_json::Value::Null)
    }
}

impl From<&serde_json::Value> for RawJson {
    fn from(value: &serde_json::Value) -> Self {
        Self(serde_json::value::to_raw_value(value).expect("a JSON value serialises"))
    }
}

impl From<serde_json::Value> for RawJson {
    fn from(value: serde_json::Value) -> Self {
        Self::from(&value)
    }
}

/// The same text (what a log keeps and a client is sent).
impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.text() == other.text()
    }
}

/// A session's id, opaque to everyone but the host (a UUID).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(pub String);

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The host's id of one tool call; the client's card (and terminal) id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ToolCallId(pub String);

impl std::fmt::Display for ToolCallId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl ToolCallId {
    /// N of `call-N`.
    pub fn number(&self) -> Option<u64> {
        self.0.strip_prefix("call-")?.parse().ok()
    }
}

/// How a tool call is shown (the host's mirror of the plugin ABI's card). Boxed, so that the
/// two events of every tool call stay small: records are moved whole between the log's
/// reader, the fold and the client's port, each move at the size of the largest variant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Card {
    Terminal(Box<TerminalCard>),
    Generic(Box<GenericCard>),
}

impl Card {
    pub fn terminal(card: TerminalCard) -> Self {
        Card::Terminal(Box::new(card))
    }

    pub fn generic(card: GenericCard) -> Self {
        Card::Generic(Box::new(card))
    }

    /// The card's title: the command of a terminal, the title of anything else.
    pub fn title(&self) -> &str {
        match self {
            Card::Terminal(card) => &card.command,
            Card::Generic(card) => &card.title,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalCard {
    pub command: String,
    pub description: Option<String>,
    pub cwd: String,
    pub exit: Option<TerminalExit>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalExit {
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    /// Why the command ended when it did not simply exit 0 ("Stopped: timed out after
    /// 300 ms."), from the host's own record of the command; shown to clients that cannot
    /// render a terminal's exit status.
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenericCard {
    pub title: String,
    pub kind: ToolKind,
    pub content: Option<String>,
    /// Places in files the call touches (the client follows along).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<FileLocation>,
    /// Changes to files, shown as diffs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diffs: Vec<FileDiff>,
    /// The child session (a subagent) the call runs: a client that shows child threads links
    /// the card to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
}

impl GenericCard {
    pub fn new(title: impl Into<String>, kind: ToolKind, content: Option<String>) -> Self {
        Self {
            title: title.into(),
            kind,
            content,
            locations: Vec::new(),
            diffs: Vec::new(),
            session: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileLocation {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDiff {
    pub path: String,
    /// `None` for a new file.
    pub old_text: Option<String>,
    pub new_text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    Read,
    Edit,
    Delete,
    Move,
    Search,
    Execute,
    Think,
    Fetch,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    Completed,
    Failed,
    /// The call returned but the work it started (a background task) goes on.
    Running,
}

/// Something a client sees happen in a session. Every variant but `UserMessage` is logged
/// as a record of the same name (`log.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum SessionEvent {
    AgentText {
        text: String,
    },
    AgentThought {
        text: String,
    },
    ToolCallStarted {
        call_id: ToolCallId,
        tool: String,
        card: Card,
        raw_input: RawJson,
        /// The model's arguments as it wrote them (to draw the card again on load).
        #[serde(default)]
        arguments: String,
    },
    /// Output of a running call's command, coalesced.
    ToolOutput {
        call_id: ToolCallId,
        text: String,
    },
    ToolCallFinished {
        call_id: ToolCallId,
        card: Card,
        status: CallStatus,
        raw_output: RawJson,
        /// The text the model received, when the call failed without a card of its own.
        error: Option<String>,
        /// What the tool returned to the model (to draw the card again on load): always the
        /// text of the call's `tool_result`, so the log keeps it there only.
        #[serde(default)]
        output_text: Option<String>,
        /// In the log: `output_text` is the text of the `tool_result` that follows (the fold
        /// puts it back).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        output_in_result: bool,
    },
    /// A plugin was reloaded, rejected or unloaded (not part of any turn).
    PluginChanged {
        call_id: ToolCallId,
        title: String,
        detail: String,
        failed: bool,
    },
    /// Something the host says about the session itself (not part of any turn): a mode change
    /// that leaves running background tasks as they were.
    HostNote {
        call_id: ToolCallId,
        title: String,
        detail: String,
    },
    /// A hook ran (or was not allowed to): its card, closed.
    HookRan {
        call_id: ToolCallId,
        /// Boxed, as the other large parts of events are (see [`Card`]).
        run: Box<HookRun>,
    },
    /// The model's plan for the work, whole (it replaces the one before).
    Plan {
        entries: Vec<PlanEntry>,
    },
    /// How much of the model's context window the session uses, after each answer.
    Usage(crate::context::ContextUse),
    /// A compaction began (its card id, and why).
    CompactionStarted {
        id: ToolCallId,
        trigger: crate::context::Trigger,
    },
    /// A chunk of a compaction's summary, as the model writes it.
    CompactionSummary {
        id: ToolCallId,
        text: String,
    },
    /// A compaction ended.
    CompactionEnded {
        id: ToolCallId,
        ended: CompactionEnd,
    },
    /// One content block of a user's prompt, shown again when a session is loaded (the client
    /// showed the prompt itself when it was sent; the log has it as a `prompt` record).
    #[serde(skip)]
    UserMessage {
        block: serde_json::Value,
    },
    /// A subagent (a child session) that the call `call_id` runs: announced when it opens,
    /// then each time its state changes.
    Subagent {
        call_id: ToolCallId,
        child: SessionId,
        /// The task's short description (the child thread's title).
        title: String,
        /// The agent definition it runs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
        state: SubagentState,
    },
    /// What a subagent does now, in one line, for a client that does not show child threads
    /// (its card says it). Never logged: the child's own log has it.
    #[serde(skip)]
    SubagentProgress {
        call_id: ToolCallId,
        text: String,
    },
}

/// Where a subagent's work stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SubagentState {
    Running,
    /// Its turn ended: how (`end_turn`, `cancelled`, `max_turn_requests`, `failed`).
    Idle {
        stop: String,
    },
    /// It waits for the user (a permission).
    RequiresAction,
}

impl SessionEvent {
    /// The record types of logged events, as written.
    pub const TYPES: &'static [&'static str] = &[
        "agent_text",
        "agent_thought",
        "tool_call_started",
        "tool_output",
        "tool_call_finished",
        "plugin_changed",
        "host_note",
        "plan",
        "usage",
        "compaction_started",
        "compaction_summary",
        "compaction_ended",
        "hook_ran",
        "subagent",
    ];
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanEntry {
    pub step: String,
    pub status: PlanStatus,
    #[serde(default)]
    pub priority: PlanPriority,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    Pending,
    InProgress,
    Completed,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanPriority {
    High,
    #[default]
    Medium,
    Low,
}

/// The plan as text (for a compaction summary).
pub fn describe_plan(entries: &[PlanEntry]) -> String {
    entries
        .iter()
        .map(|entry| {
            let mark = match entry.status {
                PlanStatus::Pending => "[ ]",
                PlanStatus::InProgress => "[~]",
                PlanStatus::Completed => "[x]",
            };
            format!("{mark} {}", entry.step)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One run of a hook, as its card shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookRun {
    /// The event (`PreToolUse`…), as Claude Code names it.
    pub event: String,
    pub command: String,
    /// Where it was configured (`~/.claude/settings.json`…).
    pub source: String,
    /// `exit 0`, `exit 2`, `timed out`, `not run: …`, `not allowed`.
    pub status: String,
    /// It did not exit 0.
    pub failed: bool,
    /// What it printed, bounded (stdout unless it asked to hide it, then stderr).
    pub output: String,
    /// What it decided, in words (`blocked: …`, `denied: …`, `added context`), if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

impl HookRun {
    pub fn title(&self) -> String {
        let line = self.command.lines().next().unwrap_or_default();
        let line = &line[..crate::text::floor_char_boundary(line, 80)];
        let more = if line.len() < self.command.trim_end().len() { " …" } else { "" };
        format!("{} hook ({}): {line}{more}", self.event, self.status)
    }
}

/// A question for the user that is not an escalation (whether a project's hooks may run,
/// whether a call a hook asks about may run): the client shows `intro`, then each quoted text
/// under its label, and the options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    pub call_id: String,
    pub title: String,
    /// hotsh's own words.
    pub intro: String,
    /// Texts hotsh does not control (a hook's reason, a call's arguments, a hook's command),
    /// each under hotsh's label: the client shows them so that none can pass for hotsh's
    /// words.
    pub quoted: Vec<(String, String)>,
    pub options: Vec<QuestionOption>,
}

/// One answer the user may give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionOption {
    pub id: String,
    pub label: String,
    pub kind: OptionKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionKind {
    AllowOnce,
    AllowAlways,
    RejectOnce,
}

/// What the user answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The id of the option chosen.
    Chose(String),
    Cancelled,
    /// No client that can ask is attached.
    Unavailable,
}

impl Reply {
    pub fn as_str(&self) -> &str {
        match self {
            Reply::Chose(id) => id,
            Reply::Cancelled => "cancelled",
            Reply::Unavailable => "unavailable",
        }
    }
}

/// How a compaction ended, as the client is shown it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionEnd {
    /// `completed`, `failed` or `cancelled`.
    pub status: String,
    pub trigger: crate::context::Trigger,
    /// Estimated tokens of the history before and (when it completed) after.
    pub tokens_before: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_after: Option<u64>,
    /// Why it failed or was cancelled; the history is as it was then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl CompactionEnd {
    /// One line for a card: what happened, and what it means for the conversation.
    pub fn describe(&self) -> String {
        let why = match self.trigger {
            crate::context::Trigger::Auto => "the context was nearly full",
            crate::context::Trigger::Overflow => "the model said the context was too long",
            crate::context::Trigger::Manual => "you asked with /compact",
        };
        match (self.status.as_str(), self.tokens_after, &self.error) {
            ("completed", Some(after), _) => format!(
                "The conversation was summarised ({why}): about {} → {} tokens. The full thread \
                 stays in the session's log.",
                self.tokens_before, after
            ),
            (status, _, error) => format!(
                "Compaction {status} ({why}); the conversation is as it was{}",
                error.as_ref().map(|e| format!(": {e}")).unwrap_or_else(|| ".".to_owned())
            ),
        }
    }
}

/// How a background task ended, as the log records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskEnd {
    pub task_id: String,
    /// `exited` or `killed`.
    pub state: String,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    /// The agent that ran it went away first.
    #[serde(default)]
    pub with_agent: bool,
    /// The sandbox mode it ran under and whether its end looks like a sandbox denial (absent
    /// in logs written before tasks carried them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<TaskSandbox>,
}

/// A background task's sandbox facts, judged when it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSandbox {
    pub mode: String,
    /// `file`, `network` or `syscall` when its failure looks like the sandbox's doing.
    pub denied: Option<String>,
}

impl TaskSandbox {
    /// The marker the model reads first (DESIGN §8), when the task was denied something.
    pub fn marker(&self) -> Option<String> {
        let denied = self.denied.as_ref()?;
        Some(format!("[sandbox: {denied} access denied under {} mode]", self.mode))
    }
}

/// Why a session's log cannot be written (a full disk, a file gone): once it happens, every
/// flush says so, and the turn that meets it fails with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LogFailed(pub String);

/// Where a session's records go: the port of the host's log writer. Records are appended in
/// the order of the calls; a flush writes everything appended so far.
pub trait LogSink: Send + Sync {
    /// Queues a record (waiting while the writer is behind).
    fn append(&self, record: Record) -> futures::future::BoxFuture<'_, ()>;

    /// Writes everything queued so far.
    fn flush(&self) -> futures::future::BoxFuture<'_, Result<(), LogFailed>>;

    /// Why the log cannot be written any more, once a write failed.
    fn failure(&self) -> Option<LogFailed>;

    /// Flushes and closes the log.
    fn close(&self) -> futures::future::BoxFuture<'_, ()>;
}

/// Where a session's events go: the port of the client.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: SessionEvent);

    /// Waits until the client can take another event (back-pressure: a client that stops
    /// reading stops the session's events, not the agent's memory).
    fn room(&self) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(async {})
    }

    /// A port for sending the session's thread again (`session/load`), when this client's
    /// has a faster one than event by event: what is emitted to it may wait in a batch
    /// until its [`room`](Self::room) or [`settle`](Self::settle) is awaited. `None`: the
    /// thread goes to this sink itself.
    fn replay_port(&self) -> Option<Arc<dyn EventSink>> {
        None
    }

    /// Waits until everything emitted so far is on its way to the client (a replay port's
    /// last batch handed over).
    fn settle(&self) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(async {})
    }

    /// The session's mode changed (`default` or `plan`).
    fn mode_changed(&self, mode: &str) {
        let _ = mode;
    }

    /// The session's title is now `title` (after its first prompt).
    fn title_changed(&self, title: &str) {
        let _ = title;
    }

    /// Asks the user whether a command may run under a wider sandbox mode. A sink that cannot
    /// ask answers `Unavailable`.
    fn ask_escalation(
        &self,
        ask: EscalationAsk,
    ) -> futures::future::BoxFuture<'static, EscalationAnswer> {
        let _ = ask;
        Box::pin(async { EscalationAnswer::Unavailable })
    }

    /// Asks the user `question`. A sink that cannot ask answers `Unavailable`.
    fn ask(&self, question: Question) -> futures::future::BoxFuture<'static, Reply> {
        let _ = question;
        Box::pin(async { Reply::Unavailable })
    }

    /// The client port of `child`, a subagent of this session, when the client shows child
    /// threads (its events then go to it under the child's own id); `None` when it does not.
    fn child(&self, child: &SessionId) -> Option<Arc<dyn EventSink>> {
        let _ = child;
        None
    }

    /// Which file operations the client performs for the agent.
    fn client_fs(&self) -> ClientFs {
        ClientFs::default()
    }

    /// Reads a text file through the client (the user's buffer, saved or not).
    fn read_text_file(
        &self,
        path: PathBuf,
    ) -> futures::future::BoxFuture<'static, Result<String, String>> {
        let _ = path;
        Box::pin(async { Err("the client does not read files".to_owned()) })
    }

    /// Writes a text file through the client's editor.
    fn write_text_file(
        &self,
        path: PathBuf,
        text: String,
    ) -> futures::future::BoxFuture<'static, Result<(), String>> {
        let _ = (path, text);
        Box::pin(async { Err("the client does not write files".to_owned()) })
    }
}

/// The client's file system capabilities (ACP `fs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientFs {
    pub read: bool,
    pub write: bool,
}

/// The ACP session mode ids.
pub const DEFAULT_MODE: &str = "default";
pub const PLAN_MODE: &str = "plan";

/// A command that wants a wider sandbox mode, as the user is asked about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscalationAsk {
    pub call_id: String,
    pub command: String,
    /// The session's folder.
    pub cwd: String,
    /// The folder the command runs in (the call's working directory).
    pub workdir: String,
    pub justification: String,
    pub mode: Mode,
    /// The mode the command would run under otherwise.
    pub standing: Mode,
    /// `command` is the path of a file to write, not a command.
    pub writes_file: bool,
    /// The rule "for this session" and "in this project" would add.
    pub rule: crate::permissions::Rule,
    /// A subagent asks: who it is (the request is the parent's, on the card of the call that
    /// runs it).
    pub asked_by: Option<String>,
}

/// What the user said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EscalationAnswer {
    AllowedOnce,
    /// Allowed, and the calls its rule covers for the rest of the session.
    AllowedForSession,
    /// Allowed, and the calls its rule covers in this project from now on.
    AllowedInProject,
    Rejected,
    /// The request was cancelled (the turn was cancelled, or the client withdrew it).
    Cancelled,
    /// No client that can ask is attached.
    Unavailable,
}

impl EscalationAnswer {
    pub fn as_str(self) -> &'static str {
        match self {
            EscalationAnswer::AllowedOnce => "allowed",
            EscalationAnswer::AllowedForSession => "allowed for this session",
            EscalationAnswer::AllowedInProject => "always allowed in this project",
            EscalationAnswer::Rejected => "rejected",
            EscalationAnswer::Cancelled => "cancelled",
            EscalationAnswer::Unavailable => "unavailable",
        }
    }
}

/// Why a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    Cancelled,
    /// The turn made as many model requests as one turn may.
    MaxTurnRequests,
}

/// A note for the model, waiting for its next request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingNotice {
    pub text: String,
    pub task_id: Option<String>,
}

/// Told of a question to the user, in words (see [`Session::on_questions`]).
pub type Asking = Arc<dyn Fn(String) + Send + Sync>;

/// One conversation: its log, and what is folded from it.
pub struct Session {
    pub id: SessionId,
    pub cwd: PathBuf,
    /// When it was created (RFC 3339, UTC), as its first record says.
    pub created_at: String,
    /// A subagent's parent, and what it allowed the subagent.
    pub parent: Option<ParentLink>,
    log: Box<dyn LogSink>,
    state: Mutex<State>,
    /// The running turn's cancel switch; `None` when idle.
    turn: Mutex<Option<CancellationToken>>,
    /// Told each time a turn ends (its slot is freed).
    turn_ended: tokio::sync::Notify,
    next_call: AtomicU64,
    /// Where this session's events go: the client connection that created or loaded it.
    sink: Mutex<Attached>,
    /// The session's one order: every record is appended, and every change to the session's
    /// state made, while holding it, so the log says what happened in the order it happened
    /// and events reach the client in the order they were logged.
    emitting: tokio::sync::Mutex<()>,
    /// Told of every question the user is asked, in words (the running turn's
    /// `Notification` hooks).
    asking: Mutex<Option<Asking>>,
}

/// The client a session's events go to.
#[derive(Default)]
struct Attached {
    sink: Option<Arc<dyn EventSink>>,
    /// While a client that loaded the session is sent its replay, live events wait here, so
    /// none reaches it before the replay is complete.
    held: Option<Vec<SessionEvent>>,
}

/// What is folded from the log and kept in memory.
#[derive(Debug, Default)]
struct State {
    history: History,
    /// The cleared tool results its requests carry ([`History::request_messages`]).
    cleared: ClearedOutputs,
    /// The session's title (its first prompt, shortened).
    title: Option<String>,
    /// Notices for the model, delivered into the history with its next request.
    notices: Vec<PendingNotice>,
    /// Bytes of live output logged per call (bounded by `log::MAX_OUTPUT_PER_CALL`).
    logged_output: HashMap<ToolCallId, usize>,
    /// The model this session chose, when it chose one.
    model: Option<String>,
    /// The reasoning effort this session chose, when it chose one.
    effort: Option<String>,
    /// The sandbox mode this session chose, when it chose one.
    sandbox_mode: Option<Mode>,
    /// In plan mode (which caps commands at read-only).
    planning: bool,
    /// What the model last saw of each file it read or wrote (SHA-256, hex), by real path.
    seen_files: HashMap<PathBuf, String>,
    /// The rules the user allowed for this session, in the order added.
    rules: Vec<crate::permissions::Rule>,
    /// The cards its background tasks left open.
    task_cards: tasks::TaskCards,
}

impl State {
    /// The change to the session a fact says, as its method makes it (the fold on load makes
    /// the same from the log): a choice, a rule, a file seen. Other facts change nothing
    /// here (the model's history takes its own in `append`; a task's start and end are
    /// logged by `task_started` and `task_ended`, which keep its card).
    fn apply(&mut self, fact: &Fact) {
        match fact {
            Fact::ModelChosen { model } => self.model = Some(model.clone()),
            Fact::EffortChosen { effort } => self.effort = Some(effort.clone()),
            Fact::SandboxMode { mode } => self.sandbox_mode = Some(*mode),
            Fact::SessionMode { mode } => self.planning = mode == PLAN_MODE,
            Fact::RuleAdded { rule } => {
                if !self.rules.contains(rule) {
                    self.rules.push(rule.clone());
                }
            }
            Fact::RuleRemoved { rule } => self.rules.retain(|kept| kept != rule),
            Fact::FileSeen { path, sha256 } => {
                self.seen_files.insert(path.clone(), sha256.clone());
            }
            Fact::Session(_)
            | Fact::Prompt(_)
            | Fact::Command { .. }
            | Fact::Compaction(_)
            | Fact::AssistantMessage { .. }
            | Fact::ToolResult { .. }
            | Fact::Notice { .. }
            | Fact::TurnEnded { .. }
            | Fact::CancelRequested {}
            | Fact::TaskStarted { .. }
            | Fact::TaskEnded(_)
            | Fact::TaskReported { .. }
            | Fact::Escalation { .. }
            | Fact::Question { .. } => {}
        }
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("cwd", &self.cwd)
            .finish_non_exhaustive()
    }
}

/// A second prompt arrived while a turn was running.
#[derive(Debug, thiserror::Error)]
#[error("a turn is already running in session {0}; cancel it or wait for it to end")]
pub struct Busy(pub SessionId);

impl Session {
    /// A session writing to `log`, with the state folded from its records so far.
    pub fn new(meta: &SessionMeta, log: Box<dyn LogSink>, folded: Option<&fold::Folded>) -> Self {
        let state = match folded {
            Some(folded) => State {
                history: folded.history.clone(),
                cleared: ClearedOutputs::new(),
                title: folded.title.clone(),
                notices: folded.pending_notices.clone(),
                logged_output: HashMap::new(),
                model: folded.model.clone(),
                effort: folded.effort.clone(),
                sandbox_mode: folded.sandbox_mode,
                planning: folded.session_mode.as_deref() == Some(PLAN_MODE),
                seen_files: folded.seen_files.clone(),
                rules: folded.rules.clone(),
                task_cards: tasks::TaskCards::default(),
            },
            None => State::default(),
        };
        Self {
            id: SessionId(meta.session_id.clone()),
            cwd: meta.cwd.clone(),
            created_at: meta.created_at.clone(),
            parent: meta.parent.clone(),
            log,
            state: Mutex::new(state),
            turn: Mutex::new(None),
            asking: Mutex::new(None),
            turn_ended: tokio::sync::Notify::new(),
            next_call: AtomicU64::new(folded.map_or(1, |f| f.next_call)),
            sink: Mutex::default(),
            emitting: tokio::sync::Mutex::new(()),
        }
    }

    /// Logs `event`, then sends it to the client (held while a loading client is sent its
    /// replay).
    pub async fn emit(&self, event: SessionEvent) {
        let _order = self.emitting.lock().await;
        self.emit_in_order(event).await;
    }

    /// [`Session::emit`], for a caller holding the order.
    async fn emit_in_order(&self, event: SessionEvent) {
        lock(&self.state).history.apply_event(&event);
        if let Some(logged) = self.bounded_for_log(&event) {
            self.log.append(Record::Event(logged)).await;
        }
        let sink = {
            let mut attached = lock(&self.sink);
            match &mut attached.held {
                Some(held) => {
                    held.push(event);
                    return;
                }
                None => attached.sink.clone(),
            }
        };
        if let Some(sink) = sink {
            sink.room().await;
            sink.emit(event);
        }
    }

    /// The event as the log keeps it: live output beyond the per-call bound is dropped, with
    /// one marker saying so.
    fn bounded_for_log(&self, event: &SessionEvent) -> Option<SessionEvent> {
        if let SessionEvent::ToolCallFinished {
            call_id,
            card,
            status,
            raw_output,
            error,
            output_text: Some(_),
            ..
        } = event
        {
            // Its text is the tool result's, logged with it: once is enough.
            return Some(SessionEvent::ToolCallFinished {
                call_id: call_id.clone(),
                card: card.clone(),
                status: *status,
                raw_output: raw_output.clone(),
                error: error.clone(),
                output_text: None,
                output_in_result: true,
            });
        }
        let SessionEvent::ToolOutput { call_id, text } = event else {
            return Some(event.clone());
        };
        let mut state = lock(&self.state);
        let logged = state.logged_output.entry(call_id.clone()).or_insert(0);
        let before = *logged;
        *logged = before.saturating_add(text.len());
        if *logged <= log::MAX_OUTPUT_PER_CALL {
            return Some(event.clone());
        }
        (before <= log::MAX_OUTPUT_PER_CALL).then(|| SessionEvent::ToolOutput {
            call_id: call_id.clone(),
            text: format!(
                "\n[… output beyond {} MiB of this command is not logged …]\n",
                log::MAX_OUTPUT_PER_CALL >> 20
            ),
        })
    }

    /// Logs a fact, with the change to the session it says (a choice, a rule, a file seen,
    /// a message of the model's history), in one step of the session's order: no caller can
    /// log a fact the session's state then does not show.
    pub async fn record(&self, fact: Fact) {
        match fact {
            // Its card is kept too: see `task_started`.
            Fact::TaskStarted { .. } => self.task_started(fact).await,
            fact => self.record_applied(fact).await,
        }
    }

    /// [`Session::record`] of a fact whose change `State::apply` makes.
    pub(super) async fn record_applied(&self, fact: Fact) {
        let _order = self.emitting.lock().await;
        lock(&self.state).apply(&fact);
        self.append(Record::Fact(fact)).await;
    }

    /// Changes the session's state and logs the fact that says so, in one step of the
    /// session's order: two changes are logged in the order they were applied.
    async fn change<T>(&self, fact: Fact, apply: impl FnOnce(&mut State) -> T) -> T {
        let _order = self.emitting.lock().await;
        let applied = apply(&mut lock(&self.state));
        self.append(Record::Fact(fact)).await;
        applied
    }

    /// Appends a record (the caller holds the order); one that belongs to the model's
    /// history joins it.
    async fn append(&self, record: Record) {
        lock(&self.state).history.apply(&record);
        self.log.append(record).await;
    }

    /// Writes everything logged so far to the file.
    pub async fn flush(&self) -> Result<(), LogFailed> {
        self.log.flush().await
    }

    /// [`Session::flush`], where a failure is only logged (it fails the turn when it ends).
    pub async fn flush_or_warn(&self) {
        if let Err(failure) = self.flush().await {
            tracing::warn!(session = %self.id, "{failure}");
        }
    }

    /// Why the log cannot be written any more, if so.
    pub fn log_failure(&self) -> Option<LogFailed> {
        self.log.failure()
    }

    /// Flushes and closes the log (and releases its lock).
    pub async fn close_log(&self) {
        self.log.close().await;
    }

    pub fn add_notice(&self, notice: PendingNotice) {
        lock(&self.state).notices.push(notice);
    }

    /// Drops the pending notices of tasks `reported` says the model already knows ended, and
    /// logs that it knows (the fold then owes no notice either); the caller holds the order.
    async fn withdraw_reported(&self, reported: impl Fn(&str) -> bool) {
        let withdrawn: Vec<String> = {
            let mut state = lock(&self.state);
            let (known, due): (Vec<_>, Vec<_>) = std::mem::take(&mut state.notices)
                .into_iter()
                .partition(|n| n.task_id.as_deref().is_some_and(&reported));
            state.notices = due;
            known.into_iter().filter_map(|n| n.task_id).collect()
        };
        for task_id in withdrawn {
            self.append(Record::Fact(Fact::TaskReported { task_id })).await;
        }
    }

    /// Drops notices not delivered yet (the session is closing).
    pub fn drop_notices(&self) {
        lock(&self.state).notices.clear();
    }

    /// Moves pending notices into the history (and the log), where the next model request
    /// will see them; those of tasks `reported` says the model knows ended are withdrawn.
    pub async fn deliver_notices(&self, reported: impl Fn(&str) -> bool) {
        let _order = self.emitting.lock().await;
        self.withdraw_reported(reported).await;
        self.append_notices().await;
    }

    /// [`Session::deliver_notices`], for a caller holding the order.
    async fn append_notices(&self) {
        let notices = std::mem::take(&mut lock(&self.state).notices);
        for notice in notices {
            let fact = Fact::Notice { text: notice.text, task_id: notice.task_id };
            self.append(Record::Fact(fact)).await;
        }
    }

    pub fn attach(&self, sink: Arc<dyn EventSink>) {
        *lock(&self.sink) = Attached { sink: Some(sink), held: None };
    }

    /// Attaches a client that is to be sent the session's replay: `snapshot` (a read of the
    /// log) is taken in the session's order, after everything logged so far is flushed, and
    /// from then on live events are held for the client until [`Session::release_held`]. So
    /// the replay holds everything up to the snapshot and the live events everything after.
    /// A snapshot that fails attaches nothing.
    pub async fn attach_for_replay<T, E>(
        &self,
        sink: Arc<dyn EventSink>,
        snapshot: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let _order = self.emitting.lock().await;
        if let Err(failure) = self.log.flush().await {
            tracing::warn!(session = %self.id, "{failure}");
        }
        let taken = snapshot.await?;
        *lock(&self.sink) = Attached { sink: Some(sink), held: Some(Vec::new()) };
        Ok(taken)
    }

    /// The replay was sent: the live events held meanwhile follow it, in order.
    pub async fn release_held(&self) {
        let _order = self.emitting.lock().await;
        let (sink, held) = {
            let mut attached = lock(&self.sink);
            (attached.sink.clone(), attached.held.take().unwrap_or_default())
        };
        if let Some(sink) = sink {
            for event in held {
                sink.room().await;
                sink.emit(event);
            }
        }
    }

    pub fn sink(&self) -> Option<Arc<dyn EventSink>> {
        lock(&self.sink).sink.clone()
    }

    /// Starts a turn for `prompt`, in one step of the session's order: the notices waiting
    /// for the model (but those `reported` says it knows already) and the prompt are logged,
    /// and the turn slot taken; returns the turn's cancel switch. A cancel is therefore
    /// always logged inside the turn it cancels.
    pub async fn begin_turn(
        &self,
        opening: impl Into<Fact>,
        reported: impl Fn(&str) -> bool,
    ) -> Result<CancellationToken, Busy> {
        let opening = opening.into();
        let _order = self.emitting.lock().await;
        if lock(&self.turn).is_some() {
            return Err(Busy(self.id.clone()));
        }
        self.withdraw_reported(reported).await;
        self.append_notices().await;
        if let Fact::Prompt(prompt) = &opening {
            lock(&self.state).title.get_or_insert_with(|| title_of(&prompt.text));
        }
        self.append(Record::Fact(opening)).await;
        let token = CancellationToken::new();
        *lock(&self.turn) = Some(token.clone());
        Ok(token)
    }

    /// Logs how the running turn ended and frees the turn slot, in one step of the
    /// session's order: a cancel is either logged before this or finds no turn.
    pub async fn end_turn(&self, ended: Fact) {
        let _order = self.emitting.lock().await;
        // The ends of tasks whose start no call logged (a call given up on while it ran):
        // logged now rather than never.
        self.end_unstarted_tasks().await;
        self.append(Record::Fact(ended)).await;
        *lock(&self.turn) = None;
        self.turn_ended.notify_waiters();
    }

    /// Waits until no turn runs.
    pub async fn no_turn(&self) {
        loop {
            let ended = self.turn_ended.notified();
            tokio::pin!(ended);
            // Registered before the check: an end between the two still wakes us.
            ended.as_mut().enable();
            if lock(&self.turn).is_none() {
                return;
            }
            ended.await;
        }
    }

    /// The user cancelled the running turn: logged, then the turn is told (so the cancel is
    /// in the log before anything the cancelled turn records after it). False when no turn
    /// runs (or it was cancelled already).
    pub async fn cancel_turn(&self) -> bool {
        let _order = self.emitting.lock().await;
        let Some(token) = lock(&self.turn).clone().filter(|t| !t.is_cancelled()) else {
            return false;
        };
        self.append(Record::Fact(Fact::CancelRequested {})).await;
        token.cancel();
        true
    }

    /// Cancels the running turn, if any, without logging it (the session is closing).
    /// Whether a turn runs (the session is answering a prompt).
    pub fn answering(&self) -> bool {
        lock(&self.turn).is_some()
    }

    pub fn cancel(&self) -> bool {
        match lock(&self.turn).as_ref() {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    pub fn next_call_id(&self) -> ToolCallId {
        ToolCallId(format!("call-{}", self.next_call.fetch_add(1, Ordering::Relaxed)))
    }

    /// The model this session chose, if it chose one.
    pub fn model_choice(&self) -> Option<String> {
        lock(&self.state).model.clone()
    }

    /// Switches the session to `model` (a name the host offers), in the log and here.
    pub async fn choose_model(&self, model: String) {
        self.record(Fact::ModelChosen { model }).await;
    }

    /// The reasoning effort this session chose, if it chose one.
    pub fn effort_choice(&self) -> Option<String> {
        lock(&self.state).effort.clone()
    }

    /// Sets the session's reasoning effort (a level its model offers), in the log and here.
    pub async fn choose_effort(&self, effort: String) {
        self.record(Fact::EffortChosen { effort }).await;
    }

    /// The sandbox mode this session chose, if it chose one.
    pub fn sandbox_choice(&self) -> Option<Mode> {
        lock(&self.state).sandbox_mode
    }

    /// Sets the session's sandbox override, in the log and here.
    pub async fn choose_sandbox_mode(&self, mode: Mode) {
        self.record(Fact::SandboxMode { mode }).await;
    }

    /// Whether the session is in plan mode.
    pub fn planning(&self) -> bool {
        lock(&self.state).planning
    }

    /// Enters or leaves plan mode, in the log and here; returns whether it was planning
    /// before. The sandbox override is a separate fold: leaving plan finds it untouched.
    pub async fn set_planning(&self, planning: bool) -> bool {
        let mode = if planning { PLAN_MODE } else { DEFAULT_MODE };
        let fact = Fact::SessionMode { mode: mode.to_owned() };
        self.change(fact, |state| std::mem::replace(&mut state.planning, planning)).await
    }

    /// The cap of the session's mode: plan allows read-only commands at most.
    pub fn sandbox_cap(&self) -> Option<Mode> {
        self.planning().then_some(Mode::ReadOnly)
    }

    /// Asks the user (through the attached client) whether a command may run under a wider
    /// mode, and logs the question and the answer.
    pub async fn ask_escalation(
        self: &Arc<Self>,
        ask: EscalationAsk,
        cancel: &CancellationToken,
    ) -> EscalationAnswer {
        self.notify(format!("hotsh needs your permission to run `{}`", ask.command));
        let answer = match self.sink() {
            // Dropping the question when the turn is cancelled withdraws it from the client.
            Some(sink) => tokio::select! {
                answer = sink.ask_escalation(ask.clone()) => answer,
                () = cancel.cancelled() => EscalationAnswer::Cancelled,
            },
            None => EscalationAnswer::Unavailable,
        };
        self.record_escalation(&ask, answer.as_str()).await;
        answer
    }

    /// Asks the user `question` (through the attached client), and logs the question and the
    /// answer.
    pub async fn ask(self: &Arc<Self>, question: Question, cancel: &CancellationToken) -> Reply {
        self.notify(format!("hotsh asks: {}", question.title));
        let reply = match self.sink() {
            Some(sink) => tokio::select! {
                reply = sink.ask(question.clone()) => reply,
                () = cancel.cancelled() => Reply::Cancelled,
            },
            None => Reply::Unavailable,
        };
        self.record(Fact::Question {
            call_id: question.call_id,
            title: question.title,
            answer: reply.as_str().to_owned(),
        })
        .await;
        let _ = self.flush().await;
        reply
    }

    /// Who is told of every question the user is asked while the turn that runs now runs
    /// (`None`: nobody).
    pub fn on_questions(&self, asking: Option<Asking>) {
        *lock(&self.asking) = asking;
    }

    /// Tells whoever asked to be told of a question to the user: beside it, never holding it
    /// up.
    fn notify(&self, message: String) {
        if let Some(told) = lock(&self.asking).clone() {
            told(message);
        }
    }

    /// Logs an escalation request and its outcome.
    pub async fn record_escalation(&self, ask: &EscalationAsk, answer: &str) {
        self.record(Fact::Escalation {
            call_id: ask.call_id.clone(),
            command: ask.command.clone(),
            justification: ask.justification.clone(),
            mode: ask.mode,
            answer: answer.to_owned(),
        })
        .await;
        let _ = self.flush().await;
    }

    /// The rules the user allowed for this session, in the order added.
    pub fn rules(&self) -> Vec<crate::permissions::Rule> {
        lock(&self.state).rules.clone()
    }

    /// Adds `rule` to the session's (a rule it has already is not added again), in the log
    /// and here.
    pub async fn add_rule(&self, rule: crate::permissions::Rule) {
        if lock(&self.state).rules.contains(&rule) {
            return;
        }
        // Two answers at once may both pass the check above; the fold keeps one, and so
        // here (`State::apply`).
        self.record(Fact::RuleAdded { rule }).await;
        let _ = self.flush().await;
    }

    /// Removes `rule` from the session's, in the log and here; whether it had it.
    pub async fn remove_rule(&self, rule: &crate::permissions::Rule) -> bool {
        if !lock(&self.state).rules.contains(rule) {
            return false;
        }
        self.record(Fact::RuleRemoved { rule: rule.clone() }).await;
        let _ = self.flush().await;
        true
    }

    /// The SHA-256 of the text the model last read or wrote at `path`, if it did.
    pub fn seen_file(&self, path: &std::path::Path) -> Option<String> {
        lock(&self.state).seen_files.get(path).cloned()
    }

    /// Remembers (and logs) that the model has seen `sha256` as the text at `path`.
    pub async fn remember_file(&self, path: PathBuf, sha256: String) {
        let _order = self.emitting.lock().await;
        let previous = lock(&self.state).seen_files.insert(path.clone(), sha256.clone());
        if previous.as_ref() != Some(&sha256) {
            self.append(Record::Fact(Fact::FileSeen { path, sha256 })).await;
        }
    }

    pub fn messages(&self) -> Vec<std::sync::Arc<Message>> {
        lock(&self.state).history.messages.clone()
    }

    /// The messages the next request carries: the history, its older tool outputs cleared
    /// (all but the newest `keep` tokens of output: [`History::request_messages`]).
    pub fn request_messages(&self, keep: Option<u64>) -> Vec<std::sync::Arc<Message>> {
        let state = &mut *lock(&self.state);
        state.history.request_messages(keep, &mut state.cleared)
    }

    /// The tokens the next request carries; `fixed`: those of its system prompt and tools;
    /// its older tool outputs cleared as [`Session::request_messages`] clears them.
    pub fn context_estimate(&self, fixed: u64, keep: Option<u64>) -> u64 {
        lock(&self.state).history.estimate(fixed, keep)
    }

    /// Whether a compaction would replace anything.
    pub fn compactable(&self) -> bool {
        lock(&self.state).history.compactable()
    }

    /// The model's plan, as text (for a compaction summary), when it keeps one.
    pub fn plan_text(&self) -> Option<String> {
        let state = lock(&self.state);
        state.history.plan.as_deref().filter(|p| !p.is_empty()).map(describe_plan)
    }

    /// The context use last shown (live, or folded from the log).
    pub fn context_shown(&self) -> Option<crate::context::ContextUse> {
        lock(&self.state).history.shown.clone()
    }

    /// The session's title, once it has a prompt.
    pub fn title(&self) -> Option<String> {
        lock(&self.state).title.clone()
    }
}

/// A session title from a prompt: its first line, at most 80 characters.
pub fn title_of(prompt: &str) -> String {
    let line = prompt.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let mut title: String = line.chars().take(80).collect();
    if title.len() < line.len() {
        title.push('…');
    }
    title
}

/// "exited with code 0", "was killed (SIGTERM)", "was ended by signal SIGSEGV".
pub fn describe_task_end(end: &TaskEnd) -> String {
    match (end.state.as_str(), end.exit_code, &end.signal) {
        ("killed", _, Some(signal)) => format!("was killed ({signal})"),
        ("killed", _, None) => "was killed".to_owned(),
        (_, Some(code), _) => format!("exited with code {code}"),
        (_, None, Some(signal)) => format!("was ended by signal {signal}"),
        (_, None, None) => "ended".to_owned(),
    }
}

/// The notice the model reads, at its next request, about a background task that ended.
pub fn task_notice(
    task_id: &str,
    command: &str,
    end: &TaskEnd,
    output_path: &std::path::Path,
) -> PendingNotice {
    let mut shown: String = command.chars().take(200).collect();
    if shown.len() < command.len() {
        shown.push('…');
    }
    let text = if end.with_agent {
        // The agent's temporary files went with it, unless it was killed.
        let output = if output_path.exists() {
            format!("its output until then: {}", output_path.display())
        } else {
            "its output went with that agent's temporary files".to_owned()
        };
        format!(
            "[background task {task_id} `{shown}` ended when the agent that ran it went away; \
             it cannot be read or killed any more; {output}]"
        )
    } else {
        let marker = end.sandbox.as_ref().and_then(TaskSandbox::marker);
        format!(
            "{}[background task {task_id} `{shown}` {}. Its unread output can still be read by \
             its task id; full output: {}]",
            marker.map(|m| m + " ").unwrap_or_default(),
            describe_task_end(end),
            output_path.display()
        )
    };
    PendingNotice { text, task_id: Some(task_id.to_owned()) }
}
