//! Command hooks in Claude Code's format: what a settings file's `hooks` says, which hooks a
//! point of a turn matches, the JSON a hook reads on stdin, and what a hook's exit and output
//! mean. Everything here is data and pure functions; running a hook is the host's
//! ([`Hooks`], the port a turn calls at each of its hook points).
//!
//! The contract is Claude Code's, read as it is, so a user's existing files work unchanged:
//!
//! ```json
//! { "hooks": { "PreToolUse": [ { "matcher": "Bash",
//!     "hooks": [ { "type": "command", "command": "~/bin/check.sh", "timeout": 30 } ] } ] } }
//! ```
//!
//! Exit 0 is success (stdout may be JSON with the fields below, or, for `UserPromptSubmit` and
//! `SessionStart`, plain text added to the model's context); exit 2 blocks (its stderr goes to
//! the model or the user as the event says); any other exit is an error the user sees and the
//! turn goes on.

use crate::permissions::settings::{Fingerprint, Source};
use crate::session::Session;
use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a hook may run when its entry does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A point of a session where hooks run, named as Claude Code names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Event {
    /// A session starts serving (matcher on `startup`, `resume` or `compact`).
    SessionStart,
    /// The user sent a prompt; before the model sees it.
    UserPromptSubmit,
    /// The model called a tool; before it runs (matcher on the tool's name).
    PreToolUse,
    /// A tool ran (matcher on the tool's name).
    PostToolUse,
    /// The history is about to be compacted (matcher on `manual` or `auto`).
    PreCompact,
    /// The model answered without calling a tool: the turn is about to end.
    Stop,
    /// The session closes (matcher on the reason).
    SessionEnd,
    /// The agent asks the user something (a permission).
    Notification,
    /// A subagent (a child session) starts (matcher on the agent's name).
    SubagentStart,
    /// A subagent's turn ended, before its answer goes to the parent (matcher on the agent's
    /// name).
    SubagentStop,
}

impl Event {
    pub const ALL: [Event; 10] = [
        Event::SessionStart,
        Event::UserPromptSubmit,
        Event::PreToolUse,
        Event::PostToolUse,
        Event::PreCompact,
        Event::Stop,
        Event::SessionEnd,
        Event::Notification,
        Event::SubagentStart,
        Event::SubagentStop,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Event::SessionStart => "SessionStart",
            Event::UserPromptSubmit => "UserPromptSubmit",
            Event::PreToolUse => "PreToolUse",
            Event::PostToolUse => "PostToolUse",
            Event::PreCompact => "PreCompact",
            Event::Stop => "Stop",
            Event::SessionEnd => "SessionEnd",
            Event::Notification => "Notification",
            Event::SubagentStart => "SubagentStart",
            Event::SubagentStop => "SubagentStop",
        }
    }

    pub fn parse(name: &str) -> Option<Event> {
        Event::ALL.into_iter().find(|event| event.as_str() == name)
    }

    /// Whether a matcher selects among this event's runs (the others run on every one).
    fn has_matcher(self) -> bool {
        !matches!(self, Event::UserPromptSubmit | Event::Stop)
    }
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One configured hook command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookCommand {
    pub event: Event,
    /// The matcher as written (empty: every run of the event).
    pub matcher: String,
    pub command: String,
    pub timeout: Duration,
    pub source: Source,
}

impl HookCommand {
    /// What the user consents to: the event, the matcher and the command (not the timeout).
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint {
            event: self.event.as_str().to_owned(),
            matcher: self.matcher.clone(),
            command: self.command.clone(),
        }
    }

    /// Whether it runs for a run of its event about `subject` (a tool's name, a start's
    /// source…).
    pub fn matches(&self, subject: &str) -> bool {
        !self.event.has_matcher() || matches(&self.matcher, subject)
    }
}

