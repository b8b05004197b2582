//! A small MCP server for the tests, speaking JSON-RPC by hand so that it can also misbehave
//! on purpose: over stdio (the `mcp-fixture` binary) or streamable HTTP on loopback
//! ([`HttpServer`], a thread in the test process).
//!
//! Its tools: `echo {text}` (read-only), `env {name}`, `pid`, `rich` (every content type),
//! `oops` (an `isError` result), `hang` (never answers), `crash` (exits 3), `garbage` (answers
//! a line that is not JSON), `grow` (adds the tool `late` and says the list changed), and
//! `slow {ms}`, `cancelled` (how many `notifications/cancelled` arrived).

use serde_json::{Value, json};
use std::io::{BufRead as _, Write as _};
use std::sync::{Arc, Mutex};

/// How the server behaves when the client starts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Answers `initialize`.
    Ok,
    /// Never answers `initialize`.
    Hang,
    /// Writes to stderr and exits 2 before answering.
    Exit,
    /// Answers `initialize` with a line that is not JSON.
    Garbage,
    /// Like `Ok`, and also offers `echo.twice`, `echo_twice` and `echo twice`, whose names
    /// are one once made of the characters models accept, and `down__echo`, which a server
    /// named `<name>__down` offering `echo` would clash with.
    Colliding,
}

impl Start {
    fn parse(text: &str) -> Self {
        match text {
            "hang" => Self::Hang,
            "exit" => Self::Exit,
            "garbage" => Self::Garbage,
            "colliding" => Self::Colliding,
            _ => Self::Ok,
        }
    }
}

/// What the server does with one message.
enum Action {
    Reply(Value),
    /// Reply, then notify.
    ReplyThenNotify(Value, Value),
    Nothing,
    Hang,
    Garbage,
    Exit(i32),
}

/// The server's state: its tools (grown by `grow`) and how it starts.
#[derive(Debug)]
pub struct Fixture {
    name: String,
    start: Start,
    grown: bool,
    /// How many `notifications/cancelled` arrived.
    cancelled: u32,
}

impl Fixture {
    pub fn new(name: &str, start: Start) -> Self {
        Self { name: name.to_owned(), start, grown: false, cancelled: 0 }
    }

    fn tools(&self) -> Value {
        let object = |properties: Value| json!({"type": "object", "properties": properties});
        let mut tools = vec![
            json!({"name": "echo", "description": "Says the text back.", "inputSchema": object(json!({"text": {"type": "string"}})), "annotations": {"title": "Echo", "readOnlyHint": true}}),
            json!({"name": "env", "description": "The value of an environment variable.", "inputSchema": object(json!({"name": {"type": "string"}}))}),
            json!({"name": "pid", "description": "The server's process id.", "inputSchema": object(json!({}))}),
            json!({"name": "rich", "description": "Every kind of content.", "inputSchema": object(json!({}))}),
            json!({"name": "oops", "description": "Fails.", "inputSchema": object(json!({}))}),
            json!({"name": "hang", "description": "Never answers.", "inputSchema": object(json!({}))}),
            json!({"name": "crash", "description": "Exits mid-call.", "inputSchema": object(json!({}))}),
            json!({"name": "garbage", "description": "Answers something that is not JSON.", "inputSchema": object(json!({}))}),
            json!({"name": "grow", "description": "Adds a tool.", "inputSchema": object(json!({}))}),
            json!({"name": "slow", "description": "Answers after `ms` milliseconds.", "inputSchema": object(json!({"ms": {"type": "integer"}}))}),
            json!({"name": "cancelled", "description": "How many calls the client cancelled.", "inputSchema": object(json!({}))}),
        ];
        if self.grown {
            tools.push(json!({"name": "late", "description": "Added by grow.", "inputSchema": object(json!({}))}));
        }
        if self.start == Start::Colliding {
            for name in ["echo.twice", "echo_twice", "echo twice", "down__echo"] {
                tools.push(json!({"name": name, "description": "Says its name.", "inputSchema": object(json!({}))}));
            }
        }
        json!({ "tools": tools })
    }

