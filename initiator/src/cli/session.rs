//! Opening a fabric from the connection flags (loopback, NVMe/TCP, RDMA), the
//! connect options derived from them, and the one-queue helper `read` and `write` use.

use std::net::ToSocketAddrs as _;
use std::sync::Arc;
use std::time::Duration;

use nvmf_common::auth::{DhchapSecret, HostKeys};
use nvmf_common::keyfile::read_key_file;
use nvmf_common::tls::ConfiguredPsk;
use nvmf_common::types::{Nqn, Nsid, DISCOVERY_NQN};
use nvmf_verbs::Device;

use nvmf_initiator::controller::{ConnectOptions, Controller};
use nvmf_initiator::error::Error;
use nvmf_initiator::hostnqn::{HostIdentity, IdentitySource};
#[cfg(feature = "loopback")]
use nvmf_initiator::loopback::{start_loopback, LoopbackTarget};
use nvmf_initiator::namespace::NsIo;
use nvmf_initiator::transport::rdma::RdmaFabric;
use nvmf_initiator::transport::tcp::{TcpFabric, TcpOptions, TlsKey};
use nvmf_initiator::transport::Fabric;

use super::{CliError, ConnArgs, TransportKind};

/// Milliseconds per second (KATO is given in seconds, carried in ms).
pub(super) const MS_PER_SEC: u32 = 1000;

/// The local RDMA device that reaches `addr` (`IP:PORT`), for `-t rdma`.
#[cfg(feature = "rdma")]
fn rdma_device(addr: &str, timeout: Duration) -> Result<Arc<dyn Device>, CliError> {
    use nvmf_verbs::rdma::RdmaDevice;
    match RdmaDevice::for_remote_addr(addr, timeout) {
        Ok(d) => Ok(d),
        Err(e) => Err(CliError::Failed(Error::Transport(
            nvmf_initiator::transport::TransportError::Other(format!("-t rdma to {addr}: {e}")),
        ))),
    }
}

#[cfg(not(feature = "rdma"))]
fn rdma_device(_addr: &str, _timeout: Duration) -> Result<Arc<dyn Device>, CliError> {
    Err(CliError::Usage(
        "-t rdma: real RDMA verbs are not built into this binary (cargo feature `rdma`)".into(),
    ))
}

/// What keeps an in-process target alive (nothing in a build without it).
#[cfg(feature = "loopback")]
type InProcessTarget = LoopbackTarget;
#[cfg(not(feature = "loopback"))]
type InProcessTarget = ();

#[cfg(feature = "loopback")]
fn loopback(conn: &ConnArgs) -> Result<(Arc<dyn Fabric>, InProcessTarget, Nqn), CliError> {
    Ok(start_loopback(conn.config.as_deref(), &conn.namespace)?)
}

#[cfg(not(feature = "loopback"))]
fn loopback(_conn: &ConnArgs) -> Result<(Arc<dyn Fabric>, InProcessTarget, Nqn), CliError> {
    Err(CliError::Usage(
        "-t loopback: the in-process target is not built into this binary (cargo feature \
         `loopback`)"
            .into(),
    ))
}

/// A fabric and what keeps it alive.
pub(super) struct Session {
    pub(super) fabric: Arc<dyn Fabric>,
    pub(super) default_nqn: Option<Nqn>,
    pub(super) host: HostIdentity,
    pub(super) timeout: Duration,
    // Declared last: dropped after the fabric, so the in-process target outlives every
    // host-side queue.
    _loopback: Option<InProcessTarget>,
}

pub(super) fn open(conn: &ConnArgs) -> Result<Session, CliError> {
    if (conn.hdr_digest || conn.data_digest) && conn.transport != TransportKind::Tcp {
        return Err(CliError::Usage(
            "--hdr-digest/--data-digest: not supported on this transport".into(),
        ));
    }
    if wants_tls(conn) && conn.transport != TransportKind::Tcp {
        return Err(CliError::Usage(
            "--tls/--tls-key: TLS is for NVMe/TCP (-t tcp)".into(),
        ));
    }
    if conn.timeout == 0 {
        return Err(CliError::Usage(
            "--timeout must be at least 1 second".into(),
        ));
    }
    let host = HostIdentity::load(conn.hostnqn.as_deref(), conn.hostid.as_deref())?;
    if host.source == IdentitySource::Generated {
        eprintln!(
            "note: no host identity configured (/etc/nvme/hostnqn, /etc/nvme/hostid); \
             using {} with host id {} for this run only (pass -q/-I to fix one)",
            host.hostnqn,
            host.hostid_string()
        );
    }
    let timeout = Duration::from_secs(conn.timeout);
    match conn.transport {
        TransportKind::Loopback => {
            let (fabric, target, nqn) = loopback(conn)?;
            Ok(Session {
                fabric,
                default_nqn: Some(nqn),
                host,
                timeout,
                _loopback: Some(target),
            })
        }
        TransportKind::Tcp => Ok(Session {
            fabric: Arc::new(tcp_fabric(conn, &host.hostnqn)?),
            default_nqn: None,
            host,
            timeout,
            _loopback: None,
        }),
        TransportKind::Rdma => {
            let traddr = conn
                .traddr
                .first()
                .ok_or_else(|| CliError::Usage("-t rdma needs -a/--traddr".into()))?;
            if conn.traddr.len() > 1 {
                return Err(CliError::Usage(
                    "several paths (-a repeated) need -t tcp for now".into(),
                ));
            }
            let addr = format!("{traddr}:{}", trsvcid(conn, 0));
            let device = rdma_device(&addr, timeout)?;
            let fabric = RdmaFabric::new(device, addr).map_err(Error::Transport)?;
            Ok(Session {
                fabric: Arc::new(fabric),
                default_nqn: None,
                host,
                timeout,
                _loopback: None,
            })
        }
    }
}

