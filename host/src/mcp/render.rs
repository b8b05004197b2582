//! A tool result as the model and the user see it. Works on the result's wire form (MCP's
//! `CallToolResult` as JSON), so every content type a server may send is handled the same
//! way whatever the SDK's types look like.

use serde_json::{Value, json};

/// The most of one result the model is given (characters); the rest is cut with a note.
const MODEL_BUDGET: usize = 30_000;

/// A rendered result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rendered {
    /// What the model reads (and the card shows).
    pub(crate) text: String,
    pub(crate) is_error: bool,
    /// The result for `rawOutput` and the log: binary data replaced by its size.
    pub(crate) raw: Value,
}

/// Renders `result` (a `CallToolResult` as JSON).
pub(crate) fn result(result: &Value) -> Rendered {
    let is_error = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
    let blocks = result.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut parts: Vec<String> = blocks.iter().map(block).collect();
    if parts.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        parts.push(structured.to_string());
    }
    let text = if parts.is_empty() { "(no content)".to_owned() } else { parts.join("\n") };
    let mut raw = result.clone();
    if let Some(content) = raw.get_mut("content").and_then(Value::as_array_mut) {
        content.iter_mut().for_each(strip_data);
    }
    Rendered { text: cut(text), is_error, raw }
}

/// One content block as text.
fn block(block: &Value) -> String {
    let field = |name: &str| block.get(name).and_then(Value::as_str).unwrap_or_default();
    match field("type") {
        "text" => field("text").to_owned(),
        kind @ ("image" | "audio") => format!(
            "[{kind}: {}, {} bytes; not shown to the model]",
            field("mimeType"),
            decoded_len(field("data"))
        ),
        "resource" => {
            let resource = block.get("resource").cloned().unwrap_or(Value::Null);
            let of = |name: &str| resource.get(name).and_then(Value::as_str).unwrap_or_default();
            match resource.get("text").and_then(Value::as_str) {
                Some(text) => format!("[resource {}]\n{text}", of("uri")),
                None => format!(
                    "[resource {}: {}, {} bytes; not shown to the model]",
                    of("uri"),
                    of("mimeType"),
                    decoded_len(of("blob"))
                ),
            }
        }
        "resource_link" => format!("[resource link: {} ({})]", field("uri"), field("name")),
        other => format!("[content of type `{other}`: {block}]"),
    }
}

/// Replaces base64 payloads by their decoded size (the log and the client need not carry
/// images).
fn strip_data(block: &mut Value) {
    for (holder, key) in [(None, "data"), (Some("resource"), "blob")] {
        let target = match holder {
            Some(name) => block.get_mut(name),
            None => Some(&mut *block),
        };
        if let Some(object) = target.and_then(Value::as_object_mut)
            && let Some(Value::String(data)) = object.get(key)
        {
            let size = decoded_len(data);
            object.insert(key.to_owned(), json!(format!("<{size} bytes>")));
        }
    }
}

/// The size of base64 data once decoded.
fn decoded_len(base64: &str) -> usize {
    let padding = base64.bytes().rev().take_while(|b| *b == b'=').count();
    (base64.len() / 4 * 3).saturating_sub(padding)
}

/// Cuts text beyond the model's budget, saying how much was cut.
fn cut(text: String) -> String {
    let Some((at, _)) = text.char_indices().nth(MODEL_BUDGET) else { return text };
    let rest = text[at..].chars().count();
    format!("{}\n[… {rest} more characters cut]", &text[..at])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_content_type_becomes_text_and_binary_data_its_size() {
        let rendered = result(&json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "mimeType": "image/png", "data": "AAAA"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}},
                {"type": "resource", "resource": {"uri": "file:///b.bin", "mimeType": "application/octet-stream", "blob": "AAE="}},
                {"type": "resource_link", "uri": "file:///c", "name": "c"}
            ],
            "isError": true
        }));
        assert!(rendered.is_error);
        expect_test::expect![[r#"
            hello
            [image: image/png, 3 bytes; not shown to the model]
            [resource file:///a.txt]
            inside
            [resource file:///b.bin: application/octet-stream, 2 bytes; not shown to the model]
            [resource link: file:///c (c)]"#]]
        .assert_eq(&rendered.text);
        assert_eq!(rendered.raw["content"][1]["data"], "<3 bytes>");
        assert_eq!(rendered.raw["content"][3]["resource"]["blob"], "<2 bytes>");
        assert_eq!(rendered.raw["content"][0]["text"], "hello");
    }

    #[test]
    fn structured_content_stands_in_for_missing_content_and_long_text_is_cut() {
        let rendered = result(&json!({"structuredContent": {"n": 1}}));
        assert_eq!(rendered.text, r#"{"n":1}"#);
        assert!(!rendered.is_error);
        let long =
            result(&json!({"content": [{"type": "text", "text": "é".repeat(MODEL_BUDGET + 5)}]}));
        assert!(
            long.text.ends_with("\n[… 5 more characters cut]"),
            "{}",
            &long.text[long.text.len() - 40..]
        );
        assert_eq!(result(&json!({})).text, "(no content)");
    }
}
