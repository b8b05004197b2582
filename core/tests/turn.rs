//! The session and the turn with fake ports: a scripted model, an in-memory log, a client
//! that keeps what it is sent, tools that need no process, an executor that runs nothing.

#![allow(clippy::unwrap_used, reason = "tests")]

use futures::future::BoxFuture;
use hotsh_core::context::Limits;
use hotsh_core::executor::{
    Drained, Executor, Killed, LiveOutput, Pause, Policy, RunError, RunOutcome, RunRequest,
    RunningTask, StartRequest, Started, TaskEnded, TaskError, TaskId, TaskRead, TaskState,
    TaskStatus,
};
use hotsh_core::model::{
    Model, ModelError, ModelEvent, ModelRequest, ModelToolCall, ToolDefinition, ToolEffects,
};
use hotsh_core::sandbox::Mode;
use hotsh_core::session::{
    CallStatus, EventSink, Fact, LogSink, Narrowing, Prompt, Record, Session, SessionEvent,
    SessionMeta, StopReason, ToolCallId, TurnOutcome, fold,
};
use hotsh_core::tools::{Call, CallHook, CallResult, ToolProvider, ToolRouter, open_card};
use hotsh_core::turn::{SystemParts, Turn, TurnFailed, TurnPorts, Work, answer, guarded};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// A log kept in memory, in the order appended, with the number of records appended at
/// each flush.
#[derive(Default)]
struct MemoryLog(Arc<Mutex<Vec<Record>>>, Arc<Mutex<Vec<usize>>>);

impl LogSink for MemoryLog {
    fn append(&self, record: Record) -> BoxFuture<'_, ()> {
        self.0.lock().unwrap().push(record);
        Box::pin(async {})
    }
    fn flush(&self) -> BoxFuture<'_, Result<(), hotsh_core::session::LogFailed>> {
        self.1.lock().unwrap().push(self.0.lock().unwrap().len());
        Box::pin(async { Ok(()) })
    }
    fn failure(&self) -> Option<hotsh_core::session::LogFailed> {
        None
    }
    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// A client that keeps every event it is sent.
#[derive(Default)]
struct Client(Mutex<Vec<SessionEvent>>);

impl EventSink for Client {
    fn emit(&self, event: SessionEvent) {
        self.0.lock().unwrap().push(event);
    }
}

/// A model that plays answers in order; an answer of `None` streams until it is cancelled.
#[derive(Debug)]
struct Scripted {
    answers: Mutex<VecDeque<Option<Vec<ModelEvent>>>>,
    requests: Mutex<Vec<ModelRequest>>,
}

impl Scripted {
    fn new(answers: Vec<Option<Vec<ModelEvent>>>) -> Arc<Self> {
        Arc::new(Self { answers: Mutex::new(answers.into()), requests: Mutex::default() })
    }
}

impl Model for Scripted {
    fn respond(
        &self,
        _session: &str,
        request: &ModelRequest,
        events: mpsc::UnboundedSender<ModelEvent>,
    ) -> BoxFuture<'_, Result<(), ModelError>> {
        self.requests.lock().unwrap().push(request.clone());
        let answer = self.answers.lock().unwrap().pop_front();
        Box::pin(async move {
            match answer {
                Some(Some(answer)) if answer.contains(&too_long()) => {
                    Err(ModelError::ContextTooLong("the context is too long".to_owned()))
                }
                Some(Some(answer)) => {
                    for event in answer {
                        let _ = events.send(event);
                    }
                    Ok(())
                }
                Some(None) => loop {
                    let _ = events.send(ModelEvent::Reasoning("…".to_owned()));
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                },
                None => Err(ModelError::Provider("the script is over".to_owned())),
            }
        })
    }
}

/// `echo` answers with its arguments; `shell` declares that it runs commands.
struct Tools;

impl ToolProvider for Tools {
    fn prepare(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    fn tools(&self, _planning: bool) -> BoxFuture<'_, Vec<ToolDefinition>> {
        let tool = |name: &str, runs_commands| ToolDefinition {
            name: name.to_owned(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}).into(),
            effects: ToolEffects { runs_commands, writes_files: false, concurrent: false },
        };
        Box::pin(async move { vec![tool("echo", false), tool("shell", true)] })
    }
    fn call<'a>(&'a self, call: Call<'a>) -> Option<BoxFuture<'a, CallResult>> {
        (call.call.name == "echo").then(|| -> BoxFuture<'a, CallResult> {
            Box::pin(async move {
                open_card(call, hotsh_core::tools::plain_card("echo")).await;
                call.session
                    .emit(SessionEvent::ToolCallFinished {
                        call_id: call.call_id.clone(),
                        card: hotsh_core::tools::plain_card("echo"),
                        status: CallStatus::Completed,
                        raw_output: hotsh_core::session::RawJson::null(),
                        error: None,
                        output_text: Some(call.call.arguments.clone()),
                        output_in_result: false,
                    })
                    .await;
                CallResult { text: call.call.arguments.clone(), is_error: false }
            })
        })
    }
}

struct Ports;

