//! Command hooks in Claude Code's format: read from a real `~/.claude/settings.json` (a
//! temporary home) and a project's `.claude/` settings, run at their points of a turn, each
//! run a card; a project's hooks only once the user allowed them.

use hotsh_tests::{Agent, AgentOptions, bash_call, say};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Writes `hooks` (Claude's `hooks` object) as the settings file `path`.
fn settings(path: &Path, hooks: Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_vec_pretty(&json!({ "hooks": hooks })).unwrap()).unwrap();
}

/// One hook entry for `event`: `command` under `matcher`, with a timeout in seconds.
fn hook(matcher: &str, command: &str, timeout: Option<u64>) -> Value {
    let mut entry = json!({"type": "command", "command": command});
    if let Some(timeout) = timeout {
        entry["timeout"] = json!(timeout);
    }
    json!([{ "matcher": matcher, "hooks": [entry] }])
}

/// An agent whose home is `home` (its `~/.claude/settings.json` is read), playing `script`.
fn agent_with_home(home: &Path, script: Vec<Value>) -> Agent {
    agent_with_plugins(home, script, None)
}

/// [`agent_with_home`] with these plugins instead of the default ones.
fn agent_with_plugins(home: &Path, script: Vec<Value>, plugins: Option<Vec<PathBuf>>) -> Agent {
    let mut options = AgentOptions::script(script);
    if let Some(plugins) = plugins {
        options.plugins = plugins;
    }
    options.env.push(("HOME".into(), home.display().to_string()));
    let mut agent = Agent::start(options);
    agent.initialize(true);
    agent
}

/// tool-bash and the `hooked` fixture plugin (a hotsh-abi 1.1 plugin with hooks).
fn bash_and_hooked() -> Option<Vec<PathBuf>> {
    Some(vec![hotsh_tests::tool_bash_plugin(), hotsh_tests::hooked_build("one")])
}

/// The hook cards of `session` so far: (title, status, text).
fn hook_cards(agent: &Agent, session: &str) -> Vec<(String, String, String)> {
    agent
        .updates(session)
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .filter(|u| u["title"].as_str().is_some_and(|t| t.contains(" hook (")))
        .map(|u| {
            let text = u["content"][0]["content"]["text"].as_str().unwrap_or_default().to_owned();
            (
                u["title"].as_str().unwrap().to_owned(),
                u["status"].as_str().unwrap().to_owned(),
                text,
            )
        })
        .collect()
}

/// The last model request, as text.
fn last_request(agent: &Agent) -> String {
    agent.model_requests().last().map(Value::to_string).unwrap_or_default()
}

/// Sends `text`, answers each permission request it leads to with the next of `choices` (an
/// option id), and returns the requests and the prompt's answer.
fn prompt_choosing(
    agent: &mut Agent,
    session: &str,
    text: &str,
    choices: &[&str],
) -> (Vec<Value>, Value) {
    let before = agent.received.len();
    let prompt = agent.start_prompt(session, text);
    let mut asked = Vec::new();
    let mut from = before;
    for choice in choices {
        let at = agent.wait_for_from(from, |m| m["method"] == "session/request_permission");
        let request = agent.received[at].clone();
        agent.answer(
            &request,
            json!({"result": {"outcome": {"outcome": "selected", "optionId": choice}}}),
        );
        asked.push(request);
        from = at + 1;
    }
    let answer = agent.response(prompt);
    let more = agent.received[before..]
        .iter()
        .filter(|m| m["method"] == "session/request_permission")
        .count();
    assert_eq!(more, choices.len(), "permission requests: {:?}", agent.received[before..].to_vec());
    (asked, answer)
}

#[test]
fn a_pre_tool_use_hook_that_exits_2_blocks_rm_rf_and_the_model_reads_its_stderr() {
    let home = tempfile::tempdir().unwrap();
    settings(
        &home.path().join(".claude/settings.json"),
        json!({ "PreToolUse": hook(
            "Bash",
            "grep -q 'rm -rf' && { echo 'rm -rf is not allowed here' >&2; exit 2; }; exit 0",
            None,
        )}),
    );
    let mut agent = agent_with_home(
        home.path(),
        vec![
            bash_call("mkdir -p victim && rm -rf victim"),
            bash_call("echo still-here"),
            say("done"),
        ],
    );
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "go")["result"]["stopReason"], "end_turn");
    let results = agent.tool_results();
    assert!(results[0].0.contains("rm -rf is not allowed here"), "{results:?}");
    assert!(results[0].1, "a blocked call is an error for the model");
    assert!(results[1].0.contains("still-here"), "{results:?}");
    assert!(!agent.workdir.join("victim").exists(), "the blocked command ran");
    let cards = hook_cards(&agent, &session);
    assert_eq!(cards.len(), 2, "{cards:?}");
    assert!(cards[0].0.starts_with("PreToolUse hook (exit 2): grep -q"), "{cards:?}");
    assert_eq!(cards[0].1, "failed");
    assert!(cards[0].2.contains("blocked: rm -rf is not allowed here"), "{cards:?}");
    assert!(cards[0].2.contains("From ~/.claude/settings.json."), "{cards:?}");
    assert_eq!((cards[1].0.contains("(exit 0)"), cards[1].1.as_str()), (true, "completed"));
    // The blocked call's own card says why.
    let finals = agent.final_updates(&session);
    let blocked = finals.iter().find(|u| u["status"] == "failed").unwrap();
    assert!(blocked.to_string().contains("a PreToolUse hook blocked this call"), "{blocked}");
    agent.finish();
}

