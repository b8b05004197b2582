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

pub(crate) use hotsh_core::model::{
    Message, Model, ModelError, ModelEvent, ModelRequest, ModelToolCall, NoModel, PromptImage,
    ToolDefinition, ToolEffects, Usage,
};
use std::path::{Path, PathBuf};

/// A model hotsh can use.
#[derive(Debug, Clone)]
pub(crate) enum ModelSpec {
    None,
    Script(PathBuf),
    OpenAi(Box<OpenAiSpec>),
}

impl ModelSpec {
    /// The variable its key came from (the key itself is never shown).
    pub(crate) fn key_source(&self) -> Option<String> {
        match self {
            ModelSpec::OpenAi(spec) => spec.key.as_ref().map(|key| key.from.clone()),
            ModelSpec::None | ModelSpec::Script(_) => None,
        }
    }

    /// Whether it cannot answer until the user gives a key: no model at all, or a known
    /// provider's without its key (a local server needs none).
    pub(crate) fn needs_key(&self) -> bool {
        match self {
            ModelSpec::None => true,
            ModelSpec::Script(_) => false,
            ModelSpec::OpenAi(spec) => {
                let host = spec.base_url.split("://").nth(1).unwrap_or(&spec.base_url);
                let host = host.split(['/', ':']).next().unwrap_or_default();
                spec.key.is_none() && matches!(host, "api.deepseek.com" | "api.openai.com")
            }
        }
    }
}

/// Builds the adapter a spec names.
pub(crate) fn open(spec: &ModelSpec) -> anyhow::Result<std::sync::Arc<dyn Model>> {
    Ok(match spec {
        ModelSpec::None => std::sync::Arc::new(NoModel),
        ModelSpec::Script(path) => std::sync::Arc::new(ScriptModel::load(path)?),
        ModelSpec::OpenAi(spec) => std::sync::Arc::new(OpenAiModel::new((**spec).clone())?),
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
