//! The host's adapter for plugins speaking interface v1: converts between the ABI's
//! `#[repr(C)]` types and the host's own, and is the only code that calls v1 functions.

use super::services::CallServices;
use crate::model::ToolDefinition;
use crate::prompt::PromptSection;
use crate::session::{
    CallStatus, Card, FileDiff, FileLocation, GenericCard, TerminalCard, TerminalExit, ToolKind,
};
use abi_stable::sabi_trait::TD_Opaque;
use hotsh_abi::v1 as abi;
use hotsh_abi::{HostServices_TO, PluginModuleRef, RResult, RString};

/// One call as a plugin receives it.
#[derive(Debug, Clone)]
pub(crate) struct PluginCall {
    pub(crate) call_id: String,
    pub(crate) session_id: String,
    pub(crate) tool: String,
    pub(crate) arguments: String,
    pub(crate) cwd: String,
}

/// What a successful call returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PluginOutput {
    pub(crate) text: String,
    /// JSON text.
    pub(crate) raw_output: String,
}

/// A loaded v1 module. Copyable: it is a pointer to a table that lives as long as the process.
#[derive(Clone, Copy)]
pub(crate) struct PluginV1 {
    module: PluginModuleRef,
}

impl std::fmt::Debug for PluginV1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginV1").finish_non_exhaustive()
    }
}

fn result<T>(value: RResult<T, hotsh_abi::RString>) -> Result<T, String> {
    value.into_result().map_err(|e| text(e, MAX_RESULT_TEXT))
}

impl PluginV1 {
    pub(crate) fn new(module: PluginModuleRef) -> Self {
        Self { module }
    }

    pub(crate) fn manifest(&self) -> Result<(String, String), String> {
        let manifest = result((self.module.manifest())())?;
        if manifest.name.trim().is_empty() {
            return Err("the plugin's manifest has an empty name".to_owned());
        }
        Ok((text(manifest.name, MAX_NAME), text(manifest.version, MAX_NAME)))
    }

    pub(crate) fn tools(&self, context: &abi::ToolsContext) -> Result<Vec<ToolDefinition>, String> {
        result((self.module.tools())(context))?
            .into_iter()
            .map(|tool| {
                let input_schema: serde_json::Value = serde_json::from_str(&tool.input_schema)
                    .map_err(|e| {
                        format!("the input schema of tool `{}` is not JSON: {e}", tool.name)
                    })?;
                Ok(ToolDefinition {
                    name: text(tool.name, MAX_NAME),
                    description: text(tool.description, MAX_CARD_TEXT),
                    input_schema: input_schema.into(),
                    effects: crate::model::ToolEffects {
                        runs_commands: tool.effects.runs_commands(),
                        writes_files: tool.effects.writes_files(),
                        concurrent: false,
                    },
                })
            })
            .collect()
    }

    pub(crate) fn prompt_sections(
        &self,
        context: &abi::ToolsContext,
    ) -> Result<Vec<PromptSection>, String> {
        Ok(result((self.module.prompt_sections())(context))?
            .into_iter()
            .map(|s| PromptSection {
                id: text(s.id, MAX_NAME),
                order: s.order,
                text: text(s.text, MAX_CARD_TEXT),
            })
            .collect())
    }

    pub(crate) fn invoke(
        &self,
        call: &PluginCall,
        services: &CallServices,
    ) -> Result<PluginOutput, String> {
        let host = HostServices_TO::from_const(services, TD_Opaque);
        let output = result((self.module.invoke())(&to_abi(call), host))?;
        // Copied out bounded: a plugin's 200 MiB answer is never copied whole.
        let raw_output = if output.raw_output.len() > MAX_RAW_OUTPUT {
            serde_json::json!({
                "omitted": format!(
                    "the plugin's raw output was {} bytes, over the host's limit of {MAX_RAW_OUTPUT}",
                    output.raw_output.len()
                )
            })
            .to_string()
        } else {
            text(output.raw_output, MAX_RAW_OUTPUT)
        };
        Ok(PluginOutput { text: text(output.text, MAX_RESULT_TEXT), raw_output })
    }

    pub(crate) fn present_call(&self, call: &PluginCall) -> Result<Card, String> {
        result((self.module.present_call())(&to_abi(call))).map(|card| from_abi_card(card, call))
    }

    /// The final card and whether it shows as failed.
    pub(crate) fn present_result(
        &self,
        call: &PluginCall,
        output: &PluginOutput,
    ) -> Result<(Card, CallStatus), String> {
        let output = abi::ToolOutput::from_json_text(&*output.text, &*output.raw_output);
        let card = result((self.module.present_result())(&to_abi(call), &output))?;
        let status = match card.status {
            abi::CardStatus::Failed => CallStatus::Failed,
            abi::CardStatus::Running => CallStatus::Running,
            // `Completed`, or a status from a later 1.x.
            _ => CallStatus::Completed,
        };
        Ok((from_abi_card(card.card, call), status))
    }
}

impl PluginV1 {
    /// The hooks the plugin declares (event, matcher): none from a 1.0 plugin, whose module
    /// has no `hooks` function.
    pub(crate) fn hooks(
        &self,
        context: &abi::ToolsContext,
    ) -> Result<Vec<(String, String)>, String> {
        let Some(hooks) = self.module.hooks() else { return Ok(Vec::new()) };
        Ok(result(hooks(context))?
            .into_iter()
            .take(MAX_LOCATIONS)
            .map(|hook| (text(hook.event, MAX_NAME), text(hook.matcher, MAX_NAME)))
            .collect())
    }

