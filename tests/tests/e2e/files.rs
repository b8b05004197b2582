//! tool-fs end to end: `read_file`, `write_file` and `edit_file` through the real `hotsh`,
//! with an editor client that offers `fs` (its buffers differ from the disk) and without one
//! (the disk, written atomically); diff cards and locations, the sandbox on writes with
//! escalation, stale edits, bad input, and the cards coming back on `session/load`.

use hotsh_tests::{Agent, AgentOptions, bash_call, call_with, say, tool_fs_plugin};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn options(responses: Vec<Value>) -> AgentOptions {
    let mut options = AgentOptions::script(responses);
    options.plugins.push(tool_fs_plugin());
    options
}

fn read(path: &str) -> Value {
    call_with("read_file", json!({"path": path}))
}

fn edit(path: &str, old: &str, new: &str) -> Value {
    call_with("edit_file", json!({"path": path, "old_string": old, "new_string": new}))
}

fn write(path: &str, content: &str) -> Value {
    call_with("write_file", json!({"path": path, "content": content}))
}

/// An agent whose client does not offer `fs`, a session, and the prompt run.
fn run_on_disk(responses: Vec<Value>, setup: impl FnOnce(&Path)) -> (Agent, String) {
    let mut agent = Agent::start(options(responses));
    setup(&agent.workdir);
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "go");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    (agent, session)
}

/// What the editor client does with the agent's file requests.
struct Editor {
    buffers: HashMap<PathBuf, String>,
    /// The answer to `fs/write_text_file` (`result` or `error` member).
    write_reply: Value,
    writes: Vec<Value>,
    reads: Vec<PathBuf>,
}

impl Editor {
    fn new(buffers: HashMap<PathBuf, String>) -> Self {
        Self { buffers, write_reply: json!({"result": {}}), writes: Vec::new(), reads: Vec::new() }
    }

    /// Runs a prompt, answering `fs/read_text_file` from the buffers (and recording the
    /// writes, which change the buffers) until the prompt is answered.
    fn prompt(&mut self, agent: &mut Agent, session: &str) -> Value {
        let prompt = agent.start_prompt(session, "go");
        let mut from = agent.received.len();
        loop {
            let at = agent.wait_for_from(from, |m| {
                m["method"].as_str().is_some_and(|m| m.starts_with("fs/"))
                    || (m["id"] == prompt && m.get("method").is_none())
            });
            from = at + 1;
            let message = agent.received[at].clone();
            let path = PathBuf::from(message["params"]["path"].as_str().unwrap_or_default());
            let reply = match message["method"].as_str() {
                Some("fs/read_text_file") => {
                    self.reads.push(path.clone());
                    match self.buffers.get(&path) {
                        Some(text) => json!({"result": {"content": text}}),
                        None => json!({"error": {"code": -32002, "message": "not open"}}),
                    }
                }
                Some("fs/write_text_file") => {
                    self.writes.push(message["params"].clone());
                    if self.write_reply.get("result").is_some() {
                        let text = message["params"]["content"].as_str().unwrap_or_default();
                        self.buffers.insert(path, text.to_owned());
                    }
                    self.write_reply.clone()
                }
                _ => return message,
            };
            agent.answer(&message, reply);
        }
    }
}

fn editor_agent(responses: Vec<Value>) -> (Agent, String) {
    let mut agent = Agent::start(options(responses));
    agent.initialize_with(json!({"fs": {"readTextFile": true, "writeTextFile": true}}));
    let session = agent.new_session();
    (agent, session)
}

