//! Connection initialization: the ICReq / ICResp exchange and what it settles.
//!
//! The host sends an ICReq with the digests it wants, its PDU data alignment (HPDA)
//! and MAXR2T; the controller answers with an ICResp carrying the digests enabled
//! (those both sides want), its own alignment (CPDA) and MAXH2CDATA. Checks follow
//! SPDK `nvmf_tcp_icreq_handle` (PFV 0, HPDA at most 31) and Linux
//! `nvme_tcp_init_connection` (PFV 0, digests as requested, MAXH2CDATA a multiple of
//! 4 and at least 4096).

use super::FramerError;
use crate::wire::tcp::{digest, offset, IcReq, IcResp, MIN_MAXH2CDATA, NVME_TCP_PFV_1_0, PDA_MAX};
use crate::wire::WireError;

/// The largest MAXH2CDATA, in-capsule data size or C2HData size a configuration may
/// set: the framer buffers a whole PDU, so this bounds memory per connection.
pub const MAX_PDU_DATA: u32 = 16 * 1024 * 1024;

/// A configuration the framer cannot run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("maxh2cdata {0} must be a multiple of 4 between 4096 and 16 MiB")]
    MaxH2CData(u32),
    #[error("PDU data alignment {0} is above 31")]
    Pda(u8),
    #[error("{what} {value} is above the 16 MiB limit")]
    TooLarge { what: &'static str, value: u32 },
}

/// What a controller accepts on its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerConfig {
    /// Enable header digests when the host asks for them.
    pub header_digest: bool,
    /// Enable data digests when the host asks for them.
    pub data_digest: bool,
    /// The alignment H2C PDU data must have (0's based dwords, 0..=31). Linux hosts
    /// only connect with 0.
    pub cpda: u8,
    /// MAXH2CDATA: the most data one H2CData PDU may carry.
    pub maxh2cdata: u32,
    /// The most in-capsule data one CapsuleCmd may carry.
    pub max_icd: u32,
}

impl Default for ControllerConfig {
    /// Digests when asked, no alignment, 128 KiB H2CData PDUs (SPDK's default
    /// `max_io_size`; Linux nvmet offers 4 MiB because it receives data straight into
    /// the command's buffers), 16 KiB in-capsule data (Linux nvmet's default
    /// `inline_data_size`, 4 pages).
    fn default() -> Self {
        ControllerConfig {
            header_digest: true,
            data_digest: true,
            cpda: 0,
            maxh2cdata: 128 * 1024,
            max_icd: 16 * 1024,
        }
    }
}

impl ControllerConfig {
    /// Checks the configuration can be advertised and buffered.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.maxh2cdata.is_multiple_of(4)
            || self.maxh2cdata < MIN_MAXH2CDATA
            || self.maxh2cdata > MAX_PDU_DATA
        {
            return Err(ConfigError::MaxH2CData(self.maxh2cdata));
        }
        if self.cpda > PDA_MAX {
            return Err(ConfigError::Pda(self.cpda));
        }
        if self.max_icd > MAX_PDU_DATA {
            return Err(ConfigError::TooLarge {
                what: "in-capsule data size",
                value: self.max_icd,
            });
        }
        Ok(())
    }
}

/// What a host asks for on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostConfig {
    /// Ask for header digests (`--hdr-digest`).
    pub header_digest: bool,
    /// Ask for data digests (`--data-digest`).
    pub data_digest: bool,
    /// The alignment C2H PDU data must have (0's based dwords, 0..=31).
    pub hpda: u8,
    /// MAXR2T: outstanding R2Ts per command the host handles, 0's based.
    pub maxr2t: u32,
    /// The most data one C2HData PDU may carry (controllers such as Linux nvmet send
    /// a command's whole transfer in one PDU: at least the largest I/O size).
    pub max_c2h_data: u32,
}

impl Default for HostConfig {
    /// No digests, no alignment, one R2T per command (Linux), 1 MiB C2HData PDUs.
    fn default() -> Self {
        HostConfig {
            header_digest: false,
            data_digest: false,
            hpda: 0,
            maxr2t: 0,
            max_c2h_data: 1024 * 1024,
        }
    }
}

impl HostConfig {
    /// Checks the configuration can be sent and buffered.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.hpda > PDA_MAX {
            return Err(ConfigError::Pda(self.hpda));
        }
        if self.max_c2h_data > MAX_PDU_DATA {
            return Err(ConfigError::TooLarge {
                what: "C2HData size",
                value: self.max_c2h_data,
            });
        }
        Ok(())
    }

    fn digest_bits(&self) -> u8 {
        digest_bits(self.header_digest, self.data_digest)
    }
}

fn digest_bits(hdgst: bool, ddgst: bool) -> u8 {
    (if hdgst { digest::HDGST_ENABLE } else { 0 }) | (if ddgst { digest::DDGST_ENABLE } else { 0 })
}

/// The fields of an ICReq.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcReqParams {
    pub pfv: u16,
    pub hpda: u8,
    pub digest: u8,
    pub maxr2t: u32,
}

