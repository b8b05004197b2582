//! Arcs: recording a session (`--record`), replaying arcs offline (`hotsh replay`), drift,
//! `--bless`, and arcs that are broken, too new, short of model answers or hung.

use hotsh_tests::{
    Agent, AgentOptions, bash_call, call_with as tool_call_with, hello_plugin, hotsh_binary, say,
    tool_bash_plugin, tool_fs_plugin, workspace,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory holding the plugins the arcs of `tests/arcs` were recorded with.
fn plugin_dir(scratch: &Path) -> PathBuf {
    let dir = scratch.join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    for plugin in [tool_bash_plugin(), tool_fs_plugin(), hello_plugin()] {
        std::os::unix::fs::symlink(&plugin, dir.join(plugin.file_name().unwrap())).unwrap();
    }
    dir
}

/// Runs `hotsh replay ARGS` with those plugins only: (succeeded, stdout, stderr).
#[allow(clippy::disallowed_methods, reason = "runs hotsh replay")]
fn replay(scratch: &Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(hotsh_binary())
        .arg("replay")
        .arg("--no-default-plugins")
        .arg("--plugin-dir")
        .arg(plugin_dir_once(scratch))
        .args(args)
        .output()
        .expect("hotsh replay runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Replays `arc` (with `more` arguments) and asserts that it passed as it is, without
/// `--bless`.
fn assert_replays_unchanged(scratch: &Path, arc: &Path, more: &[&str]) {
    let mut args = vec![path_str(arc)];
    args.extend_from_slice(more);
    let (ok, stdout, stderr) = replay(scratch, &args);
    assert!(ok && stdout.contains("1 arcs: 1 passed"), "{stdout}\n{stderr}");
}

fn plugin_dir_once(scratch: &Path) -> PathBuf {
    let dir = scratch.join("plugins");
    if dir.exists() { dir } else { plugin_dir(scratch) }
}

fn arcs_dir() -> PathBuf {
    workspace().join("tests/arcs")
}

/// A copy of the repository's arc `name` in `scratch` (with the fixture it names).
fn copy_arc(scratch: &Path, name: &str) -> PathBuf {
    let target = scratch.join(name);
    std::fs::copy(arcs_dir().join(name), &target).unwrap();
    let fixture = scratch.join("project");
    if !fixture.exists() {
        std::fs::create_dir(&fixture).unwrap();
        for entry in std::fs::read_dir(arcs_dir().join("project")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), fixture.join(entry.file_name())).unwrap();
        }
    }
    target
}

/// `text` with `from` replaced by `to` in the first line of kind `kind` (`agent`, `model`)
/// that holds it.
fn alter_line(text: &str, kind: &str, from: &str, to: &str) -> String {
    let prefix = format!("{{\"{kind}\"");
    let mut done = false;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            if !done && line.starts_with(&prefix) && line.contains(from) {
                done = true;
                line.replacen(from, to, 1)
            } else {
                line.to_owned()
            }
        })
        .collect();
    assert!(done, "{from:?} is in a {kind} line");
    lines.join("\n") + "\n"
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Asserts that replay's output has `line` in it.
#[track_caller]
fn assert_reported(stdout: &str, line: &str) {
    assert!(stdout.contains(line), "{line:?} is not in the output:\n{stdout}");
}

/// The number of the first line of `text` containing `needle` (1-based).
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).expect("the needle is in the arc") + 1
}

#[test]
fn every_arc_in_the_repository_replays() {
    let scratch = tempfile::tempdir().unwrap();
    let junit = scratch.path().join("report.xml");
    let arcs = std::fs::read_dir(arcs_dir())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "arc"))
        .count();
    assert!(arcs >= 6, "the scenarios of tests/arcs are there");
    let (ok, stdout, stderr) =
        replay(scratch.path(), &[path_str(&arcs_dir()), "--junit", path_str(&junit)]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("{arcs} arcs: {arcs} passed, 0 failed, 0 blessed")),
        "{stdout}"
    );
    for name in ["chat", "exit-status", "cancel", "background", "reload", "no-terminal"] {
        assert!(
            stdout
                .contains(&format!("ok      {}", arcs_dir().join(format!("{name}.arc")).display())),
            "{stdout}"
        );
    }
    let report = std::fs::read_to_string(&junit).unwrap();
    assert!(report.contains(&format!("tests=\"{arcs}\" failures=\"0\"")), "{report}");
    assert_eq!(report.matches("<testcase ").count(), arcs, "{report}");
}

