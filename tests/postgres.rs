//! Sessions in a real PostgreSQL server (started per test with `initdb` and `pg_ctl`): every
//! session command on the database, the exact lines in and out, one writer across homes through
//! the advisory lock, a turn killed on one home resumed from another, the database stopped
//! mid-turn, and clear errors for a wrong password, an unreachable server and a newer schema.

use std::process::Child;

use dsh_e2e::turns::{route_patch, session_id, spawn_collecting as start, SECRET};
use dsh_e2e::{wait_until, MockProcess, PostgresServer, Run, TestHome, PATIENCE, PG_PASSWORD};
use serde_json::Value;

/// A home whose sessions live in `server`'s `postgres` database, its schema in place.
fn stored_home(server: &PostgresServer) -> TestHome {
    let home = TestHome::new();
    server.use_in(&home, &server.url("postgres"));
    home.run(&["session", "list"]).expect_code(0);
    server.migrate(&server.url("postgres"));
    home
}

fn run_in(home: &TestHome, args: &[&str]) -> Run {
    Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(args))
}

/// The session's exact lines, from `session export` to stdout.
fn exported(home: &TestHome, id: &str) -> String {
    let run = home.run(&["session", "export", id]);
    run.expect_code(0);
    run.stdout.clone()
}

fn events_of(text: &str) -> Vec<Value> {
    text.lines().skip(1).map(|line| serde_json::from_str(line).expect("a JSON line")).collect()
}

/// The id of the one session in the store, once there is one.
fn only_stored_session(server: &PostgresServer) -> String {
    let mut id = String::new();
    let found = wait_until(PATIENCE, || {
        id = server.sql("postgres", "SELECT id FROM dsh_sessions").trim().to_owned();
        !id.is_empty()
    });
    assert!(found, "no session was stored");
    id
}

#[test]
fn every_session_command_works_on_the_database_and_lines_move_between_stores_byte_for_byte() {
    let server = PostgresServer::start();
    let home = stored_home(&server);
    let mock = MockProcess::start(&home, "- status: 503\n- ok: first answer\n");
    let patch = route_patch(&home, &mock, dsh_e2e::turns::TINY, "");
    let patch = patch.to_str().unwrap();
    let first = run_in(&home, &["run", "--patch", patch, "one"]);
    first.expect_code(0);
    let id = session_id(&first);
    run_in(&home, &["run", "--session", &id[..8], "--patch", patch, "two"]).expect_code(0);
    let chat = format!("printf 'three\\n' | \"$DSH\" chat --session {id} --patch {patch}");
    Run::of(home.shell(&chat).env("DEEPSEEK_API_KEY", SECRET)).expect_code(0);
    assert!(!home.session_log(&id).exists(), "no log file in the home");
    let list = home.run(&["session", "list"]);
    assert!(list.stdout.contains(&id) && list.stdout.contains("3 turns"), "{}", list.stdout);
    home.run(&["session", "show", &id]).expect_stdout("retry 1/5 · SERVER");
    home.run(&["session", "verify", &id]).expect_code(0).expect_stderr("verified 1 log");
    let lines = exported(&home, &id);
    assert_eq!(events_of(&lines).iter().filter(|event| event["type"] == "turn/start").count(), 3);
    let records = server.sql("postgres", "SELECT session, turn, provider, code, executor FROM dsh_retry_records");
    assert_eq!(records.trim(), format!("{id}|1|deepseek-official|SERVER|llm-retry"), "the view a team queries");
    let file = home.write("exported.jsonl", &lines);
    let files_home = TestHome::new();
    files_home.run(&["session", "import", file.to_str().unwrap()]).expect_code(0);
    assert_eq!(exported(&files_home, &id), lines, "files hold the same bytes");
    let other = server.database("other");
    let second_store = TestHome::new();
    server.use_in(&second_store, &other);
    second_store.run(&["session", "import", file.to_str().unwrap()]).expect_code(0);
    assert_eq!(exported(&second_store, &id), lines, "and so does a second database");
    let again = second_store.run(&["session", "import", file.to_str().unwrap()]);
    again.expect_code(1).expect_stderr("is already in the home");
    let target = home.path().join("out.jsonl");
    home.run(&["session", "export", &id, target.to_str().unwrap()]).expect_code(0);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), lines);
    home.run(&["session", "export", &id, target.to_str().unwrap()]).expect_code(1).expect_stderr("not overwritten");
    let replay = home.run(&["session", "replay", "--all"]);
    replay.expect_code(0);
    let migrate = home.run(&["session", "migrate", &id]);
    migrate.expect_code(1).expect_stderr("migrate works on a sessions folder of files");
    let elsewhere = stored_home(&server);
    Run::of(elsewhere.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--session", &id, "four"])).expect_code(0);
    let kept = elsewhere.path().join("sessions").join(&id).join("patch-1.yml");
    assert!(kept.is_file(), "another home runs with the --patch copy kept in the database");
}

