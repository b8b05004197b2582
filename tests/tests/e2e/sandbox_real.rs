//! The sandbox as a real user meets it, and as an attacker driving the model tries it: root
//! without capabilities, an ordinary user in a git repository, descriptors a client left open,
//! hotsh's own files, a log edited from inside, the approval prompt. Each test runs on every
//! backend this machine has (`sandbox::backends`), and each would fail on the build before
//! the fix it covers.

use crate::guarantees::UNCONFINED;
use crate::sandbox::{backends, options, raw_outputs};
use hotsh_tests::{Agent, AgentOptions, bash_call, say};
use serde_json::{Value, json};

/// Every command's (text, is_error) of one prompt of an agent started with `options`.
fn run_commands(options: AgentOptions) -> (Agent, String, Vec<(String, bool)>) {
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    let results = agent.tool_results();
    (agent, session, results)
}

/// The capability sets of the command's shell, then whether root could remount `/` writable.
const CAPABILITIES: &str = "awk '/^Cap(Prm|Eff|Bnd|Amb|Inh)/ {print $1, $2}' /proc/self/status; \
     if mount -o remount,rw,bind / 2>/dev/null; then echo remounted; else echo refused; fi";

#[test]
fn confined_commands_hold_no_capabilities_even_as_root() {
    let empty = "0000000000000000";
    for backend in backends() {
        for mode in ["workspace-write", "read-only"] {
            let extra = format!("mode = \"{mode}\"\n");
            let (_agent, _, results) =
                run_commands(options(backend, &extra, vec![bash_call(CAPABILITIES), say("ok")]));
            let text = &results[0].0;
            let expected = format!(
                "CapInh: {empty}\nCapPrm: {empty}\nCapEff: {empty}\nCapBnd: {empty}\nCapAmb: {empty}\nrefused"
            );
            assert_eq!(text, &expected, "{backend}, {mode}");
        }
    }
}

#[test]
fn an_ordinary_user_runs_commands_in_a_git_repository_and_git_stays_read_only() {
    for backend in backends() {
        let mut options = options(
            backend,
            "",
            vec![bash_call("echo ran; id -u"), bash_call("echo changed > .git/config"), say("ok")],
        );
        if hotsh_tests::running_as_root() {
            options.run_as = Some((65534, 65534));
        }
        let mut agent = Agent::start(options);
        std::fs::create_dir_all(agent.workdir.join(".git")).expect(".git");
        std::fs::write(agent.workdir.join(".git/config"), "original\n").expect(".git/config");
        if hotsh_tests::running_as_root() {
            hotsh_tests::chown_tree(agent.dir.path(), 65534, 65534);
        }
        agent.initialize(true);
        let session = agent.new_session();
        agent.prompt(&session, "go");
        let results = agent.tool_results();
        let mut lines = results[0].0.lines();
        assert_eq!(lines.next(), Some("ran"), "{backend}: {}", results[0].0);
        assert_ne!(lines.next(), Some("0"), "{backend}: ran as root");
        assert!(!results[0].1, "{backend}: {}", results[0].0);
        let marker = "[sandbox: file access denied under workspace-write mode]";
        assert!(results[1].0.contains(marker), "{backend}: {}", results[1].0);
        assert_eq!(
            std::fs::read_to_string(agent.workdir.join(".git/config")).expect(".git/config"),
            "original\n",
            "{backend}"
        );
        assert_eq!(raw_outputs(&agent, &session)[0]["sandbox"]["enforcement"], "full");
    }
}

