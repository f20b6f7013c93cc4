//! Parses arbitrary text as a patch layer and composes it over the base bundle and itself: no
//! input may panic, and composition must stay deterministic.
#![no_main]

use dsh_host::profile::patch::{compose, Layer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let base = Layer::parse("base", "base", "[{insert: [{id: a, name: a, group: true}, {id: b, name: b}]}]").expect("a valid base");
    if let Ok(layer) = Layer::parse("fuzz", "fuzz.yml", text) {
        let layers = [base, layer.clone(), layer];
        let first = compose(Vec::new(), "cordis.yml", &layers);
        assert_eq!(first, compose(Vec::new(), "cordis.yml", &layers));
        let _ = first.enabled_rows();
    }
});
