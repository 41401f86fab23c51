//! Discovery: read a discovery controller's log page and print it like `nvme discover`.
//!
//! Owned by the host library. [`discover_log`] connects to the well-known discovery NQN
//! (no I/O queues, no keep-alive), brings the controller up, and reads log page 0x70:
//! the 1024-byte header first, then the whole page (header + NUMREC × 1024 bytes, split
//! by MDTS), then the header again; if the generation counter moved in between, the
//! log changed under us and it is read again (a few tries at most).

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};

use nvmf_common::types::{Nqn, Nsid};
use nvmf_common::wire::log::{
    adrfam, disc_log_entry_offset, disc_log_len, eflags, lid, rdma_cms, rdma_prtype, rdma_qptype,
    subtype, tcp_sectype, treq, trtype, DiscoveryLogEntry, DiscoveryLogHeader, DISC_LOG_HEADER_LEN,
};

use crate::controller::{ConnectOptions, Controller};
use crate::error::Error;
use crate::transport::Fabric;

/// Reads of the log before giving up on a generation counter that keeps moving.
pub const MAX_READ_TRIES: u32 = 5;
/// The most records accepted (4 MiB of log): bounds what a peer can make us allocate.
pub const MAX_RECORDS: u64 = 4096;

/// One discovery log entry, parsed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DiscoveryEntry {
    pub trtype: u8,
    pub adrfam: u8,
    pub subtype: u8,
    pub treq: u8,
    pub portid: u16,
    pub cntlid: u16,
    pub asqsz: u16,
    pub eflags: u16,
    pub trsvcid: String,
    pub subnqn: String,
    pub traddr: String,
    /// The raw 256-byte transport specific address subtype.
    #[serde(skip)]
    pub tsas: Vec<u8>,
    pub rdma_qptype: u8,
    pub rdma_prtype: u8,
    pub rdma_cms: u8,
    pub rdma_pkey: u16,
    pub tcp_sectype: u8,
}

impl DiscoveryEntry {
    /// Parses one 1024-byte entry.
    pub fn parse(raw: &[u8]) -> Result<DiscoveryEntry, Error> {
        let e = DiscoveryLogEntry::new_checked(raw)
            .map_err(|e| Error::Protocol(format!("discovery log entry: {e}")))?;
        Ok(DiscoveryEntry {
            trtype: e.trtype(),
            adrfam: e.adrfam(),
            subtype: e.subtype(),
            treq: e.treq(),
            portid: e.portid(),
            cntlid: e.cntlid(),
            asqsz: e.asqsz(),
            eflags: e.eflags(),
            trsvcid: e.trsvcid(),
            subnqn: e.subnqn(),
            traddr: e.traddr(),
            tsas: e.tsas().to_vec(),
            rdma_qptype: e.rdma_qptype(),
            rdma_prtype: e.rdma_prtype(),
            rdma_cms: e.rdma_cms(),
            rdma_pkey: e.rdma_pkey(),
            tcp_sectype: e.tcp_sectype(),
        })
    }

    /// True for an NVM subsystem (not a referral or the discovery subsystem itself).
    pub fn is_nvm_subsystem(&self) -> bool {
        self.subtype == subtype::NVME
    }
}

/// A whole discovery log page.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DiscoveryLog {
    pub genctr: u64,
    pub numrec: u64,
    pub recfmt: u16,
    pub entries: Vec<DiscoveryEntry>,
}

