//! Connection management on rdma_cm: listening, accepting and rejecting with private
//! data (passive side), and connecting (active side).
//!
//! - **Listener**: one event channel per listening id. `next_request` waits on it;
//!   a CONNECT_REQUEST becomes an [`RdmaConnectRequest`] carrying a copy of the
//!   request's private data (the NVMe/RDMA CM request) and RDMA READ depths.
//! - **Accept** moves the new id to a channel of its own (`rdma_migrate_id`), creates
//!   the QP, runs `pre_post` (receives are posted before the peer can send), then
//!   `rdma_accept`s with our private data and READ depths capped by the device.
//!   Anything failing on the way rejects the request; nothing is left behind.
//! - **Reject** sends the caller's private data (the NVMe/RDMA reject) in the CM REJ.
//!   A request dropped unanswered is rejected without private data.
//! - **Connect**: resolve address, resolve route, create the QP, `pre_post`, then
//!   `rdma_connect` and wait for ESTABLISHED (the accept's private data), REJECTED
//!   (the reject's private data), UNREACHABLE or the timeout.
//!
//! iWARP: the active side (the host) sends first, which NVMe/RDMA does anyway (the
//! Fabrics Connect command); READ depths are negotiated the same way on every fabric.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::{
    rdma_accept, rdma_bind_addr, rdma_cm_event_type, rdma_conn_param, rdma_connect, rdma_listen,
    rdma_reject, rdma_resolve_addr, rdma_resolve_route,
};
use tracing::{debug, warn};

use super::convert::{
    accept_depths, check_private_data, parse_addr, reject_error, sockaddr, timeout_ms,
    MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA,
};
use super::device::DevShared;
use super::event::{errno, os_error, CmEvent, CmId, EventChannel};
use super::qp::RdmaQp;
use crate::{ConnectRequest, Listener, QpInit, QueuePair, VerbsError};

/// Pending connection requests the kernel queues per listener.
const LISTEN_BACKLOG: i32 = 128;
/// Retries of a lost packet and of a receiver-not-ready NAK: 7 = the maximum
/// (for RNR, "retry forever"), as Linux NVMe/RDMA uses.
const RETRY_COUNT: u8 = 7;
const RNR_RETRY_COUNT: u8 = 7;

/// Connection parameters carrying `private_data` (which must outlive their use).
fn conn_param(
    private_data: &[u8],
    len: u8,
    initiator_depth: u8,
    responder_resources: u8,
) -> rdma_conn_param {
    rdma_conn_param {
        private_data: if private_data.is_empty() {
            std::ptr::null()
        } else {
            private_data.as_ptr().cast()
        },
        private_data_len: len,
        responder_resources,
        initiator_depth,
        flow_control: 1,
        retry_count: RETRY_COUNT,
        rnr_retry_count: RNR_RETRY_COUNT,
        srq: 0,
        qp_num: 0,
    }
}

/// Sends a CM REJ on `id` with up to [`MAX_REJECT_PRIVATE_DATA`] bytes of `data`.
fn reject_id(id: &CmId, data: &[u8]) {
    let data = data
        .get(..data.len().min(MAX_REJECT_PRIVATE_DATA))
        .unwrap_or(&[]);
    let len = u8::try_from(data.len()).unwrap_or(0);
    let ptr = if data.is_empty() {
        std::ptr::null()
    } else {
        data.as_ptr().cast()
    };
    // SAFETY: the id is a live, unanswered connect request; `data` outlives the call.
    if unsafe { rdma_reject(id.raw, ptr, len) } != 0 {
        debug!("rdma_reject: {}", super::event::errno_text());
    }
}

pub(super) struct RdmaListener {
    id: CmId,
    dev: Arc<DevShared>,
    addr: String,
}

