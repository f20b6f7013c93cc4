//! The attacks of issue 24, each at its boundary: input one byte over a limit, layers that
//! expand, stores that never answer, files swapped under dsh, and what reaches a terminal.

use dsh_e2e::{Run, TestHome};

/// The longest line a session log holds (the reader's limit).
const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

#[test]
fn a_prompt_one_byte_over_the_line_limit_is_refused_before_anything_is_written() {
    let home = TestHome::new();
    let prompt = vec![b'B'; MAX_LINE_BYTES + 1];
    let run = Run::with_input(home.dsh().args(["run", "--profile", "demo", "-"]), &prompt);
    run.expect_code(1).expect_stderr("the prompt on stdin is longer than the 64 MiB (67108864 bytes)");
    assert!(dsh_e2e::only_session_log(&home).is_none(), "no session was created:\n{run}");
}

#[test]
fn a_prompt_whose_escaped_line_would_not_fit_is_refused_before_anything_is_written() {
    let home = TestHome::new();
    // Each control byte is written as a six-byte escape: the raw prompt fits, its line would not.
    let prompt = vec![0x01u8; MAX_LINE_BYTES / 4];
    let run = Run::with_input(home.dsh().args(["run", "--profile", "demo", "-"]), &prompt);
    run.expect_code(1).expect_stderr("refusing to append user/message: its line would take");
    assert!(dsh_e2e::only_session_log(&home).is_none(), "no session was created:\n{run}");
}

#[test]
fn a_chat_skips_a_line_too_long_to_log_and_one_that_is_not_utf8_runs_the_rest_and_exits_1() {
    let home = TestHome::new();
    let mut input = b"first\n".to_vec();
    input.extend(std::iter::repeat_n(b'B', MAX_LINE_BYTES + 1));
    input.extend_from_slice(b"\ncaf\xe9\nlast\n");
    let run = Run::with_input(home.dsh().args(["chat", "--profile", "demo"]), &input);
    run.expect_code(1)
        .expect_stderr("line 2 of the input is longer than the 64 MiB")
        .expect_stderr("line 3 of the input (5 bytes) is not UTF-8 text");
    let log = dsh_e2e::only_session_log(&home).expect("one session");
    let turns = dsh_e2e::log_events(&log).iter().filter(|event| event["type"] == "turn/start").count();
    assert_eq!(turns, 2, "the first and last lines ran:\n{run}");
    home.run(&["session", "verify", log.to_str().unwrap()]).expect_code(0);
}
