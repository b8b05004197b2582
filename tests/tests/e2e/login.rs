//! `hotsh login` (through a pseudo-terminal, as Zed's terminal auth runs it), the stored key
//! as the next `hotsh acp` uses it and as confined commands cannot see it, `logout`, and ACP's
//! auth methods, `auth_required` and `logout`.
#![allow(clippy::unwrap_used, reason = "tests")]
#![allow(clippy::disallowed_methods, reason = "runs hotsh login under script(1)")]

use crate::sandbox::{backends, options};
use hotsh_tests::{Agent, AgentOptions, FakeProvider, Reply, bash_call, say};
use serde_json::json;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

const KEY: &str = "sk-login-7f3e9a1c5b";

/// Runs `hotsh ARGS` in a pseudo-terminal (`script`), typing `input`; what the terminal
/// showed, and whether it succeeded.
fn in_terminal(config_home: &Path, args: &str, input: &str) -> (String, bool) {
    in_terminal_with(config_home, &[], args, input)
}

/// [`in_terminal`] with more of the environment set.
fn in_terminal_with(
    config_home: &Path,
    env: &[(String, String)],
    args: &str,
    input: &str,
) -> (String, bool) {
    use std::io::Write as _;
    let command = format!("{} {args}", hotsh_tests::hotsh_binary().display());
    let mut child = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .envs(env.iter().map(|(name, value)| (name, value)))
        .env("XDG_CONFIG_HOME", config_home)
        .env_remove("DEEPSEEK_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("HOTSH_API_KEY")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script runs");
    let mut stdin = child.stdin.take().unwrap();
    // One answer at a time, as a user types: the key prompt turns echo off first.
    for line in input.lines() {
        std::thread::sleep(std::time::Duration::from_millis(300));
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let shown = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (shown, output.status.success())
}

/// The stored key file under `config_home`.
fn key_file(config_home: &Path) -> std::path::PathBuf {
    config_home.join("hotsh/credentials/key.toml")
}

fn models_reply() -> Reply {
    Reply::Status { code: 200, headers: Vec::new(), body: r#"{"data": []}"#.into() }
}

#[test]
fn login_stores_the_key_unseen_the_next_agent_uses_it_and_no_command_can_read_it() {
    let config_home = tempfile::tempdir().unwrap();
    let provider = FakeProvider::start(vec![models_reply(), Reply::text("Logged in and talking.")]);
    let answers = format!("3\n{}\ntest-model\n  {KEY}  \n", provider.base_url);
    let (shown, ok) = in_terminal(config_home.path(), "login", &answers);
    assert!(ok, "{shown}");
    assert!(!shown.contains(KEY), "the key was echoed: {shown}");
    assert!(shown.contains("The provider accepted the key."), "{shown}");
    let file = key_file(config_home.path());
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let folder = std::fs::metadata(file.parent().unwrap()).unwrap().permissions().mode() & 0o777;
    assert_eq!(folder, 0o700);
    assert!(std::fs::read_to_string(&file).unwrap().contains(KEY), "stored trimmed");
    // The key was checked with the model list, sent to the server given.
    let check = &provider.received()[0];
    assert_eq!((check.method.as_str(), check.path.as_str()), ("GET", "/v1/models"));
    assert_eq!(check.header("authorization"), Some(format!("Bearer {KEY}").as_str()));

    // `login --status` says where the key comes from, never what it is.
    let (status, ok) = in_terminal(config_home.path(), "login --status", "");
    assert!(ok && status.contains("Key: stored by `hotsh login`"), "{status}");
    assert!(!status.contains(KEY), "{status}");

    // The next agent, with no key in its environment and no model named, uses it.
    let mut options = AgentOptions::script(vec![]);
    options.model_args = Some(Vec::new());
    options.env = vec![("XDG_CONFIG_HOME".into(), config_home.path().display().to_string())];
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "hello");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let asked = &provider.received()[1];
    assert_eq!(asked.body["model"], "test-model");
    assert_eq!(asked.header("authorization"), Some(format!("Bearer {KEY}").as_str()));

    // ACP `logout` removes it: the next session needs a key again.
    let out = agent.call("logout", json!({}));
    assert!(out.get("result").is_some(), "{out}");
    assert!(!file.exists());
    let refused = agent.call("session/new", json!({"cwd": agent.workdir, "mcpServers": []}));
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    assert!(agent.finish().success());
}

#[test]
fn a_confined_command_cannot_read_the_stored_key_on_either_backend() {
    let config_home = tempfile::tempdir().unwrap();
    let file = key_file(config_home.path());
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::set_permissions(file.parent().unwrap(), std::fs::Permissions::from_mode(0o700))
        .unwrap();
    std::fs::write(&file, format!("provider = \"deepseek\"\nkey = \"{KEY}\"\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    for backend in backends() {
        let command = format!(
            "cat {} ; ls -A {} ; cat /proc/$PPID/environ /proc/1/environ 2>&1 | tr '\\0' '\\n' | grep -c {KEY} ; echo read-done",
            file.display(),
            file.parent().unwrap().display()
        );
        let mut options = options(backend, "", vec![bash_call(&command), say("ok")]);
        options.env = vec![("XDG_CONFIG_HOME".into(), config_home.path().display().to_string())];
        let mut agent = Agent::start(options);
        agent.initialize(true);
        let session = agent.new_session();
        agent.prompt(&session, "read the key");
        let (output, _) = agent.last_tool_result();
        assert!(output.contains("read-done"), "{backend}: {output}");
        assert!(!output.contains(KEY), "{backend}: a confined command read the key: {output}");
        assert!(output.contains("No such file or directory"), "{backend}: {output}");
        agent.finish();
    }
}

#[test]
fn initialize_offers_terminal_login_and_a_session_without_a_key_asks_to_authenticate() {
    let config_home = tempfile::tempdir().unwrap();
    let mut options = AgentOptions::script(vec![]);
    options.model_args = Some(Vec::new());
    options.env = vec![("XDG_CONFIG_HOME".into(), config_home.path().display().to_string())];
    let mut agent = Agent::start(options);
    let init = agent.initialize(true);
    let methods = init["result"]["authMethods"].as_array().unwrap();
    assert_eq!(
        methods[0],
        json!({"type": "terminal", "id": "login", "name": "Log in with hotsh login",
               "description": methods[0]["description"], "args": ["login"]})
    );
    assert_eq!(methods[1]["id"], "api-key");
    assert!(methods[1].get("type").is_none(), "the agent method is the default type");
    assert_eq!(init["result"]["agentCapabilities"]["auth"]["logout"], json!({}));
    let refused = agent.call("session/new", json!({"cwd": agent.workdir, "mcpServers": []}));
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    assert_eq!(refused["error"]["data"]["authMethods"], json!(["login", "api-key"]));
    let not_yet = agent.call("authenticate", json!({"methodId": "login"}));
    assert_eq!(not_yet["error"]["code"], -32000, "{not_yet}");
    // The user logs in (Zed runs `hotsh login` in a terminal); `authenticate` reads the key.
    let file = key_file(config_home.path());
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(
        &file,
        "provider = \"other\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\nkey = \"sk-x\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let authenticated = agent.call("authenticate", json!({"methodId": "login"}));
    assert!(authenticated.get("result").is_some(), "{authenticated}");
    let session = agent.call("session/new", json!({"cwd": agent.workdir, "mcpServers": []}));
    assert!(session.get("result").is_some(), "{session}");
    let model = &session["result"]["configOptions"][0]["currentValue"];
    assert_eq!(model, "openai:m", "{session}");
    agent.finish();
}

#[test]
fn bad_keys_and_files_are_refused_saying_why_and_nothing_is_stored_half_way() {
    let config_home = tempfile::tempdir().unwrap();
    for (typed, why) in [("sk-one two", "spaces"), ("   ", "empty")] {
        let (shown, ok) = in_terminal(config_home.path(), "login", &format!("1\n{typed}\n"));
        assert!(!ok, "{shown}");
        assert!(shown.contains(why) && shown.contains("nothing was stored"), "{shown}");
        assert!(!key_file(config_home.path()).exists());
    }
    // A key file others can read is refused, saying how to fix it.
    let file = key_file(config_home.path());
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "provider = \"deepseek\"\nkey = \"sk-open\"\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (status, ok) = in_terminal(config_home.path(), "login --status", "");
    assert!(!ok, "{status}");
    assert!(status.contains(&format!("chmod 600 {}", file.display())), "{status}");
    // A configuration directory that cannot be written: said, nothing stored.
    // (Root writes anywhere: only an ordinary user sees this; `as_nobody.rs` runs it so.)
    if !hotsh_tests::running_as_root() {
        let provider = FakeProvider::start(vec![models_reply()]);
        let locked = tempfile::tempdir().unwrap();
        std::fs::set_permissions(locked.path(), std::fs::Permissions::from_mode(0o500)).unwrap();
        let answers = format!("3\n{}\nm\nsk-fine\n", provider.base_url);
        let (shown, ok) = in_terminal(locked.path(), "login", &answers);
        assert!(!ok && shown.contains("cannot write"), "{shown}");
    }
    // `logout` with nothing stored says so.
    std::fs::remove_file(&file).unwrap();
    let (shown, ok) = in_terminal(config_home.path(), "logout", "");
    assert!(ok && shown.contains("No key was stored."), "{shown}");
}

/// A session bus of its own (`dbus-daemon`) with a real Secret Service on it (GNOME Keyring,
/// its login keyring unlocked with a password typed on its stdin), in a temporary home; both
/// end with it.
struct Keyring {
    _home: tempfile::TempDir,
    /// The variables that reach it: `DBUS_SESSION_BUS_ADDRESS`, `HOME`, `XDG_RUNTIME_DIR`.
    env: Vec<(String, String)>,
    daemons: Vec<std::process::Child>,
}

impl Keyring {
    fn start() -> Self {
        use std::io::Write as _;
        let home = tempfile::tempdir().unwrap();
        let run = home.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = run.join("bus");
        let env = vec![
            ("DBUS_SESSION_BUS_ADDRESS".to_owned(), format!("unix:path={}", socket.display())),
            ("HOME".to_owned(), home.path().display().to_string()),
            ("XDG_RUNTIME_DIR".to_owned(), run.display().to_string()),
            ("XDG_DATA_HOME".to_owned(), home.path().join("data").display().to_string()),
        ];
        let bus = std::process::Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--nopidfile"])
            .arg(format!("--address=unix:path={}", socket.display()))
            .spawn()
            .expect("dbus-daemon runs (package dbus-daemon)");
        let mut keyring = Self { _home: home, env, daemons: vec![bus] };
        hotsh_tests::eventually("the session bus listens", || socket.exists());
        let mut daemon = std::process::Command::new("gnome-keyring-daemon")
            .args(["--foreground", "--unlock", "--components=secrets"])
            .envs(keyring.env.iter().map(|(name, value)| (name, value)))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("gnome-keyring-daemon runs (package gnome-keyring)");
        let mut password = daemon.stdin.take().unwrap();
        password.write_all(b"keyring-password").unwrap();
        drop(password);
        keyring.daemons.push(daemon);
        hotsh_tests::eventually("the Secret Service is on the bus", || {
            let asked = std::process::Command::new("dbus-send")
                .args([
                    "--session",
                    "--print-reply",
                    "--dest=org.freedesktop.DBus",
                    "/org/freedesktop/DBus",
                    "org.freedesktop.DBus.NameHasOwner",
                    "string:org.freedesktop.secrets",
                ])
                .envs(keyring.env.iter().map(|(name, value)| (name, value)))
                .output()
                .unwrap();
            String::from_utf8_lossy(&asked.stdout).contains("boolean true")
        });
        keyring
    }

    /// What the keyring holds for hotsh, asked with `secret-tool` (libsecret): none when
    /// nothing.
    fn lookup(&self) -> Option<String> {
        let found = std::process::Command::new("secret-tool")
            .args(["lookup", "application", "hotsh"])
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .output()
            .expect("secret-tool runs (package libsecret-tools)");
        found.status.success().then(|| String::from_utf8_lossy(&found.stdout).into_owned())
    }
}

impl Drop for Keyring {
    fn drop(&mut self) {
        for daemon in self.daemons.iter_mut().rev() {
            let _ = daemon.kill();
            let _ = daemon.wait();
        }
    }
}

#[test]
fn login_keyring_keeps_the_key_in_the_secret_service_where_no_command_reaches_it() {
    let config_home = tempfile::tempdir().unwrap();
    let keyring = Keyring::start();
    let provider = FakeProvider::start(vec![models_reply(), Reply::text("Keyring key works.")]);
    let answers = format!("3\n{}\ntest-model\n{KEY}\n", provider.base_url);
    let (shown, ok) =
        in_terminal_with(config_home.path(), &keyring.env, "login --keyring", &answers);
    assert!(ok, "{shown}");
    assert!(!shown.contains(KEY), "the key was echoed: {shown}");
    assert!(shown.contains("in your keyring"), "{shown}");
    // The key is in the keyring (as libsecret finds it), the file only says so.
    assert_eq!(keyring.lookup().as_deref(), Some(KEY));
    let file = std::fs::read_to_string(key_file(config_home.path())).unwrap();
    assert!(file.contains("keyring = true") && !file.contains(KEY), "{file}");
    let (status, ok) = in_terminal_with(config_home.path(), &keyring.env, "login --status", "");
    assert!(ok && status.contains("in your keyring (Secret Service)"), "{status}");
    assert!(!status.contains(KEY), "{status}");

    // The next agent reads it from the keyring; a confined command reaches neither the
    // keyring (the session bus is a socket outside its writable roots) nor the file.
    let mut plain = AgentOptions::script(vec![]);
    plain.model_args = Some(Vec::new());
    plain.env = keyring.env.clone();
    plain.env.push(("XDG_CONFIG_HOME".into(), config_home.path().display().to_string()));
    let mut agent = Agent::start(plain);
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "hello");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let asked = &provider.received()[1];
    assert_eq!(asked.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    agent.finish();
    for backend in backends() {
        let command = "secret-tool lookup application hotsh; echo \"lookup: $?\"";
        let mut options = options(backend, "", vec![bash_call(command), say("ok")]);
        options.env = keyring.env.clone();
        options.env.push(("XDG_CONFIG_HOME".into(), config_home.path().display().to_string()));
        let mut agent = Agent::start(options);
        agent.initialize(true);
        let session = agent.new_session();
        agent.prompt(&session, "read the keyring");
        let (output, _) = agent.last_tool_result();
        assert!(output.contains("lookup: 1"), "{backend}: {output}");
        assert!(!output.contains(KEY), "{backend}: a confined command read the key: {output}");
        agent.finish();
    }

    // `logout` removes the keyring's item and the file.
    let (shown, ok) = in_terminal_with(config_home.path(), &keyring.env, "logout", "");
    assert!(ok && shown.contains("Removed the key from your keyring."), "{shown}");
    assert_eq!(keyring.lookup(), None);
    assert!(!key_file(config_home.path()).exists());

    // A keyring that does not answer: said, and nothing is stored.
    let provider = FakeProvider::start(vec![models_reply()]);
    let nowhere = config_home.path().join("no-bus");
    let env =
        vec![("DBUS_SESSION_BUS_ADDRESS".to_owned(), format!("unix:path={}", nowhere.display()))];
    let answers = format!("3\n{}\nm\nsk-fine\n", provider.base_url);
    let (shown, ok) = in_terminal_with(config_home.path(), &env, "login --keyring", &answers);
    assert!(!ok, "{shown}");
    assert!(shown.contains("the keyring did not take the key"), "{shown}");
    assert!(shown.contains("nothing was stored"), "{shown}");
    assert!(!key_file(config_home.path()).exists());
}
