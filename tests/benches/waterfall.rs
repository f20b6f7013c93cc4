//! The waterfall decision (payload in, decision out, no waits) with criterion:
//!
//! - 4 listeners in real cdylibs: the fixture (delegate-first, pass, pass, retry), and the shipped
//!   plugins (dsh-retry delegating first, relay-retry and a fixture passing, llm-retry deciding);
//! - the chain-lookup cost against log length: llm-retry's decision with 100 and with 1,000,000
//!   events in the history index.
//!
//! After criterion's own report it prints one Markdown row per target (the medians), for
//! benches/report.sh. The two waterfall decisions are timed in [`PROCESSES`] processes (this one
//! and those it starts), and their row gives the median over processes. With
//! `DSH_BENCH_DECISIONS=N` it skips criterion and runs the shipped chain's decision N times
//! through `decide_once`, for benches/instructions.sh to count under callgrind.

use std::sync::atomic::AtomicBool;

use abi_stable::std_types::RString;
use criterion::Criterion;
use dsh_abi::{Failure, PolicyMode, RequestErrorPayload, RetryPolicy};
use dsh_e2e::{artifacts, RedisServer};
use dsh_host::agent::assembly::{load_plugins, PluginRow};
use dsh_host::context::{call_context, CallContext, SystemServices};
use dsh_host::counters::Stores;
use dsh_host::plugin::{PluginLibrary, RowInstance};
use dsh_host::waterfall::{self, Outcome};
use dsh_session::index::HistoryIndex;
use serde_json::{json, Value};

const DEFAULT_KEY: &str =
    r#"[\"normal\",5,[\"EMPTY_RESPONSE\",\"RATE_LIMIT\",\"SERVER\",\"TIMEOUT\",\"TRANSPORT\"],500,10000,0.1]"#;

fn payload(turn: u64, policy: Option<RetryPolicy>) -> RequestErrorPayload {
    RequestErrorPayload {
        model: Default::default(),
        endpoint_host: Default::default(),
        turn,
        step: 1,
        provider: "deepseek-official".into(),
        failure: Failure::new("SERVER", "HTTP 503 from http://127.0.0.1:9/v1/chat/completions: Service Unavailable"),
        retry_policy: policy.into(),
        request_tokens: 0,
    }
}

fn default_policy() -> RetryPolicy {
    RetryPolicy {
        mode: PolicyMode::Normal,
        max_retries: 5,
        retryable_codes: ["EMPTY_RESPONSE", "RATE_LIMIT", "SERVER", "TIMEOUT", "TRANSPORT"]
            .iter()
            .map(|code| RString::from(*code))
            .collect(),
        initial_delay_ms: 500.0,
        max_delay_ms: 10_000.0,
        jitter_ratio: 0.1,
    }
}

fn rows(library: &PluginLibrary, rows: &[(&str, Value)]) -> Vec<RowInstance> {
    rows.iter().map(|(id, config)| library.instantiate(id, config).unwrap()).collect()
}

fn load(package: &str) -> PluginLibrary {
    PluginLibrary::load(&artifacts().library(package)).unwrap()
}

/// A history of `events` events: turns of 20, each with a retry chain of 2 records, so the
/// index holds one chain per turn.
fn history(events: u64) -> HistoryIndex {
    let mut index = HistoryIndex::new("{}".into());
    let mut seq = 0;
    let mut turn = 0;
    while seq < events {
        turn += 1;
        index.observe("turn/start", "{}", "{}");
        for retry in 1..=2 {
            let data = format!(
                r#"{{"retryId":"chain-{turn}","turn":{turn},"step":1,"provider":"deepseek-official","mode":"normal","policyKey":"{DEFAULT_KEY}","retry":{retry},"maxRetries":5,"delayMs":500,"failure":{{"message":"m","code":"SERVER"}}}}"#
            );
            index.observe("llm/retry", "{}", &data);
        }
        for _ in 0..17 {
            index.observe("assistant/chunk", "{}", "{}");
        }
        seq += 20;
    }
    index
}

fn decision(
    c: &mut Criterion,
    id: &str,
    listeners: &[&RowInstance],
    history: &HistoryIndex,
    payload: &RequestErrorPayload,
) {
    let cancelled = AtomicBool::new(false);
    let context = call_context(history, &cancelled, false, &SystemServices);
    assert!(
        matches!(waterfall::run(listeners, payload, &context), Outcome::Retry { .. }),
        "{id}: the bench must reach a decision"
    );
    c.bench_function(id, |b| b.iter(|| waterfall::run(listeners, payload, &context)));
}

