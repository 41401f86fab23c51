//! rdma_cm event channels and identifiers.
//!
//! Every event is copied into an owned [`CmEvent`] and acknowledged at once, before
//! the caller looks at it: librdmacm's `rdma_destroy_id` and `rdma_migrate_id` wait
//! until every event reported for an id was acknowledged, so an event held across a
//! call could deadlock the thread that holds it. Channel descriptors are non-blocking;
//! waiting is a `poll(2)` with a deadline.

use std::ffi::CStr;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::Arc;
use std::time::Instant;

use rdma_sys::{
    rdma_ack_cm_event, rdma_cm_event, rdma_cm_event_type, rdma_cm_id, rdma_create_event_channel,
    rdma_create_id, rdma_destroy_event_channel, rdma_destroy_id, rdma_event_channel,
    rdma_get_cm_event, rdma_migrate_id, rdma_port_space,
};

use super::convert::event_name;
use crate::VerbsError;

/// The text of the current `errno`.
pub(super) fn errno_text() -> String {
    std::io::Error::last_os_error().to_string()
}

/// The current `errno` value.
pub(super) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The error for a failed librdmacm/libibverbs call `what`.
pub(super) fn os_error(what: &str) -> VerbsError {
    VerbsError::Provider(format!("{what}: {}", errno_text()))
}

/// An rdma_cm event channel (one file descriptor).
pub(super) struct EventChannel {
    raw: *mut rdma_event_channel,
}

// SAFETY: an event channel is a file descriptor wrapper; librdmacm allows its use from
// any thread, and `rdma_get_cm_event` on one channel is serialised by the kernel.
unsafe impl Send for EventChannel {}
// SAFETY: see `Send`; the struct itself is never mutated after creation.
unsafe impl Sync for EventChannel {}

/// Explains a failure to open the rdma_cm device, the first thing that fails on a
/// machine without RDMA.
fn no_device_hint(err: &str) -> VerbsError {
    VerbsError::NoDevice(format!(
        "cannot open the rdma_cm device /dev/infiniband/rdma_cm ({err}); this machine has no \
         usable RDMA stack: load the NIC's RDMA driver and rdma_ucm, or soft-RoCE with \
         `modprobe rdma_rxe rdma_ucm && rdma link add rxe0 type rxe netdev eth0`"
    ))
}

impl EventChannel {
    pub(super) fn new() -> Result<Arc<EventChannel>, VerbsError> {
        // SAFETY: no arguments; returns NULL with errno set on failure.
        let raw = unsafe { rdma_create_event_channel() };
        if raw.is_null() {
            return Err(no_device_hint(&errno_text()));
        }
        let ch = EventChannel { raw };
        let fd = ch.fd();
        // SAFETY: fcntl on the channel's own open descriptor.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above; only adds O_NONBLOCK.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(os_error("fcntl(O_NONBLOCK) on the rdma_cm channel"));
        }
        Ok(Arc::new(ch))
    }

    pub(super) fn fd(&self) -> RawFd {
        // SAFETY: `raw` is a live channel until drop.
        unsafe { (*self.raw).fd }
    }

    /// The next event, waiting until `deadline` (`None`: do not wait). `Ok(None)` when
    /// none came in time.
    pub(super) fn next(&self, deadline: Option<Instant>) -> Result<Option<CmEvent>, VerbsError> {
        loop {
            let mut ev: *mut rdma_cm_event = ptr::null_mut();
            // SAFETY: `raw` is live; `ev` receives an event we acknowledge below.
            let rc = unsafe { rdma_get_cm_event(self.raw, &mut ev) };
            if rc == 0 && !ev.is_null() {
                // SAFETY: librdmacm returned a valid event; it stays valid until acked.
                let owned = unsafe { CmEvent::copy(&*ev) };
                // SAFETY: `ev` came from rdma_get_cm_event and is acknowledged once.
                unsafe { rdma_ack_cm_event(ev) };
                return Ok(Some(owned));
            }
            let e = errno();
            if e != libc::EAGAIN && e != libc::EWOULDBLOCK && e != libc::EINTR {
                return Err(os_error("rdma_get_cm_event"));
            }
            let Some(deadline) = deadline else {
                return Ok(None);
            };
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let ms = deadline.duration_since(now).as_millis().max(1);
            let ms = i32::try_from(ms).unwrap_or(i32::MAX);
            let mut pfd = libc::pollfd {
                fd: self.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd that outlives the call.
            unsafe { libc::poll(&mut pfd, 1, ms) };
        }
    }

    /// Waits until `deadline` for an event of `id`. Events of other ids on the same
    /// channel are logged and dropped (the channels this is used on serve one id).
    pub(super) fn wait_for(
        &self,
        id: *mut rdma_cm_id,
        deadline: Instant,
        what: &str,
    ) -> Result<CmEvent, VerbsError> {
        loop {
            match self.next(Some(deadline))? {
                Some(ev) if ev.id == id => return Ok(ev),
                Some(ev) => {
                    tracing::debug!(
                        event = ev.name(),
                        "rdma_cm event for another id while {what}"
                    );
                }
                None => return Err(VerbsError::Timeout),
            }
        }
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: every id on this channel holds an `Arc` to it, so none is left; all
        // events were acknowledged when read.
        unsafe { rdma_destroy_event_channel(self.raw) };
    }
}

