//! The release (`cargo xtask dist`): the archive unpacks anywhere and serves a whole ACP turn
//! with the plugins beside it; `agent.json` and `icon.svg` are what the ACP Registry checks.
//! The archive is made from the debug build the suite has (`--debug`): the same task, without
//! a release build in the suite.
#![allow(clippy::unwrap_used, reason = "tests")]
#![allow(clippy::disallowed_methods, reason = "runs xtask, tar and sha256sum")]

use hotsh_tests::{Agent, AgentOptions, bash_call, say};
use serde_json::Value;
use std::process::Command;

#[test]
fn the_release_archive_serves_a_turn_and_its_registry_entry_passes_the_checks() {
    hotsh_tests::build_dir();
    let out = tempfile::tempdir().unwrap();
    let made = Command::new(hotsh_tests::xtask_binary())
        .args(["dist", "--debug", "--no-build", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&made.stdout).into_owned();
    assert!(made.status.success(), "{said}{}", String::from_utf8_lossy(&made.stderr));
    assert!(said.contains("needs glibc 2."), "{said}");

    // agent.json, as the registry's schema and CI check it.
    let entry: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("agent.json")).unwrap())
            .unwrap();
    let id = entry["id"].as_str().unwrap();
    assert!(
        id.starts_with(|c: char| c.is_ascii_lowercase())
            && id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
        "{id}"
    );
    let version = entry["version"].as_str().unwrap();
    let parts: Vec<&str> = version.split('.').collect();
    assert!(parts.len() == 3 && parts.iter().all(|p| p.parse::<u32>().is_ok()), "{version}");
    for field in ["name", "description", "repository", "license", "license_url"] {
        assert!(entry[field].as_str().is_some_and(|v| !v.is_empty()), "{field}: {entry}");
    }
    let binary = &entry["distribution"]["binary"]["linux-x86_64"];
    let archive_name = format!("hotsh-{version}-x86_64-unknown-linux-gnu.tar.gz");
    let url = binary["archive"].as_str().unwrap();
    assert!(
        url.starts_with("https://")
            && url.ends_with(&archive_name)
            && url.contains(&format!("v{version}/")),
        "{url}"
    );
    assert_eq!(binary["cmd"], "./hotsh");
    assert_eq!(binary["args"], serde_json::json!(["acp"]));
    let archive = out.path().join(&archive_name);
    let summed = Command::new("sha256sum").arg(&archive).output().unwrap();
    let sha256 =
        String::from_utf8_lossy(&summed.stdout).split_whitespace().next().unwrap().to_owned();
    assert_eq!(binary["sha256"], sha256.as_str());
    let file = std::fs::read_to_string(out.path().join(format!("{archive_name}.sha256"))).unwrap();
    assert_eq!(file, format!("{sha256}  {archive_name}\n"));

    // icon.svg: 16×16, one colour, the theme's.
    let icon = std::fs::read_to_string(out.path().join("icon.svg")).unwrap();
    assert!(
        icon.starts_with("<svg")
            && icon.contains(r#"width="16""#)
            && icon.contains(r#"height="16""#)
    );
    assert!(icon.contains(r#"viewBox="0 0 16 16""#) && icon.contains("currentColor"), "{icon}");
    assert!(!icon.contains('#') && !icon.contains("rgb"), "only currentColor: {icon}");

    // Unpacked anywhere: hotsh, its shim and the shipped plugins at the root, no examples.
    let unpacked = tempfile::tempdir().unwrap();
    let untarred = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(unpacked.path())
        .status()
        .unwrap();
    assert!(untarred.success());
    let mut names: Vec<String> = std::fs::read_dir(unpacked.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["README.md", "hotsh", "hotsh-shim", "libhotsh_tool_bash.so", "libhotsh_tool_fs.so"]
    );

    // A whole turn from there, with the plugins beside it (no plugin directory given).
    let mut options = AgentOptions::script(vec![bash_call("echo from-the-archive"), say("done")]);
    options.executable = Some(unpacked.path().join("hotsh"));
    options.plugins = Vec::new();
    options.default_plugins = true;
    let mut agent = Agent::start(options);
    agent.initialize(true);
    let session = agent.new_session();
    let response = agent.prompt(&session, "run it");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent.last_tool_result(), ("from-the-archive".to_owned(), false));
    assert!(agent.finish().success());

    // `./hotsh install` from there installs it: the executable, its shim, the plugins.
    let home = tempfile::tempdir().unwrap();
    let (bin, data) = (home.path().join("bin"), home.path().join("data"));
    let installed = Command::new(unpacked.path().join("hotsh"))
        .arg("install")
        .arg("--bin-dir")
        .arg(&bin)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&installed.stdout);
    assert!(installed.status.success(), "{said}{}", String::from_utf8_lossy(&installed.stderr));
    for file in
        [bin.join("hotsh"), bin.join("hotsh-shim"), data.join("plugins/libhotsh_tool_bash.so")]
    {
        assert!(file.exists(), "{} is not installed: {said}", file.display());
    }
}
