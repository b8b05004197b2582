//! Starting a confined command's shell under its seccomp filter (`notify.rs`), whose
//! notification descriptor comes back to the shim or the gate that answers the calls.

use super::notify;
use std::ffi::OsString;
use std::os::fd::{AsRawFd as _, OwnedFd, RawFd};

/// Why a gated shell did not start.
pub(crate) enum Gated {
    /// The filter could not be installed: nothing ran.
    Unenforced(String),
    /// The fork or the exec failed.
    Start(std::io::Error),
}

/// Starts the shell as the shim's `spawn_shell` does, but installs the command's filter in between
/// (`sandbox/notify.rs`); returns its pid and the filter's notification descriptor, sent
/// back over a socket pair.
///
/// The child is made as `posix_spawn` makes it, with `clone(CLONE_VM | CLONE_VFORK)` on a
/// stack of its own: it shares this process's memory until it calls `exec` (this process
/// waits meanwhile), so no page is copied. A `fork` cost about 0.6 ms here, most of it
/// copy-on-write faults (ARCHITECTURE.md, "Measured"). The child therefore only makes system
/// calls on data prepared here ([`Launch`]): it allocates nothing and never returns into
/// this process's frames.
pub(crate) fn spawn_gated(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    shell: &std::path::Path,
    filters: notify::Filters,
    own_session: bool,
    default_signals: &[i32],
    too_long: fn(usize) -> String,
) -> Result<(libc::pid_t, OwnedFd), Gated> {
    use std::ffi::CString;
    use std::os::fd::AsFd as _;
    use std::os::unix::ffi::OsStrExt as _;
    let c_string = |bytes: &[u8]| {
        CString::new(bytes)
            .map_err(|_| Gated::Start(std::io::Error::other("an argument contains a NUL byte")))
    };
    let args = argv.iter().map(|a| c_string(a.as_bytes())).collect::<Result<Vec<_>, _>>()?;
    let vars = env
        .iter()
        .map(|(k, v)| c_string(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut arg_ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    arg_ptrs.push(std::ptr::null());
    let mut var_ptrs: Vec<*const libc::c_char> = vars.iter().map(|v| v.as_ptr()).collect();
    var_ptrs.push(std::ptr::null());
    let programs = notify::programs(filters).map_err(Gated::Unenforced)?;
    let program = |bpf: &seccompiler::BpfProgram| libc::sock_fprog {
        len: bpf.len() as u16,
        filter: bpf.as_ptr().cast_mut().cast::<libc::sock_filter>(),
    };
    let (refuse, notify) = (program(&programs.refuse), program(&programs.notify));
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(Gated::Start)?;
    let failed_exec = format!("hotsh: cannot start {}: ", shell.display());
    let strings = args.iter().chain(&vars).map(|c| c.as_bytes_with_nul().len()).sum();
    let too_long = format!("{}\n", too_long(strings));
    let launch = Launch {
        path: arg_ptrs[0],
        argv: arg_ptrs.as_ptr(),
        envp: var_ptrs.as_ptr(),
        refuse: &refuse,
        notify: &notify,
        socket: theirs.as_raw_fd(),
        own_session,
        default_signals,
        failed_exec: failed_exec.as_bytes(),
        too_long: too_long.as_bytes(),
    };
    let mut stack = vec![0u8; CHILD_STACK];
    // The stack grows down from its (16-byte aligned) end.
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK) & !15;
    // SAFETY: `launch` runs on `stack` in a child that shares our memory; `launch` and
    // everything it points at outlive the child's use of them, since CLONE_VFORK suspends this
    // thread until the child has called `execve` or ended (and this process has one thread).
    let pid = unsafe {
        libc::clone(
            launch_child,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&launch as *const Launch<'_>).cast_mut().cast(),
        )
    };
    if pid < 0 {
        return Err(Gated::Start(std::io::Error::last_os_error()));
    }
    drop(stack);
    drop(theirs);
    let mut message = [0u8; 8];
    let received = crate::fds::recv_with_fds(ours.as_fd(), &mut message);
    match received {
        Ok((got, mut fds)) if fds.len() == 1 && &message[..got.bytes] == b"ok" => {
            Ok((pid, fds.remove(0)))
        }
        other => {
            let why = match other {
                Ok((got, _)) if got.bytes == 4 => {
                    let errno = i32::from_ne_bytes(message[..4].try_into().expect("four bytes"));
                    format!(
                        "cannot ask for the command's calls (seccomp user notification with SECCOMP_ADDFD, Linux 5.14): {}",
                        std::io::Error::from_raw_os_error(errno)
                    )
                }
                Ok(_) => "the command's process ended before it was confined".to_owned(),
                Err(error) => format!("cannot hear from the command's process: {error}"),
            };
            // SAFETY: our own child; it has not run the command.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            Err(Gated::Unenforced(why))
        }
    }
}

/// The stack of the child [`spawn_gated`] makes: ample for a few system calls.
const CHILD_STACK: usize = 64 << 10;

/// What the child of [`spawn_gated`] needs, all of it prepared by the parent.
struct Launch<'a> {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    refuse: &'a libc::sock_fprog,
    notify: &'a libc::sock_fprog,
    socket: RawFd,
    own_session: bool,
    /// Signals back to their default action in the shell.
    default_signals: &'a [i32],
    /// `hotsh: cannot start SHELL: `, for a failed `execve`.
    failed_exec: &'a [u8],
    /// The line for an `execve` that failed with `E2BIG` (the shim's `too_long`).
    too_long: &'a [u8],
}

