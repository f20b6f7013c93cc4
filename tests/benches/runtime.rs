//! The runtime's speed figures (medians; every figure printed as a Markdown row):
//!
//! - adapter first-token latency (request written → first token) against `curl -N` on the same
//!   loopback mock server (curl's `time_starttransfer`);
//! - SSE chunks per second through the adapter, the mock sending as fast as it can;
//! - durable appends per second with batched fsync (and, for scale, one fsync per event);
//! - wait accuracy from the log of a real `dsh run` against a failing mock server
//!   (`llm/retry-started.time − llm/retry.time − delayMs`);
//! - a simulated 24 h always-mode chain: in-process provider, virtual (paused) clock, non-syncing
//!   log, the real llm-retry and invariant cdylibs;
//! - the memory of a real `dsh run` whose always-mode chain meets an endless stream for 60 s:
//!   peak RSS over 50–60 s against the peak over 5–10 s (`DSH_BENCH_ENDLESS_SECS` shortens it).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_abi::{Failure, LogLevel, PolicyMode, RetryPolicy};
use dsh_e2e::{artifacts, log_events, logs, MockProcess, Run, TestHome};
use dsh_host::agent::config::AgentConfig;
use dsh_host::agent::turn::{Agent, HeaderReason, TurnEnd, UserInput};
use dsh_host::agent::view::Silent;
use dsh_host::agent::{Assembly, Cancel, Route};
use dsh_host::context::Services;
use dsh_host::llm::config::parse_openai;
use dsh_host::llm::mock::{MockAction, MockLog, MockServer, MockStep};
use dsh_host::llm::openai::{AttemptFailure, ChatMessage, ChatRequest, Completion, Finish, OpenAiAdapter};
use dsh_host::llm::{ModelClient, StreamFuture};
use dsh_host::plugin::PluginLibrary;
use dsh_session::log::SessionLog;
use dsh_session::store::SessionStore;
use dsh_session::writer::SyncPolicy;
use serde_json::json;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn percentile(mut values: Vec<f64>, p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * p).round() as usize]
}

fn ok_step(text: String) -> MockStep {
    MockStep { action: MockAction::Ok(text), delay_ms: 0, hold: None, headers: Vec::new(), chunk_bytes: 0 }
}

fn adapter(base_url: &str) -> OpenAiAdapter {
    let config = parse_openai("bench", &json!({"provider": "bench", "baseUrl": base_url, "model": "m"})).unwrap();
    OpenAiAdapter::new(&config, base_url).unwrap()
}

fn request() -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: vec![ChatMessage::text("user", "hi")],
        tools: Vec::new(),
        session_id: None,
    }
}

async fn first_token_and_throughput() {
    let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let quiet = MockLog { stderr: false, record: None };
    let short = MockServer::start(listen, vec![ok_step("Hello there, this is a short answer.".into())], quiet.clone())
        .await
        .unwrap();
    let client = adapter(&short.base_url());
    let mut ours = Vec::new();
    for _ in 0..200 {
        let started = Instant::now();
        let mut first = None;
        let mut on_text = |_: &str| {
            first.get_or_insert_with(Instant::now);
        };
        client.stream(&request(), &mut on_text).await.unwrap();
        ours.push((first.unwrap() - started).as_secs_f64() * 1e3);
    }
    let url = format!("{}/chat/completions", short.base_url());
    let body = client.body(&request());
    let mut curl = Vec::new();
    for _ in 0..50 {
        let output = tokio::process::Command::new("curl")
            .args([
                "-N",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{time_starttransfer}",
                "-H",
                "content-type: application/json",
                "-d",
                &body,
                &url,
            ])
            .output()
            .await;
        match output {
            Ok(output) if output.status.success() => {
                curl.push(String::from_utf8_lossy(&output.stdout).trim().parse::<f64>().unwrap() * 1e3)
            }
            _ => break,
        }
    }
    let ours = median(ours);
    if curl.is_empty() {
        println!("| adapter first-token latency | ≤ curl + 1 ms | {ours:.3} ms (curl not available) |");
    } else {
        let curl = median(curl);
        println!("| adapter first-token latency vs `curl -N` | ≤ 1 ms more than curl | {ours:.3} ms vs {curl:.3} ms ({:+.3} ms) |", ours - curl);
    }

    const CHUNKS: usize = 50_000;
    let long = MockServer::start(listen, vec![ok_step("abcdefgh".repeat(CHUNKS))], quiet).await.unwrap();
    let client = adapter(&long.base_url());
    let mut rates = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let mut deltas = 0usize;
        let mut on_text = |_: &str| deltas += 1;
        client.stream(&request(), &mut on_text).await.unwrap();
        assert_eq!(deltas, CHUNKS);
        rates.push(CHUNKS as f64 / started.elapsed().as_secs_f64());
    }
    println!("| streaming throughput through the adapter | ≥ 50,000 chunks/s | {:.0} chunks/s |", median(rates));
}

