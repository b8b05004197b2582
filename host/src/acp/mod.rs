//! The ACP bridge: the only module that uses the ACP SDK (ARCHITECTURE.md, invariant 1): the
//! agent, and the in-process client of `hotsh run` (`run.rs`).
//!
//! Handlers hold the SDK's dispatch loop, so none of them waits for long: `session/prompt`
//! starts the turn on the runtime and returns, which keeps `session/cancel` flowing while the
//! turn runs.

mod from_acp;
pub(crate) mod run;
mod to_acp;
mod transport;
mod wire;

pub(crate) use transport::claim_stdout;

use crate::host::Host;
use crate::sandbox::Mode;
use crate::session::store::StoreError;
use crate::session::{
    ClientFs, DEFAULT_MODE, EscalationAnswer, EscalationAsk, EventSink, PLAN_MODE, Question, Reply,
    SessionEvent, SessionId,
};
use crate::sync::lock;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, AuthMethod, AuthMethodAgent, AuthenticateRequest, AuthenticateResponse,
    CancelNotification, CloseSessionRequest, CloseSessionResponse, DeleteSessionRequest,
    DeleteSessionResponse, Implementation, InitializeRequest, InitializeResponse,
    ListSessionsRequest, ListSessionsResponse, LoadSessionRequest, LoadSessionResponse,
    McpCapabilities, NewSessionRequest, NewSessionResponse, PromptCapabilities, PromptRequest,
    PromptResponse, ResumeSessionRequest, ResumeSessionResponse, SessionCapabilities,
    SessionCloseCapabilities, SessionConfigOption, SessionConfigOptionCategory,
    SessionConfigOptionValue, SessionConfigSelectOption, SessionDeleteCapabilities, SessionInfo,
    SessionListCapabilities, SessionNotification, SessionResumeCapabilities, SessionUpdate,
    SetSessionConfigOptionRequest, SetSessionConfigOptionResponse, SetSessionModeRequest,
    SetSessionModeResponse, ToolCallUpdateFields,
};
use agent_client_protocol::{Agent, Client, ConnectTo, Error, ErrorCode, Responder};
use hotsh_core::usecase;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The ways to authenticate: `hotsh login` in a terminal the client opens (ACP terminal auth),
/// or a key in the agent's environment (an `agent` method: the answer says how).
const LOGIN_METHOD: &str = "login";
const LOGIN_HELP: &str = "Runs `hotsh login` in a terminal: choose the provider, paste the key \
(not shown). It is kept where commands hotsh runs cannot read it.";
const API_KEY_METHOD: &str = "api-key";
const API_KEY_HELP: &str = "Log in with `hotsh login` in a terminal, or set DEEPSEEK_API_KEY or \
OPENAI_API_KEY (or HOTSH_API_KEY with --base-url for another provider) in the `env` of this \
agent server in Zed's settings.";

/// Sessions per `session/list` page.
const LIST_PAGE: usize = 50;

/// What the client told us about itself in `initialize`.
#[derive(Debug, Default)]
struct ClientFeatures {
    /// Zed's `_meta.terminal_output`: it renders terminals fed by `_meta` updates.
    terminal_output: AtomicBool,
    /// `fs.readTextFile` / `fs.writeTextFile`.
    read_text_file: AtomicBool,
    write_text_file: AtomicBool,
    /// `session.compaction`: it renders ACP's compaction updates.
    compaction: AtomicBool,
    /// `subagents`: it shows a subagent's session as a child thread.
    subagents: AtomicBool,
}

/// What every handler needs.
#[derive(Clone)]
struct Shared {
    host: Arc<Host>,
    features: Arc<ClientFeatures>,
    /// Counts updates on their way to a client over a pipe (`None`: an in-process client).
    outflow: Option<Arc<transport::Outflow>>,
}

impl Shared {
    fn sink(&self, cx: ConnectionTo<Client>, session_id: &str) -> Arc<AcpSink> {
        Arc::new(AcpSink {
            cx,
            session_id: SessionId(session_id.to_owned()),
            wire_id: agent_client_protocol::v1::schema::SessionId::new(session_id),
            terminal_output: self.features.terminal_output.load(Ordering::Relaxed),
            fs: ClientFs {
                read: self.features.read_text_file.load(Ordering::Relaxed),
                write: self.features.write_text_file.load(Ordering::Relaxed),
            },
            compaction: self.features.compaction.load(Ordering::Relaxed),
            subagents: self.features.subagents.load(Ordering::Relaxed),
            consoles: Arc::default(),
            open_cards: Arc::default(),
            outflow: self.outflow.clone(),
            replay: None,
        })
    }
}