impl TurnPorts for Ports {
    fn system_parts(&self) -> BoxFuture<'_, Result<SystemParts, std::io::Error>> {
        Box::pin(async {
            Ok(SystemParts { before: vec!["You are a test.".to_owned()], after: vec![] })
        })
    }
    fn end_reported(&self, _task: &str) -> bool {
        false
    }
}

fn meta() -> SessionMeta {
    SessionMeta {
        session_id: "s".to_owned(),
        cwd: "/w".into(),
        created_at: String::new(),
        agent: String::new(),
        parent: None,
        forked_from: None,
    }
}

struct Fixture {
    session: Arc<Session>,
    log: Arc<Mutex<Vec<Record>>>,
    /// The log's length at each flush.
    flushed_at: Arc<Mutex<Vec<usize>>>,
    client: Arc<Client>,
}

fn fixture() -> Fixture {
    let log = MemoryLog::default();
    let (records, flushed_at) = (Arc::clone(&log.0), Arc::clone(&log.1));
    let session = Arc::new(Session::new(&meta(), Box::new(log), None));
    let client = Arc::new(Client::default());
    session.attach(Arc::clone(&client) as Arc<dyn EventSink>);
    Fixture { session, log: records, flushed_at, client }
}

fn turn(model: &Arc<Scripted>, confines_commands: bool) -> Turn {
    Turn {
        model: Arc::clone(model) as Arc<dyn Model>,
        tools: ToolRouter::new(vec![Arc::new(Tools)], confines_commands),
        ports: Arc::new(Ports),
        limits: Limits::default(),
        effort: None,
        price: None,
        hooks: Arc::new(hotsh_core::hooks::NoHooks),
    }
}

fn prompt(text: &str) -> Prompt {
    Prompt { text: text.to_owned(), blocks: Vec::new(), images: Vec::new() }
}

fn call(id: &str, name: &str, arguments: &str) -> ModelEvent {
    ModelEvent::ToolCall(ModelToolCall {
        id: id.to_owned(),
        name: name.to_owned(),
        arguments: arguments.to_owned(),
    })
}

