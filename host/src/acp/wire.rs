//! The `session/update` lines a replay sends most, written straight from the events.
//!
//! A `session/load` of a long session sends thousands of updates, most of them text chunks
//! (the prompts' plain text blocks among them) and command cards (their opening, output and
//! exit). Going through the SDK's types, each is built (the ids and texts moved in, `_meta`
//! maps made), serialised, then dropped: about 7,000 instructions an update, a third of a
//! load. For a client with `_meta` terminals these kinds are serialised here from borrowing
//! mirrors of the SDK's wire form instead, serde doing the escaping; everything else goes
//! through the SDK as before. The test below holds each kind, byte for byte, to what the
//! SDK's own types write (so a recorded arc replays unchanged), and to what the SDK's update
//! does to the client's open cards, so the two paths cannot drift apart.

use super::to_acp::CardDrawn;
use crate::session::{CallStatus, Card, RawJson, SessionEvent};
use agent_client_protocol::v1::schema::{ToolCallStatus, ToolKind};
use serde::Serialize;

/// The update of `event` as [`super::to_acp::update_with_terminal`] and the SDK would write
/// it, when `event` is of a kind written here.
pub(super) fn update_of(event: &SessionEvent) -> Option<Update<'_>> {
    Some(match event {
        SessionEvent::AgentText { text } => {
            Update::AgentMessageChunk { content: Text { kind: "text", text } }
        }
        // A prompt's block of plain text (anything more goes through the SDK's parse of it).
        SessionEvent::UserMessage { block } => {
            Update::UserMessageChunk { content: Text { kind: "text", text: plain_text(block)? } }
        }
        SessionEvent::AgentThought { text } => {
            Update::AgentThoughtChunk { content: Text { kind: "text", text } }
        }
        SessionEvent::ToolCallStarted {
            call_id,
            card: Card::Terminal(terminal),
            raw_input,
            ..
        } => Update::CallOpened {
            tool_call_id: &call_id.0,
            title: &terminal.command,
            kind: ToolKind::Execute,
            status: ToolCallStatus::InProgress,
            content: [TerminalContent { kind: "terminal", terminal_id: &call_id.0 }],
            raw_input,
            meta: TerminalMeta::Info { terminal_id: &call_id.0, cwd: &terminal.cwd },
        },
        SessionEvent::ToolOutput { call_id, text } => Update::CallChanged {
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
            Update::CallChanged {
                tool_call_id: &call_id.0,
                status: Some(super::to_acp::status(*status)),
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

/// The text of a content block that is `{"type": "text", "text": …}` and nothing more.
fn plain_text(block: &serde_json::Value) -> Option<&str> {
    let block = block.as_object().filter(|block| block.len() == 2)?;
    block.get("type").filter(|kind| *kind == "text")?;
    block.get("text")?.as_str()
}

/// What the update of `event` (one [`update_of`] writes) does to the client's open cards,
/// as [`super::to_acp::card_drawn`] says of the SDK's update.
pub(super) fn card_drawn(event: &SessionEvent) -> CardDrawn {
    match event {
        SessionEvent::ToolCallStarted { call_id, card: Card::Terminal(terminal), .. } => {
            CardDrawn::Opened(
                call_id.0.clone(),
                Box::new(super::to_acp::terminal_drawn(&call_id.0, &terminal.command)),
            )
        }
        SessionEvent::ToolCallFinished {
            call_id,
            status: CallStatus::Completed | CallStatus::Failed,
            ..
        } => CardDrawn::Closed(call_id.0.clone()),
        _ => CardDrawn::Neither,
    }
}

/// The start every `session/update` line of a session shares, up to its update:
/// `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":…,"update":`. Written
/// once per replay port rather than once per update: serialising the envelope's five keys and
/// four values was a quarter of the strings a replay escapes.
#[derive(Debug)]
pub(super) struct LineHead(Box<[u8]>);

impl LineHead {
    pub(super) fn of(session_id: &str) -> LineHead {
        let mut head = Vec::new();
        let line = Line { jsonrpc: "2.0", method: "session/update", params: Params { session_id } };
        serde_json::to_writer(&mut head, &line).expect("strings serialise");
        // Where serde closed `params` and the line, `update` goes on.
        head.truncate(head.len() - CLOSE.len());
        head.extend_from_slice(br#","update":"#);
        LineHead(head.into_boxed_slice())
    }
}

/// How a [`Line`] ends: `params` and the line closed.
const CLOSE: &[u8] = b"}}";

/// Appends the `session/update` line (without its newline) of `update` to `out`, after the
/// session's `head`.
pub(super) fn write_update(
    out: &mut Vec<u8>,
    head: &LineHead,
    update: Update<'_>,
) -> serde_json::Result<()> {
    out.extend_from_slice(&head.0);
    serde_json::to_writer(&mut *out, &update)?;
    out.extend_from_slice(CLOSE);
    Ok(())
}

#[derive(Serialize)]
struct Line<'a> {
    jsonrpc: &'static str,
    method: &'static str,
    params: Params<'a>,
}

/// The envelope: `params` holds the session's id and, after it, the update.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Params<'a> {
    session_id: &'a str,
}

/// An update written here, tagged with its `sessionUpdate` as the SDK's is.
#[derive(Serialize)]
#[serde(tag = "sessionUpdate", rename_all = "snake_case")]
pub(super) enum Update<'a> {
    AgentMessageChunk {
        content: Text<'a>,
    },
    UserMessageChunk {
        content: Text<'a>,
    },
    AgentThoughtChunk {
        content: Text<'a>,
    },
    #[serde(rename = "tool_call", rename_all = "camelCase")]
    CallOpened {
        tool_call_id: &'a str,
        title: &'a str,
        kind: ToolKind,
        status: ToolCallStatus,
        content: [TerminalContent<'a>; 1],
        raw_input: &'a RawJson,
        #[serde(rename = "_meta")]
        meta: TerminalMeta<'a>,
    },
    #[serde(rename = "tool_call_update", rename_all = "camelCase")]
    CallChanged {
        tool_call_id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<ToolCallStatus>,
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<[Content<'a>; 1]>,
        #[serde(skip_serializing_if = "Option::is_none")]
        raw_output: Option<&'a RawJson>,
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
#[serde(rename_all = "camelCase")]
pub(super) struct TerminalContent<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    terminal_id: &'a str,
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
    #[serde(rename = "terminal_info")]
    Info { terminal_id: &'a str, cwd: &'a str },
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

    /// The line the SDK's types make of `event` (the path every other update takes).
    fn through_the_sdk(event: &SessionEvent) -> String {
        let update = super::super::to_acp::update_with_terminal(event.clone()).expect("an update");
        let mut line = Vec::new();
        let notification = SessionNotification::new(SessionId::new("s-1"), update);
        super::super::transport::write_update_line(&mut line, &notification).expect("written");
        String::from_utf8(line).expect("UTF-8")
    }

    fn written_here(event: &SessionEvent) -> String {
        let mut line = Vec::new();
        let update = update_of(event).expect("written here");
        write_update(&mut line, &LineHead::of("s-1"), update).expect("serialised");
        String::from_utf8(line).expect("UTF-8")
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
        let finished = |status, exit, error: Option<&str>, raw_output: serde_json::Value| {
            SessionEvent::ToolCallFinished {
                call_id: id(),
                card: terminal(exit),
                status,
                raw_output: raw_output.into(),
                error: error.map(str::to_owned),
                output_text: Some("out".into()),
                output_in_result: false,
            }
        };
        let started = |raw_input: serde_json::Value| SessionEvent::ToolCallStarted {
            call_id: id(),
            tool: "bash".into(),
            card: Card::terminal(TerminalCard {
                command: "cargo test -- \"a b\"".into(),
                description: Some("Run the tests".into()),
                cwd: "/home/ü/w".into(),
                exit: None,
            }),
            raw_input: raw_input.into(),
            arguments: r#"{"command":"cargo test"}"#.into(),
        };
        let events = [
            started(serde_json::json!({"command": "cargo test -- \"a b\"", "timeout": 30})),
            started(serde_json::Value::Null),
            SessionEvent::AgentText { text: "He said \"hi\"\n\t\u{1b}[0m é 💡".into() },
            SessionEvent::AgentText { text: String::new() },
            SessionEvent::UserMessage {
                block: serde_json::json!({"type": "text", "text": "Fix \"it\"\n\u{7f} ü"}),
            },
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
            let update = super::super::to_acp::update_with_terminal(event.clone());
            let drawn = super::super::to_acp::card_drawn(&update.expect("an update"));
            assert_eq!(card_drawn(event), drawn, "{event:?}");
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
            raw_output: RawJson::null(),
            error: None,
            output_text: None,
            output_in_result: false,
        };
        let plan = SessionEvent::Plan { entries: Vec::new() };
        let block = |block| SessionEvent::UserMessage { block };
        let annotated = block(serde_json::json!({
            "type": "text", "text": "Fix it", "annotations": {"priority": 1.0}
        }));
        let image =
            block(serde_json::json!({"type": "image", "data": "iVBO", "mimeType": "image/png"}));
        let not_text = block(serde_json::json!({"type": "text", "text": 7}));
        for event in [generic, plan, annotated, image, not_text] {
            assert!(update_of(&event).is_none(), "{event:?}");
        }
    }
}
