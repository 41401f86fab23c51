//! Unit tests of the command line: flag parsing, usage errors, output formatting.

use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser};

use nvmf_common::types::Nsid;
use nvmf_initiator::controller::NamespaceInfo;
use nvmf_initiator::perf::verify::VerifyAlg;
use nvmf_initiator::perf::Rw;
use nvmf_initiator::transport::tcp::TcpOptions;
use nvmf_initiator::transport::Fabric;

use super::args::{parse_byte, DEFAULT_STUCK_WARN_SECS};
use super::io_cmd::{hexdump, write_payload};
use super::query_cmd::format_list;
use super::session::{open, tcp_fabric};
use super::*;

#[test]
fn cli_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn parses_nvme_cli_and_fio_flags() {
    let c = Cli::try_parse_from([
        "nvmf-initiator",
        "perf",
        "-t",
        "loopback",
        "--namespace",
        "ram:64M",
        "-i",
        "2",
        "-Q",
        "64",
        "-k",
        "0",
        "--rw",
        "randrw",
        "--bs",
        "4k-64k",
        "--iodepth",
        "16",
        "--numjobs",
        "2",
        "--runtime",
        "5s",
        "--ramp_time",
        "1",
        "--size",
        "32M",
        "--verify",
        "--output-format",
        "json",
        "-v",
    ])
    .unwrap();
    assert_eq!(c.verbose, 1);
    let Command::Perf(p) = c.command else {
        panic!("not perf");
    };
    assert_eq!(p.conn.transport, TransportKind::Loopback);
    assert_eq!(p.conn.trsvcid, ["4420"]);
    assert_eq!(
        (p.conn.nr_io_queues, p.conn.queue_size),
        (Some(2), Some(64))
    );
    assert_eq!(p.rw, Rw::RandRw);
    assert_eq!((p.bs.min, p.bs.max), (4096, 65536));
    assert_eq!(p.runtime, Some(Duration::from_secs(5)));
    assert_eq!(p.ramp_time, Some(Duration::from_secs(1)));
    assert_eq!(p.size, Some(32 << 20));
    assert_eq!(p.verify, Some(VerifyAlg::Pattern));
    assert_eq!(p.output_format, OutputFormat::Json);
    assert_eq!(p.nsid, 1);

    let c = Cli::try_parse_from([
        "nvmf-initiator",
        "discover",
        "-t",
        "rdma",
        "-a",
        "10.0.0.1",
        "-s",
        "4421",
        "-q",
        "nqn.h",
        "-I",
        "3f6a2c1e-8a4b-4e4e-9b1a-0123456789ab",
    ])
    .unwrap();
    let Command::Discover(d) = c.command else {
        panic!("not discover");
    };
    assert_eq!(d.conn.traddr, ["10.0.0.1"]);
    assert_eq!(d.conn.trsvcid, ["4421"]);

    assert!(
        Cli::try_parse_from(["nvmf-initiator", "list"]).is_err(),
        "-t required"
    );
    assert!(
        Cli::try_parse_from(["nvmf-initiator", "perf", "-t", "loopback", "--bs", "4x"]).is_err()
    );
    assert!(
        Cli::try_parse_from(["nvmf-initiator", "perf", "-t", "loopback", "--runtime", "x"])
            .is_err()
    );
    assert!(Cli::try_parse_from([
        "nvmf-initiator",
        "perf",
        "-t",
        "loopback",
        "--idle-spin",
        "-1"
    ])
    .is_err());
    let c = Cli::try_parse_from([
        "nvmf-initiator",
        "write",
        "-t",
        "loopback",
        "--pattern",
        "0xAB",
        "--lba",
        "3",
    ])
    .unwrap();
    let Command::Write(w) = c.command else {
        panic!("not write");
    };
    assert_eq!(w.pattern, Some(0xAB));
    assert!(Cli::try_parse_from([
        "nvmf-initiator",
        "write",
        "-t",
        "loopback",
        "--pattern",
        "1",
        "--input",
        "f",
    ])
    .is_err());
}

