//! Test support for end-to-end tests and benchmarks: builds the workspace once per process,
//! locates the `dsh` binary and the plugin libraries, builds the layout-mismatch fixture, and
//! gives each test a throw-away `$DSH_HOME`.

pub mod browser;
pub mod fuzz;
pub mod logs;
pub mod process;
pub mod sdk;
pub mod terminal;
pub mod turns;
pub mod web;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The repository root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ lives in the workspace").to_owned()
}

/// Where cargo put this test binary's profile (`target/debug` or `target/release`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary knows its path");
    exe.parent().and_then(Path::parent).expect("test binaries live in <target>/<profile>/deps").to_owned()
}

/// The variables cargo sets for the package under test. Build scripts (ring's among them) ask to
/// be run again when these change, so passing them on would rebuild half the tree each time.
const PACKAGE_VARIABLES: [&str; 6] =
    ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_CRATE_", "CARGO_BIN_", "CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR"];

fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|name| PACKAGE_VARIABLES.iter().any(|prefix| name.starts_with(prefix))) {
            command.env_remove(name);
        }
    }
    command
}

fn run_checked(command: &mut Command, what: &str) -> Output {
    let output = command.output().unwrap_or_else(|err| panic!("cannot run {what}: {err}"));
    assert!(output.status.success(), "{what} failed ({}):\n{}", output.status, String::from_utf8_lossy(&output.stderr));
    output
}

/// The built `dsh` binary and plugin libraries of this profile.
pub struct Artifacts {
    pub dir: PathBuf,
}

impl Artifacts {
    pub fn dsh(&self) -> PathBuf {
        self.dir.join(format!("dsh{}", std::env::consts::EXE_SUFFIX))
    }

    /// The cdylib of a workspace package, by package name (`llm-retry`).
    pub fn library(&self, package: &str) -> PathBuf {
        self.dir.join(library_file_name(package))
    }
}

/// `libllm_retry.so` for `llm-retry` on Linux.
pub fn library_file_name(package: &str) -> String {
    format!("{}{}{}", std::env::consts::DLL_PREFIX, package.replace('-', "_"), std::env::consts::DLL_SUFFIX)
}

/// Builds the whole workspace (binary, plugins, fixtures) once per process, in this test
/// binary's profile, and returns where the artifacts are.
pub fn artifacts() -> &'static Artifacts {
    static ARTIFACTS: OnceLock<Artifacts> = OnceLock::new();
    ARTIFACTS.get_or_init(|| {
        let dir = profile_dir();
        let target_dir = dir.parent().expect("profile dirs live in the target dir");
        let mut build = cargo();
        build
            .arg("build")
            .arg("--quiet")
            .arg("--workspace")
            .arg("--manifest-path")
            .arg(workspace_root().join("Cargo.toml"))
            .arg("--target-dir")
            .arg(target_dir);
        if dir.file_name().is_some_and(|name| name == "release") {
            build.arg("--release");
        }
        run_checked(&mut build, "cargo build --workspace");
        Artifacts { dir }
    })
}

/// Builds a fixture that is a workspace of its own (`tests/fixtures/<dir>`) in its own target
/// directory, and returns its library.
fn build_standalone_fixture(dir: &str, package: &str) -> PathBuf {
    let root = workspace_root();
    let fixture = root.join("tests/fixtures").join(dir);
    let lock = fixture.join("Cargo.lock");
    if !lock.exists() {
        std::fs::copy(root.join("Cargo.lock"), &lock).expect("copy Cargo.lock for the fixture");
    }
    // One target directory for every fixture: they share most dependencies' builds.
    let target_dir = profile_dir().parent().expect("target dir").join("fixtures");
    run_checked(
        cargo()
            .args(["build", "--quiet", "--manifest-path"])
            .arg(fixture.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target_dir),
        &format!("cargo build of the {dir} fixture"),
    );
    target_dir.join("debug").join(library_file_name(package))
}

/// Builds the plugin whose interface copy has a different layout (see
/// `tests/fixtures/abi-mismatch/Cargo.toml`) and returns its library.
pub fn abi_mismatch_library() -> &'static Path {
    static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let root = workspace_root();
        copy_changed_interface(&root.join("abi"), &root.join("tests/fixtures/abi-mismatch/abi-changed"));
        build_standalone_fixture("abi-mismatch", "fixture-abi-mismatch")
    })
}

