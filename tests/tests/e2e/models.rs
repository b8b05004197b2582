//! Real models: the OpenAI-compatible streaming adapter against a loopback server that
//! streams server-sent events the way providers do.

use hotsh_tests::{Agent, AgentOptions, FakeProvider, Reply, delta, eventually, sse};
use serde_json::{Value, json};

const KEY: &str = "sk-test-0a1b2c3d4e5f";

/// An agent talking to `provider` as `openai:test-model`, with the key in HOTSH_API_KEY.
fn agent_for(provider: &FakeProvider) -> Agent {
    Agent::start(options_for(provider))
}

/// An agent talking to `provider` as `openai:test-model`, with a key.
fn options_for(provider: &FakeProvider) -> AgentOptions {
    AgentOptions::with_provider(provider)
}

/// A tool call fragment of a streamed delta.
fn call_fragment(index: u64, id: Option<&str>, name: Option<&str>, arguments: &str) -> Value {
    let mut function = json!({"arguments": arguments});
    if let Some(name) = name {
        function["name"] = json!(name);
    }
    let mut fragment = json!({"index": index, "function": function});
    if let Some(id) = id {
        fragment["id"] = json!(id);
        fragment["type"] = json!("function");
    }
    json!({"tool_calls": [fragment]})
}

/// A streamed answer of plain text, finished.
fn text_answer(text: &str) -> Reply {
    Reply::Stream(vec![
        delta(json!({"role": "assistant", "content": text}), None),
        delta(json!({}), Some("stop")),
        "data: [DONE]\n\n".into(),
    ])
}

