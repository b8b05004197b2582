//! A session goes on after anything (issue "continuity"): a log cut after any record of a turn
//! with two tool calls, or torn inside one, or left by a SIGKILL while a command runs, loads
//! into a new hotsh whose next prompt and `/compact` a strict provider (one that answers 400 to
//! a tool call left unanswered, as OpenAI and DeepSeek do) accepts; the cut-off cards come back
//! closed as failed, and the model is told what happened.

use hotsh_tests::{Agent, AgentOptions, FakeProvider, Reply, delta, sse};
use serde_json::{Value, json};
use std::path::Path;

const CUT_OFF_RESULT: &str = "[hotsh stopped while this ran: the command may have finished or not]";
const CUT_OFF_NOTICE: &str = "The previous turn was cut off";

fn options(provider: &FakeProvider, data: &Path) -> AgentOptions {
    let mut options = AgentOptions::script(vec![]);
    options.model_args = Some(Vec::new());
    options.config = Some(format!(
        "model = \"strict\"\n[models.strict]\nbase_url = \"{}\"\nmodel = \"strict-model\"\ncontext_window = 100000\n",
        provider.base_url
    ));
    options.env = vec![("HOTSH_DATA_DIR".into(), data.to_string_lossy().into_owned())];
    options
}

/// A streamed answer of plain text.
fn answer(text: &str) -> Reply {
    Reply::Stream(vec![
        delta(json!({"role": "assistant", "content": text}), None),
        delta(json!({}), Some("stop")),
        sse(
            &json!({"id": "x", "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}}),
        ),
        "data: [DONE]\n\n".into(),
    ])
}

/// A streamed answer calling `bash` twice.
fn two_calls(first: &str, second: &str) -> Reply {
    let call = |index: u64, id: &str, command: &str| {
        let arguments = json!({"command": command}).to_string();
        let function = json!({"name": "bash", "arguments": arguments});
        json!({"tool_calls": [{"index": index, "id": id, "type": "function", "function": function}]})
    };
    Reply::Stream(vec![
        delta(json!({"role": "assistant", "content": "Running two."}), None),
        delta(call(0, "call_a", first), None),
        delta(call(1, "call_b", second), None),
        delta(json!({}), Some("tool_calls")),
        "data: [DONE]\n\n".into(),
    ])
}

/// The one session log in `data`.
fn log_of(data: &Path) -> std::path::PathBuf {
    let logs: Vec<_> = std::fs::read_dir(data.join("sessions"))
        .expect("the sessions directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    logs[0].clone()
}

/// Loads `session` from the log text `log` in a new hotsh with a strict provider, then sends a
/// prompt and `/compact`: both must succeed. Returns the replayed updates and the request the
/// next prompt made.
fn load_and_go_on(session: &str, log: &[u8], cwd: &Path, what: &str) -> (Vec<Value>, Value) {
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("sessions")).unwrap();
    std::fs::write(data.path().join(format!("sessions/{session}.jsonl")), log).unwrap();
    let provider = FakeProvider::strict(vec![answer("Going on."), answer("A summary.")]);
    let mut agent = Agent::start(options(&provider, data.path()));
    agent.initialize(true);
    agent.wait_for_stderr("initial plugin scan done");
    let (replayed, loaded) = agent.load(session, cwd);
    assert!(loaded.get("result").is_some(), "{what}: {loaded}");
    // Every card drawn is closed again.
    for started in replayed.iter().filter(|u| u["sessionUpdate"] == "tool_call") {
        let id = &started["toolCallId"];
        let closed = replayed.iter().any(|u| {
            u["toolCallId"] == *id && (matches!(u["status"].as_str(), Some("completed" | "failed")))
        });
        assert!(closed, "{what}: card {id} left open: {replayed:#?}");
    }
    let response = agent.prompt(session, "go on");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{what}: {response}");
    let compacted = agent.prompt(session, "/compact");
    assert_eq!(compacted["result"]["stopReason"], "end_turn", "{what}: {compacted}");
    let requests = provider.received();
    assert_eq!(requests.len(), 2, "{what}: a request was refused: {requests:#?}");
    assert!(agent.finish().success());
    (replayed, requests[0].body.clone())
}

/// A finished turn with two tool calls, logged: the agent (alive, for its folder), the
/// session, and the log's lines.
fn a_logged_turn() -> (Agent, String, Vec<String>, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let provider =
        FakeProvider::strict(vec![two_calls("echo one", "echo two"), answer("Both ran.")]);
    let mut agent = Agent::start(options(&provider, data.path()));
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "run two");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let text = std::fs::read_to_string(log_of(data.path())).unwrap();
    let lines = text.lines().map(str::to_owned).collect();
    (agent, session, lines, data)
}

#[test]
fn a_log_cut_after_any_record_of_a_turn_loads_and_goes_on_with_a_strict_provider() {
    let (agent, session, lines, _data) = a_logged_turn();
    let asked = lines
        .iter()
        .position(|l| l.contains("\"type\":\"assistant_message\"") && l.contains("call_b"))
        .expect("the assistant message with the two calls");
    let ended = lines.iter().position(|l| l.contains("\"type\":\"turn_ended\"")).unwrap();
    for k in asked + 1..=lines.len() {
        let log = lines[..k].join("\n") + "\n";
        let what = format!("cut after record {k} of {}", lines.len());
        let (_, request) = load_and_go_on(&session, log.as_bytes(), &agent.workdir, &what);
        let messages = request["messages"].to_string();
        let answered = lines[..k].iter().filter(|l| l.contains("\"type\":\"tool_result\"")).count();
        // Cut before both results were logged: the rest are answered as stopped, and the
        // model is told the turn was cut off.
        assert_eq!(messages.contains(CUT_OFF_RESULT), answered < 2, "{what}: {messages}");
        assert_eq!(messages.contains(CUT_OFF_NOTICE), answered < 2, "{what}: {messages}");
        if k > ended {
            assert!(!messages.contains(CUT_OFF_NOTICE), "{what}");
        }
    }
    assert!(agent.finish().success());
}

#[test]
fn a_log_torn_inside_its_last_record_loads_and_goes_on_with_a_strict_provider() {
    let (agent, session, lines, _data) = a_logged_turn();
    // Torn inside the second call's result: the critical record.
    let second = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("\"type\":\"tool_result\""))
        .nth(1)
        .map(|(at, _)| at)
        .expect("the second result");
    let whole = lines[..second].join("\n") + "\n";
    let record = lines[second].as_bytes();
    // Every byte for a short record; a record of more than 120 bytes at 120 points spread
    // over it, the first and the last byte included.
    let step = record.len().div_ceil(120).max(1);
    let mut cuts: Vec<usize> = (1..record.len()).step_by(step).collect();
    cuts.push(record.len() - 1);
    for cut in cuts {
        let mut log = whole.clone().into_bytes();
        log.extend_from_slice(&record[..cut]);
        let what = format!("torn at byte {cut} of {}", record.len());
        let (_, request) = load_and_go_on(&session, &log, &agent.workdir, &what);
        let messages = request["messages"].to_string();
        assert!(messages.contains(CUT_OFF_RESULT), "{what}: {messages}");
    }
    assert!(agent.finish().success());
}

