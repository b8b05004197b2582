//! Long sessions: the context indicator, older tool output cleared from requests, compaction
//! (automatic, on a "context too long" answer, `/compact`), slash commands, the title, a turn's request limit, a prompt prefix
//! the providers can cache. Against the loopback SSE provider, with a profile whose window is
//! a few thousand tokens.

use hotsh_tests::{
    Agent, AgentOptions, FakeProvider, Reply, bash_call, delta, install_like_cargo, say, sse,
    tool_bash_plugin,
};
use serde_json::{Value, json};

/// The window of the test profile, and its threshold (half of it).
const WINDOW: u64 = 8000;

/// An agent whose model is the profile `tiny` at `provider` (8,000 tokens, compacting past
/// half), its sessions in `data` when given.
fn options(provider: &FakeProvider, data: Option<&std::path::Path>, more: &str) -> AgentOptions {
    let mut options = AgentOptions::script(vec![]);
    options.model_args = Some(Vec::new());
    options.config = Some(format!(
        "model = \"tiny\"\n{more}\n[models.tiny]\nbase_url = \"{}\"\nmodel = \"tiny-model\"\ncontext_window = {WINDOW}\ncompact_at = 0.5\n",
        provider.base_url
    ));
    if let Some(data) = data {
        options.env = vec![("HOTSH_DATA_DIR".into(), data.to_string_lossy().into_owned())];
    }
    options
}

/// A streamed answer: text, a finish, the usage the provider reports, `[DONE]`.
fn answer(text: &str, usage: Option<Value>) -> Reply {
    let mut pieces = vec![
        delta(json!({"role": "assistant", "content": text}), None),
        delta(json!({}), Some("stop")),
    ];
    if let Some(usage) = usage {
        pieces.push(sse(&json!({"id": "x", "choices": [], "usage": usage})));
    }
    pieces.push("data: [DONE]\n\n".into());
    Reply::Stream(pieces)
}

/// A streamed tool call of `bash` running `command`, with the usage the provider reports.
fn bash(command: &str, usage: impl Into<Option<Value>>) -> Reply {
    let arguments = json!({"command": command}).to_string();
    let mut pieces = vec![
        delta(
            json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "bash", "arguments": arguments}}]}),
            None,
        ),
        delta(json!({}), Some("tool_calls")),
    ];
    if let Some(usage) = usage.into() {
        pieces.push(sse(&json!({"id": "x", "choices": [], "usage": usage})));
    }
    pieces.push("data: [DONE]\n\n".into());
    Reply::Stream(pieces)
}

/// The text of a request's last message.
fn last_text(body: &Value) -> String {
    let messages = body["messages"].as_array().unwrap();
    messages.last().unwrap()["content"].as_str().unwrap_or_default().to_owned()
}

fn is_summary_request(body: &Value) -> bool {
    last_text(body).contains("Write a summary of this conversation")
}

fn of_kind<'a>(updates: &'a [Value], kind: &str) -> Vec<&'a Value> {
    updates.iter().filter(|u| u["sessionUpdate"] == kind).collect()
}

/// Roughly the tokens of a request body (four bytes a token, as hotsh estimates).
fn tokens(body: &Value) -> u64 {
    (body["messages"].to_string().len() + body["tools"].to_string().len()) as u64 / 4
}

