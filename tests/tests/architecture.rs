//! The layering the compiler keeps: `hotsh-core` (the domain and the loop) depends on no ACP
//! crate, no plugin interface, no MCP client, no libc and no process spawning, so "only the
//! host's `acp/` knows ACP" and "only the host's executor spawns" are dependency edges.

#![allow(clippy::disallowed_methods, reason = "runs cargo tree")]
#![allow(clippy::unwrap_used, reason = "tests")]

#[test]
fn hotsh_core_depends_on_no_protocol_plugin_mcp_libc_or_process_crate() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            "hotsh-core",
            "-e",
            "normal,features",
            "--prefix",
            "none",
        ])
        .current_dir(hotsh_tests::workspace())
        .output()
        .expect("cargo tree runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let tree = String::from_utf8(output.stdout).expect("UTF-8");
    assert!(tree.lines().any(|l| l.starts_with("hotsh-core ")), "not the core's tree:\n{tree}");
    for crate_name in
        ["agent-client-protocol", "abi_stable", "hotsh-abi", "rmcp", "libc", "libloading"]
    {
        let found: Vec<&str> =
            tree.lines().filter(|l| l.starts_with(&format!("{crate_name} "))).collect();
        assert!(found.is_empty(), "hotsh-core depends on {crate_name}: {found:?}");
    }
    let process: Vec<&str> =
        tree.lines().filter(|l| l.starts_with("tokio feature \"process\"")).collect();
    assert!(process.is_empty(), "hotsh-core enables tokio's process feature: {process:?}");
}

/// The core's modules import one another without a circle (a module's shared vocabulary
/// lives where the modules that use it can all import it): read from each file's `crate::`
/// paths, at the level of the core's top modules.
#[test]
fn hotsh_cores_modules_import_one_another_without_a_circle() {
    let src = hotsh_tests::workspace().join("core/src");
    let mut edges: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        std::collections::BTreeMap::new();
    let mut files = vec![src.clone()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let relative = path.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        let module = relative.split(['/', '.']).next().unwrap().to_owned();
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let uses = edges.entry(module.clone()).or_default();
        for (at, _) in text.match_indices("crate::") {
            let name: String = text[at + 7..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() && name != module {
                uses.insert(name);
            }
        }
    }
    // Depth-first: a module met again on the path being walked closes a circle.
    fn walk(
        module: &str,
        edges: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut circle = path[at..].to_vec();
            circle.push(module.to_owned());
            return Some(circle);
        }
        if !done.insert(module.to_owned()) {
            return None;
        }
        path.push(module.to_owned());
        for next in edges.get(module).into_iter().flatten() {
            if let Some(circle) = walk(next, edges, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = std::collections::BTreeSet::new();
    assert!(edges.contains_key("session") && edges.contains_key("tools"), "{edges:?}");
    for module in edges.keys() {
        let circle = walk(module, &edges, &mut Vec::new(), &mut done);
        assert!(
            circle.is_none(),
            "a circle among the core's modules: {}",
            circle.unwrap().join(" -> ")
        );
    }
}
