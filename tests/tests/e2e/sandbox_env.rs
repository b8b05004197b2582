//! Sessions' sandbox environments (issue "sandbox-fast"): a session's confined commands share
//! one sandbox set up once (a bwrap, or under Landlock a confined supervisor), another
//! session's do not, a mode change or an escalation never runs a command in the wrong one,
//! and a command that kills or stops what runs the environment does not stop the next. Each
//! test runs on every backend this machine has; `as_nobody` runs them as an ordinary user too.

use crate::sandbox::{backends, options};
use hotsh_tests::{Agent, AgentOptions, bash_call, call_with, say};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Prints what tells one environment from another on both backends: the command's pid
/// namespace (bwrap makes one per environment), then the pid of its shim's parent (the
/// supervisor that forked it: one per Landlock environment).
const SANDBOX_ID: &str = "readlink /proc/self/ns/pid; awk '{print $4}' /proc/$PPID/stat";

fn agent_on(backend: &str, extra: &str, per_session: Vec<Vec<Value>>) -> Agent {
    let mut options: AgentOptions = options(backend, extra, Vec::new());
    options.per_session = per_session;
    Agent::start(options)
}

/// An agent on `backend` with one session scripted with `script`, initialized.
fn one_session(backend: &str, extra: &str, script: Vec<Value>) -> (Agent, String) {
    let mut agent = agent_on(backend, extra, vec![script]);
    agent.initialize(true);
    let session = agent.new_session();
    (agent, session)
}

#[test]
fn a_sessions_commands_share_one_sandbox_and_another_sessions_get_their_own() {
    for backend in backends() {
        let listing = "pgrep -c -x sleep || true";
        let first = vec![
            call_with("bash", json!({"command": "exec sleep 300", "run_in_background": true})),
            bash_call(SANDBOX_ID),
            bash_call(SANDBOX_ID),
            bash_call(listing),
            say("done"),
        ];
        let second = vec![bash_call(SANDBOX_ID), bash_call(listing), say("done")];
        let mut agent = agent_on(backend, "", vec![first, second]);
        agent.initialize(true);
        let a = agent.new_session();
        agent.prompt(&a, "go");
        let mut texts = agent.tool_results();
        let b = agent.new_session();
        agent.prompt(&b, "go");
        texts.extend(agent.tool_results());
        let (a_id, a_again, a_list) = (&texts[1].0, &texts[2].0, &texts[3].0);
        let (b_id, b_list) = (&texts[4].0, &texts[5].0);
        assert!(a_id.starts_with("pid:["), "{backend}: {texts:?}");
        assert_eq!(a_id, a_again, "{backend}: two commands of a session, one sandbox: {texts:?}");
        assert_ne!(a_id, b_id, "{backend}: another session, another sandbox: {texts:?}");
        assert_eq!(environment_supervisors(&agent).len(), 2, "{backend}: one per session");
        if backend == "bwrap" {
            // Session a's background task is in its sandbox; nothing of a's is in b's.
            assert_eq!(a_list, "1", "a sees its own task: {texts:?}");
            assert_eq!(b_list, "0", "b sees nothing of a's: {texts:?}");
        }
    }
}

#[test]
fn a_session_that_is_only_opened_starts_no_sandbox() {
    for backend in backends() {
        let mut agent = agent_on(backend, "", vec![vec![bash_call("echo ran"), say("done")]]);
        agent.initialize(true);
        // Opened and never prompted: nothing is started for them.
        let idle: Vec<String> = (0..3).map(|_| agent.new_session()).collect();
        let busy = agent.new_session();
        agent.prompt(&busy, "go");
        assert_eq!(agent.last_tool_result(), ("ran".to_owned(), false), "{backend}");
        // The prompted session's environment is the only one, however long the others wait.
        assert_eq!(environment_supervisors(&agent).len(), 1, "{backend}: {idle:?}");
        assert!(agent.finish().success());
    }
}

