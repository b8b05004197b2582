//! MCP servers: the tools a user configured (in Zed or in hotsh's config file) are the
//! agent's tools too.
//!
//! Each session has its [`Servers`]. They connect in the background when the session starts
//! (`session/new` never waits for them); a turn's first model request waits for servers still
//! connecting, up to [`Limits::turn_wait`]. A connected server's tools are offered as
//! `mcp__<server>__<tool>` beside the plugins' tools. A stdio server is started by the
//! executor under a shim (it dies with the host however the host dies); the MCP client is
//! `rmcp` over its pipes, or over streamable HTTP.
//!
//! A server that fails (does not start, exits, does not answer a call in time, breaks the
//! protocol) is dropped from the session with one card saying why; the session goes on, and
//! the next prompt tries it again.

mod render;
mod replay;
mod spec;
mod stdout;

pub(crate) use replay::Recording;
pub(crate) use spec::{Limits, McpConfig, ServerSpec, Transport, merge};

use crate::executor::{Executor, ServiceControl, ServiceRequest};
use crate::model::ToolDefinition;
use crate::session::{Session, SessionEvent, ToolKind};
use crate::sync::lock;
use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, Implementation, ProtocolVersion};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningServiceCancellationToken};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A live rmcp client session.
type Running = rmcp::service::RunningService<RoleClient, Handler>;

/// The longest tool name models accept.
const MAX_TOOL_NAME: usize = 64;

/// The MCP servers of one session.
#[derive(Debug)]
pub(crate) struct Servers {
    session: Arc<Session>,
    executor: Arc<Executor>,
    limits: Limits,
    servers: Vec<Arc<Server>>,
    /// Where servers' answers are recorded (an arc), when they are.
    recorder: Option<Arc<crate::arc::Recorder>>,
    /// Answers recorded in an arc, served instead of the servers (`hotsh replay`).
    replay: Option<Arc<Recording>>,
    /// How many servers are connecting.
    connecting: watch::Sender<usize>,
    closed: AtomicBool,
}

/// One server and where it stands.
#[derive(Debug)]
struct Server {
    spec: ServerSpec,
    /// `mcp__<name>__`, the name made safe and unique in the session.
    prefix: String,
    state: Mutex<State>,
    /// The failure last shown to the user (a card once per distinct failure).
    reported: Mutex<Option<String>>,
}

#[derive(Debug)]
enum State {
    Connecting,
    Ready(Arc<Connection>),
    Failed(String),
    Closed,
}

/// A live connection to a server.
struct Connection {
    /// `None` for answers replayed from an arc.
    peer: Option<Peer<RoleClient>>,
    /// Ends the MCP session (taken on close).
    cancel: Mutex<Option<RunningServiceCancellationToken>>,
    process: Option<ServiceControl>,
    /// Where a stdio server's first line that is not JSON shows up.
    malformed: Option<Arc<stdout::Malformed>>,
    tools: Mutex<Vec<Tool>>,
    /// The server said its tool list changed: list again before the next model request.
    stale: Arc<AtomicBool>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("tools", &lock(&self.tools)).finish_non_exhaustive()
    }
}

/// A server's tool as offered to the model.
#[derive(Debug, Clone, PartialEq)]
struct Tool {
    definition: ToolDefinition,
    /// Its name on the server.
    remote: String,
    /// What its card is titled.
    title: String,
    read_only: bool,
}

/// A tool call's outcome.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CallOutcome {
    /// What the model reads and the card shows.
    pub(crate) text: String,
    pub(crate) is_error: bool,
    /// The result (binary data replaced by its size) or the error, for `rawOutput`.
    pub(crate) raw: serde_json::Value,
}

impl CallOutcome {
    /// A call that failed, for this reason (the model's text, the card's, and `rawOutput`).
    pub(crate) fn failure(text: String) -> Self {
        Self { raw: serde_json::json!({ "error": text }), text, is_error: true }
    }
}

/// A tool the model called, found.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    server: Arc<Server>,
    connection: Arc<Connection>,
    tool: Tool,
}