#[test]
fn past_the_threshold_the_session_compacts_and_after_a_restart_sends_the_same_request() {
    let data = tempfile::tempdir().unwrap();
    // A command whose output (about 20 KB, 5,000 tokens) takes the next request past half of
    // the window.
    let provider = FakeProvider::start(vec![
        bash(
            "seq 100000 104000",
            json!({"prompt_tokens": 1500, "completion_tokens": 20, "prompt_cache_hit_tokens": 1200}),
        ),
        answer("SUMMARY: the user ran seq; it printed 100000..104000.", None),
        answer(
            "It printed 4001 numbers.",
            Some(json!({"prompt_tokens": 900, "completion_tokens": 9})),
        ),
    ]);
    let mut agent = Agent::start(options(&provider, Some(data.path()), ""));
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "count with seq");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    let received: Vec<Value> = provider.received().into_iter().map(|r| r.body).collect();
    assert_eq!(received.len(), 3, "the turn's request, the summary request, the next request");
    assert!(!is_summary_request(&received[0]));
    assert!(is_summary_request(&received[1]), "{}", last_text(&received[1]));
    // The summary request has the same system prompt and tools (the provider caches them) and
    // the command's output, cut to fit the window.
    assert_eq!(received[1]["messages"][0], received[0]["messages"][0]);
    assert_eq!(received[1]["tools"], received[0]["tools"]);
    assert!(tokens(&received[1]) < WINDOW, "the summary request fits the window");
    // The next request: the system prompt, the user's prompt, the summary; under the window.
    let after = received[2]["messages"].as_array().unwrap();
    assert_eq!(after.len(), 3, "{after:#?}");
    assert_eq!(after[1]["content"], "count with seq");
    assert!(after[2]["content"].as_str().unwrap().ends_with("it printed 100000..104000."));
    assert!(tokens(&received[2]) < WINDOW / 2, "{} tokens", tokens(&received[2]));

    // The client saw the context use after each answer (the provider's counts, the cache
    // hits), and a card saying what the compaction did (it did not ask for compaction
    // updates).
    let updates = agent.all_updates(&session);
    let usage = of_kind(&updates, "usage_update");
    assert_eq!(usage.len(), 3, "{usage:#?}");
    assert_eq!((usage[0]["used"].as_u64(), usage[0]["size"].as_u64()), (Some(1520), Some(WINDOW)));
    assert_eq!(usage[0]["_meta"]["hotsh"], json!({"estimated": false, "cachedTokens": 1200}));
    assert_eq!(usage[1]["_meta"]["hotsh"]["estimated"], true, "after compaction: an estimate");
    assert!(usage[1]["used"].as_u64().unwrap() < 1520 + 5000);
    assert_eq!(usage[2]["used"], 909);
    let card = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call" && u["title"] == "Compacting the conversation")
        .expect("a compaction card");
    let id = card["toolCallId"].clone();
    let closed = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["toolCallId"] == id)
        .expect("the card closed");
    assert_eq!(closed["status"], "completed");
    assert!(
        closed["content"][0]["content"]["text"].as_str().unwrap().contains("summarised"),
        "{closed}"
    );
    assert!(of_kind(&updates, "compaction_update").is_empty());

    // Killed, restarted, loaded: the next request is the one the live process would send.
    agent.kill9();
    let second_provider = FakeProvider::start(vec![answer("Still here.", None)]);
    let mut second = Agent::start(options(&second_provider, Some(data.path()), ""));
    second.initialize(true);
    second.wait_for_stderr("initial plugin scan done");
    let (replayed, load) = second.load(&session, &agent.workdir);
    assert!(load.get("result").is_some(), "{load}");
    // The whole thread is replayed (the command's card and output included); the context use
    // is shown again.
    assert!(replayed.iter().any(|u| u["title"] == "seq 100000 104000"));
    let shown = of_kind(&replayed, "usage_update");
    assert_eq!(shown.len(), 1, "only the last context use: {shown:#?}");
    assert_eq!(shown[0]["used"], 909);
    let response = second.prompt(&session, "and now?");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let next = second_provider.received()[0].body.clone();
    let messages = next["messages"].as_array().unwrap();
    let live = received[2]["messages"].as_array().unwrap();
    assert_eq!(messages[..3], live[..3], "the compacted history differs after the restart");
    assert_eq!(messages[3], json!({"role": "assistant", "content": "It printed 4001 numbers."}));
    assert_eq!(messages[4], json!({"role": "user", "content": "and now?"}));
    assert_eq!(next["tools"], received[2]["tools"]);
}

#[test]
fn a_context_too_long_answer_compacts_and_retries_and_clients_that_ask_get_compaction_updates() {
    let too_long = Reply::Status {
        code: 400,
        headers: Vec::new(),
        body: json!({"error": {"message": "This model's maximum context length is 8000 tokens. However, you requested 9100 tokens."}}).to_string(),
    };
    let provider = FakeProvider::start(vec![
        answer("First answer.", None),
        too_long.clone(),
        answer("SUMMARY: one exchange.", None),
        answer("Second answer.", None),
    ]);
    let mut agent = Agent::start(options(&provider, None, ""));
    agent.initialize_with(json!({"session": {"compaction": {}}}));
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "one")["result"]["stopReason"], "end_turn");
    let response = agent.prompt(&session, "two");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let received: Vec<Value> = provider.received().into_iter().map(|r| r.body).collect();
    assert_eq!(received.len(), 4);
    assert!(is_summary_request(&received[2]));
    let retried = received[3]["messages"].as_array().unwrap();
    assert_eq!(retried.len(), 4, "system, the two prompts, the summary: {retried:#?}");
    assert!(retried[3]["content"].as_str().unwrap().ends_with("SUMMARY: one exchange."));

    // ACP's compaction entity: in progress, the summary streamed into it, completed with the
    // token counts; no card.
    let updates = agent.all_updates(&session);
    let compaction = of_kind(&updates, "compaction_update");
    assert_eq!(compaction.len(), 2, "{compaction:#?}");
    assert_eq!(compaction[0]["status"], "in_progress");
    assert_eq!(compaction[0]["_meta"]["hotsh"]["trigger"], "overflow");
    assert_eq!(compaction[1]["status"], "completed");
    assert_eq!(compaction[1]["compactionId"], compaction[0]["compactionId"]);
    let (before, after) = (
        compaction[1]["_meta"]["hotsh"]["tokensBefore"].as_u64().unwrap(),
        compaction[1]["_meta"]["hotsh"]["tokensAfter"].as_u64().unwrap(),
    );
    assert!(after > 0 && before > 0, "{}", compaction[1]);
    let chunks = of_kind(&updates, "compaction_summary_chunk");
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0]["content"]["text"], "SUMMARY: one exchange.");
    assert!(!updates.iter().any(|u| u["title"] == "Compacting the conversation"));
    // The summary is not the agent's message.
    assert!(
        !of_kind(&updates, "agent_message_chunk")
            .iter()
            .any(|u| u["content"]["text"] == "SUMMARY: one exchange.")
    );
}

