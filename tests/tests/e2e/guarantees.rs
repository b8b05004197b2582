//! The executor's guarantees: no orphans, no leaked secrets, bounded memory and output.

use hotsh_tests::{Agent, AgentOptions, bash_call, eventually, processes_matching, say};
use serde_json::json;
use std::time::{Duration, Instant};

/// The ways commands run here: unconfined (the shim's own kill is all there is), and each
/// sandbox backend this machine has (under bwrap a sandbox environment outlives a command,
/// so there too the shim's kill is what ends its leftovers).
fn setups() -> Vec<(&'static str, String)> {
    let mut setups = vec![("unconfined", UNCONFINED.to_owned())];
    for backend in crate::sandbox::backends() {
        setups.push((backend, format!("[sandbox]\nbackend = \"{backend}\"\n")));
    }
    setups
}

#[test]
fn sigkill_of_the_host_leaves_no_process_behind() {
    for (number, (setup, config)) in setups().into_iter().enumerate() {
        // A background task and a foreground command, each with a child in its group, a
        // setsid child that left the group, and the shell itself waiting.
        let marker = format!("1000.05{number}1");
        let command = format!("bash -c 'sleep {marker} & setsid sleep {marker} & sleep {marker}'");
        let responses = vec![
            json!({"tool_calls": [{"name": "bash", "arguments": {"command": command, "run_in_background": true}}]}),
            bash_call(&command),
        ];
        let mut options = AgentOptions::script(responses);
        options.config = Some(config);
        let mut agent = Agent::start(options);
        agent.initialize(true);
        let session = agent.new_session();
        agent.start_prompt(&session, "go");
        let sleeps = || processes_matching(&format!("sleep {marker}"));
        eventually(&format!("{setup}: six sleeps to run"), || sleeps().len() >= 6);
        let supervisor = supervisor_of(agent.pid());

        agent.kill9();
        let killed_at = Instant::now();
        eventually(&format!("{setup}: every sleep to be gone"), || sleeps().is_empty());
        let took = killed_at.elapsed();
        assert!(took < Duration::from_secs(1), "{setup}: processes outlived the host by {took:?}");
        // The supervisor and its spare shim end too (gone, or a zombie for init to reap).
        eventually("the supervisor to end", || !running(supervisor));
    }
}

#[test]
fn a_commands_leftovers_die_when_it_ends_even_in_a_session_of_their_own() {
    for (number, (setup, config)) in setups().into_iter().enumerate() {
        let marker = format!("sleep 1000.06{number}1");
        // A child in the command's group, one that left it with setsid, one in a subshell
        // that exited (re-parented): the command ends, all of them end with it.
        let command = format!("{marker} & setsid {marker} & ({marker} &); echo done");
        let mut options = AgentOptions::script(vec![bash_call(&command), say("ok")]);
        options.config = Some(config);
        let mut agent = Agent::start(options);
        agent.initialize(true);
        let session = agent.new_session();
        agent.prompt(&session, "go");
        assert_eq!(agent.last_tool_result(), ("done".to_owned(), false), "{setup}");
        eventually(&format!("{setup}: the leftovers to be gone"), || {
            processes_matching(&marker).is_empty()
        });
    }
}

/// Whether `pid` is a process that has not ended (neither gone nor a zombie).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

#[test]
fn clean_exit_stops_background_tasks() {
    let marker = "sleep 30.0513";
    let mut agent = Agent::start(AgentOptions::script(vec![
        json!({"tool_calls": [{"name": "bash", "arguments": {"command": marker, "run_in_background": true}}]}),
        say("ok"),
    ]));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    eventually("the task to run", || !processes_matching(marker).is_empty());
    assert!(agent.finish().success());
    eventually("the task to be gone", || processes_matching(marker).is_empty());
}

