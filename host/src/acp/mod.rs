//! The ACP bridge: the only module that knows ACP and JSON-RPC (ARCHITECTURE.md, invariant 1).
//!
//! Handlers hold the SDK's dispatch loop, so none of them waits for long: `session/prompt`
//! starts the turn on the runtime and returns, which keeps `session/cancel` flowing while the
//! turn runs.

mod from_acp;
mod to_acp;
mod transport;

pub(crate) use transport::claim_stdout;

use crate::host::Host;
use crate::session::{EventSink, SessionEvent, SessionId};
use crate::sync::lock;
use crate::turn;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, Implementation, InitializeRequest, InitializeResponse,
    NewSessionRequest, NewSessionResponse, PromptRequest, PromptResponse, SessionNotification,
};
use agent_client_protocol::{Agent, Client, ConnectTo, Error, ErrorCode};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What the client told us about itself in `initialize`.
#[derive(Debug, Default)]
struct ClientFeatures {
    /// Zed's `_meta.terminal_output`: it renders terminals fed by `_meta` updates.
    terminal_output: AtomicBool,
}

/// The ACP agent serving `host`, ready to connect to a transport.
pub(crate) fn agent(host: Arc<Host>) -> impl ConnectTo<Client> {
    let features = Arc::new(ClientFeatures::default());
    let for_new = (Arc::clone(&host), Arc::clone(&features));
    let for_prompt = Arc::clone(&host);
    let for_cancel = host;
    Agent
        .v1()
        .name("hotsh")
        .on_receive_request(
            async move |request: InitializeRequest, responder, _cx| {
                let terminal_output = from_acp::wants_terminal_output(&request);
                features.terminal_output.store(terminal_output, Ordering::Relaxed);
                tracing::debug!(terminal_output, "initialize");
                responder.respond(
                    InitializeResponse::new(request.protocol_version)
                        .agent_capabilities(AgentCapabilities::new())
                        .agent_info(Implementation::new("hotsh", env!("CARGO_PKG_VERSION"))),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: NewSessionRequest, responder, cx| {
                let (host, features) = &for_new;
                if let Err(message) = check_cwd(&request.cwd) {
                    return responder.respond_with_error(invalid_params(message));
                }
                let session = host.new_session(request.cwd);
                let sink: Arc<dyn EventSink> = Arc::new(AcpSink {
                    cx,
                    session_id: session.id.clone(),
                    terminal_output: features.terminal_output.load(Ordering::Relaxed),
                    consoles: Mutex::default(),
                });
                session.attach(sink);
                tracing::info!(session = %session.id, cwd = %session.cwd.display(), "session created");
                responder.respond(NewSessionResponse::new(session.id.0.clone()))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest, responder, _cx| {
                let host = Arc::clone(&for_prompt);
                let id = SessionId(request.session_id.0.to_string());
                let Some(session) = host.session(&id) else {
                    return responder.respond_with_error(invalid_params(format!("unknown session: {id}")));
                };
                let cancel = match session.begin_turn() {
                    Ok(cancel) => cancel,
                    Err(busy) => {
                        return responder.respond_with_error(Error::new(ErrorCode::INVALID_REQUEST, busy.to_string()));
                    }
                };
                let Some(sink) = session.sink() else {
                    session.end_turn();
                    return responder.respond_with_error(Error::internal_error());
                };
                let prompt = from_acp::prompt_text(&request.prompt);
                tokio::spawn(async move {
                    let outcome =
                        turn::guarded(turn::run_turn(&host, &session, prompt, sink, cancel)).await;
                    session.end_turn();
                    tracing::info!(session = %session.id, ?outcome, "turn ended");
                    let _ = match outcome {
                        Ok(stop) => responder.respond(PromptResponse::new(to_acp::stop_reason(stop))),
                        Err(failed) => responder
                            .respond_with_error(Error::new(ErrorCode::INTERNAL_ERROR, failed.0)),
                    };
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |notification: CancelNotification, _cx| {
                let id = SessionId(notification.session_id.0.to_string());
                match for_cancel.session(&id) {
                    Some(session) => {
                        let was_running = session.cancel();
                        tracing::info!(session = %id, was_running, "cancel");
                    }
                    None => tracing::warn!(session = %id, "cancel for an unknown session"),
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
}

/// A session's working directory must be an absolute path to an existing directory.
fn check_cwd(cwd: &std::path::Path) -> Result<(), String> {
    if !cwd.is_absolute() {
        return Err(format!("cwd must be an absolute path, got {}", cwd.display()));
    }
    match std::fs::metadata(cwd) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(format!("cwd {} is not a directory", cwd.display())),
        Err(error) => Err(format!("cwd {} cannot be used: {error}", cwd.display())),
    }
}

fn invalid_params(message: String) -> Error {
    Error::new(ErrorCode::INVALID_PARAMS, message)
}

/// Turns a session's events into `session/update` notifications.
struct AcpSink {
    cx: ConnectionTo<Client>,
    session_id: SessionId,
    terminal_output: bool,
    /// Without terminal support, a command's output so far (bounded), re-sent as the card's
    /// content because ACP content updates replace rather than append.
    consoles: Mutex<HashMap<String, String>>,
}

impl EventSink for AcpSink {
    fn emit(&self, event: SessionEvent) {
        let update = if self.terminal_output {
            to_acp::update_with_terminal(event)
        } else {
            to_acp::update_with_console(event, &mut lock(&self.consoles))
        };
        let Some(update) = update else { return };
        let notification = SessionNotification::new(self.session_id.0.clone(), update);
        if let Err(error) = self.cx.send_notification(notification) {
            tracing::debug!(%error, "cannot send session/update (client gone?)");
        }
    }
}

/// Serves ACP on stdin and `stdout` (the protocol's private descriptor, see
/// [`claim_stdout`]) until the client closes stdin.
pub(crate) async fn serve_stdio(host: Arc<Host>, stdout: std::fs::File) -> anyhow::Result<()> {
    let stdin = std::io::BufReader::with_capacity(64 << 10, std::io::stdin());
    let (transport, writer) = transport::lines(stdin, stdout);
    let served = agent(host)
        .connect_to(transport)
        .await
        .map_err(|e| anyhow::anyhow!("ACP connection failed: {e}"));
    // Every message handed to the transport reaches the client before the agent exits.
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    served
}
