//! Reads arbitrary bytes as a session log (with a valid header in front), running every event
//! through the structure rules: no panic, and damage is reported, never skipped.
#![no_main]

use std::io::Cursor;

use dsh_session::reader::LogReader;
use dsh_session::structure::StructureRules;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut log = b"{\"type\":\"session\",\"version\":0,\"id\":\"f\",\"createdAt\":1,\"delegationDepth\":0}\n".to_vec();
    log.extend_from_slice(data);
    let Ok(mut reader) = LogReader::new(Box::new(Cursor::new(log))) else { return };
    let mut rules = StructureRules::default();
    let mut violations = Vec::new();
    while let Some(next) = reader.next_event() {
        if let Ok(Ok(event)) = next {
            rules.check(event.seq, event.time, event.event_type, event.data, true, &mut |rule, message| {
                violations.push((rule, message))
            });
        }
    }
});
