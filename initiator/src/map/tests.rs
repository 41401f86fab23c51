//! The NBD server against a hand-written client, over the loopback transport to an
//! in-process RAM namespace.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use nvmf_common::types::Nqn;
use nvmf_target::config::{Config, TrType};

use super::proto::{self, chunk, client_flags, cmd, cmd_flags, errno, opt, rep, Request};
use super::*;
use crate::controller::{ConnectOptions, Controller};
use crate::loopback::{start_loopback_config, LoopbackTarget};
use engine::MAX_RETRIES;
use nvmf_target::backend::fault::{FaultBackend, FaultControl};
use nvmf_target::backend::spec::{open_backend, NamespaceSpec, OpenOptions};
use nvmf_target::subsystem::Namespace;

const NS_BYTES: u64 = 16 << 20;

struct Server {
    stop: Arc<Stopper>,
    join: Option<JoinHandle<Result<MapStats, Error>>>,
    path: PathBuf,
    _target: LoopbackTarget,
}

impl Server {
    fn start(name: &str, queues: u16) -> Server {
        Self::start_with(name, queues, |_, _| {})
    }

    /// [`Server::start`], with `prepare` run on the target before the host connects.
    fn start_with(name: &str, queues: u16, prepare: impl FnOnce(&LoopbackTarget, &Nqn)) -> Server {
        let mut cfg = Config::single(
            TrType::Loopback,
            None,
            None,
            vec![format!("ram:{NS_BYTES}")],
        )
        .unwrap();
        cfg.transport.max_queue_size = 64;
        let (fabric, target, nqn) = start_loopback_config(&cfg).unwrap();
        prepare(&target, &nqn);
        let mut o = ConnectOptions::new(nqn, Nqn::new("nqn.host.map").unwrap(), [4; 16]);
        o.nr_io_queues = queues;
        o.queue_size = 64;
        o.kato_ms = 0;
        let mut ctrl = Controller::connect(fabric, o).unwrap();
        let mut qs = ctrl.take_io_queues();
        let path =
            std::env::temp_dir().join(format!("nvmf-map-{}-{name}.sock", std::process::id()));
        let opts = MapOptions {
            fast_io_fail: None,
            nsid: Nsid(1),
            export_name: "disk".into(),
            depth: None,
        };
        let listener = Listener::bind(&Listen::Unix(path.clone())).unwrap();
        let stop = Arc::new(Stopper::new().unwrap());
        let stop2 = stop.clone();
        let join = std::thread::spawn(move || {
            let r = serve(&ctrl, &mut qs, &listener, &opts, &stop2);
            drop(qs);
            let _ = ctrl.shutdown();
            r
        });
        Server {
            stop,
            join: Some(join),
            path,
            _target: target,
        }
    }

    fn connect(&self, structured: bool) -> Client {
        Client::connect(&self.path, structured)
    }

