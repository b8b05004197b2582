//! The use cases every front end calls (the ACP agent, and through it `hotsh run`): admit a
//! prompt and answer it, cancel, switch a session's mode or one of its options, finish opening
//! a session. The protocol layer only converts: what is checked, logged and done, and in
//! which order, is decided here, over the [`Backend`] port the host implements (what a turn
//! works with, what it offers, what it starts for a session).

use crate::commands::SlashCommand;
use crate::sandbox::Mode;
use crate::session::fold::Folded;
use crate::session::{
    Busy, EventSink, Fact, Narrowing, ParentLink, Prompt, Session, SessionEvent, SessionId,
    StopReason,
};
use crate::turn::{Turn, TurnFailed, Work};
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The ACP mode ids.
pub use crate::session::{DEFAULT_MODE, PLAN_MODE};

/// The option ids a session offers.
pub const MODEL_OPTION: &str = "model";
pub const EFFORT_OPTION: &str = "reasoning_effort";
pub const SANDBOX_OPTION: &str = "sandbox_mode";

/// Where a session's thread goes as its log is read (see [`Backend::open`]).
pub type ThreadParts = tokio::sync::mpsc::Sender<ThreadPart>;

/// A part of a session's thread as its log is read.
#[derive(Debug)]
pub enum ThreadPart {
    /// The session's folder, first: the cards are drawn again there.
    Folder(std::path::PathBuf),
    /// Events of the thread, final, in order.
    Events(Vec<SessionEvent>),
}

/// Draws a thread's cards anew, part after part (a call's final card finds the call its
/// first card was drawn for in an earlier part).
pub trait Presenter: Send {
    fn present(&mut self, view: Vec<SessionEvent>) -> BoxFuture<'_, Vec<SessionEvent>>;
}

/// What the use cases need of the host.
pub trait Backend: Send + Sync {
    /// What a turn of `session` works with now (its model, tools, hooks, ports).
    fn turn(&self, session: &Session) -> Turn;

    /// Gets `session`'s commands ready to run (its sandbox environment), in the background.
    fn prepare(&self, session: &Arc<Session>);

    /// The answer to a command the host answers itself (`/permissions`, `/hooks`).
    fn answer_command<'a>(
        &'a self,
        session: &'a Arc<Session>,
        command: &'a SlashCommand,
    ) -> BoxFuture<'a, String>;

    /// `session`'s commands were narrowed: the background tasks still running wider are
    /// named.
    fn narrowed<'a>(&'a self, session: &'a Session, narrowing: Narrowing) -> BoxFuture<'a, ()>;

    /// What `session` may choose among now.
    fn offer(&self, session: &Session) -> Offer;

    /// A session was opened from its log (loaded or resumed): what the host owes it (a model
    /// that is gone, said once).
    fn reopened<'a>(&'a self, session: &'a Session) -> BoxFuture<'a, ()>;

    /// A new session in `cwd`, its log created (its first record on disk) before anything
    /// else; `parent`: it is a subagent of that session (its first record says so).
    fn create(
        &self,
        cwd: std::path::PathBuf,
        parent: Option<ParentLink>,
    ) -> Result<Arc<Session>, Refused>;

    /// The sandbox mode `session`'s commands run under now (its choice, else the agent's
    /// default).
    fn sandbox_mode(&self, session: &Session) -> Mode;

    /// The session `id` opened from its log (or the one open here), `sink` attached with its
    /// live events held until [`Session::release_held`]; what its log folds to. With
    /// `thread`, the thread goes there as the log is read (its folder first, then its events
    /// once final, in order), and the folded view holds only what did not.
    fn open<'a>(
        &'a self,
        id: &'a str,
        sink: Arc<dyn EventSink>,
        thread: Option<ThreadParts>,
    ) -> BoxFuture<'a, Result<(Arc<Session>, Folded), Refused>>;

    /// Draws the thread of session `id` (in `cwd`) as the client is shown it again: the
    /// cards drawn anew by their tools.
    fn presenter(&self, id: &SessionId, cwd: &std::path::Path) -> Box<dyn Presenter>;

    /// A new session in `cwd` whose history is session `id`'s as it stands (what it logged so
    /// far), with its mode, model and options.
    fn fork<'a>(
        &'a self,
        id: &'a SessionId,
        cwd: std::path::PathBuf,
    ) -> BoxFuture<'a, Result<Arc<Session>, Refused>>;

    /// The thread of session `id` as its log has it (its cards drawn anew), without opening
    /// it: a subagent's, shown with its parent's.
    fn thread<'a>(&'a self, id: &'a SessionId)
    -> BoxFuture<'a, Result<Vec<SessionEvent>, Refused>>;

    /// Closes the session `id` open here (its hooks told, its tasks stopped, its log
    /// released); whether it was open here.
    fn close<'a>(&'a self, id: &'a SessionId) -> BoxFuture<'a, bool>;

    /// Deletes the session `id` (closed first when it is open here): its log and files are
    /// removed. Refused while it runs background tasks or a turn, naming them, or while
    /// another agent has it open.
    fn delete<'a>(&'a self, id: &'a SessionId) -> BoxFuture<'a, Result<(), Refused>>;
}

