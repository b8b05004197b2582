//! What the command-line subcommands print for a person: `error:` and `warning:` lines on
//! stderr (coloured only on a terminal, and never when `NO_COLOR` is set), and stdout that a
//! closed pipe (`hotsh … | head`) ends quietly.

use std::io::{IsTerminal as _, Write as _};

/// Whether `NO_COLOR` asks for no colour (any non-empty value, per no-color.org).
fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// Whether to colour what goes to stderr.
pub(crate) fn color_stderr() -> bool {
    !no_color() && std::io::stderr().is_terminal()
}

/// Whether to colour what goes to stdout.
pub(crate) fn color_stdout() -> bool {
    !no_color() && std::io::stdout().is_terminal()
}

/// `text` in an SGR style (e.g. `1;31`) when `color` is on.
pub(crate) fn paint(color: bool, code: &str, text: &str) -> String {
    if color { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_owned() }
}

/// `error: …` on stderr.
pub(crate) fn error(message: &str) {
    let label = paint(color_stderr(), "1;31", "error:");
    eprintln!("{label} {message}");
}

/// `warning: …` on stderr.
pub(crate) fn warning(message: &str) {
    let label = paint(color_stderr(), "1;33", "warning:");
    eprintln!("{label} {message}");
}

/// Writes a line to stdout. When stdout is a pipe that was closed (`| head`), the process
/// exits quietly with status 0: the reader has what it wanted.
pub(crate) fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let written = stdout.write_all(line.as_bytes()).and_then(|()| stdout.write_all(b"\n"));
    if let Err(error) = written.and_then(|()| stdout.flush()) {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        // Anything else (a full disk behind a redirect) is worth saying once.
        eprintln!("hotsh: cannot write to stdout: {error}");
        std::process::exit(1);
    }
}
