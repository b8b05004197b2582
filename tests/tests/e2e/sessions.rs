//! Sessions that last: the event log, `session/load` after the agent died, list, resume,
//! close, `hotsh sessions`, and what happens with broken logs.

use expect_test::expect;
use hotsh_tests::{
    Agent, AgentOptions, bash_call, eventually, is_state_update, processes_matching, say,
};
use serde_json::{Value, json};

/// Options for an agent that uses `data_dir` for its sessions.
pub(crate) fn sharing(data_dir: &std::path::Path, responses: Vec<Value>) -> AgentOptions {
    let mut options = AgentOptions::script(responses);
    options.env = vec![("HOTSH_DATA_DIR".into(), data_dir.to_string_lossy().into_owned())];
    options
}

/// Loads `session` (cwd `cwd`) and returns the updates that came before the answer, and the
/// answer.
fn load(agent: &mut Agent, session: &str, cwd: &std::path::Path) -> (Vec<Value>, Value) {
    let (updates, answer) = agent.load(session, cwd);
    (updates.into_iter().filter(|u| !is_state_update(u)).collect(), answer)
}

/// One line per update: what a reader of a thread cares about, ids and paths normalised.
fn outline(updates: &[Value]) -> String {
    let mut lines = Vec::new();
    for u in updates {
        let kind = u["sessionUpdate"].as_str().unwrap_or("?");
        let text = u["content"]["text"].as_str().map(|t| format!(" {t:?}")).unwrap_or_default();
        let mut line = format!("{kind}{text}");
        if let Some(id) = u["toolCallId"].as_str() {
            line.push_str(&format!(" {id}"));
        }
        if let Some(title) = u["title"].as_str() {
            line.push_str(&format!(" title={title:?}"));
        }
        if let Some(status) = u["status"].as_str() {
            line.push_str(&format!(" status={status}"));
        }
        for key in ["terminal_info", "terminal_output", "terminal_exit"] {
            if let Some(meta) = u["_meta"].get(key) {
                let detail = match key {
                    "terminal_output" => format!("{:?}", meta["data"].as_str().unwrap_or("")),
                    "terminal_exit" => {
                        format!("code={} signal={}", meta["exit_code"], meta["signal"])
                    }
                    _ => String::new(),
                };
                line.push_str(&format!(" {key} {detail}"));
            }
        }
        if let Some(content) = u["content"].as_array() {
            for item in content {
                if let Some(text) = item["content"]["text"].as_str() {
                    let first = text.lines().next().unwrap_or("");
                    line.push_str(&format!(" content={first:?}"));
                }
            }
        }
        lines.push(line);
    }
    lines.join("\n")
}

/// Runs the scenario of the issue in a first agent and kills it: text, a thought, a command
/// with output and a non-zero exit, a cancelled command, a background task. Returns the first
/// agent (killed), the session id and what its client saw.
fn live_session(data_dir: &std::path::Path, terminal_output: bool) -> (Agent, String, Vec<Value>) {
    // Markers of its own per variant: the two run in parallel.
    let (sleep, task) = if terminal_output {
        ("sleep 30.0901", "sleep 1000.0902")
    } else {
        ("sleep 30.0911", "sleep 1000.0912")
    };
    let responses = vec![
        json!({"reasoning": "let me think", "text": "Hello.", "tool_calls": [
            {"name": "bash", "arguments": {"command": "printf 'out\\n'; exit 3"}}
        ]}),
        say("That failed with 3."),
        // Cancelled while it runs: the turn ends without asking the model again.
        bash_call(sleep),
        json!({"tool_calls": [{"name": "bash", "arguments": {
            "command": format!("echo bg-started; {task}"), "run_in_background": true}}]}),
        say("It runs in the background."),
    ];
    let mut agent = Agent::start(sharing(data_dir, responses));
    agent.initialize(terminal_output);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "first")["result"]["stopReason"], "end_turn");
    let second = agent.start_prompt(&session, "second");
    eventually("the sleep to run", || !processes_matching(sleep).is_empty());
    agent.notify("session/cancel", json!({"sessionId": session}));
    assert_eq!(agent.response(second)["result"]["stopReason"], "cancelled");
    assert_eq!(agent.prompt(&session, "third")["result"]["stopReason"], "end_turn");
    eventually("the task to run", || !processes_matching(task).is_empty());
    let live = agent.updates(&session);
    agent.kill9();
    eventually("the task to die with its agent", || processes_matching(task).is_empty());
    (agent, session, live)
}

