//! What `perf` costs per I/O over the raw host library: the same 4 KiB random reads
//! against a null namespace over loopback, once through a minimal submit/poll loop on
//! `Queue` (no timing, no accounting) and once through `perf::run` (per-I/O latency
//! into an HDR histogram, timeline, progress counters). Rounds alternate and the best
//! of each is kept, so background load hurts both sides alike.
//!
//!     cargo bench -p nvmf-tests --bench perf_overhead        # BENCH_SECS (2), BENCH_ROUNDS (3)
//!
//! At QD 1 every I/O waits for the previous one, so the difference in time per I/O is
//! what perf adds to each I/O's path (the aim is under 1 µs).

use std::time::{Duration, Instant};

use nvmf_common::types::Nsid;
use nvmf_initiator::command;
use nvmf_initiator::perf::parse::{BsSpec, Rw};
use nvmf_initiator::perf::{run, PerfOptions};
use nvmf_initiator::queue::{Completion, Queue};
use nvmf_initiator::transport::{DataDir, Fabric, IoBuf};
use nvmf_target::config::PollMode;
use nvmf_tests::{config, connect, start};

/// Bytes per I/O.
const BS: u32 = 4096;
/// Namespace blocks used (512-byte blocks of null:1G).
const SPAN_BLOCKS: u64 = 2 * 1024 * 1024;

/// IOPS of a bare loop: random 4 KiB reads, `qd` in flight, for `secs`.
fn raw(q: &mut Queue, fabric: &dyn Fabric, qd: usize, secs: Duration) -> f64 {
    let bufs: Vec<IoBuf> = (0..qd)
        .map(|_| {
            fabric
                .alloc(BS as usize)
                .unwrap_or_else(|e| panic!("alloc: {e}"))
        })
        .collect();
    let nblocks = BS / 512;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next_lba = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % (SPAN_BLOCKS / u64::from(nblocks))) * u64::from(nblocks)
    };
    let mut comps: Vec<Completion> = Vec::with_capacity(qd);
    let mut free: Vec<usize> = (0..qd).collect();
    let mut done = 0u64;
    let start = Instant::now();
    let end = start + secs;
    let mut inflight = 0;
    loop {
        let stop = Instant::now() >= end;
        if !stop {
            let now = Instant::now();
            while let Some(s) = free.pop() {
                let sqe = command::read(Nsid(1), next_lba(), nblocks, false)
                    .unwrap_or_else(|e| panic!("sqe: {e}"));
                q.submit_at(sqe, bufs.get(s), DataDir::FromCtrl, s as u64, now)
                    .unwrap_or_else(|e| panic!("submit: {e}"));
                inflight += 1;
            }
            q.flush().unwrap_or_else(|e| panic!("flush: {e}"));
        }
        comps.clear();
        q.poll(&mut comps).unwrap_or_else(|e| panic!("poll: {e}"));
        for c in &comps {
            assert!(c.status.is_success(), "read failed: {}", c.status);
            free.push(c.tag as usize);
            inflight -= 1;
            done += 1;
        }
        if stop && inflight == 0 {
            break;
        }
    }
    done as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let env_num = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let secs = Duration::from_secs(env_num("BENCH_SECS", 2));
    let rounds = env_num("BENCH_ROUNDS", 3);
    let mut cfg = config(&["null:1G"]);
    cfg.transport.poll_mode = PollMode::Poll;
    let env = start(&cfg);
    let mut ctrl = connect(&env, 1, 64);
    let mut queues = ctrl.take_io_queues();
    println!(
        "perf overhead over the raw library: null namespace, loopback, 4 KiB random read, \
         {rounds} rounds of {secs:?}, best of each"
    );
    println!(
        "{:<6} {:>12} {:>12} {:>12} {:>12} {:>14}",
        "QD", "raw IOPS", "perf IOPS", "raw ns/IO", "perf ns/IO", "overhead ns/IO"
    );
    for qd in [1usize, 32] {
        let (mut best_raw, mut best_perf) = (0f64, 0f64);
        for _ in 0..rounds {
            let q = queues.first_mut().unwrap_or_else(|| panic!("no I/O queue"));
            best_raw = best_raw.max(raw(q, env.fabric.as_ref(), qd, secs));
            let o = PerfOptions {
                rw: Rw::RandRead,
                bs: BsSpec::fixed(u64::from(BS)),
                iodepth: qd as u32,
                numjobs: 1,
                runtime: Some(secs),
                size: Some(SPAN_BLOCKS * 512),
                nsid: Nsid(1),
                ..PerfOptions::default()
            };
            let r = run(&ctrl, &mut queues, &o).unwrap_or_else(|e| panic!("perf: {e}"));
            assert!(!r.failed(), "perf run failed");
            best_perf = best_perf.max(r.iops());
        }
        let (rn, pn) = (1e9 / best_raw, 1e9 / best_perf);
        println!(
            "{qd:<6} {best_raw:>12.0} {best_perf:>12.0} {rn:>12.1} {pn:>12.1} {:>14.1}",
            pn - rn
        );
    }
    drop(queues);
    let _ = ctrl.shutdown();
}