#[test]
fn reconnect_flags_like_nvme_cli() {
    let c = Cli::try_parse_from([
        "nvmf-initiator",
        "perf",
        "-t",
        "tcp",
        "-a",
        "127.0.0.1",
        "--ctrl-loss-tmo",
        "-1",
        "--reconnect-delay",
        "2",
    ])
    .unwrap();
    let Command::Perf(p) = c.command else {
        panic!("not perf");
    };
    assert_eq!((p.conn.ctrl_loss_tmo, p.conn.reconnect_delay), (-1, 2));
    let c = Cli::try_parse_from(["nvmf-initiator", "list", "-t", "tcp", "-a", "::1"]).unwrap();
    let Command::List(l) = c.command else {
        panic!("not list");
    };
    assert_eq!(
        (l.conn.ctrl_loss_tmo, l.conn.reconnect_delay),
        (600, 10),
        "the kernel host's defaults"
    );
}

#[test]
fn tcp_flags_build_a_tcp_fabric() {
    let c = Cli::try_parse_from([
        "nvmf-initiator",
        "discover",
        "-t",
        "tcp",
        "-a",
        "127.0.0.1",
        "-s",
        "8009",
        "--hdr-digest",
        "--data-digest",
    ])
    .unwrap();
    let Command::Discover(d) = c.command else {
        panic!("not discover");
    };
    assert_eq!(d.conn.transport, TransportKind::Tcp);
    let f = tcp_fabric(&d.conn, &test_host()).unwrap();
    assert_eq!(f.addr(), "127.0.0.1:8009".parse().unwrap());
    let o = f.options();
    assert!(o.hdr_digest && o.data_digest);
    assert_eq!((f.name(), f.keyed_sgls()), ("tcp", false));

    // Default port 4420, no digests, IPv6 with or without brackets.
    for a in ["::1", "[::1]"] {
        let c = Cli::try_parse_from(["nvmf-initiator", "list", "-t", "tcp", "-a", a]).unwrap();
        let Command::List(l) = c.command else {
            panic!("not list");
        };
        let f = tcp_fabric(&l.conn, &test_host()).unwrap();
        assert_eq!(f.addr(), "[::1]:4420".parse().unwrap());
        assert_eq!(f.options(), TcpOptions::default());
    }
}

#[test]
fn usage_errors_before_connecting() {
    let conn = |t: TransportKind| ConnArgs {
        transport: t,
        traddr: Vec::new(),
        trsvcid: vec!["4420".into()],
        nqn: None,
        hostnqn: Some("nqn.h".into()),
        hostid: Some("3f6a2c1e-8a4b-4e4e-9b1a-0123456789ab".into()),
        nr_io_queues: None,
        queue_size: None,
        keep_alive_tmo: None,
        hdr_digest: false,
        data_digest: false,
        timeout: 30,
        stuck_warn: DEFAULT_STUCK_WARN_SECS,
        dhchap_secret: None,
        dhchap_ctrl_secret: None,
        tls: false,
        tls_key: None,
        tls_key_file: None,
        no_ktls: false,
        ctrl_loss_tmo: reconnect_args::DEFAULT_CTRL_LOSS_TMO_SECS,
        reconnect_delay: reconnect_args::DEFAULT_RECONNECT_DELAY_SECS,
        fast_io_fail_tmo: -1,
        config: None,
        namespace: Vec::new(),
    };
    assert!(
        matches!(open(&conn(TransportKind::Rdma)), Err(CliError::Usage(m)) if m.contains("-a/--traddr"))
    );
    // 192.0.2.1 (TEST-NET-1) is unreachable over RDMA from anywhere: without an
    // RDMA stack the device lookup fails at once, with one within the timeout.
    let mut c = conn(TransportKind::Rdma);
    c.traddr = vec!["192.0.2.1".into()];
    c.timeout = 1;
    match open(&c) {
        Err(CliError::Failed(e)) => {
            assert!(e.to_string().contains("-t rdma to 192.0.2.1:4420"), "{e}")
        }
        Err(CliError::Usage(m)) => panic!("usage error instead of a device error: {m}"),
        Err(CliError::Reported(m)) => panic!("a summary instead of a device error: {m}"),
        Ok(_) => panic!("no RDMA device reaches 192.0.2.1"),
    }
    assert!(
        matches!(open(&conn(TransportKind::Tcp)), Err(CliError::Usage(m)) if m.contains("-a/--traddr"))
    );
    let mut c = conn(TransportKind::Tcp);
    c.traddr = vec!["127.0.0.1".into()];
    c.trsvcid = vec!["port".into()];
    assert!(matches!(open(&c), Err(CliError::Usage(m)) if m.contains("not a TCP port number")));
    let mut c = conn(TransportKind::Loopback);
    c.hdr_digest = true;
    assert!(
        matches!(open(&c), Err(CliError::Usage(m)) if m.contains("not supported on this transport"))
    );
    // TLS: NVMe/TCP only, needs a key, and the key must parse.
    let mut c = conn(TransportKind::Loopback);
    c.tls = true;
    assert!(matches!(open(&c), Err(CliError::Usage(m)) if m.contains("TLS is for NVMe/TCP")));
    let mut c = conn(TransportKind::Tcp);
    c.traddr = vec!["127.0.0.1".into()];
    c.tls = true;
    assert!(matches!(open(&c), Err(CliError::Usage(m)) if m.contains("--tls needs the key")));
    c.tls_key = Some("NVMeTLSkey-1:01:AAAA:".parse().unwrap());
    assert!(matches!(open(&c), Err(CliError::Usage(m)) if m.contains("--tls-key")));
}

