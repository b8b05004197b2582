//! What makes two runs of one arc comparable: paths, ids, timestamps and durations replaced by
//! placeholders; output cut differently by timing joined; messages grouped by card.

use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashSet};
use std::sync::LazyLock;

/// How one side (the arc, or the replay) is normalised.
#[derive(Debug, Default, Clone)]
pub(crate) struct Normalizer {
    /// Literal text and its placeholder, longest first.
    literals: Vec<(String, String)>,
    /// Keys whose values become `<any>`.
    any: HashSet<String>,
}

/// Text that differs between runs by nature, and what it reads as.
static PATTERNS: LazyLock<Vec<(regex::Regex, &'static str)>> = LazyLock::new(|| {
    [
        // The agent's private output directory (`$TMPDIR/hotsh-<uid>-<pid>-<random>`), also as
        // a blessed arc writes it (under the replay's own directory, `<replay>/…`).
        (r#"(?:<replay>)?(?:/[^/ \t\n"']+)*/hotsh-[0-9]+-[0-9]+-[0-9a-f]{12}"#, "<output>"),
        // Plugin cards: the build's content hash, its load time, its generation.
        (r"hash [0-9a-f]{16}", "hash <hash>"),
        (r"loaded in [0-9.]+ ms at [0-9.]+", "loaded in <ms> at <time>"),
        (r"(?-u:\b)build g?[0-9]+", "build <n>"),
        (r"finish on g?[0-9]+", "finish on <n>"),
        (r"(?-u:\b)pid [0-9]+", "pid <pid>"),
        // A compaction card's estimates (as `tokensBefore`/`tokensAfter` are never compared:
        // they depend on the paths in the prompt).
        (r"about [0-9]+ → [0-9]+ tokens", "about <tokens> → <tokens> tokens"),
        // The system prompt's environment.
        (r"- Date \(UTC\): [0-9-]+", "- Date (UTC): <date>"),
        (r"- Platform: [^\n]*", "- Platform: <platform>"),
        (r"- The working directory is [^\n]*", "- The working directory is <git>"),
    ]
    .into_iter()
    .map(|(pattern, to)| (regex::Regex::new(pattern).expect("a valid pattern"), to))
    .collect()
});

impl Normalizer {
    pub(crate) fn new(any: impl IntoIterator<Item = String>) -> Self {
        let mut any: HashSet<String> = any.into_iter().collect();
        any.extend(super::ALWAYS_ANY.iter().map(|k| (*k).to_owned()));
        Self { literals: Vec::new(), any }
    }

    /// Replaces `from` (anywhere in a string) by `to`.
    pub(crate) fn literal(&mut self, from: &str, to: &str) {
        if from.is_empty() || self.literals.iter().any(|(f, _)| f == from) {
            return;
        }
        self.literals.push((from.to_owned(), to.to_owned()));
        self.literals.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
    }

    /// The message with every placeholder in.
    pub(crate) fn apply(&self, value: &Value) -> Value {
        match value {
            Value::String(text) => Value::String(self.text(text)),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.apply(v)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(key, value)| {
                        let value = if self.any.contains(key) {
                            Value::String("<any>".into())
                        } else {
                            self.apply(value)
                        };
                        (key.clone(), value)
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// Only the literal replacements (how `--bless` maps a replay's paths and ids back to the
    /// arc's).
    pub(crate) fn apply_literals(&self, value: &Value) -> Value {
        match value {
            Value::String(text) => Value::String(self.replace_literals(text)),
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| self.apply_literals(v)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter().map(|(k, v)| (k.clone(), self.apply_literals(v))).collect(),
            ),
            other => other.clone(),
        }
    }

    fn replace_literals(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (from, to) in &self.literals {
            if text.contains(from.as_str()) {
                text = text.replace(from.as_str(), to);
            }
        }
        text
    }

    fn text(&self, text: &str) -> String {
        let mut text = self.replace_literals(text);
        for (pattern, to) in PATTERNS.iter() {
            if let std::borrow::Cow::Owned(replaced) = pattern.replace_all(&text, *to) {
                text = replaced;
            }
        }
        text
    }
}

/// Messages of one side, grouped: the updates of each tool call (in order), and everything
/// else (in order). Groups come in the order they first appear.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Groups {
    pub(crate) groups: Vec<(String, Vec<Grouped>)>,
    /// Each group's place in `groups`, by key.
    index: BTreeMap<String, usize>,
    /// The group the last message joined or went to.
    previous_slot: Option<usize>,
}

/// A normalised message, and the arc line it came from (for the arc's side).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Grouped {
    pub(crate) message: Value,
    pub(crate) line: Option<usize>,
}

