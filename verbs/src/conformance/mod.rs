//! A conformance suite for the verbs interface, written once against the traits and run
//! on every provider: the software provider in `cargo test` (`soft/tests.rs`), and the
//! rdma-sys provider over soft-RoCE in the interop lab (`examples/verbs-conformance.rs`,
//! case `rdma-verbs-conformance`).
//!
//! Each property is one function taking a [`Fabric`] (a device and a source of fresh
//! listen addresses) and returning `Err(reason)` when the provider breaks it; none
//! panics on a provider's misbehaviour. [`PROPERTIES`] lists them all; [`run`] runs one.
//!
//! Only what verbs guarantee on every RC implementation is checked, so both providers
//! must pass the same code:
//! - completions are awaited with a deadline (hardware completes asynchronously) and
//!   "nothing more arrived" is checked after [`Fabric::grace`];
//! - send and receive completions go to separate CQs, because the order between the two
//!   queues' completions on one CQ is not defined;
//! - error completions are matched by `wr_id`, status and QP only (verbs define opcode
//!   and byte count for successful completions), and send completions' byte counts
//!   are checked only for RDMA READ;
//! - private data is compared as a prefix followed by zeros (rdma_cm pads it to the
//!   size of the CM message);
//! - a QP "in error" is one that [`QueuePair::is_dead`] reports and on which new work
//!   requests do not execute: posting fails with [`VerbsError::QpError`] or the work
//!   request completes with [`WcStatus::WrFlushError`].
//!
//! Provider-specific behaviour (the soft provider's RNR timeout, queue-depth accounting,
//! key layout, counters; errors that on hardware stay local to one QP) is tested by the
//! provider's own tests.
//!
//! Compiled for tests and with the `conformance` feature (on by default for this crate,
//! off for the target and host binaries, which depend on `nvmf-common` without default
//! features): it is test scaffolding, but public so the rdma runner, an example, can use it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use std::sync::Arc;

use super::Device;

/// What a property returns: `Err` says what the provider got wrong.
pub type Outcome = Result<(), String>;

/// Something a property needs that not every provider can offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Regions registered through [`ProtectionDomain::register`] can be invalidated by a
    /// peer's SEND with invalidate. ibverbs allows remote invalidation only of
    /// fast-registration MRs and type-2 memory windows, never of `ibv_reg_mr` regions,
    /// so the rdma-sys provider lacks it (the NVMe target still sends with invalidate:
    /// the Linux host's keys are fast-registration MRs).
    RemoteInvalidate,
}

/// The provider under test: a device, listen addresses, and timing.
pub struct Fabric {
    device: Arc<dyn Device>,
    next_addr: Box<dyn Fn() -> String + Send + Sync>,
    timeout: Duration,
    grace: Duration,
    lacks: Vec<(Need, &'static str)>,
}

impl Fabric {
    /// `next_addr` returns a listen address no earlier call returned (every connection
    /// a property makes listens on a fresh one). Defaults: 10 s timeout, 100 ms grace.
    pub fn new(
        device: Arc<dyn Device>,
        next_addr: impl Fn() -> String + Send + Sync + 'static,
    ) -> Fabric {
        Fabric {
            device,
            next_addr: Box::new(next_addr),
            timeout: Duration::from_secs(10),
            grace: Duration::from_millis(100),
            lacks: Vec::new(),
        }
    }

    /// `IP:PORT` addresses on `ip` from port `first_port` upwards.
    pub fn ip_ports(ip: &str, first_port: u16) -> impl Fn() -> String + Send + Sync + 'static {
        let ip = ip.to_string();
        let next = AtomicU32::new(u32::from(first_port));
        move || format!("{ip}:{}", next.fetch_add(1, Ordering::Relaxed))
    }

    /// How long anything that must happen may take (connections, completions).
    pub fn with_timeout(mut self, timeout: Duration) -> Fabric {
        self.timeout = timeout;
        self
    }

    /// How long to wait before concluding that something did not happen (no further
    /// completion, no event). Zero for a provider that completes synchronously.
    pub fn with_grace(mut self, grace: Duration) -> Fabric {
        self.grace = grace;
        self
    }

    /// Declares that the provider cannot offer `need`, and why.
    pub fn lacking(mut self, need: Need, why: &'static str) -> Fabric {
        self.lacks.push((need, why));
        self
    }

    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn grace(&self) -> Duration {
        self.grace
    }

    fn addr(&self) -> String {
        (self.next_addr)()
    }

    /// Why the provider cannot offer `need`, if it cannot.
    pub fn lacks(&self, need: Need) -> Option<&'static str> {
        self.lacks
            .iter()
            .find(|(n, _)| *n == need)
            .map(|(_, why)| *why)
    }
}

/// One property of the interface.
pub struct Property {
    pub name: &'static str,
    pub needs: Option<Need>,
    pub check: fn(&Fabric) -> Outcome,
}

/// The result of running a property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail(String),
    /// The provider declared that it lacks what the property needs (see [`Need`]).
    NotApplicable(&'static str),
}

/// Runs `p` on `f`.
pub fn run(f: &Fabric, p: &Property) -> Verdict {
    if let Some(why) = p.needs.and_then(|n| f.lacks(n)) {
        return Verdict::NotApplicable(why);
    }
    match (p.check)(f) {
        Ok(()) => Verdict::Pass,
        Err(e) => Verdict::Fail(e),
    }
}

/// The property called `name`.
pub fn property(name: &str) -> Option<&'static Property> {
    PROPERTIES.iter().find(|p| p.name == name)
}

macro_rules! properties {
    ($($name:ident $(needs $need:ident)?),* $(,)?) => {
        /// Every property, in the order the runner reports them.
        pub const PROPERTIES: &[Property] = &[
            $(Property {
                name: stringify!($name),
                needs: properties!(@need $($need)?),
                check: $name,
            }),*
        ];
    };
    (@need) => { None };
    (@need $need:ident) => { Some(Need::$need) };
}

properties![
    cm_accept_exchanges_private_data,
    cm_reject_returns_private_data,
    cm_failed_accept_rejects_with_reject_data,
    cm_dropped_request_is_refused,
    cm_connect_without_listener_fails,
    registration_keys_and_rights,
    send_recv_delivers_bytes_and_byte_len,
    rdma_write_lands_bytes,
    rdma_read_lands_bytes,
    rc_orders_unsignaled_write_before_send,
    rnr_retry_delivers_to_a_late_receive,
    wrong_rkey_is_remote_access_error,
    out_of_bounds_write_is_remote_access_error,
    read_below_region_is_remote_access_error,
    missing_remote_write_is_remote_access_error,
    missing_remote_read_is_remote_access_error,
    deregistered_rkey_is_remote_access_error,
    disconnect_flushes_receives,
    dropped_qp_disconnects_the_peer,
    send_with_invalidate_revokes_the_rkey needs RemoteInvalidate,
    cq_event_fd_is_armed_one_shot,
    cq_wait_wakes_on_completion,
    srq_two_qps_share_receives,
    srq_reposted_receives_are_reused,
    srq_survives_a_destroyed_qp,
];

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

mod cm;
mod data;
mod errors;
mod events;
mod kit;
mod srq;

pub use cm::*;
pub use data::*;
pub use errors::*;
pub use events::*;
pub use srq::*;
