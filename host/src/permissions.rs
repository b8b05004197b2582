//! Project rules: what the user chose to "Always allow in this project". They are kept in the
//! data directory, one file per project (`permissions/<hash of its path>.json`), never in the
//! project itself: the data directory is read-only to every confined command, so no command
//! the model runs can grant itself a rule. Every hotsh of the user reads the file again for
//! each call it gates, so a rule added or removed by one is seen by the others at once.

use hotsh_core::permissions::Rule;
use hotsh_core::permissions::settings::Fingerprint;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The project rules of one user.
#[derive(Debug, Clone)]
pub(crate) struct ProjectRules {
    /// `<data dir>/permissions`; `None` without a data directory (nothing is kept).
    dir: Option<PathBuf>,
}

/// One project's file.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ProjectFile {
    /// The project's folder (the file's name is a hash of it).
    project: PathBuf,
    rules: Vec<Rule>,
    /// The project's hooks the user allowed (`.claude/settings*.json`), as they were then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    hooks: Vec<Fingerprint>,
}

/// The most rules one project keeps (a file past it is refused as broken).
const MAX_RULES: usize = 1000;

impl ProjectRules {
    pub(crate) fn new(data_dir: Option<&Path>) -> Self {
        Self { dir: data_dir.map(|dir| dir.join("permissions")) }
    }

    fn file_of(&self, project: &Path) -> Option<PathBuf> {
        let digest =
            ring::digest::digest(&ring::digest::SHA256, project.as_os_str().as_encoded_bytes());
        let name: String = digest.as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect();
        Some(self.dir.as_ref()?.join(format!("{name}.json")))
    }

    /// The rules of `project` (none when it has no file; a broken file is warned about and
    /// grants nothing).
    pub(crate) fn of(&self, project: &Path) -> Vec<Rule> {
        self.read(project).map(|file| file.rules).unwrap_or_default()
    }

    fn read(&self, project: &Path) -> Option<ProjectFile> {
        let path = self.file_of(project)?;
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read the project's rules");
                return None;
            }
        };
        match serde_json::from_slice::<ProjectFile>(&text) {
            // Another project whose path hashes alike would be a collision of SHA-256.
            Ok(file)
                if file.project == project
                    && file.rules.len() <= MAX_RULES
                    && file.hooks.len() <= MAX_RULES =>
            {
                Some(file)
            }
            Ok(_) => {
                tracing::warn!(path = %path.display(), "the project's rules file is not this project's, or too long; it grants nothing");
                None
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "the project's rules file is broken; it grants nothing");
                None
            }
        }
    }

    /// Adds `rule` to `project`'s rules (kept when it has it already).
    pub(crate) fn add(&self, project: &Path, rule: Rule) -> anyhow::Result<()> {
        self.change(project, |rules| {
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        })
    }

    /// Removes `rule` from `project`'s rules; whether it had it.
    pub(crate) fn remove(&self, project: &Path, rule: &Rule) -> anyhow::Result<bool> {
        let mut had = false;
        self.change(project, |rules| {
            had = rules.contains(rule);
            rules.retain(|kept| kept != rule);
        })?;
        Ok(had)
    }

    /// The project's hooks the user allowed to run ("Always run them in this project").
    pub(crate) fn hooks_allowed(&self, project: &Path) -> Vec<Fingerprint> {
        self.read(project).map(|file| file.hooks).unwrap_or_default()
    }

    /// Adds `hooks` to those the user allowed in `project`.
    pub(crate) fn allow_hooks(&self, project: &Path, hooks: &[Fingerprint]) -> anyhow::Result<()> {
        self.edit(project, |file| {
            for hook in hooks {
                if !file.hooks.contains(hook) {
                    file.hooks.push(hook.clone());
                }
            }
        })
    }

    /// Rewrites `project`'s rules with `edit` applied.
    fn change(&self, project: &Path, edit: impl FnOnce(&mut Vec<Rule>)) -> anyhow::Result<()> {
        self.edit(project, |file| edit(&mut file.rules))
    }

    /// Rewrites `project`'s file with `edit` applied: written beside it, then renamed over it.
    fn edit(&self, project: &Path, edit: impl FnOnce(&mut ProjectFile)) -> anyhow::Result<()> {
        let Some(path) = self.file_of(project) else {
            anyhow::bail!("hotsh has no data directory to keep the project's rules in");
        };
        let mut file = self.read(project).unwrap_or_else(|| ProjectFile {
            project: project.to_owned(),
            rules: Vec::new(),
            hooks: Vec::new(),
        });
        edit(&mut file);
        anyhow::ensure!(
            file.rules.len() <= MAX_RULES && file.hooks.len() <= MAX_RULES,
            "a project keeps {MAX_RULES} rules and {MAX_RULES} hooks at most"
        );
        crate::dirs::replace_file(&path, &serde_json::to_vec_pretty(&file)?, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotsh_core::permissions::Covers;
    use hotsh_core::sandbox::Mode;

    #[test]
    fn rules_are_kept_per_project_and_removed() {
        let data = tempfile::tempdir().expect("temp dir");
        let store = ProjectRules::new(Some(data.path()));
        let (one, two) = (Path::new("/work/one"), Path::new("/work/two"));
        let rule = Rule::for_call(Covers::Command, "git commit -m x", Mode::DangerFullAccess);
        store.add(one, rule.clone()).expect("added");
        store.add(one, rule.clone()).expect("added again");
        assert_eq!(store.of(one), std::slice::from_ref(&rule));
        assert!(store.of(two).is_empty());
        assert!(store.remove(one, &rule).expect("removed"));
        assert!(!store.remove(one, &rule).expect("removed again"));
        assert!(store.of(one).is_empty());
    }

    #[test]
    fn a_broken_file_grants_nothing_and_is_replaced_on_the_next_change() {
        let data = tempfile::tempdir().expect("temp dir");
        let store = ProjectRules::new(Some(data.path()));
        let project = Path::new("/work/p");
        let path = store.file_of(project).expect("a file");
        std::fs::create_dir_all(path.parent().expect("dir")).expect("dir");
        std::fs::write(&path, "{not json").expect("written");
        assert!(store.of(project).is_empty());
        let rule = Rule::for_call(Covers::Write, "/etc/x", Mode::DangerFullAccess);
        store.add(project, rule.clone()).expect("added");
        assert_eq!(store.of(project), [rule]);
        assert!(ProjectRules::new(None).of(project).is_empty());
    }
}
