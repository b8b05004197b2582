//! The sandbox, for each backend this machine has: what `workspace-write` and `read-only`
//! allow, the network, escalation through the user's permission, plan mode, the per-session
//! override and its survival across a restart, and no confined process outliving the agent.

use hotsh_tests::{Agent, AgentOptions, bash_call, eventually, processes_matching, say};
use serde_json::{Value, json};
use std::path::Path;

/// The backends present here, as `hotsh sandbox` finds them: landlock when the kernel has it
/// (it does on this kind of machine; elsewhere its tests are skipped, saying so), bwrap when
/// installed (`.ci/run` installs it).
pub(crate) fn backends() -> Vec<&'static str> {
    static FOUND: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            let mut backends = Vec::new();
            for backend in ["landlock", "bwrap"] {
                let (report, runs) = sandbox_report(backend, &std::env::temp_dir());
                if runs {
                    backends.push(backend);
                } else {
                    let first = report.lines().next().unwrap_or_default().to_owned();
                    eprintln!("{backend}: its tests are skipped: {first}");
                }
            }
            backends
        })
        .clone()
}

/// `hotsh sandbox` for a session in `cwd` with `backend` forced: what it printed, and whether
/// confined commands run (its exit status).
fn sandbox_report(backend: &str, cwd: &Path) -> (String, bool) {
    hotsh_sandbox(&format!("backend = \"{backend}\"\n"), cwd, None)
}

/// `hotsh sandbox` with `sandbox` as the configuration's `[sandbox]` section, and `path` as
/// the `PATH` hotsh sees when given.
#[allow(clippy::disallowed_methods, reason = "runs hotsh sandbox")]
fn hotsh_sandbox(sandbox: &str, cwd: &Path, path: Option<&Path>) -> (String, bool) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("[sandbox]\n{sandbox}")).expect("config");
    let mut command = std::process::Command::new(hotsh_tests::hotsh_binary());
    command.arg("sandbox").arg("--cwd").arg(cwd).arg("--config").arg(&config);
    command.env("HOTSH_DATA_DIR", dir.path().join("data"));
    if let Some(path) = path {
        command.env("PATH", path);
    }
    let output = command.output().expect("hotsh sandbox");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(matches!(output.status.code(), Some(0 | 1)), "{:?}: {stdout}{stderr}", output.status);
    (stdout, output.status.success())
}

#[test]
fn hotsh_sandbox_says_what_each_mode_gives_a_folder_on_each_backend() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join(".git")).unwrap();
    let backends = backends();
    assert!(!backends.is_empty(), "no backend to test: landlock and bwrap are both missing");
    for &backend in &backends {
        let (report, runs) = sandbox_report(backend, &project);
        assert!(runs, "{report}");
        let line = |mode: &str| {
            report
                .lines()
                .find(|line| line.trim_start().starts_with(mode))
                .unwrap_or_else(|| panic!("no {mode} line: {report}"))
                .to_owned()
        };
        assert!(report.starts_with(&format!("sandbox: {backend} (")), "{report}");
        let read_only = line("read-only");
        assert!(read_only.contains("writes nothing; network off; enforced: "), "{report}");
        let workspace = line("workspace-write");
        let git = format!("{}/.git", project.display());
        assert!(workspace.contains(&format!("writes {}, ", project.display())), "{report}");
        assert!(
            workspace.contains(&git) && workspace.contains("enforced: full")
                || workspace.contains("enforced: partial: `.git` stays writable"),
            "the folder's .git is read-only, or the report says it is not: {report}"
        );
        assert!(line("danger-full-access").contains("unconfined"), "{report}");
    }

    // Capped: the modes past the cap are not offered.
    let capped = format!("backend = \"{}\"\nmax_mode = \"read-only\"\n", backends[0]);
    let (report, runs) = hotsh_sandbox(&capped, &project, None);
    assert!(runs, "{report}");
    for mode in ["workspace-write", "danger-full-access"] {
        assert!(
            report.lines().any(|line| line.trim_start().starts_with(mode)
                && line.ends_with(
                    "not offered: the configuration caps commands below it (`[sandbox] max_mode`)"
                )),
            "{mode}: {report}"
        );
    }

    // Switched off: every command unconfined, and no mode offered.
    let (report, runs) = sandbox_report("none", &project);
    assert!(runs && report.starts_with("sandbox: off"), "{report}");
    assert!(report.contains("every command       unconfined"), "{report}");
}

