//! A real browser for the web front end's tests: Debian's headless Chromium driven through
//! its ChromeDriver over WebDriver (`fantoccini`), each test with its own browser profile. The
//! page is read and driven the way a person would: what it shows, clicks, typing, a reload.
//! `.ci/run` installs `chromium` and `chromium-driver` when they are missing.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

use crate::{process, PATIENCE};

/// The browser the page is tested in, and its driver.
pub struct Browser {
    runtime: tokio::runtime::Runtime,
    client: Option<Client>,
    driver: Child,
    _profile: tempfile::TempDir,
}

fn installed(program: &str) -> bool {
    Path::new("/usr/bin").join(program).exists()
}

impl Browser {
    /// Starts ChromeDriver and a headless Chromium (with `extra` command-line switches).
    pub fn start(extra: &[&str]) -> Browser {
        assert!(
            installed("chromium") && installed("chromedriver"),
            "the browser tests need Debian's chromium and chromium-driver (apt-get install chromium chromium-driver; .ci/run does)"
        );
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (driver, port) = start_driver();
        let profile = tempfile::tempdir().unwrap();
        let mut args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--no-first-run".into(),
            "--window-size=1280,800".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        args.extend(extra.iter().map(|arg| (*arg).to_owned()));
        let options = json!({"binary": "/usr/bin/chromium", "args": args});
        let capabilities = serde_json::Map::from_iter([("goog:chromeOptions".to_owned(), options)]);
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = runtime
            .block_on(
                ClientBuilder::new(connector).capabilities(capabilities).connect(&format!("http://127.0.0.1:{port}")),
            )
            .expect("ChromeDriver starts a Chromium session");
        Browser { runtime, client: Some(client), driver, _profile: profile }
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("the browser is open")
    }

    pub fn goto(&self, url: &str) {
        self.runtime.block_on(self.client().goto(url)).unwrap_or_else(|err| panic!("cannot open {url}: {err}"));
    }

    pub fn refresh(&self) {
        self.runtime.block_on(self.client().refresh()).expect("the page reloads");
    }

    /// Runs `script` in the page (`arguments[i]` are `args`) and answers what it returns.
    pub fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.runtime.block_on(self.client().execute(script, args)).unwrap_or_else(|err| panic!("{script}: {err}"))
    }

    /// Waits until `expression` (JavaScript) is truthy in the page and answers its value; after
    /// [`PATIENCE`] the test fails, saying `what` it waited for and what the page showed.
    pub fn wait_for(&self, what: &str, expression: &str) -> Value {
        let script = format!("return ({expression});");
        let started = Instant::now();
        loop {
            let value = self.runtime.block_on(self.client().execute(&script, vec![])).unwrap_or(Value::Null);
            if !matches!(value, Value::Null | Value::Bool(false)) && value != json!("") && value != json!(0) {
                return value;
            }
            if started.elapsed() > PATIENCE {
                panic!("the page never showed {what} ({expression}); it shows:\n{}", self.text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The page's visible text.
    pub fn text(&self) -> String {
        self.js("return document.body.innerText;", vec![]).as_str().unwrap_or_default().to_owned()
    }

    pub fn click(&self, css: &str) {
        let element = self.runtime.block_on(self.client().find(Locator::Css(css)));
        let element = element.unwrap_or_else(|err| panic!("no {css} on the page: {err}"));
        self.runtime.block_on(element.click()).unwrap_or_else(|err| panic!("cannot click {css}: {err}"));
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let element = self.runtime.block_on(self.client().find(Locator::Css(css)));
        let element = element.unwrap_or_else(|err| panic!("no {css} on the page: {err}"));
        self.runtime.block_on(element.send_keys(text)).unwrap_or_else(|err| panic!("cannot type into {css}: {err}"));
    }

    /// A PNG of the window.
    pub fn screenshot(&self) -> Vec<u8> {
        self.runtime.block_on(self.client().screenshot()).expect("a screenshot")
    }

    /// Saves a screenshot as `name.png` in the target folder's `screenshots/` and, with
    /// `DSH_E2E_SCREENSHOTS=DIR`, in `DIR` too (the README's pictures are taken this way).
    pub fn save_screenshot(&self, name: &str) {
        let png = self.screenshot();
        let target = crate::workspace_root().join("target").join("screenshots");
        let mut folders = vec![target];
        folders.extend(std::env::var_os("DSH_E2E_SCREENSHOTS").map(std::path::PathBuf::from));
        for folder in folders {
            std::fs::create_dir_all(&folder).unwrap();
            std::fs::write(folder.join(format!("{name}.png")), &png).unwrap();
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = self.runtime.block_on(client.close());
        }
        process::kill_9(&mut self.driver);
    }
}

/// ChromeDriver on a port it picks, once it says it listens.
fn start_driver() -> (Child, u16) {
    let port = crate::free_port();
    let mut driver = Command::new("/usr/bin/chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let mut said = BufReader::new(driver.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("started successfully") {
        line.clear();
        assert_ne!(said.read_line(&mut line).unwrap(), 0, "chromedriver exited before it listened");
    }
    std::thread::spawn(move || std::io::copy(&mut said, &mut std::io::sink()));
    (driver, port)
}
