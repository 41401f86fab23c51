//! Loopback benchmark: our host against our target over NVMe/RDMA on the software
//! verbs provider, one host thread and one target poll-group thread.
//!
//!     cargo bench -p nvmf-tests --bench loopback            # full (5 s per point)
//!     BENCH_SECS=1 BENCH_ONLY=QD32 cargo bench -p nvmf-tests --bench loopback
//!
//! Prints latency percentiles and IOPS per point, and what each I/O cost in verbs
//! calls: doorbells (post_send/post_recv calls) and work requests, host and target.
//!
//! The target's poll group is pinned to the first CPU this process may use and the
//! host's job thread to the second (`BENCH_PIN=0`: both left to the scheduler). Both
//! threads spin: left unpinned on a 2-CPU machine they sometimes share a core, and the
//! figure of a run was then one of two values far apart (issue 15: about 0.6M or 1.5M
//! IOPS at QD 32, nothing between).
//!
//! Pinning did not end that: the two modes follow the machine, not the program. On
//! the 2-vCPU VMs this runs on, the time for one cache line to go from one CPU to the
//! other and back switches between about 55 ns and about 310 ns for minutes at a time
//! (the hypervisor's placement of the vCPUs), and the loopback path, where host and
//! target hand every capsule over through shared memory, follows it. So each point
//! prints that round trip, measured just before it on the same two CPUs
//! (`cpu round trip`): compare figures taken at the same round trip only
//! (docs/bench-loopback.md).

use std::time::Duration;

use nvmf_common::cpus::CpuList;
use nvmf_common::types::Nsid;
use nvmf_initiator::perf::parse::{BsSpec, Rw};
use nvmf_initiator::perf::{run, PerfOptions};
use nvmf_target::config::PollMode;
use nvmf_tests::{config, connect, start};

struct Point {
    name: &'static str,
    ns: &'static str,
    rw: Rw,
    bs: u32,
    qd: u32,
}