pub(super) fn listen(dev: &Arc<DevShared>, addr: &str) -> Result<Arc<dyn Listener>, VerbsError> {
    let sa = parse_addr(addr)?;
    let id = CmId::new(EventChannel::new()?)?;
    let mut ss = sockaddr(&sa);
    // SAFETY: the id is live; `ss` is a valid sockaddr of its family.
    if unsafe { rdma_bind_addr(id.raw, (&raw mut ss).cast()) } != 0 {
        return Err(match errno() {
            libc::EADDRINUSE => VerbsError::AddrInUse(addr.to_string()),
            _ => VerbsError::NoDevice(format!(
                "cannot listen on {addr}: {} (is it an address of an RDMA device?)",
                super::event::errno_text()
            )),
        });
    }
    let bound = id.verbs();
    if !bound.is_null() && bound != dev.ctx.raw {
        return Err(VerbsError::NoDevice(format!(
            "{addr} belongs to RDMA device {}, not {}",
            id.device_name().unwrap_or_default(),
            dev.ctx.name
        )));
    }
    // SAFETY: the id is bound.
    if unsafe { rdma_listen(id.raw, LISTEN_BACKLOG) } != 0 {
        return Err(match errno() {
            libc::EADDRINUSE => VerbsError::AddrInUse(addr.to_string()),
            _ => os_error(&format!("rdma_listen({addr})")),
        });
    }
    Ok(Arc::new(RdmaListener {
        id,
        dev: Arc::clone(dev),
        addr: addr.to_string(),
    }))
}

impl Listener for RdmaListener {
    fn next_request(&self, timeout: Duration) -> Option<Box<dyn ConnectRequest>> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let ev = match self.id.channel().next(deadline) {
                Ok(Some(ev)) => ev,
                Ok(None) => return None,
                Err(e) => {
                    warn!(addr = %self.addr, "listener: {e}");
                    std::thread::sleep(timeout);
                    return None;
                }
            };
            if ev.kind != rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST {
                if ev.id == self.id.raw {
                    warn!(addr = %self.addr, event = ev.name(), status = ev.status, "listener event");
                } else {
                    debug!(addr = %self.addr, event = ev.name(), status = ev.status, "event of a pending request");
                }
                continue;
            }
            if let Some(req) = self.request(ev) {
                return Some(req);
            }
        }
    }

    fn local_addr(&self) -> String {
        self.addr.clone()
    }
}

impl RdmaListener {
    /// Wraps a CONNECT_REQUEST; a request on a device this listener does not serve
    /// (possible with wildcard addresses) is rejected here.
    fn request(&self, ev: CmEvent) -> Option<Box<dyn ConnectRequest>> {
        let id = CmId::adopt(ev.id, Arc::clone(self.id.channel()));
        if id.verbs() != self.dev.ctx.raw {
            warn!(
                addr = %self.addr, device = id.device_name().unwrap_or_default(),
                serving = %self.dev.ctx.name, "rejecting a connection on another RDMA device"
            );
            reject_id(&id, &[]);
            return None;
        }
        Some(Box::new(RdmaConnectRequest {
            id: Some(id),
            dev: Arc::clone(&self.dev),
            private_data: ev.private_data,
            initiator_depth: ev.initiator_depth,
            responder_resources: ev.responder_resources,
        }))
    }
}

pub(super) struct RdmaConnectRequest {
    /// `None` once answered.
    id: Option<CmId>,
    dev: Arc<DevShared>,
    private_data: Vec<u8>,
    /// READs we may issue / the peer may issue, as the request offered.
    initiator_depth: u8,
    responder_resources: u8,
}

impl ConnectRequest for RdmaConnectRequest {
    fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    fn initiator_depth(&self) -> Option<u8> {
        Some(self.initiator_depth)
    }

    fn accept(
        mut self: Box<Self>,
        init: QpInit,
        private_data: &[u8],
        reject_data: &[u8],
        pre_post: &mut dyn FnMut(&dyn QueuePair) -> Result<(), VerbsError>,
    ) -> Result<Arc<dyn QueuePair>, VerbsError> {
        let Some(mut id) = self.id.take() else {
            return Err(VerbsError::ConnectionRefused);
        };
        let len = match check_private_data(
            private_data,
            MAX_ACCEPT_PRIVATE_DATA,
            "accept private data longer than rdma_cm allows",
        ) {
            Ok(l) => l,
            Err(e) => {
                reject_id(&id, reject_data);
                return Err(e);
            }
        };
        let own = match EventChannel::new() {
            Ok(ch) => ch,
            Err(e) => {
                reject_id(&id, reject_data);
                return Err(e);
            }
        };
        if let Err(e) = id.migrate(own) {
            reject_id(&id, reject_data);
            return Err(e);
        }
        let qp = RdmaQp::create(&self.dev, id, &init).map_err(|(e, id)| {
            reject_id(&id, reject_data);
            e
        })?;
        if let Err(e) = pre_post(qp.as_ref()) {
            reject_id(qp.cm_id(), reject_data);
            return Err(e);
        }
        let lim = self.dev.ctx.limits;
        let (initiator_depth, responder_resources) = accept_depths(
            self.initiator_depth,
            self.responder_resources,
            lim.max_qp_init_rd_atom,
            lim.max_qp_rd_atom,
        );
        let mut param = conn_param(private_data, len, initiator_depth, responder_resources);
        // SAFETY: the id has its QP; `param` and the private data it points to live
        // across the call.
        if unsafe { rdma_accept(qp.cm_id().raw, &mut param) } != 0 {
            let e = os_error("rdma_accept");
            reject_id(qp.cm_id(), reject_data);
            return Err(e);
        }
        debug!(
            qp = qp.qp_num(),
            initiator_depth, responder_resources, "rdma_cm connection accepted"
        );
        Ok(qp)
    }

