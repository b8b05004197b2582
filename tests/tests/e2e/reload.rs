//! Hot reload: a new build in a plugin directory serves the next call; a bad build is
//! rejected with a clear reason while the previous one keeps serving; nothing host-owned is
//! lost.

use hotsh_tests::{
    Agent, AgentOptions, Interface, cargo_build_cargoflow, fixture_output_dir, fixture_plugin,
    fixture_target_dir, hello_plugin, hotsh_binary, install_like_cargo, private_copies,
    processes_matching, reloadable_build, say, tool_bash_plugin, tool_call,
    wait_for_file_containing, write_renamed_fixture,
};
use serde_json::json;

const LIBRARY: &str = "libhotsh_fixture_reloadable.so";

#[test]
fn call_in_flight_finishes_on_the_old_build_and_the_next_call_runs_the_new_one() {
    let gates = tempfile::tempdir().unwrap();
    let gate = gates.path().join("gate");
    let responses = vec![
        json!({"tool_calls": [{"name": "reloadable_gated", "arguments": {"gate": gate}}]}),
        tool_call("reloadable_build"),
        say("done"),
    ];
    let mut agent = Agent::start(AgentOptions::serving_reloadable_a(responses));
    agent.initialize(true);
    let session = agent.new_session();
    let prompt = agent.start_prompt(&session, "go");
    agent.wait_for(|m| m["params"]["update"]["title"] == "reloadable_gated (A)");

    // Build B lands while the call runs on A.
    install_like_cargo(&reloadable_build("B", Interface::Same), &agent.plugin_dir(), LIBRARY);
    let ((title, status, _), _) = agent.wait_for_plugin_card(&session, 0, "reloaded");
    assert!(title.starts_with("Plugin reloadable reloaded: build g"), "{title}");
    assert_eq!(status, "completed");

    std::fs::write(&gate, "").unwrap();
    let response = agent.response(prompt);
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(
        agent.tool_results(),
        vec![("build A".to_owned(), false), ("build B".to_owned(), false)],
        "the running call must finish on A, the next one run B"
    );
    // The model saw the new build's prompt section with its next request.
    let requests = agent.model_requests();
    assert!(requests[0]["system"].as_str().unwrap().contains("reloadable prompt from build A"));
    assert!(requests[1]["system"].as_str().unwrap().contains("reloadable prompt from build B"));
}

#[test]
fn a_real_cargo_build_in_a_watched_directory_is_served() {
    let target = cargo_build_cargoflow("first");
    let responses =
        vec![tool_call("cargoflow_build"), say("one"), tool_call("cargoflow_build"), say("two")];
    let mut options = AgentOptions::script(responses);
    options.extra_plugin_dirs = vec![target];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "which?");
    assert_eq!(agent.last_tool_result(), ("build first".to_owned(), false));
    // The author edits the source and runs cargo build; the agent serves the new build.
    cargo_build_cargoflow("second");
    let ((title, _, _), _) = agent.wait_for_plugin_card(&session, 0, "cargoflow reloaded");
    assert!(title.starts_with("Plugin cargoflow reloaded: build g"), "{title}");
    agent.prompt(&session, "and now?");
    assert_eq!(agent.last_tool_result(), ("build second".to_owned(), false));
}

/// Kills a child process when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `hotsh dev` running with its stdout and stderr collected line by line.
struct Dev {
    child: KillOnDrop,
    lines: std::sync::mpsc::Receiver<String>,
    stdout: Vec<String>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Dev {
    #[allow(clippy::disallowed_methods, reason = "starts hotsh dev")]
    fn start(crate_dir: &std::path::Path) -> Self {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new(hotsh_binary())
            .arg("dev")
            .arg(crate_dir)
            .arg("--")
            .arg("--quiet")
            .arg("--target-dir")
            .arg(fixture_target_dir())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (send, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = send.send(line);
            }
        });
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let collected = std::sync::Arc::clone(&stderr);
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut all = collected.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });
        Self { child: KillOnDrop(child), lines, stdout: Vec::new(), stderr }
    }

    /// Waits for the next stdout line starting with `prefix`; returns it.
    fn wait_for_line(&mut self, prefix: &str) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(hotsh_tests::DEADLINE)
                .unwrap_or_else(|_| panic!("no {prefix:?} line; so far: {:#?}", self.stdout));
            self.stdout.push(line.clone());
            if line.starts_with(prefix) {
                return line;
            }
        }
    }

    fn builds(&self) -> usize {
        self.stdout.iter().filter(|l| l.starts_with("hotsh dev: cargo build")).count()
    }
}