fn types(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|record| {
            let value = match record {
                Record::Event(event) => serde_json::to_value(event).unwrap(),
                Record::Fact(fact) => serde_json::to_value(fact).unwrap(),
            };
            value["type"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test]
async fn a_turn_runs_tools_until_the_model_answers_and_its_log_folds_back_to_its_history() {
    let f = fixture();
    let model = Scripted::new(vec![
        Some(vec![call("a", "echo", r#"{"x":1}"#), call("b", "nope", "{}")]),
        Some(vec![ModelEvent::Text("done".to_owned())]),
    ]);
    let work = turn(&model, true);
    let cancel = f.session.begin_turn(prompt("go"), |_| false).await.unwrap();
    assert_eq!(answer(&work, &f.session, Work::Prompt, cancel).await, Ok(StopReason::EndTurn));

    let log = f.log.lock().unwrap().clone();
    assert_eq!(
        types(&log),
        [
            "prompt",
            "assistant_message",
            "usage",
            "tool_call_started",
            "tool_call_finished",
            "tool_result",
            "tool_call_started",
            "tool_call_finished",
            "tool_result",
            "agent_text",
            "assistant_message",
            "usage",
            "turn_ended",
        ]
    );
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests[0].system, "You are a test.");
    assert_eq!(requests.len(), 2);
    let results = results_sent(&model);
    assert_eq!(results[0], (r#"{"x":1}"#.to_owned(), false));
    assert_eq!(results[1], ("unknown tool `nope`; the tools are: echo, shell".to_owned(), true));
    // The log keeps a card's output once, in the tool result.
    let logged_card_texts = log
        .iter()
        .filter(|r| {
            matches!(r, Record::Event(SessionEvent::ToolCallFinished { output_text: Some(_), .. }))
        })
        .count();
    assert_eq!(logged_card_texts, 0);
    // The client saw what the log folds back to, in the same order (the prompt is the
    // client's own; only the last context use is shown again).
    let events: Vec<SessionEvent> = f
        .client
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|e| !matches!(e, SessionEvent::Usage(_)))
        .cloned()
        .collect();
    let mut records = vec![Record::Fact(Fact::Session(Box::new(meta())))];
    records.extend(log);
    let folded = fold::fold(records).unwrap();
    let view: Vec<SessionEvent> = folded
        .view
        .iter()
        .filter(|e| !matches!(e, SessionEvent::UserMessage { .. }))
        .cloned()
        .collect();
    assert_eq!(events, view);
    // The history is a fold of the log.
    assert_eq!(folded.history.messages, f.session.messages());
}

#[tokio::test]
async fn a_cancel_is_logged_inside_the_turn_and_before_its_end() {
    let f = fixture();
    let model = Scripted::new(vec![None]);
    let work = turn(&model, true);
    let cancel = f.session.begin_turn(prompt("think forever"), |_| false).await.unwrap();
    let session = Arc::clone(&f.session);
    let running = tokio::spawn(async move { answer(&work, &session, Work::Prompt, cancel).await });
    // Once the model streams, cancel.
    while !f.client.0.lock().unwrap().iter().any(|e| matches!(e, SessionEvent::AgentThought { .. }))
    {
        tokio::task::yield_now().await;
    }
    assert!(f.session.cancel_turn().await);
    assert_eq!(running.await.unwrap(), Ok(StopReason::Cancelled));
    assert!(!f.session.cancel_turn().await, "no turn runs any more");
    let kinds = types(&f.log.lock().unwrap());
    let cancel = kinds.iter().position(|t| t == "cancel_requested").unwrap();
    assert_eq!(kinds.first().map(String::as_str), Some("prompt"));
    assert_eq!(kinds.last().map(String::as_str), Some("turn_ended"));
    assert!(cancel < kinds.len() - 1);
    assert_eq!(kinds.iter().filter(|t| *t == "cancel_requested").count(), 1);
}

#[tokio::test]
async fn plan_mode_offers_tools_that_run_commands_only_where_commands_can_be_confined() {
    for confines in [false, true] {
        let f = fixture();
        f.session.set_planning(true).await;
        let model = Scripted::new(vec![Some(vec![ModelEvent::Text("ok".to_owned())])]);
        let work = turn(&model, confines);
        let cancel = f.session.begin_turn(prompt("plan"), |_| false).await.unwrap();
        answer(&work, &f.session, Work::Prompt, cancel).await.unwrap();
        let offered: Vec<String> =
            model.requests.lock().unwrap()[0].tools.iter().map(|t| t.name.clone()).collect();
        let expected: &[&str] = if confines { &["echo", "shell"] } else { &["echo"] };
        assert_eq!(offered, expected);
    }
}

#[tokio::test]
async fn a_second_prompt_while_a_turn_runs_is_refused() {
    let f = fixture();
    let _running = f.session.begin_turn(prompt("one"), |_| false).await.unwrap();
    assert!(f.session.begin_turn(prompt("two"), |_| false).await.is_err());
}

#[tokio::test]
async fn a_fact_logged_from_outside_the_session_changes_what_it_says() {
    let f = fixture();
    let rule = hotsh_core::permissions::Rule::for_call(
        hotsh_core::permissions::Covers::Command,
        "git commit -m x",
        Mode::DangerFullAccess,
    );
    f.session.record(Fact::RuleAdded { rule: rule.clone() }).await;
    f.session.record(Fact::ModelChosen { model: "other".into() }).await;
    f.session.record(Fact::SessionMode { mode: "plan".into() }).await;
    assert_eq!(f.session.rules(), std::slice::from_ref(&rule));
    assert_eq!(f.session.model_choice().as_deref(), Some("other"));
    assert!(f.session.planning());
    f.session.record(Fact::RuleRemoved { rule }).await;
    assert!(f.session.rules().is_empty());
}

#[tokio::test]
async fn changes_made_together_are_logged_in_the_order_they_apply() {
    let f = fixture();
    let changes: Vec<_> = (0..300)
        .map(|i| {
            let session = Arc::clone(&f.session);
            tokio::spawn(async move { session.choose_sandbox_mode(Mode::ALL[i % 3]).await })
        })
        .collect();
    for change in changes {
        change.await.unwrap();
    }
    let last = f
        .log
        .lock()
        .unwrap()
        .iter()
        .rev()
        .find_map(|r| match r {
            Record::Fact(Fact::SandboxMode { mode }) => Some(*mode),
            _ => None,
        })
        .unwrap();
    assert_eq!(Some(last), f.session.sandbox_choice());
}

#[tokio::test]
async fn a_client_attached_for_a_replay_gets_live_events_only_after_it() {
    let f = fixture();
    let later = Arc::new(Client::default());
    let taken = f
        .session
        .attach_for_replay(Arc::clone(&later) as Arc<dyn EventSink>, async {
            Ok::<_, ()>(f.log.lock().unwrap().len())
        })
        .await
        .unwrap();
    assert_eq!(taken, 0);
    f.session.emit(SessionEvent::AgentText { text: "live".to_owned() }).await;
    assert!(later.0.lock().unwrap().is_empty(), "held while the replay is sent");
    later.emit(SessionEvent::AgentText { text: "replayed".to_owned() });
    f.session.release_held().await;
    let texts: Vec<String> = later
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|e| match e {
            SessionEvent::AgentText { text } => text.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(texts, ["replayed", "live"]);
}

#[tokio::test]
async fn a_turn_that_panics_still_ends_with_an_answer() {
    let outcome = guarded(async {
        if std::hint::black_box(true) {
            panic!("boom in a turn");
        }
        Ok(StopReason::EndTurn)
    })
    .await;
    let Err(TurnFailed { message, .. }) = outcome else { panic!("a panic must fail the turn") };
    assert!(message.ends_with(": boom in a turn"), "{message}");
    assert_eq!(guarded(async { Ok(StopReason::Cancelled) }).await, Ok(StopReason::Cancelled));
}

/// An answer the scripted model refuses as too long for the context.
fn too_long() -> ModelEvent {
    ModelEvent::Finished("context_too_long".to_owned())
}

fn text(text: &str) -> Option<Vec<ModelEvent>> {
    Some(vec![ModelEvent::Text(text.to_owned())])
}

/// A turn whose window is small: 2,000 tokens, compacting past half of it.
fn small_turn(model: &Arc<Scripted>) -> Turn {
    let mut work = turn(model, true);
    work.limits = Limits { window: 2000, compact_at: 0.5, max_requests: 50, ..Limits::default() };
    work
}

/// The log as a fold sees it.
fn folded(f: &Fixture) -> fold::Folded {
    let mut records = vec![Record::Fact(Fact::Session(Box::new(meta())))];
    records.extend(f.log.lock().unwrap().clone());
    fold::fold(records).unwrap()
}

fn is_summary_request(request: &ModelRequest) -> bool {
    matches!(request.messages.last().map(|m| &**m), Some(hotsh_core::model::Message::User { text, .. }) if text.contains("Write a summary"))
}

#[tokio::test]
async fn past_the_threshold_the_history_is_compacted_before_the_next_request_and_folds_back() {
    let f = fixture();
    let big = format!(r#"{{"x":"{}"}}"#, "y".repeat(6000));
    let model = Scripted::new(vec![
        Some(vec![call("a", "echo", &big)]),
        text("SUMMARY: echoed a big value"),
        Some(vec![
            ModelEvent::Text("done".to_owned()),
            ModelEvent::Usage(hotsh_core::model::Usage {
                prompt_tokens: Some(77),
                completion_tokens: Some(3),
                ..Default::default()
            }),
        ]),
    ]);
    let work = small_turn(&model);
    let cancel = f.session.begin_turn(prompt("go"), |_| false).await.unwrap();
    assert_eq!(answer(&work, &f.session, Work::Prompt, cancel).await, Ok(StopReason::EndTurn));
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    assert!(is_summary_request(&requests[1]), "{:?}", requests[1].messages.last());
    // The same system prompt and tools as the turn's requests: the provider's cache serves them.
    assert_eq!(
        (&requests[1].system, &requests[1].tools),
        (&requests[0].system, &requests[0].tools)
    );
    // The request after it: the user's prompt, then the summary; under the window.
    let after = &requests[2].messages;
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(matches!(&*after[0], hotsh_core::model::Message::User { text, .. } if text == "go"));
    assert!(
        matches!(&*after[1], hotsh_core::model::Message::User { text, .. } if text.ends_with("SUMMARY: echoed a big value"))
    );
    let tokens = hotsh_core::context::fixed_tokens(&requests[2])
        + hotsh_core::context::messages_tokens(&requests[2].messages);
    assert!(tokens < 1000);
    // The log holds the full thread and the compaction; its fold is the live history.
    let kinds = types(&f.log.lock().unwrap());
    for kind in [
        "tool_result",
        "compaction_started",
        "compaction_summary",
        "compaction",
        "compaction_ended",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} in {kinds:?}");
    }
    let folded = folded(&f);
    assert_eq!(folded.history.messages.len(), 3, "prompt, summary, the answer");
    assert_eq!(folded.history.messages, f.session.messages());
    // What the provider last said the context held: live and folded alike.
    assert_eq!(f.session.context_estimate(0, None), 80);
    assert_eq!(folded.history.estimate(0, None), 80);
    let ended = f.client.0.lock().unwrap().iter().find_map(|e| match e {
        SessionEvent::CompactionEnded { ended, .. } => Some(ended.clone()),
        _ => None,
    });
    let ended = ended.unwrap();
    assert_eq!(ended.status, "completed");
    assert!(ended.tokens_after.unwrap() < ended.tokens_before);
}

#[tokio::test]
async fn a_failed_or_cancelled_compaction_leaves_the_history_as_it_was() {
    // An empty summary: the compaction fails, the request goes as it is.
    let f = fixture();
    let big = format!(r#"{{"x":"{}"}}"#, "y".repeat(6000));
    let model = Scripted::new(vec![Some(vec![call("a", "echo", &big)]), text(" "), text("done")]);
    let work = small_turn(&model);
    let cancel = f.session.begin_turn(prompt("go"), |_| false).await.unwrap();
    assert_eq!(answer(&work, &f.session, Work::Prompt, cancel).await, Ok(StopReason::EndTurn));
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests[2].messages.len(), 3, "prompt, the call, its result");
    assert_eq!(requests[2].messages[0], requests[0].messages[0]);
    // The summary request held the call's result, cut to fit.
    assert!(
        matches!(&*requests[1].messages[2], hotsh_core::model::Message::Tool { text, .. } if text.contains("cut for the summary")),
        "{:?}",
        requests[1].messages
    );
    let ended = f.client.0.lock().unwrap().iter().find_map(|e| match e {
        SessionEvent::CompactionEnded { ended, .. } => Some(ended.clone()),
        _ => None,
    });
    let ended = ended.unwrap();
    assert_eq!(ended.status, "failed");
    assert!(ended.error.unwrap().contains("empty"));
    assert!(!types(&f.log.lock().unwrap()).iter().any(|k| k == "compaction"));

    // Cancelled while the summary streams: the turn ends cancelled, the history intact.
    let f = fixture();
    let model = Scripted::new(vec![Some(vec![call("a", "echo", &big)]), None]);
    let work = small_turn(&model);
    let cancel = f.session.begin_turn(prompt("go"), |_| false).await.unwrap();
    let session = Arc::clone(&f.session);
    let running = tokio::spawn(async move { answer(&work, &session, Work::Prompt, cancel).await });
    while !f
        .client
        .0
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(e, SessionEvent::CompactionStarted { .. }))
    {
        tokio::task::yield_now().await;
    }
    while model.requests.lock().unwrap().len() < 2 {
        tokio::task::yield_now().await;
    }
    assert!(f.session.cancel_turn().await);
    assert_eq!(running.await.unwrap(), Ok(StopReason::Cancelled));
    assert_eq!(f.session.messages().len(), 3);
    assert_eq!(folded(&f).history.messages, f.session.messages());
    assert!(f.client.0.lock().unwrap().iter().any(
        |e| matches!(e, SessionEvent::CompactionEnded { ended, .. } if ended.status == "cancelled")
    ));
}

#[tokio::test]
async fn a_context_too_long_answer_compacts_and_retries_once() {
    let f = fixture();
    let model =
        Scripted::new(vec![text("first"), Some(vec![too_long()]), text("SUMMARY"), text("after")]);
    let work = turn(&model, true);
    let cancel = f.session.begin_turn(prompt("one"), |_| false).await.unwrap();
    answer(&work, &f.session, Work::Prompt, cancel).await.unwrap();
    let cancel = f.session.begin_turn(prompt("two"), |_| false).await.unwrap();
    assert_eq!(answer(&work, &f.session, Work::Prompt, cancel).await, Ok(StopReason::EndTurn));
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 4);
    assert!(is_summary_request(&requests[2]));
    assert_eq!(
        requests[3].messages.len(),
        3,
        "two prompts and the summary: {:?}",
        requests[3].messages
    );

    // Refused again after compacting: the turn fails and says why; the session goes on.
    let f = fixture();
    let model = Scripted::new(vec![
        text("first"),
        Some(vec![too_long()]),
        text("SUMMARY"),
        Some(vec![too_long()]),
        text("fine"),
    ]);
    let work = turn(&model, true);
    let cancel = f.session.begin_turn(prompt("one"), |_| false).await.unwrap();
    answer(&work, &f.session, Work::Prompt, cancel).await.unwrap();
    let cancel = f.session.begin_turn(prompt("two"), |_| false).await.unwrap();
    let failed = answer(&work, &f.session, Work::Prompt, cancel).await.unwrap_err();
    assert!(failed.message.contains("Even compacted"), "{}", failed.message);
    let cancel = f.session.begin_turn(prompt("three"), |_| false).await.unwrap();
    assert_eq!(answer(&work, &f.session, Work::Prompt, cancel).await, Ok(StopReason::EndTurn));
}

#[tokio::test]
async fn compact_now_uses_the_focus_and_a_turn_stops_at_its_request_limit() {
    let f = fixture();
    let model = Scripted::new(vec![text("first answer"), text("SUMMARY")]);
    let work = turn(&model, true);
    let cancel = f.session.begin_turn(prompt("one"), |_| false).await.unwrap();
    answer(&work, &f.session, Work::Prompt, cancel).await.unwrap();
    let command = Fact::Command { text: "/compact the parser".to_owned(), blocks: Vec::new() };
    let cancel = f.session.begin_turn(command, |_| false).await.unwrap();
    let focus = Some("the parser".to_owned());
    assert_eq!(
        answer(&work, &f.session, Work::Compact { focus }, cancel).await,
        Ok(StopReason::EndTurn)
    );
    let requests = model.requests.lock().unwrap().clone();
    let Some(hotsh_core::model::Message::User { text, .. }) =
        requests[1].messages.last().map(|m| &**m)
    else {
        panic!()
    };
    assert!(text.ends_with("focus on: the parser"), "{text}");
    assert_eq!(f.session.messages().len(), 2, "the prompt and the summary");

    let f = fixture();
    let model =
        Scripted::new((0..5).map(|i| Some(vec![call(&format!("c{i}"), "echo", "{}")])).collect());
    let mut work = turn(&model, true);
    work.limits.max_requests = 3;
    let cancel = f.session.begin_turn(prompt("loop"), |_| false).await.unwrap();
    assert_eq!(
        answer(&work, &f.session, Work::Prompt, cancel).await,
        Ok(StopReason::MaxTurnRequests)
    );
    assert_eq!(model.requests.lock().unwrap().len(), 3);
}

/// An executor that runs nothing: it answers every command with what it was asked, keeps a
/// list of running tasks the test sets, and records what it was told to do.
#[derive(Debug, Default)]
struct FakeExecutor {
    running: Mutex<Vec<RunningTask>>,
    asked: Mutex<Vec<String>>,
    reported: Mutex<Vec<String>>,
}

impl Executor for FakeExecutor {
    fn run<'a>(
        &'a self,
        request: RunRequest,
        live: &'a LiveOutput,
        _cancel: &'a tokio_util::sync::CancellationToken,
    ) -> BoxFuture<'a, Result<RunOutcome, RunError>> {
        let policy = match &request.policy {
            Some(policy) => format!("writable {:?}", policy.writable),
            None => "unconfined".to_owned(),
        };
        self.asked.lock().unwrap().push(format!("run {} ({policy})", request.command));
        live.push(request.command.as_bytes());
        Box::pin(async move {
            Ok(RunOutcome {
                exit_code: Some(0),
                signal: None,
                not_run: false,
                timed_out: false,
                timeout: std::time::Duration::from_secs(1),
                aborted: false,
                stdout: format!("ran {}", request.command),
                stderr: String::new(),
                truncated: false,
                spill: None,
                total_bytes: 0,
                duration: std::time::Duration::ZERO,
            })
        })
    }
    fn start(&self, request: StartRequest) -> BoxFuture<'_, Result<Started, RunError>> {
        self.asked.lock().unwrap().push(format!("start {}", request.command));
        Box::pin(async { Err(RunError::Disposed) })
    }
    fn read_output(&self, id: &str) -> Result<TaskRead, TaskError> {
        Err(TaskError::Unknown(id.to_owned()))
    }
    fn kill<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Killed, TaskError>> {
        Box::pin(async move { Err(TaskError::Unknown(id.to_owned())) })
    }
    fn owner_of(&self, id: &str) -> Result<Option<String>, TaskError> {
        Err(TaskError::Unknown(id.to_owned()))
    }
    fn mark_end_reported(&self, id: &str) {
        self.reported.lock().unwrap().push(id.to_owned());
    }
    fn end_reported(&self, id: &str) -> bool {
        self.reported.lock().unwrap().iter().any(|r| r == id)
    }
    fn running_owned_by(&self, owner: &str) -> Vec<RunningTask> {
        self.asked.lock().unwrap().push(format!("running of {owner}"));
        self.running.lock().unwrap().clone()
    }
    fn kill_owned_by<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, ()> {
        self.asked.lock().unwrap().push(format!("kill all of {owner}"));
        Box::pin(async {})
    }
    fn prepare(&self, owner: &str, _policy: &Policy) {
        self.asked.lock().unwrap().push(format!("prepare {owner}"));
    }
    fn pause_confined(&self) -> BoxFuture<'_, Option<Pause>> {
        Box::pin(async { Some(Box::new(()) as Pause) })
    }
}

