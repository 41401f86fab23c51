//! Completion queues (`ibv_create_cq`), in completion-channel or polling mode.
//!
//! - **Channel mode**: the CQ has its own `ibv_comp_channel` with a non-blocking fd.
//!   [`CompletionQueue::req_notify`] arms it (one-shot, `ibv_req_notify_cq`);
//!   [`CompletionQueue::event_fd`] is the channel fd; `ack_events` reads and
//!   acknowledges every pending channel event at once. `wait` arms, then polls once so
//!   a completion that came before arming is not slept through (such completions are
//!   kept in a small stash that the next `poll` returns first).
//! - **Polling mode**: no channel. `event_fd` is an eventfd that is always readable, so
//!   callers that multiplex it never block; `wait` only yields.
//!
//! **Capacity.** A real CQ that overflows is an asynchronous error that breaks every
//! QP on it, so each QP reserves room for all its work requests (they all complete
//! when flushed) and the CQ grows with `ibv_resize_cq` up to the device limit; a QP
//! that would not fit is refused instead ([`RdmaCq::reserve`]).

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::eventfd::{EfdFlags, EventFd};
use parking_lot::Mutex;
use rdma_sys::{
    ibv_ack_cq_events, ibv_comp_channel, ibv_cq, ibv_create_comp_channel, ibv_create_cq,
    ibv_destroy_comp_channel, ibv_destroy_cq, ibv_get_cq_event, ibv_poll_cq, ibv_req_notify_cq,
    ibv_resize_cq, ibv_wc, ibv_wc_flags,
};

use super::convert::{wc_opcode, wc_status};
use super::device::{CqMode, DevShared};
use super::event::os_error;
use super::registry::Registry;
use crate::{CompletionQueue, VerbsError, WorkCompletion};

/// Completions taken from the device per `ibv_poll_cq` call.
const POLL_CHUNK: usize = 32;

/// Every live CQ this provider made, to recognise them in [`crate::QpInit`].
pub(super) static CQS: Registry<RdmaCq> = Registry::new();

/// How the consumer learns about completions.
enum Signal {
    Channel(*mut ibv_comp_channel),
    /// Always readable (polling mode).
    Ready(EventFd),
}

struct Capacity {
    /// Entries the CQ has (what the device granted).
    cqe: u32,
    /// Entries reserved by live QPs.
    reserved: u32,
}

pub(super) struct RdmaCq {
    pub(super) raw: *mut ibv_cq,
    signal: Signal,
    dev: Arc<DevShared>,
    capacity: Mutex<Capacity>,
    /// Completions `wait` took while checking for a race with arming.
    stash: Mutex<VecDeque<WorkCompletion>>,
    stashed: AtomicUsize,
}

// SAFETY: libibverbs CQs may be polled, armed and resized from any thread (providers
// lock internally); our own mutable state is behind mutexes and atomics.
unsafe impl Send for RdmaCq {}
// SAFETY: see `Send`.
unsafe impl Sync for RdmaCq {}

