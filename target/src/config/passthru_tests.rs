//! Parsing and validation of `passthru:` subsystems (the section's own checks have
//! unit tests in `passthru.rs`; these go through `Config::from_yaml_str`).

use super::*;

const ORIGIN: &str = "configs/p.yaml";

/// One port exporting one passthru subsystem; tests append or change lines.
const PASSTHRU: &str = "\
ports:
  - portid: 1
    trtype: loopback
    subsystems: [nqn.2024-01.io.nvmf-rs:ssd0]
subsystems:
  - nqn: nqn.2024-01.io.nvmf-rs:ssd0
    allow_any_host: true
    passthru:
      device_path: /dev/nvme0
";

fn error_of(text: &str) -> ConfigError {
    match Config::from_yaml_str(text, ORIGIN) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => e,
    }
}

#[test]
fn passthru_subsystem_parses_with_defaults() {
    let c = Config::from_yaml_str(PASSTHRU, ORIGIN).unwrap();
    let s = &c.subsystems[0];
    assert!(s.namespaces.is_empty());
    let p = s.passthru.as_ref().unwrap();
    assert_eq!(p, &PassthruConfig::new("/dev/nvme0"));
    assert!(!p.clear_ids);
    assert!(p.allow_admin.is_empty());
    assert_eq!(p.admin_timeout_ms, None);
    // Printed and read back: the same configuration.
    let again = Config::from_yaml_str(&c.to_yaml().unwrap(), "printed").unwrap();
    assert_eq!(again, c);
}

#[test]
fn passthru_options_parse() {
    let text = format!(
        "{PASSTHRU}      clear_ids: true\n      allow_admin: [firmware, vendor]\n      admin_timeout_ms: 60000\n"
    );
    let c = Config::from_yaml_str(&text, ORIGIN).unwrap();
    let p = c.subsystems[0].passthru.as_ref().unwrap();
    assert!(p.clear_ids);
    assert_eq!(
        p.allow_admin,
        [PassthruAdminClass::Firmware, PassthruAdminClass::Vendor]
    );
    assert_eq!(p.admin_timeout_ms, Some(60_000));
    let again = Config::from_yaml_str(&c.to_yaml().unwrap(), "printed").unwrap();
    assert_eq!(again, c);
}

#[test]
fn passthru_with_namespaces_is_refused_naming_the_subsystem() {
    let text = format!("{PASSTHRU}    namespaces:\n      - nsid: 1\n        device_path: ram:1M\n");
    let e = error_of(&text);
    assert_eq!(e.kind, ConfigErrorKind::Invalid);
    assert_eq!(e.path, "subsystems[0].passthru");
    assert!(
        e.message.contains("nqn.2024-01.io.nvmf-rs:ssd0")
            && e.message.contains("both passthru and namespaces"),
        "{e}"
    );
    // Pointed at the passthru key's line.
    assert_eq!(e.line, Some(8), "{e}");
}

#[test]
fn passthru_unknown_key_and_class_are_parse_errors() {
    let e = error_of(&format!("{PASSTHRU}      clear_id: true\n"));
    assert_eq!(e.kind, ConfigErrorKind::Parse);
    assert_eq!(e.path, "subsystems[0].passthru.clear_id");
    let e = error_of(&format!("{PASSTHRU}      allow_admin: [reformat]\n"));
    assert_eq!(e.kind, ConfigErrorKind::Parse);
    assert!(
        e.path.starts_with("subsystems[0].passthru.allow_admin"),
        "{e}"
    );
    assert!(e.message.contains("ns_management"), "{e}");
}

#[test]
fn passthru_bad_values_name_their_key() {
    let text = PASSTHRU.replace("/dev/nvme0", "/dev/nvme0n1");
    let e = error_of(&text);
    assert_eq!(e.path, "subsystems[0].passthru.device_path");
    assert!(e.message.contains("namespace device"), "{e}");
    let text = PASSTHRU.replace("/dev/nvme0", "nvme0");
    assert_eq!(error_of(&text).path, "subsystems[0].passthru.device_path");
    let e = error_of(&format!("{PASSTHRU}      admin_timeout_ms: 0\n"));
    assert_eq!(e.path, "subsystems[0].passthru.admin_timeout_ms");
    let e = error_of(&format!("{PASSTHRU}      allow_admin: [format, format]\n"));
    assert_eq!(e.path, "subsystems[0].passthru.allow_admin");
    assert!(e.message.contains("listed twice"), "{e}");
}

#[test]
fn one_passthru_subsystem_per_device() {
    let text = format!(
        "{PASSTHRU}  - nqn: nqn.2024-01.io.nvmf-rs:ssd1\n    allow_any_host: true\n    passthru:\n      device_path: /dev/nvme0\n"
    );
    let e = error_of(&text);
    assert_eq!(e.path, "subsystems[1].passthru.device_path");
    assert!(e.message.contains("subsystems[0]"), "{e}");
}

/// A block namespace with `io_path`.
fn block_ns(device_path: &str, extra: &str) -> String {
    format!(
        "\
ports:
  - portid: 1
    trtype: loopback
    subsystems: [nqn.2024-01.io.nvmf-rs:blk]
subsystems:
  - nqn: nqn.2024-01.io.nvmf-rs:blk
    allow_any_host: true
    namespaces:
      - {{ nsid: 1, device_path: \"{device_path}\", io_path: passthru{extra} }}
"
    )
}

#[test]
fn io_path_passthru_parses_and_prints_back() {
    let c = Config::from_yaml_str(&block_ns("/dev/nvme0n1", ""), ORIGIN).unwrap();
    let n = &c.subsystems[0].namespaces[0];
    assert_eq!(n.io_path, IoPath::Passthru);
    let again = Config::from_yaml_str(&c.to_yaml().unwrap(), "printed").unwrap();
    assert_eq!(again, c);
    // The default is the block path, and is not printed.
    let mut d = c.clone();
    d.subsystems[0].namespaces[0].io_path = IoPath::Block;
    assert!(!d.to_yaml().unwrap().contains("io_path"));
}

#[test]
fn io_path_passthru_needs_an_nvme_namespace_block_device() {
    for (path, extra, why) in [
        ("ram:4M", "", "NVMe namespace block device"),
        ("/dev/sda", "", "NVMe namespace block device"),
        ("/dev/nvme0", "", "NVMe namespace block device"),
        ("/dev/nvme0n1p1", "", "NVMe namespace block device"),
        (
            "/dev/nvme0n1",
            ", buffered_io: true",
            "buffered_io must be false",
        ),
        (
            "/dev/nvme0n1",
            ", block_size: 4096",
            "block_size must not be set",
        ),
    ] {
        let e = error_of(&block_ns(path, extra)).to_string();
        assert!(
            e.contains("io_path") && e.contains(why),
            "{path}{extra}: {e}"
        );
    }
}
