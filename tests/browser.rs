//! `dsh web`'s page in a real browser (headless Chromium through ChromeDriver): a turn with two
//! retries counting down and then answering without the failed attempt's text, and the
//! trajectory drawing both waits; a tool turn; stop during a wait; a plugin switched off from the
//! page taking effect at the next turn; a reload mid-turn; a page on another origin and a
//! rebound host name getting nothing; a server killed mid-turn, the page reconnecting to the next
//! one and resuming the session. The README's screenshots are taken here.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;

use dsh_e2e::browser::Browser;
use dsh_e2e::turns::{route_patch, SECRET, TINY};
use dsh_e2e::web::WebServer;
use dsh_e2e::{free_port, log_events, MockProcess, TestHome};
use serde_json::json;

/// A v4 home, its mock provider, and the patch that routes to it (plus `rows`).
struct Site {
    home: TestHome,
    mock: MockProcess,
    patch: PathBuf,
}

fn site(script: &str, policy: &str, rows: &str) -> Site {
    let home = TestHome::v4();
    let mock = MockProcess::start(&home, script);
    let patch = route_patch(&home, &mock, policy, "");
    std::fs::write(&patch, std::fs::read_to_string(&patch).unwrap() + rows).unwrap();
    Site { home, mock, patch }
}

impl Site {
    fn serve(&self, extra: &[&str]) -> WebServer {
        let mut command = self.home.dsh();
        command.env("DEEPSEEK_API_KEY", SECRET).args(["web", "--no-open", "--patch"]).arg(&self.patch);
        command.args(if extra.contains(&"--port") { &[][..] } else { &["--port", "0"][..] }).args(extra);
        WebServer::spawn(command)
    }
}

/// The page of `web`, opened through its printed address, with a record of every text the live
/// line and the streaming answer showed (so a test reads what was shown, however briefly).
fn open(browser: &Browser, web: &WebServer) {
    browser.goto(&format!("http://{}/?token={}", web.address, web.token));
    browser.wait_for("the profiles", "document.getElementById('new-profile').options.length > 0");
    browser.js(
        "window.shown = {live: [], drafts: []};
         new MutationObserver(() => {
           const live = document.getElementById('live-line').textContent;
           if (live) window.shown.live.push(live);
           for (const draft of document.querySelectorAll('.draft')) window.shown.drafts.push(draft.textContent);
         }).observe(document.body, {childList: true, characterData: true, subtree: true});",
        vec![],
    );
}

/// Starts a session from the page and answers its id, once the page follows its events (its
/// state shows: the stream's first status arrived).
fn new_session(browser: &Browser) -> String {
    browser.click("#new-session");
    let title = browser.wait_for(
        "the new session",
        "document.getElementById('session-title').textContent !== 'No session' && \
         !document.getElementById('message').disabled && document.getElementById('session-state').textContent && \
         document.getElementById('session-title').textContent",
    );
    title.as_str().unwrap().to_owned()
}

/// `site`'s server, a browser on its page, and a session started from the page.
fn page_with_session(site: &Site) -> (WebServer, Browser, String) {
    let web = site.serve(&[]);
    let browser = Browser::start(&[]);
    open(&browser, &web);
    let session = new_session(&browser);
    (web, browser, session)
}

fn say(browser: &Browser, text: &str) {
    browser.type_into("#message", text);
    browser.click("#send");
    browser.wait_for("the message sent", "document.getElementById('message').value === ''");
}

/// The conversation's entries of `class`, as the page shows them.
fn entries(browser: &Browser, class: &str) -> Vec<String> {
    let found = browser.js(
        "return [...document.querySelectorAll('#conversation .entry.' + arguments[0])].map((e) => e.innerText);",
        vec![json!(class)],
    );
    serde_json::from_value(found).unwrap()
}

fn wait_for_end(browser: &Browser, text: &str) {
    let expression = format!(
        "[...document.querySelectorAll('#conversation .entry.end')].some((e) => e.textContent.includes({}))",
        json!(text)
    );
    browser.wait_for(&format!("the turn's end ({text})"), &expression);
}

