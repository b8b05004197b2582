//! What a session does with its background tasks and its own tool providers, each in one
//! step of its order: the card a task's start call leaves open (closed when the task ends,
//! whichever of the two comes first), the task's end (logged, told to the model, its card
//! closed), tasks of an agent that went away, plan mode's word on tasks that keep writing,
//! and the session's close (its tasks killed, its providers closed, its log released).

use super::{
    CallStatus, Card, Fact, GenericCard, PendingNotice, Record, Session, SessionEvent, TaskEnd,
    TaskSandbox, ToolCallId, ToolKind, fold::OpenTask, task_notice,
};
use crate::executor::{Executor, TaskEnded};
use crate::sandbox::Mode;
use crate::sync::lock;

/// The card a background task's start call left open.
#[derive(Debug, Clone)]
pub(super) struct OpenCard {
    call_id: ToolCallId,
    title: String,
}

/// The session's background tasks as its log tells them: those whose start is logged and
/// whose end is not yet, the ends that came before the start was logged (a task that exits
/// at once ends before the call that started it returns), the open cards, and the ends that
/// came before their card was drawn.
#[derive(Debug, Default)]
pub(super) struct TaskCards {
    started: std::collections::HashSet<String>,
    ended_unstarted: std::collections::HashMap<String, (TaskEnded, bool)>,
    open: std::collections::HashMap<String, OpenCard>,
    ended_first: std::collections::HashMap<String, TaskEnded>,
}

/// A task's end as the log records it, with its sandbox facts.
pub fn task_end_of(ended: &TaskEnded) -> TaskEnd {
    TaskEnd {
        task_id: ended.id.0.clone(),
        state: ended.status.state.as_str().to_owned(),
        exit_code: ended.status.exit_code,
        signal: ended.status.signal.clone(),
        with_agent: false,
        sandbox: Some(TaskSandbox { mode: ended.mode.clone(), denied: ended.denied.clone() }),
    }
}

impl Session {
    /// A call that started `task_id` drew its card as running: the card is closed when the
    /// task ends, or now if it has already.
    pub async fn keep_task_card(&self, task_id: &str, call_id: &ToolCallId, title: &str) {
        let _order = self.emitting.lock().await;
        let ended = {
            let mut state = lock(&self.state);
            let ended = state.task_cards.ended_first.remove(task_id);
            if ended.is_none() {
                let card = OpenCard { call_id: call_id.clone(), title: title.to_owned() };
                state.task_cards.open.insert(task_id.to_owned(), card);
            }
            ended
        };
        if let Some(ended) = ended {
            self.emit_in_order(close_event(call_id, title, &ended)).await;
        }
        drop(_order);
        self.flush_or_warn().await;
    }

    /// A call started a background task: its start is logged (`fact` is its `task_started`
    /// record), and its end too if it came already, so the log never has a task end before
    /// it began.
    pub async fn task_started(&self, fact: Fact) {
        let Fact::TaskStarted { task_id, .. } = &fact else {
            return self.record_applied(fact).await;
        };
        let task_id = task_id.clone();
        let order = self.emitting.lock().await;
        self.append(Record::Fact(fact)).await;
        let early = {
            let mut state = lock(&self.state);
            let early = state.task_cards.ended_unstarted.remove(&task_id);
            if early.is_none() {
                state.task_cards.started.insert(task_id);
            }
            early
        };
        if let Some((ended, reported)) = early {
            self.end_task(ended, reported).await;
        }
        drop(order);
    }

    /// A background task of this session ended: its end is logged, the model is told with
    /// its next request (unless `reported`: a tool's answer told it already), and then its
    /// card is closed, so a client that sees the card closed can rely on the model hearing
    /// of it next. All in one step of the session's order, once its start is logged.
    pub async fn task_ended(&self, ended: TaskEnded, reported: bool) {
        let order = self.emitting.lock().await;
        let started = {
            let mut state = lock(&self.state);
            let started = state.task_cards.started.remove(&ended.id.0);
            if !started {
                let id = ended.id.0.clone();
                state.task_cards.ended_unstarted.insert(id, (ended.clone(), reported));
            }
            started
        };
        if started {
            self.end_task(ended, reported).await;
        }
        drop(order);
        self.flush_or_warn().await;
    }

    /// Logs the ends still waiting for their task's start (the caller holds the order).
    pub(super) async fn end_unstarted_tasks(&self) {
        let waiting: Vec<(TaskEnded, bool)> =
            lock(&self.state).task_cards.ended_unstarted.drain().map(|(_, end)| end).collect();
        for (ended, reported) in waiting {
            self.end_task(ended, reported).await;
        }
    }

    /// [`Session::task_ended`] for a task whose start is logged, the caller holding the order.
    async fn end_task(&self, ended: TaskEnded, reported: bool) {
        let end = task_end_of(&ended);
        self.append(Record::Fact(Fact::TaskEnded(Box::new(end.clone())))).await;
        if reported {
            tracing::debug!(task = %ended.id, "the model saw the task end; no notice");
            let task_id = ended.id.0.clone();
            self.append(Record::Fact(Fact::TaskReported { task_id })).await;
        } else {
            let notice = task_notice(&ended.id.0, &ended.command, &end, &ended.output_path);
            lock(&self.state).notices.push(notice);
        }
        let card = {
            let mut state = lock(&self.state);
            let card = state.task_cards.open.remove(&ended.id.0);
            if card.is_none() {
                state.task_cards.ended_first.insert(ended.id.0.clone(), ended.clone());
            }
            card
        };
        if let Some(card) = card {
            self.emit_in_order(close_event(&card.call_id, &card.title, &ended)).await;
        }
    }

