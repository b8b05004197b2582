//! A client that stops reading: the agent's memory stays bounded, the command runs on, and
//! the client gets every update in order once it reads again.

use hotsh_tests::{
    Agent, AgentOptions, bash_call, card_updates, eventually, processes_matching, say,
};

#[test]
fn a_client_that_stops_reading_costs_bounded_memory_and_loses_no_update() {
    // About 12 s of output as fast as the machine makes it, while the client reads nothing.
    let marker = "slow-client-41977";
    let command = format!(
        "end=$((SECONDS+12)); while [ $SECONDS -lt $end ]; do yes {marker} | head -c 4M; done; echo end-of-{marker}"
    );
    let mut agent = Agent::start(AgentOptions::script(vec![bash_call(&command), say("printed")]));
    agent.initialize(true);
    let session = agent.new_session();
    let before = agent.rss_kib();
    agent.stop_reading();
    let prompt = agent.start_prompt(&session, "print a lot");
    eventually("the command to start", || {
        !processes_matching(&format!("end-of-{marker}")).is_empty()
    });
    // The command is not held back by the client: it ends while nothing is read.
    let started = std::time::Instant::now();
    while !processes_matching(&format!("end-of-{marker}")).is_empty() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "the command was held back"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let peak_blocked = agent.peak_rss_kib();
    eprintln!("command ended after {:?} unread", started.elapsed());
    agent.resume_reading();
    let response = agent.response(prompt);
    eprintln!("answered {:?} after it started", started.elapsed());
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    // What the unread client cost is the growth over the agent's own size (its code, the
    // plugins, the session), which moves with the build: at most 32 updates in flight of at
    // most 256 KiB of live output each, a few copies of each on the way out (about 26 MiB
    // measured); unbounded buffering cost over 100 MiB.
    let peak = agent.peak_rss_kib();
    let grown = peak.saturating_sub(before);
    eprintln!("RSS {before} KiB before; peak {peak} KiB ({peak_blocked} KiB while unread)");
    assert!(
        grown < 40 << 10,
        "RSS grew by {grown} KiB, from {before} to {peak} ({peak_blocked} while unread)"
    );

    let updates = agent.updates(&session);
    let call = updates.iter().find(|u| u["sessionUpdate"] == "tool_call").unwrap()["toolCallId"]
        .as_str()
        .unwrap()
        .to_owned();
    let card = card_updates(&updates, &call);
    let last = card.last().unwrap();
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(last["_meta"]["terminal_exit"]["exit_code"], 0, "{last}");
    // Output came (coalesced) before the card closed, and the last of it is there.
    let output: Vec<&str> =
        card.iter().filter_map(|u| u["_meta"]["terminal_output"]["data"].as_str()).collect();
    assert!(output.len() > 1, "{} output updates", output.len());
    assert!(
        output.last().unwrap().contains(&format!("end-of-{marker}")),
        "the output's end is missing"
    );
    // The agent's answer follows the card, in order.
    let closed = updates.iter().position(|u| std::ptr::eq(u, *last)).unwrap();
    let said = updates.iter().position(|u| u["sessionUpdate"] == "agent_message_chunk").unwrap();
    assert!(said > closed);
}