/// Builds the plugin built with `panic = "abort"` (see `tests/fixtures/panic-abort/Cargo.toml`)
/// and returns its library.
pub fn panic_abort_library() -> &'static Path {
    static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
    LIBRARY.get_or_init(|| build_standalone_fixture("panic-abort", "fixture-panic-abort"))
}

/// Builds the plugin built against the frozen interface copy (see
/// `tests/fixtures/abi-frozen/Cargo.toml`) and returns its library.
pub fn abi_frozen_library() -> &'static Path {
    static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
    LIBRARY.get_or_init(|| build_standalone_fixture("abi-frozen", "fixture-abi-frozen"))
}

/// A prebuilt package directory `pkg-<name>` in `home` holding a copy of `library` (and,
/// optionally, a bundle layer), as `dsh plugin add DIR` installs it.
pub fn package_dir(home: &TestHome, name: &str, library: &Path, layer: Option<&str>) -> PathBuf {
    let dir = home.path().join(format!("pkg-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = library_file_name(name);
    std::fs::copy(library, dir.join(&file)).unwrap();
    let mut manifest = format!("name = \"{name}\"\nversion = \"0.1.0\"\nlibrary = \"{file}\"\n");
    if let Some(layer) = layer {
        std::fs::write(dir.join("cordis.patch.yml"), layer).unwrap();
        manifest.push_str("\n[bundle]\npatch = \"cordis.patch.yml\"\n");
    }
    std::fs::write(dir.join("dsh-plugin.toml"), manifest).unwrap();
    dir
}

/// Copies the interface crate and widens `Hooks` from u32 to u64. Files are only rewritten when
/// their content changes, so cargo does not rebuild the copy every run.
fn copy_changed_interface(abi: &Path, changed: &Path) {
    const ORIGINAL: &str = "pub struct Hooks(pub u32);";
    const CHANGED: &str = "pub struct Hooks(pub u64);";
    let sources =
        files_under(&abi.join("src")).into_iter().map(|path| path.strip_prefix(abi).expect("below abi/").to_owned());
    for relative in std::iter::once(PathBuf::from("Cargo.toml")).chain(sources) {
        let relative = relative.to_str().expect("UTF-8 paths");
        let source =
            std::fs::read_to_string(abi.join(relative)).unwrap_or_else(|err| panic!("read abi/{relative}: {err}"));
        let text = match relative {
            "src/types.rs" => {
                assert!(
                    source.contains(ORIGINAL),
                    "abi/src/types.rs no longer declares `{ORIGINAL}`; update the mismatch fixture"
                );
                source.replace(ORIGINAL, CHANGED)
            }
            // The copy is built outside the workspace: spell out what it inherits.
            "Cargo.toml" => source.lines().map(spell_out_workspace_key).collect::<Vec<_>>().join("\n"),
            _ => source,
        };
        let target = changed.join(relative);
        if std::fs::read_to_string(&target).ok().as_deref() != Some(text.as_str()) {
            std::fs::create_dir_all(target.parent().expect("files have parents")).expect("create the interface copy");
            std::fs::write(&target, text).expect("write the interface copy");
        }
    }
}

fn spell_out_workspace_key(line: &str) -> String {
    let Some(key) = line.strip_suffix(".workspace = true") else {
        return line.to_owned();
    };
    let value = match key {
        "version" => "\"0.1.0\"",
        "edition" => "\"2021\"",
        "publish" => "false",
        "rust-version" | "license" => return String::new(),
        "abi_stable" => "\"0.11.3\"",
        "serde" => "{ version = \"1\", features = [\"derive\"] }",
        "serde_json" => "{ version = \"1\", features = [\"preserve_order\", \"raw_value\", \"float_roundtrip\"] }",
        other => return format!("{other} = \"*\""),
    };
    format!("{key} = {value}")
}

/// A throw-away `$DSH_HOME` and a way to run `dsh` in it.
pub struct TestHome {
    pub dir: tempfile::TempDir,
    /// The session format new sessions are written in (`DSH_SESSION_FORMAT`); `None` leaves
    /// dsh's default.
    format: Option<&'static str>,
}

/// Names a format for the homes of [`TestHome::new`] instead of dsh's default:
/// `compat/reference-loader.sh` runs the suite with `v0`, the format DeepSeek Harness 0.1 loads.
pub const FORMAT_OVERRIDE: &str = "DSH_E2E_SESSION_FORMAT";

impl TestHome {
    /// A home whose new sessions are written in dsh's default format (v4), what users get,
    /// unless [`FORMAT_OVERRIDE`] names another.
    pub fn new() -> Self {
        let format = match std::env::var(FORMAT_OVERRIDE).as_deref() {
            Ok("v0") => Some("v0"),
            Ok("v4") => Some("v4"),
            Ok(other) => panic!("{FORMAT_OVERRIDE}={other}: only v0 and v4 are formats"),
            Err(_) => None,
        };
        TestHome { dir: tempfile::tempdir().expect("create a temporary home"), format }
    }

    /// A home whose new sessions are written in format v0 (DeepSeek Harness 0.1's), for tests
    /// whose assertions are about v0 itself.
    pub fn v0() -> Self {
        TestHome { dir: tempfile::tempdir().expect("create a temporary home"), format: Some("v0") }
    }

    /// A home whose new sessions are written in format v4 whatever [`FORMAT_OVERRIDE`] says.
    pub fn v4() -> Self {
        TestHome { dir: tempfile::tempdir().expect("create a temporary home"), format: Some("v4") }
    }

    /// The format this home's new sessions are written in.
    pub fn format(&self) -> &'static str {
        self.format.unwrap_or("v4")
    }

    /// The log file of session `id` in this home, in the format its new sessions are written in.
    pub fn session_log(&self, id: impl AsRef<str>) -> PathBuf {
        let file = if self.format() == "v0" { "session.jsonl" } else { "session.v4.jsonl" };
        self.path().join("sessions").join(id.as_ref()).join(file)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `contents` to `name` inside the home and returns its path.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent directories");
        }
        std::fs::write(&path, contents).expect("write a test file");
        path
    }

    /// Runs `dsh ARGS…` in this home.
    pub fn run(&self, args: &[&str]) -> Run {
        Run::of(self.dsh().args(args))
    }

    /// `dsh` with this home, no colour, and no inherited secrets.
    pub fn dsh(&self) -> Command {
        let mut command = Command::new(artifacts().dsh());
        self.configure(&mut command);
        command
    }

    /// `sh -c SCRIPT` with the environment of [`TestHome::dsh`] and `$DSH` naming the binary:
    /// large input is made by the shell (`head -c … | "$DSH" run -`), so this process never holds
    /// it (a child inherits its parent's peak memory, which would skew every measured run).
    pub fn shell(&self, script: &str) -> Command {
        let mut command = Command::new("sh");
        command.arg("-c").arg(script).env("DSH", artifacts().dsh());
        self.configure(&mut command);
        command
    }

    fn configure(&self, command: &mut Command) {
        command
            .env("DSH_HOME", self.path())
            .env("NO_COLOR", "1")
            .env_remove("DEEPSEEK_API_KEY")
            .env_remove("DSH_PLUGIN_PATH")
            .env_remove("DSH_LOG")
            .env_remove("DSH_SESSIONS")
            .env("PGPASSWORD", PG_PASSWORD)
            .current_dir(self.path());
        match self.format {
            Some(format) => command.env("DSH_SESSION_FORMAT", format),
            None => command.env_remove("DSH_SESSION_FORMAT"),
        };
    }
}

