//! A plugin that panics cannot take the host down.

use hotsh_tests::{Agent, AgentOptions, fixture_plugin, tool_bash_plugin};
use serde_json::json;

#[test]
fn panic_in_a_plugin_becomes_a_tool_error_and_the_agent_keeps_serving() {
    let calls = json!({"tool_calls": [
        {"name": "panic_in_invoke"},
        {"name": "panic_in_present"},
        {"name": "bash", "arguments": {"command": "echo alive"}}
    ]});
    let mut options = AgentOptions::script(Vec::new());
    options.per_session = vec![vec![calls, json!({"text": "ok"})], vec![json!({"text": "served"})]];
    options.plugins = vec![tool_bash_plugin(), fixture_plugin("panicky")];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "go");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let results = agent.tool_results();
    assert_eq!(results[0], ("plugin panicked in invoke: boom in invoke".to_owned(), true));
    // A panic while drawing the card falls back to a plain card; the call still runs.
    assert_eq!(results[1], ("ran fine".to_owned(), false));
    assert_eq!(results[2], ("alive".to_owned(), false));
    let updates = agent.updates(&session);
    let first = updates.iter().find(|u| u["sessionUpdate"] == "tool_call").unwrap();
    assert_eq!(first["title"], "panic_in_invoke");
    // The agent lives on and serves another session's turn.
    let other = agent.new_session();
    assert_eq!(agent.prompt(&other, "still there?")["result"]["stopReason"], "end_turn");
    assert_eq!(agent.updates(&other)[0]["content"]["text"], "served");
}
