//! From a [`DiscoverySpec`] (a discovery.conf line or the command line) to what a
//! connection needs: the host identity, DH-HMAC-CHAP keys, TLS, queue and reconnect
//! settings ([`Profile`]), and from an address to a fabric ([`Connector`]).
//!
//! Owned by the host library ([`super`]). A spec that cannot be used (a bad host NQN,
//! a malformed secret, an option this host cannot honour) fails here, before anything
//! is connected, with the spec's source in the message.

use std::net::ToSocketAddrs as _;
use std::sync::Arc;
use std::time::Duration;

use nvmf_common::auth::{DhchapSecret, HostKeys};
use nvmf_common::tls::ConfiguredPsk;
use nvmf_common::types::Nqn;
use nvmf_common::wire::log::trtype;

use super::conf::DiscoverySpec;
use super::walk::PortAddr;
use crate::controller::ConnectOptions;
use crate::discovery::trtype_str;
use crate::error::Error;
use crate::hostnqn::HostIdentity;
use crate::reconnect::{
    ReconnectPolicy, RetryPolicy, DEFAULT_CTRL_LOSS_TMO, DEFAULT_RECONNECT_DELAY,
};
use crate::transport::tcp::{TcpFabric, TcpOptions, TlsKey};
use crate::transport::Fabric;

/// Milliseconds per second (KATO is given in seconds, carried in ms).
const MS_PER_SEC: u32 = 1000;

/// Settings that apply to every spec (the command line's, or a daemon's).
#[derive(Debug, Clone)]
pub struct ConnectAllOptions {
    /// The host identity of specs that name none (`-q`/`-I`, /etc/nvme).
    pub host: HostIdentity,
    /// Bounds each connect and each command.
    pub timeout: Duration,
    /// Age at which an outstanding command is reported as stuck (0: never).
    pub stuck_warn: Duration,
    /// Referrals followed at most this deep (libnvme's `NVMF_MAX_REFERRAL_DEPTH`).
    pub max_referral_depth: usize,
    /// I/O queues per path when the spec says nothing (`-i`).
    pub io_queues: u16,
    /// I/O threads the caller will run over each subsystem: every path must grant
    /// one I/O queue per thread ([`crate::multipath::PathQueues`]).
    pub workers: usize,
    /// Hand TLS keys to the kernel where it can (kernel TLS).
    pub ktls: bool,
}

/// libnvme's bound on referral depth (`NVMF_MAX_REFERRAL_DEPTH`).
pub const MAX_REFERRAL_DEPTH: usize = 8;
/// The command and connect timeout when none is given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

impl ConnectAllOptions {
    pub fn new(host: HostIdentity) -> ConnectAllOptions {
        ConnectAllOptions {
            host,
            timeout: DEFAULT_TIMEOUT,
            stuck_warn: crate::controller::DEFAULT_STUCK_COMMAND_WARN,
            max_referral_depth: MAX_REFERRAL_DEPTH,
            io_queues: 1,
            workers: 0,
            ktls: true,
        }
    }
}

/// A spec made usable: everything needed to connect to what is found through it.
#[derive(Clone)]
pub struct Profile {
    /// The spec's source (`FILE:LINE`, `command line`).
    pub source: String,
    pub host: HostIdentity,
    pub dhchap: Option<HostKeys>,
    /// The configured TLS PSK (`--tls-key`); TLS is used where it is set.
    pub tls_psk: Option<ConfiguredPsk>,
    pub hdr_digest: bool,
    pub data_digest: bool,
    pub nr_io_queues: Option<u16>,
    pub queue_size: Option<u16>,
    pub kato_ms: Option<u32>,
    pub reconnect: ReconnectPolicy,
    /// `fast_io_fail_tmo` (None: off, nvme-cli's `-1`).
    pub fast_io_fail: Option<Duration>,
    pub timeout: Duration,
    pub stuck_warn: Duration,
    pub ktls: bool,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile")
            .field("source", &self.source)
            .field("hostnqn", &self.host.hostnqn)
            .field("dhchap", &self.dhchap.is_some())
            .field("tls", &self.tls_psk.is_some())
            .finish_non_exhaustive()
    }
}

