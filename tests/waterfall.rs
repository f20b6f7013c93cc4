//! The waterfall over listeners living in real cdylibs, loaded through the real ABI in this
//! process: panics stay inside the plugin, faulted instances are not called again, libraries load
//! side by side and from two paths.

use abi_stable::std_types::ROption;
use dsh_abi::{Failure, RequestErrorPayload};
use dsh_e2e::{artifacts, TestHome};
use dsh_host::agent::assembly::{load_plugins, PluginRow};
use dsh_host::context::SessionlessHost;
use dsh_host::counters::Stores;
use dsh_host::plugin::{InstantiateFailure, PluginLibrary, RowInstance};
use dsh_host::waterfall::{self, Outcome};
use serde_json::json;

fn scripted() -> PluginLibrary {
    PluginLibrary::load(&artifacts().library("fixture-scripted")).expect("the scripted fixture loads")
}

fn row(library: &PluginLibrary, id: &str, config: serde_json::Value) -> RowInstance {
    library.instantiate(id, &config).unwrap_or_else(|err| panic!("row {id}: {err:?}"))
}

fn payload() -> RequestErrorPayload {
    RequestErrorPayload {
        model: Default::default(),
        endpoint_host: Default::default(),
        turn: 1,
        step: 1,
        provider: "mock".into(),
        failure: Failure::new("SERVER", "HTTP 503 from http://127.0.0.1/v1/chat/completions"),
        retry_policy: ROption::RNone,
        request_tokens: 0,
    }
}

fn run(rows: &[&RowInstance]) -> Outcome {
    waterfall::run(rows, &payload(), &SessionlessHost::default().context())
}

/// The fixture's `row` and `saw` of the record that won.
fn record_of(outcome: &Outcome) -> serde_json::Value {
    match outcome {
        Outcome::Retry { retry: decision, .. } => {
            let record: serde_json::Value = serde_json::from_str(&decision.record).unwrap();
            json!({"row": record["row"], "saw": record["saw"]})
        }
        other => panic!("expected a retry, got {other:?}"),
    }
}

#[test]
fn a_panicking_listener_answers_no_retry_and_the_outer_listener_is_told() {
    let library = scripted();
    let outer = row(&library, "outer", json!({"answer": "delegate-first", "afterDownstream": "retry"}));
    let middle = row(&library, "middle", json!({"answer": "panic"}));
    let last = row(&library, "last", json!({"answer": "retry"}));
    let outcome = run(&[&outer, &middle, &last]);
    let saw = record_of(&outcome)["saw"].as_str().unwrap().to_owned();
    assert!(saw.starts_with("failed: row \"middle\": agent/request-error listener panicked: "), "{saw}");
    assert!(saw.contains("row middle was told to panic"), "{saw}");
    assert!(middle.is_faulted());
}

#[test]
fn a_faulted_instance_is_not_called_again_and_passes_later_failures_on() {
    let library = scripted();
    let panicky = row(&library, "panicky", json!({"answer": "panic"}));
    let retrying = row(&library, "retrying", json!({"answer": "retry"}));
    let Outcome::NoRetry { failures, .. } = run(&[&panicky, &retrying]) else {
        panic!("the panicked branch cannot retry")
    };
    assert_eq!(failures[0].0, "panicky");
    assert!(panicky.is_faulted());
    match run(&[&panicky, &retrying]) {
        Outcome::Retry { row_id, .. } => assert_eq!(row_id, "retrying"),
        other => panic!("a faulted row should pass the failure on, got {other:?}"),
    }
}

#[test]
fn a_panic_in_after_downstream_is_contained() {
    let library = scripted();
    let outer = row(&library, "outer", json!({"answer": "delegate-first", "afterDownstream": "panic"}));
    let last = row(&library, "last", json!({"answer": "retry"}));
    let Outcome::NoRetry { failures, .. } = run(&[&outer, &last]) else { panic!("a panicked branch cannot retry") };
    assert_eq!(failures[0].0, "outer");
}

