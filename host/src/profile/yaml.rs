//! Every YAML document dsh reads or writes goes through this module, so the parser can be
//! swapped by changing this file alone (serde_yaml is unmaintained upstream).
//!
//! Documents become `serde_json::Value`s (key order kept). Tags are checked before any value is
//! used: serde_yaml and its forks resolve `!!js expr` to the plain string `"expr"` and drop the
//! tag, which would silently turn a TypeScript-harness expression into a config value. The tags
//! are therefore read from a second parser's event stream (yaml-rust2), which reports them with
//! their position.

use serde::de::DeserializeOwned;
use serde_json::{Map, Number, Value};
use yaml_rust2::parser::{Event, Parser, Tag};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum YamlError {
    /// Not valid YAML; the message carries the line and column.
    #[error("{0}")]
    Syntax(String),
    #[error(
        "line {line}, column {column}: `!!js` tags (JavaScript expressions of the TypeScript harness) are not \
         supported by dsh; write the value itself, and for a secret name its environment variable with \
         `apiKeyEnv: NAME`"
    )]
    JsTag { line: usize, column: usize },
    #[error("line {line}, column {column}: unsupported YAML tag `{tag}`")]
    UnsupportedTag { line: usize, column: usize, tag: String },
    /// Valid YAML that has no JSON equivalent (an infinite number, a mapping used as a key).
    #[error("{0}")]
    NotJson(String),
    /// Valid JSON data of the wrong shape for the type asked for.
    #[error("{0}")]
    Shape(String),
}

/// The core-schema tags every YAML parser resolves the same way.
const CORE_TAGS: [&str; 7] = ["str", "int", "float", "bool", "null", "seq", "map"];
const CORE_PREFIX: &str = "tag:yaml.org,2002:";

/// Parses one document. `Ok(None)` for a document with no content (empty or comments only).
pub fn parse(text: &str) -> Result<Option<Value>, YamlError> {
    let value: serde_yaml::Value = serde_yaml::from_str(text).map_err(|err| YamlError::Syntax(err.to_string()))?;
    check_tags(text)?;
    match value {
        serde_yaml::Value::Null if is_blank_document(text) => Ok(None),
        value => to_json(value).map(Some),
    }
}

/// Parses one document into `T`; an empty document is `null`.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    let value = parse(text)?.unwrap_or(Value::Null);
    serde_json::from_value(value).map_err(|err| YamlError::Shape(err.to_string()))
}

/// Writes a value as a YAML document.
pub fn to_string(value: &Value) -> String {
    serde_yaml::to_string(value).expect("JSON values always serialise as YAML")
}

fn is_blank_document(text: &str) -> bool {
    text.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#') || line == "---" || line == "..."
    })
}

fn check_tags(text: &str) -> Result<(), YamlError> {
    let mut parser = Parser::new_from_str(text);
    loop {
        let (event, mark) = match parser.next_token() {
            Ok(next) => next,
            // The two parsers disagree on a corner of the grammar: fall back to refusing any
            // `!!js` that appears in the text at all.
            Err(_) if text.contains("!!js") => return Err(YamlError::JsTag { line: 1, column: 1 }),
            Err(_) => return Ok(()),
        };
        let tag = match event {
            Event::StreamEnd => return Ok(()),
            Event::Scalar(_, _, _, tag) | Event::SequenceStart(_, tag) | Event::MappingStart(_, tag) => tag,
            _ => None,
        };
        if let Some(Tag { handle, suffix }) = tag {
            let full = format!("{handle}{suffix}");
            let core = full.strip_prefix(CORE_PREFIX);
            if core.is_some_and(|name| CORE_TAGS.contains(&name)) {
                continue;
            }
            let (line, column) = (mark.line(), tag_column(text, mark.line(), mark.col()));
            if core == Some("js") {
                return Err(YamlError::JsTag { line, column });
            }
            let tag = match core {
                Some(name) => format!("!!{name}"),
                None if handle.is_empty() || handle == "!" => format!("!{suffix}"),
                None => full,
            };
            return Err(YamlError::UnsupportedTag { line, column, tag });
        }
    }
}

/// The 1-based column of the tag that ends before `marker_column` on `line` (the parser marks
/// the tagged node, which starts after its tag).
fn tag_column(text: &str, line: usize, marker_column: usize) -> usize {
    let Some(source) = text.lines().nth(line.saturating_sub(1)) else {
        return marker_column + 1;
    };
    let before: String = source.chars().take(marker_column).collect();
    before.rfind('!').map(|end| before[..=end].trim_end_matches('!').len() + 1).unwrap_or(marker_column + 1)
}

