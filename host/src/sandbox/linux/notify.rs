//! The calls a confined command makes that its shim answers for it (seccomp user
//! notification): `connect` with the network off (`sockets.rs`), and every call that makes a
//! name in a directory (`names.rs`: no command may make a `.git`).
//!
//! A seccomp filter cannot read the path or address a call names, and a notification answered
//! "go on" would have the kernel read it again, after a second thread may have changed it. So
//! the shim *does* each call itself: it copies the arguments out of the command's memory
//! once, checks them, and makes the call with the command's working directory or directory
//! descriptor (`pidfd_getfd`), its umask, and, being in the command's mount namespace,
//! Landlock domain and credentials (none of which a command can widen), with the command's
//! own rights. A descriptor the call returns is put into the command (`SECCOMP_ADDFD`).
//!
//! The filter goes on the command's process between its `clone` and `exec`, never on the gate
//! (`executor/shim.rs`, `spawn_gated`).

use super::trapped::{Answer, Target, errno};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

/// What a command's filter sends to its shim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Filters {
    /// `connect` (and no datagram Unix sockets): the network is off.
    pub(crate) connect: bool,
    /// The calls that make names. Only where the shim shares the command's mount namespace
    /// (a shim outside bubblewrap's would make them in the wrong tree).
    pub(crate) names: bool,
}

impl Filters {
    /// What a command under `policy` is filtered for: everything, always; by the shim that
    /// starts it under Landlock, by the gate inside bwrap under bubblewrap.
    pub(crate) fn for_policy(policy: &super::Policy) -> Self {
        Self { connect: !policy.network, names: true }
    }
}

/// The calls that make a name in a directory (`names.rs` answers them).
pub(crate) fn name_calls() -> Vec<i64> {
    let mut calls = vec![
        libc::SYS_mkdirat,
        libc::SYS_mknodat,
        libc::SYS_symlinkat,
        libc::SYS_linkat,
        libc::SYS_renameat,
        libc::SYS_renameat2,
        libc::SYS_openat2,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        libc::SYS_mkdir,
        libc::SYS_mknod,
        libc::SYS_symlink,
        libc::SYS_link,
        libc::SYS_rename,
        libc::SYS_creat,
    ]);
    calls
}

/// The two programs of a command's filter, compiled: calls refused, calls sent to the gate.
#[derive(Debug, Clone)]
pub(crate) struct Programs {
    pub(crate) refuse: seccompiler::BpfProgram,
    pub(crate) notify: seccompiler::BpfProgram,
}

/// The programs for both settings of [`Filters::connect`], compiled once per process (the
/// supervisor does it before it forks any shim, so no command waits for a compilation).
pub(crate) fn programs(filters: Filters) -> Result<&'static Programs, String> {
    static COMPILED: std::sync::OnceLock<[Result<Programs, String>; 2]> =
        std::sync::OnceLock::new();
    let [network_off, network_on] = COMPILED.get_or_init(|| {
        [
            compile(Filters { connect: true, names: true }),
            compile(Filters { connect: false, names: true }),
        ]
    });
    let compiled = match (filters.connect, filters.names) {
        (true, true) => network_off,
        (false, true) => network_on,
        _ => return Err("no such filter".to_owned()),
    };
    compiled.as_ref().map_err(String::clone)
}

