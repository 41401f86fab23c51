//! nvme-cli's discovery configuration file (`/etc/nvme/discovery.conf`): one discovery
//! controller per line, written as the options of `nvme discover` / `nvme connect-all`.
//!
//! Owned by the host library ([`super`]). The file is parsed as nvme-cli parses it
//! (`discover_from_conf_file`, and `nvmf_convert_discovery_line` in nvme-cli 3): a line
//! starting with `#` and a blank line are skipped, a line is split on blanks, each word
//! is a long (`--traddr 10.0.0.1`, `--traddr=10.0.0.1`) or short (`-a 10.0.0.1`,
//! `-a10.0.0.1`) option of nvme-cli's fabrics set, a line with neither `-t` nor `-a` is
//! skipped, and the service id defaults to 8009 for NVMe/TCP and 4420 for NVMe/RDMA
//! (`nvmf_get_default_trsvcid` for a discovery controller). Where nvme-cli's getopt
//! prints a warning and drops the line (an unknown option, a number that is not one, a
//! missing value, stray words), this parser refuses the file with the line and the
//! option, so a typo never silently loses a controller.

use std::fmt;
use std::path::Path;

use nvmf_common::types::DISCOVERY_NQN;
use nvmf_common::wire::log::trtype;

use crate::error::Error;

/// Where nvme-cli reads the discovery controllers from (`PATH_NVMF_DISC`).
pub const DISCOVERY_CONF: &str = "/etc/nvme/discovery.conf";
/// The NVMe/TCP discovery port (`NVME_DISC_IP_PORT`).
pub const NVME_DISC_IP_PORT: &str = "8009";
/// The NVMe/RDMA port, discovery included (`NVME_RDMA_IP_PORT`).
pub const NVME_RDMA_IP_PORT: &str = "4420";
/// A line that starts with this is a comment.
const COMMENT: char = '#';

/// A secret from the file or the command line: zeroed on drop, never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(pub zeroize::Zeroizing<String>);

