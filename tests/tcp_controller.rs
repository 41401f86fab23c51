//! The NVMe/TCP controller end to end: the scripted host ([`nvmf_tests::raw_tcp`])
//! drives a `TcpServer` on 127.0.0.1 (an OS-chosen port) with a RAM namespace through
//! bring-up, every data path (in-capsule, R2T/H2CData with one or several R2Ts in
//! flight, C2HData in chunks, SQ flow control disabled), digests, held AERs, buffer
//! waits, stalls, keep-alive expiry and hosts that vanish, checking PDU by PDU what
//! comes back and, through the poll groups' counters, that nothing is left behind.
//! Malformed PDUs and commands have their own suites (`malformed_tcp.rs`,
//! `malformed_commands.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::transport::tcp::{FramerError, HostConfig};
use nvmf_common::types::Nsid;
use nvmf_common::wire::fabrics::{cattr, reg};
use nvmf_common::wire::identify::{sgls, IdentifyController};
use nvmf_common::wire::sgl::SglDescriptor;
use nvmf_common::wire::status::{generic, Sct};
use nvmf_common::wire::tcp::{offset, term_fes};
use nvmf_initiator::command;
use nvmf_initiator::transport::tcp::{TcpFabric, TcpOptions as HostOptions};
use nvmf_initiator::transport::Fabric;
use nvmf_target::config::{PollMode, TrType};
use nvmf_target::target::Target;
use nvmf_target::tcp::{TcpOptions, TcpServer};
use nvmf_tests::raw_tcp::{
    connect_data, connect_sqe, dw0_of, icreq_bytes, no_data, pair_with, read_sqe, status_of,
    with_cid, write_sqe, RawTcp, Rx, BS,
};
use nvmf_tests::{assert_serves, config, start_tcp_with, TcpEnv};

/// A target with one 16 MiB RAM namespace served in `mode` by `groups` poll groups.
fn server(mode: PollMode, groups: usize, opts: TcpOptions) -> TcpEnv {
    let mut cfg = config(&["ram:16M"]);
    cfg.transport.poll_mode = mode;
    cfg.transport.poll_groups = groups;
    let env = start_tcp_with(&cfg, HostOptions::default(), opts);
    assert_ne!(env.addr.port(), 0);
    env
}

fn default_server() -> TcpEnv {
    server(PollMode::Adaptive, 1, small_h2c())
}

/// 32 KiB H2CData PDUs, so a 128 KiB write takes four R2Ts.
fn small_h2c() -> TcpOptions {
    TcpOptions {
        maxh2cdata: 32 * 1024,
        ..TcpOptions::default()
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed) ^ ((i >> 9) as u8))
        .collect()
}

/// An admin queue and I/O queue 1 (128 entries, Connect attributes `attrs`) of a fresh
/// controller.
fn io_pair(env: &TcpEnv, cfg: HostConfig, attrs: u8) -> (RawTcp, RawTcp) {
    let (admin, io, _) = pair_with(env.addr, &env.nqn, cfg, 127, attrs);
    (admin, io)
}

/// A well-behaved host (the host library) is served: write, read back, disconnect.
fn assert_healthy(env: &TcpEnv) {
    assert_serves(&env.fabric, &env.nqn, 20_000);
}

fn aer_sqe() -> [u8; 64] {
    no_data(command::async_event_request())
}

fn csts_sqe() -> [u8; 64] {
    no_data(command::property_get(reg::CSTS))
}

