//! Host → ACP conversions: session events become `session/update` payloads.
//!
//! Two renderings of a command's card. With Zed's `_meta.terminal_output`, the card is a live
//! terminal whose id is the tool call id: `terminal_info` on the `tool_call`, each output chunk
//! as `terminal_output`, and `terminal_exit` on the final update. Without it, the card's
//! content is one fenced `console` block holding the output so far, replaced as it grows.

use crate::session::{
    CallStatus, Card, CompactionEnd, GenericCard, SessionEvent, StopReason, SubagentState, ToolKind,
};
use agent_client_protocol::v1::schema::{
    self as acp, ContentChunk, Meta, SessionUpdate, Terminal, ToolCall, ToolCallContent,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};
use hotsh_core::context::{ContextUse, Trigger};
use serde_json::json;
use std::collections::HashMap;

/// The most output a console card holds (its tail); the full output is in the spill file.
const CONSOLE_TAIL: usize = 64 << 10;

pub(super) fn stop_reason(stop: StopReason) -> acp::StopReason {
    match stop {
        StopReason::EndTurn => acp::StopReason::EndTurn,
        StopReason::Cancelled => acp::StopReason::Cancelled,
        StopReason::MaxTurnRequests => acp::StopReason::MaxTurnRequests,
    }
}

/// The context indicator: `used` of `size`, and in `_meta.hotsh` whether `used` is hotsh's
/// estimate and how many prompt tokens the provider's cache served.
fn usage_update(shown: ContextUse) -> SessionUpdate {
    let mut detail = json!({ "estimated": shown.estimated });
    if let Some(cached) = shown.cached {
        detail["cachedTokens"] = json!(cached);
    }
    let cost = shown.cost.map(|spent| acp::Cost::new(spent.amount, spent.currency));
    SessionUpdate::UsageUpdate(
        acp::UsageUpdate::new(shown.used, shown.size).cost(cost).meta(meta("hotsh", detail)),
    )
}

fn plan_entry(entry: hotsh_core::session::PlanEntry) -> acp::PlanEntry {
    use hotsh_core::session::{PlanPriority, PlanStatus};
    let priority = match entry.priority {
        PlanPriority::High => acp::PlanEntryPriority::High,
        PlanPriority::Medium => acp::PlanEntryPriority::Medium,
        PlanPriority::Low => acp::PlanEntryPriority::Low,
    };
    let status = match entry.status {
        PlanStatus::Pending => acp::PlanEntryStatus::Pending,
        PlanStatus::InProgress => acp::PlanEntryStatus::InProgress,
        PlanStatus::Completed => acp::PlanEntryStatus::Completed,
    };
    acp::PlanEntry::new(entry.step, priority, status)
}

fn compaction_meta(ended: &CompactionEnd) -> Meta {
    meta(
        "hotsh",
        json!({
            "trigger": ended.trigger.as_str(),
            "tokensBefore": ended.tokens_before,
            "tokensAfter": ended.tokens_after,
        }),
    )
}

/// A compaction's updates for a client that advertised `session.compaction`: ACP's own
/// compaction entity, its summary streamed into it.
pub(super) fn compaction_update(event: &SessionEvent) -> Option<SessionUpdate> {
    use acp::{CompactionStatus, CompactionSummaryChunk, CompactionUpdate};
    Some(match event {
        SessionEvent::CompactionStarted { id, trigger } => SessionUpdate::CompactionUpdate(
            CompactionUpdate::new(id.0.clone(), CompactionStatus::InProgress)
                .meta(meta("hotsh", json!({ "trigger": trigger.as_str() }))),
        ),
        SessionEvent::CompactionSummary { id, text } => SessionUpdate::CompactionSummaryChunk(
            CompactionSummaryChunk::new(id.0.clone(), text.clone().into()),
        ),
        SessionEvent::CompactionEnded { id, ended } => {
            let status = match ended.status.as_str() {
                "completed" => CompactionStatus::Completed,
                "cancelled" => CompactionStatus::Cancelled,
                _ => CompactionStatus::Failed,
            };
            let mut update =
                CompactionUpdate::new(id.0.clone(), status).meta(compaction_meta(ended));
            if let Some(error) = &ended.error {
                update = update.error(error.clone());
            }
            SessionUpdate::CompactionUpdate(update)
        }
        _ => return None,
    })
}

