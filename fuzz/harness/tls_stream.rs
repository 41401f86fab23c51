//! The TLS-wrapped NVMe/TCP path of the controller: what a host sends before and after
//! the TLS 1.3 handshake, through the same `accept` and [`Socket`] the target's TLS
//! ports use, into the controller's PDU framer.
//!
//! Input: one control byte, then the bytes. `ctl & 3`:
//! - 0: the bytes are all a host sends on a new connection to a TLS port (a mangled
//!   ClientHello, records, garbage), then it half-closes: the handshake fails (nobody
//!   but the key's holder can finish it) within its deadline, without a panic;
//! - 1: the bytes are NVMe/TCP traffic that a host with the right key sends inside an
//!   established TLS session, in writes of `(ctl >> 2) * 97 + 1` bytes: the controller
//!   decrypts exactly those bytes and its framer consumes them as from a plain socket;
//! - 2, 3: after a real handshake (SHA-256 key for 2, SHA-384 for 3) the bytes arrive
//!   raw, outside the TLS records: reading fails or ends, without a panic.

use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use nvmf_common::tls::{self, ConfiguredPsk, PskLookup, Socket};
use nvmf_common::transport::tcp::{Connection, ControllerConfig, Event};

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001";
const SUB: &str = "nqn.2024-01.io.nvmf-rs:tls";
/// nvme-cli's keys (common/tests/fixtures/tls-psk-nvme-cli-2.13.txt).
const KEY_SHA256: &str = "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
const KEY_SHA384: &str =
    "NVMeTLSkey-1:02:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:";
const HANDSHAKE_LIMIT: Duration = Duration::from_millis(500);
const READ_LIMIT: Duration = Duration::from_secs(5);

struct Keys(&'static str);

impl PskLookup for Keys {
    fn configured_psk(&self, hostnqn: &str) -> Option<ConfiguredPsk> {
        (hostnqn == HOST).then(|| self.0.parse().ok()).flatten()
    }
}

fn pair() -> (TcpStream, TcpStream) {
    static LISTENER: OnceLock<TcpListener> = OnceLock::new();
    let l = LISTENER.get_or_init(|| {
        TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("listener: {e}"))
    });
    let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let c = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect: {e}"));
    let (s, _) = l.accept().unwrap_or_else(|e| panic!("accept: {e}"));
    (c, s)
}

/// A host and a controller with TLS established under `key`.
fn session(key: &'static str) -> (Socket, Socket) {
    let (c, s) = pair();
    let lookup: Arc<dyn PskLookup> = Arc::new(Keys(key));
    let ctrl = std::thread::spawn(move || tls::accept(s, lookup, READ_LIMIT));
    let k: ConfiguredPsk = key.parse().unwrap_or_else(|e| panic!("{e}"));
    let host = tls::connect(c, tls::host_keys(&k, HOST, SUB), READ_LIMIT)
        .unwrap_or_else(|e| panic!("host handshake: {e}"));
    let (ctrl, _) = ctrl
        .join()
        .unwrap_or_else(|_| panic!("controller thread"))
        .unwrap_or_else(|e| panic!("controller handshake: {e}"));
    let (h, c) = (Socket::from(host), Socket::from(ctrl));
    for s in [&h, &c] {
        s.set_nonblocking(false).unwrap_or_else(|e| panic!("{e}"));
        s.tcp()
            .set_read_timeout(Some(READ_LIMIT))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    (h, c)
}

pub fn run(input: &[u8]) {
    let Some((&ctl, bytes)) = input.split_first() else {
        return;
    };
    match ctl & 3 {
        0 => handshake(bytes),
        1 => records(bytes, usize::from(ctl >> 2) * 97 + 1),
        2 => raw_after_handshake(KEY_SHA256, bytes),
        _ => raw_after_handshake(KEY_SHA384, bytes),
    }
}

fn handshake(bytes: &[u8]) {
    let (mut c, s) = pair();
    let _ = c.write_all(bytes);
    let _ = c.shutdown(Shutdown::Write);
    let start = Instant::now();
    let r = tls::accept(s, Arc::new(Keys(KEY_SHA256)), HANDSHAKE_LIMIT);
    assert!(r.is_err(), "a handshake from fuzz bytes succeeded");
    assert!(
        start.elapsed() < HANDSHAKE_LIMIT + Duration::from_secs(2),
        "the handshake overran its deadline"
    );
}

/// Feeds `bytes`, decrypted, to a controller framer (which may end the stream early).
fn records(bytes: &[u8], chunk: usize) {
    static SESSION: OnceLock<Mutex<(Socket, Socket)>> = OnceLock::new();
    let m = SESSION.get_or_init(|| Mutex::new(session(KEY_SHA256)));
    let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
    let (host, ctrl) = &mut *g;
    let now = Instant::now();
    let mut conn =
        Connection::controller(ControllerConfig::default(), Duration::from_secs(30), now)
            .unwrap_or_else(|e| panic!("{e}"));
    let mut got = vec![0u8; bytes.len()];
    let mut filled = 0;
    let mut ended = false;
    for piece in bytes.chunks(chunk) {
        host.write_all(piece)
            .unwrap_or_else(|e| panic!("host write: {e}"));
        let want = filled + piece.len();
        while filled < want {
            let n = ctrl
                .read(&mut got[filled..want])
                .unwrap_or_else(|e| panic!("controller read: {e}"));
            assert!(n > 0, "the session ended");
            let mut fresh = &got[filled..filled + n];
            filled += n;
            while !fresh.is_empty() && !ended {
                let (used, out) = conn.read(fresh, |ev| match ev {
                    Event::PeerTerminated { .. } | Event::Failed { .. } => Err(()),
                    _ => Ok(()),
                });
                assert!(used <= fresh.len(), "consumed more than given");
                fresh = &fresh[used..];
                if matches!(out, Some(Err(()))) {
                    ended = true;
                }
                if used == 0 && out.is_none() {
                    break;
                }
            }
        }
    }
    assert_eq!(
        &got[..filled],
        bytes,
        "the controller decrypted other bytes"
    );
    assert!(!ctrl.buffered(), "decrypted bytes left over");
}

fn raw_after_handshake(key: &'static str, bytes: &[u8]) {
    let (host, mut ctrl) = session(key);
    let mut raw = host.tcp().try_clone().unwrap_or_else(|e| panic!("{e}"));
    let _ = raw.write_all(bytes);
    let _ = raw.shutdown(Shutdown::Write);
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + READ_LIMIT;
    // Fuzz bytes cannot carry a valid record tag: nothing is decrypted, the read fails
    // or sees the end.
    if let Ok(n) = ctrl.read(&mut buf) {
        assert_eq!(n, 0, "{n} bytes decrypted from unauthenticated input");
    }
    assert!(Instant::now() <= deadline + Duration::from_secs(1));
}
