//! `session/cancel` stops the running command's whole process group and ends the turn.

use hotsh_tests::{Agent, AgentOptions, bash_call, card_updates, eventually, processes_matching};
use serde_json::json;
use std::time::{Duration, Instant};

#[test]
fn cancel_kills_the_command_and_answers_cancelled() {
    // A distinctive duration makes the sleep findable in the process table.
    let marker = "sleep 30.0417";
    let mut agent = Agent::start(AgentOptions::script(vec![
        bash_call(&format!("{marker}; echo never")),
        json!({"text": "unused"}),
    ]));
    agent.initialize(true);
    let session = agent.new_session();
    let prompt = agent.start_prompt(&session, "sleep");
    agent.wait_for(|m| m["params"]["update"]["sessionUpdate"] == "tool_call");
    eventually("the sleep to start", || !processes_matching(marker).is_empty());

    let cancelled_at = Instant::now();
    agent.notify("session/cancel", json!({"sessionId": session}));
    let response = agent.response(prompt);
    let latency = cancelled_at.elapsed();
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    // Far below the sleep's 30 s: the command was stopped, not waited for. (The latency
    // itself is measured by the benchmark, not asserted here.)
    assert!(latency < Duration::from_secs(10), "cancel took {latency:?}");
    eventually("the sleep to be gone", || processes_matching(marker).is_empty());

    let updates = agent.updates(&session);
    let id = updates.iter().find(|u| u["sessionUpdate"] == "tool_call").unwrap()["toolCallId"]
        .as_str()
        .unwrap()
        .to_owned();
    let card = card_updates(&updates, &id);
    let last = card.last().unwrap();
    assert_eq!(last["status"], "failed");
    assert_eq!(last["_meta"]["terminal_exit"]["signal"], "SIGTERM");
    assert_eq!(last["rawOutput"]["aborted"], true);

    // The agent keeps serving: the session takes a new prompt.
    let next = agent.prompt(&session, "again");
    assert_eq!(next["result"]["stopReason"], "end_turn", "{next}");
}

#[test]
fn cancel_stops_the_commands_children_even_those_that_left_its_group() {
    let marker = "sleep 30.0419";
    let command = format!("{marker} & setsid {marker} & {marker} & wait");
    let mut agent = Agent::start(AgentOptions::script(vec![bash_call(&command)]));
    agent.initialize(true);
    let session = agent.new_session();
    let prompt = agent.start_prompt(&session, "sleep twice");
    eventually("both sleeps to start", || processes_matching(marker).len() >= 2);
    agent.notify("session/cancel", json!({"sessionId": session}));
    assert_eq!(agent.response(prompt)["result"]["stopReason"], "cancelled");
    eventually("every sleep to be gone", || processes_matching(marker).is_empty());
}

#[test]
fn what_the_model_said_before_a_cancel_stays_in_its_history_marked_as_cut_off() {
    let mut agent = Agent::start(AgentOptions::script(vec![
        json!({"text": ["I will start ", "with the tests"], "cancelled": true}),
        json!({"text": "going on"}),
    ]));
    agent.initialize(true);
    let session = agent.new_session();
    let prompt = agent.start_prompt(&session, "fix it");
    agent.wait_for(|m| m["params"]["update"]["content"]["text"] == "with the tests");
    agent.notify("session/cancel", json!({"sessionId": session}));
    assert_eq!(agent.response(prompt)["result"]["stopReason"], "cancelled");
    agent.prompt(&session, "go on");
    let request = agent.model_requests().pop().unwrap();
    let messages = request["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "notice", "user"], "{messages:?}");
    assert_eq!(messages[1]["text"], "I will start with the tests");
    assert!(messages[2]["text"].as_str().unwrap().contains("cut off"), "{}", messages[2]);
    assert_eq!(messages[3]["text"], "go on");
}

#[test]
fn a_cancel_request_for_a_running_prompt_cancels_its_turn() {
    let marker = "sleep 30.0733";
    let mut agent =
        Agent::start(AgentOptions::script(vec![bash_call(marker), json!({"text": "next"})]));
    agent.initialize(true);
    let session = agent.new_session();
    let prompt = agent.start_prompt(&session, "sleep");
    agent.wait_for(|m| m["params"]["update"]["sessionUpdate"] == "tool_call");
    eventually("the sleep to start", || !processes_matching(marker).is_empty());
    agent.notify("$/cancel_request", json!({"requestId": prompt}));
    let response = agent.response(prompt);
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    eventually("the sleep to be gone", || processes_matching(marker).is_empty());
    // Answered once, and the session goes on.
    let answers =
        agent.received.iter().filter(|m| m["id"] == prompt && m.get("method").is_none()).count();
    assert_eq!(answers, 1);
    assert_eq!(agent.prompt(&session, "again")["result"]["stopReason"], "end_turn");
    let log =
        std::fs::read_to_string(agent.data_dir().join("sessions").join(format!("{session}.jsonl")))
            .unwrap();
    assert!(log.contains("\"type\":\"cancel_requested\""), "the cancel is logged");
}
