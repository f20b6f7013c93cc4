//! Generated session logs for benchmarks, valid under every rule, written as a stream so any size
//! fits in little memory. Each turn has a user message, a request header, failed attempts
//! recovered by llm-retry, and a streamed answer; the [`Shape`] sets the mix. And appends
//! through the real session-log writer, timed, on either store.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// The mix of events in a generated log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Mostly streamed chunks: 0–2 retries and 12 chunks per turn (about 5 % retry records).
    ChunkHeavy,
    /// A relay that fails often: every turn fails three times (a failed `finish` chunk, `llm/retry`,
    /// `llm/retry-started` each), a new chain per turn, then answers: 16 events per turn, 37.5 %
    /// retry records.
    RetryHeavy,
}

impl Shape {
    fn retries(self, turn: u64) -> u64 {
        match self {
            Shape::ChunkHeavy => turn % 3,
            Shape::RetryHeavy => 3,
        }
    }

    fn question(self, turn: u64) -> String {
        match self {
            Shape::ChunkHeavy => format!("Please summarise section {turn} of the report in three sentences."),
            Shape::RetryHeavy => format!("Summarise section {turn}."),
        }
    }

    fn header(self) -> &'static str {
        match self {
            Shape::ChunkHeavy => {
                r#"{"header":{"config":{"provider":"deepseek-official","model":"deepseek-chat"},"system":"You are a helpful agent."},"reason":"initial"}"#
            }
            Shape::RetryHeavy => {
                r#"{"header":{"config":{"provider":"deepseek-official","model":"deepseek-chat"}},"reason":"initial"}"#
            }
        }
    }

    fn answer(self, turn: u64) -> String {
        match self {
            Shape::ChunkHeavy => format!(
                r#"{{"turn":{turn},"step":1,"message":{{"role":"assistant","content":[{{"type":"text","text":"Section {turn}: the findings hold, the method is sound, and the open questions are listed."}}]}},"usage":{{"inputTokens":812,"outputTokens":96}}}}"#
            ),
            Shape::RetryHeavy => format!(
                r#"{{"turn":{turn},"step":1,"message":{{"role":"assistant","content":[{{"type":"text","text":"Section {turn} holds."}}]}}}}"#
            ),
        }
    }

    fn chunks(self) -> u64 {
        match self {
            Shape::ChunkHeavy => 12,
            Shape::RetryHeavy => 0,
        }
    }
}

