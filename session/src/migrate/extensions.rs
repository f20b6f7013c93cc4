//! What format v3 does not know, through v3→v4 as DeepSeek Harness 0.2 carries it: an ignorable
//! event of a type v3's reader did not know stays opaque as `plugin:<type>`, a content block (or
//! a stream's block) of a type v3 did not declare becomes `plugin:<type>`, and the members a
//! tool result's wrapper or message had beyond their own are kept as `plugin:result:<key>` and
//! `plugin:message:<key>`. Before v3 (v2→v3) such a content block is refused instead.

use serde_json::{Map, Value};

/// The content block types v3 declares; any other is an extension's.
const V3_BLOCK_TYPES: [&str; 6] = ["text", "reasoning", "image", "file", "tool-call", "tool-result"];

/// The prefix v4 gives what an extension (a plugin) owns.
const PLUGIN: &str = "plugin:";

/// A v3 event's type in v4: `None` when v3 knows it, `plugin:<type>` for an ignorable one it
/// does not; an unknown event that is not ignorable is refused.
pub fn opaque_type(event_type: &str, ignorable: bool, seq: u64) -> Result<Option<String>, String> {
    if crate::vocabulary::V3_EVENT_TYPES.contains(&event_type) {
        return Ok(None);
    }
    if !ignorable {
        return Err(format!(
            "format v3 contains unknown event type {} at seq {seq}",
            dsh_abi::js::to_string(&event_type)
        ));
    }
    Ok(Some(format!("{PLUGIN}{event_type}")))
}

/// The messages an event's data carries (its content slots with a message's shape).
fn messages<'a>(event_type: &str, data: &'a mut Value) -> Vec<&'a mut Value> {
    match event_type {
        "user/message" => vec![data],
        "developer/message" | "system/message" | "assistant/message" | "tool/result" | "team/message/queued" => {
            data.get_mut("message").into_iter().collect()
        }
        "agent/inbox/spliced" => data.get_mut("inserted").and_then(Value::as_array_mut).into_iter().flatten().collect(),
        "session/title-llm-request" => {
            data.get_mut("messages").and_then(Value::as_array_mut).into_iter().flatten().collect()
        }
        _ => Vec::new(),
    }
}

/// v3→v4's content of one event at v4 seq `seq`: every block type v3 does not declare, in a
/// message, a summary, a dispatch's content or an assistant stream, becomes `plugin:<type>`.
pub fn namespace_content(event_type: &str, data: &mut Value, seq: u64) -> Result<(), String> {
    let subject = format!("format v3 {event_type} at seq {seq}");
    for message in messages(event_type, data) {
        namespace_blocks(message.get_mut("content"), &subject, "content")?;
    }
    let fields: &[&str] = match event_type {
        "compaction/summary" => &["summary", "rawOutput"],
        "tool/ptc-dispatch" => &["content"],
        _ => &[],
    };
    for field in fields {
        if let Some(content) = data.get_mut(*field) {
            namespace_blocks(Some(content), &format!("{subject}.{field}"), "content")?;
        }
    }
    if event_type == "request/header" {
        let tools = data["header"]["tools"].as_array().into_iter().flatten().enumerate();
        if let Some((index, _)) = tools.into_iter().find(|(_, tool)| tool.get("deferLoading").is_some()) {
            return Err(format!("{subject}.header.tools[{index}] contains deferLoading, which is only defined in V4"));
        }
    }
    if matches!(event_type, "assistant/message" | "assistant/attempt") {
        let stream = data.get_mut("stream").and_then(Value::as_array_mut).into_iter().flatten();
        for (index, entry) in stream.enumerate().filter(|(_, entry)| entry["type"] == "chunk") {
            namespace_chunk(entry.get_mut("chunk"), &format!("{subject}.stream[{index}]"))?;
        }
    }
    Ok(())
}

fn namespace_blocks(content: Option<&mut Value>, subject: &str, what: &str) -> Result<(), String> {
    let blocks = content.and_then(Value::as_array_mut).ok_or_else(|| format!("{subject} {what} must be an array"))?;
    for (index, block) in blocks.iter_mut().enumerate() {
        namespace_block(block, &format!("{subject}[{index}]"))?;
    }
    Ok(())
}

