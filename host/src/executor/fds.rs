//! Passing descriptors over a Unix socket (`SCM_RIGHTS`): how the host hands a job's pipes
//! to the command supervisor, and the supervisor to a shim. A leaf the supervisor and the
//! shim both use.

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};

/// The descriptors a job carries: stdin, stdout, stderr and the status pipe.
pub(super) const JOB_FDS: usize = 4;

/// Sends `bytes` as one message with `fds` attached (`SCM_RIGHTS`; at most a job's five).
pub(super) fn send_with_fds(
    socket: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(JOB_FDS + 1))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        ancillary.push(SendAncillaryMessage::ScmRights(fds));
    }
    rustix::net::sendmsg(socket, &[IoSlice::new(bytes)], &mut ancillary, SendFlags::NOSIGNAL)?;
    Ok(())
}

/// Receives one message into `buffer`, with the descriptors attached to it (close-on-exec).
pub(super) fn recv_with_fds(
    socket: BorrowedFd<'_>,
    buffer: &mut [u8],
) -> std::io::Result<(rustix::net::RecvMsg, Vec<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(JOB_FDS + 1))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let received = rustix::net::recvmsg(
        socket,
        &mut [IoSliceMut::new(buffer)],
        &mut ancillary,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for part in ancillary.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = part {
            fds.extend(rights);
        }
    }
    Ok((received, fds))
}
