//! The prompt loop: model → tool calls → tools → results back to the model → … until the
//! model answers without calling a tool, or the user cancels. A plain async function over its
//! ports: the model, the tool router, the session (whose sink is the client) and
//! [`TurnPorts`] for what the host adds (the system prompt's own parts, recordings).

use crate::model::{Model, ModelError, ModelEvent, ModelRequest, ModelToolCall, Usage};
use crate::session::{Fact, Session, SessionEvent, StopReason, TurnOutcome};
use crate::tools::ToolRouter;
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What a turn works with.
pub struct Turn {
    pub model: Arc<dyn Model>,
    pub tools: ToolRouter,
    pub ports: Arc<dyn TurnPorts>,
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn").field("model", &self.model).field("tools", &self.tools).finish()
    }
}

/// What the host adds to a turn.
pub trait TurnPorts: Send + Sync {
    /// The host's own parts of the system prompt, read for each turn (files change between
    /// turns): before the providers' sections, and after them (the project's instructions).
    fn system_parts(&self) -> BoxFuture<'_, Result<SystemParts, String>>;

    /// Whether the model already knows how background task `task` ended (it read its end, or
    /// killed it): its notice is dropped then.
    fn end_reported(&self, task: &str) -> bool;

    /// A request is about to go to the model.
    fn requesting<'a>(&'a self, request: &'a ModelRequest) -> BoxFuture<'a, ()> {
        let _ = request;
        Box::pin(async {})
    }

    /// Whether [`TurnPorts::answered`] wants what the model streamed (kept only then).
    fn keeps_answers(&self) -> bool {
        false
    }

    /// What the model streamed for `request`, and how the answer ended.
    fn answered(&self, request: &ModelRequest, streamed: &[ModelEvent], ending: Ending) {
        let _ = (request, streamed, ending);
    }
}

/// The host's parts of a system prompt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SystemParts {
    /// Before the providers' sections (who the agent is, its environment).
    pub before: Vec<String>,
    /// After them (the project's instructions).
    pub after: Vec<String>,
}

/// How a model request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Complete,
    /// The model failed with this message.
    Failed(String),
    /// The user cancelled the turn while the model was answering.
    Cancelled,
}

/// A turn that could not go on: the model failed. The message is for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TurnFailed {
    pub message: String,
    /// The model wants a key that is missing or was refused: the client may ask the user to
    /// authenticate.
    pub needs_key: bool,
}

impl TurnFailed {
    pub fn new(message: String) -> Self {
        Self { message, needs_key: false }
    }
}

/// Runs a turn so that a panic in it (a bug) still ends the turn with an answer: the session
/// never stays busy.
pub async fn guarded(
    turn: impl std::future::Future<Output = Result<StopReason, TurnFailed>>,
) -> Result<StopReason, TurnFailed> {
    use futures::FutureExt as _;
    match std::panic::AssertUnwindSafe(turn).catch_unwind().await {
        Ok(outcome) => outcome,
        Err(payload) => {
            let reason = crate::sync::panic_reason(payload.as_ref());
            tracing::error!(%reason, "the turn panicked");
            Err(TurnFailed::new(format!(
                "hotsh failed while running this turn (a bug; its log has the details): {reason}"
            )))
        }
    }
}

/// Answers the prompt [`Session::begin_turn`] logged: runs the turn (guarded), records how
/// it ended (which frees the session for the next prompt), and flushes the log. A log that
/// cannot be written fails the turn, so the user is told the session is not saved.
pub async fn answer(
    turn: &Turn,
    session: &Arc<Session>,
    cancel: CancellationToken,
) -> Result<StopReason, TurnFailed> {
    let outcome = guarded(run(turn, session, &cancel)).await;
    let (recorded, message) = match &outcome {
        Ok(StopReason::EndTurn) => (TurnOutcome::EndTurn, None),
        Ok(StopReason::Cancelled) => (TurnOutcome::Cancelled, None),
        Err(failed) => (TurnOutcome::Failed, Some(failed.message.clone())),
    };
    session.end_turn(Fact::TurnEnded { outcome: recorded, message }).await;
    session.flush().await.map_err(TurnFailed::new)?;
    outcome
}