#[test]
fn bring_up_identify_write_read() {
    let s = default_server();
    let mut admin = RawTcp::connect(s.addr, HostConfig::default());
    let icresp = admin.init();
    assert_eq!(
        (icresp.pfv, icresp.cpda, icresp.digest, icresp.maxh2cdata),
        (0, 0, 0, 32 * 1024)
    );
    let cntlid = admin.admin_up(&s.nqn);
    assert_ne!(cntlid.0, 0);

    // Identify Controller: 4096 bytes in C2HData, then the response.
    let cid = admin.next_cid();
    admin.cmd(
        &with_cid(
            nvmf_tests::raw_tcp::with_sgl(
                command::identify_controller(),
                SglDescriptor::transport(4096),
            ),
            cid,
        ),
        &[],
    );
    let data = match admin.recv() {
        Rx::C2H {
            cid: c,
            datao: 0,
            last: true,
            success: false,
            data,
        } if c == cid => data,
        other => panic!("{other:?}"),
    };
    assert!(status_of(&admin.expect_resp(cid)).is_success());
    let id = IdentifyController::new_unchecked(&data[..]);
    // In-capsule data (8 KiB by default) advertised as IOCCSZ, in 16-byte units.
    assert_eq!(id.ioccsz(), (64 + 8192) / 16);
    assert_eq!(id.sgls() & sgls::KEYED, 0, "no keyed SGLs on TCP");
    assert_eq!(id.cntlid(), cntlid.0);
    assert_eq!(id.subnqn_str(), Some(s.nqn.as_str()));

    // I/O queue on a second connection.
    let mut io = RawTcp::connect(s.addr, HostConfig::default());
    io.init();
    let c = io.io_connect(&s.nqn, cntlid, 1, 127);
    assert!(status_of(&c).is_success(), "{}", status_of(&c));

    // In-capsule write, read back through C2HData.
    let d = pattern(4096, 1);
    assert!(io.write_icd(8, &d).is_success());
    let (st, back) = io.read(8, 8);
    assert!(st.is_success());
    assert_eq!(back, d);

    // 128 KiB through R2T/H2CData: MAXR2T 0 → one R2T at a time, each MAXH2CDATA.
    let big = pattern(128 * 1024, 2);
    let (st, r2ts) = io.write_r2t(1000, &big);
    assert!(st.is_success(), "{st:?}");
    assert_eq!(
        r2ts,
        vec![(0, 32768), (32768, 32768), (65536, 32768), (98304, 32768)]
    );
    let (st, back) = io.read(1000, 256);
    assert!(st.is_success());
    assert_eq!(back, big);

    // A write that is not a multiple of MAXH2CDATA.
    let odd = pattern(36 * 1024, 3);
    let (st, r2ts) = io.write_r2t(5000, &odd);
    assert!(st.is_success());
    assert_eq!(r2ts, vec![(0, 32768), (32768, 4096)]);
    assert_eq!(io.read(5000, 72).1, odd);

    let c = s.counters();
    assert_eq!(c.r2ts, 6);
    assert_eq!(c.h2c_pdus, 6);
    assert_eq!(c.accepted, 2);
    // The last read's buffer goes back once its PDUs are written.
    s.wait_counters("buffers back", |c| c.buffers_in_use == 0);
}

#[test]
fn several_r2ts_in_flight_when_the_host_allows_them() {
    let s = default_server();
    let cfg = HostConfig {
        maxr2t: 3,
        ..HostConfig::default()
    };
    let (_admin, mut io) = io_pair(&s, cfg, 0);
    let big = pattern(160 * 1024, 9);
    let cid = io.next_cid();
    io.cmd(
        &with_cid(
            write_sqe(64, 320, SglDescriptor::transport(big.len() as u32)),
            cid,
        ),
        &[],
    );
    // Four R2Ts (MAXR2T 3 → 4 outstanding) arrive before any data is sent.
    let mut r2ts = Vec::new();
    for _ in 0..4 {
        match io.recv() {
            Rx::R2T {
                cid: c,
                ttag,
                offset,
                length,
            } => {
                assert_eq!(c, cid);
                r2ts.push((ttag, offset, length));
            }
            other => panic!("{other:?}"),
        }
    }
    let offsets: Vec<_> = r2ts.iter().map(|r| (r.1, r.2)).collect();
    assert_eq!(
        offsets,
        vec![(0, 32768), (32768, 32768), (65536, 32768), (98304, 32768)]
    );
    // Answer them last to first; each answered window lets one more R2T out.
    for &(ttag, o, l) in r2ts.iter().rev() {
        io.h2c(cid, ttag, o, &big[o as usize..(o + l) as usize], true);
    }
    match io.recv() {
        Rx::R2T {
            ttag,
            offset: 131072,
            length: 32768,
            ..
        } => io.h2c(cid, ttag, 131072, &big[131072..], true),
        other => panic!("{other:?}"),
    }
    assert!(status_of(&io.expect_resp(cid)).is_success());
    assert_eq!(io.read(64, 320).1, big);
}