/// `shell` runs its `command` through an executor port: the seam a remote executor plugs
/// into, used here without a process.
struct ShellTools(Arc<FakeExecutor>);

impl ToolProvider for ShellTools {
    fn prepare(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    fn tools(&self, _planning: bool) -> BoxFuture<'_, Vec<ToolDefinition>> {
        Box::pin(async {
            vec![ToolDefinition {
                name: "shell".to_owned(),
                description: String::new(),
                input_schema: serde_json::json!({"type": "object"}).into(),
                effects: ToolEffects {
                    runs_commands: true,
                    writes_files: false,
                    concurrent: false,
                },
            }]
        })
    }
    fn call<'a>(&'a self, call: Call<'a>) -> Option<BoxFuture<'a, CallResult>> {
        (call.call.name == "shell").then(|| -> BoxFuture<'a, CallResult> {
            Box::pin(async move {
                let arguments: serde_json::Value =
                    serde_json::from_str(&call.call.arguments).unwrap();
                let request = RunRequest {
                    command: arguments["command"].as_str().unwrap().to_owned(),
                    workdir: call.session.cwd.clone(),
                    timeout: None,
                    spill_path: "/nowhere".into(),
                    policy: Some(Policy {
                        writable: vec![call.session.cwd.clone()],
                        ..Policy::default()
                    }),
                    environment: Some(call.session.id.0.clone()),
                    temp_dir: None,
                    stdin: None,
                    env: Vec::new(),
                };
                let live = LiveOutput::new(1024);
                let outcome = self.0.run(request, &live, call.cancel).await.unwrap();
                live.close();
                assert_eq!(live.drain(), Drained::Text("pwd".to_owned()));
                CallResult { text: outcome.stdout, is_error: false }
            })
        })
    }
}

