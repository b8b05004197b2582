//! What the client sees of a command: a live terminal card (Zed) or a console block.

use hotsh_tests::{
    Agent, AgentOptions, bash_call, card_updates, eventually, processes_matching, say,
};
use serde_json::{Value, json};

const COMMAND: &str = "printf 'a\\nb'; echo err >&2; exit 3";

fn run_command(terminal_output: bool) -> (Agent, String, Vec<Value>) {
    let mut agent = Agent::start(AgentOptions::script(vec![bash_call(COMMAND), say("done")]));
    agent.initialize(terminal_output);
    let session = agent.new_session();
    let response = agent.prompt(&session, "run it");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let updates = agent.updates(&session);
    (agent, session, updates)
}

/// All terminal output data sent for `call_id`, concatenated.
fn terminal_data(updates: &[&Value]) -> String {
    updates.iter().filter_map(|u| u["_meta"]["terminal_output"]["data"].as_str()).collect()
}

#[test]
fn command_is_a_live_terminal_card_with_exit_status() {
    let (agent, _session, updates) = run_command(true);
    let start =
        updates.iter().position(|u| u["sessionUpdate"] == "tool_call").expect("a tool_call");
    let call = &updates[start];
    let id = call["toolCallId"].as_str().unwrap();
    let cwd = agent.workdir.to_string_lossy().into_owned();
    assert_eq!(call["title"], COMMAND);
    assert_eq!(call["kind"], "execute");
    assert_eq!(call["content"], json!([{"type": "terminal", "terminalId": id}]));
    assert_eq!(call["_meta"]["terminal_info"], json!({"terminal_id": id, "cwd": cwd}));
    assert_eq!(call["rawInput"], json!({"command": COMMAND}));

    let card = card_updates(&updates, id);
    let outputs: Vec<usize> = card
        .iter()
        .enumerate()
        .filter(|(_, u)| u["_meta"].get("terminal_output").is_some())
        .map(|(i, _)| i)
        .collect();
    let exit =
        card.iter().position(|u| u["_meta"].get("terminal_exit").is_some()).expect("terminal_exit");
    assert!(!outputs.is_empty(), "no terminal_output: {card:#?}");
    assert!(
        outputs.iter().all(|&i| i > 0 && i < exit),
        "output must come between tool_call and exit"
    );
    assert_eq!(exit, card.len() - 1, "terminal_exit is the last update of the card");
    // stdout and stderr are two pipes: their chunks interleave in arrival order.
    let data = terminal_data(&card);
    assert_eq!(data.replacen("err\n", "", 1), "a\nb", "{data:?}");

    let last = card[exit];
    assert_eq!(
        last["_meta"]["terminal_exit"],
        json!({"terminal_id": id, "exit_code": 3, "signal": null})
    );
    assert_eq!(last["status"], "failed");
    assert_eq!(last["rawOutput"]["exit_code"], 3);
    assert_eq!(last["rawOutput"]["timed_out"], false);

    // The model was told the same story: stdout, [stderr], exit code last.
    assert_eq!(
        agent.tool_results(),
        vec![("a\nb\n[stderr]\nerr\n[exit code: 3]".to_owned(), false)]
    );
    // And the closing text reached the client.
    assert!(
        updates
            .iter()
            .any(|u| u["sessionUpdate"] == "agent_message_chunk" && u["content"]["text"] == "done")
    );
}

#[test]
fn without_terminal_support_output_is_a_console_block() {
    let (agent, _session, updates) = run_command(false);
    for update in &updates {
        let meta = &update["_meta"];
        for key in ["terminal_info", "terminal_output", "terminal_exit"] {
            assert!(meta.get(key).is_none(), "unexpected {key} in {update}");
        }
        assert!(
            update["content"].as_array().is_none_or(|c| c.iter().all(|c| c["type"] != "terminal"))
        );
    }
    let call = updates.iter().find(|u| u["sessionUpdate"] == "tool_call").expect("a tool_call");
    let id = call["toolCallId"].as_str().unwrap();
    let card = card_updates(&updates, id);
    let last = card.last().unwrap();
    assert_eq!(last["status"], "failed");
    assert_eq!(last["rawOutput"]["exit_code"], 3);
    let text = last["content"][0]["content"]["text"].as_str().expect("final console content");
    assert!(text.starts_with("```console\n"), "{text}");
    // Without a terminal's exit pill, the card says how the command ended.
    let text = text.strip_suffix("\n\nExited with code 3.").expect("the exit line");
    assert!(text.ends_with("\n```"), "{text}");
    let body = text.trim_start_matches("```console\n").trim_end_matches("\n```");
    // The fence drops a final newline, so stderr's line may end the block without one.
    let stdout_only = if body.contains("err\n") {
        body.replacen("err\n", "", 1)
    } else {
        body.replacen("err", "", 1)
    };
    assert_eq!(stdout_only, "a\nb", "{text}");
    // Every intermediate content update is a console block too (replaced as output grows).
    for update in &card[1..] {
        if let Some(content) = update["content"].as_array() {
            let text = content[0]["content"]["text"].as_str().unwrap();
            assert!(text.starts_with("```console\n"), "{text}");
        }
    }
    assert_eq!(agent.tool_results()[0].0, "a\nb\n[stderr]\nerr\n[exit code: 3]");
}

