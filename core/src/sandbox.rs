//! The sandbox modes a session chooses from. How a mode is enforced (the backends, the
//! policy) is the host's.

use serde::{Deserialize, Serialize};

/// The modes, narrowest first: the order is the contract (widening compares positions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    ReadOnly,
    WorkspaceWrite,
    DangerFullAccess,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::DangerFullAccess];

    /// The mode's name (as the plugin interface and the configuration spell it).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::WorkspaceWrite => "workspace-write",
            Mode::DangerFullAccess => "danger-full-access",
        }
    }

    pub fn parse(text: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|mode| mode.as_str() == text)
    }

    /// What the mode allows, for the user choosing it.
    pub fn describe(self) -> &'static str {
        match self {
            Mode::ReadOnly => "Commands read anything but write nothing and have no network",
            Mode::WorkspaceWrite => {
                "Commands write only in the session's folder and the temp dir (.git stays read-only)"
            }
            Mode::DangerFullAccess => "Commands run unconfined, with your full access",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
