//! Arcs: a session recorded once, replayed offline forever.
//!
//! An arc is a [JSON Lines](https://jsonlines.org) file (`.arc`), one message per line, keys
//! in sorted order (stable across builds) so that a change shows as a small diff.
//!
//! # Lines
//!
//! The first line is the header:
//!
//! ```json
//! {"arc":1,"any":["duration_ms"],"fixture":"my-fixture","timeout_s":60,"plugin_dirs":["/home/me/tool/target/debug"]}
//! ```
//!
//! - `arc`: the format version ([`FORMAT`]).
//! - `fixture` (optional): a directory next to the arc, copied fresh for each replay as the
//!   working directory of the arc's first session (others get an empty directory); inside
//!   the arc's folder, holding only files, folders and links.
//! - `any` (optional): keys whose values are not compared (output that is legitimately not
//!   reproducible). Always ignored besides: `duration_ms`, `configOptions`, `agentInfo`,
//!   `backend`, `enforcement` (they depend on the machine's models, its sandbox and hotsh's
//!   version) and the token counts `used`, `tokensBefore`, `tokensAfter` (estimates depend on
//!   the paths in the prompt).
//! - `timeout_s` (optional, default 60): the longest the whole replay may take.
//! - `plugin_dirs` (written by the recorder): where the recording agent's plugins were; those
//!   paths read as `<plugins>`, as the replay's plugin directory does, and a replay that lost
//!   a tool names them.
//! - `recorded_model` (written by the recorder): what the agent told of its models: the
//!   default's `name` and `window` (the context window its context use shows), `images`
//!   (whether one takes images, `promptCapabilities.image`), and `offered`: every model a
//!   session could choose, the default first, with its `name`, `description`, `window`,
//!   `compact_at`, `max_requests`, `keep_tool_output`, `efforts` and `default_effort`. The replay offers the same
//!   models, each played by the one scripted model, so a session that changed its model or
//!   effort, or compacted at its model's threshold, replays as it went.
//!
//! Then, in the order they happened, one of:
//!
//! - `{"client": MESSAGE}`: a JSON-RPC message the client sent (played on replay);
//! - `{"agent": MESSAGE}`: a JSON-RPC message the agent sent the client (expected on replay);
//! - `{"model": {"session": ID, "request": REQUEST, "response": RESPONSE}}`: one model
//!   exchange: what the agent sent the model (`request`: system prompt, messages, tools;
//!   expected on replay, when present) and what the model answered (`response`, played on
//!   replay by the scripted model: `reasoning` and `text` as lists of streamed chunks,
//!   `tool_calls`, `usage`, `finish_reason`, `error`, or `cancelled`: the turn was cancelled
//!   while the model answered, so on replay the model streams what it had and then waits);
//! - `{"step": {"reload_plugin": FILE}}`: an action of the replay itself: a new build of the
//!   plugin file FILE (of the replay's plugin directory) lands, as after `cargo build`;
//! - `{"mcp": {"server": NAME, "tools": [TOOL…]}}`: the tools an MCP server offered when it
//!   connected (each `name`, `title`, `description`, `input_schema`, `read_only`), and
//!   `{"mcp": {"server": NAME, "call": TOOL, "outcome": {"text", "is_error", "raw"}}}`: what a
//!   call of its tool gave. On replay the agent gets them instead of the server (`--mcp-replay`):
//!   a server's first tool list, and its calls' outcomes in order; the server is not started.
//! - `{"hooks": {"session": N, "hooks": [HOOK…], "allowed": [FINGERPRINT…]}}`: the hooks in
//!   force at a turn of the Nth session the agent opened (each `event`, `matcher`, `command`,
//!   `timeout_s`, `source`) and the project's hooks the user had allowed then (`event`,
//!   `matcher`, `command`); written at each turn of a session that has hooks. On replay
//!   (`--hooks-replay`) each turn gets the recorded hooks instead of reading settings files,
//!   and they run for real, as commands do.
//!
//! # Comparing
//!
//! Before comparing, both sides are normalised: the working directories become `<cwd>`,
//! session ids `<session-N>` (in order of appearance), output directories `<output>`, the
//! `any` values `<any>`, the date and kernel of the system prompt `<date>` and `<kernel>`, a
//! compaction card's token estimates `<tokens>`;
//! consecutive output of one terminal is joined, and of a run of content updates of one
//! card only the last is kept (how output is cut into updates depends on timing). Messages
//! are compared card by card (the updates of one tool call in order) and, for everything
//! else, in order: a background task's card may close before or after the next message.

mod export;
mod file;
mod normalize;
mod record;
mod replay;

pub(crate) use export::export;
pub(crate) use record::{Ending, Recorder};
pub(crate) use replay::{ReplayOptions, run as replay};

/// The arc format version written, and the newest read.
pub(crate) const FORMAT: u64 = 1;

/// Keys never compared: they depend on the machine (its models, its sandbox backend) and on
/// hotsh's version.
pub(crate) const ALWAYS_ANY: &[&str] = &[
    "duration_ms",
    "configOptions",
    "agentInfo",
    "backend",
    "enforcement",
    "used",
    "tokensBefore",
    "tokensAfter",
];

/// The arc files named: files as given, directories by their `*.arc` files (sorted).
pub(crate) fn expand(paths: &[std::path::PathBuf]) -> anyhow::Result<Vec<std::path::PathBuf>> {
    use anyhow::Context as _;
    let mut arcs = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<_> = std::fs::read_dir(path)
                .with_context(|| format!("cannot read {}", path.display()))?
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|p| p.extension().is_some_and(|e| e == "arc") && p.is_file())
                .collect();
            anyhow::ensure!(!found.is_empty(), "{} has no .arc files", path.display());
            found.sort();
            arcs.extend(found);
        } else {
            arcs.push(path.clone());
        }
    }
    Ok(arcs)
}