#[test]
fn a_turn_with_reasoning_text_and_two_tool_calls_streams_and_sends_history_back() {
    // The first answer: reasoning, text and two tool calls whose arguments arrive in pieces,
    // with lines split across writes and keep-alive comments, as providers send them.
    let first = {
        let mut pieces = vec![": keep-alive\n\n".to_owned()];
        let reasoning = delta(json!({"role": "assistant", "reasoning_content": "Let me "}), None);
        let (a, b) = reasoning.split_at(17);
        pieces.push(a.to_owned());
        pieces.push(b.to_owned());
        pieces.push(delta(json!({"reasoning_content": "think."}), None));
        pieces.push(delta(json!({"content": "Running "}), None));
        pieces.push(delta(json!({"content": "two."}), None));
        pieces.push(delta(call_fragment(0, Some("call_a"), Some("bash"), "{\"comm"), None));
        pieces.push(delta(call_fragment(0, None, None, "and\": \"echo one\"}"), None));
        pieces.push(delta(call_fragment(1, Some("call_b"), Some("bash"), ""), None));
        pieces.push(delta(call_fragment(1, None, None, "{\"command\": \"echo two\"}"), None));
        pieces.push(delta(json!({}), Some("tool_calls")));
        pieces.push(sse(&json!({"id": "x", "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})));
        pieces.push("data: [DO".into());
        pieces.push("NE]\n\n".into());
        pieces
    };
    let second = Reply::Stream(vec![
        delta(json!({"role": "assistant", "reasoning_content": "All good."}), None),
        delta(json!({"content": "Both ran."}), Some("stop")),
        "data: [DONE]\n\n".into(),
    ]);
    let provider =
        FakeProvider::start(vec![Reply::Stream(first), second, text_answer("Hello again.")]);
    let mut agent = agent_for(&provider);
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "run two commands");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    // The client saw the reasoning as thoughts and the text as message chunks, as they came.
    let updates = agent.updates(&session);
    let chunks: Vec<(String, String)> = updates
        .iter()
        .filter(|u| u["sessionUpdate"].as_str().unwrap().ends_with("_chunk"))
        .map(|u| {
            (
                u["sessionUpdate"].as_str().unwrap().to_owned(),
                u["content"]["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("agent_thought_chunk", "Let me "),
        ("agent_thought_chunk", "think."),
        ("agent_message_chunk", "Running "),
        ("agent_message_chunk", "two."),
        ("agent_thought_chunk", "All good."),
        ("agent_message_chunk", "Both ran."),
    ]
    .iter()
    .map(|(k, t)| ((*k).to_owned(), (*t).to_owned()))
    .collect();
    assert_eq!(chunks, expected);
    let commands: Vec<&str> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .map(|u| u["title"].as_str().unwrap())
        .collect();
    assert_eq!(commands, ["echo one", "echo two"]);

    // What the server received the second time: the model, the history with both results,
    // the tools, the reasoning kept on the message that made the tool calls, the key only in
    // the Authorization header.
    let requests = provider.received();
    assert_eq!(requests.len(), 2);
    let second = &requests[1];
    assert_eq!(second.path, "/v1/chat/completions");
    assert_eq!(second.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    // The body goes with its length (some servers take no chunked request).
    let length = second.header("content-length").map(|l| l.parse::<usize>().unwrap());
    assert_eq!(length, Some(second.body.to_string().len()), "{:?}", second.headers);
    assert_eq!(second.header("transfer-encoding"), None);
    assert_eq!(second.body["model"], "test-model");
    assert_eq!(second.body["stream"], true);
    let messages = second.body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
    assert_eq!(messages[1]["content"], "run two commands");
    assert_eq!(messages[2]["content"], "Running two.");
    assert_eq!(messages[2]["reasoning_content"], "Let me think.");
    assert_eq!(
        messages[2]["tool_calls"],
        json!([
            {"id": "call_a", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"echo one\"}"}},
            {"id": "call_b", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"echo two\"}"}}
        ])
    );
    assert_eq!(messages[3], json!({"role": "tool", "tool_call_id": "call_a", "content": "one"}));
    assert_eq!(messages[4], json!({"role": "tool", "tool_call_id": "call_b", "content": "two"}));
    let tools: Vec<&str> = second.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["bash", "bash_output", "bash_kill", "update_plan", "task"]);
    for request in &requests {
        assert!(!request.body.to_string().contains(KEY), "the key is in a request body");
    }

    // A later request: the answer without tool calls goes back without its reasoning.
    agent.prompt(&session, "and now?");
    let third = &provider.received()[2];
    let assistant: Vec<&Value> = third.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(assistant.len(), 2);
    assert_eq!(assistant[0]["reasoning_content"], "Let me think.");
    assert!(assistant[1].get("reasoning_content").is_none(), "{}", assistant[1]);
    assert_eq!(assistant[1]["content"], "Both ran.");

    // Usage and the finish reason are in the session log; the key is in no file hotsh wrote.
    let log_path = agent.data_dir().join("sessions").join(format!("{session}.jsonl"));
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains(
            "\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":7,\"total_tokens\":18}"
        ),
        "{log}"
    );
    assert!(log.contains("\"finish_reason\":\"tool_calls\""));
    for file in [log_path, agent.dir.path().join("transcript.jsonl")] {
        assert!(
            !std::fs::read_to_string(&file).unwrap().contains(KEY),
            "{} holds the key",
            file.display()
        );
    }
}

/// Runs one prompt against `replies` and returns the prompt's response, the agent and the
/// provider.
fn one_prompt(replies: Vec<Reply>) -> (Value, Agent, String, FakeProvider) {
    let provider = FakeProvider::start(replies);
    let mut agent = agent_for(&provider);
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "hello");
    (response, agent, session, provider)
}

fn error_of(response: &Value) -> String {
    response["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error: {response}"))
        .to_owned()
}

#[test]
fn provider_failures_are_clear_and_the_session_goes_on() {
    let status = |code: u16, message: &str| Reply::Status {
        code,
        headers: Vec::new(),
        body: json!({"error": {"message": message}}).to_string(),
    };
    let cases: Vec<(Reply, &str)> = vec![
        (
            status(401, "Authentication Fails"),
            "refused the API key from HOTSH_API_KEY (HTTP 401): Authentication Fails",
        ),
        (
            status(404, "Model Not Exist"),
            "does not know the model `test-model` (HTTP 404): Model Not Exist",
        ),
        (status(418, "teapot"), "refused the request (HTTP 418): teapot"),
        (
            Reply::Stream(vec![delta(json!({"content": "partial "}), None)]),
            "stopped before it was complete",
        ),
        (Reply::Stream(vec!["data: {not json\n\n".into()]), "sent a chunk that is not JSON"),
    ];
    // (A context that is too long is compacted and retried: see `long_sessions.rs`.)
    for (reply, expected) in cases {
        let (response, mut agent, session, _provider) =
            one_prompt(vec![reply, text_answer("recovered")]);
        let message = error_of(&response);
        assert!(message.contains(expected), "{message:?} lacks {expected:?}");
        // The session stays usable.
        let next = agent.prompt(&session, "again");
        assert_eq!(next["result"]["stopReason"], "end_turn", "{next}");
    }
}

#[test]
fn rate_limits_and_server_errors_are_retried_before_anything_is_shown() {
    let limited = Reply::Status {
        code: 429,
        headers: vec![("Retry-After".into(), "0".into())],
        body: json!({"error": {"message": "slow down"}}).to_string(),
    };
    let failed = Reply::Status { code: 503, headers: Vec::new(), body: "overloaded".into() };
    let (response, agent, session, provider) =
        one_prompt(vec![limited, failed, text_answer("third time lucky")]);
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(provider.received().len(), 3);
    assert_eq!(agent.updates(&session).last().unwrap()["content"]["text"], "third time lucky");

    // Every attempt failing: one clear error naming the attempts.
    let always = || Reply::Status { code: 500, headers: Vec::new(), body: "boom".into() };
    let (response, _, _, provider) = one_prompt(vec![always(), always(), always(), always()]);
    let message = error_of(&response);
    assert!(message.contains("failed (HTTP 500): boom (after 4 attempts)"), "{message}");
    assert_eq!(provider.received().len(), 4);
}

#[test]
fn a_system_without_ca_certificates_still_reaches_a_model_over_plain_http() {
    // rustls-native-certs reads these instead of the system's store: an empty store.
    let empty = tempfile::tempdir().unwrap();
    let provider = FakeProvider::start(vec![text_answer("Hello over HTTP.")]);
    let mut options = options_for(&provider);
    let none = empty.path().join("none.pem").to_string_lossy().into_owned();
    options.env.push(("SSL_CERT_FILE".into(), none));
    options.env.push(("SSL_CERT_DIR".into(), empty.path().to_string_lossy().into_owned()));
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "hello");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let stderr = agent.wait_for_stderr("no usable CA certificates");
    assert!(stderr.contains("install ca-certificates"), "{stderr}");
}