    fn handle(&mut self, message: &Value) -> Action {
        let id = message.get("id").cloned();
        let method = message.get("method").and_then(Value::as_str).unwrap_or_default();
        let Some(id) = id else {
            if method == "notifications/cancelled" {
                self.cancelled += 1;
            }
            return Action::Nothing;
        };
        let reply =
            |result: Value| Action::Reply(json!({"jsonrpc": "2.0", "id": id, "result": result}));
        let text = |text: String| json!({"content": [{"type": "text", "text": text}]});
        match method {
            "initialize" => match self.start {
                Start::Hang => Action::Hang,
                Start::Exit => {
                    eprintln!("fixture {}: refusing to start", self.name);
                    Action::Exit(2)
                }
                Start::Garbage => Action::Garbage,
                Start::Ok | Start::Colliding => {
                    let version = message["params"]["protocolVersion"].clone();
                    reply(json!({
                        "protocolVersion": version,
                        "capabilities": {"tools": {"listChanged": true}},
                        "serverInfo": {"name": self.name, "version": "1.0.0"}
                    }))
                }
            },
            "ping" => reply(json!({})),
            "tools/list" => reply(self.tools()),
            "tools/call" => {
                let arguments = &message["params"]["arguments"];
                let argument = |name: &str| {
                    arguments.get(name).and_then(Value::as_str).unwrap_or_default().to_owned()
                };
                match message["params"]["name"].as_str().unwrap_or_default() {
                    "echo" => reply(text(format!("{} says: {}", self.name, argument("text")))),
                    called @ ("echo.twice" | "echo_twice" | "echo twice" | "down__echo") => {
                        reply(text(format!("{} ran `{called}`", self.name)))
                    }
                    "env" => reply(text(
                        std::env::var(argument("name")).unwrap_or_else(|_| "(unset)".to_owned()),
                    )),
                    "pid" => reply(text(std::process::id().to_string())),
                    "rich" => reply(json!({"content": [
                        {"type": "text", "text": "a picture:"},
                        {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
                        {"type": "resource", "resource": {"uri": "file:///notes.txt", "mimeType": "text/plain", "text": "the notes"}},
                        {"type": "resource_link", "uri": "file:///big.bin", "name": "big.bin"}
                    ]})),
                    "oops" => reply(
                        json!({"content": [{"type": "text", "text": "it went wrong"}], "isError": true}),
                    ),
                    "hang" => Action::Hang,
                    "crash" => {
                        eprintln!("fixture {}: crashing on purpose", self.name);
                        Action::Exit(3)
                    }
                    "garbage" => Action::Garbage,
                    "grow" => {
                        self.grown = true;
                        Action::ReplyThenNotify(
                            json!({"jsonrpc": "2.0", "id": id, "result": text("grown".to_owned())}),
                            json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
                        )
                    }
                    "late" => reply(text("the late tool answers".to_owned())),
                    "cancelled" => reply(text(self.cancelled.to_string())),
                    "slow" => {
                        let ms = arguments.get("ms").and_then(Value::as_u64).unwrap_or(0);
                        std::thread::sleep(std::time::Duration::from_millis(ms));
                        reply(text(format!("slept {ms} ms")))
                    }
                    other => Action::Reply(
                        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": format!("unknown tool {other}")}}),
                    ),
                }
            }
            other => Action::Reply(
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("unknown method {other}")}}),
            ),
        }
    }
}

/// The stdio server: `mcp-fixture NAME [ok|hang|exit|garbage]`. Messages are lines.
pub fn stdio_main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().cloned().unwrap_or_else(|| "fixture".to_owned());
    let mut fixture = Fixture::new(&name, Start::parse(args.get(1).map_or("ok", String::as_str)));
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    let mut write = |value: &Value| {
        let _ = writeln!(stdout, "{value}").and_then(|()| stdout.flush());
    };
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(message) = serde_json::from_str::<Value>(&line) else { continue };
        match fixture.handle(&message) {
            Action::Reply(value) => write(&value),
            Action::ReplyThenNotify(value, notification) => {
                write(&value);
                write(&notification);
            }
            // A request left unanswered; the server goes on reading.
            Action::Nothing | Action::Hang => {}
            Action::Garbage => {
                let _ = writeln!(std::io::stdout(), "this is not json {{");
                let _ = std::io::stdout().flush();
            }
            Action::Exit(code) => std::process::exit(code),
        }
    }
}

/// The streamable HTTP server on loopback: each POST is answered with JSON (or 202 for a
/// notification); GET (the server's own stream) is not offered (405).
#[derive(Debug)]
pub struct HttpServer {
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    /// The header values of `x-fixture-token` received, in order.
    pub tokens: Arc<Mutex<Vec<String>>>,
}

impl HttpServer {
    pub fn start(name: &str) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
        let fixture = Arc::new(Mutex::new(Fixture::new(name, Start::Ok)));
        let tokens = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&tokens);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let (fixture, seen) = (Arc::clone(&fixture), Arc::clone(&seen));
                std::thread::spawn(move || {
                    let Some(request) = crate::read_request(&mut stream, true) else { return };
                    if let Some(token) = request.header("x-fixture-token") {
                        seen.lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push(token.to_owned());
                    }
                    let respond = |stream: &mut std::net::TcpStream, status: &str, body: &str| {
                        let _ = write!(
                            stream,
                            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    };
                    if request.method != "POST" {
                        respond(&mut stream, "405 Method Not Allowed", "");
                        return;
                    }
                    let action = fixture
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .handle(&request.body);
                    match action {
                        Action::Reply(value) | Action::ReplyThenNotify(value, _) => {
                            respond(&mut stream, "200 OK", &value.to_string());
                        }
                        Action::Nothing => respond(&mut stream, "202 Accepted", ""),
                        Action::Hang => std::thread::sleep(std::time::Duration::from_secs(3600)),
                        Action::Garbage => respond(&mut stream, "200 OK", "this is not json {"),
                        Action::Exit(_) => {}
                    }
                });
            }
        });
        Self { url, tokens }
    }
}
