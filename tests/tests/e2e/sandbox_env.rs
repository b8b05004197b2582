//! Sessions' bubblewrap environments (issue "sandbox-fast"): a session's confined commands
//! share one sandbox set up once, another session's do not, a mode change or an escalation
//! never runs a command in the wrong one, and a command that kills or stops what runs the
//! environment does not stop the next. Each test needs bubblewrap; `as_nobody` runs them as
//! an ordinary user too.

use crate::sandbox::options;
use hotsh_tests::{Agent, AgentOptions, bash_call, call_with, say};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Prints the command's pid namespace: the same for commands of one environment.
const NAMESPACE: &str = "readlink /proc/self/ns/pid";

fn bwrap_installed() -> bool {
    crate::sandbox::backends().contains(&"bwrap")
}

/// An agent on the bwrap backend, as `nobody` when the tests run as root (an ordinary user's
/// user namespaces are where bubblewrap holds least).
fn bwrap_agent(extra: &str, per_session: Vec<Vec<Value>>) -> Agent {
    let mut options: AgentOptions = options("bwrap", extra, Vec::new());
    options.per_session = per_session;
    if hotsh_tests::running_as_root() {
        options.run_as = Some((65534, 65534));
    }
    let agent = Agent::start(options);
    if hotsh_tests::running_as_root() {
        hotsh_tests::chown_tree(agent.dir.path(), 65534, 65534);
    }
    agent
}

#[test]
fn a_sessions_commands_share_one_sandbox_and_another_sessions_get_their_own() {
    if !bwrap_installed() {
        eprintln!("bubblewrap is not installed: nothing to test");
        return;
    }
    let listing = "ls /proc | grep -c '^[0-9]'; pgrep -c -x sleep || true";
    let first = vec![
        call_with("bash", json!({"command": "exec sleep 300", "run_in_background": true})),
        bash_call(NAMESPACE),
        bash_call(NAMESPACE),
        bash_call(listing),
        say("done"),
    ];
    let second = vec![bash_call(NAMESPACE), bash_call(listing), say("done")];
    let mut agent = bwrap_agent("", vec![first, second]);
    agent.initialize(true);
    let a = agent.new_session();
    agent.prompt(&a, "go");
    let mut texts = agent.tool_results();
    let b = agent.new_session();
    agent.prompt(&b, "go");
    texts.extend(agent.tool_results());
    let (a_ns, a_again, a_list) = (&texts[1].0, &texts[2].0, &texts[3].0);
    let (b_ns, b_list) = (&texts[4].0, &texts[5].0);
    assert!(a_ns.starts_with("pid:["), "{texts:?}");
    assert_eq!(a_ns, a_again, "two commands of a session, one sandbox: {texts:?}");
    assert_ne!(a_ns, b_ns, "another session, another sandbox: {texts:?}");
    let own = std::fs::read_link("/proc/self/ns/pid").expect("this test's pid namespace");
    assert_ne!(a_ns.as_str(), own.to_string_lossy(), "the command ran in a sandbox");
    // Session a's background task is in its sandbox; nothing of a's is in b's.
    assert!(a_list.ends_with("\n1"), "a sees its own task: {a_list}");
    assert!(b_list.ends_with("\n0"), "b sees nothing of a's: {b_list}");
}

#[test]
fn a_mode_change_or_an_escalation_never_runs_a_command_in_another_modes_sandbox() {
    if !bwrap_installed() {
        eprintln!("bubblewrap is not installed: nothing to test");
        return;
    }
    let outside = tempfile::tempdir().expect("a folder outside the session");
    std::fs::set_permissions(outside.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .expect("writable to nobody");
    let target = outside.path().join("granted.txt");
    let write = |name: &str| format!("{NAMESPACE}; echo x > {name} && echo wrote");
    let script = vec![
        bash_call(&write("first")),
        say("one"),
        bash_call(&write("second")),
        say("two"),
        bash_call(&write("third")),
        call_with(
            "bash",
            json!({
                "command": format!("{NAMESPACE}; echo granted > {}", target.display()),
                "sandbox_permissions": "danger-full-access",
                "justification": "The user asked for this file outside the project."
            }),
        ),
        bash_call(NAMESPACE),
        say("three"),
    ];
    let mut agent = bwrap_agent("", vec![script]);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    let set = |agent: &mut Agent, mode: &str| {
        agent.call(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "sandbox_mode", "value": mode}),
        )
    };
    set(&mut agent, "read-only");
    agent.prompt(&session, "go");
    set(&mut agent, "workspace-write");
    agent.prompt_answering_permission(
        &session,
        json!({"result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}}}),
    );
    let texts: Vec<String> = agent.tool_results().into_iter().map(|(text, _)| text).collect();
    let namespace = |text: &str| text.lines().next().unwrap_or_default().to_owned();
    let (write_ns, read_ns, again_ns) =
        (namespace(&texts[0]), namespace(&texts[1]), namespace(&texts[2]));
    assert!(texts[0].ends_with("wrote"), "{texts:?}");
    assert!(
        texts[1].contains("[sandbox: file access denied under read-only mode]"),
        "read-only holds in its own sandbox: {texts:?}"
    );
    assert!(!agent.workdir.join("second").exists());
    assert!(texts[2].ends_with("wrote"), "{texts:?}");
    assert_ne!(write_ns, read_ns, "{texts:?}");
    assert_eq!(write_ns, again_ns, "back to workspace-write: its sandbox again: {texts:?}");
    // The escalated call ran outside every sandbox, and the next one is back in the session's.
    let own = std::fs::read_link("/proc/self/ns/pid").expect("this test's pid namespace");
    assert_eq!(namespace(&texts[3]), own.to_string_lossy(), "{texts:?}");
    assert_eq!(std::fs::read_to_string(&target).expect("the granted write"), "granted\n");
    assert_eq!(namespace(&texts[4]), write_ns, "{texts:?}");
}

/// The processes descending from `root`: (pid, parent, name).
fn descendants(root: u32) -> Vec<(u32, u32, String)> {
    let all: Vec<(u32, u32, String)> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let open = stat.find('(')?;
            let close = stat.rfind(')')?;
            let name = stat[open + 1..close].to_owned();
            let parent = stat[close + 2..].split(' ').nth(1)?.parse().ok()?;
            Some((pid, parent, name))
        })
        .collect();
    let mut found = vec![root];
    let mut grew = true;
    while grew {
        grew = false;
        for (pid, parent, _) in &all {
            if found.contains(parent) && !found.contains(pid) {
                found.push(*pid);
                grew = true;
            }
        }
    }
    all.into_iter().filter(|(pid, _, _)| *pid != root && found.contains(pid)).collect()
}

