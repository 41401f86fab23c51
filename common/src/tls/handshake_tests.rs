use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use base64::Engine;

use super::*;
use crate::tls::role::{parse_identity, IDENTITY_MAX};
use crate::tls::Socket;

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001";
const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000002";
const SUB: &str = "nqn.2024-01.io.nvmf-rs:tls";
const LIMIT: Duration = Duration::from_secs(10);

/// An interchange-format key with hash `hh` over `len` bytes of `fill`.
fn key(hh: &str, len: usize, fill: u8) -> ConfiguredPsk {
    let mut raw: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
    let crc = crc32fast::hash(&raw);
    raw.extend_from_slice(&crc.to_le_bytes());
    let b64 = base64::engine::general_purpose::STANDARD.encode(&raw);
    format!("NVMeTLSkey-1:{hh}:{b64}:").parse().unwrap()
}

struct Keys(Vec<(String, ConfiguredPsk)>);

impl PskLookup for Keys {
    fn configured_psk(&self, hostnqn: &str) -> Option<ConfiguredPsk> {
        self.0
            .iter()
            .find(|(h, _)| h == hostnqn)
            .map(|(_, k)| k.clone())
    }
}

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

/// Runs both sides; returns (host result, controller result).
fn handshake(
    host_key: &ConfiguredPsk,
    hostnqn: &str,
    ctrl: Vec<(String, ConfiguredPsk)>,
) -> (
    Result<TlsStream, TlsError>,
    Result<(TlsStream, TlsPeer), TlsError>,
) {
    let (c, s) = pair();
    let lookup: Arc<dyn PskLookup> = Arc::new(Keys(ctrl));
    let server = thread::spawn(move || accept(s, lookup, LIMIT));
    let keys = host_keys(host_key, hostnqn, SUB);
    let host = connect(c, keys, LIMIT);
    let ctrl = server.join().unwrap();
    (host, ctrl)
}

fn exchange(host: TlsStream, ctrl: TlsStream) {
    let mut h = Socket::from(host);
    let mut c = Socket::from(ctrl);
    h.set_nonblocking(false).unwrap();
    c.set_nonblocking(false).unwrap();
    let big: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    let sent = big.clone();
    let t = thread::spawn(move || {
        let parts = [std::io::IoSlice::new(b"hdr!"), std::io::IoSlice::new(&sent)];
        let mut done = 0;
        let total = 4 + sent.len();
        while done < total {
            let mut skip = done;
            let rest: Vec<std::io::IoSlice<'_>> = parts
                .iter()
                .filter_map(|p| {
                    if skip >= p.len() {
                        skip -= p.len();
                        None
                    } else {
                        let s = std::io::IoSlice::new(&p[skip..]);
                        skip = 0;
                        Some(s)
                    }
                })
                .collect();
            done += h.write_vectored(&rest).unwrap();
        }
        h
    });
    let mut got = vec![0u8; 4 + big.len()];
    let mut n = 0;
    while n < got.len() {
        let r = c.read(&mut got[n..]).unwrap();
        assert!(r > 0 && r <= crate::tls::socket::MAX_RECORD_PLAINTEXT);
        n += r;
    }
    assert_eq!(&got[..4], b"hdr!");
    assert_eq!(&got[4..], &big[..]);
    let mut h = t.join().unwrap();
    c.write_all(b"reply").unwrap();
    let mut r = [0u8; 5];
    h.read(&mut r).unwrap();
    assert_eq!(&r, b"reply");
}

#[test]
fn sha256_key_agrees_and_carries_data() {
    let k = key("01", 32, 7);
    let (h, c) = handshake(&k, HOST, vec![(HOST.into(), k.clone())]);
    let h = h.unwrap();
    let (c, peer) = c.unwrap();
    assert_eq!(h.cipher_name(), "TLS_AES_128_GCM_SHA256");
    assert_eq!(c.cipher_name(), "TLS_AES_128_GCM_SHA256");
    assert_eq!(peer.hostnqn, HOST);
    assert_eq!(peer.subnqn, SUB);
    assert_eq!(peer.identity, format!("NVMe0R01 {HOST} {SUB}"));
    exchange(h, c);
}

#[test]
fn sha384_key_uses_aes_256() {
    let k = key("02", 48, 9);
    let (h, c) = handshake(&k, HOST, vec![(HOST.into(), k.clone())]);
    let (c, peer) = c.unwrap();
    let h = h.unwrap();
    assert_eq!(h.cipher_name(), "TLS_AES_256_GCM_SHA384");
    assert_eq!(peer.cipher, PskHash::Sha384);
    exchange(h, c);
}

#[test]
fn untransformed_key_works() {
    let k = key("00", 32, 1);
    let (h, c) = handshake(&k, HOST, vec![(HOST.into(), k.clone())]);
    exchange(h.unwrap(), c.unwrap().0);
}

