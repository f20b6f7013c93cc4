//! `dsh web` as a browser or a script meets it: the real binary on a free port, its printed
//! address, and plain HTTP/1.0 requests on a socket — so a test sets every header (`Host`,
//! `Origin`, `Cookie`) exactly as an attacker's page or a rebinding DNS name would — and
//! Server-Sent Events read as they arrive.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use crate::PATIENCE;

/// A running `dsh web`.
pub struct WebServer {
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub address: String,
    pub token: String,
}

/// An answer: status, headers (one `name: value` per line, names lower-cased) and body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|err| panic!("not JSON ({err}): {self:?}"))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        let prefix = format!("{}:", name.to_ascii_lowercase());
        self.headers.lines().find_map(|line| line.strip_prefix(&prefix)).map(str::trim)
    }
}

impl WebServer {
    /// Starts `command` (a `dsh web … --port 0 --no-open`) and reads the address it prints.
    pub fn spawn(mut command: Command) -> WebServer {
        command.stdout(Stdio::piped()).stderr(Stdio::inherit()).stdin(Stdio::null());
        let mut child = command.spawn().expect("dsh web starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.trim().strip_prefix("dsh web: http://").unwrap_or_else(|| panic!("printed {line:?}"));
        let (address, token) = url.split_once("/?token=").unwrap_or_else(|| panic!("printed {line:?}"));
        WebServer { child, address: address.to_owned(), token: token.to_owned() }
    }

    pub fn port(&self) -> u16 {
        self.address.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// The cookie the printed address is exchanged for.
    pub fn cookie(&self) -> String {
        format!("dsh_web_{}={}", self.port(), self.token)
    }

    /// The headers the server's own page sends: its host, its origin, its cookie.
    pub fn page_headers(&self) -> Vec<(String, String)> {
        vec![
            ("Host".into(), self.address.clone()),
            ("Origin".into(), format!("http://{}", self.address)),
            ("Cookie".into(), self.cookie()),
        ]
    }

    /// `method path` with exactly `headers` (a JSON body when given).
    pub fn request(&self, method: &str, path: &str, headers: &[(String, String)], body: Option<&str>) -> Reply {
        request_at(&self.address, method, path, headers, body)
    }

    /// Only the status of `method path` (for a request whose connection may stay open, such
    /// as a WebSocket upgrade).
    pub fn status_only(&self, method: &str, path: &str, headers: &[(String, String)]) -> u16 {
        let mut status = String::new();
        BufReader::new(self.send(method, path, headers, None)).read_line(&mut status).unwrap();
        status.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0)
    }

    /// A request as the server's own page makes it.
    pub fn api(&self, method: &str, path: &str, body: Option<&str>) -> Reply {
        self.request(method, path, &self.page_headers(), body)
    }

    /// `GET /api/sessions/{id}/events`, after `last_seen` when given.
    pub fn events(&self, session: &str, last_seen: Option<u64>) -> EventStream {
        self.events_at(&format!("/api/sessions/{session}/events"), last_seen)
    }

    /// An event stream at `path` (its query included), after `last_seen` when given.
    pub fn events_at(&self, path: &str, last_seen: Option<u64>) -> EventStream {
        let mut headers = self.page_headers();
        headers.extend(last_seen.map(|seq| ("Last-Event-ID".to_owned(), seq.to_string())));
        let stream = self.send("GET", path, &headers, None);
        let mut reader = BufReader::new(stream);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(status.contains(" 200 "), "the event stream was refused: {status}");
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line.trim().is_empty() {
                break;
            }
        }
        EventStream { reader }
    }

    fn send(&self, method: &str, path: &str, headers: &[(String, String)], body: Option<&str>) -> TcpStream {
        send_to(&self.address, method, path, headers, body)
    }

    /// Sends SIGKILL and reaps the process.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for the exit code.
    pub fn stop(mut self) -> Option<i32> {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().unwrap().code()
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `method path` on the server at `address` with exactly `headers` (a JSON body when given): an
/// answer of status 0 when the server closed the connection without one.
pub fn request_at(address: &str, method: &str, path: &str, headers: &[(String, String)], body: Option<&str>) -> Reply {
    read_reply(send_to(address, method, path, headers, body))
}

/// The answer the server sends on `stream` (status 0 when it closed the connection without one).
pub fn read_reply(mut stream: TcpStream) -> Reply {
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let (status_line, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    let status = status_line.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let headers = headers.lines().map(lower_name).collect::<Vec<_>>().join("\n");
    Reply { status, headers, body: body.to_owned() }
}

/// Connects to `address` and sends `method path` with exactly `headers` (a JSON body when given).
pub fn send_to(address: &str, method: &str, path: &str, headers: &[(String, String)], body: Option<&str>) -> TcpStream {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut request = format!("{method} {path} HTTP/1.0\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(body) = body {
        request.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body.unwrap_or_default());
    stream.write_all(request.as_bytes()).unwrap();
    stream
}

fn lower_name(line: &str) -> String {
    match line.split_once(':') {
        Some((name, value)) => format!("{}:{value}", name.to_ascii_lowercase()),
        None => line.to_owned(),
    }
}

/// One Server-Sent Event: its type, its `id` when it has one, and its data.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    pub event: String,
    pub id: Option<u64>,
    pub data: String,
}

/// The events of one stream, read as the server sends them.
pub struct EventStream {
    reader: BufReader<TcpStream>,
}

impl EventStream {
    /// The next event (keep-alive comments skipped); `None` when the server closed the stream.
    pub fn next_sent(&mut self) -> Option<Sent> {
        let mut sent = Sent { event: "message".into(), id: None, data: String::new() };
        let mut any = false;
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line).unwrap() == 0 {
                return None;
            }
            let line = line.trim_end_matches(['\r', '\n']);
            match line.split_once(':') {
                _ if line.is_empty() && any => return Some(sent),
                _ if line.is_empty() => {}
                Some(("", _)) => {}
                Some(("event", value)) => (sent.event, any) = (value.trim().to_owned(), true),
                Some(("id", value)) => (sent.id, any) = (value.trim().parse().ok(), true),
                Some(("data", value)) => (sent.data, any) = (value.strip_prefix(' ').unwrap_or(value).to_owned(), true),
                _ => {}
            }
        }
    }

    /// The log events up to and including the first of type `kind`.
    pub fn until(&mut self, kind: &str) -> Vec<Sent> {
        let mut seen = Vec::new();
        while let Some(sent) = self.next_sent() {
            let done = sent.event == "event" && event_type(&sent) == kind;
            seen.push(sent);
            if done {
                return seen;
            }
        }
        panic!("the stream ended before a {kind}: {seen:?}");
    }
}

/// The `type` of a log event sent as data.
pub fn event_type(sent: &Sent) -> String {
    let event: serde_json::Value = serde_json::from_str(&sent.data).unwrap_or_default();
    event["type"].as_str().unwrap_or_default().to_owned()
}
