//! The text the model reads and the structured result the client receives.

use hotsh_abi::CommandOutcome;
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
}

pub(crate) fn raw_output(outcome: &CommandOutcome) -> serde_json::Value {
    let raw = RawOutput {
        exit_code: outcome.exit_code.into_option(),
        signal: outcome.signal.as_ref().map(|s| s.to_string()).into_option(),
        timed_out: outcome.timed_out,
        timeout_ms: outcome.timeout_ms,
        aborted: outcome.aborted,
        truncated: outcome.truncated,
        spill_path: outcome
            .spill_path
            .as_ref()
            .map(|s| s.to_string())
            .into_option(),
        duration_ms: outcome.duration_ms,
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
        let path = outcome
            .spill_path
            .as_ref()
            .map_or("(unavailable)", |p| p.as_str());
        blocks.push(format!("[output truncated; full output: {path}]"));
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

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};
    use hotsh_abi::{ROption, RString};

    fn outcome(stdout: &str, stderr: &str, exit_code: Option<i32>) -> CommandOutcome {
        CommandOutcome {
            exit_code: exit_code.into(),
            signal: ROption::RNone,
            timed_out: false,
            timeout_ms: 120_000,
            aborted: false,
            stdout: stdout.into(),
            stderr: stderr.into(),
            truncated: false,
            spill_path: ROption::RNone,
            duration_ms: 3,
        }
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
    fn raw_output_round_trips() {
        let value = raw_output(&outcome("a", "", Some(2)));
        let raw: RawOutput = serde_json::from_value(value).expect("raw output parses");
        assert_eq!(raw.exit_code, Some(2));
        assert_eq!(raw.timeout_ms, 120_000);
    }
}
