//! The executor's guarantees: no orphans, no leaked secrets, bounded memory and output.

use hotsh_tests::{Agent, AgentOptions, bash_call, eventually, processes_matching, say};
use serde_json::json;
use std::time::{Duration, Instant};

#[test]
fn sigkill_of_the_host_leaves_no_process_behind() {
    // A background task and a foreground command, each with a child in its group, a setsid
    // child that left the group, and the shell itself waiting.
    let marker = "1000.0511";
    let command = format!("bash -c 'sleep {marker} & setsid sleep {marker} & sleep {marker}'");
    let responses = vec![
        json!({"tool_calls": [{"name": "bash", "arguments": {"command": command, "run_in_background": true}}]}),
        bash_call(&command),
    ];
    let mut agent = Agent::start(AgentOptions::script(responses));
    agent.initialize(true);
    let session = agent.new_session();
    agent.start_prompt(&session, "go");
    eventually("six sleeps to run", || processes_matching(&format!("sleep {marker}")).len() >= 6);

    agent.kill9();
    let killed_at = Instant::now();
    eventually("every sleep to be gone", || {
        processes_matching(&format!("sleep {marker}")).is_empty()
    });
    let took = killed_at.elapsed();
    assert!(took < Duration::from_secs(1), "processes outlived the host by {took:?}");
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
        ("PLAIN_SETTING".into(), "visible-0517".into()),
    ];
    options.config = Some("[env]\nkeep = [\"SSH_KEY_PATH\"]\n".to_owned());
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