#[test]
fn slash_commands_are_listed_compact_takes_a_focus_and_the_title_is_shown() {
    let data = tempfile::tempdir().unwrap();
    let provider = FakeProvider::start(vec![
        answer("Hello.", None),
        answer("SUMMARY: greeted.", None),
        answer("A path.", None),
        answer("Wrote AGENTS.md.", None),
    ]);
    let mut agent = Agent::start(options(&provider, Some(data.path()), ""));
    agent.initialize(true);
    let session = agent.new_session();
    // Listed after the session is created.
    let listed = agent.wait_for(|m| {
        m["params"]["sessionId"] == session.as_str()
            && m["params"]["update"]["sessionUpdate"] == "available_commands_update"
    });
    let names: Vec<&str> = listed["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["compact", "hooks", "init", "permissions"]);
    assert_eq!(
        agent.prompt(&session, "hello there\nsecond line")["result"]["stopReason"],
        "end_turn"
    );
    let titles: Vec<Value> = of_kind(&agent.all_updates(&session), "session_info_update")
        .into_iter()
        .map(|u| u["title"].clone())
        .collect();
    assert_eq!(titles, [json!("hello there")]);

    let response = agent.prompt(&session, "/compact  the greeting ");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    // An unknown command is a prompt like any other; `/init` asks the model for AGENTS.md.
    assert_eq!(agent.prompt(&session, "/etc/hosts looks odd")["result"]["stopReason"], "end_turn");
    assert_eq!(
        agent.prompt(&session, "/init mention the tests")["result"]["stopReason"],
        "end_turn"
    );
    let received: Vec<Value> = provider.received().into_iter().map(|r| r.body).collect();
    assert_eq!(received.len(), 4);
    assert!(is_summary_request(&received[1]));
    assert!(
        last_text(&received[1]).ends_with("focus on: the greeting"),
        "{}",
        last_text(&received[1])
    );
    let after = received[2]["messages"].as_array().unwrap();
    assert!(
        !after.iter().any(|m| m["content"].as_str().is_some_and(|t| t.contains("/compact"))),
        "the command is not the model's: {after:#?}"
    );
    assert_eq!(last_text(&received[2]), "/etc/hosts looks odd");
    let init = last_text(&received[3]);
    assert!(
        init.contains("AGENTS.md") && init.ends_with("The user adds: mention the tests"),
        "{init}"
    );
    // The title stays the first prompt's.
    assert_eq!(of_kind(&agent.all_updates(&session), "session_info_update").len(), 1);

    // Loaded in a new process: the prompts (the command too) are shown again, then the
    // commands, the title and the context use.
    agent.kill9();
    let mut second = Agent::start(options(&FakeProvider::start(vec![]), Some(data.path()), ""));
    second.initialize(true);
    second.wait_for_stderr("initial plugin scan done");
    let (replayed, load) = second.load(&session, &agent.workdir);
    assert!(load.get("result").is_some(), "{load}");
    let prompts: Vec<&str> = of_kind(&replayed, "user_message_chunk")
        .iter()
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        prompts,
        [
            "hello there\nsecond line",
            "/compact  the greeting ",
            "/etc/hosts looks odd",
            "/init mention the tests"
        ]
    );
    assert_eq!(of_kind(&replayed, "available_commands_update").len(), 1);
    assert_eq!(of_kind(&replayed, "session_info_update")[0]["title"], "hello there");
    assert_eq!(of_kind(&replayed, "usage_update").len(), 1);
}

#[test]
fn a_turn_stops_at_max_turn_requests() {
    let provider = FakeProvider::start(
        (0..6)
            .map(|_| bash("true", json!({"prompt_tokens": 10, "completion_tokens": 1})))
            .collect(),
    );
    let mut agent = Agent::start(options(&provider, None, "[session]\nmax_turn_requests = 3"));
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "loop");
    assert_eq!(response["result"]["stopReason"], "max_turn_requests", "{response}");
    assert_eq!(provider.received().len(), 3);
    // The session goes on.
    let response = agent.prompt(&session, "again");
    assert_eq!(response["result"]["stopReason"], "max_turn_requests", "{response}");
}