#[test]
fn a_turn_with_two_retries_counts_down_answers_without_the_failed_text_and_its_trajectory_draws_both_waits() {
    let partial = "PARTIAL-ATTEMPT-TEXT ".repeat(6);
    let script = format!("- truncate: \"{partial}\"\n- status: 503\n- ok: \"the real answer\"\n");
    let policy = "{mode: normal, maxRetries: 5, retryableCodes: [SERVER, STREAM_CLOSED], \
                  backoff: {initialDelayMs: 2500, maxDelayMs: 2500, jitterRatio: 0}}";
    let site = site(&script, policy, "");
    let (_web, browser, _) = page_with_session(&site);
    say(&browser, "hello");
    wait_for_end(&browser, "turn 1 completed");
    let shown = browser.js("return window.shown;", vec![]);
    let live: Vec<String> = serde_json::from_value(shown["live"].clone()).unwrap();
    for place in ["(1/5)", "(2/5)"] {
        let counted = live.iter().any(|line| line.starts_with(&format!("Retrying model request {place} · ")));
        assert!(counted, "no countdown for {place}: {live:?}");
    }
    assert!(live.iter().any(|line| line == "Waiting for the model…"), "{live:?}");
    let drafts: Vec<String> = serde_json::from_value(shown["drafts"].clone()).unwrap();
    assert!(drafts.iter().any(|draft| draft.contains("PARTIAL-ATTEMPT-TEXT")), "the cut attempt streamed: {drafts:?}");
    assert_eq!(entries(&browser, "assistant"), ["the real answer"]);
    assert!(!browser.text().contains("PARTIAL-ATTEMPT-TEXT"), "the failed attempt's text is gone");
    let retries = entries(&browser, "retry");
    assert_eq!(retries, ["Retrying model request (1/5) · 2.5s", "Retrying model request (2/5) · 2.5s"]);
    browser.js("document.querySelectorAll('#conversation details.retry')[1].open = true;", vec![]);
    assert!(entries(&browser, "retry")[1].contains("SERVER: HTTP 503"), "{:?}", entries(&browser, "retry"));
    browser.save_screenshot("chat");
    browser.click("#tab-trajectory");
    browser.wait_for("both waits", "document.querySelectorAll('.span-row[data-kind=wait]').length === 2");
    let waits = browser.js(
        "return [...document.querySelectorAll('.span-row[data-kind=wait] .span-label')].map((e) => e.textContent);",
        vec![],
    );
    assert_eq!(waits, json!(["  retry 1/5 · STREAM_CLOSED · 2.5s", "  retry 2/5 · SERVER · 2.5s"]));
    let attempts = browser.js("return document.querySelectorAll('.span-row[data-kind=attempt]').length;", vec![]);
    assert_eq!(attempts, json!(3));
    browser.click(".span-row[data-kind=wait]");
    browser.wait_for(
        "the wait's events",
        "document.getElementById('span-events').textContent.includes('llm/retry-started')",
    );
    browser.save_screenshot("trajectory");
}

#[test]
fn a_tool_turn_shows_the_call_running_and_then_its_result() {
    let ledger_home = tempfile::tempdir().unwrap();
    let ledger = ledger_home.path().join("ledger.txt");
    let server = dsh_e2e::workspace_root().join("tests/fixtures/mcp/side_effects.py");
    let row = format!(
        "- insert:\n    - id: side\n      name: mcp\n      config:\n        command: [python3, {}]\n        env: {{LEDGER: {}}}\n",
        server.display(),
        ledger.display()
    );
    let script = "- tool_calls: [{name: append, arguments: {line: from-the-page}}]\n- ok: \"appended it\"\n";
    let site = site(script, TINY, &row);
    let (_web, browser, _) = page_with_session(&site);
    say(&browser, "use the tool");
    wait_for_end(&browser, "turn 1 completed");
    let tools = entries(&browser, "tool");
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert!(tools[0].starts_with("tool side · append · result · "), "the server's row, the tool: {tools:?}");
    assert_eq!(entries(&browser, "assistant"), ["appended it"]);
    let live: Vec<String> = serde_json::from_value(browser.js("return window.shown.live;", vec![])).unwrap();
    assert!(live.iter().any(|line| line.starts_with("side · append · running")), "{live:?}");
    assert_eq!(std::fs::read_to_string(&ledger).unwrap().lines().count(), 1, "the tool ran once");
}

#[test]
fn stop_during_a_retry_wait_ends_the_turn_aborted() {
    let policy = "{mode: normal, backoff: {initialDelayMs: 60000, maxDelayMs: 60000, jitterRatio: 0}}";
    let site = site("- status: 503\n- ok: never\n", policy, "");
    let (_web, browser, session) = page_with_session(&site);
    say(&browser, "hello");
    browser.wait_for(
        "the countdown",
        "document.getElementById('live-line').textContent.startsWith('Retrying model request (1/5)')",
    );
    browser.click("#stop");
    wait_for_end(&browser, "turn 1 aborted (user)");
    assert_eq!(site.mock.request_bodies().len(), 1, "no retry was sent");
    site.home.run(&["session", "verify", &session]).expect_code(0);
}

