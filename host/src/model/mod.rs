//! The model seam: an adapter streams text, reasoning and tool calls for one request.
//!
//! A request carries everything the model sees: the system prompt (plugin sections sorted by
//! order), the conversation so far, and the tools. Adapters: `openai` (OpenAI-compatible chat
//! completions, streaming: DeepSeek, OpenAI, local servers), `script` (a recorded list of
//! responses, for CI and the offline demo) and `none` (no model configured; every request
//! fails with a message saying how to configure one). `setup.rs` decides which model a flag,
//! the environment and the configuration file name.

mod openai;
pub(crate) mod script;
pub(crate) mod setup;

pub(crate) use openai::{ApiKey, OpenAiModel, OpenAiSpec};
pub(crate) use script::ScriptModel;

use futures::future::BoxFuture;
use serde::Serialize;
use std::path::{Path, PathBuf};
use tokio::sync::mpsc;

/// One message of the conversation, in the order the model saw or said it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub(crate) enum Message {
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
pub(crate) struct PromptImage {
    pub(crate) mime_type: String,
    pub(crate) data: String,
}

/// A tool call as the model made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub(crate) struct ModelToolCall {
    /// The model's id for the call, echoed back with its result.
    pub(crate) id: String,
    pub(crate) name: String,
    /// The arguments exactly as the model produced them (JSON text, possibly malformed).
    pub(crate) arguments: String,
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ToolDefinition {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) input_schema: serde_json::Value,
    /// What its calls may do, as its provider declares it (the host's business, not the
    /// model's: never sent).
    #[serde(skip)]
    pub(crate) effects: ToolEffects,
}

/// What a tool's calls may do, as its provider declares it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ToolEffects {
    pub(crate) runs_commands: bool,
    pub(crate) writes_files: bool,
}

/// Everything one model request carries.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ModelRequest {
    pub(crate) system: String,
    pub(crate) messages: Vec<Message>,
    pub(crate) tools: Vec<ToolDefinition>,
}

/// What an adapter streams while it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ModelEvent {
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
pub(crate) struct Usage {
    pub(crate) prompt_tokens: Option<u64>,
    pub(crate) completion_tokens: Option<u64>,
    pub(crate) total_tokens: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ModelError {
    #[error(
        "no model is configured: set DEEPSEEK_API_KEY or OPENAI_API_KEY (in Zed, in the `env` of this agent server), or start hotsh with `--model openai:NAME` (with `--base-url` for another provider or a local server) or `--model script:PATH` (see the README), e.g. `--model script:examples/demo/script.json` in a hotsh checkout"
    )]
    NotConfigured,
    /// The provider failed; the message says how, for the user.
    #[error("{0}")]
    Provider(String),
    /// The provider refused the key (or wants one); the message says which variable.
    #[error("{0}")]
    Auth(String),
    #[error(
        "the model script {path} has no more responses for this session (all {used} were used)"
    )]
    ScriptExhausted { path: PathBuf, used: usize },
}

/// A model adapter.
pub(crate) trait Model: Send + Sync + std::fmt::Debug {
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
pub(crate) struct NoModel;

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

/// A model hotsh can use.
#[derive(Debug, Clone)]
pub(crate) enum ModelSpec {
    None,
    Script(PathBuf),
    OpenAi(OpenAiSpec),
}

/// Builds the adapter a spec names.
pub(crate) fn open(spec: &ModelSpec) -> anyhow::Result<std::sync::Arc<dyn Model>> {
    Ok(match spec {
        ModelSpec::None => std::sync::Arc::new(NoModel),
        ModelSpec::Script(path) => std::sync::Arc::new(ScriptModel::load(path)?),
        ModelSpec::OpenAi(spec) => std::sync::Arc::new(OpenAiModel::new(spec.clone())?),
    })
}

/// Appends every model request, as one JSON line, to a file: what the model was shown, for
/// debugging prompts and for tests that check what the model received. Written through
/// `tokio::fs` (the blocking pool), never on a runtime worker.
#[derive(Debug)]
pub(crate) struct Transcript {
    path: PathBuf,
    file: tokio::sync::Mutex<tokio::fs::File>,
}

impl Transcript {
    pub(crate) fn create(path: &Path) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open model transcript {}", path.display()))?;
        Ok(Self {
            path: path.to_owned(),
            file: tokio::sync::Mutex::new(tokio::fs::File::from_std(file)),
        })
    }

    pub(crate) async fn record(&self, request: &ModelRequest) {
        use tokio::io::AsyncWriteExt as _;
        let Ok(mut line) = serde_json::to_vec(request) else {
            return;
        };
        line.push(b'\n');
        let mut file = self.file.lock().await;
        let written = match file.write_all(&line).await {
            Ok(()) => file.flush().await,
            Err(error) => Err(error),
        };
        if let Err(error) = written {
            tracing::warn!(path = %self.path.display(), %error, "cannot write model transcript");
        }
    }
}
