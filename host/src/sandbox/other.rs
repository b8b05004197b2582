//! The sandbox seam on a system other than Linux (ARCHITECTURE.md, "Platforms"): none of the
//! mechanisms the policies are enforced with exists here, so [`gate_missing`] says so, the
//! backend is `Missing`, and a confined command is refused before it starts (fail closed);
//! `danger-full-access` runs. A port writes its mechanism here (on macOS, a Seatbelt profile
//! per policy) with the same items `linux/` has.

/// Why nothing can be confined on this system.
const NONE_HERE: &str = "this system has none of the mechanisms hotsh's sandbox is built on \
                         (bubblewrap, Landlock, seccomp: Linux only)";

/// Always: no gate can be installed here.
pub(crate) fn gate_missing() -> Option<String> {
    Some(NONE_HERE.to_owned())
}

pub(crate) mod confine {
    use crate::sandbox::Policy;
    use std::ffi::OsString;
    use std::path::Path;

    pub(crate) fn landlock_abi() -> Option<i32> {
        None
    }

    pub(crate) fn mount_namespaces_available() -> bool {
        false
    }

    /// `SHELL -c COMMAND`: no policy is ever enforced here (the backend is `Missing`).
    pub(crate) fn shell_argv(
        _policy: Option<&Policy>,
        shell: &Path,
        command: &OsString,
        _helper: Option<&Path>,
    ) -> Vec<OsString> {
        vec![shell.into(), "-c".into(), command.clone()]
    }

    /// How long a bubblewrap sandbox lives (none is made here).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Lifetime {
        Environment,
    }

    pub(crate) fn bwrap_argv(_policy: &Policy, _lifetime: Lifetime) -> Option<Vec<OsString>> {
        None
    }

    pub(crate) fn scope_to_command() -> Result<(), String> {
        Err(super::NONE_HERE.to_owned())
    }

    pub(crate) fn restrict_self(_policy: &Policy) -> Result<(), String> {
        Err(super::NONE_HERE.to_owned())
    }

    pub(crate) fn confine_checker() -> Result<(), String> {
        Err(super::NONE_HERE.to_owned())
    }
}

pub(crate) mod notify {
    use std::os::fd::{AsRawFd as _, OwnedFd, RawFd};

    /// What a command's filter would send to its shim.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) struct Filters {
        pub(crate) connect: bool,
        pub(crate) names: bool,
    }

    impl Filters {
        pub(crate) fn for_policy(policy: &crate::sandbox::Policy) -> Self {
            Self { connect: !policy.network, names: true }
        }
    }

    pub(crate) fn programs(_filters: Filters) -> Result<(), String> {
        Err(super::NONE_HERE.to_owned())
    }

    /// The gate that answers a confined command's calls. None is made here
    /// (`spawn_gated` refuses), and no filter would send it a call.
    pub(crate) struct Gate(OwnedFd);

    impl Gate {
        pub(crate) fn new(listener: OwnedFd, _policy: &crate::sandbox::Policy) -> Self {
            Self(listener)
        }

        pub(crate) fn fd(&self) -> RawFd {
            self.0.as_raw_fd()
        }

        pub(crate) fn answer_one(&self) {}
    }
}

pub(crate) mod gated {
    use std::ffi::OsString;
    use std::os::fd::OwnedFd;

    /// Why a gated shell did not start.
    pub(crate) enum Gated {
        Unenforced(String),
        #[expect(dead_code, reason = "the same shape as Linux's; never made here")]
        Start(std::io::Error),
    }

    pub(crate) fn spawn_gated(
        _argv: &[OsString],
        _env: &[(OsString, OsString)],
        _shell: &std::path::Path,
        _filters: super::notify::Filters,
        _own_session: bool,
        _default_signals: &[i32],
        _too_long: fn(usize) -> String,
    ) -> Result<(libc::pid_t, OwnedFd), Gated> {
        Err(Gated::Unenforced(super::NONE_HERE.to_owned()))
    }
}