#[test]
fn an_unreachable_server_is_named() {
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let mut options = AgentOptions::script(vec![]);
    options.model_args =
        Some(vec!["--model".into(), "openai:m".into(), "--base-url".into(), url.clone()]);
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    let message = error_of(&agent.prompt(&session, "hello"));
    assert!(message.starts_with(&format!("cannot reach {url}: ")), "{message}");
    assert!(message.contains("(after 4 attempts)"), "{message}");
}

#[test]
fn tool_call_arguments_that_are_not_json_reach_the_model_as_a_tool_error() {
    let broken = Reply::Stream(vec![
        delta(call_fragment(0, Some("call_x"), Some("bash"), "{\"command\": \"echo"), None),
        delta(json!({}), Some("tool_calls")),
        "data: [DONE]\n\n".into(),
    ]);
    let (response, _, _, provider) = one_prompt(vec![broken, text_answer("I will fix my JSON.")]);
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let second = &provider.received()[1];
    let tool = second.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    assert!(tool["content"].as_str().unwrap().contains("invalid arguments for `bash`"), "{tool}");
}

#[test]
fn cancel_closes_the_stream_at_once() {
    let provider = FakeProvider::start(vec![
        Reply::Hang(vec![delta(json!({"content": "thinking slowly"}), None)]),
        text_answer("after"),
    ]);
    let mut agent = agent_for(&provider);
    agent.initialize(true);
    let session = agent.new_session();
    let prompt = agent.start_prompt(&session, "take your time");
    agent.wait_for(|m| m["params"]["update"]["content"]["text"] == "thinking slowly");
    agent.notify("session/cancel", json!({"sessionId": session}));
    assert_eq!(agent.response(prompt)["result"]["stopReason"], "cancelled");
    eventually("the server to see the connection close", || provider.hung_up() == 1);
    assert_eq!(agent.prompt(&session, "again")["result"]["stopReason"], "end_turn");
}