#[test]
fn a_sandbox_that_cannot_be_set_up_is_no_denial_and_offers_no_escalation() {
    // A bubblewrap that fails before it starts anything, as one does where user namespaces
    // are off.
    let fake = tempfile::tempdir().expect("a directory for the fake bwrap");
    let program = fake.path().join("bwrap");
    std::fs::write(
        &program,
        "#!/bin/sh\necho 'bwrap: Unable to write /proc/self/uid_map: Permission denied' >&2\nexit 1\n",
    )
    .expect("fake bwrap");
    std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("executable");
    let path = format!("{}:{}", fake.path().display(), std::env::var("PATH").unwrap_or_default());
    let mut options = options("bwrap", "", vec![bash_call("echo x > /etc/hotsh-0817"), say("ok")]);
    options.env = vec![("PATH".into(), path)];
    let (agent, session, results) = run_commands(options);
    let text = &results[0].0;
    assert!(text.contains("/proc/self/uid_map: Permission denied"), "{text}");
    assert!(!text.contains("[sandbox:"), "an enforcement failure read as a denial: {text}");
    assert!(!text.contains("[escalation available"), "{text}");
    let raw = &raw_outputs(&agent, &session)[0]["sandbox"];
    assert_eq!(raw["denied"], Value::Null, "{raw}");
    assert_eq!(raw["escalation_available"], false, "{raw}");
}

/// The shell's open descriptors (`ls` runs in a child, so its own are not listed), then
/// whether descriptor 7 (the inherited file's) can be written.
const OPEN_DESCRIPTORS: &str =
    "echo fds; ls /proc/$$/fd; (echo leaked >&7) 2>/dev/null || echo 'no 7'";

