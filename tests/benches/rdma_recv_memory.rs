//! RDMA receive memory of a target poll group, with and without a shared receive queue
//! (`rdma.srq`), on the software verbs provider (loopback).
//!
//!     cargo bench -p nvmf-tests --bench rdma_recv_memory
//!
//! For 1, 16 and 256 I/O queues of one host (each `QUEUE_SIZE` entries, plus the admin
//! queue) served by one poll group, prints the bytes of command-capsule receive buffers
//! the group has registered (the `recv_buffer_bytes` gauge): one capsule (SQE + 8 KiB
//! in-capsule data) per queue entry without an SRQ, `rdma.srq_depth` capsules with one.
//! A measurement, not a timed test: nothing is asserted.

use nvmf_target::config::RDMA_DEFAULT_SRQ_DEPTH;
use nvmf_tests::{config, connect, start};

/// I/O queue entries the host asks for (the Linux host's default).
const QUEUE_SIZE: u16 = 128;
/// I/O queue counts measured.
const QUEUES: [u16; 3] = [1, 16, 256];

/// Bytes of receive buffers the poll group registered with `nr_io` I/O queues connected.
fn recv_bytes(srq: bool, nr_io: u16) -> u64 {
    let mut cfg = config(&["null:1G"]);
    cfg.transport.max_io_queues = nr_io.max(1);
    cfg.transport.max_queue_size = QUEUE_SIZE;
    cfg.transport.poll_groups = 1;
    cfg.rdma.srq = srq;
    let env = start(&cfg);
    let ctrl = connect(&env, nr_io, QUEUE_SIZE);
    assert_eq!(ctrl.io_queue_count(), nr_io, "I/O queues granted");
    let bytes = env.target.counters().recv_buffer_bytes;
    let _ = ctrl.shutdown();
    bytes
}

fn mib(b: u64) -> f64 {
    b as f64 / f64::from(1u32 << 20)
}

fn main() {
    println!(
        "RDMA receive memory per poll group (soft provider, loopback): {QUEUE_SIZE}-entry I/O \
         queues + the admin queue, 8 KiB in-capsule data, srq_depth {RDMA_DEFAULT_SRQ_DEPTH}"
    );
    println!(
        "{:>10} {:>22} {:>22} {:>8}",
        "I/O queues", "per-queue recv (bytes)", "SRQ recv (bytes)", "ratio"
    );
    for n in QUEUES {
        let without = recv_bytes(false, n);
        let with = recv_bytes(true, n);
        println!(
            "{n:>10} {without:>13} ({:>6.1} MiB) {with:>13} ({:>6.1} MiB) {:>8.2}",
            mib(without),
            mib(with),
            without as f64 / with.max(1) as f64
        );
    }
}
