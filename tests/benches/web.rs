//! `dsh web` measured, one run, printed as the README's tables (`benches/web.sh` runs it):
//!
//! - append-to-browser latency: from an event's append (its `time`) to its arrival at each
//!   watcher of the session's event stream, p50 and p99, with 1 and with 100 watchers (tabs);
//! - 50 sessions driven concurrently through one server beside 50 `dsh run` processes: turns per
//!   second, CPU seconds and peak memory;
//! - the server's memory per idle open session;
//! - a 1,000, 10,000 and 100,000-event session: the server's first trajectory window, cold and
//!   cached, and in headless Chromium the page opening the session and drawing its trajectory.
//!
//! `DSH_BENCH_WEB=latency,fleet,idle,trajectory` picks parts.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use dsh_e2e::browser::Browser;
use dsh_e2e::logs::{self, Shape};
use dsh_e2e::turns::{route_patch, SECRET};
use dsh_e2e::web::WebServer;
use dsh_e2e::{MockProcess, TestHome};
use serde_json::Value;

const ANSWER: &str = "- ok: \"a short answer from the mock provider, streamed in a few chunks\"\n";

fn serve(home: &TestHome, patch: &std::path::Path) -> WebServer {
    let mut command = home.dsh();
    command.env("DEEPSEEK_API_KEY", SECRET).args(["web", "--port", "0", "--no-open", "--patch"]).arg(patch);
    WebServer::spawn(command)
}

fn now_ms() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs_f64() * 1000.0
}

fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * fraction).round() as usize]
}

fn new_session(web: &WebServer) -> String {
    web.api("POST", "/api/sessions", Some("{}")).json()["id"].as_str().unwrap().to_owned()
}

