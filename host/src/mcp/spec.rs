//! Which MCP servers a session has: from its client (`session/new`, `session/load`,
//! `session/resume`, converted by `acp::from_acp`) and from the config file, and the settings
//! they run under.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) use crate::config::McpConfig;

/// How long things may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Starting, the handshake and the first tool list, together.
    pub(crate) connect: Duration,
    /// One tool call.
    pub(crate) call: Duration,
    /// How long a turn's first model request waits for servers still connecting.
    pub(crate) turn_wait: Duration,
}

impl McpConfig {
    /// The limits, checked: zero or more than a day is an error at start-up.
    pub(crate) fn limits(&self) -> anyhow::Result<Limits> {
        let pick = |value: Option<u64>, default: u64, name: &str| -> anyhow::Result<Duration> {
            let secs = value.unwrap_or(default);
            anyhow::ensure!(
                (1..=86_400).contains(&secs),
                "config: mcp.{name} must be between 1 and 86400 seconds, got {secs}"
            );
            Ok(Duration::from_secs(secs))
        };
        Ok(Limits {
            connect: pick(self.connect_timeout_secs, 30, "connect_timeout_secs")?,
            call: pick(self.call_timeout_secs, 300, "call_timeout_secs")?,
            turn_wait: pick(self.turn_wait_secs, 10, "turn_wait_secs")?,
        })
    }

    /// The configured servers, checked: each has a command or a URL, not both.
    pub(crate) fn servers(&self) -> anyhow::Result<Vec<ServerSpec>> {
        self.servers
            .iter()
            .map(|(name, server)| {
                let pairs = |map: &BTreeMap<String, String>| {
                    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
                };
                let transport = match (&server.command, &server.url) {
                    (Some(command), None) => Transport::Stdio {
                        command: command.clone(),
                        args: server.args.clone(),
                        env: pairs(&server.env),
                    },
                    (None, Some(url)) => {
                        Transport::Http { url: url.clone(), headers: pairs(&server.headers) }
                    }
                    _ => anyhow::bail!(
                        "config: mcp.servers.{name} needs either `command` or `url` (not both)"
                    ),
                };
                Ok(ServerSpec { name: name.clone(), transport })
            })
            .collect()
    }
}

/// One server to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerSpec {
    /// The name the user gave it (tools are offered as `mcp__<name>__<tool>`).
    pub(crate) name: String,
    pub(crate) transport: Transport,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Transport {
    /// A program the executor starts; MCP over its stdin and stdout.
    Stdio { command: PathBuf, args: Vec<String>, env: Vec<(String, String)> },
    /// Streamable HTTP.
    Http { url: String, headers: Vec<(String, String)> },
    /// A transport hotsh does not speak (the reason, for the user).
    Unsupported(String),
}

/// The servers of a session: the configured ones, then the client's; a client's server
/// replaces a configured one of the same name.
pub(crate) fn merge(configured: &[ServerSpec], client: Vec<ServerSpec>) -> Vec<ServerSpec> {
    let mut servers: Vec<ServerSpec> =
        configured.iter().filter(|c| !client.iter().any(|s| s.name == c.name)).cloned().collect();
    servers.extend(client);
    servers
}