    fn stop(mut self) -> MapStats {
        self.stop.trigger();
        let j = self.join.take().unwrap();
        j.join().unwrap().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.trigger();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

struct Client {
    s: UnixStream,
    structured: bool,
    next: u64,
}

/// A decoded reply: handle, error, data (READ).
#[derive(Debug)]
struct Reply {
    handle: u64,
    error: u32,
    data: Vec<u8>,
}

impl Client {
    fn connect(path: &std::path::Path, structured: bool) -> Client {
        let mut s = UnixStream::connect(path).unwrap();
        let mut g = [0u8; proto::SERVER_GREETING_LEN];
        s.read_exact(&mut g).unwrap();
        assert_eq!(g, proto::greeting());
        s.write_all(&client_flags::KNOWN.to_be_bytes()).unwrap();
        let mut c = Client {
            s,
            structured,
            next: 1,
        };
        if structured {
            c.option(opt::STRUCTURED_REPLY, &[]);
            assert_eq!(c.option_reply().1, rep::ACK);
        }
        let mut d = 4u32.to_be_bytes().to_vec();
        d.extend_from_slice(b"disk\x00\x00");
        c.option(opt::GO, &d);
        loop {
            let (_, t, data) = c.option_reply();
            if t == rep::ACK {
                break;
            }
            assert_eq!(t, rep::INFO);
            if data[..2] == [0, 0] {
                assert_eq!(
                    u64::from_be_bytes(data[2..10].try_into().unwrap()),
                    NS_BYTES
                );
                let flags = u16::from_be_bytes(data[10..12].try_into().unwrap());
                let want = proto::tflags::SEND_TRIM
                    | proto::tflags::SEND_WRITE_ZEROES
                    | proto::tflags::SEND_FUA
                    | proto::tflags::CAN_MULTI_CONN;
                assert_eq!(flags & want, want);
            }
        }
        c
    }

    fn option(&mut self, code: u32, data: &[u8]) {
        let mut b = proto::IHAVEOPT.to_be_bytes().to_vec();
        b.extend_from_slice(&code.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        self.s.write_all(&b).unwrap();
    }

    fn option_reply(&mut self) -> (u32, u32, Vec<u8>) {
        let mut h = [0u8; 20];
        self.s.read_exact(&mut h).unwrap();
        assert_eq!(h[..8], proto::REPLY_MAGIC.to_be_bytes());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
        let mut d = vec![0u8; len];
        self.s.read_exact(&mut d).unwrap();
        (
            u32::from_be_bytes(h[8..12].try_into().unwrap()),
            u32::from_be_bytes(h[12..16].try_into().unwrap()),
            d,
        )
    }

    /// Sends a request; returns its handle.
    fn send(&mut self, kind: u16, flags: u16, offset: u64, length: u32, data: &[u8]) -> u64 {
        let handle = self.next;
        self.next += 1;
        let r = Request {
            magic: proto::REQUEST_MAGIC,
            flags,
            kind,
            handle,
            offset,
            length,
        };
        self.s.write_all(&r.encode()).unwrap();
        self.s.write_all(data).unwrap();
        handle
    }

    /// Reads one reply; `read_len` is the length of the READ it answers (simple
    /// replies carry no length).
    fn reply(&mut self, read_len: usize) -> Reply {
        let mut m = [0u8; 4];
        self.s.read_exact(&mut m).unwrap();
        self.reply_after(m, read_len)
    }

    /// The next simple reply to a request without data, or `None` when the server
    /// closed the connection between replies.
    fn reply_or_end(&mut self) -> Option<Reply> {
        let mut m = [0u8; 4];
        // A server that closes with our unread requests still queued resets the
        // connection rather than ending it: both mean it is gone.
        let first = match self.s.read(&mut m) {
            Ok(0) => return None,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
            Err(e) => panic!("reading a reply: {e}"),
        };
        self.s.read_exact(&mut m[first..]).unwrap();
        Some(self.reply_after(m, 0))
    }

    fn reply_after(&mut self, m: [u8; 4], read_len: usize) -> Reply {
        match u32::from_be_bytes(m) {
            proto::SIMPLE_REPLY_MAGIC => {
                let mut h = [0u8; 12];
                self.s.read_exact(&mut h).unwrap();
                let error = u32::from_be_bytes(h[..4].try_into().unwrap());
                let handle = u64::from_be_bytes(h[4..].try_into().unwrap());
                let mut data = vec![0u8; if error == 0 { read_len } else { 0 }];
                self.s.read_exact(&mut data).unwrap();
                Reply {
                    handle,
                    error,
                    data,
                }
            }
            proto::STRUCTURED_REPLY_MAGIC => {
                assert!(self.structured);
                let mut h = [0u8; 16];
                self.s.read_exact(&mut h).unwrap();
                let flags = u16::from_be_bytes(h[..2].try_into().unwrap());
                let kind = u16::from_be_bytes(h[2..4].try_into().unwrap());
                let handle = u64::from_be_bytes(h[4..12].try_into().unwrap());
                let len = u32::from_be_bytes(h[12..16].try_into().unwrap()) as usize;
                assert_eq!(flags, chunk::FLAG_DONE, "one chunk per reply");
                let mut p = vec![0u8; len];
                self.s.read_exact(&mut p).unwrap();
                match kind {
                    chunk::TYPE_OFFSET_DATA => Reply {
                        handle,
                        error: 0,
                        data: p[8..].to_vec(),
                    },
                    chunk::TYPE_ERROR => Reply {
                        handle,
                        error: u32::from_be_bytes(p[..4].try_into().unwrap()),
                        data: Vec::new(),
                    },
                    chunk::TYPE_NONE => Reply {
                        handle,
                        error: 0,
                        data: Vec::new(),
                    },
                    k => panic!("unexpected chunk type {k}"),
                }
            }
            m => panic!("bad reply magic {m:#x}"),
        }
    }

    fn call(&mut self, kind: u16, flags: u16, offset: u64, length: u32, data: &[u8]) -> Reply {
        let h = self.send(kind, flags, offset, length, data);
        let read_len = if kind == cmd::READ {
            length as usize
        } else {
            0
        };
        let r = self.reply(read_len);
        assert_eq!(r.handle, h);
        r
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let r = self.call(cmd::WRITE, 0, offset, data.len() as u32, data);
        assert_eq!(r.error, 0);
    }

    fn read(&mut self, offset: u64, len: u32) -> Vec<u8> {
        let r = self.call(cmd::READ, 0, offset, len, &[]);
        assert_eq!(r.error, 0);
        r.data
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn read_write_flush_trim_zeroes_structured_and_simple() {
    let srv = Server::start("rw", 1);
    for structured in [true, false] {
        let mut c = srv.connect(structured);
        let seed = u8::from(structured);
        // Small, and larger than one 128 KiB command and than the input buffer.
        let small = pattern(4096, seed);
        c.write(8192, &small);
        assert_eq!(c.read(8192, 4096), small);
        let big = pattern(1100 * 1024, seed ^ 0x55);
        c.write(1 << 20, &big);
        assert_eq!(c.read(1 << 20, big.len() as u32), big);
        // FUA write, FLUSH.
        let r = c.call(cmd::WRITE, cmd_flags::FUA, 0, 512, &small[..512]);
        assert_eq!(r.error, 0);
        assert_eq!(c.call(cmd::FLUSH, 0, 0, 0, &[]).error, 0);
        // WRITE_ZEROES (with and without NO_HOLE) reads back zeroes; TRIM succeeds.
        assert_eq!(c.call(cmd::WRITE_ZEROES, 0, 8192, 2048, &[]).error, 0);
        assert_eq!(
            c.call(
                cmd::WRITE_ZEROES,
                cmd_flags::NO_HOLE | cmd_flags::FUA,
                10240,
                2048,
                &[]
            )
            .error,
            0
        );
        assert!(c.read(8192, 4096).iter().all(|&b| b == 0));
        assert_eq!(
            c.call(cmd::TRIM, cmd_flags::FUA, 1 << 20, 65536, &[]).error,
            0
        );
        // A zero-length read succeeds with no data.
        assert!(c.call(cmd::READ, 0, 0, 0, &[]).data.is_empty());
    }
    let st = srv.stop();
    assert_eq!(st.connections, 2);
    assert_eq!(st.errors, 0);
}

#[test]
fn refused_requests_get_errors_and_the_connection_survives() {
    let srv = Server::start("refuse", 1);
    let mut c = srv.connect(true);
    // Unaligned offset and length, past the end, unknown command.
    assert_eq!(c.call(cmd::READ, 0, 100, 512, &[]).error, errno::EINVAL);
    assert_eq!(c.call(cmd::READ, 0, 0, 100, &[]).error, errno::EINVAL);
    assert_eq!(
        c.call(cmd::READ, 0, NS_BYTES, 512, &[]).error,
        errno::EINVAL
    );
    let d = pattern(1024, 1);
    assert_eq!(
        c.call(cmd::WRITE, 0, NS_BYTES - 512, 1024, &d).error,
        errno::ENOSPC
    );
    assert_eq!(c.call(42, 0, 0, 0, &[]).error, errno::EINVAL);
    assert_eq!(
        c.call(cmd::READ, 0, 0, MAX_PAYLOAD + 512, &[]).error,
        errno::EOVERFLOW
    );
    // Still in sync.
    c.write(0, &d);
    assert_eq!(c.read(0, 1024), d);
}

#[test]
fn pipelined_requests_and_multiple_connections() {
    let srv = Server::start("multi", 2);
    let mut a = srv.connect(true);
    let mut b = srv.connect(false);
    // 48 writes in flight on one connection before any reply is read.
    let blocks: Vec<Vec<u8>> = (0..48).map(|i| pattern(4096, i as u8)).collect();
    let mut handles = Vec::new();
    for (i, d) in blocks.iter().enumerate() {
        handles.push(a.send(cmd::WRITE, 0, i as u64 * 4096, 4096, d));
    }
    let mut got: Vec<u64> = (0..48)
        .map(|_| a.reply(0))
        .map(|r| {
            assert_eq!(r.error, 0);
            r.handle
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, handles);
    assert_eq!(a.call(cmd::FLUSH, 0, 0, 0, &[]).error, 0);
    // Another connection (another worker and queue) sees every write.
    for (i, d) in blocks.iter().enumerate() {
        assert_eq!(&b.read(i as u64 * 4096, 4096), d);
    }
}

#[test]
fn disconnect_and_protocol_errors_close_only_that_connection() {
    let srv = Server::start("disc", 1);
    let mut a = srv.connect(true);
    let d = pattern(4096, 9);
    let h = a.send(cmd::WRITE, 0, 0, 4096, &d);
    a.send(cmd::DISC, 0, 0, 0, &[]);
    // The write sent before DISC is answered, then the server closes.
    assert_eq!(a.reply(0).handle, h);
    let mut rest = Vec::new();
    assert_eq!(a.s.read_to_end(&mut rest).unwrap(), 0);

    let mut bad = srv.connect(true);
    bad.s.write_all(&[0xAB; proto::REQUEST_LEN]).unwrap();
    let mut rest = Vec::new();
    assert_eq!(
        bad.s.read_to_end(&mut rest).unwrap(),
        0,
        "closed on bad magic"
    );

    let mut c = srv.connect(true);
    assert_eq!(c.read(0, 4096), d);
}

#[test]
fn stop_drains_in_flight_requests() {
    let srv = Server::start("drain", 1);
    let mut c = srv.connect(true);
    let d = pattern(64 * 1024, 3);
    let n = 32;
    for i in 0..n {
        c.send(cmd::WRITE, cmd_flags::FUA, i * 65536, 65536, &d);
    }
    // Stop once the server is at work on them: every request it took is answered
    // (requests still in the socket when it stops are not read, so how many that is
    // depends on timing; none may be lost).
    assert_eq!(c.reply(0).error, 0);
    srv.stop.trigger();
    let mut answered = 1;
    while let Some(r) = c.reply_or_end() {
        assert_eq!(r.error, 0);
        answered += 1;
    }
    let st = srv.stop();
    assert_eq!(st.requests, answered, "requests taken = requests answered");
    assert!(!std::path::Path::new(
        &std::env::temp_dir().join(format!("nvmf-map-{}-drain.sock", std::process::id()))
    )
    .exists());
}

/// Namespace 1 of `target`'s subsystem `nqn` behind a fault-injecting wrapper of a RAM
/// backend of the same size; returns its control.
fn fault_ns1(target: &LoopbackTarget, nqn: &Nqn) -> Arc<FaultControl> {
    let sub = target.target.subsystem_by_name(nqn.as_str()).unwrap();
    let ram = open_backend(
        &NamespaceSpec::Ram { size: NS_BYTES },
        &OpenOptions::default(),
    );
    let (b, ctl) = FaultBackend::wrap(ram.unwrap());
    sub.remove_namespace(Nsid(1));
    sub.add_namespace(Namespace::new(Nsid(1), b, [0x42; 16], [0x43; 16]))
        .unwrap();
    ctl
}

#[test]
fn a_status_without_dnr_is_retried_as_linux_does_then_fails() {
    let ctl = std::sync::Mutex::new(None);
    let srv = Server::start_with("retry", 1, |t, nqn| {
        *ctl.lock().unwrap() = Some(fault_ns1(t, nqn));
    });
    let ctl = ctl.lock().unwrap().take().unwrap();
    let mut c = srv.connect(true);
    let d = pattern(4096, 7);
    // Write Fault (media error, DNR clear) five times: the sixth try succeeds.
    ctl.fail_writes_times(u64::from(MAX_RETRIES));
    assert_eq!(c.call(cmd::WRITE, 0, 0, 4096, &d).error, 0);
    assert_eq!(ctl.failed(), u64::from(MAX_RETRIES));
    assert_eq!(c.read(0, 4096), d);
    // Six in a row: the retries are spent and the request fails with EIO.
    ctl.fail_writes_times(u64::from(MAX_RETRIES) + 1);
    assert_eq!(c.call(cmd::WRITE, 0, 8192, 4096, &d).error, errno::EIO);
    assert_eq!(ctl.failed(), 2 * u64::from(MAX_RETRIES) + 1);
    // A status with DNR is not retried: past the end of the namespace.
    assert_eq!(
        c.call(cmd::WRITE, 0, NS_BYTES - 512, 1024, &pattern(1024, 1))
            .error,
        errno::ENOSPC
    );
    // The two failed requests are counted, nothing else.
    assert_eq!(srv.stop().errors, 2);
}