/// `session/load` of a long thread to a client that stops reading: the replay waits for it
/// (its updates go out in batches past the SDK, at most a few of them handed over and not
/// yet written), and once it reads again it gets the whole thread in order, the answer
/// after it, and the session goes on.
#[test]
fn a_client_that_stops_reading_during_a_load_gets_the_whole_thread_in_order() {
    use crate::sessions::sharing;
    let data = tempfile::tempdir().unwrap();
    let (session, cwd) = long_thread(data.path());

    let mut second = Agent::start(sharing(data.path(), vec![say("Welcome back.")]));
    second.initialize(true);
    second.stop_reading();
    let load = second.request(
        "session/load",
        serde_json::json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
    );
    // The agent fills the pipe and waits; nothing is lost meanwhile.
    std::thread::sleep(std::time::Duration::from_millis(500));
    second.resume_reading();
    let answer = second.response(load);
    assert!(answer.get("result").is_some(), "{answer}");
    let updates = second.updates(&session);
    let cards: Vec<&str> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .map(|u| u["toolCallId"].as_str().unwrap())
        .collect();
    assert_eq!(cards.len(), CALLS, "every card comes back once");
    for (i, call) in cards.iter().enumerate() {
        let card = card_updates(&updates, call);
        let output: String =
            card.iter().filter_map(|u| u["_meta"]["terminal_output"]["data"].as_str()).collect();
        // In order: the i-th card is the i-th command, with all its output.
        assert!(output.starts_with(&format!("call-{i}-1\n")), "card {i}: {output:?}");
        assert!(output.ends_with(&format!("call-{i}-150\n")), "card {i}: {output:?}");
        let last = card.last().unwrap();
        assert_eq!(last["status"], "completed", "{last}");
        assert_eq!(last["_meta"]["terminal_exit"]["exit_code"], 0, "{last}");
    }
    // The answer's text follows the last card, and the session goes on.
    let last_card = updates.iter().rposition(|u| u["toolCallId"] == *cards[CALLS - 1]).unwrap();
    let said = updates.iter().rposition(|u| u["content"]["text"] == "printed").unwrap();
    assert!(said > last_card, "the thread's last text comes after its last card");
    let response = second.prompt(&session, "again");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let after = second.updates(&session);
    assert_eq!(after.last().unwrap()["content"]["text"], "Welcome back.", "{:?}", after.last());
}

/// A client that closes stdin while a long thread is being replayed to it: the agent ends
/// the replay, exits cleanly, and the session loads whole in the next agent and goes on.
#[test]
fn a_client_that_leaves_during_a_load_leaves_a_session_that_loads_and_goes_on() {
    use crate::sessions::sharing;
    let data = tempfile::tempdir().unwrap();
    let (session, cwd) = long_thread(data.path());

    let mut leaving = Agent::start(sharing(data.path(), vec![]));
    leaving.initialize(true);
    leaving.request(
        "session/load",
        serde_json::json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
    );
    let status = leaving.finish();
    assert!(status.success(), "{status}");

    let mut next = Agent::start(sharing(data.path(), vec![say("Welcome back.")]));
    next.initialize(true);
    let (updates, answer) = next.load(&session, &cwd);
    assert!(answer.get("result").is_some(), "{answer}");
    let cards = updates.iter().filter(|u| u["sessionUpdate"] == "tool_call").count();
    assert_eq!(cards, CALLS, "the thread loads whole");
    let response = next.prompt(&session, "again");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
}

/// The commands of [`long_thread`]: enough for several batches of a replay, more than a pipe
/// holds (about 300 KiB of updates), and a log read apart from its fold.
const CALLS: usize = 120;

/// A session in `data` whose one turn ran [`CALLS`] commands of 150 lines each (the i-th
/// prints `call-i-1` to `call-i-150`): its id and folder.
fn long_thread(data: &std::path::Path) -> (String, std::path::PathBuf) {
    let mut script: Vec<serde_json::Value> =
        (0..CALLS).map(|i| bash_call(&format!("seq -f 'call-{i}-%g' 1 150"))).collect();
    script.push(say("printed"));
    let mut first = Agent::start(crate::sessions::sharing(data, script));
    first.initialize(true);
    let session = first.new_session();
    let response = first.prompt(&session, "print a lot");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let cwd = first.workdir.clone();
    first.finish();
    // Long enough for the agent to read it on a thread of its own (from 256 KiB), so that a
    // client that stops reading holds that thread too.
    let log = data.join("sessions").join(format!("{session}.jsonl"));
    let length = std::fs::metadata(&log).expect("the session's log").len();
    assert!(length >= 256 << 10, "the log is {length} bytes");
    (session, cwd)
}
