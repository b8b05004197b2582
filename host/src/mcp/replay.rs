//! MCP answers recorded in an arc, served again without the servers (`hotsh replay`): each
//! server's tool list as it connected, and its calls' outcomes in order. A tool list that
//! changed during the recording, and failures of the server itself, are not replayed.

use super::{CallOutcome, Tool};
use crate::model::ToolDefinition;
use crate::sync::lock;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Mutex;

/// The recorded answers, by server name.
#[derive(Debug, Default)]
pub(crate) struct Recording {
    servers: Mutex<HashMap<String, Recorded>>,
}

#[derive(Debug, Default)]
struct Recorded {
    tools: Option<Vec<Value>>,
    calls: VecDeque<(String, CallOutcome)>,
}

impl Recording {
    /// Reads the entries `hotsh replay` gathered from an arc (a JSON array).
    pub(crate) fn load(path: &Path) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the MCP answers {}", path.display()))?;
        let entries: Vec<Value> = serde_json::from_str(&text)
            .with_context(|| format!("the MCP answers {} are not valid", path.display()))?;
        let recording = Self::default();
        let mut servers = lock(&recording.servers);
        for entry in entries {
            let name = entry["server"].as_str().unwrap_or_default().to_owned();
            let recorded = servers.entry(name).or_default();
            if let Some(tools) = entry["tools"].as_array() {
                recorded.tools.get_or_insert_with(|| tools.clone());
            }
            if let Some(tool) = entry["call"].as_str() {
                let outcome = &entry["outcome"];
                recorded.calls.push_back((
                    tool.to_owned(),
                    CallOutcome {
                        text: outcome["text"].as_str().unwrap_or_default().to_owned(),
                        is_error: outcome["is_error"].as_bool().unwrap_or(false),
                        raw: outcome["raw"].clone(),
                    },
                ));
            }
        }
        drop(servers);
        Ok(recording)
    }

    /// The tools `server` had when it connected, named under `prefix`.
    pub(super) fn tools(&self, server: &str, prefix: &str) -> Result<Vec<Tool>, String> {
        let servers = lock(&self.servers);
        let tools = servers
            .get(server)
            .and_then(|r| r.tools.as_ref())
            .ok_or_else(|| "the arc has no tool list recorded for this server".to_owned())?;
        Ok(super::unique_names(tools.iter().map(|tool| from_json(prefix, tool)).collect()))
    }

    /// The next recorded outcome of a call of `tool` on `server`.
    pub(super) fn next_call(&self, server: &str, tool: &str) -> CallOutcome {
        let mut servers = lock(&self.servers);
        let calls = servers.get_mut(server).map(|r| &mut r.calls);
        match calls.and_then(|calls| calls.pop_front()) {
            Some((recorded, outcome)) if recorded == tool => outcome,
            Some((recorded, _)) => CallOutcome::failure(format!(
                "the arc's next call of MCP server `{server}` is of `{recorded}`, not `{tool}`"
            )),
            None => {
                CallOutcome::failure(format!("the arc has no more calls of MCP server `{server}`"))
            }
        }
    }
}

/// A tool as an arc keeps it.
pub(super) fn to_json(tool: &Tool) -> Value {
    json!({
        "name": tool.remote,
        "title": tool.title,
        "description": tool.definition.description,
        "input_schema": tool.definition.input_schema,
        "read_only": tool.read_only,
    })
}

fn from_json(prefix: &str, tool: &Value) -> Tool {
    let remote = tool["name"].as_str().unwrap_or_default().to_owned();
    let read_only = tool["read_only"].as_bool().unwrap_or(false);
    Tool {
        definition: ToolDefinition {
            name: super::tool_name(prefix, &remote),
            description: tool["description"].as_str().unwrap_or_default().to_owned(),
            input_schema: tool["input_schema"].clone().into(),
            effects: super::server_tool_effects(read_only),
        },
        title: tool["title"].as_str().map_or_else(|| remote.clone(), str::to_owned),
        read_only,
        remote,
    }
}