/// The service id of path `i`: the i-th -s, or the last one given.
fn trsvcid(conn: &ConnArgs, i: usize) -> &str {
    conn.trsvcid
        .get(i)
        .or(conn.trsvcid.last())
        .map_or("4420", String::as_str)
}

fn wants_tls(conn: &ConnArgs) -> bool {
    conn.tls || conn.tls_key.is_some() || conn.tls_key_file.is_some()
}

/// TLS for `hostnqn` from `--tls`, `--tls-key`, `--tls-key-file`; the identity names
/// the subsystem of `-n` (the discovery subsystem without one, as `nvme discover`).
fn tls_key(conn: &ConnArgs, hostnqn: &Nqn) -> Result<Option<Arc<TlsKey>>, CliError> {
    if !wants_tls(conn) {
        return Ok(None);
    }
    let text = match (&conn.tls_key, &conn.tls_key_file) {
        (Some(k), _) => k.0.clone(),
        (None, Some(p)) => {
            read_key_file(p).map_err(|e| CliError::Usage(format!("--tls-key-file: {e}")))?
        }
        (None, None) => {
            return Err(CliError::Usage(
                "--tls needs the key: --tls-key NVMeTLSkey-1:.. or --tls-key-file FILE \
                 (this host does not read the kernel keyring)"
                    .into(),
            ))
        }
    };
    let psk: ConfiguredPsk = text
        .parse()
        .map_err(|e| CliError::Usage(format!("--tls-key: {e}")))?;
    let subnqn = conn
        .nqn
        .clone()
        .unwrap_or_else(|| DISCOVERY_NQN.to_string());
    Ok(Some(Arc::new(TlsKey {
        psk,
        hostnqn: hostnqn.as_str().to_owned(),
        subnqn,
    })))
}

/// The NVMe/TCP fabric for `-t tcp -a ADDR -s PORT [--hdr-digest] [--data-digest]
/// [--tls ...]`, for `hostnqn`.
pub(super) fn tcp_fabric(conn: &ConnArgs, hostnqn: &Nqn) -> Result<TcpFabric, CliError> {
    tcp_path(conn, 0, hostnqn)
}

/// The other paths given by repeating -a (and -s): NVMe/TCP only.
pub(super) fn more_paths(conn: &ConnArgs, hostnqn: &Nqn) -> Result<Vec<Arc<dyn Fabric>>, CliError> {
    (1..conn.traddr.len())
        .map(|i| {
            if conn.transport != TransportKind::Tcp {
                return Err(CliError::Usage(
                    "several paths (-a repeated) need -t tcp for now".into(),
                ));
            }
            tcp_path(conn, i, hostnqn).map(|f| Arc::new(f) as Arc<dyn Fabric>)
        })
        .collect()
}

/// Every path's `ADDR:PORT`, in -a order.
pub(super) fn path_names(conn: &ConnArgs) -> Vec<String> {
    (0..conn.traddr.len())
        .filter_map(|i| {
            let a = conn.traddr.get(i)?;
            Some(format!("{a}:{}", trsvcid(conn, i)))
        })
        .collect()
}

/// The NVMe/TCP fabric of path `i` (the i-th -a).
fn tcp_path(conn: &ConnArgs, i: usize, hostnqn: &Nqn) -> Result<TcpFabric, CliError> {
    let traddr = conn
        .traddr
        .get(i)
        .map(String::as_str)
        .ok_or_else(|| CliError::Usage("-t tcp needs -a/--traddr".into()))?;
    let svc = trsvcid(conn, i);
    let port: u16 = svc
        .parse()
        .map_err(|_| CliError::Usage(format!("-s/--trsvcid {svc:?}: not a TCP port number")))?;
    // An IPv6 address may come bracketed ("[fe80::1]").
    let host = traddr
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(traddr);
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| CliError::Usage(format!("-a/--traddr {traddr:?}: {e}")))?
        .next()
        .ok_or_else(|| CliError::Usage(format!("-a/--traddr {traddr:?}: no address")))?;
    Ok(TcpFabric::new(
        addr,
        TcpOptions {
            hdr_digest: conn.hdr_digest,
            data_digest: conn.data_digest,
            tls: tls_key(conn, hostnqn)?,
            ktls: !conn.no_ktls,
            ..TcpOptions::default()
        },
    ))
}