#[test]
fn a_sigkill_while_the_second_command_runs_leaves_a_session_that_goes_on() {
    let data = tempfile::tempdir().unwrap();
    let provider =
        FakeProvider::strict(vec![two_calls("echo one", "echo second-started; sleep 60")]);
    let mut agent = Agent::start(options(&provider, data.path()));
    agent.initialize(true);
    let session = agent.new_session();
    agent.start_prompt(&session, "run two");
    agent.wait_for_terminal_output("second-started");
    agent.kill9();
    let log = std::fs::read(log_of(data.path())).unwrap();
    let (replayed, request) = load_and_go_on(&session, &log, &agent.workdir, "killed");
    // The thread as it was, the running command's card closed as failed.
    let titles: Vec<&str> = replayed
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .filter_map(|u| u["title"].as_str())
        .collect();
    assert_eq!(titles, ["echo one", "echo second-started; sleep 60"], "{replayed:#?}");
    let cut = replayed
        .iter()
        .rev()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u.get("status").is_some())
        .unwrap();
    assert_eq!(cut["status"], "failed", "{cut}");
    // The model gets both results (the second as stopped, after what of its output was
    // logged) and the note.
    let messages = request["messages"].as_array().unwrap();
    let tools: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tools.len(), 2, "{messages:#?}");
    assert_eq!(tools[0]["content"], "one", "{messages:#?}");
    let second = tools[1]["content"].as_str().unwrap();
    assert!(second.ends_with(CUT_OFF_RESULT), "{second}");
    let after = &messages[messages.iter().position(|m| m["tool_call_id"] == "call_b").unwrap() + 1];
    assert!(after["content"].as_str().unwrap().starts_with(CUT_OFF_NOTICE), "{messages:#?}");
    assert_eq!(messages.last().unwrap()["content"], "go on");
}

#[test]
fn stdin_closing_while_a_command_runs_cancels_the_turn_and_asks_the_model_nothing_more() {
    let data = tempfile::tempdir().unwrap();
    // Were the turn to go on, the provider has an answer for it.
    let provider = FakeProvider::strict(vec![
        two_calls("echo first-started; sleep 60", "echo never"),
        answer("Should not be asked for."),
    ]);
    let mut agent = Agent::start(options(&provider, data.path()));
    agent.initialize(true);
    let session = agent.new_session();
    agent.start_prompt(&session, "run two");
    agent.wait_for_terminal_output("first-started");
    assert!(agent.finish().success());
    // The process is gone: whatever it asked for is in.
    assert_eq!(provider.received().len(), 1, "a model request after the client left");
    let log = std::fs::read_to_string(log_of(data.path())).unwrap();
    assert!(log.contains("\"type\":\"cancel_requested\""), "{log}");
    let results: Vec<&str> =
        log.lines().filter(|l| l.contains("\"type\":\"tool_result\"")).collect();
    assert_eq!(results.len(), 2, "{log}");
    assert!(!results[0].contains("SIGKILL"), "the command was killed, not cancelled: {log}");
    assert!(results[1].contains("not run: the user cancelled the turn"), "{log}");
    let ended = log.lines().find(|l| l.contains("\"type\":\"turn_ended\"")).expect("an end");
    assert!(ended.contains("cancelled"), "{ended}");
}
