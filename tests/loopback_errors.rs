//! Exact statuses for bad commands, bad Connects and bad RDMA accesses over the
//! loopback transport, and that a failure ends at most the offending queue.

use std::sync::Arc;

use nvmf_common::types::{Cntlid, Nqn, Nsid, Qid};
use nvmf_common::wire::fabrics::{connect_data_offset, connect_offset, reg, CONNECT_IATTR_DATA};
use nvmf_common::wire::rdma::reject_status;
use nvmf_common::wire::sqe::Sqe;
use nvmf_common::wire::status::{cmd_specific, generic, Sct, Status};
use nvmf_initiator::command;
use nvmf_initiator::controller::Controller;
use nvmf_initiator::error::Error;
use nvmf_initiator::namespace::NsIo;
use nvmf_initiator::queue::{Completion, Queue};
use nvmf_initiator::transport::{DataDir, IoBuf, TransportError};
use nvmf_tests::{config, connect, exec, hostnqn, options, raw_queue, start, Env, TEST_HOSTID};
use nvmf_verbs::{DmaBuffer, MemoryRegion};

fn assert_status(c: &Completion, sct: Sct, sc: u8) {
    assert!(
        c.status.is(sct, sc),
        "expected sct {:?} sc {sc:#x}, got {}",
        sct,
        c.status
    );
}

/// Connect failed with Invalid Parameters naming the field `iattr_ipo` (dw0: IATTR
/// bit 16 set for a Connect data field, IPO the field's byte offset).
fn assert_connect_invalid(c: &Completion, iattr_ipo: u32) {
    assert_status(
        c,
        Sct::CommandSpecific,
        cmd_specific::CONNECT_INVALID_PARAMETERS,
    );
    assert!(c.status.dnr);
    assert_eq!(c.dw0, iattr_ipo, "IATTR/IPO");
}

/// Sends a Connect with `data` on `q` and returns the completion.
fn raw_connect(
    env: &Env,
    q: &mut Queue,
    qid: u16,
    sqsize: u16,
    cntlid: Cntlid,
    subnqn: &Nqn,
) -> Completion {
    let buf = env.fabric.alloc(1024).unwrap_or_else(|e| panic!("{e}"));
    buf.write_at(
        0,
        &command::connect_data(TEST_HOSTID, cntlid, subnqn, &hostnqn()),
    );
    exec(
        q,
        command::connect(Qid(qid), sqsize, 0),
        Some(&buf),
        DataDir::ToCtrl,
    )
}

fn enable(q: &mut Queue) {
    let cc = u64::from(nvmf_common::wire::fabrics::Cc::enable_nvm().0);
    let c = exec(q, command::property_set(reg::CC, cc), None, DataDir::None);
    assert!(c.status.is_success());
}