#[test]
fn permission_decisions_deny_ask_and_updated_input_rewrite_the_call() {
    let home = tempfile::tempdir().unwrap();
    let decide = r#"input=$(cat)
case "$input" in
  *deny-me*) echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"not this one"}}' ;;
  *ask-me*) echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"are you sure?"}}' ;;
  *rewrite-me*) echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","updatedInput":{"command":"echo rewritten"}}}' ;;
esac"#;
    settings(
        &home.path().join(".claude/settings.json"),
        json!({ "PreToolUse": hook("Bash", decide, None) }),
    );
    let mut agent = agent_with_home(
        home.path(),
        vec![
            bash_call("echo deny-me"),
            bash_call("echo ask-me yes"),
            bash_call("echo ask-me no"),
            bash_call("echo rewrite-me"),
            say("done"),
        ],
    );
    let session = agent.new_session();
    let (asked, answer) = prompt_choosing(&mut agent, &session, "go", &["allow", "reject"]);
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    let body = asked[0]["params"]["toolCall"].to_string();
    assert!(body.contains("are you sure?") && body.contains("ask-me yes"), "{body}");
    let results = agent.tool_results();
    assert!(results[0].1 && results[0].0.contains("not this one"), "{results:?}");
    assert!(!results[1].1 && results[1].0.contains("ask-me yes"), "{results:?}");
    assert!(results[2].1 && results[2].0.contains("the user refused this call"), "{results:?}");
    assert!(!results[3].1, "{results:?}");
    assert!(
        results[3].0.contains("rewritten") && !results[3].0.contains("rewrite-me"),
        "{results:?}"
    );
    let cards = hook_cards(&agent, &session);
    assert!(cards[0].2.contains("decided deny (not this one)"), "{cards:?}");
    assert!(cards[3].2.contains("rewrote the call's arguments"), "{cards:?}");
    agent.finish();
}

#[test]
fn context_from_session_start_prompt_and_post_tool_use_hooks_reaches_the_model() {
    let home = tempfile::tempdir().unwrap();
    settings(
        &home.path().join(".claude/settings.json"),
        json!({
            "SessionStart": hook("startup|resume", "grep -o '\"source\":\"[a-z]*\"' | sed 's/^/start-context /'", None),
            "UserPromptSubmit": hook("", "echo prompt-context-$HOTSH_SESSION_ID", None),
            "PostToolUse": hook("Bash", r#"echo '{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"post-context"}}'"#, None),
        }),
    );
    let mut agent = agent_with_home(home.path(), vec![bash_call("echo ran"), say("done")]);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    let requests = agent.model_requests();
    let first = requests[0].to_string();
    assert!(first.contains(r#"start-context \"source\":\"startup\""#), "{first}");
    assert!(first.contains(&format!("prompt-context-{session}")), "{first}");
    assert!(!first.contains("post-context"), "{first}");
    assert!(last_request(&agent).contains("post-context"), "{}", last_request(&agent));
    // SessionStart runs once per opening: not on the next prompt.
    agent.prompt(&session, "again");
    let again = last_request(&agent);
    assert_eq!(again.matches("start-context").count(), 1, "{again}");
    let names: Vec<String> = hook_cards(&agent, &session).into_iter().map(|c| c.0).collect();
    assert_eq!(names.iter().filter(|n| n.starts_with("SessionStart")).count(), 1, "{names:?}");
    agent.finish();
}

#[test]
fn a_user_prompt_submit_hook_that_blocks_keeps_the_prompt_from_the_model() {
    let home = tempfile::tempdir().unwrap();
    settings(
        &home.path().join(".claude/settings.json"),
        json!({ "UserPromptSubmit": hook("", "grep -q secret && { echo 'no secrets in prompts' >&2; exit 2; }; exit 0", None) }),
    );
    let mut agent = agent_with_home(home.path(), vec![say("answered")]);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "here is my secret")["result"]["stopReason"], "end_turn");
    assert!(agent.model_requests().is_empty(), "the model was asked");
    let notes: Vec<Value> = agent
        .updates(&session)
        .into_iter()
        .filter(|u| u["title"] == "A hook blocked this prompt")
        .collect();
    assert_eq!(notes.len(), 1);
    assert!(notes[0].to_string().contains("no secrets in prompts"));
    agent.prompt(&session, "a fine prompt");
    let request = last_request(&agent);
    assert!(request.contains("blocked the user's prompt above"), "{request}");
    agent.finish();
}

#[test]
fn a_stop_hook_that_blocks_makes_the_model_go_on_once() {
    let home = tempfile::tempdir().unwrap();
    let stop =
        r#"grep -q '"stop_hook_active":true' && exit 0; echo 'the tests still fail' >&2; exit 2"#;
    settings(&home.path().join(".claude/settings.json"), json!({ "Stop": hook("", stop, None) }));
    let mut agent = agent_with_home(home.path(), vec![say("first"), say("second"), say("third")]);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "go")["result"]["stopReason"], "end_turn");
    let requests = agent.model_requests();
    assert_eq!(requests.len(), 2, "the Stop hook let the turn end after one more answer");
    assert!(requests[1].to_string().contains("the tests still fail"), "{}", requests[1]);
    let cards = hook_cards(&agent, &session);
    assert_eq!(cards.len(), 2);
    assert_eq!((cards[0].1.as_str(), cards[1].1.as_str()), ("failed", "completed"));
    agent.finish();
}

