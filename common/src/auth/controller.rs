//! The controller's end of DH-HMAC-CHAP, one per queue: Authentication Send payloads
//! in ([`ControllerAuth::on_send`]), Authentication Receive payloads out
//! ([`ControllerAuth::on_receive`]).
//!
//! Steps follow the Linux target (`nvmet_execute_auth_send` / `_receive`): a message
//! that arrives out of order or with a wrong transaction id does not fail its command;
//! it turns the next Authentication Receive into an AUTH_Failure1 naming the reason,
//! after which the queue's controller must end ([`ControllerAuth::must_end`]). An
//! AUTH_Negotiate restarts the exchange at any step (re-authentication); a queue that
//! was authenticated stays so while it runs, and loses it only if it fails.

use std::sync::Arc;

use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::dh::{DhGroup, DhKeyPair};
use super::hash::HashId;
use super::msg::{self, Challenge, Failure, FailureReason, Message, Negotiate, Reply, Success1};
use super::secret::DhchapSecret;
use super::{next_seqnum, random_bytes, response, ResponseInput, Side};

/// What a host must prove, and which algorithms it may use (nvmet's `dhchap_*`).
#[derive(Debug, Clone)]
pub struct AuthPolicy {
    /// The host's secret (`dhchap_key`).
    pub host_key: DhchapSecret,
    /// The controller's secret for bidirectional authentication (`dhchap_ctrl_key`).
    pub ctrl_key: Option<DhchapSecret>,
    /// Hash functions allowed; the strongest one the host offers is chosen.
    pub hashes: Vec<HashId>,
    /// DH groups allowed; the strongest one the host offers is chosen.
    pub groups: Vec<DhGroup>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Idle: waiting for an AUTH_Negotiate.
    Negotiate,
    /// The next Authentication Receive returns the Challenge.
    Challenge,
    /// Waiting for the host's Reply.
    Reply,
    /// The next Authentication Receive returns Success1.
    Success1,
    /// Waiting for the host's Success2.
    Success2,
    /// The next Authentication Receive returns Failure1.
    Failure1(FailureReason),
    /// Over: Failure1 sent or Failure2 received.
    Ended,
}

/// One transaction's state; secrets zeroed when dropped.
struct Txn {
    policy: Arc<AuthPolicy>,
    hash: HashId,
    group: DhGroup,
    c1: Zeroizing<Vec<u8>>,
    s1: u32,
    keypair: Option<DhKeyPair>,
    session: Option<Zeroizing<Vec<u8>>>,
    c2: Option<Zeroizing<Vec<u8>>>,
    s2: u32,
}

/// What an Authentication Send did (for the caller's log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendEvent {
    /// A Negotiate was accepted; a Challenge follows.
    Negotiated { hash: HashId, group: DhGroup },
    /// The host's response verified; Success1 follows.
    HostAuthenticated { bidirectional: bool },
    /// The host confirmed the controller's response (Success2): done.
    Authenticated,
    /// The exchange failed; the next Authentication Receive returns Failure1.
    Failing {
        reason: FailureReason,
        what: &'static str,
    },
    /// The host gave up (Failure2).
    HostFailed { reason: FailureReason },
}

/// What an Authentication Receive returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiveEvent {
    Challenge { hash: HashId, group: DhGroup },
    Success1,
    Failure1 { reason: FailureReason },
}

/// Why an Authentication Receive cannot be served as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReceiveError {
    #[error("allocation length {al} is shorter than the {need}-byte message")]
    TooSmall { al: usize, need: usize },
}

/// The controller's DH-HMAC-CHAP state for one queue.
pub struct ControllerAuth {
    hostnqn: String,
    subnqn: String,
    step: Step,
    tid: u16,
    txn: Option<Txn>,
    authenticated: bool,
}

impl ControllerAuth {
    /// A queue of the controller `subnqn` serves for `hostnqn`, not yet authenticated.
    pub fn new(hostnqn: &str, subnqn: &str) -> ControllerAuth {
        ControllerAuth {
            hostnqn: hostnqn.to_owned(),
            subnqn: subnqn.to_owned(),
            step: Step::Negotiate,
            tid: 0,
            txn: None,
            authenticated: false,
        }
    }

    /// Whether the queue has authenticated (commands other than authentication may run).
    pub fn is_authenticated(&self) -> bool {
        self.authenticated
    }

    /// Whether a transaction is under way (its deadline runs).
    pub fn in_transaction(&self) -> bool {
        !matches!(self.step, Step::Negotiate | Step::Ended)
    }

    /// Whether the exchange failed for good: the controller must end.
    pub fn must_end(&self) -> bool {
        self.step == Step::Ended
    }