fn replay_after_sigkill(terminal_output: bool) -> (String, Vec<Value>, Agent) {
    let data = tempfile::tempdir().unwrap();
    let (first, session, live) = live_session(data.path(), terminal_output);
    let mut second = Agent::start(sharing(data.path(), vec![say("Welcome back.")]));
    second.initialize(terminal_output);
    second.wait_for_stderr("initial plugin scan done");
    let (replayed, answer) = load(&mut second, &session, &first.workdir);
    assert!(answer.get("result").is_some(), "{answer}");

    // What the client saw live comes back exactly, in order, with the prompts shown again;
    // then the task that died with its agent has its card closed.
    let shown: Vec<Value> =
        replayed.iter().filter(|u| u["sessionUpdate"] != "user_message_chunk").cloned().collect();
    let (thread, after) = shown.split_at(live.len());
    assert_eq!(thread, live.as_slice(), "the replay differs from what the client saw live");
    assert_eq!(after.len(), 1, "{after:#?}");
    assert_eq!(after[0]["status"], "failed");
    let prompts: Vec<&str> = replayed
        .iter()
        .filter(|u| u["sessionUpdate"] == "user_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(prompts, ["first", "second", "third"]);

    // The conversation goes on, in the new process, with the whole history and the notice.
    assert_eq!(second.prompt(&session, "fourth")["result"]["stopReason"], "end_turn");
    let request = second.model_requests().pop().unwrap();
    let messages = request["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
            "tool",
            "user",
            "assistant",
            "tool",
            "assistant",
            "notice",
            "user"
        ]
    );
    assert_eq!(messages[2]["text"], "out\n[exit code: 3]");
    assert!(
        messages[6]["text"].as_str().unwrap().contains("[aborted: the user cancelled the turn]")
    );
    let notice = messages[11]["text"].as_str().unwrap();
    assert!(
        notice.starts_with("[background task bash-1 `echo bg-started; sleep 1000.09")
            && notice.contains("` ended when the agent that ran it went away"),
        "{notice}"
    );
    drop(first);
    let _keep = data;
    (outline(&replayed), replayed, second)
}

#[test]
fn a_session_comes_back_exactly_after_sigkill_with_terminal_cards() {
    let (outline, _, _) = replay_after_sigkill(true);
    expect![[r#"
        user_message_chunk "first"
        agent_thought_chunk "let me think"
        agent_message_chunk "Hello."
        tool_call call-1 title="printf 'out\\n'; exit 3" status=in_progress terminal_info 
        tool_call_update call-1 terminal_output "out\n"
        tool_call_update call-1 status=failed terminal_exit code=3 signal=null
        agent_message_chunk "That failed with 3."
        user_message_chunk "second"
        tool_call call-2 title="sleep 30.0901" status=in_progress terminal_info 
        tool_call_update call-2 status=failed terminal_exit code=null signal="SIGTERM"
        user_message_chunk "third"
        tool_call call-3 title="Start in the background: echo bg-started; sleep 1000.0902" status=in_progress
        tool_call_update call-3 title="Background task bash-1: echo bg-started; sleep 1000.0902" status=in_progress content="Running; full output: <path>"
        agent_message_chunk "It runs in the background."
        tool_call_update call-3 title="Background task bash-1: echo bg-started; sleep 1000.0902" status=failed content="bash-1 ended when the agent that ran it went away.""#]]
    .assert_eq(&normalise_paths(&outline));
}

#[test]
fn a_session_comes_back_exactly_after_sigkill_as_console_blocks() {
    let (outline, replayed, _) = replay_after_sigkill(false);
    assert!(!outline.contains("terminal_"), "{outline}");
    let closed =
        replayed.iter().find(|u| u["toolCallId"] == "call-1" && u["status"] == "failed").unwrap();
    assert_eq!(
        closed["content"][0]["content"]["text"],
        "```console\nout\n```\n\nExited with code 3."
    );
    let cancelled =
        replayed.iter().find(|u| u["toolCallId"] == "call-2" && u["status"] == "failed").unwrap();
    assert_eq!(
        cancelled["content"][0]["content"]["text"],
        "Stopped: the user cancelled the turn (SIGTERM)."
    );
}

/// Replaces absolute temp paths with `<path>`.
fn normalise_paths(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("output: /") {
            Some(at) => {
                let end = line[at..].find('"').map_or(line.len(), |e| at + e);
                format!("{}output: <path>{}", &line[..at], &line[end..])
            }
            None => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A session with one prompt answered, written by an agent that is then closed cleanly.
fn saved_session(data_dir: &std::path::Path, prompt: &str) -> (Agent, String) {
    let mut agent = Agent::start(sharing(data_dir, vec![say("answered")]));
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, prompt)["result"]["stopReason"], "end_turn");
    (agent, session)
}

fn log_path(data_dir: &std::path::Path, session: &str) -> std::path::PathBuf {
    data_dir.join("sessions").join(format!("{session}.jsonl"))
}

#[test]
fn a_torn_last_line_is_dropped_and_the_rest_loads() {
    let data = tempfile::tempdir().unwrap();
    let (first, session) = saved_session(data.path(), "before the crash");
    assert!(first.finish().success());
    let path = log_path(data.path(), &session);
    let mut log = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut log, b"{\"v\":1,\"seq\":99,\"type\":\"agent_te").unwrap();
    drop(log);

    let mut agent = Agent::start(sharing(data.path(), vec![say("after")]));
    agent.initialize(true);
    let workdir = agent.workdir.clone();
    let (updates, answer) = load(&mut agent, &session, &workdir);
    assert!(answer.get("result").is_some(), "{answer}");
    let texts: Vec<&str> = updates.iter().filter_map(|u| u["content"]["text"].as_str()).collect();
    assert_eq!(texts, ["before the crash", "answered"]);
    agent.wait_for_stderr("dropped a torn last line of a session log");
    // The torn bytes are gone; new records follow the last complete one.
    assert_eq!(agent.prompt(&session, "again")["result"]["stopReason"], "end_turn");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("agent_te\"") && !text.contains("\"seq\":99"), "{text}");
    for line in text.lines() {
        serde_json::from_str::<Value>(line).unwrap();
    }
}

