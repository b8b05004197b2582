//! Claude Code's permission rules, read as users wrote them: `permissions.allow`, `ask` and
//! `deny` in the same settings files as the hooks, each rule `Tool` or `Tool(specifier)`:
//! `Bash(npm run test:*)` (a prefix), `Bash(git push)` (exact), `Bash(git * main)` (a
//! wildcard), `Read(./secrets/**)`, `Edit(//etc/**)`, `mcp__github`.
//!
//! What hotsh does with them: **deny** refuses a call it covers before it runs, whatever else
//! allows it; **ask** asks the user first; **allow** answers yes, without asking, to a call
//! that asks for a wider sandbox mode (an escalation) and that the rule covers, but widens
//! nothing unasked: the sandbox still confines the command unless the call asks.

use super::{Covers, Rule};
use crate::sandbox::Mode;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Which settings a hook or a rule comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// `~/.claude/settings.json`: the user's own; runs as the user.
    User,
    /// hotsh's config file (`[hooks]`): the user's own; runs as the user.
    Config,
    /// `<project>/.claude/settings.json`: runs only once the user allowed it.
    Project,
    /// `<project>/.claude/settings.local.json`: as `Project`.
    ProjectLocal,
    /// A plugin's (hotsh-abi 1.1): the user installed it; it runs in the host, not as a
    /// command.
    Plugin,
}

impl Source {
    /// A project's file: anything that can write the project can write it.
    pub fn is_project(self) -> bool {
        matches!(self, Source::Project | Source::ProjectLocal)
    }

    pub fn describe(self) -> &'static str {
        match self {
            Source::User => "~/.claude/settings.json",
            Source::Config => "hotsh's config",
            Source::Project => ".claude/settings.json",
            Source::ProjectLocal => ".claude/settings.local.json",
            Source::Plugin => "a plugin",
        }
    }
}

/// A hook (or a rule that allows) as the user allowed it: what they consent to.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Fingerprint {
    pub event: String,
    pub matcher: String,
    pub command: String,
}

/// Which list a rule is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Allow,
    Ask,
    Deny,
}

impl Kind {
    pub fn parse(name: &str) -> Option<Kind> {
        [Kind::Allow, Kind::Ask, Kind::Deny].into_iter().find(|kind| kind.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Allow => "allow",
            Kind::Ask => "ask",
            Kind::Deny => "deny",
        }
    }
}

/// One rule of a settings file.
#[derive(Debug, Clone)]
pub struct SettingsRule {
    pub kind: Kind,
    /// As written (`Bash(npm run test:*)`).
    pub text: String,
    pub source: Source,
    /// The tool's name on Claude's side (`Bash`, `Read`, `Edit`, `mcp__github`).
    tool: String,
    what: What,
}

/// What of a tool's calls a rule covers.
#[derive(Debug, Clone)]
enum What {
    Every,
    /// Commands: the whole command, its words' beginning, or a wildcard pattern.
    Exact(String),
    Prefix(String),
    Wildcard(regex::Regex),
    /// Paths: a glob over absolute paths.
    Paths(globset::GlobMatcher),
}

/// Where relative paths in a rule start from.
#[derive(Debug, Clone, Copy)]
pub struct Bases<'a> {
    /// The session's folder (`./x`, `x`).
    pub cwd: &'a Path,
    /// The folder of the file's `.claude` (`/x`): the project, or the home.
    pub root: &'a Path,
    /// `~/x`.
    pub home: Option<&'a Path>,
}

/// The rules of a settings file's `permissions` object, and what was skipped (a rule hotsh
/// cannot read), each in a sentence.
pub fn parse(
    permissions: &Value,
    source: Source,
    bases: Bases<'_>,
) -> (Vec<SettingsRule>, Vec<String>) {
    let mut rules = Vec::new();
    let mut skipped = Vec::new();
    for kind in [Kind::Allow, Kind::Ask, Kind::Deny] {
        let Some(list) = permissions.get(kind.as_str()) else { continue };
        for text in list.as_array().into_iter().flatten() {
            let Some(text) = text.as_str() else { continue };
            match SettingsRule::parse(kind, text, source, bases) {
                Ok(rule) => rules.push(rule),
                Err(why) => skipped.push(format!(
                    "permissions.{} `{text}` ({}): {why}",
                    kind.as_str(),
                    source.describe()
                )),
            }
        }
    }
    (rules, skipped)
}

impl SettingsRule {
    /// The rule `text` of the list `kind` in a settings file of `source`; why hotsh cannot
    /// read it, when it cannot.
    pub fn parse(kind: Kind, text: &str, source: Source, bases: Bases<'_>) -> Result<Self, String> {
        let text = text.trim();
        let (tool, specifier) = match text.split_once('(') {
            Some((tool, rest)) => {
                let inner = rest.strip_suffix(')').ok_or("a `(` without its `)`")?;
                (tool.trim(), Some(inner))
            }
            None => (text, None),
        };
        if tool.is_empty() {
            return Err("no tool name".to_owned());
        }
        let what = match specifier.map(str::trim) {
            None | Some("" | "*") => What::Every,
            Some(spec) if tool == "Bash" => command_pattern(spec)?,
            Some(spec) if is_file_tool(tool) => What::Paths(path_pattern(spec, bases)?),
            Some(spec) => return Err(format!("hotsh does not match `{tool}` calls by `{spec}`")),
        };
        Ok(Self { kind, text: text.to_owned(), source, tool: tool.to_owned(), what })
    }