#[test]
fn reasoning_and_text_stream_as_thought_and_message_chunks() {
    let mut agent = Agent::start(AgentOptions::script(vec![
        json!({"reasoning": "thinking hard", "text": "hello"}),
    ]));
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "hi");
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let updates = agent.updates(&session);
    assert_eq!(
        updates,
        vec![
            json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "thinking hard"}}),
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hello"}}),
        ]
    );
    // The model saw the system prompt with the bash section, the tool, and the user's words.
    let request = &agent.model_requests()[0];
    assert!(request["system"].as_str().unwrap().contains("[exit code: N]"));
    assert_eq!(request["tools"][0]["name"], "bash");
    assert_eq!(request["messages"], json!([{"role": "user", "text": "hi"}]));
}

#[test]
fn long_output_is_bounded_for_the_model_and_names_the_spill_file() {
    // 200 000 lines of 6 bytes: far over the model's ~30 KB view.
    let command = "seq 100000 299999";
    let mut agent = Agent::start(AgentOptions::script(vec![bash_call(command), say("ok")]));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    let (text, is_error) = agent.tool_results().remove(0);
    assert!(!is_error);
    assert!(text.len() < 32_000, "model text is {} bytes", text.len());
    assert!(text.starts_with("100000\n100001\n"), "{}", &text[..40]);
    assert!(text.contains("bytes omitted"), "middle cut marker missing");
    let marker = text.lines().last().unwrap();
    let path = marker
        .strip_prefix("[output truncated; full output: ")
        .and_then(|p| p.strip_suffix(']'))
        .unwrap_or_else(|| panic!("last line is not the truncation marker: {marker}"));
    let spilled = std::fs::read_to_string(path).expect("spill file exists");
    assert_eq!(spilled.len(), 200_000 * 7);
    assert!(spilled.ends_with("299999\n"));
    assert!(text.trim_end_matches(marker).trim_end().ends_with("299998\n299999"));
}

#[test]
fn timeout_stops_the_command_and_says_so() {
    let command = "echo started; setsid sleep 30.0431 & sleep 30.0431";
    // Long enough for a loaded machine to start bash and echo; the sleeps outlast it.
    let call = json!({"tool_calls": [{"name": "bash", "arguments": {"command": command, "timeout": 2000}}]});
    let mut agent = Agent::start(AgentOptions::script(vec![call, say("ok")]));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    assert_eq!(
        agent.tool_results(),
        vec![("started\n[timed out after 2000ms]\n[killed by signal: SIGTERM]".to_owned(), false)]
    );
    let updates = agent.updates(&session);
    let last = updates.iter().rev().find(|u| u["_meta"].get("terminal_exit").is_some()).unwrap();
    assert_eq!(last["_meta"]["terminal_exit"]["signal"], "SIGTERM");
    assert_eq!(last["rawOutput"]["timed_out"], true);
    assert_eq!(last["rawOutput"]["timeout_ms"], 2000);
    eventually("both sleeps to be gone", || processes_matching("sleep 30.0431").is_empty());
}

/// A command that prints nothing and is stopped: a client without terminal support still sees
/// why it ended.
fn console_reason_of(arguments: Value, cancel: bool) -> String {
    let call = json!({"tool_calls": [{"name": "bash", "arguments": arguments}]});
    let mut agent = Agent::start(AgentOptions::script(vec![call, say("ok")]));
    agent.initialize(false);
    let session = agent.new_session();
    let prompt = agent.start_prompt(&session, "go");
    if cancel {
        agent.wait_for(|m| m["params"]["update"]["sessionUpdate"] == "tool_call");
        eventually("the sleep to start", || !processes_matching("sleep 30.0707").is_empty());
        agent.notify("session/cancel", json!({"sessionId": session}));
    }
    agent.response(prompt);
    let updates = agent.updates(&session);
    let last = updates.iter().rev().find(|u| u["status"] == "failed").expect("a failed card");
    last["content"][0]["content"]["text"].as_str().expect("the card says why").to_owned()
}

#[test]
fn without_terminal_support_a_stopped_silent_command_says_why_it_ended() {
    assert_eq!(
        console_reason_of(json!({"command": "sleep 30.0707"}), true),
        "Stopped: the user cancelled the turn (SIGTERM)."
    );
    assert_eq!(
        console_reason_of(json!({"command": "sleep 30.0708", "timeout": 200}), false),
        "Stopped: timed out after 200 ms (SIGTERM)."
    );
    assert_eq!(console_reason_of(json!({"command": "exit 4"}), false), "Exited with code 4.");
}