#[test]
fn descriptors_the_client_left_open_reach_no_command() {
    let configs = backends()
        .into_iter()
        .map(|backend| (backend.to_owned(), format!("[sandbox]\nbackend = \"{backend}\"\n")))
        .chain([("unconfined".to_owned(), UNCONFINED.to_owned())]);
    for (name, config) in configs {
        let scratch = tempfile::tempdir().expect("a directory outside the agent's");
        let inherited = scratch.path().join("inherited.log");
        let background = "ls /proc/$$/fd > report.txt; (echo leaked >&7) 2>/dev/null || echo 'no 7' >> report.txt";
        let mut options = AgentOptions::script(vec![
            bash_call(OPEN_DESCRIPTORS),
            json!({"tool_calls": [{"name": "bash", "arguments": {
                "command": background, "run_in_background": true}}]}),
            say("ok"),
        ]);
        options.config = Some(config);
        options.inherited_file = Some(inherited.clone());
        let (agent, _, results) = run_commands(options);
        assert_eq!(
            results[0].0, "fds\n0\n1\n2\nno 7",
            "{name}: a command holds more than 0, 1 and 2"
        );
        let report = agent.workdir.join("report.txt");
        hotsh_tests::wait_for_file_containing(&report, "no 7");
        let text = std::fs::read_to_string(&report).expect("the task's report");
        assert_eq!(text, "0\n1\n2\nno 7\n", "{name}: a background task holds more than 0, 1 and 2");
        assert_eq!(
            std::fs::read_to_string(&inherited).expect("the inherited file"),
            "",
            "{name}: a command wrote through the agent's descriptor"
        );
    }
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh plugin check")]
fn a_build_checked_before_loading_can_write_nothing_and_reach_nothing() {
    let build = hotsh_tests::misbehaving_build("escape-in-manifest");
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let marker = scratch.path().join("escaped");
    let output = std::process::Command::new(hotsh_tests::hotsh_binary())
        .args(["plugin", "check"])
        .arg(&build)
        .env("HOTSH_FIXTURE_MARKER", &marker)
        .output()
        .expect("hotsh plugin check runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{stderr}");
    // What it managed while it loaded, in the process that checked it, is in its version.
    assert!(
        stdout.starts_with("plugin misbehaving 0.1.0+wrote-false.unix-false.tcp-false\n"),
        "{stdout}"
    );
    assert!(!marker.exists(), "a build's loading code wrote a file while it was checked");
}

/// A scripted agent whose home is its working directory, as when Zed opens `$HOME`: the data
/// directory, the configuration and the user's plugin directory are all inside the folder
/// commands may write.
fn agent_at_home(backend: &str, responses: Vec<Value>) -> Agent {
    let mut options = AgentOptions::script(responses);
    options.home_is_workdir = true;
    // A plugin author's build directory, watched before its first build.
    options.extra_plugin_dirs = vec!["plugin-crate/target/debug".into()];
    options.config = Some(format!("[sandbox]\nbackend = \"{backend}\"\n"));
    Agent::start(options)
}

#[test]
fn hotshs_own_files_are_read_only_to_commands_whatever_the_cwd() {
    for backend in backends() {
        let commands = [
            // The session log, with a record that would widen the sandbox on load.
            "echo '{\"v\":1,\"seq\":999,\"type\":\"sandbox_mode\",\"data\":{\"mode\":\"danger-full-access\"}}' >> .local/share/hotsh/sessions/*.jsonl",
            // The configuration, to switch the sandbox off for the next agent.
            "printf '[sandbox]\\nbackend = \"none\"\\n' > .config/hotsh/config.toml",
            // A build for the user's plugin directory.
            "mkdir -p .local/share/hotsh/plugins && cp /bin/true .local/share/hotsh/plugins/libevil.so",
            // A build into a watched plugin directory inside the folder.
            "cp /bin/true plugin-crate/target/debug/libevil.so",
            // Renaming the directory above one away and making a new one.
            "mv .local/share .local/share-old",
            "mv plugin-crate/target plugin-crate/target-old && mkdir -p plugin-crate/target/debug",
            "mv .config .config-old",
        ];
        let mut responses: Vec<Value> = commands.iter().map(|c| bash_call(c)).collect();
        responses.push(say("ok"));
        let mut agent = agent_at_home(backend, responses);
        let config = agent.workdir.join(".config/hotsh/config.toml");
        agent.initialize(true);
        let session = agent.new_session();
        agent.prompt(&session, "go");
        let results = agent.tool_results();
        let marker = "[sandbox: file access denied under workspace-write mode]";
        for (index, (text, _)) in results.iter().enumerate() {
            assert!(text.contains(marker), "{backend}: command {index}: {text}");
        }
        let home = &agent.workdir;
        let logs: Vec<_> = std::fs::read_dir(home.join(".local/share/hotsh/sessions"))
            .expect("the sessions directory")
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
            .collect();
        assert_eq!(logs.len(), 1, "{backend}");
        let log = std::fs::read_to_string(logs[0].path()).expect("the log");
        assert!(!log.contains("\"seq\":999"), "{backend}: a command appended to its log");
        assert_eq!(
            std::fs::read_to_string(&config).expect("config"),
            format!("[sandbox]\nbackend = \"{backend}\"\n"),
            "{backend}"
        );
        assert!(!home.join(".local/share/hotsh/plugins/libevil.so").exists(), "{backend}");
        assert!(!home.join("plugin-crate/target/debug/libevil.so").exists(), "{backend}");
        assert!(!home.join("plugin-crate/target-old").exists(), "{backend}");
        assert!(
            home.join(".local/share/hotsh").is_dir() && !home.join(".local/share-old").exists()
        );
        assert!(home.join(".config/hotsh").is_dir() && !home.join(".config-old").exists());
        assert!(agent.finish().success());
    }
}

#[test]
fn a_log_with_a_record_out_of_sequence_is_refused_with_its_line() {
    let data = tempfile::tempdir().expect("a data directory");
    let sharing = |responses| {
        let mut options = AgentOptions::script(responses);
        options.env = vec![("HOTSH_DATA_DIR".into(), data.path().display().to_string())];
        options
    };
    let mut agent = Agent::start(sharing(vec![say("hello")]));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "hi");
    assert!(agent.finish().success());
    let log = data.path().join("sessions").join(format!("{session}.jsonl"));
    let mut text = std::fs::read_to_string(&log).expect("the log");
    let due = text.lines().count() + 1;
    text.push_str(
        "{\"v\":1,\"seq\":999,\"at\":\"2026-12-01T00:00:00.000Z\",\"type\":\"sandbox_mode\",\"data\":{\"mode\":\"danger-full-access\"}}\n",
    );
    std::fs::write(&log, text).expect("the edited log");
    let mut agent = Agent::start(sharing(vec![say("again")]));
    agent.initialize(true);
    let cwd = agent.workdir.display().to_string();
    let answer =
        agent.call("session/load", json!({"sessionId": session, "cwd": cwd, "mcpServers": []}));
    let message = answer["error"]["message"].as_str().unwrap_or_else(|| panic!("{answer}"));
    let expected = format!("is damaged at line {due}: `seq` 999 where {due} was due");
    assert!(message.contains(&expected), "{message}");
}

