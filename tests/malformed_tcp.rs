//! Malformed NVMe/TCP input against the TCP target on 127.0.0.1, table-driven: each
//! row of the [`cases!`] table is one named test made of the stage the scripted host
//! ([`nvmf_tests::raw_tcp`]) reaches first, the bytes it then sends (PDUs built by the
//! framer's writer and corrupted by hand, or made by hand outright) and the exact
//! outcome: a C2HTermReq with its FES/FEI (and what it echoes) followed by the close,
//! a status (after which the connection goes on), a silent close, a close after the
//! stall timeout, or nothing at all when the host hangs up. [`run`] then checks that
//! the target released what the connection held (poll group counters), that the
//! controller's admin queue still works, that no data reached the namespace where
//! none may, and that a well-behaved host is served.
//!
//! These are the cases the Linux nvmet-tcp CVEs came from: corrupted ICReq, PDUs
//! before or after initialization, H2CData before its command or past its R2T,
//! inconsistent HLEN/PDO/PLEN/DATAO/DATAL, HLEN 255 with digests, transfer tags 0 and
//! out of range, digest errors, truncation, and peers that stall or vanish mid-PDU.

use std::time::{Duration, Instant};

use nvmf_common::transport::tcp::{encode_term_req, HostConfig, PduWriter, Role};
use nvmf_common::wire::sgl::SglDescriptor;
use nvmf_common::wire::status::{generic, Sct};
use nvmf_common::wire::tcp::{offset, pdu_type, term_fes, DATA_HDR_LEN, ICREQ_LEN};
use nvmf_initiator::command;
use nvmf_initiator::transport::tcp::TcpOptions as HostOptions;
use nvmf_target::tcp::{GroupCounters, TcpOptions};
use nvmf_tests::raw_tcp::{
    icreq_bytes, no_data, pair, read_sqe, set_plen, status_of, with_cid, with_sgl, write_sqe,
    RawTcp, Rx, BS,
};
use nvmf_tests::{assert_serves, config, start_tcp, start_tcp_with, TcpEnv};

use term_fes::{
    DATA_LIMIT_EXCEEDED as DLE, DATA_OUT_OF_RANGE as DOR, HEADER_DIGEST_ERROR as HDE,
    INVALID_HEADER_FIELD as IHF, PDU_SEQUENCE_ERROR as SEQ,
};

// ---- the table's vocabulary ---------------------------------------------------------

/// How far the scripted host gets before it sends the case's bytes.
#[derive(Debug, Clone, Copy)]
enum Stage {
    /// A new connection that sent nothing.
    Fresh,
    /// A new connection whose host pretends the ICReq exchange happened.
    Uninitialized,
    /// ICReq/ICResp done, nothing else.
    Initialized,
    /// An enabled admin queue and I/O queue 1 (32 entries) of one controller; the
    /// bytes go on the I/O queue.
    IoQueue,
    /// [`Stage::IoQueue`] with a write of `nlb` blocks at `slba` waiting for its data
    /// after its first R2T (at offset 0).
    R2tWrite { slba: u64, nlb: u32 },
}

/// A new connection that sent nothing.
const FRESH: Stage = Stage::Fresh;
/// ICReq/ICResp done.
const INIT: Stage = Stage::Initialized;
/// An I/O queue of an enabled controller.
const IO: Stage = Stage::IoQueue;
/// A 36 KiB write at LBA 0 waiting for its data.
const W72: Stage = Stage::R2tWrite { slba: 0, nlb: 72 };
/// A 4 KiB write at LBA 0 waiting for its data.
const W8: Stage = Stage::R2tWrite { slba: 0, nlb: 8 };

/// The FEI a termination request must carry.
#[derive(Debug, Clone, Copy)]
enum Fei {
    Is(u32),
    /// The header digest the controller received (the one in the bytes sent).
    ReceivedHeaderDigest,
}

/// What a termination request must echo of the bytes sent.
#[derive(Debug, Clone, Copy)]
enum Echo {
    Any,
    /// All of them.
    Whole,
    /// Exactly their first n bytes.
    Exactly(usize),
    /// At least n bytes, the first n of them.
    Prefix(usize),
}

/// What the target must do with the bytes.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// A C2HTermReq with this FES and FEI, then the close.
    Term { fes: u16, fei: Fei, echo: Echo },
    /// A response to the case's command with this status (and DNR when given); the
    /// connection goes on.
    Status { sct: Sct, sc: u8, dnr: Option<bool> },
    /// The connection closes without a word.
    Closed,
    /// The connection closes after the stall timeout (300 ms), not before.
    Stalled,
    /// Nothing: the host hangs up after sending; the target only cleans up.
    HostHangsUp,
}

