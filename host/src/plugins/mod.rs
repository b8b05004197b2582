//! Plugins: finding, loading and serving them.
//!
//! The registry holds an immutable snapshot of the loaded plugins behind a lock that is held
//! only to clone or swap an `Arc`. A tool call takes the snapshot once and finishes on the
//! generation it started on, whatever is loaded meanwhile.

mod check;
mod checked;
mod files;
pub(crate) mod gate;
mod loader;
mod services;
mod v1;
mod watcher;

pub(crate) use check::{CheckFailure, Description};
pub(crate) use gate::CallSandbox;
pub(crate) use loader::{LoadedPlugin, Rejection};
pub(crate) use services::CallServices;
pub(crate) use v1::{PluginCall, PluginOutput};
pub(crate) use watcher::watch_plugin_dirs;

use crate::model::ToolDefinition;
use crate::sync::lock;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
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
        self.plugins.iter().find(|p| p.tools.iter().any(|t| t.name == tool)).cloned()
    }

    /// Every tool the model may call, without duplicates, in one order whatever the plugin
    /// directories and the order plugins loaded in: by plugin name, then as each plugin lists
    /// its tools. (A tool two plugins declare is the first one's in load order, as ever.) A
    /// session recorded with a plugin from `--plugin-dir` then offers the model the same list
    /// when it is replayed with every plugin in one directory.
    pub(crate) fn tool_definitions(&self) -> Vec<ToolDefinition> {
        let mut seen = HashSet::new();
        let mut tools: Vec<(&str, &ToolDefinition)> = self
            .plugins
            .iter()
            .flat_map(|p| p.tools.iter().map(move |t| (p.name.as_str(), t)))
            .filter(|(_, t)| seen.insert(t.name.clone()))
            .collect();
        // Stable: each plugin's own order is kept.
        tools.sort_by_key(|(plugin, _)| *plugin);
        tools.into_iter().map(|(_, tool)| tool.clone()).collect()
    }

    /// The plugins' prompt sections, sorted by order then id.
    /// Whether a plugin declares a hook on `event` (asked at every hook point: nothing is
    /// allocated).
    pub(crate) fn hooks_on(&self, event: &str) -> bool {
        self.plugins.iter().any(|p| p.hooks.iter().any(|(on, _)| on == event))
    }

    /// The hooks the plugins declare on `event` (each plugin and its matcher), by plugin
    /// name, then as each plugin lists them.
    pub(crate) fn hooks_for(&self, event: &str) -> Vec<(Arc<LoadedPlugin>, String)> {
        let mut hooks: Vec<_> = self
            .plugins
            .iter()
            .flat_map(|p| {
                p.hooks
                    .iter()
                    .filter(|(on, _)| on == event)
                    .map(|(_, m)| (Arc::clone(p), m.clone()))
            })
            .collect();
        hooks.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        hooks
    }

    pub(crate) fn prompt_sections(&self) -> Vec<crate::prompt::PromptSection> {
        let mut sections: Vec<_> =
            self.plugins.iter().flat_map(|p| p.prompt_sections.iter().cloned()).collect();
        sections.sort_by(|a, b| (a.order, &a.id).cmp(&(b.order, &b.id)));
        sections
    }
}

/// Checks a plugin file in a child process (see `check.rs`); blocking.
pub(crate) fn check_in_child(path: &Path) -> Result<Description, CheckFailure> {
    check::in_child(path)
}

/// Runs the checking child's side of [`check_in_child`]; never returns.
pub(crate) fn check_child_main(path: &Path) -> ! {
    check::child_main(path)
}

/// `hotsh plugin check PATH`: checks the file the way the agent does (in a child process, so
/// a build that crashes or hangs is reported, not suffered) and prints what it offers on
/// stdout, or why it is rejected on stderr (exit status 1).
pub(crate) fn check(path: &Path) -> std::process::ExitCode {
    use crate::term::out;
    match check_in_child(path) {
        Ok(plugin) => {
            out(&format!("plugin {} {}", plugin.name, plugin.version));
            out(&format!("  file:      {}", path.display()));
            let loads = if loader::speaks(&plugin.abi_version) {
                "this hotsh loads it"
            } else {
                "this hotsh does not load it"
            };
            out(&format!(
                "  hotsh-abi: {} (the interface it was built for; this hotsh speaks {}: {loads})",
                plugin.abi_version,
                hotsh_abi::VERSION
            ));
            out(&format!("  hash:      {:016x}", plugin.content_hash));
            out(&format!("  loaded in: {:.2} ms", plugin.load_micros as f64 / 1000.0));
            out("tools:");
            for tool in &plugin.tools {
                out(&format!("  {}: {}", tool.name, tool.summary));
            }
            out("prompt sections:");
            for section in &plugin.prompt_sections {
                out(&format!(
                    "  {} (order {}, {} lines)",
                    section.id, section.order, section.lines
                ));
            }
            std::process::ExitCode::SUCCESS
        }
        Err(failure) => {
            crate::term::error(&format!("{} is rejected: {failure}", path.display()));
            std::process::ExitCode::FAILURE
        }
    }
}