impl Found {
    /// The card the call opens with: the server and the tool's title, kind read when the
    /// server says the tool only reads.
    pub(crate) fn card(&self) -> crate::session::GenericCard {
        let kind = if self.tool.read_only { ToolKind::Read } else { ToolKind::Other };
        crate::session::GenericCard::new(
            format!("{}: {}", self.server.spec.name, self.tool.title),
            kind,
            None,
        )
    }
}

/// Receives what a server tells the client on its own.
#[derive(Debug, Clone)]
struct Handler {
    server: String,
    stale: Arc<AtomicBool>,
}

impl rmcp::ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.stale.store(true, Ordering::SeqCst);
        tracing::info!(server = %self.server, "MCP server says its tools changed");
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        // The `initialize` handshake at the newest version that has one: every server in use
        // speaks it (rmcp negotiates down with older ones).
        rmcp::model::ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("hotsh", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

impl Servers {
    /// The servers of `session`, connecting in the background from now on.
    pub(crate) fn start(
        session: Arc<Session>,
        executor: Arc<Executor>,
        setup: &McpSetup,
        recorder: Option<Arc<crate::arc::Recorder>>,
        specs: Vec<ServerSpec>,
    ) -> Arc<Self> {
        let mut prefixes: Vec<String> = Vec::new();
        let servers = specs
            .into_iter()
            .map(|spec| {
                let base = format!("mcp__{}__", server_part(&spec.name));
                let mut prefix = base.clone();
                for n in 2.. {
                    if !prefixes.contains(&prefix) {
                        break;
                    }
                    prefix = format!("{}_{n}__", base.trim_end_matches("__"));
                }
                prefixes.push(prefix.clone());
                Arc::new(Server {
                    spec,
                    prefix,
                    state: Mutex::new(State::Failed("not started".to_owned())),
                    reported: Mutex::new(None),
                })
            })
            .collect();
        let this = Arc::new(Self {
            session,
            executor,
            limits: setup.limits,
            servers,
            recorder,
            replay: setup.replay.clone(),
            connecting: watch::channel(0).0,
            closed: AtomicBool::new(false),
        });
        this.retry_failed();
        this
    }

    /// Starts connecting every server that is not connected (a later prompt's retry).
    pub(crate) fn retry_failed(self: &Arc<Self>) {
        for server in &self.servers {
            {
                let mut state = lock(&server.state);
                if !matches!(*state, State::Failed(_)) || self.closed.load(Ordering::SeqCst) {
                    continue;
                }
                *state = State::Connecting;
            }
            self.connecting.send_modify(|n| *n += 1);
            let (this, server) = (Arc::clone(self), Arc::clone(server));
            tokio::spawn(async move {
                let started = Instant::now();
                let outcome = this.connect(&server).await;
                match outcome {
                    Ok((connection, running)) => {
                        let tools = lock(&connection.tools).len();
                        tracing::info!(
                            server = %server.spec.name,
                            tools,
                            ms = started.elapsed().as_secs_f64() * 1000.0,
                            "MCP server connected"
                        );
                        this.connected(&server, Arc::clone(&connection)).await;
                        // Watched once it is in the state: an end seen now drops it.
                        if let Some(running) = running {
                            this.watch(&server, connection, running);
                        }
                    }
                    Err(message) => this.failed(&server, None, message).await,
                }
                // Only now: a turn waiting for the servers finds this one in its new state.
                this.connecting.send_modify(|n| *n = n.saturating_sub(1));
            });
        }
    }

    /// Waits until no server is connecting, or `limits.turn_wait` has passed.
    pub(crate) async fn settle(&self) {
        let mut connecting = self.connecting.subscribe();
        let _ = tokio::time::timeout(self.limits.turn_wait, connecting.wait_for(|n| *n == 0)).await;
    }

    /// The tools of the connected servers (listed again where a server said they changed);
    /// with `read_only`, only those the server marks as only reading.
    pub(crate) async fn tool_definitions(&self, read_only: bool) -> Vec<ToolDefinition> {
        let mut definitions = Vec::new();
        for server in &self.servers {
            let Some(connection) = server.connection() else { continue };
            if let Some(peer) = &connection.peer
                && connection.stale.swap(false, Ordering::SeqCst)
            {
                match tokio::time::timeout(self.limits.turn_wait, list_tools(&server.prefix, peer))
                    .await
                {
                    Ok(Ok(tools)) => {
                        self.record_tools(server, &tools);
                        *lock(&connection.tools) = tools;
                    }
                    Ok(Err(error)) => {
                        tracing::warn!(server = %server.spec.name, %error, "cannot list the changed tools; keeping the old list")
                    }
                    Err(_) => {
                        tracing::warn!(server = %server.spec.name, "listing the changed tools timed out; keeping the old list")
                    }
                }
            }
            definitions.extend(
                lock(&connection.tools)
                    .iter()
                    .filter(|tool| tool.read_only || !read_only)
                    .map(|tool| tool.definition.clone()),
            );
        }
        definitions
    }

    /// The server tool the model called `name`, if a connected server offers it.
    pub(crate) fn find(&self, name: &str) -> Option<Found> {
        self.servers.iter().filter(|s| name.starts_with(&s.prefix)).find_map(|server| {
            let connection = server.connection()?;
            let tool =
                lock(&connection.tools).iter().find(|t| t.definition.name == name).cloned()?;
            Some(Found { server: Arc::clone(server), connection, tool })
        })
    }

    /// Why `name`, in a server's namespace, cannot be called: the server is down (and why),
    /// or no longer offers it. `None` when no server's namespace has it.
    pub(crate) fn unavailable(&self, name: &str) -> Option<String> {
        // The longest prefix: `mcp__a__b__` is server `a__b`'s, not `a`'s.
        let server = self
            .servers
            .iter()
            .filter(|s| name.starts_with(&s.prefix))
            .max_by_key(|s| s.prefix.len())?;
        let server_name = &server.spec.name;
        Some(match &*lock(&server.state) {
            State::Ready(_) => format!("MCP server `{server_name}` does not offer `{name}`"),
            State::Connecting => format!("MCP server `{server_name}` is still starting"),
            State::Failed(why) => format!(
                "MCP server `{server_name}` is unavailable ({why}); the next prompt tries it again"
            ),
            State::Closed => format!("MCP server `{server_name}` was closed with its session"),
        })
    }

    /// Calls a tool: the server's answer, or in a replay the arc's. A call that reaches a
    /// server has its outcome recorded into the arc, when one is recorded.
    pub(crate) async fn call(
        &self,
        found: &Found,
        arguments: &str,
        cancel: &CancellationToken,
    ) -> CallOutcome {
        let arguments = match arguments_object(arguments) {
            Ok(arguments) => arguments,
            Err(text) => return CallOutcome::failure(text),
        };
        let name = &found.server.spec.name;
        let Some(peer) = &found.connection.peer else {
            return self.replay.as_ref().map_or_else(
                || CallOutcome::failure("no recorded answers".to_owned()),
                |replay| replay.next_call(name, &found.tool.remote),
            );
        };
        let outcome = self.call_server(found, peer, arguments, cancel).await;
        if let Some(recorder) = &self.recorder {
            recorder.mcp(&serde_json::json!({
                "server": name,
                "call": found.tool.remote,
                "outcome": {"text": outcome.text, "is_error": outcome.is_error, "raw": outcome.raw},
            }));
        }
        outcome
    }

    /// Calls a tool on its server. A server that does not answer in time is stopped and
    /// dropped (the next prompt starts it again); one that breaks the connection is dropped.
    async fn call_server(
        &self,
        found: &Found,
        peer: &Peer<RoleClient>,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
        cancel: &CancellationToken,
    ) -> CallOutcome {
        let name = &found.server.spec.name;
        let mut params = CallToolRequestParams::new(found.tool.remote.clone());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        // Dropping the request (cancel, timeout) sends the server `notifications/cancelled`.
        let call = peer.call_tool(params);
        let answer = tokio::select! {
            answer = tokio::time::timeout(self.limits.call, call) => answer,
            () = cancel.cancelled() => {
                return CallOutcome::failure(
                    "[aborted: the user cancelled the turn; the server was told to stop the call]"
                        .to_owned(),
                );
            }
        };
        match answer {
            Ok(Ok(result)) => {
                let rendered = render::result(&serde_json::to_value(&result).unwrap_or_default());
                CallOutcome { text: rendered.text, is_error: rendered.is_error, raw: rendered.raw }
            }
            Ok(Err(rmcp::ServiceError::McpError(error))) => CallOutcome::failure(format!(
                "MCP server `{name}` refused the call: {} (code {})",
                error.message, error.code.0
            )),
            Ok(Err(error)) => {
                let broken = format!(
                    "the connection failed during a call of `{}`: {error}",
                    found.tool.remote
                );
                // Say how the process ended, as the connection's watcher does (whichever of
                // the two comes first reports it, once).
                let message = match &found.connection.process {
                    Some(control) => exited_or(control, broken).await,
                    None => broken,
                };
                self.failed(&found.server, Some(&found.connection), message.clone()).await;
                // The watcher may have reported first (the line a server broke on).
                let message = found.server.failure().unwrap_or(message);
                CallOutcome::failure(format!(
                    "MCP server `{name}`: {message}; it is left out until the next prompt tries it again"
                ))
            }
            Err(_) => {
                let message = format!(
                    "it did not answer a call of `{}` within {} s, so it was stopped",
                    found.tool.remote,
                    self.limits.call.as_secs()
                );
                self.failed(&found.server, Some(&found.connection), message.clone()).await;
                CallOutcome::failure(format!(
                    "MCP server `{name}`: {message}; the next prompt starts it again"
                ))
            }
        }
    }

    /// Disconnects every server and stops the stdio ones (the session closes).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for server in &self.servers {
            let previous = std::mem::replace(&mut *lock(&server.state), State::Closed);
            if let State::Ready(connection) = previous {
                connection.close();
            }
        }
    }

    /// Connects to one server: starts it (stdio) or reaches it (HTTP), shakes hands and lists
    /// its tools, all within `limits.connect`.
    async fn connect(&self, server: &Server) -> Result<(Arc<Connection>, Option<Running>), String> {
        let stale = Arc::new(AtomicBool::new(false));
        let handler = Handler { server: server.spec.name.clone(), stale: Arc::clone(&stale) };
        let limit = self.limits.connect;
        let too_slow = || format!("it did not finish starting within {} s", limit.as_secs());
        if let Some(replay) = &self.replay {
            let tools = replay.tools(&server.spec.name, &server.prefix)?;
            let connection = Connection {
                peer: None,
                cancel: Mutex::new(None),
                process: None,
                malformed: None,
                tools: Mutex::new(tools),
                stale,
            };
            return Ok((Arc::new(connection), None));
        }
        let (running, process, malformed) = match &server.spec.transport {
            Transport::Unsupported(reason) => return Err(reason.clone()),
            Transport::Stdio { command, args, env } => {
                let request = ServiceRequest {
                    program: command.clone(),
                    args: args.clone(),
                    env: env.clone(),
                    workdir: self.session.cwd.clone(),
                };
                let service = self
                    .executor
                    .start_service(&request)
                    .map_err(|error| format!("cannot start `{}`: {error}", command.display()))?;
                let control = service.control.clone();
                let malformed = Arc::new(stdout::Malformed::default());
                let stdout = stdout::Watched::new(service.stdout, Arc::clone(&malformed));
                let served = tokio::select! {
                    served = tokio::time::timeout(limit, handler.serve((stdout, service.stdin))) => served,
                    line = malformed.seen() => {
                        control.stop();
                        return Err(not_json(&line));
                    }
                };
                match served {
                    Ok(Ok(running)) => (running, Some(control), Some(malformed)),
                    Ok(Err(error)) => {
                        return Err(exited_or(
                            &control,
                            format!("the MCP handshake failed: {error}"),
                        )
                        .await);
                    }
                    Err(_) => {
                        control.stop();
                        return Err(with_stderr(&control, too_slow()));
                    }
                }
            }
            Transport::Http { url, headers } => {
                let transport = http_transport(url, headers)?;
                match tokio::time::timeout(limit, handler.serve(transport)).await {
                    Ok(Ok(running)) => (running, None, None),
                    Ok(Err(error)) => return Err(format!("cannot connect to {url}: {error}")),
                    Err(_) => return Err(too_slow()),
                }
            }
        };
        let peer = Some(running.peer().clone());
        let connection = Arc::new(Connection {
            cancel: Mutex::new(Some(running.cancellation_token())),
            peer,
            process,
            malformed,
            tools: Mutex::default(),
            stale,
        });
        let listed = tokio::time::timeout(limit, list_tools(&server.prefix, running.peer())).await;
        let tools = match listed {
            Ok(Ok(tools)) => tools,
            Ok(Err(error)) => {
                connection.close();
                return Err(format!("cannot list its tools: {error}"));
            }
            Err(_) => {
                connection.close();
                return Err(format!("it did not list its tools within {} s", limit.as_secs()));
            }
        };
        self.record_tools(server, &tools);
        *lock(&connection.tools) = tools;
        Ok((connection, Some(running)))
    }

    /// Watches a connection: its end (the server exited, the transport broke, a line that is
    /// not JSON) drops it.
    fn watch(self: &Arc<Self>, server: &Arc<Server>, watched: Arc<Connection>, running: Running) {
        let (this, watcher) = (Arc::clone(self), Arc::clone(server));
        tokio::spawn(async move {
            let bad_line = async {
                match &watched.malformed {
                    Some(malformed) => malformed.seen().await,
                    None => std::future::pending().await,
                }
            };
            let message = tokio::select! {
                _ = running.waiting() => match &watched.process {
                    Some(control) => exited_or(control, "it closed the connection".to_owned()).await,
                    None => "the connection closed".to_owned(),
                },
                line = bad_line => not_json(&line),
            };
            this.failed(&watcher, Some(&watched), message).await;
        });
    }

    /// A server is connected: its tools are offered from the next model request on.
    async fn connected(&self, server: &Server, connection: Arc<Connection>) {
        {
            let mut state = lock(&server.state);
            if !matches!(*state, State::Connecting) {
                // Closed meanwhile.
                drop(state);
                connection.close();
                return;
            }
            *state = State::Ready(Arc::clone(&connection));
        }
        // A server that failed before and works again says so.
        if lock(&server.reported).take().is_some() {
            let tools = lock(&connection.tools).len();
            self.card(
                format!("MCP server {} connected again", server.spec.name),
                format!("It offers {tools} tool(s) again."),
                false,
            )
            .await;
        }
    }

    /// A server failed: it is left out of the session until the next prompt retries it; the
    /// user sees one card per distinct failure. `of` is the connection that failed (ignored
    /// if the server has moved on to another one since).
    async fn failed(&self, server: &Server, of: Option<&Arc<Connection>>, message: String) {
        {
            let mut state = lock(&server.state);
            // A connection's failure counts only while it is the server's connection.
            let moved_on = match (&*state, of) {
                (State::Closed, _) => true,
                (State::Ready(current), Some(of)) => !Arc::ptr_eq(of, current),
                (State::Connecting | State::Failed(_), Some(_)) => true,
                (_, None) => false,
            };
            if moved_on {
                return;
            }
            let previous = std::mem::replace(&mut *state, State::Failed(message.clone()));
            if let State::Ready(connection) = previous {
                connection.close();
            }
        }
        tracing::warn!(server = %server.spec.name, %message, "MCP server unavailable");
        let repeated = lock(&server.reported).replace(message.clone()).as_ref() == Some(&message);
        if !repeated {
            let title = format!("MCP server {} is unavailable", server.spec.name);
            let detail = format!(
                "{message}.\n\nThe session goes on without its tools; the next prompt tries it again."
            );
            self.card(title, detail, true).await;
        }
    }

    /// Records a server's tools into the arc, if one is recorded.
    fn record_tools(&self, server: &Server, tools: &[Tool]) {
        if let Some(recorder) = &self.recorder {
            let tools: Vec<serde_json::Value> = tools.iter().map(replay::to_json).collect();
            recorder.mcp(&serde_json::json!({"server": server.spec.name, "tools": tools}));
        }
    }

    /// Shows (and logs) a card about a server.
    async fn card(&self, title: String, detail: String, failed: bool) {
        let session = &self.session;
        session
            .emit(SessionEvent::PluginChanged {
                call_id: session.next_call_id(),
                title,
                detail,
                failed,
            })
            .await;
    }
}

