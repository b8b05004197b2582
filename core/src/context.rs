//! The model's context: how much of its window a session uses, and compaction, which replaces
//! the history with a summary when it would not fit any more.
//!
//! Token counts come from the provider when it reports them (the prompt and completion of the
//! last request); between two reports, and when a provider reports none, they are estimated
//! at four bytes a token (the usual rule for English text and code), and marked as estimates.

use crate::model::{Message, ModelRequest, Usage};
use crate::text::{cut_middle, floor_char_boundary};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The window assumed for a model nobody names one for (conservative: compaction comes early
/// rather than a request the provider refuses).
pub const DEFAULT_WINDOW: u64 = 32_768;
/// Compaction before a request that would use more than this share of the window.
pub const DEFAULT_COMPACT_AT: f64 = 0.85;
/// Model requests one turn may make before it ends with `max_turn_requests`.
pub const DEFAULT_MAX_TURN_REQUESTS: u32 = 200;
/// The newest tool output a request carries whole, in tokens; older output is cleared from
/// it (see [`cleared_upto`]). opencode keeps as much before it prunes.
pub const DEFAULT_KEEP_TOOL_OUTPUT: u64 = 40_000;
/// The shortest tool output a request clears: a shorter one costs little more than what
/// replaces it.
pub const CLEARED_MIN_BYTES: usize = 512;

/// What bounds a turn's use of its model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// The model's context window, in tokens.
    pub window: u64,
    /// The share of the window (0 < x ≤ 1) past which the history is compacted first.
    pub compact_at: f64,
    /// Model requests per turn.
    pub max_requests: u32,
    /// The newest tool output requests carry whole, in tokens: older output is cleared from
    /// them ([`cleared_upto`]). `None`: every output goes whole, always.
    pub keep_tool_output: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            window: DEFAULT_WINDOW,
            compact_at: DEFAULT_COMPACT_AT,
            max_requests: DEFAULT_MAX_TURN_REQUESTS,
            keep_tool_output: Some(DEFAULT_KEEP_TOOL_OUTPUT),
        }
    }
}

impl Limits {
    /// The tokens past which a request is compacted first.
    pub fn threshold(&self) -> u64 {
        (self.window as f64 * self.compact_at.clamp(0.05, 1.0)) as u64
    }
}

/// The context windows of the models hotsh names (by the provider's model name; the longest
/// matching prefix wins). A profile's `context_window` overrides them.
const WINDOWS: &[(&str, u64)] = &[
    ("deepseek-chat", 128_000),
    ("deepseek-reasoner", 128_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-5", 400_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
];

/// The window of `model` as [`WINDOWS`] knows it.
pub fn known_window(model: &str) -> Option<u64> {
    WINDOWS
        .iter()
        .filter(|(prefix, _)| model.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, window)| *window)
}

/// How many bytes of a history's tool output, from its start, a request clears when the
/// history holds `total` bytes of it and `keep` tokens are carried whole: none until the
/// newer output passes `keep` by half as much again, then in steps of half of `keep`. An
/// output whose end lies within those bytes is sent as [`cleared_output`]. The steps keep
/// the requests between them alike from their start (a provider's prompt cache serves what
/// they share), and every output cleared has at least `keep` tokens of newer output after it.
pub fn cleared_upto(total: u64, keep: u64) -> u64 {
    let keep = keep.saturating_mul(4);
    let step = (keep / 2).max(1);
    match total.checked_sub(keep) {
        Some(older) if older >= step => older / step * step,
        _ => 0,
    }
}

/// What a request carries instead of an older tool output of `bytes` bytes: these two
/// around the number.
const CLEARED_BEFORE: &str =
    "[hotsh cleared this older output from the conversation to save context (";
const CLEARED_AFTER: &str =
    " bytes; the session's log keeps it). Run the call again if you need it.]";

/// What a request carries instead of an older tool output of `bytes` bytes.
pub fn cleared_output(bytes: usize) -> String {
    format!("{CLEARED_BEFORE}{bytes}{CLEARED_AFTER}")
}