fn namespace_block(block: &mut Value, subject: &str) -> Result<(), String> {
    let tag = block.get_mut("type").filter(|tag| tag.is_string());
    let tag = tag.ok_or_else(|| format!("{subject} requires content blocks with string type tags"))?;
    *tag = namespaced(tag.as_str().unwrap_or_default()).into();
    Ok(())
}

fn namespace_chunk(chunk: Option<&mut Value>, subject: &str) -> Result<(), String> {
    let Some(chunk) = chunk.filter(|chunk| chunk.is_object()) else { return Ok(()) };
    match chunk["type"].as_str() {
        Some("block-end") => namespace_block(&mut chunk["block"], &format!("{subject}.block")),
        Some("block-start") => {
            let tag = chunk.get_mut("blockType").filter(|tag| tag.is_string());
            let tag = tag.ok_or_else(|| format!("{subject} blockType must be a string"))?;
            *tag = namespaced(tag.as_str().unwrap_or_default()).into();
            Ok(())
        }
        _ => Ok(()),
    }
}

fn namespaced(tag: &str) -> String {
    match V3_BLOCK_TYPES.contains(&tag) {
        true => tag.to_owned(),
        false => format!("{PLUGIN}{tag}"),
    }
}

/// v2→v3's refusal of a content block whose type v3 does not declare (0.2 cannot tell how to
/// carry it), for an event at v2 seq `seq`.
pub fn refuse_undeclared_blocks(event_type: &str, data: &Value, seq: u64) -> Result<(), String> {
    let label = format!("format v2 {event_type} at seq {seq} data");
    let slots: Vec<(String, &Value)> = match event_type {
        "user/message" | "tool/code-dispatch" => vec![(format!("{label}.content"), &data["content"])],
        "assistant/message" | "tool/result" | "team/message/queued" => {
            vec![(format!("{label}.message.content"), &data["message"]["content"])]
        }
        "agent/inbox/spliced" | "session/title-llm-request" => {
            let field = if event_type == "agent/inbox/spliced" { "inserted" } else { "messages" };
            let messages = data[field].as_array().into_iter().flatten().enumerate();
            messages
                .map(|(index, message)| (format!("{label}.{field}[{index}].content"), &message["content"]))
                .collect()
        }
        "compaction/summary" => {
            let raw = data.get("rawOutput").map(|raw| (format!("{label}.rawOutput"), raw));
            [(format!("{label}.summary"), &data["summary"])].into_iter().chain(raw).collect()
        }
        _ => Vec::new(),
    };
    for (path, content) in slots {
        declared_blocks(content, &path)?;
    }
    let stream = data["stream"].as_array().into_iter().flatten().enumerate();
    for (index, entry) in stream.filter(|(_, entry)| entry["type"] == "chunk") {
        let path = format!("{label}.stream[{index}].chunk");
        match entry["chunk"]["type"].as_str() {
            Some("block-end") => declared_block(&entry["chunk"]["block"], &format!("{path}.block"))?,
            Some("block-start") => declared_kind(&entry["chunk"]["blockType"], &format!("{path}.blockType"))?,
            _ => {}
        }
    }
    Ok(())
}

fn declared_blocks(content: &Value, path: &str) -> Result<(), String> {
    let blocks = content.as_array().ok_or_else(|| format!("{path}: content must be an array"))?;
    for (index, block) in blocks.iter().enumerate() {
        declared_block(block, &format!("{path}[{index}]"))?;
    }
    Ok(())
}

fn declared_block(block: &Value, path: &str) -> Result<(), String> {
    declared_kind(&block["type"], path)?;
    if block["type"] == "tool-result" {
        declared_blocks(&block["content"], &format!("{path}.content"))?;
    }
    Ok(())
}

fn declared_kind(kind: &Value, path: &str) -> Result<(), String> {
    match kind.as_str().is_some_and(|kind| V3_BLOCK_TYPES.contains(&kind)) {
        true => Ok(()),
        false => Err(format!(
            "{path}: cannot safely transform unclassified message content kind {}",
            dsh_abi::js::to_string(kind)
        )),
    }
}

