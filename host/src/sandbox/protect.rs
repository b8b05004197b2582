//! What a confined command may write: the writable roots, the paths inside them that stay
//! read-only (every `.git`, and everything hotsh itself trusts: its data directory, its
//! configuration, its plugin directories, its own executable's directory), and the directories
//! *pinned* so that those stay where they are.
//!
//! A read-only bind mount keeps a path's contents safe, but a command that may write the
//! directory above it could rename that directory away and make a new one in its place (a
//! fresh `target/debug` for a watched plugin directory, a fresh `.git`). Each directory
//! between a writable root and a read-only path is therefore bound onto itself, still
//! writable: a mount point cannot be renamed or removed, and what is in it stays writable.

use std::path::{Path, PathBuf};

/// A path hotsh trusts: what a command changes there, hotsh would believe or run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Trusted {
    pub(crate) path: PathBuf,
    /// A directory is made (empty) when it is missing inside a writable root, so that it can
    /// be protected before a command could make it; a file that is missing is not needed.
    pub(crate) kind: TrustedKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TrustedKind {
    Directory,
    File,
}

/// The file system as one confined command sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Where the command may write (canonical directories).
    pub(crate) writable: Vec<PathBuf>,
    /// Directories inside the writable roots bound onto themselves, outermost first.
    pub(crate) pinned: Vec<PathBuf>,
    /// Paths inside the writable roots that stay read-only.
    pub(crate) read_only: Vec<PathBuf>,
    /// Writable roots given up because they lie inside a protected path.
    pub(crate) given_up: Vec<PathBuf>,
    /// Writable roots whose walk for `.git` stopped before it saw all of them.
    pub(crate) unwalked: Vec<PathBuf>,
}

impl Layout {
    /// `roots` (canonical directories) minus what `protected` (canonical paths) keeps.
    pub(crate) fn new(roots: &[PathBuf], protected: &[PathBuf]) -> Self {
        let mut layout = Layout::default();
        for root in roots {
            if layout.writable.contains(root) || layout.given_up.contains(root) {
                continue;
            }
            if protected.iter().any(|p| root.starts_with(p)) {
                layout.given_up.push(root.clone());
            } else {
                layout.writable.push(root.clone());
            }
        }
        let mut read_only: Vec<PathBuf> = protected
            .iter()
            .filter(|p| layout.writable.iter().any(|root| p.starts_with(root) && *p != root))
            .cloned()
            .collect();
        read_only.sort();
        read_only.dedup();
        // A path inside another read-only one is read-only already.
        let nested = |p: &PathBuf, all: &[PathBuf]| all.iter().any(|q| q != p && p.starts_with(q));
        let snapshot = read_only.clone();
        read_only.retain(|p| !nested(p, &snapshot));
        let mut pinned = Vec::new();
        for path in &read_only {
            let Some(outermost) = layout
                .writable
                .iter()
                .filter(|root| path.starts_with(root))
                .min_by_key(|root| root.components().count())
            else {
                continue;
            };
            let mut ancestor = path.parent();
            while let Some(dir) = ancestor {
                if dir == outermost.as_path() || !dir.starts_with(outermost) {
                    break;
                }
                pinned.push(dir.to_owned());
                ancestor = dir.parent();
            }
        }
        // A writable root inside another is pinned too: a command that may write the outer
        // one could otherwise rename it away and leave a link in its place, which the next
        // sandbox would take for the root (the session's temp dir inside the shared one).
        for root in &layout.writable {
            if layout.writable.iter().any(|outer| outer != root && root.starts_with(outer)) {
                pinned.push(root.clone());
            }
        }
        pinned.sort_by_key(|dir| (dir.components().count(), dir.clone()));
        pinned.dedup();
        layout.read_only = read_only;
        layout.pinned = pinned;
        layout
    }

    /// Whether a command (or a file write of the host's, judged the same way) may write
    /// `path` (absolute, symbolic links resolved).
    pub(crate) fn allows(&self, path: &Path) -> bool {
        self.writable.iter().any(|root| path.starts_with(root))
            && !self.read_only.iter().any(|ro| path.starts_with(ro))
    }
}