#[test]
fn hexdump_like_hexdump_c() {
    let mut d = vec![0u8; 64];
    d[..5].copy_from_slice(b"hello");
    let s = hexdump(&d, 512);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(
        lines[0],
        "00000200  68 65 6c 6c 6f 00 00 00  00 00 00 00 00 00 00 00  |hello...........|"
    );
    assert_eq!(
        lines[1],
        "00000210  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  |................|"
    );
    assert_eq!(lines[2], "*");
    assert_eq!(lines[3], "00000240");
    assert_eq!(parse_byte("0xff"), Ok(255));
    assert_eq!(parse_byte("17"), Ok(17));
    assert!(parse_byte("256").is_err());
}

#[test]
fn write_payloads() {
    assert_eq!(
        write_payload(None, Some(7), Some(2), 4).unwrap(),
        vec![7u8; 8]
    );
    assert_eq!(write_payload(None, Some(7), None, 4).unwrap(), vec![7u8; 4]);
    let p = std::env::temp_dir().join(format!("nvmf-cli-{}", std::process::id()));
    std::fs::write(&p, b"abcdef").unwrap();
    assert_eq!(
        write_payload(Some(&p), None, None, 4).unwrap(),
        b"abcdef\0\0".to_vec()
    );
    assert!(
        write_payload(Some(&p), None, Some(1), 4).is_err(),
        "input longer than count"
    );
    let _ = std::fs::remove_file(&p);
    assert!(write_payload(None, Some(1), Some(0), 4).is_err());
}

#[test]
fn list_table() {
    let n = NamespaceInfo {
        nsid: Nsid(1),
        nsze: 2048,
        ncap: 2048,
        nuse: 2048,
        block_size: 512,
        metadata_size: 0,
        nguid: [0xAB; 16],
        eui64: [0; 8],
        uuid: None,
    };
    let t = format_list(&[n]);
    assert!(t
        .lines()
        .nth(1)
        .unwrap()
        .starts_with("1            1MiB        512           2048  abab"));
}

#[test]
fn reservation_and_ana_log_flags_like_nvme_cli() {
    let c = Cli::try_parse_from([
        "nvmf-initiator",
        "resv-acquire",
        "-t",
        "tcp",
        "-a",
        "10.0.0.1",
        "-n",
        "nqn.x:y",
        "-c",
        "0xB2",
        "-p",
        "0xA1",
        "-r",
        "1",
        "--racqa",
        "1",
    ])
    .unwrap();
    let Command::ResvAcquire(a) = c.command else {
        panic!("not resv-acquire")
    };
    assert_eq!(
        (a.crkey, a.prkey, a.rtype, a.racqa, a.nsid),
        (0xB2, 0xA1, 1, 1, 1)
    );
    let c = Cli::try_parse_from([
        "nvmf-initiator",
        "resv-register",
        "-t",
        "tcp",
        "-a",
        "10.0.0.1",
        "-n",
        "nqn.x:y",
        "--nrkey",
        "161",
        "--rrega",
        "2",
        "--iekey",
        "-p",
        "3",
    ])
    .unwrap();
    let Command::ResvRegister(r) = c.command else {
        panic!("not resv-register")
    };
    assert_eq!((r.nrkey, r.rrega, r.iekey, r.cptpl), (161, 2, true, 3));
    assert!(Cli::try_parse_from([
        "nvmf-initiator",
        "resv-report",
        "-t",
        "tcp",
        "-e",
        "-o",
        "json"
    ])
    .is_ok());
    assert!(Cli::try_parse_from(["nvmf-initiator", "ana-log", "-t", "tcp", "--groups"]).is_ok());
}

