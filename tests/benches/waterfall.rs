//! One `agent/request-error` waterfall pass through 4 listeners living in real cdylibs: payload
//! in, decision out, no waits.

use std::sync::atomic::AtomicBool;

use abi_stable::std_types::ROption;
use criterion::{criterion_group, criterion_main, Criterion};
use dsh_abi::{Failure, RequestErrorPayload};
use dsh_e2e::artifacts;
use dsh_host::context::{CallContext, SystemServices};
use dsh_host::plugin::{PluginLibrary, RowInstance};
use dsh_host::session::index::HistoryIndex;
use dsh_host::waterfall;
use serde_json::json;

fn payload() -> RequestErrorPayload {
    RequestErrorPayload {
        turn: 1,
        step: 1,
        provider: "mock".into(),
        failure: Failure::new("SERVER", "HTTP 503 from http://127.0.0.1:9/v1/chat/completions: Service Unavailable"),
        retry_policy: ROption::RNone,
    }
}

fn four_fixture_listeners(c: &mut Criterion) {
    let library = PluginLibrary::load(&artifacts().library("fixture-scripted")).unwrap();
    let rows: Vec<RowInstance> = [
        ("outer", json!({"answer": "delegate-first"})),
        ("second", json!({"answer": "pass"})),
        ("third", json!({"answer": "pass"})),
        ("decider", json!({"answer": "retry"})),
    ]
    .iter()
    .map(|(id, config)| library.instantiate(id, config).unwrap())
    .collect();
    let listeners: Vec<&RowInstance> = rows.iter().collect();
    let history = HistoryIndex::default();
    let cancelled = AtomicBool::new(false);
    let context =
        CallContext { history: &history, cancelled: &cancelled, pending_input: false, services: &SystemServices };
    let payload = payload();
    c.bench_function("waterfall/4 cdylib listeners (fixture: delegate-first, pass, pass, retry)", |b| {
        b.iter(|| waterfall::run(&listeners, &payload, &context.as_abi()))
    });
}

criterion_group!(benches, four_fixture_listeners);
criterion_main!(benches);
