//! Hostile providers, through the real binary and `dsh mock-server`: enormous headers, an endless
//! stream, invalid UTF-8, frames split at every byte, and every kind of `Retry-After`. Each is
//! classified, and the process stays bounded in memory.

use dsh_e2e::turns::{route_patch, session_id, spawn_dsh, Turn, SECRET, TINY};
use dsh_e2e::{log_events, MockProcess, Run, TestHome};
use serde_json::Value;

/// The most memory a turn against a hostile provider may take, in KiB.
const MEMORY_BOUND_KIB: i64 = 256 * 1024;

fn hostile_turn(script: &str, policy: &str) -> (Turn, i64) {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, script);
    let patch = route_patch(&home, &mock, policy, "");
    let (run, peak) =
        Run::measured(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("hi"));
    let log = home.session_log(session_id(&run));
    let verify = home.run(&["session", "verify", log.to_str().unwrap()]);
    verify.expect_code(0);
    let events = log_events(&log);
    (Turn { run, log, events }, peak)
}

fn attempt_failures(turn: &Turn) -> Vec<&Value> {
    turn.of_type("assistant/attempt").iter().map(|attempt| dsh_e2e::turns::attempt_failure(attempt)).collect()
}

#[test]
fn ten_megabyte_headers_are_a_transport_failure_in_bounded_memory() {
    let padding = "x".repeat(10 * 1024 * 1024);
    let (turn, peak) = hostile_turn(
        &format!("- status: 503\n  headers: {{x-padding: {padding}}}\n"),
        "{mode: normal, maxRetries: 1, backoff: {initialDelayMs: 5, maxDelayMs: 5, jitterRatio: 0}}",
    );
    turn.run.expect_code(1);
    assert_eq!(turn.end()["error"]["code"], "TRANSPORT", "{}", turn.end());
    assert!(peak < MEMORY_BOUND_KIB, "peak RSS {peak} KiB");
}

#[test]
fn an_endless_stream_is_cut_off_in_bounded_memory() {
    let (turn, peak) = hostile_turn("- endless: \"lorem ipsum \"\n", "{mode: normal, maxRetries: 0}");
    turn.run.expect_code(1);
    assert_eq!(turn.end()["error"]["code"], "UNKNOWN");
    assert!(turn.end()["error"]["message"].as_str().unwrap().contains("sent more than 64 MiB without finishing"));
    assert!(peak < MEMORY_BOUND_KIB, "peak RSS {peak} KiB");
}

#[test]
fn invalid_utf8_is_a_malformed_response() {
    let (turn, _) = hostile_turn("- invalidUtf8: true\n", "{mode: normal, maxRetries: 0}");
    assert_eq!(turn.end()["error"]["code"], "MALFORMED_RESPONSE");
    assert!(turn.end()["error"]["message"].as_str().unwrap().contains("not valid SSE: an SSE line is not valid UTF-8"));
}

#[test]
fn frames_split_at_every_byte_are_reassembled() {
    let text = "Grüße, \u{1F600}! Every byte of this answer arrives on its own.";
    let (turn, _) = hostile_turn(&format!("- ok: \"{text}\"\n  chunkBytes: 1\n"), TINY);
    turn.run.expect_code(0);
    assert_eq!(turn.run.stdout.trim_end(), text);
}

/// A turn over `script` in always mode with a 5 ms doubling backoff and no jitter, and the
/// `providerRetryAfterMs` of each failed attempt.
fn retry_after_hints(script: &str) -> (Turn, Vec<Option<f64>>) {
    let policy = "{mode: always, backoff: {initialDelayMs: 5, maxDelayMs: 2000, jitterRatio: 0}}";
    let (turn, _) = hostile_turn(script, policy);
    turn.run.expect_code(0);
    let hints = attempt_failures(&turn).iter().map(|failure| failure["providerRetryAfterMs"].as_f64()).collect();
    (turn, hints)
}

#[test]
fn every_kind_of_retry_after_is_classified() {
    let script = "\
- {status: 429, headers: {retry-after: '99999999999'}}
- {status: 429, headers: {retry-after: '-5'}}
- {status: 429, headers: {retry-after: 'Sat, 01 Jan 2000 00:00:00 GMT'}}
- {status: 429, headers: {retry-after: 'soon'}}
- {status: 429, headers: {retry-after: 'Sun, 29 Nov 2026 10:00:01 GMT', date: 'Sun, 29 Nov 2026 10:00:00 GMT'}}
- {status: 429, headers: {retry-after-ms: '12.5', retry-after: '9'}}
- ok: through
";
    let (turn, hints) = retry_after_hints(script);
    assert_eq!(hints, [Some(99_999_999_999_000.0), None, None, None, Some(1000.0), Some(12.5)]);
    let delays: Vec<f64> =
        turn.of_type("llm/retry").iter().map(|retry| retry["data"]["delayMs"].as_f64().unwrap()).collect();
    assert_eq!(
        delays,
        [5.0, 10.0, 20.0, 40.0, 1000.0, 12.5],
        "an over-long hint falls back to the local delay in always mode"
    );
}

