//! The host's end of DH-HMAC-CHAP, one per transaction on a queue: build the
//! Negotiate, answer the Challenge, check Success1 and confirm with Success2. Any
//! error names what failed; the caller sends [`HostAuth::failure2`] for it when the
//! controller is still waiting (every error but [`HostAuthError::Refused`]).

use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::dh::{DhGroup, DhKeyPair};
use super::hash::HashId;
use super::msg::{self, Failure, FailureReason, Message, Negotiate, Reply};
use super::secret::DhchapSecret;
use super::{next_seqnum, random_bytes, response, ResponseInput, Side};

/// The host's secrets (nvme-cli's `--dhchap-secret` and `--dhchap-ctrl-secret`).
#[derive(Debug, Clone)]
pub struct HostKeys {
    pub host_key: DhchapSecret,
    /// Set: the controller must prove it knows this secret (bidirectional).
    pub ctrl_key: Option<DhchapSecret>,
}

/// Why the host's authentication failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostAuthError {
    #[error("the controller refused authentication: {reason} (AUTH_Failure1{hint})", hint = refused_hint(*.reason))]
    Refused { reason: FailureReason },
    #[error("no hash function in common: the controller chose hash id {0}")]
    NoCommonHash(u8),
    #[error("no DH group in common: the controller chose DH group id {0}")]
    NoCommonGroup(u8),
    #[error(
        "the controller's response does not match --dhchap-ctrl-secret (wrong controller key)"
    )]
    ControllerMismatch,
    #[error("the controller did not authenticate itself, but --dhchap-ctrl-secret asks it to")]
    ControllerNotAuthenticated,
    #[error("authentication protocol error: {what} ({reason})")]
    Protocol {
        reason: FailureReason,
        what: &'static str,
    },
}

fn refused_hint(r: FailureReason) -> &'static str {
    match r {
        FailureReason::Failed => ": wrong or unknown --dhchap-secret",
        _ => "",
    }
}

impl HostAuthError {
    /// The reason code to send in AUTH_Failure2.
    pub fn reason(&self) -> FailureReason {
        match self {
            HostAuthError::Refused { reason } | HostAuthError::Protocol { reason, .. } => *reason,
            HostAuthError::NoCommonHash(_) => FailureReason::HashUnusable,
            HostAuthError::NoCommonGroup(_) => FailureReason::DhGroupUnusable,
            HostAuthError::ControllerMismatch | HostAuthError::ControllerNotAuthenticated => {
                FailureReason::Failed
            }
        }
    }

    /// Whether the controller still waits for an AUTH_Failure2.
    pub fn needs_failure2(&self) -> bool {
        !matches!(self, HostAuthError::Refused { .. })
    }
}

/// One host-side transaction.
pub struct HostAuth {
    keys: HostKeys,
    hostnqn: String,
    subnqn: String,
    tid: u16,
    hash: Option<HashId>,
    group: DhGroup,
    c2: Option<Zeroizing<Vec<u8>>>,
    s2: u32,
    session: Option<Zeroizing<Vec<u8>>>,
}

impl HostAuth {
    /// A transaction `tid` of `hostnqn` with the subsystem `subnqn`.
    pub fn new(keys: HostKeys, hostnqn: &str, subnqn: &str, tid: u16) -> HostAuth {
        HostAuth {
            keys,
            hostnqn: hostnqn.to_owned(),
            subnqn: subnqn.to_owned(),
            tid,
            hash: None,
            group: DhGroup::Null,
            c2: None,
            s2: 0,
            session: None,
        }
    }

    /// The hash function and DH group the controller chose (after the Challenge).
    pub fn chosen(&self) -> Option<(HashId, DhGroup)> {
        self.hash.map(|h| (h, self.group))
    }

    /// AUTH_Negotiate offering every hash function and DH group, as the Linux host.
    pub fn negotiate(&self) -> Vec<u8> {
        Message::Negotiate(Negotiate {
            tid: self.tid,
            sc_c: 0,
            hashes: HashId::ALL.iter().map(|h| h.id()).collect(),
            dhgroups: DhGroup::ALL.iter().map(|g| g.id()).collect(),
        })
        .encode()
    }