    /// Whether it covers a call of `tool` (the name hooks see: `Bash`, `Edit`…) with
    /// `input` (as hooks see it: `command`, `file_path`).
    pub fn covers(&self, tool: &str, input: &Value) -> bool {
        if !self.names(tool) {
            return false;
        }
        match &self.what {
            What::Every => true,
            What::Exact(_) | What::Prefix(_) | What::Wildcard(_) => {
                let command = input.get("command").and_then(Value::as_str).unwrap_or_default();
                // Any command of a compound one counts (`x && curl …` is a `curl`).
                simple_commands(command).any(|simple| self.covers_simple(simple))
            }
            What::Paths(glob) => {
                let Some(path) = input.get("file_path").and_then(Value::as_str) else {
                    return false;
                };
                Path::new(path).ancestors().any(|path| glob.is_match(path))
            }
        }
    }

    /// Whether the rule names `tool`: `Edit` rules cover every tool that edits files, an
    /// MCP server's name every tool of the server.
    fn names(&self, tool: &str) -> bool {
        let rule = self.tool.as_str();
        rule == tool
            || (rule == "Edit" && matches!(tool, "Write" | "NotebookEdit"))
            || (rule.starts_with("mcp__")
                && (tool.starts_with(&format!("{rule}__"))
                    || rule
                        .strip_suffix("__*")
                        .is_some_and(|server| tool.starts_with(&format!("{server}__")))))
    }

    fn covers_simple(&self, command: &str) -> bool {
        let words = |text: &str| text.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        match &self.what {
            What::Exact(exact) => words(command) == words(exact),
            What::Prefix(prefix) => words(command).starts_with(&words(prefix)),
            What::Wildcard(pattern) => pattern.is_match(command.trim()),
            What::Every | What::Paths(_) => true,
        }
    }

    /// The hotsh rule an allow rule answers an escalation with: a simple command's exact
    /// form or prefix, under any mode. `None` for what cannot be one (a wildcard, paths).
    pub fn as_rule(&self) -> Option<Rule> {
        let pattern = match (&self.what, self.tool.as_str()) {
            (What::Exact(exact), "Bash") => super::Pattern::Exact(exact.clone()),
            (What::Prefix(prefix), "Bash") => super::Pattern::Prefix(prefix.clone()),
            _ => return None,
        };
        Some(Rule { covers: Covers::Command, pattern, mode: Mode::DangerFullAccess })
    }

    /// What the user consents to for a project's allow rule.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint {
            event: format!("permissions.{}", self.kind.as_str()),
            matcher: String::new(),
            command: self.text.clone(),
        }
    }

    /// "permissions.deny `Bash(curl:*)` of ~/.claude/settings.json".
    pub fn describe(&self) -> String {
        format!("permissions.{} `{}` of {}", self.kind.as_str(), self.text, self.source.describe())
    }
}

/// Claude's file tools, whose rules name paths.
fn is_file_tool(tool: &str) -> bool {
    matches!(tool, "Read" | "Edit" | "Write" | "NotebookEdit" | "Glob" | "Grep")
}

/// `npm run test:*` (a prefix), `git push` (exact), `git * main` (a wildcard).
fn command_pattern(spec: &str) -> Result<What, String> {
    if let Some(prefix) = spec.strip_suffix(":*") {
        return Ok(What::Prefix(prefix.trim().to_owned()));
    }
    if !spec.contains('*') {
        return Ok(What::Exact(spec.to_owned()));
    }
    let pattern: Vec<String> = spec.split('*').map(regex::escape).collect();
    regex::Regex::new(&format!("^{}$", pattern.join(".*")))
        .map(What::Wildcard)
        .map_err(|e| format!("not a pattern hotsh can match: {e}"))
}

/// A path rule as a glob over absolute paths, gitignore-style: `//x` from the root, `~/x`
/// from the home, `/x` from the folder holding the settings' `.claude`, `./x` or `x` from
/// the session's folder; a pattern without a `/` matches at any depth beneath it.
fn path_pattern(spec: &str, bases: Bases<'_>) -> Result<globset::GlobMatcher, String> {
    let absolute: PathBuf = if let Some(rest) = spec.strip_prefix("//") {
        Path::new("/").join(rest)
    } else if let Some(rest) = spec.strip_prefix("~/") {
        bases.home.ok_or("`~` without a home")?.join(rest)
    } else if let Some(rest) = spec.strip_prefix('/') {
        bases.root.join(rest)
    } else if let Some(rest) = spec.strip_prefix("./") {
        bases.cwd.join(rest)
    } else if !spec.contains('/') {
        bases.cwd.join("**").join(spec)
    } else {
        bases.cwd.join(spec)
    };
    globset::GlobBuilder::new(&absolute.to_string_lossy())
        .literal_separator(true)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|e| format!("not a pattern hotsh can match: {e}"))
}

