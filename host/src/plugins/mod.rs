//! Plugins: finding, loading and serving them.
//!
//! The registry holds an immutable snapshot of the loaded plugins behind a lock that is held
//! only to clone or swap an `Arc`. A tool call takes the snapshot once and finishes on the
//! generation it started on, whatever is loaded meanwhile.

mod loader;
mod services;
mod v1;

pub(crate) use loader::{LoadedPlugin, Rejection, load};
pub(crate) use services::CallServices;
pub(crate) use v1::{PluginCall, PluginOutput};

use crate::model::ToolDefinition;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use tokio::sync::watch;

/// The plugins serving now.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// In load order: plugin directories in the order given, files by name within each.
    pub(crate) plugins: Vec<Arc<LoadedPlugin>>,
}

impl Snapshot {
    /// The plugin serving `tool`: the first one, in load order, that declares it.
    pub(crate) fn find_tool(&self, tool: &str) -> Option<Arc<LoadedPlugin>> {
        self.plugins
            .iter()
            .find(|p| p.tools.iter().any(|t| t.name == tool))
            .cloned()
    }

    /// Every tool the model may call, without duplicates.
    pub(crate) fn tool_definitions(&self) -> Vec<ToolDefinition> {
        let mut seen = HashSet::new();
        self.plugins
            .iter()
            .flat_map(|p| p.tools.iter())
            .filter(|t| seen.insert(t.name.clone()))
            .cloned()
            .collect()
    }

    /// The plugins' prompt sections, sorted by order then id.
    pub(crate) fn prompt_sections(&self) -> Vec<loader::PromptSection> {
        let mut sections: Vec<_> = self
            .plugins
            .iter()
            .flat_map(|p| p.prompt_sections.iter().cloned())
            .collect();
        sections.sort_by(|a, b| (a.order, &a.id).cmp(&(b.order, &b.id)));
        sections
    }
}

/// The registry of loaded plugins.
#[derive(Debug)]
pub(crate) struct Registry {
    snapshot: RwLock<Arc<Snapshot>>,
    ready: watch::Sender<bool>,
    /// Where private copies of plugin files are written while being loaded.
    scratch: PathBuf,
}

impl Registry {
    pub(crate) fn new(scratch: PathBuf) -> Self {
        Self {
            snapshot: RwLock::default(),
            ready: watch::Sender::new(false),
            scratch,
        }
    }

    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(
            &self
                .snapshot
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Waits until the initial scan of the plugin directories is done.
    pub(crate) async fn ready(&self) {
        let mut ready = self.ready.subscribe();
        let _ = ready.wait_for(|ready| *ready).await;
    }

    /// Loads every hotsh plugin in `dirs` (blocking). Files that are not plugins, or that are
    /// rejected, are logged and skipped; the registry serves whatever loaded.
    pub(crate) fn load_dirs(&self, dirs: &[PathBuf]) {
        let mut plugins: Vec<Arc<LoadedPlugin>> = Vec::new();
        for dir in dirs {
            for path in candidate_files(dir) {
                match load(&path, &self.scratch) {
                    Ok(plugin) => {
                        tracing::info!(
                            plugin = %plugin.name,
                            version = %plugin.version,
                            generation = %plugin.generation,
                            hash = format_args!("{:016x}", plugin.content_hash),
                            path = %path.display(),
                            tools = ?plugin.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
                            "plugin loaded"
                        );
                        if let Some(other) = plugins.iter().find(|p| p.name == plugin.name) {
                            tracing::warn!(
                                plugin = %plugin.name,
                                kept = %other.path.display(),
                                skipped = %path.display(),
                                "two files provide the same plugin; keeping the first"
                            );
                            continue;
                        }
                        plugins.push(Arc::new(plugin));
                    }
                    Err(Rejection::NotAPlugin) => {
                        tracing::debug!(path = %path.display(), "not a hotsh plugin; skipped");
                    }
                    Err(rejection) => {
                        tracing::warn!(path = %path.display(), "plugin rejected: {rejection}");
                    }
                }
            }
        }
        *self
            .snapshot
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(Snapshot { plugins });
        self.ready.send_replace(true);
    }
}

/// The files in `dir` named like shared libraries (`lib*.so`), sorted by name.
fn candidate_files(dir: &Path) -> Vec<PathBuf> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) => {
            tracing::warn!(dir = %dir.display(), %error, "cannot read plugin directory");
            return Vec::new();
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_type()
                .is_ok_and(|t| t.is_file() || t.is_symlink())
        })
        .map(|entry| entry.path())
        .filter(|path| is_library_name(path))
        .collect();
    files.sort();
    files
}

pub(crate) fn is_library_name(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|name| {
            name.starts_with(std::env::consts::DLL_PREFIX)
                && name.ends_with(std::env::consts::DLL_SUFFIX)
        })
}
