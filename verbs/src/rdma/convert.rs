//! Pure conversions between the verbs interface and libibverbs/librdmacm values:
//! access flags, work-completion status and opcode, send opcodes, socket addresses,
//! connection parameters and private-data limits. No FFI calls, so all of it is
//! unit-tested on machines without RDMA.

use std::net::{IpAddr, SocketAddr};

use rdma_sys::{ibv_access_flags, ibv_wc_opcode, ibv_wc_status, ibv_wr_opcode, rdma_cm_event_type};

use crate::{Access, SendOp, VerbsError, WcOpcode, WcStatus};

/// Largest private data an rdma_cm connect request carries on InfiniBand and RoCE
/// (the IB CM REQ's 92 bytes minus the 36-byte rdma_cm header).
pub const MAX_CONNECT_PRIVATE_DATA: usize = 56;
/// Largest private data of an rdma_cm accept (IB CM REP).
pub const MAX_ACCEPT_PRIVATE_DATA: usize = 196;
/// Largest private data of an rdma_cm reject (IB CM REJ).
pub const MAX_REJECT_PRIVATE_DATA: usize = 148;

/// IB CM reject reason "invalid service id": nobody listens on that port.
pub const IB_CM_REJ_INVALID_SERVICE_ID: i32 = 8;

/// `ibv_reg_mr` access bits for `access`. On iWARP the sink of an RDMA READ must be
/// remotely writable (the read response is an RDMA WRITE on the wire), so a locally
/// writable region also gets `REMOTE_WRITE` there.
pub fn ibv_access(access: Access, iwarp: bool) -> u32 {
    let mut bits = 0u32;
    if access.contains(Access::LOCAL_WRITE) {
        bits |= ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        if iwarp {
            bits |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        }
    }
    if access.contains(Access::REMOTE_WRITE) {
        bits |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
    }
    if access.contains(Access::REMOTE_READ) {
        bits |= ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
    }
    bits
}

/// The interface's status for an `ibv_wc_status`.
pub fn wc_status(raw: ibv_wc_status::Type) -> WcStatus {
    use ibv_wc_status::*;
    match raw {
        IBV_WC_SUCCESS => WcStatus::Success,
        IBV_WC_LOC_LEN_ERR => WcStatus::LocalLengthError,
        IBV_WC_LOC_PROT_ERR => WcStatus::LocalProtectionError,
        IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccessError,
        IBV_WC_REM_INV_REQ_ERR => WcStatus::RemoteInvalidRequest,
        IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExceeded,
        IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExceeded,
        IBV_WC_WR_FLUSH_ERR => WcStatus::WrFlushError,
        other => WcStatus::Other(other),
    }
}

/// The interface's opcode for an `ibv_wc_opcode`. Verbs define the opcode only for
/// successful completions; error completions are routed by `wr_id`, and an opcode
/// the interface does not know (atomics, memory-window binds) reads as `Send`.
pub fn wc_opcode(raw: ibv_wc_opcode::Type) -> WcOpcode {
    use ibv_wc_opcode::*;
    match raw {
        IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
        IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
        IBV_WC_RECV | IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::Recv,
        _ => WcOpcode::Send,
    }
}

/// What an `ibv_send_wr` needs for `op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrFields {
    pub opcode: ibv_wr_opcode::Type,
    /// `wr.rdma.remote_addr` and `wr.rdma.rkey` (RDMA READ and WRITE).
    pub rdma: Option<(u64, u32)>,
    /// `invalidate_rkey` (SEND with invalidate).
    pub invalidate_rkey: Option<u32>,
}

pub fn wr_fields(op: SendOp) -> WrFields {
    use ibv_wr_opcode::*;
    match op {
        SendOp::Send => WrFields {
            opcode: IBV_WR_SEND,
            rdma: None,
            invalidate_rkey: None,
        },
        SendOp::SendWithInvalidate { rkey } => WrFields {
            opcode: IBV_WR_SEND_WITH_INV,
            rdma: None,
            invalidate_rkey: Some(rkey),
        },
        SendOp::RdmaWrite { remote_addr, rkey } => WrFields {
            opcode: IBV_WR_RDMA_WRITE,
            rdma: Some((remote_addr, rkey)),
            invalidate_rkey: None,
        },
        SendOp::RdmaRead { remote_addr, rkey } => WrFields {
            opcode: IBV_WR_RDMA_READ,
            rdma: Some((remote_addr, rkey)),
            invalidate_rkey: None,
        },
    }
}

