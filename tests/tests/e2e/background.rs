//! Background tasks: start, incremental reads, completion notices, kill, ownership.

use hotsh_tests::{
    Agent, AgentOptions, card_updates, eventually, processes_matching, say,
    wait_for_file_containing,
};
use serde_json::{Value, json};

fn call(name: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": arguments}]})
}

fn background(command: &str) -> Value {
    call("bash", json!({"command": command, "run_in_background": true}))
}

fn task_call(name: &str, task_id: &str) -> Value {
    call(name, json!({"task_id": task_id}))
}

/// The output file named in a start result ("… Full output: PATH").
fn output_path(started: &str) -> std::path::PathBuf {
    started.rsplit("Full output: ").next().unwrap().trim().into()
}

#[test]
fn start_read_only_new_output_notice_and_card() {
    let command = "echo first; while [ ! -e go ]; do sleep 0.01; done; echo second; \
                   while [ ! -e go2 ]; do sleep 0.01; done; echo third";
    let responses = vec![
        background(command),
        say("started"),
        task_call("bash_output", "bash-1"),
        say("read one"),
        task_call("bash_output", "bash-1"),
        say("read two"),
        task_call("bash_output", "bash-1"),
        say("read three"),
    ];
    let mut agent = Agent::start(AgentOptions::script(responses));
    agent.initialize(true);
    let session = agent.new_session();

    // Turn 1: the call returns at once with the task id; the card stays open.
    assert_eq!(agent.prompt(&session, "start it")["result"]["stopReason"], "end_turn");
    let (started, is_error) = agent.last_tool_result();
    assert!(!is_error && started.starts_with("Started background task bash-1."), "{started}");
    let updates = agent.updates(&session);
    let start_card = updates.iter().find(|u| u["sessionUpdate"] == "tool_call").unwrap();
    let card_id = start_card["toolCallId"].as_str().unwrap().to_owned();
    assert_eq!(start_card["title"], format!("Start in the background: {command}"));
    let drawn = card_updates(&updates, &card_id).pop().unwrap().clone();
    assert_eq!(drawn["status"], "in_progress");
    assert_eq!(drawn["title"], format!("Background task bash-1: {command}"));

    // Turn 2: only what was printed so far.
    let path = output_path(&started);
    wait_for_file_containing(&path, "first");
    agent.prompt(&session, "read");
    assert_eq!(agent.last_tool_result(), ("first\n[status: running]".to_owned(), false));

    // Turn 3: only the new bytes, never "first" again.
    std::fs::write(agent.workdir.join("go"), "").unwrap();
    wait_for_file_containing(&path, "second");
    agent.prompt(&session, "read again");
    assert_eq!(agent.last_tool_result(), ("second\n[status: running]".to_owned(), false));

    // The task ends: its card is closed with the outcome...
    std::fs::write(agent.workdir.join("go2"), "").unwrap();
    let closed = agent.wait_for(|m| {
        let u = &m["params"]["update"];
        u["toolCallId"] == card_id.as_str() && u["status"] == "completed"
    });
    let content = closed["params"]["update"]["content"][0]["content"]["text"].as_str().unwrap();
    assert!(content.starts_with("bash-1 exited with code 0; full output: "), "{content}");
    assert_eq!(closed["params"]["update"]["rawOutput"]["exit_code"], 0);

    // ...and the model hears of it, once, with its next request.
    agent.prompt(&session, "anything new?");
    let requests = agent.model_requests();
    let last = requests.last().unwrap()["messages"].as_array().unwrap().clone();
    let notices: Vec<&Value> = last.iter().filter(|m| m["role"] == "notice").collect();
    assert_eq!(notices.len(), 1, "{last:#?}");
    let notice = notices[0]["text"].as_str().unwrap();
    assert!(notice.starts_with("[background task bash-1 `echo first;"), "{notice}");
    assert!(notice.contains("exited with code 0"), "{notice}");
    // The notice comes before the prompt that followed it.
    let notice_at = last.iter().position(|m| m["role"] == "notice").unwrap();
    let prompt_at = last.iter().position(|m| m["text"] == "anything new?").unwrap();
    assert!(notice_at < prompt_at);
    // The rest of the output is still there, with the final status.
    assert_eq!(
        agent.last_tool_result(),
        ("third\n[status: completed, exit code: 0]".to_owned(), false)
    );
}

