//! Test doubles for the host library's unit tests: an in-memory [`HostQueue`] that
//! answers commands through a closure (or is answered by hand), and a [`Fabric`] that
//! makes such queues. Compiled for tests only.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use nvmf_common::types::Qid;
use nvmf_common::wire::cqe::{Cqe, CQE_LEN};
use nvmf_common::wire::sqe::{Sqe, SQE_LEN};
use nvmf_common::wire::status::Status;
use nvmf_verbs::DmaBuffer;

use crate::transport::{DataDir, Fabric, HostQueue, IoBuf, QueueParams, TransportError};

/// A response the fake sends.
#[derive(Debug, Clone, Copy)]
pub struct Reply {
    pub status: Status,
    pub dw0: u32,
    pub dw1: u32,
}

impl Reply {
    pub fn ok(dw0: u32) -> Reply {
        Reply {
            status: Status::SUCCESS,
            dw0,
            dw1: 0,
        }
    }
}

/// Answers one command: `None` leaves it unanswered.
pub type Responder =
    Box<dyn FnMut(&[u8; SQE_LEN], Option<&IoBuf>, DataDir) -> Option<Reply> + Send>;

struct State {
    unsent: Vec<([u8; SQE_LEN], Option<IoBuf>, DataDir)>,
    sent: Vec<[u8; SQE_LEN]>,
    ready: VecDeque<[u8; CQE_LEN]>,
    auto: bool,
    reply: Reply,
    responder: Option<Responder>,
    dead: bool,
    closed: bool,
}

/// An in-memory transport queue.
pub struct FakeQueue {
    qid: Qid,
    depth: u16,
    st: Arc<Mutex<State>>,
}

/// The test's side of a [`FakeQueue`].
#[derive(Clone)]
pub struct FakeHandle {
    st: Arc<Mutex<State>>,
}

fn cqe(cid: u16, r: Reply) -> [u8; CQE_LEN] {
    let mut c = Cqe::new_unchecked([0u8; CQE_LEN]);
    c.set_cid(cid);
    c.set_dw0(r.dw0);
    c.set_dw1(r.dw1);
    c.set_status(r.status);
    c.into_inner()
}

impl FakeQueue {
    /// A queue that answers every command with success (dw0 0) on flush.
    pub fn new(qid: Qid, depth: u16) -> (FakeQueue, FakeHandle) {
        let st = Arc::new(Mutex::new(State {
            unsent: Vec::new(),
            sent: Vec::new(),
            ready: VecDeque::new(),
            auto: true,
            reply: Reply::ok(0),
            responder: None,
            dead: false,
            closed: false,
        }));
        (
            FakeQueue {
                qid,
                depth,
                st: st.clone(),
            },
            FakeHandle { st },
        )
    }

    /// A queue whose commands are answered by `responder`.
    pub fn with_responder(qid: Qid, depth: u16, responder: Responder) -> FakeQueue {
        let (q, h) = FakeQueue::new(qid, depth);
        h.st.lock().responder = Some(responder);
        q
    }
}

impl FakeHandle {
    /// Answer automatically on flush (with [`FakeHandle::set_reply`]'s reply).
    pub fn set_auto_reply(&self, on: bool) {
        self.st.lock().auto = on;
    }
    pub fn set_reply(&self, r: Reply) {
        self.st.lock().reply = r;
    }
    /// Queues a response for `cid`.
    pub fn complete(&self, cid: u16, status: Status, dw0: u32) {
        self.st.lock().ready.push_back(cqe(
            cid,
            Reply {
                status,
                dw0,
                dw1: 0,
            },
        ));
    }
    /// Every SQE flushed so far.
    pub fn sent(&self) -> Vec<[u8; SQE_LEN]> {
        self.st.lock().sent.clone()
    }
    /// Makes every later call fail as a dead queue.
    pub fn kill(&self) {
        self.st.lock().dead = true;
    }
    pub fn closed(&self) -> bool {
        self.st.lock().closed
    }
}

fn dead() -> TransportError {
    TransportError::Dead("fake queue killed".into())
}

