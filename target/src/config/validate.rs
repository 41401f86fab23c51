//! The semantic checks of [`Config::validate`](super::Config::validate).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::error::KeyPath;
use super::locate::locate_nearest;
use super::{
    AdrFam, Config, ConfigError, ConfigErrorKind, NamespaceConfig, PassthruConfig, PortConfig,
    ReferralConfig, SubsystemConfig, TrType, Treq, Tsas, MODEL_MAX_LEN, SECRET_CEPH_OPTIONS,
    SERIAL_MAX_LEN,
};
use nvmf_common::types::{Cntlid, Nqn, Nsid, DISCOVERY_NQN};

const KIB: u32 = 1024;
const MIB: u32 = 1024 * 1024;
/// Smallest and largest logical block sizes (powers of two in between).
const MIN_BLOCK_SIZE: u32 = 512;
const MAX_BLOCK_SIZE: u32 = 64 * KIB;
/// Block size of RAM and null namespaces that set none.
const DEFAULT_BLOCK_SIZE: u32 = 512;
/// The Ceph option a namespace names with its own `keyring` key.
const CEPH_KEYRING_OPTION: &str = "keyring";

struct Checker<'a> {
    origin: &'a str,
    text: Option<&'a str>,
    errors: Vec<ConfigError>,
    /// What is allowed but probably not meant (a subsystem on no port).
    warnings: Vec<String>,
}

impl Checker<'_> {
    fn warn(&mut self, message: impl Into<String>) {
        self.warnings.push(message.into());
    }

    fn err(&mut self, path: &KeyPath, message: impl Into<String>) {
        let location = self.text.and_then(|t| locate_nearest(t, path.segs()));
        self.errors.push(ConfigError::new(
            ConfigErrorKind::Invalid,
            self.origin,
            location,
            path.to_string(),
            message.into(),
        ));
    }
}

