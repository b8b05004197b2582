//! Session state folded from a log: the model's history, the client's view, what is still
//! pending. Nothing that must survive a restart lives anywhere but in the log.

use super::log::{Fact, Record, SessionMeta};
use super::{CallStatus, Card, PendingNotice, SessionEvent, ToolCallId};
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

/// Folds a log's records, the first of which must be its `session` record.
pub fn fold(records: Vec<Record>) -> Result<Folded, FoldError> {
    let mut records = records.into_iter();
    let mut folder = Folder::new(records.next())?;
    records.for_each(|record| folder.push(record));
    Ok(folder.finish())
}

/// A fold in progress, a record at a time: what the client is shown of the thread can be
/// taken as it becomes final ([`Folder::take_final`]), so a load streams the thread while
/// the log is still being read.
#[derive(Debug)]
pub struct Folder {
    meta: SessionMeta,
    history: super::History,
    /// The view not taken yet.
    view: Vec<SessionEvent>,
    next_call: u64,
    title: Option<String>,
    model: Option<String>,
    effort: Option<String>,
    sandbox_mode: Option<crate::sandbox::Mode>,
    session_mode: Option<String>,
    seen_files: HashMap<PathBuf, String>,
    rules: Vec<crate::permissions::Rule>,
    started: BTreeMap<String, OpenTask>,
    ended_notices: Vec<(String, PendingNotice)>,
    noticed: HashSet<String>,
    /// The cards background tasks left open.
    cards: BTreeMap<String, Card>,
    /// The card whose output is the text of the next tool result (its place in `view`).
    awaiting_result: Option<usize>,
    /// Cards drawn and not closed yet: a turn cut off (hotsh killed) leaves them open.
    open_cards: BTreeMap<String, Card>,
    /// The last announcement of each subagent shown (its title and agent), for a cut-off
    /// call to show its subagent ended.
    subagents: HashMap<super::SessionId, (String, Option<String>)>,
}

impl Folder {
    /// Starts a fold with a log's first record, which must be its `session` record.
    pub fn new(first: Option<Record>) -> Result<Self, FoldError> {
        let Some(Record::Fact(Fact::Session(meta))) = first else {
            return Err(FoldError::NoSessionRecord);
        };
        Ok(Self {
            meta: *meta,
            history: super::History::default(),
            view: Vec::new(),
            next_call: 1,
            title: None,
            model: None,
            effort: None,
            sandbox_mode: None,
            session_mode: None,
            seen_files: HashMap::new(),
            rules: Vec::new(),
            started: BTreeMap::new(),
            ended_notices: Vec::new(),
            noticed: HashSet::new(),
            cards: BTreeMap::new(),
            awaiting_result: None,
            open_cards: BTreeMap::new(),
            subagents: HashMap::new(),
        })
    }

    /// The session's first record.
    pub fn meta(&self) -> &SessionMeta {
        &self.meta
    }

    /// Folds the next record in.
    pub fn push(&mut self, record: Record) {
        if matches!(record, Record::Fact(Fact::Prompt(_) | Fact::Command { .. })) {
            self.close_cut_off();
        }
        self.history.apply(&record);
        match record {
            // Only the last context use is shown again (after the replay).
            Record::Event(SessionEvent::Usage(_)) => {}
            Record::Event(event) => {
                if let Some(number) = call_id_of(&event).and_then(ToolCallId::number) {
                    self.next_call = self.next_call.max(number + 1);
                }
                if let SessionEvent::ToolCallFinished {
                    call_id,
                    card,
                    status: CallStatus::Running,
                    ..
                } = &event
                {
                    self.cards.insert(call_id.0.clone(), card.clone());
                }
                match &event {
                    SessionEvent::ToolCallStarted { call_id, card, .. } => {
                        self.open_cards.insert(call_id.0.clone(), card.clone());
                    }
                    SessionEvent::ToolCallFinished { call_id, .. } => {
                        self.open_cards.remove(&call_id.0);
                    }
                    _ => {}
                }
                let awaits =
                    matches!(event, SessionEvent::ToolCallFinished { output_in_result: true, .. });
                self.show(event);
                if awaits {
                    self.awaiting_result = Some(self.view.len() - 1);
                }
            }
            Record::Fact(Fact::ToolResult { text, .. }) => {
                if let Some(SessionEvent::ToolCallFinished {
                    output_text, output_in_result, ..
                }) = self.awaiting_result.take().and_then(|at| self.view.get_mut(at))
                {
                    *output_text = Some(text);
                    *output_in_result = false;
                }
            }
            Record::Fact(Fact::Prompt(prompt)) => {
                if self.title.is_none() {
                    self.title = Some(super::title_of(&prompt.text));
                }
                self.view.extend(
                    prompt.blocks.into_iter().map(|block| SessionEvent::UserMessage { block }),
                );
            }
            Record::Fact(Fact::Command { blocks, .. }) => {
                self.view
                    .extend(blocks.into_iter().map(|block| SessionEvent::UserMessage { block }));
            }
            Record::Fact(Fact::TaskStarted { task_id, call_id, command, output_path }) => {
                self.started.insert(
                    task_id.clone(),
                    OpenTask {
                        task_id,
                        call_id: ToolCallId(call_id),
                        command,
                        output_path,
                        card: None,
                    },
                );
            }
            Record::Fact(Fact::TaskEnded(end)) => {
                if let Some(task) = self.started.remove(&end.task_id) {
                    let notice =
                        super::task_notice(&task.task_id, &task.command, &end, &task.output_path);
                    self.ended_notices.push((end.task_id.clone(), notice));
                }
            }
            Record::Fact(
                Fact::Notice { task_id: Some(task_id), .. } | Fact::TaskReported { task_id },
            ) => {
                self.noticed.insert(task_id);
            }
            Record::Fact(Fact::ModelChosen { model }) => self.model = Some(model),
            Record::Fact(Fact::EffortChosen { effort }) => self.effort = Some(effort),
            Record::Fact(Fact::SandboxMode { mode }) => self.sandbox_mode = Some(mode),
            Record::Fact(Fact::SessionMode { mode }) => self.session_mode = Some(mode),
            Record::Fact(Fact::FileSeen { path, sha256 }) => {
                self.seen_files.insert(path, sha256);
            }
            Record::Fact(Fact::RuleAdded { rule }) => {
                if !self.rules.contains(&rule) {
                    self.rules.push(rule);
                }
            }
            Record::Fact(Fact::RuleRemoved { rule }) => self.rules.retain(|kept| *kept != rule),
            Record::Fact(_) => {}
        }
    }

