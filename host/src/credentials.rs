//! The model key `hotsh login` stores: one small TOML file, 0600, in a 0700 folder of hotsh's
//! configuration directory (`$XDG_CONFIG_HOME/hotsh/credentials/key.toml`, else
//! `~/.config/hotsh/credentials/key.toml`). Confined commands never see it: the sandbox
//! covers that folder with an empty, read-only one (`sandbox/protect.rs`), as it keeps the
//! agent's own environment from them.
//!
//! A key in the environment wins over the stored one, as before there was one: the stored key
//! only fills in what the environment leaves unset (`Stored::var`).
//!
//! With `hotsh login --keyring` the key itself goes to the Secret Service keyring
//! (`keyring.rs`) and the file says so (`keyring = true`, no `key`): it is read from there at
//! each start.

use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The providers `hotsh login` offers, by profile name: (name, what to call it, its base URL).
pub(crate) const PROVIDERS: &[(&str, &str, &str)] = &[
    ("deepseek", "DeepSeek", "https://api.deepseek.com"),
    ("openai", "OpenAI", "https://api.openai.com/v1"),
];

/// What `hotsh login` stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Stored {
    /// `deepseek`, `openai`, or `other` (an OpenAI-compatible server at `base_url`).
    pub(crate) provider: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) base_url: Option<String>,
    /// The model to ask, for `other`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
    /// The key; empty in the file when it is kept in the keyring.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) key: String,
    /// The key is in the Secret Service keyring, not in the file.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) keyring: bool,
}

impl Stored {
    /// The environment variable `name` as the stored key sets it, when the environment does
    /// not: the provider's own key variable (`DEEPSEEK_API_KEY`, `OPENAI_API_KEY`: sent to its
    /// own host only), or for another server `HOTSH_API_KEY`, `HOTSH_BASE_URL` and
    /// `HOTSH_MODEL`, together or not at all (a stored key never goes to a server the user
    /// chose otherwise).
    pub(crate) fn var(&self, name: &str, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
        match self.provider.as_str() {
            "deepseek" => (name == "DEEPSEEK_API_KEY").then(|| self.key.clone()),
            "openai" => (name == "OPENAI_API_KEY").then(|| self.key.clone()),
            _ => {
                // Another server: only when nothing else names a model or a server.
                if ["HOTSH_MODEL", "HOTSH_BASE_URL", "HOTSH_API_KEY"]
                    .iter()
                    .any(|var| env(var).is_some_and(|v| !v.trim().is_empty()))
                {
                    return None;
                }
                match name {
                    "HOTSH_API_KEY" => Some(self.key.clone()),
                    "HOTSH_BASE_URL" => self.base_url.clone(),
                    "HOTSH_MODEL" => self.model.as_ref().map(|model| format!("openai:{model}")),
                    _ => None,
                }
            }
        }
    }

    /// The provider in words.
    pub(crate) fn describe(&self) -> String {
        match PROVIDERS.iter().find(|(name, _, _)| *name == self.provider) {
            Some((_, label, _)) => (*label).to_owned(),
            None => format!(
                "{} at {}",
                self.model.as_deref().unwrap_or("a model"),
                self.base_url.as_deref().unwrap_or("?")
            ),
        }
    }
}

/// Why the stored key cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CredentialsError {
    #[error(
        "{path} can be read by others (mode {mode:o}): hotsh does not use a key others can read; \
         run `chmod 600 {path}` (and check who read it), or `hotsh logout` and `hotsh login` again"
    )]
    Exposed { path: String, mode: u32 },
    #[error("{path} is not a regular file: remove it, then run `hotsh login`")]
    NotAFile { path: String },
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path} is not valid ({reason}): run `hotsh login` again")]
    Invalid { path: String, reason: String },
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },
    #[error("no configuration directory: neither XDG_CONFIG_HOME nor HOME is set")]
    NoDir,
    #[error(
        "the key `hotsh login --keyring` stored cannot be read: {reason}; unlock the keyring, \
         or run `hotsh login` again"
    )]
    Keyring { reason: String },
}

/// The process's environment with the stored key filling in what it leaves unset
/// ([`Stored::var`]); a stored key that cannot be used is said (once, in the agent's log) and
/// left out.
pub(crate) fn environment() -> impl Fn(&str) -> Option<String> {
    environment_with(&load())
}

