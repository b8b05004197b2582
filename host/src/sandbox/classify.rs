//! Whether a failed command looks like it hit the sandbox, judged against the policy it ran
//! under (DESIGN §7): a read-only file system error; "permission denied" / "operation not
//! permitted" naming a path outside the writable roots (or inside a read-only one); a network
//! error while the network was off; death by SIGSYS. A permission error on a path the policy
//! allows is the file system's own answer, not a denial.

use super::Policy;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// What the sandbox refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Denial {
    File,
    Network,
    Syscall,
}

impl Denial {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Denial::File => "file",
            Denial::Network => "network",
            Denial::Syscall => "syscall",
        }
    }
}

/// What a command left that the classifier reads.
#[derive(Debug)]
pub(crate) struct Evidence<'a> {
    pub(crate) exit_code: Option<i32>,
    pub(crate) signal: Option<&'a str>,
    pub(crate) output: [&'a str; 2],
    pub(crate) workdir: &'a Path,
    /// The command never started: what the output says is the shim's, not a denial.
    pub(crate) not_run: bool,
}

/// What the sandbox refused, and where when a path says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) denial: Denial,
    /// The path refused, as the command's output named it.
    pub(crate) path: Option<String>,
}

pub(crate) fn classify(policy: &Policy, evidence: &Evidence<'_>) -> Option<Denial> {
    refusal(policy, evidence).map(|refusal| refusal.denial)
}

/// [`classify`], with the path refused. Judged whatever the exit status: `touch x; echo $?`
/// exits 0 and was refused all the same.
pub(crate) fn refusal(policy: &Policy, evidence: &Evidence<'_>) -> Option<Refusal> {
    if evidence.not_run || bwrap_failed(policy, evidence) {
        // Confinement that could not be set up is no boundary the command hit: offering a
        // wider mode for it would teach the user to grant full access for nothing.
        return None;
    }
    if evidence.signal == Some("SIGSYS") {
        return Some(Refusal { denial: Denial::Syscall, path: None });
    }
    // The path as the user reads it: absolute, against the command's folder.
    let file = |path: Option<&String>| {
        let path = path.map(|p| evidence.workdir.join(p).display().to_string());
        Some(Refusal { denial: Denial::File, path })
    };
    let lines = evidence.output.iter().flat_map(|text| text.lines());
    let mut network = false;
    for line in lines {
        if line.contains("Read-only file system") {
            return file(paths_in(line).first());
        }
        let refused =
            line.contains("Permission denied") || line.contains("Operation not permitted");
        if !policy.network && looks_like_network_failure(line, refused) {
            network = true;
            continue;
        }
        let paths = paths_in(line);
        if refused
            && let Some(path) = paths.iter().find(|p| !writable(policy, &evidence.workdir.join(p)))
        {
            return file(Some(path));
        }
        // Renaming or removing a pinned directory or a read-only path (a mount point).
        if line.contains("Device or resource busy")
            && let Some(path) =
                paths.iter().find(|p| mount_point(policy, &evidence.workdir.join(p)))
        {
            return file(Some(path));
        }
    }
    network.then_some(Refusal { denial: Denial::Network, path: None })
}

/// Whether bubblewrap, or the gate inside it, failed before the command started: nothing but
/// one line of its own error, with its exit status (bwrap's 1, the gate's 125).
fn bwrap_failed(policy: &Policy, evidence: &Evidence<'_>) -> bool {
    let text: String = evidence.output.concat();
    let text = text.trim();
    let bwrap = evidence.exit_code == Some(1) && text.starts_with("bwrap: ");
    let gate = evidence.exit_code == Some(125)
        && text.starts_with("hotsh: the sandbox cannot be enforced, so the command was not run");
    policy.bwrap.is_some() && (bwrap || gate) && !text.contains('\n')
}

/// Whether `path` (absolute) is somewhere a command may write under `policy`.
fn writable(policy: &Policy, path: &Path) -> bool {
    let path = normalize(path);
    if super::WRITABLE_DEVICES.iter().any(|device| path == Path::new(device)) {
        return true;
    }
    policy.writable.iter().any(|root| path.starts_with(root))
        && !policy.read_only.iter().any(|ro| path.starts_with(ro))
}

/// Whether `path` is one of the mount points the policy makes (a pinned directory or a
/// read-only path), which a command can neither rename nor remove.
fn mount_point(policy: &Policy, path: &Path) -> bool {
    let path = normalize(path);
    policy.pinned.iter().chain(&policy.read_only).any(|point| *point == path)
}

/// `path` as the canonical roots are written: `.` and `..` folded lexically, then the part
/// that exists resolved through the file system (symbolic links, such as a `/tmp` that is
/// one), the part that does not (the file a refused write would have made) appended.
fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    // The roots are canonical; resolve what exists of the path the same way.
    let mut existing = out.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        let Some(parent) = existing.parent() else { return out };
        if let Some(name) = existing.file_name() {
            rest.push(name.to_owned());
        }
        existing = parent;
    }
    let mut resolved = std::fs::canonicalize(existing).unwrap_or_else(|_| existing.to_owned());
    resolved.extend(rest.into_iter().rev());
    resolved
}