impl Groups {
    /// Groups normalised messages, joining what timing cuts differently.
    pub(crate) fn of(messages: impl IntoIterator<Item = (Value, Option<usize>)>) -> Self {
        let mut groups = Self::default();
        for (message, line) in messages {
            groups.push(message, line);
        }
        groups
    }

    /// Adds one more message (a replay adds each as it comes, rather than grouping all of
    /// them again).
    pub(crate) fn push(&mut self, message: Value, line: Option<usize>) {
        let key = group_key(&message);
        let groups = &mut self.groups;
        let slot = *self.index.entry(key.clone()).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len() - 1
        });
        // Text streamed before a card and text after it stay apart; a card's own updates
        // join across other cards' (background tasks print at the same time).
        let adjacent = self.previous_slot == Some(slot) || self.groups[slot].0 != "messages";
        self.previous_slot = Some(slot);
        let group = &mut self.groups[slot].1;
        let joined =
            adjacent && group.last_mut().is_some_and(|last| join(&mut last.message, &message));
        if !joined {
            group.push(Grouped { message, line });
        }
    }

    pub(crate) fn get(&self, key: &str) -> &[Grouped] {
        self.index.get(key).map_or(&[], |&slot| self.groups[slot].1.as_slice())
    }

    /// The first message of `expected` not yet matched by as many messages of `self` in its
    /// group (the one a replay waits for), by arc line.
    pub(crate) fn first_missing<'a>(&self, expected: &'a Groups) -> Option<&'a Grouped> {
        expected
            .groups
            .iter()
            .filter_map(|(key, group)| group.get(self.get(key).len()))
            .min_by_key(|g| g.line)
    }

    /// The groups as text, one pretty JSON message after another, and for each line of it the
    /// arc line of its message.
    pub(crate) fn render(&self) -> (String, Vec<Option<usize>>) {
        let mut text = String::new();
        let mut lines = Vec::new();
        for (key, group) in &self.groups {
            text.push_str(&format!("# {key}\n"));
            lines.push(group.first().and_then(|g| g.line));
            for grouped in group {
                for line in pretty(&grouped.message).lines() {
                    text.push_str(line);
                    text.push('\n');
                    lines.push(grouped.line);
                }
            }
        }
        (text, lines)
    }
}

/// A message as indented JSON, keys sorted, with every string of several lines as a list of its lines (a change in a system prompt or a
/// command's output shows as one changed line).
///
/// Bounded, for a drift report: a line longer than 4 KiB shows its start and the size and hash
/// of the rest, and a string of more than 2,000 lines its first 2,000 and the same of the rest
/// (two strings that differ only there still render differently).
pub(crate) fn pretty(message: &Value) -> String {
    const SHOWN_BYTES: usize = 4 << 10;
    const SHOWN_LINES: usize = 2000;
    fn hidden(rest: &str) -> String {
        let digest = ring::digest::digest(&ring::digest::SHA256, rest.as_bytes());
        let hex: String = digest.as_ref()[..6].iter().map(|b| format!("{b:02x}")).collect();
        format!("[… {} more bytes not shown, sha256 {hex}… …]", rest.len())
    }
    fn bounded(line: &str) -> Value {
        if line.len() <= SHOWN_BYTES {
            return Value::String(line.to_owned());
        }
        let cut = hotsh_core::text::floor_char_boundary(line, SHOWN_BYTES);
        Value::String(format!("{}{}", &line[..cut], hidden(&line[cut..])))
    }
    fn split(value: &Value) -> Value {
        match value {
            Value::String(text) if text.contains('\n') => {
                let mut lines: Vec<Value> =
                    text.split('\n').take(SHOWN_LINES).map(bounded).collect();
                if let Some((at, _)) = text.match_indices('\n').nth(SHOWN_LINES - 1) {
                    lines.push(Value::String(hidden(&text[at + 1..])));
                }
                Value::Array(lines)
            }
            Value::String(text) => bounded(text),
            Value::Array(items) => Value::Array(items.iter().map(split).collect()),
            Value::Object(map) => {
                Value::Object(map.iter().map(|(k, v)| (k.clone(), split(v))).collect())
            }
            other => other.clone(),
        }
    }
    serde_json::to_string_pretty(&split(&sorted(message))).unwrap_or_else(|_| message.to_string())
}

/// `value` with the keys of every object in sorted order (how arcs are written and compared:
/// builds of hotsh may order them differently).
pub(crate) fn sorted(value: &Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by_key(|(k, _)| *k);
            Value::Object(entries.into_iter().map(|(k, v)| (k.clone(), sorted(v))).collect())
        }
        other => other.clone(),
    }
}

/// `card SESSION CALL` for a tool call's updates, `messages` for the rest.
fn group_key(message: &Value) -> String {
    let params = &message["params"];
    match (params["sessionId"].as_str(), params["update"]["toolCallId"].as_str()) {
        (Some(session), Some(call)) => format!("card {session} {call}"),
        _ => "messages".into(),
    }
}