impl Profile {
    /// Checks `spec` and resolves its identity and secrets (errors never echo a
    /// secret).
    pub fn resolve(spec: &DiscoverySpec, o: &ConnectAllOptions) -> Result<Profile, Error> {
        let bad = |m: String| Error::InvalidArgument(format!("{}: {m}", spec.source));
        match spec.trtype() {
            Some(trtype::TCP | trtype::RDMA) => {}
            _ => {
                return Err(bad(format!(
                    "transport {:?} is not supported by this host (tcp or rdma)",
                    spec.transport
                )))
            }
        }
        // The kernel binds the connection to a local address or interface; this host
        // lets routing pick them, so a spec that needs them would take another path.
        if let Some(w) = &spec.host_traddr {
            return Err(bad(format!(
                "-w/--host-traddr {w}: choosing the local address is not supported by this host"
            )));
        }
        if let Some(f) = &spec.host_iface {
            return Err(bad(format!(
                "-f/--host-iface {f}: choosing the local interface is not supported by this host"
            )));
        }
        let host = if spec.hostnqn.is_none() && spec.hostid.is_none() {
            o.host.clone()
        } else {
            let nqn = spec
                .hostnqn
                .clone()
                .unwrap_or_else(|| o.host.hostnqn.as_str().to_owned());
            HostIdentity::load(Some(&nqn), spec.hostid.as_deref())
                .map_err(|e| bad(e.to_string()))?
        };
        let secret = |flag: &str, v: &str| {
            v.parse::<DhchapSecret>()
                .map_err(|e| bad(format!("{flag}: {e}")))
        };
        let dhchap = match (&spec.dhchap_secret, &spec.dhchap_ctrl_secret) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(bad(
                    "--dhchap-ctrl-secret needs --dhchap-secret as well".into()
                ))
            }
            (Some(h), c) => Some(HostKeys {
                host_key: secret("--dhchap-secret", h.as_str())?,
                ctrl_key: c
                    .as_ref()
                    .map(|c| secret("--dhchap-ctrl-secret", c.as_str()))
                    .transpose()?,
            }),
        };
        let tls_psk = match &spec.tls_key {
            Some(k) => Some(
                k.as_str()
                    .parse::<ConfiguredPsk>()
                    .map_err(|e| bad(format!("--tls-key: {e}")))?,
            ),
            None if spec.tls => {
                return Err(bad(
                    "--tls needs the key (--tls-key NVMeTLSkey-1:..): this host does not read \
                     the kernel keyring"
                        .into(),
                ))
            }
            None => None,
        };
        if tls_psk.is_some() && spec.trtype() != Some(trtype::TCP) {
            return Err(bad("--tls/--tls-key: TLS is for NVMe/TCP".into()));
        }
        if (spec.hdr_digest || spec.data_digest) && spec.trtype() != Some(trtype::TCP) {
            return Err(bad(
                "--hdr-digest/--data-digest: digests are for NVMe/TCP".into()
            ));
        }
        let reconnect = ReconnectPolicy {
            reconnect_delay: spec.reconnect_delay.map_or(DEFAULT_RECONNECT_DELAY, |s| {
                Duration::from_secs(u64::from(s.max(1)))
            }),
            ctrl_loss_tmo: match spec.ctrl_loss_tmo {
                None => Some(DEFAULT_CTRL_LOSS_TMO),
                Some(s) => u64::try_from(s).ok().map(Duration::from_secs),
            },
            retry: RetryPolicy::Retry,
        };
        Ok(Profile {
            source: spec.source.clone(),
            host,
            dhchap,
            tls_psk,
            hdr_digest: spec.hdr_digest,
            data_digest: spec.data_digest,
            nr_io_queues: spec.nr_io_queues,
            queue_size: spec.queue_size,
            kato_ms: spec.keep_alive_tmo.map(|k| k.saturating_mul(MS_PER_SEC)),
            reconnect,
            fast_io_fail: spec
                .fast_io_fail_tmo
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs),
            timeout: o.timeout,
            stuck_warn: o.stuck_warn,
            ktls: o.ktls,
        })
    }

    /// Connect options for a discovery controller `subnqn`: no I/O queues and no
    /// keep-alive unless `-k` asked for one (one log read, then disconnect).
    pub fn discovery_options(&self, subnqn: &Nqn) -> ConnectOptions {
        let mut o =
            ConnectOptions::new(subnqn.clone(), self.host.hostnqn.clone(), self.host.hostid);
        o.nr_io_queues = 0;
        o.kato_ms = self.kato_ms.unwrap_or(0);
        self.common(o)
    }

    /// Connect options for an NVM subsystem `subnqn` with at least `io_queues` I/O
    /// queues (`-i` may ask for more).
    pub fn io_options(&self, subnqn: &Nqn, io_queues: u16) -> ConnectOptions {
        let mut o =
            ConnectOptions::new(subnqn.clone(), self.host.hostnqn.clone(), self.host.hostid);
        o.nr_io_queues = self.nr_io_queues.unwrap_or(io_queues).max(io_queues);
        if let Some(q) = self.queue_size {
            o.queue_size = q;
        }
        if let Some(k) = self.kato_ms {
            o.kato_ms = k;
        }
        self.common(o)
    }

    fn common(&self, mut o: ConnectOptions) -> ConnectOptions {
        o.command_timeout = self.timeout;
        o.connect_timeout = self.timeout;
        o.stuck_command_warn = self.stuck_warn;
        o.dhchap = self.dhchap.clone();
        o
    }
}