/// A load streams the thread as the log is read: a log damaged far from its start shows the
/// client the thread before the damage, then is refused naming the line; nothing of it is
/// left open, and the log mended loads whole and goes on.
#[test]
fn a_log_damaged_part_way_shows_what_comes_before_then_is_refused_and_loads_once_mended() {
    const TURNS: usize = 80;
    let data = tempfile::tempdir().unwrap();
    let answers = (0..TURNS).map(|turn| say(&format!("answer {turn}"))).collect();
    let mut first = Agent::start(sharing(data.path(), answers));
    first.initialize(true);
    let session = first.new_session();
    for turn in 0..TURNS {
        let answer = first.prompt(&session, &format!("prompt {turn}"));
        assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    }
    assert!(first.finish().success());
    let path = log_path(data.path(), &session);
    let whole = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = whole.lines().collect();
    // The damage: the prompt record of the last turn but five.
    let damaged_at = lines
        .iter()
        .rposition(|l| l.contains(&format!("\"text\":\"prompt {}\"", TURNS - 5)))
        .unwrap();
    assert!(damaged_at > 256, "the log is long enough for parts to stream: {damaged_at}");
    let mut damaged = lines.clone();
    damaged[damaged_at] = "not json at all";
    std::fs::write(&path, damaged.join("\n") + "\n").unwrap();

    let mut agent = Agent::start(sharing(data.path(), vec![say("after")]));
    agent.initialize(true);
    let workdir = agent.workdir.clone();
    let (shown, answer) = load(&mut agent, &session, &workdir);
    let message = answer["error"]["message"].as_str().unwrap();
    let line = format!("is damaged at line {}: not JSON", damaged_at + 1);
    assert!(message.contains(&line), "{message}");
    let texts: Vec<&str> = shown.iter().filter_map(|u| u["content"]["text"].as_str()).collect();
    // Shown in order from the start, and nothing from the damage on.
    let thread: Vec<String> =
        (0..TURNS).flat_map(|t| [format!("prompt {t}"), format!("answer {t}")]).collect();
    assert!(texts.len() >= 2 && texts.len() <= 2 * (TURNS - 5), "{texts:?}");
    assert_eq!(texts, thread[..texts.len()], "{texts:?}");

    std::fs::write(&path, &whole).unwrap();
    let (shown, answer) = load(&mut agent, &session, &workdir);
    assert!(answer.get("result").is_some(), "{answer}");
    let texts: Vec<&str> = shown.iter().filter_map(|u| u["content"]["text"].as_str()).collect();
    assert_eq!(texts, thread, "{texts:?}");
    assert_eq!(agent.prompt(&session, "again")["result"]["stopReason"], "end_turn");
    assert!(agent.finish().success());
}

