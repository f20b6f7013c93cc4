//! `dsh session repair`: a torn last line is cut (and kept), an interrupted turn is closed, and
//! damage elsewhere is refused with its line and byte offset, leaving the file untouched.

use dsh_e2e::{log_events, TestHome};

const HEADER: &str = "{\"type\":\"session\",\"version\":0,\"id\":\"r\",\"createdAt\":1,\"delegationDepth\":0}\n";

fn event(seq: u64, event_type: &str, data: &str) -> String {
    format!("{{\"type\":\"{event_type}\",\"seq\":{seq},\"time\":{},\"data\":{data}}}\n", 1000 + seq)
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
    assert_eq!(run.code, Some(0), "{}", run.stderr);
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
    assert_eq!(events[6]["data"]["reason"]["kind"], "interrupted");
    assert_eq!(home.run(&["session", "verify", log.to_str().unwrap()]).code, Some(0));
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
    assert_eq!(run.code, Some(1));
    assert!(run.stderr.contains(&format!("line 3 (byte {})", HEADER.len() + first.len())), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), text);
}