/// The `update` of a `session/update` notification, if `message` is one.
fn update(message: &Value) -> Option<&Map<String, Value>> {
    (message["method"] == "session/update").then(|| message["params"]["update"].as_object())?
}

/// Joins `next` into `last` when timing alone decides whether they are one message or two:
/// streamed text of one kind, terminal output, and content updates of one card (only the
/// newest content counts). Returns whether it did.
fn join(last: &mut Value, next: &Value) -> bool {
    let Some(joined) = joined(last, next) else { return false };
    *last = joined;
    true
}

/// `last` and `next` as one message, when they can be.
fn joined(last: &Value, next: &Value) -> Option<Value> {
    let (previous, current) = (update(last)?, update(next)?);
    if previous.get("sessionUpdate") != current.get("sessionUpdate")
        || last["params"]["sessionId"] != next["params"]["sessionId"]
    {
        return None;
    }
    fn keys(update: &Map<String, Value>) -> Vec<&str> {
        let mut keys: Vec<&str> = update.keys().map(String::as_str).collect();
        keys.sort_unstable();
        keys
    }
    fn output(update: &Map<String, Value>) -> Option<&str> {
        (keys(update) == ["_meta", "sessionUpdate", "toolCallId"])
            .then(|| update["_meta"]["terminal_output"]["data"].as_str())
            .flatten()
    }
    let content_only =
        |u: &Map<String, Value>| keys(u) == ["content", "sessionUpdate", "toolCallId"];
    let mut joined = last.clone();
    match current.get("sessionUpdate").and_then(Value::as_str).unwrap_or_default() {
        "agent_message_chunk" | "agent_thought_chunk" => {
            let a = previous["content"]["text"].as_str()?;
            let b = current["content"]["text"].as_str()?;
            joined["params"]["update"]["content"]["text"] = Value::String(format!("{a}{b}"));
        }
        "tool_call_update" => {
            if let (Some(a), Some(b)) = (output(previous), output(current)) {
                joined["params"]["update"]["_meta"]["terminal_output"]["data"] =
                    Value::String(format!("{a}{b}"));
            } else if content_only(previous) && content_only(current) {
                joined = next.clone();
            } else {
                return None;
            }
        }
        _ => return None,
    }
    Some(joined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn output(call: &str, data: &str) -> Value {
        json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{
            "sessionUpdate":"tool_call_update","toolCallId":call,
            "_meta":{"terminal_output":{"terminal_id":call,"data":data}}}}})
    }

    #[test]
    fn output_cut_differently_compares_equal() {
        let one = Groups::of([output("c1", "ab"), output("c1", "c")].map(|m| (m, None)));
        let other = Groups::of([output("c1", "a"), output("c1", "bc")].map(|m| (m, None)));
        assert_eq!(one, other);
        assert_eq!(one.get("card s c1").len(), 1);
        let different = Groups::of([output("c1", "abd")].map(|m| (m, None)));
        assert_ne!(one, different);
    }

    #[test]
    fn a_drift_report_shows_long_text_bounded_and_still_tells_it_apart() {
        let long = |last: char| json!({"text": format!("{}{last}", "x".repeat(1 << 20))});
        let (a, b) = (pretty(&long('a')), pretty(&long('b')));
        assert!(a.len() < 10_000, "{} bytes", a.len());
        assert_ne!(a, b, "they differ only in the part not shown");
        let lines: String = (0..5000).map(|i| format!("{i}\n")).collect();
        let shown = pretty(&json!({ "output": lines }));
        assert!(shown.lines().count() < 2010, "{} lines", shown.lines().count());
        assert!(shown.contains("more bytes not shown"), "{shown}");
    }

    #[test]
    fn placeholders_replace_paths_ids_and_times() {
        let mut normalizer = Normalizer::new(["secret".to_owned()]);
        normalizer.literal("/tmp/work", "<cwd>");
        let message = json!({"a": "/tmp/work/x in /tmp/hotsh-0-12-0123456789ab/s/t1.out",
            "secret": 3, "duration_ms": 9, "b": ["hash 0123456789abcdef, build 7"]});
        assert_eq!(
            normalizer.apply(&message),
            json!({"a": "<cwd>/x in <output>/s/t1.out", "secret": "<any>",
                "duration_ms": "<any>", "b": ["hash <hash>, build <n>"]})
        );
        // As `hotsh replay --bless` writes an output path (under the replay's directory).
        let blessed = json!("full output: <replay>/tmp/hotsh-0-9-0123456789ab/s/bash-1.log");
        assert_eq!(normalizer.apply(&blessed), json!("full output: <output>/s/bash-1.log"));
    }
}
