//! The text the model reads and the structured result the client receives.

use hotsh_abi::{CommandOutcome, KillOutcome, TaskOutput, TaskStarted, TaskState, TaskStatus};
use serde::{Deserialize, Serialize};

/// The structured result, sent to the client as the card's raw output.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct RawOutput {
    pub(crate) exit_code: Option<i32>,
    pub(crate) signal: Option<String>,
    pub(crate) timed_out: bool,
    pub(crate) timeout_ms: u64,
    pub(crate) aborted: bool,
    pub(crate) truncated: bool,
    pub(crate) spill_path: Option<String>,
    pub(crate) duration_ms: u64,
    /// Absent in results logged before the sandbox existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sandbox: Option<SandboxRaw>,
}

/// The sandbox facts as the client receives them.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct SandboxRaw {
    pub(crate) mode: String,
    pub(crate) backend: String,
    pub(crate) enforcement: String,
    pub(crate) denied: Option<String>,
    pub(crate) escalation_available: bool,
}

pub(crate) fn raw_output(outcome: &CommandOutcome) -> serde_json::Value {
    let raw = RawOutput {
        exit_code: outcome.exit_code.into_option(),
        signal: outcome.signal.as_ref().map(|s| s.to_string()).into_option(),
        timed_out: outcome.timed_out,
        timeout_ms: outcome.timeout_ms,
        aborted: outcome.aborted,
        truncated: outcome.truncated,
        spill_path: outcome.spill_path.as_ref().map(|s| s.to_string()).into_option(),
        duration_ms: outcome.duration_ms,
        sandbox: Some(SandboxRaw {
            mode: outcome.sandbox.mode.as_str().to_owned(),
            backend: outcome.sandbox.backend.to_string(),
            enforcement: outcome.sandbox.enforcement.to_string(),
            denied: outcome.sandbox.denial.as_ref().map(|d| d.to_string()).into_option(),
            escalation_available: outcome.sandbox.escalation_available,
        }),
    };
    serde_json::to_value(raw).unwrap_or(serde_json::Value::Null)
}

/// stdout; then a `[stderr]` section; then the markers in their fixed order, the exit code
/// (when not 0) always last. A non-zero exit is a fact for the model, not an error.
pub(crate) fn model_text(outcome: &CommandOutcome) -> String {
    let mut blocks: Vec<String> = Vec::new();
    let stdout = outcome.stdout.trim_end_matches('\n');
    if !stdout.is_empty() {
        blocks.push(stdout.to_owned());
    }
    let stderr = outcome.stderr.trim_end_matches('\n');
    if !stderr.is_empty() {
        blocks.push(format!("[stderr]\n{stderr}"));
    }
    blocks.extend(outcome.sandbox.markers("bash"));
    if outcome.timed_out {
        blocks.push(format!("[timed out after {}ms]", outcome.timeout_ms));
    }
    if outcome.aborted {
        blocks.push("[aborted: the user cancelled the turn]".to_owned());
    }
    if let Some(signal) = outcome.signal.as_ref().into_option() {
        blocks.push(format!("[killed by signal: {signal}]"));
    }
    if outcome.truncated {
        blocks.push(match outcome.spill_path.as_ref().into_option() {
            None => "[output truncated; full output: (unavailable)]".to_owned(),
            Some(path) if outcome.spill_bytes < outcome.total_bytes => format!(
                "[output truncated; full output: {path} (its first {} of {} bytes only)]",
                outcome.spill_bytes, outcome.total_bytes
            ),
            Some(path) => format!("[output truncated; full output: {path}]"),
        });
    }
    match outcome.exit_code.into_option() {
        Some(0) | None => {}
        Some(code) => blocks.push(format!("[exit code: {code}]")),
    }
    if blocks.is_empty() {
        return "(no output)".to_owned();
    }
    blocks.join("\n")
}

/// What `bash` with `run_in_background` tells the model.
pub(crate) fn started_text(started: &TaskStarted) -> String {
    format!(
        "Started background task {id}. Read its output with bash_output {{\"task_id\": \"{id}\"}}; \
         stop it with bash_kill. Full output: {path}",
        id = started.task_id,
        path = started.output_path
    )
}