fn main() {
    let secs: u64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let points = [
        Point {
            name: "null 4k randread QD1",
            ns: "null:1G",
            rw: Rw::RandRead,
            bs: 4096,
            qd: 1,
        },
        Point {
            name: "null 4k randread QD32",
            ns: "null:1G",
            rw: Rw::RandRead,
            bs: 4096,
            qd: 32,
        },
        Point {
            name: "null 4k randwrite QD32 (in-capsule)",
            ns: "null:1G",
            rw: Rw::RandWrite,
            bs: 4096,
            qd: 32,
        },
        Point {
            name: "ram 128k randread QD1",
            ns: "ram:1G",
            rw: Rw::RandRead,
            bs: 131072,
            qd: 1,
        },
        Point {
            name: "ram 128k randread QD32",
            ns: "ram:1G",
            rw: Rw::RandRead,
            bs: 131072,
            qd: 32,
        },
        Point {
            name: "ram 128k randwrite QD32 (RDMA READ)",
            ns: "ram:1G",
            rw: Rw::RandWrite,
            bs: 131072,
            qd: 32,
        },
    ];
    println!(
        "loopback benchmark: {secs} s per point, 1 host thread, 1 target poll group (poll mode)"
    );
    println!(
        "{:<38} {:>10} {:>10} {:>9} {:>9} {:>9} | {:>9} {:>9} | {:>9} {:>9}",
        "point",
        "IOPS",
        "MB/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "tgt db/IO",
        "tgt WR/IO",
        "host db/IO",
        "host WR/IO"
    );
    // BENCH_ONLY=substring runs the matching points only.
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let pins = placement();
    match &pins {
        Some((t, h)) => println!("target poll group on CPU {t}, host job on CPU {h}"),
        None => println!("threads not pinned"),
    }
    for p in points.iter().filter(|p| p.name.contains(only.as_str())) {
        if let Some((t, h)) = &pins {
            println!(
                "{:<38} cpu round trip {:.0} ns (CPU {t} <-> CPU {h})",
                "",
                round_trip_ns(t.for_index(0), h.for_index(0))
            );
        }
        let mut cfg = config(&[p.ns]);
        cfg.transport.poll_mode = PollMode::Poll;
        cfg.transport.cpus = pins.as_ref().map(|(t, _)| t.clone());
        let env = start(&cfg);
        let mut ctrl = connect(&env, 1, 256);
        let mut queues = ctrl.take_io_queues();
        let opts = PerfOptions {
            rw: p.rw,
            bs: BsSpec::fixed(u64::from(p.bs)),
            iodepth: p.qd,
            numjobs: 1,
            runtime: Some(Duration::from_secs(secs)),
            ramp_time: Duration::from_millis(500),
            nsid: Nsid(1),
            cpus: pins.as_ref().map(|(_, h)| h.clone()),
            ..PerfOptions::default()
        };
        let dev0 = env.target.device.counters();
        let tgt0 = env.target.counters();
        let report = match run(&ctrl, &mut queues, &opts) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{}: {e}", p.name);
                std::process::exit(1);
            }
        };
        let dev1 = env.target.device.counters();
        let tgt1 = env.target.counters();
        if report.failed() {
            eprintln!("{}: I/O errors in the run", p.name);
            std::process::exit(1);
        }
        // Counters cover ramp and measured time alike: divide by the commands the
        // target saw in the same window.
        let ios = (tgt1.commands - tgt0.commands).max(1) as f64;
        let tgt_db = (tgt1.send_doorbells - tgt0.send_doorbells + tgt1.recv_doorbells
            - tgt0.recv_doorbells) as f64;
        let tgt_wr = (tgt1.send_wrs - tgt0.send_wrs + tgt1.recv_wrs - tgt0.recv_wrs) as f64;
        let all_db = (dev1.post_send_calls - dev0.post_send_calls + dev1.post_recv_calls
            - dev0.post_recv_calls) as f64;
        let all_wr = (dev1.send_wrs - dev0.send_wrs + dev1.recv_wrs - dev0.recv_wrs) as f64;
        let h = report.latency();
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        let iops = report.iops();
        println!(
            "{:<38} {:>10.0} {:>10.1} {:>9.2} {:>9.2} {:>9.2} | {:>9.2} {:>9.2} | {:>9.2} {:>9.2}",
            p.name,
            iops,
            iops * f64::from(p.bs) / 1e6,
            us(0.50),
            us(0.99),
            us(0.999),
            tgt_db / ios,
            tgt_wr / ios,
            (all_db - tgt_db) / ios,
            (all_wr - tgt_wr) / ios,
        );
        let t = env.target.counters();
        println!(
            "{:<38} target: send doorbells/IO {:.3} (WRs/IO {:.2}), recv doorbells/IO {:.3}, sleeps {}",
            "",
            (t.send_doorbells - tgt0.send_doorbells) as f64 / ios,
            (t.send_wrs - tgt0.send_wrs) as f64 / ios,
            (t.recv_doorbells - tgt0.recv_doorbells) as f64 / ios,
            t.sleeps - tgt0.sleeps,
        );
        drop(queues);
        let _ = ctrl.shutdown();
    }
}

/// The target's and the host's CPU: the first two this process may use, unless
/// `BENCH_PIN=0` or only one is allowed.
fn placement() -> Option<(CpuList, CpuList)> {
    if std::env::var("BENCH_PIN").is_ok_and(|v| v == "0") {
        return None;
    }
    let allowed = nvmf_common::cpus::allowed_cpus()?;
    match allowed.as_slice() {
        [t, h, ..] => Some((CpuList::from_cpus(vec![*t])?, CpuList::from_cpus(vec![*h])?)),
        _ => None,
    }
}

/// Round trips of one cache line between CPUs `a` and `b`, for the probe.
const ROUND_TRIPS: u64 = 1_000_000;

/// Nanoseconds for one cache line to go from CPU `a` to CPU `b` and back: two pinned
/// threads take turns incrementing one atomic.
fn round_trip_ns(a: usize, b: usize) -> f64 {
    nvmf_common::cpus::cache_line_round_trip(a, b, ROUND_TRIPS).as_nanos() as f64
}
