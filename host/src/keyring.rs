//! The Secret Service keyring (GNOME Keyring, KWallet, KeePassXC…), where `hotsh login
//! --keyring` keeps the model key instead of the file: one item in the default collection,
//! labelled `hotsh model key`, with the attribute `application = hotsh`. `key.toml` then says
//! which provider the key is for and that the key itself is in the keyring.
//!
//! The keyring is asked over the session bus (D-Bus), on a thread of its own with a
//! runtime of its own (callers are plain functions, some inside the agent's runtime), and
//! never for longer than [`TIMEOUT`]: a bus that does not answer, or a keyring that waits for a
//! password nobody can type, is an error that says so. Confined commands cannot reach it:
//! the sandbox's gate refuses every Unix socket outside the session's writable roots, the
//! session bus among them.

use std::collections::HashMap;
use std::time::Duration;

/// How long one question to the keyring may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The item's attributes, which find it again.
const APPLICATION: (&str, &str) = ("application", "hotsh");

/// The item's label, as a keyring manager lists it.
const LABEL: &str = "hotsh model key";

/// Stores `key`, replacing hotsh's item if there is one.
pub(crate) fn store(key: &str) -> Result<(), String> {
    let key = key.to_owned();
    ask(move |service| async move {
        let collection = service.get_default_collection().await.map_err(say)?;
        if collection.is_locked().await.map_err(say)? {
            collection.unlock().await.map_err(say)?;
        }
        let attributes = HashMap::from([APPLICATION]);
        collection
            .create_item(LABEL, attributes, key.as_bytes(), true, "text/plain")
            .await
            .map_err(say)?;
        Ok(())
    })
}

/// The key stored, or why it cannot be had.
pub(crate) fn fetch() -> Result<String, String> {
    ask(|service| async move {
        let found = service.search_items(HashMap::from([APPLICATION])).await.map_err(say)?;
        let item = match (found.unlocked.first(), found.locked.first()) {
            (Some(item), _) => item,
            (None, Some(item)) => {
                item.unlock().await.map_err(say)?;
                item
            }
            (None, None) => return Err("it holds no key of hotsh's".to_owned()),
        };
        let secret = item.get_secret().await.map_err(say)?;
        String::from_utf8(secret).map_err(|_| "the key it holds is not text".to_owned())
    })
}

/// Removes hotsh's items; how many there were.
pub(crate) fn delete() -> Result<usize, String> {
    ask(|service| async move {
        let found = service.search_items(HashMap::from([APPLICATION])).await.map_err(say)?;
        let items: Vec<_> = found.unlocked.iter().chain(&found.locked).collect();
        for item in &items {
            item.delete().await.map_err(say)?;
        }
        Ok(items.len())
    })
}

fn say(error: secret_service::Error) -> String {
    error.to_string()
}

/// Runs `question` against the keyring on a thread of its own, at most [`TIMEOUT`].
fn ask<T, F, Fut>(question: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce(secret_service::SecretService<'static>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, String>>,
{
    let (answer, answered) = std::sync::mpsc::channel();
    let asking = std::thread::Builder::new().name("hotsh-keyring".to_owned()).spawn(move || {
        let result = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| error.to_string())
            .and_then(|runtime| {
                runtime.block_on(async move {
                    let service =
                        secret_service::SecretService::connect(secret_service::EncryptionType::Dh)
                            .await
                            .map_err(|error| {
                                format!("no Secret Service answers on the session bus ({error})")
                            })?;
                    question(service).await
                })
            });
        let _ = answer.send(result);
    });
    if let Err(error) = asking {
        return Err(format!("cannot ask the keyring: {error}"));
    }
    match answered.recv_timeout(TIMEOUT) {
        Ok(result) => result,
        Err(_) => Err(format!(
            "the keyring did not answer within {} s (locked, waiting for a password?)",
            TIMEOUT.as_secs()
        )),
    }
}
