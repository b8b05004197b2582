//! The sandbox (DESIGN §7): the modes on their ladder, the backend that enforces them on this
//! machine, the policy one command runs under, and the facts its result carries.
//!
//! The host decides; the shim enforces (`confine.rs`, applied inside the shim before it starts
//! the shell). Two backends:
//!
//! - **bwrap** (bubblewrap, when installed): the shell runs as `bwrap --ro-bind / / … --
//!   SHELL -c COMMAND`, the writable roots bound read-write, `.git` bound read-only again, new
//!   network and PID namespaces, `--die-with-parent`.
//! - **landlock** (needs nothing installed): the shim restricts itself with Landlock (write
//!   access only beneath the writable roots; signals to processes outside the sandbox refused)
//!   and a seccomp filter refusing sockets other than Unix ones (and io_uring), and makes `.git`
//!   read-only in a mount namespace of its own; the shell inherits all of it. No extra exec.
//!
//! `danger-full-access` runs unconfined; the credential scrub and the no-orphans guarantee
//! still apply.

pub(crate) mod classify;
pub(crate) mod protect;

// The one seam for the mechanisms that enforce a policy (ARCHITECTURE.md, "Platforms").
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub(crate) use linux::{confine, gate_missing, gated, notify};
#[cfg(not(target_os = "linux"))]
mod other;
#[cfg(not(target_os = "linux"))]
pub(crate) use other::{confine, gate_missing, gated, notify};

/// The argument that makes `hotsh` the gate inside bwrap (`__sandboxed POLICY SHELL ARGS…`).
pub(crate) const SANDBOXED: &str = "__sandboxed";

/// Device files every command may write (a shell redirecting to /dev/null is not a write to
/// the file system).
pub(crate) const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

pub(crate) use protect::{Trusted, TrustedKind};

use hotsh_core::executor::Policy as Rules;
use protect::Layout;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub(crate) use hotsh_core::sandbox::Mode;

/// A mode as the plugin interface spells it.
pub(crate) fn mode_to_abi(mode: Mode) -> hotsh_abi::SandboxMode {
    match mode {
        Mode::ReadOnly => hotsh_abi::SandboxMode::ReadOnly,
        Mode::WorkspaceWrite => hotsh_abi::SandboxMode::WorkspaceWrite,
        Mode::DangerFullAccess => hotsh_abi::SandboxMode::DangerFullAccess,
    }
}

/// A mode the plugin interface names; `None` for one from a later hotsh-abi 1.x, which this
/// host does not know how to enforce (a request for it is refused).
pub(crate) fn mode_from_abi(mode: hotsh_abi::SandboxMode) -> Option<Mode> {
    match mode {
        hotsh_abi::SandboxMode::ReadOnly => Some(Mode::ReadOnly),
        hotsh_abi::SandboxMode::WorkspaceWrite => Some(Mode::WorkspaceWrite),
        hotsh_abi::SandboxMode::DangerFullAccess => Some(Mode::DangerFullAccess),
        _ => None,
    }
}

/// Which backend the configuration asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum BackendChoice {
    /// bwrap when installed, else landlock.
    #[default]
    Auto,
    Bwrap,
    Landlock,
    /// No sandbox at all: every command runs unconfined, and no mode or escalation is offered.
    None,
}

/// The sandbox settings (config file `[sandbox]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct SandboxConfig {
    /// The mode of sessions that chose none (`workspace-write` if unset).
    pub(crate) mode: Option<Mode>,
    pub(crate) backend: BackendChoice,
    /// Whether `workspace-write` commands reach the network (`read-only` never does).
    pub(crate) network: bool,
    /// The widest mode any command may run under here, whatever a session chooses or a user
    /// allows (`hotsh replay --sandbox` sets it for the agent it replays against).
    pub(crate) max_mode: Option<Mode>,
    /// Seconds a session's idle bubblewrap environment is kept (default 600); 0: every
    /// command gets a bubblewrap of its own.
    pub(crate) keep_environment_s: Option<u64>,
    /// The most sandbox environments alive at once across sessions (default 8).
    pub(crate) max_environments: Option<usize>,
}