#[test]
fn commands_never_see_the_hosts_secrets() {
    let responses = vec![
        json!({"tool_calls": [
            {"name": "bash", "arguments": {"command": "env"}},
            {"name": "bash", "arguments": {"command": "env", "run_in_background": true}}
        ]}),
        say("started"),
        json!({"tool_calls": [{"name": "bash_output", "arguments": {"task_id": "bash-1"}}]}),
        say("done"),
    ];
    let mut options = AgentOptions::script(responses);
    options.env = vec![
        ("DEEPSEEK_API_KEY".into(), "sk-secret-0517".into()),
        ("GITHUB_TOKEN".into(), "ghp-secret-0517".into()),
        ("COPY_OF_THE_KEY".into(), "sk-secret-0517".into()),
        ("DB_PASSWORD".into(), "hunter2-0517".into()),
        ("SSH_KEY_PATH".into(), "/keys/0517".into()),
        ("DATABASE_URL".into(), "postgres://app:pw-0517@db/prod".into()),
        ("SENTRY_DSN".into(), "https://dsn-0517@sentry.example/1".into()),
        ("SLACK_WEBHOOK_URL".into(), "https://hooks.example/webhook-0517".into()),
        ("GH_PAT".into(), "pat-0517".into()),
        ("AUTH_HEADER".into(), "Bearer sk-secret-0517".into()),
        ("SESSION_COOKIE".into(), "cookie-0517".into()),
        ("LDAP_PASSWD".into(), "passwd-0517".into()),
        ("CLOUD_CREDENTIALS".into(), "cred-0517".into()),
        // Named by a model profile as holding its key: a secret whatever its name.
        ("LOCALAI".into(), "localai-0517".into()),
        ("PLAIN_SETTING".into(), "visible-0517".into()),
    ];
    options.config = Some(
        "[env]\nkeep = [\"SSH_KEY_PATH\"]\n[models.local]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\napi_key_env = \"LOCALAI\"\n"
            .to_owned(),
    );
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "show env");
    let started = agent.tool_results()[1].0.clone();
    let path: std::path::PathBuf = started.rsplit("Full output: ").next().unwrap().trim().into();
    hotsh_tests::wait_for_file_containing(&path, "PLAIN_SETTING");
    agent.prompt(&session, "read it");
    let results = agent.tool_results();
    for (text, _) in [&results[0], results.last().unwrap()] {
        for secret in [
            "sk-secret-0517",
            "ghp-secret-0517",
            "hunter2-0517",
            "DEEPSEEK_API_KEY",
            "GITHUB_TOKEN",
            "pw-0517",
            "dsn-0517",
            "webhook-0517",
            "pat-0517",
            "cookie-0517",
            "passwd-0517",
            "cred-0517",
            "localai-0517",
        ] {
            assert!(!text.contains(secret), "{secret} leaked into:\n{text}");
        }
        assert!(text.contains("PLAIN_SETTING=visible-0517"), "{text}");
        assert!(text.contains("SSH_KEY_PATH=/keys/0517"), "the keep list was ignored:\n{text}");
    }
}

