//! The host's side of a turn: the core's loop (`hotsh_core::turn`) runs over what is built
//! here: the plugins as a tool provider (each call's card, its host services, its live output,
//! the card drawn again on load), a session's MCP servers as another, and the turn's ports
//! (the system prompt's host parts, the transcript and the arc recorder).

use crate::executor::{Drained, LiveOutput};
use crate::model::{ModelEvent, ModelRequest, Transcript};
use crate::plugins::{CallSandbox, CallServices, LoadedPlugin, PluginCall, PluginOutput, Registry};
use crate::prompt::HostSections;
use crate::session::{CallStatus, Card, Fact, Session, SessionEvent, ToolCallId};
use futures::future::BoxFuture;
use hotsh_core::executor::Executor;
use hotsh_core::tools::{Call, CallResult, PromptSection, ToolProvider, finish_failed, open_card};
use hotsh_core::turn::{Ending, SystemParts, TurnPorts};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub(crate) use hotsh_core::turn::Turn;

/// How long live output gathers before it is forwarded to the client.
const COALESCE_WINDOW: Duration = Duration::from_millis(25);
/// How long a cancelled plugin call may take to return before the turn ends without it.
const CANCEL_GRACE: Duration = Duration::from_secs(3);
/// How long a presentation function may take.
const PRESENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long any plugin call may take, cancelled or not: longer than the longest command
/// (600 s) plus its kill grace, so only a plugin that hangs meets it.
const INVOKE_LIMIT: Duration = Duration::from_secs(15 * 60);

/// The plugins, as a session's tool provider.
pub(crate) struct PluginTools {
    pub(crate) registry: Arc<Registry>,
    pub(crate) executor: Arc<dyn Executor>,
    /// Bytes of a command's output that may wait for the client between two forwards.
    pub(crate) live_cap: usize,
    pub(crate) sandbox: Arc<crate::sandbox::Sandbox>,
    /// The host's runtime, where plugin calls' host services run their work.
    pub(crate) runtime: tokio::runtime::Handle,
    /// Where this session's output files go.
    pub(crate) output_dir: std::path::PathBuf,
    /// The session's private temp dir, its commands' `$TMPDIR`.
    pub(crate) temp: crate::executor::SessionTemp,
    /// The rules the user allowed in projects.
    pub(crate) project_rules: crate::permissions::ProjectRules,
    /// The turn's hooks (and Claude Code's allow rules with them).
    pub(crate) hooks: Arc<crate::hooks::TurnHooks>,
}

impl ToolProvider for PluginTools {
    fn prepare(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.registry.ready())
    }

    fn tools(&self, _planning: bool) -> BoxFuture<'_, Vec<crate::model::ToolDefinition>> {
        let tools = self.registry.snapshot().tool_definitions();
        Box::pin(async move { tools })
    }

    fn prompt_sections(&self) -> Vec<PromptSection> {
        self.registry.snapshot().prompt_sections()
    }

    fn call<'a>(&'a self, call: Call<'a>) -> Option<BoxFuture<'a, CallResult>> {
        let plugin = self.registry.snapshot().find_tool(&call.call.name)?;
        Some(Box::pin(async move {
            let (text, is_error) = execute_call(self, &plugin, call).await;
            CallResult { text, is_error }
        }))
    }
}

/// A session's MCP servers, as its tool provider.
pub(crate) struct McpTools(pub(crate) Arc<crate::mcp::Servers>);

impl ToolProvider for McpTools {
    fn prepare(&self) -> BoxFuture<'_, ()> {
        // Servers that failed get another chance with each prompt.
        self.0.retry_failed();
        Box::pin(self.0.settle())
    }

    fn tools(&self, planning: bool) -> BoxFuture<'_, Vec<crate::model::ToolDefinition>> {
        Box::pin(self.0.tool_definitions(planning))
    }

    fn close(&self) {
        self.0.close();
    }

    fn call<'a>(&'a self, call: Call<'a>) -> Option<BoxFuture<'a, CallResult>> {
        if let Some(found) = self.0.find(&call.call.name) {
            return Some(Box::pin(async move {
                let (text, is_error) = execute_mcp_call(&self.0, &found, call).await;
                CallResult { text, is_error }
            }));
        }
        let text = self.0.unavailable(&call.call.name)?;
        Some(Box::pin(async move {
            hotsh_core::tools::fail_without_running(call, &text).await;
            CallResult { text, is_error: true }
        }))
    }
}

