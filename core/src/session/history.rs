//! The model's history as the session keeps it: the messages, what is known of their size,
//! the plan, and the tool calls left without results, folded from the session's records the
//! same way live and on load.

use super::{Fact, Record, SessionEvent};
use crate::context::{ContextUse, messages_tokens};
use crate::model::Message;
use crate::text::floor_char_boundary;
use std::sync::Arc;

/// The model's history, and what is known of its size: both folded from the log the same way
/// live and on load, so the next request after a restart is the one the live process sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub messages: Vec<Arc<Message>>,
    /// What the provider (or a compaction) last said the context held, and when.
    mark: Option<Mark>,
    /// The length of the history right after the last compaction.
    compacted: Option<usize>,
    /// The last context use shown to the client.
    pub shown: Option<ContextUse>,
    /// The model's plan, as it last set it.
    pub plan: Option<Vec<super::PlanEntry>>,
    /// The tool calls of the last assistant message that have no result yet.
    unanswered: Vec<String>,
    /// The output logged of the call running among them (its card's), the tail only.
    running_output: Option<String>,
}

/// What a tool call whose result was never recorded is answered with: hotsh stopped (killed,
/// crashed) while it ran, or its result was lost.
pub const CUT_OFF_RESULT: &str =
    "[hotsh stopped while this ran: the command may have finished or not]";

/// The note the model gets after the results of a turn that was cut off.
pub const CUT_OFF_NOTICE: &str = "The previous turn was cut off: hotsh stopped before it ended (it was killed or crashed), so the tool calls it had not finished are marked as stopped. Their effects are unknown: check them before relying on them.";

/// How much of a cut-off call's logged output its result keeps (the tail).
const CUT_OFF_OUTPUT: usize = 4096;

/// The context held `tokens` when the history had `at` messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    tokens: u64,
    at: usize,
}

impl History {
    /// Adds what `record` changes: a message, a compaction's new history, a context use.
    pub fn apply(&mut self, record: &Record) {
        match record {
            Record::Fact(Fact::Compaction(compaction)) => {
                let replaced = compaction.replaced.min(self.messages.len());
                let mut messages = compaction.history();
                messages.extend(self.messages.drain(replaced..));
                self.messages = messages;
                self.compacted = Some(self.messages.len());
                self.mark = Some(Mark { tokens: compaction.tokens_after, at: self.messages.len() });
            }
            Record::Event(event) => self.apply_event(event),
            record => {
                let Some(message) = record.history_message() else { return };
                match &message {
                    Message::Tool { call_id, .. } => {
                        self.unanswered.retain(|id| id != call_id);
                        self.running_output = None;
                    }
                    // Anything else after calls without results: the turn was cut off.
                    _ => self.answer_cut_off(),
                }
                if let Message::Assistant { tool_calls, .. } = &message {
                    self.unanswered = tool_calls.iter().map(|call| call.id.clone()).collect();
                    self.running_output = None;
                }
                self.messages.push(Arc::new(message));
            }
        }
    }

    /// Answers every tool call of the last assistant message that has no result (hotsh
    /// stopped while they ran, or a result was lost), then tells the model the turn was cut
    /// off: a provider refuses a history with a call left unanswered. The same whether it
    /// happens live or on load, so both send the same next request. Nothing when every call
    /// has its result.
    pub fn answer_cut_off(&mut self) {
        if self.unanswered.is_empty() {
            return;
        }
        let mut output = self.running_output.take();
        for call_id in std::mem::take(&mut self.unanswered) {
            let text = match output.take().filter(|o| !o.trim().is_empty()) {
                Some(output) => format!("{}\n{CUT_OFF_RESULT}", output.trim_end()),
                None => CUT_OFF_RESULT.to_owned(),
            };
            self.messages.push(Arc::new(Message::Tool { call_id, text, is_error: true }));
        }
        self.messages.push(Arc::new(Message::Notice { text: CUT_OFF_NOTICE.to_owned() }));
    }

    /// [`History::apply`] for an event: a plan, a context use.
    pub fn apply_event(&mut self, event: &SessionEvent) {
        match event {
            SessionEvent::ToolCallStarted { .. } if !self.unanswered.is_empty() => {
                self.running_output = Some(String::new());
            }
            SessionEvent::ToolOutput { text, .. } => {
                if let Some(output) = &mut self.running_output {
                    output.push_str(text);
                    if output.len() > 2 * CUT_OFF_OUTPUT {
                        let cut = floor_char_boundary(output, output.len() - CUT_OFF_OUTPUT);
                        output.drain(..cut);
                    }
                }
            }
            SessionEvent::ToolCallFinished { output_text: Some(text), .. }
                if self.running_output.is_some() =>
            {
                let start = floor_char_boundary(text, text.len().saturating_sub(CUT_OFF_OUTPUT));
                self.running_output = Some(text[start..].to_owned());
            }
            SessionEvent::Plan { entries } => self.plan = Some(entries.clone()),
            SessionEvent::Usage(shown) => {
                self.mark = Some(Mark { tokens: shown.used, at: self.messages.len() });
                self.shown = Some(shown.clone());
            }
            _ => {}
        }
    }

    /// The tokens a request with this history would carry; `fixed`: those of its system
    /// prompt and tools.
    pub fn estimate(&self, fixed: u64) -> u64 {
        match self.mark {
            Some(mark) if mark.at <= self.messages.len() => {
                mark.tokens + messages_tokens(&self.messages[mark.at..])
            }
            _ => fixed + messages_tokens(&self.messages),
        }
    }

    /// Whether a compaction would replace anything: something came after the last one.
    pub fn compactable(&self) -> bool {
        self.messages.len() > self.compacted.unwrap_or(0)
    }
}
