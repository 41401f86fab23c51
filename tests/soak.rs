//! Soak: several hosts, each with two I/O queues, run mixed-size verified writes and
//! reads in their own part of one namespace while they connect, disconnect (cleanly
//! or by dropping the association) and reconnect, for `SOAK_SECS` seconds per
//! transport (default 10; CI can raise it). Every read is checked against a model of
//! what was written; at the end the target holds no controllers, no connections and no
//! buffers, and the process's resident memory grew by less than a bound once the
//! namespace's pages were all touched.
//!
//! `soak_tcp_odd_sizes` (issue 32) does the same over NVMe/TCP at the transfer sizes
//! around the target's buffer classes (1, 7, 255..257, 511..513, 1023..1025, 2047 and
//! 2048 blocks = MDTS), several commands in flight per queue, with and without header
//! and data digests, against a target whose poll groups have a small buffer arena (so
//! commands wait for buffers) while namespaces and a subsystem come and go; every
//! command must complete well within its timeout (no stuck command on either side).

use nvmf_target::runtime::PortServer;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::types::{Nqn, Nsid};
use nvmf_initiator::namespace::NsIo;
use nvmf_initiator::transport::Fabric;
use nvmf_tests::{config, connect_to, pattern, TEST_NQN};

const HOSTS: usize = 4;
const BLOCK: usize = 512;
/// Blocks each host owns (4 MiB).
const REGION_BLOCKS: u64 = 8192;
/// Transfer sizes in blocks: 512 B to 128 KiB.
const SIZES: [u32; 6] = [1, 8, 16, 32, 128, 256];
/// Resident memory may grow by at most this much after warm-up.
const RSS_GROWTH_LIMIT: u64 = 32 << 20;

/// `SOAK_SECS`, else `default` seconds.
fn soak_secs(default: u64) -> Duration {
    let secs = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(default);
    Duration::from_secs(secs)
}

fn soak_time() -> Duration {
    soak_secs(10)
}

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Small deterministic generator (xorshift) per host.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Expected content of one block: `pattern(tag, lba)`.
fn block(tag: u64, lba: u64) -> Vec<u8> {
    pattern(tag, lba, BLOCK)
}