#[test]
fn bad_settings_and_bad_usage_numbers_get_clear_outcomes() {
    // A threshold out of range is refused at start-up, saying which.
    let provider = FakeProvider::start(vec![]);
    let mut refused = options(&provider, None, "[session]\ncompact_at = 1.5");
    refused.config = refused.config.map(|c| c.replace("compact_at = 0.5\n", ""));
    let agent = Agent::start(refused);
    let status = agent.finish();
    assert!(!status.success());

    // Usage numbers that are absurd: the indicator shows hotsh's estimate, marked as such.
    let provider = FakeProvider::start(vec![answer(
        "Hi.",
        Some(json!({"prompt_tokens": 999_999_999_999u64, "completion_tokens": -4})),
    )]);
    let mut agent = Agent::start(options(&provider, None, ""));
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "hi")["result"]["stopReason"], "end_turn");
    let updates = agent.all_updates(&session);
    let usage = of_kind(&updates, "usage_update");
    assert_eq!(usage.len(), 1);
    assert_eq!(usage[0]["_meta"]["hotsh"]["estimated"], true);
    let used = usage[0]["used"].as_u64().unwrap();
    assert!(used > 0 && used < WINDOW, "{used}");
}

#[test]
fn the_prompt_prefix_stays_byte_identical_across_requests_and_a_plugin_reload() {
    let responses = (0..5)
        .map(|i| bash_call(&format!("echo {i}")))
        .chain(["done", "a", "b", "c", "d"].map(say))
        .collect();
    let mut agent = Agent::start(AgentOptions::script(responses));
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "run five")["result"]["stopReason"], "end_turn");
    // Another build of the same code (the bytes differ: a few appended to the file, which the
    // loader ignores): a reload that leaves the tool specs as they were.
    let library = tool_bash_plugin();
    let name = library.file_name().unwrap().to_str().unwrap().to_owned();
    let rebuilt = agent.dir.path().join("rebuilt.so");
    let mut bytes = std::fs::read(&library).unwrap();
    bytes.extend_from_slice(b"\0rebuilt\0");
    std::fs::write(&rebuilt, bytes).unwrap();
    install_like_cargo(&rebuilt, &agent.plugin_dir(), &name);
    agent.wait_for_plugin_card(&session, 0, "reloaded");
    for text in ["again", "and again", "once more", "last"] {
        assert_eq!(agent.prompt(&session, text)["result"]["stopReason"], "end_turn");
    }
    let requests = agent.model_requests();
    assert_eq!(requests.len(), 10);
    for request in &requests[1..] {
        assert_eq!(request["system"], requests[0]["system"], "the system prompt changed");
        assert_eq!(request["tools"], requests[0]["tools"], "the tools changed");
    }
    // The history is only appended to.
    for pair in requests.windows(2) {
        let (a, b) =
            (pair[0]["messages"].as_array().unwrap(), pair[1]["messages"].as_array().unwrap());
        assert_eq!(&b[..a.len()], a.as_slice(), "a request rewrote the history before it");
    }
}

/// A streamed call of `update_plan` with these arguments.
fn plan_call(arguments: Value) -> Reply {
    Reply::Stream(vec![
        delta(
            json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_p", "type": "function",
                "function": {"name": "update_plan", "arguments": arguments.to_string()}}]}),
            None,
        ),
        delta(json!({}), Some("tool_calls")),
        "data: [DONE]\n\n".into(),
    ])
}

#[test]
fn a_plan_is_shown_logged_replayed_and_kept_in_the_summary() {
    let data = tempfile::tempdir().unwrap();
    let provider = FakeProvider::start(vec![
        plan_call(json!({"plan": [
            {"step": "Read the parser", "status": "completed"},
            {"step": "Fix the off-by-one", "status": "in_progress", "priority": "high"},
            {"step": "Run the tests", "status": "pending"}
        ]})),
        plan_call(json!({"plan": [{"step": "x", "status": "finished"}]})),
        answer("Planned.", None),
        answer("SUMMARY: fixing the parser.", None),
    ]);
    let mut agent = Agent::start(options(&provider, Some(data.path()), ""));
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "fix the parser")["result"]["stopReason"], "end_turn");
    // The plan reached the client's plan panel; the bad call got a clear error and a card.
    let updates = agent.updates(&session);
    let plans = of_kind(&updates, "plan");
    assert_eq!(plans.len(), 1, "{plans:#?}");
    assert_eq!(
        plans[0]["entries"][1],
        json!({"content": "Fix the off-by-one", "priority": "high", "status": "in_progress"})
    );
    assert_eq!(plans[0]["entries"][2]["priority"], "medium");
    let results: Vec<Value> = provider.received()[2].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(results[0], "Plan updated: 1 of 3 steps done.");
    assert!(
        results[1].as_str().unwrap().contains("invalid arguments for update_plan"),
        "{results:?}"
    );
    assert!(
        updates.iter().any(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "failed")
    );
    // The plan tool is offered beside the plugins' tools.
    let first = provider.received()[0].body.clone();
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"update_plan"), "{tools:?}");

    // A compaction's summary keeps the plan.
    assert_eq!(agent.prompt(&session, "/compact")["result"]["stopReason"], "end_turn");
    let summary = last_text(&provider.received()[3].body);
    assert!(
        summary.contains(
            "The current plan:\n[x] Read the parser\n[~] Fix the off-by-one\n[ ] Run the tests"
        ),
        "{summary}"
    );

    // Replayed on load in a new process.
    agent.kill9();
    let mut second = Agent::start(options(&FakeProvider::start(vec![]), Some(data.path()), ""));
    second.initialize(true);
    second.wait_for_stderr("initial plugin scan done");
    let (replayed, load) = second.load(&session, &agent.workdir);
    assert!(load.get("result").is_some(), "{load}");
    assert_eq!(of_kind(&replayed, "plan"), plans);
}