/// What the host adds to a turn of one session.
pub(crate) struct HostPorts {
    pub(crate) executor: Arc<dyn Executor>,
    pub(crate) cwd: std::path::PathBuf,
    /// When the session began (RFC 3339): the date its prompt names, fixed for the session so
    /// the prompt stays byte-identical (and cacheable) from one request to the next.
    pub(crate) started: String,
    pub(crate) session_id: String,
    pub(crate) transcript: Option<Arc<Transcript>>,
    /// Records model exchanges into an arc, when asked to.
    pub(crate) recorder: Option<Arc<crate::arc::Recorder>>,
    /// A subagent's part of its system prompt (who gave it its task, its agent's
    /// instructions).
    pub(crate) subagent: Option<String>,
}

impl TurnPorts for HostPorts {
    fn system_parts(&self) -> BoxFuture<'_, Result<SystemParts, std::io::Error>> {
        let cwd = self.cwd.clone();
        let subagent = self.subagent.clone();
        let date = self.started.get(..10).unwrap_or(&self.started).to_owned();
        Box::pin(async move {
            let host = tokio::task::spawn_blocking(move || HostSections::read(&cwd, &date))
                .await
                .map_err(std::io::Error::other)?;
            Ok(SystemParts {
                before: [host.intro, host.environment].into_iter().chain(subagent).collect(),
                after: host.instructions.into_iter().collect(),
            })
        })
    }

    fn end_reported(&self, task: &str) -> bool {
        self.executor.end_reported(task)
    }

    fn requesting<'a>(&'a self, request: &'a ModelRequest) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Some(transcript) = &self.transcript {
                transcript.record(request).await;
            }
        })
    }

    fn keeps_answers(&self) -> bool {
        self.recorder.is_some()
    }

    fn answered(&self, request: &ModelRequest, streamed: &[ModelEvent], ending: Ending) {
        if let Some(recorder) = &self.recorder {
            let ending = match ending {
                Ending::Complete => crate::arc::Ending::Complete,
                Ending::Failed(message) => crate::arc::Ending::Failed(message),
                Ending::Cancelled => crate::arc::Ending::Cancelled,
            };
            recorder.model(&self.session_id, request, streamed, ending);
        }
    }
}

/// Runs one call of a plugin's tool with its card; returns the text for the model and
/// whether it is an error.
async fn execute_call(
    tools: &PluginTools,
    plugin: &Arc<LoadedPlugin>,
    call: Call<'_>,
) -> (String, bool) {
    let plugin_call = PluginCall {
        call_id: call.call_id.0.clone(),
        session_id: call.session.id.0.clone(),
        tool: call.call.name.clone(),
        arguments: call.call.arguments.clone(),
        cwd: call.session.cwd.to_string_lossy().into_owned(),
    };
    let card = present(plugin, {
        let call = plugin_call.clone();
        move |p| p.api.present_call(&call)
    })
    .await
    .unwrap_or_else(|error| {
        tracing::debug!(%error, tool = %call.call.name, "present_call failed; showing a plain card");
        hotsh_core::tools::plain_card(&call.call.name)
    });
    open_card(call, card.clone()).await;

    let live = Arc::new(LiveOutput::new(tools.live_cap));
    let forwarder = tokio::spawn(forward_output(
        Arc::clone(&live),
        Arc::clone(call.session),
        call.call_id.clone(),
    ));
    let services = Arc::new(tools.services(plugin, call, Arc::clone(&live)));
    let (result, presented) = invoke(plugin, plugin_call, Arc::clone(&services), call.cancel).await;
    live.close();
    let _ = forwarder.await;
    // The tasks the call started, whatever it returned: each start is logged before its end.
    let started_tasks = crate::sync::lock(&services.started).clone();
    for task in started_tasks {
        call.session
            .task_started(Fact::TaskStarted {
                task_id: task.task_id,
                call_id: call.call_id.0.clone(),
                command: task.command,
                output_path: task.output_path,
            })
            .await;
    }

    match result {
        Ok(output) => (finish_call(call, &services, card, output, presented).await, false),
        Err(text) => {
            finish_failed(call.session, call.call_id, card, &text).await;
            (text, true)
        }
    }
}

