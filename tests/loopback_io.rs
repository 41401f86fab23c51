//! End to end over the loopback transport: our host against our target, the whole
//! NVMe/RDMA data path (keyed SGLs, RDMA READ/WRITE, in-capsule data) on the software
//! verbs provider.

use nvmf_common::types::Nsid;
use nvmf_common::wire::identify::{cntrltype, sgls};
use nvmf_initiator::namespace::NsIo;
use nvmf_tests::{config, connect, pattern, start};

const MIB: u64 = 1 << 20;

#[test]
fn connect_and_identify() {
    let env = start(&config(&["ram:64M", "null:1G"]));
    let ctrl = connect(&env, 2, 64);
    let id = ctrl.id_ctrl();
    assert_eq!(id.cntrltype, cntrltype::IO);
    assert_eq!(id.subnqn, nvmf_tests::TEST_NQN);
    assert_eq!(id.cntlid, ctrl.cntlid().0);
    // Fabrics fields: 8 KiB in-capsule data, one CQE per response, keyed SGLs, 1 MiB MDTS.
    assert_eq!(id.ioccsz, (64 + 8192) / 16);
    assert_eq!(id.iorcsz, 1);
    assert_eq!(id.icdoff, 0);
    assert_eq!(id.msdbd, 1);
    assert_ne!(id.sgls & sgls::KEYED, 0);
    assert_ne!(id.sgls & sgls::SGL_OFFSET, 0);
    assert_eq!(id.max_transfer, Some(MIB));
    assert_eq!(id.sqes, 0x66);
    assert_eq!(id.cqes, 0x44);
    assert_eq!(id.aerl, 3);
    assert!(id.kas > 0);
    assert_eq!(ctrl.io_queue_count(), 2);
    let ns = ctrl.namespaces();
    assert_eq!(ns.len(), 2);
    assert_eq!(ns[0].nsid, Nsid(1));
    assert_eq!(ns[0].block_size, 512);
    assert_eq!(ns[0].nsze * 512, 64 * MIB);
    assert_eq!(ns[1].nsid, Nsid(2));
    assert_eq!(ns[1].nsze * 512, 1024 * MIB);
    assert!(
        ns[0].uuid.is_some(),
        "UUID from the namespace descriptor list"
    );
    assert_ne!(ns[0].uuid, ns[1].uuid);
    ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
}

fn write_read_verify(bs: usize, qd: usize, count: usize) {
    let env = start(&config(&["ram:256M"]));
    let mut ctrl = connect(&env, 1, 256);
    nvmf_tests::write_read_verify(&mut ctrl, bs, qd, count);
    ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
}

#[test]
fn write_read_512b_qd1() {
    write_read_verify(512, 1, 64);
}

#[test]
fn write_read_4k_qd32() {
    write_read_verify(4096, 32, 2048);
}

#[test]
fn write_read_8k_in_capsule_qd8() {
    // 8 KiB is exactly the in-capsule limit: data travels inside the command capsule.
    write_read_verify(8192, 8, 256);
}

#[test]
fn write_read_16k_rdma_read_qd128() {
    // Above the in-capsule limit: the target pulls write data with RDMA READ.
    write_read_verify(16384, 128, 1024);
}

#[test]
fn write_read_128k_qd16() {
    write_read_verify(128 * 1024, 16, 128);
}

#[test]
fn write_read_1m_qd128_waits_for_buffers() {
    // 128 MiB in flight exceeds the poll group's 64 MiB data arena: commands wait for
    // buffers and still complete in order of availability.
    write_read_verify(1 << 20, 128, 200);
}

