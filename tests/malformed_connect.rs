//! Malformed Connect commands over the loopback transport (NVMe/RDMA on software
//! verbs), table-driven: each row of the [`cases!`] table is one named test made of
//! what exists first (nothing, an enabled controller, the queue or another queue of the
//! same QID already connected), the transport queue, the Connect SQE and Connect data,
//! and the exact outcome: the status (SCT, SC, DNR and, for Invalid Parameters,
//! IATTR/IPO in dword 0) or success. [`run`] then checks that a connected I/O queue
//! does I/O and that a well-behaved host is served. Cases already in
//! `loopback_errors.rs` (unknown subsystem, disallowed host, wrong CNTLID on the admin
//! queue, SQSIZE 0 on the admin queue, a second admin Connect) are not repeated.

use nvmf_common::types::{Cntlid, Nqn, Nsid, Qid};
use nvmf_common::wire::fabrics::{
    connect_data_offset, connect_offset, reg, ConnectCmd, CONNECT_IATTR_DATA,
};
use nvmf_common::wire::status::{cmd_specific, generic, Sct};
use nvmf_initiator::command;
use nvmf_initiator::queue::{Completion, Queue};
use nvmf_initiator::transport::DataDir;
use nvmf_tests::raw_tcp::CC_ENABLE;
use nvmf_tests::{assert_serves, config, exec, hostnqn, raw_queue, start, Env, TEST_HOSTID};

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
}

/// One row of the table.
struct Case {
    before: Before,
    /// The transport queue's QID.
    queue: u16,
    sqe: fn(&Ctx) -> [u8; 64],
    data: fn(&Ctx) -> Vec<u8>,
    expect: Expect,
}

fn case(before: Before, queue: u16, data: fn(&Ctx) -> Vec<u8>, expect: Expect) -> Case {
    Case {
        before,
        queue,
        sqe: connect_sqe,
        data,
        expect,
    }
}

impl Case {
    fn sqe(mut self, sqe: fn(&Ctx) -> [u8; 64]) -> Case {
        self.sqe = sqe;
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
    let buf = env.fabric.alloc(d.len()).unwrap_or_else(|e| panic!("{e}"));
    assert!(buf.write_at(0, d));
    exec(q, sqe, Some(&buf), DataDir::ToCtrl)
}

/// An admin queue connected and enabled by hand; returns the queue and CNTLID.
fn admin_up(env: &Env) -> (Queue, Cntlid) {
    let mut admin = raw_queue(env, 0, 32);
    let d = command::connect_data(TEST_HOSTID, Cntlid::DYNAMIC, &env.nqn, &hostnqn());
    let c = send_connect(env, &mut admin, command::connect(Qid(0), 31, 0), &d);
    assert!(c.status.is_success(), "{}", c.status);
    let cntlid = Cntlid(c.dw0 as u16);
    let c = exec(
        &mut admin,
        command::property_set(reg::CC, CC_ENABLE),
        None,
        DataDir::None,
    );
    assert!(c.status.is_success(), "{}", c.status);
    let c = exec(
        &mut admin,
        command::set_number_of_queues(4),
        None,
        DataDir::None,
    );
    assert!(c.status.is_success(), "{}", c.status);
    (admin, cntlid)
}

/// Runs one row of the table against a fresh target.
fn run(c: Case) {
    let cfg = config(&["ram:16M"]);
    let env = start(&cfg);
    let (_admin, cntlid) = match c.before {
        Before::Nothing => (None, Cntlid::DYNAMIC),
        _ => {
            let (a, id) = admin_up(&env);
            (Some(a), id)
        }
    };
    let x = Ctx {
        nqn: env.nqn.clone(),
        cntlid,
        qid: c.queue,
        max_admin: cfg.transport.max_admin_queue_size,
        mqes: cfg.transport.max_queue_size - 1,
    };
    let mut q = raw_queue(&env, c.queue, 32);
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
        Before::Nothing | Before::Controller => {}
    }
    let r = send_connect(&env, &mut q, (c.sqe)(&x), &(c.data)(&x));
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
    // A connected I/O queue does I/O.
    let connected = matches!(c.expect, Expect::Success) || c.before == Before::QueueConnected;
    if c.queue != 0 && connected {
        let f = exec(&mut q, command::flush(Nsid(1)), None, DataDir::None);
        assert!(f.status.is_success(), "{}", f.status);
    }
    assert_serves(&env.fabric, &env.nqn, 0);
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
    /// Refused, and the queue still does I/O.
    second_connect_on_an_io_queue =>
        case(
            Before::QueueConnected,
            1,
            connect_data,
            Expect::Status(Sct::Generic, generic::COMMAND_SEQUENCE_ERROR),
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
}
