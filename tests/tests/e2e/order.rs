//! A session changes in one order: what the log says happened, happened in that order, and a
//! client sees a session's events in the order they were logged.

use hotsh_tests::{Agent, AgentOptions, bash_call, say};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};

/// The records of `session`'s log, in order.
fn log_records(agent: &Agent, session: &str) -> Vec<Value> {
    let path = agent.data_dir().join("sessions").join(format!("{session}.jsonl"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn a_cancel_is_logged_before_the_end_of_the_turn_it_cancelled_every_time() {
    const TURNS: usize = 100;
    let mut agent = Agent::start(AgentOptions::script(
        (0..TURNS).map(|_| bash_call("sleep 30.0839")).collect(),
    ));
    agent.initialize(true);
    let session = agent.new_session();
    for turn in 0..TURNS {
        let before = agent.received.len();
        let prompt = agent.start_prompt(&session, "sleep");
        // Half the cancels come while the command runs, half at once (the turn may then
        // still be asking the model).
        if turn % 2 == 0 {
            agent.wait_for_from(before, |m| m["params"]["update"]["sessionUpdate"] == "tool_call");
        }
        agent.notify("session/cancel", json!({"sessionId": session}));
        let response = agent.response(prompt);
        assert_eq!(response["result"]["stopReason"], "cancelled", "turn {turn}: {response}");
    }
    let records = log_records(&agent, &session);
    let types: Vec<&str> = records.iter().map(|r| r["type"].as_str().unwrap()).collect();
    let mut turns = 0;
    let mut cancelled_in_turn = false;
    let mut in_turn = false;
    for (index, record) in records.iter().enumerate() {
        match types[index] {
            "prompt" => {
                (in_turn, cancelled_in_turn) = (true, false);
            }
            "cancel_requested" => {
                assert!(in_turn, "record {index}: a cancel after its turn ended: {types:?}");
                cancelled_in_turn = true;
            }
            "turn_ended" => {
                assert_eq!(record["data"]["outcome"], "cancelled", "record {index}");
                assert!(cancelled_in_turn, "record {index}: the turn ended before its cancel");
                in_turn = false;
                turns += 1;
            }
            _ => {}
        }
    }
    assert_eq!(turns, TURNS, "{types:?}");
}

#[test]
fn a_session_loaded_where_it_is_open_shows_no_live_update_before_its_replay() {
    // The most background tasks a session may run at once (the default limit).
    const TASKS: usize = 16;
    const LOADS: usize = 1000;
    // Background tasks ending one after another over a few seconds, while the session is
    // loaded again and again.
    let calls: Vec<Value> = (0..TASKS)
        .map(|i| {
            json!({"name": "bash", "arguments": {
                "command": format!("sleep {:.7}", i as f64 * 0.25 + 0.004_193_3),
                "run_in_background": true,
            }})
        })
        .collect();
    let mut agent =
        Agent::start(AgentOptions::script(vec![json!({"tool_calls": calls}), say("started")]));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "start them");
    let cwd = agent.workdir.clone();
    // Where each load's replay starts: at its first message, the user's prompt (live updates
    // sent before the load was served may still arrive after it was asked for).
    let replay_starts = |agent: &mut Agent, before: usize| {
        let replay = agent.wait_for_from(before, |m| {
            m["params"]["update"]["sessionUpdate"] == "user_message_chunk"
        });
        assert!(replay >= before);
        replay
    };
    let mut streams: Vec<(usize, usize)> = Vec::new();
    for _ in 0..LOADS {
        let before = agent.received.len();
        let id = agent
            .request("session/load", json!({"sessionId": session, "cwd": cwd, "mcpServers": []}));
        let start = replay_starts(&mut agent, before);
        let answered = agent.wait_for_from(start, |m| m["id"] == id && m.get("method").is_none());
        assert!(agent.received[answered].get("result").is_some(), "{}", agent.received[answered]);
        streams.push((start, answered));
    }
    // Once every task has ended, one more load shows every card closed.
    hotsh_tests::eventually("every task to end", || {
        hotsh_tests::processes_matching("41933").is_empty()
    });
    let asked = agent.received.len();
    let id =
        agent.request("session/load", json!({"sessionId": session, "cwd": cwd, "mcpServers": []}));
    let before = replay_starts(&mut agent, asked);
    let answered = agent.wait_for_from(before, |m| m["id"] == id && m.get("method").is_none());
    // Every stream (a load's replay and the live updates up to the next load) opens each card
    // before it updates it.
    let ends: Vec<usize> =
        streams.iter().skip(1).map(|(start, _)| *start).chain([before]).collect();
    for (n, ((start, _), end)) in streams.iter().zip(ends).enumerate() {
        let mut opened = HashSet::new();
        for message in &agent.received[*start..end] {
            let update = &message["params"]["update"];
            let Some(call) = update["toolCallId"].as_str() else { continue };
            match update["sessionUpdate"].as_str() {
                Some("tool_call") => {
                    opened.insert(call.to_owned());
                }
                _ => assert!(
                    opened.contains(call),
                    "load {n}: an update of {call} before the replay drew it: {update}"
                ),
            }
        }
    }
    let mut status: HashMap<String, String> = HashMap::new();
    for message in &agent.received[before..answered] {
        let update = &message["params"]["update"];
        if let (Some(call), Some(state)) =
            (update["toolCallId"].as_str(), update["status"].as_str())
        {
            status.insert(call.to_owned(), state.to_owned());
        }
    }
    assert_eq!(status.len(), TASKS, "{status:?}");
    let open: Vec<_> = status.iter().filter(|(_, s)| *s != "completed").collect();
    assert!(open.is_empty(), "cards left open after every task ended: {open:?}");
}

#[test]
fn mode_changes_are_logged_in_the_order_they_were_applied() {
    const CHANGES: usize = 200;
    let modes = ["read-only", "workspace-write", "danger-full-access"];
    let mut agent = Agent::start(AgentOptions::script(Vec::new()));
    agent.initialize(true);
    let session = agent.new_session();
    // Sent together, answered as they are applied.
    let ids: Vec<u64> = (0..CHANGES)
        .map(|i| {
            agent.request(
                "session/set_config_option",
                json!({"sessionId": session, "configId": "sandbox_mode", "value": modes[i % 3]}),
            )
        })
        .collect();
    for id in ids {
        let response = agent.response(id);
        assert!(response.get("result").is_some(), "{response}");
    }
    // What is in force, as a client loading the session here is told it.
    let cwd = agent.workdir.clone();
    let now =
        agent.call("session/load", json!({"sessionId": session, "cwd": cwd, "mcpServers": []}));
    let options = now["result"]["configOptions"].as_array().unwrap();
    let live = options.iter().find(|o| o["id"] == "sandbox_mode").unwrap()["currentValue"].clone();
    let records = log_records(&agent, &session);
    let logged: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "sandbox_mode")
        .map(|r| &r["data"]["mode"])
        .collect();
    assert_eq!(logged.len(), CHANGES);
    assert_eq!(*logged.last().unwrap(), &live, "the log's last mode is not the one in force");
}
