use super::*;

const ORIGIN: &str = "configs/x.yaml";

/// The error `text` is rejected with (parse or validation), as displayed.
fn error_of(text: &str) -> ConfigError {
    match Config::from_yaml_str(text, ORIGIN) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => e,
    }
}

fn nqn(s: &str) -> Nqn {
    Nqn::new(s).unwrap()
}

/// A valid config with one subsystem of two namespaces; tests break it in one place.
const BASE: &str = "\
ports:
  - portid: 1
    trtype: loopback
    subsystems: [nqn.2024-01.io.nvmf-rs:ram0]
subsystems:
  - nqn: nqn.2024-01.io.nvmf-rs:ram0
    allow_any_host: true
    namespaces:
      - nsid: 1
        device_path: ram:1M
      - nsid: 2
        device_path: null:1M
";

#[test]
fn base_is_valid() {
    let c = Config::from_yaml_str(BASE, ORIGIN).unwrap();
    assert_eq!(c.origin(), Some(ORIGIN));
    assert_eq!(c.transport, TransportConfig::default());
    let s = &c.subsystems[0];
    assert_eq!(s.nqn.as_str(), "nqn.2024-01.io.nvmf-rs:ram0");
    assert_eq!((s.cntlid_min, s.cntlid_max), (Cntlid(1), Cntlid(0xFFEF)));
    assert!(s.namespaces.iter().all(|n| n.enable && !n.buffered_io));
    assert_eq!(c.ports[0].adrfam(), AdrFam::Loopback);
}

#[test]
fn every_example_config_loads_and_validates() {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs"));
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            let c = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(!c.ports.is_empty(), "{}", path.display());
            // What to_yaml prints loads back to the same configuration.
            let again = Config::from_yaml_str(&c.to_yaml().unwrap(), "printed").unwrap();
            assert_eq!(again, c, "{}", path.display());
            names.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    names.sort();
    for want in [
        "file.yaml",
        "loopback.yaml",
        "rbd.yaml",
        "rdma.yaml",
        "tcp.yaml",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }
}

#[test]
fn example_configs_say_what_they_should() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/");
    let load = |name: &str| Config::load(Path::new(&format!("{dir}{name}"))).unwrap();

    // The two nodes of one subsystem: same NQN and namespace, disjoint controller ids,
    // node B non-optimized for group 1.
    let (a, b) = (load("two-node-a.yaml"), load("two-node-b.yaml"));
    let (sa, sb) = (&a.subsystems[0], &b.subsystems[0]);
    assert_eq!(sa.nqn, sb.nqn);
    assert_eq!(sa.namespaces[0].device_path, sb.namespaces[0].device_path);
    assert!(sa.cntlid_max < sb.cntlid_min);
    assert!(a.ports[0].ana_groups.is_empty());
    assert_eq!(
        b.ports[0].ana_groups[0].state,
        crate::config::AnaState::NonOptimized
    );

    let lo = load("loopback.yaml");
    let ns: Vec<&str> = lo.subsystems[0]
        .namespaces
        .iter()
        .map(|n| n.device_path.as_str())
        .collect();
    assert_eq!(ns, ["ram:1G", "null:1G"]);
    assert_eq!(lo.ports[0].trtype, TrType::Loopback);
    // Its comment says the transport values it shows are the defaults.
    assert_eq!(lo.transport, TransportConfig::default());

    let rbd = load("rbd.yaml");
    let n = &rbd.subsystems[0].namespaces[0];
    assert_eq!(n.device_path, "rbd:rbd/disk0");
    assert_eq!(n.client_id.as_deref(), Some("nvmf"));
    assert!(n.ceph_conf.is_some() && n.keyring.is_some());
    assert_eq!(
        n.ceph_options
            .get("rados_osd_op_timeout")
            .map(String::as_str),
        Some("30")
    );

    let file = load("file.yaml");
    let s = &file.subsystems[0];
    assert_eq!(s.namespaces[0].device_path, "/tmp/nvmf-disk0.img");
    assert!(!s.allow_any_host);
    assert_eq!(s.allowed_hosts.len(), 1);
    assert!(s.allows_host(&s.allowed_hosts[0]));
    assert!(!s.allows_host(&nqn("nqn.2014-08.org.nvmexpress:uuid:other")));

    let rdma = load("rdma.yaml");
    assert_eq!(rdma.ports[0].trtype, TrType::Rdma);
    assert_eq!(
        rdma.ports[0].socket_addr(),
        Some("10.0.2.15:4420".parse().unwrap())
    );

    let tcp = load("tcp.yaml");
    let addrs: Vec<_> = tcp.ports.iter().map(|p| p.socket_addr().unwrap()).collect();
    assert_eq!(
        addrs,
        [
            "127.0.0.1:4420".parse().unwrap(),
            "127.0.0.1:8009".parse().unwrap()
        ]
    );
    assert!(tcp.ports[1].subsystems.is_empty());
}