    /// The events of the view no later record can change, in order, taken out of the fold:
    /// all but the last (a chunk the next may join) and those from a card that awaits its
    /// output from the next tool result.
    pub fn take_final(&mut self) -> Vec<SessionEvent> {
        let last = self.view.len().saturating_sub(1);
        let end = self.awaiting_result.map_or(last, |at| at.min(last));
        if let Some(at) = &mut self.awaiting_result {
            *at -= end;
        }
        self.view.drain(..end).collect()
    }

    /// Ends the fold: a log that ends in the middle of a turn (hotsh was killed) folds to a
    /// history a provider accepts, and a thread whose cut-off cards are closed. The view is
    /// what [`Folder::take_final`] has not taken.
    pub fn finish(mut self) -> Folded {
        self.close_cut_off();
        self.history.answer_cut_off();
        let noticed = self.noticed;
        let pending_notices = self
            .ended_notices
            .into_iter()
            .filter(|(task_id, _)| !noticed.contains(task_id))
            .map(|(_, notice)| notice)
            .collect();
        let cards = self.cards;
        let open_tasks = self
            .started
            .into_values()
            .map(|mut task| {
                task.card = cards.get(&task.call_id.0).cloned();
                task
            })
            .collect();
        Folded {
            meta: self.meta,
            history: self.history,
            view: self.view,
            next_call: self.next_call,
            pending_notices,
            open_tasks,
            title: self.title,
            model: self.model,
            effort: self.effort,
            sandbox_mode: self.sandbox_mode,
            session_mode: self.session_mode,
            seen_files: self.seen_files,
            rules: self.rules,
        }
    }

    /// Adds `event` to the view (see [`push_coalesced`]), noting subagents announced.
    fn show(&mut self, event: SessionEvent) {
        if let SessionEvent::Subagent { child, title, agent, .. } = &event {
            self.subagents.insert(child.clone(), (title.clone(), agent.clone()));
        }
        push_coalesced(&mut self.view, event);
    }