    /// Runs one of the plugin's hooks: its answer, Claude Code's hook output as JSON text
    /// (empty: nothing to say).
    pub(crate) fn run_hook(
        &self,
        event: &str,
        payload: &str,
        services: &CallServices,
    ) -> Result<String, String> {
        let Some(run_hook) = self.module.run_hook() else { return Ok(String::new()) };
        let host = HostServices_TO::from_const(services, TD_Opaque);
        let mut call = abi::HookCall::default();
        call.event = event.into();
        call.payload = payload.into();
        let answer = result(run_hook(&call, host))?;
        Ok(text(answer.output, MAX_RESULT_TEXT))
    }

    /// Calls the plugin's `shutdown` hook.
    pub(crate) fn shutdown(&self) -> Result<(), String> {
        result((self.module.shutdown())())
    }
}

/// The most text of one result the model gets from a plugin (head and tail are kept).
pub(crate) const MAX_RESULT_TEXT: usize = 256 << 10;
/// The largest raw output passed on to the client.
pub(crate) const MAX_RAW_OUTPUT: usize = 1 << 20;
/// The most text a card (content or title) may carry.
const MAX_CARD_TEXT: usize = 64 << 10;
/// The most a name carries (a plugin's, a tool's, a signal's).
const MAX_NAME: usize = 256;
/// The most paths a card may point at.
const MAX_LOCATIONS: usize = 256;

/// A plugin's text as the host keeps it: bytes that are not UTF-8 (a plugin using `unsafe`
/// can send them) replaced, at most about `cap` bytes (head and tail), so that nothing a
/// plugin returns reaches the client or the log whole or broken.
fn text(text: RString, cap: usize) -> String {
    let bytes = text.into_bytes();
    match std::str::from_utf8(&bytes) {
        Ok(valid) if valid.len() <= cap => valid.to_owned(),
        _ => bounded(&String::from_utf8_lossy(&bytes), cap),
    }
}

/// `text` cut to about `cap` bytes: its head and tail around a marker naming what was left
/// out.
pub(crate) fn bounded(text: &str, cap: usize) -> String {
    hotsh_core::text::cut_middle(text, cap, cap / 2, cap / 2, |n| {
        format!("[… {n} bytes of the plugin's result omitted …]")
    })
}

fn to_abi(call: &PluginCall) -> abi::ToolCall {
    let mut abi_call = abi::ToolCall::new(&call.tool, &call.arguments, &call.cwd);
    abi_call.call_id = call.call_id.as_str().into();
    abi_call.session_id = call.session_id.as_str().into();
    abi_call
}

/// The host's card for a plugin's. A kind of card from a later hotsh-abi 1.x, which this
/// host cannot draw, becomes a plain card titled with the tool's name.
fn from_abi_card(card: abi::Card_NE, call: &PluginCall) -> Card {
    // Taken whole, not copied: a card's diffs hold whole file texts.
    let Ok(card) = card.into_enum() else {
        tracing::debug!(tool = %call.tool, "a kind of card this hotsh does not know; drawn plain");
        return plain_card(call);
    };
    match card {
        abi::Card::Terminal(t) => Card::terminal(TerminalCard {
            command: text(t.command, MAX_CARD_TEXT),
            description: t.description.into_option().map(|d| text(d, MAX_CARD_TEXT)),
            cwd: text(t.cwd, MAX_CARD_TEXT),
            exit: t.exit.into_option().map(|e| TerminalExit {
                exit_code: e.exit_code.into_option(),
                signal: e.signal.into_option().map(|s| text(s, MAX_NAME)),
                reason: None,
            }),
        }),
        abi::Card::Generic(g) => Card::generic(GenericCard {
            title: text(g.title, MAX_CARD_TEXT),
            kind: match g.kind {
                abi::ToolKind::Read => ToolKind::Read,
                abi::ToolKind::Edit => ToolKind::Edit,
                abi::ToolKind::Delete => ToolKind::Delete,
                abi::ToolKind::Move => ToolKind::Move,
                abi::ToolKind::Search => ToolKind::Search,
                abi::ToolKind::Execute => ToolKind::Execute,
                abi::ToolKind::Think => ToolKind::Think,
                abi::ToolKind::Fetch => ToolKind::Fetch,
                // `Other`, or a kind from a later 1.x.
                _ => ToolKind::Other,
            },
            content: g.content.into_option().map(|c| text(c, MAX_CARD_TEXT)),
            locations: g
                .locations
                .into_iter()
                .take(MAX_LOCATIONS)
                .map(|l| FileLocation {
                    path: text(l.path, MAX_CARD_TEXT),
                    line: l.line.into_option(),
                })
                .collect(),
            // Whole texts: a diff cut in the middle would show a change that was not made (the
            // plugin bounds what it sends).
            diffs: g
                .diffs
                .into_iter()
                .map(|d| FileDiff {
                    path: text(d.path, MAX_CARD_TEXT),
                    old_text: d.old_text.into_option().map(|t| text(t, usize::MAX)),
                    new_text: text(d.new_text, usize::MAX),
                })
                .collect(),
            session: None,
        }),
        // A variant this build of the interface defines but does not draw: none today.
        _ => plain_card(call),
    }
}

/// The card of a call whose plugin's card this host cannot draw: the tool's name.
fn plain_card(call: &PluginCall) -> Card {
    Card::generic(GenericCard {
        title: call.tool.clone(),
        kind: ToolKind::Other,
        content: None,
        locations: Vec::new(),
        diffs: Vec::new(),
        session: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_keeps_head_and_tail_on_char_boundaries() {
        assert_eq!(bounded("short", 10), "short");
        let text = format!("{}{}", "é".repeat(10), "z".repeat(10));
        let cut = bounded(&text, 10);
        assert!(cut.starts_with("éé\n[… "), "{cut}");
        assert!(cut.ends_with(" omitted …]\nzzzzz"), "{cut}");
    }
}