impl Default for TestHome {
    fn default() -> Self {
        Self::new()
    }
}

/// With `DSH_E2E_KEEP_LOGS=DIR`, every v0 session log a test home held is copied into `DIR` when
/// the home goes away (as `<test>--<session>.jsonl`), for `compat/reference-loader.sh` (which
/// runs the suite with [`FORMAT_OVERRIDE`]` = v0`).
impl Drop for TestHome {
    fn drop(&mut self) {
        let Some(keep) = std::env::var_os("DSH_E2E_KEEP_LOGS") else { return };
        let keep = PathBuf::from(keep);
        let test = std::thread::current().name().unwrap_or("test").replace("::", "-");
        let Ok(sessions) = std::fs::read_dir(self.path().join("sessions")) else { return };
        for session in sessions.flatten() {
            let log = session.path().join("session.jsonl");
            if log.is_file() {
                let name = format!("{test}--{}.jsonl", session.file_name().to_string_lossy());
                let _ = std::fs::create_dir_all(&keep).and_then(|()| std::fs::copy(&log, keep.join(name)));
            }
        }
    }
}

/// A `dsh mock-server` child process serving a script on 127.0.0.1; killed when dropped.
pub struct MockProcess {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    /// Every request it answered, one JSON line each.
    pub record: PathBuf,
}

