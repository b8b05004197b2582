//! `hotsh login`, `hotsh login --status` and `hotsh logout`: the model key kept for the user
//! (`credentials.rs`), asked for in a terminal, the key never echoed nor printed.

use crate::credentials::{self, PROVIDERS, Stored};
use crate::term::out;
use std::io::{BufRead as _, Write as _};
use std::process::ExitCode;

/// How long the key's check may take.
const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `hotsh login`: asks which provider and the key, checks the key with one request when the
/// network allows, and stores it (the key itself in the Secret Service keyring with
/// `keyring`). Nothing is stored unless all of it went well.
pub(crate) fn login(keyring: bool) -> anyhow::Result<ExitCode> {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut ask = |question: &str| -> anyhow::Result<String> {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(question.as_bytes())?;
        stdout.flush()?;
        match lines.next() {
            Some(line) => Ok(line?.trim().to_owned()),
            None => anyhow::bail!("no answer (the input ended): nothing was stored"),
        }
    };
    out("Which model provider is the key for?");
    for (at, (_, label, url)) in PROVIDERS.iter().enumerate() {
        out(&format!("  {}) {label} ({url})", at + 1));
    }
    let other = PROVIDERS.len() + 1;
    out(&format!("  {other}) Another OpenAI-compatible server"));
    let choice = ask(&format!("Choose 1 to {other} [1]: "))?;
    let choice = if choice.is_empty() { 1 } else { choice.parse::<usize>().unwrap_or(0) };
    let (provider, base_url, model) = match choice {
        n if (1..other).contains(&n) => {
            let (name, _, url) = PROVIDERS[n - 1];
            (name.to_owned(), url.to_owned(), None)
        }
        n if n == other => {
            let url = ask("Its base URL (as https://host/v1): ")?;
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                anyhow::bail!("`{url}` is not an http(s) URL: nothing was stored");
            }
            let model = ask("The model to ask (its name on that server): ")?;
            if model.is_empty() {
                anyhow::bail!("no model named: nothing was stored");
            }
            ("other".to_owned(), url.trim_end_matches('/').to_owned(), Some(model))
        }
        _ => anyhow::bail!("not one of the choices: nothing was stored"),
    };
    // From the terminal itself, not echoed.
    let typed = rpassword::prompt_password("The API key (it is not shown as you type): ")?;
    let key = credentials::check_key(&typed)
        .map_err(|why| anyhow::anyhow!("{why}: nothing was stored"))?;
    match check(&base_url, &key) {
        Checked::Works => out("The provider accepted the key."),
        Checked::Refused(status) => anyhow::bail!(
            "the provider refused the key ({status} from {base_url}/models): nothing was stored"
        ),
        Checked::Unknown(why) => out(&format!(
            "The key could not be checked ({why}); it is stored anyway: the first prompt will say if it is wrong."
        )),
    }
    let base_url = (provider == "other").then(|| base_url.clone());
    if keyring {
        // The keyring first: the file that points at it is written only once it holds the key,
        // and the item goes again if the file cannot be written.
        crate::keyring::store(&key)
            .map_err(|why| anyhow::anyhow!("the keyring did not take the key: {why}; nothing was stored (`hotsh login` without --keyring keeps it in a file)"))?;
        let stored = Stored { base_url, provider, model, key: String::new(), keyring: true };
        let path = credentials::save(&stored).inspect_err(|_| {
            let _ = crate::keyring::delete();
        })?;
        out(&format!(
            "Stored for {} in your keyring (Secret Service); {} says so. Commands hotsh runs \
             cannot reach either. A key in the environment still wins. `hotsh logout` removes it.",
            stored.describe(),
            path.display()
        ));
        return Ok(ExitCode::SUCCESS);
    }
    let stored = Stored { base_url, provider, model, key, keyring: false };
    let path = credentials::save(&stored)?;
    out(&format!(
        "Stored for {} in {} (readable by you only; commands hotsh runs cannot read it). \
         A key in the environment still wins. `hotsh logout` removes it.",
        stored.describe(),
        path.display()
    ));
    Ok(ExitCode::SUCCESS)
}

