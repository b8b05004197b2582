//! Permission rules: "Allow for this session" and "Always allow in this project" in the
//! escalation prompt, what they cover (the next command of the same program and subcommand,
//! never a command that does more), where they are kept, and `/permissions`.

use crate::sandbox::{backends, bash_with, elsewhere, fields, options};
use hotsh_tests::{Agent, bash_call, say};
use serde_json::{Value, json};
use std::path::Path;

/// A call that asks to run `command` under danger-full-access.
fn escalated(command: &str) -> Value {
    bash_with(json!({
        "command": command,
        "sandbox_permissions": "danger-full-access",
        "justification": "The user asked for files outside the project."
    }))
}

fn choose(option: &str) -> Value {
    json!({"result": {"outcome": {"outcome": "selected", "optionId": option}}})
}

/// How many permission requests the agent has sent so far.
fn asked(agent: &Agent) -> usize {
    agent.received.iter().filter(|m| m["method"] == "session/request_permission").count()
}

/// A new session in `cwd`.
fn session_in(agent: &mut Agent, cwd: &Path) -> String {
    agent.wait_for_stderr("initial plugin scan done");
    let answer = agent.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    answer["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("{answer}")).to_owned()
}

/// Prompts `session` with `text` and returns what the agent said back (its message chunks).
fn answer_to(agent: &mut Agent, session: &str, text: &str) -> String {
    let before = agent.received.len();
    assert_eq!(agent.prompt(session, text)["result"]["stopReason"], "end_turn");
    agent.received[before..]
        .iter()
        .map(|m| &m["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

/// Agent options for `backend` (the Nth session to ask the model playing `sessions[N]`),
/// keeping sessions and project rules in `data`.
fn with_data(backend: &str, data: &Path, sessions: Vec<Vec<Value>>) -> hotsh_tests::AgentOptions {
    let mut opts = options(backend, "", Vec::new());
    opts.per_session = sessions;
    opts.env.push(("HOTSH_DATA_DIR".into(), data.display().to_string()));
    opts
}

#[test]
fn allow_for_this_session_covers_the_same_program_and_subcommand_and_not_the_next_session() {
    for backend in backends() {
        let outside = elsewhere();
        let path = |name: &str| outside.path().join(name).display().to_string();
        let exists = |name: &str| outside.path().join(name).exists();
        let (data, project) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut agent = Agent::start(with_data(
            backend,
            data.path(),
            vec![
                vec![
                    escalated(&format!("touch {}", path("a"))),
                    // Covered by the rule: runs under danger-full-access without asking.
                    bash_call(&format!("touch {}", path("b"))),
                    // Does more than the rule covers: confined, refused.
                    bash_call(&format!("touch {} && touch {}", path("c"), path("c2"))),
                    say("done"),
                ],
                // The next session has no rule.
                vec![bash_call(&format!("touch {}", path("d"))), say("done")],
            ],
        ));
        agent.initialize(true);
        let session = session_in(&mut agent, project.path());
        let request = agent.prompt_answering_permission(&session, choose("allow-session"));
        let offered = &request["params"]["options"];
        assert_eq!(
            fields(offered, "kind"),
            ["allow_once", "allow_always", "allow_always", "reject_once"],
            "{backend}"
        );
        assert_eq!(fields(offered, "name")[1], "Allow `touch …` commands for this session");
        assert_eq!(fields(offered, "name")[2], "Always allow `touch …` commands in this project");
        assert!(exists("a") && exists("b"), "{backend}");
        assert!(!exists("c"), "{backend}: a compound command was covered");
        assert_eq!(asked(&agent), 1, "{backend}");
        let results = agent.tool_results();
        assert!(results[2].0.contains("[sandbox: file access denied"), "{backend}: {results:?}");
        let raw = crate::sandbox::raw_outputs(&agent, &session);
        assert_eq!(raw[1]["sandbox"]["mode"], "danger-full-access", "{backend}");

        let next = session_in(&mut agent, project.path());
        agent.prompt(&next, "go");
        assert!(!exists("d"), "{backend}: the rule reached another session");
        assert_eq!(asked(&agent), 1, "{backend}");
        agent.finish();

        // Another hotsh loads the first session: its rule comes back from its log.
        let mut later = Agent::start(with_data(
            backend,
            data.path(),
            vec![vec![bash_call(&format!("touch {}", path("e"))), say("done")]],
        ));
        later.initialize(true);
        later.wait_for_stderr("initial plugin scan done");
        let loaded = later.call(
            "session/load",
            json!({"sessionId": session, "cwd": project.path(), "mcpServers": []}),
        );
        assert!(loaded.get("result").is_some(), "{loaded}");
        later.prompt(&session, "go");
        assert!(exists("e"), "{backend}: {:?}", later.last_tool_result());
        assert_eq!(asked(&later), 0, "{backend}");
    }
}

#[test]
fn always_allow_in_this_project_survives_a_restart_and_permissions_removes_it() {
    let backend = backends()[0];
    let outside = elsewhere();
    let path = |name: &str| outside.path().join(name).display().to_string();
    let exists = |name: &str| outside.path().join(name).exists();
    let (data, project, other) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut agent = Agent::start(with_data(
        backend,
        data.path(),
        vec![vec![escalated(&format!("touch {}", path("a"))), say("done")]],
    ));
    agent.initialize(true);
    let session = session_in(&mut agent, project.path());
    agent.prompt_answering_permission(&session, choose("allow-project"));
    assert!(exists("a"));
    agent.finish();
    // Kept in the data directory, not in the project.
    let kept: Vec<_> = std::fs::read_dir(data.path().join("permissions")).unwrap().collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(std::fs::read_dir(project.path()).unwrap().count(), 0, "the project was written");

    let mut later = Agent::start(with_data(
        backend,
        data.path(),
        vec![
            vec![bash_call(&format!("touch {}", path("b"))), say("done")],
            vec![
                bash_call(&format!("touch {}", path("c"))),
                say("done"),
                bash_call(&format!("touch {}", path("d"))),
                say("done"),
            ],
        ],
    ));
    later.initialize(true);
    // Another project has no rule.
    let elsewhere_session = session_in(&mut later, other.path());
    later.prompt(&elsewhere_session, "go");
    assert!(!exists("b"), "the rule reached another project");
    let session = session_in(&mut later, project.path());
    later.prompt(&session, "go");
    assert!(exists("c"), "{:?}", later.last_tool_result());
    assert_eq!(asked(&later), 0);

    let listed = answer_to(&mut later, &session, "/permissions");
    assert!(listed.contains("This project"), "{listed}");
    assert!(listed.contains("1. `touch …` commands run under danger-full-access"), "{listed}");
    let removed = answer_to(&mut later, &session, "/permissions remove 1");
    assert!(removed.starts_with("Removed from this project: `touch …` commands"), "{removed}");
    later.prompt(&session, "go");
    assert!(!exists("d"), "a removed rule still applied");
    let listed = answer_to(&mut later, &session, "/permissions");
    assert!(listed.starts_with("No permission rules apply here."), "{listed}");
}