/// Writes a valid log of about `events` events (whole turns) to `path`; returns the event count.
pub fn write_valid_log(path: &Path, events: u64, shape: Shape) -> io::Result<u64> {
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    writeln!(out, r#"{{"type":"session","version":0,"id":"bench","createdAt":1795967773151,"delegationDepth":0}}"#)?;
    let mut seq = 0u64;
    let mut time = 1_795_967_773_151u64;
    let mut turn = 0u64;
    let mut chain = 0u64;
    let emit =
        |out: &mut BufWriter<File>, event_type: &str, data: &str, seq: &mut u64, time: &mut u64| -> io::Result<()> {
            writeln!(out, r#"{{"type":"{event_type}","seq":{seq},"time":{time},"data":{data}}}"#)?;
            *seq += 1;
            *time += 3;
            Ok(())
        };
    const POLICY: &str =
        r#"[\"normal\",5,[\"EMPTY_RESPONSE\",\"RATE_LIMIT\",\"SERVER\",\"TIMEOUT\",\"TRANSPORT\"],500,10000,0.1]"#;
    while seq < events {
        turn += 1;
        emit(&mut out, "turn/start", &format!(r#"{{"turn":{turn}}}"#), &mut seq, &mut time)?;
        emit(&mut out, "step/start", &format!(r#"{{"turn":{turn},"step":1}}"#), &mut seq, &mut time)?;
        emit(
            &mut out,
            "user/message",
            &format!(
                r#"{{"id":"u-{turn}","role":"user","content":[{{"type":"text","text":"{}"}}],"source":{{"kind":"user"}}}}"#,
                shape.question(turn)
            ),
            &mut seq,
            &mut time,
        )?;
        emit(&mut out, "request/header", shape.header(), &mut seq, &mut time)?;
        let failures = shape.retries(turn);
        if failures > 0 {
            chain += 1;
        }
        for retry in 1..=failures {
            let failure = match shape {
                Shape::ChunkHeavy => {
                    r#"{"message":"HTTP 503 from https://api.deepseek.com/v1/chat/completions: Service Unavailable","code":"SERVER","status":503}"#
                }
                Shape::RetryHeavy => r#"{"message":"upstream unavailable","code":"SERVER","status":503}"#,
            };
            let (failed_type, failed_data) = match shape {
                Shape::ChunkHeavy => {
                    ("assistant/attempt", format!(r#"{{"turn":{turn},"step":1,"failure":{failure}}}"#))
                }
                Shape::RetryHeavy => (
                    "assistant/chunk",
                    format!(
                        r#"{{"turn":{turn},"step":1,"chunk":{{"type":"finish","reason":{{"kind":"error","failure":{failure}}}}}}}"#
                    ),
                ),
            };
            emit(&mut out, failed_type, &failed_data, &mut seq, &mut time)?;
            emit(
                &mut out,
                "llm/retry",
                &format!(
                    r#"{{"retryId":"{}","turn":{turn},"step":1,"provider":"deepseek-official","mode":"normal","policyKey":"{POLICY}","retry":{retry},"maxRetries":5,"delayMs":{},"failure":{failure}}}"#,
                    retry_id(chain),
                    500 * retry
                ),
                &mut seq,
                &mut time,
            )?;
            emit(
                &mut out,
                "llm/retry-started",
                &format!(r#"{{"retryId":"{}","turn":{turn},"step":1,"retry":{retry}}}"#, retry_id(chain)),
                &mut seq,
                &mut time,
            )?;
        }
        for index in 0..shape.chunks() {
            emit(
                &mut out,
                "assistant/chunk",
                &format!(
                    r#"{{"turn":{turn},"step":1,"chunk":{{"type":"text-delta","index":0,"text":"The report's section {turn} describes part {index} of the findings, "}}}}"#
                ),
                &mut seq,
                &mut time,
            )?;
        }
        emit(&mut out, "assistant/message", &shape.answer(turn), &mut seq, &mut time)?;
        emit(&mut out, "step/end", &format!(r#"{{"turn":{turn},"step":1}}"#), &mut seq, &mut time)?;
        emit(
            &mut out,
            "turn/end",
            &format!(r#"{{"turn":{turn},"reason":{{"kind":"completed"}}}}"#),
            &mut seq,
            &mut time,
        )?;
    }
    out.flush()?;
    Ok(seq)
}

/// A UUID-shaped retry id, as executors write them, unique per chain.
fn retry_id(chain: u64) -> String {
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        chain,
        chain >> 32 & 0xffff,
        chain & 0xfff,
        chain >> 12 & 0xfff,
        chain.wrapping_mul(0x9e37_79b9)
    )
}

/// Events per second appended through the session-log writer into a new session `id` of
/// `store`: `batched` events committed as the writer commits (at the latest every 200 ms), then
/// `single` events with a commit (an fsync, or a database commit) each.
pub fn appends_per_second(store: &dsh_session::store::SessionStore, id: &str, batched: u64, single: u64) -> (f64, f64) {
    use dsh_session::log::{NewEvent, SessionLog};
    use dsh_session::writer::SyncPolicy;
    use serde_json::json;
    let header = json!({"type": "session", "version": 0, "id": id, "createdAt": 1, "delegationDepth": 0});
    let mut log = SessionLog::create(store, id, &header, |_| Vec::new(), SyncPolicy::Durable).unwrap();
    log.append(NewEvent::new("turn/start", &json!({"turn": 1})), 1).unwrap();
    log.append(NewEvent::new("step/start", &json!({"turn": 1, "step": 1})), 1).unwrap();
    let chunk = |index: u64| json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": format!("piece {index} of the answer")}});
    let started = std::time::Instant::now();
    for index in 0..batched {
        log.append(NewEvent::new("assistant/chunk", &chunk(index)), 2).unwrap();
    }
    log.commit().unwrap();
    let batched_rate = batched as f64 / started.elapsed().as_secs_f64();
    let started = std::time::Instant::now();
    for index in 0..single {
        log.append(NewEvent::new("assistant/chunk", &chunk(index)), 2).unwrap();
        log.commit().unwrap();
    }
    (batched_rate, single as f64 / started.elapsed().as_secs_f64())
}
