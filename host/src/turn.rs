//! The prompt loop: model → tool calls → plugins → results back to the model → … until the
//! model answers without calling a tool, or the user cancels.

use crate::executor::Executor;
use crate::executor::{Drained, LiveOutput};
use crate::model::{Model, ModelError, Transcript};
use crate::model::{ModelEvent, ModelRequest, ModelToolCall};
use crate::plugins::{
    CallSandbox, CallServices, LoadedPlugin, PluginCall, PluginOutput, Registry, Snapshot,
};
use crate::prompt::HostSections;
use crate::session::{
    CallStatus, Card, Fact, GenericCard, Session, SessionEvent, StopReason, TerminalCard,
    ToolCallId, ToolKind, TurnOutcome,
};
use crate::task_cards::TaskCards;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How long live output gathers before it is forwarded to the client.
const COALESCE_WINDOW: Duration = Duration::from_millis(25);
/// How long a cancelled plugin call may take to return before the turn ends without it.
const CANCEL_GRACE: Duration = Duration::from_secs(3);
/// How long a presentation function may take.
const PRESENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long any plugin call may take, cancelled or not: longer than the longest command
/// (600 s) plus its kill grace, so only a plugin that hangs meets it.
const INVOKE_LIMIT: Duration = Duration::from_secs(15 * 60);

/// What a turn works with, handed to it explicitly: the plugins, the executor, the model, and
/// where its output and task cards go. (The session itself is passed beside it.)
pub(crate) struct Parts {
    pub(crate) registry: Arc<Registry>,
    pub(crate) executor: Arc<Executor>,
    pub(crate) sandbox: Arc<crate::sandbox::Sandbox>,
    pub(crate) model: Arc<dyn Model>,
    pub(crate) transcript: Option<Arc<Transcript>>,
    /// The host's runtime, where plugin calls' host services run their work.
    pub(crate) runtime: tokio::runtime::Handle,
    /// Where this session's output files go.
    pub(crate) output_dir: std::path::PathBuf,
    /// The session's private temp dir, its commands' `$TMPDIR`.
    pub(crate) temp_dir: std::path::PathBuf,
    pub(crate) task_cards: Arc<TaskCards>,
    /// Records model exchanges into an arc, when asked to.
    pub(crate) recorder: Option<Arc<crate::arc::Recorder>>,
    /// The session's MCP servers.
    pub(crate) mcp: Option<Arc<crate::mcp::Servers>>,
}

/// A turn that could not go on: the model failed. The message is for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct TurnFailed {
    pub(crate) message: String,
    /// The model wants a key that is missing or was refused: the client may ask the user to
    /// authenticate.
    pub(crate) needs_key: bool,
}

impl TurnFailed {
    pub(crate) fn new(message: String) -> Self {
        Self { message, needs_key: false }
    }
}