/// The scripted host at its stage, and the command the case is about.
struct Conn {
    h: RawTcp,
    /// The R2T write's command (or the one the case's builder sends).
    cid: u16,
    ttag: u16,
    /// The first R2T's length.
    r2t_len: u32,
    /// The target's in-capsule data limit on I/O queues.
    icd: u32,
}

impl Conn {
    fn writer(&self) -> PduWriter {
        self.h.writer()
    }

    /// An H2CData PDU for the case's command and transfer tag.
    fn h2c(&self, datao: u32, data: &[u8], last: bool) -> Vec<u8> {
        let mut pdu = Vec::new();
        self.writer()
            .h2c_data(self.cid, self.ttag, datao, data, last, &mut pdu)
            .unwrap_or_else(|e| panic!("{e}"));
        pdu
    }

    /// A CapsuleCmd for `sqe` (with a fresh CID, which becomes the case's) and `data`.
    fn capsule(&mut self, sqe: [u8; 64], data: &[u8]) -> Vec<u8> {
        self.cid = self.h.next_cid();
        let mut pdu = Vec::new();
        self.writer()
            .capsule_cmd(&with_cid(sqe, self.cid), data, &mut pdu)
            .unwrap_or_else(|e| panic!("{e}"));
        pdu
    }
}

/// Makes the bytes to send (it may first send well-formed PDUs on its own).
type Build = fn(&mut Conn) -> Vec<u8>;

/// One row of the table.
struct Case {
    host: HostConfig,
    target: TcpOptions,
    stage: Stage,
    build: Build,
    expect: Expect,
    /// Blocks (slba, nlb) written before the case whose data must survive it; an
    /// R2T write's own blocks by default.
    unchanged: Option<(u64, u32)>,
    /// What the poll groups' counters must show afterwards.
    counters: Option<fn(&GroupCounters) -> bool>,
}

fn case(stage: Stage, build: Build, expect: Expect) -> Case {
    Case {
        host: HostConfig::default(),
        target: TcpOptions::default(),
        stage,
        build,
        expect,
        unchanged: match stage {
            Stage::R2tWrite { slba, nlb } => Some((slba, nlb)),
            _ => None,
        },
        counters: None,
    }
}

impl Case {
    fn host(mut self, host: HostConfig) -> Case {
        self.host = host;
        self
    }
    fn target(mut self, target: TcpOptions) -> Case {
        self.target = target;
        self
    }
    fn unchanged(mut self, slba: u64, nlb: u32) -> Case {
        self.unchanged = Some((slba, nlb));
        self
    }
    fn counters(mut self, f: fn(&GroupCounters) -> bool) -> Case {
        self.counters = Some(f);
        self
    }
    fn echo(mut self, e: Echo) -> Case {
        if let Expect::Term { echo, .. } = &mut self.expect {
            *echo = e;
        }
        self
    }
}

fn term(fes: u16, fei: u32) -> Expect {
    Expect::Term {
        fes,
        fei: Fei::Is(fei),
        echo: Echo::Any,
    }
}

fn header_digest_error() -> Expect {
    Expect::Term {
        fes: HDE,
        fei: Fei::ReceivedHeaderDigest,
        echo: Echo::Any,
    }
}

fn status(sct: Sct, sc: u8, dnr: Option<bool>) -> Expect {
    Expect::Status { sct, sc, dnr }
}

fn success() -> Expect {
    status(Sct::Generic, generic::SUCCESS, Some(false))
}

/// Sixteen R2Ts per command (MAXR2T is 0's based).
const MAXR2T_15: u32 = 15;
/// The largest PDU data alignment: 128 bytes (0's based dwords).
const PDA_31: u8 = 31;

fn transient_transport_error() -> Expect {
    // A transient transport error may be retried.
    status(
        Sct::Generic,
        generic::TRANSIENT_TRANSPORT_ERROR,
        Some(false),
    )
}

fn digests() -> HostConfig {
    HostConfig {
        header_digest: true,
        data_digest: true,
        ..HostConfig::default()
    }
}

fn data_digest_only() -> HostConfig {
    HostConfig {
        data_digest: true,
        ..HostConfig::default()
    }
}

/// 32 KiB H2CData PDUs and R2Ts, so a 36 KiB write takes two R2Ts.
fn small_h2c() -> TcpOptions {
    TcpOptions {
        maxh2cdata: 32 * 1024,
        ..TcpOptions::default()
    }
}

fn stall_300ms() -> TcpOptions {
    TcpOptions {
        stall_timeout: Duration::from_millis(300),
        ..TcpOptions::default()
    }
}

// ---- the driver -----------------------------------------------------------------------

/// The data a case's unchanged blocks hold before it runs.
fn old_data(slba: u64, nlb: u32) -> Vec<u8> {
    nvmf_tests::pattern(0x01D, slba, (nlb * BS) as usize)
}

