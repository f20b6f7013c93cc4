//! Reading v4's fields as its reader does, and the open step the rules are told of.

use serde_json::Value;

/// A JSON value read as a count: a non-negative safe integer (JavaScript's `-0` is none).
pub(super) fn count(value: Option<&Value>) -> Option<u64> {
    let number = value?.as_f64()?;
    let negative_zero = number == 0.0 && number.is_sign_negative();
    (dsh_abi::js::is_safe_integer(number) && number >= 0.0 && !negative_zero).then_some(number as u64)
}

pub(super) fn text<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

pub(super) fn nonempty<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    text(value, key).filter(|text| !text.is_empty())
}

/// The open turn and step as the shared rules track them, and the step last opened.
#[derive(Debug, Clone, Copy)]
pub struct OpenStep {
    pub turn: Option<u64>,
    pub step: Option<u64>,
    pub last_step: u64,
}
