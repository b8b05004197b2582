//! The bash tools: `bash` runs a command (in the foreground, or in the background as a task),
//! `bash_output` reads a task's new output, `bash_kill` stops a task. The model is told exactly
//! what happened: stdout, `[stderr]`, then markers in a fixed order.

mod render;

use hotsh_abi::{
    Card, CardStatus, CommandSpec, FinalCard, GenericCard, HostRef, Manifest, Plugin,
    PromptSection, ROption, RResult, SandboxRequest, TerminalCard, TerminalExit, ToolCall,
    ToolKind, ToolOutput, ToolSpec, ToolsContext,
};
use render::{RawOutput, TaskReport};
use serde::Deserialize;
use std::path::Path;

/// The arguments of `bash`, as the model sends them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BashArgs {
    command: String,
    /// Milliseconds.
    timeout: Option<u64>,
    description: Option<String>,
    workdir: Option<String>,
    #[serde(default)]
    run_in_background: bool,
    /// A wider sandbox mode for this one command (asked of the user).
    sandbox_permissions: Option<String>,
    justification: Option<String>,
    /// The two above, checked (set by `parse`).
    #[serde(skip)]
    sandbox_request: Option<SandboxRequest>,
}

impl BashArgs {
    fn parse(call: &ToolCall) -> Result<Self, String> {
        let mut args: Self = call.arguments()?;
        if args.command.trim().is_empty() {
            return Err("invalid arguments for `bash`: `command` is empty".to_owned());
        }
        if args.timeout == Some(0) {
            return Err("invalid arguments for `bash`: `timeout` must be at least 1 ms".to_owned());
        }
        args.sandbox_request = args.sandbox_request()?;
        Ok(args)
    }

    /// `sandbox_permissions` and `justification` come together or not at all.
    fn sandbox_request(&self) -> Result<Option<SandboxRequest>, String> {
        SandboxRequest::from_arguments(
            "bash",
            self.sandbox_permissions.as_deref(),
            self.justification.as_deref(),
        )
    }

    /// The directory the command runs in: `workdir` resolved against the session's cwd.
    fn workdir(&self, call: &ToolCall) -> String {
        match &self.workdir {
            Some(dir) => Path::new(call.cwd.as_str()).join(dir).to_string_lossy().into_owned(),
            None => call.cwd.to_string(),
        }
    }

    fn spec(&self, call: &ToolCall) -> CommandSpec {
        CommandSpec::new(&self.command, &self.workdir(call))
            .with_timeout_ms(self.timeout)
            .with_sandbox_permissions(self.sandbox_request.clone())
    }
}

/// The arguments of `bash_output` and `bash_kill`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskArgs {
    task_id: String,
}

impl TaskArgs {
    /// Parses and checks the id's shape (`bash-N`).
    fn parse(call: &ToolCall) -> Result<Self, String> {
        let args: Self = call.arguments()?;
        let well_formed = args
            .task_id
            .strip_prefix("bash-")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !well_formed {
            return Err(format!("malformed task id `{}`; task ids look like bash-3", args.task_id));
        }
        Ok(args)
    }

    /// Refuses a task of another session (and reports an unknown id).
    fn check_owner(&self, call: &ToolCall, host: &HostRef<'_>) -> Result<(), String> {
        match host.owner_of(self.task_id.as_str().into()) {
            RResult::ROk(ROption::RSome(owner)) if owner == call.session_id => Ok(()),
            RResult::ROk(_) => Err(format!("task {} belongs to another session", self.task_id)),
            RResult::RErr(error) => Err(error.into_string()),
        }
    }
}

const BASH_DESCRIPTION: &str = "Runs a command with `bash -c` and returns its output. \
Each call starts a fresh shell in the session's working directory (or `workdir`); `cd`, \
variables and other shell state do not carry over between calls. stdin is empty. With \
`run_in_background`, the command starts as a background task and the call returns its id at \
once; read its output with `bash_output` and stop it with `bash_kill`.";

const BASH_PROMPT: &str = "\
## Running commands

