//! Agent definitions, in the format Claude Code users already have: a Markdown file whose YAML
//! front matter names the agent (`name`, `description`, optionally `tools` and `model`) and
//! whose body is its system prompt. They come from `~/.claude/agents/*.md` (the user's), from
//! hotsh's config (`[agents.NAME]`, the user's too) and from `<project>/.claude/agents/*.md`,
//! which anything that can write the project can write: a project's agents are offered only
//! once the user allowed them, as its hooks are (`hooks.rs`).

use hotsh_core::permissions::settings::{Fingerprint, Source};
use serde::Deserialize;
use std::path::Path;

/// The longest agent file read (a system prompt, not a book).
const MAX_FILE: u64 = 256 << 10;
/// The most agent files read from one folder.
const MAX_FILES: usize = 200;

/// One agent a subagent can run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AgentDef {
    pub(crate) name: String,
    /// When to use it, for the model (the `task` tool's description lists it).
    pub(crate) description: String,
    /// Its system prompt (the file's body).
    pub(crate) prompt: String,
    /// The tools it is offered, in hotsh's names; `None`: all of its parent's.
    pub(crate) tools: Option<Vec<String>>,
    /// The model it asks (a name this hotsh offers), `None` or `inherit`: its parent's.
    pub(crate) model: Option<String>,
    pub(crate) source: Source,
    /// What the user consents to for a project's agent: its name and a digest of its file.
    pub(crate) fingerprint: Fingerprint,
}

impl AgentDef {
    /// Where it comes from, in words.
    pub(crate) fn origin(&self) -> String {
        match self.source {
            Source::Project | Source::ProjectLocal => format!(".claude/agents/{}.md", self.name),
            Source::Config => format!("hotsh's config ([agents.{}])", self.name),
            Source::User | Source::Plugin => format!("~/.claude/agents/{}.md", self.name),
        }
    }
}

/// An agent in hotsh's config (`[agents.NAME]`): the front matter's fields, and its prompt.
#[derive(Debug, Default, Clone, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct AgentConfig {
    pub(crate) description: String,
    pub(crate) prompt: String,
    pub(crate) tools: Option<Vec<String>>,
    pub(crate) model: Option<String>,
}

/// A file's front matter as Claude Code writes it. `tools` is a comma-separated string or a
/// list.
#[derive(Debug, Deserialize)]
struct FrontMatter {
    name: String,
    description: String,
    #[serde(default)]
    tools: Option<Tools>,
    #[serde(default)]
    model: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Tools {
    Line(String),
    List(Vec<String>),
}

/// The agent a Markdown file defines, or why it does not.
pub(crate) fn parse(text: &str, source: Source) -> Result<AgentDef, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or("it does not begin with a `---` front matter")?;
    let end = rest
        .match_indices("\n---")
        .map(|(at, _)| at)
        .find(|&at| matches!(rest[at + 4..].chars().next(), None | Some('\n' | '\r')))
        .ok_or("its front matter has no closing `---`")?;
    let front: FrontMatter = serde_yaml_ng::from_str(&rest[..end])
        .map_err(|error| format!("its front matter is not valid: {error}"))?;
    let body = rest[end + 4..].trim_start_matches(['\r', '\n']).trim_end();
    let tools = front.tools.map(|tools| match tools {
        Tools::Line(line) => line.split(',').map(str::to_owned).collect(),
        Tools::List(list) => list,
    });
    let config = AgentConfig {
        description: front.description,
        prompt: body.to_owned(),
        tools,
        model: front.model,
    };
    define(&front.name, config, source, text)
}

/// The agent `name` as `config` defines it (`text`: what the user consents to).
pub(crate) fn define(
    name: &str,
    config: AgentConfig,
    source: Source,
    text: &str,
) -> Result<AgentDef, String> {
    let name = name.trim();
    if name.is_empty()
        || name.len() > 64
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "its name `{name}` is not 1 to 64 letters, digits, `-` or `_` (Claude Code's rule)"
        ));
    }
    if config.description.trim().is_empty() {
        return Err("it has no description (the model chooses agents by it)".to_owned());
    }
    let tools = config.tools.map(|tools| {
        let mut names: Vec<String> = tools
            .iter()
            .map(|tool| tool.trim())
            .filter(|tool| !tool.is_empty())
            .map(|tool| hotsh_core::hooks::tool_from_hook_name(tool).to_owned())
            .collect();
        names.dedup();
        names
    });
    let model = config.model.map(|model| model.trim().to_owned()).filter(|m| m != "inherit");
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let hex: String = digest.as_ref().iter().map(|byte| format!("{byte:02x}")).collect();
    Ok(AgentDef {
        name: name.to_owned(),
        description: config.description.trim().to_owned(),
        prompt: config.prompt,
        tools,
        model,
        source,
        fingerprint: Fingerprint {
            event: "agent".to_owned(),
            matcher: name.to_owned(),
            command: format!("sha256:{hex}"),
        },
    })
}

