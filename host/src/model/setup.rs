//! Which model hotsh uses, with one precedence for every setting: the command line, then the
//! environment, then the configuration file, then the default.
//!
//! - The model: `--model`, else `HOTSH_MODEL`, else the file's `model`, else `deepseek` when
//!   `DEEPSEEK_API_KEY` is set, else `openai` when `OPENAI_API_KEY` is, else none. A model is
//!   named `none`, `script:PATH`, `openai:NAME` (any OpenAI-compatible server), or by a
//!   profile: `deepseek` and `openai` are built in; the file's `[models.NAME]` add or replace
//!   profiles.
//! - The base URL: `--base-url`, else `HOTSH_BASE_URL`, else the profile's, else
//!   `https://api.openai.com/v1` for `openai:NAME`.
//! - The key: `HOTSH_API_KEY`, else the configured profile's `api_key_env` variable, else the
//!   provider's own variable, and only for its own host (`DEEPSEEK_API_KEY` for
//!   api.deepseek.com, `OPENAI_API_KEY` for api.openai.com: pointing `deepseek` at another
//!   server does not send it the DeepSeek key), else none (local servers need none). Keys are
//!   read from the environment only, never from the file, and never written anywhere.

use super::{ApiKey, ModelSpec, OpenAiSpec};
use crate::config::{ConfigFile, ModelProfile};
use hotsh_core::context::Limits;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// DeepSeek's documented default model and endpoint.
const DEEPSEEK: (&str, &str, &str) =
    ("deepseek-chat", "https://api.deepseek.com", "DEEPSEEK_API_KEY");
/// OpenAI's endpoint and the model hotsh picks there.
const OPENAI: (&str, &str, &str) = ("gpt-4.1", "https://api.openai.com/v1", "OPENAI_API_KEY");

/// The models a session can use, and the one it starts with.
#[derive(Debug, Clone)]
pub(crate) struct ModelChoices {
    /// Name and spec of each choice, in the order offered; the first is the default.
    pub(crate) choices: Vec<Choice>,
    /// A scripted model takes images in prompts (it plays an arc recorded with a model that
    /// did).
    pub(crate) script_images: bool,
}

/// What the agent tells a client of its models, recorded with an arc so that its replay
/// against a scripted model tells the same (`hotsh replay` passes it back).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ModelFacts {
    /// The default model's name (a profile's, `openai:…`, `script:…`).
    pub(crate) name: String,
    /// Its context window, which the context use shows.
    pub(crate) window: u64,
    /// Whether a model on offer takes images (`promptCapabilities.image`).
    pub(crate) images: bool,
    /// Every model offered, the default first (absent from arcs recorded before it: then the
    /// default alone, as `name` and `window` tell it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) offered: Vec<OfferedFacts>,
}

/// One model a session could choose, as a replay must offer it for the session to go the same
/// way: its name and picker line, the limits that decide when it compacts, and its effort
/// levels.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct OfferedFacts {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) window: u64,
    pub(crate) compact_at: f64,
    pub(crate) max_requests: u32,
    /// Tokens of the newest tool output its requests carried whole (absent: every output
    /// went whole, as in arcs recorded before older output was cleared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) keep_tool_output: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) efforts: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) default_effort: Option<String>,
}

impl ModelChoices {
    /// Whether a model on offer takes images in prompts.
    pub(crate) fn take_images(&self) -> bool {
        self.choices.iter().any(|choice| match &choice.spec {
            ModelSpec::OpenAi(spec) => spec.images,
            ModelSpec::Script(_) => self.script_images,
            ModelSpec::None => false,
        })
    }

    /// The facts of the models offered ([`ModelFacts`]).
    pub(crate) fn facts(&self) -> ModelFacts {
        let first = &self.choices[0];
        let offered = self
            .choices
            .iter()
            .map(|choice| {
                let (efforts, default_effort) = choice.efforts();
                OfferedFacts {
                    name: choice.name.clone(),
                    description: choice.description.clone(),
                    window: choice.limits.window,
                    compact_at: choice.limits.compact_at,
                    max_requests: choice.limits.max_requests,
                    keep_tool_output: choice.limits.keep_tool_output,
                    efforts,
                    default_effort,
                }
            })
            .collect();
        ModelFacts {
            name: first.name.clone(),
            window: first.limits.window,
            images: self.take_images(),
            offered,
        }
    }