fn durable_appends() {
    let dir = tempfile::tempdir().unwrap();
    let (batched, each) = logs::appends_per_second(&SessionStore::files(dir.path().to_owned()), "bench", 100_000, 500);
    println!("| durable appends, fsync batched every 200 ms | ≥ 20,000 events/s | {batched:.0} events/s (one fsync per event: {each:.0} events/s) |");
}

fn wait_accuracy() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- status: 503\n");
    let patch = home.write(
        "route.yml",
        &format!(
            "- id: llm-deepseek\n  name: llm-openai\n  config:\n    provider: deepseek-official\n    baseUrl: {}\n    model: m\n    retryPolicy: {{mode: normal, maxRetries: 60, backoff: {{initialDelayMs: 10, maxDelayMs: 40, jitterRatio: 0.5}}}}\n",
            mock.base_url
        ),
    );
    let run = Run::of(home.dsh().args(["run", "--patch"]).arg(&patch).arg("hi"));
    let id = run.stderr.lines().last().unwrap().strip_prefix("session ").unwrap().to_owned();
    let events = log_events(&home.path().join("sessions").join(id).join("session.jsonl"));
    let mut scheduled: HashMap<u64, (f64, f64)> = HashMap::new();
    let mut errors = Vec::new();
    for event in &events {
        let retry = event["data"]["retry"].as_u64().unwrap_or(0);
        let time = event["time"].as_f64().unwrap();
        match event["type"].as_str().unwrap() {
            "llm/retry" => {
                scheduled.insert(retry, (time, event["data"]["delayMs"].as_f64().unwrap()));
            }
            "llm/retry-started" => {
                let (at, delay) = scheduled[&retry];
                errors.push(time - at - delay);
            }
            _ => {}
        }
    }
    println!(
        "| wait accuracy, started − scheduled − delay ({} waits) | ≤ 5 ms p99 | p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms |",
        errors.len(),
        percentile(errors.clone(), 0.5),
        percentile(errors.clone(), 0.99),
        percentile(errors, 1.0)
    );
}

/// A clock that reads the runtime's (paused) time.
struct VirtualClock {
    start: tokio::time::Instant,
    base_ms: f64,
}

impl Services for VirtualClock {
    fn now_ms(&self) -> f64 {
        self.base_ms + self.start.elapsed().as_millis() as f64
    }
    fn random(&self) -> f64 {
        rand::random::<f64>()
    }
    fn new_id(&self) -> String {
        uuid::Uuid::new_v4().to_string()
    }
    fn log(&self, _: LogLevel, _: &str) {}
}

/// A provider that fails with SERVER until `until` on the runtime's clock, then answers.
struct FailingUntil {
    until: tokio::time::Instant,
}

impl ModelClient for FailingUntil {
    fn stream<'a>(&'a self, _: &'a ChatRequest, on_text: &'a mut (dyn FnMut(&str) + Send)) -> StreamFuture<'a> {
        Box::pin(async move {
            if tokio::time::Instant::now() < self.until {
                Err(AttemptFailure {
                    failure: Failure::new("SERVER", "HTTP 503 from the simulated relay"),
                    partial_text: String::new(),
                })
            } else {
                on_text("finally");
                Ok(Completion {
                    text: "finally".into(),
                    reasoning: String::new(),
                    usage: None,
                    finish: Finish::Stop,
                    tool_calls: Vec::new(),
                })
            }
        })
    }
}

