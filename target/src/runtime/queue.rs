//! A poll group's queues and their command slots: what the request life cycle
//! ([`super::request`]), fused commands ([`super::fused`]), the QoS throttle
//! ([`super::throttle`]) and the command watch ([`super::watch`]) work on.
//!
//! Data only, plus the one step they all take (moving a slot to a new state,
//! [`enter`]): each of those files adds its part of the poll group's behaviour to
//! [`super::Runtime`], and imports the types from here rather than from each other.
//! The poll group owns its queues and slots; nothing here is shared between threads.

use std::sync::Arc;

use nvmf_verbs::DmaBuffer;

use super::sgl::HostData;
use super::stats::StateTimes;
use super::{PoolBuf, Transport};
use crate::core::{QueueCtx, Request};
use crate::metrics::cell::IoCell;

/// Where a command is in its life cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReqState {
    /// Ready for a new command.
    Free,
    /// A capsule arrived; being decoded and parsed.
    New,
    /// Waiting for a data buffer from the pool.
    NeedBuffer,
    /// Host data on its way (R2T/H2CData, RDMA READ).
    TransferringHostToController,
    /// Running; backend I/O in flight.
    Executing,
    /// An Asynchronous Event Request waiting for an event.
    Held,
    /// Waiting for its namespace's QoS budget, or behind a command of its queue that
    /// does ([`super::throttle`]).
    Throttled,
    /// Data and response handed to the transport; waiting for it to finish.
    TransferringControllerToHost,
}

/// One command slot: the transport-neutral request and the transport's part.
pub struct Slot<S> {
    pub state: ReqState,
    pub req: Request,
    /// Where the host's data is, per SGL1.
    pub host: HostData,
    /// The pool buffer holding the command's data.
    pub buf: Option<PoolBuf>,
    /// When the capsule arrived (the pass's clock, [`super::stats::mono_ns`]): the start
    /// of its latency.
    pub start: u64,
    /// When it entered its current state (same clock; [`super::watch`]).
    pub since: u64,
    /// Reported as stuck already (once per command).
    pub reported: bool,
    /// Counted as held by its namespace's QoS state ([`super::throttle`]).
    pub qos_held: bool,
    /// Its part in a fused Compare and Write ([`super::fused`], [`FuseLink`]).
    pub fuse: FuseLink,
    /// The range lock it holds or waits for ([`crate::locks`]).
    pub lock: Option<crate::locks::LockId>,
    pub t: S,
}

impl<S: Default> Slot<S> {
    pub(super) fn new() -> Self {
        Slot {
            state: ReqState::Free,
            req: Request::new(),
            host: HostData::None,
            buf: None,
            start: 0,
            since: 0,
            reported: false,
            qos_held: false,
            fuse: FuseLink::None,
            lock: None,
            t: S::default(),
        }
    }
}

/// One queue of a poll group.
pub struct Queue<T: Transport> {
    pub gen: u16,
    pub ctx: QueueCtx,
    pub slots: Vec<Slot<T::Slot>>,
    /// The Connect succeeded and the queue was installed.
    pub connected: bool,
    pub dead: bool,
    /// In-capsule data copied out of the transport's receive buffer (NVMe/TCP),
    /// `icd_slot` bytes per slot, allocated on first use.
    pub(super) icd: Option<Arc<DmaBuffer>>,
    /// Metrics cells of this queue's controller, per namespace instance (0: commands
    /// without a namespace); found once, then used without a lock.
    pub(super) cells: Vec<(u64, Arc<IoCell>)>,
    /// Commands held for QoS, in arrival order: once one waits, every later command
    /// of the queue waits behind it (never reordered).
    pub(super) held: std::collections::VecDeque<u16>,
    /// `held` may hold commands of more than one namespace (false: one at most, so
    /// when its first cannot go, none can).
    pub(super) held_mixed: bool,
    /// A fused first half waiting for its second ([`super::fused`], [`FuseLink`]).
    pub(super) open_fused: OpenFused,
    pub t: T::Queue,
}

impl<T: Transport> Queue<T> {
    pub(super) fn in_flight(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| match s.state {
                ReqState::Executing => true,
                ReqState::TransferringHostToController | ReqState::TransferringControllerToHost => {
                    T::TRANSFERS_SETTLE_AFTER_CLOSE
                }
                _ => false,
            })
            .count()
    }
}

/// In-capsule data as the transport received it.
pub enum InCapsule<'a> {
    /// Bytes in a receive buffer the transport reuses: copied into the queue's
    /// in-capsule buffer.
    Bytes(&'a [u8]),
    /// In the queue's registered receive buffer ([`Transport::in_capsule_buffer`]),
    /// which stays put until the slot is recycled: used in place. The buffer is named,
    /// not cloned, so a command without in-capsule data touches no reference count the
    /// fabric's receive path reads.
    Registered { offset: usize, len: usize },
}

impl InCapsule<'_> {
    pub(super) fn len(&self) -> usize {
        match self {
            InCapsule::Bytes(b) => b.len(),
            InCapsule::Registered { len, .. } => *len,
        }
    }
}

/// Queue `qi` of `queues` (a field-level borrow, so the runtime's other fields stay
/// usable beside it).
pub(super) fn queue_at<T: Transport>(
    queues: &mut [Option<Queue<T>>],
    qi: u16,
) -> Option<&mut Queue<T>> {
    queues.get_mut(usize::from(qi)).and_then(Option::as_mut)
}

/// A slot's part in a fused operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FuseLink {
    #[default]
    None,
    /// The Compare: its Write's slot once that arrived; `compared` once it matched;
    /// `atomic` when the backend runs the pair as one operation (the Write is then
    /// done when the Compare is).
    First {
        second: Option<u16>,
        compared: bool,
        atomic: bool,
    },
    /// The Write: its Compare's slot.
    Second { first: u16 },
    /// Its other half failed or never came: it completes with the status it was given
    /// as soon as it may (at once if it was waiting).
    Orphan,
}

/// Whether the previous command of a queue opened a fused operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum OpenFused {
    #[default]
    None,
    /// A first half, waiting for its second in the next entry.
    Waiting(u16),
    /// A first half that was refused: the second half is aborted with it.
    Failed,
}

/// The index in [`STATE_NAMES`] of a measured state.
#[inline]
pub(super) fn watched_index(s: ReqState) -> Option<usize> {
    match s {
        ReqState::NeedBuffer => Some(0),
        ReqState::TransferringHostToController => Some(1),
        ReqState::Executing => Some(2),
        ReqState::TransferringControllerToHost => Some(3),
        ReqState::Free | ReqState::New | ReqState::Held | ReqState::Throttled => None,
    }
}

/// Moves `slot` to `state` at `now` (ns), charging the time in the state it leaves.
#[inline]
pub fn enter<S>(slot: &mut Slot<S>, state: ReqState, now: u64, times: &StateTimes) {
    // States that are not measured are not recorded.
    if let Some(i) = watched_index(slot.state) {
        times.record(i, now.saturating_sub(slot.since));
    }
    slot.state = state;
    slot.since = now;
}