/// What [`load`] gives: the stored key and its file, if there is one.
pub(crate) type Loaded = Result<Option<(Stored, PathBuf)>, CredentialsError>;

/// [`environment`] with the stored key already loaded (read once, from the keyring too).
pub(crate) fn environment_with(loaded: &Loaded) -> impl Fn(&str) -> Option<String> + use<> {
    let process = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let stored = match loaded {
        Ok(stored) => stored.as_ref().map(|(stored, _)| stored.clone()),
        Err(error) => {
            tracing::warn!("the key `hotsh login` stored is not used: {error}");
            None
        }
    };
    move |name: &str| {
        process(name).or_else(|| stored.as_ref().and_then(|stored| stored.var(name, &process)))
    }
}

/// The folder the key is kept in (hidden from confined commands).
pub(crate) fn dir() -> Option<PathBuf> {
    Some(crate::config::config_dir()?.join("credentials"))
}

/// Every folder a key of this user's may be kept in, whichever environment a later hotsh
/// has: what the sandbox hides.
pub(crate) fn every_dir() -> Vec<PathBuf> {
    crate::config::every_config_dir().into_iter().map(|dir| dir.join("credentials")).collect()
}

/// The file in `dir`.
fn file_in(dir: &Path) -> PathBuf {
    dir.join("key.toml")
}

/// The stored key, if there is one; refused when others can read it.
pub(crate) fn load() -> Loaded {
    let Some(dir) = dir() else { return Ok(None) };
    load_from(&dir)
}

/// The stored key from `dir`'s file, or from the keyring when the file says it is there.
pub(crate) fn load_from(dir: &Path) -> Result<Option<(Stored, PathBuf)>, CredentialsError> {
    let Some((mut stored, path)) = read_file(dir)? else { return Ok(None) };
    let shown = path.display().to_string();
    if stored.keyring {
        let key = crate::keyring::fetch().map_err(|reason| CredentialsError::Keyring { reason })?;
        stored.key = check_key(&key).map_err(|reason| CredentialsError::Keyring {
            reason: format!("the keyring's key is not usable: {reason}"),
        })?;
    } else {
        check_key(&stored.key)
            .map_err(|reason| CredentialsError::Invalid { path: shown, reason })?;
    }
    Ok(Some((stored, path)))
}

/// `dir`'s file as it is (the key left in the keyring when it is there).
fn read_file(dir: &Path) -> Result<Option<(Stored, PathBuf)>, CredentialsError> {
    let path = file_in(dir);
    let shown = path.display().to_string();
    use crate::nofollow::NotRegular;
    let file = match crate::nofollow::open_regular(&path, false) {
        Ok(file) => file,
        Err(NotRegular::Io(error)) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        Err(NotRegular::Link | NotRegular::Kind(_)) => {
            return Err(CredentialsError::NotAFile { path: shown });
        }
        Err(NotRegular::Io(source)) => return Err(CredentialsError::Read { path: shown, source }),
    };
    let meta =
        file.metadata().map_err(|source| CredentialsError::Read { path: shown.clone(), source })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(CredentialsError::Exposed { path: shown, mode });
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, 64 << 10), &mut text)
        .map_err(|source| CredentialsError::Read { path: shown.clone(), source })?;
    let stored: Stored = toml::from_str(&text).map_err(|error| CredentialsError::Invalid {
        path: shown.clone(),
        reason: error.to_string(),
    })?;
    Ok(Some((stored, path)))
}

/// A key as typed, trimmed; refused when empty or holding whitespace or control characters
/// inside (a pasted key with a line break, say).
pub(crate) fn check_key(key: &str) -> Result<String, String> {
    let key = key.trim();
    if key.is_empty() {
        return Err("the key is empty".to_owned());
    }
    if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the key holds spaces, line breaks or control characters".to_owned());
    }
    Ok(key.to_owned())
}

/// Stores `stored` (its folder made 0700, the file 0600, written whole then renamed into
/// place: an interrupted write leaves the previous key or none, never half of one).
pub(crate) fn save(stored: &Stored) -> Result<PathBuf, CredentialsError> {
    let dir = dir().ok_or(CredentialsError::NoDir)?;
    save_in(&dir, stored)
}