impl HostQueue for FakeQueue {
    fn qid(&self) -> Qid {
        self.qid
    }
    fn depth(&self) -> u16 {
        self.depth
    }
    fn submit(
        &mut self,
        slot: u16,
        sqe: &[u8; SQE_LEN],
        data: Option<&IoBuf>,
        dir: DataDir,
    ) -> Result<(), TransportError> {
        let mut st = self.st.lock();
        if st.dead || st.closed {
            return Err(dead());
        }
        if slot >= self.depth || Sqe::new_unchecked(&sqe[..]).cid() != slot {
            return Err(TransportError::Invalid(format!("bad slot {slot}")));
        }
        st.unsent.push((*sqe, data.cloned(), dir));
        Ok(())
    }
    fn flush(&mut self) -> Result<(), TransportError> {
        let mut guard = self.st.lock();
        let st = &mut *guard;
        if st.dead || st.closed {
            return Err(dead());
        }
        let unsent = std::mem::take(&mut st.unsent);
        for (sqe, data, dir) in unsent {
            st.sent.push(sqe);
            let cid = Sqe::new_unchecked(&sqe[..]).cid();
            let reply = match st.responder.as_mut() {
                Some(r) => r(&sqe, data.as_ref(), dir),
                None if st.auto => Some(st.reply),
                None => None,
            };
            if let Some(r) = reply {
                st.ready.push_back(cqe(cid, r));
            }
        }
        Ok(())
    }
    fn poll(&mut self, out: &mut Vec<[u8; CQE_LEN]>) -> Result<usize, TransportError> {
        let mut st = self.st.lock();
        if st.dead {
            return Err(dead());
        }
        let n = st.ready.len();
        out.extend(st.ready.drain(..));
        Ok(n)
    }
    fn wait(&mut self, timeout: Duration) {
        if self.st.lock().ready.is_empty() {
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
        }
    }
    fn close(&mut self) {
        self.st.lock().closed = true;
    }
}

/// Makes the responder for one queue.
pub type ResponderFactory = Arc<dyn Fn(&QueueParams) -> Responder + Send + Sync>;

/// A fabric whose queues are [`FakeQueue`]s answered by responders from a factory.
pub struct FakeFabric {
    factory: ResponderFactory,
    pub connects: Mutex<Vec<QueueParams>>,
}

impl FakeFabric {
    pub fn new(factory: ResponderFactory) -> FakeFabric {
        FakeFabric {
            factory,
            connects: Mutex::new(Vec::new()),
        }
    }
}

impl Fabric for FakeFabric {
    fn connect_queue(&self, p: &QueueParams) -> Result<Box<dyn HostQueue>, TransportError> {
        self.connects.lock().push(p.clone());
        Ok(Box::new(FakeQueue::with_responder(
            p.qid,
            p.depth,
            (self.factory)(p),
        )))
    }
    fn alloc(&self, len: usize) -> Result<IoBuf, TransportError> {
        let buf = DmaBuffer::new(len)
            .ok_or_else(|| TransportError::Invalid(format!("cannot allocate {len}")))?;
        Ok(IoBuf {
            buf: Arc::new(buf),
            mr: None,
            offset: 0,
            len,
        })
    }
    fn name(&self) -> &'static str {
        "fake"
    }
    fn keyed_sgls(&self) -> bool {
        true
    }
}

/// An in-memory NVMe-oF target good enough for controller bring-up, discovery and
/// small I/O: fabrics, admin and NVM commands are answered synchronously on flush.
/// What `f` logs at `level` and above, as the CLI's formatter writes it (tests of
/// warnings and of what stays quiet). The subscriber is this thread's only.
pub fn logged_at(level: tracing::Level, f: impl FnOnce()) -> String {
    let buf = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_writer(move || LogSink(sink.clone()))
        .finish();
    tracing::subscriber::with_default(sub, f);
    let out = buf.lock().map(|b| b.clone()).unwrap_or_default();
    String::from_utf8_lossy(&out).into_owned()
}

