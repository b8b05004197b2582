//! `hotsh run`: one prompt in a terminal. It calls the use cases (`hotsh_core::usecase`) an
//! editor's requests reach, and prints each event as the update an editor with terminal
//! support would be sent: messages, each card with its command, live output and exit status.
//! Recording an arc (`--record`), it is instead an ACP client of the very same agent,
//! connected in process, since an arc is the protocol's wire: its arc is then the one
//! `hotsh acp --record` writes for the same session.

use crate::host::Host;
use agent_client_protocol::Client;
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    CancelNotification, ClientCapabilities, ContentBlock, InitializeRequest, Meta,
    NewSessionRequest, PromptRequest, ResumeSessionRequest, SessionId, SessionNotification,
    SessionUpdate, SetSessionConfigOptionRequest, StopReason, ToolCallContent, ToolCallStatus,
};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

/// Where the prompt goes: the session (a new one in `cwd`, or `resume`), and the sandbox
/// mode to choose for it first, if any.
pub(crate) struct Target {
    pub(crate) cwd: PathBuf,
    pub(crate) resume: Option<String>,
    pub(crate) sandbox: Option<String>,
}

/// Runs the prompt; a prompt the agent could not answer (no model, a model failure, no tools
/// at all) is an error for the caller to print.
pub(crate) async fn run_prompt(
    host: Arc<Host>,
    target: Target,
    prompt: String,
) -> anyhow::Result<ExitCode> {
    let Target { cwd, resume, sandbox } = target;
    host.registry.ready().await;
    if host.registry.snapshot().tool_definitions().is_empty() {
        anyhow::bail!("{}", crate::plugins::no_tools_message(host.registry.dirs()));
    }
    let screen = Arc::new(Mutex::new(Screen::new(crate::term::color_stdout())));
    let for_updates = Arc::clone(&screen);
    let stop = match host.recorder.clone() {
        // Recording: the client and the agent talk through a pair of line channels the
        // recorder reads, as `hotsh acp --record` records the lines of stdio.
        Some(recorder) => {
            let agent = super::agent(host, None);
            let (client_side, agent_side) = recorded_pair(recorder);
            let served = tokio::spawn(async move {
                use agent_client_protocol::ConnectTo as _;
                if let Err(error) = agent.connect_to(agent_side).await {
                    tracing::warn!(%error, "the recorded agent connection ended with an error");
                }
            });
            let stop = converse(client_side, for_updates, cwd, resume, sandbox, prompt).await;
            // The agent's side ends when the client's closes; what it sent is recorded by then.
            let _ = served.await;
            stop
        }
        None => answer_directly(&host, for_updates, cwd, resume, sandbox, prompt).await,
    };
    let stop = stop?;
    let mut screen = crate::sync::lock(&screen);
    let stop = match stop {
        Ok(stop) => stop,
        Err(message) => {
            screen.finish(None);
            anyhow::bail!("{message}");
        }
    };
    screen.finish(Some(stop));
    Ok(match stop {
        StopReason::Cancelled => ExitCode::from(130),
        _ => ExitCode::SUCCESS,
    })
}

/// One side of a recorded in-process connection.
type RecordedLines = agent_client_protocol::Lines<
    std::pin::Pin<Box<dyn futures::Sink<String, Error = std::io::Error> + Send>>,
    std::pin::Pin<Box<dyn futures::Stream<Item = std::io::Result<String>> + Send>>,
>;

/// Lines on their way from one side of a recorded connection to the other, at most.
const LINES_IN_FLIGHT: usize = 64;