/// Parses `IP:PORT`, `[IPv6]:PORT` or an unbracketed `IPv6:PORT` (the target's
/// `traddr:trsvcid`).
pub fn parse_addr(addr: &str) -> Result<SocketAddr, VerbsError> {
    if let Ok(sa) = addr.parse::<SocketAddr>() {
        return Ok(sa);
    }
    let bad = || VerbsError::InvalidArgument("RDMA address must be IP:PORT (e.g. 10.0.0.1:4420)");
    let (ip, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let ip: IpAddr = ip
        .trim_matches(|c| c == '[' || c == ']')
        .parse()
        .map_err(|_| bad())?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    Ok(SocketAddr::new(ip, port))
}

/// `addr` as a `sockaddr_storage` for librdmacm.
pub fn sockaddr(addr: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain old data for which all-zero bytes are valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&raw mut ss).cast::<libc::sockaddr_in>(), sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&raw mut ss).cast::<libc::sockaddr_in6>(), sin6) };
        }
    }
    ss
}

/// Whether `addr` is a wildcard (0.0.0.0 or ::): bound ids then have no device.
pub fn is_wildcard(addr: &SocketAddr) -> bool {
    addr.ip().is_unspecified()
}

/// Checks that `data` fits the rdma_cm message it rides on.
pub fn check_private_data(data: &[u8], max: usize, what: &'static str) -> Result<u8, VerbsError> {
    if data.len() > max {
        return Err(VerbsError::InvalidArgument(what));
    }
    u8::try_from(data.len()).map_err(|_| VerbsError::InvalidArgument(what))
}

/// Clamps a device limit (a C int) to the `u8` of `rdma_conn_param`.
pub fn clamp_u8(v: i32) -> u8 {
    u8::try_from(v.max(0)).unwrap_or(u8::MAX)
}

/// The RDMA READ depths to accept a connection with. librdmacm reports the request
/// from the passive side's point of view: `initiator_depth` is how many READs we may
/// issue (the host's responder resources), `responder_resources` how many the host may
/// issue to us. Both are capped by what our device supports.
pub fn accept_depths(
    req_initiator_depth: u8,
    req_responder_resources: u8,
    max_qp_init_rd_atom: u8,
    max_qp_rd_atom: u8,
) -> (u8, u8) {
    (
        req_initiator_depth.min(max_qp_init_rd_atom),
        req_responder_resources.min(max_qp_rd_atom),
    )
}

/// The error for a REJECTED event on the active side: the passive side's private
/// data when it sent some (an NVMe/RDMA reject), otherwise refused or no listener.
pub fn reject_error(status: i32, private_data: &[u8], addr: &str) -> VerbsError {
    if status == IB_CM_REJ_INVALID_SERVICE_ID {
        return VerbsError::NoListener(addr.to_string());
    }
    if !private_data.is_empty() && private_data.iter().any(|&b| b != 0) {
        return VerbsError::Rejected(private_data.to_vec());
    }
    VerbsError::ConnectionRefused
}

/// A readable name for an rdma_cm event (for logs and errors).
pub fn event_name(kind: rdma_cm_event_type::Type) -> &'static str {
    use rdma_cm_event_type::*;
    match kind {
        RDMA_CM_EVENT_ADDR_RESOLVED => "ADDR_RESOLVED",
        RDMA_CM_EVENT_ADDR_ERROR => "ADDR_ERROR",
        RDMA_CM_EVENT_ROUTE_RESOLVED => "ROUTE_RESOLVED",
        RDMA_CM_EVENT_ROUTE_ERROR => "ROUTE_ERROR",
        RDMA_CM_EVENT_CONNECT_REQUEST => "CONNECT_REQUEST",
        RDMA_CM_EVENT_CONNECT_RESPONSE => "CONNECT_RESPONSE",
        RDMA_CM_EVENT_CONNECT_ERROR => "CONNECT_ERROR",
        RDMA_CM_EVENT_UNREACHABLE => "UNREACHABLE",
        RDMA_CM_EVENT_REJECTED => "REJECTED",
        RDMA_CM_EVENT_ESTABLISHED => "ESTABLISHED",
        RDMA_CM_EVENT_DISCONNECTED => "DISCONNECTED",
        RDMA_CM_EVENT_DEVICE_REMOVAL => "DEVICE_REMOVAL",
        RDMA_CM_EVENT_ADDR_CHANGE => "ADDR_CHANGE",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => "TIMEWAIT_EXIT",
        _ => "UNKNOWN",
    }
}

/// Milliseconds for a librdmacm timeout argument, at least 1.
pub fn timeout_ms(d: std::time::Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX).max(1)
}