/// `path` canonical when it exists; otherwise its nearest existing ancestor canonical with the
/// rest appended (so that it compares with the canonical roots); and whether all of `path`
/// exists (the result is then its canonical path).
fn resolve_existing(path: &Path) -> (PathBuf, bool) {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = crate::nofollow::canonical(existing) {
            let whole = rest.is_empty();
            let mut resolved = real;
            resolved.extend(rest.into_iter().rev());
            return (resolved, whole);
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return (path.to_owned(), false),
        }
    }
}

/// The protected paths of `trusted` for commands that may write `roots`: each one's real
/// path, a missing trusted directory inside a root made first (0700), a missing file left out.
pub(crate) fn trusted_paths(trusted: &[Trusted], roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for entry in trusted {
        let (real, whole) = resolve_existing(&entry.path);
        if whole {
            // Canonical already.
            paths.push(real);
            continue;
        }
        if !real.exists() {
            let inside = roots.iter().any(|root| real.starts_with(root));
            if entry.kind == TrustedKind::File || !inside {
                continue;
            }
            use std::os::unix::fs::DirBuilderExt as _;
            if let Err(error) = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&real)
            {
                tracing::warn!(
                    path = %real.display(),
                    %error,
                    "cannot make a trusted directory so as to protect it; its root stays read-only"
                );
                // Protecting the missing path gives up every root it would be made in.
                paths.push(real);
                continue;
            }
        }
        paths.push(std::fs::canonicalize(&real).unwrap_or(real));
    }
    paths
}

/// What [`trusted_paths`] and the session folder resolved to, per session folder and private
/// temp dir, used again for [`RESOLVED_FRESH`]: a command resolves nothing that the one
/// before it resolved an instant ago (a folder the user renames shows in its mount's device
/// and inode, which every command's environment checks). Only what runs outside the sandbox
/// can change a resolution: a confined command cannot rename what a layout pins or makes
/// read-only, and a link it may change in a writable root it could follow itself.
#[derive(Debug)]
pub(crate) struct Resolutions {
    fresh: std::time::Duration,
    held: std::sync::Mutex<std::collections::HashMap<RootsKey, Resolved>>,
}

/// A session folder as given and its private temp dir as made.
type RootsKey = (PathBuf, Option<PathBuf>);

/// The writable roots (canonical) and the trusted paths among or above them (canonical).
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    at: std::time::Instant,
    pub(crate) roots: Vec<PathBuf>,
    pub(crate) trusted: Vec<PathBuf>,
}

/// How long a resolution is used before a command resolves again (as long as a walk for
/// `.git` is).
pub(crate) const RESOLVED_FRESH: std::time::Duration = GIT_WALK_FRESH;

impl Default for Resolutions {
    fn default() -> Self {
        Self::new(RESOLVED_FRESH)
    }
}

impl Resolutions {
    pub(crate) fn new(fresh: std::time::Duration) -> Self {
        Self { fresh, held: std::sync::Mutex::default() }
    }

    /// The resolution for `cwd` and `temp`: the one held if fresh, else `resolve`'s (roots,
    /// trusted paths), kept; resolutions gone stale are dropped meanwhile.
    pub(crate) fn of(
        &self,
        cwd: &Path,
        temp: Option<&Path>,
        resolve: impl FnOnce() -> (Vec<PathBuf>, Vec<PathBuf>),
    ) -> Resolved {
        let key = (cwd.to_owned(), temp.map(Path::to_owned));
        if let Some(held) = crate::sync::lock(&self.held).get(&key)
            && held.at.elapsed() < self.fresh
        {
            return held.clone();
        }
        // Resolved outside the lock: it touches the file system.
        let (roots, trusted) = resolve();
        let resolved = Resolved { at: std::time::Instant::now(), roots, trusted };
        let mut held = crate::sync::lock(&self.held);
        held.retain(|_, r| r.at.elapsed() < self.fresh);
        held.insert(key, resolved.clone());
        resolved
    }
}

