//! Passing descriptors over a Unix socket (`SCM_RIGHTS`): how the host hands a job's pipes
//! to the command supervisor, and the supervisor to a shim. A leaf the supervisor and the
//! shim both use, and the sandbox's gated spawn. `SCM_RIGHTS` is POSIX; two flags of
//! Linux's are its seam (ARCHITECTURE.md, "Platforms").

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};

/// The descriptors a job carries: stdin, stdout, stderr and the status pipe.
pub(crate) const JOB_FDS: usize = 4;

/// No SIGPIPE for a peer gone (Linux's `MSG_NOSIGNAL`; a port sets `SO_NOSIGPIPE` on the
/// socket instead, on macOS).
#[cfg(target_os = "linux")]
const SEND_FLAGS: SendFlags = SendFlags::NOSIGNAL;
#[cfg(not(target_os = "linux"))]
const SEND_FLAGS: SendFlags = SendFlags::empty();

/// Descriptors close-on-exec as they arrive (Linux's `MSG_CMSG_CLOEXEC`; a port marks them
/// itself).
#[cfg(target_os = "linux")]
const RECEIVE_FLAGS: RecvFlags = RecvFlags::CMSG_CLOEXEC;
#[cfg(not(target_os = "linux"))]
const RECEIVE_FLAGS: RecvFlags = RecvFlags::empty();

/// Sends `bytes` as one message with `fds` attached (`SCM_RIGHTS`; at most a job's five).
pub(crate) fn send_with_fds(
    socket: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(JOB_FDS + 1))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        ancillary.push(SendAncillaryMessage::ScmRights(fds));
    }
    rustix::net::sendmsg(socket, &[IoSlice::new(bytes)], &mut ancillary, SEND_FLAGS)?;
    Ok(())
}

/// Receives one message into `buffer`, with the descriptors attached to it (close-on-exec).
pub(crate) fn recv_with_fds(
    socket: BorrowedFd<'_>,
    buffer: &mut [u8],
) -> std::io::Result<(rustix::net::RecvMsg, Vec<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(JOB_FDS + 1))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let received = rustix::net::recvmsg(
        socket,
        &mut [IoSliceMut::new(buffer)],
        &mut ancillary,
        RECEIVE_FLAGS,
    )?;
    let mut fds = Vec::new();
    for part in ancillary.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = part {
            fds.extend(rights);
        }
    }
    Ok((received, fds))
}