#[test]
fn unknown_key_names_line_and_key() {
    let text = BASE.replace(
        "      - nsid: 2\n",
        "      - nsid: 2\n        buffered: true\n",
    );
    let e = error_of(&text);
    assert_eq!(e.kind, ConfigErrorKind::Parse);
    assert_eq!((e.line, e.column), (Some(12), Some(9)));
    assert_eq!(e.path, "subsystems[0].namespaces[1].buffered");
    let shown = e.to_string();
    assert!(
        shown.starts_with(
            "configs/x.yaml:12:9: subsystems[0].namespaces[1].buffered: unknown field `buffered`, expected one of `nsid`"
        ),
        "{shown}"
    );

    // A typo at the top level too.
    let e = error_of(&format!("{BASE}transports:\n  poll_groups: 2\n"));
    assert!(
        e.to_string()
            .starts_with("configs/x.yaml:13:1: transports: unknown field `transports`"),
        "{e}"
    );
}

#[test]
fn wrong_type_names_line_column_and_key() {
    let text = BASE.replace("- nsid: 2", "- nsid: a");
    let e = error_of(&text);
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:11:15: subsystems[0].namespaces[1].nsid: invalid type: string \"a\", expected u32"
    );

    let e = error_of(&format!("{BASE}transport:\n  poll_mode: sometimes\n"));
    assert!(
        e.to_string().starts_with(
            "configs/x.yaml:14:14: transport.poll_mode: unknown variant `sometimes`, expected one of"
        ),
        "{e}"
    );

    let e = error_of(&format!("{BASE}transport:\n  max_queue_size: 70000\n"));
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:14:19: transport.max_queue_size: invalid value: integer `70000`, expected u16"
    );
}

#[test]
fn yaml_syntax_error_names_line() {
    let e = error_of("ports:\n  - portid: 1\n    trtype: loopback\n   subsystems: []\n");
    assert_eq!(e.kind, ConfigErrorKind::Parse);
    assert_eq!(e.line, Some(4));
    assert!(e.to_string().starts_with("configs/x.yaml:4:"), "{e}");
}

#[test]
fn missing_required_field() {
    let text = BASE.replace("        device_path: null:1M\n", "");
    let e = error_of(&text);
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:11:9: subsystems[0].namespaces[1]: missing field `device_path`"
    );

    let text = BASE.replace("    trtype: loopback\n", "");
    let e = error_of(&text);
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:2:5: ports[0]: missing field `trtype`"
    );
}

#[test]
fn duplicate_nsid() {
    let text = BASE.replace("- nsid: 2", "- nsid: 1");
    let e = error_of(&text);
    assert_eq!(e.kind, ConfigErrorKind::Invalid);
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:11:9: subsystems[0].namespaces[1].nsid: duplicate nsid 1 (also namespaces[0] of this subsystem)"
    );
}

#[test]
fn reserved_nsids() {
    for (v, line) in [("0", "9"), ("4294967295", "9")] {
        let e = error_of(&BASE.replace("- nsid: 1", &format!("- nsid: {v}")));
        let shown = e.to_string();
        assert!(
            shown.starts_with(&format!(
                "configs/x.yaml:{line}:9: subsystems[0].namespaces[0].nsid: {v} is reserved"
            )),
            "{shown}"
        );
    }
}

#[test]
fn invalid_nqn_too_long() {
    let long = format!("nqn.2024-01.io.nvmf-rs:{}", "x".repeat(224 - 23));
    assert_eq!(long.len(), 224);
    let text = BASE.replace(
        "  - nqn: nqn.2024-01.io.nvmf-rs:ram0",
        &format!("  - nqn: {long}"),
    );
    let e = error_of(&text);
    assert_eq!(e.kind, ConfigErrorKind::Parse);
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:6:10: subsystems[0].nqn: invalid NQN: NQN is 224 bytes, the limit is 223"
    );

    // 223 bytes is fine.
    let ok = &long[..223];
    let text = BASE.replace("nqn.2024-01.io.nvmf-rs:ram0", ok);
    Config::from_yaml_str(&text, ORIGIN).unwrap();
}

#[test]
fn invalid_host_nqn() {
    let text = BASE.replace(
        "    allow_any_host: true\n",
        "    allow_any_host: false\n    allowed_hosts:\n      - nqn.2014-08.org.nvmexpress:uuid:1\n      - \"\"\n",
    );
    let e = error_of(&text);
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:10:9: subsystems[0].allowed_hosts[1]: invalid NQN: NQN is empty"
    );
}

#[test]
fn port_referencing_unknown_subsystem() {
    let text = BASE.replace(
        "subsystems: [nqn.2024-01.io.nvmf-rs:ram0]",
        "subsystems: [nqn.2024-01.io.nvmf-rs:ram0, nqn.2024-01.io.nvmf-rs:ram9]",
    );
    let e = error_of(&text);
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:4:47: ports[0].subsystems[1]: unknown subsystem nqn.2024-01.io.nvmf-rs:ram9: it is not in the top-level subsystems list"
    );
}