#[test]
fn hotsh_dev_rebuilds_on_save_reports_each_build_and_the_agent_serves_it() {
    // Labels new to every run, so each build is new content for the agent.
    let nonce = format!("{}-{:?}", std::process::id(), std::time::SystemTime::now());
    let crate_dir = tempfile::tempdir().unwrap();
    write_renamed_fixture(crate_dir.path(), "devloop", &format!("one {nonce}"));
    let responses =
        vec![tool_call("devloop_build"), say("one"), tool_call("devloop_build"), say("two")];
    let mut options = AgentOptions::script(responses);
    options.extra_plugin_dirs = vec![fixture_output_dir()];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();

    let mut dev = Dev::start(crate_dir.path());
    let accepted = dev.wait_for_line("hotsh dev: accepted ");
    let library = fixture_output_dir().join("libhotsh_fixture_devloop.so");
    assert_eq!(
        accepted,
        format!(
            "hotsh dev: accepted devloop 0.1.0 (tools: devloop_build, devloop_gated, devloop_hang) \
             from {}; a watching agent serves it now",
            library.display()
        )
    );
    let (_, after) = agent.wait_for_plugin_card(&session, 0, "devloop");
    agent.prompt(&session, "which?");
    assert_eq!(agent.last_tool_result(), (format!("build one {nonce}"), false));

    // A save that does not compile: one build, the error printed once, the agent untouched.
    let source = crate_dir.path().join("src/lib.rs");
    let good = std::fs::read_to_string(&source).unwrap();
    std::fs::write(&source, format!("{good}\nfn broken() -> u32 {{ \"not a number\" }}\n"))
        .unwrap();
    let failed = dev.wait_for_line("hotsh dev: build failed");
    assert!(failed.ends_with("a watching agent keeps the previous build"), "{failed}");

    // The author fixes it; nobody runs cargo by hand.
    write_renamed_fixture(crate_dir.path(), "devloop", &format!("two {nonce}"));
    dev.wait_for_line("hotsh dev: accepted devloop 0.1.0");
    agent.wait_for_plugin_card(&session, after, "devloop reloaded");
    agent.prompt(&session, "and now?");
    assert_eq!(agent.last_tool_result(), (format!("build two {nonce}"), false));

    // Three saves, three builds: cargo reading the sources does not trigger builds of its own.
    assert_eq!(dev.builds(), 3, "{:#?}", dev.stdout);
    let stderr = dev.stderr.lock().unwrap().clone();
    assert_eq!(stderr.matches("mismatched types").count(), 1, "{stderr}");
    drop(dev.child);
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh dev through a pipe")]
fn hotsh_dev_into_a_closed_pipe_exits_quietly() {
    let crate_dir = tempfile::tempdir().unwrap();
    write_renamed_fixture(crate_dir.path(), "devpipe", "piped");
    let script = format!(
        "{} dev {} -- --quiet --target-dir {} | true; echo \"status=${{PIPESTATUS[0]}}\"",
        hotsh_binary().display(),
        crate_dir.path().display(),
        fixture_target_dir().display()
    );
    let output = std::process::Command::new("bash").arg("-c").arg(&script).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(String::from_utf8_lossy(&output.stdout), "status=0\n", "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_plugin_directory_that_appears_later_or_is_recreated_stays_watched() {
    let scratch = tempfile::tempdir().unwrap();
    // Two levels that do not exist yet, as `target/debug` before the first build.
    let dir = scratch.path().join("target").join("debug");
    let responses =
        vec![tool_call("reloadable_build"), say("one"), tool_call("reloadable_build"), say("two")];
    let mut options = AgentOptions::script(responses);
    options.extra_plugin_dirs = vec![dir.clone()];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();

    std::fs::create_dir_all(&dir).unwrap();
    install_like_cargo(&reloadable_build("A", Interface::Same), &dir, LIBRARY);
    let (_, after) = agent.wait_for_plugin_card(&session, 0, "Plugin reloadable loaded");
    agent.prompt(&session, "which?");
    assert_eq!(agent.last_tool_result(), ("build A".to_owned(), false));

    // `cargo clean && cargo build`: the whole tree goes, then comes back with a new build.
    std::fs::remove_dir_all(scratch.path().join("target")).unwrap();
    let (_, after) = agent.wait_for_plugin_card(&session, after, "unloaded");
    std::fs::create_dir_all(&dir).unwrap();
    install_like_cargo(&reloadable_build("B", Interface::Same), &dir, LIBRARY);
    agent.wait_for_plugin_card(&session, after, "Plugin reloadable loaded");
    agent.prompt(&session, "and now?");
    assert_eq!(agent.last_tool_result(), ("build B".to_owned(), false));
}

#[test]
fn a_background_task_started_before_a_reload_is_readable_and_killable_after_it() {
    let marker = "sleep 30.0601";
    let responses = vec![
        json!({"tool_calls": [{"name": "bash", "arguments": {"command": format!("echo before; {marker}"), "run_in_background": true}}]}),
        say("started"),
        json!({"tool_calls": [
            {"name": "bash_output", "arguments": {"task_id": "bash-1"}},
            {"name": "bash_kill", "arguments": {"task_id": "bash-1"}}
        ]}),
        say("done"),
    ];
    let mut agent = Agent::start(AgentOptions::script(responses));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "start");
    let started = agent.last_tool_result().0;
    let output: std::path::PathBuf = started.rsplit("Full output: ").next().unwrap().trim().into();
    wait_for_file_containing(&output, "before");

    // A new build of tool-bash itself: same code, different bytes (a trailing byte).
    let mut bytes = std::fs::read(tool_bash_plugin()).unwrap();
    bytes.push(0);
    let rebuilt = agent.dir.path().join("rebuilt-tool-bash.so");
    std::fs::write(&rebuilt, bytes).unwrap();
    install_like_cargo(&rebuilt, &agent.plugin_dir(), "libhotsh_tool_bash.so");
    let ((title, _, _), _) = agent.wait_for_plugin_card(&session, 0, "reloaded");
    assert!(title.starts_with("Plugin tool-bash reloaded"), "{title}");

    agent.prompt(&session, "read and kill");
    let results = agent.tool_results();
    assert_eq!(results[1], ("before\n[status: running]".to_owned(), false));
    assert_eq!(
        results[2],
        (
            "Killed background task bash-1 and everything it started.\n[status: killed]".to_owned(),
            false
        )
    );
    assert!(processes_matching(marker).is_empty());
}

/// Installs build A, then `bad`, and checks that the rejection names `reason` while A keeps
/// serving; then B still loads (the bad build is not retried).
fn rejected_while_the_old_build_serves(bad: &std::path::Path, reason: &str) -> (String, String) {
    let responses =
        vec![tool_call("reloadable_build"), say("one"), tool_call("reloadable_build"), say("two")];
    let mut agent = Agent::start(AgentOptions::serving_reloadable_a(responses));
    agent.initialize(true);
    let session = agent.new_session();

    install_like_cargo(bad, &agent.plugin_dir(), LIBRARY);
    let ((title, status, text), after) = agent.wait_for_plugin_card(&session, 0, "rejected");
    assert_eq!(title, format!("Plugin build rejected: {LIBRARY}"));
    assert_eq!(status, "failed");
    assert!(text.contains(reason), "{text:?} lacks {reason:?}");
    assert!(text.contains("Build g1 of plugin reloadable keeps serving."), "{text}");
    agent.prompt(&session, "which build?");
    assert_eq!(agent.last_tool_result(), ("build A".to_owned(), false));

    // The rejected file is not retried: writing the same bytes again is looked at, and
    // recognised as the build already refused...
    let file = agent.plugin_dir().join(LIBRARY);
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes).unwrap();
    hotsh_tests::eventually("the rewrite to be recognised as the rejected build", || {
        agent.stderr().contains("same content as a rejected build; not tried again")
    });
    // ...and a good build after it still loads.
    install_like_cargo(&reloadable_build("B", Interface::Same), &agent.plugin_dir(), LIBRARY);
    agent.wait_for_plugin_card(&session, after, "reloaded");
    agent.prompt(&session, "and now?");
    assert_eq!(agent.last_tool_result(), ("build B".to_owned(), false));
    let rejections =
        agent.plugin_cards(&session).iter().filter(|(t, _, _)| t.contains("rejected")).count();
    assert_eq!(rejections, 1, "the bad build was tried again: {:#?}", agent.plugin_cards(&session));
    (text, agent.stderr())
}

