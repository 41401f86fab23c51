//! NVMe/TCP, sans-IO: one connection's protocol state ([`Connection`]), built on the
//! PDU framer ([`PduReader`]), the PDU encoder ([`PduWriter`]) and connection
//! initialization ([`negotiate`]), and the send queue both drivers write from
//! ([`SendQueue`]: PDU bytes and large data by reference). Nothing here touches a socket: bytes go in, events
//! and the bytes to send come out, and a deadline says when a silent peer has waited
//! too long. The target's poll group (`target/src/tcp`) and the host's queue
//! (`initiator/src/transport/tcp`) are the two drivers of the same [`Connection`].
//!
//! A connection's life, controller side:
//!
//! 1. [`Connection::controller`] with a [`ControllerConfig`]. Feed it the socket's
//!    bytes with [`Connection::receive`], lending a [`Receiver`] (the driver's event
//!    handling, and its commands' buffers for data PDUs' data).
//! 2. The first PDU must be an ICReq; the reader validates it against the
//!    configuration ([`negotiate::accept_icreq`]) and the connection hands out
//!    [`Event::Established`] with the [`Negotiated`] parameters, the [`PduWriter`] to
//!    encode with, and the ICResp to send.
//! 3. From then on it hands out capsules and data ([`Event::Pdu`]), checking every
//!    header field, the data alignment, the lengths against the configured limits, and
//!    the digests that were negotiated; a PDU whose data fails its digest only fails
//!    the command it names ([`Event::DataDigest`]).
//! 4. A fatal error ([`Event::Failed`], with the termination request to send), the
//!    peer's termination request ([`Event::PeerTerminated`]), or an error the driver
//!    finds itself ([`Connection::terminate`]) ends the connection.
//!
//! The host side is the mirror image ([`Connection::host`] with a [`HostConfig`]
//! queues the ICReq; the ICResp is checked by [`negotiate::accept_icresp`]).
//!
//! What a data or R2T PDU means for its command is checked against that command's
//! transfer state, also defined here for both roles ([`R2tWindows`] on the
//! controller, [`HostTransfer`] on the host; one value in each driver's command slot).
//! The receive loop (`receive.rs`) decides when a data PDU's data goes straight into
//! its command's buffer, for both ends. What goes out for a command's data is decided
//! here too (`transmit.rs`): the R2Ts ([`R2tWindows::send_r2ts`]) and the data PDUs
//! ([`data_pieces`], queued by [`SendQueue::push_data_pdu`]: by reference when large).
//! The drivers keep the sockets, the buffers they lend, their command slots and their
//! timers.
//!
//! Behaviour follows the NVMe/TCP Transport Specification 1.0 as Linux
//! (`drivers/nvme/{host,target}/tcp.c`), SPDK (`lib/nvmf/tcp.c`) and FreeBSD
//! (`sys/dev/nvmf/nvmf_tcp.h`) implement it; see [`PduReader`] for the order of checks.

#![forbid(unsafe_code)]

mod connection;
mod error;
mod framer;
pub mod negotiate;
mod receive;
mod send_queue;
mod transfer;
mod transmit;
mod writer;

#[cfg(test)]
mod connection_tests;
#[cfg(test)]
mod tests;

pub use connection::{Connection, Event, HEADER_KEEP};
pub use error::FramerError;
pub use framer::{DataProgress, Pdu, PduReader};
pub use negotiate::{
    ConfigError, ControllerConfig, HostConfig, IcReqParams, IcRespParams, Negotiated,
};
pub use receive::{Receiver, DIRECT_MIN, SMALL_RX};
pub use send_queue::{SendData, SendQueue, DEFER_MAX_DATA, ZERO_COPY_MIN};
pub use transfer::{HostData, HostTransfer, R2tWindows, TransferError};
pub use transmit::{data_pieces, DataPiece};
pub use writer::{encode_icreq, encode_icresp, encode_term_req, PduWriter};

use crate::wire::tcp::{flags, pdu_type, CMD_HDR_LEN, DATA_HDR_LEN, ICREQ_LEN, ICRESP_LEN};
use crate::wire::tcp::{R2T_LEN, RSP_LEN, TERM_HDR_LEN};

/// Which end of the connection a reader or writer serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The NVM subsystem side: receives host-to-controller PDUs (even types).
    Controller,
    /// The host side: receives controller-to-host PDUs (odd types).
    Host,
}