/// What a user reads when no plugin provides a tool.
pub(crate) fn no_tools_message(dirs: &[PathBuf]) -> String {
    let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    format!(
        "no tools are loaded: no hotsh plugin was found in {}. Build the plugins with `cargo \
         build --release` (they land beside the hotsh executable) and install them for this \
         user with `target/release/hotsh install`, or pass `--plugin-dir DIR`",
        if looked.is_empty() { "any plugin directory".to_owned() } else { looked.join(", ") }
    )
}

/// What a refresh of one plugin file changed.
#[derive(Debug, Clone)]
pub(crate) enum PluginChange {
    /// A build was loaded; `replaced` is the generation it took over from, if any.
    Loaded { plugin: Arc<LoadedPlugin>, replaced: Option<Arc<LoadedPlugin>> },
    /// A build was refused; `serving` is the generation that keeps serving, if any.
    Rejected { path: PathBuf, reason: String, serving: Option<Arc<LoadedPlugin>> },
    /// The file is gone; its generation no longer takes new calls.
    Removed { plugin: Arc<LoadedPlugin> },
}

/// What a refresh found.
#[derive(Debug)]
pub(crate) enum Refresh {
    Unchanged,
    Changed(PluginChange),
    /// The file is missing; look again after this long before unloading it (cargo removes the
    /// old file a moment before it links the new one).
    LookAgain(Duration),
}

/// How long a plugin file must stay missing before its plugin is unloaded.
const REMOVAL_GRACE: Duration = Duration::from_millis(250);
/// How long an incomplete plugin file may stay unchanged before it counts as truncated.
const INCOMPLETE_GRACE: Duration = Duration::from_millis(500);

/// The identity of a file's current version: a new build is a new inode (cargo links it in),
/// an in-place write changes the size or the modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileIdentity {
    device: u64,
    inode: u64,
    size: u64,
    modified_ns: i128,
}

impl FileIdentity {
    fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        Self {
            device: meta.dev(),
            inode: meta.ino(),
            size: meta.size(),
            modified_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }
}

/// One plugin file and what the registry knows of it.
#[derive(Debug)]
struct Slot {
    /// Position of its directory in the plugin directories (load order).
    dir: usize,
    path: PathBuf,
    current: Option<Arc<LoadedPlugin>>,
    /// The version last read, so an event that changed nothing costs no read.
    identity: Option<FileIdentity>,
    /// The content last refused, so a rejected build is not tried again.
    rejected_hash: Option<u64>,
    /// Content that was not a complete library yet: reported as rejected only if the file
    /// stays that way.
    incomplete_hash: Option<u64>,
    missing_since: Option<Instant>,
}

/// The registry of loaded plugins.
#[derive(Debug)]
pub(crate) struct Registry {
    snapshot: RwLock<Arc<Snapshot>>,
    /// Every plugin file seen. The lock also serialises refreshes.
    slots: Mutex<Vec<Slot>>,
    dirs: Vec<PathBuf>,
    ready: watch::Sender<bool>,
    /// What plugins are told when asked for their tools (whether commands are sandboxed).
    context: hotsh_abi::ToolsContext,
    /// The initial scan's checks begun ahead of their loads (see [`Registry::load_all`]).
    early_checks: Mutex<HashMap<PathBuf, EarlyCheck>>,
    /// The builds this hotsh checked before, which it loads without checking again.
    checked: checked::CheckedBuilds,
}

/// A check in a throwaway process begun ahead of its load: the content hash of the bytes it
/// accepted (`None`: it did not accept them; the load checks them again and says why).
type EarlyCheck = std::thread::JoinHandle<Option<u64>>;