#[test]
fn discovery_nqn_is_not_configurable() {
    let text = BASE.replace("nqn.2024-01.io.nvmf-rs:ram0", DISCOVERY);
    let errors = Config::parse_yaml_str(&text, ORIGIN)
        .unwrap()
        .validate_all();
    let shown: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(shown.len(), 2, "{shown:#?}");
    assert!(
        shown[0].starts_with("configs/x.yaml:4:18: ports[0].subsystems[0]: nqn.2014-08.org.nvmexpress.discovery is served on every port"),
        "{shown:#?}"
    );
    assert!(
        shown[1].starts_with("configs/x.yaml:6:5: subsystems[0].nqn: nqn.2014-08.org.nvmexpress.discovery is the discovery subsystem"),
        "{shown:#?}"
    );
}

const DISCOVERY: &str = nvmf_common::types::DISCOVERY_NQN;

#[test]
fn duplicate_subsystems_and_ports() {
    let text = format!("{BASE}  - nqn: nqn.2024-01.io.nvmf-rs:ram0\n    allow_any_host: true\n");
    let e = error_of(&text);
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:13:5: subsystems[1].nqn: duplicate subsystem NQN nqn.2024-01.io.nvmf-rs:ram0 (also subsystems[0])"
    );

    let text = BASE.replace(
        "subsystems:\n  - nqn",
        "  - portid: 1\n    trtype: loopback\nsubsystems:\n  - nqn",
    );
    let e = error_of(&text);
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:5:5: ports[1].portid: duplicate portid 1 (also ports[0])"
    );
}

#[test]
fn network_port_rules() {
    let port = |body: &str| {
        format!(
            "ports:\n  - portid: 1\n{body}subsystems:\n  - nqn: nqn.2024-01.io.nvmf-rs:a\n    allow_any_host: true\n"
        )
    };
    let e = error_of(&port(
        "    trtype: tcp\n    traddr: 127.0.0.1\n    trsvcid: \"http\"\n",
    ));
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:5:5: ports[0].trsvcid: \"http\" is not a port number (1 to 65535)"
    );
    let e = error_of(&port("    trtype: rdma\n    traddr: 127.0.0.1\n"));
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:2:5: ports[0].trsvcid: required for rdma: the port number, e.g. \"4420\""
    );
    let e = error_of(&port(
        "    trtype: tcp\n    adrfam: ipv6\n    traddr: 127.0.0.1\n    trsvcid: 4420\n",
    ));
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:5:5: ports[0].traddr: \"127.0.0.1\" is not an ipv6 address"
    );
    // An unquoted port number is accepted; ipv6 is derived from the address.
    let c = Config::from_yaml_str(
        &port("    trtype: tcp\n    traddr: \"::1\"\n    trsvcid: 4420\n"),
        ORIGIN,
    )
    .unwrap();
    assert_eq!(c.ports[0].trsvcid, "4420");
    assert_eq!(c.ports[0].adrfam(), AdrFam::Ipv6);

    // Small in-capsule data is fine for loopback, not for tcp.
    let text = format!(
        "transport:\n  in_capsule_data_size: 4096\n{}",
        port("    trtype: tcp\n    traddr: 127.0.0.1\n    trsvcid: 4420\n")
    );
    let e = error_of(&text);
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:2:3: transport.in_capsule_data_size: 4096 is too small: rdma and tcp ports need at least 8192 (ports[0] is tcp)"
    );
    let text = format!(
        "transport:\n  in_capsule_data_size: 4096\n{}",
        port("    trtype: loopback\n")
    );
    Config::from_yaml_str(&text, ORIGIN).unwrap();

    // Two ports on one address.
    let text = "ports:\n  - portid: 1\n    trtype: tcp\n    traddr: 127.0.0.1\n    trsvcid: 4420\n  - portid: 2\n    trtype: tcp\n    traddr: 127.0.0.1\n    trsvcid: 4420\n";
    let e = error_of(text);
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:6:5: ports[1]: tcp 127.0.0.1:4420 is already the address of ports[0]"
    );
}

#[test]
fn referrals() {
    let text = "ports:\n  - portid: 1\n    trtype: tcp\n    traddr: 127.0.0.1\n    trsvcid: 8009\n    referrals:\n      - { trtype: tcp, traddr: 127.0.0.2, trsvcid: 8009, portid: 3 }\n      - { trtype: loopback, traddr: x, trsvcid: 1 }\n";
    let e = error_of(text);
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:8:11: ports[0].referrals[1].trtype: a referral must be rdma or tcp, not loopback"
    );
}