/// Claude Code's matcher rules: empty or `*` matches everything; a plain name (letters,
/// digits, `_`, and `|` between alternatives) matches exactly; anything else is a regular
/// expression searched for in the subject (`Edit|Write`, `mcp__memory__.*`, `Notebook.*`). A
/// matcher that is not a valid expression matches nothing.
pub fn matches(matcher: &str, subject: &str) -> bool {
    let matcher = matcher.trim();
    if matcher.is_empty() || matcher == "*" {
        return true;
    }
    if matcher.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|') {
        return matcher.split('|').any(|name| name == subject);
    }
    regex::Regex::new(matcher).is_ok_and(|expression| expression.is_match(subject))
}

/// The hooks of one settings file's `hooks` object (Claude's format), and what in it was
/// skipped (an unknown event, a hook that is not a command), each said in a sentence.
pub fn parse(hooks: &Value, source: Source) -> (Vec<HookCommand>, Vec<String>) {
    let mut commands = Vec::new();
    let mut skipped = Vec::new();
    let Some(events) = hooks.as_object() else {
        if !hooks.is_null() {
            skipped.push(format!("`hooks` in {} is not an object", source.describe()));
        }
        return (commands, skipped);
    };
    for (name, groups) in events {
        let Some(event) = Event::parse(name) else {
            skipped.push(format!("hotsh has no hook event `{name}` ({})", source.describe()));
            continue;
        };
        for group in groups.as_array().into_iter().flatten() {
            let matcher = group.get("matcher").and_then(Value::as_str).unwrap_or_default();
            for hook in group.get("hooks").and_then(Value::as_array).into_iter().flatten() {
                let kind = hook.get("type").and_then(Value::as_str).unwrap_or("command");
                let command = hook.get("command").and_then(Value::as_str);
                match (kind, command) {
                    ("command", Some(command)) if !command.trim().is_empty() => {
                        let timeout = hook
                            .get("timeout")
                            .and_then(Value::as_f64)
                            .filter(|seconds| seconds.is_finite() && *seconds > 0.0)
                            .map_or(DEFAULT_TIMEOUT, |seconds| {
                                Duration::from_secs_f64(seconds.min(3600.0))
                            });
                        commands.push(HookCommand {
                            event,
                            matcher: matcher.to_owned(),
                            command: command.to_owned(),
                            timeout,
                            source,
                        });
                    }
                    ("command", _) => skipped
                        .push(format!("a `{name}` hook without a command ({})", source.describe())),
                    (other, _) => skipped.push(format!(
                        "a `{name}` hook of type `{other}`: hotsh runs `command` hooks only ({})",
                        source.describe()
                    )),
                }
            }
        }
    }
    (commands, skipped)
}

/// hotsh's tools under the names Claude Code gives them on the hook side, so that matchers
/// written for Claude (`Bash`, `Edit|Write`) work unchanged. A tool not listed keeps its name
/// (an MCP tool is already `mcp__<server>__<tool>`).
const TOOL_NAMES: [(&str, &str); 7] = [
    ("bash", "Bash"),
    ("bash_output", "BashOutput"),
    ("bash_kill", "KillShell"),
    ("read_file", "Read"),
    ("write_file", "Write"),
    ("edit_file", "Edit"),
    ("task", "Task"),
];

/// The name hooks see for hotsh's tool `tool`.
pub fn hook_tool_name(tool: &str) -> &str {
    TOOL_NAMES.iter().find(|(ours, _)| *ours == tool).map_or(tool, |(_, theirs)| theirs)
}

/// hotsh's name for a tool Claude Code names `claude` (an agent definition's `tools:` list
/// is written in Claude's names; Claude's newer `Agent` is the same tool as `Task`).
pub fn tool_from_hook_name(claude: &str) -> &str {
    if claude == "Agent" {
        return "task";
    }
    TOOL_NAMES.iter().find(|(_, theirs)| *theirs == claude).map_or(claude, |(ours, _)| ours)
}

/// Whether the tool's arguments name a file as `path` (Claude names it `file_path`).
fn names_a_file(tool: &str) -> bool {
    matches!(tool, "read_file" | "write_file" | "edit_file")
}

