//! The cards background tasks leave open, closed with the task's outcome when it ends.
//!
//! A task's start call draws its card as running. When the task ends, the host records the
//! end in the owning session's log, queues the notice for its model, and then closes the card:
//! a client that sees the card closed can rely on the model hearing of it next. The card may
//! be drawn after the task ended already (a task that exits at once): both orders meet under
//! one lock.

use crate::executor::{Executor, TaskEnded, TaskState};
use crate::session::{
    CallStatus, Card, Fact, GenericCard, Session, SessionEvent, TaskEnd, TaskSandbox, ToolCallId,
    ToolKind,
};
use crate::sync::lock;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};

#[derive(Debug)]
pub(crate) struct TaskCards {
    executor: Arc<Executor>,
    /// Open cards by task id, and the tasks whose end was handled. The lock also orders "card
    /// drawn" against "task ended".
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    open: HashMap<String, OpenCard>,
    ended: HashSet<String>,
}

/// The card a background task's start call left open.
#[derive(Debug)]
struct OpenCard {
    session: Weak<Session>,
    call_id: ToolCallId,
    title: String,
}

impl TaskCards {
    pub(crate) fn new(executor: Arc<Executor>) -> Self {
        Self { executor, state: Mutex::default() }
    }

    /// A call that started `task_id` drew its card as running: close the card when the task
    /// ends, or now if it already has.
    pub(crate) async fn keep_open(
        &self,
        task_id: &str,
        session: &Arc<Session>,
        call_id: &ToolCallId,
        title: &str,
    ) {
        let ended_already = {
            let mut state = lock(&self.state);
            if state.ended.contains(task_id) {
                true
            } else {
                let card = OpenCard {
                    session: Arc::downgrade(session),
                    call_id: call_id.clone(),
                    title: title.to_owned(),
                };
                state.open.insert(task_id.to_owned(), card);
                false
            }
        };
        if ended_already && let Some(ended) = self.executor.ended(task_id) {
            close(session, call_id, title, &ended, &task_end_of(&ended)).await;
        }
    }

    /// A background task ended: record it in its session (`None`: the session is gone), tell
    /// the session's model (next request), and close the task's card.
    pub(crate) async fn task_ended(&self, ended: TaskEnded, session: Option<Arc<Session>>) {
        let end = task_end_of(&ended);
        // The notice first: once the client sees the card closed, the next model request
        // already carries it.
        match &session {
            Some(session) => {
                session.record(Fact::TaskEnded(end.clone())).await;
                if self.executor.end_reported(&ended.id.0) {
                    tracing::debug!(task = %ended.id, "the model saw the task end; no notice");
                    session.record(Fact::TaskReported { task_id: ended.id.0.clone() }).await;
                } else {
                    session.add_notice(crate::session::task_notice(
                        &ended.id.0,
                        &ended.command,
                        &end,
                        &ended.output_path,
                    ));
                }
            }
            None => {
                tracing::debug!(task = %ended.id, "task ended for a session that is gone; notice dropped")
            }
        }
        let card = {
            let mut state = lock(&self.state);
            state.ended.insert(ended.id.0.clone());
            state.open.remove(&ended.id.0)
        };
        if let Some(card) = card
            && let Some(session) = card.session.upgrade()
        {
            close(&session, &card.call_id, &card.title, &ended, &end).await;
        }
    }
}

/// Closes a task's card with its outcome (`end`: the task's end as logged, judged once).
async fn close(
    session: &Session,
    call_id: &ToolCallId,
    title: &str,
    ended: &TaskEnded,
    end: &TaskEnd,
) {
    let failed = ended.status.exit_code != Some(0);
    let marker = end.sandbox.as_ref().and_then(TaskSandbox::marker);
    let content = format!(
        "{}{} {}; full output: {}",
        marker.map(|m| m + " ").unwrap_or_default(),
        ended.id,
        crate::session::describe_task_end(end),
        ended.output_path.display()
    );
    session
        .emit(SessionEvent::ToolCallFinished {
            call_id: call_id.clone(),
            card: Card::Generic(GenericCard::new(title, ToolKind::Execute, Some(content))),
            status: if failed { CallStatus::Failed } else { CallStatus::Completed },
            raw_output: serde_json::json!({
                "task_id": ended.id.0,
                "state": end.state,
                "exit_code": ended.status.exit_code,
                "signal": ended.status.signal,
                "output_path": ended.output_path,
                "sandbox": end.sandbox,
            }),
            error: None,
            output_text: None,
            output_in_result: false,
        })
        .await;
    if let Err(failure) = session.flush().await {
        tracing::warn!(session = %session.id, "{failure}");
    }
}

/// A task's end as the log records it, with its sandbox facts: the mode, and whether its
/// failure looks like a denial (judged from the policy and the end of its output, as a
/// foreground command's is).
fn task_end_of(ended: &TaskEnded) -> TaskEnd {
    let confinement = &ended.confinement;
    let denied = confinement.policy.as_ref().and_then(|policy| {
        crate::sandbox::classify::classify(
            policy,
            &crate::sandbox::classify::Evidence {
                exit_code: ended.status.exit_code,
                signal: ended.status.signal.as_deref(),
                output: [&ended.tail, ""],
                workdir: &confinement.workdir,
                not_run: ended.not_run,
            },
        )
    });
    TaskEnd {
        task_id: ended.id.0.clone(),
        state: match ended.status.state {
            TaskState::Running => "running",
            TaskState::Exited => "exited",
            TaskState::Killed => "killed",
        }
        .to_owned(),
        exit_code: ended.status.exit_code,
        signal: ended.status.signal.clone(),
        with_agent: false,
        sandbox: Some(TaskSandbox {
            mode: confinement.mode.clone(),
            denied: denied.map(|d| d.as_str().to_owned()),
        }),
    }
}