fn kind(kind: ToolKind) -> acp::ToolKind {
    match kind {
        ToolKind::Read => acp::ToolKind::Read,
        ToolKind::Edit => acp::ToolKind::Edit,
        ToolKind::Delete => acp::ToolKind::Delete,
        ToolKind::Move => acp::ToolKind::Move,
        ToolKind::Search => acp::ToolKind::Search,
        ToolKind::Execute => acp::ToolKind::Execute,
        ToolKind::Think => acp::ToolKind::Think,
        ToolKind::Fetch => acp::ToolKind::Fetch,
        ToolKind::Other => acp::ToolKind::Other,
    }
}

pub(super) fn status(status: CallStatus) -> ToolCallStatus {
    match status {
        CallStatus::Completed => ToolCallStatus::Completed,
        CallStatus::Failed => ToolCallStatus::Failed,
        CallStatus::Running => ToolCallStatus::InProgress,
    }
}

fn meta(key: &str, value: serde_json::Value) -> Meta {
    let mut meta = Meta::new();
    meta.insert(key.to_owned(), value);
    meta
}

fn text_content(text: impl Into<String>) -> Vec<ToolCallContent> {
    vec![ToolCallContent::from(text.into())]
}

/// What an update does to the cards a client has open.
#[derive(Debug, PartialEq)]
pub(super) enum CardDrawn {
    /// The card (by id) opened, drawn with these.
    Opened(String, Box<ToolCallUpdateFields>),
    /// The card (by id) closed.
    Closed(String),
    Neither,
}

/// What `update` does to the client's open cards.
pub(super) fn card_drawn(update: &SessionUpdate) -> CardDrawn {
    match update {
        SessionUpdate::ToolCall(call) if call.status == ToolCallStatus::InProgress => {
            let drawn = ToolCallUpdateFields::new()
                .title(call.title.clone())
                .kind(call.kind)
                .content(call.content.clone());
            CardDrawn::Opened(call.tool_call_id.0.to_string(), Box::new(drawn))
        }
        SessionUpdate::ToolCallUpdate(update)
            if matches!(
                update.fields.status,
                Some(ToolCallStatus::Completed | ToolCallStatus::Failed)
            ) =>
        {
            CardDrawn::Closed(update.tool_call_id.0.to_string())
        }
        _ => CardDrawn::Neither,
    }
}

/// What a terminal card is drawn with when it opens (see [`card_drawn`]).
pub(super) fn terminal_drawn(id: &str, command: &str) -> ToolCallUpdateFields {
    ToolCallUpdateFields::new()
        .title(command.to_owned())
        .kind(acp::ToolKind::Execute)
        .content(vec![ToolCallContent::Terminal(Terminal::new(id.to_owned()))])
}

/// Updates for a client that renders `_meta` terminals.
pub(super) fn update_with_terminal(event: SessionEvent) -> Option<SessionUpdate> {
    Some(match event {
        SessionEvent::ToolCallStarted {
            call_id,
            card: Card::Terminal(terminal),
            raw_input,
            ..
        } => {
            let id = call_id.0;
            SessionUpdate::ToolCall(
                ToolCall::new(id.clone(), terminal.command)
                    .kind(acp::ToolKind::Execute)
                    .status(ToolCallStatus::InProgress)
                    .content(vec![ToolCallContent::Terminal(Terminal::new(id.clone()))])
                    .raw_input(raw_input.value())
                    .meta(meta("terminal_info", json!({ "terminal_id": id, "cwd": terminal.cwd }))),
            )
        }
        SessionEvent::ToolOutput { call_id, text } => {
            let id = call_id.0;
            SessionUpdate::ToolCallUpdate(
                ToolCallUpdate::new(id.clone(), ToolCallUpdateFields::new())
                    .meta(meta("terminal_output", json!({ "terminal_id": id, "data": text }))),
            )
        }
        SessionEvent::ToolCallFinished {
            call_id,
            card: Card::Terminal(terminal),
            status: call_status,
            raw_output,
            error,
            ..
        } => {
            let id = call_id.0;
            let mut fields = ToolCallUpdateFields::new()
                .status(status(call_status))
                .raw_output(raw_output.value());
            if let Some(error) = error {
                fields = fields.content(text_content(error));
            }
            let exit = terminal.exit.unwrap_or(crate::session::TerminalExit {
                exit_code: None,
                signal: None,
                reason: None,
            });
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(id.clone(), fields).meta(meta(
                "terminal_exit",
                json!({ "terminal_id": id, "exit_code": exit.exit_code, "signal": exit.signal }),
            )))
        }
        other => return common_update(other),
    })
}