#[test]
fn hooks_that_hang_crash_print_garbage_or_flood_leave_the_turn_going() {
    let home = tempfile::tempdir().unwrap();
    let mut entries = Vec::new();
    for command in [
        "sleep 30",
        "kill -SEGV $$",
        "echo '{not json'",
        "head -c 100000000 /dev/zero | tr '\\0' x",
        "sleep 1; cat >/dev/null; echo read-slowly",
    ] {
        entries.push(json!({"type": "command", "command": command, "timeout": 3}));
    }
    settings(
        &home.path().join(".claude/settings.json"),
        json!({ "PreToolUse": [{ "matcher": "*", "hooks": entries }] }),
    );
    let mut agent = agent_with_home(home.path(), vec![bash_call("echo the-call-ran"), say("done")]);
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "go")["result"]["stopReason"], "end_turn");
    assert!(agent.tool_results()[0].0.contains("the-call-ran"), "{:?}", agent.tool_results());
    let cards = hook_cards(&agent, &session);
    let of = |needle: &str| cards.iter().find(|c| c.0.contains(needle)).unwrap().clone();
    assert!(of("sleep 30").0.contains("(timed out)"), "{cards:?}");
    assert_eq!(of("kill -SEGV").1, "failed", "{cards:?}");
    assert!(of("{not json").0.contains("(exit 0)"), "{cards:?}");
    let flood = of("head -c");
    assert!(flood.2.len() < 64 << 10, "a hook's card is bounded: {} bytes", flood.2.len());
    assert!(flood.2.contains("bytes not shown"), "{}", &flood.2[..200]);
    assert!(of("read-slowly").2.contains("read-slowly"), "{cards:?}");
    let updates = agent.updates(&session).to_vec();
    assert!(updates.iter().map(Value::to_string).map(|s| s.len()).sum::<usize>() < 4 << 20);
    agent.finish();
}

/// Agent options with `HOME` and the data directory set, each session playing its own list.
fn project_options(home: &Path, data: &Path, sessions: Vec<Vec<Value>>) -> AgentOptions {
    let mut options = AgentOptions::script(Vec::new());
    options.per_session = sessions;
    options.env.push(("HOME".into(), home.display().to_string()));
    options.env.push(("HOTSH_DATA_DIR".into(), data.display().to_string()));
    options
}