#[test]
fn hotsh_sandbox_fails_naming_what_is_missing_where_nothing_can_confine() {
    let dir = tempfile::tempdir().unwrap();
    // No bwrap on this PATH.
    let (report, runs) = hotsh_sandbox("backend = \"bwrap\"\n", dir.path(), Some(dir.path()));
    assert!(!runs, "exit status 1: {report}");
    assert!(report.starts_with("sandbox: no backend can confine commands here"), "{report}");
    let lines: Vec<&str> = report.lines().skip(2).map(str::trim_start).collect();
    assert_eq!(lines.len(), 3, "{report}");
    for line in &lines[..2] {
        assert!(line.contains("not run: bubblewrap (`bwrap`) is not installed"), "{report}");
    }
    assert!(lines[2].starts_with("danger-full-access  unconfined"), "{report}");
}

pub(crate) fn options(backend: &str, extra: &str, responses: Vec<Value>) -> AgentOptions {
    let mut options = AgentOptions::script(responses);
    options.config = Some(format!("[sandbox]\nbackend = \"{backend}\"\n{extra}"));
    options
}

pub(crate) fn bash_with(arguments: Value) -> Value {
    json!({"tool_calls": [{"name": "bash", "arguments": arguments}]})
}

/// The final `rawOutput` of every tool call, in order.
pub(crate) fn raw_outputs(agent: &Agent, session: &str) -> Vec<Value> {
    agent
        .updates(session)
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update" && u.get("rawOutput").is_some())
        .map(|u| u["rawOutput"].clone())
        .collect()
}

/// `key` of each object in the array `list`.
pub(crate) fn fields<'a>(list: &'a Value, key: &str) -> Vec<&'a str> {
    let items = list.as_array().unwrap_or_else(|| panic!("not a list: {list}"));
    items
        .iter()
        .map(|item| item[key].as_str().unwrap_or_else(|| panic!("no {key}: {item}")))
        .collect()
}

/// The `sandbox_mode` option in an answer carrying `configOptions`.
fn sandbox_option(answer: &Value) -> &Value {
    let options = answer["result"]["configOptions"].as_array().expect("the full option list");
    options.iter().find(|o| o["id"] == "sandbox_mode").expect("a sandbox_mode option")
}

/// A directory outside the agent's cwd and temp dir.
pub(crate) fn elsewhere() -> tempfile::TempDir {
    tempfile::tempdir_in(std::env::temp_dir()).expect("a directory outside the agent's")
}

