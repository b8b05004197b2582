//! Watching the plugin directories: a finished build is loaded within milliseconds.
//!
//! Cargo finishes a build by removing `target/<profile>/libX.so` and hard-linking the new file
//! in, about 2 ms apart, with no modify or close-write event; other writers write in place. So
//! the directory is watched (not the file) and events are filtered on library names. A file
//! that appears (created, linked in) or that a writer closes is looked at at once: that is
//! cargo's last step, so a build serves within milliseconds. Other events (a removal, writes
//! in progress, a `touch`) wait until the path has been quiet for a short moment, which
//! merges the events of one write. The look itself decides: unchanged identity or content
//! means nothing happened (a `touch`, a no-op build); an incomplete file waits for its next
//! event; a missing file is unloaded only if it stays missing.
//!
//! A plugin directory that does not exist yet, or that is removed and created again
//! (`cargo clean && cargo build`), stays watched: while it is missing, its nearest existing
//! ancestor is watched instead, and any change on the way down to it re-arms the watch. When
//! the directory (re)appears it is watched again and scanned, so its next build loads.
//!
//! Paths that are due at the same moment are looked at in path order, so what happens does not
//! depend on a hash map's order.

use super::{PluginChange, Refresh, Registry, is_library_name};
use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher as _};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long a path must be quiet before it is looked at, after events other than a file
/// appearing or a writer closing it.
const QUIET: Duration = Duration::from_millis(10);

/// How long a removed library path waits before its plugin is unloaded: cargo replaces a
/// build by removing the old file and linking the new one in, and on a loaded machine the
/// two can be more than [`QUIET`] apart; the new file's appearance is looked at at once and
/// makes it a reload.
const REMOVED: Duration = Duration::from_millis(200);

