//! Every config key of every plugin and built-in row, given a wrong type or an out-of-range
//! value in one layer: `dsh config check` reports every problem in one run, each naming the file,
//! the row and the key.

use dsh_e2e::TestHome;

const MATRIX: &str = r#"
- {id: llm-retry, disabled: false, config: {retryPolicy: {}, colour: red}}
- id: agent
  config: {provider: 5, model: [], system: {}, tools: 1}
- id: llm-deepseek
  config:
    provider: ""
    baseUrl: 5
    model: 7
    apiKeyEnv: "1X"
    headers: "h"
    connectTimeoutMs: -1
    idleTimeoutMs: 0
    extra: 1
    retryPolicy: {mode: normal, maxRetries: -1, retryableCodes: SERVER, backoff: {initialDelayMs: "x", maxDelayMs: 0, jitterRatio: 7, factor: 2}, retries: 1}
- {id: llm-retry-invariant, config: {mode: 7, y: 1}}
- {id: relay-retry, config: {schedule: [-1, 1.5], tailDelayMs: "x", retryableCodes: ["*"], respectRetryAfter: 1, z: 1}}
- id: model-error-retry
  config:
    maxRetries: -1
    overloadMaxRetries: "x"
    retryableCodes: 5
    initialDelayMs: -1
    overloadInitialDelayMs: 3000000000
    maxDelayMs: "y"
    jitterRatio: 2
    providers: 5
    excludeProviders: [1]
    respectRetryAfter: "no"
    resumeInterrupted: 1
    resumeDisposed: "x"
    resumeMaxAgeMs: -1
    resumePrompt: ""
    w: 1
"#;

/// (row, key) pairs that must each be named by a problem.
const EXPECTED: [(&str, &str); 44] = [
    ("llm-retry", "retryPolicy"),
    ("llm-retry", "colour"),
    ("agent", "provider"),
    ("agent", "model"),
    ("agent", "system"),
    ("agent", "tools"),
    ("llm-deepseek", "provider"),
    ("llm-deepseek", "baseUrl"),
    ("llm-deepseek", "model"),
    ("llm-deepseek", "apiKeyEnv"),
    ("llm-deepseek", "headers"),
    ("llm-deepseek", "connectTimeoutMs"),
    ("llm-deepseek", "idleTimeoutMs"),
    ("llm-deepseek", "extra"),
    ("llm-deepseek", "retryPolicy.maxRetries"),
    ("llm-deepseek", "retryPolicy.retryableCodes"),
    ("llm-deepseek", "retryPolicy.backoff.initialDelayMs"),
    ("llm-deepseek", "retryPolicy.backoff.maxDelayMs"),
    ("llm-deepseek", "retryPolicy.backoff.jitterRatio"),
    ("llm-deepseek", "retryPolicy.backoff.factor: unknown key \"factor\""),
    ("llm-deepseek", "retryPolicy.retries: unknown key \"retries\""),
    ("llm-retry-invariant", "mode"),
    ("llm-retry-invariant", "y"),
    ("relay-retry", "schedule[0]"),
    ("relay-retry", "schedule[1]"),
    ("relay-retry", "tailDelayMs"),
    ("relay-retry", "retryableCodes"),
    ("relay-retry", "respectRetryAfter"),
    ("relay-retry", "z"),
    ("model-error-retry", "maxRetries"),
    ("model-error-retry", "overloadMaxRetries"),
    ("model-error-retry", "retryableCodes"),
    ("model-error-retry", "initialDelayMs"),
    ("model-error-retry", "overloadInitialDelayMs"),
    ("model-error-retry", "maxDelayMs"),
    ("model-error-retry", "jitterRatio"),
    ("model-error-retry", "providers"),
    ("model-error-retry", "excludeProviders"),
    ("model-error-retry", "respectRetryAfter"),
    ("model-error-retry", "resumeInterrupted"),
    ("model-error-retry", "resumeDisposed"),
    ("model-error-retry", "resumeMaxAgeMs"),
    ("model-error-retry", "resumePrompt"),
    ("model-error-retry", "w"),
];

#[test]
fn every_bad_key_of_every_row_is_reported_in_one_run_with_file_row_and_key() {
    let home = TestHome::new();
    for package in ["relay-retry", "dsh-retry"] {
        let add = home.run(&["plugin", "--profile", "all", "add", package]);
        add.expect_code(0);
    }
    let matrix = home.write("matrix.yml", MATRIX);
    let run = home.run(&["config", "--profile", "all", "check", "--patch", matrix.to_str().unwrap()]);
    run.expect_code(4);
    let lines: Vec<&str> = run.stderr.lines().collect();
    let missing: Vec<String> = EXPECTED
        .iter()
        .filter(|(row, key)| {
            let prefix = format!("$DSH_HOME/matrix.yml: row \"{row}\": config.{key}");
            !lines.iter().any(|line| line.starts_with(&prefix))
        })
        .map(|(row, key)| format!("{row}: {key}"))
        .collect();
    assert!(missing.is_empty(), "not reported: {missing:?}\n{}", run.stderr);
    for line in lines.iter().filter(|line| line.contains("row \"")) {
        assert!(line.starts_with("$DSH_HOME/matrix.yml: row \""), "a problem without its file: {line}");
    }
}
