//! Where hotsh keeps things on disk.
//!
//! The **data directory** holds what belongs to this user across runs: the plugins installed
//! with `hotsh install` (`<data dir>/plugins`), and the session logs once they exist. It is
//! `--data-dir DIR`, else `$HOTSH_DATA_DIR`, else `$XDG_DATA_HOME/hotsh`, else
//! `~/.local/share/hotsh`.

use std::path::{Path, PathBuf};

/// The data directory, or `None` when neither a flag, the environment nor a home directory
/// names one.
pub(crate) fn data_dir(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(dir) = explicit {
        return Some(dir.to_owned());
    }
    let from_env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    from_env("HOTSH_DATA_DIR")
        .or_else(|| from_env("XDG_DATA_HOME").map(|d| d.join("hotsh")))
        .or_else(|| from_env("HOME").map(|h| h.join(".local/share/hotsh")))
}

/// Every data directory a hotsh of this user may read plugins and sessions from, whatever
/// this one was started with: `explicit` (`--data-dir`), `$HOTSH_DATA_DIR`,
/// `$XDG_DATA_HOME/hotsh` and `~/.local/share/hotsh` (the plugin directory is inside each).
pub(crate) fn every_data_dir(explicit: Option<&Path>) -> Vec<PathBuf> {
    let from_env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let mut dirs: Vec<PathBuf> = [
        explicit.map(Path::to_owned),
        from_env("HOTSH_DATA_DIR"),
        from_env("XDG_DATA_HOME").map(|d| d.join("hotsh")),
        from_env("HOME").map(|h| h.join(".local/share/hotsh")),
    ]
    .into_iter()
    .flatten()
    .collect();
    dirs.dedup();
    dirs
}

/// The installed `hotsh` and `hotsh-shim` a later start may run: those in `~/.local/bin`
/// (where `hotsh install` puts them) and the `hotsh` first on `PATH`, with its shim.
pub(crate) fn installed_executables() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let on_path = std::env::var_os("PATH")
        .and_then(|path| find_on_path(Path::new("hotsh"), &path))
        .and_then(|hotsh| hotsh.parent().map(Path::to_owned));
    for dir in user_bin_dir().into_iter().chain(on_path) {
        for name in ["hotsh", "hotsh-shim"] {
            let file = dir.join(name);
            if !files.contains(&file) {
                files.push(file);
            }
        }
    }
    files
}

/// Writes `bytes` to a new file beside `path` (its folder made first) and renames that over
/// `path`: a reader sees the old file or the new one, never a part. `synced`: the file is on
/// the disk before the rename (for what a crash must not lose; a cache need not pay for it).
pub(crate) fn replace_file(path: &Path, bytes: &[u8], synced: bool) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use std::io::Write as _;
    let dir = path.parent().with_context(|| format!("{} has no folder", path.display()))?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
    let mut temp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    temp.write_all(bytes).with_context(|| format!("cannot write in {}", dir.display()))?;
    if synced {
        temp.as_file().sync_all()?;
    }
    temp.persist(path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// The per-user plugin directory inside a data directory.
pub(crate) fn user_plugin_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("plugins")
}

/// The directory holding the running executable: `cargo build` puts the plugins of this
/// workspace beside `hotsh`.
pub(crate) fn executable_dir() -> anyhow::Result<PathBuf> {
    use anyhow::Context as _;
    let exe = std::env::current_exe().context("cannot find the hotsh executable")?;
    Ok(exe.parent().context("the executable has no directory")?.to_owned())
}

/// Where `hotsh install` puts the executable by default: `~/.local/bin`.
pub(crate) fn user_bin_dir() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".local/bin"))
}

/// The first executable file named `program` in the absolute directories of `path` (a
/// `PATH` value; a relative entry would mean another file in each command's directory).
pub(crate) fn find_on_path(program: &Path, path: &std::ffi::OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| std::fs::metadata(candidate).is_ok_and(|m| is_executable(&m)))
}

/// A regular file with an execute bit.
pub(crate) fn is_executable(metadata: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    metadata.is_file() && metadata.permissions().mode() & 0o111 != 0
}