/// Brings a connection to `c.stage`; returns the controller's admin queue (for the
/// I/O queue stages) and the connection.
fn open(env: &TcpEnv, c: &Case) -> (Option<RawTcp>, Conn) {
    let conn = |h| Conn {
        h,
        cid: 0,
        ttag: 0,
        r2t_len: 0,
        icd: env.target.params.in_capsule_data_size,
    };
    match c.stage {
        Stage::Fresh => (None, conn(RawTcp::connect(env.addr, c.host))),
        Stage::Uninitialized => {
            let mut h = RawTcp::connect(env.addr, c.host);
            h.pretend_initialized();
            (None, conn(h))
        }
        Stage::Initialized => {
            let mut h = RawTcp::connect(env.addr, c.host);
            h.init();
            (None, conn(h))
        }
        Stage::IoQueue | Stage::R2tWrite { .. } => {
            let (admin, mut io, _) = pair(env, c.host);
            if let Some((slba, nlb)) = c.unchanged {
                let (st, _) = io.write_r2t(slba, &old_data(slba, nlb));
                assert!(st.is_success(), "writing the old data: {st}");
            }
            let mut conn = conn(io);
            if let Stage::R2tWrite { slba, nlb } = c.stage {
                (conn.cid, conn.ttag, conn.r2t_len) = conn.h.start_r2t_write(slba, nlb);
            }
            (Some(admin), conn)
        }
    }
}

/// The header digest in a PDU: the four bytes after its HLEN-byte header.
fn header_digest_in(pdu: &[u8]) -> u32 {
    let hlen = usize::from(pdu[offset::HLEN as usize]);
    u32::from_le_bytes([pdu[hlen], pdu[hlen + 1], pdu[hlen + 2], pdu[hlen + 3]])
}