/// The agents defined for a session in `cwd`: the project's first, then the user's
/// (`claude_home`), then the config's; a name defined twice is the first one's (Claude Code
/// lets a project's agent override the user's). What could not be read is said in `skipped`.
pub(crate) fn load(
    claude_home: Option<&Path>,
    cwd: &Path,
    configured: &std::collections::BTreeMap<String, AgentConfig>,
    skipped: &mut Vec<String>,
) -> Vec<AgentDef> {
    let mut agents: Vec<AgentDef> = Vec::new();
    let add = |agent: AgentDef, agents: &mut Vec<AgentDef>| {
        if !agents.iter().any(|known| known.name == agent.name) {
            agents.push(agent);
        }
    };
    let folders = [
        (Some(cwd.join(".claude").join("agents")), Source::Project),
        (claude_home.map(|home| home.join("agents")), Source::User),
    ];
    for (folder, source) in folders {
        let Some(folder) = folder else { continue };
        for agent in read_folder(&folder, source, skipped) {
            add(agent, &mut agents);
        }
    }
    for (name, config) in configured {
        let text = format!("{name}\n{config:?}");
        match define(name, config.clone(), Source::Config, &text) {
            Ok(agent) => add(agent, &mut agents),
            Err(why) => skipped.push(format!("agent `{name}` in hotsh's config: {why}")),
        }
    }
    agents
}

/// The agents of the `*.md` files in `folder` (none when it is missing), in name order.
fn read_folder(folder: &Path, source: Source, skipped: &mut Vec<String>) -> Vec<AgentDef> {
    let entries = match std::fs::read_dir(folder) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(error) => {
            skipped.push(format!("cannot read {}: {error}", folder.display()));
            return Vec::new();
        }
    };
    let mut paths: Vec<_> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    paths.sort();
    if paths.len() > MAX_FILES {
        skipped.push(format!(
            "{} holds {} agent files; only the first {MAX_FILES} are read",
            folder.display(),
            paths.len()
        ));
        paths.truncate(MAX_FILES);
    }
    let mut agents = Vec::new();
    for path in paths {
        match read_one(&path) {
            Ok(text) => match parse(&text, source) {
                Ok(agent) => agents.push(agent),
                Err(why) => skipped.push(format!("{} is not an agent: {why}", path.display())),
            },
            Err(why) => skipped.push(format!("cannot read {}: {why}", path.display())),
        }
    }
    agents
}

/// A regular file's text, bounded (a link or a special file is not followed).
fn read_one(path: &Path) -> Result<String, String> {
    use crate::nofollow::NotRegular;
    use std::io::Read as _;
    let file = crate::nofollow::open_regular(path, false).map_err(|why| match why {
        NotRegular::Link => "a symbolic link (not followed)".to_owned(),
        NotRegular::Kind(what) => format!("{what}, not a regular file"),
        NotRegular::Io(error) => error.to_string(),
    })?;
    let meta = file.metadata().map_err(|error| error.to_string())?;
    if meta.len() > MAX_FILE {
        return Err(format!("larger than {} KiB", MAX_FILE >> 10));
    }
    let mut text = String::new();
    file.take(MAX_FILE).read_to_string(&mut text).map_err(|error| error.to_string())?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn claude_code_agent_files_are_read_as_they_are() {
        let text = "---\nname: code-reviewer\ndescription: \"Reviews code. Use after edits.\"\ntools: Read, Grep, Bash\nmodel: inherit\n---\n\nYou review code.\n";
        let agent = parse(text, Source::User).unwrap();
        assert_eq!(agent.name, "code-reviewer");
        assert_eq!(agent.description, "Reviews code. Use after edits.");
        assert_eq!(agent.prompt, "You review code.");
        assert_eq!(
            agent.tools,
            Some(vec!["read_file".to_owned(), "Grep".to_owned(), "bash".to_owned()])
        );
        assert_eq!(agent.model, None, "inherit is the parent's model");
        let listed = "---\nname: a\ndescription: >\n  folded\n  text\ntools:\n  - Bash\n  - Edit\nmodel: fast\n---\nbody";
        let agent = parse(listed, Source::Project).unwrap();
        assert_eq!(agent.description, "folded text");
        assert_eq!(agent.tools, Some(vec!["bash".to_owned(), "edit_file".to_owned()]));
        assert_eq!(agent.model.as_deref(), Some("fast"));
        assert_eq!(agent.fingerprint.event, "agent");
        assert!(agent.fingerprint.command.starts_with("sha256:"));
    }

    #[test]
    fn a_broken_file_says_why() {
        for (text, why) in [
            ("no front matter", "does not begin"),
            ("---\nname: a\ndescription: b\n", "no closing"),
            ("---\nname: [\n---\n", "not valid"),
            ("---\nname: a b\ndescription: x\n---\n", "is not 1 to 64"),
            ("---\nname: a\ndescription: ''\n---\n", "no description"),
        ] {
            let error = parse(text, Source::User).unwrap_err();
            assert!(error.contains(why), "{text:?}: {error}");
        }
    }
}