#[test]
fn a_second_writer_on_another_home_is_refused_with_exit_6_naming_the_host_and_pid() {
    let server = PostgresServer::start();
    let (home_a, home_b) = (stored_home(&server), stored_home(&server));
    let mock = MockProcess::start(&home_a, "- ok: held answer\n  hold: answer\n");
    let patch_a = route_patch(&home_a, &mock, "", "");
    let (writer, _) = start(&home_a, &["run", "--patch", patch_a.to_str().unwrap(), "one"]);
    mock.wait_for_requests(1);
    let id = only_stored_session(&server);
    let before = server.sql("postgres", "SELECT count(*) FROM dsh_events");
    let patch_b = route_patch(&home_b, &mock, "", "");
    let second = run_in(&home_b, &["run", "--session", &id, "--patch", patch_b.to_str().unwrap(), "two"]);
    second.expect_code(6);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let holder = format!("session {id} is busy: process {} on {} is writing it", writer.id(), host.trim());
    second.expect_stderr(&holder);
    home_b.run(&["session", "repair", &id]).expect_code(6).expect_stderr(&holder);
    assert_eq!(server.sql("postgres", "SELECT count(*) FROM dsh_events"), before, "the refused writer wrote nothing");
    let list = home_b.run(&["session", "list", "--json"]);
    let listed: Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(listed[0]["writer"], writer.id(), "readers on any home see the writer");
    mock.release("answer");
    let output = writer.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    home_b.run(&["session", "verify", &id]).expect_code(0);
}

#[test]
fn ten_processes_on_one_stored_session_exactly_one_writes() {
    let server = PostgresServer::start();
    let home = stored_home(&server);
    let quick = MockProcess::start(&home, "- ok: first\n");
    let first = run_in(&home, &["run", "--patch", route_patch(&home, &quick, "", "").to_str().unwrap(), "one"]);
    let id = session_id(&first);
    let held = MockProcess::start(&home, "- ok: held\n  hold: answer\n");
    let patch = route_patch(&home, &held, "", "");
    let children: Vec<Child> = (0..10)
        .map(|n| start(&home, &["run", "--session", &id, "--patch", patch.to_str().unwrap(), &format!("p{n}")]).0)
        .collect();
    held.wait_for_requests(1);
    let mut children = children;
    let mut codes = Vec::new();
    let refused = wait_until(PATIENCE, || {
        children.retain_mut(|child| match child.try_wait().unwrap() {
            Some(status) => {
                codes.push(status.code());
                false
            }
            None => true,
        });
        children.len() == 1
    });
    assert!(refused, "nine writers were not refused: {codes:?}");
    held.release("answer");
    codes.extend(children.into_iter().map(|child| child.wait_with_output().unwrap().status.code()));
    assert_eq!(codes.iter().filter(|code| **code == Some(0)).count(), 1, "{codes:?}");
    assert_eq!(codes.iter().filter(|code| **code == Some(6)).count(), 9, "{codes:?}");
    let events = events_of(&exported(&home, &id));
    assert_eq!(events.iter().filter(|event| event["type"] == "turn/start").count(), 2);
    home.run(&["session", "verify", &id]).expect_code(0);
}

