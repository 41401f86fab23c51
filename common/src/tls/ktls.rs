//! Kernel TLS: after the handshake, the application traffic keys go to the kernel
//! (`TCP_ULP` "tls", `TLS_TX`, `TLS_RX`), and the connection's data path is the plain
//! socket again: `read` and `writev` carry records the kernel seals and opens.
//!
//! The keys are derived from the traffic secrets OpenSSL reports through its key-log
//! callback (RFC 8446 7.3: key = HKDF-Expand-Label(secret, "key", "", key length),
//! iv = HKDF-Expand-Label(secret, "iv", "", 12); the kernel takes the iv's first four
//! bytes as the salt). Record sequence numbers start at 0: neither side sends a record
//! after its Finished before the hand-over (no session tickets, no early data), and
//! OpenSSL reads no record ahead of the one it needs. A kernel without the `tls`
//! module refuses `TCP_ULP`; the connection then keeps its records in user space.

#![forbid(unsafe_code)]

use std::net::TcpStream;

use hkdf::Hkdf;
use nix::sys::socket::{setsockopt, sockopt};
use sha2::{Sha256, Sha384};
use zeroize::{Zeroize, Zeroizing};

use super::psk::PskHash;

/// The TLS 1.3 label prefix (RFC 8446 7.1).
const LABEL_PREFIX: &[u8] = b"tls13 ";
/// Bytes of a TLS 1.3 AEAD nonce (the "iv").
const IV_LEN: usize = 12;
/// Of which the kernel's "salt" is the first four, its "iv" the other eight.
const SALT_LEN: usize = 4;
/// The upper-layer protocol that is kernel TLS.
const ULP_TLS: &[u8] = b"tls";

/// Both directions' application traffic secrets of one connection.
#[derive(Default)]
pub struct TrafficSecrets {
    pub client: Zeroizing<Vec<u8>>,
    pub server: Zeroizing<Vec<u8>>,
}

impl TrafficSecrets {
    /// Records one line of OpenSSL's key log (NSS key log format); other lines (the
    /// handshake secrets) are ignored.
    pub fn record(&mut self, line: &str) {
        let mut parts = line.split_ascii_whitespace();
        let (Some(label), Some(_random), Some(secret)) = (parts.next(), parts.next(), parts.next())
        else {
            return;
        };
        let slot = match label {
            "CLIENT_TRAFFIC_SECRET_0" => &mut self.client,
            "SERVER_TRAFFIC_SECRET_0" => &mut self.server,
            _ => return,
        };
        *slot = Zeroizing::new(unhex(secret).unwrap_or_default());
    }

    pub fn complete(&self) -> bool {
        !self.client.is_empty() && !self.server.is_empty()
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok());
    s.as_bytes()
        .chunks(2)
        .map(|p| match p {
            [h, l] => Some(digit(*h)? << 4 | digit(*l)?),
            _ => None,
        })
        .collect()
}

/// HKDF-Expand-Label(secret, label, "", len) with the TLS 1.3 encoding.
fn expand_label(h: PskHash, secret: &[u8], label: &[u8], len: usize) -> Option<Zeroizing<Vec<u8>>> {
    let mut info = Vec::with_capacity(4 + LABEL_PREFIX.len() + label.len());
    info.extend_from_slice(&u16::try_from(len).ok()?.to_be_bytes());
    info.push(u8::try_from(LABEL_PREFIX.len() + label.len()).ok()?);
    info.extend_from_slice(LABEL_PREFIX);
    info.extend_from_slice(label);
    info.push(0);
    let mut out = Zeroizing::new(vec![0u8; len]);
    let ok = match h {
        PskHash::Sha256 => Hkdf::<Sha256>::from_prk(secret)
            .ok()?
            .expand(&info, &mut out)
            .is_ok(),
        PskHash::Sha384 => Hkdf::<Sha384>::from_prk(secret)
            .ok()?
            .expand(&info, &mut out)
            .is_ok(),
    };
    ok.then_some(out)
}

/// The kernel's description of one direction's key.
fn crypto_info(h: PskHash, secret: &[u8]) -> Option<sockopt::TlsCryptoInfo> {
    let iv = expand_label(h, secret, b"iv", IV_LEN)?;
    let (salt, explicit) = iv.split_at(SALT_LEN);
    let info = libc::tls_crypto_info {
        version: libc::TLS_1_3_VERSION,
        cipher_type: match h {
            PskHash::Sha256 => libc::TLS_CIPHER_AES_GCM_128,
            PskHash::Sha384 => libc::TLS_CIPHER_AES_GCM_256,
        },
    };
    Some(match h {
        PskHash::Sha256 => {
            let key = expand_label(h, secret, b"key", libc::TLS_CIPHER_AES_GCM_128_KEY_SIZE)?;
            sockopt::TlsCryptoInfo::Aes128Gcm(libc::tls12_crypto_info_aes_gcm_128 {
                info,
                iv: explicit.try_into().ok()?,
                key: key.as_slice().try_into().ok()?,
                salt: salt.try_into().ok()?,
                rec_seq: [0; libc::TLS_CIPHER_AES_GCM_128_REC_SEQ_SIZE],
            })
        }
        PskHash::Sha384 => {
            let key = expand_label(h, secret, b"key", libc::TLS_CIPHER_AES_GCM_256_KEY_SIZE)?;
            sockopt::TlsCryptoInfo::Aes256Gcm(libc::tls12_crypto_info_aes_gcm_256 {
                info,
                iv: explicit.try_into().ok()?,
                key: key.as_slice().try_into().ok()?,
                salt: salt.try_into().ok()?,
                rec_seq: [0; libc::TLS_CIPHER_AES_GCM_256_REC_SEQ_SIZE],
            })
        }
    })
}