#[test]
fn a_gigabyte_of_output_stays_bounded_everywhere() {
    let command = "yes hotsh-output-line | head -c 1073741824";
    let mut options = AgentOptions::script(vec![bash_call(command), say("done")]);
    options.config = Some("[executor]\nspill_cap_mib = 8\n".to_owned());
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "flood");
    assert_eq!(response["result"]["stopReason"], "end_turn");

    // The model's view: bounded, cut in the middle, naming the (capped) spill file.
    let (text, is_error) = agent.last_tool_result();
    assert!(!is_error);
    assert!(text.len() < 32_000, "model text is {} bytes", text.len());
    assert!(text.starts_with("hotsh-output-line\nhotsh-output-line\n"));
    let marker = text.lines().last().unwrap();
    assert!(
        marker.ends_with(&format!("(its first {} of 1073741824 bytes only)]", 8 << 20)),
        "{marker}"
    );
    let path = marker
        .strip_prefix("[output truncated; full output: ")
        .unwrap()
        .split(" (")
        .next()
        .unwrap();
    assert_eq!(std::fs::metadata(path).unwrap().len(), 8 << 20);

    // The client got a bounded number of bounded updates, not a flood.
    let outputs: Vec<usize> = agent
        .updates(&session)
        .iter()
        .filter_map(|u| u["_meta"]["terminal_output"]["data"].as_str().map(str::len))
        .collect();
    let sent: usize = outputs.iter().sum();
    assert!(outputs.len() < 2_000, "{} terminal updates", outputs.len());
    assert!(outputs.iter().all(|&len| len <= 300 << 10), "an update over the live cap");
    assert!(sent < 256 << 20, "{sent} bytes sent to the client");

    // The host's memory stayed bounded.
    let peak = agent.peak_rss_kib();
    assert!(peak < 96 * 1024, "hotsh peaked at {peak} KiB");
}

/// This process's uid (the agent runs as the same user).
fn uid() -> u32 {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").unwrap().uid()
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn output_files_are_private_removed_on_exit_and_leftovers_of_dead_agents_swept() {
    let tmp = tempfile::tempdir().unwrap();
    let uid = uid();
    // A dead agent's directory is swept; a link planted under such a name is not followed.
    let stale = tmp.path().join(format!("hotsh-{uid}-999999999-0123456789ab"));
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("call-1-1.log"), "old").unwrap();
    let victim = tmp.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("precious"), "keep me").unwrap();
    let planted = tmp.path().join(format!("hotsh-{uid}-999999998-planted"));
    std::os::unix::fs::symlink(&victim, &planted).unwrap();

    let mut options = AgentOptions::script(vec![
        bash_call("seq 1 100000"),
        json!({"tool_calls": [{"name": "bash", "arguments": {"command": "echo task", "run_in_background": true}}]}),
        say("ok"),
    ]);
    options.env = vec![("TMPDIR".into(), tmp.path().to_string_lossy().into_owned())];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    assert!(!stale.exists(), "the dead agent's output directory was not swept");
    assert_eq!(std::fs::read_to_string(victim.join("precious")).unwrap(), "keep me");
    let session = agent.new_session();
    agent.prompt(&session, "long output");
    let (text, _) = agent.tool_results().remove(0);
    let path =
        text.lines().last().unwrap().strip_prefix("[output truncated; full output: ").unwrap();
    let spill = std::path::PathBuf::from(path.trim_end_matches(']'));
    let task_output: std::path::PathBuf =
        agent.tool_results()[1].0.rsplit("Full output: ").next().unwrap().trim().into();
    hotsh_tests::wait_for_file_containing(&task_output, "task");

    // <tmp>/hotsh-<uid>-<pid>-<random>/<session>/<file>: 0700 directories, 0600 files.
    let session_dir = spill.parent().unwrap();
    let root = session_dir.parent().unwrap();
    assert_eq!(session_dir.file_name().unwrap().to_str().unwrap(), session);
    assert_eq!(root.parent().unwrap(), tmp.path());
    let root_name = root.file_name().unwrap().to_str().unwrap();
    assert!(root_name.starts_with(&format!("hotsh-{uid}-{}-", agent.pid())), "{root_name}");
    assert_eq!(task_output.parent().unwrap(), session_dir);
    assert_eq!((mode(root), mode(session_dir)), (0o700, 0o700));
    assert_eq!((mode(&spill), mode(&task_output)), (0o600, 0o600));

    assert!(agent.finish().success());
    assert!(!root.exists(), "the output files outlived a clean exit");
}

/// Commands run unconfined: for tests of what a command can do to its own shim.
pub(crate) const UNCONFINED: &str = "[sandbox]\nmode = \"danger-full-access\"\n";

