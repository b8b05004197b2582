//! Subagents (the `task` tool) and forks, end to end against the loopback provider: what the
//! provider sees of each session, what the client is shown, and what survives a restart.
#![allow(clippy::unwrap_used, reason = "tests")]

use hotsh_tests::{Agent, AgentOptions, FakeProvider, Reply, tool_bash_plugin};
use serde_json::{Value, json};

/// The client capabilities of Zed with child threads (ACP's `subagents`).
fn with_threads() -> Value {
    json!({"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": true,
           "subagents": {}, "_meta": {"terminal_output": true}})
}

fn task(description: &str, prompt: &str) -> (&'static str, Value) {
    ("task", json!({"description": description, "prompt": prompt}))
}

/// The messages of a request the provider received, as (role, content).
fn messages(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (m["role"].as_str().unwrap().to_owned(), m["content"].as_str().unwrap_or("").to_owned())
        })
        .collect()
}

fn agent_with(provider: &FakeProvider) -> Agent {
    let mut options = AgentOptions::with_provider(provider);
    options.plugins = vec![tool_bash_plugin()];
    Agent::start(options)
}

#[test]
fn a_subagent_works_on_its_own_history_and_its_answer_goes_back_to_the_parent() {
    let provider = FakeProvider::start(vec![
        Reply::calls(&[task("Count the files", "How many files are in the folder? Say N files.")]),
        Reply::text("There are 3 files."),
        Reply::text("The subagent says: 3 files."),
    ]);
    let mut agent = agent_with(&provider);
    agent.initialize_with(with_threads());
    let session = agent.new_session();
    let response = agent.prompt(&session, "parent secret: count the files for me");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    let requests = provider.received();
    assert_eq!(requests.len(), 3, "{requests:?}");
    // The parent was offered the tool.
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(offered.contains(&"task"), "{offered:?}");
    // The child's request: its own system prompt and the task, nothing of the parent's.
    let child = messages(&requests[1].body);
    assert_eq!(child.len(), 2, "{child:?}");
    assert_eq!(child[0].0, "system");
    assert!(child[0].1.contains("You are a subagent"), "{}", child[0].1);
    assert_eq!(
        child[1],
        ("user".to_owned(), "How many files are in the folder? Say N files.".to_owned())
    );
    assert!(!requests[1].body.to_string().contains("parent secret"));
    // A subagent of depth 1 cannot start its own (the default `max_depth` is 1).
    let child_tools = requests[1].body["tools"].as_array().unwrap();
    assert!(child_tools.iter().all(|t| t["function"]["name"] != "task"), "{child_tools:?}");
    // The parent's next request carries the child's answer as the tool's result.
    let parent = messages(&requests[2].body);
    let roles: Vec<&str> = parent.iter().map(|(role, _)| role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(parent[3].1, "There are 3 files.");

    // The client: a `subagent_update` before any update of the child's, the child's thread
    // under its own id, the parent's card linked to it, and the child idle at the end.
    let updates = agent.all_updates(&session);
    let announced: Vec<&Value> =
        updates.iter().filter(|u| u["sessionUpdate"] == "subagent_update").collect();
    assert_eq!(announced.len(), 2, "{announced:?}");
    let child_id = announced[0]["sessionId"].as_str().unwrap().to_owned();
    assert_ne!(child_id, session);
    assert_eq!(announced[0]["state"], json!({"state": "running"}));
    assert_eq!(announced[0]["title"], "Count the files");
    assert_eq!(announced[0]["capabilities"], json!({"cancel": {}}));
    assert_eq!(announced[1]["state"], json!({"state": "idle", "stopReason": "end_turn"}));
    let first_announce = agent
        .received
        .iter()
        .position(|m| m["params"]["update"]["sessionUpdate"] == "subagent_update")
        .unwrap();
    let first_child =
        agent.received.iter().position(|m| m["params"]["sessionId"] == child_id.as_str()).unwrap();
    assert!(first_announce < first_child, "the child showed before it was announced");
    let card = updates.iter().find(|u| u["sessionUpdate"] == "tool_call").unwrap();
    assert_eq!(card["content"][0], json!({"type": "session", "sessionId": child_id}));
    let child_thread = agent.all_updates(&child_id);
    let said: String = child_thread
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(said, "There are 3 files.");

    // Every update parses as the SDK's types (the unstable subagent ones among them).
    hotsh_tests::assert_updates_are_acp(&agent);

    // `session/list` names the child with its parent.
    let listed = agent.call("session/list", json!({}));
    let sessions = listed["result"]["sessions"].as_array().unwrap();
    let child_entry = sessions.iter().find(|s| s["sessionId"] == child_id.as_str()).unwrap();
    assert_eq!(child_entry["_meta"]["hotsh"]["parentSessionId"], session.as_str());
    assert_eq!(child_entry["title"], "Count the files");
}