#[test]
fn a_row_switched_off_from_the_page_takes_effect_at_the_next_turn_which_says_so_in_the_chat() {
    let site = site("- status: 503\n- ok: first\n- status: 503\n- ok: never\n", TINY, "");
    let (_web, browser, _) = page_with_session(&site);
    say(&browser, "one");
    wait_for_end(&browser, "turn 1 completed");
    browser.click("#tab-plugins");
    browser.wait_for("the rows", "document.querySelector('#rows tr[data-row=\"llm-retry\"] button')");
    assert_eq!(browser.js("return document.getElementById('plugins-profile').value;", vec![]), "web");
    browser.click("#rows tr[data-row=\"llm-retry\"] button");
    browser.wait_for(
        "llm-retry off",
        "document.querySelector('#rows tr[data-row=\"llm-retry\"]').innerText.includes('off') && \
         !document.getElementById('waterfall').innerText.includes('llm-retry')",
    );
    browser.click("#tab-chat");
    say(&browser, "two");
    wait_for_end(&browser, "turn 2 error SERVER");
    assert_eq!(site.mock.request_bodies().len(), 3, "the second turn's 503 was not retried");
    assert_eq!(entries(&browser, "note"), ["profile web: llm-retry disabled"]);
}

#[test]
fn a_page_reloaded_mid_turn_loses_nothing_and_shows_nothing_twice() {
    let site = site("- ok: \"held answer\"\n  hold: answer\n", TINY, "");
    let (_web, browser, _) = page_with_session(&site);
    say(&browser, "hello");
    site.mock.wait_for_requests(1);
    browser.refresh();
    browser.wait_for("the session again", "document.querySelectorAll('#conversation .entry.user').length === 1");
    browser.wait_for("the running turn", "document.getElementById('session-state').textContent === 'running'");
    site.mock.release("answer");
    wait_for_end(&browser, "turn 1 completed");
    assert_eq!(entries(&browser, "user"), ["hello"]);
    assert_eq!(entries(&browser, "assistant"), ["held answer"]);
}

/// A page on `127.0.0.1:PORT` (another origin of the same site) that tries to read the session
/// list, post a prompt, post a form, open a WebSocket and an event stream on `target`, and puts
/// what each attempt got in its title.
fn attacker_page(target: &str, session: &str) -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let page = format!(
        r#"<!doctype html><iframe name="sink"></iframe>
<form id="f" method="POST" action="http://{target}/api/sessions/{session}/prompt" enctype="text/plain" target="sink">
<input name='{{"text":"FORM-ATTACK","x":"' value='"}}'></form>
<script>
const results = {{}};
const note = (name, value) => {{ results[name] = value; document.title = "done:" + JSON.stringify(results); }};
fetch("http://{target}/api/sessions", {{credentials: "include"}}).then((r) => r.text()).then((t) => note("read", t), (e) => note("read", "blocked"));
fetch("http://{target}/api/sessions/{session}/prompt", {{method: "POST", credentials: "include", mode: "no-cors",
  headers: {{"Content-Type": "text/plain"}}, body: JSON.stringify({{text: "FETCH-ATTACK"}})}}).then(() => note("post", "sent"), () => note("post", "blocked"));
const socket = new WebSocket("ws://{target}/api/sessions/{session}/events");
socket.onopen = () => note("socket", "open"); socket.onerror = () => note("socket", "refused");
const stream = new EventSource("http://{target}/api/sessions/{session}/events", {{withCredentials: true}});
stream.onmessage = (m) => note("stream", m.data); stream.onerror = () => {{ note("stream", "refused"); stream.close(); }};
document.getElementById("f").submit(); note("form", "submitted");
</script>"#
    );
    (listener, page)
}

/// Serves `page` to every connection on `listener`, in the background.
fn serve_page(listener: TcpListener, page: String) {
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let answer =
                format!("HTTP/1.0 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{page}", page.len());
            let _ = stream.write_all(answer.as_bytes());
        }
    });
}

