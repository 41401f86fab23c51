//! Ceph RBD namespaces end to end (issue 17, part 1): each test starts its own private
//! cluster (`scripts/ceph-test-cluster`: one monitor, one memstore OSD, no auth) and
//! exports `rbd/img` over loopback (NVMe/RDMA on the software provider) or NVMe/TCP.
//! A cluster that cannot start fails the test with the reason: these are never skipped.
//!
//! Covered: write/read/verify at several block sizes and depths; Flush, Write Zeroes
//! and Deallocate with interrupt-mode poll groups (woken by the channel's eventfd); the Volatile Write Cache reported from `rbd_cache`; `rbd resize`
//! while a host is connected (`ctl resize-ns` → Namespace Attribute Changed, new size);
//! the OSD stopped under I/O, shorter than the host's command timeout (commands wait,
//! none fails) and longer (commands time out host-side; after the OSD resumes and the
//! host reconnects, every acknowledged write reads back); the OSD stopped with
//! `ceph_options: { rados_osd_op_timeout: "2" }` (a write fails with Namespace Not
//! Ready within a bound instead of waiting, and I/O works again once the OSD runs).

#![cfg_attr(not(feature = "rbd"), allow(unused))]

/// Without the feature there is nothing to test: say so instead of passing silently.
#[cfg(not(feature = "rbd"))]
#[test]
fn rbd_feature_is_enabled() {
    panic!("nvmf-tests was built without its `rbd` feature: the RBD tests did not run");
}

#[cfg(feature = "rbd")]
mod rbd {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use nvmf_common::types::{Nqn, Nsid};
    use nvmf_common::wire::admin::{aer_notice, aer_type};
    use nvmf_common::wire::identify::{vwc, IdentifyController};
    use nvmf_initiator::controller::{ConnectOptions, Controller};
    use nvmf_initiator::namespace::NsIo;
    use nvmf_initiator::transport::tcp::TcpOptions;
    use nvmf_initiator::transport::Fabric;
    use nvmf_target::config::{Config, PollMode};
    use nvmf_target::live::ctl::{handle, Request};
    use nvmf_target::live::Op;
    use nvmf_tests::ceph_cluster::CephCluster;
    use nvmf_tests::ops_support::{
        changed_ns_list, connect_as, free_port, nsze, start_live, wait_aer,
    };
    use nvmf_tests::{
        config, connect, connect_to, connect_with_timeout, hostnqn, pattern, start, start_tcp,
        write_read_verify, TEST_HOSTID,
    };

    /// The image every test exports, and its size (memstore keeps written bytes in RAM).
    const IMAGE: &str = "rbd:rbd/img";
    const IMAGE_SIZE: &str = "64M";
    const IMAGE_BYTES: u64 = 64 << 20;
    const BLOCK: usize = 512;
    /// How long the OSD is stopped in the "shorter than the host timeout" case.
    const SHORT_STALL: Duration = Duration::from_secs(3);
    /// Command timeout of the host in the "longer than the host timeout" case.
    const SHORT_HOST_TIMEOUT: Duration = Duration::from_secs(2);
    /// How long the OSD is stopped in that case.
    const LONG_STALL: Duration = Duration::from_secs(4);
    /// The first LBA of the image's second half: each stall case writes its own half.
    const HALF_LBA: u64 = IMAGE_BYTES / 2 / BLOCK as u64;

    fn rbd_config(cluster: &CephCluster) -> Config {
        let mut cfg = config(&[IMAGE]);
        cluster.attach(&mut cfg);
        cfg
    }

    #[test]
    fn loopback_write_read_verify() {
        let cluster = CephCluster::start("loopback", IMAGE_SIZE);
        let env = start(&rbd_config(&cluster));
        for (bs, qd, count) in [(4096, 16, 256), (128 << 10, 4, 64), (512, 1, 32)] {
            // write_read_verify takes the controller's I/O queues: one controller each.
            let mut ctrl = connect(&env, 1, 64);
            write_read_verify(&mut ctrl, bs, qd, count);
            ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
        }
    }