#[test]
fn workspace_write_confines_writes_to_the_cwd_keeps_git_read_only_and_cuts_the_network() {
    for backend in backends() {
        let outside = elsewhere();
        let target = outside.path().join("escaped.txt");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("address").port();
        let mut agent = Agent::start(options(
            backend,
            "",
            vec![
                bash_call("echo inside > inside.txt && cat inside.txt"),
                bash_call(&format!("echo out > {}", target.display())),
                bash_call("echo changed > .git/config"),
                bash_call(&format!("exec 3<>/dev/tcp/127.0.0.1/{port}")),
                say("done"),
            ],
        ));
        std::fs::create_dir_all(agent.workdir.join(".git")).expect(".git");
        std::fs::write(agent.workdir.join(".git/config"), "original\n").expect(".git/config");
        agent.initialize(true);
        let session = agent.new_session();
        agent.prompt(&session, "go");

        let results = agent.tool_results();
        assert_eq!(results[0], ("inside".to_owned(), false), "{backend}");
        assert_eq!(
            std::fs::read_to_string(agent.workdir.join("inside.txt")).expect("written"),
            "inside\n"
        );
        let marker = "[sandbox: file access denied under workspace-write mode]";
        assert!(results[1].0.contains(marker), "{backend}: {}", results[1].0);
        assert!(results[1].0.ends_with("[exit code: 1]"), "{backend}: {}", results[1].0);
        assert!(!target.exists(), "{backend}: the write outside went through");
        assert!(results[2].0.contains(marker), "{backend}: {}", results[2].0);
        assert_eq!(
            std::fs::read_to_string(agent.workdir.join(".git/config")).expect(".git/config"),
            "original\n",
            "{backend}"
        );
        let network = "[sandbox: network access denied under workspace-write mode]";
        assert!(results[3].0.contains(network), "{backend}: {}", results[3].0);
        assert!(listener.accept().is_err(), "{backend}: a connection reached the listener");
        // Escalation is offered exactly when the fields are advertised (they are here).
        assert!(results[1].0.contains("[escalation available:"), "{}", results[1].0);

        let raw = raw_outputs(&agent, &session);
        assert_eq!(raw[0]["sandbox"]["mode"], "workspace-write");
        assert_eq!(raw[0]["sandbox"]["backend"], backend);
        assert_eq!(raw[0]["sandbox"]["enforcement"], "full", "{backend}");
        assert_eq!(raw[0]["sandbox"]["denied"], Value::Null);
        assert_eq!(raw[1]["sandbox"]["denied"], "file");
        assert_eq!(raw[3]["sandbox"]["denied"], "network");
        assert_eq!(raw[1]["sandbox"]["escalation_available"], true);

        // The model was offered the escalation fields and the sandbox prompt section.
        let request = &agent.model_requests()[0];
        let bash = request["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .find(|t| t["name"] == "bash")
            .expect("bash offered");
        let properties = &bash["input_schema"]["properties"];
        assert!(properties.get("sandbox_permissions").is_some(), "{bash}");
        assert!(properties.get("justification").is_some(), "{bash}");
        let system = request["system"].as_str().expect("system prompt");
        assert!(system.contains("## The sandbox"), "{system}");
        assert!(!system.contains("workspace-write mode"), "the prompt names the standing mode");
    }
}

#[test]
fn a_background_task_denied_by_the_sandbox_ends_with_the_marker() {
    for backend in backends() {
        let outside = elsewhere();
        let target = outside.path().join("escaped.txt");
        let command = format!("sleep 0.1; echo out > {}", target.display());
        let mut agent = Agent::start(options(
            backend,
            "",
            vec![
                bash_with(json!({"command": command, "run_in_background": true})),
                say("started"),
                say("heard"),
            ],
        ));
        agent.initialize(true);
        let session = agent.new_session();
        agent.prompt(&session, "start it");
        let closed = agent.wait_for(|m| {
            let u = &m["params"]["update"];
            u["sessionUpdate"] == "tool_call_update" && u["status"] == "failed"
        });
        let update = &closed["params"]["update"];
        let marker = "[sandbox: file access denied under workspace-write mode]";
        let content = update["content"][0]["content"]["text"].as_str().expect("card text");
        assert!(content.starts_with(marker), "{backend}: {content}");
        assert_eq!(update["rawOutput"]["sandbox"]["mode"], "workspace-write", "{backend}");
        assert_eq!(update["rawOutput"]["sandbox"]["denied"], "file", "{backend}");
        assert!(!target.exists(), "{backend}: the write outside went through");
        // The model reads the marker first in the task's notice.
        agent.prompt(&session, "anything new?");
        let requests = agent.model_requests();
        let messages =
            requests.last().expect("a request")["messages"].as_array().expect("messages").clone();
        let notice = messages.iter().find(|m| m["role"] == "notice").expect("a notice");
        let text = notice["text"].as_str().expect("notice text");
        assert!(
            text.starts_with(&format!("{marker} [background task bash-1 ")),
            "{backend}: {text}"
        );
        assert!(agent.finish().success());
    }
}

#[test]
fn read_only_denies_writes_inside_and_in_the_temp_dir() {
    for backend in backends() {
        let mut agent = Agent::start(options(
            backend,
            "mode = \"read-only\"\n",
            vec![
                bash_call("cat /etc/hostname >/dev/null && echo read ok"),
                bash_call("echo x > inside.txt"),
                bash_call("echo x > \"$TMPDIR/tmp.txt\""),
                say("done"),
            ],
        ));
        agent.initialize(true);
        let session = agent.new_session();
        agent.prompt(&session, "go");
        let results = agent.tool_results();
        assert_eq!(results[0].0, "read ok", "{backend}");
        let marker = "[sandbox: file access denied under read-only mode]";
        assert!(results[1].0.contains(marker), "{backend}: {}", results[1].0);
        assert!(results[2].0.contains(marker), "{backend}: {}", results[2].0);
        assert!(!agent.workdir.join("inside.txt").exists());
        assert!(!agent.dir.path().join("tmp.txt").exists());
        assert_eq!(raw_outputs(&agent, &session)[1]["sandbox"]["mode"], "read-only");
    }
}

/// Runs one prompt of an agent (landlock) scripted with `responses`, answering the
/// `session/request_permission` it sends with `reply` (a JSON-RPC `result` or `error`
/// member); returns the agent, the session and the permission request.
fn prompt_answering_permission(responses: Vec<Value>, reply: Value) -> (Agent, String, Value) {
    let mut agent = Agent::start(options("landlock", "", responses));
    agent.initialize(true);
    let session = agent.new_session();
    let request = agent.prompt_answering_permission(&session, reply);
    (agent, session, request)
}

fn escalated_write(target: &Path) -> Value {
    bash_with(json!({
        "command": format!("echo granted > {}", target.display()),
        "sandbox_permissions": "danger-full-access",
        "justification": "The user asked for this file outside the project."
    }))
}

#[test]
fn an_escalation_allowed_once_runs_that_call_only_and_the_next_is_confined_again() {
    let outside = elsewhere();
    let first = outside.path().join("first.txt");
    let second = outside.path().join("second.txt");
    let (agent, session, request) = prompt_answering_permission(
        vec![
            escalated_write(&first),
            bash_call(&format!("echo again > {}", second.display())),
            say("done"),
        ],
        json!({"result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}}}),
    );
    let shown = request["params"].to_string();
    assert!(shown.contains(&format!("echo granted > {}", first.display())), "{shown}");
    assert!(shown.contains("The user asked for this file outside the project."), "{shown}");
    assert!(shown.contains("danger-full-access"), "{shown}");
    assert_eq!(
        fields(&request["params"]["options"], "kind"),
        ["allow_once", "allow_always", "allow_always", "reject_once"]
    );

    assert_eq!(std::fs::read_to_string(&first).expect("the allowed write ran"), "granted\n");
    let results = agent.tool_results();
    assert_eq!(results[0], ("(no output)".to_owned(), false));
    assert!(results[1].0.contains("[sandbox: file access denied under workspace-write mode]"));
    assert!(!second.exists(), "the next call was not confined again");
    let raw = raw_outputs(&agent, &session);
    assert_eq!(raw[0]["sandbox"]["mode"], "danger-full-access");
    assert_eq!(raw[0]["sandbox"]["enforcement"], "none");
    assert_eq!(raw[1]["sandbox"]["mode"], "workspace-write");
}

#[test]
fn rejected_cancelled_and_unanswerable_escalations_run_nothing_and_say_which() {
    let outside = elsewhere();
    let target = outside.path().join("never.txt");
    let cases = [
        (
            json!({"result": {"outcome": {"outcome": "selected", "optionId": "reject"}}}),
            "the user rejected",
        ),
        (
            json!({"result": {"outcome": {"outcome": "cancelled"}}}),
            "was cancelled before the user answered",
        ),
        // A client that fails the request: nobody could be asked.
        (
            json!({"error": {"code": -32601, "message": "no"}}),
            "no client is connected that can ask",
        ),
    ];
    for (reply, text) in cases {
        let (agent, _, _) =
            prompt_answering_permission(vec![escalated_write(&target), say("ok")], reply);
        let (result, is_error) = agent.last_tool_result();
        assert!(is_error && result.contains(text), "{result}");
        assert!(result.contains("nothing was run"), "{result}");
        assert!(!target.exists());
    }
}

#[test]
fn a_request_that_does_not_widen_fails_without_asking_and_half_a_request_is_invalid() {
    let mut agent = Agent::start(options(
        "landlock",
        "",
        vec![
            bash_with(json!({
                "command": "echo x > narrow.txt",
                "sandbox_permissions": "workspace-write",
                "justification": "needs the workspace"
            })),
            bash_with(json!({"command": "true", "sandbox_permissions": "danger-full-access"})),
            bash_with(json!({"command": "true", "justification": "why"})),
            say("ok"),
        ],
    ));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    assert!(
        !agent.received.iter().any(|m| m["method"] == "session/request_permission"),
        "somebody was asked"
    );
    let results = agent.tool_results();
    assert!(results[0].1 && results[0].0.contains("does not widen"), "{:?}", results[0]);
    assert!(!agent.workdir.join("narrow.txt").exists());
    assert!(results[1].1 && results[1].0.contains("needs a `justification`"), "{:?}", results[1]);
    assert!(results[2].1 && results[2].0.contains("only for a `sandbox_permissions`"));
}

fn set_option(agent: &mut Agent, session: &str, value: &str) -> Value {
    agent.call(
        "session/set_config_option",
        json!({"sessionId": session, "configId": "sandbox_mode", "value": value}),
    )
}

fn set_mode(agent: &mut Agent, session: &str, mode: &str) -> Value {
    agent.call("session/set_mode", json!({"sessionId": session, "modeId": mode}))
}

#[test]
fn plan_mode_caps_at_read_only_refuses_escalation_at_the_gate_and_restores_the_override() {
    let outside = elsewhere();
    let target = outside.path().join("after-plan.txt");
    let mut agent = Agent::start(options(
        "landlock",
        "",
        vec![
            bash_call("echo x > planned.txt"),
            escalated_write(&target),
            say("planned"),
            bash_call(&format!("echo back > {}", target.display())),
            say("done"),
        ],
    ));
    agent.initialize(true);
    let session = agent.new_session();
    let created =
        agent.received.iter().rev().find(|m| m["result"]["sessionId"] == session.as_str());
    let modes = &created.expect("session/new answer")["result"]["modes"];
    assert_eq!(modes["currentModeId"], "default");
    assert_eq!(fields(&modes["availableModes"], "id"), ["default", "plan"]);

    let answer = set_option(&mut agent, &session, "danger-full-access");
    assert_eq!(answer["result"]["configOptions"].as_array().map(Vec::len), Some(2), "{answer}");
    let sandbox = sandbox_option(&answer);
    assert_eq!(sandbox["currentValue"], "danger-full-access");
    assert_eq!(sandbox["options"].as_array().expect("values").len(), 3);

    let answer = set_mode(&mut agent, &session, "plan");
    assert!(answer.get("result").is_some(), "{answer}");
    agent.wait_for(|m| {
        m["params"]["update"]["sessionUpdate"] == "current_mode_update"
            && m["params"]["update"]["currentModeId"] == "plan"
    });
    agent.prompt(&session, "plan it");
    assert!(!agent.received.iter().any(|m| m["method"] == "session/request_permission"));
    let results = agent.tool_results();
    assert!(
        results[0].0.contains("[sandbox: file access denied under read-only mode]"),
        "{:?}",
        results[0]
    );
    assert!(!results[0].0.contains("[escalation available"), "plan offers no escalation");
    assert!(results[1].1 && results[1].0.contains("plan mode"), "{:?}", results[1]);
    assert!(!target.exists() && !agent.workdir.join("planned.txt").exists());

    set_mode(&mut agent, &session, "default");
    agent.prompt(&session, "do it");
    assert_eq!(std::fs::read_to_string(&target).expect("full access again"), "back\n");
}

#[test]
fn plan_mode_without_a_backend_offers_no_tool_that_declares_it_runs_commands() {
    let mut options = options("none", "", vec![say("planned"), say("back")]);
    options.plugins = vec![hotsh_tests::tool_bash_plugin(), hotsh_tests::tool_fs_plugin()];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    set_mode(&mut agent, &session, "plan");
    agent.prompt(&session, "plan it");
    set_mode(&mut agent, &session, "default");
    agent.prompt(&session, "do it");
    let offered: Vec<Vec<String>> = agent
        .model_requests()
        .iter()
        .map(|request| {
            let tools = request["tools"].as_array().expect("tools");
            tools.iter().map(|t| t["name"].as_str().expect("a name").to_owned()).collect()
        })
        .collect();
    // `bash` and `task` (a subagent runs commands) declare that they run commands; the
    // others (reading a task's output, killing one, the file tools, whose writes plan mode
    // caps, hotsh's plan) do not.
    assert_eq!(
        offered[0],
        ["bash_output", "bash_kill", "read_file", "write_file", "edit_file", "update_plan"],
        "{offered:?}"
    );
    assert_eq!(offered[1][0], "bash", "{offered:?}");
    assert_eq!(offered[1].len(), 8, "{offered:?}");
    assert_eq!(offered[1][7], "task", "{offered:?}");
}

#[test]
fn the_override_survives_a_restart_and_sessions_keep_their_own_modes() {
    let data = tempfile::tempdir().expect("data dir");
    let shared = |responses| {
        let mut options = options("landlock", "", responses);
        options.env = vec![("HOTSH_DATA_DIR".into(), data.path().to_string_lossy().into_owned())];
        options
    };
    let mut agent = Agent::start(shared(vec![]));
    agent.initialize(true);
    let locked = agent.new_session();
    let other = agent.new_session();
    set_option(&mut agent, &locked, "read-only");
    let cwd = agent.workdir.clone();
    agent.kill9();

    let mut agent =
        Agent::start(shared(vec![bash_call("echo x > written.txt && echo wrote"), say("ok")]));
    agent.initialize(true);
    agent.wait_for_stderr("initial plugin scan done");
    let loaded =
        agent.call("session/load", json!({"sessionId": locked, "cwd": cwd, "mcpServers": []}));
    assert_eq!(sandbox_option(&loaded)["currentValue"], "read-only", "{loaded}");
    let other_loaded =
        agent.call("session/load", json!({"sessionId": other, "cwd": cwd, "mcpServers": []}));
    assert_eq!(sandbox_option(&other_loaded)["currentValue"], "workspace-write");

    agent.prompt(&locked, "write");
    let (result, _) = agent.last_tool_result();
    assert!(result.contains("[sandbox: file access denied under read-only mode]"), "{result}");
    assert!(!cwd.join("written.txt").exists());
}

#[test]
fn a_sigkilled_agent_leaves_no_confined_process_behind() {
    for backend in backends() {
        let marker = format!("hotsh-confined-{backend}-{}", std::process::id());
        let mut agent = Agent::start(options(
            backend,
            "",
            vec![
                json!({"tool_calls": [{"name": "bash", "arguments": {
                    "command": format!("exec -a {marker} sleep 1000"),
                    "run_in_background": true
                }}]}),
                bash_call(&format!("exec -a {marker}-fg sleep 1000")),
            ],
        ));
        agent.initialize(true);
        let session = agent.new_session();
        agent.start_prompt(&session, "go");
        eventually("both confined sleeps run", || processes_matching(&marker).len() >= 2);
        agent.kill9();
        eventually("no confined process is left", || processes_matching(&marker).is_empty());
    }
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh with a bad config")]
fn unknown_modes_are_refused_clearly_and_change_nothing() {
    let mut agent = Agent::start(options("landlock", "", vec![]));
    agent.initialize(true);
    let session = agent.new_session();
    let answer = set_option(&mut agent, &session, "everything");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let message = answer["error"]["message"].as_str().expect("a message");
    assert!(message.contains("unknown sandbox mode `everything`"), "{message}");
    let answer = set_mode(&mut agent, &session, "yolo");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let message = answer["error"]["message"].as_str().expect("a message");
    assert!(message.contains("unknown mode `yolo`; the modes are default and plan"), "{message}");
    // Nothing changed: the session is still in its default mode and plan is off.
    let answer = set_option(&mut agent, &session, "workspace-write");
    assert_eq!(sandbox_option(&answer)["currentValue"], "workspace-write");
    assert!(
        !agent
            .received
            .iter()
            .any(|m| m["params"]["update"]["sessionUpdate"] == "current_mode_update"),
        "a mode change was announced"
    );

    // In the configuration file, an unknown mode stops the agent at start, naming the values.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.toml");
    std::fs::write(&path, "[sandbox]\nmode = \"bogus\"\n").expect("config");
    let output = std::process::Command::new(hotsh_tests::hotsh_binary())
        .args(["acp", "--no-default-plugins", "--config"])
        .arg(&path)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("hotsh runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("expected one of `read-only`, `workspace-write`, `danger-full-access`"),
        "{stderr}"
    );
}

#[test]
fn a_mode_chosen_in_the_middle_of_a_turn_applies_to_the_turns_next_command() {
    for backend in backends() {
        let script = vec![
            bash_call("while [ ! -e go ]; do sleep 0.01; done; echo waited"),
            bash_call("echo x > written && echo wrote"),
            say("done"),
        ];
        let mut agent = Agent::start(options(backend, "", script));
        agent.initialize(true);
        let session = agent.new_session();
        let prompt = agent.start_prompt(&session, "go");
        // The turn's first command runs (its card is drawn), then the user switches to
        // read-only, then lets the first command end.
        agent.wait_for(|message| {
            message["params"]["update"]["sessionUpdate"] == "tool_call"
                && message["params"]["update"]["title"]
                    .as_str()
                    .is_some_and(|title| title.contains("while"))
        });
        let changed = agent.call(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "sandbox_mode", "value": "read-only"}),
        );
        assert!(changed.get("result").is_some(), "{backend}: {changed}");
        std::fs::write(agent.workdir.join("go"), "").expect("go");
        let answer = agent.response(prompt);
        assert_eq!(answer["result"]["stopReason"], "end_turn", "{backend}: {answer}");
        let results = agent.tool_results();
        assert!(results[0].0.ends_with("waited"), "{backend}: {results:?}");
        assert!(
            results[1].0.contains("[sandbox: file access denied under read-only mode]"),
            "{backend}: the next command of the same turn is read-only: {results:?}"
        );
        assert!(!agent.workdir.join("written").exists(), "{backend}");
    }
}