struct LogSink(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut v) = self.0.lock() {
            v.extend_from_slice(b);
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub mod fake_target {
    use super::*;
    use nvmf_common::types::DISCOVERY_NQN;
    use nvmf_common::wire::admin::{self, cns, fid, num_queues_decode, num_queues_encode};
    use nvmf_common::wire::fabrics::{
        cap_crms, cap_css, connect_data_offset, connect_invalid_param_dw0, fctype, reg, shst, Cap,
        Cc, ConnectCmd, ConnectData, Crto, Csts, PropertyGetCmd, PropertySetCmd, FABRICS_OPCODE,
        NVME_VS_1_3,
    };
    use nvmf_common::wire::identify::{
        cntrltype, write_active_ns_list, write_ns_id_descriptors, IdentifyController,
        IdentifyNamespace, LbaFormat, NsIdDescriptor, IDENTIFY_LEN,
    };
    use nvmf_common::wire::log::{
        adrfam, disc_log_entry_offset, disc_log_len, lid, subtype, trtype, DiscoveryLogEntry,
        DiscoveryLogHeader,
    };
    use nvmf_common::wire::nvm::{self, opcode as nvm_op};
    use nvmf_common::wire::status::{cmd_specific, generic};

    /// One namespace of the fake: NSID, size in blocks, log2 block size.
    #[derive(Debug, Clone, Copy)]
    pub struct FakeNs {
        pub nsid: u32,
        pub nsze: u64,
        pub ds: u8,
    }

    #[derive(Debug, Clone)]
    pub struct FakeTargetConfig {
        pub subnqn: String,
        pub cntlid: u16,
        /// I/O queues the target grants at most.
        pub max_queues: u16,
        /// CAP.MQES (0-based).
        pub mqes: u16,
        pub mdts: u8,
        pub cap_to: u8,
        /// CRTO.CRWMT; set, CAP.CRMS.CRWMS says CRTO is there.
        pub crwmt: Option<u16>,
        pub cfs: bool,
        pub never_ready: bool,
        pub in_capsule_data: u32,
        pub namespaces: Vec<FakeNs>,
        /// Discovery log entries: (subnqn, traddr, trsvcid).
        pub discovery: Vec<(String, String, String)>,
        /// Full discovery log reads after which the generation counter changes.
        pub genctr_bumps: u32,
        /// Fail every I/O command with this status.
        pub io_error: Option<Status>,
    }

    impl Default for FakeTargetConfig {
        fn default() -> Self {
            FakeTargetConfig {
                subnqn: "nqn.2024-01.io.example:fake".into(),
                cntlid: 5,
                max_queues: 8,
                mqes: 63,
                mdts: 5,
                cap_to: 10,
                crwmt: None,
                cfs: false,
                never_ready: false,
                in_capsule_data: 8192,
                namespaces: vec![
                    FakeNs {
                        nsid: 1,
                        nsze: 2048,
                        ds: 9,
                    },
                    FakeNs {
                        nsid: 2,
                        nsze: 0,
                        ds: 9,
                    },
                    FakeNs {
                        nsid: 3,
                        nsze: 100,
                        ds: 12,
                    },
                ],
                discovery: Vec::new(),
                genctr_bumps: 0,
                io_error: None,
            }
        }
    }

    struct TState {
        log: Vec<String>,
        cc: Cc,
        csts: Csts,
        genctr: u64,
        bumps_left: u32,
        /// Namespace contents, indexed like `cfg.namespaces`.
        data: Vec<Vec<u8>>,
        ios: u64,
    }

    /// The fake target; clone the fabric to connect.
    pub struct FakeTarget {
        cfg: Arc<FakeTargetConfig>,
        st: Arc<Mutex<TState>>,
        fabric: Arc<FakeFabric>,
    }

    impl FakeTarget {
        pub fn new(cfg: FakeTargetConfig) -> FakeTarget {
            let data = cfg
                .namespaces
                .iter()
                .map(|n| vec![0u8; (n.nsze << n.ds) as usize])
                .collect();
            let st = Arc::new(Mutex::new(TState {
                log: Vec::new(),
                cc: Cc(0),
                csts: Csts(0),
                genctr: 1,
                bumps_left: cfg.genctr_bumps,
                data,
                ios: 0,
            }));
            let cfg = Arc::new(cfg);
            let (c2, s2) = (cfg.clone(), st.clone());
            let factory: ResponderFactory = Arc::new(move |p: &QueueParams| {
                let (cfg, st, qid) = (c2.clone(), s2.clone(), p.qid);
                Box::new(
                    move |sqe: &[u8; SQE_LEN], data: Option<&IoBuf>, _dir: DataDir| {
                        Some(answer(&cfg, &mut st.lock(), qid, sqe, data))
                    },
                ) as Responder
            });
            FakeTarget {
                cfg,
                st,
                fabric: Arc::new(FakeFabric::new(factory)),
            }
        }

        pub fn fabric(&self) -> Arc<dyn Fabric> {
            self.fabric.clone()
        }
        pub fn subnqn(&self) -> String {
            self.cfg.subnqn.clone()
        }
        pub fn log(&self) -> Vec<String> {
            self.st.lock().log.clone()
        }
        pub fn connects(&self) -> Vec<QueueParams> {
            self.fabric.connects.lock().clone()
        }
        pub fn ios(&self) -> u64 {
            self.st.lock().ios
        }
        /// Flips the bits of one byte of namespace `nsid`.
        pub fn corrupt(&self, nsid: u32, at: usize) {
            let mut st = self.st.lock();
            let i = self.cfg.namespaces.iter().position(|n| n.nsid == nsid);
            if let Some(b) = i
                .and_then(|i| st.data.get_mut(i))
                .and_then(|d| d.get_mut(at))
            {
                *b ^= 0xFF;
            }
        }
        /// Bytes of namespace `nsid` at byte offset `at`.
        pub fn ns_bytes(&self, nsid: u32, at: usize, len: usize) -> Vec<u8> {
            let st = self.st.lock();
            let i = self.cfg.namespaces.iter().position(|n| n.nsid == nsid);
            i.and_then(|i| st.data.get(i))
                .and_then(|d| d.get(at..at + len))
                .map(|s| s.to_vec())
                .unwrap_or_default()
        }
    }

    fn ok(dw0: u32) -> Reply {
        Reply::ok(dw0)
    }
    fn fail(s: Status) -> Reply {
        Reply {
            status: s,
            dw0: 0,
            dw1: 0,
        }
    }

    fn put(data: Option<&IoBuf>, bytes: &[u8]) -> Reply {
        match data {
            Some(b) => {
                let n = b.len.min(bytes.len());
                if b.write_at(0, &bytes[..n]) {
                    ok(0)
                } else {
                    fail(Status::generic_dnr(generic::DATA_TRANSFER_ERROR))
                }
            }
            None => fail(Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID)),
        }
    }