/// The pids of the supervisors inside the agent's sandbox environments (each one's parent is
/// bubblewrap's init).
fn environment_supervisors(agent: &Agent) -> Vec<u32> {
    let processes = descendants(agent.pid());
    processes
        .iter()
        .filter(|(_, parent, name)| {
            name == "hotsh-supervise"
                && processes.iter().any(|(p, _, n)| p == parent && n == "bwrap")
        })
        .map(|(pid, _, _)| *pid)
        .collect()
}

/// The pid of the supervisor inside the agent's one sandbox environment.
fn environment_supervisor(agent: &Agent) -> u32 {
    let supervisors = environment_supervisors(agent);
    assert_eq!(supervisors.len(), 1, "one environment: {:?}", descendants(agent.pid()));
    supervisors[0]
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "{what} did not happen in 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_command_cannot_end_its_sandbox_and_a_dead_or_stopped_one_leaves_nothing_and_stops_nothing() {
    if !bwrap_installed() {
        eprintln!("bubblewrap is not installed: nothing to test");
        return;
    }
    let marker = "hotsh-environment-marker";
    let script = vec![
        call_with(
            "bash",
            json!({"command": format!("exec -a {marker} sleep 300"), "run_in_background": true}),
        ),
        // From inside: the supervisor is pid 2 of the namespace, bubblewrap's init pid 1.
        bash_call("kill -KILL 2 1 2>&1; kill -STOP 2 2>&1; echo after"),
        bash_call("echo still"),
        say("one"),
        bash_call("echo fresh"),
        say("two"),
        bash_call("echo a"),
        bash_call("echo b"),
        bash_call("echo c"),
        say("three"),
    ];
    let mut agent = bwrap_agent("", vec![script]);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    let results = agent.tool_results();
    assert!(results[1].0.ends_with("after"), "{results:?}");
    assert_eq!(results[2], ("still".to_owned(), false), "a command cannot end its sandbox");
    let has_marker = |agent: &Agent| {
        descendants(agent.pid()).iter().any(|(pid, _, _)| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line.starts_with(marker.as_bytes()))
        })
    };
    assert!(has_marker(&agent), "the background task runs in the sandbox");

    // What no command may do, done from outside: the environment's supervisor killed.
    let supervisor = environment_supervisor(&agent);
    // SAFETY: a signal to a process this test found by its name and parent.
    unsafe { libc::kill(supervisor as i32, libc::SIGKILL) };
    agent.prompt(&session, "go");
    assert_eq!(agent.tool_results()[3], ("fresh".to_owned(), false));
    wait_until("the dead environment's task ending", || !has_marker(&agent));

    // Stopped: the next commands still run (the host wakes it).
    let supervisor = environment_supervisor(&agent);
    // SAFETY: as above.
    unsafe { libc::kill(supervisor as i32, libc::SIGSTOP) };
    agent.prompt(&session, "go");
    let results = agent.tool_results();
    let last: Vec<&str> = results[4..].iter().map(|(text, _)| text.as_str()).collect();
    assert_eq!(last, ["a", "b", "c"], "{results:?}");
}

#[test]
fn keep_environment_0_gives_each_command_its_own_sandbox_and_an_idle_one_is_closed() {
    if !bwrap_installed() {
        eprintln!("bubblewrap is not installed: nothing to test");
        return;
    }
    let script = vec![bash_call(NAMESPACE), bash_call(NAMESPACE), say("done")];
    let mut agent = bwrap_agent("keep_environment_s = 0\n", vec![script]);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    let texts = agent.tool_results();
    assert!(texts[0].0.starts_with("pid:["), "{texts:?}");
    assert_ne!(texts[0].0, texts[1].0, "a bubblewrap per command: {texts:?}");
    assert!(environment_supervisors(&agent).is_empty());

    let script = vec![bash_call("echo one"), say("one"), bash_call("echo two"), say("two")];
    let mut agent = bwrap_agent("keep_environment_s = 1\n", vec![script]);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    assert_eq!(environment_supervisors(&agent).len(), 1, "the session's environment is up");
    wait_until("the idle environment closing", || environment_supervisors(&agent).is_empty());
    agent.prompt(&session, "go");
    assert_eq!(agent.last_tool_result(), ("two".to_owned(), false), "a fresh one serves");
}
