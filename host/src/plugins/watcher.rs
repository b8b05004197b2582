//! Watching the plugin directories: a finished build is loaded within tens of milliseconds.
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

use super::{PluginChange, Refresh, Registry, is_library_name};
use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher as _};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long a path must be quiet before it is looked at, after events other than a file
/// appearing or a writer closing it.
const QUIET: Duration = Duration::from_millis(10);

/// Starts watching the registry's directories. Changes are sent to `changes`; the returned
/// watcher must be kept alive.
pub(crate) fn watch_plugin_dirs(
    registry: Arc<Registry>,
    changes: mpsc::UnboundedSender<PluginChange>,
) -> notify::Result<notify::RecommendedWatcher> {
    let (paths, mut touched) = mpsc::unbounded_channel::<(PathBuf, Duration)>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        let wait = match event.kind {
            EventKind::Create(_)
            | EventKind::Access(AccessKind::Close(AccessMode::Write))
            | EventKind::Modify(ModifyKind::Name(RenameMode::To)) => Duration::ZERO,
            EventKind::Modify(_) | EventKind::Remove(_) => QUIET,
            EventKind::Access(_) | EventKind::Any | EventKind::Other => return,
        };
        for path in event.paths.into_iter().filter(|p| is_library_name(p)) {
            let _ = paths.send((path, wait));
        }
    })?;
    for dir in registry.dirs() {
        if let Err(error) = watcher.watch(dir, RecursiveMode::NonRecursive) {
            tracing::warn!(dir = %dir.display(), %error, "cannot watch plugin directory; its plugins will not reload");
        }
    }
    tokio::spawn(async move {
        let mut due: HashMap<PathBuf, Instant> = HashMap::new();
        loop {
            let next = due.values().min().copied();
            tokio::select! {
                path = touched.recv() => match path {
                    Some((path, wait)) => {
                        due.insert(path, Instant::now() + wait);
                    }
                    None => return,
                },
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
                                let _ = changes.send(change);
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
    Ok(watcher)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
