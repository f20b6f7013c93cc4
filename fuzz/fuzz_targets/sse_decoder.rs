//! Feeds arbitrary bytes to the SSE decoder, whole and split at a point taken from the input: no
//! panic, and the split never changes what is decoded.
#![no_main]

use dsh_host::llm::sse::SseDecoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, bytes)) = data.split_first() else { return };
    let decode = |pieces: &[&[u8]]| {
        let mut decoder = SseDecoder::with_limit(4096);
        let mut items = Vec::new();
        let mut result = Ok(());
        for piece in pieces {
            result = result.and_then(|()| decoder.feed(piece, &mut items));
        }
        (items, result)
    };
    let at = usize::from(cut) % (bytes.len() + 1);
    let (whole, whole_result) = decode(&[bytes]);
    let (split, split_result) = decode(&[&bytes[..at], &bytes[at..]]);
    if whole_result.is_ok() && split_result.is_ok() {
        assert_eq!(whole, split);
    }
});