    /// A scripted model plays the models `facts` tell of (an arc's recorded ones, in its
    /// replay): one choice of the same name, picker line, limits and effort levels for each,
    /// all answering from the one script. An arc that names the default model alone gives
    /// the scripted models its window (and, recorded before older tool output was cleared,
    /// every output whole).
    pub(crate) fn play_as(&mut self, facts: &ModelFacts) {
        self.script_images = facts.images;
        let script = match self.choices.as_slice() {
            [Choice { spec: ModelSpec::Script(path), .. }] if !facts.offered.is_empty() => {
                path.clone()
            }
            _ => {
                for choice in &mut self.choices {
                    if matches!(choice.spec, ModelSpec::Script(_)) {
                        choice.limits.window = facts.window;
                        choice.limits.keep_tool_output = None;
                    }
                }
                return;
            }
        };
        self.choices = facts
            .offered
            .iter()
            .map(|offered| Choice {
                name: offered.name.clone(),
                description: offered.description.clone(),
                spec: ModelSpec::Script(script.clone()),
                limits: Limits {
                    window: offered.window,
                    compact_at: offered.compact_at,
                    max_requests: offered.max_requests,
                    keep_tool_output: offered.keep_tool_output,
                },
                price: None,
                played_efforts: (offered.efforts.clone(), offered.default_effort.clone()),
            })
            .collect();
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Choice {
    /// `deepseek`, a profile's name, `openai:gpt-4o`, `script:…`, `none`.
    pub(crate) name: String,
    /// One line for a model picker.
    pub(crate) description: String,
    pub(crate) spec: ModelSpec,
    /// Its window, when to compact, how many requests a turn may make.
    pub(crate) limits: Limits,
    /// What its tokens cost, when its profile says.
    pub(crate) price: Option<hotsh_core::context::Price>,
    /// The effort levels and default a scripted model offers as a recorded model did
    /// ([`ModelChoices::play_as`]); a real model's come from its spec.
    pub(crate) played_efforts: (Vec<String>, Option<String>),
}

impl Choice {
    /// Its reasoning-effort levels (none: it offers no choice), and the default.
    pub(crate) fn efforts(&self) -> (Vec<String>, Option<String>) {
        match &self.spec {
            ModelSpec::OpenAi(spec) => (
                spec.efforts.iter().map(|(name, _)| name.clone()).collect(),
                spec.default_effort.clone(),
            ),
            ModelSpec::Script(_) | ModelSpec::None => self.played_efforts.clone(),
        }
    }
}

/// The flags of the command line that name a model.
#[derive(Debug, Clone, Default)]
pub(crate) struct ModelFlags {
    pub(crate) model: Option<String>,
    pub(crate) base_url: Option<String>,
}

/// Resolves the model choices; `env` reads a variable (the process's, or a test's).
pub(crate) fn resolve(
    flags: &ModelFlags,
    file: &ConfigFile,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ModelChoices, String> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let mut profiles: BTreeMap<String, ModelProfile> = BTreeMap::new();
    // The built-in profiles name no key variable: a provider's key goes to its own host only.
    let mut built_in_keys = BTreeMap::new();
    for (name, (model, base_url, key)) in [("deepseek", DEEPSEEK), ("openai", OPENAI)] {
        profiles.insert(
            name.to_owned(),
            ModelProfile {
                base_url: Some(base_url.to_owned()),
                model: model.to_owned(),
                ..ModelProfile::default()
            },
        );
        built_in_keys.insert(name, key);
    }
    profiles.extend(file.models.clone());

    let chosen = flags
        .model
        .clone()
        .or_else(|| set("HOTSH_MODEL"))
        .or_else(|| file.model.clone())
        .or_else(|| set("DEEPSEEK_API_KEY").map(|_| "deepseek".to_owned()))
        .or_else(|| set("OPENAI_API_KEY").map(|_| "openai".to_owned()))
        .unwrap_or_else(|| "none".to_owned());
    let base_url = flags.base_url.clone().or_else(|| set("HOTSH_BASE_URL"));
    let spec_of = |name: &str| spec(name, base_url.as_deref(), &profiles, &set);
    let limits_of = |name: &str, spec: &mut ModelSpec| {
        let limits = limits(name, spec, &profiles, file)?;
        if let ModelSpec::OpenAi(spec) = spec {
            let tokens = profiles
                .get(name)
                .and_then(|p| p.max_answer_tokens)
                .or(file.session.max_answer_tokens)
                .unwrap_or(limits.window);
            if tokens == 0 {
                return Err("max_answer_tokens must be at least 1".to_owned());
            }
            spec.answer_limit = usize::try_from(tokens)
                .unwrap_or(usize::MAX)
                .saturating_mul(super::openai::ANSWER_BYTES_PER_TOKEN);
        }
        Ok(limits)
    };
    let mut first = spec_of(&chosen)?;
    let mut choices = vec![Choice {
        name: chosen.clone(),
        description: describe(&chosen, &profiles),
        limits: limits_of(&chosen, &mut first)?,
        price: price_of(&chosen, &profiles)?,
        spec: first,
        played_efforts: Default::default(),
    }];
    // The other profiles that can be used as they are: configured ones, and built-in ones
    // whose key is set.
    for (name, profile) in &profiles {
        if *name == chosen {
            continue;
        }
        let usable = file.models.contains_key(name)
            || profile.api_key_env.as_deref().is_some_and(|key| set(key).is_some())
            || built_in_keys.get(name.as_str()).is_some_and(|key| set(key).is_some());
        if usable && let Ok(mut spec) = spec_of(name) {
            choices.push(Choice {
                name: name.clone(),
                description: describe(name, &profiles),
                limits: limits_of(name, &mut spec)?,
                price: price_of(name, &profiles)?,
                spec,
                played_efforts: Default::default(),
            });
        }
    }
    Ok(ModelChoices { choices, script_images: false })
}

/// The spec a model name stands for.
fn spec(
    name: &str,
    base_url: Option<&str>,
    profiles: &BTreeMap<String, ModelProfile>,
    set: &dyn Fn(&str) -> Option<String>,
) -> Result<ModelSpec, String> {
    if name == "none" {
        return Ok(ModelSpec::None);
    }
    if let Some(path) = name.strip_prefix("script:").filter(|p| !p.is_empty()) {
        return Ok(ModelSpec::Script(PathBuf::from(path)));
    }
    let (model, base_url, profile) = match name.split_once(':') {
        Some(("openai", model)) if !model.is_empty() => {
            (model.to_owned(), base_url.unwrap_or(OPENAI.1).to_owned(), None)
        }
        Some(_) => return Err(unknown(name, profiles)),
        None => {
            let profile = profiles.get(name).ok_or_else(|| unknown(name, profiles))?;
            let base_url = base_url
                .map(str::to_owned)
                .or_else(|| profile.base_url.clone())
                .ok_or_else(|| format!("model profile `{name}` has no base_url"))?;
            (profile.model.clone(), base_url, Some(profile))
        }
    };
    let key = key_for(&base_url, profile, set);
    let extra = profile
        .map(|p| p.extra.clone())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| serde_json::to_value(v).ok().map(|v| (k, v)))
        .collect();
    let images = profile.is_some_and(|p| p.images);
    let effort = profile.and_then(|p| p.effort.as_ref());
    let efforts = effort.map(efforts_of).transpose()?.unwrap_or_default();
    let default_effort = effort
        .and_then(|e| e.default.clone())
        .or_else(|| efforts.first().map(|(name, _)| name.clone()));
    Ok(ModelSpec::OpenAi(Box::new(OpenAiSpec {
        model,
        base_url,
        key,
        extra,
        images,
        efforts,
        default_effort,
        // Set with the limits (from the window).
        answer_limit: 0,
    })))
}

/// A profile's effort levels as request fields; a level named twice, or a default that is
/// not a level, is an error.
fn efforts_of(
    effort: &crate::config::EffortConfig,
) -> Result<Vec<super::openai::EffortFields>, String> {
    use crate::config::EffortLevel;
    let mut levels = Vec::new();
    for level in &effort.levels {
        let (name, fields) = match level {
            EffortLevel::Name(name) => {
                let mut fields = serde_json::Map::new();
                fields.insert("reasoning_effort".to_owned(), serde_json::json!(name));
                (name.clone(), fields)
            }
            EffortLevel::Fields { name, fields } => (
                name.clone(),
                fields
                    .iter()
                    .filter_map(|(k, v)| serde_json::to_value(v).ok().map(|v| (k.clone(), v)))
                    .collect(),
            ),
        };
        if levels.iter().any(|(known, _)| *known == name) {
            return Err(format!("effort level `{name}` is named twice"));
        }
        levels.push((name, fields));
    }
    if let Some(default) = &effort.default
        && !levels.iter().any(|(name, _)| name == default)
    {
        return Err(format!("the default effort `{default}` is not one of its levels"));
    }
    Ok(levels)
}

/// The prices of profile `name`; negative or non-finite ones are an error.
fn price_of(
    name: &str,
    profiles: &BTreeMap<String, ModelProfile>,
) -> Result<Option<hotsh_core::context::Price>, String> {
    let Some(price) = profiles.get(name).and_then(|p| p.price.clone()) else { return Ok(None) };
    let all = [Some(price.input), Some(price.output), price.cached_input];
    if all.into_iter().flatten().any(|p| !p.is_finite() || p < 0.0) || price.currency.is_empty() {
        return Err(format!(
            "model profile `{name}`: prices must be numbers of at least 0 and the currency named"
        ));
    }
    Ok(Some(price))
}

/// The window of a scripted model (and of none): never filled by what a script plays.
const SCRIPT_WINDOW: u64 = 1_000_000;

/// The limits of the model `name` stands for: the window from its profile, else hotsh's table
/// of known models, else the conservative default; the threshold from its profile, else the
/// `[session]` section, else 85 %. Values out of range are errors, never clamped.
fn limits(
    name: &str,
    spec: &ModelSpec,
    profiles: &BTreeMap<String, ModelProfile>,
    file: &ConfigFile,
) -> Result<Limits, String> {
    use hotsh_core::context;
    let profile = profiles.get(name);
    let model = match spec {
        ModelSpec::OpenAi(spec) => Some(spec.model.as_str()),
        _ => None,
    };
    let window = match spec {
        // A script plays answers in order: a compaction would take one meant for a turn.
        ModelSpec::Script(_) | ModelSpec::None => SCRIPT_WINDOW,
        ModelSpec::OpenAi(_) => profile
            .and_then(|p| p.context_window)
            .or_else(|| model.and_then(context::known_window))
            .unwrap_or(context::DEFAULT_WINDOW),
    };
    if window < 1024 {
        return Err(format!(
            "model profile `{name}`: context_window must be at least 1024, got {window}"
        ));
    }
    let compact_at = profile
        .and_then(|p| p.compact_at)
        .or(file.session.compact_at)
        .unwrap_or(context::DEFAULT_COMPACT_AT);
    if !(compact_at > 0.0 && compact_at <= 1.0) {
        return Err(format!("compact_at must be above 0 and at most 1, got {compact_at}"));
    }
    let max_requests = file.session.max_turn_requests.unwrap_or(context::DEFAULT_MAX_TURN_REQUESTS);
    if max_requests == 0 {
        return Err("session.max_turn_requests must be at least 1".to_owned());
    }
    let keep_tool_output = match file.session.prune_tool_output {
        Some(false) => None,
        _ => match file.session.keep_tool_output.unwrap_or(context::DEFAULT_KEEP_TOOL_OUTPUT) {
            0 => return Err("session.keep_tool_output must be at least 1".to_owned()),
            keep => Some(keep),
        },
    };
    Ok(Limits { window, compact_at, max_requests, keep_tool_output })
}

/// The key for `base_url` (see the module documentation for the order).
fn key_for(
    base_url: &str,
    profile: Option<&ModelProfile>,
    set: &dyn Fn(&str) -> Option<String>,
) -> Option<ApiKey> {
    let from_var = |var: &str| set(var).map(|value| ApiKey { value, from: var.to_owned() });
    if let Some(key) = from_var("HOTSH_API_KEY") {
        return Some(key);
    }
    if let Some(key) = profile.and_then(|p| p.api_key_env.as_deref()).and_then(from_var) {
        return Some(key);
    }
    let host = base_url.split("://").nth(1).unwrap_or(base_url).split(['/', ':']).next()?;
    match host {
        "api.deepseek.com" => from_var(DEEPSEEK.2),
        "api.openai.com" => from_var(OPENAI.2),
        _ => None,
    }
}

fn unknown(name: &str, profiles: &BTreeMap<String, ModelProfile>) -> String {
    let names: Vec<&str> = profiles.keys().map(String::as_str).collect();
    format!(
        "unknown model `{name}`: expected `none`, `script:PATH`, `openai:NAME` or a profile ({})",
        names.join(", ")
    )
}

fn describe(name: &str, profiles: &BTreeMap<String, ModelProfile>) -> String {
    match profiles.get(name) {
        Some(profile) => {
            let window = profile
                .context_window
                .map(|w| format!(", {}k context", w / 1000))
                .unwrap_or_default();
            format!("{}{window}", profile.model)
        }
        None => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> =
            vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    fn openai(choices: &ModelChoices) -> &OpenAiSpec {
        match &choices.choices[0].spec {
            ModelSpec::OpenAi(spec) => spec,
            other => panic!("not an OpenAI-compatible model: {other:?}"),
        }
    }

    #[test]
    fn a_provider_key_alone_picks_its_default_model() {
        let env = env_of(&[("DEEPSEEK_API_KEY", "sk-d")]);
        let choices = resolve(&ModelFlags::default(), &ConfigFile::default(), &env).expect("ok");
        assert_eq!(choices.choices[0].name, "deepseek");
        let spec = openai(&choices);
        assert_eq!(
            (spec.model.as_str(), spec.base_url.as_str()),
            ("deepseek-chat", "https://api.deepseek.com")
        );
        assert_eq!(spec.key.as_ref().map(|k| k.from.as_str()), Some("DEEPSEEK_API_KEY"));
        let nothing =
            resolve(&ModelFlags::default(), &ConfigFile::default(), &env_of(&[])).expect("ok");
        assert!(matches!(nothing.choices[0].spec, ModelSpec::None));
    }

    #[test]
    fn flag_beats_environment_beats_file() {
        let file: ConfigFile = toml::from_str(
            "model = \"local\"\n[models.local]\nbase_url = \"http://127.0.0.1:11434/v1\"\nmodel = \"qwen\"\n[models.local.extra]\ntemperature = 0.2\n",
        )
        .expect("config");
        let env = env_of(&[("HOTSH_MODEL", "openai:gpt-4o"), ("OPENAI_API_KEY", "sk-o")]);
        let from_file = resolve(&ModelFlags::default(), &file, &env_of(&[])).expect("ok");
        assert_eq!(openai(&from_file).model, "qwen");
        assert_eq!(openai(&from_file).extra["temperature"], serde_json::json!(0.2));
        assert!(openai(&from_file).key.is_none());
        let from_env = resolve(&ModelFlags::default(), &file, &env).expect("ok");
        assert_eq!(openai(&from_env).model, "gpt-4o");
        assert_eq!(openai(&from_env).key.as_ref().map(|k| k.from.as_str()), Some("OPENAI_API_KEY"));
        let flags = ModelFlags {
            model: Some("openai:llama".into()),
            base_url: Some("http://127.0.0.1:8080/v1".into()),
        };
        let from_flag = resolve(&flags, &file, &env).expect("ok");
        assert_eq!(openai(&from_flag).model, "llama");
        assert_eq!(openai(&from_flag).base_url, "http://127.0.0.1:8080/v1");
        // A local server gets no provider key.
        assert!(openai(&from_flag).key.is_none());
        assert!(
            resolve(
                &ModelFlags { model: Some("nope".into()), ..ModelFlags::default() },
                &file,
                &env
            )
            .is_err()
        );
    }

    #[test]
    fn hotsh_api_key_wins_and_usable_profiles_are_offered() {
        let env = env_of(&[("HOTSH_API_KEY", "sk-h"), ("OPENAI_API_KEY", "sk-o")]);
        let flags = ModelFlags { model: Some("deepseek".into()), ..ModelFlags::default() };
        let choices = resolve(&flags, &ConfigFile::default(), &env).expect("ok");
        assert_eq!(openai(&choices).key.as_ref().map(|k| k.from.as_str()), Some("HOTSH_API_KEY"));
        let names: Vec<&str> = choices.choices.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["deepseek", "openai"]);
    }

    #[test]
    fn effort_levels_that_repeat_or_a_default_that_is_not_one_are_refused() {
        let with = |effort: &str| -> Result<ModelChoices, String> {
            let file: ConfigFile = toml::from_str(&format!(
                "model = \"x\"\n[models.x]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n[models.x.effort]\n{effort}"
            ))
            .expect("config");
            resolve(&ModelFlags::default(), &file, &env_of(&[]))
        };
        let ok = with("levels = [\"low\", \"high\"]\n").expect("valid");
        assert_eq!(openai(&ok).default_effort.as_deref(), Some("low"));
        assert!(
            with("levels = [\"low\", \"low\"]\n").expect_err("refused").contains("named twice")
        );
        let error = with("levels = [\"low\"]\ndefault = \"max\"\n").expect_err("refused");
        assert!(error.contains("not one of its levels"), "{error}");
    }
}
