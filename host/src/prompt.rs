//! What the host itself writes into the system prompt: who the agent is, the environment it
//! works in, and the project's own instructions (`AGENTS.md` files, as codex and others read
//! them). The plugins' sections come between the environment and the project's instructions.

use std::path::{Path, PathBuf};

pub(crate) use hotsh_core::tools::PromptSection;

/// The most of one `AGENTS.md` file that goes into the prompt.
const MAX_INSTRUCTIONS: usize = 32 << 10;

/// The host's parts of a session's system prompt, read once per turn (files may change
/// between turns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostSections {
    pub(crate) intro: String,
    pub(crate) environment: String,
    /// `None` when there is no `AGENTS.md` on the way from the repository root to the cwd.
    pub(crate) instructions: Option<String>,
}

impl HostSections {
    /// Reads what the sections need (blocking: a few small files); `date` is the session's
    /// (the day it began: the prompt does not change at midnight).
    pub(crate) fn read(cwd: &Path, date: &str) -> Self {
        let repository = repository_root(cwd);
        let intro = format!(
            "You are hotsh, a coding agent working for the user in {}. Use the tools to inspect \
             and change the project; report what you did and what you found.",
            cwd.display()
        );
        let uname = rustix::system::uname();
        let kernel = format!(", kernel {}", uname.release().to_string_lossy().trim());
        let git = match &repository {
            Some(root) => format!("in a git repository rooted at {}", root.display()),
            None => "not in a git repository".to_owned(),
        };
        let environment = format!(
            "## Environment\n\n\
             - Working directory: {}\n\
             - Platform: {} {}{kernel}\n\
             - Shell: commands run with `bash -c`\n\
             - Date (UTC): {}\n\
             - The working directory is {git}",
            cwd.display(),
            std::env::consts::OS,
            std::env::consts::ARCH,
            date,
        );
        Self { intro, environment, instructions: instructions(cwd, repository.as_deref()) }
    }
}

/// A subagent's part of its system prompt: that it answers another session's task, and its
/// agent definition's instructions.
pub(crate) fn subagent_part(parent: &hotsh_core::session::ParentLink) -> String {
    let mut part = String::from(
        "## You are a subagent\n\n\
         Another session gave you the task in the user's message. Work on it with the tools; \
         nobody can answer questions meanwhile. Your last message is all the other session \
         receives: make it a complete, self-contained report of what you found or did.",
    );
    if let Some(instructions) = &parent.instructions {
        let agent = parent.agent.as_deref().unwrap_or("this agent");
        part.push_str(&format!("\n\n## Instructions of {agent}\n\n{instructions}"));
    }
    part
}

/// The repository holding `dir`: the nearest ancestor (or itself) with a `.git` entry.
fn repository_root(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().find(|d| d.join(".git").exists()).map(Path::to_owned)
}

/// The `AGENTS.md` files from the repository root down to `cwd` (just the cwd's outside a
/// repository), the most general first, each bounded.
fn instructions(cwd: &Path, repository: Option<&Path>) -> Option<String> {
    let top = repository.unwrap_or(cwd);
    let mut dirs: Vec<&Path> = cwd.ancestors().take_while(|d| d.starts_with(top)).collect();
    dirs.reverse();
    let mut parts = Vec::new();
    for dir in dirs {
        let path = dir.join("AGENTS.md");
        let Ok(bytes) = std::fs::read(&path) else { continue };
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if text.len() > MAX_INSTRUCTIONS {
            let mut cut = MAX_INSTRUCTIONS;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push_str(&format!("\n[… the rest of {} is not shown …]", path.display()));
        }
        parts.push(format!("### {}\n\n{}", path.display(), text.trim_end()));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "## Project instructions (AGENTS.md)\n\nFollow these instructions of the project's; \
             the later ones are more specific.\n\n{}",
            parts.join("\n\n")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_files_from_the_repository_root_down_to_the_cwd() {
        let root = tempfile_dir();
        let cwd = root.join("crates/app");
        std::fs::create_dir_all(&cwd).expect("dirs");
        std::fs::create_dir_all(root.join(".git")).expect(".git");
        std::fs::write(root.join("AGENTS.md"), "Use tabs.\n").expect("write");
        std::fs::write(cwd.join("AGENTS.md"), "Run `make app`.\n").expect("write");
        // Above the repository: not read.
        std::fs::write(root.parent().expect("parent").join("AGENTS.md"), "outside").ok();
        let sections = HostSections::read(&cwd, "2026-12-01");
        let text = sections.instructions.expect("instructions");
        let general = text.find("Use tabs.").expect("the root's");
        let specific = text.find("Run `make app`.").expect("the cwd's");
        assert!(general < specific, "{text}");
        assert!(!text.contains("outside"), "{text}");
        assert!(
            sections
                .environment
                .contains(&format!("in a git repository rooted at {}", root.display()))
        );
        assert!(sections.environment.contains("Date (UTC): 2026-12-01"));
        let _ = std::fs::remove_dir_all(&root);
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir()
            .join(format!("hotsh-prompt-test-{}", std::process::id()))
            .join("repo");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }
}
