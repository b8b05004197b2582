//! Hostile input: bytes on stdin, plugins that print, hang, crash or flood, other users
//! sharing the temp directory. Each has a defined outcome and the agent keeps serving.

use hotsh_tests::{
    Agent, AgentOptions, Interface, corrupted_copy, install_like_cargo, misbehaving_build,
    reloadable_build, say, tool_bash_plugin, tool_call,
};
use serde_json::json;

#[test]
fn a_line_that_is_not_utf8_gets_a_parse_error_and_the_agent_keeps_serving() {
    let mut agent = Agent::start(AgentOptions::script(vec![say("still here")]));
    agent.initialize(true);
    let session = agent.new_session();
    agent.send_bytes(b"\xff\xfe\xfd\n");
    // Invalid UTF-8 inside an otherwise well-formed request, too.
    agent.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"session/new\",\"params\":{\"cwd\":\"/tmp/\xc3\"}}\n");
    let first = agent.wait_for_from(0, |m| m["error"]["code"] == -32700);
    assert_eq!(
        agent.received[first]["error"]["data"]["line"],
        "<a line of 3 bytes that is not UTF-8>"
    );
    let second = agent.wait_for_from(first + 1, |m| m["error"]["code"] == -32700);
    let line = agent.received[second]["error"]["data"]["line"].as_str().unwrap();
    assert!(line.ends_with(" bytes that is not UTF-8>"), "{line}");
    assert_eq!(agent.prompt(&session, "hello")["result"]["stopReason"], "end_turn");
}

#[test]
fn a_huge_malformed_line_is_not_repeated_back() {
    let mut agent = Agent::start(AgentOptions::script(vec![]));
    let mut line = b"{\"jsonrpc\": \"2.0\", \"id\": 1, ".to_vec();
    line.extend(std::iter::repeat_n(b'x', 50 << 20));
    line.push(b'\n');
    agent.send_bytes(&line);
    let error = agent.wait_for(|m| m["error"]["code"] == -32700);
    let echoed = error["error"]["data"]["line"].as_str().unwrap();
    assert!(echoed.len() < 400, "{} bytes repeated", echoed.len());
    assert!(echoed.starts_with("<malformed JSON, 52428828 bytes, starting "), "{echoed}");
    agent.initialize(true);
    agent.new_session();
}

#[test]
fn a_plugin_printing_to_stdout_cannot_corrupt_the_protocol() {
    let mut options =
        AgentOptions::script(vec![tool_call("print_to_stdout"), say("after the print")]);
    options.plugins = vec![misbehaving_build("well-behaved")];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    // The harness fails on any stdout line that is not JSON; the turn completes.
    assert_eq!(agent.prompt(&session, "print")["result"]["stopReason"], "end_turn");
    assert_eq!(agent.last_tool_result(), ("printed".to_owned(), false));
    agent.wait_for_stderr("garbage from a plugin on stdout");
}

#[test]
fn a_plugin_result_of_200_mib_is_capped_with_a_marker() {
    let mut options = AgentOptions::script(vec![tool_call("huge_result"), say("ok")]);
    options.plugins = vec![misbehaving_build("well-behaved")];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "flood")["result"]["stopReason"], "end_turn");
    let (text, is_error) = agent.last_tool_result();
    assert!(!is_error);
    assert!(text.len() < 300 << 10, "the model got {} bytes", text.len());
    assert!(text.starts_with("HEAD-OF-HUGE\n"), "{}", &text[..40]);
    assert!(text.ends_with("TAIL-OF-HUGE"), "the tail is kept");
    assert!(text.contains(" bytes of the plugin's result omitted …]"), "no marker");
    let peak = agent.peak_rss_kib();
    assert!(peak < 600 * 1024, "hotsh peaked at {peak} KiB");
}