impl MockProcess {
    /// Starts `dsh mock-server` with `script` (YAML) written into `home`.
    pub fn start(home: &TestHome, script: &str) -> MockProcess {
        MockProcess::start_with(home, script, &[])
    }

    /// [`MockProcess::start`] with more `dsh mock-server` arguments (`--loop`).
    pub fn start_with(home: &TestHome, script: &str, extra: &[&str]) -> MockProcess {
        use std::io::BufRead;
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let script_path = home.write(&format!("mock-{n}.yml"), script);
        let record = home.path().join(format!("mock-{n}-requests.jsonl"));
        let mut child = Command::new(artifacts().dsh())
            .args(["mock-server", "--listen", "127.0.0.1:0", "--script"])
            .arg(&script_path)
            .arg("--record")
            .arg(&record)
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start dsh mock-server");
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut first)
            .expect("read the address line");
        let address = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_owned();
        MockProcess { child, base_url: format!("{address}/v1"), record }
    }

    /// Lets every request held on `name` (a step's `hold: NAME`) be answered, now and later.
    pub fn release(&self, name: &str) {
        use std::io::{Read, Write};
        let address = self.base_url.trim_start_matches("http://").trim_end_matches("/v1");
        let mut stream = std::net::TcpStream::connect(address).expect("connect to the mock server");
        let request = format!(
            "POST {}{name} HTTP/1.1\r\nhost: {address}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            dsh_host::llm::mock::RELEASE_PATH
        );
        stream.write_all(request.as_bytes()).expect("send the release");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("read the release's answer");
        assert!(answer.starts_with("HTTP/1.1 204"), "the release of {name} was answered {answer:?}");
    }

    /// Waits until `count` requests have reached the server (a held one counts once it arrived).
    pub fn wait_for_requests(&self, count: usize) {
        let arrived = wait_until(PATIENCE, || self.request_bodies().len() >= count);
        assert!(arrived, "{count} requests did not reach the mock server");
    }

    /// The bodies of the requests answered so far (a record the server is still writing, after
    /// the last newline, is not one yet).
    pub fn request_bodies(&self) -> Vec<String> {
        let record = std::fs::read_to_string(&self.record).unwrap_or_default();
        let complete = record.rfind('\n').map_or("", |end| &record[..end]);
        complete
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("a JSON line"))
            .filter(|request| !request["request"].is_null())
            .map(|request| request["body"].as_str().expect("a body").to_owned())
            .collect()
    }
}

impl Drop for MockProcess {
    fn drop(&mut self) {
        process::kill_9(&mut self.child);
    }
}

/// A port on 127.0.0.1 nobody listens on now, for a server the test starts. It lies below the
/// kernel's ephemeral range, so no other test's `bind(0)` or outgoing connection can take it
/// between this check and the server's own bind; each test process starts at its own place.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOWEST: u32 = 10_000;
    static TAKEN: AtomicU32 = AtomicU32::new(0);
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let first_ephemeral: u32 = ephemeral.split_whitespace().next().and_then(|low| low.parse().ok()).unwrap_or(32_768);
    if first_ephemeral <= LOWEST + 1_000 {
        // Nothing below the ephemeral range to pick from: the kernel's pick, race and all.
        return std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    }
    let span = first_ephemeral - LOWEST;
    let start = std::process::id().wrapping_mul(7_919);
    for _ in 0..span {
        let port = LOWEST + start.wrapping_add(TAKEN.fetch_add(1, Ordering::Relaxed)) % span;
        let port = u16::try_from(port).expect("ports below the ephemeral range fit in u16");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 from {LOWEST} to {first_ephemeral}")
}

/// A real `redis-server` on 127.0.0.1 (no persistence), killed when dropped. `.ci/run` installs
/// one from the system's package manager when it is missing.
pub struct RedisServer {
    child: std::process::Child,
    /// `redis://127.0.0.1:PORT`.
    pub url: String,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start redis-server (install it: apt-get install redis-server; .ci/run does)");
        let ready = wait_until(PATIENCE, || {
            use std::io::{Read, Write};
            let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
            let mut answer = [0u8; 7];
            stream.write_all(b"PING\r\n").is_ok() && stream.read_exact(&mut answer).is_ok() && &answer == b"+PONG\r\n"
        });
        assert!(ready, "redis-server did not answer on port {port}");
        RedisServer { child, url: format!("redis://127.0.0.1:{port}") }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        process::kill_9(&mut self.child);
    }
}