#[test]
fn the_model_picker_switches_models_and_the_choice_survives_a_restart() {
    let mut options = AgentOptions::script(vec![]);
    let first = FakeProvider::start(vec![text_answer("from the first")]);
    let second =
        FakeProvider::start(vec![text_answer("from the second"), text_answer("still the second")]);
    let config = format!(
        "model = \"one\"\n[models.one]\nbase_url = \"{}\"\nmodel = \"m1\"\n[models.two]\nbase_url = \"{}\"\nmodel = \"m2\"\ncontext_window = 128000\n[models.two.extra]\ntemperature = 0.25\n",
        first.base_url, second.base_url
    );
    options.model_args = Some(Vec::new());
    options.config = Some(config.clone());
    let data = tempfile::tempdir().unwrap();
    options.env = vec![("HOTSH_DATA_DIR".into(), data.path().to_string_lossy().into_owned())];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let cwd = agent.workdir.clone();
    let created = agent.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let session = created["result"]["sessionId"].as_str().unwrap().to_owned();
    let option = &created["result"]["configOptions"][0];
    assert_eq!(option["id"], "model");
    assert_eq!(option["category"], "model");
    assert_eq!(option["currentValue"], "one");
    let values: Vec<&str> = option["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["value"].as_str().unwrap())
        .collect();
    assert_eq!(values, ["one", "two"]);
    assert_eq!(option["options"][1]["description"], "m2, 128k context");
    agent.prompt(&session, "hi");
    assert_eq!(first.received()[0].body["model"], "m1");

    let switched = agent.call(
        "session/set_config_option",
        json!({"sessionId": session, "configId": "model", "value": "two"}),
    );
    assert_eq!(switched["result"]["configOptions"][0]["currentValue"], "two", "{switched}");
    let bad = agent.call(
        "session/set_config_option",
        json!({"sessionId": session, "configId": "model", "value": "three"}),
    );
    assert_eq!(bad["error"]["code"], -32602);
    agent.prompt(&session, "hi again");
    assert_eq!(second.received()[0].body["model"], "m2");
    assert_eq!(second.received()[0].body["temperature"], 0.25);

    // A new hotsh on the same data: the session comes back talking to the second model.
    assert!(agent.finish().success());
    let mut options = AgentOptions::script(vec![]);
    options.model_args = Some(Vec::new());
    options.config = Some(config);
    options.env = vec![("HOTSH_DATA_DIR".into(), data.path().to_string_lossy().into_owned())];
    let mut again = Agent::start(options);
    again.initialize(true);
    let loaded =
        again.call("session/load", json!({"sessionId": session, "cwd": cwd, "mcpServers": []}));
    assert_eq!(loaded["result"]["configOptions"][0]["currentValue"], "two", "{loaded}");
    again.prompt(&session, "third");
    assert_eq!(second.received().len(), 2);
}

#[test]
fn without_a_key_initialize_says_how_to_authenticate_and_prompts_ask_for_it() {
    let mut options = AgentOptions::script(vec![]);
    options.model_args = Some(Vec::new());
    let mut agent = Agent::start(options);
    let init = agent.initialize(true);
    let method = &init["result"]["authMethods"][1];
    assert_eq!(method["id"], "api-key");
    assert!(method["description"].as_str().unwrap().contains("DEEPSEEK_API_KEY"), "{method}");
    let refused = agent.call("authenticate", json!({"methodId": "api-key"}));
    assert_eq!(refused["error"]["code"], -32000);
    assert!(
        refused["error"]["message"].as_str().unwrap().contains("in the `env` of this agent server")
    );
    // No session opens until there is a key (the client offers to authenticate).
    let response = agent.call("session/new", json!({"cwd": agent.workdir, "mcpServers": []}));
    assert_eq!(response["error"]["code"], -32000, "{response}");
    assert!(error_of(&response).contains("The model needs a key and none was found"));
}

#[test]
fn a_provider_key_picks_its_model_goes_to_its_own_host_only_and_never_reaches_a_command() {
    let provider = FakeProvider::start(vec![
        Reply::Stream(vec![
            delta(call_fragment(0, Some("c1"), Some("bash"), "{\"command\": \"env\"}"), None),
            delta(json!({}), Some("tool_calls")),
            "data: [DONE]\n\n".into(),
        ]),
        text_answer("checked"),
    ]);
    let mut options = AgentOptions::script(vec![]);
    // Only the key and the base URL: `deepseek` is picked from the key.
    options.model_args = Some(Vec::new());
    options.env = vec![
        ("DEEPSEEK_API_KEY".into(), KEY.into()),
        ("HOTSH_BASE_URL".into(), provider.base_url.clone()),
    ];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "look")["result"]["stopReason"], "end_turn");
    let first = &provider.received()[0];
    assert_eq!(first.body["model"], "deepseek-chat");
    // The server is not DeepSeek's own host: the DeepSeek key is not sent to it.
    assert_eq!(first.header("authorization"), None);
    let (env, _) = agent.tool_results().remove(0);
    assert!(!env.contains(KEY) && !env.contains("DEEPSEEK_API_KEY"), "{env}");
}