/// Makes the fabric to a port (tests and other transports plug in here).
pub trait Connector: Send + Sync {
    /// A fabric to `addr` for subsystem `subnqn` (a TLS identity names it), with
    /// TLS when `tls` is set.
    fn fabric(
        &self,
        addr: &PortAddr,
        subnqn: &str,
        profile: &Profile,
        tls: bool,
    ) -> Result<Arc<dyn Fabric>, Error>;
}

/// NVMe/TCP and NVMe/RDMA over the network.
#[derive(Debug, Default, Clone, Copy)]
pub struct NetConnector;

impl Connector for NetConnector {
    fn fabric(
        &self,
        addr: &PortAddr,
        subnqn: &str,
        profile: &Profile,
        tls: bool,
    ) -> Result<Arc<dyn Fabric>, Error> {
        match addr.trtype {
            trtype::TCP => Ok(Arc::new(tcp_fabric(addr, subnqn, profile, tls)?)),
            trtype::RDMA => rdma_fabric(addr, profile.timeout),
            other => Err(Error::Unsupported(format!(
                "transport {} ({other})",
                trtype_str(other)
            ))),
        }
    }
}

/// The socket address of `traddr`/`trsvcid` (an IPv6 address may come bracketed).
fn socket_addr(addr: &PortAddr) -> Result<std::net::SocketAddr, Error> {
    let port: u16 = addr.trsvcid.parse().map_err(|_| {
        Error::InvalidArgument(format!("trsvcid {:?} is not a port number", addr.trsvcid))
    })?;
    let host = addr
        .traddr
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(&addr.traddr);
    (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::InvalidArgument(format!("traddr {:?}: {e}", addr.traddr)))?
        .next()
        .ok_or_else(|| Error::InvalidArgument(format!("traddr {:?}: no address", addr.traddr)))
}

fn tcp_fabric(
    addr: &PortAddr,
    subnqn: &str,
    profile: &Profile,
    tls: bool,
) -> Result<TcpFabric, Error> {
    let tls = if tls {
        let psk = profile.tls_psk.clone().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{addr} requires TLS (its discovery entry says so): give --tls-key"
            ))
        })?;
        Some(Arc::new(TlsKey {
            psk,
            hostnqn: profile.host.hostnqn.as_str().to_owned(),
            subnqn: subnqn.to_owned(),
        }))
    } else {
        None
    };
    Ok(TcpFabric::new(
        socket_addr(addr)?,
        TcpOptions {
            hdr_digest: profile.hdr_digest,
            data_digest: profile.data_digest,
            tls,
            ktls: profile.ktls,
            ..TcpOptions::default()
        },
    ))
}

