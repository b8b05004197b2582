//! hotsh-abi 1.x compatibility: a plugin built against the frozen 1.0 loads in this hotsh
//! (and must in every later one), a plugin built against a later 1.x loads with what it
//! appended falling back as documented, and a host that knows the later 1.x reads the
//! additions as present from the newer plugin and absent from the older one.

use hotsh_tests::{
    Agent, AgentOptions, Compat, compat_build, host_knowing_later_abi, hotsh_binary,
    install_like_cargo, say, tool_call,
};
use serde_json::{Value, json};

const LIBRARY: &str = "libhotsh_fixture_compat.so";

/// The first update (`tool_call`) and the last one of the card titled `title` at its start.
fn card<'a>(updates: &'a [Value], title: &str) -> (&'a Value, &'a Value) {
    let first = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call" && u["title"] == title)
        .unwrap_or_else(|| panic!("no card titled {title:?}: {updates:#?}"));
    let id = &first["toolCallId"];
    let last = updates.iter().rev().find(|u| u["toolCallId"] == *id).expect("the card's updates");
    (first, last)
}

#[test]
fn a_plugin_built_against_hotsh_abi_1_0_runs_its_tools_and_draws_its_cards() {
    let responses = vec![tool_call("compat_card"), tool_call("compat_run"), say("done")];
    let mut options = AgentOptions::script(responses);
    options.plugins = vec![compat_build(Compat::V1_0)];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "go");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(
        agent.tool_results(),
        [
            ("compat 1.0 compat_card".to_owned(), false),
            ("compat 1.0 ran: run-by-42".to_owned(), false)
        ]
    );
    let updates = agent.updates(&session);
    let cwd = agent.workdir.to_string_lossy().into_owned();
    let file = format!("{cwd}/compat.txt");

    let (first, last) = card(&updates, "compat_card (1.0)");
    assert_eq!(first["kind"], "search", "{first}");
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(last["locations"], json!([{"path": file, "line": 3}]), "{last}");
    let content = last["content"].as_array().expect("content");
    assert!(
        content.contains(
            &json!({"type": "diff", "path": file, "oldText": "old line\n", "newText": "new line\n"})
        ),
        "{last}"
    );
    assert!(content.iter().any(|c| c["content"]["text"] == "**compat 1.0 compat_card**"), "{last}");

    let (first, last) = card(&updates, "echo run-by-$((40 + 2))");
    assert_eq!(first["kind"], "execute", "{first}");
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(last["_meta"]["terminal_exit"]["exit_code"], 0, "{last}");

    // The cards come back on `session/load`, drawn again by the same build.
    let (replayed, _) = agent.load(&session, &agent.workdir.clone());
    let (_, last) = card(&replayed, "compat_card (1.0)");
    assert_eq!(last["locations"], json!([{"path": file, "line": 3}]), "{last}");
}