#[test]
fn a_turn_killed_on_one_home_is_repaired_and_resumed_from_another_with_one_continuation() {
    let server = PostgresServer::start();
    let homes = [stored_home(&server), stored_home(&server)];
    for home in &homes {
        home.run(&["plugin", "--profile", "fb", "add", "dsh-retry"]).expect_code(0);
        home.write(
            "profiles/fb/cordis.patch.yml",
            "- id: model-error-retry\n  name: dsh-retry\n  config: {initialDelayMs: 60000, maxDelayMs: 60000}\n",
        );
    }
    let failing = MockProcess::start(&homes[0], "- truncate: \"half an answer\"\n");
    let patch = route_patch(&homes[0], &failing, "", "");
    let (mut child, acknowledged) =
        start(&homes[0], &["run", "--json", "--profile", "fb", "--patch", patch.to_str().unwrap(), "hi"]);
    let id = only_stored_session(&server);
    let scheduled = wait_until(PATIENCE, || {
        server.sql("postgres", "SELECT count(*) FROM dsh_retry_records WHERE executor = 'dsh-retry'").trim() == "1"
    });
    assert!(scheduled, "dsh-retry never scheduled a retry");
    dsh_e2e::process::kill_9(&mut child);
    server.wait_until_no_writer();
    let answering = MockProcess::start(&homes[1], "- ok: picking up where we left off\n");
    let patch_b = route_patch(&homes[1], &answering, "", "");
    let resume = |home: &TestHome| {
        run_in(home, &["session", "resume", &id, "--profile", "fb", "--patch", patch_b.to_str().unwrap()])
    };
    let first = resume(&homes[1]);
    first.expect_code(0).expect_stderr("closed the interrupted turn (step/end, turn/end)");
    assert!(first.stdout.contains("picking up where we left off"), "{}", first.stdout);
    assert!(resume(&homes[0]).stdout.contains("nothing to resume"), "the first home sees it done");
    let lines = exported(&homes[0], &id);
    for line in acknowledged.lock().unwrap().iter() {
        assert!(lines.contains(line.as_str()), "acknowledged but lost: {line}");
    }
    let continuations = events_of(&lines).iter().filter(|event| dsh_e2e::turns::from_plugin(event)).count();
    assert_eq!(continuations, 1);
    assert_eq!(answering.request_bodies().len(), 1, "the continuation was sent once");
    homes[0].run(&["session", "verify", &id]).expect_code(0);
    let replays = homes.each_ref().map(|home| home.run(&["session", "replay", "--all"]).stdout.clone());
    assert!(replays[0].contains("recorded") && replays[0] == replays[1], "both homes replay the store: {replays:?}");
}

#[test]
fn the_database_stopping_mid_turn_ends_it_with_a_clear_error_and_repair_continues_once_it_is_back() {
    let server = PostgresServer::start();
    let home = stored_home(&server);
    let mock = MockProcess::start(&home, "- ok: held answer\n  hold: answer\n");
    let patch = route_patch(&home, &mock, "", "");
    let (child, acknowledged) = start(&home, &["run", "--json", "--patch", patch.to_str().unwrap(), "one"]);
    mock.wait_for_requests(1);
    let id = only_stored_session(&server);
    server.stop_immediately();
    mock.release("answer");
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(7), "{stderr}");
    assert!(stderr.contains(&format!("the session log {id} can no longer be written")), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains(PG_PASSWORD), "{stderr}");
    home.run(&["session", "list"]).expect_code(7).expect_stderr("cannot connect to the session store");
    server.start_again();
    home.run(&["session", "repair", &id]).expect_code(0).expect_stdout("repaired");
    let lines = exported(&home, &id);
    for line in acknowledged.lock().unwrap().iter() {
        assert!(lines.contains(line.as_str()), "acknowledged but lost: {line}");
    }
    assert_eq!(events_of(&lines).last().unwrap()["data"]["reason"]["kind"], "interrupted");
    home.run(&["session", "verify", &id]).expect_code(0);
}

#[test]
fn a_wrong_password_an_unreachable_server_a_newer_schema_and_a_bad_setting_are_clear_errors() {
    let server = PostgresServer::start();
    let home = stored_home(&server);
    let wrong = Run::of(home.dsh().env("PGPASSWORD", "not-the-password").args(["session", "list"]));
    wrong.expect_code(7).expect_stderr("password authentication failed for user \"dsh\"");
    assert!(!wrong.stderr.contains("not-the-password"), "{}", wrong.stderr);
    let closed = dsh_e2e::free_port();
    let gone = Run::of(
        home.dsh().env("DSH_SESSIONS", format!("postgres://dsh@127.0.0.1:{closed}/postgres")).args(["session", "list"]),
    );
    gone.expect_code(7)
        .expect_stderr(&format!("cannot connect to the session store postgres://dsh@127.0.0.1:{closed}/postgres"));
    home.run(&["session", "list"]).expect_code(0);
    server.sql("postgres", "UPDATE dsh_schema SET version = 99");
    home.run(&["session", "list"]).expect_code(7).expect_stderr(&format!(
        "holds dsh schema version 99; this dsh knows versions up to {}",
        dsh_session::store::postgres::schema::SCHEMA_VERSION
    ));
    let files = Run::of(home.dsh().env("DSH_SESSIONS", "files").args(["session", "list"]));
    files.expect_code(0);
    home.write("sessions.toml", "store = \"mysql://x\"\n");
    home.run(&["session", "list"]).expect_code(4).expect_stderr("sessions.toml: key store: \"mysql://x\" is neither");
    home.write("sessions.toml", "stor = \"files\"\n");
    home.run(&["session", "list"]).expect_code(4).expect_stderr("sessions.toml: unknown field `stor`");
}

