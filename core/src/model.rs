//! The model port: what a turn sends a model and what it streams back. Adapters (an
//! OpenAI-compatible client, a script) live in the host.

use futures::future::BoxFuture;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::mpsc;

/// One message of the conversation, in the order the model saw or said it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    User {
        text: String,
        /// Images of the prompt, in order; the text names each as `[image N]`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<PromptImage>,
    },
    Assistant {
        text: String,
        /// The model's reasoning (DeepSeek's `reasoning_content`), when it showed any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
        tool_calls: Vec<ModelToolCall>,
    },
    Tool {
        call_id: String,
        text: String,
        is_error: bool,
    },
    /// Something the host tells the model between messages, e.g. that a background task ended.
    Notice {
        text: String,
    },
}

/// An image of a prompt: its MIME type and base64 data, as the client sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PromptImage {
    pub mime_type: String,
    pub data: String,
}

/// A tool call as the model made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ModelToolCall {
    /// The model's id for the call, echoed back with its result.
    pub id: String,
    pub name: String,
    /// The arguments exactly as the model produced them (JSON text, possibly malformed).
    pub arguments: String,
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    pub input_schema: Schema,
    /// What its calls may do, as its provider declares it (the host's business, not the
    /// model's: never sent).
    #[serde(skip)]
    pub effects: ToolEffects,
}

/// A tool's input schema (JSON Schema), shared: a turn's tools are taken again for every
/// request, so a clone costs a count, and its JSON text (what a request carries and what the
/// context estimate counts) is written once.
#[derive(Debug, Clone)]
pub struct Schema(Arc<(serde_json::Value, String)>);

impl Schema {
    pub fn new(value: serde_json::Value) -> Self {
        let json = value.to_string();
        Self(Arc::new((value, json)))
    }

    /// The schema as JSON text.
    pub fn json(&self) -> &str {
        &self.0.1
    }
}

impl From<serde_json::Value> for Schema {
    fn from(value: serde_json::Value) -> Self {
        Self::new(value)
    }
}

impl std::ops::Deref for Schema {
    type Target = serde_json::Value;

    fn deref(&self) -> &serde_json::Value {
        &self.0.0
    }
}

impl PartialEq for Schema {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.0 == other.0.0
    }
}

impl Serialize for Schema {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.0.serialize(serializer)
    }
}

/// What a tool's calls may do, as its provider declares it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolEffects {
    pub runs_commands: bool,
    pub writes_files: bool,
    /// Calls of it that the model makes one after another in an answer run together (a
    /// subagent's), not one at a time.
    pub concurrent: bool,
}

/// Everything one model request carries.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelRequest {
    pub system: String,
    /// Shared with the session's history (a request costs no copy of it; an adapter may keep
    /// what it made of a message by its address while it holds the message).
    pub messages: Vec<Arc<Message>>,
    pub tools: Vec<ToolDefinition>,
    /// The reasoning effort the session chose (a level the model's profile names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
}

/// What an adapter streams while it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelEvent {
    Text(String),
    Reasoning(String),
    ToolCall(ModelToolCall),
    /// Token counts of the answer, when the provider reports them.
    Usage(Usage),
    /// Why the model stopped (`stop`, `tool_calls`, `length`, …).
    Finished(String),
}

/// Token counts, as providers report them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub total_tokens: Option<u64>,
    /// Prompt tokens served from the provider's cache (DeepSeek `prompt_cache_hit_tokens`,
    /// OpenAI `prompt_tokens_details.cached_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
}

/// The most tokens a provider can have counted for one request (2^40, a thousand billion):
/// a larger count is a provider's or a proxy's bug, not a bill.
pub const MAX_TOKENS_REPORTED: u64 = 1 << 40;

impl Usage {
    /// Why these counts cannot be what the model did with a window of `window` tokens: a
    /// count over [`MAX_TOKENS_REPORTED`], a context over ten windows, more cached tokens
    /// than prompt tokens. Such a usage is ignored (never shown, priced or logged).
    pub fn implausible(&self, window: u64) -> Option<String> {
        let counts =
            [self.prompt_tokens, self.completion_tokens, self.total_tokens, self.cached_tokens];
        if let Some(count) = counts.into_iter().flatten().find(|&n| n > MAX_TOKENS_REPORTED) {
            return Some(format!("a count of {count} tokens"));
        }
        let used = self.prompt_tokens.unwrap_or(0) + self.completion_tokens.unwrap_or(0);
        if used > window.saturating_mul(10) {
            return Some(format!("{used} tokens used with a window of {window}"));
        }
        match (self.cached_tokens, self.prompt_tokens) {
            (Some(cached), Some(prompt)) if cached > prompt => {
                Some(format!("{cached} cached of {prompt} prompt tokens"))
            }
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(
        "no model is configured: set DEEPSEEK_API_KEY or OPENAI_API_KEY (in Zed, in the `env` of this agent server), or start hotsh with `--model openai:NAME` (with `--base-url` for another provider or a local server) or `--model script:PATH` (see the README), e.g. `--model script:examples/demo/script.json` in a hotsh checkout"
    )]
    NotConfigured,
    /// The provider failed; the message says how, for the user.
    #[error("{0}")]
    Provider(String),
    /// The provider says the request does not fit the model's context window.
    #[error("{0}")]
    ContextTooLong(String),
    /// The provider refused the key (or wants one); the message says which variable.
    #[error("{0}")]
    Auth(String),
    #[error(
        "the model script {path} has no more responses for this session (all {used} were used)"
    )]
    ScriptExhausted { path: PathBuf, used: usize },
}

/// A model adapter.
pub trait Model: Send + Sync + std::fmt::Debug {
    /// Answers one request of `session`, sending events as they arrive. Returns when the
    /// answer is complete.
    fn respond(
        &self,
        session: &str,
        request: &ModelRequest,
        events: mpsc::UnboundedSender<ModelEvent>,
    ) -> BoxFuture<'_, Result<(), ModelError>>;
}

/// The adapter used when no model is configured.
#[derive(Debug)]
pub struct NoModel;

impl Model for NoModel {
    fn respond(
        &self,
        _session: &str,
        _request: &ModelRequest,
        _events: mpsc::UnboundedSender<ModelEvent>,
    ) -> BoxFuture<'_, Result<(), ModelError>> {
        Box::pin(async { Err(ModelError::NotConfigured) })
    }
}