#[test]
fn layout_mismatch_is_rejected_with_a_short_summary() {
    let (text, _) = rejected_while_the_old_build_serves(
        &reloadable_build("changed", Interface::ChangedLayout),
        "its interface does not match this host's",
    );
    assert!(text.contains("in PluginModule.invoke → &'a ToolCall → ToolCall:"), "{text}");
    assert!(text.contains("incompatible type size: expected 192, found 200"), "{text}");
    assert!(text.lines().count() <= 20, "the reason is not short:\n{text}");
}

#[test]
fn a_build_for_a_newer_major_version_of_the_interface_is_rejected() {
    rejected_while_the_old_build_serves(
        &reloadable_build("newer-major", Interface::NewerMajor),
        "built against another hotsh-abi version (plugin 2.0.0, host 1.1.0): the plugin speaks a newer interface than this hotsh; update hotsh, or build the plugin against hotsh-abi 1 (any 1.x)",
    );
}

#[test]
fn a_build_for_the_interface_before_1_0_is_told_to_rebuild() {
    rejected_while_the_old_build_serves(
        &reloadable_build("pre-release", Interface::PreRelease),
        "built against another hotsh-abi version (plugin 0.4.0, host 1.1.0): the plugin speaks an older interface than this hotsh; rebuild it against hotsh-abi 1 (any 1.x)",
    );
}