#[test]
fn replay_shows_drift_as_a_diff_and_bless_repairs_it() {
    let scratch = tempfile::tempdir().unwrap();
    let arc = copy_arc(scratch.path(), "chat.arc");
    let original = std::fs::read_to_string(&arc).unwrap();
    // One byte of what the agent is expected to send.
    let altered = alter_line(&original, "agent", "How can I help?", "How can I halp?");
    assert_ne!(altered, original);
    std::fs::write(&arc, &altered).unwrap();
    // The message streamed in two chunks is compared joined; the report names its first line.
    let line = line_of(&altered, r#"{"text":"Hello! ","type":"text"}"#);
    assert_eq!(line + 1, line_of(&altered, "halp"));

    let (ok, stdout, _) = replay(scratch.path(), &[path_str(&arc)]);
    assert!(!ok, "{stdout}");
    assert!(stdout.contains(&format!("FAILED  {}", arc.display())), "{stdout}");
    assert_reported(
        &stdout,
        &format!("{}:{line}: what the agent sent the client differs from the arc", arc.display()),
    );
    assert!(stdout.contains(&format!("--- {} (expected)", arc.display())), "{stdout}");
    assert!(stdout.contains("-        \"text\": \"Hello! How can I halp?\""), "{stdout}");
    assert!(stdout.contains("+        \"text\": \"Hello! How can I help?\""), "{stdout}");
    assert!(stdout.contains("1 arcs: 0 passed, 1 failed, 0 blessed"), "{stdout}");

    let (ok, stdout, _) = replay(scratch.path(), &[path_str(&arc), "--bless"]);
    assert!(ok, "{stdout}");
    assert!(stdout.contains("1 arcs: 0 passed, 0 failed, 1 blessed"), "{stdout}");
    let blessed = std::fs::read_to_string(&arc).unwrap();
    assert!(blessed.contains("How can I help?") && !blessed.contains("halp"), "{blessed}");
    // Only what drifted was rewritten: every other line is the arc's own.
    let (was, now): (Vec<&str>, Vec<&str>) =
        (original.lines().collect(), blessed.lines().collect());
    assert_eq!(was.len(), now.len(), "{blessed}");
    let rewritten: Vec<usize> = (0..was.len()).filter(|&i| was[i] != now[i]).collect();
    assert!(
        rewritten.len() <= 1 && rewritten.iter().all(|&i| now[i].contains("How can I help?")),
        "lines {rewritten:?} were rewritten: {blessed}"
    );

    let (ok, stdout, _) = replay(scratch.path(), &[path_str(&arc)]);
    assert!(ok && stdout.contains("1 arcs: 1 passed, 0 failed, 0 blessed"), "{stdout}");
}

#[test]
fn replay_compares_what_the_model_was_sent() {
    let scratch = tempfile::tempdir().unwrap();
    let arc = copy_arc(scratch.path(), "chat.arc");
    let original = std::fs::read_to_string(&arc).unwrap();
    // The arc says the model was sent another prompt than the agent sends it.
    let altered = alter_line(&original, "model", r#""text":"hello"}"#, r#""text":"hullo"}"#);
    assert_ne!(altered, original, "the model request holds the prompt");
    std::fs::write(&arc, &altered).unwrap();
    let (ok, stdout, _) = replay(scratch.path(), &[path_str(&arc)]);
    assert!(!ok, "{stdout}");
    let line = line_of(&altered, "hullo");
    assert_reported(
        &stdout,
        &format!("{}:{line}: what the agent sent the model differs from the arc", arc.display()),
    );
    assert!(
        stdout.contains("-      \"text\": \"hullo\"")
            && stdout.contains("+      \"text\": \"hello\""),
        "{stdout}"
    );
}

#[test]
fn broken_arcs_are_named_with_their_line_and_the_others_still_replay() {
    let scratch = tempfile::tempdir().unwrap();
    let good = copy_arc(scratch.path(), "chat.arc");
    let text = std::fs::read_to_string(&good).unwrap();

    let torn = scratch.path().join("torn.arc");
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(2, "{\"client\": {\"jsonrpc\": \"2.0\", ");
    std::fs::write(&torn, lines.join("\n")).unwrap();

    let newer = scratch.path().join("newer.arc");
    std::fs::write(&newer, text.replacen("{\"arc\":1", "{\"arc\":7", 1)).unwrap();

    let two_lines = scratch.path().join("two-kinds.arc");
    std::fs::write(&two_lines, "{\"arc\":1}\n{\"client\":{},\"agent\":{}}\n").unwrap();

    let (ok, stdout, _) = replay(
        scratch.path(),
        &[path_str(&good), path_str(&torn), path_str(&newer), path_str(&two_lines)],
    );
    assert!(!ok, "{stdout}");
    assert!(stdout.contains(&format!("{}:3: not valid", torn.display())), "{stdout}");
    assert_reported(
        &stdout,
        &format!(
            "{}:1: arc format 7 is not one this hotsh reads (it reads format 1 and older)",
            newer.display()
        ),
    );
    assert_reported(
        &stdout,
        &format!(
            "{}:2: a line must have exactly one of `client`, `agent`, `model`, `step`, `mcp` and `hooks`",
            two_lines.display()
        ),
    );
    assert!(stdout.contains(&format!("ok      {}", good.display())), "{stdout}");
    assert!(stdout.contains("4 arcs: 1 passed, 3 failed, 0 blessed"), "{stdout}");
}

#[test]
fn an_arc_whose_model_side_runs_out_says_so() {
    let scratch = tempfile::tempdir().unwrap();
    let arc = copy_arc(scratch.path(), "exit-status.arc");
    let text = std::fs::read_to_string(&arc).unwrap();
    // Drop the model's last answer: the agent asks once more than the arc answers.
    let model_lines: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("{\"model\""))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(model_lines.len(), 2);
    let kept: Vec<&str> =
        text.lines().enumerate().filter(|(i, _)| *i != model_lines[1]).map(|(_, l)| l).collect();
    std::fs::write(&arc, kept.join("\n")).unwrap();
    let (ok, stdout, _) = replay(scratch.path(), &[path_str(&arc)]);
    assert!(!ok, "{stdout}");
    assert_reported(
        &stdout,
        &format!(
            "{}:{}: the model side ran out before the agent was done: session <session-1> asked \
             the model once more after the arc's last answer for it (line {})",
            arc.display(),
            model_lines[0] + 1,
            model_lines[0] + 1
        ),
    );
}

#[test]
fn a_hung_replay_stops_at_the_arc_timeout_naming_the_awaited_message() {
    let scratch = tempfile::tempdir().unwrap();
    let arc = scratch.path().join("hung.arc");
    // The arc expects a message the agent will never send, and gives the replay 2 s. Nothing
    // else is expected, so however slowly the agent starts, that message is the one awaited.
    let initialize = json!({"client": {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}}});
    let never = json!({"agent": {"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "nobody", "update": {"sessionUpdate": "tool_call_update",
        "toolCallId": "call-99", "title": "never sent"}}}});
    std::fs::write(&arc, format!("{{\"arc\":1,\"timeout_s\":2}}\n{initialize}\n{never}\n"))
        .unwrap();
    // Built first (a fresh checkout builds for minutes): the bound below is the replay's.
    let _ = hotsh_binary();
    let started = std::time::Instant::now();
    let (ok, stdout, _) = replay(scratch.path(), &[path_str(&arc)]);
    assert!(!ok, "{stdout}");
    assert_reported(
        &stdout,
        &format!(
            "{}:3: timed out after 2 s waiting for the agent message of line 3",
            arc.display()
        ),
    );
    // The diff shows the message missing.
    assert_reported(&stdout, "-      \"title\": \"never sent\"");
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "the timeout stopped it");
}

