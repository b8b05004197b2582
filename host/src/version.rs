//! What this build is: its version and commit.

/// `0.1.0 (commit 1a2b3c4d5e6f)`.
pub(crate) const VERSION: &str =
    concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("HOTSH_COMMIT"), ")");

/// `hotsh 0.1.0 (commit 1a2b3c4d5e6f)`, as session logs record their agent.
pub(crate) fn version_line() -> String {
    format!("hotsh {VERSION}")
}