/// The ACP agent serving `host`, ready to connect to a transport; `outflow` (for a
/// transport over a pipe) holds sessions back while their client does not read.
pub(crate) fn agent(
    host: Arc<Host>,
    outflow: Option<Arc<transport::Outflow>>,
) -> impl ConnectTo<Client> {
    let shared = Shared { host, features: Arc::new(ClientFeatures::default()), outflow };
    Agent
        .v1()
        .name("hotsh")
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |request: InitializeRequest, responder, cx| {
                    on_initialize(&shared, request, responder, cx).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |request: NewSessionRequest, responder, cx| {
                    on_new_session(&shared, request, responder, cx).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |request: LoadSessionRequest, responder, cx| {
                    on_load_session(&shared, request, responder, cx).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |request: ResumeSessionRequest, responder, cx| {
                    on_resume_session(&shared, request, responder, cx).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |request: ListSessionsRequest, responder, cx| {
                    on_list_sessions(&shared, request, responder, cx).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |request: CloseSessionRequest, responder, cx| {
                    on_close_session(&shared, request, responder, cx).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |request: DeleteSessionRequest, responder, _cx| {
                    let shared = shared.clone();
                    let id = SessionId(request.session_id.0.to_string());
                    tokio::spawn(async move {
                        let _ = match usecase::delete(&*shared.host, &id).await {
                            Ok(()) => {
                                tracing::info!(session = %id, "session deleted");
                                responder.respond(DeleteSessionResponse::new())
                            }
                            Err(refused) => responder.respond_with_error(refusal(&refused)),
                        };
                    });
                    Ok(())
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |request: agent_client_protocol::v1::schema::ForkSessionRequest,
                            responder,
                            cx| {
                    on_fork_session(&shared, request, responder, cx).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |request: PromptRequest, responder, cx| {
                    on_prompt(&shared, request, responder, cx).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |request: AuthenticateRequest, responder, cx| {
                    on_authenticate(&shared, request, responder, cx).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |_request: agent_client_protocol::v1::schema::LogoutRequest,
                            responder,
                            _cx| { on_logout(&shared, responder).await }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |request: SetSessionConfigOptionRequest, responder, cx| {
                    on_set_session_config_option(&shared, request, responder, cx).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |request: SetSessionModeRequest, responder, cx| {
                    on_set_session_mode(&shared, request, responder, cx).await
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            {
                let shared = shared.clone();
                async move |notification: CancelNotification, _cx| {
                    on_cancel(&shared, notification).await
                }
            },
            agent_client_protocol::on_receive_notification!(),
        )
}

/// `initialize`: what the client can do, and what this agent offers.
async fn on_initialize(
    shared: &Shared,
    request: InitializeRequest,
    responder: Responder<InitializeResponse, agent_client_protocol::V1>,
    _cx: ConnectionTo<Client>,
) -> Result<(), Error> {
    let terminal_output = from_acp::wants_terminal_output(&request);
    shared.features.terminal_output.store(terminal_output, Ordering::Relaxed);
    let fs = &request.client_capabilities.fs;
    shared.features.read_text_file.store(fs.read_text_file, Ordering::Relaxed);
    shared.features.write_text_file.store(fs.write_text_file, Ordering::Relaxed);
    let compaction =
        request.client_capabilities.session.as_ref().is_some_and(|s| s.compaction.is_some());
    shared.features.compaction.store(compaction, Ordering::Relaxed);
    let subagents = request.client_capabilities.subagents.is_some();
    shared.features.subagents.store(subagents, Ordering::Relaxed);
    tracing::debug!(
        subagents,
        terminal_output,
        read_text_file = fs.read_text_file,
        write_text_file = fs.write_text_file,
        compaction,
        "initialize"
    );
    let sessions = SessionCapabilities::new()
        .list(SessionListCapabilities::new())
        .resume(SessionResumeCapabilities::new())
        .close(SessionCloseCapabilities::new())
        .delete(SessionDeleteCapabilities::new())
        .fork(agent_client_protocol::v1::schema::SessionForkCapabilities::new());
    responder.respond(
        InitializeResponse::new(request.protocol_version)
            .agent_capabilities(
                AgentCapabilities::new()
                    .load_session(true)
                    .prompt_capabilities(
                        PromptCapabilities::new()
                            .image(shared.host.takes_images())
                            .embedded_context(true),
                    )
                    .session_capabilities(sessions)
                    .auth(
                        agent_client_protocol::v1::schema::AgentAuthCapabilities::new()
                            .logout(agent_client_protocol::v1::schema::LogoutCapabilities::new()),
                    )
                    .mcp_capabilities(McpCapabilities::new().http(true)),
            )
            .auth_methods(vec![
                AuthMethod::Terminal(
                    agent_client_protocol::v1::schema::AuthMethodTerminal::new(
                        LOGIN_METHOD,
                        "Log in with hotsh login",
                    )
                    .description(LOGIN_HELP.to_owned())
                    .args(vec!["login".to_owned()]),
                ),
                AuthMethod::Agent(
                    AuthMethodAgent::new(API_KEY_METHOD, "Use a key from the environment")
                        .description(API_KEY_HELP.to_owned()),
                ),
            ])
            .agent_info(Implementation::new("hotsh", env!("CARGO_PKG_VERSION"))),
    )
}

/// `session/new`: a session in `cwd`, its log created first.
async fn on_new_session(
    shared: &Shared,
    request: NewSessionRequest,
    responder: Responder<NewSessionResponse, agent_client_protocol::V1>,
    cx: ConnectionTo<Client>,
) -> Result<(), Error> {
    // A model that needs a key the user has not given (read again: `hotsh login` may have
    // run since): the client is asked to authenticate, before any session exists.
    if shared.host.needs_key() && reload_models(&shared.host).await.unwrap_or(true) {
        return responder.respond_with_error(auth_required());
    }
    // The client port of the session, made once its id is known.
    let mut made = None;
    let opened = usecase::open_new(&*shared.host, request.cwd, |session| {
        let sink = shared.sink(cx.clone(), &session.id.0);
        made = Some(Arc::clone(&sink));
        sink as Arc<dyn EventSink>
    })
    .await;
    let session = match opened {
        Ok(session) => session,
        Err(refused) => return responder.respond_with_error(refusal(&refused)),
    };
    let Some(sink) = made else {
        let error = "hotsh opened the session without its client port (a bug)".to_owned();
        return responder.respond_with_error(Error::new(ErrorCode::INTERNAL_ERROR, error));
    };
    shared.host.connect_mcp(&session, from_acp::mcp_servers(&request.mcp_servers));
    tracing::info!(session = %session.id, cwd = %session.cwd.display(), "session created");
    let options = config_options(&shared.host, &session);
    responder.respond(
        NewSessionResponse::new(session.id.0.clone())
            .config_options(options)
            .modes(session_modes(&shared.host, &session)),
    )?;
    // After the answer: the client knows the session then.
    sink.announce(&session, shared.host.window_of(&session));
    Ok(())
}

/// `session/fork`: a new session whose history is the source's up to now; both go on.
async fn on_fork_session(
    shared: &Shared,
    request: agent_client_protocol::v1::schema::ForkSessionRequest,
    responder: Responder<
        agent_client_protocol::v1::schema::ForkSessionResponse,
        agent_client_protocol::V1,
    >,
    cx: ConnectionTo<Client>,
) -> Result<(), Error> {
    let shared = shared.clone();
    tokio::spawn(async move {
        let source = SessionId(request.session_id.0.to_string());
        let mut made = None;
        let forked = usecase::fork(&*shared.host, &source, request.cwd, |session| {
            let sink = shared.sink(cx.clone(), &session.id.0);
            made = Some(Arc::clone(&sink));
            sink as Arc<dyn EventSink>
        })
        .await;
        let (session, sink) = match (forked, made) {
            (Ok(session), Some(sink)) => (session, sink),
            (Err(refused), _) => {
                let _ = responder.respond_with_error(refusal(&refused));
                return;
            }
            (Ok(_), None) => {
                let error = "hotsh forked the session without its client port (a bug)".to_owned();
                let _ = responder.respond_with_error(Error::new(ErrorCode::INTERNAL_ERROR, error));
                return;
            }
        };
        shared.host.connect_mcp(&session, from_acp::mcp_servers(&request.mcp_servers));
        tracing::info!(session = %session.id, %source, "session forked");
        let options = config_options(&shared.host, &session);
        let modes = session_modes(&shared.host, &session);
        let _ = responder.respond(
            agent_client_protocol::v1::schema::ForkSessionResponse::new(session.id.0.clone())
                .config_options(options)
                .modes(modes),
        );
        sink.announce(&session, shared.host.window_of(&session));
    });
    Ok(())
}

/// `session/load`: the thread as it was (replayed before the answer, cards drawn anew), then
/// the session goes on here.
async fn on_load_session(
    shared: &Shared,
    request: LoadSessionRequest,
    responder: Responder<LoadSessionResponse, agent_client_protocol::V1>,
    cx: ConnectionTo<Client>,
) -> Result<(), Error> {
    let shared = shared.clone();
    let id = request.session_id.0.to_string();
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        let sink = shared.sink(cx, &id);
        let loaded = usecase::load(&*shared.host, &id, Arc::clone(&sink) as Arc<dyn EventSink>);
        let (session, events) = match loaded.await {
            Ok(loaded) => loaded,
            Err(refused) => {
                let _ = responder.respond_with_error(refusal(&refused));
                return;
            }
        };
        shared.host.connect_mcp(&session, from_acp::mcp_servers(&request.mcp_servers));
        sink.announce(&session, shared.host.window_of(&session));
        tracing::info!(
            session = %session.id,
            events,
            sent_ms = started.elapsed().as_secs_f64() * 1000.0,
            "session loaded"
        );
        let options = config_options(&shared.host, &session);
        let modes = session_modes(&shared.host, &session);
        let _ = responder.respond(LoadSessionResponse::new().config_options(options).modes(modes));
    });
    Ok(())
}

/// `session/resume`: the session goes on here, without a replay.
async fn on_resume_session(
    shared: &Shared,
    request: ResumeSessionRequest,
    responder: Responder<ResumeSessionResponse, agent_client_protocol::V1>,
    cx: ConnectionTo<Client>,
) -> Result<(), Error> {
    let shared = shared.clone();
    let id = request.session_id.0.to_string();
    tokio::spawn(async move {
        let sink = shared.sink(cx, &id);
        match usecase::resume(&*shared.host, &id, Arc::clone(&sink) as Arc<dyn EventSink>).await {
            Ok((session, open_tasks)) => {
                // Nothing is replayed on resume. The answer goes first: a client registers
                // the session when it arrives, and drops updates about one it does not know
                // (the slash commands, the title, the context use); live events are held
                // until then.
                let options = config_options(&shared.host, &session);
                let modes = session_modes(&shared.host, &session);
                let _ = responder
                    .respond(ResumeSessionResponse::new().config_options(options).modes(modes));
                usecase::reopened(&*shared.host, &session, &open_tasks).await;
                shared.host.connect_mcp(&session, from_acp::mcp_servers(&request.mcp_servers));
                sink.announce(&session, shared.host.window_of(&session));
                tracing::info!(session = %session.id, "session resumed");
            }
            Err(refused) => {
                let _ = responder.respond_with_error(refusal(&refused));
            }
        }
    });
    Ok(())
}

/// `session/list`.
async fn on_list_sessions(
    shared: &Shared,
    request: ListSessionsRequest,
    responder: Responder<ListSessionsResponse, agent_client_protocol::V1>,
    _cx: ConnectionTo<Client>,
) -> Result<(), Error> {
    let shared = shared.clone();
    tokio::spawn(async move {
        let _ = responder.respond_with_result(list_sessions(&shared.host, request).await);
    });
    Ok(())
}

/// `session/close`: its tasks and servers stopped, its log released.
async fn on_close_session(
    shared: &Shared,
    request: CloseSessionRequest,
    responder: Responder<CloseSessionResponse, agent_client_protocol::V1>,
    _cx: ConnectionTo<Client>,
) -> Result<(), Error> {
    let shared = shared.clone();
    let id = SessionId(request.session_id.0.to_string());
    tokio::spawn(async move {
        match usecase::close(&*shared.host, &id).await {
            Ok(()) => {
                tracing::info!(session = %id, "session closed");
                let _ = responder.respond(CloseSessionResponse::new());
            }
            Err(refused) => {
                let _ = responder.respond_with_error(refusal(&refused));
            }
        }
    });
    Ok(())
}

/// `session/prompt`: the prompt is admitted here (so a cancel that follows finds its turn
/// begun) and answered on the runtime; the response comes when the turn ends.
async fn on_prompt(
    shared: &Shared,
    request: PromptRequest,
    responder: Responder<PromptResponse, agent_client_protocol::V1>,
    _cx: ConnectionTo<Client>,
) -> Result<(), Error> {
    let host = &shared.host;
    let session = match open_session(host, &request.session_id) {
        Ok(session) => session,
        Err(error) => return responder.respond_with_error(error),
    };
    let prompt = from_acp::prompt(&request.prompt);
    let admitted = match usecase::admit(&**host, &session, prompt).await {
        Ok(admitted) => admitted,
        Err(refused) => return responder.respond_with_error(refusal(&refused)),
    };
    // `$/cancel_request` for this request cancels the turn as `session/cancel` does (logged
    // in the session's order, answered `cancelled`).
    let withdrawn = responder.cancellation();
    let host = Arc::clone(host);
    tokio::spawn(async move {
        let answering = usecase::answer(&*host, &session, admitted);
        tokio::pin!(answering);
        let mut asked = false;
        let outcome = loop {
            tokio::select! {
                outcome = &mut answering => break outcome,
                () = withdrawn.cancelled(), if !asked => {
                    asked = true;
                    // In a task of its own: the turn, not polled while this waits, may hold
                    // the session's order.
                    let cancelling = Arc::clone(&session);
                    tokio::spawn(async move {
                        let was_running = usecase::cancel(&cancelling).await;
                        tracing::info!(session = %cancelling.id, was_running, "$/cancel_request");
                    });
                }
            }
        };
        tracing::info!(session = %session.id, ?outcome, "turn ended");
        let _ = match outcome {
            Ok(stop) => responder.respond(PromptResponse::new(to_acp::stop_reason(stop))),
            Err(failed) => {
                let code = if failed.needs_key {
                    ErrorCode::AUTH_REQUIRED
                } else {
                    ErrorCode::INTERNAL_ERROR
                };
                responder.respond_with_error(Error::new(code, failed.message))
            }
        };
    });
    Ok(())
}

/// `authenticate`: keys come from the environment; the answer says how to set one.
async fn on_authenticate(
    shared: &Shared,
    request: AuthenticateRequest,
    responder: Responder<AuthenticateResponse, agent_client_protocol::V1>,
    _cx: ConnectionTo<Client>,
) -> Result<(), Error> {
    // The key `hotsh login` stored (or the environment's) is read again: a user who logged
    // in since the agent started is in.
    tracing::info!(method = %request.method_id.0, "authenticate");
    match reload_models(&shared.host).await {
        Ok(false) => responder.respond(AuthenticateResponse::new()),
        Ok(true) => responder.respond_with_error(auth_required()),
        Err(why) => responder.respond_with_error(Error::new(
            ErrorCode::AUTH_REQUIRED,
            format!("the stored key cannot be used: {why}"),
        )),
    }
}

/// [`Host::reload_models`] off the runtime's workers: it reads the stored key, from the
/// keyring when the user keeps it there (a D-Bus question, up to 10 s when the keyring hangs).
async fn reload_models(host: &Arc<Host>) -> Result<bool, String> {
    let host = Arc::clone(host);
    tokio::task::spawn_blocking(move || host.reload_models())
        .await
        .unwrap_or_else(|error| Err(error.to_string()))
}

/// The error asking the client to authenticate, naming the ways.
fn auth_required() -> Error {
    Error::new(
        ErrorCode::AUTH_REQUIRED,
        format!("The model needs a key and none was found. {API_KEY_HELP}"),
    )
    .data(serde_json::json!({"authMethods": [LOGIN_METHOD, API_KEY_METHOD]}))
}

/// `logout`: the key `hotsh login` stored is removed, and the models follow.
async fn on_logout(
    shared: &Shared,
    responder: Responder<
        agent_client_protocol::v1::schema::LogoutResponse,
        agent_client_protocol::V1,
    >,
) -> Result<(), Error> {
    let removed = tokio::task::spawn_blocking(crate::credentials::remove)
        .await
        .map_err(|error| Error::new(ErrorCode::INTERNAL_ERROR, error.to_string()))?;
    match removed {
        Ok(path) => {
            tracing::info!(removed = ?path, "logout");
            if let Err(why) = reload_models(&shared.host).await {
                tracing::warn!(%why, "the models could not be resolved again after logout");
            }
            responder.respond(agent_client_protocol::v1::schema::LogoutResponse::new())
        }
        Err(error) => {
            responder.respond_with_error(Error::new(ErrorCode::INTERNAL_ERROR, error.to_string()))
        }
    }
}

/// `session/set_config_option`.
async fn on_set_session_config_option(
    shared: &Shared,
    request: SetSessionConfigOptionRequest,
    responder: Responder<SetSessionConfigOptionResponse, agent_client_protocol::V1>,
    _cx: ConnectionTo<Client>,
) -> Result<(), Error> {
    let shared = shared.clone();
    tokio::spawn(async move {
        let _ = responder.respond_with_result(set_config_option(&shared.host, request).await);
    });
    Ok(())
}

/// `session/set_mode`.
async fn on_set_session_mode(
    shared: &Shared,
    request: SetSessionModeRequest,
    responder: Responder<SetSessionModeResponse, agent_client_protocol::V1>,
    _cx: ConnectionTo<Client>,
) -> Result<(), Error> {
    let shared = shared.clone();
    tokio::spawn(async move {
        let _ = responder.respond_with_result(set_mode(&shared.host, request).await);
    });
    Ok(())
}

/// `session/cancel`: logged and applied in the session's order, here (after the prompt it
/// follows was begun by its handler).
async fn on_cancel(shared: &Shared, notification: CancelNotification) -> Result<(), Error> {
    let id = SessionId(notification.session_id.0.to_string());
    match shared.host.session(&id) {
        // Logged and applied in the session's order, here (after the prompt it
        // follows was begun by its handler).
        Some(session) => {
            let was_running = usecase::cancel(&session).await;
            tracing::info!(session = %id, was_running, "cancel");
        }
        None => tracing::warn!(session = %id, "cancel for an unknown session"),
    }
    Ok(())
}

/// The updates a client with terminal support would get for `events` (what `hotsh sessions
/// show` renders).
pub(crate) fn terminal_view(
    events: Vec<SessionEvent>,
) -> Vec<agent_client_protocol::v1::schema::SessionUpdate> {
    events.into_iter().filter_map(to_acp::update_with_terminal).collect()
}

/// The session's options as Zed shows them: `model`, the models it can switch to.
fn config_options(host: &Host, session: &crate::session::Session) -> Vec<SessionConfigOption> {
    let models = host.model_names();
    // The model turns go to: always one of those listed.
    let current = host.model_name_of(session);
    let choices: Vec<SessionConfigSelectOption> = models
        .into_iter()
        .map(|(name, description)| {
            SessionConfigSelectOption::new(name.clone(), name).description(description)
        })
        .collect();
    let mut options = vec![
        SessionConfigOption::select("model", "Model", current, choices)
            .category(SessionConfigOptionCategory::Model)
            .description("The model this session talks to".to_owned()),
    ];
    let efforts = host.efforts_of(session);
    if let Some(current) = host.effort_of(session)
        && !efforts.is_empty()
    {
        let levels = efforts
            .into_iter()
            .map(|level| SessionConfigSelectOption::new(level.clone(), level))
            .collect::<Vec<_>>();
        options.push(
            SessionConfigOption::select(EFFORT_OPTION, "Reasoning effort", current, levels)
                .category(SessionConfigOptionCategory::ThoughtLevel)
                .description("How much the model reasons before it answers".to_owned()),
        );
    }
    if host.sandbox.offered() {
        // What commands run under: the agent's cap narrows a choice logged elsewhere.
        let chosen = session.sandbox_choice().unwrap_or(host.sandbox.default_mode);
        let current = host.sandbox.max_mode.map_or(chosen, |max| chosen.min(max));
        let modes = Mode::ALL
            .into_iter()
            .filter(|mode| host.sandbox.max_mode.is_none_or(|max| *mode <= max))
            .map(|mode| {
                SessionConfigSelectOption::new(mode.as_str(), mode.as_str())
                    .description(mode.describe().to_owned())
            })
            .collect::<Vec<_>>();
        options.push(
            SessionConfigOption::select(SANDBOX_OPTION, "Sandbox", current.as_str(), modes)
                .description(
                    "What commands may touch; a command can still ask you for more, once"
                        .to_owned(),
                ),
        );
    }
    options
}

/// The config option holding the session's reasoning effort.
const EFFORT_OPTION: &str = usecase::EFFORT_OPTION;

/// The config option holding the session's sandbox mode.
const SANDBOX_OPTION: &str = usecase::SANDBOX_OPTION;

/// The session modes Zed offers: `default`, and `plan` (commands read but change nothing).
fn session_modes(
    host: &Host,
    session: &crate::session::Session,
) -> agent_client_protocol::v1::schema::SessionModeState {
    use agent_client_protocol::v1::schema::{SessionMode, SessionModeState};
    let current = if session.planning() { PLAN_MODE } else { DEFAULT_MODE };
    let plan = if host.sandbox.offered() {
        "Plan: commands may read but not change anything, and ask for nothing wider"
    } else {
        "Plan: commands would be confined to read-only, but this agent cannot confine commands, so none run"
    };
    SessionModeState::new(
        current,
        vec![
            SessionMode::new(DEFAULT_MODE, "Default")
                .description("Commands run under the session's sandbox mode".to_owned()),
            SessionMode::new(PLAN_MODE, "Plan").description(plan.to_owned()),
        ],
    )
}

/// `session/set_mode`: enters or leaves plan mode (logged); tells the client the mode now in
/// force.
async fn set_mode(
    host: &Host,
    request: SetSessionModeRequest,
) -> Result<SetSessionModeResponse, Error> {
    let session = open_session(host, &request.session_id)?;
    usecase::set_mode(host, &session, request.mode_id.0.as_ref()).await.map_err(|r| refusal(&r))?;
    Ok(SetSessionModeResponse::new())
}

/// `session/set_config_option`: switches the session's model or its sandbox mode (logged, so
/// it survives a restart); answers with the full option list.
async fn set_config_option(
    host: &Host,
    request: SetSessionConfigOptionRequest,
) -> Result<SetSessionConfigOptionResponse, Error> {
    let session = open_session(host, &request.session_id)?;
    let option = request.config_id.0.as_ref();
    let SessionConfigOptionValue::ValueId { value } = request.value else {
        return Err(invalid_params(match option {
            usecase::SANDBOX_OPTION => format!("the `{option}` option takes a mode's name"),
            usecase::EFFORT_OPTION => format!("the `{option}` option takes a level"),
            _ => "the `model` option takes a model's name".to_owned(),
        }));
    };
    usecase::set_option(host, &session, option, &value.0).await.map_err(|r| refusal(&r))?;
    Ok(SetSessionConfigOptionResponse::new(config_options(host, &session)))
}

/// One page of `session/list`: newest first; the cursor is the position of the page's first
/// session.
async fn list_sessions(
    host: &Host,
    request: ListSessionsRequest,
) -> Result<ListSessionsResponse, Error> {
    let start = match request.cursor.as_deref() {
        None => 0,
        Some(cursor) => cursor
            .parse::<usize>()
            .map_err(|_| invalid_params(format!("not a cursor of this agent's: {cursor}")))?,
    };
    let sessions = host.list_sessions(request.cwd).await.map_err(|e| store_error(&e))?;
    let page: Vec<SessionInfo> = sessions
        .iter()
        .skip(start)
        .take(LIST_PAGE)
        .map(|s| {
            let info = SessionInfo::new(s.id.clone(), s.cwd.clone())
                .title(s.title.clone())
                .updated_at(humantime::format_rfc3339_millis(s.updated_at).to_string());
            // A subagent names its parent, a fork its source (hotsh's own `_meta`).
            let mut hotsh = serde_json::Map::new();
            if let Some(parent) = &s.parent {
                hotsh.insert("parentSessionId".into(), parent.clone().into());
            }
            if let Some(source) = &s.forked_from {
                hotsh.insert("forkedFrom".into(), source.clone().into());
            }
            if hotsh.is_empty() {
                info
            } else {
                let mut meta = agent_client_protocol::v1::schema::Meta::new();
                meta.insert("hotsh".into(), serde_json::Value::Object(hotsh));
                info.meta(meta)
            }
        })
        .collect();
    let next = start + page.len();
    let mut response = ListSessionsResponse::new(page);
    if next < sessions.len() {
        response = response.next_cursor(next.to_string());
    }
    Ok(response)
}

/// A session this agent has open, or the error for a request naming another.
fn open_session(
    host: &Host,
    id: &agent_client_protocol::v1::schema::SessionId,
) -> Result<Arc<crate::session::Session>, Error> {
    let id = SessionId(id.0.to_string());
    host.session(&id).ok_or_else(|| invalid_params(format!("unknown session: {id}")))
}

/// The JSON-RPC error for a request a use case refused.
fn refusal(refused: &usecase::Refused) -> Error {
    match refused {
        usecase::Refused::Invalid(message) => invalid_params(message.clone()),
        usecase::Refused::Busy(message) => Error::new(ErrorCode::INVALID_REQUEST, message.clone()),
        usecase::Refused::NotSaved(message) | usecase::Refused::Failed(message) => {
            Error::new(ErrorCode::INTERNAL_ERROR, message.clone())
        }
    }
}

/// The JSON-RPC error for a session store failure: an unknown session is a bad parameter;
/// anything else says what failed, naming the file.
fn store_error(error: &StoreError) -> Error {
    match error {
        StoreError::Unknown(_) => invalid_params(error.to_string()),
        _ => Error::new(ErrorCode::INTERNAL_ERROR, error.to_string()),
    }
}

fn invalid_params(message: String) -> Error {
    Error::new(ErrorCode::INVALID_PARAMS, message)
}

/// Turns a session's events into `session/update` notifications.
struct AcpSink {
    cx: ConnectionTo<Client>,
    session_id: SessionId,
    /// `session_id` as every update names it (shared, not copied per update).
    wire_id: agent_client_protocol::v1::schema::SessionId,
    terminal_output: bool,
    fs: ClientFs,
    /// It renders ACP's compaction updates (`session.compaction`).
    compaction: bool,
    /// It shows subagents' sessions as child threads (`subagents`).
    subagents: bool,
    /// Without terminal support, a command's output so far (bounded), re-sent as the card's
    /// content because ACP content updates replace rather than append.
    consoles: Arc<Mutex<HashMap<String, String>>>,
    /// The title, kind and content each open card was drawn with: a permission request puts
    /// its own in their place (ACP content updates replace), and the answer puts them back.
    open_cards: Arc<Mutex<HashMap<String, ToolCallUpdateFields>>>,
    outflow: Option<Arc<transport::Outflow>>,
    /// A replay port's batch (see [`EventSink::replay_port`]): its updates as lines, written
    /// past the SDK when it reaches [`REPLAY_BATCH`] bytes or the replay ends. Shared with
    /// the ports of the session's subagents, so that their threads keep their place.
    replay: Option<Replay>,
}

/// A replay port's batch, and how its lines written past the SDK start: with the port's own
/// session id (see [`wire::LineHead`]).
struct Replay {
    batch: Arc<Mutex<Vec<u8>>>,
    head: wire::LineHead,
}

/// The bytes of `session/update` lines a replay hands over at once.
const REPLAY_BATCH: usize = 64 << 10;

impl EventSink for AcpSink {
    fn client_fs(&self) -> ClientFs {
        self.fs
    }

    fn read_text_file(
        &self,
        path: std::path::PathBuf,
    ) -> futures::future::BoxFuture<'static, Result<String, String>> {
        use agent_client_protocol::v1::schema::ReadTextFileRequest;
        let read = self.request(ReadTextFileRequest::new(self.session_id.0.clone(), path));
        Box::pin(async move { read.await.map(|response| response.content) })
    }

    fn write_text_file(
        &self,
        path: std::path::PathBuf,
        text: String,
    ) -> futures::future::BoxFuture<'static, Result<(), String>> {
        use agent_client_protocol::v1::schema::WriteTextFileRequest;
        let write = self.request(WriteTextFileRequest::new(self.session_id.0.clone(), path, text));
        Box::pin(async move { write.await.map(|_| ()) })
    }

    fn room(&self) -> futures::future::BoxFuture<'static, ()> {
        if let Some(replay) = &self.replay {
            let full = lock(&replay.batch).len() >= REPLAY_BATCH;
            // Asked before every replayed update: a future of no size, so that boxing it
            // allocates nothing (`async {}` is a byte).
            return if full {
                self.settle()
            } else {
                Box::pin(futures::future::always_ready(|| ()))
            };
        }
        let outflow = self.outflow.clone();
        Box::pin(async move {
            if let Some(outflow) = outflow {
                outflow.room().await;
            }
        })
    }

    fn replay_port(&self) -> Option<Arc<dyn EventSink>> {
        self.outflow.as_ref().filter(|outflow| outflow.passes())?;
        let mut port = self.port(self.session_id.clone(), Some(Arc::default()));
        // The cards a replay leaves open are the live session's to close.
        port.consoles = Arc::clone(&self.consoles);
        port.open_cards = Arc::clone(&self.open_cards);
        Some(Arc::new(port))
    }

    fn settle(&self) -> futures::future::BoxFuture<'static, ()> {
        let (Some(replay), Some(outflow)) = (&self.replay, self.outflow.clone()) else {
            return Box::pin(async {});
        };
        let lines = std::mem::take(&mut *lock(&replay.batch));
        Box::pin(async move {
            if lines.is_empty() {
                return;
            }
            // Lines serde_json wrote: UTF-8.
            let Ok(lines) = String::from_utf8(lines) else {
                return tracing::warn!("a replay's lines are not UTF-8; not sent");
            };
            if !outflow.pass(lines).await {
                tracing::debug!("cannot send a replay (client gone?)");
            }
        })
    }

    fn emit(&self, event: SessionEvent) {
        if self.compaction
            && let Some(update) = to_acp::compaction_update(&event)
        {
            return self.send(update);
        }
        if self.subagents {
            if let Some(update) = to_acp::subagent_update(&event) {
                return self.send(update);
            }
            // Its child thread shows what it does.
            if matches!(event, SessionEvent::SubagentProgress { .. }) {
                return;
            }
        }
        if self.terminal_output
            && let Some(replay) = &self.replay
            && let Some(update) = wire::update_of(&event)
        {
            // The kinds a replay sends most, written straight from the event.
            append_line(&replay.batch, |out| wire::write_update(out, &replay.head, update));
            return self.remember_card(wire::card_drawn(&event));
        }
        let update = if self.terminal_output {
            to_acp::update_with_terminal(event)
        } else {
            to_acp::update_with_console(event, &mut lock(&self.consoles))
        };
        let Some(mut update) = update else { return };
        if !self.subagents {
            to_acp::without_child_links(&mut update);
        }
        self.remember_card(to_acp::card_drawn(&update));
        self.send(update);
    }

    fn child(&self, child: &crate::session::SessionId) -> Option<Arc<dyn EventSink>> {
        self.subagents.then(|| {
            let batch = self.replay.as_ref().map(|replay| Arc::clone(&replay.batch));
            Arc::new(self.port(child.clone(), batch)) as Arc<dyn EventSink>
        })
    }

    fn mode_changed(&self, mode: &str) {
        use agent_client_protocol::v1::schema::CurrentModeUpdate;
        self.send(SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(mode.to_owned())));
    }

    fn title_changed(&self, title: &str) {
        use agent_client_protocol::v1::schema::SessionInfoUpdate;
        self.send(SessionUpdate::SessionInfoUpdate(
            SessionInfoUpdate::new().title(title.to_owned()),
        ));
    }

    fn ask(&self, question: Question) -> futures::future::BoxFuture<'static, Reply> {
        self.ask_question(question)
    }

    fn ask_escalation(
        &self,
        ask: EscalationAsk,
    ) -> futures::future::BoxFuture<'static, EscalationAnswer> {
        let asked = self.request(to_acp::escalation_request(&self.session_id.0, &ask));
        let drawn = lock(&self.open_cards).get(&ask.call_id).cloned().unwrap_or_default();
        let (cx, session_id) = (self.cx.clone(), self.wire_id.clone());
        let outflow = self.outflow.clone();
        Box::pin(async move {
            use agent_client_protocol::v1::schema::{ToolCallStatus, ToolCallUpdate};
            let answer = asked.await;
            // The card was pending while the user decided; the call goes on (to run, or to
            // fail with the refusal) and its last update closes it. It gets back, in the same
            // update, the title, kind and content it was drawn with (the request replaced
            // them): a terminal card its terminal, as a reloaded thread shows it.
            let going_on =
                ToolCallUpdate::new(ask.call_id.clone(), drawn.status(ToolCallStatus::InProgress));
            let update = SessionUpdate::ToolCallUpdate(going_on);
            send_update(&cx, outflow.as_deref(), SessionNotification::new(session_id, update));
            match reply_of(answer) {
                Reply::Chose(option) => match option.as_str() {
                    to_acp::ALLOW_ONCE => EscalationAnswer::AllowedOnce,
                    to_acp::ALLOW_SESSION => EscalationAnswer::AllowedForSession,
                    to_acp::ALLOW_PROJECT => EscalationAnswer::AllowedInProject,
                    _ => EscalationAnswer::Rejected,
                },
                Reply::Cancelled => EscalationAnswer::Cancelled,
                Reply::Unavailable => EscalationAnswer::Unavailable,
            }
        })
    }
}

/// What the user answered a `session/request_permission`: the option chosen; `Cancelled`
/// for a withdrawn request or an outcome a later protocol adds (never an allowance);
/// `Unavailable` when the client could not ask.
fn reply_of(
    answer: Result<agent_client_protocol::v1::schema::RequestPermissionResponse, String>,
) -> Reply {
    use agent_client_protocol::v1::schema::RequestPermissionOutcome;
    match answer {
        Ok(response) => match response.outcome {
            RequestPermissionOutcome::Selected(selected) => {
                Reply::Chose(selected.option_id.0.to_string())
            }
            _ => Reply::Cancelled,
        },
        Err(error) => {
            tracing::info!(%error, "the client could not ask the user");
            Reply::Unavailable
        }
    }
}

impl AcpSink {
    /// Another port to the same client, for `session_id`, with cards of its own: a
    /// subagent's thread, or a replay (`replay`: its batch).
    fn port(&self, session_id: SessionId, replay: Option<Arc<Mutex<Vec<u8>>>>) -> AcpSink {
        let replay = replay.map(|batch| Replay { batch, head: wire::LineHead::of(&session_id.0) });
        AcpSink {
            cx: self.cx.clone(),
            wire_id: agent_client_protocol::v1::schema::SessionId::new(session_id.0.as_str()),
            session_id,
            terminal_output: self.terminal_output,
            fs: self.fs,
            compaction: self.compaction,
            subagents: self.subagents,
            consoles: Arc::default(),
            open_cards: Arc::default(),
            outflow: self.outflow.clone(),
            replay,
        }
    }

    /// Asks `question` on a card of its own: drawn pending, closed with the answer.
    fn ask_question(&self, question: Question) -> futures::future::BoxFuture<'static, Reply> {
        use agent_client_protocol::v1::schema::{ToolCall, ToolCallStatus, ToolCallUpdate};
        let request = to_acp::question_request(&self.session_id.0, &question);
        // The card exists before the request names it.
        let card = ToolCall::new(
            question.call_id.clone(),
            request.tool_call.fields.title.clone().unwrap_or_default(),
        )
        .kind(agent_client_protocol::v1::schema::ToolKind::Other)
        .status(ToolCallStatus::Pending);
        self.send(SessionUpdate::ToolCall(card));
        let asked = self.request(request);
        let (cx, session_id) = (self.cx.clone(), self.wire_id.clone());
        let outflow = self.outflow.clone();
        Box::pin(async move {
            let reply = reply_of(asked.await);
            let status = match &reply {
                Reply::Chose(_) => ToolCallStatus::Completed,
                Reply::Cancelled | Reply::Unavailable => ToolCallStatus::Failed,
            };
            let fields = ToolCallUpdateFields::new().status(status);
            let update =
                SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(question.call_id, fields));
            send_update(&cx, outflow.as_deref(), SessionNotification::new(session_id, update));
            reply
        })
    }

    /// Keeps what an open card was drawn with (`open_cards`), until it closes.
    fn remember_card(&self, drawn: to_acp::CardDrawn) {
        match drawn {
            to_acp::CardDrawn::Opened(id, fields) => {
                lock(&self.open_cards).insert(id, *fields);
            }
            to_acp::CardDrawn::Closed(id) => {
                lock(&self.open_cards).remove(&id);
            }
            to_acp::CardDrawn::Neither => {}
        }
    }

    /// What a client shows of a session besides its thread, sent when the session is created,
    /// loaded or resumed: the slash commands, the title, the context use.
    /// `window`: the context window of the model the session uses now, which the context
    /// use shows (the one logged may be another model's: a profile that is gone).
    fn announce(&self, session: &crate::session::Session, window: u64) {
        use agent_client_protocol::v1::schema::{
            AvailableCommand, AvailableCommandInput, AvailableCommandsUpdate, SessionUpdate,
            UnstructuredCommandInput,
        };
        let commands = hotsh_core::commands::COMMANDS
            .iter()
            .map(|command| {
                let listed = AvailableCommand::new(command.name, command.description);
                match command.hint {
                    Some(hint) => listed.input(AvailableCommandInput::Unstructured(
                        UnstructuredCommandInput::new(hint),
                    )),
                    None => listed,
                }
            })
            .collect();
        self.send(SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(commands)));
        if let Some(title) = session.title() {
            self.title_changed(&title);
        }
        if let Some(mut shown) = session.context_shown() {
            shown.size = window;
            self.emit(SessionEvent::Usage(shown));
        }
    }

    /// Sends `request` to the client; the answer, or the error as text.
    fn request<R: agent_client_protocol::JsonRpcRequest + 'static>(
        &self,
        request: R,
    ) -> futures::future::BoxFuture<'static, Result<R::Response, String>>
    where
        R::Response: Send,
    {
        let cx = self.cx.clone();
        Box::pin(async move {
            cx.send_request(request).block_task().await.map_err(|error| error.to_string())
        })
    }

    fn send(&self, update: agent_client_protocol::v1::schema::SessionUpdate) {
        let notification = SessionNotification::new(self.wire_id.clone(), update);
        let Some(replay) = &self.replay else {
            return send_update(&self.cx, self.outflow.as_deref(), notification);
        };
        append_line(&replay.batch, |out| transport::write_update_line(out, &notification));
    }
}

