//! The environment commands get: the host's, minus its credentials.
//!
//! A variable is removed when (names compared case-insensitively):
//!
//! - its name contains `KEY`, `SECRET`, `TOKEN`, `PASSWORD`, `PASSWD` or `CREDENTIAL`;
//! - a word of its name (split at `_`) is `PAT`, `JWT`, `AUTH`, `DSN`, `WEBHOOK` or `COOKIE`
//!   (`GH_PAT`, `CI_JOB_JWT`, `NPM_CONFIG__AUTH`, `SENTRY_DSN`, `SLACK_WEBHOOK_URL`);
//! - its value is a URL that carries a password (`postgres://user:pw@host`,
//!   `redis://:pw@host`);
//! - it is one of the host's own secrets (the model keys), or its value contains the value of
//!   one of them (`AUTH_HEADER="Bearer <key>"`);
//! - it is on the configuration's `drop` list;
//!
//! unless it is on the configuration's `keep` list.

use std::ffi::{OsStr, OsString};

/// Takes this process's environment for the commands it will run (scrubbed by `policy`), and
/// removes everything the scrub drops from the process itself: from its environment, and
/// from the initial block the kernel shows as `/proc/<pid>/environ`, so that nothing that
/// reads the agent later (root can, whatever the dumpable flag says) finds a key there.
///
/// # Safety
///
/// Call while this process has one thread: the environment is changed.
pub(crate) unsafe fn take_for_commands(policy: &EnvPolicy) -> Vec<(OsString, OsString)> {
    let vars: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let kept = policy.scrub(vars.iter().cloned());
    let hidden: Vec<&OsString> = vars
        .iter()
        .map(|(name, _)| name)
        .filter(|name| !kept.iter().any(|(kept, _)| kept == *name))
        .collect();
    for name in &hidden {
        // SAFETY: the caller guarantees a single thread.
        unsafe { std::env::remove_var(name) };
    }
    if let Err(error) = super::process::wipe_initial_environment(&hidden) {
        tracing::warn!(%error, "cannot wipe the initial environment block; root could read the model keys in /proc");
    }
    kept
}

/// Name fragments that mark a variable as a credential (matched case-insensitively).
const SECRET_NAME_PARTS: &[&str] = &["KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL"];
/// Words of a name (split at `_`) that mark a variable as a credential.
const SECRET_NAME_WORDS: &[&str] = &["PAT", "JWT", "AUTH", "DSN", "WEBHOOK", "COOKIE"];
/// Secret values shorter than this are not looked for inside other values (too many false
/// matches).
const MIN_SECRET_LEN: usize = 8;

/// Which variables of the host's environment a command does not see.
#[derive(Debug, Clone, Default)]
pub(crate) struct EnvPolicy {
    /// Variables the host itself uses as secrets (model API keys): dropped, and so is any
    /// other variable holding the same value.
    pub(crate) host_secrets: Vec<String>,
    /// Names always kept, even when they look like credentials.
    pub(crate) keep: Vec<String>,
    /// Names always dropped.
    pub(crate) drop: Vec<String>,
}

impl EnvPolicy {
    pub(crate) fn scrub(
        &self,
        vars: impl Iterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        let vars: Vec<_> = vars.collect();
        let secret_values: Vec<&[u8]> = vars
            .iter()
            .filter(|(name, value)| {
                !value.is_empty() && self.host_secrets.iter().any(|s| OsStr::new(s) == name)
            })
            .map(|(_, value)| value.as_encoded_bytes())
            .collect();
        let kept: Vec<(OsString, OsString)> = vars
            .iter()
            .filter(|(name, value)| {
                let name = name.to_string_lossy();
                if self.keep.iter().any(|k| *k == name) {
                    return true;
                }
                if self.drop.iter().any(|d| *d == name)
                    || self.host_secrets.iter().any(|s| *s == name)
                {
                    return false;
                }
                let upper = name.to_ascii_uppercase();
                if SECRET_NAME_PARTS.iter().any(|part| upper.contains(part))
                    || upper.split('_').any(|word| SECRET_NAME_WORDS.contains(&word))
                {
                    return false;
                }
                let value = value.as_encoded_bytes();
                !url_with_password(value)
                    && !secret_values.iter().any(|secret| contains_secret(value, secret))
            })
            .cloned()
            .collect();
        kept
    }
}

/// Whether `value` holds (or is) a host secret.
fn contains_secret(value: &[u8], secret: &[u8]) -> bool {
    value == secret
        || (secret.len() >= MIN_SECRET_LEN && value.windows(secret.len()).any(|w| w == secret))
}

/// Whether `value` is a URL whose authority carries a password: `scheme://user:pw@host…`.
fn url_with_password(value: &[u8]) -> bool {
    let Some(at) = value.windows(3).position(|w| w == b"://") else {
        return false;
    };
    let rest = &value[at + 3..];
    let authority_end = rest.iter().position(|&b| b == b'/' || b == b'?' || b == b'#');
    let authority = &rest[..authority_end.unwrap_or(rest.len())];
    match authority.iter().rposition(|&b| b == b'@') {
        Some(at) => authority[..at].contains(&b':'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Iterator<Item = (OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect::<Vec<_>>()
            .into_iter()
    }

    fn names(kept: &[(OsString, OsString)]) -> Vec<String> {
        kept.iter().map(|(k, _)| k.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn credentials_and_copies_of_host_secrets_are_dropped() {
        let policy = EnvPolicy {
            host_secrets: vec!["DEEPSEEK_API_KEY".into()],
            keep: vec!["SSH_KEY_PATH".into()],
            drop: vec!["CORP_PROXY".into()],
        };
        let kept = policy.scrub(vars(&[
            ("PATH", "/usr/bin"),
            ("DEEPSEEK_API_KEY", "sk-1"),
            ("COPY_OF_IT", "sk-1"),
            ("GITHUB_TOKEN", "ghp"),
            ("db_password", "x"),
            ("AWS_SECRET_ACCESS_KEY", "y"),
            ("SSH_KEY_PATH", "/k"),
            ("CORP_PROXY", "http://p"),
            ("HOME", "/root"),
        ]));
        assert_eq!(names(&kept), ["PATH", "SSH_KEY_PATH", "HOME"]);
    }

    #[test]
    fn urls_with_passwords_dsns_webhooks_and_values_holding_a_key_are_dropped() {
        let policy =
            EnvPolicy { host_secrets: vec!["HOTSH_API_KEY".into()], ..EnvPolicy::default() };
        let kept = policy.scrub(vars(&[
            ("DATABASE_URL", "postgres://app:hunter2@db/prod"),
            ("REDIS_URL", "redis://:pw@cache:6379"),
            ("SENTRY_DSN", "https://abc@o1.ingest.sentry.io/1"),
            ("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T/B/x"),
            ("NPM_CONFIG__AUTH", "dXNlcjpwYXNz"),
            ("CI_JOB_JWT", "eyJ"),
            ("GH_PAT", "ghp_x"),
            ("HOTSH_API_KEY", "sk-0123456789"),
            ("AUTH_HEADER", "Bearer sk-0123456789"),
            ("HEADER_COPY", "Bearer sk-0123456789"),
            ("GIT_AUTHOR_NAME", "Ada"),
            ("HOMEPAGE", "https://user@example.org/path"),
            ("PROXY", "http://proxy:3128"),
            ("PATH", "/usr/bin"),
        ]));
        assert_eq!(names(&kept), ["GIT_AUTHOR_NAME", "HOMEPAGE", "PROXY", "PATH"]);
    }
}