impl Secret {
    pub fn new(s: &str) -> Secret {
        Secret(zeroize::Zeroizing::new(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One discovery controller to start from, with the connection settings that apply
/// to it and to every controller found through it (nvme-cli's per-line options).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoverySpec {
    /// Where it was written: `FILE:LINE`, or `command line`.
    pub source: String,
    /// nvme-cli's transport name (`tcp`, `rdma`, `fc`, `loop`).
    pub transport: String,
    pub traddr: String,
    pub trsvcid: String,
    /// The discovery subsystem's NQN (`-n`; the well-known one by default).
    pub subnqn: String,
    pub hostnqn: Option<String>,
    pub hostid: Option<String>,
    pub host_traddr: Option<String>,
    pub host_iface: Option<String>,
    pub dhchap_secret: Option<Secret>,
    pub dhchap_ctrl_secret: Option<Secret>,
    pub tls: bool,
    /// `--tls-key`: a PSK in the interchange format (`NVMeTLSkey-1:..`).
    pub tls_key: Option<Secret>,
    pub nr_io_queues: Option<u16>,
    pub queue_size: Option<u16>,
    /// Seconds.
    pub keep_alive_tmo: Option<u32>,
    /// Seconds.
    pub reconnect_delay: Option<u32>,
    /// Seconds; negative: forever.
    pub ctrl_loss_tmo: Option<i32>,
    /// Seconds; negative: off.
    pub fast_io_fail_tmo: Option<i32>,
    pub hdr_digest: bool,
    pub data_digest: bool,
    /// Options nvme-cli accepts that change nothing in this host, as written (kernel
    /// keyring ids, poll and write queues, type of service, output options...).
    pub ignored: Vec<String>,
}

impl DiscoverySpec {
    /// A discovery controller at `transport`/`traddr`/`trsvcid` (None: the default
    /// discovery port of the transport) with default settings.
    pub fn new(source: &str, transport: &str, traddr: &str, trsvcid: Option<&str>) -> Self {
        let mut s = DiscoverySpec {
            source: source.to_owned(),
            transport: transport.to_owned(),
            traddr: traddr.to_owned(),
            trsvcid: trsvcid.unwrap_or_default().to_owned(),
            subnqn: DISCOVERY_NQN.to_owned(),
            ..DiscoverySpec::default()
        };
        s.default_trsvcid();
        s
    }

    /// The transport type code (`trtype`) of [`Self::transport`], if nvme-cli knows it.
    pub fn trtype(&self) -> Option<u8> {
        trtype_from_name(&self.transport)
    }

    fn default_trsvcid(&mut self) {
        if self.trsvcid.is_empty() {
            self.trsvcid = default_discovery_trsvcid(&self.transport)
                .unwrap_or_default()
                .to_owned();
        }
    }
}

/// nvme-cli's transport names (`nvmf_trtype_str`) to `trtype` codes.
pub fn trtype_from_name(name: &str) -> Option<u8> {
    match name {
        "tcp" => Some(trtype::TCP),
        "rdma" => Some(trtype::RDMA),
        "fc" => Some(trtype::FC),
        "loop" => Some(trtype::LOOP),
        _ => None,
    }
}

/// The port of a discovery controller when none is given (`nvmf_get_default_trsvcid`
/// with `discovery_ctrl`): 8009 for NVMe/TCP, 4420 for NVMe/RDMA, none otherwise.
pub fn default_discovery_trsvcid(transport: &str) -> Option<&'static str> {
    match transport {
        "tcp" => Some(NVME_DISC_IP_PORT),
        "rdma" => Some(NVME_RDMA_IP_PORT),
        _ => None,
    }
}

/// What an option sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Transport,
    Nqn,
    Traddr,
    Trsvcid,
    HostTraddr,
    HostIface,
    Hostnqn,
    Hostid,
    DhchapSecret,
    DhchapCtrlSecret,
    TlsPsk,
    NrIoQueues,
    QueueSize,
    KeepAliveTmo,
    ReconnectDelay,
    CtrlLossTmo,
    FastIoFailTmo,
    HdrDigest,
    DataDigest,
    Tls,
    /// Accepted with a value, without effect here.
    IgnoredValue,
    /// Accepted without a value, without effect here.
    IgnoredFlag,
}

impl Key {
    fn takes_value(self) -> bool {
        !matches!(
            self,
            Key::HdrDigest | Key::DataDigest | Key::Tls | Key::IgnoredFlag
        )
    }
}

/// One option of nvme-cli's `NVMF_ARGS` (and the extra ones of a discovery.conf line).
struct OptDef {
    long: &'static str,
    short: Option<char>,
    key: Key,
}

const fn opt(long: &'static str, short: Option<char>, key: Key) -> OptDef {
    OptDef { long, short, key }
}

/// nvme-cli's option table for a discovery.conf line (v2.16 `NVMF_ARGS` plus
/// `discover_from_conf_file`'s own, and nvme-cli 3's additions).
const OPTIONS: &[OptDef] = &[
    opt("transport", Some('t'), Key::Transport),
    opt("nqn", Some('n'), Key::Nqn),
    opt("traddr", Some('a'), Key::Traddr),
    opt("trsvcid", Some('s'), Key::Trsvcid),
    opt("host-traddr", Some('w'), Key::HostTraddr),
    opt("host-iface", Some('f'), Key::HostIface),
    opt("hostnqn", Some('q'), Key::Hostnqn),
    opt("hostid", Some('I'), Key::Hostid),
    opt("dhchap-secret", Some('S'), Key::DhchapSecret),
    opt("dhchap-ctrl-secret", Some('C'), Key::DhchapCtrlSecret),
    opt("keyring", None, Key::IgnoredValue),
    opt("tls-key", None, Key::TlsPsk),
    opt("tls-key-identity", None, Key::IgnoredValue),
    opt("nr-io-queues", Some('i'), Key::NrIoQueues),
    opt("nr-write-queues", Some('W'), Key::IgnoredValue),
    opt("nr-poll-queues", Some('P'), Key::IgnoredValue),
    opt("queue-size", Some('Q'), Key::QueueSize),
    opt("keep-alive-tmo", Some('k'), Key::KeepAliveTmo),
    opt("reconnect-delay", Some('c'), Key::ReconnectDelay),
    opt("ctrl-loss-tmo", Some('l'), Key::CtrlLossTmo),
    opt("fast_io_fail_tmo", Some('F'), Key::FastIoFailTmo),
    opt("fast-io-fail-tmo", None, Key::FastIoFailTmo),
    opt("tos", Some('T'), Key::IgnoredValue),
    opt("tls_key", None, Key::IgnoredValue),
    opt("duplicate-connect", Some('D'), Key::IgnoredFlag),
    opt("disable-sqflow", None, Key::IgnoredFlag),
    opt("hdr-digest", Some('g'), Key::HdrDigest),
    opt("data-digest", Some('G'), Key::DataDigest),
    opt("tls", None, Key::Tls),
    opt("concat", None, Key::IgnoredFlag),
    opt("output-format", Some('o'), Key::IgnoredValue),
    opt("raw", Some('r'), Key::IgnoredValue),
    opt("persistent", Some('p'), Key::IgnoredFlag),
    opt("quiet", None, Key::IgnoredFlag),
    opt("verbose", Some('v'), Key::IgnoredFlag),
    opt("force", None, Key::IgnoredFlag),
    opt("no-reuse", None, Key::IgnoredFlag),
];

/// Reads and parses a discovery configuration file.
pub fn read_discovery_conf(path: &Path) -> Result<Vec<DiscoverySpec>, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::NotFound(format!(
                "no discovery controller given (-t/-a) and no {}",
                path.display()
            ))
        } else {
            Error::Io(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", path.display()),
            ))
        }
    })?;
    let specs = parse_discovery_conf(&text, &path.display().to_string())?;
    check_secret_mode(path, &specs)?;
    Ok(specs)
}

