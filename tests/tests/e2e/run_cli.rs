//! `hotsh run`: one prompt in a terminal, as the README's first command uses it.

use hotsh_tests::{hotsh_binary, workspace};
use std::path::Path;

/// `hotsh run --model script:SCRIPT --cwd CWD PROMPT`, its temp and data directories in `tmp`.
fn run(script: &Path, cwd: &Path, tmp: &Path, prompt: &str) -> std::process::Output {
    run_with(&[], script, cwd, tmp, prompt)
}

/// [`run`] with more arguments before the prompt.
#[allow(clippy::disallowed_methods, reason = "runs the hotsh binary")]
fn run_with(
    extra: &[&str],
    script: &Path,
    cwd: &Path,
    tmp: &Path,
    prompt: &str,
) -> std::process::Output {
    std::process::Command::new(hotsh_binary())
        .arg("run")
        .args(extra)
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("--cwd")
        .arg(cwd)
        .arg(prompt)
        .env("TMPDIR", tmp)
        .env("HOTSH_DATA_DIR", tmp.join("data"))
        .output()
        .unwrap()
}

#[test]
fn run_plays_the_demo_script_and_shows_every_card() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "a readme\n").unwrap();
    std::fs::write(dir.path().join("main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(dir.path().join("lib.rs"), "//! lib\n").unwrap();
    let demo = workspace().join("examples/demo/script.json");
    let output = run(&demo, dir.path(), tmp.path(), "What is in this repository?");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    // Cards in order, each with its command, output and exit status.
    let expected_in_order = [
        "The user wants a tour",
        "$ ls\n",
        "README.md\nlib.rs\nmain.rs\n",
        "[exit 0]",
        "$ find . -name '*.rs'",
        "2 total\n[exit 0]",
        "$ grep -n 'no such phrase' README.md",
        "grep found nothing\n[exit 1]",
        "That was hotsh playing a scripted model",
    ];
    let mut rest = stdout.as_ref();
    for expected in expected_in_order {
        let at = rest
            .find(expected)
            .unwrap_or_else(|| panic!("{expected:?} missing (in order) from:\n{stdout}"));
        rest = &rest[at + expected.len()..];
    }
    // No colours when stdout is not a terminal, and nothing but the user's view on stdout.
    assert!(!stdout.contains('\x1b'));
}

#[test]
fn run_shows_an_edit_as_a_unified_diff_once_it_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("list.txt"), "milk\nbread\n").unwrap();
    let script = tmp.path().join("script.json");
    let responses = serde_json::json!({"responses": [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "list.txt"}}]},
        {"tool_calls": [{"name": "edit_file", "arguments": {"path": "list.txt", "old_string": "bread\n", "new_string": "bread\neggs\n"}}]},
        {"tool_calls": [{"name": "edit_file", "arguments": {"path": "list.txt", "old_string": "eggs", "new_string": "six eggs"}}]},
        {"text": "Added eggs."}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    let output = run(&script, dir.path(), tmp.path(), "add eggs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let path = dir.path().join("list.txt");
    // The file's line numbers (the edit starts at line 2), no false end-of-file marker.
    let diff = format!("--- {p}\n+++ {p}\n@@ -2 +2,2 @@\n bread\n+eggs\n", p = path.display());
    assert!(!stdout.contains("No newline at end of file"), "{stdout}");
    assert_eq!(stdout.matches(&diff).count(), 1, "{stdout}");
    // A fragment within a line: still that line, numbered.
    let second = format!("--- {p}\n+++ {p}\n@@ -3 +3 @@\n-eggs\n+six eggs\n", p = path.display());
    assert_eq!(stdout.matches(&second).count(), 1, "{stdout}");
    assert!(stdout.contains(&format!("• Edit {}", path.display())), "{stdout}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "milk\nbread\nsix eggs\n");
}

#[test]
fn run_takes_the_sessions_sandbox_mode_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let (cwd, tmp) = (dir.path().join("work"), dir.path().join("tmp"));
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let script = dir.path().join("script.json");
    let call = |command: &str| serde_json::json!({"tool_calls": [{"name": "bash", "arguments": {"command": command}}]});
    let responses =
        serde_json::json!({"responses": [call("echo hi > made.txt"), {"text": "done"}]});
    std::fs::write(&script, responses.to_string()).unwrap();

    let output = run_with(&["--sandbox", "read-only"], &script, &cwd, &tmp, "write it");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    // Bubblewrap mounts the folder read-only; Landlock refuses the write. The refusal is
    // said where the user looks, after the command's output.
    let refused = format!(
        "\n[hotsh sandbox: read-only mode refused a write to {}; the agent may ask you to allow it under a wider mode]\n[exit 1]",
        std::fs::canonicalize(&cwd).unwrap().join("made.txt").display()
    );
    assert!(
        stdout.contains(&format!("made.txt: Read-only file system{refused}"))
            || stdout.contains(&format!("made.txt: Permission denied{refused}")),
        "{stdout}"
    );
    assert!(!cwd.join("made.txt").exists(), "read-only let the write through");

    let output = run_with(&["--sandbox", "workspace-write"], &script, &cwd, &tmp, "write it");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(std::fs::read_to_string(cwd.join("made.txt")).unwrap(), "hi\n");

    // A mode that does not exist is refused before anything runs.
    std::fs::remove_file(cwd.join("made.txt")).unwrap();
    let output = run_with(&["--sandbox", "wide-open"], &script, &cwd, &tmp, "write it");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("invalid value 'wide-open' for '--sandbox <MODE>'"), "{stderr}");
    assert!(!cwd.join("made.txt").exists());
}

