use dsh_abi::testing::{failure, FakeHost};
use serde_json::json;

use super::*;

fn row(config: Value) -> RouteFailover {
    RouteFailover::new(NAME, &config).unwrap()
}

fn two_routes() -> RouteFailover {
    row(json!({"routes": ["primary", "backup"], "breaker": {"failures": 2, "windowMs": 1000, "cooldownMs": 500}}))
}

fn failed_on(route: &str, code: &str) -> RequestErrorPayload {
    RequestErrorPayload::new(1, 1, route, failure(code, 503), None)
}

fn switched_to(answer: Result<Answer, String>) -> Option<String> {
    match answer.unwrap() {
        Answer::Decide(Decision::Switch(switch)) => Some(switch.route.into_string()),
        Answer::Pass => None,
        other => panic!("neither a switch nor a pass: {other:?}"),
    }
}

#[test]
fn an_outage_code_moves_the_step_to_the_next_route_and_other_codes_pass() {
    let failover = two_routes();
    let host = FakeHost::new().at(1_000.0);
    assert_eq!(
        switched_to(failover.on_request_error(&failed_on("primary", "SERVER"), &host.context())),
        Some("backup".into())
    );
    assert_eq!(switched_to(failover.on_request_error(&failed_on("primary", "AUTH"), &host.context())), None);
    assert_eq!(
        switched_to(failover.on_request_error(&failed_on("backup", "SERVER"), &host.context())),
        None,
        "the last route"
    );
    assert_eq!(switched_to(failover.on_request_error(&failed_on("elsewhere", "SERVER"), &host.context())), None);
}

#[test]
fn turns_start_on_the_first_route_whose_circuit_admits_them_and_one_probe_is_given() {
    let failover = two_routes();
    let host = FakeHost::new().at(1_000.0);
    assert_eq!(failover.choose_route(1, &host.context()).unwrap().as_deref(), Some("primary"));
    for _ in 0..2 {
        failover.on_request_error(&failed_on("primary", "SERVER"), &host.context()).unwrap();
    }
    assert_eq!(failover.choose_route(2, &host.context()).unwrap().as_deref(), Some("backup"), "primary is open");
    host.advance(500.0);
    assert_eq!(failover.choose_route(3, &host.context()).unwrap().as_deref(), Some("primary"), "the probe");
    assert_eq!(failover.choose_route(4, &host.context()).unwrap().as_deref(), Some("backup"), "one probe only");
    let answered = RequestSuccess { turn: 3, step: 1, provider: "primary".into(), endpoint_host: "".into() };
    failover.on_request_success(&answered, &host.context()).unwrap();
    assert_eq!(failover.choose_route(5, &host.context()).unwrap().as_deref(), Some("primary"), "closed again");
}

#[test]
fn the_reason_says_when_the_failure_opened_the_circuit() {
    let failover = two_routes();
    let host = FakeHost::new().at(1_000.0);
    failover.on_request_error(&failed_on("primary", "SERVER"), &host.context()).unwrap();
    let Ok(Answer::Decide(Decision::Switch(switch))) =
        failover.on_request_error(&failed_on("primary", "TIMEOUT"), &host.context())
    else {
        panic!("switched")
    };
    assert_eq!(switch.reason.as_str(), "primary: TIMEOUT; its circuit is open until 1500");
}

#[test]
fn a_route_declared_smaller_or_too_small_for_the_request_is_skipped() {
    let failover = row(json!({"routes": ["primary", "small", "large"]}));
    let host = FakeHost::new()
        .with_context_window("primary", 128_000)
        .with_context_window("small", 32_000)
        .with_context_window("large", 200_000);
    assert_eq!(
        switched_to(failover.on_request_error(&failed_on("primary", "SERVER"), &host.context())),
        Some("large".into())
    );
    let mut big = failed_on("small", "SERVER");
    big.request_tokens = 250_000;
    assert_eq!(switched_to(failover.on_request_error(&big, &host.context())), None, "the request outgrows every route");
}

#[test]
fn an_unreachable_store_fails_over_or_not_as_the_row_says_with_one_warning_per_turn() {
    let host = FakeHost::new().store_down("cannot reach redis://127.0.0.1:1");
    let open = two_routes();
    for _ in 0..3 {
        assert_eq!(
            switched_to(open.on_request_error(&failed_on("primary", "SERVER"), &host.context())),
            Some("backup".into())
        );
    }
    assert_eq!(open.choose_route(1, &host.context()).unwrap().as_deref(), Some("primary"));
    assert_eq!(host.logs().len(), 1, "one warning per turn: {:?}", host.logs());
    let closed = row(json!({"routes": ["primary", "backup"], "onStoreError": "closed"}));
    assert_eq!(switched_to(closed.on_request_error(&failed_on("primary", "SERVER"), &host.context())), None);
    assert_eq!(closed.choose_route(1, &host.context()).unwrap(), None);
}

#[test]
fn every_bad_value_is_named_by_its_key() {
    let config = json!({
        "routes": ["primary", "", "primary"],
        "codes": "SERVER",
        "breaker": {"failures": 0, "windowMs": -5, "cooldownMs": 1e12},
        "colour": 1,
    });
    let errors = RouteFailover::new(NAME, &config).err().unwrap();
    let shown: Vec<String> = errors.iter().map(|error| format!("{}: {}", error.path, error.message)).collect();
    assert_eq!(
        shown,
        [
            "colour: route-failover: unknown key \"colour\"",
            "routes[1]: route-failover: must be a non-empty string, got \"\"",
            "routes[2]: route-failover: \"primary\" is listed twice (first at routes[0])",
            "routes: route-failover: names one route: failover needs at least two",
            "codes: route-failover: must be a list, got \"SERVER\"",
            "breaker.failures: route-failover: must be an integer from 1 to 1000, got 0",
            "breaker.windowMs: route-failover: must be an integer from 1 to 2147483647, got -5",
            "breaker.cooldownMs: route-failover: must be an integer from 1 to 2147483647, got 1000000000000.0",
        ]
    );
    assert!(RouteFailover::new(NAME, &Value::Null).err().unwrap()[0].message.contains("is required"));
    assert_eq!(SCHEMA.faults(), Vec::<String>::new());
    assert_eq!(BREAKER.faults(), Vec::<String>::new());
}