#[test]
fn a_session_recorded_with_record_replays_and_keeps_no_key() {
    let scratch = tempfile::tempdir().unwrap();
    let arc = scratch.path().join("recorded.arc");
    let mut options =
        AgentOptions::script(vec![bash_call("printf 'a\\nb\\n' | sort -r"), say("Sorted.")]);
    options.plugins = vec![tool_bash_plugin(), tool_fs_plugin(), hello_plugin()];
    // From the configuration file, as Zed would launch it.
    options.config = Some(format!("record = {:?}\n", arc.display().to_string()));
    options.env.push(("DEEPSEEK_API_KEY".into(), "sk-recorded-never".into()));
    let mut agent = Agent::start(options.clone());
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "sort a and b")["result"]["stopReason"], "end_turn");
    agent.finish();
    let text = std::fs::read_to_string(&arc).unwrap();

    // The next agent started with the same configuration keeps that recording.
    let mut next = Agent::start(options);
    next.initialize(true);
    next.finish();
    assert_eq!(std::fs::read_to_string(&arc).unwrap(), text);
    let second = std::fs::read_to_string(scratch.path().join("recorded-2.arc")).unwrap();
    assert!(second.starts_with("{\"arc\":1,") && second.contains("initialize"), "{second}");

    assert!(!text.contains("sk-recorded-never"), "no key in the arc");
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["arc"], 1);
    let kinds: Vec<&str> =
        lines[1..].iter().map(|l| l.as_object().unwrap().keys().next().unwrap().as_str()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "model").count(), 2, "{kinds:?}");
    assert_eq!(kinds[0], "client");
    assert_eq!(lines[1]["client"]["method"], "initialize");
    let model = lines[1..].iter().find(|l| l.get("model").is_some()).unwrap();
    assert_eq!(model["model"]["session"], session.as_str());
    assert_eq!(model["model"]["request"]["messages"][0]["text"], "sort a and b");
    assert_eq!(model["model"]["response"]["tool_calls"][0]["name"], "bash");

    assert_replays_unchanged(scratch.path(), &arc, &[]);
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh sessions export")]
fn a_logged_session_exports_as_an_arc_that_replays() {
    let scratch = tempfile::tempdir().unwrap();
    let mut options = AgentOptions::script(vec![
        bash_call("echo one"),
        say("Printed one."),
        say("Nothing to run."),
        bash_call("echo waiting; sleep 60"),
    ]);
    options.plugins = vec![tool_bash_plugin(), tool_fs_plugin(), hello_plugin()];
    let data_dir = scratch.path().join("data");
    options.env.push(("HOTSH_DATA_DIR".into(), data_dir.display().to_string()));
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "print one");
    agent.prompt(&session, "and now?");
    // A third turn, cancelled: the log does not say where the cancel came.
    let id = agent.start_prompt(&session, "wait");
    agent.wait_for_terminal_output("waiting");
    agent.notify("session/cancel", json!({"sessionId": session}));
    assert_eq!(agent.response(id)["result"]["stopReason"], "cancelled");
    agent.finish();

    let arc = scratch.path().join("exported.arc");
    let output = Command::new(hotsh_binary())
        .args(["sessions", "export", &session, "--arc", path_str(&arc), "--no-default-plugins"])
        .arg("--data-dir")
        .arg(&data_dir)
        .arg("--plugin-dir")
        .arg(plugin_dir(scratch.path()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("the turn of prompt 3 was cancelled; the arc ends before it"),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("wrote {}", arc.display())), "{stderr}");

    let text = std::fs::read_to_string(&arc).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let prompts: Vec<&Value> = lines
        .iter()
        .filter(|l| l["client"]["method"] == "session/prompt")
        .map(|l| &l["client"]["params"]["prompt"][0]["text"])
        .collect();
    assert_eq!(prompts, [&json!("print one"), &json!("and now?")]);
    let models: Vec<&Value> = lines.iter().filter_map(|l| l.get("model")).collect();
    assert_eq!(models.len(), 3);
    assert!(models.iter().all(|m| m["request"]["messages"].is_array()), "requests filled in");
    // What the agent sends was filled in by a replay: the card of `echo one`, the replies.
    assert!(text.contains(r#""data":"one\n""#), "{text}");
    assert!(text.contains("Nothing to run."), "{text}");
    assert_eq!(
        lines.iter().filter(|l| l["agent"]["result"]["stopReason"] == "end_turn").count(),
        2
    );

    assert_replays_unchanged(scratch.path(), &arc, &[]);
}

#[test]
fn a_session_with_an_mcp_server_replays_without_the_server() {
    let scratch = tempfile::tempdir().unwrap();
    let arc = scratch.path().join("mcp.arc");
    // A copy of the server, removed before the replay.
    let server = scratch.path().join("server");
    std::fs::copy(env!("CARGO_BIN_EXE_mcp-fixture"), &server).unwrap();
    let mut options = AgentOptions::script(vec![
        hotsh_tests::call_with("mcp__kept__echo", json!({"text": "offline"})),
        say("Done."),
    ]);
    options.plugins = vec![tool_bash_plugin(), tool_fs_plugin(), hello_plugin()];
    options.record = Some(arc.clone());
    let mut agent = Agent::start(options);
    agent.initialize(true);
    agent.wait_for_stderr("initial plugin scan done");
    let cwd = agent.workdir.to_string_lossy().into_owned();
    let servers = json!([{"name": "kept", "command": server, "args": ["kept"], "env": []}]);
    let session = agent.call("session/new", json!({"cwd": cwd, "mcpServers": servers}));
    let session = session["result"]["sessionId"].as_str().unwrap().to_owned();
    agent.prompt(&session, "go");
    assert_eq!(agent.last_tool_result(), ("kept says: offline".to_owned(), false));
    agent.finish();
    std::fs::remove_file(&server).unwrap();

    let text = std::fs::read_to_string(&arc).unwrap();
    let mcp: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).unwrap().get("mcp").cloned())
        .collect();
    assert_eq!(mcp.len(), 2, "{mcp:?}");
    assert_eq!(mcp[0]["server"], "kept");
    assert!(mcp[0]["tools"].as_array().unwrap().iter().any(|t| t["name"] == "echo"));
    assert_eq!(mcp[1]["call"], "echo");
    assert_eq!(mcp[1]["outcome"]["text"], "kept says: offline");

    assert_replays_unchanged(scratch.path(), &arc, &[]);

    // An arc whose recorded answer changed drifts: the replay serves what the arc says.
    let altered: String = text
        .lines()
        .map(|line| {
            let line = if line.starts_with("{\"mcp\"") {
                line.replace("kept says: offline", "kept says: other")
            } else {
                line.to_owned()
            };
            line + "\n"
        })
        .collect();
    assert_ne!(altered, text);
    std::fs::write(&arc, altered).unwrap();
    let (ok, stdout, _) = replay(scratch.path(), &[path_str(&arc)]);
    assert!(!ok && stdout.contains("kept says: other"), "{stdout}");
}

