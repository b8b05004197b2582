//! Session state folded from a log: the model's history, the client's view, what is still
//! pending. Nothing that must survive a restart lives anywhere but in the log.

use super::log::{Fact, Record, SessionMeta};
use super::{CallStatus, Card, GenericCard, PendingNotice, SessionEvent, ToolCallId};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

/// A background task that was running when its log's last record was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenTask {
    pub task_id: String,
    pub call_id: ToolCallId,
    pub command: String,
    pub output_path: PathBuf,
    /// The card its start call left open.
    pub card: Option<Card>,
}

/// What a log folds to.
#[derive(Debug, Clone)]
pub struct Folded {
    pub meta: SessionMeta,
    /// The conversation as the model sees it now (compactions applied).
    pub history: super::History,
    /// What the client saw, in order (prompts as `UserMessage` blocks).
    pub view: Vec<SessionEvent>,
    /// The number of the next tool call (`call-N`).
    pub next_call: u64,
    /// Notices for the model that were not delivered yet.
    pub pending_notices: Vec<PendingNotice>,
    /// Tasks started but never recorded as ended.
    pub open_tasks: Vec<OpenTask>,
    pub title: Option<String>,
    /// The model the session chose last, if it chose one.
    pub model: Option<String>,
    /// The reasoning effort it chose last, if it chose one.
    pub effort: Option<String>,
    /// The session's sandbox override, if it set one.
    pub sandbox_mode: Option<crate::sandbox::Mode>,
    /// The session's ACP mode (`default` unless it chose `plan`).
    pub session_mode: Option<String>,
    /// What the model last saw of each file it read or wrote (SHA-256, hex).
    pub seen_files: HashMap<PathBuf, String>,
    /// The rules the user allowed for the session, in the order added.
    pub rules: Vec<crate::permissions::Rule>,
}

/// Why records do not fold into a session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FoldError {
    #[error("its first record is not a `session` record")]
    NoSessionRecord,
}