/// Updates for a client without `_meta` terminals: output goes into a fenced console block.
pub(super) fn update_with_console(
    event: SessionEvent,
    consoles: &mut HashMap<String, String>,
) -> Option<SessionUpdate> {
    Some(match event {
        SessionEvent::ToolCallStarted {
            call_id,
            card: Card::Terminal(terminal),
            raw_input,
            ..
        } => {
            consoles.insert(call_id.0.clone(), String::new());
            let mut call = ToolCall::new(call_id.0, terminal.command)
                .kind(acp::ToolKind::Execute)
                .status(ToolCallStatus::InProgress)
                .raw_input(raw_input.value());
            if let Some(description) = terminal.description {
                call = call.content(text_content(description));
            }
            SessionUpdate::ToolCall(call)
        }
        SessionEvent::ToolOutput { call_id, text } => {
            let console = consoles.entry(call_id.0.clone()).or_default();
            append_bounded(console, &text);
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                call_id.0,
                ToolCallUpdateFields::new().content(text_content(fenced_console(console))),
            ))
        }
        SessionEvent::ToolCallFinished {
            call_id,
            card: Card::Terminal(terminal),
            status: call_status,
            raw_output,
            error,
            ..
        } => {
            let console = consoles.remove(&call_id.0).unwrap_or_default();
            let mut fields = ToolCallUpdateFields::new()
                .status(status(call_status))
                .raw_output(raw_output.value());
            // Without a terminal there is no exit-status pill: say why the command ended.
            let reason = terminal.exit.and_then(|exit| exit.reason);
            let body = match (error, console.is_empty(), reason) {
                (Some(error), _, _) => Some(error),
                (None, true, reason) => reason,
                (None, false, None) => Some(fenced_console(&console)),
                (None, false, Some(reason)) => {
                    Some(format!("{}\n\n{reason}", fenced_console(&console)))
                }
            };
            if let Some(body) = body {
                fields = fields.content(text_content(body));
            }
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call_id.0, fields))
        }
        other => return common_update(other),
    })
}