impl Registry {
    /// A registry of the plugins in `dirs`; the builds it checked are kept in `data_dir`
    /// (see `checked.rs`; `None`: every build is checked at every start).
    pub(crate) fn new(
        dirs: Vec<PathBuf>,
        context: hotsh_abi::ToolsContext,
        data_dir: Option<&Path>,
    ) -> Self {
        Self {
            snapshot: RwLock::default(),
            slots: Mutex::default(),
            dirs,
            ready: watch::Sender::new(false),
            context,
            early_checks: Mutex::default(),
            checked: checked::CheckedBuilds::new(data_dir),
        }
    }

    pub(crate) fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.snapshot.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Waits until the initial scan of the plugin directories is done.
    pub(crate) async fn ready(&self) {
        let mut ready = self.ready.subscribe();
        let _ = ready.wait_for(|ready| *ready).await;
    }

    /// Loads every hotsh plugin in the plugin directories (blocking). Files that are not
    /// plugins, or that are rejected, are logged and skipped.
    ///
    /// The loads go one after the other, in order; the checks in throwaway processes that
    /// come before them (most of a load's time) run side by side: while the first file is
    /// checked and loaded, the next ones (as many as there are other cores) are checked.
    pub(crate) fn load_all(&self) {
        self.checked.read();
        let files: Vec<PathBuf> = self.dirs.iter().flat_map(|dir| candidate_files(dir)).collect();
        let others = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
        for path in files.into_iter().skip(1).take(others.min(MAX_EARLY_CHECKS)) {
            let file = path.clone();
            let known = self.checked.known();
            let spawned = std::thread::Builder::new()
                .name("plugin-check".into())
                .spawn(move || check_early(&file, &known));
            match spawned {
                Ok(handle) => {
                    lock(&self.early_checks).insert(path, handle);
                }
                Err(error) => tracing::debug!(%error, "cannot check a plugin ahead of its load"),
            }
        }
        for dir in &self.dirs {
            self.scan(dir);
        }
        lock(&self.early_checks).clear();
        self.ready.send_replace(true);
        self.log_summary();
        self.checked.write();
    }

    /// Whether the check begun early for `path` accepted these very bytes.
    fn accepted_early(&self, path: &Path, hash: u64) -> bool {
        let Some(handle) = lock(&self.early_checks).remove(path) else { return false };
        let accepted = handle.join().ok().flatten() == Some(hash);
        if accepted {
            tracing::debug!(path = %path.display(), "plugin build checked ahead of its load");
        }
        accepted
    }

    /// Looks at every plugin file in `dir` (blocking); returns what changed.
    pub(crate) fn scan(&self, dir: &Path) -> Vec<PluginChange> {
        candidate_files(dir)
            .into_iter()
            .filter_map(|path| match self.refresh(&path) {
                Refresh::Changed(change) => Some(change),
                Refresh::Unchanged | Refresh::LookAgain(_) => None,
            })
            .collect()
    }

    /// One line saying that the initial scan is done and which plugins and tools serve.
    fn log_summary(&self) {
        let snapshot = self.snapshot();
        let plugins: Vec<String> = snapshot
            .plugins
            .iter()
            .map(|p| {
                let tools: Vec<&str> = p.tools.iter().map(|t| t.name.as_str()).collect();
                format!(
                    "{} {} from {} (tools: {})",
                    p.name,
                    p.version,
                    p.path.display(),
                    tools.join(", ")
                )
            })
            .collect();
        let serving = if plugins.is_empty() {
            "no plugins".to_owned()
        } else {
            format!("{} plugin(s): {}", plugins.len(), plugins.join("; "))
        };
        tracing::info!("initial plugin scan done; serving {serving}");
    }