impl Server {
    /// Why the server is down, if it is.
    fn failure(&self) -> Option<String> {
        match &*lock(&self.state) {
            State::Failed(why) => Some(why.clone()),
            _ => None,
        }
    }

    fn connection(&self) -> Option<Arc<Connection>> {
        match &*lock(&self.state) {
            State::Ready(connection) => Some(Arc::clone(connection)),
            _ => None,
        }
    }
}

impl Connection {
    /// Ends the MCP session and stops the server's process.
    fn close(&self) {
        if let Some(cancel) = lock(&self.cancel).take() {
            cancel.cancel();
        }
        if let Some(process) = &self.process {
            process.stop();
        }
    }
}

/// Lists a server's tools, named in its namespace.
async fn list_tools(
    prefix: &str,
    peer: &Peer<RoleClient>,
) -> Result<Vec<Tool>, rmcp::ServiceError> {
    let listed = peer.list_all_tools().await?;
    Ok(unique_names(
        listed
            .into_iter()
            .map(|tool| {
                let annotations = tool.annotations.as_ref();
                let title = annotations
                    .and_then(|a| a.title.clone())
                    .or_else(|| tool.title.clone())
                    .unwrap_or_else(|| tool.name.to_string());
                let read_only = annotations.and_then(|a| a.read_only_hint) == Some(true);
                Tool {
                    definition: ToolDefinition {
                        name: tool_name(prefix, &tool.name),
                        description: tool.description.as_deref().unwrap_or_default().to_owned(),
                        input_schema: serde_json::Value::Object((*tool.input_schema).clone())
                            .into(),
                        effects: server_tool_effects(read_only),
                    },
                    remote: tool.name.to_string(),
                    title,
                    read_only,
                }
            })
            .collect(),
    ))
}