#[test]
fn a_command_that_kills_its_own_shim_leaves_nothing_behind() {
    let marker = "sleep 1000.0812";
    // `$PPID` of the command's shell is its shim.
    let command = format!("{marker} & sleep 0.2; kill -9 $PPID; sleep 1000.0813");
    let mut options = AgentOptions::script(vec![bash_call(&command), say("ok")]);
    // Unconfined, so the command can reach its shim (under bwrap it would see only the
    // sandbox's own init as its parent).
    options.config = Some(UNCONFINED.to_owned());
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "go");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(agent.last_tool_result().0.contains("[killed by signal: SIGKILL]"));
    // The orphan was re-parented to the command supervisor, which killed it; the agent still
    // runs.
    eventually("the orphaned sleep to be gone", || processes_matching(marker).is_empty());
    assert!(processes_matching("sleep 1000.0813").is_empty());
    agent.wait_for_stderr("a process was re-parented to the supervisor");
}

#[test]
fn a_command_that_stops_its_own_shim_is_still_stopped_on_time() {
    let marker = "sleep 1000.0814";
    let command = format!("{marker} & kill -STOP $PPID; sleep 1000.0815");
    let call = json!({"tool_calls": [{"name": "bash", "arguments": {"command": command, "timeout": 500}}]});
    let mut agent = Agent::start(AgentOptions::script(vec![call, say("ok")]));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    let (text, _) = agent.last_tool_result();
    assert!(text.starts_with("[timed out after 500ms]"), "{text}");
    eventually("every sleep to be gone", || {
        processes_matching(marker).is_empty() && processes_matching("sleep 1000.0815").is_empty()
    });
}

#[test]
fn a_same_user_command_cannot_read_the_agents_environment() {
    let secret = "sk-environ-0816-secret";
    // The command's shim (`$PPID`) is a fork of the supervisor, whose parent is the agent.
    let command = "supervisor=$(awk '{print $4}' /proc/$PPID/stat); \
                   agent=$(awk '{print $4}' /proc/$supervisor/stat); \
                   for pid in $agent $supervisor $PPID; do \
                     if cat /proc/$pid/environ >/dev/null 2>&1; then echo readable; else echo unreadable; fi; \
                   done; \
                   id -u";
    let mut options = AgentOptions::script(vec![bash_call(command), say("ok")]);
    // Unconfined: inside bwrap's PID namespace the command would not see these processes.
    options.config = Some(UNCONFINED.to_owned());
    options.env = vec![("DEEPSEEK_API_KEY".into(), secret.into())];
    // As root the check would prove nothing (root reads anything): run as another user.
    if hotsh_tests::running_as_root() {
        options.run_as = Some((65534, 65534));
    }
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "peek");
    let (text, _) = agent.last_tool_result();
    let mut lines = text.lines();
    for process in ["agent", "supervisor", "shim"] {
        assert_eq!(lines.next(), Some("unreadable"), "the {process}'s environment: {text}");
    }
    assert_ne!(lines.next(), Some("0"), "the command ran as root: {text}");
    assert!(!text.contains(secret));
}

