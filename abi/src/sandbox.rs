//! Helpers for tools whose calls run under the host's sandbox (commands, file writes): the
//! escalation arguments, their schema, and the markers a denial gives the model. Plain code
//! compiled into each plugin, not part of the interface's layout.

use crate::v1::{SandboxFacts, SandboxMode, SandboxRequest};

impl SandboxRequest {
    /// The `sandbox_permissions` and `justification` arguments of a call to `tool`, checked:
    /// both or neither, and a mode wider than read-only.
    pub fn from_arguments(
        tool: &str,
        permissions: Option<&str>,
        justification: Option<&str>,
    ) -> Result<Option<Self>, String> {
        match (permissions, justification.map(str::trim)) {
            (None, None) => Ok(None),
            (Some(_), None | Some("")) => Err(format!(
                "invalid arguments for `{tool}`: `sandbox_permissions` needs a `justification` the user reads before deciding"
            )),
            (None, Some(_)) => Err(format!(
                "invalid arguments for `{tool}`: `justification` is only for a `sandbox_permissions` request"
            )),
            (Some(mode), Some(justification)) => match SandboxMode::parse(mode) {
                Some(SandboxMode::ReadOnly) | None => Err(format!(
                    "invalid arguments for `{tool}`: `sandbox_permissions` must be `workspace-write` or `danger-full-access`, got `{mode}`"
                )),
                Some(mode) => Ok(Some(Self::new(mode, justification))),
            },
        }
    }

    /// Adds `sandbox_permissions` and `justification` to the JSON schema of a tool's
    /// arguments; `noun` is what they widen (`command`, `write`).
    pub fn add_to_schema(schema: &mut serde_json::Value, noun: &str) {
        schema["properties"]["sandbox_permissions"] = serde_json::json!({
            "type": "string",
            "enum": ["workspace-write", "danger-full-access"],
            "description": format!("Only after the sandbox refused this {noun}: the wider mode it needs, for this one call. The user is asked first. Requires `justification`.")
        });
        schema["properties"]["justification"] = serde_json::json!({
            "type": "string",
            "description": format!("Why the {noun} needs `sandbox_permissions`, in one sentence the user reads.")
        });
    }
}

impl SandboxFacts {
    /// The markers the model reads first when the sandbox refused something: what was denied
    /// under which mode, and whether calling `tool` again with a wider mode may help.
    pub fn markers(&self, tool: &str) -> Vec<String> {
        let Some(denial) = self.denial.as_ref().into_option() else {
            return Vec::new();
        };
        let what = match denial.as_str() {
            "network" => "network access",
            "syscall" => "a system call",
            _ => "file access",
        };
        let mut markers =
            vec![format!("[sandbox: {what} denied under {} mode]", self.mode.as_str())];
        if self.escalation_available {
            markers.push(format!(
                "[escalation available: if the task needs it, call {tool} again with `sandbox_permissions` and a `justification`; the user decides]"
            ));
        }
        markers
    }
}