/// Every `.git` (directory or file) beneath the writable roots, found by walking them; cached
/// per root, walked again in the background when the last walk is older than
/// [`GIT_WALK_FRESH`], so that a command rarely waits for a walk (only the first of a root).
#[derive(Debug, Default)]
pub(crate) struct GitDirs {
    found: std::sync::Mutex<std::collections::HashMap<PathBuf, Walked>>,
}

#[derive(Debug, Clone)]
struct Walked {
    at: std::time::Instant,
    git: Vec<PathBuf>,
    /// The walk stopped at [`GIT_WALK_LIMIT`] entries: nested ones past that are unknown.
    cut_short: bool,
    refreshing: bool,
}

/// How long a walk's result is used before the next command asks for a new one.
const GIT_WALK_FRESH: std::time::Duration = std::time::Duration::from_secs(2);
/// Entries a walk looks at before it gives up (a home folder can hold millions).
pub(crate) const GIT_WALK_LIMIT: usize = 200_000;

impl GitDirs {
    /// The `.git` paths beneath `root`, and whether the walk saw all of it.
    pub(crate) fn beneath(self: &std::sync::Arc<Self>, root: &Path) -> (Vec<PathBuf>, bool) {
        let cached = crate::sync::lock(&self.found).get(root).cloned();
        match cached {
            Some(walked) => {
                if walked.at.elapsed() > GIT_WALK_FRESH && !walked.refreshing {
                    self.refresh_in_background(root);
                }
                (walked.git, !walked.cut_short)
            }
            None => {
                let (git, cut_short) = walk_for_git(root, GIT_WALK_LIMIT);
                let walked = Walked {
                    at: std::time::Instant::now(),
                    git: git.clone(),
                    cut_short,
                    refreshing: false,
                };
                crate::sync::lock(&self.found).insert(root.to_owned(), walked);
                (git, !cut_short)
            }
        }
    }

    fn refresh_in_background(self: &std::sync::Arc<Self>, root: &Path) {
        if let Some(walked) = crate::sync::lock(&self.found).get_mut(root) {
            walked.refreshing = true;
        }
        let (dirs, walked_root) = (std::sync::Arc::clone(self), root.to_owned());
        let spawned = std::thread::Builder::new().name("hotsh-git-walk".into()).spawn(move || {
            let (git, cut_short) = walk_for_git(&walked_root, GIT_WALK_LIMIT);
            let walked =
                Walked { at: std::time::Instant::now(), git, cut_short, refreshing: false };
            crate::sync::lock(&dirs.found).insert(walked_root, walked);
        });
        if spawned.is_err()
            && let Some(walked) = crate::sync::lock(&self.found).get_mut(root)
        {
            walked.refreshing = false;
        }
    }
}

