//! End to end over NVMe/TCP on 127.0.0.1: our host against our target, with and
//! without header and data digests.

use nvmf_common::types::Nsid;
use nvmf_common::wire::identify::{cntrltype, sgls};
use nvmf_initiator::discovery::discover;
use nvmf_initiator::namespace::NsIo;
use nvmf_initiator::transport::tcp::TcpOptions;
use nvmf_tests::{
    config, connect_to, hostnqn, pattern, start_tcp, write_read_verify, write_read_verify_on,
    TEST_HOSTID,
};

fn digests(hdr: bool, data: bool) -> TcpOptions {
    TcpOptions {
        hdr_digest: hdr,
        data_digest: data,
        ..TcpOptions::default()
    }
}

#[test]
fn tcp_connect_identify() {
    let env = start_tcp(&config(&["ram:64M"]), TcpOptions::default());
    let ctrl = connect_to(&env.fabric, &env.nqn, 2, 64);
    let id = ctrl.id_ctrl();
    assert_eq!(id.cntrltype, cntrltype::IO);
    assert_eq!(id.subnqn, nvmf_tests::TEST_NQN);
    assert_eq!(id.sgls & sgls::KEYED, 0, "no keyed SGLs on TCP");
    assert!(id.in_capsule_data >= 8192);
    assert_eq!(ctrl.io_queue_count(), 2);
    assert_eq!(ctrl.namespaces()[0].nsze * 512, 64 << 20);
    ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
}

#[test]
fn tcp_write_read_4k_qd32() {
    let env = start_tcp(&config(&["ram:256M"]), TcpOptions::default());
    let mut ctrl = connect_to(&env.fabric, &env.nqn, 1, 128);
    write_read_verify(&mut ctrl, 4096, 32, 1024);
}

#[test]
fn tcp_write_read_128k_r2t_qd16_with_digests() {
    let env = start_tcp(&config(&["ram:256M"]), digests(true, true));
    let mut ctrl = connect_to(&env.fabric, &env.nqn, 1, 64);
    write_read_verify(&mut ctrl, 128 * 1024, 16, 128);
}

#[test]
fn tcp_write_read_1m_qd8_header_digest_only() {
    let env = start_tcp(&config(&["ram:256M"]), digests(true, false));
    let mut ctrl = connect_to(&env.fabric, &env.nqn, 1, 64);
    write_read_verify(&mut ctrl, 1 << 20, 8, 64);
}

#[test]
fn tcp_write_read_512b_qd1_data_digest_only() {
    let env = start_tcp(&config(&["ram:16M"]), digests(false, true));
    let mut ctrl = connect_to(&env.fabric, &env.nqn, 1, 32);
    write_read_verify(&mut ctrl, 512, 1, 64);
}

#[test]
fn tcp_flush_zeroes_deallocate_compare() {
    let env = start_tcp(&config(&["ram:64M"]), TcpOptions::default());
    let mut ctrl = connect_to(&env.fabric, &env.nqn, 1, 32);
    let mut qs = ctrl.take_io_queues();
    let mut io = NsIo::new(&ctrl, &mut qs[0], Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    let data = pattern(11, 0, 64 * 1024);
    io.write(100, &data)
        .unwrap_or_else(|e| panic!("write: {e}"));
    io.flush().unwrap_or_else(|e| panic!("flush: {e}"));
    io.compare(100, &data)
        .unwrap_or_else(|e| panic!("compare: {e}"));
    io.write_zeroes(100, 8)
        .unwrap_or_else(|e| panic!("write zeroes: {e}"));
    io.deallocate(&[(108, 120)])
        .unwrap_or_else(|e| panic!("deallocate: {e}"));
    let mut back = vec![0u8; data.len()];
    io.read(100, &mut back)
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert!(back.iter().all(|&b| b == 0));
}

#[test]
fn tcp_discovery() {
    let env = start_tcp(&config(&["ram:16M"]), TcpOptions::default());
    let entries = discover(
        env.fabric.clone(),
        &hostnqn(),
        TEST_HOSTID,
        std::time::Duration::from_secs(5),
    )
    .unwrap_or_else(|e| panic!("discover: {e}"));
    assert_eq!(entries.len(), 2);
    let nvm: Vec<_> = entries.iter().filter(|e| e.is_nvm_subsystem()).collect();
    assert_eq!(nvm.len(), 1, "{entries:?}");
    assert_eq!(nvm[0].subnqn, nvmf_tests::TEST_NQN);
    assert_eq!(nvm[0].trtype, nvmf_common::wire::log::trtype::TCP);
    assert_eq!(nvm[0].traddr, "127.0.0.1");
}

/// Issue 32 (a write that never completed): the poll group's buffer arena was carved
/// once into per-class free lists that never merged. After traffic of one size had
/// taken the whole arena (here four 1 MiB transfers in flight fill a 4 MiB arena),
/// a transfer of any other size class found no free block and no untouched arena: its
/// command waited for a buffer forever, and every later data command behind it. The
/// kernel host met it as a 513-block write (262,656 bytes, a class of its own) late in
/// blktests' nvme group. (The arena's extra 4 KiB is what the admin queue's Identify
/// buffers take first.)
#[test]
fn tcp_new_transfer_sizes_after_the_arena_was_used_by_another() {
    let mut t = nvmf_target::tcp::TcpOptions::default();
    let max_io = 1usize << 20;
    t.arena_bytes = 4 * max_io + 4096;
    let env = nvmf_tests::start_tcp_with(&config(&["ram:64M"]), TcpOptions::default(), t);
    let mut ctrl = connect_to(&env.fabric, &env.nqn, 1, 32);
    write_read_verify(&mut ctrl, max_io, 4, 16);
    ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));

    let mut ctrl = connect_to(&env.fabric, &env.nqn, 1, 32);
    let mut qs = ctrl.take_io_queues();
    let mut io = NsIo::new(&ctrl, &mut qs[0], Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    // 513, 511 and 1 blocks of 512 bytes, then 4 KiB: every one a class not used yet.
    for (i, blocks) in [513usize, 511, 1, 8, 129].into_iter().enumerate() {
        let lba = 1 + 2048 * i as u64;
        let data = pattern(32, lba, blocks * 512);
        io.write(lba, &data)
            .unwrap_or_else(|e| panic!("write of {blocks} blocks: {e}"));
        let mut back = vec![0u8; data.len()];
        io.read(lba, &mut back)
            .unwrap_or_else(|e| panic!("read of {blocks} blocks: {e}"));
        assert!(back == data, "{blocks} blocks read back other data");
    }
    drop(io);
    drop(qs);
    ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
}