#[test]
fn a_log_from_a_newer_hotsh_or_a_damaged_one_is_refused_clearly() {
    let data = tempfile::tempdir().unwrap();
    let (first, newer) = saved_session(data.path(), "one");
    let (second, damaged) = saved_session(data.path(), "two");
    assert!(first.finish().success() && second.finish().success());
    let mut log =
        std::fs::OpenOptions::new().append(true).open(log_path(data.path(), &newer)).unwrap();
    std::io::Write::write_all(
        &mut log,
        b"{\"v\":3,\"seq\":50,\"type\":\"agent_text\",\"data\":{}}\n",
    )
    .unwrap();
    let path = log_path(data.path(), &damaged);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        format!(
            "{}\nnot json at all\n{}",
            text.lines().next().unwrap(),
            text.lines().skip(1).collect::<Vec<_>>().join("\n")
        ),
    )
    .unwrap();

    let mut agent = Agent::start(sharing(data.path(), vec![]));
    agent.initialize(true);
    let workdir = agent.workdir.clone();
    let (_, answer) = load(&mut agent, &newer, &workdir);
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&log_path(data.path(), &newer).display().to_string())
            && message
                .contains("was written by a newer hotsh (record format 3; this one reads up to 2)"),
        "{message}"
    );
    let (_, answer) = load(&mut agent, &damaged, &workdir);
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("is damaged at line 2: not JSON"), "{message}");
    // Bad ids: unknown, and not a session id at all.
    for id in ["7f0c2a0e-0000-4000-8000-000000000000", "../../etc/passwd"] {
        let (_, answer) = load(&mut agent, id, &workdir);
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        assert_eq!(answer["error"]["message"], format!("unknown session: {id}"));
    }
    // The agent keeps serving.
    agent.new_session();
}

#[test]
fn two_processes_never_write_one_log() {
    let data = tempfile::tempdir().unwrap();
    let (first, session) = saved_session(data.path(), "mine");
    let mut second = Agent::start(sharing(data.path(), vec![]));
    second.initialize(true);
    let workdir = second.workdir.clone();
    let (_, answer) = load(&mut second, &session, &workdir);
    assert_eq!(
        answer["error"]["message"],
        format!(
            "session {session} is open in another hotsh process (pid {}); close it there first",
            first.pid()
        )
    );
    // Once the first closes it, the second can have it.
    assert!(first.finish().success());
    let (_, answer) = load(&mut second, &session, &workdir);
    assert!(answer.get("result").is_some(), "{answer}");
}

