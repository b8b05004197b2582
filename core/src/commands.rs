//! Slash commands: a prompt that starts with one runs it instead of going to the model as it
//! is. An unknown `/word` is an ordinary prompt (a path such as `/etc/hosts` stays one).

/// A command the user can type, as clients list it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandInfo {
    pub name: &'static str,
    pub description: &'static str,
    /// The hint for its argument, when it takes one.
    pub hint: Option<&'static str>,
}

/// Every command, in the order clients list them.
pub const COMMANDS: &[CommandInfo] = &[
    CommandInfo {
        name: "compact",
        description: "Summarise the conversation so far to free the context window (the full \
                      thread stays in the session's log)",
        hint: Some("what the summary should focus on (optional)"),
    },
    CommandInfo {
        name: "hooks",
        description: "List the hooks configured for this session, where each comes from, and \
                      whether a project's hook may run",
        hint: None,
    },
    CommandInfo {
        name: "init",
        description: "Write or update AGENTS.md: the project's instructions for agents",
        hint: Some("anything AGENTS.md should say (optional)"),
    },
    CommandInfo {
        name: "permissions",
        description: "List the rules you allowed for this session and this project, or remove \
                      one",
        hint: Some("remove N (optional)"),
    },
];

/// A command a prompt asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlashCommand {
    /// Compact the history now, the summary focused on this.
    Compact { focus: Option<String> },
    /// Have the model write or update `AGENTS.md`, with this added.
    Init { extra: Option<String> },
    /// List the hooks.
    Hooks,
    /// List the permission rules, or change them as the arguments say.
    Permissions { args: Option<String> },
}

/// The command `text` starts with, if it names one.
pub fn parse(text: &str) -> Option<SlashCommand> {
    let rest = text.trim_start().strip_prefix('/')?;
    let (name, args) = match rest.split_once(char::is_whitespace) {
        Some((name, args)) => (name, Some(args.trim()).filter(|a| !a.is_empty())),
        None => (rest.trim_end(), None),
    };
    let args = args.map(str::to_owned);
    match name {
        "compact" => Some(SlashCommand::Compact { focus: args }),
        "init" => Some(SlashCommand::Init { extra: args }),
        "hooks" => Some(SlashCommand::Hooks),
        "permissions" => Some(SlashCommand::Permissions { args }),
        _ => None,
    }
}

/// What the model is asked for `/init`.
pub fn init_prompt(extra: Option<&str>) -> String {
    let mut text = String::from(
        "Write or update the file AGENTS.md at the root of this project: the instructions a \
         coding agent needs to work here. Look at the project first (its layout, build and test \
         commands, its conventions and style, anything surprising). If AGENTS.md exists, keep \
         what is still true and correct what is not. Keep it short and concrete: how to build, \
         how to run the tests, how the code is organised, the rules to follow. Then say what \
         you wrote.",
    );
    if let Some(extra) = extra {
        text.push_str(&format!("\n\nThe user adds: {extra}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_and_anything_else_is_a_prompt() {
        assert_eq!(parse("/compact"), Some(SlashCommand::Compact { focus: None }));
        assert_eq!(
            parse("  /compact  the parser work \n"),
            Some(SlashCommand::Compact { focus: Some("the parser work".into()) })
        );
        assert_eq!(parse("/init"), Some(SlashCommand::Init { extra: None }));
        assert_eq!(parse("/etc/hosts is odd"), None);
        assert_eq!(
            parse("/permissions remove 2"),
            Some(SlashCommand::Permissions { args: Some("remove 2".into()) })
        );
        assert_eq!(parse("/compacting"), None);
        assert_eq!(parse("please /compact"), None);
    }
}