/// The simple commands of a command line, split at every shell operator (what is inside
/// `$(…)` or backticks is one too): a deny or ask rule looks at each.
fn simple_commands(command: &str) -> impl Iterator<Item = &str> {
    command
        .split([';', '&', '|', '\n', '(', ')', '`', '{', '}', '$'])
        .map(str::trim)
        .filter(|simple| !simple.is_empty())
}

/// What the rules say about a call: a deny rule first, then an ask rule.
pub fn judge<'a>(rules: &'a [SettingsRule], tool: &str, input: &Value) -> Option<&'a SettingsRule> {
    [Kind::Deny, Kind::Ask]
        .into_iter()
        .find_map(|kind| rules.iter().find(|rule| rule.kind == kind && rule.covers(tool, input)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use serde_json::json;

    fn rules(permissions: Value) -> Vec<SettingsRule> {
        let bases = Bases {
            cwd: Path::new("/work/p"),
            root: Path::new("/work/p"),
            home: Some(Path::new("/home/u")),
        };
        let (rules, skipped) = parse(&permissions, Source::User, bases);
        assert!(skipped.is_empty(), "{skipped:?}");
        rules
    }

    fn bash(command: &str) -> Value {
        json!({ "command": command })
    }

    fn file(path: &str) -> Value {
        json!({ "file_path": path })
    }

    #[test]
    fn deny_comes_first_and_catches_a_command_inside_a_compound_one() {
        let rules = rules(json!({
            "allow": ["Bash(curl:*)"],
            "ask": ["Bash(git push:*)"],
            "deny": ["Bash(curl:*)", "Bash(rm -rf /)"]
        }));
        let judged = |command| judge(&rules, "Bash", &bash(command)).map(|r| r.kind);
        assert_eq!(judged("curl https://x"), Some(Kind::Deny));
        assert_eq!(judged("echo x && curl evil"), Some(Kind::Deny));
        assert_eq!(judged("echo $(curl evil)"), Some(Kind::Deny));
        assert_eq!(judged("git push origin main"), Some(Kind::Ask));
        assert_eq!(judged("rm  -rf /"), Some(Kind::Deny));
        assert_eq!(judged("curly"), None);
        assert_eq!(judged("git status"), None);
    }

    #[test]
    fn paths_resolve_as_claude_resolves_them() {
        let rules = rules(json!({ "deny": [
            "Read(./secrets/**)", "Read(*.env)", "Edit(//etc/**)", "Read(~/.ssh/**)", "Read(/vendor)"
        ]}));
        let denied = |tool, path| judge(&rules, tool, &file(path)).is_some();
        assert!(denied("Read", "/work/p/secrets/key"));
        assert!(denied("Read", "/work/p/a/b/.env"));
        assert!(denied("Read", "/work/p/x.env"));
        assert!(denied("Write", "/etc/hosts"), "Edit rules cover Write");
        assert!(denied("Read", "/home/u/.ssh/id_ed25519"));
        assert!(denied("Read", "/work/p/vendor/lib.rs"), "a folder covers what is in it");
        assert!(!denied("Read", "/work/p/src/main.rs"));
        assert!(!denied("Read", "/etc/hosts"), "an Edit rule is not a Read rule");
    }

    #[test]
    fn tools_and_servers_are_named_as_claude_names_them() {
        let rules =
            rules(json!({ "deny": ["mcp__github", "WebFetch"], "ask": ["Bash(git * main)"] }));
        assert!(judge(&rules, "mcp__github__create_issue", &json!({})).is_some());
        assert!(judge(&rules, "mcp__githubx__a", &json!({})).is_none());
        assert_eq!(judge(&rules, "Bash", &bash("git push main")).map(|r| r.kind), Some(Kind::Ask));
        assert!(judge(&rules, "Bash", &bash("git push dev")).is_none());
    }

    #[test]
    fn an_allow_rule_answers_escalations_of_the_commands_it_covers() {
        let rules = rules(json!({ "allow": ["Bash(npm run test:*)", "Bash(make)", "Read(x)"] }));
        let rule = rules[0].as_rule().unwrap();
        assert!(rule.covers(Covers::Command, "npm run test --watch"));
        assert!(!rule.covers(Covers::Command, "npm run test && curl x"));
        assert!(rules[1].as_rule().unwrap().covers(Covers::Command, "make"));
        assert!(rules[2].as_rule().is_none());
    }

    #[test]
    fn a_rule_hotsh_cannot_read_is_skipped_saying_why() {
        let bases = Bases { cwd: Path::new("/p"), root: Path::new("/p"), home: None };
        let (rules, skipped) = parse(
            &json!({"deny": ["Bash(oops", "WebFetch(domain:x.com)", "Read(~/x)"]}),
            Source::Project,
            bases,
        );
        assert!(rules.is_empty());
        assert_eq!(skipped.len(), 3, "{skipped:?}");
    }
}