impl PluginTools {
    /// The host services of one call.
    fn services(
        &self,
        plugin: &LoadedPlugin,
        call: Call<'_>,
        live: Arc<LiveOutput>,
    ) -> CallServices {
        CallServices {
            runtime: self.runtime.clone(),
            executor: Arc::clone(&self.executor),
            cancel: call.cancel.clone(),
            live,
            spill_stem: self.output_dir.join(&call.call_id.0),
            plugin: plugin.name.clone(),
            tool: call.call.name.clone(),
            runs: AtomicU32::new(0),
            session_id: call.session.id.0.clone(),
            task_output_dir: self.output_dir.clone(),
            started: std::sync::Mutex::default(),
            last_end: std::sync::Mutex::default(),
            sandbox: CallSandbox {
                sandbox: Arc::clone(&self.sandbox),
                session: Some(Arc::clone(call.session)),
                call_id: call.call_id.0.clone(),
                cwd: call.session.cwd.clone(),
                temp: Some(self.temp.clone()),
                project_rules: self.project_rules.clone(),
                settings_allows: self.hooks.allow_rules(call.session),
            },
        }
    }
}

/// Closes the card of a call that returned: the plugin's result card (or the call's card when
/// it draws none in time), the host's note of why its command ended, the background tasks it
/// started (logged; the card of one stays open until the task ends). Returns the text for the
/// model.
async fn finish_call(
    call: Call<'_>,
    services: &CallServices,
    card: Card,
    output: PluginOutput,
    presented: tokio::sync::oneshot::Receiver<Presented>,
) -> String {
    let session = call.session;
    let presented = match tokio::time::timeout(PRESENT_TIMEOUT, presented).await {
        Ok(Ok(presented)) => presented,
        Ok(Err(_)) => Err("the plugin's thread ended without a card".to_owned()),
        Err(_) => Err("presentation timed out".to_owned()),
    };
    let (mut card, mut status) = presented.unwrap_or_else(|error| {
        tracing::debug!(%error, "present_result failed; keeping the call's card");
        (card, CallStatus::Completed)
    });
    if let Card::Terminal(terminal) = &mut card
        && let Some(exit) = &mut terminal.exit
    {
        exit.reason = crate::sync::lock(&services.last_end).clone();
    }
    let started = crate::sync::lock(&services.started).first().map(|t| t.task_id.clone());
    if status == CallStatus::Running && started.is_none() {
        tracing::debug!(tool = %call.call.name, "card drawn as running but no task was started");
        status = CallStatus::Completed;
    }
    session
        .emit(SessionEvent::ToolCallFinished {
            call_id: call.call_id.clone(),
            card: card.clone(),
            status,
            raw_output: serde_json::from_str(&output.raw_output)
                .unwrap_or(serde_json::Value::Null)
                .into(),
            error: None,
            output_text: Some(output.text.clone()),
            output_in_result: false,
        })
        .await;
    if let (CallStatus::Running, Some(task_id)) = (status, started) {
        session.keep_task_card(&task_id, call.call_id, card.title()).await;
    }
    output.text
}

