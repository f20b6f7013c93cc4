//! Turning one row of a profile on or off (`dsh plugin enable|disable ROW`, and `dsh web`'s
//! plugins page): one marked override entry, `- {id: "ROW", disabled: true}  # dsh plugin
//! disable`, at the end of the profile's own `cordis.patch.yml`, so it applies after every other
//! entry of that layer. The user's text is kept as written — comments included — but for the
//! earlier marked entry of that row, which the new one replaces; an empty flow list (`[]`, as
//! new profiles have) becomes the entry. The edited text must read back as the old entries plus
//! the new one, or nothing is written.

use std::path::Path;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use super::yaml;
use dsh_session::fsutil;

/// The comment that marks an entry this module wrote (and may replace).
const MARK: &str = "# dsh plugin ";

/// Sets row `id` disabled (or enabled) in the layer file at `path`; answers the file's new text.
pub fn set_disabled(path: &Path, id: &str, disabled: bool) -> anyhow::Result<String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
    };
    let edited = edited(&text, id, disabled).with_context(|| format!("cannot edit {}", path.display()))?;
    fsutil::write_atomic(path, edited.as_bytes()).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(edited)
}

/// `text` with row `id`'s marked entry set to `disabled`.
fn edited(text: &str, id: &str, disabled: bool) -> anyhow::Result<String> {
    let before = entries(text)?;
    let entry = entry_line(id, disabled);
    let kept: Vec<&str> = text.lines().filter(|line| !is_marked_entry_of(line, id)).collect();
    let content: Vec<&str> =
        kept.iter().copied().filter(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#')).collect();
    let edited = match content.as_slice() {
        [only] if only.trim() == "[]" => kept
            .iter()
            .map(|line| if line.trim() == "[]" { entry.clone() } else { (*line).to_owned() } + "\n")
            .collect(),
        _ if content.iter().all(|line| !line.trim_start().starts_with('[')) => format!("{}{entry}\n", lines_of(&kept)),
        _ => bail!("its list is written in flow style ([…]); add `{entry}` to it by hand"),
    };
    let mut expected: Vec<Value> = before.into_iter().filter(|value| !is_entry_of(value, id, text)).collect();
    expected.push(json!({"id": id, "disabled": disabled}));
    if entries(&edited)? != expected {
        bail!("the edit would not read back as the entries it had plus `{entry}`; add it by hand");
    }
    Ok(edited)
}

fn lines_of(lines: &[&str]) -> String {
    lines.iter().map(|line| format!("{line}\n")).collect()
}

/// The layer's entries (none for an empty file).
fn entries(text: &str) -> anyhow::Result<Vec<Value>> {
    match yaml::parse(text)? {
        None => Ok(Vec::new()),
        Some(Value::Array(entries)) => Ok(entries),
        Some(_) => bail!("it is not a list of patch entries"),
    }
}

fn entry_line(id: &str, disabled: bool) -> String {
    let verb = if disabled { "disable" } else { "enable" };
    format!("- {{id: {}, disabled: {disabled}}}  {MARK}{verb}", Value::String(id.to_owned()))
}

fn is_marked_entry_of(line: &str, id: &str) -> bool {
    [true, false].iter().any(|disabled| line == entry_line(id, *disabled))
}

/// Whether `value` is the entry a marked line of `text` wrote for row `id`.
fn is_entry_of(value: &Value, id: &str, text: &str) -> bool {
    let marked = text.lines().find(|line| is_marked_entry_of(line, id));
    marked.is_some_and(|line| *value == json!({"id": id, "disabled": line.contains("disabled: true")}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_profile_s_empty_list_becomes_the_entry_and_its_comments_stay() {
        let text = "# Your patch layer\n[]\n";
        assert_eq!(
            edited(text, "llm-retry", true).unwrap(),
            "# Your patch layer\n- {id: \"llm-retry\", disabled: true}  # dsh plugin disable\n"
        );
    }

    #[test]
    fn a_second_toggle_replaces_the_first_and_the_user_s_entries_stay_as_written() {
        let text = "# mine\n- id: relay-retry  # keep this comment\n  config: {schedule: [1]}\n";
        let once = edited(text, "llm-retry", true).unwrap();
        let twice = edited(&once, "llm-retry", false).unwrap();
        assert_eq!(
            twice,
            "# mine\n- id: relay-retry  # keep this comment\n  config: {schedule: [1]}\n\
             - {id: \"llm-retry\", disabled: false}  # dsh plugin enable\n"
        );
    }

    #[test]
    fn a_flow_list_with_entries_or_a_mapping_is_refused_and_an_empty_file_gets_the_entry() {
        assert!(edited("[{id: a}]\n", "b", true).unwrap_err().to_string().contains("flow style"));
        assert!(edited("id: a\n", "b", true).is_err());
        assert_eq!(edited("", "b", true).unwrap(), "- {id: \"b\", disabled: true}  # dsh plugin disable\n");
    }

    #[test]
    fn an_id_yaml_would_read_otherwise_is_quoted() {
        let edited = edited("[]\n", "1.0: x", true).unwrap();
        assert_eq!(entries(&edited).unwrap(), vec![json!({"id": "1.0: x", "disabled": true})]);
    }
}