/// A session loaded right after the agent starts (Zed's way) has its cards drawn by the
/// plugins now installed, not as logged because the plugins were still loading: the load
/// waits for the initial plugin scan before it draws.
#[test]
fn a_load_right_after_start_draws_the_cards_with_the_plugins_now_installed() {
    let data = tempfile::tempdir().unwrap();
    let shared = vec![("HOTSH_DATA_DIR".to_owned(), data.path().to_string_lossy().into_owned())];
    let mut options = AgentOptions::script(vec![tool_call("compat_card"), say("done")]);
    options.plugins = vec![compat_build(Compat::V1_0)];
    options.env = shared.clone();
    let mut first = Agent::start(options);
    first.initialize(true);
    let session = first.new_session();
    assert_eq!(first.prompt(&session, "go")["result"]["stopReason"], "end_turn");
    card(&first.updates(&session), "compat_card (1.0)");
    assert!(first.finish().success());

    let mut options = AgentOptions::script(vec![]);
    options.plugins = vec![compat_build(Compat::Later)];
    options.env = shared;
    let mut second = Agent::start(options);
    second.initialize(true);
    let workdir = second.workdir.clone();
    let (replayed, answer) = second.load(&session, &workdir);
    assert!(answer.get("result").is_some(), "{answer}");
    let (_, last) = card(&replayed, "compat_card (1.1)");
    assert_eq!(last["status"], "completed", "{last}");
    assert!(!replayed.iter().any(|u| u["title"] == "compat_card (1.0)"), "{replayed:#?}");
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh plugin check")]
fn a_plugin_built_against_a_later_1_x_loads_and_what_it_appended_falls_back() {
    let mut options = AgentOptions::script(vec![]);
    options.per_session = vec![vec![
        tool_call("compat_card"),
        say("one"),
        tool_call("compat_new"),
        tool_call("compat_card"),
        say("two"),
        tool_call("compat_card"),
        say("three"),
    ]];
    options.plugins = vec![compat_build(Compat::V1_0)];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "one");

    // The 1.1 build replaces the 1.0 one in the running agent...
    install_like_cargo(&compat_build(Compat::Later), &agent.plugin_dir(), LIBRARY);
    let (_, after) = agent.wait_for_plugin_card(&session, 0, "compat reloaded");
    let response = agent.prompt(&session, "two");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let updates = agent.updates(&session);
    // A kind of card this hotsh does not know: a plain card titled with the tool's name.
    let (first, last) = card(&updates, "compat_new");
    // (ACP leaves the kind `other` out.)
    assert_eq!(first["kind"].as_str().unwrap_or("other"), "other", "{first}");
    // A tool kind it does not know shows as `other`; the field 1.1 appended is not read.
    assert_eq!(last["title"], "compat_new (1.1)", "{last}");
    assert_eq!(last["kind"].as_str().unwrap_or("other"), "other", "{last}");
    assert_eq!(last["status"], "completed", "{last}");
    assert!(!last.to_string().contains("a field 1.1 appended"), "{last}");

    // ...and the 1.0 build replaces it again: both layouts in one process.
    install_like_cargo(&compat_build(Compat::V1_0), &agent.plugin_dir(), LIBRARY);
    agent.wait_for_plugin_card(&session, after, "compat reloaded");
    agent.prompt(&session, "three");
    let results: Vec<String> = agent.tool_results().into_iter().map(|(text, _)| text).collect();
    assert_eq!(
        results,
        [
            "compat 1.0 compat_card",
            // A sandbox mode this hotsh does not know is refused, and nothing runs; a service
            // it does not offer gives the plugin the service's default answer.
            "compat 1.1 compat_new: sandbox_permissions asks for a sandbox mode this hotsh does \
             not know (SandboxMode(3)); nothing was run; host: a host without host_name",
            "compat 1.1 compat_card",
            "compat 1.0 compat_card"
        ]
    );
    let stderr = agent.stderr();
    assert!(!stderr.contains("rejected"), "{stderr}");

    // `hotsh plugin check` names the later 1.x and says this hotsh loads it.
    let output = std::process::Command::new(hotsh_binary())
        .args(["plugin", "check"])
        .arg(compat_build(Compat::Later))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "  hotsh-abi: 1.2.0 (the interface it was built for; this hotsh speaks {}: this hotsh loads it)\n",
            hotsh_tests::ABI_VERSION
        )),
        "{text}"
    );
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs the loader that knows 1.1")]
fn a_host_that_knows_a_later_1_x_reads_its_additions_as_present_or_absent() {
    let host = host_knowing_later_abi();
    let read = |build: Compat| -> Value {
        let output = std::process::Command::new(&host).arg(compat_build(build)).output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice(&output.stdout).expect("the loader's JSON")
    };

    // A 1.0 plugin in a 1.1 host: the module function 1.1 appended is absent, and so is the
    // field (null).
    let old = read(Compat::V1_0);
    assert_eq!(old["declared"], "1.0.0", "{old}");
    assert_eq!(old["manifest"], json!(["compat", "1.0"]));
    assert_eq!(old["describe"], Value::Null, "{old}");
    assert_eq!(
        old["cards"]["compat_card"]["result"],
        json!({"title": "compat_card (1.0)", "kind": "search", "subtitle": null, "locations": 1, "diffs": 1}),
        "{old}"
    );
    assert_eq!(
        old["cards"]["compat_run"]["result"],
        json!({"terminal": "echo run-by-$((40 + 2))", "exit_code": 0}),
        "{old}"
    );

    // A 1.1 plugin in a 1.1 host: all of it.
    let new = read(Compat::Later);
    assert_eq!(new["declared"], "1.2.0", "{new}");
    assert_eq!(new["describe"], "compat, built against hotsh-abi 1.1", "{new}");
    assert_eq!(new["cards"]["compat_new"]["call"], json!({"notice": "a card of a kind 1.1 added"}));
    assert_eq!(
        new["cards"]["compat_new"]["result"],
        json!({"title": "compat_new (1.1)", "kind": "browse", "subtitle": "a field 1.1 appended", "locations": 0, "diffs": 0}),
        "{new}"
    );
}

/// The packages of a lock file, as (name, version) pairs.
fn locked(path: &std::path::Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).expect("a lock file");
    text.split("[[package]]")
        .filter_map(|entry| {
            let field = |key: &str| {
                entry.lines().find_map(|line| {
                    line.strip_prefix(&format!("{key} = \""))?.strip_suffix('"').map(str::to_owned)
                })
            };
            Some((field("name")?, field("version")?))
        })
        .collect()
}

#[test]
fn the_frozen_plugins_lock_file_pins_what_the_workspace_builds_with() {
    // Fixture builds run without the network: the plugin's own lock may name only versions a
    // build of the workspace has fetched.
    let workspace = locked(&hotsh_tests::workspace().join("Cargo.lock"));
    for plugin in ["plugin-abi-1.0", "hooked"] {
        let lock = format!("tests/fixtures/{plugin}/Cargo.lock");
        let fixture = locked(&hotsh_tests::workspace().join(&lock));
        assert!(fixture.iter().any(|(name, _)| name == "abi_stable"), "{fixture:?}");
        let stale: Vec<&(String, String)> = fixture
            .iter()
            .filter(|(name, _)| !name.starts_with("hotsh-"))
            .filter(|package| !workspace.contains(package))
            .collect();
        assert!(
            stale.is_empty(),
            "{lock} pins versions the workspace does not: {stale:?}; copy the workspace's \
             Cargo.lock over it and build the fixture once to trim it"
        );
    }
}
