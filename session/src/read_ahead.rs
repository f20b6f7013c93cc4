//! Reading a log on a second thread, so that reading and parsing envelopes overlaps with
//! checking events (`dsh session verify` on long logs).
//!
//! The reading thread copies each event into a batch (one string arena and the ranges of its
//! parts) and hands full batches over a bounded channel, so memory stays at a few batches
//! whatever the size of the log. Events, damage and I/O errors arrive in log order, exactly as
//! [`LogReader::next_event`] gives them.

use std::io;
use std::ops::Range;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use super::reader::{Damage, EventView, LogReader, Position};

/// A batch is handed over when its arena holds this many bytes or events.
const BATCH_BYTES: usize = 256 * 1024;
const BATCH_EVENTS: usize = 2048;
/// Full batches waiting for the checking side.
const BATCHES_IN_FLIGHT: usize = 4;

enum Entry {
    Event {
        event_type: Range<usize>,
        data: Range<usize>,
        line: Range<usize>,
        seq: Option<f64>,
        time: Option<f64>,
        ignorable: bool,
        packed: bool,
        at: Position,
    },
    Damage(Damage),
}

#[derive(Default)]
struct Batch {
    arena: String,
    entries: Vec<Entry>,
}

impl Batch {
    fn copy(&mut self, text: &str) -> Range<usize> {
        let start = self.arena.len();
        self.arena.push_str(text);
        start..self.arena.len()
    }

    fn push(&mut self, next: Result<EventView<'_>, Damage>) {
        let entry = match next {
            Ok(event) => Entry::Event {
                event_type: self.copy(event.event_type),
                data: self.copy(event.data),
                line: self.copy(event.line),
                seq: event.seq,
                time: event.time,
                ignorable: event.ignorable,
                packed: event.packed,
                at: event.at,
            },
            Err(damage) => Entry::Damage(damage),
        };
        self.entries.push(entry);
    }

    fn is_full(&self) -> bool {
        self.arena.len() >= BATCH_BYTES || self.entries.len() >= BATCH_EVENTS
    }
}

/// The events of a log, read ahead on a second thread.
pub struct ReadAhead {
    batches: Receiver<io::Result<Batch>>,
    reading: Option<JoinHandle<()>>,
    current: Batch,
    next: usize,
}

impl ReadAhead {
    /// Starts reading `reader`'s events on a new thread.
    pub fn start(reader: LogReader) -> io::Result<ReadAhead> {
        let (sender, batches) = sync_channel(BATCHES_IN_FLIGHT);
        let reading =
            std::thread::Builder::new().name("dsh-log-reader".into()).spawn(move || read_batches(reader, &sender))?;
        Ok(ReadAhead { batches, reading: Some(reading), current: Batch::default(), next: 0 })
    }

