//! Reading an arc file: its header and entries, each with its line number; every error names
//! the arc and the line.

use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The first line of an arc.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Header {
    pub(crate) arc: u64,
    /// Keys whose values are not compared.
    #[serde(default)]
    pub(crate) any: Vec<String>,
    /// A directory next to the arc, copied fresh as the first session's working directory.
    #[serde(default)]
    pub(crate) fixture: Option<String>,
    /// The longest the whole replay may take, in seconds.
    #[serde(default)]
    pub(crate) timeout_s: Option<u64>,
    /// The plugin directories of the recording agent (their paths read as `<plugins>`).
    #[serde(default)]
    pub(crate) plugin_dirs: Vec<String>,
    /// What the recording agent told of its model (window, images, name): the replay's
    /// scripted model tells the same.
    #[serde(default, rename = "recorded_model")]
    pub(crate) model: Option<crate::model::setup::ModelFacts>,
}

/// One line after the header.
#[derive(Debug, Clone)]
pub(crate) enum Entry {
    Client(Value),
    Agent(Value),
    Model(ModelExchange),
    Step(Step),
    /// What an MCP server answered (its tools, a call's outcome): replayed without the
    /// server.
    Mcp(Value),
    /// The hooks in force at one turn of a session (replayed as the hooks of that turn).
    Hooks(Value),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ModelExchange {
    pub(crate) session: String,
    #[serde(default)]
    pub(crate) request: Option<Value>,
    pub(crate) response: Value,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum Step {
    /// A new build of this plugin file lands in the plugin directory.
    ReloadPlugin(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    #[serde(default)]
    client: Option<Value>,
    #[serde(default)]
    agent: Option<Value>,
    #[serde(default)]
    model: Option<ModelExchange>,
    #[serde(default)]
    step: Option<Step>,
    #[serde(default)]
    mcp: Option<Value>,
    #[serde(default)]
    hooks: Option<Value>,
}

/// A parsed arc.
#[derive(Debug)]
pub(crate) struct ArcFile {
    pub(crate) path: PathBuf,
    pub(crate) header: Header,
    /// The header line as written (kept by `--bless`).
    pub(crate) header_line: String,
    /// Each entry with its line number (1-based) and its text as written.
    pub(crate) entries: Vec<(usize, Entry, String)>,
}

/// The largest arc read, in bytes, and in entries: a replay holds its arc in memory (and the
/// agent's side of it), so what one may cost is bounded. Recorded sessions are far smaller
/// (a long session in Zed is thousands of lines).
pub(crate) const MAX_BYTES: u64 = 256 << 20;
pub(crate) const MAX_ENTRIES: usize = 200_000;

impl ArcFile {
    pub(crate) fn read(path: &Path) -> anyhow::Result<Self> {
        use std::io::Read as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let cannot = |error: std::io::Error| {
            anyhow::anyhow!("{}: cannot read the arc: {error}", path.display())
        };
        // A regular file only: a FIFO or a device named like an arc is not waited on.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(cannot)?;
        let meta = file.metadata().map_err(cannot)?;
        if !meta.is_file() {
            anyhow::bail!("{}: cannot read the arc: it is not a regular file", path.display());
        }
        if meta.len() > MAX_BYTES {
            anyhow::bail!(
                "{}: the arc is {} MiB; hotsh replays arcs of at most {} MiB",
                path.display(),
                meta.len() >> 20,
                MAX_BYTES >> 20
            );
        }
        let mut text = String::new();
        file.take(MAX_BYTES + 1).read_to_string(&mut text).map_err(cannot)?;
        Self::parse(path, &text)
    }

    pub(crate) fn parse(path: &Path, text: &str) -> anyhow::Result<Self> {
        let at = |line: usize, what: String| anyhow::anyhow!("{}:{line}: {what}", path.display());
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
        let (_, header_line) = lines
            .by_ref()
            .find(|(_, l)| !l.trim().is_empty())
            .ok_or_else(|| at(1, "the arc is empty (no header line)".into()))?;
        let header: Header = serde_json::from_str(header_line)
            .map_err(|e| at(1, format!("not an arc header ({{\"arc\":1,…}}): {e}")))?;
        if header.arc > super::FORMAT || header.arc == 0 {
            return Err(at(
                1,
                format!(
                    "arc format {} is not one this hotsh reads (it reads format {} and older); \
                     replay it with a newer hotsh",
                    header.arc,
                    super::FORMAT
                ),
            ));
        }
        let mut entries = Vec::new();
        for (number, line) in lines {
            if line.trim().is_empty() {
                continue;
            }
            if entries.len() == MAX_ENTRIES {
                return Err(at(
                    number,
                    format!(
                        "the arc holds more than {MAX_ENTRIES} entries, the most hotsh replays"
                    ),
                ));
            }
            let parsed: Line =
                serde_json::from_str(line).map_err(|e| at(number, format!("not valid: {e}")))?;
            let entry = match parsed {
                Line {
                    client: Some(m),
                    agent: None,
                    model: None,
                    step: None,
                    mcp: None,
                    hooks: None,
                } => Entry::Client(m),
                Line {
                    client: None,
                    agent: Some(m),
                    model: None,
                    step: None,
                    mcp: None,
                    hooks: None,
                } => Entry::Agent(m),
                Line {
                    client: None,
                    agent: None,
                    model: None,
                    step: None,
                    mcp: Some(m),
                    hooks: None,
                } => Entry::Mcp(m),
                Line {
                    client: None,
                    agent: None,
                    model: Some(m),
                    step: None,
                    mcp: None,
                    hooks: None,
                } => {
                    crate::model::script::check_response(&m.response)
                        .map_err(|e| at(number, format!("the model response is not valid: {e}")))?;
                    Entry::Model(m)
                }
                Line {
                    client: None,
                    agent: None,
                    model: None,
                    step: Some(s),
                    mcp: None,
                    hooks: None,
                } => Entry::Step(s),
                Line {
                    client: None,
                    agent: None,
                    model: None,
                    step: None,
                    mcp: None,
                    hooks: Some(h),
                } => Entry::Hooks(h),
                _ => {
                    return Err(at(
                        number,
                        "a line must have exactly one of `client`, `agent`, `model`, `step`, `mcp` and `hooks`"
                            .into(),
                    ));
                }
            };
            entries.push((number, entry, line.to_owned()));
        }
        Ok(Self { path: path.to_owned(), header, header_line: header_line.to_owned(), entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        ArcFile::parse(Path::new("x.arc"), text).expect_err("an error").to_string()
    }

    #[test]
    fn errors_name_the_arc_and_the_line() {
        assert!(error("").starts_with("x.arc:1: the arc is empty"));
        assert!(error("{\"arc\":2}").contains("x.arc:1: arc format 2 is not one this hotsh reads"));
        assert!(error("{\"arc\":1}\n{\"client\":{}}\n{oops").starts_with("x.arc:3: not valid"));
        assert!(error("{\"arc\":1}\n{\"client\":{},\"agent\":{}}").starts_with("x.arc:2: a line"));
        let bad_model = "{\"arc\":1}\n{\"model\":{\"session\":\"s\",\"response\":{\"txt\":\"a\"}}}";
        assert!(error(bad_model).starts_with("x.arc:2: the model response is not valid"));
    }

    #[test]
    fn entries_keep_their_lines() {
        let arc = ArcFile::parse(
            Path::new("x.arc"),
            "{\"arc\":1,\"any\":[\"k\"]}\n\n{\"client\":{\"id\":0}}\n{\"step\":{\"reload_plugin\":\"libp.so\"}}\n",
        )
        .expect("a valid arc");
        assert_eq!(arc.header.any, ["k"]);
        assert_eq!(arc.entries.iter().map(|(n, _, _)| *n).collect::<Vec<_>>(), [3, 4]);
        assert!(matches!(&arc.entries[1].1, Entry::Step(Step::ReloadPlugin(f)) if f == "libp.so"));
    }
}