/// Two line transports joined to each other, every line handed to `recorder` as it passes:
/// (the client's side, the agent's side).
fn recorded_pair(recorder: Arc<crate::arc::Recorder>) -> (RecordedLines, RecordedLines) {
    use futures::{SinkExt as _, StreamExt as _};
    // Bounded both ways, as the pipes of stdio are: a side that falls behind holds the other.
    let (to_agent, from_client) = futures::channel::mpsc::channel::<String>(LINES_IN_FLIGHT);
    let (to_client, from_agent) = futures::channel::mpsc::channel::<String>(LINES_IN_FLIGHT);
    let side = |sink: futures::channel::mpsc::Sender<String>,
                stream: futures::channel::mpsc::Receiver<String>,
                tap: Box<dyn Fn(&str) + Send + Sync>|
     -> RecordedLines {
        let sink = sink.sink_map_err(std::io::Error::other).with(move |line: String| {
            tap(&line);
            futures::future::ready(Ok::<_, std::io::Error>(line))
        });
        agent_client_protocol::Lines::new(Box::pin(sink), Box::pin(stream.map(Ok)))
    };
    let client_tap = Arc::clone(&recorder);
    let client = side(to_agent, from_agent, Box::new(move |line| client_tap.client(line)));
    let agent = side(to_client, from_client, Box::new(move |line| recorder.agent(line)));
    (client, agent)
}

/// The use cases' client port for a terminal: each event printed as the update an editor
/// with terminal support would be sent. It cannot ask the user anything (a question is
/// answered `unavailable`, and what needed it does not run).
struct ScreenSink(Arc<Mutex<Screen>>);

impl crate::session::EventSink for ScreenSink {
    fn emit(&self, event: crate::session::SessionEvent) {
        if let Some(mut update) = super::to_acp::update_with_terminal(event) {
            // A terminal shows no child thread: a subagent's card sums it up.
            super::to_acp::without_child_links(&mut update);
            crate::sync::lock(&self.0).show(&update);
        }
    }
}

/// Opens or resumes the session and answers the prompt through the use cases, printing what
/// comes; as [`converse`] without the protocol.
async fn answer_directly(
    host: &Arc<Host>,
    screen: Arc<Mutex<Screen>>,
    cwd: PathBuf,
    resume: Option<String>,
    sandbox: Option<String>,
    prompt: String,
) -> anyhow::Result<Result<StopReason, String>> {
    use hotsh_core::usecase;
    let sink: Arc<dyn crate::session::EventSink> = Arc::new(ScreenSink(screen));
    let session = match resume {
        // The session goes on where it was; its thread is not shown again.
        Some(id) => {
            let resumed = usecase::resume(&**host, &id, sink).await;
            let (session, open_tasks) = resumed.map_err(|refused| anyhow::anyhow!("{refused}"))?;
            usecase::reopened(&**host, &session, &open_tasks).await;
            session
        }
        None => usecase::open_new(&**host, cwd, |_| sink)
            .await
            .map_err(|refused| anyhow::anyhow!("{refused}"))?,
    };
    // The configured MCP servers (a terminal brings none of its own).
    host.connect_mcp(&session, Vec::new());
    if let Some(mode) = &sandbox {
        // As a client's option menu would: logged with the session. An agent without a
        // sandbox to offer refuses it, and nothing runs.
        let chosen = usecase::set_option(&**host, &session, usecase::SANDBOX_OPTION, mode).await;
        if let Err(refused) = chosen {
            return Ok(Err(format!("cannot choose the sandbox mode {mode}: {refused}")));
        }
    }
    let blocks = [ContentBlock::from(prompt)];
    let admitted = match usecase::admit(&**host, &session, super::from_acp::prompt(&blocks)).await {
        Ok(admitted) => admitted,
        Err(refused) => return Ok(Err(refused.to_string())),
    };
    let interrupted = Arc::clone(&session);
    let interrupt = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            usecase::cancel(&interrupted).await;
        }
    });
    let outcome = usecase::answer(&**host, &session, admitted).await;
    interrupt.abort();
    Ok(outcome.map(super::to_acp::stop_reason).map_err(|failed| failed.message))
}