fn prompt(web: &WebServer, session: &str) {
    let sent = web.api("POST", &format!("/api/sessions/{session}/prompt"), Some(r#"{"text":"hello"}"#));
    assert_eq!(sent.status, 200, "{sent:?}");
}

/// `/proc/PID` figures of the server: CPU seconds used so far, peak and current RSS in MiB.
fn usage(pid: u32) -> (f64, f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| -> f64 {
        let line = status.lines().find(|line| line.starts_with(key)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap() / 1024.0
    };
    (ticks / 100.0, kib("VmHWM:"), kib("VmRSS:"))
}

/// Latencies of every event of `turns` turns, as `tabs` watchers received them.
fn latencies(tabs: usize, turns: usize) -> Vec<f64> {
    let home = TestHome::v4();
    let mock = MockProcess::start(&home, ANSWER);
    let patch = route_patch(&home, &mock, "", "");
    let web = serve(&home, &patch);
    let session = new_session(&web);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (ready, ends) = (std::sync::mpsc::channel(), std::sync::mpsc::channel());
    for tab in 0..tabs {
        let mut stream = web.events(&session, None);
        let (seen, ready, ends) = (seen.clone(), ready.0.clone(), ends.0.clone());
        std::thread::spawn(move || {
            let _ = ready.send(());
            while let Some(sent) = stream.next_sent() {
                let arrived = now_ms();
                if sent.event != "event" {
                    continue;
                }
                let event: Value = serde_json::from_str(&sent.data).unwrap();
                seen.lock().unwrap().push(arrived - event["time"].as_f64().unwrap());
                if tab == 0 && event["type"] == "turn/end" {
                    let _ = ends.send(());
                }
            }
        });
    }
    for _ in 0..tabs {
        ready.1.recv().unwrap();
    }
    for _ in 0..turns {
        prompt(&web, &session);
        ends.1.recv().unwrap();
    }
    let mut all = seen.lock().unwrap().clone();
    all.sort_by(f64::total_cmp);
    all
}

fn latency_table() {
    println!("### Append to browser: one session, its event stream watched by 1 and by 100 tabs\n");
    println!("| tabs | events received | p50 | p99 | max |");
    println!("|---:|---:|---:|---:|---:|");
    for tabs in [1, 100] {
        let all = latencies(tabs, 20);
        println!(
            "| {tabs} | {} | {:.1} ms | {:.1} ms | {:.1} ms |",
            all.len(),
            percentile(&all, 0.5),
            percentile(&all, 0.99),
            all.last().unwrap()
        );
    }
    println!("\nAn event's latency runs from its `time` (taken when it is appended, before its commit) to its arrival at the watcher's socket; both clocks are this machine's.\n");
}

/// Runs `rounds` turns in each of `sessions` sessions through one server: wall time, CPU, peak RSS.
fn through_one_server(sessions: usize, rounds: usize) -> (Duration, f64, f64) {
    let home = TestHome::v4();
    let mock = MockProcess::start(&home, ANSWER);
    let patch = route_patch(&home, &mock, "", "");
    let web = serve(&home, &patch);
    let ids: Vec<String> = (0..sessions).map(|_| new_session(&web)).collect();
    let (cpu_before, _, _) = usage(web.child.id());
    let started = Instant::now();
    let web = Arc::new(web);
    for _ in 0..rounds {
        let mut streams: Vec<_> = ids.iter().map(|id| web.events(id, None)).collect();
        let workers: Vec<_> = ids
            .iter()
            .zip(streams.drain(..))
            .map(|(id, mut stream)| {
                let (web, id) = (web.clone(), id.clone());
                std::thread::spawn(move || {
                    let ends_before = count_ends(&web, &id);
                    prompt(&web, &id);
                    let mut ends = 0;
                    while ends <= ends_before {
                        let sent = stream.next_sent().unwrap();
                        ends += usize::from(sent.event == "event" && sent.data.contains("\"turn/end\""));
                    }
                })
            })
            .collect();
        workers.into_iter().for_each(|worker| worker.join().unwrap());
    }
    let elapsed = started.elapsed();
    let (cpu_after, peak, _) = usage(web.child.id());
    (elapsed, cpu_after - cpu_before, peak)
}

fn count_ends(web: &WebServer, id: &str) -> usize {
    web.api("GET", &format!("/api/sessions/{id}"), None).json()["turns"].as_u64().unwrap_or(0) as usize
}

/// Runs one `dsh run` per session, all at once, `rounds` times: wall time, CPU, peak RSS of one.
fn as_processes(sessions: usize, rounds: usize) -> (Duration, f64, f64, f64) {
    let home = TestHome::v4();
    let mock = MockProcess::start(&home, ANSWER);
    let patch = route_patch(&home, &mock, "", "");
    let cpu = || {
        // SAFETY: an all-zero rusage is valid for getrusage to fill in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: RUSAGE_CHILDREN with a valid out-pointer.
        unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
        let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
        seconds(usage.ru_utime) + seconds(usage.ru_stime)
    };
    let (before, started) = (cpu(), Instant::now());
    let mut peaks = Vec::new();
    for _ in 0..rounds {
        let children: Vec<_> = (0..sessions)
            .map(|_| {
                let mut command = home.dsh();
                command.env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("hello");
                command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
            })
            .collect();
        for child in children {
            let (status, peak) = dsh_e2e::process::wait_with_peak_rss(child).unwrap();
            assert!(status.success());
            peaks.push(peak as f64 / 1024.0);
        }
    }
    let mean_peak = peaks.iter().sum::<f64>() / peaks.len() as f64;
    (started.elapsed(), cpu() - before, mean_peak, mean_peak * sessions as f64)
}

fn fleet_table() {
    let (sessions, rounds) = (50, 3);
    let (wall, cpu, peak) = through_one_server(sessions, rounds);
    let (process_wall, process_cpu, one_peak, all_peaks) = as_processes(sessions, rounds);
    let turns = (sessions * rounds) as f64;
    println!(
        "### {sessions} sessions at once, {rounds} turns each: one `dsh web` beside {sessions} `dsh run` processes\n"
    );
    println!("| | turns/s | CPU | memory |");
    println!("|---|---:|---:|---:|");
    println!(
        "| one `dsh web` | {:.1} | {:.1} s ({:.0} ms/turn) | {peak:.0} MB peak RSS |",
        turns / wall.as_secs_f64(),
        cpu,
        cpu * 1000.0 / turns
    );
    println!(
        "| {sessions} `dsh run` at a time | {:.1} | {:.1} s ({:.0} ms/turn) | {one_peak:.0} MB peak RSS each, {all_peaks:.0} MB together |",
        turns / process_wall.as_secs_f64(),
        process_cpu,
        process_cpu * 1000.0 / turns
    );
    println!("\nThe mock provider answers at once, so this is the hosts' own cost: a `dsh run` opens its profile, plugins and log for each turn; the server keeps each session open.\n");
}

fn idle_table() {
    let home = TestHome::v4();
    let mock = MockProcess::start(&home, ANSWER);
    let patch = route_patch(&home, &mock, "", "");
    let web = serve(&home, &patch);
    new_session(&web);
    let (_, _, base) = usage(web.child.id());
    let count = 200;
    for _ in 1..count {
        new_session(&web);
    }
    let (_, _, after) = usage(web.child.id());
    println!("### Idle sessions open in one `dsh web`\n");
    println!("| open sessions | RSS | per idle session |");
    println!("|---:|---:|---:|");
    println!("| 1 | {base:.1} MB | |");
    println!("| {count} | {after:.1} MB | {:.0} KB |\n", (after - base) * 1024.0 / (count - 1) as f64);
}

/// A home holding one generated session of about `events` events, and its id.
fn session_of(home: &TestHome, events: u64) -> String {
    let id = format!("bench-{events}");
    let folder = home.path().join("sessions").join(&id);
    std::fs::create_dir_all(&folder).unwrap();
    logs::write_valid_log(&folder.join("session.jsonl"), events, Shape::RetryHeavy).unwrap();
    id
}

/// The page opening session `id` (its last turns) and drawing its trajectory, the server cold:
/// the page's own times (opened, rows drawn) in ms.
fn page_times(browser: &Browser, web: &WebServer, id: &str) -> (f64, f64) {
    browser.goto(&format!("http://{}/?token={}", web.address, web.token));
    browser.wait_for("the page", "document.getElementById('new-profile').options.length > 0");
    browser.js("location.hash = arguments[0];", vec![serde_json::json!(id)]);
    let opened = browser.wait_for("the session open", "document.body.dataset.openedMs");
    browser.click("#tab-trajectory");
    let drawn = browser.wait_for("the rows", "document.body.dataset.trajectoryMs");
    let ms = |value: Value| value.as_str().unwrap().parse::<f64>().unwrap();
    (ms(opened), ms(drawn))
}

fn trajectory_table() {
    println!("### A long session in the page (generated retry-heavy logs, 63 turns per 1,000 events)\n");
    println!("| events | trajectory rows | first window from the API, cold / cached | chat opened (last 50 turns) | trajectory drawn |");
    println!("|---:|---:|---:|---:|---:|");
    let browser = Browser::start(&[]);
    for events in [1_000, 10_000, 100_000] {
        let home = TestHome::v4();
        let mock = MockProcess::start(&home, ANSWER);
        let patch = route_patch(&home, &mock, "", "");
        let id = session_of(&home, events);
        let window = format!("/api/sessions/{id}/trajectory?offset=0&limit=400");
        let (cold, warm, rows) = {
            let web = serve(&home, &patch);
            let timed = || {
                let started = Instant::now();
                let answer = web.api("GET", &window, None);
                (started.elapsed(), answer.json()["total"].clone())
            };
            let ((cold, rows), (warm, _)) = (timed(), timed());
            (cold, warm, rows)
        };
        let (opened, drawn) = page_times(&browser, &serve(&home, &patch), &id);
        println!(
            "| {events} | {rows} | {:.0} ms / {:.1} ms | {opened:.0} ms | {drawn:.0} ms |",
            cold.as_secs_f64() * 1000.0,
            warm.as_secs_f64() * 1000.0
        );
    }
    println!("\nTimes in the page are the page's own (`performance.now()`): from choosing the session to its status after the catch-up, and from the Trajectory tab's click to its first rows drawn. The chat asks for the last 50 turns' events (`?turns=50`); the trajectory for 400 rows at a time, drawing the ones in view. The server reads a log's trajectory once, then only what is appended.\n");
}

fn main() {
    let parts: HashMap<&str, fn()> = HashMap::from([
        ("latency", latency_table as fn()),
        ("fleet", fleet_table),
        ("idle", idle_table),
        ("trajectory", trajectory_table),
    ]);
    let chosen = std::env::var("DSH_BENCH_WEB").unwrap_or_else(|_| "latency,fleet,idle,trajectory".into());
    let cores = std::thread::available_parallelism().map_or(0, |cores| cores.get());
    println!("Measured on {cores} cores, release build, the mock provider on 127.0.0.1.\n");
    for part in chosen.split(',') {
        parts.get(part.trim()).unwrap_or_else(|| panic!("DSH_BENCH_WEB: no part {part:?}"))();
    }
}
