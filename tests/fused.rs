//! Fused Compare and Write end to end: a match writes, a mismatch writes nothing and
//! says so with both statuses; the pair is atomic against another host's Compare and
//! Write and against a plain write from another poll group; and every malformed
//! pair (a half missing, halves that disagree, the wrong opcode or queue, a half
//! refused) is answered with SPDK's status, the queue going on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::types::Nsid;
use nvmf_common::wire::identify::fuses;
use nvmf_common::wire::sqe::{fuse, Sqe};
use nvmf_common::wire::status::{generic, media, Sct, Status};
use nvmf_initiator::command::{self, SqeBytes};
use nvmf_initiator::controller::Controller;
use nvmf_initiator::namespace::NsIo;
use nvmf_initiator::queue::Queue;
use nvmf_initiator::transport::tcp::TcpOptions;
use nvmf_initiator::transport::{DataDir, IoBuf};
use nvmf_tests::{
    config, connect, connect_to, pattern, ram_backend, start, start_tcp, wrap_ns1, TcpEnv,
};

const BS: usize = 512;
/// Blocks one pair covers here.
const NLB: usize = 8;

fn ok(s: Status) -> bool {
    s.is_success()
}

fn miscompare(s: Status) -> bool {
    s.is(Sct::MediaError, media::COMPARE_FAILURE)
}

fn failed_fused(s: Status) -> bool {
    s.is(Sct::Generic, generic::ABORTED_FUSED_FAIL) && !s.dnr
}

fn missing_fused(s: Status) -> bool {
    s.is(Sct::Generic, generic::ABORTED_FUSED_MISSING) && !s.dnr
}

fn invalid_field(s: Status) -> bool {
    s.is(Sct::Generic, generic::INVALID_FIELD) && s.dnr
}

fn read(io: &mut NsIo<'_>, lba: u64) -> Vec<u8> {
    let mut out = vec![0u8; NLB * BS];
    io.read(lba, &mut out)
        .unwrap_or_else(|e| panic!("read {lba}: {e}"));
    out
}

/// A match replaces the data; a mismatch leaves it and fails both halves.
fn match_then_mismatch(ctrl: &mut Controller) {
    let mut queues = ctrl.take_io_queues();
    let mut io = NsIo::new(ctrl, &mut queues[0], Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    let (a, b, c) = (
        pattern(1, 0, NLB * BS),
        pattern(2, 0, NLB * BS),
        pattern(3, 0, NLB * BS),
    );
    io.write(40, &a).unwrap_or_else(|e| panic!("write: {e}"));
    let (s1, s2) = io
        .compare_and_write(40, &a, &b)
        .unwrap_or_else(|e| panic!("compare and write: {e}"));
    assert!(ok(s1) && ok(s2), "a match: {s1:?} {s2:?}");
    assert_eq!(read(&mut io, 40), b, "the match wrote");
    let (s1, s2) = io
        .compare_and_write(40, &a, &c)
        .unwrap_or_else(|e| panic!("compare and write: {e}"));
    assert!(miscompare(s1), "the compare half: {s1:?}");
    assert!(failed_fused(s2), "the write half: {s2:?}");
    assert_eq!(read(&mut io, 40), b, "a mismatch writes nothing");
    // Plain commands on the same queue go on as before.
    io.write(40, &c).unwrap_or_else(|e| panic!("write: {e}"));
    assert_eq!(read(&mut io, 40), c);
}

#[test]
fn fuses_advertises_compare_and_write() {
    let env = start(&config(&["ram:16M"]));
    let ctrl = connect(&env, 1, 32);
    assert_eq!(ctrl.id_ctrl().fuses, fuses::COMPARE_AND_WRITE);
}

#[test]
fn compare_and_write_on_ram_over_loopback() {
    let env = start(&config(&["ram:16M"]));
    let mut ctrl = connect(&env, 1, 32);
    match_then_mismatch(&mut ctrl);
}

#[test]
fn compare_and_write_on_a_file_over_tcp() {
    let path = std::env::temp_dir().join(format!("nvmf-fused-{}.img", std::process::id()));
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(16 << 20))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let env = start_tcp(
        &config(&[&path.display().to_string()]),
        TcpOptions::default(),
    );
    let mut ctrl = connect_to(&env.fabric, &env.nqn, 1, 32);
    match_then_mismatch(&mut ctrl);
    let _ = std::fs::remove_file(&path);
}

fn tcp_groups(groups: usize) -> TcpEnv {
    let mut cfg = config(&["ram:16M"]);
    cfg.transport.poll_groups = groups;
    start_tcp(&cfg, TcpOptions::default())
}