/// `retry-budget` on `store` in front of `llm-retry`, as a profile's assembly builds it.
fn budget_row(store: &str, counters: &Stores) -> RowInstance {
    let row = PluginRow {
        row_id: "retry-budget".into(),
        package: "retry-budget".into(),
        library: artifacts().library("retry-budget"),
        config: json!({"maxTokens": 1000, "store": store}),
        config_layer: "bench".into(),
        profile: "bench".into(),
        installed_sha256: None,
    };
    let mut loaded = load_plugins(&[row], true, counters);
    assert!(loaded.problems.is_empty() && loaded.store_problems.is_empty(), "{:?}", loaded.store_problems);
    loaded.plugins.remove(0).instance.expect("retry-budget instantiates")
}

/// A decision through a budget row on each store: the store's round trip is on every failure
/// (after the bucket runs dry the budget refuses, after the same round trip).
fn budget_decisions(c: &mut Criterion, executor: &RowInstance) -> Vec<(&'static str, f64)> {
    let redis = RedisServer::start();
    let home = tempfile::tempdir().unwrap();
    let counters = Stores::at(home.path());
    let mut medians = Vec::new();
    for (label, store) in [("memory", "memory"), ("machine", "machine"), ("redis", redis.url.as_str())] {
        let budget = budget_row(store, &counters);
        let listeners = [&budget, executor];
        let cancelled = AtomicBool::new(false);
        let history = HistoryIndex::default();
        let context = call_context(&history, &cancelled, false, &SystemServices);
        let payload = payload(1, Some(default_policy()));
        assert!(matches!(waterfall::run(&listeners, &payload, &context), Outcome::Retry { .. }), "{label}");
        let id = format!("budget/{label}");
        c.bench_function(&id, |b| b.iter(|| waterfall::run(&listeners, &payload, &context)));
        medians.push((label, median_ns(&id)));
    }
    medians
}

fn median_ns(id: &str) -> f64 {
    let path =
        artifacts().dir.parent().unwrap().join("criterion").join(id.replace('/', "_")).join("new/estimates.json");
    let estimates: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display())))
            .unwrap();
    estimates["median"]["point_estimate"].as_f64().unwrap()
}

/// The shipped chain: dsh-retry delegating first, relay-retry and a fixture passing, llm-retry
/// deciding.
fn shipped_chain(fixture: &PluginLibrary) -> Vec<RowInstance> {
    let (dsh_retry, relay, executor) = (load("dsh-retry"), load("relay-retry"), load("llm-retry"));
    vec![
        dsh_retry.instantiate("model-error-retry", &Value::Null).unwrap(),
        relay.instantiate("relay-retry", &json!({"retryableCodes": ["AUTH"]})).unwrap(),
        fixture.instantiate("scripted", &json!({"answer": "pass"})).unwrap(),
        executor.instantiate("llm-retry", &Value::Null).unwrap(),
    ]
}

/// `decisions` decisions of `chain`, each in its own call for callgrind to count.
fn count_decisions(chain: &[RowInstance], decisions: u64) {
    let listeners: Vec<&RowInstance> = chain.iter().collect();
    let (history, cancelled) = (HistoryIndex::default(), AtomicBool::new(false));
    let context = call_context(&history, &cancelled, false, &SystemServices);
    let payload = payload(1, Some(default_policy()));
    for _ in 0..decisions {
        decide_once(&listeners, &payload, &context);
    }
}

#[inline(never)]
fn decide_once(listeners: &[&RowInstance], payload: &RequestErrorPayload, context: &CallContext<'_>) {
    std::hint::black_box(waterfall::run(listeners, payload, context));
}

/// How many processes time the waterfall decisions. On a shared 2-core VM one build's timing moves
/// by up to half between processes, far more than within one, so the row gives the median over
/// processes and their range.
const PROCESSES: usize = 5;

/// Set in the processes this bench starts to time the waterfall decisions again.
const CHILD: &str = "DSH_BENCH_WATERFALL_CHILD";

/// How a child process reports its medians (ns): fixtures, then the shipped chain.
const CHILD_LINE: &str = "waterfall medians:";

