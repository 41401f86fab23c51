//! Test doubles for the host library's unit tests: an in-memory [`HostQueue`] that
//! answers commands through a closure (or is answered by hand), and a [`Fabric`] that
//! makes such queues. Compiled for tests only.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use nvmf_common::types::Qid;
use nvmf_common::verbs::DmaBuffer;
use nvmf_common::wire::cqe::{Cqe, CQE_LEN};
use nvmf_common::wire::sqe::{Sqe, SQE_LEN};
use nvmf_common::wire::status::Status;

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
        let mut st = self.st.lock();
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

/// A plain buffer for tests that need an [`IoBuf`].
pub fn iobuf(len: usize) -> IoBuf {
    let buf = DmaBuffer::new(len.max(1)).map(Arc::new);
    match buf {
        Some(buf) => IoBuf {
            buf,
            mr: None,
            offset: 0,
            len,
        },
        None => panic!("allocation of {len} bytes failed"),
    }
}