fn wipe(i: &mut sockopt::TlsCryptoInfo) {
    match i {
        sockopt::TlsCryptoInfo::Aes128Gcm(c) => {
            c.key.zeroize();
            c.iv.zeroize();
            c.salt.zeroize();
        }
        sockopt::TlsCryptoInfo::Aes256Gcm(c) => {
            c.key.zeroize();
            c.iv.zeroize();
            c.salt.zeroize();
        }
        sockopt::TlsCryptoInfo::Chacha20Poly1305(c) => {
            c.key.zeroize();
            c.iv.zeroize();
        }
    }
}

/// Why the keys did not go to the kernel.
#[derive(Debug)]
pub enum Offload {
    /// The kernel has no TLS (or refused before anything changed): keep the records
    /// in user space.
    Unavailable(String),
    /// The socket was half set up: the connection cannot go on.
    Broken(String),
}

/// Hands `secrets` (for `cipher`; this end is the server or the client) to the kernel
/// on `sock`.
pub fn install(
    sock: &TcpStream,
    cipher: PskHash,
    secrets: &TrafficSecrets,
    server: bool,
) -> Result<(), Offload> {
    if !secrets.complete() {
        return Err(Offload::Unavailable("no traffic secrets recorded".into()));
    }
    let (tx, rx) = if server {
        (&secrets.server, &secrets.client)
    } else {
        (&secrets.client, &secrets.server)
    };
    let (Some(mut txi), Some(mut rxi)) = (crypto_info(cipher, tx), crypto_info(cipher, rx)) else {
        return Err(Offload::Unavailable(
            "cannot derive the traffic keys".into(),
        ));
    };
    let r = (|| {
        setsockopt(sock, sockopt::TcpUlp::default(), &ULP_TLS)
            .map_err(|e| Offload::Unavailable(format!("kernel TLS unavailable: {e}")))?;
        setsockopt(sock, sockopt::TcpTlsTx, &txi)
            .map_err(|e| Offload::Broken(format!("kernel TLS refused the send key: {e}")))?;
        setsockopt(sock, sockopt::TcpTlsRx, &rxi)
            .map_err(|e| Offload::Broken(format!("kernel TLS refused the receive key: {e}")))
    })();
    wipe(&mut txi);
    wipe(&mut rxi);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8448 3 (Simple 1-RTT Handshake): the server's application traffic secret
    /// and the key and iv derived from it.
    #[test]
    fn traffic_keys_match_rfc8448() {
        let secret =
            unhex("a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643").unwrap();
        let key = expand_label(PskHash::Sha256, &secret, b"key", 16).unwrap();
        let iv = expand_label(PskHash::Sha256, &secret, b"iv", 12).unwrap();
        assert_eq!(
            key.as_slice(),
            unhex("9f02283b6c9c07efc26bb9f2ac92e356").unwrap()
        );
        assert_eq!(iv.as_slice(), unhex("cf782b88dd83549aadf1e984").unwrap());
    }

    #[test]
    fn key_log_lines_are_parsed() {
        let mut s = TrafficSecrets::default();
        s.record("CLIENT_HANDSHAKE_TRAFFIC_SECRET 00 aabb");
        assert!(!s.complete());
        s.record("CLIENT_TRAFFIC_SECRET_0 00 0a0b");
        s.record("SERVER_TRAFFIC_SECRET_0 00 zz");
        assert_eq!(s.client.as_slice(), [0x0a, 0x0b]);
        assert!(!s.complete(), "a malformed secret is not recorded");
        s.record("SERVER_TRAFFIC_SECRET_0 00 0c");
        assert!(s.complete());
    }

    #[test]
    fn without_the_kernel_module_the_records_stay_in_user_space() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let mut s = TrafficSecrets::default();
        s.record(&format!("CLIENT_TRAFFIC_SECRET_0 00 {}", "11".repeat(32)));
        s.record(&format!("SERVER_TRAFFIC_SECRET_0 00 {}", "22".repeat(32)));
        match install(&c, PskHash::Sha256, &s, false) {
            // This kernel has kernel TLS: the keys went in.
            Ok(()) => {}
            Err(Offload::Unavailable(why)) => assert!(why.contains("kernel TLS"), "{why}"),
            Err(Offload::Broken(why)) => panic!("half set up: {why}"),
        }
    }
}