#[test]
fn flush_write_zeroes_deallocate() {
    let env = start(&config(&["ram:64M"]));
    let mut ctrl = connect(&env, 1, 32);
    let mut queues = ctrl.take_io_queues();
    let mut io = NsIo::new(&ctrl, &mut queues[0], Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    let data = pattern(7, 0, 64 * 1024);
    io.write(1000, &data)
        .unwrap_or_else(|e| panic!("write: {e}"));
    io.flush().unwrap_or_else(|e| panic!("flush: {e}"));
    let mut back = vec![0u8; data.len()];
    io.read(1000, &mut back)
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert_eq!(back, data);
    // Write Zeroes over blocks 1000..1016: those read as zero, the rest keeps its data.
    io.write_zeroes(1000, 16)
        .unwrap_or_else(|e| panic!("write zeroes: {e}"));
    io.read(1000, &mut back)
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert!(back[..16 * 512].iter().all(|&b| b == 0));
    assert_eq!(back[16 * 512..], data[16 * 512..]);
    // Deallocate blocks 1016..1128: the RAM backend reads deallocated blocks as zero.
    io.deallocate(&[(1016, 112)])
        .unwrap_or_else(|e| panic!("deallocate: {e}"));
    io.read(1000, &mut back)
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert!(back.iter().all(|&b| b == 0));
    // Compare succeeds on equal data and fails with Compare Failure otherwise.
    io.write(2000, &data[..4096])
        .unwrap_or_else(|e| panic!("write: {e}"));
    io.compare(2000, &data[..4096])
        .unwrap_or_else(|e| panic!("compare: {e}"));
    let err = io.compare(2000, &data[4096..8192]).err();
    let st = err
        .and_then(|e| e.status())
        .unwrap_or_else(|| panic!("compare must fail"));
    assert!(st.is(
        nvmf_common::wire::status::Sct::MediaError,
        nvmf_common::wire::status::media::COMPARE_FAILURE
    ));
}

#[test]
fn many_queues_in_parallel() {
    let env = start(&config(&["ram:64M"]));
    let mut ctrl = connect(&env, 4, 64);
    let queues = ctrl.take_io_queues();
    assert_eq!(queues.len(), 4);
    let ctrl = std::sync::Arc::new(ctrl);
    let handles: Vec<_> = queues
        .into_iter()
        .enumerate()
        .map(|(i, mut q)| {
            let ctrl = ctrl.clone();
            std::thread::spawn(move || {
                let mut io = NsIo::new(&ctrl, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
                for j in 0..50u64 {
                    let lba = (i as u64) * 10_000 + j * 8;
                    let d = pattern(i as u64, lba, 4096);
                    io.write(lba, &d).unwrap_or_else(|e| panic!("write: {e}"));
                    let mut back = vec![0u8; 4096];
                    io.read(lba, &mut back)
                        .unwrap_or_else(|e| panic!("read: {e}"));
                    assert_eq!(back, d);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap_or_else(|_| panic!("worker panicked"));
    }
}

/// The loopback I/O path both ways: with one shared receive queue per poll group (the
/// default, `rdma.srq: true`) and with receives per queue (`rdma.srq: false`). Each run
/// checks the group's registered receive memory, so the mode is the one asked for.
mod srq_on_and_off {
    use super::*;
    use nvmf_target::config::RDMA_DEFAULT_SRQ_DEPTH;

    /// Bytes of one receive buffer: the SQE and 8 KiB of in-capsule data.
    const CAPSULE: u64 = 64 + 8192;
    /// How long a SEND waits for a receive before failing with RNR retry exceeded.
    const RNR_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

    fn env(srq: bool, srq_depth: u32) -> nvmf_tests::Env {
        let mut cfg = config(&["ram:64M"]);
        cfg.rdma.srq = srq;
        cfg.rdma.srq_depth = srq_depth;
        start(&cfg)
    }

    /// Runs `write_read_verify` and several queues in parallel, then checks the
    /// receive memory of the poll group.
    fn io_both_ways(srq: bool, srq_depth: u32, nr_io: u16, queue_size: u16, qd: usize) {
        let env = env(srq, srq_depth);
        // Senders that find the SRQ empty wait for reposts as an RC QP with unlimited
        // RNR retries would (rdma_cm's default), not the soft provider's 100 ms: on a
        // loaded machine the target's thread may not run that soon.
        env.target.device.set_rnr_timeout(RNR_PATIENCE);
        let mut ctrl = connect(&env, nr_io, queue_size);
        let recv_bytes = env.target.counters().recv_buffer_bytes;
        if srq {
            assert_eq!(recv_bytes, u64::from(srq_depth) * CAPSULE);
        } else {
            // One capsule per entry of every queue (admin queue included).
            assert_eq!(recv_bytes % CAPSULE, 0, "{recv_bytes}");
            assert!(
                recv_bytes >= u64::from(nr_io) * u64::from(queue_size) * CAPSULE,
                "{recv_bytes}"
            );
        }
        let mut queues = ctrl.take_io_queues();
        let ctrl = std::sync::Arc::new(ctrl);
        let handles: Vec<_> = queues
            .drain(..)
            .enumerate()
            .map(|(i, mut q)| {
                let ctrl = ctrl.clone();
                std::thread::spawn(move || {
                    let mut io =
                        NsIo::new(&ctrl, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
                    let bs = 8192;
                    let bufs: Vec<_> = (0..qd)
                        .map(|_| ctrl.alloc(bs).unwrap_or_else(|e| panic!("alloc: {e}")))
                        .collect();
                    let nblocks = (bs / io.info().block_size as usize) as u32;
                    let lba = |k: usize| (i as u64) * 10_000 + (k as u64) * u64::from(nblocks);
                    for round in 0..8u64 {
                        // `qd` in-capsule writes in flight at once, then read back.
                        for (k, b) in bufs.iter().enumerate() {
                            b.write_at(0, &pattern(round, lba(k), bs));
                            io.submit_write(k as u64, lba(k), nblocks, b, false)
                                .unwrap_or_else(|e| panic!("submit write: {e}"));
                        }
                        io.queue().flush().unwrap_or_else(|e| panic!("flush: {e}"));
                        let mut completed = 0;
                        let mut done = Vec::new();
                        while completed < qd {
                            done.clear();
                            io.queue()
                                .poll(&mut done)
                                .unwrap_or_else(|e| panic!("poll: {e}"));
                            for c in &done {
                                assert!(c.status.is_success(), "write {}: {}", c.tag, c.status);
                            }
                            completed += done.len();
                        }
                        for k in 0..qd {
                            let mut back = vec![0u8; bs];
                            io.read(lba(k), &mut back)
                                .unwrap_or_else(|e| panic!("read: {e}"));
                            assert_eq!(back, pattern(round, lba(k), bs), "queue {i} block {k}");
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap_or_else(|_| panic!("worker panicked"));
        }
        let ctrl = std::sync::Arc::try_unwrap(ctrl).unwrap_or_else(|_| panic!("still shared"));
        ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
    }

    #[test]
    fn with_srq() {
        io_both_ways(true, RDMA_DEFAULT_SRQ_DEPTH, 4, 64, 32);
    }

    #[test]
    fn without_srq() {
        io_both_ways(false, RDMA_DEFAULT_SRQ_DEPTH, 4, 64, 32);
    }

    /// An SRQ shallower than what the hosts keep in flight (4 queues × 32 commands
    /// against 32 receives): senders wait for reposts (RNR), nothing is lost.
    #[test]
    fn with_an_srq_smaller_than_the_commands_in_flight() {
        io_both_ways(true, 32, 4, 64, 32);
    }

    /// A device that cannot make an SRQ (here: the soft device told to refuse) gets
    /// per-queue receives although `rdma.srq` is on, and serves I/O.
    #[test]
    fn falls_back_to_per_queue_receives_when_the_device_has_no_srq() {
        use nvmf_initiator::controller::{ConnectOptions, Controller};
        use nvmf_initiator::transport::rdma::RdmaFabric;
        use nvmf_target::rdma::{listen_addr, RdmaServer};
        use nvmf_target::target::Target;
        use nvmf_verbs::soft::SoftDevice;
        use nvmf_verbs::Device;

        let cfg = config(&["ram:64M"]);
        assert!(cfg.rdma.srq, "on by default");
        let target = Target::from_config(&cfg).unwrap_or_else(|e| panic!("target: {e}"));
        let device = SoftDevice::new();
        device.set_srq_supported(false);
        let dev: std::sync::Arc<dyn Device> = device.clone();
        let ports = target.ports();
        let server = RdmaServer::start(target.clone(), dev.clone(), &ports)
            .unwrap_or_else(|e| panic!("rdma: {e}"));
        let addr = listen_addr(ports.first().unwrap_or_else(|| panic!("a port")));
        let fabric = RdmaFabric::loopback(dev, addr).unwrap_or_else(|e| panic!("fabric: {e}"));
        let nqn = cfg.subsystems[0].nqn.clone();
        let mut o = ConnectOptions::new(nqn, nvmf_tests::hostnqn(), nvmf_tests::TEST_HOSTID);
        o.nr_io_queues = 1;
        o.queue_size = 128;
        let mut ctrl = Controller::connect(std::sync::Arc::new(fabric), o)
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let recv_bytes = nvmf_target::runtime::PortServer::counters(&server).recv_buffer_bytes;
        assert_eq!(recv_bytes % CAPSULE, 0, "{recv_bytes}");
        assert!(recv_bytes >= 128 * CAPSULE, "{recv_bytes}");
        assert_ne!(recv_bytes, u64::from(RDMA_DEFAULT_SRQ_DEPTH) * CAPSULE);
        nvmf_tests::write_read_verify(&mut ctrl, 4096, 32, 512);
        ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
        server.shutdown();
    }

    /// Hosts that vanish with commands in flight leave nothing behind: after ten
    /// controllers dropped mid-I/O (queues closed, no Disconnect), every queue is freed,
    /// the group's SRQ (if any) has all `srq_depth` receives posted again, and a new
    /// host is served.
    fn vanishing_hosts(srq: bool) {
        const DEPTH: u32 = 64;
        const IN_FLIGHT: usize = 32;
        let env = env(srq, DEPTH);
        let posted_when_idle = if srq { u64::from(DEPTH) } else { 0 };
        env.target.device.set_rnr_timeout(RNR_PATIENCE);
        for _ in 0..10 {
            let mut ctrl = connect(&env, 2, 64);
            let mut queues = ctrl.take_io_queues();
            let bufs: Vec<_> = (0..IN_FLIGHT)
                .map(|_| ctrl.alloc(4096).unwrap_or_else(|e| panic!("alloc: {e}")))
                .collect();
            for (qn, q) in queues.iter_mut().enumerate() {
                let mut io = NsIo::new(&ctrl, q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
                for (k, b) in bufs.iter().enumerate() {
                    let lba = (qn * IN_FLIGHT + k) as u64 * 8;
                    io.submit_write(k as u64, lba, 8, b, false)
                        .unwrap_or_else(|e| panic!("submit write: {e}"));
                }
                io.queue().flush().unwrap_or_else(|e| panic!("flush: {e}"));
            }
            // Gone without waiting: the target sees the queues' QPs die mid-I/O.
            drop(queues);
            drop(ctrl);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let c = env.target.counters();
            if c.srq_receives_posted == posted_when_idle && c.queues == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} of {posted_when_idle} SRQ receives posted, {} queues left",
                c.srq_receives_posted,
                c.queues
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut ctrl = connect(&env, 1, 64);
        nvmf_tests::write_read_verify(&mut ctrl, 4096, IN_FLIGHT, 256);
        ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
    }

    #[test]
    fn hosts_vanishing_mid_io_leave_no_srq_buffer_behind() {
        vanishing_hosts(true);
    }

    #[test]
    fn hosts_vanishing_mid_io_leave_no_queue_behind_without_srq() {
        vanishing_hosts(false);
    }

    #[test]
    fn write_read_16k_rdma_read_qd128_without_srq() {
        let env = env(false, RDMA_DEFAULT_SRQ_DEPTH);
        let mut ctrl = connect(&env, 1, 256);
        nvmf_tests::write_read_verify(&mut ctrl, 16384, 128, 1024);
        ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
    }
}
