//! Subagents: the `task` tool, the third tool provider beside the plugins and a session's MCP
//! servers. A call opens a **child session** through the use cases (`usecase::open_child`):
//! its own log, linked to the parent's session and card; the parent's folder; never a wider
//! sandbox than the parent's; the parent's tools (an agent definition may list fewer), and the
//! `task` tool itself only while the nesting depth allows. The child answers the task as one
//! turn, and its final answer is the call's result.
//!
//! The client sees the child as ACP shows subagents when it says it can (`subagents`): a
//! `subagent_update` on the parent, then the child's own updates under its own session id,
//! and the parent's card linked to it. Otherwise the parent's card says what the child does.
//! Either way the user is asked on the parent's thread, on the card of the call, naming the
//! child: that is the thread the user is looking at.
//!
//! When its turn ends the child is closed: its background tasks end with it (the call's
//! result names any that were stopped), and its log stays, to be loaded on its own or with
//! its parent's.

use crate::agents::AgentDef;
use crate::host::Host;
use crate::session::{
    CallStatus, Card, EscalationAnswer, EscalationAsk, EventSink, GenericCard, ParentLink, Prompt,
    Question, Reply, Session, SessionEvent, SessionId, StopReason, SubagentState, ToolCallId,
    ToolKind,
};
use futures::future::BoxFuture;
use hotsh_core::hooks::{Event, Hooks as _, Point};
use hotsh_core::model::{Message, ToolDefinition, ToolEffects};
use hotsh_core::tools::{Call, CallResult, ToolProvider};
use hotsh_core::usecase;
use std::sync::{Arc, Mutex};

/// The tool's name (Claude Code's `Task`, as hooks see it).
pub(crate) const TOOL: &str = "task";

/// The default bound of subagents running at once, in the whole agent.
pub(crate) const DEFAULT_PARALLEL: usize = 4;
/// The default depth: a session's subagents cannot start their own.
pub(crate) const DEFAULT_DEPTH: u32 = 1;

/// The `task` tool of one turn of one session.
pub(crate) struct SubagentTool {
    pub(crate) host: Arc<Host>,
    /// The session whose turn offers it.
    pub(crate) session: SessionId,
    /// How deep that session is (0: a session the user opened).
    pub(crate) depth: u32,
    /// The turn's hooks (`SubagentStart`, `SubagentStop`; the agent definitions).
    pub(crate) hooks: Arc<crate::hooks::TurnHooks>,
}

/// What the model gives the tool (Claude Code's `Task` arguments).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskArgs {
    description: String,
    prompt: String,
    #[serde(default)]
    subagent_type: Option<String>,
}

impl SubagentTool {
    /// The agents its subagents may run now.
    fn agents(&self) -> Vec<AgentDef> {
        self.host.session(&self.session).map(|s| self.hooks.agents(&s)).unwrap_or_default()
    }