#[test]
fn the_model_key_is_nowhere_in_the_agents_environment_even_for_root() {
    let secret = "sk-environ-0817-secret-value";
    // The command's shim (`$PPID`) is a fork of the supervisor, whose parent is the agent.
    let command = "supervisor=$(awk '{print $4}' /proc/$PPID/stat); \
                   agent=$(awk '{print $4}' /proc/$supervisor/stat); \
                   if environ=$(tr '\\0' '\\n' 2>/dev/null < /proc/$agent/environ); then \
                     echo \"readable, PATH $(printf '%s\\n' \"$environ\" | grep -c '^PATH=')\"; \
                     printf '%s\\n' \"$environ\" | grep -E 'API_KEY|TOKEN' || true; \
                   else echo unreadable; fi";
    let mut modes: Vec<(String, String)> = backends()
        .into_iter()
        .map(|backend| (backend.to_owned(), format!("[sandbox]\nbackend = \"{backend}\"\n")))
        .collect();
    modes.push(("unconfined".to_owned(), UNCONFINED.to_owned()));
    for (name, config) in modes {
        let mut options = AgentOptions::script(vec![bash_call(command), say("ok")]);
        options.config = Some(config);
        options.env = vec![
            ("DEEPSEEK_API_KEY".into(), secret.into()),
            ("GITHUB_TOKEN".into(), format!("{secret}-gh")),
        ];
        let (agent, _, results) = run_commands(options);
        let text = &results[0].0;
        assert!(!text.contains(secret), "{name}: {text}");
        match name.as_str() {
            // Under bwrap the agent is outside the command's PID namespace.
            "bwrap" => assert!(text.starts_with("unreadable"), "{name}: {text}"),
            // Root reads any process's environment unconfined; it is there, without the key.
            "unconfined" if hotsh_tests::running_as_root() => {
                assert_eq!(text, "readable, PATH 1", "{name}")
            }
            // Without capabilities (confined root) or as another user: not even readable.
            _ => assert_eq!(text, "unreadable", "{name}"),
        }
        assert!(!agent.stderr().contains(secret), "{name}: the key is in the agent's log");
    }
}

