//! What a new user meets first: installing hotsh with its plugins, the default plugin
//! directories, and what `hotsh run` and bare `hotsh` say when something is missing.

use hotsh_tests::{
    Agent, AgentOptions, bash_call, eventually, hello_plugin, hotsh_binary, say, workspace,
};
use serde_json::json;
use std::path::Path;
use std::process::{Command, Output};

/// Runs a command with a clean environment for hotsh (no developer config, data or colour
/// settings) plus `env`.
#[allow(clippy::disallowed_methods, reason = "runs the hotsh binary")]
fn run(program: &Path, args: &[&str], home: &Path, env: &[(&str, &str)]) -> Output {
    Command::new(program)
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env_remove("XDG_DATA_HOME")
        .env_remove("HOTSH_DATA_DIR")
        .env_remove("NO_COLOR")
        .env_remove("HOTSH_LOG")
        .env_remove("HOTSH_MODEL")
        .env_remove("DEEPSEEK_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("HOTSH_API_KEY")
        .env("TMPDIR", home)
        .envs(env.iter().copied())
        .current_dir(home)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn write_script(dir: &Path, responses: serde_json::Value) -> String {
    let path = dir.join("script.json");
    std::fs::write(&path, json!({"responses": responses}).to_string()).unwrap();
    format!("script:{}", path.display())
}

#[test]
fn hotsh_install_puts_hotsh_and_its_plugins_where_every_hotsh_finds_them() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let output = run(&hotsh_binary(), &["install"], home, &[]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", text(&output.stderr));
    let plugins = home.join(".local/share/hotsh/plugins");
    assert!(
        stdout.contains(&format!(
            "installed plugin tool-bash 0.1.0 (tools: bash, bash_output, bash_kill) → {}",
            plugins.join("libhotsh_tool_bash.so").display()
        )),
        "{stdout}"
    );
    let installed = home.join(".local/bin/hotsh");
    assert!(stdout.contains(&format!("→ {}", installed.display())), "{stdout}");
    // PATH does not hold the new bin directory: the user is told.
    assert!(text(&output.stderr).contains("is not on your PATH"), "{}", text(&output.stderr));
    let mode =
        |p: &Path| std::os::unix::fs::PermissionsExt::mode(&p.metadata().unwrap().permissions());
    assert_eq!(mode(&home.join(".local/share/hotsh")) & 0o777, 0o700);
    // The shim comes along, the same file as the one beside the built hotsh.
    let shim = home.join(".local/bin/hotsh-shim");
    assert_eq!(std::fs::read(&shim).unwrap(), std::fs::read(hotsh_tests::shim_binary()).unwrap());
    assert_eq!(mode(&shim) & 0o777, 0o755);

    // The installed binary has no plugin beside it, yet finds tool-bash.
    let model = write_script(home, json!([bash_call("echo installed-ok"), say("done")]));
    let output = run(&installed, &["run", "--model", &model, "go"], home, &[]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", text(&output.stderr));
    assert!(stdout.contains("$ echo installed-ok\ninstalled-ok\n[exit 0]"), "{stdout}");
}

#[test]
fn a_copied_binary_without_plugins_says_what_to_do() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let lonely = home.join("bin/hotsh");
    std::fs::create_dir_all(lonely.parent().unwrap()).unwrap();
    std::fs::copy(hotsh_binary(), &lonely).unwrap();
    let model = write_script(home, json!([say("unused")]));
    let output = run(&lonely, &["run", "--model", &model, "go"], home, &[]);
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: no tools are loaded: no hotsh plugin was found in "),
        "{stderr}"
    );
    assert!(
        stderr.contains(&home.join(".local/share/hotsh/plugins").display().to_string()),
        "{stderr}"
    );
    assert!(stderr.contains("hotsh install"), "{stderr}");
}

#[test]
fn run_reports_each_failure_as_one_error_line_and_exit_1() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let one_answer = write_script(home, json!([say("the only answer")]));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["run", "hi"],
            "error: no model is configured: set DEEPSEEK_API_KEY or OPENAI_API_KEY",
        ),
        (
            vec!["run", "--model", &one_answer, "--cwd", "/no/such/dir", "hi"],
            "error: --cwd /no/such/dir is not a directory",
        ),
    ];
    for (args, expected) in cases {
        let output = run(&hotsh_binary(), &args, home, &[]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.starts_with(expected), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: not one line a person reads:\n{stderr}");
    }
    // A script that runs out within the turn: what was shown stays, then the error.
    let two_steps = write_script(home, json!([bash_call("echo step")]));
    let output = run(&hotsh_binary(), &["run", "--model", &two_steps, "hi"], home, &[]);
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stdout).contains("step\n[exit 0]"), "{}", text(&output.stdout));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with("error: the model script ") && stderr.contains("has no more responses"),
        "{stderr}"
    );
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh under script(1) for a terminal")]
fn colours_only_on_a_terminal_and_never_with_no_color() {
    let home = tempfile::tempdir().unwrap();
    let model = write_script(home.path(), json!([{"reasoning": "hmm", "text": "hello"}]));
    let command = format!(
        "{} run --no-default-plugins --plugin-dir {} --model {model} hi; {} run hi",
        hotsh_binary().display(),
        hotsh_binary().parent().unwrap().display(),
        hotsh_binary().display()
    );
    let on_terminal = |no_color: Option<&str>| {
        let mut script = Command::new("script");
        script
            .args(["-qec", &command, "/dev/null"])
            .env("HOME", home.path())
            .env_remove("NO_COLOR");
        if let Some(value) = no_color {
            script.env("NO_COLOR", value);
        }
        text(&script.stdin(std::process::Stdio::null()).output().unwrap().stdout)
    };
    let coloured = on_terminal(None);
    assert!(coloured.contains("\x1b[2mhmm\x1b[0m"), "{coloured:?}");
    assert!(coloured.contains("\x1b[1;31merror:\x1b[0m no model"), "{coloured:?}");
    let plain = on_terminal(Some("1"));
    assert!(!plain.contains('\x1b'), "{plain:?}");
    assert!(plain.contains("hmm") && plain.contains("error: no model"), "{plain:?}");
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs hotsh under script(1) for a terminal")]
fn bare_hotsh_on_a_terminal_says_what_it_is_and_keeps_serving() {
    let home = tempfile::tempdir().unwrap();
    let command = format!("{} --no-default-plugins", hotsh_binary().display());
    let output = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("HOME", home.path())
        .env("HOTSH_LOG", "error")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let shown = text(&output.stdout);
    assert_eq!(
        shown.trim_end(),
        "hotsh speaks the Agent Client Protocol on stdin/stdout, for an editor such as Zed to \
         start; for a prompt in this terminal use `hotsh run \"…\"` (see `hotsh --help`)."
    );
    // It served until stdin ended, then exited cleanly.
    assert!(output.status.success());
}

#[test]
#[allow(clippy::disallowed_methods, reason = "asks git for the commit")]
fn version_names_the_commit() {
    let home = tempfile::tempdir().unwrap();
    let output = run(&hotsh_binary(), &["--version"], home.path(), &[]);
    let version = text(&output.stdout);
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(workspace())
        .output()
        .unwrap();
    let commit = text(&commit.stdout);
    assert_eq!(version, format!("hotsh 0.1.0 (commit {})\n", commit.trim()));
}

#[test]
fn flags_work_without_the_acp_subcommand() {
    let mut options = AgentOptions::script(vec![bash_call("echo top-level"), say("ok")]);
    options.without_acp_word = true;
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    assert_eq!(agent.last_tool_result(), ("top-level".to_owned(), false));
}

#[test]
fn plugin_dir_adds_to_the_default_directories_and_comes_first() {
    let mut options = AgentOptions::script(vec![
        json!({"tool_calls": [
            {"name": "hello", "arguments": {"name": "Ada"}},
            {"name": "bash", "arguments": {"command": "echo from the default directory"}}
        ]}),
        say("ok"),
    ]);
    // Only the example plugin in the agent's own --plugin-dir; tool-bash comes from the
    // executable's directory.
    options.plugins = vec![hello_plugin()];
    options.default_plugins = true;
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    assert_eq!(
        agent.tool_results(),
        vec![("Hello, Ada!".to_owned(), false), ("from the default directory".to_owned(), false)]
    );
    let stderr = agent.wait_for_stderr("serving ");
    let summary = stderr.lines().find(|l| l.contains("serving ")).expect("a start-up summary");
    let hello_at = summary.find("hello 0.1.0 from ").expect("hello in the summary");
    let bash_at = summary.find("tool-bash 0.1.0 from ").expect("tool-bash in the summary");
    assert!(hello_at < bash_at, "--plugin-dir comes first: {summary}");
    assert!(summary.contains(&agent.plugin_dir().display().to_string()), "{summary}");
}

#[test]
fn starting_with_no_tools_is_a_warning() {
    let mut options = AgentOptions::script(vec![say("no tools here")]);
    options.plugins = Vec::new();
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    agent.prompt(&session, "go");
    eventually("the warning", || agent.stderr().contains("WARN"));
    let stderr = agent.stderr();
    let warning = stderr.lines().find(|l| l.contains("WARN")).unwrap();
    assert!(warning.contains("no tools are loaded: no hotsh plugin was found in "), "{warning}");
    assert!(warning.contains(&agent.plugin_dir().display().to_string()), "{warning}");
}

/// The shell block between the `plugin-steps` markers of the README.
fn readme_plugin_steps() -> String {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let block = readme
        .split("<!-- plugin-steps:begin -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- plugin-steps:end -->").next())
        .expect("the README marks its plugin steps");
    block
        .trim()
        .strip_prefix("```sh")
        .and_then(|b| b.strip_suffix("```"))
        .expect("the steps are one sh block")
        .to_owned()
}