/// Mode bits of a file holding secrets that let anyone but its owner read it.
const SECRET_FILE_FORBIDDEN_MODE: u32 = 0o077;

/// A discovery configuration that holds a secret (`--dhchap-secret`, `--tls-key`)
/// must be readable by its owner only, as our key files must. nvme-cli does not check
/// this; we refuse on purpose: a DH-HMAC-CHAP or TLS secret any local user can read
/// authenticates nothing.
fn check_secret_mode(path: &Path, specs: &[DiscoverySpec]) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let holds_secret = specs.iter().any(|s| {
        s.dhchap_secret.is_some() || s.dhchap_ctrl_secret.is_some() || s.tls_key.is_some()
    });
    if !holds_secret {
        return Ok(());
    }
    let mode = std::fs::metadata(path)?.permissions().mode();
    if mode & SECRET_FILE_FORBIDDEN_MODE != 0 {
        return Err(Error::InvalidArgument(format!(
            "{} holds secrets and is readable by group or others (mode {:o}); chmod 600 it",
            path.display(),
            mode & 0o777
        )));
    }
    Ok(())
}

/// Parses the text of a discovery configuration file; `name` names it in errors and
/// in each controller's [`DiscoverySpec::source`].
pub fn parse_discovery_conf(text: &str, name: &str) -> Result<Vec<DiscoverySpec>, Error> {
    let mut specs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let source = format!("{name}:{}", i + 1);
        if let Some(spec) = parse_line(line, &source)? {
            specs.push(spec);
        }
    }
    Ok(specs)
}