#[test]
fn reasoning_effort_is_a_session_option_that_reaches_the_request_and_survives_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let effort = "[models.tiny.effort]\nlevels = [\"low\", \"medium\", { name = \"max\", fields = { reasoning_effort = \"high\", thinking = { type = \"enabled\" } } }]\ndefault = \"medium\"\n";
    let with_effort = |provider: &FakeProvider| {
        let mut options = options(provider, Some(data.path()), "");
        options.config = options.config.map(|c| format!("{c}{effort}"));
        options
    };
    let provider = FakeProvider::start(vec![answer("one", None), answer("two", None)]);
    let mut agent = Agent::start(with_effort(&provider));
    agent.initialize(true);
    let created = agent.call("session/new", json!({"cwd": agent.workdir, "mcpServers": []}));
    let session = created["result"]["sessionId"].as_str().unwrap().to_owned();
    let option = created["result"]["configOptions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "reasoning_effort")
        .cloned()
        .expect("an effort option");
    assert_eq!(option["category"], "thought_level");
    assert_eq!(option["currentValue"], "medium");
    let levels: Vec<&str> = option["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["value"].as_str().unwrap())
        .collect();
    assert_eq!(levels, ["low", "medium", "max"]);
    assert_eq!(agent.prompt(&session, "think")["result"]["stopReason"], "end_turn");
    assert_eq!(provider.received()[0].body["reasoning_effort"], "medium");

    // A level that is not offered is refused, saying which are.
    let refused = agent.call(
        "session/set_config_option",
        json!({"sessionId": session, "configId": "reasoning_effort", "value": "extreme"}),
    );
    assert!(
        refused["error"]["message"].as_str().unwrap().contains("the levels are low, medium, max"),
        "{refused}"
    );
    let set = agent.call(
        "session/set_config_option",
        json!({"sessionId": session, "configId": "reasoning_effort", "value": "max"}),
    );
    assert!(set.get("result").is_some(), "{set}");
    assert_eq!(agent.prompt(&session, "think harder")["result"]["stopReason"], "end_turn");
    let body = provider.received()[1].body.clone();
    assert_eq!(
        (&body["reasoning_effort"], &body["thinking"]),
        (&json!("high"), &json!({"type": "enabled"}))
    );

    // Logged: a new process loads the session with the level it chose.
    agent.kill9();
    let provider = FakeProvider::start(vec![answer("three", None)]);
    let mut second = Agent::start(with_effort(&provider));
    second.initialize(true);
    second.wait_for_stderr("initial plugin scan done");
    let (_, load) = second.load(&session, &agent.workdir);
    let current = load["result"]["configOptions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "reasoning_effort")
        .map(|o| o["currentValue"].clone());
    assert_eq!(current, Some(json!("max")), "{load}");
    assert_eq!(second.prompt(&session, "again")["result"]["stopReason"], "end_turn");
    assert_eq!(provider.received()[0].body["thinking"], json!({"type": "enabled"}));

    // A model without levels offers no such option.
    let plain = FakeProvider::start(vec![]);
    let mut agent = Agent::start(options(&plain, None, ""));
    agent.initialize(true);
    let created = agent.call("session/new", json!({"cwd": agent.workdir, "mcpServers": []}));
    assert!(
        !created["result"]["configOptions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["id"] == "reasoning_effort"),
        "{created}"
    );
}

#[test]
fn usage_no_model_could_report_is_ignored_never_priced_and_not_kept() {
    let hostile = [
        json!({"prompt_tokens": u64::MAX, "completion_tokens": 5}),
        json!({"prompt_tokens": 100, "completion_tokens": 5, "prompt_cache_hit_tokens": 1_000_000_000_000_000u64}),
        json!({"prompt_tokens": WINDOW * 11, "completion_tokens": 5}),
        json!({"prompt_tokens": -5, "completion_tokens": 5}),
    ];
    let mut replies: Vec<Reply> = hostile.iter().map(|u| answer("ok", Some(u.clone()))).collect();
    replies.push(answer("fine", Some(json!({"prompt_tokens": 1000, "completion_tokens": 500}))));
    let provider = FakeProvider::start(replies);
    let data = tempfile::tempdir().unwrap();
    let mut priced = options(&provider, Some(data.path()), "");
    priced.config = priced
        .config
        .map(|c| format!("{c}price = {{ input = 1.0, output = 1.0, currency = \"USD\" }}\n"));
    let mut agent = Agent::start(priced);
    agent.initialize(true);
    let session = agent.new_session();
    for text in ["a", "b", "c", "d", "e"] {
        assert_eq!(agent.prompt(&session, text)["result"]["stopReason"], "end_turn");
    }
    let shown: Vec<Value> =
        of_kind(&agent.all_updates(&session), "usage_update").into_iter().cloned().collect();
    assert_eq!(shown.len(), 5, "{shown:#?}");
    for (update, reported) in shown[..4].iter().zip(&hostile) {
        // An estimate instead, nothing priced, no cache count passed on.
        assert!(update["used"].as_u64().unwrap() < WINDOW, "{reported}: {update}");
        assert_eq!(update["cost"]["amount"], 0.0, "{reported}: {update}");
    }
    let sane = (1000.0 + 500.0) / 1e6;
    assert!((shown[4]["cost"]["amount"].as_f64().unwrap() - sane).abs() < 1e-12, "{shown:#?}");
    assert!(agent.stderr().contains("ignored the usage the provider reported"));
    // Nothing of it was kept in the log either.
    let logs = std::fs::read_dir(data.path().join("sessions")).unwrap();
    for log in logs.flatten() {
        let text = std::fs::read_to_string(log.path()).unwrap();
        assert!(!text.contains("18446744073709551615"), "kept in the log");
        assert!(!text.contains("1000000000000000"), "kept in the log");
    }
}

#[test]
fn the_session_cost_adds_up_when_the_profile_gives_prices() {
    let usage =
        json!({"prompt_tokens": 1000, "completion_tokens": 500, "prompt_cache_hit_tokens": 200});
    let provider = FakeProvider::start(vec![
        answer("one", Some(usage.clone())),
        answer("two", Some(usage)),
        answer("three", None),
    ]);
    let mut priced = options(&provider, None, "");
    priced.config = priced.config.map(|c| {
        format!("{c}price = {{ input = 0.27, output = 1.10, cached_input = 0.07, currency = \"USD\" }}\n")
    });
    let mut agent = Agent::start(priced);
    agent.initialize(true);
    let session = agent.new_session();
    for text in ["a", "b", "c"] {
        assert_eq!(agent.prompt(&session, text)["result"]["stopReason"], "end_turn");
    }
    let costs: Vec<(f64, String)> = of_kind(&agent.all_updates(&session), "usage_update")
        .iter()
        .map(|u| {
            (
                u["cost"]["amount"].as_f64().unwrap(),
                u["cost"]["currency"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // 800 prompt tokens at 0.27, 200 cached at 0.07, 500 out at 1.10, per million; an answer
    // without usage adds nothing.
    let one = (800.0 * 0.27 + 200.0 * 0.07 + 500.0 * 1.10) / 1e6;
    assert_eq!(costs.len(), 3);
    for ((amount, currency), expected) in costs.iter().zip([one, 2.0 * one, 2.0 * one]) {
        assert!((amount - expected).abs() < 1e-12, "{amount} != {expected}");
        assert_eq!(currency, "USD");
    }

    // Negative prices are refused at start-up.
    let mut refused = options(&FakeProvider::start(vec![]), None, "");
    refused.config = refused
        .config
        .map(|c| format!("{c}price = {{ input = -1, output = 1, currency = \"USD\" }}\n"));
    assert!(!Agent::start(refused).finish().success());
}

#[test]
fn an_answer_that_does_not_end_is_stopped_at_its_bound_and_long_lines_parse_in_one_pass() {
    // Reasoning that never stops (no [DONE]): 20,000 chunks of 10 bytes, against a bound of
    // 1,000 tokens (4,000 bytes).
    let endless: Vec<String> =
        (0..20_000).map(|_| delta(json!({"reasoning_content": "thinking. "}), None)).collect();
    let provider = FakeProvider::start(vec![Reply::Stream(endless), answer("back", None)]);
    let data = tempfile::tempdir().unwrap();
    let mut agent =
        Agent::start(options(&provider, Some(data.path()), "[session]\nmax_answer_tokens = 1000"));
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "think");
    let message = response["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("passed 1000 tokens"), "{response}");
    let thoughts = of_kind(&agent.updates(&session), "agent_thought_chunk").len();
    assert!(thoughts <= 400, "{thoughts} chunks reached the client");
    // Not retried (the provider got one request), the session goes on, the log is bounded.
    assert_eq!(agent.prompt(&session, "again")["result"]["stopReason"], "end_turn");
    assert_eq!(provider.received().len(), 2);
    let log = data.path().join("sessions").join(format!("{session}.jsonl"));
    assert!(std::fs::metadata(&log).unwrap().len() < 200_000);

    // One 4 MB line: refused at the line bound when the answer may not be that long, served
    // whole when it may (cut into lines in one pass, it parses in linear time).
    let line = || {
        Reply::Stream(vec![
            delta(json!({"content": "x".repeat(4 << 20)}), Some("stop")),
            "data: [DONE]\n\n".into(),
        ])
    };
    let provider = FakeProvider::start(vec![line()]);
    let mut agent = Agent::start(options(&provider, None, ""));
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "one long line");
    assert!(
        response["error"]["message"].as_str().unwrap_or_default().contains("passed 8000 tokens"),
        "{response}"
    );
    let provider = FakeProvider::start(vec![line()]);
    let mut agent =
        Agent::start(options(&provider, None, "[session]\nmax_answer_tokens = 4000000"));
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "one long line")["result"]["stopReason"], "end_turn");
    let text: usize = of_kind(&agent.updates(&session), "agent_message_chunk")
        .iter()
        .map(|u| u["content"]["text"].as_str().unwrap().len())
        .sum();
    assert_eq!(text, 4 << 20);
}

#[test]
fn the_prompt_names_the_day_the_session_began_not_today() {
    let data = tempfile::tempdir().unwrap();
    let sharing = |responses: Vec<Value>| {
        let mut options = AgentOptions::script(responses);
        options.env = vec![("HOTSH_DATA_DIR".into(), data.path().to_string_lossy().into_owned())];
        options
    };
    let mut agent = Agent::start(sharing(vec![say("one")]));
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "a")["result"]["stopReason"], "end_turn");
    agent.kill9();
    // The session began on another day (its first record says when).
    let log = data.path().join("sessions").join(format!("{session}.jsonl"));
    let text = std::fs::read_to_string(&log).unwrap();
    let (first, rest) = text.split_once('\n').unwrap();
    let mut record: Value = serde_json::from_str(first).unwrap();
    record["data"]["created_at"] = json!("2020-01-02T03:04:05.000Z");
    std::fs::write(&log, format!("{record}\n{rest}")).unwrap();
    let mut second = Agent::start(sharing(vec![say("two")]));
    second.initialize(true);
    second.wait_for_stderr("initial plugin scan done");
    let (_, load) = second.load(&session, &agent.workdir);
    assert!(load.get("result").is_some(), "{load}");
    assert_eq!(second.prompt(&session, "b")["result"]["stopReason"], "end_turn");
    let system = second.model_requests()[0]["system"].as_str().unwrap().to_owned();
    assert!(system.contains("- Date (UTC): 2020-01-02\n"), "{system}");
}

/// The tool results a request carries, in order.
fn tool_results(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// `turns` turns (the replies of [`command_replies`]): every request the provider received.
fn commands(agent: &mut Agent, session: &str, provider: &FakeProvider, turns: usize) -> Vec<Value> {
    for turn in 1..=turns {
        let response = agent.prompt(session, &format!("turn {turn}"));
        assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    }
    provider.received().into_iter().map(|r| r.body).collect()
}

/// The replies of `turns` turns, each a command printing 200 of its own numbers (`seq N000
/// N199`, 1,000 bytes for turns 1 to 9), with `usage`, and an answer.
fn command_replies(turns: usize, usage: Option<Value>) -> Vec<Reply> {
    (1..=turns)
        .flat_map(|turn| {
            [bash(&format!("seq {turn}000 {turn}199"), usage.clone()), answer("ok", None)]
        })
        .collect()
}

fn six_command_replies() -> Vec<Reply> {
    command_replies(6, Some(json!({"prompt_tokens": 500, "completion_tokens": 10})))
}

fn six_commands(agent: &mut Agent, session: &str, provider: &FakeProvider) -> Vec<Value> {
    commands(agent, session, provider, 6)
}

#[test]
fn older_tool_output_is_cleared_from_requests_not_from_the_thread_and_a_restart_sends_the_same() {
    let data = tempfile::tempdir().unwrap();
    let provider = FakeProvider::start(six_command_replies());
    // 500 tokens of the newest output whole: older output is cleared 1,000 bytes at a time
    // once 3,000 bytes are there.
    let settings = "[session]\nkeep_tool_output = 500\n";
    let mut agent = Agent::start(options(&provider, Some(data.path()), settings));
    agent.initialize(true);
    let session = agent.new_session();
    let received = six_commands(&mut agent, &session, &provider);
    assert_eq!(received.len(), 12);

    // The first requests carry every output whole; the last ones the oldest cleared, the
    // newest whole, each result still answering its call.
    let early = tool_results(&received[3]);
    assert_eq!(early.len(), 2);
    assert!((1..).zip(&early).all(|(turn, text)| text.contains(&format!("{turn}199"))));
    let last = tool_results(&received[11]);
    assert_eq!(last.len(), 6, "{last:#?}");
    let cleared: Vec<bool> =
        last.iter().map(|text| text.starts_with("[hotsh cleared this older output")).collect();
    assert!(cleared[0] && cleared[1], "the oldest are cleared: {last:#?}");
    assert!(!cleared[4] && !cleared[5], "the newest are whole: {last:#?}");
    assert!(last[5].contains("6000\n") && last[5].contains("6199"), "{}", last[5]);
    assert!(last[0].contains("bytes; the session's log keeps it"), "{}", last[0]);
    let first_cleared = received.iter().position(|body| {
        tool_results(body).first().is_some_and(|text| text.starts_with("[hotsh cleared"))
    });
    // Once cleared, an output stays cleared, the same text in every request after.
    let from = first_cleared.expect("a request cleared the first output");
    assert!(received[from..].iter().all(|body| tool_results(body)[0] == last[0]));
    // The thread keeps every output: the first command's card is whole when loaded.
    agent.kill9();
    let second_provider = FakeProvider::start(vec![answer("Still here.", None)]);
    let mut second = Agent::start(options(&second_provider, Some(data.path()), settings));
    second.initialize(true);
    second.wait_for_stderr("initial plugin scan done");
    let (replayed, load) = second.load(&session, &agent.workdir);
    assert!(load.get("result").is_some(), "{load}");
    let shown = serde_json::to_string(&replayed).unwrap();
    assert!(shown.contains("1000\\n1001\\n") && shown.contains("1199"), "the first output");
    // After the kill, the next request carries what the live one did, cleared the same.
    let response = second.prompt(&session, "and now?");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let next = second_provider.received()[0].body.clone();
    let live = received[11]["messages"].as_array().unwrap();
    let messages = next["messages"].as_array().unwrap();
    assert_eq!(messages[..live.len()], live[..], "the history differs after the restart");
    assert_eq!(messages[live.len() + 1], json!({"role": "user", "content": "and now?"}));
}

#[test]
fn with_pruning_off_every_request_carries_every_output_whole() {
    let provider = FakeProvider::start(six_command_replies());
    let settings = "[session]\nprune_tool_output = false\nkeep_tool_output = 500\n";
    let mut agent = Agent::start(options(&provider, None, settings));
    agent.initialize(true);
    let session = agent.new_session();
    let received = six_commands(&mut agent, &session, &provider);
    let last = tool_results(&received[11]);
    assert_eq!(last.len(), 6);
    for (turn, text) in (1..=6).zip(&last) {
        assert!(text.contains(&format!("{turn}000\n")) && text.contains(&format!("{turn}199")));
    }
    agent.finish();

    // Keeping nothing whole is refused at start-up, saying which setting.
    let provider = FakeProvider::start(vec![]);
    let refused = Agent::start(options(&provider, None, "[session]\nkeep_tool_output = 0\n"));
    refused.wait_for_stderr("session.keep_tool_output must be at least 1");
    assert!(!refused.finish().success());
}

#[test]
fn the_context_counts_what_requests_carry_so_cleared_output_puts_compaction_off() {
    // No usage reported: hotsh's estimate decides. 20 commands of 1,000 to 1,200 bytes are
    // over 20 KB, past the threshold (4,000 tokens, 16 KB) were they sent whole; cleared,
    // the requests stay far under it, and nothing compacts.
    let provider = FakeProvider::start(command_replies(20, None));
    let settings = "[session]\nkeep_tool_output = 500\n";
    let mut agent = Agent::start(options(&provider, None, settings));
    agent.initialize(true);
    let session = agent.new_session();
    let received = commands(&mut agent, &session, &provider, 20);
    assert_eq!(received.len(), 40, "a summary request was made");
    assert!(received.iter().all(|body| !is_summary_request(body)));
    // Each output as the request right after its command carried it, whole (the newest).
    let outputs: usize =
        (0..20).map(|turn| tool_results(&received[2 * turn + 1]).last().unwrap().len()).sum();
    assert!(outputs > 20_000, "the outputs were {outputs} bytes");
    let usage = of_kind(&agent.all_updates(&session), "usage_update")
        .last()
        .map(|u| (u["used"].as_u64().unwrap(), u["_meta"]["hotsh"]["estimated"].clone()))
        .unwrap();
    assert_eq!(usage.1, true);
    assert!(usage.0 < WINDOW / 2, "the context shown is {} tokens", usage.0);
    // The last request, tools and all, is smaller than its outputs would be alone.
    assert!(tokens(&received[39]) < outputs as u64 / 4, "{} tokens", tokens(&received[39]));
    agent.finish();
}