#[cfg(feature = "rdma")]
fn rdma_fabric(addr: &PortAddr, timeout: Duration) -> Result<Arc<dyn Fabric>, Error> {
    use crate::transport::rdma::RdmaFabric;
    use crate::transport::TransportError;
    let sa = socket_addr(addr)?.to_string();
    let device = nvmf_verbs::rdma::RdmaDevice::for_remote_addr(&sa, timeout)
        .map_err(|e| Error::Transport(TransportError::Other(format!("rdma to {sa}: {e}"))))?;
    Ok(Arc::new(
        RdmaFabric::new(device, sa).map_err(Error::Transport)?,
    ))
}

#[cfg(not(feature = "rdma"))]
fn rdma_fabric(addr: &PortAddr, _timeout: Duration) -> Result<Arc<dyn Fabric>, Error> {
    Err(Error::Unsupported(format!(
        "{addr}: real RDMA verbs are not built into this host (cargo feature `rdma`)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> ConnectAllOptions {
        ConnectAllOptions::new(HostIdentity::combine(
            Some(
                Nqn::new("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001")
                    .unwrap(),
            ),
            Some([1; 16]),
        ))
    }

    fn err(spec: &DiscoverySpec) -> String {
        Profile::resolve(spec, &opts())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_else(|| panic!("accepted: {spec:?}"))
    }

    #[test]
    fn what_this_host_cannot_honour_is_refused_with_the_source() {
        let mut s = DiscoverySpec::new("d.conf:4", "tcp", "127.0.0.1", None);
        s.host_traddr = Some("10.0.0.9".into());
        let e = err(&s);
        assert!(e.contains("d.conf:4") && e.contains("--host-traddr"), "{e}");
        let s = DiscoverySpec::new("d.conf:5", "fc", "nn-0x1:pn-0x2", None);
        assert!(err(&s).contains("not supported"));
        let mut s = DiscoverySpec::new("d.conf:6", "tcp", "127.0.0.1", None);
        s.tls = true;
        assert!(err(&s).contains("--tls-key"));
        let mut s = DiscoverySpec::new("d.conf:7", "tcp", "127.0.0.1", None);
        s.dhchap_secret = Some(super::super::conf::Secret::new("DHHC-1:00:nonsense"));
        let e = err(&s);
        assert!(
            e.contains("--dhchap-secret") && !e.contains("nonsense"),
            "{e}"
        );
    }

    #[test]
    fn spec_settings_reach_the_connect_options() {
        let mut s = DiscoverySpec::new("cli", "tcp", "127.0.0.1", None);
        s.nr_io_queues = Some(3);
        s.keep_alive_tmo = Some(7);
        s.ctrl_loss_tmo = Some(-1);
        s.reconnect_delay = Some(2);
        s.hostnqn =
            Some("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000002".into());
        s.hostid = Some("00000000-0000-4000-8000-000000000002".into());
        let p = Profile::resolve(&s, &opts()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.reconnect.ctrl_loss_tmo, None, "-1: forever");
        assert_eq!(p.reconnect.reconnect_delay, Duration::from_secs(2));
        let sub = Nqn::new("nqn.2024-01.io.example:a").unwrap();
        let o = p.io_options(&sub, 1);
        assert_eq!((o.nr_io_queues, o.kato_ms), (3, 7000));
        assert!(o.hostnqn.as_str().ends_with("000000000002"));
        let d = p.discovery_options(&Nqn::discovery());
        assert_eq!(d.nr_io_queues, 0);
        // Without -q/-I the options' identity is used.
        let p = Profile::resolve(&DiscoverySpec::new("cli", "tcp", "h", None), &opts()).unwrap();
        assert_eq!(p.host.hostid, [1; 16]);
        assert_eq!(p.discovery_options(&Nqn::discovery()).kato_ms, 0);
    }
}