/// Parses one line: `None` for a comment, a blank line, or a line naming neither a
/// transport nor an address (nvme-cli skips those too).
pub fn parse_line(line: &str, source: &str) -> Result<Option<DiscoverySpec>, Error> {
    let bad = |m: String| Error::InvalidArgument(format!("{source}: {m}"));
    let body = line.trim();
    if body.is_empty() || body.starts_with(COMMENT) {
        return Ok(None);
    }
    let mut spec = DiscoverySpec {
        source: source.to_owned(),
        subnqn: DISCOVERY_NQN.to_owned(),
        ..DiscoverySpec::default()
    };
    let mut words = body.split_whitespace();
    while let Some(word) = words.next() {
        let (def, inline) = lookup(word).map_err(bad)?;
        let value =
            if def.key.takes_value() {
                match inline {
                    Some(v) => Some(v),
                    None => Some(words.next().ok_or_else(|| {
                        bad(format!("option {} needs a value", name_of(def, word)))
                    })?),
                }
            } else {
                if inline.is_some() && def.key != Key::IgnoredFlag {
                    return Err(bad(format!("option {} takes no value", name_of(def, word))));
                }
                None
            };
        apply(&mut spec, def, word, value).map_err(bad)?;
    }
    if spec.transport.is_empty() && spec.traddr.is_empty() {
        return Ok(None);
    }
    if spec.transport.is_empty() {
        return Err(bad("-t/--transport is missing".into()));
    }
    if spec.traddr.is_empty() {
        return Err(bad("-a/--traddr is missing".into()));
    }
    spec.default_trsvcid();
    Ok(Some(spec))
}

/// How an option was written, for messages (`--traddr` or `-a`).
fn name_of(def: &OptDef, word: &str) -> String {
    if word.starts_with("--") {
        format!("--{}", def.long)
    } else {
        def.short
            .map_or_else(|| format!("--{}", def.long), |c| format!("-{c}"))
    }
}

/// The option a word names, and a value glued to it (`--traddr=X`, `-aX`).
fn lookup(word: &str) -> Result<(&'static OptDef, Option<&str>), String> {
    if let Some(long) = word.strip_prefix("--") {
        let (name, value) = match long.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (long, None),
        };
        return OPTIONS
            .iter()
            .find(|d| d.long == name)
            .map(|d| (d, value))
            .ok_or_else(|| format!("unknown option --{name}"));
    }
    let Some(short) = word.strip_prefix('-') else {
        return Err(format!(
            "unexpected word {word:?} (every word is an option or its value; a comment \
             line starts with #)"
        ));
    };
    let mut chars = short.chars();
    let c = chars
        .next()
        .ok_or_else(|| "a lone \"-\" is not an option".to_string())?;
    let rest = chars.as_str();
    let def = OPTIONS
        .iter()
        .find(|d| d.short == Some(c))
        .ok_or_else(|| format!("unknown option -{c}"))?;
    let glued = rest.strip_prefix('=').unwrap_or(rest);
    if glued.is_empty() {
        Ok((def, None))
    } else if def.key.takes_value() {
        Ok((def, Some(glued)))
    } else {
        Err(format!(
            "option -{c} takes no value (combined short flags are not supported): {word}"
        ))
    }
}

fn number<T: std::str::FromStr>(def: &OptDef, word: &str, v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("option {}: {v:?} is not a valid number", name_of(def, word)))
}