#[test]
fn sessions_are_listed_newest_first_by_cwd_with_titles_and_pages() {
    let data = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(sharing(data.path(), vec![say("ok")]));
    agent.initialize(true);
    let elsewhere = agent.dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let older = agent.new_session();
    agent.prompt(&older, "The older one\nwith a second line");
    let other = agent.call("session/new", json!({"cwd": elsewhere, "mcpServers": []}))["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let long = "x".repeat(100);
    let newer = agent.new_session();
    agent.prompt(&newer, &long);
    let listed = agent.call("session/list", json!({"cwd": agent.workdir}));
    let sessions = listed["result"]["sessions"].as_array().unwrap();
    let ids: Vec<&str> = sessions.iter().map(|s| s["sessionId"].as_str().unwrap()).collect();
    assert_eq!(ids, [newer.as_str(), older.as_str()], "{listed}");
    assert_eq!(sessions[1]["title"], "The older one");
    assert_eq!(sessions[0]["title"], format!("{}…", "x".repeat(80)));
    assert!(sessions[0]["updatedAt"].as_str().unwrap().ends_with('Z'));
    assert!(listed["result"].get("nextCursor").is_none_or(Value::is_null));
    let all = agent.call("session/list", json!({}));
    assert_eq!(all["result"]["sessions"].as_array().unwrap().len(), 3);
    assert!(
        all["result"]["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["sessionId"] == other.as_str())
    );

    // Paging: 50 a page, the cursor leads to the rest.
    for _ in 0..50 {
        agent.new_session();
    }
    let first_page = agent.call("session/list", json!({}));
    assert_eq!(first_page["result"]["sessions"].as_array().unwrap().len(), 50);
    let cursor = first_page["result"]["nextCursor"].as_str().unwrap().to_owned();
    let second_page = agent.call("session/list", json!({"cursor": cursor}));
    assert_eq!(second_page["result"]["sessions"].as_array().unwrap().len(), 3);
    assert!(second_page["result"].get("nextCursor").is_none_or(Value::is_null));
    let bad = agent.call("session/list", json!({"cursor": "nonsense"}));
    assert_eq!(bad["error"]["code"], -32602);
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh sessions and hotsh run")]
fn hotsh_sessions_list_and_show_and_run_continues_a_session() {
    let data = tempfile::tempdir().unwrap();
    let responses = vec![
        json!({"text": "Looking.", "tool_calls": [{"name": "bash", "arguments": {"command": "echo one; exit 2"}}]}),
        say("Done."),
    ];
    let mut agent = Agent::start(sharing(data.path(), responses));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "Show me a failure");
    assert!(agent.finish().success());

    let hotsh = |args: &[&str]| {
        let output = std::process::Command::new(hotsh_tests::hotsh_binary())
            .args(args)
            .env("HOTSH_DATA_DIR", data.path())
            .env("TMPDIR", data.path())
            .env_remove("NO_COLOR")
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let listed = hotsh(&["sessions", "list"]);
    assert!(listed.starts_with(&format!("{session}  20")), "{listed}");
    assert!(listed.trim_end().ends_with("  Show me a failure"), "{listed}");
    let shown = hotsh(&["sessions", "show", &session]);
    let body: String = shown.lines().skip(1).collect::<Vec<_>>().join("\n");
    expect![[r#"
        > Show me a failure
        Looking.
        $ echo one; exit 2
        one
        [exit 2]
        Done."#]]
    .assert_eq(&body);
    assert!(shown.starts_with(&format!("session {session} “Show me a failure” in ")), "{shown}");

    // `hotsh run --session` continues it, with its history.
    let script = data.path().join("next.json");
    std::fs::write(&script, json!({"responses": [say("Welcome back.")]}).to_string()).unwrap();
    let transcript = data.path().join("transcript.jsonl");
    let ran = hotsh(&[
        "run",
        "--no-default-plugins",
        "--plugin-dir",
        &agent_plugin_dir(),
        "--model",
        &format!("script:{}", script.display()),
        "--model-transcript",
        transcript.to_str().unwrap(),
        "--session",
        &session,
        "and then?",
    ]);
    assert_eq!(ran.trim_end(), "Welcome back.");
    let request: Value =
        serde_json::from_str(std::fs::read_to_string(&transcript).unwrap().lines().last().unwrap())
            .unwrap();
    let texts: Vec<&str> = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        ["Show me a failure", "Looking.", "one\n[exit code: 2]", "Done.", "and then?"]
    );
}

/// The directory holding the tool-bash build.
fn agent_plugin_dir() -> String {
    hotsh_tests::tool_bash_plugin().parent().unwrap().to_string_lossy().into_owned()
}

#[test]
fn closing_a_session_stops_its_tasks_and_releases_its_log() {
    let data = tempfile::tempdir().unwrap();
    let marker = "sleep 1000.0931";
    let mut agent = Agent::start(sharing(
        data.path(),
        vec![
            json!({"tool_calls": [{"name": "bash", "arguments": {"command": marker, "run_in_background": true}}]}),
            say("ok"),
        ],
    ));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "start");
    eventually("the task to run", || !processes_matching(marker).is_empty());
    let closed = agent.call("session/close", json!({"sessionId": session}));
    assert!(closed.get("result").is_some(), "{closed}");
    assert!(processes_matching(marker).is_empty(), "the session's task outlived its close");
    let again = agent.prompt(&session, "still there?");
    assert_eq!(again["error"]["code"], -32602, "{again}");
    // Released: another process can open it.
    let mut other = Agent::start(sharing(data.path(), vec![]));
    other.initialize(true);
    let resumed = other.call(
        "session/resume",
        json!({"sessionId": session, "cwd": agent.workdir, "mcpServers": []}),
    );
    assert!(resumed.get("result").is_some(), "{resumed}");
}

#[test]
fn deleting_a_session_is_refused_while_its_tasks_run_and_then_removes_its_log() {
    let data = tempfile::tempdir().unwrap();
    let marker = "sleep 1000.0477";
    let mut agent = Agent::start(sharing(
        data.path(),
        vec![
            json!({"tool_calls": [{"name": "bash", "arguments": {"command": marker, "run_in_background": true}}]}),
            say("ok"),
        ],
    ));
    let init = agent.initialize(true);
    assert!(
        init["result"]["agentCapabilities"]["sessionCapabilities"].get("delete").is_some(),
        "{init}"
    );
    let session = agent.new_session();
    agent.prompt(&session, "start");
    eventually("the task to run", || !processes_matching(marker).is_empty());
    let refused = agent.call("session/delete", json!({"sessionId": session}));
    let message = refused["error"]["message"].as_str().unwrap_or_else(|| panic!("{refused}"));
    assert!(
        message.contains("1 background task(s) running: bash-1 (sleep 1000.0477)"),
        "{message}"
    );
    assert!(log_path(data.path(), &session).exists(), "a refused delete removed the log");
    // Closed (its task stopped), it can be deleted: gone from the list and from disk.
    agent.call("session/close", json!({"sessionId": session}));
    let deleted = agent.call("session/delete", json!({"sessionId": session}));
    assert!(deleted.get("result").is_some(), "{deleted}");
    assert!(!log_path(data.path(), &session).exists());
    let listed = agent.call("session/list", json!({}));
    assert!(!listed.to_string().contains(&session), "{listed}");
    let again = agent.call("session/delete", json!({"sessionId": session}));
    assert_eq!(again["error"]["code"], -32602, "{again}");
    // An open, idle session is closed and deleted at once.
    let idle = agent.new_session();
    let deleted = agent.call("session/delete", json!({"sessionId": idle}));
    assert!(deleted.get("result").is_some(), "{deleted}");
    assert!(!log_path(data.path(), &idle).exists());
    let prompt = agent.prompt(&idle, "still there?");
    assert_eq!(prompt["error"]["code"], -32602, "{prompt}");
}

#[test]
fn an_unusable_data_dir_refuses_new_sessions_with_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let mut agent = Agent::start(sharing(&file.join("data"), vec![]));
    agent.initialize(true);
    let cwd = agent.workdir.clone();
    let response = agent.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let message = response["error"]["message"].as_str().unwrap();
    assert_eq!(
        message,
        format!(
            "cannot use {}/data/sessions for session logs: Not a directory (os error 20)",
            file.display()
        )
    );
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs prlimit(1)")]
fn a_full_disk_fails_the_turn_with_the_file_and_cause_and_loses_nothing_logged() {
    let data = tempfile::tempdir().unwrap();
    let responses = vec![
        say("small answer"),
        bash_call("head -c 900000 /dev/zero | tr '\\0' x"),
        say("unreachable"),
    ];
    let mut agent = Agent::start(sharing(data.path(), responses));
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "one")["result"]["stopReason"], "end_turn");
    // From now on files may grow to 100 KiB: the second turn's output does not fit in the
    // log (at least the last 256 KiB of it reach the client, and so the log).
    let limited = std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(agent.pid().to_string())
        .arg("--fsize=102400:")
        .status()
        .unwrap();
    assert!(limited.success());
    let failed = agent.prompt(&session, "two");
    let path = log_path(data.path(), &session);
    let message = failed["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.starts_with(&format!(
            "cannot write the session log {}: File too large",
            path.display()
        )),
        "{failed}"
    );
    // The session refuses to go on unsaved; the agent serves other requests.
    let refused = agent.prompt(&session, "three");
    assert_eq!(refused["error"]["message"], message);
    assert!(agent.call("session/list", json!({})).get("result").is_some());
    agent.kill9();
    // What was logged before the failure loads in an agent without the limit.
    let mut next = Agent::start(sharing(data.path(), vec![]));
    next.initialize(true);
    let workdir = next.workdir.clone();
    let (updates, answer) = load(&mut next, &session, &workdir);
    assert!(answer.get("result").is_some(), "{answer}");
    let texts: Vec<&str> = updates.iter().filter_map(|u| u["content"]["text"].as_str()).collect();
    assert_eq!(&texts[..3], ["one", "small answer", "two"]);
}