#[test]
fn the_system_prompt_has_the_environment_the_plugins_and_the_projects_agents_files() {
    let mut agent = Agent::start(AgentOptions::script(vec![json!({"text": "ok"})]));
    // The agent's scratch directory is the repository; the session works in `work/` inside.
    std::fs::create_dir_all(agent.dir.path().join(".git")).unwrap();
    std::fs::write(agent.dir.path().join("AGENTS.md"), "Prefer small commits.\n").unwrap();
    std::fs::write(agent.workdir.join("AGENTS.md"), "In work/, run `make check`.\n").unwrap();
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "hi");
    let system = agent.model_requests()[0]["system"].as_str().unwrap().to_owned();
    let at = |needle: &str| {
        system.find(needle).unwrap_or_else(|| panic!("{needle:?} missing from:\n{system}"))
    };
    let environment = at("## Environment");
    assert!(system.contains(&format!("- Working directory: {}\n", agent.workdir.display())));
    assert!(system.contains(&format!(
        "- The working directory is in a git repository rooted at {}",
        agent.dir.path().display()
    )));
    assert!(system.contains("- Date (UTC): 20"));
    let plugins = at("## Running commands");
    let general = at("Prefer small commits.");
    let specific = at("In work/, run `make check`.");
    assert!(environment < plugins && plugins < general && general < specific, "{system}");
}

#[test]
fn images_go_to_models_that_take_them_and_become_a_note_for_the_others() {
    let vision = FakeProvider::start(vec![text_answer("a red dot")]);
    let plain = FakeProvider::start(vec![text_answer("no eyes")]);
    let mut options = AgentOptions::script(vec![]);
    options.model_args = Some(Vec::new());
    options.config = Some(format!(
        "model = \"vision\"\n[models.vision]\nbase_url = \"{}\"\nmodel = \"v1\"\nimages = true\n[models.plain]\nbase_url = \"{}\"\nmodel = \"p1\"\n",
        vision.base_url, plain.base_url
    ));
    let mut agent = Agent::start(options);
    let init = agent.initialize(true);
    assert_eq!(init["result"]["agentCapabilities"]["promptCapabilities"]["image"], true);
    let session = agent.new_session();
    let prompt = json!({"sessionId": session, "prompt": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}
    ]});
    assert_eq!(agent.call("session/prompt", prompt.clone())["result"]["stopReason"], "end_turn");
    let content = &vision.received()[0].body["messages"][1]["content"];
    assert_eq!(
        content,
        &json!([
            {"type": "text", "text": "What is this?\n[image 1]"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
        ])
    );
    agent.call(
        "session/set_config_option",
        json!({"sessionId": session, "configId": "model", "value": "plain"}),
    );
    assert_eq!(agent.call("session/prompt", prompt)["result"]["stopReason"], "end_turn");
    let messages = plain.received()[0].body["messages"].clone();
    let text = messages[3]["content"].as_str().unwrap();
    assert!(
        text.starts_with("What is this?\n[image 1]\n[1 image(s) omitted: the model `p1` does not take images here"),
        "{text}"
    );
}