/// A real PostgreSQL server in a temporary folder (`initdb`, then `pg_ctl start` on a free port
/// of 127.0.0.1, password authentication), stopped and removed when dropped. `.ci/run` installs
/// the server from the system's package manager when it is missing. As root, the server runs as
/// the `postgres` user, which PostgreSQL requires.
pub struct PostgresServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
}

/// The password of the test server's `dsh` user.
pub const PG_PASSWORD: &str = "pg-test-Secret-93b1";

impl PostgresServer {
    pub fn start() -> PostgresServer {
        let bin = postgres_bin();
        let dir = tempfile::tempdir().expect("a folder for the database");
        std::fs::write(dir.path().join("pw"), PG_PASSWORD).unwrap();
        give_to_postgres(dir.path());
        let server = PostgresServer { dir, bin, port: free_port() };
        let data = server.dir.path().join("data");
        let pw = server.dir.path().join("pw");
        let init = server
            .as_owner("initdb")
            .args(["-U", "dsh", "--auth=scram-sha-256", "-N", "-E", "UTF8", "--locale=C", "-D"])
            .arg(&data)
            .arg(format!("--pwfile={}", pw.display()))
            .output()
            .expect("run initdb");
        assert!(init.status.success(), "initdb failed: {}", String::from_utf8_lossy(&init.stderr));
        server.start_again();
        server
    }

    /// `pg_ctl start`, waiting until it accepts connections.
    pub fn start_again(&self) {
        let options = format!("-p {} -k {} -c listen_addresses=127.0.0.1", self.port, self.dir.path().display());
        let started = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-o", &options, "-w", "start"])
            .output()
            .expect("run pg_ctl start");
        assert!(started.status.success(), "pg_ctl start failed: {}", String::from_utf8_lossy(&started.stderr));
    }

    /// `pg_ctl stop -m immediate`: every connection is cut at once, as in a crash.
    pub fn stop_immediately(&self) {
        let _ = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }

    /// `postgres://dsh@127.0.0.1:PORT/DB` (the password goes through `PGPASSWORD`).
    pub fn url(&self, database: &str) -> String {
        format!("postgres://dsh@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates database `name` and returns its URL.
    pub fn database(&self, name: &str) -> String {
        self.sql("postgres", &format!("CREATE DATABASE {name}"));
        self.url(name)
    }

    /// Runs `sql` in `database` with `psql` and returns what it printed (unaligned, tuples only).
    pub fn sql(&self, database: &str, sql: &str) -> String {
        let output = Command::new(self.bin.join("psql"))
            .env("PGPASSWORD", PG_PASSWORD)
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "dsh", "-d", database, "-At", "-c", sql])
            .output()
            .expect("run psql");
        assert!(output.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    }

    /// Waits until no session holds a writer lock: after a `kill -9`, the server frees the
    /// killed process's advisory locks only once its backend notices the closed connection.
    pub fn wait_until_no_writer(&self) {
        let released = wait_until(PATIENCE, || {
            self.sql("postgres", "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").trim() == "0"
        });
        assert!(released, "a killed process's advisory locks were never freed");
    }

    /// Brings database `url`'s dsh schema up to date, as dsh's first write would.
    pub fn migrate(&self, url: &str) {
        use dsh_session::store::postgres::{schema, Database};
        let database = Database::new(url, Some(PG_PASSWORD.to_owned()), "PGPASSWORD").expect("a PostgreSQL URL");
        let connection = database.connect().expect("connect to the test server");
        schema::migrate(&connection, url).expect("migrate");
    }

    /// Points `home` at database `url` through its `sessions.toml`.
    pub fn use_in(&self, home: &TestHome, url: &str) {
        home.write("sessions.toml", &format!("store = \"{url}\"\n"));
    }

    fn as_owner(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop_immediately();
    }
}

/// The folder of `initdb` and `pg_ctl`: on PATH, else the newest `/usr/lib/postgresql/*/bin`.
fn postgres_bin() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file());
    let installed = || {
        let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .flatten()
            .map(|entry| entry.path().join("bin"))
            .filter(|bin| bin.join("initdb").is_file())
            .collect();
        found.sort_by_key(|bin| bin.parent().and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok()));
        found.pop()
    };
    let bin = on_path
        .map(|dir| std::fs::canonicalize(dir.join("initdb")).map_or(dir, |real| real.parent().unwrap().to_owned()));
    bin.or_else(installed).expect("PostgreSQL's initdb (apt-get install postgresql; .ci/run does)")
}

