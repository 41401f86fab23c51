//! Malformed Connect commands over the loopback transport (NVMe/RDMA on software
//! verbs), table-driven: each row of the [`cases!`] table is one named test made of
//! what exists first (nothing, an enabled controller, the queue or another queue of the
//! same QID already connected), the transport queue, the Connect SQE and Connect data,
//! and the exact outcome: the status (SCT, SC, DNR and, for Invalid Parameters,
//! IATTR/IPO in dword 0) or success. [`run`] then checks that a connected I/O queue
//! does I/O and that a well-behaved host is served. Cases already in
//! `loopback_errors.rs` (unknown subsystem, disallowed host, wrong CNTLID on the admin
//! queue, SQSIZE 0 on the admin queue, a second admin Connect) are not repeated.
//!
//! The rows named `..._is_accepted` are what both the Linux target and SPDK accept
//! (docs/peers.md); a second table, [`cm_cases!`], does the same for the NVMe/RDMA CM
//! connect request's private data.

use std::sync::Arc;
use std::time::Duration;

use nvmf_common::types::{Cntlid, Nqn, Nsid, Qid};
use nvmf_common::wire::fabrics::{
    cattr, connect_data_offset, connect_offset, reg, ConnectCmd, CONNECT_IATTR_DATA,
};
use nvmf_common::wire::rdma::{cm_request, reject_status, CmReject, CM_REQ_LEN};
use nvmf_common::wire::status::{cmd_specific, generic, Sct};
use nvmf_initiator::command;
use nvmf_initiator::queue::{Completion, Queue};
use nvmf_initiator::transport::rdma::RdmaFabric;
use nvmf_initiator::transport::{DataDir, Fabric, QueueParams};
use nvmf_target::config::Config;
use nvmf_tests::raw_tcp::CC_ENABLE;
use nvmf_tests::{assert_serves, config, exec, hostnqn, raw_queue, start, Env, TEST_HOSTID};
use nvmf_verbs::{Device, QpCaps, QpInit, VerbsError};

use connect_data_offset::{CNTLID, HOSTNQN, SUBSYSNQN};
use connect_offset::{QID, SQSIZE};

/// An NQN is at most 223 bytes.
const NQN_MAX_LEN: usize = 223;
/// Size of an NQN field in the Connect data.
const NQN_FIELD_LEN: usize = 256;

// ---- the table's vocabulary -------------------------------------------------------

/// What exists before the case's Connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Before {
    /// Nothing: a fresh target.
    Nothing,
    /// An enabled controller (four I/O queues granted); its CNTLID is the case's.
    Controller,
    /// A controller, and the case's transport queue already connected to it.
    QueueConnected,
    /// A controller, and another transport queue of the same QID connected to it
    /// (kept open).
    OtherQueueOfTheQid,
    /// An enabled discovery controller; the case's Connect data names the discovery
    /// subsystem and its CNTLID.
    DiscoveryController,
}

/// What the Connect must get.
#[derive(Debug, Clone, Copy)]
enum Expect {
    Success,
    /// Connect Invalid Parameters, DNR, naming the Connect data field at this offset.
    InvalidData(u16),
    /// Connect Invalid Parameters, DNR, naming the command field at this offset.
    InvalidCmd(u16),
    /// This status, with DNR.
    Status(Sct, u8),
}

/// Four I/O queues: what [`admin_up`] asks Set Features Number of Queues for.
const IO_QUEUES_ASKED: u16 = 4;
/// Ten minutes: beyond the discovery default, kept as asked.
const LONG_KATO_MS: u32 = 600_000;
/// nvmet's `NVMET_DISC_KATO_MS`, SPDK's `NVMF_DISC_KATO_IN_MS`.
const DISCOVERY_KATO_MS: u32 = 120_000;
/// The test configuration's I/O queue limit (the default).
const MAX_IO_QUEUES: u16 = 128;
/// The keep-alive granularity Identify Controller reports (KAS 1: 100 ms).
const KAS_MS: u32 = 100;
/// Five seconds: the Linux host's default KATO.
const KATO_MS: u32 = 5_000;