    /// Looks at one plugin file again (blocking) and loads, rejects or unloads it.
    pub(crate) fn refresh(&self, path: &Path) -> Refresh {
        let Some(dir) = self.dirs.iter().position(|d| Some(d.as_path()) == path.parent()) else {
            return Refresh::Unchanged;
        };
        let mut slots = lock(&self.slots);
        let index = match slots.iter().position(|s| s.path == path) {
            Some(index) => index,
            None => {
                slots.push(Slot {
                    dir,
                    path: path.to_owned(),
                    current: None,
                    identity: None,
                    rejected_hash: None,
                    incomplete_hash: None,
                    missing_since: None,
                });
                slots.len() - 1
            }
        };
        let meta = match std::fs::metadata(path) {
            Ok(meta) if meta.is_file() => meta,
            Ok(_) => return Refresh::Unchanged,
            Err(_) => return self.missing(&mut slots, index),
        };
        let slot = &mut slots[index];
        slot.missing_since = None;
        let identity = FileIdentity::of(&meta);
        if slot.identity == Some(identity) {
            // Still the incomplete file of the last look: now it counts as truncated.
            if let Some(hash) = slot.incomplete_hash.take() {
                slot.rejected_hash = Some(hash);
                let reason = Rejection::Incomplete.to_string();
                tracing::warn!(path = %path.display(), "plugin build rejected: {reason}");
                let serving = slot.current.clone();
                return Refresh::Changed(PluginChange::Rejected {
                    path: path.to_owned(),
                    reason,
                    serving,
                });
            }
            return Refresh::Unchanged;
        }
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::debug!(path = %path.display(), %error, "cannot read plugin file");
                return Refresh::Unchanged;
            }
        };
        slot.identity = Some(identity);
        slot.incomplete_hash = None;
        let hash = loader::content_hash(&bytes);
        if slot.current.as_ref().is_some_and(|c| c.content_hash == hash) {
            tracing::debug!(path = %path.display(), "plugin file touched but unchanged");
            return Refresh::Unchanged;
        }
        if slot.rejected_hash == Some(hash) {
            tracing::debug!(path = %path.display(), "same content as a rejected build; not tried again");
            return Refresh::Unchanged;
        }
        let before = self.checked.knows(hash);
        if before {
            tracing::debug!(path = %path.display(), "plugin build checked before by this hotsh; not checked again");
            self.checked.loading_unchecked(hash);
        }
        let checked = before || self.accepted_early(path, hash);
        match load_checked(path, bytes, self.context.clone(), checked) {
            Ok(plugin) => {
                self.checked.checked(hash);
                // Past the initial scan (which writes its own once done): a reload.
                if *self.ready.borrow() {
                    self.checked.write();
                }
                let plugin = Arc::new(plugin);
                let replaced = slot.current.replace(Arc::clone(&plugin));
                slot.rejected_hash = None;
                tracing::info!(
                    plugin = %plugin.name,
                    version = %plugin.version,
                    generation = %plugin.generation,
                    replaced = ?replaced.as_ref().map(|r| r.generation.to_string()),
                    hash = format_args!("{:016x}", plugin.content_hash),
                    inode = identity.inode,
                    took = ?plugin.load_took,
                    path = %path.display(),
                    tools = ?plugin.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
                    "plugin loaded"
                );
                self.publish(&slots);
                if let Some(old) = &replaced {
                    shut_down(old);
                }
                Refresh::Changed(PluginChange::Loaded { plugin, replaced })
            }
            Err(Rejection::Incomplete) => {
                // Probably still being written: wait for the writer's next event, or report
                // it if none comes.
                slot.incomplete_hash = Some(hash);
                Refresh::LookAgain(INCOMPLETE_GRACE)
            }
            Err(Rejection::NotAPlugin) if slot.current.is_none() => {
                slot.rejected_hash = Some(hash);
                tracing::debug!(path = %path.display(), "not a hotsh plugin; skipped");
                Refresh::Unchanged
            }
            Err(rejection) => {
                slot.rejected_hash = Some(hash);
                let reason = rejection.to_string();
                tracing::warn!(
                    path = %path.display(),
                    serving = ?slot.current.as_ref().map(|c| c.generation.to_string()),
                    "plugin build rejected: {reason}"
                );
                Refresh::Changed(PluginChange::Rejected {
                    path: path.to_owned(),
                    reason,
                    serving: slot.current.clone(),
                })
            }
        }
    }

    /// The file of slot `index` is missing: unload its plugin once it has stayed missing.
    fn missing(&self, slots: &mut Vec<Slot>, index: usize) -> Refresh {
        let slot = &mut slots[index];
        if slot.current.is_none() {
            slots.remove(index);
            return Refresh::Unchanged;
        }
        let since = *slot.missing_since.get_or_insert_with(Instant::now);
        let waited = since.elapsed();
        if waited < REMOVAL_GRACE {
            return Refresh::LookAgain(REMOVAL_GRACE - waited);
        }
        let slot = slots.remove(index);
        self.publish(slots);
        let Some(plugin) = slot.current else {
            return Refresh::Unchanged;
        };
        tracing::info!(plugin = %plugin.name, generation = %plugin.generation, path = %slot.path.display(), "plugin file removed; unloaded");
        shut_down(&plugin);
        Refresh::Changed(PluginChange::Removed { plugin })
    }

    /// Swaps in a new snapshot built from the slots: load order is directory order, then file
    /// name; of two files providing the same plugin name, the first serves.
    fn publish(&self, slots: &[Slot]) {
        let mut ordered: Vec<&Slot> = slots.iter().filter(|s| s.current.is_some()).collect();
        ordered.sort_by(|a, b| (a.dir, &a.path).cmp(&(b.dir, &b.path)));
        let mut plugins: Vec<Arc<LoadedPlugin>> = Vec::new();
        for plugin in ordered.into_iter().filter_map(|s| s.current.clone()) {
            if let Some(other) = plugins.iter().find(|p| p.name == plugin.name) {
                tracing::warn!(
                    plugin = %plugin.name,
                    kept = %other.path.display(),
                    skipped = %plugin.path.display(),
                    "two files provide the same plugin; keeping the first"
                );
                continue;
            }
            for tool in &plugin.tools {
                if let Some(other) =
                    plugins.iter().find(|p| p.tools.iter().any(|t| t.name == tool.name))
                {
                    tracing::warn!(
                        tool = %tool.name,
                        served_by = %other.name,
                        shadowed = %plugin.name,
                        "two plugins declare the same tool; the first in load order serves it"
                    );
                }
            }
            plugins.push(plugin);
        }
        *self.snapshot.write().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Arc::new(Snapshot { plugins });
    }
}