#[test]
fn an_arc_recorded_against_a_real_model_that_takes_images_replays_unchanged() {
    use hotsh_tests::{FakeProvider, Reply, delta};
    let scratch = tempfile::tempdir().unwrap();
    let arc = scratch.path().join("real.arc");
    let call = json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
        "function": {"name": "bash", "arguments": "{\"command\": \"echo real\"}"}}]});
    let provider = FakeProvider::start(vec![
        Reply::Stream(vec![
            delta(call, None),
            delta(json!({}), Some("tool_calls")),
            "data: [DONE]\n\n".into(),
        ]),
        Reply::Stream(vec![
            delta(json!({"role": "assistant", "content": "It said real."}), Some("stop")),
            "data: [DONE]\n\n".into(),
        ]),
    ]);
    let mut options = AgentOptions::script(vec![]);
    options.model_args = Some(Vec::new());
    options.plugins = vec![tool_bash_plugin(), tool_fs_plugin(), hello_plugin()];
    options.config = Some(format!(
        "model = \"real\"\nrecord = {:?}\n[models.real]\nbase_url = \"{}\"\nmodel = \"real-model\"\ncontext_window = 128000\nimages = true\n",
        arc.display().to_string(),
        provider.base_url
    ));
    let mut agent = Agent::start(options);
    let init = agent.initialize(true);
    assert_eq!(init["result"]["agentCapabilities"]["promptCapabilities"]["image"], true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "say real")["result"]["stopReason"], "end_turn");
    let shown = agent.all_updates(&session);
    assert!(shown.iter().any(|u| u["size"] == 128000), "{shown:#?}");
    agent.finish();
    // Replayed as it is, without --bless: the window and the image capability come back.
    assert_replays_unchanged(scratch.path(), &arc, &[]);
}

/// An initialized agent recording to `arc`, its model the profile `real` (a 64,000-token
/// window) at `base_url`, with more `sections` of the config file.
fn recording_on(arc: &Path, base_url: &str, sections: &str) -> Agent {
    let mut options = AgentOptions::script(vec![]);
    options.model_args = Some(Vec::new());
    options.plugins = vec![tool_bash_plugin(), tool_fs_plugin(), hello_plugin()];
    options.record = Some(arc.to_owned());
    options.config = Some(format!(
        "model = \"real\"\n{sections}[models.real]\nbase_url = \"{base_url}\"\nmodel = \"real-model\"\ncontext_window = 64000\n"
    ));
    let mut agent = Agent::start(options);
    agent.initialize(true);
    agent
}

#[test]
fn a_session_with_a_plan_a_background_task_and_a_compaction_replays_unchanged() {
    use hotsh_tests::{FakeProvider, Reply, delta};
    let scratch = tempfile::tempdir().unwrap();
    let arc = scratch.path().join("long.arc");
    let call = |id: &str, name: &str, arguments: Value| {
        Reply::Stream(vec![
            delta(
                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": id, "type": "function",
                    "function": {"name": name, "arguments": arguments.to_string()}}]}),
                None,
            ),
            delta(json!({}), Some("tool_calls")),
            "data: [DONE]\n\n".into(),
        ])
    };
    let text = |text: &str| {
        Reply::Stream(vec![
            delta(json!({"role": "assistant", "content": text}), Some("stop")),
            "data: [DONE]\n\n".into(),
        ])
    };
    let provider = FakeProvider::start(vec![
        call("c1", "update_plan", json!({"plan": [{"step": "Count", "status": "in_progress"}]})),
        // Started and stopped: how it ends does not depend on timing.
        call("c2", "bash", json!({"command": "exec sleep 300", "run_in_background": true})),
        call("c3", "bash_kill", json!({"task_id": "bash-1"})),
        text("Counted."),
        text("SUMMARY: counted."),
    ]);
    let mut agent = recording_on(&arc, &provider.base_url, "");
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "count")["result"]["stopReason"], "end_turn");
    assert_eq!(agent.prompt(&session, "/compact")["result"]["stopReason"], "end_turn");
    agent.finish();
    let recorded = std::fs::read_to_string(&arc).unwrap();
    for needed in ["update_plan", "bash-1", "/compact", "SUMMARY: counted."] {
        assert!(recorded.contains(needed), "{needed} is not in the arc");
    }
    assert_replays_unchanged(scratch.path(), &arc, &[]);
}

#[test]
fn a_session_whose_requests_cleared_older_output_replays_unchanged() {
    use hotsh_tests::{FakeProvider, Reply, delta};
    let scratch = tempfile::tempdir().unwrap();
    let arc = scratch.path().join("cleared.arc");
    let call = |turn: usize| {
        let arguments = json!({"command": format!("seq {turn}000 {turn}199")}).to_string();
        Reply::Stream(vec![
            delta(
                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "bash", "arguments": arguments}}]}),
                Some("tool_calls"),
            ),
            "data: [DONE]\n\n".into(),
        ])
    };
    let done = Reply::Stream(vec![
        delta(json!({"role": "assistant", "content": "ok"}), Some("stop")),
        "data: [DONE]\n\n".into(),
    ]);
    let provider =
        FakeProvider::start((1..=6).flat_map(|turn| [call(turn), done.clone()]).collect());
    // 500 tokens of the newest output whole: the oldest of six 1,000-byte outputs are cleared.
    let mut agent = recording_on(&arc, &provider.base_url, "[session]\nkeep_tool_output = 500\n");
    let session = agent.new_session();
    for turn in 1..=6 {
        let response = agent.prompt(&session, &format!("turn {turn}"));
        assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    }
    agent.finish();
    let recorded = std::fs::read_to_string(&arc).unwrap();
    assert!(recorded.contains("[hotsh cleared this older output"), "no request cleared any");
    assert_replays_unchanged(scratch.path(), &arc, &[]);
    // The replay clears what the recording did because the arc says how much it kept: told
    // nothing (as an arc recorded before clearing), it sends every output whole, and the
    // requests differ.
    let setting = "\"keep_tool_output\":500,";
    assert!(recorded.lines().next().unwrap().contains(setting), "the header keeps the setting");
    let older = scratch.path().join("older.arc");
    std::fs::write(&older, recorded.replacen(setting, "", 1)).unwrap();
    let (ok, stdout, stderr) = replay(scratch.path(), &[path_str(&older)]);
    assert!(!ok && stdout.contains("1 failed"), "{stdout}\n{stderr}");
}