/// What a row's builders see.
struct Ctx {
    nqn: Nqn,
    /// The controller's CNTLID ([`Cntlid::DYNAMIC`] when there is none).
    cntlid: Cntlid,
    /// The transport queue's QID.
    qid: u16,
    /// The admin queue size limit (entries).
    max_admin: u16,
    /// CAP.MQES (0's based).
    mqes: u16,
    /// The target's I/O queue limit.
    max_io_queues: u16,
}

/// One row of the table.
struct Case {
    before: Before,
    /// The transport queue's QID.
    queue: u16,
    sqe: fn(&Ctx) -> [u8; 64],
    data: fn(&Ctx) -> Vec<u8>,
    expect: Expect,
    /// Changes the target's configuration first.
    cfg: fn(&mut Config),
    /// Checks the target after the Connect.
    then: fn(&Env, &Completion),
    /// Whether another host can still connect afterwards (false when the case used up
    /// the controller ids).
    others_served: bool,
    /// The case's transport queue goes to the second port (which [`second_port`]
    /// adds) instead of the first.
    on_second_port: bool,
}

fn case(before: Before, queue: u16, data: fn(&Ctx) -> Vec<u8>, expect: Expect) -> Case {
    Case {
        before,
        queue,
        sqe: connect_sqe,
        data,
        expect,
        cfg: |_| {},
        then: |_, _| {},
        others_served: true,
        on_second_port: false,
    }
}

impl Case {
    fn sqe(mut self, sqe: fn(&Ctx) -> [u8; 64]) -> Case {
        self.sqe = sqe;
        self
    }
    fn cfg(mut self, cfg: fn(&mut Config)) -> Case {
        self.cfg = cfg;
        self
    }
    fn then(mut self, then: fn(&Env, &Completion)) -> Case {
        self.then = then;
        self
    }
    fn no_ids_left(mut self) -> Case {
        self.others_served = false;
        self
    }
    fn on_second_port(mut self) -> Case {
        self.on_second_port = true;
        self.cfg = second_port;
        self
    }
}

/// Connect for the transport queue's QID, 32 entries.
fn connect_sqe(x: &Ctx) -> [u8; 64] {
    command::connect(Qid(x.qid), 31, 0)
}

/// The test host's Connect data naming the subsystem and the case's CNTLID.
fn connect_data(x: &Ctx) -> Vec<u8> {
    command::connect_data(TEST_HOSTID, x.cntlid, &x.nqn, &hostnqn()).to_vec()
}

// ---- the driver -----------------------------------------------------------------------

/// Sends a Connect `sqe` with the Connect data `d` on `q`.
fn send_connect(env: &Env, q: &mut Queue, sqe: [u8; 64], d: &[u8]) -> Completion {
    send_connect_via(env.fabric.as_ref(), q, sqe, d)
}

/// [`send_connect`] on a queue of `fabric` (its buffers are registered there).
fn send_connect_via(fabric: &dyn Fabric, q: &mut Queue, sqe: [u8; 64], d: &[u8]) -> Completion {
    let buf = fabric.alloc(d.len()).unwrap_or_else(|e| panic!("{e}"));
    assert!(buf.write_at(0, d));
    exec(q, sqe, Some(&buf), DataDir::ToCtrl)
}

/// An admin queue to `nqn` connected and enabled by hand (with [`IO_QUEUES_ASKED`]
/// I/O queues asked for, unless it is the discovery controller); returns the queue
/// and CNTLID.
fn admin_up(env: &Env, nqn: &Nqn) -> (Queue, Cntlid) {
    let mut admin = raw_queue(env, 0, 32);
    let d = command::connect_data(TEST_HOSTID, Cntlid::DYNAMIC, nqn, &hostnqn());
    let c = send_connect(env, &mut admin, command::connect(Qid(0), 31, KATO_MS), &d);
    assert!(c.status.is_success(), "{}", c.status);
    let cntlid = Cntlid(c.dw0 as u16);
    let c = exec(
        &mut admin,
        command::property_set(reg::CC, CC_ENABLE),
        None,
        DataDir::None,
    );
    assert!(c.status.is_success(), "{}", c.status);
    if !nqn.is_discovery() {
        let c = exec(
            &mut admin,
            command::set_number_of_queues(IO_QUEUES_ASKED),
            None,
            DataDir::None,
        );
        assert!(c.status.is_success(), "{}", c.status);
    }
    (admin, cntlid)
}

