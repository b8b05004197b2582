//! Plugins other than tool-bash: generic cards, several plugins at once, default loading.

use hotsh_tests::{Agent, AgentOptions, hello_plugin, tool_bash_plugin};
use serde_json::json;

#[test]
fn example_plugin_serves_its_tool_with_a_generic_card() {
    let calls = json!({"tool_calls": [{"name": "hello", "arguments": {"name": "Ada"}}]});
    let mut options = AgentOptions::script(vec![calls, json!({"text": "greeted"})]);
    options.plugins = vec![tool_bash_plugin(), hello_plugin()];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "greet Ada");
    assert_eq!(agent.tool_results(), vec![("Hello, Ada!".to_owned(), false)]);
    let updates = agent.updates(&session);
    let call = updates.iter().find(|u| u["sessionUpdate"] == "tool_call").unwrap();
    assert_eq!(call["title"], "Greet Ada");
    // `other` is ACP's default kind, so it may be left out.
    assert!(call.get("kind").is_none_or(|k| k == "other"), "{call}");
    assert!(call["_meta"].get("terminal_info").is_none());
    let done = updates.iter().find(|u| u["status"] == "completed").unwrap();
    assert_eq!(
        done["content"],
        json!([{"type": "content", "content": {"type": "text", "text": "Hello, Ada!"}}])
    );
    assert_eq!(done["rawOutput"], json!({"greeting": "Hello, Ada!"}));
    // Both plugins' tools and prompt sections reach the model, sections in order.
    let request = &agent.model_requests()[0];
    let tools: Vec<&str> =
        request["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    // hotsh's own plan and subagent tools after the plugins'.
    assert_eq!(tools, ["hello", "bash", "bash_output", "bash_kill", "update_plan", "task"]);
    let system = request["system"].as_str().unwrap();
    let bash_at = system.find("## Running commands").unwrap();
    let hello_at = system.find("Use `hello`").unwrap();
    assert!(bash_at < hello_at, "sections must be sorted by order (105 before 200)");
}

#[test]
fn bare_hotsh_serves_acp_with_plugins_from_its_own_directory() {
    let mut agent = Agent::start(AgentOptions::bare());
    let init = agent.initialize(true);
    assert_eq!(init["result"]["agentInfo"]["name"], "hotsh");
    // No model key: the client is asked to authenticate before a session opens.
    let response = agent.call("session/new", json!({"cwd": agent.workdir, "mcpServers": []}));
    assert_eq!(response["error"]["code"], -32000, "{response}");
    let message = response["error"]["message"].as_str().unwrap();
    assert!(message.contains("hotsh login"), "{message}");
    // The default plugin directory is the executable's: tool-bash was found there.
    let stderr = agent.wait_for_stderr("serving ");
    assert!(stderr.contains("plugin loaded") && stderr.contains("tool-bash"), "{stderr}");
    let summary = stderr.lines().find(|l| l.contains("serving ")).expect("a start-up summary");
    assert!(
        summary.contains("tool-bash 0.1.0 from ")
            && summary.contains("(tools: bash, bash_output, bash_kill)"),
        "{summary}"
    );
    assert!(agent.finish().success());
}