impl RdmaCq {
    pub(super) fn new(dev: &Arc<DevShared>, entries: u32) -> Result<Arc<RdmaCq>, VerbsError> {
        if entries == 0 {
            return Err(VerbsError::InvalidArgument("CQ entries must be at least 1"));
        }
        let ctx = &dev.ctx;
        let want = entries.min(ctx.limits.max_cqe.max(1));
        let signal = match dev.cq_mode() {
            CqMode::Channel => {
                // SAFETY: the context is live for the process.
                let ch = unsafe { ibv_create_comp_channel(ctx.raw) };
                if ch.is_null() {
                    return Err(os_error("ibv_create_comp_channel"));
                }
                // SAFETY: `ch` is a live channel; fcntl only adds O_NONBLOCK to its fd.
                let ok = unsafe {
                    let fd = (*ch).fd;
                    let fl = libc::fcntl(fd, libc::F_GETFL);
                    fl >= 0 && libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) >= 0
                };
                if !ok {
                    let e = os_error("fcntl(O_NONBLOCK) on a completion channel");
                    // SAFETY: no CQ uses the channel yet.
                    unsafe { ibv_destroy_comp_channel(ch) };
                    return Err(e);
                }
                Signal::Channel(ch)
            }
            CqMode::Polling => Signal::Ready(
                EventFd::from_value_and_flags(1, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
                    .map_err(|e| VerbsError::Provider(format!("eventfd: {e}")))?,
            ),
        };
        let ch = match &signal {
            Signal::Channel(ch) => *ch,
            Signal::Ready(_) => std::ptr::null_mut(),
        };
        let cqe = i32::try_from(want).unwrap_or(i32::MAX);
        // SAFETY: live context; `ch` is a live channel or NULL.
        let raw = unsafe { ibv_create_cq(ctx.raw, cqe, std::ptr::null_mut(), ch, 0) };
        if raw.is_null() {
            let e = os_error(&format!("ibv_create_cq({want} entries) on {}", ctx.name));
            if !ch.is_null() {
                // SAFETY: no CQ uses the channel.
                unsafe { ibv_destroy_comp_channel(ch) };
            }
            return Err(e);
        }
        // SAFETY: a created CQ reports the entries it really has.
        let granted = u32::try_from(unsafe { (*raw).cqe }).unwrap_or(want);
        let cq = Arc::new(RdmaCq {
            raw,
            signal,
            dev: Arc::clone(dev),
            capacity: Mutex::new(Capacity {
                cqe: granted,
                reserved: 0,
            }),
            stash: Mutex::new(VecDeque::new()),
            stashed: AtomicUsize::new(0),
        });
        CQS.insert(&cq);
        Ok(cq)
    }

    /// The verbs context the CQ belongs to.
    pub(super) fn ctx_raw(&self) -> *mut rdma_sys::ibv_context {
        self.dev.ctx.raw
    }

    /// Reserves room for `n` more completions (a new QP's work requests), growing the
    /// CQ when needed. Fails when the device cannot hold them.
    pub(super) fn reserve(&self, n: u32) -> Result<(), VerbsError> {
        let mut cap = self.capacity.lock();
        let need = cap
            .reserved
            .checked_add(n)
            .ok_or(VerbsError::QueueFull("completion queue"))?;
        if need > cap.cqe {
            let max = self.dev.ctx.limits.max_cqe;
            let target = need.max(cap.cqe.saturating_mul(2)).min(max);
            if target < need {
                return Err(VerbsError::QueueFull(
                    "completion queue at the device's limit: too many queues on this poll group",
                ));
            }
            let cqe = i32::try_from(target).unwrap_or(i32::MAX);
            // SAFETY: the CQ is live; providers serialise resizing with polling.
            let rc = unsafe { ibv_resize_cq(self.raw, cqe) };
            if rc != 0 {
                tracing::warn!(
                    device = %self.dev.ctx.name, from = cap.cqe, to = target,
                    "ibv_resize_cq failed: {}", std::io::Error::from_raw_os_error(rc)
                );
                return Err(VerbsError::QueueFull("completion queue (resize failed)"));
            }
            // SAFETY: as above; the CQ reports its new size.
            cap.cqe = u32::try_from(unsafe { (*self.raw).cqe }).unwrap_or(target);
            if need > cap.cqe {
                return Err(VerbsError::QueueFull("completion queue"));
            }
        }
        cap.reserved = need;
        Ok(())
    }

    /// Gives back what [`RdmaCq::reserve`] took.
    pub(super) fn release(&self, n: u32) {
        let mut cap = self.capacity.lock();
        cap.reserved = cap.reserved.saturating_sub(n);
    }

    /// Polls the device directly (no stash).
    fn poll_device(&self, out: &mut [WorkCompletion]) -> usize {
        let mut done = 0;
        let mut raw: [MaybeUninit<ibv_wc>; POLL_CHUNK] =
            [const { MaybeUninit::uninit() }; POLL_CHUNK];
        while done < out.len() {
            let want = (out.len() - done).min(POLL_CHUNK);
            // SAFETY: the CQ is live and `raw` has room for `want` entries.
            let n =
                unsafe { ibv_poll_cq(self.raw, want as i32, raw.as_mut_ptr().cast::<ibv_wc>()) };
            if n <= 0 {
                if n < 0 {
                    tracing::warn!(device = %self.dev.ctx.name, "ibv_poll_cq failed: {n}");
                }
                break;
            }
            let n = usize::try_from(n).unwrap_or(0).min(want);
            for (slot, wc) in out[done..done + n].iter_mut().zip(raw.iter()) {
                // SAFETY: ibv_poll_cq initialised the first `n` entries.
                let wc = unsafe { wc.assume_init_ref() };
                *slot = convert_wc(wc);
            }
            done += n;
            if n < want {
                break;
            }
        }
        done
    }
}