/// The enforcing backend picked at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Backend {
    Bwrap {
        program: PathBuf,
    },
    Landlock {
        abi: i32,
        /// The shim can make a mount namespace to keep `.git` read-only (checked once, at
        /// start).
        mount_namespaces: bool,
    },
    /// Sandboxing is switched off by the configuration.
    Off,
    /// Asked for (or needed) but missing on this machine: confined commands fail closed with
    /// this text.
    Missing {
        what: String,
    },
}

impl Backend {
    /// bubblewrap's program, for this backend.
    pub(crate) fn bwrap(&self) -> Option<PathBuf> {
        match self {
            Backend::Bwrap { program } => Some(program.clone()),
            _ => None,
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Backend::Bwrap { .. } => "bwrap",
            Backend::Landlock { .. } => "landlock",
            Backend::Off => "off",
            Backend::Missing { .. } => "unavailable",
        }
    }
}

/// The folders confined commands see empty: where `hotsh login` keeps the model key (those
/// that exist: a mount needs its point), canonical.
fn hidden_dirs() -> Vec<PathBuf> {
    crate::credentials::every_dir()
        .into_iter()
        .filter_map(|dir| crate::nofollow::canonical(&dir).ok())
        .filter(|dir| dir.is_dir())
        .collect()
}

/// How completely a command's confinement was enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Enforcement {
    Full,
    /// Confined, except for what the text says.
    Partial(String),
    /// Unconfined (`danger-full-access`, or sandboxing off).
    None,
}

impl Enforcement {
    pub(crate) fn describe(&self) -> String {
        match self {
            Enforcement::Full => "full".to_owned(),
            Enforcement::Partial(what) => format!("partial: {what}"),
            Enforcement::None => "none".to_owned(),
        }
    }
}

/// A policy as this machine enforces it: the portable policy of the request
/// ([`hotsh_core::executor::Policy`]) and the backend. It crosses to the shim as JSON in
/// an argument; its rules read as the portable policy's fields (`Deref`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Policy {
    /// `Some(program)`: run the shell under bubblewrap; `None`: Landlock and seccomp.
    pub(crate) bwrap: Option<PathBuf>,
    #[serde(flatten)]
    pub(crate) rules: hotsh_core::executor::Policy,
}

impl std::ops::Deref for Policy {
    type Target = hotsh_core::executor::Policy;

    fn deref(&self) -> &Self::Target {
        &self.rules
    }
}

/// The sandbox of one agent process: the backend, and what each mode means here.
#[derive(Debug, Clone)]
pub(crate) struct Sandbox {
    pub(crate) backend: Backend,
    pub(crate) default_mode: Mode,
    /// The widest mode any command may run under (`[sandbox] max_mode`).
    pub(crate) max_mode: Option<Mode>,
    network: bool,
    tmpdir: PathBuf,
    /// What hotsh itself trusts: read-only to every confined command.
    trusted: Vec<Trusted>,
    /// The `.git` entries beneath each writable root.
    git_dirs: std::sync::Arc<protect::GitDirs>,
    /// The roots and trusted paths resolved for each session folder lately.
    resolutions: std::sync::Arc<protect::Resolutions>,
}

/// Confinement asked for that this machine cannot give: the command does not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this command was not run: the {mode} sandbox cannot be enforced on this machine ({what}). Ask the user to install bubblewrap or to switch this session to danger-full-access"
)]
pub(crate) struct Unenforceable {
    pub(crate) mode: Mode,
    pub(crate) what: String,
}