pub(crate) fn save_in(dir: &Path, stored: &Stored) -> Result<PathBuf, CredentialsError> {
    let path = file_in(dir);
    let error = |source| CredentialsError::Write { path: path.display().to_string(), source };
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(error)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(error)?;
    let text = toml::to_string(stored).map_err(|e| error(std::io::Error::other(e)))?;
    let staged = dir.join(format!(".key.toml.{}", std::process::id()));
    let _ = std::fs::remove_file(&staged);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&staged)
        .and_then(|mut file| {
            file.write_all(text.as_bytes())?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&staged, &path));
    if let Err(source) = written {
        let _ = std::fs::remove_file(&staged);
        return Err(error(source));
    }
    Ok(path)
}

/// What [`remove`] removed.
#[derive(Debug)]
pub(crate) struct Removed {
    /// The file, if there was one.
    pub(crate) file: Option<PathBuf>,
    /// The keyring's items of hotsh's, when the file said the key was there: how many, or why
    /// they could not be removed.
    pub(crate) keyring: Option<Result<usize, String>>,
}

/// Removes the stored key: the file, and the keyring's item when the key was there (a keyring
/// that does not answer leaves its item, which is said; the file goes anyway, so hotsh no
/// longer uses the key).
pub(crate) fn remove() -> Result<Removed, CredentialsError> {
    let Some(dir) = dir() else { return Ok(Removed { file: None, keyring: None }) };
    let in_keyring = matches!(read_file(&dir), Ok(Some((stored, _))) if stored.keyring);
    let keyring = in_keyring.then(crate::keyring::delete);
    let path = file_in(&dir);
    let file = match std::fs::remove_file(&path) {
        Ok(()) => Some(path),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(CredentialsError::Write { path: path.display().to_string(), source });
        }
    };
    Ok(Removed { file, keyring })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn a_key_is_trimmed_and_refused_with_inner_whitespace_or_empty() {
        assert_eq!(check_key("  sk-abc \n").unwrap(), "sk-abc");
        assert!(check_key("   ").unwrap_err().contains("empty"));
        assert!(check_key("sk-a\nsk-b").unwrap_err().contains("line breaks"));
        assert!(check_key("sk a").is_err());
    }

    #[test]
    fn a_stored_key_is_0600_in_a_0700_folder_and_refused_when_others_can_read_it() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("credentials");
        let stored = Stored {
            provider: "deepseek".into(),
            base_url: None,
            model: None,
            key: "sk-1".into(),
            keyring: false,
        };
        let path = save_in(&folder, &stored).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&folder), mode(&path)), (0o700, 0o600));
        assert_eq!(load_from(&folder).unwrap().unwrap().0, stored);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let refused = load_from(&folder).unwrap_err().to_string();
        assert!(refused.contains("chmod 600"), "{refused}");
        // A link in the file's place is not followed (to a key file elsewhere, say).
        let elsewhere = dir.path().join("elsewhere.toml");
        std::fs::rename(&path, &elsewhere).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        let refused = load_from(&folder).unwrap_err().to_string();
        assert!(refused.contains("is not a regular file"), "{refused}");
    }

    #[test]
    fn the_environment_wins_and_another_servers_key_goes_only_with_its_server() {
        let other = Stored {
            provider: "other".into(),
            base_url: Some("http://127.0.0.1:9/v1".into()),
            model: Some("m".into()),
            key: "sk-o".into(),
            keyring: false,
        };
        let empty = |_: &str| None;
        assert_eq!(other.var("HOTSH_MODEL", &empty).as_deref(), Some("openai:m"));
        assert_eq!(other.var("HOTSH_API_KEY", &empty).as_deref(), Some("sk-o"));
        let named = |name: &str| (name == "HOTSH_MODEL").then(|| "deepseek".to_owned());
        assert_eq!(other.var("HOTSH_API_KEY", &named), None);
        let deepseek = Stored {
            provider: "deepseek".into(),
            base_url: None,
            model: None,
            key: "sk-d".into(),
            keyring: false,
        };
        assert_eq!(deepseek.var("DEEPSEEK_API_KEY", &empty).as_deref(), Some("sk-d"));
        assert_eq!(deepseek.var("HOTSH_API_KEY", &empty), None);
    }
}