/// The paths an error line names: quoted ones, and the `PATH:` before the error text.
fn paths_in(line: &str) -> Vec<String> {
    static QUOTED: LazyLock<regex::Regex> =
        LazyLock::new(|| regex::Regex::new(r#"['‘"`]([^'’"`]+)['’"`]"#).expect("a valid pattern"));
    static BEFORE: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(
            r"([^ \t:'‘’]+): (?:Permission denied|Operation not permitted|Device or resource busy|Read-only file system)",
        )
        .expect("a valid pattern")
    });
    // A quoted phrase with spaces and no `/` is prose, and `-x` an option, not a path.
    QUOTED
        .captures_iter(line)
        .chain(BEFORE.captures_iter(line))
        .map(|c| c[1].to_owned())
        .filter(|p| !p.is_empty() && !p.starts_with('-') && (p.contains('/') || !p.contains(' ')))
        .collect()
}

fn looks_like_network_failure(line: &str, refused: bool) -> bool {
    const ERRORS: &[&str] = &[
        "Network is unreachable",
        "Temporary failure in name resolution",
        "Could not resolve host",
        "Name or service not known",
        "No address associated with hostname",
        "Cannot assign requested address",
        "Connection refused",
    ];
    const SOCKET_WORDS: &[&str] = &[
        "socket",
        "connect",
        "Socket",
        "Connect",
        "network",
        "Errno 1]",
        "/dev/tcp/",
        "/dev/udp/",
    ];
    ERRORS.iter().any(|e| line.contains(e))
        || (refused && SOCKET_WORDS.iter().any(|w| line.contains(w)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(dir: &Path) -> Policy {
        Policy {
            bwrap: None,
            rules: hotsh_core::executor::Policy {
                writable: vec![dir.to_owned()],
                pinned: Vec::new(),
                read_only: vec![dir.join(".git")],
                sockets: vec![dir.to_owned()],
                network: false,
                hidden: Vec::new(),
            },
        }
    }

    fn judge(policy: &Policy, workdir: &Path, stderr: &str) -> Option<Denial> {
        classify(
            policy,
            &Evidence {
                exit_code: Some(1),
                signal: None,
                output: ["", stderr],
                workdir,
                not_run: false,
            },
        )
    }

    #[test]
    fn permission_errors_count_only_outside_the_writable_roots() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        let p = policy(&root);
        assert_eq!(
            judge(&p, &root, "bash: line 1: /etc/hotsh-x: Permission denied"),
            Some(Denial::File)
        );
        assert_eq!(
            judge(&p, &root, "touch: cannot touch '/usr/x': Permission denied"),
            Some(Denial::File)
        );
        assert_eq!(
            judge(&p, &root, "bash: line 1: ./.git/config: Permission denied"),
            Some(Denial::File)
        );
        // Inside the writable root: the file system's own refusal (a 0444 file), not the sandbox.
        assert_eq!(judge(&p, &root, "bash: line 1: mine.txt: Permission denied"), None);
        assert_eq!(
            judge(&p, &root, "sh: 1: cannot create out: Read-only file system"),
            Some(Denial::File)
        );
        assert_eq!(judge(&p, &root, "some other failure"), None);
    }

    #[test]
    fn a_busy_mount_point_of_the_policy_is_a_denial_and_other_busy_paths_are_not() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir_all(root.join("target/debug")).expect("dirs");
        let mut p = policy(&root);
        p.rules.pinned = vec![root.join("target")];
        let moved = "mv: cannot move 'target' to 'target-old': Device or resource busy";
        assert_eq!(judge(&p, &root, moved), Some(Denial::File));
        let git = "rm: cannot remove '.git': Device or resource busy";
        assert_eq!(judge(&p, &root, git), Some(Denial::File));
        let own = "umount: /mnt/x: Device or resource busy";
        assert_eq!(judge(&p, &root, own), None);
    }

    #[test]
    fn network_errors_count_only_with_the_network_off() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut p = policy(dir.path());
        let line = "curl: (6) Could not resolve host: example.com";
        assert_eq!(judge(&p, dir.path(), line), Some(Denial::Network));
        assert_eq!(
            judge(&p, dir.path(), "bash: connect: Network is unreachable"),
            Some(Denial::Network)
        );
        assert_eq!(
            judge(&p, dir.path(), "bash: line 1: /dev/tcp/127.0.0.1/9: Operation not permitted"),
            Some(Denial::Network)
        );
        p.rules.network = true;
        assert_eq!(judge(&p, dir.path(), line), None);
    }

    #[test]
    fn sigsys_is_a_denial_and_so_is_a_refusal_whatever_the_exit_status() {
        let dir = tempfile::tempdir().expect("temp dir");
        let p = policy(dir.path());
        let evidence = |exit_code, signal| Evidence {
            exit_code,
            signal,
            output: ["", "/etc/x: Permission denied"],
            workdir: dir.path(),
            not_run: false,
        };
        assert_eq!(classify(&p, &evidence(None, Some("SIGSYS"))), Some(Denial::Syscall));
        // A refusal the command went past (`touch x; echo $?`) is one all the same, with its
        // path.
        let refused = refusal(&p, &evidence(Some(0), None));
        let expected = Refusal { denial: Denial::File, path: Some("/etc/x".to_owned()) };
        assert_eq!(refused, Some(expected));
        let quiet = Evidence { output: ["done", ""], ..evidence(Some(0), None) };
        assert_eq!(classify(&p, &quiet), None);
        // A command that never started hit no boundary, whatever the shim said.
        let not_run = Evidence { not_run: true, ..evidence(Some(125), None) };
        assert_eq!(classify(&p, &not_run), None);
    }
}