/// The choices a session has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Offer {
    /// The models, by name.
    pub models: Vec<String>,
    /// The reasoning-effort levels of its model (empty: no choice).
    pub efforts: Vec<String>,
    /// Whether commands can be sandboxed here (the sandbox option is offered).
    pub sandbox: bool,
    /// The widest sandbox mode this agent allows.
    pub max_mode: Option<Mode>,
}

/// A request a use case refused: the message says why, for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The request names something that is not there, or a value out of its range.
    #[error("{0}")]
    Invalid(String),
    /// A turn runs already.
    #[error("{0}")]
    Busy(String),
    /// What it changed cannot be saved: it would not survive a restart.
    #[error("{0}")]
    NotSaved(String),
    /// Something the host needed failed (a session's log that cannot be read, say).
    #[error("{0}")]
    Failed(String),
}

impl From<Busy> for Refused {
    fn from(busy: Busy) -> Self {
        Refused::Busy(busy.to_string())
    }
}

/// A prompt admitted: its turn begun (logged, the session's slot taken), to be answered with
/// [`answer`].
#[derive(Debug)]
pub struct Admitted {
    pub turn: Turn,
    asked: Asked,
    /// Cancels the turn.
    pub cancel: CancellationToken,
    /// The session's title, when this prompt gave it one.
    pub titled: Option<String>,
}

/// What a prompt asks for, known before its turn begins.
#[derive(Debug)]
enum Asked {
    Work(Work),
    /// A command the host answers (logged as the command; the model is not asked).
    Command(SlashCommand),
}

/// Admits `prompt` into `session`: what it asks (a slash command or the model), logged as
/// the turn's opening record; `Busy` while another turn runs. Begun before it is answered, so
/// that a cancel that follows finds it.
pub async fn admit(
    backend: &dyn Backend,
    session: &Arc<Session>,
    prompt: Prompt,
) -> Result<Admitted, Refused> {
    if let Some(failure) = session.log_failure() {
        return Err(Refused::NotSaved(failure.to_string()));
    }
    let (opening, asked) = match crate::commands::parse(&prompt.text) {
        Some(SlashCommand::Compact { focus }) => (
            Fact::Command { text: prompt.text, blocks: prompt.blocks },
            Asked::Work(Work::Compact { focus }),
        ),
        Some(SlashCommand::Init { extra }) => (
            Fact::Prompt(Prompt { text: crate::commands::init_prompt(extra.as_deref()), ..prompt }),
            Asked::Work(Work::Prompt),
        ),
        Some(command @ (SlashCommand::Permissions { .. } | SlashCommand::Hooks)) => {
            (Fact::Command { text: prompt.text, blocks: prompt.blocks }, Asked::Command(command))
        }
        None => (Fact::Prompt(prompt), Asked::Work(Work::Prompt)),
    };
    let turn = backend.turn(session);
    let untitled = session.title().is_none();
    let cancel = session.begin_turn(opening, |task| turn.ports.end_reported(task)).await?;
    let titled = if untitled { session.title() } else { None };
    if let (Some(title), Some(sink)) = (&titled, session.sink()) {
        sink.title_changed(title);
    }
    // The session's commands get ready while the model thinks (a no-op when they are): a
    // session that is only opened, never prompted, starts nothing.
    backend.prepare(session);
    Ok(Admitted { turn, asked, cancel, titled })
}