/// Initialises, opens or resumes the session, and sends the prompt, printing what comes.
async fn converse(
    peer: impl agent_client_protocol::ConnectTo<Client> + 'static,
    for_updates: Arc<Mutex<Screen>>,
    cwd: PathBuf,
    resume: Option<String>,
    sandbox: Option<String>,
    prompt: String,
) -> anyhow::Result<Result<StopReason, String>> {
    Client
        .v1()
        .name("hotsh-run")
        .on_receive_notification(
            async move |notification: SessionNotification, _cx| {
                crate::sync::lock(&for_updates).show(&notification.update);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(peer, async |cx| {
            let mut meta = Meta::new();
            meta.insert("terminal_output".into(), true.into());
            cx.send_request(
                InitializeRequest::new(ProtocolVersion::V1)
                    .client_capabilities(ClientCapabilities::new().meta(meta)),
            )
            .block_task()
            .await?;
            let session_id = match resume {
                // The session goes on where it was; its thread is not shown again.
                Some(id) => {
                    cx.send_request(ResumeSessionRequest::new(id.clone(), cwd))
                        .block_task()
                        .await?;
                    SessionId::new(id)
                }
                None => cx.send_request(NewSessionRequest::new(cwd)).block_task().await?.session_id,
            };
            if let Some(mode) = &sandbox {
                // As a client's option menu would: logged with the session. An agent without a
                // sandbox to offer refuses it, and nothing runs.
                let chosen = cx
                    .send_request(SetSessionConfigOptionRequest::new(
                        session_id.clone(),
                        "sandbox_mode",
                        mode.as_str(),
                    ))
                    .block_task()
                    .await;
                if let Err(error) = chosen {
                    return Ok(Err(format!(
                        "cannot choose the sandbox mode {mode}: {}",
                        error.message
                    )));
                }
            }
            let on_interrupt = (cx.clone(), session_id.clone());
            let interrupt = tokio::spawn(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    let (cx, session_id) = on_interrupt;
                    let _ = cx.send_notification(CancelNotification::new(session_id));
                }
            });
            let prompt = vec![ContentBlock::from(prompt)];
            let response =
                cx.send_request(PromptRequest::new(session_id, prompt)).block_task().await;
            interrupt.abort();
            Ok(response.map(|r| r.stop_reason).map_err(|e| e.message))
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// What a card looks like on screen so far.
#[derive(Debug)]
struct CardState {
    terminal: bool,
}

/// Renders session updates as plain terminal output.
#[derive(Debug)]
struct Screen {
    color: bool,
    /// The cursor is at the start of a line.
    at_line_start: bool,
    /// The last thing printed was a thought (dimmed).
    in_thought: bool,
    cards: HashMap<String, CardState>,
}

impl Screen {
    fn new(color: bool) -> Self {
        Self { color, at_line_start: true, in_thought: false, cards: HashMap::new() }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_owned() }
    }

    fn write(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
        self.at_line_start = text.ends_with('\n');
    }

    fn new_line(&mut self) {
        if !self.at_line_start {
            self.write("\n");
        }
    }

    fn block(&mut self, text: &str) {
        self.new_line();
        self.write(text);
        self.new_line();
    }

    fn show(&mut self, update: &SessionUpdate) {
        match update {
            SessionUpdate::UserMessageChunk(chunk) => {
                self.in_thought = false;
                let text = self.paint("1;36", &format!("> {}", content_text(&chunk.content)));
                self.block(&text);
            }
            SessionUpdate::AgentMessageChunk(chunk) => {
                if self.in_thought {
                    self.new_line();
                    self.in_thought = false;
                }
                self.write(&content_text(&chunk.content));
            }
            SessionUpdate::AgentThoughtChunk(chunk) => {
                if !self.in_thought {
                    self.new_line();
                    self.in_thought = true;
                }
                let text = self.paint("2", &content_text(&chunk.content));
                self.write(&text);
            }
            SessionUpdate::ToolCall(call) => {
                self.in_thought = false;
                let terminal = meta_object(call.meta.as_ref(), "terminal_info").is_some();
                let header = if terminal {
                    self.paint("1", &format!("$ {}", call.title))
                } else {
                    self.paint("1", &format!("• {}", call.title))
                };
                self.block(&header);
                // A diff shows once, when the call has ended (it did not happen before).
                for text in call.content.iter().filter_map(|c| tool_content_text(c, false, None)) {
                    self.block(&text);
                }
                self.cards.insert(call.tool_call_id.0.to_string(), CardState { terminal });
            }
            SessionUpdate::Plan(plan) => {
                use agent_client_protocol::v1::schema::PlanEntryStatus;
                let mut text = String::from("Plan:");
                for entry in &plan.entries {
                    let mark = match entry.status {
                        PlanEntryStatus::Completed => "[x]",
                        PlanEntryStatus::InProgress => "[~]",
                        _ => "[ ]",
                    };
                    text.push_str(&format!("\n  {mark} {}", entry.content));
                }
                let text = self.paint("35", &text);
                self.block(&text);
            }
            SessionUpdate::ToolCallUpdate(update) => {
                let id = update.tool_call_id.0.to_string();
                if let Some(output) = meta_object(update.meta.as_ref(), "terminal_output") {
                    let data = output.get("data").and_then(|d| d.as_str()).unwrap_or("");
                    self.write(data);
                }
                let terminal = self.cards.get(&id).is_some_and(|c| c.terminal);
                if let Some(content) = &update.fields.content
                    && (!terminal || update.fields.status.is_some())
                {
                    let ended = update.fields.status.is_some_and(|s| {
                        matches!(s, ToolCallStatus::Completed | ToolCallStatus::Failed)
                    });
                    // An edit's result says where in the file it starts.
                    let first_line = update
                        .fields
                        .raw_output
                        .as_ref()
                        .and_then(|raw| raw.get("first_line"))
                        .and_then(serde_json::Value::as_u64)
                        .map(|line| line as usize);
                    for text in
                        content.iter().filter_map(|c| tool_content_text(c, ended, first_line))
                    {
                        self.block(&text);
                    }
                }
                if let Some(exit) = meta_object(update.meta.as_ref(), "terminal_exit") {
                    let line = match (
                        exit.get("exit_code").and_then(|c| c.as_i64()),
                        exit.get("signal").and_then(|s| s.as_str()),
                    ) {
                        (_, Some(signal)) => self.paint("31", &format!("[killed by {signal}]")),
                        (Some(0), None) => self.paint("32", "[exit 0]"),
                        (Some(code), None) => self.paint("31", &format!("[exit {code}]")),
                        (None, None) => self.paint("31", "[did not run]"),
                    };
                    self.block(&line);
                } else if let Some(status) = update.fields.status
                    && !terminal
                {
                    let line = match status {
                        ToolCallStatus::Completed => self.paint("32", "[done]"),
                        ToolCallStatus::Failed => self.paint("31", "[failed]"),
                        _ => return,
                    };
                    self.block(&line);
                }
            }
            _ => {}
        }
    }

    fn finish(&mut self, stop: Option<StopReason>) {
        self.new_line();
        let said = match stop {
            Some(StopReason::Cancelled) => "[cancelled]",
            Some(StopReason::MaxTurnRequests) => {
                "[stopped: the turn made as many model requests as one turn may (session.max_turn_requests)]"
            }
            _ => return,
        };
        let line = self.paint("33", said);
        self.block(&line);
    }
}

fn meta_object<'a>(
    meta: Option<&'a Meta>,
    key: &str,
) -> Option<&'a serde_json::Map<String, serde_json::Value>> {
    meta?.get(key)?.as_object()
}

