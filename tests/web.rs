//! `dsh web` through the real binary and plain HTTP: the token and its cookie, another origin or
//! a rebinding host name refused, a turn's events streamed once in log order to any number of
//! watchers and resumed after `Last-Event-ID`, stop mid-wait, a session another process writes,
//! and `kill -9` of the server mid-turn, then resume from a new one.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use dsh_e2e::turns::{route_patch, SECRET, TINY};
use dsh_e2e::web::{event_type, read_reply, send_to, Sent, WebServer};
use dsh_e2e::{log_events, wait_until, MockProcess, PostgresServer, TestHome, PATIENCE};
use serde_json::Value;

/// A v4 home whose `deepseek-official` route is a mock serving `script` with `policy`.
fn web_home(script: &str, policy: &str) -> (TestHome, MockProcess, PathBuf) {
    let home = TestHome::v4();
    let mock = MockProcess::start(&home, script);
    let patch = route_patch(&home, &mock, policy, "");
    (home, mock, patch)
}

fn serve(home: &TestHome, patch: &Path, extra: &[&str]) -> WebServer {
    let mut command = home.dsh();
    command.env("DEEPSEEK_API_KEY", SECRET).args(["web", "--port", "0", "--no-open", "--patch"]).arg(patch);
    command.args(extra);
    WebServer::spawn(command)
}

fn new_session(web: &WebServer) -> String {
    let created = web.api("POST", "/api/sessions", Some("{}"));
    assert_eq!(created.status, 200, "{created:?}");
    created.json()["id"].as_str().unwrap().to_owned()
}

fn prompt(web: &WebServer, session: &str, text: &str) -> Value {
    let body = serde_json::json!({"text": text}).to_string();
    let sent = web.api("POST", &format!("/api/sessions/{session}/prompt"), Some(&body));
    assert_eq!(sent.status, 200, "{sent:?}");
    sent.json()
}

/// A server over a v4 home whose route is a mock serving `script` with `policy`, with one new
/// session, watched from its first event.
struct Watched {
    home: TestHome,
    mock: MockProcess,
    patch: PathBuf,
    web: WebServer,
    session: String,
    events: dsh_e2e::web::EventStream,
}

fn watched(script: &str, policy: &str) -> Watched {
    let (home, mock, patch) = web_home(script, policy);
    let web = serve(&home, &patch, &[]);
    let session = new_session(&web);
    let events = web.events(&session, None);
    Watched { home, mock, patch, web, session, events }
}

impl Watched {
    /// Sends `text` and reads the stream up to the first event of type `until`.
    fn say(&mut self, text: &str, until: &str) -> Vec<Sent> {
        prompt(&self.web, &self.session, text);
        self.events.until(until)
    }
}

fn log_of(home: &TestHome, session: &str) -> PathBuf {
    home.path().join("sessions").join(session).join("session.v4.jsonl")
}

fn events_only(sent: &[Sent]) -> Vec<Value> {
    sent.iter().filter(|s| s.event == "event").map(|s| serde_json::from_str(&s.data).unwrap()).collect()
}

#[test]
fn the_printed_address_trades_its_token_for_a_strict_http_only_cookie_that_the_api_requires() {
    let (home, _mock, patch) = web_home("- ok: hi\n", "");
    let web = serve(&home, &patch, &[]);
    let host = vec![("Host".to_owned(), web.address.clone())];
    assert_eq!(web.request("GET", "/api/sessions", &host, None).status, 401);
    assert_eq!(web.request("GET", "/", &host, None).status, 401);
    assert_eq!(web.request("GET", "/?token=not-the-token", &host, None).status, 401);
    let traded = web.request("GET", &format!("/?token={}", web.token), &host, None);
    assert_eq!(traded.status, 303, "{traded:?}");
    assert_eq!(traded.header("location"), Some("/"));
    let cookie = traded.header("set-cookie").unwrap();
    assert!(cookie.starts_with(&web.cookie()) && cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    let page = web.api("GET", "/", None);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<script src=\"/app.js\""), "{page:?}");
    assert!(page.header("content-security-policy").unwrap().contains("default-src 'none'"));
    assert_eq!(web.api("GET", "/app.js", None).status, 200);
    let listed = web.api("GET", "/api/sessions", None);
    assert_eq!(listed.json()["sessions"], serde_json::json!([]));
    let bearer =
        vec![("Host".to_owned(), web.address.clone()), ("Authorization".to_owned(), format!("Bearer {}", web.token))];
    assert_eq!(web.request("POST", "/api/sessions", &bearer, Some("{}")).status, 200, "a script needs no origin");
    assert_eq!(web.stop(), Some(0));
}