Use the `bash` tool to run shell commands. The result lists stdout, then stderr after a \
`[stderr]` line, then markers. A command that failed ends with a line `[exit code: N]`; when \
that line is absent the command exited 0. Check for it before you rely on a command having \
worked. Other markers say the command was stopped: `[timed out after Nms]` (the default \
timeout is 120000 ms, at most 600000 ms; pass `timeout` for longer commands) and \
`[killed by signal: NAME]`. Long output keeps its beginning and its end around a marker; \
`[output truncated; full output: PATH]` names a file holding all of it, which you can search \
with grep or read in parts.

For servers, watchers and anything that runs long, pass `run_in_background: true`: you get a \
task id such as `bash-3` at once. `bash_output` returns only what the task printed since your \
last read, and its status; `bash_kill` stops it. When a background task ends you are told in \
a notice.";

const SANDBOX_PROMPT: &str = "\
## The sandbox

Commands run in a sandbox. When one fails because the sandbox refused it, its result starts \
with a marker such as `[sandbox: file access denied under <mode> mode]` or \
`[sandbox: network access denied under <mode> mode]`; that is the boundary, not a bug to \
work around. If the task really needs more, call `bash` again with the same command, \
`sandbox_permissions` naming the mode it needs (`workspace-write` or `danger-full-access`) and \
a one-sentence `justification`: the user sees both and decides. An allowed request covers \
that one call only. A rejected one means do not retry it; find another way or ask the user.";

/// The bash plugin.
#[derive(Debug)]
pub struct ToolBash;

impl Plugin for ToolBash {
    fn manifest() -> Manifest {
        Manifest::new("tool-bash", env!("CARGO_PKG_VERSION"))
    }

    fn tools() -> Vec<ToolSpec> {
        Self::tools_in(&ToolsContext::new(false))
    }

    fn tools_in(context: &ToolsContext) -> Vec<ToolSpec> {
        let task = |what: &str| {
            serde_json::json!({
                "type": "object",
                "properties": {"task_id": {"type": "string", "description": what}},
                "required": ["task_id"],
                "additionalProperties": false
            })
        };
        vec![
            ToolSpec::new("bash", BASH_DESCRIPTION, &bash_schema(context.sandboxed))
                .runs_commands(),
            ToolSpec::new(
                "bash_output",
                "Returns what a background task printed since the last read, and its status.",
                &task("The task id, e.g. bash-3."),
            ),
            ToolSpec::new(
                "bash_kill",
                "Stops a background task and everything it started.",
                &task("The task id, e.g. bash-3."),
            ),
        ]
    }

    fn prompt_sections() -> Vec<PromptSection> {
        vec![PromptSection::new("tool:bash", 105, BASH_PROMPT)]
    }

    fn prompt_sections_in(context: &ToolsContext) -> Vec<PromptSection> {
        let mut sections = Self::prompt_sections();
        if context.sandboxed {
            sections.push(PromptSection::new("sandbox", 110, SANDBOX_PROMPT));
        }
        sections
    }

    fn invoke(call: &ToolCall, host: &HostRef<'_>) -> Result<ToolOutput, String> {
        match call.tool.as_str() {
            "bash" => {
                let args = BashArgs::parse(call)?;
                if args.run_in_background {
                    let started = host
                        .start(args.spec(call))
                        .into_result()
                        .map_err(|e| format!("bash could not start the task: {e}"))?;
                    Ok(ToolOutput::new(
                        render::started_text(&started),
                        &serde_json::json!({
                            "task_id": started.task_id.as_str(),
                            "output_path": started.output_path.as_str(),
                        }),
                    ))
                } else {
                    match host.run(args.spec(call)) {
                        RResult::ROk(outcome) => Ok(ToolOutput::new(
                            render::model_text(&outcome),
                            &render::raw_output(&outcome),
                        )),
                        RResult::RErr(error) => {
                            Err(format!("bash could not run the command: {error}"))
                        }
                    }
                }
            }
            "bash_output" => {
                let args = TaskArgs::parse(call)?;
                args.check_owner(call, host)?;
                let read = host.read_output(args.task_id.as_str().into()).into_result()?;
                let report = TaskReport::read(&args.task_id, &read);
                Ok(ToolOutput::new(report.text(), &report.raw()))
            }
            "bash_kill" => {
                let args = TaskArgs::parse(call)?;
                args.check_owner(call, host)?;
                let outcome = host.kill(args.task_id.as_str().into()).into_result()?;
                let report = TaskReport::kill(&args.task_id, &outcome);
                Ok(ToolOutput::new(report.text(), &report.raw()))
            }
            other => Err(format!("tool-bash has no tool `{other}`")),
        }
    }

