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
    /// Creates the arc at `path` and writes its header. An existing file is never replaced
    /// (it may be the recording of an earlier run): the arc then goes to `NAME-2.arc`,
    /// `NAME-3.arc`, … beside it, the first that does not exist.
    pub(crate) fn create(
        path: &Path,
        plugin_dirs: &[std::path::PathBuf],
        model: &crate::model::setup::ModelFacts,
    ) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let mut chosen = path.to_owned();
        let mut number = 1;
        let file = loop {
            match std::fs::OpenOptions::new().write(true).create_new(true).open(&chosen) {
                Ok(file) => break file,
                Err(error)
                    if error.kind() == std::io::ErrorKind::AlreadyExists && number < 10_000 =>
                {
                    number += 1;
                    chosen = numbered(path, number);
                }
                Err(error) => {
                    return Err(error)
                        .with_context(|| format!("cannot create the arc {}", chosen.display()));
                }
            }
        };
        if chosen != path {
            tracing::warn!(
                exists = %path.display(),
                arc = %chosen.display(),
                "the arc file exists already; recording to a new file beside it"
            );
        } else {
            tracing::info!(arc = %chosen.display(), "recording an arc");
        }
        let recorder = Self { file: Mutex::new(file), path: chosen };
        let plugin_dirs: Vec<String> =
            plugin_dirs.iter().map(|d| d.to_string_lossy().into_owned()).collect();
        recorder.write(
            &json!({"arc": super::FORMAT, "plugin_dirs": plugin_dirs, "recorded_model": model}),
        );
        Ok(recorder)
    }

    /// A line the client sent.
    pub(crate) fn client(&self, line: &str) {
        if let Ok(message) = serde_json::from_str::<Value>(line) {
            self.write(&json!({ "client": message }));
        }
    }

    /// What an MCP server answered (see `mcp::Servers`), for a replay without the server.
    pub(crate) fn mcp(&self, entry: &Value) {
        self.write(&json!({ "mcp": entry }));
    }

    /// The hooks in force at a turn (see `hooks::HookHost`), for a replay with the same ones.
    pub(crate) fn hooks(&self, entry: &Value) {
        self.write(&json!({ "hooks": entry }));
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

/// `dir/NAME-N.EXT` for `dir/NAME.EXT`.
fn numbered(path: &Path, number: u32) -> std::path::PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name = match path.extension() {
        Some(extension) => format!("{stem}-{number}.{}", extension.to_string_lossy()),
        None => format!("{stem}-{number}"),
    };
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_existing_arc_is_kept_and_the_next_gets_a_number() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("greet.arc");
        std::fs::write(&path, "earlier recording\n").expect("write");
        let facts = crate::model::setup::ModelFacts {
            name: "m".into(),
            window: 1024,
            images: false,
            offered: Vec::new(),
        };
        let second = Recorder::create(&path, &[], &facts).expect("a recorder");
        let third = Recorder::create(&path, &[], &facts).expect("a recorder");
        assert_eq!(second.path, dir.path().join("greet-2.arc"));
        assert_eq!(third.path, dir.path().join("greet-3.arc"));
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "earlier recording\n");
        let header = std::fs::read_to_string(&second.path).expect("read");
        assert_eq!(
            header,
            "{\"arc\":1,\"plugin_dirs\":[],\"recorded_model\":{\"images\":false,\"name\":\"m\",\"window\":1024}}\n"
        );
    }
}