/// Makes `dir` the `postgres` user's when running as root (the server refuses to run as root).
fn give_to_postgres(dir: &Path) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let status = Command::new("chown").args(["-R", "postgres"]).arg(dir).status().expect("run chown");
    assert!(status.success(), "chown {} to postgres", dir.display());
}

/// Every file below `dir`, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).expect("read a directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The session folders under `home` now.
pub fn session_dirs(home: &TestHome) -> std::collections::HashSet<PathBuf> {
    match std::fs::read_dir(home.path().join("sessions")) {
        Ok(entries) => entries.map(|entry| entry.expect("a directory entry").path()).collect(),
        Err(_) => std::collections::HashSet::new(),
    }
}

/// The log of the one session under `home` (the first one found), once it exists.
pub fn only_session_log(home: &TestHome) -> Option<PathBuf> {
    let dir = std::fs::read_dir(home.path().join("sessions")).ok()?.next()?.ok()?.path();
    Some(log_in(&dir)).filter(|log| log.exists())
}

/// The events of `events` of type `event_type`.
pub fn of_type<'a>(events: &'a [serde_json::Value], event_type: &str) -> Vec<&'a serde_json::Value> {
    events.iter().filter(|event| event["type"] == event_type).collect()
}

/// The log in the session folder `dir`: its v4 file where there is one, else its v0 file.
pub fn log_in(dir: &Path) -> PathBuf {
    let v4 = dir.join("session.v4.jsonl");
    if v4.exists() {
        v4
    } else {
        dir.join("session.jsonl")
    }
}

/// How long a test waits for a signal before it fails: only a hang should reach it, on a
/// machine as loaded as CI's two cores running the suite in parallel.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// Polls `condition` every 10 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: std::time::Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    condition()
}

/// The events of a session log, parsed (header excluded).
pub fn log_events(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("read the log")
        .lines()
        .skip(1)
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// What a finished command said.
pub struct Run {
    /// The command line, for failure messages.
    pub command: String,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// A command as a shell would show it.
fn command_line(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "$ {}\nexit: {:?}\n--- stdout\n{}\n--- stderr\n{}", self.command, self.code, self.stdout, self.stderr)
    }
}

impl Run {
    /// Asserts the exit code; on a mismatch the panic shows the command, its exit code, stdout
    /// and stderr.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Run {
        assert_eq!(self.code, Some(code), "unexpected exit code:\n{self}");
        self
    }

    /// Asserts that stdout holds `text`, showing the whole run when it does not.
    #[track_caller]
    pub fn expect_stdout(&self, text: &str) -> &Run {
        assert!(self.stdout.contains(text), "stdout lacks {text:?}:\n{self}");
        self
    }

    /// Asserts that stderr holds `text`, showing the whole run when it does not.
    #[track_caller]
    pub fn expect_stderr(&self, text: &str) -> &Run {
        assert!(self.stderr.contains(text), "stderr lacks {text:?}:\n{self}");
        self
    }

    /// Runs the command and also reports its peak resident memory in KiB, measured by the
    /// small `peak-rss` process between this one and the command (see `tests/bin/peak_rss.rs`).
    pub fn measured(command: &mut Command) -> (Run, i64) {
        let mut wrapped = Command::new(profile_dir().join("peak-rss"));
        wrapped.arg(command.get_program()).args(command.get_args());
        if let Some(dir) = command.get_current_dir() {
            wrapped.current_dir(dir);
        }
        for (key, value) in command.get_envs() {
            match value {
                Some(value) => wrapped.env(key, value),
                None => wrapped.env_remove(key),
            };
        }
        let mut run = Run::of(&mut wrapped);
        let (stderr, peak) = run.stderr.rsplit_once("peak-rss-kib: ").expect("peak-rss reports the peak");
        let peak = peak.trim().parse().expect("a number of KiB");
        run.stderr = stderr.to_owned();
        run.command = command_line(command);
        (run, peak)
    }

    /// Waits for a child started with piped stdout or stderr (the others are empty).
    pub fn from_child(child: std::process::Child) -> Run {
        let output = child.wait_with_output().expect("wait for dsh");
        Run {
            command: "(a spawned dsh)".to_owned(),
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    pub fn of(command: &mut Command) -> Run {
        let output = command.output().expect("run dsh");
        Run::from_output(command, output)
    }

    /// What `command`, spawned and waited for, said.
    pub fn from_output(command: &Command, output: Output) -> Run {
        Run {
            command: command_line(command),
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}