#[test]
fn a_panicking_constructor_is_rejected() {
    rejected_while_the_old_build_serves(
        &fixture_plugin("bad-constructor"),
        "its module constructor panicked",
    );
}

#[test]
fn a_file_that_is_not_a_plugin_is_rejected() {
    rejected_while_the_old_build_serves(std::path::Path::new("/bin/true"), "not a hotsh plugin");
}

#[test]
fn a_truncated_build_is_rejected_once_it_stays_truncated() {
    let good = std::fs::read(reloadable_build("B", Interface::Same)).unwrap();
    let truncated = std::env::temp_dir().join(format!("hotsh-truncated-{}.so", std::process::id()));
    std::fs::write(&truncated, &good[..good.len() / 2]).unwrap();
    rejected_while_the_old_build_serves(&truncated, "not a complete ELF shared library");
    let _ = std::fs::remove_file(truncated);
}

#[test]
fn fifty_reloads_with_calls_in_between_never_fail_a_call() {
    const RELOADS: usize = 50;
    let mut responses = Vec::new();
    for _ in 0..RELOADS {
        responses.push(tool_call("reloadable_build"));
        responses.push(say("ok"));
    }
    let builds = [reloadable_build("A", Interface::Same), reloadable_build("B", Interface::Same)];
    let mut agent = Agent::start(AgentOptions::serving_reloadable_a(responses));
    agent.initialize(true);
    let session = agent.new_session();
    let mut after = 0;
    for round in 0..RELOADS {
        let next = (round + 1) % 2;
        install_like_cargo(&builds[next], &agent.plugin_dir(), LIBRARY);
        let (_, seen) = agent.wait_for_plugin_card(&session, after, "reloaded");
        after = seen;
        agent.prompt(&session, "which build?");
        let label = if next == 0 { "A" } else { "B" };
        assert_eq!(agent.last_tool_result(), (format!("build {label}"), false), "round {round}");
    }
    let results = agent.tool_results();
    assert_eq!(results.len(), RELOADS);
    assert!(results.iter().all(|(_, is_error)| !is_error));
    let reloads =
        agent.plugin_cards(&session).iter().filter(|(t, _, _)| t.contains("reloaded")).count();
    assert_eq!(reloads, RELOADS, "exactly one reload per build");

    // Every generation stays loaded, each from a private copy in memory: a copy holds only
    // what the loader mapped, not the debug information that is most of a debug build.
    let copies = private_copies(agent.pid());
    assert_eq!(copies.len(), RELOADS + 1, "every build of the fixture: {copies:?}");
    for (name, size, held) in &copies {
        assert!(*held * 4 < *size, "{name}: {held} of {size} bytes held: {copies:?}");
    }
}