/// An event copied out of librdmacm's buffer.
pub(super) struct CmEvent {
    pub(super) kind: rdma_cm_event_type::Type,
    pub(super) status: i32,
    /// The id the event is about (for CONNECT_REQUEST: the new id of the request).
    pub(super) id: *mut rdma_cm_id,
    pub(super) private_data: Vec<u8>,
    pub(super) initiator_depth: u8,
    pub(super) responder_resources: u8,
}

impl CmEvent {
    /// # Safety
    /// `ev` must be a live, not yet acknowledged event.
    unsafe fn copy(ev: &rdma_cm_event) -> CmEvent {
        // SAFETY: for connection events `param.conn` is the active union member; for
        // the others librdmacm zeroes it, so the pointer is NULL and the length 0.
        let conn = unsafe { &ev.param.conn };
        let private_data = if conn.private_data.is_null() || conn.private_data_len == 0 {
            Vec::new()
        } else {
            // SAFETY: librdmacm guarantees `private_data_len` readable bytes while the
            // event is unacknowledged.
            unsafe {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
            }
            .to_vec()
        };
        CmEvent {
            kind: ev.event,
            status: ev.status,
            id: ev.id,
            private_data,
            initiator_depth: conn.initiator_depth,
            responder_resources: conn.responder_resources,
        }
    }

    pub(super) fn name(&self) -> &'static str {
        event_name(self.kind)
    }

    /// An error naming an event that came instead of `expected`.
    pub(super) fn unexpected(&self, expected: &str) -> VerbsError {
        VerbsError::Provider(format!(
            "rdma_cm: expected {expected}, got {} (status {})",
            self.name(),
            self.status
        ))
    }
}

/// An rdma_cm identifier and the channel its events arrive on.
pub(super) struct CmId {
    pub(super) raw: *mut rdma_cm_id,
    channel: Arc<EventChannel>,
}

// SAFETY: librdmacm ids may be used from any thread; every `CmId` has one owner, and
// the QP that shares one serialises its own calls.
unsafe impl Send for CmId {}
// SAFETY: shared access only reads fields or makes thread-safe librdmacm calls.
unsafe impl Sync for CmId {}

impl CmId {
    /// A new RC (`RDMA_PS_TCP`) id on `channel`.
    pub(super) fn new(channel: Arc<EventChannel>) -> Result<CmId, VerbsError> {
        let mut raw: *mut rdma_cm_id = ptr::null_mut();
        // SAFETY: the channel is live; `raw` receives the new id.
        let rc = unsafe {
            rdma_create_id(
                channel.raw,
                &mut raw,
                ptr::null_mut(),
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 || raw.is_null() {
            return Err(os_error("rdma_create_id"));
        }
        Ok(CmId { raw, channel })
    }

    /// Takes ownership of an id librdmacm created on `channel` (a connect request).
    pub(super) fn adopt(raw: *mut rdma_cm_id, channel: Arc<EventChannel>) -> CmId {
        CmId { raw, channel }
    }

    pub(super) fn channel(&self) -> &Arc<EventChannel> {
        &self.channel
    }

    /// Moves the id's events to `channel`.
    pub(super) fn migrate(&mut self, channel: Arc<EventChannel>) -> Result<(), VerbsError> {
        // SAFETY: both the id and the new channel are live; all events of the old
        // channel were acknowledged, so this does not block.
        if unsafe { rdma_migrate_id(self.raw, channel.raw) } != 0 {
            return Err(os_error("rdma_migrate_id"));
        }
        self.channel = channel;
        Ok(())
    }

    /// The verbs context the id is bound to (NULL before binding or when wildcard).
    pub(super) fn verbs(&self) -> *mut rdma_sys::ibv_context {
        // SAFETY: `raw` is live until drop.
        unsafe { (*self.raw).verbs }
    }

    /// Name of the device the id is bound to, if any.
    pub(super) fn device_name(&self) -> Option<String> {
        let ctx = self.verbs();
        if ctx.is_null() {
            return None;
        }
        // SAFETY: a bound id's context and its device stay valid while librdmacm runs.
        let name = unsafe { rdma_sys::ibv_get_device_name((*ctx).device) };
        if name.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated string owned by libibverbs.
        Some(
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned(),
        )
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: the id is live and owned; its QP (if any) was destroyed by the owner
        // before, and all its events were acknowledged.
        unsafe { rdma_destroy_id(self.raw) };
    }
}
