//! The prompt loop: model → tool calls → tools → results back to the model → … until the
//! model answers without calling a tool, or the user cancels. A plain async function over its
//! ports: the model, the tool router, the session (whose sink is the client) and
//! [`TurnPorts`] for what the host adds (the system prompt's own parts, recordings).

use crate::context::{self, Compaction, Limits, Trigger};
use crate::hooks::{Event, Hooks, Point};
use crate::model::{Message, Model, ModelError, ModelEvent, ModelRequest, ModelToolCall, Usage};
use crate::session::{
    CompactionEnd, Fact, Session, SessionEvent, StopReason, ToolCallId, TurnOutcome,
};
use crate::tools::{Called, ToolRouter};
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What a turn works with.
pub struct Turn {
    pub model: Arc<dyn Model>,
    pub tools: ToolRouter,
    pub ports: Arc<dyn TurnPorts>,
    /// The model's window, when to compact, how many requests a turn may make.
    pub limits: Limits,
    /// The reasoning effort its requests carry.
    pub effort: Option<String>,
    /// What the model's tokens cost, when its profile says.
    pub price: Option<context::Price>,
    /// The user's command hooks (the router runs the tool calls' own).
    pub hooks: Arc<dyn Hooks>,
}

/// What a turn does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// Answers the prompt that began it.
    Prompt,
    /// Compacts the history now (`/compact`), the summary focused on this.
    Compact { focus: Option<String> },
    /// Shows the user this text (what a command such as `/permissions` answers); the model
    /// is not asked.
    Say { text: String },
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
    fn system_parts(&self) -> BoxFuture<'_, Result<SystemParts, std::io::Error>>;

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
    work: Work,
    cancel: CancellationToken,
) -> Result<StopReason, TurnFailed> {
    session.on_questions(notifications(turn, session));
    let outcome = match work {
        Work::Prompt => guarded(run(turn, session, &cancel)).await,
        Work::Compact { focus } => guarded(compact_now(turn, session, focus, &cancel)).await,
        Work::Say { text } => {
            session.emit(SessionEvent::AgentText { text }).await;
            Ok(StopReason::EndTurn)
        }
    };
    let (recorded, message) = match &outcome {
        Ok(StopReason::EndTurn) => (TurnOutcome::EndTurn, None),
        Ok(StopReason::Cancelled) => (TurnOutcome::Cancelled, None),
        Ok(StopReason::MaxTurnRequests) => (TurnOutcome::MaxTurnRequests, None),
        Err(failed) => (TurnOutcome::Failed, Some(failed.message.clone())),
    };
    session.on_questions(None);
    session.end_turn(Fact::TurnEnded { outcome: recorded, message }).await;
    session.flush().await.map_err(|failed| TurnFailed::new(failed.to_string()))?;
    outcome
}

/// What runs the turn's `Notification` hooks (matcher on `permission_prompt`) for each
/// question the user is asked during it, beside the question; `None` when there are none.
fn notifications(turn: &Turn, session: &Arc<Session>) -> Option<crate::session::Asking> {
    if !turn.hooks.wants(Event::Notification) {
        return None;
    }
    let hooks = Arc::clone(&turn.hooks);
    // Weak: the session holds this, and must not hold itself.
    let session = Arc::downgrade(session);
    Some(Arc::new(move |message: String| {
        let (hooks, Some(session)) = (Arc::clone(&hooks), session.upgrade()) else { return };
        tokio::spawn(async move {
            let fields = serde_json::json!({
                "message": message,
                "notification_type": "permission_prompt",
            });
            let point = Point::new(Event::Notification, "permission_prompt", fields);
            hooks.run(&session, point, &CancellationToken::new()).await;
        });
    }))
}