/// What the provider said of the key.
enum Checked {
    Works,
    /// It answered 401 or 403.
    Refused(reqwest::StatusCode),
    /// It could not be asked, or answered something else: why.
    Unknown(String),
}

/// Asks `base_url`'s model list with `key`: the cheapest request every OpenAI-compatible
/// server answers.
fn check(base_url: &str, key: &str) -> Checked {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return Checked::Unknown(error.to_string()),
    };
    runtime.block_on(async {
        let client = match crate::http::client(|builder| builder.timeout(CHECK_TIMEOUT)) {
            Ok(client) => client,
            Err(error) => return Checked::Unknown(error.to_string()),
        };
        match client.get(format!("{base_url}/models")).bearer_auth(key).send().await {
            Ok(response) if response.status().is_success() => Checked::Works,
            Ok(response)
                if matches!(
                    response.status(),
                    reqwest::StatusCode::UNAUTHORIZED | reqwest::StatusCode::FORBIDDEN
                ) =>
            {
                Checked::Refused(response.status())
            }
            Ok(response) => Checked::Unknown(format!("the server answered {}", response.status())),
            Err(error) => Checked::Unknown(format!("the network did not allow it: {error}")),
        }
    })
}

/// `hotsh logout`: removes the stored key.
pub(crate) fn logout() -> anyhow::Result<ExitCode> {
    let removed = credentials::remove()?;
    match &removed.keyring {
        Some(Ok(_)) => out("Removed the key from your keyring."),
        Some(Err(why)) => out(&format!(
            "The key is still in your keyring, which did not answer ({why}): hotsh no longer uses \
             it; remove it with `secret-tool clear application hotsh` or your keyring manager."
        )),
        None => {}
    }
    match removed.file {
        Some(path) => out(&format!("Removed the stored key ({}).", path.display())),
        None => out("No key was stored."),
    }
    if let Some(var) = ENV_KEYS.iter().find(|var| set(var)) {
        out(&format!("{var} is set in this environment: hotsh still uses that key."));
    }
    Ok(ExitCode::SUCCESS)
}

/// The environment variables that hold keys hotsh reads.
const ENV_KEYS: &[&str] = &["HOTSH_API_KEY", "DEEPSEEK_API_KEY", "OPENAI_API_KEY"];

fn set(var: &str) -> bool {
    std::env::var(var).is_ok_and(|value| !value.trim().is_empty())
}

/// `hotsh login --status`: which key the model hotsh would use takes, and from where (the
/// environment, the stored file), never the key.
pub(crate) fn status(
    models: &crate::model::setup::ModelChoices,
    stored: credentials::Loaded,
) -> anyhow::Result<ExitCode> {
    let chosen = &models.choices[0];
    out(&format!("Model: {}", chosen.name));
    match chosen.spec.key_source() {
        Some(var) if set(&var) => out(&format!("Key: from the environment ({var}).")),
        Some(_) => match &stored {
            Ok(Some((stored, _))) if stored.keyring => out(&format!(
                "Key: stored by `hotsh login --keyring` for {}, in your keyring (Secret Service).",
                stored.describe(),
            )),
            Ok(Some((stored, path))) => out(&format!(
                "Key: stored by `hotsh login` for {} ({}).",
                stored.describe(),
                path.display()
            )),
            _ => out("Key: none found."),
        },
        None if chosen.spec.needs_key() => {
            out("Key: none found. Run `hotsh login`, or set DEEPSEEK_API_KEY or OPENAI_API_KEY.")
        }
        None => out("Key: this model needs none."),
    }
    match stored {
        Ok(Some((stored, path))) if stored.keyring => out(&format!(
            "Stored key: for {} in your keyring ({} says so).",
            stored.describe(),
            path.display()
        )),
        Ok(Some((stored, path))) => {
            out(&format!("Stored key: for {} in {}.", stored.describe(), path.display()));
        }
        Ok(None) => out("Stored key: none."),
        Err(error) => {
            out(&format!("Stored key: not used: {error}"));
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}