/// Connects for a one-shot command: through the first path (-a) that answers and
/// serves I/O, preferring one whose ANA groups are optimized, then non-optimized; a
/// path that cannot be reached is skipped (as the Linux host picks a path of a
/// multipath subsystem). The error is the first path's when none connects.
pub(super) fn connect_any(
    conn: &ConnArgs,
    s: &Session,
    o: ConnectOptions,
) -> Result<Controller, CliError> {
    use nvmf_initiator::multipath::{path_state, PathState};
    let more = if conn.traddr.len() > 1 {
        more_paths(conn, &s.host.hostnqn)?
    } else {
        Vec::new()
    };
    if more.is_empty() {
        return Ok(Controller::connect(s.fabric.clone(), o)?);
    }
    let mut first_err = None;
    let mut fallback: Option<Controller> = None;
    for f in std::iter::once(s.fabric.clone()).chain(more) {
        match Controller::connect(f, o.clone()) {
            Ok(c) => match path_state(&c) {
                PathState::Optimized => return Ok(c),
                PathState::NonOptimized if fallback.is_none() => fallback = Some(c),
                _ => {
                    let _ = c.shutdown();
                }
            },
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match (fallback, first_err) {
        (Some(c), _) => Ok(c),
        (None, Some(e)) => Err(e.into()),
        (None, None) => Err(CliError::Failed(Error::Path(
            "every path refuses I/O (ANA inaccessible, persistent loss or change)".into(),
        ))),
    }
}

/// Connection options for an I/O subsystem from the flags.
pub(super) fn connect_options(
    conn: &ConnArgs,
    s: &Session,
    io_queues: u16,
    min_queue_size: u16,
) -> Result<ConnectOptions, CliError> {
    let nqn = match (&conn.nqn, &s.default_nqn) {
        (Some(n), _) => {
            Nqn::new(n.as_str()).map_err(|e| CliError::Usage(format!("-n/--nqn {n:?}: {e}")))?
        }
        (None, Some(d)) => d.clone(),
        (None, None) => return Err(CliError::Usage("-n/--nqn is required".into())),
    };
    let mut o = ConnectOptions::new(nqn, s.host.hostnqn.clone(), s.host.hostid);
    o.nr_io_queues = conn.nr_io_queues.unwrap_or(io_queues).max(io_queues);
    if let Some(q) = conn.queue_size {
        o.queue_size = q;
    } else {
        o.queue_size = o.queue_size.max(min_queue_size);
    }
    if let Some(k) = conn.keep_alive_tmo {
        o.kato_ms = k.saturating_mul(MS_PER_SEC);
    }
    o.command_timeout = s.timeout;
    o.stuck_command_warn = Duration::from_secs(conn.stuck_warn);
    o.connect_timeout = s.timeout;
    o.dhchap = dhchap_keys(conn)?;
    Ok(o)
}

/// `--dhchap-secret` / `--dhchap-ctrl-secret`, parsed (errors never echo the secret).
pub(super) fn dhchap_keys(conn: &ConnArgs) -> Result<Option<HostKeys>, CliError> {
    let parse = |flag: &str, v: &str| {
        v.parse::<DhchapSecret>()
            .map_err(|e| CliError::Usage(format!("{flag}: {e}")))
    };
    let Some(host) = &conn.dhchap_secret else {
        return Ok(None);
    };
    Ok(Some(HostKeys {
        host_key: parse("--dhchap-secret", &host.0)?,
        ctrl_key: conn
            .dhchap_ctrl_secret
            .as_ref()
            .map(|c| parse("--dhchap-ctrl-secret", &c.0))
            .transpose()?,
    }))
}

/// Connects with one I/O queue and runs `f` on namespace `nsid`.
pub(super) fn with_ns<T>(
    conn: &ConnArgs,
    nsid: u32,
    f: impl FnOnce(&mut NsIo<'_>) -> Result<T, Error>,
) -> Result<T, CliError> {
    let s = open(conn)?;
    let o = connect_options(conn, &s, 1, 0)?;
    let mut ctrl = connect_any(conn, &s, o)?;
    let mut qs = ctrl.take_io_queues();
    let q = qs
        .first_mut()
        .ok_or_else(|| CliError::Failed(Error::Protocol("no I/O queue was granted".into())))?;
    let r = {
        let mut io = NsIo::new(&ctrl, q, Nsid(nsid))?;
        f(&mut io)
    };
    drop(qs);
    let out = r?;
    ctrl.shutdown()?;
    Ok(out)
}