/// The bytes a request saves by clearing a tool output `text`.
pub fn cleared_saving(text: &str) -> u64 {
    if text.len() < CLEARED_MIN_BYTES {
        return 0;
    }
    let digits = text.len().ilog10() as usize + 1;
    text.len().saturating_sub(CLEARED_BEFORE.len() + digits + CLEARED_AFTER.len()) as u64
}

/// Tokens of `bytes` of text, estimated.
pub fn tokens_of(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// The bytes of a message that count toward the context.
fn message_bytes(message: &Message) -> usize {
    // Roles, ids and framing: a few tokens per message.
    const FRAMING: usize = 16;
    FRAMING
        + match message {
            Message::User { text, images } => {
                // An image costs about a thousand tokens with the providers that take them.
                text.len() + images.len() * 4096
            }
            Message::Assistant { text, reasoning, tool_calls } => {
                text.len()
                    + reasoning.as_ref().map_or(0, String::len)
                    + tool_calls
                        .iter()
                        .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                        .sum::<usize>()
            }
            Message::Tool { call_id, text, .. } => call_id.len() + text.len(),
            Message::Notice { text } => text.len(),
        }
}

/// Estimated tokens of some messages.
pub fn messages_tokens(messages: &[Arc<Message>]) -> u64 {
    tokens_of(messages.iter().map(|m| message_bytes(m)).sum())
}

fn tools_bytes(request: &ModelRequest) -> usize {
    request
        .tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.input_schema.json().len())
        .sum()
}

/// What a model's tokens cost, per million (a profile's prices).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Prompt tokens served from the provider's cache (default: as `input`).
    #[serde(default)]
    pub cached_input: Option<f64>,
    /// ISO 4217 (`USD`), or another unit.
    pub currency: String,
}

impl Price {
    /// What `usage` cost, when it says how many tokens went each way.
    pub fn of(&self, usage: &Usage) -> Option<f64> {
        let prompt = usage.prompt_tokens? as f64;
        let completion = usage.completion_tokens.unwrap_or(0) as f64;
        let cached = (usage.cached_tokens.unwrap_or(0) as f64).min(prompt);
        let cached_price = self.cached_input.unwrap_or(self.input);
        Some(
            ((prompt - cached) * self.input + cached * cached_price + completion * self.output)
                / 1e6,
        )
    }
}

/// What a session has cost so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spent {
    pub amount: f64,
    pub currency: String,
}

/// How much of the window a session uses, as the client's indicator shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextUse {
    /// Tokens in the context: the last request's prompt and completion.
    pub used: u64,
    /// The window.
    pub size: u64,
    /// `used` is hotsh's estimate (the provider reported nothing usable).
    #[serde(default)]
    pub estimated: bool,
    /// Prompt tokens the provider served from its cache, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<u64>,
    /// What the session has cost so far, when its model's profile gives prices (answers
    /// whose provider reported no usage count nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Spent>,
}

/// The context use after a request: the provider's counts when they are plausible (present,
/// and not beyond four windows), else `estimate`.
pub fn context_use(usage: Option<&Usage>, estimate: u64, window: u64) -> ContextUse {
    let reported = usage.and_then(|u| match (u.prompt_tokens, u.completion_tokens) {
        (Some(prompt), completion) => Some(prompt.saturating_add(completion.unwrap_or(0))),
        (None, _) => u.total_tokens,
    });
    let plausible = reported.filter(|&used| used > 0 && used <= window.saturating_mul(4));
    if reported.is_some() && plausible.is_none() {
        tracing::warn!(?usage, "the provider's token counts are not plausible; estimating");
    }
    ContextUse {
        used: plausible.unwrap_or(estimate),
        size: window,
        estimated: plausible.is_none(),
        cached: usage.and_then(|u| u.cached_tokens),
        cost: None,
    }
}

/// Estimated tokens of a request's system prompt and tools.
pub fn fixed_tokens(request: &ModelRequest) -> u64 {
    tokens_of(request.system.len() + tools_bytes(request))
}

/// Why a compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The next request would have passed the threshold.
    Auto,
    /// The provider answered that the context is too long.
    Overflow,
    /// The user asked (`/compact`).
    Manual,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Auto => "auto",
            Trigger::Overflow => "overflow",
            Trigger::Manual => "manual",
        }
    }
}