#[test]
fn kill_running_kill_finished_unknown_and_malformed_ids() {
    let marker = "sleep 30.0501";
    let responses = vec![
        json!({"tool_calls": [
            {"name": "bash", "arguments": {"command": marker, "run_in_background": true}},
            {"name": "bash_kill", "arguments": {"task_id": "bash-1"}},
            {"name": "bash_kill", "arguments": {"task_id": "bash-1"}},
            {"name": "bash_output", "arguments": {"task_id": "bash-1"}},
            {"name": "bash_output", "arguments": {"task_id": "bash-99"}},
            {"name": "bash_kill", "arguments": {"task_id": "nonsense"}},
            {"name": "bash_output", "arguments": {"task": "bash-1"}}
        ]}),
        say("done"),
        say("nothing new"),
    ];
    let mut agent = Agent::start(AgentOptions::script(responses));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    let results = agent.tool_results();
    assert!(results[0].0.starts_with("Started background task bash-1."));
    assert_eq!(
        results[1],
        (
            "Killed background task bash-1 and everything it started.\n[status: killed]".to_owned(),
            false
        )
    );
    assert_eq!(
        results[2],
        (
            "Background task bash-1 had already ended; nothing was killed.\n[status: killed]"
                .to_owned(),
            false
        )
    );
    assert_eq!(results[3], ("(no new output)\n[status: killed]".to_owned(), false));
    assert_eq!(results[4], ("unknown task id bash-99".to_owned(), true));
    assert_eq!(
        results[5],
        ("malformed task id `nonsense`; task ids look like bash-3".to_owned(), true)
    );
    assert!(results[6].1 && results[6].0.contains("unknown field `task`"), "{:?}", results[6]);
    assert!(processes_matching(marker).is_empty(), "the killed task's sleep is still running");
    // The task's card was closed as killed.
    let closed = agent.wait_for(|m| {
        let u = &m["params"]["update"];
        m["params"]["sessionId"] == session.as_str()
            && u["rawOutput"]["state"] == "killed"
            && u["title"].as_str().is_some_and(|t| t.starts_with("Background task bash-1"))
    });
    assert_eq!(closed["params"]["update"]["status"], "failed");
    assert_eq!(closed["params"]["update"]["rawOutput"]["signal"], "SIGTERM");
    // The model killed it and was told so: no notice repeats it, in this turn or the next.
    agent.prompt(&session, "anything new?");
    let requests = agent.model_requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        let messages = request["messages"].as_array().unwrap();
        assert!(messages.iter().all(|m| m["role"] != "notice"), "{messages:#?}");
    }
}

#[test]
fn another_session_can_neither_read_nor_kill_a_task() {
    let marker = "sleep 30.0503";
    let session_a = vec![
        background(marker),
        say("A started it"),
        task_call("bash_kill", "bash-1"),
        say("A killed it"),
    ];
    let session_b = vec![
        json!({"tool_calls": [
            {"name": "bash_output", "arguments": {"task_id": "bash-1"}},
            {"name": "bash_kill", "arguments": {"task_id": "bash-1"}}
        ]}),
        say("B tried"),
    ];
    let mut options = AgentOptions::script(Vec::new());
    options.per_session = vec![session_a, session_b];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let a = agent.new_session();
    let b = agent.new_session();
    agent.prompt(&a, "start");
    eventually("the task to run", || !processes_matching(marker).is_empty());
    agent.prompt(&b, "meddle");
    let refused = "task bash-1 belongs to another session".to_owned();
    assert_eq!(agent.tool_results(), vec![(refused.clone(), true), (refused, true)]);
    assert!(!processes_matching(marker).is_empty(), "B's kill must not have touched the task");
    agent.prompt(&a, "stop it");
    assert_eq!(
        agent.last_tool_result().0,
        "Killed background task bash-1 and everything it started.\n[status: killed]"
    );
    assert!(processes_matching(marker).is_empty());
}

#[test]
fn task_limit_per_session_is_a_clear_error() {
    let responses = vec![
        json!({"tool_calls": [
            {"name": "bash", "arguments": {"command": "sleep 30.0505", "run_in_background": true}},
            {"name": "bash", "arguments": {"command": "sleep 30.0505", "run_in_background": true}},
            {"name": "bash_kill", "arguments": {"task_id": "bash-1"}},
            {"name": "bash", "arguments": {"command": "true", "run_in_background": true}}
        ]}),
        say("ok"),
    ];
    let mut options = AgentOptions::script(responses);
    options.config = Some("[executor]\nmax_background_tasks = 1\n".to_owned());
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    let results = agent.tool_results();
    assert!(results[0].0.starts_with("Started background task bash-1."));
    assert_eq!(
        results[1],
        (
            "bash could not start the task: too many background tasks (1 running; the limit is 1); \
             stop one or wait for one to finish"
                .to_owned(),
            true
        )
    );
    // Once one is gone, there is room again.
    assert!(results[3].0.starts_with("Started background task bash-2."), "{:?}", results[3]);
}

#[test]
fn ended_tasks_leave_no_descriptor_behind() {
    const TASKS: usize = 300;
    // Tasks that end at once, started one call after another (the per-session limit counts
    // running tasks only).
    let mut responses = vec![background("true"), say("warm")];
    responses.extend((0..TASKS).map(|_| background("true")));
    responses.push(say("done"));
    let mut agent = Agent::start(AgentOptions::script(responses));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "one first");
    let descriptors = |agent: &Agent| {
        std::fs::read_dir(format!("/proc/{}/fd", agent.pid())).expect("the agent's fds").count()
    };
    let before = descriptors(&agent);
    agent.prompt(&session, "many");
    // Once they have all ended, the agent holds what it held before (give or take a few:
    // a spare shim's socket, a session's files).
    eventually("the tasks' descriptors to be closed", || descriptors(&agent) <= before + 10);
}