/// The Linux host sends a discard's Dataset Management with a whole page of data behind
/// its one range (seen from mkfs.ext4 in the interop lab): accepted, as nvmet accepts a
/// longer SGL for Dataset Management (`nvmet_check_data_len_lte`), and the range is
/// deallocated. A Read with a longer SGL is still refused.
#[test]
fn tcp_deallocate_with_a_page_of_data() {
    use nvmf_common::wire::status::{generic, Sct};
    use nvmf_initiator::command;
    use nvmf_initiator::transport::DataDir;
    let env = start_tcp(&config(&["ram:16M"]), TcpOptions::default());
    let mut ctrl = connect_to(&env.fabric, &env.nqn, 1, 32);
    let mut q = ctrl.take_io_queues().remove(0);
    let data = pattern(21, 64, 8 * 512);
    {
        let mut io = NsIo::new(&ctrl, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
        io.write(64, &data).unwrap_or_else(|e| panic!("write: {e}"));
    }
    let page = ctrl.alloc(4096).unwrap_or_else(|e| panic!("alloc: {e}"));
    assert!(page.write_at(0, &command::dsm_range_data(&[(64, 8)])));
    let sqe = command::deallocate(Nsid(1), 1).unwrap_or_else(|e| panic!("{e}"));
    let c = nvmf_tests::exec(&mut q, sqe, Some(&page), DataDir::ToCtrl);
    assert!(c.status.is_success(), "{:?}", c.status);
    let mut io = NsIo::new(&ctrl, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    let mut back = vec![0xFFu8; data.len()];
    io.read(64, &mut back)
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert!(
        back.iter().all(|&b| b == 0),
        "the range was not deallocated"
    );
    drop(io);
    let rd = command::read(Nsid(1), 64, 1, false).unwrap_or_else(|e| panic!("{e}"));
    let c = nvmf_tests::exec(&mut q, rd, Some(&page), DataDir::FromCtrl);
    assert!(
        c.status.is(Sct::Generic, generic::DATA_SGL_LENGTH_INVALID) && c.status.dnr,
        "{:?}",
        c.status
    );
}

/// With more connections than a poll group reads on every pass, the busiest ones are
/// read directly and the rest through epoll every few passes (`tcp/hot.rs`): two I/O
/// queues kept busy at QD 32 must not starve a third one doing single commands, nor
/// the admin queue; then the busy queues end and a new controller, whose connections
/// may take their places in the group, is served.
#[test]
fn busy_queues_beside_a_quiet_one_and_the_admin_queue() {
    const BUSY_COMMANDS: usize = 20_000;
    const QUIET_ROUNDS: u64 = 50;
    const SPAN: u64 = 1 << 18;
    let env = start_tcp(&config(&["ram:512M"]), TcpOptions::default());
    let mut ctrl = connect_to(&env.fabric, &env.nqn, 3, 64);
    let mut qs = ctrl.take_io_queues();
    let (busy, quiet) = qs.split_at_mut(2);
    let ctrl_ref = &ctrl;
    std::thread::scope(|s| {
        let workers: Vec<_> = busy
            .iter_mut()
            .enumerate()
            .map(|(i, q)| {
                let base = (i as u64 + 1) * SPAN;
                s.spawn(move || write_read_verify_on(ctrl_ref, q, base, 4096, 32, BUSY_COMMANDS))
            })
            .collect();
        let mut io = NsIo::new(ctrl_ref, &mut quiet[0], Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
        let mut rounds = 0;
        // Until both busy queues are through (and at least QUIET_ROUNDS times).
        while rounds < QUIET_ROUNDS || workers.iter().any(|w| !w.is_finished()) {
            let data = pattern(99, rounds, 512);
            io.write(rounds % 1024, &data)
                .unwrap_or_else(|e| panic!("quiet write: {e}"));
            let mut back = vec![0u8; data.len()];
            io.read(rounds % 1024, &mut back)
                .unwrap_or_else(|e| panic!("quiet read: {e}"));
            assert!(back == data, "quiet queue round {rounds}");
            ctrl_ref
                .identify_namespace(Nsid(1))
                .unwrap_or_else(|e| panic!("identify beside busy queues: {e}"));
            rounds += 1;
        }
        for w in workers {
            w.join().unwrap_or_else(|_| panic!("a busy queue failed"));
        }
    });
    drop(qs);
    ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
    let mut next = connect_to(&env.fabric, &env.nqn, 3, 64);
    write_read_verify(&mut next, 4096, 16, 256);
}