/// Answers an admitted prompt: runs its turn (or the command's answer) to its end, which is
/// logged and frees the session for the next prompt.
pub async fn answer(
    backend: &dyn Backend,
    session: &Arc<Session>,
    admitted: Admitted,
) -> Result<StopReason, TurnFailed> {
    let Admitted { turn, asked, cancel, .. } = admitted;
    let work = match asked {
        Asked::Work(work) => work,
        Asked::Command(command) => {
            Work::Say { text: backend.answer_command(session, &command).await }
        }
    };
    crate::turn::answer(&turn, session, work, cancel).await
}

/// Cancels `session`'s running turn (logged in the session's order); whether one ran.
pub async fn cancel(session: &Session) -> bool {
    session.cancel_turn().await
}

/// Enters or leaves plan mode (`mode` is `default` or `plan`), logged before it is answered;
/// entering it names the background tasks still running with more access.
pub async fn set_mode(backend: &dyn Backend, session: &Session, mode: &str) -> Result<(), Refused> {
    let planning = match mode {
        PLAN_MODE => true,
        DEFAULT_MODE => false,
        other => {
            return Err(Refused::Invalid(format!(
                "unknown mode `{other}`; the modes are {DEFAULT_MODE} and {PLAN_MODE}"
            )));
        }
    };
    let was_planning = session.set_planning(planning).await;
    if planning && !was_planning {
        backend.narrowed(session, Narrowing::PlanMode).await;
    }
    saved(session).await?;
    if let Some(sink) = session.sink() {
        sink.mode_changed(mode);
    }
    Ok(())
}

/// Sets one of `session`'s options (its model, reasoning effort or sandbox mode) to `value`,
/// logged before it is answered (so it survives a restart).
pub async fn set_option(
    backend: &dyn Backend,
    session: &Arc<Session>,
    option: &str,
    value: &str,
) -> Result<(), Refused> {
    let offer = backend.offer(session);
    match option {
        SANDBOX_OPTION if offer.sandbox => {
            let Some(mode) = Mode::parse(value) else {
                return Err(Refused::Invalid(format!(
                    "unknown sandbox mode `{value}`; the modes are read-only, workspace-write and danger-full-access"
                )));
            };
            if let Some(max) = offer.max_mode.filter(|max| mode > *max) {
                let why = match &session.parent {
                    Some(parent) => format!(
                        "this subagent may not run wider than its parent session {} did when it started it ({max} at most)",
                        parent.session_id
                    ),
                    None => format!("this agent allows {max} at most (its `[sandbox] max_mode`)"),
                };
                return Err(Refused::Invalid(format!(
                    "sandbox mode `{mode}` is not allowed here: {why}"
                )));
            }
            session.choose_sandbox_mode(mode).await;
            backend.narrowed(session, Narrowing::SandboxMode(mode)).await;
            backend.prepare(session);
        }
        EFFORT_OPTION => {
            if !offer.efforts.iter().any(|level| level == value) {
                let offered = if offer.efforts.is_empty() {
                    "this session's model offers no levels".to_owned()
                } else {
                    format!("the levels are {}", offer.efforts.join(", "))
                };
                return Err(Refused::Invalid(format!("unknown effort `{value}`; {offered}")));
            }
            session.choose_effort(value.to_owned()).await;
        }
        MODEL_OPTION => {
            if !offer.models.iter().any(|name| name == value) {
                return Err(Refused::Invalid(format!(
                    "unknown model `{value}`; the models are: {}",
                    offer.models.join(", ")
                )));
            }
            session.choose_model(value.to_owned()).await;
        }
        other => {
            let known = if offer.sandbox {
                "`model`, `reasoning_effort` (for models with levels) and `sandbox_mode`"
            } else {
                "`model` and `reasoning_effort` (for models with levels)"
            };
            return Err(Refused::Invalid(format!("unknown option `{other}`; hotsh has {known}")));
        }
    }
    saved(session).await
}

/// Opens a new session in `cwd` (an absolute path to an existing folder), attached to the
/// client port `sink_for` makes for it.
pub async fn open_new(
    backend: &dyn Backend,
    cwd: std::path::PathBuf,
    sink_for: impl FnOnce(&Session) -> Arc<dyn EventSink>,
) -> Result<Arc<Session>, Refused> {
    check_cwd(&cwd).map_err(Refused::Invalid)?;
    let session = backend.create(cwd, None)?;
    session.attach(sink_for(&session));
    Ok(session)
}

