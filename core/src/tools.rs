//! The tool router: the tools a turn offers and runs come from ordered **providers** (the
//! host's plugins and a session's MCP servers are two equal ones). A provider says what its
//! tools do ([`ToolEffects`](crate::model::ToolEffects)); the router decides from that, never
//! from a tool's name, what is offered when.
//!
//! Every call passes a **hook chain** ([`CallHook`]) on its way: each hook, in order, may
//! answer a call before it runs (it then does not run) and sees every result after. The
//! router's own hooks refuse a tool the router hid from the request ([`HiddenStayHidden`]:
//! plan mode's limit holds for a model that calls a hidden tool anyway) and write the
//! session's log out once a call's card has closed ([`FlushAfterCall`]), whichever provider
//! ran it.

use crate::hooks::{Event, Hooks, Permission, Point};
use crate::model::{ModelToolCall, ToolDefinition};
use crate::session::{
    CallStatus, Card, GenericCard, OptionKind, Question, QuestionOption, Reply, Session,
    SessionEvent, ToolCallId, ToolKind,
};
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A section of the system prompt a provider contributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptSection {
    pub id: String,
    /// Sections are sorted by order, then id.
    pub order: u32,
    pub text: String,
}

/// One call, as its provider gets it: the card id is the session's, the arguments the
/// model's.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub session: &'a Arc<Session>,
    pub call_id: &'a ToolCallId,
    pub call: &'a ModelToolCall,
    /// The arguments as JSON (a string holding them when they are not JSON), for the card.
    pub raw_input: &'a serde_json::Value,
    pub cancel: &'a CancellationToken,
    /// The tool as the request the model answered offered it; `None`: it was not offered.
    pub offered: Option<&'a ToolDefinition>,
    /// A provider serves the tool, but the router hid it from the request (plan mode
    /// without a backend that confines commands hides the tools that run them).
    pub hidden: bool,
}

/// A step every call passes, before and after it runs (see the module's documentation).
pub trait CallHook: Send + Sync {
    /// `Some(text)` refuses the call: it does not run, its card shows it failed, and the
    /// model gets `text` as the tool's error.
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Option<String>> {
        let _ = call;
        Box::pin(async { None })
    }

    /// The call ran (or was refused) with `result`.
    fn after<'a>(&'a self, call: Call<'a>, result: &'a CallResult) -> BoxFuture<'a, ()> {
        let _ = (call, result);
        Box::pin(async {})
    }
}

/// Refuses a call of a tool the router hid from the request ([`Call::hidden`]).
#[derive(Debug, Clone, Copy)]
pub struct HiddenStayHidden;

impl CallHook for HiddenStayHidden {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Option<String>> {
        let refused = call.hidden.then(|| {
            format!(
                "tool `{}` is not offered in plan mode (no sandbox here can keep the commands \
                 it runs read-only), so nothing was run; use one of the tools offered",
                call.call.name
            )
        });
        Box::pin(async move { refused })
    }
}

/// Refuses a call of a tool outside the ones a subagent's agent definition lists.
#[derive(Debug, Clone)]
pub struct OnlyTools(pub Vec<String>);

impl CallHook for OnlyTools {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Option<String>> {
        let refused = (!self.0.contains(&call.call.name)).then(|| {
            format!(
                "tool `{}` is not one this agent may use (its definition lists: {}), so nothing was run",
                call.call.name,
                self.0.join(", ")
            )
        });
        Box::pin(async move { refused })
    }
}

/// Writes the session's log out once a call's card has closed, so what the user saw of the
/// call survives the agent being killed right after.
#[derive(Debug, Clone, Copy)]
pub struct FlushAfterCall;

impl CallHook for FlushAfterCall {
    fn after<'a>(&'a self, call: Call<'a>, _result: &'a CallResult) -> BoxFuture<'a, ()> {
        Box::pin(call.session.flush_or_warn())
    }
}

/// What [`ToolRouter::call`] gave: the call's result, the arguments it ran with (a hook may
/// have rewritten the model's), and why a hook said the turn must end (`"continue": false`),
/// if one did.
#[derive(Debug, Clone, PartialEq)]
pub struct Called {
    pub result: CallResult,
    pub input: serde_json::Value,
    pub halt: Option<String>,
}

/// What a call gives the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallResult {
    pub text: String,
    pub is_error: bool,
}

/// Where tools come from.
pub trait ToolProvider: Send + Sync {
    /// Gets ready for a turn's first request: what failed gets another chance, and it waits
    /// (boundedly) until its tools are known.
    fn prepare(&self) -> BoxFuture<'_, ()>;

    /// The tools it offers now; `planning`: the session is in plan mode.
    fn tools(&self, planning: bool) -> BoxFuture<'_, Vec<ToolDefinition>>;

    /// Its sections of the system prompt.
    fn prompt_sections(&self) -> Vec<PromptSection> {
        Vec::new()
    }

    /// Runs `call` when the tool is one of its own (drawing, running and closing its card):
    /// `None` when it is not. Nothing happens until the future is polled (a hook may refuse
    /// the call first).
    fn call<'a>(&'a self, call: Call<'a>) -> Option<BoxFuture<'a, CallResult>>;