    fn definition(&self, agents: &[AgentDef]) -> ToolDefinition {
        let mut description = String::from(
            "Hands a task to a subagent: a new session with its own context that works on it \
             with the same tools (and this session's sandbox at most) and returns its final \
             answer. Use it for work that needs many steps or much reading whose details this \
             conversation does not need (searching a codebase, a review, an investigation), \
             or for independent tasks: several calls in one answer run at the same time. The \
             subagent sees only the prompt, not this conversation: say everything it needs, \
             and what its answer must contain.",
        );
        let mut agent = serde_json::json!({
            "type": "string",
            "description": "The agent definition to run (one of those listed); omit for a general-purpose subagent."
        });
        if !agents.is_empty() {
            description.push_str("\n\nAgents (`subagent_type`):");
            for def in agents {
                description.push_str(&format!("\n- {}: {}", def.name, def.description));
            }
            let names: Vec<&str> = agents.iter().map(|def| def.name.as_str()).collect();
            agent["enum"] = serde_json::json!(names);
        }
        ToolDefinition {
            name: TOOL.to_owned(),
            description,
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "description": {"type": "string", "description": "A short (3 to 5 words) description of the task, its thread's title."},
                    "prompt": {"type": "string", "description": "The task, complete: the subagent knows nothing else."},
                    "subagent_type": agent,
                },
                "required": ["description", "prompt"],
                "additionalProperties": false,
            })
            .into(),
            effects: ToolEffects { runs_commands: true, writes_files: true, concurrent: true },
        }
    }

    /// Runs one call: the child opened, its turn answered, its answer returned.
    async fn run(&self, call: Call<'_>) -> CallResult {
        let args = match serde_json::from_str::<TaskArgs>(&call.call.arguments) {
            Ok(args) if !args.prompt.trim().is_empty() => args,
            Ok(_) => return refuse(call, "the task's `prompt` is empty: say what to do").await,
            Err(error) => {
                let text = format!(
                    "wrong arguments for `{TOOL}`: {error}; it takes `description`, `prompt` and optionally `subagent_type`"
                );
                return refuse(call, &text).await;
            }
        };
        let agents = self.agents();
        let agent = match &args.subagent_type {
            None => None,
            Some(name) if name.is_empty() || name == "general-purpose" => None,
            Some(name) => match agents.iter().find(|def| &def.name == name) {
                Some(def) => Some(def.clone()),
                None => {
                    let known: Vec<&str> = agents.iter().map(|def| def.name.as_str()).collect();
                    let text = if known.is_empty() {
                        format!(
                            "there is no agent `{name}`: no agents are defined; omit `subagent_type`"
                        )
                    } else {
                        format!("there is no agent `{name}`; the agents are: {}", known.join(", "))
                    };
                    return refuse(call, &text).await;
                }
            },
        };
        if self.depth >= self.host.subagents.max_depth {
            let text = format!(
                "subagents may not start subagents here (`[subagents] max_depth` is {})",
                self.host.subagents.max_depth
            );
            return refuse(call, &text).await;
        }
        let parent = Arc::clone(call.session);
        let name = agent.as_ref().map_or("general-purpose", |def| def.name.as_str()).to_owned();
        let title = args.description.trim().to_owned();
        // A slot first: a subagent waiting for one has nothing open yet.
        let slot = tokio::select! {
            slot = Arc::clone(&self.host.subagents.slots).acquire_owned() => slot.ok(),
            () = call.cancel.cancelled() => None,
        };
        let Some(_slot) = slot else {
            return refuse(call, "[not run: the user cancelled the turn]").await;
        };
        let link = ParentLink {
            session_id: parent.id.0.clone(),
            call_id: call.call_id.0.clone(),
            agent: agent.as_ref().map(|def| def.name.clone()),
            description: title.clone(),
            depth: self.depth + 1,
            max_mode: None,
            tools: agent.as_ref().and_then(|def| def.tools.clone()),
            instructions: agent.as_ref().map(|def| def.prompt.clone()).filter(|p| !p.is_empty()),
        };
        let who = format!("Subagent `{name}` ({title})");
        // The child's id is known once it is created; its port is made then, with the
        // client's own port for it when the client shows child threads.
        let sink = Arc::new(ChildSink {
            parent: Arc::clone(&parent),
            call_id: call.call_id.clone(),
            who: who.clone(),
            title: title.clone(),
            agent: agent.as_ref().map(|def| def.name.clone()),
            child: Mutex::new(None),
            own: Mutex::new(None),
            steps: Mutex::new(0),
        });
        let model = agent.as_ref().and_then(|def| def.model.clone());
        let opened = usecase::open_child(
            &*self.host,
            &parent,
            link,
            model,
            Arc::clone(&sink) as Arc<dyn EventSink>,
        )
        .await;
        let child = match opened {
            Ok(child) => child,
            Err(refused) => {
                return refuse(call, &format!("the subagent could not be opened: {refused}")).await;
            }
        };
        *crate::sync::lock(&sink.child) = Some(child.id.clone());
        if let Some(client) = parent.sink() {
            *crate::sync::lock(&sink.own) = client.child(&child.id);
        }
        let mut card = GenericCard::new(who.clone(), ToolKind::Think, None);
        card.session = Some(child.id.clone());
        hotsh_core::tools::open_card(call, Card::generic(card.clone())).await;
        if let Some(running) = sink.state(SubagentState::Running) {
            parent.emit(running).await;
        }
        // On disk before the child runs: an agent killed meanwhile comes back knowing it.
        parent.flush_or_warn().await;
        tracing::info!(parent = %parent.id, child = %child.id, agent = %name, "subagent started");
        let mut prompt = args.prompt.clone();
        let started = self.hook(&parent, Event::SubagentStart, &name, &child, call.cancel);
        let context = started.await.context;
        if !context.is_empty() {
            prompt.push_str("\n\n");
            prompt.push_str(&context.join("\n\n"));
        }
        let mut stop = self.answer(&child, &sink, prompt, call.cancel).await;
        // A SubagentStop hook may keep it going, once.
        if matches!(stop, Ok(StopReason::EndTurn)) && !call.cancel.is_cancelled() {
            let stopping = self.hook(&parent, Event::SubagentStop, &name, &child, call.cancel);
            if let Some(reason) = stopping.await.block {
                let again = format!("[a SubagentStop hook did not let you stop yet: {reason}]");
                stop = self.answer(&child, &sink, again, call.cancel).await;
            }
        }
        let answer = final_answer(&child);
        let stopped = self.host.tasks_of(&child.id);
        self.host.close_session(&child.id).await;
        let (stop_name, failed) = match &stop {
            Ok(StopReason::EndTurn) => ("end_turn".to_owned(), false),
            Ok(StopReason::Cancelled) => ("cancelled".to_owned(), true),
            Ok(StopReason::MaxTurnRequests) => ("max_turn_requests".to_owned(), false),
            Err(_) => ("failed".to_owned(), true),
        };
        if let Some(idle) = sink.state(SubagentState::Idle { stop: stop_name.clone() }) {
            parent.emit(idle).await;
        }
        tracing::info!(parent = %parent.id, child = %child.id, stop = %stop_name, "subagent ended");
        let mut text = match (&stop, answer) {
            (Err(failed), _) => format!("[the subagent failed: {}]", failed.message),
            (Ok(StopReason::Cancelled), _) => "[the subagent was cancelled]".to_owned(),
            (Ok(_), Some(answer)) => answer,
            (Ok(_), None) => "[the subagent ended without an answer]".to_owned(),
        };
        if matches!(stop, Ok(StopReason::MaxTurnRequests)) {
            text.push_str("\n\n[the subagent reached its turn's request limit before it finished]");
        }
        if !stopped.is_empty() {
            text.push_str(&format!(
                "\n\n[background tasks the subagent left running were stopped when it ended: {}]",
                stopped.join(", ")
            ));
        }
        card.content = Some(text.clone());
        parent
            .emit(SessionEvent::ToolCallFinished {
                call_id: call.call_id.clone(),
                card: Card::generic(card),
                status: if failed { CallStatus::Failed } else { CallStatus::Completed },
                raw_output: serde_json::json!({"sessionId": child.id.0, "stopReason": stop_name})
                    .into(),
                error: None,
                output_text: None,
                output_in_result: false,
            })
            .await;
        CallResult { text, is_error: failed }
    }

    /// Runs one turn of `child` on `prompt`; cancelling the parent's turn cancels it (its
    /// commands with it), and the turn's end is awaited.
    async fn answer(
        &self,
        child: &Arc<Session>,
        sink: &ChildSink,
        prompt: String,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<StopReason, hotsh_core::turn::TurnFailed> {
        // The task is the child thread's user message: shown now (no client sent it), and
        // again on load (its log keeps it as the prompt's block).
        let block = serde_json::json!({"type": "text", "text": prompt});
        if let Some(own) = sink.own() {
            own.emit(SessionEvent::UserMessage { block: block.clone() });
        }
        let prompt = Prompt { text: prompt, blocks: vec![block], images: Vec::new() };
        let admitted = usecase::admit(&*self.host, child, prompt)
            .await
            .map_err(|refused| hotsh_core::turn::TurnFailed::new(refused.to_string()))?;
        let answering = usecase::answer(&*self.host, child, admitted);
        tokio::pin!(answering);
        tokio::select! {
            outcome = &mut answering => return outcome,
            () = cancel.cancelled() => {}
        }
        usecase::cancel(child).await;
        answering.await
    }

    /// Runs the parent's `SubagentStart` or `SubagentStop` hooks about `child`.
    async fn hook(
        &self,
        parent: &Arc<Session>,
        event: Event,
        agent: &str,
        child: &Session,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> hotsh_core::hooks::Verdict {
        if !self.hooks.wants(event) {
            return hotsh_core::hooks::Verdict::default();
        }
        let mut fields = serde_json::json!({"agent_id": child.id.0, "agent_type": agent});
        if event == Event::SubagentStop {
            // It runs once per subagent: a block makes the child go on once, unasked again.
            fields["stop_hook_active"] = serde_json::json!(false);
            if let Some(path) = self.host.log_path(&child.id) {
                fields["agent_transcript_path"] = serde_json::json!(path);
            }
        }
        self.hooks.run(parent, Point::new(event, agent, fields), cancel).await
    }
}

/// Shows a call that cannot run as a failed card; the model gets `text`.
async fn refuse(call: Call<'_>, text: &str) -> CallResult {
    hotsh_core::tools::fail_without_running(call, text).await;
    CallResult { text: text.to_owned(), is_error: true }
}

/// The child's last answer to the model's last request: the text of its last assistant
/// message after the last prompt.
fn final_answer(child: &Session) -> Option<String> {
    let messages = child.messages();
    messages.iter().rev().take_while(|m| !matches!(m.as_ref(), Message::User { .. })).find_map(
        |message| match message.as_ref() {
            Message::Assistant { text, .. } if !text.trim().is_empty() => Some(text.clone()),
            _ => None,
        },
    )
}

impl ToolProvider for SubagentTool {
    fn prepare(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    fn tools(&self, _planning: bool) -> BoxFuture<'_, Vec<ToolDefinition>> {
        let tools = match self.depth < self.host.subagents.max_depth {
            true => vec![self.definition(&self.agents())],
            false => Vec::new(),
        };
        Box::pin(async move { tools })
    }

    fn call<'a>(&'a self, call: Call<'a>) -> Option<BoxFuture<'a, CallResult>> {
        (call.call.name == TOOL).then(|| Box::pin(self.run(call)) as BoxFuture<'a, CallResult>)
    }
}

/// A subagent's client port: its events go to the client's own port for it (a client that
/// shows child threads), or are summed up on the parent's card; what it asks the user is
/// asked on the parent's thread, on that card, naming the subagent.
struct ChildSink {
    parent: Arc<Session>,
    /// The parent's card of the call that runs the subagent.
    call_id: ToolCallId,
    /// The subagent, in words.
    who: String,
    /// The task's description and the agent it runs.
    title: String,
    agent: Option<String>,
    /// The child, once it is open.
    child: Mutex<Option<SessionId>>,
    /// The client's port for the child's thread, when it shows child threads.
    own: Mutex<Option<Arc<dyn EventSink>>>,
    /// Tool calls so far (the summary counts them).
    steps: Mutex<u32>,
}

impl ChildSink {
    fn own(&self) -> Option<Arc<dyn EventSink>> {
        crate::sync::lock(&self.own).clone()
    }

    /// The subagent's state as the parent logs and shows it (`None` before it is open).
    fn state(&self, state: SubagentState) -> Option<SessionEvent> {
        let child = crate::sync::lock(&self.child).clone()?;
        Some(SessionEvent::Subagent {
            call_id: self.call_id.clone(),
            child,
            title: self.title.clone(),
            agent: self.agent.clone(),
            state,
        })
    }

    /// Runs `asking` (a question to the user) with the subagent shown as waiting for the user
    /// meanwhile.
    fn waiting<T: Send + 'static>(&self, asking: BoxFuture<'static, T>) -> BoxFuture<'static, T> {
        let parent = Arc::clone(&self.parent);
        let (waits, goes_on) =
            (self.state(SubagentState::RequiresAction), self.state(SubagentState::Running));
        Box::pin(async move {
            if let Some(event) = waits {
                parent.emit(event).await;
            }
            let answer = asking.await;
            if let Some(event) = goes_on {
                parent.emit(event).await;
            }
            answer
        })
    }
}

