//! Enforcement, run inside the shim (single-threaded, before it starts the shell): the
//! landlock backend restricts the shim itself so that the shell inherits it; the bwrap backend
//! only changes the shell's argument vector.

use super::{Policy, WRITABLE_DEVICES};
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// The hidden subcommand of the gate that runs inside bwrap (`executor/shim.rs`).
use super::SANDBOXED;

/// The Landlock ABI version of the running kernel; `None` when Landlock is off.
pub(crate) fn landlock_abi() -> Option<i32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_ulong = 1;
    // SAFETY: the documented version query: no attribute pointer, size 0.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    (abi > 0).then_some(abi as i32)
}

/// Whether the shim will be able to make `.git` read-only: root (which may unshare a mount
/// namespace directly), or a kernel that lets this user make a user namespace.
pub(crate) fn mount_namespaces_available() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let read = |path: &str| std::fs::read_to_string(path).ok().map(|s| s.trim().to_owned());
    let max = read("/proc/sys/user/max_user_namespaces");
    let unprivileged = read("/proc/sys/kernel/unprivileged_userns_clone");
    let apparmor = read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    max.is_some_and(|m| m != "0")
        && unprivileged.is_none_or(|u| u != "0")
        && apparmor.is_none_or(|a| a != "1")
}

/// The shell's argument vector under `policy`: `SHELL -c COMMAND`; for the bwrap backend,
/// inside bwrap, under the gate `helper` (this program, `__sandboxed POLICY SHELL -c …`: it
/// makes the command's name-making and `connect` calls for it from inside the sandbox's
/// namespaces, see `sandbox/notify.rs`).
pub(crate) fn shell_argv(
    policy: Option<&Policy>,
    shell: &Path,
    command: &OsString,
    helper: Option<&Path>,
) -> Vec<OsString> {
    let mut argv: Vec<OsString> = Vec::new();
    if let Some(policy) = policy
        && let Some(bwrap) = bwrap_argv(policy, Lifetime::OneCommand)
    {
        argv.extend(bwrap);
        if let Some(helper) = helper {
            argv.push(helper.into());
            argv.push(SANDBOXED.into());
            argv.push(serde_json::to_string(policy).unwrap_or_default().into());
        }
    }
    argv.push(shell.into());
    argv.push("-c".into());
    argv.push(command.clone());
    argv
}

/// How long a bubblewrap sandbox lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lifetime {
    /// One command's, started by its shim: it dies with the shim (`--die-with-parent`).
    OneCommand,
    /// A session's environment, started by the host and ended by the host's lifeline (the
    /// supervisor inside watches it): not `--die-with-parent`, which would tie it to the host
    /// *thread* that started it.
    Environment,
}

