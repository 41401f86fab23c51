//! Framer errors and the termination request each one calls for.

use crate::wire::tcp::term_fes;

/// A PDU the framer cannot accept.
///
/// Every variant but [`FramerError::DataDigest`] is fatal: the connection ends. When
/// [`FramerError::fes`] is `Some`, the receiver first sends a termination request
/// (C2HTermReq from a controller, H2CTermReq from a host) carrying that Fatal Error
/// Status and [`FramerError::fei`], and the header of the offending PDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FramerError {
    /// A header field holds a value not allowed for it (FES 1); `fei` is the field's
    /// byte offset from the start of the PDU (see `crate::wire::tcp::offset`).
    #[error("invalid PDU header field at byte {fei}: {reason}")]
    InvalidHeaderField { fei: u32, reason: &'static str },
    /// A PDU arrived that is not allowed at this point of the connection (FES 2):
    /// anything before the ICReq/ICResp exchange, or a second ICReq/ICResp.
    #[error("PDU sequence error: {reason}")]
    PduSequence { reason: &'static str },
    /// The header digest does not match the header (FES 3); FEI is the received digest.
    #[error("header digest mismatch: received {received:#010x}, computed {computed:#010x}")]
    HeaderDigest { received: u32, computed: u32 },
    /// A PDU carries more data than this side accepts (FES 5: in-capsule data above
    /// the configured in-capsule size, H2CData above MAXH2CDATA, C2HData above the
    /// host's limit).
    #[error("data transfer limit exceeded: {len} bytes of PDU data, limit {limit}")]
    DataLimitExceeded { len: u32, limit: u32 },
    /// A header field holds a valid but unsupported value (FES 6); `fei` is the
    /// field's byte offset.
    #[error("unsupported parameter at byte {fei}: {reason}")]
    UnsupportedParameter { fei: u32, reason: &'static str },
    /// A termination request with an invalid header or length: the connection is
    /// closed without sending anything back (NVMe/TCP 1.0, 7.4.7; FreeBSD, Linux).
    #[error("malformed termination request: {reason}")]
    MalformedTermReq { reason: &'static str },
    /// The data digest of a CapsuleCmd, H2CData or C2HData PDU does not match its
    /// data. Not fatal: the PDU boundaries are intact and the reader goes on. The
    /// command `cid` fails (the controller completes it with Transient Transport
    /// Error like SPDK; the Linux host with a data transfer error) and its data must
    /// not be used. Linux nvmet drops the connection instead; a caller may too.
    #[error("data digest mismatch in {} for command {cid}: received {received:#010x}, computed {computed:#010x}", crate::wire::tcp::pdu_type_name(*.pdu_type))]
    DataDigest {
        pdu_type: u8,
        cid: u16,
        received: u32,
        computed: u32,
    },
}

impl FramerError {
    /// The Fatal Error Status of the termination request to send, or `None` when
    /// none is sent (a data digest error, a malformed termination request).
    pub fn fes(&self) -> Option<u16> {
        match self {
            FramerError::InvalidHeaderField { .. } => Some(term_fes::INVALID_HEADER_FIELD),
            FramerError::PduSequence { .. } => Some(term_fes::PDU_SEQUENCE_ERROR),
            FramerError::HeaderDigest { .. } => Some(term_fes::HEADER_DIGEST_ERROR),
            FramerError::DataLimitExceeded { .. } => Some(term_fes::DATA_LIMIT_EXCEEDED),
            FramerError::UnsupportedParameter { .. } => Some(term_fes::UNSUPPORTED_PARAMETER),
            FramerError::MalformedTermReq { .. } | FramerError::DataDigest { .. } => None,
        }
    }

    /// The Fatal Error Information: the offending field's byte offset for FES 1 and
    /// 6, the received header digest for FES 3, otherwise 0 (reserved).
    pub fn fei(&self) -> u32 {
        match *self {
            FramerError::InvalidHeaderField { fei, .. }
            | FramerError::UnsupportedParameter { fei, .. } => fei,
            FramerError::HeaderDigest { received, .. } => received,
            _ => 0,
        }
    }

    /// Whether the connection must end.
    pub fn is_fatal(&self) -> bool {
        !matches!(self, FramerError::DataDigest { .. })
    }

    pub(crate) fn header(fei: u32, reason: &'static str) -> Self {
        FramerError::InvalidHeaderField { fei, reason }
    }
}