#[test]
fn four_hundred_background_tasks_fit_under_a_soft_limit_of_1024_files() {
    const TASKS: usize = 400;
    let marker = "sleep 1000.0817";
    let starts: Vec<serde_json::Value> = (0..TASKS)
        .map(|_| json!({"name": "bash", "arguments": {"command": marker, "run_in_background": true}}))
        .collect();
    let mut options = AgentOptions::script(vec![
        json!({"tool_calls": starts}),
        bash_call("echo still able to run commands"),
        say("ok"),
    ]);
    options.config = Some(format!("[executor]\nmax_background_tasks = {TASKS}\n"));
    options.soft_open_files = Some(1024);
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "start them all");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let results = agent.tool_results();
    let started =
        results.iter().filter(|(t, e)| !e && t.starts_with("Started background task")).count();
    assert_eq!(started, TASKS, "{:?}", results.iter().find(|(_, e)| *e));
    assert_eq!(results.last().unwrap(), &("still able to run commands".to_owned(), false));
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", agent.pid())).unwrap();
    let open_files = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
    let values: Vec<&str> = open_files.split_whitespace().skip(3).take(2).collect();
    assert_eq!(values[0], values[1], "the soft limit was not raised: {open_files}");
    assert!(agent.finish().success());
    eventually("every task to be gone", || processes_matching(marker).is_empty());
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh with a bad config")]
fn config_values_out_of_range_are_refused_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    for (config, expected) in [
        (
            "[executor]\nspill_cap_mib = 17592186044416\n",
            "error: config: executor.spill_cap_mib must be between 1 and 1048576 (1 TiB), got 17592186044416",
        ),
        (
            "[executor]\nmax_background_tasks = 0\n",
            "error: config: executor.max_background_tasks must be between 1 and 4096, got 0",
        ),
        (
            "[sandbox]\nkeep_environment_s = 86401\n",
            "error: config: sandbox.keep_environment_s must be between 0 and 86400 (a day), got 86401",
        ),
        (
            "[sandbox]\nmax_environments = 0\n",
            "error: config: sandbox.max_environments must be between 1 and 1024, got 0",
        ),
    ] {
        let path = dir.path().join("config.toml");
        std::fs::write(&path, config).unwrap();
        let output = std::process::Command::new(hotsh_tests::hotsh_binary())
            .args(["acp", "--no-default-plugins", "--config"])
            .arg(&path)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.trim_end(), expected);
    }
}

/// The program running as the command's shim (its parent, unconfined), as the command sees it:
/// its `argv[0]`, then its executable (readable to root only: the shim is not dumpable).
fn shim_of_a_command(options: AgentOptions) -> (String, String) {
    let mut options = options;
    let command = "tr '\\0' '\\n' < /proc/$PPID/cmdline | head -n 1; \
                   readlink /proc/$PPID/exe 2>/dev/null || echo unreadable";
    options.responses = vec![bash_call(command), say("ok")];
    options.config = Some(UNCONFINED.to_owned());
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    let (text, _) = agent.last_tool_result();
    assert!(agent.finish().success());
    let mut lines = text.lines().map(str::to_owned);
    (lines.next().unwrap_or_default(), lines.next().unwrap_or_default())
}