#[test]
fn a_gateway_s_forwarded_wait_hint_is_read_when_the_plain_headers_are_missing() {
    let script = "\
- {status: 429, headers: {llm_provider-retry-after: '0.02'}}
- {status: 429, headers: {llm_provider-retry-after-ms: '15'}}
- {status: 429, headers: {retry-after: '0.01', llm_provider-retry-after-ms: '99'}}
- ok: through
";
    let (_, hints) = retry_after_hints(script);
    assert_eq!(hints, [Some(20.0), Some(15.0), Some(10.0)], "a plain header wins over the gateway's");
}

#[test]
fn a_retrying_gateway_in_front_of_the_provider_is_named_once_with_the_settings_that_turn_one_layer_off() {
    // As LiteLLM 1.110.2 answers (compat/litellm.sh): its errors carry x-litellm-call-id, its
    // successes also the retries it made.
    let script = "\
- {status: 503, headers: {x-litellm-call-id: a, x-litellm-timeout: '6000.0'}}
- {status: 503, headers: {x-litellm-call-id: b}}
- {ok: through, headers: {x-litellm-call-id: c, x-litellm-attempted-retries: '1'}}
";
    let (turn, _) = retry_after_hints(script);
    turn.run.expect_stderr(
        "dsh: warning: provider deepseek-official answers through a LiteLLM proxy (x-litellm-* headers); it retries \
         failures itself",
    );
    turn.run.expect_stderr(
        "set num_retries: 0 under litellm_settings in the proxy's config.yaml (and gatewayRetries: false on row \
         \"llm-deepseek\"), or retryPolicy: {mode: normal, maxRetries: 0} on that row to leave retries to the proxy",
    );
    assert_eq!(turn.run.stderr.matches("LiteLLM").count(), 1, "once per session: {}", turn.run.stderr);
    let (quiet, _) = hostile_turn(script, "{mode: normal, maxRetries: 3}\n    gatewayRetries: false");
    assert!(!quiet.run.expect_code(0).stderr.contains("LiteLLM"), "{}", quiet.run.stderr);
}

#[test]
fn keep_alive_comments_cannot_keep_an_attempt_open_past_its_deadline() {
    let (turn, _) = hostile_turn(
        "- keepAlive: 50\n",
        "{mode: normal, maxRetries: 0}\n    requestTimeoutMs: 3000\n    idleTimeoutMs: 1500",
    );
    turn.run.expect_code(1);
    assert_eq!(turn.end()["error"]["code"], "TIMEOUT");
    assert!(
        turn.end()["error"]["message"].as_str().unwrap().contains("did not finish within 3000ms (requestTimeoutMs)"),
        "{}",
        turn.end()
    );
}

#[test]
fn a_closed_stdout_ends_quietly_and_the_turn_is_recorded_to_its_end() {
    use std::io::BufRead;
    let home = TestHome::new();
    let answer = "line one\nline two\nline three\n".repeat(200);
    let mock = MockProcess::start(&home, &format!("- ok: {}\n", serde_json::to_string(&answer).unwrap()));
    let patch = route_patch(&home, &mock, TINY, "");
    let mut child = home
        .dsh()
        .env("DEEPSEEK_API_KEY", SECRET)
        .args(["run", "--patch"])
        .arg(&patch)
        .arg("hi")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert_eq!(first, "line one\n");
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{stderr}");
    let run = Run {
        command: "dsh run (streamed)".into(),
        code: output.status.code(),
        stdout: String::new(),
        stderr: stderr.into_owned(),
    };
    let log = home.session_log(session_id(&run));
    let events = log_events(&log);
    assert_eq!(events.last().unwrap()["data"]["reason"]["kind"], "completed");
    for args in [["session", "list"], ["config", "dump"]] {
        let mut listing = home.dsh().args(args).stdout(std::process::Stdio::piped()).spawn().unwrap();
        drop(listing.stdout.take());
        let status = listing.wait().unwrap();
        assert!(status.code().is_some(), "{args:?} died of a signal");
    }
}

