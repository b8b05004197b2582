//! The configuration file (TOML). Every setting is optional; the file itself is optional
//! unless named with `--config`.
//!
//! ```toml
//! [env]
//! keep = ["SSH_AUTH_SOCK"]     # never removed from commands' environment
//! drop = ["CORP_PROXY"]        # always removed
//!
//! [executor]
//! max_background_tasks = 16    # running at once, per session
//! spill_cap_mib = 256          # size limit of each output file
//!
//! model = "local"              # the model to use (see model/setup.rs for the precedence)
//! record = "/tmp/session.arc"  # record an arc of everything (as --record)
//!
//! [sandbox]
//! mode = "workspace-write"     # sessions' mode until they choose one (read-only,
//!                              # workspace-write, danger-full-access)
//! backend = "auto"             # auto (bwrap if installed, else landlock), bwrap, landlock, none
//! network = false              # whether workspace-write commands reach the network
//!
//! [mcp]
//! connect_timeout_secs = 30    # how long a server may take to start and list its tools
//! call_timeout_secs = 300      # how long one tool call may take
//! turn_wait_secs = 10          # how long a turn waits for servers still connecting
//! [mcp.servers.github]         # a server every session gets (stdio: command, args, env)
//! command = "github-mcp-server"
//! args = ["stdio"]
//! env = { GITHUB_TOOLSETS = "repos" }
//! [mcp.servers.docs]           # (streamable HTTP: url, headers)
//! url = "http://127.0.0.1:8080/mcp"
//! headers = { Authorization = "Bearer …" }
//!
//! [subagents]
//! max_parallel = 4             # subagents running at once (more wait for a slot)
//! max_depth = 1                # 0: no subagents; 2: a subagent may start its own
//! [agents.reviewer]            # an agent definition, as ~/.claude/agents/reviewer.md
//! description = "Reviews a change. Use after editing."
//! prompt = "You review code…"  # its system prompt
//! tools = ["Read", "Bash"]     # Claude Code's tool names (default: all of the parent's)
//! model = "fast"               # a model profile's name (default: the parent's)
//!
//! [session]
//! compact_at = 0.85            # compact the conversation before a request past this share
//!                              # of the model's context window
//! max_turn_requests = 200      # model requests one turn may make
//! max_answer_tokens = 131072   # the longest answer a model may stream (default: its window)
//! prune_tool_output = true     # requests carry older tool output cleared (default true)
//! keep_tool_output = 40000     # tokens of the newest tool output they carry whole
//!
//! [models.local]               # a named model profile (OpenAI-compatible)
//! base_url = "http://127.0.0.1:11434/v1"
//! model = "qwen2.5-coder"
//! api_key_env = "LOCAL_KEY"    # the variable holding its key, if any
//! context_window = 32768       # tokens (default: hotsh's table of known models, else 32768)
//! compact_at = 0.8             # this model's own threshold
//! price = { input = 0.27, output = 1.10, cached_input = 0.07, currency = "USD" }
//!                              # per million tokens: the session's cost in Zed
//! images = false               # whether it takes images in prompts
//! [models.local.extra]         # added to every request body
//! temperature = 0.2
//! [models.local.effort]        # a reasoning-effort option (Zed's thought level)
//! levels = ["low", "medium", "high"]   # each sent as `reasoning_effort`, or
//!                              # { name = "on", fields = { thinking = { type = "enabled" } } }
//! default = "medium"
//! ```

use anyhow::Context as _;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ConfigFile {
    pub(crate) env: EnvSection,
    pub(crate) executor: ExecutorSection,
    /// The model to use: `none`, `script:PATH`, `openai:NAME` or a profile's name.
    pub(crate) model: Option<String>,
    /// Named model profiles.
    pub(crate) models: std::collections::BTreeMap<String, ModelProfile>,
    /// Record every session of the agent into this arc (as `--record`).
    pub(crate) record: Option<PathBuf>,
    pub(crate) sandbox: crate::sandbox::SandboxConfig,
    pub(crate) mcp: McpConfig,
    pub(crate) session: SessionSection,
    /// Command hooks, in the shape of Claude Code's `hooks` (`[[hooks.PreToolUse]]` with a
    /// `matcher` and `hooks = [{ type = "command", command = "…" }]`).
    pub(crate) hooks: serde_json::Value,
    /// Agent definitions (`[agents.NAME]` with `description`, `prompt`, `tools`, `model`),
    /// beside `~/.claude/agents/*.md`.
    pub(crate) agents: BTreeMap<String, crate::agents::AgentConfig>,
    pub(crate) subagents: SubagentsSection,
}

/// How subagents run (the `[subagents]` section).
#[derive(Debug, Default, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct SubagentsSection {
    /// Subagents running at once in the whole agent (default 4); more wait for a slot.
    pub(crate) max_parallel: Option<usize>,
    /// How deep subagents nest: 1 (the default) lets a session start subagents that cannot
    /// start their own; 0 offers no subagent tool.
    pub(crate) max_depth: Option<u32>,
}

/// How sessions use their model's context (the `[session]` section).
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct SessionSection {
    /// Compact before a request past this share of the window (0 < x ≤ 1; default 0.85).
    pub(crate) compact_at: Option<f64>,
    /// Model requests one turn may make (default 200).
    pub(crate) max_turn_requests: Option<u32>,
    /// The longest answer a model may stream, in tokens (default: its context window).
    pub(crate) max_answer_tokens: Option<u64>,
    /// Whether requests carry older tool output cleared (default true).
    pub(crate) prune_tool_output: Option<bool>,
    /// Tokens of the newest tool output requests carry whole (default 40,000).
    pub(crate) keep_tool_output: Option<u64>,
}

