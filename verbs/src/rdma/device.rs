//! Finding the RDMA device for an address, and what it can do.
//!
//! With rdma_cm the device is a consequence of the address: binding a local address
//! (target) or resolving a remote one (host) tells which `ibv_context` the connection
//! will use, and QPs created through rdma_cm must live in a protection domain of that
//! very context. So an [`RdmaDevice`] is opened *for an address*; it keeps the bound
//! or resolved id (its anchor) for its whole life. Contexts belong to librdmacm,
//! which keeps them open for the life of the process; we never close one.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::{
    ibv_context, ibv_device_attr, ibv_get_device_name, ibv_query_device, ibv_transport_type,
    rdma_bind_addr, rdma_cm_event_type, rdma_free_devices, rdma_get_devices, rdma_resolve_addr,
};

use super::convert::{clamp_u8, is_wildcard, parse_addr, sockaddr, timeout_ms};
use super::event::{os_error, CmId, EventChannel};
use crate::VerbsError;

/// How a completion queue tells its consumer about new completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqMode {
    /// A completion channel: `req_notify` arms it, `event_fd` becomes readable, `wait`
    /// sleeps on it (interrupt and adaptive poll modes).
    Channel,
    /// No channel: consumers spin on `poll`; `event_fd` is always readable and `wait`
    /// only yields (poll mode).
    Polling,
}

/// Device limits the provider clamps requests to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cqe: u32,
    /// Shared receive queues the device can make (0: none), their largest depth and
    /// SGEs per receive.
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    /// RDMA READs this device answers per QP (responder resources).
    pub max_qp_rd_atom: u8,
    /// RDMA READs this device may have outstanding per QP (initiator depth).
    pub max_qp_init_rd_atom: u8,
}

/// A verbs context as librdmacm opened it, with its name and limits.
pub(super) struct Context {
    pub(super) raw: *mut ibv_context,
    pub(super) name: String,
    pub(super) limits: Limits,
    pub(super) iwarp: bool,
}

// SAFETY: libibverbs contexts are thread-safe; the struct is immutable after creation.
unsafe impl Send for Context {}
// SAFETY: see `Send`.
unsafe impl Sync for Context {}

impl Context {
    /// Queries name, transport and limits of `raw` (a context librdmacm returned).
    fn query(raw: *mut ibv_context) -> Result<Context, VerbsError> {
        // SAFETY: `raw` is a live context; its device pointer is valid as long as it is.
        let (name, transport) = unsafe {
            let dev = (*raw).device;
            let name = ibv_get_device_name(dev);
            let name = if name.is_null() {
                "?".to_string()
            } else {
                CStr::from_ptr(name).to_string_lossy().into_owned()
            };
            (name, (*dev).transport_type)
        };
        // SAFETY: all-zero bytes are a valid ibv_device_attr (plain integers and arrays).
        let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `raw` is live and `attr` is a valid out-parameter.
        let rc = unsafe { ibv_query_device(raw, &mut attr) };
        if rc != 0 {
            return Err(VerbsError::Provider(format!(
                "ibv_query_device({name}): {}",
                std::io::Error::from_raw_os_error(rc)
            )));
        }
        let u = |v: i32| u32::try_from(v.max(0)).unwrap_or(0);
        Ok(Context {
            raw,
            name,
            limits: Limits {
                max_qp_wr: u(attr.max_qp_wr),
                max_sge: u(attr.max_sge),
                max_cqe: u(attr.max_cqe),
                max_srq: u(attr.max_srq),
                max_srq_wr: u(attr.max_srq_wr),
                max_srq_sge: u(attr.max_srq_sge),
                max_qp_rd_atom: clamp_u8(attr.max_qp_rd_atom),
                max_qp_init_rd_atom: clamp_u8(attr.max_qp_init_rd_atom),
            },
            iwarp: transport == ibv_transport_type::IBV_TRANSPORT_IWARP,
        })
    }
}

/// What every object of one device shares.
pub(super) struct DevShared {
    pub(super) ctx: Context,
    pub(super) cq_mode: AtomicU8,
    /// The id whose binding or resolution picked the device.
    _anchor: CmId,
}

const MODE_CHANNEL: u8 = 0;
const MODE_POLLING: u8 = 1;

impl DevShared {
    pub(super) fn cq_mode(&self) -> CqMode {
        match self.cq_mode.load(Ordering::Relaxed) {
            MODE_POLLING => CqMode::Polling,
            _ => CqMode::Channel,
        }
    }
}

/// A real RDMA device (NIC or soft-RoCE), found through an IP address.
pub struct RdmaDevice {
    pub(super) shared: Arc<DevShared>,
}

impl std::fmt::Debug for RdmaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaDevice")
            .field("name", &self.shared.ctx.name)
            .field("limits", &self.shared.ctx.limits)
            .finish_non_exhaustive()
    }
}