#[test]
fn a_plugins_broken_text_and_huge_card_fields_are_bounded_before_the_client_and_the_log() {
    let data = tempfile::tempdir().unwrap();
    let mut options = AgentOptions::script(vec![tool_call("hostile_fields"), say("ok")]);
    options.plugins = vec![misbehaving_build("well-behaved")];
    options.env = vec![("HOTSH_DATA_DIR".into(), data.path().to_string_lossy().into_owned())];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    // The harness fails on any stdout line that is not JSON (or not UTF-8).
    assert_eq!(agent.prompt(&session, "go")["result"]["stopReason"], "end_turn");
    let (text, _) = agent.last_tool_result();
    assert_eq!(text, "broken\u{fffd}\u{fffd}!");
    let updates = agent.updates(&session);
    let started = updates.iter().find(|u| u["sessionUpdate"] == "tool_call").unwrap();
    let cwd = started["_meta"]["terminal_info"]["cwd"].as_str().unwrap();
    assert!(cwd.len() < 80 << 10, "a card's cwd of {} bytes", cwd.len());
    let finished = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
        .unwrap();
    let locations = finished["locations"].as_array().unwrap();
    assert!(locations.len() <= 256, "{} locations", locations.len());
    assert!(locations.iter().all(|l| l["path"].as_str().unwrap().len() < 80 << 10));
    assert_eq!(finished["title"], "title\u{fffd}\u{fffd}!");
    let line_bytes: usize = serde_json::to_string(finished).unwrap().len();
    assert!(line_bytes < 8 << 20, "a card update of {line_bytes} bytes");
    // The log is bounded too, and loads.
    agent.call("session/close", json!({"sessionId": session}));
    let logs: Vec<_> = std::fs::read_dir(data.path().join("sessions")).unwrap().flatten().collect();
    let size = logs[0].metadata().unwrap().len();
    assert!(size < 16 << 20, "the log grew to {size} bytes");
    let (_, loaded) = agent.load(&session, &agent.workdir.clone());
    assert!(loaded.get("result").is_some(), "{loaded}");
}

/// Starts an agent with build A of `reloadable` plus `bad` (another plugin file) in its
/// directory; returns the agent and the session after one good call.
fn agent_beside(bad: &std::path::Path, name: &str) -> (Agent, String) {
    let mut agent = Agent::start(AgentOptions::serving_reloadable_a(vec![
        tool_call("reloadable_build"),
        say("one"),
    ]));
    std::fs::copy(bad, agent.plugin_dir().join(name)).unwrap();
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "which?");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent.last_tool_result(), ("build A".to_owned(), false));
    (agent, session)
}

#[test]
fn builds_that_crash_or_hang_at_start_up_are_rejected_and_the_rest_load() {
    let scratch = tempfile::tempdir().unwrap();
    let crashing = scratch.path().join("crashing.so");
    corrupted_copy(&tool_bash_plugin(), 0x00, &crashing);
    // A name that sorts before the good plugin's (a bad file must not stop the ones after
    // it), and one after it (checked ahead of its load, beside the good one's check).
    let builds = [
        (crashing.clone(), "crashed with SIG"),
        (misbehaving_build("abort-in-manifest"), "crashed with SIGABRT"),
        (misbehaving_build("hang-in-tools"), "did not finish within 5 s"),
    ];
    for ((file, reason), name) in
        builds.iter().flat_map(|build| [(build, "libaaa_bad.so"), (build, "libzzz_bad.so")])
    {
        let (agent, _) = agent_beside(file, name);
        // The log line was written before the turn could start; the harness reads stderr on
        // a thread of its own.
        let rejection = |stderr: &str| {
            stderr
                .lines()
                .find(|l| l.contains("plugin build rejected") && l.contains(name))
                .map(str::to_owned)
        };
        let stderr = agent.wait_for_stderr(name);
        hotsh_tests::eventually("the rejection in the log", || {
            rejection(&agent.stderr()).is_some()
        });
        let rejected = rejection(&agent.stderr()).unwrap_or_else(|| panic!("{stderr}"));
        assert!(rejected.contains(reason), "{rejected}");
    }
}