    /// Checks the Challenge and returns the Reply.
    pub fn on_challenge(&mut self, data: &[u8]) -> Result<Vec<u8>, HostAuthError> {
        let c = match self.expect(data, msg::auth_id::CHALLENGE)? {
            Message::Challenge(c) => c,
            _ => {
                return Err(protocol(
                    FailureReason::IncorrectMessage,
                    "expected a Challenge",
                ))
            }
        };
        let hash = HashId::from_id(c.hash).ok_or(HostAuthError::NoCommonHash(c.hash))?;
        let group = DhGroup::from_id(c.dhgid).ok_or(HostAuthError::NoCommonGroup(c.dhgid))?;
        let (dh_value, session) = match group {
            DhGroup::Null if !c.dh_value.is_empty() => {
                return Err(protocol(
                    FailureReason::IncorrectPayload,
                    "DH value with the null group",
                ))
            }
            DhGroup::Null => (Vec::new(), None),
            g => {
                if c.dh_value.is_empty() {
                    return Err(protocol(FailureReason::DhGroupUnusable, "empty DH value"));
                }
                let kp = DhKeyPair::generate(g)
                    .ok_or(protocol(FailureReason::Failed, "cannot generate a DH key"))?;
                let s = kp.shared_secret(&c.dh_value).map_err(|e| match e {
                    super::DhError::Length { .. } => protocol(
                        FailureReason::IncorrectPayload,
                        "controller DH value of the wrong length",
                    ),
                    _ => protocol(
                        FailureReason::DhGroupUnusable,
                        "controller DH value out of range",
                    ),
                })?;
                (kp.public().to_vec(), Some(s))
            }
        };
        let key = self.keys.host_key.transformed(&self.hostnqn);
        let r1 = response(
            Side::Host,
            &ResponseInput {
                hash,
                key: &key,
                challenge: &c.challenge,
                session: session.as_deref().map(|s| s.as_slice()),
                seqnum: c.seqnum,
                tid: self.tid,
                hostnqn: &self.hostnqn,
                subnqn: &self.subnqn,
            },
        );
        let (c2, s2) = if self.keys.ctrl_key.is_some() {
            (Some(random_bytes(hash.digest_len())), next_seqnum())
        } else {
            (None, 0)
        };
        let reply = Message::Reply(Reply {
            tid: self.tid,
            response: r1.to_vec(),
            challenge: c2.as_ref().map(|c| c.to_vec()),
            seqnum: s2,
            dh_value,
        })
        .encode();
        self.hash = Some(hash);
        self.group = group;
        self.c2 = c2;
        self.s2 = s2;
        self.session = session;
        Ok(reply)
    }

    /// Checks Success1; returns the Success2 to send when the controller authenticated
    /// itself (bidirectional), None when the exchange is complete.
    pub fn on_success1(&mut self, data: &[u8]) -> Result<Option<Vec<u8>>, HostAuthError> {
        let s = match self.expect(data, msg::auth_id::SUCCESS1)? {
            Message::Success1(s) => s,
            _ => {
                return Err(protocol(
                    FailureReason::IncorrectMessage,
                    "expected a Success1",
                ))
            }
        };
        let hash = self.hash.ok_or(protocol(
            FailureReason::IncorrectMessage,
            "Success1 before a Challenge",
        ))?;
        if usize::from(s.hl) != hash.digest_len() {
            return Err(protocol(
                FailureReason::HashUnusable,
                "Success1 HL does not match the hash",
            ));
        }
        let (Some(ck), Some(c2)) = (&self.keys.ctrl_key, &self.c2) else {
            return Ok(None);
        };
        let Some(r2) = s.response else {
            return Err(HostAuthError::ControllerNotAuthenticated);
        };
        let key = ck.transformed(&self.subnqn);
        let expected = response(
            Side::Controller,
            &ResponseInput {
                hash,
                key: &key,
                challenge: c2,
                session: self.session.as_deref().map(|s| s.as_slice()),
                seqnum: self.s2,
                tid: self.tid,
                hostnqn: &self.hostnqn,
                subnqn: &self.subnqn,
            },
        );
        if !bool::from(expected.as_slice().ct_eq(&r2)) {
            return Err(HostAuthError::ControllerMismatch);
        }
        Ok(Some(Message::Success2 { tid: self.tid }.encode()))
    }

    /// AUTH_Failure2 for `err`.
    pub fn failure2(&self, err: &HostAuthError) -> Vec<u8> {
        Message::Failure2(Failure {
            tid: self.tid,
            rescode: msg::RESCODE_FAILED,
            reason: err.reason(),
        })
        .encode()
    }

    /// Decodes a controller message: Failure1 becomes [`HostAuthError::Refused`];
    /// anything else must be the DH-HMAC-CHAP message `id` of this transaction.
    fn expect(&self, data: &[u8], id: u8) -> Result<Message, HostAuthError> {
        let m = Message::decode(data).map_err(|e| protocol(e.reason, e.what))?;
        if let Message::Failure1(f) = m {
            return Err(HostAuthError::Refused { reason: f.reason });
        }
        let got = data.get(1).copied().unwrap_or(0);
        if got != id || data.first() != Some(&msg::AUTH_TYPE_DHCHAP) {
            return Err(protocol(
                FailureReason::IncorrectMessage,
                "unexpected message",
            ));
        }
        if m.tid() != self.tid {
            return Err(protocol(
                FailureReason::IncorrectMessage,
                "wrong transaction id",
            ));
        }
        Ok(m)
    }
}

fn protocol(reason: FailureReason, what: &'static str) -> HostAuthError {
    HostAuthError::Protocol { reason, what }
}

impl std::fmt::Debug for HostAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostAuth")
            .field("tid", &self.tid)
            .field("hash", &self.hash)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}