/// `[status: running]`, `[status: completed, exit code: 0]`, `[status: killed]`, …
pub(crate) fn status_line(status: &TaskStatus) -> String {
    match (status.state, status.exit_code.into_option(), status.signal.as_ref().into_option()) {
        (TaskState::Running, _, _) => "[status: running]".to_owned(),
        (TaskState::Killed, _, _) => "[status: killed]".to_owned(),
        (TaskState::Exited, Some(code), _) => format!("[status: completed, exit code: {code}]"),
        (TaskState::Exited, None, Some(signal)) => {
            format!("[status: completed, killed by signal: {signal}]")
        }
        (TaskState::Exited, None, None) => "[status: completed]".to_owned(),
        // A state from a later 1.x: ended, in a way this build cannot name.
        (state, _, _) => format!("[status: {}]", state.as_str()),
    }
}

/// What `bash_output` and `bash_kill` report.
pub(crate) struct TaskReport {
    task_id: String,
    body: String,
    status: TaskStatus,
    dropped_bytes: u64,
    output_path: Option<String>,
    killed: Option<bool>,
}

impl TaskReport {
    pub(crate) fn read(task_id: &str, read: &TaskOutput) -> Self {
        let text = read.text.trim_end_matches('\n');
        let mut body = if text.is_empty() { "(no new output)".to_owned() } else { text.to_owned() };
        if read.dropped_bytes > 0 {
            body = format!(
                "[{} earlier bytes were dropped before this read; full output: {}]\n{body}",
                read.dropped_bytes, read.output_path
            );
        }
        Self {
            task_id: task_id.to_owned(),
            body,
            status: read.status.clone(),
            dropped_bytes: read.dropped_bytes,
            output_path: Some(read.output_path.to_string()),
            killed: None,
        }
    }

    pub(crate) fn kill(task_id: &str, outcome: &KillOutcome) -> Self {
        let body = if outcome.killed {
            format!("Killed background task {task_id} and everything it started.")
        } else {
            format!("Background task {task_id} had already ended; nothing was killed.")
        };
        Self {
            task_id: task_id.to_owned(),
            body,
            status: outcome.status.clone(),
            dropped_bytes: 0,
            output_path: None,
            killed: Some(outcome.killed),
        }
    }

    pub(crate) fn text(&self) -> String {
        format!("{}\n{}", self.body, status_line(&self.status))
    }

    pub(crate) fn raw(&self) -> serde_json::Value {
        serde_json::json!({
            "task_id": self.task_id,
            "state": self.status.state.as_str(),
            "exit_code": self.status.exit_code.into_option(),
            "signal": self.status.signal.as_ref().map(|s| s.to_string()).into_option(),
            "dropped_bytes": self.dropped_bytes,
            "output_path": self.output_path,
            "killed": self.killed,
        })
    }
}

