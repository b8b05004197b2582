//! Sessions' sandbox environments: one long-lived sandbox per (session, policy) with a
//! command supervisor of its own (`supervisor.rs`), so that a confined command costs a fork
//! and its shim's work instead of setting its sandbox up (issue "sandbox-fast";
//! ARCHITECTURE.md, "Sandbox environments"). Under bwrap the supervisor runs inside a bwrap
//! started for it; under Landlock it confines itself (mount namespace, read-only paths,
//! Landlock, the socket filter, no capabilities) and every shim it forks inherits that.
//!
//! An environment is made for exactly one policy: the mounts made at its start. It is
//! used again only while the policy a command gets is the same (a `.git` made since, or a
//! mode change, gives another policy) and every path the policy mounts is still the
//! directory it was then (same device and inode: a folder renamed away and made again is
//! another folder). Otherwise the command gets a fresh environment, and the old one takes no
//! more jobs; what it still runs (a background task) goes on to its end, then it exits. A
//! call run under an escalation the user granted for it gets a sandbox of its own, as before.
//!
//! An environment takes no more jobs once it has been idle for `keep` (the host checks now
//! and then, and whenever a command starts), when its session closes, and when the host
//! ends. At most `max` are alive at once across sessions (open, or winding down with a task
//! still running): at the bound, the one used least recently stops taking jobs and the
//! command that wanted a new one gets a sandbox of its own; after the host's end began, none
//! starts. One whose supervisor died (a command may kill it) is ended whole (bwrap's init
//! killed; under Landlock its shims come to the host, which kills them as strangers), so
//! nothing of it survives; the next command gets a fresh one.

use super::supervisor::Supervisor;
use crate::sandbox::Policy;
use crate::sync::lock;
use std::os::unix::fs::MetadataExt as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Environments one session keeps open at once (two: switching between two modes, or from
/// before a `.git` appeared to after, does not start one each time); a third retires the one
/// used least recently.
const PER_SESSION: usize = 2;

/// The device and inode of each path a policy mounts, in its order; `None` for one missing.
type Identity = Vec<Option<(u64, u64)>>;

fn identity(policy: &Policy) -> Identity {
    policy
        .writable
        .iter()
        .chain(&policy.pinned)
        .chain(&policy.read_only)
        .chain(&policy.hidden)
        .map(|path| std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino())))
        .collect()
}

/// One session's environment under one policy.
#[derive(Debug)]
pub(super) struct Environment {
    owner: String,
    policy: Policy,
    identity: Identity,
    pub(super) supervisor: Supervisor,
    last_used: Mutex<Instant>,
}

/// Every open environment of the host, and those winding down.
#[derive(Debug)]
pub(super) struct Environments {
    /// How long an idle environment stays; zero: none is kept (a sandbox per command).
    keep: Duration,
    /// The most alive at once, open and winding down.
    max: usize,
    open: Mutex<Vec<Arc<Environment>>>,
    /// Taking no more jobs; reaped once their supervisor has exited.
    draining: Mutex<Vec<Arc<Environment>>>,
    /// The host is ending: no environment starts any more.
    closed: AtomicBool,
}

impl Environments {
    pub(super) fn new(keep: Duration, max: usize) -> Self {
        Self {
            keep,
            max: max.max(1),
            open: Mutex::default(),
            draining: Mutex::default(),
            closed: AtomicBool::new(false),
        }
    }

    /// Whether confined commands run in environments here.
    pub(super) fn serve(&self) -> bool {
        !self.keep.is_zero()
    }

    /// The environment for `owner`'s commands under `policy`: the open one if it still holds
    /// what the policy mounts, else a new one (started by its first job or by
    /// [`Supervisor::warm_up`]); none once the host is ending, or while `max` are alive (the
    /// least recently used then stops taking jobs, to make room for a later command).
    pub(super) fn get(
        &self,
        base: &Supervisor,
        owner: &str,
        policy: &Policy,
    ) -> Option<Arc<Environment>> {
        if self.closed.load(Ordering::SeqCst) {
            return None;
        }
        self.reap();
        let now = identity(policy);
        let mut open = lock(&self.open);
        let mine = |env: &Arc<Environment>| env.owner == owner && env.policy == *policy;
        if let Some(at) = open.iter().position(mine) {
            let env = &open[at];
            // A supervisor that died is replaced by its next job (`Supervisor::try_start` ends
            // what is left of it first).
            if env.identity == now {
                *lock(&env.last_used) = Instant::now();
                return Some(Arc::clone(env));
            }
            tracing::debug!(owner, "a sandbox environment no longer matches its policy's paths");
            let stale = open.remove(at);
            self.retire(stale);
        }
        while open.iter().filter(|env| env.owner == owner).count() >= PER_SESSION {
            let oldest = open
                .iter()
                .enumerate()
                .filter(|(_, env)| env.owner == owner)
                .min_by_key(|(_, env)| *lock(&env.last_used))
                .map(|(at, _)| at);
            let Some(at) = oldest else { break };
            let old = open.remove(at);
            self.retire(old);
        }
        if open.len() + lock(&self.draining).len() >= self.max {
            // Room for a later command: the least recently used one takes no more jobs (it
            // ends once what it runs has), and this command gets a sandbox of its own.
            let oldest = open
                .iter()
                .enumerate()
                .min_by_key(|(_, env)| *lock(&env.last_used))
                .map(|(at, _)| at);
            if let Some(at) = oldest {
                tracing::debug!(
                    max = self.max,
                    "sandbox environments at their bound; closing the least recently used"
                );
                let old = open.remove(at);
                self.retire(old);
            }
            return None;
        }
        let env = Arc::new(Environment {
            owner: owner.to_owned(),
            policy: policy.clone(),
            identity: now,
            supervisor: base.in_environment(policy.clone()),
            last_used: Mutex::new(Instant::now()),
        });
        open.push(Arc::clone(&env));
        Some(env)
    }