/// Gets the turn's parts ready: what the user asked (logged when the turn began) goes to disk
/// while the tools get ready and the host's parts of the prompt are read. `None`: cancelled.
async fn prepare(
    turn: &Turn,
    session: &Session,
    cancel: &CancellationToken,
) -> Result<Option<SystemParts>, TurnFailed> {
    let prepared = async {
        let ((), (), system) =
            tokio::join!(session.flush_or_warn(), turn.tools.prepare(), turn.ports.system_parts());
        system
    };
    tokio::select! {
        system = prepared => system
            .map(Some)
            .map_err(|e| TurnFailed::new(format!("cannot read the project's instructions: {e}"))),
        () = cancel.cancelled() => Ok(None),
    }
}

/// The next request: the system prompt, the history, the tools offered now.
async fn next_request(turn: &Turn, session: &Session, system: &SystemParts) -> ModelRequest {
    ModelRequest {
        system: system_prompt(system, turn),
        messages: session.request_messages(turn.limits.keep_tool_output),
        tools: turn.tools.offered(session.planning()).await,
        effort: turn.effort.clone(),
    }
}

/// Runs one turn of `session`.
async fn run(
    turn: &Turn,
    session: &Arc<Session>,
    cancel: &CancellationToken,
) -> Result<StopReason, TurnFailed> {
    let Some(system) = prepare(turn, session, cancel).await? else {
        return Ok(StopReason::Cancelled);
    };
    if let Some(stop) = before_prompt(turn, session, cancel).await {
        return Ok(stop);
    }
    let mut requests = 0;
    // A Stop hook kept the turn going (what the next Stop hook is told).
    let mut kept_going = false;
    // The provider said the context was too long, and the history was compacted for it: a
    // second refusal of the same request ends the turn.
    let mut overflowed = false;
    loop {
        if cancel.is_cancelled() {
            return Ok(StopReason::Cancelled);
        }
        if requests >= turn.limits.max_requests {
            return Ok(StopReason::MaxTurnRequests);
        }
        // A task the model killed (or read after its end) needs no notice saying it ended.
        session.deliver_notices(|task| turn.ports.end_reported(task)).await;
        let mut request = next_request(turn, session, &system).await;
        let fixed = context::fixed_tokens(&request);
        if !overflowed
            && session.compactable()
            && session.context_estimate(fixed, turn.limits.keep_tool_output)
                > turn.limits.threshold()
        {
            match compact(turn, session, &request, Trigger::Auto, None, cancel).await {
                Compacted::Done => {
                    request.messages = session.request_messages(turn.limits.keep_tool_output);
                }
                Compacted::Cancelled => return Ok(StopReason::Cancelled),
                // Shown on its card; the request goes as it is (it may still fit).
                Compacted::Failed(_) => {}
            }
        }
        requests += 1;
        turn.ports.requesting(&request).await;
        let answer = match ask_model(turn, session, &request, cancel, Forward::Answer).await {
            Answer::Complete(answer) => answer,
            Answer::Failed(ModelError::ContextTooLong(detail)) if !overflowed => {
                overflowed = true;
                match compact(turn, session, &request, Trigger::Overflow, None, cancel).await {
                    Compacted::Done => continue,
                    Compacted::Cancelled => return Ok(StopReason::Cancelled),
                    Compacted::Failed(why) => {
                        return Err(TurnFailed::new(format!(
                            "{detail}; compacting the conversation failed too: {why}"
                        )));
                    }
                }
            }
            Answer::Failed(ModelError::ContextTooLong(detail)) => {
                return Err(TurnFailed::new(format!(
                    "{detail}. Even compacted, the conversation does not fit: the context window \
                     ({} tokens) cannot hold the system prompt, the tools and the latest \
                     messages (about {} tokens). Use a model with a larger window, or a shorter \
                     prompt.",
                    turn.limits.window,
                    session.context_estimate(fixed, turn.limits.keep_tool_output)
                )));
            }
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
        overflowed = false;
        let calls = answer.calls;
        let usage = answer.usage.filter(|usage| match usage.implausible(turn.limits.window) {
            Some(why) => {
                tracing::warn!(session = %session.id, %why, "ignored the usage the provider reported");
                false
            }
            None => true,
        });
        session
            .record(Fact::AssistantMessage {
                text: answer.text,
                reasoning: (!answer.reasoning.is_empty()).then_some(answer.reasoning),
                tool_calls: calls.clone(),
                usage: usage.map(Box::new),
                finish_reason: answer.finish_reason,
            })
            .await;
        let estimate = session.context_estimate(fixed, turn.limits.keep_tool_output);
        let mut shown = context::context_use(usage.as_ref(), estimate, turn.limits.window);
        shown.cost = spent(turn, session, usage.as_ref());
        session.emit(SessionEvent::Usage(shown)).await;
        if calls.is_empty() {
            if let Some(reason) = stop_blocked(turn, session, kept_going, cancel).await {
                kept_going = true;
                let text = format!("[a Stop hook did not let the turn end yet: {reason}]");
                session.record(Fact::Notice { text, task_id: None }).await;
                continue;
            }
            return Ok(StopReason::EndTurn);
        }
        let mut halted = None;
        for group in call_groups(&calls, &request.tools) {
            let not_run = if cancel.is_cancelled() {
                Some("[not run: the user cancelled the turn]".to_owned())
            } else {
                halted.as_ref().map(|why| format!("[not run: a hook ended the turn: {why}]"))
            };
            if let Some(text) = not_run {
                for call in group {
                    let (call_id, text) = (call.id.clone(), text.clone());
                    let fact =
                        Fact::ToolResult { call_id, text, is_error: true, after_output: None };
                    session.record(fact).await;
                }
                continue;
            }
            // The calls of a group run together (one call, or a run of concurrent ones); their
            // results are logged in the model's order.
            let called = futures::future::join_all(
                group.iter().map(|call| turn.tools.call(session, call, &request.tools, cancel)),
            )
            .await;
            for (call, Called { result, input, halt }) in group.iter().zip(called) {
                halted = halted.or(halt);
                // As Claude Code: after a call that ran and succeeded (not one refused or
                // failed).
                let hooked = (turn.hooks.wants(Event::PostToolUse) && !result.is_error)
                    .then(|| result.clone());
                session
                    .record(Fact::ToolResult {
                        call_id: call.id.clone(),
                        text: result.text,
                        is_error: result.is_error,
                        after_output: None,
                    })
                    .await;
                if let Some(result) = hooked {
                    let halt = post_tool_use(turn, session, call, &input, &result, cancel).await;
                    halted = halted.or(halt);
                }
            }
        }
        if let Some(why) = halted {
            say_halted(session, &why).await;
            return Ok(StopReason::EndTurn);
        }
    }
}

/// An answer's calls in the groups that run together: each call alone, except that calls of
/// a concurrent tool ([`ToolEffects::concurrent`](crate::model::ToolEffects)) one after
/// another form one group.
fn call_groups<'a>(
    calls: &'a [ModelToolCall],
    offered: &[crate::model::ToolDefinition],
) -> Vec<&'a [ModelToolCall]> {
    let concurrent =
        |call: &ModelToolCall| offered.iter().any(|t| t.name == call.name && t.effects.concurrent);
    let mut groups = Vec::new();
    let mut at = 0;
    while at < calls.len() {
        let together = match concurrent(&calls[at]) {
            true => calls[at..].iter().take_while(|call| concurrent(call)).count(),
            false => 1,
        };
        groups.push(&calls[at..at + together]);
        at += together;
    }
    groups
}