/// The members of `value` beyond `own`, each renamed `plugin:<owner>:<key>` (v3→v4 keeps what a
/// tool result's message or wrapper carried for an extension, owner by owner).
pub fn extension_members(value: &Value, own: &[&str], owner: &str) -> Map<String, Value> {
    let members = value.as_object().into_iter().flatten().filter(|(key, _)| !own.contains(&key.as_str()));
    members.map(|(key, member)| (format!("{PLUGIN}{owner}:{key}"), member.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_block_type_v3_does_not_declare_is_namespaced_in_messages_summaries_and_streams() {
        let mut user = json!({"content": [{"type": "text", "text": "a"}, {"type": "citation", "url": "u"}]});
        namespace_content("user/message", &mut user, 4).unwrap();
        assert_eq!(user["content"], json!([{"type": "text", "text": "a"}, {"type": "plugin:citation", "url": "u"}]));
        let mut summary = json!({"summary": [{"type": "diagram"}], "rawOutput": [{"type": "text", "text": "r"}]});
        namespace_content("compaction/summary", &mut summary, 4).unwrap();
        assert_eq!(
            (&summary["summary"][0]["type"], &summary["rawOutput"][0]["type"]),
            (&json!("plugin:diagram"), &json!("text"))
        );
        let stream = json!([
            {"type": "chunk", "time": 1, "chunk": {"type": "block-start", "index": 0, "blockType": "diagram"}},
            {"type": "chunk", "time": 2, "chunk": {"type": "block-end", "index": 0, "block": {"type": "diagram"}}},
            {"type": "text-chunks", "time0": 3, "index": 1, "dt": [], "texts": ["t"]},
        ]);
        let mut answer = json!({"message": {"content": [{"type": "diagram"}]}, "stream": stream});
        namespace_content("assistant/message", &mut answer, 4).unwrap();
        assert_eq!(answer["message"]["content"][0]["type"], "plugin:diagram");
        assert_eq!(answer["stream"][0]["chunk"]["blockType"], "plugin:diagram");
        assert_eq!(answer["stream"][1]["chunk"]["block"]["type"], "plugin:diagram");
        assert_eq!(answer["stream"][2]["type"], "text-chunks", "records other than chunks stay as they are");
    }

    #[test]
    fn a_block_without_a_string_type_is_refused_naming_its_place() {
        let mut user = json!({"content": [{"type": "text", "text": "a"}, {"text": "no type"}]});
        let refused = namespace_content("user/message", &mut user, 7).unwrap_err();
        assert_eq!(refused, "format v3 user/message at seq 7[1] requires content blocks with string type tags");
        let mut inbox = json!({"inserted": [{"role": "user", "content": "text"}]});
        let refused = namespace_content("agent/inbox/spliced", &mut inbox, 2).unwrap_err();
        assert_eq!(refused, "format v3 agent/inbox/spliced at seq 2 content must be an array");
    }

    #[test]
    fn an_unknown_event_is_kept_opaque_only_when_ignorable() {
        assert_eq!(opaque_type("tool/call", false, 3), Ok(None));
        assert_eq!(opaque_type("acme/audit", true, 3), Ok(Some("plugin:acme/audit".to_owned())));
        let refused = opaque_type("acme/audit", false, 3).unwrap_err();
        assert_eq!(refused, "format v3 contains unknown event type \"acme/audit\" at seq 3");
    }

    #[test]
    fn before_v3_an_undeclared_block_type_is_refused_naming_its_path() {
        let result = json!({"message": {"content": [{"type": "tool-result", "content": [{"type": "chart"}]}]}});
        let refused = refuse_undeclared_blocks("tool/result", &result, 9).unwrap_err();
        assert_eq!(
            refused,
            "format v2 tool/result at seq 9 data.message.content[0].content[0]: cannot safely transform \
             unclassified message content kind \"chart\""
        );
        assert!(refuse_undeclared_blocks("user/message", &json!({"content": [{"type": "image"}]}), 1).is_ok());
    }
}