/// Folds the records of one log; the first must be its `session` record.
pub fn fold(records: Vec<Record>) -> Result<Folded, FoldError> {
    let mut records = records.into_iter();
    let Some(Record::Fact(Fact::Session(meta))) = records.next() else {
        return Err(FoldError::NoSessionRecord);
    };
    let mut history = super::History::default();
    let mut view = Vec::new();
    let mut next_call = 1;
    let mut title = None;
    let mut model = None;
    let mut effort = None;
    let mut sandbox_mode = None;
    let mut session_mode = None;
    let mut seen_files = HashMap::new();
    let mut rules: Vec<crate::permissions::Rule> = Vec::new();
    let mut started: BTreeMap<String, OpenTask> = BTreeMap::new();
    let mut ended_notices: Vec<(String, PendingNotice)> = Vec::new();
    let mut noticed: HashSet<String> = HashSet::new();
    let mut cards: BTreeMap<String, Card> = BTreeMap::new();
    // The card whose output is the text of the next tool result (its place in the view).
    let mut awaiting_result: Option<usize> = None;
    // Cards drawn and not closed yet: a turn cut off (hotsh killed) leaves them open.
    let mut open_cards: BTreeMap<String, Card> = BTreeMap::new();
    for record in records {
        if matches!(record, Record::Fact(Fact::Prompt(_) | Fact::Command { .. })) {
            close_cut_off(&mut view, &mut open_cards);
        }
        history.apply(&record);
        match record {
            // Only the last context use is shown again (after the replay).
            Record::Event(SessionEvent::Usage(_)) => {}
            Record::Event(event) => {
                if let Some(number) = call_id_of(&event).and_then(ToolCallId::number) {
                    next_call = next_call.max(number + 1);
                }
                if let SessionEvent::ToolCallFinished {
                    call_id,
                    card,
                    status: CallStatus::Running,
                    ..
                } = &event
                {
                    cards.insert(call_id.0.clone(), card.clone());
                }
                match &event {
                    SessionEvent::ToolCallStarted { call_id, card, .. } => {
                        open_cards.insert(call_id.0.clone(), card.clone());
                    }
                    SessionEvent::ToolCallFinished { call_id, .. } => {
                        open_cards.remove(&call_id.0);
                    }
                    _ => {}
                }
                let awaits =
                    matches!(event, SessionEvent::ToolCallFinished { output_in_result: true, .. });
                push_coalesced(&mut view, event);
                if awaits {
                    awaiting_result = Some(view.len() - 1);
                }
            }
            Record::Fact(Fact::ToolResult { text, .. }) => {
                if let Some(SessionEvent::ToolCallFinished {
                    output_text, output_in_result, ..
                }) = awaiting_result.take().and_then(|at| view.get_mut(at))
                {
                    *output_text = Some(text);
                    *output_in_result = false;
                }
            }
            Record::Fact(Fact::Prompt(prompt)) => {
                if title.is_none() {
                    title = Some(super::title_of(&prompt.text));
                }
                view.extend(
                    prompt
                        .blocks
                        .iter()
                        .map(|block| SessionEvent::UserMessage { block: block.clone() }),
                );
            }
            Record::Fact(Fact::Command { blocks, .. }) => {
                view.extend(blocks.into_iter().map(|block| SessionEvent::UserMessage { block }));
            }
            Record::Fact(Fact::TaskStarted { task_id, call_id, command, output_path }) => {
                started.insert(
                    task_id.clone(),
                    OpenTask {
                        task_id: task_id.clone(),
                        call_id: ToolCallId(call_id.clone()),
                        command: command.clone(),
                        output_path: output_path.clone(),
                        card: None,
                    },
                );
            }
            Record::Fact(Fact::TaskEnded(end)) => {
                if let Some(task) = started.remove(&end.task_id) {
                    let notice =
                        super::task_notice(&task.task_id, &task.command, &end, &task.output_path);
                    ended_notices.push((end.task_id.clone(), notice));
                }
            }
            Record::Fact(
                Fact::Notice { task_id: Some(task_id), .. } | Fact::TaskReported { task_id },
            ) => {
                noticed.insert(task_id.clone());
            }
            Record::Fact(Fact::ModelChosen { model: chosen }) => model = Some(chosen),
            Record::Fact(Fact::EffortChosen { effort: chosen }) => effort = Some(chosen),
            Record::Fact(Fact::SandboxMode { mode }) => sandbox_mode = Some(mode),
            Record::Fact(Fact::SessionMode { mode }) => session_mode = Some(mode),
            Record::Fact(Fact::FileSeen { path, sha256 }) => {
                seen_files.insert(path, sha256);
            }
            Record::Fact(Fact::RuleAdded { rule }) => {
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
            Record::Fact(Fact::RuleRemoved { rule }) => rules.retain(|kept| *kept != rule),
            Record::Fact(_) => {}
        }
    }
    // A log that ends in the middle of a turn (hotsh was killed) folds to a history a
    // provider accepts, and a thread whose cut-off cards are closed.
    close_cut_off(&mut view, &mut open_cards);
    history.answer_cut_off();
    let pending_notices = ended_notices
        .into_iter()
        .filter(|(task_id, _)| !noticed.contains(task_id))
        .map(|(_, notice)| notice)
        .collect();
    let open_tasks = started
        .into_values()
        .map(|mut task| {
            task.card = cards.get(&task.call_id.0).cloned();
            task
        })
        .collect();
    Ok(Folded {
        meta,
        history,
        view,
        next_call,
        pending_notices,
        open_tasks,
        title,
        model,
        effort,
        sandbox_mode,
        session_mode,
        seen_files,
        rules,
    })
}

/// Closes, as failed, the cards of a turn that was cut off before they were: a terminal says
/// why where its exit status would be, any other card in its content.
fn close_cut_off(view: &mut Vec<SessionEvent>, open_cards: &mut BTreeMap<String, Card>) {
    let words = super::CUT_OFF_RESULT;
    for (call_id, card) in std::mem::take(open_cards) {
        let (card, error) = match card {
            Card::Terminal(mut terminal) => {
                let reason = Some(words.to_owned());
                terminal.exit = Some(super::TerminalExit { exit_code: None, signal: None, reason });
                (Card::Terminal(terminal), None)
            }
            generic => (generic, Some(words.to_owned())),
        };
        // A subagent the call ran was cut off with it: its thread is shown ended.
        let ended = match &card {
            Card::Generic(GenericCard { session: Some(child), .. }) => {
                view.iter().rev().find_map(|event| match event {
                    SessionEvent::Subagent { child: shown, title, agent, .. } if shown == child => {
                        Some(SessionEvent::Subagent {
                            call_id: ToolCallId(call_id.clone()),
                            child: child.clone(),
                            title: title.clone(),
                            agent: agent.clone(),
                            state: super::SubagentState::Idle { stop: "cancelled".to_owned() },
                        })
                    }
                    _ => None,
                })
            }
            _ => None,
        };
        view.extend(ended);
        view.push(SessionEvent::ToolCallFinished {
            call_id: ToolCallId(call_id),
            card,
            status: CallStatus::Failed,
            raw_output: serde_json::Value::Null,
            error,
            output_text: None,
            output_in_result: false,
        });
    }
}

/// Adds `event` to a view, joining it to the previous event when both are chunks of the same
/// stream (the agent's text, its reasoning, one command's output): the client renders the
/// joined chunk exactly as it rendered the parts, with far fewer messages on load.
fn push_coalesced(view: &mut Vec<SessionEvent>, event: SessionEvent) {
    match (view.last_mut(), event) {
        (Some(SessionEvent::AgentText { text }), SessionEvent::AgentText { text: more })
        | (Some(SessionEvent::AgentThought { text }), SessionEvent::AgentThought { text: more }) => {
            text.push_str(&more);
        }
        (
            Some(SessionEvent::ToolOutput { call_id, text }),
            SessionEvent::ToolOutput { call_id: next, text: more },
        )
        | (
            Some(SessionEvent::CompactionSummary { id: call_id, text }),
            SessionEvent::CompactionSummary { id: next, text: more },
        ) if *call_id == next => text.push_str(&more),
        (_, event) => view.push(event),
    }
}

fn call_id_of(event: &SessionEvent) -> Option<&ToolCallId> {
    match event {
        SessionEvent::ToolCallStarted { call_id, .. }
        | SessionEvent::ToolOutput { call_id, .. }
        | SessionEvent::ToolCallFinished { call_id, .. }
        | SessionEvent::PluginChanged { call_id, .. }
        | SessionEvent::HostNote { call_id, .. }
        | SessionEvent::HookRan { call_id, .. }
        | SessionEvent::Subagent { call_id, .. }
        | SessionEvent::SubagentProgress { call_id, .. }
        | SessionEvent::CompactionStarted { id: call_id, .. }
        | SessionEvent::CompactionSummary { id: call_id, .. }
        | SessionEvent::CompactionEnded { id: call_id, .. } => Some(call_id),
        SessionEvent::Usage(_) | SessionEvent::Plan { .. } => None,
        SessionEvent::AgentText { .. }
        | SessionEvent::AgentThought { .. }
        | SessionEvent::UserMessage { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;
    use crate::session::{Prompt, TaskEnd, ToolKind};

    fn meta() -> Record {
        Record::Fact(Fact::Session(SessionMeta {
            session_id: "s".into(),
            cwd: "/w".into(),
            created_at: "t".into(),
            agent: "hotsh".into(),
            parent: None,
            forked_from: None,
        }))
    }

    #[test]
    fn history_view_tasks_and_notices_fold_from_the_records() {
        let card = Card::Generic(GenericCard::new(
            "Background task bash-1: sleep 9",
            ToolKind::Execute,
            None,
        ));
        let records = vec![
            meta(),
            Record::Fact(Fact::Prompt(Prompt {
                text: "go".into(),
                blocks: vec![serde_json::json!({"type": "text", "text": "go"})],
                images: Vec::new(),
            })),
            Record::Event(SessionEvent::ToolCallFinished {
                call_id: ToolCallId("call-7".into()),
                card: card.clone(),
                status: CallStatus::Running,
                raw_output: serde_json::Value::Null,
                error: None,
                output_text: None,
                output_in_result: false,
            }),
            Record::Fact(Fact::TaskStarted {
                task_id: "bash-1".into(),
                call_id: "call-7".into(),
                command: "sleep 9".into(),
                output_path: "/o/bash-1.log".into(),
            }),
            Record::Fact(Fact::TaskStarted {
                task_id: "bash-2".into(),
                call_id: "call-8".into(),
                command: "true".into(),
                output_path: "/o/bash-2.log".into(),
            }),
            Record::Fact(Fact::TaskEnded(TaskEnd {
                task_id: "bash-2".into(),
                state: "exited".into(),
                exit_code: Some(0),
                signal: None,
                with_agent: false,
                sandbox: None,
            })),
        ];
        let folded = fold(records).expect("folds");
        assert_eq!(
            folded.history.messages,
            vec![std::sync::Arc::new(Message::User { text: "go".into(), images: Vec::new() })]
        );
        assert_eq!(folded.next_call, 8);
        assert_eq!(folded.title.as_deref(), Some("go"));
        assert_eq!(folded.open_tasks.len(), 1);
        assert_eq!(folded.open_tasks[0].task_id, "bash-1");
        assert_eq!(folded.open_tasks[0].card, Some(card));
        assert_eq!(folded.pending_notices.len(), 1);
        assert!(
            folded.pending_notices[0]
                .text
                .starts_with("[background task bash-2 `true` exited with code 0")
        );
        assert!(matches!(folded.view[0], SessionEvent::UserMessage { .. }));
    }

    #[test]
    fn calls_left_without_results_are_answered_where_they_belong_and_their_cards_closed() {
        let prompt = |text: &str| {
            Record::Fact(Fact::Prompt(Prompt {
                text: text.into(),
                blocks: vec![serde_json::json!({"type": "text", "text": text})],
                images: Vec::new(),
            }))
        };
        let call = |id: &str| crate::model::ModelToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: "{}".into(),
        };
        let card = Card::Generic(GenericCard::new("bash", ToolKind::Execute, None));
        let records = vec![
            meta(),
            prompt("run two"),
            Record::Fact(Fact::AssistantMessage {
                text: String::new(),
                reasoning: None,
                tool_calls: vec![call("a"), call("b")],
                usage: None,
                finish_reason: None,
            }),
            Record::Fact(Fact::ToolResult {
                call_id: "a".into(),
                text: "one".into(),
                is_error: false,
                after_output: None,
            }),
            Record::Event(SessionEvent::ToolCallStarted {
                call_id: ToolCallId("call-2".into()),
                tool: "bash".into(),
                card,
                raw_input: serde_json::Value::Null,
                arguments: "{}".into(),
            }),
            Record::Event(SessionEvent::ToolOutput {
                call_id: ToolCallId("call-2".into()),
                text: "half way\n".into(),
            }),
        ];
        let cut_off = |folded: &Folded| -> Vec<Message> {
            folded.history.messages.iter().map(|m| (**m).clone()).collect()
        };
        // Killed there: the second call is answered with what it printed, then the note.
        let folded = fold(records.clone()).expect("folds");
        let messages = cut_off(&folded);
        let stopped = format!("half way\n{}", crate::session::CUT_OFF_RESULT);
        assert_eq!(
            messages[3..],
            [
                Message::Tool { call_id: "b".into(), text: stopped.clone(), is_error: true },
                Message::Notice { text: crate::session::CUT_OFF_NOTICE.into() },
            ]
        );
        let closed = folded.view.last().expect("a view");
        assert!(
            matches!(closed, SessionEvent::ToolCallFinished { status: CallStatus::Failed, error: Some(e), .. } if e == crate::session::CUT_OFF_RESULT),
            "{closed:?}"
        );
        // Gone on: the next prompt comes after them, in the log's fold as in the live one.
        let mut more = records;
        more.push(prompt("go on"));
        let messages = cut_off(&fold(more).expect("folds"));
        assert_eq!(messages.len(), 6);
        assert_eq!(
            messages[3],
            Message::Tool { call_id: "b".into(), text: stopped, is_error: true }
        );
        assert!(matches!(&messages[5], Message::User { text, .. } if text == "go on"));
    }

    #[test]
    fn a_log_must_start_with_its_session_record() {
        let error = fold(vec![Record::Event(SessionEvent::AgentText { text: "x".into() })])
            .expect_err("an error");
        assert_eq!(error, FoldError::NoSessionRecord);
    }
}