#[test]
fn io_command_errors_have_exact_status() {
    let env = start(&config(&["ram:16M"]));
    let mut ctrl = connect(&env, 1, 32);
    let nsze = ctrl.namespaces()[0].nsze;
    let mut q = ctrl.take_io_queues().remove(0);
    let buf = ctrl.alloc(4096).unwrap_or_else(|e| panic!("{e}"));
    // LBA out of range: the last block plus one.
    let c = exec(
        &mut q,
        command::read(Nsid(1), nsze - 7, 8, false).unwrap_or_else(|e| panic!("{e}")),
        Some(&buf),
        DataDir::FromCtrl,
    );
    assert_status(&c, Sct::Generic, generic::LBA_OUT_OF_RANGE);
    assert!(c.status.dnr);
    // Invalid namespace.
    let c = exec(
        &mut q,
        command::read(Nsid(9), 0, 8, false).unwrap_or_else(|e| panic!("{e}")),
        Some(&buf),
        DataDir::FromCtrl,
    );
    assert_status(&c, Sct::Generic, generic::INVALID_NAMESPACE);
    // Invalid opcode (0x7E is not an NVM command).
    let mut sqe = command::flush(Nsid(1));
    Sqe::new_unchecked(&mut sqe[..]).set_opcode(0x7E);
    let c = exec(&mut q, sqe, None, DataDir::None);
    assert_status(&c, Sct::Generic, generic::INVALID_OPCODE);
    // Data length that disagrees with NLB x block size (8 blocks = 4096 bytes, 2048 given).
    let half = buf.slice(0, 2048).unwrap_or_else(|| panic!("slice"));
    let c = exec(
        &mut q,
        command::read(Nsid(1), 0, 8, false).unwrap_or_else(|e| panic!("{e}")),
        Some(&half),
        DataDir::FromCtrl,
    );
    assert_status(&c, Sct::Generic, generic::DATA_SGL_LENGTH_INVALID);
    // Fused commands are refused.
    let mut sqe = command::flush(Nsid(1));
    Sqe::new_unchecked(&mut sqe[..]).set_flags(0x40 | 0x01);
    let c = exec(&mut q, sqe, None, DataDir::None);
    assert_status(&c, Sct::Generic, generic::INVALID_FIELD);
    // PRP instead of SGL.
    let mut sqe = command::flush(Nsid(1));
    Sqe::new_unchecked(&mut sqe[..]).set_flags(0);
    let c = exec(&mut q, sqe, None, DataDir::None);
    assert_status(&c, Sct::Generic, generic::INVALID_FIELD);
    // The queue still works.
    let c = exec(
        &mut q,
        command::read(Nsid(1), 0, 8, false).unwrap_or_else(|e| panic!("{e}")),
        Some(&buf),
        DataDir::FromCtrl,
    );
    assert!(c.status.is_success());
    // Errors are recorded in the Error Information log (newest first).
    use nvmf_common::wire::log::{ErrorInfoEntry, ERROR_INFO_ENTRY_LEN};
    let log = ctrl
        .get_log_page(
            nvmf_common::wire::log::lid::ERROR_INFO,
            Nsid(0),
            3 * ERROR_INFO_ENTRY_LEN,
            0,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let e = ErrorInfoEntry::new_unchecked(&log[..]);
    assert!(e.error_count() >= 5);
    assert_eq!(e.sqid(), 1);
    // The status sits in bits 15:1 above the phase tag (nvmet, nvme-cli's `>> 1`).
    assert_eq!(e.status_field() & 1, 0, "phase tag");
    let s = e.status();
    assert!(s.dnr && s.is(Sct::Generic, generic::INVALID_FIELD), "{s}");
    assert_eq!(e.opcode(), nvmf_common::wire::nvm::opcode::FLUSH);
    // Two entries back: the Read whose data length disagreed with NLB.
    let e = ErrorInfoEntry::new_unchecked(&log[2 * ERROR_INFO_ENTRY_LEN..]);
    assert!(e
        .status()
        .is(Sct::Generic, generic::DATA_SGL_LENGTH_INVALID));
    assert_eq!(e.opcode(), nvmf_common::wire::nvm::opcode::READ);
    assert_eq!(e.nsid(), 1);
}

#[test]
fn commands_before_enable_are_sequence_errors() {
    let env = start(&config(&["ram:16M"]));
    let mut admin = raw_queue(&env, 0, 32);
    let c = raw_connect(&env, &mut admin, 0, 31, Cntlid::DYNAMIC, &env.nqn);
    assert!(c.status.is_success(), "{}", c.status);
    let cntlid = Cntlid(c.dw0 as u16);
    // Identify before CC.EN = 1.
    let buf = env.fabric.alloc(4096).unwrap_or_else(|e| panic!("{e}"));
    let c = exec(
        &mut admin,
        command::identify_controller(),
        Some(&buf),
        DataDir::FromCtrl,
    );
    assert_status(&c, Sct::Generic, generic::COMMAND_SEQUENCE_ERROR);
    // I/O queue Connect before the controller is enabled.
    let mut io = raw_queue(&env, 1, 32);
    let c = raw_connect(&env, &mut io, 1, 31, cntlid, &env.nqn);
    assert_status(&c, Sct::Generic, generic::COMMAND_SEQUENCE_ERROR);
    // A command other than Connect on an unconnected queue.
    let mut io2 = raw_queue(&env, 2, 32);
    let c = exec(&mut io2, command::flush(Nsid(1)), None, DataDir::None);
    assert_status(&c, Sct::Generic, generic::INVALID_OPCODE);
    // After enabling, Identify works and a second Connect on the admin queue is refused.
    enable(&mut admin);
    let c = exec(
        &mut admin,
        command::identify_controller(),
        Some(&buf),
        DataDir::FromCtrl,
    );
    assert!(c.status.is_success());
    // Invalid Opcode, as nvmet and SPDK answer it (docs/peers.md).
    let c = raw_connect(&env, &mut admin, 0, 31, Cntlid::DYNAMIC, &env.nqn);
    assert_status(&c, Sct::Generic, generic::INVALID_OPCODE);
}

#[test]
fn connect_to_unknown_subsystem() {
    let env = start(&config(&["ram:16M"]));
    let mut admin = raw_queue(&env, 0, 32);
    let other = Nqn::new("nqn.2024-01.io.nvmf-rs:nope").unwrap_or_else(|e| panic!("{e}"));
    let c = raw_connect(&env, &mut admin, 0, 31, Cntlid::DYNAMIC, &other);
    assert_connect_invalid(
        &c,
        CONNECT_IATTR_DATA | u32::from(connect_data_offset::SUBSYSNQN),
    );
    // The library reports it the same way.
    let mut o = options(&env, 1, 32);
    o.subnqn = other;
    let err = Controller::connect(env.fabric.clone(), o)
        .err()
        .unwrap_or_else(|| panic!("must fail"));
    let st = err.status().unwrap_or_else(|| panic!("no status: {err}"));
    assert!(st.is(
        Sct::CommandSpecific,
        cmd_specific::CONNECT_INVALID_PARAMETERS
    ));
}

#[test]
fn connect_by_disallowed_host() {
    let mut cfg = config(&["ram:16M"]);
    cfg.subsystems[0].allow_any_host = false;
    cfg.subsystems[0].allowed_hosts =
        vec![Nqn::new("nqn.2014-08.org.nvmexpress:uuid:someone-else")
            .unwrap_or_else(|e| panic!("{e}"))];
    let env = start(&cfg);
    let mut admin = raw_queue(&env, 0, 32);
    let c = raw_connect(&env, &mut admin, 0, 31, Cntlid::DYNAMIC, &env.nqn);
    assert_status(&c, Sct::CommandSpecific, cmd_specific::CONNECT_INVALID_HOST);
    assert!(c.status.dnr);
    assert_eq!(
        c.dw0,
        CONNECT_IATTR_DATA | u32::from(connect_data_offset::HOSTNQN)
    );
    // Discovery is still open to that host.
    let mut d = raw_queue(&env, 0, 32);
    let c = raw_connect(&env, &mut d, 0, 31, Cntlid::DYNAMIC, &Nqn::discovery());
    assert!(c.status.is_success(), "{}", c.status);
}

#[test]
fn connect_with_bad_cntlid_or_queue_size() {
    let env = start(&config(&["ram:16M"]));
    let ctrl = connect(&env, 1, 32);
    // Dynamic subsystem: the admin Connect must ask for 0xFFFF.
    let mut admin = raw_queue(&env, 0, 32);
    let c = raw_connect(&env, &mut admin, 0, 31, Cntlid(5), &env.nqn);
    assert_connect_invalid(
        &c,
        CONNECT_IATTR_DATA | u32::from(connect_data_offset::CNTLID),
    );
    // SQSIZE 0 is invalid.
    let mut admin = raw_queue(&env, 0, 32);
    let c = raw_connect(&env, &mut admin, 0, 0, Cntlid::DYNAMIC, &env.nqn);
    assert_connect_invalid(&c, u32::from(connect_offset::SQSIZE));
    // An I/O queue naming a controller that does not exist.
    let mut io = raw_queue(&env, 2, 32);
    let c = raw_connect(&env, &mut io, 2, 31, Cntlid(0x1234), &env.nqn);
    assert_connect_invalid(
        &c,
        CONNECT_IATTR_DATA | u32::from(connect_data_offset::CNTLID),
    );
    // An I/O queue beyond the granted count (the controller got 1) but within the
    // target's limit: nvmet and SPDK accept it, and so do we (docs/peers.md).
    let mut io = raw_queue(&env, 2, 32);
    let c = raw_connect(&env, &mut io, 2, 31, ctrl.cntlid(), &env.nqn);
    assert!(c.status.is_success(), "{}", c.status);
    // An RDMA connect asking for a queue deeper than the target allows is rejected by
    // the NVMe/RDMA CM with Invalid HSQSIZE, before any capsule.
    let err = env
        .fabric
        .connect_queue(&nvmf_initiator::transport::QueueParams {
            qid: Qid(0),
            depth: 1000,
            in_capsule_data: 0,
            connect_timeout: std::time::Duration::from_secs(5),
        })
        .err()
        .unwrap_or_else(|| panic!("must be rejected"));
    match err {
        // NVMe/RDMA CM reject status 0x4: Invalid HSQSIZE.
        TransportError::Rejected(why) => assert!(
            why.contains(&format!("({:#x})", reject_status::INVALID_HSQSIZE)),
            "{why}"
        ),
        other => panic!("expected a reject, got {other}"),
    }
}

/// A memory region that forwards to a real one but hands out a wrong rkey.
struct BadKey(Arc<dyn MemoryRegion>);

impl MemoryRegion for BadKey {
    fn lkey(&self) -> u32 {
        self.0.lkey()
    }
    fn rkey(&self) -> u32 {
        self.0.rkey() ^ 0x5A5A_0000
    }
    fn addr(&self) -> u64 {
        self.0.addr()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn buffer(&self) -> &Arc<DmaBuffer> {
        self.0.buffer()
    }
}

fn expect_dead(r: Result<Completion, Error>) {
    match r {
        Err(Error::Transport(_)) | Err(Error::Timeout(_)) => {}
        Err(other) => panic!("expected the queue to die, got {other}"),
        Ok(c) => panic!("expected the queue to die, got a completion {}", c.status),
    }
}

#[test]
fn bad_rdma_key_or_bounds_fail_only_that_queue() {
    let env = start(&config(&["ram:16M"]));
    let mut ctrl = connect(&env, 3, 32);
    let mut qs = ctrl.take_io_queues();
    let good = ctrl.alloc(16384).unwrap_or_else(|e| panic!("{e}"));
    // Queue 1: a read whose keyed SGL carries a wrong rkey: the target's RDMA WRITE fails.
    let bad = IoBuf {
        mr: good
            .mr
            .clone()
            .map(|m| Arc::new(BadKey(m)) as Arc<dyn MemoryRegion>),
        ..good.clone()
    };
    let sqe = command::read(Nsid(1), 0, 8, false).unwrap_or_else(|e| panic!("{e}"));
    let r = qs[0].execute(
        sqe,
        bad.slice(0, 4096).as_ref(),
        DataDir::FromCtrl,
        std::time::Duration::from_secs(5),
    );
    expect_dead(r);
    // Queue 2: a write whose keyed SGL runs past the end of the registered buffer: the
    // target's RDMA READ is out of bounds.
    let oob = IoBuf {
        offset: 16384 - 4096,
        len: 16384,
        ..good.clone()
    };
    let sqe = command::write(Nsid(1), 0, 32, false).unwrap_or_else(|e| panic!("{e}"));
    let r = qs[1].execute(
        sqe,
        Some(&oob),
        DataDir::ToCtrl,
        std::time::Duration::from_secs(5),
    );
    expect_dead(r);
    // Queue 3 and the admin queue keep working.
    let mut io = NsIo::new(&ctrl, &mut qs[2], Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    let d = nvmf_tests::pattern(1, 0, 4096);
    io.write(0, &d).unwrap_or_else(|e| panic!("write: {e}"));
    let mut back = vec![0u8; 4096];
    io.read(0, &mut back)
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert_eq!(back, d);
    assert!(ctrl.identify_namespace(Nsid(1)).is_ok());
    // And a new host connects fine.
    let again = connect(&env, 1, 32);
    assert_eq!(again.namespaces().len(), 1);
    let _ = Status::SUCCESS;
}

/// Connects a raw RDMA queue pair to the target with valid NVMe/RDMA private data.
fn raw_qp(
    env: &Env,
) -> (
    Arc<dyn nvmf_verbs::QueuePair>,
    Arc<dyn nvmf_verbs::CompletionQueue>,
    Arc<dyn MemoryRegion>,
) {
    use nvmf_verbs::{Access, Device, QpCaps, QpInit};
    let dev: Arc<dyn Device> = env.target.device.clone();
    let pd = dev.alloc_pd().unwrap_or_else(|e| panic!("{e}"));
    let cq = dev.create_cq(64).unwrap_or_else(|e| panic!("{e}"));
    let buf = Arc::new(DmaBuffer::new(8192).unwrap_or_else(|| panic!("alloc")));
    let mr = pd
        .register(buf, Access::LOCAL_WRITE)
        .unwrap_or_else(|e| panic!("{e}"));
    let req = nvmf_common::wire::rdma::cm_request(0, 32, 31, 0);
    let port = env.target.target.ports()[0].clone();
    let (qp, _) = dev
        .connect(
            &nvmf_target::rdma::listen_addr(&port),
            QpInit {
                pd,
                send_cq: cq.clone(),
                recv_cq: cq.clone(),
                caps: QpCaps {
                    max_send_wr: 8,
                    max_recv_wr: 8,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                },
                srq: None,
            },
            &req,
            &mut |_| Ok(()),
            std::time::Duration::from_secs(5),
        )
        .unwrap_or_else(|e| panic!("raw connect: {e}"));
    (qp, cq, mr)
}

#[test]
fn capsule_shorter_than_an_sqe_ends_only_that_connection() {
    use nvmf_verbs::{SendOp, SendWr, Sge};
    let env = start(&config(&["ram:16M"]));
    let mut ctrl = connect(&env, 1, 32);
    let (qp, _cq, mr) = raw_qp(&env);
    let sge = Sge {
        addr: mr.addr(),
        length: 10,
        lkey: mr.lkey(),
    };
    qp.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sg_list: &[sge],
        signaled: true,
    }])
    .unwrap_or_else(|e| panic!("post: {e}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !qp.is_dead() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(
        qp.is_dead(),
        "the target must disconnect a queue that sent a short capsule"
    );
    // The established host is unaffected.
    let mut q = ctrl.take_io_queues().remove(0);
    let mut io = NsIo::new(&ctrl, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    let d = nvmf_tests::pattern(3, 8, 4096);
    io.write(8, &d).unwrap_or_else(|e| panic!("write: {e}"));
    let mut back = vec![0u8; 4096];
    io.read(8, &mut back)
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert_eq!(back, d);
}

#[test]
fn malformed_cm_private_data_is_rejected() {
    use nvmf_verbs::{Device, QpCaps, QpInit, VerbsError};
    let env = start(&config(&["ram:16M"]));
    let dev: Arc<dyn Device> = env.target.device.clone();
    let port = env.target.target.ports()[0].clone();
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (vec![0u8; 8], reject_status::INVALID_PRIVATE_DATA_LENGTH),
        (
            {
                let mut r = nvmf_common::wire::rdma::cm_request(0, 32, 31, 0).to_vec();
                r[0] = 1;
                r
            },
            reject_status::INVALID_RECFMT,
        ),
        (
            nvmf_common::wire::rdma::cm_request(500, 32, 31, 0).to_vec(),
            reject_status::INVALID_QID,
        ),
        (
            nvmf_common::wire::rdma::cm_request(1, 32, 0, 0).to_vec(),
            reject_status::INVALID_HSQSIZE,
        ),
        (
            nvmf_common::wire::rdma::cm_request(1, 0, 31, 0).to_vec(),
            reject_status::INVALID_HRQSIZE,
        ),
    ];
    for (pd_bytes, want) in cases {
        let pd = dev.alloc_pd().unwrap_or_else(|e| panic!("{e}"));
        let cq = dev.create_cq(8).unwrap_or_else(|e| panic!("{e}"));
        let r = dev.connect(
            &nvmf_target::rdma::listen_addr(&port),
            QpInit {
                pd,
                send_cq: cq.clone(),
                recv_cq: cq,
                caps: QpCaps {
                    max_send_wr: 4,
                    max_recv_wr: 4,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                },
                srq: None,
            },
            &pd_bytes,
            &mut |_| Ok(()),
            std::time::Duration::from_secs(5),
        );
        match r {
            Err(VerbsError::Rejected(rej)) => {
                let r = nvmf_common::wire::rdma::CmReject::new_unchecked(&rej[..]);
                assert_eq!(r.sts(), want, "private data {pd_bytes:?}");
            }
            Err(e) => panic!("expected a reject with status {want:#x}, got {e}"),
            Ok(_) => panic!("expected a reject with status {want:#x}, got a connection"),
        }
    }
    // The port still accepts a good host.
    let c = connect(&env, 1, 32);
    assert_eq!(c.namespaces().len(), 1);
}

#[test]
fn static_controller_model_honours_requested_cntlid() {
    let mut cfg = config(&["ram:16M"]);
    cfg.subsystems[0].controller_model = nvmf_target::config::ControllerModel::Static;
    let env = start(&cfg);
    // A specific controller id is granted when free...
    let mut a = raw_queue(&env, 0, 32);
    let c = raw_connect(&env, &mut a, 0, 31, Cntlid(7), &env.nqn);
    assert!(c.status.is_success(), "{}", c.status);
    assert_eq!(c.dw0 & 0xFFFF, 7);
    // ...refused when taken (Connect Controller Busy, nvmet's status when no id is
    // free)...
    let mut b = raw_queue(&env, 0, 32);
    let c = raw_connect(&env, &mut b, 0, 31, Cntlid(7), &env.nqn);
    assert_status(
        &c,
        Sct::CommandSpecific,
        cmd_specific::CONNECT_CONTROLLER_BUSY,
    );
    // ...and 0xFFFE takes any free one.
    let mut d = raw_queue(&env, 0, 32);
    let c = raw_connect(&env, &mut d, 0, 31, Cntlid::STATIC_ANY, &env.nqn);
    assert!(c.status.is_success(), "{}", c.status);
    assert_ne!(c.dw0 & 0xFFFF, 7);
    // Identify Controller reports the static model (FCATT bit 0).
    let ctrl = connect(&env, 1, 32);
    assert_eq!(ctrl.id_ctrl().fcatt & 1, 1);
}

#[test]
fn log_page_larger_than_mdts_is_refused() {
    let env = start(&config(&["ram:16M"]));
    let mut admin = raw_queue(&env, 0, 32);
    let c = raw_connect(&env, &mut admin, 0, 31, Cntlid::DYNAMIC, &env.nqn);
    assert!(c.status.is_success());
    enable(&mut admin);
    // 2 MiB of error log against a 1 MiB MDTS; the keyed SGL says 2 MiB too.
    let buf = env.fabric.alloc(2 << 20).unwrap_or_else(|e| panic!("{e}"));
    let sqe = command::get_log_page(
        nvmf_common::wire::log::lid::ERROR_INFO,
        Nsid(0),
        2 << 20,
        0,
        false,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let c = exec(&mut admin, sqe, Some(&buf), DataDir::FromCtrl);
    assert_status(&c, Sct::Generic, generic::INVALID_FIELD);
    // Offset past the end of the log.
    let small = buf.slice(0, 64).unwrap_or_else(|| panic!("slice"));
    let sqe = command::get_log_page(
        nvmf_common::wire::log::lid::ERROR_INFO,
        Nsid(0),
        64,
        1 << 20,
        false,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let c = exec(&mut admin, sqe, Some(&small), DataDir::FromCtrl);
    assert_status(&c, Sct::Generic, generic::INVALID_FIELD);
    // Unknown log page.
    let sqe = command::get_log_page(0x55, Nsid(0), 64, 0, false).unwrap_or_else(|e| panic!("{e}"));
    let c = exec(&mut admin, sqe, Some(&small), DataDir::FromCtrl);
    assert_status(&c, Sct::CommandSpecific, cmd_specific::INVALID_LOG_PAGE);
}

#[test]
fn host_overrunning_its_queue_ends_only_that_connection() {
    use nvmf_verbs::{SendOp, SendWr, Sge};
    let env = start(&config(&["ram:16M"]));
    let mut ctrl = connect(&env, 1, 32);
    // 32 receive slots at the target; send 64 capsules (Connect commands with no data)
    // back to back without ever posting a receive for the responses.
    let (qp, _cq, mr) = raw_qp(&env);
    let capsule = command::connect(Qid(0), 31, 0);
    assert!(mr.buffer().write_at(0, &capsule));
    let sge = Sge {
        addr: mr.addr(),
        length: 64,
        lkey: mr.lkey(),
    };
    for i in 0..64u64 {
        let wr = SendWr {
            wr_id: i,
            op: SendOp::Send,
            sg_list: std::slice::from_ref(&sge),
            signaled: false,
        };
        if qp.post_send(&[wr]).is_err() {
            break;
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !qp.is_dead() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(qp.is_dead(), "the overrunning connection must end");
    // Everyone else keeps working.
    let mut q = ctrl.take_io_queues().remove(0);
    let mut io = NsIo::new(&ctrl, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    let d = nvmf_tests::pattern(9, 64, 4096);
    io.write(64, &d).unwrap_or_else(|e| panic!("write: {e}"));
    let mut back = vec![0u8; 4096];
    io.read(64, &mut back)
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert_eq!(back, d);
    let again = connect(&env, 1, 32);
    assert_eq!(again.namespaces().len(), 1);
}