impl Sandbox {
    /// Picks the backend for `config` on this machine. Cheap: a PATH lookup and one system
    /// call; nothing is started.
    pub(crate) fn detect(config: &SandboxConfig, trusted: Vec<Trusted>) -> Self {
        let backend = match config.backend {
            BackendChoice::None => Backend::Off,
            BackendChoice::Bwrap => match find_bwrap() {
                Some(program) => Backend::Bwrap { program },
                None => Backend::Missing {
                    what: "bubblewrap (`bwrap`) is not installed; install the package `bubblewrap`"
                        .to_owned(),
                },
            },
            BackendChoice::Landlock => landlock_backend(),
            BackendChoice::Auto => match find_bwrap() {
                Some(program) => Backend::Bwrap { program },
                None => landlock_backend(),
            },
        };
        // Both backends need the command's gate (`notify.rs`).
        let backend = match (backend, gate_missing()) {
            (Backend::Bwrap { .. } | Backend::Landlock { .. }, Some(what)) => {
                Backend::Missing { what }
            }
            (backend, _) => backend,
        };
        let max_mode = config.max_mode.filter(|max| *max < Mode::DangerFullAccess);
        // A cap below full access cannot hold with the sandbox off: nothing runs instead.
        let backend = match (backend, max_mode) {
            (Backend::Off, Some(max)) => Backend::Missing {
                what: format!(
                    "the configuration caps commands at {max} (`[sandbox] max_mode`) but switches the sandbox off"
                ),
            },
            (backend, _) => backend,
        };
        let tmpdir = std::env::temp_dir();
        let tmpdir = std::fs::canonicalize(&tmpdir).unwrap_or(tmpdir);
        let default_mode = match backend {
            Backend::Off => Mode::DangerFullAccess,
            _ => config.mode.unwrap_or(Mode::WorkspaceWrite),
        };
        let default_mode = max_mode.map_or(default_mode, |max| default_mode.min(max));
        Self {
            backend,
            default_mode,
            max_mode,
            network: config.network,
            tmpdir,
            trusted,
            git_dirs: std::sync::Arc::default(),
            resolutions: std::sync::Arc::default(),
        }
    }

    /// Whether modes and escalation are offered at all (sandboxing is not switched off).
    pub(crate) fn offered(&self) -> bool {
        !matches!(self.backend, Backend::Off)
    }

    /// Whether commands can be confined here.
    pub(crate) fn confines(&self) -> bool {
        matches!(self.backend, Backend::Bwrap { .. } | Backend::Landlock { .. })
    }

    /// `rules` as this machine's backend enforces them.
    pub(crate) fn enforced(&self, rules: Rules) -> Policy {
        Policy { bwrap: self.backend.bwrap(), rules }
    }

