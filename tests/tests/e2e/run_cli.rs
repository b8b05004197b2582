//! `hotsh run`: one prompt in a terminal, as the README's first command uses it.

use hotsh_tests::{hotsh_binary, workspace};

#[test]
#[allow(clippy::disallowed_methods, reason = "runs the hotsh binary")]
fn run_plays_the_demo_script_and_shows_every_card() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "a readme\n").unwrap();
    std::fs::write(dir.path().join("main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(dir.path().join("lib.rs"), "//! lib\n").unwrap();
    let output = std::process::Command::new(hotsh_binary())
        .arg("run")
        .arg("--model")
        .arg(format!("script:{}", workspace().join("examples/demo/script.json").display()))
        .arg("--cwd")
        .arg(dir.path())
        .arg("What is in this repository?")
        .env("TMPDIR", tmp.path())
        .env("HOTSH_DATA_DIR", tmp.path().join("data"))
        .output()
        .unwrap();
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