/// Walks `root` (links not followed, other file systems not entered) for entries named
/// `.git`, not descending into them; stops after `limit` entries (the flag says so).
pub(crate) fn walk_for_git(root: &Path, limit: usize) -> (Vec<PathBuf>, bool) {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(device) = std::fs::symlink_metadata(root).map(|m| m.dev()) else {
        return (Vec::new(), false);
    };
    let mut found = Vec::new();
    let mut seen = 0usize;
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > limit {
                found.sort();
                return (found, true);
            }
            let path = entry.path();
            if entry.file_name() == ".git" {
                found.push(path);
                continue;
            }
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() && entry.metadata().is_ok_and(|m| m.dev() == device) {
                pending.push(path);
            }
        }
    }
    found.sort();
    (found, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn read_only_paths_inside_a_root_are_pinned_up_to_the_outermost_root() {
        let layout = Layout::new(
            &paths(&["/home/u/work", "/tmp/agent"]),
            &paths(&["/home/u/work/.git", "/home/u/work/target/debug", "/tmp/agent/data", "/etc"]),
        );
        assert_eq!(layout.writable, paths(&["/home/u/work", "/tmp/agent"]));
        assert_eq!(
            layout.read_only,
            paths(&["/home/u/work/.git", "/home/u/work/target/debug", "/tmp/agent/data"])
        );
        assert_eq!(layout.pinned, paths(&["/home/u/work/target"]));
        assert!(layout.allows(Path::new("/home/u/work/target/release/x")));
        assert!(!layout.allows(Path::new("/home/u/work/target/debug/libx.so")));
        assert!(!layout.allows(Path::new("/etc/passwd")));
    }

    #[test]
    fn a_root_inside_a_protected_path_is_given_up_and_nested_roots_pin_through() {
        // The cwd inside the data directory: nothing there is writable.
        let layout = Layout::new(
            &paths(&["/d/data/work", "/tmp"]),
            &paths(&["/d/data", "/tmp/a/b/.git", "/tmp/a/b/.git/hooks"]),
        );
        assert_eq!(layout.writable, paths(&["/tmp"]));
        assert_eq!(layout.given_up, paths(&["/d/data/work"]));
        assert_eq!(layout.read_only, paths(&["/tmp/a/b/.git"]));
        assert_eq!(layout.pinned, paths(&["/tmp/a", "/tmp/a/b"]));
        // A cwd inside the temp dir: the outermost root decides what is pinned.
        let layout = Layout::new(&paths(&["/tmp/x/work", "/tmp/x"]), &paths(&["/tmp/x/work/.git"]));
        assert_eq!(layout.pinned, paths(&["/tmp/x/work"]));
    }

    #[test]
    fn every_git_beneath_a_root_is_found_without_entering_one_and_a_walk_can_be_cut_short() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        for path in [".git/hooks", "vendor/lib/.git/hooks", "src/deep/er/x"] {
            std::fs::create_dir_all(root.join(path)).expect("dirs");
        }
        std::fs::write(root.join("worktree-.git-file"), "").expect("file");
        std::fs::create_dir_all(root.join("wt")).expect("wt");
        std::fs::write(root.join("wt/.git"), "gitdir: elsewhere\n").expect("gitfile");
        std::os::unix::fs::symlink("/", root.join("link-to-root")).expect("link");
        let (found, cut_short) = walk_for_git(&root, 1000);
        assert!(!cut_short);
        assert_eq!(
            found,
            vec![root.join(".git"), root.join("vendor/lib/.git"), root.join("wt/.git")]
        );
        let (_, cut_short) = walk_for_git(&root, 3);
        assert!(cut_short);
    }

    #[test]
    fn a_resolution_is_used_again_while_fresh_and_made_again_after() {
        let resolutions = Resolutions::new(std::time::Duration::from_millis(200));
        let calls = std::cell::Cell::new(0);
        let resolve = || {
            calls.set(calls.get() + 1);
            (paths(&["/w"]), paths(&["/w/.hotsh"]))
        };
        let first = resolutions.of(Path::new("/w"), None, resolve);
        let again = resolutions.of(Path::new("/w"), None, resolve);
        assert_eq!((first.roots, again.trusted), (paths(&["/w"]), paths(&["/w/.hotsh"])));
        assert_eq!(calls.get(), 1);
        // Another temp dir is another key.
        resolutions.of(Path::new("/w"), Some(Path::new("/t")), resolve);
        assert_eq!(calls.get(), 2);
        std::thread::sleep(std::time::Duration::from_millis(250));
        resolutions.of(Path::new("/w"), None, resolve);
        assert_eq!(calls.get(), 3);
        // The stale one was dropped as the fresh one was kept.
        assert_eq!(crate::sync::lock(&resolutions.held).len(), 1);
    }

    #[test]
    fn a_missing_trusted_directory_inside_a_root_is_made_and_a_missing_file_skipped() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        let trusted = [
            Trusted { path: root.join("target/debug"), kind: TrustedKind::Directory },
            Trusted { path: root.join("config.toml"), kind: TrustedKind::File },
            Trusted {
                path: PathBuf::from("/nonexistent-0817/plugins"),
                kind: TrustedKind::Directory,
            },
        ];
        let found = trusted_paths(&trusted, std::slice::from_ref(&root));
        assert_eq!(found, vec![root.join("target/debug")]);
        assert!(root.join("target/debug").is_dir());
        assert!(!PathBuf::from("/nonexistent-0817").exists());
    }
}