/// The arguments of a call to `tool` as Claude's tool of that name takes them: a file tool's
/// `path` is `file_path`, made absolute from the session's folder.
pub fn hook_tool_input(tool: &str, input: &Value, cwd: &std::path::Path) -> Value {
    let mut input = input.clone();
    if names_a_file(tool)
        && let Some(object) = input.as_object_mut()
        && let Some(path) = object.remove("path")
    {
        let absolute = match path.as_str() {
            Some(path) => Value::String(cwd.join(path).to_string_lossy().into_owned()),
            None => path,
        };
        object.insert("file_path".to_owned(), absolute);
    }
    input
}

/// A hook's `updatedInput` for `tool` as hotsh's tool takes it (the inverse of
/// [`hook_tool_input`]).
pub fn tool_input_from_hook(tool: &str, updated: &Value) -> Value {
    let mut input = updated.clone();
    if names_a_file(tool)
        && let Some(object) = input.as_object_mut()
        && let Some(path) = object.remove("file_path")
    {
        object.insert("path".to_owned(), path);
    }
    input
}

/// One run of a hook point: the event, what its matchers are matched against, and the
/// event's own fields of the payload (the host adds the common ones: `session_id`,
/// `transcript_path`, `cwd`, `permission_mode`, `hook_event_name`).
#[derive(Debug, Clone)]
pub struct Point {
    pub event: Event,
    pub subject: String,
    pub fields: Map<String, Value>,
}

impl Point {
    pub fn new(event: Event, subject: impl Into<String>, fields: Value) -> Self {
        let fields = match fields {
            Value::Object(fields) => fields,
            _ => Map::new(),
        };
        Self { event, subject: subject.into(), fields }
    }

    /// `PreToolUse` for a call of hotsh's tool `tool` with `input`.
    pub fn pre_tool_use(tool: &str, input: &Value, call_id: &str, cwd: &std::path::Path) -> Self {
        let name = hook_tool_name(tool);
        Point::new(
            Event::PreToolUse,
            name,
            json!({
                "tool_name": name,
                "tool_input": hook_tool_input(tool, input, cwd),
                "tool_use_id": call_id,
            }),
        )
    }

    /// `PostToolUse` for that call, which answered `output` (`failed`: as an error).
    pub fn post_tool_use(
        tool: &str,
        input: &Value,
        call_id: &str,
        cwd: &std::path::Path,
        output: &str,
        failed: bool,
    ) -> Self {
        let mut point = Point::pre_tool_use(tool, input, call_id, cwd);
        point.event = Event::PostToolUse;
        let mut response = json!({ "output": output, "success": !failed });
        if let Some(path) = point.fields["tool_input"].get("file_path") {
            response["filePath"] = path.clone();
        }
        point.fields.insert("tool_response".to_owned(), response);
        point
    }
}

/// How a hook's command ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ran {
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    /// It could not be started (the reason is in `stderr`).
    pub not_run: bool,
}

/// What a `PreToolUse` hook decided about the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Permission {
    Allow,
    Ask,
    Deny,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Allow => "allow",
            Permission::Ask => "ask",
            Permission::Deny => "deny",
        }
    }
}

/// What one hook's run says, or what the matching hooks of a point say together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    /// `PreToolUse`'s decision (deny outranks ask outranks allow), with its reasons.
    pub permission: Option<(Permission, String)>,
    /// Exit 2, or `"decision": "block"`: the call, prompt or stop is blocked, with this
    /// reason (for the model, or for a blocked prompt the user).
    pub block: Option<String>,
    /// `updatedInput`: the tool's arguments rewritten (Claude's names).
    pub updated_input: Option<Value>,
    /// Text for the model's context (`additionalContext`, or a start or prompt hook's plain
    /// stdout).
    pub context: Vec<String>,
    /// `"continue": false`: the turn ends after this point, with this reason for the user.
    pub halt: Option<String>,
    /// What the user is told (`systemMessage`, a hook that failed).
    pub notes: Vec<String>,
    /// `suppressOutput`: the hook's stdout is not shown.
    pub quiet: bool,
}