/// The child of [`spawn_gated`]: resets its signals, installs the filter, sends the
/// notification descriptor to the parent (or its errno, four bytes), then becomes the shell.
/// Only system calls: it shares the parent's memory.
extern "C" fn launch_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `Launch`, alive while this child runs (CLONE_VFORK); every
    // call below is a plain system call on data it prepared.
    unsafe {
        let launch = &*(arg as *const Launch<'_>);
        if launch.own_session {
            libc::setsid();
        }
        for &signal in launch.default_signals {
            libc::signal(signal, libc::SIG_DFL);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        let installed = libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                launch.refuse as *const libc::sock_fprog,
            ) == 0;
        let listener = if installed {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                launch.notify as *const libc::sock_fprog,
            ) as i32
        } else {
            -1
        };
        if listener < 0 {
            let errno = *libc::__errno_location();
            let bytes = errno.to_ne_bytes();
            libc::send(launch.socket, bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL);
            return 125;
        }
        if send_descriptor(launch.socket, listener) < 0 {
            return 125;
        }
        libc::close(listener);
        libc::close(launch.socket);
        libc::execve(launch.path, launch.argv, launch.envp);
        let errno = *libc::__errno_location();
        if errno == libc::E2BIG {
            libc::write(2, launch.too_long.as_ptr().cast(), launch.too_long.len());
            return 127;
        }
        let reason = std::ffi::CStr::from_ptr(libc::strerror(errno));
        libc::write(2, launch.failed_exec.as_ptr().cast(), launch.failed_exec.len());
        libc::write(2, reason.as_ptr().cast(), reason.to_bytes().len());
        libc::write(2, b"\n".as_ptr().cast(), 1);
        127
    }
}

/// Sends `fd` over `socket` with the two bytes `ok` (`SCM_RIGHTS`), with nothing but system
/// calls and the stack.
///
/// # Safety
///
/// `socket` and `fd` are open descriptors.
unsafe fn send_descriptor(socket: RawFd, fd: RawFd) -> isize {
    // Room for one cmsghdr and one descriptor, aligned as a cmsghdr.
    let mut control = [0u64; 4];
    let mut payload = *b"ok";
    let mut iov = libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: payload.len() };
    // SAFETY: the message and its control buffer live on this stack for the call; CMSG_*
    // compute within that buffer, sized by CMSG_SPACE for one descriptor.
    unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let header = libc::CMSG_FIRSTHDR(&message);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<RawFd>(), fd);
        libc::sendmsg(socket, &message, libc::MSG_NOSIGNAL)
    }
}