#[test]
fn commands_run_under_the_small_shim_beside_hotsh_or_under_hotsh_itself_without_it() {
    let (name, exe) = shim_of_a_command(AgentOptions::script(Vec::new()));
    let shim = hotsh_tests::shim_binary();
    assert_eq!(name, shim.to_str().unwrap());
    if hotsh_tests::running_as_root() {
        assert_eq!(exe, shim.to_str().unwrap());
    } else {
        assert_eq!(exe, "unreadable", "an ordinary user read a shim's executable");
    }
    // A copy of hotsh with no shim beside it starts itself as the shim.
    let mut alone = AgentOptions::script(Vec::new());
    alone.without_shim = true;
    let (name, exe) = shim_of_a_command(alone);
    assert!(name.ends_with("/bin/hotsh"), "{name}");
    assert!(exe.ends_with("/bin/hotsh") || exe == "unreadable", "{exe}");
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs the supervisor by itself")]
fn a_supervisor_from_another_build_runs_nothing_and_says_so() {
    // The build is checked first, before the lifeline and the socket (3 and 4) are looked at.
    let output = std::process::Command::new(hotsh_tests::shim_binary())
        .args(["__supervisor", "0.0.0+another", "3", "4"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("but the agent is hotsh 0.0.0+another; no command will run"),
        "{stderr}"
    );
    assert!(stderr.contains("reinstall hotsh"), "{stderr}");
}

/// The pid of the command supervisor of the agent `agent_pid`: its child of that name.
fn supervisor_of(agent_pid: u32) -> u32 {
    let children: Vec<u32> = std::fs::read_dir(format!("/proc/{agent_pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|pids| pids.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<_>>())
        .collect();
    *children
        .iter()
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "hotsh-supervise")
        })
        .unwrap_or_else(|| panic!("the agent has no command supervisor among {children:?}"))
}

/// An agent (commands unconfined) whose first command is `command` and whose second echoes a
/// line, which must come back: the command did not stop the next one. Returns the agent after
/// the turn, the first command's result, and the supervisor the agent had before the turn.
fn then_the_next_command(command: &str) -> (Agent, (String, bool), u32) {
    let mut options = AgentOptions::script(vec![
        bash_call(command),
        bash_call("echo the next command runs"),
        say("ok"),
    ]);
    options.config = Some(UNCONFINED.to_owned());
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    let supervisor = supervisor_of(agent.pid());
    let response = agent.prompt(&session, "go");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let results = agent.tool_results();
    assert_eq!(results[1], ("the next command runs".to_owned(), false), "{results:?}");
    (agent, results[0].clone(), supervisor)
}

#[test]
fn a_command_that_kills_the_supervisor_loses_only_running_commands() {
    let marker = "sleep 1000.0818";
    // The shim's parent is the supervisor.
    let command = format!(
        "{marker} & sleep 0.2; kill -9 $(awk '{{print $4}}' /proc/$PPID/stat); sleep 1000.0819"
    );
    let (agent, (first, _), first_supervisor) = then_the_next_command(&command);
    // The command died with its supervisor: its shim came to the agent, which killed it.
    assert!(first.contains("[killed by signal: SIGKILL]"), "{first}");
    eventually("the command's processes to be gone", || {
        processes_matching(marker).is_empty() && processes_matching("sleep 1000.0819").is_empty()
    });
    assert_ne!(supervisor_of(agent.pid()), first_supervisor, "a new supervisor was started");
    agent.wait_for_stderr("the command supervisor has died; starting a new one");
    assert!(agent.finish().success());
}

#[test]
fn a_command_that_stops_the_supervisor_does_not_stop_the_next_command() {
    let command = "kill -STOP $(awk '{print $4}' /proc/$PPID/stat); echo stopped it";
    // The host woke the supervisor up (SIGCONT) when it did not answer.
    let (agent, first, supervisor) = then_the_next_command(command);
    assert_eq!(first, ("stopped it".to_owned(), false));
    assert_eq!(supervisor_of(agent.pid()), supervisor, "the same supervisor serves");
    assert!(agent.finish().success());
}

/// A command that sends `signal` to the spare shim the supervisor forked ahead of time for
/// the next command, and says so.
fn signal_the_spare(signal: &str) -> String {
    format!(
        "sleep 0.1; supervisor=$(awk '{{print $4}}' /proc/$PPID/stat); \
         for child in $(cat /proc/$supervisor/task/$supervisor/children); do \
           [ \"$child\" != \"$PPID\" ] && kill -{signal} \"$child\" && echo sent to a spare; \
         done; true"
    )
}

#[test]
fn a_command_that_kills_the_spare_shim_does_not_stop_the_next_command() {
    let (agent, first, _) = then_the_next_command(&signal_the_spare("KILL"));
    assert_eq!(first, ("sent to a spare".to_owned(), false));
    assert!(agent.finish().success());
}

#[test]
fn a_command_that_stops_the_spare_shim_does_not_stop_the_next_command() {
    // The host nudges the supervisor (SIGCONT), which passes it on to its spare.
    let (agent, first, _) = then_the_next_command(&signal_the_spare("STOP"));
    assert_eq!(first, ("sent to a spare".to_owned(), false));
    assert!(agent.finish().success());
}

#[test]
fn a_large_command_reaches_the_shell_whole_and_one_too_large_to_start_says_so() {
    // 100,000 bytes: more than one message to the supervisor takes (the job then travels in a
    // memory file); 300,000: more than `exec` takes for one string (128 KiB), so the shell
    // gets it in parts; and more than this system takes for a program's arguments and
    // environment in all (`getconf ARG_MAX`, 2 MiB here).
    // SAFETY: a plain sysconf query.
    let arg_max = usize::try_from(unsafe { libc::sysconf(libc::_SC_ARG_MAX) }).expect("ARG_MAX");
    let too_large = arg_max + (64 << 10);
    let sized = |size: usize| {
        let payload = "x".repeat(size);
        // The parts stay out of the command's sight: no variable, nothing in its environment.
        bash_call(&format!(
            "payload={payload}; echo ${{#payload}} \"[${{__hotsh_command-}}]\" $(env | grep -c HOTSH_COMMAND_PART) \"$0\""
        ))
    };
    // Under bwrap once with a sandbox per command: the gate inside bwrap starts the shell.
    let per_command = (
        "bwrap, a sandbox per command",
        "[sandbox]\nbackend = \"bwrap\"\nkeep_environment_s = 0\n".to_owned(),
    );
    let has_bwrap = crate::sandbox::backends().contains(&"bwrap");
    for (setup, config) in setups().into_iter().chain(has_bwrap.then_some(per_command)) {
        let responses = vec![sized(100_000), sized(300_000), sized(too_large), say("ok")];
        let mut options = AgentOptions::script(responses);
        options.config = Some(config);
        let mut agent = Agent::start(options);
        agent.initialize(true);
        let session = agent.new_session();
        let answer = agent.prompt(&session, "go");
        let results = agent.tool_results();
        assert_eq!(results.len(), 3, "{setup}: {answer}\n{}", agent.stderr());
        let shell = |text: &str| text.split_whitespace().last().unwrap_or_default().to_owned();
        for (result, size) in results[..2].iter().zip(["100000", "300000"]) {
            let (text, is_error) = result;
            assert!(!is_error, "{setup}: {text}");
            assert_eq!(text, &format!("{size} [] 0 {}", shell(text)), "{setup}");
            assert!(shell(text).ends_with("sh"), "{setup}: $0 is the shell, as with -c: {text}");
        }
        // A command that did not start is a fact the model reads (exit 127), like any other.
        let (text, _) = &results[2];
        assert!(
            text.contains(
                "hotsh: this command is too long to start: with its environment it takes "
            ) && text.contains("write it to a file and run the file")
                && text.contains("[exit code: 127]"),
            "{setup}: {text}"
        );
        assert!(agent.finish().success());
    }
}

#[test]
fn the_agent_exits_at_once_when_stdin_closes_and_its_supervisor_with_it() {
    let mut agent = Agent::start(AgentOptions::script(vec![bash_call("true"), say("ok")]));
    agent.initialize(true);
    let session = agent.new_session();
    // A command ran: the supervisor is up, with a spare shim forked ahead.
    agent.prompt(&session, "run one");
    let children = std::fs::read_dir(format!("/proc/{}/task", agent.pid()))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.unwrap().path().join("children")).ok())
        .flat_map(|list| list.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .collect::<Vec<_>>();
    assert!(!children.is_empty(), "the supervisor is the agent's child");
    let started = Instant::now();
    let status = agent.finish();
    let took = started.elapsed();
    assert!(status.success(), "{status:?}");
    // The agent gives its supervisor 1 s before it kills it: it is never needed, since the
    // supervisor forks no spare once the agent closed its socket, and ends.
    assert!(took < Duration::from_millis(900), "exit took {took:?}");
    for child in children {
        // Gone, or a zombie waiting for whoever reaps orphans here.
        eventually(&format!("child {child} of the agent to be gone"), || {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .map_or(true, |stat| stat.rsplit(") ").next().is_some_and(|s| s.starts_with('Z')))
        });
    }
}
