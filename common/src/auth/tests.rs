//! The exchange end to end (both state machines), the secret format, the groups.

use std::sync::Arc;

use super::msg::{auth_id, Message};
use super::*;

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:1c4e9a3c-0000-0000-0000-000000000001";
const SUB: &str = "nqn.2024-01.io.nvmf-rs:auth";

fn policy(ctrl: bool, hashes: &[HashId], groups: &[DhGroup]) -> (Arc<AuthPolicy>, HostKeys) {
    let hk = DhchapSecret::generate(Some(HashId::Sha256), 32).unwrap();
    let ck = ctrl.then(|| DhchapSecret::generate(Some(HashId::Sha512), 64).unwrap());
    (
        Arc::new(AuthPolicy {
            host_key: hk.clone(),
            ctrl_key: ck.clone(),
            hashes: hashes.to_vec(),
            groups: groups.to_vec(),
        }),
        HostKeys {
            host_key: hk,
            ctrl_key: ck,
        },
    )
}

/// Runs one transaction; returns the host's result and the controller.
fn run(p: &Arc<AuthPolicy>, keys: HostKeys) -> (Result<(), HostAuthError>, ControllerAuth) {
    let mut c = ControllerAuth::new(HOST, SUB);
    let mut h = HostAuth::new(keys, HOST, SUB, 7);
    let ev = c.on_send(&h.negotiate(), Some(p.clone()));
    assert!(matches!(ev, SendEvent::Negotiated { .. }), "{ev:?}");
    let (challenge, _) = c.on_receive(4096).unwrap();
    let reply = match h.on_challenge(&challenge) {
        Ok(r) => r,
        Err(e) => return (Err(e), c),
    };
    c.on_send(&reply, Some(p.clone()));
    let (s1, _) = c.on_receive(4096).unwrap();
    match h.on_success1(&s1) {
        Ok(Some(s2)) => {
            assert_eq!(c.on_send(&s2, Some(p.clone())), SendEvent::Authenticated);
            (Ok(()), c)
        }
        Ok(None) => (Ok(()), c),
        Err(e) => {
            if e.needs_failure2() {
                c.on_send(&h.failure2(&e), Some(p.clone()));
            }
            (Err(e), c)
        }
    }
}

#[test]
fn every_hash_and_group_uni_and_bidirectional() {
    for hash in HashId::ALL {
        for group in DhGroup::ALL {
            for bidi in [false, true] {
                let (p, k) = policy(bidi, &[hash], &[group]);
                let (r, c) = run(&p, k);
                assert_eq!(r, Ok(()), "{hash} {group} bidi={bidi}");
                assert!(c.is_authenticated() && !c.in_transaction() && !c.must_end());
            }
        }
    }
}

#[test]
fn strongest_common_choice() {
    let (p, k) = policy(false, &HashId::ALL, &[DhGroup::Null, DhGroup::Ffdhe3072]);
    let mut c = ControllerAuth::new(HOST, SUB);
    let h = HostAuth::new(k, HOST, SUB, 1);
    assert_eq!(
        c.on_send(&h.negotiate(), Some(p)),
        SendEvent::Negotiated {
            hash: HashId::Sha512,
            group: DhGroup::Ffdhe3072
        }
    );
}

#[test]
fn wrong_host_key_is_refused() {
    let (p, mut k) = policy(false, &[HashId::Sha256], &[DhGroup::Ffdhe2048]);
    k.host_key = DhchapSecret::generate(Some(HashId::Sha256), 32).unwrap();
    let (r, c) = run(&p, k);
    assert_eq!(
        r,
        Err(HostAuthError::Refused {
            reason: FailureReason::Failed
        })
    );
    assert!(c.must_end() && !c.is_authenticated());
}

#[test]
fn wrong_controller_key_is_caught_by_the_host() {
    let (p, mut k) = policy(true, &[HashId::Sha384], &[DhGroup::Null]);
    k.ctrl_key = Some(DhchapSecret::generate(None, 48).unwrap());
    let (r, c) = run(&p, k);
    assert_eq!(r, Err(HostAuthError::ControllerMismatch));
    assert!(c.must_end() && !c.is_authenticated());
}

