//! A fault-injecting TCP proxy for transport tests: it listens on 127.0.0.1 (an
//! OS-chosen port), forwards every accepted connection to an upstream address, and
//! applies a [`Faults`] plan per direction at chosen byte offsets of each connection's
//! stream: delay every chunk, corrupt one byte, stop forwarding (truncate, the
//! connection stays open), or close both ends. It can also record what passed, for
//! seed corpora. Connections are numbered in accept order; a plan can target one.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What to do to one direction of a connection. Offsets count bytes of that
/// direction's stream from the start of the connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// Sleep this long before forwarding each chunk read.
    pub delay: Option<Duration>,
    /// XOR this byte of the stream with 0xFF.
    pub corrupt_at: Option<u64>,
    /// Forward only this many bytes; later bytes are read and dropped.
    pub truncate_at: Option<u64>,
    /// Close both ends once this many bytes have been forwarded.
    pub close_at: Option<u64>,
}

/// The plan of one proxy: faults for host→target and target→host bytes, applied to
/// connection number `only` (0-based accept order) or to every connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub to_target: Faults,
    pub to_host: Faults,
    pub only: Option<usize>,
    /// Keep a copy of both streams of every connection.
    pub record: bool,
}

/// Both streams of one connection, as recorded.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    pub to_target: Vec<u8>,
    pub to_host: Vec<u8>,
}

/// A running proxy; dropping it stops accepting (connections in progress finish).
pub struct Proxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
    recordings: Arc<Mutex<Vec<Arc<Mutex<Recording>>>>>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts a proxy to `upstream` with `plan`.
    pub fn start(upstream: SocketAddr, plan: Plan) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("proxy bind: {e}"));
        let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
        l.set_nonblocking(true).unwrap_or_else(|e| panic!("{e}"));
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let recordings = Arc::new(Mutex::new(Vec::new()));
        let (s, a, r) = (stop.clone(), accepted.clone(), recordings.clone());
        let thread = std::thread::Builder::new()
            .name("test-proxy".into())
            .spawn(move || accept_loop(l, upstream, plan, s, a, r))
            .unwrap_or_else(|e| panic!("{e}"));
        Proxy {
            addr,
            stop,
            accepted,
            recordings,
            thread: Some(thread),
        }
    }

    /// Where hosts connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Acquire)
    }

    /// The recordings so far, in accept order (with `record`).
    pub fn recordings(&self) -> Vec<Recording> {
        let all = self
            .recordings
            .lock()
            .map(|g| g.clone())
            .unwrap_or_default();
        all.iter()
            .filter_map(|r| r.lock().ok().map(|g| g.clone()))
            .collect()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(
    l: TcpListener,
    upstream: SocketAddr,
    plan: Plan,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
    recordings: Arc<Mutex<Vec<Arc<Mutex<Recording>>>>>,
) {
    while !stop.load(Ordering::Acquire) {
        let host = match l.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(_) => continue,
        };
        let n = accepted.fetch_add(1, Ordering::AcqRel);
        let Ok(target) = TcpStream::connect(upstream) else {
            continue;
        };
        let _ = host.set_nonblocking(false);
        let _ = host.set_nodelay(true);
        let _ = target.set_nodelay(true);
        let applies = plan.only.is_none_or(|o| o == n);
        let (up, down) = if applies {
            (plan.to_target.clone(), plan.to_host.clone())
        } else {
            (Faults::default(), Faults::default())
        };
        let rec = Arc::new(Mutex::new(Recording::default()));
        if plan.record {
            if let Ok(mut g) = recordings.lock() {
                g.push(rec.clone());
            }
        }
        let record = plan.record;
        let (Ok(h2), Ok(t2)) = (host.try_clone(), target.try_clone()) else {
            continue;
        };
        let r1 = rec.clone();
        let _ = std::thread::Builder::new()
            .name("proxy-up".into())
            .spawn(move || pump(host, target, up, record.then_some((r1, true))));
        let _ = std::thread::Builder::new()
            .name("proxy-down".into())
            .spawn(move || pump(t2, h2, down, record.then_some((rec, false))));
    }
}

/// Copies `from` to `to` applying `f`; on EOF or error shuts both down.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    f: Faults,
    rec: Option<(Arc<Mutex<Recording>>, bool)>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut at: u64 = 0;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let Some(chunk) = buf.get_mut(..n) else { break };
        if let Some(d) = f.delay {
            std::thread::sleep(d);
        }
        if let Some(c) = f.corrupt_at {
            if c >= at && c < at + n as u64 {
                if let Some(b) = chunk.get_mut((c - at) as usize) {
                    *b ^= 0xFF;
                }
            }
        }
        let mut send = n as u64;
        if let Some(t) = f.truncate_at {
            send = send.min(t.saturating_sub(at));
        }
        let mut close = false;
        if let Some(c) = f.close_at {
            if at + send >= c {
                send = c.saturating_sub(at);
                close = true;
            }
        }
        let out = chunk.get(..send as usize).unwrap_or(&[]);
        if let Some((r, up)) = &rec {
            if let Ok(mut g) = r.lock() {
                if *up {
                    g.to_target.extend_from_slice(out);
                } else {
                    g.to_host.extend_from_slice(out);
                }
            }
        }
        if !out.is_empty() && to.write_all(out).is_err() {
            break;
        }
        at += n as u64;
        if close {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
