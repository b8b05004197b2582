//! The environment commands get: the host's, minus its credentials.

use std::ffi::{OsStr, OsString};

/// Name fragments that mark a variable as a credential (matched case-insensitively).
const SECRET_NAME_PARTS: &[&str] = &["KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL"];

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
        let secret_values: Vec<&OsStr> = vars
            .iter()
            .filter(|(name, value)| {
                !value.is_empty() && self.host_secrets.iter().any(|s| OsStr::new(s) == name)
            })
            .map(|(_, value)| value.as_os_str())
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
                if SECRET_NAME_PARTS.iter().any(|part| upper.contains(part)) {
                    return false;
                }
                !secret_values.contains(&value.as_os_str())
            })
            .cloned()
            .collect();
        kept
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
}