fn content_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        _ => String::new(),
    }
}

/// A card's content as text; a diff (when `diffs`) as a unified diff. A diff of a whole file
/// is the file's; a diff of an edited fragment (`first_line`: where the edit starts, from the
/// call's result) has the file's line numbers, and its last line is not the file's end.
fn tool_content_text(
    content: &ToolCallContent,
    diffs: bool,
    first_line: Option<usize>,
) -> Option<String> {
    match content {
        ToolCallContent::Content(content) => Some(content_text(&content.content)),
        ToolCallContent::Diff(diff) if diffs => {
            let path = diff.path.display().to_string();
            let old_name = if diff.old_text.is_some() { path.clone() } else { "/dev/null".into() };
            let old = diff.old_text.as_deref().unwrap_or("");
            let text = match first_line {
                None => similar::TextDiff::from_lines(old, diff.new_text.as_str())
                    .unified_diff()
                    .context_radius(3)
                    .header(&old_name, &path)
                    .to_string(),
                Some(first) => fragment_diff(&old_name, &path, old, &diff.new_text, first),
            };
            Some(text.trim_end_matches('\n').to_owned())
        }
        _ => None,
    }
}

/// A unified diff of a fragment of a file that starts at line `first` (1-based).
fn fragment_diff(old_name: &str, path: &str, old: &str, new: &str, first: usize) -> String {
    // A fragment's lines are whole lines of the file: the last one ends too.
    let line_end = |text: &str| {
        if text.is_empty() || text.ends_with('\n') { text.to_owned() } else { format!("{text}\n") }
    };
    let (old, new) = (line_end(old), line_end(new));
    let diff = similar::TextDiff::from_lines(&old, &new);
    let mut text = format!("--- {old_name}\n+++ {path}\n");
    let offset = first.saturating_sub(1);
    let range = |start: usize, len: usize| match len {
        0 => format!("{},0", start + offset),
        1 => format!("{}", start + offset + 1),
        _ => format!("{},{len}", start + offset + 1),
    };
    for group in diff.grouped_ops(3) {
        let (Some(head), Some(tail)) = (group.first(), group.last()) else { continue };
        let (old_start, new_start) = (head.old_range().start, head.new_range().start);
        let old_len = tail.old_range().end - old_start;
        let new_len = tail.new_range().end - new_start;
        text.push_str(&format!(
            "@@ -{} +{} @@\n",
            range(old_start, old_len),
            range(new_start, new_len)
        ));
        for op in &group {
            for change in diff.iter_changes(op) {
                let sign = match change.tag() {
                    similar::ChangeTag::Delete => '-',
                    similar::ChangeTag::Insert => '+',
                    similar::ChangeTag::Equal => ' ',
                };
                text.push(sign);
                text.push_str(change.value());
            }
        }
    }
    text
}