#[test]
fn fifty_sessions_running_commands_never_keep_more_environments_alive_than_the_bound() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    for backend in backends() {
        let scripts = (0..50).map(|_| vec![bash_call("echo ran"), say("done")]).collect();
        let mut agent = agent_on(backend, "max_environments = 3\n", scripts);
        agent.initialize(true);
        let sessions: Vec<String> = (0..50).map(|_| agent.new_session()).collect();
        // Counted from /proc the whole time, from another thread.
        let (root, stop) = (agent.pid(), Arc::new(AtomicBool::new(false)));
        let watching = Arc::clone(&stop);
        let watcher = std::thread::spawn(move || {
            let mut most = 0;
            while !watching.load(Ordering::SeqCst) {
                most = most.max(environment_supervisors_of(root).len());
                std::thread::sleep(Duration::from_millis(2));
            }
            most
        });
        // Ten sessions' turns at a time.
        for group in sessions.chunks(10) {
            let prompts: Vec<u64> = group.iter().map(|s| agent.start_prompt(s, "go")).collect();
            for prompt in prompts {
                let answer = agent.response(prompt);
                assert_eq!(answer["result"]["stopReason"], "end_turn", "{backend}: {answer}");
            }
            assert!(environment_supervisors(&agent).len() <= 3, "{backend}");
        }
        stop.store(true, Ordering::SeqCst);
        let most = watcher.join().unwrap();
        assert!((1..=3).contains(&most), "{backend}: {most} environments alive at once");
        // Every command ran, in an environment or in a sandbox of its own.
        for session in &sessions {
            let results = crate::sandbox::raw_outputs(&agent, session);
            assert_eq!(results.len(), 1, "{backend}: {session}");
            assert_eq!(results[0]["exit_code"], 0, "{backend}: {}", results[0]);
        }
        assert!(agent.finish().success());
    }
}

#[test]
fn with_two_thousand_sessions_open_the_agent_exits_on_stdin_eof_and_leaves_no_process() {
    let backend = backends()[0];
    let busy = vec![
        call_with("bash", json!({"command": "exec sleep 300", "run_in_background": true})),
        bash_call("echo ran"),
        say("done"),
    ];
    let mut agent = agent_on(backend, "", vec![busy]);
    agent.initialize(true);
    let first = agent.new_session();
    agent.prompt(&first, "go");
    let mut sessions: Vec<String> = (1..2000).map(|_| agent.new_session()).collect();
    sessions.push(first);
    // What the agent started (its supervisors, the environment, the background task), each
    // known by its pid and start time (a pid may be used again later).
    let started = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?.1.split_whitespace().nth(19).map(str::to_owned)
    };
    let tree: Vec<(u32, String)> = descendants(agent.pid())
        .into_iter()
        .filter_map(|(pid, _, _)| Some((pid, started(pid)?)))
        .collect();
    assert!(tree.len() >= 3, "{backend}: {tree:?}");
    let data = agent.data_dir();
    // Kept past the agent's end, to read the logs it left.
    let _kept = std::mem::replace(&mut agent.dir, tempfile::tempdir().unwrap());
    assert!(agent.finish().success(), "{backend}");
    wait_until("every process the agent started is gone", || {
        tree.iter().all(|(pid, at)| started(*pid).as_ref() != Some(at))
    });
    // Nothing a session did is lost: each one's log is on disk.
    for session in &sessions {
        assert!(data.join("sessions").join(format!("{session}.jsonl")).exists(), "{session}");
    }
    let first =
        std::fs::read_to_string(data.join("sessions").join(format!("{}.jsonl", sessions[1999])));
    assert!(first.unwrap().contains("echo ran"), "{backend}: the busy session's turn is logged");
}

/// The two lines [`SANDBOX_ID`] printed, wherever they are in a result.
fn sandbox_id(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|line| line.starts_with("pid:[")).unwrap_or_else(|| {
        panic!("no sandbox id in {text:?}");
    });
    lines[at..(at + 2).min(lines.len())].join(" ")
}