/// A compaction, as logged: the history it leaves is [`Compaction::history`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    /// The id of its card (`call-N`).
    pub id: String,
    pub trigger: Trigger,
    /// What the user asked the summary to focus on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub focus: Option<String>,
    pub summary: String,
    /// The user's most recent prompts, kept as they were (oldest first).
    pub kept_prompts: Vec<String>,
    /// Messages of the history it replaced.
    pub replaced: usize,
    /// Estimated tokens of the history before and after.
    pub tokens_before: u64,
    pub tokens_after: u64,
}

/// How the summary is introduced to the model.
const SUMMARY_HEADER: &str = "[The conversation so far was compacted to fit the context window. \
Your summary of it (the full thread is still in the session's log):]\n\n";

impl Compaction {
    /// The history after it: the kept prompts, then the summary as one message.
    pub fn history(&self) -> Vec<Arc<Message>> {
        let user = |text: String| Arc::new(Message::User { text, images: Vec::new() });
        let mut history: Vec<Arc<Message>> = self.kept_prompts.iter().cloned().map(user).collect();
        history.push(user(summary_message(&self.summary)));
        history
    }
}

fn summary_message(summary: &str) -> String {
    format!("{SUMMARY_HEADER}{}", summary.trim())
}

/// The user's most recent prompts (not notices), oldest first, within `budget` tokens; the
/// last one is cut to the budget when it alone is longer.
pub fn recent_prompts(history: &[Arc<Message>], budget: u64) -> Vec<String> {
    let mut kept = Vec::new();
    let mut left = budget;
    for message in history.iter().rev() {
        let Message::User { text, .. } = message.as_ref() else { continue };
        if text.starts_with(SUMMARY_HEADER) {
            continue;
        }
        let cost = tokens_of(text.len());
        if cost <= left {
            left -= cost;
            kept.push(text.clone());
        } else {
            if kept.is_empty() {
                let cut = floor_char_boundary(text, (budget as usize).saturating_mul(4));
                kept.push(format!(
                    "{}\n[… the rest of this prompt was cut at compaction …]",
                    &text[..cut]
                ));
            }
            break;
        }
    }
    kept.reverse();
    kept
}

/// What the summary request asks for: what a coding session needs to go on.
pub fn summary_instruction(focus: Option<&str>, plan: Option<&str>) -> String {
    let mut text = String::from(
        "[hotsh: the conversation is being compacted to free the context window. Do not call \
         any tool. Write a summary of this conversation that lets you continue the work without it. Keep, in this order:\n\
         1. The user's task and every constraint or preference they stated, in their words \
         where it matters.\n\
         2. Decisions taken and why.\n\
         3. Files read, created or changed, with their current state.\n\
         4. Errors met and what fixed them (or that nothing did yet).\n\
         5. The plan and where it stands.\n\
         6. Background tasks still running (their ids and commands).\n\
         7. What you were doing when this summary was asked for, and the next step.\n\
         Be concrete (paths, names, commands, numbers); leave out what no longer matters. \
         Answer with the summary only.]",
    );
    if let Some(plan) = plan {
        text.push_str(&format!("\n\nThe current plan:\n{plan}"));
    }
    if let Some(focus) = focus.map(str::trim).filter(|f| !f.is_empty()) {
        text.push_str(&format!("\n\nThe user asks the summary to focus on: {focus}"));
    }
    text
}

