//! Connection management: listeners registered by address, and the connect/accept
//! rendezvous (the rdma_cm REQ/REP/REJ exchange).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::qp::{self, SoftQp};
use super::DevShared;
use crate::{ConnectRequest, Listener, QpInit, QueuePair, VerbsError};

/// Where a connection request stands.
enum PState {
    /// Queued or handed out; holds the active QP until accept links it.
    Waiting(Arc<SoftQp>),
    Accepted(Vec<u8>),
    Rejected(Vec<u8>),
    /// The listener went away, or the request was dropped unanswered.
    Refused,
    /// The active side timed out; a late accept fails.
    Abandoned,
}

struct Pending {
    private_data: Vec<u8>,
    state: Mutex<PState>,
    cv: Condvar,
}

impl Pending {
    fn is_waiting(&self) -> bool {
        matches!(*self.state.lock(), PState::Waiting(_))
    }

    /// Settles a waiting request with `outcome`; no effect once settled.
    fn settle(&self, outcome: PState) {
        let mut st = self.state.lock();
        if matches!(*st, PState::Waiting(_)) {
            *st = outcome;
            self.cv.notify_all();
        }
    }
}

struct LState {
    queue: VecDeque<Arc<Pending>>,
    closed: bool,
}

pub(super) struct ListenerShared {
    addr: String,
    state: Mutex<LState>,
    cv: Condvar,
}

#[cfg(test)]
impl ListenerShared {
    pub(super) fn queue_len(&self) -> usize {
        self.state.lock().queue.len()
    }
}

struct SoftListener {
    dev: Arc<DevShared>,
    shared: Arc<ListenerShared>,
}

/// Waits on `cv` until `deadline` (`None`: forever). Returns false on timeout.
fn wait_until<T>(cv: &Condvar, guard: &mut MutexGuard<'_, T>, deadline: Option<Instant>) -> bool {
    match deadline {
        Some(deadline) => !cv.wait_until(guard, deadline).timed_out(),
        None => {
            cv.wait(guard);
            true
        }
    }
}

pub(super) fn listen(dev: &Arc<DevShared>, addr: &str) -> Result<Arc<dyn Listener>, VerbsError> {
    let mut map = dev.listeners.lock();
    if map.contains_key(addr) {
        return Err(VerbsError::AddrInUse(addr.to_string()));
    }
    let shared = Arc::new(ListenerShared {
        addr: addr.to_string(),
        state: Mutex::new(LState {
            queue: VecDeque::new(),
            closed: false,
        }),
        cv: Condvar::new(),
    });
    map.insert(addr.to_string(), Arc::clone(&shared));
    Ok(Arc::new(SoftListener {
        dev: Arc::clone(dev),
        shared,
    }))
}

impl Listener for SoftListener {
    fn next_request(&self, timeout: Duration) -> Option<Box<dyn ConnectRequest>> {
        let deadline = Instant::now().checked_add(timeout);
        let mut st = self.shared.state.lock();
        loop {
            while let Some(pending) = st.queue.pop_front() {
                // Requests whose connect timed out meanwhile are dropped silently.
                if pending.is_waiting() {
                    return Some(Box::new(SoftConnectRequest {
                        dev: Arc::clone(&self.dev),
                        pending,
                    }));
                }
            }
            if !wait_until(&self.shared.cv, &mut st, deadline) && st.queue.is_empty() {
                return None;
            }
        }
    }

    fn local_addr(&self) -> String {
        self.shared.addr.clone()
    }
}

impl Drop for SoftListener {
    fn drop(&mut self) {
        {
            let mut map = self.dev.listeners.lock();
            if map
                .get(&self.shared.addr)
                .is_some_and(|l| Arc::ptr_eq(l, &self.shared))
            {
                map.remove(&self.shared.addr);
            }
        }
        let queued: Vec<_> = {
            let mut st = self.shared.state.lock();
            st.closed = true;
            st.queue.drain(..).collect()
        };
        for pending in queued {
            pending.settle(PState::Refused);
        }
    }
}

struct SoftConnectRequest {
    dev: Arc<DevShared>,
    pending: Arc<Pending>,
}

impl ConnectRequest for SoftConnectRequest {
    fn private_data(&self) -> &[u8] {
        &self.pending.private_data
    }

    fn accept(
        self: Box<Self>,
        init: QpInit,
        private_data: &[u8],
        reject_data: &[u8],
        pre_post: &mut dyn FnMut(&dyn QueuePair) -> Result<(), VerbsError>,
    ) -> Result<Arc<dyn QueuePair>, VerbsError> {
        let mut st = self.pending.state.lock();
        let active = match &*st {
            PState::Waiting(active) => Arc::clone(active),
            PState::Abandoned => return Err(VerbsError::Timeout),
            _ => return Err(VerbsError::ConnectionRefused),
        };
        let set_up = qp::create(&self.dev, init).and_then(|passive| {
            pre_post(passive.as_ref())?;
            qp::link(&active, &passive)?;
            Ok(passive)
        });
        let passive = match set_up {
            Ok(p) => p,
            Err(e) => {
                *st = PState::Rejected(reject_data.to_vec());
                self.pending.cv.notify_all();
                return Err(e);
            }
        };
        *st = PState::Accepted(private_data.to_vec());
        self.pending.cv.notify_all();
        Ok(passive)
    }

    fn reject(self: Box<Self>, private_data: &[u8]) {
        self.pending.settle(PState::Rejected(private_data.to_vec()));
    }
}

impl Drop for SoftConnectRequest {
    fn drop(&mut self) {
        self.pending.settle(PState::Refused);
    }
}

pub(super) fn connect(
    dev: &Arc<DevShared>,
    addr: &str,
    init: QpInit,
    private_data: &[u8],
    pre_post: &mut dyn FnMut(&dyn QueuePair) -> Result<(), VerbsError>,
    timeout: Duration,
) -> Result<(Arc<dyn QueuePair>, Vec<u8>), VerbsError> {
    let deadline = Instant::now().checked_add(timeout);
    let listener = dev
        .listeners
        .lock()
        .get(addr)
        .cloned()
        .ok_or_else(|| VerbsError::NoListener(addr.to_string()))?;
    let qp = qp::create(dev, init)?;
    pre_post(&*qp)?;
    let pending = Arc::new(Pending {
        private_data: private_data.to_vec(),
        state: Mutex::new(PState::Waiting(Arc::clone(&qp))),
        cv: Condvar::new(),
    });
    {
        let mut st = listener.state.lock();
        if st.closed {
            return Err(VerbsError::ConnectionRefused);
        }
        st.queue.push_back(Arc::clone(&pending));
        listener.cv.notify_one();
    }
    let mut st = pending.state.lock();
    while matches!(*st, PState::Waiting(_)) {
        if !wait_until(&pending.cv, &mut st, deadline) && matches!(*st, PState::Waiting(_)) {
            *st = PState::Abandoned;
            return Err(VerbsError::Timeout);
        }
    }
    match std::mem::replace(&mut *st, PState::Abandoned) {
        PState::Accepted(reply) => Ok((qp as Arc<dyn QueuePair>, reply)),
        PState::Rejected(data) => Err(VerbsError::Rejected(data)),
        _ => Err(VerbsError::ConnectionRefused),
    }
}