    /// The policy for a command under `mode` in a session rooted at `cwd`, and how completely
    /// it is enforced; `Ok(None)` runs unconfined.
    /// `temp` is the session's private temp dir (its commands' `$TMPDIR`), when it has one.
    pub(crate) fn policy(
        &self,
        mode: Mode,
        cwd: &Path,
        temp: Option<&Path>,
    ) -> Result<(Option<hotsh_core::executor::Policy>, Enforcement), Unenforceable> {
        if mode == Mode::DangerFullAccess || matches!(self.backend, Backend::Off) {
            return Ok((None, Enforcement::None));
        }
        let (layout, trusted) = self.layout(mode, cwd, temp);
        let network = self.network && mode == Mode::WorkspaceWrite;
        let Layout { mut writable, mut pinned, mut read_only, given_up, unwalked } = layout;
        // The shared temp dir's sockets (tmux, ssh-agent) are not the session's; its own temp
        // dir is, as hotsh made it (never a path resolved again after a command ran).
        let sockets: Vec<PathBuf> =
            writable.iter().filter(|root| **root != self.tmpdir).cloned().collect();
        let mut gaps = Vec::new();
        for root in &unwalked {
            gaps.push(format!(
                "a `.git` deeper in {} than the first {} entries may stay writable",
                root.display(),
                protect::GIT_WALK_LIMIT
            ));
        }
        if !given_up.is_empty() {
            gaps.push(format!(
                "read-only: {} (inside what hotsh trusts)",
                given_up.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            ));
        }
        match &self.backend {
            Backend::Bwrap { .. } => {
                let enforcement = enforcement(gaps);
                let hidden = hidden_dirs();
                let policy = Rules { writable, pinned, read_only, sockets, network, hidden };
                Ok((Some(policy), enforcement))
            }
            Backend::Landlock { abi, mount_namespaces } => {
                if *abi < 3 {
                    gaps.push(format!(
                        "Landlock ABI {abi} cannot refuse truncating files (needs ABI 3, Linux 6.2)"
                    ));
                }
                let mut hidden = hidden_dirs();
                if !hidden.is_empty() && !mount_namespaces {
                    gaps.push(
                        "the model key `hotsh login` stored stays readable: this user cannot make a mount namespace"
                            .to_owned(),
                    );
                    hidden.clear();
                }
                if !read_only.is_empty() && !mount_namespaces {
                    // The shim could not mount anything. `.git` stays writable, and says so;
                    // a root holding hotsh's own files is given up whole.
                    let holds_trusted =
                        |root: &PathBuf| trusted.iter().any(|t| t.starts_with(root) && t != root);
                    let (kept, lost): (Vec<_>, Vec<_>) =
                        writable.into_iter().partition(|root| !holds_trusted(root));
                    writable = kept;
                    if !lost.is_empty() {
                        gaps.push(format!(
                            "read-only: {} (it holds hotsh's own files, and this user cannot make a mount namespace to protect them)",
                            lost.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
                        ));
                    }
                    if read_only
                        .iter()
                        .any(|p| is_git(p) && writable.iter().any(|r| p.starts_with(r)))
                    {
                        gaps.push(
                            "`.git` stays writable: this user cannot make a mount namespace"
                                .to_owned(),
                        );
                    }
                    read_only.clear();
                    pinned.clear();
                }
                let enforcement = enforcement(gaps);
                let mut sockets = sockets;
                sockets.retain(|dir| writable.iter().any(|root| dir.starts_with(root)));
                let policy = Rules { writable, pinned, read_only, sockets, network, hidden };
                Ok((Some(policy), enforcement))
            }
            Backend::Missing { what } => Err(Unenforceable { mode, what: what.clone() }),
            Backend::Off => Ok((None, Enforcement::None)),
        }
    }

    /// What a command under `mode` (which confines) in a session rooted at `cwd`, with its
    /// private temp dir `temp` (as hotsh made it), may write; and hotsh's own files among
    /// and above its roots. The roots and hotsh's own files are those resolved within
    /// [`protect::RESOLVED_FRESH`].
    fn layout(&self, mode: Mode, cwd: &Path, temp: Option<&Path>) -> (Layout, Vec<PathBuf>) {
        if matches!(mode, Mode::ReadOnly | Mode::DangerFullAccess) {
            return (Layout::default(), Vec::new());
        }
        let protect::Resolved { roots, trusted, .. } = self.resolutions.of(cwd, temp, || {
            let cwd = crate::nofollow::canonical(cwd).unwrap_or_else(|_| cwd.to_owned());
            let roots: Vec<PathBuf> =
                [cwd, self.tmpdir.clone()].into_iter().chain(temp.map(Path::to_owned)).collect();
            let trusted = protect::trusted_paths(&self.trusted, &roots);
            (roots, trusted)
        });
        let mut protected = trusted.clone();
        let mut unwalked = Vec::new();
        for root in &roots {
            let (git, complete) = self.git_dirs.beneath(root);
            protected.extend(git);
            if !complete {
                unwalked.push(root.clone());
            }
        }
        (Layout { unwalked, ..Layout::new(&roots, &protected) }, trusted)
    }

    /// Whether the host may write the file at `path` (absolute, symlinks resolved) for a
    /// session rooted at `cwd` under `mode`: where a command could, never `.git` or hotsh's
    /// own files.
    pub(crate) fn may_write(&self, mode: Mode, cwd: &Path, path: &Path) -> bool {
        if !self.offered() || mode == Mode::DangerFullAccess {
            return true;
        }
        self.layout(mode, cwd, None).0.allows(path)
    }