/// `text` in a fenced block, with a fence longer than any backtick run inside.
pub(crate) fn fenced(text: &str) -> String {
    let longest_run = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run.max(2) + 1);
    format!("{fence}\n{}\n{fence}", text.trim_end_matches('\n'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};
    use hotsh_abi::{ROption, RString};

    fn outcome(stdout: &str, stderr: &str, exit_code: Option<i32>) -> CommandOutcome {
        let mut outcome = CommandOutcome::default();
        outcome.exit_code = exit_code.into();
        outcome.timeout_ms = 120_000;
        outcome.stdout = stdout.into();
        outcome.stderr = stderr.into();
        outcome.total_bytes = (stdout.len() + stderr.len()) as u64;
        outcome.duration_ms = 3;
        outcome.sandbox.mode = hotsh_abi::SandboxMode::WorkspaceWrite;
        outcome.sandbox.backend = "landlock".into();
        outcome.sandbox.enforcement = "full".into();
        outcome
    }

    fn check(outcome: &CommandOutcome, expected: Expect) {
        expected.assert_eq(&model_text(outcome));
    }

    #[test]
    fn stdout_stderr_and_exit_code_last() {
        check(
            &outcome("a\nb", "err\n", Some(3)),
            expect![[r#"
                a
                b
                [stderr]
                err
                [exit code: 3]"#]],
        );
    }

    #[test]
    fn success_without_output_says_so() {
        check(&outcome("", "", Some(0)), expect!["(no output)"]);
    }

    #[test]
    fn every_marker_in_order() {
        let mut all = outcome("partial\n", "", None);
        all.timed_out = true;
        all.timeout_ms = 500;
        all.signal = ROption::RSome(RString::from("SIGTERM"));
        all.truncated = true;
        all.spill_path = ROption::RSome("/tmp/spill.log".into());
        all.spill_bytes = all.total_bytes;
        check(
            &all,
            expect![[r#"
                partial
                [timed out after 500ms]
                [killed by signal: SIGTERM]
                [output truncated; full output: /tmp/spill.log]"#]],
        );
    }

    #[test]
    fn the_sandbox_marker_comes_first_and_offers_escalation_only_when_available() {
        let mut denied = outcome("", "touch: cannot touch '/etc/x': Permission denied\n", Some(1));
        denied.sandbox.denial = ROption::RSome("file".into());
        check(
            &denied,
            expect![[r#"
                [stderr]
                touch: cannot touch '/etc/x': Permission denied
                [sandbox: file access denied under workspace-write mode]
                [exit code: 1]"#]],
        );
        denied.sandbox.escalation_available = true;
        denied.timed_out = true;
        denied.timeout_ms = 9;
        check(
            &denied,
            expect![[r#"
                [stderr]
                touch: cannot touch '/etc/x': Permission denied
                [sandbox: file access denied under workspace-write mode]
                [escalation available: if the task needs it, call bash again with `sandbox_permissions` and a `justification`; the user decides]
                [timed out after 9ms]
                [exit code: 1]"#]],
        );
    }

    #[test]
    fn timeout_is_reported_even_when_the_command_exited_zero() {
        let mut late = outcome("done", "", Some(0));
        late.timed_out = true;
        late.timeout_ms = 10;
        check(
            &late,
            expect![[r#"
                done
                [timed out after 10ms]"#]],
        );
    }

    #[test]
    fn truncation_without_spill_file_says_unavailable() {
        let mut cut = outcome("x", "", Some(1));
        cut.truncated = true;
        check(
            &cut,
            expect![[r#"
                x
                [output truncated; full output: (unavailable)]
                [exit code: 1]"#]],
        );
    }

    #[test]
    fn capped_spill_file_says_how_much_it_holds() {
        let mut cut = outcome("x", "", Some(0));
        cut.truncated = true;
        cut.spill_path = ROption::RSome("/tmp/s.log".into());
        cut.spill_bytes = 100;
        cut.total_bytes = 1000;
        check(
            &cut,
            expect![[r#"
                x
                [output truncated; full output: /tmp/s.log (its first 100 of 1000 bytes only)]"#]],
        );
    }

    #[test]
    fn status_lines() {
        let status = |state, code: Option<i32>, signal: Option<&str>| {
            let mut status = TaskStatus::default();
            status.state = state;
            status.exit_code = code.into();
            status.signal = signal.map(RString::from).into();
            status
        };
        assert_eq!(status_line(&status(TaskState::Running, None, None)), "[status: running]");
        assert_eq!(
            status_line(&status(TaskState::Killed, None, Some("SIGTERM"))),
            "[status: killed]"
        );
        assert_eq!(
            status_line(&status(TaskState::Exited, Some(3), None)),
            "[status: completed, exit code: 3]"
        );
        assert_eq!(
            status_line(&status(TaskState::Exited, None, Some("SIGSEGV"))),
            "[status: completed, killed by signal: SIGSEGV]"
        );
    }

    #[test]
    fn raw_output_round_trips() {
        let value = raw_output(&outcome("a", "", Some(2)));
        let raw: RawOutput = serde_json::from_value(value).expect("raw output parses");
        assert_eq!(raw.exit_code, Some(2));
        assert_eq!(raw.timeout_ms, 120_000);
    }
}