#[test]
fn a_mode_change_or_an_escalation_never_runs_a_command_in_another_modes_sandbox() {
    for backend in backends() {
        let outside = tempfile::tempdir().expect("a folder outside the session");
        let target = outside.path().join("granted.txt");
        let write = |name: &str| format!("{SANDBOX_ID}; echo x > {name} && echo wrote");
        let script = vec![
            bash_call(&write("first")),
            say("one"),
            bash_call(&write("second")),
            say("two"),
            bash_call(&write("third")),
            call_with(
                "bash",
                json!({
                    "command": format!("{SANDBOX_ID}; echo granted > {}", target.display()),
                    "sandbox_permissions": "danger-full-access",
                    "justification": "The user asked for this file outside the project."
                }),
            ),
            bash_call(SANDBOX_ID),
            say("three"),
        ];
        let (mut agent, session) = one_session(backend, "", script);
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
        let (write_id, read_id, again_id) =
            (sandbox_id(&texts[0]), sandbox_id(&texts[1]), sandbox_id(&texts[2]));
        assert!(texts[0].ends_with("wrote"), "{backend}: {texts:?}");
        assert!(
            texts[1].contains("[sandbox: file access denied under read-only mode]"),
            "{backend}: read-only holds in its own sandbox: {texts:?}"
        );
        assert!(!agent.workdir.join("second").exists(), "{backend}");
        assert!(texts[2].ends_with("wrote"), "{backend}: {texts:?}");
        assert_ne!(write_id, read_id, "{backend}: {texts:?}");
        assert_eq!(
            write_id, again_id,
            "{backend}: back to workspace-write, its sandbox: {texts:?}"
        );
        // The escalated call ran outside every sandbox, and the next is back in the session's.
        let own = std::fs::read_link("/proc/self/ns/pid").expect("this test's pid namespace");
        let escalated = sandbox_id(&texts[3]);
        assert!(escalated.starts_with(&*own.to_string_lossy()), "{backend}: {texts:?}");
        assert_ne!(escalated, write_id, "{backend}: {texts:?}");
        assert_eq!(std::fs::read_to_string(&target).expect("the granted write"), "granted\n");
        assert_eq!(sandbox_id(&texts[4]), write_id, "{backend}: {texts:?}");
    }
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

/// The pids of the agent's sandbox environments' supervisors: those started with a policy
/// (`__supervisor BUILD LIFELINE CONTROL POLICY`; the agent's own has no policy). A spare
/// shim just forked has its supervisor's name and arguments until it renames itself: a
/// supervisor's child is not one.
fn environment_supervisors(agent: &Agent) -> Vec<u32> {
    environment_supervisors_of(agent.pid())
}

/// [`environment_supervisors`] of the agent whose pid is `agent`.
fn environment_supervisors_of(agent: u32) -> Vec<u32> {
    let processes = descendants(agent);
    let supervisor =
        |pid: u32| processes.iter().any(|(p, _, n)| *p == pid && n == "hotsh-supervise");
    processes
        .iter()
        .filter(|(pid, parent, name)| {
            name == "hotsh-supervise"
                && !supervisor(*parent)
                && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| {
                    line.split(|&b| b == 0).filter(|a| !a.is_empty()).count() == 6
                })
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
    for backend in backends() {
        a_dead_or_stopped_environment_stops_nothing(backend);
    }
}

fn a_dead_or_stopped_environment_stops_nothing(backend: &str) {
    // From inside: the shim's parent is the environment's supervisor; under bwrap, pid 1 is
    // the namespace's init.
    let init = if backend == "bwrap" { " 1" } else { "" };
    let attack = format!(
        "s=$(awk '{{print $4}}' /proc/$PPID/stat); kill -KILL $s{init} 2>&1; kill -STOP $s 2>&1; echo after"
    );
    let marker = "hotsh-environment-marker";
    let script = vec![
        call_with(
            "bash",
            json!({"command": format!("exec -a {marker} sleep 300"), "run_in_background": true}),
        ),
        bash_call(&attack),
        bash_call("echo still"),
        say("one"),
        bash_call("echo fresh"),
        say("two"),
        bash_call("echo a"),
        bash_call("echo b"),
        bash_call("echo c"),
        say("three"),
    ];
    let (mut agent, session) = one_session(backend, "", script);
    agent.prompt(&session, "go");
    let results = agent.tool_results();
    assert!(results[1].0.ends_with("after"), "{backend}: {results:?}");
    assert_eq!(results[2], ("still".to_owned(), false), "{backend}: a command cannot end it");
    let has_marker = |agent: &Agent| {
        descendants(agent.pid()).iter().any(|(pid, _, _)| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line.starts_with(marker.as_bytes()))
        })
    };
    assert!(has_marker(&agent), "{backend}: the background task runs in the sandbox");

    // What no command may do, done from outside: the environment's supervisor killed.
    let supervisor = environment_supervisor(&agent);
    // SAFETY: a signal to a process this test found among the agent's, by its name and
    // arguments.
    unsafe { libc::kill(supervisor as i32, libc::SIGKILL) };
    // Once it has died (a command sent while the kill is on its way would start in the dying
    // environment and die with it, as its running commands do), the next command gets a
    // fresh environment.
    wait_until("the killed supervisor's death", || {
        std::fs::read_to_string(format!("/proc/{supervisor}/stat"))
            .map_or(true, |stat| stat.rsplit(')').next().is_some_and(|rest| rest.starts_with(" Z")))
    });
    agent.prompt(&session, "go");
    assert_eq!(agent.tool_results()[3], ("fresh".to_owned(), false), "{backend}");
    wait_until("the dead environment's task ending", || !has_marker(&agent));

    // Stopped: the next commands still run (the host wakes it).
    let supervisor = environment_supervisor(&agent);
    // SAFETY: as above.
    unsafe { libc::kill(supervisor as i32, libc::SIGSTOP) };
    agent.prompt(&session, "go");
    let results = agent.tool_results();
    let last: Vec<&str> = results[4..].iter().map(|(text, _)| text.as_str()).collect();
    assert_eq!(last, ["a", "b", "c"], "{backend}: {results:?}\n{}", agent.stderr());
}