/// `bwrap` and its options for `policy`, up to and including `--`; `None` for the Landlock
/// backend. Everything but the program after `--` is the same for one command and for an
/// environment: the same mounts, no network, no capabilities, a pid namespace of its own.
pub(crate) fn bwrap_argv(policy: &Policy, lifetime: Lifetime) -> Option<Vec<OsString>> {
    let program = policy.bwrap.as_ref()?;
    let bind = |flag: &str, path: &std::path::PathBuf| {
        [flag.into(), path.into(), path.into()] as [OsString; 3]
    };
    let mut argv: Vec<OsString> = vec![program.into()];
    argv.extend(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"].map(OsString::from));
    // Outer roots first: a root bound later hides what was bound inside it.
    let mut writable: Vec<&std::path::PathBuf> = policy.writable.iter().collect();
    writable.sort_by_key(|dir| dir.components().count());
    argv.extend(writable.into_iter().flat_map(|dir| bind("--bind", dir)));
    argv.extend(policy.pinned.iter().flat_map(|dir| bind("--bind", dir)));
    argv.extend(policy.read_only.iter().flat_map(|path| bind("--ro-bind", path)));
    // Last: a hidden folder may lie inside any of the above.
    for dir in &policy.hidden {
        argv.extend(
            ["--tmpfs".into(), dir.into(), "--remount-ro".into(), dir.into()] as [OsString; 4]
        );
    }
    if policy.writable.is_empty() {
        // Read-only writes nothing that outlives the command: bwrap's `/dev` is a file system
        // of its own (with `/dev/shm`) that would keep what a command wrote there for the
        // environment's life. Its devices (`/dev/null`) stay writable on a read-only mount.
        argv.extend(["--remount-ro", "/dev"].map(OsString::from));
    }
    if !policy.network {
        argv.push("--unshare-net".into());
    }
    // No capabilities, in a user namespace of its own where the kernel allows one: root
    // inside can do no more than the user it is (no remount, no raw sockets, no ptrace of
    // the agent).
    argv.extend(["--unshare-user-try", "--cap-drop", "ALL", "--unshare-pid"].map(OsString::from));
    if lifetime == Lifetime::OneCommand {
        argv.push("--die-with-parent".into());
    }
    argv.push("--".into());
    Some(argv)
}

/// Inside a session's bubblewrap environment (`executor/supervisor.rs`), where the mounts,
/// the network and the capabilities are already as the policy says: puts this shim, and so
/// its command, in a Landlock domain of its own that may signal no process outside it and
/// reach no abstract socket outside it. The commands of one environment share its pid and
/// network namespaces; this keeps each from stopping another's shim or the environment's
/// supervisor, as separate sandboxes would. A kernel without Landlock scopes (before 6.12)
/// enforces nothing of it, and the environment still holds: a command that kills what it
/// shares ends only its own session's environment, which the agent replaces.
pub(crate) fn scope_to_command() -> Result<(), String> {
    use landlock::{CompatLevel, Compatible, Ruleset, RulesetAttr, Scope};
    let error = |e: landlock::RulesetError| format!("Landlock refused the scope: {e}");
    Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .scope(Scope::Signal | Scope::AbstractUnixSocket)
        .map_err(error)?
        .create()
        .map_err(error)?
        .restrict_self()
        .map_err(error)?;
    Ok(())
}

/// Restricts this process (and so every process it starts) to `policy`, for the landlock
/// backend. Errors say what could not be enforced; the caller then runs nothing.
pub(crate) fn restrict_self(policy: &Policy) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !policy.read_only.is_empty() || !policy.pinned.is_empty() || !policy.hidden.is_empty() {
        own_namespaces()?;
        protect_paths(&policy.pinned, &policy.read_only)?;
        hide(&policy.hidden)?;
    } else if !root {
        // An ordinary user can empty the bounding set only inside a user namespace of its
        // own (where it holds CAP_SETPCAP). Without one the set stays full but empty of use:
        // the user holds no capability, and with no_new_privs no `exec` grants one.
        let _ = own_namespaces();
    }
    landlock(&policy.writable)?;
    if !policy.network {
        socket_filter(Sockets::UnixOnly)?;
    }
    drop_capabilities()
}

/// Confines the process that checks a plugin build before it loads it, so that what the build
/// runs while it loads (an ELF constructor, its manifest) can change nothing: no writes but to
/// the null devices, no sockets at all, no capabilities. Where this kernel has no Landlock the
/// file system stays open, and the error says so (the check goes on: the build would run with
/// the agent's own access once loaded anyway).
pub(crate) fn confine_checker() -> Result<(), String> {
    socket_filter(Sockets::None)?;
    drop_capabilities()?;
    match landlock(&[]) {
        Err(error) if landlock_abi().is_none() => {
            eprintln!("hotsh: the check cannot keep the build from writing files: {error}");
            Ok(())
        }
        confined => confined,
    }
}

/// Secure bits that keep capabilities from coming back: root is not special on `exec`
/// (`NOROOT`), changing uids does not touch them (`NO_SETUID_FIXUP`), none can be raised into
/// the ambient set, each locked; `KEEP_CAPS` is locked off.
const LOCKED_SECURE_BITS: libc::c_ulong = 0xef;