#[test]
fn digests_negotiated_and_used() {
    let s = default_server();
    for (hdgst, ddgst) in [(false, false), (true, false), (false, true), (true, true)] {
        let cfg = HostConfig {
            header_digest: hdgst,
            data_digest: ddgst,
            ..HostConfig::default()
        };
        let mut h = RawTcp::connect(s.addr, cfg);
        let p = h.init();
        assert_eq!(p.digest, u8::from(hdgst) | (u8::from(ddgst) << 1));
        let cntlid = h.admin_up(&s.nqn);
        let mut io = RawTcp::connect(s.addr, cfg);
        io.init();
        assert!(status_of(&io.io_connect(&s.nqn, cntlid, 1, 31)).is_success());
        let d = pattern(8192, 4);
        assert!(io.write_icd(100, &d).is_success());
        assert_eq!(io.read(100, 16).1, d);
        let big = pattern(96 * 1024, 5);
        assert!(io.write_r2t(200, &big).0.is_success());
        assert_eq!(io.read(200, 192).1, big);
    }
    // A controller that does not offer digests answers with none.
    let s2 = server(
        PollMode::Interrupt,
        1,
        TcpOptions {
            header_digest: false,
            data_digest: false,
            ..TcpOptions::default()
        },
    );
    let cfg = HostConfig {
        header_digest: true,
        ..HostConfig::default()
    };
    let mut h = RawTcp::connect(s2.addr, cfg);
    h.send(&icreq_bytes(&cfg));
    // The host framer refuses an ICResp without the digest it asked for.
    assert!(matches!(
        h.recv(),
        Rx::Err(FramerError::UnsupportedParameter { .. })
    ));
}