    /// Stops what it runs (a session's own provider, when the session closes or gets new
    /// ones). Returns at once.
    fn close(&self) {}
}

/// A turn's providers, in order: tools are listed in this order, and a call goes to the first
/// provider that serves its name.
pub struct ToolRouter {
    providers: Vec<Arc<dyn ToolProvider>>,
    /// A backend can confine commands to read-only (plan mode may then offer tools that run
    /// commands).
    confines_commands: bool,
    hooks: Vec<Arc<dyn CallHook>>,
    /// The user's command hooks (`PreToolUse`).
    commands: Arc<dyn Hooks>,
    /// The names of the tools the last [`ToolRouter::offered`] hid.
    hidden: std::sync::Mutex<Vec<String>>,
    /// Only these tools are offered (a subagent's agent definition lists them).
    only: Option<Vec<String>>,
}

impl std::fmt::Debug for ToolRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRouter")
            .field("providers", &self.providers.len())
            .field("confines_commands", &self.confines_commands)
            .field("hooks", &self.hooks.len())
            .finish()
    }
}

impl ToolRouter {
    /// A router over `providers` with the router's own hooks ([`HiddenStayHidden`], then
    /// [`FlushAfterCall`]).
    pub fn new(providers: Vec<Arc<dyn ToolProvider>>, confines_commands: bool) -> Self {
        let hooks: Vec<Arc<dyn CallHook>> =
            vec![Arc::new(HiddenStayHidden), Arc::new(FlushAfterCall)];
        Self {
            providers,
            confines_commands,
            hooks,
            commands: Arc::new(crate::hooks::NoHooks),
            hidden: std::sync::Mutex::default(),
            only: None,
        }
    }

    /// Offers and runs only the tools named (a subagent's agent definition's list).
    pub fn with_only(mut self, names: Vec<String>) -> Self {
        self.hooks.push(Arc::new(OnlyTools(names.clone())));
        self.only = Some(names);
        self
    }

    /// Runs the user's `PreToolUse` hooks before every call.
    pub fn with_command_hooks(mut self, hooks: Arc<dyn Hooks>) -> Self {
        self.commands = hooks;
        self
    }