/// The port id [`second_port`] gives its port.
const SECOND_PORTID: u16 = 2;

/// Adds a second port exporting the subsystem.
fn second_port(cfg: &mut Config) {
    let mut p = cfg.ports[0].clone();
    p.portid = SECOND_PORTID;
    cfg.ports.push(p);
}

/// A host fabric reaching the port [`second_port`] added.
fn second_port_fabric(env: &Env) -> Arc<dyn Fabric> {
    let port = env
        .target
        .target
        .ports()
        .into_iter()
        .find(|p| p.portid == SECOND_PORTID)
        .unwrap_or_else(|| panic!("no port {SECOND_PORTID}"));
    let dev: Arc<dyn Device> = env.target.device.clone();
    let f = RdmaFabric::loopback(dev, nvmf_target::rdma::listen_addr(&port))
        .unwrap_or_else(|e| panic!("{e}"));
    Arc::new(f)
}

/// A 32-entry transport queue for `qid` on `fabric`.
fn raw_queue_via(fabric: &dyn Fabric, qid: u16) -> Queue {
    let t = fabric
        .connect_queue(&QueueParams {
            qid: Qid(qid),
            depth: 32,
            in_capsule_data: 0,
            connect_timeout: Duration::from_secs(5),
        })
        .unwrap_or_else(|e| panic!("raw queue: {e}"));
    let mut q = Queue::new(t);
    q.set_timeout(Duration::from_secs(10));
    q
}

/// Runs one row of the table against a fresh target.
fn run(c: Case) {
    let mut cfg = config(&["ram:16M"]);
    (c.cfg)(&mut cfg);
    let env = start(&cfg);
    let nqn = match c.before {
        Before::DiscoveryController => Nqn::discovery(),
        _ => env.nqn.clone(),
    };
    let (_admin, cntlid) = match c.before {
        Before::Nothing => (None, Cntlid::DYNAMIC),
        _ => {
            let (a, id) = admin_up(&env, &nqn);
            (Some(a), id)
        }
    };
    let x = Ctx {
        nqn,
        cntlid,
        qid: c.queue,
        max_admin: cfg.transport.max_admin_queue_size,
        mqes: cfg.transport.max_queue_size - 1,
        max_io_queues: cfg.transport.max_io_queues,
    };
    let second = c.on_second_port.then(|| second_port_fabric(&env));
    let mut q = match &second {
        Some(f) => raw_queue_via(f.as_ref(), c.queue),
        None => raw_queue(&env, c.queue, 32),
    };
    // The first queue stays open (dropping it would free its QID again).
    let mut _other = None;
    match c.before {
        Before::QueueConnected => {
            let r = send_connect(&env, &mut q, connect_sqe(&x), &connect_data(&x));
            assert!(r.status.is_success(), "first Connect: {}", r.status);
        }
        Before::OtherQueueOfTheQid => {
            let mut first = raw_queue(&env, c.queue, 32);
            let r = send_connect(&env, &mut first, connect_sqe(&x), &connect_data(&x));
            assert!(r.status.is_success(), "first Connect: {}", r.status);
            _other = Some(first);
        }
        Before::Nothing | Before::Controller | Before::DiscoveryController => {}
    }
    let fabric = second.clone().unwrap_or_else(|| env.fabric.clone());
    let r = send_connect_via(fabric.as_ref(), &mut q, (c.sqe)(&x), &(c.data)(&x));
    let invalid = |r: &Completion| {
        assert!(
            r.status.is(
                Sct::CommandSpecific,
                cmd_specific::CONNECT_INVALID_PARAMETERS
            ),
            "expected Connect Invalid Parameters, got {}",
            r.status
        );
    };
    match c.expect {
        Expect::Success => assert!(r.status.is_success(), "{}", r.status),
        Expect::InvalidData(off) => {
            invalid(&r);
            assert!(r.status.dnr, "DNR");
            assert_eq!(r.dw0, CONNECT_IATTR_DATA | u32::from(off), "IATTR/IPO");
        }
        Expect::InvalidCmd(off) => {
            invalid(&r);
            assert!(r.status.dnr, "DNR");
            assert_eq!(r.dw0, u32::from(off), "IATTR/IPO");
        }
        Expect::Status(sct, sc) => {
            assert!(
                r.status.is(sct, sc),
                "expected {sct:?}/{sc:#x}, got {}",
                r.status
            );
            assert!(r.status.dnr, "DNR");
        }
    }
    (c.then)(&env, &r);
    // A connected I/O queue does I/O.
    let connected = matches!(c.expect, Expect::Success) || c.before == Before::QueueConnected;
    if c.queue != 0 && connected {
        let f = exec(&mut q, command::flush(Nsid(1)), None, DataDir::None);
        assert!(f.status.is_success(), "{}", f.status);
    }
    if c.others_served {
        assert_serves(&env.fabric, &env.nqn, 0);
    }
}