    /// Closes, as failed, the cards of a turn that was cut off before they were: a terminal
    /// says why where its exit status would be, any other card in its content.
    fn close_cut_off(&mut self) {
        let words = super::CUT_OFF_RESULT;
        for (call_id, card) in std::mem::take(&mut self.open_cards) {
            let (card, error) = match card {
                Card::Terminal(mut terminal) => {
                    let reason = Some(words.to_owned());
                    terminal.exit =
                        Some(super::TerminalExit { exit_code: None, signal: None, reason });
                    (Card::Terminal(terminal), None)
                }
                generic => (generic, Some(words.to_owned())),
            };
            // A subagent the call ran was cut off with it: its thread is shown ended.
            let ended = match &card {
                Card::Generic(generic) => generic.session.as_ref().and_then(|child| {
                    self.subagents.get(child).map(|(title, agent)| SessionEvent::Subagent {
                        call_id: ToolCallId(call_id.clone()),
                        child: child.clone(),
                        title: title.clone(),
                        agent: agent.clone(),
                        state: super::SubagentState::Idle { stop: "cancelled".to_owned() },
                    })
                }),
                Card::Terminal(_) => None,
            };
            if let Some(ended) = ended {
                self.show(ended);
            }
            self.show(SessionEvent::ToolCallFinished {
                call_id: ToolCallId(call_id),
                card,
                status: CallStatus::Failed,
                raw_output: crate::session::RawJson::null(),
                error,
                output_text: None,
                output_in_result: false,
            });
        }
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
    use crate::session::{GenericCard, Prompt, TaskEnd, ToolKind};

    fn meta() -> Record {
        Record::Fact(Fact::Session(Box::new(SessionMeta {
            session_id: "s".into(),
            cwd: "/w".into(),
            created_at: "t".into(),
            agent: "hotsh".into(),
            parent: None,
            forked_from: None,
        })))
    }

    fn prompt(text: &str) -> Record {
        Record::Fact(Fact::Prompt(Prompt {
            text: text.into(),
            blocks: vec![serde_json::json!({"type": "text", "text": text})],
            images: Vec::new(),
        }))
    }

    fn started(call_id: &str, tool: &str, card: Card) -> Record {
        Record::Event(SessionEvent::ToolCallStarted {
            call_id: ToolCallId(call_id.into()),
            tool: tool.into(),
            card,
            raw_input: crate::session::RawJson::null(),
            arguments: "{}".into(),
        })
    }

    fn result(call_id: &str, text: &str) -> Record {
        Record::Fact(Fact::ToolResult {
            call_id: call_id.into(),
            text: text.into(),
            is_error: false,
            after_output: None,
        })
    }

    #[test]
    fn history_view_tasks_and_notices_fold_from_the_records() {
        let card = Card::generic(GenericCard::new(
            "Background task bash-1: sleep 9",
            ToolKind::Execute,
            None,
        ));
        let records = vec![
            meta(),
            prompt("go"),
            Record::Event(SessionEvent::ToolCallFinished {
                call_id: ToolCallId("call-7".into()),
                card: card.clone(),
                status: CallStatus::Running,
                raw_output: crate::session::RawJson::null(),
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
            Record::Fact(Fact::TaskEnded(Box::new(TaskEnd {
                task_id: "bash-2".into(),
                state: "exited".into(),
                exit_code: Some(0),
                signal: None,
                with_agent: false,
                sandbox: None,
            }))),
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
        let call = |id: &str| crate::model::ModelToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: "{}".into(),
        };
        let card = Card::generic(GenericCard::new("bash", ToolKind::Execute, None));
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
            result("a", "one"),
            started("call-2", "bash", card),
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
    fn the_view_taken_part_by_part_is_the_whole_folds_view() {
        let text = |text: &str| Record::Event(SessionEvent::AgentText { text: text.into() });
        let call = ToolCallId("call-1".into());
        let sub = ToolCallId("call-2".into());
        let child = crate::session::SessionId("child".into());
        let terminal = Card::terminal(crate::session::TerminalCard {
            command: "seq 3".into(),
            description: None,
            cwd: "/w".into(),
            exit: None,
        });
        let subagent_card = Card::generic(GenericCard {
            session: Some(child.clone()),
            ..GenericCard::new("Task", ToolKind::Other, None)
        });
        let records = vec![
            meta(),
            prompt("go"),
            text("one "),
            text("two"),
            started("call-1", "bash", terminal.clone()),
            Record::Event(SessionEvent::ToolOutput { call_id: call.clone(), text: "1\n".into() }),
            Record::Event(SessionEvent::ToolOutput { call_id: call.clone(), text: "2\n".into() }),
            Record::Event(SessionEvent::ToolCallFinished {
                call_id: call.clone(),
                card: terminal,
                status: CallStatus::Completed,
                raw_output: crate::session::RawJson::null(),
                error: None,
                output_text: None,
                output_in_result: true,
            }),
            text("between"),
            result("m1", "1\n2\n"),
            started("call-2", "task", subagent_card),
            Record::Event(SessionEvent::Subagent {
                call_id: sub,
                child,
                title: "look".into(),
                agent: Some("explore".into()),
                state: crate::session::SubagentState::Running,
            }),
            text("cut "),
            text("off"),
        ];
        let whole = fold(records.clone()).expect("folds").view;
        // Parts taken after every record, and after every third, join to the same view.
        for every in [1, 3] {
            let mut records = records.clone().into_iter();
            let mut folder = Folder::new(records.next()).expect("a session record");
            let mut taken = Vec::new();
            for (at, record) in records.enumerate() {
                folder.push(record);
                if at % every == 0 {
                    taken.extend(folder.take_final());
                }
            }
            taken.extend(folder.finish().view);
            assert_eq!(format!("{taken:?}"), format!("{whole:?}"));
        }
        // The card took its output from the result after it; the cut-off subagent ended.
        assert!(whole.iter().any(|e| matches!(e, SessionEvent::ToolCallFinished { output_text: Some(t), .. } if t == "1\n2\n")));
        assert!(
            whole
                .iter()
                .any(|e| matches!(e, SessionEvent::AgentText { text } if text == "one two"))
        );
        assert!(matches!(
            &whole[whole.len() - 2],
            SessionEvent::Subagent { state: crate::session::SubagentState::Idle { stop }, .. } if stop == "cancelled"
        ));
    }

    #[test]
    fn a_log_must_start_with_its_session_record() {
        let error = fold(vec![Record::Event(SessionEvent::AgentText { text: "x".into() })])
            .expect_err("an error");
        assert_eq!(error, FoldError::NoSessionRecord);
    }
}