#[test]
fn secret_format_round_trips_and_checks_crc() {
    for (t, len) in [
        (None, 32),
        (Some(HashId::Sha256), 32),
        (Some(HashId::Sha384), 48),
        (Some(HashId::Sha512), 64),
    ] {
        let s = DhchapSecret::generate(t, len).unwrap();
        let text = s.to_interchange();
        let back: DhchapSecret = text.parse().unwrap();
        assert!(back.ct_eq(&s));
        assert!(
            !format!("{s:?}").contains(&text[10..20]),
            "Debug leaks the key"
        );
    }
    let good = DhchapSecret::generate(None, 32).unwrap().to_interchange();
    let mut bad = good.to_string().into_bytes();
    bad[12] = if bad[12] == b'A' { b'B' } else { b'A' };
    let bad = String::from_utf8(bad).unwrap();
    assert!(matches!(
        bad.parse::<DhchapSecret>(),
        Err(SecretError::Crc | SecretError::Base64)
    ));
    assert_eq!(
        "DHHC-1:04:AAAA:".parse::<DhchapSecret>().err(),
        Some(SecretError::Transform("04".into()))
    );
    assert_eq!(
        "DHHC-2:00:AAAA:".parse::<DhchapSecret>().err(),
        Some(SecretError::Prefix)
    );
}

/// Printed by nvme-cli 2.3 (libnvme 1.3) for the secret 00 01 .. 1f:
/// `nvme gen-dhchap-key --secret=0001..1f --hmac=0`, and with `--hmac=1 --nqn=<HOST>`,
/// which prints the secret already transformed for that NQN (both pass
/// `nvme check-dhchap-key`). The second line is thus a libnvme vector for the
/// transformation.
#[test]
fn parses_keys_written_by_nvme_cli_and_transforms_as_libnvme() {
    let mut lines = NVME_CLI_KEYS.lines();
    let raw: DhchapSecret = lines.next().unwrap().parse().unwrap();
    let transformed: DhchapSecret = lines.next().unwrap().parse().unwrap();
    let secret: Vec<u8> = (0u8..32).collect();
    assert_eq!(
        (raw.transform(), raw.key_bytes()),
        (None, secret.as_slice())
    );
    assert_eq!(transformed.transform(), Some(HashId::Sha256));
    let ours = DhchapSecret::from_bytes(Some(HashId::Sha256), &secret).unwrap();
    assert_eq!(ours.transformed(HOST).as_slice(), transformed.key_bytes());
    assert_eq!(
        raw.to_interchange().as_str(),
        NVME_CLI_KEYS.lines().next().unwrap()
    );
}

const NVME_CLI_KEYS: &str = include_str!("../../tests/fixtures/dhchap-key-nvme-cli.txt");

#[test]
fn groups_have_their_lengths() {
    for g in DhGroup::ALL.into_iter().skip(1) {
        let kp = DhKeyPair::generate(g).unwrap();
        assert_eq!(kp.public().len(), g.value_len());
        let other = DhKeyPair::generate(g).unwrap();
        assert_eq!(
            kp.shared_secret(other.public()).unwrap().as_slice(),
            other.shared_secret(kp.public()).unwrap().as_slice()
        );
        let mut one = vec![0u8; g.value_len()];
        *one.last_mut().unwrap() = 1;
        assert_eq!(kp.shared_secret(&one).err(), Some(DhError::Range(g)));
        assert!(matches!(
            kp.shared_secret(&one[1..]),
            Err(DhError::Length { .. })
        ));
    }
}

#[test]
fn negotiate_layout_matches_linux() {
    let h = HostAuth::new(policy(false, &[], &[]).1, HOST, SUB, 0x1234);
    let b = h.negotiate();
    assert_eq!(b.len(), 72);
    assert_eq!(&b[..8], &[0, auth_id::NEGOTIATE, 0, 0, 0x34, 0x12, 0, 1]);
    assert_eq!(&b[8..15], &[1, 0, 3, 6, 1, 2, 3]);
    assert_eq!(&b[8 + 4 + 30..8 + 4 + 36], &[0, 1, 2, 3, 4, 5]);
    assert!(matches!(Message::decode(&b), Ok(Message::Negotiate(_))));
}

/// A Reply whose CVALID was cleared in transit (R1 does not cover it): the controller
/// accepts the host, sends Success1 without R2, and the host, which asked for the
/// controller's proof, refuses.
#[test]
fn stripped_controller_authentication_is_refused_by_the_host() {
    let (p, k) = policy(true, &[HashId::Sha256], &[DhGroup::Null]);
    let mut c = ControllerAuth::new(HOST, SUB);
    let mut h = HostAuth::new(k, HOST, SUB, 3);
    c.on_send(&h.negotiate(), Some(p.clone()));
    let (ch, _) = c.on_receive(4096).unwrap();
    let mut reply = h.on_challenge(&ch).unwrap();
    reply[8] = 0; // CVALID
    assert_eq!(
        c.on_send(&reply, Some(p)),
        SendEvent::HostAuthenticated {
            bidirectional: false
        }
    );
    let (s1, _) = c.on_receive(4096).unwrap();
    assert_eq!(
        h.on_success1(&s1),
        Err(HostAuthError::ControllerNotAuthenticated)
    );
}