/// Drops every capability of this process for good: the secure bits locked, the bounding and
/// ambient sets emptied (which needs `CAP_SETPCAP`, so it is done while it is held), then the
/// inheritable, permitted and effective sets. A process that holds no capabilities (an
/// ordinary user outside a user namespace) has none to drop, and with `no_new_privs` (set by
/// Landlock before this) no `exec` can grant any. Fails, and nothing runs, if any remain.
pub(crate) fn drop_capabilities() -> Result<(), String> {
    use caps::{CapSet, Capability};
    let error = |what: &str, e: caps::errors::CapsError| format!("cannot drop {what}: {e}");
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).unwrap_or(false) {
        // SAFETY: a plain prctl on this process.
        if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, LOCKED_SECURE_BITS, 0, 0, 0) } != 0 {
            return Err(format!(
                "cannot lock the secure bits: {}",
                std::io::Error::last_os_error()
            ));
        }
        caps::clear(None, CapSet::Bounding).map_err(|e| error("the bounding set", e))?;
    }
    caps::clear(None, CapSet::Ambient).map_err(|e| error("the ambient set", e))?;
    for (set, what) in [
        (CapSet::Inheritable, "the inheritable set"),
        (CapSet::Effective, "the effective set"),
        (CapSet::Permitted, "the permitted set"),
    ] {
        caps::clear(None, set).map_err(|e| error(what, e))?;
    }
    let left = caps::read(None, CapSet::Permitted).map_err(|e| error("capabilities", e))?;
    if !left.is_empty() {
        return Err(format!("capabilities are left after dropping them: {left:?}"));
    }
    Ok(())
}

/// Enters a mount namespace of this process's own: as root directly, otherwise through a user
/// namespace mapping this user (and group) to itself.
fn own_namespaces() -> Result<(), String> {
    // SAFETY: plain system calls on this single-threaded process.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
            return Err(format!(
                "cannot make a mount namespace to keep .git read-only: {}",
                std::io::Error::last_os_error()
            ));
        }
        let write = |file: &str, text: String| {
            std::fs::write(file, text).map_err(|e| format!("cannot write {file}: {e}"))
        };
        // The shim is not dumpable (a fork of the supervisor), and the files under
        // /proc/self of a process that is not dumpable belong to root: this user could not
        // write its own maps. Dumpable for as long as it takes, then not again.
        // SAFETY: plain prctls on this single-threaded process.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
        let mapped = write("/proc/self/setgroups", "deny".to_owned())
            .and_then(|()| write("/proc/self/uid_map", format!("{uid} {uid} 1")))
            .and_then(|()| write("/proc/self/gid_map", format!("{gid} {gid} 1")));
        // SAFETY: as above.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
        mapped?;
    }
    Ok(())
}