#[test]
fn an_always_mode_chain_against_an_endless_stream_keeps_each_attempts_text_bounded() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- endless: \"lorem ipsum \"\n");
    let patch = route_patch(
        &home,
        &mock,
        "{mode: always, backoff: {initialDelayMs: 5, maxDelayMs: 5, jitterRatio: 0}}",
        "\n    requestTimeoutMs: 400",
    );
    let mut child =
        spawn_dsh(&home, [std::ffi::OsStr::new("run"), "--patch".as_ref(), patch.as_os_str(), "hi".as_ref()]);
    let log = || dsh_e2e::only_session_log(&home);
    let retried = dsh_e2e::wait_until(dsh_e2e::PATIENCE, || {
        log().is_some_and(|log| {
            std::fs::read_to_string(log).unwrap_or_default().matches("\"llm/retry-started\"").count() >= 3
        })
    });
    assert!(retried);
    dsh_e2e::process::signal(&child, libc::SIGINT);
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let events = log_events(&log().unwrap());
    let attempts: Vec<&Value> = events.iter().filter(|event| event["type"] == "assistant/attempt").collect();
    assert!(attempts.len() >= 3);
    for attempt in attempts {
        let text = dsh_e2e::turns::attempt_text(attempt);
        assert!(text.len() <= 64 * 1024, "an attempt record holds {} bytes of text", text.len());
    }
}

#[test]
fn an_overlong_line_in_a_compressed_log_is_damage_read_in_bounded_memory() {
    let home = TestHome::new();
    let path = home.path().join("huge.jsonl.zstd");
    {
        let file = std::fs::File::create(&path).unwrap();
        let mut encoder = zstd::Encoder::new(file, 1).unwrap();
        use std::io::Write;
        encoder
            .write_all(b"{\"type\":\"session\",\"version\":0,\"id\":\"h\",\"createdAt\":1,\"delegationDepth\":0}\n")
            .unwrap();
        encoder.write_all(b"{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1,\"pad\":\"").unwrap();
        let block = vec![b'a'; 1 << 20];
        for _ in 0..300 {
            encoder.write_all(&block).unwrap();
        }
        encoder.write_all(b"\"}}\n{\"type\":\"turn/end\",\"seq\":1,\"time\":2,\"data\":{\"turn\":1}}\n").unwrap();
        encoder.finish().unwrap();
    }
    assert!(std::fs::metadata(&path).unwrap().len() < 2 << 20, "the file itself is small");
    for args in [["session", "verify"], ["session", "show"]] {
        let (run, peak) = Run::measured(home.dsh().args(args).arg(&path));
        assert!(peak < MEMORY_BOUND_KIB, "{args:?}: peak RSS {peak} KiB");
        let said = format!("{}{}", run.stdout, run.stderr);
        assert!(said.contains("longer than the 64 MiB a log line may hold"), "{args:?}: {said}");
    }
}

/// Makes a FIFO at `path` (nobody ever writes to it).
fn fifo(path: &std::path::Path) {
    let name = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
}

#[test]
fn a_device_or_a_fifo_where_dsh_reads_a_file_is_refused_at_once_naming_it() {
    let home = TestHome::new();
    home.run(&["plugin", "--profile", "p", "add", "relay-retry"]).expect_code(0);
    let manifest = home.path().join("profiles/p/profile.yml");
    std::fs::remove_file(&manifest).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &manifest).unwrap();
    home.run(&["config", "--profile", "p", "check"])
        .expect_code(1)
        .expect_stderr("profile.yml: it is a device, not a regular file");

    let layer = home.path().join("fifo.yml");
    fifo(&layer);
    home.run(&["config", "check", "--patch", layer.to_str().unwrap()])
        .expect_code(1)
        .expect_stderr("it is a FIFO, not a regular file");

    fifo(&home.path().join("sessions.toml"));
    home.run(&["session", "list"]).expect_code(4).expect_stderr("sessions.toml: it is a FIFO, not a regular file");
    std::fs::remove_file(home.path().join("sessions.toml")).unwrap();

    let package = dsh_e2e::package_dir(&home, "zeroed", &dsh_e2e::artifacts().library("relay-retry"), None);
    let library = package.join(dsh_e2e::library_file_name("zeroed"));
    std::fs::remove_file(&library).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &library).unwrap();
    home.run(&["plugin", "--profile", "z", "add", package.to_str().unwrap()])
        .expect_code(1)
        .expect_stderr("it is a device, not a regular file");
    let toml = package.join("dsh-plugin.toml");
    std::fs::remove_file(&toml).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &toml).unwrap();
    home.run(&["plugin", "--profile", "z", "add", package.to_str().unwrap()])
        .expect_code(1)
        .expect_stderr("it is a device, not a regular file");
}