#[test]
fn with_an_editor_the_model_reads_its_buffer_and_edits_go_through_it_as_diffs() {
    let (mut agent, session) = editor_agent(vec![
        read("src/main.rs"),
        edit("src/main.rs", "// unsaved note", "// reviewed note"),
        say("done"),
    ]);
    let file = agent.workdir.join("src/main.rs");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "fn main() {}\n").unwrap();
    let buffer = "fn main() {}\n// unsaved note\n";
    let mut editor = Editor::new(HashMap::from([(file.clone(), buffer.to_owned())]));
    let response = editor.prompt(&mut agent, &session);
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    let results = agent.tool_results();
    // The model saw the buffer, numbered, not the disk.
    assert_eq!(results[0], ("     1\tfn main() {}\n     2\t// unsaved note\n".to_owned(), false));
    assert!(
        results[1].0.starts_with(&format!(
            "Edited {}: replaced 1 place, first at line 2 through the editor",
            file.display()
        )),
        "{results:?}"
    );
    // The edit went to the editor with the buffer's whole new text; the disk is untouched.
    assert_eq!(editor.writes.len(), 1);
    assert_eq!(editor.writes[0]["path"], file.to_str().unwrap());
    assert_eq!(editor.writes[0]["content"], "fn main() {}\n// reviewed note\n");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "fn main() {}\n");

    let finals = agent.final_updates(&session);
    let started: Vec<Value> =
        agent.updates(&session).into_iter().filter(|u| u["sessionUpdate"] == "tool_call").collect();
    assert_eq!(started[0]["kind"], "read");
    assert_eq!(started[0]["locations"], json!([{"path": file.to_str().unwrap(), "line": 1}]));
    assert_eq!(finals[0]["title"], format!("Read {} (lines 1–2)", file.display()));
    assert_eq!(started[1]["kind"], "edit");
    let diff = json!({
        "type": "diff",
        "path": file.to_str().unwrap(),
        "oldText": "// unsaved note",
        "newText": "// reviewed note"
    });
    assert_eq!(finals[1]["content"], json!([diff]));
    assert_eq!(finals[1]["locations"], json!([{"path": file.to_str().unwrap(), "line": 2}]));
    assert_eq!(finals[1]["status"], "completed");
}

#[test]
fn an_editor_that_fails_a_write_is_a_tool_error_and_nothing_changes() {
    let (mut agent, session) =
        editor_agent(vec![read("notes.txt"), edit("notes.txt", "draft", "final"), say("ok")]);
    let file = agent.workdir.join("notes.txt");
    std::fs::write(&file, "draft\n").unwrap();
    let mut editor = Editor::new(HashMap::from([(file.clone(), "draft\n".to_owned())]));
    editor.write_reply = json!({"error": {"code": -32603, "message": "buffer is read-only"}});
    editor.prompt(&mut agent, &session);
    let (text, is_error) = agent.last_tool_result();
    assert!(is_error, "{text}");
    assert!(text.contains("the editor could not write"), "{text}");
    assert!(
        text.contains("buffer is read-only") && text.contains("the file is unchanged"),
        "{text}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "draft\n");
    assert_eq!(agent.final_updates(&session)[1]["status"], "failed");
}

#[test]
fn without_an_editor_files_are_read_and_written_on_disk_atomically_keeping_their_style() {
    let (agent, session) = run_on_disk(
        vec![
            read("crlf.txt"),
            edit("crlf.txt", "two\nthree", "2\n3"),
            read("script.sh"),
            write("script.sh", "#!/bin/sh\necho new"),
            write("new/dir/created.txt", "fresh\n"),
            call_with("read_file", json!({"path": "long.txt", "offset": 3, "limit": 2})),
            say("done"),
        ],
        |work| {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::write(work.join("crlf.txt"), "one\r\ntwo\r\nthree\r\n").unwrap();
            std::fs::write(work.join("script.sh"), "#!/bin/sh\necho old\n").unwrap();
            std::fs::set_permissions(
                work.join("script.sh"),
                std::fs::Permissions::from_mode(0o751),
            )
            .unwrap();
            let long: String = (1..=10).map(|n| format!("line {n}\n")).collect();
            std::fs::write(work.join("long.txt"), long).unwrap();
        },
    );
    let work = agent.workdir.clone();
    let results = agent.tool_results();
    assert!(results.iter().all(|(_, error)| !error), "{results:?}");
    assert_eq!(std::fs::read_to_string(work.join("crlf.txt")).unwrap(), "one\r\n2\r\n3\r\n");
    // The final newline the old file had is kept; so are its permissions.
    assert_eq!(std::fs::read_to_string(work.join("script.sh")).unwrap(), "#!/bin/sh\necho new\n");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(work.join("script.sh")).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o751);
    assert_eq!(std::fs::read_to_string(work.join("new/dir/created.txt")).unwrap(), "fresh\n");
    assert!(results[4].0.starts_with("Created "), "{}", results[4].0);
    assert_eq!(
        results[5].0,
        "     3\tline 3\n     4\tline 4\n[showing lines 3–4 of 10; pass offset 5 to read on]\n"
    );
    // No temporary file was left beside the written ones.
    let names: Vec<String> = std::fs::read_dir(&work)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");

    let finals = agent.final_updates(&session);
    let script = work.join("script.sh");
    assert_eq!(
        finals[3]["content"],
        json!([{"type": "diff", "path": script.to_str().unwrap(), "oldText": "#!/bin/sh\necho old\n", "newText": "#!/bin/sh\necho new\n"}])
    );
    let created = work.join("new/dir/created.txt");
    assert_eq!(
        finals[4]["content"],
        json!([{"type": "diff", "path": created.to_str().unwrap(), "newText": "fresh\n"}])
    );
}