    fn reject(mut self: Box<Self>, private_data: &[u8]) {
        if let Some(id) = self.id.take() {
            reject_id(&id, private_data);
        }
    }
}

impl Drop for RdmaConnectRequest {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            reject_id(&id, &[]);
        }
    }
}

/// Waits for the event that ends step `what` of a connect; anything but `expected` is
/// an error.
fn expect_event(
    id: &CmId,
    deadline: Instant,
    expected: rdma_cm_event_type::Type,
    what: &str,
) -> Result<CmEvent, VerbsError> {
    let ev = id.channel().wait_for(id.raw, deadline, what)?;
    if ev.kind == expected {
        Ok(ev)
    } else {
        Err(ev.unexpected(super::convert::event_name(expected)))
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
    use rdma_cm_event_type::*;
    let deadline = Instant::now() + timeout;
    let len = check_private_data(
        private_data,
        MAX_CONNECT_PRIVATE_DATA,
        "connect private data longer than rdma_cm allows (56 bytes)",
    )?;
    let sa = parse_addr(addr)?;
    let id = CmId::new(EventChannel::new()?)?;
    let mut dst = sockaddr(&sa);
    // SAFETY: the id is live; `dst` is a valid sockaddr; NULL source picks the route's.
    if unsafe {
        rdma_resolve_addr(
            id.raw,
            std::ptr::null_mut(),
            (&raw mut dst).cast(),
            timeout_ms(timeout),
        )
    } != 0
    {
        return Err(os_error(&format!("rdma_resolve_addr({addr})")));
    }
    expect_event(
        &id,
        deadline,
        RDMA_CM_EVENT_ADDR_RESOLVED,
        "resolving the address",
    )
    .map_err(|e| VerbsError::NoDevice(format!("no RDMA route to {addr}: {e}")))?;
    if id.verbs() != dev.ctx.raw {
        return Err(VerbsError::InvalidArgument(
            "the address is reached through another RDMA device than this one",
        ));
    }
    let left = deadline.saturating_duration_since(Instant::now());
    // SAFETY: the id's address is resolved.
    if unsafe { rdma_resolve_route(id.raw, timeout_ms(left)) } != 0 {
        return Err(os_error(&format!("rdma_resolve_route({addr})")));
    }
    expect_event(
        &id,
        deadline,
        RDMA_CM_EVENT_ROUTE_RESOLVED,
        "resolving the route",
    )?;
    let qp = RdmaQp::create(dev, id, &init).map_err(|(e, _)| e)?;
    pre_post(qp.as_ref())?;
    let lim = dev.ctx.limits;
    let mut param = conn_param(
        private_data,
        len,
        lim.max_qp_init_rd_atom,
        lim.max_qp_rd_atom,
    );
    // SAFETY: the id has its QP; `param` and its private data live across the call.
    if unsafe { rdma_connect(qp.cm_id().raw, &mut param) } != 0 {
        return Err(os_error(&format!("rdma_connect({addr})")));
    }
    let ev = qp
        .cm_id()
        .channel()
        .wait_for(qp.cm_id().raw, deadline, "connecting")?;
    match ev.kind {
        RDMA_CM_EVENT_ESTABLISHED => {
            debug!(qp = qp.qp_num(), %addr, "rdma_cm connection established");
            Ok((qp as Arc<dyn QueuePair>, ev.private_data))
        }
        RDMA_CM_EVENT_REJECTED => Err(reject_error(ev.status, &ev.private_data, addr)),
        RDMA_CM_EVENT_UNREACHABLE | RDMA_CM_EVENT_CONNECT_ERROR => Err(VerbsError::NoListener(
            format!("{addr} ({}, status {})", ev.name(), ev.status),
        )),
        _ => Err(ev.unexpected("ESTABLISHED")),
    }
}