/// Runs one row of the table against a fresh target.
fn run(c: Case) {
    let env = start_tcp_with(
        &config(&["ram:16M"]),
        HostOptions::default(),
        c.target.clone(),
    );
    let (admin, mut conn) = open(&env, &c);
    let sent = (c.build)(&mut conn);
    let t0 = Instant::now();
    conn.h.send_lossy(&sent);
    match c.expect {
        Expect::Term { fes, fei, echo } => {
            let fei = match fei {
                Fei::Is(v) => v,
                Fei::ReceivedHeaderDigest => header_digest_in(&sent),
            };
            let echoed = conn.h.expect_term(fes, fei);
            match echo {
                Echo::Any => {}
                Echo::Whole => assert_eq!(echoed, sent, "the whole PDU comes back"),
                Echo::Exactly(n) => assert_eq!(echoed, sent[..n], "the PDU's header comes back"),
                Echo::Prefix(n) => {
                    assert!(echoed.len() >= n, "{} bytes echoed", echoed.len());
                    assert_eq!(echoed[..n], sent[..n], "the PDU's header comes back");
                }
            }
        }
        Expect::Status { sct, sc, dnr } => {
            let st = status_of(&conn.h.expect_resp(conn.cid));
            assert!(st.is(sct, sc), "expected {sct:?}/{sc:#x}, got {st}");
            if let Some(dnr) = dnr {
                assert_eq!(st.dnr, dnr, "DNR of {st}");
            }
            // The connection goes on.
            if admin.is_some() {
                if let Some((slba, nlb)) = c.unchanged {
                    assert_eq!(
                        conn.h.read_back(slba, nlb),
                        old_data(slba, nlb),
                        "nothing written"
                    );
                }
                let d = nvmf_tests::pattern(0x60, 2000, 4096);
                assert!(conn.h.write_icd(2000, &d).is_success());
                assert_eq!(conn.h.read_back(2000, 8), d);
            } else {
                conn.h.admin_up(&env.nqn);
            }
        }
        Expect::Closed => conn.h.expect_closed(),
        Expect::Stalled => {
            conn.h.expect_closed();
            let waited = t0.elapsed();
            assert!(waited >= Duration::from_millis(250), "{waited:?}");
            // Only a guard against a hang.
            assert!(waited < Duration::from_secs(5), "{waited:?}");
        }
        Expect::HostHangsUp => {
            env.wait_counters("accepted", |k| k.accepted >= 1);
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    drop(conn);
    // Only the controller's admin queue remains; nothing is held.
    let live = u64::from(admin.is_some());
    env.wait_counters("the connection's resources released", |k| {
        k.buffers_in_use == 0 && k.queues == live
    });
    if let Some(f) = c.counters {
        env.wait_counters("the case's counters", f);
    }
    if let Some(mut admin) = admin {
        let r = admin.run(
            no_data(command::property_get(nvmf_common::wire::fabrics::reg::CSTS)),
            &[],
        );
        assert!(status_of(&r).is_success(), "admin queue: {}", status_of(&r));
    }
    if let Some((slba, nlb)) = c.unchanged {
        let (_a, mut io, _) = pair(&env, HostConfig::default());
        assert_eq!(
            io.read_back(slba, nlb),
            old_data(slba, nlb),
            "nothing written"
        );
    }
    assert_serves(&env.fabric, &env.nqn, 1000);
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

/// An ICReq with byte `at` set to `v`.
fn icreq_with(at: u32, v: u8) -> Vec<u8> {
    let mut b = icreq_bytes(&HostConfig::default());
    b[at as usize] = v;
    b
}

fn icreq_with_plen(plen: u32) -> Vec<u8> {
    let mut b = icreq_bytes(&HostConfig::default());
    set_plen(&mut b, plen);
    b
}

/// A Keep Alive CapsuleCmd with byte `at` set to `v`.
fn keep_alive_with(c: &Conn, at: u32, v: u8) -> Vec<u8> {
    let mut pdu = c.h.keep_alive_pdu();
    pdu[at as usize] = v;
    pdu
}

/// A Keep Alive CapsuleCmd cut to `plen` bytes, with that PLEN.
fn keep_alive_cut(c: &Conn, plen: u32) -> Vec<u8> {
    let mut pdu = c.h.keep_alive_pdu();
    set_plen(&mut pdu, plen);
    pdu.truncate(plen as usize);
    pdu
}

/// A Keep Alive CapsuleCmd carrying `len` bytes of in-capsule data.
fn keep_alive_with_data(c: &Conn, len: u32) -> Vec<u8> {
    let mut pdu = Vec::new();
    c.writer()
        .capsule_cmd(
            &with_sgl(command::keep_alive(), SglDescriptor::in_capsule(0, len)),
            &vec![0u8; len as usize],
            &mut pdu,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    pdu
}

/// A Keep Alive CapsuleCmd with 64 bytes of in-capsule data and PDO `pdo`.
fn capsule_with_pdo(c: &Conn, pdo: u8) -> Vec<u8> {
    let mut pdu = keep_alive_with_data(c, 64);
    pdu[offset::PDO as usize] = pdo;
    pdu
}

/// A Keep Alive CapsuleCmd whose header claims in-capsule data of `plen - 72` bytes.
fn keep_alive_claiming(c: &Conn, plen: u32) -> Vec<u8> {
    let mut pdu = c.h.keep_alive_pdu();
    pdu[offset::PDO as usize] = 72;
    set_plen(&mut pdu, plen);
    pdu
}

/// A PDU of `t` (a Keep Alive CapsuleCmd otherwise).
fn pdu_of_type(c: &mut Conn, t: u8) -> Vec<u8> {
    keep_alive_with(c, offset::TYPE, t)
}

/// H2CData for the R2T write at `datao` (4 KiB, not the last).
fn h2c_at(c: &mut Conn, datao: u32) -> Vec<u8> {
    c.h2c(datao, &[3; 4096], false)
}

/// H2CData of 512 bytes for the R2T write with DATAL set to `datal`.
fn h2c_with_datal(c: &mut Conn, datal: u32) -> Vec<u8> {
    let mut pdu = c.h2c(0, &[4; 512], false);
    let at = offset::DATA_LENGTH as usize;
    pdu[at..at + 4].copy_from_slice(&datal.to_le_bytes());
    pdu
}

/// H2CData of 512 bytes for the R2T write with PLEN set to `plen`.
fn h2c_with_plen(c: &mut Conn, plen: u32) -> Vec<u8> {
    let mut pdu = c.h2c(0, &[4; 512], false);
    set_plen(&mut pdu, plen);
    pdu
}

/// H2CData of 512 bytes for the R2T write with transfer tag `ttag`.
fn h2c_with_ttag(c: &mut Conn, ttag: u16) -> Vec<u8> {
    c.ttag = ttag;
    c.h2c(0, &[1; 512], false)
}

/// A write of 8 blocks at `slba` with 4 KiB in the capsule.
fn write_capsule(c: &mut Conn, slba: u64) -> Vec<u8> {
    c.capsule(
        write_sqe(slba, 8, SglDescriptor::in_capsule(0, 4096)),
        &[0xEE; 4096],
    )
}

// ---- the table ----------------------------------------------------------------------

cases! {
    // ---- connection initialization
    icreq_with_unsupported_pfv =>
        case(FRESH, |_| icreq_with(offset::PFV, 1), term(IHF, offset::PFV))
            .echo(Echo::Whole);
    icreq_with_hpda_above_31 =>
        case(FRESH, |_| icreq_with(offset::HPDA, 32), term(IHF, offset::HPDA));
    /// nvmet and SPDK accept any MAXR2T (docs/peers.md); the queue then does I/O.
    icreq_with_maxr2t_above_0_is_accepted =>
        case(IO, |c| write_capsule(c, 100), success())
            .host(HostConfig { maxr2t: MAXR2T_15, ..HostConfig::default() });
    /// SPDK accepts HPDA 1..=31 and nvmet refuses it; we accept it on purpose
    /// (docs/peers.md): the alignment is valid and honoured.
    icreq_with_hpda_31_is_accepted =>
        case(IO, |c| write_capsule(c, 100), success())
            .host(HostConfig { hpda: PDA_31, ..HostConfig::default() });
    icreq_with_plen_0 =>
        case(FRESH, |_| icreq_with_plen(0), term(IHF, offset::PLEN));
    icreq_with_plen_8 =>
        case(FRESH, |_| icreq_with_plen(8), term(IHF, offset::PLEN));
    icreq_with_plen_127 =>
        case(FRESH, |_| icreq_with_plen(127), term(IHF, offset::PLEN));
    icreq_with_plen_129 =>
        case(FRESH, |_| icreq_with_plen(129), term(IHF, offset::PLEN));
    icreq_with_plen_4096 =>
        case(FRESH, |_| icreq_with_plen(4096), term(IHF, offset::PLEN));
    icreq_with_plen_u32_max =>
        case(FRESH, |_| icreq_with_plen(u32::MAX), term(IHF, offset::PLEN));
    icreq_with_hlen_255 =>
        case(FRESH, |_| icreq_with(offset::HLEN, 255), term(IHF, offset::HLEN));
    icreq_with_pdo_8 =>
        case(FRESH, |_| icreq_with(offset::PDO, 8), term(IHF, offset::PDO));
    icreq_truncated_then_close =>
        case(
            FRESH,
            |_| icreq_bytes(&HostConfig::default())[..ICREQ_LEN / 2].to_vec(),
            Expect::HostHangsUp,
        );
    /// Refused on its common header, which is what comes back.
    capsule_before_icreq =>
        case(Stage::Uninitialized, |c| c.h.keep_alive_pdu(), term(SEQ, 0))
            .echo(Echo::Exactly(8))
            .counters(|k| k.protocol_errors == 1);
    icreq_twice =>
        case(INIT, |_| icreq_bytes(&HostConfig::default()), term(SEQ, 0));
    pdu_type_0x08_reserved =>
        case(INIT, |c| pdu_of_type(c, 0x08), term(IHF, offset::TYPE));
    pdu_type_0x0a_reserved =>
        case(INIT, |c| pdu_of_type(c, 0x0A), term(IHF, offset::TYPE));
    pdu_type_0x7f_reserved =>
        case(INIT, |c| pdu_of_type(c, 0x7F), term(IHF, offset::TYPE));
    pdu_type_0xff_reserved =>
        case(INIT, |c| pdu_of_type(c, 0xFF), term(IHF, offset::TYPE));
    icresp_from_the_host =>
        case(INIT, |c| pdu_of_type(c, pdu_type::ICRESP), term(IHF, offset::TYPE));
    capsule_resp_from_the_host =>
        case(INIT, |c| pdu_of_type(c, pdu_type::RSP), term(IHF, offset::TYPE));
    c2hdata_from_the_host =>
        case(INIT, |c| pdu_of_type(c, pdu_type::C2H_DATA), term(IHF, offset::TYPE));
    r2t_from_the_host =>
        case(INIT, |c| pdu_of_type(c, pdu_type::R2T), term(IHF, offset::TYPE));
    h2c_term_req_from_the_host_closes_silently =>
        case(
            IO,
            |_| {
                let mut t = Vec::new();
                encode_term_req(Role::Host, IHF, 0, &[0u8; 8], &mut t);
                t
            },
            Expect::Closed,
        );

    // ---- capsule headers
    capsule_hlen_255_with_digests_on =>
        case(
            INIT,
            |c| {
                let n = c.h.negotiated();
                assert!(n.header_digest && n.data_digest);
                keep_alive_with(c, offset::HLEN, 255)
            },
            term(IHF, offset::HLEN),
        )
        .host(digests());
    /// With a PDO and PLEN that would fit a 255-byte header.
    capsule_hlen_and_pdo_255_with_digests_on =>
        case(
            INIT,
            |c| {
                let mut pdu = keep_alive_with_data(c, 512);
                pdu[offset::HLEN as usize] = 255;
                pdu[offset::PDO as usize] = 255;
                pdu
            },
            term(IHF, offset::HLEN),
        )
        .host(digests());
    capsule_plen_8_shorter_than_an_sqe =>
        case(INIT, |c| keep_alive_cut(c, 8), term(IHF, offset::PLEN));
    capsule_plen_40_shorter_than_an_sqe =>
        case(INIT, |c| keep_alive_cut(c, 40), term(IHF, offset::PLEN));
    capsule_plen_71_shorter_than_an_sqe =>
        case(INIT, |c| keep_alive_cut(c, 71), term(IHF, offset::PLEN));
    capsule_hlen_40 =>
        case(INIT, |c| keep_alive_with(c, offset::HLEN, 40), term(IHF, offset::HLEN));
    capsule_hlen_70 =>
        case(INIT, |c| keep_alive_with(c, offset::HLEN, 70), term(IHF, offset::HLEN))
            .echo(Echo::Prefix(8));
    capsule_pdo_8_inside_the_header =>
        case(INIT, |c| capsule_with_pdo(c, 8), term(IHF, offset::PDO));
    capsule_pdo_71_inside_the_header =>
        case(INIT, |c| capsule_with_pdo(c, 71), term(IHF, offset::PDO));
    capsule_pdo_73_misaligned =>
        case(INIT, |c| capsule_with_pdo(c, 73), term(IHF, offset::PDO));
    capsule_pdo_at_or_past_plen =>
        case(INIT, |c| capsule_with_pdo(c, 136), term(IHF, offset::PDO));
    /// A capsule without data: PDO is reserved (ignored) and the command runs (Keep
    /// Alive before Connect: Invalid Opcode); the connection goes on.
    capsule_pdo_without_data_is_ignored =>
        case(
            INIT,
            |c| {
                let mut pdu = c.capsule(no_data(command::keep_alive()), &[]);
                pdu[offset::PDO as usize] = 72;
                pdu
            },
            status(Sct::Generic, generic::INVALID_OPCODE, Some(true)),
        );
    in_capsule_data_above_the_limit =>
        case(
            INIT,
            |c| keep_alive_claiming(c, 72 + c.icd + 4),
            term(DLE, 0),
        );
    in_capsule_data_with_plen_u32_max =>
        case(INIT, |c| keep_alive_claiming(c, u32::MAX), term(DLE, 0));
    capsule_flags_0x04 =>
        case(INIT, |c| keep_alive_with(c, offset::FLAGS, 0x04), term(IHF, offset::FLAGS));
    capsule_flags_0x08 =>
        case(INIT, |c| keep_alive_with(c, offset::FLAGS, 0x08), term(IHF, offset::FLAGS));
    capsule_flags_0x10 =>
        case(INIT, |c| keep_alive_with(c, offset::FLAGS, 0x10), term(IHF, offset::FLAGS));
    capsule_flags_0x80 =>
        case(INIT, |c| keep_alive_with(c, offset::FLAGS, 0x80), term(IHF, offset::FLAGS));
    /// HDGST set on a connection without header digests.
    capsule_flags_0x01 =>
        case(INIT, |c| keep_alive_with(c, offset::FLAGS, 0x01), term(IHF, offset::FLAGS));
    /// The header (72 bytes, without its digest) comes back; nothing is written.
    header_digest_error_on_a_capsule =>
        case(
            IO,
            |c| {
                let mut pdu = write_capsule(c, 0);
                pdu[30] ^= 0x01; // a byte of the SQE, under the header digest
                pdu
            },
            header_digest_error(),
        )
        .host(digests())
        .unchanged(0, 8)
        .echo(Echo::Exactly(72));
    data_digest_error_in_a_capsule_writes_nothing =>
        case(
            IO,
            |c| {
                let mut pdu = write_capsule(c, 16);
                let n = pdu.len();
                pdu[n - 8] ^= 0x80; // a data byte
                pdu
            },
            transient_transport_error(),
        )
        .host(digests())
        .unchanged(16, 8)
        .counters(|k| k.digest_errors == 1);
    data_digest_error_in_the_digest_of_a_capsule_writes_nothing =>
        case(
            IO,
            |c| {
                let mut pdu = write_capsule(c, 16);
                let n = pdu.len();
                let good = nvmf_common::transport::tcp::data_digest(&[0xEE; 4096]).to_le_bytes();
                assert_eq!(pdu[n - 4..], good);
                pdu[n - 1] ^= 0xFF; // the digest itself
                pdu
            },
            transient_transport_error(),
        )
        .host(data_digest_only())
        .unchanged(16, 8)
        .counters(|k| k.digest_errors == 1);

    // ---- H2CData
    /// Its whole header comes back, command identifier included.
    h2cdata_before_any_command_with_ttag_0 =>
        case(
            IO,
            |c| {
                (c.cid, c.ttag) = (0x55, 0);
                c.h2c(0, &[1; 512], true)
            },
            term(IHF, offset::TTAG),
        )
        .echo(Echo::Exactly(DATA_HDR_LEN));
    h2cdata_with_ttag_32_out_of_range =>
        case(W72, |c| h2c_with_ttag(c, 32), term(IHF, offset::TTAG));
    h2cdata_with_ttag_0x8000_out_of_range =>
        case(W72, |c| h2c_with_ttag(c, 0x8000), term(IHF, offset::TTAG));
    h2cdata_with_ttag_0xffff_out_of_range =>
        case(W72, |c| h2c_with_ttag(c, u16::MAX), term(IHF, offset::TTAG));
    /// A transfer tag in range, of a slot that waits for no data.
    h2cdata_with_the_next_ttag =>
        case(
            W72,
            |c| {
                let t = c.ttag.wrapping_add(1);
                h2c_with_ttag(c, t)
            },
            term(IHF, offset::TTAG),
        );
    h2cdata_with_another_command_id =>
        case(
            W72,
            |c| {
                c.cid = c.cid.wrapping_add(1);
                c.h2c(0, &[2; 4096], false)
            },
            term(IHF, offset::COMMAND_ID),
        );
    /// A read held a slot but never got an R2T; its slot is free again.
    h2cdata_for_a_command_that_is_not_waiting_for_data =>
        case(
            IO,
            |c| {
                let cid = c.h.next_cid();
                c.h.cmd(&with_cid(read_sqe(0, 8, SglDescriptor::transport(4096)), cid), &[]);
                loop {
                    match c.h.recv() {
                        Rx::C2H { success: true, .. } => break,
                        Rx::C2H { .. } => {}
                        Rx::Resp(r) => {
                            assert!(status_of(&r).is_success(), "{}", status_of(&r));
                            break;
                        }
                        other => panic!("{other:?}"),
                    }
                }
                (c.cid, c.ttag) = (cid, 0);
                c.h2c(0, &[1; 512], true)
            },
            term(IHF, offset::TTAG),
        );
    h2cdata_beyond_its_r2t_window =>
        case(
            W72,
            |c| {
                assert_eq!(c.r2t_len, 72 * BS);
                c.h2c(0, &vec![2; c.r2t_len as usize + 512], true)
            },
            term(DOR, 0),
        );
    /// The first 32 KiB window complete, then 8 KiB for the second window of 4 KiB.
    h2cdata_past_the_end_of_the_second_window =>
        case(
            W72,
            |c| {
                assert_eq!(c.r2t_len, 32768);
                let first = c.h2c(0, &[2; 32768], true);
                c.h.send(&first);
                match c.h.recv() {
                    Rx::R2T { offset: 32768, length: 4096, ttag, .. } => c.ttag = ttag,
                    other => panic!("expected the second R2T, got {other:?}"),
                }
                c.h2c(32768, &[3; 8192], true)
            },
            term(DOR, 0),
        )
        .target(small_h2c());
    h2cdata_with_the_same_bytes_twice =>
        case(
            W72,
            |c| {
                let pdu = c.h2c(0, &[2; 4096], false);
                c.h.send(&pdu);
                pdu
            },
            term(DOR, 0),
        );
    h2cdata_with_datao_512_not_where_the_window_goes_on =>
        case(W72, |c| h2c_at(c, 512), term(DOR, 0));
    h2cdata_with_datao_at_the_window_end =>
        case(W72, |c| h2c_at(c, 72 * BS), term(DOR, 0));
    h2cdata_with_datao_wrapping_by_512 =>
        case(W72, |c| h2c_at(c, u32::MAX - 511), term(DOR, 0));
    h2cdata_with_datao_wrapping_by_4096 =>
        case(W72, |c| h2c_at(c, u32::MAX - 4095), term(DOR, 0));
    h2cdata_without_data =>
        case(
            W72,
            |c| c.h2c(0, &[], false),
            term(IHF, offset::DATA_LENGTH),
        );
    h2cdata_datal_0_disagrees_with_plen =>
        case(W8, |c| h2c_with_datal(c, 0), term(IHF, offset::DATA_LENGTH));
    h2cdata_datal_511_disagrees_with_plen =>
        case(W8, |c| h2c_with_datal(c, 511), term(IHF, offset::DATA_LENGTH));
    h2cdata_datal_513_disagrees_with_plen =>
        case(W8, |c| h2c_with_datal(c, 513), term(IHF, offset::DATA_LENGTH));
    h2cdata_datal_u32_max_disagrees_with_plen =>
        case(W8, |c| h2c_with_datal(c, u32::MAX), term(IHF, offset::DATA_LENGTH));
    h2cdata_plen_8_shorter_than_the_header =>
        case(W8, |c| h2c_with_plen(c, 8), term(IHF, offset::PLEN));
    h2cdata_plen_23_shorter_than_the_header =>
        case(W8, |c| h2c_with_plen(c, 23), term(IHF, offset::PLEN));
    h2cdata_plen_u32_max_beyond_maxh2cdata =>
        case(W8, |c| h2c_with_plen(c, u32::MAX), term(DLE, 0));
    h2cdata_header_digest_error_writes_nothing =>
        case(
            Stage::R2tWrite { slba: 64, nlb: 8 },
            |c| {
                let mut pdu = c.h2c(0, &vec![9; c.r2t_len as usize], true);
                pdu[12] ^= 0x10; // DATAO, under the header digest
                pdu
            },
            header_digest_error(),
        )
        .host(digests());
    h2cdata_data_digest_error_writes_nothing =>
        case(
            Stage::R2tWrite { slba: 128, nlb: 16 },
            |c| {
                let mut pdu = c.h2c(0, &vec![0xAB; c.r2t_len as usize], true);
                let n = pdu.len();
                pdu[n - 1] ^= 0xFF; // the data digest
                pdu
            },
            transient_transport_error(),
        )
        .host(digests())
        .counters(|k| k.digest_errors == 1);
    /// A 64 KiB write in two 32 KiB windows whose first fails its data digest: the
    /// command fails once that window is drained, with no second R2T.
    h2cdata_data_digest_error_ends_the_write_without_another_r2t =>
        case(
            Stage::R2tWrite { slba: 400, nlb: 128 },
            |c| {
                assert_eq!(c.r2t_len, 32768);
                let mut pdu = c.h2c(0, &nvmf_tests::pattern(11, 400, 32768), true);
                let n = pdu.len();
                pdu[n - 100] ^= 0x01; // a data byte
                pdu
            },
            transient_transport_error(),
        )
        .host(data_digest_only())
        .target(small_h2c())
        .counters(|k| k.digest_errors == 1);

    // ---- truncation, stalls, vanishing peers
    truncated_capsule_then_close =>
        case(
            IO,
            |c| {
                let pdu = c.capsule(
                    write_sqe(200, 8, SglDescriptor::in_capsule(0, 4096)),
                    &[0xCD; 4096],
                );
                pdu[..pdu.len() / 2].to_vec()
            },
            Expect::HostHangsUp,
        )
        .unchanged(200, 8);
    truncated_h2cdata_then_close =>
        case(
            Stage::R2tWrite { slba: 300, nlb: 72 },
            |c| {
                let pdu = c.h2c(0, &vec![7; c.r2t_len as usize], true);
                pdu[..pdu.len() - 100].to_vec()
            },
            Expect::HostHangsUp,
        );
    peer_stalls_mid_capsule =>
        case(IO, |c| c.h.keep_alive_pdu()[..30].to_vec(), Expect::Stalled)
            .target(stall_300ms());
    peer_stalls_mid_icreq =>
        case(
            FRESH,
            |_| icreq_bytes(&HostConfig::default())[..10].to_vec(),
            Expect::Stalled,
        )
        .target(stall_300ms());
    peer_stalls_mid_common_header =>
        case(INIT, |_| vec![pdu_type::CMD, 0, 72], Expect::Stalled)
            .target(stall_300ms());
    /// Reads whose data is never read, a write waiting on its R2T, half a capsule.
    peer_vanishes_with_io_in_flight =>
        case(
            IO,
            |c| {
                for i in 0..8u64 {
                    let cid = c.h.next_cid();
                    let s = read_sqe(i * 256, 256, SglDescriptor::transport(256 * BS));
                    c.h.cmd(&with_cid(s, cid), &[]);
                }
                let cid = c.h.next_cid();
                c.h.cmd(
                    &with_cid(write_sqe(0, 72, SglDescriptor::transport(72 * BS)), cid),
                    &[],
                );
                c.h.keep_alive_pdu()[..50].to_vec()
            },
            Expect::HostHangsUp,
        );
}

/// Fifty connections that misbehave in five ways, one after the other.
#[test]
fn many_bad_connections_leave_nothing_behind() {
    let env = start_tcp(&config(&["ram:16M"]), HostOptions::default());
    let before = env.counters();
    for i in 0..50u32 {
        let mut h = RawTcp::connect(env.addr, HostConfig::default());
        match i % 5 {
            0 => h.send_lossy(&[0xFF; 8]),
            1 => h.send_lossy(&icreq_bytes(&HostConfig::default())[..64]),
            2 => {
                h.init();
                let pdu = h.keep_alive_pdu();
                h.send_lossy(&pdu[..40]);
            }
            3 => {
                h.init();
                h.send_lossy(&icreq_bytes(&HostConfig::default()));
            }
            _ => {}
        }
        drop(h);
    }
    env.wait_counters("every connection closed", |c| {
        c.queues == 0 && c.closed >= before.closed + 50 && c.buffers_in_use == 0
    });
    assert_serves(&env.fabric, &env.nqn, 1000);
}
