//! The `bash` tool: runs a command through the host's executor and tells the model exactly
//! what happened (stdout, `[stderr]`, then markers in a fixed order).

mod render;

use hotsh_abi::{
    Card, CommandSpec, FinalCard, HostRef, Manifest, Plugin, PromptSection, ROption, RResult,
    TerminalCard, TerminalExit, ToolCall, ToolOutput, ToolSpec,
};
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
}

impl BashArgs {
    fn parse(call: &ToolCall) -> Result<Self, String> {
        let args: Self = call.arguments()?;
        if args.command.trim().is_empty() {
            return Err("invalid arguments for `bash`: `command` is empty".to_owned());
        }
        if args.timeout == Some(0) {
            return Err("invalid arguments for `bash`: `timeout` must be at least 1 ms".to_owned());
        }
        Ok(args)
    }

    /// The directory the command runs in: `workdir` resolved against the session's cwd.
    fn workdir(&self, call: &ToolCall) -> String {
        match &self.workdir {
            Some(dir) => Path::new(call.cwd.as_str())
                .join(dir)
                .to_string_lossy()
                .into_owned(),
            None => call.cwd.to_string(),
        }
    }
}

const BASH_DESCRIPTION: &str = "Runs a command with `bash -c` and returns its output. \
Each call starts a fresh shell in the session's working directory (or `workdir`); `cd`, \
variables and other shell state do not carry over between calls. stdin is empty.";

const BASH_PROMPT: &str = "\
## Running commands

Use the `bash` tool to run shell commands. The result lists stdout, then stderr after a \
`[stderr]` line, then markers. A command that failed ends with a line `[exit code: N]`; when \
that line is absent the command exited 0. Check for it before you rely on a command having \
worked. Other markers say the command was stopped: `[timed out after Nms]` (the default \
timeout is 120000 ms, at most 600000 ms; pass `timeout` for longer commands) and \
`[killed by signal: NAME]`. Long output keeps its beginning and its end around a marker; \
`[output truncated; full output: PATH]` names a file holding all of it, which you can search \
with grep or read in parts.";

/// The tool-bash plugin.
#[derive(Debug)]
pub struct ToolBash;

impl Plugin for ToolBash {
    fn manifest() -> Manifest {
        Manifest::new("tool-bash", env!("CARGO_PKG_VERSION"))
    }

    fn tools() -> Vec<ToolSpec> {
        let schema = serde_json::json!({
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
                    "description": "Milliseconds before the command is stopped (default 120000, at most 600000)."
                },
                "description": {
                    "type": "string",
                    "description": "What the command does, in 5 to 10 words, shown to the user."
                },
                "workdir": {
                    "type": "string",
                    "description": "Directory to run in; a relative path is taken from the session's working directory."
                }
            },
            "required": ["command"],
            "additionalProperties": false
        });
        vec![ToolSpec::new("bash", BASH_DESCRIPTION, &schema)]
    }

    fn prompt_sections() -> Vec<PromptSection> {
        vec![PromptSection::new("tool:bash", 105, BASH_PROMPT)]
    }

    fn invoke(call: &ToolCall, host: &HostRef<'_>) -> Result<ToolOutput, String> {
        let args = BashArgs::parse(call)?;
        let spec = CommandSpec {
            command: args.command.as_str().into(),
            workdir: args.workdir(call).into(),
            timeout_ms: args.timeout.into(),
        };
        match host.run(spec) {
            RResult::ROk(outcome) => Ok(ToolOutput::new(
                render::model_text(&outcome),
                &render::raw_output(&outcome),
            )),
            RResult::RErr(error) => Err(format!("bash could not run the command: {error}")),
        }
    }

    fn present_call(call: &ToolCall) -> Result<Card, String> {
        let args = BashArgs::parse(call)?;
        Ok(Card::Terminal(TerminalCard {
            command: args.command.as_str().into(),
            description: args.description.as_deref().map(Into::into).into(),
            cwd: args.workdir(call).into(),
            exit: ROption::RNone,
        }))
    }

    fn present_result(call: &ToolCall, output: &ToolOutput) -> Result<FinalCard, String> {
        let Card::Terminal(mut card) = Self::present_call(call)? else {
            return Err("bash cards are terminals".to_owned());
        };
        let raw: render::RawOutput = serde_json::from_str(&output.raw_output)
            .map_err(|e| format!("bash result is not the expected JSON: {e}"))?;
        let failed = raw.exit_code != Some(0);
        card.exit = ROption::RSome(TerminalExit {
            exit_code: raw.exit_code.into(),
            signal: raw.signal.map(Into::into).into(),
        });
        Ok(FinalCard {
            card: Card::Terminal(card),
            failed,
        })
    }
}

hotsh_abi::export_plugin!(ToolBash);
