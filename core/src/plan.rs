//! The plan the model keeps for the user to watch: a tool provider of the core's own (it
//! needs nothing but the session), whose one tool replaces the plan. The plan is an event of
//! the session (logged, replayed on load, shown by clients as their plan panel) and goes into
//! compaction summaries.

use crate::model::{ToolDefinition, ToolEffects};
use crate::session::{PlanEntry, PlanStatus, SessionEvent};
use crate::tools::{Call, CallResult, ToolProvider, fail_without_running};
use futures::future::BoxFuture;
use serde::Deserialize;

/// The tool's name.
pub const TOOL: &str = "update_plan";
/// The most entries a plan holds, and the longest entry.
const MAX_ENTRIES: usize = 50;
const MAX_ENTRY_CHARS: usize = 500;

/// The tool's arguments.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    plan: Vec<PlanEntry>,
    #[serde(default)]
    explanation: Option<String>,
}

/// The provider of the plan tool.
#[derive(Debug, Default)]
pub struct PlanTool;

impl PlanTool {
    /// Made once: it is offered with every request.
    fn definition() -> ToolDefinition {
        static DEFINITION: std::sync::LazyLock<ToolDefinition> =
            std::sync::LazyLock::new(PlanTool::made);
        DEFINITION.clone()
    }

    fn made() -> ToolDefinition {
        ToolDefinition {
            name: TOOL.to_owned(),
            description: "Keep a short plan of the work the user can watch: call it with the \
                          whole plan when you start a task of several steps and whenever a \
                          step's status changes (at most one step in_progress at a time). \
                          Skip it for simple one-step requests."
                .to_owned(),
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "plan": {
                        "type": "array",
                        "description": "The whole plan, in order (it replaces the previous one).",
                        "items": {
                            "type": "object",
                            "properties": {
                                "step": {"type": "string"},
                                "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                                "priority": {"type": "string", "enum": ["high", "medium", "low"]}
                            },
                            "required": ["step", "status"],
                            "additionalProperties": false
                        }
                    },
                    "explanation": {"type": "string", "description": "Why the plan changed (optional)."}
                },
                "required": ["plan"],
                "additionalProperties": false
            })
            .into(),
            effects: ToolEffects::default(),
        }
    }
}

/// The plan the arguments give, or why they are refused.
fn parse(arguments: &str) -> Result<Vec<PlanEntry>, String> {
    let parsed: Arguments = serde_json::from_str(arguments).map_err(|e| {
        format!(
            "invalid arguments for {TOOL}: {e}; expected {{\"plan\": [{{\"step\": \"…\", \
             \"status\": \"pending\" | \"in_progress\" | \"completed\", \"priority\": \"high\" | \
             \"medium\" | \"low\"}}]}}"
        )
    })?;
    let _ = parsed.explanation;
    if parsed.plan.len() > MAX_ENTRIES {
        return Err(format!(
            "a plan holds at most {MAX_ENTRIES} steps; this one has {}",
            parsed.plan.len()
        ));
    }
    if let Some(long) = parsed.plan.iter().find(|e| e.step.chars().count() > MAX_ENTRY_CHARS) {
        return Err(format!(
            "a step is at most {MAX_ENTRY_CHARS} characters; one has {}",
            long.step.chars().count()
        ));
    }
    if parsed.plan.iter().any(|e| e.step.trim().is_empty()) {
        return Err("a step of the plan is empty".to_owned());
    }
    Ok(parsed.plan)
}

impl ToolProvider for PlanTool {
    fn prepare(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    fn tools(&self, _planning: bool) -> BoxFuture<'_, Vec<ToolDefinition>> {
        Box::pin(async { vec![Self::definition()] })
    }

    fn call<'a>(&'a self, call: Call<'a>) -> Option<BoxFuture<'a, CallResult>> {
        (call.call.name == TOOL).then(|| -> BoxFuture<'a, CallResult> {
            Box::pin(async move {
                match parse(&call.call.arguments) {
                    Ok(entries) => {
                        let done =
                            entries.iter().filter(|e| e.status == PlanStatus::Completed).count();
                        let text = format!("Plan updated: {done} of {} steps done.", entries.len());
                        call.session.emit(SessionEvent::Plan { entries }).await;
                        CallResult { text, is_error: false }
                    }
                    Err(text) => {
                        fail_without_running(call, &text).await;
                        CallResult { text, is_error: true }
                    }
                }
            })
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::session::PlanPriority;

    #[test]
    fn plans_parse_and_bad_ones_are_refused_saying_why() {
        let plan = parse(r#"{"plan": [{"step": "read", "status": "completed"}, {"step": "fix", "status": "in_progress", "priority": "high"}]}"#).unwrap();
        assert_eq!(plan[1].priority, PlanPriority::High);
        assert_eq!(plan[0].priority, PlanPriority::Medium);
        assert_eq!(crate::session::describe_plan(&plan), "[x] read\n[~] fix");
        assert!(
            parse(r#"{"plan": [{"step": "x", "status": "done"}]}"#)
                .unwrap_err()
                .contains("expected")
        );
        assert!(parse(r#"{"steps": []}"#).is_err());
        assert!(
            parse(r#"{"plan": [{"step": " ", "status": "pending"}]}"#)
                .unwrap_err()
                .contains("empty")
        );
        let many = serde_json::json!({"plan": (0..51).map(|i| serde_json::json!({"step": i.to_string(), "status": "pending"})).collect::<Vec<_>>()});
        assert!(parse(&many.to_string()).unwrap_err().contains("at most 50"));
    }
}