impl Verdict {
    /// What `ran`, one run of `hook`, says.
    pub fn of(hook: &HookCommand, ran: &Ran) -> Verdict {
        let mut verdict = Verdict::default();
        let event = hook.event;
        if ran.not_run || ran.timed_out {
            let why = if ran.timed_out {
                format!("timed out after {} s", hook.timeout.as_secs_f64())
            } else {
                format!("could not start: {}", ran.stderr.trim())
            };
            verdict.notes.push(format!("the {event} hook `{}` {why}", hook.command));
            return verdict;
        }
        match ran.exit_code {
            Some(0) => {}
            Some(2) => {
                let reason = ran.stderr.trim();
                verdict.block = Some(if reason.is_empty() {
                    format!("blocked by the {event} hook `{}`", hook.command)
                } else {
                    reason.to_owned()
                });
                return verdict;
            }
            code => {
                let code = code.map_or_else(|| "a signal".to_owned(), |c| format!("exit {c}"));
                let stderr = ran.stderr.trim();
                let detail = if stderr.is_empty() { String::new() } else { format!(": {stderr}") };
                verdict
                    .notes
                    .push(format!("the {event} hook `{}` failed ({code}){detail}", hook.command));
                return verdict;
            }
        }
        let stdout = ran.stdout.trim();
        let output = stdout
            .starts_with('{')
            .then(|| serde_json::from_str::<Map<String, Value>>(stdout).ok())
            .flatten();
        let Some(output) = output else {
            if matches!(event, Event::UserPromptSubmit | Event::SessionStart | Event::SubagentStart)
                && !stdout.is_empty()
            {
                verdict.context.push(stdout.to_owned());
            }
            return verdict;
        };
        let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
        if output.get("continue").and_then(Value::as_bool) == Some(false) {
            verdict.halt = Some(text(output.get("stopReason")).unwrap_or_else(|| {
                format!("the {event} hook `{}` stopped the turn", hook.command)
            }));
        }
        verdict.quiet = output.get("suppressOutput").and_then(Value::as_bool) == Some(true);
        verdict.notes.extend(text(output.get("systemMessage")));
        let reason = text(output.get("reason")).unwrap_or_default();
        match (event, output.get("decision").and_then(Value::as_str)) {
            // Claude's older form of a tool decision.
            (Event::PreToolUse, Some("approve")) => {
                verdict.permission = Some((Permission::Allow, reason));
            }
            (Event::PreToolUse, Some("block")) => {
                verdict.permission = Some((Permission::Deny, reason));
            }
            (_, Some("block")) => {
                verdict.block = Some(if reason.is_empty() {
                    format!("blocked by the {event} hook `{}`", hook.command)
                } else {
                    reason
                });
            }
            _ => {}
        }
        if let Some(specific) = output.get("hookSpecificOutput").and_then(Value::as_object) {
            let decision = match specific.get("permissionDecision").and_then(Value::as_str) {
                Some("allow") => Some(Permission::Allow),
                Some("ask") => Some(Permission::Ask),
                Some("deny") => Some(Permission::Deny),
                _ => None,
            };
            if event == Event::PreToolUse
                && let Some(decision) = decision
            {
                let reason = text(specific.get("permissionDecisionReason")).unwrap_or_default();
                verdict.permission = Some((decision, reason));
            }
            if event == Event::PreToolUse {
                verdict.updated_input =
                    specific.get("updatedInput").filter(|input| input.is_object()).cloned();
            }
            verdict.context.extend(text(specific.get("additionalContext")));
        }
        verdict
    }

    /// What the hooks of one point say together, in the order they were configured.
    pub fn combine(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        let mut all = Verdict::default();
        for verdict in verdicts {
            all.permission = match (all.permission.take(), verdict.permission) {
                (None, theirs) => theirs,
                (ours, None) => ours,
                (Some(ours), Some(theirs)) if theirs.0 > ours.0 => Some(theirs),
                (Some((kind, ours)), Some((same, theirs))) if kind == same => {
                    Some((kind, join(ours, theirs)))
                }
                (ours, Some(_)) => ours,
            };
            all.block = match (all.block.take(), verdict.block) {
                (Some(ours), Some(theirs)) => Some(join(ours, theirs)),
                (ours, theirs) => ours.or(theirs),
            };
            if all.updated_input.is_none() {
                all.updated_input = verdict.updated_input;
            }
            all.context.extend(verdict.context);
            if all.halt.is_none() {
                all.halt = verdict.halt;
            }
            all.notes.extend(verdict.notes);
        }
        all
    }