#[test]
fn transport_limits() {
    let cases = [
        (
            "max_queue_size: 1",
            "transport.max_queue_size: 1 is out of range: must be 2 to 1024",
        ),
        (
            "max_queue_size: 2048",
            "transport.max_queue_size: 2048 is out of range: must be 2 to 1024",
        ),
        (
            "max_admin_queue_size: 8192",
            "transport.max_admin_queue_size: 8192 is out of range: must be 2 to 4096",
        ),
        (
            "max_io_queues: 0",
            "transport.max_io_queues: 0 is out of range: must be 1 to 1024",
        ),
        (
            "in_capsule_data_size: 8200",
            "transport.in_capsule_data_size: 8200 is not a multiple of 16",
        ),
        (
            "in_capsule_data_size: 2097152",
            "transport.in_capsule_data_size: 2097152 is out of range: must be 4096 to 1048576",
        ),
        (
            "max_io_size: 100000",
            "transport.max_io_size: 100000 is not a power of two",
        ),
        (
            "max_io_size: 2048",
            "transport.max_io_size: 2048 is out of range: must be 4096 to 8388608",
        ),
        (
            "max_io_size: 16777216",
            "transport.max_io_size: 16777216 is out of range: must be 4096 to 8388608",
        ),
        (
            "poll_groups: 0",
            "transport.poll_groups: 0 is out of range: must be 1 to 256",
        ),
        (
            "keep_alive_timeout_ms: 10",
            "transport.keep_alive_timeout_ms: 10 is too small: must be at least 1000 (1 s)",
        ),
    ];
    for (line, want) in cases {
        let e = error_of(&format!("{BASE}transport:\n  {line}\n"));
        assert_eq!(e.to_string(), format!("configs/x.yaml:14:3: {want}"));
    }
}

#[test]
fn tcp_section() {
    let c = Config::from_yaml_str(BASE, ORIGIN).unwrap();
    assert_eq!(c.tcp, TcpConfig::default());
    let text = format!(
        "{BASE}tcp:\n  header_digest: false\n  maxh2cdata: 65536\n  stall_timeout_ms: 5000\n"
    );
    let c = Config::from_yaml_str(&text, ORIGIN).unwrap();
    assert!(!c.tcp.header_digest && c.tcp.data_digest);
    assert_eq!((c.tcp.maxh2cdata, c.tcp.stall_timeout_ms), (65536, 5000));
    let again = Config::from_yaml_str(&c.to_yaml().unwrap(), "printed").unwrap();
    assert_eq!(again, c);

    let cases = [
        (
            "maxh2cdata: 1024",
            "tcp.maxh2cdata: 1024 is out of range: must be 4096 to 16777216",
        ),
        (
            "maxh2cdata: 4098",
            "tcp.maxh2cdata: 4098 is not a multiple of 4",
        ),
        (
            "max_r2t_per_command: 0",
            "tcp.max_r2t_per_command: 0 is out of range: must be 1 to 256",
        ),
        (
            "c2h_chunk: 33554432",
            "tcp.c2h_chunk: 33554432 is out of range: must be 4096 to 16777216",
        ),
        (
            "stall_timeout_ms: 10",
            "tcp.stall_timeout_ms: 10 is too small: must be at least 1000 (1 s)",
        ),
        (
            "arena_bytes: 2097152",
            "tcp.arena_bytes: 2097152 is too small for PDUs of 1048576 bytes: at least 4194304",
        ),
    ];
    for (line, want) in cases {
        let e = error_of(&format!("{BASE}tcp:\n  {line}\n"));
        assert_eq!(e.to_string(), format!("configs/x.yaml:14:3: {want}"));
    }
    let e = error_of(&format!("{BASE}tcp:\n  max_h2c: 1\n"));
    assert!(e.to_string().contains("max_h2c"), "{e}");
}

#[test]
fn subsystem_rules() {
    let with = |extra: &str| {
        BASE.replace(
            "    allow_any_host: true\n",
            &format!("    allow_any_host: true\n{extra}"),
        )
    };
    let cases = [
        (
            "    serial: \"123456789012345678901\"\n",
            "subsystems[0].serial: \"123456789012345678901\" is 21 characters, the limit is 20",
        ),
        (
            "    serial: \"caf\u{e9}\"\n",
            "subsystems[0].serial: \"caf\u{e9}\" has characters other than printable ASCII",
        ),
        (
            "    model: \"\"\n",
            "subsystems[0].model: must not be empty (leave the key out for the default)",
        ),
        (
            "    cntlid_min: 0\n",
            "subsystems[0].cntlid_min: 0 is out of range: must be 1 to 65519",
        ),
        (
            "    cntlid_max: 65520\n",
            "subsystems[0].cntlid_max: 65520 is out of range: must be 1 to 65519",
        ),
        (
            "    cntlid_min: 10\n    cntlid_max: 5\n",
            "subsystems[0].cntlid_min: cntlid_min 10 is greater than cntlid_max 5",
        ),
        (
            "    allowed_hosts: [nqn.h:1, nqn.h:1]\n",
            "subsystems[0].allowed_hosts[1]: host nqn.h:1 is listed twice",
        ),
    ];
    for (extra, want) in cases {
        let e = error_of(&with(extra));
        assert_eq!(
            e.to_string(),
            format!(
                "configs/x.yaml:8:{} {want}",
                if want.contains("allowed_hosts") {
                    "30:"
                } else {
                    "5:"
                }
            )
        );
    }
}