#[test]
fn edits_of_files_not_read_or_changed_since_are_refused_until_read_again() {
    let (agent, _) = run_on_disk(
        vec![
            edit("a.txt", "alpha", "ALPHA"),
            write("a.txt", "replaced"),
            read("a.txt"),
            bash_call("echo 'from the user' >> a.txt"),
            edit("a.txt", "alpha", "ALPHA"),
            read("a.txt"),
            edit("a.txt", "alpha", "ALPHA"),
            // A file the agent wrote itself needs no new read.
            edit("a.txt", "from the user", "from the agent"),
            say("done"),
        ],
        |work| std::fs::write(work.join("a.txt"), "alpha\n").unwrap(),
    );
    let results = agent.tool_results();
    assert!(
        results[0].1 && results[0].0.contains("has not been read in this session"),
        "{results:?}"
    );
    assert!(
        results[1].1 && results[1].0.contains("has not been read in this session"),
        "{results:?}"
    );
    assert!(results[4].1 && results[4].0.contains("changed since you last read it"), "{results:?}");
    assert!(!results[6].1, "{results:?}");
    assert!(!results[7].1, "{results:?}");
    assert_eq!(
        std::fs::read_to_string(agent.workdir.join("a.txt")).unwrap(),
        "ALPHA\nfrom the agent\n"
    );
}

#[test]
fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let (agent, _) = run_on_disk(
        vec![
            read("missing.txt"),
            read("adir"),
            read("nul\u{0}name"),
            read("binary.bin"),
            read("twice.txt"),
            edit("twice.txt", "same", "other"),
            edit("twice.txt", "absent", "other"),
            read("doomed.txt"),
            bash_call("rm doomed.txt"),
            edit("doomed.txt", "x", "y"),
            call_with("read_file", json!({"file": "wrong argument"})),
            read("huge.txt"),
            say("done"),
        ],
        |work| {
            std::fs::create_dir(work.join("adir")).unwrap();
            std::fs::write(work.join("binary.bin"), b"\x7fELF\x00\x01\x02").unwrap();
            std::fs::write(work.join("twice.txt"), "same\nsame\n").unwrap();
            std::fs::write(work.join("doomed.txt"), "x\n").unwrap();
            // Sparse: 40 MiB on paper, nothing on disk.
            let huge = std::fs::File::create(work.join("huge.txt")).unwrap();
            huge.set_len(40 << 20).unwrap();
        },
    );
    let results = agent.tool_results();
    let expect = [
        (0, "missing.txt: no such file"),
        (1, "is a directory, not a file"),
        (2, "the path contains a NUL character"),
        (3, "looks like a binary file"),
        (5, "`old_string` matches 2 places"),
        (6, "`old_string` was not found"),
        (9, "doomed.txt: no such file"),
        (10, "invalid arguments for `read_file`"),
        (11, "files over 32 MiB are not read whole"),
    ];
    for (index, needle) in expect {
        let (text, is_error) = &results[index];
        assert!(*is_error && text.contains(needle), "call {index}: {text}");
    }
    assert_eq!(std::fs::read_to_string(agent.workdir.join("twice.txt")).unwrap(), "same\nsame\n");
}

