//! How patch layers read YAML scalars, against DeepSeek Harness: 132 tokens, each as a config
//! value, a row id and a mapping key, recorded from `@deepseek-ai/dsh@0.1.0-rc.8` (its
//! `--dump-config`) in `fixtures/conformance/yaml-scalars/cases.json`. Every case gives the
//! reference's rows and warnings, or a refusal where the reference refused — except where dsh
//! differs on purpose (README, "Patch layers"): `.inf`/`.nan` and `!!js` are refused, and
//! integers beyond 2^53 are kept exact.

use dsh_e2e::workspace_root;
use dsh_host::profile::patch::{compose, Layer};
use serde_json::Value;

/// JSON equality as JavaScript sees the values: key order aside, numbers compared as doubles.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(key, value)| y.get(key).is_some_and(|other| same(value, other)))
        }
        _ => a == b,
    }
}

/// A token dsh refuses on purpose: infinities, NaN and JavaScript expressions.
fn refused_on_purpose(token: &str) -> bool {
    ["inf", "Inf", "INF", "nan", "NaN", "NAN"].iter().any(|special| token.contains(&format!(".{special}")))
        || token.contains("!!js")
        || token.contains("2002:js>")
}

/// An integer token beyond 2^53 used as a mapping key: dsh keeps its digits, JavaScript rounds.
fn exact_integer_key(token: &str, position: &str) -> Option<String> {
    let digits = token.trim_start_matches('-');
    let big = digits.len() >= 16 && digits.chars().all(|c| c.is_ascii_digit());
    (position == "key" && big && token.parse::<u64>().is_ok()).then(|| token.to_owned())
}

#[test]
fn every_scalar_token_reads_as_the_reference_reads_it() {
    let path = workspace_root().join("tests/fixtures/conformance/yaml-scalars/cases.json");
    let cases: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(cases.len(), 396);
    let mut failures = Vec::new();
    for case in &cases {
        let (token, position) = (case["token"].as_str().unwrap(), case["position"].as_str().unwrap());
        let name = format!("{position} {token:?}");
        let composed = Layer::parse("b1", "b1", case["layer"].as_str().unwrap())
            .map(|layer| compose(Vec::new(), "cordis.yml", &[layer]));
        let expect = &case["expect"];
        let refuse = expect.get("error").is_some() || refused_on_purpose(token);
        match composed {
            Err(_) if refuse => {}
            Err(err) => failures.push(format!("{name}: refused ({err}), the reference read it")),
            Ok(_) if refuse => failures.push(format!("{name}: read, the reference refused it")),
            Ok(composition) => {
                let mut expected_rows = expect["rows"].clone();
                if let Some(key) = exact_integer_key(token, position) {
                    let config = expected_rows[0]["config"].as_object_mut().unwrap();
                    let value = config.values().next().unwrap().clone();
                    config.clear();
                    config.insert(key, value);
                }
                if !same(&Value::Array(composition.rows.clone()), &expected_rows) {
                    failures.push(format!("{name}: rows {:?}, expected {expected_rows}", composition.rows));
                }
                let warnings: Vec<String> =
                    composition.warnings.iter().map(|warning| format!("dsh: {}", warning.reference_text())).collect();
                let expected: Vec<&str> =
                    expect["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
                if warnings != expected {
                    failures.push(format!("{name}: warnings {warnings:?}, expected {expected:?}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