#[test]
fn namespace_rules() {
    let cases = [
        ("device_path: \"\"", "10:9", "subsystems[0].namespaces[0].device_path: must not be empty"),
        ("device_path: ram:lots", "10:9", "subsystems[0].namespaces[0].device_path: \"ram:lots\": invalid size \"lots\""),
        ("device_path: ram:0", "10:9", "subsystems[0].namespaces[0].device_path: ram namespace size must not be zero"),
        ("device_path: ram:1000", "10:9", "subsystems[0].namespaces[0].device_path: ram namespace size 1000 is not a multiple of the block size 512"),
        ("device_path: ram:1M\n        block_size: 1000", "11:9", "subsystems[0].namespaces[0].block_size: 1000 is not a power of two from 512 to 65536"),
        ("device_path: ram:1M\n        uuid: 00000000-0000-0000-0000-000000000000", "11:9", "subsystems[0].namespaces[0].uuid: the nil UUID is not a namespace UUID"),
        // Format errors are found by the parser, at the value.
        ("device_path: ram:1M\n        uuid: not-a-uuid", "11:15", "subsystems[0].namespaces[0].uuid: invalid UUID \"not-a-uuid\""),
        ("device_path: ram:1M\n        nguid: 0123", "11:16", "subsystems[0].namespaces[0].nguid: invalid NGUID \"0123\": expected 32 hex digits"),

        ("device_path: rbd:pool", "10:9", "subsystems[0].namespaces[0].device_path: namespace spec \"rbd:pool\": expected rbd:POOL/IMAGE"),
        ("device_path: rbd:p/i@snap", "10:9", "subsystems[0].namespaces[0].device_path: namespace spec \"rbd:p/i@snap\": RBD image name \"i@snap\" contains '@'"),
        ("device_path: ram:1M\n        ceph_conf: /etc/ceph/ceph.conf", "11:9", "subsystems[0].namespaces[0].ceph_conf: only for rbd:POOL/IMAGE namespaces, not ram:1M"),
        ("device_path: rbd:p/i\n        client_id: client.admin", "11:9", "subsystems[0].namespaces[0].client_id: \"client.admin\" is not a Ceph client id (`admin` for client.admin)"),
        ("device_path: ram:1M\n        ceph_options: { rbd_cache: \"false\" }", "11:9", "subsystems[0].namespaces[0].ceph_options: only for rbd:POOL/IMAGE namespaces, not ram:1M"),
        ("device_path: rbd:p/i\n        ceph_options:\n          key: AQBsecret", "12:11", "subsystems[0].namespaces[0].ceph_options.key: a Ceph secret does not belong in this configuration: name a keyring file with `keyring`"),
        ("device_path: rbd:p/i\n        ceph_options:\n          keyring: /k", "12:11", "subsystems[0].namespaces[0].ceph_options.keyring: set the namespace's `keyring` instead"),
        ("device_path: rbd:p/i\n        ceph_options: { \"\": x }", "11:9", "subsystems[0].namespaces[0].ceph_options: an option name is empty"),
        ("device_path: rbd:p/i\n        ceph_options: { rbd_cache: [1] }", "11:36", "subsystems[0].namespaces[0].ceph_options.rbd_cache: invalid type: sequence, expected a Ceph option value"),
    ];
    for (to, at, want) in cases {
        let e = error_of(&BASE.replacen("device_path: ram:1M", to, 1));
        let shown = e.to_string();
        let want = format!("configs/x.yaml:{at}: {want}");
        assert!(shown.starts_with(&want), "{shown}\nwanted {want}");
    }

    // The same explicit UUID twice, even in different subsystems.
    let u = "3f1f6d3e-8d0e-4a51-9a4b-5f8f1b7a2c10";
    let text = BASE
        .replace(
            "device_path: ram:1M",
            &format!("device_path: ram:1M\n        uuid: {u}"),
        )
        .replace(
            "device_path: null:1M",
            &format!("device_path: null:1M\n        uuid: {u}"),
        );
    let e = error_of(&text);
    assert_eq!(
        e.to_string(),
        format!("configs/x.yaml:14:9: subsystems[0].namespaces[1].uuid: duplicate UUID {u} (also subsystems[0].namespaces[0])")
    );
}

#[test]
fn ceph_options_take_unquoted_numbers_and_booleans_as_text() {
    let text = BASE.replacen(
        "device_path: ram:1M",
        "device_path: rbd:p/i\n        ceph_options: { rados_osd_op_timeout: 30, rbd_cache: false, \"rados mon op timeout\": \"5\" }",
        1,
    );
    let c = Config::from_yaml_str(&text, ORIGIN).unwrap();
    let opts = &c.subsystems[0].namespaces[0].ceph_options;
    let got: Vec<(&str, &str)> = opts.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        got,
        [
            ("rados mon op timeout", "5"),
            ("rados_osd_op_timeout", "30"),
            ("rbd_cache", "false")
        ]
    );
    let again = Config::from_yaml_str(&c.to_yaml().unwrap(), "printed").unwrap();
    assert_eq!(again, c);
}