#[test]
fn a_page_on_another_origin_or_a_rebound_host_name_can_neither_read_nor_start_anything() {
    let site = site("- ok: hi\n", TINY, "");
    let web = site.serve(&[]);
    let browser = Browser::start(&["--host-resolver-rules=MAP attacker.test 127.0.0.1"]);
    open(&browser, &web);
    let session = new_session(&browser);
    let (listener, page) = attacker_page(&web.address, &session);
    let attacker = format!("http://127.0.0.1:{}/", listener.local_addr().unwrap().port());
    serve_page(listener, page);
    browser.goto(&attacker);
    let title = browser.wait_for(
        "every attempt's outcome",
        "document.title.startsWith('done:') && ['read', 'post', 'socket', 'stream', 'form']
           .every((key) => key in JSON.parse(document.title.slice(5))) && document.title",
    );
    let results: serde_json::Value = serde_json::from_str(&title.as_str().unwrap()[5..]).unwrap();
    assert_eq!(results["read"], "blocked", "{results}");
    assert_eq!(results["socket"], "refused", "{results}");
    assert_eq!(results["stream"], "refused", "{results}");
    browser.goto(&format!("http://attacker.test:{}/api/sessions", web.port()));
    assert!(browser.text().contains("answers only to the address dsh web printed"), "{}", browser.text());
    let log = std::fs::read_to_string(site.home.path().join("sessions").join(&session).join("session.v4.jsonl"));
    let log = log.unwrap();
    assert!(!log.contains("ATTACK"), "nothing the other page sent reached the session: {log}");
    assert!(site.mock.request_bodies().is_empty(), "nothing reached the model");
    let listed = web.api("GET", "/api/sessions", None).json();
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 1, "no session was started: {listed}");
}

#[test]
fn after_the_server_is_killed_mid_turn_the_page_reconnects_to_the_next_one_and_resumes_the_session() {
    let site = site("- ok: held\n  hold: first\n- ok: \"second answer\"\n", TINY, "");
    let port = free_port().to_string();
    let fixed = ["--port", &port, "--token", "browser-test-token-0123456789"];
    let web = site.serve(&fixed);
    let browser = Browser::start(&[]);
    open(&browser, &web);
    let session = new_session(&browser);
    say(&browser, "hello");
    site.mock.wait_for_requests(1);
    web.kill();
    let web = site.serve(&fixed);
    browser.click("#resume");
    wait_for_end(&browser, "turn 1 interrupted");
    say(&browser, "again");
    wait_for_end(&browser, "turn 2 completed");
    assert_eq!(entries(&browser, "user"), ["hello", "again"]);
    assert_eq!(entries(&browser, "assistant"), ["second answer"]);
    let log = site.home.path().join("sessions").join(&session).join("session.v4.jsonl");
    assert_eq!(log_events(&log).iter().filter(|event| event["type"] == "turn/end").count(), 2);
    site.home.run(&["session", "verify", &session]).expect_code(0);
    drop(web);
}

#[test]
fn the_plugins_tab_explains_a_code_adds_and_removes_a_package_and_replays_the_session_beside_a_layer() {
    let site = site("- status: 503\n- ok: recovered\n", TINY, "");
    let (_web, browser, _) = page_with_session(&site);
    say(&browser, "hello");
    wait_for_end(&browser, "turn 1 completed");
    browser.click("#tab-plugins");
    browser.wait_for("the explained codes", "document.querySelectorAll('#explain-code option').length > 3");
    browser.js(
        "const select = document.getElementById('explain-code'); select.value = 'SERVER'; \
         select.dispatchEvent(new Event('change'));",
        vec![],
    );
    let explained = browser.wait_for("SERVER's handling", "document.querySelector('#explain tbody').innerText");
    assert!(explained.as_str().unwrap().contains("llm-retry"), "{explained}");
    browser.type_into("#package-name", "relay-retry");
    browser.click("#add-package button");
    browser.wait_for(
        "relay-retry in the waterfall",
        "document.getElementById('waterfall').innerText.includes('relay-retry')",
    );
    browser.wait_for("its Remove button", "[...document.querySelectorAll('#packages li')].find((li) => li.innerText.startsWith('relay-retry'))?.querySelector('button')");
    browser.js(
        "[...document.querySelectorAll('#packages li')].find((li) => li.innerText.startsWith('relay-retry')).querySelector('button').click();",
        vec![],
    );
    browser.wait_for("relay-retry gone", "!document.getElementById('waterfall').innerText.includes('relay-retry')");
    let own = "[...document.querySelectorAll('#packages li')].find((li) => li.innerText.startsWith('llm-retry '))";
    let own_package = browser.js(&format!("return {own}?.innerText;"), vec![]);
    assert!(own_package.as_str().is_some_and(|text| text.contains("bundled with dsh")), "{own_package}");
    assert_eq!(browser.js(&format!("return !!{own}.querySelector('button');"), vec![]), false, "dsh's own is fixed");
    browser.type_into("#replay-layer", "- {id: llm-retry, disabled: true}");
    browser.click("#replay-form button");
    let row = browser.wait_for("the replayed turn", "document.querySelector('#replay tbody tr')?.innerText");
    let cells: Vec<&str> = row.as_str().unwrap().split('\t').collect();
    assert_eq!(cells[0], "1", "{cells:?}");
    assert!(cells[1].starts_with("completed") && cells[2].starts_with("completed"), "{cells:?}");
    assert!(cells[3].starts_with("gave-up"), "without llm-retry the 503 is not retried: {cells:?}");
}
