//! The sandbox at the seams its per-session environments opened (issue "seams"), tried as an
//! attacker would from inside confined commands, on every backend this machine has
//! (`as_nobody` runs these as an ordinary user too): no path the host makes for a session can
//! be swapped for a link, no place a later hotsh reads from can be written, read-only writes
//! nothing that outlives the command, and what the user is shown of refusals and escalations
//! is where they look and cannot be faked.

use crate::sandbox::{backends, options};
use hotsh_tests::{Agent, bash_call, call_with, say};
use serde_json::{Value, json};
use std::path::Path;

fn one_session(backend: &str, extra: &str, script: Vec<Value>) -> (Agent, String) {
    let mut agent = Agent::start(options(backend, extra, script));
    agent.initialize(true);
    let session = agent.new_session();
    (agent, session)
}

/// Plays `script` in one session on `backend` (`extra` added to `[sandbox]`): the agent, and
/// the text of each tool result in order.
fn run_script(backend: &str, extra: &str, script: Vec<Value>) -> (Agent, Vec<String>) {
    let (mut agent, session) = one_session(backend, extra, script);
    agent.prompt(&session, "go");
    let texts = agent.tool_results().into_iter().map(|(text, _)| text).collect();
    (agent, texts)
}

/// What is in `dir`, by name.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A command that connects to the Unix socket at `path` and says whether it could.
fn connect_to(path: &Path) -> String {
    format!(
        "/usr/bin/python3 -c 'import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n  s.connect(sys.argv[1]); print(\"connected\")\nexcept OSError as e: print(\"refused\", e)' {}",
        path.display()
    )
}