/// `hotsh sessions list`: one line per session, newest first.
pub(crate) fn list_sessions(
    store: &crate::session::store::SessionStore,
    cwd: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let cwd = cwd.map(|cwd| std::path::absolute(&cwd)).transpose()?;
    let sessions = store.list(cwd.as_deref())?;
    if sessions.is_empty() {
        eprintln!("no sessions in {}", store.dir()?.display());
    }
    for session in sessions {
        let updated = humantime::format_rfc3339_seconds(session.updated_at);
        crate::term::out(&format!(
            "{}  {updated}  {}  {}",
            session.id,
            session.cwd.display(),
            session.title.unwrap_or_else(|| "(no prompt yet)".to_owned())
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// `hotsh sessions show ID`: the thread as a terminal shows it in `hotsh run`.
pub(crate) fn show_session(
    store: &crate::session::store::SessionStore,
    id: &str,
) -> anyhow::Result<ExitCode> {
    let folded = store.read(id)?;
    let mut screen = Screen::new(crate::term::color_stdout());
    let meta = &folded.meta;
    let header = format!(
        "session {} “{}” in {} (started {} by {})",
        meta.session_id,
        folded.title.as_deref().unwrap_or("no prompt yet"),
        meta.cwd.display(),
        meta.created_at,
        meta.agent
    );
    let header = screen.paint("2", &header);
    screen.block(&header);
    for update in super::terminal_view(folded.view) {
        screen.show(&update);
    }
    screen.new_line();
    Ok(ExitCode::SUCCESS)
}