#[test]
fn touch_and_identical_rebuilds_do_not_reload_but_new_and_removed_files_do() {
    let responses = vec![
        json!({"tool_calls": [{"name": "hello", "arguments": {"name": "Ada"}}]}),
        say("greeted"),
        json!({"tool_calls": [{"name": "hello", "arguments": {"name": "Bob"}}]}),
        say("gone"),
    ];
    let mut options = AgentOptions::script(responses);
    options.plugins = Vec::new();
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    // A real file (the harness would link it), so that touching it touches the watched one.
    install_like_cargo(&reloadable_build("A", Interface::Same), &agent.plugin_dir(), LIBRARY);
    let (_, after) = agent.wait_for_plugin_card(&session, 0, "Plugin reloadable loaded");
    let library = agent.plugin_dir().join(LIBRARY);

    // A touch, then the identical build linked in again: each is looked at, and neither
    // reloads.
    let unchanged =
        |agent: &Agent| agent.stderr().matches("plugin file touched but unchanged").count();
    std::fs::File::options()
        .append(true)
        .open(&library)
        .unwrap()
        .set_modified(std::time::SystemTime::now())
        .unwrap();
    hotsh_tests::eventually("the touch to be looked at", || unchanged(&agent) == 1);
    install_like_cargo(&reloadable_build("A", Interface::Same), &agent.plugin_dir(), LIBRARY);
    hotsh_tests::eventually("the identical build to be looked at", || unchanged(&agent) == 2);
    // A new plugin file: loaded (and its card comes after anything the touches caused).
    install_like_cargo(&hello_plugin(), &agent.plugin_dir(), "libhotsh_plugin_hello.so");
    let ((title, _, _), after) = agent.wait_for_plugin_card(&session, after, "loaded");
    assert!(title.starts_with("Plugin hello loaded (build g"), "{title}");
    assert_eq!(agent.plugin_cards(&session).len(), 2, "{:#?}", agent.plugin_cards(&session));
    agent.prompt(&session, "greet");
    assert_eq!(agent.last_tool_result(), ("Hello, Ada!".to_owned(), false));

    // The file is removed: the plugin stops serving.
    std::fs::remove_file(agent.plugin_dir().join("libhotsh_plugin_hello.so")).unwrap();
    let ((title, _, _), _) = agent.wait_for_plugin_card(&session, after, "unloaded");
    assert!(title.starts_with("Plugin hello unloaded"), "{title}");
    agent.prompt(&session, "greet again");
    let (text, is_error) = agent.last_tool_result();
    assert!(is_error && text.starts_with("unknown tool `hello`"), "{text}");
}

#[test]
fn the_replaced_build_gets_its_shutdown_call() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut options = AgentOptions::serving_reloadable_a(vec![]);
    options.env =
        vec![("HOTSH_FIXTURE_SHUTDOWN_LOG".into(), log.path().to_string_lossy().into_owned())];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    install_like_cargo(&reloadable_build("B", Interface::Same), &agent.plugin_dir(), LIBRARY);
    agent.wait_for_plugin_card(&session, 0, "reloaded");
    wait_for_file_containing(log.path(), "shutdown A");
    assert!(!std::fs::read_to_string(log.path()).unwrap().contains("shutdown B"));
}