/// How many plugin files the initial scan checks ahead of their loads at most.
const MAX_EARLY_CHECKS: usize = 4;

/// Checks the plugin file `path` in a throwaway process that reads it itself, ahead of its
/// load: the content hash of the bytes it accepted.
fn check_early(path: &Path, known: &HashSet<u64>) -> Option<u64> {
    // A build this hotsh checked before needs no process; the load reads it again (from the
    // page cache) and compares.
    if !known.is_empty()
        && let Ok(hash) = loader::file_content_hash(path)
        && known.contains(&hash)
    {
        return Some(hash);
    }
    check::in_child(path).ok().map(|description| description.content_hash)
}

/// Loads a build only after a throwaway process loaded it without crashing or hanging (see
/// `check.rs`; `checked`: such a check accepted these very bytes already), then loads it
/// here with a time limit.
fn load_checked(
    path: &Path,
    bytes: Vec<u8>,
    context: hotsh_abi::ToolsContext,
    checked: bool,
) -> Result<LoadedPlugin, Rejection> {
    loader::precheck(&bytes)?;
    // One buffer for the check and the load (a debug build is some 15 MB).
    let bytes = bytes::Bytes::from(bytes);
    if !checked {
        match check::bytes_in_child(path, bytes.clone()) {
            Ok(_) => {}
            Err(CheckFailure::NotAPlugin(_)) => return Err(Rejection::NotAPlugin),
            Err(CheckFailure::Rejected(reason)) => return Err(Rejection::Checked(reason)),
        }
    }
    loader::load_with_timeout(path, bytes, context)
}

/// Calls a replaced generation's `shutdown` hook on a thread of its own, so a hook that hangs
/// holds up nothing.
fn shut_down(plugin: &Arc<LoadedPlugin>) {
    let plugin = Arc::clone(plugin);
    let spawned = std::thread::Builder::new().name("plugin-shutdown".into()).spawn(move || {
        match plugin.api.shutdown() {
            Ok(()) => tracing::debug!(plugin = %plugin.name, generation = %plugin.generation, "shutdown hook ran"),
            Err(error) => tracing::warn!(plugin = %plugin.name, generation = %plugin.generation, "shutdown hook failed: {error}"),
        }
    });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot run a plugin's shutdown hook");
    }
}

/// The files in `dir` named like shared libraries (`lib*.so`), sorted by name. A directory
/// that does not exist (yet) has none.
pub(crate) fn candidate_files(dir: &Path) -> Vec<PathBuf> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(error) => {
            tracing::warn!(dir = %dir.display(), %error, "cannot read plugin directory");
            return Vec::new();
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()))
        .map(|entry| entry.path())
        .filter(|path| is_library_name(path))
        .collect();
    files.sort();
    files
}

pub(crate) fn is_library_name(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|name| {
        name.starts_with(std::env::consts::DLL_PREFIX)
            && name.ends_with(std::env::consts::DLL_SUFFIX)
    })
}
