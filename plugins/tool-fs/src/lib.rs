//! The file tools: `read_file` shows a text file with line numbers, `write_file` replaces a
//! whole file, `edit_file` replaces an exact string. Everything goes through the host's file
//! services, which read the user's unsaved buffer and write through the editor when the
//! client offers it, and gate writes by the session's sandbox mode. An edit or an overwrite
//! of a file the model has not seen as it is now is refused, so the user's changes are never
//! written over unseen.

mod text;

use hotsh_abi::{
    Card, CardStatus, Diff, FileRead, FileText, FileWrite, FileWritten, FinalCard, GenericCard,
    HostRef, Location, Manifest, Plugin, PromptSection, ROption, SandboxRequest, Seen, ToolCall,
    ToolKind, ToolOutput, ToolSpec, ToolsContext,
};
use serde::Deserialize;
use serde_json::json;

/// Old texts larger than this are not carried in a write's result (nor shown as a diff).
const MAX_DIFF_BYTES: usize = 1 << 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: String,
    /// 1-based first line.
    offset: Option<usize>,
    limit: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
    sandbox_permissions: Option<String>,
    justification: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
    sandbox_permissions: Option<String>,
    justification: Option<String>,
}

fn parse<T: serde::de::DeserializeOwned>(call: &ToolCall) -> Result<T, String> {
    call.arguments()
}

fn sandbox_request(
    call: &ToolCall,
    permissions: Option<&str>,
    justification: Option<&str>,
) -> Result<Option<SandboxRequest>, String> {
    SandboxRequest::from_arguments(&call.tool, permissions, justification)
}

/// The path as the card and the model see it: absolute, against the session's cwd.
fn absolute(call: &ToolCall, path: &str) -> String {
    call.absolute_path(path).to_string_lossy().into_owned()
}

const READ_DESCRIPTION: &str = "Reads a text file and returns its lines numbered like `cat -n`. \
A relative path is taken from the session's working directory. Reads the user's editor buffer \
when the editor offers it, so unsaved changes are included. At most 2000 lines per call: pass \
`offset` (1-based first line) and `limit` to read a long file in parts.";

const WRITE_DESCRIPTION: &str = "Writes a whole text file, creating it (and missing \
directories) or replacing it. To replace an existing file, read it first in this session. \
The file keeps its line endings and final newline. Prefer `edit_file` for changes to part of \
a file.";

const EDIT_DESCRIPTION: &str = "Replaces `old_string` with `new_string` in a text file. \
`old_string` must match the file exactly (whitespace and indentation included) and exactly \
once, unless `replace_all` is true. Read the file in this session first; if it changed since, \
read it again.";

const PROMPT: &str = "\
## Reading and editing files

Use `read_file` to look at files and `edit_file` to change them; use `write_file` for new \
files or to replace a file entirely. Their changes show to the user as reviewable diffs, so \
prefer them to `sed`, `cat >` or heredocs through `bash`. `read_file` numbers lines; the \
number and the tab before each line are not part of the file. Edit only files you have read \
in this session: an edit of a file that changed since you read it (the user may be editing \
it) is refused, and you read it again. Give `edit_file` enough surrounding text to match \
exactly one place.";

/// The file tools plugin.
#[derive(Debug)]
pub struct ToolFs;

impl Plugin for ToolFs {
    fn manifest() -> Manifest {
        Manifest::new("tool-fs", env!("CARGO_PKG_VERSION"))
    }

    fn tools() -> Vec<ToolSpec> {
        Self::tools_in(&ToolsContext::new(false))
    }