/// Parses a discovery log page: the header and NUMREC entries (the page must hold
/// them all).
pub fn parse_discovery_log(page: &[u8]) -> Result<DiscoveryLog, Error> {
    let h = DiscoveryLogHeader::new_checked(page)
        .map_err(|e| Error::Protocol(format!("discovery log header: {e}")))?;
    let numrec = h.numrec();
    if numrec > MAX_RECORDS {
        return Err(Error::Protocol(format!(
            "discovery log has {numrec} records; at most {MAX_RECORDS} are accepted"
        )));
    }
    let n = numrec as usize;
    if page.len() < disc_log_len(n) {
        return Err(Error::Protocol(format!(
            "discovery log page of {} bytes is too short for {n} records",
            page.len()
        )));
    }
    let entries = (0..n)
        .map(|i| {
            let o = disc_log_entry_offset(i);
            DiscoveryEntry::parse(page.get(o..).unwrap_or(&[]))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(DiscoveryLog {
        genctr: h.genctr(),
        numrec,
        recfmt: h.recfmt(),
        entries,
    })
}

fn header(page: &[u8]) -> Result<(u64, u64), Error> {
    let h = DiscoveryLogHeader::new_checked(page)
        .map_err(|e| Error::Protocol(format!("discovery log header: {e}")))?;
    Ok((h.genctr(), h.numrec()))
}

/// Reads the discovery log from a connected discovery controller, re-reading while
/// the generation counter changes between reads.
pub fn read_discovery_log(ctrl: &Controller) -> Result<DiscoveryLog, Error> {
    let read = |len: usize| ctrl.get_log_page(lid::DISCOVERY, Nsid::NONE, len, 0);
    for attempt in 1..=MAX_READ_TRIES {
        let (genctr, numrec) = header(&read(DISC_LOG_HEADER_LEN)?)?;
        if numrec > MAX_RECORDS {
            return Err(Error::Protocol(format!(
                "discovery log has {numrec} records; at most {MAX_RECORDS} are accepted"
            )));
        }
        let page = if numrec == 0 {
            read(DISC_LOG_HEADER_LEN)?
        } else {
            read(disc_log_len(numrec as usize))?
        };
        let (page_gen, page_numrec) = header(&page)?;
        // The whole page may have been read in several pieces: read the header once more
        // to be sure no piece came from another generation.
        let (after_gen, _) = header(&read(DISC_LOG_HEADER_LEN)?)?;
        if page_gen == genctr && after_gen == genctr && page_numrec == numrec {
            return parse_discovery_log(&page);
        }
        debug!(
            attempt,
            genctr, page_gen, after_gen, "discovery log changed while reading"
        );
    }
    Err(Error::Protocol(format!(
        "discovery log kept changing over {MAX_READ_TRIES} reads"
    )))
}

/// Connects to the discovery controller over `fabric`, reads its log and disconnects.
/// `timeout` bounds each connect and command.
pub fn discover_log(
    fabric: Arc<dyn Fabric>,
    hostnqn: &Nqn,
    hostid: [u8; 16],
    timeout: Duration,
) -> Result<DiscoveryLog, Error> {
    let mut opts = ConnectOptions::discovery(hostnqn.clone(), hostid);
    opts.command_timeout = timeout;
    opts.connect_timeout = timeout;
    discover_log_with(fabric, opts)
}

/// [`discover_log`] with full connect options (keep-alive, queue size, a referral's
/// NQN); `opts.nr_io_queues` is ignored, discovery controllers have none.
pub fn discover_log_with(
    fabric: Arc<dyn Fabric>,
    mut opts: ConnectOptions,
) -> Result<DiscoveryLog, Error> {
    opts.nr_io_queues = 0;
    let ctrl = Controller::connect(fabric, opts)?;
    let log = read_discovery_log(&ctrl);
    if let Err(e) = ctrl.shutdown() {
        warn!(error = %e, "discovery controller shutdown");
    }
    log
}

/// [`discover_log`], entries only.
pub fn discover(
    fabric: Arc<dyn Fabric>,
    hostnqn: &Nqn,
    hostid: [u8; 16],
    timeout: Duration,
) -> Result<Vec<DiscoveryEntry>, Error> {
    Ok(discover_log(fabric, hostnqn, hostid, timeout)?.entries)
}

// ---- printing, with nvme-cli's (libnvme's) strings ----

pub fn trtype_str(v: u8) -> &'static str {
    match v {
        trtype::RDMA => "rdma",
        trtype::FC => "fc",
        trtype::TCP => "tcp",
        trtype::LOOP => "loop",
        trtype::PCI => "pcie",
        _ => "unrecognized",
    }
}

pub fn adrfam_str(v: u8) -> &'static str {
    match v {
        adrfam::IPV4 => "ipv4",
        adrfam::IPV6 => "ipv6",
        adrfam::IB => "infiniband",
        adrfam::FC => "fibre-channel",
        adrfam::LOOP => "loop",
        adrfam::PCI => "pci",
        _ => "unrecognized",
    }
}

pub fn subtype_str(v: u8) -> &'static str {
    match v {
        subtype::REFERRAL => "discovery subsystem referral",
        subtype::NVME => "nvme subsystem",
        subtype::CURRENT_DISCOVERY => "current discovery subsystem",
        _ => "unrecognized",
    }
}

pub fn treq_str(v: u8) -> String {
    let base = match v & treq::SECURE_CHANNEL_MASK {
        treq::NOT_SPECIFIED => "not specified",
        treq::REQUIRED => "required",
        treq::NOT_REQUIRED => "not required",
        _ => "reserved",
    };
    if v & treq::DISABLE_SQFLOW != 0 {
        format!("{base}, sq flow control disable supported")
    } else {
        base.to_string()
    }
}