fn session_in(agent: &mut Agent, cwd: &Path) -> String {
    agent.wait_for_stderr("initial plugin scan done");
    let answer = agent.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    answer["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("{answer}")).to_owned()
}

fn lines_of(path: &Path) -> usize {
    std::fs::read_to_string(path).map(|text| text.lines().count()).unwrap_or(0)
}

#[test]
fn a_project_hook_runs_only_once_allowed_and_is_asked_about_again_when_it_changes() {
    let (home, data, project) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let marker = project.path().join("hook-ran");
    let file = project.path().join(".claude/settings.json");
    let command = r#"echo ran >> "$CLAUDE_PROJECT_DIR/hook-ran""#;
    settings(&file, json!({ "PostToolUse": hook("Bash", command, None) }));
    let turn = || vec![bash_call("echo x"), say("done")];
    let twice = || [turn(), turn()].concat();
    let mut agent = Agent::start(project_options(home.path(), data.path(), vec![twice(), turn()]));
    agent.initialize(true);

    // Refused: it does not run, the session says so, and it is not asked about again.
    let first = session_in(&mut agent, project.path());
    let (asked, _) = prompt_choosing(&mut agent, &first, "go", &["hooks-refuse"]);
    let request = asked[0]["params"].to_string();
    assert!(request.contains("hook-ran") && request.contains(".claude/settings.json"), "{request}");
    let options: Vec<&str> = asked[0]["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["optionId"].as_str().unwrap())
        .collect();
    assert_eq!(options, ["hooks-session", "hooks-always", "hooks-refuse"]);
    assert_eq!(lines_of(&marker), 0, "a refused hook ran");
    let said = agent.updates(&first).iter().any(|u| u["title"] == "Project hooks not run");
    assert!(said, "the session did not say the hooks were not run");
    prompt_choosing(&mut agent, &first, "again", &[]);
    assert_eq!(lines_of(&marker), 0);

    // Allowed always in the next session: it runs, and keeps running after a restart.
    let second = session_in(&mut agent, project.path());
    prompt_choosing(&mut agent, &second, "go", &["hooks-always"]);
    assert_eq!(lines_of(&marker), 1);
    agent.finish();
    let mut agent = Agent::start(project_options(home.path(), data.path(), vec![twice()]));
    agent.initialize(true);
    let third = session_in(&mut agent, project.path());
    prompt_choosing(&mut agent, &third, "go", &[]);
    assert_eq!(lines_of(&marker), 2);
    // Nothing of the consent is in the project.
    assert_eq!(std::fs::read_dir(project.path().join(".claude")).unwrap().count(), 1);

    // Changed: asked again before it runs.
    let changed = format!("{command} # v2");
    settings(&file, json!({ "PostToolUse": hook("Bash", &changed, None) }));
    let (asked, _) = prompt_choosing(&mut agent, &third, "again", &["hooks-session"]);
    assert!(asked[0]["params"].to_string().contains("# v2"));
    assert_eq!(lines_of(&marker), 3);
    agent.finish();
}

#[test]
fn a_hook_the_model_writes_into_the_project_is_asked_about_before_it_ever_runs() {
    let (home, data, project) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let planted = r#"mkdir -p .claude && printf '%s' '{"hooks":{"PreToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"touch planted"}]}]}}' > .claude/settings.json"#;
    let mut agent = Agent::start(project_options(
        home.path(),
        data.path(),
        vec![vec![
            bash_call(planted),
            bash_call("echo x"),
            say("done"),
            bash_call("echo y"),
            say("done"),
        ]],
    ));
    agent.initialize(true);
    let session = session_in(&mut agent, project.path());
    prompt_choosing(&mut agent, &session, "go", &[]);
    assert!(project.path().join(".claude/settings.json").exists(), "{:?}", agent.tool_results());
    assert!(
        !project.path().join("planted").exists(),
        "the planted hook ran in the turn that wrote it"
    );
    let (asked, _) = prompt_choosing(&mut agent, &session, "again", &["hooks-refuse"]);
    assert!(asked[0]["params"].to_string().contains("touch planted"));
    assert!(!project.path().join("planted").exists(), "a refused planted hook ran");
    agent.finish();
}

#[test]
fn the_sandbox_keeps_the_users_claude_settings_read_only_and_confines_project_hooks() {
    for backend in crate::sandbox::backends() {
        let outside = crate::sandbox::elsewhere();
        let escaped = outside.path().join("escaped");
        let mut options = crate::sandbox::options(
            backend,
            "",
            vec![
                bash_call("mkdir -p .claude && echo '{}' > .claude/settings.json; echo exit=$?"),
                say("done"),
            ],
        );
        // An editor opened on the home folder: `~/.claude` is inside the writable root.
        options.home_is_workdir = true;
        let mut agent = Agent::start(options);
        agent.initialize(true);
        let session = agent.new_session();
        agent.prompt(&session, "go");
        let results = agent.tool_results();
        assert!(!results[0].0.contains("exit=0"), "{backend}: {results:?}");
        assert!(!agent.workdir.join(".claude/settings.json").exists(), "{backend}");
        agent.finish();

        // A project's hook, once allowed, runs as the session's commands do: confined.
        let (home, data, project) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        let command = format!("touch {} ; touch inside", escaped.display());
        settings(
            &project.path().join(".claude/settings.json"),
            json!({ "UserPromptSubmit": hook("", &command, None) }),
        );
        let mut options = project_options(home.path(), data.path(), vec![vec![say("done")]]);
        options.config = Some(format!("[sandbox]\nbackend = \"{backend}\"\n"));
        let mut agent = Agent::start(options);
        agent.initialize(true);
        let session = session_in(&mut agent, project.path());
        prompt_choosing(&mut agent, &session, "go", &["hooks-session"]);
        assert!(project.path().join("inside").exists(), "{backend}: the hook did not run");
        assert!(!escaped.exists(), "{backend}: a project hook wrote outside the project");
        agent.finish();
    }
}

#[test]
fn hook_cards_come_back_on_load_and_a_session_killed_while_a_hook_runs_goes_on() {
    let (home, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let command = r#"input=$(cat); case "$input" in *slow*) touch "$CLAUDE_PROJECT_DIR/hook-started"; sleep 60;; esac; echo checked"#;
    settings(
        &home.path().join(".claude/settings.json"),
        json!({ "PreToolUse": hook("Bash", command, None) }),
    );
    let start = |script: Vec<Value>| {
        let mut options = project_options(home.path(), data.path(), vec![script]);
        options.env.push(("HOTSH_DATA_DIR".into(), data.path().display().to_string()));
        let mut agent = Agent::start(options);
        agent.initialize(true);
        agent
    };
    let mut agent = start(vec![bash_call("echo fast"), bash_call("echo slow"), say("done")]);
    let session = agent.new_session();
    let cwd = agent.workdir.clone();
    agent.start_prompt(&session, "go");
    let started = cwd.join("hook-started");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !started.exists() {
        assert!(std::time::Instant::now() < deadline, "the slow hook never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    agent.kill9();

    let mut later = start(vec![say("continued")]);
    later.wait_for_stderr("initial plugin scan done");
    let (replayed, loaded) = later.load(&session, &cwd);
    assert!(loaded.get("result").is_some(), "{loaded}");
    let titles: Vec<&str> = replayed
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .filter_map(|u| u["title"].as_str())
        .collect();
    assert!(titles.iter().any(|t| t.starts_with("PreToolUse hook (exit 0)")), "{titles:?}");
    for started in replayed.iter().filter(|u| u["sessionUpdate"] == "tool_call") {
        let id = &started["toolCallId"];
        let closed = replayed.iter().any(|u| {
            u["toolCallId"] == *id && (matches!(u["status"].as_str(), Some("completed" | "failed")))
        });
        let drawn_closed = matches!(started["status"].as_str(), Some("completed" | "failed"));
        assert!(closed || drawn_closed, "card {id} left open: {replayed:#?}");
    }
    let answer = later.prompt(&session, "go on");
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert!(last_request(&later).contains("echo slow"), "{}", last_request(&later));
    later.finish();
}

#[test]
fn slash_hooks_lists_what_is_configured_and_from_where() {
    let (home, data, project) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    settings(
        &home.path().join(".claude/settings.json"),
        json!({ "PreToolUse": hook("Bash", "mine.sh", Some(5)) }),
    );
    settings(
        &project.path().join(".claude/settings.json"),
        json!({ "Stop": hook("", "theirs.sh", None), "PermissionRequest": hook("", "x", None) }),
    );
    let mut options = project_options(home.path(), data.path(), vec![]);
    options.config = Some("[[hooks.PostToolUse]]\nmatcher = \"Edit|Write\"\nhooks = [{ type = \"command\", command = \"fmt.sh\" }]\n".into());
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = session_in(&mut agent, project.path());
    let before = agent.received.len();
    assert_eq!(agent.prompt(&session, "/hooks")["result"]["stopReason"], "end_turn");
    let said: String = agent.received[before..]
        .iter()
        .map(|m| &m["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(
        said.contains(
            "- PreToolUse `Bash`: `mine.sh` (~/.claude/settings.json, timeout 5 s; runs as you)"
        ),
        "{said}"
    );
    assert!(said.contains("- PostToolUse `Edit|Write`: `fmt.sh` (hotsh's config"), "{said}");
    assert!(
        said.contains(
            "- Stop `*`: `theirs.sh` (.claude/settings.json, timeout 60 s; not allowed yet"
        ),
        "{said}"
    );
    assert!(said.contains("hotsh has no hook event `PermissionRequest`"), "{said}");
    assert!(agent.model_requests().is_empty(), "/hooks asked the model");
    agent.finish();
}

/// Waits until `path` exists (a hook that runs beside the turn wrote it).
fn wait_for_file(path: &Path) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && !text.is_empty()
        {
            return text;
        }
        assert!(std::time::Instant::now() < deadline, "{} was never written", path.display());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn config_hooks_run_on_compaction_resume_notification_and_session_end() {
    let (home, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config = r#"
[[hooks.PreCompact]]
matcher = "manual"
hooks = [{ type = "command", command = 'cat > "$HOTSH_PROJECT_DIR/precompact.json"' }]

[[hooks.SessionStart]]
matcher = "compact|resume"
hooks = [{ type = "command", command = '''grep -o 'source":"[a-z]*' | sed 's/^/again-/' ''' }]

[[hooks.PreToolUse]]
matcher = "Bash"
hooks = [{ type = "command", command = '''echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask"}}' ''' }]

[[hooks.Notification]]
hooks = [{ type = "command", command = 'cat > "$HOTSH_PROJECT_DIR/notified.json"' }]

[[hooks.SessionEnd]]
hooks = [{ type = "command", command = 'cat > "$HOTSH_PROJECT_DIR/ended.json"', timeout = 10 }]
"#;
    let mut options = project_options(
        home.path(),
        data.path(),
        vec![vec![
            say("hi"),
            say("A summary."),
            bash_call("echo asked"),
            say("done"),
            say("after load"),
        ]],
    );
    options.config = Some(config.to_owned());
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    let cwd = agent.workdir.clone();
    agent.prompt(&session, &"a long first prompt ".repeat(300));
    assert_eq!(agent.prompt(&session, "/compact the prompt")["result"]["stopReason"], "end_turn");
    let precompact: Value =
        serde_json::from_str(&wait_for_file(&cwd.join("precompact.json"))).unwrap();
    assert_eq!(precompact["hook_event_name"], "PreCompact");
    assert_eq!(precompact["trigger"], "manual");
    assert_eq!(precompact["custom_instructions"], "the prompt");
    assert_eq!(precompact["session_id"], session.as_str());
    assert!(precompact["transcript_path"].as_str().unwrap().ends_with(&format!("{session}.jsonl")));

    let (asked, _) = prompt_choosing(&mut agent, &session, "next", &["allow"]);
    assert!(asked[0]["params"]["toolCall"]["title"].as_str().unwrap().contains("A hook asks"));
    assert!(
        last_request(&agent).contains(r#"again-source\":\"compact"#),
        "{}",
        last_request(&agent)
    );
    let notified: Value = serde_json::from_str(&wait_for_file(&cwd.join("notified.json"))).unwrap();
    assert_eq!(notified["notification_type"], "permission_prompt");
    assert!(
        notified["message"].as_str().unwrap().starts_with("hotsh asks: A hook asks"),
        "{notified}"
    );

    let closed = agent.call("session/close", json!({"sessionId": session}));
    assert!(closed.get("result").is_some(), "{closed}");
    let ended: Value = serde_json::from_str(&wait_for_file(&cwd.join("ended.json"))).unwrap();
    assert_eq!(
        (ended["hook_event_name"].as_str(), ended["reason"].as_str()),
        (Some("SessionEnd"), Some("other"))
    );

    let (_, loaded) = agent.load(&session, &cwd);
    assert!(loaded.get("result").is_some(), "{loaded}");
    agent.prompt(&session, "more");
    assert!(
        last_request(&agent).contains(r#"again-source\":\"resume"#),
        "{}",
        last_request(&agent)
    );
    agent.finish();
}

/// A call of `tool` with `arguments`.
fn call(tool: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"name": tool, "arguments": arguments}]})
}

#[test]
fn claude_permission_rules_deny_first_and_ask_before_a_call_runs() {
    let (home, data, project) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::create_dir_all(home.path().join(".claude")).unwrap();
    std::fs::write(
        home.path().join(".claude/settings.json"),
        json!({"permissions": {
            "allow": ["Bash(curl:*)"],
            "deny": ["Bash(curl:*)", "Read(./secrets/**)"],
            "ask": ["Bash(git push:*)"]
        }})
        .to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(project.path().join("secrets")).unwrap();
    std::fs::write(project.path().join("secrets/key"), "hunter2").unwrap();
    std::fs::write(project.path().join("notes.txt"), "plain notes").unwrap();
    let mut options = project_options(
        home.path(),
        data.path(),
        vec![vec![
            bash_call("echo hi && curl http://127.0.0.1:9"),
            call("read_file", json!({"path": "secrets/key"})),
            call("read_file", json!({"path": "notes.txt"})),
            bash_call("git push origin main"),
            say("done"),
        ]],
    );
    options.plugins = vec![hotsh_tests::tool_bash_plugin(), hotsh_tests::tool_fs_plugin()];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = session_in(&mut agent, project.path());
    let (asked, _) = prompt_choosing(&mut agent, &session, "go", &["reject"]);
    assert!(asked[0]["params"].to_string().contains("permissions.ask `Bash(git push:*)`"));
    let results = agent.tool_results();
    assert!(results[0].1, "{results:?}");
    assert!(
        results[0].0.contains(
            "this call was denied: permissions.deny `Bash(curl:*)` of ~/.claude/settings.json denies it"
        ),
        "{results:?}"
    );
    assert!(results[1].1 && !results[1].0.contains("hunter2"), "{results:?}");
    assert!(results[1].0.contains("Read(./secrets/**)"), "{results:?}");
    assert!(!results[2].1 && results[2].0.contains("plain notes"), "{results:?}");
    assert!(results[3].1 && results[3].0.contains("the user refused"), "{results:?}");
    // `/hooks` lists them.
    let before = agent.received.len();
    agent.prompt(&session, "/hooks");
    let said = agent.received[before..].iter().map(Value::to_string).collect::<String>();
    assert!(
        said.contains("permissions.deny `Read(./secrets/**)` of ~/.claude/settings.json (applies)"),
        "{said}"
    );
    agent.finish();
}

#[test]
fn claude_allow_rules_answer_escalations_and_a_projects_need_consent_sandbox() {
    for backend in crate::sandbox::backends() {
        let outside = crate::sandbox::elsewhere();
        let path = |name: &str| outside.path().join(name).display().to_string();
        let (home, data, project) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        std::fs::create_dir_all(home.path().join(".claude")).unwrap();
        std::fs::write(
            home.path().join(".claude/settings.json"),
            json!({"permissions": {"allow": ["Bash(touch:*)"]}}).to_string(),
        )
        .unwrap();
        std::fs::create_dir_all(project.path().join(".claude")).unwrap();
        std::fs::write(
            project.path().join(".claude/settings.json"),
            json!({"permissions": {"allow": ["Bash(mkdir:*)"]}}).to_string(),
        )
        .unwrap();
        let escalated = |command: &str| {
            crate::sandbox::bash_with(json!({
                "command": command,
                "sandbox_permissions": "danger-full-access",
                "justification": "The user asked for it."
            }))
        };
        let mut options = project_options(
            home.path(),
            data.path(),
            vec![vec![
                escalated(&format!("touch {}", path("by-rule"))),
                escalated(&format!("mkdir {}", path("by-project"))),
                say("done"),
            ]],
        );
        options.config = Some(format!("[sandbox]\nbackend = \"{backend}\"\n"));
        let mut agent = Agent::start(options);
        agent.initialize(true);
        let session = session_in(&mut agent, project.path());
        // The project's allow rule is asked about first (refused); then only the mkdir's
        // escalation is asked (rejected): the user's own rule answered the touch.
        let (asked, _) = prompt_choosing(&mut agent, &session, "go", &["hooks-refuse", "reject"]);
        assert!(
            asked[0]["params"].to_string().contains("permissions.allow `Bash(mkdir:*)`"),
            "{backend}"
        );
        assert!(
            asked[1]["params"]["toolCall"]["title"].as_str().unwrap().contains("mkdir"),
            "{backend}"
        );
        assert!(outside.path().join("by-rule").exists(), "{backend}: {:?}", agent.tool_results());
        assert!(!outside.path().join("by-project").exists(), "{backend}");
        agent.finish();
    }
}

#[test]
fn a_plugin_of_hotsh_abi_1_1_hooks_calls_and_bridges_to_a_command_with_stdin_and_env() {
    let home = tempfile::tempdir().unwrap();
    let script = vec![
        bash_call("echo plugin-forbidden"),
        bash_call("echo plugin-rewrite-me"),
        bash_call("echo fine"),
        say("done"),
    ];
    let mut agent = agent_with_plugins(home.path(), script, bash_and_hooked());
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "go")["result"]["stopReason"], "end_turn");
    let results = agent.tool_results();
    assert!(results[0].1 && results[0].0.contains("hooked build one forbids it"), "{results:?}");
    assert!(!results[1].1 && results[1].0.contains("rewritten-by-plugin"), "{results:?}");
    assert!(!results[2].1 && results[2].0.contains("fine"), "{results:?}");
    let requests = agent.model_requests();
    assert!(requests[0].to_string().contains("hooked build one context"), "{}", requests[0]);
    assert!(last_request(&agent).contains("hooked build one saw the call"));
    // The bridge: the payload on the command's stdin, the variable in its environment.
    let payload: Value = serde_json::from_str(
        &std::fs::read_to_string(agent.workdir.join("hooked-payload.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(payload["hook_event_name"], "UserPromptSubmit");
    assert_eq!(payload["prompt"], "go");
    assert_eq!(payload["session_id"], session.as_str());
    let env = std::fs::read_to_string(agent.workdir.join("hooked-env.txt")).unwrap();
    assert_eq!(env, "hooked build one");
    let cards = hook_cards(&agent, &session);
    assert!(cards.iter().any(|c| c.0 == "PreToolUse hook (answered): plugin hooked"), "{cards:?}");
    let denied = cards.iter().find(|c| c.2.contains("decided deny")).unwrap();
    assert!(denied.2.starts_with("From plugin hooked."), "{denied:?}");
    agent.finish();
}

#[test]
fn a_plugin_hook_reloaded_while_a_turn_runs_answers_from_the_new_build_at_the_next_call() {
    let home = tempfile::tempdir().unwrap();
    let script = vec![
        bash_call("while [ ! -e go-on ]; do sleep 0.05; done; echo first"),
        bash_call("echo second"),
        say("done"),
    ];
    let mut agent = agent_with_plugins(home.path(), script, bash_and_hooked());
    let session = agent.new_session();
    let two = hotsh_tests::hooked_build("two");
    let prompt = agent.start_prompt(&session, "go");
    agent.wait_for(|m| {
        m["params"]["update"]["sessionUpdate"] == "tool_call"
            && m["params"]["update"]["title"].as_str().is_some_and(|t| t.contains("go-on"))
    });
    hotsh_tests::install_like_cargo(&two, &agent.plugin_dir(), "libhotsh_fixture_hooked.so");
    agent.wait_for_plugin_card(&session, 0, "hooked reloaded");
    std::fs::write(agent.workdir.join("go-on"), "").unwrap();
    agent.response(prompt);
    // Before the reload: build one's; every point after it, in the same turn: build two's.
    let first = agent.model_requests()[0].to_string();
    assert!(first.contains("hooked build one context"), "{first}");
    let request = last_request(&agent);
    assert_eq!(request.matches("hooked build two saw the call").count(), 2, "{request}");
    assert!(!request.contains("hooked build one saw the call"), "{request}");
    agent.finish();
}

/// Hook scripts written the way Claude Code's documentation writes them (Python reading the
/// payload with `json.load(sys.stdin)`, the documented field names, exit 2 with a reason on
/// stderr, JSON on stdout) run unchanged.
#[test]
fn hook_scripts_in_claude_codes_documented_style_run_unchanged() {
    let home = tempfile::tempdir().unwrap();
    let scripts = home.path().join(".claude/hooks");
    std::fs::create_dir_all(&scripts).unwrap();
    let validator = scripts.join("validate_bash.py");
    std::fs::write(
        &validator,
        r#"#!/usr/bin/env python3
import json
import re
import sys

RULES = [(r"\bgrep\b(?!.*\|)", "Use 'rg' (ripgrep) rather than 'grep' for speed")]

try:
    data = json.load(sys.stdin)
except json.JSONDecodeError as error:
    print(f"invalid JSON: {error}", file=sys.stderr)
    sys.exit(1)
if data.get("tool_name") != "Bash":
    sys.exit(0)
command = data.get("tool_input", {}).get("command", "")
problems = [message for pattern, message in RULES if re.search(pattern, command)]
if problems:
    for message in problems:
        print(f"- {message}", file=sys.stderr)
    sys.exit(2)
sys.exit(0)
"#,
    )
    .unwrap();
    let context = scripts.join("prompt_context.py");
    std::fs::write(
        &context,
        r#"#!/usr/bin/env python3
import json
import sys

data = json.load(sys.stdin)
output = {
    "hookSpecificOutput": {
        "hookEventName": "UserPromptSubmit",
        "additionalContext": f"The prompt had {len(data['prompt'])} characters; cwd {data['cwd']}",
    }
}
print(json.dumps(output))
"#,
    )
    .unwrap();
    let edits = scripts.join("after_edit.sh");
    std::fs::write(
        &edits,
        "#!/bin/sh\nfile=$(python3 -c 'import json,sys; print(json.load(sys.stdin)[\"tool_input\"][\"file_path\"])')\n\
         echo \"$file\" >> \"$CLAUDE_PROJECT_DIR/formatted.txt\"\n",
    )
    .unwrap();
    for script in [&validator, &context, &edits] {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    settings(
        &home.path().join(".claude/settings.json"),
        json!({
            "PreToolUse": hook("Bash", &validator.display().to_string(), None),
            "UserPromptSubmit": hook("", &context.display().to_string(), None),
            "PostToolUse": hook("Edit|Write", &format!("{} # formatter", edits.display()), None),
        }),
    );
    let script = vec![
        bash_call("grep -r TODO ."),
        bash_call("grep -r TODO . | head -1; echo searched"),
        call("write_file", json!({"path": "notes.md", "content": "# notes\n"})),
        say("done"),
    ];
    let plugins = vec![hotsh_tests::tool_bash_plugin(), hotsh_tests::tool_fs_plugin()];
    let mut agent = agent_with_plugins(home.path(), script, Some(plugins));
    let session = agent.new_session();
    assert_eq!(agent.prompt(&session, "find the TODOs")["result"]["stopReason"], "end_turn");
    let results = agent.tool_results();
    assert!(results[0].1 && results[0].0.contains("Use 'rg' (ripgrep)"), "{results:?}");
    assert!(!results[1].1 && results[1].0.contains("searched"), "{results:?}");
    assert!(!results[2].1, "{results:?}");
    let first = agent.model_requests()[0].to_string();
    let cwd = agent.workdir.display().to_string();
    assert!(first.contains(&format!("The prompt had 14 characters; cwd {cwd}")), "{first}");
    let formatted = std::fs::read_to_string(agent.workdir.join("formatted.txt")).unwrap();
    assert_eq!(formatted.trim(), format!("{cwd}/notes.md"));
    agent.finish();
}

/// The agent exits (stdin closes): each open session's `SessionEnd` hooks run, with the reason
/// `prompt_input_exit`, whether or not the session had a turn.
#[test]
fn session_end_hooks_run_when_the_agent_exits() {
    let home = tempfile::tempdir().unwrap();
    let ended = home.path().join("ended");
    std::fs::create_dir(&ended).unwrap();
    // One file per run: the runs of different sessions go together.
    let command = format!("cat > \"$(mktemp -p {} end.XXXXXX)\"", ended.display());
    settings(
        &home.path().join(".claude/settings.json"),
        json!({ "SessionEnd": hook("", &command, None) }),
    );
    let mut agent = agent_with_home(home.path(), vec![say("ok")]);
    let first = agent.new_session();
    let second = agent.new_session();
    agent.prompt(&first, "hello");
    assert!(agent.finish().success());
    let payloads: Vec<Value> = std::fs::read_dir(&ended)
        .unwrap()
        .map(|e| {
            serde_json::from_str(&std::fs::read_to_string(e.unwrap().path()).unwrap()).unwrap()
        })
        .collect();
    assert_eq!(payloads.len(), 2, "{payloads:?}");
    let mut ids: Vec<&str> = payloads.iter().map(|p| p["session_id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    let mut expected = [first.as_str(), second.as_str()];
    expected.sort_unstable();
    assert_eq!(ids, expected);
    assert!(payloads.iter().all(|p| p["reason"] == "prompt_input_exit"), "{payloads:?}");
}
