//! MCP servers end to end: the tests' own server (`mcp-fixture` over stdio, and
//! `HttpServer` on loopback) given in `session/new`; its tools reach the model request, its
//! results the model and the cards; servers that do not exist, hang, crash or break the
//! protocol; two servers with the same tool; a tool list that changes; the cards back on
//! `session/load`; no server left behind by a SIGKILLed hotsh.

use hotsh_tests::mcp_fixture::HttpServer;
use hotsh_tests::{Agent, AgentOptions, call_with, eventually, processes_matching, say};
use serde_json::{Value, json};

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture");

/// A stdio server running the fixture as `name`, starting in `mode` (ok, hang, exit, garbage).
fn stdio(name: &str, mode: &str) -> Value {
    json!({"name": name, "command": FIXTURE, "args": [name, mode], "env": []})
}

/// A name unique to this test run (the fixture's processes are found by it).
fn unique(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

/// Short limits so that failures show quickly; long enough for a loaded machine to start
/// the fixture.
const QUICK: &str =
    "[mcp]\nconnect_timeout_secs = 20\ncall_timeout_secs = 2\nturn_wait_secs = 30\n";

fn agent(responses: Vec<Value>, config: Option<&str>) -> Agent {
    let mut options = AgentOptions::script(responses);
    options.config = config.map(str::to_owned);
    let mut agent = Agent::start(options);
    agent.initialize(true);
    agent
}

fn new_session(agent: &mut Agent, servers: Value) -> String {
    agent.wait_for_stderr("initial plugin scan done");
    let cwd = agent.workdir.to_string_lossy().into_owned();
    let response = agent.call("session/new", json!({"cwd": cwd, "mcpServers": servers}));
    response["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("session/new failed: {response}"))
        .to_owned()
}

/// The tool names offered in each model request so far.
fn offered(agent: &Agent) -> Vec<Vec<String>> {
    agent
        .model_requests()
        .iter()
        .map(|request| {
            request["tools"]
                .as_array()
                .expect("tools")
                .iter()
                .map(|t| t["name"].as_str().expect("name").to_owned())
                .collect()
        })
        .collect()
}

/// Cards the host sent about servers: (title, status, text).
fn server_cards(agent: &Agent, session: &str) -> Vec<(String, String, String)> {
    agent
        .updates(session)
        .iter()
        .filter(|u| {
            u["sessionUpdate"] == "tool_call"
                && u["title"].as_str().is_some_and(|t| t.starts_with("MCP server "))
        })
        .map(|u| {
            (
                u["title"].as_str().unwrap_or_default().to_owned(),
                u["status"].as_str().unwrap_or_default().to_owned(),
                u["content"][0]["content"]["text"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn text_of(update: &Value) -> &str {
    update["content"][0]["content"]["text"].as_str().unwrap_or_default()
}

#[test]
fn a_stdio_servers_tools_reach_the_model_and_their_results_the_model_and_the_cards() {
    let data = tempfile::tempdir().unwrap();
    let name = unique("docs");
    let tool = |t: &str| format!("mcp__{name}__{t}");
    let mut options = AgentOptions::script(vec![
        call_with(&tool("echo"), json!({"text": "hi"})),
        call_with(&tool("env"), json!({"name": "FROM_CLIENT"})),
        call_with(&tool("env"), json!({"name": "OPENAI_API_KEY"})),
        call_with(&tool("rich"), json!({})),
        call_with(&tool("oops"), json!({})),
        call_with(&tool("echo"), json!([1])),
        say("done"),
    ]);
    options.env = vec![
        ("HOTSH_DATA_DIR".into(), data.path().to_string_lossy().into_owned()),
        ("OPENAI_API_KEY".into(), "sk-secret".into()),
    ];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let mut server = stdio(&name, "ok");
    server["env"] = json!([{"name": "FROM_CLIENT", "value": "given by the client"}]);
    let session = new_session(&mut agent, json!([server]));
    let response = agent.prompt(&session, "use the server");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    // The tools, named in the server's namespace, with their descriptions and schemas.
    let requests = agent.model_requests();
    let echo = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == tool("echo"))
        .unwrap_or_else(|| panic!("no echo tool offered: {}", requests[0]["tools"]))
        .clone();
    assert_eq!(echo["description"], "Says the text back.");
    assert_eq!(echo["input_schema"]["properties"]["text"]["type"], "string");

    let results = agent.tool_results();
    assert_eq!(results[0], (format!("{name} says: hi"), false));
    assert_eq!(results[1], ("given by the client".to_owned(), false));
    // The host's secrets are scrubbed from a server's environment like from commands'.
    assert_eq!(results[2], ("(unset)".to_owned(), false));
    expect_test::expect![[r#"
        a picture:
        [image: image/png, 8 bytes; not shown to the model]
        [resource file:///notes.txt]
        the notes
        [resource link: file:///big.bin (big.bin)]"#]]
    .assert_eq(&results[3].0);
    assert_eq!(results[4], ("it went wrong".to_owned(), true));
    assert_eq!(results[5], ("the arguments must be a JSON object".to_owned(), true));

    // The cards: titled with the server and the tool's title, kind read for a read-only tool.
    let updates = agent.updates(&session);
    let opened: Vec<&Value> =
        updates.iter().filter(|u| u["sessionUpdate"] == "tool_call").collect();
    assert_eq!(opened[0]["title"], format!("{name}: Echo"));
    assert_eq!(opened[0]["kind"], "read");
    assert_eq!(opened[1]["title"], format!("{name}: env"));
    // `other` is ACP's default kind, left out of the message.
    assert!(opened[1].get("kind").is_none_or(|kind| kind == "other"), "{}", opened[1]);
    let finals = agent.final_updates(&session);
    assert_eq!(finals.len(), 6);
    assert_eq!(finals[0]["status"], "completed");
    assert_eq!(text_of(&finals[0]), format!("{name} says: hi"));
    assert_eq!(finals[3]["rawOutput"]["content"][1]["data"], "<8 bytes>");
    assert_eq!(finals[4]["status"], "failed");
    assert_eq!(text_of(&finals[4]), "it went wrong");
    assert_eq!(finals[5]["status"], "failed");

    // After a restart the thread comes back with the same cards, with no server needed.
    let cwd = agent.workdir.clone();
    agent.kill9();
    let mut options = AgentOptions::script(vec![say("back")]);
    options.env = vec![("HOTSH_DATA_DIR".into(), data.path().to_string_lossy().into_owned())];
    let mut again = Agent::start(options);
    again.initialize(true);
    again.wait_for_stderr("initial plugin scan done");
    let loaded =
        again.call("session/load", json!({"sessionId": session, "cwd": cwd, "mcpServers": []}));
    assert!(loaded.get("result").is_some(), "{loaded}");
    let replayed = again.final_updates(&session);
    assert_eq!(replayed.len(), finals.len());
    for (replayed, live) in replayed.iter().zip(&finals) {
        for key in ["title", "status", "content", "rawOutput"] {
            assert_eq!(replayed[key], live[key], "{key}");
        }
    }
    // The model's history has the results too.
    again.prompt(&session, "and now?");
    let tools: Vec<(String, bool)> = again.tool_results();
    assert_eq!(tools[0], (format!("{name} says: hi"), false));
}

#[test]
fn a_loaded_session_connects_the_servers_its_client_gives() {
    let data = tempfile::tempdir().unwrap();
    let sharing = |responses: Vec<Value>| {
        let mut options = AgentOptions::script(responses);
        options.env = vec![("HOTSH_DATA_DIR".into(), data.path().to_string_lossy().into_owned())];
        options
    };
    let mut agent = Agent::start(sharing(vec![say("no servers yet")]));
    agent.initialize(true);
    let session = new_session(&mut agent, json!([]));
    agent.prompt(&session, "hello");
    let cwd = agent.workdir.clone();
    agent.kill9();

    let name = unique("later");
    let mut again = Agent::start(sharing(vec![
        call_with(&format!("mcp__{name}__echo"), json!({"text": "loaded"})),
        say("ok"),
    ]));
    again.initialize(true);
    again.wait_for_stderr("initial plugin scan done");
    let loaded = again.call(
        "session/load",
        json!({"sessionId": session, "cwd": cwd, "mcpServers": [stdio(&name, "ok")]}),
    );
    assert!(loaded.get("result").is_some(), "{loaded}");
    again.prompt(&session, "use it");
    assert_eq!(again.last_tool_result(), (format!("{name} says: loaded"), false));
}

#[test]
fn cancelling_a_turn_during_a_call_tells_the_server_and_keeps_it() {
    let name = unique("patient");
    let mut agent = agent(
        vec![
            call_with(&format!("mcp__{name}__hang"), json!({})),
            call_with(&format!("mcp__{name}__cancelled"), json!({})),
            say("ok"),
        ],
        None,
    );
    let session = new_session(&mut agent, json!([stdio(&name, "ok")]));
    let id = agent.start_prompt(&session, "wait");
    agent.wait_for(|m| {
        m["params"]["update"]["sessionUpdate"] == "tool_call"
            && m["params"]["update"]["title"].as_str().is_some_and(|t| t.ends_with(": hang"))
    });
    agent.notify("session/cancel", json!({"sessionId": session}));
    let response = agent.response(id);
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    let finals = agent.final_updates(&session);
    assert_eq!(finals[0]["status"], "failed");
    assert!(
        text_of(&finals[0]).starts_with("[aborted: the user cancelled the turn"),
        "{}",
        finals[0]
    );
    // The server was told, and not dropped: the next prompt calls it at once.
    agent.prompt(&session, "again");
    assert_eq!(agent.last_tool_result(), ("1".to_owned(), false));
    assert!(server_cards(&agent, &session).is_empty());
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh run")]
fn hotsh_run_uses_the_servers_of_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("script.json");
    let responses = json!({"responses": [
        call_with("mcp__conf__echo", json!({"text": "from the config"})),
        say("The server answered."),
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    let config = tmp.path().join("config.toml");
    std::fs::write(
        &config,
        format!("[mcp.servers.conf]\ncommand = {FIXTURE:?}\nargs = [\"conf\"]\n"),
    )
    .unwrap();
    let output = std::process::Command::new(hotsh_tests::hotsh_binary())
        .arg("run")
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("--config")
        .arg(&config)
        .arg("--cwd")
        .arg(dir.path())
        .arg("ask the server")
        .env("TMPDIR", tmp.path())
        .env("HOTSH_DATA_DIR", tmp.path().join("data"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("conf: Echo"), "{stdout}");
    assert!(stdout.contains("conf says: from the config"), "{stdout}");

    // A configured server needs a command or a URL.
    std::fs::write(&config, "[mcp.servers.broken]\nargs = []\n").unwrap();
    let output = std::process::Command::new(hotsh_tests::hotsh_binary())
        .args(["run", "--config"])
        .arg(&config)
        .arg("hello")
        .env("HOTSH_DATA_DIR", tmp.path().join("data"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("mcp.servers.broken needs either `command` or `url`"), "{stderr}");
}

#[test]
fn an_http_server_works_like_a_stdio_one_with_the_clients_headers() {
    let server = HttpServer::start("web");
    let mut agent =
        agent(vec![call_with("mcp__web__echo", json!({"text": "over http"})), say("ok")], None);
    let session = new_session(
        &mut agent,
        json!([{"type": "http", "name": "web", "url": server.url, "headers": [{"name": "x-fixture-token", "value": "t0ken"}]}]),
    );
    agent.prompt(&session, "go");
    assert_eq!(agent.last_tool_result(), ("web says: over http".to_owned(), false));
    let tokens = server.tokens.lock().unwrap().clone();
    assert!(!tokens.is_empty() && tokens.iter().all(|t| t == "t0ken"), "{tokens:?}");
    let finals = agent.final_updates(&session);
    assert_eq!(finals[0]["status"], "completed");
    assert_eq!(text_of(&finals[0]), "web says: over http");
}

#[test]
fn an_http_server_that_hangs_on_a_call_is_dropped_and_reached_again_by_the_next_prompt() {
    let server = HttpServer::start("slowweb");
    let mut agent = agent(
        vec![
            call_with("mcp__slowweb__hang", json!({})),
            say("first"),
            call_with("mcp__slowweb__echo", json!({"text": "back"})),
            say("second"),
        ],
        Some(QUICK),
    );
    let session = new_session(
        &mut agent,
        json!([{"type": "http", "name": "slowweb", "url": server.url, "headers": []}]),
    );
    agent.prompt(&session, "go");
    let (text, is_error) = agent.last_tool_result();
    assert!(is_error);
    assert!(text.contains("did not answer a call of `hang` within 2 s"), "{text}");
    agent.prompt(&session, "again");
    assert_eq!(agent.last_tool_result(), ("slowweb says: back".to_owned(), false));
    let cards = server_cards(&agent, &session);
    let titles: Vec<&str> = cards.iter().map(|(title, _, _)| title.as_str()).collect();
    assert_eq!(titles, ["MCP server slowweb is unavailable", "MCP server slowweb connected again"]);
}

#[test]
fn the_agent_advertises_stdio_and_http_servers() {
    let mut agent = Agent::start(AgentOptions::script(vec![]));
    let init = agent.initialize(true);
    assert_eq!(init["result"]["agentCapabilities"]["mcpCapabilities"]["http"], true, "{init}");
    assert_eq!(init["result"]["agentCapabilities"]["mcpCapabilities"]["sse"], false, "{init}");
}

#[test]
fn servers_that_fail_to_start_leave_one_card_each_and_the_session_goes_on() {
    let good = unique("good");
    let mut agent = agent(
        vec![
            call_with(&format!("mcp__{good}__echo"), json!({"text": "still here"})),
            call_with("mcp__ghost__echo", json!({})),
            say("first"),
            say("second"),
        ],
        Some(QUICK),
    );
    let session = new_session(
        &mut agent,
        json!([
            {"name": "ghost", "command": "/nonexistent/mcp-server", "args": [], "env": []},
            stdio("refuser", "exit"),
            stdio("babbler", "garbage"),
            {"type": "sse", "name": "old", "url": "http://127.0.0.1:1/sse", "headers": []},
            {"type": "http", "name": "offline", "url": "http://127.0.0.1:1/mcp", "headers": []},
            stdio(&good, "ok"),
        ]),
    );
    let response = agent.prompt(&session, "go");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let results = agent.tool_results();
    assert_eq!(results[0], (format!("{good} says: still here"), false));
    assert!(results[1].1, "{results:?}");
    assert!(results[1].0.starts_with("MCP server `ghost` is unavailable ("), "{}", results[1].0);

    let cards = server_cards(&agent, &session);
    let card = |server: &str| {
        cards
            .iter()
            .find(|(title, _, _)| title == &format!("MCP server {server} is unavailable"))
            .unwrap_or_else(|| panic!("no card for {server}: {cards:?}"))
            .clone()
    };
    let (_, status, text) = card("ghost");
    assert_eq!(status, "failed");
    assert!(
        text.contains("it exited (exit code 127)") && text.contains("/nonexistent/mcp-server"),
        "{text}"
    );
    let (_, _, text) = card("refuser");
    assert!(
        text.contains("it exited (exit code 2)") && text.contains("refusing to start"),
        "{text}"
    );
    let (_, _, text) = card("babbler");
    assert!(
        text.contains("not JSON-RPC on stdout") && text.contains("`this is not json {`"),
        "{text}"
    );
    let (_, _, text) = card("old");
    assert!(text.contains("SSE transport"), "{text}");
    assert!(text.contains("the next prompt tries it again"), "{text}");
    let (_, _, text) = card("offline");
    assert!(text.contains("cannot connect to http://127.0.0.1:1/mcp"), "{text}");
    assert_eq!(cards.len(), 5, "{cards:?}");

    // The next prompt tries them again; the same failures are not shown twice.
    agent.prompt(&session, "again");
    eventually("the retries to fail", || {
        agent.stderr().matches("MCP server unavailable").count() >= 10
    });
    assert_eq!(server_cards(&agent, &session).len(), 5);
}

#[test]
fn a_server_that_hangs_is_stopped_after_its_timeout_and_started_again_by_the_next_prompt() {
    let name = unique("sleepy");
    let tool = |t: &str| format!("mcp__{name}__{t}");
    let mut agent = agent(
        vec![
            call_with(&tool("pid"), json!({})),
            call_with(&tool("hang"), json!({})),
            call_with(&tool("echo"), json!({"text": "same turn"})),
            say("first"),
            call_with(&tool("echo"), json!({"text": "awake"})),
            say("second"),
        ],
        Some(QUICK),
    );
    let stuck = unique("stuck");
    let session = new_session(&mut agent, json!([stdio(&name, "ok"), stdio(&stuck, "hang")]));
    agent.prompt(&session, "go");
    let results = agent.tool_results();
    let pid: u32 = results[0].0.parse().expect("a pid");
    assert!(results[1].1);
    assert!(
        results[1].0.contains("did not answer a call of `hang` within 2 s, so it was stopped"),
        "{}",
        results[1].0
    );
    assert!(results[2].1, "{results:?}");
    assert!(results[2].0.contains("is unavailable"), "{}", results[2].0);
    eventually("the hung server to be gone", || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    });
    let cards = server_cards(&agent, &session);
    assert!(
        cards.iter().any(|(t, s, text)| t == &format!("MCP server {stuck} is unavailable")
            && s == "failed"
            && text.contains("did not finish starting within 20 s")),
        "{cards:?}"
    );
    assert!(
        cards.iter().any(|(t, _, _)| t == &format!("MCP server {name} is unavailable")),
        "{cards:?}"
    );

    agent.prompt(&session, "again");
    assert_eq!(agent.last_tool_result(), (format!("{name} says: awake"), false));
    let cards = server_cards(&agent, &session);
    assert!(cards.iter().any(|(t, s, _)| t == &format!("MCP server {name} connected again") && s == "completed"), "{cards:?}");
}

#[test]
fn a_server_that_crashes_mid_call_is_reported_with_its_last_words() {
    let name = unique("fragile");
    let mut agent = agent(
        vec![
            call_with(&format!("mcp__{name}__crash"), json!({})),
            say("ok"),
            call_with(&format!("mcp__{name}__echo"), json!({"text": "back"})),
            say("ok"),
        ],
        Some(QUICK),
    );
    let session = new_session(&mut agent, json!([stdio(&name, "ok")]));
    agent.prompt(&session, "go");
    let (text, is_error) = agent.last_tool_result();
    assert!(is_error);
    assert!(text.starts_with(&format!("MCP server `{name}`: ")), "{text}");
    let cards = server_cards(&agent, &session);
    assert_eq!(cards.len(), 1, "{cards:?}");
    assert!(
        cards[0].2.contains("exit code 3") && cards[0].2.contains("crashing on purpose"),
        "{cards:?}"
    );
    agent.prompt(&session, "again");
    assert_eq!(agent.last_tool_result(), (format!("{name} says: back"), false));
}

#[test]
fn a_server_answering_garbage_to_a_call_fails_the_call_and_not_the_session() {
    let name = unique("garbled");
    let mut agent =
        agent(vec![call_with(&format!("mcp__{name}__garbage"), json!({})), say("ok")], Some(QUICK));
    let session = new_session(&mut agent, json!([stdio(&name, "ok")]));
    let response = agent.prompt(&session, "go");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let (text, is_error) = agent.last_tool_result();
    assert!(is_error, "{text}");
    assert!(text.starts_with(&format!("MCP server `{name}`")), "{text}");
    assert!(text.contains("not JSON-RPC on stdout"), "{text}");
}

#[test]
fn two_servers_with_the_same_tool_and_even_the_same_name_are_told_apart() {
    let mut agent = agent(
        vec![
            call_with("mcp__alpha__echo", json!({"text": "1"})),
            call_with("mcp__beta__echo", json!({"text": "2"})),
            call_with("mcp__alpha_2__echo", json!({"text": "3"})),
            call_with("mcp__alpha_down__echo", json!({"text": "4"})),
            say("ok"),
        ],
        None,
    );
    let mut twin = stdio("alpha-twin", "ok");
    twin["name"] = json!("alpha");
    // `alpha__down`'s tools are `mcp__alpha_down__…`: the first `__` ends a server's name.
    let down = stdio("alpha__down", "exit");
    let session =
        new_session(&mut agent, json!([stdio("alpha", "ok"), stdio("beta", "ok"), twin, down]));
    agent.prompt(&session, "go");
    let results: Vec<String> = agent.tool_results().into_iter().map(|(text, _)| text).collect();
    assert_eq!(results[..3], ["alpha says: 1", "beta says: 2", "alpha-twin says: 3"]);
    assert!(results[3].starts_with("MCP server `alpha__down` is unavailable ("), "{}", results[3]);
    let names = &offered(&agent)[0];
    for name in ["mcp__alpha__echo", "mcp__beta__echo", "mcp__alpha_2__echo"] {
        assert!(names.contains(&name.to_owned()), "{names:?}");
    }
}

#[test]
fn a_changed_tool_list_reaches_the_next_model_request() {
    let mut agent = agent(
        vec![
            call_with("mcp__grower__grow", json!({})),
            say("grown"),
            call_with("mcp__grower__late", json!({})),
            say("ok"),
        ],
        None,
    );
    let session = new_session(&mut agent, json!([stdio("grower", "ok")]));
    agent.prompt(&session, "grow");
    // The notification is handled apart from the call's answer; the next request after it
    // has the new tool.
    agent.wait_for_stderr("MCP server says its tools changed");
    agent.prompt(&session, "use it");
    let offered = offered(&agent);
    assert!(!offered[0].contains(&"mcp__grower__late".to_owned()));
    assert!(offered[2].contains(&"mcp__grower__late".to_owned()), "{:?}", offered[2]);
    assert_eq!(agent.last_tool_result(), ("the late tool answers".to_owned(), false));
}

#[test]
fn plan_mode_offers_only_the_tools_a_server_marks_read_only() {
    let mut agent = agent(vec![say("planning")], None);
    let session = new_session(&mut agent, json!([stdio("planner", "ok")]));
    let answer = agent.call("session/set_mode", json!({"sessionId": session, "modeId": "plan"}));
    assert!(answer.get("result").is_some(), "{answer}");
    agent.prompt(&session, "plan");
    let server_tools: Vec<String> =
        offered(&agent)[0].iter().filter(|n| n.starts_with("mcp__")).cloned().collect();
    assert_eq!(server_tools, ["mcp__planner__echo"]);
}

#[test]
fn servers_end_with_their_session_and_with_a_sigkilled_hotsh() {
    let (kept, closed) = (unique("kept"), unique("closed"));
    let mut agent = agent(vec![say("a"), say("b")], None);
    let first = new_session(&mut agent, json!([stdio(&kept, "ok")]));
    let second = new_session(&mut agent, json!([stdio(&closed, "ok")]));
    agent.prompt(&first, "start");
    agent.prompt(&second, "start");
    // The server (and its shim, whose arguments name it too).
    assert!(!processes_matching(&kept).is_empty());
    assert!(!processes_matching(&closed).is_empty());
    let answer = agent.call("session/close", json!({"sessionId": second}));
    assert!(answer.get("result").is_some(), "{answer}");
    eventually("the closed session's server to stop", || processes_matching(&closed).is_empty());
    assert!(!processes_matching(&kept).is_empty());
    agent.kill9();
    eventually("the server to die with hotsh", || processes_matching(&kept).is_empty());

    // A hotsh that ends normally (its client closes stdin) stops its servers too.
    let ending = unique("ending");
    let mut agent = self::agent(vec![say("a")], None);
    let session = new_session(&mut agent, json!([stdio(&ending, "ok")]));
    agent.prompt(&session, "start");
    assert!(!processes_matching(&ending).is_empty());
    assert!(agent.finish().success());
    eventually("the server to stop with hotsh", || processes_matching(&ending).is_empty());
}

#[test]
fn tools_whose_names_collide_once_made_safe_get_unique_names_and_each_reaches_its_own() {
    let name = unique("twins");
    let prefix = format!("mcp__{name}__");
    let twins = |agent: &Agent| -> Vec<String> {
        offered(agent)[0]
            .iter()
            .filter(|n| {
                n.starts_with(&format!("{prefix}echo_")) || n.starts_with(&format!("{prefix}echo."))
            })
            .cloned()
            .collect()
    };
    let mut first = agent(vec![], Some(QUICK));
    let session = new_session(&mut first, json!([stdio(&name, "colliding")]));
    first.prompt(&session, "list");
    let names = twins(&first);
    assert_eq!(names.len(), 3, "{names:?}");
    let distinct: std::collections::HashSet<&String> = names.iter().collect();
    assert_eq!(distinct.len(), 3, "every name offered is unique: {names:?}");
    // The one whose name needed no change keeps it; the others end with a hash of theirs.
    let plain = format!("{prefix}echo_twice");
    assert!(names.contains(&plain), "{names:?}");
    assert_eq!(names.iter().filter(|n| n.len() == plain.len() + 9).count(), 2, "{names:?}");

    // Another session gets the very same names, and each name calls its own tool.
    let calls: Vec<Value> = names.iter().map(|n| json!({"name": n, "arguments": {}})).collect();
    let mut again = agent(vec![json!({"tool_calls": calls}), say("done")], Some(QUICK));
    let session = new_session(&mut again, json!([stdio(&name, "colliding")]));
    again.prompt(&session, "call them");
    assert_eq!(twins(&again), names, "the same names in another session");
    let texts: Vec<String> = again.tool_results().into_iter().map(|(text, _)| text).collect();
    let mut ran: Vec<&str> = texts.iter().filter_map(|t| t.split('`').nth(1)).collect();
    ran.sort_unstable();
    assert_eq!(ran, ["echo twice", "echo.twice", "echo_twice"], "{texts:?}");
}

#[test]
fn two_servers_never_give_the_model_one_tool_name() {
    // `x` offers `down__echo` and `x__down` offers `echo`: one name for both, once.
    let name = unique("clash");
    let mut listing = agent(vec![], Some(QUICK));
    let down = format!("{name}__down");
    let session = new_session(&mut listing, json!([stdio(&name, "colliding"), stdio(&down, "ok")]));
    listing.prompt(&session, "list");
    let names = &offered(&listing)[0];
    let distinct: std::collections::HashSet<&String> = names.iter().collect();
    assert_eq!(distinct.len(), names.len(), "a name offered twice: {names:?}");
    let first = format!("mcp__{name}__down__echo");
    let second = format!("mcp__{}_down__echo", name.replace("__", "_"));
    assert!(names.contains(&first) && names.contains(&second), "{names:?}");
    let calls = vec![
        json!({"tool_calls": [
            {"name": first, "arguments": {}},
            {"name": second, "arguments": {"text": "2"}}
        ]}),
        say("done"),
    ];
    let mut again = agent(calls, Some(QUICK));
    let session = new_session(&mut again, json!([stdio(&name, "colliding"), stdio(&down, "ok")]));
    again.prompt(&session, "call both");
    let texts: Vec<String> = again.tool_results().into_iter().map(|(text, _)| text).collect();
    assert!(texts[0].contains("`down__echo`"), "{texts:?}");
    assert_eq!(texts[1], format!("{down} says: 2"), "{texts:?}");
}