#[test]
fn all_problems_are_reported_in_line_order() {
    let text = BASE
        .replace("- nsid: 2", "- nsid: 1")
        .replace("ram:1M", "ram:7")
        .replace(
            "subsystems: [nqn.2024-01.io.nvmf-rs:ram0]",
            "subsystems: [nqn.x:none]",
        );
    let c = Config::parse_yaml_str(&text, ORIGIN).unwrap();
    let lines: Vec<Option<usize>> = c.validate_all().iter().map(|e| e.line).collect();
    assert_eq!(lines, [Some(4), Some(10), Some(11)]);
}

#[test]
fn load_names_the_file() {
    let e = Config::load(Path::new("/nonexistent/nvmf.yaml")).unwrap_err();
    assert_eq!(e.kind, ConfigErrorKind::Io);
    assert!(
        e.to_string()
            .starts_with("/nonexistent/nvmf.yaml: cannot read: "),
        "{e}"
    );
    let e = error_of("# nothing here\n\n");
    assert_eq!(e.to_string(), "configs/x.yaml: the configuration is empty");
}

#[test]
fn full_config_round_trips() {
    let text = "\
transport:
  max_queue_size: 256
  max_admin_queue_size: 64
  max_io_queues: 4
  in_capsule_data_size: 16384
  max_io_size: 2097152
  poll_mode: poll
  poll_groups: 2
  keep_alive_timeout_ms: 30000
ports:
  - portid: 7
    trtype: rdma
    traddr: 127.0.0.1
    trsvcid: 4420
    adrfam: ipv4
    subsystems: [nqn.2024-01.io.nvmf-rs:a, nqn.2024-01.io.nvmf-rs:b]
    referrals:
      - { trtype: tcp, traddr: \"::1\", trsvcid: \"8009\", adrfam: ipv6, portid: 2 }
  - portid: 8
    trtype: loop
subsystems:
  - nqn: nqn.2024-01.io.nvmf-rs:a
    serial: SN-A
    model: Model A
    allow_any_host: false
    allowed_hosts: [nqn.2014-08.org.nvmexpress:uuid:1, nqn.2014-08.org.nvmexpress:uuid:2]
    cntlid_min: 16
    cntlid_max: 31
    namespaces:
      - nsid: 3
        device_path: /dev/null
        enable: false
        buffered_io: true
        block_size: 4096
        uuid: 3F1F6D3E-8D0E-4A51-9A4B-5F8F1B7A2C10
        nguid: 0123456789ABCDEF-0123456789abcdef
  - nqn: nqn.2024-01.io.nvmf-rs:b
    allow_any_host: true
    namespaces:
      - { nsid: 1, device_path: \"null:1T\" }
";
    let c = Config::from_yaml_str(text, ORIGIN).unwrap();
    assert_eq!(c.transport.poll_mode, PollMode::Poll);
    assert_eq!(c.ports[1].trtype, TrType::Loopback);
    let ns = &c.subsystems[0].namespaces[0];
    assert_eq!(ns.nsid, Nsid(3));
    assert_eq!(
        ns.nguid.unwrap().to_string(),
        "0123456789abcdef0123456789abcdef"
    );
    assert_eq!(
        ns.uuid.unwrap().to_string(),
        "3f1f6d3e-8d0e-4a51-9a4b-5f8f1b7a2c10"
    );
    assert_eq!(c.ports[0].referrals[0].adrfam(), AdrFam::Ipv6);

    let printed = c.to_yaml().unwrap();
    let again = Config::from_yaml_str(&printed, "printed").unwrap();
    assert_eq!(again, c, "{printed}");
    assert_eq!(again.to_yaml().unwrap(), printed);
    assert!(printed.contains("max_io_size: 2097152"), "{printed}");
    // Unset optional identifiers stay unset: only subsystem a has a serial.
    assert_eq!(printed.matches("serial:").count(), 1, "{printed}");
}

#[test]
fn effective_config_prints_defaults() {
    let c = Config::from_yaml_str(BASE, ORIGIN).unwrap();
    let printed = c.to_yaml().unwrap();
    assert!(
        printed.starts_with("transport:\n  max_queue_size: 128\n"),
        "{printed}"
    );
    assert!(printed.contains("poll_mode: adaptive"), "{printed}");
    // Plain defaults are written out.
    for key in [
        "cntlid_min: 1\n",
        "cntlid_max: 65519\n",
        "enable: true\n",
        "buffered_io: false\n",
    ] {
        assert!(printed.contains(key), "{key} in {printed}");
    }
    assert_eq!(Config::from_yaml_str(&printed, "p").unwrap(), c);
}

#[test]
fn single_defaults() {
    let c = Config::single(
        TrType::Loopback,
        None,
        None,
        vec!["ram:64M".into(), "null:1G".into()],
    )
    .unwrap();
    assert_eq!(c.origin(), Some(COMMAND_LINE_ORIGIN));
    assert_eq!(c.transport, TransportConfig::default());
    assert_eq!(c.ports.len(), 1);
    let p = &c.ports[0];
    assert_eq!((p.portid, p.trtype), (1, TrType::Loopback));
    assert_eq!((p.traddr.as_str(), p.trsvcid.as_str()), ("", ""));
    assert_eq!(p.subsystems, [nqn(DEFAULT_SUBSYSTEM_NQN)]);
    assert_eq!(c.subsystems.len(), 1);
    let s = &c.subsystems[0];
    assert_eq!(s.nqn.as_str(), "nqn.2024-01.io.nvmf-rs:default");
    assert!(s.allow_any_host && s.allowed_hosts.is_empty());
    assert_eq!(s.model(), DEFAULT_MODEL);
    let ns: Vec<(Nsid, &str, bool)> = s
        .namespaces
        .iter()
        .map(|n| (n.nsid, n.device_path.as_str(), n.enable))
        .collect();
    assert_eq!(ns, [(Nsid(1), "ram:64M", true), (Nsid(2), "null:1G", true)]);

    let c = Config::single(
        TrType::Tcp,
        None,
        Some(nqn("nqn.2024-01.io.nvmf-rs:t")),
        vec![],
    )
    .unwrap();
    assert_eq!(
        c.ports[0].socket_addr(),
        Some("127.0.0.1:4420".parse().unwrap())
    );
    assert_eq!(c.subsystems[0].nqn.as_str(), "nqn.2024-01.io.nvmf-rs:t");

    let c = Config::single(
        TrType::Rdma,
        Some(("::1".into(), "4421".into())),
        None,
        vec![],
    )
    .unwrap();
    assert_eq!(c.ports[0].adrfam(), AdrFam::Ipv6);

    // Round-trips like any other config.
    let again = Config::from_yaml_str(&c.to_yaml().unwrap(), "p").unwrap();
    assert_eq!(again, c);
}

#[test]
fn single_reports_bad_arguments() {
    let e = Config::single(
        TrType::Tcp,
        Some(("127.0.0.1".into(), "x".into())),
        None,
        vec![],
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "<command line>: ports[0].trsvcid: \"x\" is not a port number (1 to 65535)"
    );
    let e = Config::single(
        TrType::Loopback,
        None,
        None,
        vec!["ram:1M".into(), "".into()],
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with(
            "<command line>: subsystems[0].namespaces[1].device_path: must not be empty"
        ),
        "{e}"
    );
    let e = Config::single(TrType::Loopback, None, Some(Nqn::discovery()), vec![]).unwrap_err();
    assert!(
        e.to_string().contains(
            "subsystems[0].nqn: nqn.2014-08.org.nvmexpress.discovery is the discovery subsystem"
        ),
        "{e}"
    );
}

#[test]
fn derived_identifiers_are_stable() {
    let s = SubsystemConfig::new(nqn("nqn.2024-01.io.nvmf-rs:ram0"));
    assert_eq!(s.serial(), s.clone().serial());
    assert_eq!(s.serial().len(), 16);
    assert_eq!(
        s.serial(),
        format!("{:016x}", fnv1a64(b"nqn.2024-01.io.nvmf-rs:ram0"))
    );
    assert_ne!(
        s.serial(),
        SubsystemConfig::new(nqn("nqn.2024-01.io.nvmf-rs:ram1")).serial()
    );

    let ns = NamespaceConfig::new(Nsid(1), "ram:1M");
    let u = ns.uuid(&s.nqn);
    assert_eq!(u, derived_uuid("nqn.2024-01.io.nvmf-rs:ram0", Nsid(1)));
    assert_eq!(u.get_version_num(), 8);
    assert_ne!(u, NamespaceConfig::new(Nsid(2), "ram:1M").uuid(&s.nqn));
    assert_ne!(u, ns.uuid(&nqn("nqn.2024-01.io.nvmf-rs:ram1")));
    // Pinned: a derived UUID must never change between releases.
    assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a128(b""), 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d);
    assert_eq!(fnv1a128(b"a"), 0xd228_cb69_6f1a_8caf_7891_2b70_4e4a_8964);
}

#[test]
fn trtype_from_str() {
    assert_eq!("tcp".parse::<TrType>(), Ok(TrType::Tcp));
    assert_eq!("LOOP".parse::<TrType>(), Ok(TrType::Loopback));
    assert!("fc".parse::<TrType>().is_err());
    assert_eq!(TrType::Rdma.to_string(), "rdma");
}

#[test]
fn locate_finds_keys_and_elements() {
    let text = "a:\n  b: [x, y]\n  c:\n    - d: 1\n      e: 2\n";
    let k = |s: &str| Seg::Key(s.to_string());
    assert_eq!(locate::locate(text, &[k("a")]), Some((1, 1)));
    assert_eq!(
        locate::locate(text, &[k("a"), k("b"), Seg::Index(1)]),
        Some((2, 10))
    );
    assert_eq!(
        locate::locate(text, &[k("a"), k("c"), Seg::Index(0), k("e")]),
        Some((5, 7))
    );
    assert_eq!(
        locate::locate(text, &[k("a"), k("c"), Seg::Index(0)]),
        Some((4, 7))
    );
    assert_eq!(locate::locate(text, &[k("a"), k("zz")]), None);
    assert_eq!(
        locate::locate_nearest(text, &[k("a"), k("c"), Seg::Index(0), k("zz")]),
        Some((4, 7))
    );
}

#[test]
fn dhchap_dhgroup_null_names_the_null_group_and_keys_are_checked() {
    let key = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
    let y = format!(
        "hosts:\n  - nqn: nqn.2014-08.org.nvmexpress:uuid:a\n    dhchap_key: \"{key}\"\n    dhchap_dhgroup: null\n  \
         - nqn: nqn.2014-08.org.nvmexpress:uuid:b\n    dhchap_key: \"{key}\"\n    dhchap_dhgroup: [null, ffdhe2048]\n"
    );
    let c = Config::from_yaml_str(&y, "t").unwrap();
    let p = c.hosts[0].policy().unwrap().unwrap();
    assert_eq!(p.groups, vec![nvmf_common::auth::DhGroup::Null]);
    let p = c.hosts[1].policy().unwrap().unwrap();
    assert_eq!(p.groups.len(), 2);
    assert_eq!(p.hashes.len(), 3, "no dhchap_hash: every hash");
    let bad = y.replace("KfiaR", "KfiaS");
    let e = Config::from_yaml_str(&bad, "t").unwrap_err().to_string();
    assert!(
        e.contains("hosts[0].dhchap_key") && e.contains("CRC"),
        "{e}"
    );
    assert!(!e.contains("AAECAwQF"), "the error shows the key: {e}");
}

#[test]
fn metrics_section() {
    let base = "subsystems:\n  - nqn: nqn.2024-01.io.nvmf-rs:a\n    allow_any_host: true\n";
    let off: Config = Config::from_yaml_str(base, "configs/x.yaml").unwrap();
    assert_eq!(off.metrics, None);
    let on = Config::from_yaml_str(
        &format!("metrics:\n  listen: 127.0.0.1:0\n{base}"),
        "configs/x.yaml",
    )
    .unwrap();
    assert_eq!(
        on.metrics.and_then(|m| m.socket_addr()),
        Some("127.0.0.1:0".parse().unwrap())
    );
    let e = error_of(&format!("metrics:\n  listen: localhost\n{base}"));
    assert_eq!(
        e.to_string(),
        "configs/x.yaml:2:3: metrics.listen: \"localhost\" is not ADDR:PORT (e.g. 127.0.0.1:9464 or [::1]:9464)"
    );
    let e = error_of(&format!(
        "metrics:\n  listen: 127.0.0.1:1\n  port: 3\n{base}"
    ));
    assert!(e.to_string().contains("configs/x.yaml:3:3"), "{e}");
}

#[test]
fn example_metrics_block_validates_when_uncommented() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/");
    for name in ["etc-nvmf-target.yaml", "tcp.yaml"] {
        let text = std::fs::read_to_string(format!("{dir}{name}")).unwrap();
        assert!(text.contains("# metrics:"), "{name}");
        let on = text
            .replace("# metrics:", "metrics:")
            .replace("#   listen: 127.0.0.1:9464", "  listen: 127.0.0.1:9464");
        let cfg = Config::from_yaml_str(&on, name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            cfg.metrics.and_then(|m| m.socket_addr()),
            Some("127.0.0.1:9464".parse().unwrap()),
            "{name}"
        );
    }
}