impl IcReqParams {
    /// Reads the fields of an ICReq header.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let v = IcReq::new_checked(bytes)?;
        Ok(IcReqParams {
            pfv: v.pfv(),
            hpda: v.hpda(),
            digest: v.digest(),
            maxr2t: v.maxr2t(),
        })
    }
}

/// The fields of an ICResp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcRespParams {
    pub pfv: u16,
    pub cpda: u8,
    pub digest: u8,
    /// MAXH2CDATA (Linux `maxdata`).
    pub maxh2cdata: u32,
}

impl IcRespParams {
    /// Reads the fields of an ICResp header.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let v = IcResp::new_checked(bytes)?;
        Ok(IcRespParams {
            pfv: v.pfv(),
            cpda: v.cpda(),
            digest: v.digest(),
            maxh2cdata: v.maxdata(),
        })
    }
}

/// What the ICReq / ICResp exchange settled for a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// Header digests on CapsuleCmd, CapsuleResp, H2CData, C2HData and R2T PDUs.
    pub header_digest: bool,
    /// Data digests on PDUs that carry data.
    pub data_digest: bool,
    /// Alignment of C2H PDU data (0's based dwords).
    pub hpda: u8,
    /// Alignment of H2C PDU data (0's based dwords).
    pub cpda: u8,
    /// The most data one H2CData PDU may carry.
    pub maxh2cdata: u32,
    /// Outstanding R2Ts per command the host handles, 0's based.
    pub maxr2t: u32,
}

impl Negotiated {
    /// The ICReq/ICResp `digest` field for these settings.
    pub fn digest_bits(&self) -> u8 {
        digest_bits(self.header_digest, self.data_digest)
    }
}

/// The ICReq a host with `cfg` sends.
pub fn icreq_params(cfg: &HostConfig) -> IcReqParams {
    IcReqParams {
        pfv: NVME_TCP_PFV_1_0,
        hpda: cfg.hpda,
        digest: cfg.digest_bits(),
        maxr2t: cfg.maxr2t,
    }
}

/// Controller side: checks a host's ICReq and settles the connection parameters.
/// Unknown `digest` bits are reserved and ignored.
pub fn accept_icreq(cfg: &ControllerConfig, req: &IcReqParams) -> Result<Negotiated, FramerError> {
    if req.pfv != NVME_TCP_PFV_1_0 {
        return Err(FramerError::header(
            offset::PFV,
            "unsupported PDU format version",
        ));
    }
    // HPDA 1..=31: SPDK accepts (and aligns C2H data); nvmet refuses anything but 0;
    // we accept on purpose: the alignment is valid and honoured (C2HData PDO).
    if req.hpda > PDA_MAX {
        return Err(FramerError::header(offset::HPDA, "HPDA above 31"));
    }
    // MAXR2T: nvmet and SPDK accept any value (one R2T at a time is always allowed);
    // so do we. Reserved digest bits: both ignore them; so do we.
    Ok(Negotiated {
        header_digest: cfg.header_digest && req.digest & digest::HDGST_ENABLE != 0,
        data_digest: cfg.data_digest && req.digest & digest::DDGST_ENABLE != 0,
        hpda: req.hpda,
        cpda: cfg.cpda,
        maxh2cdata: cfg.maxh2cdata,
        maxr2t: req.maxr2t,
    })
}

/// The ICResp a controller sends for `n`.
pub fn icresp_params(n: &Negotiated) -> IcRespParams {
    IcRespParams {
        pfv: NVME_TCP_PFV_1_0,
        cpda: n.cpda,
        digest: n.digest_bits(),
        maxh2cdata: n.maxh2cdata,
    }
}

