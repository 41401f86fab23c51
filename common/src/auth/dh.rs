//! Diffie-Hellman for DH-HMAC-CHAP: the RFC 7919 groups ([`DhGroup`]), an ephemeral
//! key pair per transaction ([`DhKeyPair`]) and the shared secret.
//!
//! Exponentiations with the private exponent run in constant time (crypto-bigint's
//! Montgomery ladder over a fixed number of exponent bits). The private exponent has
//! the length RFC 7919 section 5.2 recommends for each group (225 to 400 bits), which
//! keeps an 8192-bit exchange to milliseconds. A peer's public value must have the
//! group's length and lie in 2..=p-2 (this rejects the order-1 and order-2 elements);
//! like the Linux kernel's `dh_is_pubkey_valid` outside FIPS mode, no full subgroup
//! check follows.

use std::sync::OnceLock;

use crypto_bigint::modular::{BoxedMontyForm, BoxedMontyParams};
use crypto_bigint::{BoxedUint, Odd};
use rand::RngCore;
use zeroize::{Zeroize, Zeroizing};

use super::ffdhe;

/// A DH-HMAC-CHAP Diffie-Hellman group identifier (DHgroupID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DhGroup {
    /// No Diffie-Hellman exchange (plain HMAC-CHAP).
    Null = 0x00,
    Ffdhe2048 = 0x01,
    Ffdhe3072 = 0x02,
    Ffdhe4096 = 0x03,
    Ffdhe6144 = 0x04,
    Ffdhe8192 = 0x05,
}

/// The RFC 7919 generator.
const GENERATOR: u64 = 2;

impl DhGroup {
    /// Every group, weakest first.
    pub const ALL: [DhGroup; 6] = [
        DhGroup::Null,
        DhGroup::Ffdhe2048,
        DhGroup::Ffdhe3072,
        DhGroup::Ffdhe4096,
        DhGroup::Ffdhe6144,
        DhGroup::Ffdhe8192,
    ];

    /// The group with wire identifier `id`.
    pub fn from_id(id: u8) -> Option<DhGroup> {
        DhGroup::ALL.into_iter().find(|g| g.id() == id)
    }

    /// The wire identifier.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// nvmet's configfs name (`dhchap_dhgroup`): `null`, `ffdhe2048`, ...
    pub fn name(self) -> &'static str {
        match self {
            DhGroup::Null => "null",
            DhGroup::Ffdhe2048 => "ffdhe2048",
            DhGroup::Ffdhe3072 => "ffdhe3072",
            DhGroup::Ffdhe4096 => "ffdhe4096",
            DhGroup::Ffdhe6144 => "ffdhe6144",
            DhGroup::Ffdhe8192 => "ffdhe8192",
        }
    }

    /// Parses nvmet's name.
    pub fn from_name(s: &str) -> Option<DhGroup> {
        DhGroup::ALL.into_iter().find(|g| g.name() == s)
    }

    /// Length in bytes of a public value and of the shared secret (the prime's), 0 for
    /// the null group.
    pub fn value_len(self) -> usize {
        self.prime_bits() as usize / 8
    }

    fn prime_bits(self) -> u32 {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 2048,
            DhGroup::Ffdhe3072 => 3072,
            DhGroup::Ffdhe4096 => 4096,
            DhGroup::Ffdhe6144 => 6144,
            DhGroup::Ffdhe8192 => 8192,
        }
    }

    /// Private exponent length in bits (RFC 7919 section 5.2).
    fn exponent_bits(self) -> u32 {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 225,
            DhGroup::Ffdhe3072 => 275,
            DhGroup::Ffdhe4096 => 325,
            DhGroup::Ffdhe6144 => 375,
            DhGroup::Ffdhe8192 => 400,
        }
    }

    fn prime_hex(self) -> Option<&'static str> {
        match self {
            DhGroup::Null => None,
            DhGroup::Ffdhe2048 => Some(ffdhe::FFDHE2048),
            DhGroup::Ffdhe3072 => Some(ffdhe::FFDHE3072),
            DhGroup::Ffdhe4096 => Some(ffdhe::FFDHE4096),
            DhGroup::Ffdhe6144 => Some(ffdhe::FFDHE6144),
            DhGroup::Ffdhe8192 => Some(ffdhe::FFDHE8192),
        }
    }

    /// The group's Montgomery parameters, computed once per process.
    fn params(self) -> Option<&'static Params> {
        static CACHE: [OnceLock<Option<Params>>; 6] = [
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
        ];
        CACHE
            .get(usize::from(self.id()))?
            .get_or_init(|| Params::new(self))
            .as_ref()
    }
}