/// Forks the session `id` into a new session in `cwd`, attached to the client port `sink_for`
/// makes for it: its history is the source's up to now, its mode, model and options the
/// source's; from here the two go on independently.
pub async fn fork(
    backend: &dyn Backend,
    id: &SessionId,
    cwd: std::path::PathBuf,
    sink_for: impl FnOnce(&Session) -> Arc<dyn EventSink>,
) -> Result<Arc<Session>, Refused> {
    check_cwd(&cwd).map_err(Refused::Invalid)?;
    let session = backend.fork(id, cwd).await?;
    session.attach(sink_for(&session));
    Ok(session)
}

/// Opens a subagent of `parent`: a new session in the parent's folder, linked to it by `link`
/// (its log's first record), attached to `sink`. It is never wider than its parent: it
/// starts in the parent's sandbox mode (the widest it may choose, `link.max_mode`) and plan
/// mode, with `model` (an agent definition's, when this agent offers it) or the parent's
/// model, and the parent's effort.
pub async fn open_child(
    backend: &dyn Backend,
    parent: &Session,
    mut link: ParentLink,
    model: Option<String>,
    sink: Arc<dyn EventSink>,
) -> Result<Arc<Session>, Refused> {
    let mode = backend.sandbox_mode(parent);
    link.max_mode = Some(link.max_mode.map_or(mode, |max| max.min(mode)));
    let child = backend.create(parent.cwd.clone(), Some(link))?;
    child.attach(sink);
    let offered = backend.offer(parent).models;
    if let Some(model) = model.filter(|m| offered.contains(m)).or_else(|| parent.model_choice()) {
        child.choose_model(model).await;
    }
    if let Some(effort) = parent.effort_choice() {
        child.choose_effort(effort).await;
    }
    if backend.offer(parent).sandbox {
        child.choose_sandbox_mode(mode).await;
    }
    if parent.planning() {
        child.set_planning(true).await;
    }
    saved(&child).await?;
    Ok(child)
}

/// Loads the session `id` for the client of `sink`: the thread as it was goes to the client
/// first (its cards drawn anew), streamed as the log is read, then the session goes on here.
/// A log found damaged part way is refused after the thread before the damage was shown.
pub async fn load(
    backend: &dyn Backend,
    id: &str,
    sink: Arc<dyn EventSink>,
) -> Result<(Arc<Session>, usize), Refused> {
    let port = sink.replay_port().unwrap_or_else(|| Arc::clone(&sink));
    let (parts, mut read) = tokio::sync::mpsc::channel(THREAD_PARTS_AHEAD);
    let mut thread = Thread { backend, port, shown: Default::default(), sent: 0 };
    let own_id = SessionId(id.to_owned());
    let opening = backend.open(id, sink, Some(parts));
    let replaying = async {
        let mut presenter: Option<Box<dyn Presenter>> = None;
        // A part drawn and not sent yet: it goes while the next part is drawn, when the
        // next part is there already (the drawing runs on a thread of its own), else before
        // waiting for the next part.
        let mut drawn: Option<Vec<SessionEvent>> = None;
        loop {
            let part = match read.try_recv() {
                Ok(part) => part,
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => {
                    if let Some(drawn) = drawn.take() {
                        thread.send(drawn).await;
                    }
                    match read.recv().await {
                        Some(part) => part,
                        None => break,
                    }
                }
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => break,
            };
            match part {
                ThreadPart::Folder(cwd) => presenter = Some(backend.presenter(&own_id, &cwd)),
                ThreadPart::Events(events) => {
                    let before = drawn.take();
                    let sending = async {
                        if let Some(before) = before {
                            thread.send(before).await;
                        }
                    };
                    drawn = Some(match &mut presenter {
                        Some(presenter) => tokio::join!(presenter.present(events), sending).0,
                        None => {
                            sending.await;
                            events
                        }
                    });
                }
            }
        }
        if let Some(drawn) = drawn {
            thread.send(drawn).await;
        }
        presenter
    };
    let (opened, presenter) = tokio::join!(opening, replaying);
    let (session, folded) = match opened {
        Ok(opened) => opened,
        Err(refused) => {
            // What was shown before the damage reaches the client before the refusal.
            thread.port.settle().await;
            return Err(refused);
        }
    };
    let mut presenter = presenter.unwrap_or_else(|| backend.presenter(&session.id, &session.cwd));
    thread.send(presenter.present(folded.view).await).await;
    thread.port.settle().await;
    reopened(backend, &session, &folded.open_tasks).await;
    Ok((session, thread.sent))
}