#[test]
fn keep_environment_0_gives_each_command_its_own_sandbox_and_an_idle_one_is_closed() {
    for backend in backends() {
        // The first command's namespace is kept alive by its task while the second looks
        // (a namespace's number is reused once it is gone).
        let keep_alive = "readlink /proc/self/ns/pid > first-ns; exec sleep 60";
        let script = vec![
            call_with("bash", json!({"command": keep_alive, "run_in_background": true})),
            bash_call(
                "while [ ! -s first-ns ]; do sleep 0.01; done; cat first-ns; readlink /proc/self/ns/pid",
            ),
            say("done"),
        ];
        let (mut agent, session) = one_session(backend, "keep_environment_s = 0\n", script);
        agent.prompt(&session, "go");
        let texts = agent.tool_results();
        assert!(environment_supervisors(&agent).is_empty(), "{backend}: no environment");
        let namespaces: Vec<&str> = texts[1].0.lines().collect();
        assert_eq!(namespaces.len(), 2, "{backend}: {texts:?}");
        if backend == "bwrap" {
            assert_ne!(namespaces[0], namespaces[1], "a bubblewrap per command: {texts:?}");
        }

        let script = vec![bash_call("echo one"), say("one"), bash_call("echo two"), say("two")];
        let (mut agent, session) = one_session(backend, "keep_environment_s = 1\n", script);
        agent.prompt(&session, "go");
        assert_eq!(environment_supervisors(&agent).len(), 1, "{backend}: the environment is up");
        wait_until("the idle environment closing", || environment_supervisors(&agent).is_empty());
        agent.prompt(&session, "go");
        assert_eq!(agent.last_tool_result(), ("two".to_owned(), false), "{backend}: a fresh one");
    }
}