#[test]
fn poll_group_cpus_parse_and_unusable_cpus_are_refused() {
    let c = Config::from_yaml_str(&format!("{BASE}transport:\n  cpus: \"0\"\n"), ORIGIN).unwrap();
    assert_eq!(
        c.transport.cpus.as_ref().map(|l| l.cpus().to_vec()),
        Some(vec![0])
    );
    let e = error_of(&format!(
        "{BASE}transport:\n  cpus: \"{}\"\n",
        nvmf_common::cpus::MAX_CPU
    ));
    assert!(
        e.to_string()
            .starts_with("configs/x.yaml:14:3: transport.cpus: CPU 1023 is not available"),
        "{e}"
    );
    let e = error_of(&format!("{BASE}transport:\n  cpus: \"1-0\"\n"));
    assert!(e.to_string().contains("runs backwards"), "{e}");
}

#[test]
fn rdma_srq_is_on_by_default_and_its_depth_is_checked() {
    let c = Config::from_yaml_str(BASE, ORIGIN).unwrap();
    assert!(c.rdma.srq);
    assert_eq!(c.rdma.srq_depth, RDMA_DEFAULT_SRQ_DEPTH);
    let c = Config::from_yaml_str(&format!("rdma:\n  srq: false\n{BASE}"), ORIGIN).unwrap();
    assert!(!c.rdma.srq);
    let c = Config::from_yaml_str(&format!("rdma:\n  srq_depth: 256\n{BASE}"), ORIGIN).unwrap();
    assert_eq!((c.rdma.srq, c.rdma.srq_depth), (true, 256));
    let e = error_of(&format!("rdma:\n  srq_depth: 8\n{BASE}"));
    assert!(e.to_string().contains("rdma.srq_depth"), "{e}");
    let e = error_of(&format!("rdma:\n  use_srq: true\n{BASE}"));
    assert!(e.to_string().contains("use_srq"), "{e}");
}