/// Starts watching the registry's directories on the runtime; changes are sent to `changes`.
/// The watch lasts until `changes` is closed.
pub(crate) fn watch_plugin_dirs(
    registry: Arc<Registry>,
    changes: mpsc::UnboundedSender<PluginChange>,
) -> notify::Result<()> {
    let (events, mut received) = mpsc::unbounded_channel::<notify::Event>();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event {
            let _ = events.send(event);
        }
    })?;
    let mut dirs = Dirs::new(watcher, registry.dirs());
    dirs.arm_all();
    tokio::spawn(async move {
        let mut due: BTreeMap<PathBuf, Instant> = BTreeMap::new();
        loop {
            let next = due.values().min().copied();
            tokio::select! {
                event = received.recv() => {
                    let Some(event) = event else { return };
                    for dir in dirs.affected_by(&event) {
                        if dirs.arm(&dir) {
                            // The directory is back: whatever it holds now is a build to look at.
                            let registry = Arc::clone(&registry);
                            let found = tokio::task::spawn_blocking(move || registry.scan(&dir)).await;
                            for change in found.unwrap_or_default() {
                                if changes.send(change).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                    if let Some(wait) = wait_for(&event.kind) {
                        for path in event.paths.into_iter().filter(|p| is_library_name(p)) {
                            due.insert(path, Instant::now() + wait);
                        }
                    }
                }
                () = sleep_until(next), if next.is_some() => {
                    let now = Instant::now();
                    let ready: Vec<PathBuf> =
                        due.iter().filter(|(_, at)| **at <= now).map(|(p, _)| p.clone()).collect();
                    for path in ready {
                        due.remove(&path);
                        let registry = Arc::clone(&registry);
                        let looked_at = path.clone();
                        match tokio::task::spawn_blocking(move || registry.refresh(&looked_at)).await {
                            Ok(Refresh::Changed(change)) => {
                                if changes.send(change).is_err() {
                                    return;
                                }
                            }
                            Ok(Refresh::LookAgain(after)) => {
                                due.entry(path).or_insert(Instant::now() + after);
                            }
                            Ok(Refresh::Unchanged) => {}
                            Err(error) => tracing::warn!(%error, "plugin refresh failed"),
                        }
                    }
                }
            }
        }
    });
    Ok(())
}

/// How long to wait before looking at a library path after `kind`, or `None` to ignore it.
fn wait_for(kind: &EventKind) -> Option<Duration> {
    match kind {
        EventKind::Create(_)
        | EventKind::Access(AccessKind::Close(AccessMode::Write))
        | EventKind::Modify(ModifyKind::Name(RenameMode::To)) => Some(Duration::ZERO),
        EventKind::Remove(_) => Some(REMOVED),
        EventKind::Modify(_) => Some(QUIET),
        EventKind::Access(_) | EventKind::Any | EventKind::Other => None,
    }
}

/// What is watched on behalf of one plugin directory.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Armed {
    /// The directory itself, as the inode it was when the watch was set.
    Dir {
        device: u64,
        inode: u64,
    },
    /// The nearest existing ancestor, while the directory is missing.
    Ancestor(PathBuf),
    Nothing,
}

/// The watches of all plugin directories. Two directories may need the same path watched, so
/// watches are counted.
struct Dirs {
    watcher: notify::RecommendedWatcher,
    armed: Vec<(PathBuf, Armed)>,
    counts: HashMap<PathBuf, usize>,
}

impl Dirs {
    fn new(watcher: notify::RecommendedWatcher, dirs: &[PathBuf]) -> Self {
        Self {
            watcher,
            armed: dirs.iter().map(|d| (d.clone(), Armed::Nothing)).collect(),
            counts: HashMap::new(),
        }
    }

    fn arm_all(&mut self) {
        let dirs: Vec<PathBuf> = self.armed.iter().map(|(d, _)| d.clone()).collect();
        for dir in dirs {
            self.arm(&dir);
        }
    }

    /// The plugin directories whose watch `event` may have invalidated: it names the directory
    /// itself or a path on the way down to it.
    fn affected_by(&self, event: &notify::Event) -> Vec<PathBuf> {
        self.armed
            .iter()
            .filter(|(dir, _)| event.paths.iter().any(|p| dir.starts_with(p)))
            .map(|(dir, _)| dir.clone())
            .collect()
    }

    /// Watches `dir` if it exists, else its nearest existing ancestor. Returns true when the
    /// directory itself has just become watched after it was not (it appeared, or was
    /// replaced by a new one).
    fn arm(&mut self, dir: &Path) -> bool {
        let Some(index) = self.armed.iter().position(|(d, _)| d == dir) else {
            return false;
        };
        let previous = self.armed[index].1.clone();
        let wanted = match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {
                use std::os::unix::fs::MetadataExt as _;
                Armed::Dir { device: meta.dev(), inode: meta.ino() }
            }
            _ => match nearest_existing_ancestor(dir) {
                Some(ancestor) => Armed::Ancestor(ancestor),
                None => Armed::Nothing,
            },
        };
        if wanted == previous {
            return false;
        }
        self.release(&previous, dir);
        let target = match &wanted {
            Armed::Dir { .. } => Some(dir.to_owned()),
            Armed::Ancestor(ancestor) => Some(ancestor.clone()),
            Armed::Nothing => None,
        };
        let armed = match &target {
            Some(path) => match self.acquire(path) {
                Ok(()) => true,
                // It went between the look and the watch (`rm -rf target` takes the tree
                // level by level): look again, one level higher if need be.
                Err(_) if !path.is_dir() => {
                    self.armed[index].1 = Armed::Nothing;
                    return self.arm(dir);
                }
                Err(error) => {
                    tracing::warn!(dir = %path.display(), %error, "cannot watch; plugins there will not reload");
                    false
                }
            },
            None => true,
        };
        let wanted = if armed { wanted } else { Armed::Nothing };
        let appeared = matches!(wanted, Armed::Dir { .. }) && previous != Armed::Nothing;
        match &wanted {
            Armed::Dir { .. } if appeared => {
                tracing::info!(dir = %dir.display(), "plugin directory is back; watching it again");
            }
            Armed::Ancestor(ancestor) => tracing::debug!(
                dir = %dir.display(),
                ancestor = %ancestor.display(),
                "plugin directory does not exist (yet); watching for it"
            ),
            _ => {}
        }
        let watching_ancestor = matches!(wanted, Armed::Ancestor(_));
        self.armed[index].1 = wanted;
        // The directory may have appeared between the look and the ancestor's watch, with no
        // event left to tell: look once more.
        if watching_ancestor && dir.is_dir() {
            return self.arm(dir);
        }
        appeared
    }

    fn acquire(&mut self, path: &Path) -> Result<(), notify::Error> {
        let count = self.counts.entry(path.to_owned()).or_insert(0);
        if *count == 0
            && let Err(error) = self.watcher.watch(path, RecursiveMode::NonRecursive)
        {
            self.counts.remove(path);
            return Err(error);
        }
        *self.counts.entry(path.to_owned()).or_insert(0) += 1;
        Ok(())
    }

    fn release(&mut self, armed: &Armed, dir: &Path) {
        let path = match armed {
            Armed::Dir { .. } => dir.to_owned(),
            Armed::Ancestor(ancestor) => ancestor.clone(),
            Armed::Nothing => return,
        };
        if let Some(count) = self.counts.get_mut(&path) {
            *count -= 1;
            if *count == 0 {
                self.counts.remove(&path);
                // The watch may already be gone with its directory.
                let _ = self.watcher.unwatch(&path);
            }
        }
    }
}

fn nearest_existing_ancestor(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().skip(1).find(|a| a.is_dir()).map(Path::to_owned)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