    /// One line for the log at start.
    pub(crate) fn describe(&self) -> String {
        match &self.backend {
            Backend::Bwrap { program } => format!(
                "sandbox: bwrap ({}); sessions default to {}",
                program.display(),
                self.default_mode
            ),
            Backend::Landlock { abi, mount_namespaces: true } => format!(
                "sandbox: landlock (ABI {abi}) with a seccomp network filter; sessions default to {}",
                self.default_mode
            ),
            Backend::Landlock { abi, mount_namespaces: false } => format!(
                "sandbox: landlock (ABI {abi}) with a seccomp network filter; sessions default to {}; this user cannot make a user namespace, so `.git` stays writable and a folder holding hotsh's own files is read-only whole",
                self.default_mode
            ),
            Backend::Off => {
                "sandbox: off (the configuration says so); commands run unconfined".to_owned()
            }
            Backend::Missing { what } => format!(
                "sandbox: no backend can confine commands here ({what}); confined commands will not run"
            ),
        }
    }
}

/// What hotsh trusts, read-only to every confined command: the plugin directories, then
/// `trusted` (the data directory, the configuration file, hotsh's own directory).
pub(crate) fn with_plugin_dirs(plugin_dirs: &[PathBuf], trusted: Vec<Trusted>) -> Vec<Trusted> {
    plugin_dirs
        .iter()
        .map(|dir| Trusted { path: dir.clone(), kind: TrustedKind::Directory })
        .chain(trusted)
        .collect()
}

/// What `hotsh sandbox` prints: the backend ([`Sandbox::describe`]), then for each mode what a
/// command run in `cwd` may write, what stays read-only inside that, the network and what is
/// not enforced; `false` with it when confined commands cannot run here.
pub(crate) fn report(sandbox: &Sandbox, cwd: &Path) -> (String, bool) {
    let mut out = format!("{}\ncommands in {}:\n", sandbox.describe(), cwd.display());
    let list = |paths: &[PathBuf]| {
        paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    };
    if !sandbox.offered() {
        out.push_str("  every command       unconfined: your full access, the network included (no modes are offered)\n");
        return (out, true);
    }
    let mut runs = true;
    for mode in Mode::ALL {
        let capped = sandbox.max_mode.is_some_and(|max| mode > max);
        let policy = if capped { None } else { Some(sandbox.policy(mode, cwd, None)) };
        let line = match policy {
            None => "not offered: the configuration caps commands below it (`[sandbox] max_mode`)"
                .to_owned(),
            Some(Ok((None, _))) => "unconfined: your full access, the network included".to_owned(),
            Some(Ok((Some(rules), enforcement))) => {
                let writes = if rules.writable.is_empty() {
                    "nothing".to_owned()
                } else {
                    list(&rules.writable)
                };
                let kept = if rules.read_only.is_empty() {
                    String::new()
                } else {
                    format!(" (read-only inside: {})", list(&rules.read_only))
                };
                let network = if rules.network { "on" } else { "off" };
                format!(
                    "writes {writes}{kept}; network {network}; enforced: {}",
                    enforcement.describe()
                )
            }
            Some(Err(unenforceable)) => {
                runs = false;
                format!("not run: {}", unenforceable.what)
            }
        };
        out.push_str(&format!("  {:<19} {line}\n", mode.as_str()));
    }
    (out, runs)
}

fn enforcement(gaps: Vec<String>) -> Enforcement {
    if gaps.is_empty() { Enforcement::Full } else { Enforcement::Partial(gaps.join("; ")) }
}

fn is_git(path: &Path) -> bool {
    path.file_name().is_some_and(|name| name == ".git")
}

fn landlock_backend() -> Backend {
    match confine::landlock_abi() {
        Some(abi) if abi >= 1 => Backend::Landlock {
            abi,
            mount_namespaces: confine::mount_namespaces_available(),
        },
        _ => Backend::Missing {
            what: "Landlock is not enabled in this kernel and bubblewrap is not installed; install the package `bubblewrap`".to_owned(),
        },
    }
}

