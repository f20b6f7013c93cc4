//! The session log formats dsh knows, told apart by the header's `version`: version 0, what
//! DeepSeek Harness 0.1 (rc.8) and dsh have written, and version 4, what DeepSeek Harness 0.2
//! writes. A log's format decides its file name, its vocabulary and the rules its events are
//! checked against. The generations between them (v1–v3, which 0.2 upgrades on read) are read
//! through the migration to v4 ([`MIGRATED_GENERATIONS`]); a version dsh does not know is refused
//! naming it, never guessed.

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

/// The generations DeepSeek Harness 0.2 migrates along v0→v1→v2→v3→v4 that dsh reads only
/// through that migration, entering it at their own step: their logs read as the v4 log the
/// migration makes, and continuing one publishes that v4 log beside it, as 0.2 does.
pub const MIGRATED_GENERATIONS: std::ops::RangeInclusive<u32> = 1..=3;

/// The newest generation dsh reads.
const NEWEST: u32 = 4;

/// A header naming a version dsh cannot read as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnknownFormat {
    #[error(
        "it uses session format v{version}, newer than dsh knows (it reads v0 to v4): the log was written by a newer \
         harness; upgrade dsh to open it"
    )]
    Newer { version: String },
    #[error("it uses session format v{version}, which is read through its migration to v4")]
    Migrated { version: u32 },
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
    /// the header rules then refuse. A generation of [`MIGRATED_GENERATIONS`] is
    /// [`UnknownFormat::Migrated`].
    pub fn of_header(header: &str) -> Result<Format, UnknownFormat> {
        match generation_of_header(header)? {
            0 => Ok(Format::V0),
            NEWEST => Ok(Format::V4),
            version => Err(UnknownFormat::Migrated { version }),
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

/// The generation a header line names, 0 to 4; a header without a `version` (or with a
/// non-numeric one) is generation 0, which the header rules then refuse.
pub fn generation_of_header(header: &str) -> Result<u32, UnknownFormat> {
    let value: serde_json::Value = serde_json::from_str(header).unwrap_or_default();
    let Some(version) = value.get("version") else { return Ok(0) };
    let number = version.as_f64().filter(|number| dsh_abi::js::is_safe_integer(*number) && *number >= 0.0);
    match number {
        Some(number) if number <= f64::from(NEWEST) => Ok(number as u32),
        Some(number) => Err(UnknownFormat::Newer { version: dsh_abi::js::number(number) }),
        None if version.is_number() => Err(UnknownFormat::NotAVersion { shown: dsh_abi::js::to_string(version) }),
        None => Ok(0),
    }
}

/// The log file of a generation, as 0.2 names it: `session.jsonl` for v0, `session.vN.jsonl`
/// after (plain; `.zstd` appended when compressed).
pub fn generation_log_file(generation: u32) -> String {
    match generation {
        0 => "session.jsonl".to_owned(),
        n => format!("session.v{n}.jsonl"),
    }
}

/// The generations a session folder may hold a log of, newest first: where a folder holds two,
/// as 0.2 leaves one it migrated, the newest is the session's.
pub fn generations_newest_first() -> impl Iterator<Item = u32> {
    (0..=NEWEST).rev()
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
    fn versions_zero_and_four_are_read_as_they_are_one_to_three_through_the_migration_and_newer_refused() {
        assert_eq!(Format::of_header(&header("0")), Ok(Format::V0));
        assert_eq!(Format::of_header(&header("4")), Ok(Format::V4));
        assert_eq!(Format::of_header(&header("5")), Err(UnknownFormat::Newer { version: "5".into() }));
        assert_eq!(Format::of_header(&header("2")), Err(UnknownFormat::Migrated { version: 2 }));
        assert_eq!(generation_of_header(&header("3")), Ok(3));
        assert_eq!(Format::of_header(&header("4.5")), Err(UnknownFormat::NotAVersion { shown: "4.5".into() }));
        let newer = Format::of_header(&header("5")).unwrap_err().to_string();
        assert!(newer.contains("v5, newer than dsh knows"), "{newer}");
    }

    #[test]
    fn a_header_without_a_numeric_version_is_left_to_the_header_rules() {
        assert_eq!(Format::of_header(r#"{"type":"session"}"#), Ok(Format::V0));
        assert_eq!(Format::of_header(&header("\"4\"")), Ok(Format::V0));
    }

    #[test]
    fn each_generation_has_its_file_name_as_0_2_names_it() {
        assert_eq!(generation_log_file(0), Format::V0.log_file());
        assert_eq!(generation_log_file(4), Format::V4.log_file());
        assert_eq!(generation_log_file(2), "session.v2.jsonl");
        assert_eq!(generations_newest_first().collect::<Vec<_>>(), [4, 3, 2, 1, 0]);
    }
}
