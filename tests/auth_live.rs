//! DH-HMAC-CHAP keys changed while the target runs: `ctl set-host-key` and a re-read
//! configuration (SIGHUP) apply from the next authentication; connected hosts keep
//! working and re-authenticate with the new key; key files readable by others are
//! refused with the reason, and nothing changes.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nvmf_common::auth::{DhchapSecret, HashId, HostKeys};
use nvmf_common::types::Nqn;
use nvmf_initiator::controller::Controller;
use nvmf_initiator::error::Error;
use nvmf_target::config::Config;
use nvmf_target::live::ctl::{handle, Request};
use nvmf_target::live::Op;
use nvmf_tests::ops_support::{free_port, host, options_as, start_live, tmp_path};
use nvmf_tests::write_read_verify;

const SUB: &str = "nqn.2024-01.io.nvmf-rs:auth-live";

fn new_key() -> DhchapSecret {
    DhchapSecret::generate(Some(HashId::Sha384), 48).unwrap()
}

fn write_key(path: &Path, k: &DhchapSecret, mode: u32) {
    std::fs::write(path, k.to_interchange().as_bytes()).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn yaml(key_file: &Path, port: u16) -> String {
    let (h, _) = host(1);
    format!(
        "ports:\n  - portid: 1\n    trtype: tcp\n    traddr: 127.0.0.1\n    trsvcid: \"{port}\"\n    subsystems: [{SUB}]\n\
         subsystems:\n  - nqn: {SUB}\n    allowed_hosts: [\"{h}\"]\n    namespaces:\n      - nsid: 1\n        device_path: \"ram:8M\"\n\
         hosts:\n  - nqn: \"{h}\"\n    dhchap_key_file: {}\n    dhchap_dhgroup: ffdhe2048\n",
        key_file.display()
    )
}

fn connect(t: &nvmf_tests::ops_support::LiveTarget, k: &DhchapSecret) -> Result<Controller, Error> {
    let sub = Nqn::new(SUB).unwrap();
    let mut o = options_as(1, &sub, 1, 5000);
    o.dhchap = Some(HostKeys {
        host_key: k.clone(),
        ctrl_key: None,
    });
    Controller::connect(t.fabric(1), o)
}

#[test]
fn ctl_set_host_key_applies_from_the_next_authentication() {
    let (old, new) = (new_key(), new_key());
    let (f_old, f_new) = (tmp_path("auth-old.key"), tmp_path("auth-new.key"));
    write_key(&f_old, &old, 0o600);
    write_key(&f_new, &new, 0o600);
    let port = free_port();
    let t = start_live(&yaml(&f_old, port), None);
    let mut live_ctrl = connect(&t, &old).unwrap();

    let (h, _) = host(1);
    let r = handle(
        &t.live,
        &Request::Change(Op::SetHostKey {
            host: h.to_string(),
            key_file: Some(f_new.clone()),
            ctrl_key_file: None,
            clear_ctrl_key: false,
        }),
    );
    assert!(r.ok, "{:?}", r.error);
    assert!(
        r.changes
            .iter()
            .any(|c| c.contains("DH-HMAC-CHAP policy changed")),
        "{:?}",
        r.changes
    );

    // The connected controller still serves; new connections need the new key.
    write_read_verify(&mut live_ctrl, 4096, 2, 4);
    assert!(matches!(connect(&t, &old), Err(Error::Auth(_))));
    connect(&t, &new).unwrap().shutdown().unwrap();
    // The connected host re-authenticates: with the old key it fails, with the new one
    // (as after writing sysfs dhchap_secret on Linux) it succeeds.
    live_ctrl.set_dhchap(Some(HostKeys {
        host_key: new.clone(),
        ctrl_key: None,
    }));
    live_ctrl.reauthenticate().unwrap();
    live_ctrl
        .identify_namespace(nvmf_common::types::Nsid(1))
        .unwrap();
    live_ctrl.shutdown().unwrap();
    let _ = std::fs::remove_file(f_old);
    let _ = std::fs::remove_file(f_new);
}

#[test]
fn reload_rereads_key_files_and_refuses_one_readable_by_others() {
    let (a, b) = (new_key(), new_key());
    let f = tmp_path("auth-reload.key");
    let cfg_path = tmp_path("auth-reload.yaml");
    write_key(&f, &a, 0o600);
    let port = free_port();
    std::fs::write(&cfg_path, yaml(&f, port)).unwrap();
    let t = start_live(&yaml(&f, port), Some(cfg_path.clone()));
    connect(&t, &a).unwrap().shutdown().unwrap();

    // Same config text, rotated file: SIGHUP picks the new key up.
    write_key(&f, &b, 0o600);
    let changes = t.live.reload().unwrap();
    assert!(
        changes.iter().any(|c| c.contains("DH-HMAC-CHAP")),
        "{changes:?}"
    );
    assert!(matches!(connect(&t, &a), Err(Error::Auth(_))));
    connect(&t, &b).unwrap().shutdown().unwrap();

    // A key file others may read is refused, by reload and by check-config.
    write_key(&f, &a, 0o644);
    let e = t.live.reload().unwrap_err();
    assert!(e.message.contains("readable by group or others"), "{e}");
    let e = Config::load(&cfg_path).unwrap_err().to_string();
    assert!(
        e.contains("hosts[0].dhchap_key") && e.contains("chmod 600"),
        "{e}"
    );
    assert!(
        !e.contains(&a.to_interchange()[10..30]),
        "the error shows the secret"
    );
    // Nothing changed: b still works.
    connect(&t, &b).unwrap().shutdown().unwrap();
    let _ = std::fs::remove_file(f);
    let _ = std::fs::remove_file(cfg_path);
}
