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
