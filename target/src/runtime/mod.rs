//! The target transport runtime: one generic poll group that every fabric shares, and
//! the small interface ([`Transport`]) that NVMe/TCP and NVMe/RDMA implement.
//!
//! The split follows Linux `nvmet_fabrics_ops` and FreeBSD's `nvmf_transport`: a
//! transport knows how bytes move (sockets and PDUs; queue pairs and work requests);
//! everything else is here, written once:
//!
//! - [`group`]: the poll-group thread: hand-over mailbox and eventfd, the poll /
//!   interrupt / adaptive idle policy around one epoll set, timers (keep-alive, dead
//!   controllers, the transport's own), backend reaping, the shutdown drain.
//! - [`request`]: one request life cycle with named states ([`ReqState`], SPDK's
//!   `spdk_nvmf_*_req_state` vocabulary): capsule → SGL decode ([`sgl`]) → parse →
//!   buffer (waiting in arrival order when the pool is empty) → host data → execute →
//!   held (AER) or backend I/O → response → slot recycled. Connect installs the queue
//!   (qid, size, SQ flow control) here, not in a transport.
//! - [`queue`]: the queues and command slots all of these work on, and the step that
//!   moves a slot to a new state.
//! - [`watch`]: where each outstanding command is and since when; stuck commands
//!   (older than `transport.stuck_command_ms`) logged once, listed and counted.
//! - [`pool`]: the data buffer arena (a buddy allocator), [`stats`]: one set of
//!   counters for every transport, [`mailbox`]: how listeners hand queues to a group, [`ports`]: one
//!   port API ([`PortServer`], [`PortError`]) that every fabric's server implements.
//!
//! Ownership: a poll group thread owns its [`Runtime`] (queues, slots, buffers,
//! backend channels) and its transport state; nothing on the data path is shared or
//! locked. A transport method gets `&mut self` and the runtime, and calls back into the
//! runtime (capsule arrived, data arrived, response sent, queue failed) as events occur;
//! the runtime calls the transport to move data ([`Transport::fetch_data`],
//! [`Transport::send_response`]) and to post what a pass queued ([`Transport::flush`]).
//!
//! Ordering within one loop pass: hand-overs, receive (transport), backend
//! completions, held AERs, buffer waiters, timers, then backend submission and the
//! transport's flush, so all work a pass produced leaves with one system call or
//! doorbell per queue.

mod fused;
pub mod group;
pub mod groups;
pub mod mailbox;
pub mod pool;
pub mod ports;
pub mod queue;
pub mod request;
pub mod sgl;
pub mod stats;
mod throttle;
pub mod watch;

use std::time::Instant;

use nix::sys::epoll::EpollFlags;

pub use group::{spawn, Runtime};
pub use groups::PollGroups;
pub use mailbox::GroupHandle;
pub use pool::{BufferPool, PoolBuf};
pub use ports::{PortError, PortServer};
pub use queue::{FuseLink, InCapsule, Queue, ReqState, Slot};
pub use sgl::{HostData, SglCarrier};
pub use stats::{GroupCounters, GroupStats};

