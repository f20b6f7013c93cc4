//! The interface grows without breaking plugins: a plugin built against a frozen copy of the
//! interface at ABI version 2 (`tests/fixtures/abi-frozen`) still loads and decides in today's
//! host, whose interface has since gained a payload field (`model`) and a downstream variant
//! (`Cancelled`) — in process, and installed into a profile and run by the real binary.

use dsh_abi::testing::failure;
use dsh_abi::{Answer, Decision, DownstreamOutcome, RequestErrorPayload, RetryDecision};
use dsh_e2e::turns::{route_patch, run_turn, TINY};
use dsh_e2e::{abi_frozen_library, package_dir, MockProcess, TestHome};
use dsh_host::context::SessionlessHost;
use dsh_host::plugin::PluginLibrary;
use dsh_host::waterfall::Listener;
use serde_json::Value;

fn frozen_instance() -> dsh_host::plugin::RowInstance {
    let library = PluginLibrary::load(abi_frozen_library()).expect("the frozen plugin loads");
    assert_eq!(library.manifest.abi_version, 2);
    library.instantiate("frozen", &Value::Null).expect("the frozen plugin instantiates")
}

#[test]
fn a_plugin_built_against_the_frozen_interface_decides_on_a_grown_payload() {
    let instance = frozen_instance();
    let host = SessionlessHost::default();
    let mut payload = RequestErrorPayload::new(3, 2, "relay", failure("SERVER", 503), None);
    payload.model = "deepseek-v4-flash".into();
    let Ok(Answer::Decide(Decision::Retry(retry))) = instance.on_request_error(&payload, &host.context()) else {
        panic!("the frozen plugin did not retry a SERVER failure");
    };
    assert_eq!(retry.delay_ms, 7.0);
    let record: Value = serde_json::from_str(retry.record.as_str()).unwrap();
    assert_eq!((&record["turn"], &record["step"], &record["provider"]), (&3.into(), &2.into(), &"relay".into()));
    let other = RequestErrorPayload::new(3, 2, "relay", failure("AUTH", 401), None);
    assert_eq!(instance.on_request_error(&other, &host.context()), Ok(Answer::Pass));
}

#[test]
fn a_variant_the_frozen_plugin_does_not_know_is_a_clear_failure_and_known_ones_still_work() {
    let instance = frozen_instance();
    let host = SessionlessHost::default();
    let payload = RequestErrorPayload::new(1, 1, "relay", failure("TIMEOUT", 504), None);
    let error = instance
        .after_downstream(&payload, &host.context(), &mut DownstreamOutcome::Cancelled)
        .expect_err("Cancelled is newer than the frozen interface");
    assert!(error.message.contains("unknown to this build"), "{}", error.message);
    assert!(!error.panicked && !instance.is_faulted());
    let retry = RetryDecision { delay_ms: 3.0, record: r#"{"retryId":"r","retry":1}"#.into() };
    let mut lent = DownstreamOutcome::Retried(retry.clone());
    let kept = instance.after_downstream(&payload, &host.context(), &mut lent);
    assert_eq!(kept, Ok(Decision::Retry(retry.clone())));
    assert_eq!(lent, DownstreamOutcome::Retried(retry), "the outcome lent across the boundary comes back whole");
}

#[test]
fn the_frozen_plugin_installed_before_llm_retry_acts_on_a_503() {
    let home = TestHome::new();
    let layer = "- insert:\n    - {id: frozen, name: fixture-abi-frozen}\n  before: llm-retry\n";
    let package = package_dir(&home, "fixture-abi-frozen", abi_frozen_library(), Some(layer));
    let add = home.run(&["plugin", "add", package.to_str().unwrap()]);
    add.expect_code(0);
    let mock = MockProcess::start(&home, "- status: 503\n- ok: recovered\n");
    let turn = run_turn(&home, &route_patch(&home, &mock, TINY, ""), "hi");
    turn.run.expect_code(0);
    let retries = turn.of_type("llm/retry");
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0]["data"]["retryId"], "frozen", "the frozen plugin, placed first, decided");
}