/// The history as a summary request carries it: each tool result, notice, reasoning and
/// tool call's arguments longer than `room` bytes (a quarter of `room` tokens) keeps its head and tail only (a command's whole output rarely matters to
/// a summary; what it showed at its start and end does).
pub fn shrunk_for_summary(messages: &[Arc<Message>], room: u64) -> Vec<Arc<Message>> {
    let cap = (room as usize).max(256);
    let shrink = |text: &String| -> String {
        cut_middle(text, cap, cap / 2, cap / 4, |n| format!("[… {n} bytes cut for the summary …]"))
    };
    messages
        .iter()
        .map(|message| match message.as_ref() {
            Message::Tool { text, .. } | Message::Notice { text } if text.len() <= cap => {
                Arc::clone(message)
            }
            Message::User { .. } => Arc::clone(message),
            Message::Tool { call_id, text, is_error } => Arc::new({
                Message::Tool { call_id: call_id.clone(), text: shrink(text), is_error: *is_error }
            }),
            Message::Notice { text } => Arc::new(Message::Notice { text: shrink(text) }),
            Message::Assistant { text, reasoning, tool_calls } => Arc::new(Message::Assistant {
                text: text.clone(),
                reasoning: reasoning.as_ref().map(shrink),
                tool_calls: tool_calls
                    .iter()
                    .map(|call| crate::model::ModelToolCall {
                        arguments: shrink(&call.arguments),
                        ..call.clone()
                    })
                    .collect(),
            }),
        })
        .collect()
}

/// The oldest messages to leave out of a summary request so that it fits `room` tokens:
/// whole messages from the front, never a tool result without the call before it.
pub fn fit_from_front(messages: &[Arc<Message>], room: u64) -> usize {
    let mut total = messages_tokens(messages);
    let mut skip = 0;
    while total > room && skip < messages.len() {
        total = total.saturating_sub(messages_tokens(&messages[skip..=skip]));
        skip += 1;
    }
    // A tool result whose call was left out cannot start the request.
    while skip < messages.len() && matches!(*messages[skip], Message::Tool { .. }) {
        skip += 1;
    }
    skip
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Arc<Message> {
        Arc::new(Message::User { text: text.into(), images: Vec::new() })
    }

    #[test]
    fn recent_prompts_keep_the_newest_within_the_budget() {
        let history = vec![
            user(&"a".repeat(400)),
            user("bb"),
            Arc::new(Message::Notice { text: "n".into() }),
            user("cc"),
        ];
        assert_eq!(recent_prompts(&history, 10), ["bb", "cc"]);
        let long = vec![user(&"x".repeat(100))];
        let kept = recent_prompts(&long, 5);
        assert!(kept[0].starts_with("xxxxxxxxxxxxxxxxxxxx\n[…"), "{kept:?}");
    }

    #[test]
    fn implausible_usage_is_replaced_by_the_estimate() {
        let usage =
            Usage { prompt_tokens: Some(10), completion_tokens: Some(5), ..Usage::default() };
        assert_eq!(context_use(Some(&usage), 99, 1000).used, 15);
        let absurd = Usage { prompt_tokens: Some(u64::MAX), ..Usage::default() };
        let shown = context_use(Some(&absurd), 99, 1000);
        assert_eq!((shown.used, shown.estimated), (99, true));
        assert!(context_use(None, 7, 1000).estimated);
    }

    #[test]
    fn a_cleared_output_saves_its_length_less_its_placeholder() {
        for bytes in [512, 999, 1_000, 4_096, 123_456] {
            let saved = cleared_saving(&"a".repeat(bytes));
            assert_eq!(saved as usize, bytes - cleared_output(bytes).len(), "{bytes}");
        }
        assert_eq!(cleared_saving(&"a".repeat(511)), 0);
    }

    #[test]
    fn known_windows_take_the_longest_prefix() {
        assert_eq!(known_window("gpt-4o-mini"), Some(128_000));
        assert_eq!(known_window("gpt-4.1-nano"), Some(1_047_576));
        assert_eq!(known_window("qwen"), None);
    }

    #[test]
    fn a_summary_request_never_starts_with_a_tool_result() {
        let call = crate::model::ModelToolCall {
            id: "c".into(),
            name: "t".into(),
            arguments: "{}".into(),
        };
        let history = vec![
            user(&"a".repeat(4000)),
            Arc::new(Message::Assistant {
                text: String::new(),
                reasoning: None,
                tool_calls: vec![call],
            }),
            Arc::new(Message::Tool { call_id: "c".into(), text: "out".into(), is_error: false }),
            user("next"),
        ];
        assert_eq!(fit_from_front(&history, 12), 3);
        assert_eq!(fit_from_front(&history, 50), 1);
        assert_eq!(fit_from_front(&history, 100_000), 0);
    }
}