/// Runs one turn of `session`.
async fn run(
    turn: &Turn,
    session: &Arc<Session>,
    cancel: &CancellationToken,
) -> Result<StopReason, TurnFailed> {
    // What the user asked (logged when the turn began) goes to disk while the tools get
    // ready and the host's parts of the prompt are read: all before anything runs.
    let prepared = async {
        let ((), (), system) =
            tokio::join!(session.flush_or_warn(), turn.tools.prepare(), turn.ports.system_parts());
        system
    };
    let system = tokio::select! {
        system = prepared => system
            .map_err(|e| TurnFailed::new(format!("cannot read the project's instructions: {e}")))?,
        () = cancel.cancelled() => return Ok(StopReason::Cancelled),
    };
    loop {
        if cancel.is_cancelled() {
            return Ok(StopReason::Cancelled);
        }
        // A task the model killed (or read after its end) needs no notice saying it ended.
        session.deliver_notices(|task| turn.ports.end_reported(task)).await;
        let request = ModelRequest {
            system: system_prompt(&system, turn),
            messages: session.messages(),
            tools: turn.tools.offered(session.planning()).await,
        };
        turn.ports.requesting(&request).await;
        let answer = match ask_model(turn, session, &request, cancel).await {
            Answer::Complete(answer) => answer,
            // The prompt is answered with the error; the session keeps serving.
            Answer::Failed(error) => {
                let needs_key = matches!(error, ModelError::NotConfigured | ModelError::Auth(_));
                return Err(TurnFailed { message: error.to_string(), needs_key });
            }
            Answer::Cancelled(partial) => {
                keep_what_was_said(session, partial).await;
                return Ok(StopReason::Cancelled);
            }
        };
        let calls = answer.calls;
        session
            .record(Fact::AssistantMessage {
                text: answer.text,
                reasoning: (!answer.reasoning.is_empty()).then_some(answer.reasoning),
                tool_calls: calls.clone(),
                usage: answer.usage,
                finish_reason: answer.finish_reason,
            })
            .await;
        if calls.is_empty() {
            return Ok(StopReason::EndTurn);
        }
        for call in &calls {
            if cancel.is_cancelled() {
                session
                    .record(Fact::ToolResult {
                        call_id: call.id.clone(),
                        text: "[not run: the user cancelled the turn]".to_owned(),
                        is_error: true,
                    })
                    .await;
                continue;
            }
            let result = turn.tools.call(session, call, cancel).await;
            session
                .record(Fact::ToolResult {
                    call_id: call.id.clone(),
                    text: result.text,
                    is_error: result.is_error,
                })
                .await;
        }
    }
}

/// The system prompt: the host's first parts, the providers' sections by order, then the
/// host's last parts.
fn system_prompt(system: &SystemParts, turn: &Turn) -> String {
    let mut parts = system.before.clone();
    parts.extend(turn.tools.prompt_sections().into_iter().map(|s| s.text));
    parts.extend(system.after.iter().cloned());
    parts.join("\n\n")
}

/// What a model answered.
#[derive(Default)]
struct Completed {
    text: String,
    reasoning: String,
    calls: Vec<ModelToolCall>,
    usage: Option<Usage>,
    finish_reason: Option<String>,
}

/// How a model request ended.
enum Answer {
    Complete(Completed),
    /// The model failed, for this reason.
    Failed(ModelError),
    /// The user cancelled while it answered; what it had streamed so far.
    Cancelled(Completed),
}

/// What the user saw the model say before they cancelled stays in its history (and the log),
/// marked as cut off there, so its next answer knows what it had said. Tool calls it was
/// still making are dropped: none of them ran.
async fn keep_what_was_said(session: &Session, partial: Completed) {
    if partial.text.is_empty() {
        return;
    }
    session
        .record(Fact::AssistantMessage {
            text: partial.text,
            reasoning: (!partial.reasoning.is_empty()).then_some(partial.reasoning),
            tool_calls: Vec::new(),
            usage: partial.usage,
            finish_reason: Some("cancelled".to_owned()),
        })
        .await;
    session
        .record(Fact::Notice {
            text: "[the user cancelled the turn while you were answering: your answer above was cut off there]".to_owned(),
            task_id: None,
        })
        .await;
}

/// Asks the model, forwarding its text and reasoning to the client as they stream.
async fn ask_model(
    turn: &Turn,
    session: &Session,
    request: &ModelRequest,
    cancel: &CancellationToken,
) -> Answer {
    let (events, mut received) = mpsc::unbounded_channel();
    let respond = turn.model.respond(&session.id.0, request, events);
    tokio::pin!(respond);
    let mut answer = Completed::default();
    let mut outcome = None;
    let keep = turn.ports.keeps_answers();
    let mut streamed = Vec::new();
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => {
                turn.ports.answered(request, &streamed, Ending::Cancelled);
                return Answer::Cancelled(answer);
            }
            event = received.recv() => match event.inspect(|e| if keep { streamed.push(e.clone()) }) {
                Some(ModelEvent::Text(chunk)) => {
                    answer.text.push_str(&chunk);
                    session.emit(SessionEvent::AgentText { text: chunk }).await;
                }
                Some(ModelEvent::Reasoning(chunk)) => {
                    answer.reasoning.push_str(&chunk);
                    session.emit(SessionEvent::AgentThought { text: chunk }).await;
                }
                Some(ModelEvent::ToolCall(call)) => answer.calls.push(call),
                Some(ModelEvent::Usage(usage)) => answer.usage = Some(usage),
                Some(ModelEvent::Finished(reason)) => answer.finish_reason = Some(reason),
                // The sender lives inside `respond`: closed means the answer is complete.
                None => break,
            },
            result = &mut respond, if outcome.is_none() => outcome = Some(result),
        }
    }
    let result = match outcome {
        Some(result) => result,
        None => respond.await,
    };
    let ending = match &result {
        Ok(()) => Ending::Complete,
        Err(error) => Ending::Failed(error.to_string()),
    };
    turn.ports.answered(request, &streamed, ending);
    match result {
        Ok(()) => Answer::Complete(answer),
        Err(error) => {
            tracing::warn!(%error, "model request failed");
            Answer::Failed(error)
        }
    }
}