/// How many parts of a thread being read may wait to be drawn and sent: enough for the
/// reading to go on while a load right after start waits for the plugins to draw with (the
/// host's parts grow to 1,024 records: about 6,000 records ahead); a client that stops
/// reading holds the reading of the log too, at a bounded cost in memory (the parts waiting,
/// at most 8 × 1,024 records; the log itself is read a piece at a time, never held whole).
const THREAD_PARTS_AHEAD: usize = 8;

/// How deep [`send_thread`] follows subagents' threads (past any depth hotsh lets them nest).
const MAX_THREAD_DEPTH: u32 = 8;

/// A thread being sent to a client port, a part at a time.
struct Thread<'a> {
    backend: &'a dyn Backend,
    port: Arc<dyn EventSink>,
    /// The subagents whose threads were shown.
    shown: std::collections::HashSet<SessionId>,
    sent: usize,
}

impl Thread<'_> {
    async fn send(&mut self, view: Vec<SessionEvent>) {
        let port = Arc::clone(&self.port);
        self.sent += send_thread(self.backend, port, view, &mut self.shown, 0).await;
    }
}

/// Sends `view` to `sink`; with a client that shows child threads, each subagent's thread
/// follows its first announcement (those in `shown` were shown before), under its own id
/// (and its own subagents' within it). Returns the events sent.
fn send_thread<'a>(
    backend: &'a dyn Backend,
    sink: Arc<dyn EventSink>,
    view: Vec<SessionEvent>,
    shown: &'a mut std::collections::HashSet<SessionId>,
    depth: u32,
) -> BoxFuture<'a, usize> {
    Box::pin(async move {
        let mut sent = 0;
        for event in view {
            let child = match &event {
                SessionEvent::Subagent { child, .. }
                    if depth < MAX_THREAD_DEPTH && shown.insert(child.clone()) =>
                {
                    sink.child(child).map(|port| (child.clone(), port))
                }
                _ => None,
            };
            sink.room().await;
            sink.emit(event);
            sent += 1;
            let Some((child, port)) = child else { continue };
            match backend.thread(&child).await {
                Ok(thread) => {
                    let mut within = std::collections::HashSet::new();
                    sent += send_thread(backend, port, thread, &mut within, depth + 1).await;
                }
                Err(refused) => {
                    tracing::warn!(%child, %refused, "a subagent's thread cannot be shown");
                }
            }
        }
        sent
    })
}

/// Resumes the session `id` for the client of `sink`, without a replay. The caller answers
/// the client first (a client drops updates about a session it does not know yet), then
/// calls [`reopened`] with the tasks returned.
pub async fn resume(
    backend: &dyn Backend,
    id: &str,
    sink: Arc<dyn EventSink>,
) -> Result<(Arc<Session>, Vec<crate::session::fold::OpenTask>), Refused> {
    let (session, folded) = backend.open(id, sink, None).await?;
    Ok((session, folded.open_tasks))
}

/// Closes the session `id` open here; `Invalid` when it is not.
pub async fn close(backend: &dyn Backend, id: &SessionId) -> Result<(), Refused> {
    if backend.close(id).await {
        Ok(())
    } else {
        Err(Refused::Invalid(format!("unknown session: {id}")))
    }
}

/// Deletes the session `id`: see [`Backend::delete`].
pub async fn delete(backend: &dyn Backend, id: &SessionId) -> Result<(), Refused> {
    backend.delete(id).await
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

/// Finishes opening a session from its log, once the client has what it must see first (the
/// replay, or the answer): its held live events go out, the tasks its last agent left
/// running are settled, and what the host owes a reopened session is done.
pub async fn reopened(
    backend: &dyn Backend,
    session: &Session,
    open_tasks: &[crate::session::fold::OpenTask],
) {
    session.release_held().await;
    session.settle_tasks_of_gone_agent(open_tasks).await;
    backend.reopened(session).await;
}

/// Writes what a request changed to the session's log: a change that would not survive a
/// restart is refused.
async fn saved(session: &Session) -> Result<(), Refused> {
    session.flush().await.map_err(|failure| Refused::NotSaved(failure.to_string()))
}
