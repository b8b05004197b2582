//! Permission rules: what the user allowed once and for all when a call asked for a wider
//! sandbox mode ("Allow for this session", "Always allow in this project"). A rule names what
//! it covers (commands or file writes), which ones (one exact command or path, or the
//! commands that start with a prefix) and the mode it grants. Session rules are logged with
//! the session; project rules are the host's to keep.

pub mod settings;

use crate::sandbox::Mode;
use serde::{Deserialize, Serialize};

/// What a rule covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Covers {
    /// Commands the `bash` tool runs.
    Command,
    /// Files the file tools write.
    Write,
}

/// Which commands or paths a rule covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// This command or path, byte for byte.
    Exact(String),
    /// A simple command (one program and its arguments, no shell operators) whose words begin
    /// with these words.
    Prefix(String),
}

/// One rule: calls it covers run under `mode` without asking.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Rule {
    pub covers: Covers,
    pub pattern: Pattern,
    pub mode: Mode,
}

/// Characters that make a command more than one simple command, or let it compute what it
/// runs: a prefix rule never covers a command holding one.
const SHELL_OPERATORS: &[char] =
    &[';', '&', '|', '<', '>', '$', '`', '(', ')', '{', '}', '\n', '\r', '\\', '#'];

/// Whether `command` is one program with plain arguments.
fn is_simple(command: &str) -> bool {
    !command.contains(SHELL_OPERATORS)
}

/// The words of a simple command as bash splits them (on spaces and tabs only: another
/// blank is part of a word to bash).
fn words(command: &str) -> impl Iterator<Item = &str> {
    command.split([' ', '\t']).filter(|word| !word.is_empty())
}

/// Programs whose first argument names what they do (`git commit`, `cargo test`): a rule made
/// from one of their commands covers that subcommand only.
const WITH_SUBCOMMANDS: &[&str] = &[
    "apt",
    "brew",
    "bun",
    "cargo",
    "deno",
    "docker",
    "dotnet",
    "gh",
    "git",
    "go",
    "gradle",
    "helm",
    "kubectl",
    "make",
    "mvn",
    "npm",
    "npx",
    "pip",
    "pip3",
    "pnpm",
    "podman",
    "poetry",
    "rustup",
    "systemctl",
    "terraform",
    "uv",
    "yarn",
];