/// Compiles the two programs of `filters`.
fn compile(filters: Filters) -> Result<Programs, String> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule,
    };
    let error = |e: seccompiler::BackendError| format!("cannot build the command's filter: {e}");
    let creates = |arg: u8| {
        SeccompCondition::new(
            arg,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(libc::O_CREAT as u64),
            libc::O_CREAT as u64,
        )
        .and_then(|condition| SeccompRule::new(vec![condition]))
        .map_err(error)
    };
    let mut notified: std::collections::BTreeMap<i64, Vec<SeccompRule>> = Default::default();
    if filters.names {
        notified.extend(name_calls().into_iter().map(|call| (call, Vec::new())));
        notified.insert(libc::SYS_openat, vec![creates(2)?]);
        #[cfg(target_arch = "x86_64")]
        notified.insert(libc::SYS_open, vec![creates(1)?]);
    }
    // io_uring could make names (and sockets) without any of these calls.
    let mut refused: std::collections::BTreeMap<i64, Vec<SeccompRule>> =
        [(libc::SYS_io_uring_setup, Vec::new())].into_iter().collect();
    if filters.connect {
        notified.insert(libc::SYS_connect, Vec::new());
        // `type & 0xf` (flags such as SOCK_CLOEXEC above it): SOCK_DGRAM, and SOCK_RAW,
        // which Unix sockets treat as datagrams: their `sendto` names a peer on each call.
        let datagram = |arg: u8, socket_type: i32| {
            SeccompCondition::new(
                arg,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(0xf),
                socket_type as u64,
            )
            .map_err(error)
        };
        let unix = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            libc::AF_UNIX as u64,
        )
        .map_err(error)?;
        refused.insert(
            libc::SYS_socket,
            vec![
                SeccompRule::new(vec![unix.clone(), datagram(1, libc::SOCK_DGRAM)?])
                    .map_err(error)?,
                SeccompRule::new(vec![unix, datagram(1, libc::SOCK_RAW)?]).map_err(error)?,
            ],
        );
        refused.insert(
            libc::SYS_socketpair,
            vec![
                SeccompRule::new(vec![datagram(1, libc::SOCK_DGRAM)?]).map_err(error)?,
                SeccompRule::new(vec![datagram(1, libc::SOCK_RAW)?]).map_err(error)?,
            ],
        );
    }
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("no seccomp filter for this architecture: {e}"))?;
    let refuse = SeccompFilter::new(
        refused.into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(error)?;
    let refuse: BpfProgram = refuse.try_into().map_err(|e: seccompiler::BackendError| error(e))?;
    let trap = SeccompFilter::new(
        notified.into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Trap,
        arch,
    )
    .map_err(error)?;
    let mut notify: BpfProgram =
        trap.try_into().map_err(|e: seccompiler::BackendError| error(e))?;
    // seccompiler has no user-notification action: its "trap" returns become ones.
    const BPF_RET_K: u16 = 0x06;
    for instruction in &mut notify {
        if instruction.code == BPF_RET_K && instruction.k == libc::SECCOMP_RET_TRAP {
            instruction.k = libc::SECCOMP_RET_USER_NOTIF;
        }
    }
    Ok(Programs { refuse, notify })
}

/// The shim's side of a command's filter.
#[derive(Debug)]
pub(crate) struct Gate {
    listener: OwnedFd,
    sockets: super::sockets::Sockets,
}

impl Gate {
    pub(crate) fn new(listener: OwnedFd, policy: &super::Policy) -> Self {
        Self { listener, sockets: super::sockets::Sockets::new(policy) }
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }

    /// Answers one call of the command (call when the descriptor is readable).
    pub(crate) fn answer_one(&self) {
        // SAFETY: a zeroed seccomp_notif is what RECV expects to fill.
        let mut notification: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: RECV writes one notification into the struct we own.
        let received =
            unsafe { libc::ioctl(self.fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, &mut notification) };
        if received != 0 {
            // The command was interrupted meanwhile (its call is gone), or nothing waits.
            return;
        }
        let answer = match Target::of(self.fd(), &notification) {
            Err(errno) => Answer::Error(errno),
            Ok(target) => {
                let nr = i64::from(notification.data.nr);
                if nr == libc::SYS_connect {
                    match self.sockets.connect(&target, &notification.data.args) {
                        Ok(()) => Answer::Value(0),
                        Err(errno) => Answer::Error(errno),
                    }
                } else {
                    super::names::answer(&target, nr, &notification.data.args)
                }
            }
        };
        respond(self.fd(), notification.id, answer);
    }
}

/// Answers call `id` on `listener`.
fn respond(listener: RawFd, id: u64, answer: Answer) {
    let (value, errno) = match answer {
        Answer::Value(value) => (value, 0),
        Answer::Error(errno) => (0, errno),
        Answer::Later(work) => {
            // SAFETY: dup of the listener we own, for the thread to answer on.
            let copy = unsafe { libc::fcntl(listener, libc::F_DUPFD_CLOEXEC, 3) };
            if copy < 0 {
                return respond(listener, id, Answer::Error(errno()));
            }
            // SAFETY: the descriptor was just made for the thread.
            let copy = unsafe { OwnedFd::from_raw_fd(copy) };
            let spawned =
                std::thread::Builder::new().name("hotsh-shim-wait".into()).spawn(move || {
                    let answer = work();
                    respond(copy.as_raw_fd(), id, answer);
                });
            if spawned.is_err() {
                respond(listener, id, Answer::Error(libc::EAGAIN));
            }
            return;
        }
        Answer::Descriptor { file, close_on_exec } => {
            let mut add = libc::seccomp_notif_addfd {
                id,
                flags: libc::SECCOMP_ADDFD_FLAG_SEND as u32,
                srcfd: file.as_raw_fd() as u32,
                newfd: 0,
                newfd_flags: if close_on_exec { libc::O_CLOEXEC as u32 } else { 0 },
            };
            // SAFETY: ADDFD reads the struct we own; with FLAG_SEND it also answers the call
            // with the descriptor's number in the command.
            let added = unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ADDFD, &mut add) };
            if added >= 0 {
                return;
            }
            (0, errno())
        }
    };
    let mut response = libc::seccomp_notif_resp { id, val: value, error: -errno, flags: 0 };
    // SAFETY: SEND reads the response we own. A command gone meanwhile makes it fail (ENOENT),
    // which needs nothing.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SEND, &mut response) };
}