/// Updates that do not depend on terminal support.
fn common_update(event: SessionEvent) -> Option<SessionUpdate> {
    Some(match event {
        SessionEvent::AgentText { text } => {
            SessionUpdate::AgentMessageChunk(ContentChunk::new(text.into()))
        }
        SessionEvent::AgentThought { text } => {
            SessionUpdate::AgentThoughtChunk(ContentChunk::new(text.into()))
        }
        SessionEvent::UserMessage { block } => {
            let block = serde_json::from_value::<acp::ContentBlock>(block)
                .unwrap_or_else(|_| "[a part of this prompt cannot be shown]".into());
            SessionUpdate::UserMessageChunk(ContentChunk::new(block))
        }
        SessionEvent::PluginChanged { call_id, title, detail, failed } => SessionUpdate::ToolCall(
            ToolCall::new(call_id.0, title)
                .kind(acp::ToolKind::Other)
                .status(if failed { ToolCallStatus::Failed } else { ToolCallStatus::Completed })
                .content(text_content(detail)),
        ),
        SessionEvent::HookRan { call_id, run } => SessionUpdate::ToolCall(
            ToolCall::new(call_id.0, title_line(&run.title()))
                .kind(acp::ToolKind::Other)
                .status(if run.failed { ToolCallStatus::Failed } else { ToolCallStatus::Completed })
                .content(text_content(hook_card(&run))),
        ),
        SessionEvent::HostNote { call_id, title, detail } => SessionUpdate::ToolCall(
            ToolCall::new(call_id.0, title)
                .kind(acp::ToolKind::Other)
                .status(ToolCallStatus::Completed)
                .content(text_content(detail)),
        ),
        SessionEvent::ToolCallStarted { call_id, card: Card::Generic(card), raw_input, .. } => {
            let mut call = ToolCall::new(call_id.0, card.title.clone())
                .kind(kind(card.kind))
                .status(ToolCallStatus::InProgress)
                .raw_input(raw_input.value());
            if !card.locations.is_empty() {
                call = call.locations(locations(&card));
            }
            if let Some(content) = generic_content(*card, None) {
                call = call.content(content);
            }
            SessionUpdate::ToolCall(call)
        }
        SessionEvent::ToolCallFinished {
            call_id,
            card: Card::Generic(card),
            status: call_status,
            raw_output,
            error,
            ..
        } => {
            let mut fields = ToolCallUpdateFields::new()
                .title(card.title.clone())
                .status(status(call_status))
                .raw_output(raw_output.value());
            if !card.locations.is_empty() {
                fields = fields.locations(locations(&card));
            }
            if let Some(content) = generic_content(*card, error) {
                fields = fields.content(content);
            }
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call_id.0, fields))
        }
        SessionEvent::Usage(shown) => usage_update(shown),
        SessionEvent::Plan { entries } => {
            SessionUpdate::Plan(acp::Plan::new(entries.into_iter().map(plan_entry).collect()))
        }
        // Without the client's `session.compaction`: a card that says what happens.
        SessionEvent::CompactionStarted { id, trigger } => SessionUpdate::ToolCall(
            ToolCall::new(id.0, "Compacting the conversation")
                .kind(acp::ToolKind::Think)
                .status(ToolCallStatus::InProgress)
                .content(text_content(format!(
                    "Summarising the conversation so far ({}).",
                    match trigger {
                        Trigger::Auto => "the context is nearly full",
                        Trigger::Overflow => "the model said the context is too long",
                        Trigger::Manual => "/compact",
                    }
                ))),
        ),
        SessionEvent::CompactionEnded { id, ended } => {
            let status = if ended.status == "completed" {
                ToolCallStatus::Completed
            } else {
                ToolCallStatus::Failed
            };
            let title = if ended.status == "completed" {
                "Compacted the conversation".to_owned()
            } else {
                format!("Compaction {}", ended.status)
            };
            let fields = ToolCallUpdateFields::new()
                .title(title)
                .status(status)
                .content(text_content(ended.describe()));
            SessionUpdate::ToolCallUpdate(
                ToolCallUpdate::new(id.0, fields).meta(compaction_meta(&ended)),
            )
        }
        // Output of a generic card's call has nowhere to go; terminal cards are rendered by
        // the two callers before they fall through to here. A summary is shown in full by
        // clients with `session.compaction`; the card says what became of it.
        SessionEvent::CompactionSummary { .. } => return None,
        // Without the client's `subagents`: the card says what the subagent does; its state
        // changes show as the card's own (running, then finished).
        SessionEvent::SubagentProgress { call_id, text } => SessionUpdate::ToolCallUpdate(
            ToolCallUpdate::new(call_id.0, ToolCallUpdateFields::new().content(text_content(text))),
        ),
        SessionEvent::Subagent { .. } => return None,
        SessionEvent::ToolOutput { .. }
        | SessionEvent::ToolCallStarted { card: Card::Terminal(_), .. }
        | SessionEvent::ToolCallFinished { card: Card::Terminal(_), .. } => return None,
    })
}

fn locations(card: &GenericCard) -> Vec<acp::ToolCallLocation> {
    card.locations
        .iter()
        .map(|location| acp::ToolCallLocation::new(&location.path).line(location.line))
        .collect()
}

/// A generic card's content: its diffs, then its text (or the error, which replaces the
/// text); `None` when it has neither.
fn generic_content(card: GenericCard, error: Option<String>) -> Option<Vec<ToolCallContent>> {
    let child =
        card.session.map(|child| ToolCallContent::Session(acp::SessionReference::new(child.0)));
    let mut content: Vec<ToolCallContent> = child.into_iter().collect();
    content.extend(card.diffs.into_iter().map(|diff| {
        ToolCallContent::Diff(acp::Diff::new(diff.path, diff.new_text).old_text(diff.old_text))
    }));
    if let Some(text) = error.or(card.content) {
        content.extend(text_content(text));
    }
    (!content.is_empty()).then_some(content)
}