#[test]
fn a_log_written_by_the_release_before_loads_unchanged_and_goes_on() {
    // Written by `hotsh run --sandbox workspace-write` of 9b5be73 (a command, a background
    // task still running when that agent went away, a file written, a command that failed).
    let id = "e47f9987-8b17-4f78-acd2-475825a13ca2";
    let fixture = hotsh_tests::workspace().join("tests/fixtures/logs/9b5be73.jsonl");
    let data = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(sharing(data.path(), vec![say("continued")]));
    let cwd = agent.workdir.clone();
    // The log names the folder it ran in: this test's, here.
    let text = std::fs::read_to_string(&fixture)
        .unwrap()
        .replace("/tmp/genlog/work", cwd.to_str().unwrap());
    std::fs::create_dir_all(data.path().join("sessions")).unwrap();
    std::fs::write(log_path(data.path(), id), text).unwrap();
    agent.initialize(true);
    let (updates, answer) = load(&mut agent, id, &cwd);
    assert!(answer.get("result").is_some(), "{answer}");
    let shown = normalise_paths(&outline(&updates)).replace(cwd.to_str().unwrap(), "<cwd>");
    expect![[r#"
        user_message_chunk "write some notes"
        agent_thought_chunk "list then write"
        agent_message_chunk "Looking."
        tool_call call-1 title="echo hello && ls" status=in_progress terminal_info 
        tool_call_update call-1 terminal_output "hello\n"
        tool_call_update call-1 status=completed terminal_exit code=0 signal=null
        tool_call call-2 title="Start in the background: sleep 0.2; echo bg-done" status=in_progress
        tool_call_update call-2 title="Background task bash-1: sleep 0.2; echo bg-done" status=in_progress content="Running; full output: <path>"
        tool_call call-3 title="Write <cwd>/notes.txt" status=in_progress
        tool_call_update call-3 title="Write <cwd>/notes.txt" status=completed
        tool_call call-4 title="exit 3" status=in_progress terminal_info 
        tool_call_update call-4 status=failed terminal_exit code=3 signal=null
        agent_message_chunk "Done: notes.txt written."
        tool_call_update call-2 title="Background task bash-1: sleep 0.2; echo bg-done" status=failed content="bash-1 ended when the agent that ran it went away.""#]].assert_eq(&shown);
    let sandbox = answer["result"]["configOptions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "sandbox_mode")
        .unwrap()["currentValue"]
        .clone();
    assert_eq!(sandbox, "workspace-write");
    let next = agent.prompt(id, "and now?");
    assert_eq!(next["result"]["stopReason"], "end_turn", "{next}");
    let request = agent.model_requests().pop().unwrap();
    let messages = request["messages"].as_array().unwrap();
    assert_eq!(messages[0]["text"], "write some notes");
    assert_eq!(messages.iter().filter(|m| m["role"] == "tool").count(), 4);
    let notice = messages.iter().find(|m| m["role"] == "notice").unwrap();
    assert!(
        notice["text"].as_str().unwrap().contains("background task bash-1 `sleep 0.2; echo bg-done` ended when the agent that ran it went away"),
        "{notice}"
    );
    assert_eq!(messages.last().unwrap()["text"], "and now?");
}

#[test]
fn a_reloaded_session_owes_no_notice_of_a_task_whose_end_the_model_already_saw() {
    let data = tempfile::tempdir().unwrap();
    let batch = json!({"tool_calls": [
        // bash-1 ends at once; the model reads its end after it (no notice is due then).
        {"name": "bash", "arguments": {"command": "true", "run_in_background": true}},
        {"name": "bash", "arguments": {"command": "sleep 0.5"}},
        {"name": "bash_output", "arguments": {"task_id": "bash-1"}},
        // bash-2 is killed by the model itself.
        {"name": "bash", "arguments": {"command": "sleep 30.0623", "run_in_background": true}},
        {"name": "bash_kill", "arguments": {"task_id": "bash-2"}},
    ]});
    let mut agent = Agent::start(sharing(data.path(), vec![batch, say("done"), say("again")]));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "start and stop");
    agent.prompt(&session, "anything?");
    let live = agent.model_requests();
    let notices = |request: &Value| {
        request["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "notice").count()
    };
    assert_eq!(notices(live.last().unwrap()), 0, "live, the model was told of nothing");
    let cwd = agent.workdir.clone();
    assert!(agent.finish().success());

    let mut again = Agent::start(sharing(data.path(), vec![say("still here")]));
    again.initialize(true);
    let (_, answer) = load(&mut again, &session, &cwd);
    assert!(answer.get("result").is_some(), "{answer}");
    again.prompt(&session, "and now?");
    let reloaded = again.model_requests().pop().unwrap();
    assert_eq!(notices(&reloaded), 0, "reloaded, a notice the live session never owed: {reloaded}");
}

#[test]
fn a_fifo_or_a_symlink_among_the_logs_is_reported_and_skipped_never_followed_or_waited_on() {
    let data = tempfile::tempdir().unwrap();
    let (mut agent, real) = saved_session(data.path(), "the real one");
    let sessions = data.path().join("sessions");
    let fifo = "11111111-1111-4111-8111-111111111111";
    let link = "22222222-2222-4222-8222-222222222222";
    let fifo_path = std::ffi::CString::new(log_path(data.path(), fifo).to_str().unwrap()).unwrap();
    // SAFETY: a path string that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(fifo_path.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink(
        log_path(data.path(), &real),
        sessions.join(format!("{link}.jsonl")),
    )
    .unwrap();
    let before = std::fs::read(log_path(data.path(), &real)).unwrap();

    let listed = agent.call("session/list", json!({}));
    let ids: Vec<&str> = listed["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [real.as_str()], "{listed}");
    let cwd = agent.workdir.clone();
    for (id, why) in [(fifo, "it is a FIFO, not a regular file"), (link, "it is a symbolic link")] {
        let (_, answer) = load(&mut agent, id, &cwd);
        let message = answer["error"]["message"].as_str().unwrap_or_else(|| panic!("{answer}"));
        assert!(message.contains(why), "{id}: {message}");
    }
    // Nothing reached the real log through the link, and it still loads.
    assert_eq!(std::fs::read(log_path(data.path(), &real)).unwrap(), before);
    assert!(agent.stderr().contains("skipping a session log"), "the list says what it skipped");
}

#[test]
fn session_logs_are_private_to_their_user() {
    use std::os::unix::fs::PermissionsExt as _;
    let data = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(sharing(data.path(), vec![say("hi")]));
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "hello")["result"]["stopReason"], "end_turn");
    let sessions = data.path().join("sessions");
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&sessions), 0o700, "the sessions directory");
    assert_eq!(mode(&sessions.join(format!("{session}.jsonl"))), 0o600, "the log");
}