    /// Handles an Authentication Send payload. `policy` is the host's current policy,
    /// read when a Negotiate starts a transaction (so a changed key takes effect at the
    /// next authentication).
    pub fn on_send(&mut self, data: &[u8], policy: Option<Arc<AuthPolicy>>) -> SendEvent {
        if self.step == Step::Ended {
            return SendEvent::Failing {
                reason: FailureReason::Failed,
                what: "authentication already failed on this queue",
            };
        }
        let m = match Message::decode(data) {
            Ok(m) => m,
            Err(e) => return self.fail(e.reason, e.what),
        };
        match m {
            Message::Negotiate(n) => self.negotiate(&n, policy),
            Message::Failure2(f) => {
                self.end();
                SendEvent::HostFailed { reason: f.reason }
            }
            Message::Reply(r) if self.step == Step::Reply => {
                if r.tid != self.tid {
                    return self.fail(
                        FailureReason::IncorrectPayload,
                        "Reply with another transaction id",
                    );
                }
                self.reply(&r)
            }
            Message::Success2 { tid } if self.step == Step::Success2 => {
                if tid != self.tid {
                    return self.fail(
                        FailureReason::IncorrectPayload,
                        "Success2 with another transaction id",
                    );
                }
                self.authenticated = true;
                self.finish();
                SendEvent::Authenticated
            }
            Message::Reply(_) | Message::Success2 { .. } => {
                self.fail(FailureReason::IncorrectMessage, "message out of sequence")
            }
            Message::Challenge(_) | Message::Success1(_) | Message::Failure1(_) => self.fail(
                FailureReason::IncorrectMessage,
                "controller message sent by the host",
            ),
        }
    }

    /// Builds the Authentication Receive payload: `al` bytes, the message first.
    pub fn on_receive(&mut self, al: usize) -> Result<(Vec<u8>, ReceiveEvent), ReceiveError> {
        let (bytes, ev) = match self.step {
            Step::Challenge => self.challenge()?,
            Step::Success1 => self.success1(),
            Step::Failure1(reason) => (self.failure1(reason), ReceiveEvent::Failure1 { reason }),
            Step::Negotiate | Step::Reply | Step::Success2 | Step::Ended => {
                let reason = FailureReason::IncorrectMessage;
                (self.failure1(reason), ReceiveEvent::Failure1 { reason })
            }
        };
        if bytes.len() > al {
            return Err(ReceiveError::TooSmall {
                al,
                need: bytes.len(),
            });
        }
        match ev {
            ReceiveEvent::Challenge { .. } => self.step = Step::Reply,
            ReceiveEvent::Success1 => {
                let bidirectional = self.txn.as_ref().is_some_and(|t| t.c2.is_some());
                if bidirectional {
                    self.step = Step::Success2;
                } else {
                    self.finish();
                }
            }
            ReceiveEvent::Failure1 { .. } => self.end(),
        }
        let mut out = bytes;
        out.resize(al, 0);
        Ok((out, ev))
    }

    /// The transaction ran out of time: the controller must end.
    pub fn expire(&mut self) {
        self.end();
    }

    fn fail(&mut self, reason: FailureReason, what: &'static str) -> SendEvent {
        self.step = Step::Failure1(reason);
        self.txn = None;
        SendEvent::Failing { reason, what }
    }

    fn end(&mut self) {
        self.step = Step::Ended;
        self.txn = None;
        self.authenticated = false;
    }

    /// A transaction ended well: back to idle, its secrets dropped.
    fn finish(&mut self) {
        self.step = Step::Negotiate;
        self.txn = None;
    }

    fn negotiate(&mut self, n: &Negotiate, policy: Option<Arc<AuthPolicy>>) -> SendEvent {
        self.tid = n.tid;
        self.txn = None;
        let Some(policy) = policy else {
            return self.fail(
                FailureReason::NotUsable,
                "no DH-HMAC-CHAP key is configured for this host",
            );
        };
        if n.sc_c != 0 {
            // Secure channel concatenation needs TLS on the port; not offered here.
            return self.fail(
                FailureReason::ConcatMismatch,
                "secure channel concatenation requested",
            );
        }
        let strongest = |allowed: &[HashId]| {
            allowed
                .iter()
                .copied()
                .filter(|h| n.hashes.contains(&h.id()))
                .max()
        };
        let Some(hash) = strongest(&policy.hashes) else {
            return self.fail(FailureReason::HashUnusable, "no hash function in common");
        };
        let Some(group) = policy
            .groups
            .iter()
            .copied()
            .filter(|g| n.dhgroups.contains(&g.id()))
            .max()
        else {
            return self.fail(FailureReason::DhGroupUnusable, "no DH group in common");
        };
        self.txn = Some(Txn {
            policy,
            hash,
            group,
            c1: Zeroizing::new(Vec::new()),
            s1: 0,
            keypair: None,
            session: None,
            c2: None,
            s2: 0,
        });
        self.step = Step::Challenge;
        SendEvent::Negotiated { hash, group }
    }

