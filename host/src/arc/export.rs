//! `hotsh sessions export ID --arc FILE`: an arc made from a session's log, for a session
//! nobody thought of recording.
//!
//! The log has what the user sent (prompts) and what the model answered (complete answers and
//! failures), which is what a replay plays. It does not keep the protocol messages as sent, so
//! the expectation (what the agent sends the client and the model) is taken from a replay of
//! the exported arc by this hotsh, as `--bless` would: review it before checking it in.
//! Commands run again in an empty working directory unless the arc is given a fixture.

use super::file::ArcFile;
use crate::session::log::{Fact, Record, TurnOutcome};
use anyhow::Context as _;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Writes the arc of session `id` to `out` and fills in its expectation with a replay.
pub(crate) fn export(
    store: &crate::session::store::SessionStore,
    id: &str,
    out: &Path,
    plugin_dirs: &[PathBuf],
) -> anyhow::Result<std::process::ExitCode> {
    let path = store.path_of(id)?;
    anyhow::ensure!(path.exists(), "no session {id} in {}", store.dir()?.display());
    let records = crate::session::log::read(&path)?;
    let (lines, notes) = arc_lines(&records)?;
    let mut text = String::new();
    for line in &lines {
        text.push_str(&line.to_string());
        text.push('\n');
    }
    std::fs::write(out, text).with_context(|| format!("cannot write {}", out.display()))?;
    // Checked as any arc is, before the replay fills it in.
    ArcFile::read(out)?;
    super::replay::fill(out, plugin_dirs)?;
    for note in notes {
        crate::term::warning(&note);
    }
    eprintln!(
        "wrote {}: the prompts and model answers of session {id}, with what this hotsh sends \
         for them (review it; replay with `hotsh replay {}`)",
        out.display(),
        out.display()
    );
    Ok(std::process::ExitCode::SUCCESS)
}

/// The arc's lines for a log's records (header first), and notes on what was left out.
fn arc_lines(records: &[Record]) -> anyhow::Result<(Vec<Value>, Vec<String>)> {
    let Some(Record::Fact(Fact::Session(meta))) = records.first() else {
        anyhow::bail!("the session log does not start with its session record");
    };
    let session = meta.session_id.as_str();
    let mut lines = vec![
        json!({"arc": super::FORMAT}),
        json!({"client": {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": 1,
            "clientCapabilities": {"terminal": true, "_meta": {"terminal_output": true}}}}}),
        json!({"client": {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {
            "cwd": meta.cwd, "mcpServers": []}}}),
    ];
    let mut notes = Vec::new();
    let mut next_id = 2;
    // Where the current turn's lines start (a cancelled turn is left out whole).
    let mut turn_start = lines.len();
    let mut answered = false;
    for record in records {
        let Record::Fact(fact) = record else { continue };
        match fact {
            Fact::Prompt(prompt) => {
                turn_start = lines.len();
                answered = false;
                lines.push(json!({"client": {"jsonrpc": "2.0", "id": next_id,
                    "method": "session/prompt",
                    "params": {"sessionId": session, "prompt": prompt.blocks}}}));
                next_id += 1;
            }
            Fact::AssistantMessage { text, reasoning, tool_calls, usage, finish_reason } => {
                answered = true;
                let mut response = serde_json::Map::new();
                if let Some(reasoning) = reasoning.as_deref().filter(|r| !r.is_empty()) {
                    response.insert("reasoning".into(), json!([reasoning]));
                }
                if !text.is_empty() {
                    response.insert("text".into(), json!([text]));
                }
                if !tool_calls.is_empty() {
                    let calls: Vec<Value> = tool_calls
                        .iter()
                        .map(|c| json!({"id": c.id, "name": c.name, "arguments": c.arguments}))
                        .collect();
                    response.insert("tool_calls".into(), Value::Array(calls));
                }
                if let Some(usage) = usage {
                    response.insert("usage".into(), json!(usage));
                }
                if let Some(reason) = finish_reason {
                    response.insert("finish_reason".into(), json!(reason));
                }
                lines.push(json!({"model": {"session": session, "response": response}}));
            }
            Fact::TurnEnded { outcome: TurnOutcome::Failed, message } => {
                // The model failed (the usual reason a turn fails): the replay's fails alike.
                let message = message.clone().unwrap_or_else(|| "the turn failed".into());
                lines.push(json!({"model": {"session": session, "response": {"error": message}}}));
            }
            Fact::TurnEnded { outcome: TurnOutcome::Cancelled, .. } => {
                lines.truncate(turn_start);
                notes.push(format!(
                    "the turn of prompt {} was cancelled; the arc ends before it (where the \
                     cancel came is not in the log{})",
                    next_id - 2,
                    if answered { "" } else { ", nor a model answer" }
                ));
                break;
            }
            _ => {}
        }
    }
    Ok((lines, notes))
}