    /// `env` could not be started: it is forgotten (the next command tries a new one).
    pub(super) fn discard(&self, env: &Arc<Environment>) {
        lock(&self.open).retain(|open| !Arc::ptr_eq(open, env));
    }

    /// The environments of a session that closes take no more jobs.
    pub(super) fn retire_owner(&self, owner: &str) {
        let retired: Vec<_> = {
            let mut open = lock(&self.open);
            let (theirs, others) = open.drain(..).partition(|env| env.owner == owner);
            *open = others;
            theirs
        };
        for env in retired {
            self.retire(env);
        }
    }

    /// Environments idle for longer than `keep` take no more jobs; those that have wound down
    /// are reaped.
    pub(super) fn retire_idle(&self) {
        let retired: Vec<_> = {
            let mut open = lock(&self.open);
            let (idle, busy) =
                open.drain(..).partition(|env| lock(&env.last_used).elapsed() >= self.keep);
            *open = busy;
            idle
        };
        for env in retired {
            tracing::debug!(owner = env.owner, "a sandbox environment was idle; closing it");
            self.retire(env);
        }
        self.reap();
    }

    /// How often [`Self::retire_idle`] should run.
    pub(super) fn check_every(&self) -> Option<Duration> {
        (!self.keep.is_zero())
            .then(|| (self.keep / 4).clamp(Duration::from_secs(1), Duration::from_secs(30)))
    }

    /// Ends them all (the host is going): each stops taking jobs at once, then each is waited
    /// for (`within`) and killed if it has not exited.
    pub(super) fn close_all(&self, within: Duration) {
        self.closed.store(true, Ordering::SeqCst);
        let all: Vec<_> =
            lock(&self.open).drain(..).chain(lock(&self.draining).drain(..)).collect();
        for env in &all {
            env.supervisor.stop_taking_jobs();
        }
        for env in &all {
            env.supervisor.close(within);
        }
    }

    fn retire(&self, env: Arc<Environment>) {
        env.supervisor.stop_taking_jobs();
        lock(&self.draining).push(env);
    }

    fn reap(&self) {
        lock(&self.draining).retain(|env| !env.supervisor.ended());
    }

    /// The paths of the open environments' policies' writable roots, for tests.
    #[cfg(test)]
    pub(super) fn open_roots(&self) -> Vec<std::path::PathBuf> {
        lock(&self.open).iter().flat_map(|env| env.policy.writable.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn policy(root: &std::path::Path) -> Policy {
        Policy {
            bwrap: Some(PathBuf::from("/usr/bin/bwrap")),
            rules: hotsh_core::executor::Policy {
                writable: vec![root.to_owned()],
                ..Default::default()
            },
        }
    }

    #[test]
    fn an_environment_is_kept_only_while_its_paths_are_the_same_folders() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("work");
        std::fs::create_dir(&root).expect("folder");
        let environments = Environments::new(Duration::from_secs(60), 8);
        let base = Supervisor::new(-1);
        let first = environments.get(&base, "s", &policy(&root)).expect("room");
        let again = environments.get(&base, "s", &policy(&root)).expect("room");
        assert!(Arc::ptr_eq(&first, &again), "the same policy and folders: the same environment");
        let other = environments.get(&base, "t", &policy(&root)).expect("room");
        assert!(!Arc::ptr_eq(&first, &other), "another session: another environment");
        std::fs::rename(&root, dir.path().join("moved")).expect("rename");
        std::fs::create_dir(&root).expect("a new folder of the old name");
        let fresh = environments.get(&base, "s", &policy(&root)).expect("room");
        assert!(!Arc::ptr_eq(&first, &fresh), "a folder made again is another folder");
        assert_eq!(lock(&environments.draining).len(), 1, "the stale one takes no more jobs");
    }

    #[test]
    fn a_session_keeps_two_environments_and_retires_them_when_it_closes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let roots: Vec<PathBuf> = (0..3)
            .map(|n| {
                let root = dir.path().join(n.to_string());
                std::fs::create_dir(&root).expect("folder");
                root
            })
            .collect();
        let environments = Environments::new(Duration::from_secs(60), 8);
        let base = Supervisor::new(-1);
        for root in &roots {
            environments.get(&base, "s", &policy(root));
        }
        assert_eq!(environments.open_roots(), roots[1..].to_vec(), "the oldest went");
        environments.retire_owner("s");
        assert!(environments.open_roots().is_empty());
        assert_eq!(lock(&environments.draining).len(), 3);
    }

    #[test]
    fn at_the_bound_the_least_recently_used_goes_and_none_starts_once_closed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("work");
        std::fs::create_dir(&root).expect("folder");
        let environments = Environments::new(Duration::from_secs(60), 2);
        let base = Supervisor::new(-1);
        let a = environments.get(&base, "a", &policy(&root)).expect("room");
        environments.get(&base, "b", &policy(&root)).expect("room");
        assert!(environments.get(&base, "c", &policy(&root)).is_none(), "at the bound");
        assert_eq!(lock(&environments.open).len(), 1, "the least recently used went");
        assert!(Arc::ptr_eq(&lock(&environments.draining)[0], &a), "a was used least recently");
        environments.close_all(Duration::from_millis(10));
        assert!(environments.get(&base, "d", &policy(&root)).is_none(), "the host is ending");
    }
}