#[test]
fn a_server_that_accepts_and_never_answers_is_given_up_on_at_the_connect_deadline() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("postgres://dsh@{}/postgres", silent.local_addr().unwrap());
    let home = TestHome::new();
    let run = Run::of(home.dsh().env("DSH_SESSIONS", &url).args(["session", "list"]));
    run.expect_code(7).expect_stderr(&format!("cannot connect to the session store {url}: no answer within 10s"));
}

/// `line` with every duration (`0.1s`, `12s,`) written `Ns`: how long a turn took on this machine
/// differs from run to run.
fn durations_hidden(line: &str) -> String {
    let word = |word: &str| {
        let core = word.trim_end_matches([',', ')', ';']);
        let number = core.strip_suffix('s').filter(|number| !number.is_empty() && number.parse::<f64>().is_ok());
        match number {
            Some(_) => format!("Ns{}", &word[core.len()..]),
            None => word.to_owned(),
        }
    };
    line.split(' ').map(word).collect::<Vec<_>>().join(" ")
}

/// What a home's session commands print, with what differs by store or by run taken out: the
/// session id, the log's name (a path, or the id), the mock server's address, dates and
/// durations.
fn session_commands(home: &TestHome) -> Vec<String> {
    let mock = MockProcess::start(home, "- status: 503\n- ok: an answer\n");
    let patch = route_patch(home, &mock, dsh_e2e::turns::TINY, "");
    let patch = patch.to_str().unwrap();
    let first = run_in(home, &["run", "--patch", patch, "one"]);
    let id = session_id(&first);
    let chat = format!("printf 'three\\n' | \"$DSH\" chat --session {} --patch {patch}", &id[..6]);
    let runs = [
        first,
        run_in(home, &["run", "--session", &id, "--patch", patch, "two"]),
        Run::of(home.shell(&chat).env("DEEPSEEK_API_KEY", SECRET)),
        home.run(&["session", "show", &id]),
        home.run(&["session", "verify", &id]),
        home.run(&["session", "repair", &id]),
        run_in(home, &["session", "resume", &id, "--patch", patch]),
        home.run(&["session", "replay", &id]),
        home.run(&["session", "list", "--json"]),
        home.run(&["session", "prune", "--older-than", "30d", "--dry-run"]),
    ];
    let log = home.session_log(&id);
    let normal = |text: &str| {
        let text = text.replace(log.to_str().unwrap(), "LOG").replace(&id, "LOG").replace(&mock.base_url, "URL");
        let kept = text.lines().filter(|line| !line.contains("GMT") && !line.contains("createdAt"));
        kept.map(durations_hidden).collect::<Vec<_>>().join("\n")
    };
    let mut said: Vec<String> =
        runs.iter().map(|run| format!("{:?}\n{}\n{}", run.code, normal(&run.stdout), normal(&run.stderr))).collect();
    let types: Vec<String> = events_of(&exported(home, &id)).iter().map(|event| event["type"].to_string()).collect();
    said.push(types.join(" "));
    said
}

#[test]
fn every_session_command_says_the_same_on_files_and_on_postgres() {
    let server = PostgresServer::start();
    let [files, stored] = [TestHome::new(), stored_home(&server)].map(|home| session_commands(&home));
    assert_eq!(files.len(), stored.len());
    for (on_files, on_postgres) in files.iter().zip(&stored) {
        assert_eq!(on_files, on_postgres);
    }
}