    /// The call may not run: a hook blocked it, or a hook or a rule denied it; what the
    /// model is told.
    pub fn refusal(&self) -> Option<String> {
        if let Some(reason) = &self.block {
            return Some(format!("a PreToolUse hook blocked this call: {reason}"));
        }
        match &self.permission {
            Some((Permission::Deny, reason)) if reason.is_empty() => {
                Some("a PreToolUse hook denied this call".to_owned())
            }
            Some((Permission::Deny, reason)) => Some(format!("this call was denied: {reason}")),
            _ => None,
        }
    }
}

fn join(ours: String, theirs: String) -> String {
    match (ours.is_empty(), theirs.is_empty()) {
        (_, true) => ours,
        (true, false) => theirs,
        (false, false) => format!("{ours}\n{theirs}"),
    }
}

/// The hooks a turn runs: the port the host implements (it reads the settings, asks the
/// user's consent for a project's hooks, runs each through its executor and shows each run).
pub trait Hooks: Send + Sync {
    /// Whether any hook is configured for `event` (a point that none is for costs nothing).
    fn wants(&self, event: Event) -> bool;

    /// The source (`startup`, `resume`) of the `SessionStart` due at this prompt: the
    /// session's first since it was opened. Taken: it is due once.
    fn starting(&self) -> Option<&'static str> {
        None
    }

    /// Settles what must be settled before a prompt is answered (a project's hooks and
    /// rules the user has not been asked about yet).
    fn settle<'a>(
        &'a self,
        session: &'a Arc<Session>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ()> {
        let _ = (session, cancel);
        Box::pin(async {})
    }

    /// Runs every hook matching `point`, together, and says what they say.
    fn run<'a>(
        &'a self,
        session: &'a Arc<Session>,
        point: Point,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Verdict>;
}

/// No hooks.
#[derive(Debug, Clone, Copy)]
pub struct NoHooks;

impl Hooks for NoHooks {
    fn wants(&self, _event: Event) -> bool {
        false
    }

