//! The text work of the file tools, free of any I/O: numbered views, exact replacement, and
//! keeping a file's line endings and final newline.

/// Lines shown by one `read_file` unless `limit` says otherwise.
pub(crate) const DEFAULT_LINES: usize = 2000;
/// Characters of one line shown before it is cut.
pub(crate) const MAX_LINE_CHARS: usize = 2000;
/// Bytes of numbered text one `read_file` returns at most.
pub(crate) const MAX_VIEW_BYTES: usize = 256 << 10;

/// A numbered view of some lines of a file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct View {
    pub(crate) text: String,
    /// 1-based, inclusive; `last < first` when nothing was shown.
    pub(crate) first: usize,
    pub(crate) last: usize,
    pub(crate) total: usize,
    /// Lines after `last` exist and were not shown.
    pub(crate) more: bool,
    /// Some shown lines were cut at [`MAX_LINE_CHARS`].
    pub(crate) cut_lines: bool,
}

/// Lines `offset..` (1-based) of `text`, at most `limit` of them and [`MAX_VIEW_BYTES`] in
/// all, each as `cat -n` prints it (number, tab, line without its ending).
pub(crate) fn view(text: &str, offset: usize, limit: usize) -> View {
    let total = line_count(text);
    let first = offset.max(1);
    let mut out = String::new();
    let mut last = first - 1;
    let mut cut_lines = false;
    for (index, line) in text.lines().enumerate().skip(first - 1).take(limit) {
        let mut line = line.strip_suffix('\r').unwrap_or(line);
        let cut = line.char_indices().nth(MAX_LINE_CHARS).map(|(at, _)| at);
        if let Some(at) = cut {
            line = &line[..at];
            cut_lines = true;
        }
        let numbered =
            format!("{:>6}\t{line}{}\n", index + 1, if cut.is_some() { "…" } else { "" });
        if out.len() + numbered.len() > MAX_VIEW_BYTES && last >= first {
            break;
        }
        out.push_str(&numbered);
        last = index + 1;
    }
    View { text: out, first, last, total, more: last < total, cut_lines }
}

/// Lines as an editor counts them: a final newline does not start another line.
pub(crate) fn line_count(text: &str) -> usize {
    text.lines().count()
}

/// The 1-based line on which byte `at` of `text` falls.
pub(crate) fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// The file uses CRLF line endings (most of its line breaks are `\r\n`).
fn uses_crlf(text: &str) -> bool {
    let crlf = text.matches("\r\n").count();
    crlf > 0 && crlf * 2 >= text.matches('\n').count()
}

/// `new` in the line-ending style of `old` (a model writes `\n`), with a final newline when
/// `old` had one.
pub(crate) fn in_style_of(old: &str, new: &str) -> String {
    let mut new = if uses_crlf(old) && !new.contains('\r') {
        new.replace('\n', "\r\n")
    } else {
        new.to_owned()
    };
    if old.ends_with('\n') && !new.is_empty() && !new.ends_with('\n') {
        new.push_str(if uses_crlf(old) { "\r\n" } else { "\n" });
    }
    new
}

/// What a replacement did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Edited {
    pub(crate) text: String,
    pub(crate) replacements: usize,
    /// The line of the first replacement.
    pub(crate) first_line: usize,
}

/// Why a replacement could not be made; the text is for the model.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum EditError {
    NotFound,
    Ambiguous(usize),
}

/// Replaces `old` by `new` in `text`: exactly one occurrence, or every one with `all`. In a
/// CRLF file, a search string written with `\n` matches the file's `\r\n` and the replacement
/// gets `\r\n` too.
pub(crate) fn replace(text: &str, old: &str, new: &str, all: bool) -> Result<Edited, EditError> {
    let (old, new) = if uses_crlf(text) && old.contains('\n') && !old.contains('\r') {
        (old.replace('\n', "\r\n"), new.replace('\n', "\r\n"))
    } else {
        (old.to_owned(), new.to_owned())
    };
    let positions: Vec<usize> = text.match_indices(&old).map(|(at, _)| at).collect();
    let Some(&first) = positions.first() else {
        return Err(EditError::NotFound);
    };
    if positions.len() > 1 && !all {
        return Err(EditError::Ambiguous(positions.len()));
    }
    let first_line = line_of(text, first);
    let text = if all { text.replace(&old, &new) } else { text.replacen(&old, &new, 1) };
    Ok(Edited { text, replacements: positions.len(), first_line })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn views_are_numbered_bounded_and_say_what_is_left() {
        let text = "a\nb\r\nc\nd\n";
        let all = view(text, 1, 10);
        assert_eq!(all.text, "     1\ta\n     2\tb\n     3\tc\n     4\td\n");
        assert_eq!((all.first, all.last, all.total, all.more), (1, 4, 4, false));
        let middle = view(text, 2, 2);
        assert_eq!(middle.text, "     2\tb\n     3\tc\n");
        assert!(middle.more);
        let long = "x".repeat(MAX_LINE_CHARS + 5);
        let cut = view(&long, 1, 1);
        assert!(cut.cut_lines && cut.text.ends_with("x…\n"));
        let past = view(text, 9, 5);
        assert_eq!((past.text.as_str(), past.last < past.first), ("", true));
    }

    #[test]
    fn a_replacement_needs_exactly_one_match_unless_all() {
        assert_eq!(replace("a b a", "c", "d", false), Err(EditError::NotFound));
        assert_eq!(replace("a b a", "a", "d", false), Err(EditError::Ambiguous(2)));
        let edited = replace("x\na b a\n", "a", "d", true).unwrap();
        assert_eq!(
            (edited.text.as_str(), edited.replacements, edited.first_line),
            ("x\nd b d\n", 2, 2)
        );
        let one = replace("one\ntwo\nthree\n", "two", "2", false).unwrap();
        assert_eq!((one.text.as_str(), one.first_line), ("one\n2\nthree\n", 2));
    }

    #[test]
    fn crlf_files_keep_their_line_endings() {
        let text = "one\r\ntwo\r\nthree\r\n";
        let edited = replace(text, "one\ntwo", "1\n2", false).unwrap();
        assert_eq!(edited.text, "1\r\n2\r\nthree\r\n");
        assert_eq!(in_style_of(text, "a\nb"), "a\r\nb\r\n");
        assert_eq!(in_style_of("a\n", "b"), "b\n");
        assert_eq!(in_style_of("a", "b"), "b");
        assert_eq!(in_style_of("a\n", "b\n"), "b\n");
    }
}