/// Runs a turn so that a panic in it (a bug in the host) still ends the turn with an answer:
/// the session never stays busy.
pub(crate) async fn guarded(
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

/// Answers the prompt [`Session::begin_turn`] logged: runs the turn (guarded), records how it ended (which frees the
/// session for the next prompt), and flushes the log. A log that cannot be written fails the
/// turn, so the user is told the session is not saved.
pub(crate) async fn answer(
    parts: &Parts,
    session: &Arc<Session>,
    cancel: CancellationToken,
) -> Result<StopReason, TurnFailed> {
    let outcome = guarded(run_turn(parts, session, &cancel)).await;
    let (recorded, message) = match &outcome {
        Ok(StopReason::EndTurn) => (TurnOutcome::EndTurn, None),
        Ok(StopReason::Cancelled) => (TurnOutcome::Cancelled, None),
        Err(failed) => (TurnOutcome::Failed, Some(failed.message.clone())),
    };
    session.end_turn(Fact::TurnEnded { outcome: recorded, message }).await;
    session.flush().await.map_err(TurnFailed::new)?;
    outcome
}

/// Runs one turn of `session` for the user's `prompt`.
async fn run_turn(
    parts: &Parts,
    session: &Arc<Session>,
    cancel: &CancellationToken,
) -> Result<StopReason, TurnFailed> {
    // What the user asked (logged when the turn began) is on disk before anything runs.
    flush_or_warn(session).await;
    if let Some(mcp) = &parts.mcp {
        // Servers that failed get another chance with each prompt.
        mcp.retry_failed();
    }
    let settled = async {
        parts.registry.ready().await;
        if let Some(mcp) = &parts.mcp {
            mcp.settle().await;
        }
    };
    tokio::select! {
        () = settled => {}
        () = cancel.cancelled() => return Ok(StopReason::Cancelled),
    }
    let cwd = session.cwd.clone();
    let host_sections = tokio::task::spawn_blocking(move || HostSections::read(&cwd))
        .await
        .map_err(|e| TurnFailed::new(format!("cannot read the project's instructions: {e}")))?;
    loop {
        if cancel.is_cancelled() {
            return Ok(StopReason::Cancelled);
        }
        // A task the model killed (or read after its end) needs no notice saying it ended.
        session.drop_reported_notices(|task| parts.executor.end_reported(task));
        session.deliver_notices().await;
        let snapshot = parts.registry.snapshot();
        let request = ModelRequest {
            system: system_prompt(&host_sections, &snapshot),
            messages: session.messages(),
            tools: offered_tools(parts, session, &snapshot).await,
        };
        if let Some(transcript) = &parts.transcript {
            transcript.record(&request).await;
        }
        let answer = match ask_model(parts, session, &request, cancel).await {
            Answer::Complete(answer) => answer,
            // The prompt is answered with the error; the session keeps serving.
            Answer::Failed(error) => {
                let needs_key = matches!(error, ModelError::NotConfigured | ModelError::Auth(_));
                return Err(TurnFailed { message: error.to_string(), needs_key });
            }
            Answer::Cancelled => return Ok(StopReason::Cancelled),
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
            let (text, is_error) = execute_call(parts, session, call, cancel).await;
            session.record(Fact::ToolResult { call_id: call.id.clone(), text, is_error }).await;
        }
    }
}

/// The system prompt: who the agent is and its environment, the plugins' sections by order,
/// then the project's `AGENTS.md` instructions.
fn system_prompt(host: &HostSections, snapshot: &Snapshot) -> String {
    let mut parts = vec![host.intro.clone(), host.environment.clone()];
    parts.extend(snapshot.prompt_sections().into_iter().map(|s| s.text));
    parts.extend(host.instructions.clone());
    parts.join("\n\n")
}

/// What a model answered.
#[derive(Default)]
struct Completed {
    text: String,
    reasoning: String,
    calls: Vec<ModelToolCall>,
    usage: Option<crate::model::Usage>,
    finish_reason: Option<String>,
}

/// How a model request ended.
enum Answer {
    Complete(Completed),
    /// The model failed, for this reason.
    Failed(ModelError),
    Cancelled,
}

/// Asks the model, forwarding its text and reasoning to the client as they stream.
async fn ask_model(
    parts: &Parts,
    session: &Session,
    request: &ModelRequest,
    cancel: &CancellationToken,
) -> Answer {
    let (events, mut received) = mpsc::unbounded_channel();
    let respond = parts.model.respond(&session.id.0, request, events);
    tokio::pin!(respond);
    let mut answer = Completed::default();
    let mut outcome = None;
    // What the model streamed, for an arc.
    let mut streamed = Vec::new();
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => {
                if let Some(recorder) = &parts.recorder {
                    recorder.model(&session.id.0, request, &streamed, crate::arc::Ending::Cancelled);
                }
                return Answer::Cancelled;
            }
            event = received.recv() => match event.inspect(|e| if parts.recorder.is_some() { streamed.push(e.clone()) }) {
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
    if let Some(recorder) = &parts.recorder {
        let ending = match &result {
            Ok(()) => crate::arc::Ending::Complete,
            Err(error) => crate::arc::Ending::Failed(error.to_string()),
        };
        recorder.model(&session.id.0, request, &streamed, ending);
    }
    match result {
        Ok(()) => Answer::Complete(answer),
        Err(error) => {
            tracing::warn!(%error, "model request failed");
            Answer::Failed(error)
        }
    }
}

/// The tools the model is offered: the plugins' and the MCP servers', except that plan mode
/// offers tools that run commands only while a backend can confine commands to read-only
/// (otherwise none could run), and only the server tools their server says only read.
async fn offered_tools(
    parts: &Parts,
    session: &Session,
    snapshot: &Snapshot,
) -> Vec<crate::model::ToolDefinition> {
    let mut tools = snapshot.tool_definitions();
    let planning = session.planning();
    if planning && !parts.sandbox.confines() {
        tools.retain(|tool| !tool.effects.runs_commands);
    }
    if let Some(mcp) = &parts.mcp {
        tools.extend(mcp.tool_definitions(planning).await);
    }
    tools
}

/// Runs one tool call with its card; returns the text for the model and whether it is an error.
async fn execute_call(
    parts: &Parts,
    session: &Arc<Session>,
    call: &ModelToolCall,
    cancel: &CancellationToken,
) -> (String, bool) {
    let call_id = session.next_call_id();
    let raw_input = serde_json::from_str(&call.arguments)
        .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
    if let Some(mcp) = &parts.mcp {
        if let Some(found) = mcp.find(&call.name) {
            return execute_mcp_call(mcp, &found, session, call_id, call, raw_input, cancel).await;
        }
        if let Some(text) = mcp.unavailable(&call.name) {
            fail_without_running(session, call_id, call, raw_input, &text).await;
            return (text, true);
        }
    }
    let snapshot = parts.registry.snapshot();
    let Some(plugin) = snapshot.find_tool(&call.name) else {
        let names: Vec<String> = snapshot.tool_definitions().into_iter().map(|t| t.name).collect();
        let text = if names.is_empty() {
            format!("unknown tool `{}`: no tools are loaded", call.name)
        } else {
            format!("unknown tool `{}`; the tools are: {}", call.name, names.join(", "))
        };
        fail_without_running(session, call_id, call, raw_input, &text).await;
        return (text, true);
    };
    let plugin_call = PluginCall {
        call_id: call_id.0.clone(),
        session_id: session.id.0.clone(),
        tool: call.name.clone(),
        arguments: call.arguments.clone(),
        cwd: session.cwd.to_string_lossy().into_owned(),
    };
    let card = present(&plugin, {
        let call = plugin_call.clone();
        move |p| p.api.present_call(&call)
    })
    .await
    .unwrap_or_else(|error| {
        tracing::debug!(%error, tool = %call.name, "present_call failed; showing a plain card");
        fallback_card(&call.name)
    });
    open_card(session, &call_id, call, card.clone(), raw_input).await;

    let live = Arc::new(LiveOutput::new(parts.executor.config().live_cap));
    let forwarder =
        tokio::spawn(forward_output(Arc::clone(&live), Arc::clone(session), call_id.clone()));
    let output_dir = parts.output_dir.clone();
    let temp_dir = Some(parts.temp_dir.clone());
    let services = Arc::new(CallServices {
        runtime: parts.runtime.clone(),
        executor: Arc::clone(&parts.executor),
        cancel: cancel.clone(),
        live: Arc::clone(&live),
        spill_stem: output_dir.join(&call_id.0),
        plugin: plugin.name.clone(),
        tool: call.name.clone(),
        runs: AtomicU32::new(0),
        session_id: session.id.0.clone(),
        task_output_dir: output_dir,
        started: std::sync::Mutex::default(),
        last_end: std::sync::Mutex::default(),
        sandbox: CallSandbox {
            sandbox: Arc::clone(&parts.sandbox),
            session: Some(Arc::clone(session)),
            call_id: call_id.0.clone(),
            cwd: session.cwd.clone(),
            temp_dir,
        },
    });
    let (result, presented) =
        invoke(&plugin, plugin_call.clone(), Arc::clone(&services), cancel).await;
    live.close();
    let _ = forwarder.await;

    match result {
        Ok(output) => {
            let presented = match tokio::time::timeout(PRESENT_TIMEOUT, presented).await {
                Ok(Ok(presented)) => presented,
                Ok(Err(_)) => Err("the plugin's thread ended without a card".to_owned()),
                Err(_) => Err("presentation timed out".to_owned()),
            };
            let (mut card, mut status) = presented.unwrap_or_else(|error| {
                tracing::debug!(%error, "present_result failed; keeping the call's card");
                (card, CallStatus::Completed)
            });
            if let Card::Terminal(TerminalCard { exit: Some(exit), .. }) = &mut card {
                exit.reason = crate::sync::lock(&services.last_end).clone();
            }
            let started_tasks = crate::sync::lock(&services.started).clone();
            for task in &started_tasks {
                session
                    .record(Fact::TaskStarted {
                        task_id: task.task_id.clone(),
                        call_id: call_id.0.clone(),
                        command: task.command.clone(),
                        output_path: task.output_path.clone(),
                    })
                    .await;
            }
            let started = started_tasks.first().map(|t| t.task_id.clone());
            if status == CallStatus::Running && started.is_none() {
                tracing::debug!(tool = %call.name, "card drawn as running but no task was started");
                status = CallStatus::Completed;
            }
            session
                .emit(SessionEvent::ToolCallFinished {
                    call_id: call_id.clone(),
                    card: card.clone(),
                    status,
                    raw_output: serde_json::from_str(&output.raw_output)
                        .unwrap_or(serde_json::Value::Null),
                    error: None,
                    output_text: Some(output.text.clone()),
                })
                .await;
            if let (CallStatus::Running, Some(task_id)) = (status, started) {
                parts.task_cards.keep_open(&task_id, session, &call_id, card.title()).await;
            }
            flush_or_warn(session).await;
            (output.text, false)
        }
        Err(text) => {
            finish_failed(session, call_id, card, &text).await;
            flush_or_warn(session).await;
            (text, true)
        }
    }
}

/// Runs one call of an MCP server's tool with its card: kind read or other from the tool's
/// annotations, the result's text as content; an `isError` result or a failed call closes it
/// as failed.
async fn execute_mcp_call(
    mcp: &crate::mcp::Servers,
    found: &crate::mcp::Found,
    session: &Arc<Session>,
    call_id: ToolCallId,
    call: &ModelToolCall,
    raw_input: serde_json::Value,
    cancel: &CancellationToken,
) -> (String, bool) {
    let mut card = found.card();
    open_card(session, &call_id, call, Card::Generic(card.clone()), raw_input).await;
    let outcome = mcp.call(found, &call.arguments, cancel).await;
    card.content = Some(outcome.text.clone());
    let status = if outcome.is_error { CallStatus::Failed } else { CallStatus::Completed };
    session
        .emit(SessionEvent::ToolCallFinished {
            call_id,
            card: Card::Generic(card),
            status,
            raw_output: outcome.raw,
            error: outcome.is_error.then(|| outcome.text.clone()),
            output_text: Some(outcome.text.clone()),
        })
        .await;
    flush_or_warn(session).await;
    (outcome.text, outcome.is_error)
}

/// The result card a plugin draws for a call, or why it did not.
type Presented = Result<(Card, CallStatus), String>;

/// Runs the plugin's `invoke` on a blocking thread, and then, on the same thread, its
/// `present_result` (one hop to the blocking pool instead of two); the card comes on the
/// receiver, which the caller waits for within [`PRESENT_TIMEOUT`]. If the turn is cancelled
/// and the plugin does not return within a grace period, the turn goes on without it (its
/// thread is left to finish on its own).
async fn invoke(
    plugin: &Arc<LoadedPlugin>,
    call: PluginCall,
    services: Arc<CallServices>,
    cancel: &CancellationToken,
) -> (Result<PluginOutput, String>, tokio::sync::oneshot::Receiver<Presented>) {
    let plugin = Arc::clone(plugin);
    let name = plugin.name.clone();
    let (invoked, task) = tokio::sync::oneshot::channel();
    let (presented, card) = tokio::sync::oneshot::channel();
    tokio::task::spawn_blocking(move || {
        let output = plugin.api.invoke(&call, &services);
        let drawn = output.as_ref().ok().map(|output| (call.clone(), output.clone()));
        let _ = invoked.send(output);
        if let Some((call, output)) = drawn {
            let _ = presented.send(plugin.api.present_result(&call, &output));
        }
    });
    (invoked_within(task, &name, cancel).await, card)
}

/// Waits for a plugin's `invoke` result: at most [`INVOKE_LIMIT`], or [`CANCEL_GRACE`] once
/// the turn is cancelled.
async fn invoked_within(
    task: tokio::sync::oneshot::Receiver<Result<PluginOutput, String>>,
    name: &str,
    cancel: &CancellationToken,
) -> Result<PluginOutput, String> {
    tokio::pin!(task);
    let joined = tokio::select! {
        joined = &mut task => joined,
        () = tokio::time::sleep(INVOKE_LIMIT) => {
            tracing::warn!(plugin = %name, "plugin call did not return in time; abandoned");
            return Err(format!(
                "plugin `{name}` did not return within {} minutes; the call was abandoned",
                INVOKE_LIMIT.as_secs() / 60
            ));
        }
        () = cancel.cancelled() => match tokio::time::timeout(CANCEL_GRACE, &mut task).await {
            Ok(joined) => joined,
            Err(_) => {
                tracing::warn!(plugin = %name, "plugin call did not return after cancel; abandoned");
                return Err(format!("[aborted: the user cancelled the turn; plugin `{name}` did not return]"));
            }
        },
    };
    joined.unwrap_or_else(|_| {
        Err(format!("plugin `{name}` failed: its thread ended without a result"))
    })
}

/// What a loaded session's client is shown again: the logged view, with every tool call's
/// card drawn anew by the plugin that declares the tool (so an improved rendering applies to
/// old threads). The logged card stays when no plugin declares the tool any more or the
/// presenter fails; the logged status and the host's own notes (why a command ended) stay.
/// All cards are drawn on one blocking thread, within [`PRESENT_TIMEOUT`] in all; past it the
/// logged cards are shown.
pub(crate) async fn present_again(
    registry: &Registry,
    session: &Session,
    mut view: Vec<SessionEvent>,
) -> Vec<SessionEvent> {
    let snapshot = registry.snapshot();
    // What to draw: (index in the view, plugin, call, output for a final card).
    let mut jobs: Vec<(usize, Arc<LoadedPlugin>, PluginCall, Option<PluginOutput>)> = Vec::new();
    let mut calls: HashMap<ToolCallId, (Arc<LoadedPlugin>, PluginCall)> = HashMap::new();
    for (index, event) in view.iter().enumerate() {
        match event {
            SessionEvent::ToolCallStarted { call_id, tool, arguments, .. } => {
                let Some(plugin) = snapshot.find_tool(tool) else { continue };
                let call = PluginCall {
                    call_id: call_id.0.clone(),
                    session_id: session.id.0.clone(),
                    tool: tool.clone(),
                    arguments: arguments.clone(),
                    cwd: session.cwd.to_string_lossy().into_owned(),
                };
                jobs.push((index, Arc::clone(&plugin), call.clone(), None));
                calls.insert(call_id.clone(), (plugin, call));
            }
            SessionEvent::ToolCallFinished {
                call_id, raw_output, output_text: Some(text), ..
            } => {
                let Some((plugin, call)) = calls.get(call_id) else { continue };
                let output =
                    PluginOutput { text: text.clone(), raw_output: raw_output.to_string() };
                jobs.push((index, Arc::clone(plugin), call.clone(), Some(output)));
            }
            _ => {}
        }
    }
    if jobs.is_empty() {
        return view;
    }
    let drawn = tokio::task::spawn_blocking(move || {
        jobs.into_iter()
            .filter_map(|(index, plugin, call, output)| {
                let card = match output {
                    None => plugin.api.present_call(&call).ok()?,
                    Some(output) => plugin.api.present_result(&call, &output).ok()?.0,
                };
                Some((index, card))
            })
            .collect::<Vec<_>>()
    });
    let drawn = match tokio::time::timeout(PRESENT_TIMEOUT, drawn).await {
        Ok(Ok(drawn)) => drawn,
        Ok(Err(error)) => {
            tracing::warn!(%error, "drawing cards again failed; showing the logged ones");
            return view;
        }
        Err(_) => {
            tracing::warn!("drawing cards again took too long; showing the logged ones");
            return view;
        }
    };
    for (index, mut fresh) in drawn {
        if let Some(
            SessionEvent::ToolCallStarted { card, .. }
            | SessionEvent::ToolCallFinished { card, .. },
        ) = view.get_mut(index)
        {
            keep_host_notes(card, &mut fresh);
            *card = fresh;
        }
    }
    view
}

/// Carries what the host added to a logged card (why a command ended) over to a card drawn
/// anew.
fn keep_host_notes(logged: &Card, fresh: &mut Card) {
    if let (
        Card::Terminal(TerminalCard { exit: Some(logged), .. }),
        Card::Terminal(TerminalCard { exit: Some(fresh), .. }),
    ) = (logged, fresh)
    {
        fresh.reason = logged.reason.clone();
    }
}

/// Runs a presentation function on a blocking thread with a time limit.
async fn present<T: Send + 'static>(
    plugin: &Arc<LoadedPlugin>,
    function: impl FnOnce(&LoadedPlugin) -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let plugin = Arc::clone(plugin);
    let task = tokio::task::spawn_blocking(move || function(&plugin));
    match tokio::time::timeout(PRESENT_TIMEOUT, task).await {
        Ok(Ok(result)) => result,
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err("presentation timed out".to_owned()),
    }
}

fn fallback_card(tool: &str) -> Card {
    Card::Generic(GenericCard::new(tool, ToolKind::Other, None))
}

/// Shows a call that could not run at all (e.g. an unknown tool) as a failed card.
async fn fail_without_running(
    session: &Session,
    call_id: ToolCallId,
    call: &ModelToolCall,
    raw_input: serde_json::Value,
    text: &str,
) {
    let card = fallback_card(&call.name);
    open_card(session, &call_id, call, card.clone(), raw_input).await;
    finish_failed(session, call_id, card, text).await;
}

/// Shows (and logs) the card of a call that starts.
async fn open_card(
    session: &Session,
    call_id: &ToolCallId,
    call: &ModelToolCall,
    card: Card,
    raw_input: serde_json::Value,
) {
    let started = SessionEvent::ToolCallStarted {
        call_id: call_id.clone(),
        tool: call.name.clone(),
        card,
        raw_input,
        arguments: call.arguments.clone(),
    };
    session.emit(started).await;
}

/// Closes a call's card as failed, carrying the text the model got.
async fn finish_failed(session: &Session, call_id: ToolCallId, card: Card, text: &str) {
    session
        .emit(SessionEvent::ToolCallFinished {
            call_id,
            card,
            status: CallStatus::Failed,
            raw_output: serde_json::json!({ "error": text }),
            error: Some(text.to_owned()),
            output_text: None,
        })
        .await;
}

/// A card closed: what the user saw so far goes to the file (a failure is reported when
/// the turn ends).
async fn flush_or_warn(session: &Session) {
    if let Err(failure) = session.flush().await {
        tracing::warn!(session = %session.id, "{failure}");
    }
}

/// Forwards a call's live output to the client, at most once per coalescing window; the last
/// of it goes as soon as the command ends (the card closes right after).
async fn forward_output(live: Arc<LiveOutput>, session: Arc<Session>, call_id: ToolCallId) {
    loop {
        live.changed().await;
        tokio::select! {
            () = tokio::time::sleep(COALESCE_WINDOW) => {}
            () = live.closed() => {}
        }
        match live.drain() {
            Drained::Text(text) if text.is_empty() => {}
            Drained::Text(text) => {
                session.emit(SessionEvent::ToolOutput { call_id: call_id.clone(), text }).await;
            }
            Drained::Empty => {}
            Drained::Closed => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_that_panics_still_ends_with_an_answer() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        let outcome = runtime.block_on(guarded(async {
            if std::hint::black_box(true) {
                panic!("boom in a turn");
            }
            Ok(StopReason::EndTurn)
        }));
        let Err(TurnFailed { message, .. }) = outcome else { panic!("a panic must fail the turn") };
        assert!(message.ends_with(": boom in a turn"), "{message}");
        assert_eq!(guarded_ok(&runtime), Ok(StopReason::Cancelled));
    }

    fn guarded_ok(runtime: &tokio::runtime::Runtime) -> Result<StopReason, TurnFailed> {
        runtime.block_on(guarded(async { Ok(StopReason::Cancelled) }))
    }
}