impl EventSink for ChildSink {
    fn emit(&self, event: SessionEvent) {
        if let Some(own) = self.own() {
            return own.emit(event);
        }
        let Some(parent) = self.parent.sink() else { return };
        let line = match &event {
            SessionEvent::ToolCallStarted { card, .. } => {
                let mut steps = crate::sync::lock(&self.steps);
                *steps += 1;
                format!("{}: step {}: {}", self.who, *steps, card.title())
            }
            SessionEvent::AgentText { .. } => format!("{}: answering", self.who),
            _ => return,
        };
        parent.emit(SessionEvent::SubagentProgress { call_id: self.call_id.clone(), text: line });
    }

    fn room(&self) -> BoxFuture<'static, ()> {
        match self.own().or_else(|| self.parent.sink()) {
            Some(sink) => sink.room(),
            None => Box::pin(async {}),
        }
    }

    fn mode_changed(&self, mode: &str) {
        if let Some(own) = self.own() {
            own.mode_changed(mode);
        }
    }

    fn title_changed(&self, title: &str) {
        if let Some(own) = self.own() {
            own.title_changed(title);
        }
    }

    fn ask_escalation(&self, ask: EscalationAsk) -> BoxFuture<'static, EscalationAnswer> {
        let Some(parent) = self.parent.sink() else {
            return Box::pin(async { EscalationAnswer::Unavailable });
        };
        let ask = EscalationAsk {
            call_id: self.call_id.0.clone(),
            asked_by: Some(self.who.clone()),
            ..ask
        };
        self.waiting(parent.ask_escalation(ask))
    }

    fn ask(&self, question: Question) -> BoxFuture<'static, Reply> {
        let Some(parent) = self.parent.sink() else {
            return Box::pin(async { Reply::Unavailable });
        };
        let question = Question {
            call_id: self.parent.next_call_id().0,
            title: format!("{}: {}", self.who, question.title),
            ..question
        };
        self.waiting(parent.ask(question))
    }

    fn child(&self, child: &SessionId) -> Option<Arc<dyn EventSink>> {
        self.own().and_then(|own| own.child(child))
    }

    fn client_fs(&self) -> crate::session::ClientFs {
        self.parent.sink().map(|sink| sink.client_fs()).unwrap_or_default()
    }

    fn read_text_file(
        &self,
        path: std::path::PathBuf,
    ) -> BoxFuture<'static, Result<String, String>> {
        match self.parent.sink() {
            Some(sink) => sink.read_text_file(path),
            None => Box::pin(async { Err("no client is attached".to_owned()) }),
        }
    }

    fn write_text_file(
        &self,
        path: std::path::PathBuf,
        text: String,
    ) -> BoxFuture<'static, Result<(), String>> {
        match self.parent.sink() {
            Some(sink) => sink.write_text_file(path, text),
            None => Box::pin(async { Err("no client is attached".to_owned()) }),
        }
    }
}