/// `bwrap` on the PATH.
fn find_bwrap() -> Option<PathBuf> {
    crate::dirs::find_on_path(Path::new("bwrap"), &std::env::var_os("PATH")?)
}

/// The resolution of a session's mode (DESIGN §7): an escalation grant, else the session's
/// override, else the default; then narrowed by the cap of the session's mode (plan).
pub(crate) fn standing(default: Mode, session_override: Option<Mode>, cap: Option<Mode>) -> Mode {
    let chosen = session_override.unwrap_or(default);
    match cap {
        Some(cap) => chosen.min(cap),
        None => chosen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_core_and_the_plugin_interface_name_the_modes_alike() {
        for mode in Mode::ALL {
            assert_eq!(mode_to_abi(mode).as_str(), mode.as_str());
            assert_eq!(mode_from_abi(mode_to_abi(mode)), Some(mode));
            assert_eq!(Mode::parse(mode.as_str()), Some(mode));
        }
    }

    #[test]
    fn the_ladder_orders_modes_and_the_cap_narrows() {
        assert!(Mode::ReadOnly < Mode::WorkspaceWrite);
        assert!(Mode::WorkspaceWrite < Mode::DangerFullAccess);
        for mode in Mode::ALL {
            assert_eq!(Mode::parse(mode.as_str()), Some(mode));
            // The log's spelling (serde) is the same name.
            assert_eq!(serde_json::to_value(mode).expect("serialises"), mode.as_str());
        }
        assert_eq!(standing(Mode::WorkspaceWrite, None, None), Mode::WorkspaceWrite);
        assert_eq!(
            standing(Mode::WorkspaceWrite, Some(Mode::DangerFullAccess), None),
            Mode::DangerFullAccess
        );
        assert_eq!(
            standing(Mode::WorkspaceWrite, Some(Mode::DangerFullAccess), Some(Mode::ReadOnly)),
            Mode::ReadOnly
        );
    }

    #[test]
    fn without_mount_namespaces_git_stays_writable_and_enforcement_says_so() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join(".git")).expect(".git");
        // A temp dir of its own: the machine's /tmp may hold repositories of its own.
        let tmp = tempfile::tempdir().expect("a temp dir");
        let sandbox = |mount_namespaces| Sandbox {
            backend: Backend::Landlock { abi: 7, mount_namespaces },
            default_mode: Mode::WorkspaceWrite,
            max_mode: None,
            network: false,
            tmpdir: std::fs::canonicalize(tmp.path()).expect("canonical"),
            trusted: Vec::new(),
            git_dirs: Default::default(),
            resolutions: Default::default(),
        };
        let (policy, enforcement) =
            sandbox(false).policy(Mode::WorkspaceWrite, dir.path(), None).expect("confined");
        assert_eq!(policy.expect("a policy").read_only, Vec::<PathBuf>::new());
        assert!(
            matches!(&enforcement, Enforcement::Partial(gap) if gap.contains(".git` stays writable")),
            "{enforcement:?}"
        );
        let (policy, enforcement) =
            sandbox(true).policy(Mode::WorkspaceWrite, dir.path(), None).expect("confined");
        assert_eq!(policy.expect("a policy").read_only.len(), 1);
        assert_eq!(enforcement, Enforcement::Full);
    }

    #[test]
    fn a_missing_backend_fails_closed_and_full_access_never_needs_one() {
        let sandbox = Sandbox {
            backend: Backend::Missing { what: "nothing here".to_owned() },
            default_mode: Mode::WorkspaceWrite,
            max_mode: None,
            network: false,
            tmpdir: PathBuf::from("/tmp"),
            trusted: Vec::new(),
            git_dirs: Default::default(),
            resolutions: Default::default(),
        };
        let error = sandbox.policy(Mode::ReadOnly, Path::new("/"), None).expect_err("fails closed");
        assert!(error.to_string().contains("nothing here"), "{error}");
        let (policy, enforcement) =
            sandbox.policy(Mode::DangerFullAccess, Path::new("/"), None).expect("unconfined");
        assert_eq!((policy, enforcement), (None, Enforcement::None));
    }
}