#[test]
fn a_commands_output_is_logged_once_and_comes_back_whole_after_sigkill() {
    let data = tempfile::tempdir().unwrap();
    let script = vec![bash_call("seq 1 3000; exit 3"), say("done"), say("still here")];
    let mut agent = Agent::start(sharing(data.path(), script));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "count");
    let live = agent.model_requests().pop().unwrap();
    let tool_text = |request: &Value| -> String {
        let messages = request["messages"].as_array().unwrap();
        let tool = messages.iter().find(|m| m["role"] == "tool").expect("a tool result");
        tool["text"].as_str().expect("its text").to_owned()
    };
    let text = tool_text(&live);
    assert!(text.starts_with("1\n2\n3\n") && text.contains("2999\n3000"), "{text:.200}");
    assert!(text.ends_with("[exit code: 3]"), "{text:.200}");
    // The log holds the 14 KB of output once: in the card's terminal output, the model's
    // text referring to it.
    let log = std::fs::read_to_string(log_path(data.path(), &session)).unwrap();
    assert_eq!(log.matches("2999\\n3000").count(), 1, "the output is logged once");
    assert!(log.len() < 20_000, "log of {} bytes", log.len());
    let cwd = agent.workdir.clone();
    agent.kill9();

    let mut again = Agent::start(sharing(data.path(), vec![say("again")]));
    again.initialize(true);
    let (updates, answer) = load(&mut again, &session, &cwd);
    assert!(answer.get("result").is_some(), "{answer}");
    let shown: String =
        updates.iter().filter_map(|u| u["_meta"]["terminal_output"]["data"].as_str()).collect();
    assert!(shown.starts_with("1\n2\n") && shown.ends_with("2999\n3000\n"), "{shown:.200}");
    again.prompt(&session, "and now?");
    let reloaded = again.model_requests().pop().unwrap();
    assert_eq!(tool_text(&reloaded), text, "the model's text comes back whole");
}