/// The interface's completion for a device one.
fn convert_wc(wc: &ibv_wc) -> WorkCompletion {
    let invalidated = (wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_INV.0) != 0;
    WorkCompletion {
        wr_id: wc.wr_id,
        status: wc_status(wc.status),
        opcode: wc_opcode(wc.opcode),
        byte_len: wc.byte_len,
        invalidated_rkey: if invalidated {
            // SAFETY: with IBV_WC_WITH_INV the union holds the invalidated rkey.
            Some(unsafe { wc.imm_data_invalidated_rkey_union.invalidated_rkey })
        } else {
            None
        },
        qp_num: wc.qp_num,
    }
}

impl Drop for RdmaCq {
    fn drop(&mut self) {
        CQS.remove(self);
        // SAFETY: QPs using this CQ hold an `Arc` to it, so none is left; channel
        // events were acknowledged in `ack_events`.
        let rc = unsafe { ibv_destroy_cq(self.raw) };
        if rc != 0 {
            tracing::warn!(device = %self.dev.ctx.name, "ibv_destroy_cq failed: {rc}");
        }
        if let Signal::Channel(ch) = self.signal {
            // SAFETY: its only CQ is gone.
            unsafe { ibv_destroy_comp_channel(ch) };
        }
    }
}

impl CompletionQueue for RdmaCq {
    fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        let mut done = 0;
        if self.stashed.load(Ordering::Acquire) > 0 {
            let mut stash = self.stash.lock();
            while done < out.len() {
                let Some(wc) = stash.pop_front() else { break };
                out[done] = wc;
                done += 1;
            }
            self.stashed.store(stash.len(), Ordering::Release);
        }
        if done < out.len() {
            done += self.poll_device(&mut out[done..]);
        }
        done
    }

    fn req_notify(&self) {
        if let Signal::Channel(_) = self.signal {
            // SAFETY: the CQ is live. Failure only means no event; callers poll anyway.
            unsafe { ibv_req_notify_cq(self.raw, 0) };
        }
    }

    fn wait(&self, timeout: Duration) {
        if self.stashed.load(Ordering::Acquire) > 0 {
            return;
        }
        let Signal::Channel(ch) = self.signal else {
            std::thread::yield_now();
            return;
        };
        self.req_notify();
        let mut early = [WorkCompletion::EMPTY; POLL_CHUNK];
        let n = self.poll_device(&mut early);
        if n > 0 {
            let mut stash = self.stash.lock();
            stash.extend(early.iter().take(n).copied());
            self.stashed.store(stash.len(), Ordering::Release);
            return;
        }
        let ms = i32::try_from(timeout.as_millis().max(1)).unwrap_or(i32::MAX);
        let mut pfd = libc::pollfd {
            // SAFETY: the channel is live while the CQ is.
            fd: unsafe { (*ch).fd },
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd that outlives the call.
        unsafe { libc::poll(&mut pfd, 1, ms) };
        self.ack_events();
    }

    fn event_fd(&self) -> RawFd {
        match &self.signal {
            // SAFETY: the channel is live while the CQ is.
            Signal::Channel(ch) => unsafe { (**ch).fd },
            Signal::Ready(efd) => efd.as_raw_fd(),
        }
    }

    fn ack_events(&self) {
        let Signal::Channel(ch) = self.signal else {
            return;
        };
        let mut n = 0u32;
        loop {
            let mut cq: *mut ibv_cq = std::ptr::null_mut();
            let mut ctx: *mut libc::c_void = std::ptr::null_mut();
            // SAFETY: the channel is live and non-blocking; out-params are valid.
            if unsafe { ibv_get_cq_event(ch, &mut cq, &mut ctx) } != 0 {
                break;
            }
            n += 1;
        }
        if n > 0 {
            // SAFETY: acknowledges exactly the events read above, all for this CQ
            // (the channel serves only it).
            unsafe { ibv_ack_cq_events(self.raw, n) };
        }
    }
}
