//! Bad input gets a clear answer, and the agent keeps serving.

use hotsh_tests::{Agent, AgentOptions, bash_call, say};
use serde_json::json;

#[test]
fn malformed_json_rpc_gets_a_parse_error_and_the_agent_keeps_serving() {
    let mut agent = Agent::start(AgentOptions::script(vec![]));
    agent.send_line("{this is not json");
    let error = agent.wait_for(|m| m.get("error").is_some());
    assert_eq!(error["error"]["code"], -32700, "{error}");
    assert_eq!(error["id"], serde_json::Value::Null);
    // A request that is JSON but not JSON-RPC.
    agent.send_line(r#"{"id": 7, "hello": "world"}"#);
    let error = agent.wait_for(|m| m["error"]["code"] == -32600);
    assert!(error.get("error").is_some());
    agent.initialize(true);
    agent.new_session();
}

#[test]
fn unknown_method_is_method_not_found() {
    let mut agent = Agent::start(AgentOptions::script(vec![]));
    agent.initialize(true);
    let response = agent.call("session/fly", json!({}));
    assert_eq!(response["error"]["code"], -32601, "{response}");
    agent.new_session();
}

#[test]
fn prompt_for_an_unknown_session_is_invalid_params() {
    let mut agent = Agent::start(AgentOptions::script(vec![]));
    agent.initialize(true);
    let response = agent.prompt("no-such-session", "hello");
    assert_eq!(response["error"]["code"], -32602, "{response}");
    assert_eq!(response["error"]["message"], "unknown session: no-such-session");
}

#[test]
fn relative_cwd_is_refused() {
    let mut agent = Agent::start(AgentOptions::script(vec![]));
    agent.initialize(true);
    let response = agent.call("session/new", json!({"cwd": "relative/dir", "mcpServers": []}));
    assert_eq!(response["error"]["code"], -32602, "{response}");
    assert!(response["error"]["message"].as_str().unwrap().contains("absolute"));
    agent.new_session();
}

#[test]
fn second_prompt_while_a_turn_runs_is_refused() {
    let mut agent =
        Agent::start(AgentOptions::script(vec![bash_call("sleep 30.0423"), say("after")]));
    agent.initialize(true);
    let session = agent.new_session();
    let first = agent.start_prompt(&session, "first");
    agent.wait_for(|m| m["params"]["update"]["sessionUpdate"] == "tool_call");
    let second = agent.prompt(&session, "second");
    assert_eq!(second["error"]["code"], -32600, "{second}");
    let message = second["error"]["message"].as_str().unwrap();
    assert!(message.contains("already running"), "{message}");
    agent.notify("session/cancel", json!({"sessionId": session}));
    assert_eq!(agent.response(first)["result"]["stopReason"], "cancelled");
}

#[test]
fn wrong_tool_arguments_become_tool_errors_the_model_reads() {
    let calls = json!({"tool_calls": [
        {"name": "bash", "arguments": {}},
        {"name": "bash", "arguments": {"command": 42}},
        {"name": "bash", "arguments": {"command": "true", "color": "blue"}},
        {"name": "bash", "arguments": "{\"command\": \"tru"},
        {"name": "bash", "arguments": {"command": "true", "workdir": "does/not/exist"}},
        {"name": "nope", "arguments": {}},
        {"name": "bash", "arguments": {"command": "echo still serving"}}
    ]});
    let mut agent = Agent::start(AgentOptions::script(vec![calls, say("ok")]));
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "go");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let results = agent.tool_results();
    let expect_error = |index: usize, needle: &str| {
        let (text, is_error) = &results[index];
        assert!(is_error, "call {index} should be an error: {text}");
        assert!(text.contains(needle), "call {index}: {text:?} lacks {needle:?}");
    };
    expect_error(0, "missing field `command`");
    expect_error(1, "invalid type: integer `42`, expected a string");
    expect_error(2, "unknown field `color`");
    expect_error(3, "EOF while parsing");
    expect_error(4, "does/not/exist does not exist");
    expect_error(5, "unknown tool `nope`; the tools are: bash");
    assert_eq!(results[6], ("still serving".to_owned(), false));
    // Every failed call shows as a failed card carrying the same text.
    let updates = agent.updates(&session);
    let failed: Vec<_> = updates.iter().filter(|u| u["status"] == "failed").collect();
    assert_eq!(failed.len(), 6);
    assert_eq!(failed[5]["content"][0]["content"]["text"], results[5].0);
}

#[test]
fn script_running_out_answers_the_prompt_with_an_error_and_the_session_lives_on() {
    let mut agent = Agent::start(AgentOptions::script(vec![say("only answer")]));
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "one")["result"]["stopReason"], "end_turn");
    let response = agent.prompt(&session, "two");
    assert_eq!(response["error"]["code"], -32603, "{response}");
    let message = response["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("has no more responses for this session (all 1 were used)"),
        "{message}"
    );
    // Nothing of the failure was spliced into the agent's reply.
    let updates = agent.updates(&session);
    assert_eq!(updates.len(), 1, "{updates:#?}");
    // Another session plays the script from its start.
    let other = agent.new_session();
    assert_eq!(agent.prompt(&other, "one")["result"]["stopReason"], "end_turn");
    assert_eq!(agent.updates(&other)[0]["content"]["text"], "only answer");
}

#[test]
fn session_cwd_must_be_an_existing_directory() {
    let mut agent = Agent::start(AgentOptions::script(vec![]));
    agent.initialize(true);
    let missing = agent.workdir.join("missing");
    let response =
        agent.call("session/new", json!({"cwd": missing.to_str().unwrap(), "mcpServers": []}));
    assert_eq!(response["error"]["code"], -32602, "{response}");
    let message = response["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("cwd {} cannot be used: No such file", missing.display())),
        "{message}"
    );
    let file = agent.workdir.join("a-file");
    std::fs::write(&file, "").unwrap();
    let response =
        agent.call("session/new", json!({"cwd": file.to_str().unwrap(), "mcpServers": []}));
    assert_eq!(response["error"]["code"], -32602, "{response}");
    assert_eq!(response["error"]["message"], format!("cwd {} is not a directory", file.display()));
    agent.new_session();
}

#[test]
fn agent_exits_cleanly_when_the_client_closes_stdin() {
    let mut agent = Agent::start(AgentOptions::script(vec![]));
    agent.initialize(true);
    let status = agent.finish();
    assert!(status.success(), "{status}");
}

#[test]
fn session_new_written_right_behind_initialize_is_served() {
    for run in 0..20 {
        let mut agent = Agent::start(AgentOptions::script(vec![]));
        let cwd = agent.workdir.to_string_lossy().into_owned();
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": {}}});
        let new = json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
            "params": {"cwd": cwd, "mcpServers": []}});
        // Both lines in one write, before any answer.
        agent.send_bytes(format!("{initialize}\n{new}\n").as_bytes());
        let initialized = agent.wait_for(|m| m["id"] == 1);
        assert!(initialized.get("result").is_some(), "run {run}: {initialized}");
        let created = agent.wait_for(|m| m["id"] == 2);
        assert!(created["result"]["sessionId"].is_string(), "run {run}: {created}");
    }
}