/// Makes the names of one server's tools unique, whatever the order they are listed in: two
/// tools whose names become one (`read.file` and `read_file`, or long names cut alike) keep
/// it only where it is the tool's own name, unchanged; the others end with a hash of their
/// own name instead.
fn unique_names(mut tools: Vec<Tool>) -> Vec<Tool> {
    let mut uses: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for tool in &tools {
        *uses.entry(tool.definition.name.clone()).or_default() += 1;
    }
    for tool in &mut tools {
        let name = &tool.definition.name;
        if uses[name] > 1 && !name.ends_with(&format!("__{}", tool.remote)) {
            let digest = ring::digest::digest(&ring::digest::SHA256, tool.remote.as_bytes());
            let hash: String = digest.as_ref()[..4].iter().map(|b| format!("{b:02x}")).collect();
            let keep = name.len().min(MAX_TOOL_NAME - hash.len() - 1);
            let mut cut = keep;
            while !name.is_char_boundary(cut) {
                cut -= 1;
            }
            tool.definition.name = format!("{}_{hash}", &name[..cut]);
        }
    }
    tools
}

/// The model's name of a server's tool: the prefix and the tool's name, made of the
/// characters models accept, at most [`MAX_TOOL_NAME`] long (a longer one keeps its start and
/// ends with a hash of the whole).
fn tool_name(prefix: &str, tool: &str) -> String {
    let name = format!("{prefix}{}", safe_name(tool));
    if name.len() <= MAX_TOOL_NAME {
        return name;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, name.as_bytes());
    let hash: String = digest.as_ref()[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("{}_{hash}", &name[..MAX_TOOL_NAME - hash.len() - 1])
}

/// A server's name as it stands in its tools' names: [`safe_name`] with no `__` in it and no
/// `_` at either end, so that the first `__` after `mcp__` always ends it. Two servers then
/// never share a tool name, whatever their tools are called (`srv` with `b__c` and `srv__b`
/// with `c` would both be `mcp__srv__b__c` otherwise).
fn server_part(name: &str) -> String {
    let safe = safe_name(name);
    let mut part = String::with_capacity(safe.len());
    for c in safe.chars() {
        if !(c == '_' && part.ends_with('_')) {
            part.push(c);
        }
    }
    let part = part.trim_matches('_');
    if part.is_empty() { "server".to_owned() } else { part.to_owned() }
}

/// `name` with every character models do not accept in a tool name replaced by `_`.
fn safe_name(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .collect();
    if safe.is_empty() { "_".to_owned() } else { safe }
}

/// The model's arguments as a JSON object (none for an empty text).
fn arguments_object(
    arguments: &str,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, String> {
    if arguments.trim().is_empty() {
        return Ok(None);
    }
    match serde_json::from_str(arguments) {
        Ok(serde_json::Value::Object(object)) => Ok(Some(object)),
        Ok(_) => Err("the arguments must be a JSON object".to_owned()),
        Err(error) => Err(format!("the arguments are not valid JSON: {error}")),
    }
}

/// Why a stdio server's connection ended: how its process exited (waited for briefly) and
/// the last of its stderr; `otherwise` if it is still running.
async fn exited_or(control: &ServiceControl, otherwise: String) -> String {
    match tokio::time::timeout(Duration::from_secs(1), control.ended()).await {
        Ok(end) => with_stderr(control, format!("it exited ({end})")),
        Err(_) => {
            control.stop();
            with_stderr(control, otherwise)
        }
    }
}

/// The failure of a server that wrote `line` on stdout.
fn not_json(line: &str) -> String {
    format!("it wrote a line that is not JSON-RPC on stdout (servers must log to stderr): `{line}`")
}

/// `message` with the last lines of the server's stderr.
fn with_stderr(control: &ServiceControl, message: String) -> String {
    let tail = control.stderr_tail();
    let lines: Vec<&str> = tail.lines().collect();
    let last = lines[lines.len().saturating_sub(5)..].join("\n");
    if last.is_empty() { message } else { format!("{message}; its last words on stderr:\n{last}") }
}

/// The streamable HTTP transport to `url`, with the client's headers.
fn http_transport(
    url: &str,
    headers: &[(String, String)],
) -> Result<rmcp::transport::StreamableHttpClientTransport<reqwest::Client>, String> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let mut custom = HashMap::new();
    for (name, value) in headers {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|error| format!("header `{name}` is not valid: {error}"))?;
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|error| format!("the value of header `{name}` is not valid: {error}"))?;
        custom.insert(name, value);
    }
    let client = crate::http::client(|builder| builder.connect_timeout(Duration::from_secs(20)))
        .map_err(|error| format!("cannot make an HTTP client: {error}"))?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    config.custom_headers = custom;
    Ok(rmcp::transport::StreamableHttpClientTransport::with_client(client, config))
}