#[test]
fn a_command_that_leaves_hundreds_of_processes_does_not_stop_the_next() {
    for backend in backends() {
        // Hundreds of processes left running (as nobody, each fork counts against the user's
        // limit): all of them die with the command, in the environment, which goes on. They
        // carry a name of this run's own (under Landlock the pid namespace is the machine's,
        // where other tests run commands too).
        let marker = format!("hotsh-storm-{}-{backend}", std::process::id());
        let storm =
            format!("for i in $(seq 300); do (exec -a {marker} sleep 120 &) ; done; echo started");
        let script = vec![
            bash_call(&format!("{SANDBOX_ID}; {storm}")),
            bash_call(&format!("{SANDBOX_ID}; pgrep -c -f '^{marker}' || true; echo next")),
            say("done"),
        ];
        let (mut agent, session) = one_session(backend, "", script);
        agent.prompt(&session, "go");
        let results = agent.tool_results();
        assert!(results[0].0.ends_with("started"), "{backend}: {results:?}");
        assert!(results[1].0.ends_with("0\nnext"), "{backend}: nothing left: {results:?}");
        assert_eq!(
            sandbox_id(&results[0].0),
            sandbox_id(&results[1].0),
            "{backend}: the same environment serves the next command: {results:?}"
        );
        assert!(
            descendants(agent.pid()).iter().all(|(_, _, name)| name != "sleep"),
            "{backend}: no process of the storm outlives it"
        );
    }
}

/// A file system of 4 MiB (a tmpfs; only root can mount one), removed when dropped.
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn mount() -> Option<Self> {
        if !hotsh_tests::running_as_root() {
            return None;
        }
        let dir = tempfile::tempdir().expect("a mount point");
        #[allow(clippy::disallowed_methods, reason = "the test's own mount")]
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4m,mode=1777", "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount runs");
        status.success().then_some(Self(dir))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        #[allow(clippy::disallowed_methods, reason = "the test's own mount")]
        let _ = std::process::Command::new("umount").arg("-l").arg(self.0.path()).status();
    }
}

#[test]
fn a_command_that_fills_its_temp_dir_does_not_stop_the_next_command() {
    // A full disk only root can make without filling the machine's: a tmpfs of 4 MiB as the
    // agent's temp dir (its commands' private `$TMPDIR` inside it). As another user the
    // suite's run as root has covered it.
    let Some(disk) = SmallDisk::mount() else {
        eprintln!("not root: no small file system to fill; the run as root covers this");
        return;
    };
    for backend in backends() {
        let fill = "head -c 16M /dev/zero > \"$TMPDIR/fill\"; echo status $?";
        let script = vec![
            bash_call(&format!("{SANDBOX_ID}; {fill}")),
            bash_call(&format!(
                "{SANDBOX_ID}; echo more > \"$TMPDIR/more\" || echo full; echo next"
            )),
            bash_call("rm -f \"$TMPDIR/fill\"; echo x > \"$TMPDIR/more\" && cat \"$TMPDIR/more\""),
            say("done"),
        ];
        let mut options = crate::sandbox::options(backend, "", script);
        options.env.push(("TMPDIR".to_owned(), disk.0.path().to_string_lossy().into_owned()));
        let mut agent = Agent::start(options);
        agent.initialize(true);
        let session = agent.new_session();
        agent.prompt(&session, "go");
        let results = agent.tool_results();
        assert!(results[0].0.contains("No space left on device"), "{backend}: {results:?}");
        assert!(results[1].0.contains("full\nnext"), "{backend}: it still runs: {results:?}");
        assert_eq!(sandbox_id(&results[0].0), sandbox_id(&results[1].0), "{backend}");
        assert_eq!(results[2].0, "x", "{backend}: room again, the temp dir works: {results:?}");
    }
}