#[test]
fn the_approval_prompt_shows_the_whole_command_and_cannot_be_spoofed() {
    let outside = crate::sandbox::elsewhere();
    let target = outside.path().join("tail-ran");
    // A fence of its own, a fake folder and reason, an HTML comment hiding the real tail,
    // and characters that hide or reorder text.
    let command = format!(
        "echo harmless\n```\n\nin `/home/you/project`\n\nWhy: a harmless check\n<!-- \u{202e}\u{1b}[8m\r\u{200b} -->\ntouch {}",
        target.display()
    );
    for backend in backends() {
        let responses = vec![
            json!({"tool_calls": [{"name": "bash", "arguments": {
                "command": command,
                "sandbox_permissions": "danger-full-access",
                "justification": "needed\n```\nWhy: nothing"}}]}),
            say("done"),
        ];
        let mut agent = Agent::start(options(backend, "", responses));
        agent.initialize(true);
        let session = agent.new_session();
        let before = agent.received.len();
        let reject = json!({"result": {"outcome": {"outcome": "selected", "optionId": "reject"}}});
        let request = agent.prompt_answering_permission(&session, reject);
        let call = &request["params"]["toolCall"];
        assert_eq!(call["status"], "pending", "{backend}: {call}");
        let title = call["title"].as_str().expect("a title");
        assert_eq!(title, "Run under danger-full-access: echo harmless (and 7 more lines)");
        let body = call["content"][0]["content"]["text"].as_str().expect("a body");
        // The command's own fence of three backticks stays inside a longer one, the hidden
        // characters are spelt out, and the real folder is shown.
        assert!(body.contains("````sh\necho harmless\n```\n"), "{backend}: {body}");
        assert!(body.contains(&format!("touch {}\n````", target.display())), "{body}");
        assert!(body.contains("\\u{202e}\\u{1b}[8m\\r\\u{200b}"), "{backend}: {body}");
        let cwd = std::fs::canonicalize(&agent.workdir).expect("cwd").display().to_string();
        let shown_cwd = format!("In this folder:\n\n```text\n{}\n```", agent.workdir.display());
        assert!(
            body.contains(&shown_cwd) || body.contains(&cwd),
            "{backend}: the folder is not shown: {body}"
        );
        for hidden in ['\u{202e}', '\u{1b}', '\r', '\u{200b}'] {
            assert!(!body.contains(hidden) && !title.contains(hidden), "{backend}: {hidden:?}");
        }
        // The card waited for the user, then went on (in progress) to its end (failed).
        let asked = before
            + agent.received[before..]
                .iter()
                .position(|m| m["method"] == "session/request_permission")
                .expect("the request was received");
        let statuses: Vec<&Value> = agent.received[asked..]
            .iter()
            .filter(|m| m["method"] == "session/update")
            .map(|m| &m["params"]["update"])
            .filter(|u| u["toolCallId"] == call["toolCallId"] && u.get("status").is_some())
            .map(|u| &u["status"])
            .collect();
        assert_eq!(statuses, [&json!("in_progress"), &json!("failed")], "{backend}");
        assert!(!target.exists(), "{backend}: a rejected command ran");
    }
}

#[test]
fn a_background_task_started_before_plan_mode_keeps_writing_and_plan_mode_says_so() {
    for backend in backends() {
        let task = "for i in $(seq 1 600); do echo $i >> ticks.txt; sleep 0.05; done";
        let mut agent = Agent::start(options(
            backend,
            "",
            vec![
                json!({"tool_calls": [{"name": "bash", "arguments": {
                    "command": task, "run_in_background": true}}]}),
                say("started"),
                say("planning"),
            ],
        ));
        agent.initialize(true);
        let session = agent.new_session();
        agent.prompt(&session, "start it");
        let ticks = agent.workdir.join("ticks.txt");
        hotsh_tests::wait_for_file_containing(&ticks, "1\n");
        let answer =
            agent.call("session/set_mode", json!({"sessionId": session, "modeId": "plan"}));
        assert!(answer.get("result").is_some(), "{backend}: {answer}");
        let note = agent.wait_for(|m| {
            m["params"]["update"]["sessionUpdate"] == "tool_call"
                && m["params"]["update"]["title"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("Plan mode:"))
        });
        let update = &note["params"]["update"];
        assert_eq!(update["title"], "Plan mode: 1 background task keeps its write access");
        let detail = update["content"][0]["content"]["text"].as_str().expect("the note");
        assert!(detail.contains("- bash-1 (workspace-write): for i in"), "{backend}: {detail}");
        // It does keep writing in plan mode (the decision the note states).
        let before = std::fs::read_to_string(&ticks).expect("ticks").lines().count();
        hotsh_tests::eventually("the task to write again in plan mode", || {
            std::fs::read_to_string(&ticks).is_ok_and(|t| t.lines().count() > before + 2)
        });
        // The model hears of it with its next request.
        agent.prompt(&session, "plan");
        let last = agent.model_requests().last().cloned().expect("a model request");
        assert!(last.to_string().contains("Plan mode makes new commands read-only"), "{last}");
        assert!(agent.finish().success());
    }
}