/// `hotsh replay EXTRA… ARC`, its temp dir `tmp`.
#[allow(clippy::disallowed_methods, reason = "runs hotsh replay")]
fn replay(arc: &Path, tmp: &Path, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(hotsh_binary())
        .arg("replay")
        .args(extra)
        .arg(arc)
        .env("TMPDIR", tmp)
        .output()
        .unwrap()
}

#[test]
fn run_record_writes_an_arc_that_replays_and_replay_says_what_an_arc_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let (cwd, tmp) = (dir.path().join("work"), dir.path().join("tmp"));
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let script = dir.path().join("script.json");
    let responses = serde_json::json!({"responses": [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo recorded"}}]},
        {"text": "done"}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    let arc = dir.path().join("run.arc");
    let output = run_with(&["--record", arc.to_str().unwrap()], &script, &cwd, &tmp, "record it");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = std::fs::read_to_string(&arc).unwrap();
    for side in ["\"client\"", "\"agent\"", "\"model\""] {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{{{side}"))),
            "no {side} line: {text}"
        );
    }
    let replayed = replay(&arc, &tmp, &[]);
    let stdout = String::from_utf8_lossy(&replayed.stdout);
    assert!(replayed.status.success(), "{stdout}");
    assert!(stdout.contains("1 arcs: 1 passed"), "{stdout}");

    // An arc with the model's side only is refused, saying so.
    let models: String = text
        .lines()
        .filter(|l| l.starts_with("{\"arc\"") || l.starts_with("{\"model\""))
        .map(|l| format!("{l}\n"))
        .collect();
    let half = dir.path().join("models-only.arc");
    std::fs::write(&half, models).unwrap();
    let refused = replay(&half, &tmp, &[]);
    let stdout = String::from_utf8_lossy(&refused.stdout);
    assert!(!refused.status.success(), "{stdout}");
    assert!(
        stdout.contains("the arc holds no client messages, so there is nothing to replay"),
        "{stdout}"
    );
}

#[test]
fn replayed_commands_get_at_most_the_sandbox_mode_replay_was_given() {
    let dir = tempfile::tempdir().unwrap();
    let (cwd, tmp, outside) =
        (dir.path().join("work"), dir.path().join("tmp"), dir.path().join("outside"));
    for d in [&cwd, &tmp, &outside] {
        std::fs::create_dir_all(d).unwrap();
    }
    let marker = outside.join("escaped");
    let script = dir.path().join("script.json");
    let command = format!("touch {}", marker.display());
    let responses = serde_json::json!({"responses": [
        {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]},
        {"text": "done"}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    // Recorded by a session that chose full access: the command wrote outside its folder.
    let arc = dir.path().join("wide.arc");
    let output = run_with(
        &["--record", arc.to_str().unwrap(), "--sandbox", "danger-full-access"],
        &script,
        &cwd,
        &tmp,
        "write outside",
    );
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(marker.exists(), "the recorded session wrote outside its folder");
    std::fs::remove_file(&marker).unwrap();
    // Replayed as given by default (workspace-write at most): the arc's choice is refused and
    // the command cannot write outside; the replay fails, showing it.
    let capped = replay(&arc, &tmp, &[]);
    let stdout = String::from_utf8_lossy(&capped.stdout);
    assert!(!capped.status.success(), "{stdout}");
    assert!(!marker.exists(), "a replayed command wrote outside its folder");
    assert!(stdout.contains("this agent allows workspace-write at most"), "{stdout}");
    // Allowed on the command line: it replays as recorded.
    let wide = replay(&arc, &tmp, &["--sandbox", "danger-full-access"]);
    let stdout = String::from_utf8_lossy(&wide.stdout);
    assert!(wide.status.success(), "{stdout}");
    assert!(marker.exists());
}