/// A subagent's state, as `subagent_update` for a client that shows child threads.
pub(super) fn subagent_update(event: &SessionEvent) -> Option<SessionUpdate> {
    let SessionEvent::Subagent { child, title, agent, state, .. } = event else { return None };
    let state = match state {
        SubagentState::Running => acp::StateUpdate::Running(acp::RunningStateUpdate::new()),
        SubagentState::RequiresAction => {
            acp::StateUpdate::RequiresAction(acp::RequiresActionStateUpdate::new())
        }
        SubagentState::Idle { stop } => {
            let reason = match stop.as_str() {
                "end_turn" => acp::IdleStopReason::EndTurn,
                "max_turn_requests" => acp::IdleStopReason::MaxTurnRequests,
                "cancelled" => acp::IdleStopReason::Cancelled,
                _ => acp::IdleStopReason::Error(acp::ErrorStopReason::new()),
            };
            acp::StateUpdate::Idle(acp::IdleStateUpdate::new().stop_reason(reason))
        }
    };
    let description = match agent {
        Some(agent) => format!("Subagent `{agent}`"),
        None => "Subagent".to_owned(),
    };
    let capabilities =
        acp::SubagentSessionCapabilities::new().cancel(acp::SessionCancelCapabilities::new());
    Some(SessionUpdate::SubagentUpdate(
        acp::SubagentUpdate::new(child.0.clone())
            .title(title.clone())
            .description(description)
            .capabilities(capabilities)
            .state(state),
    ))
}

/// Takes out what only a client that shows child threads understands (a card's link to its
/// subagent's session).
pub(super) fn without_child_links(update: &mut SessionUpdate) {
    let content = match update {
        SessionUpdate::ToolCall(call) => Some(&mut call.content),
        SessionUpdate::ToolCallUpdate(update) => update.fields.content.as_mut(),
        _ => None,
    };
    if let Some(content) = content {
        content.retain(|item| !matches!(item, ToolCallContent::Session(_)));
    }
}

fn append_bounded(console: &mut String, text: &str) {
    console.push_str(text);
    if console.len() > CONSOLE_TAIL {
        let mut cut = console.len() - CONSOLE_TAIL;
        while !console.is_char_boundary(cut) {
            cut += 1;
        }
        console.replace_range(..cut, "[… earlier output not shown …]\n");
    }
}

/// `text` in a ```` ```console ```` block, with a fence longer than any backtick run inside.
pub(super) fn fenced_console(text: &str) -> String {
    fenced(text, "console")
}

/// `text` in a fenced code block tagged `info`, the fence longer than any backtick run inside,
/// so that nothing in the text can close it.
fn fenced(text: &str, info: &str) -> String {
    let longest_run = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run.max(2) + 1);
    let body = text.strip_suffix('\n').unwrap_or(text);
    format!("{fence}{info}\n{body}\n{fence}")
}

