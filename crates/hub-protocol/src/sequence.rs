//! Counting what stateful reconnect numbers: a writer that keeps sent messages for replay
//! must know how many trackable messages (Invocation, StreamItem, Completion,
//! StreamInvocation, CancelInvocation) a run of already framed messages holds, without
//! decoding them.

use crate::message::is_trackable_type;
use crate::msgpack::{read_varint, Reader};
use crate::{peek, Format, RECORD_SEPARATOR};

/// The number of trackable messages in `frames`, a run of whole framed messages in `format`.
///
/// Messages that cannot be read count as not trackable, and a cut-off rest counts as
/// nothing: the receiving peer, which gets the same bytes, decides what to make of them.
pub fn count_trackable(format: Format, frames: &[u8]) -> u64 {
    let mut count = 0;
    for_each_trackable(format, frames, |_| count += 1);
    count
}

/// Calls `each` with the framed length (framing included) of every trackable message in
/// `frames`, as [`count_trackable`] counts them: what traffic counters call hub messages
/// (pings, closes, acks and sequence messages are the protocol's own).
pub fn for_each_trackable(format: Format, frames: &[u8], mut each: impl FnMut(usize)) {
    match format {
        Format::Json => {
            let mut rest = frames;
            while let Some(end) = rest.iter().position(|&b| b == RECORD_SEPARATOR) {
                if json_type(&rest[..end]).is_some_and(is_trackable_type) {
                    each(end + 1);
                }
                rest = &rest[end + 1..];
            }
        }
        Format::MessagePack => {
            let mut rest = frames;
            while let Ok(Some((len, prefix))) = read_varint(rest) {
                let Some(body) = rest.get(prefix..prefix + len as usize) else {
                    break;
                };
                let mut reader = Reader::new(body);
                let ty = reader.array_len().and_then(|_| reader.int());
                if ty.is_some_and(|ty| i32::try_from(ty).is_ok_and(is_trackable_type)) {
                    each(prefix + len as usize);
                }
                rest = &rest[prefix + len as usize..];
            }
        }
    }
}

/// A JSON message's type. Writers put `type` first (.NET, the JS client, this service), so
/// that is read directly; anything else is looked at properly.
fn json_type(record: &[u8]) -> Option<i32> {
    let record = record.trim_ascii();
    if record.is_empty() {
        return None;
    }
    if let Some(rest) = record.strip_prefix(b"{\"type\":") {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if (1..=3).contains(&digits) && matches!(rest.get(digits), Some(b',' | b'}')) {
            let text = std::str::from_utf8(&rest[..digits]).ok()?;
            return text.parse().ok();
        }
    }
    peek(Format::Json, record)
        .ok()
        .map(|found| i32::from(found.message_type))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{encode_ack, encode_close, encode_invocation, encode_sequence, ping};

    #[test]
    fn counts_only_trackable_messages() {
        for format in [Format::Json, Format::MessagePack] {
            let mut run = Vec::new();
            run.extend_from_slice(&encode_invocation(format, "a", &[1.into()]));
            run.extend_from_slice(&ping(format));
            run.extend_from_slice(&encode_ack(format, 3));
            run.extend_from_slice(&encode_sequence(format, 3));
            run.extend_from_slice(&encode_invocation(format, "b", &[]));
            run.extend_from_slice(&encode_close(format, None, false));
            assert_eq!(count_trackable(format, &run), 2, "{format:?}");
            // A cut-off rest is not counted.
            let cut = &run[..run.len() - 1];
            assert_eq!(count_trackable(format, cut), 2, "{format:?}");
        }
    }

    #[test]
    fn trackable_messages_are_measured_with_their_framing() {
        for format in [Format::Json, Format::MessagePack] {
            let a = encode_invocation(format, "a", &["x".repeat(3000).into()]);
            let b = encode_invocation(format, "b", &[]);
            let run = [
                &a[..],
                &ping(format),
                &b[..],
                &encode_close(format, None, false),
            ]
            .concat();
            let mut lengths = Vec::new();
            for_each_trackable(format, &run, |len| lengths.push(len));
            assert_eq!(lengths, vec![a.len(), b.len()], "{format:?}");
        }
    }

    #[test]
    fn json_with_type_not_first_is_read_properly() {
        let run = b"{\"target\":\"x\",\"arguments\":[],\"type\":1}\x1e{\"type\":6}\x1e";
        assert_eq!(count_trackable(Format::Json, run), 1);
        let streamed = b"{\"type\":2,\"invocationId\":\"1\",\"item\":5}\x1e";
        assert_eq!(count_trackable(Format::Json, streamed), 1);
    }

    #[test]
    fn unreadable_messages_count_as_nothing() {
        assert_eq!(count_trackable(Format::Json, b"{nope\x1e\x1e"), 0);
        assert_eq!(count_trackable(Format::MessagePack, &[0x02, 0xc1, 0xc1]), 0);
        assert_eq!(count_trackable(Format::MessagePack, &[0xff, 0xff]), 0);
    }
}
