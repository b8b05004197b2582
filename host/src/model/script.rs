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
//! Every session plays `responses` from its start (a demo works in every thread a user
//! opens). Instead of `responses`, a script may give `sessions`, a list of response lists:
//! the Nth session to ask the model plays the Nth list.
//!
//! A response may also give `usage` (`{prompt_tokens, completion_tokens, total_tokens}`), a
//! `finish_reason`, an `error` (the model fails with that message), or `cancelled: true` (the
//! model streams its chunks, then waits until the turn is cancelled): arcs replay recorded
//! answers this way. `text` (and `reasoning`) is a string, or a list of strings streamed as
//! separate chunks, as a
//! real model streams them. `arguments` is an object, or a string holding the raw JSON text a
//! model produced (which may
//! be malformed on purpose). A tool call may carry an `id`; otherwise one is made up.

use super::{Model, ModelError, ModelEvent, ModelRequest, ModelToolCall};
use crate::sync::lock;
use anyhow::Context as _;
use futures::future::BoxFuture;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tokio::sync::mpsc;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Script {
    #[serde(default)]
    responses: Option<Vec<ScriptedResponse>>,
    #[serde(default)]
    sessions: Option<Vec<Vec<ScriptedResponse>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedResponse {
    #[serde(default)]
    reasoning: Option<Chunks>,
    #[serde(default)]
    text: Option<Chunks>,
    #[serde(default)]
    tool_calls: Vec<ScriptedToolCall>,
    /// Token counts to report (a recorded answer's).
    #[serde(default)]
    usage: Option<super::Usage>,
    #[serde(default)]
    finish_reason: Option<String>,
    /// The model failed with this message (a recorded failure).
    #[serde(default)]
    error: Option<String>,
    /// The turn was cancelled while the model answered: after the chunks, wait to be dropped.
    #[serde(default)]
    cancelled: bool,
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

/// One string, or the chunks a model streamed.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Chunks {
    One(String),
    Many(Vec<String>),
}

impl Chunks {
    fn each(&self) -> &[String] {
        match self {
            Chunks::One(text) => std::slice::from_ref(text),
            Chunks::Many(chunks) => chunks,
        }
    }
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// Which responses sessions play.
#[derive(Debug)]
enum Plays {
    /// Every session the same list, from its start.
    Same(Vec<ScriptedResponse>),
    /// The Nth session to ask the Nth list.
    PerSession(Vec<Vec<ScriptedResponse>>),
}

/// Plays a script, each session from its own start.
#[derive(Debug)]
pub(crate) struct ScriptModel {
    path: PathBuf,
    plays: Plays,
    /// Per session: which list it plays and the next response in it.
    cursors: Mutex<HashMap<String, (usize, usize)>>,
}

/// Whether `response` is one a script can play (an arc's model answers are checked this way).
pub(crate) fn check_response(response: &serde_json::Value) -> Result<(), String> {
    ScriptedResponse::deserialize(response).map(drop).map_err(|e| e.to_string())
}

impl ScriptModel {
    pub(crate) fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read model script {}", path.display()))?;
        let script: Script = serde_json::from_str(&text)
            .with_context(|| format!("model script {} is not valid", path.display()))?;
        let plays = match (script.responses, script.sessions) {
            (Some(responses), None) => Plays::Same(responses),
            (None, Some(sessions)) => Plays::PerSession(sessions),
            _ => anyhow::bail!(
                "model script {} must have exactly one of `responses` and `sessions`",
                path.display()
            ),
        };
        Ok(Self { path: path.to_owned(), plays, cursors: Mutex::default() })
    }

    /// The list `session` plays and the index of its next response, advancing the cursor.
    fn next_for(&self, session: &str) -> (&[ScriptedResponse], usize) {
        let mut cursors = lock(&self.cursors);
        let sessions_seen = cursors.len();
        let (list, next) = cursors.entry(session.to_owned()).or_insert((sessions_seen, 0));
        let index = *next;
        *next += 1;
        let responses: &[ScriptedResponse] = match &self.plays {
            Plays::Same(responses) => responses,
            Plays::PerSession(lists) => lists.get(*list).map_or(&[], Vec::as_slice),
        };
        (responses, index)
    }
}

impl Model for ScriptModel {
    fn respond(
        &self,
        session: &str,
        _request: &ModelRequest,
        events: mpsc::UnboundedSender<ModelEvent>,
    ) -> BoxFuture<'_, Result<(), ModelError>> {
        let (responses, index) = self.next_for(session);
        Box::pin(async move {
            let Some(response) = responses.get(index) else {
                return Err(ModelError::ScriptExhausted {
                    path: self.path.clone(),
                    used: responses.len(),
                });
            };
            for chunk in response.reasoning.iter().flat_map(Chunks::each) {
                let _ = events.send(ModelEvent::Reasoning(chunk.clone()));
            }
            for chunk in response.text.iter().flat_map(Chunks::each) {
                let _ = events.send(ModelEvent::Text(chunk.clone()));
            }
            if let Some(usage) = response.usage {
                let _ = events.send(ModelEvent::Usage(usage));
            }
            if let Some(reason) = &response.finish_reason {
                let _ = events.send(ModelEvent::Finished(reason.clone()));
            }
            if let Some(error) = &response.error {
                return Err(ModelError::Provider(error.clone()));
            }
            if response.cancelled {
                std::future::pending::<()>().await;
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
