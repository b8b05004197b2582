//! The scripted adapter: plays recorded responses, one per model request, in order.
//!
//! The script is a JSON file:
//!
//! ```json
//! {"responses": [
//!   {"reasoning": "optional", "text": "optional",
//!    "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}
//! ]}
//! ```
//!
//! `arguments` is an object, or a string holding the raw JSON text a model produced (which may
//! be malformed on purpose). A tool call may carry an `id`; otherwise one is made up.

use super::{Model, ModelError, ModelEvent, ModelRequest, ModelToolCall};
use anyhow::Context as _;
use futures::future::BoxFuture;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::mpsc;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Script {
    responses: Vec<ScriptedResponse>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedResponse {
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ScriptedToolCall>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedToolCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default = "empty_object")]
    arguments: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// Plays a script; shared by every session of the agent process.
#[derive(Debug)]
pub(crate) struct ScriptModel {
    path: PathBuf,
    responses: Vec<ScriptedResponse>,
    next: AtomicUsize,
}

impl ScriptModel {
    pub(crate) fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read model script {}", path.display()))?;
        let script: Script = serde_json::from_str(&text)
            .with_context(|| format!("model script {} is not valid", path.display()))?;
        Ok(Self { path: path.to_owned(), responses: script.responses, next: AtomicUsize::new(0) })
    }
}

impl Model for ScriptModel {
    fn respond(
        &self,
        _request: &ModelRequest,
        events: mpsc::UnboundedSender<ModelEvent>,
    ) -> BoxFuture<'_, Result<(), ModelError>> {
        let index = self.next.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let Some(response) = self.responses.get(index) else {
                return Err(ModelError::ScriptExhausted {
                    path: self.path.clone(),
                    used: self.responses.len(),
                });
            };
            if let Some(reasoning) = &response.reasoning {
                let _ = events.send(ModelEvent::Reasoning(reasoning.clone()));
            }
            if let Some(text) = &response.text {
                let _ = events.send(ModelEvent::Text(text.clone()));
            }
            for (position, call) in response.tool_calls.iter().enumerate() {
                let arguments = match &call.arguments {
                    serde_json::Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                };
                let id = call.id.clone().unwrap_or_else(|| format!("script-{index}-{position}"));
                let _ = events.send(ModelEvent::ToolCall(ModelToolCall {
                    id,
                    name: call.name.clone(),
                    arguments,
                }));
            }
            Ok(())
        })
    }
}