#[test]
fn a_build_that_crashes_when_dropped_in_is_rejected_with_the_signal_named() {
    let scratch = tempfile::tempdir().unwrap();
    let crashing = scratch.path().join("crashing.so");
    corrupted_copy(&reloadable_build("B", Interface::Same), 0xff, &crashing);
    let responses =
        vec![tool_call("reloadable_build"), say("one"), tool_call("reloadable_build"), say("two")];
    let mut agent = Agent::start(AgentOptions::serving_reloadable_a(responses));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "which?");
    install_like_cargo(&crashing, &agent.plugin_dir(), "libhotsh_fixture_reloadable.so");
    let ((title, status, text), _) = agent.wait_for_plugin_card(&session, 0, "rejected");
    assert_eq!(title, "Plugin build rejected: libhotsh_fixture_reloadable.so");
    assert_eq!(status, "failed");
    assert!(text.contains("crashed with SIGILL in the process that checked it"), "{text}");
    assert!(text.contains("Build g1 of plugin reloadable keeps serving."), "{text}");
    agent.prompt(&session, "still?");
    assert_eq!(agent.last_tool_result(), ("build A".to_owned(), false));
}

#[test]
fn another_users_files_in_the_shared_temp_dir_change_nothing() {
    // What an agent of old wrote its plugin copies into, pre-planted by someone else: a file
    // where a directory was expected.
    let shared_tmp = tempfile::tempdir().unwrap();
    let planted = shared_tmp.path().join("hotsh-plugin-copies");
    std::fs::write(&planted, "planted").unwrap();
    let mut options =
        AgentOptions::serving_reloadable_a(vec![tool_call("reloadable_build"), say("ok")]);
    options.env = vec![("TMPDIR".into(), shared_tmp.path().to_string_lossy().into_owned())];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "which?");
    assert_eq!(agent.last_tool_result(), ("build A".to_owned(), false));
    assert_eq!(std::fs::read_to_string(&planted).unwrap(), "planted");
    // Nothing of the plugin was written to the shared temp directory at all: only the
    // agent's private output directory is there.
    let names: Vec<String> = std::fs::read_dir(shared_tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "hotsh-plugin-copies" && !n.starts_with("hotsh-"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh plugin check")]
fn plugin_check_reports_a_build_that_crashes_instead_of_crashing() {
    let scratch = tempfile::tempdir().unwrap();
    let crashing = scratch.path().join("libcrashing.so");
    corrupted_copy(&tool_bash_plugin(), 0xff, &crashing);
    let output = std::process::Command::new(hotsh_tests::hotsh_binary())
        .args(["plugin", "check"])
        .arg(&crashing)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with(&format!(
            "error: {} is rejected: loading it crashed with SIGILL",
            crashing.display()
        )),
        "{stderr}"
    );
}

#[test]
fn a_command_runs_in_a_session_of_its_own() {
    // Field 6 of /proc/<pid>/stat is the session id: the shell leads a session of its own.
    let command = "[ \"$(awk '{print $6}' /proc/$$/stat)\" = \"$$\" ] && echo own-session";
    // Unconfined: under bwrap the session is bwrap's, outside the command's PID namespace.
    let mut options = AgentOptions::script(vec![hotsh_tests::bash_call(command), say("ok")]);
    options.config = Some(crate::guarantees::UNCONFINED.to_owned());
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    assert_eq!(agent.last_tool_result(), ("own-session".to_owned(), false));
}

/// A client that keeps no log and closed its end of hotsh's stderr: every line hotsh (or its
/// command supervisor) writes there fails with a broken pipe, and is lost, and nothing else
/// is: the agent and its commands serve on, and it exits cleanly at the end of stdin.
#[test]
fn a_client_that_closed_hotshs_stderr_is_served_as_any_other() {
    let mut options = AgentOptions::script(vec![
        hotsh_tests::bash_call("echo through"),
        say("done"),
        hotsh_tests::bash_call("echo again"),
        say("done again"),
    ]);
    options.stderr_closed = true;
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let cwd = agent.workdir.to_string_lossy().into_owned();
    let session = agent.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let session = session["result"]["sessionId"].as_str().expect("a session").to_owned();
    assert_eq!(agent.prompt(&session, "run it")["result"]["stopReason"], "end_turn");
    assert_eq!(agent.last_tool_result(), ("through".to_owned(), false));
    // Requests that log warnings (a malformed line, an unknown method) are answered too.
    agent.send_bytes(b"{not json\n");
    agent.wait_for(|m| m["error"]["code"] == -32700);
    let unknown = agent.call("no/such_method", json!({}));
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    assert_eq!(agent.prompt(&session, "again")["result"]["stopReason"], "end_turn");
    assert_eq!(agent.last_tool_result(), ("again".to_owned(), false));
    assert!(agent.finish().success());
}
