//! `dsh session verify` on generated logs: wall time, throughput and peak RSS of the whole
//! process, for 10^4 to 2·10^6 events; and, when `DSH_REFERENCE_INVARIANT` names a folder where
//! `@deepseek-ai/dsh-llm-retry` is installed (benches/verify.sh does that), the reference
//! TypeScript invariant on 100,000-event logs of both shapes, side by side (whole processes).
//!
//! `DSH_BENCH_SIZES=10000,100000` limits the sizes.

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use dsh_e2e::logs::{self, Shape};
use dsh_e2e::{artifacts, workspace_root};

/// Runs a command to completion; returns its status, wall time and peak RSS in KiB.
fn measure(command: &mut Command) -> (ExitStatus, Duration, i64) {
    let started = Instant::now();
    let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
    let (status, peak) = dsh_e2e::process::wait_with_peak_rss(child).expect("wait4");
    (status, started.elapsed(), peak)
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

const SHAPES: [(&str, Shape); 2] = [
    ("chunk-heavy (5 % retry records)", Shape::ChunkHeavy),
    ("retry-heavy (37.5 % retry records, a new chain per turn)", Shape::RetryHeavy),
];

fn main() {
    let sizes: Vec<u64> = std::env::var("DSH_BENCH_SIZES")
        .ok()
        .map(|sizes| sizes.split(',').map(|size| size.trim().parse().expect("DSH_BENCH_SIZES: numbers")).collect())
        .unwrap_or_else(|| vec![10_000, 100_000, 1_000_000, 2_000_000]);
    let dsh = artifacts().dsh();
    let dir = artifacts().dir.parent().unwrap().join("bench-logs");
    std::fs::create_dir_all(&dir).unwrap();
    let mut headlines = Vec::new();
    for (name, shape) in SHAPES {
        println!("### `dsh session verify` on generated {name} logs (whole process, median of 3 runs)\n");
        println!("| events | log size | time | throughput | peak RSS |");
        println!("|---:|---:|---:|---:|---:|");
        let mut headline = None;
        let mut measured = Vec::new();
        for &size in &sizes {
            let path = dir.join(format!("{shape:?}-{size}.jsonl"));
            let events = logs::write_valid_log(&path, size, shape).unwrap();
            let (time, peak) = verify(&dsh, &path);
            let bytes = std::fs::metadata(&path).unwrap().len();
            println!(
                "| {events} | {:.1} MB | {:.3} s | {:.0} MB/s | {:.1} MB |",
                bytes as f64 / 1e6,
                time.as_secs_f64(),
                bytes as f64 / 1e6 / time.as_secs_f64(),
                peak as f64 / 1024.0
            );
            headline = Some((events, bytes, time, peak));
            measured.push((events, peak));
        }
        println!();
        if let (Shape::RetryHeavy, [.., (small_events, small_peak), (large_events, large_peak)]) =
            (shape, &measured[..])
        {
            let chains = (large_events - small_events) / 16;
            let per_chain = (large_peak - small_peak) as f64 * 1024.0 / chains as f64;
            println!("Retry-heavy logs hold one chain per 16 events: peak RSS grows by {per_chain:.0} bytes per retry chain between the two largest logs.\n");
        }
        headlines.extend(headline.map(|headline| (name, headline)));
    }
    for (name, (events, bytes, time, peak)) in headlines {
        println!(
            "| `dsh session verify`, {name}, {events} events ({:.0} MB) | ≥ 200 MB/s, peak RSS < 64 MB | {:.0} MB/s ({:.2} s), peak RSS {:.1} MB |",
            bytes as f64 / 1e6,
            bytes as f64 / 1e6 / time.as_secs_f64(),
            time.as_secs_f64(),
            peak as f64 / 1024.0
        );
    }
    let Ok(reference) = std::env::var("DSH_REFERENCE_INVARIANT") else { return };
    let script = workspace_root().join("benches/reference-invariant.mjs");
    for (name, shape) in SHAPES {
        let path = dir.join(format!("{shape:?}-reference.jsonl"));
        logs::write_valid_log(&path, 100_000, shape).unwrap();
        let (ours, _) = verify(&dsh, &path);
        let (status, theirs, _) = measure(Command::new("node").arg(&script).arg(Path::new(&reference)).arg(&path));
        assert!(status.success(), "the reference invariant failed on {}", path.display());
        println!(
            "| `dsh session verify` vs the reference TypeScript invariant, 100,000 events, {name} | ≥ 100× | {:.0}× ({:.3} s vs {:.2} s) |",
            theirs.as_secs_f64() / ours.as_secs_f64(),
            ours.as_secs_f64(),
            theirs.as_secs_f64()
        );
    }
}

/// Median wall time of three whole `dsh session verify` runs, and the largest peak RSS (KiB).
fn verify(dsh: &Path, path: &Path) -> (Duration, i64) {
    let mut times = Vec::new();
    let mut peak = 0;
    for _ in 0..3 {
        let (status, elapsed, rss) = measure(Command::new(dsh).args(["session", "verify"]).arg(path));
        assert!(status.success(), "verify found violations in the valid log {}", path.display());
        times.push(elapsed);
        peak = peak.max(rss);
    }
    (median(times), peak)
}