/// Host side: checks a controller's ICResp against what the host asked for. Like
/// Linux, the digests enabled must be exactly those requested.
pub fn accept_icresp(cfg: &HostConfig, resp: &IcRespParams) -> Result<Negotiated, FramerError> {
    if resp.pfv != NVME_TCP_PFV_1_0 {
        return Err(FramerError::header(
            offset::PFV,
            "unsupported PDU format version",
        ));
    }
    if resp.cpda > PDA_MAX {
        return Err(FramerError::header(offset::CPDA, "CPDA above 31"));
    }
    let both = digest::HDGST_ENABLE | digest::DDGST_ENABLE;
    if resp.digest & both != cfg.digest_bits() {
        return Err(FramerError::UnsupportedParameter {
            fei: offset::DIGEST,
            reason: "digests enabled differ from those requested",
        });
    }
    if !resp.maxh2cdata.is_multiple_of(4) || resp.maxh2cdata < MIN_MAXH2CDATA {
        return Err(FramerError::header(
            offset::MAXDATA,
            "MAXH2CDATA not a multiple of 4 or below 4096",
        ));
    }
    Ok(Negotiated {
        header_digest: cfg.header_digest,
        data_digest: cfg.data_digest,
        hpda: cfg.hpda,
        cpda: resp.cpda,
        maxh2cdata: resp.maxh2cdata,
        maxr2t: cfg.maxr2t,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tcp::{icreq, icresp, term_fes};

    #[test]
    fn controller_enables_what_both_want() {
        let cfg = ControllerConfig {
            data_digest: false,
            ..ControllerConfig::default()
        };
        let req = IcReqParams::parse(&icreq(0, 2, 3, 7)).unwrap();
        let n = accept_icreq(&cfg, &req).unwrap();
        assert!(n.header_digest && !n.data_digest);
        assert_eq!(
            (n.hpda, n.cpda, n.maxr2t, n.maxh2cdata),
            (2, 0, 7, 128 * 1024)
        );
        let resp = icresp_params(&n);
        assert_eq!(resp.digest, digest::HDGST_ENABLE);
        assert_eq!(resp.maxh2cdata, 131072);
    }

    #[test]
    fn icreq_rejections() {
        let cfg = ControllerConfig::default();
        let bad_pfv = IcReqParams::parse(&icreq(1, 0, 0, 0)).unwrap();
        let e = accept_icreq(&cfg, &bad_pfv).unwrap_err();
        assert_eq!(
            (e.fes(), e.fei()),
            (Some(term_fes::INVALID_HEADER_FIELD), 8)
        );
        let bad_hpda = IcReqParams::parse(&icreq(0, 32, 0, 0)).unwrap();
        let e = accept_icreq(&cfg, &bad_hpda).unwrap_err();
        assert_eq!(
            (e.fes(), e.fei()),
            (Some(term_fes::INVALID_HEADER_FIELD), 10)
        );
        // The largest alignment is fine.
        assert!(accept_icreq(&cfg, &IcReqParams::parse(&icreq(0, 31, 0, 0)).unwrap()).is_ok());
    }

    /// What nvmet and SPDK both accept in an ICReq (docs/peers.md), and HPDA 1..=31,
    /// which SPDK accepts and nvmet refuses.
    #[test]
    fn icreq_acceptances_match_the_peers() {
        let cfg = ControllerConfig::default();
        // Reserved digest bits are ignored; the defined ones still count.
        let reserved = IcReqParams::parse(&icreq(0, 0, 0xFC | digest::DDGST_ENABLE, 0)).unwrap();
        let n = accept_icreq(&cfg, &reserved).unwrap();
        assert!(!n.header_digest && n.data_digest);
        assert_eq!(icresp_params(&n).digest, digest::DDGST_ENABLE);
        // Any MAXR2T.
        for maxr2t in [1, 15, u32::MAX] {
            let r = IcReqParams::parse(&icreq(0, 0, 0, maxr2t)).unwrap();
            assert_eq!(accept_icreq(&cfg, &r).unwrap().maxr2t, maxr2t);
        }
        // Every valid alignment.
        for hpda in 1..=PDA_MAX {
            let r = IcReqParams::parse(&icreq(0, hpda, 0, 0)).unwrap();
            assert_eq!(accept_icreq(&cfg, &r).unwrap().hpda, hpda);
        }
    }

    #[test]
    fn icresp_checks() {
        let cfg = HostConfig {
            header_digest: true,
            ..HostConfig::default()
        };
        let req = icreq_params(&cfg);
        assert_eq!((req.pfv, req.hpda, req.digest, req.maxr2t), (0, 0, 1, 0));
        let ok = IcRespParams::parse(&icresp(0, 1, 1, 8192)).unwrap();
        let n = accept_icresp(&cfg, &ok).unwrap();
        assert_eq!(
            (n.cpda, n.maxh2cdata, n.header_digest, n.data_digest),
            (1, 8192, true, false)
        );

        let cases = [
            (icresp(1, 0, 1, 8192), term_fes::INVALID_HEADER_FIELD, 8),
            (icresp(0, 40, 1, 8192), term_fes::INVALID_HEADER_FIELD, 10),
            (icresp(0, 0, 0, 8192), term_fes::UNSUPPORTED_PARAMETER, 11),
            (icresp(0, 0, 3, 8192), term_fes::UNSUPPORTED_PARAMETER, 11),
            (icresp(0, 0, 1, 4094), term_fes::INVALID_HEADER_FIELD, 12),
            (icresp(0, 0, 1, 2048), term_fes::INVALID_HEADER_FIELD, 12),
        ];
        for (b, fes, fei) in cases {
            let e = accept_icresp(&cfg, &IcRespParams::parse(&b).unwrap()).unwrap_err();
            assert_eq!((e.fes(), e.fei()), (Some(fes), fei), "{e}");
        }
        assert!(IcRespParams::parse(&[0u8; 100]).is_err());
    }

    #[test]
    fn config_validation() {
        assert!(ControllerConfig::default().validate().is_ok());
        assert!(HostConfig::default().validate().is_ok());
        for m in [4094, 4095, 2048, MAX_PDU_DATA + 4] {
            let c = ControllerConfig {
                maxh2cdata: m,
                ..ControllerConfig::default()
            };
            assert_eq!(c.validate(), Err(ConfigError::MaxH2CData(m)));
        }
        let c = ControllerConfig {
            cpda: 32,
            ..ControllerConfig::default()
        };
        assert_eq!(c.validate(), Err(ConfigError::Pda(32)));
        let h = HostConfig {
            max_c2h_data: u32::MAX,
            ..HostConfig::default()
        };
        assert!(h.validate().is_err());
    }
}
