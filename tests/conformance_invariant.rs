//! Every invariant vector recorded from the TypeScript reference
//! (`tests/fixtures/conformance/invariant`), fed event by event to the real
//! `llm-retry-invariant` cdylib's streaming checker: same verdict, same seq, same message.

use abi_stable::std_types::{RResult, RStr};
use dsh_abi::{js, EventRef, Verdict};
use dsh_e2e::{artifacts, workspace_root};
use dsh_host::plugin::PluginLibrary;
use serde_json::Value;

#[test]
fn every_reference_vector_gives_the_same_verdict_seq_and_message() {
    let path = workspace_root().join("tests/fixtures/conformance/invariant/vectors.json");
    let vectors: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let library = PluginLibrary::load(&artifacts().library("llm-retry-invariant")).unwrap();
    let invariant = library.instantiate("llm-retry-invariant", &Value::Null).unwrap();
    let mut failures = Vec::new();
    for vector in &vectors {
        let mut checker = invariant.open_checker("{}").unwrap().expect("the invariant opens a checker");
        let mut first = None;
        for event in vector["events"].as_array().unwrap() {
            let data = js::to_string(&event["data"]);
            let seq = event["seq"].as_u64().unwrap();
            let verdict = checker.check_event(EventRef {
                event_type: RStr::from_str(event["type"].as_str().unwrap()),
                seq,
                time: event["time"].as_f64().unwrap(),
                data: RStr::from_str(&data),
            });
            let verdict = match verdict {
                RResult::ROk(verdict) => Verdict::try_from(verdict).unwrap(),
                RResult::RErr(err) => panic!("{}: the checker failed: {}", vector["name"], err.message),
            };
            if let (Verdict::Refuse(message), None) = (verdict, &first) {
                first = Some((seq, message.into_string()));
            }
        }
        let expect = &vector["expect"];
        let expected = (expect["ok"] == false)
            .then(|| (expect["seq"].as_u64().unwrap(), expect["message"].as_str().unwrap().to_owned()));
        if first != expected {
            failures.push(format!("{}: got {first:?}, expected {expected:?}", vector["name"]));
        }
    }
    assert!(failures.is_empty(), "{} of {} vectors differ:\n{}", failures.len(), vectors.len(), failures.join("\n"));
    assert_eq!(vectors.len(), 54);
}
