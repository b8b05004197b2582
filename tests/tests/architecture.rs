//! The layering the compiler keeps: `hotsh-core` (the domain and the loop) depends on no ACP
//! crate, no plugin interface, no MCP client, no libc and no process spawning, so "only the
//! host's `acp/` knows ACP" and "only the host's executor spawns" are dependency edges.

#![allow(clippy::disallowed_methods, reason = "runs cargo tree")]

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