impl Role {
    /// Whether PDUs of type `t` travel towards this role (PDU direction bit 0).
    pub fn receives(self, t: u8) -> bool {
        match self {
            Role::Controller => t & 1 == 0,
            Role::Host => t & 1 == 1,
        }
    }

    /// The termination request type this role sends.
    pub fn term_type(self) -> u8 {
        match self {
            Role::Controller => pdu_type::C2H_TERM,
            Role::Host => pdu_type::H2C_TERM,
        }
    }
}

/// The CRC32C header digest of a PDU header (`hlen` bytes), as sent little-endian
/// after the header.
pub fn header_digest(header: &[u8]) -> u32 {
    crc32c(header)
}

/// The CRC32C data digest of a PDU's data, as sent little-endian after the data.
pub fn data_digest(data: &[u8]) -> u32 {
    crc32c(data)
}

/// A data digest computed over data that arrives in parts (received straight into a
/// command's buffer, a socket read at a time): the same value as [`data_digest`] over
/// the parts joined.
#[derive(Debug, Clone, Copy)]
pub struct DataDigester(crc_fast::Digest);

impl DataDigester {
    pub fn new() -> Self {
        DataDigester(crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi))
    }

    /// Adds the next part of the data.
    pub fn update(&mut self, part: &[u8]) {
        self.0.update(part);
    }

    /// The digest of every part so far.
    pub fn value(&self) -> u32 {
        // A 32-bit CRC: the u64 holds it in its low half.
        self.0.finalize() as u32
    }
}

impl Default for DataDigester {
    fn default() -> Self {
        Self::new()
    }
}

/// CRC32C (Castagnoli; crc-fast calls it CRC-32/ISCSI). crc-fast folds with
/// PCLMULQDQ/VPCLMULQDQ where the CPU has them: on these machines 58 GB/s on 128 KiB
/// and 45 GB/s on 4 KiB, twice the `crc32` instruction's rate (the `crc32c` crate,
/// 28 and 22 GB/s), and faster on 24-byte headers too. With digests on, both ends
/// checksum every byte they move.
fn crc32c(bytes: &[u8]) -> u32 {
    // A 32-bit CRC: the u64 holds it in its low half.
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

/// The PDU data alignment in bytes for a 0's based dword count (HPDA / CPDA).
pub fn pda_bytes(pda: u8) -> usize {
    (usize::from(pda) + 1) * 4
}

/// The PDU types, for exhaustive matching once a type has been validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    IcReq,
    IcResp,
    H2CTerm,
    C2HTerm,
    Cmd,
    Rsp,
    H2CData,
    C2HData,
    R2T,
}

/// What a PDU type looks like on the wire.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TypeInfo {
    pub kind: Kind,
    /// The exact header length (`hlen`).
    pub hlen: usize,
    /// Whether a negotiated header digest follows the header.
    pub hdgst: bool,
    /// Whether the PDU may carry data (and then a negotiated data digest).
    pub data: bool,
    /// The flags a sender may set.
    pub valid_flags: u8,
}

/// The shape of PDU type `t`, or `None` for an unknown type.
pub(crate) fn type_info(t: u8) -> Option<TypeInfo> {
    let digests = flags::HDGST | flags::DDGST;
    let info = |kind, hlen, hdgst, data, valid_flags| {
        Some(TypeInfo {
            kind,
            hlen,
            hdgst,
            data,
            valid_flags,
        })
    };
    match t {
        pdu_type::ICREQ => info(Kind::IcReq, ICREQ_LEN, false, false, 0),
        pdu_type::ICRESP => info(Kind::IcResp, ICRESP_LEN, false, false, 0),
        pdu_type::H2C_TERM => info(Kind::H2CTerm, TERM_HDR_LEN, false, true, 0),
        pdu_type::C2H_TERM => info(Kind::C2HTerm, TERM_HDR_LEN, false, true, 0),
        pdu_type::CMD => info(Kind::Cmd, CMD_HDR_LEN, true, true, digests),
        pdu_type::RSP => info(Kind::Rsp, RSP_LEN, true, false, flags::HDGST),
        pdu_type::H2C_DATA => info(
            Kind::H2CData,
            DATA_HDR_LEN,
            true,
            true,
            digests | flags::DATA_LAST,
        ),
        pdu_type::C2H_DATA => info(
            Kind::C2HData,
            DATA_HDR_LEN,
            true,
            true,
            digests | flags::DATA_LAST | flags::DATA_SUCCESS,
        ),
        pdu_type::R2T => info(Kind::R2T, R2T_LEN, true, false, flags::HDGST),
        _ => None,
    }
}
