//! Soak: several hosts, each with two I/O queues, run mixed-size verified writes and
//! reads in their own part of one namespace while they connect, disconnect (cleanly
//! or by dropping the association) and reconnect, for `SOAK_SECS` seconds per
//! transport (default 10; CI can raise it). Every read is checked against a model of
//! what was written; at the end the target holds no controllers, no connections and no
//! buffers, and the process's resident memory grew by less than a bound once the
//! namespace's pages were all touched.

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

fn soak_time() -> Duration {
    let secs = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(10);
    Duration::from_secs(secs)
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