#[test]
#[allow(clippy::disallowed_methods, reason = "runs the README's steps in bash")]
fn the_readmes_plugin_steps_work_as_written() {
    let home = tempfile::tempdir().unwrap();
    // `hotsh` on PATH, as after `hotsh install`; tool-bash installed for this user.
    let bin = home.path().join(".local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(hotsh_binary(), bin.join("hotsh")).unwrap();
    let plugins = home.path().join(".local/share/hotsh/plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(hotsh_tests::tool_bash_plugin(), plugins.join("libhotsh_tool_bash.so")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let output = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &readme_plugin_steps()])
        .current_dir(workspace())
        .env("HOME", home.path())
        .env("PATH", path)
        .env("TMPDIR", home.path())
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .env_remove("XDG_DATA_HOME")
        .env_remove("HOTSH_DATA_DIR")
        .env_remove("CARGO_TARGET_DIR")
        // Everything the example needs is in cargo's cache already.
        .env("CARGO_NET_OFFLINE", "true")
        .output()
        .unwrap();
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", text(&output.stderr));
    assert!(stdout.contains("plugin hello 0.1.0\n"), "{stdout}");
    assert!(stdout.contains("tools:\n  hello: Greets someone by name.\n"), "{stdout}");
    assert!(stdout.contains("• Greet Ada\n"), "{stdout}");
    assert!(stdout.contains("Hello, Ada!"), "{stdout}");
    assert!(stdout.trim_end().ends_with("The hello tool answered."), "{stdout}");
}
