//! `dsh session repair`: a torn last line is cut (and kept), an interrupted turn is closed, and
//! damage elsewhere is refused with its line and byte offset, leaving the file untouched.

use dsh_e2e::{log_events, TestHome};

const HEADER: &str = "{\"type\":\"session\",\"version\":0,\"id\":\"r\",\"createdAt\":1,\"delegationDepth\":0}\n";

/// One event line as dsh writes it (surface events carry `"surfaceOp":"append"`).
fn event(seq: u64, event_type: &str, data: &str) -> String {
    let surface = matches!(event_type, "user/message" | "assistant/message" | "tool/result");
    format!(
        "{{\"type\":\"{event_type}\",\"seq\":{seq},\"time\":{},\"data\":{data}{}}}\n",
        1000 + seq,
        if surface { ",\"surfaceOp\":\"append\"" } else { "" }
    )
}

fn interrupted_log() -> String {
    format!(
        "{HEADER}{}{}{}{}",
        event(0, "turn/start", r#"{"turn":1}"#),
        event(1, "step/start", r#"{"turn":1,"step":1}"#),
        event(
            2,
            "user/message",
            r#"{"id":"u","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}"#
        ),
        event(3, "tool/call", r#"{"turn":1,"step":1,"callId":"c1","name":"shell","arguments":"{}"}"#),
    )
}

#[test]
fn a_torn_tail_is_cut_and_kept_and_the_open_turn_is_closed() {
    let home = TestHome::new();
    let committed = interrupted_log();
    let torn = "{\"type\":\"tool/result\",\"seq\":4,\"ti";
    let log = home.write("s/session.jsonl", &format!("{committed}{torn}"));
    let run = home.run(&["session", "repair", log.to_str().unwrap()]);
    run.expect_code(0);
    assert!(
        run.stderr.contains(&format!(
            "repaired a torn last line (line 6, byte {}, {} bytes)",
            committed.len(),
            torn.len()
        )),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("closed the interrupted turn (tool/result, step/end, turn/end)"), "{}", run.stderr);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.starts_with(&committed), "the committed prefix is kept byte for byte");
    let backups: Vec<_> = std::fs::read_dir(log.parent().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.file_name().unwrap().to_str().unwrap().starts_with("session.jsonl.torn-"))
        .collect();
    assert_eq!(backups.len(), 1);
    assert_eq!(std::fs::read_to_string(&backups[0]).unwrap(), torn);
    let events = log_events(&log);
    let closers: Vec<&str> = events[4..].iter().map(|event| event["type"].as_str().unwrap()).collect();
    assert_eq!(closers, ["tool/result", "step/end", "turn/end"]);
    assert_eq!(events[4]["data"]["error"]["code"], "TOOL_OUTCOME_UNKNOWN");
    let message = &events[4]["data"]["message"];
    assert_eq!(message["id"], "interrupted-tool-result-c1-4", "the reference's id for a synthetic result");
    assert_eq!(
        (&message["role"], &message["source"]),
        (&"user".into(), &serde_json::json!({"kind": "tool", "callId": "c1"}))
    );
    assert_eq!(message["content"][0]["type"], "tool-result");
    assert_eq!(message["content"][0]["toolCallId"], "c1");
    assert_eq!(events[6]["data"]["reason"]["kind"], "interrupted");
    home.run(&["session", "verify", log.to_str().unwrap()]).expect_code(0);
    let again = home.run(&["session", "repair", log.to_str().unwrap()]);
    assert!(again.stdout.contains("the log is sound; nothing to repair"), "{}", again.stdout);
}

#[test]
fn a_corrupt_middle_line_is_refused_and_nothing_changes() {
    let home = TestHome::new();
    let first = event(0, "turn/start", r#"{"turn":1}"#);
    let text =
        format!("{HEADER}{first}{{broken\n{}", event(1, "turn/end", r#"{"turn":1,"reason":{"kind":"completed"}}"#));
    let log = home.write("s/session.jsonl", &text);
    let run = home.run(&["session", "repair", log.to_str().unwrap()]);
    run.expect_code(5);
    assert!(run.stderr.contains(&format!("line 3 (byte {})", HEADER.len() + first.len())), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), text);
}

/// A complete turn written through the session-log writer.
fn complete_log(dir: &std::path::Path) -> std::path::PathBuf {
    use dsh_session::log::{NewEvent, SessionLog};
    use dsh_session::writer::SyncPolicy;
    use serde_json::json;
    let header = json!({"type": "session", "version": 0, "id": "cut", "createdAt": 1, "delegationDepth": 0});
    let store = dsh_session::store::SessionStore::files(dir.to_owned());
    let mut log = SessionLog::create(&store, "cut", &header, |_| Vec::new(), SyncPolicy::Durable).unwrap();
    let events = [
        ("turn/start", json!({"turn": 1})),
        ("step/start", json!({"turn": 1, "step": 1})),
        (
            "user/message",
            json!({"id": "u", "role": "user", "content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}),
        ),
        ("request/header", json!({"header": {"config": {"provider": "p", "model": "m"}}, "reason": "initial"})),
        (
            "assistant/message",
            json!({"turn": 1, "step": 1, "message": {"role": "assistant", "content": [{"type": "text", "text": "Grüße \u{1F600}"}]}}),
        ),
        ("step/end", json!({"turn": 1, "step": 1})),
        ("turn/end", json!({"turn": 1, "reason": {"kind": "completed"}})),
    ];
    for (time, (event_type, data)) in events.iter().enumerate() {
        log.append(NewEvent::new(event_type, data), 1000 + time as u64).unwrap();
    }
    log.commit().unwrap();
    dir.join("cut/session.jsonl")
}

#[test]
fn a_log_cut_at_every_byte_of_its_last_record_recovers_to_the_committed_prefix() {
    use dsh_session::log::SessionLog;
    use dsh_session::store::LogRef;
    use dsh_session::verify::verify_log;
    use dsh_session::writer::SyncPolicy;
    let scratch = tempfile::tempdir().unwrap();
    let full = std::fs::read(complete_log(scratch.path())).unwrap();
    let last_start = full[..full.len() - 1].iter().rposition(|byte| *byte == b'\n').unwrap() + 1;
    for cut in last_start..full.len() {
        let dir = scratch.path().join(format!("cut-{cut}"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("session.jsonl");
        std::fs::write(&path, &full[..cut]).unwrap();
        let log = LogRef::file(path.clone());
        let lock = log.lock(scratch.path()).unwrap();
        let (_, repair) = SessionLog::open(&log, lock, |_| Vec::new(), SyncPolicy::Durable, 5000, true).unwrap();
        let repaired = std::fs::read(&path).unwrap();
        assert!(repaired.starts_with(&full[..last_start]), "cut at {cut}: the committed prefix changed");
        match &repair.torn {
            None => assert_eq!(cut, last_start, "cut at {cut}: a partial record was kept"),
            Some((_, len, backup)) => {
                assert_eq!(*len, cut - last_start);
                assert_eq!(
                    std::fs::read(backup).unwrap(),
                    &full[last_start..cut],
                    "cut at {cut}: the torn bytes were not kept"
                );
            }
        }
        assert_eq!(repair.closers, ["turn/end"], "cut at {cut}");
        let report = verify_log(&log, |_| Vec::new()).unwrap();
        assert!(report.violations.is_empty() && report.notes.is_empty(), "cut at {cut}: {report:?}");
    }
}

#[test]
fn a_nul_run_in_the_middle_is_refused_with_its_line_and_offset() {
    let home = TestHome::new();
    let first = event(0, "turn/start", r#"{"turn":1}"#);
    let text = format!(
        "{HEADER}{first}{}\n{}",
        "\0".repeat(512),
        event(1, "turn/end", r#"{"turn":1,"reason":{"kind":"completed"}}"#)
    );
    let log = home.write("s/session.jsonl", &text);
    let run = home.run(&["session", "repair", log.to_str().unwrap()]);
    run.expect_code(5);
    assert!(
        run.stderr.contains(&format!("line 3 (byte {}): a run of 512 NUL bytes", HEADER.len() + first.len())),
        "{}",
        run.stderr
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), text, "nothing after the damage is dropped");
}

#[test]
fn a_seq_gap_a_duplicate_or_time_going_back_is_refused_for_writing_and_never_called_sound() {
    let good = |seq: u64, time: u64, event_type: &str, data: &str| {
        format!("{{\"type\":\"{event_type}\",\"seq\":{seq},\"time\":{time},\"data\":{data}}}\n")
    };
    let turn = |seqs: [u64; 2], times: [u64; 2]| {
        format!(
            "{HEADER}{}{}",
            good(seqs[0], times[0], "turn/start", r#"{"turn":1}"#),
            good(seqs[1], times[1], "turn/end", r#"{"turn":1,"reason":{"kind":"completed"}}"#)
        )
    };
    for (name, text, expected) in [
        ("gap", turn([0, 2], [10, 11]), "seq 2 where 1 was expected"),
        ("duplicate", turn([0, 0], [10, 11]), "seq 0 where 1 was expected"),
        ("time back", turn([0, 1], [10, 9]), "time 9 goes back from 10"),
        (
            "unknown type",
            format!("{HEADER}{}", good(0, 10, "future/event", "{}")),
            "event type \"future/event\" is unknown and not marked ignorable",
        ),
        (
            "no delegation depth",
            "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1}\n".to_owned(),
            "session header delegationDepth must be a non-negative safe integer",
        ),
    ] {
        let home = TestHome::new();
        let log = home.write("sessions/s/session.jsonl", &text);
        let verify = home.run(&["session", "verify", log.to_str().unwrap()]);
        verify.expect_code(5);
        assert!(verify.stdout.contains(expected), "{name}: {}", verify.stdout);
        let repair = home.run(&["session", "repair", log.to_str().unwrap()]);
        repair.expect_code(5);
        assert!(
            repair.stderr.contains(expected) && repair.stderr.contains("will not touch this log"),
            "{name}: {}",
            repair.stderr
        );
        assert!(!repair.stdout.contains("sound"), "{name}");
        let run = home.run(&["run", "--profile", "demo", "--session", "s", "more"]);
        run.expect_code(5);
        assert!(run.stderr.contains("refusing to write after it"), "{name}: {}", run.stderr);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), text, "{name}: nothing was written");
    }
}

#[test]
fn a_v1_to_v3_log_the_migration_refuses_is_named_at_its_line_and_left_untouched() {
    let header =
        "{\"type\":\"session\",\"version\":2,\"id\":\"s\",\"createdAt\":1,\"isSeeded\":false,\"delegationDepth\":0}";
    let chunk = r#"{"type":"assistant/chunk","seq":0,"time":2,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"a"}}}"#;
    let text = format!("{header}\n{chunk}\n");
    let expected = "the format v2 log cannot be read as v4, as DeepSeek Harness 0.2 reads it: line 2 (byte 91): \
                    assistant/chunk cannot be migrated to v4: format v2 has no assistant/chunk events";
    let home = TestHome::new();
    let log = home.write("sessions/s/session.v2.jsonl", &text);
    let verify = home.run(&["session", "verify", log.to_str().unwrap()]);
    verify.expect_code(5);
    assert!(verify.stderr.contains(expected) && verify.stderr.contains("1 log unreadable"), "{}", verify.stderr);
    let refused = home.run(&["run", "--profile", "demo", "--session", "s", "more"]);
    assert_ne!(refused.code, Some(0), "{refused}");
    assert!(refused.stderr.contains("assistant/chunk cannot be migrated to v4"), "{}", refused.stderr);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), text, "nothing was written");
    assert!(!log.with_file_name("session.v4.jsonl").exists(), "nothing was published");
}

#[test]
fn session_list_marks_a_torn_log_and_a_damaged_one() {
    let home = TestHome::new();
    let torn = interrupted_log().replace("\"id\":\"r\"", "\"id\":\"torn\"") + "{\"type\":\"turn/e";
    home.write("sessions/torn/session.jsonl", &torn);
    let mut lines: Vec<String> = interrupted_log().lines().map(str::to_owned).collect();
    lines[0] = lines[0].replace("\"id\":\"r\"", "\"id\":\"damaged\"");
    lines[2] = "not an event".to_owned();
    home.write("sessions/damaged/session.jsonl", &(lines.join("\n") + "\n"));
    let list = home.run(&["session", "list"]);
    list.expect_code(0);
    let line_of = |id: &str| list.stdout.lines().find(|line| line.starts_with(id)).unwrap_or_default().to_owned();
    assert!(line_of("torn ").ends_with("torn last line (dsh session repair cuts it)"), "{}", list.stdout);
    assert!(line_of("damaged ").contains("damaged at line 3 (byte "), "{}", list.stdout);
    let json: serde_json::Value = serde_json::from_str(&home.run(&["session", "list", "--json"]).stdout).unwrap();
    let damage_of = |id: &str| json.as_array().unwrap().iter().find(|s| s["id"] == id).unwrap()["damage"].clone();
    assert_eq!(damage_of("torn")["kind"], "torn");
    assert_eq!(damage_of("damaged")["kind"], "corrupt");
    assert_eq!(damage_of("damaged")["line"], 3);
    assert_eq!(json[0]["createdAt"], 1, "createdAt as the header writes it");
}