/// Runs a prompt whose client writes files as an editor does (`fs/write_text_file`, by path,
/// following links) or offers no `fs` at all; returns every path the client was asked to
/// write.
fn prompt_with_writing_client(agent: &mut Agent, session: &str, editor: bool) -> Vec<String> {
    let prompt = agent.start_prompt(session, "go");
    let mut from = agent.received.len();
    let mut written = Vec::new();
    loop {
        let at = agent.wait_for_from(from, |m| {
            m["method"] == "fs/write_text_file" || (m["id"] == prompt && m.get("method").is_none())
        });
        from = at + 1;
        let message = agent.received[at].clone();
        if message["method"] != "fs/write_text_file" {
            assert!(!editor || !written.is_empty() || message.get("result").is_some());
            return written;
        }
        let path = message["params"]["path"].as_str().unwrap_or_default().to_owned();
        let text = message["params"]["content"].as_str().unwrap_or_default();
        let reply = match std::fs::write(&path, text) {
            Ok(()) => json!({"result": {}}),
            Err(error) => json!({"error": {"code": -32603, "message": error.to_string()}}),
        };
        written.push(path);
        agent.answer(&message, reply);
    }
}

#[test]
fn a_write_racing_a_task_that_swaps_a_folder_for_a_link_never_lands_outside() {
    const TRIES: usize = 1000;
    for editor in [true, false] {
        let outside = crate::sandbox::elsewhere();
        // As fast as a process can: a folder most of the time, a link to outside in between.
        let flip = format!(
            "perl -e 'while (1) {{ rename \"sub\", \"sub.real\"; symlink \"{}\", \"sub\"; unlink \"sub\"; rename \"sub.real\", \"sub\" }}'",
            outside.path().display()
        );
        let writes: Vec<Value> = (0..TRIES)
            .map(|i| {
                json!({"name": "write_file", "arguments": {
                    "path": format!("sub/f{i}.txt"), "content": "x\n"}})
            })
            .collect();
        let mut options = options(
            "landlock",
            "",
            vec![
                json!({"tool_calls": [{"name": "bash", "arguments": {
                    "command": flip, "run_in_background": true}}]}),
                json!({"tool_calls": writes}),
                say("done"),
            ],
        );
        options.plugins.push(hotsh_tests::tool_fs_plugin());
        let mut agent = Agent::start(options);
        std::fs::create_dir(agent.workdir.join("sub")).expect("sub");
        if editor {
            agent.initialize_with(json!({"fs": {"readTextFile": false, "writeTextFile": true}}));
        } else {
            agent.initialize(true);
        }
        let session = agent.new_session();
        let asked = prompt_with_writing_client(&mut agent, &session, editor);
        let landed: Vec<_> =
            std::fs::read_dir(outside.path()).expect("outside").flatten().collect();
        assert!(landed.is_empty(), "editor {editor}: {} writes landed outside", landed.len());
        // With a confined task running, the host wrote on disk itself.
        assert!(asked.is_empty(), "editor {editor}: the client was asked to write {asked:?}");
        let results = agent.tool_results();
        let inside = results.iter().filter(|(text, _)| text.starts_with("Created")).count();
        assert!(inside > 0, "editor {editor}: no write went through: {:?}", results.get(1));
        assert!(agent.finish().success());
    }
}

/// A Unix socket server of the test's own, outside every sandbox: it answers `outside` to
/// each connection.
fn serve_outside(address: std::os::unix::net::SocketAddr) {
    let listener =
        std::os::unix::net::UnixListener::bind_addr(&address).expect("a listening socket");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let _ = std::io::Write::write_all(&mut stream, b"outside\n");
        }
    });
}

/// A perl client of the socket at `$1` (`@NAME`: the abstract one): `reached: <line>` or
/// `refused: <why>`.
const CONNECT: &str = "perl -MIO::Socket::UNIX -e '($p = $ARGV[0]) =~ s/^@/\\0/; $s = IO::Socket::UNIX->new(Peer => $p) or do { print \"refused: $!\\n\"; exit }; print \"reached: \", scalar <$s>' ";