    /// The next event, a damaged line, or `None` at the end of the log.
    pub fn next_event(&mut self) -> Option<io::Result<Result<EventView<'_>, Damage>>> {
        while self.next == self.current.entries.len() {
            match self.batches.recv() {
                Ok(Ok(batch)) => {
                    self.current = batch;
                    self.next = 0;
                }
                Ok(Err(err)) => return Some(Err(err)),
                Err(_) => {
                    self.finish();
                    return None;
                }
            }
        }
        let entry = &self.current.entries[self.next];
        self.next += 1;
        let arena = &self.current.arena;
        Some(Ok(match entry {
            Entry::Event { event_type, data, line, seq, time, ignorable, packed, at } => Ok(EventView {
                event_type: &arena[event_type.clone()],
                seq: *seq,
                time: *time,
                data: &arena[data.clone()],
                ignorable: *ignorable,
                packed: *packed,
                line: &arena[line.clone()],
                at: *at,
            }),
            Entry::Damage(damage) => Err(damage.clone()),
        }))
    }

    /// The channel closed: the reading thread is done, or it panicked, in which case the panic
    /// goes on here rather than passing for the end of the log.
    fn finish(&mut self) {
        if let Some(reading) = self.reading.take() {
            if let Err(panic) = reading.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

fn read_batches(mut reader: LogReader, sender: &SyncSender<io::Result<Batch>>) {
    let mut batch = Batch::default();
    while let Some(next) = reader.next_event() {
        match next {
            Ok(next) => batch.push(next),
            Err(err) => {
                let _ = sender.send(Ok(std::mem::take(&mut batch)));
                let _ = sender.send(Err(err));
                return;
            }
        }
        if batch.is_full() && sender.send(Ok(std::mem::take(&mut batch))).is_err() {
            return;
        }
    }
    let _ = sender.send(Ok(batch));
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Cursor, Read};

    use super::*;

    const HEADER: &str = "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0}\n";

    /// Everything an event or damaged line carries, owned.
    type Seen = Result<(String, Option<f64>, Option<f64>, String, bool, String, Position), Damage>;

    fn own(next: Result<EventView<'_>, Damage>) -> Seen {
        next.map(|event| {
            (
                event.event_type.to_owned(),
                event.seq,
                event.time,
                event.data.to_owned(),
                event.ignorable,
                event.line.to_owned(),
                event.at,
            )
        })
    }

    fn reader(input: impl BufRead + Send + 'static) -> LogReader {
        LogReader::new(Box::new(input)).unwrap()
    }

    fn directly(text: &str) -> Vec<Seen> {
        let mut reader = reader(Cursor::new(text.as_bytes().to_vec()));
        std::iter::from_fn(|| reader.next_event().map(|next| own(next.unwrap()))).collect()
    }

    fn ahead(text: &str) -> Vec<Seen> {
        let mut ahead = ReadAhead::start(reader(Cursor::new(text.as_bytes().to_vec()))).unwrap();
        std::iter::from_fn(|| ahead.next_event().map(|next| own(next.unwrap()))).collect()
    }

    fn chunk(seq: usize) -> String {
        format!(
            "{{\"type\":\"assistant/chunk\",\"seq\":{seq},\"time\":{seq},\"data\":{{\"turn\":1,\"step\":1,\"chunk\":{{\"type\":\"text-delta\",\"index\":0,\"text\":\"part {seq}\"}}}}}}\n"
        )
    }

    #[test]
    fn events_across_many_batches_arrive_in_order_and_unchanged() {
        let mut text = HEADER.to_owned();
        for seq in 0..BATCH_EVENTS * 3 + 7 {
            text.push_str(&chunk(seq));
        }
        let expected = directly(&text);
        assert_eq!(expected.len(), BATCH_EVENTS * 3 + 7);
        assert_eq!(ahead(&text), expected);
    }

    #[test]
    fn damage_packed_rows_and_ignorable_events_arrive_as_read() {
        let text = format!(
            "{HEADER}{}garbage\n\0\0\n{{\"type\":\"text-chunks\",\"seq0\":1,\"time0\":5,\"data\":{{\"turn\":1,\"step\":1,\"index\":0,\"dt\":[1],\"texts\":[\"a\",\"b\"]}}}}\n{{\"type\":\"x/y\",\"seq\":3,\"time\":9,\"ignorable\":true}}\n{{\"type\":\"x\",\"se",
            chunk(0)
        );
        let expected = directly(&text);
        assert_eq!(expected.iter().filter(|seen| seen.is_err()).count(), 3, "{expected:?}");
        assert_eq!(ahead(&text), expected);
    }

    /// Input that fails once `good` bytes have been read.
    struct FailingAfter {
        good: Cursor<Vec<u8>>,
    }

    impl Read for FailingAfter {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.good.read(buf)? {
                0 => Err(io::Error::other("the disk went away")),
                read => Ok(read),
            }
        }
    }

    #[test]
    fn a_read_error_arrives_after_the_events_before_it() {
        let mut text = HEADER.to_owned();
        for seq in 0..BATCH_EVENTS + 1 {
            text.push_str(&chunk(seq));
        }
        let input = BufReader::new(FailingAfter { good: Cursor::new(text.into_bytes()) });
        let mut ahead = ReadAhead::start(reader(input)).unwrap();
        let mut events = 0;
        let failure = loop {
            match ahead.next_event().expect("the error, before the end") {
                Ok(next) => {
                    next.unwrap();
                    events += 1;
                }
                Err(err) => break err,
            }
        };
        assert_eq!(events, BATCH_EVENTS + 1);
        assert_eq!(failure.to_string(), "the disk went away");
    }

    struct PanickingAfter {
        good: Cursor<Vec<u8>>,
    }

    impl Read for PanickingAfter {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.good.read(buf)? {
                0 => panic!("the reading thread broke"),
                read => Ok(read),
            }
        }
    }

    #[test]
    #[should_panic(expected = "the reading thread broke")]
    fn a_panic_on_the_reading_thread_is_not_taken_for_the_end_of_the_log() {
        let text = format!("{HEADER}{}", chunk(0));
        let mut ahead =
            ReadAhead::start(reader(BufReader::new(PanickingAfter { good: Cursor::new(text.into_bytes()) }))).unwrap();
        while ahead.next_event().is_some() {}
    }
}