#[test]
fn a_session_whose_command_the_sandbox_refused_replays_unchanged() {
    let scratch = tempfile::tempdir().unwrap();
    let arc = scratch.path().join("refused.arc");
    let mut options = AgentOptions::script(vec![
        // One stream: stdout and stderr are two pipes, whose order is not kept.
        bash_call("touch /etc/hotsh-arc-refused 2>&1; echo rc=$?"),
        say("It was refused."),
    ]);
    options.plugins = vec![tool_bash_plugin(), tool_fs_plugin(), hello_plugin()];
    options.record = Some(arc.clone());
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "try")["result"]["stopReason"], "end_turn");
    agent.finish();
    let recorded = std::fs::read_to_string(&arc).unwrap();
    assert!(recorded.contains(
        "[hotsh sandbox: workspace-write mode refused a write to /etc/hotsh-arc-refused"
    ));
    // Replayed with the escalations the recording could offer (under the replay's default
    // cap the agent would say none can be asked for).
    assert_replays_unchanged(scratch.path(), &arc, &["--sandbox", "danger-full-access"]);
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh replay")]
fn an_arc_needing_a_plugin_the_replay_lacks_fails_naming_it_and_is_never_blessed() {
    let scratch = tempfile::tempdir().unwrap();
    let arc = scratch.path().join("greet.arc");
    let mut options =
        AgentOptions::script(vec![tool_call_with("hello", json!({"name": "CI"})), say("Done.")]);
    // The built-in plugins in the agent's directory, the author's plugin in a directory of
    // its own given after it: loaded last, offered in the one documented order all the same.
    options.plugins = vec![tool_bash_plugin(), tool_fs_plugin()];
    options.extra_plugin_dirs = vec!["my-plugin".into()];
    options.record = Some(arc.clone());
    let mut agent = Agent::start(options);
    std::fs::create_dir_all(agent.workdir.join("my-plugin")).unwrap();
    std::fs::copy(
        hello_plugin(),
        agent.workdir.join("my-plugin").join(hello_plugin().file_name().unwrap()),
    )
    .unwrap();
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "greet")["result"]["stopReason"], "end_turn");
    assert!(agent.last_tool_result().0.contains("CI"), "{:?}", agent.last_tool_result());
    agent.finish();
    // Every plugin in one directory: it replays unchanged.
    assert_replays_unchanged(scratch.path(), &arc, &[]);
    // Without the author's plugin: it fails naming the tool, and --bless keeps the arc.
    let recorded = std::fs::read_to_string(&arc).unwrap();
    let dir = scratch.path().join("without-hello");
    std::fs::create_dir_all(&dir).unwrap();
    for plugin in [tool_bash_plugin(), tool_fs_plugin()] {
        std::os::unix::fs::symlink(&plugin, dir.join(plugin.file_name().unwrap())).unwrap();
    }
    for bless in [false, true] {
        let mut command = Command::new(hotsh_binary());
        command.args(["replay", "--no-default-plugins", "--plugin-dir"]).arg(&dir).arg(&arc);
        if bless {
            command.arg("--bless");
        }
        let output = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(!output.status.success(), "bless {bless}: {stdout}");
        assert!(
            stdout.contains("the arc's model was offered `hello` that this replay does not offer")
                && stdout.contains("give its directory with --plugin-dir"),
            "{stdout}"
        );
        assert_eq!(std::fs::read_to_string(&arc).unwrap(), recorded, "bless {bless}");
    }
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh replay")]
fn a_reload_of_a_plugin_no_directory_holds_fails_at_once_naming_it() {
    let scratch = tempfile::tempdir().unwrap();
    let arc = copy_arc(scratch.path(), "reload.arc");
    // The plugins of the README's build: no `hello` example.
    let dir = scratch.path().join("without-hello");
    std::fs::create_dir_all(&dir).unwrap();
    for plugin in [tool_bash_plugin(), tool_fs_plugin()] {
        std::os::unix::fs::symlink(&plugin, dir.join(plugin.file_name().unwrap())).unwrap();
    }
    let output = Command::new(hotsh_binary())
        .args(["replay", "--no-default-plugins", "--timeout", "120", "--plugin-dir"])
        .arg(&dir)
        .arg(&arc)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{stdout}");
    assert!(
        stdout.contains(
            "the arc reloads libhotsh_plugin_hello.so, which none of the plugin directories holds"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("libhotsh_tool_bash.so"), "the plugins it has are named: {stdout}");
    // It did not wait for what the reload would have sent.
    assert!(!stdout.contains("timed out"), "{stdout}");
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs mkfifo")]
fn a_fixture_outside_the_arcs_folder_or_holding_a_fifo_is_refused() {
    let scratch = tempfile::tempdir().unwrap();
    let arc = copy_arc(scratch.path(), "exit-status.arc");
    let original = std::fs::read_to_string(&arc).unwrap();
    for fixture in ["../project", "/etc"] {
        let outside =
            original.replacen("\"fixture\":\"project\"", &format!("\"fixture\":\"{fixture}\""), 1);
        assert_ne!(outside, original);
        std::fs::write(&arc, outside).unwrap();
        let (ok, stdout, _) = replay(scratch.path(), &[path_str(&arc)]);
        assert!(!ok, "{stdout}");
        assert!(
            stdout.contains(&format!(
                "the fixture `{fixture}` must be a folder inside the arc's own folder"
            )),
            "{stdout}"
        );
    }
    // A FIFO in the fixture: refused, not opened (opening one waits for a writer).
    std::fs::write(&arc, &original).unwrap();
    let fifo = scratch.path().join("project").join("pipe");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let (ok, stdout, _) = replay(scratch.path(), &[path_str(&arc), "--timeout", "120"]);
    assert!(!ok, "{stdout}");
    assert!(stdout.contains("is not a file, a folder or a link"), "{stdout}");
}

#[test]
fn an_arc_past_the_limits_is_refused_at_once_naming_the_limit() {
    let scratch = tempfile::tempdir().unwrap();
    // More entries than a replay holds (each one small): refused at the first one too many.
    let many = scratch.path().join("many.arc");
    let entry = r#"{"client":{"jsonrpc":"2.0","method":"hotsh/none"}}"#;
    let mut text = String::from("{\"arc\":1}\n");
    for _ in 0..200_001 {
        text.push_str(entry);
        text.push('\n');
    }
    std::fs::write(&many, text).unwrap();
    // A file larger than any arc replayed (sparse: no disk is used), refused before reading.
    let huge = scratch.path().join("huge.arc");
    let file = std::fs::File::create(&huge).unwrap();
    file.set_len(300 << 20).unwrap();
    let (ok, stdout, _) = replay(scratch.path(), &[path_str(&many), path_str(&huge)]);
    assert!(!ok, "{stdout}");
    assert_reported(
        &stdout,
        &format!(
            "{}:200002: the arc holds more than 200000 entries, the most hotsh replays",
            many.display()
        ),
    );
    assert_reported(
        &stdout,
        &format!("{}: the arc is 300 MiB; hotsh replays arcs of at most 256 MiB", huge.display()),
    );
}

#[test]
fn a_long_arc_stops_at_its_timeout_however_much_it_holds() {
    let scratch = tempfile::tempdir().unwrap();
    let arc = scratch.path().join("long.arc");
    let work = scratch.path().join("work");
    std::fs::create_dir(&work).unwrap();
    // 20,000 prompts, each answered by the model: a valid arc far too long for its 3 s (an
    // arc made by `sessions export` has no agent side; `--bless` fills it in). Reading it
    // counts towards the timeout too (well under a second alone, over one on a busy machine).
    let turns = 20_000;
    let mut lines = vec![
        json!({"arc": 1, "timeout_s": 3}),
        json!({"client": {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": {}}}}),
        json!({"client": {"jsonrpc": "2.0", "id": 1, "method": "session/new",
            "params": {"cwd": work, "mcpServers": []}}}),
    ];
    for turn in 0..turns {
        lines.push(json!({"client": {"jsonrpc": "2.0", "id": turn + 2, "method": "session/prompt",
            "params": {"sessionId": "s-1", "prompt": [{"type": "text", "text": "again"}]}}}));
        lines.push(json!({"model": {"session": "s-1", "response": {"text": "ok"}}}));
    }
    let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
    std::fs::write(&arc, &text).unwrap();
    // Built first (a fresh checkout builds for minutes): the bound below is the replay's.
    let _ = hotsh_binary();
    let started = std::time::Instant::now();
    let (ok, stdout, _) = replay(scratch.path(), &["--bless", path_str(&arc)]);
    assert!(!ok, "{stdout}");
    // Well before it could have played its 20,000 turns (each a few milliseconds here).
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "the timeout stopped it");
    assert!(stdout.contains("0 passed, 1 failed, 0 blessed"), "{stdout:.2000}");
    // On a busy machine the time may run out before the first turn ('while reading …').
    if !stdout.contains("timed out after 3 s while ") {
        assert!(
            stdout.contains("timed out after 3 s waiting for the answer to the request of line"),
            "{stdout:.2000}"
        );
        assert!(
            stdout.contains("not blessed: the replay timed out before it had played the whole arc"),
            "{stdout:.2000}"
        );
    }
    assert_eq!(std::fs::read_to_string(&arc).unwrap(), text, "the arc is left as it was");
}

/// A client capability left at its default (`false`, or only defaults inside).
fn is_default_capability(value: &Value) -> bool {
    match value {
        Value::Bool(false) => true,
        Value::Object(fields) => fields.values().all(is_default_capability),
        _ => false,
    }
}

/// `arc`'s lines of each side (`client`, `agent`, `model`, in order), with what differs
/// between two recordings of one session by nature made alike: the session's id, the request
/// ids (numbered in order of appearance), commands' durations, and client capabilities
/// spelled out at their defaults.
fn comparable_sides(arc: &Path) -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(arc).unwrap();
    let mut lines: Vec<Value> =
        text.lines().skip(1).map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut names: Vec<String> = Vec::new();
    let mut name = |value: &Value| -> String {
        let key = value.to_string();
        let n = names.iter().position(|k| *k == key).unwrap_or_else(|| {
            names.push(key);
            names.len() - 1
        });
        format!("id-{n}")
    };
    for line in &mut lines {
        for side in ["client", "agent"] {
            let Some(message) = line.get_mut(side) else { continue };
            if let Some(id) = message.get_mut("id") {
                *id = json!(name(id));
            }
            if let Some(Value::Object(capabilities)) =
                message.pointer_mut("/params/clientCapabilities")
            {
                capabilities.retain(|_, value| !is_default_capability(value));
            }
            if let Some(duration) = message.pointer_mut("/params/update/rawOutput/duration_ms") {
                *duration = json!("<ms>");
            }
        }
    }
    let session = lines
        .iter()
        .find_map(|l| l["agent"]["result"]["sessionId"].as_str().map(str::to_owned))
        .unwrap();
    ["client", "agent", "model"]
        .into_iter()
        .map(|side| {
            let of_side = lines
                .iter()
                .filter_map(|l| l.get(side))
                .map(|m| m.to_string().replace(&session, "<session>"))
                .collect();
            (side.to_owned(), of_side)
        })
        .collect()
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh run")]
fn run_record_and_acp_record_give_the_same_arc_for_the_same_session() {
    let mut options = AgentOptions::script(vec![
        bash_call("echo same"),
        tool_call_with("hello", json!({"name": "arcs"})),
        say("Done."),
    ]);
    options.plugins = vec![tool_bash_plugin(), tool_fs_plugin(), hello_plugin()];
    let scratch = tempfile::tempdir().unwrap();
    let (through_acp, through_run) =
        (scratch.path().join("acp.arc"), scratch.path().join("run.arc"));
    options.record = Some(through_acp.clone());
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "the same")["result"]["stopReason"], "end_turn");
    // The same session through `hotsh run`: the same model, plugins, folder and data dir.
    let dir = agent.dir.path();
    let output = Command::new(hotsh_binary())
        .args(["run", "--no-default-plugins", "--record", path_str(&through_run)])
        .arg("--plugin-dir")
        .arg(dir.join("plugins"))
        .arg("--model")
        .arg(format!("script:{}", dir.join("script.json").display()))
        .arg("--cwd")
        .arg(&agent.workdir)
        .arg("the same")
        .env("TMPDIR", dir)
        .env("HOTSH_DATA_DIR", dir.join("data"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    agent.finish();
    let header = |arc: &Path| -> Value {
        let text = std::fs::read_to_string(arc).unwrap();
        serde_json::from_str(text.lines().next().unwrap()).unwrap()
    };
    assert_eq!(header(&through_acp), header(&through_run));
    let (acp, run) = (comparable_sides(&through_acp), comparable_sides(&through_run));
    for ((side, acp), (_, run)) in acp.iter().zip(&run) {
        assert!(!acp.is_empty(), "no {side} line");
        for (n, (a, r)) in acp.iter().zip(run).enumerate() {
            assert_eq!(a, r, "{side} message {n} differs");
        }
        assert_eq!(acp.len(), run.len(), "{side} messages");
    }
    assert_replays_unchanged(scratch.path(), &through_run, &[]);
}

#[test]
fn a_session_that_changes_its_model_and_effort_replays_unchanged() {
    use hotsh_tests::{FakeProvider, Reply, delta};
    let scratch = tempfile::tempdir().unwrap();
    let arc = scratch.path().join("two-models.arc");
    let text = |text: &str| {
        Reply::Stream(vec![
            delta(json!({"role": "assistant", "content": text}), Some("stop")),
            "data: [DONE]\n\n".into(),
        ])
    };
    let provider =
        FakeProvider::start(vec![text("From the small one."), text("From the big one.")]);
    let mut options = AgentOptions::script(vec![]);
    options.model_args = Some(Vec::new());
    options.plugins = vec![tool_bash_plugin(), tool_fs_plugin(), hello_plugin()];
    options.record = Some(arc.clone());
    // Two profiles: the second has a larger window, compacts later, and effort levels.
    options.config = Some(format!(
        "model = \"small\"\n\
         [models.small]\nbase_url = \"{url}\"\nmodel = \"small-model\"\ncontext_window = 32000\n\
         [models.big]\nbase_url = \"{url}\"\nmodel = \"big-model\"\ncontext_window = 256000\ncompact_at = 0.5\n\
         [models.big.effort]\nlevels = [\"low\", \"high\"]\ndefault = \"low\"\n",
        url = provider.base_url
    ));
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "small")["result"]["stopReason"], "end_turn");
    for (option, value) in [("model", "big"), ("reasoning_effort", "high")] {
        let set = agent.call(
            "session/set_config_option",
            json!({"sessionId": session, "configId": option, "value": value}),
        );
        assert!(set.get("result").is_some(), "{set}");
    }
    assert_eq!(agent.prompt(&session, "big")["result"]["stopReason"], "end_turn");
    let shown = agent.all_updates(&session);
    assert!(shown.iter().any(|u| u["size"] == 256000), "{shown:#?}");
    agent.finish();
    let header: Value =
        serde_json::from_str(std::fs::read_to_string(&arc).unwrap().lines().next().unwrap())
            .unwrap();
    let offered = &header["recorded_model"]["offered"];
    assert_eq!(offered[0]["name"], "small");
    assert_eq!(offered[1]["name"], "big");
    assert_eq!(offered[1]["efforts"], json!(["low", "high"]));
    // Replayed as it is: the menu, the windows, the change of model and of effort come back.
    assert_replays_unchanged(scratch.path(), &arc, &[]);
    // Without the offered models (as an arc recorded before they were kept), the replay's
    // scripted model is offered alone, and the session cannot change to `big`.
    let text = std::fs::read_to_string(&arc).unwrap();
    let mut header = header;
    header["recorded_model"].as_object_mut().unwrap().remove("offered");
    let first = text.lines().next().unwrap();
    std::fs::write(&arc, text.replacen(first, &header.to_string(), 1)).unwrap();
    let (ok, stdout, _) = replay(scratch.path(), &[path_str(&arc)]);
    assert!(!ok && stdout.contains("unknown model `big`"), "{stdout}");
}

#[test]
fn a_session_with_a_rule_allowed_for_it_replays_unchanged() {
    let scratch = tempfile::tempdir().unwrap();
    let arc = scratch.path().join("rule.arc");
    let escalated = json!({"tool_calls": [{"name": "bash", "arguments": {
        "command": "touch first",
        "sandbox_permissions": "workspace-write",
        "justification": "The user asked for two files."
    }}]});
    let mut options =
        AgentOptions::script(vec![escalated, bash_call("touch second"), say("Both made.")]);
    options.plugins = vec![tool_bash_plugin(), tool_fs_plugin(), hello_plugin()];
    options.record = Some(arc.clone());
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    let narrowed = agent.call(
        "session/set_config_option",
        json!({"sessionId": session, "configId": "sandbox_mode", "value": "read-only"}),
    );
    assert!(narrowed.get("result").is_some(), "{narrowed}");
    let allow =
        json!({"result": {"outcome": {"outcome": "selected", "optionId": "allow-session"}}});
    agent.prompt_answering_permission(&session, allow);
    assert!(agent.workdir.join("first").exists() && agent.workdir.join("second").exists());
    agent.finish();
    // Replayed under the default cap (workspace-write): the rule is made and used again.
    assert_replays_unchanged(scratch.path(), &arc, &[]);
}

/// Hooks are recorded with the arc and run again on replay (never the replaying user's own):
/// a user's PreToolUse hook that blocks a call, a project's PostToolUse hook allowed for the
/// session, their cards and the context they gave.
#[test]
fn a_session_with_hooks_replays_unchanged() {
    let scratch = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let arc = scratch.path().join("hooks.arc");
    let write = |path: &Path, hooks: Value| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, json!({ "hooks": hooks }).to_string()).unwrap();
    };
    write(
        &home.path().join(".claude/settings.json"),
        json!({"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command",
            "command": "grep -q forbidden && { echo 'not that one' >&2; exit 2; }; exit 0"}]}]}),
    );
    // Claude Code's permission rules of the same file are recorded with the hooks.
    let settings = home.path().join(".claude/settings.json");
    let mut file: Value = serde_json::from_slice(&std::fs::read(&settings).unwrap()).unwrap();
    file["permissions"] = json!({"deny": ["Bash(rm:*)"]});
    std::fs::write(&settings, file.to_string()).unwrap();
    let mut options = AgentOptions::script(vec![
        bash_call("echo forbidden"),
        bash_call("echo allowed"),
        bash_call("rm -f nothing"),
        say("Done."),
    ]);
    options.plugins = vec![tool_bash_plugin(), tool_fs_plugin(), hello_plugin()];
    options.record = Some(arc.clone());
    options.env.push(("HOME".into(), home.path().display().to_string()));
    let mut agent = Agent::start(options);
    agent.initialize(true);
    write(
        &agent.workdir.join(".claude/settings.json"),
        json!({"PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command",
            "command": "echo project-hook-saw-it"}]}]}),
    );
    let session = agent.new_session();
    let allow =
        json!({"result": {"outcome": {"outcome": "selected", "optionId": "hooks-session"}}});
    agent.prompt_answering_permission(&session, allow);
    let results = agent.tool_results();
    assert!(results[0].1 && results[0].0.contains("not that one"), "{results:?}");
    assert!(results[2].1 && results[2].0.contains("permissions.deny `Bash(rm:*)`"), "{results:?}");
    agent.finish();
    let recorded = std::fs::read_to_string(&arc).unwrap();
    assert!(recorded.contains(r#"{"hooks":{"#), "no hooks entry: {recorded}");
    assert!(
        recorded.contains(r#""permissions":[{"kind":"deny","rule":"Bash(rm:*)""#),
        "{recorded}"
    );
    assert_eq!(recorded.matches("PreToolUse hook (exit 2)").count(), 1, "{recorded}");
    assert_eq!(recorded.matches("PostToolUse hook (exit 0)").count(), 1, "{recorded}");
    // The project's settings file is gone on replay: the arc's hooks run, not the files'.
    assert_replays_unchanged(scratch.path(), &arc, &[]);
    // Without its hooks entries the same arc fails: the hooks' cards are compared.
    let stripped = scratch.path().join("stripped.arc");
    let kept: Vec<&str> = recorded.lines().filter(|l| !l.starts_with(r#"{"hooks":"#)).collect();
    std::fs::write(&stripped, kept.join("\n")).unwrap();
    // (Failing either way: the cards differ, or never come before the bound.)
    let (ok, stdout, _) = replay(scratch.path(), &[path_str(&stripped), "--timeout", "10"]);
    assert!(!ok && stdout.contains("1 failed"), "{stdout}");
}

/// A plugin's hooks (hotsh-abi 1.1) run again on replay with the plugin the arc was recorded
/// with: their cards and what they decided replay unchanged.
#[test]
fn a_session_with_a_plugins_hooks_replays_unchanged() {
    let scratch = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let arc = scratch.path().join("plugin-hooks.arc");
    let hooked = hotsh_tests::hooked_build("one");
    let mut options = AgentOptions::script(vec![
        bash_call("echo plugin-forbidden"),
        bash_call("echo plugin-rewrite-me"),
        say("Done."),
    ]);
    options.plugins = vec![tool_bash_plugin(), hooked.clone()];
    options.record = Some(arc.clone());
    options.env.push(("HOME".into(), home.path().display().to_string()));
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    let results = agent.tool_results();
    assert!(results[0].1 && results[1].0.contains("rewritten-by-plugin"), "{results:?}");
    agent.finish();
    let recorded = std::fs::read_to_string(&arc).unwrap();
    assert!(recorded.contains("PreToolUse hook (answered): plugin hooked"), "{recorded}");
    // The replay's plugins: the two the arc was recorded with.
    let plugins = scratch.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    for plugin in [tool_bash_plugin(), hooked] {
        std::os::unix::fs::symlink(&plugin, plugins.join(plugin.file_name().unwrap())).unwrap();
    }
    assert_replays_unchanged(scratch.path(), &arc, &[]);
}

#[test]
fn a_session_with_a_subagent_replays_unchanged() {
    use hotsh_tests::{FakeProvider, Reply};
    let scratch = tempfile::tempdir().unwrap();
    let arc = scratch.path().join("subagent.arc");
    let provider = FakeProvider::start(vec![
        Reply::calls(&[("task", json!({"description": "Echo", "prompt": "Run echo sub."}))]),
        Reply::calls(&[("bash", json!({"command": "echo sub"}))]),
        Reply::text("It printed sub."),
        Reply::text("The subagent saw sub."),
    ]);
    let mut options = AgentOptions::script(vec![]);
    options.model_args = Some(Vec::new());
    options.plugins = vec![tool_bash_plugin(), tool_fs_plugin(), hello_plugin()];
    options.config = Some(format!(
        "model = \"real\"\nrecord = {:?}\n[models.real]\nbase_url = \"{}\"\nmodel = \"real-model\"\ncontext_window = 128000\n",
        arc.display().to_string(),
        provider.base_url
    ));
    let mut agent = Agent::start(options);
    agent.initialize_with(
        json!({"terminal": true, "subagents": {}, "_meta": {"terminal_output": true}}),
    );
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "delegate")["result"]["stopReason"], "end_turn");
    let shown = agent.all_updates(&session);
    assert!(shown.iter().any(|u| u["sessionUpdate"] == "subagent_update"), "{shown:#?}");
    agent.finish();
    assert_replays_unchanged(scratch.path(), &arc, &[]);
}

/// A session reloaded where it is open (as Zed does when a thread is opened again): the
/// replay's updates, which pass the SDK by in batches, are recorded one line each, and the
/// arc replays unchanged.
#[test]
fn a_session_loaded_again_while_recorded_replays_unchanged() {
    let scratch = tempfile::tempdir().unwrap();
    let arc = scratch.path().join("loaded.arc");
    let calls = 40;
    let mut script: Vec<Value> =
        (0..calls).map(|i| bash_call(&format!("seq -f 'line-{i}-%g' 1 30"))).collect();
    script.extend([say("Printed."), say("Again.")]);
    let mut options = AgentOptions::script(script);
    options.plugins = vec![tool_bash_plugin(), tool_fs_plugin(), hello_plugin()];
    options.record = Some(arc.clone());
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "print")["result"]["stopReason"], "end_turn");
    let cwd = agent.workdir.clone();
    let (updates, answer) = agent.load(&session, &cwd);
    assert!(answer.get("result").is_some(), "{answer}");
    let cards = updates.iter().filter(|u| u["sessionUpdate"] == "tool_call").count();
    assert_eq!(cards, calls, "the thread came back whole");
    assert_eq!(agent.prompt(&session, "again")["result"]["stopReason"], "end_turn");
    agent.finish();

    let text = std::fs::read_to_string(&arc).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let load = lines.iter().position(|l| l["client"]["method"] == "session/load").unwrap();
    let replayed = lines[load..]
        .iter()
        .take_while(|l| l["agent"].get("id").is_none())
        .filter(|l| l["agent"]["method"] == "session/update")
        .filter(|l| l["agent"]["params"]["update"]["sessionUpdate"] == "tool_call")
        .count();
    assert_eq!(replayed, calls, "each replayed update is a line of the arc");
    assert_replays_unchanged(scratch.path(), &arc, &[]);
}