    fn tools_in(context: &ToolsContext) -> Vec<ToolSpec> {
        let path = json!({
            "type": "string",
            "description": "The file; a relative path is taken from the session's working directory."
        });
        let read = json!({
            "type": "object",
            "properties": {
                "path": path,
                "offset": {"type": "integer", "minimum": 1, "description": "The first line to show (1-based)."},
                "limit": {"type": "integer", "minimum": 1, "description": "How many lines to show (default 2000)."}
            },
            "required": ["path"],
            "additionalProperties": false
        });
        let mut write = json!({
            "type": "object",
            "properties": {
                "path": path,
                "content": {"type": "string", "description": "The whole new text of the file."}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        });
        let mut edit = json!({
            "type": "object",
            "properties": {
                "path": path,
                "old_string": {"type": "string", "description": "The exact text to replace."},
                "new_string": {"type": "string", "description": "The text to put in its place."},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence instead of exactly one."}
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": false
        });
        if context.sandboxed {
            SandboxRequest::add_to_schema(&mut write, "write");
            SandboxRequest::add_to_schema(&mut edit, "write");
        }
        vec![
            ToolSpec::new("read_file", READ_DESCRIPTION, &read),
            ToolSpec::new("write_file", WRITE_DESCRIPTION, &write).writes_files(),
            ToolSpec::new("edit_file", EDIT_DESCRIPTION, &edit).writes_files(),
        ]
    }

    fn prompt_sections() -> Vec<PromptSection> {
        vec![PromptSection::new("tool:fs", 106, PROMPT)]
    }

    fn invoke(call: &ToolCall, host: &HostRef<'_>) -> Result<ToolOutput, String> {
        match call.tool.as_str() {
            "read_file" => read_file(call, host),
            "write_file" => write_file(call, host),
            "edit_file" => edit_file(call, host),
            other => Err(format!("tool-fs has no tool `{other}`")),
        }
    }

    fn present_call(call: &ToolCall) -> Result<Card, String> {
        let card = match call.tool.as_str() {
            "read_file" => {
                let args: ReadArgs = parse(call)?;
                let path = absolute(call, &args.path);
                file_card("Read", ToolKind::Read, &path, Some(args.offset.unwrap_or(1)))
            }
            "write_file" => {
                let args: WriteArgs = parse(call)?;
                file_card("Write", ToolKind::Edit, &absolute(call, &args.path), None)
            }
            "edit_file" => {
                let args: EditArgs = parse(call)?;
                let path = absolute(call, &args.path);
                let card = file_card("Edit", ToolKind::Edit, &path, None);
                card.with_diff(Diff::new(&path, Some(&args.old_string), &args.new_string))
            }
            other => return Err(format!("tool-fs has no tool `{other}`")),
        };
        Ok(Card::Generic(card))
    }

    fn present_result(call: &ToolCall, output: &ToolOutput) -> Result<FinalCard, String> {
        let raw: serde_json::Value = serde_json::from_str(&output.raw_output)
            .map_err(|e| format!("{} result is not JSON: {e}", call.tool))?;
        let Card::Generic(mut card) = Self::present_call(call)? else {
            return Err("file cards are generic".to_owned());
        };
        let path = raw["path"].as_str().map(str::to_owned);
        match call.tool.as_str() {
            "read_file" => {
                let (first, last) = (raw["first_line"].as_u64(), raw["last_line"].as_u64());
                if let (Some(first), Some(last)) = (first, last)
                    && last >= first
                {
                    card.title = format!("{} (lines {first}–{last})", card.title).into();
                }
            }
            "write_file" => {
                let args: WriteArgs = parse(call)?;
                let path = path.unwrap_or_else(|| absolute(call, &args.path));
                let old_text = raw["old_text"].as_str();
                card.diffs = match (old_text, raw["created"].as_bool()) {
                    (_, Some(true)) => vec![diff(&path, None, &raw, &args.content)],
                    (Some(old), _) => vec![diff(&path, Some(old), &raw, &args.content)],
                    // Too large to show as a diff.
                    (None, _) => Vec::new(),
                }
                .into();
                if card.diffs.is_empty() {
                    card.content = ROption::RSome(output.text.clone());
                }
            }
            "edit_file" => {
                let line = raw["first_line"].as_u64().map(|l| l as usize);
                if let Some(path) = &path {
                    card.locations = vec![location(path, line)].into();
                    for diff in card.diffs.iter_mut() {
                        diff.path = path.as_str().into();
                    }
                }
            }
            other => return Err(format!("tool-fs has no tool `{other}`")),
        }
        Ok(FinalCard::new(Card::Generic(card), CardStatus::Completed))
    }
}

/// The card of a call on the file at `path`: "VERB path", pointing at the file (at `line`).
fn file_card(verb: &str, kind: ToolKind, path: &str, line: Option<usize>) -> GenericCard {
    let mut card = GenericCard::new(format!("{verb} {path}"), kind, None);
    card.locations = vec![location(path, line)].into();
    card
}

fn location(path: &str, line: Option<usize>) -> Location {
    Location::new(path, line.map(|l| l.min(u32::MAX as usize) as u32))
}

/// A write's diff: the text written is the file's (in its line-ending style), from the result.
fn diff(path: &str, old: Option<&str>, raw: &serde_json::Value, content: &str) -> Diff {
    let new_text = raw["new_text"].as_str().unwrap_or(content);
    Diff::new(path, old, new_text)
}

fn read(host: &HostRef<'_>, path: &str, remember: bool) -> Result<FileText, String> {
    host.read_text_file(FileRead::new(path, remember)).into_result().map_err(Into::into)
}

fn read_file(call: &ToolCall, host: &HostRef<'_>) -> Result<ToolOutput, String> {
    let args: ReadArgs = parse(call)?;
    if args.offset == Some(0) || args.limit == Some(0) {
        return Err("invalid arguments for `read_file`: `offset` and `limit` start at 1".to_owned());
    }
    let file = read(host, &args.path, true)?;
    let view =
        text::view(&file.text, args.offset.unwrap_or(1), args.limit.unwrap_or(text::DEFAULT_LINES));
    let mut out = view.text.clone();
    if view.total == 0 {
        out.push_str("[empty file]\n");
    } else if view.last < view.first {
        out.push_str(&format!(
            "[the file has {} lines; offset {} is past its end]\n",
            view.total, view.first
        ));
    } else if view.more {
        out.push_str(&format!(
            "[showing lines {}–{} of {}; pass offset {} to read on]\n",
            view.first,
            view.last,
            view.total,
            view.last + 1
        ));
    }
    if view.cut_lines {
        out.push_str(&format!(
            "[lines longer than {} characters were cut at …]\n",
            text::MAX_LINE_CHARS
        ));
    }
    Ok(ToolOutput::new(
        out,
        &json!({
            "path": file.path.as_str(),
            "from_client": file.from_client,
            "total_lines": view.total,
            "first_line": view.first,
            "last_line": view.last,
        }),
    ))
}

fn write_file(call: &ToolCall, host: &HostRef<'_>) -> Result<ToolOutput, String> {
    let args: WriteArgs = parse(call)?;
    let request =
        sandbox_request(call, args.sandbox_permissions.as_deref(), args.justification.as_deref())?;
    let existing = match read(host, &args.path, false) {
        Ok(file) => Some(file),
        Err(error) if error.ends_with(": no such file") => None,
        Err(error) => return Err(error),
    };
    if let Some(file) = &existing {
        check_seen(file, "write_file replaces the whole file")?;
    }
    let new_text = match &existing {
        Some(file) => text::in_style_of(&file.text, &args.content),
        None => args.content.clone(),
    };
    let written = write(
        host,
        &call.tool,
        &args.path,
        &new_text,
        existing.as_ref().map(|f| f.text.as_str()),
        request,
    )?;
    let lines = text::line_count(&new_text);
    let verb = if written.created { "Created" } else { "Wrote" };
    let old_text = existing.as_ref().map(|f| f.text.as_str()).filter(|t| t.len() <= MAX_DIFF_BYTES);
    Ok(ToolOutput::new(
        format!("{verb} {} ({lines} lines){}", written.path, through(&written)),
        &json!({
            "path": written.path.as_str(),
            "created": written.created,
            "through_client": written.through_client,
            "old_text": old_text,
            // Only when it differs from `content` (line endings, a final newline).
            "new_text": (new_text != args.content && new_text.len() <= MAX_DIFF_BYTES).then_some(&new_text),
            "sandbox": facts(&written),
        }),
    ))
}

fn edit_file(call: &ToolCall, host: &HostRef<'_>) -> Result<ToolOutput, String> {
    let args: EditArgs = parse(call)?;
    let request =
        sandbox_request(call, args.sandbox_permissions.as_deref(), args.justification.as_deref())?;
    if args.old_string.is_empty() {
        return Err("invalid arguments for `edit_file`: `old_string` is empty; use write_file to create a file".to_owned());
    }
    if args.old_string == args.new_string {
        return Err(
            "invalid arguments for `edit_file`: `old_string` and `new_string` are the same"
                .to_owned(),
        );
    }
    let file = read(host, &args.path, false)?;
    check_seen(&file, "edit_file changes what you read")?;
    let edited = text::replace(&file.text, &args.old_string, &args.new_string, args.replace_all)
        .map_err(|error| match error {
            text::EditError::NotFound => format!(
                "`old_string` was not found in {}; it must match the file exactly, whitespace and indentation included. Nothing was changed",
                file.path
            ),
            text::EditError::Ambiguous(count) => format!(
                "`old_string` matches {count} places in {}; include more surrounding text to match exactly one, or pass replace_all. Nothing was changed",
                file.path
            ),
        })?;
    let written = write(host, &call.tool, &args.path, &edited.text, Some(&file.text), request)?;
    let places = if edited.replacements == 1 {
        "1 place".to_owned()
    } else {
        format!("{} places", edited.replacements)
    };
    Ok(ToolOutput::new(
        format!(
            "Edited {}: replaced {places}, first at line {}{}",
            written.path,
            edited.first_line,
            through(&written)
        ),
        &json!({
            "path": written.path.as_str(),
            "replacements": edited.replacements,
            "first_line": edited.first_line,
            "through_client": written.through_client,
            "sandbox": facts(&written),
        }),
    ))
}

/// Refuses to change a file the model has not seen as it is now.
fn check_seen(file: &FileText, why: &str) -> Result<(), String> {
    match file.seen {
        Seen::Same => Ok(()),
        Seen::Never => Err(format!(
            "{} has not been read in this session; read it with read_file first ({why}). Nothing was changed",
            file.path
        )),
        // `Changed`, or a value from a later 1.x: not known to be what the model saw.
        _ => Err(format!(
            "{} changed since you last read it (on disk or in the user's editor); read it again with read_file, then redo the change. Nothing was changed",
            file.path
        )),
    }
}

/// Writes through the host; a sandbox refusal becomes the tool error with its markers.
fn write(
    host: &HostRef<'_>,
    tool: &str,
    path: &str,
    text: &str,
    expected: Option<&str>,
    request: Option<SandboxRequest>,
) -> Result<FileWritten, String> {
    let written = host
        .write_text_file(
            FileWrite::new(path, text).expecting(expected).with_sandbox_permissions(request),
        )
        .into_result()
        .map_err(|e| e.into_string())?;
    if written.written {
        return Ok(written);
    }
    let mut lines = written.sandbox.markers(tool);
    let rule = match written.sandbox.mode {
        hotsh_abi::SandboxMode::ReadOnly => "which allows no writes",
        _ => {
            "which writes only inside the working directory and the temporary directory, never in .git"
        }
    };
    lines.push(format!(
        "{} may not be written under {} mode, {rule}; nothing was written",
        written.path,
        written.sandbox.mode.as_str()
    ));
    Err(lines.join("\n"))
}

fn through(written: &FileWritten) -> &'static str {
    if written.through_client { " through the editor" } else { "" }
}

fn facts(written: &FileWritten) -> serde_json::Value {
    json!({
        "mode": written.sandbox.mode.as_str(),
        "backend": written.sandbox.backend.as_str(),
        "enforcement": written.sandbox.enforcement.as_str(),
    })
}

hotsh_abi::export_plugin!(ToolFs);