/// Four queues of two hosts on two poll groups increment one counter block with
/// Compare and Write, retrying on a mismatch: no increment is lost.
#[test]
fn racing_hosts_each_increment_wins_exactly_once() {
    const ROUNDS: u64 = 150;
    let env = tcp_groups(2);
    let lba = 64;
    {
        let mut c = connect_to(&env.fabric, &env.nqn, 1, 32);
        let mut q = c.take_io_queues().remove(0);
        let mut io = NsIo::new(&c, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
        io.write(lba, &vec![0u8; NLB * BS])
            .unwrap_or_else(|e| panic!("write: {e}"));
    }
    let counter = |v: u64| {
        let mut b = vec![0u8; NLB * BS];
        b[..8].copy_from_slice(&v.to_le_bytes());
        b
    };
    let mut threads = Vec::new();
    for host in 0..2 {
        let (fabric, nqn) = (env.fabric.clone(), env.nqn.clone());
        threads.push(std::thread::spawn(move || {
            let mut c = connect_to(&fabric, &nqn, 2, 32);
            let queues = c.take_io_queues();
            let c = Arc::new(c);
            let mut inner = Vec::new();
            for (qn, mut q) in queues.into_iter().enumerate() {
                let c = c.clone();
                inner.push(std::thread::spawn(move || {
                    let mut io = NsIo::new(&c, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
                    let (mut wins, mut misses) = (0u64, 0u64);
                    while wins < ROUNDS {
                        let cur = read(&mut io, lba);
                        let v = u64::from_le_bytes(cur[..8].try_into().unwrap_or([0; 8]));
                        let (s1, s2) = io
                            .compare_and_write(lba, &cur, &counter(v + 1))
                            .unwrap_or_else(|e| panic!("host {host} queue {qn}: {e}"));
                        if ok(s1) {
                            assert!(ok(s2), "the write half of a match: {s2:?}");
                            wins += 1;
                        } else {
                            assert!(miscompare(s1) && failed_fused(s2), "{s1:?} {s2:?}");
                            misses += 1;
                        }
                    }
                    misses
                }));
            }
            inner
                .into_iter()
                .map(|t| t.join().unwrap_or_else(|_| panic!("queue thread")))
                .sum::<u64>()
        }));
    }
    let misses: u64 = threads
        .into_iter()
        .map(|t| t.join().unwrap_or_else(|_| panic!("host thread")))
        .sum();
    let mut c = connect_to(&env.fabric, &env.nqn, 1, 32);
    let mut q = c.take_io_queues().remove(0);
    let mut io = NsIo::new(&c, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    let end = read(&mut io, lba);
    let v = u64::from_le_bytes(end[..8].try_into().unwrap_or([0; 8]));
    assert_eq!(
        v,
        4 * ROUNDS,
        "every successful increment counted once ({misses} retries)"
    );
    assert!(!env.target.locks.active(), "no range left locked");
}

/// A plain write from another host (another poll group) to the pair's range while the
/// pair is under way waits for it: the pair compares the old data and wins, and the
/// plain write lands last.
#[test]
fn a_plain_write_waits_for_the_pair_on_its_range() {
    let env = tcp_groups(2);
    let ctl = wrap_ns1(&env.target, ram_backend(16 << 20));
    let (x, y, z) = (
        pattern(7, 0, NLB * BS),
        pattern(8, 0, NLB * BS),
        pattern(9, 0, NLB * BS),
    );
    let lba = 16;
    let mut a = connect_to(&env.fabric, &env.nqn, 1, 32);
    let mut b = connect_to(&env.fabric, &env.nqn, 2, 32);
    let mut qa = a.take_io_queues().remove(0);
    NsIo::new(&a, &mut qa, Nsid(1))
        .and_then(|mut io| io.write(lba, &x))
        .unwrap_or_else(|e| panic!("write: {e}"));
    // Held in the backend: the pair's Compare stays in flight with the range locked.
    ctl.stall(true);
    let pair = std::thread::spawn(move || {
        let mut io = NsIo::new(&a, &mut qa, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
        io.compare_and_write(lba, &x, &y)
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !env.target.locks.active() {
        assert!(Instant::now() < deadline, "the pair never locked its range");
        std::thread::sleep(Duration::from_millis(2));
    }
    // Both of b's queues write z over the range (one of them in the other group).
    let mut writers = Vec::new();
    for mut q in b.take_io_queues() {
        let b = Arc::new(connect_to(&env.fabric, &env.nqn, 1, 32));
        let z = z.clone();
        writers.push(std::thread::spawn(move || {
            NsIo::new(&b, &mut q, Nsid(1)).and_then(|mut io| io.write(lba, &z))
        }));
    }
    std::thread::sleep(Duration::from_millis(200));
    ctl.stall(false);
    let (s1, s2) = pair
        .join()
        .unwrap_or_else(|_| panic!("pair thread"))
        .unwrap_or_else(|e| panic!("compare and write: {e}"));
    assert!(
        ok(s1) && ok(s2),
        "the pair compared the data from before the writes: {s1:?} {s2:?}"
    );
    for w in writers {
        w.join()
            .unwrap_or_else(|_| panic!("writer thread"))
            .unwrap_or_else(|e| panic!("plain write: {e}"));
    }
    let mut c = connect_to(&env.fabric, &env.nqn, 1, 32);
    let mut q = c.take_io_queues().remove(0);
    let mut io = NsIo::new(&c, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        read(&mut io, lba),
        z,
        "the plain writes landed after the pair"
    );
    assert!(!env.target.locks.active());
}

/// Sends `cmds` back to back on `q` and returns their statuses in order.
fn send(q: &mut Queue, cmds: &[(SqeBytes, Option<&IoBuf>, DataDir)]) -> Vec<Status> {
    q.execute_all(cmds, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("execute: {e}"))
        .into_iter()
        .map(|c| c.status)
        .collect()
}

fn with_fuse(mut sqe: SqeBytes, f: u8) -> SqeBytes {
    Sqe::new_unchecked(&mut sqe[..]).set_fuse(f);
    sqe
}

#[test]
fn malformed_pairs_get_spdks_statuses_and_the_queue_goes_on() {
    let env = start(&config(&["ram:16M"]));
    let mut ctrl = connect(&env, 1, 32);
    let nblocks = (16 << 20) / BS as u64;
    let mut q = ctrl.take_io_queues().remove(0);
    let buf = ctrl.alloc(NLB * BS).unwrap_or_else(|e| panic!("{e}"));
    let buf2 = ctrl.alloc(NLB * BS).unwrap_or_else(|e| panic!("{e}"));
    let d = Some(&buf);
    let d2 = Some(&buf2);
    let to = DataDir::ToCtrl;
    let n = NLB as u32;
    let (first, second) =
        command::compare_and_write(Nsid(1), 0, n).unwrap_or_else(|e| panic!("{e}"));
    let rd = command::read(Nsid(1), 0, n, false).unwrap_or_else(|e| panic!("{e}"));
    let wr = command::write(Nsid(1), 0, n, false).unwrap_or_else(|e| panic!("{e}"));

    // The second half never comes: the next command is a plain Read.
    let st = send(&mut q, &[(first, d, to), (rd, d2, DataDir::FromCtrl)]);
    assert!(missing_fused(st[0]) && ok(st[1]), "{st:?}");
    // A second half without a first.
    let st = send(&mut q, &[(second, d, to)]);
    assert!(missing_fused(st[0]), "{st:?}");
    // A first half sent alone, the next command coming later in its own burst.
    q.submit(first, d, to, 7)
        .unwrap_or_else(|e| panic!("submit: {e}"));
    q.flush().unwrap_or_else(|e| panic!("flush: {e}"));
    std::thread::sleep(Duration::from_millis(50));
    let st = send(&mut q, &[(rd, d2, DataDir::FromCtrl)]);
    assert!(ok(st[0]), "{st:?}");
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while out.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the lone first half was never answered"
        );
        q.poll(&mut out).unwrap_or_else(|e| panic!("poll: {e}"));
    }
    assert!(
        out[0].tag == 7 && missing_fused(out[0].status),
        "{:?}",
        out[0].status
    );
    // Halves that name different ranges: both Invalid Field.
    let (f2, s2) = command::compare_and_write(Nsid(1), 0, n).unwrap_or_else(|e| panic!("{e}"));
    let (_, other) = command::compare_and_write(Nsid(1), 64, n).unwrap_or_else(|e| panic!("{e}"));
    let st = send(&mut q, &[(f2, d, to), (other, d2, to)]);
    assert!(invalid_field(st[0]) && invalid_field(st[1]), "{st:?}");
    // Only Compare may be first and only Write second.
    let st = send(&mut q, &[(with_fuse(wr, fuse::FIRST), d, to)]);
    assert!(invalid_field(st[0]), "{st:?}");
    let st = send(
        &mut q,
        &[(with_fuse(rd, fuse::SECOND), d2, DataDir::FromCtrl)],
    );
    assert!(invalid_field(st[0]), "{st:?}");
    let reserved = with_fuse(wr, fuse::FIRST | fuse::SECOND);
    let st = send(&mut q, &[(reserved, d, to)]);
    assert!(invalid_field(st[0]), "{st:?}");
    // Both halves past the end: each refused on its own.
    let (far_first, far_second) =
        command::compare_and_write(Nsid(1), nblocks - 1, n).unwrap_or_else(|e| panic!("{e}"));
    let st = send(&mut q, &[(far_first, d, to), (far_second, d2, to)]);
    let out_of_range = |s: Status| s.is(Sct::Generic, generic::LBA_OUT_OF_RANGE) && s.dnr;
    assert!(out_of_range(st[0]) && out_of_range(st[1]), "{st:?}");
    // A first half refused on its own (no such namespace): its second is aborted.
    let mut bad_first = f2;
    Sqe::new_unchecked(&mut bad_first[..]).set_nsid(9);
    let st = send(&mut q, &[(bad_first, d, to), (s2, d2, to)]);
    assert!(st[0].is(Sct::Generic, generic::INVALID_NAMESPACE), "{st:?}");
    assert!(failed_fused(st[1]), "{st:?}");
    // A second half refused on its own: its first is aborted.
    let mut bad = s2;
    Sqe::new_unchecked(&mut bad[..]).set_nsid(9);
    let st = send(&mut q, &[(f2, d, to), (bad, d2, to)]);
    assert!(failed_fused(st[0]), "{st:?}");
    assert!(st[1].is(Sct::Generic, generic::INVALID_NAMESPACE), "{st:?}");
    // Fused commands on the admin queue are refused (nothing there may fuse).
    let id = with_fuse(command::identify_controller(), fuse::FIRST);
    let st = ctrl
        .admin_execute(id, None, DataDir::None)
        .map(|c| c.status)
        .unwrap_or_else(|e| panic!("admin: {e}"));
    assert!(invalid_field(st), "{st:?}");
    // After all that the queue serves a proper pair.
    let data = pattern(4, 0, NLB * BS);
    let mut io = NsIo::new(&ctrl, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    io.write(0, &data).unwrap_or_else(|e| panic!("write: {e}"));
    let (s1, s2) = io
        .compare_and_write(0, &data, &pattern(5, 0, NLB * BS))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(ok(s1) && ok(s2), "{s1:?} {s2:?}");
    assert!(!env.target.target.locks.active());
}

/// A queue that goes away with a pair waiting (its second half never sent) or locked
/// (the Compare held in the backend) leaves no range locked behind it.
#[test]
fn a_queue_torn_down_mid_pair_releases_its_range() {
    let env = tcp_groups(1);
    let ctl = wrap_ns1(&env.target, ram_backend(16 << 20));
    let data = pattern(6, 0, NLB * BS);
    ctl.stall(true);
    {
        let mut a = connect_to(&env.fabric, &env.nqn, 1, 32);
        let mut q = a.take_io_queues().remove(0);
        let cmp = a.alloc(NLB * BS).unwrap_or_else(|e| panic!("{e}"));
        let wr = a.alloc(NLB * BS).unwrap_or_else(|e| panic!("{e}"));
        let (first, second) =
            command::compare_and_write(Nsid(1), 0, NLB as u32).unwrap_or_else(|e| panic!("{e}"));
        for (sqe, buf) in [(first, &cmp), (second, &wr)] {
            q.submit(sqe, Some(buf), DataDir::ToCtrl, 0)
                .unwrap_or_else(|e| panic!("submit: {e}"));
        }
        q.flush().unwrap_or_else(|e| panic!("flush: {e}"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !env.target.locks.active() {
            assert!(Instant::now() < deadline, "the pair never locked its range");
            std::thread::sleep(Duration::from_millis(2));
        }
        // The host vanishes without a word.
        q.close();
        drop(a);
    }
    ctl.stall(false);
    let deadline = Instant::now() + Duration::from_secs(10);
    while env.target.locks.active() {
        assert!(
            Instant::now() < deadline,
            "the range stayed locked after the queue ended"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut c = connect_to(&env.fabric, &env.nqn, 1, 32);
    let mut q = c.take_io_queues().remove(0);
    let mut io = NsIo::new(&c, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    io.write(0, &data)
        .unwrap_or_else(|e| panic!("write after: {e}"));
    let (s1, s2) = io
        .compare_and_write(0, &data, &pattern(7, 0, NLB * BS))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(ok(s1) && ok(s2), "{s1:?} {s2:?}");
}