/// `text` with every character a reader would not see, or would see in the wrong place, shown
/// as an escape (`\u{202e}`, `\r`, `\u{1b}`): control characters but newline and tab,
/// bidirectional controls, zero-width and other invisible characters. What the user approves
/// is then what they read.
pub(super) fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' => out.push_str("\\r"),
            c if c.is_control() || invisible(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Characters that render as nothing or reorder the text around them (Unicode's format
/// characters and the other default-ignorable ones).
fn invisible(c: char) -> bool {
    matches!(
        c as u32,
        0xad | 0x34f
            | 0x61c
            | 0x115f..=0x1160
            | 0x17b4..=0x17b5
            | 0x180b..=0x180f
            | 0x200b..=0x200f
            | 0x2028..=0x202e
            | 0x205f..=0x206f
            | 0x3164
            | 0xfe00..=0xfe0f
            | 0xfeff
            | 0xffa0
            | 0xfff0..=0xfffb
            | 0x1bca0..=0x1bca3
            | 0x1d173..=0x1d17a
            | 0xe0000..=0xe0fff
    )
}

/// A title of one line: the first line of `text`, visible, at most [`TITLE_CHARS`]
/// characters, saying how many lines follow.
/// `text` as inline code on one line: invisible characters and newlines escaped, in a run of
/// backticks longer than any inside it.
fn inline_code(text: &str) -> String {
    let text = visible(text).replace('\n', "\\n").replace('\t', "\\t");
    let longest_run = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let ticks = "`".repeat(longest_run + 1);
    if text.starts_with('`') || text.ends_with('`') {
        format!("{ticks} {text} {ticks}")
    } else {
        format!("{ticks}{text}{ticks}")
    }
}

fn title_line(text: &str) -> String {
    let mut lines = text.lines();
    let first = visible(lines.next().unwrap_or(""));
    let more = lines.count();
    let mut title: String = first.chars().take(TITLE_CHARS).collect();
    if first.chars().count() > TITLE_CHARS {
        title.push('…');
    }
    match more {
        0 => title,
        1 => format!("{title} (and 1 more line)"),
        n => format!("{title} (and {n} more lines)"),
    }
}

const TITLE_CHARS: usize = 100;

/// The option id that allows an escalation (once).
pub(super) const ALLOW_ONCE: &str = "allow-once";
pub(super) const ALLOW_SESSION: &str = "allow-session";
pub(super) const ALLOW_PROJECT: &str = "allow-project";
const REJECT: &str = "reject";

/// `session/request_permission` for a command that wants a wider sandbox mode: attached to
/// the command's card, showing the exact command, where it runs and why.
pub(super) fn escalation_request(
    session_id: &str,
    ask: &crate::session::EscalationAsk,
) -> agent_client_protocol::v1::schema::RequestPermissionRequest {
    use agent_client_protocol::v1::schema::{
        PermissionOption, PermissionOptionKind, RequestPermissionRequest,
    };
    let why = fenced(&visible(&ask.justification), "text");
    // Where it runs comes first, outside every block the agent's text fills: what a command
    // prints of a "folder" inside its own block cannot pass for it.
    let folder = inline_code(&ask.cwd);
    let place = if ask.writes_file {
        format!("**Session folder:** {folder}")
    } else if ask.workdir == ask.cwd {
        format!("**Session folder:** {folder} (the command runs there)")
    } else {
        format!("**Session folder:** {folder}  \n**Runs in:** {}", inline_code(&ask.workdir))
    };
    let (title, body, tool_kind) = if ask.writes_file {
        (
            format!("Write under {}: {}", ask.mode, title_line(&ask.command)),
            format!(
                "{place}\n\nThe agent asks to write this file under **{}** instead of {}:\n\n{}\n\nWhy, in the agent's words:\n\n{why}",
                ask.mode,
                ask.standing,
                fenced(&visible(&ask.command), "text"),
            ),
            acp::ToolKind::Edit,
        )
    } else {
        (
            format!("Run under {}: {}", ask.mode, title_line(&ask.command)),
            format!(
                "{place}\n\nThe agent asks to run this command under **{}** instead of {}:\n\n{}\n\nWhy, in the agent's words:\n\n{why}",
                ask.mode,
                ask.standing,
                fenced(&visible(&ask.command), "sh"),
            ),
            acp::ToolKind::Execute,
        )
    };
    // A subagent's request is its parent's, on the card of the call that runs it: who asks
    // comes first, in the title and above the body.
    let (title, body) = match &ask.asked_by {
        Some(who) => {
            let who = visible(who);
            (format!("{who}: {title}"), format!("**Asked by:** {who}\n\n{body}"))
        }
        None => (title, body),
    };
    // Pending while the user decides (Zed shows it as waiting for them).
    let fields = ToolCallUpdateFields::new()
        .title(title)
        .kind(tool_kind)
        .status(agent_client_protocol::v1::schema::ToolCallStatus::Pending)
        .content(text_content(body));
    RequestPermissionRequest::new(
        session_id.to_owned(),
        ToolCallUpdate::new(ask.call_id.clone(), fields),
        vec![
            PermissionOption::new(ALLOW_ONCE, "Allow once", PermissionOptionKind::AllowOnce),
            PermissionOption::new(
                ALLOW_SESSION,
                format!("Allow {} for this session", visible(&ask.rule.what())),
                PermissionOptionKind::AllowAlways,
            ),
            PermissionOption::new(
                ALLOW_PROJECT,
                format!("Always allow {} in this project", visible(&ask.rule.what())),
                PermissionOptionKind::AllowAlways,
            ),
            PermissionOption::new(REJECT, "Reject", PermissionOptionKind::RejectOnce),
        ],
    )
}

/// A hook run's card: where it came from and what it decided (hotsh's words), then the
/// command and what it printed, each in a block of its own.
fn hook_card(run: &crate::session::HookRun) -> String {
    let mut text = format!("From {}.", run.source);
    if let Some(outcome) = &run.outcome {
        text.push_str(&format!(" It {}.", visible(outcome)));
    }
    text.push_str("\n\n");
    text.push_str(&fenced(&visible(&run.command), "sh"));
    if !run.output.trim().is_empty() {
        text.push_str("\n\n");
        text.push_str(&fenced_console(&run.output));
    }
    text
}

/// `session/request_permission` for a question that is not an escalation: a card of its own
/// (pending while the user decides), hotsh's words first, each quoted text in a block.
pub(super) fn question_request(
    session_id: &str,
    question: &crate::session::Question,
) -> agent_client_protocol::v1::schema::RequestPermissionRequest {
    use agent_client_protocol::v1::schema::{
        PermissionOption, PermissionOptionKind, RequestPermissionRequest,
    };
    let mut body = question.intro.clone();
    for (label, text) in &question.quoted {
        body.push_str(&format!("\n\n**{label}:**\n\n{}", fenced(&visible(text), "text")));
    }
    let fields = ToolCallUpdateFields::new()
        .title(title_line(&question.title))
        .kind(acp::ToolKind::Other)
        .status(agent_client_protocol::v1::schema::ToolCallStatus::Pending)
        .content(text_content(body));
    let options = question
        .options
        .iter()
        .map(|option| {
            let kind = match option.kind {
                crate::session::OptionKind::AllowOnce => PermissionOptionKind::AllowOnce,
                crate::session::OptionKind::AllowAlways => PermissionOptionKind::AllowAlways,
                crate::session::OptionKind::RejectOnce => PermissionOptionKind::RejectOnce,
            };
            PermissionOption::new(option.id.clone(), option.label.clone(), kind)
        })
        .collect();
    RequestPermissionRequest::new(
        session_id.to_owned(),
        ToolCallUpdate::new(question.call_id.clone(), fields),
        options,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_outgrows_backticks_in_the_output() {
        assert_eq!(fenced_console("a\nb\n"), "```console\na\nb\n```");
        assert_eq!(fenced_console("x ```` y"), "`````console\nx ```` y\n`````");
    }

    #[test]
    fn an_approval_shows_exactly_what_runs_and_nothing_can_spoof_it() {
        let command = "echo ok\n```\n\nin `/home/you/project`\n\nWhy: harmless\n<!-- \u{202e}\u{1b}[2K\r\u{200b}rm -rf ~ -->";
        let ask = crate::session::EscalationAsk {
            call_id: "call-1".into(),
            command: command.into(),
            cwd: "/home/you/project".into(),
            workdir: "/tmp/w\n```".into(),
            justification: "it needs it\n```\nWhy: fake".into(),
            mode: crate::sandbox::Mode::DangerFullAccess,
            standing: crate::sandbox::Mode::WorkspaceWrite,
            writes_file: false,
            rule: hotsh_core::permissions::Rule::for_call(
                hotsh_core::permissions::Covers::Command,
                command,
                crate::sandbox::Mode::DangerFullAccess,
            ),
            asked_by: None,
        };
        let request = serde_json::to_value(escalation_request("s", &ask)).expect("serialises");
        let fields = &request["toolCall"];
        assert_eq!(fields["status"], "pending");
        assert_eq!(fields["kind"], "execute");
        let title = fields["title"].as_str().expect("a title");
        assert_eq!(title, "Run under danger-full-access: echo ok (and 6 more lines)");
        let body = fields["content"][0]["content"]["text"].as_str().expect("a body");
        for hidden in ['\u{202e}', '\u{1b}', '\r', '\u{200b}'] {
            assert!(!body.contains(hidden), "{hidden:?} reached the body: {body}");
        }
        expect_test::expect![[r#"
            **Session folder:** `/home/you/project`  
            **Runs in:** ```` /tmp/w\n``` ````

            The agent asks to run this command under **danger-full-access** instead of workspace-write:

            ````sh
            echo ok
            ```

            in `/home/you/project`

            Why: harmless
            <!-- \u{202e}\u{1b}[2K\r\u{200b}rm -rf ~ -->
            ````

            Why, in the agent's words:

            ````text
            it needs it
            ```
            Why: fake
            ````"#]]
        .assert_eq(body);
    }

    #[test]
    fn console_keeps_its_tail() {
        let mut console = String::new();
        append_bounded(&mut console, &"x".repeat(CONSOLE_TAIL + 10));
        assert!(console.starts_with("[… earlier output not shown …]\n"));
        assert!(console.len() <= CONSOLE_TAIL + 40);
    }
}