/// Sets what `def` names from `value`.
fn apply(
    spec: &mut DiscoverySpec,
    def: &OptDef,
    word: &str,
    value: Option<&str>,
) -> Result<(), String> {
    let v = value.unwrap_or_default();
    if def.key.takes_value() && v.is_empty() {
        return Err(format!("option {} needs a value", name_of(def, word)));
    }
    let text = || Some(v.to_owned());
    match def.key {
        Key::Transport => {
            if trtype_from_name(v).is_none() {
                return Err(format!(
                    "option {}: unknown transport {v:?} (tcp, rdma, fc or loop)",
                    name_of(def, word)
                ));
            }
            spec.transport = v.to_owned();
        }
        Key::Nqn => spec.subnqn = v.to_owned(),
        Key::Traddr => spec.traddr = v.to_owned(),
        Key::Trsvcid => spec.trsvcid = v.to_owned(),
        Key::HostTraddr => spec.host_traddr = text(),
        Key::HostIface => spec.host_iface = text(),
        Key::Hostnqn => spec.hostnqn = text(),
        Key::Hostid => spec.hostid = text(),
        Key::DhchapSecret => spec.dhchap_secret = Some(Secret::new(v)),
        Key::DhchapCtrlSecret => spec.dhchap_ctrl_secret = Some(Secret::new(v)),
        Key::TlsPsk => spec.tls_key = Some(Secret::new(v)),
        Key::NrIoQueues => spec.nr_io_queues = Some(number(def, word, v)?),
        Key::QueueSize => spec.queue_size = Some(number(def, word, v)?),
        Key::KeepAliveTmo => spec.keep_alive_tmo = Some(number(def, word, v)?),
        Key::ReconnectDelay => spec.reconnect_delay = Some(number(def, word, v)?),
        Key::CtrlLossTmo => spec.ctrl_loss_tmo = Some(number(def, word, v)?),
        Key::FastIoFailTmo => spec.fast_io_fail_tmo = Some(number(def, word, v)?),
        Key::HdrDigest => spec.hdr_digest = true,
        Key::DataDigest => spec.data_digest = true,
        Key::Tls => spec.tls = true,
        Key::IgnoredValue | Key::IgnoredFlag => spec.ignored.push(format!("--{}", def.long)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> DiscoverySpec {
        parse_line(line, "t:1")
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("line skipped: {line}"))
    }

    fn err(text: &str) -> String {
        match parse_discovery_conf(text, "/etc/nvme/discovery.conf") {
            Ok(v) => panic!("accepted: {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn comments_blank_lines_and_lines_without_an_address_are_skipped() {
        let text = "\
# Used for extracting default parameters for discovery
#
# Example:
# --transport=<trtype> --traddr=<traddr> --trsvcid=<trsvcid> --host-traddr=<host-traddr> --host-iface=<host-iface>

   # indented comment
--transport=tcp --traddr=192.168.1.10

\t
-q nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001
-t rdma -a 10.0.0.2
";
        let v = parse_discovery_conf(text, "d.conf").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!(v[0].source, "d.conf:7");
        assert_eq!(
            (v[0].transport.as_str(), v[0].traddr.as_str()),
            ("tcp", "192.168.1.10")
        );
        assert_eq!(v[1].source, "d.conf:11");
        assert_eq!(v[1].transport, "rdma");
    }

    #[test]
    fn default_ports_follow_nvme_cli() {
        assert_eq!(one("-t tcp -a 10.0.0.1").trsvcid, "8009");
        assert_eq!(one("-t rdma -a 10.0.0.1").trsvcid, "4420");
        assert_eq!(one("-t fc -a nn-0x1:pn-0x2").trsvcid, "");
        assert_eq!(one("-t tcp -a 10.0.0.1 -s 4420").trsvcid, "4420");
        assert_eq!(one("-t tcp -a 10.0.0.1").subnqn, DISCOVERY_NQN);
    }

    #[test]
    fn long_and_short_spellings_mean_the_same() {
        let long = one(
            "--transport=tcp --traddr 10.0.0.1 --trsvcid=8010 --hostnqn=nqn.2014-08.org.nvmexpress:uuid:x \
             --hostid=00000000-0000-4000-8000-000000000001 --host-traddr=10.0.0.9 \
             --dhchap-secret=DHHC-1:00:abc=: --nr-io-queues=4 --queue-size=64 \
             --keep-alive-tmo=7 --reconnect-delay=3 --ctrl-loss-tmo=-1 --hdr-digest --data-digest --tls \
             --nqn nqn.2024-01.io.example:disc --tls-key NVMeTLSkey-1:01:k=:",
        );
        let short = one(
            "-t tcp -a10.0.0.1 -s 8010 -q nqn.2014-08.org.nvmexpress:uuid:x \
             -I 00000000-0000-4000-8000-000000000001 -w 10.0.0.9 -S DHHC-1:00:abc=: -i 4 -Q 64 \
             -k 7 -c 3 -l -1 -g -G --tls -n nqn.2024-01.io.example:disc --tls-key NVMeTLSkey-1:01:k=:",
        );
        let mut short = short;
        short.source.clone_from(&long.source);
        assert_eq!(long, short);
        assert_eq!(long.trsvcid, "8010");
        assert_eq!(long.ctrl_loss_tmo, Some(-1));
        assert_eq!(long.nr_io_queues, Some(4));
        assert_eq!(long.keep_alive_tmo, Some(7));
        // A secret keeps its '=' (nvme-cli 3 splits on blanks only) and is never printed.
        assert_eq!(
            long.dhchap_secret.as_ref().map(Secret::as_str),
            Some("DHHC-1:00:abc=:")
        );
        assert!(!format!("{long:?}").contains("abc"));
        assert!(long.hdr_digest && long.data_digest && long.tls);
        assert_eq!(long.subnqn, "nqn.2024-01.io.example:disc");
    }

    #[test]
    fn options_without_effect_here_are_accepted_and_listed() {
        let s = one("-t tcp -a 10.0.0.1 --persistent -D --nr-poll-queues=2 -T 4 --keyring .nvme");
        assert_eq!(
            s.ignored,
            vec![
                "--persistent",
                "--duplicate-connect",
                "--nr-poll-queues",
                "--tos",
                "--keyring"
            ]
        );
    }

    #[test]
    fn bad_lines_name_the_line_and_the_option() {
        let e = err("# c\n-t tcp -a 10.0.0.1\n-t tcp -a 10.0.0.2 --bogus 1\n");
        assert!(
            e.contains("/etc/nvme/discovery.conf:3") && e.contains("--bogus"),
            "{e}"
        );
        let e = err("-t tcp -a 10.0.0.1 -Z\n");
        assert!(e.contains(":1") && e.contains("unknown option -Z"), "{e}");
        let e = err("\n-t tcp -a 10.0.0.1 --queue-size=lots\n");
        assert!(e.contains(":2") && e.contains("--queue-size"), "{e}");
        let e = err("-t tcp -a\n");
        assert!(e.contains(":1") && e.contains("-a needs a value"), "{e}");
        let e = err("-t tcp -a 10.0.0.1 stray\n");
        assert!(e.contains("\"stray\""), "{e}");
        let e = err("-t ib -a 10.0.0.1\n");
        assert!(e.contains("unknown transport \"ib\""), "{e}");
        let e = err("-a 10.0.0.1\n");
        assert!(e.contains("-t/--transport is missing"), "{e}");
        let e = err("-t tcp\n");
        assert!(e.contains("-a/--traddr is missing"), "{e}");
        let e = err("-t tcp -a 1.2.3.4 --hdr-digest=yes\n");
        assert!(e.contains("--hdr-digest takes no value"), "{e}");
        let e = err("-t tcp -a 1.2.3.4 -gG\n");
        assert!(e.contains("-g takes no value"), "{e}");
        let e = err("-t tcp -a 1.2.3.4 -l 99999999999\n");
        assert!(e.contains("-l") && e.contains("not a valid number"), "{e}");
    }

    #[test]
    fn the_last_of_a_repeated_option_wins() {
        let s = one("-t tcp -a 10.0.0.1 -a 10.0.0.2 --trsvcid 1 -s 2");
        assert_eq!((s.traddr.as_str(), s.trsvcid.as_str()), ("10.0.0.2", "2"));
    }

    #[test]
    fn a_missing_file_says_what_was_looked_for() {
        let e = read_discovery_conf(Path::new("/nonexistent/discovery.conf"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("/nonexistent/discovery.conf") && e.contains("-t/-a"),
            "{e}"
        );
    }

    #[test]
    fn a_file_with_secrets_readable_by_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let p = std::env::temp_dir().join(format!("nvmf-conf-mode-{}", std::process::id()));
        std::fs::write(&p, "-t tcp -a 10.0.0.1 -S DHHC-1:00:abc=:\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_discovery_conf(&p)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("holds secrets") && e.contains("644") && e.contains("chmod 600"),
            "{e}"
        );
        assert!(!e.contains("DHHC"), "the secret is never echoed: {e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_discovery_conf(&p).map(|s| s.len()).ok(), Some(1));
        // Without a secret, the usual 0644 is fine.
        std::fs::write(&p, "-t tcp -a 10.0.0.1\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(read_discovery_conf(&p).map(|s| s.len()).ok(), Some(1));
        let _ = std::fs::remove_file(&p);
    }
}