#[test]
fn reservation_report_and_ana_log_print_like_nvme_cli() {
    use nvmf_common::wire::ana::{AnaGroupDesc, AnaState};
    use nvmf_common::wire::resv::Registrant;
    let regs = [Registrant {
        hostid: [0xC1; 16],
        rkey: 0xA1,
        holds: true,
    }];
    let text = super::resv_cmd::format_report(2, 1, false, &regs);
    assert!(
        text.contains("gen       : 2\nrtype     : 1\nregctl    : 1\nptpls     : 0\n"),
        "{text}"
    );
    assert!(
        text.contains("  rcsts      : 1\n") && text.contains("  rkey       : a1\n"),
        "{text}"
    );
    let j = super::resv_cmd::report_json(2, 1, false, &regs);
    assert_eq!(j["regctlext"][0]["rkey"], 161);
    assert_eq!(j["regctlext"][0]["cntlid"], 65535);
    let g = [AnaGroupDesc {
        grpid: 2,
        chgcnt: 5,
        state: AnaState::Inaccessible,
        nsids: vec![3],
    }];
    let text = super::resv_cmd::format_ana(5, &g);
    assert!(
        text.contains(
            "grpid\t:\t2\nnnsids\t:\t1\nchgcnt\t:\t5\nstate\t:\tinaccessible\n\tnsid\t:\t3\n"
        ),
        "{text}"
    );
}

#[test]
fn admin_and_io_commands_like_nvme_cli() {
    let c = Cli::try_parse_from([
        "nvmf-initiator",
        "get-log",
        "-t",
        "tcp",
        "-a",
        "10.0.0.1",
        "-n",
        "nqn.x:y",
        "--log-id",
        "0x0c",
        "-l",
        "4096",
        "--lpo",
        "16",
        "-b",
    ])
    .unwrap();
    let Command::GetLog(g) = c.command else {
        panic!("not get-log")
    };
    assert_eq!(
        (g.log_id, g.log_len, g.lpo, g.raw_binary, g.nsid),
        (0x0C, 4096, 16, true, u32::MAX)
    );
    let c = Cli::try_parse_from([
        "nvmf-initiator",
        "set-feature",
        "-t",
        "tcp",
        "-f",
        "0x82",
        "--nsid",
        "1",
        "--value",
        "0x6",
    ])
    .unwrap();
    let Command::SetFeature(s) = c.command else {
        panic!("not set-feature")
    };
    assert_eq!((s.feature_id, s.nsid, s.value, s.save), (0x82, 1, 6, false));
    let c = Cli::try_parse_from([
        "nvmf-initiator",
        "dsm",
        "-t",
        "tcp",
        "--ad",
        "--slbs",
        "0,100",
        "--blocks",
        "8,16",
    ])
    .unwrap();
    let Command::Dsm(d) = c.command else {
        panic!("not dsm")
    };
    assert_eq!((d.slbs, d.blocks), (vec![0, 100], vec![8, 16]));
    assert!(Cli::try_parse_from([
        "nvmf-initiator",
        "write-zeroes",
        "-t",
        "tcp",
        "--start-block",
        "8",
        "-c",
        "7"
    ])
    .is_ok());
    assert!(Cli::try_parse_from([
        "nvmf-initiator",
        "get-feature",
        "-t",
        "tcp",
        "-f",
        "7",
        "--sel",
        "3"
    ])
    .is_ok());
    assert_eq!(
        super::admin_cmd::format_feature(7, 0, 0x0007_0007),
        "get-feature:0x07 (Number of Queues), Current value:0x00070007\n"
    );
}

#[test]
fn perf_verify_takes_fio_checksum_names() {
    let parse = |args: &[&str]| {
        let mut v = vec!["nvmf-initiator", "perf", "-t", "loopback"];
        v.extend_from_slice(args);
        match Cli::try_parse_from(v).map(|c| c.command) {
            Ok(Command::Perf(p)) => Ok(p.verify),
            Ok(_) => panic!("not perf"),
            Err(e) => Err(e.to_string()),
        }
    };
    assert_eq!(parse(&[]), Ok(None));
    assert_eq!(parse(&["--verify=crc32c"]), Ok(Some(VerifyAlg::Crc32c)));
    assert_eq!(parse(&["--verify", "sha256"]), Ok(Some(VerifyAlg::Sha256)));
    assert_eq!(parse(&["--verify=md5"]), Ok(Some(VerifyAlg::Md5)));
    assert_eq!(
        parse(&["--verify", "--nsid", "2"]),
        Ok(Some(VerifyAlg::Pattern))
    );
    let err = parse(&["--verify=xxhash"]).unwrap_err();
    assert!(err.contains("crc32c"), "{err}");
}