#[test]
fn the_sessions_temp_dir_cannot_be_swapped_for_a_link_that_reaches_other_sockets() {
    for backend in backends() {
        let outside = tempfile::tempdir().unwrap();
        let socket = outside.path().join("agent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        listener.set_nonblocking(true).unwrap();
        let script = vec![
            bash_call(
                "mv \"$TMPDIR\" \"$TMPDIR.x\"; echo mv=$?; ln -s / \"$TMPDIR\" 2>/dev/null; rm -rf \"$TMPDIR\"; ls -ld \"$TMPDIR\" | cut -c1",
            ),
            bash_call(&connect_to(&socket)),
            // Through the link it would have been: the socket seen from `/`.
            bash_call(&format!(
                "{} 2>&1; echo \"$TMPDIR\"",
                connect_to(&Path::new("$TMPDIR").join(socket.strip_prefix("/").unwrap()))
            )),
            say("done"),
        ];
        let (agent, texts) = run_script(backend, "", script);
        assert!(texts[0].contains("mv=1"), "{backend}: the temp dir moved: {texts:?}");
        assert!(texts[0].lines().any(|l| l == "d"), "{backend}: still a directory: {texts:?}");
        assert!(texts[1].starts_with("refused"), "{backend}: {texts:?}");
        assert!(texts[2].starts_with("refused"), "{backend}: {texts:?}");
        assert!(listener.accept().is_err(), "{backend}: a confined command reached the socket");
        let temp = texts[2].lines().find(|l| l.starts_with('/')).expect("the temp dir").to_owned();
        assert!(!Path::new(&format!("{temp}.x")).exists(), "{backend}");
        assert!(Path::new(&temp).is_dir() && !Path::new(&temp).is_symlink(), "{backend}");
        assert!(agent.finish().success());
    }
}

#[test]
fn no_path_the_host_makes_for_a_session_can_be_swapped_for_a_link_to_elsewhere() {
    for backend in backends() {
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().display().to_string();
        // Every component the host creates or trusts for a session: its temp dir, the output
        // root, the session's output directory and the files in it; each moved away and a
        // link to `target` put in its place, if the command can.
        let swap = format!(
            "out=\"${{TMPDIR%-t*}}\"; for p in \"$TMPDIR\" \"$out\" \"$out\"/* \"$out\"/*/*; do mv \"$p\" \"$p.moved\" 2>/dev/null && ln -s {target} \"$p\" && echo \"swapped $p\"; done; echo tried"
        );
        let script = vec![
            // Output past the model's budget: a spill file in the session's output directory.
            bash_call("seq 1 200000"),
            bash_call(&swap),
            bash_call("seq 1 200000"),
            call_with("bash", json!({"command": "echo from-a-task", "run_in_background": true})),
            bash_call("f=$(mktemp) && echo made > \"$f\" && echo \"$f\""),
            say("done"),
        ];
        let (agent, texts) = run_script(backend, "", script);
        assert!(texts[1].ends_with("tried"), "{backend}: {texts:?}");
        assert!(!texts[1].contains("swapped"), "{backend}: a path was swapped: {texts:?}");
        assert!(texts[2].contains("[output truncated; full output: /"), "{backend}: {texts:?}");
        let spill = texts[2].split("full output: ").nth(1).unwrap().split(']').next().unwrap();
        assert!(std::fs::symlink_metadata(spill).unwrap().is_file(), "{backend}: {spill}");
        assert!(texts[4].starts_with('/'), "{backend}: {texts:?}");
        assert_eq!(entries(outside.path()), Vec::<String>::new(), "{backend}: written outside");
        assert!(agent.finish().success());
    }
}

/// What an unconfined command (an escalated one) could leave where the session's temp dir
/// was: a link to `outside`, a FIFO, a plain file.
fn replace(temp: &Path, with: &str, outside: &Path) {
    let aside = format!("{}.moved", temp.display());
    std::fs::rename(temp, aside).unwrap();
    match with {
        "link" => std::os::unix::fs::symlink(outside, temp).unwrap(),
        "fifo" => {
            let path = std::ffi::CString::new(temp.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a valid NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        }
        _ => std::fs::write(temp, "a file").unwrap(),
    }
}

#[test]
fn a_temp_dir_replaced_outside_the_sandbox_is_refused_once_then_a_new_one_serves() {
    for backend in backends() {
        let outside = tempfile::tempdir().unwrap();
        let kinds = ["link", "fifo", "file"];
        let mut script = vec![bash_call("echo \"$TMPDIR\""), say("start")];
        for _ in kinds {
            script.push(bash_call("echo refused-if-you-see-this-not"));
            script.push(bash_call("echo made > \"$TMPDIR/f\" && echo \"$TMPDIR\""));
            script.push(say("again"));
        }
        let (mut agent, session) = one_session(backend, "", script);
        agent.prompt(&session, "go");
        let mut temp = agent.tool_results()[0].0.trim().to_owned();
        for kind in kinds {
            replace(Path::new(&temp), kind, outside.path());
            agent.prompt(&session, "go");
            let results = agent.tool_results();
            let [.., (refused, is_error), (fresh, _)] = &results[..] else { panic!() };
            assert!(*is_error, "{backend} {kind}: {results:?}");
            assert!(refused.contains("something replaced it"), "{backend} {kind}: {refused}");
            assert!(refused.contains(&temp), "{backend} {kind}: it names the path: {refused}");
            let fresh = fresh.trim();
            assert!(fresh.starts_with('/') && fresh != temp, "{backend} {kind}: {results:?}");
            assert_eq!(std::fs::read_to_string(Path::new(fresh).join("f")).unwrap(), "made\n");
            temp = fresh.to_owned();
        }
        assert_eq!(entries(outside.path()), Vec::<String>::new(), "{backend}: written outside");
        assert!(agent.stderr().contains("refused the session's temp dir"), "{backend}: logged");
        assert!(agent.finish().success());
    }
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs `hotsh sandbox` as the next start would")]
fn where_a_later_hotsh_reads_from_is_read_only_whatever_flags_this_one_has() {
    for backend in backends() {
        let script = vec![
            bash_call(
                "mkdir -p .config/hotsh && printf '[sandbox]\\nbackend = \"none\"\\n' > .config/hotsh/config.toml; echo rc=$?",
            ),
            bash_call(
                "mkdir -p .local/share/hotsh/plugins && cp /bin/true .local/share/hotsh/plugins/libevil.so; echo rc=$?",
            ),
            // The record of plugin builds checked before (which spares a check) too.
            bash_call(
                "mkdir -p .local/share/hotsh && printf '{\"builds\":[]}' > .local/share/hotsh/plugins-checked.json; echo rc=$?",
            ),
            bash_call("mv .config .config-old; mv .local/share .local/share-old; echo rc=$?"),
            say("ok"),
        ];
        let mut options = options(backend, "", script);
        options.home_is_workdir = true;
        options.flags_outside_home = true;
        let mut agent = Agent::start(options);
        agent.initialize(true);
        let session = agent.new_session();
        agent.prompt(&session, "go");
        let home = agent.workdir.clone();
        for (text, _) in &agent.tool_results() {
            assert!(text.contains("[sandbox: file access denied"), "{backend}: {text}");
        }
        assert!(!home.join(".config/hotsh/config.toml").exists(), "{backend}: config written");
        assert!(!home.join(".local/share/hotsh/plugins/libevil.so").exists(), "{backend}");
        assert!(!home.join(".local/share/hotsh/plugins-checked.json").exists(), "{backend}");
        assert!(!home.join(".config-old").exists() && !home.join(".local/share-old").exists());
        // The next hotsh, without the flags, reads its configuration from there: still none.
        let report = std::process::Command::new(hotsh_tests::hotsh_binary())
            .args(["sandbox", "--cwd"])
            .arg(&home)
            .env("HOME", &home)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("HOTSH_DATA_DIR")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&report.stdout);
        assert!(!text.contains("sandbox: off"), "{backend}: {text}");
        let config = std::fs::canonicalize(home.join(".config/hotsh")).unwrap();
        assert!(text.contains(&config.display().to_string()), "{backend}: {text}");
        assert!(agent.finish().success());
    }
}

#[test]
fn read_only_writes_nothing_that_outlives_the_command() {
    for backend in backends() {
        let script = vec![
            bash_call(
                "echo x > /dev/shm/hotsh-seam; echo shm=$?; touch /dev/hotsh-seam; echo dev=$?; echo y > /dev/null && echo null-ok",
            ),
            bash_call("ls /dev/shm/hotsh-seam /dev/hotsh-seam 2>&1 | wc -l; ls /dev/shm | wc -l"),
            say("done"),
        ];
        let (mut agent, session) = one_session(backend, "mode = \"read-only\"\n", script);
        agent.prompt(&session, "go");
        let results = agent.tool_results();
        let first = &results[0].0;
        assert!(first.contains("shm=1") && first.contains("dev=1"), "{backend}: {first}");
        assert!(first.contains("null-ok"), "{backend}: /dev/null stays writable: {first}");
        // Exit 0, refused all the same: the marker is there.
        assert!(first.contains("[sandbox: file access denied under read-only mode]"), "{first}");
        assert!(results[1].0.starts_with("2\n0"), "{backend}: {results:?}");
        assert!(agent.finish().success());
    }
}

#[test]
fn a_refusal_is_said_on_the_card_even_when_the_command_goes_on() {
    for backend in backends() {
        let script = vec![bash_call("touch /etc/hotsh-seam; echo rc=$?"), say("done")];
        let (mut agent, session) = one_session(backend, "", script);
        agent.prompt(&session, "go");
        let (text, _) = agent.last_tool_result();
        assert!(text.contains("rc=1"), "{backend}: {text}");
        assert!(text.contains("[sandbox: file access denied under workspace-write mode]"));
        let shown: String = agent
            .updates(&session)
            .iter()
            .filter_map(|u| u["_meta"]["terminal_output"]["data"].as_str())
            .collect();
        assert!(
            shown.ends_with("[hotsh sandbox: workspace-write mode refused a write to /etc/hotsh-seam; the agent may ask you to allow it under a wider mode]\n"),
            "{backend}: {shown:?}"
        );
        // A reloaded thread shows the same.
        let (replayed, _) = agent.load(&session, &agent.workdir.clone());
        let again: String = replayed
            .iter()
            .filter_map(|u| u["_meta"]["terminal_output"]["data"].as_str())
            .collect();
        assert_eq!(again, shown, "{backend}");
        assert!(agent.finish().success());
    }
}

#[test]
fn a_narrower_sandbox_mode_names_the_tasks_that_keep_their_access() {
    for backend in backends() {
        let script = vec![
            call_with("bash", json!({"command": "exec sleep 300", "run_in_background": true})),
            say("started"),
            call_with("bash_kill", json!({"task_id": "bash-1"})),
            say("stopped"),
        ];
        let (mut agent, session) = one_session(backend, "", script);
        agent.prompt(&session, "go");
        let set = json!({"sessionId": session, "configId": "sandbox_mode", "value": "read-only"});
        agent.call("session/set_config_option", set);
        let note = agent.wait_for(|m| {
            m["params"]["update"]["sessionUpdate"] == "tool_call"
                && m["params"]["update"]["title"].as_str().is_some_and(|t| t.starts_with("Sandbox"))
        });
        let note = &note["params"]["update"];
        assert_eq!(note["title"], "Sandbox read-only: 1 background task keeps its wider access");
        let detail = note["content"][0]["content"]["text"].as_str().unwrap();
        assert!(detail.ends_with("- bash-1 (workspace-write): exec sleep 300"), "{detail}");
        agent.prompt(&session, "stop it");
        // The model heard of it too, and the task stops on request.
        let requests = agent.model_requests();
        let heard = requests.last().unwrap()["messages"].to_string();
        assert!(heard.contains("keep the access they started with"), "{backend}: {heard}");
        let (killed, is_error) = agent.last_tool_result();
        assert!(!is_error && killed.contains("bash-1"), "{backend}: {killed}");
        assert!(agent.finish().success());
    }
}

/// The card a client holds for `call_id` after `messages` in order: a tool call's fields, each
/// update's and a permission request's replacing those it names.
fn folded_card(messages: &[Value], call_id: &str) -> Value {
    let mut card = json!({});
    for message in messages {
        let update = if message["method"] == "session/request_permission" {
            &message["params"]["toolCall"]
        } else if message["method"] == "session/update" {
            &message["params"]["update"]
        } else {
            message
        };
        if update["toolCallId"] != call_id {
            continue;
        }
        for key in ["title", "kind", "status", "content"] {
            if let Some(value) = update.get(key) {
                card[key] = value.clone();
            }
        }
    }
    card
}

#[test]
fn an_escalation_prompt_shows_where_it_runs_and_the_card_gets_its_terminal_back() {
    for backend in backends() {
        let outside = tempfile::tempdir().unwrap();
        let file = outside.path().join("granted.txt");
        let command = format!("echo granted > {}", file.display());
        let script = vec![
            call_with(
                "bash",
                json!({
                    "command": command,
                    "workdir": "sub",
                    "sandbox_permissions": "danger-full-access",
                    "justification": "The user asked for this file outside the project."
                }),
            ),
            say("done"),
        ];
        let (mut agent, session) = one_session(backend, "", script);
        std::fs::create_dir_all(agent.workdir.join("sub")).unwrap();
        let before = agent.received.len();
        let allow =
            json!({"result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}}});
        let request = agent.prompt_answering_permission(&session, allow);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "granted\n", "{backend}");
        let asked = &request["params"]["toolCall"];
        assert_eq!(asked["kind"], "execute", "{backend}: {asked}");
        let body = asked["content"][0]["content"]["text"].as_str().unwrap();
        let cwd = agent.workdir.display().to_string();
        let first_lines = format!(
            "**Session folder:** `{cwd}`  \n**Runs in:** `{}`\n\n",
            agent.workdir.join("sub").display()
        );
        assert!(body.starts_with(&first_lines), "{backend}: {body}");
        let call_id = asked["toolCallId"].as_str().unwrap().to_owned();
        // The update that answers the prompt puts the card back as it was drawn.
        let live = agent.received[before..].to_vec();
        let answered = live
            .iter()
            .map(|m| &m["params"]["update"])
            .find(|u| u["toolCallId"] == call_id.as_str() && u["status"] == "in_progress")
            .unwrap_or_else(|| panic!("{backend}: no in_progress update"));
        assert_eq!(answered["title"], command.as_str(), "{backend}: {answered}");
        assert_eq!(answered["kind"], "execute");
        assert_eq!(answered["content"], json!([{"type": "terminal", "terminalId": call_id}]));
        // Live and reloaded, the client ends with the same card.
        let live_card = folded_card(&live, &call_id);
        let (replayed, _) = agent.load(&session, &agent.workdir.clone());
        let replayed_card = folded_card(&replayed, &call_id);
        assert_eq!(live_card, replayed_card, "{backend}");
        assert_eq!(live_card["title"], command.as_str());
        assert!(agent.finish().success());
    }
}

#[test]
fn a_temp_dir_a_command_made_read_only_fails_only_that_commands_own_writes() {
    for backend in backends() {
        let script = vec![
            bash_call("chmod 500 \"$TMPDIR\"; mktemp >/dev/null 2>&1; echo rc=$?"),
            // hotsh's own files are not in it: a spill file is still made.
            bash_call("seq 1 200000 | tail -1"),
            bash_call("seq 1 200000"),
            bash_call("chmod 700 \"$TMPDIR\" && mktemp >/dev/null && echo writable-again"),
            say("done"),
        ];
        let (agent, texts) = run_script(backend, "", script);
        assert!(texts[0].starts_with("rc=1"), "{backend}: {texts:?}");
        assert_eq!(texts[1], "200000", "{backend}: {texts:?}");
        assert!(texts[2].contains("[output truncated; full output: /"), "{backend}: {texts:?}");
        assert_eq!(texts[3], "writable-again", "{backend}: {texts:?}");
        assert!(agent.finish().success());
    }
}
