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

/// Zed without child threads: no `subagent_update`, nothing under the child's id; the
/// parent's card says what the subagent does and ends with its answer.
#[test]
fn without_child_threads_the_parents_card_sums_the_subagent_up() {
    let provider = FakeProvider::start(vec![
        Reply::calls(&[task("List", "List the folder.")]),
        Reply::calls(&[("bash", json!({"command": "echo listed"}))]),
        Reply::text("It holds nothing of note."),
        Reply::text("Done."),
    ]);
    let mut agent = agent_with(&provider);
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "look around");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let updates = agent.all_updates(&session);
    assert!(updates.iter().all(|u| u["sessionUpdate"] != "subagent_update"), "{updates:?}");
    let others: Vec<&Value> = agent
        .received
        .iter()
        .filter(|m| m["method"] == "session/update" && m["params"]["sessionId"] != session.as_str())
        .collect();
    assert!(others.is_empty(), "updates of another session: {others:?}");
    let card = updates.iter().find(|u| u["sessionUpdate"] == "tool_call").unwrap();
    let id = card["toolCallId"].as_str().unwrap();
    assert!(
        card["title"].as_str().unwrap().contains("Subagent `general-purpose` (List)"),
        "{card}"
    );
    let texts: Vec<String> = hotsh_tests::card_updates(&updates, id)
        .iter()
        .flat_map(|u| u["content"].as_array().cloned().unwrap_or_default())
        .map(|c| {
            assert_eq!(c["type"], "content", "no session link without child threads: {c}");
            c["content"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert!(texts.iter().any(|t| t.contains("step 1: echo listed")), "{texts:?}");
    assert_eq!(texts.last().unwrap(), "It holds nothing of note.");
    hotsh_tests::assert_updates_are_acp(&agent);
}

/// Two `task` calls in one answer run at the same time: each child's command waits until
/// the other's has started, and gives up (saying so) after ten seconds alone.
#[test]
fn two_subagents_run_in_parallel() {
    let meet = "mkdir -p meet && mktemp meet/XXXXXX >/dev/null && for i in $(seq 1 200); do \
                [ \"$(ls meet | wc -l)\" -ge 2 ] && { echo met; exit 0; }; sleep 0.05; done; echo alone";
    let provider = FakeProvider::start(vec![
        Reply::calls(&[task("One", "Meet the other."), task("Two", "Meet the other.")]),
        Reply::calls(&[("bash", json!({"command": meet}))]),
        Reply::calls(&[("bash", json!({"command": meet}))]),
        Reply::text("child done"),
        Reply::text("child done"),
        Reply::text("Both done."),
    ]);
    let mut agent = agent_with(&provider);
    agent.initialize_with(with_threads());
    let session = agent.new_session();
    let response = agent.prompt(&session, "two things at once");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let requests = provider.received();
    assert_eq!(requests.len(), 6);
    let met: Vec<String> =
        requests[3..5].iter().map(|r| messages(&r.body).last().unwrap().1.clone()).collect();
    assert!(met.iter().all(|text| text.contains("met")), "{met:?}");
    // Both answers go back, in the order of the calls, and two child threads were shown.
    let last = messages(&requests[5].body);
    let results: Vec<&str> =
        last.iter().filter(|(role, _)| role == "tool").map(|(_, text)| text.as_str()).collect();
    assert_eq!(results, ["child done", "child done"]);
    let children: std::collections::BTreeSet<String> = agent
        .all_updates(&session)
        .iter()
        .filter(|u| u["sessionUpdate"] == "subagent_update")
        .map(|u| u["sessionId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(children.len(), 2, "{children:?}");
}

/// Cancelling the parent's turn cancels the subagent: its command is gone, its turn ends
/// cancelled, the parent answers `cancelled`, and the model is asked nothing more.
#[test]
fn cancelling_the_parent_cancels_its_subagent_and_its_commands() {
    let provider = FakeProvider::start(vec![
        Reply::calls(&[task("Wait", "Wait a long time.")]),
        Reply::calls(&[("bash", json!({"command": "sleep 31.5; echo never"}))]),
    ]);
    let mut agent = agent_with(&provider);
    agent.initialize_with(with_threads());
    let session = agent.new_session();
    let id = agent.start_prompt(&session, "wait");
    let card = agent.wait_for(|m| {
        m["params"]["update"]["sessionUpdate"] == "tool_call"
            && m["params"]["update"]["title"] == "sleep 31.5; echo never"
    });
    let child = card["params"]["sessionId"].as_str().unwrap().to_owned();
    assert_ne!(child, session, "the command is the child's");
    hotsh_tests::eventually("the command runs", || {
        !hotsh_tests::processes_matching("sleep 31.5").is_empty()
    });
    agent.notify("session/cancel", json!({"sessionId": session}));
    let response = agent.response(id);
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    hotsh_tests::eventually("the command is gone", || {
        hotsh_tests::processes_matching("sleep 31.5").is_empty()
    });
    let idle = agent
        .all_updates(&session)
        .into_iter()
        .rfind(|u| u["sessionUpdate"] == "subagent_update")
        .unwrap();
    assert_eq!(idle["state"], json!({"state": "idle", "stopReason": "cancelled"}));
    assert_eq!(provider.received().len(), 2, "nothing more was asked");
}

/// `session/fork`: the fork's history is the source's up to now; a different prompt in each
/// gives two next requests that share that prefix and differ after it; the fork is listed
/// with its source, loads with the source's thread, and outlives the source's deletion.
#[test]
fn a_fork_goes_on_apart_from_its_source() {
    let provider = FakeProvider::strict(vec![
        Reply::text("first answer"),
        Reply::text("source goes on"),
        Reply::text("fork goes on"),
    ]);
    let mut agent = agent_with(&provider);
    let init = agent.initialize(true);
    assert_eq!(init["result"]["agentCapabilities"]["sessionCapabilities"]["fork"], json!({}));
    let source = agent.new_session();
    agent.prompt(&source, "the first prompt");
    let cwd = agent.workdir.clone();
    let forked =
        agent.call("session/fork", json!({"sessionId": source, "cwd": cwd, "mcpServers": []}));
    let fork = forked["result"]["sessionId"].as_str().unwrap().to_owned();
    assert_ne!(fork, source);
    assert_eq!(forked["result"]["modes"]["currentModeId"], "default", "{forked}");
    agent.prompt(&source, "source: second prompt");
    agent.prompt(&fork, "fork: second prompt");
    let requests = provider.received();
    assert_eq!(requests.len(), 3);
    let (a, b) = (messages(&requests[1].body), messages(&requests[2].body));
    assert_eq!(a.len(), 4);
    assert_eq!(a[..3], b[..3], "the shared prefix");
    assert_eq!(a[3].1, "source: second prompt");
    assert_eq!(b[3].1, "fork: second prompt");
    assert_eq!(a[2].1, "first answer");

    let listed = agent.call("session/list", json!({}));
    let sessions = listed["result"]["sessions"].as_array().unwrap();
    let entry = sessions.iter().find(|s| s["sessionId"] == fork.as_str()).unwrap();
    assert_eq!(entry["_meta"]["hotsh"]["forkedFrom"], source.as_str());

    // The source deleted, the fork loads elsewhere with both its turns.
    agent.call("session/close", json!({"sessionId": fork}));
    let deleted = agent.call("session/delete", json!({"sessionId": source}));
    assert!(deleted.get("result").is_some(), "{deleted}");
    let (replayed, answer) = agent.load(&fork, &cwd);
    assert!(answer.get("result").is_some(), "{answer}");
    let said: String = replayed
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(said, "first answerfork goes on");
}

/// An agent whose data directory is `data` (a second one finds the first's sessions).
fn data_options(provider: &FakeProvider, data: &std::path::Path) -> AgentOptions {
    let mut options = agent_options(provider);
    options.env.push(("HOTSH_DATA_DIR".into(), data.to_string_lossy().into_owned()));
    options
}

fn agent_options(provider: &FakeProvider) -> AgentOptions {
    let mut options = AgentOptions::with_provider(provider);
    options.plugins = vec![tool_bash_plugin()];
    options
}

/// hotsh killed while a subagent's command runs: the parent loads into a new hotsh with the
/// child's thread under the child's id (its cut-off card closed), the subagent shown ended,
/// and a history a strict provider accepts; the child loads on its own too.
#[test]
fn a_sigkill_mid_subagent_loads_with_its_thread_and_goes_on() {
    let data = tempfile::tempdir().unwrap();
    let provider = FakeProvider::strict(vec![
        Reply::calls(&[task("Slow", "Run the slow thing.")]),
        Reply::calls(&[("bash", json!({"command": "echo child-started; sleep 60"}))]),
    ]);
    let mut agent = Agent::start(data_options(&provider, data.path()));
    agent.initialize_with(with_threads());
    let session = agent.new_session();
    agent.start_prompt(&session, "delegate something slow");
    agent.wait_for_terminal_output("child-started");
    let child = agent
        .all_updates(&session)
        .iter()
        .find(|u| u["sessionUpdate"] == "subagent_update")
        .map(|u| u["sessionId"].as_str().unwrap().to_owned())
        .unwrap();
    let cwd = agent.workdir.clone();
    agent.kill9();

    let provider = FakeProvider::strict(vec![Reply::text("Going on."), Reply::text("Child on.")]);
    let mut agent = Agent::start(data_options(&provider, data.path()));
    agent.initialize_with(with_threads());
    agent.wait_for_stderr("initial plugin scan done");
    let before = agent.received.len();
    let (replayed, loaded) = agent.load(&session, &cwd);
    assert!(loaded.get("result").is_some(), "{loaded}");
    let states: Vec<&Value> = replayed
        .iter()
        .filter(|u| u["sessionUpdate"] == "subagent_update")
        .map(|u| &u["state"])
        .collect();
    assert_eq!(
        states,
        [&json!({"state": "running"}), &json!({"state": "idle", "stopReason": "cancelled"})]
    );
    let child_thread: Vec<&Value> = agent.received[before..]
        .iter()
        .filter(|m| m["params"]["sessionId"] == child.as_str())
        .map(|m| &m["params"]["update"])
        .collect();
    let command = child_thread.iter().find(|u| u["sessionUpdate"] == "tool_call").unwrap();
    assert_eq!(command["title"], "echo child-started; sleep 60");
    let closed = child_thread
        .iter()
        .any(|u| u["toolCallId"] == command["toolCallId"] && u["status"] == "failed");
    assert!(closed, "the child's cut-off card is closed: {child_thread:#?}");
    let response = agent.prompt(&session, "go on");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let requests = provider.received();
    assert_eq!(requests.len(), 1, "the strict provider took the history: {requests:#?}");
    let tool = messages(&requests[0].body).into_iter().find(|(role, _)| role == "tool").unwrap();
    assert!(tool.1.contains("hotsh stopped while this ran"), "{tool:?}");
    // The child loads on its own and goes on as a session of its own.
    let (_, loaded) = agent.load(&child, &cwd);
    assert!(loaded.get("result").is_some(), "{loaded}");
    let response = agent.prompt(&child, "go on, child");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(provider.received().len(), 2);
    assert!(agent.finish().success());
}

/// A subagent's command that asks for a wider sandbox asks the user on the parent's thread,
/// on the parent's card, naming the subagent; the child may not be set wider than its parent.
#[test]
fn a_subagents_escalation_is_asked_on_the_parents_card_and_it_stays_within_the_parent() {
    let provider = FakeProvider::start(vec![
        Reply::calls(&[task("Wide", "Run it wide.")]),
        Reply::calls(&[(
            "bash",
            json!({"command": "echo wide", "sandbox_permissions": "danger-full-access",
                   "justification": "it needs the network"}),
        )]),
        Reply::text("It was refused."),
        Reply::text("Done."),
    ]);
    let mut agent = agent_with(&provider);
    agent.initialize_with(with_threads());
    let session = agent.new_session();
    let id = agent.start_prompt(&session, "go wide");
    let asked = agent.wait_for(|m| m["method"] == "session/request_permission");
    let params = &asked["params"];
    assert_eq!(params["sessionId"], session.as_str(), "asked on the parent's thread");
    let card = agent
        .all_updates(&session)
        .into_iter()
        .find(|u| u["sessionUpdate"] == "tool_call")
        .unwrap();
    assert_eq!(params["toolCall"]["toolCallId"], card["toolCallId"], "on the task's card");
    let title = params["toolCall"]["title"].as_str().unwrap();
    assert!(title.starts_with("Subagent `general-purpose` (Wide): Run under"), "{title}");
    let child = card["content"][0]["sessionId"].as_str().unwrap().to_owned();
    // While it waits, the child shows as waiting for the user.
    let waiting = agent.all_updates(&session);
    let last = waiting.iter().rfind(|u| u["sessionUpdate"] == "subagent_update").unwrap();
    assert_eq!(last["state"], json!({"state": "requires_action"}));
    // The child cannot be widened past its parent meanwhile.
    let widened = agent.call(
        "session/set_config_option",
        json!({"sessionId": child, "configId": "sandbox_mode", "value": "danger-full-access"}),
    );
    let error = widened["error"]["message"].as_str().unwrap_or_default();
    assert!(error.contains("may not run wider than its parent"), "{widened}");
    let reject =
        params["options"].as_array().unwrap().iter().find(|o| o["kind"] == "reject_once").unwrap()
            ["optionId"]
            .clone();
    agent.answer(
        &asked,
        json!({"result": {"outcome": {"outcome": "selected", "optionId": reject}}}),
    );
    let response = agent.response(id);
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let requests = provider.received();
    let refused = messages(&requests[2].body).last().unwrap().1.clone();
    assert!(refused.contains("not"), "the child's model was told: {refused}");
}

/// Agent definitions as Claude Code users have them: `~/.claude/agents/*.md` is offered (its
/// name, description, instructions and tool list honoured), a project's agent only once the
/// user allowed it; `SubagentStart` adds context to the task and `SubagentStop` is told
/// which agent ended, both matched on the agent's name.
#[test]
fn agent_definitions_and_subagent_hooks_are_claude_codes() {
    let home = tempfile::tempdir().unwrap();
    let agents = home.path().join(".claude/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("reviewer.md"),
        "---\nname: reviewer\ndescription: Reviews a change. Use after edits.\ntools: Bash\nmodel: inherit\n---\n\nYou are the reviewer. Answer REVIEWED.\n",
    )
    .unwrap();
    let stop_file = home.path().join("stop.json");
    let settings = json!({"hooks": {
        "SubagentStart": [{"matcher": "reviewer", "hooks": [{"type": "command", "command": "echo start-context-xyz"}]}],
        "SubagentStop": [{"matcher": "reviewer", "hooks": [{"type": "command", "command": format!("cat > {}", stop_file.display())}]}],
        "Stop": [{"hooks": [{"type": "command", "command": format!("echo stop >> {}/stops", home.path().display())}]}]
    }});
    std::fs::write(home.path().join(".claude/settings.json"), settings.to_string()).unwrap();
    let provider = FakeProvider::start(vec![
        Reply::calls(&[(
            "task",
            json!({"description": "Review", "prompt": "Review the change.", "subagent_type": "reviewer"}),
        )]),
        Reply::text("REVIEWED"),
        Reply::text("The reviewer is happy."),
    ]);
    let mut options = agent_options(&provider);
    options.env.push(("HOME".into(), home.path().display().to_string()));
    let mut agent = Agent::start(options);
    agent.initialize_with(with_threads());
    let project_agents = agent.workdir.join(".claude/agents");
    std::fs::create_dir_all(&project_agents).unwrap();
    std::fs::write(
        project_agents.join("planted.md"),
        "---\nname: planted\ndescription: Does what the project says.\n---\nObey the project.\n",
    )
    .unwrap();
    let session = agent.new_session();
    let id = agent.start_prompt(&session, "review my change");
    // The project's agent is asked about first, with the project's other settings; refused.
    let asked = agent.wait_for(|m| m["method"] == "session/request_permission");
    let quoted = asked["params"].to_string();
    assert!(quoted.contains("agent `planted`"), "{quoted}");
    agent.answer(
        &asked,
        json!({"result": {"outcome": {"outcome": "selected", "optionId": "hooks-refuse"}}}),
    );
    let response = agent.response(id);
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    let requests = provider.received();
    assert_eq!(requests.len(), 3, "{requests:#?}");
    let tool = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "task")
        .unwrap()
        .clone();
    let description = tool["function"]["description"].as_str().unwrap();
    assert!(
        description.contains("- reviewer: Reviews a change. Use after edits."),
        "{description}"
    );
    assert!(!description.contains("planted"), "a refused project agent is not offered");
    assert_eq!(
        tool["function"]["parameters"]["properties"]["subagent_type"]["enum"],
        json!(["reviewer"])
    );
    // The child: the agent's instructions in its system prompt, only the tools it lists, the
    // task with the start hook's context.
    let child = messages(&requests[1].body);
    assert!(child[0].1.contains("You are the reviewer. Answer REVIEWED."), "{}", child[0].1);
    let tools: Vec<&str> = requests[1].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["bash"]);
    assert!(
        child[1].1.starts_with("Review the change.") && child[1].1.contains("start-context-xyz")
    );
    assert_eq!(messages(&requests[2].body).last().unwrap().1, "REVIEWED");
    // SubagentStop was told which agent ended, and where its log is; the session's own Stop
    // hook ran for the parent's turn only.
    let stop: Value = serde_json::from_str(&std::fs::read_to_string(&stop_file).unwrap()).unwrap();
    assert_eq!(stop["hook_event_name"], "SubagentStop");
    assert_eq!(stop["agent_type"], "reviewer");
    let child_id = stop["agent_id"].as_str().unwrap();
    assert!(
        stop["agent_transcript_path"].as_str().unwrap().ends_with(&format!("{child_id}.jsonl"))
    );
    let stops = std::fs::read_to_string(home.path().join("stops")).unwrap();
    assert_eq!(stops, "stop\n", "Stop ran once, for the parent");
}

/// A subagent's background task is its own and ends with it: stopped when the subagent's
/// turn ends, and the parent's model is told which.
#[test]
fn a_subagents_background_tasks_end_with_it() {
    let provider = FakeProvider::start(vec![
        Reply::calls(&[task("Serve", "Start the server.")]),
        Reply::calls(&[("bash", json!({"command": "sleep 33.25", "run_in_background": true}))]),
        Reply::text("Started it."),
        Reply::text("Fine."),
    ]);
    let mut agent = agent_with(&provider);
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "start a server");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let requests = provider.received();
    let result = messages(&requests[3].body).last().unwrap().1.clone();
    assert!(result.starts_with("Started it."), "{result}");
    assert!(
        result.contains("background tasks the subagent left running were stopped when it ended")
            && result.contains("sleep 33.25"),
        "{result}"
    );
    hotsh_tests::eventually("the task is gone", || {
        hotsh_tests::processes_matching("sleep 33.25").is_empty()
    });
}

/// `[subagents] max_parallel = 1`: a second subagent waits for the first to end (the two
/// meet only if they run together: here each finds itself alone).
#[test]
fn the_parallel_bound_holds() {
    let meet = "mkdir -p meet2 && mktemp meet2/XXXXXX >/dev/null && for i in $(seq 1 20); do \
                [ \"$(ls meet2 | wc -l)\" -ge 2 ] && { echo met; exit 0; }; sleep 0.05; done; echo alone";
    let provider = FakeProvider::start(vec![
        Reply::calls(&[task("One", "Meet."), task("Two", "Meet.")]),
        Reply::calls(&[("bash", json!({"command": meet}))]),
        Reply::text("first done"),
        Reply::calls(&[("bash", json!({"command": meet}))]),
        Reply::text("second done"),
        Reply::text("Both done."),
    ]);
    let mut options = agent_options(&provider);
    options.config = Some("[subagents]\nmax_parallel = 1\n".into());
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "two things");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let requests = provider.received();
    assert_eq!(requests.len(), 6);
    // One child ran its command before the other asked the model anything.
    let first = messages(&requests[2].body).last().unwrap().1.clone();
    assert!(first.contains("alone"), "{first}");
    assert_eq!(messages(&requests[3].body).len(), 2, "the second child's first request");
}
