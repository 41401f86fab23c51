//! Malformed Connect commands over the loopback transport (NVMe/RDMA on software
//! verbs), one test per case: each asserts the exact status (SCT, SC, DNR and, for
//! Invalid Parameters, IATTR/IPO in dword 0) and that a well-behaved host is served
//! afterwards. Cases already in `loopback_errors.rs` (unknown subsystem, disallowed
//! host, wrong CNTLID on the admin queue, SQSIZE 0 on the admin queue, a second admin
//! Connect) are not repeated.

use nvmf_common::types::{Cntlid, Nqn, Qid};
use nvmf_common::wire::fabrics::{
    connect_data_offset, connect_offset, reg, ConnectCmd, CONNECT_DATA_LEN, CONNECT_IATTR_DATA,
};
use nvmf_common::wire::status::{cmd_specific, generic, Sct};
use nvmf_initiator::command;
use nvmf_initiator::queue::{Completion, Queue};
use nvmf_initiator::transport::DataDir;
use nvmf_tests::raw_tcp::CC_ENABLE;
use nvmf_tests::{assert_serves, config, exec, hostnqn, raw_queue, start, Env, TEST_HOSTID};

/// Byte offset of NQN fields' terminator limit: an NQN is at most 223 bytes.
const NQN_MAX_LEN: usize = 223;
/// Size of an NQN field in the Connect data.
const NQN_FIELD_LEN: usize = 256;

fn data(env: &Env, cntlid: Cntlid) -> [u8; CONNECT_DATA_LEN] {
    command::connect_data(TEST_HOSTID, cntlid, &env.nqn, &hostnqn())
}

/// Sends a Connect for `qid` with `sqsize` and the Connect data `d` on `q`.
fn send_connect(env: &Env, q: &mut Queue, sqe: [u8; 64], d: &[u8]) -> Completion {
    let buf = env
        .fabric
        .alloc(CONNECT_DATA_LEN)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(buf.write_at(0, d));
    exec(q, sqe, Some(&buf), DataDir::ToCtrl)
}

fn connect_on(env: &Env, qid: u16, sqsize: u16, d: &[u8]) -> Completion {
    let mut q = raw_queue(env, qid, 32);
    send_connect(env, &mut q, command::connect(Qid(qid), sqsize, 0), d)
}

/// Connect Invalid Parameters with DNR naming the Connect data field at `off`.
fn assert_invalid_data_field(c: &Completion, off: u16) {
    assert!(
        c.status.is(
            Sct::CommandSpecific,
            cmd_specific::CONNECT_INVALID_PARAMETERS
        ),
        "expected Connect Invalid Parameters, got {}",
        c.status
    );
    assert!(c.status.dnr, "DNR");
    assert_eq!(c.dw0, CONNECT_IATTR_DATA | u32::from(off), "IATTR/IPO");
}

/// Connect Invalid Parameters with DNR naming the command field at `off`.
fn assert_invalid_cmd_field(c: &Completion, off: u16) {
    assert!(
        c.status.is(
            Sct::CommandSpecific,
            cmd_specific::CONNECT_INVALID_PARAMETERS
        ),
        "expected Connect Invalid Parameters, got {}",
        c.status
    );
    assert!(c.status.dnr, "DNR");
    assert_eq!(c.dw0, u32::from(off), "IATTR/IPO");
}

fn fill_nqn(d: &mut [u8], field: u16, bytes: &[u8]) {
    let at = usize::from(field);
    let f = d
        .get_mut(at..at + NQN_FIELD_LEN)
        .unwrap_or_else(|| panic!("field"));
    f.fill(0);
    f.get_mut(..bytes.len())
        .unwrap_or_else(|| panic!("NQN longer than its field"))
        .copy_from_slice(bytes);
}

