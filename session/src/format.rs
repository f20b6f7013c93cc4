//! The session log formats dsh knows, told apart by the header's `version`: version 0, what
//! DeepSeek Harness 0.1 (rc.8) and dsh have written, and version 4, what DeepSeek Harness 0.2
//! writes. A log's format decides its file name, its vocabulary and the rules its events are
//! checked against; a version dsh does not know is refused naming it, never guessed.

use std::fmt;

/// A session log format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// DeepSeek Harness 0.1's: streamed chunks as events of their own, the system prompt in
    /// `request/header`, tool results wrapped in a user message.
    V0,
    /// DeepSeek Harness 0.2's: streams embedded in the messages and attempts they made, system
    /// and tool messages as surface events with a `surfaceOp`, relationships checked on read.
    V4,
}

/// The format new sessions are written in unless `sessions.toml` says `format = "v0"`: what
/// today's DeepSeek Harness writes.
pub const WRITTEN_BY_DEFAULT: Format = Format::V4;

/// A header naming a version dsh cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnknownFormat {
    #[error(
        "it uses session format v{version}, newer than dsh knows (it reads v0 and v4): the log was written by a newer \
         harness; upgrade dsh to open it"
    )]
    Newer { version: String },
    #[error(
        "it uses session format v{version}, a generation between v0 and v4 that dsh has no reader for; open it once with \
         DeepSeek Harness 0.2, which upgrades it to v4"
    )]
    Between { version: String },
    #[error("its header's version is {shown}, not a session format version")]
    NotAVersion { shown: String },
}

impl Format {
    /// The number a header names.
    pub fn version(self) -> u32 {
        match self {
            Format::V0 => 0,
            Format::V4 => 4,
        }
    }

    /// The format of a header line; a header without a `version` is read as version 0, which
    /// the header rules then refuse.
    pub fn of_header(header: &str) -> Result<Format, UnknownFormat> {
        let value: serde_json::Value = serde_json::from_str(header).unwrap_or_default();
        match value.get("version") {
            None => Ok(Format::V0),
            Some(version) => Format::of_version(version),
        }
    }

    fn of_version(version: &serde_json::Value) -> Result<Format, UnknownFormat> {
        let shown = || dsh_abi::js::to_string(version);
        let number = version.as_f64().filter(|number| dsh_abi::js::is_safe_integer(*number) && *number >= 0.0);
        match number {
            Some(0.0) => Ok(Format::V0),
            Some(4.0) => Ok(Format::V4),
            Some(number) if number < 4.0 => Err(UnknownFormat::Between { version: dsh_abi::js::number(number) }),
            Some(number) => Err(UnknownFormat::Newer { version: dsh_abi::js::number(number) }),
            None if version.is_number() => Err(UnknownFormat::NotAVersion { shown: shown() }),
            None => Ok(Format::V0),
        }
    }

    /// The log's file name in a session folder (`session.jsonl`, `session.v4.jsonl`), the
    /// generation in the name as DeepSeek Harness names it.
    pub fn log_file(self) -> &'static str {
        match self {
            Format::V0 => "session.jsonl",
            Format::V4 => "session.v4.jsonl",
        }
    }

    /// The compressed log's file name (`session.jsonl.zstd`, `session.v4.jsonl.zstd`).
    pub fn compressed_log_file(self) -> &'static str {
        match self {
            Format::V0 => "session.jsonl.zstd",
            Format::V4 => "session.v4.jsonl.zstd",
        }
    }

    /// The header line of a new session in this format (`cwd` left out when unknown).
    pub fn new_header(self, id: &str, created_at: u64, cwd: Option<&str>) -> serde_json::Value {
        let mut header =
            serde_json::json!({"type": "session", "version": self.version(), "id": id, "createdAt": created_at});
        let fields = header.as_object_mut().expect("an object");
        match self {
            Format::V0 => {
                fields.insert("cwd".into(), cwd.unwrap_or_default().into());
            }
            Format::V4 => {
                if let Some(cwd) = cwd {
                    fields.insert("cwd".into(), cwd.into());
                }
                fields.insert("isSeeded".into(), false.into());
            }
        }
        fields.insert("delegationDepth".into(), 0.into());
        header
    }

    /// The harness that writes this format, for messages.
    pub fn writer(self) -> &'static str {
        match self {
            Format::V0 => "DeepSeek Harness 0.1",
            Format::V4 => "DeepSeek Harness 0.2",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.version())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(version: &str) -> String {
        format!(r#"{{"type":"session","version":{version},"id":"s","createdAt":1,"delegationDepth":0}}"#)
    }

    #[test]
    fn versions_zero_and_four_are_read_and_every_other_is_refused_naming_it() {
        assert_eq!(Format::of_header(&header("0")), Ok(Format::V0));
        assert_eq!(Format::of_header(&header("4")), Ok(Format::V4));
        assert_eq!(Format::of_header(&header("5")), Err(UnknownFormat::Newer { version: "5".into() }));
        assert_eq!(Format::of_header(&header("2")), Err(UnknownFormat::Between { version: "2".into() }));
        assert_eq!(Format::of_header(&header("4.5")), Err(UnknownFormat::NotAVersion { shown: "4.5".into() }));
        let newer = Format::of_header(&header("5")).unwrap_err().to_string();
        assert!(newer.contains("v5, newer than dsh knows"), "{newer}");
    }

    #[test]
    fn a_header_without_a_numeric_version_is_left_to_the_header_rules() {
        assert_eq!(Format::of_header(r#"{"type":"session"}"#), Ok(Format::V0));
        assert_eq!(Format::of_header(&header("\"4\"")), Ok(Format::V0));
    }
}