fn simulated_day() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    let executor = PluginLibrary::load(&artifacts().library("llm-retry")).unwrap();
    let invariant_library = PluginLibrary::load(&artifacts().library("llm-retry-invariant")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (end, retries, wall) = runtime.block_on(async {
        let start = tokio::time::Instant::now();
        let services = Arc::new(VirtualClock { start, base_ms: 1.8e12 });
        let invariant =
            Arc::new(invariant_library.instantiate("llm-retry-invariant", &serde_json::Value::Null).unwrap());
        let policy = RetryPolicy {
            mode: PolicyMode::Always,
            max_retries: 0,
            retryable_codes: Default::default(),
            initial_delay_ms: 1000.0,
            max_delay_ms: 10_000.0,
            jitter_ratio: 0.1,
        };
        let route = Route {
            provider: "relay".into(),
            model: "m".into(),
            client: Box::new(FailingUntil { until: start + Duration::from_secs(24 * 3600) }),
            policy,
            wire: Default::default(),
            endpoint_host: "relay.example".into(),
            context_window: None,
        };
        let assembly = Assembly {
            agent: AgentConfig {
                row_id: "agent".into(),
                provider: "relay".into(),
                model: None,
                system: None,
                max_steps: 50,
                max_parallel_tools: 10,
            },
            tools: Default::default(),
            routes: HashMap::from([("relay".to_owned(), route)]),
            listeners: vec![Arc::new(executor.instantiate("llm-retry", &serde_json::Value::Null).unwrap())],
            session_start: Vec::new(),
            request_success: Vec::new(),
            route_rows: Vec::new(),
            checkers: vec![Arc::clone(&invariant)],
            mock_servers: Vec::new(),
            counters: dsh_host::counters::Stores::scratch(),
            may_wait: false,
        };
        let header = json!({"type": "session", "version": 0, "id": "day", "createdAt": 1.8e12, "delegationDepth": 0});
        let log = SessionLog::create(
            &SessionStore::files(dir.path().to_owned()),
            "day",
            &header,
            |header| assembly.open_checkers(header),
            SyncPolicy::Unsynced,
        )
        .unwrap();
        let mut agent =
            Agent { log, assembly, services, cancel: Cancel::default(), view: Box::new(Silent), turn_route: None };
        let wall = Instant::now();
        let input = UserInput { id: "u".into(), text: "hi".into(), source: json!({"kind": "user"}) };
        let end = agent.run_turn(input, HeaderReason::Initial).await.unwrap();
        let wall = wall.elapsed();
        let retries = agent.log.index().chain_count();
        (end, retries, wall)
    });
    assert_eq!(end, TurnEnd::Completed);
    let log = std::fs::read_to_string(dir.path().join("day/session.jsonl")).unwrap();
    let records = log.matches("\"type\":\"llm/retry\"").count();
    assert_eq!(retries, 1, "one always-mode chain");
    let verify = Command::new(artifacts().dsh())
        .args(["session", "verify"])
        .arg(dir.path().join("day/session.jsonl"))
        .output()
        .unwrap();
    assert!(verify.status.success(), "the simulated day's log verifies");
    println!(
        "| simulated 24 h always-mode chain ({records} retries, virtual clock, non-syncing log) | < 1 s | {:.3} s |",
        wall.as_secs_f64()
    );
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| line.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?.trim().parse().ok())
}

fn endless_stream_memory() {
    let seconds: u64 = std::env::var("DSH_BENCH_ENDLESS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- endless: \"lorem ipsum dolor sit amet \"\n");
    let patch = home.write(
        "route.yml",
        &format!(
            "- id: llm-deepseek\n  name: llm-openai\n  config:\n    provider: deepseek-official\n    baseUrl: {}\n    model: m\n    retryPolicy: {{mode: always, backoff: {{initialDelayMs: 10, maxDelayMs: 100}}}}\n",
            mock.base_url
        ),
    );
    let mut child = home
        .dsh()
        .args(["run", "--patch"])
        .arg(&patch)
        .arg("hi")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut samples: Vec<(f64, u64)> = Vec::new();
    while started.elapsed() < Duration::from_secs(seconds) {
        if let Some(rss) = rss_kib(child.id()) {
            samples.push((started.elapsed().as_secs_f64(), rss));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    dsh_e2e::process::kill_9(&mut child);
    let window = |from: f64, to: f64| {
        samples.iter().filter(|(at, _)| *at >= from && *at <= to).map(|(_, rss)| *rss).max().unwrap_or(0) as f64
    };
    let total = seconds as f64;
    let (early, late) = (window(total / 12.0, total / 6.0), window(total * 5.0 / 6.0, total));
    let attempts = std::fs::read_dir(home.path().join("sessions"))
        .ok()
        .and_then(|mut dir| dir.next())
        .and_then(|entry| std::fs::read_to_string(entry.ok()?.path().join("session.jsonl")).ok())
        .map_or(0, |log| log.matches("\"assistant/attempt\"").count());
    println!(
        "| memory of an always-mode chain against an endless stream ({attempts} attempts in {seconds} s): peak RSS over the last sixth vs over the second twelfth | within 20 % | {:.1} MB vs {:.1} MB ({:+.1} %) |",
        late / 1024.0,
        early / 1024.0,
        (late / early - 1.0) * 100.0
    );
}

fn main() {
    println!("| what | target | measured |");
    println!("|---|---|---|");
    tokio::runtime::Runtime::new().unwrap().block_on(first_token_and_throughput());
    durable_appends();
    wait_accuracy();
    simulated_day();
    endless_stream_memory();
}