impl RdmaDevice {
    /// The device that owns local address `addr` (`IP:PORT`; the port is ignored):
    /// where a target listening there accepts connections. A wildcard address works
    /// only when the machine has exactly one RDMA device.
    pub fn for_local_addr(addr: &str) -> Result<Arc<RdmaDevice>, VerbsError> {
        let mut sa = parse_addr(addr)?;
        sa.set_port(0);
        let id = CmId::new(EventChannel::new()?)?;
        let mut ss = sockaddr(&sa);
        // SAFETY: the id is live and `ss` a valid sockaddr for its family.
        if unsafe { rdma_bind_addr(id.raw, (&raw mut ss).cast()) } != 0 {
            return Err(VerbsError::NoDevice(format!(
                "{} is not an address of an RDMA device ({}); `rdma link` lists the \
                 devices and their network interfaces",
                sa.ip(),
                super::event::errno_text()
            )));
        }
        let raw = id.verbs();
        let raw = if raw.is_null() {
            if !is_wildcard(&sa) {
                return Err(VerbsError::NoDevice(format!(
                    "{} is bound to no RDMA device",
                    sa.ip()
                )));
            }
            only_device()?
        } else {
            raw
        };
        Self::with_context(raw, id)
    }

    /// The local device through which `addr` (`IP:PORT`) is reached: what a host
    /// connecting there uses. Resolution takes at most `timeout`.
    pub fn for_remote_addr(addr: &str, timeout: Duration) -> Result<Arc<RdmaDevice>, VerbsError> {
        let sa = parse_addr(addr)?;
        let id = CmId::new(EventChannel::new()?)?;
        let mut dst = sockaddr(&sa);
        let deadline = Instant::now() + timeout;
        // SAFETY: the id is live; `dst` is a valid sockaddr; NULL source lets
        // librdmacm pick the route's local address.
        let rc = unsafe {
            rdma_resolve_addr(
                id.raw,
                std::ptr::null_mut(),
                (&raw mut dst).cast(),
                timeout_ms(timeout),
            )
        };
        if rc != 0 {
            return Err(os_error(&format!("rdma_resolve_addr({addr})")));
        }
        let ev = id
            .channel()
            .wait_for(id.raw, deadline, "resolving the address")?;
        if ev.kind != rdma_cm_event_type::RDMA_CM_EVENT_ADDR_RESOLVED {
            return Err(VerbsError::NoDevice(format!(
                "no RDMA route to {addr}: {} (status {}); is the address on an RDMA \
                 network and an RDMA device (e.g. rxe on the interface) configured here?",
                ev.name(),
                ev.status
            )));
        }
        let raw = id.verbs();
        if raw.is_null() {
            return Err(VerbsError::NoDevice(format!(
                "{addr} resolved to no RDMA device"
            )));
        }
        Self::with_context(raw, id)
    }

    /// Names of the RDMA devices librdmacm sees.
    pub fn list() -> Result<Vec<String>, VerbsError> {
        // The channel open fails first, with the clearest message, when RDMA is absent.
        drop(EventChannel::new()?);
        let mut n = 0i32;
        // SAFETY: `n` receives the count; the list is freed below.
        let list = unsafe { rdma_get_devices(&mut n) };
        if list.is_null() {
            return Ok(Vec::new());
        }
        let mut names = Vec::new();
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds `n` valid context pointers.
            let ctx = unsafe { *list.add(i) };
            if let Ok(c) = Context::query(ctx) {
                names.push(c.name);
            }
        }
        // SAFETY: `list` came from rdma_get_devices and is freed once.
        unsafe { rdma_free_devices(list) };
        Ok(names)
    }

    fn with_context(raw: *mut ibv_context, anchor: CmId) -> Result<Arc<RdmaDevice>, VerbsError> {
        let ctx = Context::query(raw)?;
        tracing::debug!(device = %ctx.name, limits = ?ctx.limits, iwarp = ctx.iwarp, "RDMA device opened");
        Ok(Arc::new(RdmaDevice {
            shared: Arc::new(DevShared {
                ctx,
                cq_mode: AtomicU8::new(MODE_CHANNEL),
                _anchor: anchor,
            }),
        }))
    }

    /// How completion queues created from now on signal completions.
    pub fn set_cq_mode(&self, mode: CqMode) {
        let v = match mode {
            CqMode::Channel => MODE_CHANNEL,
            CqMode::Polling => MODE_POLLING,
        };
        self.shared.cq_mode.store(v, Ordering::Relaxed);
    }

    pub fn limits(&self) -> Limits {
        self.shared.ctx.limits
    }

    /// True for iWARP devices (RDMA READ sinks are then registered remotely writable).
    pub fn is_iwarp(&self) -> bool {
        self.shared.ctx.iwarp
    }
}

/// The machine's only RDMA device (for wildcard listen addresses).
fn only_device() -> Result<*mut ibv_context, VerbsError> {
    let mut n = 0i32;
    // SAFETY: `n` receives the count; the list is freed below (contexts stay open).
    let list = unsafe { rdma_get_devices(&mut n) };
    if list.is_null() {
        return Err(os_error("rdma_get_devices"));
    }
    let first = if n >= 1 {
        // SAFETY: the list holds `n >= 1` entries.
        Some(unsafe { *list })
    } else {
        None
    };
    // SAFETY: `list` came from rdma_get_devices and is freed once.
    unsafe { rdma_free_devices(list) };
    match (n, first) {
        (1, Some(ctx)) if !ctx.is_null() => Ok(ctx),
        (0, _) => Err(VerbsError::NoDevice("no RDMA device present".into())),
        _ => Err(VerbsError::NoDevice(format!(
            "{n} RDMA devices: listen on a specific address to pick one"
        ))),
    }
}
