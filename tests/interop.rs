//! DeepSeek Harness interop: the requests dsh sends on the DeepSeek route are the reference's
//! (compared with a request recorded from it), other routes send only what their rows ask for,
//! and the events dsh writes carry what the reference's loader checks.

use dsh_e2e::turns::{route_patch, run_turn, session_id, TINY};
use dsh_e2e::{workspace_root, MockProcess, Run, TestHome};
use serde_json::Value;

fn fixture(name: &str) -> String {
    let path = workspace_root().join("tests/fixtures/conformance/requests").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn recorded_requests(mock: &MockProcess) -> Vec<Value> {
    std::fs::read_to_string(&mock.record)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

fn event<'a>(events: &'a [Value], event_type: &str) -> &'a Value {
    events.iter().find(|event| event["type"] == event_type).unwrap_or_else(|| panic!("no {event_type}"))
}

fn is_uuid(text: &str) -> bool {
    text.len() == 36 && text.chars().enumerate().all(|(i, c)| matches!(i, 8 | 13 | 18 | 23) == (c == '-'))
}

const RATE_LIMITED_TWICE: &str = "- status: 429\n  body: {error: {message: mock rate limit}}\n\
                                  - status: 429\n  body: {error: {message: mock rate limit}}\n\
                                  - ok: mock response recovered\n";

#[test]
fn a_web_profile_request_matches_the_recorded_reference_request_field_for_field() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, RATE_LIMITED_TWICE);
    let turn = run_turn(&home, &route_patch(&home, &mock, TINY, ""), "Say hello.");
    turn.run.expect_code(0);
    let reference: Vec<Value> = serde_json::from_str(&fixture("rate-limit-2x-then-success.requests.json")).unwrap();
    let ours = recorded_requests(&mock);
    assert_eq!(ours.len(), reference.len());
    let session = session_id(&turn.run);
    let user_id = std::fs::read_to_string(home.path().join(".anonymous-user-id")).unwrap().trim().to_owned();
    assert!(is_uuid(&user_id), "{user_id:?}");
    for (ours, reference) in ours.iter().zip(&reference) {
        assert_eq!(ours["path"], reference["path"]);
        let mut body: Value = serde_json::from_str(ours["body"].as_str().unwrap()).unwrap();
        body["model"] = reference["body"]["model"].clone();
        assert_eq!(body, reference["body"], "the body differs from the reference's");
        let headers = ours["headers"].as_object().unwrap();
        for (name, expected) in reference["headers"].as_object().unwrap() {
            let sent = headers.get(name).and_then(Value::as_str).unwrap_or_else(|| panic!("no {name} header"));
            match name.as_str() {
                "authorization" => assert_eq!(sent, "Bearer <redacted>"),
                "user-agent" => assert!(sent.starts_with("dsh/"), "{sent}"),
                "x-deepseek-harness-user-id" => assert_eq!(sent, user_id),
                "x-deepseek-harness-session-id" => assert_eq!(sent, session),
                _ => assert_eq!(Some(sent), expected.as_str(), "header {name}"),
            }
        }
        let extra: Vec<&String> = headers
            .keys()
            .filter(|name| !reference["headers"].as_object().unwrap().contains_key(*name))
            .filter(|name| !matches!(name.as_str(), "host" | "content-length"))
            .collect();
        assert!(extra.is_empty(), "headers the reference does not send: {extra:?}");
    }
}

#[test]
fn the_log_of_a_web_turn_has_the_reference_shapes() {
    // The reference's log is DeepSeek Harness 0.1's (format v0): the shapes compared are v0's.
    let home = TestHome::v0();
    let mock = MockProcess::start(&home, RATE_LIMITED_TWICE);
    let turn = run_turn(&home, &route_patch(&home, &mock, TINY, ""), "Say hello.");
    let reference: Vec<Value> = fixture("rate-limit-2x-then-success.session.jsonl")
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let mut header = event(&turn.events, "request/header")["data"].clone();
    header["header"]["config"]["model"] = Value::from("deepseek-v4-flash");
    assert_eq!(header, event(&reference, "request/header")["data"]);
    let ours = &event(&turn.events, "assistant/message")["data"];
    let theirs = &event(&reference, "assistant/message")["data"];
    let keys = |value: &Value| value.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(ours), keys(theirs));
    assert_eq!(keys(&ours["message"]), keys(&theirs["message"]));
    assert_eq!(
        ours["message"]["source"],
        serde_json::json!({"kind": "model", "provider": "deepseek-official", "model": "test-model"})
    );
    assert!(is_uuid(ours["message"]["id"].as_str().unwrap()));
    assert!(ours["usage"]["inputTokens"].as_u64().is_some() && ours["usage"]["outputTokens"].as_u64().is_some());
}

#[test]
fn another_route_sends_only_what_its_row_asks_for() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- ok: fine\n");
    let patch = home.write(
        "relay.yml",
        &format!(
            "- insert:\n\
             \x20   - id: relay\n      name: llm-openai\n      config: {{provider: relay, baseUrl: '{}', model: m}}\n\
             \x20   - id: relay-asking\n      name: llm-openai\n      config: {{provider: relay-asking, baseUrl: '{}', model: m, maxTokens: 4096, includeUsage: true, reasoningEffort: 'off'}}\n\
             - id: agent\n  config: {{provider: relay, system: ''}}\n",
            mock.base_url, mock.base_url
        ),
    );
    let run = Run::of(home.dsh().args(["run", "--patch"]).arg(&patch).arg("hi"));
    run.expect_code(0);
    let asking = home.write("asking.yml", "- id: agent\n  config: {provider: relay-asking}\n");
    let run = Run::of(home.dsh().args(["run", "--patch"]).arg(&patch).arg("--patch").arg(&asking).arg("hi"));
    run.expect_code(0);
    let requests = recorded_requests(&mock);
    let body = |index: usize| serde_json::from_str::<Value>(requests[index]["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        body(0),
        serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true})
    );
    assert_eq!(
        body(1),
        serde_json::json!({
            "model": "m",
            "messages": [{"role": "system", "content": "You are an AI agent powered by DeepSeek Harness."}, {"role": "user", "content": "hi"}],
            "stream": true, "stream_options": {"include_usage": true}, "thinking": {"type": "disabled"}, "max_tokens": 4096,
        })
    );
    for request in &requests {
        let headers = request["headers"].as_object().unwrap();
        assert!(!headers.keys().any(|name| name.starts_with("x-deepseek-harness")), "{headers:?}");
        assert!(!headers.contains_key("authorization"), "a route without apiKeyEnv sends no key");
    }
}