fn ended(id: &str, exit_code: i32) -> TaskEnded {
    TaskEnded {
        id: TaskId(id.to_owned()),
        owner: Some("s".to_owned()),
        command: format!("work {id}"),
        status: TaskStatus { state: TaskState::Exited, exit_code: Some(exit_code), signal: None },
        output_path: format!("/out/{id}.log").into(),
        mode: "workspace-write".to_owned(),
        denied: (exit_code != 0).then(|| "file".to_owned()),
        not_run: false,
    }
}

/// The task cards the client saw closed: (call id, status, content).
fn closed_cards(client: &Client) -> Vec<(String, CallStatus, String)> {
    client
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|event| match event {
            SessionEvent::ToolCallFinished {
                call_id,
                status,
                card: hotsh_core::session::Card::Generic(card),
                ..
            } => Some((call_id.0.clone(), *status, card.content.clone().unwrap_or_default())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_turn_runs_a_command_through_the_executor_port() {
    let f = fixture();
    let executor = Arc::new(FakeExecutor::default());
    let model = Scripted::new(vec![
        Some(vec![call("a", "shell", r#"{"command":"pwd"}"#)]),
        Some(vec![ModelEvent::Text("done".to_owned())]),
    ]);
    let work = Turn {
        tools: ToolRouter::new(vec![Arc::new(ShellTools(Arc::clone(&executor)))], true),
        ..turn(&model, true)
    };
    let cancel = f.session.begin_turn(prompt("where am I"), |_| false).await.unwrap();
    assert_eq!(answer(&work, &f.session, Work::Prompt, cancel).await, Ok(StopReason::EndTurn));
    assert_eq!(*executor.asked.lock().unwrap(), [r#"run pwd (writable ["/w"])"#]);
    assert_eq!(results_sent(&model), [("ran pwd".to_owned(), false)]);
}

/// The record a call that started `task` logs.
fn started(task: &str, call: &str) -> Fact {
    Fact::TaskStarted {
        task_id: task.to_owned(),
        call_id: call.to_owned(),
        command: format!("work {task}"),
        output_path: format!("/out/{task}.log").into(),
    }
}

#[tokio::test]
async fn a_task_card_closes_when_the_task_ends_whichever_comes_first_and_the_model_hears_first() {
    let f = fixture();
    // Started, drawn, then ended: closed at the end, with its sandbox marker.
    f.session.task_started(started("bash-1", "call-1")).await;
    f.session.keep_task_card("bash-1", &ToolCallId("call-1".to_owned()), "Task 1").await;
    assert!(closed_cards(&f.client).is_empty(), "open while the task runs");
    f.session.task_ended(ended("bash-1", 2), false).await;
    // Ended before its start was even logged (a task that exits at once): its end is logged
    // after its start, and its card closed when drawn.
    f.session.task_ended(ended("bash-2", 0), false).await;
    f.session.task_started(started("bash-2", "call-2")).await;
    f.session.keep_task_card("bash-2", &ToolCallId("call-2".to_owned()), "Task 2").await;
    let closed = closed_cards(&f.client);
    assert_eq!(closed.len(), 2, "{closed:?}");
    assert_eq!(closed[0].0, "call-1");
    assert_eq!(closed[0].1, CallStatus::Failed);
    assert!(
        closed[0].2.starts_with(
            "[sandbox: file access denied under workspace-write mode] bash-1 exited with code 2"
        ),
        "{closed:?}"
    );
    assert_eq!((closed[1].0.as_str(), closed[1].1), ("call-2", CallStatus::Completed));
    // Each end is logged before its card closes, and the model's notices wait for its next
    // request (delivered when the next turn begins).
    let kinds = types(&f.log.lock().unwrap());
    assert_eq!(
        kinds,
        [
            "task_started",
            "task_ended",
            "tool_call_finished",
            "task_started",
            "task_ended",
            "tool_call_finished"
        ]
    );
    let _turn = f.session.begin_turn(prompt("next"), |_| false).await.unwrap();
    let notices: Vec<String> = f
        .log
        .lock()
        .unwrap()
        .iter()
        .filter_map(|r| match r {
            Record::Fact(Fact::Notice { task_id, .. }) => task_id.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(notices, ["bash-1", "bash-2"]);
}

#[tokio::test]
async fn a_task_whose_end_the_model_saw_is_logged_as_reported_and_owes_no_notice() {
    let f = fixture();
    f.session.task_started(started("bash-1", "call-1")).await;
    f.session.task_ended(ended("bash-1", 0), true).await;
    let _turn = f.session.begin_turn(prompt("next"), |_| false).await.unwrap();
    assert_eq!(
        types(&f.log.lock().unwrap()),
        ["task_started", "task_ended", "task_reported", "prompt"]
    );
}

#[tokio::test]
async fn an_end_whose_start_no_call_logged_is_logged_when_the_turn_ends() {
    let f = fixture();
    let _turn = f.session.begin_turn(prompt("go"), |_| false).await.unwrap();
    f.session.task_ended(ended("bash-7", 0), false).await;
    assert_eq!(types(&f.log.lock().unwrap()), ["prompt"], "it waits for its start");
    f.session.end_turn(Fact::TurnEnded { outcome: TurnOutcome::EndTurn, message: None }).await;
    assert_eq!(types(&f.log.lock().unwrap()), ["prompt", "task_ended", "turn_ended"]);
}

#[tokio::test]
async fn plan_mode_names_the_running_tasks_that_keep_writing_and_closing_stops_everything() {
    let f = fixture();
    let executor = FakeExecutor::default();
    f.session.tell_of_tasks_that_keep_writing(&executor, Narrowing::PlanMode).await;
    assert!(f.client.0.lock().unwrap().is_empty(), "no task, nothing to say");
    *executor.running.lock().unwrap() = vec![
        RunningTask { id: "bash-1".into(), command: "cat".into(), mode: "read-only".into() },
        RunningTask {
            id: "bash-2".into(),
            command: "make watch\nmore".into(),
            mode: "workspace-write".into(),
        },
    ];
    f.session.tell_of_tasks_that_keep_writing(&executor, Narrowing::PlanMode).await;
    let note = f.client.0.lock().unwrap().iter().find_map(|e| match e {
        SessionEvent::HostNote { title, detail, .. } => Some((title.clone(), detail.clone())),
        _ => None,
    });
    let (title, detail) = note.unwrap();
    assert_eq!(title, "Plan mode: 1 background task keeps its write access");
    assert!(detail.ends_with("- bash-2 (workspace-write): make watch"), "{detail}");
    assert!(!detail.contains("bash-1"), "a read-only task writes nothing: {detail}");

    // Closing: its tasks killed, its notices dropped, its turn cancelled.
    let turn = f.session.begin_turn(prompt("long"), |_| false).await.unwrap();
    f.session.close(&executor).await;
    assert!(turn.is_cancelled());
    assert_eq!(executor.asked.lock().unwrap().last().map(String::as_str), Some("kill all of s"));
}

/// A hook that refuses calls of one tool and notes every result it sees.
struct Refusing {
    tool: &'static str,
    seen: Mutex<Vec<(String, bool)>>,
}

impl CallHook for Refusing {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Option<String>> {
        let refused =
            (call.call.name == self.tool).then(|| format!("{} is not allowed", self.tool));
        Box::pin(async move { refused })
    }
    fn after<'a>(&'a self, call: Call<'a>, result: &'a CallResult) -> BoxFuture<'a, ()> {
        self.seen.lock().unwrap().push((call.call.name.clone(), result.is_error));
        Box::pin(async {})
    }
}

/// The tool results the model was sent in its last request: (text, is_error).
fn results_sent(model: &Scripted) -> Vec<(String, bool)> {
    let requests = model.requests.lock().unwrap();
    requests
        .last()
        .unwrap()
        .messages
        .iter()
        .filter_map(|m| match &**m {
            hotsh_core::model::Message::Tool { text, is_error, .. } => {
                Some((text.clone(), *is_error))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn every_call_passes_the_hooks_a_refused_one_runs_nothing_and_each_closed_card_is_flushed() {
    let f = fixture();
    let executor = Arc::new(FakeExecutor::default());
    let hook = Arc::new(Refusing { tool: "shell", seen: Mutex::default() });
    let model = Scripted::new(vec![
        Some(vec![call("a", "shell", r#"{"command":"rm -rf /"}"#), call("b", "echo", "{}")]),
        Some(vec![ModelEvent::Text("done".to_owned())]),
    ]);
    let providers: Vec<Arc<dyn ToolProvider>> =
        vec![Arc::new(ShellTools(Arc::clone(&executor))), Arc::new(Tools)];
    let work = Turn {
        tools: ToolRouter::new(providers, true).with_hook(Arc::clone(&hook) as Arc<dyn CallHook>),
        ..turn(&model, true)
    };
    let cancel = f.session.begin_turn(prompt("go"), |_| false).await.unwrap();
    answer(&work, &f.session, Work::Prompt, cancel).await.unwrap();
    assert!(executor.asked.lock().unwrap().is_empty(), "the refused command never ran");
    assert_eq!(
        results_sent(&model),
        [("shell is not allowed".to_owned(), true), ("{}".to_owned(), false)]
    );
    assert_eq!(
        *hook.seen.lock().unwrap(),
        [("shell".to_owned(), true), ("echo".to_owned(), false)],
        "the hook sees every result, its own refusals too"
    );
    // The refused call's card is shown failed; each call's closed card was written out before
    // its result joined the history.
    let log = f.log.lock().unwrap().clone();
    let failed = log.iter().position(|r| {
        matches!(
            r,
            Record::Event(SessionEvent::ToolCallFinished { status: CallStatus::Failed, .. })
        )
    });
    let flushed = f.flushed_at.lock().unwrap().clone();
    let results: Vec<usize> = log
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r, Record::Fact(Fact::ToolResult { .. })))
        .map(|(at, _)| at)
        .collect();
    assert!(failed.is_some_and(|at| at < results[0]));
    for at in results {
        assert!(
            flushed.contains(&at),
            "flushed with the card closed, before result {at}: {flushed:?}"
        );
    }
}

#[tokio::test]
async fn plan_mode_refuses_a_hidden_tool_the_model_calls_anyway() {
    let f = fixture();
    f.session.set_planning(true).await;
    let executor = Arc::new(FakeExecutor::default());
    let model = Scripted::new(vec![
        Some(vec![call("a", "shell", r#"{"command":"touch x"}"#)]),
        Some(vec![ModelEvent::Text("done".to_owned())]),
    ]);
    // No backend confines commands: plan mode offers no tool that runs them.
    let work = Turn {
        tools: ToolRouter::new(vec![Arc::new(ShellTools(Arc::clone(&executor)))], false),
        ..turn(&model, false)
    };
    let cancel = f.session.begin_turn(prompt("plan"), |_| false).await.unwrap();
    answer(&work, &f.session, Work::Prompt, cancel).await.unwrap();
    assert!(model.requests.lock().unwrap()[0].tools.is_empty());
    assert!(executor.asked.lock().unwrap().is_empty());
    let sent = results_sent(&model);
    assert_eq!(sent.len(), 1);
    assert!(sent[0].1);
    assert!(sent[0].0.starts_with("tool `shell` is not offered in plan mode"), "{sent:?}");
}