fn to_json(value: serde_yaml::Value) -> Result<Value, YamlError> {
    Ok(match value {
        serde_yaml::Value::Null => Value::Null,
        serde_yaml::Value::Bool(flag) => Value::Bool(flag),
        serde_yaml::Value::Number(number) => Value::Number(json_number(&number)?),
        serde_yaml::Value::String(text) => Value::String(text),
        serde_yaml::Value::Sequence(items) => Value::Array(items.into_iter().map(to_json).collect::<Result<_, _>>()?),
        serde_yaml::Value::Mapping(mapping) => {
            let mut object = Map::with_capacity(mapping.len());
            for (key, value) in mapping {
                object.insert(json_key(key)?, to_json(value)?);
            }
            Value::Object(object)
        }
        serde_yaml::Value::Tagged(tagged) => {
            return Err(YamlError::UnsupportedTag { line: 0, column: 0, tag: tagged.tag.to_string() })
        }
    })
}

fn json_number(number: &serde_yaml::Number) -> Result<Number, YamlError> {
    if let Some(integer) = number.as_u64() {
        return Ok(Number::from(integer));
    }
    if let Some(integer) = number.as_i64() {
        return Ok(Number::from(integer));
    }
    number
        .as_f64()
        .and_then(Number::from_f64)
        .ok_or_else(|| YamlError::NotJson(format!("the number {number} has no JSON representation")))
}

/// Scalar keys become strings, as JavaScript object keys do.
fn json_key(key: serde_yaml::Value) -> Result<String, YamlError> {
    match key {
        serde_yaml::Value::String(text) => Ok(text),
        serde_yaml::Value::Number(number) => Ok(number.to_string()),
        serde_yaml::Value::Bool(flag) => Ok(flag.to_string()),
        serde_yaml::Value::Null => Ok("null".to_owned()),
        other => Err(YamlError::NotJson(format!("mapping keys must be scalars, got {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_underlying_parser_alone_would_turn_a_js_tag_into_a_plain_string() {
        // Why this module scans tags itself: serde_yaml drops `!!js` and keeps the expression text.
        let value: serde_yaml::Value = serde_yaml::from_str("key: !!js process.env.KEY").unwrap();
        assert_eq!(value["key"], serde_yaml::Value::String("process.env.KEY".into()));
    }

    #[test]
    fn a_js_tag_is_refused_with_its_position_and_what_to_use_instead() {
        let err = parse("- id: llm\n  config:\n    apiKey: !!js process.env.KEY\n").unwrap_err();
        assert_eq!(err, YamlError::JsTag { line: 3, column: 13 });
        assert!(err.to_string().contains("apiKeyEnv: NAME"), "{err}");
    }

    #[test]
    fn a_js_tag_in_verbatim_form_or_on_a_collection_is_refused() {
        assert!(matches!(parse("- !<tag:yaml.org,2002:js> x\n"), Err(YamlError::JsTag { .. })));
        assert!(matches!(parse("- !!js [1]\n"), Err(YamlError::JsTag { .. })));
    }

    #[test]
    fn js_inside_a_quoted_string_or_comment_is_just_text() {
        assert_eq!(parse("- \"!!js not a tag\" # !!js\n").unwrap(), Some(json!(["!!js not a tag"])));
    }

    #[test]
    fn core_tags_are_accepted_and_other_tags_refused() {
        assert_eq!(parse("- !!str 5\n").unwrap(), Some(json!(["5"])));
        assert!(matches!(parse("- !custom x\n"), Err(YamlError::UnsupportedTag { ref tag, .. }) if tag == "!custom"));
    }

    #[test]
    fn an_empty_or_comment_only_document_has_no_content() {
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(parse("# nothing here\n\n").unwrap(), None);
        assert_eq!(parse("null\n").unwrap(), Some(Value::Null));
        assert_eq!(parse("[]\n").unwrap(), Some(json!([])));
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        let err = parse("- id: a\n  bad: [unclosed\n").unwrap_err();
        assert!(matches!(&err, YamlError::Syntax(message) if message.contains("line")), "{err}");
    }

    #[test]
    fn key_order_is_kept_and_scalar_keys_become_strings() {
        let value = parse("z: 1\na: 2\n3: x\n").unwrap().unwrap();
        assert_eq!(serde_json::to_string(&value).unwrap(), r#"{"z":1,"a":2,"3":"x"}"#);
    }

    #[test]
    fn infinite_numbers_have_no_json_form() {
        assert!(matches!(parse("- .inf\n"), Err(YamlError::NotJson(_))));
    }

    #[test]
    fn values_round_trip_through_yaml_text() {
        let value = json!([{"id": "a", "config": {"list": [1, 2.5, "x"], "flag": true, "none": null}}]);
        assert_eq!(parse(&to_string(&value)).unwrap(), Some(value));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn json_values() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::from),
                "[a-zA-Z0-9 !#:_-]{0,12}".prop_map(Value::String),
            ];
            leaf.prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    prop::collection::vec(("[a-z]{1,6}", inner), 0..4)
                        .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #[test]
            fn any_json_value_survives_a_yaml_round_trip(value in json_values()) {
                prop_assert_eq!(parse(&to_string(&value)).unwrap(), Some(value));
            }

            #[test]
            fn parsing_arbitrary_text_never_panics(text in "[ -~\\n]{0,80}") {
                let _ = parse(&text);
            }
        }
    }
}
