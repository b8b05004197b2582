//! Linux's side of the sandbox seam (ARCHITECTURE.md, "Platforms"): the mechanisms that
//! enforce a [`Policy`] here — bubblewrap's arguments, Landlock, seccomp (its refusals and the
//! gate that answers a confined command's calls), mount and user namespaces. Everything else
//! of the sandbox (modes, policies, what is protected, the report) is the same on every
//! system and reaches these only through `confine`, `notify` and `gated`.

pub(crate) mod confine;
pub(crate) mod gated;
mod names;
pub(crate) mod notify;
mod sockets;
mod trapped;

use super::{Policy, SANDBOXED, WRITABLE_DEVICES};

/// What the kernel lacks for the command's gate, if anything: seccomp user notification with
/// `SECCOMP_ADDFD_FLAG_SEND` (Linux 5.14; `pidfd_getfd` and `openat2` came before).
pub(crate) fn gate_missing() -> Option<String> {
    let release = rustix::system::uname().release().to_string_lossy().into_owned();
    let mut numbers =
        release.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse::<u32>().ok());
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    (version < (5, 14)).then(|| {
        format!(
            "this kernel ({release}) is older than Linux 5.14, whose seccomp user notification the sandbox's gate needs"
        )
    })
}