#[test]
fn a_page_on_another_origin_or_a_rebinding_host_can_neither_read_nor_start_anything() {
    let (home, mock, patch) = web_home("- ok: hi\n", "");
    let web = serve(&home, &patch, &[]);
    let session = new_session(&web);
    let with = |replace: &str, value: &str| {
        let mut headers = web.page_headers();
        headers.retain(|(name, _)| name != replace);
        if !value.is_empty() {
            headers.push((replace.to_owned(), value.to_owned()));
        }
        headers
    };
    let rebound = with("Host", &format!("attacker.example:{}", web.port()));
    assert_eq!(web.request("GET", "/api/sessions", &rebound, None).status, 403, "DNS rebinding");
    assert_eq!(web.request("GET", &format!("/api/sessions/{session}/events"), &rebound, None).status, 403);
    let body = Some(r#"{"text":"run the tools"}"#);
    let path = format!("/api/sessions/{session}/prompt");
    for origin in ["http://attacker.example", "null", ""] {
        let refused = web.request("POST", &path, &with("Origin", origin), body);
        assert_eq!(refused.status, 403, "origin {origin:?}: {refused:?}");
    }
    let form = web.request("POST", "/api/sessions", &with("Origin", "http://attacker.example"), Some("text=x"));
    assert_eq!(form.status, 403);
    let no_cookie = with("Cookie", "");
    assert_eq!(web.request("GET", "/api/sessions", &no_cookie, None).status, 401, "a cross-site page has no cookie");
    let mut upgrade = with("Origin", "http://attacker.example");
    upgrade.extend(
        [("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13")]
            .map(|(name, value)| (name.to_owned(), value.to_owned())),
    );
    upgrade.push(("Sec-WebSocket-Key".into(), "dGhlIHNhbXBsZSBub25jZQ==".into()));
    assert_eq!(web.status_only("GET", &format!("/api/sessions/{session}/events"), &upgrade), 403, "no WebSocket");
    let read = web.request("GET", "/api/sessions", &with("Origin", "http://attacker.example"), None);
    assert_eq!(read.status, 403, "a cross-origin read is refused");
    assert_eq!(read.header("access-control-allow-origin"), None, "no CORS");
    assert!(mock.request_bodies().is_empty(), "nothing reached the model");
    assert!(!std::fs::read_to_string(log_of(&home, &session)).unwrap().contains("run the tools"));
}

#[test]
fn a_turn_with_two_retries_reaches_two_watchers_once_each_in_log_order_and_a_reconnect_gets_the_rest() {
    let (home, _mock, patch) = web_home("- status: 503\n- status: 429\n- ok: recovered\n", TINY);
    let web = serve(&home, &patch, &[]);
    let session = new_session(&web);
    let (mut first, mut second) = (web.events(&session, None), web.events(&session, None));
    let message = prompt(&web, &session, "hello");
    let seen = first.until("turn/end");
    assert_eq!(second.until("turn/end"), seen, "two tabs see the same stream");
    let events = events_only(&seen);
    assert_eq!(events, log_events(&log_of(&home, &session)), "the log's events, as written, each once");
    let ids: Vec<u64> = seen.iter().filter_map(|sent| sent.id).collect();
    assert!(ids.windows(2).all(|pair| pair[1] == pair[0] + 1) && ids[0] == 0, "ids are the seqs: {ids:?}");
    assert_eq!(seen.iter().filter(|sent| event_type(sent) == "llm/retry").count(), 2);
    assert_eq!(events[0]["data"]["inserted"][0]["id"], message["messageId"]);
    let statuses: Vec<&str> = seen.iter().filter(|s| s.event == "status").map(|s| s.data.as_str()).collect();
    assert_eq!(statuses, [r#"{"running":false}"#, r#"{"running":true}"#], "idle when the stream opened, then running");
    let streamed: String = seen
        .iter()
        .filter(|sent| sent.event == "text")
        .map(|sent| serde_json::from_str::<Value>(&sent.data).unwrap()["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(streamed, "recovered", "the answer streamed before it was logged");
    assert_eq!(first.next_sent().unwrap().data, r#"{"running":false}"#);
    let middle = ids[ids.len() / 2];
    let rest = web.events(&session, Some(middle)).until("turn/end");
    let rest_ids: Vec<u64> = rest.iter().filter_map(|sent| sent.id).collect();
    assert_eq!(rest_ids, ids[ids.len() / 2 + 1..], "every event after the last one seen, once");
    assert!(!seen.iter().any(|sent| sent.data.contains(SECRET)), "no secret reaches the page");
}

#[test]
fn stop_during_a_retry_wait_ends_the_turn_aborted() {
    let policy = "{mode: normal, backoff: {initialDelayMs: 30000, maxDelayMs: 30000, jitterRatio: 0}}";
    let mut site = watched("- status: 503\n- ok: never\n", policy);
    site.say("hello", "llm/retry");
    let cancelled = site.web.api("POST", &format!("/api/sessions/{}/cancel", site.session), Some("{}"));
    assert_eq!(cancelled.json()["cancelled"], true);
    let end = events_only(&site.events.until("turn/end")).pop().unwrap();
    assert_eq!(end["data"]["reason"]["kind"], "aborted", "{end}");
    site.home.run(&["session", "verify", &site.session]).expect_code(0);
}

#[test]
fn a_session_another_process_writes_is_refused_busy_with_409() {
    let (home, mock, patch) = web_home("- ok: hi\n", "");
    home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("first").output().unwrap();
    let session = home.run(&["session", "list", "--json"]).stdout;
    let session: Value = serde_json::from_str(&session).unwrap();
    let session = session[0]["id"].as_str().unwrap().to_owned();
    let mut chat = home.dsh();
    chat.env("DEEPSEEK_API_KEY", SECRET).args(["chat", "--session", &session]);
    let mut chat = chat.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut said = std::io::BufReader::new(chat.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("chat in session") {
        line.clear();
        assert_ne!(std::io::BufRead::read_line(&mut said, &mut line).unwrap(), 0, "the chat never opened");
    }
    let web = serve(&home, &patch, &[]);
    let body = Some(r#"{"text":"second"}"#);
    let busy = web.api("POST", &format!("/api/sessions/{session}/prompt"), body);
    assert_eq!(busy.status, 409, "{busy:?}");
    assert!(busy.json()["error"].as_str().unwrap().contains("busy") || busy.body.contains("writ"), "{busy:?}");
    drop(chat.stdin.take());
    chat.wait().unwrap();
    // Counted before the next prompt, whose turn runs once its message is received (after 200).
    assert_eq!(mock.request_bodies().len(), 1, "the refused prompt ran no turn");
    assert_eq!(web.api("POST", &format!("/api/sessions/{session}/prompt"), body).status, 200);
}

#[test]
fn a_server_killed_mid_turn_leaves_a_session_a_new_server_resumes_and_continues() {
    let mut site = watched("- ok: held\n  hold: first\n- ok: second answer\n", "");
    site.say("hello", "request/header");
    let Watched { home, mock, patch, web, session, .. } = site;
    mock.wait_for_requests(1);
    web.kill();
    let web = serve(&home, &patch, &[]);
    let resumed = web.api("POST", &format!("/api/sessions/{session}/resume"), Some("{}"));
    assert_eq!(resumed.status, 200, "{resumed:?}");
    let mut events = web.events(&session, None);
    let before = events.until("turn/end");
    let interrupted = events_only(&before).pop().unwrap();
    assert_eq!(interrupted["data"]["reason"]["kind"], "interrupted", "{interrupted}");
    mock.release("first");
    prompt(&web, &session, "again");
    let after = events_only(&events.until("turn/end"));
    assert_eq!(after.last().unwrap()["data"]["reason"]["kind"], "completed");
    home.run(&["session", "verify", &session]).expect_code(0);
}

#[test]
fn beyond_loopback_a_token_must_be_given_and_a_weak_one_is_refused() {
    let home = TestHome::v4();
    home.run(&["web", "--listen", "0.0.0.0", "--port", "0", "--no-open"])
        .expect_code(2)
        .expect_stderr("give the token other machines will need with --token or --token-file");
    home.run(&["web", "--token", "short", "--port", "0", "--no-open"])
        .expect_code(2)
        .expect_stderr("a token has at least 16 characters");
}

/// Waits until no process writes session `session` (its writer lock is free), as `web` sees it.
fn until_released(web: &WebServer, session: &str) {
    let released =
        wait_until(PATIENCE, || web.api("GET", &format!("/api/sessions/{session}"), None).json()["writer"].is_null());
    assert!(released, "session {session} was never released");
}

#[test]
fn two_servers_on_one_postgres_store_share_a_session_live_one_writer_at_a_time() {
    let postgres = PostgresServer::start();
    let url = postgres.url("postgres");
    let script = "- ok: first\n- ok: second\n  hold: second\n- ok: third\n- ok: fourth\n  hold: fourth\n- ok: fifth\n";
    let (home_a, mock, patch) = web_home(script, TINY);
    let home_b = TestHome::v4();
    postgres.use_in(&home_a, &url);
    postgres.use_in(&home_b, &url);
    let a = serve(&home_a, &patch, &["--keep-open", "0"]);
    let b = serve(&home_b, &patch, &["--keep-open", "0"]);
    let session = new_session(&a);
    prompt(&a, &session, "one");
    let listed = b.api("GET", "/api/sessions", None).json();
    assert_eq!(listed["sessions"][0]["id"], session.as_str(), "{listed}");
    let mut watched = b.events(&session, None);
    watched.until("turn/end");
    prompt(&a, &session, "two");
    let live = watched.until("user/message");
    assert!(live.iter().any(|sent| sent.data.contains("\"two\"")), "B watches A's turn live: {live:?}");
    let mut joined = b.events(&session, None);
    let first_status = std::iter::from_fn(|| joined.next_sent()).find(|sent| sent.event == "status").unwrap();
    assert_eq!(first_status.data, r#"{"running":true}"#, "a tab joining on B sees A's turn running");
    let busy = b.api("POST", &format!("/api/sessions/{session}/prompt"), Some(r#"{"text":"three"}"#));
    assert_eq!(busy.status, 409, "one writer at a time: {busy:?}");
    mock.release("second");
    watched.until("turn/end");
    until_released(&b, &session);
    prompt(&b, &session, "three");
    watched.until("turn/end");
    until_released(&a, &session);
    prompt(&b, &session, "four");
    mock.wait_for_requests(4);
    b.kill();
    until_released(&a, &session);
    let resumed = a.api("POST", &format!("/api/sessions/{session}/resume"), Some("{}"));
    assert_eq!(resumed.status, 200, "{resumed:?}");
    prompt(&a, &session, "five");
    let mut events = a.events(&session, None);
    let ends: Vec<String> = std::iter::from_fn(|| events.next_sent())
        .filter(|sent| event_type(sent) == "turn/end")
        .map(|sent| serde_json::from_str::<Value>(&sent.data).unwrap()["data"]["reason"]["kind"].to_string())
        .take(5)
        .collect();
    assert_eq!(ends, ["\"completed\"", "\"completed\"", "\"completed\"", "\"interrupted\"", "\"completed\""]);
    mock.release("fourth");
    home_a.run(&["session", "verify", &session]).expect_code(0);
}

#[test]
fn a_watcher_joining_mid_turn_sees_it_running_and_the_answer_streamed_so_far() {
    let (home, _mock, patch) = web_home("- endless: \"lorem \"\n", "");
    let web = serve(&home, &patch, &[]);
    let session = new_session(&web);
    let mut first = web.events(&session, None);
    prompt(&web, &session, "go on");
    // Two pieces seen by one tab are on the board before a second tab joins.
    let mut pieces = 0;
    while pieces < 2 {
        pieces += usize::from(first.next_sent().unwrap().event == "text");
    }
    let mut joined = web.events(&session, None);
    let mut seen = Vec::new();
    while !seen.iter().any(|sent: &Sent| sent.event == "text") {
        seen.push(joined.next_sent().unwrap());
    }
    let statuses: Vec<&str> = seen.iter().filter(|s| s.event == "status").map(|s| s.data.as_str()).collect();
    assert_eq!(statuses, [r#"{"running":true}"#], "{seen:?}");
    let text: Value = serde_json::from_str(&seen.last().unwrap().data).unwrap();
    assert_eq!(text["whole"], true, "the text so far, whole");
    assert!(text["text"].as_str().unwrap().starts_with("lorem lorem"), "{text}");
    web.api("POST", &format!("/api/sessions/{session}/cancel"), Some("{}"));
    let end = events_only(&joined.until("turn/end")).pop().unwrap();
    assert_eq!(end["data"]["reason"]["kind"], "aborted");
}

#[test]
fn a_trajectory_comes_a_window_at_a_time_and_a_span_opens_the_events_it_covers() {
    let mut site = watched("- status: 503\n- status: 429\n- ok: recovered\n- ok: again\n", TINY);
    site.say("hello", "turn/end");
    let session = site.session.clone();
    let get = |path: &str| site.web.api("GET", path, None);
    let path = format!("/api/sessions/{session}/trajectory");
    let first = get(&format!("{path}?limit=4")).json();
    let total = first["total"].as_u64().unwrap();
    assert_eq!((first["spans"].as_array().unwrap().len(), first["offset"].as_u64()), (4, Some(0)));
    assert_eq!(first["overview"].as_array().unwrap().len(), 120);
    let rest = get(&format!("{path}?offset=4&limit=1000")).json();
    let spans: Vec<&Value> =
        first["spans"].as_array().unwrap().iter().chain(rest["spans"].as_array().unwrap()).collect();
    assert_eq!(spans.len() as u64, total);
    let waits: Vec<&&Value> = spans.iter().filter(|span| span["kind"] == "wait").collect();
    let codes: Vec<&str> = waits.iter().map(|span| span["code"].as_str().unwrap()).collect();
    assert_eq!(codes, ["SERVER", "RATE_LIMIT"]);
    assert!(rest["turns"]["1"].is_array(), "the axis of each turn in the window: {rest}");
    let [from, to] = [waits[0]["seqs"][0].as_u64().unwrap(), waits[0]["seqs"][1].as_u64().unwrap()];
    let covered = get(&format!("/api/sessions/{session}/log?from={from}&to={to}")).json();
    let types: Vec<&str> = covered["events"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["llm/retry", "llm/retry-started"]);
    assert_eq!(
        get(&format!("/api/sessions/{session}/log?from=0&to=2000")).status,
        400,
        "one past the most a range may name"
    );
    assert_eq!(get(&format!("/api/sessions/{session}/log?from=0&to=1999")).status, 200);
    assert_eq!(get("/api/sessions/no-such-session/trajectory").status, 404);
    site.say("again", "turn/end");
    let grown = site.web.api("GET", &format!("{path}?limit=2000"), None).json();
    let turn_rows = grown["spans"].as_array().unwrap().iter().filter(|span| span["kind"] == "turn");
    let turns: Vec<&str> = turn_rows.map(|span| span["label"].as_str().unwrap()).collect();
    assert_eq!(turns, ["turn 1 · completed", "turn 2 · completed"], "what was appended is read on the next request");
}

#[test]
fn plugins_and_rows_change_from_the_api_and_the_page_never_sees_an_inline_credential() {
    let (home, _mock, patch) = web_home("- ok: hi\n", "");
    home.run(&["profile", "new", "web"]).expect_code(0);
    let inline = "- id: llm-deepseek\n  config:\n    provider: deepseek-official\n    baseUrl: https://user:pa55word@example.com/v1\n    model: m\n    apiKeyEnv: DEEPSEEK_API_KEY\n";
    std::fs::write(home.path().join("profiles/web/cordis.patch.yml"), inline).unwrap();
    let web = serve(&home, &patch, &[]);
    let rows = web.api("GET", "/api/profiles/web/rows", None);
    assert_eq!(rows.status, 200, "{rows:?}");
    assert!(!rows.body.contains("pa55word"), "{}", rows.body);
    let waterfall = |web: &WebServer| web.api("GET", "/api/profiles/web/waterfall", None).json().to_string();
    assert!(waterfall(&web).contains("llm-retry"));
    let off = web.api("POST", "/api/profiles/web/rows/llm-retry", Some(r#"{"enabled":false}"#));
    assert_eq!(off.json()["disabled"], true, "{off:?}");
    assert!(!waterfall(&web).contains("llm-retry"));
    let missing = web.api("POST", "/api/profiles/web/rows/no-such-row", Some(r#"{"enabled":false}"#));
    assert_eq!(missing.status, 404);
    assert!(missing.json()["error"].as_str().unwrap().contains("its rows: agent"), "{missing:?}");
    let added = web.api("POST", "/api/profiles/web/plugins", Some(r#"{"package":"relay-retry"}"#));
    assert_eq!(added.status, 200, "{added:?}");
    assert!(waterfall(&web).contains("relay-retry"));
    let removed = web.api("DELETE", "/api/profiles/web/plugins/relay-retry", None);
    assert_eq!(removed.json()["removed"], serde_json::json!(["relay-retry"]), "{removed:?}");
    let explained = web.api("GET", "/api/profiles/web/explain", None).json();
    assert_eq!(explained["routes"][0]["provider"], "deepseek-official", "{explained}");
    assert_eq!(web.api("GET", "/api/profiles/no%2Fsuch/rows", None).status / 100, 4);
}

#[test]
fn a_session_replays_beside_a_candidate_layer_and_a_request_naming_neither_is_refused() {
    let mut site = watched("- status: 503\n- ok: recovered\n", TINY);
    site.say("hello", "turn/end");
    let (web, session) = (&site.web, &site.session);
    let body = serde_json::json!({"layer": "- {id: llm-retry, disabled: true}\n"}).to_string();
    let replayed = web.api("POST", &format!("/api/sessions/{session}/replay"), Some(&body));
    assert_eq!(replayed.status, 200, "{replayed:?}");
    let turn = &replayed.json()["results"][0];
    assert_eq!(turn["recorded"]["outcome"], "completed");
    assert_eq!(turn["candidates"][0]["outcome"], "completed", "the session's own configuration");
    assert_eq!(turn["candidates"][1]["outcome"], "gave-up", "without llm-retry the 503 is not retried");
    let neither = web.api("POST", &format!("/api/sessions/{session}/replay"), Some("{}"));
    assert_eq!(neither.status, 400);
}

#[test]
fn sigterm_while_a_prompt_waits_behind_a_turn_closes_the_turn_refuses_the_prompt_and_exits_0() {
    let (home, mock, patch) = web_home("- ok: held\n  hold: never\n", "");
    let web = serve(&home, &patch, &[]);
    let session = new_session(&web);
    prompt(&web, &session, "first");
    mock.wait_for_requests(1);
    let path = format!("/api/sessions/{session}/prompt");
    let queued = send_to(&web.address, "POST", &path, &web.page_headers(), Some(r#"{"text":"second"}"#));
    let in_hand =
        wait_until(PATIENCE, || web.api("GET", &format!("/api/sessions/{session}"), None).json()["pending"] == 2);
    assert!(in_hand, "the second prompt waits behind the running turn");
    assert_eq!(web.stop(), Some(0), "dsh web exits 0 without waiting for the held turn");
    assert_eq!(read_reply(queued).status, 503, "the queued prompt is refused, not taken");
    let log = std::fs::read_to_string(log_of(&home, &session)).unwrap();
    assert!(!log.contains("second"), "nothing of the refused prompt is in the log");
    assert_eq!(log_events(&log_of(&home, &session)).last().unwrap()["data"]["reason"]["kind"], "aborted");
}

#[test]
fn an_event_stream_can_start_at_a_session_s_last_turns() {
    let mut site = watched("- ok: one\n- ok: two\n- ok: three\n", "");
    for text in ["first", "second", "third"] {
        site.say(text, "turn/end");
    }
    let Watched { home, web, session, .. } = site;
    let path = format!("/api/sessions/{session}/events?turns=1");
    let mut last = web.events_at(&path, None);
    let shown = events_only(&last.until("turn/end"));
    let turns: Vec<&Value> = shown.iter().filter(|event| event["type"] == "turn/start").collect();
    assert_eq!(turns.len(), 1, "{shown:?}");
    assert_eq!(turns[0]["data"]["turn"], 3);
    let log = log_events(&log_of(&home, &session));
    let first = log.iter().position(|event| event["type"] == "turn/start" && event["data"]["turn"] == 3).unwrap();
    assert_eq!(shown, log[first..], "from the last turn's start, every event once");
    let every = web.events_at(&format!("/api/sessions/{session}/events?turns=5"), None).until("turn/end");
    assert_eq!(events_only(&every)[0], log[0], "a session with fewer turns than asked is sent whole");
}

#[test]
fn a_session_idle_past_keep_open_is_released_and_a_later_prompt_opens_it_again() {
    let (home, _mock, patch) = web_home("- ok: one\n- ok: two\n", "");
    let web = serve(&home, &patch, &["--keep-open", "1"]);
    let session = new_session(&web);
    let mut events = web.events(&session, None);
    prompt(&web, &session, "first");
    events.until("turn/end");
    let closed = wait_until(PATIENCE, || {
        let shown = web.api("GET", &format!("/api/sessions/{session}"), None).json();
        shown["pending"].is_null() && shown["writer"].is_null()
    });
    assert!(closed, "the idle session was closed and its writer lock released");
    home.run(&["session", "verify", &session]).expect_code(0);
    prompt(&web, &session, "second");
    let second = events_only(&events.until("turn/end"));
    assert_eq!(second.last().unwrap()["data"]["reason"]["kind"], "completed", "{second:?}");
}