/// An admin queue connected and enabled by hand; returns the queue and CNTLID.
fn admin_up(env: &Env) -> (Queue, Cntlid) {
    let mut admin = raw_queue(env, 0, 32);
    let c = send_connect(
        env,
        &mut admin,
        command::connect(Qid(0), 31, 0),
        &data(env, Cntlid::DYNAMIC),
    );
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

#[test]
fn subsysnqn_not_nul_terminated() {
    let env = start(&config(&["ram:16M"]));
    let mut d = data(&env, Cntlid::DYNAMIC);
    fill_nqn(
        &mut d,
        connect_data_offset::SUBSYSNQN,
        &[b'a'; NQN_FIELD_LEN],
    );
    let c = connect_on(&env, 0, 31, &d);
    assert_invalid_data_field(&c, connect_data_offset::SUBSYSNQN);
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn hostnqn_not_nul_terminated() {
    let env = start(&config(&["ram:16M"]));
    let mut d = data(&env, Cntlid::DYNAMIC);
    fill_nqn(&mut d, connect_data_offset::HOSTNQN, &[b'h'; NQN_FIELD_LEN]);
    let c = connect_on(&env, 0, 31, &d);
    assert_invalid_data_field(&c, connect_data_offset::HOSTNQN);
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn subsysnqn_over_223_bytes() {
    let env = start(&config(&["ram:16M"]));
    let mut d = data(&env, Cntlid::DYNAMIC);
    // The configured NQN padded past the limit: a prefix match must not slip through.
    let mut long = env.nqn.as_str().as_bytes().to_vec();
    long.resize(NQN_MAX_LEN + 1, b'x');
    fill_nqn(&mut d, connect_data_offset::SUBSYSNQN, &long);
    let c = connect_on(&env, 0, 31, &d);
    assert_invalid_data_field(&c, connect_data_offset::SUBSYSNQN);
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn hostnqn_over_223_bytes() {
    let env = start(&config(&["ram:16M"]));
    let mut d = data(&env, Cntlid::DYNAMIC);
    let mut long = hostnqn().as_str().as_bytes().to_vec();
    long.resize(NQN_MAX_LEN + 1, b'y');
    fill_nqn(&mut d, connect_data_offset::HOSTNQN, &long);
    let c = connect_on(&env, 0, 31, &d);
    assert_invalid_data_field(&c, connect_data_offset::HOSTNQN);
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn nqn_of_exactly_223_bytes_is_accepted_as_a_host() {
    let env = start(&config(&["ram:16M"]));
    let mut d = data(&env, Cntlid::DYNAMIC);
    let mut long = hostnqn().as_str().as_bytes().to_vec();
    long.resize(NQN_MAX_LEN, b'z');
    fill_nqn(&mut d, connect_data_offset::HOSTNQN, &long);
    let c = connect_on(&env, 0, 31, &d);
    assert!(c.status.is_success(), "{}", c.status);
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn subsysnqn_empty() {
    let env = start(&config(&["ram:16M"]));
    let mut d = data(&env, Cntlid::DYNAMIC);
    fill_nqn(&mut d, connect_data_offset::SUBSYSNQN, &[]);
    let c = connect_on(&env, 0, 31, &d);
    assert_invalid_data_field(&c, connect_data_offset::SUBSYSNQN);
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn hostnqn_empty() {
    let env = start(&config(&["ram:16M"]));
    let mut d = data(&env, Cntlid::DYNAMIC);
    fill_nqn(&mut d, connect_data_offset::HOSTNQN, &[]);
    let c = connect_on(&env, 0, 31, &d);
    assert_invalid_data_field(&c, connect_data_offset::HOSTNQN);
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn hostnqn_not_utf8() {
    let env = start(&config(&["ram:16M"]));
    let mut d = data(&env, Cntlid::DYNAMIC);
    fill_nqn(
        &mut d,
        connect_data_offset::HOSTNQN,
        b"nqn.2014-08.\xff\xfe",
    );
    let c = connect_on(&env, 0, 31, &d);
    assert_invalid_data_field(&c, connect_data_offset::HOSTNQN);
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn connect_data_shorter_than_1024_bytes() {
    let env = start(&config(&["ram:16M"]));
    let mut q = raw_queue(&env, 0, 32);
    let buf = env.fabric.alloc(512).unwrap_or_else(|e| panic!("{e}"));
    let d = data(&env, Cntlid::DYNAMIC);
    assert!(buf.write_at(0, d.get(..512).unwrap_or_default()));
    let c = exec(
        &mut q,
        command::connect(Qid(0), 31, 0),
        Some(&buf),
        DataDir::ToCtrl,
    );
    assert!(
        c.status.is(Sct::Generic, generic::DATA_SGL_LENGTH_INVALID),
        "{}",
        c.status
    );
    assert!(c.status.dnr);
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn connect_with_unknown_record_format() {
    let env = start(&config(&["ram:16M"]));
    let mut q = raw_queue(&env, 0, 32);
    let mut sqe = command::connect(Qid(0), 31, 0);
    ConnectCmd::new_unchecked(&mut sqe[..]).set_recfmt(1);
    let c = send_connect(&env, &mut q, sqe, &data(&env, Cntlid::DYNAMIC));
    assert!(
        c.status.is(
            Sct::CommandSpecific,
            cmd_specific::CONNECT_INCOMPATIBLE_FORMAT
        ),
        "{}",
        c.status
    );
    assert!(c.status.dnr);
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn io_connect_before_any_admin_queue() {
    let env = start(&config(&["ram:16M"]));
    // No controller exists yet: every CNTLID an I/O queue can name is unknown.
    for cntlid in [Cntlid(1), Cntlid(0), Cntlid::DYNAMIC] {
        let c = connect_on(&env, 1, 31, &data(&env, cntlid));
        assert_invalid_data_field(&c, connect_data_offset::CNTLID);
    }
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn second_connect_on_an_io_queue() {
    let env = start(&config(&["ram:16M"]));
    let (_admin, cntlid) = admin_up(&env);
    let mut io = raw_queue(&env, 1, 32);
    let sqe = command::connect(Qid(1), 31, 0);
    let c = send_connect(&env, &mut io, sqe, &data(&env, cntlid));
    assert!(c.status.is_success(), "{}", c.status);
    let c = send_connect(&env, &mut io, sqe, &data(&env, cntlid));
    assert!(
        c.status.is(Sct::Generic, generic::COMMAND_SEQUENCE_ERROR),
        "{}",
        c.status
    );
    assert!(c.status.dnr);
    // The queue still does I/O.
    let c = exec(
        &mut io,
        command::flush(nvmf_common::types::Nsid(1)),
        None,
        DataDir::None,
    );
    assert!(c.status.is_success(), "{}", c.status);
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn same_io_queue_connected_twice() {
    let env = start(&config(&["ram:16M"]));
    let (_admin, cntlid) = admin_up(&env);
    // The first queue stays open (dropping it would free qid 1 again).
    let mut first = raw_queue(&env, 1, 32);
    let c = send_connect(
        &env,
        &mut first,
        command::connect(Qid(1), 31, 0),
        &data(&env, cntlid),
    );
    assert!(c.status.is_success(), "{}", c.status);
    let mut again = raw_queue(&env, 1, 32);
    let c = send_connect(
        &env,
        &mut again,
        command::connect(Qid(1), 31, 0),
        &data(&env, cntlid),
    );
    assert!(
        c.status.is(Sct::Generic, generic::COMMAND_SEQUENCE_ERROR),
        "{}",
        c.status
    );
    assert!(c.status.dnr);
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn io_connect_with_the_cntlid_of_another_host() {
    let env = start(&config(&["ram:16M"]));
    let (_admin, cntlid) = admin_up(&env);
    let intruder = Nqn::new("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000ff")
        .unwrap_or_else(|e| panic!("{e}"));
    let d = command::connect_data([0x22; 16], cntlid, &env.nqn, &intruder);
    let c = connect_on(&env, 1, 31, &d);
    assert_invalid_data_field(&c, connect_data_offset::CNTLID);
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn admin_queue_size_above_the_limit() {
    let cfg = config(&["ram:16M"]);
    let max = cfg.transport.max_admin_queue_size;
    let env = start(&cfg);
    // SQSIZE is 0's based: SQSIZE = max means max + 1 entries.
    let c = connect_on(&env, 0, max, &data(&env, Cntlid::DYNAMIC));
    assert_invalid_cmd_field(&c, connect_offset::SQSIZE);
    let c = connect_on(&env, 0, u16::MAX, &data(&env, Cntlid::DYNAMIC));
    assert_invalid_cmd_field(&c, connect_offset::SQSIZE);
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn io_queue_size_zero_or_above_mqes() {
    let cfg = config(&["ram:16M"]);
    let mqes = cfg.transport.max_queue_size - 1;
    let env = start(&cfg);
    let (_admin, cntlid) = admin_up(&env);
    for sqsize in [0, mqes + 1, u16::MAX] {
        let c = connect_on(&env, 1, sqsize, &data(&env, cntlid));
        assert_invalid_cmd_field(&c, connect_offset::SQSIZE);
    }
    // MQES itself is fine.
    let c = connect_on(&env, 1, mqes, &data(&env, cntlid));
    assert!(c.status.is_success(), "{}", c.status);
    assert_serves(&env.fabric, &env.nqn, 0);
}

#[test]
fn connect_qid_differs_from_the_transport_queue() {
    let env = start(&config(&["ram:16M"]));
    let (_admin, cntlid) = admin_up(&env);
    let mut q = raw_queue(&env, 2, 32);
    let c = send_connect(
        &env,
        &mut q,
        command::connect(Qid(3), 31, 0),
        &data(&env, cntlid),
    );
    assert_invalid_cmd_field(&c, connect_offset::QID);
    assert_serves(&env.fabric, &env.nqn, 0);
}