    /// Background tasks this session's log shows running belonged to an agent that is gone
    /// (this one loads it anew): each is logged as ended with it, its card is closed, and the
    /// model is told with its next request.
    pub async fn settle_tasks_of_gone_agent(&self, tasks: &[OpenTask]) {
        for task in tasks {
            let end = TaskEnd {
                task_id: task.task_id.clone(),
                state: "killed".to_owned(),
                exit_code: None,
                signal: None,
                with_agent: true,
                sandbox: None,
            };
            let order = self.emitting.lock().await;
            self.append(Record::Fact(Fact::TaskEnded(Box::new(end.clone())))).await;
            let title = task.card.as_ref().map_or_else(
                || format!("Background task {}: {}", task.task_id, task.command),
                |card| card.title().to_owned(),
            );
            self.emit_in_order(SessionEvent::ToolCallFinished {
                call_id: task.call_id.clone(),
                card: Card::generic(GenericCard::new(
                    title,
                    ToolKind::Execute,
                    Some(format!("{} ended when the agent that ran it went away.", task.task_id)),
                )),
                status: CallStatus::Failed,
                raw_output: serde_json::json!({
                    "task_id": task.task_id,
                    "state": "killed",
                    "exit_code": null,
                    "signal": null,
                    "ended_with_agent": true,
                })
                .into(),
                error: None,
                output_text: None,
                output_in_result: false,
            })
            .await;
            let notice = task_notice(&task.task_id, &task.command, &end, &task.output_path);
            lock(&self.state).notices.push(notice);
            drop(order);
        }
        self.flush_or_warn().await;
    }

    /// The session's commands were narrowed (plan mode, or a narrower sandbox mode): the
    /// commands that start from now on run under `narrowing`'s mode, and background tasks
    /// already running keep the access they started with (a running process's confinement
    /// cannot be narrowed). Says so, naming each with its id, to the user (a note in the
    /// thread) and to the model (a notice), when any of the session's running tasks runs
    /// under a wider mode.
    pub async fn tell_of_tasks_that_keep_writing(
        &self,
        executor: &dyn Executor,
        narrowing: Narrowing,
    ) {
        let now = narrowing.mode();
        let wider: Vec<_> = executor
            .running_owned_by(&self.id.0)
            .into_iter()
            .filter(|task| Mode::parse(&task.mode).is_none_or(|mode| mode > now))
            .collect();
        if wider.is_empty() {
            return;
        }
        let count = match wider.len() {
            1 => "1 background task keeps".to_owned(),
            n => format!("{n} background tasks keep"),
        };
        let list: Vec<String> = wider
            .iter()
            .map(|task| {
                let first = task.command.lines().next().unwrap_or_default();
                let first: String = first.chars().take(120).collect();
                format!("- {} ({}): {first}", task.id, task.mode)
            })
            .collect();
        let (title, detail) = match narrowing {
            Narrowing::PlanMode => (
                format!("Plan mode: {count} its write access"),
                "Plan mode makes new commands read-only. Background tasks started before it keep the access they started with until they end or are stopped:".to_owned(),
            ),
            Narrowing::SandboxMode(mode) => (
                format!("Sandbox {mode}: {count} its wider access"),
                format!(
                    "New commands run under {mode}. Background tasks started before keep the access they started with until they end or are stopped (by their id):"
                ),
            ),
        };
        let detail = format!("{detail}\n\n{}", list.join("\n"));
        self.emit(SessionEvent::HostNote {
            call_id: self.next_call_id(),
            title,
            detail: detail.clone(),
        })
        .await;
        self.add_notice(PendingNotice { text: detail, task_id: None });
    }

    /// Closes the session: its turn is cancelled, its running tasks killed (through
    /// `executor`), its undelivered notices dropped, its log flushed and released. (Its own
    /// tool providers are the host's to close.)
    pub async fn close(&self, executor: &dyn Executor) {
        self.cancel();
        executor.kill_owned_by(&self.id.0).await;
        self.drop_notices();
        self.close_log().await;
    }
}

/// What narrowed a session's commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Narrowing {
    /// Plan mode: read-only commands at most.
    PlanMode,
    /// The session's sandbox mode was switched to this one.
    SandboxMode(Mode),
}

impl Narrowing {
    /// The widest mode a new command now runs under.
    fn mode(self) -> Mode {
        match self {
            Narrowing::PlanMode => Mode::ReadOnly,
            Narrowing::SandboxMode(mode) => mode,
        }
    }
}

/// The update that closes a task's card with its outcome.
fn close_event(call_id: &ToolCallId, title: &str, ended: &TaskEnded) -> SessionEvent {
    let end = task_end_of(ended);
    let failed = ended.status.exit_code != Some(0);
    let marker = end.sandbox.as_ref().and_then(TaskSandbox::marker);
    let content = format!(
        "{}{} {}; full output: {}",
        marker.map(|m| m + " ").unwrap_or_default(),
        ended.id,
        super::describe_task_end(&end),
        ended.output_path.display()
    );
    SessionEvent::ToolCallFinished {
        call_id: call_id.clone(),
        card: Card::generic(GenericCard::new(title, ToolKind::Execute, Some(content))),
        status: if failed { CallStatus::Failed } else { CallStatus::Completed },
        raw_output: serde_json::json!({
            "task_id": ended.id.0,
            "state": end.state,
            "exit_code": ended.status.exit_code,
            "signal": ended.status.signal,
            "output_path": ended.output_path,
            "sandbox": end.sandbox,
        })
        .into(),
        error: None,
        output_text: None,
        output_in_result: false,
    }
}