    fn answer(
        cfg: &FakeTargetConfig,
        st: &mut TState,
        qid: Qid,
        sqe: &[u8; SQE_LEN],
        data: Option<&IoBuf>,
    ) -> Reply {
        let s = Sqe::new_unchecked(&sqe[..]);
        if s.opcode() == FABRICS_OPCODE {
            return fabrics(cfg, st, qid, sqe, data);
        }
        if qid.is_admin() {
            admin_cmd(cfg, st, sqe, data)
        } else {
            io_cmd(cfg, st, sqe, data)
        }
    }

    fn fabrics(
        cfg: &FakeTargetConfig,
        st: &mut TState,
        qid: Qid,
        sqe: &[u8; SQE_LEN],
        data: Option<&IoBuf>,
    ) -> Reply {
        let s = Sqe::new_unchecked(&sqe[..]);
        match s.fctype() {
            fctype::CONNECT => {
                let c = ConnectCmd::new_unchecked(&sqe[..]);
                let mut raw = vec![0u8; 1024];
                if !data.is_some_and(|b| b.read_at(0, &mut raw)) {
                    return fail(Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID));
                }
                let d = ConnectData::new_unchecked(&raw[..]);
                st.log
                    .push(format!("connect qid {} cntlid {}", c.qid(), d.cntlid()));
                if c.kato() > 0 {
                    st.log.push(format!("kato {}", c.kato()));
                }
                let sub = d.subsysnqn().unwrap_or("");
                if sub != cfg.subnqn && sub != DISCOVERY_NQN {
                    return Reply {
                        status: Status::cmd_specific_dnr(cmd_specific::CONNECT_INVALID_PARAMETERS),
                        dw0: connect_invalid_param_dw0(true, connect_data_offset::SUBSYSNQN),
                        dw1: 0,
                    };
                }
                if c.qid() != qid.0 {
                    return fail(Status::cmd_specific_dnr(
                        cmd_specific::CONNECT_INVALID_PARAMETERS,
                    ));
                }
                ok(u32::from(cfg.cntlid))
            }
            fctype::PROPERTY_GET => {
                let p = PropertyGetCmd::new_unchecked(&sqe[..]);
                st.log.push(format!("prop_get {:#x}", p.offset()));
                let v: u64 = match p.offset() {
                    reg::CAP => {
                        let crms = if cfg.crwmt.is_some() {
                            cap_crms::CRWMS
                        } else {
                            0
                        };
                        Cap::default()
                            .with_mqes(cfg.mqes)
                            .with_to(cfg.cap_to)
                            .with_css(cap_css::NVM)
                            .with_crms(crms)
                            .0
                    }
                    reg::CRTO if cfg.crwmt.is_some() => {
                        u64::from(Crto(0).with_crwmt(cfg.crwmt.unwrap_or(0)).0)
                    }
                    reg::VS => u64::from(NVME_VS_1_3),
                    reg::CC => u64::from(st.cc.0),
                    reg::CSTS => u64::from(st.csts.0),
                    _ => return fail(Status::generic_dnr(generic::INVALID_FIELD)),
                };
                Reply {
                    status: Status::SUCCESS,
                    dw0: v as u32,
                    dw1: (v >> 32) as u32,
                }
            }
            fctype::PROPERTY_SET => {
                let p = PropertySetCmd::new_unchecked(&sqe[..]);
                st.log
                    .push(format!("prop_set {:#x} {:#x}", p.offset(), p.value()));
                if p.offset() == reg::CC {
                    let cc = Cc(p.value() as u32);
                    st.cc = cc;
                    let mut csts = st.csts.with_rdy(cc.en() && !cfg.never_ready);
                    csts = csts.with_cfs(cfg.cfs);
                    if cc.shn() != 0 {
                        csts = csts.with_shst(shst::COMPLETE);
                    }
                    st.csts = csts;
                }
                ok(0)
            }
            fctype::DISCONNECT => {
                st.log.push(format!("disconnect qid {qid}"));
                ok(0)
            }
            _ => fail(Status::generic_dnr(generic::INVALID_OPCODE)),
        }
    }

    fn discovery_page(cfg: &FakeTargetConfig, genctr: u64) -> Vec<u8> {
        let n = cfg.discovery.len();
        let mut page = vec![0u8; disc_log_len(n)];
        {
            let mut h = DiscoveryLogHeader::new_unchecked(&mut page[..]);
            h.set_genctr(genctr);
            h.set_numrec(n as u64);
        }
        for (i, (sub, addr, svc)) in cfg.discovery.iter().enumerate() {
            let o = disc_log_entry_offset(i);
            let mut e = DiscoveryLogEntry::new_unchecked(&mut page[o..]);
            e.set_trtype(trtype::RDMA);
            e.set_adrfam(adrfam::IPV4);
            e.set_subtype(if sub == DISCOVERY_NQN {
                subtype::CURRENT_DISCOVERY
            } else {
                subtype::NVME
            });
            e.set_portid(1);
            e.set_cntlid(0xFFFF);
            e.set_asqsz(32);
            e.set_trsvcid(svc);
            e.set_subnqn(sub);
            e.set_traddr(addr);
            e.set_rdma_qptype(1);
            e.set_rdma_prtype(1);
            e.set_rdma_cms(1);
        }
        page
    }

    fn admin_cmd(
        cfg: &FakeTargetConfig,
        st: &mut TState,
        sqe: &[u8; SQE_LEN],
        data: Option<&IoBuf>,
    ) -> Reply {
        let s = Sqe::new_unchecked(&sqe[..]);
        match s.opcode() {
            admin::opcode::IDENTIFY => {
                let c = admin::identify_cns(&s);
                st.log.push(format!("identify cns {c}"));
                let mut page = vec![0u8; IDENTIFY_LEN];
                match c {
                    cns::CONTROLLER => {
                        let mut id = IdentifyController::new_unchecked(&mut page[..]);
                        id.set_sn("fake serial");
                        id.set_mn("fake model");
                        id.set_fr("1.0");
                        id.set_mdts(cfg.mdts);
                        id.set_cntlid(cfg.cntlid);
                        id.set_ver(NVME_VS_1_3);
                        id.set_cntrltype(if cfg.subnqn == DISCOVERY_NQN {
                            cntrltype::DISCOVERY
                        } else {
                            cntrltype::IO
                        });
                        id.set_maxcmd(128);
                        id.set_nn(cfg.namespaces.len() as u32);
                        id.set_sgls(5);
                        id.set_subnqn(&cfg.subnqn);
                        id.set_ioccsz((cfg.in_capsule_data + 64) / 16);
                        id.set_iorcsz(1);
                    }
                    cns::ACTIVE_NS_LIST => {
                        let after = s.nsid();
                        write_active_ns_list(
                            &mut page,
                            cfg.namespaces.iter().map(|n| n.nsid).filter(|&n| n > after),
                        );
                    }
                    cns::NAMESPACE => {
                        let Some(ns) = cfg.namespaces.iter().find(|n| n.nsid == s.nsid()) else {
                            return fail(Status::generic_dnr(generic::INVALID_NAMESPACE));
                        };
                        let mut id = IdentifyNamespace::new_unchecked(&mut page[..]);
                        id.set_nsze(ns.nsze);
                        id.set_ncap(ns.nsze);
                        id.set_nuse(ns.nsze);
                        id.set_nguid([ns.nsid as u8; 16]);
                        id.set_lbaf(0, LbaFormat::new(ns.ds));
                    }
                    cns::NS_ID_DESCRIPTOR_LIST => {
                        if s.nsid() != 1 {
                            return fail(Status::generic_dnr(generic::INVALID_FIELD));
                        }
                        write_ns_id_descriptors(&mut page, &[NsIdDescriptor::Uuid([0x11; 16])]);
                    }
                    _ => return fail(Status::generic_dnr(generic::INVALID_FIELD)),
                }
                put(data, &page)
            }
            admin::opcode::SET_FEATURES => {
                let f = admin::feature_fid(&s);
                st.log.push(format!("set_features {f} {:#x}", s.cdw11()));
                if f == fid::NUMBER_OF_QUEUES {
                    let (nsqr, ncqr) = num_queues_decode(s.cdw11());
                    let max = cfg.max_queues.saturating_sub(1);
                    let _ = (nsqr, ncqr);
                    return ok(num_queues_encode(max, max));
                }
                ok(0)
            }
            admin::opcode::GET_FEATURES => ok(0),
            admin::opcode::GET_LOG_PAGE => {
                let l = admin::log_lid(&s);
                let off = admin::log_offset(&s) as usize;
                let len = admin::log_len_bytes(&s) as usize;
                st.log.push(format!("get_log {l:#x} off {off} len {len}"));
                if data.is_none_or(|b| b.len != len) {
                    return fail(Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID));
                }
                let bytes: Vec<u8> = match l {
                    lid::DISCOVERY => {
                        let page = discovery_page(cfg, st.genctr);
                        let full = page.len();
                        let mut v = page.get(off..).unwrap_or(&[]).to_vec();
                        v.resize(len, 0);
                        // The log "changes" right after a whole-page read.
                        if off == 0 && len >= full && len > 1024 && st.bumps_left > 0 {
                            st.bumps_left -= 1;
                            st.genctr += 1;
                        }
                        v
                    }
                    0xC0 => (0..len).map(|i| (((off + i) / 4) % 251) as u8).collect(),
                    _ => return fail(Status::cmd_specific_dnr(cmd_specific::INVALID_LOG_PAGE)),
                };
                put(data, &bytes)
            }
            admin::opcode::KEEP_ALIVE => {
                st.log.push("keep_alive".into());
                ok(0)
            }
            _ => fail(Status::generic_dnr(generic::INVALID_OPCODE)),
        }
    }

    fn io_cmd(
        cfg: &FakeTargetConfig,
        st: &mut TState,
        sqe: &[u8; SQE_LEN],
        data: Option<&IoBuf>,
    ) -> Reply {
        st.ios += 1;
        if let Some(e) = cfg.io_error {
            return fail(e);
        }
        let s = Sqe::new_unchecked(&sqe[..]);
        let Some(i) = cfg.namespaces.iter().position(|n| n.nsid == s.nsid()) else {
            if s.opcode() == nvm_op::FLUSH && s.nsid() == u32::MAX {
                return ok(0);
            }
            return fail(Status::generic_dnr(generic::INVALID_NAMESPACE));
        };
        let ns = cfg.namespaces[i];
        let bs = 1usize << ns.ds;
        let Some(store) = st.data.get_mut(i) else {
            return fail(Status::generic_dnr(generic::INTERNAL_ERROR));
        };
        let slba = nvm::rw_slba(&s);
        let nlb = u64::from(nvm::rw_nlb(&s));
        let in_range = slba.checked_add(nlb).is_some_and(|e| e <= ns.nsze);
        let at = (slba as usize).saturating_mul(bs);
        let len = nlb as usize * bs;
        match s.opcode() {
            nvm_op::FLUSH => ok(0),
            nvm_op::READ | nvm_op::WRITE | nvm_op::COMPARE | nvm_op::WRITE_ZEROES => {
                if !in_range {
                    return fail(Status::generic_dnr(generic::LBA_OUT_OF_RANGE));
                }
                let region = &mut store[at..at + len];
                match s.opcode() {
                    nvm_op::WRITE_ZEROES => {
                        region.fill(0);
                        return ok(0);
                    }
                    _ if data.is_none_or(|b| b.len != len) => {
                        return fail(Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID));
                    }
                    _ => {}
                }
                let Some(b) = data else {
                    return fail(Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID));
                };
                match s.opcode() {
                    nvm_op::READ => put(Some(b), region),
                    nvm_op::WRITE => {
                        if b.read_at(0, region) {
                            ok(0)
                        } else {
                            fail(Status::generic_dnr(generic::DATA_TRANSFER_ERROR))
                        }
                    }
                    _ => {
                        let mut tmp = vec![0u8; len];
                        if b.read_at(0, &mut tmp) && tmp == *region {
                            ok(0)
                        } else {
                            fail(Status::media_retryable(
                                nvmf_common::wire::status::media::COMPARE_FAILURE,
                            ))
                        }
                    }
                }
            }
            nvm_op::DATASET_MANAGEMENT => {
                let nr = nvm::dsm_nr(&s) as usize;
                let mut raw = vec![0u8; nr * nvm::DSM_RANGE_LEN];
                if !data.is_some_and(|b| b.read_at(0, &mut raw)) {
                    return fail(Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID));
                }
                for r in nvm::dsm_ranges(&raw, nr) {
                    let end = r.slba().checked_add(u64::from(r.nlb()));
                    if end.is_none_or(|e| e > ns.nsze) {
                        return fail(Status::generic_dnr(generic::LBA_OUT_OF_RANGE));
                    }
                    let a = r.slba() as usize * bs;
                    store[a..a + r.nlb() as usize * bs].fill(0);
                }
                st.log.push(format!("dsm {nr}"));
                ok(0)
            }
            _ => fail(Status::generic_dnr(generic::INVALID_OPCODE)),
        }
    }
}
