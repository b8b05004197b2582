//! The tests' MCP server over stdio (see `hotsh_tests::mcp_fixture`).

fn main() {
    hotsh_tests::mcp_fixture::stdio_main();
}