#[test]
fn a_deleted_stored_session_leaves_no_line_file_or_row_behind() {
    let server = PostgresServer::start();
    let home = stored_home(&server);
    let mock = MockProcess::start(&home, "- ok: fine\n");
    let patch = route_patch(&home, &mock, "", "");
    let id = session_id(&run_in(&home, &["run", "--patch", patch.to_str().unwrap(), "one"]));
    let count = |query: &str| server.sql("postgres", &format!("SELECT count(*) FROM {query} = '{id}'"));
    assert_eq!(count("dsh_session_files WHERE session"), "1\n", "the --patch copy is kept in the database");
    home.run(&["session", "delete", &id]).expect_code(0).expect_stdout(&format!("deleted {id}"));
    for query in ["dsh_sessions WHERE id", "dsh_events WHERE session", "dsh_session_files WHERE session"] {
        assert_eq!(count(query), "0\n", "{query}");
    }
    assert!(!home.path().join("sessions").join(&id).exists(), "the local copies are gone too");
    home.run(&["session", "delete", &id]).expect_code(3).expect_stderr(&format!("no session {id} in postgres://"));
}

#[test]
fn a_session_id_in_the_database_that_is_no_session_id_is_left_out_and_never_becomes_a_path() {
    let server = PostgresServer::start();
    let home = stored_home(&server);
    // `x` beside the home may exist already (a clone at /tmp/x): nothing may appear in it.
    let outside = home.path().parent().unwrap().join("x");
    let listed = |path: &std::path::Path| std::fs::read_dir(path).map(|entries| entries.count()).ok();
    let before = (outside.exists(), listed(&outside));
    server.sql(
        "postgres",
        "INSERT INTO dsh_sessions (id, created_at, header) VALUES ('../../../../x', 1, '{}'), (E'evil\\x1b]52;c;aGk=\\x07', 2, '{}')",
    );
    let list = home.run(&["session", "list"]);
    list.expect_code(0).expect_stderr("is not a session id");
    assert!(!list.stdout.contains("../") && !list.stderr.contains('\u{1b}'), "{list}");
    let run = run_in(&home, &["run", "--session", "../../../../x", "hi"]);
    assert_ne!(run.code, Some(0), "{run}");
    assert_eq!((outside.exists(), listed(&outside)), before, "a file was written outside the home");
    let replay = home.run(&["session", "replay", "--all"]);
    assert!(!replay.stdout.contains('\u{1b}') && !replay.stderr.contains('\u{1b}'), "{replay}");
}

#[test]
fn commands_that_only_read_never_change_the_schema_and_the_first_write_migrates_with_checksums() {
    let server = PostgresServer::start();
    let home = TestHome::new();
    server.use_in(&home, &server.url("postgres"));
    for args in [&["session", "list"][..], &["session", "show", "nope"], &["completions", "bash"]] {
        home.run(args);
        assert_eq!(
            server.sql("postgres", "SELECT to_regclass('dsh_schema') IS NULL"),
            "t\n",
            "{args:?} created the schema"
        );
    }
    let mock = MockProcess::start(&home, "- ok: hi\n");
    let patch = route_patch(&home, &mock, dsh_e2e::turns::TINY, "");
    run_in(&home, &["run", "--patch", patch.to_str().unwrap(), "one"]).expect_code(0);
    let recorded = server.sql("postgres", "SELECT version, name, length(checksum) FROM dsh_schema ORDER BY version");
    assert_eq!(recorded, "1|0001_sessions|64\n2|0002_json_safe_retry_view|64\n");
    server.sql("postgres", "UPDATE dsh_schema SET checksum = repeat('0', 64) WHERE version = 1");
    let changed = run_in(&home, &["run", "--patch", patch.to_str().unwrap(), "two"]);
    changed.expect_code(7).expect_stderr("migration 1 (0001_sessions) was applied with checksum 0000");
}

#[test]
fn a_nul_or_a_lone_surrogate_in_a_provider_message_leaves_the_retry_view_readable() {
    let server = PostgresServer::start();
    let home = stored_home(&server);
    let script = "- status: 503\n  body: '{\"error\":{\"message\":\"nul \\u0000 lone \\ud800 end\"}}'\n- ok: fine\n";
    let mock = MockProcess::start(&home, script);
    let patch = route_patch(&home, &mock, dsh_e2e::turns::TINY, "");
    run_in(&home, &["run", "--patch", patch.to_str().unwrap(), "hi"]).expect_code(0);
    let records = server.sql("postgres", "SELECT code, executor FROM dsh_retry_records");
    assert_eq!(records, "SERVER|llm-retry\n");
}