    fn challenge(&mut self) -> Result<(Vec<u8>, ReceiveEvent), ReceiveError> {
        let tid = self.tid;
        let Some(t) = self.txn.as_mut() else {
            let reason = FailureReason::Failed;
            return Ok((self.failure1(reason), ReceiveEvent::Failure1 { reason }));
        };
        if t.c1.is_empty() {
            // First attempt (a retry after TooSmall reuses the same values).
            t.c1 = random_bytes(t.hash.digest_len());
            t.s1 = next_seqnum();
            t.keypair = DhKeyPair::generate(t.group);
        }
        let msg = Message::Challenge(Challenge {
            tid,
            hash: t.hash.id(),
            dhgid: t.group.id(),
            seqnum: t.s1,
            challenge: t.c1.to_vec(),
            dh_value: t
                .keypair
                .as_ref()
                .map(|k| k.public().to_vec())
                .unwrap_or_default(),
        });
        Ok((
            msg.encode(),
            ReceiveEvent::Challenge {
                hash: t.hash,
                group: t.group,
            },
        ))
    }

    fn reply(&mut self, r: &Reply) -> SendEvent {
        let Some(t) = self.txn.as_mut() else {
            return self.fail(FailureReason::Failed, "no transaction");
        };
        if r.response.len() != t.hash.digest_len() {
            return self.fail(
                FailureReason::IncorrectPayload,
                "Reply HL does not match the hash function",
            );
        }
        let session = match (&t.keypair, r.dh_value.is_empty()) {
            (None, true) => None,
            (None, false) => {
                return self.fail(
                    FailureReason::IncorrectPayload,
                    "DH value with the null group",
                )
            }
            (Some(_), true) => {
                return self.fail(FailureReason::IncorrectPayload, "Reply without a DH value")
            }
            (Some(kp), false) => match kp.shared_secret(&r.dh_value) {
                Ok(s) => Some(s),
                Err(super::DhError::Length { .. }) => {
                    return self.fail(
                        FailureReason::IncorrectPayload,
                        "DH value of the wrong length",
                    )
                }
                Err(_) => {
                    return self.fail(FailureReason::DhGroupUnusable, "DH value out of range")
                }
            },
        };
        let key = t.policy.host_key.transformed(&self.hostnqn);
        let expected = response(
            Side::Host,
            &ResponseInput {
                hash: t.hash,
                key: &key,
                challenge: &t.c1,
                session: session.as_deref().map(|s| s.as_slice()),
                seqnum: t.s1,
                tid: self.tid,
                hostnqn: &self.hostnqn,
                subnqn: &self.subnqn,
            },
        );
        if !bool::from(expected.as_slice().ct_eq(&r.response)) {
            return self.fail(
                FailureReason::Failed,
                "host response does not match its key",
            );
        }
        let bidirectional = r.challenge.is_some() && r.seqnum != 0;
        if bidirectional {
            if t.policy.ctrl_key.is_none() {
                return self.fail(
                    FailureReason::Failed,
                    "host asks for controller authentication; no controller key is configured",
                );
            }
            let c2 = r.challenge.as_deref().unwrap_or_default();
            if bool::from(c2.ct_eq(&t.c1)) {
                // A reflected challenge would make our R2 the host's R1.
                return self.fail(
                    FailureReason::Failed,
                    "host challenge equals the controller's",
                );
            }
            t.c2 = Some(Zeroizing::new(c2.to_vec()));
            t.s2 = r.seqnum;
        } else {
            self.authenticated = true;
        }
        t.session = session;
        self.step = Step::Success1;
        SendEvent::HostAuthenticated { bidirectional }
    }

    fn success1(&mut self) -> (Vec<u8>, ReceiveEvent) {
        let Some(t) = self.txn.as_ref() else {
            let reason = FailureReason::Failed;
            return (self.failure1(reason), ReceiveEvent::Failure1 { reason });
        };
        let r2 = match (&t.c2, &t.policy.ctrl_key) {
            (Some(c2), Some(ck)) => {
                let key = ck.transformed(&self.subnqn);
                Some(
                    response(
                        Side::Controller,
                        &ResponseInput {
                            hash: t.hash,
                            key: &key,
                            challenge: c2,
                            session: t.session.as_deref().map(|s| s.as_slice()),
                            seqnum: t.s2,
                            tid: self.tid,
                            hostnqn: &self.hostnqn,
                            subnqn: &self.subnqn,
                        },
                    )
                    .to_vec(),
                )
            }
            _ => None,
        };
        let msg = Message::Success1(Success1 {
            tid: self.tid,
            hl: t.hash.digest_len() as u8,
            response: r2,
        });
        (msg.encode(), ReceiveEvent::Success1)
    }

    fn failure1(&self, reason: FailureReason) -> Vec<u8> {
        Message::Failure1(Failure {
            tid: self.tid,
            rescode: msg::RESCODE_FAILED,
            reason,
        })
        .encode()
    }
}

impl std::fmt::Debug for ControllerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerAuth")
            .field("step", &self.step)
            .field("tid", &self.tid)
            .field("authenticated", &self.authenticated)
            .finish_non_exhaustive()
    }
}