pub fn eflags_str(v: u16) -> String {
    let names = [
        (eflags::DUPRETINFO, "duplicate discovery information"),
        (eflags::EPCSD, "explicit discovery connections"),
        (eflags::NCC, "no cdc connectivity"),
    ];
    let set: Vec<&str> = names
        .iter()
        .filter(|(bit, _)| v & bit != 0)
        .map(|(_, n)| *n)
        .collect();
    if set.is_empty() {
        "none".to_string()
    } else {
        set.join(", ")
    }
}

pub fn prtype_str(v: u8) -> &'static str {
    match v {
        rdma_prtype::NOT_SPECIFIED => "not specified",
        rdma_prtype::IB => "infiniband",
        rdma_prtype::ROCE => "roce",
        rdma_prtype::ROCEV2 => "roce-v2",
        rdma_prtype::IWARP => "iwarp",
        _ => "unrecognized",
    }
}

pub fn qptype_str(v: u8) -> &'static str {
    match v {
        rdma_qptype::CONNECTED => "connected",
        rdma_qptype::DATAGRAM => "datagram",
        _ => "unrecognized",
    }
}

pub fn cms_str(v: u8) -> &'static str {
    match v {
        rdma_cms::RDMA_CM => "rdma-cm",
        _ => "unrecognized",
    }
}

pub fn sectype_str(v: u8) -> &'static str {
    match v {
        tcp_sectype::NONE => "none",
        tcp_sectype::TLS12 => "tls",
        tcp_sectype::TLS13 => "tls13",
        _ => "unrecognized",
    }
}

