//! Short-lived helper processes of the host itself (the plugin checker) and the programs the
//! CLI helpers run (cargo for `hotsh dev`).

use super::process::{Pidfd, reaped, spawn_own};
use std::ffi::OsString;
use std::path::Path;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a helper left behind.
#[derive(Debug)]
pub(crate) struct HelperOutput {
    /// `None` when it did not finish in time (it was killed).
    pub(crate) status: Option<ExitStatus>,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
}

/// What a helper reads on its stdin.
pub(crate) enum HelperInput {
    /// Bytes, written to it on a thread of their own; they may be shared (`Bytes`): the
    /// caller's are not copied.
    Bytes(Box<dyn AsRef<[u8]> + Send>),
    /// An open file, which it reads itself: nothing is held or copied here.
    File(std::fs::File),
}

/// Runs this executable with `args` (`input` on its stdin, stdout and stderr captured),
/// killing it if it has not ended within `timeout`. Blocking.
pub(crate) fn run_helper(
    args: &[OsString],
    input: HelperInput,
    timeout: Duration,
) -> std::io::Result<HelperOutput> {
    let mut command = std::process::Command::new(super::process::own_executable());
    let (stdin, bytes) = match input {
        HelperInput::Bytes(bytes) => (Stdio::piped(), Some(bytes)),
        HelperInput::File(file) => (Stdio::from(file), None),
    };
    command.args(args).stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped());
    #[expect(clippy::disallowed_methods, reason = "the executor is where processes start")]
    let mut child = spawn_own(|| command.spawn(), |c| Some(c.id()))?;
    if let (Some(mut stdin), Some(bytes)) = (child.stdin.take(), bytes) {
        // A thread of its own: a helper that never reads must not block the caller.
        std::thread::spawn(move || {
            use std::io::Write as _;
            let _ = stdin.write_all((*bytes).as_ref());
        });
    }
    let stdout = read_in_background(child.stdout.take());
    let stderr = read_in_background(child.stderr.take());
    let finished = match Pidfd::open(child.id()) {
        Ok(pidfd) => {
            let ended = pidfd.wait_exit(timeout);
            if !ended {
                pidfd.signal(libc::SIGKILL);
            }
            ended
        }
        Err(_) => wait_by_polling(&mut child, timeout),
    };
    let status = child.wait();
    reaped(Some(child.id()));
    let status = status?;
    // A grandchild may hold the pipes open: take what arrived, without waiting for it.
    let collect = |rx: std::sync::mpsc::Receiver<Vec<u8>>| {
        rx.recv_timeout(Duration::from_secs(1)).unwrap_or_default()
    };
    Ok(HelperOutput {
        status: finished.then_some(status),
        stdout: collect(stdout),
        stderr: collect(stderr),
    })
}

/// Without pidfds (kernels before 5.3): polls the child every millisecond.
fn wait_by_polling(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = child.kill();
    false
}

fn read_in_background(
    pipe: Option<impl std::io::Read + Send + 'static>,
) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (send, receive) = std::sync::mpsc::channel();
    if let Some(mut pipe) = pipe {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = send.send(bytes);
        });
    } else {
        let _ = send.send(Vec::new());
    }
    receive
}

/// Starts a program of the user's (cargo, for `hotsh dev`) with the terminal's stdin and
/// stderr, and stdout piped to the caller.
pub(crate) fn spawn_tool(program: &Path, args: &[String], cwd: &Path) -> std::io::Result<Child> {
    #[expect(clippy::disallowed_methods, reason = "the executor is where processes start")]
    std::process::Command::new(program).args(args).current_dir(cwd).stdout(Stdio::piped()).spawn()
}

/// Starts this executable as an agent for `hotsh replay` to talk to: `args`, in `cwd`, with
/// `env` set and `env_remove` unset, stdin and stdout piped, stderr to `stderr`.
pub(crate) fn spawn_agent(
    args: &[OsString],
    cwd: &Path,
    env: &[(&str, OsString)],
    env_remove: &[&str],
    stderr: std::fs::File,
) -> std::io::Result<Child> {
    let mut command = std::process::Command::new(super::process::own_executable());
    command.args(args).current_dir(cwd);
    for (key, value) in env {
        command.env(key, value);
    }
    for key in env_remove {
        command.env_remove(key);
    }
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(stderr);
    #[expect(clippy::disallowed_methods, reason = "the executor is where processes start")]
    command.spawn()
}