#[test]
fn a_session_whose_folder_is_gone_loads_and_its_commands_say_why_they_cannot_run() {
    let data = tempfile::tempdir().unwrap();
    let folder = data.path().join("project");
    std::fs::create_dir(&folder).unwrap();
    let mut agent = Agent::start(sharing(data.path(), vec![bash_call("echo here"), say("ok")]));
    agent.initialize(true);
    agent.wait_for_stderr("initial plugin scan done");
    let created = agent.call("session/new", json!({"cwd": folder, "mcpServers": []}));
    let session = created["result"]["sessionId"].as_str().expect("a session").to_owned();
    agent.prompt(&session, "where?");
    assert_eq!(agent.last_tool_result(), ("here".to_owned(), false));
    assert!(agent.finish().success());

    std::fs::remove_dir_all(&folder).unwrap();
    let responses = vec![bash_call("echo again"), say("gone")];
    let mut agent = Agent::start(sharing(data.path(), responses));
    agent.initialize(true);
    let (updates, answer) = load(&mut agent, &session, &folder);
    assert!(answer.get("result").is_some(), "the thread still loads: {answer}");
    assert!(outline(&updates).contains("here"), "{}", outline(&updates));
    // No sandbox is started for it (starting one would fail on the missing folder, in the
    // log); the next command says why it cannot run.
    agent.prompt(&session, "again?");
    let stderr = agent.wait_for_stderr("the session's folder is gone; no sandbox started for it");
    let (text, is_error) = agent.last_tool_result();
    assert!(is_error, "{text}");
    assert!(
        text.contains(&format!("working directory {} does not exist", folder.display())),
        "{text}"
    );
    assert!(!stderr.contains("cannot start the command supervisor"), "{stderr}");
}