    fn present_call(call: &ToolCall) -> Result<Card, String> {
        match call.tool.as_str() {
            "bash" => {
                let args = BashArgs::parse(call)?;
                if args.run_in_background {
                    return Ok(generic(format!("Start in the background: {}", args.command), None));
                }
                Ok(Card::Terminal(
                    TerminalCard::new(&args.command, &args.workdir(call))
                        .with_description(args.description.as_deref()),
                ))
            }
            "bash_output" => {
                let args = TaskArgs::parse(call)?;
                Ok(generic(format!("Read output from background task {}", args.task_id), None))
            }
            "bash_kill" => {
                let args = TaskArgs::parse(call)?;
                Ok(generic(format!("Kill background task {}", args.task_id), None))
            }
            other => Err(format!("tool-bash has no tool `{other}`")),
        }
    }

    fn present_result(call: &ToolCall, output: &ToolOutput) -> Result<FinalCard, String> {
        let raw: serde_json::Value = serde_json::from_str(&output.raw_output)
            .map_err(|e| format!("bash result is not JSON: {e}"))?;
        match call.tool.as_str() {
            "bash" => {
                let args = BashArgs::parse(call)?;
                if args.run_in_background {
                    let task_id = raw["task_id"].as_str().unwrap_or("?");
                    let path = raw["output_path"].as_str().unwrap_or("?");
                    return Ok(FinalCard::new(
                        generic(
                            format!("Background task {task_id}: {}", args.command),
                            Some(format!("Running; full output: {path}")),
                        ),
                        CardStatus::Running,
                    ));
                }
                let Card::Terminal(card) = Self::present_call(call)? else {
                    return Err("foreground bash cards are terminals".to_owned());
                };
                let raw: RawOutput = serde_json::from_value(raw)
                    .map_err(|e| format!("bash result is not the expected JSON: {e}"))?;
                let failed = raw.exit_code != Some(0);
                let card = card.with_exit(TerminalExit::new(raw.exit_code, raw.signal.as_deref()));
                let status = if failed { CardStatus::Failed } else { CardStatus::Completed };
                Ok(FinalCard::new(Card::Terminal(card), status))
            }
            "bash_output" | "bash_kill" => {
                let Card::Generic(mut card) = Self::present_call(call)? else {
                    return Err("task cards are generic".to_owned());
                };
                card.content = ROption::RSome(render::fenced(&output.text).into());
                Ok(FinalCard::new(Card::Generic(card), CardStatus::Completed))
            }
            other => Err(format!("tool-bash has no tool `{other}`")),
        }
    }
}

/// The arguments of `bash`; with `sandboxed`, the escalation fields too.
fn bash_schema(sandboxed: bool) -> serde_json::Value {
    let mut schema = serde_json::json!({
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "description": "The command line, run as `bash -c <command>`."
            },
            "timeout": {
                "type": "integer",
                "minimum": 1,
                "maximum": 600000,
                "description": "Milliseconds before the command is stopped (default 120000, at most 600000). Not for background tasks."
            },
            "description": {
                "type": "string",
                "description": "What the command does, in 5 to 10 words, shown to the user."
            },
            "workdir": {
                "type": "string",
                "description": "Directory to run in; a relative path is taken from the session's working directory."
            },
            "run_in_background": {
                "type": "boolean",
                "description": "Start the command as a background task and return its id at once."
            }
        },
        "required": ["command"],
        "additionalProperties": false
    });
    if sandboxed {
        SandboxRequest::add_to_schema(&mut schema, "command");
    }
    schema
}

fn generic(title: String, content: Option<String>) -> Card {
    Card::Generic(GenericCard::new(title, ToolKind::Execute, content))
}

hotsh_abi::export_plugin!(ToolBash);
