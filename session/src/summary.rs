//! What `dsh session list` says of each session: its turns, how the last one ended, damage, and
//! the process writing it now — read from the logs under a sessions folder.

use dsh_abi::events;

use super::import::ImportError;
use super::reader::Damage;
use super::store::{LogRef, SessionStore};
use super::usage::Tokens;

/// One session, as its log says.
pub struct Summary {
    pub id: String,
    /// `createdAt` as the header writes it (`--json` passes it on unchanged).
    pub created_at: serde_json::Value,
    pub turns: u64,
    /// `open`, `completed`, `error CODE`, `aborted/KIND`, or `-` (no turn).
    pub last_end: String,
    /// The first line that is not an event (never the last line a live writer is writing).
    pub damage: Option<Damage>,
    /// The process writing the log now, if one is.
    pub writer: Option<u32>,
    /// The profile the session was created with (beside the log; `None` for an imported log).
    pub profile: Option<String>,
    /// The text of the first user message, whole.
    pub first_prompt: Option<String>,
    /// The time of its last event, else when it was created, in epoch milliseconds.
    pub last_used_ms: f64,
    /// The tokens of its answers, where their provider reported them.
    pub tokens: Tokens,
}

impl Summary {
    /// The summary as `session list --json` prints it (and the web API answers it).
    pub fn json(&self) -> serde_json::Value {
        let damage = self.damage.as_ref().map(|damage| {
            let (kind, at) = match damage {
                Damage::Torn { at, .. } => ("torn", at),
                Damage::Corrupt { at, .. } => ("corrupt", at),
            };
            serde_json::json!({"kind": kind, "line": at.line, "byte": at.offset})
        });
        serde_json::json!({
            "id": self.id,
            "createdAt": self.created_at,
            "turns": self.turns,
            "lastEnd": self.last_end,
            "damage": damage,
            "writer": self.writer,
            "profile": self.profile,
            "firstPrompt": self.first_prompt,
            "tokens": self.tokens.json(),
        })
    }
}

impl Summary {
    /// When the session was created, in epoch milliseconds (0 when the header does not say).
    pub fn created_ms(&self) -> f64 {
        self.created_at.as_f64().unwrap_or(0.0)
    }
}

/// The sessions in `store`, newest first, each with its log; a log that cannot be read goes to
/// `unreadable` and the others are still listed.
pub fn newest_first(
    store: &SessionStore,
    mut unreadable: impl FnMut(&LogRef, anyhow::Error),
) -> Result<Vec<(Summary, LogRef)>, anyhow::Error> {
    if let Some(sessions) = store.files_folder() {
        if sessions.exists() && !sessions.is_dir() {
            return Err(ImportError::SessionsNotAFolder(sessions.to_owned()).into());
        }
    }
    let mut summaries = Vec::new();
    for log in store.logs()? {
        match summarize(&log) {
            Ok(summary) => summaries.push((summary, log)),
            Err(err) => unreadable(&log, err),
        }
    }
    summaries.sort_by(|(a, _), (b, _)| b.created_ms().total_cmp(&a.created_ms()).then_with(|| a.id.cmp(&b.id)));
    Ok(summaries)
}

/// The summary of the log `log`.
pub fn summarize(log: &LogRef) -> anyhow::Result<Summary> {
    let mut reader = log.reader()?;
    let header: serde_json::Value = serde_json::from_str(reader.header())?;
    let mut summary = Summary {
        id: header.get("id").and_then(|id| id.as_str()).unwrap_or("?").to_owned(),
        created_at: header.get("createdAt").cloned().unwrap_or_default(),
        turns: 0,
        last_end: "-".to_owned(),
        damage: None,
        writer: log.writer(),
        profile: log.meta()?.profile,
        first_prompt: None,
        last_used_ms: 0.0,
        tokens: Tokens::default(),
    };
    while let Some(next) = reader.next_event() {
        let event = match next? {
            Ok(event) => event,
            Err(damage) => {
                summary.damage.get_or_insert(damage);
                continue;
            }
        };
        summary.last_used_ms = summary.last_used_ms.max(event.time.unwrap_or(0.0));
        match event.event_type {
            events::TURN_START => {
                summary.turns += 1;
                summary.last_end = "open".to_owned();
            }
            events::ASSISTANT_MESSAGE => summary.tokens.add_message_data(event.data),
            events::USER_MESSAGE if summary.first_prompt.is_none() => {
                summary.first_prompt = user_text(event.data);
            }
            events::TURN_END => {
                let data: serde_json::Value = serde_json::from_str(event.data).unwrap_or_default();
                let reason = &data["reason"];
                summary.last_end = match reason["kind"].as_str().unwrap_or("?") {
                    "error" => format!("error {}", reason["error"]["code"].as_str().unwrap_or("?")),
                    "aborted" => format!("aborted/{}", reason["reason"]["kind"].as_str().unwrap_or("?")),
                    kind => kind.to_owned(),
                };
            }
            _ => {}
        }
    }
    summary.last_used_ms = summary.last_used_ms.max(summary.created_ms());
    if summary.writer.is_some() && matches!(summary.damage, Some(Damage::Torn { .. })) {
        summary.damage = None;
    }
    Ok(summary)
}

/// The text blocks of a `user/message`, joined.
fn user_text(data: &str) -> Option<String> {
    let data: serde_json::Value = serde_json::from_str(data).ok()?;
    let blocks = data["content"].as_array()?;
    let texts: Vec<&str> = blocks.iter().filter_map(|block| block["text"].as_str()).collect();
    (!texts.is_empty()).then(|| texts.join("\n"))
}
