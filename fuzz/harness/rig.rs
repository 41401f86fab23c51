//! An in-process target core without a transport: a RAM namespace, queue contexts
//! and an execution context, driven exactly as a poll group drives them (parse with
//! the SGL's length, data into a buffer, execute, reap backend completions).

use std::sync::Arc;

use nvmf_common::types::{Cntlid, Nqn, Qid};
use nvmf_common::wire::fabrics::reg;
use nvmf_common::wire::status::Status;
use nvmf_initiator::command;
use nvmf_target::backend::fault::{FaultBackend, FaultControl};
use nvmf_target::backend::DmaSlice;
use nvmf_target::config::{Config, TrType};
use nvmf_target::core::{self, DataDir, ExecCtx, Outcome, QueueCtx, Request};
use nvmf_target::params::PortInfo;
use nvmf_target::subsystem::Namespace;
use nvmf_target::target::Target;
use nvmf_verbs::DmaBuffer;

/// The subsystem the rig serves.
pub const NQN: &str = "nqn.2024-01.io.nvmf-rs:fuzz";
/// The host the rig's well-formed Connects come from.
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-00000000f022";
/// CC: EN, IOSQES 6, IOCQES 4.
pub fn cc_enable() -> u64 {
    u64::from(nvmf_common::wire::fabrics::Cc::enable_nvm().0)
}
/// Backend completions are reaped at most this many times per command.
const MAX_REAPS: usize = 10_000;

/// What one command came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// Completed with this status and dword 0.
    Completed(Status, u32),
    /// Held (Asynchronous Event Request).
    Held,
}

pub struct Rig {
    pub target: Arc<Target>,
    pub ex: ExecCtx,
    pub port: Arc<PortInfo>,
    pub nqn: Nqn,
    pub hostnqn: Nqn,
    /// The fault wrapper around namespace 1: counts what reaches the backend.
    pub faults: Arc<FaultControl>,
    tag: u64,
}

impl Rig {
    /// A target with one 1 MiB RAM namespace (512-byte blocks).
    pub fn new() -> Option<Rig> {
        let nqn = Nqn::new(NQN).ok()?;
        let mut cfg = Config::single(
            TrType::Loopback,
            None,
            Some(nqn.clone()),
            vec!["ram:1M".into()],
        )
        .ok()?;
        cfg.transport.max_io_size = 128 * 1024;
        let target = Target::from_config(&cfg).ok()?;
        let port = target.ports().first()?.clone();
        let sub = target.subsystem_by_name(NQN)?;
        let ns = sub.remove_namespace(nvmf_common::types::Nsid(1))?;
        let (backend, faults) = FaultBackend::wrap(ns.backend.clone());
        sub.add_namespace(Namespace::new(ns.nsid, backend, [1; 16], [2; 16]))
            .ok()?;
        Some(Rig {
            faults,
            ex: ExecCtx::new(target.clone()),
            target,
            port,
            nqn,
            hostnqn: Nqn::new(HOSTNQN).ok()?,
            tag: 0,
        })
    }

    /// A fresh, unconnected queue context for `qid`.
    pub fn queue(&self, qid: u16) -> QueueCtx {
        QueueCtx::new(Qid(qid), 0, self.port.clone())
    }

    /// Runs one command: parse with `sgl_len` (the length the transport's SGL
    /// described), host-to-controller data from `data` (zero-padded), execute, reap.
    /// Returns None when the command was refused at parse (with that status).
    pub fn exec(&mut self, q: &mut QueueCtx, sqe: &[u8; 64], sgl_len: u32, data: &[u8]) -> Done {
        let mut req = Request::new();
        req.reset(sqe);
        if let Err(st) = core::parse(q, &self.target, &mut req, sgl_len) {
            req.fail(st);
            return self.finish(q, &req);
        }
        let plan = req.plan;
        assert_eq!(
            plan.len, sgl_len,
            "parse accepted a length the SGL does not describe"
        );
        assert!(
            plan.len <= self.target.params.max_io_size,
            "parse accepted a transfer above MDTS"
        );
        if plan.len > 0 {
            let Some(buf) = DmaBuffer::new(plan.len as usize).map(Arc::new) else {
                return Done::Completed(Status::SUCCESS, 0);
            };
            if plan.dir == DataDir::HostToCtrl {
                let n = data.len().min(plan.len as usize);
                if let Some(d) = data.get(..n) {
                    assert!(buf.write_at(0, d));
                }
            }
            req.data = DmaSlice::new(buf, 0, plan.len as usize);
        }
        self.tag += 1;
        let tag = self.tag;
        match core::execute(q, &mut self.ex, &mut req, tag) {
            Outcome::Done => {}
            Outcome::Held => return Done::Held,
            Outcome::Pending => {
                let mut out = Vec::new();
                let mut done = false;
                for _ in 0..MAX_REAPS {
                    out.clear();
                    self.ex.poll_backends(&mut out);
                    for (t, res) in out.drain(..) {
                        assert_eq!(t, tag, "completion for a tag never submitted");
                        if core::io_done(&mut self.ex, &mut req, tag, res) {
                            done = true;
                        }
                    }
                    if done {
                        break;
                    }
                    std::thread::yield_now();
                }
                assert!(done, "backend I/O never completed");
            }
        }
        self.finish(q, &req)
    }

    fn finish(&self, q: &mut QueueCtx, req: &Request) -> Done {
        q.advance_sq_head();
        let mut cqe = [0u8; 16];
        q.fill_cqe(req, &mut cqe);
        Done::Completed(req.status, req.dw0)
    }

    /// Connect data for this rig's host.
    pub fn connect_data(&self, cntlid: Cntlid) -> [u8; 1024] {
        command::connect_data([0x5A; 16], cntlid, &self.nqn, &self.hostnqn)
    }

    /// A connected, enabled admin queue with `nr_io` I/O queues granted; returns it
    /// and the controller id.
    pub fn admin_up(&mut self, nr_io: u16) -> Option<(QueueCtx, Cntlid)> {
        let mut q = self.queue(0);
        let d = self.connect_data(Cntlid::DYNAMIC);
        let Done::Completed(st, dw0) =
            self.exec(&mut q, &command::connect(Qid(0), 31, 0), 1024, &d)
        else {
            return None;
        };
        if !st.is_success() {
            return None;
        }
        let cntlid = Cntlid(dw0 as u16);
        self.exec(&mut q, &command::property_set(reg::CC, cc_enable()), 0, &[]);
        self.exec(&mut q, &command::set_number_of_queues(nr_io), 0, &[]);
        Some((q, cntlid))
    }

    /// A connected I/O queue `qid` of controller `cntlid`.
    pub fn io_up(&mut self, cntlid: Cntlid, qid: u16) -> Option<QueueCtx> {
        let mut q = self.queue(qid);
        let d = self.connect_data(cntlid);
        match self.exec(&mut q, &command::connect(Qid(qid), 31, 0), 1024, &d) {
            Done::Completed(st, _) if st.is_success() => Some(q),
            _ => None,
        }
    }
}