    #[test]
    fn tcp_io_flush_write_zeroes_deallocate() {
        let cluster = CephCluster::start("tcp", IMAGE_SIZE);
        // Interrupt mode: the poll groups sleep until a wait handle fires, so every
        // completion must come through the channel's eventfd.
        let mut cfg = rbd_config(&cluster);
        cfg.transport.poll_mode = PollMode::Interrupt;
        let env = start_tcp(&cfg, TcpOptions::default());
        let mut ctrl = connect_to(&env.fabric, &env.nqn, 2, 64);
        // rbd_cache defaults to on: a volatile write cache the host must flush.
        let idc = IdentifyController::new_checked(ctrl.identify_controller_raw())
            .unwrap_or_else(|e| panic!("identify controller: {e}"));
        assert_ne!(idc.vwc() & vwc::PRESENT, 0, "VWC not reported");
        let mut verify = connect_to(&env.fabric, &env.nqn, 1, 64);
        write_read_verify(&mut verify, 4096, 32, 512);
        verify
            .shutdown()
            .unwrap_or_else(|e| panic!("shutdown: {e}"));
        let mut q = ctrl.take_io_queues().remove(0);
        {
            let mut io = NsIo::new(&ctrl, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(io.info().nsze * BLOCK as u64, IMAGE_BYTES);
            let lba = 8192;
            let d = pattern(17, lba, 64 << 10);
            io.write(lba, &d).unwrap_or_else(|e| panic!("write: {e}"));
            io.flush().unwrap_or_else(|e| panic!("flush: {e}"));
            // Write Zeroes over the middle 8 KiB.
            io.write_zeroes(lba + 8, 16)
                .unwrap_or_else(|e| panic!("write zeroes: {e}"));
            let mut back = vec![0xFFu8; d.len()];
            io.read(lba, &mut back)
                .unwrap_or_else(|e| panic!("read: {e}"));
            assert!(back[..4096] == d[..4096]);
            assert!(back[4096..12288].iter().all(|&b| b == 0), "not zeroed");
            assert!(back[12288..] == d[12288..]);
            // Deallocate a whole 4 MiB object: it reads back as zeroes afterwards.
            io.deallocate(&[(0, (4 << 20) / BLOCK as u32)])
                .unwrap_or_else(|e| panic!("deallocate: {e}"));
            let mut back = vec![0xFFu8; 4096];
            io.read(0, &mut back)
                .unwrap_or_else(|e| panic!("read: {e}"));
            assert!(
                back.iter().all(|&b| b == 0),
                "deallocated object reads data"
            );
            // The last block, and one past it.
            let last = IMAGE_BYTES / BLOCK as u64 - 1;
            io.write(last, &pattern(3, last, BLOCK))
                .unwrap_or_else(|e| panic!("write last: {e}"));
            assert!(io.write(last + 1, &pattern(3, last, BLOCK)).is_err());
        }
        drop(q);
        ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
    }

    const SUB: &str = "nqn.2024-01.io.nvmf-rs:rbd";
    /// Writes timed after each resize, and the time they may take: a few ms each when
    /// the eventfd wakes the poll group, the 20 ms sleep limit each when it does not.
    const QD1_WRITES: u64 = 50;
    const QD1_BUDGET: Duration = Duration::from_millis(500);

    #[test]
    fn resize_while_connected() {
        let cluster = CephCluster::start("resize", IMAGE_SIZE);
        let yaml = format!(
        "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: \"{}\", subsystems: [{SUB}] }}\n\
         subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    namespaces:\n      \
         - {{ nsid: 1, device_path: \"{IMAGE}\", ceph_conf: \"{}\" }}\n",
        free_port(),
        cluster.conf().display()
    );
        let t = start_live(&yaml, None);
        let sub = Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"));
        let c = connect_as(&t.fabric(1), 1, &sub, 1, 0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(nsze(&c, 1) * BLOCK as u64, IMAGE_BYTES);
        let resize = || {
            let r = handle(
                &t.live,
                &Request::Change(Op::ResizeNs {
                    nqn: SUB.into(),
                    nsid: 1,
                    size: None,
                }),
            );
            assert!(r.ok, "resize-ns: {:?}", r.error);
            r.changes
        };
        let same = resize();
        assert!(same.iter().any(|c| c.contains("unchanged")), "{same:?}");

        cluster.rbd(&["resize", "rbd/img", "--size", "96M"]);
        // librbd's header watch makes the new size visible shortly after the CLI returns.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let changes = resize();
            if changes.iter().any(|c| c.contains("resized")) {
                break;
            }
            assert!(Instant::now() < deadline, "resize not noticed: {changes:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
        let dw0 = wait_aer(&c);
        assert_eq!(dw0 & 0x7, u32::from(aer_type::NOTICE), "dw0 {dw0:#x}");
        assert_eq!(
            (dw0 >> 8) & 0xFF,
            u32::from(aer_notice::NS_ATTR_CHANGED),
            "dw0 {dw0:#x}"
        );
        assert_eq!(changed_ns_list(&c), vec![1]);
        assert_eq!(nsze(&c, 1) * BLOCK as u64, 96 << 20);

        // Each resize replaces the backend and its channels (new eventfds, whose
        // numbers may be those of closed ones): I/O at QD 1 on interrupt-mode poll
        // groups must still be woken by the new eventfd, not by the sleep timeout.
        for (size, bytes) in [("128M", 128u64 << 20), ("160M", 160 << 20)] {
            let mut w = connect_as(&t.fabric(1), 2, &sub, 1, 0).unwrap_or_else(|e| panic!("{e}"));
            let mut q = w.take_io_queues().remove(0);
            {
                let mut io = NsIo::new(&w, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
                let started = Instant::now();
                for i in 0..QD1_WRITES {
                    io.write(i * 8, &pattern(5, i * 8, 4096))
                        .unwrap_or_else(|e| panic!("write: {e}"));
                }
                let took = started.elapsed();
                eprintln!("{QD1_WRITES} QD1 writes in {took:?}");
                assert!(
                    took < QD1_BUDGET,
                    "{QD1_WRITES} QD1 writes took {took:?}: completions not woken by the eventfd"
                );
            }
            drop(q);
            w.shutdown().unwrap_or_else(|e| panic!("{e}"));
            cluster.rbd(&["resize", "rbd/img", "--size", size]);
            let deadline = Instant::now() + Duration::from_secs(10);
            while nsze(&c, 1) * BLOCK as u64 != bytes {
                let _ = resize();
                assert!(Instant::now() < deadline, "resize to {size} not noticed");
                std::thread::sleep(Duration::from_millis(100));
            }
        }

        // `ctl add-ns` with the cluster's configuration: a second image while running.
        cluster.rbd(&["create", "rbd/img2", "--size", "8M"]);
        let r = handle(
            &t.live,
            &Request::Change(Op::AddNs {
                nqn: SUB.into(),
                device_path: "rbd:rbd/img2".into(),
                nsid: Some(2),
                ceph_conf: Some(cluster.conf().to_path_buf()),
                client_id: Some("admin".into()),
                keyring: None,
                ceph_options: Default::default(),
                create: Default::default(),
                auto_visible: true,
            }),
        );
        assert!(r.ok, "add-ns: {:?}", r.error);
        assert_eq!(nsze(&c, 2) * BLOCK as u64, 8 << 20);
        // The Ceph keys belong to rbd: namespaces only.
        let r = handle(
            &t.live,
            &Request::Change(Op::AddNs {
                nqn: SUB.into(),
                device_path: "ram:1M".into(),
                nsid: Some(3),
                ceph_conf: Some(cluster.conf().to_path_buf()),
                client_id: None,
                keyring: None,
                ceph_options: Default::default(),
                create: Default::default(),
                auto_visible: true,
            }),
        );
        assert!(!r.ok, "ceph_conf accepted on a RAM namespace");
    }

    /// `rbd info --format json` of `image`: (size, features), or None if it is gone.
    fn image_info(cluster: &CephCluster, image: &str) -> Option<(u64, Vec<String>)> {
        let names = cluster.rbd(&["ls", "rbd", "--format", "json"]);
        let names: Vec<String> = serde_json::from_str(&names).unwrap_or_default();
        if !names.iter().any(|n| n == image) {
            return None;
        }
        let info = cluster.rbd(&["info", &format!("rbd/{image}"), "--format", "json"]);
        let v: serde_json::Value = serde_json::from_str(&info).unwrap_or_default();
        let features = v["features"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|f| f.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        Some((v["size"].as_u64().unwrap_or(0), features))
    }

    /// add-ns --size creates an image (features as asked), an existing image, a
    /// missing pool, a size of 0 or one larger than the cluster are refused with
    /// nothing changed, resize-ns --size grows it (a shrink refused), remove-ns
    /// --delete-backing removes it, and never an image the target did not create.
    #[test]
    fn provisioning_creates_grows_and_deletes_images() {
        use nvmf_target::live::{Create, RefusalKind};
        let cluster = CephCluster::start("provision", IMAGE_SIZE);
        let yaml = format!(
            "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: \"{}\", subsystems: [{SUB}] }}\n\
             subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    namespaces:\n      \
             - {{ nsid: 1, device_path: \"{IMAGE}\", ceph_conf: \"{}\" }}\n",
            free_port(),
            cluster.conf().display()
        );
        // memstore reports no capacity: the pool's quota is what "too large" means.
        cluster.ceph(&["osd", "pool", "set-quota", "rbd", "max_bytes", "1073741824"]);
        let t = start_live(&yaml, None);
        let add = |nsid: u32, spec: &str, size: u64, features: Option<&str>| Op::AddNs {
            nqn: SUB.into(),
            device_path: spec.into(),
            nsid: Some(nsid),
            ceph_conf: Some(cluster.conf().to_path_buf()),
            client_id: None,
            keyring: None,
            ceph_options: Default::default(),
            auto_visible: true,
            create: Create {
                size: Some(size),
                rbd_features: features.map(String::from),
                ..Create::default()
            },
        };
        t.live
            .execute(&add(
                2,
                "rbd:rbd/made",
                32 << 20,
                Some("layering,exclusive-lock"),
            ))
            .unwrap_or_else(|e| panic!("add-ns --size: {e}"));
        let (size, features) = image_info(&cluster, "made").unwrap_or_else(|| panic!("no image"));
        assert_eq!(size, 32 << 20);
        assert!(
            features.contains(&"layering".into()) && features.contains(&"exclusive-lock".into()),
            "{features:?}"
        );

        for (op, kind, what) in [
            (
                add(3, IMAGE, 8 << 20, None),
                RefusalKind::AlreadyExists,
                "an existing image",
            ),
            (
                add(3, "rbd:nopool/x", 8 << 20, None),
                RefusalKind::NotFound,
                "a missing pool",
            ),
            (
                add(3, "rbd:rbd/zero", 0, None),
                RefusalKind::InvalidArgument,
                "size 0",
            ),
            (
                add(3, "rbd:rbd/huge", 2 << 30, None),
                RefusalKind::InvalidArgument,
                "larger than the pool quota",
            ),
            (
                add(3, "rbd:rbd/odd", 8 << 20, Some("teleport")),
                RefusalKind::InvalidArgument,
                "an unknown feature",
            ),
        ] {
            let e = t.live.execute(&op).expect_err(what);
            assert_eq!(e.kind, kind, "{what}: {e}");
            if what.contains("larger") {
                assert!(e.message.contains("pool rbd's quota"), "{e}");
            }
        }
        for gone in ["zero", "huge", "odd"] {
            assert!(image_info(&cluster, gone).is_none(), "{gone} was created");
        }
        assert_eq!(image_info(&cluster, "img").map(|i| i.0), Some(IMAGE_BYTES));

        let resize = |size: u64| Op::ResizeNs {
            nqn: SUB.into(),
            nsid: 2,
            size: Some(size),
        };
        t.live
            .execute(&resize(48 << 20))
            .unwrap_or_else(|e| panic!("resize-ns --size: {e}"));
        assert_eq!(image_info(&cluster, "made").map(|i| i.0), Some(48 << 20));
        let e = t.live.execute(&resize(16 << 20)).expect_err("a shrink");
        assert_eq!(e.kind, RefusalKind::InvalidArgument, "{e}");
        assert_eq!(image_info(&cluster, "made").map(|i| i.0), Some(48 << 20));

        let remove = |nsid: u32| Op::RemoveNs {
            nqn: SUB.into(),
            nsid,
            delete_backing: true,
        };
        let e = t
            .live
            .execute(&remove(1))
            .expect_err("an image the target did not create");
        assert_eq!(e.kind, RefusalKind::FailedPrecondition, "{e}");
        assert!(image_info(&cluster, "img").is_some());
        t.live
            .execute(&remove(2))
            .unwrap_or_else(|e| panic!("remove-ns --delete-backing: {e}"));
        assert!(
            image_info(&cluster, "made").is_none(),
            "the image is still there"
        );
    }

    /// Options for a host with `timeout` per command.
    fn opts_with_timeout(nqn: &Nqn, timeout: Duration) -> ConnectOptions {
        let mut o = ConnectOptions::new(nqn.clone(), hostnqn(), TEST_HOSTID);
        o.nr_io_queues = 1;
        o.queue_size = 32;
        o.command_timeout = timeout;
        o
    }

    /// Writes 4 KiB extents cycling through `first_lba..end_lba` (one per command, `qd` in
    /// flight) until `stop`; returns the LBAs whose writes the target acknowledged and
    /// how many failed.
    fn write_until(
        ctrl: &Controller,
        q: &mut nvmf_initiator::queue::Queue,
        qd: usize,
        first_lba: u64,
        end_lba: u64,
        stop: &AtomicBool,
    ) -> (Vec<u64>, usize) {
        let mut io = NsIo::new(ctrl, q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
        let bs = 4096usize;
        let nb = (bs / BLOCK) as u32;
        let bufs: Vec<_> = (0..qd)
            .map(|_| ctrl.alloc(bs).unwrap_or_else(|e| panic!("alloc: {e}")))
            .collect();
        let mut free: Vec<usize> = (0..qd).collect();
        let (mut acked, mut failed) = (Vec::new(), 0usize);
        let mut next = first_lba;
        let mut outstanding = 0usize;
        let mut done = Vec::new();
        loop {
            while !stop.load(Ordering::Relaxed) {
                let Some(b) = free.pop() else { break };
                // Around again: the same LBA always gets the same data, so an
                // acknowledged extent stays verifiable whatever was rewritten over it.
                if next + u64::from(nb) > end_lba {
                    next = first_lba;
                }
                bufs[b].write_at(0, &pattern(0x5EED, next, bs));
                if io
                    .submit_write((b as u64) << 40 | next, next, nb, &bufs[b], false)
                    .is_err()
                {
                    free.push(b);
                    failed += 1;
                    break;
                }
                outstanding += 1;
                next += u64::from(nb);
            }
            if outstanding == 0 {
                return (acked, failed);
            }
            let _ = io.queue().flush();
            io.queue().wait(Duration::from_millis(50));
            io.queue().expire(Instant::now());
            done.clear();
            if io.queue().poll(&mut done).is_err() && done.is_empty() {
                // The queue is broken (a timeout): nothing more will come back on it.
                return (acked, failed + outstanding);
            }
            for c in &done {
                outstanding -= 1;
                free.push((c.tag >> 40) as usize);
                if c.status.is_success() {
                    acked.push(c.tag & 0xFF_FFFF_FFFF);
                } else {
                    failed += 1;
                }
            }
            if io.queue().is_broken() && outstanding == 0 {
                return (acked, failed);
            }
        }
    }

    /// Reads back every acknowledged extent through a fresh controller.
    fn verify_acked(fabric: &Arc<dyn Fabric>, nqn: &Nqn, acked: &[u64]) {
        let mut acked = acked.to_vec();
        acked.sort_unstable();
        acked.dedup();
        let mut ctrl = connect_to(fabric, nqn, 1, 32);
        let mut q = ctrl.take_io_queues().remove(0);
        {
            let mut io = NsIo::new(&ctrl, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
            let mut back = vec![0u8; 4096];
            for &lba in &acked {
                io.read(lba, &mut back)
                    .unwrap_or_else(|e| panic!("read back {lba}: {e}"));
                assert!(
                    back == pattern(0x5EED, lba, 4096),
                    "acknowledged write at LBA {lba} lost"
                );
            }
        }
        drop(q);
        ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
    }

    fn signal(pid: i32, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig)
            .unwrap_or_else(|e| panic!("kill -{sig} {pid}: {e}"));
    }

    #[test]
    fn osd_stopped_under_io() {
        use nix::sys::signal::Signal::{SIGCONT, SIGSTOP};
        let cluster = CephCluster::start("osd-stop", IMAGE_SIZE);
        let env = start_tcp(&rbd_config(&cluster), TcpOptions::default());
        let osd = cluster.osd_pid();

        // 1. Stopped for less than the host's 10 s command timeout: commands wait and
        //    every one succeeds once the OSD runs again.
        let ctrl = connect_to(&env.fabric, &env.nqn, 1, 32);
        let ctrl = Arc::new(Mutex::new(ctrl));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (ctrl, stop) = (ctrl.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut c = ctrl.lock().unwrap_or_else(|e| panic!("{e}"));
                let mut q = c.take_io_queues().remove(0);
                let r = write_until(&c, &mut q, 8, 0, HALF_LBA, &stop);
                drop(q);
                r
            })
        };
        std::thread::sleep(Duration::from_millis(500));
        signal(osd, SIGSTOP);
        let stalled_at = Instant::now();
        std::thread::sleep(SHORT_STALL);
        signal(osd, SIGCONT);
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        let (acked, failed) = writer.join().unwrap_or_else(|_| panic!("writer panicked"));
        eprintln!(
            "short stall ({:?}): {} writes acknowledged, {failed} failed",
            stalled_at.elapsed(),
            acked.len()
        );
        assert_eq!(
            failed, 0,
            "a stall shorter than the host timeout failed commands"
        );
        assert!(!acked.is_empty());
        verify_acked(&env.fabric, &env.nqn, &acked);
        if let Ok(c) = Arc::try_unwrap(ctrl) {
            let _ = c.into_inner().map(|c| c.shutdown());
        }

        // 2. Stopped for longer than a 2 s host timeout: the stalled commands time out on
        //    the host (its queue is then broken); after SIGCONT a new controller reads back
        //    every write that was acknowledged, and the target serves as before.
        let mut c = Controller::connect(
            env.fabric.clone(),
            opts_with_timeout(&env.nqn, SHORT_HOST_TIMEOUT),
        )
        .unwrap_or_else(|e| panic!("connect: {e}"));
        let mut q = c.take_io_queues().remove(0);
        let stop = AtomicBool::new(false);
        let (acked, failed) = std::thread::scope(|s| {
            let w = s.spawn(|| write_until(&c, &mut q, 8, HALF_LBA, 2 * HALF_LBA, &stop));
            std::thread::sleep(Duration::from_millis(500));
            signal(osd, SIGSTOP);
            std::thread::sleep(LONG_STALL);
            stop.store(true, Ordering::Relaxed);
            let r = w.join().unwrap_or_else(|_| panic!("writer panicked"));
            signal(osd, SIGCONT);
            r
        });
        eprintln!(
            "long stall: {} writes acknowledged, {failed} timed out or failed",
            acked.len()
        );
        assert!(
            failed > 0,
            "no command outlived the {SHORT_HOST_TIMEOUT:?} host timeout"
        );
        assert!(!acked.is_empty());
        drop(q);
        drop(c);
        verify_acked(&env.fabric, &env.nqn, &acked);
        nvmf_tests::assert_serves(&env.fabric, &env.nqn, 16);
    }

    /// `rados_osd_op_timeout` in the stall-with-a-timeout case (seconds).
    const OP_TIMEOUT_SECS: u64 = 2;
    /// How long a write to a stopped OSD may take to fail with that timeout: the timeout
    /// plus librados' timer tick and some slack on a loaded machine.
    const OP_TIMEOUT_BOUND: Duration = Duration::from_secs(10);
    /// How much earlier than the timeout, by our clock, the stalled write may fail:
    /// librados' Objecter runs its op timeouts on a coarse monotonic clock
    /// (`CLOCK_MONOTONIC_COARSE`, one kernel tick of resolution, up to 10 ms), so its
    /// 2 s can end a tick before ours (CI saw 1.997 s).
    const COARSE_CLOCK_SLACK: Duration = Duration::from_millis(50);
    /// The host's command timeout there: far above the bound, so a failure within it
    /// is the target's answer, not the host giving up.
    const PATIENT_HOST_TIMEOUT: Duration = Duration::from_secs(60);
    /// How long the first write after the OSD resumes may take.
    const RESUME_BOUND: Duration = Duration::from_secs(10);

    #[test]
    fn osd_op_timeout_fails_a_stalled_write_and_io_resumes() {
        use nix::sys::signal::Signal::{SIGCONT, SIGSTOP};
        use nvmf_common::wire::status::{generic, Status};
        use nvmf_initiator::error::Error;
        let cluster = CephCluster::start("op-timeout", IMAGE_SIZE);
        let mut cfg = rbd_config(&cluster);
        let ns = &mut cfg.subsystems[0].namespaces[0];
        // The write-back cache off: a cached write would complete without the OSD.
        for (k, v) in [
            ("rados_osd_op_timeout", OP_TIMEOUT_SECS.to_string()),
            ("rbd_cache", "false".into()),
        ] {
            ns.ceph_options.insert(k.into(), v);
        }
        let env = start_tcp(&cfg, TcpOptions::default());
        let osd = cluster.osd_pid();
        let mut c = Controller::connect(
            env.fabric.clone(),
            opts_with_timeout(&env.nqn, PATIENT_HOST_TIMEOUT),
        )
        .unwrap_or_else(|e| panic!("connect: {e}"));
        let idc = IdentifyController::new_checked(c.identify_controller_raw())
            .unwrap_or_else(|e| panic!("identify controller: {e}"));
        assert_eq!(idc.vwc() & vwc::PRESENT, 0, "rbd_cache=false not applied");
        let mut q = c.take_io_queues().remove(0);
        {
            let mut io = NsIo::new(&c, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
            let (lba, stalled_lba) = (0u64, 64u64);
            io.write(lba, &pattern(1, lba, 4096))
                .unwrap_or_else(|e| panic!("write before the stall: {e}"));

            signal(osd, SIGSTOP);
            let started = Instant::now();
            let r = io.write(stalled_lba, &pattern(2, stalled_lba, 4096));
            let took = started.elapsed();
            signal(osd, SIGCONT);
            eprintln!("write to a stopped OSD with rados_osd_op_timeout={OP_TIMEOUT_SECS}: {r:?} after {took:?}");
            match r {
                Err(Error::Status { status, .. }) => assert_eq!(
                    status,
                    Status::generic_retryable(generic::NS_NOT_READY),
                    "{status}"
                ),
                other => panic!("the stalled write gave {other:?}, not an error status"),
            }
            assert!(
                took + COARSE_CLOCK_SLACK >= Duration::from_secs(OP_TIMEOUT_SECS)
                    && took < OP_TIMEOUT_BOUND,
                "the stalled write failed after {took:?}: not the {OP_TIMEOUT_SECS} s op timeout"
            );

            // The OSD runs again: the next commands succeed, and read back.
            let started = Instant::now();
            let d = pattern(3, stalled_lba, 4096);
            io.write(stalled_lba, &d)
                .unwrap_or_else(|e| panic!("write after the OSD resumed: {e}"));
            let mut back = vec![0u8; 4096];
            io.read(stalled_lba, &mut back)
                .unwrap_or_else(|e| panic!("read after the OSD resumed: {e}"));
            assert!(back == d, "read back other data after the stall");
            io.read(lba, &mut back)
                .unwrap_or_else(|e| panic!("read after the OSD resumed: {e}"));
            assert!(
                back == pattern(1, lba, 4096),
                "the write before the stall was lost"
            );
            let resumed = started.elapsed();
            eprintln!("after SIGCONT: write and two reads in {resumed:?}");
            assert!(resumed < RESUME_BOUND, "I/O took {resumed:?} to resume");
        }
        drop(q);
        c.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
    }

    #[test]
    fn missing_image_fails_at_start_with_its_name() {
        let cluster = CephCluster::start("missing", "8M");
        let mut cfg = config(&["rbd:rbd/nope"]);
        cluster.attach(&mut cfg);
        let e = nvmf_target::target::Target::from_config(&cfg)
            .err()
            .unwrap_or_else(|| panic!("a missing image was served"));
        let msg = e.to_string();
        assert!(msg.contains("rbd:rbd/nope"), "{msg}");
    }

    /// Fused Compare and Write on one image through two gateways (two targets, each
    /// its own librbd client): librbd's `rbd_aio_compare_and_write` makes a one-sector
    /// pair one atomic OSD operation, so two hosts incrementing one counter block
    /// through different gateways lose no increment (VMware's ATS heartbeat is such a
    /// pair); a miscompare writes nothing; a larger pair, and one across an object
    /// boundary (no single OSD operation in librbd), still runs, under the gateway's
    /// own range lock.
    #[test]
    fn compare_and_write_is_atomic_across_gateways() {
        const ROUNDS: u64 = 40;
        const NLB: usize = 1;
        let cluster = CephCluster::start("caw", IMAGE_SIZE);
        // A command outstanding this long is logged with where it waits (the backend,
        // the transport): the output of a failed run says whether librbd held it.
        const STUCK_MS: u32 = 2000;
        let mut cfg = rbd_config(&cluster);
        cfg.transport.stuck_command_ms = STUCK_MS;
        let gw_a = start_tcp(&cfg, TcpOptions::default());
        let gw_b = start_tcp(&cfg, TcpOptions::default());
        let lba = 1024u64;
        let counter = |v: u64| {
            let mut b = vec![0u8; NLB * BLOCK];
            b[..8].copy_from_slice(&v.to_le_bytes());
            b
        };
        {
            let mut c = connect_to(&gw_a.fabric, &gw_a.nqn, 1, 32);
            let mut q = c.take_io_queues().remove(0);
            let mut io = NsIo::new(&c, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
            io.write(lba, &counter(0))
                .unwrap_or_else(|e| panic!("write: {e}"));
            // A mismatch writes nothing and says so in both halves.
            let (s1, s2) = io
                .compare_and_write(lba, &counter(5), &counter(6))
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(
                s1.is(nvmf_common::wire::status::Sct::MediaError, 0x85),
                "{s1:?}"
            );
            assert!(!s2.is_success(), "{s2:?}");
            // Eight blocks across the first 4 MiB object boundary: emulated, correct.
            let edge = (4 << 20) / BLOCK as u64 - 4;
            let old = pattern(1, edge, 8 * BLOCK);
            io.write(edge, &old)
                .unwrap_or_else(|e| panic!("write: {e}"));
            let new = pattern(2, edge, 8 * BLOCK);
            let (s1, s2) = io
                .compare_and_write(edge, &old, &new)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(s1.is_success() && s2.is_success(), "{s1:?} {s2:?}");
            let mut back = vec![0u8; 8 * BLOCK];
            io.read(edge, &mut back)
                .unwrap_or_else(|e| panic!("read: {e}"));
            assert!(back == new, "the pair across an object boundary wrote");
        }
        // The two gateways' librbd clients hand the image's exclusive lock back and
        // forth on every write; on a loaded two-core machine running two test clusters
        // one handoff has taken over 10 s (CI, twice), so the contending hosts wait up
        // to CONTENDED_TIMEOUT: the test is about atomicity, and a command that is
        // never answered still fails it. The slowest pair is printed.
        const CONTENDED_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
        let mut hosts = Vec::new();
        for gw in [&gw_a, &gw_b] {
            let (fabric, nqn) = (gw.fabric.clone(), gw.nqn.clone());
            hosts.push(std::thread::spawn(move || {
                let mut c = connect_with_timeout(&fabric, &nqn, 1, 32, CONTENDED_TIMEOUT);
                let mut q = c.take_io_queues().remove(0);
                let mut io = NsIo::new(&c, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
                let (mut wins, mut misses) = (0u64, 0u64);
                let mut slowest = std::time::Duration::ZERO;
                while wins < ROUNDS {
                    let mut cur = vec![0u8; NLB * BLOCK];
                    io.read(lba, &mut cur)
                        .unwrap_or_else(|e| panic!("read: {e}"));
                    let v = u64::from_le_bytes(cur[..8].try_into().unwrap_or([0; 8]));
                    let t = std::time::Instant::now();
                    let (s1, s2) = io
                        .compare_and_write(lba, &cur, &counter(v + 1))
                        .unwrap_or_else(|e| panic!("{e}"));
                    slowest = slowest.max(t.elapsed());
                    if s1.is_success() {
                        assert!(s2.is_success(), "{s2:?}");
                        wins += 1;
                    } else {
                        misses += 1;
                    }
                }
                eprintln!(
                    "a host through {}: slowest compare-and-write {slowest:?}",
                    nqn
                );
                misses
            }));
        }
        let misses: u64 = hosts
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| panic!("host thread")))
            .sum();
        let mut c = connect_to(&gw_b.fabric, &gw_b.nqn, 1, 32);
        let mut q = c.take_io_queues().remove(0);
        let mut io = NsIo::new(&c, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
        let mut end = vec![0u8; NLB * BLOCK];
        io.read(lba, &mut end)
            .unwrap_or_else(|e| panic!("read: {e}"));
        let v = u64::from_le_bytes(end[..8].try_into().unwrap_or([0; 8]));
        eprintln!("two gateways: {} increments, {misses} retries", 2 * ROUNDS);
        assert_eq!(v, 2 * ROUNDS, "an increment was lost between the gateways");
    }
}