#[test]
fn a_session_whose_model_is_gone_says_which_it_uses_and_uses_what_it_shows() {
    let first = FakeProvider::start(vec![
        text_answer("first, after load"),
        text_answer("first, after resume"),
    ]);
    let second = FakeProvider::start(vec![text_answer("from the second")]);
    // Each with a window of its own, which the context use shows.
    let profile = |name: &str, url: &str| {
        let window = if name == "one" { 64000 } else { 32000 };
        format!(
            "[models.{name}]\nbase_url = \"{url}\"\nmodel = \"m-{name}\"\ncontext_window = {window}\n"
        )
    };
    let both = format!(
        "model = \"one\"\n{}{}",
        profile("one", &first.base_url),
        profile("two", &second.base_url)
    );
    let data = tempfile::tempdir().unwrap();
    let start = |config: &str| {
        let mut options = AgentOptions::script(vec![]);
        options.model_args = Some(Vec::new());
        options.config = Some(config.to_owned());
        options.env = vec![("HOTSH_DATA_DIR".into(), data.path().to_string_lossy().into_owned())];
        Agent::start(options)
    };
    let mut agent = start(&both);
    agent.initialize(true);
    let session = agent.new_session();
    agent.call(
        "session/set_config_option",
        json!({"sessionId": session, "configId": "model", "value": "two"}),
    );
    agent.prompt(&session, "hi");
    assert_eq!(second.received().len(), 1);
    let cwd = agent.workdir.clone();
    assert!(agent.finish().success());

    // A hotsh that no longer offers `two`.
    let only_one = format!("model = \"one\"\n{}", profile("one", &first.base_url));
    for method in ["session/load", "session/resume"] {
        let mut again = start(&only_one);
        again.initialize(true);
        let before = again.received.len();
        let answer =
            again.call(method, json!({"sessionId": session, "cwd": cwd, "mcpServers": []}));
        let option = &answer["result"]["configOptions"][0];
        assert_eq!(option["currentValue"], "one", "{method}: {answer}");
        let listed: Vec<&str> = option["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["value"].as_str().unwrap())
            .collect();
        assert!(listed.contains(&"one"), "{method}: the current value is listed: {listed:?}");
        // The thread says so (waited for; the harness fails the test when it never comes).
        again.wait_for_from(before, |m| {
            m["params"]["update"]["title"]
                .as_str()
                .is_some_and(|t| t == "Model two is not available here: this session uses one")
        });
        // The context use shows the window of the model it uses now, not the one logged.
        let shown = again.wait_for_from(before, |m| {
            m["params"]["update"]["sessionUpdate"] == "usage_update"
                && m["params"]["sessionId"] == session.as_str()
        });
        assert_eq!(again.received[shown]["params"]["update"]["size"], 64000, "{method}");
        if method == "session/resume" {
            // Nothing about the session comes before the answer that names it.
            let answered = again.received[before..]
                .iter()
                .position(|m| m.get("result").is_some() && m.get("method").is_none())
                .unwrap();
            let first_update = again.received[before..]
                .iter()
                .position(|m| m["method"] == "session/update")
                .unwrap();
            assert!(answered < first_update, "{:#?}", &again.received[before..]);
        }
        again.prompt(&session, "still there?");
        assert!(again.finish().success());
    }
    // Each turn went to the model that was shown.
    assert_eq!(first.received().len(), 2);
    assert_eq!(second.received().len(), 1);
}

/// A provider that keeps its connections (as OpenAI's and DeepSeek's servers do over HTTP/1.1)
/// and ends each answer's body with the last chunk of HTTP's chunked coding. The first
/// answer's last chunk comes only when the test says: a server may send `[DONE]` and the end
/// of the body in two writes, which reach hotsh apart.
struct KeptProvider {
    base_url: String,
    /// Each connection as it comes (a clone of the server's end).
    connections: std::sync::mpsc::Receiver<std::net::TcpStream>,
    /// Lets the first answer's body end.
    release: std::sync::mpsc::Sender<()>,
}

impl KeptProvider {
    fn start(answers: Vec<&'static str>) -> Self {
        use std::io::Write as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let base_url = format!("http://{}/v1", listener.local_addr().expect("address"));
        let (connection_to, connections) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let released = std::sync::Arc::new(std::sync::Mutex::new(released));
        let answers = std::sync::Arc::new(std::sync::Mutex::new(answers.into_iter().enumerate()));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let _ = connection_to.send(stream.try_clone().expect("a clone"));
                let (answers, released) = (answers.clone(), released.clone());
                std::thread::spawn(move || {
                    while hotsh_tests::read_request(&mut stream, false).is_some() {
                        let Some((at, text)) = answers.lock().expect("answers").next() else {
                            return;
                        };
                        let chunk = |data: &str| format!("{:x}\r\n{data}\r\n", data.len());
                        let mut head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                                        Transfer-Encoding: chunked\r\n\r\n"
                            .to_owned();
                        head.push_str(&chunk(&delta(json!({"content": text}), Some("stop"))));
                        head.push_str(&chunk("data: [DONE]\n\n"));
                        if stream.write_all(head.as_bytes()).is_err() {
                            return;
                        }
                        if at == 0 {
                            let _ = released.lock().expect("released").recv();
                        }
                        if stream.write_all(b"0\r\n\r\n").is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Self { base_url, connections, release }
    }
}

/// Whether the client closed its end of `connection` (the server's end reads end of file).
fn closed_by_client(connection: &std::net::TcpStream) -> bool {
    connection.set_nonblocking(true).expect("non-blocking");
    let closed = match connection.peek(&mut [0u8]) {
        Ok(0) => true,
        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => false,
        other => panic!("the connection holds something unexpected: {other:?}"),
    };
    connection.set_nonblocking(false).expect("blocking");
    closed
}

/// An agent on `provider` as `openai:test-model` and a session of it, after a first turn (its
/// answer "one"), with the connection that turn came on.
fn after_first_turn(provider: &KeptProvider) -> (Agent, String, std::net::TcpStream) {
    let mut agent = Agent::start(AgentOptions::with_model_at(&provider.base_url));
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "first");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let first = provider.connections.recv_timeout(hotsh_tests::DEADLINE).expect("a connection");
    (agent, session, first)
}

/// The text of every agent message chunk of `session` so far.
fn message_texts(agent: &Agent, session: &str) -> Vec<String> {
    agent
        .updates(session)
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn an_answer_whose_body_ends_after_its_done_keeps_the_connection_for_the_next_request() {
    let provider = KeptProvider::start(vec!["one", "two"]);
    let (mut agent, session, first) = after_first_turn(&provider);
    // The answer is whole at its `[DONE]`, and the turn has ended; its body has not: hotsh
    // still reads it to its end rather than closing a connection the next request can use
    // (closed, the next request would pay a new connection, over TLS a new handshake).
    assert!(
        !closed_by_client(&first),
        "hotsh closed the answer's connection before its body ended"
    );
    provider.release.send(()).expect("the server waits");
    let response = agent.prompt(&session, "second");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(message_texts(&agent, &session), ["one", "two"]);
    // Whichever connection the second request took, the first was never closed by hotsh.
    assert!(!closed_by_client(&first), "hotsh closed the first connection after its body ended");
}

#[test]
fn an_answer_whose_body_never_ends_lets_its_connection_go_and_the_session_goes_on() {
    // The first answer's body never ends (the test never lets it).
    let provider = KeptProvider::start(vec!["one", "two"]);
    let (mut agent, session, first) = after_first_turn(&provider);
    // The next turn does not wait for it (its request takes another connection).
    let response = agent.prompt(&session, "second");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(message_texts(&agent, &session), ["one", "two"]);
    // And hotsh lets the first connection go (after 5 s) rather than hold it for ever.
    eventually("the connection of a body that never ends let go", || closed_by_client(&first));
}