/// The hooks before the model sees a prompt: `SessionStart` on the session's first prompt
/// since it was opened, then `UserPromptSubmit`. `Some`: the turn ends here (a hook blocked
/// the prompt).
async fn before_prompt(
    turn: &Turn,
    session: &Arc<Session>,
    cancel: &CancellationToken,
) -> Option<StopReason> {
    let hooks = &turn.hooks;
    hooks.settle(session, cancel).await;
    if let Some(source) = hooks.starting() {
        session_start(turn, session, source, cancel).await;
    }
    if !hooks.wants(Event::UserPromptSubmit) {
        return None;
    }
    let prompt = session
        .messages()
        .iter()
        .rev()
        .find_map(|message| match message.as_ref() {
            Message::User { text, .. } => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let point = Point::new(Event::UserPromptSubmit, "", serde_json::json!({ "prompt": prompt }));
    let verdict = hooks.run(session, point, cancel).await;
    if let Some(reason) = verdict.block.or(verdict.halt) {
        // The prompt stays in the log (nothing the user typed is lost), and the model is told
        // not to act on it.
        let text = "[a UserPromptSubmit hook blocked the user's prompt above: do not act on it]";
        session.record(Fact::Notice { text: text.to_owned(), task_id: None }).await;
        let call_id = session.next_call_id();
        let title = "A hook blocked this prompt".to_owned();
        session.emit(SessionEvent::HostNote { call_id, title, detail: reason }).await;
        return Some(StopReason::EndTurn);
    }
    give_context(session, Event::UserPromptSubmit, verdict.context);
    None
}

/// Runs the `PostToolUse` hooks for `call`, which ran with `input` and gave `result`, once
/// its result is logged (an agent killed while they run keeps it): what they say goes to the
/// model after every result of the answer, before the next request (a message between two
/// results would break the history a provider accepts). `Some`: a hook said the turn ends.
async fn post_tool_use(
    turn: &Turn,
    session: &Arc<Session>,
    call: &ModelToolCall,
    input: &serde_json::Value,
    result: &crate::tools::CallResult,
    cancel: &CancellationToken,
) -> Option<String> {
    session.flush_or_warn().await;
    let point = Point::post_tool_use(
        &call.name,
        input,
        &call.id,
        &session.cwd,
        &result.text,
        result.is_error,
    );
    let verdict = turn.hooks.run(session, point, cancel).await;
    for text in verdict.block.into_iter().chain(verdict.context) {
        let text = format!("[PostToolUse hook, about your `{}` call]\n{text}", call.name);
        session.add_notice(crate::session::PendingNotice { text, task_id: None });
    }
    verdict.halt
}

/// Runs the `SessionStart` hooks for `source` (`startup`, `resume`, `compact`).
async fn session_start(
    turn: &Turn,
    session: &Arc<Session>,
    source: &str,
    cancel: &CancellationToken,
) {
    if !turn.hooks.wants(Event::SessionStart) {
        return;
    }
    let point = Point::new(Event::SessionStart, source, serde_json::json!({ "source": source }));
    let verdict = turn.hooks.run(session, point, cancel).await;
    give_context(session, Event::SessionStart, verdict.context);
}

/// Context hooks added goes to the model with its next request.
fn give_context(session: &Session, event: Event, context: Vec<String>) {
    for text in context {
        let text = format!("[context from a {event} hook]\n{text}");
        session.add_notice(crate::session::PendingNotice { text, task_id: None });
    }
}

/// The `Stop` hooks, when the model is done: `Some(reason)` when one says to go on (the turn
/// cap still bounds how often).
async fn stop_blocked(
    turn: &Turn,
    session: &Arc<Session>,
    kept_going: bool,
    cancel: &CancellationToken,
) -> Option<String> {
    if !turn.hooks.wants(Event::Stop) {
        return None;
    }
    // The model's last answer is on disk before a hook that may take long runs.
    session.flush_or_warn().await;
    let point = Point::new(Event::Stop, "", serde_json::json!({ "stop_hook_active": kept_going }));
    let verdict = turn.hooks.run(session, point, cancel).await;
    if verdict.halt.is_some() {
        return None;
    }
    verdict.block
}

/// A hook said the turn ends (`"continue": false`): the user is told why.
async fn say_halted(session: &Session, why: &str) {
    let call_id = session.next_call_id();
    let title = "A hook ended the turn".to_owned();
    session.emit(SessionEvent::HostNote { call_id, title, detail: why.to_owned() }).await;
}

/// What the session has cost with this answer's `usage` (the summary request's cost is not
/// counted: its usage is not kept). A change of currency (another model) starts again.
fn spent(turn: &Turn, session: &Session, usage: Option<&Usage>) -> Option<context::Spent> {
    let price = turn.price.as_ref()?;
    let before = session
        .context_shown()
        .and_then(|shown| shown.cost)
        .filter(|cost| cost.currency == price.currency)
        .map_or(0.0, |cost| cost.amount);
    let this = usage.and_then(|u| price.of(u)).unwrap_or(0.0);
    Some(context::Spent { amount: before + this, currency: price.currency.clone() })
}

/// `/compact`: the history compacted now, as one turn.
async fn compact_now(
    turn: &Turn,
    session: &Arc<Session>,
    focus: Option<String>,
    cancel: &CancellationToken,
) -> Result<StopReason, TurnFailed> {
    let Some(system) = prepare(turn, session, cancel).await? else {
        return Ok(StopReason::Cancelled);
    };
    session.deliver_notices(|task| turn.ports.end_reported(task)).await;
    if !session.compactable() {
        return Err(TurnFailed::new(
            "there is nothing to compact yet: the conversation has no messages since the last \
             compaction"
                .to_owned(),
        ));
    }
    let request = next_request(turn, session, &system).await;
    match compact(turn, session, &request, Trigger::Manual, focus, cancel).await {
        Compacted::Done => Ok(StopReason::EndTurn),
        Compacted::Cancelled => Ok(StopReason::Cancelled),
        Compacted::Failed(why) => Err(TurnFailed::new(format!("compaction failed: {why}"))),
    }
}

/// How a compaction went.
enum Compacted {
    Done,
    Cancelled,
    /// It failed, for this reason (the history is as it was).
    Failed(String),
}

/// Summary requests made smaller, at most, when the provider says one is too long.
const SUMMARY_ATTEMPTS: u32 = 3;
/// The most tokens of the user's latest prompts a compaction keeps as they were.
const KEPT_PROMPTS_MAX: u64 = 20_000;

/// Replaces the history `base` carries with a summary the model writes of it: one request
/// with the same system prompt and tools (the provider's cache serves them), the history
/// (its oldest messages left out when it would not fit) and the instruction to summarise.
/// The history is left as it was unless the summary is usable.
async fn compact(
    turn: &Turn,
    session: &Arc<Session>,
    base: &ModelRequest,
    trigger: Trigger,
    focus: Option<String>,
    cancel: &CancellationToken,
) -> Compacted {
    if turn.hooks.wants(Event::PreCompact) {
        let name = match trigger {
            Trigger::Manual => "manual",
            Trigger::Auto | Trigger::Overflow => "auto",
        };
        let fields = serde_json::json!({ "trigger": name, "custom_instructions": focus.clone().unwrap_or_default() });
        turn.hooks.run(session, Point::new(Event::PreCompact, name, fields), cancel).await;
    }
    let id = session.next_call_id();
    session.emit(SessionEvent::CompactionStarted { id: id.clone(), trigger }).await;
    let history = &base.messages;
    let fixed = context::fixed_tokens(base);
    let tokens_before = fixed + context::messages_tokens(history);
    let end = |status: &str, tokens_after: Option<u64>, error: Option<String>| {
        let ended = CompactionEnd {
            status: status.to_owned(),
            trigger,
            tokens_before,
            tokens_after,
            error,
        };
        session.emit(SessionEvent::CompactionEnded { id: id.clone(), ended })
    };
    let plan = session.plan_text();
    let instruction = context::summary_instruction(focus.as_deref(), plan.as_deref());
    // Room for the history: the window less the fixed parts, the instruction and an answer.
    let room = turn
        .limits
        .window
        .saturating_sub(fixed + context::tokens_of(instruction.len()) + turn.limits.window / 8);
    if room == 0 {
        let why = format!(
            "the context window ({} tokens) cannot hold the system prompt and the tools (about \
             {fixed} tokens) with room for a summary",
            turn.limits.window
        );
        end("failed", None, Some(why.clone())).await;
        return Compacted::Failed(why);
    }
    let shrunk = context::shrunk_for_summary(history, room);
    let mut skip = context::fit_from_front(&shrunk, room);
    let mut attempts = 1;
    let summary = loop {
        let mut messages = shrunk[skip..].to_vec();
        messages.push(Arc::new(Message::User { text: instruction.clone(), images: Vec::new() }));
        let request = ModelRequest {
            system: base.system.clone(),
            messages,
            tools: base.tools.clone(),
            effort: base.effort.clone(),
        };
        turn.ports.requesting(&request).await;
        match ask_model(turn, session, &request, cancel, Forward::Summary(&id)).await {
            Answer::Complete(answer) => break answer.text,
            Answer::Cancelled(_) => {
                end("cancelled", None, Some("the user cancelled it".to_owned())).await;
                return Compacted::Cancelled;
            }
            Answer::Failed(ModelError::ContextTooLong(_))
                if attempts < SUMMARY_ATTEMPTS && skip < shrunk.len() =>
            {
                // Leave out the older half of what is left, and try again.
                let left = &shrunk[skip..];
                skip += context::fit_from_front(left, context::messages_tokens(left) / 2)
                    .max(left.len() / 2)
                    .min(left.len());
                attempts += 1;
            }
            Answer::Failed(error) => {
                let why = format!("the summary request failed: {error}");
                end("failed", None, Some(why.clone())).await;
                return Compacted::Failed(why);
            }
        }
    };
    let replaced_tokens = context::messages_tokens(history);
    let failure = if summary.trim().is_empty() {
        Some("the model's summary was empty".to_owned())
    } else if context::tokens_of(summary.len()) >= replaced_tokens {
        Some(format!(
            "the model's summary (about {} tokens) is not shorter than what it would replace \
             (about {replaced_tokens})",
            context::tokens_of(summary.len())
        ))
    } else {
        None
    };
    if let Some(why) = failure {
        end("failed", None, Some(why.clone())).await;
        return Compacted::Failed(why);
    }
    let budget = (turn.limits.window / 10).min(KEPT_PROMPTS_MAX);
    let mut compaction = Compaction {
        id: id.0.clone(),
        trigger,
        focus,
        summary,
        kept_prompts: context::recent_prompts(history, budget),
        replaced: history.len(),
        tokens_before,
        tokens_after: 0,
    };
    compaction.tokens_after = fixed + context::messages_tokens(&compaction.history());
    let tokens_after = compaction.tokens_after;
    session.record(Fact::Compaction(Box::new(compaction))).await;
    end("completed", Some(tokens_after), None).await;
    session.flush_or_warn().await;
    let mut shown = context::context_use(None, tokens_after, turn.limits.window);
    shown.cost = spent(turn, session, None);
    session.emit(SessionEvent::Usage(shown)).await;
    session_start(turn, session, "compact", cancel).await;
    Compacted::Done
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
            usage: partial.usage.map(Box::new),
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

/// Where what a model streams goes.
#[derive(Clone, Copy)]
enum Forward<'a> {
    /// To the client as the agent's text and thoughts.
    Answer,
    /// Into the summary of this compaction (its reasoning is not shown).
    Summary(&'a ToolCallId),
}

/// Asks the model, forwarding what it streams as `forward` says.
async fn ask_model(
    turn: &Turn,
    session: &Session,
    request: &ModelRequest,
    cancel: &CancellationToken,
    forward: Forward<'_>,
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
                    let event = match forward {
                        Forward::Answer => SessionEvent::AgentText { text: chunk },
                        Forward::Summary(id) => {
                            SessionEvent::CompactionSummary { id: id.clone(), text: chunk }
                        }
                    };
                    session.emit(event).await;
                }
                Some(ModelEvent::Reasoning(chunk)) => {
                    answer.reasoning.push_str(&chunk);
                    if let Forward::Answer = forward {
                        session.emit(SessionEvent::AgentThought { text: chunk }).await;
                    }
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