impl std::fmt::Display for DhGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

struct Params {
    monty: BoxedMontyParams,
    /// p - 1: public values must be below it.
    p_minus_1: BoxedUint,
    bits: u32,
}

impl Params {
    fn new(g: DhGroup) -> Option<Params> {
        let bytes = hex_decode(g.prime_hex()?)?;
        let bits = g.prime_bits();
        let p = BoxedUint::from_be_slice(&bytes, bits).ok()?;
        let p_minus_1 = p.wrapping_sub(BoxedUint::one_with_precision(bits));
        let odd = Option::<Odd<BoxedUint>>::from(Odd::new(p))?;
        Some(Params {
            monty: BoxedMontyParams::new_vartime(odd),
            p_minus_1,
            bits,
        })
    }
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    b.chunks(2)
        .map(|c| {
            let hi = (c.first()?.to_ascii_lowercase() as char).to_digit(16)?;
            let lo = (c.get(1)?.to_ascii_lowercase() as char).to_digit(16)?;
            u8::try_from(hi * 16 + lo).ok()
        })
        .collect()
}

/// Why a peer's public value was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DhError {
    #[error("DH value of {got} bytes where {group} needs {want}")]
    Length {
        group: DhGroup,
        got: usize,
        want: usize,
    },
    #[error("DH value outside 2..=p-2 for {0}")]
    Range(DhGroup),
    #[error("no Diffie-Hellman exchange in the null group")]
    NullGroup,
}

/// An ephemeral key pair: a private exponent `x` and the public value `g^x mod p`.
pub struct DhKeyPair {
    group: DhGroup,
    private: BoxedUint,
    public: Vec<u8>,
}

impl Drop for DhKeyPair {
    fn drop(&mut self) {
        self.private.zeroize();
    }
}

impl DhKeyPair {
    /// A fresh key pair in `group`; None for the null group.
    pub fn generate(group: DhGroup) -> Option<DhKeyPair> {
        let params = group.params()?;
        let xbits = group.exponent_bits();
        let nbytes = xbits.div_ceil(8) as usize;
        let mut raw = Zeroizing::new(vec![0u8; nbytes]);
        rand::rngs::OsRng.fill_bytes(&mut raw);
        // Keep exactly `xbits` bits and set the top one, so x >= 2^(xbits-1) >= 2.
        let excess = nbytes as u32 * 8 - xbits;
        if let Some(top) = raw.first_mut() {
            *top &= 0xFF >> excess;
            *top |= 0x80 >> excess;
        }
        let mut private = BoxedUint::from_be_slice(&raw, params.bits).ok()?;
        let g = BoxedMontyForm::new(
            BoxedUint::from_be_slice(&GENERATOR.to_be_bytes(), params.bits).ok()?,
            &params.monty,
        );
        let public = g.pow_bounded_exp(&private, xbits).retrieve();
        let public = public.to_be_bytes().to_vec();
        if public.len() != group.value_len() {
            private.zeroize();
            return None;
        }
        Some(DhKeyPair {
            group,
            private,
            public,
        })
    }

    /// The group.
    pub fn group(&self) -> DhGroup {
        self.group
    }

    /// The public value, big-endian, padded to the group's length.
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret `peer^x mod p`, big-endian, padded to the group's length.
    pub fn shared_secret(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, DhError> {
        let params = self.group.params().ok_or(DhError::NullGroup)?;
        let want = self.group.value_len();
        if peer.len() != want {
            return Err(DhError::Length {
                group: self.group,
                got: peer.len(),
                want,
            });
        }
        let y =
            BoxedUint::from_be_slice(peer, params.bits).map_err(|_| DhError::Range(self.group))?;
        let one = BoxedUint::one_with_precision(params.bits);
        // 1 < y < p - 1 (public values, so a variable-time comparison is fine).
        if y <= one || y >= params.p_minus_1 {
            return Err(DhError::Range(self.group));
        }
        let base = BoxedMontyForm::new(y, &params.monty);
        let mut z = base
            .pow_bounded_exp(&self.private, self.group.exponent_bits())
            .retrieve();
        let out = Zeroizing::new(z.to_be_bytes().to_vec());
        z.zeroize();
        Ok(out)
    }
}

impl std::fmt::Debug for DhKeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DhKeyPair")
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}