/// In this process's own mount namespace ([`own_namespaces`]): covers each of `hidden` with an
/// empty, read-only file system.
fn hide(hidden: &[std::path::PathBuf]) -> Result<(), String> {
    for dir in hidden {
        let c_dir = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| format!("{} contains a NUL byte", dir.display()))?;
        let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        // SAFETY: valid C strings; changes only this process's own mount namespace.
        let mounted = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                c_dir.as_ptr(),
                c"tmpfs".as_ptr(),
                flags,
                c"size=4k,mode=0500".as_ptr().cast(),
            )
        };
        if mounted != 0 {
            return Err(format!(
                "cannot hide {}: {}",
                dir.display(),
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// In this process's own mount namespace ([`own_namespaces`]): binds each of `pinned` onto
/// itself, still writable (a mount point cannot be renamed or removed, so the read-only paths
/// beneath it stay where they are), then makes each of `read_only` read-only.
fn protect_paths(
    pinned: &[std::path::PathBuf],
    read_only: &[std::path::PathBuf],
) -> Result<(), String> {
    let root = c"/";
    // SAFETY: valid C strings; changes only this process's new mount namespace.
    if unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(format!("cannot make mounts private: {}", std::io::Error::last_os_error()));
    }
    for path in pinned {
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| format!("{} contains a NUL byte", path.display()))?;
        // SAFETY: valid C strings; a bind mount of a directory onto itself.
        if unsafe {
            libc::mount(
                c_path.as_ptr(),
                c_path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            )
        } != 0
        {
            return Err(format!(
                "cannot pin {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
    }
    for path in read_only {
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| format!("{} contains a NUL byte", path.display()))?;
        // SAFETY: valid C strings and a zeroed statvfs out-parameter.
        let locked = unsafe {
            let mut stat: libc::statvfs = std::mem::zeroed();
            if libc::statvfs(c_path.as_ptr(), &mut stat) != 0 {
                return Err(format!(
                    "cannot stat {}: {}",
                    path.display(),
                    std::io::Error::last_os_error()
                ));
            }
            // Flags a remount inside a user namespace must keep.
            let mut flags = 0;
            for (st, ms) in [
                (libc::ST_NOSUID, libc::MS_NOSUID),
                (libc::ST_NODEV, libc::MS_NODEV),
                (libc::ST_NOEXEC, libc::MS_NOEXEC),
                (libc::ST_NOATIME, libc::MS_NOATIME),
                (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
                (libc::ST_RELATIME, libc::MS_RELATIME),
            ] {
                if stat.f_flag & st != 0 {
                    flags |= ms;
                }
            }
            flags
        };
        // SAFETY: valid C strings; a bind mount of a path onto itself, then read-only.
        let bound = unsafe {
            libc::mount(
                c_path.as_ptr(),
                c_path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ) == 0
                && libc::mount(
                    std::ptr::null(),
                    c_path.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | locked,
                    std::ptr::null(),
                ) == 0
        };
        if !bound {
            return Err(format!(
                "cannot make {} read-only: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

fn landlock(writable: &[std::path::PathBuf]) -> Result<(), String> {
    use landlock::{
        ABI, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
        RulesetStatus, Scope, path_beneath_rules,
    };
    let abi = ABI::V6;
    let error = |e: landlock::RulesetError| format!("Landlock refused the rules: {e}");
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_write(abi))
        .map_err(error)?
        .scope(Scope::Signal | Scope::AbstractUnixSocket)
        .map_err(error)?
        .create()
        .map_err(error)?
        .add_rules(path_beneath_rules(writable, AccessFs::from_write(abi)))
        .map_err(error)?
        .add_rules(path_beneath_rules(WRITABLE_DEVICES, AccessFs::from_write(abi)))
        .map_err(error)?
        .restrict_self()
        .map_err(error)?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("Landlock is not enabled in this kernel".to_owned());
    }
    Ok(())
}

/// Which sockets a seccomp filter leaves a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sockets {
    /// `socket()` of any family but `AF_UNIX` fails with EPERM (the network is off).
    UnixOnly,
    /// `socket()` and `socketpair()` fail with EPERM.
    None,
}

/// seccomp: the sockets `allowed` leaves, and io_uring refused (it could open sockets without
/// `socket()`), with EPERM.
fn socket_filter(allowed: Sockets) -> Result<(), String> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule,
    };
    let error = |e: seccompiler::BackendError| format!("cannot build the network filter: {e}");
    let rules = match allowed {
        Sockets::UnixOnly => {
            let not_unix = SeccompRule::new(vec![
                SeccompCondition::new(
                    0,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Ne,
                    libc::AF_UNIX as u64,
                )
                .map_err(error)?,
            ])
            .map_err(error)?;
            vec![(libc::SYS_socket, vec![not_unix]), (libc::SYS_io_uring_setup, vec![])]
        }
        Sockets::None => vec![
            (libc::SYS_socket, vec![]),
            (libc::SYS_socketpair, vec![]),
            (libc::SYS_io_uring_setup, vec![]),
        ],
    };
    let rules = rules.into_iter().collect();
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("no seccomp filter for this architecture: {e}"))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(error)?;
    let program: BpfProgram = filter.try_into().map_err(|e: seccompiler::BackendError| error(e))?;
    seccompiler::apply_filter(&program).map_err(|e| format!("cannot apply the network filter: {e}"))
}
