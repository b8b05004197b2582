//! `hotsh install`: puts this hotsh and the plugins beside it where every hotsh finds them.
//!
//! The executable goes to `~/.local/bin/hotsh` (or `--bin-dir`), the plugins to
//! `<data dir>/plugins`. Only files that pass the same check an agent makes are installed.
//! Each file is written under a temporary name and renamed into place, so a running hotsh
//! never sees half a file (and a watching agent reloads the new plugin build at once).

use crate::plugins::{CheckFailure, candidate_files, check_in_child};
use crate::term::out;
use anyhow::Context as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub(crate) fn run(bin_dir: Option<PathBuf>, data_dir: Option<&Path>) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot find the hotsh executable")?;
    let exe_dir = crate::dirs::executable_dir()?;
    let data_dir = crate::dirs::data_dir(data_dir)
        .context("no data directory: set HOME, HOTSH_DATA_DIR or pass --data-dir")?;
    let plugin_dir = crate::dirs::user_plugin_dir(&data_dir);
    let bin_dir = match bin_dir {
        Some(dir) => dir,
        None => crate::dirs::user_bin_dir().context("no home directory: pass --bin-dir")?,
    };

    let mut plugins = Vec::new();
    for path in candidate_files(&exe_dir) {
        match check_in_child(&path) {
            Ok(description) => plugins.push((path, description)),
            Err(CheckFailure::NotAPlugin(_)) => {}
            Err(CheckFailure::Rejected(reason)) => {
                crate::term::warning(&format!("not installing {}: {reason}", path.display()));
            }
        }
    }
    anyhow::ensure!(
        !plugins.is_empty(),
        "no hotsh plugin beside {}: build them first (`cargo build --release` builds hotsh and \
         tool-bash together), then run `target/release/hotsh install`",
        exe.display()
    );

    create_private_dir(&data_dir)?;
    create_private_dir(&plugin_dir)?;
    for (path, description) in &plugins {
        let name = path.file_name().context("a plugin file has a name")?;
        let target = plugin_dir.join(name);
        copy_into_place(path, &target, 0o644)?;
        out(&format!("installed plugin {} → {}", description.one_line(), target.display()));
    }

    std::fs::create_dir_all(&bin_dir)
        .with_context(|| format!("cannot create {}", bin_dir.display()))?;
    let installed_exe = bin_dir.join("hotsh");
    if same_file(&exe, &installed_exe) {
        out(&format!("hotsh is already {}", installed_exe.display()));
    } else {
        copy_into_place(&exe, &installed_exe, 0o755)?;
        out(&format!(
            "installed hotsh {} → {}",
            env!("CARGO_PKG_VERSION"),
            installed_exe.display()
        ));
    }
    // The shim comes along: without it every command starts a second `hotsh` (slower, same
    // behaviour). An old one from another build is replaced or, when absent here, removed.
    let shim = exe_dir.join(crate::executor::SHIM_PROGRAM);
    let installed_shim = bin_dir.join(crate::executor::SHIM_PROGRAM);
    if shim.is_file() {
        if !same_file(&shim, &installed_shim) {
            copy_into_place(&shim, &installed_shim, 0o755)?;
        }
    } else if installed_shim.exists() && !same_file(&exe, &installed_exe) {
        std::fs::remove_file(&installed_shim)
            .with_context(|| format!("cannot remove the old {}", installed_shim.display()))?;
    }
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|p| same_file(&p, &bin_dir)));
    if !on_path {
        crate::term::warning(&format!(
            "{} is not on your PATH; add it, or start {} by its full path",
            bin_dir.display(),
            installed_exe.display()
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates `dir` (and its parents) readable by this user only.
fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

/// Copies `from` to `to` through a temporary file in the same directory and a rename.
fn copy_into_place(from: &Path, to: &Path, mode: u32) -> anyhow::Result<()> {
    let dir = to.parent().context("the target has a directory")?;
    let name = to.file_name().context("the target has a name")?.to_string_lossy();
    let temporary = dir.join(format!(".{name}.installing-{}", std::process::id()));
    let copied = std::fs::copy(from, &temporary)
        .and_then(|_| std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(mode)))
        .and_then(|()| std::fs::rename(&temporary, to));
    if let Err(error) = copied {
        let _ = std::fs::remove_file(&temporary);
        return Err(error)
            .with_context(|| format!("cannot install {} as {}", from.display(), to.display()));
    }
    Ok(())
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