/// All problems of `config`, ordered by line (those without one last), and the
/// warnings (allowed, but probably not meant).
pub(super) fn validate(
    config: &Config,
    origin: &str,
    text: Option<&str>,
) -> (Vec<ConfigError>, Vec<String>) {
    let mut c = Checker {
        origin,
        text,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    let root = KeyPath::root();
    check_transport(&mut c, config, &root.key("transport"));
    check_tcp(&mut c, config, &root.key("tcp"));
    check_range(
        &mut c,
        &root.key("rdma").key("srq_depth"),
        config.rdma.srq_depth,
        super::RDMA_SRQ_DEPTH_RANGE.0,
        super::RDMA_SRQ_DEPTH_RANGE.1,
    );
    check_metrics(&mut c, config, &root.key("metrics"));
    check_management(&mut c, config, &root.key("management"));
    if let Some(g) = &config.gateway_group {
        let k = root.key("gateway_group");
        for (key, why) in g.problems() {
            c.err(&k.key(key), why);
        }
    }

    check_hosts(&mut c, config, &root.key("hosts"));
    check_ana(&mut c, config);
    let subsystems = root.key("subsystems");
    let mut nqns: HashMap<&Nqn, usize> = HashMap::new();
    let mut uuids: HashMap<uuid::Uuid, String> = HashMap::new();
    let mut nguids: HashMap<[u8; 16], String> = HashMap::new();
    let mut passthru_devices: HashMap<std::path::PathBuf, usize> = HashMap::new();
    for (i, sub) in config.subsystems.iter().enumerate() {
        let s = subsystems.index(i);
        if let Some(&first) = nqns.get(&sub.nqn) {
            c.err(
                &s.key("nqn"),
                format!(
                    "duplicate subsystem NQN {} (also subsystems[{first}])",
                    sub.nqn
                ),
            );
        } else {
            nqns.insert(&sub.nqn, i);
        }
        check_subsystem(&mut c, config, sub, &s);
        if let Some(p) = &sub.passthru {
            // One subsystem per controller, as nvmet keeps one per device: two
            // would each believe they own its features and namespaces.
            if let Some(first) = passthru_devices.insert(p.device_path.clone(), i) {
                passthru_devices.insert(p.device_path.clone(), first);
                c.err(
                    &s.key("passthru").key("device_path"),
                    format!(
                        "{} is already the passthru device of subsystems[{first}]",
                        p.device_path.display()
                    ),
                );
            }
        }
        for (j, ns) in sub.namespaces.iter().enumerate() {
            let n = s.key("namespaces").index(j);
            if let Some(u) = ns.uuid {
                if let Some(first) = uuids.insert(u, n.to_string()) {
                    c.err(&n.key("uuid"), format!("duplicate UUID {u} (also {first})"));
                    uuids.insert(u, first);
                }
            }
            if let Some(g) = ns.nguid {
                if let Some(first) = nguids.insert(g.0, n.to_string()) {
                    c.err(
                        &n.key("nguid"),
                        format!("duplicate NGUID {g} (also {first})"),
                    );
                    nguids.insert(g.0, first);
                }
            }
        }
    }

    let ports = root.key("ports");
    let mut portids: HashMap<u16, usize> = HashMap::new();
    let mut listeners: HashMap<(TrType, String, String), usize> = HashMap::new();
    for (i, port) in config.ports.iter().enumerate() {
        let p = ports.index(i);
        if let Some(first) = portids.insert(port.portid, i) {
            portids.insert(port.portid, first);
            c.err(
                &p.key("portid"),
                format!("duplicate portid {} (also ports[{first}])", port.portid),
            );
        }
        check_port(&mut c, config, port, &p);
        if port.trtype.is_network() {
            let key = (port.trtype, port.traddr.clone(), port.trsvcid.clone());
            if let Some(&first) = listeners.get(&key) {
                c.err(
                    &p,
                    format!(
                        "{} {}:{} is already the address of ports[{first}]",
                        port.trtype, port.traddr, port.trsvcid
                    ),
                );
            } else {
                listeners.insert(key, i);
            }
        }
    }
    // (A gateway of a group gets its listeners from the group, never from its file.)
    if config.ports.is_empty() && config.gateway_group.is_none() {
        c.warn("the configuration has no ports: nothing will be served");
    }

    let mut errors = c.errors;
    errors.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
    (errors, c.warnings)
}

fn check_range<T: PartialOrd + std::fmt::Display + Copy>(
    c: &mut Checker<'_>,
    path: &KeyPath,
    v: T,
    min: T,
    max: T,
) {
    if v < min || v > max {
        c.err(path, format!("{v} is out of range: must be {min} to {max}"));
    }
}

fn check_transport(c: &mut Checker<'_>, config: &Config, t: &KeyPath) {
    let tc = &config.transport;
    check_range(c, &t.key("max_queue_size"), tc.max_queue_size, 2, 1024);
    check_range(
        c,
        &t.key("max_admin_queue_size"),
        tc.max_admin_queue_size,
        2,
        4096,
    );
    check_range(c, &t.key("max_io_queues"), tc.max_io_queues, 1, 1024);
    check_range(c, &t.key("poll_groups"), tc.poll_groups, 1, 256);
    if let Some(cpus) = &tc.cpus {
        // Refused here rather than when a poll group fails to pin itself at start.
        let missing = cpus.not_allowed();
        if !missing.is_empty() {
            let list: Vec<String> = missing.iter().map(usize::to_string).collect();
            c.err(
                &t.key("cpus"),
                format!("CPU {} is not available to this process", list.join(", ")),
            );
        }
    }

    let icd = tc.in_capsule_data_size;
    let icd_path = t.key("in_capsule_data_size");
    let network = config
        .ports
        .iter()
        .enumerate()
        .find(|(_, p)| p.trtype.is_network());
    if !(4 * KIB..=MIB).contains(&icd) {
        c.err(
            &icd_path,
            format!("{icd} is out of range: must be {} to {MIB}", 4 * KIB),
        );
    } else if icd & 15 != 0 {
        c.err(&icd_path, format!("{icd} is not a multiple of 16"));
    } else if let Some((i, p)) = network.filter(|_| icd < 8 * KIB) {
        c.err(
            &icd_path,
            format!(
                "{icd} is too small: rdma and tcp ports need at least {} (ports[{i}] is {})",
                8 * KIB,
                p.trtype
            ),
        );
    }

    let mio = tc.max_io_size;
    let mio_path = t.key("max_io_size");
    if !mio.is_power_of_two() {
        c.err(&mio_path, format!("{mio} is not a power of two"));
    } else {
        check_range(c, &mio_path, mio, 4 * KIB, 8 * MIB);
    }

    if tc.keep_alive_timeout_ms < 1000 {
        c.err(
            &t.key("keep_alive_timeout_ms"),
            format!(
                "{} is too small: must be at least 1000 (1 s)",
                tc.keep_alive_timeout_ms
            ),
        );
    }
    if !(AUTH_TIMEOUT_MIN_MS..=AUTH_TIMEOUT_MAX_MS).contains(&tc.auth_timeout_ms) {
        c.err(
            &t.key("auth_timeout_ms"),
            format!(
                "{} is not in {AUTH_TIMEOUT_MIN_MS}..={AUTH_TIMEOUT_MAX_MS} (ms)",
                tc.auth_timeout_ms
            ),
        );
    }
    if !(STUCK_COMMAND_MIN_MS..=STUCK_COMMAND_MAX_MS).contains(&tc.stuck_command_ms) {
        c.err(
            &t.key("stuck_command_ms"),
            format!(
                "{} is not in {STUCK_COMMAND_MIN_MS}..={STUCK_COMMAND_MAX_MS} (ms)",
                tc.stuck_command_ms
            ),
        );
    }
}

/// Bounds of `transport.auth_timeout_ms`: 1 s to 10 minutes.
const AUTH_TIMEOUT_MIN_MS: u32 = 1000;
const AUTH_TIMEOUT_MAX_MS: u32 = 600_000;
/// Bounds of `transport.stuck_command_ms`: 100 ms to one hour (no "never": a command
/// that is never answered must always show).
const STUCK_COMMAND_MIN_MS: u32 = 100;
const STUCK_COMMAND_MAX_MS: u32 = 3_600_000;

fn check_tcp(c: &mut Checker<'_>, config: &Config, t: &KeyPath) {
    use super::tcp::{
        TCP_ARENA_RANGE, TCP_MAX_PDU_DATA, TCP_MAX_R2T_RANGE, TCP_MIN_PDU_DATA, TCP_MIN_STALL_MS,
        TCP_TLS_HANDSHAKE_RANGE,
    };
    check_range(
        c,
        &t.key("tls_handshake_timeout_ms"),
        config.tcp.tls_handshake_timeout_ms,
        TCP_TLS_HANDSHAKE_RANGE.0,
        TCP_TLS_HANDSHAKE_RANGE.1,
    );
    let tc = &config.tcp;
    let errors_before = c.errors.len();
    let h2c = t.key("maxh2cdata");
    check_range(c, &h2c, tc.maxh2cdata, TCP_MIN_PDU_DATA, TCP_MAX_PDU_DATA);
    if !tc.maxh2cdata.is_multiple_of(4) {
        c.err(&h2c, format!("{} is not a multiple of 4", tc.maxh2cdata));
    }
    check_range(
        c,
        &t.key("max_r2t_per_command"),
        tc.max_r2t_per_command,
        TCP_MAX_R2T_RANGE.0,
        TCP_MAX_R2T_RANGE.1,
    );
    check_range(
        c,
        &t.key("c2h_chunk"),
        tc.c2h_chunk,
        TCP_MIN_PDU_DATA,
        TCP_MAX_PDU_DATA,
    );
    if tc.stall_timeout_ms < TCP_MIN_STALL_MS {
        c.err(
            &t.key("stall_timeout_ms"),
            format!(
                "{} is too small: must be at least {TCP_MIN_STALL_MS} (1 s)",
                tc.stall_timeout_ms
            ),
        );
    }
    check_range(
        c,
        &t.key("arena_bytes"),
        tc.arena_bytes,
        TCP_ARENA_RANGE.0,
        TCP_ARENA_RANGE.1,
    );
    if c.errors.len() > errors_before {
        return; // sizes out of range: the arena check would only repeat them
    }
    // The largest command's buffer, every read chunk and every R2T window must fit in
    // the arena with room to spare.
    let largest = u64::from(
        tc.maxh2cdata
            .max(tc.c2h_chunk)
            .max(config.transport.max_io_size),
    );
    if tc.arena_bytes < 4 * largest {
        c.err(
            &t.key("arena_bytes"),
            format!(
                "{} is too small for PDUs of {largest} bytes: at least {}",
                tc.arena_bytes,
                4 * largest
            ),
        );
    }
}

/// `metrics.listen` must be an `ADDR:PORT` socket address (port 0: any free port).
fn check_metrics(c: &mut Checker<'_>, config: &Config, m: &KeyPath) {
    let Some(mc) = &config.metrics else { return };
    if mc.socket_addr().is_none() {
        c.err(
            &m.key("listen"),
            format!(
                "{:?} is not ADDR:PORT (e.g. 127.0.0.1:{} or [::1]:{})",
                mc.listen,
                super::METRICS_EXAMPLE_PORT,
                super::METRICS_EXAMPLE_PORT
            ),
        );
    }
}

/// `management`: an `ADDR:PORT`, the three PEM paths given, no subject in both roles.
fn check_management(c: &mut Checker<'_>, config: &Config, m: &KeyPath) {
    let Some(mc) = &config.management else { return };
    if mc.socket_addr().is_none() {
        c.err(
            &m.key("listen"),
            format!(
                "{:?} is not ADDR:PORT (e.g. 0.0.0.0:{})",
                mc.listen,
                super::MANAGEMENT_EXAMPLE_PORT
            ),
        );
    }
    for (key, path) in [("ca", &mc.ca), ("cert", &mc.cert), ("key", &mc.key)] {
        if path.as_os_str().is_empty() {
            c.err(&m.key(key), "a PEM file path is required".to_string());
        }
    }
    for (i, name) in mc.readers.iter().enumerate() {
        if mc.admins.contains(name) {
            c.err(
                &m.key("readers").index(i),
                format!("{name:?} is also in admins: give each subject one role"),
            );
        }
    }
}

/// Checks a listening or referred address: `traddr` an IP literal of the right family
/// (anything non-empty for InfiniBand), `trsvcid` a port number.
fn check_address(
    c: &mut Checker<'_>,
    path: &KeyPath,
    trtype: TrType,
    adrfam: AdrFam,
    traddr: &str,
    trsvcid: &str,
) {
    match adrfam {
        AdrFam::Loopback => c.err(
            &path.key("adrfam"),
            format!("adrfam loopback is only for loopback ports, not {trtype}"),
        ),
        AdrFam::Ib if trtype != TrType::Rdma => c.err(
            &path.key("adrfam"),
            format!("adrfam ib is only for rdma, not {trtype}"),
        ),
        _ => {}
    }
    let addr_path = path.key("traddr");
    if traddr.is_empty() {
        c.err(
            &addr_path,
            format!("required for {trtype}: the IP address to use, e.g. 127.0.0.1"),
        );
    } else {
        let ok = match adrfam {
            AdrFam::Ipv4 => traddr.parse::<Ipv4Addr>().is_ok(),
            AdrFam::Ipv6 => traddr.parse::<Ipv6Addr>().is_ok(),
            AdrFam::Ib => true,
            AdrFam::Loopback => traddr.parse::<IpAddr>().is_ok(),
        };
        if !ok {
            c.err(&addr_path, format!("{traddr:?} is not an {adrfam} address"));
        }
    }
    let svc_path = path.key("trsvcid");
    if trsvcid.is_empty() {
        c.err(
            &svc_path,
            format!("required for {trtype}: the port number, e.g. \"4420\""),
        );
    } else if !matches!(trsvcid.parse::<u16>(), Ok(1..)) {
        c.err(
            &svc_path,
            format!("{trsvcid:?} is not a port number (1 to 65535)"),
        );
    }
}

fn check_port(c: &mut Checker<'_>, config: &Config, port: &PortConfig, p: &KeyPath) {
    if port.trtype.is_network() {
        check_address(
            c,
            p,
            port.trtype,
            port.adrfam(),
            &port.traddr,
            &port.trsvcid,
        );
    }

    let mut seen: HashSet<&Nqn> = HashSet::new();
    for (j, nqn) in port.subsystems.iter().enumerate() {
        let sp = p.key("subsystems").index(j);
        if nqn.is_discovery() {
            c.err(
                &sp,
                format!("{DISCOVERY_NQN} is served on every port; do not list it"),
            );
        } else if config.subsystem(nqn).is_none() {
            c.err(
                &sp,
                format!("unknown subsystem {nqn}: it is not in the top-level subsystems list"),
            );
        }
        if !seen.insert(nqn) {
            c.err(&sp, format!("subsystem {nqn} is listed twice"));
        }
    }

    for (j, r) in port.referrals.iter().enumerate() {
        check_referral(c, r, &p.key("referrals").index(j));
    }

    if port.tsas != Tsas::None && port.trtype != TrType::Tcp {
        c.err(
            &p.key("tsas"),
            format!("tsas tls1.3 is for tcp ports, not {}", port.trtype),
        );
    }
    if port.tsas == Tsas::None && port.treq == Some(Treq::Required) {
        c.err(
            &p.key("treq"),
            "treq: required needs a secure channel: add tsas: tls1.3".to_string(),
        );
    }
}

fn check_referral(c: &mut Checker<'_>, r: &ReferralConfig, rp: &KeyPath) {
    if !r.trtype.is_network() {
        c.err(
            &rp.key("trtype"),
            format!("a referral must be rdma or tcp, not {}", r.trtype),
        );
        return;
    }
    check_address(c, rp, r.trtype, r.adrfam(), &r.traddr, &r.trsvcid);
}

/// Whether `s` is printable ASCII (what Identify Controller's SN and MN fields hold).
fn printable_ascii(s: &str) -> bool {
    s.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

fn check_text(c: &mut Checker<'_>, path: &KeyPath, v: &str, max: usize) {
    if v.is_empty() {
        c.err(
            path,
            "must not be empty (leave the key out for the default)",
        );
    } else if !printable_ascii(v) {
        c.err(
            path,
            format!("{v:?} has characters other than printable ASCII"),
        );
    } else if v.len() > max {
        c.err(
            path,
            format!("{v:?} is {} characters, the limit is {max}", v.len()),
        );
    }
}

fn check_subsystem(c: &mut Checker<'_>, config: &Config, sub: &SubsystemConfig, s: &KeyPath) {
    if sub.nqn.is_discovery() {
        c.err(
            &s.key("nqn"),
            format!("{DISCOVERY_NQN} is the discovery subsystem, which is built in and cannot be configured"),
        );
    } else if let Err(e) = sub.nqn.check_format() {
        c.err(&s.key("nqn"), e);
    }
    if let Some(serial) = &sub.serial {
        check_text(c, &s.key("serial"), serial, SERIAL_MAX_LEN);
    }
    if let Some(model) = &sub.model {
        check_text(c, &s.key("model"), model, MODEL_MAX_LEN);
    }

    let (min, max) = (sub.cntlid_min, sub.cntlid_max);
    for (key, v) in [("cntlid_min", min), ("cntlid_max", max)] {
        check_range(c, &s.key(key), v.0, Cntlid::MIN.0, Cntlid::MAX.0);
    }
    if min > max {
        c.err(
            &s.key("cntlid_min"),
            format!("cntlid_min {} is greater than cntlid_max {}", min.0, max.0),
        );
    }

    let mut hosts: HashSet<&Nqn> = HashSet::new();
    for (j, host) in sub.allowed_hosts.iter().enumerate() {
        let hp = s.key("allowed_hosts").index(j);
        if host.is_discovery() {
            c.err(&hp, "the discovery NQN is not a host NQN");
        }
        if !hosts.insert(host) {
            c.err(&hp, format!("host {host} is listed twice"));
        }
    }
    if !sub.allow_any_host && sub.allowed_hosts.is_empty() {
        c.warn(format!(
            "subsystem {}: allow_any_host is false and allowed_hosts is empty: no host can connect",
            sub.nqn
        ));
    }
    if !config.ports.iter().any(|p| p.exports(&sub.nqn)) {
        c.warn(format!("subsystem {} is not exported on any port", sub.nqn));
    }

    let mut nsids: HashMap<Nsid, usize> = HashMap::new();
    for (j, ns) in sub.namespaces.iter().enumerate() {
        let n = s.key("namespaces").index(j);
        if let Some(&first) = nsids.get(&ns.nsid) {
            c.err(
                &n.key("nsid"),
                format!(
                    "duplicate nsid {} (also namespaces[{first}] of this subsystem)",
                    ns.nsid
                ),
            );
        } else {
            nsids.insert(ns.nsid, j);
        }
        check_namespace(c, config, ns, &n);
    }
    if let Some(p) = &sub.passthru {
        check_passthru(c, sub, p, &s.key("passthru"));
    }
}

/// A passthru subsystem exports its device's namespaces, so it has none of its own.
fn check_passthru(c: &mut Checker<'_>, sub: &SubsystemConfig, p: &PassthruConfig, k: &KeyPath) {
    if !sub.namespaces.is_empty() {
        c.err(
            k,
            format!(
                "subsystem {} has both passthru and namespaces ({}): a passthru subsystem \
                 exports the namespaces of {}, so namespaces must be left out",
                sub.nqn,
                sub.namespaces.len(),
                p.device_path.display()
            ),
        );
    }
    for (key, why) in p.problems() {
        c.err(&k.key(key), format!("subsystem {}: {why}", sub.nqn));
    }
}

fn check_namespace(c: &mut Checker<'_>, config: &Config, ns: &NamespaceConfig, n: &KeyPath) {
    if ns.nsid == Nsid::NONE || ns.nsid == Nsid::BROADCAST {
        c.err(
            &n.key("nsid"),
            format!(
                "{} is reserved: must be 1 to {}",
                ns.nsid,
                Nsid::BROADCAST.0 - 1
            ),
        );
    }

    let bs_path = n.key("block_size");
    let mut block_size_ok = true;
    if let Some(bs) = ns.block_size {
        if !bs.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&bs) {
            block_size_ok = false;
            c.err(
                &bs_path,
                format!("{bs} is not a power of two from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE}"),
            );
        } else if bs > config.transport.max_io_size {
            c.err(
                &bs_path,
                format!(
                    "{bs} is larger than transport.max_io_size {}",
                    config.transport.max_io_size
                ),
            );
        }
    }

    let dp = n.key("device_path");
    match device_size(&ns.device_path) {
        Err(e) => c.err(&dp, e),
        Ok(Some((kind, size))) => {
            let bs = u64::from(ns.block_size.unwrap_or(DEFAULT_BLOCK_SIZE));
            if size == 0 {
                c.err(&dp, format!("{kind} namespace size must not be zero"));
            } else if block_size_ok && size & (bs - 1) != 0 {
                c.err(
                    &dp,
                    format!(
                        "{kind} namespace size {size} is not a multiple of the block size {bs}"
                    ),
                );
            }
        }
        Ok(None) => {}
    }

    if ns.io_path == super::IoPath::Passthru {
        let ip = n.key("io_path");
        let nvme_block = ns
            .device_path
            .strip_prefix("/dev/nvme")
            .is_some_and(|r| r.contains('n') && !r.contains('c') && !r.contains('p'));
        if !nvme_block {
            c.err(
                &ip,
                format!(
                    "passthru needs an NVMe namespace block device (/dev/nvmeXnY), not {}",
                    ns.device_path
                ),
            );
        }
        if ns.buffered_io {
            c.err(
                &ip,
                "passthru bypasses the page cache: buffered_io must be false".to_string(),
            );
        }
        if ns.block_size.is_some() {
            c.err(
                &ip,
                "passthru uses the device's block size: block_size must not be set".to_string(),
            );
        }
    }

    let is_rbd = ns.device_path.starts_with("rbd:");
    for (key, set) in [
        ("ceph_conf", ns.ceph_conf.is_some()),
        ("client_id", ns.client_id.is_some()),
        ("keyring", ns.keyring.is_some()),
        ("ceph_options", !ns.ceph_options.is_empty()),
    ] {
        if set && !is_rbd {
            c.err(
                &n.key(key),
                format!("only for rbd:POOL/IMAGE namespaces, not {}", ns.device_path),
            );
        }
    }
    if let Some(id) = &ns.client_id {
        if id.is_empty() || id.contains('\0') || id.starts_with("client.") {
            c.err(
                &n.key("client_id"),
                format!("{id:?} is not a Ceph client id (`admin` for client.admin)"),
            );
        }
    }

    let opts = n.key("ceph_options");
    for (key, value) in &ns.ceph_options {
        let at = opts.key(key);
        // Values are never echoed: an operator may have put something private there.
        if key.is_empty() {
            c.err(&opts, "an option name is empty");
        } else if key.contains('\0') {
            c.err(&at, "not a Ceph option name");
        } else if SECRET_CEPH_OPTIONS.contains(&key.as_str()) {
            c.err(
                &at,
                "a Ceph secret does not belong in this configuration: name a keyring file \
                 with `keyring`",
            );
        } else if key == CEPH_KEYRING_OPTION {
            c.err(&at, "set the namespace's `keyring` instead");
        } else if value.contains('\0') {
            c.err(&at, "the value contains a NUL byte");
        }
    }

    if let Err((key, why)) = ns.qos.check() {
        c.err(&n.key("qos").key(key), why);
    }
    if ns.uuid.is_some_and(|u| u.is_nil()) {
        c.err(&n.key("uuid"), "the nil UUID is not a namespace UUID");
    }
    if ns.nguid.is_some_and(|g| g.is_zero()) {
        c.err(
            &n.key("nguid"),
            "an all-zero NGUID is not a namespace NGUID",
        );
    }
    for (path, message) in super::visibility::check(ns, n) {
        c.err(&path, message);
    }
}

/// Checks a device path: `Some((kind, size))` for `ram:SIZE` and `null:SIZE`, `None`
/// for an RBD image or a file or block device path (`file:PATH` or anything else).
fn device_size(spec: &str) -> Result<Option<(&'static str, u64)>, String> {
    if spec.is_empty() {
        return Err(
            "must not be empty: a file or block device path, ram:SIZE, null:SIZE or \
             rbd:POOL/IMAGE"
                .into(),
        );
    }
    if spec.starts_with("rbd:") {
        return spec.parse::<super::spec::NamespaceSpec>().map(|_| None);
    }
    for kind in ["ram", "null"] {
        if let Some(size) = spec.strip_prefix(kind).and_then(|r| r.strip_prefix(':')) {
            return super::spec::parse_size(size)
                .map(|n| Some((kind, n)))
                .map_err(|e| format!("{spec:?}: {e}"));
        }
    }
    if spec.strip_prefix("file:") == Some("") {
        return Err(format!("{spec:?}: empty path"));
    }
    Ok(None)
}

/// ANA group ids: 1..=128, each state given once per port.
fn check_ana(c: &mut Checker<'_>, config: &Config) {
    let max = nvmf_common::wire::ana::MAX_GROUPS;
    let ports = KeyPath::root().key("ports");
    for (i, p) in config.ports.iter().enumerate() {
        let mut seen = HashSet::new();
        for (j, g) in p.ana_groups.iter().enumerate() {
            let path = ports.index(i).key("ana_groups").index(j).key("grpid");
            if g.grpid == 0 || g.grpid > max {
                c.err(
                    &path,
                    format!("ANA group id {} is not in 1..={max}", g.grpid),
                );
            } else if !seen.insert(g.grpid) {
                c.err(&path, format!("ANA group {} listed twice", g.grpid));
            }
        }
    }
    let subs = KeyPath::root().key("subsystems");
    for (i, s) in config.subsystems.iter().enumerate() {
        for (j, n) in s.namespaces.iter().enumerate() {
            if let Some(g) = n.anagrpid.filter(|g| *g == 0 || *g > max) {
                let path = subs.index(i).key("namespaces").index(j).key("anagrpid");
                c.err(&path, format!("ANA group id {g} is not in 1..={max}"));
            }
        }
    }
}

/// Host entries: unique NQNs, and keys (and key files) that read and parse.
fn check_hosts(c: &mut Checker<'_>, config: &Config, path: &KeyPath) {
    let mut seen: HashMap<&Nqn, usize> = HashMap::new();
    for (i, h) in config.hosts.iter().enumerate() {
        let p = path.index(i);
        if let Some(&first) = seen.get(&h.nqn) {
            c.err(
                &p.key("nqn"),
                format!("duplicate host NQN {} (also hosts[{first}])", h.nqn),
            );
        } else {
            seen.insert(&h.nqn, i);
        }
        if let Err((field, msg)) = h.policy() {
            c.err(&p.key(field), msg);
        }
        if let Err((field, msg)) = h.tls_psk() {
            c.err(&p.key(field), msg);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        use super::super::spec::parse_size;
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("2TiB"), Ok(2 << 40));
        assert!(parse_size("1X").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("20000000T").is_err());
    }

    #[test]
    fn device_paths() {
        assert_eq!(device_size("ram:1M"), Ok(Some(("ram", 1 << 20))));
        assert_eq!(device_size("null:4k"), Ok(Some(("null", 4096))));
        assert_eq!(device_size("/dev/nvme0n1"), Ok(None));
        assert_eq!(device_size("file:/tmp/x"), Ok(None));
        assert!(device_size("").is_err());
        assert!(device_size("file:").is_err());
        assert!(device_size("ram:").is_err());
        assert!(device_size("ram:lots").is_err());
    }
}
