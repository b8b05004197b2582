//! Recording an arc while the agent runs (`hotsh acp --record FILE`).
//!
//! The transport hands the recorder every line the client sent and every line the agent
//! sent; the turn hands it every model exchange. Each is written as one line at once (a
//! killed agent leaves a complete arc up to its last message). Keys never appear: the client
//! and the model see none.

use crate::model::{ModelEvent, ModelRequest};
use crate::sync::lock;
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;

/// How a model exchange ended.
#[derive(Debug)]
pub(crate) enum Ending {
    Complete,
    /// The model failed with this message.
    Failed(String),
    /// The user cancelled the turn while the model was answering.
    Cancelled,
}

#[derive(Debug)]
pub(crate) struct Recorder {
    file: Mutex<std::fs::File>,
    path: std::path::PathBuf,
}

impl Recorder {
    /// Creates (or replaces) the arc at `path` and writes its header.
    pub(crate) fn create(path: &Path, plugin_dirs: &[std::path::PathBuf]) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create the arc {}", path.display()))?;
        let recorder = Self { file: Mutex::new(file), path: path.to_owned() };
        let plugin_dirs: Vec<String> =
            plugin_dirs.iter().map(|d| d.to_string_lossy().into_owned()).collect();
        recorder.write(&json!({"arc": super::FORMAT, "plugin_dirs": plugin_dirs}));
        Ok(recorder)
    }

    /// A line the client sent.
    pub(crate) fn client(&self, line: &str) {
        if let Ok(message) = serde_json::from_str::<Value>(line) {
            self.write(&json!({ "client": message }));
        }
    }

    /// A line the agent sent the client.
    pub(crate) fn agent(&self, line: &str) {
        if let Ok(message) = serde_json::from_str::<Value>(line) {
            self.write(&json!({ "agent": message }));
        }
    }

    /// One model exchange: the request, and what the model streamed (or why it failed).
    pub(crate) fn model(
        &self,
        session: &str,
        request: &ModelRequest,
        answer: &[ModelEvent],
        ending: Ending,
    ) {
        let mut response = serde_json::Map::new();
        let mut reasoning = Vec::new();
        let mut text = Vec::new();
        let mut calls = Vec::new();
        for event in answer {
            match event {
                ModelEvent::Reasoning(chunk) => reasoning.push(json!(chunk)),
                ModelEvent::Text(chunk) => text.push(json!(chunk)),
                ModelEvent::ToolCall(call) => calls
                    .push(json!({"id": call.id, "name": call.name, "arguments": call.arguments})),
                ModelEvent::Usage(usage) => {
                    response.insert("usage".into(), json!(usage));
                }
                ModelEvent::Finished(reason) => {
                    response.insert("finish_reason".into(), json!(reason));
                }
            }
        }
        if !reasoning.is_empty() {
            response.insert("reasoning".into(), Value::Array(reasoning));
        }
        if !text.is_empty() {
            response.insert("text".into(), Value::Array(text));
        }
        if !calls.is_empty() {
            response.insert("tool_calls".into(), Value::Array(calls));
        }
        match ending {
            Ending::Complete => {}
            Ending::Failed(failure) => {
                response.insert("error".into(), json!(failure));
            }
            Ending::Cancelled => {
                response.insert("cancelled".into(), json!(true));
            }
        }
        self.write(
            &json!({"model": {"session": session, "request": request, "response": response}}),
        );
    }

    /// An action of the replay itself (a plugin reload), before what it makes the agent send.
    pub(crate) fn step(&self, step: &Value) {
        self.write(&json!({ "step": step }));
    }

    fn write(&self, line: &Value) {
        let Ok(mut bytes) = serde_json::to_vec(&super::normalize::sorted(line)) else { return };
        bytes.push(b'\n');
        let mut file = lock(&self.file);
        if let Err(error) = file.write_all(&bytes) {
            tracing::warn!(path = %self.path.display(), %error, "cannot write the arc");
        }
    }
}
