//! Records the arcs of `tests/arcs/` again: each scenario is played against a live `hotsh acp
//! --record` by a scripted client and model, the way a user would in Zed.
//!
//! `cargo run -p hotsh-tests --bin record-arcs [NAME...]` (all scenarios without a name). The
//! suite replays every `tests/arcs/*.arc`; an arc can as well come from anywhere else (a
//! session recorded in Zed, `hotsh sessions export`).

use hotsh_tests::{
    Agent, AgentOptions, bash_call, hello_plugin, install_like_cargo, say, workspace,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

type Scenario = fn(&Path);

const SCENARIOS: &[(&str, Scenario)] = &[
    ("chat", chat),
    ("exit-status", exit_status),
    ("cancel", cancel),
    ("background", background),
    ("reload", reload),
    ("no-terminal", no_terminal),
    ("edit", edit),
    ("mcp", mcp),
];

fn main() {
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    let dir = workspace().join("tests/arcs");
    for (name, scenario) in SCENARIOS {
        if wanted.is_empty() || wanted.iter().any(|w| w == name) {
            let path = dir.join(format!("{name}.arc"));
            // hotsh never replaces an arc: the old recording goes first.
            let _ = std::fs::remove_file(&path);
            scenario(&path);
            eprintln!("recorded {}", path.display());
        }
    }
}

fn recording(arc: &Path, responses: Vec<Value>) -> AgentOptions {
    let mut options = AgentOptions::script(responses);
    // The plugins of this build directory, as the suite replays with.
    options.plugins =
        vec![hotsh_tests::tool_bash_plugin(), hotsh_tests::tool_fs_plugin(), hello_plugin()];
    options.record = Some(arc.to_owned());
    options
}

/// Adds the header keys a scenario needs to the recorded header line.
fn amend_header(arc: &Path, extra: Value) {
    let text = std::fs::read_to_string(arc).expect("the arc");
    let (header, rest) = text.split_once('\n').expect("a header line");
    let mut header: Value = serde_json::from_str(header).expect("a JSON header");
    for (key, value) in extra.as_object().expect("an object") {
        header[key] = value.clone();
    }
    std::fs::write(arc, format!("{header}\n{rest}")).expect("write the arc");
}

/// A plain chat turn: reasoning and text, streamed in chunks.
fn chat(arc: &Path) {
    let mut agent = Agent::start(recording(
        arc,
        vec![
            json!({"reasoning": ["The user ", "says hello."], "text": ["Hello! ", "How can I help?"]}),
        ],
    ));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "hello");
    agent.finish();
}

/// A terminal card whose command exits 1, in a fixture project.
fn exit_status(arc: &Path) {
    let mut agent = Agent::start(recording(
        arc,
        vec![
            bash_call("cat notes.txt; grep -q TODO notes.txt"),
            say("There is no TODO in notes.txt."),
        ],
    ));
    copy_fixture(&arc.with_file_name("project"), &agent.workdir);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "Is there a TODO in notes.txt?");
    agent.finish();
    amend_header(arc, json!({"fixture": "project"}));
}

