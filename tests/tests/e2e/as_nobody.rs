//! The sandbox as an ordinary user sees it. Root hides bugs (capabilities, `/proc`, user
//! namespaces), and CI runs as root; so, as root, this test runs the sandbox, guarantees,
//! file-tool, secrets, escalation, subagent (a subagent's commands run in a sandbox
//! environment of their own) and login (the stored key hidden) tests again as `nobody`, on
//! every backend they loop over, from copies of the builds that user can read. As another
//! user the suite ran so already, and this test has nothing to add.

#![allow(clippy::disallowed_methods, reason = "runs the test binary as another user")]

use std::os::unix::process::CommandExt as _;
use std::path::Path;

/// The uid and gid of `nobody` on Debian.
const NOBODY: u32 = 65534;

/// The tests run again: every test whose path holds one of these.
const SUITES: &[&str] = &["sandbox", "guarantees", "files::", "subagents::", "login::"];

fn copy_into(file: &Path, dir: &Path) {
    let name = file.file_name().expect("a file name");
    std::fs::copy(file, dir.join(name))
        .unwrap_or_else(|e| panic!("cannot copy {}: {e}", file.display()));
}

#[test]
fn the_sandbox_guarantees_tests_pass_for_an_ordinary_user_too() {
    if !hotsh_tests::running_as_root() {
        eprintln!("not root: the suite already runs as an ordinary user");
        return;
    }
    // Everything the tests need, where `nobody` can read it (a checkout under /root is not).
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let root = scratch.path();
    let builds = root.join("builds");
    std::fs::create_dir_all(&builds).expect("builds");
    for file in [
        hotsh_tests::hotsh_binary(),
        hotsh_tests::shim_binary(),
        hotsh_tests::tool_bash_plugin(),
        hotsh_tests::tool_fs_plugin(),
        hotsh_tests::hello_plugin(),
    ] {
        copy_into(&file, &builds);
    }
    let misbehaving = hotsh_tests::misbehaving_build("escape-in-manifest");
    let fixture = builds.join("fixture-builds/misbehaving-escape-in-manifest-Debug");
    std::fs::create_dir_all(&fixture).expect("fixture-builds");
    copy_into(&misbehaving, &fixture);
    let tests = std::env::current_exe().expect("this test binary");
    copy_into(&tests, root);
    let home = root.join("home");
    let tmp = root.join("tmp");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::create_dir_all(&tmp).expect("tmp");
    hotsh_tests::chown_tree(&home, NOBODY, NOBODY);
    hotsh_tests::chown_tree(&tmp, NOBODY, NOBODY);
    std::fs::set_permissions(root, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("a readable scratch directory");

    let binary = root.join(tests.file_name().expect("a name"));
    let mut command = std::process::Command::new(&binary);
    command
        .args(SUITES)
        .args(["--skip", "as_nobody::", "--test-threads", "2"])
        .current_dir(&home)
        .env(hotsh_tests::PREBUILT, &builds)
        .env("HOME", &home)
        .env("TMPDIR", &tmp)
        .env("USER", "nobody")
        .env_remove("CARGO_TARGET_DIR")
        .uid(NOBODY)
        .gid(NOBODY);
    let output = command.output().expect("the test binary runs as nobody");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary = stdout.lines().filter(|l| l.starts_with("test result:")).collect::<Vec<_>>();
    assert!(
        output.status.success(),
        "as nobody: {summary:?}\n{}\n{}",
        failures(&stdout),
        tail(&stderr, 40)
    );
    // The run did run the tests (a filter that matched nothing would pass too).
    let passed: usize = summary
        .iter()
        .filter_map(|line| line.split("ok. ").nth(1)?.split(' ').next()?.parse::<usize>().ok())
        .sum();
    assert!(passed >= 40, "as nobody only {passed} tests ran: {summary:?}");
    eprintln!("as nobody: {summary:?}");
}

/// Each failed test's panic message (its line and the four after it).
fn failures(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        if line.contains("panicked at") {
            out.extend_from_slice(&lines[at..lines.len().min(at + 5)]);
        }
    }
    out.join("\n")
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
