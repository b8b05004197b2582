//! Sessions and what happens in them, in the host's own terms (no ACP types here).
//!
//! A [`SessionEvent`] is anything a client sees happen in a session. The turn loop emits them
//! through an [`EventSink`]; the ACP bridge turns them into `session/update` notifications.

use crate::model::Message;
use crate::sync::lock;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// A session's id, opaque to everyone but the host.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SessionId(pub(crate) String);

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The host's id of one tool call; the client's card (and terminal) id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ToolCallId(pub(crate) String);

impl std::fmt::Display for ToolCallId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a tool call is shown (the host's mirror of the plugin ABI's card).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Card {
    Terminal(TerminalCard),
    Generic(GenericCard),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TerminalCard {
    pub(crate) command: String,
    pub(crate) description: Option<String>,
    pub(crate) cwd: String,
    pub(crate) exit: Option<TerminalExit>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TerminalExit {
    pub(crate) exit_code: Option<i32>,
    pub(crate) signal: Option<String>,
    /// Why the command ended when it did not simply exit 0 ("Stopped: timed out after
    /// 300 ms."), from the host's own record of the command; shown to clients that cannot
    /// render a terminal's exit status.
    pub(crate) reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GenericCard {
    pub(crate) title: String,
    pub(crate) kind: ToolKind,
    pub(crate) content: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToolKind {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallStatus {
    Completed,
    Failed,
    /// The call returned but the work it started (a background task) goes on.
    Running,
}

/// Something a client sees happen in a session.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SessionEvent {
    AgentText(String),
    AgentThought(String),
    ToolCallStarted {
        call_id: ToolCallId,
        tool: String,
        card: Card,
        raw_input: serde_json::Value,
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
        raw_output: serde_json::Value,
        /// The text the model received, when the call failed without a card of its own.
        error: Option<String>,
    },
    /// A plugin was reloaded, rejected or unloaded (not part of any turn).
    PluginChanged {
        call_id: ToolCallId,
        title: String,
        detail: String,
        failed: bool,
    },
}

/// Where a session's events go.
pub(crate) trait EventSink: Send + Sync {
    fn emit(&self, event: SessionEvent);
}

/// Why a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopReason {
    EndTurn,
    Cancelled,
}

/// One conversation with its working directory and history.
pub(crate) struct Session {
    pub(crate) id: SessionId,
    pub(crate) cwd: PathBuf,
    pub(crate) history: Mutex<Vec<Message>>,
    /// The running turn's cancel switch; `None` when idle.
    turn: Mutex<Option<CancellationToken>>,
    next_call: AtomicU64,
    /// Where this session's events go: the client connection that created it.
    sink: Mutex<Option<Arc<dyn EventSink>>>,
    /// Notices for the model (e.g. a background task ended), delivered with the next model
    /// request.
    notices: Mutex<Vec<String>>,
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
pub(crate) struct Busy(pub(crate) SessionId);

impl Session {
    pub(crate) fn new(id: SessionId, cwd: PathBuf) -> Self {
        Self {
            id,
            cwd,
            history: Mutex::new(Vec::new()),
            turn: Mutex::new(None),
            next_call: AtomicU64::new(1),
            sink: Mutex::new(None),
            notices: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn add_notice(&self, text: String) {
        lock(&self.notices).push(text);
    }

    /// Moves pending notices into the history, where the next model request will see them.
    pub(crate) fn deliver_notices(&self) {
        let notices = std::mem::take(&mut *lock(&self.notices));
        let mut history = lock(&self.history);
        history.extend(notices.into_iter().map(|text| Message::Notice { text }));
    }

    pub(crate) fn attach(&self, sink: Arc<dyn EventSink>) {
        *lock(&self.sink) = Some(sink);
    }

    pub(crate) fn sink(&self) -> Option<Arc<dyn EventSink>> {
        lock(&self.sink).clone()
    }

    /// Marks a turn as running and returns its cancel switch.
    pub(crate) fn begin_turn(&self) -> Result<CancellationToken, Busy> {
        let mut turn = lock(&self.turn);
        if turn.is_some() {
            return Err(Busy(self.id.clone()));
        }
        let token = CancellationToken::new();
        *turn = Some(token.clone());
        Ok(token)
    }

    pub(crate) fn end_turn(&self) {
        *lock(&self.turn) = None;
    }

    /// Cancels the running turn, if any.
    pub(crate) fn cancel(&self) -> bool {
        match lock(&self.turn).as_ref() {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    pub(crate) fn next_call_id(&self) -> ToolCallId {
        ToolCallId(format!("call-{}", self.next_call.fetch_add(1, Ordering::Relaxed)))
    }

    pub(crate) fn push(&self, message: Message) {
        lock(&self.history).push(message);
    }

    pub(crate) fn messages(&self) -> Vec<Message> {
        lock(&self.history).clone()
    }
}
