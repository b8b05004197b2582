//! Cutting text to a size without splitting a character.

/// The largest index at most `at` (and at most `text`'s length) that is a character boundary.
pub fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut cut = at.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    cut
}

/// The smallest index at least `at` (and at most `text`'s length) that is a character boundary.
pub fn ceil_char_boundary(text: &str, at: usize) -> usize {
    let mut cut = at.min(text.len());
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    cut
}

/// `text` when it is at most `cap` bytes; else its first `head` and last `tail` bytes (on
/// character boundaries) around a line `marker` makes from the number of bytes left out.
pub fn cut_middle(
    text: &str,
    cap: usize,
    head: usize,
    tail: usize,
    marker: impl FnOnce(usize) -> String,
) -> String {
    if text.len() <= cap {
        return text.to_owned();
    }
    let head = floor_char_boundary(text, head);
    let tail = ceil_char_boundary(text, text.len().saturating_sub(tail)).max(head);
    format!("{}\n{}\n{}", &text[..head], marker(tail - head), &text[tail..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_keep_characters_whole() {
        assert_eq!(cut_middle("short", 10, 5, 5, |n| format!("[{n}]")), "short");
        assert_eq!(cut_middle("aébcdéf", 4, 2, 2, |n| format!("[{n}]")), "a\n[7]\nf");
        assert_eq!(floor_char_boundary("é", 1), 0);
        assert_eq!(ceil_char_boundary("é", 1), 2);
    }
}