#[test]
fn writes_follow_the_sandbox_mode_and_an_escalation_allowed_once_writes_that_file_only() {
    let outside = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let target = outside.path().join("outside.txt");
    let linked = outside.path().join("linked.txt");
    let target_text = target.to_str().unwrap().to_owned();
    let mut agent = Agent::start(options(vec![
        write(&target_text, "escaped"),
        write(".git/info-new", "planted"),
        write("link.txt", "through the link"),
        call_with(
            "write_file",
            json!({
                "path": target_text,
                "content": "granted",
                "sandbox_permissions": "danger-full-access",
                "justification": "The user asked for this file outside the project."
            }),
        ),
        write(&target_text, "again"),
        say("done"),
    ]));
    std::fs::create_dir(agent.workdir.join(".git")).unwrap();
    std::fs::write(agent.workdir.join(".git/config"), "[core]\n").unwrap();
    std::os::unix::fs::symlink(&linked, agent.workdir.join("link.txt")).unwrap();
    agent.initialize(true);
    let session = agent.new_session();
    let request = agent.prompt_answering_permission(
        &session,
        json!({"result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}}}),
    );

    let results = agent.tool_results();
    for index in [0, 1, 2, 4] {
        let (text, is_error) = &results[index];
        assert!(*is_error, "call {index}: {text}");
        assert!(
            text.starts_with("[sandbox: file access denied under workspace-write mode]\n[escalation available: if the task needs it, call write_file again with `sandbox_permissions`"),
            "call {index}: {text}"
        );
        assert!(text.contains("nothing was written"), "call {index}: {text}");
    }
    let shown = request["params"]["toolCall"].to_string();
    assert!(shown.contains(&format!("Write under danger-full-access: {target_text}")), "{shown}");
    assert!(shown.contains("The user asked for this file outside the project."), "{shown}");
    assert!(!results[3].1, "{:?}", results[3]);
    // The allowed write happened once; the next one was confined again.
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "granted");
    assert!(!agent.workdir.join(".git/info-new").exists());
    assert!(!linked.exists());
}

#[test]
fn read_only_mode_refuses_every_write() {
    let mut options = options(vec![read("kept.txt"), edit("kept.txt", "one", "two"), say("ok")]);
    options.config = Some("[sandbox]\nmode = \"read-only\"\n".to_owned());
    let mut agent = Agent::start(options);
    std::fs::write(agent.workdir.join("kept.txt"), "one\n").unwrap();
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    let (text, is_error) = agent.last_tool_result();
    assert!(
        is_error && text.starts_with("[sandbox: file access denied under read-only mode]"),
        "{text}"
    );
    assert!(text.contains("which allows no writes"), "{text}");
    assert_eq!(std::fs::read_to_string(agent.workdir.join("kept.txt")).unwrap(), "one\n");
}

#[test]
fn file_cards_and_what_the_model_saw_come_back_on_load() {
    let data = tempfile::tempdir().unwrap();
    let sharing = |responses| {
        let mut options = options(responses);
        options.env = vec![("HOTSH_DATA_DIR".into(), data.path().to_string_lossy().into_owned())];
        options
    };
    let mut agent = Agent::start(sharing(vec![
        read("kept.txt"),
        edit("kept.txt", "one", "two"),
        write("fresh.txt", "new\n"),
        say("ok"),
    ]));
    std::fs::write(agent.workdir.join("kept.txt"), "one\n").unwrap();
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    let finals = agent.final_updates(&session);
    assert_eq!(finals.len(), 3);
    let cwd = agent.workdir.clone();
    agent.kill9();

    // After the restart, the model may edit the file it last wrote without reading it again.
    let mut agent = Agent::start(sharing(vec![edit("kept.txt", "two", "three"), say("ok")]));
    agent.initialize(true);
    agent.wait_for_stderr("initial plugin scan done");
    let loaded =
        agent.call("session/load", json!({"sessionId": session, "cwd": cwd, "mcpServers": []}));
    assert!(loaded.get("result").is_some(), "{loaded}");
    let replayed = agent.final_updates(&session);
    assert_eq!(replayed.len(), finals.len());
    for (replayed, live) in replayed.iter().zip(&finals) {
        for key in ["title", "status", "locations", "content", "rawOutput"] {
            assert_eq!(replayed[key], live[key], "{key}");
        }
    }
    assert_eq!(replayed[1]["content"][0]["type"], "diff");
    agent.prompt(&session, "again");
    let (text, is_error) = agent.last_tool_result();
    assert!(!is_error, "{text}");
    assert_eq!(std::fs::read_to_string(cwd.join("kept.txt")).unwrap(), "three\n");
}