/// The log as `nvme discover` prints it.
pub fn format_discovery_log(log: &DiscoveryLog) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Discovery Log Number of Records {}, Generation counter {}",
        log.entries.len(),
        log.genctr
    );
    for (i, e) in log.entries.iter().enumerate() {
        let _ = writeln!(s, "=====Discovery Log Entry {i}======");
        let _ = writeln!(s, "trtype:  {}", trtype_str(e.trtype));
        let adr = if e.traddr.is_empty() {
            ""
        } else {
            adrfam_str(e.adrfam)
        };
        let _ = writeln!(s, "adrfam:  {adr}");
        let _ = writeln!(s, "subtype: {}", subtype_str(e.subtype));
        let _ = writeln!(s, "treq:    {}", treq_str(e.treq));
        let _ = writeln!(s, "portid:  {}", e.portid);
        let _ = writeln!(s, "trsvcid: {}", e.trsvcid);
        let _ = writeln!(s, "subnqn:  {}", e.subnqn);
        let _ = writeln!(s, "traddr:  {}", e.traddr);
        let _ = writeln!(s, "eflags:  {}", eflags_str(e.eflags));
        match e.trtype {
            trtype::RDMA => {
                let _ = writeln!(s, "rdma_prtype: {}", prtype_str(e.rdma_prtype));
                let _ = writeln!(s, "rdma_qptype: {}", qptype_str(e.rdma_qptype));
                let _ = writeln!(s, "rdma_cms:    {}", cms_str(e.rdma_cms));
                let _ = writeln!(s, "rdma_pkey: {:#06x}", e.rdma_pkey);
            }
            trtype::TCP => {
                let _ = writeln!(s, "sectype: {}", sectype_str(e.tcp_sectype));
            }
            _ => {}
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fake_target::{FakeTarget, FakeTargetConfig};
    use nvmf_common::types::DISCOVERY_NQN;

    fn cfg(entries: usize, bumps: u32) -> FakeTargetConfig {
        FakeTargetConfig {
            subnqn: DISCOVERY_NQN.into(),
            discovery: (0..entries)
                .map(|i| {
                    (
                        format!("nqn.2024-01.io.example:sub{i}"),
                        format!("10.0.0.{i}"),
                        "4420".to_string(),
                    )
                })
                .collect(),
            genctr_bumps: bumps,
            mdts: 1, // 8 KiB: a 10-entry log takes two commands
            ..Default::default()
        }
    }

    fn host() -> Nqn {
        Nqn::new("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001").unwrap()
    }

    #[test]
    fn discovers_entries() {
        let t = FakeTarget::new(cfg(10, 0));
        let log = discover_log(t.fabric(), &host(), [1; 16], Duration::from_secs(5)).unwrap();
        assert_eq!(log.numrec, 10);
        assert_eq!(log.entries.len(), 10);
        assert_eq!(log.entries[3].subnqn, "nqn.2024-01.io.example:sub3");
        assert_eq!(log.entries[3].traddr, "10.0.0.3");
        assert_eq!(log.entries[3].trsvcid, "4420");
        assert!(log.entries[0].is_nvm_subsystem());
        // No I/O queues, no keep-alive, and the controller was shut down.
        let l = t.log();
        assert!(!l.iter().any(|s| s.starts_with("set_features")));
        assert!(!l.iter().any(|s| s.starts_with("kato")));
        assert!(l.iter().any(|s| s == "prop_set 0x14 0x464001"));
        // header, whole page (11 KiB in two pieces), header.
        let gets: Vec<&String> = l.iter().filter(|s| s.starts_with("get_log 0x70")).collect();
        assert_eq!(gets.len(), 4, "{gets:?}");
    }

    #[test]
    fn rereads_when_generation_changes() {
        let t = FakeTarget::new(cfg(2, 2));
        let log = discover_log(t.fabric(), &host(), [1; 16], Duration::from_secs(5)).unwrap();
        assert_eq!(log.genctr, 3);
        assert_eq!(log.entries.len(), 2);
        let t = FakeTarget::new(cfg(2, 100));
        let e = discover(t.fabric(), &host(), [1; 16], Duration::from_secs(5)).unwrap_err();
        assert!(e.to_string().contains("kept changing"), "{e}");
    }

    #[test]
    fn empty_log() {
        let t = FakeTarget::new(cfg(0, 0));
        let log = discover_log(t.fabric(), &host(), [1; 16], Duration::from_secs(5)).unwrap();
        assert_eq!(log.entries.len(), 0);
        assert_eq!(
            format_discovery_log(&log),
            "Discovery Log Number of Records 0, Generation counter 1\n"
        );
    }

    #[test]
    fn rejects_bad_pages() {
        let mut page = vec![0u8; 1024];
        DiscoveryLogHeader::new_unchecked(&mut page[..]).set_numrec(2);
        assert!(parse_discovery_log(&page).is_err(), "too short for numrec");
        DiscoveryLogHeader::new_unchecked(&mut page[..]).set_numrec(u64::MAX);
        assert!(parse_discovery_log(&page).is_err());
        assert!(parse_discovery_log(&page[..100]).is_err());
    }

    #[test]
    fn format_like_nvme_cli() {
        let mut rdma = DiscoveryEntry {
            trtype: trtype::RDMA,
            adrfam: adrfam::IPV4,
            subtype: subtype::NVME,
            treq: treq::NOT_SPECIFIED | treq::DISABLE_SQFLOW,
            portid: 1,
            cntlid: 0xFFFF,
            asqsz: 32,
            eflags: 0,
            trsvcid: "4420".into(),
            subnqn: "nqn.2024-01.io.example:sub1".into(),
            traddr: "192.168.0.10".into(),
            tsas: vec![0; 256],
            rdma_qptype: rdma_qptype::CONNECTED,
            rdma_prtype: rdma_prtype::NOT_SPECIFIED,
            rdma_cms: rdma_cms::RDMA_CM,
            rdma_pkey: 0,
            tcp_sectype: 0,
        };
        let mut tcp = rdma.clone();
        tcp.trtype = trtype::TCP;
        tcp.subtype = subtype::CURRENT_DISCOVERY;
        tcp.treq = treq::NOT_REQUIRED;
        tcp.eflags = eflags::EPCSD | eflags::DUPRETINFO;
        tcp.trsvcid = "8009".into();
        tcp.subnqn = DISCOVERY_NQN.into();
        rdma.portid = 2;
        let log = DiscoveryLog {
            genctr: 7,
            numrec: 2,
            recfmt: 0,
            entries: vec![rdma, tcp],
        };
        let expect = "\
Discovery Log Number of Records 2, Generation counter 7
=====Discovery Log Entry 0======
trtype:  rdma
adrfam:  ipv4
subtype: nvme subsystem
treq:    not specified, sq flow control disable supported
portid:  2
trsvcid: 4420
subnqn:  nqn.2024-01.io.example:sub1
traddr:  192.168.0.10
eflags:  none
rdma_prtype: not specified
rdma_qptype: connected
rdma_cms:    rdma-cm
rdma_pkey: 0x0000
=====Discovery Log Entry 1======
trtype:  tcp
adrfam:  ipv4
subtype: current discovery subsystem
treq:    not required
portid:  1
trsvcid: 8009
subnqn:  nqn.2014-08.org.nvmexpress.discovery
traddr:  192.168.0.10
eflags:  duplicate discovery information, explicit discovery connections
sectype: none
";
        assert_eq!(format_discovery_log(&log), expect);
    }
}