    /// Adds a hook after those there are.
    pub fn with_hook(mut self, hook: Arc<dyn CallHook>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Gets every provider ready, together.
    pub async fn prepare(&self) {
        futures::future::join_all(self.providers.iter().map(|p| p.prepare())).await;
    }

    /// Every provider's prompt sections, sorted by order, then id.
    pub fn prompt_sections(&self) -> Vec<PromptSection> {
        let mut sections: Vec<_> =
            self.providers.iter().flat_map(|p| p.prompt_sections()).collect();
        sections.sort_by(|a, b| (a.order, &a.id).cmp(&(b.order, &b.id)));
        sections
    }

    /// The tools the model is offered: every provider's, except that plan mode offers tools
    /// that run commands only while a backend can confine commands to read-only (otherwise
    /// none could run).
    pub async fn offered(&self, planning: bool) -> Vec<ToolDefinition> {
        let mut tools = Vec::new();
        for provider in &self.providers {
            tools.extend(provider.tools(planning).await);
        }
        if let Some(only) = &self.only {
            tools.retain(|tool| only.contains(&tool.name));
        }
        let mut hidden = Vec::new();
        if planning && !self.confines_commands {
            tools.retain(|tool| {
                let hide = tool.effects.runs_commands;
                if hide {
                    hidden.push(tool.name.clone());
                }
                !hide
            });
        }
        *crate::sync::lock(&self.hidden) = hidden;
        tools
    }

    /// Runs one call the model made in answer to a request that offered `offered`, through
    /// the hooks; an unknown tool gets a failed card and a message naming the tools there
    /// are.
    pub async fn call(
        &self,
        session: &Arc<Session>,
        call: &ModelToolCall,
        offered: &[ToolDefinition],
        cancel: &CancellationToken,
    ) -> Called {
        let call_id = session.next_call_id();
        let mut raw_input = serde_json::from_str(&call.arguments)
            .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
        let rewritten;
        let mut call = call;
        let mut refused = None;
        let mut halt = None;
        if self.commands.wants(Event::PreToolUse) {
            // What came before (the model's message with this call, the results before it)
            // is on disk before a hook that may take long runs: an agent killed meanwhile
            // comes back with it.
            session.flush_or_warn().await;
            let point = Point::pre_tool_use(&call.name, &raw_input, &call.id, &session.cwd);
            let verdict = self.commands.run(session, point, cancel).await;
            halt = verdict.halt.clone();
            if let Some(updated) = &verdict.updated_input {
                raw_input = crate::hooks::tool_input_from_hook(&call.name, updated);
                rewritten = ModelToolCall { arguments: raw_input.to_string(), ..call.clone() };
                call = &rewritten;
            }
            refused = match verdict.refusal() {
                Some(refusal) => Some(refusal),
                None if matches!(verdict.permission, Some((Permission::Ask, _))) => {
                    let reason = verdict.permission.map(|(_, reason)| reason).unwrap_or_default();
                    self.ask_for_hook(session, &call_id, call, &reason, cancel).await
                }
                None => None,
            };
        }
        let offered = offered.iter().find(|tool| tool.name == call.name);
        let hidden = offered.is_none() && crate::sync::lock(&self.hidden).contains(&call.name);
        let request = Call {
            session,
            call_id: &call_id,
            call,
            raw_input: &raw_input,
            cancel,
            offered,
            hidden,
        };
        let result = match refused {
            Some(text) => {
                fail_without_running(request, &text).await;
                CallResult { text, is_error: true }
            }
            None => self.run_hooked(request).await,
        };
        for hook in &self.hooks {
            hook.after(request, &result).await;
        }
        Called { result, input: raw_input, halt }
    }

    /// A hook said to ask the user about the call: `None` when the user allowed it, else why
    /// it does not run.
    async fn ask_for_hook(
        &self,
        session: &Arc<Session>,
        call_id: &ToolCallId,
        call: &ModelToolCall,
        reason: &str,
        cancel: &CancellationToken,
    ) -> Option<String> {
        let option = |id: &str, label: &str, kind| QuestionOption {
            id: id.to_owned(),
            label: label.to_owned(),
            kind,
        };
        let why = if reason.is_empty() { "(it gave no reason)" } else { reason };
        let question = Question {
            call_id: format!("{}-ask", call_id.0),
            title: format!("A hook asks before `{}` runs", call.name),
            intro: "A PreToolUse hook asks whether this call may run.".to_owned(),
            quoted: vec![
                ("The hook says".to_owned(), why.to_owned()),
                (format!("The arguments of `{}`", call.name), call.arguments.clone()),
            ],
            options: vec![
                option("allow", "Allow", OptionKind::AllowOnce),
                option("reject", "Reject", OptionKind::RejectOnce),
            ],
        };
        match session.ask(question, cancel).await {
            Reply::Chose(id) if id == "allow" => None,
            Reply::Chose(_) => Some(format!(
                "the user refused this call (a PreToolUse hook asked them: {why}); nothing was run"
            )),
            Reply::Cancelled => Some("the call was cancelled while the user was asked".to_owned()),
            Reply::Unavailable => Some(format!(
                "a PreToolUse hook asked for the user's approval ({why}), and no client can ask them; nothing was run"
            )),
        }
    }

    /// Runs `request` unless a hook refuses it: a tool no provider serves is unknown, one
    /// that is served but not offered is the hooks' to refuse.
    async fn run_hooked(&self, request: Call<'_>) -> CallResult {
        let running = self.providers.iter().find_map(|provider| provider.call(request));
        let Some(running) = running else { return self.unknown(request).await };
        for hook in &self.hooks {
            if let Some(text) = hook.before(request).await {
                drop(running);
                fail_without_running(request, &text).await;
                return CallResult { text, is_error: true };
            }
        }
        running.await
    }

    /// A call of a tool no provider serves.
    async fn unknown(&self, request: Call<'_>) -> CallResult {
        let call = request.call;
        let mut names = Vec::new();
        for provider in &self.providers {
            names.extend(provider.tools(false).await.into_iter().map(|t| t.name));
        }
        let text = if names.is_empty() {
            format!("unknown tool `{}`: no tools are loaded", call.name)
        } else {
            format!("unknown tool `{}`; the tools are: {}", call.name, names.join(", "))
        };
        fail_without_running(request, &text).await;
        CallResult { text, is_error: true }
    }
}

/// The card of a call nothing draws better.
pub fn plain_card(tool: &str) -> Card {
    Card::generic(GenericCard::new(tool, ToolKind::Other, None))
}

/// Shows (and logs) the card of a call that starts.
pub async fn open_card(call: Call<'_>, card: Card) {
    call.session
        .emit(SessionEvent::ToolCallStarted {
            call_id: call.call_id.clone(),
            tool: call.call.name.clone(),
            card,
            raw_input: call.raw_input.into(),
            arguments: call.call.arguments.clone(),
        })
        .await;
    // On disk before the tool runs (the model's message with it too): an agent killed while
    // it runs comes back with the call's card, closed as cut off.
    call.session.flush_or_warn().await;
}

/// Closes a call's card as failed, carrying the text the model got.
pub async fn finish_failed(session: &Session, call_id: &ToolCallId, card: Card, text: &str) {
    session
        .emit(SessionEvent::ToolCallFinished {
            call_id: call_id.clone(),
            card,
            status: CallStatus::Failed,
            raw_output: serde_json::json!({ "error": text }).into(),
            error: Some(text.to_owned()),
            output_text: None,
            output_in_result: false,
        })
        .await;
}

/// Shows a call that could not run at all (an unknown tool, a server that is down) as a
/// failed card.
pub async fn fail_without_running(call: Call<'_>, text: &str) {
    let card = plain_card(&call.call.name);
    open_card(call, card.clone()).await;
    finish_failed(call.session, call.call_id, card, text).await;
}