/// Whether `word` reads as a subcommand (`commit`, `build`, `run-tests`), not a path, option
/// or value.
fn is_subcommand(word: &str) -> bool {
    let mut chars = word.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

impl Rule {
    /// The rule that allowing `what` (a command, or the path of a file write) for good grants:
    /// for a simple command, every command of the same program (`touch …` from `touch a`),
    /// and of the same subcommand for the programs of [`WITH_SUBCOMMANDS`] (`git commit …`
    /// from `git commit -m "x"`); otherwise that exact command or path.
    pub fn for_call(covers: Covers, what: &str, mode: Mode) -> Rule {
        let pattern = match covers {
            Covers::Command if is_simple(what) => {
                let words: Vec<&str> = words(what).collect();
                match words.as_slice() {
                    [] => Pattern::Exact(what.to_owned()),
                    [program, second, ..]
                        if WITH_SUBCOMMANDS.contains(program) && is_subcommand(second) =>
                    {
                        Pattern::Prefix(format!("{program} {second}"))
                    }
                    [program, ..] => Pattern::Prefix((*program).to_owned()),
                }
            }
            _ => Pattern::Exact(what.to_owned()),
        };
        Rule { covers, pattern, mode }
    }

    /// Whether the rule covers `what` (of kind `covers`).
    pub fn covers(&self, covers: Covers, what: &str) -> bool {
        if covers != self.covers {
            return false;
        }
        match &self.pattern {
            Pattern::Exact(exact) => exact == what,
            Pattern::Prefix(prefix) => {
                is_simple(what) && {
                    let mut given = words(what);
                    words(prefix).all(|word| given.next() == Some(word))
                }
            }
        }
    }

    /// The calls it covers, for the user: "`git commit …` commands", "writes of `/etc/x`".
    pub fn what(&self) -> String {
        match (&self.pattern, self.covers) {
            (Pattern::Prefix(prefix), _) => format!("`{prefix} …` commands"),
            (Pattern::Exact(command), Covers::Command) => format!("the command `{command}`"),
            (Pattern::Exact(path), Covers::Write) => format!("writes of `{path}`"),
        }
    }

    /// One line for the user: what it covers and the mode it grants.
    pub fn describe(&self) -> String {
        format!("{} run under {}", self.what(), self.mode)
    }
}

/// The rule of `rules` that lets `what` run under `wanted` (a mode at least as wide), if any.
pub fn granting<'a>(
    rules: impl IntoIterator<Item = &'a Rule>,
    covers: Covers,
    what: &str,
    wanted: Mode,
) -> Option<&'a Rule> {
    rules.into_iter().find(|rule| rule.mode >= wanted && rule.covers(covers, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simple_command_gives_a_prefix_rule_of_its_program_and_subcommand() {
        let rule = Rule::for_call(Covers::Command, "git commit -m first", Mode::DangerFullAccess);
        assert_eq!(rule.pattern, Pattern::Prefix("git commit".into()));
        assert!(rule.covers(Covers::Command, "git commit -m second"));
        assert!(rule.covers(Covers::Command, "git   commit"));
        assert!(!rule.covers(Covers::Command, "git push"));
        assert!(!rule.covers(Covers::Command, "git commitx"));
        assert!(!rule.covers(Covers::Command, "git\u{a0}commit"));
        assert!(rule.covers(Covers::Command, "git commit -m 'a message'"));
        assert!(!rule.covers(Covers::Write, "git commit"));
        for (command, prefix) in [
            ("touch /tmp/x", "touch"),
            ("touch first", "touch"),
            ("cargo test -q", "cargo test"),
            ("cargo --version", "cargo"),
            ("/usr/bin/git commit", "/usr/bin/git"),
        ] {
            let rule = Rule::for_call(Covers::Command, command, Mode::DangerFullAccess);
            assert_eq!(rule.pattern, Pattern::Prefix(prefix.into()), "{command}");
        }
    }

    #[test]
    fn a_prefix_never_covers_a_command_that_does_more() {
        let rule = Rule::for_call(Covers::Command, "git commit -m x", Mode::DangerFullAccess);
        for more in [
            "git commit -m x; rm -rf ~",
            "git commit -m x && curl evil",
            "git commit -m \"$(rm -rf ~)\"",
            "git commit -m `id`",
            "git commit > /etc/passwd",
            "git commit\nrm -rf ~",
            "git commit -m x | sh",
        ] {
            assert!(!rule.covers(Covers::Command, more), "{more}");
        }
    }

    #[test]
    fn a_compound_command_or_a_write_gives_an_exact_rule() {
        let rule = Rule::for_call(Covers::Command, "make && make install", Mode::WorkspaceWrite);
        assert_eq!(rule.pattern, Pattern::Exact("make && make install".into()));
        assert!(rule.covers(Covers::Command, "make && make install"));
        assert!(!rule.covers(Covers::Command, "make"));
        let write = Rule::for_call(Covers::Write, "/etc/hosts", Mode::DangerFullAccess);
        assert_eq!(write.pattern, Pattern::Exact("/etc/hosts".into()));
        assert_eq!(write.describe(), "writes of `/etc/hosts` run under danger-full-access");
    }

    #[test]
    fn a_rule_grants_its_mode_and_no_wider() {
        let rules = [Rule::for_call(Covers::Command, "cargo build", Mode::WorkspaceWrite)];
        assert!(
            granting(&rules, Covers::Command, "cargo build -q", Mode::WorkspaceWrite).is_some()
        );
        assert!(granting(&rules, Covers::Command, "cargo build", Mode::DangerFullAccess).is_none());
    }
}