/// One `#[test]` per row: `name => case;`.
macro_rules! cases {
    ($($(#[$doc:meta])* $name:ident => $case:expr;)*) => {
        $(
            $(#[$doc])*
            #[test]
            fn $name() {
                run($case);
            }
        )*
    };
}

// ---- builders -------------------------------------------------------------------------

/// The Connect data with the NQN field at `field` holding `bytes` (zero-padded).
fn data_with_nqn(x: &Ctx, field: u16, bytes: &[u8]) -> Vec<u8> {
    let mut d = connect_data(x);
    let at = usize::from(field);
    let f = &mut d[at..at + NQN_FIELD_LEN];
    f.fill(0);
    f[..bytes.len()].copy_from_slice(bytes);
    d
}

/// `base` padded with `pad` to `len` bytes.
fn padded(base: &str, pad: u8, len: usize) -> Vec<u8> {
    let mut v = base.as_bytes().to_vec();
    v.resize(len, pad);
    v
}

fn data_with_cntlid(x: &Ctx, cntlid: Cntlid) -> Vec<u8> {
    command::connect_data(TEST_HOSTID, cntlid, &x.nqn, &hostnqn()).to_vec()
}

/// The case's Connect with CATTR set to `v`.
fn connect_with_cattr(x: &Ctx, v: u8) -> [u8; 64] {
    let mut s = connect_sqe(x);
    ConnectCmd::new_unchecked(&mut s[..]).set_cattr(v);
    s
}

/// The live controller `r` (a successful admin Connect) created, in `nqn`.
fn controller_of(env: &Env, nqn: &Nqn, r: &Completion) -> Arc<nvmf_target::controller::Controller> {
    let cntlid = Cntlid(r.dw0 as u16);
    let t = &env.target.target;
    let subsys = t
        .find_subsystem(nqn)
        .unwrap_or_else(|| panic!("no subsystem {nqn}"));
    subsys
        .controller(cntlid)
        .unwrap_or_else(|| panic!("no controller {cntlid}"))
}

// ---- the table ----------------------------------------------------------------------

cases! {
    // ---- Connect data
    subsysnqn_not_nul_terminated =>
        case(
            Before::Nothing,
            0,
            |x| data_with_nqn(x, SUBSYSNQN, &[b'a'; NQN_FIELD_LEN]),
            Expect::InvalidData(SUBSYSNQN),
        );
    hostnqn_not_nul_terminated =>
        case(
            Before::Nothing,
            0,
            |x| data_with_nqn(x, HOSTNQN, &[b'h'; NQN_FIELD_LEN]),
            Expect::InvalidData(HOSTNQN),
        );
    /// The configured NQN padded past the limit: a prefix match must not slip through.
    subsysnqn_over_223_bytes =>
        case(
            Before::Nothing,
            0,
            |x| data_with_nqn(x, SUBSYSNQN, &padded(x.nqn.as_str(), b'x', NQN_MAX_LEN + 1)),
            Expect::InvalidData(SUBSYSNQN),
        );
    hostnqn_over_223_bytes =>
        case(
            Before::Nothing,
            0,
            |x| data_with_nqn(x, HOSTNQN, &padded(hostnqn().as_str(), b'y', NQN_MAX_LEN + 1)),
            Expect::InvalidData(HOSTNQN),
        );
    nqn_of_exactly_223_bytes_is_accepted_as_a_host =>
        case(
            Before::Nothing,
            0,
            |x| data_with_nqn(x, HOSTNQN, &padded(hostnqn().as_str(), b'z', NQN_MAX_LEN)),
            Expect::Success,
        );
    subsysnqn_empty =>
        case(
            Before::Nothing,
            0,
            |x| data_with_nqn(x, SUBSYSNQN, &[]),
            Expect::InvalidData(SUBSYSNQN),
        );
    // The Linux target and SPDK accept an empty Host NQN where any host may connect
    // (this subsystem allows any); an allow-list refuses it (tests/scale.rs).
    hostnqn_empty_is_admitted_where_any_host_may_connect =>
        case(Before::Nothing, 0, |x| data_with_nqn(x, HOSTNQN, &[]), Expect::Success);
    hostnqn_not_utf8 =>
        case(
            Before::Nothing,
            0,
            |x| data_with_nqn(x, HOSTNQN, b"nqn.2014-08.\xff\xfe"),
            Expect::InvalidData(HOSTNQN),
        );
    connect_data_shorter_than_1024_bytes =>
        case(
            Before::Nothing,
            0,
            |x| connect_data(x)[..512].to_vec(),
            Expect::Status(Sct::Generic, generic::DATA_SGL_LENGTH_INVALID),
        );
    connect_with_unknown_record_format =>
        case(
            Before::Nothing,
            0,
            connect_data,
            Expect::Status(Sct::CommandSpecific, cmd_specific::CONNECT_INCOMPATIBLE_FORMAT),
        )
        .sqe(|x| {
            let mut s = connect_sqe(x);
            ConnectCmd::new_unchecked(&mut s[..]).set_recfmt(1);
            s
        });

    // ---- I/O queues and their controller
    /// No controller exists yet: every CNTLID an I/O queue can name is unknown.
    io_connect_before_any_admin_queue_naming_cntlid_1 =>
        case(Before::Nothing, 1, |x| data_with_cntlid(x, Cntlid(1)), Expect::InvalidData(CNTLID));
    io_connect_before_any_admin_queue_naming_cntlid_0 =>
        case(Before::Nothing, 1, |x| data_with_cntlid(x, Cntlid(0)), Expect::InvalidData(CNTLID));
    io_connect_before_any_admin_queue_naming_the_dynamic_cntlid =>
        case(
            Before::Nothing,
            1,
            |x| data_with_cntlid(x, Cntlid::DYNAMIC),
            Expect::InvalidData(CNTLID),
        );
    /// Refused as nvmet and SPDK refuse it (Connect is no command on a connected
    /// queue: Invalid Opcode), and the queue still does I/O.
    second_connect_on_an_io_queue =>
        case(
            Before::QueueConnected,
            1,
            connect_data,
            Expect::Status(Sct::Generic, generic::INVALID_OPCODE),
        );
    same_io_queue_connected_twice =>
        case(
            Before::OtherQueueOfTheQid,
            1,
            connect_data,
            Expect::Status(Sct::Generic, generic::COMMAND_SEQUENCE_ERROR),
        );
    io_connect_with_the_cntlid_of_another_host =>
        case(
            Before::Controller,
            1,
            |x| {
                let intruder = Nqn::new(
                    "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000ff",
                )
                .unwrap_or_else(|e| panic!("{e}"));
                command::connect_data([0x22; 16], x.cntlid, &x.nqn, &intruder).to_vec()
            },
            Expect::InvalidData(CNTLID),
        );
    connect_qid_differs_from_the_transport_queue =>
        case(Before::Controller, 2, connect_data, Expect::InvalidCmd(QID))
            .sqe(|_| command::connect(Qid(3), 31, 0));
    /// Set Features Number of Queues granted four; nvmet and SPDK only check QID
    /// against their limit.
    io_connect_beyond_the_granted_queues_is_accepted =>
        case(Before::Controller, IO_QUEUES_ASKED + 1, connect_data, Expect::Success);
    io_connect_at_the_queue_limit_is_accepted =>
        case(Before::Controller, MAX_IO_QUEUES, connect_data, Expect::Success)
            .sqe(|x| {
                assert_eq!(x.qid, x.max_io_queues, "the row's QID is the limit");
                connect_sqe(x)
            });
    /// SPDK (with ANA reporting, which we always have) refuses an I/O queue on another
    /// port than its controller's admin queue; nvmet accepts it.
    io_connect_on_another_port_than_the_admin_queue =>
        case(Before::Controller, 1, connect_data, Expect::InvalidCmd(QID)).on_second_port();
    /// The same queue on the admin queue's port is fine.
    io_connect_on_the_admin_queues_port_with_two_ports_is_accepted =>
        case(Before::Controller, 1, connect_data, Expect::Success).cfg(second_port);
    /// nvmet (max_qid 0) and SPDK refuse it with Invalid Parameters at QID.
    io_connect_to_the_discovery_controller =>
        case(Before::DiscoveryController, 1, connect_data, Expect::InvalidCmd(QID));
    /// Another Connect data length than 1024 bytes: nvmet_check_transfer_len refuses it.
    connect_data_longer_than_1024_bytes =>
        case(
            Before::Nothing,
            0,
            |x| {
                let mut d = connect_data(x);
                d.resize(2 * d.len(), 0);
                d
            },
            Expect::Status(Sct::Generic, generic::DATA_SGL_LENGTH_INVALID),
        );

    // ---- KATO and CATTR
    /// No keep-alive: nvmet and SPDK accept it on an NVM subsystem.
    admin_connect_with_kato_0_is_accepted =>
        case(Before::Nothing, 0, connect_data, Expect::Success)
            .then(|env, r| assert_eq!(controller_of(env, &env.nqn, r).kato_ms(), 0));
    /// A discovery controller whose host asked for no keep-alive still ends after
    /// two minutes without commands, as nvmet's and SPDK's do.
    discovery_connect_with_kato_0_gets_two_minutes =>
        case(
            Before::Nothing,
            0,
            |x| command::connect_data(TEST_HOSTID, x.cntlid, &Nqn::discovery(), &hostnqn()).to_vec(),
            Expect::Success,
        )
        .then(|env, r| {
            let kato = controller_of(env, &Nqn::discovery(), r).kato_ms();
            assert_eq!(kato, DISCOVERY_KATO_MS);
        });
    /// A 1 ms KATO is kept in KAS units (100 ms), as SPDK rounds it (nvmet: to 1 s).
    admin_connect_with_kato_1_ms_gets_one_kas_unit =>
        case(Before::Nothing, 0, connect_data, Expect::Success)
            .sqe(|x| command::connect(Qid(x.qid), 31, 1))
            .then(|env, r| assert_eq!(controller_of(env, &env.nqn, r).kato_ms(), KAS_MS));
    /// A KATO longer than two minutes is kept: the host is not told of a shorter one
    /// (nvmet and SPDK keep it too).
    admin_connect_with_a_long_kato_keeps_it =>
        case(Before::Nothing, 0, connect_data, Expect::Success)
            .sqe(|x| command::connect(Qid(x.qid), 31, LONG_KATO_MS))
            .then(|env, r| assert_eq!(controller_of(env, &env.nqn, r).kato_ms(), LONG_KATO_MS));
    /// KATO is an admin queue field; nvmet and SPDK ignore it on I/O queues.
    io_connect_with_kato_is_accepted =>
        case(Before::Controller, 1, connect_data, Expect::Success)
            .sqe(|x| command::connect(Qid(x.qid), 31, KATO_MS * 2));
    /// Priority class and Incapable of Disconnect: nvmet and SPDK ignore them.
    cattr_bits_other_than_sq_flow_control_are_accepted =>
        case(Before::Controller, 1, connect_data, Expect::Success)
            .sqe(|x| connect_with_cattr(x, !cattr::DISABLE_SQFLOW));

    // ---- controller ids
    /// nvmet_alloc_ctrl: no free controller id is Connect Controller Busy.
    admin_connect_with_no_controller_id_left =>
        case(
            Before::Controller,
            0,
            connect_data_dynamic,
            Expect::Status(Sct::CommandSpecific, cmd_specific::CONNECT_CONTROLLER_BUSY),
        )
        .cfg(|c| {
            let s = &mut c.subsystems[0];
            s.cntlid_max = s.cntlid_min;
        })
        .no_ids_left();

    // ---- queue sizes
    /// SQSIZE is 0's based: SQSIZE = the limit means one entry more than it.
    admin_queue_size_one_above_the_limit =>
        case(Before::Nothing, 0, connect_data, Expect::InvalidCmd(SQSIZE))
            .sqe(|x| command::connect(Qid(0), x.max_admin, 0));
    admin_queue_size_u16_max =>
        case(Before::Nothing, 0, connect_data, Expect::InvalidCmd(SQSIZE))
            .sqe(|_| command::connect(Qid(0), u16::MAX, 0));
    io_queue_size_zero =>
        case(Before::Controller, 1, connect_data, Expect::InvalidCmd(SQSIZE))
            .sqe(|_| command::connect(Qid(1), 0, 0));
    io_queue_size_above_mqes =>
        case(Before::Controller, 1, connect_data, Expect::InvalidCmd(SQSIZE))
            .sqe(|x| command::connect(Qid(1), x.mqes + 1, 0));
    io_queue_size_u16_max =>
        case(Before::Controller, 1, connect_data, Expect::InvalidCmd(SQSIZE))
            .sqe(|_| command::connect(Qid(1), u16::MAX, 0));
    io_queue_size_of_mqes_is_accepted =>
        case(Before::Controller, 1, connect_data, Expect::Success)
            .sqe(|x| command::connect(Qid(1), x.mqes, 0));
    /// The discovery controller's admin queue has the same limit (nvmet-rdma: 32
    /// entries; SPDK: max_aq_depth).
    discovery_admin_queue_size_one_above_the_limit =>
        case(
            Before::Nothing,
            0,
            |x| command::connect_data(TEST_HOSTID, x.cntlid, &Nqn::discovery(), &hostnqn()).to_vec(),
            Expect::InvalidCmd(SQSIZE),
        )
        .sqe(|x| command::connect(Qid(0), x.max_admin, 0));
    /// SQSIZE is 0's based: the limit's last entry.
    admin_queue_size_at_the_limit_is_accepted =>
        case(Before::Nothing, 0, connect_data, Expect::Success)
            .sqe(|x| command::connect(Qid(0), x.max_admin - 1, 0));
}

/// The Connect data of a new association: CNTLID 0xFFFF.
fn connect_data_dynamic(x: &Ctx) -> Vec<u8> {
    data_with_cntlid(x, Cntlid::DYNAMIC)
}

// ---- NVMe/RDMA CM connect requests ------------------------------------------------------

/// The private data an InfiniBand CM REQ carries (rdma_cm pads to it).
const IB_CM_REQ_PRIVATE_DATA_LEN: usize = 56;

/// What the listener must do with a CM connect request.
#[derive(Debug, Clone, Copy)]
enum CmExpect {
    /// Accept: a queue is set up.
    Accept,
    /// Reject with this NVMe/RDMA status in the private data.
    Reject(u16),
}

/// What a CM row's builder sees.
struct CmCtx {
    /// The I/O queue size limit (entries).
    max_queue: u16,
}

/// Sends a CM connect request with the private data `pd` builds and checks the outcome;
/// then a well-behaved host is served.
fn run_cm(pd: fn(&CmCtx) -> Vec<u8>, expect: CmExpect) {
    let cfg = config(&["ram:16M"]);
    let env = start(&cfg);
    let x = CmCtx {
        max_queue: cfg.transport.max_queue_size,
    };
    let bytes = pd(&x);
    let dev: Arc<dyn Device> = env.target.device.clone();
    let port = env.target.target.ports()[0].clone();
    let pd_obj = dev.alloc_pd().unwrap_or_else(|e| panic!("{e}"));
    let cq = dev.create_cq(8).unwrap_or_else(|e| panic!("{e}"));
    let r = dev.connect(
        &nvmf_target::rdma::listen_addr(&port),
        QpInit {
            pd: pd_obj,
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
        &bytes,
        &mut |_| Ok(()),
        Duration::from_secs(5),
    );
    match (expect, r) {
        (CmExpect::Accept, Ok((qp, _accept))) => qp.disconnect(),
        (CmExpect::Reject(want), Err(VerbsError::Rejected(rej))) => {
            assert_eq!(
                CmReject::new_unchecked(&rej[..]).sts(),
                want,
                "reject status"
            );
        }
        (want, Err(e)) => panic!("expected {want:?}, got {e}"),
        (want, Ok(_)) => panic!("expected {want:?}, got a connection"),
    }
    assert_serves(&env.fabric, &env.nqn, 0);
}

/// One `#[test]` per row: `name => (private data builder, expectation);`.
macro_rules! cm_cases {
    ($($(#[$doc:meta])* $name:ident => ($pd:expr, $expect:expr $(,)?);)*) => {
        $(
            $(#[$doc])*
            #[test]
            fn $name() {
                run_cm($pd, $expect);
            }
        )*
    };
}

cm_cases! {
    /// The Linux host's I/O queue request: HRQSIZE = HSQSIZE + 1.
    cm_linux_io_queue_request_is_accepted =>
        (|_| cm_request(1, 32, 31, 0).to_vec(), CmExpect::Accept);
    /// The host's receive queue is its own business: nvmet and SPDK accept any.
    cm_hrqsize_above_our_queue_limit_is_accepted =>
        (|x| cm_request(1, x.max_queue + 1, 31, 0).to_vec(), CmExpect::Accept);
    cm_hrqsize_u16_max_is_accepted =>
        (|_| cm_request(1, u16::MAX, 31, 0).to_vec(), CmExpect::Accept);
    cm_hrqsize_smaller_than_hsqsize_plus_1_is_accepted =>
        (|_| cm_request(1, 8, 31, 0).to_vec(), CmExpect::Accept);
    /// Longer private data (InfiniBand pads it to 56 bytes): both peers accept it.
    cm_private_data_longer_than_32_bytes_is_accepted =>
        (
            |_| {
                let mut v = cm_request(1, 32, 31, 0).to_vec();
                v.resize(IB_CM_REQ_PRIVATE_DATA_LEN, 0);
                v
            },
            CmExpect::Accept,
        );
    /// A host that can take no response: refused on purpose (docs/peers.md).
    cm_hrqsize_0 =>
        (|_| cm_request(1, 0, 31, 0).to_vec(), CmExpect::Reject(reject_status::INVALID_HRQSIZE));
    /// SPDK refuses private data shorter than the 32-byte request.
    cm_private_data_of_31_bytes =>
        (
            |_| cm_request(1, 32, 31, 0)[..CM_REQ_LEN - 1].to_vec(),
            CmExpect::Reject(reject_status::INVALID_PRIVATE_DATA_LENGTH),
        );
    /// nvmet-rdma refuses an admin queue of more than 32 entries (NVME_AQ_DEPTH).
    cm_admin_hsqsize_above_the_limit =>
        (|_| cm_request(0, 33, 32, 0).to_vec(), CmExpect::Reject(reject_status::INVALID_HSQSIZE));
}
