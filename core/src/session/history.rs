//! The model's history as the session keeps it: the messages, what is known of their size,
//! the plan, and the tool calls left without results, folded from the session's records the
//! same way live and on load.

use super::{Fact, Record, SessionEvent};
use crate::context::{ContextUse, cleared_output, cleared_saving, cleared_upto, messages_tokens};
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
    /// Each tool result of `messages`, in order (what decides which older outputs a request
    /// clears: [`History::request_messages`]).
    outputs: Vec<Output>,
}

/// A tool result of the history: where it is, and how much tool output the history holds
/// up to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Output {
    /// Its index in the messages.
    at: usize,
    /// Bytes of tool output from the history's start to its end.
    end: u64,
    /// Bytes a request saves by clearing it and every output before it.
    saved: u64,
}

/// The cleared tool results made for a session's requests, each with the message it stands
/// for: the next request sends the same ones (a model adapter keeps what it made of a
/// message by its address).
pub type ClearedOutputs = Vec<(Arc<Message>, Arc<Message>)>;

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
                let kept: Vec<_> = self.messages.drain(replaced..).collect();
                self.messages.clear();
                self.outputs.clear();
                for message in compaction.history().into_iter().chain(kept) {
                    self.push(message);
                }
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
                self.push(Arc::new(message));
            }
        }
    }

    /// Adds a message, and where a tool result's output ends.
    fn push(&mut self, message: Arc<Message>) {
        if let Message::Tool { text, .. } = message.as_ref() {
            let (end, saved) = self.outputs.last().map_or((0, 0), |last| (last.end, last.saved));
            self.outputs.push(Output {
                at: self.messages.len(),
                end: end + text.len() as u64,
                saved: saved + cleared_saving(text),
            });
        }
        self.messages.push(message);
    }

    /// How many of the first tool results a request with the first `len` messages clears,
    /// `keep` tokens of the newest output carried whole ([`cleared_upto`]).
    fn cleared(&self, len: usize, keep: Option<u64>) -> usize {
        let Some(keep) = keep else { return 0 };
        let within = self.outputs.partition_point(|output| output.at < len);
        let total = within.checked_sub(1).map_or(0, |last| self.outputs[last].end);
        let upto = cleared_upto(total, keep);
        self.outputs[..within].partition_point(|output| output.end <= upto)
    }

    /// The bytes a request with the first `len` messages saves by what it clears.
    fn saved(&self, len: usize, keep: Option<u64>) -> u64 {
        let cleared = self.cleared(len, keep);
        cleared.checked_sub(1).map_or(0, |last| self.outputs[last].saved)
    }

    /// The messages a request carries: the history, with its older tool outputs cleared
    /// (all but the newest `keep` tokens of output, in steps: [`cleared_upto`]). A pure
    /// function of the history, so the same live and after a load. `made`: the cleared
    /// results made for the session's earlier requests, used again (and added to).
    pub fn request_messages(
        &self,
        keep: Option<u64>,
        made: &mut ClearedOutputs,
    ) -> Vec<Arc<Message>> {
        let mut messages = self.messages.clone();
        let cleared = self.cleared(messages.len(), keep);
        if cleared == 0 {
            return messages;
        }
        let still = made
            .iter()
            .zip(&self.outputs)
            .take_while(|((stands_for, _), output)| Arc::ptr_eq(stands_for, &messages[output.at]))
            .count();
        made.truncate(still);
        // Those made before may be more than this request clears (a smaller `keep`).
        for output in self.outputs.iter().take(cleared).skip(made.len()) {
            let message = &messages[output.at];
            let replacement = match message.as_ref() {
                Message::Tool { call_id, text, is_error } if cleared_saving(text) > 0 => {
                    Arc::new(Message::Tool {
                        call_id: call_id.clone(),
                        text: cleared_output(text.len()),
                        is_error: *is_error,
                    })
                }
                _ => Arc::clone(message),
            };
            made.push((Arc::clone(message), replacement));
        }
        for (output, (_, replacement)) in self.outputs[..cleared].iter().zip(made.iter()) {
            messages[output.at] = Arc::clone(replacement);
        }
        messages
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
            self.push(Arc::new(Message::Tool { call_id, text, is_error: true }));
        }
        self.push(Arc::new(Message::Notice { text: CUT_OFF_NOTICE.to_owned() }));
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

    /// The tokens a request with this history carries, `fixed` those of its system prompt
    /// and tools, the older tool outputs cleared as [`History::request_messages`] clears them
    /// (`keep`; `None`: every output whole): from the last count known (the provider's, of a
    /// request that cleared what it did then), what came since, less what is cleared since.
    pub fn estimate(&self, fixed: u64, keep: Option<u64>) -> u64 {
        let len = self.messages.len();
        let saved = self.saved(len, keep);
        match self.mark {
            Some(mark) if mark.at <= len => (mark.tokens
                + messages_tokens(&self.messages[mark.at..]))
            .saturating_sub(saved.saturating_sub(self.saved(mark.at, keep)) / 4),
            _ => (fixed + messages_tokens(&self.messages)).saturating_sub(saved / 4),
        }
    }

    /// Whether a compaction would replace anything: something came after the last one.
    pub fn compactable(&self) -> bool {
        self.messages.len() > self.compacted.unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{cleared_upto, tokens_of};
    use crate::model::ModelToolCall;
    use crate::session::Fact;

    /// A history of `turns` turns, each a call whose result is `output` bytes.
    fn history(turns: usize, output: usize) -> History {
        let mut history = History::default();
        for turn in 0..turns {
            add_turn(&mut history, turn, output);
        }
        history
    }

    /// Adds turn `turn`: a call and its result of `output` bytes.
    fn add_turn(history: &mut History, turn: usize, output: usize) {
        let call_id = format!("c{turn}");
        let call =
            ModelToolCall { id: call_id.clone(), name: "bash".into(), arguments: "{}".into() };
        history.apply(&Record::Fact(Fact::AssistantMessage {
            text: String::new(),
            reasoning: None,
            tool_calls: vec![call],
            usage: None,
            finish_reason: None,
        }));
        history.apply(&Record::Fact(Fact::ToolResult {
            call_id,
            text: "a".repeat(output),
            is_error: false,
            after_output: None,
        }));
    }

    fn outputs(messages: &[Arc<Message>]) -> Vec<&str> {
        messages
            .iter()
            .filter_map(|message| match message.as_ref() {
                Message::Tool { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_newest_output_goes_whole_and_older_output_is_cleared_in_steps() {
        // 1,000 tokens kept: 4,000 bytes whole, cleared 2,000 at a time.
        assert_eq!(cleared_upto(5_999, 1_000), 0);
        assert_eq!(cleared_upto(6_000, 1_000), 2_000);
        assert_eq!(cleared_upto(7_999, 1_000), 2_000);
        assert_eq!(cleared_upto(8_000, 1_000), 4_000);
        let mut made = ClearedOutputs::new();
        // 5 outputs of 1,000 bytes: nothing cleared yet.
        let five = history(5, 1_000);
        assert_eq!(five.request_messages(Some(1_000), &mut made), five.messages);
        // 7: the first two (their ends within 2,000 bytes) are cleared.
        let seven = history(7, 1_000);
        let sent = seven.request_messages(Some(1_000), &mut made);
        let texts = outputs(&sent);
        assert_eq!(texts.len(), 7);
        assert_eq!(texts[..2], [cleared_output(1_000), cleared_output(1_000)]);
        assert!(texts[2..].iter().all(|text| text.len() == 1_000), "{texts:?}");
        // Everything else as it was, the cleared results answering the same calls.
        for (sent, kept) in sent.iter().zip(&seven.messages) {
            match (sent.as_ref(), kept.as_ref()) {
                (Message::Tool { call_id, is_error, .. }, Message::Tool { call_id: id, .. }) => {
                    assert_eq!((call_id, *is_error), (id, false));
                }
                _ => assert!(Arc::ptr_eq(sent, kept)),
            }
        }
        // Off: every output whole.
        assert_eq!(seven.request_messages(None, &mut ClearedOutputs::new()), seven.messages);
        // Short outputs are never cleared.
        let short = history(40, 300);
        assert!(
            outputs(&short.request_messages(Some(100), &mut ClearedOutputs::new()))
                .iter()
                .all(|text| text.len() == 300)
        );
    }

    #[test]
    fn a_request_sends_the_cleared_results_the_last_one_did_and_a_load_the_same() {
        let mut live = history(7, 1_000);
        let mut made = ClearedOutputs::new();
        let first = live.request_messages(Some(1_000), &mut made);
        let again = live.request_messages(Some(1_000), &mut made);
        assert!(first.iter().zip(&again).all(|(a, b)| Arc::ptr_eq(a, b)));
        // Growing to the next step clears one more and keeps the earlier ones.
        add_turn(&mut live, 7, 1_000);
        let grown = history(8, 1_000);
        let next = live.request_messages(Some(1_000), &mut made);
        assert!(Arc::ptr_eq(&next[1], &first[1]) && Arc::ptr_eq(&next[3], &first[3]));
        assert_eq!(outputs(&next)[..4].iter().filter(|t| t.len() < 1_000).count(), 4);
        // A history folded anew (a load) sends messages equal to the live one's.
        assert_eq!(grown.request_messages(Some(1_000), &mut ClearedOutputs::new()), next);
        // Keeping more whole (another model's setting) clears fewer, with the same results.
        let fewer = live.request_messages(Some(1_200), &mut made);
        assert_eq!(outputs(&fewer).iter().filter(|t| t.len() < 1_000).count(), 2);
        assert!(Arc::ptr_eq(&fewer[1], &first[1]) && Arc::ptr_eq(&fewer[5], &live.messages[5]));
    }

    #[test]
    fn the_estimate_counts_what_the_request_carries() {
        let history = history(40, 1_000);
        let whole = history.estimate(0, None);
        let sent = history.request_messages(Some(1_000), &mut ClearedOutputs::new());
        let carried = crate::context::messages_tokens(&sent);
        assert!(carried < whole / 2, "{carried} of {whole}");
        assert!(history.estimate(0, Some(1_000)).abs_diff(carried) <= 2);
        // From a count the provider gave at turn 20, what came since, less what is cleared
        // since.
        let mut counted = self::history(20, 1_000);
        let at_20 = counted.request_messages(Some(1_000), &mut ClearedOutputs::new());
        let tokens = crate::context::messages_tokens(&at_20);
        counted.mark = Some(Mark { tokens, at: counted.messages.len() });
        for turn in 20..40 {
            add_turn(&mut counted, turn, 1_000);
        }
        let estimate = counted.estimate(0, Some(1_000));
        assert!(estimate.abs_diff(carried) <= tokens_of(64), "{estimate} against {carried}");
    }
}