/// Appends a line to a replay's batch, written by `write` (nothing of it when it fails).
fn append_line(batch: &Mutex<Vec<u8>>, write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>) {
    let mut batch = lock(batch);
    let length = batch.len();
    if length > 0 {
        batch.push(b'\n');
    } else {
        // Room for a whole batch at once (it used to double its way there from nothing,
        // each step a copy, and past 64 KiB a sweep of the allocator's small free chunks).
        batch.reserve(REPLAY_BATCH + REPLAY_BATCH / 4);
    }
    if let Err(error) = write(&mut batch) {
        batch.truncate(length);
        tracing::warn!(%error, "cannot serialise a replayed update");
    }
}

/// Hands a `session/update` to the SDK, counted on its way out.
fn send_update(
    cx: &ConnectionTo<Client>,
    outflow: Option<&transport::Outflow>,
    notification: SessionNotification,
) {
    match cx.send_notification(notification) {
        Ok(()) => {
            if let Some(outflow) = outflow {
                outflow.sent();
            }
        }
        Err(error) => tracing::debug!(%error, "cannot send session/update (client gone?)"),
    }
}

/// Serves ACP on stdin and `stdout` (the protocol's private descriptor, see
/// [`claim_stdout`]) until the client closes stdin.
pub(crate) async fn serve_stdio(host: Arc<Host>, stdout: std::fs::File) -> anyhow::Result<()> {
    let stdin = std::io::BufReader::with_capacity(64 << 10, std::io::stdin());
    let outflow = Arc::new(transport::Outflow::default());
    let (transport, writer) =
        transport::lines(stdin, stdout, host.recorder.clone(), Arc::clone(&outflow));
    let served = agent(host, Some(outflow))
        .connect_to(transport)
        .await
        .map_err(|e| anyhow::anyhow!("ACP connection failed: {e}"));
    // Every message handed to the transport reaches the client before the agent exits.
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    served
}
