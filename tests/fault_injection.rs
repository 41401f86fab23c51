//! Faults injected under load: connections cut with I/O in flight (through the
//! fault-injecting proxy of `nvmf_tests::proxy`), corrupted bytes on the wire, and a
//! target process killed with SIGKILL during a verifying write workload on a file.
//! Each checks that nothing leaks (the target's counters), that the host can connect
//! again, and that every write acknowledged (before a completed Flush, for the kill)
//! reads back.

use nvmf_target::runtime::PortServer;
use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::types::{Nqn, Nsid};
use nvmf_initiator::controller::Controller;
use nvmf_initiator::namespace::NsIo;
use nvmf_initiator::transport::tcp::{TcpFabric, TcpOptions};
use nvmf_initiator::transport::Fabric;
use nvmf_target::backend::fault::FaultBackend;
use nvmf_target::backend::spec::{open_backend, NamespaceSpec, OpenOptions};
use nvmf_target::config::{Config, TrType};
use nvmf_target::subsystem::Namespace;
use nvmf_tests::proxy::{Faults, Plan, Proxy};
use nvmf_tests::{config, connect_to, pattern, start_tcp, TcpEnv, TEST_NQN};

const BS: u64 = 4096;
const NLB: u32 = 8;

fn wait_counters(env: &TcpEnv, what: &str, f: impl Fn(&nvmf_target::tcp::GroupCounters) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let c = env.server.counters();
        if f(&c) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {c:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Writes extents `0..count` (4 KiB each, pattern `seed`) at queue depth `qd` until
/// done or the queue fails; returns the extents acknowledged with success.
fn write_until_error(ctrl: &mut Controller, seed: u64, count: usize, qd: usize) -> Vec<usize> {
    let mut queues = ctrl.take_io_queues();
    let Some(q) = queues.get_mut(0) else {
        return Vec::new();
    };
    let Ok(mut io) = NsIo::new(ctrl, q, Nsid(1)) else {
        return Vec::new();
    };
    let bufs: Vec<_> = (0..qd)
        .map(|_| ctrl.alloc(BS as usize).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let mut free: Vec<usize> = (0..qd).collect();
    let mut next = 0usize;
    let mut acked = Vec::new();
    let mut outstanding = 0usize;
    let mut done = Vec::new();
    'run: while acked.len() < count {
        while next < count {
            let Some(b) = free.pop() else { break };
            let lba = next as u64 * u64::from(NLB);
            bufs[b].write_at(0, &pattern(seed, lba, BS as usize));
            if io
                .submit_write((b as u64) << 32 | next as u64, lba, NLB, &bufs[b], false)
                .is_err()
            {
                break 'run;
            }
            outstanding += 1;
            next += 1;
        }
        if io.queue().flush().is_err() {
            break;
        }
        done.clear();
        match io.queue().poll(&mut done) {
            Ok(_) => {}
            Err(_) => break,
        }
        for c in &done {
            outstanding -= 1;
            free.push((c.tag >> 32) as usize);
            if c.status.is_success() {
                acked.push((c.tag & 0xFFFF_FFFF) as usize);
            } else {
                break 'run;
            }
        }
        if io.queue().is_broken() {
            break;
        }
        if outstanding == 0 && next >= count {
            break;
        }
    }
    acked
}

/// Reads back extents `which` through `fabric` and checks their pattern.
fn verify(fabric: &Arc<dyn Fabric>, nqn: &Nqn, seed: u64, which: &[usize]) {
    let mut ctrl = connect_to(fabric, nqn, 1, 32);
    let mut q = ctrl.take_io_queues().remove(0);
    let mut io = NsIo::new(&ctrl, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    let mut back = vec![0u8; BS as usize];
    for &i in which {
        let lba = i as u64 * u64::from(NLB);
        io.read(lba, &mut back)
            .unwrap_or_else(|e| panic!("read extent {i}: {e}"));
        assert!(
            back == pattern(seed, lba, BS as usize),
            "acknowledged extent {i} (LBA {lba}) lost"
        );
    }
}

#[test]
fn connection_cut_with_io_in_flight_leaks_nothing_and_data_verifies() {
    let env = start_tcp(&config(&["ram:64M"]), TcpOptions::default());
    // A slow backend keeps I/O in flight when the cut comes.
    let sub = env
        .target
        .subsystem_by_name(TEST_NQN)
        .unwrap_or_else(|| panic!("subsystem"));
    let inner = open_backend(
        &NamespaceSpec::Ram { size: 64 << 20 },
        &OpenOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (b, ctl) = FaultBackend::wrap(inner);
    sub.remove_namespace(Nsid(1));
    sub.add_namespace(Namespace::new(Nsid(1), b, [1; 16], [2; 16]))
        .unwrap_or_else(|e| panic!("{e}"));
    ctl.delay(Duration::from_micros(500));
    for (round, cut) in [(1u64, 150_000u64), (2, 700_000), (3, 40_000)] {
        // Connection 0 is the admin queue, 1 the I/O queue: cut the I/O queue's
        // host-to-target stream mid-transfer (close both ends).
        let proxy = Proxy::start(
            env.addr,
            Plan {
                to_target: Faults {
                    close_at: Some(cut),
                    ..Faults::default()
                },
                only: Some(1),
                ..Plan::default()
            },
        );
        let fabric: Arc<dyn Fabric> = Arc::new(TcpFabric::new(proxy.addr(), TcpOptions::default()));
        let mut ctrl = connect_to(&fabric, &env.nqn, 1, 32);
        let acked = write_until_error(&mut ctrl, round, 4000, 16);
        assert!(acked.len() < 4000, "round {round}: the cut never came");
        drop(ctrl);
        // Everything the connections held is released.
        wait_counters(&env, "connections and buffers released", |c| {
            c.queues == 0 && c.buffers_in_use == 0
        });
        // A new association (directly, no proxy) sees every acknowledged write.
        verify(&env.fabric, &env.nqn, round, &acked);
        wait_counters(&env, "verifier gone", |c| c.queues == 0);
        assert!(
            sub.controllers().is_empty(),
            "round {round}: controllers left behind"
        );
    }
}

#[test]
fn corrupted_data_on_the_wire_fails_the_write_and_writes_nothing() {
    let env = start_tcp(&config(&["ram:16M"]), TcpOptions::default());
    // The I/O connection's stream with both digests: ICReq (128), the Connect capsule
    // (72 + 4 header digest + 1024 + 4 data digest), then the first write's capsule:
    // its data starts 76 bytes in. Corrupt a byte of that data.
    let connect_len = 72 + 4 + 1024 + 4;
    let at = 128 + connect_len + 76 + 1000;
    let proxy = Proxy::start(
        env.addr,
        Plan {
            to_target: Faults {
                corrupt_at: Some(at),
                ..Faults::default()
            },
            only: Some(1),
            ..Plan::default()
        },
    );
    let opts = TcpOptions {
        hdr_digest: true,
        data_digest: true,
        ..TcpOptions::default()
    };
    let fabric: Arc<dyn Fabric> = Arc::new(TcpFabric::new(proxy.addr(), opts));
    let mut ctrl = connect_to(&fabric, &env.nqn, 1, 32);
    let mut q = ctrl.take_io_queues().remove(0);
    {
        let mut io = NsIo::new(&ctrl, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
        let r = io.write(0, &pattern(9, 0, 4096));
        assert!(r.is_err(), "a write whose data was corrupted succeeded");
    }
    wait_counters(&env, "digest error counted", |c| c.digest_errors == 1);
    // Nothing was written: a direct host reads zeroes.
    let mut v = connect_to(&env.fabric, &env.nqn, 1, 32);
    let mut q2 = v.take_io_queues().remove(0);
    let mut io = NsIo::new(&v, &mut q2, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    let mut back = vec![1u8; 4096];
    io.read(0, &mut back).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        back.iter().all(|&b| b == 0),
        "corrupted data reached the namespace"
    );
}

#[test]
fn delayed_and_truncated_streams_end_only_that_connection() {
    let env = start_tcp_with_stall(Duration::from_millis(500));
    // Slow both directions: everything still works, just later.
    let slow = Proxy::start(
        env.addr,
        Plan {
            to_target: Faults {
                delay: Some(Duration::from_millis(2)),
                ..Faults::default()
            },
            to_host: Faults {
                delay: Some(Duration::from_millis(2)),
                ..Faults::default()
            },
            ..Plan::default()
        },
    );
    let fabric: Arc<dyn Fabric> = Arc::new(TcpFabric::new(slow.addr(), TcpOptions::default()));
    let mut ctrl = connect_to(&fabric, &env.nqn, 1, 32);
    nvmf_tests::write_read_verify(&mut ctrl, 16 * 1024, 4, 32);
    drop(ctrl);
    // Truncate the I/O queue's stream mid-PDU (the connection stays open): the target
    // gives up on it after its stall timeout; the host's command times out.
    let cut = Proxy::start(
        env.addr,
        Plan {
            to_target: Faults {
                truncate_at: Some(128 + 1100 + 72 + 2000),
                ..Faults::default()
            },
            only: Some(1),
            ..Plan::default()
        },
    );
    let fabric: Arc<dyn Fabric> = Arc::new(TcpFabric::new(cut.addr(), TcpOptions::default()));
    let mut o = nvmf_initiator::controller::ConnectOptions::new(
        env.nqn.clone(),
        nvmf_tests::hostnqn(),
        nvmf_tests::TEST_HOSTID,
    );
    o.nr_io_queues = 1;
    o.queue_size = 32;
    o.command_timeout = Duration::from_secs(3);
    let mut ctrl = Controller::connect(fabric, o).unwrap_or_else(|e| panic!("{e}"));
    let mut q = ctrl.take_io_queues().remove(0);
    q.set_timeout(Duration::from_secs(3));
    {
        let mut io = NsIo::new(&ctrl, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
        assert!(io.write(0, &pattern(1, 0, 8192)).is_err());
    }
    drop(q);
    drop(ctrl);
    wait_counters(&env, "stalled connection closed", |c| {
        c.queues == 0 && c.buffers_in_use == 0
    });
    nvmf_tests::assert_serves(&env.fabric, &env.nqn, 500);
}

fn start_tcp_with_stall(stall: Duration) -> TcpEnv {
    nvmf_tests::start_tcp_with(
        &config(&["ram:16M"]),
        TcpOptions::default(),
        nvmf_target::tcp::TcpOptions {
            stall_timeout: stall,
            ..nvmf_target::tcp::TcpOptions::default()
        },
    )
}

// ---- SIGKILL ------------------------------------------------------------------------

/// Environment variable naming the backing file of a child target process.
const CHILD_FILE: &str = "NVMF_FAULT_CHILD_FILE";

/// Not a test of its own: the body of the target process `target_killed_*` starts
/// (this test binary re-executed). Serves the file in `NVMF_FAULT_CHILD_FILE` over
/// NVMe/TCP on an OS-chosen port of 127.0.0.1, prints `LISTENING <addr>`, and runs
/// until killed.
#[test]
#[ignore]
fn child_target_process() {
    let Ok(path) = std::env::var(CHILD_FILE) else {
        return;
    };
    let nqn = Nqn::new(TEST_NQN).unwrap_or_else(|e| panic!("{e}"));
    let mut cfg = Config::single(
        TrType::Tcp,
        Some(("127.0.0.1".into(), "4420".into())),
        Some(nqn),
        vec![path],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    cfg.ports[0].trsvcid = "0".into();
    let target = nvmf_target::target::Target::from_config(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let server = nvmf_target::tcp::TcpServer::start(target.clone(), &target.ports())
        .unwrap_or_else(|e| panic!("{e}"));
    println!("LISTENING {}", server.local_addrs()[0]);
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Starts a child target process on `file`; returns it and its address.
fn spawn_target(file: &std::path::Path) -> (Child, SocketAddr) {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "child_target_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_FILE, file)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn target: {e}"));
    let out = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut lines = std::io::BufReader::new(out).lines();
    let addr = loop {
        match lines.next() {
            Some(Ok(l)) => {
                // libtest prints "test child_target_process ... " first, same line.
                if let Some((_, a)) = l.split_once("LISTENING ") {
                    break a.trim().parse().unwrap_or_else(|e| panic!("{a}: {e}"));
                }
            }
            _ => panic!("the target process exited before listening"),
        }
    };
    (child, addr)
}

/// Extents flushed before the target is killed (of the workload's 16384).
const KILL_AFTER_EXTENTS: usize = 2048;

#[test]
fn target_killed_during_verified_writes_keeps_everything_flushed() {
    let path = std::env::temp_dir().join(format!("nvmf-sigkill-{}.img", std::process::id()));
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(64 << 20))
        .unwrap_or_else(|e| panic!("{e}"));
    let nqn = Nqn::new(TEST_NQN).unwrap_or_else(|e| panic!("{e}"));
    let seed = 0x5EED;
    let mut flushed_upto = 0usize;
    for round in 0..2 {
        let (mut child, addr) = spawn_target(&path);
        let fabric: Arc<dyn Fabric> = Arc::new(TcpFabric::new(addr, TcpOptions::default()));
        if round > 0 {
            // After the kill: everything acknowledged before the last completed Flush.
            let all: Vec<usize> = (0..flushed_upto).collect();
            verify(&fabric, &nqn, seed, &all);
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        let mut ctrl = connect_to(&fabric, &nqn, 1, 32);
        let mut q = ctrl.take_io_queues().remove(0);
        // SIGKILL from another thread while writes run (usually mid-batch), once a
        // good part of the workload is flushed: by progress, not by time, so a fast
        // machine cannot finish the workload first.
        let pid = child.id().to_string();
        let progress = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = Arc::clone(&progress);
        let killer = std::thread::spawn(move || {
            let give_up = Instant::now() + Duration::from_secs(60);
            while seen.load(std::sync::atomic::Ordering::Relaxed) < KILL_AFTER_EXTENTS
                && Instant::now() < give_up
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            Command::new("kill")
                .args(["-KILL", &pid])
                .status()
                .is_ok_and(|s| s.success())
        });
        let mut io = NsIo::new(&ctrl, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
        // Batches of 16 extents, each followed by a Flush; written extents never change.
        let mut next = 0usize;
        'work: while next + 16 <= 16384 {
            for i in next..next + 16 {
                let lba = i as u64 * u64::from(NLB);
                if io.write(lba, &pattern(seed, lba, BS as usize)).is_err() {
                    break 'work;
                }
            }
            if io.flush().is_err() {
                break;
            }
            next += 16;
            flushed_upto = next;
            progress.store(next, std::sync::atomic::Ordering::Relaxed);
        }
        assert!(
            killer.join().unwrap_or(false),
            "the target could not be killed"
        );
        assert!(next + 16 <= 16384, "the workload ended before the kill");
        let _ = child.wait();
        assert!(flushed_upto >= 16, "nothing was flushed before the kill");
    }
    let _ = std::fs::remove_file(&path);
}