/// A file of the fixture project is read, then edited: a read card with its location, an
/// edit card with its diff, and the file changed on disk.
fn edit(arc: &Path) {
    let mut agent = Agent::start(recording(
        arc,
        vec![
            json!({"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]}),
            json!({"tool_calls": [{"name": "edit_file", "arguments": {
                "path": "notes.txt", "old_string": "- bread", "new_string": "- bread\n- eggs"}}]}),
            json!({"tool_calls": [{"name": "bash", "arguments": {"command": "cat notes.txt"}}]}),
            say("Added eggs to the list."),
        ],
    ));
    copy_fixture(&arc.with_file_name("project"), &agent.workdir);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "Add eggs to the shopping list in notes.txt.");
    agent.finish();
    amend_header(arc, json!({"fixture": "project"}));
}

/// The user cancels while a long command runs; the next turn works.
fn cancel(arc: &Path) {
    let mut agent =
        Agent::start(recording(arc, vec![bash_call("echo started; sleep 60"), say("Still here.")]));
    agent.initialize(true);
    let session = agent.new_session();
    let id = agent.start_prompt(&session, "wait a minute");
    agent.wait_for_terminal_output("started");
    agent.notify("session/cancel", json!({"sessionId": session}));
    agent.response(id);
    agent.prompt(&session, "are you there?");
    agent.finish();
}

/// A background task is started, read (it prints nothing: what a read returns does not
/// depend on when it comes) and killed, over two turns.
fn background(arc: &Path) {
    let mut agent = Agent::start(recording(
        arc,
        vec![
            json!({"tool_calls": [{"name": "bash",
                "arguments": {"command": "exec sleep 60", "run_in_background": true}}]}),
            say("The server runs as bash-1."),
            json!({"tool_calls": [{"name": "bash_output", "arguments": {"task_id": "bash-1"}}]}),
            json!({"tool_calls": [{"name": "bash_kill", "arguments": {"task_id": "bash-1"}}]}),
            say("It printed nothing; I stopped it."),
        ],
    ));
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "start the server");
    agent.prompt(&session, "what did it print? then stop it");
    agent.finish();
}

/// A plugin is rebuilt between two turns; the new build serves the second.
fn reload(arc: &Path) {
    let options = recording(
        arc,
        vec![
            json!({"tool_calls": [{"name": "hello", "arguments": {"name": "arc"}}]}),
            say("Greeted."),
            json!({"tool_calls": [{"name": "hello", "arguments": {"name": "again"}}]}),
            say("Greeted again."),
        ],
    );
    let mut agent = Agent::start(options);
    let plugin_dir = agent.plugin_dir();
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "greet arc");
    // A rebuild of the same code: the library with a byte appended.
    let rebuilt = agent.dir.path().join("rebuilt.so");
    let mut bytes = std::fs::read(hello_plugin()).expect("the plugin");
    bytes.push(0);
    std::fs::write(&rebuilt, bytes).expect("the rebuild");
    let after = agent.received.len();
    install_like_cargo(&rebuilt, &plugin_dir, "libhotsh_plugin_hello.so");
    agent.wait_for_plugin_card(&session, after, "reloaded");
    agent.prompt(&session, "greet again");
    agent.finish();
}

/// A client without terminal support: the command's output comes as card text.
fn no_terminal(arc: &Path) {
    let mut agent =
        Agent::start(recording(arc, vec![bash_call("printf 'one\\ntwo\\n'"), say("Two lines.")]));
    agent.initialize(false);
    let session = agent.new_session();
    agent.prompt(&session, "print two lines");
    agent.finish();
}

fn copy_fixture(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("the fixture") {
        let entry = entry.expect("a fixture entry");
        let target: PathBuf = to.join(entry.file_name());
        std::fs::copy(entry.path(), target).expect("copy the fixture");
    }
}

/// A session with an MCP server (the tests' fixture over stdio): its read-only tool is
/// called; the arc keeps the server's tools and answer, so it replays without the server.
fn mcp(arc: &Path) {
    let server = hotsh_tests::mcp_fixture_binary(hotsh_tests::Profile::Debug);
    let mut agent = Agent::start(recording(
        arc,
        vec![
            json!({"tool_calls": [{"name": "mcp__notes__echo", "arguments": {"text": "remember the milk"}}]}),
            say("The notes server heard you."),
        ],
    ));
    agent.initialize(true);
    agent.wait_for_stderr("initial plugin scan done");
    let cwd = agent.workdir.to_string_lossy().into_owned();
    let servers = json!([{"name": "notes", "command": server, "args": ["notes"], "env": []}]);
    let response = agent.call("session/new", json!({"cwd": cwd, "mcpServers": servers}));
    let session = response["result"]["sessionId"].as_str().expect("a session").to_owned();
    agent.prompt(&session, "Tell the notes server to remember the milk.");
    agent.finish();
}