#[test]
fn job_file_is_overridden_by_typed_options_only() {
    use super::perf_cmd::{explicit_settings, perf_options};
    use nvmf_initiator::perf::jobfile::JobSettings;
    use nvmf_initiator::perf::BsSpec;
    let argv = [
        "nvmf-initiator",
        "perf",
        "-t",
        "loopback",
        "--job-file",
        "j.fio",
        "--bs",
        "8k",
        "--runtime",
        "3",
    ];
    let m = Cli::command().try_get_matches_from(argv).unwrap();
    let Command::Perf(p) = Cli::from_arg_matches(&m).unwrap().command else {
        panic!("not perf")
    };
    assert_eq!(p.job_file.as_deref(), Some(std::path::Path::new("j.fio")));
    let typed = explicit_settings(&p, m.subcommand_matches("perf"));
    assert_eq!(
        typed,
        JobSettings {
            bs: Some(BsSpec::fixed(8192)),
            runtime: Some(Duration::from_secs(3)),
            ..JobSettings::default()
        },
        "defaults (rw, iodepth, ...) do not override the file"
    );
    let file = JobSettings {
        rw: Some(Rw::Write),
        bs: Some(BsSpec::fixed(4096)),
        iodepth: Some(4),
        size: Some(1 << 20),
        ..JobSettings::default()
    };
    let o = perf_options(&typed.or(&file), false);
    assert_eq!((o.rw, o.bs, o.iodepth), (Rw::Write, BsSpec::fixed(8192), 4));
    assert_eq!(o.runtime, Some(Duration::from_secs(3)));
    // size alone is one pass; with time_based the default runtime.
    assert_eq!(perf_options(&file, false).runtime, None);
    let tb = JobSettings {
        time_based: Some(true),
        ..file.clone()
    };
    assert_eq!(
        perf_options(&tb, false).runtime,
        nvmf_initiator::perf::PerfOptions::default().runtime
    );
}

#[test]
fn perf_cpus_takes_a_cpu_list_and_refuses_bad_ones() {
    use super::perf_cmd::{explicit_settings, perf_options};
    use nvmf_initiator::perf::jobfile::parse_job_file;
    let parse = |cpus: &str| {
        let argv = ["nvmf-initiator", "perf", "-t", "loopback", "--cpus", cpus];
        Cli::try_parse_from(argv).map_err(|e| e.to_string())
    };
    let Ok(Cli {
        command: Command::Perf(p),
        ..
    }) = parse("0-1,3")
    else {
        panic!("not perf")
    };
    let cpus = p.cpus.clone().map(|c| c.cpus().to_vec());
    assert_eq!(cpus, Some(vec![0, 1, 3]));
    assert_eq!(
        perf_options(&explicit_settings(&p, None), false)
            .cpus
            .map(|c| c.to_string()),
        Some("0-1,3".to_string())
    );
    for (bad, why) in [
        ("9999", "CPU 9999 is beyond"),
        ("a-b", "\"a-b\" is not a CPU number"),
        ("", "empty"),
        ("2-1", "runs backwards"),
    ] {
        let e = parse(bad).map(|_| ()).unwrap_err();
        assert!(e.contains("--cpus") && e.contains(why), "{bad:?}: {e}");
    }
    let Ok(Cli {
        command: Command::Perf(p),
        ..
    }) = Cli::try_parse_from(["nvmf-initiator", "perf", "-t", "loopback"])
    else {
        panic!("not perf")
    };
    assert!(p.cpus.is_none(), "no default: one thread per allowed CPU");
    // A job file's cpus_allowed means --cpus; the command line wins over it.
    let secs = parse_job_file("[j]\ncpus_allowed=0-1\n", "j.fio").unwrap();
    let file = secs.first().map(|s| s.settings.clone()).unwrap_or_default();
    let o = perf_options(&file, false);
    assert_eq!(o.cpus.map(|c| c.to_string()), Some("0-1".to_string()));
    let e = parse_job_file("[j]\ncpus_allowed=x\n", "j.fio")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("j.fio:2:") && e.contains("not a CPU number"),
        "{e}"
    );
}

fn test_host() -> nvmf_common::types::Nqn {
    nvmf_common::types::Nqn::new(
        "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001",
    )
    .unwrap()
}