/// A named OpenAI-compatible model.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ModelProfile {
    pub(crate) base_url: Option<String>,
    pub(crate) model: String,
    /// The environment variable holding its key (keys are never written in the file).
    pub(crate) api_key_env: Option<String>,
    pub(crate) context_window: Option<u64>,
    /// Compact before a request past this share of the window (overrides `[session]`).
    pub(crate) compact_at: Option<f64>,
    /// The longest answer it may stream, in tokens (overrides `[session]`).
    pub(crate) max_answer_tokens: Option<u64>,
    /// Whether the model takes images in prompts.
    pub(crate) images: bool,
    /// Fields added to every request body (`temperature`, `max_tokens`, …).
    pub(crate) extra: toml::Table,
    /// The reasoning-effort levels it takes (Zed's thought level option).
    pub(crate) effort: Option<EffortConfig>,
    /// What its tokens cost per million (`{ input, output, cached_input, currency }`).
    pub(crate) price: Option<hotsh_core::context::Price>,
}

/// A profile's reasoning effort: its levels, in the order offered, and the default.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct EffortConfig {
    pub(crate) levels: Vec<EffortLevel>,
    /// The level sessions start with (default: the first).
    pub(crate) default: Option<String>,
}

/// A level: a name, sent as `reasoning_effort`; or a name with the body fields it sets
/// (`{ name = "on", fields = { thinking = { type = "enabled" } } }`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub(crate) enum EffortLevel {
    Name(String),
    Fields { name: String, fields: toml::Table },
}

#[derive(Debug, Default, Clone, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct EnvSection {
    pub(crate) keep: Vec<String>,
    pub(crate) drop: Vec<String>,
}

#[derive(Debug, Default, Clone, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ExecutorSection {
    pub(crate) max_background_tasks: Option<usize>,
    pub(crate) spill_cap_mib: Option<u64>,
}

/// `~/.claude`, where Claude Code keeps the user's settings (their hooks among them).
pub(crate) fn claude_home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(|home| PathBuf::from(home).join(".claude"))
}

/// Where the file is looked for when `--config` is not given.
pub(crate) fn default_path() -> Option<PathBuf> {
    Some(config_dir()?.join("config.toml"))
}

/// hotsh's configuration directory: `$XDG_CONFIG_HOME/hotsh`, else `~/.config/hotsh`.
pub(crate) fn config_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(base.join("hotsh"))
}

/// Every directory a hotsh of this user reads its configuration from, whichever environment
/// it has: `$XDG_CONFIG_HOME/hotsh` and `~/.config/hotsh`.
pub(crate) fn every_config_dir() -> Vec<PathBuf> {
    let from_env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let mut dirs: Vec<PathBuf> =
        [from_env("XDG_CONFIG_HOME"), from_env("HOME").map(|home| home.join(".config"))]
            .into_iter()
            .flatten()
            .map(|base| base.join("hotsh"))
            .collect();
    dirs.dedup();
    dirs
}

/// What of the configuration a confined command must not change: the file given with
/// `--config`, and whatever it is, every directory a later hotsh started without it reads its
/// default file from (`$XDG_CONFIG_HOME/hotsh` and `~/.config/hotsh`), so that none can be
/// made or changed there either.
pub(crate) fn trusted(explicit: Option<&Path>) -> Vec<crate::sandbox::Trusted> {
    use crate::sandbox::{Trusted, TrustedKind};
    let explicit = explicit.map(|file| Trusted {
        path: std::path::absolute(file).unwrap_or_else(|_| file.to_owned()),
        kind: TrustedKind::File,
    });
    let defaults =
        every_config_dir().into_iter().map(|path| Trusted { path, kind: TrustedKind::Directory });
    // The user's Claude Code settings: the hooks in it run as the user, unasked.
    let claude = claude_home().map(|path| Trusted { path, kind: TrustedKind::Directory });
    explicit.into_iter().chain(defaults).chain(claude).collect()
}

impl ConfigFile {
    /// Reads `explicit` (which must exist) or the default file (which may be absent).
    pub(crate) fn load(explicit: Option<&Path>) -> anyhow::Result<Self> {
        let (path, required) = match explicit {
            Some(path) => (path.to_owned(), true),
            None => match default_path() {
                Some(path) => (path, false),
                None => return Ok(Self::default()),
            },
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if !required && error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self::default());
            }
            Err(error) => {
                return Err(error)
                    .with_context(|| format!("cannot read config {}", path.display()));
            }
        };
        toml::from_str(&text).with_context(|| format!("config {} is not valid", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_setting_and_rejects_unknown_ones() {
        let config: ConfigFile = toml::from_str(
            "[env]\nkeep = [\"A\"]\ndrop = [\"B\"]\n[executor]\nmax_background_tasks = 2\nspill_cap_mib = 8\n",
        )
        .expect("valid config");
        assert_eq!(config.env.keep, ["A"]);
        assert_eq!(config.executor.max_background_tasks, Some(2));
        assert!(toml::from_str::<ConfigFile>("[env]\nkepe = []\n").is_err());
    }
}

/// The `[mcp]` section of the config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct McpConfig {
    pub(crate) connect_timeout_secs: Option<u64>,
    pub(crate) call_timeout_secs: Option<u64>,
    pub(crate) turn_wait_secs: Option<u64>,
    /// Servers every session gets, by name.
    pub(crate) servers: BTreeMap<String, ConfiguredServer>,
}

/// A server in the config file: `command` (with `args`, `env`) or `url` (with `headers`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ConfiguredServer {
    pub(crate) command: Option<PathBuf>,
    pub(crate) args: Vec<String>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) url: Option<String>,
    pub(crate) headers: BTreeMap<String, String>,
}