/// A perl server and client of a socket at `$1`, in one command.
const OWN_SOCKET: &str = "perl -MIO::Socket::UNIX -e 'unlink $ARGV[0]; $l = IO::Socket::UNIX->new(Local => $ARGV[0], Listen => 1) or do { print \"cannot listen: $!\\n\"; exit }; $c = IO::Socket::UNIX->new(Peer => $ARGV[0]) or do { print \"refused: $!\\n\"; exit }; $a = $l->accept; print $a \"own\\n\"; print \"reached: \", scalar <$c>' ";

#[test]
fn with_the_network_off_only_sockets_inside_the_session_can_be_reached() {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::net::SocketAddr;
    let outside = crate::sandbox::elsewhere();
    let outside_socket = outside.path().join("service.sock");
    serve_outside(SocketAddr::from_pathname(&outside_socket).expect("an address"));
    let name = format!("hotsh-test-abstract-{}", std::process::id());
    serve_outside(SocketAddr::from_abstract_name(name.as_bytes()).expect("an abstract address"));
    let datagram = "perl -MSocket -e 'if (socket(my $s, AF_UNIX, SOCK_DGRAM, 0)) { print \"made\\n\" } else { print \"refused: $!\\n\" }'";
    let configs = backends()
        .into_iter()
        .map(|backend| (backend.to_owned(), format!("[sandbox]\nbackend = \"{backend}\"\n")))
        .chain([("unconfined".to_owned(), UNCONFINED.to_owned())]);
    for (name_of, config) in configs {
        let commands = [
            format!("{CONNECT}{}", outside_socket.display()),
            // The shared temp dir (the agent's scratch directory, above its working
            // directory): where tmux and ssh-agent keep theirs.
            format!("{CONNECT}../shared.sock"),
            format!("{CONNECT}@{name}"),
            format!("{OWN_SOCKET}own.sock"),
            format!("{OWN_SOCKET}\"$TMPDIR/own.sock\""),
            datagram.to_owned(),
        ];
        let mut responses: Vec<Value> = commands.iter().map(|c| bash_call(c)).collect();
        responses.push(say("ok"));
        let mut options = AgentOptions::script(responses);
        options.config = Some(config);
        let mut agent = Agent::start(options);
        // The agent's shared temp dir is its scratch directory.
        serve_outside(
            SocketAddr::from_pathname(agent.dir.path().join("shared.sock")).expect("an address"),
        );
        agent.initialize(true);
        let session = agent.new_session();
        agent.prompt(&session, "go");
        let results: Vec<String> = agent.tool_results().into_iter().map(|(text, _)| text).collect();
        let refused = |text: &str| text.starts_with("refused: ");
        if name_of == "unconfined" {
            // The test's servers answer, and each path names them.
            for result in &results[..3] {
                assert_eq!(result, "reached: outside", "{name_of}");
            }
            assert_eq!(results[5], "made", "{name_of}");
            continue;
        }
        assert!(refused(&results[0]), "{name_of}: a socket outside: {}", results[0]);
        assert!(refused(&results[1]), "{name_of}: the shared temp dir: {}", results[1]);
        assert!(refused(&results[2]), "{name_of}: an abstract socket outside: {}", results[2]);
        assert_eq!(results[3], "reached: own", "{name_of}: a socket in the folder");
        assert_eq!(results[4], "reached: own", "{name_of}: a socket in the private temp dir");
        assert!(refused(&results[5]), "{name_of}: a datagram socket: {}", results[5]);
    }
}

