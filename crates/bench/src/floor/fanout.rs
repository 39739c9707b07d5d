//! The floor's sockets: each message is written straight to every socket from the sender's
//! task (one `write` per socket per message; a socket that does not take it all gets the rest
//! queued and one task that flushes the queue with vectored writes, then ends). An idle
//! socket holds one reading task and no buffer.

use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use parking_lot::{Mutex, RwLock};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use super::frames::{self, Ask};
use super::Floor;

/// What may wait for one slow socket before it is cut (the service's own default).
const MAX_QUEUED: usize = 1 << 20;

#[derive(Default)]
pub(super) struct Sockets {
    all: RwLock<HashMap<u64, Arc<Socket>>>,
    next: AtomicU64,
}

impl Sockets {
    pub(super) fn send_all(&self, frame: &Bytes) {
        for socket in self.all.read().values() {
            Socket::send(socket, frame);
        }
    }

    fn add(&self, socket: Arc<Socket>) -> u64 {
        let key = self.next.fetch_add(1, Relaxed);
        self.all.write().insert(key, socket);
        key
    }

    fn remove(&self, key: u64) {
        self.all.write().remove(&key);
    }
}

pub(super) struct Socket {
    write: OwnedWriteHalf,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    frames: VecDeque<Bytes>,
    bytes: usize,
    /// A flushing task runs (it owns the writes until the queue is empty).
    flushing: bool,
    broken: bool,
}

impl Socket {
    /// Writes `frame` now if nothing waits before it; queues what the socket does not take.
    fn send(this: &Arc<Socket>, frame: &Bytes) {
        let mut queue = this.queue.lock();
        if queue.broken {
            return;
        }
        if !queue.flushing {
            match this.write.try_write(frame) {
                Ok(n) if n == frame.len() => return,
                Ok(n) => queue.frames.push_back(frame.slice(n..)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    queue.frames.push_back(frame.clone())
                }
                Err(_) => {
                    queue.broken = true;
                    return;
                }
            }
            queue.bytes += queue.frames.back().map_or(0, Bytes::len);
            queue.flushing = true;
            tokio::spawn(flush(this.clone()));
            return;
        }
        queue.bytes += frame.len();
        queue.frames.push_back(frame.clone());
        if queue.bytes > MAX_QUEUED {
            queue.broken = true;
            queue.frames.clear();
        }
    }
}

/// Writes the queue out as the socket takes it, several frames per write, then ends.
async fn flush(socket: Arc<Socket>) {
    loop {
        if socket.write.writable().await.is_err() {
            socket.queue.lock().broken = true;
            return;
        }
        let mut queue = socket.queue.lock();
        loop {
            if queue.broken || queue.frames.is_empty() {
                queue.flushing = false;
                return;
            }
            let slices: Vec<IoSlice<'_>> = queue
                .frames
                .iter()
                .take(64)
                .map(|f| IoSlice::new(f))
                .collect();
            match socket.write.try_write_vectored(&slices) {
                Ok(mut n) => {
                    queue.bytes -= n;
                    while n > 0 {
                        let front = queue.frames.front_mut().expect("written from it");
                        if n >= front.len() {
                            n -= front.len();
                            queue.frames.pop_front();
                        } else {
                            front.advance(n);
                            n = 0;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    queue.broken = true;
                    return;
                }
            }
        }
    }
}

/// One WebSocket from the upgrade to its end: the handshake, then the client's messages.
pub(super) async fn serve_socket(floor: Arc<Floor>, stream: TcpStream, already: Bytes) {
    let (read, write) = stream.into_split();
    let socket = Arc::new(Socket {
        write,
        queue: Mutex::new(Queue::default()),
    });
    let mut buffer = BytesMut::from(&already[..]);
    // A slice of hyper's read buffer: holding it would keep that whole buffer per socket.
    drop(already);
    let mut message = BytesMut::new();
    let mut key = None;
    'reading: loop {
        loop {
            let frame = match frames::next_frame(&mut buffer) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(()) => break 'reading,
            };
            match frame.opcode {
                0..=2 => message.extend_from_slice(&frame.payload),
                8 => {
                    Socket::send(&socket, &frames::control(8, &frame.payload));
                    break 'reading;
                }
                9 => Socket::send(&socket, &frames::control(10, &frame.payload)),
                _ => {}
            }
            if !frame.fin || !matches!(frame.opcode, 0..=2) {
                continue;
            }
            for record in message[..].split(|&b| b == 0x1e).filter(|r| !r.is_empty()) {
                if key.is_none() {
                    // The handshake request: the floor speaks JSON and answers `{}`.
                    Socket::send(&socket, &frames::text(&[b"{}\x1e"]));
                    key = Some(floor.sockets.add(socket.clone()));
                    continue;
                }
                match frames::ask(record) {
                    Ask::Echo(arguments) => Socket::send(&socket, &frames::measure(arguments)),
                    Ask::Broadcast(arguments) => {
                        floor.sockets.send_all(&frames::measure(arguments))
                    }
                    Ask::Nothing => {}
                    Ask::Close => break 'reading,
                }
            }
            message.clear();
        }
        if read.readable().await.is_err() {
            break;
        }
        match read_some(&read, &mut buffer) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
        if socket.queue.lock().broken {
            break;
        }
    }
    if let Some(key) = key {
        floor.sockets.remove(key);
    }
}

/// Reads what is there into `buffer` through a stack buffer, so an idle socket holds none.
fn read_some(read: &OwnedReadHalf, buffer: &mut BytesMut) -> io::Result<usize> {
    let mut chunk = [0u8; 16 * 1024];
    let n = read.try_read(&mut chunk)?;
    buffer.extend_from_slice(&chunk[..n]);
    Ok(n)
}