fn main() {
    let fixture = load("fixture-scripted");
    if let Some(decisions) = std::env::var("DSH_BENCH_DECISIONS").ok().and_then(|n| n.parse().ok()) {
        return count_decisions(&shipped_chain(&fixture), decisions);
    }
    let mut criterion = Criterion::default().configure_from_args();
    let shipped = shipped_chain(&fixture);
    let medians = waterfall_medians(&mut criterion, &fixture, &shipped);
    if std::env::var_os(CHILD).is_some() {
        return println!("{CHILD_LINE} {} {}", medians.0, medians.1);
    }
    let llm_retry: Vec<&RowInstance> = vec![&shipped[3]];
    let small = history(100);
    decision(&mut criterion, "lookup/100", &llm_retry, &small, &payload(3, Some(default_policy())));
    let large = history(1_000_000);
    decision(&mut criterion, "lookup/1000000", &llm_retry, &large, &payload(30_000, Some(default_policy())));
    let budgets = budget_decisions(&mut criterion, &shipped[3]);
    criterion.final_summary();

    let mut runs = vec![medians];
    runs.extend((1..PROCESSES).map(|_| child_medians()));
    print_rows(&runs, &budgets);
}

/// The two waterfall decisions: four fixtures, and the shipped chain. Their medians (ns).
fn waterfall_medians(c: &mut Criterion, fixture: &PluginLibrary, shipped: &[RowInstance]) -> (f64, f64) {
    let fixture_rows = rows(
        fixture,
        &[
            ("outer", json!({"answer": "delegate-first"})),
            ("second", json!({"answer": "pass"})),
            ("third", json!({"answer": "pass"})),
            ("decider", json!({"answer": "retry"})),
        ],
    );
    let fixture_listeners: Vec<&RowInstance> = fixture_rows.iter().collect();
    decision(c, "waterfall/fixture", &fixture_listeners, &HistoryIndex::default(), &payload(1, None));
    let shipped_listeners: Vec<&RowInstance> = shipped.iter().collect();
    let policy = Some(default_policy());
    decision(c, "waterfall/shipped", &shipped_listeners, &HistoryIndex::default(), &payload(1, policy));
    (median_ns("waterfall/fixture"), median_ns("waterfall/shipped"))
}

/// Times the waterfall decisions again in a new process of this bench.
fn child_medians() -> (f64, f64) {
    let bench = std::env::current_exe().expect("the bench's own path");
    let output = std::process::Command::new(&bench).arg("--bench").arg("waterfall/").env(CHILD, "1").output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().find_map(|line| line.strip_prefix(CHILD_LINE));
    let figures: Vec<f64> = line.into_iter().flat_map(str::split_whitespace).filter_map(|n| n.parse().ok()).collect();
    match figures[..] {
        [fixture, shipped] => (fixture, shipped),
        _ => panic!("{} gave no medians: {:?}\n{stdout}", bench.display(), output.status),
    }
}

/// The median of `values` and their range, in µs.
fn spread(mut values: Vec<f64>) -> String {
    values.sort_by(f64::total_cmp);
    let micros = |ns: f64| ns / 1000.0;
    let (low, middle, high) = (values[0], values[values.len() / 2], values[values.len() - 1]);
    format!("{:.2} µs ({:.2}–{:.2})", micros(middle), micros(low), micros(high))
}

fn print_rows(runs: &[(f64, f64)], budgets: &[(&str, f64)]) {
    println!(
        "| waterfall decision, 4 listeners in real cdylibs, no waits (median over {} processes, and its range) | ≤ 2 µs | {} (fixtures); {} (dsh-retry, relay-retry, a fixture, llm-retry) |",
        runs.len(),
        spread(runs.iter().map(|run| run.0).collect()),
        spread(runs.iter().map(|run| run.1).collect()),
    );
    let (small_ns, large_ns) = (median_ns("lookup/100"), median_ns("lookup/1000000"));
    println!(
        "| chain lookup vs log length: decision at 1,000,000 events vs 100 | ≤ 2× | {:.2} µs vs {:.2} µs ({:.2}×) |",
        large_ns / 1000.0,
        small_ns / 1000.0,
        large_ns / small_ns
    );
    let figures: Vec<String> = budgets.iter().map(|(label, ns)| format!("{label} {:.2} µs", ns / 1000.0)).collect();
    println!(
        "| waterfall decision with `retry-budget` before `llm-retry`, per store (the store's round trip on every failure) | — | {} |",
        figures.join("; ")
    );
}
