//! The bytes the floor reads and writes: WebSocket frames (RFC 6455) and the splices that
//! turn the generator's messages into the `Measure` invocation Switchyard would send. Hand
//! written on purpose: the floor measures the machine, so it does the least a server can.

use bytes::{Buf, Bytes, BytesMut};

/// A server-to-client text frame (unmasked, final) holding `parts` back to back.
pub(super) fn text(parts: &[&[u8]]) -> Bytes {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut frame = BytesMut::with_capacity(len + 10);
    frame.extend_from_slice(&[0x81]);
    match len {
        0..=125 => frame.extend_from_slice(&[len as u8]),
        126..=65535 => {
            frame.extend_from_slice(&[126]);
            frame.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            frame.extend_from_slice(&[127]);
            frame.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    for part in parts {
        frame.extend_from_slice(part);
    }
    frame.freeze()
}

/// A control frame (pong, close) with `payload`.
pub(super) fn control(opcode: u8, payload: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(payload.len() + 2);
    frame.extend_from_slice(&[0x80 | opcode, payload.len().min(125) as u8]);
    frame.extend_from_slice(&payload[..payload.len().min(125)]);
    frame.freeze()
}

/// One client frame: opcode, whether it is the last of its message, the unmasked payload.
pub(super) struct Frame {
    pub opcode: u8,
    pub fin: bool,
    pub payload: BytesMut,
}

/// Takes the first whole frame off `buffer`; `None` until one has arrived. Err: a frame the
/// floor will not take (unmasked, or over 1 MiB): the socket is closed.
pub(super) fn next_frame(buffer: &mut BytesMut) -> Result<Option<Frame>, ()> {
    if buffer.len() < 2 {
        return Ok(None);
    }
    let (first, second) = (buffer[0], buffer[1]);
    if second & 0x80 == 0 {
        return Err(());
    }
    let (len, header) = match second & 0x7f {
        126 if buffer.len() >= 4 => (u16::from_be_bytes([buffer[2], buffer[3]]) as usize, 4),
        127 if buffer.len() >= 10 => {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&buffer[2..10]);
            (u64::from_be_bytes(bytes) as usize, 10)
        }
        126 | 127 => return Ok(None),
        short => (short as usize, 2),
    };
    if len > 1 << 20 {
        return Err(());
    }
    if buffer.len() < header + 4 + len {
        return Ok(None);
    }
    let mut mask = [0u8; 4];
    mask.copy_from_slice(&buffer[header..header + 4]);
    buffer.advance(header + 4);
    let mut payload = buffer.split_to(len);
    for (i, byte) in payload.iter_mut().enumerate() {
        *byte ^= mask[i & 3];
    }
    Ok(Some(Frame {
        opcode: first & 0x0f,
        fin: first & 0x80 != 0,
        payload,
    }))
}

const MEASURE_HEAD: &[u8] = b"{\"type\":1,\"target\":\"Measure\",\"arguments\":";
const RS: &[u8] = b"\x1e";

/// A REST send body `{"target":"Measure","arguments":[…]}` as the invocation frame clients
/// get: `{"type":1,` in front of the body's inside, the record separator behind.
pub(super) fn measure_from_rest(body: &[u8]) -> Option<Bytes> {
    let inside = body.strip_prefix(b"{")?;
    Some(text(&[b"{\"type\":1,", inside, RS]))
}

/// What a client's hub message asks of the floor.
pub(super) enum Ask<'a> {
    /// `Echo`: `Measure` with these arguments (the bytes from `[` to the message's end) to
    /// the caller.
    Echo(&'a [u8]),
    /// `Broadcast`: the same to everyone.
    Broadcast(&'a [u8]),
    /// Pings, and what the floor does not serve.
    Nothing,
    /// A Close message.
    Close,
}

/// Reads a hub message by position, as the generator writes them (`type`, then `target`,
/// then `arguments` last): no JSON parser.
pub(super) fn ask(message: &[u8]) -> Ask<'_> {
    if message.starts_with(b"{\"type\":7") {
        return Ask::Close;
    }
    let target = |name: &[u8]| find(message, name).is_some();
    let Some(at) = find(message, b"\"arguments\":") else {
        return Ask::Nothing;
    };
    let arguments = &message[at + b"\"arguments\":".len()..];
    if target(b"\"target\":\"Echo\"") {
        Ask::Echo(arguments)
    } else if target(b"\"target\":\"Broadcast\"") {
        Ask::Broadcast(arguments)
    } else {
        Ask::Nothing
    }
}

/// The `Measure` frame for `arguments` (`[…]}` as it came).
pub(super) fn measure(arguments: &[u8]) -> Bytes {
    text(&[MEASURE_HEAD, arguments, RS])
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [1, 2, 3, 4];
        let mut frame = vec![0x80 | opcode];
        if payload.len() < 126 {
            frame.push(0x80 | payload.len() as u8);
        } else {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        }
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i & 3]));
        frame
    }

    #[test]
    fn client_frames_are_read_whole_and_split_anywhere() {
        let long = vec![b'x'; 2048];
        let mut wire = masked(1, b"{\"type\":6}\x1e");
        wire.extend(masked(1, &long));
        for split in 0..wire.len() {
            let mut buffer = BytesMut::from(&wire[..split]);
            let mut got = Vec::new();
            while let Some(frame) = next_frame(&mut buffer).unwrap() {
                got.push(frame.payload.to_vec());
            }
            buffer.extend_from_slice(&wire[split..]);
            while let Some(frame) = next_frame(&mut buffer).unwrap() {
                got.push(frame.payload.to_vec());
            }
            assert_eq!(
                got,
                vec![b"{\"type\":6}\x1e".to_vec(), long.clone()],
                "split {split}"
            );
        }
        assert!(next_frame(&mut BytesMut::from(&[0x81u8, 0x05, 0, 0, 0, 0, 0][..])).is_err());
    }

    #[test]
    fn measures_are_the_invocations_switchyard_sends() {
        let expected = b"{\"type\":1,\"target\":\"Measure\",\"arguments\":[1.5,\"a.1.0.xx\"]}\x1e";
        let rest = measure_from_rest(b"{\"target\":\"Measure\",\"arguments\":[1.5,\"a.1.0.xx\"]}")
            .unwrap();
        assert_eq!(&rest[2..], expected);
        assert_eq!(rest[..2], [0x81, expected.len() as u8]);
        let echo = b"{\"type\":1,\"target\":\"Echo\",\"arguments\":[1.5,\"a.1.0.xx\"]}";
        let Ask::Echo(arguments) = ask(echo) else {
            panic!("an echo")
        };
        assert_eq!(&measure(arguments)[2..], expected);
        assert!(matches!(
            ask(b"{\"type\":1,\"target\":\"Broadcast\",\"arguments\":[1]}"),
            Ask::Broadcast(b"[1]}")
        ));
        assert!(matches!(ask(b"{\"type\":6}"), Ask::Nothing));
        assert!(matches!(ask(b"{\"type\":7}"), Ask::Close));
        let long = text(&[&[b'x'; 300]]);
        assert_eq!(long[..4], [0x81, 126, 1, 44]);
    }
}