/// What a fabric implements for the generic poll group. `qi` names a queue of the
/// runtime, `si` a slot (one command) of that queue.
pub trait Transport: Sized + Send + 'static {
    /// Per-queue transport state (socket and framer; queue pair and receive buffers).
    type Queue: Send;
    /// Per-command transport state (R2T windows); `Default` is its idle value.
    type Slot: Default + Send;
    /// What a listener hands to a poll group.
    type NewQueue: Send + 'static;
    /// Extra state a listener needs from a group's handle (the group's CQ on RDMA).
    type Shared: Clone + Send + Sync + 'static;

    /// For logs and thread names: "NVMe/TCP", "NVMe/RDMA".
    const NAME: &'static str;
    /// Which SGL data descriptors carry host data on this fabric.
    const SGL: SglCarrier;
    /// Whether a data transfer or response still in flight when the queue closes
    /// completes later (RDMA work requests are flushed with an error completion):
    /// such slots are kept until [`Runtime::settle`]. When false (TCP: nothing more
    /// arrives once the socket is closed) they are released at close.
    const TRANSFERS_SETTLE_AFTER_CLOSE: bool;
    /// Whether receiving depends on epoll readiness when the group is not spinning
    /// (sockets), so the group asks epoll even in a pass that found work.
    const RECEIVE_BY_EVENTS: bool;

    /// The registered buffer [`InCapsule::Registered`] offsets point into (the queue's
    /// receive buffer), for fabrics that receive capsules in place.
    fn in_capsule_buffer(_q: &Self::Queue) -> Option<&std::sync::Arc<nvmf_verbs::DmaBuffer>> {
        None
    }
    /// The state shared with the listener through the handle.
    fn shared(&self) -> Self::Shared;
    /// Takes a handed-over queue: registers what it waits on and adds it with
    /// [`Runtime::add_queue`].
    fn add_queue(&mut self, rt: &mut Runtime<Self>, new: Self::NewQueue);
    /// One non-blocking receive pass (sockets, completion queue); `spin` when the group
    /// busy-polls. Returns the work found.
    fn poll(&mut self, rt: &mut Runtime<Self>, spin: bool) -> usize;
    /// Before blocking: arm notifications (RDMA: request a CQ event, then poll once
    /// more so a completion that raced with arming is not lost). Returns work found.
    fn arm(&mut self, _rt: &mut Runtime<Self>) -> usize {
        0
    }
    /// An epoll event on a descriptor the transport registered with `token`.
    fn on_event(&mut self, rt: &mut Runtime<Self>, token: u64, events: EpollFlags) -> usize;
    /// The Connect of queue `qi` succeeded: size per-queue resources for it (its slots
    /// already number `sqsize + 1`).
    fn queue_connected(&mut self, _rt: &mut Runtime<Self>, _qi: u16) {}
    /// Moves the host-to-controller data of slot `si` into its buffer (R2T/H2CData,
    /// RDMA READ); calls [`Runtime::data_ready`] when it is there.
    fn fetch_data(&mut self, rt: &mut Runtime<Self>, qi: u16, si: u16);
    /// Queues the controller-to-host data (if any) and the response of a finished
    /// command (its CQE from [`Runtime::fill_cqe`]); calls [`Runtime::sent`] once the
    /// slot may be reused.
    fn send_response(&mut self, rt: &mut Runtime<Self>, qi: u16, si: u16);
    /// Slot `si` of live queue `qi` is free again (TCP: free list; RDMA: repost).
    fn recycle(&mut self, rt: &mut Runtime<Self>, qi: u16, si: u16);
    /// Posts or writes what this pass queued (one doorbell or `writev` per queue).
    fn flush(&mut self, rt: &mut Runtime<Self>);
    /// Periodic checks of the transport (stalled peers, dead QPs, lingering sockets).
    fn timers(&mut self, rt: &mut Runtime<Self>, now: Instant);
    /// Ends the transport side of queue `qi` (last write, close or disconnect); the
    /// runtime then tears the queue down. `linger`: let the peer read what was sent.
    fn close(&mut self, rt: &mut Runtime<Self>, qi: u16, why: &str, linger: bool);
    /// Queue `q` is gone for good (its index may be reused).
    fn freed(&mut self, _q: &Queue<Self>) {}
    /// Where a command's host-to-controller transfer stands (for a stuck command's
    /// report: outstanding R2T windows, RDMA READs posted).
    fn describe_transfer(_s: &Self::Slot) -> String {
        "transfer in progress".to_string()
    }
    /// The group stops: release what is left (sockets kept to linger).
    fn shutdown(&mut self, _rt: &mut Runtime<Self>) {}
}

/// Backend tag = queue generation (16 bits) | queue index (16) | slot (16).
#[inline]
pub(crate) fn tag(gen: u16, qi: u16, si: u16) -> u64 {
    (u64::from(gen) << 32) | (u64::from(qi) << 16) | u64::from(si)
}

#[inline]
pub(crate) fn tag_parts(t: u64) -> (u16, u16, u16) {
    ((t >> 32) as u16, (t >> 16) as u16, t as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_roundtrip() {
        assert_eq!(tag_parts(tag(0xBEEF, 513, 4095)), (0xBEEF, 513, 4095));
    }
}