/// Runs one call of an MCP server's tool with its card: kind read or other from the tool's
/// annotations, the result's text as content; an `isError` result or a failed call closes it
/// as failed.
async fn execute_mcp_call(
    mcp: &crate::mcp::Servers,
    found: &crate::mcp::Found,
    call: Call<'_>,
) -> (String, bool) {
    let mut card = found.card();
    open_card(call, Card::generic(card.clone())).await;
    let outcome = mcp.call(found, &call.call.arguments, call.cancel).await;
    card.content = Some(outcome.text.clone());
    let status = if outcome.is_error { CallStatus::Failed } else { CallStatus::Completed };
    call.session
        .emit(SessionEvent::ToolCallFinished {
            call_id: call.call_id.clone(),
            card: Card::generic(card),
            status,
            raw_output: outcome.raw.into(),
            error: outcome.is_error.then(|| outcome.text.clone()),
            output_text: Some(outcome.text.clone()),
            output_in_result: false,
        })
        .await;
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
/// old threads), a part of the thread at a time. The logged card stays when no plugin
/// declares the tool any more or the presenter fails; the logged status and the host's own
/// notes (why a command ended) stay. The plugins are those the initial scan of the plugin
/// directories found (a load right after start waits for it, so the thread is drawn by the
/// plugins installed, not as logged because they were still loading). A part's cards are
/// drawn on one blocking thread within [`PRESENT_TIMEOUT`] (the first part's wait for the
/// scan included); past it that part and every later one show the logged cards.
pub(crate) struct Presenter {
    registry: Arc<Registry>,
    /// The plugins that draw, taken once the initial scan is done.
    snapshot: Option<Arc<crate::plugins::Snapshot>>,
    session_id: String,
    cwd: String,
    /// The calls whose first card was drawn, for their final card.
    calls: HashMap<ToolCallId, (Arc<LoadedPlugin>, Arc<PluginCall>)>,
    /// A part took too long or failed: the logged cards are shown from there on.
    gave_up: bool,
}

/// A card to draw: its place in the part, the plugin, the call, the output for a final card.
type Drawing = (usize, Arc<LoadedPlugin>, Arc<PluginCall>, Option<PluginOutput>);

impl Presenter {
    pub(crate) fn new(
        registry: &Arc<Registry>,
        id: &crate::session::SessionId,
        cwd: &std::path::Path,
    ) -> Self {
        Self {
            registry: Arc::clone(registry),
            snapshot: None,
            session_id: id.0.clone(),
            cwd: cwd.to_string_lossy().into_owned(),
            calls: HashMap::new(),
            gave_up: false,
        }
    }

    /// `view` (the next part of the thread) with its cards drawn anew.
    pub(crate) async fn draw(&mut self, mut view: Vec<SessionEvent>) -> Vec<SessionEvent> {
        if self.gave_up {
            return view;
        }
        let snapshot = match &self.snapshot {
            Some(snapshot) => Arc::clone(snapshot),
            None => {
                if tokio::time::timeout(PRESENT_TIMEOUT, self.registry.ready()).await.is_err() {
                    tracing::warn!(
                        "the plugins did not load in time to draw cards again; showing the logged ones"
                    );
                    self.gave_up = true;
                    return view;
                }
                Arc::clone(self.snapshot.insert(self.registry.snapshot()))
            }
        };
        let jobs = self.drawings(&snapshot, &view);
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
                self.gave_up = true;
                return view;
            }
            Err(_) => {
                tracing::warn!("drawing cards again took too long; showing the logged ones");
                self.gave_up = true;
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

    /// The cards of `view` a plugin draws.
    fn drawings(
        &mut self,
        snapshot: &crate::plugins::Snapshot,
        view: &[SessionEvent],
    ) -> Vec<Drawing> {
        let mut jobs = Vec::new();
        for (index, event) in view.iter().enumerate() {
            match event {
                SessionEvent::ToolCallStarted { call_id, tool, arguments, .. } => {
                    let Some(plugin) = snapshot.find_tool(tool) else { continue };
                    let call = Arc::new(PluginCall {
                        call_id: call_id.0.clone(),
                        session_id: self.session_id.clone(),
                        tool: tool.clone(),
                        arguments: arguments.clone(),
                        cwd: self.cwd.clone(),
                    });
                    jobs.push((index, Arc::clone(&plugin), Arc::clone(&call), None));
                    self.calls.insert(call_id.clone(), (plugin, call));
                }
                SessionEvent::ToolCallFinished {
                    call_id,
                    raw_output,
                    output_text: Some(text),
                    ..
                } => {
                    let Some((plugin, call)) = self.calls.get(call_id) else { continue };
                    let output = PluginOutput {
                        text: text.clone(),
                        raw_output: raw_output.text().to_owned(),
                    };
                    jobs.push((index, Arc::clone(plugin), Arc::clone(call), Some(output)));
                }
                _ => {}
            }
        }
        jobs
    }
}

impl hotsh_core::usecase::Presenter for Presenter {
    fn present(&mut self, view: Vec<SessionEvent>) -> BoxFuture<'_, Vec<SessionEvent>> {
        Box::pin(self.draw(view))
    }
}

/// Carries what the host added to a logged card (why a command ended) over to a card drawn
/// anew.
fn keep_host_notes(logged: &Card, fresh: &mut Card) {
    if let (Card::Terminal(logged), Card::Terminal(fresh)) = (logged, fresh)
        && let (Some(logged), Some(fresh)) = (&logged.exit, &mut fresh.exit)
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