#[test]
fn a_delegate_first_listener_in_a_cdylib_passes_a_downstream_retry_through() {
    let library = scripted();
    let outer = row(&library, "outer", json!({"answer": "delegate-first"}));
    let last = row(&library, "last", json!({"answer": "retry", "delayMs": 7}));
    let outcome = run(&[&outer, &last]);
    match &outcome {
        Outcome::Retry { retry: decision, row_id } => {
            assert_eq!(row_id, "last");
            assert_eq!(decision.delay_ms, 7.0);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(record_of(&outcome)["row"], "last");
}

#[test]
fn invalid_configs_are_refused_with_every_problem() {
    let error = scripted().instantiate("bad", &json!({"answer": "sing", "colour": "red"})).err().expect("refused");
    let InstantiateFailure::Config(errors) = error else { panic!("{error:?}") };
    let paths: Vec<&str> = errors.iter().map(|error| error.path.as_str()).collect();
    assert_eq!(paths, ["colour", "answer"]);
    assert_eq!(errors[0].message.as_str(), "unknown key \"colour\"");
}

#[test]
fn a_panic_while_instantiating_is_an_error_value() {
    let error = scripted().instantiate("boom", &json!({"panicOnInstantiate": true})).err().expect("refused");
    assert!(
        matches!(&error, InstantiateFailure::Failed(message) if message.contains("panicked while instantiating")),
        "{error:?}"
    );
}

#[test]
fn the_same_plugin_loads_side_by_side_from_two_paths() {
    let home = TestHome::new();
    let libraries: Vec<PluginLibrary> = ["one", "two"]
        .iter()
        .map(|name| {
            let copy = home.path().join(format!("libscripted_{name}.so"));
            std::fs::copy(artifacts().library("fixture-scripted"), &copy).unwrap();
            PluginLibrary::load(&copy).unwrap()
        })
        .collect();
    assert_ne!(libraries[0].path, libraries[1].path);
    let first = row(&libraries[0], "first", json!({"answer": "delegate-first", "afterDownstream": "retry"}));
    let second = row(&libraries[1], "second", json!({"answer": "pass"}));
    let outcome = run(&[&first, &second]);
    assert_eq!(record_of(&outcome), json!({"row": "first", "saw": "declined"}));
}

#[test]
fn downstream_outcomes_cross_the_boundary_intact() {
    let library = scripted();
    let outer = row(&library, "outer", json!({"answer": "delegate-first", "afterDownstream": "retry"}));
    let failing = row(&library, "failing", json!({"answer": "fail"}));
    let outcome = run(&[&outer, &failing]);
    assert_eq!(
        record_of(&outcome)["saw"],
        "failed: row \"failing\": agent/request-error listener failed: fixture-scripted: row failing was told to fail"
    );
}

#[test]
fn two_different_plugins_share_one_waterfall() {
    let scripted = scripted();
    let executor = PluginLibrary::load(&artifacts().library("llm-retry")).unwrap();
    assert_ne!(scripted.manifest.name, executor.manifest.name, "each library answers for itself");
    let outer = row(&scripted, "outer", json!({"answer": "delegate-first", "afterDownstream": "keep"}));
    let llm_retry = row(&executor, "llm-retry", serde_json::Value::Null);
    let mut with_policy = payload();
    with_policy.retry_policy = ROption::RSome(dsh_abi::RetryPolicy {
        mode: dsh_abi::PolicyMode::Normal,
        max_retries: 1,
        retryable_codes: vec!["SERVER".into()].into(),
        initial_delay_ms: 500.0,
        max_delay_ms: 500.0,
        jitter_ratio: 0.0,
    });
    let host = SessionlessHost::default();
    let context = host.context();
    let listeners: [&RowInstance; 2] = [&outer, &llm_retry];
    let outcome = waterfall::run(&listeners, &with_policy, &context);
    match outcome {
        Outcome::Retry { retry: decision, row_id } => {
            assert_eq!(row_id, "llm-retry");
            assert_eq!(decision.delay_ms, 500.0);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_row_without_the_counters_capability_keeps_its_own_store_key_and_gets_no_counters() {
    let row = PluginRow {
        row_id: "own-store".into(),
        package: "fixture-scripted".into(),
        library: artifacts().library("fixture-scripted"),
        config: json!({"store": "redis://127.0.0.1:1"}),
        config_layer: "test".into(),
        profile: "test".into(),
        installed_sha256: None,
    };
    let home = TestHome::new();
    let loaded = load_plugins(&[row], true, &Stores::at(home.path()));
    assert!(loaded.problems.is_empty() && loaded.store_problems.is_empty(), "the host read no store of its own");
    let instance = loaded.plugins[0].instance.as_ref().expect("instantiated");
    assert!(!instance.may_wait(), "no counter store was opened for the row");
}