#[test]
fn wrong_psk_fails_both_sides() {
    let (h, c) = handshake(
        &key("01", 32, 7),
        HOST,
        vec![(HOST.into(), key("01", 32, 8))],
    );
    assert!(h.is_err());
    let e = c.err().unwrap().to_string();
    assert!(e.contains("handshake failed"), "{e}");
}

#[test]
fn unknown_host_is_refused_with_the_reason() {
    let k = key("01", 32, 7);
    let (h, c) = handshake(&k, OTHER_HOST, vec![(HOST.into(), k.clone())]);
    assert!(h.is_err());
    let e = c.err().unwrap().to_string();
    assert!(e.contains("has no TLS key"), "{e}");
}

#[test]
fn hash_mismatch_is_refused() {
    // The host's key says SHA-384; the controller holds the same host's SHA-256 key.
    let (h, c) = handshake(
        &key("02", 48, 7),
        HOST,
        vec![(HOST.into(), key("01", 32, 7))],
    );
    assert!(h.is_err());
    assert!(c.is_err());
}

#[test]
fn tls12_client_is_refused() {
    use openssl::ssl::{SslConnector, SslVerifyMode};
    let (c, s) = pair();
    let lookup: Arc<dyn PskLookup> = Arc::new(Keys(vec![]));
    let server = thread::spawn(move || accept(s, lookup, LIMIT));
    let mut b = SslConnector::builder(SslMethod::tls()).unwrap();
    b.set_max_proto_version(Some(SslVersion::TLS1_2)).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    let r = b.build().connect("target", c);
    assert!(r.is_err());
    let e = server.join().unwrap().err().unwrap().to_string();
    assert!(e.contains("unsupported protocol"), "{e}");
}

#[test]
fn stalled_handshake_times_out() {
    let (mut c, s) = pair();
    // Half a record header, then nothing.
    c.write_all(&[CONTENT_TYPE_HANDSHAKE, 3]).unwrap();
    let lookup: Arc<dyn PskLookup> = Arc::new(Keys(vec![]));
    let limit = Duration::from_millis(300);
    let e = accept(s, lookup, limit).err().unwrap();
    assert!(matches!(e, TlsError::Timeout(_)), "{e}");
}

#[test]
fn first_byte_tells_tls_from_icreq() {
    let (mut c, s) = pair();
    c.write_all(&[0u8, 0, 128, 0]).unwrap();
    assert!(!starts_with_tls(&s, LIMIT).unwrap());
    let (mut c, s) = pair();
    c.write_all(&[CONTENT_TYPE_HANDSHAKE]).unwrap();
    assert!(starts_with_tls(&s, LIMIT).unwrap());
    let (c, s) = pair();
    drop(c);
    assert!(starts_with_tls(&s, LIMIT).is_err());
    let (_c, s) = pair();
    let e = starts_with_tls(&s, Duration::from_millis(100))
        .err()
        .unwrap();
    assert!(matches!(e, TlsError::Timeout(_)));
}

#[test]
fn identities_are_parsed_strictly() {
    assert!(parse_identity(&format!("NVMe0R01 {HOST} {SUB}")).is_ok());
    assert!(parse_identity(&format!("NVMe0G01 {HOST} {SUB}")).is_err());
    assert!(parse_identity("NVMe0R01").is_err());
    assert!(parse_identity(&format!("NVMe0R01 {HOST}")).is_err());
    assert!(parse_identity(&"x".repeat(IDENTITY_MAX + 1)).is_err());
    assert!(parse_identity("NVMe0R0é").is_err());
}

/// Kernel TLS where this kernel has it (both ends' records then go through plain
/// sockets), else user-space records; data crosses either way.
#[test]
fn keys_go_to_the_kernel_where_it_has_tls() {
    for k in [key("01", 32, 3), key("02", 48, 4)] {
        let (h, c) = handshake(&k, HOST, vec![(HOST.into(), k.clone())]);
        let to_socket = |t: TlsStream| match offload(t).unwrap() {
            Records::Kernel(s) => (Socket::Plain(s), true),
            Records::User(t, why) => {
                assert!(why.contains("kernel TLS unavailable"), "{why}");
                (Socket::from(t), false)
            }
        };
        let (mut h, hk) = to_socket(h.unwrap());
        let (mut c, ck) = to_socket(c.unwrap().0);
        assert_eq!(hk, ck, "both ends or neither");
        h.set_nonblocking(false).unwrap();
        c.set_nonblocking(false).unwrap();
        let data: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        let sent = data.clone();
        let t = thread::spawn(move || {
            h.write_all(&sent).unwrap();
            h
        });
        let mut got = vec![0u8; data.len()];
        let mut n = 0;
        while n < got.len() {
            let r = c.read(&mut got[n..]).unwrap();
            assert!(r > 0);
            n += r;
        }
        assert_eq!(got, data);
        let mut h = t.join().unwrap();
        c.write_all(b"back").unwrap();
        let mut b = [0u8; 4];
        let mut n = 0;
        while n < 4 {
            n += h.read(&mut b[n..]).unwrap();
        }
        assert_eq!(&b, b"back");
    }
}