    fn run<'a>(
        &'a self,
        _session: &'a Arc<Session>,
        _point: Point,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Verdict> {
        Box::pin(async { Verdict::default() })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn hook(event: Event, matcher: &str) -> HookCommand {
        HookCommand {
            event,
            matcher: matcher.into(),
            command: "h".into(),
            timeout: DEFAULT_TIMEOUT,
            source: Source::User,
        }
    }

    fn exited(code: i32, stdout: &str, stderr: &str) -> Ran {
        Ran {
            exit_code: Some(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
            ..Ran::default()
        }
    }

    #[test]
    fn matchers_follow_claude() {
        for (matcher, subject, expected) in [
            ("", "Bash", true),
            ("*", "mcp__x__y", true),
            ("Bash", "Bash", true),
            ("Bash", "BashOutput", false),
            ("Edit|Write", "Write", true),
            ("Edit|Write", "Read", false),
            ("mcp__memory__.*", "mcp__memory__create", true),
            ("mcp__memory__.*", "mcp__other__create", false),
            ("Notebook.*", "NotebookEdit", true),
            ("(", "(", false),
        ] {
            assert_eq!(matches(matcher, subject), expected, "{matcher} on {subject}");
        }
        assert!(hook(Event::Stop, "Bash").matches("anything"), "Stop has no matcher");
    }

    #[test]
    fn settings_are_read_as_claude_writes_them() {
        let settings = json!({
            "PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": "a.sh", "timeout": 5},
                {"type": "prompt", "prompt": "x"}
            ]}],
            "Stop": [{"hooks": [{"type": "command", "command": "b.sh"}]}],
            "PermissionRequest": [{"hooks": [{"type": "command", "command": "c.sh"}]}]
        });
        let (hooks, skipped) = parse(&settings, Source::Project);
        assert_eq!(hooks.len(), 2);
        assert_eq!(hooks[0].event, Event::PreToolUse);
        assert_eq!(hooks[0].matcher, "Bash");
        assert_eq!(hooks[0].timeout, Duration::from_secs(5));
        assert_eq!(hooks[1].event, Event::Stop);
        assert_eq!(hooks[1].timeout, DEFAULT_TIMEOUT);
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        let subagents = json!({"SubagentStop": [{"matcher": "reviewer", "hooks": [{"type": "command", "command": "d.sh"}]}]});
        let (hooks, skipped) = parse(&subagents, Source::User);
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(hooks[0].event, Event::SubagentStop);
        assert!(hooks[0].matches("reviewer") && !hooks[0].matches("explorer"));
    }

    #[test]
    fn exit_codes_mean_what_claude_says() {
        let pre = hook(Event::PreToolUse, "Bash");
        assert_eq!(
            Verdict::of(&pre, &exited(2, "", "no rm\n")).refusal().as_deref(),
            Some("a PreToolUse hook blocked this call: no rm")
        );
        let failed = Verdict::of(&pre, &exited(1, "", "oops"));
        assert_eq!(failed.refusal(), None);
        assert_eq!(failed.notes.len(), 1);
        let prompt = hook(Event::UserPromptSubmit, "");
        assert_eq!(
            Verdict::of(&prompt, &exited(0, "it is Tuesday\n", "")).context,
            ["it is Tuesday"]
        );
        assert!(Verdict::of(&pre, &exited(0, "plain", "")).context.is_empty());
    }

    #[test]
    fn json_output_fields_are_read() {
        let pre = hook(Event::PreToolUse, "Bash");
        let out = r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"sure?","updatedInput":{"command":"ls"}},"systemMessage":"careful"}"#;
        let verdict = Verdict::of(&pre, &exited(0, out, ""));
        assert_eq!(verdict.permission, Some((Permission::Ask, "sure?".into())));
        assert_eq!(verdict.updated_input, Some(json!({"command": "ls"})));
        assert_eq!(verdict.notes, ["careful"]);
        let stop = hook(Event::Stop, "");
        let verdict =
            Verdict::of(&stop, &exited(0, r#"{"decision":"block","reason":"tests fail"}"#, ""));
        assert_eq!(verdict.block.as_deref(), Some("tests fail"));
        let halt =
            Verdict::of(&stop, &exited(0, r#"{"continue":false,"stopReason":"enough"}"#, ""));
        assert_eq!(halt.halt.as_deref(), Some("enough"));
    }

    #[test]
    fn deny_outranks_ask_outranks_allow() {
        let decided = |p: Permission| Verdict {
            permission: Some((p, p.as_str().into())),
            ..Verdict::default()
        };
        let all = Verdict::combine([
            decided(Permission::Allow),
            decided(Permission::Deny),
            decided(Permission::Ask),
        ]);
        assert_eq!(all.permission, Some((Permission::Deny, "deny".into())));
        assert_eq!(all.refusal().as_deref(), Some("this call was denied: deny"));
        let all = Verdict::combine([decided(Permission::Allow), decided(Permission::Ask)]);
        assert_eq!(all.permission.map(|p| p.0), Some(Permission::Ask));
    }

    #[test]
    fn file_tools_speak_claude_on_the_hook_side() {
        let cwd = std::path::Path::new("/p");
        let point = Point::pre_tool_use(
            "edit_file",
            &json!({"path": "a.rs", "old_string": "x"}),
            "c1",
            cwd,
        );
        assert_eq!(point.subject, "Edit");
        assert_eq!(point.fields["tool_input"], json!({"file_path": "/p/a.rs", "old_string": "x"}));
        let back = tool_input_from_hook("edit_file", &json!({"file_path": "/q/b.rs"}));
        assert_eq!(back, json!({"path": "/q/b.rs"}));
        assert_eq!(hook_tool_name("mcp__s__t"), "mcp__s__t");
    }
}