/// What a session's servers need from the host, to start them.
#[derive(Debug, Clone)]
pub(crate) struct McpSetup {
    pub(crate) limits: Limits,
    pub(crate) configured: Vec<ServerSpec>,
    /// Answers to serve instead of the servers (`hotsh replay`).
    pub(crate) replay: Option<Arc<Recording>>,
}

impl McpSetup {
    pub(crate) fn from_config(config: &McpConfig) -> anyhow::Result<Self> {
        Ok(Self { limits: config.limits()?, configured: config.servers()?, replay: None })
    }
}

/// What a server's tool may do: nothing but read when its server says so, anything otherwise
/// (a server runs outside the sandbox).
pub(crate) fn server_tool_effects(read_only: bool) -> crate::model::ToolEffects {
    crate::model::ToolEffects {
        runs_commands: !read_only,
        writes_files: !read_only,
        concurrent: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_part_ends_at_the_first_double_underscore() {
        assert_eq!(server_part("srv__b"), "srv_b");
        assert_eq!(server_part("_a b__"), "a_b");
        assert_eq!(server_part("__"), "server");
        let a = tool_name(&format!("mcp__{}__", server_part("srv")), "b__c");
        let b = tool_name(&format!("mcp__{}__", server_part("srv__b")), "c");
        assert_eq!((a.as_str(), b.as_str()), ("mcp__srv__b__c", "mcp__srv_b__c"));
    }

    #[test]
    fn tool_names_are_safe_and_short() {
        assert_eq!(tool_name("mcp__a__", "read.file"), "mcp__a__read_file");
        let long = tool_name("mcp__server__", &"x".repeat(80));
        assert_eq!(long.len(), MAX_TOOL_NAME);
        assert_ne!(long, tool_name("mcp__server__", &"x".repeat(81)));
        assert_eq!(safe_name("my server/1"), "my_server_1");
    }

    #[test]
    fn arguments_must_be_an_object() {
        assert_eq!(arguments_object(""), Ok(None));
        assert!(arguments_object("[1]").is_err());
        assert!(arguments_object("{").is_err());
        assert_eq!(arguments_object(r#"{"a":1}"#).map(|o| o.map(|o| o.len())), Ok(Some(1)));
    }
}
