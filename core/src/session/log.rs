//! What a session's log holds: its records, in the host's serialisable form (the envelope,
//! reading and writing are the host's: `host/src/session/log.rs` documents the format).

use super::{SessionEvent, TaskEnd};
use crate::model::{Message, ModelToolCall, PromptImage, Usage};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The most live output logged per tool call.
pub const MAX_OUTPUT_PER_CALL: usize = 1 << 20;

/// Facts that are not a client's view of the session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum Fact {
    /// Boxed, as the other large facts are: every record is moved whole between the log's
    /// reader, the fold and the client's port, each move at the size of the largest variant
    /// (see [`super::Card`]).
    Session(Box<SessionMeta>),
    Prompt(Prompt),
    /// A slash command the user typed (shown as their message; the model does not see it).
    Command {
        text: String,
        blocks: Vec<serde_json::Value>,
    },
    /// The history was replaced by a summary (the records before it stay in the log).
    Compaction(Box<crate::context::Compaction>),
    AssistantMessage {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
        tool_calls: Vec<ModelToolCall>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Box<Usage>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
    },
    ToolResult {
        call_id: String,
        text: String,
        is_error: bool,
        /// In the log only: `text` goes on from the first bytes of the output logged for a
        /// card (the part the model's text and the terminal share, logged once); reading the
        /// log puts them back, so everywhere else this is `None` and `text` is whole.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after_output: Option<OutputPrefix>,
    },
    Notice {
        text: String,
        #[serde(default)]
        task_id: Option<String>,
    },
    TurnEnded {
        outcome: TurnOutcome,
        #[serde(default)]
        message: Option<String>,
    },
    CancelRequested {},
    TaskStarted {
        task_id: String,
        call_id: String,
        command: String,
        output_path: PathBuf,
    },
    TaskEnded(Box<TaskEnd>),
    /// The model learned how a task ended from a tool (it killed the task, or read its end):
    /// no notice is due for it.
    TaskReported {
        task_id: String,
    },
    ModelChosen {
        model: String,
    },
    /// The session's reasoning effort (last wins).
    EffortChosen {
        effort: String,
    },
    /// The session's sandbox override (last wins).
    SandboxMode {
        mode: crate::sandbox::Mode,
    },
    /// The session's ACP mode (`default` or `plan`; last wins).
    SessionMode {
        mode: String,
    },
    /// A command asked for a wider mode, and what came of it.
    Escalation {
        call_id: String,
        command: String,
        justification: String,
        mode: crate::sandbox::Mode,
        /// `allowed`, `allowed for this session`, `always allowed in this project`, `allowed by
        /// a rule`, `rejected`, `cancelled`, `unavailable` or `refused` (at the gate).
        answer: String,
    },
    /// The user was asked something that is not an escalation (a project's hooks, a call a
    /// hook asked about), and answered with this option id (or `cancelled`, `unavailable`).
    Question {
        call_id: String,
        title: String,
        answer: String,
    },
    /// The user allowed the calls a rule covers for the rest of the session.
    RuleAdded {
        rule: crate::permissions::Rule,
    },
    /// The user removed a rule of the session (`/permissions remove`).
    RuleRemoved {
        rule: crate::permissions::Rule,
    },
    /// The model read or wrote a file: its text then had this SHA-256 (a later edit of a
    /// file whose text differs is refused as stale).
    FileSeen {
        path: PathBuf,
        sha256: String,
    },
}

impl From<Prompt> for Fact {
    fn from(prompt: Prompt) -> Self {
        Fact::Prompt(prompt)
    }
}

/// The first `bytes` bytes of the live output logged for the card `card`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputPrefix {
    pub card: super::ToolCallId,
    pub bytes: usize,
}

/// One record: a client-visible event or another fact.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Event(SessionEvent),
    Fact(Fact),
}

/// The first record of every log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMeta {
    pub session_id: String,
    pub cwd: PathBuf,
    pub created_at: String,
    /// `hotsh 0.1.0 (commit …)`.
    pub agent: String,
    /// The session is a subagent: the session and tool call that opened it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// The session is a fork of this one (its history up to the fork is the other's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
}

/// What ties a subagent's session to its parent, and what the parent allowed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    pub session_id: String,
    /// The parent's card of the call that opened it.
    pub call_id: String,
    /// The agent definition it runs (`None`: a general-purpose subagent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The task's short description (the child thread's title).
    pub description: String,
    /// 1 for the parent's child, 2 for its grandchild…
    pub depth: u32,
    /// The widest sandbox mode it may choose: its parent's when it was opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_mode: Option<crate::sandbox::Mode>,
    /// The tools it is offered (hotsh's names); `None`: all of its parent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Its agent definition's instructions, part of its system prompt (kept here: the file
    /// may change or go, the session goes on as it began).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

/// A user prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    /// What the model reads.
    pub text: String,
    /// The client's content blocks, as sent (opaque to everything but the ACP bridge).
    pub blocks: Vec<serde_json::Value>,
    /// The prompt's images, for models that take them (`text` names each `[image N]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<PromptImage>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnOutcome {
    EndTurn,
    Cancelled,
    Failed,
    /// The turn made as many model requests as one turn may.
    MaxTurnRequests,
}

impl Record {
    /// The message this record adds to the model's history, if any.
    pub fn history_message(&self) -> Option<Message> {
        match self {
            Record::Fact(Fact::Prompt(prompt)) => {
                Some(Message::User { text: prompt.text.clone(), images: prompt.images.clone() })
            }
            Record::Fact(Fact::AssistantMessage { text, reasoning, tool_calls, .. }) => {
                Some(Message::Assistant {
                    text: text.clone(),
                    reasoning: reasoning.clone(),
                    tool_calls: tool_calls.clone(),
                })
            }
            Record::Fact(Fact::ToolResult { call_id, text, is_error, .. }) => Some(Message::Tool {
                call_id: call_id.clone(),
                text: text.clone(),
                is_error: *is_error,
            }),
            Record::Fact(Fact::Notice { text, .. }) => Some(Message::Notice { text: text.clone() }),
            _ => None,
        }
    }
}

impl Fact {
    /// The record types of facts, as written.
    pub const TYPES: &'static [&'static str] = &[
        "session",
        "prompt",
        "command",
        "compaction",
        "assistant_message",
        "tool_result",
        "notice",
        "turn_ended",
        "cancel_requested",
        "task_started",
        "task_ended",
        "task_reported",
        "model_chosen",
        "effort_chosen",
        "sandbox_mode",
        "session_mode",
        "escalation",
        "rule_added",
        "rule_removed",
        "question",
        "file_seen",
    ];
}
