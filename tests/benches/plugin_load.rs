//! Plugin load time: open + abi_stable layout check + manifest, per library. Each sample loads a
//! fresh copy of the library (a path already open would be answered from the loader's cache, and
//! libraries are never unloaded), so the sample count is fixed rather than left to criterion.

use std::time::{Duration, Instant};

use dsh_e2e::artifacts;
use dsh_host::plugin::PluginLibrary;

const SAMPLES: usize = 41;

fn main() {
    let source = artifacts().library("fixture-scripted");
    let scratch = tempfile::tempdir().expect("scratch dir");
    let copies: Vec<_> = (0..SAMPLES)
        .map(|index| {
            let copy = scratch.path().join(format!("libcopy_{index}.so"));
            std::fs::copy(&source, &copy).expect("copy the library");
            copy
        })
        .collect();
    let mut times: Vec<Duration> = copies
        .iter()
        .map(|copy| {
            let started = Instant::now();
            PluginLibrary::load(copy).expect("the copy loads");
            started.elapsed()
        })
        .collect();
    times.sort();
    let median = times[SAMPLES / 2];
    println!(
        "| plugin load (open + ABI layout check + manifest) | ≤ 1 ms per library | {:.3} ms ({SAMPLES} fresh copies; min {:.3} ms, max {:.3} ms) |",
        median.as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        times[SAMPLES - 1].as_secs_f64() * 1e3
    );
}