/// One host: fills its region, then until `deadline` connects, runs a random batch of
/// writes and verified reads, and disconnects. Returns the operations done.
fn host(
    fabric: Arc<dyn Fabric>,
    nqn: Nqn,
    index: usize,
    warm: Arc<std::sync::Barrier>,
    deadline: Instant,
) -> u64 {
    let base = index as u64 * REGION_BLOCKS;
    let mut model: Vec<u64> = vec![0; REGION_BLOCKS as usize];
    let mut rng = Rng(0x9E37_79B9 ^ ((index as u64 + 1) * 0x1234_5678_9ABC));
    let mut ops = 0u64;
    let mut warmed = false;
    let mut round = 0u64;
    loop {
        let mut ctrl = connect_to(&fabric, &nqn, 2, 32);
        let mut queues = ctrl.take_io_queues();
        if !warmed {
            // Touch every block once so the namespace's memory is all resident.
            let q = &mut queues[0];
            let mut io = NsIo::new(&ctrl, q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
            let chunk = 256u64;
            for start in (0..REGION_BLOCKS).step_by(chunk as usize) {
                let tag = 1;
                let data: Vec<u8> = (0..chunk)
                    .flat_map(|j| block(tag, base + start + j))
                    .collect();
                io.write(base + start, &data)
                    .unwrap_or_else(|e| panic!("fill: {e}"));
                for j in 0..chunk {
                    model[(start + j) as usize] = tag;
                }
            }
            drop(io);
            warmed = true;
            warm.wait();
        }
        let batch = 20 + rng.below(200);
        for i in 0..batch {
            let qi = (i % 2) as usize;
            let q = &mut queues[qi];
            let mut io = NsIo::new(&ctrl, q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
            let nlb = SIZES[rng.below(SIZES.len() as u64) as usize];
            let off = rng.below(REGION_BLOCKS - u64::from(nlb) + 1);
            let lba = base + off;
            if rng.below(3) == 0 {
                let tag = rng.next() | 1;
                let data: Vec<u8> = (0..u64::from(nlb))
                    .flat_map(|j| block(tag, lba + j))
                    .collect();
                io.write(lba, &data)
                    .unwrap_or_else(|e| panic!("host {index} write: {e}"));
                for j in 0..u64::from(nlb) {
                    model[(off + j) as usize] = tag;
                }
            } else {
                let mut back = vec![0u8; nlb as usize * BLOCK];
                io.read(lba, &mut back)
                    .unwrap_or_else(|e| panic!("host {index} read: {e}"));
                for j in 0..u64::from(nlb) {
                    let want = block(model[(off + j) as usize], lba + j);
                    let got = &back[j as usize * BLOCK..(j as usize + 1) * BLOCK];
                    assert!(
                        got == want.as_slice(),
                        "host {index}: LBA {} differs",
                        lba + j
                    );
                }
            }
            ops += 1;
        }
        drop(queues);
        // Half the time a clean shutdown, otherwise the association is just dropped.
        round += 1;
        if round.is_multiple_of(2) {
            ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
        } else {
            drop(ctrl);
        }
        if Instant::now() >= deadline {
            return ops;
        }
    }
}

/// One soak at a time: both share this process's resident memory.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs the soak over `fabric`; returns the RSS growth after warm-up and the
/// operations done.
fn soak(fabric: Arc<dyn Fabric>, nqn: Nqn) -> (u64, u64) {
    let warm = Arc::new(std::sync::Barrier::new(HOSTS + 1));
    let start = Instant::now();
    let deadline = start + soak_time();
    let threads: Vec<_> = (0..HOSTS)
        .map(|i| {
            let (f, n, w) = (fabric.clone(), nqn.clone(), warm.clone());
            std::thread::Builder::new()
                .name(format!("soak-host-{i}"))
                .spawn(move || host(f, n, i, w, deadline))
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    warm.wait();
    // Baseline a third of the way in: buffers and pools have been through their first
    // uses by then (pages of a pool are only resident once used).
    std::thread::sleep(soak_time() / 3);
    let before = rss_bytes();
    let ops: u64 = threads
        .into_iter()
        .map(|t| t.join().unwrap_or_else(|_| panic!("a soak host failed")))
        .sum();
    let after = rss_bytes();
    eprintln!(
        "soak: {ops} verified operations in {:?}; RSS {} MiB -> {} MiB",
        start.elapsed(),
        before >> 20,
        after >> 20
    );
    (after.saturating_sub(before), ops)
}

fn wait_no_controllers(target: &nvmf_target::target::Target) {
    let sub = target
        .subsystem_by_name(TEST_NQN)
        .unwrap_or_else(|| panic!("subsystem"));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !sub.controllers().is_empty() {
        assert!(Instant::now() < deadline, "controllers left behind");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn soak_loopback() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = nvmf_tests::start(&config(&["ram:64M"]));
    let (growth, ops) = soak(env.fabric.clone(), env.nqn.clone());
    assert!(ops > 0);
    assert!(
        growth < RSS_GROWTH_LIMIT,
        "RSS grew by {} MiB",
        growth >> 20
    );
    wait_no_controllers(&env.target.target);
}

#[test]
fn soak_tcp() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = nvmf_tests::start_tcp(
        &config(&["ram:64M"]),
        nvmf_initiator::transport::tcp::TcpOptions::default(),
    );
    let (growth, ops) = soak(env.fabric.clone(), env.nqn.clone());
    assert!(ops > 0);
    assert!(
        growth < RSS_GROWTH_LIMIT,
        "RSS grew by {} MiB",
        growth >> 20
    );
    wait_no_controllers(&env.target);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let c = env.server.counters();
        if c.queues == 0 && c.buffers_in_use == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "connections or buffers left: {c:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---- NVMe/TCP at odd transfer sizes, a small target arena, live changes ----

const ODD_SUB: &str = "nqn.2024-01.io.nvmf-rs:odd";
/// The subsystem added and removed while the hosts run.
const CHURN_SUB: &str = "nqn.2024-01.io.nvmf-rs:churn";
/// Seconds the odd-size soak runs unless `SOAK_SECS` says otherwise.
const ODD_SOAK_DEFAULT_SECS: u64 = 3;
/// Transfer sizes in blocks: both sides of the power-of-two buffer classes, up to the
/// target's default MDTS (`max_io_size` 1 MiB = 2048 blocks).
const ODD_SIZES: [u32; 13] = [
    1, 7, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025, 2047, 2048,
];
const MDTS_BLOCKS: u32 = 2048;
const ODD_HOSTS: u8 = 3;
const ODD_QUEUES: u16 = 2;
/// Commands in flight per queue.
const ODD_QD: usize = 3;
/// Each command slot owns one MDTS-sized stretch of its host's region, so commands in
/// flight never overlap and every read can be checked.
const SLOT_BLOCKS: u64 = MDTS_BLOCKS as u64;
const SLOTS_PER_HOST: usize = ODD_QUEUES as usize * ODD_QD;
/// Commands per connection before it is cycled.
const ODD_OPS_PER_ROUND: usize = 48;
/// The target's poll-group arena: four MDTS buffers and a page, so a few large
/// commands in flight exhaust it and the rest wait for buffers.
const SMALL_ARENA: usize = (4 << 20) + 4096;
/// Host command timeout; the stuck bounds on both sides are well under it.
const ODD_TIMEOUT: Duration = Duration::from_secs(20);
const ODD_STUCK: Duration = Duration::from_secs(5);
/// Host numbers (identities) of the soak hosts start here; the churn host is apart.
const FIRST_ODD_HOST: u8 = 0x40;
const CHURN_HOST: u8 = 0x60;

fn odd_yaml(port: u16, churn_sub: bool) -> String {
    let (listed, extra) = if churn_sub {
        (
            format!(", {CHURN_SUB}"),
            format!(
                r#"
  - nqn: {CHURN_SUB}
    allow_any_host: true
    namespaces:
      - {{ nsid: 1, device_path: "ram:2M" }}"#
            ),
        )
    } else {
        (String::new(), String::new())
    };
    let region_mib =
        (u64::from(ODD_HOSTS) * SLOTS_PER_HOST as u64 * SLOT_BLOCKS * BLOCK as u64) >> 20;
    format!(
        r#"
transport:
  stuck_command_ms: {stuck}
ports:
  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: {port}, subsystems: [{ODD_SUB}{listed}] }}
subsystems:
  - nqn: {ODD_SUB}
    allow_any_host: true
    namespaces:
      - {{ nsid: 1, device_path: "ram:{region_mib}M" }}{extra}
"#,
        stuck = ODD_STUCK.as_millis()
    )
}

/// Fills `out` (whole blocks) with the expected content of blocks `lba..` written with
/// `tag`.
fn fill_blocks(out: &mut [u8], tag: u64, lba: u64) {
    for (j, b) in out.chunks_mut(BLOCK).enumerate() {
        b.copy_from_slice(&block(tag, lba + j as u64));
    }
}

/// A command in flight on one slot.
#[derive(Clone, Copy)]
struct OddIo {
    write: bool,
    lba: u64,
    nlb: u32,
    tag: u64,
    at: Instant,
}

/// The transfer sizes of a host's round. The first round moves MDTS transfers only, so
/// the arenas are carved for the largest class; then rounds of one size (each size in
/// turn, so every class meets an arena the others carved: the buffer-class starvation
/// of issue 32) alternate with rounds of all sizes mixed.
fn round_sizes(round: usize, index: usize) -> &'static [u32] {
    const CARVE: [u32; 1] = [MDTS_BLOCKS];
    if round == 0 {
        &CARVE
    } else if round % 2 == 1 {
        &ODD_SIZES
    } else {
        let i = (round / 2 + index) % ODD_SIZES.len();
        &ODD_SIZES[i..=i]
    }
}

/// One soak host: connects with the digests of its round, keeps `ODD_QD` commands of
/// the round's sizes in flight on each queue for a batch, checks every read against its
/// model and that nothing took long, then disconnects (cleanly or not) and again, until
/// `deadline`. Returns the commands done.
fn odd_host(addr: std::net::SocketAddr, n: u8, deadline: Instant) -> u64 {
    use nvmf_initiator::command;
    use nvmf_initiator::queue::Completion;
    use nvmf_initiator::transport::tcp::{TcpFabric, TcpOptions};
    use nvmf_initiator::transport::DataDir;

    let index = u64::from(n - FIRST_ODD_HOST);
    let base = index * SLOTS_PER_HOST as u64 * SLOT_BLOCKS;
    // Tag per block of this host's region; 0: never written (not checked).
    let mut model = vec![0u64; SLOTS_PER_HOST * SLOT_BLOCKS as usize];
    let mut rng = Rng(0xA5A5_5A5A ^ (index + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let sub = Nqn::new(ODD_SUB).unwrap_or_else(|e| panic!("{e}"));
    let mut done = 0u64;
    let mut round = 0usize;
    let mut scratch = vec![0u8; MDTS_BLOCKS as usize * BLOCK];
    while Instant::now() < deadline {
        // Every host goes through all four digest settings, each round another.
        let combo = (round + index as usize) % 4;
        let (hdr_digest, data_digest) = (combo & 1 != 0, combo & 2 != 0);
        let fabric: Arc<dyn Fabric> = Arc::new(TcpFabric::new(
            addr,
            TcpOptions {
                hdr_digest,
                data_digest,
                ..TcpOptions::default()
            },
        ));
        let sizes = round_sizes(round, index as usize);
        let mut o = nvmf_tests::ops_support::options_as(n, &sub, ODD_QUEUES, 5_000);
        o.command_timeout = ODD_TIMEOUT;
        o.stuck_command_warn = ODD_STUCK;
        let mut ctrl = nvmf_initiator::Controller::connect(fabric.clone(), o)
            .unwrap_or_else(|e| panic!("host {n} connect: {e}"));
        let mdts = ctrl
            .max_transfer()
            .map_or(u32::MAX, |b| (b / BLOCK as u64) as u32);
        assert_eq!(mdts, MDTS_BLOCKS, "the sizes are chosen for this MDTS");
        let mut queues = ctrl.take_io_queues();
        assert_eq!(queues.len(), usize::from(ODD_QUEUES));
        let bufs: Vec<_> = (0..SLOTS_PER_HOST)
            .map(|_| {
                fabric
                    .alloc(MDTS_BLOCKS as usize * BLOCK)
                    .unwrap_or_else(|e| panic!("{e}"))
            })
            .collect();
        let mut inflight: Vec<Option<OddIo>> = vec![None; SLOTS_PER_HOST];
        let mut issued = 0usize;
        let mut comps: Vec<Completion> = Vec::new();
        let mut next_scan = Instant::now();
        loop {
            let now = Instant::now();
            // Fill every free slot while the batch lasts.
            for (s, slot) in inflight.iter_mut().enumerate() {
                if slot.is_some() || issued >= ODD_OPS_PER_ROUND {
                    continue;
                }
                let nlb = sizes[rng.below(sizes.len() as u64) as usize];
                let off = rng.below(SLOT_BLOCKS - u64::from(nlb) + 1);
                let lba = base + s as u64 * SLOT_BLOCKS + off;
                let len = nlb as usize * BLOCK;
                let data = bufs[s].slice(0, len).unwrap_or_else(|| panic!("slice"));
                let write = rng.below(2) == 0;
                let tag = rng.next() | 1;
                let (sqe, dir) = if write {
                    fill_blocks(&mut scratch[..len], tag, lba);
                    assert!(data.write_at(0, &scratch[..len]));
                    (command::write(Nsid(1), lba, nlb, false), DataDir::ToCtrl)
                } else {
                    (command::read(Nsid(1), lba, nlb, false), DataDir::FromCtrl)
                };
                let sqe = sqe.unwrap_or_else(|e| panic!("{e}"));
                let q = &mut queues[s % usize::from(ODD_QUEUES)];
                q.submit_at(sqe, Some(&data), dir, s as u64, now)
                    .unwrap_or_else(|e| panic!("host {n} submit: {e}"));
                *slot = Some(OddIo {
                    write,
                    lba,
                    nlb,
                    tag,
                    at: now,
                });
                issued += 1;
            }
            for q in queues.iter_mut() {
                q.flush().unwrap_or_else(|e| panic!("host {n} flush: {e}"));
                comps.clear();
                q.poll(&mut comps)
                    .unwrap_or_else(|e| panic!("host {n} poll: {e}"));
                for c in &comps {
                    let s = c.tag as usize;
                    let io = inflight[s]
                        .take()
                        .unwrap_or_else(|| panic!("completion for idle slot {s}"));
                    let what = format!(
                        "host {n} {} of {} blocks at LBA {} (hdgst {hdr_digest}, ddgst {data_digest})",
                        if io.write { "write" } else { "read" },
                        io.nlb,
                        io.lba
                    );
                    assert!(c.status.is_success(), "{what}: {}", c.status);
                    let took = io.at.elapsed();
                    assert!(took < ODD_STUCK, "{what} took {took:?}");
                    let first = (io.lba - base) as usize;
                    let blocks = first..first + io.nlb as usize;
                    if io.write {
                        model[blocks].fill(io.tag);
                    } else {
                        let len = io.nlb as usize * BLOCK;
                        let got = &mut scratch[..len];
                        assert!(bufs[s].read_at(0, got));
                        for (j, tag) in model[blocks].iter().enumerate() {
                            if *tag == 0 {
                                continue;
                            }
                            let lba = io.lba + j as u64;
                            assert!(
                                got[j * BLOCK..(j + 1) * BLOCK] == block(*tag, lba),
                                "{what}: LBA {lba} differs"
                            );
                        }
                    }
                    done += 1;
                }
            }
            if issued >= ODD_OPS_PER_ROUND && inflight.iter().all(Option::is_none) {
                break;
            }
            if now >= next_scan {
                // The host's own timeout and stuck-command scan, as its I/O loops run it.
                next_scan = now + Duration::from_millis(10);
                for q in queues.iter_mut() {
                    q.expire(now);
                    assert!(!q.is_broken(), "host {n}: queue {} broke", q.qid());
                }
            }
            if comps.is_empty() {
                queues[0].wait(Duration::from_micros(200));
            }
        }
        for q in queues.iter_mut() {
            let ages = q.take_command_ages();
            assert_eq!(
                ages.stuck,
                0,
                "host {n}: stuck commands on queue {}",
                q.qid()
            );
        }
        drop(queues);
        round += 1;
        if round.is_multiple_of(2) {
            ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
        } else {
            drop(ctrl);
        }
    }
    done
}

/// Adds and removes a second namespace of the soak's subsystem, and now and then a
/// whole subsystem that a host connects to and writes, until `deadline`. Returns the
/// changes made.
fn odd_churn(t: &nvmf_tests::ops_support::LiveTarget, port: u16, deadline: Instant) -> u64 {
    use nvmf_target::live::Op;
    let mut changes = 0u64;
    let mut round = 0u64;
    while Instant::now() < deadline {
        let add = Op::AddNs {
            nqn: ODD_SUB.into(),
            nsid: Some(2),
            device_path: "ram:1M".into(),
            ceph_conf: None,
            client_id: None,
            keyring: None,
            ceph_options: Default::default(),
            create: Default::default(),
            auto_visible: true,
        };
        t.live
            .execute(&add)
            .unwrap_or_else(|e| panic!("add namespace: {e}"));
        std::thread::sleep(Duration::from_millis(20));
        t.live
            .execute(&Op::RemoveNs {
                nqn: ODD_SUB.into(),
                nsid: 2,
                delete_backing: false,
            })
            .unwrap_or_else(|e| panic!("remove namespace: {e}"));
        changes += 2;
        round += 1;
        if round.is_multiple_of(3) {
            let with = nvmf_target::config::Config::from_yaml_str(&odd_yaml(port, true), "<soak>")
                .unwrap_or_else(|e| panic!("{e}"));
            t.live
                .apply(with)
                .unwrap_or_else(|e| panic!("add subsystem: {e}"));
            let sub = Nqn::new(CHURN_SUB).unwrap_or_else(|e| panic!("{e}"));
            let mut c = nvmf_tests::ops_support::connect_as(&t.fabric(1), CHURN_HOST, &sub, 1, 0)
                .unwrap_or_else(|e| panic!("churn host connect: {e}"));
            let mut q = c.take_io_queues().remove(0);
            {
                let mut io = NsIo::new(&c, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
                let data: Vec<u8> = (0..257u64).flat_map(|j| block(round, 3 + j)).collect();
                io.write(3, &data)
                    .unwrap_or_else(|e| panic!("churn write: {e}"));
                let mut back = vec![0u8; data.len()];
                io.read(3, &mut back)
                    .unwrap_or_else(|e| panic!("churn read: {e}"));
                assert!(back == data, "churn subsystem read back other data");
            }
            drop(q);
            c.shutdown().unwrap_or_else(|e| panic!("{e}"));
            let without =
                nvmf_target::config::Config::from_yaml_str(&odd_yaml(port, false), "<soak>")
                    .unwrap_or_else(|e| panic!("{e}"));
            t.live
                .apply(without)
                .unwrap_or_else(|e| panic!("remove subsystem: {e}"));
            changes += 2;
        }
    }
    changes
}

#[test]
fn soak_tcp_odd_sizes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let port = nvmf_tests::ops_support::free_port();
    let t = nvmf_tests::ops_support::start_live_with(
        &odd_yaml(port, false),
        None,
        nvmf_target::tcp::TcpOptions {
            arena_bytes: SMALL_ARENA,
            ..nvmf_target::tcp::TcpOptions::default()
        },
    );
    let addr = std::net::SocketAddr::new([127, 0, 0, 1].into(), port);
    let start = Instant::now();
    let deadline = start + soak_secs(ODD_SOAK_DEFAULT_SECS);
    let hosts: Vec<_> = (0..ODD_HOSTS)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("odd-host-{i}"))
                .spawn(move || odd_host(addr, FIRST_ODD_HOST + i, deadline))
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    let changes = odd_churn(&t, port, deadline);
    let ops: u64 = hosts
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|_| panic!("a soak host failed")))
        .sum();
    eprintln!(
        "odd-size soak: {ops} verified commands, {changes} live changes in {:?}",
        start.elapsed()
    );
    assert!(ops > 0 && changes > 0);
    // Nothing left behind: no connection, no buffer; nothing was ever stuck.
    let wait_until = Instant::now() + Duration::from_secs(15);
    loop {
        let c = t.tcp.counters();
        if c.queues == 0 && c.buffers_in_use == 0 {
            assert_eq!(c.stuck_commands, 0, "the target saw stuck commands: {c:?}");
            break;
        }
        assert!(
            Instant::now() < wait_until,
            "connections or buffers left: {c:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
