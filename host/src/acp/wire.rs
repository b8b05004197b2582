//! The `session/update` lines a replay sends most, written straight from the events.
//!
//! A `session/load` of a long session sends thousands of updates, most of them text chunks
//! and terminal output. Going through the SDK's types, each is built (the id and text moved
//! in, a `_meta` map made), serialised, then dropped: about 7,000 instructions an update,
//! a third of the load. For a client with `_meta` terminals these kinds are serialised
//! here from borrowing mirrors of the SDK's wire form instead, with serde doing the escaping;
//! everything else goes through the SDK as before. The test below holds each kind to what
//! the SDK's own types serialise to, so the two cannot drift apart.

use crate::session::{CallStatus, Card, SessionEvent};
use serde::Serialize;

/// The update of `event` as [`super::to_acp::update_with_terminal`] and the SDK would write
/// it, when `event` is of a kind written here.
pub(super) fn update_of(event: &SessionEvent) -> Option<Update<'_>> {
    Some(match event {
        SessionEvent::AgentText { text } => Update::Chunk {
            session_update: "agent_message_chunk",
            content: Text { kind: "text", text },
        },
        SessionEvent::AgentThought { text } => Update::Chunk {
            session_update: "agent_thought_chunk",
            content: Text { kind: "text", text },
        },
        SessionEvent::ToolOutput { call_id, text } => Update::ToolCallUpdate {
            session_update: "tool_call_update",
            tool_call_id: &call_id.0,
            status: None,
            content: None,
            raw_output: None,
            meta: TerminalMeta::Output { terminal_id: &call_id.0, data: text },
        },
        SessionEvent::ToolCallFinished {
            call_id,
            card: Card::Terminal(terminal),
            status,
            raw_output,
            error,
            ..
        } => {
            let exit = terminal.exit.as_ref();
            Update::ToolCallUpdate {
                session_update: "tool_call_update",
                tool_call_id: &call_id.0,
                status: Some(match status {
                    CallStatus::Completed => "completed",
                    CallStatus::Failed => "failed",
                    CallStatus::Running => "in_progress",
                }),
                content: error.as_deref().map(|text| {
                    [Content { kind: "content", content: Text { kind: "text", text } }]
                }),
                raw_output: Some(raw_output),
                meta: TerminalMeta::Exit {
                    terminal_id: &call_id.0,
                    exit_code: exit.and_then(|exit| exit.exit_code),
                    signal: exit.and_then(|exit| exit.signal.as_deref()),
                },
            }
        }
        _ => return None,
    })
}

/// Appends the `session/update` line (without its newline) of `update` for the session
/// `session_id`.
pub(super) fn write_update(
    out: &mut Vec<u8>,
    session_id: &str,
    update: Update<'_>,
) -> serde_json::Result<()> {
    let line =
        Line { jsonrpc: "2.0", method: "session/update", params: Params { session_id, update } };
    serde_json::to_writer(out, &line)
}

#[derive(Serialize)]
struct Line<'a> {
    jsonrpc: &'static str,
    method: &'static str,
    params: Params<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Params<'a> {
    session_id: &'a str,
    update: Update<'a>,
}

/// An update written here.
#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum Update<'a> {
    #[serde(rename_all = "camelCase")]
    Chunk { session_update: &'static str, content: Text<'a> },
    #[serde(rename_all = "camelCase")]
    ToolCallUpdate {
        session_update: &'static str,
        tool_call_id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<[Content<'a>; 1]>,
        #[serde(skip_serializing_if = "Option::is_none")]
        raw_output: Option<&'a serde_json::Value>,
        #[serde(rename = "_meta")]
        meta: TerminalMeta<'a>,
    },
}

#[derive(Serialize)]
pub(super) struct Text<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

#[derive(Serialize)]
pub(super) struct Content<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    content: Text<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum TerminalMeta<'a> {
    #[serde(rename = "terminal_output")]
    Output { terminal_id: &'a str, data: &'a str },
    #[serde(rename = "terminal_exit")]
    Exit { terminal_id: &'a str, exit_code: Option<i32>, signal: Option<&'a str> },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{TerminalCard, TerminalExit, ToolCallId};
    use agent_client_protocol::v1::schema::{SessionId, SessionNotification};

    /// What the SDK's types make of `event` (the path every other update takes).
    fn through_the_sdk(event: &SessionEvent) -> serde_json::Value {
        let update = super::super::to_acp::update_with_terminal(event.clone()).expect("an update");
        let mut line = Vec::new();
        let notification = SessionNotification::new(SessionId::new("s-1"), update);
        super::super::transport::write_update_line(&mut line, &notification).expect("written");
        serde_json::from_slice(&line).expect("JSON")
    }

    fn written_here(event: &SessionEvent) -> serde_json::Value {
        let mut line = Vec::new();
        let update = update_of(event).expect("written here");
        write_update(&mut line, "s-1", update).expect("serialised");
        serde_json::from_slice(&line).expect("JSON")
    }

    #[test]
    fn each_kind_written_here_is_what_the_sdk_writes() {
        let id = || ToolCallId("call-7".into());
        let terminal = |exit| {
            Card::terminal(TerminalCard {
                command: "make".into(),
                description: None,
                cwd: "/w".into(),
                exit,
            })
        };
        let finished =
            |status, exit, error: Option<&str>, raw_output| SessionEvent::ToolCallFinished {
                call_id: id(),
                card: terminal(exit),
                status,
                raw_output,
                error: error.map(str::to_owned),
                output_text: Some("out".into()),
                output_in_result: false,
            };
        let events = [
            SessionEvent::AgentText { text: "He said \"hi\"\n\t\u{1b}[0m é 💡".into() },
            SessionEvent::AgentText { text: String::new() },
            SessionEvent::AgentThought { text: "thinking…".into() },
            SessionEvent::ToolOutput { call_id: id(), text: "1\n2\r\n\u{7}".into() },
            finished(
                CallStatus::Completed,
                Some(TerminalExit { exit_code: Some(0), signal: None, reason: None }),
                None,
                serde_json::json!({"exit_code": 0, "output": ["a", {"b": null}]}),
            ),
            finished(
                CallStatus::Failed,
                Some(TerminalExit {
                    exit_code: None,
                    signal: Some("SIGKILL".into()),
                    reason: Some("Stopped: timed out after 300 ms.".into()),
                }),
                Some("The command did not run: \"make\" was refused."),
                serde_json::Value::Null,
            ),
            finished(CallStatus::Running, None, None, serde_json::json!("bash-1")),
        ];
        for event in &events {
            assert_eq!(written_here(event), through_the_sdk(event), "{event:?}");
        }
    }

    #[test]
    fn other_kinds_are_left_to_the_sdk() {
        let generic = SessionEvent::ToolCallFinished {
            call_id: ToolCallId("call-1".into()),
            card: Card::generic(crate::session::GenericCard::new(
                "Edit a.rs",
                crate::session::ToolKind::Edit,
                None,
            )),
            status: CallStatus::Completed,
            raw_output: serde_json::Value::Null,
            error: None,
            output_text: None,
            output_in_result: false,
        };
        let plan = SessionEvent::Plan { entries: Vec::new() };
        for event in [generic, plan] {
            assert!(update_of(&event).is_none(), "{event:?}");
        }
    }
}