#[test]
fn a_hung_plugin_call_does_not_hang_the_agent() {
    let mut options =
        AgentOptions::script(vec![tool_call("reloadable_hang"), say("unused"), say("still here")]);
    options.plugins = vec![reloadable_build("A", Interface::Same)];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    let prompt = agent.start_prompt(&session, "hang");
    agent.wait_for(|m| m["params"]["update"]["title"] == "reloadable_hang (A)");
    agent.notify("session/cancel", json!({"sessionId": session}));
    assert_eq!(agent.response(prompt)["result"]["stopReason"], "cancelled");
    // The agent serves the next prompt, and the model learns what happened to the call.
    assert_eq!(agent.prompt(&session, "again")["result"]["stopReason"], "end_turn");
    let (text, is_error) = agent.tool_results().remove(0);
    assert!(is_error && text.contains("plugin `reloadable` did not return"), "{text}");
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh plugin check")]
fn plugin_check_describes_a_plugin_or_says_why_it_is_rejected() {
    let check = |path: &std::path::Path| {
        let output = std::process::Command::new(hotsh_binary())
            .args(["plugin", "check"])
            .arg(path)
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (ok, text, _) = check(&reloadable_build("A", Interface::Same));
    assert!(ok, "{text}");
    assert!(text.starts_with("plugin reloadable 0.1.0\n"), "{text}");
    // The version the plugin's own header names.
    let abi = hotsh_tests::ABI_VERSION;
    assert!(
        text.contains(&format!(
            "  hotsh-abi: {abi} (the interface it was built for; this hotsh speaks {abi}: this hotsh loads it)\n"
        )),
        "{text}"
    );
    assert!(text.contains("tools:\n  reloadable_build: Says which build is serving.\n"), "{text}");
    assert!(text.contains("prompt sections:\n  tool:reloadable (order 300, 1 lines)\n"), "{text}");

    // Rejections go to stderr as one `error:` line with the whole reason; nothing on stdout.
    let (ok, text, error) = check(&reloadable_build("changed", Interface::ChangedLayout));
    assert!(!ok && text.is_empty(), "{text}");
    assert!(error.starts_with("error: "), "{error}");
    assert!(error.contains("its interface does not match this host's"), "{error}");
    assert!(error.contains("incompatible type size: expected 192, found 200"), "{error}");

    let (ok, text, error) = check(std::path::Path::new("/bin/true"));
    assert!(!ok && text.is_empty());
    assert_eq!(
        error,
        "error: /bin/true is rejected: not a hotsh plugin (no abi_stable root module)\n"
    );

    // An executable that looks like a plugin (the hotsh binary itself): the loader's whole
    // reason, not its first line.
    let (ok, _, error) = check(&hotsh_binary());
    assert!(!ok);
    assert!(
        error.contains("Could not open library at: ")
            && error
                .trim_end()
                .ends_with("cannot dynamically load position-independent executable"),
        "{error}"
    );
    assert_eq!(error.lines().count(), 1, "{error}");
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh plugin check through a pipe")]
fn plugin_check_into_a_closed_pipe_exits_quietly() {
    let script = format!(
        "{} plugin check {} | true; echo \"status=${{PIPESTATUS[0]}}\"",
        hotsh_binary().display(),
        tool_bash_plugin().display()
    );
    let output = std::process::Command::new("bash").arg("-c").arg(&script).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stdout, "status=0\n", "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A build this very hotsh checked in a throwaway process and loaded is loaded without a
/// check at its next start with the same data directory (`plugins-checked.json`); a build it
/// did not check, a build that was rejected, and any build under another hotsh executable are
/// checked as before.
#[test]
fn a_build_checked_once_is_not_checked_again_but_any_other_is() {
    const CHECKED_BEFORE: &str = "plugin build checked before by this hotsh; not checked again";
    let data = tempfile::tempdir().unwrap();
    let record = data.path().join("plugins-checked.json");
    let start = |plugins: Vec<std::path::PathBuf>, responses, without_shim| {
        let mut options = AgentOptions::script(responses);
        options.plugins = plugins;
        options.without_shim = without_shim;
        options.env = vec![("HOTSH_DATA_DIR".into(), data.path().display().to_string())];
        let mut agent = Agent::start(options);
        agent.initialize(true);
        let log = agent.wait_for_stderr("initial plugin scan done");
        (agent, log)
    };
    let recorded = || -> usize {
        let text = std::fs::read_to_string(&record).expect("the record of checked builds");
        let file: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        file["builds"].as_array().map_or(0, Vec::len)
    };
    let (a, bad) = (reloadable_build("A", Interface::Same), fixture_plugin("bad-constructor"));
    let rejected = "its module constructor panicked";

    // The first start checks both; only the good one is kept.
    let (first, log) = start(vec![a.clone(), bad.clone()], vec![], false);
    assert!(!log.contains(CHECKED_BEFORE), "{log}");
    assert!(log.contains(rejected), "{log}");
    first.finish();
    assert_eq!(recorded(), 1);

    // The next start loads A unchecked, and it serves; the bad build is checked (and
    // rejected) again.
    let responses = vec![tool_call("reloadable_build"), say("done")];
    let (mut second, log) = start(vec![a.clone(), bad.clone()], responses, false);
    assert_eq!(log.matches(CHECKED_BEFORE).count(), 1, "{log}");
    assert!(log.contains(rejected), "{log}");
    let session = second.new_session();
    second.prompt(&session, "which build?");
    assert_eq!(second.last_tool_result(), ("build A".to_owned(), false));
    second.finish();
    assert_eq!(recorded(), 1);

    // Another build is checked, and kept beside the first.
    let (third, log) = start(vec![reloadable_build("B", Interface::Same)], vec![], false);
    assert!(!log.contains(CHECKED_BEFORE), "{log}");
    third.finish();
    assert_eq!(recorded(), 2);

    // Alone (its load not begun ahead of the others'), B is not checked again either.
    let (fourth, log) = start(vec![reloadable_build("B", Interface::Same)], vec![], false);
    assert_eq!(log.matches(CHECKED_BEFORE).count(), 1, "{log}");
    fourth.finish();

    // Another hotsh executable (a copy: another file) checks A again.
    let (fifth, log) = start(vec![a], vec![], true);
    assert!(!log.contains(CHECKED_BEFORE), "{log}");
    assert!(log.contains("plugin loaded"), "{log}");
    fifth.finish();
    assert_eq!(recorded(), 3);
}