/// H2CData that arrives a few KiB at a time is received straight into its command's
/// pool buffer (from the receive buffer, then by socket reads into it), with and
/// without data digests: the data lands whole; a flipped data byte under a data digest
/// fails only its command (Transient Transport Error) and writes nothing; a split PDU
/// the handler refuses (not the next data of its R2T window, a TTAG without an R2T, a
/// CID that is not the TTAG's command) still ends the connection with the termination
/// request a whole one gets.
#[test]
fn h2c_data_in_pieces_is_received_in_place() {
    const NLB: u32 = 128;
    let len = (NLB * BS) as usize;
    let s = server(PollMode::Adaptive, 1, TcpOptions::default());
    let trickle = |io: &mut RawTcp, pdu: &[u8]| {
        for part in pdu.chunks(5000) {
            io.send(part);
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    for ddgst in [false, true] {
        let cfg = HostConfig {
            data_digest: ddgst,
            ..HostConfig::default()
        };
        let (_admin, mut io) = io_pair(&s, cfg, 0);
        let old = pattern(len, 1);
        assert!(io.write_r2t(1000, &old).0.is_success());
        for (round, damage) in [(2u8, None), (3, Some(len / 3)), (4, None)] {
            let new = pattern(len, round);
            let (cid, ttag, r2tl) = io.start_r2t_write(1000, NLB);
            assert_eq!(r2tl as usize, len, "one R2T for the whole write");
            let mut pdu = Vec::new();
            io.writer()
                .h2c_data(cid, ttag, 0, &new, true, &mut pdu)
                .unwrap_or_else(|e| panic!("{e}"));
            let head = pdu.len() - len - if ddgst { 4 } else { 0 };
            let damage = damage.filter(|_| ddgst);
            if let Some(i) = damage {
                pdu[head + i] ^= 0x20;
            }
            trickle(&mut io, &pdu);
            let st = status_of(&io.expect_resp(cid));
            let now = io.read(1000, NLB).1;
            if damage.is_some() {
                assert!(
                    st.is(Sct::Generic, generic::TRANSIENT_TRANSPORT_ERROR),
                    "{st:?}"
                );
                assert!(now != new, "data that failed its digest was written");
            } else {
                assert!(st.is_success(), "ddgst {ddgst} round {round}: {st:?}");
                assert!(now == new, "ddgst {ddgst} round {round}: the data differs");
            }
        }
    }
    // Split PDUs the handler refuses are not received in place: each still ends its
    // connection with the termination request a whole one gets. (DATAO, TTAG, CID
    // changes; the expected FES and FEI.)
    type Bad = (u32, u16, u16, u16, u32);
    let bad: [Bad; 3] = [
        // DATAO 512 where the window expects 0.
        (512, 0, 0, term_fes::DATA_OUT_OF_RANGE, 0),
        // A TTAG with no R2T outstanding.
        (0, 1, 0, term_fes::INVALID_HEADER_FIELD, offset::TTAG),
        // The TTAG of this write with another command's CID.
        (0, 0, 1, term_fes::INVALID_HEADER_FIELD, offset::COMMAND_ID),
    ];
    for (datao, ttag_off, cid_off, fes, fei) in bad {
        let (_admin, mut io) = io_pair(&s, HostConfig::default(), 0);
        let (cid, ttag, _) = io.start_r2t_write(2000, NLB);
        let mut pdu = Vec::new();
        io.writer()
            .h2c_data(
                cid.wrapping_add(cid_off),
                ttag.wrapping_add(ttag_off),
                datao,
                &vec![7u8; len - datao as usize],
                true,
                &mut pdu,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        trickle(&mut io, &pdu);
        io.expect_term(fes, fei);
    }
    assert_healthy(&s);
}

#[test]
fn reads_are_chunked_into_c2hdata_pdus() {
    // 32 KiB C2HData PDUs: large chunks go out from the pool buffer, a short tail is
    // copied; with and without digests, and with SQ flow control disabled.
    let s = server(
        PollMode::Adaptive,
        1,
        TcpOptions {
            c2h_chunk: 32 * 1024,
            // H2C data aligned to 16 bytes.
            cpda: 3,
            ..small_h2c()
        },
    );
    for (ddgst, attrs) in [(false, 0), (true, 0), (true, cattr::DISABLE_SQFLOW)] {
        let cfg = HostConfig {
            header_digest: ddgst,
            data_digest: ddgst,
            hpda: if ddgst { 7 } else { 0 },
            ..HostConfig::default()
        };
        let (_a, mut io) = io_pair(&s, cfg, attrs);
        for len in [512usize, 20 * 1024, 36 * 1024, 100 * 1024, 1024 * 1024] {
            let d = pattern(len, len as u8);
            assert!(io.write_r2t(3000, &d).0.is_success());
            let cid = io.next_cid();
            let nlb = len as u32 / BS;
            io.cmd(
                &with_cid(
                    read_sqe(3000, nlb, SglDescriptor::transport(len as u32)),
                    cid,
                ),
                &[],
            );
            let mut back = Vec::new();
            let mut pdus = 0;
            loop {
                match io.recv() {
                    Rx::C2H {
                        datao,
                        last,
                        success,
                        data,
                        ..
                    } => {
                        assert_eq!(datao as usize, back.len());
                        assert!(data.len() <= 32 * 1024);
                        assert_eq!(last, back.len() + data.len() == len);
                        back.extend_from_slice(&data);
                        pdus += 1;
                        if success {
                            assert_eq!(attrs, cattr::DISABLE_SQFLOW);
                            break;
                        }
                    }
                    Rx::Resp(c) => {
                        assert!(status_of(&c).is_success());
                        assert_eq!(attrs, 0);
                        break;
                    }
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(pdus, len.div_ceil(32 * 1024));
            assert_eq!(back, d, "len {len}");
        }
    }
    s.wait_counters("buffers back", |c| c.buffers_in_use == 0);
}

#[test]
fn sq_flow_control_disabled_sends_success_in_the_last_c2hdata() {
    let s = default_server();
    let (_admin, mut io) = io_pair(&s, HostConfig::default(), cattr::DISABLE_SQFLOW);
    let d = pattern(4096, 6);
    assert!(io.write_icd(300, &d).is_success());
    let cid = io.next_cid();
    io.cmd(
        &with_cid(read_sqe(300, 8, SglDescriptor::transport(4096)), cid),
        &[],
    );
    match io.recv() {
        Rx::C2H {
            cid: c,
            last: true,
            success: true,
            data,
            ..
        } => {
            assert_eq!(c, cid);
            assert_eq!(data, d);
        }
        other => panic!("{other:?}"),
    }
    // No CapsuleResp follows: the next PDU answers the next command.
    assert!(status_of(&io.run(no_data(command::flush(Nsid(1))), &[])).is_success());
    // A failed read still gets a response (and no data).
    let cid = io.next_cid();
    io.cmd(
        &with_cid(read_sqe(1 << 40, 8, SglDescriptor::transport(4096)), cid),
        &[],
    );
    let c = io.expect_resp(cid);
    assert!(status_of(&c).is(Sct::Generic, generic::LBA_OUT_OF_RANGE));
}

#[test]
fn held_aer_completes_on_an_event() {
    let s = server(PollMode::Interrupt, 1, small_h2c());
    let mut h = RawTcp::connect(s.addr, HostConfig::default());
    h.init();
    h.admin_up(&s.nqn);
    let cid = h.next_cid();
    h.cmd(&with_cid(aer_sqe(), cid), &[]);
    // Held: other commands overtake it.
    assert!(status_of(&h.run(csts_sqe(), &[])).is_success());
    // A namespace goes away: the AER completes with a notice.
    let sub = s
        .target
        .subsystem_by_name(s.nqn.as_str())
        .unwrap_or_else(|| panic!("subsystem"));
    assert!(sub.remove_namespace(Nsid(1)).is_some());
    let c = h.expect_resp(cid);
    assert!(status_of(&c).is_success());
    assert_ne!(dw0_of(&c), 0);
}

#[test]
fn failed_commands_give_their_slots_back() {
    let s = default_server();
    let mut h = RawTcp::connect(s.addr, HostConfig::default());
    h.init();
    // Before Connect the queue has one entry: a refused command must free it.
    for _ in 0..3 {
        let c = h.run(csts_sqe(), &[]);
        assert!(status_of(&c).is(Sct::Generic, generic::INVALID_OPCODE));
    }
    // A Connect to an unknown subsystem fails; the next one succeeds.
    let nope = nvmf_common::types::Nqn::new("nqn.2024-01.io.example:nope")
        .unwrap_or_else(|e| panic!("{e}"));
    let c = h.run(
        connect_sqe(0, 7, 0, 0),
        &connect_data(&nope, nvmf_common::types::Cntlid::DYNAMIC),
    );
    assert!(!status_of(&c).is_success());
    let cntlid = h.admin_up(&s.nqn);
    // Many more failing commands than the queue (8 entries) holds.
    let mut io = RawTcp::connect(s.addr, HostConfig::default());
    io.init();
    assert!(status_of(&io.io_connect(&s.nqn, cntlid, 1, 7)).is_success());
    for i in 0..40u64 {
        let sgl = if i % 2 == 0 {
            SglDescriptor::keyed(0, 512, 1, false)
        } else {
            SglDescriptor::transport(512)
        };
        // Out of range or with an SGL TCP does not carry.
        let c = io.run(read_sqe(1 << 40, 1, sgl), &[]);
        assert!(!status_of(&c).is_success());
    }
    let d = pattern(512, 3);
    assert!(io.write_icd(0, &d).is_success());
    assert_eq!(io.read(0, 1).1, d);
}

#[test]
fn peer_closing_or_resetting_mid_transfer_leaks_nothing() {
    let s = default_server();
    let mut admin = RawTcp::connect(s.addr, HostConfig::default());
    admin.init();
    let cntlid = admin.admin_up(&s.nqn);
    // Half the data of an R2T window, then a clean close.
    let mut io = RawTcp::connect(s.addr, HostConfig::default());
    io.init();
    assert!(status_of(&io.io_connect(&s.nqn, cntlid, 1, 127)).is_success());
    let (cid, ttag, len) = io.start_r2t_write(0, 72);
    assert_eq!(len, 32768);
    io.h2c(cid, ttag, 0, &[5; 8192], false);
    drop(io);
    // A write whose R2T is never read, then close: unread data makes the kernel reset.
    let mut io = RawTcp::connect(s.addr, HostConfig::default());
    io.init();
    assert!(status_of(&io.io_connect(&s.nqn, cntlid, 2, 31)).is_success());
    let cid = io.next_cid();
    io.cmd(
        &with_cid(write_sqe(0, 72, SglDescriptor::transport(36 * 1024)), cid),
        &[],
    );
    // Reads whose data is never read either.
    for _ in 0..8 {
        let cid = io.next_cid();
        io.cmd(
            &with_cid(read_sqe(0, 256, SglDescriptor::transport(128 * 1024)), cid),
            &[],
        );
    }
    std::thread::sleep(Duration::from_millis(50));
    drop(io);
    s.wait_counters("connections cleaned up", |c| {
        c.buffers_in_use == 0 && c.closed >= 2 && c.queues == 1
    });
    // The controller (admin queue) and new connections are unaffected.
    assert!(status_of(&admin.run(csts_sqe(), &[])).is_success());
    let mut io = RawTcp::connect(s.addr, HostConfig::default());
    io.init();
    assert!(status_of(&io.io_connect(&s.nqn, cntlid, 1, 127)).is_success());
    let d = pattern(4096, 8);
    assert!(io.write_icd(0, &d).is_success());
    assert_eq!(io.read(0, 8).1, d);
    assert_healthy(&s);
}

#[test]
fn stalled_host_is_disconnected() {
    let s = server(
        PollMode::Interrupt,
        1,
        TcpOptions {
            stall_timeout: Duration::from_millis(300),
            ..small_h2c()
        },
    );
    let (_a, mut io) = io_pair(&s, HostConfig::default(), 0);
    let t0 = Instant::now();
    let (cid, ttag, len) = io.start_r2t_write(0, 72);
    assert_eq!(len, 32768);
    io.h2c(cid, ttag, 0, &[1; 4096], false);
    // No more data: the controller gives up on the connection, not before the stall
    // timeout (the upper bound only guards against a hang).
    assert_eq!(io.recv(), Rx::Closed);
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    s.wait_counters("buffers back", |c| c.buffers_in_use == 0);
    // A connection that never sends its ICReq is closed too.
    let mut idle = RawTcp::connect(s.addr, HostConfig::default());
    assert_eq!(idle.recv(), Rx::Closed);
    assert_healthy(&s);
}

#[test]
fn queue_overrun_ends_only_that_connection() {
    let s = default_server();
    let mut h = RawTcp::connect(s.addr, HostConfig::default());
    h.init();
    // An admin queue of 2 entries: two held AERs fill it, a third command overruns it.
    let c = h.admin_connect(&s.nqn, 1, 0);
    assert!(status_of(&c).is_success());
    let c = h.run(
        no_data(command::property_set(
            reg::CC,
            nvmf_tests::raw_tcp::CC_ENABLE,
        )),
        &[],
    );
    assert!(status_of(&c).is_success());
    for _ in 0..2 {
        let cid = h.next_cid();
        h.cmd(&with_cid(aer_sqe(), cid), &[]);
    }
    let cid = h.next_cid();
    h.cmd(&with_cid(csts_sqe(), cid), &[]);
    assert_eq!(h.recv(), Rx::Closed);
    assert_healthy(&s);
}

#[test]
fn commands_wait_in_line_for_pool_buffers() {
    // A 1 MiB arena: two 512 KiB transfers at a time; the others wait their turn.
    let s = server(
        PollMode::Interrupt,
        1,
        TcpOptions {
            arena_bytes: 1 << 20,
            maxh2cdata: 128 * 1024,
            ..TcpOptions::default()
        },
    );
    let (_a, mut io) = io_pair(&s, HostConfig::default(), 0);
    let len = 512 * 1024;
    let nlb = len as u32 / BS;
    let datas: Vec<Vec<u8>> = (0..4).map(|i| pattern(len, 40 + i as u8)).collect();
    let mut cids = Vec::new();
    for (i, d) in datas.iter().enumerate() {
        let cid = io.next_cid();
        cids.push(cid);
        io.cmd(
            &with_cid(
                write_sqe(
                    i as u64 * u64::from(nlb),
                    nlb,
                    SglDescriptor::transport(d.len() as u32),
                ),
                cid,
            ),
            &[],
        );
    }
    // A read queued behind them gets a buffer only after the writes give theirs back.
    let rcid = io.next_cid();
    io.cmd(
        &with_cid(read_sqe(0, nlb, SglDescriptor::transport(len as u32)), rcid),
        &[],
    );
    let mut done = 0;
    let mut first_r2t = Vec::new();
    let mut read_back = Vec::new();
    while done < 5 {
        match io.recv() {
            Rx::R2T {
                cid,
                ttag,
                offset,
                length,
            } => {
                if offset == 0 {
                    first_r2t.push(cid);
                }
                let i = cids
                    .iter()
                    .position(|&c| c == cid)
                    .unwrap_or_else(|| panic!("R2T for {cid}"));
                let d = &datas[i][offset as usize..(offset + length) as usize];
                io.h2c(cid, ttag, offset, d, true);
            }
            Rx::C2H {
                cid, datao, data, ..
            } => {
                assert_eq!(cid, rcid);
                assert_eq!(datao as usize, read_back.len());
                read_back.extend_from_slice(&data);
            }
            Rx::Resp(c) => {
                assert!(status_of(&c).is_success(), "{:?}", status_of(&c));
                done += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    // Buffers went out in arrival order, and the read saw the first write.
    assert_eq!(first_r2t, cids);
    assert_eq!(read_back, datas[0]);
    for (i, d) in datas.iter().enumerate() {
        assert_eq!(&io.read(i as u64 * u64::from(nlb), nlb).1, d);
    }
    s.wait_counters("buffers back", |c| c.buffers_in_use == 0);
}

#[test]
fn a_host_that_does_not_read_is_not_read_either() {
    let s = server(PollMode::Interrupt, 1, TcpOptions::default());
    let (_a, mut io) = io_pair(&s, HostConfig::default(), 0);
    // A full queue of 256 KiB reads (32 MiB of responses), none of them read yet.
    let mut cids = Vec::new();
    let mut out = Vec::new();
    for i in 0..128u64 {
        let cid = io.next_cid();
        cids.push(cid);
        io.writer()
            .capsule_cmd(
                &with_cid(
                    read_sqe((i % 32) * 512, 512, SglDescriptor::transport(256 * 1024)),
                    cid,
                ),
                &[],
                &mut out,
            )
            .unwrap_or_else(|e| panic!("{e}"));
    }
    io.send(&out);
    std::thread::sleep(Duration::from_millis(300));
    // What waits for the socket stays bounded by the pool, and all of it arrives.
    let c = s.counters();
    assert!(c.buffers_in_use <= 256, "{c:?}");
    let mut done = 0;
    while done < cids.len() {
        match io.recv() {
            Rx::C2H { .. } => {}
            Rx::Resp(c) => {
                assert!(status_of(&c).is_success());
                done += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    s.wait_counters("buffers back", |c| c.buffers_in_use == 0);
    assert_healthy(&s);
}

#[test]
fn keep_alive_expiry_closes_every_queue_of_the_controller() {
    let s = server(PollMode::Interrupt, 1, small_h2c());
    let mut admin = RawTcp::connect(s.addr, HostConfig::default());
    admin.init();
    let c = admin.admin_connect(&s.nqn, 31, 300);
    assert!(status_of(&c).is_success());
    let cntlid = nvmf_common::types::Cntlid(dw0_of(&c) as u16);
    let c = admin.run(
        no_data(command::property_set(
            reg::CC,
            nvmf_tests::raw_tcp::CC_ENABLE,
        )),
        &[],
    );
    assert!(status_of(&c).is_success());
    let mut io = RawTcp::connect(s.addr, HostConfig::default());
    io.init();
    assert!(status_of(&io.io_connect(&s.nqn, cntlid, 1, 31)).is_success());
    // Traffic on the I/O queue keeps the controller alive...
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(100));
        assert!(io.write_icd(0, &[1; 512]).is_success());
    }
    // ...silence does not (the bound only guards against a hang).
    let t0 = Instant::now();
    assert_eq!(admin.recv(), Rx::Closed);
    assert_eq!(io.recv(), Rx::Closed);
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_healthy(&s);
}

/// A capsule on an I/O queue whose controller has just ended (the host closed its
/// admin queue) ends that queue unanswered, as nvmet deletes a dead controller's queues:
/// a Command Sequence Error would be a failed command to a multipath host, a lost
/// connection sends the command down another path. The capsule goes out as soon as
/// the controller is gone from its subsystem, before the 20 ms timer sweep that tears
/// such queues down anyway.
#[test]
fn a_command_for_a_controller_that_ended_ends_its_queue_unanswered() {
    let s = server(PollMode::Poll, 1, small_h2c());
    let (admin, mut io, cntlid) = pair_with(s.addr, &s.nqn, HostConfig::default(), 31, 0);
    let subsys = s
        .target
        .find_subsystem(&s.nqn)
        .unwrap_or_else(|| panic!("no subsystem {}", s.nqn));
    drop(admin);
    let deadline = Instant::now() + Duration::from_secs(5);
    while subsys.controller(cntlid).is_some() {
        assert!(
            Instant::now() < deadline,
            "the controller outlived its admin queue"
        );
        std::hint::spin_loop();
    }
    let data = [0x5a; 512];
    io.cmd(
        &write_sqe(0, 1, SglDescriptor::in_capsule(0, data.len() as u32)),
        &data,
    );
    match io.recv() {
        Rx::Closed => {}
        other => panic!("expected the queue to end unanswered, got {other:?}"),
    }
    assert_healthy(&s);
}

/// The listener binds `::1`. This machine must have an IPv6 loopback address.
#[test]
fn ipv6_listener() {
    let mut cfg = config(&["ram:16M"]);
    for p in &mut cfg.ports {
        p.trtype = TrType::Tcp;
        p.traddr = "::1".into();
        p.trsvcid = "0".into();
    }
    let target = Target::from_config(&cfg).unwrap_or_else(|e| panic!("target: {e}"));
    let tcp = TcpServer::start(target.clone(), &target.ports())
        .unwrap_or_else(|e| panic!("listen on [::1] (is there an IPv6 loopback?): {e}"));
    let addr: SocketAddr = tcp.local_addrs()[0];
    assert!(addr.is_ipv6());
    let fabric: Arc<dyn Fabric> = Arc::new(TcpFabric::new(addr, HostOptions::default()));
    assert_serves(&fabric, &cfg.subsystems[0].nqn, 20_000);
}

#[test]
fn interrupt_poll_and_several_groups() {
    for (mode, groups) in [
        (PollMode::Interrupt, 2),
        (PollMode::Poll, 1),
        (PollMode::Adaptive, 2),
    ] {
        let s = server(mode, groups, small_h2c());
        let (_a, mut io) = io_pair(&s, HostConfig::default(), 0);
        let (_a2, mut io2) = io_pair(&s, HostConfig::default(), 0);
        for i in 0..20u64 {
            let d = pattern(4096, i as u8);
            assert!(io.write_icd(i * 8, &d).is_success());
            let big = pattern(64 * 1024, i as u8 + 100);
            assert!(io2.write_r2t(10_000 + i * 128, &big).0.is_success());
            assert_eq!(io2.read(i * 8, 8).1, d);
            assert_eq!(io.read(10_000 + i * 128, 128).1, big);
        }
        assert_eq!(s.counters().accepted, 4, "{mode:?}");
        if groups == 2 {
            // The listener places connections on the least loaded group: two each.
            let per: Vec<u64> = s
                .server
                .group_counters()
                .iter()
                .map(|c| c.accepted)
                .collect();
            assert_eq!(per, vec![2, 2], "{mode:?}");
        }
        let TcpEnv { server, .. } = s;
        server.shutdown();
    }
}