#[test]
fn a_nested_repository_and_a_worktree_file_are_read_only_and_stay_where_they_are() {
    for backend in backends() {
        let commands = [
            "echo 'touch /tmp/owned' > vendor/lib/.git/hooks/post-checkout",
            "echo 'gitdir: /tmp/evil' > worktree/.git",
            "mv vendor/lib vendor/lib-moved",
            "rm -rf vendor",
            "echo fine > vendor/lib/src.c && cat vendor/lib/src.c",
        ];
        let mut responses: Vec<Value> = commands.iter().map(|c| bash_call(c)).collect();
        responses.push(say("ok"));
        let mut agent = Agent::start(options(backend, "", responses));
        let work = agent.workdir.clone();
        std::fs::create_dir_all(work.join("vendor/lib/.git/hooks")).expect("nested repo");
        std::fs::write(work.join("vendor/lib/.git/hooks/post-checkout"), "#!/bin/sh\n")
            .expect("hook");
        std::fs::create_dir_all(work.join("worktree")).expect("worktree");
        std::fs::write(work.join("worktree/.git"), "gitdir: ../elsewhere\n").expect("gitfile");
        agent.initialize(true);
        let session = agent.new_session();
        agent.prompt(&session, "go");
        let results = agent.tool_results();
        let marker = "[sandbox: file access denied under workspace-write mode]";
        for (index, (text, _)) in results[..4].iter().enumerate() {
            assert!(text.contains(marker), "{backend}: command {index}: {text}");
        }
        // What is not a repository's stays writable.
        assert_eq!(results[4].0, "fine", "{backend}");
        assert_eq!(
            std::fs::read_to_string(work.join("vendor/lib/.git/hooks/post-checkout"))
                .expect("hook"),
            "#!/bin/sh\n",
            "{backend}"
        );
        assert_eq!(
            std::fs::read_to_string(work.join("worktree/.git")).expect("gitfile"),
            "gitdir: ../elsewhere\n",
            "{backend}"
        );
        assert!(!work.join("vendor/lib-moved").exists(), "{backend}");
    }
}

#[test]
fn no_command_makes_a_git_where_there_was_none_and_every_other_name_is_made_as_before() {
    let making = [
        "mkdir .git",
        "git init -q .",
        "mkdir -p sub && echo 'gitdir: /tmp/evil' > sub/.git",
        "mkdir d && mv d .git",
        "ln -s /tmp .git",
        "touch .git",
        "mkdir -p deep/er && cd deep/er && mkdir ../../.git",
    ];
    // What a build does: directories, files, renames, links, descriptors by name, a FIFO.
    let ordinary = "mkdir -p build/out && echo hi > build/out/f && mv build/out/f build/g \
        && ln -s g build/l && ln build/g build/h && cat build/l \
        && echo x > /dev/stdout && exec 3>fd.txt && echo y > /dev/fd/3 && cat fd.txt \
        && mkfifo p && { cat p > got & } && echo fifo > p && wait && cat got \
        && umask 077 && : > private && stat -c %a private \
        && tar cf t.tar build && mkdir ex && tar xf t.tar -C ex && ls ex/build | tr '\\n' ' '";
    for backend in backends() {
        let mut responses: Vec<Value> = making.iter().map(|c| bash_call(c)).collect();
        responses.push(bash_call(ordinary));
        responses.push(say("ok"));
        let mut agent = Agent::start(options(backend, "", responses));
        agent.initialize(true);
        let session = agent.new_session();
        agent.prompt(&session, "go");
        let results = agent.tool_results();
        for (index, (text, _)) in results[..making.len()].iter().enumerate() {
            assert!(
                text.contains("Operation not permitted"),
                "{backend}: {:?} was not refused: {text}",
                making[index]
            );
        }
        let work = &agent.workdir;
        assert!(!work.join(".git").exists(), "{backend}: a .git was made");
        assert!(!work.join("sub/.git").exists(), "{backend}: a gitdir file was made");
        assert!(work.join("sub").is_dir() && work.join("d").is_dir(), "{backend}");
        assert_eq!(
            results[making.len()].0,
            "hi\nx\ny\nfifo\n600\ng h l out ",
            "{backend}: ordinary names"
        );
    }
}
